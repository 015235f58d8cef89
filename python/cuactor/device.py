"""The device actor from asyncio (SPEC [P3], [R5]-[R10]).

``Device(ordinal)`` owns a cuactor device actor: one thread that owns the CUDA context, a bounded
mailbox, supervision (poisoning, recovery, circuit breaker) and, with ``isolated=True``, a
``cuactor-worker`` process that holds the context and is replaced when it faults. Every operation
returns an awaitable; replies are resolved on the event loop's thread (the actor's threads only
signal an eventfd the loop watches, never running Python), and failures raise the classes of
:mod:`cuactor.errors` (``StaleHandleError``, ``ContextPoisonedError``, ``CircuitOpenError``,
``QueueFullError``, ...).

Example::

    async def main():
        with cuactor.Device(0) as dev:
            x = await dev.allocate((1024,), "f32")
            await dev.fill(x, 2.0)
            host = await dev.copy_to_host(x)         # numpy array
            t = torch.from_dlpack(x)                  # zero-copy view, after the generation check
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
from collections.abc import Sequence
from typing import Any

from . import _core

__all__ = ["Device"]

GpuRef = _core.GpuRef


def _worker_path() -> str:
    """cuactor-worker for isolated mode: $CUACTOR_WORKER, else the one installed in this package."""
    env = os.environ.get("CUACTOR_WORKER")
    if env:
        return env
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cuactor-worker")
    return here if os.path.exists(here) else ""


class Device:
    """A supervised CUDA device whose operations are asyncio awaitables.

    Args:
        ordinal: CUDA device ordinal.
        isolated: run the context in a supervised ``cuactor-worker`` process ([R10]); a fault there
            fails the requests in flight once (``ContextPoisonedError`` / ``WorkerLostError``) and the
            device goes on with a new worker. Buffers then have no address in this process
            (DLPack export raises ``UnsupportedError``).
        mailbox_capacity: queued requests beyond this fail with ``QueueFullError``.

    Raises:
        NoDeviceError: the ordinal does not exist.
    """

    def __init__(self, ordinal: int = 0, isolated: bool = False, *, mailbox_capacity: int = 1024) -> None:
        self._core = _core.DeviceCore(ordinal, isolated, _worker_path() if isolated else "", mailbox_capacity)
        self._ids = itertools.count(1)
        self._futures: dict[int, asyncio.Future[Any]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def ordinal(self) -> int:
        """CUDA device ordinal."""
        return self._core.ordinal

    def stats(self) -> dict[str, Any]:
        """DeviceStats ([O2]): queue, in flight, generation, circuit, memory, worker restarts."""
        return json.loads(self._core.stats_json())

    def close(self) -> None:
        """Shuts the actor down: queued requests fail with ``DeviceShuttingDownError``; waits for the
        work in flight. Pending awaitables are resolved if their loop still runs. Idempotent."""
        self._core.shutdown()
        if self._loop is not None and not self._loop.is_closed():
            self._drain()
            self._loop.remove_reader(self._core.fileno())
        self._loop = None

    def __enter__(self) -> Device:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _attach(self) -> asyncio.AbstractEventLoop:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            if self._loop is not None and not self._loop.is_closed():
                self._loop.remove_reader(self._core.fileno())
            loop.add_reader(self._core.fileno(), self._drain)
            self._loop = loop
        return loop

    def _drain(self) -> None:
        for rid, error, value in self._core.drain():
            fut = self._futures.pop(rid, None)
            if fut is None or fut.done():
                continue
            if error is not None:
                fut.set_exception(error)
            else:
                fut.set_result(value)

    def _request(self, method: str, *args: Any) -> asyncio.Future[Any]:
        loop = self._attach()
        rid = next(self._ids)
        fut: asyncio.Future[Any] = loop.create_future()
        self._futures[rid] = fut
        try:
            getattr(self._core, method)(rid, *args)
        except BaseException:
            del self._futures[rid]
            raise
        return fut

    async def allocate(self, shape: Sequence[int] | int, dtype: str = "f32") -> GpuRef:
        """A new buffer of ``shape`` and ``dtype`` (bf16, f16, f32, f64, i32, i64, e4m3, ...),
        stream-ordered from the device's pool. ``OutOfMemoryError`` when it does not fit."""
        dims = [int(shape)] if isinstance(shape, int) else [int(s) for s in shape]
        return await self._request("allocate", dims, str(dtype).removeprefix("torch."))

    async def copy_to_device(self, dst: GpuRef, host: Any) -> GpuRef:
        """Copies a C-contiguous host array (NumPy, or anything with DLPack on the CPU) of dst's dtype
        into ``dst`` (the data is staged at the call, so ``host`` may change at once)."""
        return await self._request("copy_to_device", dst, host)

    async def copy_to_host(self, src: GpuRef) -> Any:
        """The buffer's contents as a new NumPy array of its shape (bf16 as its uint16 bits, fp8 as
        uint8)."""
        return await self._request("copy_to_host", src)

    async def fill(self, dst: GpuRef, value: float) -> GpuRef:
        """Sets every element of ``dst`` (bf16, f16, f32, f64, i32, i64) to ``value``."""
        return await self._request("fill", dst, float(value))

    async def grouped_mm(self, a: GpuRef, b: GpuRef, offs: GpuRef, out: GpuRef, *, layout_b: str = "col") -> GpuRef:
        """torch._grouped_mm's 2-D x 3-D case through the actor ([K6]): a (T, K), b (G, N, K) for
        ``layout_b="col"`` (expert weights as nn.Linear stores them) or (G, K, N) for ``"row"``, offs
        (G,) i32 cumulative end rows on the device, out (T, N) bf16 / f16 / f32. The actor orders the
        work after the buffers' last writes and replies when it finished."""
        return await self._request("grouped_mm", a, b, offs, out, layout_b)
