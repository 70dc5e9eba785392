"""make_cpp_args, CPPArgList, cache_once and the clangd generator."""

import subprocess
import sys
import threading
import time

import pytest

import jitkern
from jitkern import CPPArgList, cache_once, make_cpp_args


def test_make_cpp_args_scalars():
    args = make_cpp_args(True, False, 128, -3, 0.5, 1e-6)
    assert isinstance(args, CPPArgList)
    assert list(args) == ["true", "false", "128", "-3", "0.5", "1e-06"]
    assert str(args) == "true, false, 128, -3, 0.5, 1e-06"
    assert f"Kernel<{make_cpp_args(4, True)}>::run" == "Kernel<4, true>::run"


@pytest.mark.parametrize("bad", ["fp16", None, [1], 1 + 2j, object()])
def test_make_cpp_args_rejects_other_types(bad):
    with pytest.raises(TypeError, match="unsupported argument"):
        make_cpp_args(bad)


@pytest.mark.parametrize("bad", [float("inf"), float("nan")])
def test_make_cpp_args_rejects_non_finite(bad):
    with pytest.raises(ValueError, match="no C\\+\\+ literal"):
        make_cpp_args(bad)


@pytest.mark.torch
def test_make_cpp_args_torch_dtypes():
    import torch

    got = make_cpp_args(torch.float32, torch.float16, torch.bfloat16, torch.float8_e4m3fn, torch.int8, torch.int32, torch.int64)
    assert list(got) == ["fp32_t", "fp16_t", "bf16_t", "fp8_e4m3_t", "int8_t", "int32_t", "int64_t"]
    with pytest.raises(TypeError, match="unsupported torch dtype torch.complex64"):
        make_cpp_args(torch.complex64)


def test_cache_once_runs_once_per_key_across_threads():
    calls = []

    @cache_once
    def build(x, *, y=0):
        calls.append((x, y))
        time.sleep(0.05)
        return object()

    results = []
    threads = [threading.Thread(target=lambda: results.append(build(1, y=2))) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert calls == [(1, 2)]
    assert all(r is results[0] for r in results)
    assert build(2) is not results[0] and calls[-1] == (2, 0)
    assert build.__name__ == "build"


def test_cache_once_keeps_a_keyword_call_apart_from_a_positional_one():
    """f(1, block=2) is not the call f((1,), (("block", 2),)), whose arguments spell what a key of the keyword call could be."""
    @cache_once
    def describe(shape, flags=(), **options):
        return (shape, flags, options)

    assert describe((1,), (("block", 2),)) == ((1,), (("block", 2),), {})
    assert describe(1, block=2) == (1, (), {"block": 2})
    assert describe(1, block=2) is describe(1, block=2) and describe(block=2, shape=1) == (1, (), {"block": 2})


def test_clangd_generation(tmp_path):
    out = tmp_path / ".clangd"
    run = lambda *a: subprocess.run([sys.executable, "-m", "jitkern", "clangd", "--output", str(out), *a], capture_output=True, text=True)
    first = run()
    assert first.returncode == 0, first.stderr
    text = out.read_text()
    assert "-xcuda" in text and f"-I{jitkern.INCLUDE_DIR}" in text and "-std=c++20" in text
    out.write_text("mine")
    refused = run()
    assert refused.returncode == 1 and "not overwriting" in refused.stderr and out.read_text() == "mine"
    forced = run("--force", "--arch", "sm_86")
    assert forced.returncode == 0 and "--cuda-gpu-arch=sm_86" in out.read_text()


@pytest.mark.tvm_ffi
def test_import_loads_neither_tvm_ffi_nor_torch_until_used(cache_dir):
    """`import jitkern` (and so the `jitkern` command) stays light: tvm-ffi (which imports torch where it
    is installed) loads with the first attribute that needs it; the engine finds tvm-ffi's headers and
    library from its first call, before that."""
    code = (
        "import sys, jitkern, jitkern._engine as engine\n"
        "assert 'tvm_ffi' not in sys.modules and 'torch' not in sys.modules, sorted(m for m in sys.modules if m.split('.')[0] in ('tvm_ffi', 'torch'))\n"
        "names = {s['name']: s for s in engine.config()['settings']}\n"
        "assert not names['JITKERN_TVM_FFI_INCLUDE'].get('problem'), names['JITKERN_TVM_FFI_INCLUDE']\n"
        "assert 'tvm_ffi' not in sys.modules\n"
        "spec = jitkern.JitSpec\n"
        "assert 'tvm_ffi' in sys.modules and jitkern.JitSpec is spec and 'load_jit' in dir(jitkern)\n"
        "try:\n    jitkern.no_such_name\nexcept AttributeError as e:\n    assert 'no_such_name' in str(e)\nelse:\n    raise AssertionError('no AttributeError')\n"
        "print('OK')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "OK", out.stderr
