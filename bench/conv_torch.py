#!/usr/bin/env python3
"""cuactor's 2-D convolution (fprop, dgrad, wgrad) vs cuDNN through PyTorch in one process, on the
very same tensors.

Each shape (N, H, W, C -> K, R x S, stride; padding R // 2) is built once per dtype in PyTorch as
NCHW tensors in the channels_last memory format (x, w, dy); cuactor gets their N x H x W x C /
K x R x S x C views (``t.permute(0, 2, 3, 1)``, no copy). cuDNN runs with
``torch.backends.cudnn.benchmark = True``: fprop as ``F.conv2d``, dgrad and wgrad as
``torch.ops.aten.convolution_backward`` with output_mask [True, False, False] / [False, True, False].
cuactor's result is first compared with torch's (relative Frobenius error), then both are timed with
CUDA events, interleaved (one cuactor sample, one cuDNN sample, ...), after a warm-up; each sample is
preceded by a GPU sleep so that the host's launch time is not counted; the median is reported.
TFLOP/s = 2*N*P*Q*K*C*R*S / time for all three operations; ratio = cuactor TFLOP/s / cuDNN TFLOP/s
(> 1: cuactor faster). Strided dgrad runs on the sm_80 (CUTLASS 2.x) kernels. A cuactor
UnsupportedError is printed in its row.

`--alt OP=SKU` also runs cuactor with that catalog kernel for OP's rows (its result checked too), timed
in the same interleaved loop, and prints it under the row: for tuning the heuristic by class.

Usage: bench/conv_torch.py [--out DIR] [--cuactor PATH] [--reps N] [--warmup N] [--dtypes bf16,f16]
                           [--shape N,H,W,C,K,R,STRIDE ...] [--alt OP=SKU ...]
Needs the cuactor package importable (PYTHONPATH=<build>/python, or `pip install .`) and a GPU.
"""
import argparse
import json
import pathlib
import statistics
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from grouped_mm_torch import find_build, import_cuactor  # noqa: E402 (the sibling benchmark's helpers)

# (N, H, W, C, K, R, stride): ResNet-50 and Stable Diffusion layers; the last two cover a strided 3x3
# and a 1x1 with few pixels and many filters.
SHAPES = [
    (32, 56, 56, 64, 64, 3, 1),
    (32, 14, 14, 1024, 256, 1, 1),
    (2, 64, 64, 320, 320, 3, 1),
    (1, 256, 256, 512, 512, 3, 1),
    (8, 28, 28, 256, 512, 3, 2),
    (16, 7, 7, 512, 2048, 1, 1),
]
OPS = ("fprop", "dgrad", "wgrad")


def rel_err(got, ref):
    got, ref = got.double(), ref.double()
    return ((got - ref).norm() / ref.norm().clamp_min(1e-30)).item()


def time_interleaved(fns, reps, warmup, sleep_cycles, torch):
    """Median device time in ms of each function of `fns`, sampled in turn with CUDA events. The GPU
    sleeps before each sample while the host enqueues it, so a sample is the kernel's time only."""
    for _ in range(warmup):
        for fn in fns:
            fn()
    samples = [[] for _ in fns]
    for _ in range(reps):
        for i, fn in enumerate(fns):
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda._sleep(sleep_cycles)
            start.record()
            fn()
            stop.record()
            samples[i].append((start, stop))
    torch.cuda.synchronize()
    return [statistics.median(s.elapsed_time(e) for s, e in pairs) for pairs in samples]


def shape_text(shape):
    n, h, w, c, k, r, stride = shape
    return f"{n}x{h}x{w}x{c}->{k} {r}x{r} s{stride}"


def bench_shape(cuactor, torch, shape, dtype_name, args):
    """Rows (one per operation) for one shape and dtype ("bf16" or "f16")."""
    dtype = {"bf16": torch.bfloat16, "f16": torch.float16}[dtype_name]
    n, h, w, c, k, r, stride = shape
    pad = r // 2
    p, q = (h + 2 * pad - r) // stride + 1, (w + 2 * pad - r) // stride + 1
    flops = 2.0 * n * p * q * k * c * r * r
    cl = torch.channels_last

    def tensor(*dims, scale=1.0):
        return (torch.randn(dims, device="cuda", dtype=torch.float32) * scale).to(dtype).contiguous(memory_format=cl)

    x, wt, dy = tensor(n, c, h, w), tensor(k, c, r, r, scale=(c * r * r) ** -0.5), tensor(n, k, p, q)
    y = torch.empty(n, k, p, q, device="cuda", dtype=dtype, memory_format=cl)
    dx, dw = torch.empty_like(x), torch.empty_like(wt)
    xv, wv, dyv, yv, dxv, dwv = (t.permute(0, 2, 3, 1) for t in (x, wt, dy, y, dx, dw))  # N x H x W x C views
    geom = dict(stride=stride, padding=pad)

    def backward(mask):  # bias_sizes, stride, padding, dilation, transposed, output_padding, groups, output_mask
        return torch.ops.aten.convolution_backward(dy, x, wt, None, [stride] * 2, [pad] * 2, [1, 1], False, [0, 0], 1,
                                                   mask)

    def ours_with(sku, split=None):
        return {
            "fprop": lambda: cuactor.conv2d(xv, wv, out=yv, sku=sku, **geom),
            "dgrad": lambda: cuactor.conv2d_backward_data(dyv, wv, (h, w), out=dxv, sku=sku, **geom),
            "wgrad": lambda: cuactor.conv2d_backward_weight(dyv, xv, (r, r), out=dwv, sku=sku, split=split, **geom),
        }

    ours = ours_with(None)
    theirs = {
        "fprop": lambda: torch.nn.functional.conv2d(x, wt, None, **geom),
        "dgrad": lambda: backward([True, False, False])[0],
        "wgrad": lambda: backward([False, True, False])[1],
    }
    result = {"fprop": y, "dgrad": dx, "wgrad": dw}
    rows = []
    for op in OPS:
        row = {"op": op, "dtype": dtype_name, "shape": shape_text(shape), "n": n, "h": h, "w": w, "c": c,
               "k": k, "r": r, "s": r, "stride": stride, "padding": pad, "flops": flops}
        try:
            result[op].fill_(float("nan"))  # poisoned: a kernel that skips part of its output cannot pass
            ours[op]()
            reference = theirs[op]()
            row["rel_err"] = rel_err(result[op], reference)
            alts = []  # (sku, function) of the --alt kernels that run here, each checked like the plan's choice
            for alt in (a for alt_op, a in args.alt if alt_op == op):
                sku, _, split_text = alt.partition("@")  # SKU[@IMAGESxROWS]; an empty SKU: the plan's kernel
                if sku and f":{dtype_name}," not in sku:
                    continue
                try:
                    split = tuple(int(v) for v in split_text.split("x")) if split_text else None
                    result[op].fill_(float("nan"))
                    ours_with(sku or None, split)[op]()
                    row.setdefault("alt", []).append({"sku": alt, "rel_err": rel_err(result[op], reference)})
                    alts.append(ours_with(sku or None, split)[op])
                except Exception as e:  # report, keep the row
                    row.setdefault("alt", []).append({"sku": alt, "note": f"{type(e).__name__}: {e}"})
            times = time_interleaved([ours[op], theirs[op], *alts], args.reps, args.warmup, args.sleep_cycles, torch)
            row["cuactor_ms"], row["cudnn_ms"] = times[:2]
            for alt, ms in zip((a for a in row.get("alt", []) if "rel_err" in a), times[2:]):
                alt["tflops"] = flops / (ms * 1e-3) / 1e12
        except cuactor.UnsupportedError as e:
            row["note"] = f"unsupported: {e}"
            row["cudnn_ms"] = time_interleaved([theirs[op]], args.reps, args.warmup, args.sleep_cycles, torch)[0]
        except Exception as e:  # report, keep the other rows
            row["note"] = f"failed: {type(e).__name__}: {e}"
        for who in ("cuactor", "cudnn"):
            ms = row.get(f"{who}_ms")
            row[f"{who}_tflops"] = flops / (ms * 1e-3) / 1e12 if ms else None
        rows.append(row)
    return rows


def format_row(row):
    def num(v, fmt):
        return format(v, fmt) if v is not None else "-"

    ours, theirs = row.get("cuactor_tflops"), row.get("cudnn_tflops")
    ratio = f"{ours / theirs:.2f}x" if ours and theirs else "-"
    err = num(row.get("rel_err"), ".1e")
    text = (f"{row['op']:<6} {row['dtype']:<5} {row['shape']:<26} {num(ours, '.1f'):>10} {num(theirs, '.1f'):>10} "
            f"{ratio:>7} {err:>8}" + (f"  {row['note']}" if "note" in row else ""))
    for alt in row.get("alt", []):
        if "tflops" in alt:
            text += (f"\n{'':<6} alt {alt['sku']}: {alt['tflops']:.1f} TFLOP/s "
                     f"({(alt['tflops'] / theirs) if theirs else 0:.2f}x cuDNN), rel err {alt['rel_err']:.1e}")
        else:
            text += f"\n{'':<6} alt {alt['sku']}: {alt.get('note', 'not timed')}"
    return text


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=None, help="directory for conv_torch.{txt,json}")
    parser.add_argument("--cuactor", default=None, help="path of the cuactor binary (its build's python/ is used)")
    parser.add_argument("--reps", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--dtypes", default="bf16,f16", help="comma-separated: bf16, f16")
    parser.add_argument("--shape", action="append", default=None, metavar="N,H,W,C,K,R,STRIDE",
                        help="a shape to run instead of the built-in list (repeatable)")
    parser.add_argument("--sleep-cycles", type=int, default=2_000_000,
                        help="GPU clock cycles slept before each sample (hides the host's launch time)")
    parser.add_argument("--alt", action="append", default=[], metavar="OP=SKU[@IxR]",
                        help="also time this catalog kernel on OP's rows (fprop, dgrad, wgrad; repeatable); "
                             "wgrad takes a split after @ (an empty SKU: the plan's kernel)")
    args = parser.parse_args()
    alts = []
    for text in args.alt:
        op, _, sku = text.partition("=")
        if op not in OPS or not sku or ("@" in sku and op != "wgrad"):
            sys.exit(f"conv_torch.py: --alt {text}: give OP=SKU with OP one of {', '.join(OPS)}")
        alts.append((op, sku))
    args.alt = alts

    try:
        import torch
    except ImportError:
        print("conv_torch.py: PyTorch is not installed here; nothing to compare against")
        return 0
    if not torch.cuda.is_available():
        print("conv_torch.py: no CUDA device visible to PyTorch")
        return 0
    try:
        import cuactor
    except ImportError:
        cuactor = import_cuactor(find_build(args.cuactor))
    torch.backends.cudnn.benchmark = True
    dtypes = args.dtypes.split(",")
    if not set(dtypes) <= {"bf16", "f16"}:
        sys.exit(f"conv_torch.py: --dtypes {args.dtypes}: choose among bf16 and f16")

    lines = [f"device: {torch.cuda.get_device_name(0)}; torch {torch.__version__}; cuDNN "
             f"{torch.backends.cudnn.version()}; cuactor {cuactor.__version__}; median of {args.reps} reps",
             "TFLOP/s = 2*N*P*Q*K*C*R*S / time; ratio = cuactor TFLOP/s / cuDNN TFLOP/s (>1: cuactor faster); "
             "padding R//2; rel err = |cuactor - torch| / |torch|",
             f"{'op':<6} {'dtype':<5} {'shape (NxHxWxC->K RxS s)':<26} {'cuactor':>10} {'cuDNN':>10} {'ratio':>7} "
             f"{'rel err':>8}"]
    print("\n".join(lines), flush=True)
    shapes = SHAPES
    if args.shape:
        try:
            shapes = [tuple(int(v) for v in text.split(",")) for text in args.shape]
        except ValueError:
            sys.exit(f"conv_torch.py: --shape {args.shape}: give seven integers N,H,W,C,K,R,STRIDE")
        for shape in shapes:
            if len(shape) != 7 or min(shape) < 1:
                sys.exit(f"conv_torch.py: --shape {','.join(map(str, shape))}: give seven positive integers "
                         "N,H,W,C,K,R,STRIDE")
    rows = []
    for shape in shapes:
        for dtype in dtypes:
            for row in bench_shape(cuactor, torch, shape, dtype, args):
                rows.append(row)
                lines.append(format_row(row))
                print(lines[-1], flush=True)
            torch.cuda.empty_cache()
    for op in OPS:  # geometric mean of the ratios over the rows both sides ran
        ratios = [r["cuactor_tflops"] / r["cudnn_tflops"] for r in rows
                  if r["op"] == op and r.get("cuactor_tflops") and r.get("cudnn_tflops")]
        if ratios:
            lines.append(f"{op}: geometric mean {statistics.geometric_mean(ratios):.2f}x cuDNN over {len(ratios)} "
                         f"rows, lowest {min(ratios):.2f}x")
            print(lines[-1], flush=True)
    if args.out:
        out_dir = pathlib.Path(args.out)
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "conv_torch.txt").write_text("\n".join(lines) + "\n")
        report = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__,
                  "cudnn": torch.backends.cudnn.version(), "cuactor": cuactor.__version__, "reps": args.reps,
                  "rows": rows}
        (out_dir / "conv_torch.json").write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
