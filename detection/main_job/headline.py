"""The report's first sentences: what the job found, in plain words, before any table -- the positive control and
what it allows, then every comparison of the job's one family as its call or its resolution (Comparison.headline),
the pretrained backbones that never trained, and the accuracy-vs-transfer correlation of a family job."""

from __future__ import annotations

from .control import NO_CONTROL
from .family import correlation_text
from .results import COMPARISON_FIELDS, DEGRADATION_FIELDS, JobResults, untrained_lines

__all__ = ["headline_lines"]


def _control_sentences(results: JobResults) -> list[str]:
    c = results.control
    if results.control_fraction is None:
        return []
    what = f"{results.control_fraction:g} of the {results.control_kind or 'pretraining'}"
    lines = [f"Positive control ({what} against the whole, same recipe): "
             + (c.headline() if c is not None else "no result") + "."]
    if c is not None and c.call is not None and c.call != c.a:  # called, but the wrong way round
        lines.append("The control came out the wrong way round (the shortened budget ahead of the whole).")
    if results.control_at_chance:
        lines.append(f"The control's pretraining never left chance ({len(results.control_at_chance)} run(s)): "
                     "called, it shows only that the job tells a trained backbone from an untrained one.")
    if results.gate:
        lines.append(f"So this job cannot rank backbones ({results.gate.split(' (')[0]}): every transfer comparison "
                     "below is shown with its interval and makes no call.")
    else:
        lines.append("The control was called, so the transfer comparisons below are decided (Holm over the job's "
                     "family).")
    return lines


def headline_lines(results: JobResults) -> list[str]:
    """The sentences, in the order a reader needs them: the control, each call of the family (or why none may be
    made), then the rest."""
    lines = _control_sentences(results)
    transfer = [c for kind in COMPARISON_FIELDS if kind not in DEGRADATION_FIELDS for c in getattr(results, kind)]
    lines += [f"{c.headline()}." for c in transfer]
    if results.control_fraction is None and results.gate and transfer:  # after what it keeps from being called
        lines.append(f"No ranking: {NO_CONTROL}; so no transfer comparison makes a call.")
    lines += [f"{c.headline()}." for kind in DEGRADATION_FIELDS for c in getattr(results, kind)]  # no gate
    lines += [f"{line}." for line in untrained_lines(results)]
    if results.leaderboard:
        lines.append(correlation_text(results.correlation))
    return lines
