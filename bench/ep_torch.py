#!/usr/bin/env python3
"""Expert-parallel MoE layer: `cuactor bench ep` beside the PyTorch formulation, in one run, on every
visible GPU (one rank each).

PyTorch (one process per GPU, NCCL, torch.distributed):
    pairs (token, expert) sorted by owning rank -> all_to_all_single of the counts (host sync for the
    splits) -> all_to_all_single of the rows and their expert ids -> sort by local expert ->
    torch._grouped_mm (gate/up) -> F.silu(g) * u -> torch._grouped_mm (down) -> all_to_all_single back
    -> * routing weight -> index_add_ into the tokens.
cuactor (one process driving every GPU): ExpertParallelMoe (all-gather dispatch, device-side routing,
    fused expert FFN, reduce-scatter combine), eager and replayed from a captured graph.
Both sides: bf16, uniform top-k routing without repeats, wall time per forward over --reps forwards
after a warm-up, every GPU synchronised before and after (the slowest rank for PyTorch).
Communication alone, on equal bytes: cuactor's token all-gather + output reduce-scatter against two
all_to_all_single calls of ranks * tokens * hidden elements (each moves (R-1) * tokens * hidden per rank
each way, as the gather and the scatter do), issued eagerly and replayed from a CUDA graph on both sides.
Ratios > 1: cuactor faster.

Usage: bench/ep_torch.py [--out DIR] [--cuactor PATH] [--reps N] [--warmup N] [--only TEXT] [--interleaved]
(--interleaved: cuactor's gate/up weights interleaved, so its SwiGLU runs in the gate/up GEMM's epilogue)
"""
import argparse
import json
import os
import pathlib
import socket
import subprocess
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from grouped_mm_torch import find_build  # noqa: E402 (the sibling benchmark's helper)

# (name, tokens per rank, hidden, ffn, experts, top_k): the same list as `cuactor bench ep`.
SHAPES = [
    ("h7168 f2048 e64 k8 prefill", 4096, 7168, 2048, 64, 8),
    ("h7168 f2048 e64 k8 decode", 128, 7168, 2048, 64, 8),
    ("h4096 f1536 e128 k8 prefill", 4096, 4096, 1536, 128, 8),
]


def torch_layer(torch, dist, x, ids, w, wgu, wd, rank, ranks, experts):
    """The PyTorch formulation of one rank's forward (module docstring)."""
    F = torch.nn.functional
    tokens, top_k = ids.shape
    hidden = x.shape[1]
    local = experts // ranks
    flat = ids.reshape(-1)
    dest = torch.div(flat, local, rounding_mode="floor")
    order = torch.argsort(dest, stable=True)
    send_counts = torch.bincount(dest, minlength=ranks)
    recv_counts = torch.empty_like(send_counts)
    dist.all_to_all_single(recv_counts, send_counts)
    send_splits, recv_splits = send_counts.tolist(), recv_counts.tolist()
    token_of_pair = torch.div(order, top_k, rounding_mode="floor")
    recv_x = x.new_empty(sum(recv_splits), hidden)
    dist.all_to_all_single(recv_x, x[token_of_pair], recv_splits, send_splits)
    recv_e = flat.new_empty(sum(recv_splits))
    dist.all_to_all_single(recv_e, flat[order], recv_splits, send_splits)
    local_e = recv_e - rank * local
    lorder = torch.argsort(local_e, stable=True)
    offs = torch.bincount(local_e, minlength=local).cumsum(0).to(torch.int32)
    h = torch._grouped_mm(recv_x[lorder], wgu.transpose(-2, -1), offs=offs)
    ffn = h.shape[1] // 2
    a = F.silu(h[:, :ffn]) * h[:, ffn:]
    y = torch._grouped_mm(a, wd.transpose(-2, -1), offs=offs)
    back = torch.empty_like(y)
    back[lorder] = y
    ret = x.new_empty(tokens * top_k, hidden)
    dist.all_to_all_single(ret, back, send_splits, recv_splits)
    out = torch.zeros_like(x)
    out.index_add_(0, token_of_pair, ret * w.reshape(-1)[order, None].to(ret.dtype))
    return out


def wall_ms(torch, dist, fn, warmup, reps):
    import time
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    dist.barrier()
    start = time.perf_counter()
    for _ in range(reps):
        fn()
    torch.cuda.synchronize()
    ms = torch.tensor([(time.perf_counter() - start) * 1e3 / reps], device="cuda")
    dist.all_reduce(ms, op=dist.ReduceOp.MAX)  # the slowest rank sets the layer's time
    return float(ms.item())


def graph_ms(torch, dist, fn, warmup, reps):
    """wall_ms of fn captured into a CUDA graph and replayed (no host launch time), as cuactor's
    "graph" communication column is timed."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()  # outside the capture: NCCL's lazy set-up
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return wall_ms(torch, dist, graph.replay, warmup, reps)


def worker(rank, ranks, port, args, result_path):
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    import torch
    import torch.distributed as dist
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=ranks,
                            device_id=torch.device("cuda", rank))
    rows = []
    for name, tokens, hidden, ffn, experts, top_k in SHAPES:
        if args.only and args.only not in name or experts % ranks:
            continue
        gen = torch.Generator(device="cuda").manual_seed(1000 + rank)
        local = experts // ranks
        x = torch.randn(tokens, hidden, device="cuda", dtype=torch.bfloat16, generator=gen)
        scores = torch.rand(tokens, experts, device="cuda", generator=gen)
        ids = torch.topk(scores, top_k, dim=1).indices.to(torch.int64)  # k distinct experts, uniform
        w = torch.rand(tokens, top_k, device="cuda", generator=gen) * 0.9 + 0.1
        wgu = torch.randn(local, 2 * ffn, hidden, device="cuda", dtype=torch.bfloat16, generator=gen) / hidden ** 0.5
        wd = torch.randn(local, hidden, ffn, device="cuda", dtype=torch.bfloat16, generator=gen) / ffn ** 0.5
        layer_ms = wall_ms(torch, dist, lambda: torch_layer(torch, dist, x, ids, w, wgu, wd, rank, ranks, experts),
                           args.warmup, args.reps)
        a2a_in = torch.randn(ranks * tokens * hidden, device="cuda", dtype=torch.bfloat16, generator=gen)
        a2a_out = torch.empty_like(a2a_in)

        def two_all_to_all():
            dist.all_to_all_single(a2a_out, a2a_in)
            dist.all_to_all_single(a2a_in, a2a_out)

        a2a_ms = wall_ms(torch, dist, two_all_to_all, args.warmup, args.reps) if ranks > 1 else 0.0
        a2a_graph_ms = graph_ms(torch, dist, two_all_to_all, args.warmup, args.reps) if ranks > 1 else 0.0
        rows.append({"shape": name, "torch_ms": layer_ms, "a2a_ms": a2a_ms, "a2a_graph_ms": a2a_graph_ms})
        del x, scores, ids, w, wgu, wd, a2a_in, a2a_out
        torch.cuda.empty_cache()
    if rank == 0:
        pathlib.Path(result_path).write_text(json.dumps(rows))
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=None, help="directory for ep_torch.{txt,json}")
    parser.add_argument("--cuactor", default=None, help="path of the cuactor binary")
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--only", default="", help="only the shapes whose name contains this text")
    parser.add_argument("--interleaved", action="store_true", help="cuactor with interleaved gate/up weights")
    args = parser.parse_args()
    import torch
    import torch.multiprocessing as mp
    ranks = torch.cuda.device_count()
    if ranks == 0:
        sys.exit("ep_torch.py: no CUDA GPU is visible")
    build = find_build(args.cuactor)
    binary = pathlib.Path(args.cuactor) if args.cuactor else build / "tools" / "cuactor"

    with tempfile.TemporaryDirectory() as tmp:
        result = pathlib.Path(tmp) / "torch.json"
        mp.spawn(worker, args=(ranks, free_port(), args, str(result)), nprocs=ranks, join=True)
        torch_rows = {r["shape"]: r for r in json.loads(result.read_text())}

    cmd = [str(binary), "bench", "ep", "--json", "--reps", str(args.reps), "--warmup", str(args.warmup)]
    if args.only:
        cmd += ["--only", args.only]
    if args.interleaved:
        cmd += ["--interleaved"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, NCCL_NVLS_ENABLE="0"))
    if proc.returncode != 0:
        print(proc.stdout, proc.stderr, sep="\n")
        sys.exit(f"ep_torch.py: {binary} bench ep failed with {proc.returncode}")
    ours = json.loads(next((line for line in proc.stdout.splitlines() if line.startswith("[")), "[]"))

    lines = [f"expert-parallel MoE layer on {ranks} x {torch.cuda.get_device_name(0)}, torch {torch.__version__}, "
             f"NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}; wall ms per forward (PyTorch: slowest rank); "
             f"cuactor's gate/up weights {'interleaved' if args.interleaved else 'stacked'}",
             f"{'shape':<30} {'torch ms':>9} {'eager ms':>9} {'graph ms':>9} {'eager x':>8} {'graph x':>8} "
             f"{'a2a GB/s':>9} {'ours GB/s':>9} {'bw x':>6} {'graphs: a2a':>11} {'ours':>7} {'bw x':>6}"]
    rows = []
    for r in ours:
        t = torch_rows.get(r["shape"])
        if t is None:
            continue
        row = dict(r, torch_ms=t["torch_ms"], a2a_ms=t["a2a_ms"], a2a_graph_ms=t["a2a_graph_ms"])
        rows.append(row)

        def gbs(ms):
            return r["comm_bytes"] / (ms * 1e6) if ms > 0 else float("nan")

        a2a_bw, our_bw = gbs(t["a2a_ms"]), gbs(r["comm_ms"])
        a2a_gbw, our_gbw = gbs(t["a2a_graph_ms"]), gbs(r.get("comm_graph_ms", 0))  # absent from older binaries
        lines.append(f"{r['shape']:<30} {t['torch_ms']:>9.3f} {r['eager_ms']:>9.3f} {r['graph_ms']:>9.3f} "
                     f"{t['torch_ms'] / r['eager_ms']:>8.2f} {t['torch_ms'] / r['graph_ms']:>8.2f} "
                     f"{a2a_bw:>9.1f} {our_bw:>9.1f} {our_bw / a2a_bw:>6.2f} {a2a_gbw:>11.1f} {our_gbw:>7.1f} "
                     f"{our_gbw / a2a_gbw:>6.2f}")
    text = "\n".join(lines)
    print(text)
    if args.out:
        out = pathlib.Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "ep_torch.txt").write_text(text + "\n")
        (out / "ep_torch.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
