"""How far a running training is, for a person and for a program: `progress_bar` (tqdm on a terminal, one line a
refresh in a log) and OUTPUT_DIR/progress.json (iteration, of how many, seconds since its first step), written
atomically by both trainers every few seconds, so a supervisor (the main job) estimates the remaining time from the
run's own iterations rather than from constants."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from backbones.bounded_read import MiB, UnreadableFile, read_json
from backbones.checkpoint_io import atomic_write_text

from .run_files import PROGRESS

__all__ = ["ProgressFile", "read_progress", "PROGRESS_FILE", "progress_bar", "LOG_REFRESH_S"]

PROGRESS_FILE = PROGRESS
LOG_REFRESH_S = 30.0  # a log's progress line every 30 s: 180 lines in a 90-minute stage


class _Lines:
    """tqdm's output as lines: its carriage-return refreshes, in a file or a captured stream, were one line of up
    to 8,000 characters that no pager or grep could read."""

    def __init__(self, stream):
        self.stream = stream

    def write(self, text: str) -> None:
        text = text.replace("\r", "").strip()
        if text:
            self.stream.write(text + "\n")

    def flush(self) -> None:
        self.stream.flush()


def progress_bar(total: int, initial: int, desc: str, **kwargs):
    """A tqdm bar on stderr: redrawn each second on a terminal; elsewhere (a stage log, a Slurm .err file) a
    plain ASCII line every LOG_REFRESH_S seconds."""
    from tqdm import tqdm

    if sys.stderr.isatty():
        return tqdm(total=total, initial=initial, desc=desc, unit="it", file=sys.stderr, mininterval=1.0, **kwargs)
    return tqdm(total=total, initial=initial, desc=desc, unit="it", file=_Lines(sys.stderr), ascii=True,
                mininterval=LOG_REFRESH_S, ncols=100, **{k: v for k, v in kwargs.items() if k != "dynamic_ncols"})


class ProgressFile:
    def __init__(self, out_dir: str | Path, total: int, start: int = 0, every_s: float = 5.0):
        self.path, self.total, self.start, self.every_s = Path(out_dir) / PROGRESS_FILE, int(total), int(start), every_s
        self.t0 = self.last = None

    def update(self, iteration: int, force: bool = False) -> None:
        now = time.perf_counter()
        if self.t0 is None:
            self.t0 = self.last = now
            return  # the first step includes one-off costs (allocation, warm-up): time from its end
        if force or now - self.last >= self.every_s:
            self.last = now
            atomic_write_text(self.path, json.dumps({"iteration": int(iteration), "iterations": self.total,
                                                     "start_iteration": self.start + 1,
                                                     "seconds": round(now - self.t0, 3)}))


def read_progress(out_dir: str | Path) -> dict | None:
    """The last progress record, or None (not started, or unreadable)."""
    try:  # bounded_read: a FIFO in its place must not block the main job's estimator, which polls it
        d = read_json(Path(out_dir) / PROGRESS_FILE, limit=MiB)
    except UnreadableFile:
        return None
    return d if isinstance(d, dict) and {"iteration", "iterations", "seconds", "start_iteration"} <= set(d) else None
