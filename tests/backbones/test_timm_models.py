"""backbones.timm_models: our nets in timm's registry (rdb_*), features_only on our own stage loop, weights from a
file, and a real timm consumer (effdet's EfficientDet) training on one of them."""

import subprocess
import sys

import pytest
import timm
import torch
import torchvision

import backbones
import backbones.timm_models
from backbones.timm_models import PREFIX, TimmFeatures, timm_name
from conftest import with_random_bn_statistics

# one net of each family: the metadata is set per family (backbones.resnet / backbones.vgg _register)
FAMILY_REPRESENTATIVES = ["resnet18", "plain18", "vgg11", "vgg11_bn", "cifar_resnet20", "cifar_plain20"]




@pytest.fixture(scope="module")
def tv_resnet18(tmp_path_factory):
    model = with_random_bn_statistics(torchvision.models.resnet18(weights=None))
    path = tmp_path_factory.mktemp("weights") / "resnet18_torchvision.pth"
    torch.save(model.state_dict(), path)
    return model, path


def test_timm_lists_every_registered_net_under_the_prefix():
    listed = timm.list_models(f"{PREFIX}*")
    assert sorted(listed) == sorted(timm_name(n) for n in backbones.list_models())
    assert {"rdb_resnet101", "rdb_plain34", "rdb_vgg16", "rdb_vgg16_bn", "rdb_cifar_resnet56"} <= set(listed)
    assert "resnet50" in timm.list_models("resnet50")  # timm's own nets are left alone


@pytest.mark.parametrize("name,out_indices,size", [("resnet101", None, 64), ("resnet101", (2, 3, 4), 64),
                                                   ("vgg16", (1, -1), 64), ("cifar_resnet20", None, 32)])
def test_features_only_maps_have_the_channels_and_reductions_feature_info_declares(name, out_indices, size):
    trunk = timm.create_model(timm_name(name), features_only=True, out_indices=out_indices).eval()
    assert isinstance(trunk, TimmFeatures)
    with torch.no_grad():
        maps = trunk(torch.rand(1, 3, size, size))
    assert [m.shape[1] for m in maps] == trunk.feature_info.channels()
    assert [size // m.shape[-1] for m in maps] == trunk.feature_info.reduction()
    assert len(maps) == len(out_indices or backbones.create_model(name).stage_names)


def test_features_only_keeps_the_backbones_parameter_names_and_drops_later_stages():
    trunk = timm.create_model("rdb_resnet18", features_only=True, out_indices=(1, 2))
    keys = set(trunk.state_dict())
    full = set(backbones.create_model("resnet18").state_dict())
    assert keys <= full and any(k.startswith("res3.") for k in keys)
    assert not any(k.startswith(("res4.", "res5.", "fc.")) for k in keys)


def test_out_indices_beyond_the_stages_name_them():
    with pytest.raises(ValueError, match=r"out_indices \(4,\).*4 stages \['stem', 'res2', 'res3', 'res4'\]"):
        timm.create_model("rdb_cifar_resnet20", features_only=True, out_indices=(4,))


@pytest.mark.parametrize("name", FAMILY_REPRESENTATIVES)
def test_pretrained_cfg_is_the_registry_metadata(name):
    info = backbones.model_info(name)
    model = timm.create_model(timm_name(name))
    cfg = model.pretrained_cfg
    assert cfg["input_size"] == (3, info.input_size, info.input_size)
    assert cfg["crop_pct"] == pytest.approx(224 / 256 if info.input_size == 224 else 1.0)
    keys = list(model.state_dict())
    assert keys[0] == f"{cfg['first_conv']}.weight"  # what timm adapts for in_chans != 3
    assert f"{cfg['classifier']}.weight" in keys and model.get_submodule(cfg["classifier"]).out_features == 1000
    data = timm.data.resolve_data_config(model=model)
    assert data["mean"] == pytest.approx((0.485, 0.456, 0.406)) and data["interpolation"] == "bilinear"


def test_pretrained_file_in_torchvision_format_gives_torchvisions_network(tv_resnet18):
    tv, path = tv_resnet18
    net = timm.create_model("rdb_resnet18", pretrained=True, pretrained_cfg_overlay=dict(file=str(path))).eval()
    x = torch.rand(2, 3, 64, 64)
    with torch.no_grad():
        torch.testing.assert_close(net(x), tv(x), rtol=1e-4, atol=1e-4)
    few = timm.create_model("rdb_resnet18", pretrained=True, pretrained_cfg_overlay=dict(file=str(path)),
                            num_classes=5)
    assert few.fc.out_features == 5 and torch.equal(few.res5[1].conv2.weight, tv.layer4[1].conv2.weight)


def test_pretrained_bottleneck_takes_the_files_stride_placement(tmp_path):
    tv = torchvision.models.resnet50(weights=None).eval()
    torch.save(tv.state_dict(), tmp_path / "r50.pth")
    net = timm.create_model("rdb_resnet50", pretrained=True,
                            pretrained_cfg_overlay=dict(file=str(tmp_path / "r50.pth")))
    assert net.arch["stride_in_1x1"] is False  # torchvision's (v1.5) placement: same shapes, another network
    x = torch.rand(1, 3, 64, 64)
    with torch.no_grad():
        torch.testing.assert_close(net.eval()(x), tv(x), rtol=1e-4, atol=1e-4)


@pytest.mark.bad_input
def test_pretrained_without_a_file_is_refused_not_randomly_initialised():
    with pytest.raises(ValueError, match=r"rdb_resnet18 has no published weights.*pretrained_cfg_overlay=dict\(file"):
        timm.create_model("rdb_resnet18", pretrained=True)


@pytest.mark.bad_input
def test_a_file_of_another_architecture_fails_naming_the_keys(tv_resnet18):
    _, path = tv_resnet18
    with pytest.raises(backbones.IncompatibleWeightsError, match=r"missing in checkpoint.*\n\s+res2\.2\."):
        timm.create_model("rdb_resnet34", pretrained=True, pretrained_cfg_overlay=dict(file=str(path)))


def test_bgr_weights_are_converted_to_timms_rgb_unit_input(tmp_path):
    """A BGR 0-255 file (MSRA's, Detectron2's zoo) gives a net that computes on timm's RGB [0, 1] input, normalised
    by its pretrained_cfg, what the file's net computed on BGR pixels minus their mean."""
    bgr = with_random_bn_statistics(backbones.create_model("resnet18")).eval()
    mean, std = (103.53, 116.28, 123.675), (1.0, 2.0, 4.0)  # per-channel std: its reversal is checked
    path = backbones.save_pretrained(bgr, tmp_path / "bgr.pth", input_format="BGR", pixel_mean=mean, pixel_std=std)
    net = timm.create_model("rdb_resnet18", pretrained=True, pretrained_cfg_overlay=dict(file=str(path))).eval()
    data = timm.data.resolve_data_config(model=net)
    rgb01 = torch.rand(2, 3, 64, 64)
    timm_input = (rgb01 - torch.tensor(data["mean"])[:, None, None]) / torch.tensor(data["std"])[:, None, None]
    bgr255 = (rgb01.flip(1) * 255 - torch.tensor(mean)[:, None, None]) / torch.tensor(std)[:, None, None]
    with torch.no_grad():
        torch.testing.assert_close(net(timm_input), bgr(bgr255), rtol=1e-4, atol=1e-4)
    assert net.input_normalization.mean == pytest.approx(tuple(m / 255 for m in mean[::-1]))
    assert net.input_normalization.std == pytest.approx((4 / 255, 2 / 255, 1 / 255))


@pytest.mark.bad_input
def test_unknown_names_and_options_get_timms_and_our_errors():
    with pytest.raises(RuntimeError, match=r"Unknown model \(rdb_resnet19\)"):
        timm.create_model("rdb_resnet19")
    with pytest.raises(TypeError, match="vgg16 has no option 'stride_in_1x1'"):
        timm.create_model("rdb_vgg16", stride_in_1x1=True)


def test_timm_features_equal_our_feature_api(tv_resnet18):
    _, path = tv_resnet18
    trunk = timm.create_model("rdb_resnet18", pretrained=True, features_only=True,
                              pretrained_cfg_overlay=dict(file=str(path))).eval()
    ours = backbones.create_model("resnet18")
    backbones.load_pretrained(ours, path, drop_classifier=True)
    x = torch.rand(2, 3, 64, 64)
    with torch.no_grad():
        for got, want in zip(trunk(x), ours.eval().forward_features(x).values(), strict=True):
            torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_effdet_trains_a_step_and_predicts_on_a_plain_net():
    import effdet  # a dev extra (pyproject.toml): a maintained timm consumer, here on import only
    torch.manual_seed(0)
    config = effdet.get_efficientdet_config("resdet50")  # a ResNet EfficientDet; its backbone replaced by ours
    config.backbone_name, config.backbone_args = "rdb_plain18", {}
    config.image_size, config.num_classes, config.max_det_per_image = (128, 128), 3, 10
    net = effdet.EfficientDet(config, pretrained_backbone=False)
    assert isinstance(net.backbone, TimmFeatures) and net.backbone.feature_info.channels() == [128, 256, 512]
    bench = effdet.DetBenchTrain(net).train()
    x = torch.rand(2, 3, 128, 128)
    target = {"bbox": torch.tensor([[[10.0, 20.0, 70.0, 90.0]], [[30.0, 10.0, 100.0, 60.0]]]),  # y1 x1 y2 x2
              "cls": torch.tensor([[1.0], [2.0]]), "img_scale": torch.ones(2),
              "img_size": torch.tensor([[128.0, 128.0]] * 2)}
    before = net.backbone.res3[0].conv1.weight.detach().clone()
    loss = bench(x, target)["loss"]
    assert torch.isfinite(loss)
    loss.backward()
    torch.optim.SGD(bench.parameters(), lr=0.01).step()
    assert not torch.equal(before, net.backbone.res3[0].conv1.weight)  # the gradient reached our stages
    with torch.no_grad():
        detections = effdet.DetBenchPredict(net).eval()(x)
    assert detections.shape == (2, 10, 6)  # x1 y1 x2 y2 score class


def test_importing_backbones_does_not_import_timm():
    code = "import sys, backbones; backbones.create_model('resnet18'); assert 'timm' not in sys.modules"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
