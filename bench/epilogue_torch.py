#!/usr/bin/env python3
"""Epilogue fusion ([K8]): cuactor's GEMM with the elementwise work fused into its epilogue vs the
same GEMM followed by separate elementwise kernels, and vs PyTorch, in one process on the same tensors.

Per shape (M x N x K, bf16, weights N x K as torch.nn.Linear stores them) and tree:
  * fused:    cuactor.mm(x, w.t(), epilogue=TREE, ...)             one kernel
  * plain:    cuactor.mm(x, w.t()) alone: the GEMM without the tree (the fusion's cost is fused / plain)
  * unfused:  cuactor.mm(x, w.t()) then the tree's elementwise ops in torch (separate kernels)
  * torch:    the PyTorch formulation (F.linear with bias -> cuBLAS, then the activation)
Results are compared with torch's (relative Frobenius error), then timed with CUDA events, interleaved,
after a warm-up, each sample preceded by a GPU sleep so that host launch time is not counted; medians.
TFLOP/s = 2*M*N*K / time; speedups = other time / fused time (> 1: fused faster). The table ends with
issue 14's two classes: compute-bound rows (M >= 2048, K >= 4096), where the fusion's cost over the
plain GEMM counts, and rows whose output is large against the work (M >= 2048, K <= 2048), where the
fused kernel's lead over the unfused pair counts.

Usage: bench/epilogue_torch.py [--out DIR] [--cuactor PATH] [--reps N] [--warmup N]
                               [--shapes MxNxK,...] [--trees TREE;...]
"""
import argparse
import json
import pathlib
import re
import statistics
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from conv_torch import rel_err, time_interleaved  # noqa: E402 (the sibling benchmark's helpers)
from grouped_mm_torch import find_build, import_cuactor  # noqa: E402

# (M, N, K): LLM projections (prefill and decode), a square GEMM, and outputs large against the work (K <= 2048).
SHAPES = [(4096, 4096, 4096), (8192, 14336, 4096), (2048, 28672, 8192), (16, 14336, 4096), (128, 4096, 14336),
          (8192, 8192, 1024), (16384, 4096, 2048), (8192, 14336, 2048), (4096, 28672, 1024)]
TREES = ["silu(add(acc,colbias))", "gelu(add(acc,colbias))", "relu(fma(acc,rowscale,colbias))"]


def bench(cuactor, torch, shape, tree, args):
    m, n, k = shape
    F = torch.nn.functional
    gen = torch.Generator(device="cuda").manual_seed(m * 31 + n)
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, generator=gen)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16, generator=gen) / k ** 0.5
    bias = torch.randn(n, device="cuda", dtype=torch.bfloat16, generator=gen)
    rs = torch.rand(m, device="cuda", dtype=torch.float32, generator=gen)
    out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    tmp = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    act = {"silu": F.silu, "gelu": F.gelu, "relu": torch.relu}[tree.split("(")[0]]
    uses_rs = "rowscale" in tree
    kw = {"col_bias": bias, **({"row_scale": rs} if uses_rs else {})}

    def fused():
        cuactor.mm(x, w.t(), out, epilogue=tree, **kw)

    def unfused():
        cuactor.mm(x, w.t(), tmp)
        if uses_rs:
            tmp.mul_(rs[:, None]).add_(bias)
        else:
            tmp.add_(bias)
        return act(tmp)  # one more elementwise kernel

    def torch_ref():
        y = F.linear(x, w) * rs[:, None] + bias if uses_rs else F.linear(x, w, bias)
        return act(y)

    def plain():
        cuactor.mm(x, w.t(), tmp)

    out.fill_(float("nan"))
    fused()
    ref = torch_ref()
    err = rel_err(out, ref)
    err_unfused = rel_err(unfused(), ref)
    t_fused, t_plain, t_unfused, t_torch = time_interleaved([fused, plain, unfused, torch_ref], args.reps,
                                                            args.warmup, args.sleep_cycles, torch)
    flops = 2.0 * m * n * k
    return {"m": m, "n": n, "k": k, "tree": tree, "fused_ms": t_fused, "plain_ms": t_plain, "unfused_ms": t_unfused,
            "torch_ms": t_torch, "fused_tflops": flops / t_fused / 1e9, "cost_over_plain": t_fused / t_plain - 1.0,
            "speedup_vs_unfused": t_unfused / t_fused, "speedup_vs_torch": t_torch / t_fused, "rel_err": err,
            "rel_err_unfused": err_unfused}


def class_summary(rows):
    """Issue 14's two classes, as lines (empty where the run had no such rows)."""
    lines = []
    bound = [r for r in rows if r["m"] >= 2048 and r["k"] >= 4096]
    if bound:
        worst = max(bound, key=lambda r: r["cost_over_plain"])
        mean = statistics.fmean(r["cost_over_plain"] for r in bound)
        lines.append(f"compute-bound (M >= 2048, K >= 4096): the fused epilogue costs {mean * 100:+.1f}% over the plain "
                     f"GEMM on average, at most {worst['cost_over_plain'] * 100:+.1f}% "
                     f"({worst['m']}x{worst['n']}x{worst['k']} {worst['tree']}), {len(bound)} rows")
    wide = [r for r in rows if r["m"] >= 2048 and r["k"] <= 2048]
    if wide:
        geo = statistics.geometric_mean(r["speedup_vs_unfused"] for r in wide)
        lines.append(f"large output (M >= 2048, K <= 2048): fused {geo:.2f}x the unfused pair in the geometric mean, "
                     f"min {min(r['speedup_vs_unfused'] for r in wide):.2f}x, {len(wide)} rows")
    return lines


MAX_DIM = 1 << 20  # a larger dimension is a typo, not a layer


def parse_shapes(text):
    shapes = []
    for item in text.split(","):
        dims = item.strip().lower().split("x")
        if len(dims) != 3 or not all(d.isdigit() and 0 < int(d) <= MAX_DIM for d in dims):
            raise argparse.ArgumentTypeError(f"--shapes: '{item}' is not MxNxK with integers from 1 to {MAX_DIM}")
        shapes.append(tuple(int(d) for d in dims))
    return shapes


# The trees bench() builds a PyTorch reference for: an activation of the biased, optionally row-scaled, product.
TREE_FORM = re.compile(r"(silu|gelu|relu)\((add\(acc,colbias\)|fma\(acc,rowscale,colbias\))\)")


def parse_trees(text):
    trees = [t.strip() for t in text.split(";") if t.strip()]
    if not trees:
        raise argparse.ArgumentTypeError(f"--trees: '{text}' names no tree")
    for tree in trees:
        if not TREE_FORM.fullmatch(tree):
            raise argparse.ArgumentTypeError(
                f"--trees: '{tree}' has no PyTorch reference here; give silu|gelu|relu of add(acc,colbias) or "
                "fma(acc,rowscale,colbias)")
    return trees


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=None, help="directory for epilogue_torch.{txt,json}")
    parser.add_argument("--cuactor", default=None, help="path of the cuactor binary (its build's python/ is used)")
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--sleep-cycles", type=int, default=2_000_000)
    parser.add_argument("--shapes", type=parse_shapes, default=SHAPES,
                        help="MxNxK,... (default: " + ",".join("x".join(map(str, sh)) for sh in SHAPES) + ")")
    parser.add_argument("--trees", type=parse_trees, default=TREES,
                        help="trees separated by ';' (default: " + "; ".join(TREES) + ")")
    args = parser.parse_args()
    try:
        import torch
    except ImportError:
        print("epilogue_torch.py: PyTorch is not installed here; nothing to compare against")
        return 0
    if not torch.cuda.is_available():
        print("epilogue_torch.py: no CUDA device visible to PyTorch")
        return 0
    try:
        import cuactor
    except ImportError:
        cuactor = import_cuactor(find_build(args.cuactor))
    lines = [f"device: {torch.cuda.get_device_name(0)}; torch {torch.__version__}; cuactor {cuactor.__version__}; "
             f"bf16; median of {args.reps} reps",
             "fused = cuactor GEMM with the tree in its epilogue; plain = the same GEMM without it; unfused = cuactor "
             "GEMM + torch elementwise kernels; torch = F.linear (+bias) then the activation; speedup = other time / "
             "fused time; cost = fused time / plain time - 1",
             f"{'M x N x K':<20} {'tree':<34} {'fused TF/s':>10} {'fused ms':>9} {'plain ms':>9} {'unfused ms':>10} "
             f"{'torch ms':>9} {'cost':>7} {'vs unf':>7} {'vs torch':>8} {'rel err':>8}"]
    print("\n".join(lines), flush=True)
    rows = []
    for shape in args.shapes:
        for tree in args.trees:
            r = bench(cuactor, torch, shape, tree, args)
            rows.append(r)
            mnk = f"{r['m']}x{r['n']}x{r['k']}"
            lines.append(f"{mnk:<20} {tree:<34} {r['fused_tflops']:>10.1f} "
                         f"{r['fused_ms']:>9.4f} {r['plain_ms']:>9.4f} {r['unfused_ms']:>10.4f} {r['torch_ms']:>9.4f} "
                         f"{r['cost_over_plain'] * 100:>+6.1f}% {r['speedup_vs_unfused']:>7.2f} "
                         f"{r['speedup_vs_torch']:>8.2f} {r['rel_err']:>8.1e}")
            print(lines[-1], flush=True)
        torch.cuda.empty_cache()
    summary = class_summary(rows)
    lines += summary
    print("\n".join(summary), flush=True)
    if args.out:
        out_dir = pathlib.Path(args.out)
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "epilogue_torch.txt").write_text("\n".join(lines) + "\n")
        (out_dir / "epilogue_torch.json").write_text(json.dumps({"device": torch.cuda.get_device_name(0),
                                                                  "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
