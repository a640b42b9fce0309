"""The config files of a main-job detection leg: the paper config of the backbone's detection design (for the data's
format), the smoke overlay at embedded scale, the arm's overlay -- and what the paper configs' solver says (the one
definition: the job, its estimates, the benchmarks)."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

from backbones import model_info

from ..project import project_files
from .arms import ARMS
from .data import EMBEDDED, VOC

__all__ = ["DESIGN_CONFIGS", "PAPER_DATA_FOLDERS", "PAPER_IMAGES_PER_GPU", "paper_config", "leg_config_files",
           "paper_solver", "PaperSettings", "paper_settings"]

# The paper's Faster R-CNN config of each detection design (backbones.ModelInfo.detection_design), on COCO; a
# VOC job reads the file of the same name in PAPER_DATA_FOLDERS[VOC] (Table 7's settings).
DESIGN_CONFIGS = {"vgg_fc": ("COCO-Detection", "faster_rcnn_vgg16.yaml"),
                  "C4": ("COCO-Detection", "faster_rcnn_R_101_C4.yaml")}
PAPER_DATA_FOLDERS = {VOC: "PascalVOC-Detection"}  # else COCO-Detection
PAPER_IMAGES_PER_GPU = 2  # the paper configs' IMS_PER_BATCH 16 is 8 GPUs x 2 images: their reference world size


def paper_config(model: str, data_format: str = EMBEDDED) -> Path:
    """The paper config of the backbone's detection design: COCO-Detection/*.yaml, or its PascalVOC-Detection
    namesake for VOC data."""
    folder, name = DESIGN_CONFIGS[model_info(model).detection_design]
    return project_files().config(PAPER_DATA_FOLDERS.get(data_format, folder), name)


def leg_config_files(model: str, *, arm: str, scale: str = "embedded", data_format: str = EMBEDDED) -> list[str]:
    """The config files of a main-job detection leg: the paper config of the backbone's design (for the data's
    format), the smoke overlay at embedded scale, and the arm's overlay (norm and frozen stages; the one
    definition: the job, its estimates, the benchmarks)."""
    files = project_files()
    smoke = [str(files.config("Embedded-Detection", "smoke.yaml"))] if scale == "embedded" else []  # data, paper:
    #                                                                  the paper config's detector as it is
    return [str(paper_config(model, data_format)), *smoke, str(files.config("Embedded-Detection", ARMS[arm].overlay))]


@functools.lru_cache(maxsize=32)
def paper_solver(configs: tuple[str, ...]) -> tuple[int, tuple[int, ...], int]:
    """(MAX_ITER, STEPS, IMS_PER_BATCH) the config files resolve to."""
    from ..config import get_detection_cfg

    solver = get_detection_cfg(list(configs), [], read_weights=False).SOLVER
    return solver.MAX_ITER, tuple(solver.STEPS), solver.IMS_PER_BATCH


@dataclass(frozen=True)
class PaperSettings:
    """What the data scale keeps, rescales or replaces of config files: their input size and solver."""

    min_size: int  # INPUT.MIN_SIZE_TEST (the training size is the same in the paper configs)
    max_size: int  # INPUT.MAX_SIZE_TEST
    max_iter: int
    steps: tuple[int, ...]
    batch: int  # SOLVER.IMS_PER_BATCH
    lr: float  # SOLVER.BASE_LR
    warmup: int  # SOLVER.WARMUP_ITERS


@functools.lru_cache(maxsize=32)
def paper_settings(configs: tuple[str, ...]) -> PaperSettings:
    from ..config import get_detection_cfg

    cfg = get_detection_cfg(list(configs), [], read_weights=False)
    s = cfg.SOLVER
    return PaperSettings(cfg.INPUT.MIN_SIZE_TEST, cfg.INPUT.MAX_SIZE_TEST, s.MAX_ITER, tuple(s.STEPS),
                         s.IMS_PER_BATCH, s.BASE_LR, s.WARMUP_ITERS)
