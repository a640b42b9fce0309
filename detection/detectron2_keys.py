"""Detectron2's own backbone keys (MODEL.BACKBONE.FREEZE_AT, MODEL.RESNETS.*) in a run this plugin builds.

Detectron2's builders read those keys; this plugin's builders read MODEL.BACKBONES.*, and a config holds both. Left
alone, Detectron2's keys were accepted and ignored (MODEL.BACKBONE.FREEZE_AT 5 froze nothing) and config.yaml
recorded their defaults beside what ran (MODEL.RESNETS.DEPTH 50 in a ResNet-101 run). The rule, for a config whose
MODEL.BACKBONE.NAME is one of PLUGIN_BUILDERS (ARCHITECTURE.md, "Detectron2's backbone keys"):

- **mirrored**: each Detectron2 key with a counterpart of ours is set to the value that runs, so config.yaml reads
  what ran (DEPTH 101, FREEZE_AT, NORM, STRIDE_IN_1X1, OUT_FEATURES, and the channel counts WIDTH sets);
- **drives**: a Detectron2 key the user set to something other than what runs sets ours when it was set later
  than ours -- merge order, as Detectron2 merges: a file after its _BASE_ files, the command line last -- or ours was
  not set; so `MODEL.RESNETS.DEPTH 50` on the command line of a ResNet-101 config builds a ResNet-50, and
  `MODEL.BACKBONE.FREEZE_AT 4` freezes stem..res4. Set earlier than ours, it yields (a Detectron2 R-50 base under
  our MODEL.BACKBONES.NAME resnet101). The channel counts do not drive: MODEL.BACKBONES.WIDTH sets them;
- **refused**: a set Detectron2 key that ours cannot follow -- both set at one time (one file, or both on the
  command line) to different values, a value no net of ours has, a channel count other than WIDTH's, a key
  without a counterpart (ResNeXt groups, dilation, deformable convs) -- one error naming both keys and values.

Mirroring rather than removing Detectron2's keys gives Detectron2's own consumers the values that run (its
Res5ROIHeads builds res5 from MODEL.RESNETS.*) and keeps one key of ours per concept for the code that builds the
net. Without the config's files (resolved(): a config made with get_cfg), a key counts as set where it differs from
its default.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from dataclasses import dataclass

from detectron2.config import CfgNode as CN

from backbones import list_models, model_info
from backbones.norm import BN_VARIANTS
from backbones.width import scale_channels

from .config_keys import add_backbones_config
from .safe_yaml import load_yaml

__all__ = ["PLUGIN_BUILDERS", "MIRRORED_KEYS", "builds_with_plugin", "net_norm", "mentions", "resolve_detectron2_keys",
           "mirror_detectron2_keys", "resolved"]

# MODEL.BACKBONE.NAME of the builders this plugin registers (modeling/backbone.py; a test checks the registry)
PLUGIN_BUILDERS = frozenset({"build_backbones_trunk", "build_backbones_fpn_backbone"})
_STRIDE_PLACEMENT_FAMILIES = ("resnet", "plain")  # the nets with a stride placement and ResNet's channel layout


def builds_with_plugin(cfg: CN) -> bool:
    """Whether the config's backbone is built by this plugin (else Detectron2's keys are Detectron2's alone)."""
    return "BACKBONES" in cfg.MODEL and cfg.MODEL.BACKBONE.NAME in PLUGIN_BUILDERS


def net_norm(name: str, norm: str) -> str:
    """The norm the net `name` is built with for MODEL.BACKBONES.NORM `norm`: a VGG without BN (vgg16, as the paper
    ran it) has none under a BN variant; GN is added to every conv (the pretraining net of a GN arm has it)."""
    info = model_info(name)
    return "" if info.family == "vgg" and not info.normalized and norm in BN_VARIANTS else norm


@dataclass(frozen=True)
class _Mirror:
    key: str  # Detectron2's, dotted
    ours: str | None  # the plugin's key it stands for, dotted; None: no counterpart (the nets have none)
    runs: Callable[[CN], object]  # what runs, in Detectron2's terms; None: the net has no such thing
    drive: Callable[[CN, object], object] | None = None  # ours for a set Detectron2 value; None: ours decides alone


def _get(cfg: CN, key: str):
    node = cfg
    for part in key.split("."):
        node = node[part]
    return node


def _put(cfg: CN, key: str, value) -> None:
    *parents, last = key.split(".")
    node = cfg
    for part in parents:
        node = node[part]
    node[last] = value


def _resnet_layout(cfg: CN) -> bool:
    return model_info(cfg.MODEL.BACKBONES.NAME).family in _STRIDE_PLACEMENT_FAMILIES


def _depth_net(cfg: CN, depth) -> str:
    """The registered net of MODEL.BACKBONES.NAME's family (and norm-ness: vgg16 / vgg16_bn) at `depth`."""
    info = model_info(cfg.MODEL.BACKBONES.NAME)
    for name in list_models():
        other = model_info(name)
        if (other.family, other.normalized, other.depth) == (info.family, info.normalized, depth):
            return name
    depths = sorted({model_info(n).depth for n in list_models() if model_info(n).family == info.family})
    raise ValueError(f"no {info.family} net of depth {depth!r} (depths: {depths})")


def _channels(full: Callable[[CN], int]) -> Callable[[CN], int | None]:
    """A channel count of the ResNet layout at MODEL.BACKBONES.WIDTH (backbones.width's rounding)."""
    return lambda cfg: scale_channels(full(cfg), cfg.MODEL.BACKBONES.WIDTH) if _resnet_layout(cfg) else None


def _constant(value) -> Callable[[CN], object]:
    return lambda cfg: value


# Detectron2's key -> ours. A bottleneck from depth 50, as Detectron2's build_resnet_backbone decides it.
_MIRRORS = (
    _Mirror("MODEL.BACKBONE.FREEZE_AT", "MODEL.BACKBONES.FREEZE_AT", lambda c: c.MODEL.BACKBONES.FREEZE_AT,
            lambda c, v: v),
    _Mirror("MODEL.RESNETS.DEPTH", "MODEL.BACKBONES.NAME", lambda c: model_info(c.MODEL.BACKBONES.NAME).depth,
            _depth_net),
    _Mirror("MODEL.RESNETS.NORM", "MODEL.BACKBONES.NORM",
            lambda c: net_norm(c.MODEL.BACKBONES.NAME, c.MODEL.BACKBONES.NORM), lambda c, v: v),
    _Mirror("MODEL.RESNETS.STRIDE_IN_1X1", "MODEL.BACKBONES.STRIDE_IN_1X1",
            lambda c: c.MODEL.BACKBONES.STRIDE_IN_1X1 if _resnet_layout(c) else None, lambda c, v: v),
    _Mirror("MODEL.RESNETS.OUT_FEATURES", "MODEL.BACKBONES.OUT_FEATURES",
            lambda c: list(c.MODEL.BACKBONES.OUT_FEATURES), lambda c, v: list(v)),
    _Mirror("MODEL.RESNETS.STEM_OUT_CHANNELS", "MODEL.BACKBONES.WIDTH", _channels(lambda c: 64)),
    _Mirror("MODEL.RESNETS.WIDTH_PER_GROUP", "MODEL.BACKBONES.WIDTH", _channels(lambda c: 64)),
    _Mirror("MODEL.RESNETS.RES2_OUT_CHANNELS", "MODEL.BACKBONES.WIDTH",
            _channels(lambda c: 256 if model_info(c.MODEL.BACKBONES.NAME).depth >= 50 else 64)),
    # no counterpart: the backbones nets have no grouped, dilated or deformable convs
    _Mirror("MODEL.RESNETS.NUM_GROUPS", None, _constant(1)),
    _Mirror("MODEL.RESNETS.RES5_DILATION", None, _constant(1)),
    _Mirror("MODEL.RESNETS.DEFORM_ON_PER_STAGE", None, _constant([False] * 4)),
    _Mirror("MODEL.RESNETS.DEFORM_MODULATED", None, _constant(False)),
    _Mirror("MODEL.RESNETS.DEFORM_NUM_GROUPS", None, _constant(1)),
)
# the keys that repeat one of ours (a config diff names ours alone)
MIRRORED_KEYS = frozenset(m.key for m in _MIRRORS)


@functools.cache
def _defaults() -> CN:
    from detectron2.config import get_cfg

    return add_backbones_config(get_cfg())


def _same(a, b) -> bool:
    return (list(a) if isinstance(a, (list, tuple)) else a) == (list(b) if isinstance(b, (list, tuple)) else b)


def mentions(config_files: list[str], opts: list[str]) -> dict[str, int]:
    """Dotted key -> when it was last set, in merge order: each file after its _BASE_ files, the command line last
    (its KEY VALUE pairs all at one time). In a full dump of a config (a run's config.yaml: it lists every
    MODEL.RESNETS key) a mirrored key at Detectron2's default sets nothing: before they were mirrored, a run
    recorded Detectron2's defaults beside what ran; any other value there (a mirrored one, or an edit) is set at the
    dump's time like a key of any file. The files are read as get_detection_cfg checked them."""
    out: dict[str, int] = {}
    time = 0

    def visit(path: str) -> None:
        nonlocal time
        data = load_yaml(path) or {}
        bases = data.get("_BASE_", [])
        for base in [bases] if isinstance(bases, str) else bases:
            base = os.path.expanduser(base)
            visit(base if os.path.isabs(base) else os.path.join(os.path.dirname(path), base))
        values = dict(_flat_items(data))
        keys = set(values)
        if {f"MODEL.RESNETS.{k}" for k in _defaults().MODEL.RESNETS} <= keys:
            keys -= {k for k in MIRRORED_KEYS & keys if _same(values[k], _get(_defaults(), k))}
        time += 1
        out.update(dict.fromkeys(keys, time))

    for path in config_files:
        visit(path)
    out.update(dict.fromkeys(opts[::2], time + 1))
    return out


def _flat_items(data: dict, prefix: str = ""):
    for k, v in data.items():
        if k == "_BASE_" and not prefix:
            continue
        if isinstance(v, dict):
            yield from _flat_items(v, f"{prefix}{k}.")
        else:
            yield f"{prefix}{k}", v


def resolve_detectron2_keys(cfg: CN, given: dict[str, int] | None = None) -> dict[str, tuple]:
    """Apply the module's rule to a config this plugin builds from (not frozen). `given`: when each key was set
    (mentions(); a set Detectron2 key that disagrees with what runs drives ours when set later than ours, yields
    when set earlier, and is refused when set at the same time -- one file, or both on the command line). None (a
    config whose files are unknown): a key counts as set when it differs from its default, at one time for all.
    Then every Detectron2 key is mirrored. Returns {key: (old, new)} of ours that a Detectron2 key set; ValueError
    naming both keys and their values for what is refused. A config of Detectron2's own builders is left as it is."""
    if not builds_with_plugin(cfg) or cfg.MODEL.BACKBONES.NAME not in list_models():
        return {}  # an unknown NAME is named where the net is built

    def when(key: str) -> int | None:
        if given is not None:
            return given.get(key)
        return None if _same(_get(cfg, key), _get(_defaults(), key)) else 0

    driven, problems = {}, []
    for m in _MIRRORS:
        theirs, runs = _get(cfg, m.key), m.runs(cfg)
        set_at = when(m.key)
        if _same(theirs, runs) or set_at is None:
            continue  # agrees, or not set: mirrored below
        ours_at = None if m.ours is None else when(m.ours)
        if ours_at is not None and ours_at > set_at and runs is not None:
            continue  # ours, set later, overlays it (a file over its _BASE_): mirrored below
        if why := _refusal(cfg, m, theirs, runs, tie=ours_at == set_at):
            problems.append(why)
            continue
        ours = _get(cfg, m.ours)
        try:
            value = m.drive(cfg, theirs)
        except ValueError as err:
            problems.append(f"{m.key} {theirs!r}: {err}")
            continue
        _put(cfg, m.ours, value)
        if not _same(m.runs(cfg), theirs):  # ours took it, and the net still has something else (vgg16: no norm)
            _put(cfg, m.ours, ours)
            problems.append(f"{m.key} {theirs!r}: {cfg.MODEL.BACKBONES.NAME} (MODEL.BACKBONES.NAME) would still "
                            f"run {m.runs(cfg)!r} with {m.ours} {value!r}")
            continue
        driven[m.ours] = (ours, value)
    if problems:
        raise ValueError("config: " + "; ".join(problems))
    mirror_detectron2_keys(cfg)
    return driven


def _refusal(cfg: CN, m: _Mirror, theirs, runs, *, tie: bool) -> str | None:
    """Why a set Detectron2 key cannot drive ours, or None."""
    net = f"{cfg.MODEL.BACKBONES.NAME} (MODEL.BACKBONES.NAME)"
    if m.ours is None:
        return f"{m.key} {theirs!r}: {net} has none; {_get(_defaults(), m.key)!r} is what runs"
    ours = _get(cfg, m.ours)
    if runs is None:
        return f"{m.key} {theirs!r}: {net} has no such setting"
    if m.drive is None:
        return f"{m.key} {theirs!r} and {m.ours} {ours!r}: the net built has {runs!r}; set {m.ours}"
    if tie:
        return f"{m.key} {theirs!r} and {m.ours} {ours!r} set one thing to different values: set one, or both alike"
    return None


def mirror_detectron2_keys(cfg: CN) -> None:
    """Set each Detectron2 key to what runs (Detectron2's default where the net has no such thing), after ours
    changed (the weights' conventions set STRIDE_IN_1X1)."""
    if not builds_with_plugin(cfg) or cfg.MODEL.BACKBONES.NAME not in list_models():
        return
    for m in _MIRRORS:
        runs = m.runs(cfg)
        _put(cfg, m.key, _get(_defaults(), m.key) if runs is None else runs)


def resolved(cfg: CN) -> CN:
    """`cfg` resolved by the rule: itself when nothing changes, else a resolved copy (a config built without
    detection.get_detection_cfg, e.g. get_cfg() + add_backbones_config + merge_from_file, frozen or not)."""
    if not builds_with_plugin(cfg):
        return cfg
    copy = cfg.clone()
    copy.defrost()
    resolve_detectron2_keys(copy)
    return cfg if copy == cfg else copy
