"""A CUDA source compiled by nvcc to an sm_90a cubin against the installed headers, for the tests that read what
ptxas made of a kernel (registers, stack frames, spills, its SASS); they run without a GPU."""

import subprocess
from pathlib import Path


def sm90a_cubin(tmp_path: Path, name: str, source: str) -> tuple[Path, str]:
    """The cubin of `source` (written to tmp_path/name.cu) and ptxas's -v report of its kernels."""
    import jitkern
    from jitkern._engine import tvm_ffi_paths

    paths = tvm_ffi_paths()
    src, cubin = tmp_path / f"{name}.cu", tmp_path / f"{name}.cubin"
    src.write_text(source)
    out = subprocess.run(["nvcc", "-std=c++20", "-arch=sm_90a", "-cubin", "--expt-relaxed-constexpr", "-Xptxas", "-v",
                          f"-I{jitkern.INCLUDE_DIR}", f"-I{paths['tvm_ffi_include']}", f"-I{paths['dlpack_include']}", "-o",
                          str(cubin), str(src)], check=True, capture_output=True, text=True)
    return cubin, out.stdout + out.stderr
