"""Detections of a VOC split without public annotations (VOC 2012 test), written in the official submission format
for the PASCAL evaluation server -- we cannot score them here, so no AP is reported.

    <output_dir>/results/VOC<year>/Main/comp4_det_<split>_<class>.txt     one line per detection:
    <image id> <score> <xmin> <ymin> <xmax> <ymax>                          (1-based VOC pixel coordinates)
"comp4": trained on data other than the VOC training set alone (07++12), as py-faster-rcnn labels its results.
"""

from __future__ import annotations

import logging
import os
from collections import OrderedDict

from detectron2.data import MetadataCatalog

from .voc import VOCDetectionEvaluator

__all__ = ["VOCSubmissionWriter"]

logger = logging.getLogger(__name__)


class VOCSubmissionWriter(VOCDetectionEvaluator):
    """VOCDetectionEvaluator's collection of detections (1-based boxes, finite scores only), written out instead
    of scored."""

    def __init__(self, dataset_name: str, output_dir: str, distributed: bool = True):
        if not output_dir:
            raise ValueError(f"{dataset_name}: writing VOC submission files needs an output directory")
        super().__init__(dataset_name, output_dir, distributed)
        meta = MetadataCatalog.get(dataset_name)
        self._year, self._split = getattr(meta, "year", 2012), getattr(meta, "split", "test")

    def evaluate(self):
        preds = self._all_predictions()
        if preds is None:
            return None
        folder = os.path.join(self._output_dir, "results", f"VOC{self._year}", "Main")
        os.makedirs(folder, exist_ok=True)
        for c, name in enumerate(self._class_names):  # every class gets its file, empty or not: the server wants all
            with open(os.path.join(folder, f"comp4_det_{self._split}_{name}.txt"), "w") as f:
                for image_id, score, (x0, y0, x1, y1) in self._class_detections(preds, c):
                    f.write(f"{image_id} {score:.6f} {x0:.1f} {y0:.1f} {x1:.1f} {y1:.1f}\n")
        total = sum(len(scores) for _, _, scores, _ in preds)
        logger.info(f"{self._dataset_name}: {total} detections written to {folder} for the PASCAL evaluation server "
                    "(no ground truth here: no AP)")
        return OrderedDict(submission={"detections": float(total), "files": float(len(self._class_names))})
