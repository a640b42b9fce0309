"""The README's main job: Faster R-CNN with VGG-16 and with ResNet-101 on the embedded default dataset,
evaluated on its val split, then the COCO mAP report. Smoke scale on CPU (see configs/Embedded-Detection).

Backbones start from the classification pipeline's checkpoints on the embedded data when they exist
(output/classification/embedded_<model>/model_final.pth, made by tools/train_cls.py), else from scratch with
trainable BatchNorm (VGG-16 then uses its BN variant: plain VGG-16 does not train from scratch in minutes).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

__all__ = ["main", "LEGS", "chance_ap"]

REPO = Path(__file__).resolve().parents[2]
SMOKE = REPO / "configs" / "Embedded-Detection" / "smoke.yaml"
# (run name, architecture config, backbone for the from-scratch case)
LEGS = (("vgg16", REPO / "configs" / "COCO-Detection" / "faster_rcnn_vgg16.yaml", "vgg16_bn"),
        ("resnet101", REPO / "configs" / "COCO-Detection" / "faster_rcnn_R_101_C4.yaml", "resnet101"))


def classification_checkpoint(model: str, root: Path) -> Path | None:
    path = root / f"embedded_{model}" / "model_final.pth"
    return path if path.is_file() else None


def chance_ap(dataset: str = "embedded_val", boxes_per_image: int = 100, seed: int = 0) -> dict[str, float]:
    """COCO AP of uniformly random boxes, scores and classes on `dataset`: the floor a detector must clear."""
    from detectron2.data import DatasetCatalog, MetadataCatalog
    from pycocotools.coco import COCO

    from ..evaluation import evaluate_coco

    records = DatasetCatalog.get(dataset)
    meta = MetadataCatalog.get(dataset)
    import contextlib
    import io

    with contextlib.redirect_stdout(io.StringIO()):
        coco = COCO(meta.json_file)
    rng = np.random.default_rng(seed)
    cat_ids = sorted(coco.getCatIds())
    results = []
    for rec in records:
        w, h = rec["width"], rec["height"]
        for _ in range(boxes_per_image):
            x0, y0 = rng.uniform(0, w - 8), rng.uniform(0, h - 8)
            bw, bh = rng.uniform(8, w - x0), rng.uniform(8, h - y0)
            results.append({"image_id": rec["image_id"], "category_id": int(rng.choice(cat_ids)),
                            "bbox": [x0, y0, bw, bh], "score": float(rng.uniform())})
    return evaluate_coco(coco, results).stats


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--output", default="output/default_benchmark", help="runs and report go here")
    ap.add_argument("--classification-dir", default="output/classification",
                    help="where tools/train_cls.py put embedded-data checkpoints")
    ap.add_argument("--resume", action="store_true", help="resume legs that have a checkpoint")
    ap.add_argument("opts", nargs=argparse.REMAINDER, default=[], help="KEY VALUE overrides for both legs")
    args = ap.parse_args(argv)
    t_start = time.time()
    out = Path(args.output)
    from detection.datasets import ensure_embedded_dataset

    manifest = ensure_embedded_dataset()
    print(f"[benchmark] embedded dataset: {manifest['source']} objects, classes {manifest['classes']}, "
          f"{manifest['counts']['train']['images']} train / {manifest['counts']['val']['images']} val images",
          flush=True)
    run_dirs, failures = [], []
    for name, config, scratch_backbone in LEGS:
        run_dir = out / name
        ckpt = classification_checkpoint(name, Path(args.classification_dir))
        opts = ["OUTPUT_DIR", str(run_dir)]
        if ckpt is not None:  # the paper's transfer setting: ImageNet-style pretraining, frozen BN
            opts += ["MODEL.WEIGHTS", str(ckpt), "MODEL.BACKBONES.NORM", "FrozenBN", "MODEL.BACKBONES.FREEZE_AT", "2"]
            how = f"from {ckpt}"
        else:
            opts += ["MODEL.BACKBONES.NAME", scratch_backbone]
            how = f"from scratch ({scratch_backbone}, trainable BN)"
        print(f"[benchmark] training {name} {how}", flush=True)
        cmd = [sys.executable, "-m", "detection.engine", "--config-file", str(config), "--config-file", str(SMOKE),
               *(["--resume"] if args.resume else []), *opts, *[o for o in args.opts if o != "--"]]
        t0 = time.time()
        proc = subprocess.run(cmd, cwd=os.getcwd())
        print(f"[benchmark] {name}: exit {proc.returncode} after {time.time() - t0:.0f}s", flush=True)
        run_dirs.append(run_dir)
        if proc.returncode != 0:
            failures.append(name)
    import detection  # noqa: F401  (registers the embedded dataset in this process)
    from detection.report import write_report

    chance = chance_ap()
    notes = [f"Embedded default dataset ({manifest['source']} objects, {len(manifest['classes'])} classes), "
             "both detectors from scratch at smoke scale (configs/Embedded-Detection/smoke.yaml).",
             f"Chance level on this val split (100 random boxes per image): AP50 {chance['AP50']:.2f}, "
             f"AP {chance['AP']:.2f}."]
    paths = write_report(run_dirs, out / "report", title="VGG-16 vs ResNet-101, embedded default (smoke scale)",
                         notes=notes)
    print(paths["markdown"].read_text())
    print(f"[benchmark] chance level (100 random boxes per image): AP50 {chance['AP50']:.2f}, AP {chance['AP']:.2f}")
    for run_dir in run_dirs:
        metrics = out / run_dir.name / "metrics.json"
        if metrics.is_file():
            bbox = next(iter(json.loads(metrics.read_text())["evaluation"].values()))["bbox"]
            print(f"[benchmark] {run_dir.name}: AP50 {bbox['AP50']:.2f} (chance {chance['AP50']:.2f}), "
                  f"AP {bbox['AP']:.2f}")
    print(f"[benchmark] report: {paths['html'].resolve()}")
    print(f"[benchmark] total {time.time() - t_start:.0f}s")
    return 1 if failures else 0
