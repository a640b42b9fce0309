"""Ctrl-C at a step boundary: a KeyboardInterrupt raised inside an optimizer step would leave the weights half
updated, so a checkpoint of them could not be trusted, and one not written loses the work since the last periodic
checkpoint (the main job stops its stages with SIGINT)."""

from __future__ import annotations

import signal
import threading

__all__ = ["StepBoundaryInterrupt"]


class StepBoundaryInterrupt:
    """While active, the first SIGINT only sets `requested` (the loop checkpoints and stops after the current step);
    a second one raises KeyboardInterrupt at once. Inactive -- SIGINT behaves as before -- when SIGINT is not
    Python's default handler (ignored, or someone else's), off the main thread, or when `enabled` is False (a
    multi-process run: its processes must stop at the same iteration, which a per-process flag cannot promise)."""

    def __init__(self, enabled: bool = True):
        self.enabled, self.requested, self._previous = enabled, False, None

    def __enter__(self) -> StepBoundaryInterrupt:
        if (self.enabled and threading.current_thread() is threading.main_thread()
                and signal.getsignal(signal.SIGINT) is signal.default_int_handler):
            self._previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def _handle(self, signum, frame) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True

    def __exit__(self, *exc) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
