import importlib.util
import os
import re
import shutil
import sys
import warnings
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
KERNELS = HERE / "kernels"

# Streams that signal each other (test_wait_value) must not share a hardware queue (docs/ops.md, stream
# signalling); set before any test creates a CUDA context.
os.environ.setdefault("CUDA_DEVICE_MAX_CONNECTIONS", "32")

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


def loaded_cuda_runtimes() -> set:
    """The paths of the CUDA runtime libraries (libcudart.so) this process has loaded: one where torch and the
    modules share it."""
    with open("/proc/self/maps") as maps:
        return {line.split()[-1] for line in maps if "/libcudart.so" in line}


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


_NOT_RUN = {}  # marker -> the one skip reason of its tests where they cannot run (set at collection)


def pytest_collection_modifyitems(config, items):
    # GPU tests never pass silently on a machine without a GPU: they are skipped and reported as not run,
    # never counted as passed, in one line of the summary (pytest_runtest_setup); torch tests without torch
    # alike, and the part of the compile matrix that runs on the GPU machine only.
    def tests(marker: str) -> str:
        count = sum(bool(item.get_closest_marker(marker)) for item in items)
        return f"{count} {'GPU ' if marker == 'gpu' else ''}test{'s' if count != 1 else ''}"

    if not _cuda_available():
        _NOT_RUN["gpu"] = (f"NOT RUN here: {tests('gpu')} need a CUDA GPU and torch; on a GPU machine run them with "
                           "`scripts/gpu-check.sh tests` (or `pytest -m gpu`)")
        _NOT_RUN["full_matrix"] = f"NOT RUN here: {tests('full_matrix')} of the full compile matrix (the GPU machine's: `scripts/gpu-check.sh tests`)"
    if importlib.util.find_spec("torch") is None:
        _NOT_RUN["torch"] = (f"NOT RUN here: {tests('torch')} need torch (no GPU); `scripts/gpu-check.sh tests` runs them on the GPU "
                             "machine (or `pytest -m torch` where torch is installed)")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """pytest-xdist's --dist loadgroup, here: the tests of a file that defines a module-scoped (or wider) fixture
    (a wheel built, a cache prebuilt) run on one worker, so that the fixture is made once; every other test goes to
    whichever worker is free. (xdist_group marks cannot do it: pytest-xdist 3.8 groups them through node ids,
    which pytest 9 no longer lets it change.)"""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    grouped = {}

    class ModuleFixtureFiles(LoadScopeScheduling):
        def _split_scope(self, nodeid):
            path = nodeid.split("::")[0]
            if path not in grouped:
                file = config.rootpath / path
                grouped[path] = file.suffix == ".py" and re.search(r"@pytest\.fixture\([^)]*scope=.(module|package|session).", file.read_text()) is not None
            return path if grouped[path] else nodeid

    return ModuleFixtureFiles(config, log)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    # Skipped from this one line, so that `pytest -rs` folds every such test into one summary line.
    for marker, reason in _NOT_RUN.items():
        if item.get_closest_marker(marker):
            pytest.skip(reason)


def pytest_terminal_summary(terminalreporter, config):
    if config.getoption("markexpr") == "not slow" and terminalreporter.stats.get("deselected"):  # pyproject.toml's default
        terminalreporter.write_line("slow tests (packaging, every op module compiled) were left out: scripts/test.sh, "
                                    "or pytest -m '' (everything) or -m slow, runs them")


class GpuMemoryWarning(UserWarning):
    """A test grew torch's GPU memory reservation by more than GPU_MEMORY_REPORTED (named in the warnings summary)."""


# One GPU serves every pytest-xdist worker and the fresh processes tests start (a CUDA context each). After each
# test, where torch holds more than GPU_MEMORY_KEPT of the current device, the cached memory no tensor holds goes
# back to the driver; a test that grew the reservation by more than GPU_MEMORY_REPORTED is named in the warnings
# summary (the current device only).
GPU_MEMORY_KEPT, GPU_MEMORY_REPORTED = 1 << 30, 4 << 30


@pytest.fixture(autouse=True)
def _gpu_memory_back_to_the_driver():
    torch = sys.modules.get("torch")
    before = 0
    if torch is not None and torch.cuda.is_initialized():
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_reserved()
    yield
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return
    grew = torch.cuda.max_memory_reserved() - before
    if torch.cuda.memory_reserved() > GPU_MEMORY_KEPT:
        torch.cuda.empty_cache()
    if grew > GPU_MEMORY_REPORTED:
        warnings.warn(f"the test grew the GPU memory torch reserves by {grew / 2**30:.1f} GiB", GpuMemoryWarning)


def _use_cache(monkeypatch, d: Path) -> Path:
    monkeypatch.setenv("JITKERN_CACHE_DIR", str(d))  # the engine reads it per call
    monkeypatch.delenv("JITKERN_LOCK_DIR", raising=False)
    monkeypatch.delenv("JITKERN_RETRY_FAILED", raising=False)
    return d


def shared_cache_path(tmp_path_factory) -> Path:
    """The jitkern cache shared by every test of the run that uses it (every pytest-xdist worker's too: the
    engine's builds are process-safe)."""
    base = tmp_path_factory.getbasetemp()
    return (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "shared-cache"


@pytest.fixture
def shared_cache_dir(tmp_path_factory, monkeypatch):
    """The shared cache (shared_cache_path), for tests that only need their modules built, not a fresh cache."""
    return _use_cache(monkeypatch, shared_cache_path(tmp_path_factory))


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    """A fresh, private jitkern cache for the test."""
    return _use_cache(monkeypatch, tmp_path / "cache")
