"""One family per preset: the parts of a preset's job (run apart -- on other machines or days, one backbone each)
pooled into one results, every comparison they list recomputed from its per-unit values under the current rules and
adjusted together (tools/compare_jobs.py --pool writes it; RESULTS.md's blocks render it).

The current rules, applied to every part whatever version wrote it:
- the detection comparisons are decided on results.COMPARED_METRICS (AP@[.5:.95]); AP50 / AP75 stay in the tables;
- a backbone whose pretraining never left chance is in no comparison and not ranked (family.untrained_units; a part
  written before it recorded its runs' chance is read as the embedded set's 10-way guess, the only data such parts
  ran on);
- the family is Holm over every comparison of every part: a call in one part can be no call in the pool;
- Holm alone decides a call; each part's positive control reads the pooled family's transfer no-calls: a part whose
  control was not called (or came out the wrong way round, or that ran none, as every part written before the
  control existed) makes them read so (`reading`; "gate" in files written before it vetoed calls).
"""

from __future__ import annotations

import json
from dataclasses import asdict, replace

from classification.analysis.degradation import RECIPE
from classification.engine.run_files import RunFileError

from ..report.comparison import adjust, read_as
from .compare import COMPARISON_KINDS, recomputed
from .control import FAILED_ASSAY, NOT_SEEN
from .family import LEFT_CHANCE_BY, NEVER_TRAINED, TOP1_METRIC, leaderboard_from_json, transfer_correlation
from .results import COMPARED_METRICS, UNGATED_FIELDS

__all__ = ["pool_results", "pool_parts", "PoolError"]

GROUP_KINDS = ("arms", "gains", "deltas", "plain_vs_residual")  # comparisons between detection groups
MERGED = ("pretraining", "pretraining_images", "factors", "differences", "unfair", "layer_responses", "top1",
          "at_chance", "not_compared")
CONCATENATED = ("groups", "degradation", "interaction_terms", "leaderboard")


class PoolError(ValueError):
    """Parts that cannot be one family: the message names the part and what clashes."""


def _untrained(res: dict) -> set[str]:
    """The backbones whose pretraining never left chance: recorded (the job's at_chance per "backbone norm", a
    top-1's at_chance), else read at a 10-way guess."""
    out = {label.split(" ")[0] for label, units in (res.get("at_chance") or {}).items() if units}
    for model, t in (res.get("top1") or {}).items():
        if not isinstance(t, dict):
            continue
        if "at_chance" in t:
            stuck = bool(t["at_chance"])
        else:
            stuck = t.get("source") == "measured here" and any(
                e > RECIPE.chance_error - LEFT_CHANCE_BY for e in (t.get("units") or {}).values())
        if stuck:
            out.add(model)
    return out


def _one_test_set(parts: list[dict], names: list[str]) -> None:
    """PoolError unless every part was scored on one test set (results.json "test_set", by content); parts written
    before it was recorded pool only with each other."""
    seen = {json.dumps(res.get("test_set") or None, sort_keys=True) if isinstance(res, dict) else "null"
            for res in parts}
    if len(seen) > 1:
        sets = "; ".join(f"{n}: {(r.get('test_set') or {}).get('name', 'not recorded')}" if isinstance(r, dict)
                         else f"{n}: not recorded" for r, n in zip(parts, names))
        raise PoolError(f"the parts were not scored on one test set ({sets}): their comparisons are not one family")


def _one_pretraining_size(parts: list[dict], names: list[str]) -> int | None:
    """The image size every part that pretrained its backbones pretrained them at (results.json
    "pretrain_image_size"; a part that pretrained before it was recorded: 32), PoolError naming them otherwise."""
    sizes = {n: r.get("pretrain_image_size", 32 if r.get("pretraining") else None)
             for r, n in zip(parts, names) if isinstance(r, dict)}
    seen = {v for v in sizes.values() if v is not None}
    if len(seen) > 1:
        raise PoolError("the parts pretrained at different image sizes ("
                        + "; ".join(f"{n}: {v} px" for n, v in sizes.items() if v is not None)
                        + "): their comparisons are not one family")
    return seen.pop() if seen else None


def _merge(parts: list[dict], names: list[str]) -> tuple[dict, dict[str, list[str]]]:
    """(the parts' lists and maps in one results dict, kind -> the part each listed comparison came from)."""
    pooled: dict = {k: {} for k in MERGED} | {k: [] for k in CONCATENATED} | {k: [] for k in COMPARISON_KINDS}
    origin: dict[str, list[str]] = {k: [] for k in COMPARISON_KINDS}
    owner: dict[str, str] = {}
    for res, name in zip(parts, names):
        if not isinstance(res, dict) or not isinstance(res.get("groups"), list):
            raise RunFileError(f"{name}: not a main job's results.json (no list of groups)")
        for g in res["groups"]:
            label = g.get("name") if isinstance(g, dict) else None
            if label in owner:
                raise PoolError(f"{name}: group {label} is also in {owner[label]}: parts of one preset run "
                                "different groups (pool the parts, not two runs of one part)")
            owner[label] = name
        for k in MERGED:
            pooled[k] |= res.get(k) or {}
        for k in (*CONCATENATED, *COMPARISON_KINDS):
            pooled[k] += res.get(k) or []
        for k in COMPARISON_KINDS:
            origin[k] += [name] * len(res.get(k) or [])
    return pooled, origin


def _controls(pooled: dict, parts: list[dict], names: list[str], metric: str) -> tuple[list, str | None]:
    """(each part's control recomputed from its groups' per-unit values on `metric`, the pooled family's reading of
    its transfer no-calls: the first part's whose control was not called the right way round, or that ran none)."""
    controls, reading = [], None
    for res, name in zip(parts, names):
        d = res.get("control")
        if isinstance(d, dict) and {"a", "b"} <= set(d):
            c = recomputed(pooled, "deltas", 0, {**d, "metric": metric})
            if c is None:
                raise RunFileError(f"{name}: its control {d['a']} vs {d['b']} has no per-unit {metric} values in it")
            controls.append((name, c, len(res.get("control_at_chance") or [])))
            why = (None if c.call == c.a else f"{name}: {NOT_SEEN}" if c.call is None else
                   f"{name}: {FAILED_ASSAY}")
        elif "gate" not in res and "reading" not in res:  # written before the control existed
            why = f"{name} ran no positive control (written before the control existed)"
        else:
            why = res.get("reading", res.get("gate"))
            why = why and f"{name}: {why}"
        reading = reading or why
    return controls, reading


def pool_results(parts: list[dict], names: list[str], preset: str = "") -> dict:
    """The parts (results.json dicts, named by `names` in messages and in the family) as one results dict."""
    _one_test_set(parts, names)
    size = _one_pretraining_size(parts, names)
    pooled, origin = _merge(parts, names)
    untrained = _untrained(pooled)
    metric = COMPARED_METRICS[0]
    keyed = []
    for kind in COMPARISON_KINDS:
        for i, d in enumerate(pooled[kind]):
            if not isinstance(d, dict) or not {"a", "b", "metric"} <= set(d):
                continue
            if kind in GROUP_KINDS and d["metric"] not in (TOP1_METRIC, metric):  # its test-set SE was another
                d = {**d, "metric": metric, "test_set_se": None}  # metric's
            sides = {_backbone_of(pooled, d["a"]), _backbone_of(pooled, d["b"])}
            if kind in GROUP_KINDS and sides & untrained:
                continue
            c = recomputed(pooled, kind, i, d)
            if c is None:  # a listed comparison the file cannot back: never dropped in silence
                raise RunFileError(f"{origin[kind][i]}: {kind} lists {d['a']!r} vs {d['b']!r}, whose per-unit "
                                   f"{d['metric']} values are not in it: it cannot be decided from the file")
            keyed.append((kind, c))
    controls, reading = _controls(pooled, parts, names, metric)
    reading = reading if any(kind in GROUP_KINDS for kind, _ in keyed) else None  # no transfer no-call to read
    family = f"the {preset + ' ' if preset else ''}preset's {len(keyed)} comparisons over {len(parts)} part(s)"
    adjusted = adjust([c for _, c in keyed], family)
    for kind in COMPARISON_KINDS:
        pooled[kind] = []
    for (kind, _), c in zip(keyed, adjusted):
        c = read_as([c], reading)[0] if reading and kind not in UNGATED_FIELDS else c
        pooled[kind].append({**asdict(c), "call": c.call, "mde": c.mde})
    pooled.pop("gate", None)  # a part's veto, written before Holm alone decided
    pooled |= {"family": family, "reading": reading, "parts": list(names), "decided_on": metric,
               "test_set": parts[0].get("test_set") or {},  # one for all parts (_one_test_set)
               "pretrain_image_size": size,
               "controls": [{**asdict(c), "call": c.call, "mde": c.mde, "part": name, "pretraining_at_chance": n}
                            for name, c, n in controls]}
    pooled.pop("control", None)
    _rank(pooled, untrained)
    return pooled


def _backbone_of(pooled: dict, name: str) -> str:
    """The backbone a comparison's side names: a detection group's, or the name itself (a backbone's top-1)."""
    group = next((g for g in pooled["groups"] if isinstance(g, dict) and g.get("name") == name), None)
    return group.get("backbone", name) if group else name


def _rank(pooled: dict, untrained: set[str]) -> None:
    """The leaderboard and the correlation under the rules: a net at chance not ranked, the rest by AP."""
    if not pooled["leaderboard"]:
        pooled["correlation"] = None
        return
    try:
        rows = leaderboard_from_json(pooled["leaderboard"])
    except (TypeError, ValueError) as err:
        raise RunFileError(f"the leaderboard of {', '.join(pooled['parts'])}: not what results.json holds "
                           f"({err})") from None
    rows = [replace(r, not_ranked=(f"{NEVER_TRAINED} (top-1 error not {LEFT_CHANCE_BY:g} points below a guess's)"
                                   if r.backbone in untrained else "")) for r in rows]
    rows.sort(key=lambda r: (bool(r.not_ranked), -(r.metrics["AP"].mean if "AP" in r.metrics else -1e9)))
    pooled["leaderboard"] = [asdict(r) for r in rows]
    pooled["correlation"] = asdict(transfer_correlation(rows))


def pool_parts(paths, preset: str = "") -> dict:
    """pool_results of results.json files or job directories (their results.json), named by their paths."""
    from pathlib import Path

    from classification.engine.run_files import JOB_RESULTS, read_json

    files = [Path(p) / JOB_RESULTS if Path(p).is_dir() else Path(p) for p in paths]
    parts = []
    for f in files:
        data = read_json(f)
        if data is None:
            raise FileNotFoundError(f"{f}: no such results file (a part is a results.json or a job directory)")
        parts.append(data)
    return pool_results(parts, [str(f) for f in files], preset)
