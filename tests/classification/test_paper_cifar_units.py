"""The degradation experiment's nets against an independent implementation of the paper's Sec. 4.2 CIFAR nets,
written here from the paper's text alone (not from backbones/): given the same weights, the registry's
cifar_resnet20/56 and cifar_plain20/56 (their defaults: the 2015 post-activation units, option A shortcuts) compute
the same function, in eval mode and with batch statistics; another reading of option A does not (the test can
fail).

Sec. 4.2: "The first layer is 3x3 convolutions. Then we use a stack of 6n layers with 3x3 convolutions on the feature
maps of sizes {32, 16, 8} respectively, with 2n layers for each feature map size. The numbers of filters are {16,
32, 64} respectively. The subsampling is performed by convolutions with a stride of 2. The network ends with a global
average pooling, a 10-way fully-connected layer, and softmax. [...] shortcut connections are connected to the pairs
of 3x3 layers [...] we use identity shortcuts in all cases (i.e., option A)". Sec. 3.3 option A: "the shortcut still
performs identity mapping, with extra zero entries padded for increasing dimensions [...] performed with a stride of
2". Sec. 3.4: BN "right after each convolution and before activation"; the addition is followed by the ReLU (Fig. 2).
Where the text is silent -- which channels the zero entries fill -- this implementation appends them after the
input's channels."""

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from backbones import create_model


class PaperBlock(nn.Module):
    """Two 3x3 conv-BN layers, ReLU between; shortcut added before the final ReLU (a plain net: no shortcut)."""

    def __init__(self, cin: int, cout: int, stride: int, residual: bool, zeros_first: bool = False):
        super().__init__()
        self.zeros_first = zeros_first
        self.conv_a = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn_a = nn.BatchNorm2d(cout)
        self.conv_b = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn_b = nn.BatchNorm2d(cout)
        self.residual, self.stride, self.extra = residual, stride, cout - cin

    def forward(self, x):
        y = self.bn_b(self.conv_b(F.relu(self.bn_a(self.conv_a(x)))))
        if self.residual:
            identity = x[:, :, ::self.stride, ::self.stride]  # option A: stride 2 across map sizes ...
            zeros = identity.new_zeros(identity.shape[0], self.extra, *identity.shape[2:])
            pieces = [zeros, identity] if self.zeros_first else [identity, zeros]
            y = y + torch.cat(pieces, 1)  # ... zero entries for the new dimensions
        return F.relu(y)


class PaperCifarNet(nn.Module):
    def __init__(self, depth: int, residual: bool, zeros_first: bool = False):
        super().__init__()
        n = (depth - 2) // 6
        self.conv = nn.Conv2d(3, 16, 3, 1, 1, bias=False)
        self.bn = nn.BatchNorm2d(16)
        blocks, cin = [], 16
        for size_index, cout in enumerate((16, 32, 64)):
            for i in range(n):
                blocks.append(PaperBlock(cin, cout, 2 if size_index and i == 0 else 1, residual, zeros_first))
                cin = cout
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(64, 10)

    def forward(self, x):
        x = self.blocks(F.relu(self.bn(self.conv(x))))
        return self.fc(x.mean((2, 3)))


def _same_weights(src: nn.Module, dst: nn.Module) -> None:
    """Copy src's tensors into dst in order (conv, its BN, ... fc), each pair checked for shape."""
    a, b = src.state_dict(), dst.state_dict()
    assert len(a) == len(b), (len(a), len(b))
    dst.load_state_dict({kb: a[ka].clone() for (ka, va), (kb, vb) in zip(a.items(), b.items())
                         if va.shape == vb.shape or pytest.fail(f"{ka} {tuple(va.shape)} vs {kb} {tuple(vb.shape)}")})


def _randomise_bn(net: nn.Module, seed: int) -> None:
    """Non-trivial BN statistics and affine parameters, so that eval mode tests them too."""
    g = torch.Generator().manual_seed(seed)
    for m in net.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.weight.data = torch.rand(m.weight.shape, generator=g) + 0.5
            m.bias.data = torch.randn(m.bias.shape, generator=g) * 0.1
            m.running_mean = torch.randn(m.running_mean.shape, generator=g) * 0.1
            m.running_var = torch.rand(m.running_var.shape, generator=g) + 0.5


@pytest.mark.parametrize("depth", [20, 56])
@pytest.mark.parametrize("residual", [True, False])
def test_the_registry_cifar_nets_are_the_papers_sec_4_2_nets(depth, residual):
    torch.manual_seed(depth)
    ours = create_model(f"cifar_{'resnet' if residual else 'plain'}{depth}", num_classes=10)
    _randomise_bn(ours, depth)
    paper = PaperCifarNet(depth, residual)
    _same_weights(ours, paper)
    x = torch.randn(4, 3, 32, 32)
    for train in (False, True):  # running statistics, then batch statistics
        ours.train(train)
        paper.train(train)
        with torch.no_grad():
            torch.testing.assert_close(ours(x), paper(x), rtol=1e-4, atol=1e-4)
    assert sum(p.numel() for p in paper.parameters()) == sum(p.numel() for p in ours.parameters())


def test_the_comparison_fails_for_another_function_with_the_same_tensors():
    """The check can fail: with the zero entries placed before the identity's channels (another reading of option
    A, the same tensors) the outputs differ."""
    torch.manual_seed(0)
    ours = create_model("cifar_resnet20", num_classes=10)
    _randomise_bn(ours, 0)
    other = PaperCifarNet(20, True, zeros_first=True)
    _same_weights(ours, other)
    ours.eval()
    other.eval()
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        assert not torch.allclose(ours(x), other(x), atol=1e-3)
