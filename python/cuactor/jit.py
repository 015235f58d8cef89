"""The run-time kernel cache ([J3]-[J5]), as ``cuactor jit ...`` on the command line.

Warming needs no GPU: fill the cache on a build machine and ship it (``cache_dir``) to the GPU
machine, which loads the entries as they are.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from . import _core

__all__ = ["cache_dir", "warm", "list", "verify", "clear"]

_list = list


def cache_dir(directory: str | os.PathLike[str] | None = None) -> str:
    """The JIT disk cache directory: ``directory`` when given, else cuactor's default
    (``$CUACTOR_CACHE_DIR`` or ``~/.cache/cuactor``, then ``/jit``)."""
    return _core.jit_cache_directory(None if directory is None else os.fspath(directory))


def warm(gemm: Iterable[str] = (), nvrtc: Iterable[str | os.PathLike[str]] = (), *, arch: str = "sm_90a",
         nvrtc_options: Iterable[str] = (), directory: str | os.PathLike[str] | None = None) -> _list[dict[str, Any]]:
    """Compiles into the disk cache without a GPU: GEMM SKUs (``GemmSku`` text, e.g.
    ``"dense:sm_90a:bf16,bf16,bf16,bf16,f32:row,col,row:128x128x64:1x1x1:s0:cooperative:linear_combination"``)
    with nvcc, and CUDA source files with NVRTC for ``arch``. Returns one dict per entry (what, key,
    already_cached, seconds, bytes). Takes 25-60 s per CUTLASS kernel not yet cached; the GIL is
    released meanwhile.

    Raises:
        InvalidArgumentError: nothing to warm, a SKU that does not parse, an unknown arch.
        CompileError / UnsupportedError: a compile failed, or a SKU no template expresses.
    """
    sources, names = [], []
    for path in nvrtc:
        with open(path, encoding="utf-8") as f:
            sources.append(f.read())
        names.append(os.path.basename(os.fspath(path)))
    return _core.jit_warm(_list(gemm), sources, names, arch, _list(nvrtc_options),
                          None if directory is None else os.fspath(directory))


def list(directory: str | os.PathLike[str] | None = None) -> _list[dict[str, Any]]:  # noqa: A001 (the CLI's verb)
    """Every cache entry, most recently used first: dicts with key, kind (cubin, ptx, shared_object),
    bytes, metadata and problem (None when intact, else why it cannot be used)."""
    return _core.jit_list(None if directory is None else os.fspath(directory))


def verify(directory: str | os.PathLike[str] | None = None) -> _list[dict[str, Any]]:
    """The damaged or untrusted entries of the cache (an empty list when every entry is intact)."""
    return [e for e in list(directory) if e["problem"] is not None]


def clear(directory: str | os.PathLike[str] | None = None) -> str:
    """Removes every cache file (and nothing else) from the directory; returns it."""
    return _core.jit_clear(None if directory is None else os.fspath(directory))
