"""A finished job's results.json under the statistic as it is now: every comparison it lists, its positive control
and the reading the control gives the no-calls, recomputed from the per-unit values the file holds
(compare.recomputed) and adjusted as the job adjusted them -- what `tools/results_doc.py --recompute` writes when the
statistic changes, so that the files RESULTS.md and the README cite say what the statistic says of them. Each call
that changes is returned, for the change's note.

The test set's part is the one the file recorded (its runs' detections are not in it): a file written before the
part every unit shares was measured recorded the whole movement over redrawn images, each unit's own luck included,
which the units' spread holds already; counted again, its intervals are wider than a rerun's would be."""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass

from classification.engine.run_files import RunFileError

from .compare import COMPARISON_KINDS, recomputed, recomputed_family
from .control import control_reading
from .results_doc import comparison_from_json

__all__ = ["CallChange", "recompute_results"]


@dataclass(frozen=True)
class CallChange:
    """A comparison whose call the recomputation changed."""

    kind: str  # the results.json list it is in ("deltas", ...), or "control"
    a: str
    b: str
    metric: str
    before: str | None  # the group called ahead, None for a no-call
    after: str | None


def _as_json(c, d: dict) -> dict:
    return {**d, **asdict(c), "call": c.call, "mde": c.mde}


def recompute_results(res: dict, where: str = "results.json") -> tuple[dict, list[CallChange]]:
    """(res with every comparison, its control and the reading recomputed, the calls that changed). Raises
    RunFileError naming the comparison where the file lacks the per-unit values to recompute one."""
    out, changes = copy.deepcopy(res), []
    control = res.get("control")
    if isinstance(control, dict):
        c = recomputed(res, "deltas", 0, control)
        if c is None:
            raise RunFileError(f"{where}: its control {control.get('a')} vs {control.get('b')} has no per-unit "
                               "values to recompute it from")
        out["control"] = _as_json(c, control)
        if control.get("call") != c.call:
            changes.append(CallChange("control", c.a, c.b, c.metric, control.get("call"), c.call))
        model = (res.get("control_top1") or {}).get("a") or c.a
        out["reading"] = control_reading(c, model, res.get("control_fraction") or 0.0,
                                         res.get("control_kind") or "pretraining")
        out.pop("gate", None)  # the veto's field, read as the reading before Holm alone decided
    if isinstance(res.get("control_top1"), dict):
        top1 = comparison_from_json(res["control_top1"])
        out["control_top1"] = _as_json(top1, res["control_top1"])
    family = recomputed_family(out)
    for kind in COMPARISON_KINDS:
        for i, d in enumerate(out.get(kind) or []):
            if not isinstance(d, dict) or not {"a", "b", "metric"} <= set(d):
                continue
            c = family.get((kind, d["metric"], d["a"], d["b"]))
            if c is None:
                raise RunFileError(f"{where}: {kind}[{i}] {d['a']} vs {d['b']} has no per-unit values to recompute "
                                   "it from")
            if d.get("call") != c.call:
                changes.append(CallChange(kind, c.a, c.b, c.metric, d.get("call"), c.call))
            out[kind][i] = _as_json(c, d)
    return out, changes
