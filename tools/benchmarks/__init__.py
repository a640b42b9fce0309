"""The benchmarks behind BENCHMARKS.md (`python tools/benchmark.py`): one module per section, outside the installed
packages. Each times the real builders -- a main-job leg through detection/main_job/leg.py, the detectors through
Detectron2's build_model -- with the statistics of stats.py.

    stats.py      alternating rounds, the median ratio with its bootstrap interval, the machine's description
    backbone.py   backbone       ours vs torchvision (R-50 / R-101 / VGG-16, training and inference)
    detector.py   detector       our R-101-C4 vs Detectron2's built-in one (and the shared detector fixtures)
    main_job.py   main_job       one training step of each main-job leg: mult-adds, fraction of peak, BN folding
    pretrain.py   main_job_pretrain  pretraining images/s, the embedded cache vs --no-embedded-cache
    vs_commit.py  main_job_detect_vs_commit  an earlier commit's own code (tools/detection_leg_worker.py) vs this tree
    cocoeval.py   cocoeval       faster-coco-eval vs pycocotools
    peak.py       peak           matmul GFLOP/s and the backbones' share of it
    inference.py  inference      the fast inference path vs eager, vs torchvision / Detectron2 given the same path
    loader.py     loader         the train loader's images/s vs the R-101-C4 step's consumption
    memory.py     memory         peak RSS of an R-101-C4 training iteration (in a fresh process)
    coco_train_load.py  coco_train_load  train2017-sized COCO json to training dicts vs Detectron2's trainer path
    voc07_eval.py       voc07_eval       VOC2007 test evaluation vs py-faster-rcnn's voc_eval
    coco_val_eval.py    coco_val_eval    val2017-sized COCO evaluation vs faster-coco-eval alone
    folder_scan.py      folder_scan      an ImageNet-sized image folder vs torchvision's ImageFolder
    generated.py  the full-size files those four read (real formats, written once); rss.py: peak memory of a side
    cli.py        SECTIONS, the command line and the Markdown output
"""

from __future__ import annotations

from pathlib import Path

# (first in every section: importing `detection` lets Detectron2 import without its compiled ops)
from detection.project import ProjectFiles, project_files

__all__ = ["checkout", "main"]


def checkout() -> ProjectFiles:
    """The checkout these benchmarks belong to (its configs/, tools/ and output/): project_files() searched from this
    package's directory, so the working directory does not matter ($BACKBONES_PROJECT_ROOT still comes first)."""
    return project_files(Path(__file__).resolve().parent)


def main(argv=None) -> int:
    from .cli import main as run  # on use: `python -m benchmarks.memory` does not import every section

    return run(argv)
