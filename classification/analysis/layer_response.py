"""Fig. 7: standard deviation of each 3x3 layer's response (after BN, before ReLU / addition) over a dataset.

The paper's (post-activation) units follow every 3x3 conv with its own BN: every 3x3 layer has a response, and a
unit's last one is the residual function F(x) itself. A pre-activation unit (He et al. 2016, BN-ReLU-conv) has a BN
right after a 3x3 conv only inside the unit -- after a basic unit's first conv (`norm2`), after a bottleneck's 3x3
conv (`norm3`); its last conv feeds the addition (in a plain net, the next unit's BN) with no BN of its own. So for
pre-activation nets the responses are those BN outputs: the paper's definition, on the layers where it applies,
the same layers in plain and residual nets. A unit's last conv is left out: the scale of its raw output is set by
the weights' growth, which the next BN undoes, and is not comparable across nets.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from backbones.blocks import Conv2dNorm, PreActBasicBlock, PreActBottleneckBlock

__all__ = ["layer_response_std", "plot_layer_responses"]


def _response_layers(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """(name of a 3x3 layer, the module whose output is its response) in depth order, excluding the stem (the
    paper plots the layers inside the stages)."""
    out = []
    for name, m in model.named_modules():
        if name.startswith("stem"):
            continue
        if isinstance(m, PreActBasicBlock):
            out.append((f"{name}.conv1", m.norm2))  # conv1's output, normalised before the unit's second ReLU
        elif isinstance(m, PreActBottleneckBlock):
            out.append((f"{name}.conv2", m.norm3))  # the 3x3 conv's output, normalised before the third ReLU
        elif isinstance(m, Conv2dNorm) and m.kernel_size == (3, 3) and m.norm is not None:
            out.append((name, m))  # Conv2dNorm's output is its BN's
    return out


@torch.no_grad()
def layer_response_std(model: nn.Module, dataset: Dataset, *, batch_size: int = 128,
                       max_images: int | None = None) -> list[tuple[str, float]]:
    """[(3x3 layer name, std of its response over all images, channels and positions)] in depth order: the BN
    output after the conv, before any ReLU or addition (those happen in the block), as the module docstring says
    for each kind of unit."""
    layers = _response_layers(model)
    if not layers:
        raise ValueError(f"{type(model).__name__} has no 3x3 conv followed by BN outside its stem")
    stats = {name: torch.zeros(3, dtype=torch.float64) for name, _ in layers}  # sum, sum of squares, count

    def hook(name):
        def fn(_module, _inp, out):
            o = out.detach().double()
            stats[name] += torch.stack([o.sum(), (o * o).sum(), torch.tensor(float(o.numel()), dtype=o.dtype)])
        return fn

    handles = [m.register_forward_hook(hook(name)) for name, m in layers]
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    seen = 0
    try:
        for batch in DataLoader(dataset, batch_size=batch_size):
            images = batch[0].to(device)
            if max_images is not None:
                images = images[: max_images - seen]
            model(images)
            seen += len(images)
            if max_images is not None and seen >= max_images:
                break
    finally:
        for h in handles:
            h.remove()
        model.train(was_training)
    out = []
    for name, _ in layers:
        s, ss, n = stats[name].tolist()
        out.append((name, float(max(ss / n - (s / n) ** 2, 0.0) ** 0.5)))
    return out


def plot_layer_responses(results: dict[str, list[tuple[str, float]]], path: str) -> None:
    """Two panels as Fig. 7: std by layer index (original order), and sorted by magnitude."""
    from .figures import pyplot

    plt = pyplot()

    fig, (a, b) = plt.subplots(2, 1, figsize=(7, 6))
    for label, res in results.items():
        stds = [s for _, s in res]
        a.plot(range(1, len(stds) + 1), stds, label=label)
        b.plot(range(1, len(stds) + 1), sorted(stds, reverse=True), label=label)
    a.set(xlabel="layer index (original)", ylabel="std", title="Responses of 3x3 layers (after BN, before ReLU/add)")
    b.set(xlabel="layer index (sorted by magnitude)", ylabel="std")
    a.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
