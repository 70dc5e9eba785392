"""AllReduce (jitkern.ops.all_reduce) on every GPU of the machine (2 to 8, one rank each): us per call in CUDA graphs, bf16, 512 B to 64 MiB, against
NCCL (torch.distributed.all_reduce) and torch's symmetric-memory all-reduce (one-shot and two-shot, where
this torch has them) in the same run; jitkern by size (its default choice) and with each kernel forced;
then all_reduce_add_rmsnorm against the unfused pairs. Prints markdown tables (rank 0).

Run as `python bench_all_reduce.py`: it starts one process per rank itself (NVLink multicast off). Every
rank captures the same graph of 100 calls (20 above 1 MiB) and replays it back to back; a call's time is
the median replay divided by the calls, the slowest rank's."""

from __future__ import annotations

import os
import socket
import statistics
import subprocess
import sys
from pathlib import Path

NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
MAX_WORLD = 8
SIZES = [512] + [8 << 10 << k for k in range(14)]  # bytes: 512 B, 8 KiB .. 64 MiB
FUSED_TOKENS = [1, 2, 4, 8, 16, 32, 64, 128]  # rows of 4096 bf16 (8 KiB each)
HIDDEN = 4096
REPLAYS = 15
DEADLINE_S = 200


def calls_for(nbytes: int) -> int:
    return 100 if nbytes <= (1 << 20) else 20


def _launch() -> int:
    import torch

    world = min(torch.cuda.device_count(), MAX_WORLD)
    if world < 2:
        print(f"NOT RUN: bench_all_reduce needs 2 GPUs or more, this machine has {torch.cuda.device_count()}")
        return 0
    import jitkern
    import jitkern.ops

    jitkern.warmup(*jitkern.ops.specs(ops=["AllReduce", "fused_add_rmsnorm"], dtypes=["bfloat16"]))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, **NO_MULTICAST}
    procs = [subprocess.Popen([sys.executable, __file__, str(rank), str(world), str(port)], env=env) for rank in range(world)]
    rc = 0
    for p in procs:
        try:
            rc |= p.wait(timeout=DEADLINE_S)
        except subprocess.TimeoutExpired:
            p.kill()
            print(f"bench_all_reduce: a rank did not finish within {DEADLINE_S} s")
            rc = 1
    return rc


def _worker(rank: int, world: int, port: int) -> None:
    os.environ.update(NO_MULTICAST)
    import torch
    import torch.distributed as dist

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from utils import environment

    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    from jitkern.ops import AllReduce, fused_add_rmsnorm

    device = torch.device("cuda", rank)
    comm = AllReduce(max_bytes=SIZES[-1])
    assert comm.enabled, comm.reason
    default_one_shot, default_push = comm.one_shot_max_bytes, comm.push_max_bytes

    def graph_us(fn, calls) -> float:
        """us per call: the slowest rank's median replay of a graph of `calls` calls."""
        fn()
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(calls):
                fn()
        torch.cuda.synchronize()
        dist.barrier()
        g.replay()  # the first replay lines the ranks up
        events = [torch.cuda.Event(enable_timing=True) for _ in range(REPLAYS + 1)]
        events[0].record()
        for e in events[1:]:
            g.replay()
            e.record()
        torch.cuda.synchronize()
        mine = statistics.median(a.elapsed_time(b) for a, b in zip(events, events[1:])) * 1000 / calls
        every = [None] * world
        dist.all_gather_object(every, mine)
        del g
        return max(every)

    symm = None
    try:
        import torch.distributed._symmetric_memory as symm_mem

        group_name = dist.group.WORLD.group_name
        if hasattr(symm_mem, "enable_symm_mem_for_group"):  # needed by older torch, a no-op in newer
            symm_mem.enable_symm_mem_for_group(group_name)
        symm = (symm_mem, group_name)
    except Exception as e:  # noqa: BLE001
        symm_note = f"torch's symmetric memory is not available here ({type(e).__name__}: {e})"
    else:
        symm_note = ""

    def symm_fns(n):
        """torch's one-shot and two-shot all-reduce over a symmetric buffer (the input must live there)."""
        symm_mem, group_name = symm
        buf = symm_mem.empty(n, dtype=torch.bfloat16, device=device)
        symm_mem.rendezvous(buf, group_name)
        buf.normal_()
        return {"torch symm one-shot": lambda: torch.ops.symm_mem.one_shot_all_reduce(buf, "sum", group_name),
                "torch symm two-shot": lambda: torch.ops.symm_mem.two_shot_all_reduce_(buf, "sum", group_name)}

    def forced(one_shot, push, fn):
        def call():
            comm.one_shot_max_bytes, comm.push_max_bytes = one_shot, push
            try:
                return fn()
            finally:
                comm.one_shot_max_bytes, comm.push_max_bytes = default_one_shot, default_push
        return call

    rows = []
    notes = set()
    for nbytes in SIZES:
        n = nbytes // 2
        x = torch.randn(n, device=device, dtype=torch.bfloat16)
        out = torch.empty_like(x)
        nccl_buf = x.clone()
        fns = {"NCCL": lambda: dist.all_reduce(nccl_buf),
               "jitkern": lambda: comm.all_reduce(x, out=out),
               "jitkern one-shot": forced(SIZES[-1], 0, lambda: comm.all_reduce(x, out=out)),
               "jitkern two-shot": forced(0, 0, lambda: comm.all_reduce(x, out=out))}
        if nbytes <= default_push:
            fns["jitkern push"] = forced(SIZES[-1], default_push, lambda: comm.all_reduce(x, out=out))
        if symm is not None:
            try:
                fns.update(symm_fns(n))
            except Exception as e:  # noqa: BLE001
                notes.add(f"torch symm: {type(e).__name__}: {e}")
        times = {}
        for name, fn in fns.items():
            try:
                times[name] = graph_us(fn, calls_for(nbytes))
            except Exception as e:  # noqa: BLE001
                notes.add(f"{name} at {nbytes} B: {type(e).__name__}: {str(e)[:200]}")
                torch.cuda.synchronize()
                dist.barrier()
        rows.append((nbytes, times))
    comm.check()

    fused_rows = []
    for t in FUSED_TOKENS:
        x = torch.randn(t, HIDDEN, device=device, dtype=torch.bfloat16)
        residual = torch.randn_like(x)
        weight = torch.randn(HIDDEN, device=device, dtype=torch.bfloat16)

        def nccl_pair():
            dist.all_reduce(x)
            fused_add_rmsnorm(x, residual, weight, 1e-6)

        def jitkern_pair():
            comm.all_reduce(x, out=x)
            fused_add_rmsnorm(x, residual, weight, 1e-6)

        fns = {"NCCL + fused_add_rmsnorm": nccl_pair, "jitkern all_reduce + fused_add_rmsnorm": jitkern_pair,
               "jitkern all_reduce_add_rmsnorm": lambda: comm.all_reduce_add_rmsnorm(x, residual, weight, 1e-6)}
        fused_rows.append((t, {name: graph_us(fn, 100) for name, fn in fns.items()}))
    comm.check()

    if rank == 0:
        print(f"## bench_all_reduce: {world} ranks, {environment()}\n")
        print(f"all-reduce (sum) of bf16, us per call in CUDA graphs (the slowest rank's median); jitkern by default: push up to "
              f"{min(default_push, default_one_shot) >> 10} KiB, one-shot up to {default_one_shot >> 10} KiB, two-shot above\n")
        names = list(dict.fromkeys(name for _, times in rows for name in times))
        print("| bytes | " + " | ".join(names) + " | jitkern / NCCL |")
        print("|---|" + "---|" * (len(names) + 1))
        for nbytes, times in rows:
            size = f"{nbytes} B" if nbytes < 1024 else f"{nbytes >> 10} KiB" if nbytes < (1 << 20) else f"{nbytes >> 20} MiB"
            cells = [f"{times[n]:.2f}" if n in times else "-" for n in names]
            ratio = f"{times['jitkern'] / times['NCCL']:.2f}" if "jitkern" in times and "NCCL" in times else "-"
            print(f"| {size} | " + " | ".join(cells) + f" | {ratio} |")
        if symm_note:
            print(f"\n{symm_note}")
        for note in sorted(notes):
            print(f"\nnote: {note}")
        print(f"\nall-reduce + residual add + RMSNorm, [T, {HIDDEN}] bf16, us per call in CUDA graphs\n")
        names = list(fused_rows[0][1])
        print("| T | bytes | " + " | ".join(names) + " |")
        print("|---|---|" + "---|" * len(names))
        for t, times in fused_rows:
            print(f"| {t} | {t * HIDDEN * 2 >> 10} KiB | " + " | ".join(f"{times[n]:.2f}" for n in names) + " |")
        sys.stdout.flush()
    comm.close()
    dist.destroy_process_group()


if __name__ == "__main__":
    if len(sys.argv) == 4:
        _worker(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))
    else:
        sys.exit(_launch())
