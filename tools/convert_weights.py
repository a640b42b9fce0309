#!/usr/bin/env python3
"""Convert a checkpoint (torchvision, timm, Detectron2 .pth/.pkl, MSRA Caffe2 .pkl, ours) into our format.

    python tools/convert_weights.py R-101.pkl R-101-ours.pth
    python tools/convert_weights.py resnet50-v1.5.pth r50.pth --model resnet50 --model-option stride_in_1x1=False
    python tools/convert_weights.py vgg16.pth vgg16-features.pth --drop-classifier

The architecture is inferred from the weights unless --model is given; loading is strict. Nothing in the source
file is executed (weights-only / restricted unpickling).
"""

import argparse
import os
import sys
from pathlib import Path

import quiet_warnings  # noqa: F401  (before the packages: fvcore's torch.jit.script FutureWarning)

from backbones import CheckpointReadError, IncompatibleWeightsError
from backbones.convert import convert_checkpoint
from backbones.weight_formats import FormatError
from classification.engine.config import model_option_argument


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("--model", help="model name (backbones.list_models()); inferred when omitted")
    ap.add_argument("--model-option", dest="option", action="append", type=model_option_argument, default=[],
                    metavar="KEY=VALUE", help="model option, e.g. stride_in_1x1=False (repeatable)")
    ap.add_argument("--drop-classifier", action="store_true", help="do not convert the classifier (fc)")
    ap.add_argument("--overwrite", action="store_true", help="replace DST if it exists (default: refuse)")
    args = ap.parse_args(argv)
    dst = Path(args.dst)
    if dst.is_dir() or args.dst.endswith(os.sep):
        print(f"convert_weights: {args.dst} is a directory; give the file to write, e.g. {dst / 'model.pth'}",
              file=sys.stderr)
        return 1
    if dst.exists() and not args.overwrite:
        print(f"convert_weights: {args.dst} exists; refusing to overwrite it (--overwrite replaces it)",
              file=sys.stderr)
        return 1
    if os.path.exists(args.src) and os.path.exists(args.dst) and os.path.samefile(args.src, args.dst):
        print(f"convert_weights: {args.dst} is the source file itself; write the conversion elsewhere",
              file=sys.stderr)
        return 1
    if not dst.parent.is_dir():
        print(f"convert_weights: {dst.parent} does not exist (the directory DST is written into)", file=sys.stderr)
        return 1
    try:
        report, name, options = convert_checkpoint(args.src, args.dst, model_name=args.model,
                                                   options=dict(args.option), drop_classifier=args.drop_classifier)
    except (CheckpointReadError, IncompatibleWeightsError, FormatError, ValueError, TypeError) as err:
        print(f"convert_weights: {err}", file=sys.stderr)
        return 1
    print(report.summary())
    print(f"wrote {args.dst}: {name} {options or ''} ({len(report.loaded)} tensors, format 'backbones' with metadata)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
