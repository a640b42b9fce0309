"""Evaluation: COCO (faster-coco-eval / pycocotools) and PASCAL VOC (07 11-point and area AP)."""

from detectron2.data import MetadataCatalog

from .coco import COCO_STATS, CocoEvalSummary, COCOEvaluator, evaluate_coco
from .voc import VOCDetectionEvaluator, voc_eval_class

__all__ = ["COCO_STATS", "COCOEvaluator", "CocoEvalSummary", "evaluate_coco", "VOCDetectionEvaluator",
           "voc_eval_class", "build_evaluator"]


def build_evaluator(cfg, dataset_name: str, output_dir: str | None = None, distributed: bool = True):
    """The evaluator for a registered dataset: VOC AP for `evaluator_type == "pascal_voc"`, COCO otherwise."""
    kind = getattr(MetadataCatalog.get(dataset_name), "evaluator_type", "coco")
    if kind == "pascal_voc":
        return VOCDetectionEvaluator(dataset_name, output_dir, distributed=distributed)
    return COCOEvaluator(dataset_name, output_dir, backend=cfg.EVAL.COCO_BACKEND, distributed=distributed)
