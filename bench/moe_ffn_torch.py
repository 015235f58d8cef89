#!/usr/bin/env python3
"""Mixture-of-experts expert FFN: cuactor.moe_expert_ffn vs the PyTorch formulation of the same
computation in one process, on the same tensors:

    torch:   h = torch._grouped_mm(x, w_gate_up^T, offs); a = F.silu(h[:, :F]) * h[:, F:];
             out = torch._grouped_mm(a, w_down^T, offs) * w[:, None]
    stacked: cuactor.moe_expert_ffn(x, w_gate_up, w_down, offs, w)   (weights fused into the down GEMM,
             the SwiGLU one elementwise kernel)
    interleaved: cuactor.moe_expert_ffn(x, cuactor.interleave_gate_up(w_gate_up), w_down, offs, w,
             gate_up_interleaved=True)   (swiglu="auto": the SwiGLU in the epilogue where the build has that kernel;
             the weights are interleaved once, outside the timing, as at load time)
    fused / separate: the same with swiglu="epilogue" (the SwiGLU in the gate/up GEMM's epilogue) and
             swiglu="separate" (one elementwise kernel), both forced: fused against unfused, same run

Shapes: Mixtral-like (8 experts, hidden 4096, FFN 14336) and Qwen3-MoE-like (128 experts, hidden 2048,
FFN 768; 128 experts, hidden 4096, FFN 1536), prefill (4096 tokens x top-k) and decode (64 tokens x
top-k), with skewed routing (rows per expert drawn from a Zipf-like distribution, some experts empty).
Both results are compared (relative Frobenius error), then timed with CUDA events, interleaved, after a
warm-up, each sample after a GPU sleep so that host launch time is not counted; medians.
TFLOP/s = 2 * rows * (2F*H + H*F) / time; ratio = torch time / cuactor time (> 1: cuactor faster), for
the interleaved and the stacked form. %copy: the bytes any formulation must move (the routed experts'
weights, x and out) over the time, against a device-to-device copy timed in the same run (bytes read
plus written): decode rows near 100% are memory-bound, and their ratio cannot exceed 100 / torch's %.
--timeline adds, per shape, each kernel of the interleaved form and of torch's (from torch.profiler):
its median duration and the gap before it, so that a change can be placed.

Usage: bench/moe_ffn_torch.py [--out DIR] [--cuactor PATH] [--reps N] [--warmup N] [--timeline]
"""
import argparse
import json
import math
import pathlib
import statistics
import sys
import warnings

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from conv_torch import rel_err, time_interleaved  # noqa: E402 (the sibling benchmarks' helpers)
from grouped_mm_torch import find_build, import_cuactor  # noqa: E402

# (name, experts, hidden, ffn, tokens, top_k)
SHAPES = [
    ("mixtral prefill", 8, 4096, 14336, 4096, 2),
    ("mixtral decode", 8, 4096, 14336, 64, 2),
    ("qwen3-h2048 prefill", 128, 2048, 768, 4096, 8),
    ("qwen3-h2048 decode", 128, 2048, 768, 64, 8),
    ("qwen3-h4096 prefill", 128, 4096, 1536, 4096, 8),
    ("qwen3-h4096 decode", 128, 4096, 1536, 64, 8),
]


def skewed_rows(torch, experts, total, gen):
    """Rows per expert summing to `total`, skewed (Zipf-like weights in a random order)."""
    ranks = torch.randperm(experts, generator=gen, device="cpu").double() + 1.0
    p = 1.0 / ranks ** 1.1
    counts = torch.floor(p / p.sum() * total).long()
    counts[torch.argmax(p)] += total - int(counts.sum())
    return counts


def bench(cuactor, torch, shape, args):
    name, experts, hidden, ffn, tokens, top_k = shape
    F = torch.nn.functional
    gen = torch.Generator(device="cuda").manual_seed(experts * 7 + hidden)
    cpu_gen = torch.Generator().manual_seed(experts)
    rows = tokens * top_k
    x = torch.randn(rows, hidden, device="cuda", dtype=torch.bfloat16, generator=gen)
    wgu = torch.randn(experts, 2 * ffn, hidden, device="cuda", dtype=torch.bfloat16, generator=gen) / hidden ** 0.5
    wd = torch.randn(experts, hidden, ffn, device="cuda", dtype=torch.bfloat16, generator=gen) / ffn ** 0.5
    w = torch.rand(rows, device="cuda", dtype=torch.float32, generator=gen)
    counts = skewed_rows(torch, experts, rows, cpu_gen)
    offs = counts.cumsum(0).to(torch.int32).cuda()
    out = torch.full((rows, hidden), float("nan"), device="cuda", dtype=torch.bfloat16)  # poisoned until written
    wgu_t, wd_t = wgu.transpose(-2, -1), wd.transpose(-2, -1)

    wgu_interleaved = cuactor.interleave_gate_up(wgu)
    out_inter = out.clone()

    def ours():
        cuactor.moe_expert_ffn(x, wgu, wd, offs, w, out)

    def inter(swiglu="auto", out=out_inter):
        cuactor.moe_expert_ffn(x, wgu_interleaved, wd, offs, w, out, gate_up_interleaved=True, swiglu=swiglu)

    out_fused, out_separate = out.clone(), out.clone()

    def fused():
        inter("epilogue", out_fused)

    def separate():
        inter("separate", out_separate)

    fns = [ours, inter, separate]
    try:
        fused()
        fns.append(fused)
    except cuactor.errors.UnsupportedError as e:  # no swiglu kernel for the dtype in this build
        print(f"  {name}: swiglu='epilogue' unsupported here: {e}", flush=True)

    def theirs():
        h = torch._grouped_mm(x, wgu_t, offs=offs)
        a = F.silu(h[:, :ffn]) * h[:, ffn:]
        return torch._grouped_mm(a, wd_t, offs=offs) * w[:, None]

    for fn in fns:
        fn()
    expected = theirs()
    errs = [rel_err(o, expected) for o in (out, out_inter, out_separate, out_fused)[:len(fns)]]
    times = time_interleaved(fns + [theirs], args.reps, args.warmup, args.sleep_cycles, torch)
    t_ours, t_inter, t_separate, t_torch = times[0], times[1], times[2], times[-1]
    t_fused = times[3] if len(fns) == 4 else float("nan")
    flops = 2.0 * rows * (2 * ffn * hidden + hidden * ffn)
    element = x.element_size()
    must_move = int((counts > 0).sum()) * 3 * ffn * hidden * element + 2 * rows * hidden * element
    timeline = None
    if args.timeline:
        timeline = {label: kernel_timeline(torch, fn) for label, fn in (("interleaved", inter), ("torch", theirs))}
    return {"shape": name, "experts": experts, "hidden": hidden, "ffn": ffn, "rows": rows,
            "must_move_bytes": must_move, "timeline": timeline,
            "empty_experts": int((counts == 0).sum()), "cuactor_ms": t_ours, "inter_ms": t_inter, "torch_ms": t_torch,
            "fused_ms": t_fused, "separate_ms": t_separate, "fused_speedup": t_separate / t_fused,
            "cuactor_tflops": flops / t_ours / 1e9, "inter_tflops": flops / t_inter / 1e9,
            "torch_tflops": flops / t_torch / 1e9, "ratio": t_torch / t_ours, "inter_ratio": t_torch / t_inter,
            "rel_err": float("nan") if any(math.isnan(e) for e in errs) else max(errs)}  # NaN: unwritten rows


def copy_bandwidth_gbs(torch, args):
    """GB/s of a 1 GiB device-to-device copy, bytes read plus written (median, interleaved timing)."""
    src = torch.empty(1 << 30, device="cuda", dtype=torch.uint8).random_(0, 255)
    dst = torch.empty_like(src)
    ms = time_interleaved([lambda: dst.copy_(src)], args.reps, args.warmup, args.sleep_cycles, torch)[0]
    return 2 * src.numel() / (ms * 1e-3) / 1e9


def kernel_timeline(torch, fn, calls=7):
    """[(kernel name, median µs, median gap µs before it)] of one call of `fn`, from torch.profiler over
    `calls` calls, each after a GPU sleep (whose kernel separates the calls), the first dropped."""
    fn()
    torch.cuda.synchronize()
    with warnings.catch_warnings():  # "Profiler clears events at the end of each cycle": one cycle here
        warnings.simplefilter("ignore")
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(calls):
                torch.cuda._sleep(3_000_000)
                fn()
            torch.cuda.synchronize()
    kernels = sorted((e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA),
                     key=lambda e: e.time_range.start)
    per_call, current = [], []
    for e in kernels:
        if "sleep" in e.name or "spin" in e.name:
            if current:
                per_call.append(current)
            current = []
        else:
            current.append(e)
    if current:
        per_call.append(current)
    per_call = [c for c in per_call[1:] if len(c) == len(per_call[-1])]
    timeline = []
    for i, e in enumerate(per_call[0]):
        durations = [c[i].time_range.end - c[i].time_range.start for c in per_call]
        gaps = [c[i].time_range.start - c[i - 1].time_range.end if i else 0.0 for c in per_call]
        timeline.append((e.name, statistics.median(durations), statistics.median(gaps)))
    return timeline


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=None, help="directory for moe_ffn_torch.{txt,json}")
    parser.add_argument("--cuactor", default=None, help="path of the cuactor binary (its build's python/ is used)")
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--sleep-cycles", type=int, default=2_000_000)
    parser.add_argument("--timeline", action="store_true", help="per-kernel durations and gaps (torch.profiler)")
    args = parser.parse_args()
    try:
        import torch
    except ImportError:
        print("moe_ffn_torch.py: PyTorch is not installed here; nothing to compare against")
        return 0
    if not torch.cuda.is_available():
        print("moe_ffn_torch.py: no CUDA device visible to PyTorch")
        return 0
    try:
        import cuactor
    except ImportError:
        cuactor = import_cuactor(find_build(args.cuactor))
    copy_gbs = copy_bandwidth_gbs(torch, args)
    lines = [f"device: {torch.cuda.get_device_name(0)}; torch {torch.__version__}; cuactor {cuactor.__version__}; "
             f"bf16; median of {args.reps} reps; skewed routing; device-to-device copy {copy_gbs:.0f} GB/s",
             "ratio = torch time / cuactor time (>1: cuactor faster); TFLOP/s over the rows routed; "
             "sep/fused = interleaved with swiglu='separate' time / with swiglu='epilogue' time",
             f"{'shape':<22} {'E':>4} {'H':>5} {'F':>6} {'rows':>6} {'empty':>5} {'inter TF/s':>10} "
             f"{'torch TF/s':>10} {'inter ms':>9} {'fused ms':>9} {'sep ms':>9} {'stacked ms':>10} {'torch ms':>9} "
             f"{'inter':>6} {'stacked':>7} {'sep/fused':>9} {'rel err':>8} {'%copy inter/torch':>17}"]
    print("\n".join(lines), flush=True)
    results = []

    def copy_pct(r, ms):
        return f"{100.0 * r['must_move_bytes'] / (ms * 1e-3) / 1e9 / copy_gbs:.0f}"

    for shape in SHAPES:
        r = bench(cuactor, torch, shape, args)
        results.append(r)
        lines.append(f"{r['shape']:<22} {r['experts']:>4} {r['hidden']:>5} {r['ffn']:>6} {r['rows']:>6} "
                     f"{r['empty_experts']:>5} {r['inter_tflops']:>10.1f} {r['torch_tflops']:>10.1f} "
                     f"{r['inter_ms']:>9.4f} {r['fused_ms']:>9.4f} {r['separate_ms']:>9.4f} {r['cuactor_ms']:>10.4f} "
                     f"{r['torch_ms']:>9.4f} {r['inter_ratio']:>6.2f} {r['ratio']:>7.2f} {r['fused_speedup']:>9.3f} "
                     f"{r['rel_err']:>8.1e} {copy_pct(r, r['inter_ms']) + '/' + copy_pct(r, r['torch_ms']):>17}")
        print(lines[-1], flush=True)
        torch.cuda.empty_cache()
    for key in ("inter_ratio", "ratio"):
        ratios = [r[key] for r in results]
        lines.append(f"geometric mean ({'interleaved' if key == 'inter_ratio' else 'stacked'}): "
                     f"{statistics.geometric_mean(ratios):.3f}")
        print(lines[-1], flush=True)
    for r in results if args.timeline else []:
        for label, kernels in r["timeline"].items():
            span = sum(d + g for _, d, g in kernels)
            lines.append(f"timeline {r['shape']}, {label}: {span:.1f} us from the first kernel's start to the "
                         "last one's end")
            lines += [f"    gap {g:7.1f} us  kernel {d:9.1f} us  {name[:90]}" for name, d, g in kernels]
        print("\n".join(lines[-(2 + sum(len(k) for k in r["timeline"].values())):]), flush=True)
    if args.out:
        out_dir = pathlib.Path(args.out)
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "moe_ffn_torch.txt").write_text("\n".join(lines) + "\n")
        (out_dir / "moe_ffn_torch.json").write_text(json.dumps({"device": torch.cuda.get_device_name(0),
                                                                 "rows": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
