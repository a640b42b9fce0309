"""What the next job of a preset can resolve, before it runs: each comparison's minimum detectable effect (MDE) at
the unit spreads of the last finished jobs of that preset (results/<preset>_*.json, the files RESULTS.md cites) and
the units the plan gives, and how many units a target MDE would need -- what `tools/main_job.py --dry-run` prints.

The comparisons are those the earlier jobs made between groups the plan makes again (their names are the plan's
group labels), on the metric the job decides on now; the level is the family's strictest Holm step, 0.05 / m, m the
size of the families those jobs adjusted (their top-1 and degradation comparisons included), summed over a preset's
parts -- one family, as pool.py decides them (the first comparison tested needs that much; later steps need less).
The MDE and the units are simulated (report.power): the earlier job's spreads, measured on its 2-5 units, carry
their uncertainty into them."""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass
from pathlib import Path

from classification.engine.run_files import RunFileError, read_json

from ..report.groups import FINE_TUNING_RUN, PRETRAINING_RUN
from ..report.power import simulated_mde, units_for
from .arms import arm_comparisons
from .plan import MainJobPlan, Stage, group_label

__all__ = ["Expected", "Resolution", "expected_resolution", "resolution_lines"]

GROUP_KINDS = ("arms", "deltas", "plain_vs_residual")  # results.json's lists of comparisons between detection groups
ALL_KINDS = (*GROUP_KINDS, "gains", "pretraining_order", "degradation_comparisons", "interactions",
             "layer_response_comparisons")
_DATED = re.compile(r"_(\d{4}-\d{2}-\d{2})_[A-Za-z0-9]+\.json$")


@dataclass(frozen=True)
class Expected:
    a: str
    b: str
    metric: str
    units: tuple[int, int]  # the plan's units per group
    mde: float | None  # at those units and the family's strictest level; None: no spread recorded
    units_for_target: int | None  # per group for an MDE of the target; None: beyond the search or no spread


@dataclass(frozen=True)
class Resolution:
    sources: list[str]  # the results files the spreads come from
    family_size: int
    alpha: float
    target: float
    expected: list[Expected]


def _preset_files(root: Path, preset: str) -> list[Path]:
    """results/<preset>_[<part>_]<date>_<machine>.json, newest first: by date, then a file that records its control's
    reading ("reading", or "gate" before Holm alone decided: written since the control existed) before one that
    does not."""
    files = [p for p in (root / "results").glob(f"{preset}_*.json") if _DATED.search(p.name)]
    return sorted(files, key=lambda p: (_DATED.search(p.name).group(1), _records_reading(p), p.name), reverse=True)


def _records_reading(path: Path) -> bool:
    """Whether a results file records its control's reading at its top level ("gate" before Holm alone decided)."""
    try:
        res = read_json(path)
    except RunFileError:
        return False
    return isinstance(res, dict) and ("reading" in res or "gate" in res)


def _unit_means(group: dict, metric: str) -> list[float]:
    values = (group.get("values") or {}).get(metric) or {}
    return [statistics.fmean(v) for v in values.values() if isinstance(v, list) and v]


def expected_resolution(plan: MainJobPlan, stages: list[Stage], preset: str, metric: str, target: float,
                        root: Path) -> Resolution | None:
    """The plan's expected MDEs from the preset's earlier results; None when no earlier job made a comparison of
    the plan's groups. RunFileError naming the file for one that is not a results.json."""
    planned = {s.group for s in stages if s.kind == "detect"}
    arm_pairs = {(group_label(m, c.a), group_label(m, c.b)) for m in plan.backbones for c in arm_comparisons(plan.arms)}
    groups: dict[str, dict] = {}
    pairs: dict[tuple[str, str], None] = {}
    sources, family = [], 0
    for path in _preset_files(root, preset):
        res = read_json(path)
        if not isinstance(res, dict) or not isinstance(res.get("groups"), list):
            raise RunFileError(f"{path}: not a main job's results.json (no list of groups)")
        kept = [(d["a"], d["b"]) for k in GROUP_KINDS for d in res.get(k) or []
                if isinstance(d, dict) and d.get("a") in planned and d.get("b") in planned
                and (k != "arms" or (d["a"], d["b"]) in arm_pairs)]  # an arm comparison the plan still makes
        mine = {g.get("name") for g in res["groups"] if isinstance(g, dict)} & planned
        if kept and not mine & set(groups):  # the newest job of each part only: a rerun of a part adds nothing
            sources.append(str(path.relative_to(root)))
            groups |= {g["name"]: g for g in res["groups"] if isinstance(g, dict) and g.get("name") in planned}
            pairs |= dict.fromkeys(kept)
            family += max((d["adjustment"].get("size") or 0 for k in ALL_KINDS for d in res.get(k) or []
                           if isinstance(d, dict) and isinstance(d.get("adjustment"), dict)), default=len(kept))
    if not pairs:
        return None
    family = max(family, len(pairs))
    alpha = 0.05 / family
    units = {PRETRAINING_RUN: len(plan.pretrain_seeds), "run": len(plan.scratch_seeds),
             FINE_TUNING_RUN: len(plan.detect_seeds)}
    out = []
    for a, b in pairs:
        ga, gb = groups.get(a, {}), groups.get(b, {})
        na, nb = units.get(ga.get("unit"), 0), units.get(gb.get("unit"), 0)
        ma, mb = _unit_means(ga, metric), _unit_means(gb, metric)
        if len(ma) < 2 or len(mb) < 2 or min(na, nb) < 1:
            out.append(Expected(a, b, metric, (na, nb), None, None))
            continue
        terms = [(1.0, statistics.variance(ma), len(ma)), (-1.0, statistics.variance(mb), len(mb))]
        power = simulated_mde(terms, alpha, units=(na, nb)) if min(na, nb) >= 2 else None
        out.append(Expected(a, b, metric, (na, nb), None if power is None else power.mde,
                            units_for(terms, target, alpha)))
    return Resolution(sources, family, alpha, target, out)


def resolution_lines(r: Resolution | None, preset: str) -> list[str]:
    """--dry-run's lines: where the spreads come from, then each comparison's expected MDE and units for the
    target."""
    if r is None:
        return [f"[main job] expected resolution: no finished job of the preset {preset} in results/ compares the "
                "groups this plan makes (the first run sets it)"]
    lines = [f"[main job] expected resolution ({r.expected[0].metric}, 80% power at 0.05/{r.family_size} = "
             f"{r.alpha:.4f}, the family's strictest Holm step; spreads of the unit means in "
             f"{', '.join(r.sources)}; simulated, their uncertainty carried):"]
    for e in r.expected:
        mde = ("no MDE (a group has fewer than 2 units)" if e.mde is None else
               f"MDE {e.mde:.1f} at {e.units[0]} vs {e.units[1]} units")
        need = ("" if e.mde is None and e.units_for_target is None else
                f"; an MDE of {r.target:g} needs {e.units_for_target} units a group" if e.units_for_target else
                f"; an MDE of {r.target:g} needs more than 1000 units a group")
        lines.append(f"  {e.a} vs {e.b}: {mde}{need}")
    return lines
