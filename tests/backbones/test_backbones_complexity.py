"""Complexity against the paper: Table 1 mult-adds (ImageNet, 224x224) and Table 6 parameters (CIFAR-10)."""

import pytest
import torch

from backbones import complexity, create_model

TABLE1_MACS = {"resnet18": 1.8e9, "resnet34": 3.6e9, "resnet50": 3.8e9, "resnet101": 7.6e9,
               "resnet152": 11.3e9, "vgg16": 15.3e9, "vgg19": 19.6e9, "plain34": 3.6e9}


def shapes_only(name, **options):
    """The model built on the meta device: counting needs its shapes, not initialised weights (VGG-19: 143 M;
    the small CIFAR nets build faster for real)."""
    with torch.device("meta"):
        return create_model(name, **options)


TABLE6_PARAMS = {"cifar_resnet20": 0.27e6, "cifar_resnet32": 0.46e6, "cifar_resnet44": 0.66e6,
                 "cifar_resnet56": 0.85e6, "cifar_resnet110": 1.7e6, "cifar_resnet1202": 19.4e6}


@pytest.mark.parametrize("name,paper", sorted(TABLE1_MACS.items()))
def test_imagenet_mult_adds_within_2_percent_of_table1(name, paper):
    c = complexity(shapes_only(name), (3, 224, 224))
    assert abs(c.macs / paper - 1) < 0.02, f"{name}: {c.gmacs:.3f} GMACs vs paper {paper / 1e9}"


@pytest.mark.parametrize("name,paper", sorted(TABLE6_PARAMS.items()))
def test_cifar_params_within_2_percent_of_table6(name, paper):
    c = complexity(create_model(name, num_classes=10), (3, 32, 32))
    assert abs(c.params / paper - 1) < 0.02, f"{name}: {c.mparams:.3f}M vs paper {paper / 1e6}M"


def test_plain_and_residual_have_the_same_mult_adds_up_to_projections():
    res, plain = complexity(shapes_only("resnet34")), complexity(shapes_only("plain34"))
    shortcut = complexity(shapes_only("resnet34", shortcut="A"))
    assert shortcut.macs == plain.macs  # option A: parameter-free shortcuts, additions are not mult-adds
    assert res.macs > plain.macs and (res.macs - plain.macs) / plain.macs < 0.01


def test_stride_placement_changes_flops_as_expected():
    # Stride in the 3x3 (torchvision v1.5) costs more: its 3x3 and first 1x1 run at the higher resolution.
    msra = complexity(shapes_only("resnet50")).macs
    v15 = complexity(shapes_only("resnet50", stride_in_1x1=False)).macs
    assert 1.05 < v15 / msra < 1.08


def test_conv_fc_only_is_what_the_paper_counts():
    model = create_model("resnet18")
    paper = complexity(model).macs
    everything = complexity(model, conv_fc_only=False).macs
    assert everything > paper
    by_module = complexity(model).by_module
    assert set(by_module) >= {"stem", "res2", "res3", "res4", "res5", "fc"}
    assert by_module["fc"] == 512 * 1000


@pytest.mark.parametrize("name,options", [("resnet18", {}), ("vgg16_bn", {"width": 0.25}),
                                          ("resnet50", {"stride_in_1x1": False, "width": 0.5})])
def test_the_meta_tensor_count_equals_fvcores_count_of_a_real_forward(name, options):
    """The default count runs on meta tensors (torch's FlopCounterMode): the same total and per-stage mult-adds as
    fvcore tracing real arithmetic, and the model's own weights untouched."""
    from backbones.complexity import _fvcore_macs

    model = create_model(name, **options)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    c = complexity(model, (3, 160, 96))
    assert all(torch.equal(v, before[k]) and v.device.type == "cpu" for k, v in model.state_dict().items())
    assert model.training  # restored
    assert (c.macs, c.by_module) == _fvcore_macs(model.eval(), (3, 160, 96), conv_fc_only=True)
    with torch.device("meta"):  # a model built on the meta device is counted as well (paper-scale estimates)
        assert complexity(create_model(name, **options), (3, 160, 96)).macs == c.macs
