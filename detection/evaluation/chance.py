"""The floor a detector must clear: COCO AP of random boxes on a registered dataset."""

from __future__ import annotations

__all__ = ["chance_ap"]


def chance_ap(dataset: str, boxes_per_image: int = 100, seed: int = 0) -> dict[str, float]:
    """COCO AP of uniformly random boxes, scores and classes on `dataset`: the floor a detector must clear, scored
    against the ground truth the detectors' evaluation uses (evaluation.coco.ground_truth_api: the json as the
    training loader validated it, the same clipped and dropped boxes)."""
    import numpy as np
    from detectron2.data import DatasetCatalog

    from .coco import evaluate_coco, ground_truth_api

    records = DatasetCatalog.get(dataset)
    coco, _ = ground_truth_api(dataset)
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
