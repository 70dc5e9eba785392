"""Stream signalling (csrc/wait_value.cuh), the reference framework's (SGLang's) cuda_wait_value: one stream waits for a value that
another stream or the host writes.

- `stream_wait_value(flag, value)`: the current stream waits until flag[0] == value (flag: int32, on the
  GPU or pinned). A torch custom op.
- `Event`: `record(value)` (the current stream writes value once its earlier work is done), `wait(value,
  timeout_ms=None)` (the current stream's later work waits until the flag equals value) and `set(value)`
  (the host writes it now, launching nothing). Waiting occupies no SM where the driver's stream memory
  operations work (a one-thread spin kernel otherwise). After `timeout_ms` the waiting stream goes on and
  the Event's next call raises TimeoutError naming the value. Event methods are plain Python calls
  (torch.compile breaks its graph around them); inside compiled code use stream_wait_value."""

from __future__ import annotations

from .._torch import ModuleExports, compiling, torch
from ..jit import JitSpec
from ._declare import Family, TorchOp, wrapper

_EXPORTS = {
    "stream_wait_value": "Tensor flag, int value",  # only read: a written flag would be copied by functionalization
    "event_create": "device_flag",
    "event_record": "handle, value, stream, spin",
    "event_wait": "handle, value, timeout_ms, stream, spin",
    "event_set": "handle, value",
    "event_value": "handle",
    "stream_mem_ops_available": "",
}


def spec() -> JitSpec:
    """The module of the signalling ops."""
    return JitSpec("wait_value", cuda_files=["wait_value.cuh"], host_without_nvcc=True, compile_seconds=3.2,  # H100 host, 16 at once
                   cuda_wrappers=[wrapper(op, f"jitkern_wait_value::{op}", params) for op, params in _EXPORTS.items()])


_function = ModuleExports(spec, _EXPORTS, "wait_value")
FAMILY = Family(_function)


@FAMILY.op("stream_wait_value", torch=(TorchOp("stream_wait_value", export="stream_wait_value"),))
def stream_wait_value(flag: torch.Tensor, value: int) -> None:
    """The current stream waits until flag[0] == value (int32 flag on the GPU or in pinned host memory)."""
    if compiling():
        return torch.ops.jitkern.stream_wait_value(flag, value)
    _function("stream_wait_value")(flag, value)


def stream_mem_ops_available() -> bool:
    """Whether waits use the driver's stream memory operations (no SM) rather than the spin kernel."""
    return bool(_function("stream_mem_ops_available")())


@FAMILY.op("event_create", "event_record", "event_wait", "event_set", "event_value")
class Event:
    """A 32-bit flag that streams and the host write and streams wait on.

    The flag lives in pinned host memory (the host sets it with a store and reads it for free), or with
    device_flag=True in the current GPU's memory: for Events signalled from stream to stream, where a
    record reaches the waiting stream about three times sooner; set() and `value` are then small
    synchronous copies on a private stream. spin_kernel=True waits with the one-thread kernel even where
    the driver's operations work (for devices or debuggers where they misbehave, and to test that path)."""

    def __init__(self, *, spin_kernel: bool = False, device_flag: bool = False) -> None:
        self._spin = bool(spin_kernel)
        self._handle = _function("event_create")(bool(device_flag))

    def record(self, value: int = 1) -> None:
        """The current stream writes `value` into the flag once the work queued before it is done."""
        _function("event_record")(self._handle, value, torch.cuda.current_stream().cuda_stream, self._spin)

    def wait(self, value: int = 1, *, timeout_ms: int | None = None) -> None:
        """Work queued on the current stream after this waits until the flag equals `value`; with
        `timeout_ms`, the stream goes on after that long and the Event's next call raises TimeoutError (a driver
        wait is released by writing `value` into the flag: docs/ops.md, stream signalling)."""
        if timeout_ms is not None and (not isinstance(timeout_ms, int) or isinstance(timeout_ms, bool) or timeout_ms <= 0):
            raise ValueError(f"Event.wait(): timeout_ms must be a positive int or None, got {timeout_ms!r}")
        _function("event_wait")(self._handle, value, timeout_ms or 0, torch.cuda.current_stream().cuda_stream, self._spin)

    def set(self, value: int = 1) -> None:
        """The host writes `value` into the flag now, releasing streams that wait for it."""
        _function("event_set")(self._handle, value)

    @property
    def value(self) -> int:
        """The flag as the host reads it now."""
        return int(_function("event_value")(self._handle))
