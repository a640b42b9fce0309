"""The plugin's config keys: add_backbones_config adds them all, one comment per key (where each is read:
ARCHITECTURE.md). Its own module so that the modules which resolve a config (detection.config,
detection.detectron2_keys) and the builders can all ask for the plugin's defaults without importing each other."""

from __future__ import annotations

from detectron2.config import CfgNode as CN

__all__ = ["add_backbones_config"]


def add_backbones_config(cfg: CN) -> CN:
    """Add MODEL.BACKBONES.* (the `backbones` model a registered builder creates) and the plugin's other keys."""
    if "BACKBONES" in cfg.MODEL:
        return cfg
    b = cfg.MODEL.BACKBONES = CN()
    b.NAME = "resnet101"  # any backbones.list_models() name: resnet*, plain*, vgg16, vgg16_bn, ...
    b.WIDTH = 1.0  # channel multiplier (backbones.width); must equal the width MODEL.WEIGHTS was trained at
    b.SHORTCUT = ""  # "" = the family default (B for ImageNet nets); "A"/"B"/"C" = paper Table 3
    b.STRIDE_IN_1X1 = True  # MSRA release / paper FLOPs; False for torchvision/timm ("v1.5") weights
    b.PREACT = False  # pre-activation units (Identity Mappings paper)
    b.NORM = "FrozenBN"  # paper: BN frozen at ImageNet statistics; "BN"/"GN"/"SyncBN" when training the norm
    # GroupNorm's groups (NORM "GN"; Wu & He's 32, fewer where a layer has fewer channels); GN weights load only
    # into a net of their groups (the same shapes at any groups: the checkpoint's arch records them)
    b.GN_GROUPS = 32
    # Zero the last norm of each residual branch at initialisation (Goyal et al.): the main job's pretraining does
    # for residual nets, and its from-scratch legs do alike; pretrained weights replace it (a residual net only)
    b.ZERO_INIT_RESIDUAL = False
    b.FREEZE_AT = 2  # stem + res2 (Detectron2 default); VGG: conv1 + conv2 (py-faster-rcnn)
    b.OUT_FEATURES = ["res4"]  # C4: res4 (stride 16); FPN: res2..res5; VGG: conv5 (conv5_3, stride 16)
    b.FC_DROPOUT = 0.5  # VGG RoI head: dropout after fc6 and fc7 (drop6/drop7 of the py-faster-rcnn prototxt)
    b.CHANNELS_LAST = True  # trunk, per-RoI head and RPN head in channels_last (NHWC): 1.08-1.12x per iteration (CPU)
    b.STRICT_LOAD = True  # MODEL.WEIGHTS must fit the backbone exactly (the classifier is always dropped)
    # Take INPUT.FORMAT, MODEL.PIXEL_MEAN/STD and STRIDE_IN_1X1 from the metadata of MODEL.WEIGHTS when it has any
    # (torchvision/timm: RGB + ImageNet mean/std; MSRA: BGR + mean, std 1; ours: what the pretraining used).
    b.CONVENTIONS_FROM_WEIGHTS = True
    # py-faster-rcnn's USE_DIFF False: VOC objects marked difficult are dropped from the training targets (they
    # stay in the ground truth of evaluation, where VOC AP ignores them).
    cfg.DATALOADER.VOC_TRAIN_DIFFICULT = False
    # With MODEL.PROPOSAL_GENERATOR.NAME "BackbonesRPN": label RPN anchors as py-faster-rcnn does (match ground
    # truth among the anchors inside the image only); False = Detectron2's rule (match all, then ignore outside).
    cfg.MODEL.RPN.MATCH_INSIDE_ONLY = False
    cfg.EVAL = CN()
    cfg.EVAL.COCO_BACKEND = "faster_coco_eval"  # or "pycocotools" (official, ~8x slower, same numbers)
    # COCO-style AP of a dataset without a COCO json (VOC): "ignore" difficult objects (crowd regions, VOC-style) or
    # count them as "ground_truth" (Detectron2's converter); evaluation.json records which, beside the numbers
    cfg.EVAL.VOC_DIFFICULT_IN_COCO_AP = "ignore"
    # Evaluate a frozen copy through modeling/inference.optimize_detector_for_inference (norms folded, channels_last,
    # torch.compile with Inductor freezing): same detections within float tolerance, compile time paid per
    # evaluation (seconds to a minute), so worth it on a whole COCO/VOC test set, not on a small validation split
    cfg.EVAL.FAST_INFERENCE = False
    return cfg
