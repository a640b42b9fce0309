#!/usr/bin/env python3
"""Turn finished detection runs into one report (Markdown, HTML, JSON, CSV and PNG plots).

    tools/report.py output/vgg16 output/r101 --output-dir output/report [--baseline vgg16] [--names VGG-16 R-101]

Each RUN_DIR is an OUTPUT_DIR of tools/train_det.py. Runs without metrics are listed with their status; runs that
differ only in SEED are aggregated (mean ± sd, n). Paper columns appear only for runs on the paper's splits.
"""

import argparse
import sys
from pathlib import Path

import quiet_warnings  # noqa: F401  (before the packages: fvcore's torch.jit.script FutureWarning)

from classification.engine.cli import user_errors
from detection.report import write_report


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", metavar="RUN_DIR")
    ap.add_argument("--output-dir", dest="output_dir", default="output/report",
                    help="report directory (default: output/report)")
    ap.add_argument("--baseline", default=None, help="run name for the deltas (default: the VGG-16 run)")
    ap.add_argument("--names", nargs="+", default=None, help="display names, one per RUN_DIR")
    ap.add_argument("--title", default="Detection transfer benchmark")
    ap.add_argument("--debug", action="store_true", help="show the full traceback of an error")
    args = ap.parse_args(argv)
    if args.names and len(args.names) != len(args.runs):
        ap.error(f"--names has {len(args.names)} names for {len(args.runs)} runs")
    missing = [r for r in args.runs if not Path(r).is_dir()]
    if missing:
        ap.error(f"no such run directory: {', '.join(missing)}")
    with user_errors(args.debug):
        paths = write_report(args.runs, args.output_dir, baseline=args.baseline, names=args.names, title=args.title)
    print(paths["markdown"].read_text())
    print(f"report: {paths['html']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
