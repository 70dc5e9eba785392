"""Which kernels a call launches, by their names in a torch profile: for the tests of launch rules."""

import pytest


def launched_kernels(fn, *markers: str) -> list[str]:
    """The names of the CUDA kernels that a second call of fn launches (the first, outside the profile, compiles
    and loads) whose names contain one of `markers`. The test is skipped, as not run, where the profiler records
    no kernel at all in this process (CUPTI held by another tool, e.g. compute-sanitizer)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    events = prof.events()
    if not any(e.device_type.name == "CUDA" for e in events):
        pytest.skip("NOT RUN: the profiler records no kernels in this process (CUPTI taken, e.g. by compute-sanitizer)")
    return [e.name for e in events if any(m in e.name for m in markers)]
