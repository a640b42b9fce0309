"""Figs. 1 and 6: plain and residual nets of several depths trained under the same budget; training error
(dashed) and test (or val) error (solid) against iterations, in one PNG, plus a table."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import torch

from backbones import create_model
from backbones.checkpoint_io import atomic_write_text
from backbones.strict_json import strict_json

from ..engine.run_directory import claim_run_directory
from ..engine.trainer import ClsConfig, train

__all__ = ["DegradationRecipe", "RECIPE", "MARGIN_RUNS", "run_degradation", "plot_curves", "summary_table"]


@dataclass(frozen=True)
class DegradationRecipe:
    """The one recipe of the degradation experiment, read by the main job (detection/main_job/plan.py) and by
    tools/degradation.py's defaults: the paper's CIFAR schedule (lr 0.1 at batch 128, x0.1 at 50% and 75% -- the
    classification trainer's default milestones), the paper's 2015 units (post-activation, option A shortcuts; a
    test checks them against an independent Sec. 4.2 implementation), the same units for plain and residual nets,
    so only the depth and the shortcuts differ, and a budget at which every net leaves chance.

    The budget and the warm-up: the 56-layer nets sit on a plateau near chance at lr 0.1 and leave it at an
    iteration that depends on the seed (shared/notes/DEGRADATION_PROBE.md; RESULTS.md, "the degradation preset with
    the paper's 2015 units": without warm-up ResNet-56 seed 0 left it near iteration 500, seed 1 was still at 86 %
    when the lr was cut at 800). At initialisation plain-56's gradient is 1,700-8,400x larger at its first conv than
    at its last (ResNet-56: ~16x; the exploding gradients of deep BN nets, Yang et al. 2019), so the first steps at
    lr 0.1 inflate its early weights 7-26x (measured in those runs' final weights) and, BN making each conv scale
    invariant, divide their effective lr by the square: the trunk stops learning. The paper's own ResNet-110 remedy
    (lr 0.01 until the training error is below 80 %, then 0.1) was tried first: ResNet-56 seed 1 left chance at 0.01
    within 150 iterations, and the 10x step to 0.1 threw it back to chance. So every net gets the gradual warm-up of
    Goyal et al. (2017, Detectron2's WarmupLinear): lr rising linearly from 0.1 x warmup_factor to 0.1 over the
    first quarter of the run -- one rule for all four nets (a deviation from the paper, which warms up only
    ResNet-110). 1600 iterations keep lr 0.1 to iteration 800; 3 seeds of the 4 nets
    (the degradation preset) take 120 min on 2 cores of the AMD EPYC VM by the dry run, 126-162 on the Intel Xeon VM.
    With it every seed of every net left chance (RESULTS.md, results/degradation_2026-12-05_intel.json)."""

    models: tuple[str, ...] = ("cifar_plain20", "cifar_plain56", "cifar_resnet20", "cifar_resnet56")
    image_size: int = 32  # CIFAR's, whatever size the main job pretrains its detection backbones at
    iterations: int = 1600  # 3.4 epochs of the 60,000 composites; lr 0.1 to 800, x0.1 at 800 and 1200
    batch: int = 128
    lr: float = 0.1
    milestones: tuple[float, ...] = (0.5, 0.75)  # of the run: lr x0.1 at each (the paper's 32k and 48k of 64k)
    warmup_fraction: float = 0.25  # of the run, linear warm-up (ours, not the paper's: why above); 0: none
    warmup_factor: float = 0.001  # the lr it starts from, x lr (Detectron2's WARMUP_FACTOR default)
    preact: bool = False  # the paper's 2015 units; True: pre-activation units (He et al. 2016), an option
    chance_error: float = 90.0  # % training error of a 10-way guess
    left_chance_by: float = 20.0  # a net has left chance when its final training error is this far below chance
    # TOST's margin, in points of training error: two nets are "the same" when they differ by less than two seeds of
    # one net do -- the sd of a difference of two runs, sqrt(2) x the pooled seed sd (1.18, 4 df) of the 20-layer
    # nets' final training error in the committed run of this recipe (MARGIN_RUNS; a test recomputes it), fixed
    # before any later run is judged by it. The 56-layer nets are left out: how long each seed sits on the plateau
    # is part of what the experiment tests, not noise of a rerun. At that sd a TOST needs 4 to 8 seeds a net
    # (by its Holm step over the preset's 5 comparisons) to have a chance at all (at 3 its interval is wider than
    # the margin even at a difference of 0): the preset's 3 seeds call differences, and otherwise say "neither a
    # difference nor equivalence", with the MDE. With 4 df the sd itself is known only to [0.71, 3.4] (95%).
    equivalence_margin: float = 1.67


    def schedule(self, iterations: int, warmup_fraction: float | None = None) -> dict:
        """The recipe's lr schedule for a run of `iterations` as classification trainer options (ClsConfig
        fields), the one source of the main job's stage commands and tools/degradation.py; warmup_fraction: the
        recipe's unless given."""
        warmup = int((self.warmup_fraction if warmup_fraction is None else warmup_fraction) * iterations)
        ramp = {"warmup_method": "linear", "warmup_iterations": warmup, "warmup_factor": self.warmup_factor}
        return {"lr": self.lr, "milestones": self.milestones, **(ramp if warmup else {})}


RECIPE = DegradationRecipe()
# The degradation job whose seeds set RECIPE.equivalence_margin (results/, written by the main job): the first with
# this recipe (2026-12-04's ran without the warm-up).
MARGIN_RUNS = ("degradation_2026-12-05_intel.json",)


def run_degradation(models: list[str], base: ClsConfig, out_dir: str | Path) -> dict[str, dict]:
    """Train each model with `base` (same data, iterations, lr, seed); returns {model: history}."""
    for name in models:  # every name and option checked before the data is built and the first net trains for
        with torch.device("meta"):  # minutes: the registry's "unknown model ...; similar: ...", an option a
            create_model(name, **base.model_options)  # family lacks (VGG has no pre-activation units)
    out = Path(out_dir)
    for name in models:  # a rerun into the same directory reported the old runs as new and rewrote their config
        claim_run_directory(out / name, resume=False, writer=True, recorded=None, now={}, may_change=(), source="",
                            what="train a degradation net into it", flag="--output-dir", resumable=False)
    out.mkdir(parents=True, exist_ok=True)
    results = {}
    for name in models:
        cfg = replace(base, model=name, output_dir=str(out / name))
        results[name] = train(cfg)
    atomic_write_text(out / "degradation.json", strict_json({k: v["history"] for k, v in results.items()}))
    return {k: v["history"] for k, v in results.items()}


def plot_curves(histories: dict[str, dict], path: str | Path, title: str = "", *, eval_split: str = "test") -> None:
    """eval_split: what the solid curves were scored on, for the legend ("test" in the paper's CIFAR-10 figures;
    "val" or "held-out" on the embedded set)."""
    from .figures import pyplot

    plt = pyplot()

    fig, ax = plt.subplots(figsize=(7, 5))
    for i, (name, h) in enumerate(histories.items()):
        colour = f"C{i}"
        ax.plot(h["iteration"], h["train_error"], "--", color=colour, label=f"{name} train")
        ax.plot(h["iteration"], h["test_error"], "-", color=colour, label=f"{name} {eval_split}")
    ax.set(xlabel="iteration", ylabel="error (%)", title=title or f"Training (dashed) and {eval_split} (solid) error")
    # below the axes: inside, the legend covered the early curves
    ax.legend(fontsize=8, ncol=2, loc="upper center", bbox_to_anchor=(0.5, -0.13))
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def summary_table(histories: dict[str, dict], *, eval_split: str = "test") -> str:
    lines = [f"| model | final training error % | final {eval_split} error % | best {eval_split} error % |",
             "|---|---|---|---|"]
    for name, h in histories.items():
        if not h["test_error"]:
            lines.append(f"| {name} | — | — | — |")
            continue
        lines.append(f"| {name} | {h['train_error'][-1]:.2f} | {h['test_error'][-1]:.2f} | "
                     f"{min(h['test_error']):.2f} |")
    return "\n".join(lines)
