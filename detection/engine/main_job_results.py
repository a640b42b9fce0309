"""The main job's results as numbers read from its runs -- pretraining error and detection AP over nested seeds,
gains over scratch, backbone deltas with their spread -- and the summary and report notes written from them."""

from __future__ import annotations

import contextlib
import json
import math
import statistics
from typing import TYPE_CHECKING

from .stages import JobStage

if TYPE_CHECKING:
    from .main_job import MainJobPlan

__all__ = ["nested_spread", "job_results", "summary_lines", "generated_notes"]


def nested_spread(values: dict[tuple[int, int], float]) -> dict:
    """Mean and spreads of a metric over (pretraining seed, detection seed) runs: sd over all runs, sd of the
    per-pretraining-seed means (between), pooled sd over detection seeds within a pretraining seed (within)."""
    vals = list(values.values())
    by_p: dict[int, list[float]] = {}
    for (p, _), v in values.items():
        by_p.setdefault(p, []).append(v)
    means = [statistics.fmean(v) for v in by_p.values()]
    within = [statistics.variance(v) for v in by_p.values() if len(v) > 1]
    return {"mean": statistics.fmean(vals), "n": len(vals), "sd": statistics.stdev(vals) if len(vals) > 1 else None,
            "sd_between_pretraining_seeds": statistics.stdev(means) if len(means) > 1 else None,
            "sd_within_pretraining_seed": math.sqrt(statistics.fmean(within)) if within else None,
            "pretraining_seeds": len(by_p)}


def _pm(stat: dict | None, nd: int = 1, unit: str = "") -> str:
    if not stat:
        return "—"
    sd = f" ± {stat['sd']:.{nd}f}" if stat.get("sd") is not None else ""
    return f"{stat['mean']:.{nd}f}{sd}{unit} (n={stat['n']})"


def job_results(stages: list[JobStage], plan: MainJobPlan) -> dict:
    """Everything the summary and the notes say, as numbers read from the runs: per backbone the pretraining error
    over seeds, per detection group AP / AP50 / APs/m/l with nested spreads, gains over scratch, backbone deltas."""
    from ..report.groups import spread_verdict
    from ..report.runs import load_run

    out: dict = {"pretraining": {}, "groups": {}, "deltas": [], "gains": []}
    for model in plan.backbones:
        errs = {}
        for s in stages:
            if s.kind == "pretrain" and s.model == model:
                with contextlib.suppress(OSError, ValueError, KeyError):
                    m = json.loads((s.out / "metrics.json").read_text())
                    errs[(s.pretrain_seed, 0)] = 100 - m["final"]["top1"]
        if errs:
            out["pretraining"][model] = nested_spread(errs)
    for s in stages:
        if s.kind != "detect":
            continue
        run = load_run(s.out)
        if run.status != "finished":
            continue
        g = out["groups"].setdefault(s.group, {"backbone": s.model, "init": s.init, "values": {}})
        for key in ("AP", "AP50", "AP75", "APs", "APm", "APl"):
            v = run.metrics.get(key)
            if v is not None and not math.isnan(v):
                g["values"].setdefault(key, {})[(s.pretrain_seed or 0, s.detect_seed)] = v
    for g in out["groups"].values():
        g["stats"] = {k: nested_spread(v) for k, v in g.pop("values").items()}
    groups = out["groups"]
    for model in plan.backbones:
        pre, scr = groups.get(f"{model}_pretrained"), groups.get(f"{model}_scratch")
        if pre and scr and "AP50" in pre["stats"] and "AP50" in scr["stats"]:
            a, b = pre["stats"]["AP50"], scr["stats"]["AP50"]
            out["gains"].append({"backbone": model, "metric": "AP50", "delta": a["mean"] - b["mean"],
                                 "verdict": spread_verdict(a["mean"] - b["mean"], a["sd"], b["sd"])})
    base = groups.get(f"{plan.backbones[0]}_pretrained")
    for model in plan.backbones[1:]:
        other = groups.get(f"{model}_pretrained")
        if base and other:
            for key in ("AP50", "AP"):
                if key in base["stats"] and key in other["stats"]:
                    a, b = other["stats"][key], base["stats"][key]
                    out["deltas"].append({"a": f"{model}_pretrained", "b": f"{plan.backbones[0]}_pretrained",
                                          "metric": key, "delta": a["mean"] - b["mean"],
                                          "verdict": spread_verdict(a["mean"] - b["mean"], a["sd"], b["sd"])})
    return out


def summary_lines(results: dict, plan: MainJobPlan, chance: dict, manifest: dict) -> list[str]:
    where = "held-out training data (model selection)" if plan.selection else \
        f"embedded default, {manifest['counts']['val']['images']} val images"
    lines = [f"Main job summary -- {where} ({manifest['source']} objects, classes "
             f"{', '.join(manifest['classes'])}); all nets at width {plan.width:g}; {len(plan.pretrain_seeds)} "
             f"pretraining seed(s) x {len(plan.detect_seeds)} detection seed(s) per backbone:"]
    for model, st in results["pretraining"].items():
        lines.append(f"  pretraining {model}: val top-1 error {_pm(st, unit='%')} after {plan.pretrain_epochs:g} "
                     f"epochs ({plan.pretrain_iterations() * plan.pretrain_batch:,} images)")
    for name, g in results["groups"].items():
        s = g["stats"]
        lines.append(f"  {name:<22} AP50 {_pm(s.get('AP50')):<22} AP {_pm(s.get('AP')):<22} "
                     f"APs/APm/APl {'/'.join(_pm(s.get(k)).split(' ')[0] for k in ('APs', 'APm', 'APl'))}")
        ap50 = s.get("AP50") or {}
        if ap50.get("sd_between_pretraining_seeds") is not None or ap50.get("sd_within_pretraining_seed") is not None:
            b, w = ap50.get("sd_between_pretraining_seeds"), ap50.get("sd_within_pretraining_seed")
            lines.append(f"  {'':<22} AP50 sd between pretraining seeds {'—' if b is None else f'{b:.1f}'}, "
                         f"within a pretraining seed (detection seeds) {'—' if w is None else f'{w:.1f}'}")
    for gain in results["gains"]:
        lines.append(f"  gain from pretraining, {gain['backbone']}: {gain['delta']:+.1f} AP50 -- {gain['verdict']}")
    for d in results["deltas"]:
        lines.append(f"  {d['a']} vs {d['b']}: Δ{d['metric']} {d['delta']:+.2f} -- {d['verdict']}")
    lines.append(f"  chance level (100 random boxes per image): AP50 {chance['AP50']:.2f}, AP {chance['AP']:.2f}")
    return lines


def generated_notes(results: dict, plan: MainJobPlan) -> list[str]:
    """Report notes: what was run, and only the statements the numbers above support; causes the job does not
    measure are said to be not established."""
    lrs = ", ".join(f"{m} {plan.lr_for(m):g}" for m in plan.backbones)
    notes = [f"The paper's experiment in miniature: {', '.join(plan.backbones)} at width {plan.width:g}, each "
             f"pretrained for classification ({plan.pretrain_epochs:g} epochs of Fashion-MNIST train items composited "
             f"on random backgrounds at {plan.pretrain_image_size} px, {len(plan.pretrain_seeds)} seed(s)), then "
             f"transferred to Faster R-CNN ({plan.detect_iterations} iterations of 2 images, "
             f"{len(plan.detect_seeds)} detection seed(s) per pretraining seed) beside from-scratch controls with "
             "the identical detection schedule. Smoke scale on a CPU: compare the rows with each other and with "
             "chance, not with the paper.",
             f"Pretraining recipe: identical data, augmentation, schedule and batch; the learning rate is each net's "
             f"reference one ({lrs}), and ResNets start with the last BN of each block at zero."]
    for gain in results["gains"]:
        if gain["verdict"].startswith("beyond"):
            notes.append(f"Pretraining raises {gain['backbone']}'s AP50 by {gain['delta']:.1f} over the from-scratch "
                         f"control ({gain['verdict']}); the two differ only in the initialisation.")
        else:
            notes.append(f"Pretraining vs scratch for {gain['backbone']}: {gain['delta']:+.1f} AP50, "
                         f"{gain['verdict']}: no effect of pretraining is established.")
    pre = results["pretraining"]
    for d in results["deltas"]:
        if d["metric"] != "AP50":
            continue
        a, b = d["a"].rsplit("_pretrained", 1)[0], d["b"].rsplit("_pretrained", 1)[0]
        order = (f"{a} ahead of {b} by {d['delta']:.1f} AP50" if d["delta"] > 0 else
                 f"{b} ahead of {a} by {-d['delta']:.1f} AP50")
        if d["verdict"].startswith("beyond"):
            text = f"Backbones: {order}, {d['verdict']} (spread over pretraining and detection seeds)."
        else:
            text = f"Backbones: {order}, {d['verdict']}: the order of the two backbones is not established."
        if a in pre and b in pre:
            text += (f" Measured beside it: pretraining top-1 error {a} {pre[a]['mean']:.1f}%, {b} "
                     f"{pre[b]['mean']:.1f}%; AP by object size in the table. This job does not measure what "
                     "causes the difference; no cause is claimed.")
        notes.append(text)
    return notes
