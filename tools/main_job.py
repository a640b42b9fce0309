#!/usr/bin/env python3
"""The README's main job: pretrain VGG-16(BN) and ResNet-101 at reduced width, transfer each into Faster R-CNN beside
from-scratch controls, and report -- the paper's Tables 7/8 question in miniature (detection/main_job/).

    tools/main_job.py                    # --preset demo (make demo): one seed per leg, ~20 min on 2 cores
    tools/main_job.py --preset full      # make demo-full: 2 x 2 seeds, converged, + the degradation experiment
    tools/main_job.py --preset quick     # make demo-quick: the smoke path, not converged
    tools/main_job.py --dry-run          # the stages and the estimated minutes (measured step times); runs nothing
    tools/main_job.py --selection        # the same job on held-out training data (how the schedules were chosen)
    tools/main_job.py --fresh            # start over (deletes only what the job made)

A second run reuses finished stages and resumes interrupted ones.
"""

import sys

import quiet_warnings  # noqa: F401  (before the packages: fvcore's torch.jit.script FutureWarning)

from detection.main_job.cli import main

if __name__ == "__main__":
    sys.exit(main())
