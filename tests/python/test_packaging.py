"""The package as a fleet installs it: a manylinux wheel (auditwheel repair passes) and an sdist, each
installed into a fresh directory and used there (a C++ module compiled, cached and loaded). CPU only."""

import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
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


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    out = tmp_path_factory.mktemp("wheel")
    run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out / "raw"), str(REPO)])
    (raw,) = (out / "raw").glob("*.whl")
    assert raw.name.startswith("jitkern-") and "-py3-none-linux_x86_64" in raw.name, raw.name
    run([sys.executable, "-m", "auditwheel", "repair", "-w", str(out / "repaired"), str(raw)])
    (repaired,) = (out / "repaired").glob("*.whl")
    return repaired


def test_wheel_is_manylinux_and_carries_headers_kernels_and_libraries(wheel):
    assert "manylinux_" in wheel.name, wheel.name
    names = zipfile.ZipFile(wheel).namelist()
    for required in ("jitkern/lib/libjitkern_engine.so", "jitkern/lib/libjitkern_runtime.so", "jitkern/include/jitkern/tensor.h",
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
    for required in ("CMakeLists.txt", "src/build.cc", "include/jitkern/tensor.h", "csrc/norm.cuh", "python/jitkern/cli.py"):
        assert f"{root}/{required}" in names, required
    assert "WORKS" in install_and_use(sdist, tmp_path / "site", tmp_path / "cache")
