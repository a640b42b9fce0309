"""A side of a dataset / evaluation comparison, and its peak memory measured in a fresh process.

`python -m benchmarks.rss SECTION SIDE SCALE` prepares SIDE of SECTION (its module's SIDES), runs it once and prints
{"baseline_mib", "peak_mib"}: the resident set before the run and its peak during it (the peak counter is reset
after the preparation, /proc/self/clear_refs), so that only what the side itself holds counts, never an earlier
section's allocations.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Side", "peak_rss_mib", "measure_in_fresh_process", "peak_memory"]

_PACKAGE_PARENT = Path(__file__).resolve().parent.parent  # what `python -m benchmarks.rss` needs on its path


@dataclass
class Side:
    """One side of a comparison: `run` is what is timed; `setup`, if given, makes its input anew before every call
    (untimed), for a side that consumes its input."""
    run: Callable
    setup: Callable[[], object] | None = None

    def once(self):
        return self.run(self.setup()) if self.setup else self.run()


def _status_mib(field: str) -> int:
    with open("/proc/self/status") as status:
        return int(next(line for line in status if line.startswith(field)).split()[1]) // 1024


def peak_rss_mib(side: Side) -> dict:
    args = (side.setup(),) if side.setup else ()
    with open("/proc/self/clear_refs", "w") as f:  # "5": reset the peak resident set to the current one
        f.write("5")
    baseline = _status_mib("VmRSS")
    side.run(*args)
    return {"baseline_mib": baseline, "peak_mib": _status_mib("VmHWM")}


def measure_in_fresh_process(section: str, side: str, scale: float, threads: int) -> dict:
    """peak_rss_mib of `side` of `section` in a new interpreter ({"error": ...} if it failed)."""
    from . import checkout

    path = os.pathsep.join(p for p in (str(_PACKAGE_PARENT), os.environ.get("PYTHONPATH")) if p)
    env = dict(os.environ, PYTHONPATH=path, OMP_NUM_THREADS=str(threads))
    out = subprocess.run([sys.executable, "-m", "benchmarks.rss", section, side, repr(scale)], cwd=checkout().root,
                         env=env, capture_output=True, text=True, timeout=1800)
    if out.returncode != 0:
        return {"error": out.stderr.strip().splitlines()[-1] if out.stderr.strip() else f"exit {out.returncode}"}
    return json.loads(out.stdout.strip().splitlines()[-1])


def peak_memory(section: str, scale: float, threads: int) -> dict:
    """Both sides' peaks in fresh processes, and ours / the reference's (of the peaks above each baseline: the
    imports differ between the sides, what the run holds is compared)."""
    res = {side: measure_in_fresh_process(section, side, scale, threads) for side in ("ours", "reference")}
    if all("peak_mib" in v for v in res.values()):
        used = {k: max(1, v["peak_mib"] - v["baseline_mib"]) for k, v in res.items()}
        res["ours_over_reference"] = round(used["ours"] / used["reference"], 3)
        res["absolute_ours_over_reference"] = round(res["ours"]["peak_mib"] / res["reference"]["peak_mib"], 3)
    return res


if __name__ == "__main__":
    import quiet_warnings  # noqa: F401  (tools/: fvcore's FutureWarning, as in every tool)

    section_name, side_name, scale_arg = sys.argv[1:4]
    module = importlib.import_module(f"benchmarks.{section_name}")
    print(json.dumps(peak_rss_mib(module.SIDES[side_name](float(scale_arg)))))
