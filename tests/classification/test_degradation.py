"""classification.analysis.degradation: every net and option is checked before anything is built or trained."""

import pytest

from classification.analysis.degradation import run_degradation
from classification.engine.trainer import ClsConfig


@pytest.mark.parametrize("models, message", [
    (["cifar_plain20", "vgg16"], "vgg16 has no option 'preact'"),  # a family without pre-activation units
    (["cifar_plain20", "cifar_plain8"], "unknown model 'cifar_plain8'"),
])
def test_a_net_that_cannot_be_built_with_the_recipe_is_named_before_any_net_trains(tmp_path, models, message):
    base = ClsConfig(dataset="embedded", iterations=4, model_options={"preact": True})
    with pytest.raises(ValueError, match=message):
        run_degradation(models, base, tmp_path / "deg")
    assert not (tmp_path / "deg").exists()


def test_a_rerun_into_a_directory_that_holds_the_runs_is_refused_before_any_net_trains(tmp_path):
    """tools/degradation.py rerun with another --lr / --seed into the same --output-dir reported the old runs as new
    and rewrote their config.json with settings never run: the run directory rules of train_cls apply."""
    from classification.engine.errors import UsageError

    old = tmp_path / "deg" / "cifar_resnet20"
    old.mkdir(parents=True)
    (old / "metrics.json").write_text('{"final": {"top1": 80.0}}')
    (old / "config.json").write_text('{"lr": 0.1}')
    base = ClsConfig(dataset="embedded", iterations=4, lr=0.05)
    with pytest.raises(UsageError, match=r"--output-dir .*cifar_resnet20 already holds a run \(metrics.json\); "
                                         r"refusing to train a degradation net into it and overwrite it. Choose "
                                         r"another --output-dir.$"):
        run_degradation(["cifar_plain20", "cifar_resnet20"], base, tmp_path / "deg")
    assert not (tmp_path / "deg" / "cifar_plain20" / "config.json").exists()  # nothing trained
    assert (old / "config.json").read_text() == '{"lr": 0.1}'


def test_the_tost_margin_is_the_sd_of_a_difference_of_two_seeds_in_the_committed_runs():
    """RECIPE.equivalence_margin is a measured quantity, not a round number: sqrt(2) x the pooled seed sd of the
    20-layer nets' final training error in the runs MARGIN_RUNS names (each net's sum of squares over its seeds)."""
    import json
    import math
    from pathlib import Path

    from classification.analysis.degradation import MARGIN_RUNS, RECIPE

    squares, df = 0.0, 0
    for name in MARGIN_RUNS:
        job = json.loads((Path(__file__).parents[2] / "results" / name).read_text())
        for net in job["degradation"]:
            if net["depth"] == 20:
                runs = [errors[-1] for errors in net["errors"]["train"].values()]
                mean = sum(runs) / len(runs)
                squares += sum((r - mean) ** 2 for r in runs)
                df += len(runs) - 1
    assert df == 4
    assert RECIPE.equivalence_margin == pytest.approx(math.sqrt(2 * squares / df), abs=0.005)
