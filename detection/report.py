"""COCO / VOC mAP reports: finished runs side by side, against a baseline run and the paper (Tables 7 and 8).

    write_report(["output/vgg16", "output/r101"], "output/report")  ->  report.md, report.html, report.json,
                                                                          report.csv, and the PNG plots beside them
A run directory is what tools/train_det.py writes: config.yaml, metrics.json, training_log.json and
inference/<dataset>/{coco,voc}_eval_bbox.json. A run without metrics (still training, crashed) is listed with
its status; COCO and VOC runs get separate tables; a category missing from a run shows as a dash.
"""

from __future__ import annotations

import csv
import html
import json
import math
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

import yaml

__all__ = ["RunResult", "load_run", "write_report", "PAPER_REFERENCE"]

COCO_COLUMNS = ("AP", "AP50", "AP75", "APs", "APm", "APl")
VOC_COLUMNS = ("AP50", "mAP50_voc07", "mAP50_area", "AP", "AP75")
# He et al. 2016, Tables 7 and 8 (Faster R-CNN; the paper's training and test conditions).
PAPER_REFERENCE = {
    "coco": {"condition": "paper Table 8: COCO val, trained on COCO train, shorter side 600",
             "VGG-16": {"AP": 21.2, "AP50": 41.5}, "ResNet-101": {"AP": 27.2, "AP50": 48.4}},
    "voc": {"condition": "paper Table 7: VOC 2007 test, trained on VOC 07+12 trainval",
            "VGG-16": {"AP50": 73.2}, "ResNet-101": {"AP50": 76.4}},
}


def _paper_name(backbone: str) -> str | None:
    return {"vgg16": "VGG-16", "vgg16_bn": "VGG-16", "resnet101": "ResNet-101"}.get(backbone)


@dataclass
class RunResult:
    name: str
    path: str
    status: str  # "finished", "no metrics (training or crashed)", "crashed: ..."
    backbone: str = "?"
    config: str = ""
    dataset: str = ""
    kind: str = ""  # "coco" or "voc"
    iterations: int | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    per_category: dict[str, float] = field(default_factory=dict)
    pr: dict[str, dict] = field(default_factory=dict)  # "iou50"/"iou75" -> {"recall": [...], "precision": [...]}
    train_log: list[dict] = field(default_factory=list)
    gmacs: float | None = None


def _read_json(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def _read_train_log(path: Path) -> list[dict]:
    rows = []
    if path.is_file():
        for line in path.read_text().splitlines():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # a line cut by a crash
    return rows


def _mean_curve(curves: dict[str, list]) -> list[float | None]:
    cols = list(zip(*curves.values())) if curves else []
    out = []
    for col in cols:
        vals = [v for v in col if v is not None]
        out.append(sum(vals) / len(vals) if vals else None)
    return out


def load_run(path: str | os.PathLike, name: str | None = None) -> RunResult:
    path = Path(path)
    run = RunResult(name=name or path.name, path=str(path), status="no metrics (training or crashed)")
    cfg = yaml.safe_load((path / "config.yaml").read_text()) if (path / "config.yaml").is_file() else {}
    model = (cfg or {}).get("MODEL", {})
    run.backbone = model.get("BACKBONES", {}).get("NAME", model.get("BACKBONE", {}).get("NAME", "?"))
    run.config = f"{model.get('BACKBONE', {}).get('NAME', '')} / {model.get('ROI_HEADS', {}).get('NAME', '')}"
    run.iterations = (cfg or {}).get("SOLVER", {}).get("MAX_ITER")
    tests = (cfg or {}).get("DATASETS", {}).get("TEST", [])
    run.dataset = tests[0] if tests else ""
    run.train_log = _read_train_log(path / "training_log.json")
    log = path / "log.txt"
    if log.is_file() and "Traceback (most recent call last)" in log.read_text(errors="replace")[-20000:]:
        run.status = "crashed (see log.txt)"
    metrics = _read_json(path / "metrics.json")
    if not metrics or "evaluation" not in metrics:
        return run
    evaluation = metrics["evaluation"]
    if run.dataset not in evaluation:
        run.dataset = next(iter(evaluation), run.dataset)
    bbox = evaluation.get(run.dataset, {}).get("bbox", {})
    if not bbox:
        run.status = "no bbox metrics"
        return run
    run.status = "finished"
    if metrics.get("iterations_completed") is not None:
        run.iterations = metrics["iterations_completed"]
    voc = "mAP50_voc07" in bbox
    run.kind = "voc" if voc else "coco"
    cols = VOC_COLUMNS if voc else COCO_COLUMNS
    run.metrics = {k: float(bbox[k]) for k in cols if k in bbox}
    prefix = "AP50-" if voc else "AP-"
    run.per_category = {k[len(prefix):]: float(v) for k, v in bbox.items() if k.startswith(prefix)}
    inference = path / "inference" / run.dataset
    coco_eval = _read_json(inference / "coco_eval_bbox.json")
    voc_eval = _read_json(inference / "voc_eval_bbox.json")
    if coco_eval and coco_eval.get("precision"):
        rec = coco_eval["recall_thresholds"]
        for key in ("iou50", "iou75"):
            run.pr[key] = {"recall": rec, "precision": _mean_curve(coco_eval["precision"].get(key, {}))}
    elif voc_eval and voc_eval.get("pr_curves_iou50"):
        # VOC curves are per class with their own recall points: interpolate onto 101 recall thresholds.
        rec = [i / 100 for i in range(101)]
        per_class = {}
        for cname, c in voc_eval["pr_curves_iou50"].items():
            per_class[cname] = [max([p for r, p in zip(c["recall"], c["precision"]) if r >= t], default=0.0)
                                for t in rec]
        run.pr["iou50"] = {"recall": rec, "precision": _mean_curve(per_class)}
    return run


def _gmacs(backbone: str) -> float | None:
    try:
        from backbones import complexity, create_model

        return complexity(create_model(backbone, num_classes=1000)).gmacs
    except Exception:  # an unknown / non-backbones name: no FLOPs column
        return None


def _fmt(v, nd=1) -> str:
    return "—" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.{nd}f}"


def _table_rows(runs: list[RunResult], kind: str, baseline: RunResult | None) -> tuple[list[str], list[list]]:
    cols = COCO_COLUMNS if kind == "coco" else VOC_COLUMNS
    main = "AP" if kind == "coco" else "AP50"
    head = ["run", "backbone", "dataset", "iterations", "GMACs (224²)", *cols,
            f"Δ{main} vs {baseline.name if baseline else '—'}", "relative", "paper AP50 / AP"]
    rows = []
    for r in runs:
        base = baseline.metrics.get(main) if baseline and baseline.metrics else None
        ours = r.metrics.get(main)
        delta = None if base is None or ours is None else ours - base
        rel = None if delta is None or not base else 100.0 * delta / base
        paper = PAPER_REFERENCE[kind].get(_paper_name(r.backbone) or "", {})
        paper_s = " / ".join(_fmt(paper.get(k)) for k in ("AP50", "AP") if k in paper) or "—"
        rows.append([r.name, r.backbone, r.dataset, r.iterations if r.iterations is not None else "—",
                     _fmt(r.gmacs, 2), *[_fmt(r.metrics.get(c)) for c in cols],
                     "baseline" if r is baseline else _fmt(delta, 2),
                     "—" if r is baseline or rel is None else f"{rel:+.1f}%", paper_s])
    return head, rows


def _plots(runs: list[RunResult], out: Path) -> list[tuple[str, str]]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    made: list[tuple[str, str]] = []

    def save(fig, name: str, caption: str) -> None:
        fig.tight_layout()
        fig.savefig(out / name, dpi=100)
        plt.close(fig)
        made.append((name, caption))

    finished = [r for r in runs if r.status == "finished"]
    for key, title in (("iou50", "IoU 0.5"), ("iou75", "IoU 0.75")):
        curves = [(r, r.pr[key]) for r in finished if key in r.pr]
        if not curves:
            continue
        fig, ax = plt.subplots(figsize=(5, 4))
        for r, c in curves:
            pts = [(x, y) for x, y in zip(c["recall"], c["precision"]) if y is not None]
            ax.plot([p[0] for p in pts], [p[1] for p in pts], label=f"{r.name} ({r.backbone})")
        ax.set(xlabel="recall", ylabel="precision (mean over categories)", title=f"Precision-recall, {title}",
               xlim=(0, 1), ylim=(0, 1.02))
        ax.legend(fontsize=8)
        save(fig, f"pr_{key}.png", f"Precision-recall at {title}")
    cats = sorted({c for r in finished for c in r.per_category})
    if cats:
        fig, ax = plt.subplots(figsize=(max(5, 0.6 * len(cats) * max(1, len(finished))), 4))
        width = 0.8 / max(1, len(finished))
        for i, r in enumerate(finished):
            vals = [r.per_category.get(c, float("nan")) for c in cats]
            ax.bar([j + i * width for j in range(len(cats))], vals, width, label=r.name)
        ax.set_xticks([j + 0.4 - width / 2 for j in range(len(cats))], cats, rotation=45, ha="right", fontsize=8)
        ax.set(ylabel="AP", title="Per-category AP")
        ax.legend(fontsize=8)
        save(fig, "per_category_ap.png", "Per-category AP (a gap: the category is missing in that run)")
    logged = [r for r in runs if r.train_log]
    if logged:
        fig, (a1, a2) = plt.subplots(1, 2, figsize=(9, 3.5))
        for r in logged:
            pts = [(row["iteration"], row["total_loss"]) for row in r.train_log if "total_loss" in row]
            lrs = [(row["iteration"], row["lr"]) for row in r.train_log if "lr" in row]
            a1.plot([p[0] for p in pts], [p[1] for p in pts], label=r.name)
            a2.plot([p[0] for p in lrs], [p[1] for p in lrs], label=r.name)
        a1.set(xlabel="iteration", ylabel="total loss", title="Training loss")
        a2.set(xlabel="iteration", ylabel="learning rate", title="Learning rate")
        a1.legend(fontsize=8)
        save(fig, "training_curves.png", "Training loss and learning rate")
    flops = [r for r in finished if r.gmacs]
    if flops:
        fig, ax = plt.subplots(figsize=(5, 4))
        for r in flops:
            main = "AP" if r.kind == "coco" else "AP50"
            ax.scatter([r.gmacs], [r.metrics.get(main, float("nan"))])
            ax.annotate(r.name, (r.gmacs, r.metrics.get(main, 0.0)), fontsize=8)
        ax.set(xlabel="backbone GMACs at 224x224 (paper Table 1 counting)", ylabel="AP (COCO) / mAP50 (VOC)",
               title="Accuracy vs backbone complexity")
        save(fig, "ap_vs_flops.png", "AP vs backbone mult-adds")
    return made


def _markdown_table(head, rows) -> str:
    lines = ["| " + " | ".join(map(str, head)) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(map(str, r)) + " |" for r in rows]
    return "\n".join(lines)


def _html_table(head, rows) -> str:
    th = "".join(f"<th>{html.escape(str(h))}</th>" for h in head)
    trs = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{th}</tr></thead><tbody>{trs}</tbody></table>"


def write_report(run_dirs: list[str | os.PathLike], out_dir: str | os.PathLike, *, baseline: str | None = None,
                 names: list[str] | None = None, title: str = "Detection transfer benchmark",
                 notes: list[str] | None = None) -> dict[str, Path]:
    """Write the report; `baseline` is a run name (default: the first VGG-16 run, else the first run); `notes` are
    lines printed under the title (conditions, the chance level of the dataset, ...)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    runs = [load_run(p, n) for p, n in zip(run_dirs, names or [None] * len(run_dirs))]
    for r in runs:
        r.gmacs = _gmacs(r.backbone)
    sections_md, sections_html, table_json = [], [], {}
    kinds = [k for k in ("coco", "voc") if any(r.kind == k for r in runs)] or ["coco"]
    csv_rows = []
    for kind in kinds:
        group = [r for r in runs if r.kind in (kind, "")]  # unfinished runs appear in every table
        if baseline:
            base = next((r for r in group if r.name == baseline), None)
        else:
            base = next((r for r in group if r.backbone.startswith("vgg16") and r.status == "finished"), None) or \
                next((r for r in group if r.status == "finished"), None)
        head, rows = _table_rows(group, kind, base)
        label = "COCO-style box AP" if kind == "coco" else "PASCAL VOC box AP"
        cond = PAPER_REFERENCE[kind]["condition"]
        sections_md.append(f"## {label}\n\n{_markdown_table(head, rows)}\n\nPaper numbers: {cond}. Ours: the "
                           "conditions of each run (dataset, schedule) as listed; compare deltas, not absolutes.\n")
        sections_html.append(f"<h2>{label}</h2>{_html_table(head, rows)}<p>Paper numbers: {html.escape(cond)}."
                             "</p>")
        table_json[kind] = {"columns": head, "rows": rows, "baseline": base.name if base else None}
        csv_rows += [["table", *head]] + [[kind, *row] for row in rows]
    status_rows = [[r.name, r.status, r.path] for r in runs]
    sections_md.append("## Runs\n\n" + _markdown_table(["run", "status", "directory"], status_rows) + "\n")
    sections_html.append("<h2>Runs</h2>" + _html_table(["run", "status", "directory"], status_rows))
    plots = _plots(runs, out)
    sections_md.append("## Plots\n\n" + "\n\n".join(f"![{cap}]({f})" for f, cap in plots) + "\n")
    sections_html.append("<h2>Plots</h2>" + "".join(
        f'<figure><img src="{f}" alt="{html.escape(cap)}"/><figcaption>{html.escape(cap)}</figcaption></figure>'
        for f, cap in plots))
    paths = {"markdown": out / "report.md", "html": out / "report.html", "json": out / "report.json",
             "csv": out / "report.csv"}
    notes = notes or []
    paths["markdown"].write_text(f"# {title}\n\n" + "".join(f"{n}\n\n" for n in notes) + "\n".join(sections_md))
    paths["html"].write_text(
        '<!DOCTYPE html>\n<html xmlns="http://www.w3.org/1999/xhtml" lang="en"><head><meta charset="utf-8"/>'
        f"<title>{html.escape(title)}</title><style>body{{font-family:sans-serif;margin:2em}}"
        "table{border-collapse:collapse}td,th{border:1px solid #999;padding:3px 8px;text-align:right}"
        "img{max-width:100%}</style></head><body>"
        f"<h1>{html.escape(title)}</h1>{''.join(f'<p>{html.escape(n)}</p>' for n in notes)}"
        f"{''.join(sections_html)}</body></html>\n")
    paths["json"].write_text(json.dumps({"tables": table_json, "runs": [
        {k: v for k, v in asdict(r).items() if k not in ("train_log", "pr")} for r in runs],
        "plots": [f for f, _ in plots]}, indent=2, default=str))
    with open(paths["csv"], "w", newline="") as f:
        csv.writer(f).writerows(csv_rows)
    for f, _ in plots:
        paths[f] = out / f
    return paths
