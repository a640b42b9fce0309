"""Section `detector`: our R-101-C4 against Detectron2's built-in R-101-C4 with our settings and the same weights
(training and inference, shorter side 600); and the detector fixtures the loader and memory sections and
tools/device_check.py share (the two configs, the pair of equal models, a fixed batch, one plain training step)."""

from __future__ import annotations

import torch

from detection.main_job.leg import calibrate_frozen_bn

from . import checkout
from .stats import compare

__all__ = ["detector_cfgs", "build_detector_pair", "detector_inputs", "sgd", "train_step", "bench_detector"]


def detector_cfgs():
    """(ours, Detectron2's): our paper R-101-C4 config and Detectron2's zoo R-101-C4 given our settings, on the CPU
    without weights."""
    from detectron2.config import get_cfg

    from detection import get_detection_cfg
    from detection.compat import detectron2_config_file

    ours = get_detection_cfg(str(checkout().config("COCO-Detection", "faster_rcnn_R_101_C4.yaml")),
                             ["MODEL.WEIGHTS", "", "MODEL.DEVICE", "cpu"])
    d2 = get_cfg()
    d2.merge_from_file(detectron2_config_file("COCO-Detection/faster_rcnn_R_101_C4_3x.yaml"))
    d2.MODEL.WEIGHTS, d2.MODEL.DEVICE = "", "cpu"
    # Detectron2's detector with ours's settings (they differ from its zoo config; the network is the same)
    d2.MODEL.ANCHOR_GENERATOR.SIZES = [list(ours.MODEL.ANCHOR_GENERATOR.SIZES[0])]
    d2.MODEL.ROI_BOX_HEAD.POOLER_TYPE = ours.MODEL.ROI_BOX_HEAD.POOLER_TYPE
    d2.MODEL.ROI_HEADS.BATCH_SIZE_PER_IMAGE = ours.MODEL.ROI_HEADS.BATCH_SIZE_PER_IMAGE
    for k in ("PRE_NMS_TOPK_TRAIN", "POST_NMS_TOPK_TRAIN", "PRE_NMS_TOPK_TEST", "POST_NMS_TOPK_TEST",
              "BOUNDARY_THRESH", "SMOOTH_L1_BETA"):
        setattr(d2.MODEL.RPN, k, getattr(ours.MODEL.RPN, k))
    d2.MODEL.PROPOSAL_GENERATOR.MIN_SIZE = ours.MODEL.PROPOSAL_GENERATOR.MIN_SIZE
    d2.MODEL.ROI_HEADS.NMS_THRESH_TEST = ours.MODEL.ROI_HEADS.NMS_THRESH_TEST
    d2.MODEL.ROI_BOX_HEAD.SMOOTH_L1_BETA = ours.MODEL.ROI_BOX_HEAD.SMOOTH_L1_BETA
    return ours, d2


def build_detector_pair(ours_cfg, d2_cfg):
    """(ours, Detectron2's) built from the two configs with the same weights: ours initialised and given
    pretrained-like FrozenBN scales (calibrate_frozen_bn), Detectron2's loaded from its state dict (the same names)."""
    from detectron2.modeling import build_model

    torch.manual_seed(0)
    ours = calibrate_frozen_bn(build_model(ours_cfg))
    d2 = build_model(d2_cfg)
    d2.load_state_dict(ours.state_dict())
    return ours, d2


def detector_inputs(h=600, w=800):
    """One fixed training image of h x w with two boxes (Detectron2's input format)."""
    from detectron2.structures import Boxes, Instances

    g = torch.Generator().manual_seed(0)
    img = (torch.rand(3, h, w, generator=g) * 255)
    inst = Instances((h, w), gt_boxes=Boxes(torch.tensor([[50.0, 60.0, 300.0, 400.0], [400, 100, 700, 500]]) *
                                           torch.tensor([w / 800, h / 600, w / 800, h / 600])),
                     gt_classes=torch.tensor([1, 3]))
    return [{"image": img, "instances": inst, "height": h, "width": w}]


def sgd(model) -> torch.optim.Optimizer:
    """The same plain SGD for both detectors of a comparison (neither side's training recipe)."""
    return torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=1e-4)


def train_step(model, opt, batch):
    """Forward, backward, optimizer step on a fixed batch (a detector that is not a main-job leg)."""
    from detectron2.utils.events import EventStorage

    with EventStorage(0):
        loss = sum(model(batch).values())
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss


def bench_detector(repeats: int) -> dict:
    from detectron2.modeling import build_model

    ours_cfg, d2_cfg = detector_cfgs()
    ours, d2 = build_detector_pair(ours_cfg, d2_cfg)
    models = {"ours": ours, "detectron2": d2}
    batch = detector_inputs()
    opts = {k: sgd(m) for k, m in models.items()}
    for m in models.values():
        m.train()
    assert ours_cfg.MODEL.BACKBONES.CHANNELS_LAST, "the 'ours' rows measure the default configuration"
    res = {"conditions": "R-101-C4, 1 image 600x800, 128 RoIs, FrozenBN, FREEZE_AT 2, fp32; ours: the config's "
                         "defaults (FrozenBN folded into the convs, MODEL.BACKBONES.CHANNELS_LAST True)",
           "train": compare(lambda: train_step(models["ours"], opts["ours"], batch),
                            lambda: train_step(models["detectron2"], opts["detectron2"], batch), repeats,
                            names=("ours", "detectron2"))}
    # ours in NCHW (MODEL.BACKBONES.CHANNELS_LAST False): what the layout alone contributes
    nchw_cfg = ours_cfg.clone()
    nchw_cfg.defrost()
    nchw_cfg.MODEL.BACKBONES.CHANNELS_LAST = False
    models["ours_nchw"] = build_model(nchw_cfg).train()
    models["ours_nchw"].load_state_dict(models["detectron2"].state_dict())
    opts["ours_nchw"] = sgd(models["ours_nchw"])
    res["train_channels_last_vs_nchw"] = compare(
        lambda: train_step(models["ours"], opts["ours"], batch),
        lambda: train_step(models["ours_nchw"], opts["ours_nchw"], batch), repeats, names=("channels_last", "nchw"))
    infer = [{k: v for k, v in batch[0].items() if k != "instances"}]
    for m in models.values():
        m.eval()
    with torch.inference_mode():
        res["infer"] = compare(lambda: models["ours"](infer), lambda: models["detectron2"](infer), repeats,
                               names=("ours", "detectron2"))
        res["infer_nchw_vs_detectron2"] = compare(
            lambda: models["ours_nchw"](infer), lambda: models["detectron2"](infer), repeats,
            names=("ours_nchw", "detectron2"))
    return res
