"""backbones.input_convention and weights_file_argument: what the torch ecosystem's entry points (timm, torch.hub,
torchvision's detector) make of a weights file's channel order and of torchvision's weights spellings."""

import logging

import pytest
import torch

import backbones
from backbones.input_convention import to_rgb_unit_input
from backbones.pretrained import weights_file_argument
from backbones.weight_formats import KNOWN_META, WeightsMeta


def test_rgb_weights_are_left_as_they_are_with_their_statistics():
    model = backbones.create_model("resnet18")
    before = model.stem.conv1.weight.detach().clone()
    norm = to_rgb_unit_input("resnet18", model, KNOWN_META["torchvision"])
    assert torch.equal(before, model.stem.conv1.weight) and norm.mean == pytest.approx((0.485, 0.456, 0.406))
    assert model.input_normalization is norm and "torchvision" in norm.source


def test_bgr_weights_have_their_first_conv_reversed_and_their_statistics_in_rgb_order():
    model = backbones.create_model("vgg11")
    before = model.get_submodule("conv1.conv1_1").weight.detach().clone()
    meta = WeightsMeta("caffe2", input_format="BGR", pixel_mean=(10.0, 20.0, 30.0), pixel_std=(1.0, 2.0, 3.0))
    norm = to_rgb_unit_input("vgg11", model, meta)  # the registry's first_conv: VGG's conv1_1
    assert torch.equal(model.get_submodule("conv1.conv1_1").weight, before.flip(1))
    assert norm.mean == pytest.approx((30 / 255, 20 / 255, 10 / 255)) and norm.std == pytest.approx((3 / 255, 2 / 255,
                                                                                                   1 / 255))
    assert "converted to RGB" in norm.source


@pytest.mark.bad_input
def test_bgr_weights_without_statistics_are_refused():
    with pytest.raises(ValueError, match="BGR weights .* do not state their pixel mean / std"):
        to_rgb_unit_input("resnet18", backbones.create_model("resnet18"), WeightsMeta("detectron2", input_format="BGR"))


def test_weights_that_do_not_say_their_channel_order_are_taken_as_rgb_and_said_so(caplog):
    with caplog.at_level(logging.WARNING, logger="backbones.input_convention"):
        norm = to_rgb_unit_input("resnet18", backbones.create_model("resnet18"), KNOWN_META["detectron2"])
    assert norm.source.startswith("torchvision's, assumed") and "does not state its channel order" in caplog.text


@pytest.mark.bad_input
@pytest.mark.parametrize("spelling,file", [("IMAGENET1K_V1", "resnet50-0676ba61.pth"),
                                          ("DEFAULT", "resnet50-11ad3fa6.pth"),
                                          ("ResNet50_Weights.IMAGENET1K_V2", "resnet50-11ad3fa6.pth"),
                                          ("IMAGENET1K_SWAG_E2E_V1", None)])  # no such resnet50 weights: no file
def test_torchvision_weights_names_get_the_file_to_pass(spelling, file):
    with pytest.raises(ValueError, match="names torchvision weights; here weights are files") as err:
        weights_file_argument("resnet50", spelling)
    assert (file in str(err.value)) if file else "torchvision's" not in str(err.value)


def test_paths_are_never_taken_for_weights_names(tmp_path):
    (tmp_path / "DEFAULT").write_bytes(b"")
    assert weights_file_argument("resnet50", str(tmp_path / "DEFAULT")) == str(tmp_path / "DEFAULT")
    assert weights_file_argument("resnet50", "R50") == "R50"  # missing: the loader says "no such file"
    assert weights_file_argument("resnet50", tmp_path / "x.pth") == tmp_path / "x.pth"
    with pytest.raises(TypeError, match="expected the path of a weights file"):
        weights_file_argument("resnet50", True)
