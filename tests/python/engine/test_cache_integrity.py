"""The cache never serves stale or foreign code: inputs edited during a compile, relative include
paths, tampered metadata, planted toolchain records, transient failures, hung or killed compilers,
leftovers, concurrent threads. CPU only (C++ kernels through the host compiler)."""

import os
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

CHILD = textwrap.dedent(
    """
    import os, signal, sys, numpy as np, jitkern
    # Ctrl-C raises KeyboardInterrupt here whatever the parent left (a background job's SIGINT is ignored).
    signal.signal(signal.SIGINT, signal.SIG_IGN if os.environ.get("CHILD_IGNORES_SIGINT") else signal.default_int_handler)
    workdir = sys.argv[1]
    m = jitkern.load_jit("factor", cpp_files=[workdir + "/factor_cpu.h"], cpp_wrappers=[("apply_factor", "apply_factor")],
                         extra_include_paths=sys.argv[2:])
    a = np.arange(4, dtype=np.float32); b = np.full_like(a, np.nan)
    m.apply_factor(b, a)
    print("RESULT", b[1])
    """
)


def child(workdir, *includes, env=None, cwd=None, timeout=120):
    return subprocess.run([sys.executable, "-c", CHILD, str(workdir), *includes], capture_output=True, text=True,
                          env=dict(os.environ, **(env or {})), cwd=cwd, timeout=timeout)


def result(proc) -> float:
    assert proc.returncode == 0, proc.stderr
    return float([l for l in proc.stdout.splitlines() if l.startswith("RESULT")][-1].split()[1])


def compiles(proc) -> int:
    return proc.stderr.count("jitkern: compiling")


@pytest.fixture
def workdir(tmp_path):
    d = tmp_path / "kernel"
    d.mkdir()
    (d / "factor_cpu.h").write_text((KERNELS / "factor_cpu.h").read_text())
    (d / "factor_value.h").write_text("#define FACTOR 2\n")
    return d


def wrapper(tmp_path, body: str) -> Path:
    """A host compiler: `body` (sh) runs for compile commands; --version goes to the real compiler."""
    real = subprocess.run(["sh", "-c", "command -v ${CXX:-c++}"], capture_output=True, text=True).stdout.strip()
    script = tmp_path / f"cxx-{abs(hash(body))}"
    script.write_text(f'#!/bin/sh\nREAL={real}\ncase "$1" in --version) exec $REAL "$@";; esac\n{body}\n')
    script.chmod(0o755)
    return script


@pytest.mark.parametrize("case", ["first build", "first build, edit back-dated", "rebuild, edit back-dated"])
def test_header_edited_during_the_compile_is_not_cached_stale(cache_dir, workdir, tmp_path, case):
    """The compiler reads the header, then (held by the wrapper) the header is edited before it exits:
    the library must not be published under the new content, and the value served is the new one.
    The back-dated edit (an mtime in the past, as `cp -p`, `rsync -a` or a coarse-mtime file system give)
    is caught by hashing the previous build's inputs before the compile, and on a first build by the
    file's status-change time."""
    mark = tmp_path / "mark"
    cxx = wrapper(tmp_path, f'$REAL "$@"; rc=$?\nif [ ! -e {mark} ]; then touch {mark}.compiled; '
                            f'while [ ! -e {mark} ]; do sleep 0.05; done; fi\nexit $rc')
    if case.startswith("rebuild"):
        mark.touch()
        assert result(child(workdir, env={"CXX": str(cxx)})) == 2.0
        mark.unlink()
        (workdir / "factor_value.h").write_text("#define FACTOR 3\n")
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(workdir)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, CXX=str(cxx)))
    deadline = time.time() + 120
    while not Path(f"{mark}.compiled").exists():
        assert time.time() < deadline and proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    (workdir / "factor_value.h").write_text("#define FACTOR 5\n")
    if "back-dated" in case:
        old = time.time_ns() - 3600 * 10**9
        os.utime(workdir / "factor_value.h", ns=(old, old))
    mark.touch()
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert "RESULT 5.0" in out, (out, err)
    assert "changed while it compiled" in err
    warm = child(workdir, env={"CXX": str(cxx)})  # the same compiler: the same key
    assert result(warm) == 5.0 and compiles(warm) == 0


@pytest.mark.parametrize("how", ["extra_include_paths", "-I flag"])
def test_header_found_through_a_relative_include_path_is_tracked(cache_dir, tmp_path, how):
    project = tmp_path / "project"
    (project / "inc").mkdir(parents=True)
    (project / "inc" / "factor_value.h").write_text("#define FACTOR 3\n")
    (project / "factor_cpu.h").write_text((KERNELS / "factor_cpu.h").read_text())
    code = CHILD.replace('extra_include_paths=sys.argv[2:]', 'extra_include_paths=["inc"]' if how == "extra_include_paths"
                         else 'extra_cflags=["-Iinc"]')
    run = lambda: subprocess.run([sys.executable, "-c", code, str(project)], capture_output=True, text=True, cwd=project, timeout=120)
    first = run()
    assert result(first) == 3.0 and compiles(first) == 1
    (project / "inc" / "factor_value.h").write_text("#define FACTOR 6\n")
    edited = run()
    assert result(edited) == 6.0 and compiles(edited) == 1, "an edit of a header found through a relative path must rebuild"


def entry_of(cache_dir, name):
    (entry,) = [p for p in cache_dir.glob(f"{name}-*") if p.is_dir()]
    return entry


def scale_module(name, factor):
    return jitkern.load_jit(name, cpp_files=[str(KERNELS / "scale_cpu.h")], cpp_wrappers=[("scale", f"scale<{factor}>")])


def scaled(name, factor):
    code = f"""
import numpy as np, jitkern
m = jitkern.load_jit({name!r}, cpp_files=[{str(KERNELS / 'scale_cpu.h')!r}], cpp_wrappers=[("scale", "scale<{factor}>")])
a = np.ones(2, dtype=np.float32); b = np.zeros_like(a); m.scale(b, a); print("RESULT", b[0])
"""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_library_and_hash_swapped_from_another_entry_are_not_trusted(cache_dir):
    assert result(scaled("swap_a", 2)) == 2.0 and result(scaled("swap_b", 3)) == 3.0
    a, b = entry_of(cache_dir, "swap_a"), entry_of(cache_dir, "swap_b")
    (lib_a,), (lib_b,) = a.glob("*.so"), b.glob("*.so")
    lib_a.write_bytes(lib_b.read_bytes())
    Path(f"{lib_a}.sha256").write_text(Path(f"{lib_b}.sha256").read_text())
    again = scaled("swap_a", 2)
    assert result(again) == 2.0 and compiles(again) == 1, "a foreign library must be rebuilt, not loaded"


def test_manifest_copied_from_another_entry_or_cut_short_is_a_miss(cache_dir):
    assert result(scaled("copy_a", 2)) == 2.0 and result(scaled("copy_b", 3)) == 3.0
    a, b = entry_of(cache_dir, "copy_a"), entry_of(cache_dir, "copy_b")
    for lib in a.glob("*.so"):
        lib.unlink()
    for f in b.iterdir():
        if f.is_file():
            (a / f.name).write_bytes(f.read_bytes())
    again = scaled("copy_a", 2)
    assert result(again) == 2.0 and compiles(again) == 1
    text = (a / "manifest").read_text()
    (a / "manifest").write_text(text[: text.index("\ndep ") + 1])  # cut after the library line
    cut = scaled("copy_a", 2)
    assert result(cut) == 2.0
    assert (a / "manifest").read_text().endswith("end\n"), "an incomplete manifest must be replaced by a complete one"


def test_planted_toolchain_record_in_a_foreign_writable_directory_is_refused(cache_dir, tmp_path):
    cache_dir.mkdir(mode=0o700)
    (cache_dir / "toolchains").mkdir()
    (cache_dir / "toolchains").chmod(0o777)
    with pytest.raises(RuntimeError, match=r"refusing toolchain cache directory .*writable by group/others"):
        scale_module("planted", 2)
    (cache_dir / "toolchains").chmod(0o700)
    scale_module("planted", 2)
    (record,) = (cache_dir / "toolchains").glob("*.txt")
    record.chmod(0o666)
    code = f"import jitkern; jitkern.load_jit('planted2', cpp_files=[{str(KERNELS / 'scale_cpu.h')!r}], cpp_wrappers=[('scale', 'scale<2>')])"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "refusing toolchain record" in proc.stderr, proc.stderr


def test_compiler_killed_by_a_signal_is_retried_not_remembered(cache_dir, workdir, tmp_path):
    cxx = wrapper(tmp_path, 'kill -9 $$')
    killed = child(workdir, env={"CXX": str(cxx)})
    assert killed.returncode != 0 and "killed by signal 9" in killed.stderr and "not remembered" in killed.stderr, killed.stderr
    normal = child(workdir)  # no JITKERN_RETRY_FAILED
    assert result(normal) == 2.0 and compiles(normal) == 1


def test_hung_compiler_times_out_and_is_killed(cache_dir, workdir, tmp_path):
    pidfile = tmp_path / "hung.pid"
    cxx = wrapper(tmp_path, f'echo $$ > {pidfile}\nexec sleep 1000')
    t0 = time.time()
    hung = child(workdir, env={"CXX": str(cxx), "JITKERN_COMPILE_TIMEOUT": "2"})
    assert hung.returncode != 0 and "timed out" in hung.stderr and "JITKERN_COMPILE_TIMEOUT=2" in hung.stderr, hung.stderr
    assert time.time() - t0 < 60
    with pytest.raises(ProcessLookupError):
        os.kill(int(pidfile.read_text()), 0)
    assert result(child(workdir)) == 2.0, "a timeout is not remembered"
    # every setting is checked on every load: a typo shows at once, not at the first miss hours later
    bad = child(workdir, env={"JITKERN_COMPILE_TIMEOUT": "soon"})
    assert bad.returncode != 0 and "JITKERN_COMPILE_TIMEOUT='soon': expected a positive number of seconds" in bad.stderr


def compiling_child(workdir, tmp_path, **env):
    """The child, started with a host compiler that records its pid and sleeps, once that compiler runs:
    (the process, the compiler's pid file)."""
    pidfile = tmp_path / "slow.pid"
    cxx = wrapper(tmp_path, f'echo $$ > {pidfile}\nexec sleep 1000')
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(workdir)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, CXX=str(cxx), **env))
    deadline = time.time() + 60
    while not pidfile.exists() or not pidfile.read_text().strip():
        assert time.time() < deadline and proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    return proc, pidfile


def test_interrupt_ends_the_compile_and_kills_the_compiler(cache_dir, workdir, tmp_path):
    proc, pidfile = compiling_child(workdir, tmp_path)
    t0 = time.time()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert time.time() - t0 < 10 and "KeyboardInterrupt" in err, err
    with pytest.raises(ProcessLookupError):
        os.kill(int(pidfile.read_text()), 0)
    assert result(child(workdir)) == 2.0, "an interrupted compile is not remembered"


def test_an_ignored_interrupt_leaves_the_compile_running(cache_dir, workdir, tmp_path):
    """A process that ignores SIGINT (a background job, a worker whose parent takes Ctrl-C) keeps ignoring it
    while it compiles: the compiler runs on; SIGTERM, not ignored, still ends the compile and the process."""
    proc, pidfile = compiling_child(workdir, tmp_path, CHILD_IGNORES_SIGINT="1")
    proc.send_signal(signal.SIGINT)
    time.sleep(1.0)
    assert proc.poll() is None, f"an ignored SIGINT ended the compile: {proc.communicate()[1]}"
    os.kill(int(pidfile.read_text()), 0)  # the compiler runs on
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGTERM, (proc.returncode, err)
    with pytest.raises(ProcessLookupError):
        os.kill(int(pidfile.read_text()), 0)


def test_bogus_library_reported_as_success_is_not_published(cache_dir, workdir, tmp_path):
    # The wrapper writes garbage where the library should be and exits 0.
    cxx = wrapper(tmp_path, 'out=""; prev=""; for a in "$@"; do [ "$prev" = "-o" ] && out="$a"; prev="$a"; done\n'
                            'echo garbage > "$out"; exit 0')
    bogus = child(workdir, env={"CXX": str(cxx)})
    assert bogus.returncode != 0 and "not an ELF file" in bogus.stderr and "not remembered" in bogus.stderr, bogus.stderr
    assert result(child(workdir)) == 2.0


def test_missing_header_restored_later_is_retried(cache_dir, workdir):
    (workdir / "factor_value.h").unlink()
    missing = child(workdir)
    assert missing.returncode != 0 and "factor_value.h" in missing.stderr
    again = child(workdir)
    assert "remembered this failure" in again.stderr, "unchanged inputs: the failure is remembered"
    (workdir / "factor_value.h").write_text("#define FACTOR 4\n")
    assert result(child(workdir)) == 4.0


def test_eight_threads_into_a_fresh_cache(cache_dir):
    errors, paths = [], {}

    def build(i):
        try:
            paths[i] = jitkern.JitSpec(f"threads_{i}", cpp_files=[str(KERNELS / "scale_cpu.h")],
                                       cpp_wrappers=[("scale", f"scale<{i + 1}>")]).build()
            scale_module(f"threads_{i}", i + 1)
        except Exception as e:  # noqa: BLE001
            errors.append(repr(e))

    threads = [threading.Thread(target=build, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert len(set(paths.values())) == 8
    assert not list(cache_dir.rglob("*.tmp.*")), "no temporary files may be left behind"


def test_leftover_scratch_directories_are_removed(cache_dir, workdir):
    assert result(child(workdir)) == 2.0
    entry = entry_of(cache_dir, "factor")
    dead = entry / "build-999999-abcdef"  # no such process
    (dead / "nvcc").mkdir(parents=True)
    (dead / "nvcc" / "big.o").write_bytes(b"x" * 1000)
    (entry / "manifest.tmp.999999.1.2.3").write_text("half")
    old = time.time() - 120  # a temporary file younger than a minute may be another host's write in flight
    os.utime(entry / "manifest.tmp.999999.1.2.3", (old, old))
    (workdir / "factor_value.h").write_text("#define FACTOR 7\n")
    assert result(child(workdir)) == 7.0
    assert not dead.exists() and not (entry / "manifest.tmp.999999.1.2.3").exists()


def test_touched_header_is_rehashed_once(cache_dir, workdir):
    assert result(child(workdir)) == 2.0
    header = workdir / "factor_value.h"
    os.utime(header, ns=(time.time_ns(), time.time_ns()))
    assert compiles(child(workdir)) == 0
    mtime = str(header.stat().st_mtime_ns)
    lines = [l for l in (entry_of(cache_dir, "factor") / "manifest").read_text().splitlines() if l.endswith("/factor_value.h")]
    assert lines and lines[0].split()[2] == mtime, "the manifest records the touched header's new mtime"


def test_symlinked_cache_directory_is_refused_with_the_reason(tmp_path, monkeypatch):
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    (tmp_path / "link").symlink_to(real)
    monkeypatch.setenv("JITKERN_CACHE_DIR", str(tmp_path / "link"))
    with pytest.raises(RuntimeError, match=r"cache directory .*link: it is a symbolic link .*give the real directory"):
        jitkern.JitSpec("symlinked", cpp_files=[str(KERNELS / "scale_cpu.h")], cpp_wrappers=[("scale", "scale<2>")]).build()


def test_an_empty_numpy_array_is_contiguous(cache_dir):
    """numpy gives empty arrays stride 0; they still pass as contiguous."""
    m = scale_module("empty_numpy", 2)
    empty = np.zeros(0, dtype=np.float32)
    m.scale(np.zeros(0, dtype=np.float32), empty)


def test_numpy_scalars_are_template_arguments():
    assert jitkern.make_cpp_args(np.float64(0.1), np.int64(3), np.float32(0.5)) == ["0.1", "3", "0.5"]


def test_reserved_export_names_nul_bytes_and_newlines_are_refused(cache_dir):
    for reserved in ("path", "exports", "__dict__"):
        with pytest.raises(ValueError, match=f"export name '{reserved}' is reserved"):
            jitkern.load_jit("reserved", cpp_files=[str(KERNELS / "scale_cpu.h")], cpp_wrappers=[(reserved, "scale<2>")])
    with pytest.raises(ValueError, match="extra_cflags entry contains a NUL byte"):
        jitkern.load_jit("nul", cpp_files=[str(KERNELS / "scale_cpu.h")], cpp_wrappers=[("scale", "scale<2>")], extra_cflags=["-DX\0Y"])
    with pytest.raises(ValueError, match="name entry 'a\nb' contains a newline"):
        jitkern.load_jit("a\nb", cpp_files=[str(KERNELS / "scale_cpu.h")])


def test_a_cuda_home_without_nvcc_is_named(cache_dir, monkeypatch, tmp_path):
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))
    monkeypatch.setenv("JITKERN_CUDA_ARCH", "sm_90a")
    with pytest.raises(RuntimeError, match=f"CUDA_HOME={tmp_path} has no bin/nvcc"):
        jitkern.JitSpec("no_nvcc", cuda_files=["add_constant.cuh"], cuda_wrappers=[("f", "add_constant<1>")]).build()


def test_cache_without_home_is_private_to_the_user(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("HOME", "JITKERN_CACHE_DIR")}
    code = f"import jitkern; print(jitkern.JitSpec('nohome', cpp_files=[{str(KERNELS / 'scale_cpu.h')!r}], cpp_wrappers=[('scale', 'scale<2>')]).build())"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().startswith(f"/tmp/jitkern-{os.geteuid()}/.cache/jitkern/nohome-")
