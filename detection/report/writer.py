"""write_report: tables (Markdown / XHTML / JSON / CSV), generated notes on the conditions, pretraining section,
plots and the qualitative panel."""

from __future__ import annotations

import csv
import errno
import html
import io
import json
import math
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path

from backbones import model_info
from backbones.checkpoint_io import atomic_write_text
from classification.engine.errors import UsageError

from .comparison import Comparison, adjust, find
from .groups import RunGroup, compare_groups, differing_keys, group_runs
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
class _Estimate:
    """A group's metric in the results table: the mean with its 95% interval over units, or ± sd, or alone. Text in
    Markdown, CSV and JSON ("69.5 [67.9, 71.1]"); in HTML the interval goes under the mean, smaller, so the
    table of 16 columns fits a 1280-px window."""

    mean: float | None
    interval: tuple[float, float] | None = None
    sd: float | None = None
    of: str = ""  # " (2 of 3 runs)" when the metric is missing (or not finite) in some of the row's runs

    def __str__(self) -> str:
        return _fmt(self.mean) + self._spread()

    def _spread(self) -> str:
        if self.interval is not None:
            return f" [{_fmt(self.interval[0])}, {_fmt(self.interval[1])}]{self.of}"
        return (f" ± {_fmt(self.sd)}" if self.sd is not None else "") + self.of

    def html(self) -> str:
        spread = self._spread().strip()
        return html.escape(_fmt(self.mean)) + (f'<br/><span class="spread">{html.escape(spread)}</span>'
                                               if spread else "")


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


def _fmt(v, nd=1) -> str:
    return "—" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.{nd}f}"


def _of_runs(g: RunGroup, m) -> str:
    """The runs a cell rests on, where fewer than the row's n (a run without the metric, or with NaN): the row said
    n 3 over a mean of 2."""
    return f" ({m.runs} of {g.n} runs)" if m.runs < g.n else ""


def _fmt_stat(g: RunGroup, key: str) -> str:
    m = g.metrics.get(key)
    if m is None:
        return "—"
    return (_fmt(m.mean) if m.sd is None else f"{_fmt(m.mean)} ± {_fmt(m.sd)}") + _of_runs(g, m)


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
    cols = COCO_COLUMNS if kind == "coco" else VOC_COLUMNS
    main = compared_metric or ("AP" if kind == "coco" else "AP50")
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
               r.iterations if r.iterations is not None else "—", _fmt(r.gmacs, 2),
               *[_fmt_stat(g, c) for c in cols], "baseline" if g is baseline else _fmt(delta, 2),
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
                row += ["—" if c is None else f"{_fmt(c.delta, 2)} ({c.cell()})", ratio]
        if with_paper:
            paper = papers[id(g)][0]
            base = baseline.mean(main) if baseline is not None and g is not baseline else None
            rel = None if delta is None or not base else 100.0 * delta / base
            row += ["—" if rel is None else f"{rel:+.1f}%",
                    " / ".join(_fmt(paper.get(k)) for k in ("AP50", "AP") if k in paper) if paper else "—"]
        rows.append(row)
    for dataset, stats in (chance or {}).items():
        if any(g.first.dataset == dataset for g in groups):
            row = ["chance (random boxes)", "—", "—", "—", "—", dataset, "—", "—",
                   *[_fmt(stats.get(c)) for c in cols], "—", ""]
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


def _pretraining_line(info: PretrainInfo) -> str:
    seen = f"{info.images_seen:,} images" if info.images_seen else "images seen unknown"
    err = (f"val top-1 error {info.top1_error:.1f}% (top-5 {info.top5_error:.1f}%, {info.val_images or '?'} val "
           "images)" if info.top1_error is not None else "no evaluation recorded")
    size = f", {info.image_size} px" if info.image_size else ""
    lr = f", lr {info.lr:g}" if info.lr else ""
    return (f"pretrained with tools/train_cls.py: {info.model} x{info.width:g} on {info.dataset}{size}, "
            f"{info.iterations} iterations of {info.batch_size} ({seen}{lr}), {err}; {info.path}")


def _condition_notes(groups: list[RunGroup]) -> list[str]:
    notes = []
    for g in groups:
        r = g.first
        if not r.config:
            continue
        bb = r.config.get("MODEL", {}).get("BACKBONES", {})
        solver = r.config.get("SOLVER", {})
        if r.init == "scratch":
            init = "from scratch (random initialisation)"
        elif r.pretraining is not None:
            init = _pretraining_line(r.pretraining)
        else:
            init = f"initialised from {r.weights} (not a tools/train_cls.py run: its pretraining is not recorded)"
        seeds = ", ".join(str(s) for s in g.seeds) if g.n else "—"
        if g.repeated_seeds:
            seeds += f" (repeated: {', '.join(map(str, g.repeated_seeds))}; counted once)"
        notes.append(
            f"{g.name}: {r.backbone} x{r.width:g}, {init}; norm {bb.get('NORM', '?')}, FREEZE_AT "
            f"{bb.get('FREEZE_AT', '?')}; trained on {', '.join(r.train_datasets) or '?'} for {r.iterations} "
            f"iterations of {solver.get('IMS_PER_BATCH', '?')} images (lr {solver.get('BASE_LR', '?')}, weight decay "
            f"{solver.get('WEIGHT_DECAY', '?')}), evaluated on {r.dataset or '?'}"
            + (f" ({', '.join(f'{k}: {v}' for k, v in r.conventions.items())})" if r.conventions else "")
            + f"; seeds: {seeds}.")
    return notes


def _differences(groups: list[RunGroup]) -> tuple[list[str], list[list]] | str | None:
    """What differs between the configurations (SEED and OUTPUT_DIR aside) as a table, a key per row and a group
    per column; a sentence when nothing does; None for a single group."""
    configured = [g for g in groups if g.first.config]
    if len(configured) < 2:
        return None
    diff = differing_keys(configured)
    if not diff:
        return "These configurations are identical apart from SEED and OUTPUT_DIR."
    return ["config key", *[g.name for g in configured]], [[k, *[str(v) for v in vals]] for k, vals in diff.items()]


def _with_interval(g: RunGroup, key: str) -> _Estimate | str:
    """A group's mean with its 95% interval over its units, or ± sd / the value alone; "—" without the metric."""
    m = g.metrics.get(key)
    if m is None:
        return "—"
    return _Estimate(m.mean, None if m.interval is None else tuple(m.interval), m.sd, _of_runs(g, m))


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
        rows.append([g.name, g.first.backbone, g.first.init, n, _fmt(_mean_of([r.train_s_per_iter for r in f]), 3),
                     _fmt(_mean_of([r.inference_s_per_image for r in f]), 3),
                     _fmt(_mean_of([r.peak_memory_mb for r in f]), 0),
                     _fmt(None if params is None else params / 1e6, 1), _fmt(g.first.gmacs, 2),
                     *[_with_interval(g, c) for c in cols], _measured_on(g)])
    return head, rows


def cols_of(kind: str) -> tuple[str, ...]:
    return COCO_COLUMNS if kind == "coco" else VOC_COLUMNS


def _md(text) -> str:
    """Text from runs, names or titles as Markdown shows it: HTML escaped (Markdown passes raw HTML through)."""
    return html.escape(str(text), quote=False)


def _markdown_table(head, rows) -> str:
    def cell(c) -> str:
        return _md(c).replace("|", "\\|")

    lines = ["| " + " | ".join(map(cell, head)) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(map(cell, r)) + " |" for r in rows]
    return "\n".join(lines)


def _csv_cell(c):
    """A spreadsheet runs a cell that starts with = + - @ (or a tab / CR) as a formula: such text gets a leading
    quote; numbers (-2.40) stay numbers."""
    if isinstance(c, str) and c[:1] in ("=", "+", "-", "@", "\t", "\r"):
        try:
            float(c)
        except ValueError:
            return "'" + c
    return c


def _html_table(head, rows, *, wrap: bool = False) -> str:
    """wrap: the cells are text that may wrap (config values, paths), not numbers that must not."""
    th = "".join(f"<th>{html.escape(str(h))}</th>" for h in head)
    trs = "".join("<tr>" + "".join(f"<td>{c.html() if isinstance(c, _Estimate) else html.escape(str(c))}</td>"
                                   for c in r) + "</tr>" for r in rows)
    attrs = ' class="text"' if wrap else ""
    return f"<table{attrs}><thead><tr>{th}</tr></thead><tbody>{trs}</tbody></table>"


def _add_section(sections_md: list[str], sections_html: list[str], section: ReportSection) -> None:
    """A section in both renderings: its title, table, lines of text, then its figures with their captions."""
    table_md = f"{_markdown_table(*section.table)}\n\n" if section.table else ""
    sections_md.append(f"## {_md(section.title)}\n\n{table_md}" + "".join(f"{_md(n)}\n\n" for n in section.lines)
                       + "".join(f"![{_md(cap)}]({f})\n\n" for f, cap in section.figures))
    sections_html.append(f"<h2>{html.escape(section.title)}</h2>"
                         + (_html_table(*section.table) if section.table else "")
                         + "".join(f"<p>{html.escape(n)}</p>" for n in section.lines)
                         + "".join(f'<figure><img src="{f}" alt="{html.escape(cap)}"/><figcaption>'
                                   f"{html.escape(cap)}</figcaption></figure>" for f, cap in section.figures))


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


def _finite_or_none(obj):
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _finite_or_none(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite_or_none(v) for v in obj]
    return obj


def strict_json(obj) -> str:
    """JSON that every parser reads: an undefined number (NaN: no objects of a size, no ground truth of a class)
    is null -- Python's default writes NaN / Infinity, which is not JSON."""
    return json.dumps(_finite_or_none(obj), indent=2, default=str, allow_nan=False)


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


def write_report(run_dirs: list[str | os.PathLike], out_dir: str | os.PathLike, *, baseline: str | None = None,
                 names: list[str] | None = None, title: str = "Detection transfer benchmark",
                 notes: list[str] | None = None, chance: dict[str, dict] | None = None,
                 groups: list[str] | None = None, sections: list[ReportSection] = (),
                 comparisons: ComparisonSource | None = None,
                 compared_metric: str | None = None, lead: list[ReportSection] = ()) -> dict[str, Path]:
    """Write the report.

    baseline: a run (or group) name for the deltas (default: the pretrained VGG-16 group, else the first
        finished one); notes: lines printed under the title before the generated ones; chance: {dataset: COCO
        stats of random boxes} (a row in that dataset's table); groups: a group label per run directory (default:
        runs whose configs differ only in SEED form a group); sections: placed after the results table and
        the main figure (the main job's degradation experiment); comparisons: where the table's comparisons come
        from when the caller owns the family (the main job's, Holm-adjusted over everything the job prints;
        default: the table's own pairs as one family); compared_metric: the metric the table's comparisons are on
        (the caller's family's; default AP for COCO-style runs, AP50 for VOC); lead: sections placed first, before
        the results table (the main job's leaderboard).
    """
    seen: dict[str, str] = {}
    for d in run_dirs:  # the same run twice (or through a symlink) would count as two seeds
        real = os.path.realpath(d)
        if real in seen:
            raise ValueError(f"run directory {d} is given twice (also as {seen[real]}): it would count as two runs")
        seen[real] = str(d)
    if (run_dirs or not sections) and not any(is_run_directory(d) for d in run_dirs):  # an empty report, exit 0,
        #   was easy to take for a result (no runs with sections: the main job's degradation preset)
        raise UsageError(f"no runs found under {', '.join(map(str, run_dirs)) or 'no paths'}: a run directory holds "
                         "config.yaml (an OUTPUT_DIR of tools/train_det.py) or config.json (tools/train_cls.py)"
                         + _runs_below(run_dirs))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    runs: list[RunResult] = [load_run(p, n) for p, n in zip(run_dirs, names or [None] * len(run_dirs))]
    for r in runs:
        r.gmacs = run_gmacs(r.config)
    labels = groups
    groups = group_runs(runs, labels)
    sections_md, sections_html, table_json, zoo_json = [], [], {}, {}
    kinds = [k for k in ("coco", "voc") if any(r.kind == k for r in runs)] or (["coco"] if runs else [])
    csv_rows = []
    for section in lead:
        _add_section(sections_md, sections_html, section)
    for kind in kinds:  # the headline: one row per group, the columns a model-zoo reader knows
        head, rows = _zoo_table([g for g in groups if g.first.kind == kind], kind)
        if rows:
            text = ("n: runs (pretraining runs x detection runs per pretraining run where they differ). Box AP: "
                    "mean [95% interval over the group's units] (± sd where one unit). Train s/iter: mean of the "
                    "logged iteration times over iterations 100-500, or the middle 80% of shorter runs; inference "
                    "s/im: the model's forward in eval mode at batch 1, loader excluded; train mem: "
                    f"{next((r.memory_measure for g in groups for r in g.finished if r.memory_measure), '—')}.")
            label = "Results" + ("" if len(kinds) == 1 else f" ({kind.upper()})")
            sections_md.append(f"## {label}\n\n{_markdown_table(head, rows)}\n\n{_md(text)}\n")
            sections_html.append(f"<h2>{label}</h2>{_html_table(head, rows)}<p>{html.escape(text)}</p>")
            zoo_json[kind] = {"columns": head, "rows": [[str(c) for c in r] for r in rows]}
            csv_rows += [["table", *head]] + [[f"{kind}_zoo", *map(str, row)] for row in rows]
    panel, panel_notes = _panel(groups, out)  # the main figure, right below the results
    if panel:
        _add_section(sections_md, sections_html,
                     ReportSection("Detections on val images", lines=tuple(panel_notes), figures=tuple(panel)))
    for section in sections:
        _add_section(sections_md, sections_html, section)
    for kind in kinds:
        group = [g for g in groups if g.first.kind in (kind, "")]  # unfinished runs appear in every table
        base = _baseline(group, baseline)
        head, rows, table_notes, family = _table(group, kind, base, chance, comparisons, compared_metric)
        label = "COCO-style box AP" if kind == "coco" else "PASCAL VOC box AP"
        text = " ".join(table_notes) + (
            " Where n > 1: mean ± sample standard deviation over runs. Comparisons: Δ with its 95% interval "
            "(Welch's t over each group's units: a pretrained group's pretraining runs, detection runs nested under "
            "them; a from-scratch group's runs), n units each and the interval's df, P(A>B) = the chance that a "
            "unit of A beats a unit of B; a call only when the family-adjusted interval excludes 0 (Holm over "
            + ("the job's comparisons" if comparisons else "this table's distinct comparisons") + "; the level "
            "beside it).")
        sections_md.append(f"## {label}\n\n{_markdown_table(head, rows)}\n\n{_md(text)}\n")
        split = head.index(cols_of(kind)[-1]) + 1  # setup + metrics | comparisons: each fits a 1280-px window
        # the comparisons are sentences (interval, its Holm-adjusted one, P, n, df, call): they wrap
        cells = _html_table(head[:1] + head[split:], [r[:1] + r[split:] for r in rows], wrap=True)
        sections_html.append(f"<h2>{label}</h2>{_html_table(head[:split], [r[:split] for r in rows])}"
                             f"<h3>Comparisons</h3>{cells}<p>{html.escape(text)}</p>")
        table_json[kind] = {
            "columns": head, "rows": rows, "baseline": base.name if base else None,
            # the table's comparisons as numbers, for programs (the rows above are formatted for reading)
            "comparisons": [{**asdict(c), "call": c.call} for c in family]}
        csv_rows += [["table", *head]] + [[kind, *row] for row in rows]
    differences = _differences(groups)
    if isinstance(differences, tuple):
        sections_md.append("## What differs between the configurations\n\n" + _markdown_table(*differences) + "\n")
        sections_html.append("<h2>What differs between the configurations</h2>" + _html_table(*differences, wrap=True))
    elif differences:
        sections_md.append(f"## What differs between the configurations\n\n{differences}\n")
        sections_html.append(f"<h2>What differs between the configurations</h2><p>{differences}</p>")
    conditions = _condition_notes(groups)
    sections_md.append("## Conditions (read from the runs)\n\n" + "".join(f"- {_md(n)}\n" for n in conditions))
    sections_html.append("<h2>Conditions (read from the runs)</h2><ul>" + "".join(
        f"<li>{html.escape(n)}</li>" for n in conditions) + "</ul>")
    pretrain = list({p.path: p for g in groups for r in g.runs if (p := r.pretraining)}.values())
    pre_plots = pretraining_plot(pretrain, out)
    if pretrain:
        head = ["backbone", "width", "dataset", "image size", "iterations", "batch", "lr", "images seen",
                "val top-1 err %", "val top-5 err %", "val images", "seconds"]
        rows = [[p.model, f"{p.width:g}", p.dataset, p.image_size or "—", p.iterations or "—", p.batch_size or "—",
                 f"{p.lr:g}" if p.lr else "—",
                 f"{p.images_seen:,}" if p.images_seen else "—", _fmt(p.top1_error), _fmt(p.top5_error),
                 p.val_images or "—", _fmt(p.seconds, 0)] for p in pretrain]
        _add_section(sections_md, sections_html,
                     ReportSection("Pretraining", table=(head, rows), figures=tuple(pre_plots)))
    status_rows = [[r.name, r.status, r.path] for r in runs]
    sections_md.append("## Runs\n\n" + _markdown_table(["run", "status", "directory"], status_rows) + "\n")
    sections_html.append("<h2>Runs</h2>" + _html_table(["run", "status", "directory"], status_rows, wrap=True))
    plots = detection_plots(groups, out)
    _add_section(sections_md, sections_html, ReportSection("Plots", figures=tuple(plots)))
    plots = panel + plots
    paths = {"markdown": out / "report.md", "html": out / "report.html", "json": out / "report.json",
             "csv": out / "report.csv"}
    notes = list(notes or []) + repeated_seed_warnings(groups)
    # each file whole or not at all, and a full disk names the file (backbones.checkpoint_io.atomic_write)
    atomic_write_text(paths["markdown"], f"# {_md(title)}\n\n" + "".join(f"{_md(n)}\n\n" for n in notes)
                      + "\n".join(sections_md))
    atomic_write_text(
        paths["html"],
        '<!DOCTYPE html>\n<html xmlns="http://www.w3.org/1999/xhtml" lang="en"><head><meta charset="utf-8"/>'
        f"<title>{html.escape(title)}</title><style>body{{font-family:sans-serif;margin:1em 1.5em}}"
        # numbers never wrap ("18.2 ± 0.1" on one line), headers may: the main table fits a 1280-px window
        "table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #999;padding:2px 5px;"
        "text-align:right}td{white-space:nowrap}th{vertical-align:bottom}.spread{font-size:11px;color:#555}"
        # config values and paths wrap anywhere: the table of what differs fits the window too
        "table.text td{white-space:normal;overflow-wrap:anywhere;text-align:left}"
        "table.text td:first-child{white-space:nowrap}"
        "img{max-width:100%}</style></head><body>"
        f"<h1>{html.escape(title)}</h1>{''.join(f'<p>{html.escape(n)}</p>' for n in notes)}"
        f"{''.join(sections_html)}</body></html>\n")
    atomic_write_text(paths["json"], strict_json({
        "results": zoo_json, "tables": table_json, "conditions": conditions,
        "differences": ({"columns": differences[0], "rows": differences[1]} if isinstance(differences, tuple)
                        else differences), "chance": chance or {},
        "warnings": repeated_seed_warnings(groups),
        "groups": [{"name": g.name, "runs": [r.name for r in g.runs], "backbone": g.first.backbone,
                    "width": g.first.width, "init": g.first.init, "n": g.n, "seeds": g.seeds,
                    "repeated_seeds": {str(k): v for k, v in g.repeated_seeds.items()},
                    "unit": g.unit, "metrics": {k: asdict(m) for k, m in g.metrics.items()}}
                   for g in groups],
        "pretraining": [{k: v for k, v in asdict(p).items() if k != "history"} for p in pretrain],
        "runs": [{k: v for k, v in asdict(r).items() if k not in ("train_log", "pr", "config")} for r in runs],
        "plots": [f for f, _ in pre_plots + plots]}))
    table = io.StringIO(newline="")
    csv.writer(table).writerows([[_csv_cell(c) for c in row] for row in csv_rows])
    atomic_write_text(paths["csv"], table.getvalue())
    for f, _ in pre_plots + plots:
        paths[f] = out / f
    return paths
