"""The pretraining order: each backbone's pretraining top-1 error against the first backbone's, called before any
transfer comparison, and read against the order ImageNet gives the same nets (the registry's imagenet_top1_error).

A transfer comparison speaks to the paper's claim (a better ImageNet classifier makes a better detector) only where
the miniature's pretraining ranks the two nets as ImageNet does: where it is called the other way round, the job's
first sentences say so, and its transfer call measures the miniature's classifiers, not the paper's."""

from __future__ import annotations

from backbones import model_info

from ..report.comparison import Comparison
from .family import MEASURED, Top1, compare_top1

__all__ = ["pretraining_order", "imagenet_order", "imagenet_order_text"]


def pretraining_order(backbones: tuple[str, ...], top1: dict[str, Top1],
                      skip: set[frozenset[str]] = frozenset()) -> list[Comparison]:
    """Each backbone after the first vs the first on pretraining top-1 error (pretraining runs as units, lower is
    better), where both were pretrained here and left chance; pairs in `skip` are compared elsewhere in the family
    (residual vs plain) and count once."""
    if not backbones:
        return []
    first = top1.get(backbones[0])
    out = []
    for model in backbones[1:]:
        t = top1.get(model)
        if not (first and t and first.source == t.source == MEASURED) or first.at_chance or t.at_chance:
            continue
        if frozenset((model, backbones[0])) in skip:
            continue
        c = compare_top1(model, t.units, backbones[0], first.units)
        if c is not None:
            out.append(c)
    return out


def imagenet_order(c: Comparison) -> bool | None:
    """Whether a called pretraining comparison ranks its two nets as ImageNet does: True / False, None when it made
    no call or ImageNet has no number for one of them (names are the registry's)."""
    if c.call is None:
        return None
    try:
        ref_a, ref_b = model_info(c.a).imagenet_top1_error, model_info(c.b).imagenet_top1_error
    except ValueError:  # a name the registry does not know (a pooled part's label)
        return None
    if ref_a is None or ref_b is None or ref_a[0] == ref_b[0]:
        return None
    return c.call == (c.a if ref_a[0] < ref_b[0] else c.b)


def imagenet_order_text(c: Comparison) -> str | None:
    """The sentence after a pretraining call that ImageNet ranks the other way round, else None."""
    if imagenet_order(c) is not False:
        return None
    (ea, sa), (eb, sb) = model_info(c.a).imagenet_top1_error, model_info(c.b).imagenet_top1_error
    source = sa if sa == sb else f"{sa}; {sb}"
    return (f"On ImageNet the order is the reverse ({c.a} {ea:g}% vs {c.b} {eb:g}% top-1 error: {source}): this "
            f"miniature's pretraining cannot show the paper's direction for this pair, and its transfer comparison "
            f"measures the miniature's classifiers, not ImageNet's")
