"""`jitkern prebuild` of jitkern's own ops for sm_90a into fresh caches: wall time with -j 1 and -j N
(N = CPUs) against building the same modules one by one through JitSpec.build() (what a first run of a
model does without a prebuild). No GPU needed. Prints a markdown table."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from utils import environment  # noqa: E402

ARCH = "sm_90a"
CONSTANTS = "1,5"
ONE_BY_ONE = """
import sys, time, jitkern.ops
specs = [s.replace(cuda_arch=sys.argv[1]) for s in jitkern.ops.specs(constants=[int(c) for c in sys.argv[2].split(",")])]
for s in specs:
    s.build()
print(len(specs))
"""


def timed(cmd: list[str], cache: str) -> tuple[float, str]:
    env = dict(os.environ, JITKERN_CACHE_DIR=cache, JITKERN_QUIET="1")
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stdout}\n{proc.stderr}")
    return seconds, proc.stdout


def main() -> None:
    cpus = os.cpu_count() or 1
    rows = []
    with tempfile.TemporaryDirectory(prefix="jitkern-bench-prebuild-") as tmp:
        seconds, out = timed([sys.executable, "-c", ONE_BY_ONE, ARCH, CONSTANTS], f"{tmp}/one-by-one")
        modules = int(out.strip().splitlines()[-1])
        rows.append(("JitSpec.build() one by one (a first run without prebuild)", seconds))
        for jobs in sorted({1, cpus}):
            seconds, out = timed([sys.executable, "-m", "jitkern", "prebuild", "--ops", "all", "--constants", CONSTANTS, "--arch", ARCH,
                                  "-j", str(jobs)], f"{tmp}/j{jobs}")
            assert f"{modules} built, 0 already cached, 0 failed" in out, out
            rows.append((f"jitkern prebuild -j {jobs}", seconds))
        seconds, out = timed([sys.executable, "-m", "jitkern", "prebuild", "--ops", "all", "--constants", CONSTANTS, "--arch", ARCH,
                              "-j", str(cpus)], f"{tmp}/j{cpus}")
        assert f"0 built, {modules} already cached" in out, out
        rows.append((f"jitkern prebuild -j {cpus} again (everything cached)", seconds))
    print(f"\n### Prebuild of jitkern's ops ({environment()}, {cpus} CPUs)\n")
    print(f"{modules} modules (every op's for fp16/bf16/fp32, add_constant for {CONSTANTS}) for {ARCH}, each way into a fresh "
          "cache.\n")
    print("| how | wall time, s | vs one by one |")
    print("|---|---|---|")
    base = rows[0][1]
    for name, seconds in rows:
        print(f"| {name} | {seconds:.1f} | {base / seconds:.2f}x |")


if __name__ == "__main__":
    main()
