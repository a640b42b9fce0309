#!/usr/bin/env python3
"""Convert a checkpoint (torchvision, timm, Detectron2 .pth/.pkl, MSRA Caffe2 .pkl, ours) into our format.

    python tools/convert_weights.py R-101.pkl R-101-ours.pth
    python tools/convert_weights.py resnet50-v1.5.pth r50.pth --model resnet50 --model-option stride_in_1x1=False
    python tools/convert_weights.py vgg16.pth vgg16-features.pth --drop-classifier

The architecture is inferred from the weights unless --model is given; loading is strict. Nothing in the source
file is executed (weights-only / restricted unpickling).
"""

import argparse
import sys

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
    args = ap.parse_args(argv)
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
