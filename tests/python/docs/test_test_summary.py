"""The test run's summary on a machine without a GPU (or without torch): one line for the GPU tests (and one
for the torch tests) that were not run, saying how to run them, instead of a line per test."""

import importlib.util
import shutil
import subprocess
import sys

import pytest

from conftest import HERE, _cuda_available, child_env


def skipped_lines(tmp_path, sample: str, markers: str) -> tuple:
    """pytest's run (-rs) of `sample` as a test file beside this conftest.py, and the SKIPPED lines of its summary."""
    shutil.copy(HERE / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "pytest.ini").write_text(f"[pytest]\nmarkers =\n{markers}")
    (tmp_path / "test_sample.py").write_text(sample)
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", str(tmp_path)], cwd=tmp_path,
                         capture_output=True, text=True, env=child_env(without=("PYTEST_ADDOPTS",)))
    assert run.returncode == 0, run.stdout + run.stderr
    return run, [line for line in run.stdout.splitlines() if line.startswith("SKIPPED")]


@pytest.mark.skipif(_cuda_available(), reason="a GPU machine runs the GPU tests")
def test_gpu_tests_not_run_are_one_summary_line(tmp_path):
    run, skipped = skipped_lines(tmp_path, "import pytest\n\n"
                                 "def test_cpu():\n    assert True\n\n"
                                 "@pytest.mark.gpu\n@pytest.mark.parametrize('n', [1, 2, 3])\ndef test_on_gpu(n):\n    assert False\n\n"
                                 "@pytest.mark.gpu\ndef test_other_gpu():\n    assert False\n\n"
                                 "def test_own_skip():\n    pytest.skip('NOT RUN: something else')\n", "    gpu: needs a GPU\n")
    gpu_lines = [line for line in skipped if "GPU test" in line]
    assert len(gpu_lines) == 1, run.stdout
    assert "[4]" in gpu_lines[0] and "NOT RUN here: 4 GPU tests need a CUDA GPU and torch" in gpu_lines[0], gpu_lines[0]
    assert "scripts/gpu-check.sh tests" in gpu_lines[0] and "pytest -m gpu" in gpu_lines[0], gpu_lines[0]
    assert any("something else" in line for line in skipped), run.stdout  # other skips keep their own lines
    assert "1 passed, 5 skipped" in run.stdout, run.stdout


@pytest.mark.skipif(importlib.util.find_spec("torch") is not None, reason="torch is installed: the torch tests run")
def test_torch_tests_not_run_are_one_summary_line(tmp_path):
    run, skipped = skipped_lines(tmp_path, "import pytest\n\n"
                                 "def test_cpu():\n    assert True\n\n"
                                 "@pytest.mark.torch\n@pytest.mark.parametrize('n', [1, 2])\ndef test_with_torch(n):\n    import torch\n",
                                 "    gpu: needs a GPU\n    torch: needs torch\n")
    assert len(skipped) == 1 and "[2]" in skipped[0] and "NOT RUN here: 2 tests need torch (no GPU)" in skipped[0], run.stdout
    assert "scripts/gpu-check.sh tests" in skipped[0] and "1 passed, 2 skipped" in run.stdout, run.stdout
