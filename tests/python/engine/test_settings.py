"""Settings: one reader that validates every JITKERN_* variable (strict booleans, bounded numbers, paths
made absolute with ~ expanded), `jitkern config` (effective values, origins, invalid and unknown
variables, --json) and `jitkern doctor` (settings, writable directories, prebuilt layers, strict mode).
Each test runs the real console script or a fresh interpreter."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import KERNELS, child_env

SETTINGS = ("JITKERN_CACHE_DIR", "JITKERN_LOCK_DIR", "JITKERN_PREBUILT_DIRS", "JITKERN_ON_MISS", "JITKERN_VERBOSE", "JITKERN_QUIET")

# Builds and calls a C++ module (scale<3>) in a fresh interpreter; prints RESULT or ERROR <type> <message>.
LOADER = f"""
import sys, numpy as np, jitkern
spec = jitkern.JitSpec("settings_scale", "3", cpp_files=["{KERNELS / 'scale_cpu.h'}"], cpp_wrappers=[("f", "scale<3>")])
try:
    m = spec.load()
except Exception as e:
    print("ERROR", type(e).__name__, str(e).splitlines()[0]); sys.exit(0)
a = np.arange(4, dtype=np.float32); out = np.zeros_like(a); m.f(out, a); print("RESULT", out[1])
"""


def env_with(**values) -> dict:
    return child_env(SETTINGS, **values)


def run(argv, env, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, env=env, cwd=cwd, timeout=300)


def cli(*args, env, cwd=None) -> subprocess.CompletedProcess:
    return run([sys.executable, "-m", "jitkern", *args], env, cwd)


def load(env, cwd=None) -> str:
    proc = run([sys.executable, "-c", LOADER], env, cwd)
    assert proc.returncode == 0, proc.stderr
    return [line for line in proc.stdout.splitlines() if line.startswith(("RESULT", "ERROR"))][-1]


def test_a_relative_cache_directory_is_taken_from_the_working_directory(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    assert load(env_with(JITKERN_CACHE_DIR="relative-cache"), cwd=work) == "RESULT 3.0"
    assert any((work / "relative-cache").glob("settings_scale_3-*/manifest")), "the module is cached under the working directory"
    assert load(env_with(JITKERN_CACHE_DIR="relative-cache", JITKERN_ON_MISS="error"), cwd=work) == "RESULT 3.0"
    code = LOADER.split("try:")[0] + "print('PATH', spec.build())"
    path = run([sys.executable, "-c", code], env_with(JITKERN_CACHE_DIR="relative-cache"), cwd=work).stdout.split("PATH ")[-1].strip()
    assert path.startswith(str(work / "relative-cache") + "/"), f"the library's path must not depend on the working directory: {path}"


def test_a_tilde_in_a_path_setting_is_the_home_directory(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    work = tmp_path / "work"
    work.mkdir()
    assert load(env_with(HOME=home, JITKERN_CACHE_DIR="~/jk"), cwd=work) == "RESULT 3.0"
    assert any((home / "jk").glob("settings_scale_3-*/manifest"))
    assert not (work / "~").exists(), "~ must not become a literal directory"


@pytest.mark.parametrize("value,verbose", [("off", False), ("OFF", False), ("no", False), ("0", False), ("false", False),
                                           ("On", True), ("YES", True), ("true", True), ("1", True)])
def test_booleans_accept_the_usual_spellings(tmp_path, value, verbose):
    proc = run([sys.executable, "-c", LOADER], env_with(JITKERN_CACHE_DIR=tmp_path / "c", JITKERN_VERBOSE=value))
    assert "RESULT 3.0" in proc.stdout, proc.stdout + proc.stderr
    commands_logged = " -o " in proc.stderr  # a compiler command line is logged only when verbose
    assert commands_logged == verbose, f"JITKERN_VERBOSE={value}: {proc.stderr[-2000:]}"


@pytest.mark.parametrize("setting", ["JITKERN_VERBOSE=maybe", "JITKERN_RETRY_FAILED=2", "JITKERN_NVCC_PIPELINE=enabled",
                                     "JITKERN_COMPILE_TIMEOUT=-5", "JITKERN_ON_MISS=never"])
def test_an_invalid_value_is_a_value_error_naming_the_variable(tmp_path, setting):
    name, value = setting.split("=")
    line = load(env_with(JITKERN_CACHE_DIR=tmp_path / "c", **{name: value}))
    assert line.startswith("ERROR ValueError") and f"{name}='{value}'" in line, line
    assert not (tmp_path / "c").exists(), "nothing is built with an invalid setting"


def test_config_shows_effective_values_origins_and_problems(tmp_path):
    home_unset = env_with(HOME=None, JITKERN_CACHE_DIR=None)
    report = json.loads(cli("config", "--json", env=home_unset).stdout)
    effective = {s["name"]: s for s in report["settings"]}
    assert effective["JITKERN_CACHE_DIR"]["effective"] == f"/tmp/jitkern-{os.geteuid()}/.cache/jitkern"
    assert effective["JITKERN_CACHE_DIR"]["value"] is None and effective["JITKERN_CACHE_DIR"]["source"] == "default"
    assert effective["JITKERN_LOCK_DIR"]["effective"] == effective["JITKERN_CACHE_DIR"]["effective"] + "/locks"
    assert effective["JITKERN_ON_MISS"]["effective"] == "compile" and effective["JITKERN_QUIET"]["effective"] == "off"

    ok = cli("config", env=env_with(JITKERN_CACHE_DIR="rel", JITKERN_VERBOSE="on"), cwd=tmp_path)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert f"JITKERN_CACHE_DIR={tmp_path}/rel  (from the environment, set as 'rel')" in ok.stdout
    assert "JITKERN_VERBOSE=on  (from the environment)" in ok.stdout

    bad = cli("config", env=env_with(JITKERN_VERBOSE="maybe", JITKERN_CAHCE_DIR="/x"))
    assert bad.returncode == 1
    assert "INVALID: JITKERN_VERBOSE='maybe': expected 1, true, yes, on or 0, false, no, off" in bad.stdout, bad.stdout
    assert "JITKERN_CAHCE_DIR (did you mean JITKERN_CACHE_DIR?): not a jitkern setting" in bad.stdout
    report = json.loads(cli("config", "--json", env=env_with(JITKERN_CAHCE_DIR="/x")).stdout)
    assert report["unknown"] == ["JITKERN_CAHCE_DIR (did you mean JITKERN_CACHE_DIR?)"]


EFFECTIVE = "import jitkern._engine as e\ntry:\n    print(repr(e.effective('JITKERN_CUDA_ARCH')))\nexcept ValueError as x:\n    print('ValueError', x)\n"


@pytest.mark.parametrize("value, shown", [(None, "''"), ("sm_100a", "'sm_100a'"), ("hopper", "ValueError jitkern: invalid CUDA architecture 'hopper'")])
def test_python_reads_a_setting_as_the_engine_applies_it(value, shown):
    proc = subprocess.run([sys.executable, "-c", EFFECTIVE], env=env_with(JITKERN_CUDA_ARCH=value), capture_output=True, text=True)
    assert proc.stdout.startswith(shown), proc.stdout + proc.stderr


def doctor(env) -> tuple[int, dict]:
    proc = cli("doctor", "--json", env=env)
    return proc.returncode, {c["what"]: c for c in json.loads(proc.stdout)["checks"]}


def test_doctor_fails_on_an_invalid_setting_and_an_untrusted_prebuilt_cache(tmp_path):
    rc, checks = doctor(env_with(JITKERN_CACHE_DIR=tmp_path / "c", JITKERN_ON_MISS="sometimes"))
    assert rc == 1 and checks["JITKERN_ON_MISS"]["status"] == "FAIL", checks
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    rc, checks = doctor(env_with(JITKERN_CACHE_DIR=tmp_path / "c", JITKERN_PREBUILT_DIRS=shared))
    assert rc == 1 and checks["prebuilt cache"]["status"] == "FAIL" and "writable" in checks["prebuilt cache"]["detail"], checks


@pytest.mark.toolchain
def test_doctor_builds_the_way_the_ops_build(tmp_path):
    """With a CUDA target, the doctor's tiny builds include one with host_without_nvcc, as every op builds."""
    rc, checks = doctor(env_with(JITKERN_CACHE_DIR=tmp_path / "c", JITKERN_CUDA_ARCH="sm_90a"))
    assert rc == 0, checks
    for build in ("C++ build", "CUDA build", "CUDA host pass build", "CUDA through NVRTC build"):
        assert checks[build]["status"] == "ok" and "compiled" in checks[build]["detail"], checks


def test_doctor_builds_through_the_real_cache_then_finds_it_there(tmp_path):
    env = env_with(JITKERN_CACHE_DIR=tmp_path / "c", JITKERN_CUDA_ARCH=None)
    rc, checks = doctor(env)
    assert rc == 0 and "compiled" in checks["C++ build"]["detail"], checks
    assert str(tmp_path / "c") in checks["C++ build"]["detail"], "the tiny build uses the configured cache"
    rc, checks = doctor(env)
    assert rc == 0 and "found in the cache" in checks["C++ build"]["detail"], checks


def test_doctor_in_strict_mode_reports_the_serving_setup_instead_of_compiling(tmp_path):
    rc, checks = doctor(env_with(JITKERN_CACHE_DIR=tmp_path / "c", JITKERN_ON_MISS="error"))
    assert rc == 0, checks
    assert "serving" in checks and "C++ build" not in checks
    assert not (tmp_path / "c").exists(), "strict mode builds nothing"


def test_doctor_fails_on_a_cache_it_cannot_write(tmp_path):
    if os.geteuid() != 0 or subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode != 0:
        pytest.skip("NOT RUN: needs root and `unshare -m` for a read-only bind mount")
    cache = tmp_path / "ro-cache"
    cache.mkdir(mode=0o700)
    script = f"mount --bind -o ro {cache} {cache} && exec {sys.executable} -m jitkern doctor --json"
    proc = run(["unshare", "-m", "sh", "-c", script], env_with(JITKERN_CACHE_DIR=cache))
    checks = {c["what"]: c for c in json.loads(proc.stdout)["checks"]}
    assert proc.returncode == 1 and checks["cache directory"]["status"] == "FAIL" and "not writable" in checks["cache directory"]["detail"], checks
    assert "JITKERN_CACHE_DIR" in checks["cache directory"]["fix"]
    strict = run(["unshare", "-m", "sh", "-c", script], env_with(JITKERN_CACHE_DIR=cache, JITKERN_ON_MISS="error"))
    assert strict.returncode == 0, strict.stdout


def test_a_relative_build_directory_is_taken_from_the_working_directory(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    code = LOADER.replace('cpp_wrappers=[("f", "scale<3>")])', 'cpp_wrappers=[("f", "scale<3>")], build_directory="own-cache")')
    proc = run([sys.executable, "-c", code], env_with(JITKERN_CACHE_DIR=tmp_path / "unused"), cwd=work)
    assert "RESULT 3.0" in proc.stdout, proc.stdout + proc.stderr
    assert any((work / "own-cache").glob("settings_scale_3-*/manifest"))
