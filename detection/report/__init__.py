"""COCO / VOC mAP reports: finished runs side by side, grouped over seeds, against a baseline, the from-scratch
control, the chance level and -- only where the conditions match -- the paper (Tables 7 and 8).

    write_report(["output/vgg16", "output/r101"], "output/report")  ->  report.md, report.html, report.json,
                                                                          report.csv, and the PNG plots beside them
A run directory is what tools/train_det.py writes: config.yaml, evaluation.json, metrics.json (Detectron2's training
log) and inference/<dataset>/{coco,voc}_eval_bbox.json (+ coco_instances_results.json); runs written before 2026-12-06
(summary in metrics.json, log in training_log.json) are read as well. Everything the report says about a
run is read from those files: how its backbone was initialised (the pretraining run beside MODEL.WEIGHTS), which
settings differ between runs, and which runs are seeds of one configuration.
"""

from __future__ import annotations

from backbones.strict_json import strict_json

from .groups import RunGroup, group_runs
from .paper import PAPER_REFERENCE, paper_reference
from .runs import COCO_COLUMNS, VOC_COLUMNS, PretrainInfo, RunResult, load_run
from .writer import ReportSection, write_report

__all__ = ["write_report", "ReportSection", "strict_json", "load_run", "RunResult", "PretrainInfo", "RunGroup",
           "group_runs", "PAPER_REFERENCE", "paper_reference", "COCO_COLUMNS", "VOC_COLUMNS"]
