"""The freeze schedule as a plan echoes it: where it came from and the frozen leading layers
per epoch. Building and reading schedules: `pipeplan.freeze`."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from pipeplan.formats.base import NonNegInt, PosInt, Strict, Text


class FreezeSchedule(Strict):
    """The schedule as echoed in a plan: where it came from and the per-epoch result."""

    source: Literal["none", "alpha", "list", "trajectory", "autofreeze"] = Field(
        description="none, alpha (the α bound), list, trajectory (a run's, or one so far and "
        "a continuation), or autofreeze: the earliest `--freeze auto` can freeze (§4.14)."
    )
    alpha: float | None = None
    path: Text | None = None
    frozen_layers: list[NonNegInt] = Field(description="Frozen leading layers per epoch.")


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
