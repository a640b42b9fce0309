"""classification.analysis.kernel_taps on a real pretraining run: the taps that moved only by weight decay are
exactly the ones backbones.geometry says see only padding at the run's image size (res5 at 1x1 for a ResNet at 32
px), which checks the initial weights were rebuilt as the run built them."""

import pytest

from backbones.checkpoint_io import read_checkpoint
from classification.analysis.kernel_taps import tap_training
from classification.engine.config import ClsConfig
from classification.engine.run_files import RunFileError
from classification.engine.trainer import train
from conftest import run_tool


def _run(tmp_path, size: int):
    cfg = ClsConfig(model="resnet18", model_options={"width": 0.125}, dataset="embedded", image_size=size,
                    train_samples=128, val_samples=32, iterations=8, batch_size=16, lr=0.05, eval_period=8,
                    checkpoint_period=8, warmup_iterations=0, workers=0, output_dir=str(tmp_path / f"r{size}"))
    train(cfg)
    return tmp_path / f"r{size}"


def test_the_untrained_taps_of_a_32_px_run_are_the_ones_geometry_predicts_and_none_at_48(tmp_path):
    run = _run(tmp_path, 32)
    rows = {r.stage: r for r in tap_training(run)}
    res5 = rows["res5"]
    assert res5.unmoved == res5.predicted == 29 and res5.convs == 4  # 3 convs x 8 taps + the stride-2 conv's 5
    assert 0.99 < res5.shrink < 1.0  # moved by weight decay alone: a shrink, no turn
    assert all(r.unmoved == r.predicted == 0 for s, r in rows.items() if s != "res5")
    assert all(r.unmoved == r.predicted == 0 for r in tap_training(_run(tmp_path, 48)))
    result = run_tool("tools/kernel_taps.py", run, "--zero-unmoved", tmp_path / "zeroed.pth")
    assert result.returncode == 0, result.stderr
    assert f"{tmp_path / 'zeroed.pth'}: {res5.unmoved_weights:,} weights of unmoved taps set to zero" in result.stdout
    zeroed = read_checkpoint(tmp_path / "zeroed.pth")
    final = read_checkpoint(run / "model_final.pth")
    assert zeroed["meta"] == final["meta"]
    w = zeroed["model"]["res5.1.conv2.weight"]  # a 3x3 conv on res5's 1x1 map: the centre tap alone is kept
    assert w[:, :, 1, 1].equal(final["model"]["res5.1.conv2.weight"][:, :, 1, 1]) and w.abs().sum() > 0
    assert w.abs().sum(dim=(0, 1)).count_nonzero() == 1


@pytest.mark.bad_input
def test_a_run_without_its_final_checkpoint_is_named(tmp_path):
    with pytest.raises(RunFileError, match=r"no model_final.pth \(an unfinished pretraining run\)"):
        tap_training(tmp_path)
    result = run_tool("tools/kernel_taps.py", str(tmp_path))
    assert result.returncode == 2 and "unfinished pretraining run" in result.stderr
