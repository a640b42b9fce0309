"""torch.hub entry points: one per backbones.list_models() name.

    model = torch.hub.load("path/to/this/repo", "resnet50", source="local", weights="R-50.pkl")
    torch.hub.list("OWNER/REPO")  # torch.hub.list reads GitHub only; its entry points are backbones.list_models()

`weights` is a file in any format backbones.load_pretrained reads safely (torchvision, timm, Detectron2 .pkl, MSRA
Caffe2, ours), loaded strictly by backbones.create_model_with_weights; without it the net is freshly initialised.
num_classes and the builder's options (backbones.model_options) pass through.
"""

dependencies = ["torch", "numpy", "safetensors"]  # what `import backbones` needs; torch.hub checks them first

import backbones as _backbones  # noqa: E402  (torch.hub reads `dependencies` before importing anything)


def _entrypoint(name: str):
    def load(*, weights: str | None = None, num_classes: int = 1000, **options):
        if weights is None:
            return _backbones.create_model(name, num_classes=num_classes, **options)
        return _backbones.create_model_with_weights(name, weights, num_classes=num_classes, **options)[0]

    load.__name__ = load.__qualname__ = name
    load.__doc__ = f"backbones' {name}: weights=FILE (optional), num_classes, options {_backbones.model_options(name)}"
    return load


for _name in _backbones.list_models():
    globals()[_name] = _entrypoint(_name)
