#!/usr/bin/env python3
"""cuactor grouped GEMM vs torch._grouped_mm on the mixture-of-experts shapes, in one table.

Runs `cuactor bench grouped --json` (which also times a cuBLAS loop and cublasGemmGroupedBatchedEx
in the same process), rebuilds each bf16 shape in PyTorch with the very same per-group rows, times
torch._grouped_mm with CUDA events (warm-up, median of many repetitions) and prints all of it side by
side. Usage: bench/grouped_mm_torch.py [--out DIR] [--cuactor PATH] [--reps N]
"""
import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent


def find_cuactor(explicit):
    if explicit:
        return explicit
    for build in ("build/gpu-check-build", "build/default", "build/kernels-grouped"):
        path = ROOT / build / "tools" / "cuactor"
        if path.exists():
            return str(path)
    sys.exit("grouped_mm_torch.py: no cuactor binary found; pass --cuactor")


def time_torch(fn, reps, warmup, torch):
    for _ in range(warmup):
        fn()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    stops = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for i in range(reps):
        starts[i].record()
        fn()
        stops[i].record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, stops))


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default=None, help="directory for grouped_mm_torch.{txt,json}")
    parser.add_argument("--cuactor", default=None, help="path of the cuactor binary")
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--all-skus", action="store_true", help="also time the SKUs the plans did not choose")
    args = parser.parse_args()

    try:
        import torch
    except ImportError:
        print("grouped_mm_torch.py: PyTorch is not installed here; nothing to compare against")
        return 0
    if not torch.cuda.is_available():
        print("grouped_mm_torch.py: no CUDA device visible to PyTorch")
        return 0

    binary = find_cuactor(args.cuactor)
    proc = subprocess.run([binary, "bench", "grouped", "--json", "--reps", str(args.reps), "--warmup", str(args.warmup)]
                          + (["--all-skus"] if args.all_skus else []),
                          capture_output=True, text=True)
    if proc.returncode != 0:
        print(proc.stdout, proc.stderr, sep="\n")
        sys.exit(f"grouped_mm_torch.py: {binary} bench grouped failed with {proc.returncode}")
    line = next((l for l in proc.stdout.splitlines() if l.startswith("[")), "[]")
    rows = json.loads(line)

    has_grouped_mm = hasattr(torch, "_grouped_mm")
    lines = [f"device: {torch.cuda.get_device_name(0)}; torch {torch.__version__}; median of {args.reps} reps",
             "TFLOP/s = 2*sum(M)*N*K / time; ratio = torch time / cuactor time (>1: cuactor faster)",
             f"{'shape (groups, rows, N, K)':<28} {'dtype':<5} {'cuactor':>8} {'torch._grouped_mm':>18} {'ratio':>6} "
             f"{'cuBLAS-loop':>11} {'cuBLAS-grp':>10} {'cuactor GB/s':>12}  cuactor SKU"]
    results = []
    for r in rows:
        tflops = lambda ms: r["flops"] / (ms * 1e-3) / 1e12 if ms and ms > 0 else 0.0
        torch_ms = None
        note = ""
        if r.get("alt"):
            note = "alternative SKU, not the plan's choice"
        elif r["dtype"] == "bf16" and has_grouped_mm:
            g, n, k = len(r["rows"]), r["n"], r["k"]
            total = sum(r["rows"])
            a = torch.randn(total, k, device="cuda", dtype=torch.bfloat16)
            w = torch.randn(g, n, k, device="cuda", dtype=torch.bfloat16)  # experts stored N x K, as cuactor's "TN"
            offs = torch.cumsum(torch.tensor(r["rows"], device="cuda", dtype=torch.int32), 0, dtype=torch.int32)
            try:
                torch_ms = time_torch(lambda: torch._grouped_mm(a, w.transpose(-2, -1), offs=offs,
                                                                out_dtype=torch.bfloat16),
                                      args.reps, args.warmup, torch)
            except Exception as e:  # report, keep the other rows
                note = f"torch._grouped_mm failed: {e}"
            del a, w
            torch.cuda.empty_cache()
        elif r["dtype"] == "bf16" and not has_grouped_mm:
            note = "this torch has no _grouped_mm"
        ours = tflops(r["cuactor_ms"])
        theirs = tflops(torch_ms) if torch_ms else 0.0
        ratio = f"{torch_ms / r['cuactor_ms']:.2f}x" if torch_ms else "-"
        theirs_text = f"{theirs:.1f}" if torch_ms else "-"
        gbs = r["io_bytes"] / (r["cuactor_ms"] * 1e-3) / 1e9
        lines.append(f"{r['shape']:<28} {r['dtype']:<5} {ours:>8.1f} {theirs_text:>18} {ratio:>6} "
                     f"{tflops(r['cublas_loop_ms']):>11.1f} {tflops(r['cublas_grouped_ms']):>10.1f} {gbs:>12.0f}  "
                     f"{r['sku']}" + (f"  ({note})" if note else ""))
        results.append(dict(r, torch_ms=torch_ms, note=note))
    text = "\n".join(lines)
    print(text)
    if args.out:
        out = pathlib.Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "grouped_mm_torch.txt").write_text(text + "\n")
        (out / "grouped_mm_torch.json").write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
