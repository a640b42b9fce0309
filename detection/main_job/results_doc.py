"""RESULTS.md's result blocks, generated from the results.json files they cite, so that a number or a claim in the
document is a call of the one statistic on the numbers of a finished job (tools/results_doc.py writes and checks
them; a test fails when RESULTS.md disagrees with the files it cites).

A block is
    <!-- results: results/<job>.json -->
    ... generated text ...
    <!-- end results -->
and everything between the markers is replaced by `render(<that file>)`; prose outside the blocks is the authors'.
"""

from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path

from classification.engine.run_files import RunFileError, read_json

from ..report.comparison import Adjustment, Comparison
from .family import correlation_from_json, correlation_text, leaderboard_from_json, leaderboard_table

__all__ = ["render", "regenerate", "stale_blocks", "comparison_from_json", "ResultsDocError"]

BLOCK = re.compile(r"(<!-- results: (?P<path>\S+) -->\n)(?P<body>.*?)(<!-- end results -->)", re.S)
KINDS = (("arms", "arm comparisons"), ("deltas", "backbones"), ("plain_vs_residual", "residual vs plain"),
         ("degradation_comparisons", "degradation: depth"),
         ("interactions", "degradation: depth x shortcuts"), ("layer_response_comparisons", "Fig. 7"))


class ResultsDocError(ValueError):
    """A block that cannot be generated: the message names the document, the block's file and what is wrong."""


def _tuple(v):
    return tuple(_tuple(x) for x in v) if isinstance(v, list) else v


def comparison_from_json(d: dict) -> Comparison:
    """A Comparison as results.json holds it (asdict plus "call", which is recomputed, not read)."""
    names = {f.name for f in fields(Comparison)}
    values = {k: _tuple(v) for k, v in d.items() if k in names}
    adj = values.get("adjustment")
    if isinstance(adj, dict):
        values["adjustment"] = Adjustment(**{k: _tuple(v) for k, v in adj.items()})
    return Comparison(**values)


def _mean_ci(stat: dict | None) -> str:
    if not stat:
        return "—"
    ci = stat.get("interval")
    return f"{stat['mean']:.1f}" + (f" [{ci[0]:.1f}, {ci[1]:.1f}]" if ci else "")


def render(results: dict) -> str:
    """The block's markdown: each detection group (mean [95% interval over its units]), pretraining errors, the
    degradation nets, and every comparison of the job's family as the summary prints it, with its call."""
    lines = []
    groups = results.get("groups") or []
    if groups:
        lines += ["| group | arm | units | AP50 | AP | AP75 |", "|---|---|---|---|---|---|"]
        for g in groups:
            m = g.get("metrics") or {}
            units = m.get("AP50", {}).get("units", 0)
            lines.append(f"| {g['name']} | {g.get('arm') or g.get('init', '—')} | {units} {g['unit']}"
                         f"{'' if units == 1 else 's'} | "
                         f"{_mean_ci(m.get('AP50'))} | {_mean_ci(m.get('AP'))} | {_mean_ci(m.get('AP75'))} |")
        lines.append("")
    board = leaderboard_from_json(results.get("leaderboard") or [])
    if board:
        head, rows = leaderboard_table(board)
        lines += [f"Leaderboard ({board[0].arm}, sorted by AP):", "", "| " + " | ".join(head) + " |",
                  "|" + "---|" * len(head), *["| " + " | ".join(r) + " |" for r in rows], "",
                  correlation_text(correlation_from_json(results.get("correlation"))), ""]
    for label, stat in (results.get("pretraining") or {}).items():
        lines.append(f"- pretraining {label}: val top-1 error {_mean_ci(stat)}% over {stat['units']} run(s)")
    nets = results.get("degradation") or []
    if nets:
        lines += ["", "| net | seeds | training error % | val error % | seeds at chance |", "|---|---|---|---|---|"]
        for d in nets:
            seeds = (d.get("train_error") or {}).get("units", 0)
            lines.append(f"| {d['model']} | {seeds} | {_mean_ci(d.get('train_error'))} | "
                         f"{_mean_ci(d.get('val_error'))} | {len(d.get('at_chance') or [])} |")
    stuck = {d["model"] for d in nets if d.get("at_chance")}
    comparisons = [(label, comparison_from_json(c), _nets_of(kind, i, c, results)) for kind, label in KINDS
                   for i, c in enumerate(results.get(kind) or [])]
    if comparisons:
        lines += ["", f"Comparisons (one family: {results.get('family') or 'not adjusted'}):"]
        for label, c, models in comparisons:
            at_chance = [m for m in models if m in stuck]
            lines.append(f"- {label}, {c.a} vs {c.b}: {c.describe()}" + (
                f"; not read as evidence about depth: {', '.join(at_chance)} did not leave chance in every seed"
                if at_chance else ""))  # as the job's notes (results.degradation_notes)
    return "\n".join(lines).strip() + "\n"


def _nets_of(kind: str, index: int, c: dict, results: dict) -> tuple[str, ...]:
    """The degradation nets a comparison rests on: its two nets, or an interaction's four; none for the others."""
    if kind == "degradation_comparisons":
        return c["a"], c["b"]
    if kind == "interactions":
        terms = results.get("interaction_terms") or []
        return tuple(terms[index]) if index < len(terms) else ()
    return ()


def _load(doc: Path, cited: str) -> dict:
    path = doc.parent / cited
    try:
        data = read_json(path)
    except RunFileError as err:
        raise ResultsDocError(f"{doc}: the block citing {cited}: {err}") from None
    if data is None:
        raise ResultsDocError(f"{doc}: the block citing {cited} has no such file ({path})")
    return data


def regenerate(doc: Path) -> str:
    """The document's text with every results block rendered anew from the file it cites."""
    text = doc.read_text()
    return BLOCK.sub(lambda m: m.group(1) + render(_load(doc, m.group("path"))) + m.group(4), text)


def stale_blocks(doc: Path) -> list[str]:
    """The files whose blocks in `doc` differ from their rendering (empty: the document says what they hold)."""
    text = doc.read_text()
    return [m.group("path") for m in BLOCK.finditer(text) if m.group("body") != render(_load(doc, m.group("path")))]
