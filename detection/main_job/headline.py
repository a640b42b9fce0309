"""The report's first sentences: what the job found, in plain words, before any table -- the positive control and
what it allows, then every comparison of the job's one family as its call or its resolution (Comparison.headline),
the pretrained backbones that never trained, and the accuracy-vs-transfer correlation of a family job."""

from __future__ import annotations

from .control import NO_CONTROL, control_lines
from .family import correlation_text
from .results import COMPARISON_FIELDS, DEGRADATION_FIELDS, JobResults, untrained_lines

__all__ = ["headline_lines"]


def headline_lines(results: JobResults) -> list[str]:
    """The sentences, in the order a reader needs them: the control, each call of the family (or why none may be
    made), then the rest."""
    lines = control_lines(results, headline=True)
    transfer = [c for kind in COMPARISON_FIELDS if kind not in DEGRADATION_FIELDS for c in getattr(results, kind)]
    lines += [f"{c.headline()}." for c in transfer]
    if results.control_fraction is None and results.gate and transfer:  # after what it keeps from being called
        lines.append(f"No ranking: {NO_CONTROL}; so no transfer comparison makes a call.")
    lines += [f"{c.headline()}." for kind in DEGRADATION_FIELDS for c in getattr(results, kind)]  # no gate
    lines += [f"{line}." for line in untrained_lines(results)]
    if results.leaderboard:
        lines.append(correlation_text(results.correlation))
    return lines
