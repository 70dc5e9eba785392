"""Prebuilt modules as pip wheels: writing them (`jitkern prebuild --wheel`) and finding installed ones.

A wheel `jitkern-prebuilt-<arch>` (version `<jitkern version>+cu<CUDA major>.<UTC time written>.<content hash>`; `jitkern-prebuilt-host`
for host-only modules) holds one directory, `jitkern_prebuilt/<arch>/`, whose `cache/` directory is a prebuilt
layer (the engine's cache layout, docs/cache-store.md) and whose `layer.json` says what it was built for.
An installed wheel is such a directory on sys.path (found by its path, without importlib.metadata, whose
import alone costs a first load tens of milliseconds): a layer that loads search after
JITKERN_PREBUILT_DIRS, verified like any other and never written. A wheel built for another jitkern,
tvm-ffi or machine is left out with a warning (its modules' keys could not match anyway).
"""

from __future__ import annotations

import json
import logging
import os
import re
from pathlib import Path

from ._engine import PREBUILT_PACKAGE, prebuilt_packages

LAYER_FILE = "layer.json"
CACHE_DIR = "cache"
_FORMAT = 1

logger = logging.getLogger("jitkern")


def _arch_part(arch: str | None) -> str:
    return arch.replace("_", "") if arch else "host"


def distribution(arch: str | None) -> str:
    """The wheel's project name for a CUDA target (None: host-only modules), e.g. jitkern-prebuilt-sm90a."""
    return f"jitkern-prebuilt-{_arch_part(arch)}"


def package(arch: str | None) -> str:
    return f"{PREBUILT_PACKAGE}/{_arch_part(arch)}"


def version(cuda_major: int | None, libraries: list[Path], written: int) -> str:
    """jitkern's version with a local label: the CUDA major (as PyTorch's and FlashInfer's wheels), when the
    wheel was written (`written`, seconds since the epoch, as UTC digits: a later wheel is a higher version,
    which `pip install -U` takes) and a hash of the modules' entries and libraries (named by their keys)."""
    import hashlib
    import time

    from . import __version__

    names = "".join(sorted(f"{lib.parent.name}/{lib.name}\n" for lib in libraries))
    content = hashlib.sha256(names.encode()).hexdigest()[:12]
    return f"{__version__}+{f'cu{cuda_major}.' if cuda_major else ''}{time.strftime('%Y%m%d%H%M%S', time.gmtime(written))}.{content}"


def _written(wheel_version: str) -> int:
    """When a wheel of `version`'s form was written, as its UTC digits (0: a form without them)."""
    m = re.search(r"\+(?:cu\d+\.)?(\d{14})\.[0-9a-f]{12}$", wheel_version)
    return int(m.group(1)) if m else 0


def _machine() -> str:
    return os.uname().machine


# ---------------------------------------------------------------------------------------------- finding


class Layer:
    """An installed wheel's layer. A plain class: a dataclass compiles its methods from text at import,
    about a millisecond of the first load of a process with a wheel installed (which imports this module)."""

    __slots__ = ("label", "dir", "arch", "problem")

    def __init__(self, label: str, dir: str, arch: str | None, problem: str = "") -> None:
        self.label = label  # "jitkern-prebuilt-sm90a 0.1.0+cu13.0123456789ab"
        self.dir = dir  # the cache directory
        self.arch = arch
        self.problem = problem  # why it is left out ("" when it is searched)


_found: list[Layer] | None = None


def installed() -> list[Layer]:
    """Every installed prebuilt wheel (a jitkern_prebuilt/<arch> directory with a layer.json on sys.path; the first
    of a name, as an import would take), in name order; those left out carry `problem` (warned about once)."""
    global _found
    if _found is None:
        _found = _discover()
        for layer in _found:
            if layer.problem:
                logger.warning("ignoring prebuilt wheel %s: %s", layer.label, layer.problem)
    return _found


def _discover() -> list[Layer]:
    from . import __version__

    roots: dict[str, Path] = {}
    for top in prebuilt_packages():
        try:
            names = os.listdir(top)
        except OSError:
            continue
        for name in names:
            if name not in roots and os.path.isfile(os.path.join(top, name, LAYER_FILE)):
                roots[name] = Path(top).resolve() / name
    out = []
    for name, root in sorted(roots.items()):
        try:
            info = json.loads((root / LAYER_FILE).read_text())
        except (OSError, ValueError, RecursionError) as e:  # RecursionError: nested too deeply for json's parser
            out.append(Layer(name, str(root / CACHE_DIR), None, f"unreadable {root / LAYER_FILE}: {e}"))
            continue
        import tvm_ffi

        label = f"{info.get('distribution', name)} {info.get('version', '?')}"
        problem = ""
        if info.get("jitkern") != __version__:
            problem = f"built for jitkern {info.get('jitkern')}, this is jitkern {__version__}; install the wheel built with this jitkern"
        elif info.get("machine") != _machine():
            problem = f"built for {info.get('machine')} machines, this is {_machine()}"
        elif info.get("tvm_ffi") != tvm_ffi.__version__:
            problem = (f"built with apache-tvm-ffi {info.get('tvm_ffi')}, this process has {tvm_ffi.__version__} "
                       "(part of every module's key: none of its modules would match)")
        out.append(Layer(label, str(root / CACHE_DIR), info.get("arch"), problem))
    return out


def layers_text() -> str:
    """The usable wheels as the engine takes them: "label (arch)\\tdir" lines."""
    return "".join(f"{layer.label} ({layer.arch or 'host'})\t{layer.dir}\n" for layer in installed() if not layer.problem)


# The first line of the engine's CacheMissError (src/engine/build.cc, refuse_miss_if_strict) names a CUDA module's target.
_MISS_TARGET = r"^jitkern: module '[^']*' for (\w+) is not cached"


def miss_hint(message: str) -> str:
    """What a CacheMissError's message gains: why an installed wheel was not used (the engine refused its
    directory), else the installed wheels that lack the module, or the wheel that would hold it."""
    for layer in installed():
        refused = [line for line in message.splitlines() if layer.dir in line and "writable by" in line]
        if not layer.problem and refused:
            return (f"\nThe prebuilt wheel {layer.label} is installed but was refused ({refused[0].strip()}): pip installs with "
                    "the umask in force, and under umask 002 its directories are group-writable, so anyone in the group could "
                    "plant code there. Reinstall it under umask 022: (umask 022; pip install --force-reinstall --no-deps WHEEL).")
    m = re.match(_MISS_TARGET, message)
    arch = m.group(1) if m else None  # None: a host-only module, which goes into every wheel prebuild writes
    command = f"`jitkern prebuild --wheel DIR{f' --arch {arch}' if arch else ''} ...` with this module"
    lacking = [layer.label for layer in installed() if not layer.problem and (arch is None or layer.arch == arch)]
    if lacking:
        return (f"\nThe installed prebuilt wheel{'s' if len(lacking) > 1 else ''} {', '.join(lacking)} lack{'' if len(lacking) > 1 else 's'} "
                f"it: build one with it ({command}), then pip install that (a later wheel is a higher version: pip replaces the installed one).")
    return f"\nA prebuilt wheel holding it: {distribution(arch) if arch else 'any jitkern-prebuilt-* wheel built'} ({command}, then pip install it)."


# ---------------------------------------------------------------------------------------------- writing
# (its modules are imported where used: the first load of a process with a wheel installed imports this module)


def _record_hash(data: bytes) -> str:
    import base64
    import hashlib

    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def entry_files(library: Path) -> list[Path]:
    """What a layer needs of the cache entry holding `library` (the path a build returned): the manifest,
    the library and its hash record (no scratch, failure logs or superseded libraries)."""
    entry = library.parent
    return [entry / "manifest", library, library.with_name(library.name + ".sha256")]


def write(out_dir: Path, arch: str | None, libraries: list[Path], cuda_major: int | None) -> tuple[Path, list[Path]]:
    """Writes the wheel holding the cache entries of `libraries` (as prebuild returned them) for `arch`; removes
    the wheels of the same name and tag that it replaces in `out_dir` (of other versions: a `pip install DIR/<name>-*.whl`
    would be given both). Returns its path and those removed."""
    import calendar
    import stat
    import time
    import zipfile

    import tvm_ffi

    from . import __version__

    name, pkg, tag = distribution(arch), package(arch), f"py3-none-linux_{_machine()}"
    # this jitkern's wheels of this name, CUDA major and tag in out_dir: the one written is later than each
    label, sep = (f"{__version__}+cu{cuda_major}", ".") if cuda_major else (__version__, "+")
    ours = [p for p in out_dir.glob(f"{name.replace('-', '_')}-{label}*-{tag}.whl") if (v := p.name.split("-")[1]) == label
            or (v.startswith(label + sep) and (cuda_major or not v[len(label) + 1:].startswith("cu")))]
    try:
        when = int(float(os.environ.get("SOURCE_DATE_EPOCH") or time.time()))
    except ValueError:
        raise ValueError(f"SOURCE_DATE_EPOCH must be seconds since 1970, got {os.environ['SOURCE_DATE_EPOCH']!r}") from None
    latest = max((p.name.split("-")[1] for p in ours), key=_written, default=None)
    ver = version(cuda_major, libraries, when)
    if latest is not None and _written(latest) >= _written(ver):  # the latest's modules again: it, else a second after it
        when = calendar.timegm(time.strptime(str(_written(latest)), "%Y%m%d%H%M%S")) + (latest.rsplit(".", 1)[-1] != ver.rsplit(".", 1)[-1])
        ver = version(cuda_major, libraries, when)
    stems = sorted({lib.parent.name for lib in libraries})
    layer = {"format": _FORMAT, "distribution": name, "version": ver, "jitkern": __version__, "machine": _machine(), "arch": arch,
             "cuda_major": cuda_major, "tvm_ffi": tvm_ffi.__version__, "modules": stems}
    dist_info = f"{name.replace('-', '_')}-{ver}.dist-info"
    files: list[tuple[str, bytes]] = [  # (path in the wheel, contents)
        (f"{pkg}/__init__.py", f'"""Prebuilt jitkern modules for {arch or "the host"} (jitkern.wheels)."""\n'.encode()),
        (f"{pkg}/{LAYER_FILE}", (json.dumps(layer, indent=1) + "\n").encode())]
    for lib in sorted(libraries):
        files += [(f"{pkg}/{CACHE_DIR}/{lib.parent.name}/{f.name}", f.read_bytes()) for f in entry_files(lib)]
    summary = f"Prebuilt jitkern {__version__} kernel modules for {arch or 'the host'}"
    # pip refuses to pair it with another jitkern (the modules' keys hold jitkern's version).
    metadata = (f"Metadata-Version: 2.1\nName: {name}\nVersion: {ver}\nSummary: {summary}\nRequires-Python: >=3.10\n"
                f"Requires-Dist: jitkern=={__version__}\n")
    files += [(f"{dist_info}/METADATA", metadata.encode()),
              (f"{dist_info}/WHEEL", f"Wheel-Version: 1.0\nGenerator: jitkern {__version__}\nRoot-Is-Purelib: false\nTag: {tag}\n".encode()),
              (f"{dist_info}/top_level.txt", f"{PREBUILT_PACKAGE}\n".encode())]
    record = "".join(f"{path},{_record_hash(data)},{len(data)}\n" for path, data in files) + f"{dist_info}/RECORD,,\n"
    files.append((f"{dist_info}/RECORD", record.encode()))
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / f"{name.replace('-', '_')}-{ver}-{tag}.whl"
    partial = target.with_name(target.name + f".tmp.{os.getpid()}")
    stamp = time.gmtime(max(when, 315532800))[:6]  # the version's time (zip dates start in 1980)
    with zipfile.ZipFile(partial, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as z:
        for path, data in files:
            info = zipfile.ZipInfo(path, stamp)
            info.external_attr = (0o644 | stat.S_IFREG) << 16  # pip applies the installer's umask to directories: 022 is needed (docs/cache-store.md)
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)
    os.replace(partial, target)
    replaced = sorted(p for p in ours if p != target and _written(p.name.split("-")[1]) < _written(ver))  # two runs at once leave the later
    for p in replaced:
        p.unlink(missing_ok=True)
    return target, replaced


def cuda_major_of_toolkit() -> int | None:
    """The CUDA major version of the toolkit builds use (nvcc's "release 13.0"), None without one."""
    from ._engine import find_compiler

    try:
        text = find_compiler(True)[1]
    except RuntimeError:
        return None
    m = re.search(r"release (\d+)\.", text)
    return int(m.group(1)) if m else None
