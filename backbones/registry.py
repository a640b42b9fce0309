"""Model names -> constructors: `create_model` and `list_models`."""

from __future__ import annotations

import ast
import fnmatch
import inspect
from collections.abc import Callable

from torch import nn

__all__ = ["ModelOptionError", "register_model", "create_model", "list_models", "parse_model_option"]

_MODELS: dict[str, Callable[..., nn.Module]] = {}


class ModelOptionError(TypeError, ValueError):
    """An unknown model option or a model name that is not a string: a TypeError to Python callers (as an
    unexpected keyword argument is), a ValueError to command lines that report bad input in one line."""


def register_model(name: str, fn: Callable[..., nn.Module]) -> None:
    if name in _MODELS:
        raise KeyError(f"model {name!r} is already registered")
    _MODELS[name] = fn


def create_model(name: str, num_classes: int = 1000, **options) -> nn.Module:
    """Build the model `name` (see `list_models()`); `num_classes=0` gives a model without classifier.

    Options are the keyword-only arguments of the family's builder (backbones.resnet.resnet,
    backbones.resnet.cifar_resnet, backbones.vgg.vgg); an unknown option raises TypeError naming it.
    """
    if not isinstance(name, str):
        raise ModelOptionError(f"model name must be a string such as 'resnet50' (see backbones.list_models()), "
                        f"got {name!r}")
    try:
        fn = _MODELS[name]
    except KeyError:
        close = fnmatch.filter(_MODELS, f"*{name.rstrip('0123456789')}*")
        raise ValueError(f"unknown model {name!r}; similar: {sorted(close) or 'none'}; "
                         "see backbones.list_models()") from None
    if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 0:
        raise ValueError(f"num_classes must be an integer >= 0 (0: no classifier), got {num_classes!r}")
    params = inspect.signature(fn).parameters.values()
    accepted = [p.name for p in params if p.kind is p.KEYWORD_ONLY]
    unknown = [] if any(p.kind is p.VAR_KEYWORD for p in params) else sorted(set(options) - set(accepted))
    if unknown:
        raise ModelOptionError(f"{name} has no option {', '.join(map(repr, unknown))}; its options: "
                        f"{', '.join(a for a in accepted if a != 'num_classes')}")
    return fn(num_classes=num_classes, **options)


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
