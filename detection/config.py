"""The plugin's config keys (one function adds them all) and config loading for the tools."""

from __future__ import annotations

import logging
import os

from detectron2.config import CfgNode as CN
from detectron2.config import get_cfg

__all__ = ["add_backbones_config", "get_detection_cfg", "apply_weights_conventions"]

logger = logging.getLogger(__name__)


def add_backbones_config(cfg: CN) -> CN:
    """Add MODEL.BACKBONES.* (the `backbones` model a registered builder creates) and the plugin's other keys."""
    if "BACKBONES" in cfg.MODEL:
        return cfg
    b = cfg.MODEL.BACKBONES = CN()
    b.NAME = "resnet101"  # any backbones.list_models() name: resnet*, plain*, vgg16, vgg16_bn, ...
    b.SHORTCUT = ""  # "" = the family default (B for ImageNet nets); "A"/"B"/"C" = paper Table 3
    b.STRIDE_IN_1X1 = True  # MSRA release / paper FLOPs; False for torchvision/timm ("v1.5") weights
    b.PREACT = False  # pre-activation units (Identity Mappings paper)
    b.NORM = "FrozenBN"  # paper: BN frozen at ImageNet statistics; "BN"/"GN"/"SyncBN" when training the norm
    b.FREEZE_AT = 2  # stem + res2 (Detectron2 default); VGG: conv1 + conv2 (py-faster-rcnn)
    b.OUT_FEATURES = ["res4"]  # C4: res4 (stride 16); FPN: res2..res5; VGG: conv5 (conv5_3, stride 16)
    b.FC_DROPOUT = 0.5  # VGG RoI head: dropout after fc6 and fc7 (drop6/drop7 of the py-faster-rcnn prototxt)
    b.STRICT_LOAD = True  # MODEL.WEIGHTS must fit the backbone exactly (the classifier is always dropped)
    # Take INPUT.FORMAT, MODEL.PIXEL_MEAN/STD and STRIDE_IN_1X1 from the metadata of MODEL.WEIGHTS when it has any
    # (torchvision/timm: RGB + ImageNet mean/std; MSRA: BGR + mean, std 1; ours: what the pretraining used).
    b.CONVENTIONS_FROM_WEIGHTS = True
    cfg.EVAL = CN()
    cfg.EVAL.COCO_BACKEND = "faster_coco_eval"  # or "pycocotools" (official, ~8x slower, same numbers)
    cfg.EVAL.VOC_METRICS = ["voc07_11point", "area"]  # both VOC AP integrations are reported
    return cfg


def apply_weights_conventions(cfg: CN) -> dict:
    """Set input format, pixel statistics and stride placement from MODEL.WEIGHTS' metadata (if it has any).

    Returns what changed (key -> (old, new)), which is also logged. A detector checkpoint (resume, evaluation)
    carries no backbone metadata and leaves the config as it is.
    """
    changes: dict = {}
    if not (cfg.MODEL.BACKBONES.CONVENTIONS_FROM_WEIGHTS and cfg.MODEL.WEIGHTS):
        return changes
    from detectron2.utils.file_io import PathManager

    from .checkpoint import read_backbone_weights

    path = PathManager.get_local_path(cfg.MODEL.WEIGHTS)  # downloads detectron2:// and https:// URLs once
    if not os.path.isfile(path):
        raise FileNotFoundError(f"MODEL.WEIGHTS: no such file {cfg.MODEL.WEIGHTS!r}")
    weights = read_backbone_weights(path)
    if weights is None:  # a full detector checkpoint: its config already matches
        return changes
    meta = weights.meta

    def put(key: str, node: CN, attr: str, value) -> None:
        old = getattr(node, attr)
        if value is not None and type(old)(value) != old:
            setattr(node, attr, type(old)(value))
            changes[key] = (old, getattr(node, attr))

    put("INPUT.FORMAT", cfg.INPUT, "FORMAT", meta.input_format)
    put("MODEL.PIXEL_MEAN", cfg.MODEL, "PIXEL_MEAN", list(meta.pixel_mean) if meta.pixel_mean else None)
    put("MODEL.PIXEL_STD", cfg.MODEL, "PIXEL_STD", list(meta.pixel_std) if meta.pixel_std else None)
    if cfg.MODEL.BACKBONES.NAME.startswith(("resnet", "plain")):
        put("MODEL.BACKBONES.STRIDE_IN_1X1", cfg.MODEL.BACKBONES, "STRIDE_IN_1X1", meta.stride_in_1x1)
    for key, (old, new) in changes.items():
        logger.info(f"{key}: {old} -> {new} (from the metadata of {path}, format {weights.source_format})")
    return changes


def get_detection_cfg(config_files: str | list[str] | None = None, opts: list[str] | None = None, *,
                      freeze: bool = True) -> CN:
    """Detectron2 defaults + our keys, then each YAML in order (each may have a `_BASE_`; later files overlay
    earlier ones), then KEY VALUE overrides, then the weights' conventions. An unknown key raises an error naming
    the key and the file."""
    cfg = add_backbones_config(get_cfg())
    for path in [config_files] if isinstance(config_files, str) else (config_files or []):
        if not os.path.isfile(path):
            raise FileNotFoundError(f"config file not found: {path}")
        try:
            cfg.merge_from_file(path)
        except KeyError as err:
            raise KeyError(f"{path}: {err.args[0] if err.args else err}") from None
    if opts:
        try:
            cfg.merge_from_list(list(opts))
        except (KeyError, AssertionError) as err:
            raise KeyError(f"command-line override: {err.args[0] if err.args else err}") from None
    apply_weights_conventions(cfg)
    if freeze:
        cfg.freeze()
    return cfg
