"""What the op modules share for PyTorch: whether Dynamo is tracing (then an op goes through its torch
custom op, so the graph keeps it) and the guard against loading a module inside a CUDA graph capture."""

from __future__ import annotations

try:
    import torch
except ImportError:  # the specs import without torch; the ops need it
    torch = None


# True while torch.compile traces (Dynamo folds the call to a constant). Bound here, not wrapped: each
# Python call level costs the eager path ~0.05 us.
compiling = torch.compiler.is_compiling if torch is not None else None


def check_not_capturing(what: str, warmup: str) -> None:
    """Raises if a CUDA graph is being captured: loading a module (or compiling it) inside a capture
    would break it. Called only where an op's function is not loaded yet."""
    if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
        raise RuntimeError(
            f"jitkern: {what} is not loaded yet and a CUDA graph is being captured on the current stream; "
            f"loading (and possibly compiling) it now would break the capture. Call the op once before the "
            f"capture, or warm it up: {warmup}")
