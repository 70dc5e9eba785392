"""The benchmarks' timed first calls and compiles start with every JIT cache empty. Runs without a GPU."""

import re
import sys

from conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
from utils import empty_cache_env  # noqa: E402


def test_every_jit_cache_of_a_timed_process_is_its_empty_directory(tmp_path):
    """jitkern's, tvm-ffi's and the reference's newer loader's (SGLANG_JIT_CACHE_DIR: without it a second trial of
    the reference found the first's build under ~/.cache/sglang/jit and took 0.1 s), and the benchmarks that time
    cold processes take their environment from empty_cache_env alone."""
    env = empty_cache_env(str(tmp_path), JITKERN_QUIET="0", EXTRA="1")
    for name in ("JITKERN_CACHE_DIR", "TVM_FFI_CACHE_DIR", "SGLANG_JIT_CACHE_DIR"):
        assert env[name] == str(tmp_path), name
    assert env["JITKERN_QUIET"] == "0" and env["EXTRA"] == "1", "settings override the defaults"
    for bench in ("bench_first_call.py", "bench_compile.py", "bench_compat_compile.py"):
        text = (REPO / "benchmarks" / bench).read_text()
        assert "empty_cache_env(" in text and not re.search(r"\bTVM_FFI_CACHE_DIR=", text), bench
