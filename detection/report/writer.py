"""write_report: the report as one Document (Markdown / XHTML) plus JSON and CSV -- what was found in sentences, the
results table, the figures, then the notes, the comparisons, the conditions and a glossary."""

from __future__ import annotations

import csv
import errno
import io
import json
import os
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path

from backbones.checkpoint_io import atomic_write_text
from backbones.strict_json import strict_json
from classification.engine.errors import UsageError

from .conditions import condition_notes
from .conditions import differences as config_differences
from .document import Document, Section, Table, csv_cell, fmt, render_html, render_markdown
from .glossary import glossary_section
from .groups import RunGroup, group_runs
from .panel import MAX_COLUMNS, SCORE_THRESHOLD, draw_panel
from .plots import detection_plots, pretraining_plot
from .runs import PretrainInfo, RunResult, is_run_directory, load_run
from .tables import (
    RESULT_KINDS,
    ComparisonSource,
    baseline_group,
    comparison_family,
    comparisons_table,
    paper_notes,
    per_class_table,
    results_table,
)

__all__ = ["write_report", "run_gmacs", "report_files", "ReportSection"]


@dataclass(frozen=True)
class ReportSection:
    """A caller's report section: its title, an optional table (head, rows of cells), lines of text, figures as
    (PNG file in the report's directory, caption): write_report's `figures` (the main job's scatter and degradation
    curves, placed with the figures) and `details` (its leaderboard, after the notes)."""

    title: str
    lines: tuple[str, ...] = ()
    table: tuple[list[str], list[list]] | None = None
    figures: tuple[tuple[str, str], ...] = ()


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
                 headline: list[str] | None = None, figures: list[ReportSection] = (),
                 details: list[ReportSection] = (), comparisons: ComparisonSource | None = None,
                 compared_metric: str | None = None) -> dict[str, Path]:
    """Write the report: report.md and report.html (one `Document`, two renderers), report.json, report.csv.

    Headline first: "Result" -- the sentences of what was found (`headline`: the caller's, e.g. the main job's
    control and every call of its family; default: Comparison.headline of each comparison the report makes) above
    the one results table (MODEL_ZOO's columns, box AP with its interval, chance); then the figures (the panel, PR
    and training curves, AP vs GMACs, the caller's `figures`); then the notes (the caller's `notes`, then generated
    ones), the comparisons, the caller's `details`, what differs, conditions, pretraining, runs and a glossary.
    baseline: the group (or run) compared against (default: the pretrained VGG-16 group, else the first finished);
    chance: {dataset: COCO stats of random boxes}; groups: a group label per run directory (default: configs that
    differ only in SEED); given_checkpoints: weights files a user gave (their fine-tuning runs are the units);
    comparisons: the caller's family when it owns one (the main job's, Holm over all it prints; default: the
    report's pairs as one family); compared_metric: theirs (default AP for COCO-style runs, AP50 for VOC).
    """
    _check_run_dirs(run_dirs, [*figures, *details])
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    runs = _load_runs(run_dirs, names)
    groups = group_runs(runs, groups, given_checkpoints=given_checkpoints)
    kinds = [k for k in RESULT_KINDS if any(r.kind == k for r in runs)] or (["coco"] if runs else [])
    tables, tables_json, csv_rows = _results_tables(groups, kinds, chance)
    families = {k: _family(groups, k, baseline, comparisons, compared_metric) for k in kinds}
    said = list(headline) if headline is not None else [c.headline() + "." for f in families.values() for c in f[1]]
    notes = list(notes or []) + repeated_seed_warnings(groups) + [
        n for k in kinds for n in paper_notes([g for g in groups if g.first.kind == k], k)]
    panel, panel_notes = _panel(groups, out)  # the main figure
    differences = config_differences(groups)
    conditions = condition_notes(groups)
    pretrain = list({p.path: p for g in groups for r in g.runs if (p := r.pretraining)}.values())
    pre_plots, plots = pretraining_plot(pretrain, out), detection_plots(groups, out)
    body = (
        *_result_sections(said, tables),
        *([Section("Detections on val images", lines=tuple(panel_notes), figures=tuple(panel))]
          if panel or panel_notes else []),  # "not drawn: <why>" is said, not dropped
        *([Section("Figures", figures=tuple(plots))] if plots else []), *map(_section, figures),
        *([Section("Notes", lines=tuple(notes))] if notes else []),
        *_comparison_sections(families, comparisons is not None), *map(_section, details),
        *_record_sections(differences, conditions, pretrain, pre_plots, runs))
    document = Document(title, (*body, glossary_section(body)))
    paths = {"markdown": out / "report.md", "html": out / "report.html", "json": out / "report.json",
             "csv": out / "report.csv"}
    # each file whole or not at all, and a full disk names the file (backbones.checkpoint_io.atomic_write)
    atomic_write_text(paths["markdown"], render_markdown(document))
    atomic_write_text(paths["html"], render_html(document))
    atomic_write_text(paths["json"], strict_json({
        "headline": said, "results": tables_json, "tables": {k: _family_json(*f) for k, f in families.items()},
        "conditions": conditions,
        "differences": ({"columns": differences[0], "rows": differences[1]} if isinstance(differences, tuple)
                        else differences), "chance": chance or {}, "warnings": repeated_seed_warnings(groups),
        **_runs_json(groups, pretrain, runs), "plots": [f for f, _ in pre_plots + panel + plots],
        "files": _own_files(paths, pre_plots + panel + plots, [*figures, *details])}, default=str))
    atomic_write_text(paths["csv"], _csv_text(csv_rows, families))
    return paths | {f: out / f for f, _ in pre_plots + panel + plots}


def _own_files(paths: dict, plots: list, sections: list[ReportSection]) -> list[str]:
    """The files of the report directory this report is made of (its four documents, its figures and the callers'):
    what `report_files` lets a rerun delete, and nothing a user put beside them."""
    names = [p.name for p in paths.values()] + [f for f, _ in plots] + [f for s in sections for f, _ in s.figures]
    return sorted(set(names))


def report_files(report_dir: Path) -> list[Path]:
    """The files a report written in `report_dir` made (its report.json's "files"; the four documents and the
    figures it lists where written before the list was): the only ones a rerun may delete. A name with a path in it
    is not one (report.json is a file a user could edit)."""
    from classification.engine.run_files import RunFileError, read_json

    fixed = ["report.md", "report.html", "report.json", "report.csv"]
    try:
        written = read_json(report_dir / "report.json")
    except (RunFileError, OSError):
        written = {}
    names = written.get("files") if isinstance(written, dict) else None
    if not isinstance(names, list):
        names = fixed + list((written.get("plots") if isinstance(written, dict) else None) or [])
    return [report_dir / n for n in names if isinstance(n, str) and n == Path(n).name and n not in ("", ".", "..")]


def _record_sections(differences, conditions: list[str], pretrain: list[PretrainInfo], pre_plots: list,
                     runs: list[RunResult]) -> list[Section]:
    """The record after the details: what differs, the conditions, the pretraining, the runs."""
    return [*_differences_section(differences),
            Section("Conditions (read from the runs)", lines=tuple(conditions), bullets=True),
            *_pretraining_section(pretrain, pre_plots),
            Section("Runs", tables=(Table(["run", "status", "directory"], [[r.name, r.status, r.path] for r in runs],
                                          wrap=True),))]


def _csv_text(csv_rows: list, families: dict) -> str:
    """report.csv: the results tables' rows, then each kind's comparisons (a spreadsheet's formulas defused)."""
    for kind, (_, family) in families.items():
        head, rows = comparisons_table(family)
        csv_rows = csv_rows + [["table", *head]] + [[f"{kind}_comparisons", *row] for row in rows]
    table = io.StringIO(newline="")
    csv.writer(table).writerows([[csv_cell(c) for c in row] for row in csv_rows])
    return table.getvalue()


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
    """A caller's section as the document holds it."""
    return Section(s.title, (Table(*s.table),) if s.table else (), s.lines, s.figures)


def _results_tables(groups: list[RunGroup], kinds: list[str], chance) -> tuple[list[tuple[str, tuple[Table, ...], str]],
                                                                                  dict, list]:
    """Per kind of result: (its label, the results table and the per-class one where there are several classes, the
    line under them), as JSON, and the CSV rows."""
    tables, as_json, csv_rows = [], {}, []
    for kind in kinds:
        of_kind = [g for g in groups if g.first.kind == kind]
        head, rows, lines = results_table(of_kind, kind, chance)
        if not rows:
            continue
        per_class = per_class_table(of_kind, kind)
        tables.append((RESULT_KINDS[kind].label, (Table(head, rows), *([Table(*per_class)] if per_class else [])),
                       " ".join(lines)))
        as_json[kind] = {"columns": head, "rows": [[str(c) for c in r] for r in rows]}
        csv_rows += [["table", *head]] + [[f"{kind}_results", *map(str, row)] for row in rows]
        if per_class:
            as_json[kind]["per_class"] = {"columns": per_class[0], "rows": [[str(c) for c in r] for r in per_class[1]]}
            csv_rows += [["table", *per_class[0]]] + [[f"{kind}_per_class", *map(str, r)] for r in per_class[1]]
    return tables, as_json, csv_rows


def _result_sections(said: list[str], tables: list[tuple[str, tuple[Table, ...], str]]) -> list[Section]:
    """The first section: what was found, in sentences, above the results table and the per-class one (one section
    per kind of result; a second kind gets a section of its own)."""
    if not tables:
        return [Section("Result", intro=tuple(said))] if said else []
    first, *more = tables
    return [Section("Result" if len(tables) == 1 else f"Result ({first[0]})", first[1], (first[2],),
                    intro=tuple(said) or ("No comparison was made.",)),
            *(Section(f"Result ({label})", ts, (line,)) for label, ts, line in more)]


def _family(groups, kind: str, baseline, source, metric) -> tuple[RunGroup | None, list]:
    """(the baseline, the comparisons) of one kind's groups (unfinished runs appear in every kind)."""
    group = [g for g in groups if g.first.kind in (kind, "")]
    base = baseline_group(group, baseline)
    label = f"{kind.upper()} " if len({g.first.kind for g in groups if g.n}) > 1 else ""
    return base, comparison_family(group, base, metric or RESULT_KINDS[kind].compared, source, label)


def _family_json(base: RunGroup | None, family: list) -> dict:
    head, rows = comparisons_table(family)
    # the comparisons as numbers, for programs (the rows are formatted for reading)
    return {"columns": head, "rows": rows, "baseline": base.name if base else None,
            "comparisons": [{**asdict(c), "call": c.call, "mde": c.mde} for c in family]}


def _comparison_sections(families: dict, job_family: bool) -> list[Section]:
    """Each comparison of the report with its numbers: what the Result's sentences rest on."""
    sections = []
    for kind, (base, family) in families.items():
        if not family:
            continue
        text = ("Each group against " + (f"the baseline {base.name}" if base else "the baseline")
                + " and against its from-scratch control where it has one. Δ with its 95% interval (Welch's t over "
                "each group's units: a pretrained group's pretraining runs, detection runs nested under them; a "
                "from-scratch group's runs) and df; P(A > B) = the chance that a unit of A beats a unit of B; a call "
                "only when the family-adjusted interval excludes 0 (Holm over "
                + ("the job's comparisons" if job_family else "this report's distinct comparisons")
                + "); MDE: the smallest difference the comparison could have called (80% power).")
        title = "Comparisons" + ("" if len(families) == 1 else f" ({RESULT_KINDS[kind].label})")
        sections.append(Section(title, (Table(*comparisons_table(family)),), (text,)))
    return sections


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
