"""The shapes models pass ([..., hidden]) as the 2-D rows (3-D rows of heads for per-head ops) the C++
entry points take."""

from __future__ import annotations

import math

from .._torch import torch


def as_rows(x, public: str, name: str, *, writes: bool, trailing: int = 1):
    """x with its leading dimensions flattened, keeping the last `trailing` ones: a view when x is
    written (so that the writes land in x), else a view or, where no view can express it, a copy.
    Tensors that already have trailing + 1 dimensions, and non-tensors (C++ names them), pass as they are."""
    if not isinstance(x, torch.Tensor) or x.dim() == trailing + 1:
        return x
    if x.dim() < trailing:
        raise ValueError(f"{public}(): {name} must have at least {trailing} dimension{'s' if trailing > 1 else ''}, got shape {tuple(x.shape)}")
    lead = x.dim() - trailing  # counted, not -1: a -1 cannot be inferred beside a 0 (an empty tensor)
    shape = (math.prod(x.shape[:lead]), *x.shape[lead:]) if lead > 0 else (1, *x.shape)
    if not writes:
        return x.reshape(shape)
    try:
        return x.view(shape)
    except RuntimeError:
        pass  # raised below, outside the handler, so that the error carries no unrelated context
    raise ValueError(f"{public}(): {name} of shape {tuple(x.shape)} and strides {x.stride()} cannot be seen as rows of its last "
                     f"dimension{'s' if trailing > 1 else ''} without a copy; pass a contiguous tensor")


def empty_rows_like(x):
    """An uninitialised output of x's shape that as_rows can see as rows: as torch.empty_like (the cheaper call)
    where x is contiguous, else contiguous (empty_like keeps a dense permuted layout, e.g. transposed heads)."""
    return torch.empty_like(x) if x.is_contiguous() else torch.empty_like(x, memory_format=torch.contiguous_format)
