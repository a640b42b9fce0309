"""The installed Detectron2 is a normal one: its modules and Visualizer import in a fresh interpreter that never
imports this project (the patched sdist ships the _C stand-in, detection/detectron2_c_placeholder.py), and
Detectron2's demo-style use -- DefaultPredictor on a model_final.pth of ours, Visualizer on its output -- works."""

import subprocess
import sys

import numpy as np
import pytest
import torch
from detectron2.data import MetadataCatalog
from detectron2.engine import DefaultPredictor
from detectron2.modeling import build_model
from detectron2.utils.visualizer import Visualizer

from detection import BackbonesCheckpointer, compat, get_detection_cfg

SMALL_R18_C4 = ["MODEL.BACKBONES.NAME", "resnet18", "MODEL.BACKBONES.WIDTH", "0.25", "MODEL.DEVICE", "cpu",
                "MODEL.ROI_HEADS.NUM_CLASSES", "3", "INPUT.MIN_SIZE_TEST", "96", "INPUT.MAX_SIZE_TEST", "128",
                "MODEL.ROI_HEADS.SCORE_THRESH_TEST", "0.0", "MODEL.RPN.POST_NMS_TOPK_TEST", "20"]


@pytest.mark.skipif(compat.has_compiled_ops(), reason="a compiled detectron2._C is present: nothing stands in")
def test_bare_detectron2_imports_without_this_project(tmp_path):
    code = ("import sys; from detectron2.modeling import build_model; from detectron2.engine import DefaultPredictor; "
            "from detectron2.utils.visualizer import Visualizer; from detectron2 import _C; "
            "assert _C.IS_PLACEHOLDER and 'detection' not in sys.modules, sorted(sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_default_predictor_and_visualizer_on_a_model_final_of_ours(tmp_path):
    cfg = get_detection_cfg("configs/COCO-Detection/faster_rcnn_R_34_C4.yaml", SMALL_R18_C4 + ["MODEL.WEIGHTS", ""])
    torch.manual_seed(0)
    BackbonesCheckpointer(build_model(cfg), save_dir=str(tmp_path)).save("model_final")
    cfg = get_detection_cfg("configs/COCO-Detection/faster_rcnn_R_34_C4.yaml",
                            SMALL_R18_C4 + ["MODEL.WEIGHTS", str(tmp_path / "model_final.pth")])
    predictor = DefaultPredictor(cfg)  # Detectron2's checkpointer reads our file
    image_bgr = np.random.default_rng(0).integers(0, 256, (96, 128, 3), dtype=np.uint8)  # as cv2.imread gives
    instances = predictor(image_bgr)["instances"].to("cpu")
    assert len(instances) > 0 and instances.pred_boxes.tensor.shape[1] == 4
    metadata = MetadataCatalog.get("environment_test").set(thing_classes=["bag", "shoe", "shirt"])
    drawn = Visualizer(image_bgr[:, :, ::-1], metadata).draw_instance_predictions(instances).get_image()
    assert drawn.shape == (96, 128, 3) and not np.array_equal(drawn, image_bgr[:, :, ::-1])
