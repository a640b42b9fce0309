"""Detectron2 plugin: `import detection` makes Detectron2 importable without its compiled ops and registers
the project's backbones (ResNet / plain / VGG from `backbones`) in Detectron2's registries.

    cfg = detection.get_detection_cfg("configs/COCO-Detection/faster_rcnn_R_101_C4.yaml", ["MODEL.DEVICE", "cpu"])
    model = detectron2.modeling.build_model(cfg)
    detection.BackbonesCheckpointer(model).load(cfg.MODEL.WEIGHTS)
"""

import warnings

from . import compat

compat.install()  # before any detectron2 submodule import; see detection/compat.py

with warnings.catch_warnings():  # Detectron2 and fvcore call the deprecated torch.jit.script at import (fvcore's
    # focal_loss, Detectron2's box_regression): a FutureWarning about code that is not ours on every `import
    # detection`. Only these imports are quieted; the user's warning filters are left as they were
    warnings.filterwarnings("ignore", message=r"`torch\.jit\.script` is deprecated", category=FutureWarning)
    from . import datasets, evaluation, modeling  # noqa: E402  (registers backbones, heads, datasets)
    from .checkpoint import BackbonesCheckpointer  # noqa: E402
    from .config import add_backbones_config, apply_weights_conventions, get_detection_cfg  # noqa: E402

__all__ = ["compat", "datasets", "evaluation", "modeling", "BackbonesCheckpointer", "add_backbones_config",
           "apply_weights_conventions",
           "get_detection_cfg"]
