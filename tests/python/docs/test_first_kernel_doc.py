"""docs/first-kernel.md works as written: its files are written into an empty directory, each `console`
block's commands run there (in a fresh cache) and must print the lines the page shows."""

import ctypes
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

PAGE = REPO / "docs" / "first-kernel.md"
SHOWN_DIR = "/home/me/first-kernel"  # the page's project directory
SHOWN_CACHE = "/home/me/.cache/jitkern"
FENCE = re.compile(r"(?:<!-- test: (?P<mode>[^>]*?) -->\n)?```(?P<lang>\w*)\n(?P<body>.*?)```", re.S)
FILE_LINE = re.compile(r"^(?://|#) file: (\S+)$")
BASH = shutil.which("bash") or "/bin/bash"  # looked up before a test hides PATH entries


def _blocks():
    return [(m["mode"], m["lang"], m["body"]) for m in FENCE.finditer(PAGE.read_text())]


def _files() -> dict[str, str]:
    out = {}
    for _, _, body in _blocks():
        first, _, rest = body.partition("\n")
        if m := FILE_LINE.match(first):
            out[m[1]] = rest
    return out


def _console_blocks():
    return [(mode, body) for mode, lang, body in _blocks() if lang == "console"]


def _gpu_available() -> bool:
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return shutil.which("nvidia-smi") is not None and subprocess.run(["nvidia-smi", "-L"], capture_output=True).returncode == 0


def _pattern(shown: str, project: Path, cache: Path) -> re.Pattern:
    """The regular expression a shown output line stands for: `...` is any text, timings and hashes may
    differ, the page's directories are this run's."""
    text = shown.replace(SHOWN_CACHE, str(cache)).replace(SHOWN_DIR, str(project))
    parts = []
    for piece in re.split(r"(\.\.\.|\d+\.\d+ s\b|[0-9a-f]{16,})", text):
        if piece == "...":
            parts.append(".*")
        elif re.fullmatch(r"\d+\.\d+ s", piece):
            parts.append(r"\d+\.\d+ s")
        elif re.fullmatch(r"[0-9a-f]{16,}", piece):
            parts.append("[0-9a-f]+")
        else:
            parts.append(re.escape(piece))
    return re.compile("".join(parts))


def _commands(body: str) -> list[tuple[str, list[str]]]:
    out = []
    for line in body.splitlines():
        if line.startswith("$ "):
            out.append((line[2:], []))
        else:
            out[-1][1].append(line)
    return out


def _environment(mode: str | None, cache: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JITKERN_")}
    env["JITKERN_CACHE_DIR"] = str(cache)
    env["LC_ALL"] = "C"  # plain quotes in compiler messages
    path = [str(Path(sys.executable).parent)] + env.get("PATH", "").split(os.pathsep)
    hidden = {"without c++": ("c++", ("CXX",)), "without nvcc": ("nvcc", ("CUDA_HOME", "CUDA_PATH"))}.get(mode)
    if hidden:
        program, variables = hidden
        path = [d for d in path if not os.access(os.path.join(d, program), os.X_OK)]
        for var in variables:
            env.pop(var, None)
    env["PATH"] = os.pathsep.join(path)
    return env


def _skip_reason(mode: str | None, body: str) -> str | None:
    needs_nvcc = mode == "needs nvcc" or ("affine_cuda.py" in body and mode != "without nvcc")
    if needs_nvcc and shutil.which("nvcc") is None and not os.environ.get("CUDA_HOME"):
        return "NOT RUN: no nvcc"
    if mode == "needs a GPU" and not _gpu_available():
        return "NOT RUN: no GPU"
    if mode == "needs a GPU" and subprocess.run([sys.executable, "-c", "import torch"]).returncode != 0:
        return "NOT RUN: torch is not installed"
    if mode == "without a GPU" and _gpu_available():
        return "NOT RUN: this machine has a GPU"
    return None


@pytest.fixture
def project(tmp_path) -> Path:
    directory = tmp_path / "first-kernel"
    directory.mkdir()
    for name, text in _files().items():
        (directory / name).write_text(text)
    return directory


def test_page_blocks_are_all_tested():
    """Every block is a file or a console session (so nothing on the page goes unrun), and the page keeps
    its examples: both kernels, both scripts, and the error cases."""
    for _, lang, body in _blocks():
        assert FILE_LINE.match(body.partition("\n")[0]) or lang == "console", f"untested block:\n{body}"
    assert set(_files()) == {"affine_cpu.h", "run_cpu.py", "affine.cuh", "affine_cuda.py", "run_cuda.py"}
    assert len(_console_blocks()) >= 9


@pytest.mark.parametrize("index", range(len(_console_blocks())),
                         ids=[body.partition("\n")[0][2:42] for _, body in _console_blocks()])
def test_console_block(project, tmp_path, index):
    mode, body = _console_blocks()[index]
    if reason := _skip_reason(mode, body):
        pytest.skip(reason)
    cache = tmp_path / f"cache-{index}"
    env = _environment(mode, cache)
    for command, shown in _commands(body):
        result = subprocess.run([BASH, "-c", command], cwd=project, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, timeout=600)
        printed = result.stdout.replace("\u2018", "'").replace("\u2019", "'")
        fails = any(re.match(r"[\w.]+(Error|Exception): ", line) for line in shown)
        assert (result.returncode != 0) == fails, f"{command}: exit status {result.returncode}\n{printed}"
        for line in shown:
            assert _pattern(line, project, cache).search(printed), f"{command}: printed no line like\n{line}\n---\n{printed}"


def test_cpu_example_result(project, tmp_path):
    """run_cpu.py computes x * 4 + 0.5 (its own assert checks it against numpy; this reads the printout)."""
    result = subprocess.run([sys.executable, "run_cpu.py"], cwd=project, env=_environment(None, tmp_path / "cache"),
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    assert [float(v) for v in result.stdout.strip(" []\n").split()] == [0.5, 4.5, 8.5, 12.5, 16.5]
    assert "compiling affine_cpu_4" in result.stderr
