"""GPU tests of the cuactor package: numerics against torch._grouped_mm / torch.mm / cuDNN's
convolutions and an fp64 reference, torch.cuda.graph capture, the plan objects, the DLPack and
__cuda_array_interface__ paths, and the asyncio device actor. Marked ``gpu``: they skip without a
CUDA device and fail under CUACTOR_REQUIRE_GPU=1."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import pytest

import cuactor

pytestmark = pytest.mark.gpu

TOL = {"bfloat16": 2e-2, "float16": 5e-3, "float32": 2e-2}  # relative Frobenius error vs fp64


def rel_err(torch, got, ref):
    got, ref = got.double(), ref.double()
    return (torch.linalg.norm(got - ref) / torch.linalg.norm(ref).clamp_min(1e-30)).item()


def moe_operands(torch, groups=8, k=256, n=512, dtype=None, b_transposed=True, rows=None, tokens=None):
    """a (T, K), b (G, K, N) (a transposed view of (G, N, K) weights when b_transposed), offs."""
    dtype = dtype or torch.bfloat16
    rows = rows or [64 * (g % 3) + 8 * g for g in range(groups)]  # includes empty groups
    total = sum(rows)
    tokens = tokens or total
    a = torch.randn(tokens, k, device="cuda", dtype=dtype)
    if b_transposed:
        b = torch.randn(groups, n, k, device="cuda", dtype=dtype).transpose(-2, -1)
    else:
        b = torch.randn(groups, k, n, device="cuda", dtype=dtype)
    offs = torch.tensor(rows, device="cuda", dtype=torch.int32).cumsum(0, dtype=torch.int32)
    return a, b, offs


def reference(torch, a, b, offs):
    """fp64 per group: out[rows of g] = a[rows of g] @ b[g]; rows past offs[-1] are left at 0."""
    out = torch.zeros(a.shape[0], b.shape[2], dtype=torch.float64, device=a.device)
    start = 0
    for g, end in enumerate(offs.tolist()):
        out[start:end] = a[start:end].double() @ b[g].double()
        start = end
    return out


@pytest.mark.parametrize("b_transposed", [True, False], ids=["b_col", "b_row"])
def test_grouped_mm_2d_3d_matches_torch(torch_cuda, b_transposed):
    torch = torch_cuda
    a, b, offs = moe_operands(torch, b_transposed=b_transposed)
    end = int(offs[-1])
    out = cuactor.grouped_mm(a, b, offs)
    assert out.shape == (a.shape[0], b.shape[2]) and out.dtype == torch.bfloat16
    ref = reference(torch, a, b, offs)
    assert rel_err(torch, out[:end], ref[:end]) < TOL["bfloat16"]
    if hasattr(torch, "_grouped_mm") and torch.cuda.get_device_capability() >= (9, 0):
        theirs = torch._grouped_mm(a, b, offs=offs)
        assert rel_err(torch, out[:end], theirs[:end].double()) < TOL["bfloat16"]


def test_grouped_mm_out_dtype_float32_and_padding_rows(torch_cuda):
    torch = torch_cuda
    a, b, offs = moe_operands(torch, tokens=None)
    a = torch.cat([a, torch.randn(24, a.shape[1], device="cuda", dtype=a.dtype)])  # capacity beyond offs[-1]
    out = torch.full((a.shape[0], b.shape[2]), 7.0, device="cuda", dtype=torch.float32)
    cuactor.grouped_mm(a, b, offs, out=out, out_dtype=torch.float32)
    end = int(offs[-1])
    assert rel_err(torch, out[:end], reference(torch, a, b, offs)[:end]) < TOL["float32"]
    assert bool((out[end:] == 7.0).all()), "rows past offs[-1] must not be written"


def test_grouped_mm_fast_path_equals_the_general_path(torch_cuda):
    # out=None on torch's current stream runs wholly in C++ (_core.grouped_mm_torch); stream= or a
    # dtype given by name takes the Python path. Both must give the same bits, on a side stream too.
    torch = torch_cuda
    a, b, offs = moe_operands(torch, groups=6, k=128, n=256)
    end = int(offs[-1])
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fast = cuactor.grouped_mm(a, b, offs)
        fast32 = cuactor.grouped_mm(a, b, offs, out_dtype=torch.float32)
        general = cuactor.grouped_mm(a, b, offs, stream=side.cuda_stream)
        general32 = cuactor.grouped_mm(a, b, offs, out_dtype="f32")
    side.synchronize()
    assert fast.dtype == torch.bfloat16 and fast32.dtype == torch.float32 and general32.dtype == torch.float32
    assert fast.device == a.device and fast.shape == (a.shape[0], b.shape[2])
    assert torch.equal(fast[:end], general[:end]) and torch.equal(fast32[:end], general32[:end])
    assert rel_err(torch, fast32[:end], reference(torch, a, b, offs)[:end]) < TOL["float32"]
    # Errors still come from the general path, with its messages.
    with pytest.raises(cuactor.InvalidArgumentError, match="needs offs"):
        cuactor.grouped_mm(a, b)
    with pytest.raises(cuactor.InvalidArgumentError, match="must be in CUDA device memory"):
        cuactor.grouped_mm(a.cpu(), b, offs)
    with pytest.raises(cuactor.InvalidArgumentError, match="K=64 does not match"):
        cuactor.grouped_mm(a, b[:, :64, :], offs)
    for bad in (5, "cuda", "float7", torch):  # an int, a torch attribute that is no dtype, no such name
        with pytest.raises(cuactor.InvalidArgumentError, match="out_dtype=.*not a torch.dtype"):
            cuactor.grouped_mm(a, b, offs, out_dtype=bad)


def test_grouped_mm_3d_3d_batched(torch_cuda):
    torch = torch_cuda
    a = torch.randn(4, 128, 256, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(4, 512, 256, device="cuda", dtype=torch.bfloat16).transpose(-2, -1)
    out = cuactor.grouped_mm(a, b)
    ref = a.double() @ b.double()
    assert rel_err(torch, out, ref) < TOL["bfloat16"]
    if hasattr(torch, "_grouped_mm") and torch.cuda.get_device_capability() >= (9, 0):
        assert rel_err(torch, out, torch._grouped_mm(a, b).double()) < TOL["bfloat16"]


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_mm_matches_torch(torch_cuda, dtype):
    torch = torch_cuda
    dt = getattr(torch, dtype)
    a = torch.randn(384, 256, device="cuda", dtype=dt)
    w = torch.randn(512, 256, device="cuda", dtype=dt)
    out = cuactor.mm(a, w.t())
    assert rel_err(torch, out, a.double() @ w.double().t()) < TOL[dtype]
    assert rel_err(torch, out, torch.mm(a, w.t()).double()) < TOL[dtype]


def test_mm_runs_the_sku_it_is_given(torch_cuda):
    torch = torch_cuda
    a = torch.randn(200, 256, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(136, 256, device="cuda", dtype=torch.bfloat16)
    pingpong = "dense:sm_90a:bf16,bf16,bf16,bf16,f32:row,col,row:64x128x128:1x1x1:s0:pingpong:linear_combination"
    out = cuactor.mm(a, w.t(), sku=pingpong)
    assert rel_err(torch, out, a.double() @ w.double().t()) < TOL["bfloat16"]
    with pytest.raises(cuactor.errors.InvalidArgumentError, match=r"GemmSku 'fastest': expected 9"):
        cuactor.mm(a, w.t(), sku="fastest")
    with pytest.raises(cuactor.errors.InvalidArgumentError, match="does not compute the problem"):
        cuactor.mm(a, w.t(), sku=pingpong.replace("row,col,row", "row,row,row"))
    with pytest.raises(cuactor.errors.UnsupportedError, match="is not compiled into this build's catalog"):
        cuactor.mm(a, w.t(), sku=pingpong.replace("64x128x128", "64x8x64"))


@pytest.mark.parametrize("m", [1, 16, 24, 48])
def test_mm_decode_swapped_and_split_match_fp64(torch_cuda, m):
    # Decode rows: the plan's choice, always swapped, never swapped, and forced splits, each against fp64,
    # outputs poisoned first. A build without the swapped or slice kernels says which it lacks.
    torch = torch_cuda
    a = torch.randn(m, 8192, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(1024, 8192, device="cuda", dtype=torch.bfloat16) / 90.0
    ref = a.double() @ w.double().t()
    for options in ({}, {"swap_ab": 2}, {"swap_ab": 1}, {"split_k": 4}, {"split_k": 8, "swap_ab": 2},
                    {"split_k": 2, "swap_ab": 1}):
        out = torch.full((m, 1024), float("nan"), device="cuda", dtype=torch.bfloat16)
        try:
            cuactor.mm(a, w.t(), out=out, **options)
        except cuactor.errors.UnsupportedError as e:
            assert "is not compiled into this build's catalog" in str(e), e
            continue
        assert rel_err(torch, out, ref) < TOL["bfloat16"], options
    with pytest.raises(cuactor.errors.InvalidArgumentError, match="swap_ab=3 must be 0"):
        cuactor.mm(a, w.t(), swap_ab=3)
    with pytest.raises(cuactor.errors.UnsupportedError, match="split_k=3: .*multiple of"):
        cuactor.mm(a[:, :8000], w[:, :8000].t(), split_k=3)


def test_mm_runs_on_the_current_stream(torch_cuda):
    torch = torch_cuda
    a = torch.randn(256, 256, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(256, 256, device="cuda", dtype=torch.bfloat16)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        out = cuactor.mm(a, b)
        ref = torch.mm(a, b)
    s.synchronize()
    assert rel_err(torch, out, ref.double()) < TOL["bfloat16"]


def test_grouped_mm_under_cuda_graph_serves_every_routing(torch_cuda):
    torch = torch_cuda
    groups, k, n, tokens = 8, 256, 512, 1024
    a = torch.randn(tokens, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(groups, n, k, device="cuda", dtype=torch.bfloat16).transpose(-2, -1)
    offs = torch.zeros(groups, device="cuda", dtype=torch.int32)
    out = torch.zeros(tokens, n, device="cuda", dtype=torch.bfloat16)

    def route(rows):
        offs.copy_(torch.tensor(rows, dtype=torch.int32).cumsum(0, dtype=torch.int32))

    route([tokens // groups] * groups)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm up (plans, caches) outside the capture, as torch recommends
        cuactor.grouped_mm(a, b, offs, out=out)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        cuactor.grouped_mm(a, b, offs, out=out)
    for rows in ([128] * 8, [0, 300, 0, 200, 100, 0, 324, 100], [1024, 0, 0, 0, 0, 0, 0, 0], [17, 33, 0, 5, 99, 1, 0, 7]):
        route(rows)
        out.zero_()
        g.replay()
        torch.cuda.synchronize()
        end = sum(rows)
        captured = out[:end].clone()
        eager = cuactor.grouped_mm(a, b, offs)[:end]
        assert torch.equal(captured, eager), f"replay differs from eager for rows {rows}"
        assert rel_err(torch, captured, reference(torch, a, b, offs)[:end]) < TOL["bfloat16"]


def test_plan_objects_prepare_once_run_many(torch_cuda):
    torch = torch_cuda
    a, b, offs = moe_operands(torch)
    out = torch.empty(a.shape[0], b.shape[2], device="cuda", dtype=torch.bfloat16)
    plan = cuactor.GroupedGemmPlan("bf16", "bf16", layout_b="col", device=0)
    assert plan.sku.startswith("grouped:")
    prepared = plan.prepare(a, b, offs, out)
    assert prepared.group_count == b.shape[0] and prepared.sku == plan.sku and prepared.workspace_size > 0
    ws = torch.empty(prepared.workspace_size, dtype=torch.uint8, device="cuda")
    stream = torch.cuda.current_stream().cuda_stream
    for _ in range(3):
        prepared.run(stream, ws)
    end = int(offs[-1])
    assert rel_err(torch, out[:end], reference(torch, a, b, offs)[:end]) < TOL["bfloat16"]
    small = torch.empty(16, dtype=torch.uint8, device="cuda")
    with pytest.raises(cuactor.WorkspaceTooSmallError):
        prepared.run(stream, small)
    with pytest.raises(cuactor.errors.InvalidArgumentError, match="layout_b"):
        plan.prepare(a, b.contiguous(), offs, out)


class DLPackOnly:
    """Exports a tensor through DLPack only (as CuPy and JAX arrays do)."""

    def __init__(self, t):
        self._t = t
        self.shape, self.ndim = tuple(t.shape), t.ndim

    def __dlpack__(self, **kw):
        return self._t.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self._t.__dlpack_device__()


class CaiOnly:
    """Exports a tensor through __cuda_array_interface__ only (as Numba's device arrays do)."""

    def __init__(self, t):
        self._t = t
        self.shape, self.ndim = tuple(t.shape), t.ndim
        self.__cuda_array_interface__ = t.__cuda_array_interface__


@pytest.mark.parametrize("wrap", [DLPackOnly, CaiOnly], ids=["dlpack", "cuda_array_interface"])
def test_foreign_tensors_with_explicit_stream(torch_cuda, wrap):
    torch = torch_cuda
    a, b, offs = moe_operands(torch, dtype=torch.float16)
    out = torch.zeros(a.shape[0], b.shape[2], device="cuda", dtype=torch.float16)
    stream = torch.cuda.current_stream().cuda_stream
    cuactor.grouped_mm(wrap(a), wrap(b), wrap(offs), wrap(out), stream=stream)
    end = int(offs[-1])
    assert rel_err(torch, out[:end], reference(torch, a, b, offs)[:end]) < TOL["float16"]
    with pytest.raises(cuactor.errors.InvalidArgumentError, match="stream=None"):
        cuactor.grouped_mm(wrap(a), wrap(b), wrap(offs), wrap(out))


def test_validation_names_operand_value_and_rule(torch_cuda):
    torch = torch_cuda
    a, b, offs = moe_operands(torch)
    with pytest.raises(cuactor.errors.InvalidArgumentError, match=r"offs .*int32"):
        cuactor.grouped_mm(a, b, offs.long())
    with pytest.raises(cuactor.errors.InvalidArgumentError, match=r"b .*K=128 does not match a's K=256"):
        cuactor.grouped_mm(a, b[:, :128, :], offs)
    with pytest.raises(cuactor.errors.InvalidArgumentError, match="one input dtype"):
        cuactor.grouped_mm(a.half(), b, offs)
    with pytest.raises(cuactor.errors.InvalidArgumentError, match="contiguous"):
        cuactor.grouped_mm(a.t().contiguous().t(), b, offs)
    with pytest.raises(cuactor.errors.InvalidArgumentError, match="CUDA device memory"):
        cuactor.grouped_mm(a.cpu(), b, offs)
    with pytest.raises(cuactor.errors.InvalidArgumentError, match=r"K \(or N\)|K or N contiguous"):
        cuactor.grouped_mm(a, b.permute(1, 0, 2).contiguous().permute(1, 0, 2)[:, :, ::2], offs)


def test_scaled_grouped_mm_per_tensor_scales(torch_cuda):
    torch = torch_cuda
    if torch.cuda.get_device_capability() < (9, 0) or not hasattr(torch, "float8_e4m3fn"):
        pytest.skip("fp8 grouped kernels are sm_90a only")
    groups, k, n = 4, 256, 256
    a16, b16, offs = moe_operands(torch, groups=groups, k=k, n=n)
    a = (a16 / 4).to(torch.float8_e4m3fn)
    b = (b16.transpose(-2, -1).contiguous() / 4).to(torch.float8_e4m3fn).transpose(-2, -1)
    scale_a = torch.tensor([0.5], device="cuda")
    scale_b = torch.linspace(0.5, 2.0, groups, device="cuda")
    out = cuactor.scaled_grouped_mm(a, b, scale_a, scale_b, offs)
    assert out.dtype == torch.bfloat16
    ref = reference(torch, a.float(), b.float(), offs)
    start = 0
    for g, end in enumerate(offs.tolist()):
        ref[start:end] *= 0.5 * scale_b[g].item()
        start = end
    end = int(offs[-1])
    assert rel_err(torch, out[:end], ref[:end]) < TOL["bfloat16"]
    with pytest.raises(NotImplementedError, match="block-wise"):  # (G, N/128, K/128) weight blocks
        cuactor.scaled_grouped_mm(a, b, scale_a, torch.ones(groups, 2, 2, device="cuda"), offs)


def test_scaled_grouped_mm_rowwise_scales(torch_cuda):
    """torch._scaled_grouped_mm's form: scale_a (T,) per row, scale_b (G, N) per group and column."""
    torch = torch_cuda
    if torch.cuda.get_device_capability() != (9, 0) or not hasattr(torch, "float8_e4m3fn"):
        pytest.skip("row-wise fp8 grouped kernels are sm_90a only")
    groups, k, n = 6, 256, 272
    rows = [0, 37, 200, 1, 129, 64]  # an empty group, tails around the tiles
    a16, b16, offs = moe_operands(torch, groups=groups, k=k, n=n, rows=rows, tokens=sum(rows) + 24)
    a = (a16 / 2).to(torch.float8_e4m3fn)
    w = (b16.transpose(-2, -1).contiguous() / 2).to(torch.float8_e4m3fn)  # (G, N, K)
    b = w.transpose(-2, -1)
    scale_a = torch.rand(a.shape[0], device="cuda") * 0.1 + 0.01
    scale_a[40] = 0.0
    scale_b = torch.randn(groups, n, device="cuda") * 0.05
    out = torch.full((a.shape[0], n), float("nan"), device="cuda", dtype=torch.bfloat16)
    assert cuactor.scaled_grouped_mm(a, b, scale_a, scale_b, offs, out=out) is out
    ref = reference(torch, a.float(), b.float(), offs) * scale_a.double()[:, None]
    start = 0
    for g, end in enumerate(offs.tolist()):
        ref[start:end] *= scale_b[g].double()
        start = end
    end = int(offs[-1])
    assert rel_err(torch, out[:end], ref[:end]) < TOL["bfloat16"]
    assert torch.isnan(out[end:]).all(), "rows past offs[-1] must not be written"
    # The plan object, made for row-wise scales with the call's hints, runs the same kernel as the functional call.
    plan = cuactor.GroupedGemmPlan("e4m3", "bf16", rows_per_group_hint=a.shape[0] // groups, n_hint=n, k_hint=k,
                                   scales="rowwise")
    out2 = torch.full_like(out, float("nan"))
    plan.prepare(a, b, offs, out2, scale_a, scale_b).run(torch.cuda.current_stream().cuda_stream)
    torch.cuda.synchronize()
    assert torch.equal(out2[:end], out[:end])
    # Rejections name the operand and the rule.
    with pytest.raises(cuactor.errors.InvalidArgumentError, match=r"scale_a \(T,\)"):
        cuactor.scaled_grouped_mm(a, b, scale_a[:-1], scale_b, offs)
    with pytest.raises(cuactor.errors.InvalidArgumentError, match=r"scale_b \(G, N\)"):
        cuactor.scaled_grouped_mm(a, b, scale_a, scale_b[:, :-8], offs)
    with pytest.raises(cuactor.errors.InvalidArgumentError, match="float32"):
        cuactor.scaled_grouped_mm(a, b, scale_a, scale_b.double(), offs)
    with pytest.raises(cuactor.errors.InvalidArgumentError, match="contiguous"):
        cuactor.scaled_grouped_mm(a, b, scale_a, scale_b.t().contiguous().t(), offs)
    with pytest.raises(cuactor.errors.InvalidArgumentError, match="scales='tensor'"):
        cuactor.GroupedGemmPlan("e4m3", "bf16").prepare(a, b, offs, out2, scale_a, scale_b)
    with pytest.raises(cuactor.errors.InvalidArgumentError, match="scales='rowwise'"):
        plan.prepare(a, b, offs, out2, scale_a[:1], scale_b[:, 0].contiguous())
    with pytest.raises(cuactor.errors.InvalidArgumentError, match="is for e4m3 inputs; dtype is bf16"):
        cuactor.GroupedGemmPlan("bf16", "bf16", scales="rowwise")
    with pytest.raises(cuactor.errors.InvalidArgumentError, match="scales='bogus'"):
        cuactor.GroupedGemmPlan("e4m3", "bf16", scales="bogus")
    with pytest.raises(cuactor.errors.InvalidArgumentError, match=r"scale_a .* 16-byte aligned .*clone"):
        cuactor.scaled_grouped_mm(a[:-1], b, torch.ones(a.shape[0], device="cuda")[1:], scale_b, offs)


def test_scaled_grouped_mm_rowwise_matches_torch(torch_cuda):
    """The same computation as torch._scaled_grouped_mm, where this torch has it for this GPU."""
    torch = torch_cuda
    if torch.cuda.get_device_capability() != (9, 0) or not hasattr(torch, "float8_e4m3fn"):
        pytest.skip("row-wise fp8 grouped kernels are sm_90a only")
    groups, k, n = 5, 512, 384
    a16, b16, offs = moe_operands(torch, groups=groups, k=k, n=n)
    a = (a16 / 2).to(torch.float8_e4m3fn)
    b = (b16.transpose(-2, -1).contiguous() / 2).to(torch.float8_e4m3fn).transpose(-2, -1)
    scale_a = torch.rand(a.shape[0], device="cuda") * 0.1 + 0.01
    scale_b = torch.rand(groups, n, device="cuda") * 0.1 + 0.01
    try:
        theirs = torch._scaled_grouped_mm(a, b, scale_a, scale_b, offs=offs, out_dtype=torch.bfloat16,
                                          use_fast_accum=True)
    except (AttributeError, RuntimeError, TypeError, NotImplementedError) as e:
        pytest.skip(f"torch._scaled_grouped_mm is not usable here ({type(e).__name__}: {e})")
    ours = cuactor.scaled_grouped_mm(a, b, scale_a, scale_b, offs)
    end = int(offs[-1])
    assert rel_err(torch, ours[:end], theirs[:end].double()) < TOL["bfloat16"]


def test_device_actor_asyncio(torch_cuda):
    torch = torch_cuda
    np = pytest.importorskip("numpy")

    async def main():
        with cuactor.Device(0) as dev:
            x = await dev.allocate((4, 256), "f32")
            assert isinstance(x, cuactor.GpuRef) and x.shape == (4, 256) and x.is_valid()
            await dev.fill(x, 2.5)
            host = await dev.copy_to_host(x)
            assert host.shape == (4, 256) and float(host.sum()) == 2.5 * 1024
            src = np.arange(1024, dtype=np.float32).reshape(4, 256)
            await dev.copy_to_device(x, src)
            assert np.array_equal(await dev.copy_to_host(x), src)
            view = torch.from_dlpack(x)  # zero-copy, after the generation check
            assert view.device.type == "cuda" and torch.equal(view.cpu(), torch.from_numpy(src))
            # Many requests in flight at once, resolved on this loop.
            refs = await asyncio.gather(*(dev.allocate(64, "i32") for _ in range(32)))
            await asyncio.gather(*(dev.fill(r, i) for i, r in enumerate(refs)))
            assert [int((await dev.copy_to_host(r))[0]) for r in refs[:4]] == [0, 1, 2, 3]
            with pytest.raises(cuactor.errors.InvalidArgumentError, match="do not fit"):
                await dev.copy_to_device(refs[0], np.zeros(65, np.int32))
            h = await dev.allocate((8,), "bf16")  # bf16 has no NumPy dtype: its bits travel as uint16
            bits = np.arange(8, dtype=np.uint16) + 0x3F80
            await dev.copy_to_device(h, bits)
            assert np.array_equal(await dev.copy_to_host(h), bits)
            with pytest.raises(cuactor.errors.InvalidArgumentError, match="f16 values into a bf16 buffer"):
                await dev.copy_to_device(h, np.zeros(8, np.float16))
            stats = dev.stats()
            assert stats["generation"] >= 1

            # grouped_mm through the actor, compared with the tensor path.
            groups, k, n, rows = 4, 128, 256, [32, 0, 96, 128]
            a, b, offs = moe_operands(torch, groups=groups, k=k, n=n, rows=rows)
            ga = await dev.allocate(tuple(a.shape), "bf16")
            gb = await dev.allocate((groups, n, k), "bf16")
            go = await dev.allocate((groups,), "i32")
            gd = await dev.allocate((a.shape[0], n), "bf16")
            torch.from_dlpack(ga).copy_(a)
            torch.from_dlpack(gb).copy_(b.transpose(-2, -1))
            torch.from_dlpack(go).copy_(offs)
            torch.cuda.synchronize()
            res = await dev.grouped_mm(ga, gb, go, gd, layout_b="col")
            assert res.shape == (a.shape[0], n)
            got = torch.from_dlpack(gd)
            assert rel_err(torch, got, reference(torch, a, b, offs)) < TOL["bfloat16"]
        with pytest.raises(cuactor.DeviceShuttingDownError):
            await dev.fill(x, 1.0)

    asyncio.run(main())


def test_isolated_device_runs_in_a_worker_and_outlives_it(torch_cuda):
    """Device(isolated=True) ([R10], [P3]): the same operations through a cuactor-worker process,
    numerics against fp64; a worker killed with SIGKILL makes the old buffers stale, fails what used
    it once, and the device goes on with a new worker."""
    torch = torch_cuda
    np = pytest.importorskip("numpy")
    if not cuactor.device._worker_path():
        pytest.skip("no cuactor-worker next to the package and CUACTOR_WORKER unset")

    def bits(t):  # bf16 travels as its uint16 bits through host arrays
        return t.contiguous().view(torch.int16).cpu().numpy().view(np.uint16)

    async def main():
        with cuactor.Device(0, isolated=True) as dev:
            stats = dev.stats()
            pid = stats["worker_pid"]
            assert stats["isolated"] and pid > 0 and pid != os.getpid()
            x = await dev.allocate((4, 256), "f32")
            await dev.fill(x, 1.5)
            assert float((await dev.copy_to_host(x)).sum()) == 1.5 * 1024
            with pytest.raises(cuactor.errors.UnsupportedError):
                torch.from_dlpack(x)  # the buffer lives in the worker: no address in this process

            groups, k, n, rows = 4, 128, 256, [32, 0, 96, 128]
            a, b, offs = moe_operands(torch, groups=groups, k=k, n=n, rows=rows)
            ga = await dev.copy_to_device(await dev.allocate(tuple(a.shape), "bf16"), bits(a))
            gb = await dev.copy_to_device(await dev.allocate((groups, n, k), "bf16"), bits(b.transpose(-2, -1)))
            go = await dev.copy_to_device(await dev.allocate((groups,), "i32"), offs.cpu().numpy())
            gd = await dev.allocate((a.shape[0], n), "bf16")
            await dev.fill(gd, float("nan"))  # poisoned: every row must be written
            await dev.grouped_mm(ga, gb, go, gd, layout_b="col")
            got = torch.from_numpy((await dev.copy_to_host(gd)).view(np.int16)).view(torch.bfloat16).cuda()
            assert rel_err(torch, got, reference(torch, a, b, offs)) < TOL["bfloat16"]

            os.kill(pid, signal.SIGKILL)
            with pytest.raises((cuactor.errors.WorkerLostError, cuactor.errors.StaleHandleError)):
                await dev.fill(x, 2.0)
            deadline = time.monotonic() + 30
            while True:  # the next requests run on a new worker once the supervisor replaced it
                try:
                    y = await dev.allocate(1024, "f32")
                    break
                except cuactor.errors.WorkerLostError:
                    assert time.monotonic() < deadline, "no new worker within 30 s"
                    await asyncio.sleep(0.05)
            await dev.fill(y, 3.0)
            assert float((await dev.copy_to_host(y)).sum()) == 3.0 * 1024
            assert not x.is_valid()
            with pytest.raises(cuactor.errors.StaleHandleError):
                await dev.fill(x, 2.0)
            after = dev.stats()
            assert after["worker_restarts"] >= 1 and after["worker_pid"] not in (-1, pid)

    asyncio.run(main())


# ---- 2-D convolution: channels-last tensors against torch (cuDNN) and an fp64 reference.

CONV_TOL = {"bfloat16": 1e-2, "float16": 1e-2, "float32": 5e-3}  # relative Frobenius error; f32 runs on tf32
# (N, H, W, C, K, R, S, stride, padding, dilation): odd H and W, padding, stride 2, dilation 2, 1x1.
CONV_SHAPES = [
    (2, 17, 13, 32, 64, 3, 3, 1, 1, 1),
    (3, 15, 21, 64, 32, 3, 3, 2, 1, 1),
    (2, 19, 11, 16, 48, 3, 3, 1, 2, 2),
    (4, 9, 7, 128, 64, 1, 1, 1, 0, 1),
    (1, 23, 17, 24, 40, 5, 3, 2, (2, 1), (1, 2)),
]


@pytest.fixture
def conv_torch(torch_cuda):
    """torch on a device with cuactor's convolution kernels (sm_90a), else a skip with the reason."""
    if torch_cuda.cuda.get_device_capability() != (9, 0):
        pytest.skip("cuactor's convolution kernels are sm_90a (Hopper) only")
    return torch_cuda


def as_pair(v):
    return tuple(v) if isinstance(v, (tuple, list)) else (v, v)


def conv_ids(shape):
    n, h, w, c, k, r, s, st, pad, dil = shape
    return f"{n}x{h}x{w}x{c}-k{k}-{r}x{s}-s{st}-p{pad}-d{dil}".replace(" ", "")


def channels_last(torch, shape, dtype, scale=1.0):
    """A random NCHW-shaped tensor in the channels_last memory format and its N x H x W x C view."""
    t = (torch.randn(shape, device="cuda", dtype=torch.float32) * scale).to(dtype)
    t = t.contiguous(memory_format=torch.channels_last)
    return t, t.permute(0, 2, 3, 1)


def conv_operands(torch, shape, dtype):
    n, h, w, c, k, r, s, stride, padding, dilation = shape
    x, x_nhwc = channels_last(torch, (n, c, h, w), dtype)
    wt, w_krsc = channels_last(torch, (k, c, r, s), dtype, scale=(c * r * s) ** -0.5)
    return x, x_nhwc, wt, w_krsc, dict(stride=stride, padding=padding, dilation=dilation)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
@pytest.mark.parametrize("shape", CONV_SHAPES, ids=conv_ids)
def test_conv2d_matches_torch(conv_torch, dtype, shape):
    torch = conv_torch
    F = torch.nn.functional
    dt = getattr(torch, dtype)
    x, x_nhwc, w, w_krsc, geom = conv_operands(torch, shape, dt)
    y = cuactor.conv2d(x_nhwc, w_krsc, **geom)
    ref = F.conv2d(x.double(), w.double(), **geom)  # N, K, P, Q
    assert y.shape == ref.permute(0, 2, 3, 1).shape and y.dtype == dt and y.is_contiguous()
    assert rel_err(torch, y, ref.permute(0, 2, 3, 1)) < CONV_TOL[dtype]
    theirs = F.conv2d(x, w, **geom)
    assert rel_err(torch, y.permute(0, 3, 1, 2), theirs.double()) < CONV_TOL[dtype]
    # out= given: written in place (here the channels_last NCHW result seen as N x P x Q x K).
    out = torch.empty_like(theirs, memory_format=torch.channels_last)
    assert cuactor.conv2d(x_nhwc, w_krsc, out=out.permute(0, 2, 3, 1), **geom).data_ptr() == out.data_ptr()
    assert torch.equal(out.permute(0, 2, 3, 1), y)


def conv_backward_reference(torch, dy, x, w, geom, op):
    """dx ("dgrad") or dw ("wgrad") from aten.convolution_backward in fp64 (NCHW)."""
    stride, padding, dilation = (list(as_pair(geom[k])) for k in ("stride", "padding", "dilation"))
    mask = [op == "dgrad", op == "wgrad", False]
    grads = torch.ops.aten.convolution_backward(dy.double(), x.double(), w.double(), None, stride, padding, dilation,
                                                False, [0, 0], 1, mask)
    return grads[0] if op == "dgrad" else grads[1]


@pytest.mark.parametrize("op", ["dgrad", "wgrad"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("shape", CONV_SHAPES, ids=conv_ids)
def test_conv2d_backward_matches_torch(conv_torch, op, dtype, shape):
    torch = conv_torch
    dt = getattr(torch, dtype)
    x, x_nhwc, w, w_krsc, geom = conv_operands(torch, shape, dt)
    dy, dy_npqk = channels_last(torch, tuple(torch.nn.functional.conv2d(x, w, **geom).shape), dt)
    n, h, wd, c, k, r, s = shape[:7]
    if op == "dgrad":
        if as_pair(geom["stride"]) != (1, 1) and as_pair(geom["dilation"]) != (1, 1):
            with pytest.raises(cuactor.UnsupportedError, match="strided dgrad has no kernel for dilation"):
                cuactor.conv2d_backward_data(dy_npqk, w_krsc, (h, wd), **geom)
            return
        got, want_shape = cuactor.conv2d_backward_data(dy_npqk, w_krsc, (h, wd), **geom), (n, h, wd, c)
        theirs = torch.nn.grad.conv2d_input(tuple(x.shape), w, dy, **geom)
    else:
        got, want_shape = cuactor.conv2d_backward_weight(dy_npqk, x_nhwc, (r, s), **geom), (k, r, s, c)
        theirs = torch.nn.grad.conv2d_weight(x, tuple(w.shape), dy, **geom)
    assert got.shape == want_shape and got.dtype == dt
    ref = conv_backward_reference(torch, dy, x, w, geom, op)
    assert rel_err(torch, got, ref.permute(0, 2, 3, 1)) < CONV_TOL[dtype]
    assert rel_err(torch, got.permute(0, 3, 1, 2), theirs.double()) < CONV_TOL[dtype]


def test_conv2d_rules_on_the_device(conv_torch):
    torch = conv_torch
    x, x_nhwc, w, w_krsc, geom = conv_operands(torch, CONV_SHAPES[0], torch.bfloat16)
    with pytest.raises(cuactor.errors.InvalidArgumentError, match=r"must be packed N x H x W x C.*permute\(0, 2, 3, 1\)"):
        cuactor.conv2d(x.contiguous().permute(0, 2, 3, 1), w_krsc, **geom)  # NCHW-contiguous: channels strided
    with pytest.raises(cuactor.errors.InvalidArgumentError, match="CUDA device memory"):
        cuactor.conv2d(x_nhwc.cpu(), w_krsc, **geom)
    with pytest.raises(cuactor.errors.InvalidArgumentError, match="multiple of 8"):
        cuactor.conv2d(x_nhwc[..., :12].contiguous(), w_krsc[..., :12].contiguous(), **geom)
    dy = torch.zeros(2, 17, 13, 64, device="cuda", dtype=torch.float32)
    with pytest.raises(cuactor.UnsupportedError):  # dgrad and wgrad have 16-bit kernels only
        cuactor.conv2d_backward_data(dy, w_krsc.float(), (17, 13), **geom)
    with pytest.raises(NotImplementedError):
        cuactor.conv2d_backward_weight(dy, x_nhwc.float(), 3, **geom)
    # A forced wgrad split: the same filter gradient as the plan's own choice; splits past the rules
    # are refused naming them.
    dy16 = torch.randn(2, 17, 13, 64, device="cuda").to(torch.bfloat16)
    want = cuactor.conv2d_backward_weight(dy16, x_nhwc, 3, **geom).double()
    got = cuactor.conv2d_backward_weight(dy16, x_nhwc, 3, split=(2, 3), **geom).double()
    assert ((got - want).norm() / want.norm()).item() < 1e-2
    with pytest.raises(cuactor.errors.InvalidArgumentError, match=r"split=\(0, 1\): each count must lie in \[1, 32\]"):
        cuactor.conv2d_backward_weight(dy16, x_nhwc, 3, split=(0, 1), **geom)
    with pytest.raises(cuactor.errors.InvalidArgumentError, match="images=3 must be in"):
        cuactor.conv2d_backward_weight(dy16, x_nhwc, 3, split=(3, 1), **geom)
    # A forced fprop channel split: the plan's own output; counts past the rules and kernels that do
    # not split channels are refused naming them.
    _, x_nhwc, _, w_krsc, geom = conv_operands(torch, (4, 9, 7, 256, 64, 1, 1, 1, 0, 1), torch.bfloat16)
    want = cuactor.conv2d(x_nhwc, w_krsc, **geom).double()
    got = cuactor.conv2d(x_nhwc, w_krsc, split=4, **geom).double()
    assert ((got - want).norm() / want.norm()).item() < 1e-2
    with pytest.raises(cuactor.errors.InvalidArgumentError, match=r"split=17: the input channels split into \[1, 16\]"):
        cuactor.conv2d(x_nhwc, w_krsc, split=17, **geom)
    with pytest.raises(cuactor.errors.InvalidArgumentError, match=r"split channels=5 must be in \[1, 4\]"):
        cuactor.conv2d(x_nhwc, w_krsc, split=5, **geom)
    pingpong = "conv_fprop:sm_90a:bf16,bf16,bf16,bf16,f32:nhwc,krsc,nhwc:64x128x64:1x1x1:s0:pingpong:linear_combination"
    with pytest.raises(cuactor.errors.UnsupportedError, match="does not split channels"):
        cuactor.conv2d(x_nhwc, w_krsc, split=2, sku=pingpong, **geom)
    # A pointwise convolution on a dense GEMM kernel, named, or chosen by the plan for few tiles over many
    # channels (1 x 7 x 7 x 2048 -> 512); a 3x3 one refuses it.
    dense = "dense:sm_90a:bf16,bf16,bf16,bf16,f32:row,col,row:64x32x64:1x1x1:s0:pingpong:linear_combination"
    got = cuactor.conv2d(x_nhwc, w_krsc, sku=dense, **geom).double()
    assert ((got - want).norm() / want.norm()).item() < 1e-2
    x1, x1_nhwc, w1, w1_krsc, geom1 = conv_operands(torch, (1, 7, 7, 2048, 512, 1, 1, 1, 0, 1), torch.bfloat16)
    chosen = cuactor.conv2d(x1_nhwc, w1_krsc, **geom1).double()
    ref = torch.nn.functional.conv2d(x1.double(), w1.double()).permute(0, 2, 3, 1)
    assert ((chosen - ref).norm() / ref.norm()).item() < 1e-2
    assert torch.equal(chosen, cuactor.conv2d(x1_nhwc, w1_krsc, sku=dense, **geom1).double())
    _, x3, _, w3, geom3 = conv_operands(torch, CONV_SHAPES[1], torch.bfloat16)
    with pytest.raises(cuactor.errors.InvalidArgumentError, match="computes only fprop with a 1x1 filter"):
        cuactor.conv2d(x3, w3, sku=dense, **geom3)


def test_conv2d_runs_on_the_current_stream(conv_torch):
    torch = conv_torch
    x, x_nhwc, w, w_krsc, geom = conv_operands(torch, CONV_SHAPES[1], torch.float16)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        y = cuactor.conv2d(x_nhwc, w_krsc, **geom)
        ref = torch.nn.functional.conv2d(x, w, **geom)
    s.synchronize()
    assert rel_err(torch, y.permute(0, 3, 1, 2), ref.double()) < CONV_TOL["float16"]


@pytest.mark.parametrize("wrap", [DLPackOnly, CaiOnly], ids=["dlpack", "cuda_array_interface"])
def test_conv2d_foreign_tensors_with_explicit_stream(conv_torch, wrap):
    torch = conv_torch
    x, x_nhwc, w, w_krsc, geom = conv_operands(torch, CONV_SHAPES[0], torch.float16)
    y = torch.zeros(2, 17, 13, 64, device="cuda", dtype=torch.float16)
    cuactor.conv2d(wrap(x_nhwc), wrap(w_krsc), out=wrap(y), stream=torch.cuda.current_stream().cuda_stream, **geom)
    ref = torch.nn.functional.conv2d(x.double(), w.double(), **geom).permute(0, 2, 3, 1)
    assert rel_err(torch, y, ref) < CONV_TOL["float16"]


def test_conv2d_under_cuda_graph_replays_as_eager(conv_torch):
    torch = conv_torch
    shape = CONV_SHAPES[2]
    x, x_nhwc, w, w_krsc, geom = conv_operands(torch, shape, torch.bfloat16)
    n, h, wd, c, k, r, s = shape[:7]
    y = torch.zeros(n, h, wd, k, device="cuda", dtype=torch.bfloat16)  # padding 2, dilation 2: P x Q = H x W
    dy, dy_npqk = channels_last(torch, (n, k, h, wd), torch.bfloat16)
    dx = torch.zeros(n, h, wd, c, device="cuda", dtype=torch.bfloat16)
    dw = torch.zeros(k, r, s, c, device="cuda", dtype=torch.bfloat16)

    def step():
        cuactor.conv2d(x_nhwc, w_krsc, out=y, **geom)
        cuactor.conv2d_backward_data(dy_npqk, w_krsc, (h, wd), out=dx, **geom)
        cuactor.conv2d_backward_weight(dy_npqk, x_nhwc, (r, s), out=dw, **geom)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up (plans) outside the capture, as torch recommends
        step()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        step()
    for _ in range(2):  # new inputs in the captured buffers, then compare with eager calls
        x.copy_(torch.randn_like(x))
        dy.copy_(torch.randn_like(dy))
        for t in (y, dx, dw):
            t.zero_()
        g.replay()
        torch.cuda.synchronize()
        assert torch.equal(y, cuactor.conv2d(x_nhwc, w_krsc, **geom))
        assert torch.equal(dx, cuactor.conv2d_backward_data(dy_npqk, w_krsc, (h, wd), **geom))
        assert torch.equal(dw, cuactor.conv2d_backward_weight(dy_npqk, x_nhwc, (r, s), **geom))
        ref = torch.nn.functional.conv2d(x.double(), w.double(), **geom).permute(0, 2, 3, 1)
        assert rel_err(torch, y, ref) < CONV_TOL["bfloat16"]


@pytest.mark.parametrize("act", ["silu", "gelu", "relu"])
def test_mm_with_bias_and_activation_matches_torch(conv_torch, act):
    torch = conv_torch  # sm_90a: epilogue trees are CUTLASS Sm90EVT visitors
    a = torch.randn(300, 256, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(520, 256, device="cuda", dtype=torch.bfloat16)
    bias = torch.randn(520, device="cuda", dtype=torch.bfloat16)
    out = cuactor.mm(a, w.t(), epilogue=f"{act}(add(acc,colbias))", col_bias=bias)
    fn = {"silu": torch.nn.functional.silu, "gelu": torch.nn.functional.gelu, "relu": torch.relu}[act]
    ref = fn(a.double() @ w.double().t() + bias.double())
    assert rel_err(torch, out, ref) < TOL["bfloat16"]


def test_mm_epilogue_tree_through_the_jit_under_cuda_graph(conv_torch):
    torch = conv_torch
    a = torch.randn(200, 128, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(128, 264, device="cuda", dtype=torch.bfloat16)
    c = torch.randn(200, 264, device="cuda", dtype=torch.bfloat16)
    rs = torch.rand(200, device="cuda", dtype=torch.float32)
    amax = torch.zeros(1, device="cuda", dtype=torch.float32)
    tree = "amax(clamp(fma(acc,rowscale,mul(beta,c))))"
    eager = cuactor.mm(a, b, epilogue=tree, c=c, row_scale=rs, beta=0.5, amax=amax, clamp=(-3.0, 3.0))
    x = (a.double() @ b.double()) * rs.double()[:, None] + 0.5 * c.double()
    ref = x.clamp(-3.0, 3.0)
    assert rel_err(torch, eager, ref) < TOL["bfloat16"]
    assert abs(amax.item() - ref.abs().max().item()) <= 1e-3 * ref.abs().max().item()
    out = torch.empty_like(eager)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm-up outside capture (plans, JIT load)
        cuactor.mm(a, b, out, epilogue=tree, c=c, row_scale=rs, beta=0.5, amax=amax, clamp=(-3.0, 3.0))
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        cuactor.mm(a, b, out, epilogue=tree, c=c, row_scale=rs, beta=0.5, amax=amax, clamp=(-3.0, 3.0))
    out.zero_()
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, eager)


def test_mm_side_outputs_keep_the_pre_activation_and_row_sums(conv_torch):
    torch = conv_torch
    a = torch.randn(3, 130, 128, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(3, 128, 264, device="cuda", dtype=torch.bfloat16)
    bias = torch.randn(264, device="cuda", dtype=torch.bfloat16)
    out = torch.full((3, 130, 264), float("nan"), device="cuda", dtype=torch.bfloat16)
    aux = torch.full_like(out, float("nan"))
    sums = torch.full((3, 130), float("nan"), device="cuda", dtype=torch.float32)
    cuactor.mm(a, b, out, epilogue="rowsum(gelu(aux(add(acc,colbias))))", col_bias=bias, aux=aux, row_sum=sums)
    pre = a.double() @ b.double() + bias.double()
    act = torch.nn.functional.gelu(pre)
    assert rel_err(torch, aux, pre) < TOL["bfloat16"]
    assert rel_err(torch, out, act) < TOL["bfloat16"]
    assert rel_err(torch, sums, act.sum(dim=2)) < TOL["bfloat16"]
    with pytest.raises(cuactor.errors.InvalidArgumentError, match="must have out's shape and strides"):
        cuactor.mm(a, b, out, epilogue="rowsum(gelu(aux(add(acc,colbias))))", col_bias=bias,
                   aux=torch.empty(3, 264, 130, device="cuda", dtype=torch.bfloat16).transpose(1, 2), row_sum=sums)
    with pytest.raises(cuactor.errors.InvalidArgumentError, match="row_sum"):
        cuactor.mm(a, b, out, epilogue="rowsum(gelu(aux(add(acc,colbias))))", col_bias=bias, aux=aux,
                   row_sum=torch.empty(390, device="cuda", dtype=torch.float32))
    with pytest.raises(cuactor.errors.InvalidArgumentError, match="the side output aux .* overlaps D"):
        cuactor.mm(a, b, out, epilogue="rowsum(gelu(aux(add(acc,colbias))))", col_bias=bias, aux=out, row_sum=sums)


def test_mm_epilogue_rejects_bad_operands(conv_torch):
    torch = conv_torch
    a = torch.randn(64, 64, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(cuactor.errors.InvalidArgumentError, match="is not an epilogue node"):
        cuactor.mm(a, a, epilogue="silu(add(acc,bias))")
    with pytest.raises(cuactor.errors.InvalidArgumentError, match="reads colbias but its pointer is null"):
        cuactor.mm(a, a, epilogue="silu(add(acc,colbias))")
    with pytest.raises(cuactor.errors.InvalidArgumentError, match=r"col_bias \(bf16, shape \(65\).* must be 64"):
        cuactor.mm(a, a, epilogue="silu(add(acc,colbias))", col_bias=torch.zeros(65, device="cuda",
                                                                                 dtype=torch.bfloat16))
    with pytest.raises(cuactor.errors.InvalidArgumentError, match="float32"):
        cuactor.mm(a, a, epilogue="mul(acc,rowscale)", row_scale=torch.zeros(64, device="cuda", dtype=torch.bfloat16))
    with pytest.raises(cuactor.errors.InvalidArgumentError, match="pass epilogue"):
        cuactor.mm(a, a, col_bias=torch.zeros(64, device="cuda", dtype=torch.bfloat16))


def moe_reference(torch, x, w_gate_up, w_down, offs, weights):
    """fp64 expert FFN on the rows offs covers (the others stay NaN)."""
    out = torch.full(x.shape, float("nan"), dtype=torch.float64, device=x.device)
    f = w_down.shape[2]
    begin = 0
    for e, end in enumerate(offs.tolist()):
        if end > begin:
            h = x[begin:end].double() @ w_gate_up[e].double().t()
            a = torch.nn.functional.silu(h[:, :f]) * h[:, f:]
            y = a @ w_down[e].double().t()
            out[begin:end] = y * (weights[begin:end].double()[:, None] if weights is not None else 1.0)
        begin = end
    return out


def skewed_moe_inputs(torch, dt, seed, weighted=True):
    """x (700, 256), w_gate_up (8, 768, 256) stacked, w_down (8, 256, 384), offs of skewed rows (two empty
    experts; 52 rows past offs[-1]), routing weights (or None) and a NaN-poisoned out."""
    experts, hidden, ffn, tokens = 8, 256, 384, 700
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(tokens, hidden, device="cuda", dtype=dt, generator=gen)
    wgu = torch.randn(experts, 2 * ffn, hidden, device="cuda", dtype=dt, generator=gen) / hidden ** 0.5
    wd = torch.randn(experts, hidden, ffn, device="cuda", dtype=dt, generator=gen) / ffn ** 0.5
    rows = [300, 0, 1, 150, 0, 64, 100, 33]
    offs = torch.tensor(rows, dtype=torch.int32).cumsum(0, dtype=torch.int32).cuda()
    w = torch.rand(tokens, device="cuda", dtype=torch.float32, generator=gen) if weighted else None
    out = torch.full((tokens, hidden), float("nan"), device="cuda", dtype=dt)
    return x, wgu, wd, offs, w, out


@pytest.mark.parametrize("weighted,dtype", [(True, "bfloat16"), (False, "bfloat16"), (True, "float16")])
def test_moe_expert_ffn_matches_fp64_with_skewed_routing(conv_torch, weighted, dtype):
    torch = conv_torch
    x, wgu, wd, offs, w, out = skewed_moe_inputs(torch, getattr(torch, dtype), 3, weighted)
    cuactor.moe_expert_ffn(x, wgu, wd, offs, w, out)
    ref = moe_reference(torch, x, wgu, wd, offs, w)
    valid = int(offs[-1])
    # The intermediate h is rounded to the dtype before the SwiGLU (as in torch's formulation).
    assert rel_err(torch, out[:valid], ref[:valid]) < TOL["bfloat16"]
    assert torch.isnan(out[valid:]).all(), "rows past offs[-1] were written"


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_moe_expert_ffn_interleaved_weights_fuse_the_swiglu(conv_torch, dtype):
    torch = conv_torch
    x, wgu, wd, offs, w, out = skewed_moe_inputs(torch, getattr(torch, dtype), 5)
    ffn = wd.shape[2]
    inter = cuactor.interleave_gate_up(wgu)
    assert torch.equal(inter[:, 0::2], wgu[:, :ffn]) and torch.equal(inter[:, 1::2], wgu[:, ffn:])
    cuactor.moe_expert_ffn(x, inter, wd, offs, w, out, gate_up_interleaved=True)
    valid = int(offs[-1])
    assert rel_err(torch, out[:valid], moe_reference(torch, x, wgu, wd, offs, w)[:valid]) < TOL["bfloat16"]
    assert torch.isnan(out[valid:]).all(), "rows past offs[-1] were written"
    stacked = cuactor.moe_expert_ffn(x, wgu, wd, offs, w)
    assert rel_err(torch, out[:valid], stacked[:valid].double()) < TOL["bfloat16"]
    # Both placements forced, whatever the size class picks: the same result.
    for swiglu in ("epilogue", "separate"):
        forced = torch.full_like(out, float("nan"))
        cuactor.moe_expert_ffn(x, inter, wd, offs, w, forced, gate_up_interleaved=True, swiglu=swiglu)
        assert rel_err(torch, forced[:valid], stacked[:valid].double()) < TOL["bfloat16"], swiglu
        assert torch.isnan(forced[valid:]).all(), f"rows past offs[-1] were written ({swiglu})"
    with pytest.raises(cuactor.errors.InvalidArgumentError, match="overlap"):
        cuactor.interleave_gate_up(wgu, wgu)


@pytest.mark.parametrize("interleaved", [False, True])
def test_moe_expert_ffn_under_cuda_graph_serves_every_routing(conv_torch, interleaved):
    torch = conv_torch
    experts, hidden, ffn, tokens = 16, 128, 256, 512
    x = torch.randn(tokens, hidden, device="cuda", dtype=torch.bfloat16)
    wgu = torch.randn(experts, 2 * ffn, hidden, device="cuda", dtype=torch.bfloat16) / hidden ** 0.5
    wd = torch.randn(experts, hidden, ffn, device="cuda", dtype=torch.bfloat16) / ffn ** 0.5
    w = torch.rand(tokens, device="cuda", dtype=torch.float32)
    offs = torch.zeros(experts, device="cuda", dtype=torch.int32)
    out = torch.zeros(tokens, hidden, device="cuda", dtype=torch.bfloat16)

    def route(rows):
        offs.copy_(torch.tensor(rows, dtype=torch.int32).cumsum(0, dtype=torch.int32))

    route([tokens // experts] * experts)
    weights = cuactor.interleave_gate_up(wgu) if interleaved else wgu

    def ffn(out=None):
        return cuactor.moe_expert_ffn(x, weights, wd, offs, w, out, gate_up_interleaved=interleaved)

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        ffn(out)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        ffn(out)
    for rows in ([tokens // experts] * experts, [tokens] + [0] * (experts - 1), [0] * 15 + [tokens],
                 [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 392]):
        route(rows)
        g.replay()
        eager = ffn()
        torch.cuda.synchronize()
        assert torch.equal(out, eager), rows
        assert rel_err(torch, out, moe_reference(torch, x, wgu, wd, offs, w)) < TOL["bfloat16"]


def test_moe_expert_ffn_rejects_bad_operands(conv_torch):
    torch = conv_torch
    x = torch.randn(64, 128, device="cuda", dtype=torch.bfloat16)
    wgu = torch.randn(4, 256, 128, device="cuda", dtype=torch.bfloat16)
    wd = torch.randn(4, 128, 128, device="cuda", dtype=torch.bfloat16)
    offs = torch.tensor([16, 32, 48, 64], device="cuda", dtype=torch.int32)
    InvalidArgumentError = cuactor.errors.InvalidArgumentError
    with pytest.raises(InvalidArgumentError, match="dimension 2 must be 128"):
        cuactor.moe_expert_ffn(x, wgu, wd[:, :, :64].contiguous(), offs)
    with pytest.raises(InvalidArgumentError, match="int32"):
        cuactor.moe_expert_ffn(x, wgu, wd, offs.long())
    with pytest.raises(InvalidArgumentError, match="float32"):
        cuactor.moe_expert_ffn(x, wgu, wd, offs, torch.ones(64, device="cuda", dtype=torch.bfloat16))
    with pytest.raises(InvalidArgumentError, match="contiguous"):
        cuactor.moe_expert_ffn(x, wgu.transpose(1, 2).contiguous().transpose(1, 2), wd, offs)
    with pytest.raises(InvalidArgumentError, match="swiglu=epilogue needs gate_up_layout=interleaved"):
        cuactor.moe_expert_ffn(x, wgu, wd, offs, swiglu="epilogue")
