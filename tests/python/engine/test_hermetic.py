"""Hermetic builds: nothing that changes a compile goes unkeyed. The compilers run in an environment
the engine builds (an undeclared variable cannot reach them), in a directory of the engine's (the
caller's working directory picks no file), and every file their command lines name is in the key (a
response file's options) or a tracked dependency (archives, objects, -l libraries, linker scripts).
CPU only: C++ modules are loaded and run in child processes, CUDA modules are only built
(JITKERN_CUDA_ARCH=sm_90a)."""

import json
import os
import signal
import sys
import textwrap
from pathlib import Path

import pytest

import jitkern
from test_store import LOADER, clean_env, compiles, error_line, load, open_dir, real_cxx, real_nvcc, require_nobody, result, run, script, write

# A C++ module whose value() is VALUE; a variable or file that should not reach the compiler makes it #error.
PROBE_CPU = textwrap.dedent(
    """
    #include <cstdint>
    #if __has_include(<jk_env_probe.h>)
    #error "a header reached the compiler through the environment"
    #endif
    #ifdef JK_FROM_ENV
    #error "JK_FROM_ENV reached the compiler"
    #endif
    #ifndef VALUE
    #define VALUE 7
    #endif
    inline int64_t value() { return VALUE; }
    """
)
PROBE_CUDA = PROBE_CPU + "__global__ void fill(int* p) { *p = VALUE; }\n"

BUILDER = textwrap.dedent(
    """
    import json, sys, jitkern
    fields = json.loads(sys.argv[1])
    try:
        print("BUILT", jitkern.JitSpec(*fields.pop("args"), **fields).build())
    except Exception as e:
        print("ERROR", type(e).__name__, (str(e).splitlines() or [""])[0], flush=True)
        raise
    """
)


def build(fields: dict, env: dict, **kw):
    """Builds (only) the module of `fields` in a child process."""
    return run([sys.executable, "-c", BUILDER, json.dumps(fields)], env, **kw)


def built(proc) -> str:
    assert proc.returncode == 0, f"the build failed: {error_line(proc)}\n{proc.stderr[-3000:]}"
    return [line for line in proc.stdout.splitlines() if line.startswith("BUILT")][-1].split(" ", 1)[1]


def cpu_fields(name: str, kernel: Path, **extra) -> dict:
    return {"args": [name], "cpp_files": [str(kernel)], "cpp_wrappers": [["f", "value"]], **extra}


def cuda_fields(name: str, kernel: Path, **extra) -> dict:
    return {"args": [name], "cuda_files": [str(kernel)], "cuda_wrappers": [["f", "value"]], "cuda_arch": "sm_90a", **extra}


@pytest.fixture
def env(tmp_path):
    """A child environment with a fresh private cache."""
    return clean_env(JITKERN_CACHE_DIR=tmp_path / "cache", JITKERN_CUDA_ARCH="sm_90a")


# ------------------------------------------------------------------------------------ the environment


@pytest.mark.parametrize("variable", ["CPATH", "CPLUS_INCLUDE_PATH"])
def test_include_path_variables_do_not_reach_the_compiler(tmp_path, env, variable):
    """A header directory in CPATH or CPLUS_INCLUDE_PATH is not searched: the build is what the request
    says, and the library built without it is the one served with it."""
    kernel = write(tmp_path / "probe.h", PROBE_CPU)
    write(tmp_path / "env_headers" / "jk_env_probe.h", "#define JK_ENV_PROBE 1\n")
    proc = load(cpu_fields("env_include", kernel), {**env, variable: str(tmp_path / "env_headers")}, mode="value")
    assert result(proc) == 7
    again = load(cpu_fields("env_include", kernel), env, mode="value")
    assert result(again) == 7 and compiles(again) == 0, "the library built under the variable serves without it"


@pytest.mark.parametrize("variable", ["NVCC_APPEND_FLAGS", "NVCC_PREPEND_FLAGS"])
def test_nvcc_flag_variables_do_not_reach_nvcc(tmp_path, env, variable):
    real_nvcc()
    kernel = write(tmp_path / "probe.cuh", PROBE_CUDA)
    built(build(cuda_fields("env_nvcc", kernel), {**env, variable: "-DJK_FROM_ENV"}))


def test_nvcc_ccbin_variable_does_not_pick_the_host_compiler(tmp_path, env):
    real_nvcc()
    kernel = write(tmp_path / "probe.cuh", PROBE_CUDA)
    built(build(cuda_fields("env_ccbin", kernel), {**env, "NVCC_CCBIN": str(tmp_path / "no" / "such" / "gcc")}))


def test_an_undeclared_variable_cannot_change_a_build(tmp_path, env):
    """The compilers see only the declared environment: a compiler that fails when it sees a variable the
    engine does not declare builds normally with that variable set in the loading process."""
    cxx = script(tmp_path / "bin" / "c++", f'[ -z "$JK_UNDECLARED" ] || {{ echo "saw JK_UNDECLARED" >&2; exit 1; }}\n'
                                           f'exec {real_cxx()} "$@"')
    kernel = write(tmp_path / "probe.h", PROBE_CPU)
    proc = load(cpu_fields("env_any", kernel), {**env, "CXX": str(cxx), "JK_UNDECLARED": "1"}, mode="value")
    assert result(proc) == 7


def test_the_compilers_environment_is_declared(tmp_path, env):
    """What a compiler step sees: PATH (and LD_LIBRARY_PATH) forwarded, LC_ALL=C, TMPDIR in its scratch
    directory, nothing else."""
    record = tmp_path / "seen.env"
    cxx = script(tmp_path / "bin" / "c++", f'[ "$1" = --version ] || env > {record}\nexec {real_cxx()} "$@"')
    kernel = write(tmp_path / "probe.h", PROBE_CPU)
    result(load(cpu_fields("env_seen", kernel), {**env, "CXX": str(cxx), "CPATH": "/x", "SOMETHING_ELSE": "1"}, mode="value"))
    seen = dict(line.split("=", 1) for line in record.read_text().splitlines() if "=" in line)
    # /bin/sh itself adds PWD (and dash OLDPWD / SHLVL is bash's); the rest is what the engine passed.
    passed = set(seen) - {"PWD", "OLDPWD", "SHLVL", "_"}
    assert passed <= {"PATH", "LD_LIBRARY_PATH", "LC_ALL", "TMPDIR"}, sorted(passed)
    assert seen["LC_ALL"] == "C" and seen["PATH"] == env["PATH"]
    assert "jitkern" in seen["TMPDIR"] or seen["TMPDIR"] == "tmp", seen["TMPDIR"]


def test_a_failure_under_path_is_not_remembered_once_path_is_fixed(tmp_path, env):
    """A build that fails because PATH leads the compiler to a broken assembler is compiled again once PATH
    is fixed: PATH is part of what a failure is remembered against."""
    broken = script(tmp_path / "broken" / "as", "echo 'broken assembler' >&2\nexit 1")
    kernel = write(tmp_path / "probe.h", PROBE_CPU)
    fields = cpu_fields("env_path", kernel)
    bad = load(fields, {**env, "PATH": f"{broken.parent}:{env['PATH']}"}, mode="value")
    assert bad.returncode != 0 and "broken assembler" in bad.stderr + bad.stdout
    assert result(load(fields, env, mode="value")) == 7


# ------------------------------------------------------------------------- files named on command lines


def make_archive(directory: Path, value: int) -> Path:
    """lib<jkvalue>.a in `directory`, whose jk_value() returns `value` (rebuilt in place)."""
    directory.mkdir(parents=True, exist_ok=True)
    src = write(directory / "jk_value.cc", f'extern "C" long jk_value() {{ return {value}; }}\n')
    obj = directory / "jk_value.o"
    assert run([real_cxx(), "-fPIC", "-c", src, "-o", obj], os.environ).returncode == 0
    lib = directory / "libjkvalue.a"
    lib.unlink(missing_ok=True)
    assert run(["ar", "rcs", lib, obj], os.environ).returncode == 0
    return lib


USES_ARCHIVE = '#include <cstdint>\nextern "C" long jk_value();\ninline int64_t value() { return jk_value(); }\n'


@pytest.mark.parametrize("how", ["archive path", "-L and -l", "relative archive path"])
def test_an_archive_in_extra_ldflags_is_a_dependency(tmp_path, env, how):
    lib = make_archive(tmp_path / "lib", 11)
    kernel = write(tmp_path / "uses.h", USES_ARCHIVE)
    ldflags = {"archive path": [str(lib)], "-L and -l": ["-L", str(lib.parent), "-ljkvalue"],
               "relative archive path": ["lib/libjkvalue.a"]}[how]
    fields = cpu_fields("ld_archive", kernel, extra_ldflags=ldflags)
    assert result(load(fields, env, mode="value", cwd=tmp_path)) == 11
    make_archive(tmp_path / "lib", 12)
    again = load(fields, env, mode="value", cwd=tmp_path)
    assert result(again) == 12, "the library linked against the old archive was served"
    assert compiles(again) == 1


def test_a_response_file_is_part_of_the_key(tmp_path, env):
    rsp = write(tmp_path / "flags.rsp", "-DVALUE=21\n")
    kernel = write(tmp_path / "probe.h", PROBE_CPU)
    fields = cpu_fields("rsp", kernel, extra_cflags=[f"@{rsp}"])
    assert result(load(fields, env, mode="value")) == 21
    write(rsp, "'-DVALUE=22'\n")
    assert result(load(fields, env, mode="value")) == 22


def test_an_nvcc_options_file_is_part_of_the_key(tmp_path, env):
    real_nvcc()
    options = write(tmp_path / "nvcc.opts", "-DVALUE=3\n")
    kernel = write(tmp_path / "probe.cuh", PROBE_CUDA)
    fields = cuda_fields("optf", kernel, extra_cuda_cflags=["--options-file", str(options)])
    built(build(fields, env))
    write(options, "-DJK_FROM_ENV\n")
    proc = build(fields, env)
    assert proc.returncode != 0 and "JK_FROM_ENV reached the compiler" in proc.stderr + proc.stdout, \
        "the edited options file must rebuild (and fail on its #error), not serve the old library"


def test_a_linker_version_script_is_a_dependency(tmp_path, env):
    script_file = write(tmp_path / "exports.map", "{ global: *; };\n")
    kernel = write(tmp_path / "probe.h", PROBE_CPU)
    fields = cpu_fields("vscript", kernel, extra_ldflags=[f"-Wl,--version-script={script_file}"])
    assert result(load(fields, env, mode="value")) == 7
    write(script_file, "{ global: *; }; \n")
    again = load(fields, env, mode="value")
    assert result(again) == 7 and compiles(again) == 1, "an edited version script rebuilds"


USES_SCRIPT_SYMBOL = ('#include <cstdint>\nextern "C" char jk_script_value[];  // the linker script defines it\n'
                      'inline int64_t value() { return reinterpret_cast<intptr_t>(&jk_script_value[0]); }\n')


@pytest.mark.parametrize("spelling", ["-Wl,-T{}", "-Wl,-T,{}", "-Wl,-dT,{}", "-Wl,--default-script={}", "-Wl,-default-script={}",
                                      "-Wl,-script={}", "-Xlinker -T -Xlinker {}", "-Wl,--script -Wl,{}",
                                      # ld's abbreviations of its long names, and GCC's --for-linker (-Xlinker)
                                      "-Wl,--scri={}", "-Wl,-default-scr={}", "--for-linker=--script={}", "--for-linker -T --for-linker {}"])
def test_a_linker_script_is_a_dependency_however_it_is_spelled(tmp_path, env, spelling):
    """A linker script given to the linker in any of its spellings is keyed by its absolute path and is a dependency."""
    script_file = write(tmp_path / "values.ld", "jk_script_value = 42;\n")
    kernel = write(tmp_path / "uses.h", USES_SCRIPT_SYMBOL)
    fields = cpu_fields("ld_script", kernel, extra_ldflags=spelling.format("values.ld").split())
    assert result(load(fields, env, mode="value", cwd=tmp_path)) == 42
    write(script_file, "jk_script_value = 43;\n")
    assert result(load(fields, env, mode="value", cwd=tmp_path)) == 43, "the library linked with the old script was served"


@pytest.mark.parametrize("flags", [["-Wl,-version-script=exports.map"], ["-Wl,--version-script,exports.map"], ["-Wl,--version-scr=exports.map"],
                                   ["-Wl,-version-scr=exports.map"], ["--for-linker=--version-script=exports.map"],
                                   ["--for-linker", "--version-script=exports.map"]])
def test_a_version_script_in_single_dash_or_separate_form_is_a_dependency(tmp_path, env, flags):
    script_file = write(tmp_path / "exports.map", "{ global: *; };\n")
    kernel = write(tmp_path / "probe.h", PROBE_CPU)
    fields = cpu_fields("vscript_forms", kernel, extra_ldflags=flags)
    assert result(load(fields, env, mode="value", cwd=tmp_path)) == 7
    write(script_file, "{ global: *; }; \n")
    again = load(fields, env, mode="value", cwd=tmp_path)
    assert result(again) == 7 and compiles(again) == 1, "an edited version script rebuilds"


NEEDS_HEADER = '#include <cstdint>\n#include "jk_later.h"\ninline int64_t value() { return LATER; }\n__global__ void k(int*) {}\n'


@pytest.mark.parametrize("field,flags", [("extra_cflags", ["-isystem", "{}"]), ("extra_cflags", ["-I", "{}"]),
                                         ("extra_cflags", ["-idirafter", "{}"]), ("extra_cflags", ["-iquote{}"]),
                                         ("extra_cuda_cflags", ["--include-path={}"])])
def test_a_failure_is_retried_once_its_header_appears_in_any_search_directory(tmp_path, env, field, flags):
    """A compile that failed for a header missing from a search directory, however the directory is given, is
    compiled again once the header appears there (the directory's signature is part of the remembered failure)."""
    directory = tmp_path / "later"
    directory.mkdir()
    cuda = field == "extra_cuda_cflags"
    if cuda:
        real_nvcc()
    kernel = write(tmp_path / ("needs.cuh" if cuda else "needs.h"), NEEDS_HEADER if cuda else NEEDS_HEADER.replace("__global__ void k(int*) {}\n", ""))
    fields = (cuda_fields if cuda else cpu_fields)("later_header", kernel, **{field: [f.format(directory) for f in flags]})
    attempt = build if cuda else (lambda f, e: load(f, e, mode="value"))
    missing = attempt(fields, env)
    assert missing.returncode != 0 and "jk_later.h" in missing.stdout + missing.stderr
    write(directory / "jk_later.h", "#define LATER 5\n")
    again = attempt(fields, env)
    assert again.returncode == 0, "the header now exists: compiled again, not the remembered failure\n" + again.stderr[-2000:]


@pytest.mark.parametrize("field,flags,named", [
    ("extra_cflags", ["-B/opt/other-gcc/"], "-B/opt/other-gcc/"),
    ("extra_cflags", ["-specs=my.specs"], "-specs=my.specs"),
    ("extra_cflags", ["--sysroot=/opt/root"], "--sysroot=/opt/root"),
    ("extra_cflags", ["-fplugin=./p.so"], "-fplugin=./p.so"),
    ("extra_ldflags", ["-Wl,@linker.rsp"], "-Wl,@linker.rsp"),
    ("extra_ldflags", ["-Wl,--frobnicate,order.txt"], "'order.txt' after --frobnicate"),
    ("extra_ldflags", ["-Wl,--plugin=./p.so"], "-Wl,--plugin=./p.so"),
    ("extra_ldflags", ["-Wl,--sysroot=/opt/root"], "-Wl,--sysroot=/opt/root"),
    ("extra_ldflags", ["-Xlinker", "-plugin", "-Xlinker", "p.so"], "-Xlinker -plugin"),
    ("extra_ldflags", ["-Wl,-R,exports.map"], "-Wl,-R,exports.map"),
    ("extra_ldflags", ["-Wl,--sysr=/"], "-Wl,--sysr=/"),
    ("extra_ldflags", ["-Wl,--error-handling=/bin/true"], "-Wl,--error-handling=/bin/true"),
    ("extra_ldflags", ["--for-linker=--plugin=/x.so"], "--for-linker=--plugin=/x.so"),
    ("extra_ldflags", ["--for-linker=-o/tmp/jk_out"], "--for-linker=-o/tmp/jk_out"),
    ("extra_ldflags", ["-Wl,-T,includes.ld"], "INCLUDEs another file"),
    ("extra_cflags", ["@/no/such/file.rsp"], "@/no/such/file.rsp"),
])
def test_a_flag_whose_inputs_cannot_be_tracked_is_refused(tmp_path, monkeypatch, field, flags, named):
    monkeypatch.setenv("JITKERN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "exports.map", "{ global: *; };\n")
    write(tmp_path / "includes.ld", f"INCLUDE {tmp_path / 'exports.map'}\n")  # ld would read a file no dependency names
    kernel = write(tmp_path / "probe.h", PROBE_CPU)
    fields = cpu_fields("refused", kernel, **{field: flags})
    with pytest.raises(ValueError) as e:
        jitkern.JitSpec(*fields.pop("args"), **fields).build()
    assert named in str(e.value) and field in str(e.value)


# ------------------------------------------------------------------------------------ what NVRTC reads

NVRTC_KERNEL = textwrap.dedent(
    """
    #include <jitkern/tensor.h>
    #include <jitkern/utils.cuh>
    #if defined(__GNUC__) && defined(__CUDACC_RTC__)
    #include "gnu_rtc_only.h"
    #endif
    #if defined(__CUDACC_RTC__) && !defined(__GNUC__)
    #include "rtc_only.h"
    #endif
    __global__ void store_kernel(int* p) {
    #ifdef __CUDACC_RTC__
      *p = kRtcValue;
    #endif
    }
    inline int64_t value() { return 7; }
    """
)


def test_a_header_only_nvrtc_reads_is_a_dependency(tmp_path, env):
    """JITKERN_DEVICE_COMPILER=nvrtc: a header NVRTC includes where GCC would not (NVRTC defines no __GNUC__) is a
    dependency, so editing it rebuilds; a header only GCC would include (here missing) keeps the module with NVRTC."""
    real_nvcc()
    from jitkern.cli import FATBIN_MAGIC

    write(tmp_path / "rtc_only.h", "constexpr int kRtcValue = 0x13572468;\n")
    kernel = write(tmp_path / "rtc_kernel.cuh", NVRTC_KERNEL)
    fields = cuda_fields("rtc_reads", kernel, host_without_nvcc=True)
    nvrtc = {**env, "JITKERN_DEVICE_COMPILER": "nvrtc"}
    first = built(build(fields, nvrtc))
    assert FATBIN_MAGIC not in Path(first).read_bytes(), "NVRTC built it, not nvcc"
    assert str(tmp_path / "rtc_only.h") in (Path(first).parent / "manifest").read_text(), "the header NVRTC read is a dependency"
    write(tmp_path / "rtc_only.h", "constexpr int kRtcValue = 0x24681357;\n")
    assert built(build(fields, nvrtc)) != first, "an edit of a header only NVRTC reads rebuilds"


# ----------------------------------------------------------------------------- the working directory


@pytest.mark.parametrize("flag", ["-include", "-imacros"])
def test_a_relative_include_flag_is_read_from_the_callers_directory(tmp_path, env, flag):
    kernel = write(tmp_path / "probe.h", PROBE_CPU)
    for name, value in (("a", 31), ("b", 32)):
        write(tmp_path / name / "value.h", f"#define VALUE {value}\n")
    fields = cpu_fields("relinclude", kernel, extra_cflags=[flag, "value.h"])
    assert result(load(fields, env, mode="value", cwd=tmp_path / "a")) == 31
    assert result(load(fields, env, mode="value", cwd=tmp_path / "b")) == 32


IN_A_REMOVED_DIRECTORY = textwrap.dedent(
    """
    import json, os, sys, tempfile, jitkern, tvm_ffi  # tvm_ffi (and torch, where installed) imported first: they need no cwd
    fields = json.loads(sys.argv[1])
    gone = tempfile.mkdtemp(dir=sys.argv[2])
    os.chdir(gone)
    os.rmdir(gone)
    try:
        print("VALUE", jitkern.JitSpec(*fields.pop("args"), **fields).load().f())
    except Exception as e:
        print("ERROR", type(e).__name__, e)
    """
)


def test_a_removed_working_directory_needs_no_reading_without_relative_paths(tmp_path, env):
    """A process whose working directory was removed loads a module whose request names only absolute paths;
    one with a relative include path is refused naming the field, the path and why the directory cannot be read."""
    kernel = write(tmp_path / "probe.h", PROBE_CPU)
    fields = cpu_fields("gone_cwd", kernel)
    assert result(load(fields, env, mode="value")) == 7
    for request in (fields, cpu_fields("gone_cwd", kernel, extra_cflags=["-DVALUE=8"])):  # cached, then compiled
        proc = run([sys.executable, "-c", IN_A_REMOVED_DIRECTORY, json.dumps(request), tmp_path], env)
        assert proc.stdout.startswith("VALUE "), proc.stdout + proc.stderr[-2000:]
    relative = cpu_fields("gone_cwd", kernel, extra_include_paths=["inc"])
    proc = run([sys.executable, "-c", IN_A_REMOVED_DIRECTORY, json.dumps(relative), tmp_path], env)
    assert proc.stdout.startswith("ERROR ValueError"), proc.stdout + proc.stderr[-2000:]
    assert "extra_include_paths" in proc.stdout and "'inc'" in proc.stdout and "removed" in proc.stdout, proc.stdout


def test_a_relative_cxx_builds_cuda_and_is_recorded_absolute(tmp_path, env):
    real_nvcc()
    cxx = script(tmp_path / "bin" / "c++", f'exec {real_cxx()} "$@"')
    kernel = write(tmp_path / "probe.cuh", PROBE_CUDA)
    library = built(build(cuda_fields("relcxx", kernel), {**env, "CXX": "bin/c++"}, cwd=tmp_path))
    manifest = (Path(library).parent / "manifest").read_text()
    assert str(cxx) in manifest and " bin/c++" not in manifest


def test_the_compiler_probe_uses_tmpdir(tmp_path, env):
    """The compiler's --version runs with its output under TMPDIR (a read-only /tmp with a writable TMPDIR works)."""
    seen = tmp_path / "probe-output"
    cxx = script(tmp_path / "bin" / "c++", f'[ "$1" = --version ] && {{ out=$(readlink /proc/$$/fd/1); echo "$out" > {seen}; }}\nexec {real_cxx()} "$@"')
    kernel = write(tmp_path / "probe.h", PROBE_CPU)
    tmpdir = tmp_path / "own-tmp"
    tmpdir.mkdir()
    result(load(cpu_fields("probe_tmp", kernel), {**env, "CXX": str(cxx), "TMPDIR": str(tmpdir)}, mode="value"))
    assert seen.read_text().startswith(str(tmpdir) + "/"), seen.read_text()


# ------------------------------------------------------------------------------------------- loading

CLOSE_ALL_THEN_LOAD = textwrap.dedent(
    """
    import json, os, sys, jitkern
    specs = [json.loads(a) for a in sys.argv[1:]]
    first = [jitkern.JitSpec(*s.pop("args"), **s).load() for s in specs[:-1]]
    print("FIRST", [m.f() for m in first])
    os.closerange(3, 4096)  # what a daemonizing helper does; the next opens take the same numbers again
    last = jitkern.JitSpec(*specs[-1].pop("args"), **specs[-1]).load()
    print("LAST", last.f())
    """
)


def test_closed_descriptors_never_make_a_load_return_another_module(tmp_path, env):
    fields = []
    for i in range(7):
        kernel = write(tmp_path / f"m{i}.h", PROBE_CPU.replace("#define VALUE 7", f"#define VALUE {40 + i}"))
        fields.append(cpu_fields(f"fdname{i}", kernel))
        built(build(fields[-1], env))  # cached: each load opens its library by descriptor
    proc = run([sys.executable, "-c", CLOSE_ALL_THEN_LOAD, *map(json.dumps, fields)], env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "LAST 46" in proc.stdout, proc.stdout


MANY_UNDER_A_LIMIT = textwrap.dedent(
    """
    import json, os, resource, sys, jitkern
    specs = json.loads(sys.argv[1])
    modules = [jitkern.JitSpec(*s.pop("args"), **s).load() for s in specs[:1]]
    opened = len(os.listdir("/proc/self/fd"))
    resource.setrlimit(resource.RLIMIT_NOFILE, (opened + 12, opened + 12))
    modules += [jitkern.JitSpec(*s.pop("args"), **s).load() for s in specs[1:]]
    print("LOADED", len(modules), sum(int(m.f()) for m in modules))
    filler = []
    try:
        while True:
            filler.append(os.open("/dev/null", os.O_RDONLY))
    except OSError:
        pass
    try:
        jitkern.JitSpec(*json.loads(sys.argv[2]).pop("args"), **{k: v for k, v in json.loads(sys.argv[2]).items() if k != "args"}).load()
        print("AT THE LIMIT: loaded")
    except Exception as e:
        print("AT THE LIMIT:", type(e).__name__, str(e).splitlines()[0])
    """
)


def test_loaded_modules_hold_no_descriptors_and_the_limit_is_named(tmp_path, env):
    fields = []
    for i in range(24):
        kernel = write(tmp_path / f"k{i}.h", PROBE_CPU.replace("#define VALUE 7", f"#define VALUE {i}"))
        fields.append(cpu_fields(f"many{i}", kernel))
    spec_file = write(tmp_path / "specs.json", json.dumps(fields))
    proc = run([sys.executable, "-m", "jitkern", "prebuild", "--spec-file", spec_file, "--cache-dir", tmp_path / "cache"], env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    last = fields.pop()
    proc = run([sys.executable, "-c", MANY_UNDER_A_LIMIT, json.dumps(fields), json.dumps(last)], env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"LOADED 23 {sum(range(23))}" in proc.stdout, proc.stdout
    limit_line = next(line for line in proc.stdout.splitlines() if line.startswith("AT THE LIMIT"))
    assert "not cached" not in limit_line and ("loaded" in limit_line or "too many open files" in limit_line.lower()), limit_line


def test_no_runpath_into_the_build_machines_directories(tmp_path, env):
    kernel = write(tmp_path / "probe.h", PROBE_CPU)
    library = built(build(cpu_fields("runpath", kernel), env))
    dynamic = run(["readelf", "-d", library], os.environ).stdout
    assert "RUNPATH" not in dynamic and "RPATH" not in dynamic, dynamic
    assert result(load(cpu_fields("runpath", kernel), env, mode="value")) == 7


def test_no_runpath_in_a_cuda_module(tmp_path, env):
    real_nvcc()
    kernel = write(tmp_path / "probe.cuh", PROBE_CUDA)
    library = built(build(cuda_fields("runpath_cuda", kernel), env))
    dynamic = run(["readelf", "-d", library], os.environ).stdout
    assert "RUNPATH" not in dynamic and "RPATH" not in dynamic and "libcudart" in dynamic, dynamic


# --------------------------------------------------------------------------------- ordinary setups


def test_a_header_dated_in_the_future_builds_and_publishes(tmp_path, env):
    kernel = write(tmp_path / "probe.h", PROBE_CPU)
    future = (int(__import__("time").time()) + 3600) * 10**9
    os.utime(kernel, ns=(future, future))
    assert result(load(cpu_fields("future", kernel), env, mode="value")) == 7
    again = load(cpu_fields("future", kernel), env, mode="value")
    assert result(again) == 7 and compiles(again) == 0


FORK_DURING_BUILD = textwrap.dedent(
    """
    import json, os, sys, threading, time, jitkern
    fields = json.loads(sys.argv[1])
    def fork_soon():
        while not os.path.exists(os.environ["JK_COMPILING"]):  # the compile step has begun, under the build lock
            time.sleep(0.05)
        if os.fork() == 0:
            with open(os.environ["JK_CHILD_PID"], "w") as f:  # the test ends this process by its id
                f.write(str(os.getpid()))
            null = os.open("/dev/null", os.O_WRONLY)
            os.dup2(null, 1), os.dup2(null, 2)  # the test's pipes close when the parent exits
            time.sleep(60)
            os._exit(0)
    threading.Thread(target=fork_soon).start()
    print("BUILT", jitkern.JitSpec(*fields.pop("args"), **fields).build(), flush=True)
    """
)


def test_a_fork_during_a_build_does_not_keep_its_lock(tmp_path, env):
    marker = tmp_path / "compiling"
    cxx = script(tmp_path / "bin" / "c++", f'case " $* " in *" -o "*) touch {marker}; sleep 2;; esac\nexec {real_cxx()} "$@"')
    kernel = write(tmp_path / "probe.h", PROBE_CPU)
    fields = cpu_fields("forked", kernel)
    child_pid = tmp_path / "child.pid"
    slow = {**env, "CXX": str(cxx), "JK_COMPILING": str(marker), "JK_CHILD_PID": str(child_pid)}
    proc = subprocess_popen([sys.executable, "-c", FORK_DURING_BUILD, json.dumps(fields)], slow)
    try:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err[-2000:]
        # An edit rebuilds the same entry, under its build lock, while the forked child still lives (60 s).
        write(kernel, PROBE_CPU.replace("#define VALUE 7", "#define VALUE 8"))
        again = load(fields, slow, mode="value", timeout=20)
        assert result(again) == 8
    finally:
        if child_pid.exists():
            try:
                os.kill(int(child_pid.read_text()), signal.SIGKILL)
            except ProcessLookupError:
                pass


def subprocess_popen(argv, env):
    import subprocess
    return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_a_lock_directory_of_another_user_does_not_fail_loads(tmp_path, env):
    if os.geteuid() != 0:
        pytest.skip("NOT RUN: needs root to make a directory owned by another user")
    locks = tmp_path / "jitkern-locks"
    locks.mkdir()
    os.chown(locks, 65534, 65534)
    kernel = write(tmp_path / "probe.h", PROBE_CPU)
    proc = load(cpu_fields("foreign_locks", kernel), {**env, "JITKERN_LOCK_DIR": str(locks)}, mode="value", timeout=120)
    assert result(proc) == 7
    assert "not locking" in proc.stderr and "JITKERN_LOCK_DIR" in proc.stderr


def test_a_cache_under_a_directory_another_user_may_write_is_refused(tmp_path, env):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # not sticky: anyone could rename the cache away and put theirs in its place
    kernel = write(tmp_path / "probe.h", PROBE_CPU)
    proc = load(cpu_fields("swappable", kernel), {**env, "JITKERN_CACHE_DIR": str(shared / "cache")}, mode="value")
    assert proc.returncode != 0 and "refusing cache directory" in proc.stdout + proc.stderr
    assert str(shared) in proc.stdout + proc.stderr and "JITKERN_CACHE_DIR" in proc.stdout + proc.stderr


@pytest.mark.parametrize("locks", ["elsewhere", "in_the_cache"])
@pytest.mark.parametrize("op", [["verify"], ["prune", "--max-size", "0"], ["clear"], ["rm", "owned"]], ids=["verify", "prune", "clear", "rm"])
def test_cache_administration_of_another_users_cache_is_refused(tmp_path, env, op, locks):
    """Root acting on a cache of uid 65534 removes none of its entries and leaves nothing of root's there, whether
    its owner keeps the locks elsewhere (JITKERN_LOCK_DIR: the cache has no lock directory) or in the cache."""
    if os.geteuid() != 0:
        pytest.skip("NOT RUN: needs root to act on another user's cache")
    kernel = write(tmp_path / "probe.h", PROBE_CPU)
    owner_env = {**env, "JITKERN_LOCK_DIR": str(tmp_path / "owners-locks")} if locks == "elsewhere" else env
    built(build(cpu_fields("owned", kernel), owner_env))
    cache = tmp_path / "cache"
    assert (cache / "locks").is_dir() == (locks == "in_the_cache")
    for dirpath, dirnames, filenames in os.walk(cache):
        for name in dirnames + filenames:
            os.chown(os.path.join(dirpath, name), 65534, 65534, follow_symlinks=False)
    os.chown(cache, 65534, 65534)
    before = sorted(str(p.relative_to(cache)) for p in cache.rglob("*"))
    proc = run([sys.executable, "-m", "jitkern", "cache", *op, "--cache-dir", cache], env)
    assert proc.returncode != 0 and "uid 65534" in proc.stderr, proc.stdout + proc.stderr
    assert sorted(str(p.relative_to(cache)) for p in cache.rglob("*")) == before
    assert all(p.stat().st_uid == 65534 for p in cache.rglob("*"))


@pytest.mark.parametrize("setting", ["JITKERN_INCLUDE_DIR", "JITKERN_CSRC_DIR"])
def test_a_directory_setting_that_is_no_directory_is_a_value_error(tmp_path, env, setting):
    kernel = write(tmp_path / "probe.h", PROBE_CPU)
    proc = load(cpu_fields("nodir", kernel), {**env, setting: str(tmp_path / "nonexistent")}, mode="value")
    assert "ERROR ValueError" in error_line(proc) and setting in error_line(proc), error_line(proc)


def test_a_relative_home_is_refused_for_the_default_cache(tmp_path, env):
    kernel = write(tmp_path / "probe.h", PROBE_CPU)
    proc = load(cpu_fields("relhome", kernel), {**{k: v for k, v in env.items() if k != "JITKERN_CACHE_DIR"}, "HOME": "relative/home"},
                mode="value", cwd=tmp_path)
    assert "ERROR ValueError" in error_line(proc) and "HOME" in error_line(proc), error_line(proc)
    assert not (tmp_path / "relative").exists()


def test_cache_rm_takes_options_among_its_entries(tmp_path, env):
    kernel = write(tmp_path / "probe.h", PROBE_CPU)
    built(build(cpu_fields("removable", kernel), env))
    cache = tmp_path / "cache"
    dry = run([sys.executable, "-m", "jitkern", "cache", "rm", "-v", "removable", "--dry-run", "--cache-dir", cache], env)
    assert dry.returncode == 0 and "would remove  removable-" in dry.stdout, dry.stdout + dry.stderr
    done = run([sys.executable, "-m", "jitkern", "cache", "rm", "--cache-dir", cache, "-v", "removable"], env)
    assert done.returncode == 0 and "removed       removable-" in done.stdout, done.stdout + done.stderr
    assert not list(cache.glob("removable-*"))


def test_a_deeply_nested_spec_file_is_a_one_line_error(tmp_path, env):
    specs = write(tmp_path / "deep.json", "[" * 100_000 + "]" * 100_000)
    proc = run([sys.executable, "-m", "jitkern", "prebuild", "--spec-file", specs, "--cache-dir", tmp_path / "cache"], env)
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        f"jitkern prebuild: --spec-file {specs}: nested too deeply to read (it must hold a JSON list of JitSpec fields)"], proc.stderr[-2000:]


def test_a_cache_on_a_noexec_mount_is_named_as_such(tmp_path, env):
    """A module built into a cache that no library can be mapped from fails to load saying why, and doctor says it."""
    if os.geteuid() != 0:
        pytest.skip("NOT RUN: needs root to mount a file system")
    mount = tmp_path / "noexec"
    mount.mkdir()
    noexec = ["unshare", "-m", "sh", "-c", f'mount -t tmpfs -o noexec tmpfs {mount} && chmod 700 {mount} && exec "$@"', "sh"]
    kernel = write(tmp_path / "probe.h", PROBE_CPU)
    here = {**env, "JITKERN_CACHE_DIR": str(mount / "cache")}
    proc = run([*noexec, sys.executable, "-c", LOADER, json.dumps(cpu_fields("noexec", kernel)), "value"], here)
    reason = "its file system is mounted noexec, so no module can be loaded from it"
    assert proc.returncode != 0 and reason in error_line(proc), error_line(proc)
    doctor = run([*noexec, sys.executable, "-m", "jitkern", "doctor"], here)  # the same rule and words as the load's
    assert doctor.returncode == 1 and f"[FAIL] cache directory: {mount / 'cache'}: {reason}" in doctor.stdout, doctor.stdout[-3000:]


def test_doctor_names_an_unreadable_prebuilt_layer(open_dir, env):
    """A prebuilt layer the user cannot read (under a directory only root may enter) is reported as
    unreadable, not as missing."""
    require_nobody()
    private = open_dir / "private"
    (private / "layer").mkdir(parents=True)
    private.chmod(0o700)
    home = open_dir / "home"
    home.mkdir(mode=0o700)
    os.chown(home, 65534, 65534)
    nobody = {**env, "JITKERN_PREBUILT_DIRS": str(private / "layer"), "JITKERN_CACHE_DIR": str(home / "cache"), "HOME": str(home)}
    doctor = run([sys.executable, "-m", "jitkern", "doctor"], nobody, as_nobody=True, cwd=open_dir)
    assert f"[FAIL] prebuilt cache: {private / 'layer'}: cannot read it: Permission denied" in doctor.stdout, doctor.stdout[-3000:]
