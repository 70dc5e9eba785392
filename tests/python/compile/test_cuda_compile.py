"""Compile-checks (nvcc, sm_90a) every CUDA instantiation the GPU tests use; runs without a GPU."""

import json
import logging
import os
import shutil
import sys
import time

import pytest
import tvm_ffi

from add_constant_cases import CONSTANTS
import jitkern
from jitkern import BuildError, JitSpec
from jitkern.cli import FATBIN_MAGIC
from jitkern.jit import usable_cpus
from jitkern.ops.add_constant import spec as add_constant_spec

pytestmark = [pytest.mark.skipif(shutil.which("nvcc") is None, reason="NOT RUN: nvcc is not installed"), pytest.mark.toolchain]


@pytest.mark.parametrize("constant", CONSTANTS)
def test_add_constant_instantiation_compiles(cache_dir, monkeypatch, constant):
    monkeypatch.setenv("JITKERN_CUDA_ARCH", "sm_90a")
    path = add_constant_spec(constant).build()
    data = open(path, "rb").read()
    assert data[:4] == b"\x7fELF" and b"__tvm_ffi_add_constant\0" in data


def _build_cuda(name, cuda_file, wrapper):
    return JitSpec(name, cuda_files=[str(cuda_file)], cuda_wrappers=[wrapper]).build()


@pytest.mark.parametrize("pipeline", ["1", "0"])
def test_cuda_header_edit_rebuilds_and_errors_show_location(cache_dir, monkeypatch, tmp_path, pipeline):
    """Both CUDA compile paths (nvcc's phases run in parallel by jitkern, and plain nvcc) track
    included headers and report compiler errors with file and line."""
    monkeypatch.setenv("JITKERN_CUDA_ARCH", "sm_90a")
    monkeypatch.setenv("JITKERN_NVCC_PIPELINE", pipeline)
    header = tmp_path / "value.cuh"
    header.write_text("#define VALUE 3\n")
    kernel = tmp_path / "k.cuh"
    kernel.write_text(
        '#include <jitkern/utils.cuh>\n#include "value.cuh"\n'
        "__global__ void fill(int* p) { *p = VALUE; }\n"
        "inline void run(int64_t ptr) { host::LaunchKernel(1, 1, cudaStream_t{})(fill, reinterpret_cast<int*>(ptr)); }\n"
    )
    first = _build_cuda("hdr", kernel, ("run", "run"))
    assert b"__tvm_ffi_run" in open(first, "rb").read()
    assert _build_cuda("hdr", kernel, ("run", "run")) == first  # warm
    header.write_text("#define VALUE 4\n")
    second = _build_cuda("hdr", kernel, ("run", "run"))
    assert second != first, "editing an included header must produce a new library"
    header.write_text("#define VALUE undefined_name\n")
    with pytest.raises(BuildError) as failure:
        _build_cuda("hdr", kernel, ("run", "run"))
    first_line = str(failure.value).split("\n", 1)[0]
    assert first_line.startswith("jitkern: module 'hdr' failed to compile: ") and \
        first_line.endswith('k.cuh(3): error: identifier "undefined_name" is undefined'), first_line


def test_an_arch_this_nvcc_cannot_target_says_so_with_the_fix(cache_dir, monkeypatch, tmp_path):
    monkeypatch.setenv("JITKERN_CUDA_ARCH", "sm_99a")
    kernel = tmp_path / "k.cuh"
    kernel.write_text("__global__ void nothing() {}\ninline void run() {}\n")
    with pytest.raises(BuildError) as failure:
        _build_cuda("arch99", kernel, ("run", "run"))
    first_line = str(failure.value).split("\n", 1)[0]
    assert "module 'arch99' failed to compile: nvcc fatal" in first_line and "Unsupported gpu architecture" in first_line, first_line
    assert "this nvcc cannot target sm_99a: point CUDA_HOME at a newer CUDA toolkit" in first_line


def test_launch_error_is_reported_at_the_launch_site(cache_dir, monkeypatch, tmp_path):
    """A failing launch raises with the CUDA error and the file:line of the LaunchKernel call. Without
    a GPU the launch fails for lack of a device; with one, for a 2048-thread block: the same path."""
    monkeypatch.setenv("JITKERN_CUDA_ARCH", "sm_90a")
    kernel = tmp_path / "bad_launch.cuh"
    kernel.write_text(
        "#include <jitkern/utils.cuh>\n"
        "__global__ void noop() {}\n"
        "inline void bad_launch() {\n"
        "  host::LaunchKernel(1, 2048, cudaStream_t{})(noop);\n"
        "}\n"
    )
    module = jitkern.load_jit("bad_launch", cuda_files=[str(kernel)], cuda_wrappers=[("bad_launch", "bad_launch")])
    torch = sys.modules.get("torch")
    gpu = torch is not None and torch.cuda.is_available()
    if gpu:
        torch.ones(1, device="cuda")  # CUDA up before the failing launch
    with pytest.raises(RuntimeError, match=r"CUDA error at \S*bad_launch\.cuh:4 in void bad_launch\(\): cuda\w+: \S"):
        module.bad_launch()
    if gpu:  # reported once: not left as the runtime's last error for torch's next launch check
        assert float(torch.ones(3, device="cuda").sum()) == 3.0


def test_host_without_nvcc_fails_early_and_launches_by_name(cache_dir, monkeypatch, tmp_path):
    """host_without_nvcc: a kernel body left where the host pass compiles it fails the build, naming the
    built-in (not a library that cannot load); a module's kernels launch by name, also the first launch
    of a kernel after the process reused the module's descriptor or the cache lost the module's file
    (jitkern cache clear beside a running process), and a clear error once both are gone."""
    monkeypatch.setenv("JITKERN_CUDA_ARCH", "sm_90a")
    unguarded = tmp_path / "unguarded.cuh"
    unguarded.write_text("#include <jitkern/utils.cuh>\n__global__ void fill_kernel(int* p) { p[threadIdx.x] = 1; }\n"
                         "inline void fill() { host::LaunchKernel(1, 32, cudaStream_t{})(fill_kernel, nullptr); }\n")
    with pytest.raises(BuildError, match="threadIdx"):
        JitSpec("unguarded", cuda_files=[str(unguarded)], cuda_wrappers=[("fill", "fill")], host_without_nvcc=True).build()
    kernels = tmp_path / "two_kernels.cuh"
    kernels.write_text(
        "#include <jitkern/tensor.h>\n#include <jitkern/utils.cuh>\n"
        "namespace two {\n"
        "template <int kValue>\n__global__ void fill_kernel(int* p) {\n#ifdef __CUDACC__\n  p[threadIdx.x] = kValue;\n#endif\n}\n"
        "inline void fill(jitkern::TensorView out, int64_t which) {\n"
        "  auto* p = static_cast<int*>(out.data_ptr());\n"
        "  if (which == 1) host::LaunchKernel(1, 4, out.device())(fill_kernel<1>, p);\n"
        "  else if (which == 2) host::LaunchKernel(1, 4, out.device())(fill_kernel<2>, p);\n"
        "  else if (which == 3) host::LaunchKernel(1, 4, out.device())(fill_kernel<3>, p);\n"
        "  else host::LaunchKernel(1, 4, out.device())(fill_kernel<4>, p);\n"
        "}\n}  // namespace two\n")
    module = JitSpec("two_kernels", cuda_files=[str(kernels)], cuda_wrappers=[("fill", "two::fill", "out, which")], host_without_nvcc=True).load()
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available():
        pytest.skip("NOT RUN (the launches): needs a CUDA GPU and torch")
    out = torch.zeros(4, dtype=torch.int32, device="cuda")
    module.fill(out, 1)
    assert out.tolist() == [1] * 4

    def module_descriptor() -> int:
        return next(int(f) for f in os.listdir("/proc/self/fd") if os.path.realpath(f"/proc/self/fd/{f}") == os.path.realpath(module.path))

    # A process that closes descriptors it did not open and reuses the number (a daemon): the lookup notices
    # and opens the module's file again by its path.
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, module_descriptor())
    module.fill(out, 2)
    assert out.tolist() == [2] * 4
    reopened = module_descriptor()
    os.remove(module.path)  # jitkern cache clear beside the process: the open file serves
    module.fill(out, 3)
    assert out.tolist() == [3] * 4
    os.dup2(null, reopened)  # and now neither the descriptor nor the path is the module's
    os.close(null)
    with pytest.raises(RuntimeError, match="the module's file is no longer open in this process"):
        module.fill(out, 4)
    assert out.tolist() == [3] * 4


def test_host_without_nvcc_refuses_parameters_the_passes_lay_out_differently(cache_dir, monkeypatch, tmp_path):
    """host_without_nvcc: a kernel parameter whose type differs between the two passes (a member under
    #ifdef __CUDACC__) is refused at the first launch, naming the kernel, the parameter and both sizes,
    instead of launching with bytes of the wrong layout; a matching kernel of the same module launches,
    and kernel_handle passes an already-resolved kernel through."""
    monkeypatch.setenv("JITKERN_CUDA_ARCH", "sm_90a")
    source = tmp_path / "layouts.cuh"
    source.write_text(
        "#include <jitkern/tensor.h>\n#include <jitkern/utils.cuh>\n"
        "namespace layouts {\n"
        "struct Args {\n  int* out;\n#ifdef __CUDACC__\n  int device_only;\n#endif\n};\n"
        "__global__ void skewed_kernel(const __grid_constant__ Args a) {\n#ifdef __CUDACC__\n  a.out[threadIdx.x] = 7;\n#endif\n}\n"
        "__global__ void plain_kernel(int* out, int value) {\n#ifdef __CUDACC__\n  out[threadIdx.x] = value;\n#endif\n}\n"
        "inline void skewed(jitkern::TensorView out) {\n"
        "  host::LaunchKernel(1, 4, out.device())(skewed_kernel, Args{static_cast<int*>(out.data_ptr())});\n}\n"
        "inline void plain(jitkern::TensorView out, int64_t value) {\n"
        "  host::LaunchKernel(1, 4, out.device())(plain_kernel, static_cast<int*>(out.data_ptr()), static_cast<int>(value));\n}\n"
        "inline int64_t plain_threads() {\n  cudaFuncAttributes a{};\n"
        "  host::RuntimeDeviceCheck(cudaFuncGetAttributes(&a, host::kernel_handle(host::kernel_handle(plain_kernel))));\n"
        "  return a.maxThreadsPerBlock;\n}\n"
        "}  // namespace layouts\n")
    module = JitSpec("layouts", cuda_files=[str(source)], host_without_nvcc=True,
                     cuda_wrappers=[("skewed", "layouts::skewed", "out"),
                                    ("plain", "layouts::plain", "out, value"), ("plain_threads", "layouts::plain_threads", "")]).load()
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available():
        pytest.skip("NOT RUN (the launches): needs a CUDA GPU and torch")
    out = torch.zeros(4, dtype=torch.int32, device="cuda")
    with pytest.raises(RuntimeError, match=r"skewed_kernel.*parameter 0 is 16 bytes in its device code but 8 in the host code"):
        module.skewed(out)
    torch.cuda.synchronize()
    assert out.tolist() == [0] * 4  # nothing launched
    module.plain(out, 5)
    assert out.tolist() == [5] * 4
    assert module.plain_threads() >= 32


def test_host_without_nvcc_compiles_host_code_as_nvcc_would(cache_dir, monkeypatch, tmp_path):
    """The host pass takes what nvcc gives its host compiler: -Xcompiler's flags, the preprocessor flags in
    nvcc's long spellings, CUDA's CCCL headers; both passes see one macro value (a static_assert in each), and
    the host code behaves the same with or without host_without_nvcc."""
    monkeypatch.setenv("JITKERN_CUDA_ARCH", "sm_90a")
    (tmp_path / "inc").mkdir()
    (tmp_path / "inc" / "only_here.h").write_text("#define ONLY_HERE 4\n")
    source = tmp_path / "flags.cuh"
    source.write_text(
        "#include <jitkern/tensor.h>\n#include <jitkern/utils.cuh>\n#include <cuda/std/limits>\n#include <only_here.h>\n"
        "static_assert(VAL == 7, \"both passes see VAL=7\");\n"
        "namespace flags {\n__global__ void flags_kernel(int* p) {\n#ifdef __CUDACC__\n  p[0] = VAL;\n#endif\n}\n"
        "inline int64_t host_flags() {\n  int64_t r = ONLY_HERE + cuda::std::numeric_limits<int>::digits;\n"
        "#ifdef __FAST_MATH__\n  r += 100;\n#endif\n  return r;\n}\n}  // namespace flags\n")
    flags = ["--define-macro", "VAL=7", "-Xcompiler", "-ffast-math,-fwrapv", f"--include-path={tmp_path / 'inc'}"]
    results = []
    for split in (False, True):
        module = JitSpec("flags", cuda_files=[str(source)], cuda_wrappers=[("host_flags", "flags::host_flags", "")],
                         extra_cuda_cflags=flags, host_without_nvcc=split).load()
        results.append(module.host_flags())
    assert results == [4 + 31 + 100] * 2


def test_nvrtc_device_compiler_tracks_its_inputs_and_falls_back_to_nvcc(cache_dir, monkeypatch, tmp_path, caplog):
    """JITKERN_DEVICE_COMPILER=nvrtc: a header only the device code reads is a dependency (an edit
    rebuilds); the module is found again in strict mode; -Xcompiler's -D reaches NVRTC as nvcc's device
    preprocessing sees it; a kernel NVRTC cannot be told by name (overloaded) and a host-only
    -Xcompiler flag leave the kernels to nvcc, saying so."""
    monkeypatch.setenv("JITKERN_CUDA_ARCH", "sm_90a")
    monkeypatch.setenv("JITKERN_DEVICE_COMPILER", "nvrtc")
    fatbin = FATBIN_MAGIC
    (tmp_path / "devonly.h").write_text("#define DEVICE_VALUE 11\n")
    source = tmp_path / "rtc_user.cuh"
    source.write_text(
        "#include <jitkern/tensor.h>\n#include <jitkern/utils.cuh>\n#ifdef __CUDACC__\n#include \"devonly.h\"\n#endif\n"
        "#ifdef __CUDACC_RTC__\nstatic_assert(XC == 5, \"-Xcompiler's -D reaches NVRTC\");\n#endif\n"
        "namespace rtc_user {\n__global__ void set_kernel(int* p) {\n#ifdef __CUDACC__\n  p[0] = DEVICE_VALUE;\n#endif\n}\n"
        "#ifndef __CUDACC_RTC__\ninline void set(jitkern::TensorView out) {\n"
        "  host::LaunchKernel(1, 1, out.device())(set_kernel, static_cast<int*>(out.data_ptr()));\n}\n#endif\n}  // namespace rtc_user\n")
    spec = JitSpec("rtc_user", cuda_files=[str(source)], cuda_wrappers=[("set", "rtc_user::set", "out")], host_without_nvcc=True,
                   extra_cuda_cflags=["-Xcompiler", "-DXC=5"])
    first = spec.build()
    assert fatbin not in open(first, "rb").read(), "NVRTC built it"
    monkeypatch.setenv("JITKERN_ON_MISS", "error")
    assert spec.build() == first, "found again by a lookup that runs no compiler"
    monkeypatch.delenv("JITKERN_ON_MISS")
    (tmp_path / "devonly.h").write_text("#define DEVICE_VALUE 12\n")
    second = spec.build()
    assert second != first, "an edit of a header only NVRTC reads rebuilds"

    overloaded = tmp_path / "overloaded.cuh"
    overloaded.write_text(
        "#include <jitkern/tensor.h>\n#include <jitkern/utils.cuh>\nnamespace ov {\n"
        "__global__ void k_kernel(int* p) {\n#ifdef __CUDACC__\n  p[0] = 1;\n#endif\n}\n"
        "__global__ void k_kernel(float* p) {\n#ifdef __CUDACC__\n  p[0] = 1;\n#endif\n}\n"
        "#ifndef __CUDACC_RTC__\ninline void run(jitkern::TensorView out) {\n"
        "  host::LaunchKernel(1, 1, out.device())(static_cast<void (*)(int*)>(k_kernel), static_cast<int*>(out.data_ptr()));\n}\n#endif\n}  // namespace ov\n")
    with caplog.at_level(logging.INFO, logger="jitkern"):
        path = JitSpec("overloaded", cuda_files=[str(overloaded)], cuda_wrappers=[("run", "ov::run", "out")], host_without_nvcc=True).build()
        assert fatbin in open(path, "rb").read() and "NVRTC could not compile its kernels, so nvcc compiles them" in caplog.text
        path = spec.replace(extra_cuda_cflags=["-Xcompiler", "-DXC=5,-fopenmp"]).build()
        assert fatbin in open(path, "rb").read() and "but nvcc compiles its kernels: a flag of extra_cuda_cflags" in caplog.text


_RTC_USER = ("#include <jitkern/tensor.h>\n#include <jitkern/utils.cuh>\n#ifdef __CUDACC__\n#include <cuda/std/limits>\n#endif\n"
             "namespace rtc_user {\n__global__ void set_kernel(int* p) {\n#ifdef __CUDACC__\n  p[0] = cuda::std::numeric_limits<int>::max();\n#endif\n}\n"
             "#ifndef __CUDACC_RTC__\ninline void set(jitkern::TensorView out) {\n"
             "  host::LaunchKernel(1, 1, out.device())(set_kernel, static_cast<int*>(out.data_ptr()));\n}\n#endif\n}  // namespace rtc_user\n")


def test_a_module_nvrtc_cannot_compile_goes_to_nvcc_whose_errors_are_reported(cache_dir, monkeypatch, tmp_path, caplog):
    """CCCL under NVRTC declares int64_t as long long, not as the host pass's long, so a kernel that includes it
    goes to nvcc, the warning naming NVRTC's first error; when nvcc fails too, the error is nvcc's, not a step
    of the NVRTC attempt's (whose dependency listing, reading CCCL, used to fail and fill the build's log)."""
    monkeypatch.setenv("JITKERN_CUDA_ARCH", "sm_90a")
    monkeypatch.setenv("JITKERN_DEVICE_COMPILER", "nvrtc")
    source = tmp_path / "rtc_cccl.cuh"
    source.write_text(_RTC_USER)
    spec = JitSpec("rtc_cccl", cuda_files=[str(source)], cuda_wrappers=[("set", "rtc_user::set", "out")], host_without_nvcc=True)
    with caplog.at_level(logging.INFO, logger="jitkern"):
        path = spec.build()
    assert FATBIN_MAGIC in open(path, "rb").read(), "nvcc's fatbin"
    assert 'NVRTC could not compile its kernels, so nvcc compiles them' in caplog.text and 'redeclaration of type name "int64_t"' in caplog.text
    source.write_text(_RTC_USER.replace("p[0] = cuda", "p[0] = no_such_symbol + cuda"))
    with pytest.raises(BuildError, match="no_such_symbol") as error:
        spec.build()
    assert "No such file" not in str(error.value), str(error.value)[:3000]


def _prelude_probe_specs(tmp_path, round_, flags=()):
    """Two tiny host_prelude modules, new names each round (each round compiles), exporting probe(): the
    value an inline function of the prelude returns (the host pass alone reads the prelude)."""
    source = tmp_path / "prelude_user.cuh"
    if not source.exists():  # (rewritten just before a build, it would count as changed while that build ran)
        source.write_text("#include <jitkern/utils.cuh>\nnamespace prelude_user {\n__global__ void noop_kernel(int* p) {\n#ifdef __CUDACC__\n"
                          "  p[0] = 1;\n#endif\n}\n#ifndef __CUDACC__\ninline int probe() { return jk_prelude_probe(); }\n"
                          "#else\ninline int probe() { return 0; }  // nvcc's device pass: no prelude\n#endif\n}\n")
        time.sleep(0.05)
    return [JitSpec(f"prelude_user_{round_}_{i}", cuda_files=[str(source)], cuda_wrappers=[("probe", "prelude_user::probe", "")],
                    host_without_nvcc=True, host_prelude=True, extra_cuda_cflags=list(flags)) for i in range(2)]


def _until_precompiled(tmp_path, caplog, tag, flags=()):
    """Parallel builds of new tiny modules until one used the precompiled prelude (the first starts its
    compile in the background); returns that spec and the probes of every module built."""
    probes = []
    for round_ in range(40):
        caplog.clear()
        specs = _prelude_probe_specs(tmp_path, f"{tag}{round_}", flags)
        probes += [m.probe() for m in jitkern.warmup(*specs, workers=2)]
        for s in specs:
            if any(f"compiled {s.name} in" in line and "(prelude precompiled)" in line for line in caplog.text.splitlines()):
                return s, probes
    raise AssertionError("no build ever used the precompiled prelude")


def test_builds_run_at_once_share_the_host_prelude_precompiled_and_never_a_stale_one(cache_dir, monkeypatch, tmp_path, caplog):
    """host_prelude=True: the host pass -includes <jitkern/host_prelude.h>; builds run at once have it
    precompiled once (in the background: later builds use it) in $TMPDIR, where it sweeps away the
    directories of dead processes; a header of it edited afterwards is not served from it (those builds
    parse it), a module built with it is rebuilt then (the prelude's headers are its dependencies, and no
    temporary path is, whatever the spelling of TMPDIR), and one whose files are gone fails no build."""
    monkeypatch.setenv("JITKERN_CUDA_ARCH", "sm_90a")
    include = tmp_path / "include"
    shutil.copytree(os.path.join(os.path.dirname(jitkern.__file__), "include"), include)
    prelude = include / "jitkern" / "host_prelude.h"
    original = prelude.read_text()
    prelude.write_text(original + "inline int jk_prelude_probe() { return 1; }\n")
    time.sleep(0.05)  # past the timestamps' granularity: else its first precompile sees it as changed while it ran
    monkeypatch.setenv("JITKERN_INCLUDE_DIR", str(include))
    tmp = tmp_path / "tmp"
    (tmp / "jitkern-prelude-999999-dead").mkdir(parents=True)
    (tmp / "jitkern-prelude-999999-dead" / "lock").write_text("")  # nobody holds it: its process died
    monkeypatch.setenv("TMPDIR", f"{tmp}//")
    with pytest.raises(ValueError, match="host_prelude was given without host_without_nvcc"):
        JitSpec("p", cuda_files=["x.cuh"], cuda_wrappers=[("a", "b")], host_prelude=True).build()
    with pytest.raises(TypeError, match="host_prelude must be a bool"):
        JitSpec("p", cuda_files=["x.cuh"], host_prelude=1)
    with caplog.at_level(logging.INFO, logger="jitkern"):
        used, probes = _until_precompiled(tmp_path, caplog, "a")
        assert set(probes) == {1}
        assert [p.name for p in tmp.iterdir()] != [] and not (tmp / "jitkern-prelude-999999-dead").exists(), "a dead process's directory stays"
        path = used.build()
        manifest = next(cache_dir.glob(f"{used.name}-*/manifest")).read_text()
        assert "host_prelude.h" in manifest and "jitkern-prelude-" not in manifest, manifest
        time.sleep(0.02)  # past the timestamps' granularity
        prelude.write_text(original + "inline int jk_prelude_probe() { return 2; }\n")
        caplog.clear()
        fresh = jitkern.warmup(*_prelude_probe_specs(tmp_path, "after"), workers=2)
        assert [m.probe() for m in fresh] == [2, 2], "a stale precompiled prelude served the old header"
        assert "the precompiled host prelude is out of date" in caplog.text and "(prelude precompiled)" not in caplog.text
        assert used.build() != path, "the prelude's headers are dependencies of a module built with it precompiled"

        _, probes = _until_precompiled(tmp_path, caplog, "b", ["-DVARIANT=1"])  # another flag set: another precompile
        for d in tmp.glob("jitkern-prelude-*"):
            shutil.rmtree(d)  # a tmp cleaner
        caplog.clear()
        gone = jitkern.warmup(*_prelude_probe_specs(tmp_path, "gone", ["-DVARIANT=1"]), workers=2)
        assert [m.probe() for m in gone] == [2, 2] and "is gone" in caplog.text


def test_a_lone_build_precompiles_the_prelude_once_for_later_ones_where_a_cpu_is_spare(cache_dir, tmp_path):
    """In a fresh process: a lone build starts the prelude's precompile for later builds only where the process
    may run it beside the build's own threads (nvcc's device pass: 4, the host pass: 1; 6 CPUs for a module of one
    pass), and once a process: a second flag set's lone builds parse it. With fewer CPUs no lone build starts it
    (on 2 CPUs it slowed the first build by more than it saved the next ones)."""
    import subprocess
    import textwrap

    include = tmp_path / "include"
    shutil.copytree(os.path.join(os.path.dirname(jitkern.__file__), "include"), include)
    prelude = include / "jitkern" / "host_prelude.h"
    prelude.write_text(prelude.read_text() + "inline int jk_prelude_probe() { return 3; }\n")
    source = tmp_path / "prelude_user.cuh"
    _prelude_probe_specs(tmp_path, "source")  # writes it
    time.sleep(0.05)
    script = textwrap.dedent(f"""
        import time
        from jitkern import JitSpec
        for flags in ([], ["-DVARIANT=1"]):
            for i in range(3):
                spec = JitSpec(f"lone{{len(flags)}}_{{i}}", cuda_files=[{str(source)!r}], cuda_wrappers=[("probe", "prelude_user::probe", "")],
                               host_without_nvcc=True, host_prelude=True, extra_cuda_cflags=flags)
                assert spec.load().probe() == 3
                time.sleep(3 if i == 0 else 0)  # the precompile, if started, ends meanwhile
    """)
    env = {k: v for k, v in os.environ.items() if k not in ("JITKERN_QUIET", "JITKERN_VERBOSE")}
    env.update(JITKERN_CACHE_DIR=str(cache_dir), JITKERN_INCLUDE_DIR=str(include), TMPDIR=str(tmp_path), JITKERN_CUDA_ARCH="sm_90a",
               JITKERN_DEVICE_COMPILER="nvcc")
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    used = [line for line in out.stderr.splitlines() if "(prelude precompiled)" in line]
    if usable_cpus() >= 6:
        assert [line.split()[2] for line in used] == ["lone0_1", "lone0_2"], out.stderr
        assert out.stderr.count("precompiled host prelude in") == 1, out.stderr
    else:
        assert not used and "host prelude" not in out.stderr, out.stderr


@pytest.mark.parametrize("damage", ["missing", "empty", "sleeps"])
def test_a_broken_nvrtc_helper_fails_the_build_unremembered(tmp_path, damage):
    """jitkern-nvrtc missing or unrunnable is the install's failure: the build fails saying what to do, is not
    remembered, and no nvcc build is cached in its place; a timeout or interrupt while NVRTC runs ends the
    build (JITKERN_COMPILE_TIMEOUT), with no fallback to nvcc either. Run on a copy of the package."""
    site = tmp_path / "site"
    shutil.copytree(os.path.dirname(jitkern.__file__), site / "jitkern", symlinks=True)
    helper = site / "jitkern" / "lib" / "jitkern-nvrtc"
    helper.unlink()
    if damage == "empty":
        helper.write_bytes(b"")
        helper.chmod(0o755)
    elif damage == "sleeps":
        helper.write_text("#!/bin/sh\nsleep 60\n")
        helper.chmod(0o755)
    source = tmp_path / "rtc_user.cuh"
    source.write_text(_RTC_USER)
    script = ("import sys, jitkern\ntry:\n    print(jitkern.JitSpec('rtc_user', cuda_files=[sys.argv[1]], cuda_wrappers=[('set', 'rtc_user::set', 'out')], "
              "host_without_nvcc=True).build())\nexcept jitkern.BuildError as e:\n    print('BUILD ERROR', e)\n")
    # the copy first; tvm-ffi from where it is installed (beside jitkern or not)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), os.path.dirname(os.path.dirname(tvm_ffi.__file__))]), JITKERN_CACHE_DIR=str(tmp_path / "cache"), JITKERN_CUDA_ARCH="sm_90a",
               JITKERN_COMPILE_TIMEOUT="4", JITKERN_DEVICE_COMPILER="nvrtc")
    for attempt in range(2):
        import subprocess
        import time

        t0 = time.monotonic()
        run = subprocess.run([sys.executable, "-c", script, str(source)], env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
        out = run.stdout + run.stderr
        assert "BUILD ERROR" in out and "NVRTC could not compile" not in out, out[-3000:]
        assert "not remembered" in out and "remembered this failure" not in out, out[-3000:]
        if damage == "sleeps":
            assert "took longer than JITKERN_COMPILE_TIMEOUT=4 s" in out and time.monotonic() - t0 < 40, out[-3000:]
        else:
            assert "reinstall jitkern, or set JITKERN_DEVICE_COMPILER=nvcc" in out, out[-3000:]
    assert not list((tmp_path / "cache").glob("rtc_user*/*.so")), "no module was cached in NVRTC's place"
    if damage != "sleeps":  # auto's key may hold either image: its builds run many at once go to nvcc, warning
        auto = ("import sys, jitkern\nspecs = [jitkern.JitSpec(n, cuda_files=[sys.argv[1]], cuda_wrappers=[('set', 'rtc_user::set', 'out')], "
                "host_without_nvcc=True) for n in ('rtc_a', 'rtc_b')]\njitkern.warmup(*specs)\nprint('BUILT', [s.build() for s in specs])\n")
        run = subprocess.run([sys.executable, "-c", auto, str(source)], env=dict(env, JITKERN_DEVICE_COMPILER="auto"), capture_output=True,
                             text=True, timeout=120, cwd=tmp_path)
        out = run.stdout + run.stderr
        assert run.returncode == 0 and "BUILT" in out and "reinstall jitkern, or set JITKERN_DEVICE_COMPILER=nvcc" in out, out[-3000:]
        doctor = subprocess.run([sys.executable, "-m", "jitkern", "doctor", "--json"], env=dict(env, JITKERN_DEVICE_COMPILER="auto"),
                                capture_output=True, text=True, timeout=300, cwd=tmp_path)
        checks = {c["what"]: c for c in json.loads(doctor.stdout)["checks"]}
        assert doctor.returncode == 1 and checks["CUDA through NVRTC build"]["status"] == "FAIL", doctor.stdout[-3000:]
        assert "reinstall jitkern" in checks["CUDA through NVRTC build"]["detail"], checks["CUDA through NVRTC build"]


def test_dtype_table_agrees_with_the_headers(cache_dir, monkeypatch, tmp_path):
    """Every row of jitkern.DTYPES: the C++ alias's DLPack dtype is the one tvm-ffi parses from the torch name."""
    monkeypatch.setenv("JITKERN_CUDA_ARCH", "sm_90a")
    kernel = tmp_path / "dtypes.cuh"
    kernel.write_text("#include <jitkern/type.cuh>\ntemplate <typename T> bool is(DLDataType d) { return host::is_type<T>(d); }\n")
    wrappers = [(f"is_{alias}", f"is<{alias}>") for alias in jitkern.DTYPES.values()]
    module = jitkern.load_jit("dtype_table", cuda_files=[str(kernel)], cuda_wrappers=wrappers)
    for name, alias in jitkern.DTYPES.items():
        assert getattr(module, f"is_{alias}")(tvm_ffi.dtype(name)), f"{alias} is not {name}"
        others = [n for n in jitkern.DTYPES if n != name]
        assert not any(getattr(module, f"is_{alias}")(tvm_ffi.dtype(o)) for o in others), alias


@pytest.mark.parametrize("pipeline", ["1", "0"])
def test_cache_path_with_shell_characters(tmp_path, monkeypatch, pipeline):
    """A quote, a space and a $ in the cache path reach no shell unquoted: the build succeeds on both
    CUDA compile paths (the parallel pipeline steps aside for such paths) and is warm the second time."""
    cache = tmp_path / 'we"ird $dir it\'s'
    monkeypatch.setenv("JITKERN_CACHE_DIR", str(cache))
    monkeypatch.setenv("JITKERN_CUDA_ARCH", "sm_90a")
    monkeypatch.setenv("JITKERN_NVCC_PIPELINE", pipeline)
    spec = add_constant_spec(3)
    path = spec.build()
    assert path.startswith(str(cache)) and b"__tvm_ffi_add_constant\0" in open(path, "rb").read()
    assert spec.build() == path
    split = jitkern.ops.act.spec("bfloat16", "silu_and_mul")  # host_without_nvcc: nvcc -fatbin's steps
    path = split.build()
    assert path.startswith(str(cache)) and b"act_and_mul_kernel" in open(path, "rb").read() and split.build() == path


@pytest.mark.parametrize("pipeline", ["1", "0"])
def test_a_backtick_in_the_cache_path_runs_nothing(tmp_path, monkeypatch, pipeline):
    """nvcc's phases run through /bin/sh: no part of the cache path may reach it (nvcc names the source by
    its absolute path too), or a backtick in it would run a command. Plain nvcc, which passes that path
    through its own shell, refuses such a cache path (not remembered) instead of running it."""
    marker = tmp_path / "ran"
    cache = tmp_path / f"c`touch {marker}`d"
    monkeypatch.setenv("JITKERN_CACHE_DIR", str(cache))
    monkeypatch.setenv("JITKERN_CUDA_ARCH", "sm_90a")
    monkeypatch.setenv("JITKERN_NVCC_PIPELINE", pipeline)
    if pipeline == "0":
        for spec in (add_constant_spec(4), add_constant_spec(4), jitkern.ops.act.spec("bfloat16", "gelu_and_mul")):
            with pytest.raises(BuildError, match="would run: use another JITKERN_CACHE_DIR") as failure:
                spec.build()
            assert "remembered this failure" not in str(failure.value) and not marker.exists()
        return
    path = add_constant_spec(4).build()
    assert path.startswith(str(cache)) and not marker.exists()
    path = jitkern.ops.act.spec("bfloat16", "gelu_and_mul").build()  # host_without_nvcc: nvcc -fatbin's steps
    assert path.startswith(str(cache)) and not marker.exists()


@pytest.mark.parametrize("mode", ["nvcc phases", "plain nvcc", "host pass beside nvcc", "host pass then NVRTC"])
def test_a_missing_tmpdir_fails_no_build_and_leaves_nothing_remembered(cache_dir, monkeypatch, tmp_path, mode):
    """The compilers keep their temporary files in the build's scratch directory: a TMPDIR that does not exist
    (or is full, or is cleaned under a build) is no part of a build, so it neither fails one nor has a
    failure remembered against the sources; nothing is left in the scratch directory's place."""
    monkeypatch.setenv("JITKERN_CUDA_ARCH", "sm_90a")
    monkeypatch.setenv("JITKERN_NVCC_PIPELINE", "0" if mode == "plain nvcc" else "1")
    monkeypatch.setenv("JITKERN_DEVICE_COMPILER", "nvrtc" if mode == "host pass then NVRTC" else "nvcc")
    missing = tmp_path / "no" / "such" / "tmp"
    monkeypatch.setenv("TMPDIR", str(missing))
    source = tmp_path / "tmp_user.cuh"
    source.write_text(_RTC_USER.replace("#ifdef __CUDACC__\n#include <cuda/std/limits>\n#endif\n", "")
                      .replace("cuda::std::numeric_limits<int>::max()", "7"))
    spec = JitSpec("tmp_user", cuda_files=[str(source)], cuda_wrappers=[("set", "rtc_user::set", "out")],
                   host_without_nvcc=mode.startswith("host pass"))
    path = spec.build()
    assert open(path, "rb").read()[:4] == b"\x7fELF" and not missing.exists()
    entry = os.path.dirname(path)
    assert sorted(os.listdir(entry)) == sorted(n for n in os.listdir(entry) if not n.startswith("build-")), os.listdir(entry)


@pytest.mark.parametrize("directory", ['quote"d', "angle>d", "both\">d", "new\nline"])
def test_kernel_files_in_directories_named_with_quotes_or_angle_brackets(cache_dir, monkeypatch, tmp_path, directory):
    """A kernel file's path goes into the generated source's #include; a double quote or a '>' in it must
    not break that (both in one path, or a newline, cannot be spelled there: a ValueError names the file)."""
    monkeypatch.setenv("JITKERN_CUDA_ARCH", "sm_90a")
    (tmp_path / directory).mkdir()
    kernel = tmp_path / directory / "k.cuh"
    kernel.write_text('#include <jitkern/utils.cuh>\n__global__ void fill(int* p) { *p = 3; }\n'
                      "inline void run(int64_t ptr) { host::LaunchKernel(1, 1, cudaStream_t{})(fill, reinterpret_cast<int*>(ptr)); }\n")
    if "\n" in directory:  # (a cuda_files entry with a newline is refused as such; the csrc directory may hold one)
        monkeypatch.setenv("JITKERN_CSRC_DIR", str(tmp_path / directory))
        with pytest.raises(ValueError, match="cannot be #included: its path holds a newline"):
            JitSpec("quoted_dir", cuda_files=["k.cuh"], cuda_wrappers=[("run", "run")]).build()
        return
    spec = JitSpec("quoted_dir", cuda_files=[str(kernel)], cuda_wrappers=[("run", "run")])
    if '"' in directory and ">" in directory:
        with pytest.raises(ValueError, match="cannot be #included"):
            spec.build()
        return
    assert b"__tvm_ffi_run" in open(spec.build(), "rb").read()


@pytest.mark.parametrize("directory", ['quote"d', "back\\slash"])
def test_plain_nvcc_sees_edits_in_directories_its_dependency_output_misspells(cache_dir, monkeypatch, tmp_path, caplog, directory):
    """nvcc run as one command writes a path holding '"' or '\\' wrongly into its -MD output: the module's own
    files are its dependencies whatever that output says, and a header it names wrongly cannot be tracked,
    so the module is compiled again by every process (a warning says so), never served stale."""
    monkeypatch.setenv("JITKERN_CUDA_ARCH", "sm_90a")
    monkeypatch.setenv("JITKERN_NVCC_PIPELINE", "0")
    (tmp_path / directory).mkdir()
    header, kernel = tmp_path / directory / "value.cuh", tmp_path / directory / "k.cuh"
    kernel.write_text('#include <jitkern/utils.cuh>\n#include "value.cuh"\n__attribute__((used)) static const char tag[] = "TAG_A";\n'
                      "__global__ void fill(int* p) { *p = VALUE; }\n"
                      "inline void run(int64_t ptr) { host::LaunchKernel(1, 1, cudaStream_t{})(fill, reinterpret_cast<int*>(ptr)); }\n")
    header.write_text("#define VALUE 3\n")
    spec = JitSpec("misspelled_dir", cuda_files=[str(kernel)], cuda_wrappers=[("run", "run")])
    with caplog.at_level(logging.WARNING, logger="jitkern"):
        assert b"TAG_A" in open(spec.build(), "rb").read()
    assert "which is not there now" in caplog.text and "every process compiles the module again" in caplog.text, caplog.text
    kernel.write_text(kernel.read_text().replace("TAG_A", "TAG_B"))
    assert b"TAG_B" in open(spec.build(), "rb").read(), "an edit of the kernel file itself is seen"
    header.write_text('#define VALUE 4\n__attribute__((used)) static const char header_tag[] = "HEADER_B";\n')
    assert b"HEADER_B" in open(spec.build(), "rb").read(), "an edit of a header beside it is seen"


_PARTS_SOURCE = """#include <jitkern/utils.cuh>
#ifndef __CUDACC_RTC__
#include <jitkern/tensor.h>
#endif
namespace parts {
template <int kValue>
__global__ void fill_kernel(int* p) {
#ifdef __CUDACC__
  p[threadIdx.x] = kValue;
#endif
}
#if JITKERN_DEVICE_PART == 2
#error PART_TWO_FAILS
#endif
#ifndef __CUDACC_RTC__
template <int kPart>
void fill_from(int* p, DLDevice device) {
  if constexpr (host::in_device_part(kPart)) host::LaunchKernel(1, 4, device)(fill_kernel<kPart + 1>, p);
}
inline void fill(jitkern::TensorView out, int64_t which) {
  auto* p = static_cast<int*>(out.data_ptr());
  if (which == 1) fill_from<0>(p, out.device());
  else if (which == 2) fill_from<1>(p, out.device());
  else if (which == 3) fill_from<2>(p, out.device());
  else host::LaunchKernel(1, 4, out.device())(fill_kernel<9>, p);  // named outside any part: in every pass
}
// The images the module's lookup sees: a bit per non-null image, times 16, plus their count.
#ifndef __CUDACC__
inline int64_t images() {
  int64_t mask = 0;
  for (int k = 0; k < 8; ++k) mask |= host::detail::image_data(k) != nullptr ? int64_t{1} << k : 0;
  return mask * 16 + host::detail::image_count();
}
#else
inline int64_t images() { return 0; }  // nvcc's device pass: never called
#endif
#endif
}  // namespace parts
"""


def _device_images(path: str) -> dict[str, bytes]:
    """A host_without_nvcc module's device images by symbol (jitkern_device_image, _1, ...): their bytes, each up to
    the next image or the end of the section that holds them (binutils' readelf and nm)."""
    import subprocess

    section = next(line.split() for line in subprocess.run(["readelf", "-SW", path], capture_output=True, text=True, check=True).stdout.splitlines()
                   if " .nv_fatbin " in line)
    at = section.index(".nv_fatbin")
    address, offset, size = (int(section[at + k], 16) for k in (2, 3, 4))
    listed = (line.split() for line in subprocess.run(["nm", path], capture_output=True, text=True, check=True).stdout.splitlines())
    symbols = sorted((int(fields[0], 16), fields[2]) for fields in listed if len(fields) == 3 and fields[2].startswith("jitkern_device_image"))
    data = open(path, "rb").read()[offset:offset + size]
    bounds = [value - address for value, _ in symbols] + [size]
    return {name: data[bounds[i]:bounds[i + 1]] for i, (_, name) in enumerate(symbols)}


def test_device_parts_lookup_sees_only_the_images_built_where_gold_links(cache_dir, monkeypatch, tmp_path):
    """gold gives an undefined weak symbol the module's load address, not null: the count of images linked beside
    pass 0's bounds the lookup (three images where this process may run three passes at once, else one)."""
    if shutil.which("ld.gold") is None:
        pytest.skip("NOT RUN: this machine has no ld.gold")
    monkeypatch.setenv("JITKERN_CUDA_ARCH", "sm_90a")
    monkeypatch.setenv("JITKERN_DEVICE_COMPILER", "nvcc")
    probe = tmp_path / "probe.cc"
    probe.write_text("#include <string>\n#include <jitkern/export.h>\nnamespace probe { inline int64_t size() { return std::string(\"gold\").size(); } }\n")
    try:
        JitSpec("gold_probe", cpp_files=[str(probe)], cpp_wrappers=[("size", "probe::size", "")], extra_ldflags=["-fuse-ld=gold"]).build()
    except BuildError as e:
        lines = str(e).splitlines()
        pytest.skip(f"NOT RUN: ld.gold cannot link a C++ module on this machine: {next((x for x in lines[1:] if 'error' in x), lines[0])[:200]}")
    source = tmp_path / "parts.cuh"
    source.write_text(_PARTS_SOURCE.replace("#error PART_TWO_FAILS", ""))
    spec = JitSpec("parts_gold", cuda_files=[str(source)], cuda_wrappers=[("images", "parts::images", "")], host_without_nvcc=True,
                   device_parts=3, extra_ldflags=["-fuse-ld=gold"])
    passes = 3 if usable_cpus() >= 12 else 1
    assert spec.load().images() == (0b111 * 16 + 3 if passes == 3 else 1 * 16 + 1)


@pytest.mark.parametrize("compiler", ["nvcc", "nvrtc"])
def test_device_parts_compile_each_kernel_in_its_pass_and_launch_from_every_image(cache_dir, monkeypatch, tmp_path, caplog, compiler):
    """device_parts=3: where this process may run 3 x 4 threads at once, nvcc's three device passes each build the
    kernels named under host::in_device_part for their number (a kernel named outside any test in all three) and
    each pass's error is reported; with fewer CPUs, among builds run at once and with NVRTC one pass builds them all
    into one image. The lookup sees as many images as were built (also where gold links), and the launches find
    every kernel in whichever image holds it (gold: the test above)."""
    monkeypatch.setenv("JITKERN_CUDA_ARCH", "sm_90a")
    monkeypatch.setenv("JITKERN_DEVICE_COMPILER", compiler)
    cpus = usable_cpus()
    passes = 3 if compiler == "nvcc" and cpus >= 12 else 1
    source = tmp_path / "parts.cuh"
    source.write_text(_PARTS_SOURCE)
    spec = JitSpec("parts", cuda_files=[str(source)], cuda_wrappers=[("fill", "parts::fill", "out, which"), ("images", "parts::images", "")],
                   host_without_nvcc=True, device_parts=3)
    if passes == 3:
        # only pass 2 sees the #error: the message leads with it and names the pass
        with pytest.raises(BuildError, match=r"PART_TWO_FAILS.* \(in the device pass of JITKERN_DEVICE_PART=2 \(of 3\)\)\n"):
            spec.build()
    source.write_text(_PARTS_SOURCE.replace("#error PART_TWO_FAILS", ""))
    time.sleep(0.05)  # (rewritten just before a build, it would count as changed while that build ran)
    kernel = {k: f"_ZN5parts11fill_kernelILi{k}EEEvPi".encode() for k in (1, 2, 3, 9)}

    def one_image(module_path: str) -> None:
        one = _device_images(module_path)
        assert list(one) == ["jitkern_device_image"], list(one)
        assert all(kernel[k] in one["jitkern_device_image"] for k in (1, 2, 3, 9))

    with caplog.at_level(logging.INFO, logger="jitkern"):
        path = spec.build()
    if passes == 3:
        assert "3 passes:" in caplog.text, caplog.text
        images = _device_images(path)
        assert list(images) == ["jitkern_device_image", "jitkern_device_image_1", "jitkern_device_image_2"], list(images)
        for part, name in enumerate(images):
            assert [k for k in (1, 2, 3, 9) if kernel[k] in images[name]] == [part + 1, 9], (name, images[name][:64])
        assert spec.load().images() == 0b111 * 16 + 3
        mine = os.sched_getaffinity(0)
        os.sched_setaffinity(0, sorted(mine)[:2])
        try:
            with caplog.at_level(logging.INFO, logger="jitkern"):
                one_image(spec.replace(args=("parts_two_cpus",)).build())
        finally:
            os.sched_setaffinity(0, mine)
        assert "(one pass for 3 device parts: 2 CPUs, 12 run them at once)" in caplog.text, caplog.text
    else:
        one_image(path)
        assert spec.load().images() == 1 * 16 + 1
        if compiler == "nvcc":
            assert f"(one pass for 3 device parts: {cpus} CPUs, 12 run them at once)" in caplog.text, caplog.text
        else:
            assert "NVRTC could not" not in caplog.text, caplog.text
    if compiler == "nvcc":  # among builds run at once, one pass (NVRTC's too)
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="jitkern"):
            modules = jitkern.warmup(*(spec.replace(args=(f"parts_batch{i}",)) for i in range(2)), workers=2)
        assert caplog.text.count("(one pass for 3 device parts: builds run at once)") == 2, caplog.text
        assert [m.images() for m in modules] == [1 * 16 + 1] * 2
        one_image(modules[0].path)
    assert spec.replace(device_parts=2).build() != path, "the count is part of the key"
    with pytest.raises(ValueError, match="device_parts must be between 1 and 8, got 9"):
        spec.replace(device_parts=9).build()
    with pytest.raises(ValueError, match="device_parts was given without host_without_nvcc"):
        spec.replace(host_without_nvcc=False).build()
    with pytest.raises(TypeError, match="device_parts must be an int"):
        spec.replace(device_parts="3")
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available():
        pytest.skip("NOT RUN (the launches): needs a CUDA GPU and torch")
    module = spec.load()
    out = torch.zeros(4, dtype=torch.int32, device="cuda")
    for which, value in ((1, 1), (2, 2), (3, 3), (4, 9), (2, 2)):
        module.fill(out, which)
        assert out.tolist() == [value] * 4, (which, out.tolist())


def _cuda_runtime():
    """The CUDA runtime library this process has loaded (the one torch and the modules share), by ctypes."""
    import ctypes

    from conftest import loaded_cuda_runtimes

    paths = loaded_cuda_runtimes()
    if len(paths) != 1:
        pytest.skip(f"NOT RUN: one CUDA runtime shared by torch and the modules is needed, this process has {sorted(paths)}")
    return ctypes.CDLL(paths.pop())


def test_a_first_launch_leaves_the_callers_pending_cuda_error(cache_dir, monkeypatch, tmp_path):
    """A kernel's first launch looks it up in the module's images (a kernel of device pass 2 is missed in those of
    passes 0 and 1 first) and checks its parameters: neither is an error of the calling thread nor resets one, so
    an error it has yet to check (here a failed cudaSetDevice) is still its last error afterwards (the driver API
    the lookup takes needs CUDA 12.5+ headers and a 12.4+ driver; below 12 CPUs one pass builds the module and no
    image is missed)."""
    monkeypatch.setenv("JITKERN_DEVICE_COMPILER", "nvcc")
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available():
        pytest.skip("NOT RUN: needs a CUDA GPU and torch")
    source = tmp_path / "parts.cuh"
    source.write_text(_PARTS_SOURCE.replace("#error PART_TWO_FAILS", ""))
    module = JitSpec("parts_pending_error", cuda_files=[str(source)], cuda_wrappers=[("fill", "parts::fill", "out, which"),
                     ("images", "parts::images", "")], host_without_nvcc=True, device_parts=3).load()
    out = torch.zeros(4, dtype=torch.int32, device="cuda")
    torch.cuda.synchronize()
    cudart = _cuda_runtime()
    invalid_device = 101  # cudaErrorInvalidDevice
    for which, value in ((4, 9), (3, 3), (3, 3)):  # fill_kernel<9> in every image; <3> in pass 2's, then again
        assert cudart.cudaSetDevice(1 << 20) == invalid_device and cudart.cudaPeekAtLastError() == invalid_device
        module.fill(out, which)
        assert cudart.cudaGetLastError() == invalid_device, f"launching fill_kernel<{value}> reset the caller's pending error"
        assert cudart.cudaGetLastError() == 0
        torch.cuda.synchronize()
        assert out.tolist() == [value] * 4
    if usable_cpus() >= 12:  # else one device pass built the module: no image was missed
        assert module.images() == 0b111 * 16 + 3


_SANITIZED_CHILD = """
import sys, torch
from jitkern import JitSpec
module = JitSpec("parts_sanitized", cuda_files=[sys.argv[1]], cuda_wrappers=[("fill", "parts::fill", "out, which"),
                 ("images", "parts::images", "")], host_without_nvcc=True, device_parts=3).load()
out = torch.zeros(4, dtype=torch.int32, device="cuda")
for which, value in ((3, 3), (2, 2), (1, 1), (4, 9)):
    module.fill(out, which)
    assert out.tolist() == [value] * 4, (which, out.tolist())
print("images", module.images())
"""


def test_a_module_of_several_images_launches_without_api_errors_under_compute_sanitizer(cache_dir, monkeypatch, tmp_path):
    """A module built in several device passes finds each kernel in the one image that has it (the driver lists
    their kernels), so that no lookup misses: under compute-sanitizer, which reports every failed CUDA call as an
    error (a miss is cuLibraryGetKernel's CUDA_ERROR_NOT_FOUND), launching kernels of passes 2, 1 and 0 reports
    none."""
    monkeypatch.setenv("JITKERN_DEVICE_COMPILER", "nvcc")
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available():
        pytest.skip("NOT RUN: needs a CUDA GPU and torch")
    sanitizer = shutil.which("compute-sanitizer") or os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "compute-sanitizer")
    if not os.access(sanitizer, os.X_OK):
        pytest.skip("NOT RUN: compute-sanitizer is not installed")
    if usable_cpus() < 12:
        pytest.skip("NOT RUN: below 12 CPUs one device pass builds the module (one image, nothing to miss)")
    import ctypes
    import re
    import subprocess

    release = re.search(r"release (\d+)\.(\d+)", subprocess.run(["nvcc", "--version"], capture_output=True, text=True).stdout)
    driver = ctypes.c_int(0)
    ctypes.CDLL("libcuda.so.1").cuDriverGetVersion(ctypes.byref(driver))
    if release is None or (int(release[1]), int(release[2])) < (12, 5) or driver.value < 12040:
        pytest.skip("NOT RUN: listing an image's kernels needs CUDA 12.5+ headers and a 12.4+ driver")

    source = tmp_path / "parts.cuh"
    source.write_text(_PARTS_SOURCE.replace("#error PART_TWO_FAILS", ""))
    build = subprocess.run([sys.executable, "-c", _SANITIZED_CHILD, str(source)], capture_output=True, text=True, timeout=600)
    assert build.returncode == 0 and build.stdout.strip().endswith(f"images {0b111 * 16 + 3}"), build.stdout + build.stderr[-2000:]
    child = subprocess.run([sanitizer, "--tool", "memcheck", "--error-exitcode", "99", sys.executable, "-c", _SANITIZED_CHILD, str(source)],
                           capture_output=True, text=True, timeout=600)
    report = child.stdout + child.stderr
    assert "ERROR SUMMARY: 0 errors" in report and child.returncode == 0, report[-4000:]
