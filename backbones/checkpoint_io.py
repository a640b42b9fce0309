"""Reading checkpoints without executing code from them, and writing them atomically.

- `.pth` / `.pt` / `.ckpt` / `.bin` (and any zip-format torch file): `torch.load(weights_only=True)`.
- `.pkl` (Detectron2 model zoo, Detectron1/MSRA Caffe2 blobs): a restricted unpickler that admits only numpy
  arrays/dtypes/scalars and plain containers; anything else (os.system, eval, ...) is refused before it runs.
- `.safetensors`: safetensors (no code by construction).
"""

from __future__ import annotations

import contextlib
import io
import os
import pickle
import signal
import tempfile
import threading
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

import torch

__all__ = ["UnsafeCheckpointError", "CheckpointReadError", "read_checkpoint", "restricted_pickle_load",
           "atomic_torch_save", "atomic_write_text", "atomic_write"]


class CheckpointReadError(RuntimeError):
    """The file cannot be read as a checkpoint (missing, truncated, unknown format)."""


class UnsafeCheckpointError(CheckpointReadError):
    """The file holds objects whose unpickling would call arbitrary code; it was not loaded."""


# (module, name) pairs a weights pickle legitimately needs. numpy 2 renamed numpy.core -> numpy._core; pickles
# written by either name must load.
_ALLOWED_GLOBALS = {
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy.core.multiarray", "scalar"),
    ("numpy._core.multiarray", "scalar"),
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
    ("collections", "OrderedDict"),
    ("builtins", "set"),
    ("builtins", "frozenset"),
    ("_codecs", "encode"),  # bytes in protocol-2 pickles written by Python 3 (also in torch's allowlist)
    ("__builtin__", "set"),  # Python 2 pickles (Detectron1's R-50.pkl / R-101.pkl)
}


class _RestrictedUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        if (module, name) in _ALLOWED_GLOBALS:
            if module.startswith("numpy.core"):
                module = module.replace("numpy.core", "numpy._core", 1)  # numpy>=2 spelling, no warning
            if module == "__builtin__":
                module = "builtins"
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"global '{module}.{name}' is not allowed in a weights file")


def restricted_pickle_load(f, source: str = "<stream>") -> Any:
    """Unpickle numpy arrays and plain containers only. Raises UnsafeCheckpointError for anything else."""
    try:
        return _RestrictedUnpickler(f, encoding="latin1").load()
    except pickle.UnpicklingError as err:
        if "is not allowed" in str(err):
            raise UnsafeCheckpointError(
                f"{source}: refused to load: {err}. Loading it would run code named in the file. Weights files "
                "only need numpy arrays and containers; if you trust the author, re-save it as plain arrays."
            ) from None
        raise CheckpointReadError(f"{source}: not a valid pickle ({err})") from None
    except (EOFError, ValueError, TypeError, AttributeError, ImportError) as err:
        raise CheckpointReadError(f"{source}: truncated or corrupt pickle ({type(err).__name__}: {err})") from None
    except (MemoryError, OverflowError):  # an opcode declaring a bytes/str far larger than any real file holds
        raise CheckpointReadError(f"{source}: corrupt pickle: it declares an object too large to allocate") \
            from None


def _torch_load(path: Path) -> Any:
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        msg = str(err)
        if "Unsupported operand" in msg:  # a byte that is no pickle opcode: not a checkpoint, nothing unsafe
            raise CheckpointReadError(f"{path}: cannot read checkpoint, not a torch file or corrupt "
                                      f"({next(ln.strip() for ln in msg.splitlines() if 'operand' in ln)})") from None
        if "Weights only load failed" in msg or "Unsupported global" in msg or "not an allowed global" in msg:
            first = msg.splitlines()[0] if msg else ""
            detail = next((ln.strip() for ln in msg.splitlines() if "GLOBAL" in ln or "global" in ln), first)
            raise UnsafeCheckpointError(
                f"{path}: refused to load: it contains objects outside torch's weights-only allowlist "
                f"({detail}). Loading it would run code named in the file; re-save it as a plain state_dict "
                "(tensors, numbers, strings, containers) if you trust the author."
            ) from None
        raise CheckpointReadError(f"{path}: corrupt checkpoint ({msg.splitlines()[0] if msg else err})") from None
    except (RuntimeError, EOFError, zipfile.BadZipFile, OSError, IndexError, KeyError, ValueError, TypeError,
            AttributeError, UnicodeDecodeError) as err:  # e.g. a text file named .pth: "pop from empty list"
        raise CheckpointReadError(f"{path}: cannot read checkpoint, not a torch file or corrupt "
                                  f"({type(err).__name__}: {err})") from None


def read_checkpoint(path: str | os.PathLike) -> Any:
    """Read a weights file safely; the format is chosen by content (zip / pickle / safetensors), not trusted."""
    if not str(path).strip():  # Path("") is "."
        raise CheckpointReadError("no weights file given (an empty path)")
    path = Path(path)
    if not path.is_file():
        kind = ("a directory" if path.is_dir() else "not a regular file (a FIFO, socket or device)"
                if path.exists() else "no such checkpoint file")
        raise CheckpointReadError(f"{path}: {kind}" + (", not a checkpoint file" if path.is_dir() else ""))
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        try:
            return load_file(str(path))
        except Exception as err:  # safetensors raises its own SafetensorError
            raise CheckpointReadError(f"{path}: cannot read safetensors file ({err})") from None
    if zipfile.is_zipfile(path) or path.suffix in (".pth", ".pt", ".ckpt", ".bin", ".tar"):
        return _torch_load(path)
    with open(path, "rb") as f:
        head = f.read(2)
        f.seek(0)
        if not head or head[:1] != b"\x80" and head[:1] not in (b"(", b"}", b"]"):
            raise CheckpointReadError(f"{path}: not a pickle, torch or safetensors file (starts with {head!r})")
        return restricted_pickle_load(io.BufferedReader(f), str(path))


# Signals a scheduler sends to a job it preempts or times out (submitit installs Python handlers for them).
_DEFERRED_SIGNALS = tuple(getattr(signal, name) for name in ("SIGUSR1", "SIGUSR2", "SIGTERM") if hasattr(signal, name))


@contextlib.contextmanager
def signals_deferred():
    """Run the block with the Python handlers of preemption signals postponed to its end.

    A handler that checkpoints and exits (submitit's requeue) would otherwise run in the middle of a torch.save:
    its SystemExit inside the zip writer turns into "unexpected pos" and the job fails instead of requeueing.
    Only Python-level handlers are deferred (the default action of a signal is left alone), and only in the main
    thread, the one where Python runs handlers and may replace them."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[int] = []
    previous = {}
    for signum in _DEFERRED_SIGNALS:
        handler = signal.getsignal(signum)
        if callable(handler):
            previous[signum] = signal.signal(signum, lambda n, _frame: pending.append(n))
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        for signum in pending:  # handled now, with the file complete
            signal.raise_signal(signum)


def atomic_write(path: str | os.PathLike, write: Callable[[BinaryIO], None]) -> None:
    """Call `write(f)` on a temporary file in the same directory, fsync, then rename over `path`: a crash leaves
    either the old file or the complete new one, never a truncated one; a preemption signal arriving meanwhile is
    handled after the rename (signals_deferred). The project's one way to write a file that someone may be
    reading (checkpoints, last_checkpoint, metrics, configs)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with signals_deferred():
        _atomic_write(path, write)


class _WriteErrors:
    """A file whose write() remembers the OSError it raised: torch's zip writer swallows it and reports
    "unexpected pos 704 vs 598" instead of "No space left on device". Everything else is the file's."""

    def __init__(self, f: BinaryIO):
        self._f, self.error = f, None

    def write(self, data) -> int:
        try:
            return self._f.write(data)
        except OSError as err:
            self.error = err
            raise

    def __getattr__(self, name: str):
        return getattr(self._f, name)


def _new_file_mode() -> int:
    """The mode open() would give a new file (0o666 less the umask): mkstemp's 0o600 would make reports and
    checkpoints unreadable to the group that shares a run directory. Read once, at import (os.umask can only be
    read by setting it, which other threads would see)."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


_NEW_FILE_MODE = _new_file_mode()


def _atomic_write(path: Path, write: Callable[[BinaryIO], None]) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    recorder = None
    try:
        with os.fdopen(fd, "wb") as f:
            recorder = _WriteErrors(f)
            write(recorder)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, _NEW_FILE_MODE)
        os.replace(tmp, path)
    except BaseException as err:
        Path(tmp).unlink(missing_ok=True)
        cause = err if isinstance(err, OSError) else getattr(recorder, "error", None)
        if cause is not None and cause.errno is not None and not isinstance(err, (KeyboardInterrupt, SystemExit)):
            raise OSError(cause.errno, f"{path}: cannot write it ({cause.strerror or cause}); the previous "
                                       "version, if any, is unchanged") from None
        raise


def atomic_torch_save(obj: Any, path: str | os.PathLike) -> None:
    """torch.save, atomically (see atomic_write)."""
    atomic_write(path, lambda f: torch.save(obj, f))


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write a text file (UTF-8) atomically (see atomic_write)."""
    atomic_write(path, lambda f: f.write(text.encode("utf-8")))
