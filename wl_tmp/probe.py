"""Temporary (warm-load investigation, removed before merge): where a fresh process's first load_jit goes."""
import collections, os, statistics, subprocess, sys, tempfile, textwrap

ONE = r'''
import os, sys, time, ctypes
try:
    import torch
except ImportError:
    pass
import jitkern
from jitkern import load_jit
from jitkern import jit, _engine
P = time.perf_counter
mode = os.environ.get("WL_MODE", "whole")
if mode == "whole":
    t1 = P()
    m = load_jit("add_constant", "5", cuda_files=["add_constant.cuh"], cuda_wrappers=[("add_constant", "add_constant<5>")])
    m.add_constant
    t2 = P()
    print("RESULT total_us |", (t2 - t1) * 1e6)
else:
    t0 = P()
    spec = jit.JitSpec("add_constant", "5", cuda_files=["add_constant.cuh"], cuda_wrappers=[("add_constant", "add_constant<5>")])
    t1 = P(); w = spec._wire(); t2 = P(); _engine.package_layers(); t3 = P()
    result, error = ctypes.c_void_p(), ctypes.c_void_p()
    rc = _engine._LIB.jitkern_build(w, len(w), _engine.LOAD, ctypes.byref(result), ctypes.byref(error))
    t4 = P()
    path, prefix, *exports = _engine._take(result.value).splitlines()
    m = jit.Module(path, exports, prefix, spec._parameters()); m.add_constant
    t5 = P()
    for k, a, b in (("py_spec", t0, t1), ("py_wire", t1, t2), ("py_layers", t2, t3), ("py_engine_call", t3, t4), ("py_module", t4, t5), ("py_total", t0, t5)):
        print(f"RESULT {k} |", (b - a) * 1e6)
    if os.environ.get("WL_INFO"):
        maps = open("/proc/self/maps").read().splitlines()
        files = {l.split()[-1] for l in maps if len(l.split()) >= 6 and ".so" in l.split()[-1]}
        print("INFO loaded .so files:", len(files), "mappings:", len(maps))
        print("INFO libcuda loaded:", any("libcuda.so" in f for f in files), "cudart:", sorted(f for f in files if "cudart" in f))
        print("INFO torch", getattr(sys.modules.get("torch"), "__version__", None), "sys.path entries", len(sys.path))
'''


def run(env_extra, n, cache):
    samples = collections.OrderedDict()
    for _ in range(n):
        env = dict(os.environ, JITKERN_QUIET="1", JK_STAGES="1", JITKERN_CACHE_DIR=cache, **env_extra)
        out = subprocess.run(["taskset", "-c", os.environ.get("WL_CPU", "3"), sys.executable, "-c", ONE], capture_output=True, text=True, env=env)
        if out.returncode:
            print(out.stderr[-2000:]); sys.exit(1)
        for line in (out.stderr + out.stdout).splitlines():
            if line.startswith("STAGE "):
                _, k, v = line.split(); samples.setdefault(k, []).append(float(v))
            elif line.startswith("RESULT "):
                k, v = line[7:].rsplit("|", 1); samples.setdefault(k.strip(), []).append(float(v))
            elif line.startswith("INFO") and env_extra.get("WL_INFO"):
                print(line)
    return samples


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 15
    with tempfile.TemporaryDirectory() as cache:
        run({}, 1, cache)  # compile once
        variants = {"whole": {}, "parts": {"WL_MODE": "parts"}, "whole_arch_set": {"JITKERN_CUDA_ARCH": "sm_90a"},
                    "whole_noproc": {"JK_NOPROC": "1"}, "whole_lazy": {"JK_LAZY": "1"}}
        run({"WL_MODE": "parts", "WL_INFO": "1"}, 1, cache)
        results = {name: collections.OrderedDict() for name in variants}
        for _ in range(n):  # interleaved
            for name, env in variants.items():
                for k, v in run(env, 1, cache).items():
                    results[name].setdefault(k, []).extend(v)
        for name, samples in results.items():
            print(f"== {name} ({n} fresh processes, us: median (min))")
            for k, v in samples.items():
                print(f"  {k:20s} {statistics.median(v):9.1f} ({min(v):8.1f})")


main()
