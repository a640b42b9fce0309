"""The width multiplier: one rule for scaling a net's channels, shared by every family.

`create_model("resnet101", width=0.25)` keeps depth, block types, strides and stage names and multiplies every
channel count (stem, bottleneck and output channels; VGG's convs and fc6/fc7) by `width`, rounded to the nearest
integer and never below MIN_CHANNELS. Mult-adds then scale by ~width^2, which is what makes reduced-width nets
pretrainable on a CPU. Width 1.0 is the paper's net, unchanged.
"""

from __future__ import annotations

import math

__all__ = ["MIN_CHANNELS", "MAX_WIDTH", "check_width", "scale_channels"]

MIN_CHANNELS = 8  # below this, BN/GN statistics and the 3x3 convs degenerate
# The widest multiplier any entry point accepts (detection's MODEL.BACKBONES.WIDTH, classification's
# --model-option width=, create_model): weights grow with width^2, and ResNet-50 at 16 is already ~6 G parameters;
# width 64 asked for ~180 GB and was allocated until the machine ran out of memory.
MAX_WIDTH = 16


def check_width(width) -> float:
    """`width` as a float, or a ValueError saying what is wrong (a string "0.25" from a command line included)."""
    if isinstance(width, bool) or not isinstance(width, (int, float)):
        raise ValueError(f"width must be a positive number (e.g. 0.25), got {width!r} ({type(width).__name__})")
    if not math.isfinite(width) or width <= 0:
        raise ValueError(f"width must be a positive number (e.g. 0.25), got {width!r}")
    if width > MAX_WIDTH:
        raise ValueError(f"width {width!r} is above the largest multiplier, {MAX_WIDTH} (weights grow with width^2: "
                         f"ResNet-50 at {MAX_WIDTH} has ~6 G parameters)")
    return float(width)


def scale_channels(channels: int, width: float) -> int:
    """`channels` of the width-1.0 net -> channels of the width-`width` net."""
    return channels if width == 1.0 else max(MIN_CHANNELS, int(round(channels * width)))
