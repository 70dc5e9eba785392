"""Kernels shipped with jitkern (need torch)."""

from .add_constant import add_constant
from .norm import fused_add_rmsnorm, fused_inplace_qknorm, fused_inplace_qknorm_across_heads, rmsnorm

__all__ = ["add_constant", "fused_add_rmsnorm", "fused_inplace_qknorm", "fused_inplace_qknorm_across_heads", "rmsnorm"]
