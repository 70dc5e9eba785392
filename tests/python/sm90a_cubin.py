"""A CUDA source compiled by nvcc to an sm_90a cubin against the installed headers, for the tests that read what
ptxas made of a kernel (registers, stack frames, spills, its SASS); they run without a GPU."""

import re
import shutil
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


def sass_tool() -> str | None:
    """cuobjdump or nvdisasm where the machine has one (and nvcc), else None: the SASS tests skip."""
    tool = shutil.which("cuobjdump") or shutil.which("nvdisasm")
    return tool if shutil.which("nvcc") is not None else None


def sass_functions(tool: str, cubin: Path, name: str) -> dict[str, str]:
    """The SASS of the cubin's functions whose mangled names match the regex `name`, by function (`tool`: sass_tool())."""
    sass = subprocess.run([tool, "-sass" if tool.endswith("cuobjdump") else "-c", str(cubin)], check=True, capture_output=True,
                          text=True).stdout
    bodies = {}
    for function, body in re.findall(rf"(?:Function : |\.text\.)(_Z\w*{name}\w*)(.*?)(?=Function : |\.text\._Z|\Z)", sass, re.S):
        bodies[function] = max(bodies.get(function, ""), body, key=len)  # nvdisasm names a function in its section line too
    return bodies
