"""Errors in the user's terms: a spec that exports nothing, a wrong wrapper expression (C++ and CUDA), an
unwritable cache, an invalid CUDA arch and a machine without torch. Each test asserts the message a user
reads: what was wrong, in the names they gave, and what to do."""

import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import jitkern
from test_store import clean_env, open_dir, require_read_only_mounts, run  # noqa: F401 (open_dir: a fixture)

pytestmark = pytest.mark.toolchain

KERNEL_CPU = "#include <cstdint>\ntemplate <int N> inline int64_t affine_cpu(int64_t x) { return N * x + 1; }\n"
KERNEL_CUDA = ("#include <jitkern/utils.cuh>\ntemplate <int N> __global__ void fill(int* p) { *p = N; }\n"
               "template <int N> inline void affine_cuda(int64_t ptr) {\n"
               "  host::LaunchKernel(1, 1, cudaStream_t{})(fill<N>, reinterpret_cast<int*>(ptr));\n}\n")
# What a build says to do about a cache it cannot write.
ADVICE = ("set JITKERN_CACHE_DIR to a writable directory", "JITKERN_PREBUILT_DIRS", "move JITKERN_LOCK_DIR")
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="NOT RUN: nvcc is not installed")


def build_error(**spec) -> str:
    with pytest.raises(jitkern.BuildError) as failure:
        jitkern.JitSpec("wrapper_error", **spec).build()
    return str(failure.value)


def test_a_spec_that_exports_nothing_is_a_value_error_before_compiling(cache_dir, tmp_path):
    src = tmp_path / "k.h"
    src.write_text(KERNEL_CPU)
    for files in (dict(cpp_files=[str(src)]), dict(cuda_files=[str(src)]), dict(cpp_files=[str(src)], cuda_files=[str(src)])):
        with pytest.raises(ValueError, match=r"needs at least one export: give cpp_wrappers or cuda_wrappers"):
            jitkern.load_jit("exports_nothing", **files)
    assert not cache_dir.exists() or not list(cache_dir.glob("exports_nothing-*")), "nothing may be compiled or cached"


@pytest.mark.parametrize("expr, diagnostic", [
    ("afine_cpu<4>", r"error: ['‘]afine_cpu['’] was not declared in this scope; did you mean ['‘]affine_cpu['’]\?"),
    ("affine_cpu", r"error: .*affine_cpu"),  # the template argument is missing
])
def test_a_wrong_cpp_wrapper_expression_leads_with_the_wrapper(cache_dir, tmp_path, expr, diagnostic):
    src = tmp_path / "k.h"
    src.write_text(KERNEL_CPU)
    message = build_error(cpp_files=[str(src)], cpp_wrappers=[("ok", "affine_cpu<2>"), ("affine", expr)])
    first, output = message.split("\n", 1)
    assert re.fullmatch(rf"jitkern: module 'wrapper_error' failed to compile: cpp_wrappers 'affine' \({re.escape(expr)}\): {diagnostic}.*",
                        first), first
    assert "export.h" not in first
    shown = output.split("command: ", 1)[0]
    assert "compiler output" in shown and "host.cc:" in shown and "/build-" not in shown, \
        f"the compiler's output names the generated source host.cc, not its deleted scratch directory:\n{shown}"


@needs_nvcc
@pytest.mark.parametrize("pipeline", ["1", "0"])
def test_a_wrong_cuda_wrapper_expression_leads_with_the_wrapper_and_is_reported_once(cache_dir, monkeypatch, tmp_path, pipeline):
    monkeypatch.setenv("JITKERN_CUDA_ARCH", "sm_90a")
    monkeypatch.setenv("JITKERN_NVCC_PIPELINE", pipeline)
    src = tmp_path / "k.cuh"
    src.write_text(KERNEL_CUDA)
    message = build_error(cuda_files=[str(src)], cuda_wrappers=[("affine", "afine_cuda<4>")])
    first, rest = message.split("\n", 1)
    assert first == ("jitkern: module 'wrapper_error' failed to compile: cuda_wrappers 'affine' (afine_cuda<4>): "
                     'error: identifier "afine_cuda" is undefined'), first
    output = rest.split("command: ", 1)[0]
    assert output.count('identifier "afine_cuda" is undefined') == 1, f"nvcc's error must be shown once:\n{output}"
    # an error in the user's file still names that file
    src.write_text(KERNEL_CUDA.replace("*p = N;", "*p = undefined_name;"))
    first = build_error(cuda_files=[str(src)], cuda_wrappers=[("affine", "affine_cuda<4>")]).split("\n", 1)[0]
    assert first.endswith(f'{src}(2): error: identifier "undefined_name" is undefined'), first


def test_an_unwritable_cache_says_what_to_do(cache_dir, tmp_path, monkeypatch):
    src = tmp_path / "k.h"
    src.write_text(KERNEL_CPU)
    spec = jitkern.JitSpec("unwritable", cpp_files=[str(src)], cpp_wrappers=[("affine", "affine_cpu<2>")])
    not_a_dir = tmp_path / "a-file"
    not_a_dir.write_text("")
    for setting in ("JITKERN_CACHE_DIR", "JITKERN_LOCK_DIR"):
        monkeypatch.setenv(setting, str(not_a_dir / "sub"))
        with pytest.raises(RuntimeError) as failure:
            spec.build()
        assert str(not_a_dir / "sub") in str(failure.value) and all(a in str(failure.value) for a in ADVICE), str(failure.value)
        monkeypatch.setenv(setting, str(cache_dir if setting == "JITKERN_CACHE_DIR" else tmp_path / "locks"))


def test_a_read_only_cache_says_what_to_do(open_dir, tmp_path):
    require_read_only_mounts()
    src = open_dir / "k.h"
    src.write_text(KERNEL_CPU)
    cache = open_dir / "cache"
    cache.mkdir(mode=0o700)
    code = textwrap.dedent(f"""
        import jitkern
        jitkern.JitSpec("read_only", cpp_files=[{str(src)!r}], cpp_wrappers=[("affine", "affine_cpu<2>")]).build()
    """)
    proc = run([sys.executable, "-c", code], clean_env(JITKERN_CACHE_DIR=cache), read_only=[cache])
    assert proc.returncode != 0 and "compiling" not in proc.stderr, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert f"cannot write cache directory {cache}" in last and all(a in last for a in ADVICE), last


@pytest.mark.parametrize("where", ["JITKERN_CUDA_ARCH", "the spec's cuda_arch"])
def test_an_invalid_arch_says_where_it_came_from_and_the_valid_forms(cache_dir, monkeypatch, where):
    spec = dict(cuda_files=["add_constant.cuh"], cuda_wrappers=[("add_constant", "add_constant<1>")])
    if where == "JITKERN_CUDA_ARCH":
        monkeypatch.setenv("JITKERN_CUDA_ARCH", "hopper")
    else:
        monkeypatch.delenv("JITKERN_CUDA_ARCH", raising=False)
        spec["cuda_arch"] = "hopper"
    with pytest.raises(ValueError) as failure:
        jitkern.load_jit("arch_origin", **spec)
    message = str(failure.value)
    assert f"invalid CUDA architecture 'hopper' (from {where})" in message, message
    assert all(form in message for form in ("sm_80", "sm_90a", "sm_100f")), message


# Calls every entry point that needs torch with torch unimportable; prints each one's exception.
WITHOUT_TORCH = textwrap.dedent("""
    import sys
    sys.modules["torch"] = None  # `import torch` raises ImportError, as where it is not installed
    import jitkern, jitkern.ops as ops
    calls = {
        "ops.warmup": lambda: ops.warmup(),
        "torch_op": lambda: jitkern.torch_op("demo::f", "(Tensor x) -> ()", jitkern.JitSpec("f", cpp_files=["x.h"], cpp_wrappers=[("f", "f")]), "f"),
        "Event": lambda: jitkern.Event(),
        "rmsnorm": lambda: ops.rmsnorm(1, 2),
        "add_constant": lambda: ops.add_constant(1, 2),
        "per_token_quant_fp8": lambda: ops.per_token_quant_fp8(1),
        "transfer_kv_one_layer": lambda: ops.transfer_kv_one_layer(1, 2, 3, 4, 5, 6),
        "stream_wait_value": lambda: ops.stream_wait_value(1, 2),
    }
    for name, call in calls.items():
        try:
            call()
            print(name, "|", "no error")
        except BaseException as e:
            print(name, "|", type(e).__name__, "|", e)
""")


def test_without_torch_every_torch_entry_point_raises_the_same_import_error(cache_dir):
    proc = subprocess.run([sys.executable, "-c", WITHOUT_TORCH], capture_output=True, text=True, timeout=120,
                          env=clean_env(JITKERN_CACHE_DIR=cache_dir, JITKERN_CUDA_ARCH="sm_90a"))
    assert proc.returncode == 0, proc.stderr
    results = dict(line.split(" | ", 1) for line in proc.stdout.splitlines())
    assert len(results) == 8, proc.stdout
    assert len(set(results.values())) == 1, f"every entry point must raise the same error:\n{proc.stdout}"
    (outcome,) = set(results.values())
    assert outcome.startswith("ImportError | ") and "pip install torch" in outcome, outcome
    assert "compiling" not in proc.stderr, "nothing is compiled for a call that cannot run"


RELU = """#include <jitkern/tensor.h>
#include <jitkern/utils.cuh>

__global__ void relu_kernel(float* y, const float* x, int64_t n) {
  const int64_t i = blockIdx.x * int64_t{256} + threadIdx.x;
  if (i < n) y[i] = x[i] > 0 ? x[i] : 0;
}

inline void relu(jitkern::TensorView y, jitkern::TensorView x) {
  using namespace host;
  auto N = SymbolicSize{"n"};
  auto device = SymbolicDevice{};
  TensorMatcher({N}).with_dtype<float>().with_device<kDLCUDA>(device).verify(y, "y").verify(x, "x");
  LaunchKernel(div_ceil(N.unwrap(), 256), 256, device.unwrap())(relu_kernel, static_cast<float*>(y.data_ptr()),
                                                                static_cast<const float*>(x.data_ptr()), N.unwrap());
}
"""
KEPT_LOG = "the commands, their full output and the generated source: "


@needs_nvcc
@pytest.mark.parametrize("pipeline", ["1", "0"])
def test_a_cuda_syntax_error_is_shown_once_and_the_commands_are_in_the_kept_log(cache_dir, monkeypatch, tmp_path, pipeline):
    """nvcc's host and device passes print the same diagnostic: the message shows it once, and leaves the
    commands to the kept log, whose path ends it."""
    monkeypatch.setenv("JITKERN_CUDA_ARCH", "sm_90a")
    monkeypatch.setenv("JITKERN_NVCC_PIPELINE", pipeline)
    src = tmp_path / "relu.cuh"
    src.write_text(RELU.replace("threadIdx.x;", "threadIdx.x"))
    message = build_error(cuda_files=[str(src)], cuda_wrappers=[("relu", "relu")])
    first, rest = message.split("\n", 1)
    assert first.endswith(f'{src}(6): error: expected a ";"'), first
    assert rest.count('error: expected a ";"') == 1, rest
    assert rest.count("detected in the compilation of") <= 1, rest
    assert "command: " not in rest and len(rest.splitlines()) <= 14, rest  # 33 lines before: twice the error, 8 commands
    log = Path(rest.split(KEPT_LOG, 1)[1].strip())
    assert log.read_text().count("command: ") >= 1 and 'error: expected a ";"' in log.read_text()


@needs_nvcc
def test_cuda_code_in_cpp_files_is_named(cache_dir, tmp_path):
    src = tmp_path / "relu.cuh"
    src.write_text(RELU)
    first = build_error(cpp_files=[str(src)], cpp_wrappers=[("relu", "relu")]).split("\n", 1)[0]
    assert first == ("jitkern: module 'wrapper_error' failed to compile: relu.cuh holds CUDA code: list it in cuda_files "
                     "(the host C++ compiler alone compiles cpp_files)"), first


def test_a_template_wrapper_without_arguments_suggests_them(cache_dir, tmp_path):
    src = tmp_path / "k.h"
    src.write_text(KERNEL_CPU)
    first = build_error(cpp_files=[str(src)], cpp_wrappers=[("affine", "affine_cpu")]).split("\n", 1)[0]
    assert first.startswith("jitkern: module 'wrapper_error' failed to compile: cpp_wrappers 'affine' (affine_cpu): error: ") and \
        first.endswith("(affine_cpu names a template: give its template arguments (affine_cpu<...>))"), first


@needs_nvcc
def test_a_cuda_template_wrapper_without_arguments_suggests_them(cache_dir, monkeypatch, tmp_path):
    monkeypatch.setenv("JITKERN_CUDA_ARCH", "sm_90a")
    src = tmp_path / "k.cuh"
    src.write_text(KERNEL_CUDA)
    first = build_error(cuda_files=[str(src)], cuda_wrappers=[("affine", "affine_cuda")]).split("\n", 1)[0]
    assert first.startswith("jitkern: module 'wrapper_error' failed to compile: cuda_wrappers 'affine' (affine_cuda): error: ") and \
        first.endswith("(affine_cuda names a template: give its template arguments (affine_cuda<...>))"), first
