"""The report's figures (PNG, matplotlib Agg): PR curves, per-category AP, training curves, AP vs mult-adds, and
the pretraining curves of the backbones. Each function returns [(file name, caption)] for what it drew."""

from __future__ import annotations

import math
import textwrap
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
        fig.tight_layout()  # panels apart; bbox "tight": the image grows to hold every label and outside legend
        atomic_write(out / name, lambda f: fig.savefig(f, format="png", dpi=100, bbox_inches="tight"))
        plt.close(fig)
        made.append((name, caption))

    return save


def _label(g: RunGroup) -> str:
    return g.name + (f" (n={g.n})" if g.n > 1 else "")


LINESTYLES = ("-", "--", "-.", ":")  # with the colour, every line of a plot tells itself apart (also in grey)


def _style(i: int) -> dict:
    """Ten colours, then the next line style: 40 lines before a pair repeats (the family job plots 21 runs)."""
    return {"color": f"C{i % 10}", "linestyle": LINESTYLES[(i // 10) % len(LINESTYLES)]}


def _legend_right(ax, **kwargs) -> None:
    """The legend beside the axes, never over the data."""
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, fontsize=8, **kwargs)


def detection_plots(groups: list[RunGroup], out: Path) -> list[tuple[str, str]]:
    made: list[tuple[str, str]] = []
    save = _saver(out, made)
    finished = [g for g in groups if g.n]
    _pr_plot(finished, save)
    _per_category_plot(finished, save)
    _training_plot([r for g in groups for r in g.runs if r.train_log], save)
    _flops_plot([g for g in finished if g.first.gmacs], save)
    return made


def _pr_plot(finished: list[RunGroup], save) -> None:
    """Both IoU thresholds side by side, one legend for the two."""
    panels = [(key, title, [(g, g.pr(key)) for g in finished if g.pr(key)])
              for key, title in (("iou50", "IoU 0.5"), ("iou75", "IoU 0.75"))]
    panels = [p for p in panels if p[2]]
    if not panels:
        return
    plt = pyplot()
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.6), squeeze=False)
    for ax, (_, title, curves) in zip(axes[0], panels):
        for g, c in curves:
            pts = [(x, y) for x, y in zip(c["recall"], c["precision"]) if y is not None]
            ax.plot([p[0] for p in pts], [p[1] for p in pts], label=_label(g), **_style(finished.index(g)))
        ax.set(xlabel="recall", ylabel="precision (mean over categories)", title=f"Precision-recall, {title}",
               xlim=(0, 1), ylim=(0, 1.02))
        ax.grid(alpha=0.3)
    _legend_right(axes[0][-1])
    seeds = " (mean over a group's runs where n > 1)" if any(g.n > 1 for g in finished) else ""
    save(fig, "pr_curves.png", "Precision-recall at " + " and ".join(t for _, t, _ in panels) + seeds)


def _per_category_plot(finished: list[RunGroup], save) -> None:
    per_cat = [(g, g.per_category()) for g in finished]
    cats = sorted({c for _, pc in per_cat for c in pc})
    if not cats:
        return
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(max(5.0, 0.5 * len(cats) * max(1, len(finished))), 3.6))
    width = 0.8 / max(1, len(finished))
    for i, (g, pc) in enumerate(per_cat):
        ax.bar([j + i * width for j in range(len(cats))], [pc.get(c, float("nan")) for c in cats], width,
               label=_label(g), color=f"C{i % 10}")
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(cats))], cats, rotation=45, ha="right", fontsize=8)
    ax.set(ylabel="AP", title="Per-category AP", ylim=(0, 100))
    ax.grid(axis="y", alpha=0.3)
    _legend_right(ax)
    missing = any(c not in pc for _, pc in per_cat for c in cats)
    save(fig, "per_category_ap.png", "Per-category AP" + (" (a gap: the category is missing in that run)"
                                                          if missing else ""))


def _training_plot(logged: list, save) -> None:
    """Loss per run; the learning rate once per distinct schedule, labelled with the runs that share it (runs of
    one schedule drew identical lines, hidden under each other)."""
    if not logged:
        return
    plt = pyplot()
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 3.4))
    for i, r in enumerate(logged):
        pts = [(row["iteration"], row["total_loss"]) for row in r.train_log if "total_loss" in row]
        a1.plot([p[0] for p in pts], [p[1] for p in pts], label=r.name, linewidth=1.2, **_style(i))
    schedules: dict[tuple, list[str]] = {}
    for r in logged:
        lrs = tuple((row["iteration"], row["lr"]) for row in r.train_log if "lr" in row)
        if lrs:
            schedules.setdefault(lrs, []).append(r.name)
    for i, (lrs, names) in enumerate(schedules.items()):
        label = textwrap.fill(", ".join(names), 70) if len(schedules) > 1 else "every run"
        a2.plot([p[0] for p in lrs], [p[1] for p in lrs], linewidth=1.2, label=label, **_style(i))
    a1.set(xlabel="iteration", ylabel="total loss", title="Training loss")
    a2.set(xlabel="iteration", ylabel="learning rate", title="Learning rate (one line per schedule)")
    for ax in (a1, a2):
        ax.grid(alpha=0.3)
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.3), fontsize=8)  # below the axis label: no data hidden
    save(fig, "training_curves.png", "Detection training loss per run, and the learning rate per distinct schedule")


def _flops_plot(flops: list[RunGroup], save) -> None:
    """AP against GMACs, one marker per group named in the legend; error bars the 95% interval over its units where
    it has one, and the caption says which groups have none."""
    points = [(g, "AP" if g.first.kind == "coco" else "AP50") for g in flops]
    points = [(g, key) for g, key in points if g.mean(key) is not None and not math.isnan(g.mean(key))]
    if not points:
        return
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    without = []
    for i, (g, key) in enumerate(points):
        m = g.metrics[key]
        yerr = None if m.interval is None else [[m.mean - m.interval[0]], [m.interval[1] - m.mean]]
        if yerr is None:
            without.append(g.name)
        ax.errorbar([g.first.gmacs], [m.mean], yerr=yerr, fmt=MARKERS[i % len(MARKERS)], color=f"C{i % 10}",
                    capsize=3, label=_label(g))
    keys = {key for _, key in points}
    ax.set(xlabel="backbone GMACs at 224x224 (paper Table 1 counting)",
           ylabel="box AP" if keys == {"AP"} else "box AP50" if keys == {"AP50"} else "AP (COCO) / AP50 (VOC)",
           title="Accuracy vs backbone complexity")
    ax.margins(x=0.15, y=0.15)
    ax.grid(alpha=0.3)
    _legend_right(ax)
    bars = ("error bars: 95% interval over the group's units" + (f"; none for {', '.join(without)} (no interval)"
                                                                  if without else "")
            if len(without) < len(points) else "no error bars: no group has an interval")
    save(fig, "ap_vs_flops.png", f"AP vs backbone mult-adds ({bars})")


def pretraining_plot(infos: list[PretrainInfo], out: Path) -> list[tuple[str, str]]:
    """Top-1 error (val: solid, running training error: dashed) against images seen, one colour per backbone."""
    curves = [i for i in infos if i.history.get("iteration")]
    if not curves:
        return []
    plt = pyplot()
    made: list[tuple[str, str]] = []
    fig, ax = plt.subplots(figsize=(7.5, 4))
    for k, info in enumerate(curves):
        per_iter = (info.images_seen / info.iterations) if info.images_seen and info.iterations else \
            (info.batch_size or 1)
        seen = [it * per_iter for it in info.history["iteration"]]
        label = f"{info.model} x{info.width:g}"
        ax.plot(seen, info.history.get("test_error", []), "-", color=f"C{k}", label=f"{label} val")
        if info.history.get("train_error"):
            ax.plot(seen, info.history["train_error"], "--", color=f"C{k}", label=f"{label} train (running)")
    ax.set(xlabel="images seen", ylabel="top-1 error (%)", title="Backbone pretraining", ylim=(0, 100))
    _legend_right(ax)
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
    ax.margins(x=0.12, y=0.12)
    ax.grid(alpha=0.3)
    _legend_right(ax)
    _saver(out, made)(fig, name, caption)
    return made
