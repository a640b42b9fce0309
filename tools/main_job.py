#!/usr/bin/env python3
"""The README's main job (`make demo`): pretrain VGG-16(BN) and ResNet-101 at reduced width, transfer each into
Faster R-CNN beside from-scratch controls, and report -- the paper's Tables 7/8 question in miniature.

    tools/main_job.py                    # ~13 minutes on 2 CPU cores; a second run reuses finished stages
    tools/main_job.py --fresh            # start over
    tools/main_job.py --with-plain       # add plain-101: the residual-vs-plain question
"""

import sys

from detection.engine.main_job import main

if __name__ == "__main__":
    sys.exit(main())
