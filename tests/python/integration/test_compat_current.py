"""jitkern as the engine under the reference framework's current kernel package (jitkern.compat.sglang):
the mode choice, the loader's semantics on a small package shaped like the reference's (its headers
in namespace sglang, -DSGL_CUDA_ARCH, a dependency registry, a self-exporting source), install() under
a stand-in `sglang`, the compatibility check's discovery, and (REFERENCE_KERNELS or an installed sglang)
the reference's own kernels compiled unchanged for sm_90a."""

import importlib.util
import os
import pathlib
import re
import shutil
import struct
import subprocess
import sys
import textwrap
import time

import pytest
import tvm_ffi

from jitkern.compat import check
from jitkern.compat import sglang as compat
from conftest import REPO

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="NOT RUN: nvcc is not installed")


def write(root: pathlib.Path, files: dict) -> pathlib.Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


# A package with the reference's layout and conventions (our own small headers, not the reference's).
PACKAGE = {
    "include/sgl_kernel/utils.h": """
        #pragma once
        #include <cstdint>
        #include <stdexcept>
        namespace sglang::host {
        inline int64_t marker() { return 523; }  // jitkern's own <sgl_kernel/utils.h> has no such function
        inline void check(bool ok, const char* what) { if (!ok) throw std::runtime_error(what); }
        }  // namespace sglang::host
        """,
    "include/sgl_kernel/utils.cuh": """
        #pragma once
        #include <sgl_kernel/utils.h>
        #ifndef SGL_CUDA_ARCH
        #error "SGL_CUDA_ARCH is not defined"
        #endif
        #if defined(__CUDA_ARCH__)
        static_assert(__CUDA_ARCH__ == SGL_CUDA_ARCH, "SGL_CUDA_ARCH differs from the device target");
        #endif
        namespace sglang { inline constexpr int64_t kArch = SGL_CUDA_ARCH; }
        """,
    "include/sgl_kernel/tensor.h": """
        #pragma once
        #include <sgl_kernel/utils.h>
        #include <tvm/ffi/container/tensor.h>
        #include <tvm/ffi/dtype.h>
        namespace sglang::host {
        inline int64_t rows(tvm::ffi::TensorView t) {
          check(t.dtype() == DLDataType{kDLFloat, 32, 1}, "rows: expected float32");
          return t.size(0);
        }
        }  // namespace sglang::host
        """,
    "csrc/lean.cuh": """
        #include <string>
        #include <string_view>
        #include <sgl_kernel/tensor.h>
        #include <sgl_kernel/utils.cuh>
        #include <tvm/ffi/container/tensor.h>
        namespace sglang {
        __global__ void scale(float* x) { x[threadIdx.x] *= 2.0f; }
        template <int N>
        struct Kernel {
          static int64_t run(tvm::ffi::TensorView x, tvm::ffi::Optional<tvm::ffi::TensorView> y, int64_t z) {
            host::check(x.IsContiguous() && x.sizes()[0] == x.size(0), "tvm-ffi's spellings");  // the lean view has them too
            return host::marker() * 1000000 + kArch * 1000 + host::rows(x) * N + (y.has_value() ? 100 : 0) + z;
          }
        };
        inline int64_t named(std::string a, std::string b) { return a == "silu" ? 1000 + b.size() : -1; }  // as the reference's activations take
        inline int64_t viewed(std::string_view a) { return a.size(); }
        }  // namespace sglang
        """,
    # tvm-ffi's C++ API beyond the tensor view: tvm-ffi's Optional of a scalar, its Array.
    "csrc/full.cuh": """
        #include <sgl_kernel/tensor.h>
        #include <sgl_kernel/utils.cuh>
        #include <tvm/ffi/container/array.h>
        #include <tvm/ffi/optional.h>
        namespace sglang {
        inline int64_t total(tvm::ffi::TensorView x, tvm::ffi::Optional<int64_t> extra, tvm::ffi::Array<int64_t> more) {
          int64_t sum = host::rows(x) + (extra.has_value() ? *extra : 1000);
          for (int64_t v : more) sum += v;
          return sum + kArch;
        }
        }  // namespace sglang
        """,
    "csrc/self_export.cu": """
        #include <tvm/ffi/function.h>
        #include <dep_marker.h>
        namespace sglang {
        int64_t twice(int64_t x) { return 2 * x + kDepMarker; }
        TVM_FFI_DLL_EXPORT_TYPED_FUNC(twice, twice);
        }  // namespace sglang
        """,
    "dep/dep_marker.h": "#pragma once\ninline constexpr long kDepMarker = 7;\n",
    "utils/deps.py": """
        import pathlib
        REGISTERED_DEPENDENCIES = {"marker": lambda: [str(pathlib.Path(__file__).resolve().parent.parent / "dep")]}
        """,
}


@pytest.fixture
def package(tmp_path):
    root = write(tmp_path / "kernels" / "jit", PACKAGE)
    compat.set_kernel_root(root)
    yield root
    compat.set_kernel_root(None)


def test_build_mode_follows_the_include_closure(package):
    inc = [str(package / "include")]
    assert compat.build_mode([str(package / "csrc" / "lean.cuh")], inc) == ("lean", "")
    mode, why = compat.build_mode([str(package / "csrc" / "full.cuh")], inc)
    assert mode == "tvm-ffi" and why.endswith("full.cuh") and "ffi::Optional<" in why
    # through a quoted include next to the file, and a use of tvm-ffi's C++ names without an include of them
    write(package, {"csrc/a.cuh": '#include "b.h"\n', "csrc/b.h": "// tvm::ffi::Tensor in a comment decides nothing\n",
                    "csrc/c.cuh": '#include "d.h"\n', "csrc/d.h": "inline auto f(tvm::ffi::Tensor t) { return t; }\n",
                    "csrc/e.cuh": "int g(tvm::ffi::Optional<int64_t> v);\n", "csrc/f.cuh": "int h(tvm::ffi::Optional<tvm::ffi::TensorView> v);\n"})
    assert compat.build_mode([str(package / "csrc" / "a.cuh")], inc)[0] == "lean"
    assert compat.build_mode([str(package / "csrc" / "c.cuh")], inc)[0] == "tvm-ffi"
    assert compat.build_mode([str(package / "csrc" / "e.cuh")], inc)[0] == "tvm-ffi"
    assert compat.build_mode([str(package / "csrc" / "f.cuh")], inc)[0] == "lean"


def test_the_kernel_files_first_header_opens_the_generated_source(package, monkeypatch):
    """A kernel file whose first line of code includes a `#pragma once` header of the package's include
    root (the reference's kernels: <sgl_kernel/tensor.h>) has that header included just before it: the
    same tokens at the same place (the kernel's own #include of it then adds nothing), and with jitkern's
    headers before it, the start many modules share (host_shared_files). Anything else first: as it is."""
    monkeypatch.setenv("JITKERN_CUDA_ARCH", "sm_90a")
    write(package, {"csrc/leads.cuh": "// about it\n/* more\n   about it */\n\n#pragma once  // once\n#include <sgl_kernel/tensor.h>  // views\nint x;\n",
                    "csrc/defines_first.cuh": "#define WIDTH 4\n#include <sgl_kernel/tensor.h>\n",
                    "csrc/quoted_first.cuh": '#include "../include/sgl_kernel/tensor.h"\n',
                    "csrc/guardless_first.cuh": "#include <sgl_kernel/guardless.h>\n",
                    "include/sgl_kernel/guardless.h": "inline int twice_included_is_an_error() { return 1; }\n"})
    compat_dir = os.path.join(os.path.dirname(compat.__file__), "..", "include", "jitkern", "compat")
    tensor = f"{package / 'include'}/sgl_kernel/tensor.h"
    for mode, before in (("lean", ["host_launch.h", "tvm_ffi_lean.h"]), ("tvm-ffi", ["host_launch.h"])):
        spec = compat.jit_spec("leads", cuda_files=["leads.cuh"], mode=mode)[0]
        files = [os.path.basename(f) for f in spec.cuda_files]
        assert files[:len(before)] == before and spec.cuda_files[len(before)] == tensor and files[len(before) + 1] == "leads.cuh", spec.cuda_files
        assert spec.host_shared_files == len(before) + 1 and os.path.realpath(os.path.dirname(spec.cuda_files[0])) == os.path.realpath(compat_dir)
    for name in ("defines_first.cuh", "quoted_first.cuh", "guardless_first.cuh"):
        spec = compat.jit_spec("other", cuda_files=[name], mode="lean")[0]
        assert [os.path.basename(f) for f in spec.cuda_files[:3]] == ["host_launch.h", "tvm_ffi_lean.h", name] and spec.host_shared_files == 2, name


def test_arch_one_choice_for_target_and_define(monkeypatch):
    monkeypatch.setenv("JITKERN_CUDA_ARCH", "sm_90a")
    arch = compat.get_jit_cuda_arch()
    assert (arch.sm, arch.jit_flag, arch.target_name, compat.is_arch_support_pdl()) == ("sm_90a", "-DSGL_CUDA_ARCH=900", "9.0a", True)
    with compat.override_jit_cuda_arch(8, 0):
        assert compat.get_jit_cuda_arch().sm == "sm_80" and not compat.is_arch_support_pdl()
        with compat.override_jit_cuda_arch(10, 0, "f"):
            assert compat.get_jit_cuda_arch().jit_flag == "-DSGL_CUDA_ARCH=1000"
    assert compat.get_jit_cuda_arch().sm == "sm_90a"
    monkeypatch.setenv("JITKERN_CUDA_ARCH", "hopper")
    with pytest.raises(ValueError, match=r"invalid CUDA architecture 'hopper' \(from JITKERN_CUDA_ARCH\)"):
        compat.get_jit_cuda_arch()


def test_make_cpp_args_spells_as_the_reference():
    assert str(compat.make_cpp_args(True, 128, 0.5, "Foo<1>")) == "true, 128, 0.5, Foo<1>"
    with pytest.raises(TypeError, match="make_cpp_args: unsupported argument"):
        compat.make_cpp_args(None)


def test_kernel_root_must_be_a_kernel_package(tmp_path):
    with pytest.raises(ValueError, match=f"set_kernel_root: {tmp_path} is not the reference's JIT kernel package"):
        compat.set_kernel_root(tmp_path)


@needs_nvcc
def test_package_kernels_build_and_run_in_both_modes(package, cache_dir, monkeypatch):
    """Lean and tvm-ffi modes: the package's headers win over jitkern's own <sgl_kernel/...>, names
    resolve in namespace sglang, -DSGL_CUDA_ARCH matches the target, host code runs on CPU arrays."""
    np = pytest.importorskip("numpy")
    monkeypatch.setenv("JITKERN_CUDA_ARCH", "sm_90a")
    x = np.zeros((3, 2), np.float32)
    for mode in ("lean", "tvm-ffi"):
        spec, chosen, _ = compat.jit_spec("lean_kernel", "5", cuda_files=["lean.cuh"], cuda_wrappers=[("run", "Kernel<5>::run"), ("named", "named")], mode=mode)
        assert chosen == mode
        module = tvm_ffi.load_module(spec.load().path)  # as load_jit returns it
        assert module.run(x, None, 4) == 523_900_000 + 15 + 4
        assert module.run(x, x, 4) == 523_900_000 + 15 + 104
        with pytest.raises(RuntimeError, match="rows: expected float32"):
            module.run(np.zeros((3, 2), np.int32), None, 0)
        assert module.named("silu", "a string longer than a small one") == 1000 + 32
    lean = compat.jit_spec("viewed", cuda_files=["lean.cuh"], cuda_wrappers=[("viewed", "viewed")], mode="lean")[0]
    assert tvm_ffi.load_module(lean.load().path).viewed("gelu_tanh") == 9
    assert compat.jit_spec("lean_kernel", cuda_files=["lean.cuh"], cuda_wrappers=[("run", "Kernel<5>::run")])[1] == "lean"
    full = compat.load_jit("full_kernel", cuda_files=["full.cuh"], cuda_wrappers=[("total", "total")])
    assert full.total(x, None, [1, 2]) == 3 + 1000 + 3 + 900
    assert full.total(x, 5, []) == 3 + 5 + 900


@needs_nvcc
def test_later_modules_compile_the_shared_host_prefix_precompiled_to_the_same_library(package, cache_dir, monkeypatch, tmp_path, caplog):
    """The rewritten host side of a module starting with the same headers as an earlier one of the process
    is compiled with that start precompiled (GCC's precompiled header, made in the background by the first
    module's build, in $TMPDIR): its library is the one the whole text gives, byte for byte. Run in a process
    of its own: a process makes at most a few precompiled headers, which earlier tests may have used."""
    if os.environ.get("JITKERN_TEST_OWN_PROCESS") != "1":
        node = f"{__file__}::test_later_modules_compile_the_shared_host_prefix_precompiled_to_the_same_library"
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "-m", "", node],
                              env={**os.environ, "JITKERN_TEST_OWN_PROCESS": "1"}, capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0 and " passed" in proc.stdout, proc.stdout[-4000:] + proc.stderr[-2000:]
        return
    np = pytest.importorskip("numpy")
    monkeypatch.setenv("JITKERN_CUDA_ARCH", "sm_90a")
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    write(package, {"csrc/shares.cuh": """
        #include <sgl_kernel/tensor.h>
        #include <sgl_kernel/utils.cuh>
        namespace sglang {
        __global__ void fill(float* x, float v) { x[threadIdx.x] = v; }
        template <int N>
        int64_t rows_times(tvm::ffi::TensorView x) { return host::rows(x) * N + kArch; }
        }  // namespace sglang
        """})
    x = np.zeros((3, 2), np.float32)
    with caplog.at_level("INFO", logger="jitkern"):
        for n in range(1, 40):
            caplog.clear()
            spec = compat.jit_spec("shares", str(n), cuda_files=["shares.cuh"], cuda_wrappers=[("f", f"rows_times<{n}>")])[0]
            assert tvm_ffi.load_module(spec.load().path).f(x) == 3 * n + 900
            if "(shared prefix precompiled)" in caplog.text:
                break
        else:
            raise AssertionError("no build ever used the precompiled shared host prefix")
    assert any(p.name.startswith("jitkern-prelude-") for p in (tmp_path / "tmp").iterdir())
    with_prefix = spec.build()
    monkeypatch.setenv("JITKERN_CACHE_DIR", str(tmp_path / "other_cache"))
    with caplog.at_level("INFO", logger="jitkern"):
        caplog.clear()
        without = spec.replace(host_shared_files=0).build()
        assert os.path.relpath(without, tmp_path / "other_cache") == os.path.relpath(with_prefix, cache_dir), "host_shared_files is in the key"
        assert pathlib.Path(without).read_bytes() == pathlib.Path(with_prefix).read_bytes()
        assert "(shared prefix precompiled)" not in caplog.text and "host side without cudafe++" in caplog.text
    # A shared header edited: the module built with it precompiled rebuilds, from the new text.
    monkeypatch.setenv("JITKERN_CACHE_DIR", str(cache_dir))
    tensor = package / "include" / "sgl_kernel" / "tensor.h"
    time.sleep(0.02)  # past the timestamps' granularity
    tensor.write_text(tensor.read_text().replace("return t.size(0);", "return t.size(0) + 1000;"))
    with caplog.at_level("INFO", logger="jitkern"):
        caplog.clear()
        rebuilt = spec.build()
        assert rebuilt != with_prefix and tvm_ffi.load_module(rebuilt).f(x) == 1003 * n + 900
        assert "(shared prefix precompiled)" not in caplog.text and "host side without cudafe++" in caplog.text


@needs_nvcc
def test_lean_failure_falls_back_to_tvm_ffi_mode(package, cache_dir, monkeypatch):
    """A kernel whose use of tvm-ffi's C++ API the scan cannot see still builds (in tvm-ffi mode)."""
    np = pytest.importorskip("numpy")
    monkeypatch.setenv("JITKERN_CUDA_ARCH", "sm_90a")
    write(package, {"csrc/hidden.cuh": """
        #include <sgl_kernel/tensor.h>
        #define FFI_NS tvm::ffi
        namespace sglang { inline int64_t count(FFI_NS::Array<int64_t> a) { return a.size(); } }
        """})
    assert compat.jit_spec("hidden", cuda_files=["hidden.cuh"], cuda_wrappers=[("count", "count")])[1] == "lean"
    assert compat.load_jit("hidden", cuda_files=["hidden.cuh"], cuda_wrappers=[("count", "count")]).count([4, 5, 6]) == 3


@needs_nvcc
def test_self_exporting_sources_and_dependencies(package, cache_dir, monkeypatch):
    monkeypatch.setenv("JITKERN_CUDA_ARCH", "sm_90a")
    compat.record_calls(package / "calls.jsonl")
    try:
        module = compat.load_jit("self_export", cuda_files=["self_export.cu"], extra_dependencies=["marker"], header_only=False)
    finally:
        compat.record_calls(None)
    assert module.twice(20) == 47
    [recorded] = check.read_recorded(str(package / "calls.jsonl"))  # what the check replays with --calls
    assert (recorded.args, recorded.files, recorded.kwargs["header_only"]) == (("self_export",), ("self_export.cu",), False)
    with pytest.raises(ValueError, match="extra_dependencies: dependency 'cutlass' is not registered; registered: marker"):
        compat.load_jit("self_export", cuda_files=["self_export.cu"], extra_dependencies=["cutlass"], header_only=False)


def elf_functions(data: bytes, base: int = 0, entries_only: bool = False) -> set[str]:
    """The function symbols of the ELF file at `base` in `data` (every symbol table; `entries_only`: a
    cubin's kernels, marked STO_CUDA_ENTRY)."""
    shoff, = struct.unpack_from("<Q", data, base + 0x28)
    entsize, count = struct.unpack_from("<HH", data, base + 0x3A)
    sections = [struct.unpack_from("<IIQQQQI", data, base + shoff + i * entsize) for i in range(count)]
    names = set()
    for _, kind, _, _, offset, size, link in sections:
        if kind != 2:  # SHT_SYMTAB
            continue
        strings = base + sections[link][4]
        for at in range(base + offset, base + offset + size, 24):
            name, info, other = struct.unpack_from("<IBB", data, at)
            if info & 0xF == 2 and (other & 0x10 or not entries_only):  # STT_FUNC
                names.add(data[strings + name:data.index(b"\0", strings + name)].decode())
    return names


def image_and_host_functions(library: str) -> tuple[set[str], set[str]]:
    """(the kernels of the module's device image, the functions of its host side): the image is the
    fatbin the engine links in (section .nv_fatbin), its cubins read uncompressed."""
    data = pathlib.Path(library).read_bytes()
    shoff, = struct.unpack_from("<Q", data, 0x28)
    entsize, count, names_at = struct.unpack_from("<HHH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQ", data, shoff + i * entsize) for i in range(count)]
    strings = sections[names_at][4]
    fatbin = next(data[s[4]:s[4] + s[5]] for s in sections if data[strings + s[0]:].startswith(b".nv_fatbin\0"))
    kernels, at = set(), fatbin.find(b"\x7fELF")
    while at >= 0:
        kernels |= elf_functions(fatbin, at, entries_only=True)
        at = fatbin.find(b"\x7fELF", at + 4)
    return kernels, elf_functions(data)


def host_side(caplog, module: str) -> str:
    """How the build of `module` compiled its host side, from the engine's log."""
    lines = [r.getMessage() for r in caplog.records if module in r.getMessage()]
    if any("host side without cudafe++" in line for line in lines):
        return "rewritten"
    marker = check._HostSides.MARKER
    return next((line.split(marker, 1)[1] for line in lines if marker in line), "not built")


@needs_nvcc
def test_host_side_without_cudafe_and_where_it_falls_back(package, cache_dir, monkeypatch, caplog):
    """A reference kernel file's host side: nvcc's preprocessing rewritten and compiled by the host
    compiler alone, its kernel stubs named as the device image's kernels; where the rewrite cannot be
    sure (a static kernel: its device symbol is not its host name), nvcc's host chain, the reason logged."""
    np = pytest.importorskip("numpy")
    monkeypatch.setenv("JITKERN_CUDA_ARCH", "sm_90a")
    write(package, {"csrc/static_kernel.cuh": """
        #include <sgl_kernel/utils.cuh>
        namespace sglang {
        static __global__ void hidden_scale(float* x) { x[threadIdx.x] *= 3.0f; }
        inline int64_t launches_nothing(int64_t x) { return x + kArch; }
        }  // namespace sglang
        """})
    x = np.zeros((3, 2), np.float32)
    with caplog.at_level("INFO", logger="jitkern"):
        spec = compat.jit_spec("lean_kernel", "5", cuda_files=["lean.cuh"], cuda_wrappers=[("run", "Kernel<5>::run")])[0]
        assert spec.host_without_cudafe
        path = spec.build()
        assert tvm_ffi.load_module(path).run(x, None, 4) == 523_900_000 + 15 + 4
        kernels, host = image_and_host_functions(path)
        assert kernels == {"_ZN6sglang5scaleEPf"} and kernels <= host
        fallback = compat.load_jit("static_kernel", cuda_files=["static_kernel.cuh"], cuda_wrappers=[("f", "launches_nothing")])
        assert fallback.f(1) == 901
        # Occupancy, attributes, <<<...>>> and cudaLaunchKernelEx: routed (run on the GPU by the next test).
        write(package, {"csrc/routed.cuh": ROUTED})
        routed = compat.jit_spec("routed", "5", cuda_files=["routed.cuh"], cuda_wrappers=[("run", "Routed<5>::run")])[0].build()
        kernels, host = image_and_host_functions(routed)
        named = {"_ZN6sglang5add_nILi5EEEvPfi", "_ZN6sglang5add_nILi1EEEvPfi", "_ZN6sglang9times_twoEPfi"}
        assert named <= kernels and named <= host
        # The unnamed namespace: GCC's _GLOBAL__N_1, the device code's named after the module id.
        assert "_ZN6sglang12_GLOBAL__N_19minus_oneEPfi" in host
        [unnamed] = kernels - named
        assert re.fullmatch(r"_ZN6sglang41_GLOBAL__N__[0-9a-f]{8}_9_device_cu_[0-9a-f]{8}9minus_oneEPfi", unnamed), unnamed
    assert host_side(caplog, "sglang_lean_kernel_5") == "rewritten"
    # Its line also times nvcc's device chain alone (bench_compat_sglang's floor column reads it).
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    from utils import compile_seconds

    compiled = [r.getMessage() for r in caplog.records if r.getMessage().startswith("compiled sglang_lean_kernel_5 ")]
    assert len(compiled) == 1, compiled
    build, device = compile_seconds(compiled[0])
    assert 0 < device <= build < 600, compiled
    assert host_side(caplog, "sglang_static_kernel").startswith("the rewrite refused: a static kernel")
    assert host_side(caplog, "sglang_routed_5") == "rewritten"
    # The rewrite is part of the module's identity: without it, another cache entry.
    assert spec.replace(host_without_cudafe=False, host_shared_files=0).build() != path
    # The compatibility check says which files' host sides went through cudafe++, and why.
    calls = [check.Call("s.py", "f", ("static_kernel", "2"), {"cuda_files": ["static_kernel.cuh"], "cuda_wrappers": [("f", "launches_nothing")]},
                        ("static_kernel.cuh",)),
             check.Call("r.py", "f", ("routed", "6"), {"cuda_files": ["routed.cuh"], "cuda_wrappers": [("run", "Routed<6>::run")]}, ("routed.cuh",))]
    static_row, routed_row = check.run(calls, package, workers=1, time_budget=None)
    assert static_row.outcome == "lean" and static_row.detail.startswith(
        "host side through cudafe++: the rewrite refused: a static kernel"), static_row.detail
    assert "csrc/static_kernel.cuh:4" in static_row.detail
    assert (routed_row.outcome, routed_row.detail) == ("lean", "")


# Every way a reference kernel file reaches a kernel from its host side, through the routed calls.
ROUTED = """
    #include <sgl_kernel/tensor.h>
    #include <sgl_kernel/utils.cuh>
    #include <cuda_runtime.h>
    namespace sglang {
    template <int N>
    __global__ void add_n(float* x, int n) { const int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] += N; }
    __global__ void times_two(float* x, int n) { const int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] *= 2; }
    namespace {
    __global__ void minus_one(float* x, int n) { const int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] -= 1; }
    }  // namespace
    template <int N>
    struct Routed {
      static constexpr auto kernel = add_n<N>;
      static int64_t run(tvm::ffi::TensorView x) {
        float* p = static_cast<float*>(x.data_ptr());
        const int n = static_cast<int>(x.size(0)), blocks = (n + 127) / 128;
        int per_sm = 0;
        cudaFuncAttributes attr{};
        if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, 128, 0) != cudaSuccess || per_sm <= 0) return -1;
        if (cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel), cudaFuncAttributeMaxDynamicSharedMemorySize, 1024) != cudaSuccess) return -2;
        if (cudaFuncGetAttributes(&attr, times_two) != cudaSuccess || attr.maxThreadsPerBlock < 128) return -3;
        add_n<N><<<blocks, 128>>>(p, n);
        times_two<<<blocks, 128, 0, nullptr>>>(p, n);
        minus_one<<<blocks, 128>>>(p, n);
        cudaLaunchConfig_t config{};
        config.gridDim = dim3(blocks), config.blockDim = dim3(128);
        if (cudaLaunchKernelEx(&config, add_n<1>, p, n) != cudaSuccess) return -4;
        return cudaDeviceSynchronize() == cudaSuccess ? per_sm : -5;
      }
    };
    }  // namespace sglang
    """


@pytest.mark.gpu
def test_routed_runtime_calls_reach_the_device_images_kernels(package, cache_dir, caplog):
    """A rewritten host side's occupancy query, attribute calls, <<<...>>> launches (plain and templated
    names, one in an unnamed namespace) and cudaLaunchKernelEx run the module's own kernels on the GPU."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("NOT RUN: needs a CUDA GPU")
    write(package, {"csrc/routed.cuh": ROUTED})
    x = torch.zeros(1000, device="cuda")
    with caplog.at_level("INFO", logger="jitkern"):
        module = compat.load_jit("routed", "5", cuda_files=["routed.cuh"], cuda_wrappers=[("run", "Routed<5>::run")])
        assert module.run(x) > 0
    assert host_side(caplog, "sglang_routed_5") == "rewritten"
    assert torch.equal(x, torch.full_like(x, (0 + 5) * 2 - 1 + 1))


STAND_IN = {
    "sglang/__init__.py": "",
    "sglang/kernels/__init__.py": "",
    "sglang/kernels/jit/__init__.py": "",
    "sglang/kernels/jit/utils/__init__.py": """
        from sglang.kernels.jit.utils.compile.loader import load_jit
        def parallel_compile(builders, max_workers=None):
            return ["reference"]
        def cache_once(f):
            return f
        """,
    "sglang/kernels/jit/utils/arch.py": """
        class _Arch:
            major, minor, suffix = 8, 9, ""
        def get_jit_cuda_arch():
            return _Arch()
        """,
    "sglang/kernels/jit/utils/compile/__init__.py": "",
    "sglang/kernels/jit/utils/compile/loader.py": "def load_jit(*args, **kwargs):\n    return 'reference'\n",
    "sglang/kernels/ops/__init__.py": "",
    "sglang/kernels/ops/early.py": "from sglang.kernels.jit.utils import load_jit, cache_once\n",
}


def test_install_replaces_the_loader_everywhere_and_uninstall_restores(tmp_path, monkeypatch):
    write(tmp_path, STAND_IN)
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in [n for n in sys.modules if n == "sglang" or n.startswith("sglang.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.delenv("JITKERN_CUDA_ARCH", raising=False)
    import sglang.kernels.ops.early as early
    import sglang.kernels.jit.utils as utils

    compat.install()
    try:
        import importlib

        late = importlib.import_module("sglang.kernels.jit.utils")
        assert early.load_jit is compat.load_jit and late.load_jit is compat.load_jit
        assert utils.parallel_compile is compat.parallel_compile and early.cache_once is utils.cache_once
        assert sys.modules["sglang.kernels.jit.utils.compile.loader"].load_jit is compat.load_jit
        assert compat.get_jit_cuda_arch().sm == "sm_89"  # the reference's own choice of target
        write(tmp_path, {"sglang/kernels/ops/later.py": "from sglang.kernels.jit.utils import load_jit\n"})
        import sglang.kernels.ops.later as later

        assert later.load_jit is compat.load_jit
        compat.install()  # idempotent
    finally:
        compat.uninstall()
    assert early.load_jit() == "reference" and utils.parallel_compile([]) == ["reference"] and later.load_jit() == "reference"


OPS = {
    "ops/__init__.py": "",
    "ops/norm/thing.py": """
        from __future__ import annotations
        import torch
        from sglang.kernels.jit.utils import cache_once, is_arch_support_pdl, load_jit, make_cpp_args
        from sglang.srt.utils import register_custom_op
        from .helpers import KIND

        _NAMES = {torch.bfloat16: "Bf", torch.float16: "Half"}

        @cache_once
        def _jit_thing_module(head_dim: int, dtype: torch.dtype, flag: bool = True):
            args = make_cpp_args(head_dim, is_arch_support_pdl(), dtype, flag)
            return load_jit("thing", *args, cuda_files=["lean.cuh"], cuda_wrappers=[("run", f"Thing{_NAMES[dtype]}<{args}>::run")])

        @register_custom_op(op_name="x")
        def unrelated(x):
            return x

        def _jit_picky(dtype: torch.dtype):
            if dtype != torch.float16:
                raise RuntimeError(f"only float16, got {dtype}")
            return load_jit("picky", *make_cpp_args(dtype), cuda_files=["full.cuh"], cuda_wrappers=[("total", f"{KIND}_total")])

        def _jit_never(n: int):
            raise RuntimeError(f"no kernel for {n}")
            return load_jit("never", cuda_files=["never.cuh"], cuda_wrappers=[("f", "f")])
        """,
    "ops/norm/helpers.py": "KIND = 'full'\n",
}


def test_check_discovers_calls_with_representative_arguments(package):
    write(package.parent, OPS)
    calls = {c.function: c for c in check.discover(package)}
    thing = calls["_jit_thing_module"]
    assert (thing.op, thing.args, thing.files) == ("norm/thing.py", ("thing", "128", "true", "bf16_t", "true"), ("lean.cuh",))
    assert thing.kwargs["cuda_wrappers"] == [("run", "ThingBf<128, true, bf16_t, true>::run")]
    # the other argument sets it takes, distinct, for a retry: float16, larger and smaller sizes
    assert [a for a, _ in thing.others][:2] == [("thing", "128", "true", "fp16_t", "true"), ("thing", "512", "true", "bf16_t", "true")]
    picky = calls["_jit_picky"]  # refuses bfloat16, takes the next try; a name from a sibling op module
    assert (picky.problem, picky.args, picky.kwargs["cuda_wrappers"]) == ("", ("picky", "fp16_t"), [("total", "full_total")])
    never = calls["_jit_never"]
    assert never.problem == "running it with representative arguments raised RuntimeError: no kernel for 128"
    assert never.files == ("never.cuh",)


@needs_nvcc
def test_check_compiles_and_tabulates(package, cache_dir):
    write(package.parent, OPS)
    write(package, {"csrc/broken.cuh": "namespace sglang { int f() { return undefined_name; } }\n",
                    "csrc/rocm_only_hip.cuh": "#include <hip/hip_runtime.h>\n",
                    "csrc/sized.h": "#include <cstdint>\nnamespace sglang { template <int N> struct Sized { static_assert(N < 256, \"N too large\"); "
                                    "static int64_t run(int64_t x) { return x + N; } }; }\n"})
    sized = [(("sized", str(n)), {"cpp_files": ["sized.h"], "cpp_wrappers": [("run", f"Sized<{n}>::run")]}) for n in (512, 1024, 64)]
    calls = [check.Call("a.py", "f", ("lean_kernel", "5"), {"cuda_files": ["lean.cuh"], "cuda_wrappers": [("run", "Kernel<5>::run")]}, ("lean.cuh",)),
             check.Call("b.py", "f", ("full",), {"cuda_files": ["full.cuh"], "cuda_wrappers": [("total", "total")]}, ("full.cuh",)),
             check.Call("c.py", "f", ("broken",), {"cuda_files": ["broken.cuh"], "cuda_wrappers": [("f", "f")]}, ("broken.cuh",)),
             check.Call("d.py", "f", ("r",), {"cuda_files": ["rocm_only_hip.cuh"]}, ("rocm_only_hip.cuh",)),
             check.Call("f_sm100.py", "f", ("b",), {"cuda_files": ["lean.cuh"]}, ("lean.cuh", "x.cuh")),
             check.Call("e.py", "f", problem="no"),
             # the first two argument sets fail in both modes (a size the kernel refuses): the next one is compiled
             check.Call("g.py", "f", *sized[0], files=("sized.h",), others=sized[1:])]
    with compat.override_jit_cuda_arch(9, 0, "a"):
        rows = {r.file: r for r in check.run(calls, package, workers=2, time_budget=None)}
    assert [rows[f].outcome for f in ("lean.cuh", "full.cuh", "broken.cuh", "rocm_only_hip.cuh", "lean.cuh, x.cuh", "?", "sized.h")] == [
        "lean", "tvm-ffi", "fails", "skipped", "skipped", "not instantiated", "lean"]
    assert rows["lean.cuh, x.cuh"].detail == "written for sm_100 (the target is sm_90a)"
    assert "undefined_name" in rows["broken.cuh"].detail and "full.cuh" in rows["full.cuh"].detail
    assert rows["sized.h"].detail.startswith("as <64>; <512> failed in both modes: ") and "N too large" in rows["sized.h"].detail
    text = check.table(list(rows.values()))
    assert text.startswith("7 kernel files: 3 compile (2 lean, 1 tvm-ffi), 1 fail, 2 skipped, 1 not instantiated, 0 not run; 75% of")


def test_check_stops_waiting_for_builds_after_the_time_budget(monkeypatch):
    """A build still running LATE seconds after the budget is listed as not run, and run() returns."""
    import threading
    import time

    release = threading.Event()

    def compile_call(call, kernel_root):
        if call.op == "slow.py":
            release.wait(60)
        return check.Row(call.files[0], call.op, "lean")

    monkeypatch.setattr(check, "compile_call", compile_call)
    monkeypatch.setattr(check, "LATE", 0.2)
    calls = [check.Call(op, "f", files=(f"{op}.cuh",)) for op in ("fast.py", "slow.py", "next.py")]
    start = time.monotonic()
    try:
        rows = check.run(calls, pathlib.Path("/nonexistent"), workers=2, time_budget=0.3)
    finally:
        release.set()
    assert time.monotonic() - start < 30
    assert [(r.outcome, r.detail) for r in rows] == [("lean", ""), ("not run", check.STILL_COMPILING), ("lean", "")]


# The reference's own kernels, unchanged: an installed sglang, or REFERENCE_KERNELS=<its sglang/kernels/jit>.
def _reference_root():
    env = os.environ.get("REFERENCE_KERNELS")
    if env:
        return pathlib.Path(env)
    spec = importlib.util.find_spec("sglang")
    root = pathlib.Path(list(spec.submodule_search_locations)[0]) / "kernels" / "jit" if spec and spec.submodule_search_locations else None
    return root if root is not None and (root / "csrc").is_dir() else None


REFERENCE = _reference_root()
needs_reference = pytest.mark.skipif(REFERENCE is None, reason="NOT RUN: set REFERENCE_KERNELS to the reference's sglang/kernels/jit")

# Hot-path kernel files: the subset CI compiles (two cores: a full run is in docs/benchmarks/compat.md):
# those of the twenty hottest ops (tests/python/compat_sglang_ops.py) and the all-reduce.
HOT = ["elementwise/rmsnorm.cuh", "elementwise/fused_add_rmsnorm.cuh", "elementwise/qknorm.cuh", "elementwise/activation.cuh",
       "elementwise/kvcache.cuh", "gemm/per_token_group_quant.cuh", "moe/moe_topk_softmax.cuh", "distributed/custom_all_reduce.cuh",
       "elementwise/rope.cuh", "elementwise/fused_qknorm_rope.cuh", "elementwise/set_mla_kv_buffer.cuh", "elementwise/concat_mla.cuh",
       "moe/moe_align_kernel.cu", "moe/topk_sum.cuh", "moe/moe_topk_sigmoid.cuh", "gemm/per_token_quant_fp8.cuh",
       "gemm/per_tensor_quant_fp8.cuh", "deepseek_v4/silu_and_mul_masked_post_quant.cuh", "elementwise/grouped_gemma_rmsnorm.cuh",
       "elementwise/rmsnorm_hf.cuh"]


# Kernels of a hot file's device image that its host code cannot launch in the check's instantiation, so the
# host compiler drops their stubs: the transposed layout of the FP8 SiLU kernels, reached only after
# RuntimeCheck(kScaleUE8M0) throws when the scales are not UE8M0.
NEVER_LAUNCHED = {"deepseek_v4/silu_and_mul_masked_post_quant.cuh": ("silu_mul_quant_contig_kernelILj128ELb1ELb1E",
                                                                     "silu_mul_quant_varlen_kernelILj128ELb1ELb1E")}


@pytest.mark.slow  # twenty of the reference's kernel files through nvcc
@needs_reference
@needs_nvcc
def test_reference_hot_kernels_compile_unchanged(cache_dir, caplog):
    """The check on the reference's hot-path kernels: every one compiles, the norms in lean mode, each
    with its host side rewritten (no cudafe++), whose kernel stubs name the reference's kernels in the
    module's device image."""
    compat.set_kernel_root(REFERENCE)
    try:
        with compat.override_jit_cuda_arch(9, 0, "a"), caplog.at_level("INFO", logger="jitkern"):  # some op functions ask for the arch
            found = {c.files[0]: c for c in check.representative(check.discover(REFERENCE)) if c.files and not c.problem}
            assert set(HOT) <= set(found), f"not found or not instantiated: {sorted(set(HOT) - set(found))}"
            rows = check.run([found[f] for f in HOT], REFERENCE, workers=2, time_budget=900)
            # an instantiation the check replaced (its first guess refused, the row says "as ...") is not rebuilt here
            specs = {f: compat.jit_spec(*found[f].args, **check.load_jit_kwargs(found[f].kwargs))[0] for f in HOT
                     if not any(r.file == f and r.detail.startswith("as ") for r in rows)}
            paths = {f: spec.build() for f, spec in specs.items()}  # built above: cache hits
    finally:
        compat.set_kernel_root(None)
    print(check.table(rows))
    outcome = {r.file: r.outcome for r in rows}
    assert [r for r in rows if r.outcome not in ("lean", "tvm-ffi", "not run")] == []
    assert outcome["elementwise/rmsnorm.cuh"] == outcome["elementwise/fused_add_rmsnorm.cuh"] == "lean"
    for f, spec in specs.items():
        if outcome[f] == "not run":
            continue
        assert host_side(caplog, "_".join(spec.args)) == "rewritten", f
        kernels, host = image_and_host_functions(paths[f])
        theirs = {k for k in kernels if k.startswith("_ZN6sglang")}  # the reference's own (CUB's may be device-only)
        unlaunched = {k for k in theirs - host if any(p in k for p in NEVER_LAUNCHED.get(f, ()))}
        assert theirs and theirs - unlaunched <= host, (f, sorted(theirs - host))



@needs_reference
def test_reference_ops_are_discovered():
    calls = check.discover(REFERENCE)
    assert len(calls) >= 150
    assert sum(not c.problem for c in calls) >= 0.8 * len(calls)


def test_reference_import_from_a_wheel_alone(tmp_path, monkeypatch):
    """benchmarks/utils.reference_import, through which the GPU test and bench_compat_sglang import the
    reference's op modules where only its wheel is there: sglang's own __init__ (the serving stack) is
    skipped, but not its srt.utils package's (ops import names re-exported there), a missing third-party
    module gets a stand-in, and msgspec a working one (the reference's build cache reads and writes it)."""
    write(tmp_path, {
        "sglang/__init__.py": "raise ImportError('the serving stack')\n",
        "sglang/srt/utils/__init__.py": "from sglang.srt.utils.common import *\n",
        "sglang/srt/utils/common.py": """
            import jitkern_test_absent_module
            from jitkern_test_absent_package.sub import Base
            class Thing(Base):
                pass
            def ceil_align(x, a):
                return (x + a - 1) // a * a
            """,
        "sglang/kernels/ops/thing.py": """
            from typing import List
            import msgspec
            from sglang.srt.utils.common import Thing  # at import, as the reference's arch.py
            class Entry(msgspec.Struct, frozen=True, array_like=True):
                root: str
                size: int
            def round_trip(entries):
                from sglang.srt.utils import ceil_align
                raw = msgspec.json.encode(entries)
                return raw, msgspec.json.decode(raw, type=List[Entry]), ceil_align(5, 4)
            """,
    })
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("REFERENCE_WHEEL", raising=False)
    for name in [n for n in sys.modules if n == "sglang" or n.startswith("sglang.")]:  # another test's stand-in package
        monkeypatch.delitem(sys.modules, name)
    import utils as bench_utils

    bench_utils.reference_path.cache_clear()
    before = set(sys.modules)
    try:
        thing = bench_utils.reference_import("sglang.kernels.ops.thing")
        entries = [thing.Entry("kernels", 1), thing.Entry("sys", 2)]
        raw, decoded, aligned = thing.round_trip(entries)
        assert (decoded, aligned, hash(decoded[0]) == hash(entries[0])) == (entries, 8, True)
        if "msgspec" not in before:
            assert raw == b'[["kernels", 1], ["sys", 2]]'  # the stand-in: msgspec's array-like layout, as JSON
        assert not sys.modules["jitkern_test_absent_module"].is_available()  # a stand-in: its calls are false as conditions
    finally:
        for name in set(sys.modules) - before:
            del sys.modules[name]
        bench_utils.reference_path.cache_clear()


@pytest.mark.gpu
def test_reference_ops_give_the_same_outputs_on_jitkern(tmp_path):
    """The reference's own op wrappers of its twenty hottest ops (norms, activations, RoPE, KV and MLA
    cache writes, quantization, MoE routing, alignment and sums), run once with its engine and once with
    jitkern installed under it (the reference installed or its wheel named by REFERENCE_WHEEL): the ops
    jitkern built give outputs equal to the reference's build, bit for bit (same sources, same device
    flags)."""
    import compat_sglang_ops
    import torch

    results = {}
    for engine in ("reference", "jitkern"):
        out = tmp_path / f"{engine}.pt"
        proc = compat_sglang_ops.run(engine, str(out), compat_sglang_ops.TWENTY, cache_root=str(tmp_path / "caches"))
        if proc is None:
            pytest.skip("NOT RUN: the reference (sglang) is neither installed nor named by REFERENCE_WHEEL")
        assert proc.returncode == 0, proc.stderr[-4000:]
        results[engine] = torch.load(out)
    print(compat_sglang_ops.timing_table({engine: [r] for engine, r in results.items()}))  # first calls, as bench_compat_sglang
    ours, theirs = results["jitkern"], results["reference"]
    compared = []
    for op, ref in theirs.items():
        if "error" in ref:
            print(f"{op}: fails with the reference's engine:\n{ref['error']}")
            continue  # not available in this reference build / on this GPU
        assert "error" not in ours[op], f"{op} fails on jitkern but not on the reference:\n{ours[op]['error']}"
        for a, b in zip(ours[op]["outputs"], ref["outputs"], strict=True):
            assert torch.equal(a, b), f"{op}: outputs differ (max abs diff {(a.float() - b.float()).abs().max()})"
        if ours[op]["built"]:
            compared.append(op)
    print("compared (built by jitkern):", compared)
    # the thirteen call the JIT wrappers themselves: each builds its own module wherever the reference ran it
    more = {op.__name__ for op in compat_sglang_ops.MORE_OPS if "error" not in theirs[op.__name__]}
    assert {"rmsnorm", "fused_add_rmsnorm", "activations"} | more <= set(compared)


def test_cli_compat_check_gives_op_functions_its_arch(package, capsys, monkeypatch):
    """An op function that asks for the target (as SGLang's per_token_quant_fp8 does, for its math mode)
    gets --arch's while the check finds the calls, with no GPU and no JITKERN_CUDA_ARCH."""
    from jitkern import cli

    monkeypatch.delenv("JITKERN_CUDA_ARCH", raising=False)
    write(package.parent, {"ops/__init__.py": "", "ops/quant/arch.py": """
        from sglang.kernels.jit.utils import get_jit_cuda_arch, load_jit

        def _jit_quant_module():
            arch = get_jit_cuda_arch()
            return load_jit("quant", f"sm{arch.major}{arch.minor}", cuda_files=["lean.cuh"], cuda_wrappers=[("run", "run")])
        """})
    try:
        assert cli.main(["compat-check", "--kernels", str(package), "--list", "--arch", "sm_89"]) == 0
    finally:
        compat.set_kernel_root(None)
    assert "quant/arch.py _jit_quant_module ('lean.cuh',) ('quant', 'sm89')" in capsys.readouterr().out


def test_cli_compat_check_lists_the_calls(package, capsys):
    from jitkern import cli

    write(package.parent, OPS)
    try:
        assert cli.main(["compat-check", "--kernels", str(package), "--list", "--only", "lean"]) == 0
    finally:
        compat.set_kernel_root(None)
    out = capsys.readouterr().out
    assert "norm/thing.py _jit_thing_module ('lean.cuh',)" in out and "full.cuh" not in out
