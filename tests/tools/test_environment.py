"""The environment is real: Detectron2 0.6 imports and trains on CPU, the _C shim fails clearly, set-up explains."""

import importlib.util
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import detection  # noqa: F401  (installs the _C shim)
from conftest import REPO
from detection import compat


def _load_tool(name):
    spec = importlib.util.spec_from_file_location(name, REPO / "tools" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


def test_detectron2_is_a_pip_distribution_and_imports():
    import importlib.metadata as md

    assert md.version("pb1-detectron2") == "0.6"
    import detectron2
    import detectron2.data  # Pillow>=10: Image.LINEAR patched
    import detectron2.engine
    import detectron2.evaluation
    import detectron2.export  # caffe2 guard backported
    import detectron2.modeling
    from detectron2 import model_zoo  # setuptools>=81: no pkg_resources

    assert detectron2.__version__ == "0.6"
    path = model_zoo.get_config_file("COCO-Detection/faster_rcnn_R_50_C4_1x.yaml")
    assert Path(path).is_file()


def test_numpy2_paths_of_detectron2_work():
    import numpy as np
    from detectron2.data.build import print_instances_class_histogram

    # np.int in the class histogram used by every training run
    print_instances_class_histogram([{"annotations": [{"category_id": 0}, {"category_id": 1}]}], ["a", "b"])
    from detectron2.structures.masks import polygons_to_bitmask

    m = polygons_to_bitmask([np.array([0, 0, 4, 0, 4, 4, 0, 4], dtype=float)], 6, 6)
    assert m.dtype == bool and m.sum() > 0


def _tiny_zoo_cfg():
    from detectron2 import model_zoo
    from detectron2.config import get_cfg

    cfg = get_cfg()
    cfg.merge_from_file(model_zoo.get_config_file("COCO-Detection/faster_rcnn_R_50_C4_1x.yaml"))
    cfg.MODEL.DEVICE = "cpu"
    cfg.MODEL.WEIGHTS = ""
    cfg.MODEL.RESNETS.NORM = "BN"  # from scratch: FrozenBN with random stats diverges
    cfg.MODEL.ROI_HEADS.NUM_CLASSES = 3
    cfg.MODEL.ROI_HEADS.BATCH_SIZE_PER_IMAGE = 16
    cfg.MODEL.RPN.PRE_NMS_TOPK_TRAIN = 200
    cfg.MODEL.RPN.POST_NMS_TOPK_TRAIN = 50
    cfg.MODEL.RPN.PRE_NMS_TOPK_TEST = 100
    cfg.MODEL.RPN.POST_NMS_TOPK_TEST = 20
    return cfg


def test_model_zoo_r50_c4_trains_one_step_and_infers_on_cpu():
    from detectron2.modeling import build_model
    from detectron2.structures import Boxes, Instances

    torch.manual_seed(0)
    cfg = _tiny_zoo_cfg()
    model = build_model(cfg)
    model.train()
    img = torch.randint(0, 255, (3, 96, 128), dtype=torch.uint8).float()
    inst = Instances((96, 128), gt_boxes=Boxes(torch.tensor([[10.0, 10.0, 60.0, 70.0]])),
                     gt_classes=torch.tensor([1]))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    before = model.roi_heads.box_predictor.cls_score.weight.detach().clone()
    from detectron2.utils.events import EventStorage

    with EventStorage(0):
        losses = model([{"image": img, "instances": inst}])
    assert set(losses) == {"loss_cls", "loss_box_reg", "loss_rpn_cls", "loss_rpn_loc"}
    total = sum(losses.values())
    assert torch.isfinite(total)
    total.backward()
    opt.step()
    assert not torch.equal(before, model.roi_heads.box_predictor.cls_score.weight)

    model.eval()
    with torch.no_grad():
        (out,) = model([{"image": img, "height": 96, "width": 128}])
    inst = out["instances"]
    assert inst.image_size == (96, 128)
    assert inst.pred_boxes.tensor.shape[1] == 4 and len(inst) <= cfg.TEST.DETECTIONS_PER_IMAGE


@pytest.mark.skipif(compat.has_compiled_ops(), reason="a compiled detectron2._C is present")
def test_shim_raises_clear_error_for_compiled_ops():
    from detectron2.evaluation.fast_eval_api import COCOeval_opt
    from detectron2.layers import nms_rotated
    from detectron2.layers.rotated_boxes import pairwise_iou_rotated

    with pytest.raises(compat.Detectron2ExtensionMissing, match="box_iou_rotated.*rotated boxes.*full build"):
        pairwise_iou_rotated(torch.rand(3, 5), torch.rand(2, 5))
    with pytest.raises(compat.Detectron2ExtensionMissing, match="nms_rotated"):
        nms_rotated(torch.rand(3, 5), torch.rand(3), 0.5)
    from detectron2 import _C

    with pytest.raises(ImportError, match="COCOeval_opt"):
        _C.COCOevalAccumulate  # noqa: B018
    import contextlib
    import io

    from pycocotools.coco import COCO

    gt = COCO()  # the module imports; evaluating with it is what needs _C, and says so
    gt.dataset = {"images": [{"id": 1, "width": 10, "height": 10}], "categories": [{"id": 1, "name": "a"}],
                  "annotations": [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [0, 0, 5, 5], "area": 25,
                                   "iscrowd": 0}]}
    with contextlib.redirect_stdout(io.StringIO()):
        gt.createIndex()
        dt = gt.loadRes([{"image_id": 1, "category_id": 1, "bbox": [0, 0, 5, 5], "score": 1.0}])
        with pytest.raises(ImportError, match="COCOeval"):
            COCOeval_opt(gt, dt, "bbox").evaluate()
    assert not hasattr(_C, "__wrapped__")  # dunders answer AttributeError, not the ImportError
    from detectron2.utils.collect_env import collect_env_info

    assert "detectron2" in collect_env_info()


def test_shim_changes_nothing_when_the_extension_is_built(tmp_path):
    """A full build (simulated by an importable detectron2/_C module) is left untouched."""
    fake = tmp_path / "d2ext" / "detectron2"
    fake.mkdir(parents=True)
    (fake / "_C.py").write_text("MARK = 'real extension'\ndef nms_rotated(*a):\n    return 'real'\n")
    code = textwrap.dedent(f"""
        import sys, detectron2
        detectron2.__path__.insert(0, {str(fake)!r})  # before the package's own _C.py (the sdist's stand-in)
        from detection import compat
        assert compat.install() is False
        assert compat.has_compiled_ops()
        import detectron2._C as C
        assert C.MARK == 'real extension', C
        from detectron2.layers import rotated_boxes
        assert rotated_boxes._C is C
        print('unchanged')
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "unchanged" in proc.stdout


def test_shim_loads_the_stand_in_for_a_detectron2_without_one():
    """A Detectron2 built some other way without its extension (simulated: no detectron2._C to be found) gets the
    same stand-in the sdist ships, loaded from the detection package."""
    code = textwrap.dedent("""
        import importlib.util, sys
        find = importlib.util.find_spec
        importlib.util.find_spec = lambda name, *a: None if name == "detectron2._C" else find(name, *a)
        from detection import compat
        assert compat.install() is True and not compat.has_compiled_ops()
        C = sys.modules["detectron2._C"]
        assert C.__file__ == str(compat.PLACEHOLDER) and C.REASON == "not built", C
        try:
            C.deform_conv_forward
        except compat.Detectron2ExtensionMissing as err:
            assert "deformable convolution" in str(err)
        print("stand-in")
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "stand-in" in proc.stdout, proc.stderr[-3000:]


def test_patch_detectron2_refuses_a_different_sdist(tmp_path):
    patch = _load_tool("patch_detectron2")
    root = tmp_path / "sdist"
    (root / "detectron2").mkdir(parents=True)
    (root / "detectron2" / "__init__.py").write_text("")
    (root / "setup.py").write_text("print('not the expected setup.py')\n")
    with pytest.raises(patch.PatchError, match="setup.py: expected 1 occurrence"):
        patch.patch_tree(root)
    assert (root / "setup.py").read_text() == "print('not the expected setup.py')\n"  # untouched
    assert not (root / patch.MARKER).exists()


def test_patch_edits_are_applied_to_the_installed_detectron2():
    import detectron2

    d2 = Path(detectron2.__file__).parent
    assert "Image.BILINEAR" in (d2 / "data/transforms/transform.py").read_text()
    assert "pkg_resources" not in (d2 / "model_zoo/model_zoo.py").read_text()
    assert "np.int)" not in (d2 / "data/build.py").read_text()


@pytest.mark.parametrize("kind", ["no_python", "wrong_python"])
def test_setup_explains_a_broken_venv(tmp_path, kind):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("home = /nowhere\n")
    if kind == "wrong_python":
        py = venv / "bin" / "python"
        py.write_text("#!/bin/sh\necho 2.7\n")
        py.chmod(0o755)
    proc = subprocess.run([sys.executable, str(REPO / "tools/setup_env.py"), "--venv", str(venv)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    expect = "not a complete virtual environment" if kind == "no_python" else "was made with Python 2.7"
    assert expect in proc.stderr and "rm -rf" in proc.stderr


def test_setup_refuses_an_old_python(monkeypatch):
    setup_env = _load_tool("setup_env")
    monkeypatch.setattr(setup_env.sys, "version_info", (3, 8, 10, "final", 0))
    with pytest.raises(setup_env.SetupError, match=r"(?s)needs Python >= 3.10, but .* is 3.8.10.*PYTHON=python3.11"):
        setup_env.check_interpreter()


def test_setup_rerun_reinstalls_nothing():
    """After `make setup` (which `make test` runs first) the environment is complete and recorded as such."""
    proc = subprocess.run([sys.executable, str(REPO / "tools/setup_env.py"), "--venv", str(Path(sys.prefix)),
                           "--check"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "up to date" in proc.stdout and "installing" not in proc.stdout
