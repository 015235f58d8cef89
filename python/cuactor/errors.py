"""Exceptions of cuactor: one class per error code ([E1], SPEC [P3]).

Every exception derives from :class:`Error` and carries the code it came from: ``category``
(``"cuactor"``, ``"cuda"``, ``"cuda-driver"``, ``"nvrtc"``, ``"cublas"``), ``value`` (the code's
number in that category) and ``code`` (its name). Classes also derive from the built-in exception
Python code expects for that kind of failure (``ValueError`` for invalid arguments,
``NotImplementedError`` for what no kernel supports, ``MemoryError`` for out-of-memory, ...).
Decide by class or by ``value``, never by message.
"""

from __future__ import annotations

__all__ = [
    "Error",
    "StaleHandleError",
    "DeviceShuttingDownError",
    "ContextPoisonedError",
    "CircuitOpenError",
    "QueueFullError",
    "UnsupportedError",
    "InvalidArgumentError",
    "CaptureInvalidatedError",
    "WorkspaceTooSmallError",
    "NoDeviceError",
    "OutOfMemoryError",
    "WrongDeviceError",
    "CompileError",
    "CacheCorruptError",
    "OperationTimeoutError",
    "OperationCancelledError",
    "InternalError",
    "WorkerLostError",
    "ProtocolError",
    "UntrustedError",
    "FileIOError",
    "CudaError",
]


class Error(Exception):
    """Base class of every cuactor error.

    Attributes:
        category: the error category (``"cuactor"``, ``"cuda"``, ...).
        value: the code's number in its category.
        code: the code's name (e.g. ``"stale handle"``).
    """

    category: str = "cuactor"
    value: int = 0
    code: str = ""

    def __init__(self, message: str = "", *, category: str | None = None, value: int | None = None,
                 code: str | None = None) -> None:
        super().__init__(message)
        if category is not None:
            self.category = category
        if value is not None:
            self.value = value
        if code is not None:
            self.code = code


class StaleHandleError(Error):
    """A GpuRef or graph was used after its device or generation went away ([R2])."""
    value = 1


class DeviceShuttingDownError(Error):
    """The device stopped accepting work (orderly shutdown, [R9])."""
    value = 2


class ContextPoisonedError(Error):
    """A sticky CUDA error poisoned the context while the operation was in flight ([R7])."""
    value = 3


class CircuitOpenError(Error):
    """Too many poisonings or a failed recovery: the device rejects work ([R9])."""
    value = 4


class QueueFullError(Error):
    """The device actor's bounded mailbox is full ([R5])."""
    value = 5


class UnsupportedError(Error, NotImplementedError):
    """Valid, but no kernel or mode of this build supports it (dtype x arch, layout, ...)."""
    value = 6


class InvalidArgumentError(Error, ValueError):
    """An argument breaks a documented rule; the message names the value and the rule ([E2])."""
    value = 7


class CaptureInvalidatedError(Error):
    """An illegal call during stream capture ended the capture ([G5])."""
    value = 8


class WorkspaceTooSmallError(Error, ValueError):
    """The caller's workspace is smaller than the plan requires."""
    value = 9


class NoDeviceError(Error):
    """No CUDA device is present, or the ordinal does not exist."""
    value = 10


class OutOfMemoryError(Error, MemoryError):
    """An allocation failed for lack of memory."""
    value = 11


class WrongDeviceError(Error, ValueError):
    """A buffer or object of one device was used on another."""
    value = 12


class CompileError(Error):
    """Run-time compilation (NVRTC / nvcc) failed."""
    value = 13


class CacheCorruptError(Error):
    """A cache entry failed its integrity check."""
    value = 14


class OperationTimeoutError(Error, TimeoutError):
    """An operation did not finish in its allotted time."""
    value = 15


class OperationCancelledError(Error):
    """The operation was cancelled before it ran."""
    value = 16


class InternalError(Error):
    """A broken invariant inside cuactor (a bug: please report it)."""
    value = 17


class WorkerLostError(Error):
    """The isolated worker process died, was killed or missed its deadline ([R10])."""
    value = 18


class ProtocolError(Error):
    """A malformed message on a worker channel."""
    value = 19


class UntrustedError(Error, PermissionError):
    """A file or directory is not safe to use (owner, mode or type)."""
    value = 20


class FileIOError(Error, OSError):
    """Reading or writing a file failed."""
    value = 21


class CudaError(Error):
    """An error code of CUDA (runtime or driver), NVRTC or cuBLAS; ``category`` says which."""


_BY_VALUE: dict[int, type[Error]] = {
    cls.value: cls
    for cls in (StaleHandleError, DeviceShuttingDownError, ContextPoisonedError, CircuitOpenError, QueueFullError,
                UnsupportedError, InvalidArgumentError, CaptureInvalidatedError, WorkspaceTooSmallError, NoDeviceError,
                OutOfMemoryError, WrongDeviceError, CompileError, CacheCorruptError, OperationTimeoutError,
                OperationCancelledError, InternalError, WorkerLostError, ProtocolError, UntrustedError, FileIOError)
}

# cudaErrorMemoryAllocation (runtime) and CUDA_ERROR_OUT_OF_MEMORY (driver) are both 2.
_CUDA_OUT_OF_MEMORY = 2


def _from_code(category: str, value: int, code: str, message: str) -> Error:
    """The exception for an error code (used by the extension module; not public API)."""
    if category == "cuactor":
        cls = _BY_VALUE.get(value, Error)
    elif category in ("cuda", "cuda-driver") and value == _CUDA_OUT_OF_MEMORY:
        cls = OutOfMemoryError
    elif category == "nvrtc":
        cls = CompileError
    else:
        cls = CudaError
    return cls(message, category=category, value=value, code=code)
