"""Kernels shipped with jitkern (need torch). Each op is also a torch custom op in the `jitkern`
namespace (torch.ops.jitkern.*), which is what torch.compile traces."""

from . import add_constant as _add_constant_family
from . import norm as _norm_family
from .add_constant import add_constant
from .norm import fused_add_rmsnorm, fused_inplace_qknorm, fused_inplace_qknorm_across_heads, rmsnorm


def warmup(*, dtypes=(), constants=()) -> None:
    """Builds (in parallel) and loads the modules these ops need before a CUDA graph capture or serving:
    the norm family for each of `dtypes` (torch dtypes), add_constant for each of `constants`."""
    _norm_family.warmup(tuple(dtypes))
    _add_constant_family.warmup(tuple(constants))


__all__ = ["add_constant", "fused_add_rmsnorm", "fused_inplace_qknorm", "fused_inplace_qknorm_across_heads", "rmsnorm", "warmup"]
