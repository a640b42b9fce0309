"""Model names -> constructors and their metadata: `create_model`, `list_models`, `model_info`.

Each registered name carries a `ModelInfo` (as timm attaches a pretrained cfg at `register_model`): its family,
depth, whether it is residual and normalised, and the training conventions that go with the family (the reference
learning rate of its paper, whether blocks start as the identity). Callers ask the registry, never a name's prefix.
"""

from __future__ import annotations

import ast
import fnmatch
import inspect
from collections.abc import Callable
from dataclasses import dataclass

from torch import nn

__all__ = ["ModelOptionError", "ModelInfo", "register_model", "create_model", "list_models", "model_info",
           "model_options", "parse_model_option"]


@dataclass(frozen=True)
class ModelInfo:
    """What a registered name is, and the conventions that come with its family."""

    name: str
    family: str  # "resnet", "plain", "vgg", "cifar_resnet", "cifar_plain"
    depth: int
    residual: bool  # blocks with shortcuts (ResNet) or without (plain, VGG)
    normalized: bool  # has norm layers (VGG without `_bn` has none)
    reference_lr: float  # the family paper's learning rate: He et al. 0.1 (ImageNet batch 256, CIFAR batch 128),
    #                      Simonyan & Zisserman 0.01 (batch 256)
    zero_init_residual: bool  # a residual net trains from blocks that start as the identity (last norm of each
    #                           residual branch at zero, Goyal et al.): the main job's pretraining turns it on
    detection_design: str | None  # the paper's Faster R-CNN head for this trunk: "C4" (res5 on RoIs), "vgg_fc"
    #                               (fc6/fc7); None for the CIFAR nets, which have none
    input_size: int  # the pretraining resolution: ImageNet's 224-px crop, CIFAR's whole 32-px image
    eval_resize: int | None  # the evaluation view's shorter side before the center crop (the paper's 256 for 224);
    #                          None: the image as it is (CIFAR)
    first_conv: str  # the module of the first convolution (timm's pretrained_cfg: adapting input channels)
    classifier: str  # the module of the classifier (what num_classes replaces)
    imagenet_top1_error: tuple[float, str] | None = None  # (ImageNet val top-1 error %, where it is published)
    #   for the nets a paper or torchvision reports: the order a miniature's pretraining is read against


_MODELS: dict[str, Callable[..., nn.Module]] = {}
_INFO: dict[str, ModelInfo] = {}


class ModelOptionError(TypeError, ValueError):
    """An unknown model option or a model name that is not a string: a TypeError to Python callers (as an
    unexpected keyword argument is), a ValueError to command lines that report bad input in one line."""


def register_model(name: str, fn: Callable[..., nn.Module], info: ModelInfo) -> None:
    if name in _MODELS:
        raise KeyError(f"model {name!r} is already registered")
    if info.name != name:
        raise ValueError(f"model {name!r} registered with the metadata of {info.name!r}")
    _MODELS[name] = fn
    _INFO[name] = info


def model_info(name: str) -> ModelInfo:
    """The metadata of a registered name; ValueError naming similar names for an unknown one."""
    if name not in _INFO:
        _unknown(name)
    return _INFO[name]


def model_options(name: str) -> list[str]:
    """The options `create_model(name, ...)` accepts (its builder's keyword-only arguments but num_classes)."""
    if name not in _MODELS:
        _unknown(name)
    params = inspect.signature(_MODELS[name]).parameters.values()
    return [p.name for p in params if p.kind is p.KEYWORD_ONLY and p.name != "num_classes"]


def _unknown(name: str):
    close = fnmatch.filter(_MODELS, f"*{str(name).rstrip('0123456789')}*")
    raise ValueError(f"unknown model {name!r}; similar: {sorted(close) or 'none'}; see backbones.list_models()")


def create_model(name: str, num_classes: int = 1000, **options) -> nn.Module:
    """Build the model `name` (see `list_models()`); `num_classes=0` gives a model without classifier.

    Options are the keyword-only arguments of the family's builder (backbones.resnet.resnet,
    backbones.resnet.cifar_resnet, backbones.vgg.vgg); an unknown option raises TypeError naming it.
    """
    if not isinstance(name, str):
        raise ModelOptionError(f"model name must be a string such as 'resnet50' (see backbones.list_models()), "
                        f"got {name!r}")
    if name not in _MODELS:
        _unknown(name)
    if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 0:
        raise ValueError(f"num_classes must be an integer >= 0 (0: no classifier), got {num_classes!r}")
    accepted = model_options(name)
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise ModelOptionError(f"{name} has no option {', '.join(map(repr, unknown))}; its options: "
                               f"{', '.join(accepted)}")
    return _MODELS[name](num_classes=num_classes, **options)


def list_models(pattern: str = "*") -> list[str]:
    """Registered model names matching a glob pattern, sorted by family then depth."""

    def key(n: str):
        stem = n.rstrip("0123456789_bn")
        digits = "".join(c for c in n[len(stem):] if c.isdigit())
        return stem, int(digits or 0), n

    return sorted(fnmatch.filter(_MODELS, pattern), key=key)


def parse_model_option(text: str) -> tuple[str, object]:
    """"KEY=VALUE" from a command line -> (key, Python value): stride_in_1x1=False, shortcut=A, norm=GN."""
    if "=" not in text:
        raise ValueError(f"expected KEY=VALUE, got {text!r}")
    key, value = text.split("=", 1)
    try:
        return key, ast.literal_eval(value)
    except (ValueError, SyntaxError):
        return key, value  # a bare string
