from collections.abc import Sequence


def info_json(with_actor_stats: bool = False, indent: int = -1) -> str:
    """
    The report of `cuactor info --json` as JSON text (cuactor.info() parses it).
    """

def version() -> str:
    """The cuactor library version."""

def mm(a: object | None, b: object | None, out: object | None, stream: int | None, alloc: object | None = None, epilogue: str | None = None, c: object | None = None, row_scale: object | None = None, col_scale: object | None = None, row_bias: object | None = None, col_bias: object | None = None, amax: object | None = None, aux: object | None = None, row_sum: object | None = None, alpha: float = 1.0, beta: float = 0.0, clamp_lo: float = -3.4028234663852886e+38, clamp_hi: float = 3.4028234663852886e+38, sku: str | None = None, split_k: int = 0, swap_ab: int = 0) -> None:
    """
    out = epilogue(a @ b) on `stream` (a cudaStream_t as an integer; None: torch's current stream for torch tensors) with a GemmPlan: rank 2 (M, K) x (K, N) -> (M, N), or rank 3 with a common batch. `epilogue` is a tree token such as 'silu(add(acc,colbias))' whose operands are c (out's shape and dtype), row_scale / col_scale (float32, M / N values), row_bias / col_bias (out's dtype, M / N values), the outputs amax (one float32: max |x|), aux (out's shape, strides and dtype) and row_sum (float32, batch * M row sums), alpha, beta and the clamp bounds; trees the catalog lacks are compiled by the JIT on first use; `sku` (a dense SKU's text) runs exactly that catalog kernel instead of the plan's choice; `split_k` 0 lets the plan split K on small decode grids, 1 never splits, 2..16 forces that many slices (reduced in order: deterministic); `swap_ab` 0 lets the plan compute decode problems of up to 32 rows (64 on grids of few tiles) as D^T = B^T A^T, 1 never, 2 always. `alloc` gives the plan's workspace, if any: alloc(nbytes) returning a device tensor, or a pair (raw_alloc(nbytes, stream) -> int, raw_delete(ptr)) (default: torch's caching allocator for torch tensors, else the device's pool). Raises the cuactor.errors class of the failure.
    """

def moe_expert_ffn(x: object | None, w_gate_up: object | None, w_down: object | None, offs: object | None, routing_weights: object | None, out: object | None, stream: int | None, alloc: object | None = None, gate_up_interleaved: bool = False, swiglu: str = 'auto') -> None:
    """
    The mixture-of-experts expert FFN on `stream` (as for mm): x (T, H) rows grouped by expert, w_gate_up (E, 2F, H) (gate rows then up rows per expert, or with gate_up_interleaved gate row f and up row f at rows 2f and 2f + 1, which lets the SwiGLU run in the first GEMM's epilogue), w_down (E, H, F), offs (E,) int32 cumulative end rows in device memory, routing_weights (T,) float32 or None, out (T, H): out = w * (silu(x Wg^T) * (x Wu^T)) Wd^T per expert. `swiglu`: 'auto' (the epilogue where the build has the fused form of the GEMM kernel the expert size takes; interleaved weights only), 'epilogue' (always fused; needs gate_up_interleaved) or 'separate' (an elementwise kernel).
    """

def interleave_gate_up(w_gate_up: object | None, out: object | None, stream: int | None) -> None:
    """
    Copies stacked gate/up weights w_gate_up (E, 2F, H) into out (same shape and dtype, bf16 or f16) with gate row f at row 2f and up row f at row 2f + 1, on `stream` (as for mm): the layout moe_expert_ffn takes with gate_up_interleaved=True.
    """

def grouped_mm_torch(a: object | None, b: object | None, offs: object | None, out_dtype: object | None) -> object:
    """
    cuactor.grouped_mm's torch fast path (out=None, torch's current stream): the new output tensor, or None when the operands need the general path (which also raises the errors).
    """

def grouped_mm(a: object | None, b: object | None, offs: object | None, out: object | None, stream: int | None, alloc: object | None = None, scale_a: object | None = None, scale_b: object | None = None, ab_dtype: str | None = None) -> None:
    """
    torch._grouped_mm's 2-D x 3-D case on `stream` (as for mm): a (T, K), b (G, K, N), offs (G,) int32 cumulative end rows in device memory, out (T, N); rows past offs[-1] are not written. fp8 (e4m3) inputs take scale_a (1 or G float32) and scale_b (G float32); `ab_dtype` reinterprets a's and b's storage (fp8 passed as uint8). `alloc` gives the workspace: a callable alloc(nbytes) returning a device tensor, or a pair (raw_alloc(nbytes, stream) -> int, raw_delete(ptr)) of a stream-ordered allocator (default as for mm).
    """

def conv2d(x: object | None, w: object | None, out: object | None, stream: int | None, stride: Sequence[int], padding: Sequence[int], dilation: Sequence[int], alloc: object | None = None, sku: str | None = None, split: Sequence[int] | None = None) -> None:
    """
    Convolution forward on `stream` (a cudaStream_t as an integer; None: torch's current stream for torch tensors) with a cached ConvPlan: out (N, P, Q, K) = conv(x (N, H, W, C), w (K, R, S, C)); `stride`, `padding` (symmetric) and `dilation` are (height, width) pairs. Every tensor is packed in the order of its dimensions (channels contiguous) and on one CUDA device. `alloc` gives the plan's workspace, if any, as for mm (default: torch's caching allocator for torch tensors, else stream-ordered from the device's pool). `sku` (a GemmSku text) runs exactly that catalog kernel instead of the heuristic's choice; `split` (images, rows, channels) slices the reduction into that many ranges instead of the plan's split: wgrad splits images and rows, fprop its input channels. Raises the cuactor.errors class of the failure.
    """

def conv2d_backward_data(dy: object | None, w: object | None, out: object | None, stream: int | None, stride: Sequence[int], padding: Sequence[int], dilation: Sequence[int], alloc: object | None = None, sku: str | None = None, split: Sequence[int] | None = None) -> None:
    """
    Convolution data gradient, as conv2d: out = dx (N, H, W, C) from dy (N, P, Q, K) and w (K, R, S, C); H and W are out's. It is never split (a `split` other than (1, 1, 1) is refused).
    """

def conv2d_backward_weight(dy: object | None, x: object | None, out: object | None, stream: int | None, stride: Sequence[int], padding: Sequence[int], dilation: Sequence[int], alloc: object | None = None, sku: str | None = None, split: Sequence[int] | None = None) -> None:
    """
    Convolution filter gradient, as conv2d: out = dw (K, R, S, C) from dy (N, P, Q, K) and x (N, H, W, C); R and S are out's.
    """

class PreparedGroupedGemm:
    """
    A grouped GEMM bound to its operands: validated once, run many times (also inside torch.cuda.graph). Keeps the operands alive; their group rows are read from offs in device memory at each run, so new routings need no new prepare.
    """

    @property
    def workspace_size(self) -> int:
        """Device workspace bytes run() needs."""

    @property
    def sku(self) -> str:
        """The kernel's GemmSku text."""

    @property
    def group_count(self) -> int:
        """Number of groups."""

    @property
    def device(self) -> int:
        """CUDA ordinal the work runs on."""

    def run(self, stream: int, workspace: object | None = None) -> None:
        """
        Enqueues the metadata build and the kernel on `stream` (a cudaStream_t as an integer): no allocation when `workspace` (a device tensor of at least workspace_size bytes, 256-byte aligned) is given, no synchronisation. Without one, the workspace is stream-ordered from the device's pool.
        """

class GroupedGemmPlan:
    """
    A host-only grouped GEMM plan: the catalog kernel (SKU) for an input dtype, an output dtype, the layout of B and a device. Raises UnsupportedError when no kernel computes it.
    """

    def __init__(self, dtype: str, out_dtype: str, layout_b: str = 'col', device: int = 0, rows_per_group_hint: int = 0, sku: str | None = None, scales: str = 'tensor', n_hint: int = 0, k_hint: int = 0) -> None:
        """
        dtype: bf16, f16 or e4m3; out_dtype: bf16, f16 or f32; layout_b: 'col' (b[g] stored N x K, torch's transposed weights) or 'row' (K x N); rows_per_group_hint, n_hint and k_hint (0: unknown) pick the size class as the functional calls do: <= 64 rows the small-M kernel, a few hundred rows with N and K known (<= 4096; e4m3 <= 8192) the medium one; sku forces one compiled kernel; scales: 'tensor' (e4m3: per-tensor scale_a (1 or G) and scale_b (G)) or 'rowwise' (e4m3: scale_a (T,) per row, scale_b (G, N) per group and column, as torch._scaled_grouped_mm).
        """

    @property
    def sku(self) -> str:
        """The chosen kernel's GemmSku text."""

    def prepare(self, a: object | None, b: object | None, offs: object | None, out: object | None, scale_a: object | None = None, scale_b: object | None = None, ab_dtype: str | None = None) -> PreparedGroupedGemm:
        """
        Validates torch._grouped_mm-style operands (a (T, K), b (G, K, N), offs (G,) int32 on the device, out (T, N); fp8 scales) against the plan and returns a PreparedGroupedGemm. Host only: no device work.
        """

def jit_cache_directory(directory: str | None = None) -> str:
    """
    The JIT disk cache directory: `directory` when given, else cuactor's default (<cache root>/jit).
    """

def jit_list(directory: str | None = None) -> list:
    """
    Every entry of the JIT disk cache, most recently used first, as dicts (key, kind, bytes, metadata, problem: None when intact, else why it cannot be used).
    """

def jit_clear(directory: str | None = None) -> str:
    """
    Removes every cache file (entries, locks, temporaries) and nothing else; returns the directory.
    """

def jit_warm(gemm: Sequence[str], nvrtc_sources: Sequence[str], nvrtc_names: Sequence[str], arch: str, nvrtc_options: Sequence[str], directory: str | None = None) -> list:
    """
    Compiles GEMM SKUs (nvcc) and NVRTC sources into the disk cache without a GPU; returns one report dict per entry (what, key, already_cached, seconds, bytes). Releases the GIL while compiling.
    """

class GpuRef:
    """
    A generation-checked device buffer of a cuactor.Device ([R2]): shared ownership of the memory; every use checks that its device incarnation is still current. Exports through DLPack (torch.from_dlpack(ref), cupy.from_dlpack(ref)) after that check.
    """

    @property
    def dtype(self) -> str:
        """Element type name (bf16, f16, f32, i32, ...)."""

    @property
    def shape(self) -> tuple:
        """Shape."""

    @property
    def nbytes(self) -> int:
        """Size in bytes."""

    @property
    def device(self) -> int:
        """CUDA ordinal."""

    @property
    def generation(self) -> int:
        """Device generation the buffer was minted in."""

    def is_valid(self) -> bool:
        """True while the buffer's device incarnation is current."""

    def check(self) -> None:
        """
        Raises StaleHandleError (naming the reason) unless the buffer is usable.
        """

    def __dlpack__(self, *, stream: object | None = None, **kwargs) -> object:
        """
        DLPack capsule of the buffer after the generation check; the consumer's `stream` first waits for the buffer's last write (-1: no ordering). UnsupportedError for buffers of an isolated worker.
        """

    def __dlpack_device__(self) -> tuple:
        """(2, ordinal): CUDA device memory."""

    def __repr__(self) -> str: ...

class DeviceCore:
    """
    The device actor under cuactor.Device (use that class): requests are tagged with ids and their replies collected by drain() when fileno() is readable.
    """

    def __init__(self, ordinal: int, isolated: bool = False, worker_path: str = '', mailbox_capacity: int = 1024) -> None: ...

    def fileno(self) -> int:
        """An eventfd that is readable while replies wait."""

    @property
    def ordinal(self) -> int:
        """CUDA ordinal."""

    def shutdown(self) -> None:
        """Stops the actor: queued requests fail with device_shutting_down."""

    def stats_json(self) -> str:
        """DeviceStats as JSON text ([O2])."""

    def allocate(self, id: int, shape: Sequence[int], dtype: str) -> None: ...

    def copy_to_device(self, id: int, dst: GpuRef, host: object) -> None: ...

    def copy_to_host(self, id: int, src: GpuRef) -> None: ...

    def fill(self, id: int, dst: GpuRef, value: float) -> None: ...

    def grouped_mm(self, id: int, a: GpuRef, b: GpuRef, offs: GpuRef, out: GpuRef, layout_b: str = 'col') -> None: ...

    def drain(self) -> list:
        """Waiting replies as (id, exception or None, result or None) tuples."""
