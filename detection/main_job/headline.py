"""The report's first sentences: what the job found, in plain words, before any table -- the pretraining order
(each backbone's top-1 error against the first's, and where ImageNet ranks the pair the other way), the positive
control and how it reads the no-calls, then every transfer comparison of the job's family as its call or its resolution
(Comparison.headline), the pretrained backbones that never trained, and the accuracy-vs-transfer correlation."""

from __future__ import annotations

from .control import FAILED_ASSAY, NO_CONTROL, control_lines
from .family import correlation_text
from .pretraining_order import imagenet_order_text
from .results import COMPARISON_FIELDS, DEGRADATION_FIELDS, UNGATED_FIELDS, JobResults, untrained_lines

__all__ = ["headline_lines", "pretraining_order_lines"]


def pretraining_order_lines(comparisons) -> list[str]:
    """Each pretraining comparison's sentence, followed by ImageNet's order where the call is the reverse of it."""
    lines = []
    for c in comparisons:
        lines.append(f"Pretraining: {c.headline()}.")
        reverse = imagenet_order_text(c)
        if reverse:
            lines.append(f"{reverse}.")
    return lines


def headline_lines(results: JobResults) -> list[str]:
    """The sentences, in the order a reader needs them: a failed assay above everything, the pretraining order, the
    control and how it reads the no-calls, each comparison of the family as its call or no-call, then the rest."""
    control = control_lines(results, headline=True)
    failed = bool(results.reading and results.reading.startswith(FAILED_ASSAY))
    lines = control if failed else []
    lines += pretraining_order_lines(results.pretraining_order)
    lines += [] if failed else control
    transfer = [c for kind in COMPARISON_FIELDS if kind not in UNGATED_FIELDS for c in getattr(results, kind)]
    lines += [f"{c.headline()}." for c in transfer]
    if results.control_fraction is None and results.reading and transfer:  # after the no-calls it reads
        lines.append(f"No positive control: {NO_CONTROL}; Holm alone decides the calls, and a no-call is not "
                     "evidence of no difference.")
    lines += [f"{c.headline()}." for kind in DEGRADATION_FIELDS for c in getattr(results, kind)]  # no control
    lines += [f"{line}." for line in untrained_lines(results)]
    if results.leaderboard:
        lines.append(correlation_text(results.correlation))
    return lines
