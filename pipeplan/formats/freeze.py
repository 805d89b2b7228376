"""The freeze schedule as a plan echoes it: where it came from and the frozen leading layers
per epoch. Building and reading schedules: `pipeplan.freeze`."""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, model_validator

from pipeplan.formats.base import NonNegInt, PosInt, Strict, Text

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


class FreezeSchedule(Strict):
    """The schedule as echoed in a plan: where it came from and the per-epoch result."""

    source: Literal["none", "alpha", "list", "trajectory", "autofreeze"] = Field(
        description="none, alpha (the α bound), list, trajectory (a run's, or one so far and "
        "a continuation), or autofreeze: the earliest `--freeze auto` can freeze (§4.14)."
    )
    alpha: Alpha | None = None
    path: Text | None = None
    frozen_layers: list[NonNegInt] = Field(description="Frozen leading layers per epoch.")

    @model_validator(mode="after")
    def _alpha_is_its_sources(self) -> FreezeSchedule:
        """alpha is recorded by the sources it made (the α bound, and AutoFreeze's earliest
        under it), and by them alone: an α beside a list would say what did not decide it."""
        if (self.alpha is not None) != (self.source in ("alpha", "autofreeze")):
            has = "has an alpha" if self.alpha is not None else "has no alpha"
            raise ValueError(f"source {self.source!r} {has}; alpha and autofreeze record theirs")
        return self


class TrajectoryFile(Strict):
    """A freeze trajectory file given as an object (`--freeze-schedule FILE.json`): its
    frozen_layers, and the rest of a `FreezeSchedule` when it is one written out (the demo's
    freeze-trajectory.json). Like every format, an unknown key is refused, not ignored.

        TrajectoryFile.model_validate({"frozen_layers": [0, 0, 3]}, strict=True)
    """

    source: Literal["none", "alpha", "list", "trajectory", "autofreeze"] | None = None
    alpha: float | None = None
    path: Text | None = None
    # Each count is checked by `pipeplan.freeze.list_schedule`, naming the epoch.
    frozen_layers: list[Any]


class FreezePhase(Strict):
    start_epoch: NonNegInt
    epochs: PosInt
    frozen_layers: NonNegInt
