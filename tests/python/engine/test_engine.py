"""The JIT engine on the CPU: C++ kernels through load_jit, cache invalidation and safety."""

import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import jitkern
from conftest import KERNELS

# A child process that loads the factor kernel from `workdir` and prints out[1] for in = [0, 1, 2, ...].
CHILD = textwrap.dedent(
    """
    import sys, numpy as np, jitkern
    workdir, flags = sys.argv[1], sys.argv[2:]
    m = jitkern.load_jit("factor", cpp_files=[workdir + "/factor_cpu.h"],
                         cpp_wrappers=[("apply_factor", "apply_factor")], extra_cflags=flags)
    a = np.arange(4, dtype=np.float32); b = np.full_like(a, np.nan)
    m.apply_factor(b, a)
    print("RESULT", b[1])
    """
)


@pytest.fixture
def workdir(tmp_path):
    d = tmp_path / "kernel"
    d.mkdir()
    shutil.copy(KERNELS / "factor_cpu.h", d / "factor_cpu.h")
    (d / "factor_value.h").write_text("#ifndef FACTOR\n#define FACTOR 2\n#endif\n")
    return d


@pytest.fixture
def slow_cxx(tmp_path):
    """A host compiler wrapper that logs every invocation and sleeps $SLOW_SECONDS before compiling."""
    log = tmp_path / "cxx-invocations.log"
    script = tmp_path / "slow-cxx"
    real = shutil.which(os.environ.get("CXX", "c++"))
    script.write_text(
        f"#!/bin/sh\necho \"$@\" >> {log}\n"
        f'case "$1" in --version) ;; *) sleep "${{SLOW_SECONDS:-0}}" ;; esac\n'
        f'exec {real} "$@"\n'
    )
    script.chmod(0o755)
    return script, log


def run_child(workdir, *flags, env_extra=None, check=True):
    env = dict(os.environ, **(env_extra or {}))
    proc = subprocess.run([sys.executable, "-c", CHILD, str(workdir), *flags], capture_output=True, text=True, env=env, timeout=300)
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def result_of(proc):
    lines = [l for l in proc.stdout.splitlines() if l.startswith("RESULT")]
    assert lines, proc.stdout + proc.stderr
    return float(lines[-1].split()[1])


def compiles(proc):
    return proc.stderr.count("jitkern: compiling")


def test_cpu_kernel_on_numpy_arrays(cache_dir):
    m = jitkern.load_jit(
        "scale_test", "3", cpp_files=[str(KERNELS / "scale_cpu.h")], cpp_wrappers=[("scale", "scale<3>"), ("sum_ints", "sum_ints")]
    )
    rng = np.random.default_rng()
    a = rng.standard_normal(1001).astype(np.float32)
    b = np.full_like(a, np.nan)
    m.scale(b, a)
    np.testing.assert_allclose(b, a * 3, rtol=1e-6)
    assert m.sum_ints(2, 40, False) == 42 and m.sum_ints(2, 40, True) == -42
    # the same request again in this process is the memoised module
    assert jitkern.load_jit("scale_test", "3", cpp_files=[str(KERNELS / "scale_cpu.h")],
                            cpp_wrappers=[("scale", "scale<3>"), ("sum_ints", "sum_ints")]) is m


@pytest.mark.skipif(shutil.which("ld.gold") is None, reason="NOT RUN: no gold linker here")
def test_a_module_links_with_gold(cache_dir):
    """extra_ldflags=["-fuse-ld=gold"] links (gold lacks the -z noseparate-code that other links get)."""
    m = jitkern.load_jit("scale_gold", cpp_files=[str(KERNELS / "scale_cpu.h")], cpp_wrappers=[("scale", "scale<5>")],
                         extra_ldflags=["-fuse-ld=gold"])
    a = np.arange(7, dtype=np.float32)
    b = np.full_like(a, np.nan)
    m.scale(b, a)
    np.testing.assert_array_equal(b, a * 5)


def test_cpp_errors_reach_python_with_messages(cache_dir):
    m = jitkern.load_jit("errors_test", cpp_files=[str(KERNELS / "scale_cpu.h")],
                         cpp_wrappers=[("always_fails", "always_fails"), ("scale", "scale<2>")])
    with pytest.raises(ValueError, match=r"RuntimeCheck failed at .*scale_cpu\.h:\d+ in .*always_fails.*value must exceed 100, got 5"):
        m.always_fails(5)
    a = np.zeros(4, dtype=np.float32)
    with pytest.raises(TypeError, match=r"scale\(\) takes 2 arguments but 3 were given"):
        m.scale(a, a, a)
    with pytest.raises(TypeError, match=r"scale\(\): the 2nd argument must be a tensor, got int 7"):
        m.scale(a, 7)
    with pytest.raises(TypeError, match=r"always_fails\(\): the 1st argument must be an integer.*got a str"):
        m.always_fails("x")
    with pytest.raises(TypeError, match=r"(?s)Tensor match failed for Tensor<4>\[strides=<1>, dtype=int32, device=cpu:0\] at .*scale_cpu\.h:\d+"
                                           r".*Expected: Tensor<n>.*Root cause: DType mismatch: int32"):
        m.scale(a, np.zeros(4, dtype=np.int32))
    with pytest.raises(ValueError, match=r"Size mismatch for shape#0\('n'\): expected 4 \(resolved earlier\) but got 5"):
        m.scale(a, np.zeros(5, dtype=np.float32))
    with pytest.raises(ValueError, match=r"not contiguous"):
        m.scale(a, np.zeros(8, dtype=np.float32)[::2])


SCALE_ADD = """#include <jitkern/tensor.h>
inline void scale_add(jitkern::TensorView y, jitkern::TensorView x, double b) {
  host::SymbolicSize n{"n"};
  host::TensorMatcher({n}).with_dtype<float>().with_device<kDLCPU>().verify(y, "y").verify(x, "x");
  auto* out = static_cast<float*>(y.data_ptr());
  for (int64_t i = 0; i < n.unwrap(); ++i) out[i] += static_cast<const float*>(x.data_ptr())[i] * static_cast<float>(b);
}
"""


@pytest.mark.tvm_ffi
def test_exports_take_keywords_by_their_parameter_names(cache_dir, tmp_path):
    """An export whose wrapper names its parameters is called like a Python function; one whose wrapper does
    not says the call is positional-only and how to name them. A size mismatch names where the earlier size
    came from."""
    (tmp_path / "scale_add.h").write_text(SCALE_ADD)
    m = jitkern.load_jit("keywords_test", cpp_files=[str(KERNELS / "scale_cpu.h"), str(tmp_path / "scale_add.h")],
                         cpp_wrappers=[("sum_ints", "sum_ints", "a, b, negate"), ("scale_add", "scale_add", ["y", "x", "b"]),
                                       ("unnamed", "sum_ints")])
    assert m.sum_ints(b=2, negate=True, a=1) == -3 and m.sum_ints(1, negate=False, b=5) == 6 and m.sum_ints(1, 2, False) == 3
    with pytest.raises(TypeError, match=r"^sum_ints\(a, b, negate\) got an unexpected keyword argument 'c'$"):
        m.sum_ints(1, 2, c=3)
    with pytest.raises(TypeError, match=r"^sum_ints\(a, b, negate\) got multiple values for argument 'a'$"):
        m.sum_ints(1, a=2, negate=False)
    with pytest.raises(TypeError, match=r"^sum_ints\(a, b, negate\) missing argument 'negate'$"):
        m.sum_ints(1, b=2)
    with pytest.raises(TypeError, match=r"^unnamed\(\) takes positional arguments only: its parameters are not named \(name them in its "
                                        r"wrapper's third element"):
        m.unnamed(a=1, b=2, negate=False)
    assert m.unnamed(1, 2, True) == -3
    y = np.ones(3, dtype=np.float32)
    m.scale_add(x=np.arange(3, dtype=np.float32), b=2.0, y=y)
    np.testing.assert_array_equal(y, [1, 3, 5])
    with pytest.raises(ValueError, match=r"Size mismatch for shape#0\('n'\): expected 3 \(resolved earlier\) but got 5; n = 3 from y \(shape#0\)"):
        m.scale_add(y, np.zeros(5, dtype=np.float32), 1.0)
    assert jitkern.jit.positional(m, "sum_ints")(1, 2, False) == 3  # the tvm_ffi.Function itself, for hot paths


@pytest.mark.tvm_ffi
def test_returned_tensor_needs_a_framework_allocator(cache_dir):
    """A function returning jitkern::Tensor allocates through the caller's framework; numpy has none,
    so the call fails with a clear error instead of crashing (with torch tensors it succeeds, see
    test_tensor_allocated_in_cpp_is_returned_as_torch_tensor in test_device_primitives.py)."""
    m = jitkern.load_jit("alloc_test", cpp_files=[str(KERNELS / "scale_cpu.h")], cpp_wrappers=[("doubled", "doubled")])
    with pytest.raises(RuntimeError, match=r"jitkern::Tensor.*cannot allocate a tensor through the caller's framework"
                                           r".*allocator is nullptr.*pass preallocated outputs where the op takes them"):
        m.doubled(np.ones(4, dtype=np.float32))
    with pytest.raises(TypeError, match=r"DType mismatch"):  # validation still comes first
        m.doubled(np.ones(4, dtype=np.int32))


def test_module_lists_its_exports(cache_dir):
    m = jitkern.load_jit("alloc_test", cpp_files=[str(KERNELS / "scale_cpu.h")], cpp_wrappers=[("doubled", "doubled")])
    assert m["doubled"] is m.doubled
    with pytest.raises(AttributeError, match=r"exports no function 'tripled'; it has doubled"):
        m.tripled
    with pytest.raises(KeyError, match=r"exports no function 'tripled'"):
        m["tripled"]


@pytest.mark.tvm_ffi
def test_tvm_ffi_tensorview_kernel_compiles_unchanged(cache_dir):
    m = jitkern.load_jit("tvm_compat", cpp_files=[str(KERNELS / "tvm_compat_cpu.h")], cpp_wrappers=[("copy_rows", "copy_rows")])
    rng = np.random.default_rng()
    src = rng.standard_normal((3, 5)).astype(np.float32)
    bias = rng.standard_normal(5).astype(np.float32)
    dst = np.full_like(src, np.nan)
    m.copy_rows(dst, src, None)
    np.testing.assert_array_equal(dst, src)
    m.copy_rows(dst, src, bias)
    np.testing.assert_allclose(dst, src + bias, rtol=1e-6)
    with pytest.raises(ValueError, match=r"Size mismatch for shape#0\('cols'\)"):
        m.copy_rows(dst, src, np.zeros(4, dtype=np.float32))


@pytest.mark.tvm_ffi
def test_a_module_built_under_another_tvm_ffi_is_not_served(cache_dir, monkeypatch):
    """tvm-ffi's version is part of a request's key: the same spec under another tvm-ffi has its own entry."""
    import tvm_ffi

    spec = jitkern.JitSpec("tvm_ffi_keyed", cpp_files=[str(KERNELS / "scale_cpu.h")], cpp_wrappers=[("doubled", "doubled")])
    here = spec.build()
    monkeypatch.setattr(jitkern.jit, "_ENV", None)  # (the request's context, made once per process)
    monkeypatch.setattr(tvm_ffi, "__version__", tvm_ffi.__version__ + ".other")
    other = spec.build()
    assert other != here and os.path.isfile(here) and os.path.isfile(other), (here, other)


def test_header_edit_forces_rebuild_and_revert_reuses(cache_dir, workdir):
    first = run_child(workdir)
    assert result_of(first) == 2.0 and compiles(first) == 1
    warm = run_child(workdir)
    assert result_of(warm) == 2.0 and compiles(warm) == 0
    (workdir / "factor_value.h").write_text("#define FACTOR 5\n")
    edited = run_child(workdir)
    assert result_of(edited) == 5.0 and compiles(edited) == 1
    (workdir / "factor_value.h").write_text("#ifndef FACTOR\n#define FACTOR 2\n#endif\n")
    reverted = run_child(workdir)  # content-addressed: the library for this content still exists
    assert result_of(reverted) == 2.0 and compiles(reverted) == 0


def test_touch_without_change_does_not_rebuild(cache_dir, workdir):
    assert compiles(run_child(workdir)) == 1
    os.utime(workdir / "factor_value.h", None)
    again = run_child(workdir)
    assert result_of(again) == 2.0 and compiles(again) == 0


def test_flag_change_forces_rebuild(cache_dir, workdir):
    assert result_of(run_child(workdir)) == 2.0
    flagged = run_child(workdir, "-DFACTOR=7")
    assert result_of(flagged) == 7.0 and compiles(flagged) == 1


def test_warm_load_runs_no_subprocess(cache_dir, workdir, slow_cxx):
    cxx, log = slow_cxx
    env = {"CXX": str(cxx)}
    assert compiles(run_child(workdir, env_extra=env)) == 1
    calls = log.read_text()
    assert "--version" in calls  # the compiler was probed (once) and used
    warm = run_child(workdir, env_extra=env)
    assert result_of(warm) == 2.0 and compiles(warm) == 0
    assert log.read_text() == calls, "a warm load must not start the compiler"


# A warm load of the factor kernel in a fresh process under an audit hook (after jitkern's import): the
# modules it imports, the code it generates (dataclasses and namedtuples compile their methods from
# text: a millisecond of a first load), the processes it starts and the directories it lists.
AUDITED_WARM_LOAD = textwrap.dedent(
    """
    import sys
    from jitkern import load_jit  # the package's import (tvm-ffi's too) is not part of a load
    workdir = sys.argv[1]
    seen = []
    def hook(event, args):
        if event == "compile" or event == "os.listdir" or event.startswith(("subprocess.", "os.posix_spawn", "os.exec", "os.system")):
            seen.append(f"{event} {args[1] if event == 'compile' else args[0]}")
    before = set(sys.modules)
    sys.addaudithook(hook)
    m = load_jit("factor", cpp_files=[workdir + "/factor_cpu.h"], cpp_wrappers=[("apply_factor", "apply_factor")])
    m.apply_factor
    print("IMPORTED", " ".join(sorted(set(sys.modules) - before)))
    print("EVENTS", " | ".join(seen))
    """
)


@pytest.mark.parametrize("wheel", [False, True], ids=["no_wheel", "a_wheel_installed"])
def test_a_warm_load_imports_nothing_and_generates_no_code(cache_dir, workdir, tmp_path, wheel):
    """A process's first warm load does little besides the engine's lookup: it compiles no code, starts no
    process and lists no directory but a prebuilt wheel's; it imports jitkern.wheels only where a wheel is
    installed (one failed lookup per sys.path entry finds none) and nothing else."""
    import platform

    import tvm_ffi

    if jitkern._engine.prebuilt_packages():
        pytest.skip("NOT RUN: a prebuilt wheel is installed in this environment (the test installs its own)")
    assert compiles(run_child(workdir)) == 1
    env = dict(os.environ)
    if wheel:  # an installed wheel's layer (with no entries): its layer.json is read, its cache searched first
        layer = tmp_path / "site" / "jitkern_prebuilt" / "host"
        (layer / "cache").mkdir(parents=True)
        (layer / "layer.json").write_text(json.dumps({"distribution": "jitkern-prebuilt-host", "version": jitkern.__version__,
                                                      "jitkern": jitkern.__version__, "machine": platform.machine(),
                                                      "tvm_ffi": tvm_ffi.__version__, "arch": None}))
        env["PYTHONPATH"] = os.pathsep.join([str(tmp_path / "site"), env.get("PYTHONPATH", "")])
    proc = subprocess.run([sys.executable, "-c", AUDITED_WARM_LOAD, str(workdir)], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0 and compiles(proc) == 0, proc.stderr
    lines = dict(line.split(" ", 1) if " " in line else (line, "") for line in proc.stdout.splitlines())
    assert lines["IMPORTED"].split() == (["jitkern.wheels"] if wheel else []), lines["IMPORTED"]
    events = [e for e in lines["EVENTS"].split(" | ") if e]
    assert events == ([f"os.listdir {tmp_path / 'site' / 'jitkern_prebuilt'}"] if wheel else []), events


def test_eight_processes_compile_once(cache_dir, workdir, slow_cxx):
    cxx, _ = slow_cxx
    env = dict(os.environ, CXX=str(cxx), SLOW_SECONDS="2")
    procs = [subprocess.Popen([sys.executable, "-c", CHILD, str(workdir)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env) for _ in range(8)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [e for _, e in outs]
    assert sum(e.count("jitkern: compiling") for _, e in outs) == 1
    assert all("RESULT 2.0" in o for o, _ in outs)


def test_kill_during_compile_recovers(cache_dir, workdir, slow_cxx):
    cxx, _ = slow_cxx
    env = dict(os.environ, CXX=str(cxx), SLOW_SECONDS="60")
    victim = subprocess.Popen([sys.executable, "-c", CHILD, str(workdir)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env)
    deadline = time.time() + 60
    while not list(cache_dir.glob("*/build-*")):  # the compile has started
        assert time.time() < deadline and victim.poll() is None, "the compile never started"
        time.sleep(0.05)
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    assert not list(cache_dir.glob("*/manifest")), "nothing may be published by a killed build"
    t0 = time.time()
    recovered = run_child(workdir, env_extra={"CXX": str(cxx), "SLOW_SECONDS": "0"})
    assert result_of(recovered) == 2.0 and compiles(recovered) == 1
    assert time.time() - t0 < 50, "the dead process's lock must not be waited for"


def test_truncated_library_is_rebuilt(cache_dir, workdir):
    assert compiles(run_child(workdir)) == 1
    (lib,) = cache_dir.glob("factor-*/*.so")
    with open(lib, "r+b") as f:
        f.truncate(lib.stat().st_size // 2)
    again = run_child(workdir)
    assert result_of(again) == 2.0 and compiles(again) == 1


def test_unresolved_symbol_is_a_load_error_not_a_crash(cache_dir, tmp_path):
    """A library that links but calls a function nothing defines fails to load with the symbol's name
    (modules are bound eagerly); with lazy binding the process would die at the first call."""
    src = tmp_path / "unresolved.h"
    src.write_text("#include <cstdint>\n\nint64_t jitkern_test_nowhere_defined(int64_t);\n"
                   "inline int64_t call_missing(int64_t x) { return jitkern_test_nowhere_defined(x); }\n")
    with pytest.raises(RuntimeError, match=r"cannot load .*undefined symbol: .*jitkern_test_nowhere_defined"):
        jitkern.load_jit("unresolved", cpp_files=[str(src)], cpp_wrappers=[("call_missing", "call_missing")])


def test_compile_error_shows_location_and_is_remembered(cache_dir, tmp_path):
    src = tmp_path / "broken.h"
    src.write_text("#include <jitkern/utils.h>\n\ninline int broken() {\n  return undefined_symbol + 1;\n}\n")
    args = dict(cpp_files=[str(src)], cpp_wrappers=[("broken", "broken")])
    with pytest.raises(jitkern.BuildError) as failure:
        jitkern.load_jit("broken", **args)
    first, rest = str(failure.value).split("\n", 1)
    # the cause first: the module, then the user's file:line: error; then the output, and the kept log with the commands
    assert re.fullmatch(rf"jitkern: module 'broken' failed to compile: {re.escape(str(src))}:4:\d+: error: .*undefined_symbol.*", first), first
    assert rest.index("compiler output (exit status 1):") < rest.index("the commands, their full output and the generated source: ")
    assert "command: " not in rest, "the commands are in the kept log, not the message"
    log = Path(rest.rsplit("the commands, their full output and the generated source: ", 1)[1].strip())
    assert "undefined_symbol" in log.read_text() and "generated source:" in log.read_text() and "command: " in log.read_text()
    t0 = time.time()
    with pytest.raises(jitkern.BuildError, match=r"remembered this failure"):
        jitkern.load_jit("broken", **args)
    assert time.time() - t0 < 0.2, "a remembered failure must fail fast"
    os.environ["JITKERN_RETRY_FAILED"] = "1"
    try:
        with pytest.raises(jitkern.BuildError) as retried:
            jitkern.load_jit("broken", **args)
        assert "remembered" not in str(retried.value)
    finally:
        del os.environ["JITKERN_RETRY_FAILED"]
    src.write_text("#include <jitkern/utils.h>\n\ninline int broken() {\n  return 41 + 1;\n}\n")
    assert jitkern.load_jit("broken", **args).broken() == 42


def test_foreign_writable_cache_is_refused(cache_dir, workdir):
    assert compiles(run_child(workdir)) == 1
    assert stat.S_IMODE(cache_dir.stat().st_mode) == 0o700, "the cache directory must be created private"
    cache_dir.chmod(0o777)
    refused = run_child(workdir, check=False)
    assert refused.returncode != 0 and "writable by group/others" in refused.stderr
    cache_dir.chmod(0o700)
    (lib,) = cache_dir.glob("factor-*/*.so")
    lib.chmod(0o666)
    strict = run_child(workdir, check=False, env_extra={"JITKERN_ON_MISS": "error"})
    assert strict.returncode != 0 and "with mode 0666; it must belong to the current user" in strict.stderr, strict.stderr
    assert compiles(run_child(workdir)) == 1, "a library anyone could have written is never loaded: it is rebuilt"
    assert stat.S_IMODE(lib.stat().st_mode) == 0o644


def test_separate_lock_directory(cache_dir, workdir, tmp_path):
    locks = tmp_path / "locks"
    assert result_of(run_child(workdir, env_extra={"JITKERN_LOCK_DIR": str(locks)})) == 2.0
    assert list(locks.glob("factor-*.lock")) and not (cache_dir / "locks").exists()


def test_build_directory_parameter(cache_dir, tmp_path):
    build_dir = tmp_path / "mybuild"
    m = jitkern.load_jit("scale_bd", cpp_files=[str(KERNELS / "scale_cpu.h")], cpp_wrappers=[("scale", "scale<4>")],
                         build_directory=str(build_dir))
    a = np.arange(3, dtype=np.float32)
    b = np.empty_like(a)
    m.scale(b, a)
    np.testing.assert_array_equal(b, a * 4)
    assert list(build_dir.glob("scale_bd-*/manifest"))


def test_load_jit_rejects_bad_arguments(cache_dir):
    with pytest.raises(TypeError, match="module name"):
        jitkern.load_jit(cpp_files=["x.h"])
    with pytest.raises(TypeError, match="cpp_files must be a list"):
        jitkern.load_jit("x", cpp_files="x.h")
    with pytest.raises(TypeError, match=r"\(export_name, cpp_expression\[, argument_names\]\) tuples"):
        jitkern.load_jit("x", cpp_files=["x.h"], cpp_wrappers=["f"])
    with pytest.raises(ValueError, match="export name 'a-b' is not a C identifier"):
        jitkern.load_jit("x", cpp_files=["x.h"], cpp_wrappers=[("a-b", "f")])
    with pytest.raises(ValueError, match=r"kernel source 'does_not_exist\.cuh' not found .*csrc"):
        jitkern.load_jit("x", cuda_files=["does_not_exist.cuh"], cuda_wrappers=[("f", "f")])
    with pytest.raises(ValueError, match="at least one of cpp_files or cuda_files"):
        jitkern.load_jit("x")


def test_invalid_cuda_arch_is_reported(cache_dir, monkeypatch):
    monkeypatch.setenv("JITKERN_CUDA_ARCH", "hopper")
    with pytest.raises(ValueError, match="invalid CUDA architecture 'hopper'"):
        jitkern.load_jit("arch_test", cuda_files=["add_constant.cuh"], cuda_wrappers=[("add_constant", "add_constant<1>")])


def test_engine_only_change_keeps_cached_kernels(cache_dir, workdir):
    """Kernel modules link only the runtime library, named in the key by its ABI version: a rebuilt
    engine (or a rebuilt runtime of the same ABI) keeps every cached kernel."""
    assert compiles(run_child(workdir)) == 1
    lib_dir = jitkern.PACKAGE_DIR / "lib"
    saved = {}
    try:
        for name in ("libjitkern_engine.so", "libjitkern_runtime.so"):
            path = lib_dir / name
            saved[path] = (path.stat().st_size, path.stat().st_atime_ns, path.stat().st_mtime_ns)
            with open(path, "ab") as f:  # new bytes and a new mtime, as a rebuild would give
                f.write(b"\0" * 16)
        warm = run_child(workdir)
        assert result_of(warm) == 2.0 and compiles(warm) == 0
    finally:
        for path, (size, atime, mtime) in saved.items():
            with open(path, "r+b") as f:
                f.truncate(size)
            os.utime(path, ns=(atime, mtime))


def test_arguments_of_the_wrong_kind_or_value_are_refused_naming_them(cache_dir, tmp_path):
    """replace(args=<a string>) is not split into one-character arguments; warmup's workers must be an int >= 1;
    a file name os.fsdecode made of non-UTF-8 bytes reaches the compiler as those bytes."""
    spec = jitkern.JitSpec("args_test", "2", cpp_files=[str(KERNELS / "scale_cpu.h")], cpp_wrappers=[("scale", "scale<2>")])
    with pytest.raises(TypeError, match=r"JitSpec.replace: args must be a tuple of strings .*got str"):
        spec.replace(args="args_test_v2")
    assert spec.replace(args=["args_test_v2", "3"]).args == ("args_test_v2", "3")
    for workers, error in ((-1, ValueError), (0, ValueError), ("2", TypeError), (2.0, TypeError), (True, TypeError)):
        with pytest.raises(error, match="warmup: workers must be"):
            jitkern.warmup(spec, workers=workers)
    assert len(jitkern.warmup(spec, workers=np.int64(1))) == 1  # an integer of another type
    kernel = os.path.join(os.fsencode(tmp_path), b"scale\xff.h")
    shutil.copy(KERNELS / "scale_cpu.h", kernel)
    odd = spec.replace(cpp_files=[os.fsdecode(kernel)])
    out, src = np.zeros(3, dtype=np.float32), np.arange(3, dtype=np.float32)
    odd.load().scale(out, src)
    assert list(out) == [0.0, 2.0, 4.0], out
    with pytest.raises(ValueError, match=r"cflag '-D\\ud800' holds a lone surrogate"):
        spec.replace(extra_cflags=["-D\ud800"])


def test_jitspec_is_a_value_that_builds_without_loading(cache_dir):
    make = lambda factor: jitkern.JitSpec("spec_test", cpp_files=[str(KERNELS / "scale_cpu.h")],
                                          cpp_wrappers=[("scale", f"scale<{factor}>", ["out", "in"])])
    spec = make(2)
    assert spec == make(2) and hash(spec) == hash(make(2)) and spec != make(3)
    assert spec.replace(extra_cflags=["-DX"]).extra_cflags == ("-DX",) and spec.extra_cflags == ()
    with pytest.raises(AttributeError):
        spec.args = ("other",)
    path = spec.build()
    assert path.endswith(".so") and os.path.exists(path)
    assert path not in Path("/proc/self/maps").read_text(), "build() must not load the library"
    assert spec.build() == path
    module = spec.load()
    assert module is spec.load() is jitkern.load_jit(*spec.args, cpp_files=spec.cpp_files, cpp_wrappers=spec.cpp_wrappers)
    assert module.path == path and module.exports == ("scale",)
    with pytest.raises(TypeError, match=r"scale\(out, in\) takes 2 arguments but 1 was given"):
        module.scale(np.zeros(2, dtype=np.float32))
    with pytest.raises(TypeError, match=r"scale\(\): argument 'in' \(the 2nd\) must be a tensor, got int 7"):
        module.scale(np.zeros(2, dtype=np.float32), 7)
    with pytest.raises(ValueError, match="argument names of 'scale' must be C identifiers"):
        jitkern.JitSpec("spec_test", cpp_files=[str(KERNELS / "scale_cpu.h")], cpp_wrappers=[("scale", "scale<2>", "out, 1in")]).build()


def test_host_without_nvcc_is_part_of_the_spec(cache_dir):
    cuda = jitkern.JitSpec("hwn_test", cuda_files=["act.cuh"], cuda_wrappers=[("f", "f")])
    split = cuda.replace(host_without_nvcc=True)
    assert split.host_without_nvcc and not cuda.host_without_nvcc and split != cuda and hash(split) != hash(cuda)
    with pytest.raises(TypeError, match="host_without_nvcc must be a bool, got str"):
        cuda.replace(host_without_nvcc="yes")
    with pytest.raises(ValueError, match="host_without_nvcc was given without cuda_files"):
        jitkern.JitSpec("hwn_test", cpp_files=[str(KERNELS / "scale_cpu.h")], cpp_wrappers=[("scale", "scale<2>")], host_without_nvcc=True).build()


def test_host_without_cudafe_is_part_of_the_spec(cache_dir):
    cuda = jitkern.JitSpec("hwc_test", cuda_files=["act.cuh"], cuda_wrappers=[("f", "f")])
    rewritten = cuda.replace(host_without_cudafe=True)
    assert rewritten.host_without_cudafe and not cuda.host_without_cudafe and rewritten != cuda and hash(rewritten) != hash(cuda)
    with pytest.raises(TypeError, match="host_without_cudafe must be a bool, got int"):
        cuda.replace(host_without_cudafe=1)
    with pytest.raises(ValueError, match="host_without_cudafe was given without cuda_files"):
        jitkern.JitSpec("hwc_test", cpp_files=[str(KERNELS / "scale_cpu.h")], cpp_wrappers=[("scale", "scale<2>")], host_without_cudafe=True).build()
    with pytest.raises(ValueError, match="host_without_nvcc and host_without_cudafe were both given"):
        rewritten.replace(host_without_nvcc=True).build()


def test_host_shared_files_names_leading_cuda_files_of_a_rewritten_host_side(cache_dir):
    spec = jitkern.JitSpec("hsf_test", cuda_files=["act.cuh", "act.cuh"], cuda_wrappers=[("f", "f")], host_without_cudafe=True)
    assert spec.host_shared_files == 0 and spec.replace(host_shared_files=1).host_shared_files == 1 and spec.replace(host_shared_files=1) != spec
    spec.replace(host_shared_files=2)._check()
    with pytest.raises(TypeError, match="host_shared_files must be an int, got bool"):
        spec.replace(host_shared_files=True)
    with pytest.raises(ValueError, match=r"host_shared_files must be between 0 and the number of cuda_files \(2\), got 3"):
        spec.replace(host_shared_files=3)._check()
    with pytest.raises(ValueError, match=r"host_shared_files must be between 0 and the number of cuda_files \(2\), got -1"):
        spec.replace(host_shared_files=-1)._check()
    with pytest.raises(ValueError, match="host_shared_files was given without host_without_cudafe"):
        spec.replace(host_without_cudafe=False, host_shared_files=1)._check()
    # beyond int's range: refused by the engine, not truncated (2**32 + 1 once read as 1, 2**40 as 0)
    for huge in (2**32 + 1, 2**40, -(2**40)):
        with pytest.raises(ValueError, match=rf"host_shared_files must be an integer in \[-2147483648, 2147483647\], got '{huge}'"):
            spec.replace(host_shared_files=huge)._check()


def test_parallel_builds_start_the_costliest_compile_first():
    """compile_seconds orders parallel builds (warmup, prebuild) and is no part of the module's identity;
    jitkern's own modules carry their measured costs, so their longest compiles start first."""
    from jitkern.jit import costliest_first

    cheap = jitkern.JitSpec("order_test", cuda_files=["act.cuh"], cuda_wrappers=[("f", "f")])
    dear = cheap.replace(compile_seconds=4.5)
    assert dear == cheap and hash(dear) == hash(cheap) and dear.compile_seconds == 4.5 and cheap.compile_seconds == 0
    other = jitkern.JitSpec("order_other", cuda_files=["act.cuh"], cuda_wrappers=[("f", "f")], compile_seconds=2)
    order = costliest_first([cheap, other, dear])
    assert [s.compile_seconds for s in order] == [4.5, 2, 0] and order[0] is dear and order[2] is cheap
    for bad in (True, "3", None):
        with pytest.raises(TypeError, match="compile_seconds must be a number of seconds"):
            cheap.replace(compile_seconds=bad)
    for bad in (-1, float("nan"), float("inf"), 10**400):
        with pytest.raises(ValueError, match="compile_seconds must be finite and >= 0"):
            cheap.replace(compile_seconds=bad)
    assert cheap.replace(compile_seconds=np.float64(2.5)).compile_seconds == 2.5 and str(cheap.replace(compile_seconds=-0.0).compile_seconds) == "0.0"
    import jitkern.ops as ops

    specs = ops.specs(dtypes=["bfloat16"])
    assert all(s.compile_seconds > 0 for s in specs), [s.name for s in specs if not s.compile_seconds]
    first = costliest_first(specs)
    assert first[0].compile_seconds == max(s.compile_seconds for s in specs) and specs[0] is not first[0]


def test_a_spec_takes_a_float_cost_without_the_abstract_number_check(monkeypatch):
    """Every load_jit builds a spec, cold in a fresh process: a float compile_seconds (the default) is taken
    without the numbers.Real check (an ABC lookup, about 10 us the first time in a process); any other
    number still goes through it."""
    import numbers
    from types import SimpleNamespace

    from jitkern import jit

    checked = []

    class Watched(type):
        def __instancecheck__(cls, value):
            checked.append(value)
            return isinstance(value, numbers.Real)

    monkeypatch.setattr(jit, "numbers", SimpleNamespace(Real=Watched("Real", (), {}), Integral=numbers.Integral))
    spec = jitkern.JitSpec("abc_test", cuda_files=["act.cuh"], cuda_wrappers=[("f", "f")])
    assert spec.replace(compile_seconds=2.5).compile_seconds == 2.5 and checked == []
    assert spec.replace(compile_seconds=2).compile_seconds == 2.0 and checked == [2]
    with pytest.raises(TypeError, match="compile_seconds must be a number of seconds"):
        spec.replace(compile_seconds=True)


def test_warmup_raises_the_first_failure_in_the_callers_order(cache_dir, tmp_path):
    """Builds start costliest first, but the failure raised is the first of the caller's list."""
    specs = []
    for name, cost in (("first_broken", 0), ("costly_broken", 9)):
        (tmp_path / f"{name}.h").write_text(f"int {name}( {{\n")
        specs.append(jitkern.JitSpec(name, cpp_files=[str(tmp_path / f"{name}.h")], cpp_wrappers=[("f", name)], compile_seconds=cost))
    with pytest.raises(jitkern.BuildError, match="module 'first_broken' failed to compile"):
        jitkern.warmup(*specs)


def test_load_is_memoised_on_everything_that_changes_the_result(cache_dir, tmp_path, monkeypatch):
    spec = jitkern.JitSpec("memo_test", cpp_files=[str(KERNELS / "scale_cpu.h")], cpp_wrappers=[("scale", "scale<2>")])
    first = spec.load()
    assert spec.load() is first
    monkeypatch.setenv("JITKERN_CACHE_DIR", str(tmp_path / "other-cache"))
    other = spec.load()
    assert other is not first and other.path.startswith(str(tmp_path / "other-cache"))
