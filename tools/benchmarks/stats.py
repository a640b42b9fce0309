"""How every figure is measured: the sides alternate round by round, and a comparison is the median of the
per-round ratios reference / ours with a bootstrap 95% interval ("faster" only when the whole interval is above
1.0, "slower" when below, "parity" otherwise). One-sided figures use detection.main_job.leg.seconds_per_step."""

from __future__ import annotations

import os
import re
import statistics
import time
from collections.abc import Callable

import numpy as np
import torch

__all__ = ["alternate", "ratio_stats", "compare", "machine"]


def alternate(fns: dict[str, Callable], repeats: int, warmup: int = 2,
              setup: dict[str, Callable[[], object]] | None = None) -> dict[str, list[float]]:
    """Seconds per call of each fn: `warmup` untimed rounds, then `repeats` rounds, the sides alternating.
    `setup[k]`, where given, runs untimed before every call of fns[k] and its result is the call's argument (fresh
    inputs for a side that consumes them)."""
    setup = setup or {}

    def call(k: str) -> float:
        args = (setup[k](),) if k in setup else ()
        t0 = time.perf_counter()
        fns[k](*args)
        return time.perf_counter() - t0

    for _ in range(warmup):
        for k in fns:
            call(k)
    times: dict[str, list[float]] = {k: [] for k in fns}
    for r in range(repeats):
        order = list(fns) if r % 2 == 0 else list(reversed(fns))  # neither side always runs first
        for k in order:
            times[k].append(call(k))
    return times


def ratio_stats(reference: list[float], ours: list[float], *, resamples: int = 4000, seed: int = 0) -> dict:
    """Median of per-round ratios reference / ours, a bootstrap 95% interval of that median, and the verdict."""
    ratios = np.asarray(reference) / np.asarray(ours)
    rng = np.random.default_rng(seed)
    boot = np.median(rng.choice(ratios, size=(resamples, len(ratios)), replace=True), axis=1)
    lo, hi = np.percentile(boot, [2.5, 97.5])
    verdict = "faster" if lo > 1.0 else "slower" if hi < 1.0 else "parity (interval includes 1.0)"
    return {"ratio": float(np.median(ratios)), "ci95": [float(lo), float(hi)], "verdict": verdict,
            "rounds": len(ratios)}


def compare(ours: Callable, reference: Callable, repeats: int, warmup: int = 2, names=("ours", "reference"),
            setup: dict[str, Callable[[], object]] | None = None) -> dict:
    """Both sides alternated: the median seconds of each (`s_<name>`) and ratio_stats(reference, ours)."""
    t = alternate({names[0]: ours, names[1]: reference}, repeats, warmup, setup)
    return {f"s_{names[0]}": statistics.median(t[names[0]]), f"s_{names[1]}": statistics.median(t[names[1]]),
            **ratio_stats(t[names[1]], t[names[0]])}


def machine() -> dict:
    cfg = torch.__config__.show()
    onednn = re.search(r"(?:oneDNN|MKL-DNN|mkldnn)[^\n]*?v?(\d+\.\d+(?:\.\d+)?)", cfg)
    return {"cpus": os.cpu_count(), "threads": torch.get_num_threads(), "torch": torch.__version__,
            "onednn": onednn.group(1) if onednn else "unknown", "layout": "NCHW unless a row says channels_last",
            "date": time.strftime("%Y-%m-%d")}
