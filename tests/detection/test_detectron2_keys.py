"""Detectron2's own backbone keys (MODEL.BACKBONE.FREEZE_AT, MODEL.RESNETS.*) in a run the plugin builds
(detection.detectron2_keys): each drives the run, yields to ours set later, or is refused naming both keys; the
resolved config records what runs; a config.yaml of an earlier run, which recorded Detectron2's defaults beside
what ran, builds what it built."""

import pytest
import yaml
from detectron2.config import get_cfg
from detectron2.modeling import BACKBONE_REGISTRY, build_model

from detection import add_backbones_config, get_detection_cfg
from detection.detectron2_keys import MIRRORED_KEYS, PLUGIN_BUILDERS
from detection.modeling import meta_arch
from detection.report.groups import config_differences

R101_C4 = "configs/COCO-Detection/faster_rcnn_R_101_C4.yaml"
VGG16 = "configs/COCO-Detection/faster_rcnn_vgg16.yaml"
SMALL = ["MODEL.BACKBONES.WIDTH", "0.25", "MODEL.DEVICE", "cpu", "MODEL.WEIGHTS", ""]


def _cfg(path=R101_C4, *opts):
    return get_detection_cfg(path, SMALL + list(opts), read_weights=False)


def _frozen_stages(model) -> set[str]:
    return {n.split(".")[0] for n, p in model.backbone.named_parameters() if not p.requires_grad}


def test_detectron2_freeze_at_freezes_the_stages_it_names():
    cfg = _cfg(R101_C4, "MODEL.BACKBONE.FREEZE_AT", "4")  # stem, res2, res3, res4
    assert cfg.MODEL.BACKBONES.FREEZE_AT == 4 and cfg.MODEL.BACKBONE.FREEZE_AT == 4
    assert _frozen_stages(build_model(cfg)) == {"stem", "res2", "res3", "res4"}


def test_a_config_built_without_get_detection_cfg_is_resolved_where_the_net_is_built():
    cfg = add_backbones_config(get_cfg())  # Detectron2's tutorial way: get_cfg, our keys, merge_from_file
    cfg.merge_from_file(R101_C4)
    cfg.merge_from_list(SMALL + ["MODEL.BACKBONE.FREEZE_AT", "3"])
    cfg.freeze()
    assert _frozen_stages(build_model(cfg)) == {"stem", "res2", "res3"}


def test_detectron2_depth_on_the_command_line_builds_that_depth():
    cfg = _cfg(R101_C4, "MODEL.RESNETS.DEPTH", "50")  # 50 is Detectron2's default: set, all the same
    assert cfg.MODEL.BACKBONES.NAME == "resnet50"
    assert len(build_model(cfg).roi_heads.res5) == 3 and len(build_model(cfg).backbone.res4) == 6


def test_a_resnet101_config_records_depth_101_and_what_runs():
    r = _cfg().MODEL.RESNETS
    assert (r.DEPTH, r.NORM, r.STRIDE_IN_1X1, list(r.OUT_FEATURES)) == (101, "FrozenBN", True, ["res4"])
    assert (r.STEM_OUT_CHANNELS, r.WIDTH_PER_GROUP, r.RES2_OUT_CHANNELS) == (16, 16, 64)  # width 0.25
    vgg = _cfg(VGG16).MODEL.RESNETS
    assert (vgg.DEPTH, vgg.NORM) == (16, "")  # vgg16 has no norm: a BN variant leaves it without


@pytest.mark.parametrize("opts, named", [
    (["MODEL.RESNETS.DEPTH", "50", "MODEL.BACKBONES.NAME", "resnet34"],
     "MODEL.RESNETS.DEPTH 50 and MODEL.BACKBONES.NAME 'resnet34'"),
    (["MODEL.RESNETS.NORM", "GN", "MODEL.BACKBONES.NORM", "BN"], "MODEL.RESNETS.NORM 'GN' and MODEL.BACKBONES.NORM"),
    (["MODEL.BACKBONE.FREEZE_AT", "5", "MODEL.BACKBONES.FREEZE_AT", "0"],
     "MODEL.BACKBONE.FREEZE_AT 5 and MODEL.BACKBONES.FREEZE_AT 0"),
    (["MODEL.RESNETS.STEM_OUT_CHANNELS", "64"], "MODEL.RESNETS.STEM_OUT_CHANNELS 64 and MODEL.BACKBONES.WIDTH 0.25"),
    (["MODEL.RESNETS.RES5_DILATION", "2"], "MODEL.RESNETS.RES5_DILATION 2: resnet101"),
    (["MODEL.RESNETS.NUM_GROUPS", "32"], "MODEL.RESNETS.NUM_GROUPS 32"),
    (["MODEL.RESNETS.DEPTH", "77"], "MODEL.RESNETS.DEPTH 77: no resnet net of depth 77"),
])
def test_a_conflicting_or_unsupported_detectron2_key_is_refused_naming_it(opts, named):
    with pytest.raises(ValueError, match="^config: ") as err:
        _cfg(R101_C4, *opts)
    assert named in str(err.value) and "\n" not in str(err.value)


def test_vgg_refuses_a_stride_placement_it_does_not_have():
    with pytest.raises(ValueError, match="STRIDE_IN_1X1 False: vgg16 .* has no such setting"):
        _cfg(VGG16, "MODEL.RESNETS.STRIDE_IN_1X1", "False")


def test_ours_set_in_a_later_file_overlays_a_detectron2_key_of_its_base(tmp_path):
    base = tmp_path / "base.yaml"  # a Detectron2-style R-50 base under our overlay naming ResNet-101
    base.write_text(f'_BASE_: "{__import__("os").path.abspath(R101_C4)}"\nMODEL:\n  RESNETS:\n    DEPTH: 50\n')
    top = tmp_path / "top.yaml"
    top.write_text('_BASE_: "base.yaml"\nMODEL:\n  BACKBONES:\n    NAME: "resnet101"\n')
    cfg = get_detection_cfg(str(top), SMALL, read_weights=False)
    assert cfg.MODEL.BACKBONES.NAME == "resnet101" and cfg.MODEL.RESNETS.DEPTH == 101
    both = tmp_path / "both.yaml"  # one file setting both: which is meant is not ours to guess
    both.write_text(f'_BASE_: "{__import__("os").path.abspath(R101_C4)}"\nMODEL:\n  RESNETS:\n    DEPTH: 50\n'
                    '  BACKBONES:\n    NAME: "resnet101"\n')
    with pytest.raises(ValueError, match="MODEL.RESNETS.DEPTH 50 and MODEL.BACKBONES.NAME 'resnet101'"):
        get_detection_cfg(str(both), SMALL, read_weights=False)


def test_a_config_yaml_recorded_before_the_mirror_builds_what_it_built(tmp_path):
    recorded = yaml.safe_load(_cfg().dump())  # what a run wrote before: Detectron2's defaults beside ours
    recorded["MODEL"]["RESNETS"].update(DEPTH=50, STEM_OUT_CHANNELS=64, WIDTH_PER_GROUP=64, RES2_OUT_CHANNELS=256)
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(recorded))
    cfg = get_detection_cfg(str(tmp_path / "config.yaml"), [], read_weights=False)
    assert cfg.MODEL.BACKBONES.NAME == "resnet101" and cfg.MODEL.RESNETS.DEPTH == 101


def test_the_resolved_config_resolves_to_itself(tmp_path):
    (tmp_path / "config.yaml").write_text(_cfg(R101_C4, "MODEL.RESNETS.DEPTH", "152").dump())
    again = get_detection_cfg(str(tmp_path / "config.yaml"), [], read_weights=False)
    assert yaml.safe_load(again.dump()) == yaml.safe_load(_cfg(R101_C4, "MODEL.RESNETS.DEPTH", "152").dump())


def test_detectron2_own_builders_keep_detectron2_keys():
    cfg = get_detection_cfg(None, ["MODEL.RESNETS.DEPTH", "101", "MODEL.BACKBONE.FREEZE_AT", "3"], read_weights=False)
    assert cfg.MODEL.BACKBONE.NAME == "build_resnet_backbone"
    assert (cfg.MODEL.RESNETS.DEPTH, cfg.MODEL.BACKBONES.NAME, cfg.MODEL.BACKBONES.FREEZE_AT) == (101, "resnet101", 2)
    assert cfg.MODEL.RESNETS.STEM_OUT_CHANNELS == 64  # not mirrored: the plugin builds nothing here


def test_plugin_builders_are_the_registered_ones():
    assert PLUGIN_BUILDERS == set(meta_arch._BACKBONE_DESIGNS)
    assert all(BACKBONE_REGISTRY.get(name) for name in PLUGIN_BUILDERS)


def test_a_config_diff_names_ours_not_its_mirror():
    a, b = _cfg(R101_C4), _cfg(R101_C4, "MODEL.BACKBONES.NORM", "GN", "MODEL.BACKBONES.FREEZE_AT", "0")
    diff = config_differences(yaml.safe_load(a.dump()), yaml.safe_load(b.dump()))
    assert set(diff) == {"MODEL.BACKBONES.NORM", "MODEL.BACKBONES.FREEZE_AT"} and not set(diff) & MIRRORED_KEYS


def test_an_edited_config_yaml_is_read_as_written_not_as_a_record(tmp_path):
    recorded = yaml.safe_load(_cfg().dump())  # a run's config.yaml (mirrored), then edited by hand
    recorded["MODEL"]["RESNETS"].update(DEPTH=152, RES5_DILATION=2)
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(recorded))
    with pytest.raises(ValueError, match="MODEL.RESNETS.DEPTH 152 and MODEL.BACKBONES.NAME 'resnet101'.*"
                                         "MODEL.RESNETS.RES5_DILATION 2"):
        get_detection_cfg(str(tmp_path / "config.yaml"), [], read_weights=False)
    cfg = get_detection_cfg(str(tmp_path / "config.yaml"), ["MODEL.RESNETS.DEPTH", "50", "MODEL.RESNETS.RES5_DILATION",
                                                             "1"], read_weights=False)  # the command line, later
    assert cfg.MODEL.BACKBONES.NAME == "resnet50"


def test_a_driven_value_the_net_cannot_take_is_refused():
    with pytest.raises(ValueError, match="MODEL.RESNETS.NORM 'BN': vgg16 .* would still run ''"):
        _cfg(VGG16, "MODEL.RESNETS.NORM", "BN")  # vgg16 has no norm layers to train: vgg16_bn has


def test_without_the_files_a_key_counts_as_set_only_away_from_detectron2s_default():
    """get_cfg + add_backbones_config + merge (no get_detection_cfg): nothing says which keys the user assigned, so
    a Detectron2 key at its default (DEPTH 50) reads as left alone and the net is ours (documented in
    ARCHITECTURE.md); away from its default it drives."""
    cfg = add_backbones_config(get_cfg())
    cfg.merge_from_file(R101_C4)
    cfg.merge_from_list(SMALL + ["MODEL.RESNETS.DEPTH", "50"])
    from detection.detectron2_keys import resolved

    assert resolved(cfg).MODEL.BACKBONES.NAME == "resnet101"
    cfg.MODEL.RESNETS.DEPTH = 152
    assert resolved(cfg).MODEL.BACKBONES.NAME == "resnet152"


def test_runs_recorded_before_and_after_the_mirror_are_seeds_of_one_configuration():
    from detection.report.groups import config_key
    from detection.report.runs import RunResult

    new = yaml.safe_load(_cfg().dump())
    old = yaml.safe_load(_cfg().dump())
    old["MODEL"]["RESNETS"].update(DEPTH=50, STEM_OUT_CHANNELS=64)
    keys = {config_key(RunResult(name=p, path=p, status="finished", config=c)) for p, c in (("a", old), ("b", new))}
    assert len(keys) == 1
