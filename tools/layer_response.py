#!/usr/bin/env python3
"""Paper Fig. 7: std of each 3x3 layer's response (after BN, before ReLU / addition) for trained checkpoints.

Pre-activation nets: the 3x3 convs that a BN of their unit follows (classification/analysis/layer_response.py).

    tools/layer_response.py output/degradation/cifar_plain20/model_final.pth \\
        output/degradation/cifar_resnet20/model_final.pth --dataset fashion-mnist --output responses.png
"""

import argparse
import sys

import quiet_warnings  # noqa: F401  (before the packages: fvcore's torch.jit.script FutureWarning)

from backbones.convert import load_model
from classification.analysis.layer_response import layer_response_std, plot_layer_responses
from classification.engine.cli import user_errors
from classification.engine.trainer import ClsConfig, build_datasets


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("checkpoints", nargs="+")
    ap.add_argument("--dataset", default="fashion-mnist", choices=["fashion-mnist", "cifar10", "embedded"])
    ap.add_argument("--data-root", default=None)
    ap.add_argument("--max-images", type=int, default=2000)
    ap.add_argument("--output", dest="out", default="layer_responses.png", help="the plot (PNG)")
    ap.add_argument("--debug", action="store_true", help="show the full traceback of an error")
    args = ap.parse_args(argv)
    if args.max_images <= 0:
        ap.error(f"--max-images must be positive, got {args.max_images}")
    with user_errors(args.debug):
        return _run(args)


def _run(args) -> int:
    # every checkpoint read (safely), its net inferred and loaded first: a bad file is named before the data is built
    nets = [(path, *load_model(path)) for path in args.checkpoints]
    # only the first --max-images val images are used: the embedded set renders just those (train_samples=1: its
    # training split, 60,000 composites, is not needed here)
    _, val, _ = build_datasets(ClsConfig(dataset=args.dataset, data_root=args.data_root, train_samples=1,
                                         val_samples=args.max_images))
    results = {}
    for path, name, _, model in nets:  # the responses are the 3x3 layers': the classifier's class count is not used
        res = layer_response_std(model, val, max_images=args.max_images)
        results[f"{name} ({path})"] = res
        stds = [s for _, s in res]
        print(f"{name}: {len(stds)} layers, mean std {sum(stds) / len(stds):.3f}, max {max(stds):.3f}")
    plot_layer_responses(results, args.out)
    print(f"plot: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
