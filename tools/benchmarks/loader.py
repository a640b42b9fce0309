"""Section `loader`: images/s the detection train loader delivers (mapper + augmentation, 2 workers, shorter side
600) against images/s the paper's R-101-C4 training step consumes."""

from __future__ import annotations

from detection.main_job.leg import calibrate_frozen_bn, seconds_per_step

from . import checkout
from .detector import detector_cfgs, detector_inputs, sgd, train_step

__all__ = ["bench_loader"]


def _loader_images_per_s() -> float:
    """The embedded set through the R-101-C4 config's train loader at shorter side 600, 2 images a batch (its
    worker processes end with the iterator, on return)."""
    from detection import get_detection_cfg
    from detection.datasets import ensure_embedded_dataset
    from detection.engine.data import build_train_loader

    ensure_embedded_dataset()
    files = checkout()
    cfg = get_detection_cfg([str(files.config("COCO-Detection", "faster_rcnn_R_101_C4.yaml")),
                             str(files.config("Embedded-Detection", "smoke.yaml"))],
                            ["MODEL.DEVICE", "cpu", "DATALOADER.NUM_WORKERS", "2", "SOLVER.IMS_PER_BATCH", "2",
                             "INPUT.MIN_SIZE_TRAIN", "(600,)", "INPUT.MAX_SIZE_TRAIN", "1000"])
    batches = iter(build_train_loader(cfg))
    return 2 / seconds_per_step(lambda: next(batches), warmup=1, repeats=20)


def bench_loader(repeats: int) -> dict:
    from detectron2.modeling import build_model

    loader_rate = _loader_images_per_s()
    paper_cfg, _ = detector_cfgs()  # the consumer: the paper's R-101-C4 step on 2 images at shorter side 600
    model = calibrate_frozen_bn(build_model(paper_cfg)).train()
    batch = detector_inputs() * 2
    opt = sgd(model)
    t = seconds_per_step(lambda: train_step(model, opt, batch), warmup=1, repeats=max(2, repeats // 3))
    return {"loader_img_s": loader_rate, "train_step_img_s": 2 / t, "ratio": loader_rate * t / 2}
