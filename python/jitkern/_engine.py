"""ctypes binding to the C++ engine (lib/libjitkern_engine.so): the C ABI that src/include/jitkern/engine_abi.h
declares (tests/python/engine/test_engine_abi.py checks this binding against it).

The only Python code that knows the request's wire format: fields "<key> <byte length>:<value>\\n".
"""

from __future__ import annotations

import ctypes
import json
import logging
import os
import sys
from pathlib import Path
from typing import Iterable

PACKAGE_DIR = Path(__file__).resolve().parent
LIBRARY_PATH = PACKAGE_DIR / "lib" / "libjitkern_engine.so"


class BuildError(RuntimeError):
    """A kernel module failed to compile; the message leads with the module and the first error, then
    the compiler's output, the commands and where the full log is kept."""


class CacheMissError(BuildError):
    """The module is not cached and JITKERN_ON_MISS=error forbids compiling it."""


def _preload_tvm_ffi() -> None:
    """Loads tvm-ffi's library as its package does, but not the package (which imports torch where it is
    installed): the engine finds tvm-ffi's headers and library beside the loaded library from its first
    call on. A tvm-ffi laid out otherwise is found once its package is imported."""
    import importlib.util

    spec = importlib.util.find_spec("tvm_ffi")
    for location in (spec.submodule_search_locations or []) if spec is not None else []:
        path = Path(location) / "lib" / "libtvm_ffi.so"
        if path.is_file():
            try:
                ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
            except OSError:
                pass
            return


def _load() -> ctypes.CDLL:
    if not LIBRARY_PATH.exists():
        raise ImportError(f"jitkern's engine library is missing ({LIBRARY_PATH}); install the package with `pip install .`")
    _preload_tvm_ffi()
    lib = ctypes.CDLL(str(LIBRARY_PATH))
    error = ctypes.c_void_p()
    lib.jitkern_check_tvm_ffi.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
    if lib.jitkern_check_tvm_ffi(ctypes.byref(error)) != 0:  # the loaded tvm-ffi speaks another C ABI than the engine
        raise ImportError(ctypes.string_at(error.value).decode())
    lib.jitkern_build.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int, ctypes.POINTER(ctypes.c_void_p),
                                  ctypes.POINTER(ctypes.c_void_p)]
    lib.jitkern_build.restype = ctypes.c_int
    lib.jitkern_settings_markdown.restype = ctypes.c_void_p
    lib.jitkern_config.restype = ctypes.c_void_p
    lib.jitkern_free.argtypes = [ctypes.c_void_p]
    lib.jitkern_free.restype = None
    lib.jitkern_version.restype = ctypes.c_char_p
    lib.jitkern_cache.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_void_p)]
    lib.jitkern_cache.restype = ctypes.c_int
    lib.jitkern_check_request.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_void_p)]
    lib.jitkern_check_request.restype = ctypes.c_int
    lib.jitkern_check_arch.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)]
    lib.jitkern_check_arch.restype = ctypes.c_int
    lib.jitkern_arch_for_capability.argtypes = [ctypes.c_int, ctypes.c_int]
    lib.jitkern_arch_for_capability.restype = ctypes.c_void_p
    lib.jitkern_setting_flag.argtypes = [ctypes.c_char_p]
    lib.jitkern_setting_flag.restype = ctypes.c_int
    lib.jitkern_usable_cpus.restype = ctypes.c_int
    lib.jitkern_find_compiler.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_void_p)]
    lib.jitkern_find_compiler.restype = ctypes.c_int
    lib.jitkern_set_package_layers.argtypes = [ctypes.c_char_p]
    lib.jitkern_set_package_layers.restype = None
    lib.jitkern_set_log_sink.argtypes = [_LOG_SINK]
    lib.jitkern_set_log_sink.restype = None
    return lib


# The engine's messages go to the `jitkern` logger: compile start and finish (with each phase's time)
# at INFO, compiler commands at DEBUG. Unless the application set the logger's level, it is INFO
# (DEBUG with JITKERN_VERBOSE=1, WARNING with JITKERN_QUIET=1); an application that has not configured
# logging gets the lines on stderr.
logger = logging.getLogger("jitkern")


class _StderrUnlessConfigured(logging.StreamHandler):
    def emit(self, record: logging.LogRecord) -> None:
        if not logging.getLogger().handlers:  # otherwise propagation delivers it to the application's handlers
            super().emit(record)


_LOG_SINK = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p)


@_LOG_SINK
def _log_sink(level: int, message: bytes) -> None:
    logger.log(level, message.decode("utf-8", errors="replace"))


_LIB = _load()
_LIB.jitkern_set_log_sink(_log_sink)
if logger.level == logging.NOTSET:
    flag = lambda name: _LIB.jitkern_setting_flag(name.encode()) == 1  # noqa: E731  (the engine's rule, src/engine/config/settings.cc)
    logger.setLevel(logging.DEBUG if flag("JITKERN_VERBOSE") else logging.WARNING if flag("JITKERN_QUIET") else logging.INFO)
_handler = _StderrUnlessConfigured()
_handler.setFormatter(logging.Formatter("jitkern: %(message)s"))
logger.addHandler(_handler)
OK, BUILD_ERROR, VALUE_ERROR, RUNTIME_ERROR, CACHE_MISS = 0, 1, 2, 3, 4  # engine_abi.h's status codes
_ERRORS = {BUILD_ERROR: BuildError, VALUE_ERROR: ValueError, RUNTIME_ERROR: RuntimeError, CACHE_MISS: CacheMissError}


def _take(ptr: int | None) -> str:
    if not ptr:
        return ""
    text = ctypes.string_at(ptr).decode("utf-8", errors="replace")
    _LIB.jitkern_free(ptr)
    return text


def _bytes(text: str) -> bytes:
    # surrogateescape: a file name os.fsdecode made of non-UTF-8 bytes (a lone "\udcff") goes back as those bytes.
    return text.encode("utf-8", "surrogateescape")


def _field(key: str, value: str) -> str:
    # The length is in bytes: str.isascii() is a flag check, so only non-ASCII values are encoded twice.
    if value.isascii():
        return f"{key} {len(value)}:{value}\n"
    try:
        return f"{key} {len(_bytes(value))}:{value}\n"
    except UnicodeEncodeError:
        raise ValueError(f"jitkern: {key} {value!r} holds a lone surrogate that is no file name's byte (not text)") from None


def _encode(fields: Iterable[tuple[str, str]]) -> bytes:
    return _bytes("".join([_field(key, value) for key, value in fields]))


def encode_request(args, cpp_files, cuda_files, cpp_wrappers, cuda_wrappers, extra_cflags, extra_cuda_cflags, extra_ldflags,
                   extra_include_paths, build_directory, cuda_arch, host_without_nvcc=False, host_prelude=False,
                   host_without_cudafe=False, host_shared_files=0, device_parts=1) -> bytes:
    """A JitSpec's fields as the engine's request (validated there). Built in one pass of plain loops (a
    comprehension is a function call in Python < 3.12): it runs on every load_jit, cold in a fresh process."""
    parts = []
    add = parts.append
    for key, values in (("name", args), ("cpp_file", cpp_files), ("cuda_file", cuda_files)):
        for v in values:
            add(_field(key, v))
    for kind, wrappers in (("cpp", cpp_wrappers), ("cuda", cuda_wrappers)):
        for wrapper in wrappers:
            for key, v in zip(_WRAPPER_KEYS[kind], wrapper):
                add(_field(key, v))
    for key, values in (("cflag", extra_cflags), ("cuda_cflag", extra_cuda_cflags), ("ldflag", extra_ldflags),
                        ("include", extra_include_paths)):
        for v in values:
            add(_field(key, v))
    for key, v in (("build_directory", build_directory), ("cuda_arch", cuda_arch)):
        if v:
            add(_field(key, v))
    if host_without_nvcc:
        add(_field("host_without_nvcc", "1"))
    if host_prelude:
        add(_field("host_prelude", "1"))
    if host_without_cudafe:
        add(_field("host_without_cudafe", "1"))
    if host_shared_files:
        add(_field("host_shared_files", str(host_shared_files)))
    if device_parts != 1:
        add(_field("device_parts", str(device_parts)))
    return _bytes("".join(parts))


_WRAPPER_KEYS = {kind: (kind + "_wrapper_name", kind + "_wrapper_expr", kind + "_wrapper_args") for kind in ("cpp", "cuda")}


def encode_context(cuda_device: int | None, tvm_ffi_version: str) -> bytes:
    """What the caller's process adds to a request: the current CUDA device (whose arch CUDA sources
    target unless the spec fixes one) and the tvm-ffi version (part of the cache key)."""
    fields = [("tvm_ffi_version", tvm_ffi_version)]
    if cuda_device is not None:
        fields.append(("cuda_device", str(cuda_device)))
    return _encode(fields)


BUILD, LOAD, BUILD_REPORTING = 0, 1, 2  # jitkern_build's modes (engine_abi.h's JITKERN_MODE_*)
PARALLEL = 4  # added to a mode: one of many builds run at once (JITKERN_DEVICE_COMPILER=auto picks NVRTC)


# Every prebuilt wheel installs its layer as <a sys.path entry>/PREBUILT_PACKAGE/<arch>/ (jitkern.wheels).
PREBUILT_PACKAGE = "jitkern_prebuilt"


def prebuilt_packages() -> list[str]:
    """The PREBUILT_PACKAGE directories on sys.path, in its order: one failed lookup per entry without one
    (a process's first load pays it), not a listing of every site-packages directory."""
    # os.access first: a missing entry raises no exception (isdir's cost the first load about 20 us more)
    return [top for top in (f"{entry or '.'}/{PREBUILT_PACKAGE}" for entry in sys.path) if os.access(top, os.F_OK) and os.path.isdir(top)]


_package_layers_set = False


def package_layers(installed: bool = True) -> None:
    """Hands the installed prebuilt wheels (jitkern.wheels) to the engine, once per process; with
    installed=False, none (from then on: `jitkern prebuild` builds what a wheel holds)."""
    global _package_layers_set
    if not _package_layers_set or not installed:
        text = ""
        if installed and prebuilt_packages():  # jitkern.wheels is imported only where a wheel is installed
            from .wheels import layers_text

            text = layers_text()
        if text or _package_layers_set:  # the engine starts with none
            _LIB.jitkern_set_package_layers(text.encode())
        _package_layers_set = True


def build(request: bytes, mode: int) -> str:
    """Builds (or finds in the cache) the module `request` describes and returns the library path;
    LOAD also loads it and returns "<path>\\n<prefix>\\n<export>\\n...", BUILD_REPORTING returns
    "<path>\\n<compiled|cached>" (src/engine/api/c_api.cc)."""
    package_layers()
    result, error = ctypes.c_void_p(), ctypes.c_void_p()
    rc = _LIB.jitkern_build(request, len(request), mode, ctypes.byref(result), ctypes.byref(error))
    if rc == OK:
        return _take(result.value)
    message = _take(error.value)
    if rc == CACHE_MISS:
        from .wheels import miss_hint

        message += miss_hint(message)
    raise _ERRORS.get(rc, RuntimeError)(message)


def cache(op: str, cache_dir: str | None = None, *, max_bytes: int = -1, older_than_s: float = -1, dry_run: bool = False,
          match: Iterable[str] = ()) -> dict:
    """Cache administration (src/engine/store/cache_admin.h): op is ls, show, stats, verify, prune, clear or rm
    (dry_run: prune, clear and rm; match: the entries show and rm name); returns the engine's JSON
    answer as a dict (cache_command in src/engine/api/c_api.cc). A cache_dir given must exist (else ValueError)."""
    fields = [("op", op), ("max_bytes", str(max_bytes)), ("older_than_s", repr(float(older_than_s))), ("dry_run", "1" if dry_run else "0")]
    fields += [("match", m) for m in match]
    package_layers()
    if cache_dir:
        fields.append(("cache_dir", cache_dir))
    request = _encode(fields)
    result, error = ctypes.c_void_p(), ctypes.c_void_p()
    rc = _LIB.jitkern_cache(request, len(request), ctypes.byref(result), ctypes.byref(error))
    if rc == OK:
        return json.loads(_take(result.value))
    raise _ERRORS.get(rc, RuntimeError)(_take(error.value))


def config() -> dict:
    """Every setting as set, as it applies and from where, with what is wrong with it; the unknown
    JITKERN_* variables; the prebuilt layers and why one would be ignored (src/engine/api/c_api.cc config_json)."""
    package_layers()
    return json.loads(_take(_LIB.jitkern_config()))


_EFFECTIVE: dict = {}  # (name, the variable's raw value) -> the engine's value for it


def effective(name: str) -> str:
    """A setting's value as the engine applies it ("" where it is unset without a default); ValueError
    saying what is wrong with an invalid value. Resolved by the engine once per value the variable takes:
    callers on a per-call path (compat's is_arch_support_pdl) pay a dictionary lookup."""
    key = (name, os.environ.get(name))
    value = _EFFECTIVE.get(key)
    if value is None:
        setting = next(s for s in config()["settings"] if s["name"] == name)
        if setting["problem"]:
            raise ValueError(f"jitkern: {setting['problem']}")
        value = _EFFECTIVE[key] = setting["effective"]
    return value


def check_request(request: bytes) -> None:
    """ValueError naming the field for what a build of `request` would refuse before compiling; builds nothing."""
    error = ctypes.c_void_p()
    if _LIB.jitkern_check_request(request, len(request), ctypes.byref(error)) != OK:
        raise ValueError(_take(error.value))


def check_arch(arch: str, origin: str) -> None:
    """ValueError saying the valid forms when `arch` is no CUDA target jitkern accepts."""
    error = ctypes.c_void_p()
    if _LIB.jitkern_check_arch(arch.encode(), origin.encode(), ctypes.byref(error)) != OK:
        raise ValueError(_take(error.value))


def settings_markdown() -> str:
    """Every environment variable the engine reads, as a Markdown table."""
    return _take(_LIB.jitkern_settings_markdown())


def find_compiler(cuda: bool) -> tuple[str, str]:
    """(path, --version output) of the compiler a build would use; RuntimeError with the engine's
    one-line reason and fix when there is none."""
    result, error = ctypes.c_void_p(), ctypes.c_void_p()
    if _LIB.jitkern_find_compiler(int(cuda), ctypes.byref(result), ctypes.byref(error)) != OK:
        raise RuntimeError(_take(error.value))
    path, _, version = _take(result.value).partition("\n")
    return path, version


def arch_for_capability(major: int, minor: int) -> str:
    """The CUDA target jitkern compiles for on a device of this compute capability (src/engine/compile/toolchain.cc)."""
    return _take(_LIB.jitkern_arch_for_capability(major, minor))


def runtime_version() -> str:
    return _LIB.jitkern_version().decode()


def tvm_ffi_paths() -> dict[str, str]:
    """tvm-ffi's include and library directories (for tools; the engine finds them itself from the
    loaded libtvm_ffi.so, or from JITKERN_TVM_FFI_INCLUDE / JITKERN_TVM_FFI_LIB)."""
    import tvm_ffi.libinfo as libinfo

    return {"tvm_ffi_include": libinfo.find_include_path(), "dlpack_include": libinfo.find_dlpack_include_path(),
            "tvm_ffi_lib": os.path.dirname(libinfo.find_libtvm_ffi())}
