"""The one stage builder, and the stage container every net is made of."""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Sequence

from torch import nn

from .blocks import CNNBlockBase
from .norm import freeze_

__all__ = ["Stage", "make_stage"]


class Stage(nn.Sequential):
    """A sequence of blocks; knows its in/out channels and total stride, and can freeze itself.

    Subclassing nn.Sequential keeps parameter names `<stage>.<index>.<...>` (Detectron2's `res2.0.conv1`).
    """

    def __init__(self, blocks: Sequence[nn.Module] | OrderedDict[str, nn.Module], *, in_channels: int,
                 out_channels: int, stride: int):
        if isinstance(blocks, OrderedDict):
            super().__init__(blocks)  # named layers (VGG: pool4, conv5_1, relu5_1, ...)
        else:
            super().__init__(*blocks)
        self.in_channels, self.out_channels, self.stride = in_channels, out_channels, stride

    def freeze(self) -> Stage:
        freeze_(self)
        return self


def make_stage(block_class: type[CNNBlockBase], num_blocks: int, *, in_channels: int, out_channels: int,
               **kwargs) -> Stage:
    """Build `num_blocks` blocks of `block_class`; the first takes `in_channels`, the rest `out_channels`.

    A keyword ending in `_per_block` is a list with one value per block (e.g. `stride_per_block=[2, 1, 1]`),
    passed to each block without the suffix; every other keyword goes to all blocks unchanged.
    """
    per_block = {k[: -len("_per_block")]: v for k, v in kwargs.items() if k.endswith("_per_block")}
    shared = {k: v for k, v in kwargs.items() if not k.endswith("_per_block")}
    for key, values in per_block.items():
        if len(values) != num_blocks:
            raise ValueError(f"{key}_per_block has {len(values)} values for a stage of {num_blocks} blocks")
    blocks, stage_in = [], in_channels
    for i in range(num_blocks):
        block = block_class(in_channels=in_channels, out_channels=out_channels, **shared,
                            **{k: v[i] for k, v in per_block.items()})
        blocks.append(block)
        in_channels = out_channels
    stride = math.prod(getattr(b, "stride", 1) for b in blocks)
    return Stage(blocks, in_channels=stage_in, out_channels=out_channels, stride=stride)
