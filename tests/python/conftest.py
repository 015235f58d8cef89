"""pytest configuration of cuactor's Python tests.

Tests marked ``gpu`` need PyTorch with a CUDA device: they skip with the reason where there is
none, and fail instead when CUACTOR_REQUIRE_GPU=1 (scripts/gpu-check sets it), so a broken GPU
machine cannot pass.
"""

from __future__ import annotations

import os
import re
import sys
from typing import Any

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "gpu: needs PyTorch and a CUDA device (skips without one)")


def gpu_required() -> bool:
    v = os.environ.get("CUACTOR_REQUIRE_GPU", "")
    return v not in ("", "0")


def _gpu_problem() -> str | None:
    try:
        import torch
    except ImportError:
        return "PyTorch is not installed"
    if not torch.cuda.is_available():
        return "no CUDA device visible to PyTorch"
    import cuactor

    if not cuactor.info()["devices"]:
        return "no CUDA device visible to cuactor"
    return None


@pytest.fixture(scope="session")
def torch_cuda():
    """The torch module on a machine with a CUDA device (skip, or fail under CUACTOR_REQUIRE_GPU=1)."""
    problem = _gpu_problem()
    if problem is not None:
        if gpu_required():
            pytest.fail(f"CUACTOR_REQUIRE_GPU is set but {problem}")
        pytest.skip(f"{problem}: GPU test skipped (run scripts/gpu-check on a GPU machine)")
    import torch

    torch.manual_seed(0)
    return torch


@pytest.fixture
def np():
    """NumPy, or a visible skip without it."""
    return pytest.importorskip("numpy", reason="NumPy is not installed (scripts/setup installs it into .deps/pylib)")


# A build that compiled part of the catalog (CUACTOR_CATALOG_FILTER, or the sample) lacks kernels
# that some GPU tests run; the plans then raise UnsupportedError saying that no kernel "in this
# build" computes the request. There such a test is reported as skipped, naming the scope, as the
# C++ tests do; in a full build (scripts/gpu-check) it fails.
_MISSING_KERNEL = re.compile(r"no (?:[\w ]+ )?kernel in this build")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Any:
    outcome = yield
    report = outcome.get_result()
    if call.when != "call" or call.excinfo is None or "cuactor" not in sys.modules:
        return
    cuactor = sys.modules["cuactor"]
    if not call.excinfo.errisinstance(cuactor.errors.UnsupportedError):
        return
    message = str(call.excinfo.value)
    if not _MISSING_KERNEL.search(message):
        return
    scope = cuactor.info().get("catalog_scope", "full")
    if scope == "full":
        return
    report.outcome = "skipped"
    report.longrepr = (str(item.path), item.location[1] or 0,
                       f"Skipped: {message.splitlines()[0]} (this build compiled part of the catalog: {scope}; "
                       "scripts/gpu-check runs it)")
