#!/usr/bin/env python3
"""Which kernel taps pretraining runs trained: per stage, the k x k convolutions' taps that moved only by weight
decay (measured: the run's initial weights rebuilt under its seed vs its final checkpoint) beside those the
geometry predicts see only padding at the run's image size (classification/analysis/kernel_taps.py).

    tools/kernel_taps.py output/main_job_headline/pretrain/resnet101_p0 [RUN ...] [--json taps.json]
    tools/kernel_taps.py RUN --zero-unmoved zeroed.pth   # its final weights with the unmoved taps at zero, to start
                                                         # a detection leg from (MODEL.WEIGHTS zeroed.pth)
"""

import argparse
import sys
from dataclasses import asdict
from pathlib import Path

import quiet_warnings  # noqa: F401  (before the packages: fvcore's torch.jit.script FutureWarning)

from backbones.checkpoint_io import atomic_write_text
from backbones.strict_json import strict_json
from classification.analysis.kernel_taps import initial_and_final, tap_training, zero_unmoved_taps
from classification.engine.cli import user_errors


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", type=Path, help="pretraining run directories (config.json, model_final.pth)")
    ap.add_argument("--json", type=Path, default=None, help="also write the numbers here (strict JSON)")
    ap.add_argument("--zero-unmoved", type=Path, default=None, metavar="OUT",
                    help="write the (one) run's final checkpoint here with its unmoved taps at zero, metadata kept")
    ap.add_argument("--debug", action="store_true", help="show the full traceback of an error")
    args = ap.parse_args(argv)
    if args.zero_unmoved and len(args.runs) != 1:
        ap.error("--zero-unmoved takes one run")
    out = {}
    with user_errors(args.debug):
        for run in args.runs:
            nets = initial_and_final(run)  # the run's data and initial net rebuilt once
            rows = tap_training(run, nets)
            out[str(run)] = [asdict(r) for r in rows]
            print(f"{run}:")
            print(f"  {'stage':<8} {'convs':>5} {'taps':>6} {'unmoved':>8} {'predicted':>9} {'unmoved weights':>16}")
            for r in rows:
                share = f"{r.unmoved_weights:,} ({r.unmoved_weights / r.weights:.0%})"
                shrink = f"  decay x{r.shrink:.4f}" if r.shrink is not None else ""
                print(f"  {r.stage:<8} {r.convs:>5} {r.taps:>6} {r.unmoved:>8} {r.predicted:>9} {share:>16}{shrink}")
        if args.zero_unmoved:
            n = zero_unmoved_taps(args.runs[0], args.zero_unmoved, nets[:2])
            print(f"{args.zero_unmoved}: {n:,} weights of unmoved taps set to zero")
    if args.json:
        atomic_write_text(args.json, strict_json(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
