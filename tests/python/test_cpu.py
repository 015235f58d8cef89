"""CPU tests of the cuactor package (CI): import, info, errors, JIT cache, argument validation."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

import cuactor
from cuactor import errors


def test_import_and_version():
    assert cuactor.__version__ == cuactor.info()["version"]
    for name in ("grouped_mm", "mm", "scaled_grouped_mm", "conv2d", "conv2d_backward_data", "conv2d_backward_weight",
                 "GroupedGemmPlan", "Device", "GpuRef", "jit", "Error"):
        assert hasattr(cuactor, name), name


def test_extension_exports_only_its_entry_point():
    # Anything else in the dynamic symbol table can interpose on other libraries of the process (a
    # std::locale destructor bound into cuactor._core crashed `import torch` after `import cuactor`).
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("binutils' nm is not installed")
    listing = subprocess.run([nm, "-D", "--defined-only", cuactor._core.__file__], check=True, capture_output=True,
                             text=True).stdout
    assert [line.split()[-1] for line in listing.splitlines() if line.strip()] == ["PyInit__core"]


def test_import_before_torch_then_torch_imports():
    # In a fresh interpreter: cuactor first, then PyTorch (which loads its own CUDA and NCCL copies).
    try:
        import importlib.util
        if importlib.util.find_spec("torch") is None:
            pytest.skip("PyTorch is not installed")
    except ValueError:
        pytest.skip("PyTorch is not importable")
    done = subprocess.run([sys.executable, "-c", "import cuactor, torch; print(torch.__version__)"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


def test_public_entities_have_docstrings():
    for name in cuactor.__all__:
        obj = getattr(cuactor, name)
        assert obj.__doc__, f"cuactor.{name} has no docstring"
    for name in cuactor.jit.__all__:
        assert getattr(cuactor.jit, name).__doc__, f"cuactor.jit.{name} has no docstring"


def test_info_matches_cli():
    info = cuactor.info()
    for key in ("version", "driver_cuda_version", "runtime_cuda_version", "devices", "kernel_families", "nvrtc",
                "nvcc", "cache_root", "jit_cache", "nccl", "topology", "catalog_scope"):
        assert key in info, key
    assert info["catalog_scope"] in ("full", "sample", "filtered"), info["catalog_scope"]
    build = os.environ.get("CUACTOR_BUILD_DIR")
    cli = os.path.join(build, "tools", "cuactor") if build else shutil.which("cuactor")
    if not cli or not os.path.exists(cli):
        pytest.skip("the cuactor CLI is not at hand (CUACTOR_BUILD_DIR unset)")
    from_cli = json.loads(subprocess.run([cli, "info", "--json"], check=True, capture_output=True, text=True).stdout)
    for report in (info, from_cli):  # what may change between the two calls (other tests run meanwhile)
        for d in report["devices"]:
            d.pop("free_memory_bytes", None)
        for k in ("files", "bytes"):
            report["jit_cache"].pop(k, None)
    assert from_cli == info


def test_every_error_code_has_its_class():
    names = cuactor._core._error_code_names()
    assert len(names) >= 21
    for value, code in names.items():
        e = errors._from_code("cuactor", value, code, "message")
        assert type(e) is not errors.Error, f"code {value} ({code}) maps to no class"
        assert isinstance(e, cuactor.Error)
        assert (e.category, e.value, e.code, str(e)) == ("cuactor", value, code, "message")
    assert isinstance(errors._from_code("cuactor", 6, "unsupported", ""), NotImplementedError)
    assert isinstance(errors._from_code("cuactor", 7, "invalid argument", ""), ValueError)
    assert isinstance(errors._from_code("cuda", 2, "out of memory", ""), MemoryError)
    assert type(errors._from_code("cuda", 700, "illegal address", "")) is errors.CudaError
    for name in ("StaleHandleError", "ContextPoisonedError", "CircuitOpenError", "QueueFullError", "UnsupportedError",
                 "InvalidArgumentError"):
        assert issubclass(getattr(cuactor, name), cuactor.Error)


def test_library_errors_arrive_as_classes():
    with pytest.raises(cuactor.InvalidArgumentError, match="nothing to warm"):
        cuactor.jit.warm()
    with pytest.raises(cuactor.InvalidArgumentError, match="sm_99z"):
        cuactor.jit.warm(["dense:sm_90a:bf16"], arch="sm_99z")
    with pytest.raises(cuactor.InvalidArgumentError):
        cuactor.jit.warm(["not a sku"])


def test_jit_cache_functions(tmp_path):
    d = tmp_path / "jit"
    assert cuactor.jit.cache_dir(d) == str(d)
    assert cuactor.jit.cache_dir().endswith("jit")
    assert cuactor.jit.list(d) == []
    assert cuactor.jit.verify(d) == []
    (d / ("0" * 32 + ".cjit")).write_bytes(b"truncated")
    (d / "keep.txt").write_text("not the cache's")
    damaged = cuactor.jit.verify(d)
    assert len(damaged) == 1 and damaged[0]["problem"]
    assert cuactor.jit.clear(d) == str(d)
    assert cuactor.jit.list(d) == []
    assert (d / "keep.txt").exists()  # the cache removes only files of its own name forms


def test_device_without_gpu_raises_no_device():
    if cuactor.info()["devices"]:
        pytest.skip("a GPU is present")
    with pytest.raises(cuactor.Error):
        cuactor.Device(0)


def test_host_arrays_are_rejected_with_value_and_rule(np):
    a = np.zeros((64, 128), np.float16)
    b = np.zeros((4, 128, 256), np.float16)
    offs = np.array([16, 32, 48, 64], np.int32)
    out = np.zeros((64, 256), np.float16)
    with pytest.raises(cuactor.InvalidArgumentError, match=r"a \(f16, shape \(64, 128\), strides \(128, 1\), cpu\): "
                                                            r"must be in CUDA device memory"):
        cuactor.grouped_mm(a, b, offs, out, stream=0)
    with pytest.raises(ValueError):  # InvalidArgumentError is a ValueError
        cuactor.mm(a, a.T.copy(), np.zeros((64, 64), np.float16), stream=0)


def test_python_level_rules(np):
    a = np.zeros((64, 128), np.float16)
    with pytest.raises(cuactor.InvalidArgumentError, match="needs offs"):
        cuactor.grouped_mm(a, np.zeros((4, 128, 8), np.float16), stream=0)
    with pytest.raises(NotImplementedError, match="2-D x 2-D"):
        cuactor.grouped_mm(a, np.zeros((128, 8), np.float16), np.zeros(4, np.int32), stream=0)
    with pytest.raises(cuactor.InvalidArgumentError, match="stream=None"):
        cuactor.grouped_mm(a, np.zeros((4, 128, 8), np.float16), np.zeros(4, np.int32), np.zeros((64, 8), np.float16))
    with pytest.raises(cuactor.InvalidArgumentError, match="out=None"):
        cuactor.mm(a, np.zeros((128, 8), np.float16), stream=0)
    with pytest.raises(cuactor.UnsupportedError, match="2-D x 3-D"):
        cuactor.scaled_grouped_mm(np.zeros((4, 4, 4)), np.zeros((4, 4, 4)), None, None, stream=0)


def test_interleave_gate_up_rules_hold_without_a_gpu(np):
    w = np.zeros((4, 64, 32), np.float16)
    with pytest.raises(cuactor.InvalidArgumentError, match="out=None"):
        cuactor.interleave_gate_up(w, stream=0)
    with pytest.raises(cuactor.InvalidArgumentError, match="must be in CUDA device memory"):
        cuactor.interleave_gate_up(w, np.zeros_like(w), stream=0)
    with pytest.raises(cuactor.InvalidArgumentError, match="w_gate_up: a str is not a tensor"):
        cuactor._core.interleave_gate_up("w", None, 0)


def test_moe_expert_ffn_swiglu_placement_is_named():
    with pytest.raises(cuactor.InvalidArgumentError, match="swiglu='fused' must be 'auto', 'epilogue' or 'separate'"):
        cuactor._core.moe_expert_ffn("x", None, None, None, None, None, 0, None, True, "fused")


def test_grouped_mm_torch_fast_path_declines_what_is_not_torch(np):
    # The general path takes these (and raises its errors); the fast path only answers None.
    a = np.zeros((64, 128), np.float16)
    assert cuactor._core.grouped_mm_torch(a, np.zeros((4, 128, 8), np.float16), np.zeros(4, np.int32), None) is None
    assert cuactor._core.grouped_mm_torch("x", "y", "z", None) is None
    assert cuactor._core.grouped_mm_torch(None, None, None, None) is None


def test_objects_that_are_not_tensors():
    with pytest.raises(cuactor.InvalidArgumentError, match="a: a str is not a tensor"):
        cuactor._core.mm("x", "y", "z", 0)
    with pytest.raises(cuactor.InvalidArgumentError, match="a: is None"):
        cuactor._core.grouped_mm(None, None, None, None, 0)


class FakeCudaArray:
    """An object exporting only __cuda_array_interface__ (as Numba's device arrays do)."""

    def __init__(self, shape, typestr, strides=None):
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr, "data": (0, False), "strides": strides,
                                         "version": 3}


def test_cuda_array_interface_is_parsed():
    with pytest.raises(cuactor.InvalidArgumentError, match=r"a \(f16, shape \(64, 128\), strides \(1, 64\)"):
        cuactor._core.mm(FakeCudaArray((64, 128), "<f2", (2, 128)), FakeCudaArray((128, 8), "<f2"),
                         FakeCudaArray((64, 8), "<f2"), 0)
    with pytest.raises(cuactor.InvalidArgumentError, match="typestr"):
        cuactor._core.mm(FakeCudaArray((4,), "<c8"), None, None, 0)


def conv_arrays(np, n=2, h=9, w=7, c=16, k=32, r=3, s=3, dtype=None):
    """x (N, H, W, C), w (K, R, S, C) and y (N, H, W, K) (padding R // 2 keeps H x W) as packed host arrays."""
    dtype = dtype or np.float16
    return (np.zeros((n, h, w, c), dtype), np.zeros((k, r, s, c), dtype), np.zeros((n, h, w, k), dtype))


def test_conv_host_arrays_are_rejected_with_value_and_rule(np):
    x, w, y = conv_arrays(np)
    on_host = r"\(f16, shape \({}\), strides \({}\), cpu\): must be in CUDA device memory"
    with pytest.raises(cuactor.InvalidArgumentError, match="x " + on_host.format("2, 9, 7, 16", "1008, 112, 16, 1")):
        cuactor.conv2d(x, w, padding=1, out=y, stream=0)
    with pytest.raises(cuactor.InvalidArgumentError, match="dy " + on_host.format("2, 9, 7, 32", "2016, 224, 32, 1")):
        cuactor.conv2d_backward_data(y, w, (9, 7), padding=1, out=x, stream=0)
    with pytest.raises(cuactor.InvalidArgumentError, match="dy " + on_host.format("2, 9, 7, 32", "2016, 224, 32, 1")):
        cuactor.conv2d_backward_weight(y, x, (3, 3), padding=(1, 1), out=w, stream=0)


def test_conv_layout_and_shape_rules_hold_without_a_gpu(np):
    x, w, y = conv_arrays(np)
    nchw = np.zeros((2, 16, 9, 7), np.float16)  # NCHW-contiguous seen as N x H x W x C: channels not contiguous
    with pytest.raises(cuactor.InvalidArgumentError,
                       match=r"x \(f16, shape \(2, 9, 7, 16\), strides \(1008, 7, 1, 63\), cpu\): must be packed "
                             r"N x H x W x C .*strides \(1008, 112, 16, 1\).*permute\(0, 2, 3, 1\)"):
        cuactor.conv2d(nchw.transpose(0, 2, 3, 1), w, padding=1, out=y, stream=0)
    with pytest.raises(cuactor.InvalidArgumentError, match=r"w \(.*\): must be packed K x R x S x C"):
        cuactor.conv2d(x, np.zeros((32, 16, 3, 3), np.float16).transpose(0, 2, 3, 1), padding=1, out=y, stream=0)
    with pytest.raises(cuactor.InvalidArgumentError, match=r"w \(.*\): C=8 does not match x's C=16"):
        cuactor.conv2d(x, np.zeros((32, 3, 3, 8), np.float16), padding=1, out=y, stream=0)
    with pytest.raises(cuactor.InvalidArgumentError, match="x is f16 and w is f32: a convolution needs one input "):
        cuactor.conv2d(x, w.astype(np.float32), padding=1, out=y, stream=0)
    with pytest.raises(cuactor.InvalidArgumentError, match=r"out \(.*\): K=16 does not match w's K=32"):
        cuactor.conv2d(x, w, padding=1, out=np.zeros((2, 9, 7, 16), np.float16), stream=0)
    with pytest.raises(cuactor.InvalidArgumentError, match=r"dy \(.*\): N=2 does not match x's N=3"):
        cuactor.conv2d_backward_weight(y, np.zeros((3, 9, 7, 16), np.float16), 3, padding=1, out=w, stream=0)
    with pytest.raises(cuactor.InvalidArgumentError, match=r"rank 3, a N x H x W x C tensor needs rank 4"):
        cuactor._core.conv2d(x[0], w, y, 0, (1, 1), (1, 1), (1, 1))


def test_conv_argument_rules(np):
    x, w, y = conv_arrays(np)
    for bad in ("2", (1, 2, 3), 1.5, True, (1, None), None):
        with pytest.raises(cuactor.InvalidArgumentError, match=r"stride=.*: must be an int or a pair of ints"):
            cuactor.conv2d(x, w, stride=bad, padding=1, out=y, stream=0)
    with pytest.raises(cuactor.InvalidArgumentError, match=r"stride=\(1, 0\): must be at least 1"):
        cuactor.conv2d(x, w, stride=(1, 0), out=y, stream=0)
    with pytest.raises(cuactor.InvalidArgumentError, match=r"GemmSku 'fastest': expected 9 ':'-separated fields"):
        cuactor.conv2d(x, w, padding=1, out=y, stream=0, sku="fastest")
    for bad in (5, b"dense", ["dense"]):
        with pytest.raises(cuactor.InvalidArgumentError, match=r"sku=.*: give a kernel's SKU text \(a str"):
            cuactor.conv2d(x, w, padding=1, out=y, stream=0, sku=bad)
        with pytest.raises(cuactor.InvalidArgumentError, match=r"sku=.*: give a kernel's SKU text \(a str"):
            cuactor.mm(x[0, 0], x[0, 0].T, stream=0, sku=bad)
    # mm's split_k and swap_ab: ints that fit 32 bits (their ranges are the plan's rules: DensePlan unit tests).
    for option in ("split_k", "swap_ab"):
        for bad in ("4", 2.0, True, None, [2]):
            with pytest.raises(cuactor.InvalidArgumentError, match=option + r"=.*: give an int \(0: the plan decides"):
                cuactor.mm(x[0, 0], x[0, 0].T, stream=0, **{option: bad})
        with pytest.raises(cuactor.InvalidArgumentError, match=option + "=1099511627776: does not fit a 32-bit int"):
            cuactor.mm(x[0, 0], x[0, 0].T, stream=0, **{option: 2**40})
        with pytest.raises(cuactor.InvalidArgumentError, match="out=None: cuactor allocates outputs only for torch"):
            cuactor.mm(x[0, 0], x[0, 0].T, stream=0, **{option: np.int64(2)})  # a valid value gets further
    with pytest.raises(cuactor.InvalidArgumentError, match=r"GemmSku 'conv_fprop:.*'"):
        cuactor.conv2d_backward_weight(y, x, 3, padding=1, out=w, stream=0, sku="conv_fprop:sm_90a:x:y:z:1:2:3:4")
    with pytest.raises(cuactor.InvalidArgumentError, match="padding=-1: must be at least 0"):
        cuactor.conv2d(x, w, padding=-1, out=y, stream=0)
    with pytest.raises(cuactor.InvalidArgumentError, match=r"dilation=\[0, 1\]: must be at least 1"):
        cuactor.conv2d(x, w, dilation=[0, 1], out=y, stream=0)
    with pytest.raises(cuactor.InvalidArgumentError, match=r"x: rank 3 \(shape \(9, 7, 16\)\), .*rank-4 N x H x W x C"):
        cuactor.conv2d(x[0], w, out=y, stream=0)
    with pytest.raises(cuactor.InvalidArgumentError, match=r"w: rank 2 .*rank-4 K x R x S x C"):
        cuactor.conv2d(x, w[0, 0], out=y, stream=0)
    with pytest.raises(cuactor.InvalidArgumentError, match=r"output would be 0x1 .*padded input \(2x3\) must hold the "
                                                            r"dilated filter \(3x3\)"):
        cuactor.conv2d(np.zeros((1, 2, 3, 16), np.float16), w, out=y, stream=0)
    with pytest.raises(cuactor.InvalidArgumentError, match="out=None: .*pass out="):
        cuactor.conv2d(x, w, padding=1, stream=0)
    with pytest.raises(cuactor.InvalidArgumentError, match="stream=None"):
        cuactor.conv2d(x, w, padding=1, out=y)
    with pytest.raises(cuactor.InvalidArgumentError, match=r"input_hw=\(8, 7\) .* gives P x Q = 8 x 7"):
        cuactor.conv2d_backward_data(y, w, (8, 7), padding=1, out=x, stream=0)
    with pytest.raises(cuactor.InvalidArgumentError, match=r"filter_rs=\(5, 5\) .* gives P x Q = 7 x 5"):
        cuactor.conv2d_backward_weight(y, x, 5, padding=1, out=w, stream=0)
    with pytest.raises(cuactor.InvalidArgumentError, match="input_hw=.*: must be an int or a pair"):
        cuactor.conv2d_backward_data(y, w, (9, 7, 1), padding=1, out=x, stream=0)
    for bad in (2, "2x1", (1, 2, 3), (1.0, 2), (True, 1)):
        with pytest.raises(cuactor.InvalidArgumentError, match=r"split=.*: give a pair of ints \(images, rows\)"):
            cuactor.conv2d_backward_weight(y, x, 3, padding=1, out=w, stream=0, split=bad)
    for bad in ("2", (1, 1, 4), 1.5, True):
        with pytest.raises(cuactor.InvalidArgumentError, match=r"split=.*: give an int \(how many ranges of input ch"):
            cuactor.conv2d(x, w, padding=1, out=y, stream=0, split=bad)
    # Counts beyond 64 bits: a typed error, not the binding's TypeError.
    with pytest.raises(cuactor.InvalidArgumentError, match=r"split=.*: 1180591620717411303424 does not fit a 64-bit"):
        cuactor.conv2d(x, w, padding=1, out=y, stream=0, split=2**70)
    with pytest.raises(cuactor.InvalidArgumentError, match=r"split=.*: -1180591620717411303424 does not fit a 64-bit"):
        cuactor.conv2d_backward_weight(y, x, 3, padding=1, out=w, stream=0, split=(1, -2**70))
    # stride 2, dilation 2 and lists are accepted (the host arrays are then refused).
    with pytest.raises(cuactor.InvalidArgumentError, match="CUDA device memory"):
        cuactor.conv2d(x, w, stride=[2, 1], padding=(2, 1), dilation=(2, 1), out=np.zeros((2, 5, 7, 32), np.float16),
                       stream=0)


@pytest.mark.parametrize("args, named", [
    (["--shapes", "8x8"], "'8x8' is not MxNxK"),
    (["--shapes", ""], "'' is not MxNxK"),
    (["--shapes", "0x64x64"], "'0x64x64' is not MxNxK"),
    (["--shapes", "64x-1x64"], "'64x-1x64' is not MxNxK"),
    (["--shapes", "99999999999999999999x1x1"], "integers from 1 to 1048576"),
    (["--trees", ";"], "names no tree"),
    (["--trees", "tanh(acc)"], "'tanh(acc)' has no PyTorch reference"),
    (["--trees", "silu(add(acc,colbias)); relu(acc)"], "'relu(acc)' has no PyTorch reference"),
])
def test_epilogue_bench_rejects_bad_shapes_and_trees(args, named):
    # The benchmark's own options: a usage error naming the value (argparse's exit 2), before any GPU work.
    script = os.path.join(os.path.dirname(__file__), "..", "..", "bench", "epilogue_torch.py")
    proc = subprocess.run([sys.executable, script, *args], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert named in proc.stderr
    assert "Traceback" not in proc.stderr
