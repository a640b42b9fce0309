"""torch.hub entry points: one per backbones.list_models() name.

    model = torch.hub.load("path/to/this/repo", "resnet50", source="local", weights="R-50.pkl")
    mean, std = model.input_normalization.mean, model.input_normalization.std   # for RGB images in [0, 1]
    torch.hub.list("OWNER/REPO")  # torch.hub.list reads GitHub only; its entry points are backbones.list_models()

`weights` is a file in any format backbones.load_pretrained reads safely (torchvision, timm, Detectron2 .pkl, MSRA
Caffe2, ours), loaded strictly by backbones.create_model_with_weights (its classifier as the file has it unless
num_classes is given; its stride placement). A model loaded with weights takes what torchvision's take -- RGB
images in [0, 1], normalised by `model.input_normalization` (the file's statistics): BGR 0-255 weights (MSRA's,
Detectron2's model zoo) are converted at load (backbones.input_convention). Without weights the net is freshly
initialised. torchvision's spellings (`pretrained=True`, `weights="IMAGENET1K_V1"`) get one line saying which file
to pass: nothing is downloaded. num_classes and the builder's options (backbones.model_options) pass through.
"""

dependencies = ["torch", "numpy", "safetensors"]  # what `import backbones` needs (torch.hub checks the list after
#   importing this file, so a missing one shows as the ImportError below)

import backbones as _backbones  # noqa: E402
from backbones import input_convention as _input_convention  # noqa: E402


def _entrypoint(name: str):
    def load(*, weights=None, num_classes: int | None = None, pretrained: bool = False, **options):
        if pretrained:
            raise ValueError(f"{name}: pretrained=True -- nothing is downloaded here; pass weights=FILE (torchvision, "
                             "timm, Detectron2 .pkl, MSRA Caffe2 or ours)")
        if weights is None:  # no file: the registry's default head (1000 classes) unless asked
            return _backbones.create_model(name, num_classes=1000 if num_classes is None else num_classes, **options)
        return _input_convention.create_model_for_rgb_unit_input(name, weights, num_classes=num_classes, **options)[0]

    load.__name__ = load.__qualname__ = name
    load.__doc__ = (f"backbones' {name}: weights=FILE (optional; RGB [0, 1] input, model.input_normalization), "
                    f"num_classes, options {_backbones.model_options(name)}")
    return load


for _name in _backbones.list_models():
    globals()[_name] = _entrypoint(_name)
