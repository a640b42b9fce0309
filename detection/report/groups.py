"""Runs of one configuration that differ only in SEED form a group: mean, sample standard deviation and n.

Two runs belong together when their config.yaml files are identical after removing SEED and OUTPUT_DIR. A
difference between two groups is called "within the seed spread" when it is no larger than the standard deviation
of a difference of two single runs, sqrt(sd_a^2 + sd_b^2): a gap that size appears between reruns of one setting.
"""

from __future__ import annotations

import json
import math
import re
import statistics
from dataclasses import dataclass, field

from .runs import RunResult

__all__ = ["RunGroup", "group_runs", "config_key", "delta_with_spread", "spread_verdict", "differing_keys"]

_IGNORED_KEYS = ("SEED", "OUTPUT_DIR")


def _flatten(d: dict, prefix: str = "") -> dict[str, object]:
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


def config_key(run: RunResult) -> str:
    flat = {k: v for k, v in _flatten(run.config).items() if k not in _IGNORED_KEYS}
    return json.dumps(flat, sort_keys=True, default=str)


@dataclass
class RunGroup:
    name: str
    runs: list[RunResult]
    metrics: dict[str, tuple[float, float | None, int]] = field(default_factory=dict)  # key -> (mean, sd, n)

    @property
    def first(self) -> RunResult:
        return self.runs[0]

    @property
    def finished(self) -> list[RunResult]:
        return [r for r in self.runs if r.status == "finished"]

    @property
    def n(self) -> int:
        return len(self.finished)

    @property
    def seeds(self) -> list[int | None]:
        return [r.seed for r in self.finished]

    def mean(self, key: str) -> float | None:
        m = self.metrics.get(key)
        return None if m is None else m[0]

    def sd(self, key: str) -> float | None:
        m = self.metrics.get(key)
        return None if m is None else m[1]

    def per_category(self) -> dict[str, float]:
        cats = sorted({c for r in self.finished for c in r.per_category})
        return {c: statistics.fmean([r.per_category[c] for r in self.finished if c in r.per_category])
                for c in cats}

    def pr(self, key: str) -> dict | None:
        curves = [r.pr[key] for r in self.finished if key in r.pr]
        if not curves:
            return None
        cols = list(zip(*[c["precision"] for c in curves]))
        mean = [None if any(v is None for v in col) else statistics.fmean(col) for col in cols]
        return {"recall": curves[0]["recall"], "precision": mean}


def _aggregate(group: RunGroup) -> None:
    finished = group.finished
    keys = sorted({k for r in finished for k in r.metrics})
    for k in keys:
        vals = [r.metrics[k] for r in finished if k in r.metrics and not math.isnan(r.metrics[k])]
        if not vals:
            group.metrics[k] = (float("nan"), None, 0)
            continue
        group.metrics[k] = (statistics.fmean(vals), statistics.stdev(vals) if len(vals) > 1 else None, len(vals))


def _group_name(runs: list[RunResult]) -> str:
    if len(runs) == 1:
        return runs[0].name
    stems = {re.sub(r"[_-]?s(eed)?\d+$", "", r.name) for r in runs}
    return stems.pop() if len(stems) == 1 and "" not in stems else f"{runs[0].name} (+{len(runs) - 1} seeds)"


def group_runs(runs: list[RunResult], labels: list[str] | None = None) -> list[RunGroup]:
    """Finished runs grouped by configuration (all but SEED equal), or by `labels` (one per run: the caller's
    grouping, e.g. the main job's runs of one backbone over pretraining *and* detection seeds), in order of first
    appearance; each unfinished run is a group of its own (listed with its status)."""
    if labels is not None and len(labels) != len(runs):
        raise ValueError(f"{len(labels)} group labels for {len(runs)} runs")
    groups: dict[str, list[RunResult]] = {}
    for i, r in enumerate(runs):
        if r.status != "finished":
            key = f"__unfinished_{i}"
        else:
            key = f"label:{labels[i]}" if labels is not None else config_key(r)
        groups.setdefault(key, []).append(r)
    out = []
    for key, members in groups.items():
        g = RunGroup(key[len("label:"):] if key.startswith("label:") else _group_name(members), members)
        _aggregate(g)
        out.append(g)
    names = [g.name for g in out]
    for g in out:  # two groups with the same name (same directory basenames): say which is which
        if names.count(g.name) > 1:
            g.name = f"{g.name} ({g.first.path})"
    return out


def delta_with_spread(a: RunGroup, b: RunGroup, key: str) -> tuple[float | None, str]:
    """(mean_a - mean_b, verdict): "within seed spread", "beyond seed spread", or why no verdict exists."""
    ma, mb = a.mean(key), b.mean(key)
    if ma is None or mb is None or math.isnan(ma) or math.isnan(mb):
        return None, ""
    return ma - mb, spread_verdict(ma - mb, a.sd(key), b.sd(key))


def difference_spread(sd_a: float | None, sd_b: float | None) -> float | None:
    """sqrt(sd_a^2 + sd_b^2), the sd of a difference of two single runs; None when either sd is unknown (n=1)."""
    return None if sd_a is None or sd_b is None else math.sqrt(sd_a**2 + sd_b**2)


def spread_verdict(delta: float, sd_a: float | None, sd_b: float | None) -> str:
    """"within / beyond seed spread (±s)", s = difference_spread(sd_a, sd_b)."""
    spread = difference_spread(sd_a, sd_b)
    if spread is None:
        return "n=1: seed spread unknown"
    return ("within seed spread" if abs(delta) <= spread else "beyond seed spread") + f" (±{spread:.2f})"


def comparison(a: RunGroup, b: RunGroup, key: str) -> dict:
    """a vs b on metric `key`, as numbers: {delta, spread, beyond_spread} (None where a value is unknown)."""
    ma, mb = a.mean(key), b.mean(key)
    if ma is None or mb is None or math.isnan(ma) or math.isnan(mb):
        return {"metric": key, "versus": b.name, "delta": None, "spread": None, "beyond_spread": None}
    spread = difference_spread(a.sd(key), b.sd(key))
    return {"metric": key, "versus": b.name, "delta": ma - mb, "spread": spread,
            "beyond_spread": None if spread is None else abs(ma - mb) > spread}


def differing_keys(groups: list[RunGroup]) -> dict[str, list]:
    """Config keys (SEED/OUTPUT_DIR aside) whose values differ between the groups: what the comparison varies."""
    flats = [{k: v for k, v in _flatten(g.first.config).items() if k not in _IGNORED_KEYS} for g in groups]
    keys = sorted(set().union(*flats)) if flats else []
    return {k: [f.get(k, "—") for f in flats] for k in keys if len({json.dumps(f.get(k), default=str)
                                                                     for f in flats}) > 1}
