"""classification.analysis.layer_response (paper Fig. 7): which modules' outputs are a 3x3 layer's response in
post- and pre-activation units, and that the std is the std of exactly that output."""

import torch

import backbones
from classification.analysis.layer_response import layer_response_std

IMAGES = [(torch.randn(3, 32, 32, generator=torch.Generator().manual_seed(i)), 0) for i in range(12)]


def _std_of(module, model) -> float:
    seen = []
    handle = module.register_forward_hook(lambda _m, _i, out: seen.append(out.detach().double()))
    with torch.no_grad():
        model.eval()(torch.stack([x for x, _ in IMAGES]))
    handle.remove()
    return seen[0].std(unbiased=False).item()


def test_post_activation_responses_are_every_3x3_layers_bn_output():
    model = backbones.create_model("cifar_resnet20", num_classes=10)
    res = layer_response_std(model, IMAGES, batch_size=12)
    assert len(res) == 18 and res[0][0] == "res2.0.conv1" and res[1][0] == "res2.0.conv2"  # 9 units x 2 layers
    assert abs(res[1][1] - _std_of(model.res2[0].conv2, model)) < 1e-6  # Conv2dNorm's output is its BN's


def test_pre_activation_responses_are_the_bn_after_a_units_first_3x3_conv_in_plain_and_residual_nets_alike():
    """A pre-activation unit's last conv has no BN of its own before the addition: it is left out, and the first
    conv's response is its unit's norm2 output (the paper's "after BN, before ReLU"), the same layers either way."""
    residual = backbones.create_model("cifar_resnet20", preact=True, num_classes=10)
    plain = backbones.create_model("cifar_plain20", preact=True, num_classes=10)
    res, pla = layer_response_std(residual, IMAGES, batch_size=12), layer_response_std(plain, IMAGES, batch_size=12)
    assert [n for n, _ in res] == [n for n, _ in pla] == [f"res{s}.{b}.conv1" for s in (2, 3, 4) for b in range(3)]
    assert abs(res[4][1] - _std_of(residual.res3[1].norm2, residual)) < 1e-6
    assert all(s > 0 for _, s in res + pla)
