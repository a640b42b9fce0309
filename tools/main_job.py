#!/usr/bin/env python3
"""The README's main job (`make demo`): pretrain VGG-16(BN) and ResNet-101 at reduced width (2 seeds each), transfer
each into Faster R-CNN (2 detection seeds per pretraining seed) beside from-scratch controls, and report -- the
paper's Tables 7/8 question in miniature, at converged schedules (CONVERGENCE.md).

    tools/main_job.py --dry-run          # the stages and the estimated minutes (measured step times); runs nothing
    tools/main_job.py                    # a second run reuses finished stages, resumes interrupted ones
    tools/main_job.py --quick            # the smoke path (make demo-quick): one seed each, short schedules
    tools/main_job.py --selection        # the same job on held-out training data (how the schedules were chosen)
    tools/main_job.py --fresh            # start over (deletes only what the job made)
"""

import sys

import quiet_warnings  # noqa: F401  (before the packages: fvcore's torch.jit.script FutureWarning)

from detection.main_job.cli import main

if __name__ == "__main__":
    sys.exit(main())
