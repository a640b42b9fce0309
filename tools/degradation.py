#!/usr/bin/env python3
"""The degradation experiment (paper Figs. 1 and 6): plain vs residual nets of two or more depths, same budget.

    tools/degradation.py                      # the four nets on the cached embedded composites, 1600 iterations
    tools/degradation.py --models cifar_plain20 cifar_plain56 --dataset cifar10 --data-root DIR --iterations 64000
                                              # the paper's Fig. 6 run on CIFAR-10 itself

The default is the main job's degradation recipe (classification.analysis.degradation.RECIPE: the paper's 2015
units and CIFAR schedule, a linear warm-up for every net (ours, not the paper's), a budget past the 56-layer nets'
early plateau; the main job's degradation preset runs it with three seeds and compares the depths with the report's
statistic) on the same cached composites and batch path as the pretraining: one seed here, about 45 minutes on 2
cores.

Writes OUT/degradation.png (training error dashed, val / held-out / test error solid), OUT/degradation.md (table)
and each run's directory; prints the table. --layer-responses adds Fig. 7 (std of 3x3 layer responses) for the
same models.
"""

import argparse
import sys
from dataclasses import replace
from pathlib import Path

import quiet_warnings  # noqa: F401  (before the packages: fvcore's torch.jit.script FutureWarning)

from backbones.checkpoint_io import atomic_write_text
from classification.analysis.degradation import RECIPE, plot_curves, run_degradation, summary_table
from classification.engine.cli import user_errors
from classification.engine.run_files import FINAL_CHECKPOINT
from classification.engine.trainer import ClsConfig, build_datasets


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=list(RECIPE.models))
    ap.add_argument("--dataset", default="embedded", choices=["embedded", "fashion-mnist", "cifar10"],
                    help="embedded (default): Fashion-MNIST items composited at 32 px, rendered once and augmented "
                         "in whole batches (the fast path); fashion-mnist / cifar10: per-image loading")
    ap.add_argument("--data-root", default=None)
    ap.add_argument("--iterations", type=int, default=RECIPE.iterations)
    ap.add_argument("--batch-size", type=int, default=RECIPE.batch)
    ap.add_argument("--lr", type=float, default=RECIPE.lr, help="the paper's CIFAR lr (batch 128)")
    ap.add_argument("--preact", action=argparse.BooleanOptionalAction, default=RECIPE.preact,
                    help="pre-activation units (He et al. 2016) for every net (default: --no-preact, the paper's 2015 "
                         "units, as the main job)")
    ap.add_argument("--warmup-fraction", type=float, default=RECIPE.warmup_fraction,
                    help=f"every net's linear warm-up from lr x{RECIPE.warmup_factor:g}, a fraction of the run "
                         f"(default: {RECIPE.warmup_fraction:g}, as the main job; 0: none)")
    ap.add_argument("--warmup-until-error", type=float, default=None,
                    help="instead: lr x0.1 until the running training error is below this (the paper's ResNet-110 "
                         "warm-up uses 0.8; with --warmup-fraction 0)")
    ap.add_argument("--eval-period", type=int, default=50)
    ap.add_argument("--train-samples", type=int, default=None,
                    help="train on the first N training items (default: all; the paper's curves use all)")
    ap.add_argument("--val-samples", type=int, default=2000)
    ap.add_argument("--holdout", type=int, default=None,
                    help="embedded: score on the last N training items instead of the val split (choosing a budget)")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--layer-responses", action="store_true", help="also plot Fig. 7 for the trained models")
    ap.add_argument("--output-dir", dest="out", default="output/degradation", help="runs, curves and table")
    ap.add_argument("--debug", action="store_true", help="show the full traceback of an error")
    args = ap.parse_args(argv)
    with user_errors(args.debug):
        return _run(args)


def _run(args) -> int:
    out = Path(args.out)
    schedule = RECIPE.schedule(args.iterations, args.warmup_fraction) | {"lr": args.lr}
    base = ClsConfig(dataset=args.dataset, data_root=args.data_root, image_size=RECIPE.image_size,
                     iterations=args.iterations,
                     batch_size=args.batch_size, eval_period=args.eval_period,
                     checkpoint_period=args.iterations, train_samples=args.train_samples,
                     val_samples=None if args.holdout else args.val_samples, holdout=args.holdout,
                     workers=args.workers, seed=args.seed, warmup_until_error=args.warmup_until_error,
                     model_options={"preact": True} if args.preact else {}, **schedule)
    histories = run_degradation(args.models, base, out)
    split = "held-out" if args.holdout else "val" if args.dataset == "embedded" else "test"
    plot_curves(histories, out / "degradation.png", eval_split=split,
                title=f"{args.dataset}, {args.iterations} iterations, batch {args.batch_size}, lr {args.lr}"
                      f"{', pre-activation units' if args.preact else ''}")
    table = summary_table(histories, eval_split=split)
    atomic_write_text(out / "degradation.md", table + "\n")
    print(table)
    print(f"plot: {out / 'degradation.png'}")
    if args.layer_responses:
        from backbones.convert import load_model
        from classification.analysis.layer_response import layer_response_std, plot_layer_responses

        _, val, _ = build_datasets(replace(base, train_samples=1))  # only val is read: skip the training split
        results = {}
        for name in args.models:  # each net as its run built it (the checkpoint names its units)
            results[name] = layer_response_std(load_model(out / name / FINAL_CHECKPOINT)[2], val, max_images=1000)
        plot_layer_responses(results, out / "layer_responses.png")
        for name, res in results.items():
            stds = [s for _, s in res]
            print(f"{name}: mean std of 3x3 responses {sum(stds) / len(stds):.3f} over {len(stds)} layers")
        print(f"plot: {out / 'layer_responses.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
