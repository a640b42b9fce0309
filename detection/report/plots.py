"""The report's figures (PNG, matplotlib Agg): PR curves, per-category AP, training curves, AP vs mult-adds, and
the pretraining curves of the backbones. Each function returns [(file name, caption)] for what it drew."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from backbones.checkpoint_io import atomic_write
from classification.analysis.figures import pyplot

from .groups import RunGroup
from .runs import PretrainInfo

__all__ = ["detection_plots", "pretraining_plot", "ScatterPoint", "scatter_plot"]


def _saver(out: Path, made: list[tuple[str, str]]):
    plt = pyplot()

    def save(fig, name: str, caption: str) -> None:
        fig.tight_layout()
        atomic_write(out / name, lambda f: fig.savefig(f, format="png", dpi=100))
        plt.close(fig)
        made.append((name, caption))

    return save


def _label(g: RunGroup) -> str:
    return g.name + (f" (n={g.n})" if g.n > 1 else "")


def detection_plots(groups: list[RunGroup], out: Path) -> list[tuple[str, str]]:
    plt = pyplot()
    made: list[tuple[str, str]] = []
    save = _saver(out, made)
    finished = [g for g in groups if g.n]
    for key, title in (("iou50", "IoU 0.5"), ("iou75", "IoU 0.75")):
        curves = [(g, g.pr(key)) for g in finished if g.pr(key)]
        if not curves:
            continue
        fig, ax = plt.subplots(figsize=(5, 4))
        for g, c in curves:
            pts = [(x, y) for x, y in zip(c["recall"], c["precision"]) if y is not None]
            ax.plot([p[0] for p in pts], [p[1] for p in pts], label=_label(g))
        ax.set(xlabel="recall", ylabel="precision (mean over categories)", title=f"Precision-recall, {title}",
               xlim=(0, 1), ylim=(0, 1.02))
        ax.legend(fontsize=8)
        save(fig, f"pr_{key}.png", f"Precision-recall at {title} (mean over seeds where n > 1)")
    per_cat = [(g, g.per_category()) for g in finished]
    cats = sorted({c for _, pc in per_cat for c in pc})
    if cats:
        fig, ax = plt.subplots(figsize=(max(5, 0.6 * len(cats) * max(1, len(finished))), 4))
        width = 0.8 / max(1, len(finished))
        for i, (g, pc) in enumerate(per_cat):
            ax.bar([j + i * width for j in range(len(cats))], [pc.get(c, float("nan")) for c in cats], width,
                   label=_label(g))
        ax.set_xticks([j + 0.4 - width / 2 for j in range(len(cats))], cats, rotation=45, ha="right", fontsize=8)
        ax.set(ylabel="AP", title="Per-category AP")
        ax.legend(fontsize=8)
        save(fig, "per_category_ap.png", "Per-category AP (a gap: the category is missing in that run)")
    logged = [r for g in groups for r in g.runs if r.train_log]
    if logged:
        fig, (a1, a2) = plt.subplots(1, 2, figsize=(9, 3.5))
        for r in logged:
            pts = [(row["iteration"], row["total_loss"]) for row in r.train_log if "total_loss" in row]
            lrs = [(row["iteration"], row["lr"]) for row in r.train_log if "lr" in row]
            a1.plot([p[0] for p in pts], [p[1] for p in pts], label=r.name)
            a2.plot([p[0] for p in lrs], [p[1] for p in lrs], label=r.name)
        a1.set(xlabel="iteration", ylabel="total loss", title="Training loss")
        a2.set(xlabel="iteration", ylabel="learning rate", title="Learning rate")
        a1.legend(fontsize=7)
        save(fig, "training_curves.png", "Detection training loss and learning rate")
    flops = [g for g in finished if g.first.gmacs]
    if flops:
        fig, ax = plt.subplots(figsize=(5, 4))
        for g in flops:
            main = "AP" if g.first.kind == "coco" else "AP50"
            y = g.mean(main)
            if y is None or math.isnan(y):
                continue
            sd = g.sd(main)
            ax.errorbar([g.first.gmacs], [y], yerr=[sd] if sd is not None else None, fmt="o", capsize=3)
            ax.annotate(g.name, (g.first.gmacs, y), fontsize=8)
        ax.set(xlabel="backbone GMACs at 224x224 (paper Table 1 counting)", ylabel="AP (COCO) / mAP50 (VOC)",
               title="Accuracy vs backbone complexity")
        save(fig, "ap_vs_flops.png", "AP vs backbone mult-adds (error bars: seed standard deviation)")
    return made


def pretraining_plot(infos: list[PretrainInfo], out: Path) -> list[tuple[str, str]]:
    """Top-1 error (val: solid, running training error: dashed) against images seen, one colour per backbone."""
    curves = [i for i in infos if i.history.get("iteration")]
    if not curves:
        return []
    plt = pyplot()
    made: list[tuple[str, str]] = []
    fig, ax = plt.subplots(figsize=(6, 4))
    for k, info in enumerate(curves):
        per_iter = (info.images_seen / info.iterations) if info.images_seen and info.iterations else \
            (info.batch_size or 1)
        seen = [it * per_iter for it in info.history["iteration"]]
        label = f"{info.model} x{info.width:g}"
        ax.plot(seen, info.history.get("test_error", []), "-", color=f"C{k}", label=f"{label} val")
        if info.history.get("train_error"):
            ax.plot(seen, info.history["train_error"], "--", color=f"C{k}", label=f"{label} train (running)")
    ax.set(xlabel="images seen", ylabel="top-1 error (%)", title="Backbone pretraining", ylim=(0, 100))
    ax.legend(fontsize=8)
    _saver(out, made)(fig, "pretraining.png", "Pretraining top-1 error against images seen (solid: val split, "
                                              "dashed: running training error)")
    return made


@dataclass(frozen=True)
class ScatterPoint:
    """A labelled point with its 95% intervals (None: no interval) and the group its marker stands for."""

    label: str
    group: str
    x: float
    y: float
    x_interval: tuple[float, float] | None = None
    y_interval: tuple[float, float] | None = None


MARKERS = "osD^v<>Px*"


def scatter_plot(points: list[ScatterPoint], out: Path, name: str, *, xlabel: str, ylabel: str, title: str,
                 caption: str) -> list[tuple[str, str]]:
    """One point per item with both intervals as error bars, one marker per group (a legend of the groups)."""
    if not points:
        return []
    plt = pyplot()
    made: list[tuple[str, str]] = []
    fig, ax = plt.subplots(figsize=(6.4, 4.6))
    groups = list(dict.fromkeys(p.group for p in points))
    for i, group in enumerate(groups):
        for p in (p for p in points if p.group == group):
            xerr = [[p.x - p.x_interval[0]], [p.x_interval[1] - p.x]] if p.x_interval else None
            yerr = [[p.y - p.y_interval[0]], [p.y_interval[1] - p.y]] if p.y_interval else None
            ax.errorbar(p.x, p.y, xerr=xerr, yerr=yerr, fmt=MARKERS[i % len(MARKERS)], color=f"C{i}",
                        capsize=3, label=group if p is next(q for q in points if q.group == group) else None)
            ax.annotate(p.label, (p.x, p.y), textcoords="offset points", xytext=(5, 5), fontsize=8)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    _saver(out, made)(fig, name, caption)
    return made
