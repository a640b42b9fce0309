"""Evaluation: COCO (faster-coco-eval / pycocotools) and PASCAL VOC (07 11-point and area AP)."""

from detectron2.data import MetadataCatalog

from .coco import COCO_STATS, CocoEvalSummary, COCOEvaluator, evaluate_coco
from .voc import VOCDetectionEvaluator, voc_eval_class
from .voc_submission import VOCSubmissionWriter

__all__ = ["COCO_STATS", "COCOEvaluator", "CocoEvalSummary", "evaluate_coco", "VOCDetectionEvaluator",
           "voc_eval_class", "VOCSubmissionWriter", "build_evaluator"]


def build_evaluator(cfg, dataset_name: str, output_dir: str | None = None, distributed: bool = True):
    """The evaluator for a registered dataset: VOC AP for `evaluator_type == "pascal_voc"`, submission files for
    "pascal_voc_submission", COCO AP otherwise."""
    kind = getattr(MetadataCatalog.get(dataset_name), "evaluator_type", "coco")
    if kind == "pascal_voc_submission":  # VOC 2012 test: no public ground truth, files for the server
        return VOCSubmissionWriter(dataset_name, output_dir, distributed=distributed)
    if kind == "pascal_voc":
        return VOCDetectionEvaluator(dataset_name, output_dir, distributed=distributed)
    return COCOEvaluator(dataset_name, output_dir, backend=cfg.EVAL.COCO_BACKEND, distributed=distributed,
                         voc_difficult=cfg.EVAL.VOC_DIFFICULT_IN_COCO_AP)
