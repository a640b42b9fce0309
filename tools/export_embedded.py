#!/usr/bin/env python3
"""Write the embedded default as a researcher's data would be: a COCO json + images and a VOC layout of the
detection scenes, and an ImageNet-style folder of the pretraining composites (detection/datasets/export.py).

    tools/export_embedded.py OUT [--train-items N] [--val-items N] [--no-classification]
    tools/main_job.py --detect-coco OUT/detection/annotations/instances_train.json OUT/detection \\
        OUT/detection/annotations/instances_val.json OUT/detection --weights resnet18=resnet18.pth --width 1
"""

import argparse
import sys

import quiet_warnings  # noqa: F401  (before the packages: fvcore's torch.jit.script FutureWarning)

from classification.engine.cli import user_errors
from detection.datasets.export import export_embedded


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", metavar="OUT", help="a new folder")
    ap.add_argument("--train-items", type=int, default=None, help="training composites (default: all)")
    ap.add_argument("--val-items", type=int, default=2000, help="val composites (default: 2000, the main job's)")
    ap.add_argument("--image-size", type=int, default=32, help="composite size in pixels (default: 32)")
    ap.add_argument("--no-classification", dest="classification", action="store_false",
                    help="the detection set only")
    ap.add_argument("--debug", action="store_true", help="show the full traceback of an error")
    args = ap.parse_args(argv)
    with user_errors(args.debug):
        paths = export_embedded(args.out, train_items=args.train_items, val_items=args.val_items,
                                image_size=args.image_size, classification=args.classification)
        print(f"detection: --detect-coco {' '.join(paths.coco_args())}")
        print(f"           --detect-voc {' '.join(paths.voc_args())}")
        if paths.imagefolder:
            print(f"pretraining: --pretrain-data {paths.imagefolder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
