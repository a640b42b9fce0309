"""Section `memory`: the peak RSS of one R-101-C4 training iteration at 600x800, measured in a fresh process
(`python -m benchmarks.memory`, which runs peak_rss_mib_of_a_train_iteration and prints the figure) so that no
earlier section's allocations count."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import torch

from detection.main_job.leg import calibrate_frozen_bn

from . import checkout
from .detector import detector_cfgs, detector_inputs, sgd, train_step

__all__ = ["peak_rss_mib_of_a_train_iteration", "bench_memory"]

# the directory that holds this package: what `python -m benchmarks.memory` needs on its path
_PACKAGE_PARENT = Path(__file__).resolve().parent.parent


def peak_rss_mib_of_a_train_iteration() -> int:
    """The peak resident set (VmHWM, MiB) of this process after one training iteration of our R-101-C4 on the
    detector section's 600x800 image: meaningful in a process that did nothing else."""
    from detectron2.modeling import build_model

    cfg, _ = detector_cfgs()
    model = calibrate_frozen_bn(build_model(cfg)).train()
    train_step(model, sgd(model), detector_inputs())
    with open("/proc/self/status") as status:
        hwm_kib = next(line for line in status if line.startswith("VmHWM")).split()[1]
    return int(hwm_kib) // 1024


def bench_memory(repeats: int) -> dict:
    root = checkout().root
    path = os.pathsep.join(p for p in (str(_PACKAGE_PARENT), os.environ.get("PYTHONPATH")) if p)
    env = dict(os.environ, PYTHONPATH=path, OMP_NUM_THREADS=str(torch.get_num_threads()))
    out = subprocess.run([sys.executable, "-m", "benchmarks.memory"], cwd=root, env=env, capture_output=True,
                         text=True, timeout=900)
    if out.returncode != 0:
        return {"error": out.stderr[-500:]}
    return {"peak_rss_mib_r101_c4_train_iter_600px": int(out.stdout.strip().splitlines()[-1])}


if __name__ == "__main__":
    print(peak_rss_mib_of_a_train_iteration())
