"""Two runs of the main job side by side (another thread count, machine or torch build): how far each stage's
number moved, and whether the backbone verdict survived (tools/compare_jobs.py).

The stages are matched by name (pretrain/<net>_p<seed>, detect/<leg>); their commands are compared with the
machine-specific parts (where the repository and the output directory are) removed, so a difference in settings
is named rather than passed off as noise -- and so is every stage that starts from one (a detection leg from a
pretraining run with other settings has other inputs, whatever its own command). The verdicts are recomputed from
each job's results.json (its per-unit values) with the one statistic every comparison uses
(report.comparison): a call only when the interval over the pretraining runs, Holm-adjusted over the job's family
(every comparison its results.json lists), excludes 0 -- Holm alone, its positive control reading the no-calls.
Each job is re-decided on its own metric: the question here is whether a rerun reproduces a verdict.
Deciding old jobs under today's rules is pool.py's.
"""

from __future__ import annotations

import difflib
import math
import os
import statistics
from dataclasses import asdict
from pathlib import Path

from classification.engine.run_files import JOB_RESULTS, STAGE_RECORD, RunFileError, read_classification_run, read_json

from ..engine.code_version import describe_versions
from ..report.comparison import Comparison, adjust, compare, contrast, read_as, with_test_set
from ..report.runs import load_run
from .family import TOP1_METRIC, compare_top1
from .graph import StageRecord, read_stage_record

__all__ = ["compare_jobs", "comparison_lines", "recomputed", "recomputed_family", "COMPARISON_KINDS"]

PRETRAIN_METRIC = "top-1 error"  # %, 100 - the pretraining run's final top-1 accuracy on its val items
DETECT_METRICS = ("AP50", "AP")
DEGRADATION_METRIC = "training error"  # %, a degradation net's running training error at its last iteration


def _job_dir(path) -> Path:
    job = Path(path)
    if not job.is_dir():
        raise FileNotFoundError(f"{job}: no such directory")
    if not (job / JOB_RESULTS).is_file() or not any((job / d).is_dir() for d in ("pretrain", "detect")):
        raise ValueError(f"{job}: not the output of a finished main job (tools/main_job.py --output-dir): "
                         f"it needs {JOB_RESULTS} and pretrain/ or detect/")
    return job


def _results(job: Path) -> dict:
    res = read_json(job / JOB_RESULTS)
    if not isinstance(res, dict) or not isinstance(res.get("groups"), list):
        raise RunFileError(f"{job / JOB_RESULTS}: not the results of this version of the main job (no list of "
                           "groups); rerun its report with tools/main_job.py --report-only")
    return res


def _portable(item: str, job: Path) -> str:
    """A command-line item without where things are on this machine: output paths relative to the job, other
    paths by their last two components (configs/<dir>/<file>, tools/<tool>.py)."""
    if "/" not in item:
        return item
    p = Path(item)
    try:
        return "<job>/" + str(p.resolve().relative_to(job.resolve()))
    except ValueError:
        return "/".join(p.parts[-2:])


def _stage_numbers(stage: Path) -> tuple[dict[str, float], str | None]:
    """(metric -> finite value, why unusable or None) of one stage directory."""
    if stage.parent.name == "pretrain":
        pre = read_classification_run(stage)
        return ({PRETRAIN_METRIC: pre.top1_error}, None) if pre.top1_error is not None else ({}, pre.status)
    if stage.parent.name == "degradation":
        run = read_classification_run(stage)
        if not run.finished or not run.history.get("train_error"):
            return {}, run.status if not run.finished else "no training error recorded"
        return {DEGRADATION_METRIC: run.history["train_error"][-1], PRETRAIN_METRIC: run.top1_error}, None
    run = load_run(stage)
    if run.status != "finished":
        return {}, run.status
    return {k: run.metrics[k] for k in DETECT_METRICS if k in run.metrics}, None


def _portable_record(stage: Path, job: Path) -> StageRecord:
    """The stage's record with its command made portable; an empty record without a readable one."""
    rec = read_stage_record(stage)
    if rec is None:
        return StageRecord(None, None)
    return StageRecord(None if rec.argv is None else [_portable(a, job) for a in rec.argv], rec.threads, rec.code)


def _one_clean_commit(versions: list[list[dict]]) -> str | None:
    """The commit every stage ran at, all of each stage's runs included, with no uncommitted changes; else None."""
    commits = {v.get("commit") if v.get("dirty") is False else None for vs in versions for v in vs}
    ok = len(commits) == 1 and None not in commits and all(versions)
    return next(iter(commits)) if ok else None


def _differences(argv_a: list[str] | None, argv_b: list[str] | None) -> list[str]:
    """The command lines' differences, aligned (difflib) so that an option one side lacks does not shift the rest:
    'KEY a vs b' for a changed value (the item before it names it), 'ITEMS: only in A / B' for an added one."""
    if argv_a is None or argv_b is None:
        return [f"no {STAGE_RECORD} record in " + ("A" if argv_a is None else "B")]
    out = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(a=argv_a, b=argv_b, autojunk=False).get_opcodes():
        if op == "replace":
            key = f"{argv_a[i1 - 1]} " if i1 else ""
            out.append(f"{key}{' '.join(argv_a[i1:i2])} vs {' '.join(argv_b[j1:j2])}")
        elif op == "delete":
            out.append(f"{' '.join(argv_a[i1:i2])}: only in A")
        elif op == "insert":
            out.append(f"{' '.join(argv_b[j1:j2])}: only in B")
    return out


def _inputs(argv: list[str] | None) -> set[str]:
    """The job's stages a stage reads (its portable command names files under <job>/<kind>/<stage>/)."""
    return {"/".join(a.split("/")[1:3]) for a in argv or [] if a.startswith("<job>/") and a.count("/") >= 3}


def _stages(job: Path) -> dict[str, Path]:
    return {f"{kind}/{d.name}": d for kind in ("pretrain", "detect", "degradation") if (job / kind).is_dir()
            for d in sorted((job / kind).iterdir()) if d.is_dir()}


# results.json's lists, in the order JobResults.comparisons() adjusts them (ties keep this order: the same ranks)
COMPARISON_KINDS = ("pretraining_order", "arms", "gains", "deltas", "plain_vs_residual", "degradation_comparisons",
                    "interactions", "layer_response_comparisons")
#   ("gains": pretrained vs scratch in jobs written before the arms)
# no control reads their no-calls: the degradation experiment's and the pretraining order (results.UNGATED_FIELDS)
UNGATED_KINDS = ("pretraining_order", "degradation_comparisons", "interactions", "layer_response_comparisons")


def recomputed(res: dict, kind: str, index: int, d: dict) -> Comparison | None:
    """The listed comparison d (the index-th of its kind), recomputed from a job's per-unit values: its detection
    groups, or for a degradation comparison its nets' training errors (lower better), for an interaction the four
    nets results.json names; None if absent."""
    metric, a, b = d["metric"], d["a"], d["b"]
    try:
        nets = {n.get("model"): n for n in res.get("degradation") or [] if isinstance(n, dict)}
        if kind == "degradation_comparisons":
            return compare(metric, a, nets[a]["errors"]["train"], "run", b, nets[b]["errors"]["train"], "run",
                           higher_is_better=False)
        if kind == "layer_response_comparisons":
            lr = res["layer_responses"]
            return compare(metric, a, lr[a], "run", b, lr[b], "run", higher_is_better=False)
        if kind == "pretraining_order" or kind == "plain_vs_residual" and metric == TOP1_METRIC:  # pretraining runs
            return compare_top1(a, res["top1"][a]["units"], b, res["top1"][b]["units"])
        if kind == "interactions":
            p_deep, p_shallow, r_deep, r_shallow = (nets[m]["errors"]["train"] for m in res["interaction_terms"][index])
            return contrast(metric, a, (p_deep, p_shallow), b, (r_deep, r_shallow), "run", higher_is_better=False)
        groups = {g.get("name"): g for g in res["groups"] if isinstance(g, dict)}
        ga, gb = groups[a], groups[b]
        c = compare(metric, a, ga["values"][metric], ga["unit"], b, gb["values"][metric], gb["unit"])
        return None if c is None else with_test_set(c, *_test_set_part(d))
    except (KeyError, TypeError, AttributeError, IndexError, ValueError):
        return None


def _test_set_part(d: dict) -> tuple[float | None, int | None]:
    """The test-set part the job measured (its runs' detections are not in results.json): a finite SE >= 0 and a
    positive image count, else none."""
    se, images = d.get("test_set_se"), d.get("test_images")
    if isinstance(se, (int, float)) and not isinstance(se, bool) and math.isfinite(se) and se >= 0 and \
            isinstance(images, int) and not isinstance(images, bool) and images > 0:
        return float(se), images
    return None, None


def recomputed_family(res: dict) -> dict[tuple[str, str, str, str], Comparison]:
    """(kind, metric, A, B) -> each comparison a job's results.json lists, recomputed and adjusted as the job
    adjusted them: one Holm family over all of them (comparison.adjust)."""
    keyed = []
    for kind in COMPARISON_KINDS:
        for i, d in enumerate(res.get(kind) or []):
            if isinstance(d, dict) and {"a", "b", "metric"} <= set(d):
                if (c := recomputed(res, kind, i, d)) is not None:
                    keyed.append(((kind, d["metric"], d["a"], d["b"]), c))
    adjusted = adjust([c for _, c in keyed], res.get("family") or f"the job's {len(keyed)} comparisons")
    reading = res.get("reading", res.get("gate"))  # "gate": written when the control vetoed calls
    if reading:  # the job's control was not called the right way round (or it ran none): its no-calls read so
        adjusted = [read_as([c], reading)[0] if key[0] not in UNGATED_KINDS else c
                    for (key, _), c in zip(keyed, adjusted)]
    return {key: c for (key, _), c in zip(keyed, adjusted)}


def _verdicts(res_a: dict, res_b: dict) -> list[dict]:
    """Every comparison job A made -- backbones, pretrained vs scratch, the degradation depths and their
    interaction -- recomputed in both jobs, each within its own job's family."""
    fam_a, fam_b = recomputed_family(res_a), recomputed_family(res_b)
    out = []
    for kind in COMPARISON_KINDS:
        for d in res_a.get(kind) or []:
            if not isinstance(d, dict) or not {"a", "b", "metric"} <= set(d):
                continue
            key = (kind, d["metric"], d["a"], d["b"])
            row = {"a": d["a"], "b": d["b"], "metric": d["metric"], "kind": kind}
            for side, fam in (("A", fam_a), ("B", fam_b)):
                c = fam.get(key)
                row[side] = None if c is None else {**asdict(c), "call": c.call, "mde": c.mde, "text": c.describe()}
            row["same_call"] = bool(row["A"] and row["B"] and row["A"]["call"] == row["B"]["call"])
            out.append(row)
    return out


def compare_jobs(a, b) -> dict:
    """Everything tools/compare_jobs.py prints, as numbers: per matched stage each metric in A and B and B - A;
    per metric the mean and largest |B - A|; the thread counts; stages whose settings differ; the verdicts."""
    job_a, job_b = _job_dir(a), _job_dir(b)
    if os.path.samefile(job_a, job_b):  # it reported "perfect reproducibility" (also through a symlink or mount)
        raise ValueError(f"{a} and {b} are the same job directory ({job_a.resolve()}): a job compared with itself "
                         "agrees by construction; give the output of another run of the job")
    res_a, res_b = _results(job_a), _results(job_b)
    st_a, st_b = _stages(job_a), _stages(job_b)
    out: dict = {"a": str(job_a), "b": str(job_b), "rows": [], "unusable": [], "settings_differ": [],
                 "only_in_a": sorted(set(st_a) - set(st_b)), "only_in_b": sorted(set(st_b) - set(st_a)),
                 "threads": {"A": set(), "B": set()}}
    common = sorted(set(st_a) & set(st_b))
    records = {name: (_portable_record(st_a[name], job_a), _portable_record(st_b[name], job_b)) for name in common}
    differ = {name: _differences(ra.argv, rb.argv) for name, (ra, rb) in records.items() if ra.argv != rb.argv}
    other_data = _other_test_data(res_a, res_b)
    for name in common:  # scored on other images: a difference of the data, not run-to-run movement
        if other_data and st_a[name].parent.name == "detect":
            differ.setdefault(name, []).append(other_data)
    out["other_test_data"] = other_data
    grown = True
    while grown:  # a stage that starts from a stage with other settings (detection from its pretraining) differs too
        grown = False
        for name, (ra, rb) in records.items():
            if name in differ:
                continue
            upstream = sorted(u for u in _inputs(ra.argv) | _inputs(rb.argv) if u in differ)
            if upstream:
                differ[name] = [f"starts from {', '.join(upstream)}, which ran other settings"]
                grown = True
    out["code"] = {side: sorted({describe_versions(records[n][i].code) for n in common})
                   for i, side in enumerate(("A", "B"))}
    out["same_clean_commit"] = _one_clean_commit([r.code for n in common for r in records[n]])
    for name in common:
        rec_a, rec_b = records[name]
        out["threads"]["A"].add(rec_a.threads)
        out["threads"]["B"].add(rec_b.threads)
        same = name not in differ
        if not same:
            out["settings_differ"].append({"stage": name, "differences": differ[name]})
        (nums_a, why_a), (nums_b, why_b) = _stage_numbers(st_a[name]), _stage_numbers(st_b[name])
        if why_a or why_b:
            out["unusable"].append({"stage": name, "A": why_a, "B": why_b})
        for metric in sorted(set(nums_a) & set(nums_b)):
            out["rows"].append({"stage": name, "metric": metric, "A": nums_a[metric], "B": nums_b[metric],
                                "diff": nums_b[metric] - nums_a[metric], "same_settings": same})
    out["threads"] = {k: sorted(v, key=lambda t: (t is None, t or 0)) for k, v in out["threads"].items()}
    moved = {}
    for metric in (PRETRAIN_METRIC, *DETECT_METRICS, DEGRADATION_METRIC):
        diffs = [abs(r["diff"]) for r in out["rows"] if r["metric"] == metric and r["same_settings"]]
        if diffs:
            moved[metric] = {"mean_abs_diff": statistics.fmean(diffs), "max_abs_diff": max(diffs), "n": len(diffs)}
    out["moved"] = moved
    out["verdicts"] = _verdicts(res_a, res_b)
    return out


def _other_test_data(res_a: dict, res_b: dict) -> str | None:
    """Why the two jobs' legs were scored on other test data (results.json's test_set: the registered set by
    content), or None when both recorded the same or either did not record it."""
    ta, tb = res_a.get("test_set"), res_b.get("test_set")
    if not (isinstance(ta, dict) and isinstance(tb, dict) and ta and tb) or ta == tb:
        return None
    return (f"scored on other test data (A: {ta.get('name')} {str(ta.get('content'))[:19]}..., B: {tb.get('name')} "
            f"{str(tb.get('content'))[:19]}...)")


def _threads(values: list) -> str:
    known = [v for v in values if v is not None]
    text = "/".join(str(v) for v in known) or "not recorded"
    return text + (" (some stages did not record it)" if len(known) < len(values) else "")


def comparison_lines(cmp: dict) -> list[str]:
    lines = [f"A: {cmp['a']} (threads per stage: {_threads(cmp['threads']['A'])})",
             f"B: {cmp['b']} (threads per stage: {_threads(cmp['threads']['B'])})"]
    if cmp["settings_differ"]:
        lines.append("settings differ (these stages ran other commands or started from stages that did; their "
                     "differences are not noise):")
        lines += [f"  {d['stage']}: {'; '.join(d['differences'][:4])}" for d in cmp["settings_differ"]]
    else:
        lines.append("settings: every matched stage ran the same command (paths aside)")
    code_a, code_b = cmp["code"]["A"], cmp["code"]["B"]
    if cmp["same_clean_commit"]:
        lines.append(f"code: every matched stage ran at {cmp['same_clean_commit'][:10]} in both jobs")
    else:
        lines.append(f"code: A ran at {'; '.join(code_a) or '-'}, B at {'; '.join(code_b) or '-'} -- differences "
                     "between runs of other code are not only noise")
    for side in ("a", "b"):
        if cmp[f"only_in_{side}"]:
            lines.append(f"only in {side.upper()} (not compared): {', '.join(cmp[f'only_in_{side}'])}")
    for u in cmp["unusable"]:
        lines.append(f"not compared, {u['stage']}: " + "; ".join(f"{s}: {u[s]}" for s in ("A", "B") if u[s]))
    lines.append(f"{'stage':<30} {'metric':<12} {'A':>8} {'B':>8} {'B - A':>8}")
    lines += [f"{r['stage']:<30} {r['metric']:<12} {r['A']:8.2f} {r['B']:8.2f} {r['diff']:+8.2f}"
              + ("" if r["same_settings"] else "  (other settings)") for r in cmp["rows"]]
    for metric, m in cmp["moved"].items():
        lines.append(f"moved, {metric}: mean |B - A| {m['mean_abs_diff']:.2f}, largest {m['max_abs_diff']:.2f} "
                     f"(n={m['n']} stages with the same settings)")
    for v in cmp["verdicts"]:
        lines.append(f"verdict {v['a']} vs {v['b']}, {v['metric']}: "
                     + ("the same call" if v["same_call"] else "NOT the same call"))
        lines += [f"  {s}: {v[s]['text'] if v[s] else 'not in its results'}" for s in ("A", "B")]
    return lines
