"""add_constant on the GPU: correctness on fresh random inputs of odd sizes, and bad input rejected."""

import importlib

import pytest
from add_constant_cases import CONSTANTS


pytestmark = pytest.mark.gpu


def _torch():
    import torch

    return torch


@pytest.mark.parametrize("n", [1, 3, 255, 4097, 65537, 1_000_003, 16 * 1024 * 1024 + 5])
@pytest.mark.parametrize("constant", CONSTANTS[:3])
def test_matches_torch(n, constant):
    torch = _torch()
    from jitkern.ops import add_constant

    src = torch.randint(-(2**31), 2**31 - 1, (n,), dtype=torch.int32, device="cuda")
    out = torch.full_like(src, 0x5A5A5A5A)  # poisoned: every element must be written
    add_constant(src, constant, out=out)
    expected = (src.to(torch.int64) + constant).to(torch.int32)  # int32 wrap-around, like torch
    torch.testing.assert_close(out, expected, rtol=0, atol=0)


def test_misaligned_and_multidim():
    torch = _torch()
    from jitkern.ops import add_constant

    base = torch.randint(-1000, 1000, (10_001,), dtype=torch.int32, device="cuda")
    src = base[1:]  # 4-byte offset: not 16-byte aligned, takes the scalar path
    torch.testing.assert_close(add_constant(src, 5), src + 5, rtol=0, atol=0)
    grid = torch.randint(-1000, 1000, (33, 65, 3), dtype=torch.int32, device="cuda")
    torch.testing.assert_close(add_constant(grid, 11), grid + 11, rtol=0, atol=0)
    empty = torch.empty(0, dtype=torch.int32, device="cuda")
    assert add_constant(empty, 1).numel() == 0


def test_runs_on_current_stream_and_in_cuda_graph():
    torch = _torch()
    from jitkern.ops import add_constant

    src = torch.randint(-1000, 1000, (1 << 20,), dtype=torch.int32, device="cuda")
    out = torch.empty_like(src)
    add_constant(src, 2, out=out)  # compile outside capture
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            add_constant(src, 2, out=out)
    out.fill_(0)
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(out, src + 2, rtol=0, atol=0)


def test_bad_inputs_rejected_naming_the_argument():
    """The C++ entry point names the bad tensor (TypeError for a dtype, ValueError for a device, layout
    or shape); Python checks the constant, which picks the instantiation, and before that constant's
    module is loaded, that src is a CUDA tensor. Either way the message does not depend on test order."""
    torch = _torch()
    from jitkern.ops import add_constant
    add_constant_module = importlib.import_module("jitkern.ops.add_constant")  # the attribute is the function

    def rejects(error, match, *args, **kwargs):
        with pytest.raises(error, match=match) as info:
            add_constant(*args, **kwargs)
        assert type(info.value) is error, f"{type(info.value).__name__}: {info.value}"

    good = torch.zeros(4, dtype=torch.int32, device="cuda")
    # Before a constant's module is loaded, Python refuses a tensor the kernels cannot take (no compile for it).
    unloaded = next(c for c in range(1000, 2000) if c not in add_constant_module._FUNCTIONS)
    rejects(ValueError, "src must be a CUDA tensor, got cpu", torch.zeros(4, dtype=torch.int32), unloaded)
    assert unloaded not in add_constant_module._FUNCTIONS
    add_constant(good, 1)  # from here on, the C++ entry point's checks
    rejects(ValueError, "src: Device mismatch: cpu:0", torch.zeros(4, dtype=torch.int32), 1)
    rejects(TypeError, "src: DType mismatch: float32", torch.zeros(4, dtype=torch.float32, device="cuda"), 1)
    rejects(ValueError, r"src must be contiguous, got strides \(1, 4\)", torch.zeros(4, 4, dtype=torch.int32, device="cuda").t(), 1)
    rejects(TypeError, "constant must be an int in the int32 range", good, 2**31)
    rejects(TypeError, "constant must be an int in the int32 range", good, 1.0)
    rejects(TypeError, "src must be a torch.Tensor, got list", [1, 2], 1)
    rejects(ValueError, r"out: Size mismatch for shape#0\('num_elements'\): expected 4 \(resolved earlier\) but got 5", good, 1,
            out=torch.zeros(5, dtype=torch.int32, device="cuda"))
    rejects(ValueError, "out must have src's shape", good.view(2, 2), 1, out=torch.zeros(4, dtype=torch.int32, device="cuda"))
    rejects(TypeError, "out: DType mismatch: int64", good, 1, out=torch.zeros(4, dtype=torch.int64, device="cuda"))


def test_bad_inputs_rejected_in_cpp_before_launch():
    """The C++ entry point validates on its own (callers may bypass the Python wrapper)."""
    torch = _torch()
    from jitkern.ops.add_constant import _add_constant_function

    fn = _add_constant_function(1)
    good = torch.zeros(8, dtype=torch.int32, device="cuda")
    with pytest.raises(TypeError, match=r"Tensor match failed for src = .*dtype=float32.*\n.*\n- Root cause: src: DType mismatch"):
        fn(good, torch.zeros(8, dtype=torch.float32, device="cuda"))
    with pytest.raises(ValueError, match=r"out: Size mismatch for shape#0\('num_elements'\): expected 9 \(resolved earlier\) but got 8"):
        fn(good, torch.zeros(9, dtype=torch.int32, device="cuda"))
    with pytest.raises(ValueError, match=r"src: Device mismatch: cpu:0"):
        fn(good, torch.zeros(8, dtype=torch.int32))
    with pytest.raises(ValueError, match=r"out must have src's shape"):
        fn(good, torch.zeros(2, 4, dtype=torch.int32, device="cuda"))
    with pytest.raises(TypeError, match=r"add_constant\(out, src\) takes 2 arguments but 1 was given"):
        fn(good)
    with pytest.raises(TypeError, match=r"argument 'src' \(the 2nd\) must be a tensor, got int 3"):
        fn(good, 3)


def test_works_under_torch_compile():
    torch = _torch()
    from jitkern import cache_once
    from jitkern.ops import add_constant

    calls = []

    @cache_once
    def scale_for(k):
        calls.append(k)
        return k * 2

    @torch.compile
    def f(x):
        return add_constant(x, 3) * scale_for(3)

    x = torch.randint(-1000, 1000, (4099,), dtype=torch.int32, device="cuda")
    torch.testing.assert_close(f(x), (x + 3) * 6, rtol=0, atol=0)
    torch.testing.assert_close(f(x + 1), (x + 4) * 6, rtol=0, atol=0)
    assert calls == [3], "cache_once must run the function once, also under torch.compile"


def test_second_gpu_while_the_first_is_current():
    torch = _torch()
    if torch.cuda.device_count() < 2:
        pytest.skip("NOT RUN: needs two CUDA GPUs")
    from jitkern.ops import add_constant

    torch.cuda.set_device(0)
    src = torch.randint(-(2**31), 2**31 - 1, (1_000_003,), dtype=torch.int32, device="cuda:1")
    out = add_constant(src, 7)
    assert out.device == src.device
    torch.testing.assert_close(out, src + 7, rtol=0, atol=0)
    assert torch.cuda.current_device() == 0, "a launch on cuda:1 changed the current device"
    stream = torch.cuda.Stream(device="cuda:1")
    with torch.cuda.device(1), torch.cuda.stream(stream):
        out2 = add_constant(out, -7)
    stream.synchronize()
    torch.testing.assert_close(out2, src, rtol=0, atol=0)
    with pytest.raises(ValueError, match=r"out: Device mismatch: expected cuda:1 \(resolved earlier\) but got cuda:0"):
        add_constant(src, 7, out=torch.empty_like(src, device="cuda:0"))
