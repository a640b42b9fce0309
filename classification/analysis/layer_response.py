"""Fig. 7: standard deviation of each 3x3 layer's response (before ReLU / addition) over a dataset.

The paper's units (post-activation) follow each 3x3 conv with BN: the response is the BN output. Pre-activation
units (He et al. 2016: BN-ReLU-conv) feed a 3x3 conv's output straight into the next unit's BN or the addition: the
response is the conv output. Either way it is the 3x3 layer's contribution before any ReLU or addition.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from backbones.blocks import Conv2dNorm

__all__ = ["layer_response_std", "plot_layer_responses"]


def _three_by_three_layers(model: nn.Module) -> list[tuple[str, Conv2dNorm]]:
    """3x3 layers in depth order, excluding the stem (the paper plots the layers inside the stages)."""
    return [(n, m) for n, m in model.named_modules()
            if isinstance(m, Conv2dNorm) and m.kernel_size == (3, 3) and not n.startswith("stem")]


@torch.no_grad()
def layer_response_std(model: nn.Module, dataset: Dataset, *, batch_size: int = 128,
                       max_images: int | None = None) -> list[tuple[str, float]]:
    """[(layer name, std of its response over all images, channels and positions)] in depth order.

    Conv2dNorm's output is its BN's output when it has one (post-activation units), else the conv's (pre-activation
    units): in both, before any ReLU or addition (those happen in the block) -- the response the paper measures.
    """
    layers = _three_by_three_layers(model)
    if not layers:
        raise ValueError(f"{type(model).__name__} has no 3x3 conv layers outside its stem")
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
    a.set(xlabel="layer index (original)", ylabel="std", title="Responses of 3x3 layers (before ReLU / addition)")
    b.set(xlabel="layer index (sorted by magnitude)", ylabel="std")
    a.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
