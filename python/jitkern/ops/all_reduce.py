"""Tensor-parallel all-reduce (sum) for the ranks of one host over CUDA IPC buffers (csrc/all_reduce.cuh),
and the same fused with the residual add and RMSNorm that follow it in a decoder layer.

`AllReduce(group)` is made collectively from an initialised torch.distributed process group: each rank
allocates a buffer, the ranks swap its CUDA IPC handle through the group and map each other's. Then
`all_reduce(x)` sums fp16/bf16/fp32 tensors up to `max_bytes` with jitkern's kernels (push up to the
smaller of `push_max_bytes` (512 KiB) and `one_shot_max_bytes`, one-shot up to `one_shot_max_bytes`,
two-shot above), and hands everything else (other dtypes, larger messages, GPUs that cannot map each
other's memory, a single rank) to NCCL through torch.distributed.all_reduce. The kernels copy the input
into the buffer themselves, so any tensor can be reduced, inside CUDA graphs too, and nothing
synchronises with the host. Every rank must make the same calls with the same sizes.

A kernel waits at most `timeout_ms` for a peer; past that it gives up, and the next call (or `check()`)
raises TimeoutError on that rank. Both ops are torch custom ops (torch.ops.jitkern.all_reduce,
all_reduce_out, all_reduce_add_rmsnorm), which is what torch.compile traces."""

from __future__ import annotations

import socket

from .._torch import ModuleExports, compiling, require_torch, torch
from ..jit import JitSpec, cpp_type, positional
from ._declare import Family, TorchOp, wrapper
from ._dtype_family import FLOAT_DTYPES, package_spec
from ._shapes import as_rows

_EXPORTS = {
    "create": "device, rank, world, capacity, one_shot_max, timeout_ms",
    "ipc_handle": "comm, handle",
    "open_peers": "comm, handles",
    "close_peers": "comm",
    "destroy": "comm",
    "set_one_shot_max": "comm, bytes",
    "set_push_max": "comm, bytes",
    "push_max": "comm",
    "check": "comm",
}
_KERNEL_EXPORTS = {"all_reduce": "comm, x, out", "all_reduce_add_rmsnorm": "comm, x, residual, weight, eps"}


def spec() -> JitSpec:
    """The module of the communicator (no kernels; every dtype's kernel module takes its handle)."""
    return package_spec("all_reduce", cuda_file="all_reduce.cuh",
                        wrappers=[wrapper(op, f"jitkern_all_reduce::{op}", params) for op, params in _EXPORTS.items()],
                        compile_seconds=2.2)  # measured: 1.1 s, H200 host on 16 CPUs


def kernels_spec(dtype) -> JitSpec:
    """The module of one element type's kernels (a torch dtype or its name among FLOAT_DTYPES): one per type, so
    that their compiles run side by side."""
    t = cpp_type(dtype)
    return package_spec("all_reduce_kernels", t, cuda_file="all_reduce.cuh",
                        wrappers=[wrapper(op, f"jitkern_all_reduce::Reduce<{t}>::{op}", params) for op, params in _KERNEL_EXPORTS.items()],
                        compile_seconds=3.0)  # measured: 2.8-3.8 s, H200 host on 16 CPUs, 16 builds at once


_function = ModuleExports(spec, _EXPORTS, "all_reduce")
_KERNELS: dict = {}  # torch dtype -> (all_reduce, all_reduce_add_rmsnorm) of its module

MAX_RANKS = 8
DEFAULT_MAX_BYTES = 8 << 20
DEFAULT_TIMEOUT_MS = 600_000  # torch.distributed's default for NCCL: a peer still compiling is not taken for a dead one


class _Modules:
    """The family's modules: the communicator's and every dtype's kernels, all loaded when an AllReduce is made."""
    params = {**_EXPORTS, **_KERNEL_EXPORTS}

    @staticmethod
    def specs(exports=None, dtypes=None, constants=()) -> list[JitSpec]:
        return [spec(), *(kernels_spec(d) for d in FLOAT_DTYPES)]

    @staticmethod
    def warmup(exports=None, dtypes=(), constants=()) -> None:
        """Loads (building where needed, side by side) the communicator's module and every dtype's kernels."""
        from ..jit import warmup as build_all

        _, *kernels = build_all(*_Modules.specs())
        _function.warmup()
        for d, module in zip(FLOAT_DTYPES, kernels):
            _KERNELS.setdefault(getattr(torch, d), (positional(module, "all_reduce"), positional(module, "all_reduce_add_rmsnorm")))


FAMILY = Family(_Modules)


def default_one_shot_max_bytes(world: int) -> int:
    """Where the two-shot kernel takes over: one-shot reads every rank's whole message on every rank, so
    its traffic grows with the ranks (measured on H100/H200 NVLink hosts at 2 and 4 ranks; the limit for
    5-8 ranks is not measured)."""
    return 8 << 20 if world <= 2 else 512 << 10 if world <= 4 else 128 << 10


_COMMS: dict = {}  # the C++ handle -> its open AllReduce, for the torch custom ops


def _positive_int(value, name: str, *, zero: bool = False) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"AllReduce: {name} must be an int, got {type(value).__name__}")
    if value < 0 or (value == 0 and not zero):
        raise ValueError(f"AllReduce: {name} must be {'non-negative' if zero else 'positive'}, got {value}")
    return value


def _comm(handle: int) -> "AllReduce":
    comm = _COMMS.get(handle)
    if comm is None:
        raise ValueError(f"no open jitkern AllReduce has the id {handle}")
    return comm


def _all_reduce_out(x, out, comm):
    _comm(comm).all_reduce(x, out)


# The torch custom ops (what torch.compile traces) take the communicator as its id.
@FAMILY.op(*_Modules.params, torch=(
    TorchOp("all_reduce", "(Tensor x, int comm) -> Tensor", lambda x, comm: _comm(comm).all_reduce(x), lambda x, comm: torch.empty_like(x)),
    TorchOp("all_reduce_out", "(Tensor x, Tensor(a!) out, int comm) -> ()", _all_reduce_out),
    TorchOp("all_reduce_add_rmsnorm", "(Tensor(a!) x, Tensor(b!) residual, Tensor weight, float eps, int comm) -> ()",
            lambda x, residual, weight, eps, comm: _comm(comm).all_reduce_add_rmsnorm(x, residual, weight, eps))))
class AllReduce:
    """A custom all-reduce for the ranks of `group` (default: the world), each on its own GPU of one host.

    Collective: every rank of the group constructs it with the same arguments (checked). `device`: this
    rank's GPU (default: the current one). `max_bytes`: the largest message the kernels take (each rank
    allocates that much GPU memory, and 2 x world x min(max_bytes, 512 KiB) for the push kernel's
    slots); larger ones go to NCCL. `one_shot_max_bytes`: where the two-shot kernel takes over (default by world size: 8 MiB at 2
    ranks, 512 KiB at 4, 128 KiB at 5 to 8); messages up to the smaller of it and `push_max_bytes`
    (512 KiB) take the push kernel (each rank writes its message into every rank's buffer, one barrier).
    `timeout_ms`: how long a kernel waits for a peer before giving up (then this rank raises TimeoutError).

    `enabled` says whether the kernels are in use; where they are not (a single rank, ranks on several
    hosts, more than 8 ranks, GPUs that cannot map each other's memory), `reason` says why and every call
    goes to NCCL. `close()` (collective) frees the buffers; so does leaving a `with` block."""

    def __init__(self, group=None, *, device=None, max_bytes: int = DEFAULT_MAX_BYTES, one_shot_max_bytes: int | None = None,
                 timeout_ms: int = DEFAULT_TIMEOUT_MS) -> None:
        max_bytes = _positive_int(max_bytes, "max_bytes")
        timeout_ms = _positive_int(timeout_ms, "timeout_ms")
        if one_shot_max_bytes is not None:
            _positive_int(one_shot_max_bytes, "one_shot_max_bytes", zero=True)
        require_torch()
        import torch.distributed as dist

        _Modules.warmup()  # every export looked up now: none is loaded later, e.g. inside a CUDA graph capture

        if not dist.is_initialized():
            raise ValueError("AllReduce: torch.distributed is not initialised (call torch.distributed.init_process_group first)")
        device = torch.device("cuda", torch.cuda.current_device()) if device is None else torch.device(device)
        if device.type != "cuda":
            raise ValueError(f"AllReduce: device must be a CUDA device, got {device}")
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        self.group, self.device = group, device
        self.rank, self.world = dist.get_rank(group), dist.get_world_size(group)
        if one_shot_max_bytes is None:
            one_shot_max_bytes = default_one_shot_max_bytes(self.world)
        max_bytes = -(-max_bytes // 16) * 16
        self._handle = 0
        with torch.cuda.device(device):
            settings = (max_bytes, one_shot_max_bytes, timeout_ms)
            mine = (socket.gethostname(), settings)
            everyone = [None] * self.world
            dist.all_gather_object(everyone, mine, group=group)
            if any(s != settings for _, s in everyone):
                raise ValueError(f"AllReduce: the ranks disagree on (max_bytes, one_shot_max_bytes, timeout_ms): {[s for _, s in everyone]}")
            if self.world > MAX_RANKS:
                self.reason = f"{self.world} ranks (the kernels take at most {MAX_RANKS})"
            elif self.world == 1:
                self.reason = "a single rank"
            elif len({host for host, _ in everyone}) > 1:
                self.reason = "the ranks are on more than one host"
            else:
                self.reason = self._map_buffers(dist, max_bytes, one_shot_max_bytes, timeout_ms)
        self.enabled = not self.reason
        if not self.enabled and self._handle:  # only the argument checks stay: the buffer goes, once no rank maps it
            _function("close_peers")(self._handle)
            with torch.cuda.device(device):
                dist.barrier(group=group)
            _function("destroy")(self._handle)
            self._handle = 0
        if not self._handle:
            self._handle = _function("create")(device.index, 0, 1, 16, 0, timeout_ms)
        self._one_shot_max = one_shot_max_bytes
        self._reduce = {dtype: fns[0] for dtype, fns in _KERNELS.items()}
        self._fused = {dtype: fns[1] for dtype, fns in _KERNELS.items()}
        _COMMS[self._handle] = self

    def _map_buffers(self, dist, max_bytes: int, one_shot_max_bytes: int, timeout_ms: int) -> str:
        """Allocates this rank's buffer and maps every peer's; returns "" or why the kernels cannot be used."""
        self._handle = _function("create")(self.device.index, self.rank, self.world, max_bytes, one_shot_max_bytes, timeout_ms)
        handle = torch.empty(64, dtype=torch.uint8)
        _function("ipc_handle")(self._handle, handle)
        handles = [None] * self.world
        dist.all_gather_object(handles, bytes(handle.tolist()), group=self.group)
        table = torch.tensor([list(h) for h in handles], dtype=torch.uint8)
        opened = _function("open_peers")(self._handle, table)
        everyone = [None] * self.world
        dist.all_gather_object(everyone, bool(opened), group=self.group)
        if all(everyone):
            return ""
        return f"ranks {[r for r, ok in enumerate(everyone) if not ok]} could not map their peers' GPU memory (CUDA IPC)"

    @property
    def push_max_bytes(self) -> int:
        """Messages up to the smaller of this and one_shot_max_bytes take the push kernel, the fused op
        included (settable, 0 to 512 KiB, the default, at most max_bytes; 0 where the kernels are not in
        use; every rank must set the same value; a CUDA graph keeps the kernel it captured)."""
        return _function("push_max")(self._handle)

    @push_max_bytes.setter
    def push_max_bytes(self, value: int) -> None:
        value = _positive_int(value, "push_max_bytes", zero=True)  # before the module loads: a bad value loses nothing
        _function("set_push_max")(self._handle, value)

    @property
    def one_shot_max_bytes(self) -> int:
        """Where the two-shot kernel takes over (settable; every rank must set the same value; a CUDA
        graph keeps the kernel it captured). 0 sends every message to two-shot, and the fused op to
        all_reduce then fused_add_rmsnorm."""
        return self._one_shot_max

    @one_shot_max_bytes.setter
    def one_shot_max_bytes(self, value: int) -> None:
        value = _positive_int(value, "one_shot_max_bytes", zero=True)  # before the module loads: a bad value loses nothing
        _function("set_one_shot_max")(self._handle, value)
        self._one_shot_max = value

    def all_reduce(self, x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """out = the sum of x over the ranks (a new tensor by default; out=x for in place)."""
        if compiling():
            if out is None:
                return torch.ops.jitkern.all_reduce(x, self._handle)
            torch.ops.jitkern.all_reduce_out(x, out, self._handle)
            return out
        if out is None:
            if not isinstance(x, torch.Tensor):
                raise TypeError(f"AllReduce.all_reduce(): x must be a torch.Tensor, got {type(x).__name__}")
            out = torch.empty_like(x)
        # any module checks what no module's kernels take (a dtype, a non-tensor) and declines it alike
        if not self._reduce.get(getattr(x, "dtype", None), self._reduce[torch.float32])(self._handle, x, out):
            if out is not x:
                out.copy_(x)
            torch.distributed.all_reduce(out, group=self.group)
        return out

    def all_reduce_add_rmsnorm(self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> None:
        """residual += the sum of x over the ranks; x = RMSNorm(residual) * weight (both in place, [..., H],
        contiguous): one kernel up to the push kernel's limit, else all_reduce then fused_add_rmsnorm."""
        if compiling():
            return torch.ops.jitkern.all_reduce_add_rmsnorm(x, residual, weight, eps, self._handle)
        if isinstance(x, torch.Tensor) and x.dim() != 2:
            x, residual = (as_rows(t, "all_reduce_add_rmsnorm", n, writes=True) for t, n in ((x, "x"), (residual, "residual")))
        if not self._fused.get(getattr(x, "dtype", None), self._fused[torch.float32])(self._handle, x, residual, weight, eps):
            from .norm import fused_add_rmsnorm

            self.all_reduce(x, out=x)
            fused_add_rmsnorm(x, residual, weight, eps)

    def check(self) -> None:
        """Raises TimeoutError if a kernel of this communicator (e.g. in a replayed CUDA graph) gave up
        waiting for a peer; the communicator is then unusable."""
        _function("check")(self._handle)

    def close(self) -> None:
        """Frees the buffers (collective: every rank calls it; waits for this rank's GPU work first)."""
        if not self._handle:
            return
        import torch.distributed as dist

        torch.cuda.synchronize(self.device)
        _function("close_peers")(self._handle)  # every rank unmaps its peers' buffers before any buffer is freed
        if self.world > 1:
            with torch.cuda.device(self.device):
                dist.barrier(group=self.group)
        _COMMS.pop(self._handle, None)
        _function("destroy")(self._handle)
        self._handle = 0

    def __enter__(self) -> "AllReduce":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
