"""backbones.geometry: the kernel taps a net's convolutions reach at an input size, from the shapes alone, equal the
taps a real backward pass gives gradient to."""

import pytest
import torch

import backbones
from backbones.geometry import kernel_taps, smallest_size_training_every_tap, untrained_convs


def _taps_with_gradient(net: torch.nn.Module, size: int) -> dict[str, list[list[bool]]]:
    """Per conv, which taps got a nonzero gradient from a random batch at `size` (train mode, every norm at one)."""
    torch.manual_seed(0)
    net.train()
    loss = net(torch.randn(4, 3, size, size)).square().sum()
    loss.backward()
    return {n: (m.weight.grad.abs().sum(dim=(0, 1)) > 0).tolist() for n, m in net.named_modules()
            if isinstance(m, torch.nn.Conv2d)}


@pytest.mark.parametrize("model", ["resnet101", "resnet34", "vgg16_bn", "plain18"])
@pytest.mark.parametrize("size", [32, 48])
def test_the_taps_found_from_shapes_are_the_taps_a_backward_pass_trains(model, size):
    net = backbones.create_model(model, width=0.25, num_classes=10)  # no zero-init: every branch gets gradient
    found = {c.name: [list(r) for r in c.used] for c in kernel_taps(net, size)}
    assert found == _taps_with_gradient(net, size)


def test_resnet101_at_32_px_leaves_8_of_9_taps_of_res5s_3x3_convs_untrained_and_none_at_48():
    net = backbones.create_model("resnet101", width=0.25)
    convs = untrained_convs(net, 32)
    assert {c.stage for c in convs} == {"res5"} and len(convs) == 3
    assert all(c.input_size == (1, 1) and c.untrained == 8 and c.used[1][1] for c in convs)
    assert sum(c.untrained_weights for c in convs) == 393216  # of res5's 3x3 weights, 8/9 at width 0.25
    assert untrained_convs(net, 48) == []
    assert smallest_size_training_every_tap(net) == 33  # res5 at 2x2
    vgg = backbones.create_model("vgg16_bn", width=0.25)
    assert untrained_convs(vgg, 32) == [] and smallest_size_training_every_tap(vgg) == 32  # conv5 at 2x2


def test_a_stride_2_conv_on_a_2x2_map_trains_only_the_taps_that_reach_it():
    """ResNet-34's first res5 conv (3x3, stride 2, padding 1) on res4's 2x2 map at 32 px: its one output reads rows
    and columns -1..1, so the 4 taps over the image train and the 5 over padding do not."""
    net = backbones.create_model("resnet34", width=0.25)
    first = next(c for c in kernel_taps(net, 32) if c.name == "res5.0.conv1")
    assert first.input_size == (2, 2) and first.untrained == 5
    assert first.used == ((False, False, False), (False, True, True), (False, True, True))
    assert net.training  # the probe leaves the net as it found it
