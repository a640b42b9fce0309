"""Pure-PyTorch backbones of the benchmark: ResNet / plain nets (ImageNet 18-152, CIFAR 6n+2) and VGG 11-19.

Never imports detectron2. Public interface:
    create_model(name, num_classes=1000, **options), list_models(pattern="*"), model_info(name) -> ModelInfo
    model.forward(x) -> logits; model.forward_features(x) -> OrderedDict of stage outputs; model.feature_info
    complexity(model, input_size) -> mult-adds (torch's operator counter, on meta tensors) and parameters
    load_pretrained(model, path) -> LoadReport  (torchvision, timm, Detectron2, MSRA Caffe2, our checkpoints)
    create_model_with_weights(name, path) -> (model, LoadReport): the model a weights file fits (torch.hub, timm)
    backbones.timm_models: every name in timm's registry as rdb_<name>, timm's model interface (needs timm);
    hubconf.py: torch.hub; backbones.torchvision_detection: torchvision's Faster R-CNN (its argument names)
    optimize_for_inference(model) -> a folded, channels_last, compiled copy for inference (backbones.inference)
"""

from . import resnet as _resnet  # noqa: F401  (registers resnet*/plain*/cifar_*)
from . import vgg as _vgg  # noqa: F401  (registers vgg*)
from .blocks import SHORTCUTS
from .checkpoint_io import CheckpointReadError, UnsafeCheckpointError
from .complexity import Complexity, complexity
from .features import FeatureInfo, FeatureNet
from .inference import InferenceModule, fold_norms_into_convs, optimize_for_inference
from .norm import NORMS, FrozenBatchNorm2d, get_norm
from .pretrained import (
    IncompatibleWeightsError,
    LoadReport,
    WeightsMeta,
    create_model_with_weights,
    load_pretrained,
    save_pretrained,
)
from .registry import ModelInfo, create_model, list_models, model_info, model_options

__all__ = ["create_model", "list_models", "model_info", "model_options", "create_model_with_weights", "ModelInfo",
           "FeatureInfo", "FeatureNet", "FrozenBatchNorm2d",
           "get_norm", "NORMS", "SHORTCUTS", "complexity", "Complexity", "load_pretrained", "save_pretrained",
           "LoadReport", "WeightsMeta", "IncompatibleWeightsError", "UnsafeCheckpointError", "CheckpointReadError",
           "optimize_for_inference", "fold_norms_into_convs", "InferenceModule"]
