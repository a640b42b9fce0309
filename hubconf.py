"""torch.hub entry points: one per backbones.list_models() name.

    model = torch.hub.load("path/to/this/repo", "resnet50", source="local", weights="R-50.pkl")
    torch.hub.list("OWNER/REPO")  # torch.hub.list reads GitHub only; its entry points are backbones.list_models()

`weights` is a file in any format backbones.load_pretrained reads safely (torchvision, timm, Detectron2 .pkl, MSRA
Caffe2, ours), loaded strictly by backbones.create_model_with_weights (its classifier as the file has it unless
num_classes is given); without it the net is freshly initialised. MSRA's Caffe2 files expect BGR input, 0-255.
num_classes and the builder's options (backbones.model_options) pass through.
"""

dependencies = ["torch", "numpy", "safetensors"]  # what `import backbones` needs (torch.hub checks the list after
#   importing this file, so a missing one shows as the ImportError below)

import backbones as _backbones  # noqa: E402


def _entrypoint(name: str):
    def load(*, weights: str | None = None, num_classes: int | None = None, **options):
        if weights is None:  # no file: the registry's default head (1000 classes) unless asked
            return _backbones.create_model(name, num_classes=1000 if num_classes is None else num_classes, **options)
        return _backbones.create_model_with_weights(name, weights, num_classes=num_classes, **options)[0]

    load.__name__ = load.__qualname__ = name
    load.__doc__ = f"backbones' {name}: weights=FILE (optional), num_classes, options {_backbones.model_options(name)}"
    return load


for _name in _backbones.list_models():
    globals()[_name] = _entrypoint(_name)
