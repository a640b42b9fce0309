"""What the main job's comparison would cost at the paper's scale -- ImageNet pretraining, then Faster R-CNN on
COCO -- estimated from mult-adds (backbones.complexity), for `main_job.py --dry-run`. Nothing is run or timed: the
figure is arithmetic on the paper's schedules and an assumed sustained GPU throughput, and says so.

Counted per training image: the backbone's forward mult-adds x 2 FLOPs x 3 (backward ~ twice the forward).
Pretraining: 224x224 crops, 60e4 iterations of 256 (He et al. Sec. 3.4). Detection: the paper config of the
backbone (SOLVER.MAX_ITER x IMS_PER_BATCH images at 600 x 1000): the trunk on the whole image plus the RoI head
(res5, or VGG's fc6/fc7) on each of ROI_HEADS.BATCH_SIZE_PER_IMAGE RoIs; RPN, box predictor, data loading and
evaluation are left out (a few percent of the mult-adds), so the estimate is a lower bound at that throughput.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["PaperCost", "paper_cost", "detection_gmacs", "gpu_hours", "IMAGENET_ITERATIONS", "IMAGENET_BATCH",
           "DEFAULT_TFLOPS"]

IMAGENET_ITERATIONS = 600_000  # "up to 60e4 iterations" (Sec. 3.4)
IMAGENET_BATCH = 256
DETECTION_IMAGE = (600, 1000)  # shorter side 600, longer side at most 1000
DEFAULT_TFLOPS = 40.0  # assumed sustained TFLOP/s per GPU for these convolutions (mixed precision, a recent
#                        data-centre GPU); a guess stated beside every figure, never a measurement


@dataclass(frozen=True)
class PaperCost:
    backbone: str
    pretrain_gmacs: float  # per 224x224 image, forward
    detect_gmacs: float  # per 600x1000 training image: trunk + RoI head on its RoIs, forward
    pretrain_images: int
    detect_images: int
    tflops: float

    def _gpu_hours(self, gmacs: float, images: int) -> float:
        return gpu_hours(gmacs, images, self.tflops)

    @property
    def pretrain_gpu_hours(self) -> float:
        return self._gpu_hours(self.pretrain_gmacs, self.pretrain_images)

    @property
    def detect_gpu_hours(self) -> float:
        return self._gpu_hours(self.detect_gmacs, self.detect_images)


def paper_cost(backbone: str, config_file: str, tflops: float = DEFAULT_TFLOPS) -> PaperCost:
    """The estimate for one backbone whose paper detection config is `config_file` (at full width)."""
    from backbones import complexity, create_model

    from ..config import get_detection_cfg

    if not tflops > 0:
        raise ValueError(f"tflops must be positive, got {tflops!r}")
    cfg = get_detection_cfg(config_file, ["MODEL.BACKBONES.NAME", backbone], read_weights=False)
    with torch.device("meta"):  # shapes are all the count needs: no full-size weights allocated or initialised
        at_224 = complexity(create_model(backbone, num_classes=1000), (3, 224, 224))
    return PaperCost(backbone, at_224.gmacs, detection_gmacs(backbone, cfg.MODEL.ROI_HEADS.BATCH_SIZE_PER_IMAGE),
                     IMAGENET_ITERATIONS * IMAGENET_BATCH, cfg.SOLVER.MAX_ITER * cfg.SOLVER.IMS_PER_BATCH, tflops)


def detection_gmacs(backbone: str, rois: int, image: tuple[int, int] = DETECTION_IMAGE, width: float = 1.0) -> float:
    """Forward GMACs of a Faster R-CNN training image of `image` (h, w): the trunk on the image plus the RoI head on
    each of `rois` RoIs (the data scale's estimate uses its own size and width)."""
    from backbones import complexity, create_model, model_info

    with torch.device("meta"):
        model = create_model(backbone, num_classes=1000, width=width)
    at_224 = complexity(model, (3, 224, 224))
    full = complexity(model, (3, *image))
    if model_info(backbone).detection_design == "vgg_fc":  # conv1-conv5 on the image; fc6/fc7 on each 7x7 RoI
        #                                                     (= their cost at 224)
        head = {"fc6", "fc7"}
    else:  # C4: stem-res4 on the image; res5 on each 14x14 RoI (= res5's cost at 224, where res4 is 14x14)
        head = {"res5"}
    trunk = sum(v for k, v in full.by_module.items() if k not in head and k != "fc")
    per_roi = sum(v for k, v in at_224.by_module.items() if k in head)
    return (trunk + rois * per_roi) / 1e9


def gpu_hours(gmacs: float, images: int, tflops: float = DEFAULT_TFLOPS) -> float:
    """GPU-hours of training `images` images of `gmacs` forward GMACs each (forward + backward = 3 forwards)."""
    return gmacs * 1e9 * 2 * 3 * images / (tflops * 1e12) / 3600
