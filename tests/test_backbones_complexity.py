"""Complexity against the paper: Table 1 mult-adds (ImageNet, 224x224) and Table 6 parameters (CIFAR-10)."""

import pytest

from backbones import complexity, create_model

TABLE1_MACS = {"resnet18": 1.8e9, "resnet34": 3.6e9, "resnet50": 3.8e9, "resnet101": 7.6e9,
               "resnet152": 11.3e9, "vgg16": 15.3e9, "vgg19": 19.6e9, "plain34": 3.6e9}
TABLE6_PARAMS = {"cifar_resnet20": 0.27e6, "cifar_resnet32": 0.46e6, "cifar_resnet44": 0.66e6,
                 "cifar_resnet56": 0.85e6, "cifar_resnet110": 1.7e6, "cifar_resnet1202": 19.4e6}


@pytest.mark.parametrize("name,paper", sorted(TABLE1_MACS.items()))
def test_imagenet_mult_adds_within_2_percent_of_table1(name, paper):
    c = complexity(create_model(name), (3, 224, 224))
    assert abs(c.macs / paper - 1) < 0.02, f"{name}: {c.gmacs:.3f} GMACs vs paper {paper / 1e9}"


@pytest.mark.parametrize("name,paper", sorted(TABLE6_PARAMS.items()))
def test_cifar_params_within_2_percent_of_table6(name, paper):
    c = complexity(create_model(name, num_classes=10), (3, 32, 32))
    assert abs(c.params / paper - 1) < 0.02, f"{name}: {c.mparams:.3f}M vs paper {paper / 1e6}M"


def test_plain_and_residual_have_the_same_mult_adds_up_to_projections():
    res, plain = complexity(create_model("resnet34")), complexity(create_model("plain34"))
    shortcut = complexity(create_model("resnet34", shortcut="A"))
    assert shortcut.macs == plain.macs  # option A: parameter-free shortcuts, additions are not mult-adds
    assert res.macs > plain.macs and (res.macs - plain.macs) / plain.macs < 0.01


def test_stride_placement_changes_flops_as_expected():
    # Stride in the 3x3 (torchvision v1.5) costs more: its 3x3 and first 1x1 run at the higher resolution.
    msra = complexity(create_model("resnet50")).macs
    v15 = complexity(create_model("resnet50", stride_in_1x1=False)).macs
    assert 1.05 < v15 / msra < 1.08


def test_conv_fc_only_is_what_the_paper_counts():
    model = create_model("resnet18")
    paper = complexity(model).macs
    everything = complexity(model, conv_fc_only=False).macs
    assert everything > paper
    by_module = complexity(model).by_module
    assert set(by_module) >= {"stem", "res2", "res3", "res4", "res5", "fc"}
    assert by_module["fc"] == 512 * 1000
