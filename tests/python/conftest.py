import importlib.util
import os
import shutil
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
KERNELS = HERE / "kernels"

# The exports of kernels/primitives.cuh that the GPU tests call; the CPU-side compile check builds the same list.
PRIMITIVES_WRAPPERS = [("reductions", "reductions"), ("atomic_max", "atomic_max"), ("vector_copy", "vector_copy"),
                       ("runtime_info", "runtime_info"), ("launch_rules", "launch_rules"), ("copy_new", "copy_new"), ("zeros_new", "zeros_new")]
PRIMITIVES_WRAPPERS += [(f"math_{t}", f"math_ops<{t}>") for t in ("fp32_t", "fp16_t", "bf16_t")]
PRIMITIVES_WRAPPERS += [(f"round_trip_{t}", f"round_trip<{t}>") for t in ("fp16_t", "bf16_t", "fp8_e4m3_t")]
PRIMITIVES_WRAPPERS += [(f"packed_max_{t}", f"packed_max<{t}>") for t in ("fp16x2_t", "bf16x2_t")]
PRIMITIVES_WRAPPERS += [(f"vector_copy_via_shared_{t}", f"vector_copy_via_shared<{t}>") for t in ("uint8_t", "fp16_t", "fp32_t")]


def child_env(without=(), **overrides) -> dict:
    """os.environ for a child process without the variables in `without`, plus `overrides` (a None value
    removes the variable)."""
    env = {k: v for k, v in os.environ.items() if k not in without}
    for key, value in overrides.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = str(value)
    return env


def eagerly_then_from_a_graph(prepare, step, check, rounds: int = 3) -> None:
    """`prepare(seed)` then `step()` then `check(what)`, `rounds` times eagerly, then `rounds` times replaying
    `step` captured in a CUDA graph (what: "eager, seed N" or "graph, seed N")."""
    import torch

    for seed in range(rounds):
        prepare(seed)
        step()
        check(f"eager, seed {seed}")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    for seed in range(rounds, 2 * rounds):
        prepare(seed)
        graph.replay()
        torch.cuda.synchronize()
        check(f"graph, seed {seed}")


def cuda_runtime_version() -> int:
    """cudaRuntimeGetVersion of the CUDA runtime loaded in this process (the one modules linking libcudart use:
    the loader shares a library by its soname), e.g. 13000."""
    import ctypes

    import torch

    version = ctypes.c_int()
    assert ctypes.CDLL(f"libcudart.so.{torch.version.cuda.split('.')[0]}").cudaRuntimeGetVersion(ctypes.byref(version)) == 0
    return version.value


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


_GPU_NOT_RUN = []  # the one skip reason of every GPU test on a machine without a GPU (set at collection)
_TORCH_NOT_RUN = []  # likewise for the tests that need torch but no GPU, on a machine without torch


def pytest_collection_modifyitems(config, items):
    # GPU tests never pass silently on a machine without a GPU: they are skipped and reported as not run,
    # never counted as passed, in one line of the summary (pytest_runtest_setup); torch tests without torch alike.
    if importlib.util.find_spec("torch") is None:
        count = sum(bool(item.get_closest_marker("torch")) for item in items)
        _TORCH_NOT_RUN[:] = [f"NOT RUN here: {count} test{'s' if count != 1 else ''} need torch (no GPU); "
                             "`scripts/gpu-check.sh tests` runs them on the GPU machine (or `pytest -m torch` where torch is installed)"]
    if _cuda_available():
        return
    count = sum("gpu" in item.keywords for item in items)
    _GPU_NOT_RUN[:] = [f"NOT RUN here: {count} GPU test{'s' if count != 1 else ''} need a CUDA GPU and torch; on a GPU "
                       "machine run them with `scripts/gpu-check.sh tests` (or `pytest -m gpu`)"]


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    # Skipped from this one line, so that `pytest -rs` folds every GPU test into one summary line.
    if _GPU_NOT_RUN and "gpu" in item.keywords:
        pytest.skip(_GPU_NOT_RUN[0])
    if _TORCH_NOT_RUN and item.get_closest_marker("torch"):
        pytest.skip(_TORCH_NOT_RUN[0])


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    """A fresh, private jitkern cache for the test (the engine reads JITKERN_CACHE_DIR per call)."""
    d = tmp_path / "cache"
    monkeypatch.setenv("JITKERN_CACHE_DIR", str(d))
    monkeypatch.delenv("JITKERN_LOCK_DIR", raising=False)
    monkeypatch.delenv("JITKERN_RETRY_FAILED", raising=False)
    return d
