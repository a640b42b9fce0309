"""Which kernel taps of a net's convolutions see the image at a given input size.

A k x k convolution with zero padding on a map smaller than its kernel reach multiplies some taps by padding only:
those taps get exactly zero gradient from the data and move only by weight decay. At 32 px a ResNet's res5 runs on
a 1x1 map, so 8 of the 9 taps of each of its 3x3 convolutions never train there, although a detector's C4 head
later runs res5 on 7x7 RoIs with every tap. `kernel_taps` finds such taps from the shapes alone (one forward at the
size, hooks on every Conv2d), so a plan can refuse a pretraining size before it runs.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

__all__ = ["ConvTaps", "kernel_taps", "untrained_convs", "smallest_size_training_every_tap"]


@dataclass(frozen=True)
class ConvTaps:
    """One convolution at one input size: which of its kernel taps multiply at least one image position."""

    name: str  # the module's name in the net (e.g. "res5.0.conv2")
    kernel: tuple[int, int]
    input_size: tuple[int, int]  # the map it runs on (H, W)
    used: tuple[tuple[bool, ...], ...]  # [row][column] of the kernel: True where the tap sees the image
    weights_per_tap: int  # out_channels * in_channels / groups

    @property
    def taps(self) -> int:
        return self.kernel[0] * self.kernel[1]

    @property
    def untrained(self) -> int:
        """Taps that only ever multiply padding at this size."""
        return sum(not u for row in self.used for u in row)

    @property
    def untrained_weights(self) -> int:
        return self.untrained * self.weights_per_tap

    @property
    def stage(self) -> str:
        """The top-level module the convolution belongs to (its stage: "res5", "conv5", "stem")."""
        return self.name.split(".")[0]


def _used_offsets(size: int, kernel: int, stride: int, padding: int, dilation: int) -> tuple[bool, ...]:
    """For each kernel offset along one axis: does some output position read a real (non-padding) input there?"""
    out = (size + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1
    return tuple(any(0 <= o * stride - padding + i * dilation < size for o in range(max(out, 0)))
                 for i in range(kernel))


def kernel_taps(model: nn.Module, image_size: int | tuple[int, int]) -> list[ConvTaps]:
    """Every Conv2d of `model` (in forward order) with the taps a `image_size` input reaches; one forward of a blank
    batch in eval mode, the model left as it was. Zero padding is assumed (what every net here uses); a conv with
    another padding mode counts every tap as used."""
    h, w = (image_size, image_size) if isinstance(image_size, int) else image_size
    names = {m: n for n, m in model.named_modules()}
    found: list[ConvTaps] = []

    def hook(conv: nn.Conv2d, inputs, _output) -> None:
        ih, iw = inputs[0].shape[-2:]
        if conv.padding_mode != "zeros" or isinstance(conv.padding, str):
            used = tuple((True,) * conv.kernel_size[1] for _ in range(conv.kernel_size[0]))
        else:
            rows = _used_offsets(ih, conv.kernel_size[0], conv.stride[0], conv.padding[0], conv.dilation[0])
            cols = _used_offsets(iw, conv.kernel_size[1], conv.stride[1], conv.padding[1], conv.dilation[1])
            used = tuple(tuple(r and c for c in cols) for r in rows)
        found.append(ConvTaps(names[conv], tuple(conv.kernel_size), (int(ih), int(iw)), used,
                              conv.out_channels * conv.in_channels // conv.groups))

    handles = [m.register_forward_hook(hook) for m in model.modules() if isinstance(m, nn.Conv2d)]
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            p = next(model.parameters())
            model(torch.zeros(1, 3, h, w, dtype=p.dtype, device=p.device))
    finally:
        model.train(was_training)
        for handle in handles:
            handle.remove()
    return found


def untrained_convs(model: nn.Module, image_size: int | tuple[int, int]) -> list[ConvTaps]:
    """The convolutions with at least one tap that never sees the image at `image_size`."""
    return [c for c in kernel_taps(model, image_size) if c.untrained]


def smallest_size_training_every_tap(model: nn.Module, start: int = 8, stop: int = 256) -> int | None:
    """The smallest square input size in [start, stop] at which every tap of every conv sees the image, or None.
    Sizes at which the net cannot run (a map shrinks to nothing) are skipped."""
    for size in range(start, stop + 1):
        try:
            if not untrained_convs(model, size):
                return size
        except RuntimeError:  # too small for the net's pools
            continue
    return None
