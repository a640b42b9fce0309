#!/usr/bin/env python3
"""One main-job detection leg, trained on request: the worker behind `tools/benchmark.py --only
main_job_detect_vs_commit`, run with its working directory and PYTHONPATH at a source tree (this checkout, or an
earlier commit extracted by the benchmark), so that every package it imports is that tree's.

It builds its leg itself instead of through detection/main_job/leg.py (build_detection_leg, the one leg harness
everywhere else): it runs inside earlier commits' trees, which lack that module, so it uses only what every commit
of the project since the main job has (get_detection_cfg, the Trainer's optimizer and train loader, build_model) and
imports nothing from the benchmarks (tools/benchmarks/vs_commit.py drives it). The pretrained-like FrozenBN scales
are the ones every timing uses (backbones.norm.calibrate_frozen_bn of this checkout, loaded by its path: that file
imports only torch), applied to the tree's own FrozenBatchNorm2d. Protocol: one JSON line when ready
(the tree's `detection` package and embedded dataset paths, optimizer, loader workers, threads), then for each
line read from stdin one block of `--iterations` training iterations and the line "done". Everything else it
prints goes to stderr.

    python tools/detection_leg_worker.py --leg resnet101 --pretrained --iterations 5 --threads 1 \
        --config-file configs/COCO-Detection/faster_rcnn_R_101_C4.yaml --config-file \
        configs/Embedded-Detection/smoke.yaml --config-file configs/Embedded-Detection/pretrained.yaml
"""

import argparse
import importlib.util
import json
import os
import sys
import warnings
from pathlib import Path

CALIBRATION = Path(__file__).resolve().parents[1] / "backbones" / "norm.py"  # this checkout's, not the tree's


def calibrate_frozen_bn():
    """backbones.norm.calibrate_frozen_bn of this checkout, without importing its packages (the tree's are)."""
    spec = importlib.util.spec_from_file_location("_checkout_backbones_norm", CALIBRATION)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # importlib's recipe: a dataclass in it looks its module up there
    spec.loader.exec_module(module)
    return module.calibrate_frozen_bn


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--leg", required=True, help="backbone name: vgg16_bn, resnet101, ...")
    ap.add_argument("--config-file", action="append", required=True,
                    help="relative to the tree, in order (the caller passes main_job.leg_config_files)")
    ap.add_argument("--pretrained", action="store_true", help="a transfer leg: FrozenBN given pretrained-like scales")
    ap.add_argument("--iterations", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # Detectron2's and the tree's prints go to stderr, never into the protocol
    warnings.filterwarnings("ignore", category=FutureWarning)  # fvcore's torch.jit.script at import

    import torch

    torch.set_num_threads(args.threads)
    import detection  # noqa: I001  (first: lets Detectron2 import without its compiled ops)
    from detectron2.modeling import build_model
    from detectron2.utils.events import EventStorage
    from backbones import FrozenBatchNorm2d
    from detection import get_detection_cfg
    from detection.engine.trainer import Trainer

    cfg = get_detection_cfg(args.config_file, ["MODEL.DEVICE", "cpu", "MODEL.BACKBONES.NAME", args.leg])
    torch.manual_seed(0)
    model = build_model(cfg)
    if args.pretrained:  # FrozenBN with pretrained-like scales: a random deep net would overflow (as every timing)
        calibrate_frozen_bn()(model, frozen_bn=FrozenBatchNorm2d)
    model.train()
    optimizer = Trainer.build_optimizer(cfg, model)
    batches = iter(Trainer.build_train_loader(cfg))
    datasets = os.path.abspath(os.path.join(os.path.expanduser(os.getenv("DETECTRON2_DATASETS", "datasets")),
                                            "embedded"))  # where every commit's embedded dataset lives
    print(json.dumps({"detection": os.path.dirname(detection.__file__), "dataset_root": datasets,
                      "optimizer": type(optimizer).__name__,
                      "loader_workers": cfg.DATALOADER.NUM_WORKERS, "threads": torch.get_num_threads()}),
          file=protocol)
    for _ in sys.stdin:
        with EventStorage(0):  # what SimpleTrainer.run_step does: data, forward, backward, optimizer step
            for _ in range(args.iterations):
                loss = sum(model(next(batches)).values())
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
        print("done", file=protocol)
    return 0


if __name__ == "__main__":
    sys.exit(main())
