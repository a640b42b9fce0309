#!/usr/bin/env python3
"""Two runs of the main job side by side: how far every stage's number moved and whether the verdict survived.

    tools/compare_jobs.py output/main_job /other/machine/output/main_job [--json comparison.json]

For runs of the same job at another thread count (`tools/main_job.py --jobs 1 --threads 2`), on another machine
or with another torch build. Stages are matched by name; stages that ran other settings are named (not compared as
noise); verdicts are recomputed in each job with the one statistic (a call only when the interval over the
pretraining runs, Holm-adjusted over the job's family, excludes 0).
"""

import argparse
import sys
from pathlib import Path

import quiet_warnings  # noqa: F401  (before the packages: fvcore's torch.jit.script FutureWarning)

from backbones.checkpoint_io import atomic_write_text
from classification.engine.cli import user_errors
from detection.main_job.compare import compare_jobs, comparison_lines
from detection.report.writer import strict_json


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("a", metavar="JOB_A", help="a main job's --output-dir")
    ap.add_argument("b", metavar="JOB_B", help="another run of the same job")
    ap.add_argument("--json", type=Path, default=None, help="also write the comparison here (strict JSON)")
    ap.add_argument("--debug", action="store_true", help="show the full traceback of an error")
    args = ap.parse_args(argv)
    with user_errors(args.debug):
        cmp = compare_jobs(args.a, args.b)
        if args.json:
            atomic_write_text(args.json, strict_json(cmp))
    print("\n".join(comparison_lines(cmp)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
