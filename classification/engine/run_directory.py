"""A run directory's two rules, shared by train_cls and train_det (global rank 0 applies them, before anything is
written):
- one writer: the process that trains (or evaluates) into OUTPUT_DIR holds an exclusive lock on
  OUTPUT_DIR/.run.lock for its lifetime, so a second run started into the same directory -- by mistake, or a
  duplicate main job -- stops at once instead of mixing its files with the first's. The lock is an flock: it
  ends with the process, also when killed, so a crashed run never leaves a stale lock behind;
- no silent overwrite: a directory that holds a run (a checkpoint, final weights or metrics) is continued only
  with --resume."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

__all__ = ["RunDirectoryBusy", "lock_run_directory", "refuse_existing_run", "LOCK_NAME", "RUN_FILES"]

LOCK_NAME = ".run.lock"
RUN_FILES = ("last_checkpoint", "model_final.pth", "metrics.json")  # any of them: the directory holds a run
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


def refuse_existing_run(output_dir: str | os.PathLike, *, resume: bool, what: str = "train into it",
                        flag: str = "OUTPUT_DIR") -> None:
    """SystemExit naming the files when `output_dir` already holds a run and `resume` is not set."""
    found = [f for f in RUN_FILES if (Path(output_dir) / f).is_file()]
    if found and not resume:
        raise SystemExit(f"error: {flag} {output_dir} already holds a run ({', '.join(found)}); refusing to {what} "
                         "and overwrite it. Pass --resume to continue that run, or choose another " + flag + ".")
