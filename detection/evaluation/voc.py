"""PASCAL VOC box AP, both integrations: VOC2007's 11-point and the area under the PR curve (VOC2010+).

Ground truth comes from the registered dataset dicts (our robust VOC parser, `difficult` kept), not from
re-parsing the XML. Matching is py-faster-rcnn's voc_eval (greedy by score, difficult objects neither true nor
false positives, VOC's +1 pixel convention); the AP integration is Detectron2's `voc_ap`.
"""

from __future__ import annotations

import logging
import os
from collections import OrderedDict, defaultdict

import numpy as np
import torch
from detectron2.data import DatasetCatalog, MetadataCatalog
from detectron2.evaluation import DatasetEvaluator
from detectron2.evaluation.pascal_voc_evaluation import voc_ap
from detectron2.structures import BoxMode
from detectron2.utils import comm

from backbones.strict_json import strict_json
from classification.engine.run_files import VOC_EVAL

__all__ = ["VOCDetectionEvaluator", "voc_eval_class", "voc_match"]

logger = logging.getLogger(__name__)


def _iou_plus1(boxes: np.ndarray, gts: np.ndarray) -> np.ndarray:
    """IoU of each of `boxes` [K, 4] with each of `gts` [G, 4] -> [K, G], VOC's +1 pixel convention (the same
    float64 operations as py-faster-rcnn's per-detection voc_eval, so the same numbers bit for bit)."""
    b, g = boxes[:, None, :], gts[None, :, :]
    ixmin, iymin = np.maximum(g[..., 0], b[..., 0]), np.maximum(g[..., 1], b[..., 1])
    ixmax, iymax = np.minimum(g[..., 2], b[..., 2]), np.minimum(g[..., 3], b[..., 3])
    inter = np.maximum(ixmax - ixmin + 1.0, 0.0) * np.maximum(iymax - iymin + 1.0, 0.0)
    union = ((b[..., 2] - b[..., 0] + 1.0) * (b[..., 3] - b[..., 1] + 1.0)
             + (g[..., 2] - g[..., 0] + 1.0) * (g[..., 3] - g[..., 1] + 1.0) - inter)
    return inter / union


def voc_match(gt: dict, dets: list[tuple], iou_thresholds) -> tuple[np.ndarray, np.ndarray, int]:
    """py-faster-rcnn's greedy matching at every threshold at once: (tp [T, N], fp [T, N], npos), detections in
    ranked order. Each detection's best-overlapping ground truth does not depend on the threshold, so the overlaps
    are computed once (one array operation per image) and only the "already taken" bookkeeping is per threshold:
    a detection is a true positive where it is the first, in rank order, to reach its (non-difficult) box.
    Ranking: score, then equal scores by image id and the detector's own order within an image -- fixed, so the AP
    does not depend on the order of the split file (tied scores gave 83.33 or 66.67 by file order)."""
    scores = np.array([d[1] for d in dets], dtype=float)
    if not np.isfinite(scores).all():
        bad = dets[int(np.flatnonzero(~np.isfinite(scores))[0])]
        raise FloatingPointError(f"detection score {bad[1]} on image {bad[0]!r}: scores must be finite numbers")
    unknown = next((d[0] for d in dets if d[0] not in gt), None)
    if unknown is not None:
        raise KeyError(f"detections on image {unknown!r}, which is not in the ground truth of this dataset")
    npos = sum(int((~d).sum()) for _, d in gt.values())
    thresholds = np.asarray(list(iou_thresholds), dtype=float)
    n = len(dets)
    if n == 0:
        return np.zeros((len(thresholds), 0)), np.zeros((len(thresholds), 0)), npos
    images = [d[0] for d in dets]
    names = {name: k for k, name in enumerate(sorted({str(i) for i in images}))}
    image_code = np.array([names[str(i)] for i in images])
    order = np.lexsort((image_code, -scores))  # stable: equal (score, image) keep the detector's order
    boxes = np.array([d[2] for d in dets], dtype=float).reshape(n, 4)
    best = np.full(n, -np.inf)  # overlap with the best ground-truth box of the image (-inf: the image has none)
    best_j = np.zeros(n, dtype=np.int64)
    difficult = np.zeros(n, dtype=bool)
    by_image: dict = defaultdict(list)
    for i, img in enumerate(images):
        by_image[img].append(i)
    for img, idx in by_image.items():
        gt_boxes, gt_difficult = gt[img]
        if len(gt_boxes):
            ious = _iou_plus1(boxes[idx], gt_boxes)
            j = np.argmax(ious, axis=1)
            best[idx], best_j[idx], difficult[idx] = ious[np.arange(len(idx)), j], j, gt_difficult[j]
    best, difficult = best[order], difficult[order]
    target = (image_code[order].astype(np.int64) << 32) | best_j[order]  # (image, box) of each ranked detection
    tp, fp = np.zeros((len(thresholds), n)), np.zeros((len(thresholds), n))
    for t, thresh in enumerate(thresholds):
        hit = best > thresh
        candidates = np.flatnonzero(hit & ~difficult)  # a hit on a difficult box is neither true nor false
        _, first = np.unique(target[candidates], return_index=True)
        tp[t, candidates[first]] = 1.0
        fp[t] = ~hit
        fp[t, candidates] = 1.0 - tp[t, candidates]
    return tp, fp, npos


def _curve(tp: np.ndarray, fp: np.ndarray, npos: int) -> tuple[np.ndarray, np.ndarray]:
    fp, tp = np.cumsum(fp), np.cumsum(tp)
    rec = tp / float(npos) if npos else np.zeros_like(tp)
    prec = tp / np.maximum(tp + fp, np.finfo(np.float64).eps)
    return rec, prec


def voc_eval_class(gt: dict, dets: list[tuple], iou_thresh: float, use_07_metric: bool):
    """gt: image_id -> (boxes [N,4] 1-based, difficult [N] bool); dets: (image_id, score, box 1-based).
    Returns (recall, precision, ap) as py-faster-rcnn's voc_eval. Refuses what it cannot score correctly: a
    non-finite score (sorting by it would misorder the valid detections) or an image without ground truth entry
    (the references raise too). A class without non-difficult ground truth gets AP 0: as py-faster-rcnn's and
    Detectron2's voc_eval for the 07 (11-point) metric; for the area metric theirs divide by zero and give NaN
    when the class has detections (which makes their mean NaN), 0 when it has none."""
    tp, fp, npos = voc_match(gt, dets, [iou_thresh])
    rec, prec = _curve(tp[0], fp[0], npos)
    return rec, prec, voc_ap(rec, prec, use_07_metric) if npos else 0.0


class VOCDetectionEvaluator(DatasetEvaluator):
    """Per-class and mean AP at IoU 0.5 in both VOC integrations, plus AP/AP75 over IoU 0.5:0.95 (the
    dataset's own integration: 11-point for VOC2007, area otherwise), as Detectron2 reports them."""

    def __init__(self, dataset_name: str, output_dir: str | None = None, distributed: bool = True):
        self._dataset_name = dataset_name
        meta = MetadataCatalog.get(dataset_name)
        self._class_names = list(meta.thing_classes)
        self._is_2007 = getattr(meta, "year", None) == 2007
        self._output_dir = output_dir
        self._distributed = distributed

    def reset(self):
        # one entry an image: (image_id, boxes [K, 4] 1-based float64, scores [K] float64, classes [K] int64) --
        # arrays, not a tuple a detection (a VOC07 test evaluation held 495k of those: ~190 MB, 5x the reference)
        self._predictions: list[tuple] = []

    def process(self, inputs, outputs):
        for inp, out in zip(inputs, outputs):
            inst = out["instances"].to("cpu")
            if not torch.isfinite(inst.scores).all():
                raise FloatingPointError(f"{self._dataset_name}: non-finite detection scores on image "
                                         f"{inp['image_id']!r}; refusing to compute an AP from them")
            boxes = inst.pred_boxes.tensor.numpy().astype(float).reshape(-1, 4)
            boxes[:, :2] += 1.0  # back to VOC's 1-based inclusive pixels (inverse of the loader)
            self._predictions.append((inp["image_id"], boxes, inst.scores.numpy().astype(float),
                                      inst.pred_classes.numpy().astype(np.int64)))

    def _ground_truth(self) -> dict:
        """image_id -> (boxes [N, 4] 1-based, classes [N], difficult [N]) of every class at once."""
        gt = {}
        for rec in DatasetCatalog.get(self._dataset_name):
            anns = rec["annotations"]
            boxes = np.array([BoxMode.convert(a["bbox"], a["bbox_mode"], BoxMode.XYXY_ABS) for a in anns],
                             dtype=float).reshape(-1, 4)
            boxes[:, :2] += 1.0
            gt[rec["image_id"]] = (boxes, np.array([a["category_id"] for a in anns], dtype=np.int64),
                                   np.array([bool(a.get("difficult", 0)) for a in anns], dtype=bool))
        return gt

    @staticmethod
    def _class_ground_truth(gt: dict, c: int) -> dict:
        """voc_match's ground truth of class `c`: image_id -> (boxes, difficult); one shared empty pair for the
        images without the class."""
        empty = (np.zeros((0, 4)), np.zeros(0, dtype=bool))
        return {img: ((boxes[m], difficult[m]) if (m := classes == c).any() else empty)
                for img, (boxes, classes, difficult) in gt.items()}

    @staticmethod
    def _class_detections(preds: list[tuple], c: int) -> list[tuple]:
        """The detections of class `c` as voc_match takes them: (image_id, score, box 1-based), image by image in
        the detector's order."""
        out = []
        for image_id, boxes, scores, classes in preds:
            for k in np.flatnonzero(classes == c).tolist():
                out.append((image_id, float(scores[k]), tuple(boxes[k].tolist())))
        return out

    def _all_predictions(self) -> list | None:
        """Every process's predictions, on the main process (None elsewhere)."""
        if not self._distributed:
            return self._predictions
        gathered = comm.gather(self._predictions, dst=0)
        if not comm.is_main_process():
            return None
        return [item for part in gathered for item in part]

    def evaluate(self):
        preds = self._all_predictions()
        if preds is None:
            return None
        gt = self._ground_truth()
        ap07, ap_area, per_iou, curves = {}, {}, defaultdict(list), {}
        thresholds = range(50, 100, 5)
        unscored = []  # classes with no non-difficult object in the test set: nothing to score
        for c, name in enumerate(self._class_names):
            # one matching pass for all ten thresholds; both integrations of the 0.5 curve from it
            tp, fp, npos = voc_match(self._class_ground_truth(gt, c), self._class_detections(preds, c),
                                     [t / 100.0 for t in thresholds])
            if not npos:  # out of every mean, as COCOeval leaves out a category without ground truth
                ap07[name] = ap_area[name] = float("nan")
                unscored.append(name)
                continue
            for k, t in enumerate(thresholds):
                rec, prec = _curve(tp[k], fp[k], npos)
                if t == 50:
                    ap07[name] = voc_ap(rec, prec, True) if npos else 0.0
                    ap_area[name] = voc_ap(rec, prec, False) if npos else 0.0
                    if self._output_dir:  # only written there
                        curves[name] = {"recall": [round(x, 5) for x in rec.tolist()],
                                        "precision": [round(x, 5) for x in prec.tolist()]}
                    per_iou[t].append(ap07[name] if self._is_2007 else ap_area[name])
                else:
                    per_iou[t].append(voc_ap(rec, prec, self._is_2007))
        if unscored:
            logger.warning(f"{self._dataset_name}: {len(unscored)} class(es) have no non-difficult object in the "
                           f"test set, so nothing to score: {', '.join(unscored)}; left out of every mean (as "
                           "COCOeval leaves out a category without ground truth; py-faster-rcnn counted them as 0)")
        primary = ap07 if self._is_2007 else ap_area

        def mean(values) -> float:  # over the scored classes (none: undefined, as COCOeval's -1)
            scored = [v for v in values if not np.isnan(v)]
            return float(np.mean(scored) * 100) if scored else float("nan")

        map_at = {t: mean(per_iou[t]) for t in range(50, 100, 5)}
        res = OrderedDict(AP=float(np.mean(list(map_at.values()))), AP50=map_at[50], AP75=map_at[75],
                          mAP50_voc07=mean(ap07.values()), mAP50_area=mean(ap_area.values()))
        res.update({f"AP50-{name}": float(primary[name] * 100) for name in self._class_names})
        res["classes_unscored"] = len(unscored)
        logger.info(f"{self._dataset_name}: mAP@0.5 {res['AP50']:.2f} ({'VOC07 11-point' if self._is_2007 else 'area'})"
                    f", VOC07 {res['mAP50_voc07']:.2f}, area {res['mAP50_area']:.2f}")
        if self._output_dir:
            os.makedirs(self._output_dir, exist_ok=True)
            with open(os.path.join(self._output_dir, VOC_EVAL), "w") as f:
                f.write(strict_json({"metrics": res, "per_class_ap50_voc07": {k: v * 100 for k, v in ap07.items()},
                                     "per_class_ap50_area": {k: v * 100 for k, v in ap_area.items()},
                                     "pr_curves_iou50": curves, "metric": "voc07" if self._is_2007 else "area"},
                                    indent=None))
        return OrderedDict(bbox=res)
