"""Section `backbone`: our R-50 / R-101 / VGG-16 against torchvision's, the same weights, training and inference,
like for like: both in NCHW (how a user calls either: `model(x)`, x NCHW), both in channels_last (model and input
converted, each in its best layout on CPU). What a layout brings is a row of its own, on our model alone (setting on
vs off); a row never compares our channels_last with torchvision's NCHW (it did, and the table called a layout a
faster implementation)."""

from __future__ import annotations

import gc

import torch

from . import checkout
from .stats import compare

__all__ = ["bench_backbone"]


def _bench_one(name: str, opts: dict, repeats: int) -> dict:
    import torchvision

    import backbones

    x = torch.randn(8, 3, 224, 224)
    torch.manual_seed(0)
    ours, tv = backbones.create_model(name, **opts), getattr(torchvision.models, name)(weights=None)
    tv_path = checkout().root / "output" / "benchmark" / f"{name}_tv.pth"
    tv_path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(tv.state_dict(), tv_path)
    backbones.load_pretrained(ours, tv_path)

    def train_step(m, inp=x):
        m.zero_grad(set_to_none=True)
        m(inp).sum().backward()

    ours.train()
    tv.train()
    x_cl = x.contiguous(memory_format=torch.channels_last)
    ours_cl = backbones.create_model(name, **opts)
    ours_cl.load_state_dict(ours.state_dict())
    ours_cl = ours_cl.to(memory_format=torch.channels_last).train()
    tv_cl = getattr(torchvision.models, name)(weights=None)
    tv_cl.load_state_dict(tv.state_dict())
    tv_cl = tv_cl.to(memory_format=torch.channels_last).train()
    row = {"train": compare(lambda: train_step(ours), lambda: train_step(tv), repeats, names=("ours", "torchvision")),
           "train_channels_last": compare(lambda: train_step(ours_cl, x_cl), lambda: train_step(tv_cl, x_cl),
                                          repeats, names=("ours", "torchvision")),
           # a setting, on our model alone: channels_last on vs off (ClsConfig.channels_last)
           "train_setting_channels_last": compare(lambda: train_step(ours_cl, x_cl), lambda: train_step(ours),
                                                  repeats, names=("channels_last", "nchw"))}
    # the training rounds moved each model's BN running statistics by a different number of steps: restore the
    # saved state so that the inference rows compare equal models
    tv.load_state_dict(torch.load(tv_path, weights_only=True))
    tv_cl.load_state_dict(tv.state_dict())
    backbones.load_pretrained(ours, tv_path)
    ours_cl.load_state_dict(ours.state_dict())
    for m in (ours, tv, ours_cl, tv_cl):
        m.eval()
    with torch.inference_mode():
        ref = tv(x)  # every variant must stay correct before it is timed
        # float tolerance relative to the output's scale: a randomly initialised net in eval mode (unit running
        # statistics) amplifies the summation-order differences of folding and layouts with its depth
        tol = 1e-3 * float(ref.abs().max())
        for model, inp in ((ours, x), (ours_cl, x_cl), (tv_cl, x_cl)):
            torch.testing.assert_close(model(inp), ref, atol=tol, rtol=1e-3)
        row["infer"] = compare(lambda: ours(x), lambda: tv(x), repeats, names=("ours", "torchvision"))
        row["infer_channels_last"] = compare(lambda: ours_cl(x_cl), lambda: tv_cl(x_cl), repeats,
                                             names=("ours", "torchvision"))
        row["infer_setting_channels_last"] = compare(lambda: ours_cl(x_cl), lambda: ours(x), repeats,
                                                     names=("channels_last", "nchw"))
    return row


def bench_backbone(repeats: int) -> dict:
    out = {"conditions": "batch 8 at 224x224, fp32; ours: BN folded into the convs in eval mode"}
    for name, opts in (("resnet50", {"stride_in_1x1": False}), ("resnet101", {"stride_in_1x1": False}),
                       ("vgg16", {})):
        out[name] = _bench_one(name, opts, repeats)
        gc.collect()
    return out
