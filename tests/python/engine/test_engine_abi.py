"""The Python binding (python/jitkern/_engine.py) agrees with the engine's C ABI header
(src/include/jitkern/engine_abi.h): every declared function is exported by the installed library and
bound with the header's argument and result types, every bound function is declared, and the modes and
status codes are the header's numbers."""

import ctypes
import re
import subprocess
from pathlib import Path

import pytest

from jitkern import _engine
from conftest import REPO

pytestmark = pytest.mark.tvm_ffi

HEADER = REPO / "src" / "include" / "jitkern" / "engine_abi.h"

# C types as the binding declares them: strings the engine allocates come back as void pointers (freed with jitkern_free).
ARG_TYPES = {"const char*": ctypes.c_char_p, "size_t": ctypes.c_size_t, "int": ctypes.c_int, "char**": ctypes.POINTER(ctypes.c_void_p),
             "char*": ctypes.c_void_p, "jitkern_log_sink": _engine._LOG_SINK}
RESULT_TYPES = {"int": ctypes.c_int, "char*": ctypes.c_void_p, "const char*": ctypes.c_char_p, "void": None}


def declarations() -> dict:
    """name -> (result type, [argument types]) of every function the header declares."""
    text = re.sub(r"/\*.*?\*/", "", HEADER.read_text(), flags=re.S)
    found = {}
    for result, name, args in re.findall(r"^\s*((?:const )?\w+\*?)\s+(jitkern_\w+)\(([^)]*)\);", text, flags=re.M):
        types = [] if args.strip() in ("", "void") else [re.sub(r"\s*\w+$", "", a.strip()).replace(" *", "*") for a in args.split(",")]
        found[name] = (result, types)
    return found


def enum(prefix: str) -> dict:
    text = HEADER.read_text()
    return {name: int(value) for name, value in re.findall(rf"\b({prefix}\w+) = (\d+)", text)}


def test_the_header_declares_the_functions_the_binding_uses():
    declared = declarations()
    assert len(declared) >= 12, declared
    source = Path(_engine.__file__).read_text()
    used = set(re.findall(r"_?LIB\.(jitkern_\w+)|lib\.(jitkern_\w+)", source))
    used = {a or b for a, b in used}
    assert used <= set(declared), sorted(used - set(declared))
    assert set(declared) <= used, f"declared but not bound: {sorted(set(declared) - used)}"


@pytest.mark.parametrize("name", sorted(declarations()))
def test_each_function_is_bound_with_the_headers_types(name):
    result, args = declarations()[name]
    fn = getattr(_engine._LIB, name)
    assert fn.restype == RESULT_TYPES[result], (name, fn.restype, result)
    expected = [ARG_TYPES[a] for a in args]
    if expected:  # functions without arguments are called without argtypes
        assert list(fn.argtypes) == expected, (name, fn.argtypes, args)


def test_the_library_exports_exactly_the_declared_functions():
    out = subprocess.run(["nm", "-D", "--defined-only", str(_engine.LIBRARY_PATH)], capture_output=True, text=True, check=True).stdout
    exported = {line.split()[-1] for line in out.splitlines() if line.split()[-1].startswith("jitkern_")}
    assert exported == set(declarations()), (sorted(exported ^ set(declarations())))


def test_modes_and_status_codes_are_the_headers():
    modes = enum("JITKERN_MODE_")
    assert (modes["JITKERN_MODE_BUILD"], modes["JITKERN_MODE_LOAD"], modes["JITKERN_MODE_BUILD_REPORTING"],
            modes["JITKERN_MODE_PARALLEL"]) == (_engine.BUILD, _engine.LOAD, _engine.BUILD_REPORTING, _engine.PARALLEL)
    codes = {k: v for k, v in enum("JITKERN_").items() if not k.startswith("JITKERN_MODE_")}
    assert codes == {"JITKERN_OK": _engine.OK, "JITKERN_BUILD_ERROR": _engine.BUILD_ERROR, "JITKERN_VALUE_ERROR": _engine.VALUE_ERROR,
                     "JITKERN_RUNTIME_ERROR": _engine.RUNTIME_ERROR, "JITKERN_CACHE_MISS": _engine.CACHE_MISS}
    assert _engine._ERRORS[_engine.CACHE_MISS] is _engine.CacheMissError and _engine._ERRORS[_engine.VALUE_ERROR] is ValueError
