#!/usr/bin/env python3
"""cuactor.grouped_mm vs torch._grouped_mm in one process, on the very same tensors, plus the host
overhead of one Python call of each on a small shape.

The mixture-of-experts shapes (ragged per-group rows, experts stored N x K) and the cuBLAS columns come
from `cuactor bench grouped --json` (the C++ benchmark, which also reports the time of the same
cuactor kernel called from C++: "Python" and "C++" columns should agree within noise). Each bf16
shape is then built once in PyTorch (a (T, K), w (G, N, K) passed as w.transpose(-2, -1), offs) and
cuactor.grouped_mm and torch._grouped_mm are timed on those tensors with CUDA events (warm-up, median
of many repetitions). fp8 rows time cuactor.scaled_grouped_mm with per-tensor scales (as the C++
columns), and on a second line with row-wise scales (scale_a (T,), scale_b (G, N)) against
torch._scaled_grouped_mm (fast accumulation) on the same tensors.

The tensors are filled as the C++ benchmark fills its buffers (`fill_random` in
tools/cuactor/bench_util.hpp: one random chunk repeated): the speed depends on the data (tensor-core
power, and so the clock, most of all in fp8), so Python and C++ are compared on data laid out alike.
The "py randn" column times cuactor once more on torch.randn data (cast to the dtype) to show how much
the data alone moves it. The "py prep" column runs the C++ row's SKU from Python as C++ does: a
PreparedGroupedGemm made once, run with one workspace tensor (the functional call plans and takes a
workspace from the allocator per call).

Usage: bench/grouped_mm_torch.py [--out DIR] [--cuactor PATH] [--reps N] [--overhead-calls N]
       [--shape GxRxNxK ... [--dtype bf16|e4m3] [--skew S]]
Needs the cuactor package importable (PYTHONPATH=<build>/python, or `pip install .`).
"""
import argparse
import json
import pathlib
import statistics
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
BUILDS = ("build/gpu-check-build", "build/default", "build/kernels-grouped")


def find_build(explicit):
    if explicit:
        return pathlib.Path(explicit).resolve().parent.parent
    for build in BUILDS:
        if (ROOT / build / "tools" / "cuactor").exists():
            return ROOT / build
    sys.exit("grouped_mm_torch.py: no cuactor build found; pass --cuactor")


def import_cuactor(build):
    try:
        import cuactor  # noqa: F401  (installed with pip)
    except ImportError:
        sys.path.insert(0, str(build / "python"))
    import cuactor
    return cuactor


def time_gpu(fn, reps, warmup, torch, warm_ms=50.0):
    """Median device time of fn() in ms, from CUDA events around each call. The warm-up runs at least
    `warmup` calls and at least `warm_ms` of GPU work: after the idle moments between rows the clocks
    take milliseconds to come back up, and a few calls of a small shape would time the ramp."""
    fn()  # the first call may plan (host time between the events would inflate the probe)
    first, last = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    first.record()
    fn()
    last.record()
    torch.cuda.synchronize()
    for _ in range(max(warmup, min(int(warm_ms / max(first.elapsed_time(last), 1e-3)), 10000))):
        fn()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    stops = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for i in range(reps):
        starts[i].record()
        fn()
        stops[i].record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, stops))


def cpp_fill(torch, shape, dtype, seed):
    """A tensor filled as the C++ benchmark's fill_random fills its buffers: one 32 MiB chunk of random
    words repeated over the buffer, each word bf16 / f16 with a random sign and mantissa and magnitude
    0.5..2 ((r & 0x80ff) | 0x3f00 on the 16 bits) or two e4m3 bytes r & 0xb7 (never NaN nor large). The
    same layout of values, not the same values."""
    g = torch.Generator(device="cuda")
    g.manual_seed(seed)
    nbytes = dtype.itemsize
    for extent in shape:
        nbytes *= extent
    words = max(1, min(nbytes, 32 << 20) // 2)
    r = torch.randint(0, 1 << 16, (words,), device="cuda", dtype=torch.int32, generator=g)
    bits = (r & 0xB7B7) if dtype == torch.float8_e4m3fn else (r & 0x80FF) | 0x3F00
    bits = torch.where(bits >= 1 << 15, bits - (1 << 16), bits).to(torch.int16)  # two's complement
    chunk = bits.view(torch.uint8)
    data = chunk.repeat((nbytes + chunk.numel() - 1) // chunk.numel())[:nbytes]
    return data.view(dtype).reshape(shape)


def time_host(fns, calls, torch, block=100):
    """Median host time of one call of each fns[name]() in microseconds (the launch path, not the
    kernel). The callables take turns in blocks of `block` calls, so a drift of the machine (clocks,
    neighbours) weighs on all of them alike; the device is drained after each block, outside the
    timed region, so the launch queue never fills."""
    for fn in fns.values():
        for _ in range(50):
            fn()
    torch.cuda.synchronize()
    samples = {name: [] for name in fns}
    for _ in range(max(1, calls // block)):
        for name, fn in fns.items():
            for _ in range(block):
                t0 = time.perf_counter_ns()
                fn()
                samples[name].append((time.perf_counter_ns() - t0) / 1e3)
            torch.cuda.synchronize()
    return {name: statistics.median(v) for name, v in samples.items()}


def host_overhead(cuactor, torch, calls):
    """Host time per call on a small MoE shape (8 experts, 16 rows each, N = K = 256)."""
    g, rows, n, k = 8, 16, 256, 256
    a = torch.randn(g * rows, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(g, n, k, device="cuda", dtype=torch.bfloat16).transpose(-2, -1)
    offs = torch.arange(1, g + 1, device="cuda", dtype=torch.int32) * rows
    out = torch.empty(g * rows, n, device="cuda", dtype=torch.bfloat16)
    fns = {"cuactor_out_none_us": lambda: cuactor.grouped_mm(a, w, offs),
           "cuactor_out_given_us": lambda: cuactor.grouped_mm(a, w, offs, out=out),
           # The same call through the Python path (a dtype given by name skips the C++ fast path).
           "cuactor_out_none_python_path_us": lambda: cuactor.grouped_mm(a, w, offs, out_dtype="bf16")}
    if hasattr(torch, "_grouped_mm"):
        fns["torch_us"] = lambda: torch._grouped_mm(a, w, offs=offs)
    res = {"shape": f"{g} x {rows} rows, N{n} K{k}, bf16"}
    res.update(time_host(fns, calls, torch))
    return res


def time_rowwise(cuactor, torch, a, w, offs, args):
    """fp8 with row-wise scales, scale_a (T,) and scale_b (G, N): cuactor.scaled_grouped_mm against
    torch._scaled_grouped_mm (fast accumulation, as cuactor's fp8 kernels) on the same tensors."""
    g, n = w.shape[0], w.shape[2]
    sa = torch.rand(a.shape[0], device="cuda") + 0.5
    sb = torch.rand(g, n, device="cuda") + 0.5
    out = torch.empty(a.shape[0], n, device="cuda", dtype=torch.bfloat16)
    res = {"cuactor_ms": None, "torch_ms": None, "note": "", "sku": "-"}
    try:  # the heuristic's kernel for the functional call's hints (a tuned entry would override both)
        res["sku"] = cuactor.GroupedGemmPlan("e4m3", "bf16", rows_per_group_hint=max(1, a.shape[0] // max(g, 1)),
                                             n_hint=n, k_hint=a.shape[1], scales="rowwise").sku
    except Exception as e:  # noqa: BLE001 (the SKU column only)
        res["sku"] = f"? ({type(e).__name__})"
    try:
        res["cuactor_ms"] = time_gpu(lambda: cuactor.scaled_grouped_mm(a, w, sa, sb, offs, out=out), args.reps,
                                     args.warmup, torch)
    except Exception as e:  # report, keep torch's column
        res["note"] = f"cuactor failed: {type(e).__name__}: {e}"
    try:
        res["torch_ms"] = time_gpu(lambda: torch._scaled_grouped_mm(a, w, sa, sb, offs=offs, out_dtype=torch.bfloat16,
                                                                    use_fast_accum=True),
                                   args.reps, args.warmup, torch)
    except Exception as e:  # this torch has no sm_90 row-wise grouped GEMM
        res["note"] = "; ".join(x for x in (res["note"], f"torch failed: {type(e).__name__}: {e}") if x)
    return res


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=None, help="directory for grouped_mm_torch.{txt,json}")
    parser.add_argument("--cuactor", default=None, help="path of the cuactor binary (its build's python/ is used)")
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--overhead-calls", type=int, default=2000)
    parser.add_argument("--all-skus", action="store_true", help="also time the SKUs the plans did not choose (C++)")
    parser.add_argument("--shape", action="append", default=[],
                        help="GxRxNxK (groups, rows per group, N, K), repeatable: these problems instead of the list")
    parser.add_argument("--dtype", default=None, help="bf16 or e4m3: A and B of the --shape rows")
    parser.add_argument("--skew", default=None, help="rows per group of the --shape rows jittered by +-skew (0 to 0.9)")
    args = parser.parse_args()
    if (args.dtype is not None or args.skew is not None) and not args.shape:
        parser.error("--dtype and --skew name the type and routing of --shape rows: give --shape too")

    try:
        import torch
    except ImportError:
        print("grouped_mm_torch.py: PyTorch is not installed here; nothing to compare against")
        return 0
    if not torch.cuda.is_available():
        print("grouped_mm_torch.py: no CUDA device visible to PyTorch")
        return 0

    build = find_build(args.cuactor)
    cuactor = import_cuactor(build)
    binary = args.cuactor or str(build / "tools" / "cuactor")
    # The C++ side times its sides in 3 interleaved rounds of ceil(reps / 3) launches each.
    cxx_reps = ["--reps", str(-(-args.reps // 3)), "--rounds", "3", "--warmup", str(args.warmup)]
    shapes = [a for shape in args.shape for a in ("--shape", shape)]
    for flag, value in (("--dtype", args.dtype), ("--skew", args.skew)):
        if value is not None:
            shapes += [flag, value]
    proc = subprocess.run([binary, "bench", "grouped", "--json", *cxx_reps, *shapes] +
                          (["--all-skus"] if args.all_skus else []), capture_output=True, text=True)
    if proc.returncode != 0:
        print(proc.stdout, proc.stderr, sep="\n")
        sys.exit(f"grouped_mm_torch.py: {binary} bench grouped failed with {proc.returncode}")
    rows = json.loads(next((l for l in proc.stdout.splitlines() if l.startswith("[")), "[]"))

    has_grouped_mm = hasattr(torch, "_grouped_mm")
    lines = [f"device: {torch.cuda.get_device_name(0)}; torch {torch.__version__}; cuactor {cuactor.__version__}; "
             f"median of {args.reps} reps (C++ columns: 3 interleaved rounds of {-(-args.reps // 3)})",
             "TFLOP/s = 2*sum(M)*N*K / time; ratio = torch time / cuactor (Python) time (>1: cuactor faster); "
             "cuactor from Python and torch run on the same tensors",
             "C++ host / C++ dev: cuactor from C++ with group sizes from the host / read from offs on the device "
             "(the latter is what cuactor.grouped_mm runs)",
             "py randn: cuactor from Python on torch.randn data instead of the C++ fill's patterns; py prep: the C++ "
             "row's SKU prepared once in Python, one workspace",
             "%copy py/torch: the bytes each row must move (weights, A, D) over the time, against the device-to-device "
             "copy of the C++ run: rows near 100% are memory-bound, and their ratio cannot exceed 100% / torch's %",
             f"{'shape (groups, rows, N, K)':<28} {'dtype':<5} {'cuactor py':>10} {'py randn':>8} {'py prep':>8} "
             f"{'C++ host':>9} "
             f"{'C++ dev':>8} {'torch._grouped_mm':>18} {'ratio':>6} {'%copy py/torch':>14} {'cuBLAS-loop':>11} "
             f"{'cuBLAS-grp':>10}  "
             "cuactor SKU"]
    results = []
    for r in rows:
        if "error" in r:
            lines.append(f"{r['shape']:<28} {r['dtype']:<5} error: {r['error']}")
            results.append(r)
            continue

        def tflops(ms, r=r):
            return r["flops"] / (ms * 1e-3) / 1e12 if ms and ms > 0 else 0.0

        def copy_pct(ms, r=r):
            """The row's bytes over `ms`, in % of the C++ run's copy bandwidth ("-" without a time)."""
            if not ms or ms <= 0 or not r.get("bandwidth_gbs"):
                return "-"
            return f"{100.0 * r['io_bytes'] / (ms * 1e-3) / 1e9 / r['bandwidth_gbs']:.0f}"

        py_ms = randn_ms = prep_ms = torch_ms = rowwise = None
        prep_error = ""
        note = "alternative SKU (C++ only), not the plan's choice" if r.get("alt") else ""
        if not r.get("alt"):
            g, n, k, total = len(r["rows"]), r["n"], r["k"], sum(r["rows"])
            offs = torch.cumsum(torch.tensor(r["rows"], device="cuda", dtype=torch.int32), 0, dtype=torch.int32)
            try:
                if r["dtype"] in ("bf16", "e4m3"):
                    fp8 = r["dtype"] == "e4m3"
                    dtype = torch.float8_e4m3fn if fp8 else torch.bfloat16
                    out = torch.empty(total, n, device="cuda", dtype=torch.bfloat16)
                    sa, sb = torch.ones(1, device="cuda"), torch.ones(g, device="cuda")

                    def run(a, w):
                        if fp8:
                            return cuactor.scaled_grouped_mm(a, w, sa, sb, offs, out=out)
                        return cuactor.grouped_mm(a, w, offs, out=out)

                    a = cpp_fill(torch, (total, k), dtype, 1)
                    w = cpp_fill(torch, (g, n, k), dtype, 2).transpose(-2, -1)  # experts N x K
                    py_ms = time_gpu(lambda: run(a, w), args.reps, args.warmup, torch)
                    try:  # the C++ row's SKU, prepared once
                        plan = cuactor.GroupedGemmPlan(r["dtype"], "bf16", "col", a.get_device(), total // max(g, 1),
                                                       sku=r["sku"])
                        prepared = plan.prepare(a, w, offs, out, sa, sb) if fp8 else plan.prepare(a, w, offs, out)
                        workspace = torch.empty(max(prepared.workspace_size, 1), device="cuda", dtype=torch.uint8)
                        stream = torch.cuda.current_stream().cuda_stream
                        prep_ms = time_gpu(lambda: prepared.run(stream, workspace), args.reps, args.warmup, torch)
                        del prepared, workspace
                    except Exception as e:  # keep the row's other columns
                        prep_error = f"py prep failed: {type(e).__name__}: {e}"
                    if fp8:
                        note = "per-tensor scales; torch's row-wise form on the next line"
                        rowwise = time_rowwise(cuactor, torch, a, w, offs, args)
                    elif has_grouped_mm:
                        torch_ms = time_gpu(lambda: torch._grouped_mm(a, w, offs=offs, out_dtype=torch.bfloat16),
                                            args.reps, args.warmup, torch)
                    else:
                        note = "this torch has no _grouped_mm"
                    a = torch.randn(total, k, device="cuda").to(dtype)
                    w = torch.randn(g, n, k, device="cuda").to(dtype).transpose(-2, -1)
                    randn_ms = time_gpu(lambda: run(a, w), args.reps, args.warmup, torch)
                    del a, w, out
            except Exception as e:  # report, keep the other rows
                note = f"failed: {type(e).__name__}: {e}"
            torch.cuda.empty_cache()
        note = "; ".join(part for part in (note, prep_error) if part)
        ratio = f"{torch_ms / py_ms:.2f}x" if torch_ms and py_ms else "-"
        lines.append(f"{r['shape']:<28} {r['dtype']:<5} "
                     f"{(f'{tflops(py_ms):.1f}' if py_ms else '-'):>10} "
                     f"{(f'{tflops(randn_ms):.1f}' if randn_ms else '-'):>8} "
                     f"{(f'{tflops(prep_ms):.1f}' if prep_ms else '-'):>8} {tflops(r['cuactor_ms']):>9.1f} "
                     f"{tflops(r.get('cuactor_device_sized_ms', 0)):>8.1f} "
                     f"{(f'{tflops(torch_ms):.1f}' if torch_ms else '-'):>18} {ratio:>6} "
                     f"{copy_pct(py_ms) + '/' + copy_pct(torch_ms):>14} "
                     f"{tflops(r['cublas_loop_ms']):>11.1f} {tflops(r['cublas_grouped_ms']):>10.1f}  "
                     f"{r['sku']}" + (f"  ({note})" if note else ""))
        results.append(dict(r, cuactor_python_ms=py_ms, cuactor_python_randn_ms=randn_ms,
                            cuactor_python_prepared_ms=prep_ms, torch_ms=torch_ms, note=note))
        if rowwise:
            ours, theirs = rowwise["cuactor_ms"], rowwise["torch_ms"]
            ratio = f"{theirs / ours:.2f}x" if theirs and ours else "-"
            lines.append(f"{'  the same, row-wise scales':<28} {'e4m3':<5} "
                         f"{(f'{tflops(ours):.1f}' if ours else '-'):>10} {'':>36} "
                         f"{(f'{tflops(theirs):.1f}' if theirs else '-'):>18} {ratio:>6} "
                         f"{copy_pct(ours) + '/' + copy_pct(theirs):>14} {'':>22}  {rowwise['sku']}"
                         + (f"  ({rowwise['note']})" if rowwise["note"] else ""))
            results[-1]["rowwise"] = rowwise

    oh = host_overhead(cuactor, torch, args.overhead_calls)
    lines += ["", f"host time per Python call, {oh['shape']} (median of {args.overhead_calls} calls):",
              f"  cuactor.grouped_mm (out=None)   {oh['cuactor_out_none_us']:8.1f} us",
              f"  cuactor.grouped_mm (out given)  {oh['cuactor_out_given_us']:8.1f} us",
              f"  the same, Python path (out=None) {oh['cuactor_out_none_python_path_us']:7.1f} us"]
    if "torch_us" in oh:
        lines.append(f"  torch._grouped_mm               {oh['torch_us']:8.1f} us   "
                     f"(cuactor/torch = {oh['cuactor_out_none_us'] / oh['torch_us']:.2f}; target <= 1)")
    text = "\n".join(lines)
    print(text)
    if args.out:
        out_dir = pathlib.Path(args.out)
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "grouped_mm_torch.txt").write_text(text + "\n")
        (out_dir / "grouped_mm_torch.json").write_text(json.dumps({"rows": results, "host_overhead": oh}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
