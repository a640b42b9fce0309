"""A run directory's two rules, shared by train_cls and train_det (global rank 0 applies them, before anything is
written):
- one writer: the process that trains (or evaluates) into OUTPUT_DIR holds an exclusive lock on
  OUTPUT_DIR/.run.lock for its lifetime, so a second run started into the same directory -- by mistake, or a
  duplicate main job -- stops at once instead of mixing its files with the first's. The lock is an flock: it
  ends with the process, also when killed, so a crashed run never leaves a stale lock behind;
- no silent overwrite: a directory that holds a run (a checkpoint, final weights or metrics) is continued only
  with --resume, and --resume keeps the run's settings: a resume whose settings differ from those the run
  recorded (beyond the schedule length and bookkeeping) is refused before anything is rewritten."""

from __future__ import annotations

import fcntl
import logging
import os
from pathlib import Path

from .errors import UsageError
from .run_files import CHECKPOINT_GLOB, LAST_CHECKPOINT, run_results_held

__all__ = ["RunDirectoryBusy", "claim_run_directory", "lock_run_directory", "refuse_existing_run",
           "refuse_changed_settings", "refuse_symlinks", "refuse_special_files", "last_checkpoint_file",
           "remove_partial_writes",
           "prune_intermediate_checkpoints", "LOCK_NAME"]

LOCK_NAME = ".run.lock"
_held: dict[str, object] = {}  # path -> open file: the lock lives as long as this process


class RunDirectoryBusy(RuntimeError):
    """Another process is writing into the run directory."""


def last_checkpoint_file(output_dir: str | os.PathLike) -> Path | None:
    """The checkpoint OUTPUT_DIR/last_checkpoint names (both trainers write it after the file is complete), None
    when there is no last_checkpoint. ValueError when it is empty, names something other than a file in the
    directory, or a file that does not exist: resuming would silently start over (or fail with an assertion)."""
    out = Path(output_dir)
    tag = out / LAST_CHECKPOINT
    if not tag.is_file():
        return None
    name = tag.read_text(errors="replace").strip()
    fix = "write the name of a complete checkpoint of this run (model_*.pth) into it, or delete it to start over"
    if not name:
        raise ValueError(f"{tag} is empty: it should name the run's last checkpoint; {fix}")
    if os.path.basename(name) != name or name in (".", ".."):
        raise ValueError(f"{tag} names {name!r}, not a file in {out}; {fix}")
    if not (out / name).is_file():
        raise ValueError(f"{tag} names {name}, which is not in {out}; {fix}")
    return out / name


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
                        flag: str = "OUTPUT_DIR", resumable: bool = True) -> None:
    """UsageError naming the files when `output_dir` already holds a run and `resume` is not set; resumable:
    whether the tool has a --resume to offer."""
    found = run_results_held(output_dir)
    if found and not resume:
        remedy = "Pass --resume to continue that run, or choose" if resumable else "Choose"
        raise UsageError(f"{flag} {output_dir} already holds a run ({', '.join(found)}); refusing to {what} "
                         f"and overwrite it. {remedy} another {flag}.")


def _flatten(d, prefix: str = "") -> dict:
    out = {}
    for k, v in (d or {}).items():
        key = f"{prefix}{k}"
        out.update(_flatten(v, key + ".") if isinstance(v, dict) else {key: v})
    return out


def refuse_changed_settings(recorded: dict, now: dict, *, allowed: tuple[str, ...], source: str) -> None:
    """UsageError listing the settings a --resume would change (other than `allowed` keys): the run keeps the
    settings it recorded in `source` (a failed resume with other settings used to rewrite them)."""
    old, new = _flatten(recorded), _flatten(now)
    changed = [f"{k}: {old.get(k, '(unset)')!r} -> {new.get(k, '(unset)')!r}" for k in sorted(set(old) | set(new))
               if old.get(k) != new.get(k) and k not in allowed]
    if changed:
        raise UsageError(f"--resume with settings other than the run's ({source}): {'; '.join(changed[:6])}"
                         f"{' ...' if len(changed) > 6 else ''}. A resumed run keeps its settings; to change them, "
                         "start a new output directory")


def refuse_symlinks(output_dir: str | os.PathLike) -> None:
    """UsageError if an entry of the run directory is a symbolic link: a run writes config.yaml, log.txt, metrics
    and checkpoints there, and through a link it would overwrite a file outside the run. (The directory itself
    may be a link, e.g. to a larger disk.)"""
    out = Path(output_dir)
    if not out.is_dir():
        return
    links = sorted(p for p in out.iterdir() if p.is_symlink())
    if links:
        shown = ", ".join(f"{p.name} -> {os.readlink(p)}" for p in links[:3])
        raise UsageError(f"{out} holds symbolic links ({shown}{' ...' if len(links) > 3 else ''}); a run "
                         "writes its files there and would write through them. Remove the links or choose another "
                         "output directory")


def refuse_special_files(output_dir: str | os.PathLike) -> None:
    """UsageError if an entry of the run directory is neither a regular file nor a directory (a FIFO, a socket, a
    device): a run reads and writes its files by name, and opening a FIFO blocks forever (`--resume` with
    metrics.json a FIFO hung)."""
    out = Path(output_dir)
    if not out.is_dir():
        return
    odd = sorted(p for p in out.iterdir() if not p.is_symlink() and not (p.is_file() or p.is_dir()))
    if odd:
        raise UsageError(f"{odd[0]}: not a regular file (a FIFO, socket or device); a run reads and writes its "
                         "files by name and would block on it. Remove it or choose another output directory")


def remove_partial_writes(output_dir: str | os.PathLike) -> list[str]:
    """Delete the temporary files of atomic writes (`.NAME.XXXXXXXX.tmp`, backbones.checkpoint_io) that a killed
    writer left behind (SIGKILL, or SIGTERM without a handler, mid-save: the rename never came); only while holding
    the directory's lock, so no live writer owns them. Returns their names (logged by the caller's logger)."""
    out = Path(output_dir)
    if not out.is_dir():
        return []
    stale = [p for p in out.iterdir() if p.name.startswith(".") and p.name.endswith(".tmp") and p.is_file()
             and not p.is_symlink()]
    for p in stale:
        p.unlink(missing_ok=True)
    if stale:
        logging.getLogger(__name__).info(f"removed {len(stale)} partial file(s) of a killed run from {out}: "
                                         f"{', '.join(p.name for p in stale[:3])}")
    return [p.name for p in stale]


def prune_intermediate_checkpoints(output_dir: str | os.PathLike, keep: int) -> int:
    """Delete all but the newest `keep` intermediate checkpoints (model_<iteration>.pth, both trainers' names;
    model_final.pth is never one); returns the bytes freed. Call it only after last_checkpoint names the newest
    file a resume needs: during a run with keep >= 1 (train_cls --keep-checkpoints), after a finished run with
    keep = 0 (the main job: later stages read model_final.pth alone)."""
    if keep < 0:
        raise ValueError(f"keep={keep}: expected 0 or more")
    intermediate = sorted(Path(output_dir).glob(CHECKPOINT_GLOB))  # zero-padded iterations: sorted by age
    freed = 0
    for stale in intermediate[:len(intermediate) - keep]:
        freed += stale.stat().st_size
        stale.unlink()
    return freed


def claim_run_directory(output_dir: str | os.PathLike, *, resume: bool, writer: bool, recorded: dict | None,
                        now: dict, may_change: tuple[str, ...], source: str, what: str = "train into it",
                        flag: str = "OUTPUT_DIR", resumable: bool = True) -> None:
    """The rules in the order a run applies them, before it writes anything: the writer (global rank 0) takes the
    lock and refuses symbolic links; an existing run needs --resume; a resume keeps the settings the run recorded
    (`recorded`, read from `source`; None when there is none) but for the keys in `may_change`."""
    if writer:
        lock_run_directory(output_dir)
        refuse_symlinks(output_dir)
        refuse_special_files(output_dir)
        remove_partial_writes(output_dir)
    refuse_existing_run(output_dir, resume=resume, what=what, flag=flag, resumable=resumable)
    if resume and recorded is not None:
        refuse_changed_settings(recorded, now, allowed=may_change, source=source)
