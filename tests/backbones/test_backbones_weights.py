"""Weight loading: every supported format, exact equality with torchvision/timm, strictness, metadata, safety."""

import pickle
import re

import numpy as np
import pytest
import torch
import torchvision
from torch import nn

from backbones import (
    CheckpointReadError,
    IncompatibleWeightsError,
    UnsafeCheckpointError,
    create_model,
    load_pretrained,
    save_pretrained,
)
from backbones.blocks import set_norm_folding
from backbones.weight_formats import DETECTRON2_BGR_MEAN, TORCHVISION_MEAN
from conftest import run_tool
from weight_files import msra_caffe2_blobs


def _randomize_bn(model):
    g = torch.Generator().manual_seed(1)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.copy_(torch.rand(m.num_features, generator=g) - 0.5)
            m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)
            m.weight.data.copy_(torch.rand(m.num_features, generator=g) + 0.5)
            m.bias.data.copy_(torch.rand(m.num_features, generator=g) - 0.5)
    return model


@pytest.mark.parametrize("name,options", [("resnet50", {"stride_in_1x1": False}),
                                          ("resnet101", {"stride_in_1x1": False}), ("vgg16", {})])
def test_torchvision_weights_give_identical_logits(tmp_path, name, options):
    torch.manual_seed(0)
    tv = _randomize_bn(getattr(torchvision.models, name)(weights=None)).eval()
    path = tmp_path / f"{name}.pth"
    torch.save(tv.state_dict(), path)
    ours = set_norm_folding(create_model(name, **options), False).eval()  # loading is exact; folding: own test
    report = load_pretrained(ours, path)
    assert report.ok and report.source_format.startswith("torchvision")
    assert report.meta.input_format == "RGB" and report.meta.pixel_mean == TORCHVISION_MEAN
    x = torch.randn(2, 3, 224, 224)
    with torch.no_grad():
        torch.testing.assert_close(ours(x), tv(x), atol=1e-4, rtol=0)


def test_timm_resnet_weights_give_identical_logits(tmp_path):
    timm = pytest.importorskip("timm")
    torch.manual_seed(0)
    t = _randomize_bn(timm.create_model("resnet50", pretrained=False)).eval()
    path = tmp_path / "timm_resnet50.pth"
    torch.save({"state_dict": t.state_dict()}, path)  # timm training checkpoints wrap the weights
    ours = set_norm_folding(create_model("resnet50", stride_in_1x1=False), False).eval()
    assert load_pretrained(ours, path).ok
    x = torch.randn(1, 3, 128, 128)
    with torch.no_grad():
        torch.testing.assert_close(ours(x), t(x), atol=1e-4, rtol=0)


def test_vgg_bn_and_resnet18_from_torchvision(tmp_path):
    for name in ("vgg11_bn", "resnet18"):
        tv = _randomize_bn(getattr(torchvision.models, name)(weights=None)).eval()
        torch.save(tv.state_dict(), tmp_path / "w.pth")
        ours = create_model(name).eval()
        assert load_pretrained(ours, tmp_path / "w.pth").ok
        x = torch.randn(1, 3, 64, 64)
        with torch.no_grad():
            torch.testing.assert_close(ours(x), tv(x), atol=1e-4, rtol=0)


# ---- Detectron2 formats -------------------------------------------------------------------------------------

def assert_same_function(a, b):
    """Deep random nets reach logits of 1e3: compare relative to their scale (float32 reassociation)."""
    assert a.shape == b.shape
    assert (a - b).abs().max() <= 1e-5 * b.abs().max() + 1e-5, (a - b).abs().max()


def _reference(name="resnet50", **kw):
    torch.manual_seed(0)
    return _randomize_bn(create_model(name, **kw)).eval()


def test_detectron2_fpn_detector_checkpoint(tmp_path):
    ref = _reference(num_classes=0)
    sd = {f"backbone.bottom_up.{k}": v for k, v in ref.state_dict().items() if "num_batches" not in k}
    sd["backbone.fpn_lateral2.weight"] = torch.zeros(256, 256, 1, 1)
    sd["proposal_generator.rpn_head.conv.weight"] = torch.zeros(256, 256, 3, 3)
    sd["roi_heads.box_predictor.cls_score.weight"] = torch.zeros(81, 1024)
    torch.save({"model": sd, "iteration": 90000}, tmp_path / "model_final.pth")
    ours = create_model("resnet50", num_classes=0).eval()
    report = load_pretrained(ours, tmp_path / "model_final.pth")
    assert report.ok and report.source_format == "detectron2"
    assert {"backbone.fpn_lateral2.weight", "proposal_generator.rpn_head.conv.weight"} <= set(report.skipped)
    x = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        torch.testing.assert_close(ours(x), ref(x))


def test_detectron2_c4_checkpoint_with_res5_in_the_roi_head(tmp_path):
    ref = _reference(num_classes=0)
    sd = {}
    for k, v in ref.state_dict().items():
        sd[("roi_heads." if k.startswith("res5") else "backbone.") + k] = v
    torch.save({"model": sd}, tmp_path / "c4.pth")
    ours = create_model("resnet50", num_classes=0).eval()
    assert load_pretrained(ours, tmp_path / "c4.pth").ok
    x = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        torch.testing.assert_close(ours(x), ref(x))


def test_detectron2_pkl_converted_from_torchvision(tmp_path):
    """detectron2/tools/convert-torchvision-to-d2.py output: D2 names, numpy arrays, fc under `stem.`."""
    tv = _randomize_bn(torchvision.models.resnet50(weights=None)).eval()
    newmodel = {}
    for k in tv.state_dict():
        if "num_batches" in k:
            continue
        old = k
        if "layer" not in k:
            k = "stem." + k
        for t in [1, 2, 3, 4]:
            k = k.replace(f"layer{t}", f"res{t + 1}")
        for t in [1, 2, 3]:
            k = k.replace(f"bn{t}", f"conv{t}.norm")
        k = k.replace("downsample.0", "shortcut").replace("downsample.1", "shortcut.norm")
        newmodel[k] = tv.state_dict()[old].numpy()
    with open(tmp_path / "R-50-tv.pkl", "wb") as f:
        pickle.dump({"model": newmodel, "__author__": "torchvision", "matching_heuristics": True}, f)
    ours = set_norm_folding(create_model("resnet50", stride_in_1x1=False), False).eval()
    report = load_pretrained(ours, tmp_path / "R-50-tv.pkl")
    assert report.ok and report.meta.input_format == "RGB" and report.meta.stride_in_1x1 is False
    x = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        torch.testing.assert_close(ours(x), tv(x), atol=1e-4, rtol=0)


# ---- MSRA Caffe2 blobs (R-50.pkl / R-101.pkl naming) --------------------------------------------------------

@pytest.mark.parametrize("bn_style", ["folded", "stats"])
def test_msra_caffe2_pkl(tmp_path, bn_style):
    ref = _reference("resnet101", num_classes=10, norm="FrozenBN")
    blobs = msra_caffe2_blobs(ref, bn_style)
    path = tmp_path / "R-101.pkl"
    with open(path, "wb") as f:
        pickle.dump({"blobs": blobs}, f, protocol=2)  # Detectron1 wrote Python-2 pickles
    ours = create_model("resnet101", num_classes=10, norm="FrozenBN").eval()
    report = load_pretrained(ours, path)
    assert report.ok, report.summary()
    assert report.source_format == "caffe2" and report.meta.input_format == "BGR"
    assert report.meta.pixel_mean == DETECTRON2_BGR_MEAN and report.meta.stride_in_1x1 is True
    assert any(k.endswith("_momentum") for k in report.skipped)
    x = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        assert_same_function(ours(x), ref(x))


def test_msra_resnet50_conv1_bias_is_folded_exactly(tmp_path):
    ref = _reference("resnet50", num_classes=10)
    blobs = msra_caffe2_blobs(ref, "stats")
    c = np.random.RandomState(0).randn(64).astype(np.float32)
    blobs["conv1_b"] = c  # the release's ResNet-50 conv1 has a bias
    blobs["res_conv1_bn_running_mean"] = blobs["res_conv1_bn_running_mean"] + c  # same function as `ref`
    with open(tmp_path / "R-50.pkl", "wb") as f:
        pickle.dump({"blobs": blobs}, f, protocol=2)
    ours = create_model("resnet50", num_classes=10).eval()
    assert load_pretrained(ours, tmp_path / "R-50.pkl").ok
    x = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        assert_same_function(ours(x), ref(x))


# ---- our format, strictness, reports ------------------------------------------------------------------------

def test_own_checkpoint_roundtrip_with_metadata(tmp_path):
    ref = _reference("plain34", num_classes=5)
    save_pretrained(ref, tmp_path / "ours.pth", input_format="RGB")
    ours = create_model("plain34", num_classes=5).eval()
    report = load_pretrained(ours, tmp_path / "ours.pth")
    assert report.source_format == "backbones" and report.meta.arch["residual"] is False
    for a, b in zip(ours.state_dict().values(), ref.state_dict().values()):
        assert torch.equal(a, b)
    # the metadata says plain: loading into the residual twin is refused even where shapes would fit
    with pytest.raises(IncompatibleWeightsError, match="residual: weights are for False"):
        load_pretrained(create_model("resnet34", num_classes=5, shortcut="A"), tmp_path / "ours.pth")


def test_classification_training_checkpoint_is_accepted(tmp_path):
    ref = _reference("cifar_resnet20", num_classes=10)
    save_pretrained(ref, tmp_path / "ckpt.pth", extra={"optimizer": {"state": {}}, "epoch": 3})
    ours = create_model("cifar_resnet20", num_classes=10)
    assert load_pretrained(ours, tmp_path / "ckpt.pth").ok


def test_strict_reports_missing_unexpected_and_shapes_and_loads_nothing(tmp_path):
    tv = torchvision.models.resnet50(weights=None)
    torch.save(tv.state_dict(), tmp_path / "r50.pth")
    model = create_model("resnet101", stride_in_1x1=False)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(IncompatibleWeightsError) as err:
        load_pretrained(model, tmp_path / "r50.pth")
    n_missing = len({k for k in set(model.state_dict()) - set(create_model("resnet50").state_dict())
                     if not k.endswith("num_batches_tracked")})
    assert f"missing in checkpoint ({n_missing})" in str(err.value) and "res4.6.conv1.weight" in str(err.value)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())  # nothing loaded

    small = create_model("resnet50", stride_in_1x1=False, num_classes=10)
    with pytest.raises(IncompatibleWeightsError, match=r"(?s)fc.weight: checkpoint \(1000, 2048\) vs model "
                                                       r"\(10, 2048\).*drop_classifier=True"):
        load_pretrained(small, tmp_path / "r50.pth")
    report = load_pretrained(small, tmp_path / "r50.pth", drop_classifier=True)
    assert report.ok and "fc.weight" in report.skipped
    assert torch.equal(small.res2[0].conv1.weight, tv.layer1[0].conv1.weight)


def test_non_strict_loads_what_fits_and_reports_the_rest(tmp_path):
    sd = torchvision.models.resnet18(weights=None).state_dict()
    sd["head.extra.weight"] = torch.zeros(1)
    torch.save(sd, tmp_path / "extra.pth")
    model = create_model("resnet18", num_classes=3)
    report = load_pretrained(model, tmp_path / "extra.pth", strict=False)
    assert report.unexpected == ["head.extra.weight"]
    assert [k for k, _, _ in report.shape_mismatch] == ["fc.weight", "fc.bias"]
    assert torch.equal(model.stem.conv1.weight, sd["conv1.weight"])
    assert "unexpected in checkpoint (1)" in report.summary()


def test_stride_placement_mismatch_is_refused(tmp_path):
    torch.save(torchvision.models.resnet50(weights=None).state_dict(), tmp_path / "tv.pth")
    with pytest.raises(IncompatibleWeightsError, match="stride_in_1x1: weights trained with False.*"):
        load_pretrained(create_model("resnet50"), tmp_path / "tv.pth")
    report = load_pretrained(create_model("resnet50"), tmp_path / "tv.pth", strict=False)
    assert report.option_mismatches and report.loaded


# ---- safety ------------------------------------------------------------------------------------------------

class _Exploit:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))  # would create a file on load


def test_malicious_pkl_is_refused_without_running_code(tmp_path):
    marker = tmp_path / "pwned"
    with open(tmp_path / "evil.pkl", "wb") as f:
        pickle.dump({"model": {"stem.conv1.weight": np.zeros(3)}, "x": _Exploit(str(marker))}, f)
    with pytest.raises(UnsafeCheckpointError, match=r"evil.pkl: refused to load: global '(io|builtins).open'"):
        load_pretrained(create_model("resnet18"), tmp_path / "evil.pkl")
    assert not marker.exists()


def test_malicious_pth_is_refused_without_running_code(tmp_path):
    marker = tmp_path / "pwned"
    torch.save({"model": create_model("resnet18").state_dict(), "x": _Exploit(str(marker))}, tmp_path / "evil.pth")
    with pytest.raises(UnsafeCheckpointError, match=r"evil.pth: refused to load"):
        load_pretrained(create_model("resnet18"), tmp_path / "evil.pth")
    assert not marker.exists()


def test_truncated_and_garbage_files_get_clear_errors(tmp_path):
    good = tmp_path / "good.pth"
    torch.save(create_model("resnet18").state_dict(), good)
    (tmp_path / "trunc.pth").write_bytes(good.read_bytes()[:1000])
    with pytest.raises(CheckpointReadError, match="trunc.pth"):
        load_pretrained(create_model("resnet18"), tmp_path / "trunc.pth")
    (tmp_path / "notes.pkl").write_text("hello")
    with pytest.raises(CheckpointReadError, match="notes.pkl: not a pickle"):
        load_pretrained(create_model("resnet18"), tmp_path / "notes.pkl")
    with pytest.raises(CheckpointReadError, match="no such checkpoint file"):
        load_pretrained(create_model("resnet18"), tmp_path / "missing.pth")


def test_load_model_rebuilds_the_net_a_checkpoint_holds_with_its_units_and_width(tmp_path):
    """backbones.convert.load_model: our checkpoints name their architecture, so a pre-activation net at width 0.5
    comes back as that net (a default-option model would not load), and another class count drops the classifier."""
    from backbones.convert import load_model

    net = create_model("cifar_plain20", preact=True, width=0.5, num_classes=10).eval()
    save_pretrained(net, tmp_path / "n.pth")
    name, options, again = load_model(tmp_path / "n.pth")
    assert (name, options) == ("cifar_plain20", {"preact": True, "width": 0.5})
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        assert torch.equal(again.eval()(x), net(x))
    other = load_model(tmp_path / "n.pth", num_classes=3)[2]
    assert other.fc.out_features == 3 and torch.equal(other.res2[0].conv1.weight, net.res2[0].conv1.weight)
    with pytest.raises(IncompatibleWeightsError, match="preact"):  # the units are part of what must match
        load_pretrained(create_model("cifar_plain20", width=0.5, num_classes=10), tmp_path / "n.pth")
    gn = create_model("cifar_resnet20", norm="GN", num_classes=10)  # GN's tensors are not BN's: the norm comes back
    save_pretrained(gn, tmp_path / "gn.pth")
    assert load_model(tmp_path / "gn.pth")[1]["norm"] == "GN"
    for norm, expected in (("", ("vgg11", {})), ("BN", ("vgg11_bn", {})),
                           ("GN", ("vgg11", {"norm": "GN", "gn_groups": 32}))):  # GN's groups, recorded
        save_pretrained(create_model("vgg11", norm=norm, width=0.125, num_classes=10), tmp_path / "vgg.pth")
        assert load_model(tmp_path / "vgg.pth")[:2] == (expected[0], {**expected[1], "width": 0.125}), norm
    sd = torch.load(tmp_path / "n.pth", weights_only=True)
    del sd["model"]["res3.0.conv2.weight"]
    torch.save(sd, tmp_path / "cut.pth")
    with pytest.raises(IncompatibleWeightsError, match="res3.0.conv2.weight"):  # strict: a missing tensor is named
        load_model(tmp_path / "cut.pth")


# ---- tools/convert_weights.py ------------------------------------------------------------------------------

@pytest.mark.slow
def test_convert_weights_cli_infers_architecture_and_keeps_metadata(tmp_path):
    ref = _reference("resnet101", num_classes=1000)
    with open(tmp_path / "R-101.pkl", "wb") as f:
        pickle.dump({"blobs": msra_caffe2_blobs(ref, "folded")}, f, protocol=2)
    proc = run_tool("tools/convert_weights.py", tmp_path / "R-101.pkl", tmp_path / "r101.pth")
    assert proc.returncode == 0, proc.stderr
    assert "resnet101" in proc.stdout and "format caffe2" in proc.stdout
    ours = create_model("resnet101").eval()
    report = load_pretrained(ours, tmp_path / "r101.pth")
    assert report.source_format == "backbones" and report.meta.input_format == "BGR"
    assert report.meta.pixel_mean == DETECTRON2_BGR_MEAN and report.meta.stride_in_1x1 is True
    x = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        assert_same_function(ours(x), ref(x))


@pytest.mark.slow
def test_convert_weights_cli_torchvision_vgg_and_errors(tmp_path):
    with torch.device("meta"):  # torchvision's keys and shapes; initialising 138 M weights would only cost time
        keys = torchvision.models.vgg16(weights=None).state_dict()
    torch.save({k: torch.full(v.shape, 0.01) for k, v in keys.items()}, tmp_path / "vgg16.pth")
    proc = run_tool("tools/convert_weights.py", tmp_path / "vgg16.pth", tmp_path / "v.pth", "--drop-classifier")
    assert proc.returncode == 0, proc.stderr
    assert "vgg16" in proc.stdout
    model = create_model("vgg16", num_classes=0)
    assert load_pretrained(model, tmp_path / "v.pth").ok
    bad = run_tool("tools/convert_weights.py", tmp_path / "vgg16.pth", tmp_path / "x.pth", "--model", "resnet50")
    assert bad.returncode == 1 and "Traceback" not in bad.stderr and "missing in checkpoint" in bad.stderr


@pytest.mark.bad_input
def test_a_training_scripts_checkpoint_with_a_module_prefix_is_unwrapped_and_the_wrapper_named(tmp_path):
    """bad7: {'state_dict': {'module.conv1.weight', ...}, 'best_prec1': ...}, as published CIFAR ResNet and most
    DataParallel training scripts save it, was refused as an unrecognised layout; it loads as timm's loader would
    (the 'module.' prefix dropped when every key has it), the report naming what it came out of."""
    src = create_model("cifar_resnet20")
    _randomize_bn(src)
    f = tmp_path / "checkpoint.th"
    torch.save({"epoch": 200, "state_dict": {f"module.{k}": v for k, v in src.state_dict().items()},
                "best_prec1": 91.7}, f)
    dst = create_model("cifar_resnet20")
    report = load_pretrained(dst, f)
    assert report.ok and report.unwrapped == ("the 'state_dict' entry",
                                              "the 'module.' prefix of (Distributed)DataParallel")
    assert "read out of the 'state_dict' entry and the 'module.' prefix" in report.summary()
    x = torch.rand(2, 3, 32, 32)
    assert torch.equal(src.eval()(x), dst.eval()(x))
    mixed = {f"module.{k}" if i else k: v for i, (k, v) in enumerate(src.state_dict().items())}
    torch.save(mixed, tmp_path / "mixed.pth")  # not every key: left as it is, and refused by its names
    with pytest.raises(Exception, match="module."):
        load_pretrained(create_model("cifar_resnet20"), tmp_path / "mixed.pth")


@pytest.mark.bad_input
def test_weights_given_as_a_directory_or_a_fifo_say_what_they_are(tmp_path):
    import os

    from detection.main_job.checks import validate_plan
    from detection.main_job.plan import MainJobPlan, PlanError

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    for path, what in ((tmp_path, "a directory"), (fifo, "not a regular file (a FIFO, socket or device)"),
                       (tmp_path / "absent.pth", "no such file")):
        with pytest.raises(PlanError, match=rf"--weights resnet18={path}: {re.escape(what)}; a weights file is one "):
            validate_plan(MainJobPlan(backbones=("resnet18",), weights=(("resnet18", str(path)),)))
