"""The main job on a tiny schedule: pretrain -> transfer hand-off, scratch controls, report, progress files, pruned
checkpoints, stage reuse, refusal of a stage made with other settings, --fresh deleting only what the job made."""

import json

import pytest
import torch

from conftest import run_tool

TINY = ["--pretrain-seeds", "0", "--seeds", "0", "--pretrain-epochs", "3", "--pretrain-images", "128",
        "--pretrain-val-images", "64", "--detect-iterations", "3", "--with-degradation", "--degradation-iterations",
        "2", "--degradation-seeds", "0", "1", "--arms", "gn_pretrained", "gn_scratch", "gn_scratch_3x",
        "gn_pretrained_3x", "frozenbn_pretrained", "--test-scenes", "100"]
STAGES = 4 + 10 + 8  # pretraining: 2 backbones x 2 norms; detection: 2 x 5 arms; degradation: 4 nets x 2 seeds


@pytest.mark.slow
def test_main_job_pretrains_transfers_reports_and_reuses_stages(tmp_path):
    out = tmp_path / "job"
    first = run_tool("tools/main_job.py", "--output-dir", out, *TINY, timeout=900)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    assert first.stdout.count("[main job] started: ") == STAGES and "min of stages (measured step times)" in \
        first.stdout
    for model in ("vgg16_bn", "resnet101"):
        for norm, arm in (("", "frozenbn_pretrained"), ("_gn", "gn_pretrained")):
            pre_dir = out / "pretrain" / f"{model}{norm}_p0"
            ckpt = pre_dir / "model_final.pth"
            pre = json.loads((pre_dir / "evaluation.json").read_text())
            assert pre["images_seen"] == 3 * 128 and pre["val_images"] == 64
            assert json.loads((pre_dir / "progress.json").read_text())["iteration"] == 3
            assert sorted(p.name for p in pre_dir.glob("model_*.pth")) == ["model_final.pth"]  # pruned
            run = out / "detect" / f"{model}_{arm}_p0_d0"
            cfg = (run / "config.yaml").read_text()
            assert f"WEIGHTS: {ckpt}" in cfg and "WIDTH: 0.25" in cfg and "SEED: 0" in cfg
            assert ("NORM: FrozenBN" if arm == "frozenbn_pretrained" else "NORM: GN") in cfg
            assert json.loads((run / "progress.json").read_text())["iteration"] == 3
            src = torch.load(ckpt, weights_only=True)["model"]
            det = torch.load(run / "model_final.pth", weights_only=True)["model"]
            first_conv = "stem.conv1.weight" if model == "resnet101" else "conv1.conv1_1.weight"
            # the hand-off: frozen stages (FREEZE_AT 2) still hold exactly the pretrained weights after training;
            # the GN arm trains every stage (FREEZE_AT 0), so its first conv moved from the pretrained one
            frozen = torch.equal(det[f"backbone.{first_conv}"], src[first_conv])
            assert frozen == (arm == "frozenbn_pretrained"), arm
            # the box regressor's bias starts at exactly 0 (Detectron2's init): non-zero means the head was trained
            assert det["roi_heads.box_predictor.bbox_pred.bias"].abs().max() > 0
        for arm, iterations in (("gn_scratch", 3), ("gn_scratch_3x", 9)):
            scratch = out / "detect" / f"{model}_{arm}_d0"
            cfg = (scratch / "config.yaml").read_text()
            assert "WEIGHTS: ''" in cfg and "NORM: GN" in cfg and "FREEZE_AT: 0" in cfg  # no BN at 2 images
            assert json.loads((scratch / "progress.json").read_text())["iteration"] == iterations
    report = out / "report"
    md = (report / "report.md").read_text()
    assert "pretrained with tools/train_cls.py: resnet101 x0.25 on embedded, 48 px" in md
    assert "paper AP50 / AP" not in md and "chance (random boxes)" in md
    assert md.index("## Result\n\n- ") < md.index("| vgg16_bn_frozenbn_pretrained |")  # the sentences first
    assert "| vgg16_bn_frozenbn_pretrained |" in md and "| resnet101_gn_scratch_3x |" in md  # the job's groups
    for png in ("qualitative.png", "pretraining.png"):
        assert (report / png).stat().st_size > 1000
    summary = (out / "summary.txt").read_text()
    assert "resnet101_gn_pretrained vs resnet101_gn_scratch (the initialisation" in summary
    assert "chance level" in summary and "pretraining resnet101 GN: val top-1 error" in summary
    results = json.loads((out / "results.json").read_text())
    assert {g["name"] for g in results["groups"]} == {f"{m}_{a}" for m in ("vgg16_bn", "resnet101") for a in (
        "gn_pretrained", "gn_scratch", "gn_scratch_3x", "gn_pretrained_3x", "frozenbn_pretrained")}
    # the like-for-like pair differs in MODEL.WEIGHTS alone, in the configs the runs saved
    assert list(results["differences"]["resnet101_gn_pretrained vs resnet101_gn_scratch"]) == ["MODEL.WEIGHTS"]
    assert list(results["differences"]["resnet101_gn_pretrained_3x vs resnet101_gn_scratch_3x"]) == ["MODEL.WEIGHTS"]
    assert "differ only in the initialisation (MODEL.WEIGHTS)" in md
    family = results["arms"] + results["deltas"] + results["degradation_comparisons"] + results["interactions"] + \
        results["layer_response_comparisons"]
    # three pretraining iterations leave every pretrained net at chance: named, compared with nothing (the arms'
    # config differences still reported), the backbones not with each other
    assert len(results["arms"]) == 0 and len(results["deltas"]) == 0 and len(results["interactions"]) == 1
    assert len(results["not_compared"]) == 2 * 3 and "resnet101 GN: pretraining never left chance in 1 of 1" in md
    assert "vgg16_bn BN: pretraining never left chance in 1 of 1 run(s)" in summary
    assert results["reading"].startswith("the job ran no positive control") and all(
        c["call"] is None for c in results["arms"])
    # Fig. 7 as calls: the residual net against the plain net at each depth, over the seeds
    assert [(c["a"], c["b"]) for c in results["layer_response_comparisons"]] == [
        ("cifar_resnet20", "cifar_plain20"), ("cifar_resnet56", "cifar_plain56")]
    assert set(results["layer_responses"]["cifar_plain56"]) == {"cifar_plain56_s0", "cifar_plain56_s1"}
    assert all(c["adjustment"]["method"] == "Holm step-down" and c["adjustment"]["size"] == len(family)
               for c in family)

    # the degradation experiment: 4 nets x 2 seeds, compared deeper vs shallower with seeds as units, in the report
    assert [d["model"] for d in results["degradation"]] == ["cifar_plain20", "cifar_plain56", "cifar_resnet20",
                                                            "cifar_resnet56"]
    assert all(d["train_error"]["units"] == 2 for d in results["degradation"])
    assert [(c["a"], c["b"], c["metric"]) for c in results["degradation_comparisons"]] == [
        ("cifar_plain56", "cifar_plain20", "training error"), ("cifar_resnet56", "cifar_resnet20", "training error")]
    assert all(c["interval"] is not None and not c["higher_is_better"] for c in results["degradation_comparisons"])
    assert "## Degradation (paper Figs. 1, 6, 7)" in md and "cifar_plain56 vs cifar_plain20: Δtraining error" in md
    assert "depth x shortcut interaction" in md and "the criterion every net must meet" in md
    assert md.startswith("# Pretrain, transfer, compare: ")  # the job's title, not its last section's
    assert "| net | blocks | depth | seeds | training error % | val error % |" in md
    assert "| cifar_resnet56 | residual | 56 | 2 |" in md
    for png in ("degradation.png", "layer_responses.png"):
        assert (report / png).stat().st_size > 1000
    assert "Degradation (plain vs residual CIFAR nets, one recipe: 2 iterations" in summary

    again = run_tool("tools/main_job.py", "--output-dir", out, *TINY, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stdout.count("[main job] reused: ") == STAGES and "started: " not in again.stdout

    longer = [*TINY[:TINY.index("--detect-iterations") + 1], "4", *TINY[TINY.index("--detect-iterations") + 2:]]
    other = run_tool("tools/main_job.py", "--output-dir", out, *longer, timeout=600)
    assert other.returncode == 1 and "was made by other settings" in other.stderr and "--fresh" in other.stderr
    assert (out / "detect" / "vgg16_bn_gn_scratch_d0" / "model_final.pth").is_file()  # nothing was overwritten


@pytest.mark.slow
def test_the_degradation_preset_is_a_job_of_its_own_with_a_report(tmp_path):
    """`--preset degradation` (make demo-full's second job): no detection stage, the nets in the paper's 2015 units,
    a report and results.json with the depth comparisons and the interaction, adjusted as one family."""
    out = tmp_path / "degradation"
    proc = run_tool("tools/main_job.py", "--preset", "degradation", "--output-dir", out, "--degradation-iterations",
                    "2", "--degradation-seeds", "0", "--pretrain-val-images", "64", timeout=900)  # one seed: the
    #   path, not the statistic (the job test above runs two)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stdout.count("[main job] started: ") == 4 and not (out / "detect").exists()
    config = json.loads((out / "degradation" / "cifar_resnet56_s0" / "config.json").read_text())
    assert config["model_options"] == {}  # the registry's defaults: the 2015 units
    results = json.loads((out / "results.json").read_text())
    assert results["groups"] == [] and len(results["degradation_comparisons"]) == 2
    assert results["interactions"][0]["adjustment"]["size"] == 2 + 1 + 2  # depths, interaction, Fig. 7
    md = (out / "report" / "report.md").read_text()
    assert "## Degradation (paper Figs. 1, 6, 7)" in md and "| name | backbone |" not in md  # no detection table
