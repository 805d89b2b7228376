"""The plan format (`pipeplan plan --out`, `pipeplan run --plan`) and the preview it is part of
(`pipeplan preview --json`). A phase plan composes the phase's `Layout` with the planner's
predictions for it (docs/architecture.md §3, §4)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from pipeplan.formats.base import NonNegFloat, NonNegInt, PosInt, Strict
from pipeplan.formats.cluster import Cluster
from pipeplan.formats.freeze import FreezeSchedule
from pipeplan.formats.layout import EpochShape, Layout


class StagePlan(Strict):
    """The planner's prediction for one stage of a layout."""

    first_layer: NonNegInt
    stop_layer: PosInt = Field(description="Exclusive.")
    fwd_s: NonNegFloat = Field(description="Forward per micro-batch.")
    bwd_s: NonNegFloat = Field(description="Backward per micro-batch.")
    send_fwd_s: NonNegFloat
    send_bwd_s: NonNegFloat
    allreduce_s: NonNegFloat
    optimizer_s: NonNegFloat
    memory_bytes: NonNegInt


def check_stages(layout: Layout, stages: list[StagePlan] | None) -> None:
    """Predicted stages must be the layout's stages, in order (ValueError otherwise)."""
    if stages is None:
        return
    if len(stages) != layout.num_stages:
        raise ValueError(f"{len(stages)} predicted stages for a {layout.num_stages}-stage layout")
    for s, stage in enumerate(stages):
        if (stage.first_layer, stage.stop_layer) != (
            layout.boundaries[s],
            layout.boundaries[s + 1],
        ):
            raise ValueError(f"predicted stage {s} does not match the layout's boundaries")


class ScoredLayout(Strict):
    """A layout the solver simulated, with its step time."""

    layout: Layout
    step_s: NonNegFloat


class PhasePlan(Strict):
    start_epoch: NonNegInt
    epochs: PosInt
    layout: Layout
    step_s: NonNegFloat = Field(description="Predicted step (cached steady state if cached).")
    epoch_s: NonNegFloat = Field(description="Predicted epoch (cached steady state if cached).")
    first_epoch_s: NonNegFloat = Field(description="First epoch (fills the cache if cached).")
    transition_s: NonNegFloat = Field(description="Re-partitioning before the phase starts.")
    total_s: NonNegFloat = Field(description="transition + all epochs of the phase.")
    stages: list[StagePlan]
    runner_ups: list[ScoredLayout]

    @model_validator(mode="after")
    def _stages_match_layout(self) -> PhasePlan:
        check_stages(self.layout, self.stages)
        return self


class ProfileIdentity(Strict):
    model: str
    device: str
    sha256: str = Field(description="sha256 of the profile's canonical JSON (formats.dumps).")


class PlanInputs(Strict):
    profile: ProfileIdentity
    cluster: Cluster
    global_batch: PosInt
    samples: PosInt
    epochs: PosInt
    steps_per_epoch: PosInt
    freeze: FreezeSchedule
    cache: bool
    pinned: dict[str, int | str | list[int]]


class Plan(Strict):
    schema_version: Literal[2] = 2
    inputs: PlanInputs
    phases: list[PhasePlan]
    predicted_total_s: NonNegFloat

    @model_validator(mode="after")
    def _phases_fit_inputs(self) -> Plan:
        devices = self.inputs.cluster.nodes * self.inputs.cluster.devices_per_node
        for i, phase in enumerate(self.phases):
            if phase.layout.global_batch != self.inputs.global_batch:
                raise ValueError(
                    f"phase {i}: its layout's global batch {phase.layout.global_batch} is not "
                    f"the plan's {self.inputs.global_batch}"
                )
            ranks = [r for row in phase.layout.rank_map for r in row]
            if any(r >= devices for r in ranks):
                raise ValueError(f"phase {i}: its rank map uses ranks beyond {devices} devices")
        # The phases tile the training: in order, each starting where the last one ended.
        start = 0
        for i, phase in enumerate(self.phases):
            if phase.start_epoch != start:
                raise ValueError(f"phase {i} starts at epoch {phase.start_epoch}, not {start}")
            start += phase.epochs
        if start != self.inputs.epochs:
            raise ValueError(f"the phases cover {start} epochs, the plan {self.inputs.epochs}")
        return self


class EpochRow(EpochShape):
    epoch: NonNegInt
    epoch_s: NonNegFloat
    samples_per_s: NonNegFloat


class StaticPlanSummary(Strict):
    layout: Layout
    step_s: NonNegFloat
    epoch_s: NonNegFloat
    total_s: NonNegFloat


class AblationRow(Strict):
    name: str
    total_s: NonNegFloat
    speedup: NonNegFloat = Field(description="Baseline total / this total.")


class FreezeCase(Strict):
    """One freeze schedule a preview prices end to end, and what it assumes."""

    case: Literal["given", "best", "later"] = Field(
        description="given: the one schedule asked for; best and later: the band of "
        "`--freeze auto` (the α bound, and the earliest AutoFreeze's gradient criterion allows)."
    )
    assumes: str = Field(description="The schedule in words.")
    freeze: FreezeSchedule
    total_s: NonNegFloat
    predicted_speedup: NonNegFloat = Field(description="Baseline total / this total.")


class Preview(Strict):
    model: str
    devices: PosInt
    freeze: Literal["auto", "alpha", "none", "list", "trajectory", "autofreeze"] = Field(
        description="The freezing previewed: auto is a band (best and later case), the others "
        "one schedule."
    )
    cases: list[FreezeCase] = Field(
        description="The schedules priced, best first; epochs, ablation and plan are the first's."
    )
    baseline: StaticPlanSummary
    epochs: list[EpochRow]
    total_s: NonNegFloat
    predicted_speedup: NonNegFloat = Field(
        description="The first case's: for auto the best case, the α bound."
    )
    ablation: list[AblationRow]
    plan: Plan
