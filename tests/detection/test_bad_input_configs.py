"""Bad input to the detection tools' configs and command lines, tried as a new user (and an attacker) would:
hostile or malformed YAML, overrides that swallow each other, values that cannot mean what they say. Each gets one
clear error naming the file or key; nothing valid changes."""



import pytest

from classification.engine.config import ClsConfig
from conftest import run_tool
from detection import get_detection_cfg
from detection.config import ConfigFileError
from detection.engine import train_net
from detection.report import load_run

pytestmark = pytest.mark.bad_input

HOSTILE = "MODEL:\n  WEIGHTS: !!python/object/apply:os.system ['touch {marker}']\n"


@pytest.mark.slow
def test_hostile_yaml_is_refused_without_running_it(tmp_path):
    marker = tmp_path / "pwned"
    bad = tmp_path / "bad.yaml"
    bad.write_text(HOSTILE.format(marker=marker))
    with pytest.raises(ConfigFileError, match=r"bad.yaml, line 2: refused: .*YAML tag"):
        get_detection_cfg(str(bad))
    child = tmp_path / "child.yaml"  # the same through a _BASE_
    child.write_text(f"_BASE_: {bad.name}\nSOLVER:\n  MAX_ITER: 5\n")
    with pytest.raises(ConfigFileError, match="bad.yaml"):
        get_detection_cfg(str(child))
    proc = run_tool("tools/train_det.py", "--config-file", child, "MODEL.DEVICE", "cpu")
    assert proc.returncode != 0 and "refused" in proc.stderr and "Traceback" not in proc.stderr
    assert not marker.exists()  # the command never ran
    run = tmp_path / "run"  # and in a run directory the report reads
    run.mkdir()
    (run / "config.yaml").write_text(HOSTILE.format(marker=marker))
    assert load_run(run).status.startswith("unreadable config.yaml") and not marker.exists()


def test_base_cycle_and_malformed_configs_name_the_file(tmp_path):
    (tmp_path / "a.yaml").write_text("_BASE_: b.yaml\n")
    (tmp_path / "b.yaml").write_text("_BASE_: a.yaml\n")
    with pytest.raises(ConfigFileError, match=r"_BASE_ cycle: .*a.yaml -> .*b.yaml -> .*a.yaml"):
        get_detection_cfg(str(tmp_path / "a.yaml"))
    (tmp_path / "c.yaml").write_text("MODEL: [unclosed\n")
    with pytest.raises(ConfigFileError, match="c.yaml: not valid YAML"):
        get_detection_cfg(str(tmp_path / "c.yaml"))
    (tmp_path / "d.yaml").write_text("- a list\n")
    with pytest.raises(ConfigFileError, match="d.yaml: a config must be a mapping"):
        get_detection_cfg(str(tmp_path / "d.yaml"))


def test_a_long_base_chain_is_refused_as_a_chain(tmp_path):
    """A long chain of files each the _BASE_ of the one before (1200 were reported as "nested too deeply to parse
    (more than 64 levels)", naming a file in the middle: fvcore's recursion), here 41: refused as a chain."""
    for i in range(40):
        (tmp_path / f"c{i}.yaml").write_text(f"_BASE_: c{i + 1}.yaml\n")
    (tmp_path / "c40.yaml").write_text("SOLVER:\n  MAX_ITER: 3\n")
    with pytest.raises(ConfigFileError, match=r"c0.yaml: a _BASE_ chain of more than 32 files \(.*c0.yaml -> .*c1.yaml"
                                              r" -> \.\.\. -> .*c31.yaml -> .*c32.yaml\); refused"):
        get_detection_cfg(str(tmp_path / "c0.yaml"), read_weights=False)
    assert get_detection_cfg(str(tmp_path / "c20.yaml"), read_weights=False).SOLVER.MAX_ITER == 3  # 20 are fine


def test_a_yaml_merge_key_is_plain_yaml_and_its_values_may_be_overridden(tmp_path):
    """`<<: *base` was refused as "a YAML tag that would construct Python objects"."""
    (tmp_path / "m.yaml").write_text("SOLVER: &s\n  MAX_ITER: 9\n  BASE_LR: 0.01\nTEST:\n  AUG:\n    ENABLED: False\n"
                                     "_SOLVER_COPY: &t\n  <<: *s\n  MAX_ITER: 5\n")
    from detection.safe_yaml import load_yaml

    assert load_yaml(tmp_path / "m.yaml")["_SOLVER_COPY"] == {"MAX_ITER": 5, "BASE_LR": 0.01}
    (tmp_path / "n.yaml").write_text("base: &b\n  MAX_ITER: 9\nSOLVER:\n  <<: *b\n  BASE_LR: 0.5\n  BASE_LR: 0.6\n")
    with pytest.raises(ConfigFileError, match=r"n.yaml, line 6: duplicate key 'BASE_LR' \(first on line 5"):
        load_yaml(tmp_path / "n.yaml")  # the node's own keys are still checked
    (tmp_path / "o.yaml").write_text("SOLVER:\n  <<: 5\n")
    with pytest.raises(ConfigFileError, match=r"o.yaml, line 2: a merge key \(<<\) expected a mapping"):
        load_yaml(tmp_path / "o.yaml")  # plain YAML, not "a tag that would construct Python objects"


def test_dataset_voc_takes_exactly_three_values():
    args = train_net.build_parser().parse_args(
        ["--dataset-voc", "mine", "/data/voc", "trainval", "--voc-classes", "cat,dog", "OUTPUT_DIR", "out",
         "DATASETS.TRAIN", '("mine",)'])
    assert args.dataset_voc == [["mine", "/data/voc", "trainval"]] and args.voc_classes == "cat,dog"
    assert train_net.config_overrides(args.opts) == ["OUTPUT_DIR", "out", "DATASETS.TRAIN", '("mine",)']
    # the old form (classes as extra values) is an error that says what to do, not a silent default run
    old = train_net.build_parser().parse_args(["--dataset-voc", "mine", "/d", "trainval", "cat", "dog"])
    with pytest.raises(SystemExit, match="--voc-classes"):
        train_net.config_overrides(old.opts)


def test_flags_after_overrides_and_odd_overrides_say_what_to_do():
    with pytest.raises(SystemExit, match="--resume appears among the KEY VALUE config overrides"):
        train_net.config_overrides(["SOLVER.MAX_ITER", "10", "--resume"])
    with pytest.raises(SystemExit, match="odd number"):
        train_net.config_overrides(["SOLVER.MAX_ITER"])


def test_offline_weights_url_says_to_pass_a_local_file():
    with pytest.raises(FileNotFoundError, match=r"cannot download it .*pass a local file, or MODEL.WEIGHTS"):
        get_detection_cfg("configs/COCO-Detection/faster_rcnn_R_34_C4.yaml",
                          ["MODEL.WEIGHTS", "http://127.0.0.1:9/nowhere/R-34.pth"])


@pytest.mark.slow
def test_cli_errors_are_one_line_without_traceback(tmp_path):
    proc = run_tool("tools/train_det.py", "--config-file", tmp_path / "missing.yaml")
    assert proc.returncode == 2 and "error: FileNotFoundError: config file not found" in proc.stderr
    assert "Traceback" not in proc.stderr
    debug = run_tool("tools/train_det.py", "--config-file", tmp_path / "missing.yaml", "--debug")
    assert "Traceback" in debug.stderr
    cls = run_tool("tools/train_cls.py", "--eval-period", "0", "--output-dir", tmp_path / "c")
    assert cls.returncode == 2 and "eval_period must be a positive integer" in cls.stderr


def _alias_bomb(levels: int = 9) -> str:
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("kind", ["sequence_bomb", "mapping_bomb", "duplicate_key", "deep", "huge"])
def test_yaml_bombs_duplicates_depth_and_size_are_refused_at_once(tmp_path, kind):
    """Round three: a 531-byte alias bomb under MODEL.PIXEL_MEAN exhausted memory; `SOLVER:` twice silently dropped
    BASE_LR; 5000-deep nesting was a RecursionError; a 10 MB YAML parsed for minutes."""
    path = tmp_path / "c.yaml"
    if kind == "sequence_bomb":
        text = _alias_bomb() + "MODEL:\n  PIXEL_MEAN: *a8\n"  # 9^9 strings once expanded
        match = "expands to more than 100000 values"
    elif kind == "mapping_bomb":
        text = "x0: &x0 {a: 1, b: 1, c: 1, d: 1, e: 1, f: 1, g: 1, h: 1, i: 1}\n" + "".join(
            f"x{i}: &x{i} {{{', '.join(f'{k}: *x{i - 1}' for k in 'abcdefghi')}}}\n" for i in range(1, 9))
        match = "expands to more than 100000 values"
    elif kind == "duplicate_key":
        text = "SOLVER:\n  BASE_LR: 0.5\nMODEL:\n  DEVICE: cpu\nSOLVER:\n  MAX_ITER: 3\n"
        match = r"line 5: duplicate key 'SOLVER' \(first on line 1"
    elif kind == "deep":
        text = "A: " + "[" * 5000 + "]" * 5000 + "\n"
        match = "nested (too deeply|more than 64 levels)"
    else:
        text = "A: [" + ", ".join(["1"] * 600_000) + "]\n"
        match = r"MiB; a config is at most 1 MiB"
    path.write_text(text)
    with pytest.raises(ConfigFileError, match=match):
        get_detection_cfg(str(path), read_weights=False)
    if kind == "sequence_bomb":  # the report reads a run's config.yaml through the same loader
        run = tmp_path / "run"
        run.mkdir()
        (run / "config.yaml").write_text("MODEL:\n  DEVICE: cpu\n" + _alias_bomb() + "BOMB: *a8\n")
        assert load_run(run).status.startswith("unreadable config.yaml (")


@pytest.mark.parametrize("option,value", [("momentum", float("nan")), ("lr", float("inf")),
                                          ("weight_decay", float("nan"))])
def test_non_finite_solver_options_are_refused(option, value):
    with pytest.raises(ValueError, match=option):
        ClsConfig(**{option: value})


@pytest.mark.parametrize("opts,match", [
    (["MODEL.PIXEL_MEAN", "[1.0, 2.0]"], "MODEL.PIXEL_MEAN .*three finite numbers"),
    (["MODEL.PIXEL_STD", "[0.0, 1.0, 1.0]"], "MODEL.PIXEL_STD .*must be > 0"),
    (["MODEL.ROI_HEADS.NUM_CLASSES", "-1"], "MODEL.ROI_HEADS.NUM_CLASSES -1: an integer >= 1"),
    (["SOLVER.IMS_PER_BATCH", "0"], "SOLVER.IMS_PER_BATCH 0"),
    (["SOLVER.CHECKPOINT_PERIOD", "0"], "SOLVER.CHECKPOINT_PERIOD 0"),
    (["SOLVER.MAX_ITER", "-1"], "SOLVER.MAX_ITER -1"),
    (["MODEL.BACKBONES.WIDTH", "1e9"], "WIDTH 1000000000.0: a channel multiplier"),
    (["OUTPUT_DIR", ""], 'OUTPUT_DIR "": a run needs a directory'),
    (["EVAL.COCO_BACKEND", "cocoapi"], "EVAL.COCO_BACKEND 'cocoapi'"),
    (["MODEL.BACKBONES.OUT_FEATURES", '["res5"]'], "IN_FEATURES .* with MODEL.BACKBONES.OUT_FEATURES"),
    (["INPUT.MIN_SIZE_TEST", "-5"], r"INPUT.MIN_SIZE_TEST -5: an integer >= 0 \(0: no resizing\)"),
    (["SOLVER.STEPS", "(30, 20)"], r"SOLVER.STEPS \(30, 20\): increasing iteration numbers"),
    (["SEED", str(2 ** 40)], r"SEED 1099511627776: an integer below 2\*\*32"),
    (["SOLVER.BASE_LR", "-0.01"], r"SOLVER.BASE_LR -0.01: a finite number > 0"),
    (["SOLVER.BASE_LR", "1e400"], r"SOLVER.BASE_LR inf: a finite number > 0"),
    (["SOLVER.MOMENTUM", "1.5"], r"SOLVER.MOMENTUM 1.5: a number in \[0, 1\)"),
    (["SOLVER.WEIGHT_DECAY", "-1e-4"], r"SOLVER.WEIGHT_DECAY -0.0001: a finite number >= 0"),
    (["SOLVER.GAMMA", "0.0"], r"SOLVER.GAMMA 0.0: a finite number > 0"),
    (["SOLVER.WARMUP_FACTOR", "2.0"], r"SOLVER.WARMUP_FACTOR 2.0: a number in \[0, 1\]"),
    (["DATALOADER.SAMPLER_TRAIN", "RepeatFactorTrainingSampler"],
     r"DATALOADER.SAMPLER_TRAIN 'RepeatFactorTrainingSampler': only TrainingSampler"),
    (["MODEL.BACKBONES.GN_GROUPS", "8"], r"MODEL.BACKBONES.GN_GROUPS 8: only NORM \"GN\" has groups \(NORM is "
                                         r"'FrozenBN'\)"),
    (["MODEL.BACKBONES.GN_GROUPS", "0"], r"MODEL.BACKBONES.GN_GROUPS 0: an integer >= 1"),
    (["MODEL.BACKBONES.NAME", "plain34", "MODEL.BACKBONES.ZERO_INIT_RESIDUAL", "True"],
     r"MODEL.BACKBONES.ZERO_INIT_RESIDUAL True: plain34 has no residual branches"),
    (["MODEL.WEIGHTS", "", "MODEL.BACKBONES.ZERO_INIT_RESIDUAL", "True"],
     r"ZERO_INIT_RESIDUAL True: with NORM \"FrozenBN\" and no MODEL.WEIGHTS every residual branch would stay zero"),
    (["MODEL.BACKBONES.NORM", "GN", "MODEL.BACKBONES.GN_GROUPS", "24"],  # caught here, not when the net is built
     r"MODEL.BACKBONES.GN_GROUPS 24: a layer of resnet34 has 64 channels, which 24 groups do not split evenly at "
     r"WIDTH 1.0"),
    (["MODEL.BACKBONES.NORM", "GN", "MODEL.BACKBONES.WIDTH", "0.3"],  # the default 32 groups at an odd width
     r"MODEL.BACKBONES.GN_GROUPS 32: a layer of resnet34 has \d+ channels, which 32 groups do not split evenly at "
     r"WIDTH 0.3"),
])
def test_unusable_config_values_are_refused_naming_the_key(opts, match):
    """Round three's poor ones: each failed later with a bare KeyError / assertion or "diverged at iteration 0"."""
    from detection.config import check_run_config

    cfg = get_detection_cfg("configs/COCO-Detection/faster_rcnn_R_34_C4.yaml", opts, read_weights=False)
    with pytest.raises(ValueError, match=match):
        check_run_config(cfg)


def test_an_unimplemented_train_sampler_is_no_obstacle_to_evaluation():
    """--eval-only of a run whose config.yaml recorded another sampler: no training, nothing to refuse."""
    from detection.config import check_run_config

    cfg = get_detection_cfg("configs/COCO-Detection/faster_rcnn_R_34_C4.yaml",
                            ["DATALOADER.SAMPLER_TRAIN", "RepeatFactorTrainingSampler"], read_weights=False)
    check_run_config(cfg, training=False)
    with pytest.raises(ValueError, match="DATALOADER.SAMPLER_TRAIN"):
        check_run_config(cfg)


def test_a_home_relative_output_dir_is_expanded_not_made_in_the_working_directory(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    cfg = get_detection_cfg("configs/COCO-Detection/faster_rcnn_R_34_C4.yaml", ["OUTPUT_DIR", "~/runs/r34"],
                            read_weights=False)
    assert cfg.OUTPUT_DIR == str(tmp_path / "runs" / "r34")


def test_a_nan_learning_rate_in_a_config_file_is_refused_naming_the_key(tmp_path):
    """YAML's .nan passes Detectron2's type check: it trained and stopped with "training diverged at iteration 1"."""
    from detection.config import check_run_config

    (tmp_path / "nan.yaml").write_text("SOLVER:\n  BASE_LR: .nan\n  MOMENTUM: .nan\n")
    cfg = get_detection_cfg(["configs/COCO-Detection/faster_rcnn_R_34_C4.yaml", str(tmp_path / "nan.yaml")],
                            read_weights=False)
    with pytest.raises(ValueError, match=r"SOLVER.BASE_LR nan: a finite number > 0; SOLVER.MOMENTUM nan"):
        check_run_config(cfg)


def test_gn_groups_and_zero_init_residual_drive_the_backbone_the_detector_builds():
    """The two build keys reach the net: GN_GROUPS sets its groups (32 by default), ZERO_INIT_RESIDUAL zeroes
    the last norm of every residual branch."""
    import torch

    from detection.modeling.backbone import backbone_spec_from_cfg

    def net(*opts):
        cfg = get_detection_cfg("configs/COCO-Detection/faster_rcnn_R_34_C4.yaml",
                                ["MODEL.BACKBONES.NORM", "GN", "MODEL.BACKBONES.WIDTH", "0.25", *opts],
                                read_weights=False)
        return backbone_spec_from_cfg(cfg).build()

    assert net().arch["gn_groups"] == 32 and net("MODEL.BACKBONES.GN_GROUPS", "4").arch["gn_groups"] == 4
    zeroed = net("MODEL.BACKBONES.ZERO_INIT_RESIDUAL", "True")
    assert all(torch.count_nonzero(b.last_norm().weight) == 0 for b in zeroed.res3)
    assert all(torch.count_nonzero(b.last_norm().weight) > 0 for b in net().res3)
