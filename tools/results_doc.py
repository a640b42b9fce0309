#!/usr/bin/env python3
"""The result blocks of RESULTS.md and the README's headline, generated from the results.json files they cite
(detection/main_job/results_doc.py).

    tools/results_doc.py            # rewrite every block of RESULTS.md and README.md from its file
    tools/results_doc.py --check    # exit 1, naming the files, if a block disagrees with its file

To cite a job: copy its results.json into results/ and put the two markers where the block goes in RESULTS.md:
    <!-- results: results/<job>.json -->
    <!-- end results -->
The README's `headline` block (the job's one comparison as a sentence, its control and its groups' table) and a
`groups` block (the table alone) take the same file: <!-- headline: results/<job>.json --> ... <!-- end headline -->.
"""

import argparse
import sys
from pathlib import Path

import quiet_warnings  # noqa: F401  (before the packages: fvcore's torch.jit.script FutureWarning)

from backbones.checkpoint_io import atomic_write_text
from classification.engine.cli import user_errors
from detection.main_job.results_doc import ResultsDocError, regenerate, stale_blocks

REPO = Path(__file__).resolve().parents[1]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("docs", nargs="*", type=Path, default=[REPO / "RESULTS.md", REPO / "README.md"])
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 if a block is stale")
    ap.add_argument("--debug", action="store_true", help="show the full traceback of an error")
    args = ap.parse_args(argv)
    with user_errors(args.debug, extra=(ResultsDocError,)):
        if args.check:
            stale = [(doc, stale_blocks(doc)) for doc in args.docs]
            for doc, files in stale:
                if files:
                    print(f"{doc}: the blocks citing {', '.join(files)} disagree with those files; run "
                          "tools/results_doc.py", file=sys.stderr)
                else:
                    print(f"{doc}: every results block agrees with the file it cites")
            return 1 if any(files for _, files in stale) else 0
        for doc in args.docs:
            atomic_write_text(doc, regenerate(doc))
            print(f"{doc}: results blocks regenerated")
    return 0


if __name__ == "__main__":
    sys.exit(main())
