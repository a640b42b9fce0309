#!/usr/bin/env python3
"""The README's main job: pretrain VGG-16(BN) and ResNet-101 at reduced width, transfer each into Faster R-CNN in
the paper's setting (BN pretrained, FrozenBN in detection; detection/main_job/arms.py has the others), and report --
the paper's Tables 7/8 question in miniature (detection/main_job/).

    tools/main_job.py                       # --preset demo (make demo): the FrozenBN arm, one seed (time: README)
    tools/main_job.py --preset headline     # make demo-headline: VGG-16(BN) vs ResNet-101, 5 units each + control
    tools/main_job.py --preset family       # make demo-family: six backbones of three families, 3 units each
    tools/main_job.py --preset degradation  # make demo-degradation: the degradation experiment, 3 seeds
    tools/main_job.py --preset quick        # make demo-quick: every arm at smoke scale, not converged
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
