"""Kernels shipped with jitkern (need torch)."""

from .add_constant import add_constant

__all__ = ["add_constant"]
