"""hubconf.py: torch.hub's entry points are the registry's names, and torch.hub.load builds them with weights."""

import importlib.util
from pathlib import Path

import pytest
import torch
import torchvision

import backbones
from backbones.weight_formats import DETECTRON2_BGR_MEAN
from conftest import with_random_bn_statistics
from weight_files import write_msra_pkl

REPO = Path(__file__).resolve().parents[2]


def _hubconf():
    spec = importlib.util.spec_from_file_location("hubconf", REPO / "hubconf.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_entry_points_are_the_registry_names():
    hub = _hubconf()  # torch.hub.list's rule (it reads only GitHub repositories): public callables of hubconf
    assert sorted(n for n in dir(hub) if callable(getattr(hub, n)) and not n.startswith("_")) == \
        sorted(backbones.list_models())
    for dep in hub.dependencies:  # what torch.hub checks before importing hubconf
        assert importlib.util.find_spec(dep) is not None, dep


def test_hub_load_builds_with_a_weights_file(tmp_path):
    tv = torchvision.models.resnet18(weights=None).eval()
    torch.save(tv.state_dict(), tmp_path / "r18.pth")
    net = torch.hub.load(str(REPO), "resnet18", source="local", weights=str(tmp_path / "r18.pth")).eval()
    x = torch.rand(1, 3, 64, 64)
    with torch.no_grad():
        torch.testing.assert_close(net(x), tv(x), rtol=1e-4, atol=1e-4)
    trunk = torch.hub.load(str(REPO), "resnet18", source="local", weights=str(tmp_path / "r18.pth"), num_classes=0)
    assert trunk.fc is None and torch.equal(trunk.res5[1].conv2.weight, tv.layer4[1].conv2.weight)
    fresh = torch.hub.load(str(REPO), "cifar_plain20", source="local", num_classes=10)
    assert fresh.fc.out_features == 10 and fresh.arch["residual"] is False


@pytest.mark.bad_input
def test_hub_load_refuses_weights_of_another_net_naming_the_keys(tmp_path):
    torch.save(torchvision.models.resnet18(weights=None).state_dict(), tmp_path / "r18.pth")
    with pytest.raises(backbones.IncompatibleWeightsError, match=r"missing in checkpoint.*\n\s+res2\.2\."):
        torch.hub.load(str(REPO), "resnet34", source="local", weights=str(tmp_path / "r18.pth"))
    with pytest.raises(TypeError, match="resnet18 has no option 'depth'"):
        torch.hub.load(str(REPO), "resnet18", source="local", depth=34)


def test_a_file_with_another_head_keeps_its_head_unless_num_classes_is_given(tmp_path):
    """No silently fresh 1000-way classifier: the file's 10-way head by default, a fresh one only when asked."""
    ten = backbones.create_model("cifar_resnet20", num_classes=10)
    path = backbones.save_pretrained(ten, tmp_path / "c10.pth")
    net = torch.hub.load(str(REPO), "cifar_resnet20", source="local", weights=str(path))
    assert net.fc.out_features == 10 and torch.equal(net.fc.weight, ten.fc.weight)
    assert torch.hub.load(str(REPO), "cifar_resnet20", source="local", weights=str(path), num_classes=3
                          ).fc.out_features == 3


def test_an_msra_file_gives_a_net_for_rgb_unit_input_and_says_its_normalisation(tmp_path):
    """torch.hub users feed RGB in [0, 1]: a BGR 0-255 file is converted at load, its statistics recorded."""
    ref = with_random_bn_statistics(backbones.create_model("resnet50")).eval()
    net = torch.hub.load(str(REPO), "resnet50", source="local", weights=str(write_msra_pkl(ref, tmp_path / "R-50.pkl")))
    norm = net.input_normalization
    assert norm.std == pytest.approx((1 / 255,) * 3) and norm.mean == pytest.approx(
        tuple(m / 255 for m in DETECTRON2_BGR_MEAN[::-1]))
    rgb01 = torch.rand(1, 3, 64, 64)
    fed = (rgb01 - torch.tensor(norm.mean)[:, None, None]) / torch.tensor(norm.std)[:, None, None]
    bgr255 = rgb01.flip(1) * 255 - torch.tensor(DETECTRON2_BGR_MEAN)[:, None, None]
    with torch.no_grad():
        want = ref(bgr255)
        torch.testing.assert_close(net.eval()(fed), want, rtol=1e-4, atol=1e-5 * want.abs().max().item())


@pytest.mark.bad_input
def test_torchvisions_pretrained_and_enum_names_say_which_file_to_pass():
    with pytest.raises(ValueError, match=r"resnet50: pretrained=True -- nothing is downloaded here; pass weights=FILE"):
        torch.hub.load(str(REPO), "resnet50", source="local", pretrained=True)
    with pytest.raises(ValueError, match=r"weights='IMAGENET1K_V1' names torchvision weights.*resnet50-0676ba61"):
        torch.hub.load(str(REPO), "resnet50", source="local", weights="IMAGENET1K_V1")
