"""What the report says about each group's conditions, read from its runs: how it was initialised (its pretraining
run's recipe), norm, schedule, data, seeds; and what differs between the groups' configurations."""

from __future__ import annotations

from .groups import RunGroup, differing_keys
from .runs import PretrainInfo

__all__ = ["condition_notes", "differences"]


def _pretraining_line(info: PretrainInfo) -> str:
    seen = f"{info.images_seen:,} images" if info.images_seen else "images seen unknown"
    err = (f"val top-1 error {info.top1_error:.1f}% (top-5 {info.top5_error:.1f}%, {info.val_images or '?'} val "
           "images)" if info.top1_error is not None else "no evaluation recorded")
    size = f", {info.image_size} px" if info.image_size else ""
    lr = f", lr {info.lr:g}" if info.lr else ""
    return (f"pretrained with tools/train_cls.py: {info.model} x{info.width:g} on {info.dataset}{size}, "
            f"{info.iterations} iterations of {info.batch_size} ({seen}{lr}), {err}; {info.path}")


def condition_notes(groups: list[RunGroup]) -> list[str]:
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


def differences(groups: list[RunGroup]) -> tuple[list[str], list[list]] | str | None:
    """What differs between the configurations (SEED and OUTPUT_DIR aside) as a table, a key per row and a group
    per column; a sentence when nothing does; None for a single group."""
    configured = [g for g in groups if g.first.config]
    if len(configured) < 2:
        return None
    diff = differing_keys(configured)
    if not diff:
        return "These configurations are identical apart from SEED and OUTPUT_DIR."
    return ["config key", *[g.name for g in configured]], [[k, *[str(v) for v in vals]] for k, vals in diff.items()]
