"""The `jitkern` command and the operations behaviour behind it: cache ls/du/show/stats/verify/prune/clear/rm
(also beside running loaders), prebuild, doctor, config, clangd, --version, strict mode (JITKERN_ON_MISS), logging.
CPU only (C++ kernels through the host compiler)."""

import fcntl
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

import jitkern
from conftest import KERNELS


def run_cli(*args, env=None, cwd=None, timeout=300):
    return subprocess.run([sys.executable, "-m", "jitkern", *args], capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, **(env or {})), cwd=cwd)


def scale_spec(factor: int) -> jitkern.JitSpec:
    return jitkern.JitSpec("scale", str(factor), cpp_files=[str(KERNELS / "scale_cpu.h")], cpp_wrappers=[("scale", f"scale<{factor}>")])


def check_scale(module, factor: int) -> None:
    a = np.arange(5, dtype=np.float32)
    out = np.full_like(a, np.nan)
    module.scale(out, a)
    np.testing.assert_array_equal(out, a * factor)


def entries(cache_dir) -> dict:
    return {e["module"] or e["stem"]: e for e in json.loads(run_cli("cache", "ls", "--json", "--cache-dir", str(cache_dir)).stdout)["entries"]}


# Each subcommand's options, as its --help must list them (and no other's).
OPTIONS = {
    "clangd": {"--output", "--force", "--arch", "--kernels"},
    "config": {"--markdown", "-v", "--verbose", "--json"},
    "cache": {"--cache-dir", "--max-size", "--older-than", "--dry-run", "--json", "-v", "--verbose"},
    "prebuild": {"--ops", "--dtypes", "--constants", "--spec-file", "--arch", "--cache-dir", "-j", "--jobs", "--force", "--wheel"},
    "doctor": {"--json"},
    "compat-check": {"--arch", "--calls", "--json", "--kernels", "--list", "--only", "--time-budget", "--workers"},
}


def help_options(text: str) -> set:
    """The options a --help lists: the flags before the description on each line of its options section."""
    found = set()
    for line in text.splitlines():
        if re.match(r"\s+-", line):
            found.update(re.findall(r"(?<![\w-])--?[a-z][\w-]*", re.split(r"\s{2,}", line.strip())[0]))
    return found - {"-h", "--help"}


def test_every_subcommand_has_help_listing_its_own_options():
    top = run_cli("--help")
    assert top.returncode == 0 and "usage: jitkern" in top.stdout, top.stderr
    assert help_options(top.stdout) == {"--version"}
    assert set(re.findall(r"^    ([a-z][\w-]*)", top.stdout, re.M)) == set(OPTIONS), "a subcommand without its row in OPTIONS"
    assert all(command in top.stdout.split("\n\n")[1] for command in OPTIONS), "the description names every subcommand"
    for command, options in OPTIONS.items():
        proc = run_cli(command, "--help")
        assert proc.returncode == 0 and f"usage: jitkern {command}" in proc.stdout, (command, proc.stdout, proc.stderr)
        assert help_options(proc.stdout) == options, (command, proc.stdout)


def test_cache_ls_and_du_describe_entries(cache_dir):
    scale_spec(3).load()
    scale_spec(4).load()
    listed = entries(cache_dir)
    assert set(listed) == {"scale_3", "scale_4"}, listed
    for e in listed.values():
        assert e["status"] == "ok" and e["arch"] == "-" and e["bytes"] > 10_000 and e["build_ms"] > 0
        assert abs(e["last_use_unix"] - time.time()) < 600 and e["built_unix"] <= e["last_use_unix"] + 1
    table = run_cli("cache", "ls", "--cache-dir", str(cache_dir)).stdout
    assert "scale_3" in table and "scale_4" in table and " ok" in table
    du = run_cli("cache", "du", "--cache-dir", str(cache_dir)).stdout
    assert "2 entries" in du and "ok: 2 entries" in du


def test_cache_verify_removes_a_corrupt_library_and_keeps_the_rest(cache_dir):
    good, bad = scale_spec(5).build(), scale_spec(6).build()
    with open(bad, "r+b") as f:  # same size, one byte flipped: only a rehash can tell
        f.seek(200)
        byte = f.read(1)
        f.seek(200)
        f.write(bytes([byte[0] ^ 0xFF]))
    proc = run_cli("cache", "verify", "--cache-dir", str(cache_dir))
    assert proc.returncode == 0, proc.stderr
    assert "removed" in proc.stdout and "does not match its manifest's hash" in proc.stdout
    assert "1 entries verified and kept" in proc.stdout
    assert os.path.exists(good) and not os.path.exists(bad)
    check_scale(scale_spec(6).load(), 6)  # rebuilt on the next load


def test_prune_by_age_and_size_and_dry_run(cache_dir):
    scale_spec(7).load()
    scale_spec(8).load()
    stems = {e["module"]: e["stem"] for e in entries(cache_dir).values()}
    old = time.time() - 40 * 86400
    manifest = cache_dir / stems["scale_7"] / "manifest"
    os.utime(manifest, (old, os.stat(manifest).st_mtime))  # last used 40 days ago
    dry = run_cli("cache", "prune", "--older-than", "30d", "--dry-run", "--cache-dir", str(cache_dir))
    assert "would remove" in dry.stdout and stems["scale_7"] in dry.stdout and set(entries(cache_dir)) == {"scale_7", "scale_8"}
    proc = run_cli("cache", "prune", "--older-than", "30d", "--cache-dir", str(cache_dir))
    assert proc.returncode == 0 and "unused for more than the age limit" in proc.stdout
    assert set(entries(cache_dir)) == {"scale_8"}
    proc = run_cli("cache", "prune", "--max-size", "1K", "--cache-dir", str(cache_dir))
    assert "over the size limit" in proc.stdout and entries(cache_dir) == {}
    assert run_cli("cache", "prune", "--cache-dir", str(cache_dir)).returncode == 2  # no limit given: refused
    bad = run_cli("cache", "prune", "--max-size", "lots", "--cache-dir", str(cache_dir))
    assert bad.returncode == 2 and "not a size" in bad.stderr


def test_prune_and_clear_skip_an_entry_that_is_being_loaded(cache_dir):
    """A loader holds its entry's lock shared from lookup to dlopen; prune and clear never wait for it
    and leave the entry alone."""
    scale_spec(9).load()
    (stem,) = [e["stem"] for e in entries(cache_dir).values()]
    with open(cache_dir / "locks" / f"{stem}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_SH)
        for args in (("prune", "--max-size", "0"), ("clear",)):
            proc = run_cli("cache", *args, "--cache-dir", str(cache_dir))
            assert proc.returncode == 0 and "busy" in proc.stdout, proc.stdout
            assert set(entries(cache_dir)) == {"scale_9"}
    assert "removed" in run_cli("cache", "clear", "--cache-dir", str(cache_dir)).stdout
    assert entries(cache_dir) == {}


LOADER = textwrap.dedent(
    """
    import sys, numpy as np, jitkern
    m = jitkern.load_jit("scale", "11", cpp_files=[sys.argv[1]], cpp_wrappers=[("scale", "scale<11>")])
    a = np.arange(3, dtype=np.float32); out = np.zeros_like(a); m.scale(out, a)
    assert (out == a * 11).all(), out
    print("LOADED")
    """
)


def test_prune_beside_loading_processes_loses_nothing(cache_dir):
    jitkern.load_jit("scale", "11", cpp_files=[str(KERNELS / "scale_cpu.h")], cpp_wrappers=[("scale", "scale<11>")])
    env = {"JITKERN_CACHE_DIR": str(cache_dir), "JITKERN_QUIET": "1"}
    for _ in range(4):
        loaders = [subprocess.Popen([sys.executable, "-c", LOADER, str(KERNELS / "scale_cpu.h")], stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True, env=dict(os.environ, **env)) for _ in range(3)]
        for _ in range(3):
            assert run_cli("cache", "prune", "--max-size", "0", "--cache-dir", str(cache_dir)).returncode == 0
        for p in loaders:
            out, err = p.communicate(timeout=120)
            assert p.returncode == 0 and "LOADED" in out, err


def test_prebuild_from_a_spec_file_in_parallel_then_cached(tmp_path):
    spec_file = tmp_path / "specs.json"
    spec_file.write_text(json.dumps([{"args": ["scale", str(f)], "cpp_files": [str(KERNELS / "scale_cpu.h")],
                                      "cpp_wrappers": [["scale", f"scale<{f}>"]]} for f in (21, 22, 23)]))
    target = tmp_path / "prebuilt"
    first = run_cli("prebuild", "--spec-file", str(spec_file), "-j", "2", "--cache-dir", str(target))
    assert first.returncode == 0, first.stdout + first.stderr
    assert "prebuilding 3 modules with 2 jobs" in first.stdout and first.stdout.count("  built  ") == 3
    assert "3 built, 0 already cached, 0 failed" in first.stdout
    again = run_cli("prebuild", "--spec-file", str(spec_file), "-j", "2", "--cache-dir", str(target))
    assert again.stdout.count("  cached ") == 3 and "0 built, 3 already cached" in again.stdout
    assert set(entries(target)) == {"scale_21", "scale_22", "scale_23"}
    # the prebuilt cache, also moved elsewhere, serves a strict process without compiling
    moved = tmp_path / "elsewhere" / "cache"
    moved.parent.mkdir(mode=0o700)
    shutil.copytree(target, moved, symlinks=True)
    for cache in (target, moved):
        proc = subprocess.run([sys.executable, "-c", "import jitkern, sys; jitkern.load_jit('scale', '22', cpp_files=[sys.argv[1]], "
                               "cpp_wrappers=[('scale', 'scale<22>')]); print('OK')", str(KERNELS / "scale_cpu.h")],
                              capture_output=True, text=True, env=dict(os.environ, JITKERN_CACHE_DIR=str(cache), JITKERN_ON_MISS="error"))
        assert proc.returncode == 0 and "OK" in proc.stdout, proc.stderr


def test_prebuild_reports_a_failure_and_bad_arguments(tmp_path):
    broken = tmp_path / "broken.h"
    broken.write_text("inline int nope() { return missing_name; }\n")
    spec_file = tmp_path / "specs.json"
    spec_file.write_text(json.dumps([{"args": ["broken"], "cpp_files": [str(broken)], "cpp_wrappers": [["nope", "nope"]]}]))
    proc = run_cli("prebuild", "--spec-file", str(spec_file), "--cache-dir", str(tmp_path / "c"))
    assert proc.returncode == 1 and "FAILED broken" in proc.stdout and "missing_name" in proc.stderr
    proc = run_cli("prebuild", "--ops", "norm", "--cache-dir", str(tmp_path / "c"), env={"JITKERN_CUDA_ARCH": ""})
    assert proc.returncode == 2 and "give --arch" in proc.stderr
    proc = run_cli("prebuild", "--ops", "nonesuch", "--arch", "sm_90a", "--cache-dir", str(tmp_path / "c"))
    assert proc.returncode == 2 and "unknown kernel family or op nonesuch; the families: norm, " in proc.stderr


def test_strict_mode(cache_dir, caplog, monkeypatch):
    spec = scale_spec(31)
    monkeypatch.setenv("JITKERN_ON_MISS", "error")
    with pytest.raises(jitkern.CacheMissError, match=r"module 'scale_31' is not cached .* JITKERN_ON_MISS=error forbids compiling"):
        spec.load()
    assert issubclass(jitkern.CacheMissError, jitkern.BuildError)
    monkeypatch.setenv("JITKERN_ON_MISS", "warn")
    with caplog.at_level(logging.INFO, logger="jitkern"):
        check_scale(spec.load(), 31)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == ["module 'scale_31' is not cached; compiling it (JITKERN_ON_MISS=warn)"], warnings
    monkeypatch.setenv("JITKERN_ON_MISS", "error")
    check_scale(scale_spec(31).replace(extra_cflags=[]).load(), 31)  # cached now: strict mode serves it
    monkeypatch.setenv("JITKERN_ON_MISS", "sometimes")
    with pytest.raises(ValueError, match="JITKERN_ON_MISS='sometimes': expected one of compile, warn, error"):
        scale_spec(32).build()


def test_warm_path_needs_no_compiler(cache_dir):
    """A cached module loads with no C++ compiler and no nvcc reachable (zero-toolchain serving)."""
    scale_spec(34).build()
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_HOME", "CUDA_PATH")}
    env.update(PATH="/usr/bin:/bin", CXX="/nonexistent", JITKERN_ON_MISS="error")
    code = ("import sys, numpy as np, jitkern; m = jitkern.load_jit('scale', '34', cpp_files=[sys.argv[1]], "
            "cpp_wrappers=[('scale', 'scale<34>')]); a = np.ones(2, np.float32); o = np.zeros_like(a); m.scale(o, a); print(o[0])")
    proc = subprocess.run([sys.executable, "-c", code, str(KERNELS / "scale_cpu.h")], capture_output=True, text=True, env=env)
    assert proc.returncode == 0 and proc.stdout.strip() == "34.0", proc.stderr
    missing = subprocess.run([sys.executable, "-c", code.replace("'34'", "'35'").replace("<34>", "<35>"), str(KERNELS / "scale_cpu.h")],
                             capture_output=True, text=True, env=dict(env, JITKERN_ON_MISS="compile"))
    assert missing.returncode != 0 and "C++ compiler '/nonexistent' was not found; install one" in missing.stderr, missing.stderr


def test_compiles_are_logged_with_phases_and_commands(cache_dir, caplog):
    with caplog.at_level(logging.DEBUG, logger="jitkern"):
        scale_spec(33).build()
    messages = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "jitkern"]
    assert (logging.INFO, "compiling scale_33 ...") in messages, messages
    assert any(lvl == logging.INFO and m.startswith("compiled scale_33 in ") and "(compile and link " in m for lvl, m in messages)
    assert any(lvl == logging.DEBUG and m.startswith("run: ") and "scale_cpu.h" not in m and "-shared" in m for lvl, m in messages)


def test_doctor_names_a_broken_compiler_with_the_fix(tmp_path):
    ok = run_cli("doctor", env={"JITKERN_CACHE_DIR": str(tmp_path / "c")})
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "[ok  ] C++ compiler" in ok.stdout and "[ok  ] C++ build: a tiny C++ module compiled" in ok.stdout
    broken = run_cli("doctor", env={"CXX": "/nonexistent", "JITKERN_CACHE_DIR": str(tmp_path / "c")})
    assert broken.returncode == 1
    assert "[FAIL] C++ compiler: C++ compiler '/nonexistent' was not found" in broken.stdout, broken.stdout
    assert "fix: install one (e.g. apt install g++) or set CXX to a working compiler" in broken.stdout
    bad_cuda = run_cli("doctor", env={"CUDA_HOME": str(tmp_path), "JITKERN_CACHE_DIR": str(tmp_path / "c")})
    assert bad_cuda.returncode == 1 and f"[FAIL] CUDA compiler: CUDA_HOME={tmp_path} has no bin/nvcc" in bad_cuda.stdout, bad_cuda.stdout
    assert "fix: point it at a CUDA toolkit or unset it" in bad_cuda.stdout


def test_config_says_where_each_value_came_from(monkeypatch):
    monkeypatch.delenv("JITKERN_ON_MISS", raising=False)
    proc = run_cli("config", env={"JITKERN_COMPILE_TIMEOUT": "123"})
    assert "JITKERN_COMPILE_TIMEOUT=123  (from the environment)" in proc.stdout
    assert "JITKERN_ON_MISS=compile  (default: compile)" in proc.stdout


def test_clangd_writes_config_and_compile_commands(tmp_path):
    kernels = tmp_path / "csrc"
    kernels.mkdir()
    (kernels / "a.cuh").write_text("// a kernel\n")
    proc = run_cli("clangd", "--kernels", str(kernels), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "--cuda-gpu-arch=sm_80" in (tmp_path / ".clangd").read_text()
    db = json.loads((tmp_path / "compile_commands.json").read_text())
    assert [Path(e["file"]).name for e in db] == ["a.cuh"] and f"-I{jitkern.INCLUDE_DIR}" in db[0]["arguments"]
    assert run_cli("clangd", cwd=tmp_path).returncode == 1  # never overwrites without --force


def test_clangd_takes_cpu_kernels_as_cpp(tmp_path):
    """A CPU kernel's .h is C++ (no -xcuda) in compile_commands.json and in .clangd, whose CUDA flags apply to
    .cu and .cuh files only."""
    kernels = tmp_path / "csrc"
    kernels.mkdir()
    (kernels / "a.cuh").write_text("// a CUDA kernel\n")
    (kernels / "b.h").write_text("// a CPU kernel\n")
    proc = run_cli("clangd", "--kernels", str(kernels), cwd=tmp_path)
    assert proc.returncode == 0 and "(1 CUDA and 1 C++ kernel files under" in proc.stdout, proc.stdout + proc.stderr
    db = {Path(e["file"]).name: e["arguments"] for e in json.loads((tmp_path / "compile_commands.json").read_text())}
    assert "-xcuda" in db["a.cuh"] and "-xcuda" not in db["b.h"] and "-xc++" in db["b.h"], db
    assert not any(a.startswith("--cuda") for a in db["b.h"]), db["b.h"]
    cpp, cuda = (tmp_path / ".clangd").read_text().split("\n---\n")
    assert "PathExclude: .*\\.(cu|cuh)$" in cpp and "-xcuda" not in cpp and "--cuda-gpu-arch" not in cpp, cpp
    assert "PathMatch: .*\\.(cu|cuh)$" in cuda and "-xcuda" in cuda and "--cuda-gpu-arch=sm_80" in cuda, cuda
    assert "needs clangd 15 or newer" in cpp


def test_clangd_names_the_clangd_it_needs(tmp_path):
    fake = tmp_path / "bin" / "clangd"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho 'Debian clangd version 14.0.6'\n")
    fake.chmod(0o755)
    proc = run_cli("clangd", cwd=tmp_path, env={"PATH": f"{fake.parent}:{os.environ['PATH']}"})
    assert proc.returncode == 0 and proc.stderr.strip() == ("note: jitkern's headers need clangd 15 or newer (the clangd on PATH is 14); "
                                                            "e.g. apt install clangd-15"), proc.stderr
    fake.write_text("#!/bin/sh\necho 'Debian clangd version 19.1.7'\n")
    assert run_cli("clangd", "--force", cwd=tmp_path, env={"PATH": f"{fake.parent}:{os.environ['PATH']}"}).stderr == ""


def test_cache_names_specs_lists_prebuilt_layers_and_failed_entries(tmp_path):
    """show/rm take a JitSpec's name for its modules; ls lists the prebuilt layers too; a failed entry shows its
    module and arch; --cache-dir must be a directory."""
    src = tmp_path / "broken.h"
    src.write_text("inline int broken() { return nope; }\n")
    cache, layer = tmp_path / "cache", tmp_path / "prebuilt"
    env = {"JITKERN_CACHE_DIR": str(cache)}
    code = ("import jitkern\n"
            f"jitkern.JitSpec('scale', '3', cpp_files=[{str(KERNELS / 'scale_cpu.h')!r}], cpp_wrappers=[('scale', 'scale<3>')]).build()\n"
            "try:\n"
            f"    jitkern.JitSpec('broken', cpp_files=[{str(src)!r}], cpp_wrappers=[('broken', 'broken')]).build()\n"
            "except jitkern.BuildError:\n    pass\n")
    assert subprocess.run([sys.executable, "-c", code], env=dict(os.environ, **env), capture_output=True).returncode == 0
    shown = run_cli("cache", "show", "scale", env=env)
    assert shown.returncode == 0 and shown.stdout.startswith("scale_3 (ok)"), shown.stdout + shown.stderr
    failed = run_cli("cache", "show", "broken", env=env)
    assert "broken (failed)" in failed.stdout and re.search(r"^  arch +-$", failed.stdout, re.M), failed.stdout
    layer.mkdir(mode=0o755)
    listed = run_cli("cache", "ls", env=dict(env, JITKERN_PREBUILT_DIRS=str(layer)))
    assert listed.returncode == 0 and f"{layer} (prebuilt: JITKERN_PREBUILT_DIRS, searched first) (0 entries)" in listed.stdout, listed.stdout
    assert re.search(r"^broken +[0-9a-f]{12} -  ", listed.stdout, re.M), listed.stdout
    not_a_dir = tmp_path / "a-file"
    not_a_dir.write_text("")
    wrong = run_cli("cache", "ls", "--cache-dir", str(not_a_dir))
    assert wrong.returncode == 2 and wrong.stderr.strip() == f"jitkern cache ls: --cache-dir {not_a_dir} is not a directory", wrong.stderr
    removed = run_cli("cache", "rm", "scale", env=env)
    assert removed.returncode == 0 and "scale_3-" in removed.stdout, removed.stdout + removed.stderr


def test_doctor_says_a_bad_arch_once_and_where_it_builds(tmp_path):
    bad = run_cli("doctor", env={"JITKERN_CUDA_ARCH": "sm_xx", "JITKERN_CACHE_DIR": str(tmp_path / "cache")})
    arch_lines = [line for line in bad.stdout.splitlines() if line.startswith("[") and "JITKERN_CUDA_ARCH" in line]
    assert bad.returncode == 1 and len(arch_lines) == 1 and arch_lines[0].startswith("[FAIL] JITKERN_CUDA_ARCH: invalid"), bad.stdout
    good = run_cli("doctor", env={"JITKERN_CACHE_DIR": str(tmp_path / "cache")})
    assert f"tiny builds, into the cache above as any load's ({tmp_path / 'cache'})" in good.stdout, good.stdout
    assert "jitkern: compiling doctor_cpp ..." in good.stderr, good.stderr


def test_clangd_keeps_an_existing_compile_commands_json(tmp_path):
    """A compile_commands.json of the user's own is not replaced without --force, even where no .clangd
    exists yet; nothing is written then."""
    kernels = tmp_path / "csrc"
    kernels.mkdir()
    (kernels / "a.cuh").write_text("// a kernel\n")
    db = tmp_path / "compile_commands.json"
    db.write_text("[]  mine\n")
    proc = run_cli("clangd", "--kernels", str(kernels), cwd=tmp_path)
    assert proc.returncode == 1 and "compile_commands.json" in proc.stderr and "--force" in proc.stderr, proc.stderr
    assert db.read_text() == "[]  mine\n" and not (tmp_path / ".clangd").exists()
    forced = run_cli("clangd", "--kernels", str(kernels), "--force", cwd=tmp_path)
    assert forced.returncode == 0, forced.stderr
    assert [Path(e["file"]).name for e in json.loads(db.read_text())] == ["a.cuh"]


def test_version_bare_command_and_misplaced_options(tmp_path):
    from jitkern._engine import runtime_version

    proc = run_cli("--version")
    assert proc.returncode == 0 and proc.stdout.strip() == f"jitkern {jitkern.__version__} (engine {runtime_version()})", proc.stdout
    bare = run_cli(cwd=tmp_path)
    assert bare.returncode == 2 and "usage: jitkern" in bare.stderr and list(tmp_path.iterdir()) == []  # no .clangd written
    shadowed = run_cli("--arch", "sm_90a", "prebuild", cwd=tmp_path)
    assert shadowed.returncode == 2 and "give it after the subcommand (jitkern prebuild --arch ...)" in shadowed.stderr, shadowed.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_reader_that_goes_away_ends_the_command_quietly(cache_dir):
    scale_spec(41).build()
    proc = subprocess.Popen([sys.executable, "-m", "jitkern", "cache", "ls"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # as `| head` does once it has its lines
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 128 + 13 and err == "", err  # the status of a process ended by SIGPIPE


def test_cache_ls_show_stats_and_rm(cache_dir):
    scale_spec(42).build()
    scale_spec(43).build()
    listed = entries(cache_dir)
    key42 = listed["scale_42"]["key"]
    assert len(key42) == 64 and listed["scale_42"]["stem"].endswith(key42[:20])
    table = run_cli("cache", "ls", "--cache-dir", str(cache_dir)).stdout
    assert any(line.startswith("scale_42") and key42[:12] in line for line in table.splitlines()), table

    shown = json.loads(run_cli("cache", "show", key42[:6], "--json", "--cache-dir", str(cache_dir)).stdout)["entries"]
    assert [e["module"] for e in shown] == ["scale_42"]
    (e,) = shown
    assert e["key"] == key42 and e["library"] == scale_spec(42).build() and e["library_bytes"] == os.path.getsize(e["library"])
    assert e["dependencies"] > 0 and e["compilers"] and e["build_ms"] > 0 and e["arch"] == "-"
    text = run_cli("cache", "show", "scale_43", "--cache-dir", str(cache_dir)).stdout
    assert text.startswith("scale_43 (ok)") and "dependencies" in text and "compilers" in text
    by_path = json.loads(run_cli("cache", "show", scale_spec(43).build(), "--json", "--cache-dir", str(cache_dir)).stdout)["entries"]
    assert [e["module"] for e in by_path] == ["scale_43"], "the library path a build returns names its entry"

    stats = json.loads(run_cli("cache", "stats", "--json", "--cache-dir", str(cache_dir)).stdout)["caches"]
    assert len(stats) == 1 and stats[0]["entries"] == 2 and stats[0]["compiles"] == 2 and stats[0]["failures"] == 0
    assert stats[0]["build_ms"] == listed["scale_42"]["build_ms"] + listed["scale_43"]["build_ms"]
    assert stats[0]["used_day"] == 2 and stats[0]["used_week"] == 2
    assert "2 entries in the last day" in run_cli("cache", "stats", "--cache-dir", str(cache_dir)).stdout
    du = json.loads(run_cli("cache", "du", "--json", "--cache-dir", str(cache_dir)).stdout)
    assert du["entries"] == 2 and du["bytes"] == listed["scale_42"]["bytes"] + listed["scale_43"]["bytes"] and du["by_status"]["ok"]["entries"] == 2
    verified = json.loads(run_cli("cache", "verify", "--json", "--cache-dir", str(cache_dir)).stdout)["outcomes"]
    assert sorted(o["action"] for o in verified) == ["kept", "kept"]

    dry = run_cli("cache", "rm", "scale_42", "--dry-run", "--cache-dir", str(cache_dir))
    assert dry.returncode == 0 and "would remove" in dry.stdout and set(entries(cache_dir)) == {"scale_42", "scale_43"}
    missing = run_cli("cache", "rm", "scale_42", "nonesuch", "--cache-dir", str(cache_dir))
    assert missing.returncode == 2 and "'nonesuch'" in missing.stderr and set(entries(cache_dir)) == {"scale_42", "scale_43"}
    with open(cache_dir / "locks" / f"{listed['scale_43']['stem']}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_SH)  # a loader holds it: rm does not wait, it skips the entry
        busy = run_cli("cache", "rm", key42[:8], "scale_42", "scale_43", "--cache-dir", str(cache_dir))
    assert busy.returncode == 0 and "busy" in busy.stdout and set(entries(cache_dir)) == {"scale_43"}, busy.stdout

    for args in (("rm",), ("show",)):
        proc = run_cli("cache", *args, "--cache-dir", str(cache_dir))
        assert proc.returncode == 2 and "name the entries" in proc.stderr
    proc = run_cli("cache", "ls", "scale_43", "--cache-dir", str(cache_dir))
    assert proc.returncode == 2 and "naming entries applies only to show and rm" in proc.stderr
    proc = run_cli("cache", "stats", "--dry-run", "--cache-dir", str(cache_dir))
    assert proc.returncode == 2 and "--dry-run applies only to prune, clear and rm" in proc.stderr


def test_cache_rm_by_spec_name_takes_that_specs_modules_only(cache_dir, tmp_path):
    """A JitSpec's name names the modules built from it (recorded in their manifests): `rm scale` leaves those of
    the specs scale_rows and scale_rows_fast, whose modules' names start with "scale_" too."""
    specs = [scale_spec(2), *(scale_spec(f).replace(args=(name, str(f))) for name, f in (("scale_rows", 3), ("scale_rows_fast", 4)))]
    jitkern.warmup(*specs, workers=2)
    dry = run_cli("cache", "rm", "scale", "--dry-run", "--json", "--cache-dir", str(cache_dir))
    assert [o["stem"].rpartition("-")[0] for o in json.loads(dry.stdout)["outcomes"]] == ["scale_2"], dry.stdout + dry.stderr
    assert run_cli("cache", "rm", "scale_rows", "--cache-dir", str(cache_dir)).returncode == 0
    assert set(entries(cache_dir)) == {"scale_2", "scale_rows_fast_4"}
    assert run_cli("cache", "rm", "scale_rows_fast_4", "scale", "--cache-dir", str(cache_dir)).returncode == 0  # module and spec names
    assert entries(cache_dir) == {}
    # a remembered failure records its spec too; an entry recording none (an older jitkern's) is taken by the
    # name's prefix, unless a longer spec name that entries record prefixes it
    (tmp_path / "broken.h").write_text("#error a kernel that does not build\n")
    for spec in (scale_spec(5), scale_spec(7).replace(args=("scale_rows", "7"))):
        with pytest.raises(jitkern.BuildError):
            spec.replace(cpp_files=[str(tmp_path / "broken.h")]).build()
    jitkern.warmup(scale_spec(6), *(scale_spec(f).replace(args=("scale_rows", str(f))) for f in (8, 9)))
    for stem in ("scale_6-", "scale_rows_8-"):  # as an older jitkern wrote them
        (manifest,) = (p / "manifest" for p in cache_dir.iterdir() if p.name.startswith(stem))
        manifest.write_text("".join(line for line in manifest.read_text().splitlines(keepends=True) if not line.startswith("spec ")))
    stems = lambda proc: sorted(o["stem"].rpartition("-")[0] for o in json.loads(proc.stdout)["outcomes"])  # noqa: E731
    dry = run_cli("cache", "rm", "scale", "--dry-run", "--json", "--cache-dir", str(cache_dir))
    assert stems(dry) == ["scale_5", "scale_6"], dry.stdout + dry.stderr
    dry = run_cli("cache", "rm", "scale_rows", "--dry-run", "--json", "--cache-dir", str(cache_dir))
    assert stems(dry) == ["scale_rows_7", "scale_rows_8", "scale_rows_9"], dry.stdout + dry.stderr


def test_a_nonexistent_cache_dir_is_an_error(tmp_path):
    for action in ("ls", "stats", "verify", "clear"):
        proc = run_cli("cache", action, "--cache-dir", str(tmp_path / "nope"))
        assert proc.returncode == 2 and f"cache directory {tmp_path / 'nope'} does not exist" in proc.stderr, proc.stderr
    assert not (tmp_path / "nope").exists()


def test_prebuild_checks_every_argument_before_building(tmp_path):
    target = tmp_path / "prebuilt"
    good = {"args": ["scale", "44"], "cpp_files": [str(KERNELS / "scale_cpu.h")], "cpp_wrappers": [["scale", "scale<44>"]]}
    spec_file = tmp_path / "specs.json"
    cases = [
        (["--ops", "norm", "--arch", "sm_90a,sm_9x"], "--arch: invalid CUDA architecture 'sm_9x'"),
        (["--ops", "norm", "--dtypes", "int8", "--arch", "sm_90a"], "--dtypes: the norm family is built for float16, bfloat16, float32"),
        (["--ops", "nonesuch", "--arch", "sm_90a"], "--ops: unknown kernel family or op nonesuch"),
        (["--ops", "rmsnorm,nonesuch,nor_m", "--arch", "sm_90a"], "--ops: unknown kernel families or ops nonesuch, nor_m (did you mean norm?);"),
        (["--ops", "RMSNorm", "--arch", "sm_90a"], "--ops: unknown kernel family or op RMSNorm (did you mean rmsnorm?); the families: norm,"),
        (["--ops", "all,rmsnorm", "--arch", "sm_90a"], "--ops: 'all' means every family: give it alone"),
        (["--ops", "rotary_embedding", "--dtypes", "int8", "--arch", "sm_90a"], "--dtypes: the rope family is built for float16, bfloat16, float32, not int8"),
        (["--ops", "add_constant", "--constants", "99999999999", "--arch", "sm_90a"],
         "--constants: add_constant(): constant must be an int in the int32 range, got 99999999999"),
        (["--ops", "add_constant", "--arch", "sm_90a"], "--ops add_constant: is built once per constant: add --constants"),
        (["--ops", "norm", "--constants", "1", "--arch", "sm_90a"], "--constants: applies only to add_constant"),
        (["--ops", "add_constant", "--constants", "one", "--arch", "sm_90a"], "--constants: not an integer: 'one'"),
        (["--spec-file", str(spec_file)], f"--spec-file {spec_file}: entry 1 (bad_1): cpp_wrappers: export name '1x' is not a C identifier"),
    ]
    spec_file.write_text(json.dumps([good, dict(good, args=["bad", "1"], cpp_wrappers=[["1x", "scale<1>"]])]))
    for args, message in cases:
        proc = run_cli("prebuild", *args, "--cache-dir", str(target))
        assert proc.returncode == 2 and f"jitkern prebuild: {message}" in proc.stderr, (args, proc.stderr)
        assert not target.exists(), args  # nothing built, not even the cache directory
    spec_file.write_text(json.dumps([good, dict(good, args=["typo"], cpp_wraper=[])]))
    proc = run_cli("prebuild", "--spec-file", str(spec_file), "--cache-dir", str(target))
    assert proc.returncode == 2 and f"--spec-file {spec_file}: entry 1 (typo): " in proc.stderr and "cpp_wraper" in proc.stderr
    spec_file.write_text("[{")
    proc = run_cli("prebuild", "--spec-file", str(spec_file), "--cache-dir", str(target))
    assert proc.returncode == 2 and f"--spec-file {spec_file}: " in proc.stderr and not target.exists()


def test_prebuild_checks_its_output_directories_and_type_options_before_building(tmp_path):
    """--wheel and --cache-dir that cannot be directories, and --dtypes or --constants that no --ops family takes,
    end the command with one line naming the option (status 2, as argparse's errors) before anything is built."""
    spec_file, a_file = tmp_path / "specs.json", tmp_path / "a-file"
    spec_file.write_text(json.dumps([{"args": ["scale", "45"], "cpp_files": [str(KERNELS / "scale_cpu.h")], "cpp_wrappers": [["scale", "scale<45>"]]}]))
    a_file.write_text("")
    target = tmp_path / "cache"
    cases = [(["--wheel", str(a_file)], f"--wheel {a_file}: {a_file} is not a directory"),
             (["--wheel", str(a_file / "dist")], f"--wheel {a_file / 'dist'}: {a_file} is not a directory"),
             (["--cache-dir", str(a_file)], f"--cache-dir {a_file}: {a_file} is not a directory"),
             (["--cache-dir", str(a_file / "sub")], f"--cache-dir {a_file / 'sub'}: {a_file} is not a directory"),
             (["--dtypes", "float16"], "--dtypes: applies only to the "),
             (["--constants", "1"], "--constants: applies only to add_constant; add it to --ops")]
    for args, message in cases:
        proc = run_cli("prebuild", "--spec-file", str(spec_file), *args, env={"JITKERN_CACHE_DIR": str(target)})
        assert proc.returncode == 2 and proc.stderr.startswith(f"jitkern prebuild: {message}"), (args, proc.stderr)
        assert len(proc.stderr.splitlines()) == 1 and proc.stdout == "" and not target.exists(), (args, proc.stdout, proc.stderr)


def test_prebuild_ops_all_says_why_add_constant_is_left_out(tmp_path):
    """Without --constants, `--ops all` builds every family but add_constant and says so; with them it
    builds add_constant too (the count says it; no CUDA compiler is needed to plan them)."""
    env = {"CUDA_HOME": str(tmp_path / "no-cuda")}  # every CUDA build fails at once: only the plan is looked at
    without = run_cli("prebuild", "--ops", "all", "--arch", "sm_90a", "--cache-dir", str(tmp_path / "a"), env=env)
    assert "add_constant is built once per constant, so it is left out: add --constants" in without.stderr, without.stderr
    with_constants = run_cli("prebuild", "--ops", "all", "--constants", "1,5", "--arch", "sm_90a", "--cache-dir", str(tmp_path / "b"), env=env)
    count = lambda proc: int(proc.stdout.split("prebuilding ")[1].split()[0])  # noqa: E731
    assert count(with_constants) == count(without) + 2 and "FAILED add_constant_1 sm_90a" in with_constants.stdout, with_constants.stdout


def test_prebuild_ops_takes_op_names(tmp_path):
    """--ops takes single ops beside families: an op builds only its own modules, and a module two names
    (or two --arch entries) share is built once (no CUDA compiler is needed to plan them)."""
    env = {"CUDA_HOME": str(tmp_path / "no-cuda")}  # every CUDA build fails at once: only the plan is looked at

    def planned(ops, cache, arch="sm_90a", dtypes=("--dtypes", "bfloat16")):
        proc = run_cli("prebuild", "--ops", ops, *dtypes, "--arch", arch, "--cache-dir", str(tmp_path / cache), env=env)
        assert proc.returncode == 1 and "prebuilding " in proc.stdout, proc.stderr
        return sorted(line.split()[1] for line in proc.stdout.splitlines() if line.strip().startswith("FAILED"))

    assert planned("rmsnorm,per_token_quant_fp8,store_cache", "a") == ["kv_rows_store_cache", "norm_rmsnorm_bf16_t", "quant_per_token_quant_bf16_t"]
    norm = planned("norm", "b")
    assert len(norm) == 4 and "norm_rmsnorm_bf16_t" in norm
    assert planned("rmsnorm,norm,fused_add_rmsnorm", "c") == norm
    assert planned("concat_mla_k,concat_mla_absorb_q", "d", arch="sm_90a,sm_90a", dtypes=()) == ["kv_rows_concat_mla"]


def test_prebuild_reads_specs_without_torch_only_as_the_command(tmp_path):
    """The `jitkern` command's own process reads the op specs without importing torch (seconds on a GPU
    host); a program that calls cli.main() (whatever its argv) imports torch as usual, so its ops keep it.
    The stand-in torch records each import attempt and then fails as a missing torch would."""
    fake = tmp_path / "site" / "torch"
    fake.mkdir(parents=True)
    attempts = tmp_path / "attempts"
    (fake / "__init__.py").write_text(f"open({str(attempts)!r}, 'a').write('x')\nraise ImportError('stand-in torch')\n")
    env = dict(os.environ, PYTHONPATH=str(tmp_path / "site") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    argv = ["prebuild", "--ops", "no_such_family", "--arch", "sm_90a"]
    command = subprocess.run([sys.executable, "-m", "jitkern", *argv], capture_output=True, text=True, env=env, timeout=120)
    assert command.returncode == 2 and "no_such_family" in command.stderr, command.stderr
    assert not attempts.exists(), "the command imported torch"
    program = f"import sys\nsys.argv = ['jitkern', *{argv!r}]\nfrom jitkern import cli\nassert cli.main() == 2\n"
    out = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert attempts.exists(), "a program's jitkern.ops must import torch as usual"


def compile_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith("compiling ")]


def test_force_rebuild_compiles_the_named_module_once(cache_dir, caplog, monkeypatch):
    forced, other = scale_spec(41), scale_spec(42)
    forced.build(), other.build()
    monkeypatch.setenv("JITKERN_FORCE_REBUILD", "scale_41")
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="jitkern"):
        forced.build(), other.build(), forced.build()  # once per process: the second build of scale_41 is served
    assert compile_lines(caplog) == ["compiling scale_41 (rebuilding: JITKERN_FORCE_REBUILD names it) ..."], compile_lines(caplog)
    check_scale(forced.load(), 41)
    monkeypatch.setenv("JITKERN_ON_MISS", "error")  # strict mode never compiles: the switch is ignored
    monkeypatch.setenv("JITKERN_FORCE_REBUILD", "all")
    check_scale(scale_spec(42).load(), 42)


def test_a_rebuild_names_the_dependency_that_changed(cache_dir, tmp_path, caplog):
    header, source = tmp_path / "dep_value.h", tmp_path / "dep_user.h"
    source.write_text('#include "dep_value.h"\ninline int64_t dep_value() { return DEP_VALUE; }\n')
    spec = jitkern.JitSpec("dep_user", cpp_files=[str(source)], cpp_wrappers=[("value", "dep_value")])
    for value in (1, 22):
        header.write_text(f"#include <cstdint>\n#define DEP_VALUE {value}\n")
        past = time.time() - 30 + value  # settled before the compile starts (src/engine/build.cc), and a new mtime each time
        os.utime(header, (past, past))
        os.utime(source, (past, past))
        time.sleep(0.05)  # the status change too (a change within 10 ms of the compile's start counts as during it)
        with caplog.at_level(logging.INFO, logger="jitkern"):
            spec.build()
    assert compile_lines(caplog) == ["compiling dep_user ...",
                                     f"compiling dep_user (rebuilding: a file it was built from changed: {header} changed) ..."], compile_lines(caplog)


FAKE_TVM_FFI = """
#include <stdint.h>
typedef struct { uint32_t major, minor, patch; } TVMFFIVersion;
void TVMFFIGetVersion(TVMFFIVersion* v) { v->major = 0; v->minor = 2; v->patch = 0; }
"""


@pytest.mark.tvm_ffi
def test_a_tvm_ffi_of_another_c_abi_is_refused_at_load(tmp_path):
    """The engine was built against tvm-ffi 0.1's C ABI: a libtvm_ffi speaking 0.2 is an ImportError naming both."""
    (tmp_path / "fake.c").write_text(FAKE_TVM_FFI)
    subprocess.run([shutil.which("cc") or "c++", "-shared", "-fPIC", "-x", "c", "-o", str(tmp_path / "libfake.so"), str(tmp_path / "fake.c")],
                   check=True)
    code = f"import ctypes; ctypes.CDLL({str(tmp_path / 'libfake.so')!r}, mode=ctypes.RTLD_GLOBAL); import jitkern._engine"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "ImportError" in proc.stderr, proc.stderr[-2000:]
    assert re.search(r"speaks C ABI 0\.2\.0, but jitkern \S+ was built against C ABI 0\.1\.\d+ \(major\.minor must match\)", proc.stderr), proc.stderr
    assert subprocess.run([sys.executable, "-c", "import jitkern._engine"], timeout=120).returncode == 0
