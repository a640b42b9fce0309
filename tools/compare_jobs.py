#!/usr/bin/env python3
"""Two runs of the main job side by side: how far every stage's number moved and whether the verdict survived; or
the parts of one preset's job pooled into one family.

    tools/compare_jobs.py output/main_job /other/machine/output/main_job [--json comparison.json]
    tools/compare_jobs.py --pool part1/results.json part2/ --output pooled.json [--preset full]

For runs of the same job at another thread count (`tools/main_job.py --jobs 1 --threads 2`), on another machine
or with another torch build. Stages are matched by name; stages that ran other settings are named (not compared as
noise); verdicts are recomputed in each job with the one statistic (a call only when the interval over the
pretraining runs, Holm-adjusted over the job's family, excludes 0).

--pool: a preset run in parts (a backbone per machine, or per day) is one family: every comparison the parts list
is recomputed from its per-unit values under the current rules (detection/main_job/pool.py) and Holm-adjusted
together; the output is a results.json naming the family and its parts (RESULTS.md's blocks cite several files
the same way).
"""

import argparse
import sys
from pathlib import Path

import quiet_warnings  # noqa: F401  (before the packages: fvcore's torch.jit.script FutureWarning)

from backbones.checkpoint_io import atomic_write_text
from backbones.strict_json import strict_json
from classification.engine.cli import user_errors
from detection.main_job.compare import compare_jobs, comparison_lines
from detection.main_job.pool import PoolError, pool_parts


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("a", metavar="JOB_A", nargs="?", help="a main job's --output-dir")
    ap.add_argument("b", metavar="JOB_B", nargs="?", help="another run of the same job")
    ap.add_argument("--json", type=Path, default=None, help="also write the comparison here (strict JSON)")
    ap.add_argument("--pool", nargs="+", type=Path, metavar="PART", default=None,
                    help="pool these parts of one preset's job (results.json files or job directories) into one "
                         "family instead of comparing two jobs")
    ap.add_argument("--output", type=Path, default=None, help="--pool: where the pooled results.json goes")
    ap.add_argument("--preset", default="", help="--pool: the preset's name, for the family's name")
    ap.add_argument("--debug", action="store_true", help="show the full traceback of an error")
    args = ap.parse_args(argv)
    if args.pool is not None:
        if args.a or args.b or args.output is None:
            ap.error("--pool takes the parts and --output, not JOB_A / JOB_B")
        with user_errors(args.debug, extra=(PoolError,)):
            pooled = pool_parts(args.pool, args.preset)
            atomic_write_text(args.output, strict_json(pooled, default=str))
        print(f"{args.output}: {pooled['family']}, decided on {pooled['decided_on']}"
              + (f"; its no-calls read: {pooled['reading']}" if pooled["reading"] else ""))
        return 0
    if not (args.a and args.b):
        ap.error("give two jobs (JOB_A JOB_B), or --pool PART ... --output FILE")
    with user_errors(args.debug):
        cmp = compare_jobs(args.a, args.b)
        if args.json:
            atomic_write_text(args.json, strict_json(cmp, default=str))
    print("\n".join(comparison_lines(cmp)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
