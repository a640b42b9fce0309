"""COCO box evaluation with faster-coco-eval (default) or pycocotools, keeping everything a report needs.

`evaluate_coco` returns the 12-number summary, per-category AP/AP50/AP75 and the precision-recall curves at
IoU 0.5 and 0.75 (area "all", 100 detections); `COCOEvaluator` is Detectron2's evaluator with that evaluation
step, which also writes `coco_eval_bbox.json` into its output directory.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import os
from dataclasses import asdict, dataclass, field

import numpy as np
from detectron2.evaluation import COCOEvaluator as _D2COCOEvaluator
from detectron2.utils.file_io import PathManager

__all__ = ["COCO_STATS", "CocoEvalSummary", "evaluate_coco", "COCOEvaluator", "COCO_BACKENDS"]

COCO_STATS = ("AP", "AP50", "AP75", "APs", "APm", "APl", "AR1", "AR10", "AR100", "ARs", "ARm", "ARl")
COCO_BACKENDS = ("faster_coco_eval", "pycocotools")


@dataclass
class CocoEvalSummary:
    stats: dict[str, float]  # COCO_STATS, in percent (NaN where undefined, e.g. no small objects)
    per_category: dict[str, dict[str, float]]  # name -> {"AP", "AP50", "AP75"}
    recall_thresholds: list[float]
    precision: dict[str, dict[str, list[float | None]]] = field(default_factory=dict)  # "iou50"/"iou75" -> name -> P
    backend: str = ""
    num_detections: int = 0

    def to_dict(self) -> dict:
        return asdict(self)


def _cocoeval_class(backend: str):
    if backend == "faster_coco_eval":
        from faster_coco_eval import COCOeval_faster

        return COCOeval_faster
    if backend == "pycocotools":
        from pycocotools.cocoeval import COCOeval

        return COCOeval
    raise ValueError(f"unknown COCO evaluation backend {backend!r}; choose from {COCO_BACKENDS}")


def _ap(p: np.ndarray) -> float:
    p = p[p > -1]
    return float(np.mean(p) * 100) if p.size else float("nan")


def evaluate_coco(coco_gt, results: list[dict], *, backend: str = "faster_coco_eval",
                  img_ids: list[int] | None = None) -> CocoEvalSummary:
    """Evaluate COCO-format box `results` ({"image_id", "category_id", "bbox" xywh, "score"}) against the
    pycocotools `COCO` object `coco_gt`. No results at all gives AP 0 (a detector that finds nothing)."""
    cat_ids = sorted(coco_gt.getCatIds())
    names = [c["name"] for c in coco_gt.loadCats(cat_ids)]
    rec_thrs = [round(x, 2) for x in np.linspace(0.0, 1.0, 101)]
    bad = [r for r in results
           if not (np.isfinite(r.get("score", np.nan)) and np.all(np.isfinite(r.get("bbox", [np.nan]))))]
    if bad:  # pycocotools ranked NaN scores arbitrarily and scored them (AP 43.56 measured); faster-coco-eval refused
        raise ValueError(f"{len(bad)} of {len(results)} detections have a non-finite score or box, e.g. {bad[0]}; "
                         "refusing to score them (in every back end)")
    if not results:
        zero = dict.fromkeys(COCO_STATS, 0.0)
        per_cat = {n: {"AP": 0.0, "AP50": 0.0, "AP75": 0.0} for n in names}
        return CocoEvalSummary(zero, per_cat, rec_thrs, {}, backend, 0)
    with contextlib.redirect_stdout(io.StringIO()):
        coco_dt = coco_gt.loadRes(results)
        ev = _cocoeval_class(backend)(coco_gt, coco_dt, "bbox")
        if img_ids is not None:
            ev.params.imgIds = img_ids
        ev.evaluate()
        ev.accumulate()
        ev.summarize()
    stats = {k: float(v * 100) if v >= 0 else float("nan") for k, v in zip(COCO_STATS, ev.stats)}
    prec = np.asarray(ev.eval["precision"])  # [IoU (10), recall (101), category, area (4), max dets (3)]
    per_cat, curves = {}, {"iou50": {}, "iou75": {}}
    for k, name in enumerate(names):
        p = prec[:, :, k, 0, -1]
        per_cat[name] = {"AP": _ap(p), "AP50": _ap(p[0]), "AP75": _ap(p[5])}
        for key, t in (("iou50", 0), ("iou75", 5)):
            curves[key][name] = [None if v < 0 else round(float(v), 5) for v in p[t]]
    return CocoEvalSummary(stats, per_cat, rec_thrs, curves, backend, len(results))


VOC_DIFFICULT = {"ignore": "difficult objects ignored (written as crowd regions: as VOC's own evaluation)",
                 "ground_truth": "difficult objects are ordinary ground truth (as Detectron2's VOC-to-COCO converter)"}


def write_coco_ground_truth(dataset_name: str, path: str, *, difficult: str = "ignore") -> dict:
    """A registered dataset that is not a COCO json (e.g. VOC) as a COCO ground-truth file for COCO AP.

    Image ids become integers 1..N (VOC's are strings, which faster-coco-eval rejects); the returned mapping takes
    the dataset's ids to them. `difficult` objects: "ignore" writes them as crowd regions (iscrowd 1), so that
    detections on them count neither as true nor as false positives, as in VOC's own evaluation; "ground_truth"
    keeps them as ordinary objects, as Detectron2's converter does (COCO AP up to 20 points lower on such data).
    """
    if difficult not in VOC_DIFFICULT:
        raise ValueError(f"EVAL.VOC_DIFFICULT_IN_COCO_AP must be one of {sorted(VOC_DIFFICULT)}, got {difficult!r}")
    from detectron2.data import DatasetCatalog, MetadataCatalog
    from detectron2.structures import BoxMode

    meta = MetadataCatalog.get(dataset_name)
    mapping = getattr(meta, "thing_dataset_id_to_contiguous_id", None)
    reverse = {v: k for k, v in mapping.items()} if mapping else None
    images, annotations, ids = [], [], {}
    for k, rec in enumerate(DatasetCatalog.get(dataset_name), start=1):
        ids[rec.get("image_id", k)] = k
        images.append({"id": k, "width": int(rec["width"]), "height": int(rec["height"]),
                       "file_name": str(rec["file_name"])})
        for a in rec.get("annotations", []):
            x, y, w, h = BoxMode.convert(list(a["bbox"]), a["bbox_mode"], BoxMode.XYWH_ABS)
            crowd = int(bool(a.get("iscrowd", 0)) or (difficult == "ignore" and bool(a.get("difficult", 0))))
            cat = reverse[a["category_id"]] if reverse else a["category_id"]
            annotations.append({"id": len(annotations) + 1, "image_id": k, "bbox": [x, y, w, h],
                                "area": float(w * h), "iscrowd": crowd, "category_id": int(cat)})
    cats = [{"id": reverse[i] if reverse else i, "name": n} for i, n in enumerate(meta.thing_classes)]
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as f:
        json.dump({"images": images, "annotations": annotations, "categories": cats}, f)
    return ids


class COCOEvaluator(_D2COCOEvaluator):
    """Detectron2's COCOEvaluator (inference, gathering) with our evaluation step: `backend` faster-coco-eval
    (default; needs no compiled Detectron2) or pycocotools, boxes only. Datasets registered without a COCO json
    (VOC) are converted by `write_coco_ground_truth` (integer image ids, difficult objects ignored)."""

    def __init__(self, dataset_name: str, output_dir: str | None = None, *, backend: str = "faster_coco_eval",
                 distributed: bool = True, voc_difficult: str = "ignore"):
        from detectron2.data import MetadataCatalog
        from pycocotools.coco import COCO

        _cocoeval_class(backend)  # fail early on an unknown/uninstalled backend
        meta = MetadataCatalog.get(dataset_name)
        converted = None
        if not hasattr(meta, "json_file") or getattr(meta, "coco_converted", False):
            if output_dir is None:
                raise ValueError(f"COCO AP of {dataset_name!r} (not a COCO json dataset) needs an output_dir for "
                                 "its converted ground truth")
            converted = os.path.join(output_dir, f"{dataset_name}_coco_format_difficult_{voc_difficult}.json")
            ids = write_coco_ground_truth(dataset_name, converted, difficult=voc_difficult)
            # kept on the metadata: later evaluators of this dataset (periodic evaluation) find file and ids
            meta.set(json_file=getattr(meta, "json_file", converted), coco_image_ids=ids, coco_converted=True)
        self._id_map = getattr(meta, "coco_image_ids", None)
        super().__init__(dataset_name, tasks=("bbox",), distributed=distributed, output_dir=output_dir,
                         use_fast_impl=False)
        if converted is not None:  # this evaluator's own conversion (the difficult-object convention is its)
            with contextlib.redirect_stdout(io.StringIO()):
                self._coco_api = COCO(converted)
        self._backend = backend
        # the conditions of the numbers, recorded beside them in metrics.json (Trainer.test)
        self.conventions = {"coco_backend": backend}
        if converted is not None:
            self.conventions["difficult_objects"] = VOC_DIFFICULT[voc_difficult]

    def _eval_predictions(self, predictions, img_ids=None):
        if self._id_map is not None:
            unknown = [p["image_id"] for p in predictions if p["image_id"] not in self._id_map]
            if unknown:
                raise KeyError(f"predictions for image ids {unknown[:5]} that are not in {self._metadata.name}")
            for p in predictions:
                for r in p["instances"]:
                    r["image_id"] = self._id_map[r["image_id"]]
            img_ids = None if img_ids is None else [self._id_map[i] for i in img_ids]
        coco_results = list(itertools.chain(*[x["instances"] for x in predictions]))
        mapping = getattr(self._metadata, "thing_dataset_id_to_contiguous_id", None)
        if mapping:
            reverse = {v: k for k, v in mapping.items()}
            for r in coco_results:
                r["category_id"] = reverse[r["category_id"]]
        if self._output_dir:
            with PathManager.open(os.path.join(self._output_dir, "coco_instances_results.json"), "w") as f:
                json.dump(coco_results, f)
        if not self._do_evaluation:
            return
        self._logger.info(f"Evaluating {len(coco_results)} boxes with {self._backend}")
        summary = evaluate_coco(self._coco_api, coco_results, backend=self._backend, img_ids=img_ids)
        if self._output_dir:
            with PathManager.open(os.path.join(self._output_dir, "coco_eval_bbox.json"), "w") as f:
                json.dump(summary.to_dict(), f)
        res = dict(summary.stats)
        res.update({f"AP-{name}": v["AP"] for name, v in summary.per_category.items()})
        self._logger.info("bbox: " + ", ".join(f"{k} {summary.stats[k]:.2f}" for k in COCO_STATS[:6]))
        self._results["bbox"] = res
