#!/usr/bin/env python3
"""The result blocks of RESULTS.md and the README's headline, generated from the results.json files they cite
(detection/main_job/results_doc.py).

    tools/results_doc.py            # rewrite every block of RESULTS.md and README.md from its file
    tools/results_doc.py --check    # exit 1, naming the files, if a block disagrees with its file

    tools/results_doc.py --add output/main_job_demo demo_2026-12-07_intel   # copy a finished job in (below)
    tools/results_doc.py --recompute results/*.json   # the files under the statistic as it is now, then the blocks

To cite a job: copy its results.json into results/ (--add JOB NAME copies it as results/NAME.json, and its report's
panel as results/NAME_panel.png, which a `demo` block shows) and put the two markers where the block goes:
    <!-- results: results/<job>.json -->
    <!-- end results -->
The README's `headline` block (the job's one comparison as a sentence, its control and its groups' table), a
`groups` block (the table alone) and a `demo` block (the job's panel, its measured minutes with the machine and day,
its table) take the same file: <!-- headline: results/<job>.json --> ... <!-- end headline -->.
"""

import argparse
import shutil
import sys
from pathlib import Path

import quiet_warnings  # noqa: F401  (before the packages: fvcore's torch.jit.script FutureWarning)

from backbones.checkpoint_io import atomic_write_text
from backbones.strict_json import strict_json
from classification.engine.cli import user_errors
from classification.engine.run_files import JOB_RESULTS, read_json
from detection.main_job.compare import COMPARISON_KINDS
from detection.main_job.recompute import recompute_results
from detection.main_job.results_doc import ResultsDocError, demo_panel, regenerate, stale_blocks

REPO = Path(__file__).resolve().parents[1]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("docs", nargs="*", type=Path, default=[REPO / "RESULTS.md", REPO / "README.md"])
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 if a block is stale")
    ap.add_argument("--add", nargs=2, metavar=("JOB_DIR", "NAME"),
                    help="copy a finished main job's results.json to results/NAME.json and its report's panel to "
                         "results/NAME_panel.png (refused if either exists), then regenerate the documents; to cite "
                         "it, point a block's marker at results/NAME.json")
    ap.add_argument("--recompute", nargs="+", type=Path, default=[], metavar="FILE",
                    help="rewrite these results files' comparisons, control and reading under the statistic as it is "
                         "now (from the per-unit values they hold), print each call that changes, then regenerate")
    ap.add_argument("--debug", action="store_true", help="show the full traceback of an error")
    args = ap.parse_args(argv)
    with user_errors(args.debug, extra=(ResultsDocError,)):
        if args.add:
            _add(Path(args.add[0]), args.add[1])
        for path in args.recompute:
            _recompute(path)
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


def _recompute(path: Path) -> None:
    """One results file rewritten under the statistic as it is now; each changed call printed."""
    res = read_json(path)
    if not isinstance(res, dict) or not any(k in res for k in COMPARISON_KINDS):
        print(f"{path}: lists no comparison, left as it is")
        return
    out, changes = recompute_results(res, str(path))
    atomic_write_text(path, strict_json(out))
    print(f"{path}: recomputed, {len(changes)} call(s) changed")
    for c in changes:
        print(f"  {c.kind}: {c.a} vs {c.b} ({c.metric}): {c.before or 'no call'} -> {c.after or 'no call'}")


def _add(job: Path, name: str) -> None:
    """The job's results.json and panel under results/, never over a file already cited."""
    cited = f"results/{name}.json"
    pairs = [(job / JOB_RESULTS, REPO / cited), (job / "report" / "qualitative.png", REPO / demo_panel(cited))]
    for src, dst in pairs:
        if not src.is_file():
            raise ResultsDocError(f"{src}: not found (is {job} a finished main job's output directory?)")
        if dst.exists():
            raise ResultsDocError(f"{dst}: exists already; choose another NAME")
    for src, dst in pairs:
        shutil.copyfile(src, dst)
        print(f"{dst.relative_to(REPO)}: copied from {src}")


if __name__ == "__main__":
    sys.exit(main())
