"""The package as a fleet installs it: a manylinux wheel (auditwheel repair passes) and an sdist, each
installed into a fresh directory and used there (a C++ module compiled, cached and loaded). CPU only."""

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
from conftest import REPO

pytestmark = pytest.mark.slow  # the engine compiled from the sdist: a minute or more on two cores

USE = """
import sys, numpy as np, jitkern
assert jitkern.__file__.startswith(sys.argv[1]), jitkern.__file__
m = jitkern.load_jit("scale", "4", cpp_files=[sys.argv[2]], cpp_wrappers=[("scale", "scale<4>")])
a = np.arange(3, dtype=np.float32); out = np.zeros_like(a); m.scale(out, a)
assert (out == 4 * a).all(), out
print("WORKS", jitkern.INCLUDE_DIR)
"""


def run(cmd, **kw):
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, **kw)
    assert proc.returncode == 0, f"{' '.join(map(str, cmd))}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


def install_and_use(artifact: Path, target: Path, cache: Path) -> str:
    run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--target", str(target), str(artifact)])
    env = dict(os.environ, PYTHONPATH=str(target), JITKERN_CACHE_DIR=str(cache))
    return run([sys.executable, "-c", USE, str(target), str(REPO / "tests/python/kernels/scale_cpu.h")], env=env, cwd="/").stdout


def pip_wheel(source: Path, out: Path, *options: str) -> Path:
    run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out), *options, str(source)])
    (built,) = out.glob("*.whl")
    assert built.name.startswith("jitkern-") and "-py3-none-linux_x86_64" in built.name, built.name
    return built


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    """The checkout's wheel, repaired by auditwheel. Built in the checkout's build directory (pyproject.toml's
    build-dir), as the set-up's: only what changed since compiles."""
    out = tmp_path_factory.mktemp("wheel")
    run([sys.executable, "-m", "auditwheel", "repair", "-w", str(out / "repaired"), str(pip_wheel(REPO, out / "raw"))])
    (repaired,) = (out / "repaired").glob("*.whl")
    return repaired


def test_wheel_is_manylinux_and_carries_headers_kernels_and_libraries(wheel):
    assert "manylinux_" in wheel.name, wheel.name
    names = zipfile.ZipFile(wheel).namelist()
    for required in ("jitkern/lib/libjitkern_engine.so", "jitkern/lib/libjitkern_runtime.so", "jitkern/include/jitkern/tensor.h", "jitkern/include/sgl_kernel/utils.cuh",
                     "jitkern/csrc/norm.cuh", "jitkern/engine-include/jitkern/jit.h", "jitkern/cli.py"):
        assert required in names, required
    assert not any("libtvm_ffi" in n for n in names), "tvm-ffi must come from its own wheel, not be vendored"


def test_repaired_wheel_installs_and_runs_elsewhere(wheel, tmp_path):
    out = install_and_use(wheel, tmp_path / "site", tmp_path / "cache")
    assert "WORKS" in out and str(tmp_path / "site") in out


def test_sdist_builds_installs_and_runs(tmp_path):
    run([sys.executable, "-m", "build", "--sdist", "--no-isolation", "-o", str(tmp_path / "dist"), str(REPO)])
    (sdist,) = (tmp_path / "dist").glob("jitkern-*.tar.gz")
    names = tarfile.open(sdist).getnames()
    root = names[0].split("/")[0]
    for required in ("CMakeLists.txt", "src/engine/build.cc", "include/jitkern/tensor.h", "csrc/norm.cuh", "python/jitkern/cli.py"):
        assert f"{root}/{required}" in names, required
    # Built unoptimized (half the compile): what this checks is that the sdist holds all the build needs.
    built = pip_wheel(sdist, tmp_path / "built", "-C", "cmake.build-type=None")
    assert "WORKS" in install_and_use(built, tmp_path / "site", tmp_path / "cache")


SERVE = """
import sys, numpy as np, jitkern
m = jitkern.load_jit("add_constant_cpu", "5", cpp_files=["add_constant_cpu.h"], cpp_wrappers=[("add", "add_constant_cpu<5>")])
src = np.arange(4, dtype=np.int32); dst = np.zeros_like(src); m.add(dst, src)
assert (dst == src + 5).all(), dst
print("SERVED", m.path)
"""


def snapshot(tree: Path) -> dict:
    return {str(p.relative_to(tree)): (p.stat().st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest())
            for p in sorted(tree.rglob("*")) if p.is_file()}


def test_prebuilt_cache_from_another_tree_serves_without_any_compiler(wheel, tmp_path):
    """Built with jitkern installed in one directory tree, served from a read-only prebuilt directory by
    jitkern installed in another, with no C++ compiler and no nvcc, in strict mode; never written."""
    builder, server = tmp_path / "build-tree" / "site", tmp_path / "serve-tree" / "elsewhere" / "site"
    for site in (builder, server):
        run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(wheel)])
    specs = tmp_path / "specs.json"
    specs.write_text(json.dumps([{"args": ["add_constant_cpu", "5"], "cpp_files": ["add_constant_cpu.h"],
                                  "cpp_wrappers": [["add", "add_constant_cpu<5>"]]}]))
    prebuilt = tmp_path / "prebuilt"
    out = run([sys.executable, "-m", "jitkern", "prebuild", "--spec-file", str(specs), "--cache-dir", str(prebuilt)],
              env=dict(os.environ, PYTHONPATH=str(builder)), cwd="/").stdout
    assert "1 built" in out, out
    before = snapshot(prebuilt)
    no_toolchain = {k: v for k, v in os.environ.items() if k not in ("CUDA_HOME", "CUDA_PATH")}
    no_toolchain.update(PYTHONPATH=str(server), PATH="/usr/bin:/bin", CXX="/nonexistent", JITKERN_ON_MISS="error",
                        JITKERN_PREBUILT_DIRS=f"{tmp_path / 'missing'}:{prebuilt}", JITKERN_CACHE_DIR=str(tmp_path / "serving-cache"))
    served = run([sys.executable, "-c", SERVE], env=no_toolchain, cwd="/").stdout
    assert f"SERVED {prebuilt}/" in served, served
    assert snapshot(prebuilt) == before, "a prebuilt cache is never written"
    # a library altered after the prebuild is not loaded: strict mode says it is missing instead
    tampered = tmp_path / "tampered"
    shutil.copytree(prebuilt, tampered, symlinks=True)
    (lib,) = [p for p in tampered.rglob("*.so")]
    data = bytearray(lib.read_bytes())
    data[300] ^= 0xFF
    lib.write_bytes(data)
    proc = subprocess.run([sys.executable, "-c", SERVE], capture_output=True, text=True, cwd="/",
                          env=dict(no_toolchain, JITKERN_PREBUILT_DIRS=str(tampered)))
    assert proc.returncode != 0 and "CacheMissError" in proc.stderr and "is not cached" in proc.stderr, proc.stderr[-2000:]
