"""The pretraining top-1 of a backbone the job was given (--weights): published with the file (--weights-top1), in the
file's metadata, or measured here on the embedded val items when the file's classifier has their classes -- the
leaderboard's accuracy of a backbone with no pretraining run in the job."""

from __future__ import annotations

import os
from pathlib import Path

from backbones import model_info

from ..report.comparison import spread
from ..report.groups import PRETRAINING_RUN
from .family import FILE_METADATA, MEASURED, Top1, published_top1
from .plan import PlanError

__all__ = ["given_weights_top1"]


def given_weights_top1(plan) -> dict[str, Top1]:
    """The top-1 of each backbone whose weights the job was given: --weights-top1 (published), else the file's
    metadata (meta.top1), else measured on the embedded val items when the job pretrains on them and the file's
    classifier has their classes
    (this project's own checkpoints); a backbone with none of these has no top-1 (left out of the correlation).
    PlanError naming the file when it cannot be read or rebuilt for the measurement."""
    published = dict(plan.weights_top1)
    out = {}
    for model, path in plan.weights:
        try:
            top1 = _given_top1(model, path, published, plan)
        except (ValueError, RuntimeError, OSError) as err:  # a file the detection legs load, ours cannot rebuild
            raise PlanError(f"--weights {model}={path}: its top-1 cannot be read or measured ({err}); give it with "
                            f"--weights-top1 {model}=PERCENT") from None
        if top1 is not None:
            out[model] = top1
    return out


def _given_top1(model: str, path: str, published: dict[str, float], plan) -> Top1 | None:
    """The top-1 of one given file, in given_weights_top1's order of sources; None when none applies."""
    from backbones.pretrained import read_weights_file

    if model in published:
        return published_top1(published[model])
    if (meta := read_weights_file(path).meta.top1) is not None:
        if meta <= 1.0:  # below any classifier's accuracy worth transferring: written as a fraction
            raise PlanError(f"meta.top1 {meta:g} is a top-1 accuracy in percent; {meta:g}% looks like a fraction "
                            f"({meta:.1%}?)")
        return published_top1(meta, FILE_METADATA)
    if plan.pretrain_data.embedded and (error := _measure_top1_error(Path(path), plan)) is not None:
        unit = os.path.realpath(path)  # the detection legs' unit (report.groups.RunGroup.unit_of)
        return Top1(MEASURED, spread({unit: [error]}, PRETRAINING_RUN), {unit: error})
    return None


def _measure_top1_error(path: Path, plan) -> float | None:
    """Top-1 error (%) of the file's own classifier on the val items the job's pretraining runs are scored on;
    None unless the file says its classifier's outputs are those items' classes -- its recorded `classes` (this
    project's checkpoints), else a training config on the embedded set (checkpoints written before they recorded
    classes). A 10-class classifier of another dataset scored 89% error here and entered the leaderboard."""
    from backbones.convert import load_model
    from backbones.pretrained import read_weights_file
    from classification.engine.trainer import ClsConfig, build_datasets
    from classification.evaluate import evaluate

    container = read_weights_file(path).container
    val = build_datasets(ClsConfig(dataset="embedded", image_size=plan.pretrain_image_size, train_samples=1,
                                   val_samples=plan.pretrain_val_images, workers=0, output_dir=str(path.parent)))[1]
    recorded, config = container.get("classes"), container.get("config")
    if not (list(recorded) == list(val.classes) if isinstance(recorded, list) else
            isinstance(config, dict) and config.get("dataset") == "embedded"):
        return None
    name, _, net = load_model(path)
    if getattr(net.get_submodule(model_info(name).classifier), "out_features", None) != len(val.classes):
        return None
    return 100.0 - evaluate(net, val)["top1"]
