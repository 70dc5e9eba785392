"""Prebuilt modules shipped as a pip wheel (`jitkern prebuild --wheel`): a wheel of two C++ modules and
one compile-only CUDA module (sm_90a) is installed with pip into a fresh directory and serves strict
loads from there, with no compiler on PATH; a missing module names the installed wheels that lack it, or
the wheel that would hold it; a wheel for another jitkern is left out with a warning; `jitkern cache ls`
and `doctor` show it; a wheel of other modules has another version. CPU only."""

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import jitkern
from conftest import REPO, child_env

slow = pytest.mark.slow  # compiles three modules and installs wheels with pip

CPU_SPEC = {"cpp_files": ["add_constant_cpu.h"], "cpp_wrappers": [["add", "add_constant_cpu<{c}>"]]}
CUDA_SPEC = {"cuda_files": ["add_constant.cuh"], "cuda_wrappers": [["add_constant", "add_constant<{c}>", "out, src"]]}


def spec_fields(base: dict, name: str, c: int) -> dict:
    return {"args": [name, str(c)], **{k: [[x.format(c=c) for x in w] if isinstance(w, list) else w for w in v] for k, v in base.items()}}


SPECS = [spec_fields(CPU_SPEC, "add_constant_cpu", 5), spec_fields(CPU_SPEC, "add_constant_cpu", 7),
         spec_fields(CUDA_SPEC, "add_constant", 3)]

# Serves every module of the wheel, strictly: argv[1] the spec fields (JSON), argv[2] where the wheel is installed.
SERVE = """
import json, sys
import numpy as np, jitkern
site = sys.argv[2]
for fields in json.loads(sys.argv[1]):
    args = fields.pop("args")
    spec = jitkern.JitSpec(*args, **fields, **({"cuda_arch": "sm_90a"} if "cuda_files" in fields else {}))
    path = spec.build()
    assert path.startswith(site + "/"), (args, path)
    if "cpp_files" in fields:  # a CUDA module needs no GPU to be found; calling one does
        m = spec.load()
        src = np.arange(4, dtype=np.int32); dst = np.zeros_like(src); m.add(dst, src)
        assert (dst == src + int(args[1])).all(), dst
    print("SERVED", "_".join(args), path)
"""
MISS = """
import sys, jitkern
fields = dict(cuda_files=["add_constant.cuh"], cuda_wrappers=[("add_constant", "add_constant<3>")], cuda_arch=sys.argv[1]) \\
    if sys.argv[1] != "host" else dict(cpp_files=["add_constant_cpu.h"], cpp_wrappers=[("add", "add_constant_cpu<9>")])
try:
    jitkern.JitSpec("missing", "9", **fields).build()
except jitkern.CacheMissError as e:
    print("MISS", e)
"""


def snapshot(tree: Path) -> dict:
    return {str(p.relative_to(tree)): (p.stat().st_mtime_ns, p.read_bytes()) for p in sorted(tree.rglob("*"))
            if p.is_file() and "__pycache__" not in p.parts}


def run(cmd, **kw):
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, **kw)
    assert proc.returncode == 0, f"{' '.join(map(str, cmd))}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """(wheel, prebuild's output): the wheel of SPECS for sm_90a."""
    tmp = tmp_path_factory.mktemp("wheel")
    (tmp / "specs.json").write_text(json.dumps(SPECS))
    env = child_env(("JITKERN_PREBUILT_DIRS", "JITKERN_ON_MISS"), JITKERN_CACHE_DIR=tmp / "build-cache")
    out = run([sys.executable, "-m", "jitkern", "prebuild", "--wheel", str(tmp / "dist"), "--spec-file", str(tmp / "specs.json"),
               "--arch", "sm_90a", "-j", "2"], env=env, cwd="/").stdout
    (wheel,) = (tmp / "dist").glob("*.whl")
    return wheel, out


@pytest.fixture(scope="module")
def site(built, tmp_path_factory):
    """The wheel installed by pip into a fresh directory (as into a serving image's site-packages)."""
    target = tmp_path_factory.mktemp("serving") / "site"
    run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target", str(target), str(built[0])])
    return target


def serving_env(site: Path, tmp: Path, **extra) -> dict:
    """No compiler anywhere a build could find one, strict, no JITKERN_PREBUILT_DIRS: the wheel is found by itself."""
    (tmp / "empty-bin").mkdir(exist_ok=True)
    return child_env(("CUDA_HOME", "CUDA_PATH", "CXX", "JITKERN_PREBUILT_DIRS"), PYTHONPATH=site, PATH=tmp / "empty-bin",
                     JITKERN_ON_MISS="error", JITKERN_CACHE_DIR=tmp / "serving-cache", **extra)


@slow
def test_wheel_name_version_tags_and_contents_say_what_it_holds(built):
    wheel, out = built
    m = re.fullmatch(r"jitkern_prebuilt_sm90a-(.+)-py3-none-linux_(\w+)\.whl", wheel.name)
    assert m, wheel.name
    assert re.fullmatch(re.escape(jitkern.__version__) + r"\+cu\d+\.\d{14}\.[0-9a-f]{12}", m.group(1)), m.group(1)
    assert f"wrote {wheel} (3 modules" in out, out
    z = zipfile.ZipFile(wheel)
    names = z.namelist()
    layer = json.loads(z.read("jitkern_prebuilt/sm90a/layer.json"))
    assert layer["jitkern"] == jitkern.__version__ and layer["arch"] == "sm_90a" and len(layer["modules"]) == 3, layer
    assert f"cu{layer['cuda_major']}" in m.group(1)
    metadata = z.read(f"jitkern_prebuilt_sm90a-{m.group(1)}.dist-info/METADATA").decode()
    assert f"Requires-Dist: jitkern=={jitkern.__version__}" in metadata, metadata
    assert sum(n.endswith(".so") for n in names) == 3 and sum(n.endswith("/manifest") for n in names) == 3, names
    assert not any("/build-" in n or n.endswith(("failed", "failed.log")) or ".tmp." in n for n in names), names
    # relocatable: no record names the build machine's directories (the build cache, the checkout); the
    # libraries keep their sources' paths only in the file:line text of error messages
    for n in names:
        data = z.read(n) if not n.endswith(".so") else b""
        for there in (str(wheel.parent.parent), str(REPO)):
            assert there.encode() not in data, (n, there)


@slow
def test_installed_wheel_serves_strict_loads_without_a_compiler(built, site, tmp_path):
    env = serving_env(site, tmp_path)
    before = snapshot(site)
    out = run([sys.executable, "-c", SERVE, json.dumps(SPECS), str(site)], env=env, cwd="/").stdout
    assert out.count("SERVED") == len(SPECS), out
    assert not (tmp_path / "serving-cache").exists(), "serving from the wheel writes no cache"
    assert snapshot(site) == before, "an installed wheel is never written"


@slow
@pytest.mark.parametrize("arch", ["host", "sm_100a"])
def test_a_missing_module_names_the_wheel_that_would_hold_it(site, tmp_path, arch):
    out = run([sys.executable, "-c", MISS, arch], env=serving_env(site, tmp_path), cwd="/").stdout
    assert out.startswith("MISS"), out
    assert "jitkern-prebuilt-sm90a " in out and "(sm_90a): " + str(site) in out, out  # the wheel searched
    would = ("The installed prebuilt wheel jitkern-prebuilt-sm90a " if arch == "host"  # it holds host modules too
             else "A prebuilt wheel holding it: jitkern-prebuilt-sm100a (`jitkern prebuild --wheel DIR --arch sm_100a")
    assert would in out, out


@slow
def test_cache_ls_and_doctor_show_the_installed_wheel(site, tmp_path):
    env = serving_env(site, tmp_path)
    ls = run([sys.executable, "-m", "jitkern", "cache", "ls"], env=env, cwd="/").stdout
    assert re.search(r"jitkern-prebuilt-sm90a \S+ \(sm_90a\): \S+ \(prebuilt wheel, searched after JITKERN_PREBUILT_DIRS\) \(3 entries\)", ls), ls
    assert "add_constant_cpu_5" in ls and "add_constant_3" in ls, ls
    doctor = subprocess.run([sys.executable, "-m", "jitkern", "doctor"], env=env, cwd="/", capture_output=True, text=True).stdout
    assert re.search(r"\[ok  \] prebuilt wheel: jitkern-prebuilt-sm90a \S+ \(sm_90a\): \S+: trusted", doctor), doctor


@slow
def test_a_wheel_for_another_jitkern_is_left_out_with_a_warning(site, tmp_path):
    other = tmp_path / "site"
    shutil.copytree(site, other)
    layer_file = other / "jitkern_prebuilt" / "sm90a" / "layer.json"
    layer_file.write_text(layer_file.read_text().replace(f'"jitkern": "{jitkern.__version__}"', '"jitkern": "0.0.1"'))
    proc = subprocess.run([sys.executable, "-c", SERVE, json.dumps(SPECS[:1]), str(other)], env=serving_env(other, tmp_path), cwd="/",
                          capture_output=True, text=True)
    assert proc.returncode != 0 and "CacheMissError" in proc.stderr, proc.stderr[-2000:]
    assert "ignoring prebuilt wheel jitkern-prebuilt-sm90a" in proc.stderr and "built for jitkern 0.0.1" in proc.stderr, proc.stderr[-2000:]


@slow
def test_prebuild_force_compiles_again(built, tmp_path):
    """--force: every module compiled again although cached (the wheel's build cache holds them all)."""
    specs = tmp_path / "specs.json"
    specs.write_text(json.dumps(SPECS[:2]))
    cache = built[0].parent.parent / "build-cache"
    env = child_env(("JITKERN_PREBUILT_DIRS", "JITKERN_ON_MISS"), JITKERN_CACHE_DIR=cache)
    cmd = [sys.executable, "-m", "jitkern", "prebuild", "--spec-file", str(specs)]
    assert "0 built, 2 already cached" in run(cmd, env=env, cwd="/").stdout
    assert "2 built, 0 already cached" in run([*cmd, "--force"], env=env, cwd="/").stdout


REFUSED = """
import json, sys, jitkern
fields = json.loads(sys.argv[1])
try:
    jitkern.JitSpec(*fields.pop("args"), **fields).build()
    print("SERVED")
except jitkern.CacheMissError as e:
    print("MISS", e)
"""


@slow
def test_a_wheel_installed_under_umask_002_is_refused_saying_why_not_named_to_install(built, tmp_path):
    """pip under umask 002 leaves the wheel's directories group-writable: the layer is refused (anyone in the group
    could plant a library), and the miss says the wheel is installed but refused and how to reinstall it,
    instead of telling the operator to install it."""
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target", str(target), str(built[0])],
                   check=True, capture_output=True, preexec_fn=lambda: os.umask(0o002))
    out = run([sys.executable, "-c", REFUSED, json.dumps(SPECS[0])], env=serving_env(target, tmp_path), cwd="/").stdout
    assert out.startswith("MISS"), out
    assert "is installed but was refused" in out and "umask 022" in out, out
    assert "A prebuilt wheel holding it" not in out, out


def fake_entry(cache: Path, stem: str) -> Path:
    """A cache entry's files as a wheel takes them (contents do not matter to the writer)."""
    entry = cache / stem
    entry.mkdir(parents=True)
    library = entry / f"lib-{stem}.so"
    for f in (entry / "manifest", library, library.with_name(library.name + ".sha256")):
        f.write_text(stem)
    return library


def test_a_later_wheel_is_a_higher_version_and_replaces_only_this_jitkerns_older_ones(tmp_path, monkeypatch):
    """pip installs a wheel over an installed one (`pip install -U` from an index too) only when its version is
    higher: the local label holds the CUDA major, when the wheel was written (SOURCE_DATE_EPOCH where set) and a
    hash of its modules. Written into a directory, it is later than every wheel there of this jitkern, name, CUDA
    major and tag (a second later where one has its second or a later one), replaces those, and keeps the
    others (another jitkern's, another CUDA major's, a CUDA wheel where the toolkit's major is unknown)."""
    from packaging.version import Version

    from jitkern import wheels

    fill, rows = fake_entry(tmp_path, "fill_1-0123456789abcdef0123"), fake_entry(tmp_path, "fill_2-3210fedcba9876543210")
    written = {}
    for when, libs in ((1764900000, [fill]), (1764900001, [fill]), (1764900002, [fill, rows])):
        monkeypatch.setenv("SOURCE_DATE_EPOCH", str(when))
        written[when] = wheels.write(tmp_path / str(when), "sm_90a", libs, 13)[0]
    v = {when: Version(w.name.split("-")[1]) for when, w in written.items()}
    assert v[1764900000] < v[1764900001] < v[1764900002], v
    assert all(re.fullmatch(re.escape(jitkern.__version__) + r"\+cu13\.\d{14}\.[0-9a-f]{12}", str(x)) for x in v.values()), v
    assert str(v[1764900000]).split(".")[-1] == str(v[1764900001]).split(".")[-1] != str(v[1764900002]).split(".")[-1], "the modules' hash"
    assert zipfile.ZipFile(written[1764900000]).infolist()[0].date_time == (2025, 12, 5, 2, 0, 0), "zip dates: the version's time"
    dist = tmp_path / "dist"
    dist.mkdir()
    older, later = (Path(shutil.copy(written[w], dist)) for w in (1764900000, 1764900002))
    kept = [dist / older.name.replace(f"-{jitkern.__version__}+cu13.", f"-{jitkern.__version__}+cu12."),  # another CUDA major
            dist / older.name.replace(f"-{jitkern.__version__}+", "-0.0.9+")]  # another jitkern
    for k in kept:
        shutil.copy(older, k)
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1764900001")  # before `later`: written a second after it
    target, replaced = wheels.write(dist, "sm_90a", [fill], 13)
    assert Version(target.name.split("-")[1]) > v[1764900002] and replaced == sorted([older, later]), (target.name, replaced)
    assert not older.exists() and not later.exists() and all(k.exists() for k in kept) and target.exists()
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1764900001")  # the same second and modules again: the same wheel, rewritten
    assert wheels.write(dist, "sm_90a", [fill], 13) == (target, [])
    unknown = wheels.write(dist, "sm_90a", [fill, rows], None)[0]  # no CUDA major known: the +cu wheels are another's
    assert unknown.exists() and target.exists() and all(k.exists() for k in kept)
    host = wheels.write(tmp_path / "host", None, [fill], None)[0].name.split("-")[1]
    assert re.fullmatch(re.escape(jitkern.__version__) + r"\+\d{14}\.[0-9a-f]{12}", host) and str(Version(host)) == host, host
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "soon")
    with pytest.raises(ValueError, match="SOURCE_DATE_EPOCH must be seconds since 1970, got 'soon'"):
        wheels.write(tmp_path / "e", None, [fill], None)


def test_a_miss_names_the_installed_wheels_that_lack_the_module(monkeypatch):
    from jitkern import wheels

    monkeypatch.setattr(wheels, "_found", [wheels.Layer("jitkern-prebuilt-sm90a 0.1.0+cu13.0123456789ab", "/s/sm90a", "sm_90a"),
                                           wheels.Layer("jitkern-prebuilt-sm100a 0.0.9+cu13", "/s/sm100a", "sm_100a", "built for jitkern 0.0.9")])
    lacks = "The installed prebuilt wheel jitkern-prebuilt-sm90a 0.1.0+cu13.0123456789ab lacks it: build one with it (`jitkern prebuild --wheel DIR"
    assert wheels.miss_hint("jitkern: module 'fill_2' for sm_90a is not cached ...").startswith(f"\n{lacks} --arch sm_90a ...` with this module)")
    assert wheels.miss_hint("jitkern: module 'fill_2' is not cached ...").startswith(f"\n{lacks} ...` with this module)")
    # the sm_100a wheel is left out (another jitkern): none installed is searched for that target
    assert wheels.miss_hint("jitkern: module 'fill_2' for sm_100a is not cached ...") == (
        "\nA prebuilt wheel holding it: jitkern-prebuilt-sm100a (`jitkern prebuild --wheel DIR --arch sm_100a ...` with this module, "
        "then pip install it).")
