"""Dataset registration: COCO json and VOC directories (standard names and any path), the embedded default."""

from . import builtin  # noqa: F401  (re-registers the standard VOC names with the robust parser)
from .coco import DatasetFormatError, coco_ground_truth, load_coco_checked, register_coco
from .embedded import EmbeddedSpec, ensure_embedded_dataset, register_embedded
from .voc import VOC_CLASSES, VOCFormatError, load_voc_instances, parse_voc_xml, register_voc

register_embedded()  # embedded_train / embedded_val (COCO) and embedded_voc_* (VOC), generated on first use

__all__ = ["register_embedded", "ensure_embedded_dataset", "EmbeddedSpec", "register_coco", "register_voc",
           "load_coco_checked", "load_voc_instances", "parse_voc_xml", "VOC_CLASSES", "VOCFormatError",
           "DatasetFormatError", "coco_ground_truth"]
