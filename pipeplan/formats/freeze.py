"""The freeze schedule as a plan echoes it: where it came from and the frozen leading layers
per epoch. Building and reading schedules: `pipeplan.freeze`."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, ValidationInfo, model_validator

from pipeplan.formats.base import MAX_EPOCHS, NonNegInt, PosInt, Strict, Text

# The least α: below it float rounding, not α, decides what freezes (1 − 5e-324 is 1.0, so
# that α froze nothing in any epoch; one of 1e-12 froze a block once the rounded bound of
# `alpha_frozen_blocks` passed 1e-9).
MIN_ALPHA = 1e-6


def check_alpha(alpha: float) -> float:
    """`check_alpha(0.3)` → 0.3; a ValueError unless MIN_ALPHA ≤ α < 1 (one message for the
    flag, the run's record and the plan's)."""
    if not MIN_ALPHA <= alpha < 1.0:
        raise ValueError(
            f"must be strictly between 0 and 1 and at least {MIN_ALPHA:g} (got {alpha}): "
            "below that float rounding, not α, decides what freezes"
        )
    return alpha


# The schema states the range the validator checks (its message is the one that explains it).
Alpha = Annotated[
    float,
    AfterValidator(check_alpha),
    Field(json_schema_extra={"minimum": MIN_ALPHA, "exclusiveMaximum": 1.0}),
]


def alpha_frozen_blocks(alpha: float, epoch: int, num_blocks: int) -> int:
    """⌈L·(1−(1−α)^T)⌉ frozen blocks at epoch T, never more than L."""
    # Round before the ceiling so that float noise (e.g. 2.0000000000000004) does not add a block.
    bound = round(num_blocks * (1.0 - (1.0 - alpha) ** epoch), 9)
    return min(num_blocks, math.ceil(bound))


def blocks_to_frozen_layers(frozen_blocks: int) -> int:
    return 0 if frozen_blocks == 0 else frozen_blocks + 1


def alpha_frozen_layers(alpha: float, epochs: int, num_blocks: int) -> list[int]:
    """The α bound's frozen layers per epoch: `alpha_frozen_layers(0.3, 4, 12)` → [0, 5, 8, 9]
    (`pipeplan.freeze.alpha_schedule` builds its schedule from it; a plan is checked by it)."""
    return [
        blocks_to_frozen_layers(alpha_frozen_blocks(alpha, t, num_blocks)) for t in range(epochs)
    ]


# The gradient criterion compares the norms of the last two decisions: it cannot freeze
# anything before it has this many (`pipeplan.freeze.gradient_freeze_point`).
GRADIENT_MEASUREMENTS = 2


def gradient_reach(frozen_layers: int, num_blocks: int) -> int:
    """The most one gradient decision can freeze: `gradient_reach(0, 8)` → 4.

    Its candidates are the c active layers below the head, frozen_layers..num_blocks; at most
    ⌊c/2⌋ of them lie below the upper median of their rates, so the first candidate at or
    above it, where freezing stops, is at most ⌊c/2⌋ past the first. Half of what is still
    active per decision, and never the last block (c = 1 stops at once)."""
    candidates = max(0, num_blocks + 1 - frozen_layers)
    return frozen_layers + candidates // 2


def autofreeze_frozen_layers(alpha: float, epochs: int, num_blocks: int) -> list[int]:
    """`--freeze auto` at its fastest: `autofreeze_frozen_layers(0.3, 10, 8)` →
    [0, 0, 4, 6, 7, 8, 8, 8, 8, 8] (`pipeplan.freeze.autofreeze_earliest` builds its schedule
    from it; a trajectory file is checked by it).

    AutoFreeze decides at each epoch end (the default, no --freeze-every); the decision for
    epoch t is its t-th, so the gradient criterion has t measurements and cannot freeze
    before epoch GRADIENT_MEASUREMENTS; from then on each decision freezes at most
    `gradient_reach` and never beyond the α bound. A real run freezes no earlier than this,
    and may freeze later still, or never."""
    bound = alpha_frozen_layers(alpha, epochs, num_blocks)
    per_epoch, frozen = [], 0
    for epoch in range(epochs):
        if epoch >= GRADIENT_MEASUREMENTS:
            frozen = max(frozen, min(bound[epoch], gradient_reach(frozen, num_blocks)))
        per_epoch.append(frozen)
    return per_epoch


# What each source that is a rule freezes, per epoch, given (alpha, epochs, num_blocks); list
# and trajectory are anything that only grows.
SOURCE_MAKES: dict[str, Callable[[Any, int, int], list[int]]] = {
    "none": lambda _alpha, epochs, _blocks: [0] * epochs,
    "alpha": alpha_frozen_layers,
    "autofreeze": autofreeze_frozen_layers,
}


Source = Literal["none", "alpha", "list", "trajectory", "autofreeze"]


def check_alpha_source(source: str | None, alpha: float | None) -> None:
    """alpha is recorded by the sources it made (the α bound, and AutoFreeze's earliest under
    it), and by them alone: an α beside a list would say what did not decide it.
    `check_alpha_source("list", 0.3)` → ValueError."""
    if (alpha is not None) != (source in ("alpha", "autofreeze")):
        has = "has an alpha" if alpha is not None else "has no alpha"
        raise ValueError(f"source {source!r} {has}; alpha and autofreeze record theirs")


class FreezeSchedule(Strict):
    """The schedule as echoed in a plan: where it came from and the per-epoch result."""

    source: Source = Field(
        description="none, alpha (the α bound), list, trajectory (a run's, or one so far and "
        "a continuation), or autofreeze: the earliest `--freeze auto` can freeze (§4.14)."
    )
    alpha: Alpha | None = None
    path: Text | None = None
    frozen_layers: list[NonNegInt] = Field(description="Frozen leading layers per epoch.")

    @model_validator(mode="after")
    def _alpha_is_its_sources(self) -> FreezeSchedule:
        check_alpha_source(self.source, self.alpha)
        return self


class TrajectoryFile(Strict):
    """A freeze trajectory file given as an object (`--freeze-schedule FILE.json`): its
    frozen_layers, and the rest of a `FreezeSchedule` when it is one written out (the demo's
    freeze-trajectory.json). Like every format, an unknown key is refused, not ignored; the
    others mean what they mean in a `FreezeSchedule`, and are held to it: alpha in range and
    recorded by sources alpha and autofreeze alone, and frozen_layers what source (and alpha)
    make for the model's blocks, given as the context:

        TrajectoryFile.model_validate(data, strict=True, context={"num_blocks": 12})

    `pipeplan.freeze.trajectory_schedule` reads it; the plan it makes records its own source
    (trajectory) and the file's path, whatever made the file.
    """

    source: Source | None = None
    alpha: Alpha | None = None
    path: Text | None = None
    # Each count is checked by `pipeplan.freeze.list_schedule`, naming the epoch; no more of
    # them than a run has epochs, before the rules above make as many.
    frozen_layers: list[Any] = Field(max_length=MAX_EPOCHS)

    @model_validator(mode="after")
    def _made_by_its_source(self, info: ValidationInfo) -> TrajectoryFile:
        """source and alpha say what made frozen_layers. Accepted unchecked and then dropped,
        they said what was never so (the eighteenth round: alpha 1.5; source none beside
        frozen layers; an alpha that freezes others): held to what they say, or refused."""
        if self.source is None and self.alpha is not None:
            raise ValueError(
                f"alpha {self.alpha:g} without a source: only sources alpha and autofreeze "
                "record one"
            )
        if self.source is not None:
            check_alpha_source(self.source, self.alpha)
        counts = self.frozen_layers
        if self.source not in SOURCE_MAKES or not all(_is_count(k) for k in counts):
            return self  # any counts, each checked by list_schedule naming its epoch
        why = not_made_by_source(self.source, self.alpha, counts, _num_blocks(info))
        if why:
            raise ValueError(f"{why}; give source 'trajectory' for counts of your own")
        return self


def not_made_by_source(
    source: str | None, alpha: float | None, counts: list[int], num_blocks: int
) -> str | None:
    """Why `counts` (frozen layers per epoch) are not what `source` (and alpha) freeze for a
    model of `num_blocks` blocks, naming the first epoch they differ; None when they are, or
    when the source is no rule (list, trajectory: anything that only grows).

        not_made_by_source("none", None, [0, 3], 4)   # "frozen_layers has 3 at epoch 1, …"
    """
    rule = SOURCE_MAKES.get(source or "")
    if rule is None:
        return None
    made = rule(alpha, len(counts), num_blocks)
    for epoch, (given, frozen) in enumerate(zip(counts, made, strict=True)):
        if given != frozen:  # the first epoch it differs: one short line for any length
            said = "" if alpha is None else f" (alpha {alpha:g})"
            return (
                f"frozen_layers has {given} at epoch {epoch}, but source {source!r}{said} "
                f"freezes {frozen} there for this model's {num_blocks} blocks"
            )
    return None


def _num_blocks(info: ValidationInfo) -> int:
    """The model's blocks, which the α bound depends on: the caller's context."""
    if not isinstance(info.context, dict) or "num_blocks" not in info.context:
        raise TypeError("TrajectoryFile is validated with context={'num_blocks': N}")
    return info.context["num_blocks"]


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class FreezePhase(Strict):
    start_epoch: NonNegInt
    epochs: PosInt
    frozen_layers: NonNegInt
