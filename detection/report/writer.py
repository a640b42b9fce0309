"""write_report: tables (Markdown / XHTML / JSON / CSV), generated notes on the conditions, pretraining section,
plots and the qualitative panel."""

from __future__ import annotations

import csv
import errno
import io
import json
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path

from backbones import model_info
from backbones.checkpoint_io import atomic_write_text
from backbones.strict_json import strict_json
from classification.engine.errors import UsageError

from .comparison import Comparison, adjust, find
from .conditions import condition_notes
from .conditions import differences as config_differences
from .document import Document, Estimate, Section, Table, csv_cell, fmt, render_html, render_markdown
from .groups import RunGroup, compare_groups, group_runs
from .panel import MAX_COLUMNS, SCORE_THRESHOLD, draw_panel
from .paper import PAPER_REFERENCE, paper_reference
from .plots import detection_plots, pretraining_plot
from .runs import COCO_COLUMNS, VOC_COLUMNS, PretrainInfo, RunResult, is_run_directory, load_run

__all__ = ["write_report", "run_gmacs", "ReportSection"]


@dataclass(frozen=True)
class ReportSection:
    """A report section: its title, an optional table (head, rows of cells), lines of text, figures as (PNG file in
    the report's directory, caption). The panel, pretraining and plots sections are these; a caller's (the main
    job's degradation experiment) go after the main figure."""

    title: str
    lines: tuple[str, ...] = ()
    table: tuple[list[str], list[list]] | None = None
    figures: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class ResultKind:
    """How a kind of detection result (RunResult.kind) is tabled: its box AP table's title, its metric columns and
    the metric its comparisons are on unless the caller names one."""

    label: str
    columns: tuple[str, ...]
    compared: str


RESULT_KINDS = {"coco": ResultKind("COCO-style box AP", COCO_COLUMNS, "AP"),
                "voc": ResultKind("PASCAL VOC box AP", VOC_COLUMNS, "AP50")}


def run_gmacs(config: dict) -> float | None:
    """GMACs at 224x224 (paper Table 1 counting, with the 1000-way classifier) of the backbone a run trained, built
    from the MODEL.BACKBONES its config.yaml recorded -- stride placement, pre-activation and shortcut included
    (a run on torchvision weights has the stride in the 3x3: 5-8% fewer than MSRA's placement)."""
    recorded = ((config or {}).get("MODEL") or {}).get("BACKBONES") or {}
    return _gmacs(json.dumps(recorded, sort_keys=True, default=str)) if recorded.get("NAME") else None


@cache
def _gmacs(backbones_json: str) -> float | None:
    from detectron2.config import get_cfg

    from backbones import complexity, create_model

    from ..config import add_backbones_config
    from ..modeling.backbone import backbone_spec_from_cfg

    cfg = add_backbones_config(get_cfg())  # keys a run did not record (an older config) take the defaults
    cfg.MODEL.BACKBONES.update({k: v for k, v in json.loads(backbones_json).items() if k in cfg.MODEL.BACKBONES})
    try:
        spec = backbone_spec_from_cfg(cfg)
        return complexity(create_model(spec.name, num_classes=1000, **spec.options)).gmacs
    except (ValueError, TypeError):  # not a backbones model name: no FLOPs column entry
        return None


def _of_runs(g: RunGroup, m) -> str:
    """The runs a cell rests on, where fewer than the row's n (a run without the metric, or with NaN): the row said
    n 3 over a mean of 2."""
    return f" ({m.runs} of {g.n} runs)" if m.runs < g.n else ""


def _fmt_stat(g: RunGroup, key: str) -> str:
    m = g.metrics.get(key)
    if m is None:
        return "—"
    return (fmt(m.mean) if m.sd is None else f"{fmt(m.mean)} ± {fmt(m.sd)}") + _of_runs(g, m)


def _scratch_control(g: RunGroup, groups: list[RunGroup]) -> RunGroup | None:
    """The from-scratch group with the same backbone, width, data and schedule as the pretrained group `g`."""
    if g.first.init != "pretrained":
        return None
    r = g.first
    for other in groups:
        o = other.first
        if (other is not g and other.n and o.init == "scratch" and o.backbone == r.backbone and o.width == r.width
                and o.dataset == r.dataset and o.train_datasets == r.train_datasets
                and o.config.get("SOLVER") == r.config.get("SOLVER")):
            return other
    return None


ComparisonSource = Callable[[str, str, str], Comparison | None]  # (group A, group B, metric) -> A vs B


def _table_family(groups: list[RunGroup], baseline: RunGroup | None, controls: dict, main: str,
                  source: ComparisonSource | None) -> list[Comparison]:
    """The comparisons the table's cells print (comparison.find reads each from either side): each group against
    the baseline and against its scratch control. With `source` (the main job: its one family of comparisons,
    already adjusted) those are looked up there and a pair outside it is not printed; without, the table's
    distinct pairs are one family, Holm-adjusted (comparison.adjust)."""
    pairs = [(g, baseline) for g in groups if baseline is not None and g is not baseline and g.n]
    pairs += [(g, controls[id(g)]) for g in groups if controls[id(g)] is not None]
    unique: dict[frozenset, Comparison] = {}
    for g, other in pairs:
        key = frozenset((g.name, other.name))
        if key not in unique:
            c = source(g.name, other.name, main) if source is not None else compare_groups(g, other, main)
            if c is not None:
                unique[key] = c
    family = list(unique.values())
    return family if source is not None else adjust(family, f"this table's {len(family)} comparisons")


def _table(groups: list[RunGroup], kind: str, baseline: RunGroup | None, chance: dict | None,
           comparisons: ComparisonSource | None = None, compared_metric: str | None = None):
    cols = RESULT_KINDS[kind].columns
    main = compared_metric or RESULT_KINDS[kind].compared
    papers = {id(g): paper_reference(kind, g.first) for g in groups}  # (numbers, None) or (None, why not)
    with_paper = any(ref for ref, _ in papers.values())
    controls = {id(g): _scratch_control(g, groups) for g in groups}
    with_control = any(controls.values())
    head = ["run", "backbone", "width", "init", "seeds", "dataset", "iterations", "GMACs (224²)", *cols,
            f"Δ{main} vs {baseline.name if baseline else '—'}", "95% CI, P(A>B), call"]
    if with_control:
        head += [f"Δ{main} vs scratch", "AP50 / scratch AP50"]
    if with_paper:
        head += ["relative", "paper AP50 / AP"]
    family = _table_family(groups, baseline, controls, main, comparisons)
    rows = []
    for g in groups:
        r = g.first
        cmp = None if baseline is None or g is baseline else find(family, g.name, baseline.name, main)
        delta, verdict = (None, "") if cmp is None else (cmp.delta, cmp.cell())
        row = [g.name, r.backbone, f"{r.width:g}", r.init, g.n or "—", r.dataset,
               r.iterations if r.iterations is not None else "—", fmt(r.gmacs, 2),
               *[_fmt_stat(g, c) for c in cols], "baseline" if g is baseline else fmt(delta, 2),
               "" if g is baseline else verdict]
        if with_control:
            ctrl = controls[id(g)]
            if ctrl is None:
                row += ["—", "—"]
            else:
                c = find(family, g.name, ctrl.name, main)
                ours, theirs = g.mean("AP50"), ctrl.mean("AP50")
                # a pair the caller's family does not compare (arms that differ beyond one factor): no ratio either
                ratio = f"×{ours / theirs:.1f}" if ours is not None and theirs and c is not None else "—"
                row += ["—" if c is None else f"{fmt(c.delta, 2)} ({c.cell()})", ratio]
        if with_paper:
            paper = papers[id(g)][0]
            base = baseline.mean(main) if baseline is not None and g is not baseline else None
            rel = None if delta is None or not base else 100.0 * delta / base
            row += ["—" if rel is None else f"{rel:+.1f}%",
                    " / ".join(fmt(paper.get(k)) for k in ("AP50", "AP") if k in paper) if paper else "—"]
        rows.append(row)
    for dataset, stats in (chance or {}).items():
        if any(g.first.dataset == dataset for g in groups):
            row = ["chance (random boxes)", "—", "—", "—", "—", dataset, "—", "—",
                   *[fmt(stats.get(c)) for c in cols], "—", ""]
            row += ["—", "—"] if with_control else []
            row += ["—", "—"] if with_paper else []
            rows.append(row)
    notes = []
    design = ("the paper's own design: its backbone at full width (resnet101 as C4, vgg16 with its fc6/fc7 head), "
              "its splits and input scale, the schedule and solver of its column, from the ImageNet model it used")
    if with_paper:
        notes.append(f"Paper numbers: {PAPER_REFERENCE[kind]['condition']}; shown only for runs of {design}.")
    else:
        notes.append(f"No paper column: no run here is of {design} ({PAPER_REFERENCE[kind]['condition']}), so "
                     "their numbers are not comparable with Tables 7/8.")
    notes += [f"{g.name}: no paper number ({why})." for g in groups if (why := papers[id(g)][1])]
    return head, rows, notes, family


def _with_interval(g: RunGroup, key: str) -> Estimate | str:
    """A group's mean with its 95% interval over its units, or ± sd / the value alone; "—" without the metric."""
    m = g.metrics.get(key)
    if m is None:
        return "—"
    return Estimate(m.mean, None if m.interval is None else tuple(m.interval), m.sd, _of_runs(g, m))


def _mean_of(values: list) -> float | None:
    vals = [v for v in values if v is not None]
    return sum(vals) / len(vals) if vals else None


def _measured_on(g: RunGroup) -> str:
    """Where the group's times and memory were measured ("cpu, 1 thread"; several when its runs differ)."""
    where = sorted({f"{m.get('device', '?')}, {m.get('threads', '?')} thread(s)"
                    + (f" x {m['processes']} processes" if (m.get("processes") or 1) > 1 else "")
                    for r in g.finished if (m := r.measured_on)})
    return "; ".join(where) or "not recorded"


def _zoo_table(groups: list[RunGroup], kind: str) -> tuple[list[str], list[list]]:
    """Detectron2 MODEL_ZOO.md's columns per group: train s/iter, inference s/im, train memory, then box AP with
    its 95% interval over the group's units; each timing with the device and threads it was measured on."""
    cols = cols_of(kind)
    head = ["run", "backbone", "init", "n", "train s/iter", "inference s/im", "train mem (MB)", "params (M)",
            "GMACs (224²)", *cols, "measured on"]
    rows = []
    for g in groups:
        if not g.n:
            continue
        f = g.finished
        params = _mean_of([r.parameters for r in f])
        per_unit = {}
        for runs in g.independent:  # the runs of a repeated seed count once
            per_unit[g.unit_of(runs[0])] = per_unit.get(g.unit_of(runs[0]), 0) + 1
        counts = set(per_unit.values())
        n = (str(g.n) if counts == {1} else f"{len(per_unit)} x {counts.pop()}" if len(counts) == 1
             else f"{len(per_unit)} units, {g.n} runs")  # pretraining runs x detection runs per pretraining run
        if len(f) > g.n:
            n += f" (+{len(f) - g.n} repeated seed)"
        rows.append([g.name, g.first.backbone, g.first.init, n, fmt(_mean_of([r.train_s_per_iter for r in f]), 3),
                     fmt(_mean_of([r.inference_s_per_image for r in f]), 3),
                     fmt(_mean_of([r.peak_memory_mb for r in f]), 0),
                     fmt(None if params is None else params / 1e6, 1), fmt(g.first.gmacs, 2),
                     *[_with_interval(g, c) for c in cols], _measured_on(g)])
    return head, rows


def cols_of(kind: str) -> tuple[str, ...]:
    return RESULT_KINDS[kind].columns


def _baseline(group: list[RunGroup], baseline: str | None) -> RunGroup | None:
    if baseline:
        found = [g for g in group if g.name == baseline or any(r.name == baseline for r in g.runs)]
        names = sorted({g.name for g in group} | {r.name for g in group for r in g.runs})
        if not found:
            raise ValueError(f"--baseline {baseline!r} names no run; runs: {names}")
        if len(found) > 1:
            raise ValueError(f"--baseline {baseline!r} is ambiguous: {len(found)} runs of different configurations "
                             "have that name; give them distinct --names")
        return found[0]
    vgg = [g for g in group if g.n and _is_vgg16(g.first.backbone)]
    return next((g for g in vgg if g.first.init == "pretrained"), None) or next(iter(vgg), None) or \
        next((g for g in group if g.n), None)


def _is_vgg16(backbone: str) -> bool:
    """VGG-16 with or without BN: the paper's baseline trunk (an unknown name, e.g. "?" of a broken run, is not)."""
    try:
        info = model_info(backbone)
    except ValueError:
        return False
    return info.family == "vgg" and info.depth == 16


def _panel(groups: list[RunGroup], out: Path) -> tuple[list[tuple[str, str]], list[str]]:
    """The qualitative panel for the first evaluated dataset with COCO-json ground truth and predictions."""
    cands = [g for g in groups if g.n and g.first.kind == "coco" and g.first.predictions_file.is_file()
             and g.first.dataset_files.get("json_file")]
    if not cands:
        return [], []
    dataset = cands[0].first.dataset
    cands = [g for g in cands if g.first.dataset == dataset]
    files = cands[0].first.dataset_files
    image_root = files.get("image_root") or os.path.dirname(files["json_file"])
    notes = []
    if len(cands) > MAX_COLUMNS:
        notes.append(f"Qualitative panel: the first {MAX_COLUMNS} of {len(cands)} configurations.")
        cands = cands[:MAX_COLUMNS]
    try:
        path, ids = draw_panel([(g.name, g.first.predictions_file) for g in cands], Path(files["json_file"]),
                               Path(image_root), out / "qualitative.png")
    except (OSError, ValueError, KeyError) as err:  # the predictions or ground truth cannot be read
        if isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS):
            raise  # the report itself cannot be written: an error, not a note in a report that exits 0
        return [], [*notes, f"Qualitative panel not drawn: {err}"]
    seed = "" if all(g.n == 1 for g in cands) else " (first seed of each configuration)"
    caption = (f"{dataset}, images {ids}: ground truth (green) and each detector's boxes{seed} (red: every box "
               f"with score >= {SCORE_THRESHOLD}, and at least the best N where N is the number of objects; score "
               f"beside each), read from inference/{dataset}/coco_instances_results.json")
    return [(path.name, caption)], notes


def repeated_seed_warnings(groups: list[RunGroup]) -> list[str]:
    """A line per seed that runs of one group repeat: not independent runs, counted once in n and the numbers."""
    return [f"Warning: group {g.name} holds {len(names)} runs with SEED {seed} ({', '.join(names)}): a repeated "
            f"seed is not an independent run; they count as one run (their mean) in its n and statistics."
            for g in groups for seed, names in g.repeated_seeds.items()]


def _runs_below(paths) -> str:
    """A hint when a given directory holds run directories (a parent such as output/ given instead of its runs)."""
    for d in paths:
        below = sorted(p for p in Path(d).glob("*/") if is_run_directory(p)) if Path(d).is_dir() else []
        if below:
            return (f"; {d} holds {len(below)} run director{'y' if len(below) == 1 else 'ies'}: pass them (e.g. "
                    f"{Path(d) / '*'})")
    return ""


def _load_runs(run_dirs: list, names: list[str] | None) -> list[RunResult]:
    """Each run directory as a RunResult, with its GMACs."""
    runs = [load_run(p, n) for p, n in zip(run_dirs, names or [None] * len(run_dirs))]
    for r in runs:
        r.gmacs = run_gmacs(r.config)
    return runs


def write_report(run_dirs: list[str | os.PathLike], out_dir: str | os.PathLike, *, baseline: str | None = None,
                 names: list[str] | None = None, title: str = "Detection transfer benchmark",
                 notes: list[str] | None = None, chance: dict[str, dict] | None = None,
                 groups: list[str] | None = None, given_checkpoints: frozenset[str] = frozenset(),
                 sections: list[ReportSection] = (), comparisons: ComparisonSource | None = None,
                 compared_metric: str | None = None, lead: list[ReportSection] = ()) -> dict[str, Path]:
    """Write the report: report.md and report.html (one `Document`, two renderers), report.json, report.csv.

    Headline first: `lead` (the main job's leaderboard), the results table (Detectron2 MODEL_ZOO's columns), the box
    AP table with its comparisons and their calls; then the notes (prose), the main figure, `sections`, what
    differs, the conditions, pretraining, the runs and the plots. baseline: a run (or group) name for the deltas
    (default: the pretrained VGG-16 group, else the first finished one); notes: lines given by the caller, before
    the generated ones; chance: {dataset: COCO stats of random boxes} (a row in that dataset's table); groups: a
    group label per run directory (default: runs whose configs differ only in SEED form a group), given_checkpoints
    the weights files a user gave (groups.group_runs: their fine-tuning runs are the units); comparisons: where
    the table's comparisons come from when the caller owns the family (the main job's, Holm-adjusted over everything
    the job prints; default: the table's own pairs as one family); compared_metric: the metric the table's
    comparisons are on (the caller's family's; default AP for COCO-style runs, AP50 for VOC).
    """
    _check_run_dirs(run_dirs, sections)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    runs = _load_runs(run_dirs, names)
    groups = group_runs(runs, groups, given_checkpoints=given_checkpoints)
    kinds = [k for k in RESULT_KINDS if any(r.kind == k for r in runs)] or (["coco"] if runs else [])
    zoo, zoo_json, csv_rows = _results_sections(groups, kinds)
    box, table_json, box_csv = _box_ap_sections(groups, kinds, baseline, chance, comparisons, compared_metric)
    notes = list(notes or []) + repeated_seed_warnings(groups)
    panel, panel_notes = _panel(groups, out)  # the main figure
    differences = config_differences(groups)
    conditions = condition_notes(groups)
    pretrain = list({p.path: p for g in groups for r in g.runs if (p := r.pretraining)}.values())
    pre_plots, plots = pretraining_plot(pretrain, out), detection_plots(groups, out)
    document = Document(title, (
        *map(_section, lead), *zoo, *box, *([Section("Notes", lines=tuple(notes))] if notes else []),
        *([Section("Detections on val images", lines=tuple(panel_notes), figures=tuple(panel))]
          if panel or panel_notes else []),  # "not drawn: <why>" is said, not dropped
        *map(_section, sections), *_differences_section(differences),
        Section("Conditions (read from the runs)", lines=tuple(conditions), bullets=True),
        *_pretraining_section(pretrain, pre_plots),
        Section("Runs", tables=(Table(["run", "status", "directory"], [[r.name, r.status, r.path] for r in runs],
                                      wrap=True),)),
        Section("Plots", figures=tuple(plots))))
    paths = {"markdown": out / "report.md", "html": out / "report.html", "json": out / "report.json",
             "csv": out / "report.csv"}
    # each file whole or not at all, and a full disk names the file (backbones.checkpoint_io.atomic_write)
    atomic_write_text(paths["markdown"], render_markdown(document))
    atomic_write_text(paths["html"], render_html(document))
    atomic_write_text(paths["json"], strict_json({
        "results": zoo_json, "tables": table_json, "conditions": conditions,
        "differences": ({"columns": differences[0], "rows": differences[1]} if isinstance(differences, tuple)
                        else differences), "chance": chance or {}, "warnings": repeated_seed_warnings(groups),
        **_runs_json(groups, pretrain, runs), "plots": [f for f, _ in pre_plots + panel + plots]}, default=str))
    table = io.StringIO(newline="")
    csv.writer(table).writerows([[csv_cell(c) for c in row] for row in csv_rows + box_csv])
    atomic_write_text(paths["csv"], table.getvalue())
    for f, _ in pre_plots + panel + plots:
        paths[f] = out / f
    return paths


def _check_run_dirs(run_dirs, sections) -> None:
    """The same run twice (or through a symlink) would count as two seeds; no run at all is an error (an empty
    report, exit 0, was easy to take for a result), unless the report is sections only (the degradation preset)."""
    seen: dict[str, str] = {}
    for d in run_dirs:
        real = os.path.realpath(d)
        if real in seen:
            raise ValueError(f"run directory {d} is given twice (also as {seen[real]}): it would count as two runs")
        seen[real] = str(d)
    if (run_dirs or not sections) and not any(is_run_directory(d) for d in run_dirs):
        raise UsageError(f"no runs found under {', '.join(map(str, run_dirs)) or 'no paths'}: a run directory holds "
                         "config.yaml (an OUTPUT_DIR of tools/train_det.py) or config.json (tools/train_cls.py)"
                         + _runs_below(run_dirs))


def _section(s: ReportSection) -> Section:
    return Section(s.title, (Table(*s.table),) if s.table else (), s.lines, s.figures)


def _results_sections(groups: list[RunGroup], kinds: list[str]) -> tuple[list[Section], dict, list]:
    """The headline: one row per group, the columns a model-zoo reader knows, per kind of result."""
    sections, as_json, csv_rows = [], {}, []
    for kind in kinds:
        head, rows = _zoo_table([g for g in groups if g.first.kind == kind], kind)
        if not rows:
            continue
        text = ("n: runs (pretraining runs x detection runs per pretraining run where they differ). Box AP: "
                "mean [95% interval over the group's units] (± sd where one unit). Train s/iter: mean of the "
                "logged iteration times over iterations 100-500, or the middle 80% of shorter runs; inference "
                "s/im: the model's forward in eval mode at batch 1, loader excluded; train mem: "
                f"{next((r.memory_measure for g in groups for r in g.finished if r.memory_measure), '—')}.")
        label = "Results" + ("" if len(kinds) == 1 else f" ({kind.upper()})")
        sections.append(Section(label, (Table(head, rows),), (text,)))
        as_json[kind] = {"columns": head, "rows": [[str(c) for c in r] for r in rows]}
        csv_rows += [["table", *head]] + [[f"{kind}_zoo", *map(str, row)] for row in rows]
    return sections, as_json, csv_rows


def _box_ap_sections(groups, kinds, baseline, chance, comparisons, compared_metric) -> tuple[list, dict, list]:
    """Per kind of result: the box AP table with each group's comparisons (the baseline, its scratch control)."""
    sections, as_json, csv_rows = [], {}, []
    for kind in kinds:
        group = [g for g in groups if g.first.kind in (kind, "")]  # unfinished runs appear in every table
        base = _baseline(group, baseline)
        head, rows, table_notes, family = _table(group, kind, base, chance, comparisons, compared_metric)
        text = " ".join(table_notes) + (
            " Where n > 1: mean ± sample standard deviation over runs. Comparisons: Δ with its 95% interval "
            "(Welch's t over each group's units: a pretrained group's pretraining runs, detection runs nested under "
            "them; a from-scratch group's runs), n units each and the interval's df, P(A>B) = the chance that a "
            "unit of A beats a unit of B; a call only when the family-adjusted interval excludes 0 (Holm over "
            + ("the job's comparisons" if comparisons else "this table's distinct comparisons") + "; the level "
            "beside it).")
        split = head.index(cols_of(kind)[-1]) + 1  # setup + metrics | comparisons: each fits a 1280-px window
        sections.append(Section(RESULT_KINDS[kind].label, (Table(head, rows, split=split, split_title="Comparisons"),),
                                (text,)))
        as_json[kind] = {
            "columns": head, "rows": rows, "baseline": base.name if base else None,
            # the table's comparisons as numbers, for programs (the rows above are formatted for reading)
            "comparisons": [{**asdict(c), "call": c.call, "mde": c.mde} for c in family]}
        csv_rows += [["table", *head]] + [[kind, *row] for row in rows]
    return sections, as_json, csv_rows


def _differences_section(differences) -> list[Section]:
    title = "What differs between the configurations"
    if isinstance(differences, tuple):
        return [Section(title, (Table(*differences, wrap=True),))]
    return [Section(title, lines=(differences,))] if differences else []


def _pretraining_section(pretrain: list[PretrainInfo], figures: list) -> list[Section]:
    if not pretrain:
        return []
    head = ["backbone", "width", "dataset", "image size", "iterations", "batch", "lr", "images seen",
            "val top-1 err %", "val top-5 err %", "val images", "seconds"]
    rows = [[p.model, f"{p.width:g}", p.dataset, p.image_size or "—", p.iterations or "—", p.batch_size or "—",
             f"{p.lr:g}" if p.lr else "—", f"{p.images_seen:,}" if p.images_seen else "—", fmt(p.top1_error),
             fmt(p.top5_error), p.val_images or "—", fmt(p.seconds, 0)] for p in pretrain]
    return [Section("Pretraining", (Table(head, rows),), figures=tuple(figures))]


def _runs_json(groups: list[RunGroup], pretrain: list[PretrainInfo], runs: list[RunResult]) -> dict:
    """report.json's groups, pretraining runs and runs (their logs, curves and configs aside)."""
    return {"groups": [_group_json(g) for g in groups],
            "pretraining": [{k: v for k, v in asdict(p).items() if k != "history"} for p in pretrain],
            "runs": [{k: v for k, v in asdict(r).items() if k not in ("train_log", "pr", "config")} for r in runs]}


def _group_json(g: RunGroup) -> dict:
    return {"name": g.name, "runs": [r.name for r in g.runs], "backbone": g.first.backbone, "width": g.first.width,
            "init": g.first.init, "n": g.n, "seeds": g.seeds,
            "repeated_seeds": {str(k): v for k, v in g.repeated_seeds.items()}, "unit": g.unit,
            "metrics": {k: asdict(m) for k, m in g.metrics.items()}}
