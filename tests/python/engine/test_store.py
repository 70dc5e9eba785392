"""The cache holds on every ordinary setup: unusual characters in paths, retargeted deploy symlinks,
user headers beside the compiler, foreign libraries, umask 002, read-only caches and homes, missing
lock directories, caches shared between users, `cache verify` beside serving, failures caused by the
configuration or a full disk, trust of prebuilt layers, `prebuild` into a given cache, a warm path
without subprocesses, bad settings. Each test asserts what SHOULD happen. CPU only: C++ modules are
loaded and run, CUDA modules (a tiny kernel) are only built, with JITKERN_CUDA_ARCH=sm_90a.

Tests that need root, setpriv (children as user nobody) or unshare -m (read-only bind mounts) are
skipped, with the reason, where those are unavailable."""

import functools
import hashlib
import json
import os
import re
import shlex
import shutil
import struct
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

import jitkern
from conftest import KERNELS, child_env

NOBODY = 65534
FACTOR_CPU = (KERNELS / "factor_cpu.h").read_text()
CUDA_KERNEL = '#include "value.h"\n__global__ void fill(int* p) { *p = VALUE; }\ninline int64_t value() { return VALUE; }\n'
USERLIB_CPU = "#include <cstdint>\n#include <userlib.h>\ninline int64_t value() { return USERLIB_VALUE; }\n"
USERLIB_CUDA = ("#include <userlib.h>\n__global__ void fill(int* p) { *p = USERLIB_VALUE; }\n"
                "inline int64_t value() { return USERLIB_VALUE; }\n")
# scale_cpu.h plus 16 MiB of initialised data (a library of a realistic size for case 9).
BALLAST_CPU = """#include "{scale_cpu}"
static const volatile unsigned char kBallast[16 << 20] = {{1}};
inline int64_t ballast() {{ return kBallast[0]; }}
"""
# Settings that change how a child serves; children start without them unless a test sets them.
SERVING_SETTINGS = ("JITKERN_ON_MISS", "JITKERN_PREBUILT_DIRS", "JITKERN_LOCK_DIR", "JITKERN_QUIET", "JITKERN_RETRY_FAILED",
                    "JITKERN_COMPILE_TIMEOUT", "JITKERN_NVCC_PIPELINE", "JITKERN_INCLUDE_DIR", "JITKERN_TVM_FFI_LIB")

# Loads the module whose JitSpec fields are argv[1] (JSON) and calls its export `f`: with two float32
# arrays (mode "tensor": f(out, in), prints out[1], i.e. the factor) or with none (mode "value").
LOADER = textwrap.dedent(
    """
    import json, sys
    import numpy as np, jitkern
    fields = json.loads(sys.argv[1])
    try:
        m = jitkern.JitSpec(*fields.pop("args"), **fields).load()
        if sys.argv[2] == "tensor":
            a = np.arange(4, dtype=np.float32); b = np.full_like(a, np.nan)
            m.f(b, a)
            print("RESULT", float(b[1]))
        else:
            print("RESULT", float(m.f()))
    except Exception as e:
        print("ERROR", type(e).__name__, (str(e).splitlines() or [""])[0], flush=True)
        raise
    """
)

# A strict loader for case 9: one load (and call) in this fresh interpreter, then builds through the
# same warm path (build() is not memoised) for argv[2] seconds; prints how many of them failed.
STRICT_LOOP = textwrap.dedent(
    """
    import json, sys, time
    import numpy as np, jitkern
    fields = json.loads(sys.argv[1])
    spec = jitkern.JitSpec(*fields.pop("args"), **fields)
    failures, first = 0, ""
    def attempt(fn):
        global failures, first
        try:
            fn()
        except Exception as e:
            failures += 1
            first = first or f"{type(e).__name__}: {(str(e).splitlines() or [''])[0]}"
    def load_and_run():
        m = spec.load(); a = np.ones(2, np.float32); b = np.zeros_like(a); m.f(b, a)
        assert b[0] > 1, b
    attempt(load_and_run)
    n, end = 1, time.monotonic() + float(sys.argv[2])
    while time.monotonic() < end or n < 30:
        attempt(spec.build)
        n += 1
    print("FAILURES", failures, "OF", n, first)
    """
)

# `jitkern cache verify` in a loop until argv[2] exists; touches argv[2].started after the first run.
VERIFY_LOOP = textwrap.dedent(
    """
    import contextlib, io, os, sys
    from jitkern import cli
    cache, stop, n = sys.argv[1], sys.argv[2], 0
    while not os.path.exists(stop):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            rc = cli.main(["cache", "verify", "--cache-dir", cache])
        if rc != 0 or "removed" in out.getvalue():
            print("VERIFY SAID", rc, out.getvalue())
        n += 1
        if n == 1:
            open(stop + ".started", "w").close()
    print("VERIFIED", n)
    """
)


# ---------------------------------------------------------------------------------------------- helpers


def clean_env(**overrides) -> dict:
    """os.environ without the settings that change serving, plus `overrides` (a None value removes the variable)."""
    return child_env(SERVING_SETTINGS, **overrides)


def run(argv, env, *, as_nobody=False, read_only=(), umask=None, cwd=None, timeout=300) -> subprocess.CompletedProcess:
    """Runs argv with env, optionally as user nobody, under read-only bind mounts of `read_only` and with a umask."""
    argv = [str(a) for a in argv]
    if as_nobody:
        argv = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *argv]
    if read_only:
        mounts = " && ".join(f"mount --bind -o ro {shlex.quote(str(d))} {shlex.quote(str(d))}" for d in read_only)
        argv = ["unshare", "-m", "sh", "-c", mounts + ' && exec "$@"', "sh", *argv]
    preexec = (lambda: os.umask(umask)) if umask is not None else None
    return subprocess.run(argv, capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout, preexec_fn=preexec)


def load(fields: dict, env: dict, mode: str = "tensor", **kw) -> subprocess.CompletedProcess:
    """Loads the module described by `fields` in a fresh interpreter and calls its export f (see LOADER)."""
    return run([sys.executable, "-c", LOADER, json.dumps(fields), mode], env, **kw)


def run_cli(*args, env: dict, **kw) -> subprocess.CompletedProcess:
    """Runs the `jitkern` command in a child process."""
    return run([sys.executable, "-m", "jitkern", *args], env, **kw)


def result(proc) -> float:
    """The value a LOADER child printed, after asserting that it succeeded."""
    assert proc.returncode == 0, f"the load failed (exit {proc.returncode}): {error_line(proc)}\n{proc.stderr[-3000:]}"
    return float([line for line in proc.stdout.splitlines() if line.startswith("RESULT")][-1].split()[1])


def error_line(proc) -> str:
    """The 'ERROR <type> <first line>' a LOADER child printed, or its stderr's last line."""
    lines = [line for line in proc.stdout.splitlines() if line.startswith("ERROR")]
    return lines[-1] if lines else (proc.stderr.strip().splitlines() or [""])[-1]


def error_type(proc) -> str:
    """The class name of the exception a LOADER child raised ('' if none)."""
    lines = [line for line in proc.stdout.splitlines() if line.startswith("ERROR")]
    return lines[-1].split()[1] if lines else ""


def compiles(proc) -> int:
    """How many compiles a child announced."""
    return proc.stderr.count("jitkern: compiling")


def write(path: Path, text: str) -> Path:
    """Writes text (creating parents), dated 2 s back so that no build takes it for an edit made during its compile."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    past = time.time_ns() - 2_000_000_000
    os.utime(path, ns=(past, past))
    return path


def script(path: Path, body: str) -> Path:
    """Writes an executable /bin/sh script."""
    write(path, "#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)
    return path


def scale_fields(name: str, factor: int) -> dict:
    """JitSpec fields of a module exporting f = scale<factor> (kernels/scale_cpu.h)."""
    return {"args": [name], "cpp_files": [str(KERNELS / "scale_cpu.h")], "cpp_wrappers": [["f", f"scale<{factor}>"]]}


def factor_fields(name: str, kernel: Path, includes=()) -> dict:
    """JitSpec fields of a module exporting f = apply_factor from `kernel` (a copy of kernels/factor_cpu.h)."""
    fields = {"args": [name], "cpp_files": [str(kernel)], "cpp_wrappers": [["f", "apply_factor"]]}
    if includes:
        fields["extra_include_paths"] = [str(d) for d in includes]
    return fields


def spec(fields: dict) -> jitkern.JitSpec:
    """The JitSpec of `fields` (for builds in this process)."""
    fields = dict(fields)
    return jitkern.JitSpec(*fields.pop("args"), **fields)


def entry_of(cache: Path, name: str) -> Path:
    """The one entry directory of module `name` in `cache`."""
    found = [p for p in cache.iterdir() if p.is_dir() and re.fullmatch(re.escape(name) + r"-[0-9a-f]{20}", p.name)]
    assert len(found) == 1, (name, sorted(p.name for p in cache.iterdir()))
    return found[0]


def library_of(entry: Path) -> Path:
    """The library the entry's manifest names."""
    line = next(line for line in (entry / "manifest").read_text().splitlines() if line.startswith("lib "))
    return entry / line.split(" ", 4)[4]


def listed(cache: Path, env: dict) -> dict:
    """`jitkern cache ls --json --cache-dir cache`: module name -> entry."""
    proc = run_cli("cache", "ls", "--json", "--cache-dir", cache, env=env)
    assert proc.returncode == 0, proc.stderr
    return {e["module"] or e["stem"]: e for e in json.loads(proc.stdout)["entries"]}


def retarget(link: Path, target: str) -> None:
    """Points the symbolic link `link` at `target` atomically (a new link renamed over the old one)."""
    new = link.with_name(link.name + ".new")
    if new.is_symlink():
        new.unlink()
    os.symlink(target, new)
    os.replace(new, link)


def real_cxx() -> str:
    """The C++ compiler builds use (CXX, else c++), as a path found on PATH."""
    found = shutil.which(os.environ.get("CXX") or "c++")
    assert found, "no C++ compiler"
    return found


def real_nvcc() -> str:
    """The nvcc a build would use (CUDA_HOME's, else PATH's); skips the test when there is none."""
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    found = os.path.join(home, "bin", "nvcc") if home else shutil.which("nvcc")
    if not found or not os.access(found, os.X_OK):
        pytest.skip("NOT RUN: nvcc is not installed")
    return found


def sha256_field(*values: str) -> str:
    """Sha256 over length-prefixed fields, as src/engine/base/sha256.cc's Sha256::field (a native 64-bit length, then the bytes)."""
    h = hashlib.sha256()
    for v in values:
        data = v.encode()
        h.update(struct.pack("=Q", len(data)) + data)
    return h.hexdigest()


def resign_library(entry_dir: Path) -> None:
    """Re-signs a cache entry whose library was rewritten: the manifest's lib line (size, mtime_ns, sha256, name) and <lib>.sha256."""
    manifest = entry_dir / "manifest"
    lines = manifest.read_text().split("\n")
    full_key = next(line for line in lines if line.startswith("key "))[4:]
    i = next(i for i, line in enumerate(lines) if line.startswith("lib "))
    name = lines[i].split(" ", 4)[4]
    lib = entry_dir / name
    sha = hashlib.sha256(lib.read_bytes()).hexdigest()
    st = lib.stat()
    lines[i] = f"lib {st.st_size} {st.st_mtime_ns} {sha} {name}"
    manifest.write_text("\n".join(lines))
    (entry_dir / f"{name}.sha256").write_text(sha256_field("jitkern-library", full_key, sha))


def make_foreign(entry_dir: Path, machine: int = 183) -> None:
    """Rewrites the entry's library's ELF e_machine (183: aarch64) and re-signs the entry consistently."""
    with open(library_of(entry_dir), "r+b") as f:
        f.seek(18)
        f.write(machine.to_bytes(2, "little"))
    resign_library(entry_dir)


def chown_tree(root: Path, uid: int) -> None:
    """chown -R uid:uid root (symbolic links themselves)."""
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            os.chown(os.path.join(dirpath, name), uid, uid, follow_symlinks=False)
    os.chown(root, uid, uid)


def require_nobody() -> None:
    """Skips the test unless children can run as user nobody (root and setpriv)."""
    if os.geteuid() != 0:
        pytest.skip("NOT RUN: needs root to run a child as user nobody (setpriv)")
    if shutil.which("setpriv") is None:
        pytest.skip("NOT RUN: setpriv is not installed (needed to run a child as user nobody)")


@functools.lru_cache(maxsize=None)
def _bind_mounts_work() -> bool:
    """Whether a read-only bind mount in a private mount namespace works here."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    d = tempfile.mkdtemp(prefix="jitkern-ro-probe-")
    try:
        probe = subprocess.run(["unshare", "-m", "sh", "-c", f"mount --bind -o ro {d} {d} && ! touch {d}/x 2>/dev/null"],
                               capture_output=True, timeout=60)
        return probe.returncode == 0 and not os.path.exists(os.path.join(d, "x"))
    finally:
        shutil.rmtree(d, ignore_errors=True)


def require_read_only_mounts() -> None:
    """Skips the test unless read-only bind mounts (root, unshare -m) are available."""
    if not _bind_mounts_work():
        pytest.skip("NOT RUN: needs root and `unshare -m` with `mount --bind -o ro` for read-only bind mounts")


@pytest.fixture
def open_dir():
    """A fresh directory under /tmp with mode 0755 (pytest's tmp_path is private to root), removed afterwards."""
    d = Path(tempfile.mkdtemp(prefix="jitkern-store-", dir="/tmp"))
    d.chmod(0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


PREBUILT = [scale_fields("pre_a", 2), scale_fields("pre_b", 3)]


@pytest.fixture(scope="module")
def prebuilt():
    """A cache made by `jitkern prebuild --spec-file` as this user with umask 022, directly under /tmp (mode 0755), holding PREBUILT."""
    d = Path(tempfile.mkdtemp(prefix="jitkern-prebuilt-", dir="/tmp"))
    d.chmod(0o755)
    fd, spec_file = tempfile.mkstemp(prefix="jitkern-prebuilt-", suffix=".json")
    os.close(fd)
    try:
        Path(spec_file).write_text(json.dumps(PREBUILT))
        proc = run_cli("prebuild", "--spec-file", spec_file, "--cache-dir", d, env=clean_env(JITKERN_CACHE_DIR=None), umask=0o022)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        yield d
    finally:
        os.unlink(spec_file)
        shutil.rmtree(d, ignore_errors=True)


# ---------------------------------------------------------------------------------------------- 1


SPECIAL_DIRS = ["issue#42", "my$proj", "a:b", "with space"]
# The CUDA builds (a compile of a few seconds each) take every special character in one directory's name.
ALL_SPECIAL = "issue#42 my$proj a:b"
CASE01 = [(where, "c++") for where in (*SPECIAL_DIRS, "include path my$proj")]
CASE01 += [(where, nvcc) for nvcc in ("nvcc pipeline", "nvcc one command") for where in (ALL_SPECIAL, "include path my$proj")]


@pytest.mark.parametrize(("where", "compiler"), CASE01)
def test_case01_header_in_a_path_with_special_characters_is_tracked(cache_dir, tmp_path, monkeypatch, where, compiler):
    """Case 1: a kernel and the header it includes in a directory whose name holds #, $, : or a space
    (or the header in an extra_include_paths directory with a $): editing the header rebuilds."""
    if where.startswith("include path"):
        kernel_dir, header_dir = tmp_path / "plain", tmp_path / where.split()[-1]
        includes = [header_dir]
    else:
        kernel_dir = header_dir = tmp_path / where
        includes = []
    if compiler == "c++":
        kernel = write(kernel_dir / "factor_cpu.h", FACTOR_CPU)
        header = write(header_dir / "factor_value.h", "#define FACTOR 2\n")
        fields = factor_fields("paths", kernel, includes)
        first = load(fields, clean_env())
        assert result(first) == 2.0 and compiles(first) == 1
        write(header, "#define FACTOR 3\n")
        edited = load(fields, clean_env())
        assert result(edited) == 3.0, f"editing {header} must rebuild the module (it served the old value)"
        warm = load(fields, clean_env())
        assert result(warm) == 3.0 and compiles(warm) == 0
        return
    real_nvcc()
    monkeypatch.setenv("JITKERN_CUDA_ARCH", "sm_90a")
    monkeypatch.setenv("JITKERN_NVCC_PIPELINE", "1" if compiler == "nvcc pipeline" else "0")
    kernel = write(kernel_dir / "k.cuh", CUDA_KERNEL)
    header = write(header_dir / "value.h", "#define VALUE 2\n")
    cuda = jitkern.JitSpec("paths_cu", cuda_files=[str(kernel)], cuda_wrappers=[("value", "value")],
                           extra_include_paths=[str(d) for d in includes])
    _, compiled = cuda._build_reporting()
    assert compiled
    write(header, "#define VALUE 3\n")
    second, compiled = cuda._build_reporting()
    assert compiled, f"editing {header} must recompile the CUDA module"
    third, compiled = cuda._build_reporting()
    assert not compiled and third == second, "an unchanged module must be served from the cache"


# ---------------------------------------------------------------------------------------------- 2


@pytest.mark.parametrize("link", ["kernel directory", "include directory"])
def test_case02_retargeted_deploy_symlink_serves_the_new_target(cache_dir, tmp_path, link):
    """Case 2: `current -> v1` switched atomically to `current -> v2` (the kernel's directory, or an
    extra_include_paths directory) serves v2's value; switched back, v1's."""
    if link == "kernel directory":
        for version, factor in (("v1", 2), ("v2", 5)):
            write(tmp_path / version / "factor_cpu.h", FACTOR_CPU)
            write(tmp_path / version / "factor_value.h", f"#define FACTOR {factor}\n")
        current = tmp_path / "current"
        targets = {"v1": "v1", "v2": "v2"}
        fields = factor_fields("deploy", current / "factor_cpu.h")
    else:
        for version, factor in (("v1", 2), ("v2", 5)):
            write(tmp_path / f"inc-{version}" / "factor_value.h", f"#define FACTOR {factor}\n")
        current = tmp_path / "inc"
        targets = {"v1": "inc-v1", "v2": "inc-v2"}
        fields = factor_fields("deploy", write(tmp_path / "kernel" / "factor_cpu.h", FACTOR_CPU), [current])
    retarget(current, targets["v1"])
    assert result(load(fields, clean_env())) == 2.0
    retarget(current, targets["v2"])
    assert result(load(fields, clean_env())) == 5.0, f"{current} now points at {targets['v2']}: its value must be served"
    retarget(current, targets["v1"])
    assert result(load(fields, clean_env())) == 2.0, f"{current} points at {targets['v1']} again: its value must be served"


# ---------------------------------------------------------------------------------------------- 3


@pytest.mark.parametrize("compiler", ["c++ symlink", "c++ wrapper", "nvcc symlink", "nvcc wrapper"])
def test_case03_user_header_under_the_compiler_prefix_is_tracked(cache_dir, tmp_path, monkeypatch, compiler):
    """Case 3: a user package's header in the compiler's installation prefix (P/include beside P/bin/c++,
    or Q/include beside Q/bin/nvcc with CUDA_HOME=Q) is not the toolkit's own: editing it rebuilds."""
    tool, kind = compiler.split()
    prefix = tmp_path / "prefix"
    (prefix / "bin").mkdir(parents=True)
    userlib = write(prefix / "include" / "userlib.h", "#define USERLIB_VALUE 7\n")
    if tool == "c++":
        exe = prefix / "bin" / "c++"
        if kind == "symlink":
            exe.symlink_to(real_cxx())
        else:
            script(exe, f'exec {shlex.quote(real_cxx())} "$@"')
        kernel = write(tmp_path / "kernel" / "userlib_kernel.h", USERLIB_CPU)
        fields = {"args": ["userlib"], "cpp_files": [str(kernel)], "cpp_wrappers": [["f", "value"]],
                  "extra_include_paths": [str(prefix / "include")]}
        env = clean_env(CXX=exe)
        assert result(load(fields, env, mode="value")) == 7.0
        write(userlib, "#define USERLIB_VALUE 8\n")
        assert result(load(fields, env, mode="value")) == 8.0, f"editing {userlib} (not the toolkit's) must rebuild"
        return
    nvcc = os.path.realpath(real_nvcc())
    toolkit = Path(nvcc).parent.parent
    if kind == "symlink":
        # nvcc finds cicc, its profile and its headers beside the path it was run as: a CUDA_HOME-like
        # prefix of symbolic links into the real toolkit (bin/nvcc alone cannot run).
        for f in Path(nvcc).parent.iterdir():
            (prefix / "bin" / f.name).symlink_to(f)
    else:
        script(prefix / "bin" / "nvcc", f'exec {shlex.quote(nvcc)} "$@"')
    for sub in ("nvvm", "targets", "lib64"):
        if (toolkit / sub).exists():
            (prefix / sub).symlink_to(toolkit / sub)
    monkeypatch.setenv("CUDA_HOME", str(prefix))
    monkeypatch.setenv("JITKERN_CUDA_ARCH", "sm_90a")
    kernel = write(tmp_path / "kernel" / "userlib.cuh", USERLIB_CUDA)
    cuda = jitkern.JitSpec("userlib_cu", cuda_files=[str(kernel)], cuda_wrappers=[("value", "value")],
                           extra_include_paths=[str(prefix / "include")])
    _, compiled = cuda._build_reporting()
    assert compiled
    write(userlib, "#define USERLIB_VALUE 8\n")
    _, compiled = cuda._build_reporting()
    assert compiled, f"editing {userlib} (a user header in CUDA_HOME's include/, not the toolkit's) must recompile"


# ---------------------------------------------------------------------------------------------- 4


@pytest.mark.parametrize("then", ["load", "strict load", "cache verify"])
def test_case04_library_for_another_machine_is_a_miss(cache_dir, then):
    """Case 4: a consistently signed library whose ELF e_machine is aarch64's is a miss: a load rebuilds,
    a strict load raises CacheMissError (not dlopen's RuntimeError), `cache verify` removes the entry."""
    fields = scale_fields("foreign", 4)
    spec(fields).build()
    entry = entry_of(cache_dir, "foreign")
    make_foreign(entry)
    if then == "load":
        proc = load(fields, clean_env())
        assert result(proc) == 4.0 and compiles(proc) == 1, "a library for another machine must be rebuilt"
    elif then == "strict load":
        proc = load(fields, clean_env(JITKERN_ON_MISS="error"))
        assert proc.returncode != 0 and error_type(proc) == "CacheMissError", \
            f"expected CacheMissError, got: {error_line(proc) if proc.returncode else 'success'}"
    else:
        proc = run_cli("cache", "verify", "--cache-dir", cache_dir, env=clean_env())
        assert proc.returncode == 0, proc.stderr
        assert not entry.exists(), f"`cache verify` must remove an entry whose library is for another machine; it said:\n{proc.stdout}"


# ---------------------------------------------------------------------------------------------- 5


@pytest.mark.parametrize("how", ["three loaders", "prebuild"])
def test_case05_umask_002(cache_dir, tmp_path, how):
    """Case 5: under umask 002 the first of three loaders compiles and the others load from the cache;
    `jitkern prebuild` under umask 002 makes a cache that serves a strict process."""
    fields = scale_fields("umask", 5)
    if how == "three loaders":
        first = load(fields, clean_env(), umask=0o002)
        assert result(first) == 5.0 and compiles(first) == 1
        for i in (2, 3):
            again = load(fields, clean_env(), umask=0o002)
            assert result(again) == 5.0 and compiles(again) == 0, f"loader {i} must load from the cache"
        return
    spec_file = write(tmp_path / "specs.json", json.dumps([fields]))
    target = tmp_path / "prebuilt"
    made = run_cli("prebuild", "--spec-file", spec_file, "--cache-dir", target, env=clean_env(), umask=0o002)
    assert made.returncode == 0, made.stdout + made.stderr
    proc = load(fields, clean_env(JITKERN_PREBUILT_DIRS=target, JITKERN_ON_MISS="error", JITKERN_CACHE_DIR=tmp_path / "empty"))
    assert result(proc) == 5.0, "a cache prebuilt under umask 002 must serve"


# ---------------------------------------------------------------------------------------------- 6


@pytest.mark.parametrize("how", ["read-only mount", "read-only mount, no locks/", "nobody, chmod a-w, no locks/"])
def test_case06a_read_only_cache_with_the_entry_serves_strict(open_dir, how):
    """Case 6a: a cache directory that holds the entry, made read-only (a read-only bind mount, or
    chmod a-w for its owner nobody), also without its locks/, serves a strict load."""
    if how.startswith("nobody"):
        require_nobody()
    else:
        require_read_only_mounts()
    cache = open_dir / "cache"
    fields = scale_fields("readonly", 6)
    assert result(load(fields, clean_env(JITKERN_CACHE_DIR=cache))) == 6.0
    if "no locks" in how:
        shutil.rmtree(cache / "locks")
    env = clean_env(JITKERN_CACHE_DIR=cache, JITKERN_ON_MISS="error")
    if how.startswith("nobody"):
        home = open_dir / "home"
        home.mkdir(mode=0o700)
        os.chown(home, NOBODY, NOBODY)
        chown_tree(cache, NOBODY)
        for dirpath, dirnames, filenames in os.walk(cache):
            for name in [*dirnames, *filenames]:
                p = os.path.join(dirpath, name)
                os.chmod(p, os.stat(p).st_mode & ~0o222)
        cache.chmod(0o500)
        proc = load(fields, dict(env, HOME=str(home)), as_nobody=True, cwd=open_dir)
    else:
        proc = load(fields, env, read_only=[cache])
    assert result(proc) == 6.0, "a read-only cache that holds the entry must serve it in strict mode"


def test_case06b_read_only_home_with_everything_prebuilt(open_dir, prebuilt):
    """Case 6b: a read-only HOME, JITKERN_CACHE_DIR unset and every module in JITKERN_PREBUILT_DIRS:
    a strict load serves and creates nothing under HOME."""
    require_read_only_mounts()
    home = open_dir / "home"
    home.mkdir(mode=0o755)
    env = clean_env(HOME=home, JITKERN_CACHE_DIR=None, JITKERN_PREBUILT_DIRS=prebuilt, JITKERN_ON_MISS="error")
    proc = load(PREBUILT[0], env, read_only=[home])
    assert result(proc) == 2.0, "a fully prebuilt module must serve with a read-only HOME"
    assert result(load(PREBUILT[0], env)) == 2.0
    assert list(home.iterdir()) == [], "serving from a prebuilt layer creates nothing under a writable HOME either"


# ---------------------------------------------------------------------------------------------- 7


@pytest.mark.parametrize("locks", ["JITKERN_LOCK_DIR", "the cache's locks/"])
def test_case07_missing_lock_directory_is_created_in_strict_mode(cache_dir, tmp_path, locks):
    """Case 7: a lock directory deleted after the build (a reboot, a cache shipped without locks/) is
    created again by a strict load, which succeeds."""
    fields = scale_fields("locks", 7)
    if locks == "JITKERN_LOCK_DIR":
        lock_dir = tmp_path / "locks-a"
        env = clean_env(JITKERN_LOCK_DIR=lock_dir)
    else:
        lock_dir = cache_dir / "locks"
        env = clean_env()
    assert result(load(fields, env)) == 7.0 and lock_dir.is_dir()
    shutil.rmtree(lock_dir)
    proc = load(fields, dict(env, JITKERN_ON_MISS="error"))
    assert result(proc) == 7.0, f"a strict load must succeed without {lock_dir}"
    assert lock_dir.is_dir(), f"{lock_dir} must be created again"


# ---------------------------------------------------------------------------------------------- 8


def test_case08_prebuilt_by_root_serves_another_user(open_dir, prebuilt):
    """Case 8: a cache prebuilt by root with umask 022 into a 0755 directory serves user nobody in
    strict mode."""
    require_nobody()
    home = open_dir / "home"
    home.mkdir(mode=0o700)
    os.chown(home, NOBODY, NOBODY)
    env = clean_env(HOME=home, JITKERN_CACHE_DIR=None, JITKERN_PREBUILT_DIRS=prebuilt, JITKERN_ON_MISS="error")
    proc = load(PREBUILT[1], env, as_nobody=True, cwd=open_dir)
    assert result(proc) == 3.0, "root's prebuilt cache must serve another user"


# ---------------------------------------------------------------------------------------------- 9


def test_case09_cache_verify_beside_strict_loaders(cache_dir, tmp_path):
    """Case 9: 8 strict loader processes, 3 rounds, each a fresh interpreter that loads the cached
    module and then builds it for 1.5 s (the same warm path), while `jitkern cache verify` runs in a
    loop: no load fails and verify removes nothing. The module carries 16 MiB of data, as real kernel
    libraries do, so that each verify spends a realistic time hashing it."""
    kernel = write(tmp_path / "ballast_cpu.h", BALLAST_CPU.format(scale_cpu=KERNELS / "scale_cpu.h"))
    fields = {"args": ["busy"], "cpp_files": [str(kernel)], "cpp_wrappers": [["f", "scale<9>"], ["ballast", "ballast"]]}
    assert os.path.getsize(spec(fields).build()) > 16 << 20
    stop = tmp_path / "stop"
    verifier = subprocess.Popen([sys.executable, "-c", VERIFY_LOOP, str(cache_dir), str(stop)], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=clean_env())
    failures, attempts, first = 0, 0, ""
    try:
        deadline = time.time() + 120
        while not Path(f"{stop}.started").exists():
            assert verifier.poll() is None and time.time() < deadline, verifier.communicate()
            time.sleep(0.05)
        for _ in range(3):
            loaders = [subprocess.Popen([sys.executable, "-c", STRICT_LOOP, json.dumps(fields), "1.5"], stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True, env=clean_env(JITKERN_ON_MISS="error", JITKERN_QUIET=1))
                       for _ in range(8)]
            for p in loaders:
                out, err = p.communicate(timeout=300)
                line = [l for l in out.splitlines() if l.startswith("FAILURES")]
                if p.returncode != 0 or not line:
                    failures, attempts, first = failures + 1, attempts + 1, first or err[-500:]
                    continue
                _, n, _, total, *why = line[0].split(" ", 4)
                failures, attempts = failures + int(n), attempts + int(total)
                first = first or (" ".join(why) if int(n) else "")
    finally:
        stop.touch()
        vout, verr = verifier.communicate(timeout=120)
    assert verifier.returncode == 0 and "VERIFIED" in vout, verr
    assert "VERIFY SAID" not in vout, vout
    assert failures == 0, f"{failures} of {attempts} strict loads failed beside `cache verify` (first: {first})"


# ---------------------------------------------------------------------------------------------- 10


@pytest.mark.parametrize("setting", ["JITKERN_INCLUDE_DIR", "JITKERN_TVM_FFI_LIB"])
def test_case10_failure_caused_by_the_configuration_is_not_remembered(cache_dir, tmp_path, monkeypatch, setting):
    """Case 10: a build that fails because a setting points at an empty directory (headers or
    libtvm_ffi.so missing) is not held against the same build once the setting is unset."""
    for name in ("JITKERN_INCLUDE_DIR", "JITKERN_TVM_FFI_LIB"):
        monkeypatch.delenv(name, raising=False)
    empty = tmp_path / "empty"
    empty.mkdir()
    module = spec(scale_fields("configured", 10))
    monkeypatch.setenv(setting, str(empty))
    with pytest.raises(jitkern.BuildError):
        module.build()
    monkeypatch.delenv(setting)
    try:
        module.build()
    except jitkern.BuildError as e:
        remembered = "remembered this failure" in str(e)
        pytest.fail(f"with {setting} unset the build must succeed; it raised BuildError"
                    f"{' (jitkern remembered this failure)' if remembered else ''}: {str(e).splitlines()[0]}")


# ---------------------------------------------------------------------------------------------- 11


def test_case11_link_out_of_space_is_not_remembered(cache_dir, tmp_path):
    """Case 11: a link that failed with 'No space left on device' is not remembered: the next load
    with the real compiler compiles and succeeds."""
    body = ('for a in "$@"; do\n'
            '  if [ "$a" = "-shared" ]; then\n'
            '    echo "/usr/bin/ld: final link failed: No space left on device" >&2\n'
            '    exit 1\n'
            '  fi\n'
            'done\n'
            f'exec {shlex.quote(real_cxx())} "$@"')
    cxx = script(tmp_path / "bin" / "c++", body)
    fields = scale_fields("nospace", 11)
    full = load(fields, clean_env(CXX=cxx))
    assert full.returncode != 0 and "No space left on device" in full.stderr, full.stderr[-2000:]
    assert "remembered this failure" not in full.stderr
    again = load(fields, clean_env())
    assert "remembered this failure" not in again.stderr, f"a full disk must not be remembered: {error_line(again)}"
    assert result(again) == 11.0 and compiles(again) == 1


# ---------------------------------------------------------------------------------------------- 12


@pytest.mark.parametrize("layout", ["parent world-writable", "top world-writable", "top group-writable", "sticky /tmp parent"])
def test_case12_prebuilt_layer_trust(cache_dir, open_dir, prebuilt, layout):
    """Case 12: a prebuilt layer under a parent writable by others (no sticky bit), or whose top
    directory is group/other-writable, is not used (the load compiles into the writable cache); one
    directly under the sticky, root-owned /tmp is used."""
    if layout == "sticky /tmp parent":
        layer = prebuilt
    else:
        parent = open_dir / "parent"
        parent.mkdir()
        layer = parent / "prebuilt"
        shutil.copytree(prebuilt, layer, symlinks=True)
        if layout == "parent world-writable":
            parent.chmod(0o777)
        else:
            layer.chmod(0o777 if layout == "top world-writable" else 0o775)
    proc = load(PREBUILT[0], clean_env(JITKERN_PREBUILT_DIRS=layer))
    assert result(proc) == 2.0
    if layout == "sticky /tmp parent":
        assert compiles(proc) == 0, "a prebuilt layer directly under /tmp must be used"
    else:
        assert compiles(proc) == 1, f"a prebuilt layer with a {layout.split()[0]} directory writable by others must not be used"


# ---------------------------------------------------------------------------------------------- 13


@pytest.mark.parametrize("what", ["modules already in JITKERN_PREBUILT_DIRS", "build_directory in the spec file"])
def test_case13_prebuild_writes_into_the_given_cache(tmp_path, prebuilt, what):
    """Case 13: `jitkern prebuild --cache-dir X` puts every requested module into X, also those that
    JITKERN_PREBUILT_DIRS already holds; a spec-file entry with build_directory is refused (exit 2,
    naming build_directory) or ends up in X, never silently elsewhere."""
    target = tmp_path / "X"
    env = clean_env(JITKERN_CACHE_DIR=None)
    if what.startswith("modules"):
        specs = [PREBUILT[0], scale_fields("new_c", 13)]
        env["JITKERN_PREBUILT_DIRS"] = str(prebuilt)
    else:
        specs = [dict(scale_fields("elsewhere", 13), build_directory=str(tmp_path / "elsewhere"))]
    spec_file = write(tmp_path / "specs.json", json.dumps(specs))
    proc = run_cli("prebuild", "--spec-file", spec_file, "--cache-dir", target, env=env)
    if what.startswith("modules"):
        assert proc.returncode == 0, proc.stdout + proc.stderr
        have = set(listed(target, env)) if target.exists() else set()
        assert have >= {"pre_a", "new_c"}, f"{target} must hold every requested module; it holds {sorted(have)}"
        return
    refused = proc.returncode == 2 and "build_directory" in proc.stdout + proc.stderr
    honoured = proc.returncode == 0 and target.exists() and "elsewhere" in listed(target, env)
    assert refused or honoured, (f"exit {proc.returncode}; {target} holds "
                                 f"{sorted(listed(target, env)) if target.exists() else 'nothing'}; "
                                 f"{tmp_path / 'elsewhere'} exists: {(tmp_path / 'elsewhere').exists()}")


# ---------------------------------------------------------------------------------------------- 14


def test_case14_warm_path_runs_no_subprocess(tmp_path):
    """Case 14: a fresh node (empty JITKERN_CACHE_DIR, no toolchain records) serving a prebuilt entry
    runs no compiler at all, not even `c++ --version`: the node's compiler is the very file that built
    it (a wrapper logging every run), so nothing needs asking."""
    log = tmp_path / "cxx.log"
    cxx = script(tmp_path / "bin" / "c++", f'echo "$@" >> {shlex.quote(str(log))}\nexec {shlex.quote(real_cxx())} "$@"')
    d = tmp_path / "prebuilt"
    spec_file = write(tmp_path / "specs.json", json.dumps([scale_fields("warm", 4)]))
    proc = run_cli("prebuild", "--spec-file", spec_file, "--cache-dir", d, env=clean_env(CXX=cxx, JITKERN_CACHE_DIR=tmp_path / "build"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "--version" in log.read_text(), "the build itself identifies its compiler"
    log.unlink()
    fresh = tmp_path / "fresh"
    env = clean_env(JITKERN_CACHE_DIR=fresh, JITKERN_PREBUILT_DIRS=d, JITKERN_ON_MISS="error", CXX=cxx)
    assert result(load(scale_fields("warm", 4), env)) == 4.0
    ran = log.read_text() if log.exists() else ""
    assert ran == "", f"the warm path ran the compiler: {ran.splitlines()}"
    assert not fresh.exists(), "serving from a prebuilt layer creates nothing in the writable cache"


# ---------------------------------------------------------------------------------------------- 15


@pytest.mark.parametrize("bad", ["JITKERN_COMPILE_TIMEOUT=inf", "JITKERN_COMPILE_TIMEOUT=1e300", "JITKERN_COMPILE_TIMEOUT=nan",
                                 "directory as cpp_file"])
def test_case15_bad_settings_and_arguments_are_value_errors(cache_dir, tmp_path, monkeypatch, bad):
    """Case 15: JITKERN_COMPILE_TIMEOUT=inf, 1e300 or nan is a ValueError naming the setting on a build
    that needs a compile; a directory given as a cpp_file is a ValueError before any compile."""
    if bad.startswith("JITKERN_COMPILE_TIMEOUT"):
        monkeypatch.setenv("JITKERN_COMPILE_TIMEOUT", bad.split("=")[1])
        with pytest.raises(ValueError, match="JITKERN_COMPILE_TIMEOUT"):
            spec(scale_fields("timeout", 15)).build()
        return
    directory = tmp_path / "kernels_dir"
    directory.mkdir()
    proc = load({"args": ["dir_source"], "cpp_files": [str(directory)], "cpp_wrappers": [["f", "scale<2>"]]}, clean_env())
    assert error_type(proc) == "ValueError", f"expected ValueError, got: {error_line(proc)}"
    assert str(directory) in error_line(proc) or "cpp_files" in error_line(proc), error_line(proc)
    assert compiles(proc) == 0, "a directory as a source must be refused before any compile"


# ---------------------------------------------------------------------------------------------- 16


@pytest.mark.parametrize("damage", ["copied from another entry", "library group-writable", "library owned by another user"])
def test_case16_cache_verify_removes_what_a_load_refuses(cache_dir, damage):
    """Case 16: `cache verify` removes an entry whose (self-consistent) files were copied from another
    entry; an entry whose library has permissions a load refuses is removed or repaired, and reported."""
    fields = scale_fields("victim", 16)
    spec(fields).build()
    entry = entry_of(cache_dir, "victim")
    if damage == "copied from another entry":
        spec(scale_fields("donor", 17)).build()
        donor = entry_of(cache_dir, "donor")
        for f in list(entry.iterdir()):
            if f.is_file():
                f.unlink()
        for name in ("manifest", library_of(donor).name, library_of(donor).name + ".sha256"):
            shutil.copy2(donor / name, entry / name)
        proc = run_cli("cache", "verify", "--cache-dir", cache_dir, env=clean_env())
        assert proc.returncode == 0, proc.stderr
        assert not entry.exists(), f"`cache verify` must remove {entry.name}, whose manifest names another request; it said:\n{proc.stdout}"
        assert donor.exists()
        return
    if os.geteuid() != 0 and damage == "library owned by another user":
        pytest.skip("NOT RUN: needs root to give the library to another user")
    lib = library_of(entry)
    if damage == "library group-writable":
        lib.chmod(lib.stat().st_mode | 0o020)
    else:
        os.chown(lib, NOBODY, NOBODY)
    proc = run_cli("cache", "verify", "--cache-dir", cache_dir, env=clean_env())
    assert proc.returncode == 0, proc.stderr
    strict = load(fields, clean_env(JITKERN_ON_MISS="error"))
    assert not entry.exists() or strict.returncode == 0, \
        f"after `cache verify` the entry is still there and a strict load fails: {error_line(strict)}"
    assert entry.name in proc.stdout, f"`cache verify` must report {entry.name}; it said:\n{proc.stdout}"


# ------------------------------------------- header spellings, scratch of other hosts, stray links, strict mode


def factor_project(root: Path, factor: int) -> Path:
    """A kernel dir and an include dir with factor_value.h = `factor`: returns the include dir."""
    write(root / "kernel" / "factor_cpu.h", FACTOR_CPU)
    return write(root / "inc" / "factor_value.h", f"#define FACTOR {factor}\n").parent


@pytest.mark.parametrize("how", ["spelled under /usr/include", "-isystem"])
def test_a_user_header_is_tracked_however_it_is_found(cache_dir, tmp_path, how):
    """A header is exempt only where it really is: an include dir spelled through /usr/include/../..,
    or given with -isystem (which -MMD would leave out of the dependencies), is tracked."""
    inc = factor_project(tmp_path, 3)
    fields = factor_fields("spelled", tmp_path / "kernel" / "factor_cpu.h")
    if how == "-isystem":
        fields["extra_cflags"] = ["-isystem", str(inc)]
    else:
        fields["extra_include_paths"] = ["/usr/include/../.." + str(inc)]
    assert result(load(fields, clean_env())) == 3.0
    write(inc / "factor_value.h", "#define FACTOR 7\n")
    assert result(load(fields, clean_env())) == 7.0, "the edited header must be served"


def test_clear_dry_run_removes_nothing(cache_dir):
    """`cache clear --dry-run` says what it would remove and removes nothing; an option an action does
    not take (verify --dry-run) is refused, never ignored."""
    env = clean_env()
    assert result(load(scale_fields("dry", 2), env)) == 2.0
    proc = run_cli("cache", "clear", "--dry-run", "--cache-dir", cache_dir, env=env)
    assert proc.returncode == 0 and "would remove" in proc.stdout, proc.stdout + proc.stderr
    assert set(listed(cache_dir, env)) == {"dry"}
    proc = run_cli("cache", "verify", "--dry-run", "--cache-dir", cache_dir, env=env)
    assert proc.returncode == 2 and "--dry-run applies only to prune, clear and rm" in proc.stderr, proc.stderr
    assert set(listed(cache_dir, env)) == {"dry"}


def test_scratch_of_another_host_is_kept(cache_dir, tmp_path):
    """On a cache shared between hosts (NFS, local locks) a scratch directory named after another host is
    not removed because its pid is unknown here; this host's dead builds' scratch is."""
    inc = factor_project(tmp_path, 2)
    fields = factor_fields("hosts", tmp_path / "kernel" / "factor_cpu.h", [inc])
    assert result(load(fields, clean_env())) == 2.0
    entry = entry_of(cache_dir, "hosts")
    here = re.sub(r"[^A-Za-z0-9_.]", "_", os.uname().nodename)[:80]
    other, mine = entry / "build-999999@some_other_host-abcdef", entry / f"build-999999@{here}-abcdef"
    other.mkdir()
    mine.mkdir()
    write(inc / "factor_value.h", "#define FACTOR 4\n")
    assert result(load(fields, clean_env())) == 4.0
    assert other.exists(), "another host's build may still be running"
    assert not mine.exists(), "a dead build of this host is a leftover"


def test_a_stray_link_at_an_entry_name_is_replaced_never_followed(cache_dir, tmp_path):
    """A symbolic link (or file) where an entry's directory should be is replaced by the next build and
    removed by `cache clear`, never followed: the directory it points at keeps its files."""
    env = clean_env()
    assert result(load(scale_fields("stray", 2), env)) == 2.0
    entry = entry_of(cache_dir, "stray")
    victim = write(tmp_path / "victim" / "keep.txt", "precious").parent
    shutil.rmtree(entry)
    entry.symlink_to(victim)
    assert result(load(scale_fields("stray", 2), env)) == 2.0
    assert entry.is_dir() and not entry.is_symlink()
    shutil.rmtree(entry)
    entry.symlink_to(victim)
    proc = run_cli("cache", "clear", "--cache-dir", cache_dir, env=env)
    assert proc.returncode == 0, proc.stderr
    assert not entry.is_symlink() and (victim / "keep.txt").read_text() == "precious"


def test_prebuild_builds_in_strict_mode(tmp_path):
    """`jitkern prebuild` compiles although the environment says JITKERN_ON_MISS=error (for serving)."""
    spec_file = write(tmp_path / "specs.json", json.dumps([scale_fields("strict_prebuild", 3)]))
    proc = run_cli("prebuild", "--spec-file", spec_file, "--cache-dir", tmp_path / "X", env=clean_env(JITKERN_ON_MISS="error"))
    assert proc.returncode == 0 and "1 built" in proc.stdout, proc.stdout + proc.stderr


def test_another_compiler_version_is_a_miss_where_nothing_can_be_recorded(tmp_path, prebuilt):
    """A compiler reporting another version is not taken for the one that built a prebuilt entry, also
    where its version cannot be remembered (no writable cache): strict mode raises CacheMissError."""
    require_read_only_mounts()
    cxx = script(tmp_path / "bin" / "c++", f'case "$1" in --version) echo "fake c++ 99.0"; exit 0;; esac\nexec {shlex.quote(real_cxx())} "$@"')
    home = tmp_path / "home"
    home.mkdir()
    env = clean_env(HOME=home, JITKERN_CACHE_DIR=None, JITKERN_PREBUILT_DIRS=prebuilt, JITKERN_ON_MISS="error", CXX=cxx)
    proc = load(PREBUILT[0], env, read_only=[home])
    assert proc.returncode != 0 and "ERROR CacheMissError" in proc.stdout, proc.stdout + proc.stderr
    assert "built by other compilers" in proc.stderr


# ------------------------------------------------------------------------------------ compiler search


def test_a_compiler_found_first_on_a_new_path_is_identified_before_serving(tmp_path):
    """A lookup stats the recorded compilers instead of searching PATH only while PATH and CXX are what
    the build searched with: put a c++ reporting another version first on PATH and the entry is a miss."""
    cache = tmp_path / "cache"
    assert result(load(scale_fields("search", 5), clean_env(JITKERN_CACHE_DIR=cache, CXX=None))) == 5.0
    other = script(tmp_path / "bin" / "c++", f'case "$1" in --version) echo "fake c++ 98.0"; exit 0;; esac\nexec {shlex.quote(real_cxx())} "$@"')
    env = clean_env(JITKERN_CACHE_DIR=cache, CXX=None, JITKERN_ON_MISS="error", PATH=f"{other.parent}:{os.environ['PATH']}")
    proc = load(scale_fields("search", 5), env)
    assert proc.returncode != 0 and "ERROR CacheMissError" in proc.stdout and "built by other compilers" in proc.stderr, proc.stdout + proc.stderr


def test_a_compiler_touched_in_place_is_identified_again_and_served(tmp_path):
    """The recorded compiler's file changed (same search): the lookup asks it for its version once, and
    the same version serves the entry without a rebuild."""
    cxx = script(tmp_path / "bin" / "c++", f'exec {shlex.quote(real_cxx())} "$@"')
    cache = tmp_path / "cache"
    assert result(load(scale_fields("touched", 6), clean_env(JITKERN_CACHE_DIR=cache, CXX=cxx))) == 6.0
    os.utime(cxx, ns=(cxx.stat().st_atime_ns, cxx.stat().st_mtime_ns + 10**9))
    assert result(load(scale_fields("touched", 6), clean_env(JITKERN_CACHE_DIR=cache, CXX=cxx, JITKERN_ON_MISS="error"))) == 6.0
