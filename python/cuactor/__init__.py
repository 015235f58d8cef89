"""cuactor from Python: CUTLASS GEMM and grouped GEMM on PyTorch / CuPy / JAX tensors without copies,
capturable by ``torch.cuda.graph``, the run-time kernel cache, and the supervised device actor with
asyncio (SPEC [P1]-[P4]).

Tensors come in through DLPack or ``__cuda_array_interface__`` (PyTorch tensors are read directly);
nothing is copied. Work runs on the caller's stream: PyTorch's current stream for torch tensors, the
``stream=`` argument (a ``cudaStream_t`` as an integer) otherwise. Errors are the classes of
:mod:`cuactor.errors`, all deriving from :class:`cuactor.Error`.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from . import _core, jit
from .device import Device
from .errors import *  # noqa: F403 (the exception classes are part of the package's API)
from .errors import InvalidArgumentError, UnsupportedError
from .errors import __all__ as _errors_all

GpuRef = _core.GpuRef
GroupedGemmPlan = _core.GroupedGemmPlan
PreparedGroupedGemm = _core.PreparedGroupedGemm

__version__: str = _core.version()

__all__ = [
    "info",
    "mm",
    "grouped_mm",
    "scaled_grouped_mm",
    "GroupedGemmPlan",
    "PreparedGroupedGemm",
    "Device",
    "GpuRef",
    "jit",
    *_errors_all,
]


def info(actor_stats: bool = False) -> dict[str, Any]:
    """The report of ``cuactor info --json`` as a dict: version, driver and runtime versions,
    devices, kernel families compiled in, NVRTC / nvcc, cache locations. ``actor_stats=True`` opens a
    device actor per device and adds its stats."""
    return json.loads(_core.info_json(actor_stats))


def _torch_of(x: Any) -> Any:
    """The torch module when ``x`` is a torch.Tensor, else None (torch is never imported here)."""
    torch = sys.modules.get("torch")
    return torch if torch is not None and isinstance(x, torch.Tensor) else None


_workspace_allocators: dict[Any, Any] = {}


def _torch_context(torch: Any, a: Any, stream: int | None) -> tuple[int, Any]:
    """(stream handle, workspace allocator) for torch operands on ``a``'s device."""
    index = a.get_device()
    if index < 0:
        raise InvalidArgumentError(f"a (a tensor on {a.device}): must be in CUDA device memory")
    if stream is None:
        stream = torch._C._cuda_getCurrentRawStream(index)
    alloc = _workspace_allocators.get(index)
    if alloc is None:
        device = torch.device("cuda", index)

        def alloc(nbytes: int) -> Any:
            return torch.empty(nbytes, dtype=torch.uint8, device=device)

        _workspace_allocators[index] = alloc
    return int(stream), alloc


def _ndim(x: Any) -> int:
    n = getattr(x, "ndim", None)
    return int(n) if n is not None else len(x.shape)


def _torch_dtype(torch: Any, dtype: Any) -> Any:
    if dtype is None or isinstance(dtype, torch.dtype):
        return dtype
    names = {"bf16": "bfloat16", "f16": "float16", "f32": "float32", "fp16": "float16"}
    return getattr(torch, names.get(str(dtype), str(dtype)))


def _prepare_out(torch: Any, a: Any, shape: tuple[int, ...], out: Any, out_dtype: Any, default: Any) -> Any:
    if torch is None:
        if out is None:
            raise InvalidArgumentError("out=None: cuactor allocates outputs only for torch tensors; pass out= (on the "
                                       "device of a, rows contiguous)")
        return out
    want = _torch_dtype(torch, out_dtype)
    if out is None:
        return torch.empty(shape, dtype=want or default, device=a.device)
    if want is not None and out.dtype != want:
        raise InvalidArgumentError(f"out: dtype {out.dtype} differs from out_dtype={want}")
    if tuple(out.shape) != shape:
        raise InvalidArgumentError(f"out: shape {tuple(out.shape)}, the result has shape {shape}")
    return out


def _context(torch: Any, a: Any, stream: int | None) -> tuple[int, Any]:
    if torch is not None:
        return _torch_context(torch, a, stream)
    if stream is None:
        raise InvalidArgumentError("stream=None: for tensors other than torch's, pass the stream to run on as an "
                                   "integer cudaStream_t (CuPy: cupy.cuda.get_current_stream().ptr; 0 = legacy "
                                   "default stream)")
    return int(stream), None


def mm(a: Any, b: Any, out: Any = None, out_dtype: Any = None, *, stream: int | None = None) -> Any:
    """``out = a @ b`` with a CUTLASS catalog GEMM: (M, K) x (K, N) -> (M, N), or batched
    (B, M, K) x (B, K, N) -> (B, M, N).

    a and b have one dtype (bf16, f16; fp8 needs scales and is not exposed here); either operand may
    be transposed (one of its last two dimensions contiguous); out's rows must be contiguous.
    ``out_dtype`` defaults to a's (bf16 inputs may write float32 on sm_90a). No allocation besides
    ``out`` when it is None (torch), no synchronisation: capturable by torch.cuda.graph.

    Raises:
        InvalidArgumentError: shapes, dtypes, devices or strides break a rule (the message says which).
        UnsupportedError: no kernel of this build computes the combination on this GPU.
    """
    torch = _torch_of(a)
    nd = _ndim(a)
    if nd not in (2, 3) or _ndim(b) != nd:
        raise InvalidArgumentError(f"mm takes (M, K) x (K, N) or (B, M, K) x (B, K, N); got a rank {nd} and b rank "
                                   f"{_ndim(b)}")
    shape = (*tuple(a.shape[:-1]), int(b.shape[-1]))
    out = _prepare_out(torch, a, tuple(int(s) for s in shape), out, out_dtype, getattr(a, "dtype", None))
    s, alloc = _context(torch, a, stream)
    _core.mm(a, b, out, s, alloc)
    return out


def grouped_mm(a: Any, b: Any, offs: Any = None, out: Any = None, out_dtype: Any = None, *,
               stream: int | None = None) -> Any:
    """Grouped GEMM with the semantics of ``torch._grouped_mm``.

    * 2-D x 3-D (mixture of experts): a (T, K) holds every group's rows stacked, b (G, K, N) one matrix
      per group, ``offs`` (G,) int32 on the device the cumulative end row of each group; returns (T, N)
      where rows ``offs[g-1]:offs[g]`` are ``a[offs[g-1]:offs[g]] @ b[g]`` (rows past ``offs[-1]`` are
      not written). b may be a transposed view (``w.transpose(-2, -1)`` of (G, N, K) weights: the
      fastest kernels) or K x N row-major. The group sizes stay on the device: nothing synchronises,
      and one captured graph serves every routing.
    * 3-D x 3-D (batched): a (G, M, K), b (G, K, N) -> (G, M, N), no ``offs``.

    Inputs are bf16 or f16; ``out_dtype`` defaults to a's (bf16 -> float32 is supported). Runs on
    torch's current stream (``stream=`` otherwise); capturable by torch.cuda.graph. Not differentiable:
    the result carries no autograd history.

    Raises:
        InvalidArgumentError: shapes, dtypes, devices, strides or offs break a rule.
        UnsupportedError: 2-D x 2-D and 3-D x 2-D (groups along K or N) or a dtype / arch without a kernel.
    """
    torch = _torch_of(a)
    na, nb = _ndim(a), _ndim(b)
    if na == 2 and nb == 3:
        if offs is None:
            raise InvalidArgumentError("offs=None: the 2-D x 3-D grouped_mm needs offs, the (G,) int32 cumulative "
                                       "end rows of the groups")
        shape = (int(a.shape[0]), int(b.shape[2]))
    elif na == 3 and nb == 3:
        if offs is not None:
            raise InvalidArgumentError("offs must be None for the 3-D x 3-D (batched) grouped_mm")
        shape = (int(a.shape[0]), int(a.shape[1]), int(b.shape[2]))
    else:
        raise UnsupportedError(f"grouped_mm of a {na}-D a and a {nb}-D b: cuactor has kernels for 2-D x 3-D (groups "
                               "of rows of a, offs) and 3-D x 3-D (batched); 2-D x 2-D (groups along K) and 3-D x 2-D "
                               "(groups along N) are not in the library")
    out = _prepare_out(torch, a, shape, out, out_dtype, getattr(a, "dtype", None))
    s, alloc = _context(torch, a, stream)
    if na == 2:
        _core.grouped_mm(a, b, offs, out, s, alloc)
    else:
        _core.mm(a, b, out, s, alloc)
    return out


def scaled_grouped_mm(a: Any, b: Any, scale_a: Any, scale_b: Any, offs: Any = None, out: Any = None,
                      out_dtype: Any = None, *, stream: int | None = None, ab_dtype: str | None = None) -> Any:
    """fp8 (e4m3) grouped GEMM, 2-D x 3-D as :func:`grouped_mm`, with per-tensor scales:
    ``out[rows of g] = scale_a[0 or g] * scale_b[g] * (a[rows of g] @ b[g])`` in bf16.

    ``scale_a`` holds 1 or G float32 values and ``scale_b`` G float32 values, on the device. b must
    be the transposed view of (G, N, K) weights (K contiguous). ``ab_dtype="e4m3"`` reads a and b
    passed as uint8 storage (producers without fp8 DLPack types).

    Raises:
        UnsupportedError: row-wise or block-wise scales (``torch._scaled_grouped_mm``'s (T,) and (G, N)
            forms, SPEC [K10]) — cuactor's grouped fp8 kernels take per-tensor scales only — or a GPU
            below sm_90a, or 3-D x 3-D.
        InvalidArgumentError: shapes, dtypes, devices or strides break a rule.
    """
    torch = _torch_of(a)
    if _ndim(a) != 2 or _ndim(b) != 3:
        raise UnsupportedError(f"scaled_grouped_mm of a {_ndim(a)}-D a and a {_ndim(b)}-D b: cuactor's fp8 grouped "
                               "kernels take the 2-D x 3-D form (with offs) only")
    if offs is None:
        raise InvalidArgumentError("offs=None: scaled_grouped_mm needs offs, the (G,) int32 cumulative end rows")
    shape = (int(a.shape[0]), int(b.shape[2]))
    default = torch.bfloat16 if torch is not None else None
    out = _prepare_out(torch, a, shape, out, out_dtype, default)
    s, alloc = _context(torch, a, stream)
    _core.grouped_mm(a, b, offs, out, s, alloc, scale_a, scale_b, ab_dtype)
    return out
