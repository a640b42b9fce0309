"""Section `cocoeval`: COCO box evaluation by faster-coco-eval vs pycocotools on 5,000 synthetic images (the same
12 statistics required)."""

from __future__ import annotations

import contextlib
import io

import numpy as np

from .stats import compare

__all__ = ["bench_cocoeval"]


def bench_cocoeval(repeats: int) -> dict:
    from pycocotools.coco import COCO

    from detection.evaluation import evaluate_coco

    rng = np.random.default_rng(0)
    images, anns, dets = [], [], []
    for i in range(1, 5001):
        images.append({"id": i, "width": 640, "height": 480, "file_name": f"{i}.jpg"})
        for _ in range(rng.integers(1, 8)):
            x, y, w, h = rng.uniform(0, 500), rng.uniform(0, 380), rng.uniform(10, 140), rng.uniform(10, 100)
            c = int(rng.integers(1, 11))
            anns.append({"id": len(anns) + 1, "image_id": i, "category_id": c, "bbox": [x, y, w, h],
                         "area": w * h, "iscrowd": 0})
            for _ in range(3):
                dets.append({"image_id": i, "category_id": c if rng.uniform() < 0.7 else int(rng.integers(1, 11)),
                             "bbox": [x + rng.normal(0, 8), y + rng.normal(0, 8), w * rng.uniform(0.7, 1.3),
                                      h * rng.uniform(0.7, 1.3)], "score": float(rng.uniform())})
    with contextlib.redirect_stdout(io.StringIO()):
        coco = COCO()
        coco.dataset = {"images": images, "annotations": anns,
                        "categories": [{"id": c, "name": f"c{c}"} for c in range(1, 11)]}
        coco.createIndex()
    results = {}
    row = compare(lambda: results.__setitem__("fast", evaluate_coco(coco, dets, backend="faster_coco_eval")),
                  lambda: results.__setitem__("ref", evaluate_coco(coco, dets, backend="pycocotools")),
                  max(3, repeats // 2), warmup=0, names=("faster_coco_eval", "pycocotools"))
    row["identical_stats"] = all(abs(results["fast"].stats[k] - results["ref"].stats[k]) < 1e-9
                                 for k in results["ref"].stats)
    row["conditions"] = f"5,000 images, {len(anns)} boxes, {len(dets)} detections, 10 categories"
    return row
