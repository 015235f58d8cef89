"""pytest configuration of cuactor's Python tests.

Tests marked ``gpu`` need PyTorch with a CUDA device: they skip with the reason where there is
none, and fail instead when CUACTOR_REQUIRE_GPU=1 (scripts/gpu-check sets it), so a broken GPU
machine cannot pass.
"""

from __future__ import annotations

import os

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
