"""The report format (`pipeplan report --json`): a run's measured step times next to the
planner's predictions, per phase and per stage, and an optional baseline run."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from pipeplan.formats.base import DataText, NonNegFloat, NonNegInt, PosInt, Strict, Text, Versioned
from pipeplan.formats.layout import EpochShape, Layout
from pipeplan.formats.plan import StagePlan
from pipeplan.formats.run import Forecast

ERROR_DESCRIPTION = "(predicted − measured) / measured, a fraction; None unless both are > 0."
PREDICTED_TRAINING = (
    "Σ over phases of predicted_step_s × steps (no transitions, no cache fills, no "
    "evaluation): each phase's own prediction, priced with the profile its record names, a "
    "refit once the run recalibrated itself; not comparable across runs (previewed_speedup is)."
)


# --------------------------------------------------------------------------- format


class Comparison(Strict):
    """One per-step quantity: the planner's prediction next to the measured median."""

    predicted_s: NonNegFloat | None
    measured_s: NonNegFloat | None
    error: float | None = Field(description=ERROR_DESCRIPTION)


class RankBreakdown(Strict):
    """Median per-step totals of one rank; the measured Gantt chart draws replica 0's."""

    rank: NonNegInt
    fwd_s: NonNegFloat
    bwd_s: NonNegFloat
    wait_s: NonNegFloat
    allreduce_s: NonNegFloat
    optimizer_s: NonNegFloat
    input_s: NonNegFloat


class StageReport(Strict):
    stage: NonNegInt
    first_layer: NonNegInt
    stop_layer: PosInt = Field(description="Exclusive.")
    ranks: list[NonNegInt] = Field(description="One rank per replica.")
    compute: Comparison = Field(description="Forward + backward: M·(fwd_s + bwd_s) predicted.")
    transfer: Comparison = Field(
        description="Predicted M·(send_fwd_s + send_bwd_s); measured is the ranks' wait_s: time "
        "inside the pipeline schedule not spent computing, so it also contains pipeline bubbles "
        "and waiting for slower stages, not only transfers."
    )
    allreduce: Comparison
    optimizer: Comparison
    measured_input_s: NonNegFloat | None = Field(
        description="Reading the batch (and the cache); part of the step, not of the prediction."
    )
    replica0: RankBreakdown | None = Field(description="The rank of replica 0 of this stage.")


class PhaseReport(Strict):
    phase: NonNegInt
    start_epoch: NonNegInt
    start_step: NonNegInt
    layout: Layout
    steps: NonNegInt
    cache_filling_steps: NonNegInt = Field(
        description="Steps of a cached phase that still computed the frozen prefix: not steady."
    )
    measured_steps: NonNegInt = Field(description="Steps the medians are taken over.")
    transition_s: NonNegFloat
    predicted_step_s: NonNegFloat | None = Field(description="Made before the phase started.")
    measured_step_s: NonNegFloat | None = Field(description="Median step of the slowest rank.")
    measured_iqr_s: NonNegFloat | None = Field(description="Interquartile range of the same.")
    error: float | None = Field(description=ERROR_DESCRIPTION)
    predicted_overhead_s: NonNegFloat | None = Field(
        description="Part of predicted_step_s outside the simulated schedule (a calibrated "
        "profile's per-step overhead, e.g. reading the input); None without predicted_stages."
    )
    predicted_stages: list[StagePlan] | None = Field(
        description="The planner's per-micro-batch stage times, to simulate the predicted step."
    )
    stages: list[StageReport]


class EpochReport(EpochShape):
    epoch: NonNegInt
    phase: NonNegInt = Field(description="The phase at the end of the epoch.")
    layout: Layout = Field(description="The layout at the end of the epoch.")
    steps: NonNegInt
    epoch_s: NonNegFloat
    samples_per_s: NonNegFloat
    eval_loss: float | None = Field(None, description="Held-out loss, as the epoch record's.")
    eval_accuracy: float | None
    forecast: Forecast | None = Field(
        None, description="The end-to-end speedup forecast at the epoch's end (run.jsonl)."
    )


class BaselineReport(Strict):
    run_dir: Text
    name: Text
    steps: NonNegInt
    training_s: NonNegFloat
    predicted_training_s: NonNegFloat | None = Field(description=PREDICTED_TRAINING)
    samples_per_s: NonNegFloat | None = Field(description="Mean training throughput.")
    final_eval_accuracy: float | None
    measured_speedup: float | None = Field(
        description="Baseline training_s / this run's; None when they trained different "
        "numbers of steps (previewed_unavailable says so)."
    )
    previewed_training_s: NonNegFloat | None = Field(
        None,
        description="The baseline as it ran, priced by the planner from the profile.json both "
        "runs started with (what `pipeplan preview` shows before any run): per phase, on the "
        "cluster it ran on, its transition and its epochs for the steps it ran, a cached "
        "phase's first epoch filling the cache (`pipeplan.plan.ran_phase_s`). None with "
        "previewed_unavailable.",
    )
    run_previewed_training_s: NonNegFloat | None = Field(
        None, description="This run, priced the same way from the same profile."
    )
    previewed_speedup: float | None = Field(
        description="previewed_training_s / run_previewed_training_s: one pricing for both "
        "runs (never a refit one run recalibrated online). Reports made before the "
        "thirty-eighth round's fixes held predicted_training_s / this run's here."
    )
    previewed_unavailable: Text | None = Field(
        None,
        description="Why previewed_speedup is None: the runs started from different profiles, "
        "or trained different numbers of steps, or their records lack what pricing them needs "
        "(one epoch length, a phase priced with profile.json).",
    )


class Report(Versioned):
    schema_version: Literal[2] = 2
    name: Text
    run_dir: Text
    model: Text
    data: DataText
    nproc: PosInt
    worlds: list[PosInt] | None = Field(
        None,
        description="The ranks the run trained on, in order: one entry, or more where a "
        "resume changed --nproc (None: a report made before this field).",
    )
    global_batch: PosInt
    freeze: Text
    epochs_planned: PosInt
    epochs_completed: NonNegInt
    steps: NonNegInt
    training_s: NonNegFloat = Field(
        description="Σ epoch training time + Σ transitions, and Σ step time of an epoch left "
        "open (a run stopped mid-epoch): every step's, as predicted_training_s counts them."
    )
    predicted_training_s: NonNegFloat | None = Field(description=PREDICTED_TRAINING)
    final_eval_accuracy: float | None
    phases: list[PhaseReport]
    epochs: list[EpochReport]
    baseline: BaselineReport | None = None
