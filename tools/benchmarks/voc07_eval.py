"""Section `voc07_eval`: VOC2007 test-sized evaluation (4,952 images, ~495k detections, 20 classes), ours
(VOCDetectionEvaluator.evaluate: AP50 in both VOC integrations and AP at ten IoU thresholds, one matching pass)
against py-faster-rcnn's voc_eval as Detectron2 ships it (detectron2.evaluation.pascal_voc_evaluation.voc_eval,
its Python 3 port), called per class at IoU 0.5 with the VOC07 11-point metric, as py-faster-rcnn's test does.
Both sides read the ground truth from the XML files once per evaluation (ours through the registered dataset,
the reference through parse_rec, whose cache is cleared each round); the detections are the same numbers
(ours fed to the evaluator's process() once, the reference's det_test_<class>.txt files written beforehand).
The per-class APs must be identical on every class with an object to score (a class without: ours leaves it out,
the reference scores it 0)."""

from __future__ import annotations

import logging
from collections import defaultdict

import numpy as np

from . import generated
from .rss import Side, peak_memory
from .stats import compare

__all__ = ["SIDES", "bench_voc07_eval"]

NAME = "bench_voc07_test"


def _detections(data: generated.VocSet) -> dict[str, list]:
    """image -> [(class index, score, x0, y0, x1, y1)] read back from the det files (1-based, as written)."""
    per_image: dict[str, list] = defaultdict(list)
    for c, cls in enumerate(generated.VOC_CLASSES):
        for line in (data.detections / f"det_test_{cls}.txt").read_text().split("\n"):
            if line:
                image, *numbers = line.split(" ")
                per_image[image].append((c, *map(float, numbers)))
    return per_image


def _ours(scale: float) -> Side:
    import torch
    from detectron2.structures import Boxes, Instances

    from detection.datasets.voc import register_voc
    from detection.evaluation.voc import VOCDetectionEvaluator

    data = generated.voc07_test(scale)
    register_voc(NAME, str(data.root), "test", 2007, generated.VOC_CLASSES)
    evaluator = VOCDetectionEvaluator(NAME, None, distributed=False)
    evaluator.reset()
    names = (data.root / "ImageSets" / "Main" / "test.txt").read_text().split()
    dets = _detections(data)
    for name in names:  # the detector's outputs: 0-based float32 boxes (the evaluator adds VOC's 1 back)
        rows = np.array(dets.get(name, []), dtype=np.float64).reshape(-1, 6)
        inst = Instances((1, 1))
        inst.pred_boxes = Boxes(torch.from_numpy((rows[:, 2:] - np.array([1.0, 1.0, 0.0, 0.0])).astype(np.float32)))
        inst.scores = torch.from_numpy(rows[:, 1].astype(np.float32))
        inst.pred_classes = torch.from_numpy(rows[:, 0].astype(np.int64))
        evaluator.process([{"image_id": name}], [{"instances": inst}])
    return Side(evaluator.evaluate)


def _reference(scale: float) -> Side:
    from detectron2.evaluation.pascal_voc_evaluation import parse_rec, voc_eval

    data = generated.voc07_test(scale)

    def run() -> dict[str, float]:
        parse_rec.cache_clear()  # the XML read once per evaluation, as on ours
        with np.errstate(divide="ignore", invalid="ignore"):  # its recall of a class without ground truth: 0 / 0
            return _per_class(data, voc_eval)

    return Side(run)


def _per_class(data: generated.VocSet, voc_eval) -> dict[str, float]:
    """AP50 (VOC07 11-point) of each class, in percent, by the reference's voc_eval."""
    return {cls: float(voc_eval(str(data.detections / "det_test_{}.txt"), str(data.root / "Annotations" / "{}.xml"),
                                str(data.root / "ImageSets" / "Main" / "test.txt"), cls, ovthresh=0.5,
                                use_07_metric=True)[2]) * 100
            for cls in generated.VOC_CLASSES}


SIDES = {"ours": _ours, "reference": _reference}


def bench_voc07_eval(repeats: int, scale: float = 1.0, *, memory: bool = True) -> dict:
    import torch

    logging.getLogger("detection").setLevel(logging.WARNING)
    ours, reference = _ours(scale), _reference(scale)
    row = compare(ours.run, reference.run, repeats, warmup=1, names=("ours", "py_faster_rcnn_voc_eval"))
    got, expected = ours.once()["bbox"], reference.once()
    # a class with no object to score (a tiny scale's): ours leaves it out of the mean (NaN), the reference's 0/0
    # recall scores it 0; every scored class must be identical
    scored = [c for c in generated.VOC_CLASSES if not np.isnan(got[f"AP50-{c}"])]
    row["identical_per_class_ap50"] = all(got[f"AP50-{c}"] == expected[c] for c in scored) and all(
        expected[c] == 0.0 for c in generated.VOC_CLASSES if c not in scored)
    row["map50_voc07"] = {"ours": got["mAP50_voc07"], "reference": float(np.mean([expected[c] for c in scored])),
                          "classes_scored": len(scored)}
    if memory:  # both sides in fresh processes, a few seconds each
        row["memory"] = peak_memory("voc07_eval", scale, torch.get_num_threads())
    n = sum(1 for f in generated.voc07_test(scale).detections.iterdir() for _ in f.open())
    row["conditions"] = (f"{len(list((generated.voc07_test(scale).root / 'Annotations').iterdir()))} images, {n} "
                         f"detections, 20 classes (scale {scale:g}); ours also computes the area AP and AP at IoU "
                         "0.5:0.95 in the same pass; ratio = the reference's seconds / ours")
    return row
