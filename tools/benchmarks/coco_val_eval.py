"""Section `coco_val_eval`: val2017-sized COCO box evaluation (5,000 images, 500k detections), ours
(detection.evaluation.COCOEvaluator.evaluate, as train_det runs it: the results json and Detectron2's predictions
file written, the validated ground truth, faster-coco-eval) against faster-coco-eval alone (its COCO, loadRes,
evaluate / accumulate / summarize) on the same detections. Also ours without an output directory (evaluation
alone). The 12 statistics must be identical."""

from __future__ import annotations

import contextlib
import io
import json
import logging

import numpy as np

from . import generated
from .rss import Side, peak_memory
from .stats import compare

__all__ = ["SIDES", "bench_coco_val_eval"]

NAME = "bench_coco_val"


def _processed(data: generated.CocoSet, evaluator) -> list[dict]:
    """The detections through the evaluator's process() (Detectron2's instances_to_coco_json: contiguous classes,
    XYXY float32 boxes back to XYWH): the per-image predictions an evaluation starts from."""
    import torch
    from detectron2.structures import Boxes, Instances

    from detection.datasets.coco import contiguous_category_ids

    contiguous = contiguous_category_ids(generated.COCO_CATEGORY_IDS)
    per_image: dict[int, list] = {im["id"]: [] for im in json.loads(data.json_file.read_text())["images"]}
    for r in json.loads(data.detections.read_text()):
        per_image[r["image_id"]].append((contiguous[r["category_id"]], r["score"], *r["bbox"]))
    evaluator.reset()
    for image_id, rows in per_image.items():
        a = np.array(rows, dtype=np.float32).reshape(-1, 6)
        inst = Instances((480, 640))
        inst.pred_boxes = Boxes(torch.from_numpy(np.concatenate([a[:, 2:4], a[:, 2:4] + a[:, 4:6]], 1)))
        inst.scores = torch.from_numpy(a[:, 1].copy())
        inst.pred_classes = torch.from_numpy(a[:, 0].astype(np.int64))
        evaluator.process([{"image_id": image_id}], [{"instances": inst}])
    return evaluator._predictions


def _copy(predictions: list[dict]) -> list[dict]:
    return [{"image_id": p["image_id"], "instances": [dict(r) for r in p["instances"]]} for p in predictions]


def _evaluator(scale: float, with_files: bool):
    from detection.datasets.coco import register_coco
    from detection.evaluation import COCOEvaluator

    data = generated.coco_val(scale)
    register_coco(NAME, str(data.json_file), str(data.image_root))
    out = str(data.json_file.parent / "evaluator_output") if with_files else None  # rewritten every round
    return data, COCOEvaluator(NAME, out, distributed=False)


def _ours(scale: float, with_files: bool = True) -> Side:
    data, evaluator = _evaluator(scale, with_files)
    template = _copy(_processed(data, evaluator))

    def setup():  # evaluate() maps the category ids in place: every round starts from the processed outputs
        evaluator._predictions = _copy(template)

    return Side(lambda _: evaluator.evaluate(), setup)


def _reference(scale: float) -> Side:
    from faster_coco_eval import COCO, COCOeval_faster

    data, evaluator = _evaluator(scale, with_files=False)
    results = [r for p in _processed(data, evaluator) for r in p["instances"]]
    for r in results:  # dataset category ids, as a results file has them (COCO_CATEGORY_IDS is in id order)
        r["category_id"] = generated.COCO_CATEGORY_IDS[r["category_id"]]
    del evaluator
    with contextlib.redirect_stdout(io.StringIO()):
        gt = COCO(str(data.json_file))

    def run(dets: list[dict]):
        with contextlib.redirect_stdout(io.StringIO()):
            ev = COCOeval_faster(gt, gt.loadRes(dets), "bbox")
            ev.evaluate()
            ev.accumulate()
            ev.summarize()
        return ev.stats

    return Side(run, lambda: [dict(r) for r in results])


SIDES = {"ours": _ours, "reference": _reference}


def bench_coco_val_eval(repeats: int, scale: float = 1.0, *, memory: bool = True) -> dict:
    import torch

    from detection.evaluation import COCO_STATS

    logging.getLogger("detectron2").setLevel(logging.WARNING)
    logging.getLogger("detection").setLevel(logging.WARNING)
    ours, alone, reference = _ours(scale), _ours(scale, with_files=False), _reference(scale)
    row = compare(ours.run, reference.run, repeats, warmup=1, names=("ours", "faster_coco_eval"),
                  setup={"ours": ours.setup, "faster_coco_eval": reference.setup})
    row["without_output_files"] = compare(alone.run, reference.run, repeats, warmup=1,
                                          names=("ours", "faster_coco_eval"),
                                          setup={"ours": alone.setup, "faster_coco_eval": reference.setup})
    got, expected = ours.once()["bbox"], reference.once()
    ref = {k: float(v * 100) if v >= 0 else float("nan") for k, v in zip(COCO_STATS, expected)}
    row["identical_stats"] = all(np.isclose(got[k], ref[k], rtol=0, atol=1e-9, equal_nan=True) for k in COCO_STATS)
    row["AP"] = {"ours": got["AP"], "reference": ref["AP"]}
    if memory:  # both sides in fresh processes, a few seconds each
        row["memory"] = peak_memory("coco_val_eval", scale, torch.get_num_threads())
    n = len(reference.setup())
    row["conditions"] = f"{n} detections (scale {scale:g}); ratio = faster-coco-eval's seconds / ours"
    return row
