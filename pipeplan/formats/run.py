"""Run records: what `pipeplan run` writes under runs/NAME/, read back by report and calibrate.

- `run.json` — `RunConfig`: everything the run was started with.
- `run.jsonl` — one JSON object per line: `PhaseRecord` when a layout starts (the layout, the
  prediction and what priced it), `StepRecord` per optimizer step (with every rank's timings),
  `EpochRecord` per epoch.
- `summary.json` — `RunSummary`: measured vs predicted step time per phase, accuracy, totals.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, TypeAdapter, ValidationError, model_validator

from pipeplan.errors import InputFileError, PipeplanError
from pipeplan.formats.base import (
    MAX_COUNT,
    NonNegFloat,
    NonNegInt,
    PosInt,
    Seconds,
    Strict,
    check_json,
    first_error,
)
from pipeplan.formats.cluster import Cluster
from pipeplan.formats.layout import Layout
from pipeplan.formats.plan import StagePlan, check_stages

FreezeMode = Literal["auto", "alpha", "list", "none"]


class RunConfig(Strict):
    schema_version: Literal[1] = 1
    name: str
    model: str
    data: str
    nproc: PosInt
    device: Literal["cpu", "cuda"] = "cpu"
    global_batch: PosInt
    epochs: PosInt
    max_steps_per_epoch: PosInt | None = Field(None, description="Cap for quick runs.")
    lr: Annotated[float, Field(gt=0)] = 1e-3
    weight_decay: NonNegFloat = 0.01
    warmup_steps: NonNegInt = 0
    freeze: FreezeMode = "auto"
    alpha: Annotated[float, Field(gt=0, lt=1)] = 0.3
    freeze_list: list[NonNegInt] | None = Field(
        None, description="Frozen layers per epoch (freeze=list)."
    )
    freeze_every: PosInt | None = Field(None, description="Decide every N steps, not per epoch.")
    checkpoint_every: PosInt | None = Field(
        None, description="Also checkpoint every N steps (transitions and the end always are)."
    )
    cache: bool = True
    cache_budget_bytes: NonNegInt = 1 << 30
    seed: int = 0
    dropout: NonNegFloat | None = None
    device_memory_bytes: PosInt | None = None
    profile: str | None = None
    plan: str | None = Field(None, description="Plan file the run started from, if any.")


Count0 = Annotated[int, Field(ge=0, lt=MAX_COUNT)]  # a rank, stage or replica index


class RankTimes(Strict):
    rank: Count0
    stage: Count0 | None
    replica: Count0 | None
    step_s: Seconds
    fwd_s: Seconds
    bwd_s: Seconds
    wait_s: Seconds
    allreduce_s: Seconds
    optimizer_s: Seconds
    input_s: Seconds = Field(description="Reading the batch (and the cache) on stage 0.")


class Pricing(Strict):
    """What priced a phase, so that it can be re-planned from the run directory alone."""

    source: Literal["solver", "plan"] = Field(
        description="Solved during the run, or taken from the --plan file."
    )
    profile: str = Field(
        description="The profile the cost model used, a file in the run directory: "
        "profile.json as given, or calibration-N.json when fitted during the run."
    )
    profile_sha256: str = Field(description="sha256 of that profile's canonical JSON.")
    calibration: Literal["none", "profile", "online"] = Field(
        description="The calibration applied: none, the one the profile came with, or one "
        "fitted during this run (then `profile` names the file it was written to)."
    )
    cluster: Cluster


class PhaseDecision(Strict):
    """A phase as rank 0 decided it: the layout, what the planner predicted for it, and what
    priced the prediction. Broadcast to every rank and recorded as a `PhaseRecord`."""

    layout: Layout
    predicted_step_s: Seconds | None
    predicted_stages: list[StagePlan] | None = Field(
        None, description="The planner's per-stage times (per micro-batch) for this layout."
    )
    pricing: Pricing

    @model_validator(mode="after")
    def _stages_match_layout(self) -> PhaseDecision:
        check_stages(self.layout, self.predicted_stages)
        return self


class PhaseRecord(PhaseDecision):
    kind: Literal["phase"] = "phase"
    phase: NonNegInt
    start_step: NonNegInt
    start_epoch: NonNegInt
    transition_s: Seconds = Field(description="Measured time to move state and rebuild.")


class StepRecord(Strict):
    kind: Literal["step"] = "step"
    step: NonNegInt
    epoch: NonNegInt
    phase: NonNegInt
    step_s: Seconds = Field(description="Wall time of the step on the slowest rank.")
    loss: float | None
    samples_per_s: NonNegFloat
    cache_hits: NonNegInt = 0
    ranks: list[RankTimes]


class EpochRecord(Strict):
    kind: Literal["epoch"] = "epoch"
    epoch: NonNegInt
    phase: NonNegInt
    frozen_layers: NonNegInt
    steps: NonNegInt
    epoch_s: Seconds = Field(description="Training time of the epoch (evaluation excluded).")
    eval_s: Seconds = 0.0
    train_loss: float | None
    eval_accuracy: Annotated[float, Field(ge=0, le=1)] | None
    samples_per_s: NonNegFloat
    grad_norms: dict[str, NonNegFloat] = Field(
        default_factory=dict, description="Mean gradient norm per active layer this epoch."
    )


Record = Annotated[PhaseRecord | StepRecord | EpochRecord, Field(discriminator="kind")]
_RECORD = TypeAdapter(Record)


class PhaseSummary(Strict):
    phase: NonNegInt
    layout: Layout
    steps: NonNegInt
    predicted_step_s: Seconds | None
    measured_step_s: NonNegFloat | None = Field(
        description="Median of steady steps: the first steps of the phase and, when cached, the "
        "steps that still fill the cache are excluded."
    )
    measured_spread_s: NonNegFloat | None
    error: float | None = Field(description="(predicted − measured) / measured.")


class RunSummary(Strict):
    schema_version: Literal[2] = 2
    name: str
    total_s: NonNegFloat
    steps: NonNegInt
    final_eval_accuracy: float | None
    phases: list[PhaseSummary]


# The first steps of a phase build buffers, shapes and process-group state: not measured.
WARMUP_STEPS_PER_PHASE = 2


def steady_step(step: StepRecord, phase: PhaseRecord, config: RunConfig) -> bool:
    """A cached phase's steps that still fill the cache (they compute the frozen prefix) are
    not the steady state the phase was planned for."""
    return not phase.layout.cached or step.cache_hits >= config.global_batch


def steady_steps(
    steps: list[StepRecord], phase: PhaseRecord, config: RunConfig
) -> list[StepRecord]:
    """The steps medians are taken over: without cache-filling steps, then without the
    warm-up steps unless no others are left."""
    settled = [s for s in steps if steady_step(s, phase, config)]
    return settled[WARMUP_STEPS_PER_PHASE:] or settled


def read_records(path: str | Path) -> list[PhaseRecord | StepRecord | EpochRecord]:
    """Parse run.jsonl; a bad line is an InputFileError naming the line."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise InputFileError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputFileError(f"{path}: cannot read ({exc})") from None
    records = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            check_json(line, "")
        except InputFileError as exc:
            raise InputFileError(f"{where}: not a run record{exc}") from None
        try:
            records.append(_RECORD.validate_json(line, strict=True))
        except ValidationError as exc:
            raise InputFileError(f"{where}: not a run record ({first_error(exc)})") from None
        except RecursionError:
            raise InputFileError(f"{where}: nested too deeply") from None
    check_records(records, str(path))
    return records


def check_records(records: list, where: str) -> None:
    """What a run's records mean together: every step and epoch belongs to a phase that
    started before it, every layout runs on its cluster, and every rank's stage and replica
    exist in its phase's layout. InputFileError with one line otherwise."""
    phases: dict[int, PhaseRecord] = {}
    for record in records:
        if isinstance(record, PhaseRecord):
            layout, cluster = record.layout, record.pricing.cluster
            try:
                layout.check(layout.boundaries[-1], cluster.num_devices)
            except PipeplanError as exc:
                raise InputFileError(f"{where}: phase {record.phase}: {exc}") from None
            phases[record.phase] = record
            continue
        phase = phases.get(record.phase)
        if phase is None:
            what = f"{record.kind} {getattr(record, record.kind)}"
            raise InputFileError(f"{where}: {what} is in phase {record.phase}, never started")
        if isinstance(record, StepRecord):
            _check_ranks(record, phase.layout, where)


def _check_ranks(step: StepRecord, layout: Layout, where: str) -> None:
    for times in step.ranks:
        stage, replica = times.stage, times.replica
        if (stage is None) != (replica is None):
            raise InputFileError(
                f"{where}: step {step.step}: rank {times.rank} has a stage "
                "but no replica or the reverse"
            )
        if stage is None:
            continue
        if stage >= layout.num_stages or replica >= layout.replicas:
            raise InputFileError(
                f"{where}: step {step.step}: rank {times.rank} is stage {stage} of replica "
                f"{replica}, outside the phase's {layout.label()}"
            )
        if layout.rank_map[replica][stage] != times.rank:
            raise InputFileError(
                f"{where}: step {step.step}: rank {times.rank} is not stage {stage} of replica "
                f"{replica} in the phase's rank map"
            )
