"""ctypes binding to the C++ engine (lib/libjitkern_engine.so, entry points in src/c_api.cc).

The only Python code that knows the request's wire format: fields "<key> <byte length>:<value>\\n".
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path
from typing import Iterable

PACKAGE_DIR = Path(__file__).resolve().parent
LIBRARY_PATH = PACKAGE_DIR / "lib" / "libjitkern_engine.so"


class BuildError(RuntimeError):
    """A kernel module failed to compile; the message holds the command and compiler output."""


def _load() -> ctypes.CDLL:
    if not LIBRARY_PATH.exists():
        raise ImportError(f"jitkern's engine library is missing ({LIBRARY_PATH}); install the package with `pip install .`")
    lib = ctypes.CDLL(str(LIBRARY_PATH))
    lib.jitkern_build.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int, ctypes.POINTER(ctypes.c_void_p),
                                  ctypes.POINTER(ctypes.c_void_p)]
    lib.jitkern_build.restype = ctypes.c_int
    lib.jitkern_settings_markdown.restype = ctypes.c_void_p
    lib.jitkern_free.argtypes = [ctypes.c_void_p]
    lib.jitkern_free.restype = None
    lib.jitkern_version.restype = ctypes.c_char_p
    return lib


_LIB = _load()
_ERRORS = {1: BuildError, 2: ValueError, 3: RuntimeError}


def _take(ptr: int | None) -> str:
    if not ptr:
        return ""
    text = ctypes.string_at(ptr).decode("utf-8", errors="replace")
    _LIB.jitkern_free(ptr)
    return text


def _encode(fields: Iterable[tuple[str, str]]) -> bytes:
    parts = []
    for key, value in fields:
        data = value.encode()
        parts.append(b"%s %d:%s\n" % (key.encode(), len(data), data))
    return b"".join(parts)


def encode_request(args, cpp_files, cuda_files, cpp_wrappers, cuda_wrappers, extra_cflags, extra_cuda_cflags, extra_ldflags,
                   extra_include_paths, build_directory, cuda_arch) -> bytes:
    """A JitSpec's fields as the engine's request (validated there)."""
    request = [("name", a) for a in args]
    request += [("cpp_file", f) for f in cpp_files] + [("cuda_file", f) for f in cuda_files]
    for kind, wrappers in (("cpp", cpp_wrappers), ("cuda", cuda_wrappers)):
        for n, e, *names in wrappers:
            request += [(f"{kind}_wrapper_name", n), (f"{kind}_wrapper_expr", e)]
            request += [(f"{kind}_wrapper_args", a) for a in names]
    request += [("cflag", f) for f in extra_cflags] + [("cuda_cflag", f) for f in extra_cuda_cflags]
    request += [("ldflag", f) for f in extra_ldflags] + [("include", f) for f in extra_include_paths]
    if build_directory:
        request.append(("build_directory", build_directory))
    if cuda_arch:
        request.append(("cuda_arch", cuda_arch))
    return _encode(request)


def encode_context(cuda_device: int | None, tvm_ffi_version: str) -> bytes:
    """What the caller's process adds to a request: the current CUDA device (whose arch CUDA sources
    target unless the spec fixes one) and the tvm-ffi version (part of the cache key)."""
    fields = [("tvm_ffi_version", tvm_ffi_version)]
    if cuda_device is not None:
        fields.append(("cuda_device", str(cuda_device)))
    return _encode(fields)


def build(request: bytes, load: bool) -> str:
    """Builds (or finds in the cache) the module `request` describes and returns the library path; with
    `load`, also loads it and returns "<path>\\n<prefix>\\n<export>\\n..." (src/c_api.cc)."""
    result, error = ctypes.c_void_p(), ctypes.c_void_p()
    rc = _LIB.jitkern_build(request, len(request), int(load), ctypes.byref(result), ctypes.byref(error))
    if rc == 0:
        return _take(result.value)
    raise _ERRORS.get(rc, RuntimeError)(_take(error.value))


def settings_markdown() -> str:
    """Every environment variable the engine reads, as a Markdown table."""
    return _take(_LIB.jitkern_settings_markdown())


def runtime_version() -> str:
    return _LIB.jitkern_version().decode()


def tvm_ffi_paths() -> dict[str, str]:
    """tvm-ffi's include and library directories (for tools; the engine finds them itself from the
    loaded libtvm_ffi.so, or from JITKERN_TVM_FFI_INCLUDE / JITKERN_TVM_FFI_LIB)."""
    import tvm_ffi.libinfo as libinfo

    return {"tvm_ffi_include": libinfo.find_include_path(), "dlpack_include": libinfo.find_dlpack_include_path(),
            "tvm_ffi_lib": os.path.dirname(libinfo.find_libtvm_ffi())}
