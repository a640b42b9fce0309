"""Runs of one configuration that differ only in SEED form a group: per metric its mean and spreads over the
group's units (`comparison.Spread`), and comparisons between groups (`compare_groups` -> `comparison.Comparison`).

Two runs belong together when their config.yaml files are identical after removing SEED and OUTPUT_DIR and they
were evaluated on the same dataset files. Two runs of a group that also share their SEED repeat one experiment:
they stay listed, the group says so (`repeated_seeds`), and they count as one run -- their mean -- in `n` and the
statistics, never as two independent seeds. A group's unit is the pretraining run when its runs start from
pretrained weights (detection seeds nest under each set of weights; one set of weights is one unit, however many
detection seeds ran from it), else the single run (from scratch, the seed initialises the backbone): see
comparison.py.
"""

from __future__ import annotations

import json
import math
import os
import re
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field

from ..detectron2_keys import MIRRORED_KEYS
from .comparison import Comparison, Spread, compare, spread, with_test_set
from .runs import RunResult
from .test_sampling import image_count, run_replicates, shared_test_set_se

__all__ = ["RunGroup", "group_runs", "config_key", "compare_groups", "differing_keys", "config_differences",
           "what_differs",
           "PRETRAINING_RUN", "RUN", "FINE_TUNING_RUN"]

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


PRETRAINING_RUN, RUN = "pretraining run", "run"  # what a group's unit is
# The unit of a group whose runs all start from one checkpoint the user gave (published weights, MoCo's protocol):
# pretraining is not repeated, so the detection run is the unit and the interval leaves pretraining variance out.
FINE_TUNING_RUN = "fine-tuning run"


def config_key(run: RunResult) -> str:
    """The configuration (SEED / OUTPUT_DIR aside, and Detectron2's keys that mirror ours: a run recorded before
    them holds Detectron2's defaults there) and the evaluated dataset's files: runs registered under one dataset
    name but evaluated on different files are different experiments, not seeds of one."""
    flat = {k: v for k, v in _flatten(run.config).items() if k not in _IGNORED_KEYS and k not in MIRRORED_KEYS}
    return json.dumps({"config": flat, "evaluated_on": run.dataset_files}, sort_keys=True, default=str)


@dataclass
class RunGroup:
    name: str
    runs: list[RunResult]
    metrics: dict[str, Spread] = field(default_factory=dict)  # key -> mean and spreads over the finished runs
    given: bool = False  # every run starts from one checkpoint the user gave: units are its fine-tuning runs

    @property
    def first(self) -> RunResult:
        return self.runs[0]

    @property
    def finished(self) -> list[RunResult]:
        return [r for r in self.runs if r.status == "finished"]

    @property
    def independent(self) -> list[list[RunResult]]:
        """The finished runs, each list one experiment: runs of the same configuration (config_key: weights and
        evaluated files included) and the same SEED repeat it and are listed together. A run without a recorded
        seed (SEED < 0: random) is its own."""
        out: dict[tuple, list[RunResult]] = {}
        for r in self.finished:
            out.setdefault((config_key(r), r.seed) if r.seed is not None else ("", r.path), []).append(r)
        return list(out.values())

    @property
    def n(self) -> int:
        """Independent runs: a repeated seed counts once."""
        return len(self.independent)

    @property
    def seeds(self) -> list[int | None]:
        """The SEED of every finished run (a repeated one as often as it ran)."""
        return [r.seed for r in self.finished]

    @property
    def repeated_seeds(self) -> dict[int, list[str]]:
        """SEED -> the names of the runs that repeat it (two or more), for the report's warning."""
        return {rs[0].seed: [r.name for r in rs] for rs in self.independent if len(rs) > 1}

    @property
    def unit(self) -> str:
        """PRETRAINING_RUN when the finished runs start from pretrained weights, RUN for runs from scratch,
        FINE_TUNING_RUN for runs from the one checkpoint the user gave (`given`)."""
        if self.given:
            return FINE_TUNING_RUN
        return PRETRAINING_RUN if any(r.weights for r in self.finished) else RUN

    def unit_of(self, run: RunResult, *, by_run: bool = False) -> str:
        """The unit a run belongs to: its weights file (resolved: one checkpoint named two ways is one unit), or the
        run itself (from scratch, from a given checkpoint, or `by_run`)."""
        return os.path.realpath(run.weights) if self.unit == PRETRAINING_RUN and not by_run else run.path

    @property
    def checkpoints(self) -> set[str]:
        """The resolved weights files its finished runs start from (empty from scratch)."""
        return {os.path.realpath(r.weights) for r in self.finished if r.weights}

    def values(self, key: str, *, by_run: bool = False) -> dict[str, list[float]]:
        """unit -> the finite values of `key` of its finished runs (`by_run`: each run its own unit); the runs
        that repeat one seed give one value, their mean."""
        return self._values(lambda r: r.metrics.get(key), by_run)

    def _values(self, value: Callable[[RunResult], float | None], by_run: bool = False) -> dict[str, list[float]]:
        out: dict[str, list[float]] = {}
        for runs in self.independent:
            vals = [v for r in runs if (v := value(r)) is not None and math.isfinite(v)]
            if vals:
                out.setdefault(self.unit_of(runs[0], by_run=by_run), []).append(statistics.fmean(vals))
        return out

    def per_class(self) -> dict[str, Spread]:
        """class -> its AP over the group's units, as `metrics` are (COCO AP, VOC AP50: RunResult.per_category):
        what a reader of a few-class set looks at to see which class fails; comparisons stay on the mean."""
        classes = sorted({c for r in self.finished for c in r.per_category})
        out = {c: spread(self._values(lambda r, c=c: r.per_category.get(c)), self.unit) for c in classes}
        return {c: s for c, s in out.items() if s is not None}

    def replicates(self, key: str, *, by_run: bool = False) -> dict[str, list] | None:
        """unit -> the replicate vectors of `key` on the draws of the test images (test_sampling) of its finished
        runs, as `values` groups them (a repeated seed: their mean); None when a run has none."""
        out: dict[str, list] = {}
        for runs in self.independent:
            runs = [r for r in runs if (v := r.metrics.get(key)) is not None and math.isfinite(v)]  # as `values`
            if not runs:
                continue
            reps = [run_replicates(r, key) for r in runs]
            if any(r is None for r in reps):
                return None
            out.setdefault(self.unit_of(runs[0], by_run=by_run), []).append(sum(reps) / len(reps))
        return out

    def mean(self, key: str) -> float | None:
        m = self.metrics.get(key)
        return None if m is None else m.mean

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
    keys = sorted({k for r in group.finished for k in r.metrics})
    for k in keys:
        s = spread(group.values(k), group.unit)
        if s is not None:
            group.metrics[k] = s


def _group_name(runs: list[RunResult]) -> str:
    if len(runs) == 1:
        return runs[0].name
    stems = {re.sub(r"[_-]?s(eed)?\d+$", "", r.name) for r in runs}
    return stems.pop() if len(stems) == 1 and "" not in stems else f"{runs[0].name} (+{len(runs) - 1} seeds)"


def group_runs(runs: list[RunResult], labels: list[str] | None = None, *,
               given_checkpoints: frozenset[str] = frozenset()) -> list[RunGroup]:
    """Finished runs grouped by configuration (all but SEED equal), or by `labels` (one per run: the caller's
    grouping, e.g. the main job's runs of one backbone over pretraining *and* detection seeds), in order of first
    appearance; each unfinished run is a group of its own (listed with its status). given_checkpoints: resolved
    weights files the user gave (the main job's --weights): a group whose runs all start from one of them has its
    fine-tuning runs as units (FINE_TUNING_RUN)."""
    if labels is not None and len(labels) != len(runs):
        raise ValueError(f"{len(labels)} group labels for {len(runs)} runs")
    groups: dict[tuple, list[RunResult]] = {}  # (kind of key, key): a caller's label, a config, an unfinished run
    for i, r in enumerate(runs):
        if r.status != "finished":
            key = ("unfinished", i)
        else:
            key = ("label", labels[i]) if labels is not None else ("config", config_key(r))
        groups.setdefault(key, []).append(r)
    out = []
    for (kind, key), members in groups.items():
        g = RunGroup(key if kind == "label" else _group_name(members), members)
        g.given = len(g.checkpoints) == 1 and g.checkpoints <= given_checkpoints
        _aggregate(g)
        out.append(g)
    names = [g.name for g in out]
    for g in out:  # two groups with the same name (same directory basenames): say which is which
        if names.count(g.name) > 1:
            g.name = f"{g.name} ({g.first.path})"
    return out


def compare_groups(a: RunGroup, b: RunGroup, key: str) -> Comparison | None:
    """a vs b on metric `key` (comparison.compare over each group's units), with its test-set part (test_sampling)
    where both were scored on one test set whose draws every run has; None where either has no value. When both
    start from the same checkpoint(s) -- an ablation of the detector on one pretrained backbone -- the backbone
    does not vary between them and the detection runs are the units."""
    by_run = a.unit == b.unit == PRETRAINING_RUN and a.checkpoints == b.checkpoints
    if by_run:
        c = compare(key, a.name, a.values(key, by_run=True), RUN, b.name, b.values(key, by_run=True), RUN)
    else:
        c = compare(key, a.name, a.values(key), a.unit, b.name, b.values(key), b.unit)
    if c is None:
        return None
    test_sets = {json.dumps(r.dataset_files, sort_keys=True, default=str) for g in (a, b) for r in g.finished}
    ra, rb = a.replicates(key, by_run=by_run), b.replicates(key, by_run=by_run)
    if len(test_sets) != 1 or ra is None or rb is None:
        return c
    return with_test_set(c, shared_test_set_se([(1.0, ra), (-1.0, rb)]), image_count(a.finished[0]))


def differing_keys(groups: list[RunGroup]) -> dict[str, list]:
    """Config keys (SEED/OUTPUT_DIR aside) whose values differ between the groups: what the comparison varies."""
    return config_differences(*(g.first.config for g in groups))


def config_differences(*configs: dict) -> dict[str, list]:
    """Dotted config keys (SEED/OUTPUT_DIR aside) whose values differ between the configs -> each config's value
    ("—" where it lacks the key): the one config diff (the report, the main job's arms before they train)."""
    flats = [{k: v for k, v in _flatten(c).items() if k not in _IGNORED_KEYS and k not in MIRRORED_KEYS}
             for c in configs]  # a Detectron2 key mirroring one of ours repeats its difference
    keys = sorted(set().union(*flats)) if flats else []
    return {k: [f.get(k, "—") for f in flats] for k in keys if len({json.dumps(f.get(k), default=str)
                                                                     for f in flats}) > 1}


INITIALISATION_KEYS = frozenset({"MODEL.WEIGHTS"})  # what "differ only in the initialisation" may name


def what_differs(differences: dict[str, list]) -> str:
    """The sentence saying what two arms differ in, generated from their resolved configs' diff (differing_keys of
    two groups): "differ only in the initialisation (MODEL.WEIGHTS)" when that is all the diff holds, else every
    key with both values."""
    if not differences:
        return "their resolved configs are identical (seeds aside)"
    if set(differences) <= INITIALISATION_KEYS:
        return "the two differ only in the initialisation (MODEL.WEIGHTS)"
    parts = [f"{k} {_short(va)} vs {_short(vb)}" for k, (va, vb, *_) in differences.items()]
    return "the two differ in " + "; ".join(parts)


def _short(value) -> str:
    """A config value for a sentence: a weights path by its last two parts (the job's stage and file)."""
    if isinstance(value, str) and "/" in value:
        return "/".join(value.rstrip("/").split("/")[-3:])
    return '""' if value == "" else str(value)
