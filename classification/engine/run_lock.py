"""One writer per run directory: the process that trains (or evaluates) into OUTPUT_DIR holds an exclusive lock
on OUTPUT_DIR/.run.lock for its lifetime, so a second run started into the same directory -- by mistake, or a
duplicate main job -- stops at once instead of mixing its files with the first's. The lock is an flock: it ends
with the process, also when killed, so a crashed run never leaves a stale lock behind. Shared by train_cls and
train_det (global rank 0 takes it; the other processes of a run write only rank-suffixed logs)."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

__all__ = ["RunDirectoryBusy", "lock_run_directory", "LOCK_NAME"]

LOCK_NAME = ".run.lock"
_held: dict[str, object] = {}  # path -> open file: the lock lives as long as this process


class RunDirectoryBusy(RuntimeError):
    """Another process is writing into the run directory."""


def lock_run_directory(output_dir: str | os.PathLike) -> None:
    """Take the run directory's lock (idempotent in one process); RunDirectoryBusy if another process has it."""
    out = Path(output_dir)
    key = str(out.resolve())
    if key in _held:
        return
    out.mkdir(parents=True, exist_ok=True)
    f = open(out / LOCK_NAME, "a+")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        f.seek(0)
        holder = f.read().strip() or "another process"
        f.close()
        raise RunDirectoryBusy(f"{out} is in use by {holder}: another run is writing into it; wait for it, or "
                               "choose another output directory") from None
    f.seek(0)
    f.truncate()
    f.write(f"pid {os.getpid()} on {os.uname().nodename}\n")
    f.flush()
    _held[key] = f
