import os
import shutil
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
KERNELS = HERE / "kernels"


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def pytest_collection_modifyitems(config, items):
    # GPU tests never pass silently on a machine without a GPU: they are skipped and reported as
    # such ("not run"), never counted as passed.
    if _cuda_available():
        return
    skip = pytest.mark.skip(reason="NOT RUN: needs a CUDA GPU and torch (run `pytest -m gpu` on the GPU machine)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    """A fresh, private jitkern cache for the test (the engine reads JITKERN_CACHE_DIR per call)."""
    d = tmp_path / "cache"
    monkeypatch.setenv("JITKERN_CACHE_DIR", str(d))
    monkeypatch.delenv("JITKERN_LOCK_DIR", raising=False)
    monkeypatch.delenv("JITKERN_RETRY_FAILED", raising=False)
    return d
