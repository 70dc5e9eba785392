"""Compile-checks (nvcc, sm_90a) the CUDA modules the GPU tests use, from the specs their op modules
declare; runs without a GPU."""

import re
import shutil
from pathlib import Path
import struct
import subprocess

import pytest

from conftest import KERNELS, PRIMITIVES_WRAPPERS, shared_cache_path
from sm90a_cubin import sm90a_cubin
import jitkern
from jitkern import JitSpec, ops
from jitkern.cli import FATBIN_MAGIC
from jitkern.jit import usable_cpus

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="NOT RUN: nvcc is not installed")


def _build(spec: JitSpec) -> str:
    path = spec.build()
    data = open(path, "rb").read()
    for n, *_ in spec.cuda_wrappers:
        assert f"__tvm_ffi_{n}\0".encode() in data
    return path


def _elf_symbols(data: bytes, at: int = 0) -> list[tuple[str, int, int, int]]:
    """(name, type, st_other, value) of every symbol in the static symbol tables of the ELF64 object at `at`."""
    shoff, = struct.unpack_from("<Q", data, at + 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, at + 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, at + shoff + i * shentsize) for i in range(shnum)]
    out = []
    for _, kind, _, _, offset, size, link, *_ in sections:
        if kind != 2:  # SHT_SYMTAB
            continue
        strings = sections[link][4]
        for i in range(size // 24):
            name, info, other, _, value, _ = struct.unpack_from("<IBBHQQ", data, at + offset + i * 24)
            out.append((data[at + strings + name:].split(b"\0", 1)[0].decode(), info & 0xF, other, value))
    return out


def _kernel_names(mangled: set[str]) -> set[str]:
    """The mangled names among `mangled` of functions named *_kernel (every kernel of jitkern's families is)."""
    names = sorted(mangled)
    demangled = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True, check=True).stdout.splitlines()
    return {m for m, d in zip(names, demangled) if re.search(r"\w+_kernel(<|\()", d.split("(")[0] + "(")}


def _check_device_image(path: str, has_kernels: bool = True) -> None:
    """host_without_nvcc: every kernel stub of the host code names an entry of the device image (the launch
    looks the kernel up by the stub's symbol) and every entry has its stub."""
    data = open(path, "rb").read()
    functions = {name for name, kind, _, _ in _elf_symbols(data) if kind == 2}  # STT_FUNC
    entries = set()
    for m in re.finditer(rb"\x7fELF", data):
        if m.start() and struct.unpack_from("<H", data, m.start() + 0x12)[0] == 190:  # EM_CUDA: a cubin of the image
            entries |= {name for name, kind, other, _ in _elf_symbols(data, m.start()) if kind == 2 and other & 0x10}  # STO_CUDA_ENTRY
    stubs = _kernel_names(functions)
    assert bool(entries) == has_kernels and stubs == entries, (sorted(stubs - entries), sorted(entries - stubs))


def _spec_id(spec: JitSpec) -> str:
    return "-".join([spec.name, *spec.args[1:]])


# Every op module is built once with the default pipeline as warmup and prebuild run it (builds many at once:
# NVRTC after each module's host pass, the host prelude precompiled once); nvcc beside the host pass (a
# first call's build, one alone) takes one module per family here (its last: the families list their fused
# variants last) and the rest of the matrix in one build on the GPU machine.
_NVCC_SUBSET = [specs[-1] for specs in (ops.specs([f]) for f in ops.FAMILIES) if specs]
_NVCC_REST = [s for s in ops.specs() if s not in _NVCC_SUBSET]


def _nvrtc_libraries() -> set[str]:
    """The NVRTC libraries mapped into this process (torch's own may be, on the GPU machine)."""
    return {line.split()[-1] for line in open("/proc/self/maps") if "libnvrtc" in line}


@pytest.fixture(scope="module")
def built_together(tmp_path_factory):
    """Every op module built at once into the shared cache (jitkern.warmup, JITKERN_DEVICE_COMPILER=auto),
    in their own NVRTC processes; the failure, if one module failed (its test builds it again, alone, to
    show it), else None."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("JITKERN_CACHE_DIR", str(shared_cache_path(tmp_path_factory)))
        mp.setenv("JITKERN_CUDA_ARCH", "sm_90a")
        for name in ("JITKERN_DEVICE_COMPILER", "JITKERN_LOCK_DIR", "JITKERN_RETRY_FAILED"):
            mp.delenv(name, raising=False)
        before = _nvrtc_libraries()
        try:
            jitkern.warmup(*ops.specs())
            failure = None
        except jitkern.BuildError as e:
            failure = e
        assert _nvrtc_libraries() == before, "NVRTC ran in the engine's process"
        yield failure


@pytest.mark.slow
@pytest.mark.parametrize("spec", ops.specs(), ids=_spec_id)  # every family's modules (add_constant's: test_cuda_compile.py)
def test_op_module_compiles(built_together, spec):
    """Built with the others (built_together): the host pass, then NVRTC's image of the family's kernels
    (their host code is under #ifndef __CUDACC_RTC__), named as the host pass's stubs name them."""
    path = _build(spec)  # from the cache; a module the batch could not build is built here, alone, and its error raised
    assert spec.host_without_nvcc, "jitkern's own families build their host code without nvcc"
    _check_device_image(path, has_kernels=spec.name != "all_reduce")  # (the communicator's module has none)
    assert FATBIN_MAGIC not in open(path, "rb").read(), f"{_spec_id(spec)}: built with others, NVRTC's cubin, not nvcc's fatbin"


def _build_alone_with_nvcc(*specs: JitSpec) -> None:
    """Builds `specs` as a first call does, nvcc beside the host pass (JITKERN_DEVICE_COMPILER=nvcc: several
    at once where there are several), and checks each one's image."""
    if len(specs) > 1:
        jitkern.warmup(*specs)
    for spec in specs:
        path = _build(spec)
        _check_device_image(path, has_kernels=spec.name != "all_reduce")  # (the communicator's module has none)
        assert FATBIN_MAGIC in open(path, "rb").read(), f"{_spec_id(spec)}: nvcc's fatbin"


@pytest.mark.slow
@pytest.mark.parametrize("spec", _NVCC_SUBSET, ids=_spec_id)
def test_op_module_compiles_alone_with_nvcc(cache_dir, monkeypatch, spec):
    monkeypatch.setenv("JITKERN_CUDA_ARCH", "sm_90a")
    monkeypatch.delenv("JITKERN_DEVICE_COMPILER", raising=False)  # auto: a build alone goes to nvcc
    _build_alone_with_nvcc(spec)


@pytest.mark.toolchain
@pytest.mark.full_matrix
def test_every_other_op_module_compiles_with_nvcc(cache_dir, monkeypatch):
    """The rest of nvcc's matrix (every op module not in the subset above), in one parallel build."""
    monkeypatch.setenv("JITKERN_CUDA_ARCH", "sm_90a")
    monkeypatch.setenv("JITKERN_DEVICE_COMPILER", "nvcc")
    _build_alone_with_nvcc(*_NVCC_REST)


def test_auto_device_compiler_takes_nvrtc_for_builds_run_many_at_once(cache_dir, monkeypatch):
    """JITKERN_DEVICE_COMPILER=auto (the default): warmup's builds (many at once) go to NVRTC, the least compile
    work; a build alone (a first call) to nvcc beside the host pass, the shortest wait."""
    monkeypatch.setenv("JITKERN_CUDA_ARCH", "sm_90a")
    many = [ops.act.spec("bfloat16", "silu_and_mul"), ops.act.spec("bfloat16", "gelu_and_mul")]
    jitkern.warmup(*many)  # loads too: no GPU is needed for that
    for spec in many:
        assert FATBIN_MAGIC not in open(spec.build(), "rb").read(), f"{spec.name}: NVRTC's cubin"
    alone = ops.act.spec("bfloat16", "gelu_tanh_and_mul").build()
    assert FATBIN_MAGIC in open(alone, "rb").read(), "a build alone: nvcc's fatbin"


def test_a_module_built_the_default_way_includes_every_library_header(cache_dir, monkeypatch, tmp_path):
    """A kernel author's module whose host code goes through nvcc (cudafe++, the default) including every public
    header of include/jitkern: cudafe++ re-emits a braced argument of a call in a template as `({...})`, which g++
    rejects."""
    monkeypatch.setenv("JITKERN_CUDA_ARCH", "sm_90a")
    root = Path(jitkern.INCLUDE_DIR)
    headers = sorted(p.relative_to(root).as_posix() for p in (root / "jitkern").rglob("*")
                     if p.suffix in (".h", ".cuh") and not {"detail", "compat"} & set(p.parts))
    assert "jitkern/impl/norm_launch.cuh" in headers and "jitkern/vec.cuh" in headers
    source = tmp_path / "every_header.cuh"
    source.write_text("".join(f"#include <{h}>\n" for h in headers) + "inline int every_header_answer(int x) { return x + 1; }\n")
    spec = JitSpec("every_header", cuda_files=[str(source)], cuda_wrappers=[("answer", "every_header_answer")])
    assert not spec.host_without_nvcc
    _build(spec)


# <algorithm> and <ranges>, and libstdc++'s files of their algorithms, however reached.
_HEAVY_HEADERS = {"algorithm", "ranges", "stl_algo.h", "ranges_algo.h"}


@pytest.mark.toolchain
def test_no_kernel_family_parses_algorithm_or_ranges(tmp_path):
    """Neither the host prelude nor any family's .cuh includes <algorithm> or <ranges>, even through another header:
    C++20's ranges algorithms cost each compiler pass of a module 0.06-0.15 s of parsing (host::min / host::max
    stand in for std::min / std::max)."""
    from jitkern._engine import tvm_ffi_paths

    paths = tvm_ffi_paths()
    sources = [jitkern.CSRC_DIR / f"{family}.cuh" for family in ops.FAMILIES] + [Path(jitkern.INCLUDE_DIR) / "jitkern/host_prelude.h"]
    heavy = {}
    for source in sources:
        unit = tmp_path / f"{source.stem}.cu"
        unit.write_text(f'#include "{source}"\n')
        deps = subprocess.run(["nvcc", "-std=c++20", "-arch=sm_90a", "-M", f"-I{jitkern.INCLUDE_DIR}", f"-I{paths['tvm_ffi_include']}",
                               f"-I{paths['dlpack_include']}", str(unit)], check=True, capture_output=True, text=True).stdout
        names = {Path(d).name for d in deps.replace("\\\n", " ").split()}
        assert "utils.h" in names, f"{source}: nvcc -M listed {sorted(names)[:20]}"
        if names & _HEAVY_HEADERS:
            heavy[source.name] = sorted(names & _HEAVY_HEADERS)
    assert not heavy, f"headers that parse <algorithm> or <ranges>: {heavy}"


def test_primitives_module_compiles(cache_dir, monkeypatch):
    monkeypatch.setenv("JITKERN_CUDA_ARCH", "sm_90a")
    _build(JitSpec("primitives_test", cuda_files=[str(KERNELS / "primitives.cuh")], cuda_wrappers=PRIMITIVES_WRAPPERS))


# A PTX load or store without a state space (ld.v4.u32, st.v4.b32, ...): a generic access.
_GENERIC_ACCESS = re.compile(r"^\s*(?:@!?%p\d+\s+)?(ld|st)(?:\.v[248])?\.[bsuf]\d+\s", re.M)


@pytest.mark.toolchain
def test_norm_kernels_access_global_memory_as_global(tmp_path):
    """Every norm kernel (each launch variant, 16- and 32-bit rows) loads and stores its rows with ld.global /
    st.global: nvcc cannot always tell that a row's pointer, picked from the parameter block at run time,
    points to global memory, and falls back on generic accesses."""
    from jitkern._engine import tvm_ffi_paths

    paths = tvm_ffi_paths()
    src = tmp_path / "norm_all.cu"
    src.write_text(f'#include "{jitkern.CSRC_DIR / "norm.cuh"}"\n'
                   "template struct jitkern_norm::NormOps<bf16_t>;\ntemplate struct jitkern_norm::NormOps<float>;\n")
    ptx = tmp_path / "norm_all.ptx"
    subprocess.run(["nvcc", "-std=c++20", "-arch=sm_90a", "-ptx", "--expt-relaxed-constexpr", f"-I{jitkern.INCLUDE_DIR}",
                    f"-I{paths['tvm_ffi_include']}", f"-I{paths['dlpack_include']}", "-o", str(ptx), str(src)], check=True)
    text = ptx.read_text()
    assert text.count(".entry") >= 20, "the norm kernels were not instantiated"
    assert re.search(r"ld\.global\.v4", text) and re.search(r"st\.global\.v4", text)
    generic = [m.group(0).strip() for m in _GENERIC_ACCESS.finditer(text)]
    assert not generic, f"{len(generic)} generic loads/stores in the norm kernels, e.g. {generic[:3]}"


def ptxas_report(tmp_path, name: str, source: str) -> str:
    return sm90a_cubin(tmp_path, name, source)[1]


@pytest.mark.toolchain
def test_many_in_place_narrow_rows_kernel_fits_six_ctas_an_sm(tmp_path):
    """qknorm's many-row kernel (bf16 heads of 128, two rows a group of 16 lanes, CTAs of 256) stays within
    40 registers a thread, so that 6 CTAs fit an SM's 64K registers (the general narrow kernel took 62: 4)."""
    log = ptxas_report(tmp_path, "inplace_rows", "#include <jitkern/impl/norm_launch.cuh>\n"
                        "void* kernel = (void*)&device::norm::norm_inplace_rows_kernel<bf16_t, 8, 16, 2, true>;\n")
    used = [int(n) for n in re.findall(r"Used (\d+) registers", log)]
    assert len(used) == 1 and used[0] <= 40, log


@pytest.mark.toolchain
def test_wide_rows_that_fill_warps_at_two_vectors_a_thread_do_not_spill(tmp_path):
    """bf16 rows of 1536 / 2560 / 3584 (vectors filling whole warps at two a thread, not at four) are held at two
    (device::norm::norm_reg_vecs), exactly: the width kernel (aligned 16-bit rows, any row count) and the general
    kernel (the other rows) keep them without a stack frame, where at four (some threads a vector short) the
    general kernel spilled 56 bytes; so does the width kernel folded onto half the threads (3584 from 4 rows an SM),
    within 64 registers (8 CTAs of 128 an SM)."""
    log = ptxas_report(tmp_path, "wide_half", "#include <jitkern/impl/norm_launch.cuh>\n"
                        "using namespace device::norm;\n"
                        "static_assert(norm_reg_vecs(192) == 2 && norm_reg_vecs(320) == 2 && norm_reg_vecs(448) == 2 && norm_reg_vecs(512) == 4);\n"
                        "void* many = (void*)&norm_wide_kernel<bf16_t, 8, 2, false, RowFit::kExact, StoreOutput<bf16_t>, RowOrder::kTokenRows>;\n"
                        "void* few = (void*)&norm_wide_kernel<bf16_t, 8, 2, false, RowFit::kExact, StoreOutput<bf16_t>, RowOrder::kProblemMajor>;\n"
                        "void* width = (void*)&norm_static_kernel<bf16_t, 3584>;\n"
                        "void* folded = (void*)&norm_folded_kernel<bf16_t, 3584>;\n")
    frames = re.findall(r"(\d+) bytes stack frame, (\d+) bytes spill stores", log)
    assert len(frames) == 4 and all(f == ("0", "0") for f in frames), log
    folded = re.search(r"Compiling entry function '\S*norm_folded_kernel\S*'.*?Used (\d+) registers", log, re.S)
    assert folded and int(folded.group(1)) <= 64, log


@pytest.mark.toolchain
def test_absorb_q_warp_row_kernels_find_their_rows_in_32_bits(tmp_path):
    """concat_mla_absorb_q's warp-a-row kernels (MLA's rows, up to 4 waves of them) find a row's offsets with
    32-bit arithmetic: no 64-bit multiply or quotient, at most 24 registers (the 64-bit form took 32 and put
    78 instructions before its first load, where a contiguous-only kernel put 28)."""
    from jitkern._engine import tvm_ffi_paths

    paths = tvm_ffi_paths()
    src = tmp_path / "kv_rows_all.cu"
    src.write_text(f'#include "{jitkern.CSRC_DIR / "kv_rows.cuh"}"\ntemplate struct jitkern_kv_rows::KvRowsImpl<void>;\n')
    flags = ["nvcc", "-std=c++20", "-arch=sm_90a", "--expt-relaxed-constexpr", f"-I{jitkern.INCLUDE_DIR}", f"-I{paths['tvm_ffi_include']}",
             f"-I{paths['dlpack_include']}"]
    out = subprocess.run([*flags, "-cubin", "-Xptxas", "-v", "-o", str(tmp_path / "kv_rows.cubin"), str(src)], check=True, capture_output=True,
                         text=True)
    used = dict(re.findall(r"Compiling entry function '(\w+)'.*?Used (\d+) registers", out.stdout + out.stderr, re.S))
    warp_rows = {name: int(n) for name, n in used.items() if "concat_warp_rows_kernel" in name}
    assert len(warp_rows) == 2 and all(n <= 24 for n in warp_rows.values()), warp_rows
    subprocess.run([*flags, "-ptx", "-o", str(tmp_path / "kv_rows.ptx"), str(src)], check=True)
    entries = re.split(r"\.entry ", (tmp_path / "kv_rows.ptx").read_text())[1:]
    bodies = [e for e in entries if "concat_warp_rows_kernel" in e.split("(", 1)[0]]
    assert len(bodies) == len(warp_rows)
    for body in bodies:
        assert not re.search(r"mul\.(hi|lo)\.[us]64|mul\.wide\.[us]64|div\.[us]64", body), body.split("(", 1)[0]


@pytest.mark.toolchain
def test_many_row_group_quant_kernels_fit_four_and_three_rows_an_sm(tmp_path):
    """The many-row kernels of rmsnorm_group_quant_fp8 (bf16 [*, 7168], 1x128 groups, four vectors of a group a
    lane as packed pairs: CTAs of 224) and of the fused add (two: CTAs of 448) stay within 64 and 48 registers a
    thread, so that four and three rows fit an SM's 64K registers (one vector a thread, CTAs of 896: two); under
    the plain op's launch bounds (NormGroupSchedule::kManyBoundThreads, kManyMinBlocks: 224, 5) within 56, without
    spills, so that five fit."""
    log = ptxas_report(tmp_path, "group_rows", f'#include "{jitkern.CSRC_DIR / "quant.cuh"}"\n'
                        "using device::quant::Rounding;\n"
                        "void* plain = (void*)&jitkern_quant::norm_group_rows_kernel<bf16_t, 8, 128, 4, false, false, Rounding::kExact, true, true, true>;\n"
                        "void* bounded = (void*)&jitkern_quant::norm_group_rows_kernel<bf16_t, 8, 128, 4, false, false, Rounding::kExact, true, true, true, false,"
                        " jitkern_quant::NormGroupSchedule::kManyBoundThreads, jitkern_quant::NormGroupSchedule::kManyMinBlocks>;\n"
                        "void* fused = (void*)&jitkern_quant::norm_group_rows_kernel<bf16_t, 8, 128, 2, true, false, Rounding::kExact, true, true, true>;\n")
    found = re.findall(r"Function properties for \S*norm_group_rows_kernel\S*?Li128ELi(\d)E(\S*)\n.*?(\d+) bytes spill stores.*\n.*Used (\d+) registers",
                       log)
    used = {("bounded" if "Li224ELi5E" in rest else lanes): (int(regs), int(spills)) for lanes, rest, spills, regs in found}
    assert set(used) == {"4", "bounded", "2"}, log
    assert used["4"][0] <= 64 and used["2"][0] <= 48 and used["bounded"] == (56, 0), log


@pytest.mark.toolchain
def test_lean_group_quant_kernel_divides_without_range_tests_in_32_bits(tmp_path):
    """per_token_group_quant's lean kernel (bf16 1x128 groups, fp8, CTAs of 256) finds its group with 32-bit
    arithmetic (no 64-bit multiply or quotient before its loads), takes the scale and its reciprocal without the
    IEEE divisions' range tests and slow paths (no div.rn), keeps a group holding +-inf out of line (calls), and
    uses at most 32 registers (per_group_kernel's common path branched over both divisions' slow paths)."""
    from jitkern._engine import tvm_ffi_paths

    paths = tvm_ffi_paths()
    src = tmp_path / "group_lean.cu"
    src.write_text(f'#include "{jitkern.CSRC_DIR / "quant.cuh"}"\n'
                   "void* lean = (void*)&jitkern_quant::per_group_lean_kernel<bf16_t, 8, false, 256, 2, device::quant::Rounding::kExact>;\n")
    flags = ["nvcc", "-std=c++20", "-arch=sm_90a", "--expt-relaxed-constexpr", f"-I{jitkern.INCLUDE_DIR}", f"-I{paths['tvm_ffi_include']}",
             f"-I{paths['dlpack_include']}"]
    out = subprocess.run([*flags, "-cubin", "-Xptxas", "-v", "-o", str(tmp_path / "group_lean.cubin"), str(src)], check=True,
                         capture_output=True, text=True)
    used = re.findall(r"Compiling entry function '(\w+)'.*?Used (\d+) registers", out.stdout + out.stderr, re.S)
    assert len(used) == 1 and int(used[0][1]) <= 32, out.stdout + out.stderr
    subprocess.run([*flags, "-ptx", "-o", str(tmp_path / "group_lean.ptx"), str(src)], check=True)
    body = (tmp_path / "group_lean.ptx").read_text().split(".entry ", 1)[1].split("\n.func", 1)[0]  # the called functions follow
    assert "call" in body, "the +-inf paths are calls"
    assert "div.rn.f32" not in body and not re.search(r"(div|rem)\.[us]64", body)
    assert not re.search(r"mul\.(hi|lo)\.[us]64|mul\.wide\.[us]64", body.split("ld.global", 1)[0])


@pytest.mark.toolchain
def test_norm_group_cluster_kernel_builds_without_clusters_below_sm_90(tmp_path):
    """The fused add's one-row cluster kernel (norm_group_cluster_kernel) uses sm_90's clusters; the quantization
    kernels still build for sm_80, that kernel there without its cluster (the host never launches it below sm_90),
    and for sm_90a with a cluster of 8 CTAs."""
    from jitkern._engine import tvm_ffi_paths

    paths = tvm_ffi_paths()
    src = tmp_path / "cluster.cu"
    src.write_text(f'#include "{jitkern.CSRC_DIR / "quant.cuh"}"\n'
                   "void* fused = (void*)&jitkern_quant::norm_group_cluster_kernel<bf16_t, 8, 128, 128, 8, true, false,"
                   " device::quant::Rounding::kExact, true>;\n")
    flags = ["nvcc", "-std=c++20", "--expt-relaxed-constexpr", f"-I{jitkern.INCLUDE_DIR}", f"-I{paths['tvm_ffi_include']}",
             f"-I{paths['dlpack_include']}", "-ptx", str(src)]
    for arch, clustered in (("sm_80", False), ("sm_90a", True)):
        ptx = tmp_path / f"cluster_{arch}.ptx"
        subprocess.run([*flags, f"-arch={arch}", "-o", str(ptx)], check=True, capture_output=True, text=True)
        text = ptx.read_text()
        assert (".reqnctapercluster 8, 1, 1" in text) == clustered and ("barrier.cluster" in text) == clustered, arch


# Modules built in several device passes, one export of each layout, for a 16-bit type and fp32 (whose counts
# may differ: TOKEN_NORM_DEVICE_PARTS).
_PARTED = [s for s in ops.specs(dtypes=["bfloat16", "float32"]) if s.device_parts > 1 and s.name in (
    "norm_rmsnorm", "norm_variants_gemma_rmsnorm", "norm_variants_rmsnorm_hf", "quant_rmsnorm_group_quant_g128",
    "quant_fused_add_rmsnorm_group_quant_g128", "qknorm_rope_apply", "qknorm_rope_apply_store_fp8")]


@pytest.mark.toolchain
@pytest.mark.parametrize("spec", _PARTED, ids=_spec_id)
def test_every_device_pass_of_an_op_module_builds_kernels(cache_dir, monkeypatch, spec):
    """A first call's build of a module of N device parts (nvcc, N passes at once): N images, each with kernels (a
    pass without any would still cost its nvcc run), together every kernel the host code launches."""
    import os

    if usable_cpus() < 4 * spec.device_parts:
        pytest.skip(f"NOT RUN: {spec.device_parts} device passes run at once on {4 * spec.device_parts} CPUs, this process has "
                    f"{usable_cpus()}")
    monkeypatch.setenv("JITKERN_CUDA_ARCH", "sm_90a")
    monkeypatch.setenv("JITKERN_DEVICE_COMPILER", "nvcc")
    path = _build(spec)
    _check_device_image(path)
    data = open(path, "rb").read()
    cubins = [m.start() for m in re.finditer(rb"\x7fELF", data) if m.start() and struct.unpack_from("<H", data, m.start() + 0x12)[0] == 190]
    entries = [sum(1 for _, kind, other, _ in _elf_symbols(data, at) if kind == 2 and other & 0x10) for at in cubins]
    assert len(entries) == spec.device_parts and all(entries), (spec.device_parts, entries)
