"""Stream signalling (jitkern.Event): how long from a signal to the waiting stream's next work.

- record on stream A -> wait on stream B: CUDA-event time from A's last kernel to B's next one, B already
  waiting (A sleeps first), against torch.cuda.Event record + wait_event.
- host set -> stream B: host time from Event.set to the moment a write queued behind B's wait is visible
  in host memory, against the same write queued on an idle stream (the launch and write-back alone).
Medians over many signals; the driver's stream memory operations and the spin kernel. Spin-kernel waits have
a 2 s timeout, so that a wait that is never released shows as a TimeoutError instead of a hang. Prints markdown."""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

# Two streams that signal each other must not share a hardware queue (a waiting stream would block the one
# that releases it); CUDA's default of 8 queues lets new streams share one.
os.environ.setdefault("CUDA_DEVICE_MAX_CONNECTIONS", "32")

import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from utils import environment, get_benchmark_range  # noqa: E402

from jitkern.ops import Event, warmup  # noqa: E402

REPS = get_benchmark_range(200, 30)


def stream_to_stream(kind: str, a, b) -> float:
    event = Event(spin_kernel=kind == "spin", device_flag=kind == "device flag") if kind != "torch" else None
    samples = []
    for i in range(1, REPS + 1):
        before, after = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with torch.cuda.stream(a):
            torch.cuda._sleep(200_000)
            before.record()
        if kind == "torch":
            signal = torch.cuda.Event()
            with torch.cuda.stream(a):
                signal.record()
            b.wait_event(signal)
            with torch.cuda.stream(b):
                after.record()
        else:
            with torch.cuda.stream(b):
                event.wait(i, timeout_ms=2000 if kind == "spin" else None)
                after.record()
            with torch.cuda.stream(a):
                event.record(i)
        torch.cuda.synchronize()
        samples.append(before.elapsed_time(after) * 1000)
    return statistics.median(samples[REPS // 10:])


def host_to_stream(kind: str, b) -> float:
    gate, done = Event(spin_kernel=kind == "spin"), Event()
    samples = []
    for i in range(1, REPS + 1):
        if kind == "no wait":
            t0 = time.perf_counter()
            with torch.cuda.stream(b):
                done.record(i)
        else:
            with torch.cuda.stream(b):
                gate.wait(i, timeout_ms=2000 if kind == "spin" else None)
                done.record(i)
            time.sleep(0.001)  # the stream is waiting by now
            t0 = time.perf_counter()
            gate.set(i)
        while done.value != i:
            pass
        samples.append((time.perf_counter() - t0) * 1e6)
        b.synchronize()
    return statistics.median(samples[REPS // 10:])


def main():
    print(f"# bench_wait_value: {environment()}")
    warmup()
    a, b = torch.cuda.Stream(), torch.cuda.Stream()
    print(f"\nCUDA_DEVICE_MAX_CONNECTIONS={os.environ['CUDA_DEVICE_MAX_CONNECTIONS']}")
    print("\n| signal | mechanism | median us |")
    print("|---|---|---|")
    for kind, name in (("torch", "torch.cuda.Event + wait_event"), ("driver", "jitkern.Event (driver wait/write value)"),
                       ("device flag", "jitkern.Event(device_flag=True) (driver wait/write value)"), ("spin", "jitkern.Event (spin kernel)")):
        print(f"| record on stream A -> next kernel on stream B | {name} | {stream_to_stream(kind, a, b):.2f} |")
    for kind, name in (("driver", "Event.set -> stream B (driver wait value)"), ("spin", "Event.set -> stream B (spin kernel)"),
                       ("no wait", "the same write launched on an idle stream (no wait)")):
        print(f"| host -> a write behind the wait, seen by the host | {name} | {host_to_stream(kind, b):.2f} |")


if __name__ == "__main__":
    main()
