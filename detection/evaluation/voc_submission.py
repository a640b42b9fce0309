"""Detections of a VOC split without public annotations (VOC 2012 test), written in the official submission format
for the PASCAL evaluation server -- we cannot score them here, so no AP is reported.

    <output_dir>/results/VOC<year>/Main/comp4_det_<split>_<class>.txt     one line per detection:
    <image id> <score> <xmin> <ymin> <xmax> <ymax>                          (1-based VOC pixel coordinates)
"comp4": trained on data other than the VOC training set alone (07++12), as py-faster-rcnn labels its results.
"""

from __future__ import annotations

import logging
import os
from collections import OrderedDict, defaultdict

import torch
from detectron2.data import MetadataCatalog
from detectron2.evaluation import DatasetEvaluator
from detectron2.utils import comm

__all__ = ["VOCSubmissionWriter"]

logger = logging.getLogger(__name__)


class VOCSubmissionWriter(DatasetEvaluator):
    def __init__(self, dataset_name: str, output_dir: str, distributed: bool = True):
        if not output_dir:
            raise ValueError(f"{dataset_name}: writing VOC submission files needs an output directory")
        meta = MetadataCatalog.get(dataset_name)
        self._dataset_name, self._class_names = dataset_name, list(meta.thing_classes)
        self._year, self._split = getattr(meta, "year", 2012), getattr(meta, "split", "test")
        self._output_dir, self._distributed = output_dir, distributed

    def reset(self):
        self._lines = defaultdict(list)  # class name -> lines

    def process(self, inputs, outputs):
        for inp, out in zip(inputs, outputs):
            inst = out["instances"].to("cpu")
            if not torch.isfinite(inst.scores).all():
                raise FloatingPointError(f"{self._dataset_name}: non-finite detection scores on image "
                                         f"{inp['image_id']!r}; refusing to write them")
            for box, score, cls in zip(inst.pred_boxes.tensor.tolist(), inst.scores.tolist(),
                                       inst.pred_classes.tolist()):
                x0, y0, x1, y1 = box  # back to VOC's 1-based inclusive pixels (inverse of the loader)
                self._lines[self._class_names[cls]].append(
                    f"{inp['image_id']} {score:.6f} {x0 + 1:.1f} {y0 + 1:.1f} {x1:.1f} {y1:.1f}")

    def evaluate(self):
        lines = self._lines
        if self._distributed:
            parts = comm.gather(self._lines, dst=0)
            if not comm.is_main_process():
                return None
            lines = defaultdict(list)
            for part in parts:
                for name, rows in part.items():
                    lines[name].extend(rows)
        folder = os.path.join(self._output_dir, "results", f"VOC{self._year}", "Main")
        os.makedirs(folder, exist_ok=True)
        for name in self._class_names:  # every class gets its file, empty or not: the server expects all 20
            with open(os.path.join(folder, f"comp4_det_{self._split}_{name}.txt"), "w") as f:
                f.write("".join(row + "\n" for row in lines.get(name, [])))
        total = sum(len(v) for v in lines.values())
        logger.info(f"{self._dataset_name}: {total} detections written to {folder} for the PASCAL evaluation server "
                    "(no ground truth here: no AP)")
        return OrderedDict(submission={"detections": float(total), "files": float(len(self._class_names))})
