"""COCO box evaluation with faster-coco-eval (default) or pycocotools, keeping everything a report needs.

`evaluate_coco` returns the 12-number summary, per-category AP/AP50/AP75 and the precision-recall curves at
IoU 0.5 and 0.75 (area "all", 100 detections); `COCOEvaluator` is Detectron2's evaluator with that evaluation
step, which writes `coco_instances_results.json` and `coco_eval_bbox.json` into its output directory (not
Detectron2's `instances_predictions.pth`: the results json holds the same detections).
"""

from __future__ import annotations

import contextlib
import copy
import io
import itertools
import json
import logging
import os
from collections import OrderedDict
from dataclasses import asdict, dataclass, field

import numpy as np
import orjson
from detectron2.evaluation import COCOEvaluator as _D2COCOEvaluator
from detectron2.utils.file_io import PathManager

from backbones.checkpoint_io import atomic_write
from backbones.strict_json import strict_json
from classification.engine.run_files import COCO_EVAL, PREDICTIONS

from ..datasets.coco import contiguous_category_ids

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


def _non_finite(results: list[dict]) -> list[dict]:
    """The results with a non-finite (or missing) score or box coordinate: one array operation over all of them,
    the per-result test only where the boxes are not all 4 numbers."""
    if not results:
        return []
    scores = np.array([r.get("score", np.nan) for r in results], dtype=float)
    try:
        boxes = np.array([r.get("bbox", (np.nan,) * 4) for r in results], dtype=float).reshape(len(results), 4)
        ok = np.isfinite(scores) & np.isfinite(boxes).all(axis=1)
    except (TypeError, ValueError):
        ok = np.isfinite(scores) & np.array([np.all(np.isfinite(r.get("bbox", [np.nan]))) for r in results])
    return [results[i] for i in np.flatnonzero(~ok)]


def evaluate_coco(coco_gt, results: list[dict], *, backend: str = "faster_coco_eval",
                  img_ids: list[int] | None = None) -> CocoEvalSummary:
    """Evaluate COCO-format box `results` ({"image_id", "category_id", "bbox" xywh, "score"}) against the
    pycocotools `COCO` object `coco_gt`. No results at all gives AP 0 (a detector that finds nothing)."""
    cat_ids = sorted(coco_gt.getCatIds())
    names = [c["name"] for c in coco_gt.loadCats(cat_ids)]
    rec_thrs = [round(x, 2) for x in np.linspace(0.0, 1.0, 101)]
    bad = _non_finite(results)
    if bad:  # pycocotools ranked NaN scores arbitrarily and scored them (AP 43.56 measured); faster-coco-eval refused
        raise ValueError(f"{len(bad)} of {len(results)} detections have a non-finite score or box, e.g. {bad[0]}; "
                         "refusing to score them (in every back end)")
    if not results:  # 0 where there is ground truth to find, NaN where the back ends find it undefined
        wanted = None if img_ids is None else set(img_ids)
        gts = [a for a in coco_gt.dataset.get("annotations", []) if not a.get("iscrowd", 0)
               and (wanted is None or a["image_id"] in wanted)]
        areas = np.array([a["area"] for a in gts], dtype=float)
        present = {"": len(gts) > 0, "s": bool((areas < 32 ** 2).any()),
                   "m": bool(((areas >= 32 ** 2) & (areas < 96 ** 2)).any()), "l": bool((areas >= 96 ** 2).any())}
        zero = {k: 0.0 if present[k[-1] if k[-1] in "sml" else ""] else float("nan") for k in COCO_STATS}
        with_gt = {a["category_id"] for a in gts}
        per_cat = {n: dict.fromkeys(("AP", "AP50", "AP75"), 0.0 if c in with_gt else float("nan"))
                   for c, n in zip(cat_ids, names)}
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


def _coco_api(dataset: dict):
    """A pycocotools COCO object over an in-memory ground-truth dict (no file read)."""
    from pycocotools.coco import COCO

    api = COCO()
    api.dataset = dataset
    with contextlib.redirect_stdout(io.StringIO()):
        api.createIndex()
    return api


def ground_truth_api(dataset_name: str, output_dir: str | None = None, *, voc_difficult: str = "ignore"):
    """(COCO object, conventions) of the ground truth COCO AP of `dataset_name` is scored against: for a COCO json
    dataset the file as the training loader validated it (`datasets.coco.coco_ground_truth`: the same clipped and
    dropped boxes training saw, ids and flags checked), for other datasets (VOC) their dataset dicts converted
    by `write_coco_ground_truth` (written under `output_dir`)."""
    from detectron2.data import MetadataCatalog

    from ..datasets.coco import coco_ground_truth
    from ..datasets.validation import bulk_objects

    meta = MetadataCatalog.get(dataset_name)
    conventions = {}
    if hasattr(meta, "json_file") and not getattr(meta, "coco_converted", False):
        with bulk_objects():
            gt = coco_ground_truth(meta.json_file, log=False)  # the loader logged its clipping when it read the file
            api = _coco_api(gt.dataset)
        if gt.describe_changes():
            conventions["ground_truth_boxes"] = gt.describe_changes()
        return api, conventions
    if output_dir is None:
        raise ValueError(f"COCO AP of {dataset_name!r} (not a COCO json dataset) needs an output_dir for its "
                         "converted ground truth")
    converted = os.path.join(output_dir, f"{dataset_name}_coco_format_difficult_{voc_difficult}.json")
    ids = write_coco_ground_truth(dataset_name, converted, difficult=voc_difficult)
    # kept on the metadata: later evaluators of this dataset (periodic evaluation) find file and ids
    meta.set(json_file=getattr(meta, "json_file", converted), coco_image_ids=ids, coco_converted=True)
    with contextlib.redirect_stdout(io.StringIO()):
        from pycocotools.coco import COCO

        api = COCO(converted)
    return api, {"difficult_objects": VOC_DIFFICULT[voc_difficult]}


class COCOEvaluator(_D2COCOEvaluator):
    """Detectron2's COCOEvaluator (inference, gathering) with our evaluation step: `backend` faster-coco-eval
    (default; needs no compiled Detectron2) or pycocotools, boxes only. The ground truth is `ground_truth_api`'s:
    a COCO json as the training loader validated it (the same boxes training saw), other datasets (VOC) converted
    by `write_coco_ground_truth` (integer image ids, difficult objects ignored)."""

    def __init__(self, dataset_name: str, output_dir: str | None = None, *, backend: str = "faster_coco_eval",
                 distributed: bool = True, voc_difficult: str = "ignore"):
        import logging

        import torch
        from detectron2.data import MetadataCatalog

        _cocoeval_class(backend)  # fail early on an unknown/uninstalled backend
        # Detectron2's __init__ would parse the raw json a second time: its attributes are set here instead
        # (the ones its process / evaluate read, in 0.6 and main)
        self._logger = logging.getLogger("detectron2.evaluation.coco_evaluation")
        self._distributed, self._output_dir = distributed, output_dir
        self._use_fast_impl, self._tasks, self._max_dets_per_image = False, ("bbox",), [1, 10, 100]
        self._kpt_oks_sigmas = ()
        self._cpu_device = torch.device("cpu")
        self._metadata = MetadataCatalog.get(dataset_name)
        self._coco_api, conventions = ground_truth_api(dataset_name, output_dir, voc_difficult=voc_difficult)
        self._do_evaluation = "annotations" in self._coco_api.dataset
        self._id_map = getattr(self._metadata, "coco_image_ids", None)
        self._backend = backend
        # the conditions of the numbers, recorded beside them in evaluation.json (Trainer.test)
        self.conventions = {"coco_backend": backend, **conventions}

    def evaluate(self, img_ids=None):
        """Detectron2's evaluate (gather to the main process, then _eval_predictions) without its
        instances_predictions.pth, a torch.save of every prediction (~1.5 s and 60 MB at val2017's 500k detections):
        the same detections are in coco_instances_results.json, which is what COCO tools read."""
        from detectron2.utils import comm

        if self._distributed:
            comm.synchronize()
            predictions = list(itertools.chain(*comm.gather(self._predictions, dst=0)))
            if not comm.is_main_process():
                return {}
        else:
            predictions = self._predictions
        if not predictions:
            self._logger.warning("[COCOEvaluator] Did not receive valid predictions.")
            return {}
        self._results = OrderedDict()
        self._eval_predictions(predictions, img_ids=img_ids)
        return copy.deepcopy(self._results)

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
        # the model's contiguous classes -> the file's category ids; a dataset registered but not yet loaded has no
        # mapping on its metadata: the loader's rule applied to the ground truth itself, never the contiguous ids
        # scored as category ids (AP ~0, silently)
        mapping = getattr(self._metadata, "thing_dataset_id_to_contiguous_id", None) or \
            contiguous_category_ids(self._coco_api.getCatIds())
        reverse = {v: k for k, v in mapping.items()}
        for r in coco_results:
            r["category_id"] = reverse[r["category_id"]]
        if self._output_dir:  # orjson: 0.17 s for val2017's 500k results, json.dumps 2.6 s (the same numbers back)
            atomic_write(os.path.join(self._output_dir, PREDICTIONS), lambda f: f.write(orjson.dumps(coco_results)))
        if not self._do_evaluation:
            return
        self._logger.info(f"Evaluating {len(coco_results)} boxes with {self._backend}")
        summary = evaluate_coco(self._coco_api, coco_results, backend=self._backend, img_ids=img_ids)
        if self._output_dir:
            with PathManager.open(os.path.join(self._output_dir, COCO_EVAL), "w") as f:
                f.write(strict_json(summary.to_dict(), indent=None))  # a category without ground truth: null
        res = dict(summary.stats)
        res.update({f"AP-{name}": v["AP"] for name, v in summary.per_category.items()})
        _log_tables(self._logger, summary)
        self._results["bbox"] = res


def _log_tables(log: logging.Logger, summary: CocoEvalSummary) -> None:
    """The two tables Detectron2's COCOEvaluator logs (its _derive_coco_results), which users and scripts read in
    log.txt: the summary's first six numbers, and the AP of each category in three pairs of columns."""
    from detectron2.utils.logger import create_small_table
    from tabulate import tabulate

    log.info("Evaluation results for bbox: \n" + create_small_table({k: summary.stats[k] for k in COCO_STATS[:6]}))
    pairs = [(name, v["AP"]) for name, v in summary.per_category.items()]
    cols = min(6, len(pairs) * 2)
    if not cols:
        return
    flat = list(itertools.chain(*pairs))
    table = tabulate(itertools.zip_longest(*[flat[i::cols] for i in range(cols)]), tablefmt="pipe", floatfmt=".3f",
                     headers=["category", "AP"] * (cols // 2), numalign="left")
    log.info("Per-category bbox AP: \n" + table)
