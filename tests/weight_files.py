"""Weights files in the formats users hand us, written by tests from a model of ours: MSRA's Caffe2 release
(R-101.pkl's blob names), a Detectron2 model-zoo detector (.pkl of numpy arrays) and torchvision's state dict."""

from __future__ import annotations

import pickle
import re
from pathlib import Path

import numpy as np
import torch

_C2_BN = {"folded": None, "stats": {"weight": "gamma", "bias": "beta", "running_mean": "running_mean",
                                    "running_var": "running_var"}}


def msra_caffe2_blobs(model, bn_style):
    """Our state dict -> MSRA Caffe2 names (res2_0_branch2a_w, res_conv1_bn_s, ...)."""
    sd = {k: v.numpy().copy() for k, v in model.state_dict().items() if "num_batches" not in k}
    blobs = {}
    convs = {k[: -len(".weight")] for k in sd if k.endswith(".weight") and sd[k].ndim == 4}
    for conv in convs:
        if conv == "stem.conv1":
            c2, bn = "conv1", "res_conv1_bn"
        else:
            m = re.fullmatch(r"res(\d)\.(\d+)\.(conv(\d)|shortcut)", conv)
            branch = "branch1" if m[3] == "shortcut" else "branch2" + "abc"[int(m[4]) - 1]
            c2 = bn = f"res{m[1]}_{m[2]}_{branch}"
            bn += "_bn"
        blobs[c2 + "_w"] = sd[conv + ".weight"]
        w, b = sd[conv + ".norm.weight"], sd[conv + ".norm.bias"]
        mean, var = sd[conv + ".norm.running_mean"], sd[conv + ".norm.running_var"]
        if bn_style == "folded":  # MSRA's release: affine only, statistics folded in
            s = w / np.sqrt(var + 1e-5)
            blobs[bn + "_s"], blobs[bn + "_b"] = s, b - mean * s
        else:
            for ours_name, c2_name in _C2_BN["stats"].items():
                blobs[f"{bn}_{c2_name}"] = sd[f"{conv}.norm.{ours_name}"]
        blobs[c2 + "_w_momentum"] = np.zeros_like(sd[conv + ".weight"])  # Detectron1 pickles carry these
    blobs["pred_w"], blobs["pred_b"] = sd["fc.weight"], sd["fc.bias"]
    return blobs


def write_msra_pkl(model, path: Path, bn_style: str = "folded") -> Path:
    """MSRA's Caffe2 release as Detectron1 wrote it ({"blobs": ...}, a Python-2 pickle): BGR 0-255 weights."""
    with open(path, "wb") as f:
        pickle.dump({"blobs": msra_caffe2_blobs(model, bn_style)}, f, protocol=2)
    return Path(path)


def write_detectron2_zoo_pkl(model, path: Path) -> Path:
    """A Detectron2 model-zoo C4 detector (.pkl of numpy arrays, trained from MSRA's BGR weights): the trunk under
    `backbone.`, res5 under `roi_heads.` (Res5ROIHeads), a box predictor the backbone does not have."""
    sd = {k: v.numpy().copy() for k, v in model.state_dict().items() if not k.startswith("fc.")}
    zoo = {("roi_heads." if k.startswith("res5.") else "backbone.") + k: v for k, v in sd.items()}
    zoo["roi_heads.box_predictor.cls_score.weight"] = np.zeros((81, 2048), np.float32)
    with open(path, "wb") as f:
        pickle.dump({"model": zoo, "__author__": "Detectron2 Model Zoo"}, f)
    return Path(path)


def write_torchvision_pth(tv_model, path: Path) -> Path:
    torch.save(tv_model.state_dict(), path)
    return Path(path)
