"""ctypes binding to the C++ engine in lib/libjitkern_runtime.so (see src/c_api.cc)."""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
LIBRARY_PATH = PACKAGE_DIR / "lib" / "libjitkern_runtime.so"


class BuildError(RuntimeError):
    """A kernel module failed to compile; the message holds the command and compiler output."""


def _load() -> ctypes.CDLL:
    if not LIBRARY_PATH.exists():
        raise ImportError(
            f"jitkern's runtime library is missing ({LIBRARY_PATH}); install the package with `pip install .`"
        )
    # RTLD_GLOBAL is not needed: JIT modules link the runtime library by path (rpath).
    lib = ctypes.CDLL(str(LIBRARY_PATH))
    lib.jitkern_build.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_void_p)]
    lib.jitkern_build.restype = ctypes.c_int
    lib.jitkern_free.argtypes = [ctypes.c_void_p]
    lib.jitkern_free.restype = None
    lib.jitkern_version.restype = ctypes.c_char_p
    return lib


_LIB = _load()


def _take(ptr: ctypes.c_void_p) -> str:
    if not ptr.value:
        return ""
    text = ctypes.string_at(ptr.value).decode("utf-8", errors="replace")
    _LIB.jitkern_free(ptr)
    return text


def build(request: list[tuple[str, str]], register_prefix: str | None = None) -> str:
    """Builds (or finds in the cache) the module described by `request`; returns the library path.

    With `register_prefix`, also loads the library and registers every wrapper's export `name` as the
    tvm-ffi global function `register_prefix + name`."""
    text = "".join(f"{key}\t{value}\n" for key, value in request).encode()
    path, error = ctypes.c_void_p(), ctypes.c_void_p()
    prefix = register_prefix.encode() if register_prefix is not None else None
    rc = _LIB.jitkern_build(text, prefix, ctypes.byref(path), ctypes.byref(error))
    if rc == 0:
        return _take(path)
    message = _take(error)
    if rc == 1:
        raise BuildError(message)
    raise RuntimeError(message)


def runtime_version() -> str:
    return _LIB.jitkern_version().decode()


def environment_paths() -> dict[str, str]:
    """Directories the engine needs from tvm-ffi's installation.

    Read off the package layout (include/, lib/ beside tvm_ffi/__init__.py) because tvm_ffi.libinfo
    searches several locations and costs about a millisecond, twice the warm-load budget.
    """
    import tvm_ffi

    root = os.path.dirname(os.path.abspath(tvm_ffi.__file__))
    include, lib = os.path.join(root, "include"), os.path.join(root, "lib")
    if os.path.exists(os.path.join(include, "tvm", "ffi", "c_api.h")) and os.path.exists(os.path.join(lib, "libtvm_ffi.so")):
        paths = {"tvm_ffi_include": include, "dlpack_include": include, "tvm_ffi_lib": lib}
    else:  # a development install of tvm-ffi: let it search
        import tvm_ffi.libinfo as libinfo

        paths = {
            "tvm_ffi_include": libinfo.find_include_path(),
            "dlpack_include": libinfo.find_dlpack_include_path(),
            "tvm_ffi_lib": os.path.dirname(libinfo.find_libtvm_ffi()),
        }
    paths["tvm_ffi_version"] = tvm_ffi.__version__
    return paths
