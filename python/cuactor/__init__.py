"""cuactor from Python: CUTLASS GEMM, grouped GEMM and 2-D convolution on PyTorch / CuPy / JAX tensors
without copies, capturable by ``torch.cuda.graph``, the run-time kernel cache, and the supervised
device actor with asyncio (SPEC [P1]-[P4]).

Tensors come in through DLPack or ``__cuda_array_interface__`` (PyTorch tensors are read directly);
nothing is copied. Work runs on the caller's stream: PyTorch's current stream for torch tensors, the
``stream=`` argument (a ``cudaStream_t`` as an integer) otherwise. Errors are the classes of
:mod:`cuactor.errors`, all deriving from :class:`cuactor.Error`.
"""

from __future__ import annotations

import json
import operator
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
    "moe_expert_ffn",
    "interleave_gate_up",
    "scaled_grouped_mm",
    "conv2d",
    "conv2d_backward_data",
    "conv2d_backward_weight",
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


def _ndim(x: Any) -> int:
    n = getattr(x, "ndim", None)
    return int(n) if n is not None else len(x.shape)


def _torch_dtype(torch: Any, dtype: Any) -> Any:
    if dtype is None or isinstance(dtype, torch.dtype):
        return dtype
    names = {"bf16": "bfloat16", "f16": "float16", "f32": "float32", "fp16": "float16"}
    found = getattr(torch, names.get(dtype, dtype), None) if isinstance(dtype, str) else None
    if not isinstance(found, torch.dtype):
        raise InvalidArgumentError(f"out_dtype={dtype!r}: not a torch.dtype nor the name of one (e.g. torch.bfloat16, "
                                   f"'bf16', 'f16', 'f32')")
    return found


def _prepare_out(torch: Any, a: Any, shape: tuple[int, ...], out: Any, out_dtype: Any, default: Any,
                 rule: str = "on the device of a, rows contiguous") -> Any:
    if torch is None:
        if out is None:
            raise InvalidArgumentError(f"out=None: cuactor allocates outputs only for torch tensors; pass out= "
                                       f"({rule})")
        return out
    want = _torch_dtype(torch, out_dtype)
    if out is None:
        return a.new_empty(shape, dtype=want or default)  # a's device; cheaper to parse than torch.empty
    if want is not None and out.dtype != want:
        raise InvalidArgumentError(f"out: dtype {out.dtype} differs from out_dtype={want}")
    if tuple(out.shape) != shape:
        raise InvalidArgumentError(f"out: shape {tuple(out.shape)}, the result has shape {shape}")
    return out


def mm(a: Any, b: Any, out: Any = None, out_dtype: Any = None, *, epilogue: str | None = None, c: Any = None,
       row_scale: Any = None, col_scale: Any = None, row_bias: Any = None, col_bias: Any = None, amax: Any = None,
       aux: Any = None, row_sum: Any = None, alpha: float = 1.0, beta: float = 0.0, clamp: tuple[float, float] | None = None,
       stream: int | None = None, sku: str | None = None, split_k: int = 0, swap_ab: int = 0) -> Any:
    """``out = epilogue(a @ b)`` with a CUTLASS GEMM: (M, K) x (K, N) -> (M, N), or batched
    (B, M, K) x (B, K, N) -> (B, M, N).

    a and b have one dtype (bf16, f16; fp8 needs scales and is not exposed here); either operand may
    be transposed (one of its last two dimensions contiguous); out's rows must be contiguous.
    ``out_dtype`` defaults to a's (bf16 inputs may write float32 on sm_90a). No allocation besides
    ``out`` when it is None (torch), no synchronisation: capturable by torch.cuda.graph.

    ``epilogue`` fuses elementwise work into the GEMM (sm_90a): a tree token over the accumulator
    ``acc`` and the operands ``c``, ``alpha``, ``beta``, ``rowscale``, ``colscale``, ``rowbias``,
    ``colbias`` with ``add``, ``mul``, ``fma``, ``relu``, ``gelu``, ``gelutanh``, ``silu``,
    ``sigmoid``, ``clamp``, and the side outputs ``amax``, ``aux`` and ``rowsum``, e.g.
    ``"silu(add(acc,colbias))"`` for a Linear layer with bias and SiLU, or
    ``"gelu(aux(add(acc,colbias)))"`` to keep the pre-activation for a backward pass. Vectors are
    contiguous 1-D tensors: scales float32, biases out's dtype (rows: M values, columns: N; shared by
    every batch). Side outputs pass their input through and are overwritten by each call: ``amax``
    (one float32) receives max |x|, ``aux`` (out's shape, strides and dtype) x itself, ``row_sum``
    (float32, contiguous, (M,) or batched (B, M)) the sum of x over each row, added atomically across
    thread blocks (the last bits vary run to run). ``clamp`` is (lo, hi). Trees outside the catalog are compiled by
    the JIT on first use (about a minute, then cached on disk).

    ``sku`` (a dense kernel's SKU text, as ``cuactor kernels`` lists them) runs exactly that catalog kernel
    instead of the plan's choice: for tuning and benchmarks. ``split_k``: 0 lets the plan split K where a
    16-bit decode problem's grid of tiles leaves most SMs idle, 1 never splits, 2..16 forces that many K
    slices (float32 partial products in the workspace, added in order: deterministic); it takes the
    linear combination of bf16/f16 inputs, row-major A and out, b transposed (a Linear's weight).
    ``swap_ab`` (same problems): 0 lets the plan compute up to 32 rows (64 on grids of few tiles) as
    out^T = b^T a^T, whose kernel tiles 64 weight rows by 16 or 32 rows of a; 1 never; 2 always.

    Raises:
        InvalidArgumentError: shapes, dtypes, devices, strides or the epilogue token break a rule.
        UnsupportedError: no kernel of this build computes the combination on this GPU, or ``sku`` is not
            compiled into its catalog.
    """
    sku = _sku_text(sku)
    split_k = _plan_int("split_k", split_k, "0: the plan decides, 1: never, 2..16 slices")
    swap_ab = _plan_int("swap_ab", swap_ab, "0: the plan decides, 1: never, 2: always")
    torch = _torch_of(a)
    nd = _ndim(a)
    if nd not in (2, 3) or _ndim(b) != nd:
        raise InvalidArgumentError(f"mm takes (M, K) x (K, N) or (B, M, K) x (B, K, N); got a rank {nd} and b rank "
                                   f"{_ndim(b)}")
    shape = (*tuple(a.shape[:-1]), int(b.shape[-1]))
    out = _prepare_out(torch, a, tuple(int(s) for s in shape), out, out_dtype, getattr(a, "dtype", None))
    lo, hi = clamp if clamp is not None else (-3.4028234663852886e38, 3.4028234663852886e38)
    _core.mm(a, b, out, stream, None, epilogue, c, row_scale, col_scale, row_bias, col_bias, amax, aux, row_sum,
             float(alpha), float(beta), float(lo), float(hi), sku, split_k, swap_ab)
    return out


def moe_expert_ffn(x: Any, w_gate_up: Any, w_down: Any, offs: Any, routing_weights: Any = None, out: Any = None, *,
                   stream: int | None = None, gate_up_interleaved: bool = False, swiglu: str = "auto") -> Any:
    """The mixture-of-experts expert FFN with SwiGLU, on rows already grouped by expert.

    For expert e and its rows ``offs[e-1]:offs[e]`` of ``x`` (T, H)::

        h = x @ w_gate_up[e].T                 # (rows, 2F): gate then up
        a = silu(h[:, :F]) * h[:, F:]
        out = routing_weights[:, None] * (a @ w_down[e].T)

    ``w_gate_up`` is (E, 2F, H) and ``w_down`` (E, H, F), as ``nn.Linear`` stores weights; ``offs`` (E,)
    int32 cumulative end rows stay in device memory (no synchronisation: one torch.cuda.graph capture
    serves every routing); ``routing_weights`` (T,) float32 or None (weight 1). The weights are applied
    in the down projection's epilogue. bf16 or f16; rows past ``offs[-1]`` of ``out`` are not written.
    Returns ``out`` (allocated like x when None).

    With ``gate_up_interleaved=True``, ``w_gate_up`` holds gate row f at row 2f and up row f at row
    2f + 1 (convert once with :func:`interleave_gate_up`), and the first GEMM's epilogue can compute the
    SwiGLU: the (rows, 2F) intermediate is then never written. ``swiglu`` says where it runs: ``"auto"``
    (the epilogue where this build has the fused form of the GEMM kernel the expert size takes),
    ``"epilogue"`` (always: that fused kernel, else any fused kernel of the dtype; needs interleaved
    weights) or ``"separate"`` (one elementwise kernel, the only form for stacked weights).

    Raises:
        InvalidArgumentError: shapes, dtypes, devices or contiguity break a rule (the message says which).
        UnsupportedError: no kernel of this build computes the dtype on this GPU (or, with
            ``swiglu="epilogue"``, fuses the SwiGLU for it).
    """
    torch = _torch_of(x)
    out = _prepare_out(torch, x, (int(x.shape[0]), int(x.shape[1])), out, None, getattr(x, "dtype", None))
    _core.moe_expert_ffn(x, w_gate_up, w_down, offs, routing_weights, out, stream, None, bool(gate_up_interleaved),
                         str(swiglu))
    return out


def interleave_gate_up(w_gate_up: Any, out: Any = None, *, stream: int | None = None) -> Any:
    """Stacked gate/up weights (E, 2F, H) in the row order ``moe_expert_ffn(gate_up_interleaved=True)`` takes.

    Row 2f of each expert is its gate row f (``w_gate_up[e, f]``) and row 2f + 1 its up row f
    (``w_gate_up[e, F + f]``). A one-time conversion when the weights are loaded; bf16 or f16, on
    ``stream`` (torch's current stream for torch tensors). Returns ``out`` (allocated like
    ``w_gate_up`` when None), which must not overlap ``w_gate_up``.

    Raises:
        InvalidArgumentError: shape, dtype, device, contiguity or overlap break a rule.
    """
    torch = _torch_of(w_gate_up)
    shape = tuple(int(d) for d in getattr(w_gate_up, "shape", ()))
    out = _prepare_out(torch, w_gate_up, shape, out, None, getattr(w_gate_up, "dtype", None))
    _core.interleave_gate_up(w_gate_up, out, stream)
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
    if out is None and stream is None:
        # torch tensors on torch's current stream: the whole call in C++ (None: take the general path).
        made = _core.grouped_mm_torch(a, b, offs, out_dtype)
        if made is not None:
            return made
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
    if na == 2:
        _core.grouped_mm(a, b, offs, out, stream)
    else:
        _core.mm(a, b, out, stream)
    return out


def scaled_grouped_mm(a: Any, b: Any, scale_a: Any, scale_b: Any, offs: Any = None, out: Any = None,
                      out_dtype: Any = None, *, stream: int | None = None, ab_dtype: str | None = None) -> Any:
    """fp8 (e4m3) grouped GEMM, 2-D x 3-D as :func:`grouped_mm`, in bf16, with per-tensor or row-wise scales.

    * Per-tensor: ``scale_a`` holds 1 or G float32 values and ``scale_b`` G values (1-D);
      ``out[rows of g] = scale_a[0 or g] * scale_b[g] * (a[rows of g] @ b[g])``.
    * Row-wise, as ``torch._scaled_grouped_mm``: ``scale_a`` (T,) one value per row of a and ``scale_b``
      (G, N) one value per group and column (a 2-D ``scale_b`` selects this form);
      ``out[t, n] = scale_a[t] * scale_b[g, n] * (a[t] @ b[g])[n]`` for the rows t of group g, applied
      in the kernel's epilogue.

    Scales are float32 on the device (contiguous). b must be the transposed view of (G, N, K) weights
    (K contiguous). ``ab_dtype="e4m3"`` reads a and b passed as uint8 storage (producers without fp8
    DLPack types).

    Raises:
        UnsupportedError: block-wise scales (SPEC [K10]), a GPU below sm_90a (row-wise: sm_90a), 3-D x 3-D, or
            row-wise scales with K=0.
        InvalidArgumentError: shapes, dtypes, devices or strides break a rule (row-wise scales must also start
            16-byte aligned).
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
    _core.grouped_mm(a, b, offs, out, stream, None, scale_a, scale_b, ab_dtype)
    return out


def _sku_text(sku: Any) -> str | None:
    """``sku`` for _core: None or a str (the binding would raise a bare TypeError for anything else)."""
    if sku is not None and not isinstance(sku, str):
        raise InvalidArgumentError(f"sku={sku!r}: give a kernel's SKU text (a str, as `cuactor kernels` lists them)")
    return sku


def _plan_int(name: str, value: Any, meaning: str) -> int:
    """A plan option for _core, which takes a 32-bit int and names the rule of its range (``meaning``)."""
    if (v := _as_int(value)) is None:
        raise InvalidArgumentError(f"{name}={value!r}: give an int ({meaning})")
    if not -2**31 <= v < 2**31:
        raise InvalidArgumentError(f"{name}={value!r}: does not fit a 32-bit int ({meaning})")
    return v


def _as_int(v: Any) -> int | None:
    """``v`` as an int if it is an integer (numpy and torch integers too) and not a bool, else None."""
    if isinstance(v, bool):
        return None
    try:
        return operator.index(v)
    except TypeError:
        return None


def _pair(name: str, value: Any, least: int) -> tuple[int, int]:
    """(height, width) of an argument given as an int or a pair of ints, each at least ``least``."""
    one = _as_int(value)
    if one is not None:
        pair = (one, one)
    elif isinstance(value, (tuple, list)) and len(value) == 2 and None not in (both := tuple(map(_as_int, value))):
        pair = both
    else:
        raise InvalidArgumentError(f"{name}={value!r}: must be an int or a pair of ints (height, width)")
    if min(pair) < least:
        raise InvalidArgumentError(f"{name}={value!r}: must be at least {least}")
    return pair  # type: ignore[return-value]


def _conv_params(stride: Any, padding: Any, dilation: Any) -> tuple[tuple[int, int], ...]:
    return _pair("stride", stride, 1), _pair("padding", padding, 0), _pair("dilation", dilation, 1)


def _shape4(name: str, t: Any, dims: str) -> tuple[int, int, int, int]:
    """The shape of a rank-4 operand (``dims`` names its dimensions)."""
    if _ndim(t) != 4:
        raise InvalidArgumentError(f"{name}: rank {_ndim(t)} (shape {tuple(t.shape)}), the convolution takes a rank-4 "
                                   f"{dims} tensor, packed with the channels contiguous")
    return tuple(int(v) for v in t.shape)  # type: ignore[return-value]


def _conv_output_hw(hw: tuple[int, int], rs: tuple[int, int], stride: tuple[int, int], padding: tuple[int, int],
                    dilation: tuple[int, int]) -> tuple[int, int]:
    """(P, Q): P = (H + 2 pad_h - dilation_h (R - 1) - 1) // stride_h + 1, likewise Q; at least 1."""
    pq = tuple((x + 2 * p - d * (k - 1) - 1) // s + 1 for x, k, s, p, d in zip(hw, rs, stride, padding, dilation))
    if min(pq) < 1:
        raise InvalidArgumentError(
            f"the output would be {pq[0]}x{pq[1]} (P = (H + 2 pad_h - dilation_h (R - 1) - 1) // stride_h + 1): the "
            f"padded input ({hw[0] + 2 * padding[0]}x{hw[1] + 2 * padding[1]}) must hold the dilated filter "
            f"({dilation[0] * (rs[0] - 1) + 1}x{dilation[1] * (rs[1] - 1) + 1})")
    return pq  # type: ignore[return-value]


def _require_dy_shape(dy_shape: tuple[int, ...], hw: tuple[int, int], rs: tuple[int, int],
                      params: tuple[tuple[int, int], ...], given: str) -> None:
    """Checks that dy's P x Q is what the input size ``hw`` and the filter ``rs`` give."""
    want = _conv_output_hw(hw, rs, *params)
    if want != dy_shape[1:3]:
        raise InvalidArgumentError(f"dy: shape {dy_shape}, but {given} with stride={params[0]}, padding={params[1]}, "
                                   f"dilation={params[2]} gives P x Q = {want[0]} x {want[1]}")


def _split_counts(split: Any, counts: tuple[int, int, int]) -> tuple[int, int, int]:
    """``counts`` (images, rows, channels) for _core, which takes 64-bit ints and names the rules of
    each count; a count beyond 64 bits is refused here, as _core's conversion would raise TypeError."""
    for v in counts:
        if not -2**63 <= v < 2**63:
            raise InvalidArgumentError(f"split={split!r}: {v} does not fit a 64-bit int")
    return counts


def _wgrad_split(split: Any) -> tuple[int, int, int]:
    """A wgrad ``split``, an (images, rows) pair of ints, as the (images, rows, channels) of _core."""
    if not isinstance(split, (tuple, list)) or len(split) != 2 or None in (pair := tuple(map(_as_int, split))):
        raise InvalidArgumentError(f"split={split!r}: give a pair of ints (images, rows)")
    return _split_counts(split, (*pair, 1))  # type: ignore[arg-type]


def _fprop_split(split: Any) -> tuple[int, int, int]:
    """An fprop ``split``, a count of input-channel ranges, as the (images, rows, channels) of _core."""
    if (channels := _as_int(split)) is None:
        raise InvalidArgumentError(f"split={split!r}: give an int (how many ranges of input channels)")
    return _split_counts(split, (1, 1, channels))


def _conv_launch(run: Any, a: Any, b: Any, shape: tuple[int, ...], params: tuple[tuple[int, int], ...],
                 out: Any, stream: int | None, sku: str | None, split: tuple[int, int, int] | None = None) -> Any:
    """Allocates the result (torch, out=None) and runs ``run`` (a _core.conv2d* function) on the stream."""
    torch = _torch_of(a)
    out = _prepare_out(torch, a, shape, out, None, getattr(a, "dtype", None),
                       "on the device of the inputs, packed with the channels contiguous")
    run(a, b, out, stream, *params, None, _sku_text(sku), split)
    return out


def conv2d(x: Any, w: Any, *, stride: int | tuple[int, int] = 1, padding: int | tuple[int, int] = 0,
           dilation: int | tuple[int, int] = 1, out: Any = None, stream: int | None = None,
           sku: str | None = None, split: int | None = None) -> Any:
    """2-D convolution forward (cross-correlation, as ``torch.nn.functional.conv2d``) with a CUTLASS
    implicit-GEMM kernel, on channels-last tensors: x (N, H, W, C) and w (K, R, S, C) -> (N, P, Q, K)
    with P = (H + 2 padding_h - dilation_h (R - 1) - 1) // stride_h + 1, likewise Q.

    Every tensor must be packed in that order (channels contiguous). A PyTorch tensor in the
    ``channels_last`` memory format, NCHW (or KCRS) by shape, is exactly such a tensor seen through
    ``t.permute(0, 2, 3, 1)`` (a view, no copy); ``y.permute(0, 3, 1, 2)`` turns the result back into
    an NCHW ``channels_last`` tensor. ``stride``, ``padding`` (symmetric) and ``dilation`` are ints or
    (height, width) pairs. x and w have one dtype (bf16, f16, or f32 on tf32 tensor cores); the result
    has it too. C and K must be multiples of 8 (16-bit) or 4 (f32). Runs on torch's current stream
    (``stream=`` otherwise); capturable by torch.cuda.graph. Not differentiable: the result carries no
    autograd history (see :func:`conv2d_backward_data` and :func:`conv2d_backward_weight`).
    ``sku`` (a kernel's SKU text, as ``cuactor kernels`` lists them) runs exactly that catalog kernel
    instead of the heuristic's choice: for tuning and benchmarks. A pointwise convolution (1x1 filter,
    unit stride, no padding) is a GEMM; on grids of few tiles over many input channels the plan runs it
    on a dense GEMM kernel, and ``sku`` may name one (``dense:...:row,col,row:...``) for such a
    convolution. ``split`` slices the input channels into
    that many ranges, each reduced into fp32 partial outputs that a second kernel sums, instead of the
    plan's own choice (which splits small grids where its time model expects a tenth less time, such as
    3x3 filters over a few tiles): for tuning and benchmarks. Its rules: 1 to 16 ranges, at most one per
    K step of the kernel's tile, above 1 only on a kernel that splits channels (the one-warpgroup 64x64
    tile of bf16 / f16 tensors).

    Raises:
        InvalidArgumentError: shapes, dtypes, devices, layouts or stride / padding / dilation break a rule.
        UnsupportedError: no kernel of this build computes it on this GPU (sm_90a only; groups, fp8, TMA
            im2col limits on padding and dilated filter extent), or ``split`` on a kernel that does not split.
    """
    n, h, wd, _ = _shape4("x", x, "N x H x W x C")
    k, r, s, _ = _shape4("w", w, "K x R x S x C")
    params = _conv_params(stride, padding, dilation)
    p, q = _conv_output_hw((h, wd), (r, s), *params)
    return _conv_launch(_core.conv2d, x, w, (n, p, q, k), params, out, stream, sku,
                        None if split is None else _fprop_split(split))


def conv2d_backward_data(dy: Any, w: Any, input_hw: int | tuple[int, int], *, stride: int | tuple[int, int] = 1,
                         padding: int | tuple[int, int] = 0, dilation: int | tuple[int, int] = 1, out: Any = None,
                         stream: int | None = None, sku: str | None = None) -> Any:
    """The data gradient of :func:`conv2d`: dx (N, H, W, C) from dy (N, P, Q, K) and w (K, R, S, C), as
    ``torch.nn.grad.conv2d_input`` on channels-last tensors. ``input_hw`` = (H, W) of x (several
    input sizes give one output size when the stride is above 1).

    The layout, dtype, stream and sku rules are those of :func:`conv2d` (bf16 and f16 only).

    Raises:
        InvalidArgumentError: shapes, dtypes, devices, layouts or stride / padding / dilation break a rule.
        UnsupportedError: a stride above 1 with a dilation above 1 (no strided-dgrad kernel takes
            one), f32, or what :func:`conv2d` cannot compute either. Strided dgrad runs on the sm_80
            (CUTLASS 2.x) kernels, on Hopper too.
    """
    dy_shape = _shape4("dy", dy, "N x P x Q x K")
    _, r, s, c = _shape4("w", w, "K x R x S x C")
    hw = _pair("input_hw", input_hw, 1)
    params = _conv_params(stride, padding, dilation)
    _require_dy_shape(dy_shape, hw, (r, s), params, f"input_hw={hw} and the filter {r}x{s}")
    return _conv_launch(_core.conv2d_backward_data, dy, w, (dy_shape[0], *hw, c), params, out, stream, sku)


def conv2d_backward_weight(dy: Any, x: Any, filter_rs: int | tuple[int, int], *, stride: int | tuple[int, int] = 1,
                           padding: int | tuple[int, int] = 0, dilation: int | tuple[int, int] = 1, out: Any = None,
                           stream: int | None = None, sku: str | None = None,
                           split: tuple[int, int] | None = None) -> Any:
    """The filter gradient of :func:`conv2d`: dw (K, R, S, C) from dy (N, P, Q, K) and x (N, H, W, C), as
    ``torch.nn.grad.conv2d_weight`` on channels-last tensors. ``filter_rs`` = (R, S).

    The layout, dtype, stream and sku rules are those of :func:`conv2d` (bf16 and f16 only). ``split``
    = (images, rows) slices the reduction over N x P x Q into that many fp32 partial filter gradients
    (summed by a second kernel) instead of the cost model's choice: for tuning and benchmarks. Its
    rules: images in [1, N], rows in [1, P], at most 32 slices, rows > 1 only with images = N.

    Raises:
        InvalidArgumentError: shapes, dtypes, devices, layouts or stride / padding / dilation break a rule.
        UnsupportedError: f32, or what :func:`conv2d` cannot compute either.
    """
    dy_shape = _shape4("dy", dy, "N x P x Q x K")
    _, h, wd, c = _shape4("x", x, "N x H x W x C")
    rs = _pair("filter_rs", filter_rs, 1)
    params = _conv_params(stride, padding, dilation)
    _require_dy_shape(dy_shape, (h, wd), rs, params, f"x's {h}x{wd} and filter_rs={rs}")
    return _conv_launch(_core.conv2d_backward_weight, dy, x, (dy_shape[3], *rs, c), params, out, stream, sku,
                        None if split is None else _wgrad_split(split))
