"""Stream signalling on the GPU: stream_wait_value on a GPU flag, Event record/wait across two streams,
host set, timeouts (the stream goes on, the next call raises), CUDA graph capture; each through the
driver's stream memory operations and through the spin kernel. Every test that waits has a host watchdog
that releases the stream (and fails the test) if the release under test never comes."""

import contextlib
import importlib
import threading
import time

import pytest

pytestmark = pytest.mark.gpu

MECHANISMS = ["driver", "spin"]
FLAGS = ["host", "device"]  # where an Event's flag lives (device_flag=False / True)


def _torch():
    import torch

    return torch


def _ops():
    import jitkern.ops

    return jitkern.ops


@contextlib.contextmanager
def _watchdog(release, seconds=10.0):
    """Calls release() after `seconds` unless the block finished; the test fails if it had to."""
    fired = threading.Event()

    def fire():
        fired.set()
        release()

    timer = threading.Timer(seconds, fire)
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
    assert not fired.is_set(), "the watchdog had to release the waiting stream"


@pytest.fixture(autouse=True, scope="module")
def _sleep_kernel_loaded():
    """torch's sleep kernel (_busy) loaded before any stream waits: under CUDA's lazy loading a kernel's
    first launch waits for the kernels running, so a first _busy behind a waiting stream would deadlock."""
    torch = _torch()
    torch.cuda._sleep(1)
    torch.cuda.synchronize()


def _busy(stream, ms=30):
    """Keeps `stream` busy for about `ms` milliseconds (a sleeping kernel)."""
    torch = _torch()
    with torch.cuda.stream(stream):
        torch.cuda._sleep(int(ms * 2e6))


def test_the_driver_operations_are_used_on_this_device():
    assert _ops().wait_value.stream_mem_ops_available() is True


def test_stream_wait_value_on_a_gpu_flag():
    torch = _torch()
    flag = torch.zeros(1, dtype=torch.int32, device="cuda")
    waiter, writer = torch.cuda.Stream(), torch.cuda.Stream()
    data = torch.arange(1000, dtype=torch.float32, device="cuda")
    out = torch.zeros_like(data)
    torch.cuda.synchronize()

    def release():
        with torch.cuda.stream(torch.cuda.Stream()):
            flag.fill_(3)

    with _watchdog(release):
        with torch.cuda.stream(waiter):
            _ops().stream_wait_value(flag, 3)
            out.copy_(data)
        time.sleep(0.05)
        if waiter.query():  # what the flag held and which mechanism waited, for a failure seen once under 14 workers
            with torch.cuda.stream(torch.cuda.Stream()):
                now = int(flag.item())
            pytest.fail(f"the stream went on before the flag was written (the flag holds {now}; driver operations: "
                        f"{_ops().wait_value.stream_mem_ops_available()})")
        with torch.cuda.stream(writer):
            flag.fill_(3)
        waiter.synchronize()
    assert torch.equal(out, data)


@pytest.mark.parametrize("flag", FLAGS)
@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_record_and_wait_across_two_streams(mechanism, flag):
    torch = _torch()
    event = _ops().Event(spin_kernel=mechanism == "spin", device_flag=flag == "device")
    producer, consumer = torch.cuda.Stream(), torch.cuda.Stream()
    data = torch.zeros(1 << 20, device="cuda")
    out = torch.empty_like(data)
    torch.cuda.synchronize()
    with _watchdog(lambda: event.set(1)):
        _busy(producer, 50)  # without the wait, the consumer would copy the zeros
        with torch.cuda.stream(producer):
            data.fill_(7.0)
            event.record(1)
        with torch.cuda.stream(consumer):
            event.wait(1)
            out.copy_(data)
        consumer.synchronize()
    assert torch.all(out == 7.0)
    assert event.value == 1


_WAIT_BEFORE_RECORD = """
import sys, torch
from jitkern.ops import Event
event = Event(spin_kernel=sys.argv[1] == "spin")
producer, consumer = torch.cuda.Stream(), torch.cuda.Stream()
with torch.cuda.stream(producer):
    torch.cuda._sleep(100_000_000)
with torch.cuda.stream(consumer):
    event.wait(1, timeout_ms=3000)
with torch.cuda.stream(producer):
    event.record(1)
torch.cuda.synchronize()
event.set(1)  # raises TimeoutError if the wait gave up
print("released")
"""


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_a_wait_queued_before_the_first_record_of_a_fresh_process(mechanism):
    # The first record's kernel must not need the waiting kernel to finish (lazy loading did, once).
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _WAIT_BEFORE_RECORD, mechanism], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "released" in done.stdout, done.stdout + done.stderr


@pytest.mark.parametrize("flag", FLAGS)
@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_host_set_releases_a_waiting_stream(mechanism, flag):
    torch = _torch()
    event = _ops().Event(spin_kernel=mechanism == "spin", device_flag=flag == "device")
    stream = torch.cuda.Stream()
    out = torch.zeros(16, device="cuda")
    torch.cuda.synchronize()
    with _watchdog(lambda: event.set(5)):
        with torch.cuda.stream(stream):
            event.wait(5)
            out.fill_(1.0)
        time.sleep(0.05)
        assert not stream.query(), "the stream went on before the host set the value"
        event.set(4)  # not the awaited value
        time.sleep(0.02)
        assert not stream.query()
        event.set(5)
        stream.synchronize()
    assert torch.all(out == 1.0)


@pytest.mark.parametrize("flag", FLAGS)
@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_a_timed_out_wait_lets_the_stream_go_on_and_the_next_call_raises(mechanism, flag):
    torch = _torch()
    event = _ops().Event(spin_kernel=mechanism == "spin", device_flag=flag == "device")
    stream = torch.cuda.Stream()
    out = torch.zeros(16, device="cuda")
    torch.cuda.synchronize()
    with _watchdog(lambda: event.set(9)):
        start = time.perf_counter()
        with torch.cuda.stream(stream):
            event.wait(9, timeout_ms=100)
            out.fill_(2.0)
        stream.synchronize()
        waited = time.perf_counter() - start
    assert torch.all(out == 2.0)
    assert 0.09 <= waited < 5.0, f"the stream waited {waited:.3f} s"
    with pytest.raises(TimeoutError, match="wait for value 9 timed out after 100 ms"):
        event.set(1)
    event.set(1)  # reported once; the Event works again
    with torch.cuda.stream(stream):
        event.wait(1, timeout_ms=1000)
    stream.synchronize()
    event.set(2)


def test_a_timeout_counts_from_when_the_stream_reaches_the_wait():
    torch = _torch()
    event = _ops().Event()
    stream = torch.cuda.Stream()
    torch.cuda.synchronize()
    with _watchdog(lambda: event.set(1)):
        _busy(stream, 300)  # longer than the timeout
        with torch.cuda.stream(stream):
            event.wait(1, timeout_ms=200)
        time.sleep(0.35)  # the stream reached the wait about now; the timeout has not run out
        event.set(1)
        stream.synchronize()
    event.record(1)  # no timeout to report: this does not raise


@pytest.mark.parametrize("flag", FLAGS)
@pytest.mark.parametrize("timed", [False, True])
def test_wait_inside_a_cuda_graph(timed, flag):
    torch = _torch()
    event = _ops().Event(device_flag=flag == "device")
    stream = torch.cuda.Stream()
    out = torch.zeros(16, device="cuda")
    event.set(0)
    with torch.cuda.stream(stream):
        event.wait(0)  # loads the module before the capture
    stream.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        event.wait(3, timeout_ms=5000 if timed else None)
        out.add_(1.0)
    torch.cuda.synchronize()
    with _watchdog(lambda: event.set(3)):
        with torch.cuda.stream(stream):
            graph.replay()
        time.sleep(0.05)
        assert not stream.query(), "the graph went on before the value was set"
        event.set(3)
        stream.synchronize()
    assert torch.all(out == 1.0)


@pytest.mark.parametrize("flag", FLAGS)
def test_record_and_wait_captured_in_two_graphs(flag):
    # The producer's graph records, the consumer's waits, on two streams; the consumer's replays first.
    torch = _torch()
    event = _ops().Event(device_flag=flag == "device")
    producer, consumer = torch.cuda.Stream(), torch.cuda.Stream()
    data, out = torch.zeros(1 << 16, device="cuda"), torch.zeros(1 << 16, device="cuda")
    with torch.cuda.stream(producer):
        event.record(0)  # loads the module before the captures
    torch.cuda.synchronize()
    produce, consume = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
    with torch.cuda.graph(produce, stream=producer):
        data.add_(1.0)
        event.record(11)
    with torch.cuda.graph(consume, stream=consumer):
        event.wait(11)
        out.copy_(data)
    torch.cuda.synchronize()
    assert event.value == 0, "capturing must not run the record"
    with _watchdog(lambda: event.set(11)):
        with torch.cuda.stream(consumer):
            consume.replay()
        time.sleep(0.05)
        assert not consumer.query(), "the consumer's graph went on before the record"
        _busy(producer, 20)
        with torch.cuda.stream(producer):
            produce.replay()
        consumer.synchronize()
    assert torch.all(out == 1.0)
    assert event.value == 11


def test_every_export_is_callable_inside_a_capture_once_one_was_called():
    """The module loads with its first call; the exports not called yet may then be captured."""
    torch = _torch()
    wait_value = importlib.import_module("jitkern.ops.wait_value")
    wait_value._function._functions.clear()  # as in a fresh process (the engine memoises the module's load)
    event = _ops().Event()  # its first call: event_create
    stream, out = torch.cuda.Stream(), torch.zeros(16, device="cuda")
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        event.wait(4)  # event_wait, not called before in this "process"
        out.add_(1.0)
    with _watchdog(lambda: event.set(4)):
        with torch.cuda.stream(stream):
            graph.replay()
        event.set(4)
        stream.synchronize()
    assert torch.all(out == 1.0)


def test_a_device_flag_lives_on_the_current_device():
    torch = _torch()
    event = _ops().Event(device_flag=True)
    assert event.value == 0
    event.set(-7)
    assert event.value == -7
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        event.record(12)
    stream.synchronize()
    assert event.value == 12


def test_bad_arguments():
    torch = _torch()
    event = _ops().Event()
    with pytest.raises(ValueError, match="timeout_ms"):
        event.wait(1, timeout_ms=0)
    with pytest.raises(ValueError, match="int32"):
        event.set(2**40)
    with pytest.raises(TypeError, match="flag"):
        _ops().stream_wait_value(torch.zeros(1, dtype=torch.float32, device="cuda"), 1)
    with pytest.raises(ValueError, match="pin"):
        _ops().stream_wait_value(torch.zeros(1, dtype=torch.int32), 1)
