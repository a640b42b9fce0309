"""OUTPUT_DIR/progress.json: how far a running training is (iteration, of how many, seconds since its first step),
written atomically by both trainers every few seconds, so a supervisor (the main job) estimates the remaining
time from the run's own iterations rather than from constants."""

from __future__ import annotations

import json
import time
from pathlib import Path

from backbones.bounded_read import MiB, UnreadableFile, read_json
from backbones.checkpoint_io import atomic_write_text

from .run_files import PROGRESS

__all__ = ["ProgressFile", "read_progress", "PROGRESS_FILE"]

PROGRESS_FILE = PROGRESS


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
