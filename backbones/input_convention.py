"""The input convention of the torch ecosystem (torchvision, timm, torch.hub): RGB images in [0, 1], normalised per
channel as (x - mean) / std. Weights trained otherwise -- MSRA's Caffe2 release and Detectron2's model zoo take BGR
pixels in 0-255 minus a mean -- are adapted to it when loaded, exactly and without retraining:

    norm = to_rgb_unit_input("resnet101", model, report.meta)   # model: weights loaded as the file has them
    y = model((rgb01 - mean) / std)   # with mean, std = norm.mean, norm.std: what the BGR net computed on BGR 0-255

The first convolution's input channels are reversed (BGR -> RGB), and the file's 0-255 mean / std become [0, 1]
units in RGB order ((255 x - m) / s = (x - m / 255) / (s / 255)).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch
from torch import nn

from .pretrained import create_model_with_weights, weights_file_argument
from .registry import model_info
from .weight_formats import TORCHVISION_MEAN, TORCHVISION_STD, WeightsMeta

__all__ = ["InputNormalization", "TORCHVISION_INPUT", "to_rgb_unit_input", "create_model_for_rgb_unit_input"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class InputNormalization:
    """What a net expects of an RGB image in [0, 1]: (x - mean) / std per channel (torchvision's transform, timm's
    pretrained_cfg mean / std); `source` says where the statistics come from."""

    mean: tuple[float, ...]
    std: tuple[float, ...]
    source: str = "the weights file"


TORCHVISION_INPUT = InputNormalization(tuple(m / 255 for m in TORCHVISION_MEAN),
                                       tuple(s / 255 for s in TORCHVISION_STD), "torchvision's (no weights)")


def to_rgb_unit_input(name: str, model: nn.Module, meta: WeightsMeta) -> InputNormalization:
    """Make `model` (the registered `name`, weights described by `meta` loaded) take RGB [0, 1] input, and return the
    normalisation it needs; also recorded as `model.input_normalization`. RGB weights are left as they are. A file
    that does not say its channel order (a Detectron2 checkpoint without metadata) is taken as RGB with
    torchvision's statistics, logged, and so recorded in `source`; BGR weights without their statistics are refused
    (reversing torchvision's RGB defaults would swap R and B)."""
    if meta.input_format not in ("RGB", "BGR", None):
        raise ValueError(f"weights with input_format {meta.input_format!r}: expected RGB or BGR")
    if meta.input_format is None or not (meta.pixel_mean and meta.pixel_std):
        if meta.input_format == "BGR":
            raise ValueError(f"{name}: BGR weights ({meta.source_format}) that do not state their pixel mean / std: "
                             "nothing to normalise RGB input with")
        source = "torchvision's, assumed: the file does not state its channel order or statistics"
        logger.warning("%s weights (%s): %s", name, meta.source_format, source)
        norm = InputNormalization(TORCHVISION_INPUT.mean, TORCHVISION_INPUT.std, source)
    else:
        mean, std = tuple(meta.pixel_mean), tuple(meta.pixel_std)
        if meta.input_format == "BGR":
            conv = model.get_submodule(model_info(name).first_conv)
            if conv.weight.shape[1] != 3:
                raise ValueError(f"{name}: BGR weights on a first conv of {conv.weight.shape[1]} input channels; "
                                 "only 3 (BGR -> RGB) can be reversed")
            with torch.no_grad():
                conv.weight.copy_(conv.weight.flip(1))  # input channel 0 now reads R, as channel 2 did in BGR
            mean, std = mean[::-1], std[::-1]
        norm = InputNormalization(tuple(m / 255 for m in mean), tuple(s / 255 for s in std),
                                  f"the weights file ({meta.source_format}, {meta.input_format}"
                                  f"{' converted to RGB' if meta.input_format == 'BGR' else ''})")
    model.input_normalization = norm
    return norm


def create_model_for_rgb_unit_input(name: str, weights, *, argument: str = "weights", num_classes: int | None = None,
                                    **options) -> tuple[nn.Module, InputNormalization]:
    """The registered `name` with the weights file `weights` (create_model_with_weights: strict, its stride placement,
    its classifier unless num_classes says otherwise), made to take RGB [0, 1] input: what torch.hub, timm and
    torchvision's detector build from a file. `argument` is the caller's name for `weights` in error messages."""
    path = weights_file_argument(name, weights, argument=argument)
    model, report = create_model_with_weights(name, path, num_classes=num_classes, **options)
    return model, to_rgb_unit_input(name, model, report.meta)
