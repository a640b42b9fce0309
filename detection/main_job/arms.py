"""The arms of the transfer comparison -- how a detection leg's backbone starts, which norm it trains, which stages
it freezes, how long it trains -- and the comparisons between them, each with the factor the report names.

The design is Rethinking ImageNet Pre-training's (He, Girshick & Dollar 2018): the primary comparison is
pretrained vs from scratch with the *same* trainable norm that works at the detection batch of 2 images -- GroupNorm
(Wu & He 2018; BN's batch statistics at 2 images are what that paper shows broken) -- pretrained with the norm it is
fine-tuned with, nothing frozen in either arm; both arms again at 3x the schedule, so that the initialisation is
compared at equal schedules at each (Rethinking's comparison: scratch 3x vs pretrained 1x would confound the two).
The paper's own setting (BN pretraining, BN frozen at its statistics, stem + res2 frozen) is a named secondary arm:
its comparison with the primary pretrained arm names the norm as the factor.

`ArmComparison.allowed` lists the config keys its two arms may differ in, `allowed_build` the options of the net
their legs start from (the pretraining net's, or the from-scratch leg's own: norm, width, stride placement, init
rules such as zero-init residual); `unfair_keys` finds any other key or option that differs, and the plan refuses
such a comparison before anything trains (naming them) unless the user overrides it, which the report then prints.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Arm", "ARMS", "ArmComparison", "ARM_COMPARISONS", "PRIMARY_ARM", "PAPER_ARM", "GN_ARMS", "arm_comparisons",
           "unfair_keys"]

@dataclass(frozen=True)
class Arm:
    """One arm: what its legs' configs set beyond the shared ones (configs/Embedded-Detection/<overlay>)."""

    name: str  # in group labels and stage directories (`<backbone>_<name>`)
    init: str  # "pretrained" / "scratch"
    overlay: str  # configs/Embedded-Detection/<overlay>, after smoke.yaml: the norm and what is frozen
    detect_norm: str  # MODEL.BACKBONES.NORM the overlay sets (tests check that it does)
    pretrain_norm: str | None  # the norm its pretraining net trains with (None: from scratch)
    schedule: int  # multiple of the plan's detection iterations
    role: str  # what the report calls it

    @property
    def pretrained(self) -> bool:
        return self.init == "pretrained"


ARMS = {a.name: a for a in (
    Arm("gn_pretrained", "pretrained", "gn.yaml", "GN", "GN", 1, "like-for-like: GN pretrained and fine-tuned"),
    Arm("gn_scratch", "scratch", "gn.yaml", "GN", None, 1, "like-for-like control: GN from scratch, same schedule"),
    Arm("gn_scratch_3x", "scratch", "gn.yaml", "GN", None, 3,
        "like-for-like control: GN from scratch, 3x the schedule"),
    Arm("frozenbn_pretrained", "pretrained", "pretrained.yaml", "FrozenBN", "BN", 1,
        "paper setting: BN pretrained, frozen in detection with stem + res2"),
    # last: the first pretrained arm of a plan (ARMS order) is its control's and leaderboard's, a 1x one
    Arm("gn_pretrained_3x", "pretrained", "gn.yaml", "GN", "GN", 3,
        "like-for-like: GN pretrained and fine-tuned, 3x the schedule"),
)}
PRIMARY_ARM = "gn_pretrained"
PAPER_ARM = "frozenbn_pretrained"
# The like-for-like design (GN pretrained vs GN from scratch, 1x and 3x): in no preset since it measured its
# initialisation at width 0.25 (CONVERGENCE.md, "The GN arms"); `--arms` runs it.
GN_ARMS = ("gn_pretrained", "gn_scratch", "gn_pretrained_3x", "gn_scratch_3x")


@dataclass(frozen=True)
class ArmComparison:
    """Arm a vs arm b of one backbone: the factor the report names, and the config keys that factor may change."""

    a: str
    b: str
    factor: str
    allowed: frozenset[str]
    # options of the backbone build (its `arch`, and init rules) the factor may change: the net each arm's legs
    # start from -- the pretraining net, or the leg's own from scratch -- must be built alike in every other one
    allowed_build: frozenset[str] = frozenset()


ARM_COMPARISONS = (
    ArmComparison("gn_pretrained", "gn_scratch", "the initialisation (pretrained vs from scratch)",
                  frozenset({"MODEL.WEIGHTS"})),
    ArmComparison("gn_pretrained_3x", "gn_scratch_3x",
                  "the initialisation at 3x the schedule (does scratch catch up when both train longer?)",
                  frozenset({"MODEL.WEIGHTS"})),
    ArmComparison("frozenbn_pretrained", "gn_pretrained",
                  "the norm: BN pretraining, frozen with stem + res2 in detection (paper) vs GN throughout",
                  frozenset({"MODEL.WEIGHTS", "MODEL.BACKBONES.NORM", "MODEL.BACKBONES.GN_GROUPS",
                             "MODEL.BACKBONES.FREEZE_AT"}),
                  frozenset({"norm", "gn_groups"})),
)


def arm_comparisons(arms: tuple[str, ...]) -> list[ArmComparison]:
    """The comparisons whose two arms are both in the plan."""
    return [c for c in ARM_COMPARISONS if c.a in arms and c.b in arms]


def unfair_keys(differences: dict[str, list], comparison: ArmComparison) -> list[str]:
    """Config keys whose values differ between the two arms' legs (report.groups.differing_keys) beyond what the
    comparison's factor may change."""
    return sorted(k for k in differences if k not in comparison.allowed)
