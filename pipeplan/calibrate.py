"""Fit the cost model to measured runs: the loop from `pipeplan run` back to the planner.

    calibrated = calibrate([run_dir], profile)   # the profile with a `calibration` section
    calibrated.calibration.not_fitted            # {"p2p": "no pipelined phase: ..."}

Each phase is priced on the cluster its phase record names; what is fitted, and how, is in
docs/architecture.md §4.15.

A parameter is fitted only when the runs identify it; otherwise it keeps its default and
`Calibration.not_fitted` says why, rather than taking whatever value the optimiser stopped at.
Identified means that its effect on the fitted times (relative, scaled to unit norm) is at
least SEPARABLE away from the span of the effects of the parameters admitted before it:

- a compute scale also needs a part the runs' noise leaves known (`fit_tied`: fitted apart, its
  deviation's standard error within IDENTIFIED_REL of the scale it would otherwise keep);
- nograd_scale needs ranks whose frozen and trainable forward time differ in proportion (else it
  is tied to fwd_scale); bwd_scale a rank with backward time (else = fwd_scale); each per-call
  scale (`*_call_scale`, a layer's time that does not grow with m) ranks at micro-batch sizes
  where that part weighs differently (else its kind's per-sample scale: the whole layer alike);
- the all-reduce latency and bandwidth need data-parallel ranks inside one node with two
  different gradient bytes per replica G/D (else none: the cluster's link);
- optimizer_s_per_byte a rank with trainable parameters (else none: the device kind's constant);
- in the step fit, admitted in this order: the fixed overhead (always; the overhead stays ≥ 0 on
  every fitted phase, as the cost model clamps it), the per-micro-batch overhead (else 0), the
  per-sample input time (else 0) and the p2p latency (else none: the cluster's link) — the
  parameter with a measured default goes last.

Every fit is solved to the exact optimum, so exact data give back exact parameters: the compute,
all-reduce and optimizer models are linear in their parameters (bounded linear least squares on
columns scaled to unit norm: the parameters span ten orders of magnitude), the step fit is
piecewise linear through the simulator (Gauss–Newton with bounded linear steps); the soft-L1
loss on relative errors is applied by reweighting.
"""

from __future__ import annotations

import logging
import math
import statistics
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

import numpy as np
from pydantic import ValidationError

from pipeplan.costmodel import CostModel, same_placement
from pipeplan.errors import InputFileError, OutputError
from pipeplan.fileio import check_run_directory, reading_run
from pipeplan.formats import (
    STEP_RECORDS,
    Calibration,
    Cluster,
    FittedLink,
    FittedShape,
    Layout,
    PhaseRecord,
    Profile,
    RankTimes,
    RunConfig,
    StagePlan,
    StepRecord,
    check_run_profile,
    dumps,
    load,
    read_records,
    steady_step,
)
from pipeplan.formats.base import TooLargeToRead, first_error
from pipeplan.formats.profile import (
    MAX_FIT_ERROR,
    MAX_FITTED_BANDWIDTH,
    MIN_MEASURED_S,
    MIN_SCALE,
    MIN_STEADY_STEPS,
    STRAGGLER_FACTOR,
    WARMUP_STEPS_PER_PHASE,
    input_mismatch,
    model_labels,
    profile_command,
    uncalibrated_identity,
)
from pipeplan.formats.run import run_input, unmeasured_times
from pipeplan.log import held
from pipeplan.runfiles import check_distinct_runs, check_run_files, trained_records

# A rank's parts (input, forward, backward, wait, all-reduce, optimizer) are spans of one step
# on one clock (executor/clock.py), so they add up to its step time: exactly on CPU (the wait
# is the remainder), to the events' 0.5 µs resolution per span on CUDA (a few hundred spans:
# < 1e-4 s). A rank whose parts miss by more than 2 % of its step plus 1e-4 s was timed wrongly
# (a host clock around asynchronous GPU work puts the step in whichever part synchronises; a
# negative remainder is clamped), and fitting it would learn the wrong split: refused.
PARTS_TOLERANCE_REL, PARTS_TOLERANCE_ABS_S = 0.02, 1e-4
RANK_PARTS = ("input_s", "fwd_s", "bwd_s", "wait_s", "allreduce_s", "optimizer_s")
SOFT_L1_SCALE = 0.1  # relative error where the soft-L1 loss turns from quadratic to linear
# Distance of a parameter's unit column from the span of those admitted before it, below which
# the runs cannot tell it apart from them. Exact collinearity leaves ~1e-11 (finite differences
# through the simulator); the designs the tests use give 0.16 and more.
SEPARABLE = 1e-6
# A separable compute scale is identified when the runs' noise leaves it known: fitted apart
# from the scale it would otherwise keep, its deviation's standard error is at most this share
# of that scale (`fit_tied`). Beyond it the fit cannot tell the deviation's size, hardly its
# sign. The noisy test data (16 phases, 5 % per time, 100 steps each) leave ≤ 0.04 of it; one
# frozen layer of 2 % of a loaded host's forward, 10 steps, several times the scale.
IDENTIFIED_REL = 0.25
MAX_ITERATIONS = 100
# A fit ends when its next step changes no relative prediction (or IRLS weight) by this much.
CONVERGED = 1e-13


@dataclass(frozen=True)
class RankObservation:
    """Steady-state medians of one rank in one phase, and what the profile predicts."""

    measured_fwd_s: float
    measured_bwd_s: float
    measured_allreduce_s: float
    measured_optimizer_s: float
    active_fwd_s: float  # profile: forward of trainable layers, whole step
    nograd_fwd_s: float  # profile: forward of frozen layers run without autograd
    bwd_s: float
    # The per-call parts of the three above (the profile's intercepts, M per layer): the rest
    # of each grows with the micro-batch size m.
    active_fwd_call_s: float
    nograd_fwd_call_s: float
    bwd_call_s: float
    grad_bytes: float
    replicas: int
    allreduce_in_node: bool  # its stage's replicas share a node: the link calibration fits
    # The phase's cluster's in-node all-reduce link (latency s, bandwidth bytes/s): what a fit
    # that cannot tell latency from bandwidth apart scales (`fit_allreduce`).
    allreduce_link: tuple[float, float] = (0.0, 1.0)
    micro_batch_size: int = 0  # its phase's m (0: not known)
    # What the uncalibrated profile prices the optimizer step at per trainable parameter
    # byte (the device kind's constant): what `check_parts_off_the_floor` holds the fit to.
    optimizer_s_per_byte: float = 0.0
    # The relative standard error of measured_fwd_s and measured_bwd_s, medians of the phase's
    # steady steps (`median_error`): how far the runs' noise leaves them (0: exact data).
    fwd_noise: float = 0.0
    bwd_noise: float = 0.0


@dataclass(frozen=True)
class PhaseObservation:
    run: str
    record: PhaseRecord
    measured_step_s: float
    steps: int
    ranks: list[RankObservation]

    @property
    def layout(self) -> Layout:
        return self.record.layout

    @property
    def cluster(self) -> Cluster:
        """The cluster the run priced the phase on (its phase record says)."""
        return self.record.pricing.cluster

    @property
    def samples_per_replica(self) -> int:
        return self.layout.micro_batches * self.layout.micro_batch_size


# The configurations runs are read under when not their run.json's, by run directory as given:
# a running resume's own (`calibrate`'s `training`).
Training = dict[str, RunConfig]


def load_run(
    run_dir: str | Path, profile: Profile, training: Training | None = None
) -> tuple[RunConfig, list]:
    """run.json (or the configuration `training` gives for `run_dir`) and the records trained
    under it, checked as report checks them."""
    given = (training or {}).get(str(run_dir))
    run_dir = check_run_directory(run_dir)
    with reading_run(run_dir), held():  # held: a torn last record's notice only if they pass
        config = given or load(RunConfig, run_dir / "run.json")
        records = read_records(run_dir / "run.jsonl", config)
        # run.json's precision edited to bf16 fitted fp32 times as bf16: checked against the
        # run's checkpoint and its phases' profiles first, which then say what the run fed.
        check_run_files(run_dir, config, records)
        fed = run_input(run_dir, records)
        own = run_dir / "profile.json"  # the profile the run started with (`run` copies it)
        mine = f"give the run's profile ({own})" if own.is_file() else "give a profile of its model"
        check_run_profile(run_dir, config, profile, "--profile", mine, fed)
        # The input too, as `run` holds --profile to it: a profile measured at --seq-len 48
        # was fitted to a run of 16, its scales the ratio of two shapes (thirty-eighth round).
        feeds = f"the run {run_dir}"
        if fed is not None and (why := input_mismatch(profile, fed, "--profile", feeds)):
            command = profile_command(
                config.model, fed.flags(model_labels(config.model)), config.nproc
            )
            raise InputFileError(f"{why}; profile that: {command}, and pass --profile P.json")
        # Never fitted: a failed resume's records past run.json's epochs (left out, noticed).
        return config, trained_records(run_dir, config, records)


def observe(
    run_dirs: list[str | Path], profile: Profile, training: Training | None = None
) -> list[PhaseObservation]:
    """Every phase with enough steady steps, from every run."""
    base = profile.model_copy(update={"calibration": None})
    observations: list[PhaseObservation] = []
    for run_dir in run_dirs:
        before = len(observations)
        config, records = load_run(run_dir, profile, training)
        steps = [r for r in records if isinstance(r, STEP_RECORDS)]
        first = ""  # why the run's first step that is no measurement was left out
        filling = ""  # the run's first phase with steps left out as filling the cache
        for phase in (r for r in records if isinstance(r, PhaseRecord)):
            model = CostModel(base, phase.pricing.cluster)
            own = [s for s in steps if s.phase == phase.phase]
            settled = [s for s in own if steady_step(s, phase, config)]
            if len(settled) < len(own) and not filling:
                filling = f"phase {phase.phase}: {len(own) - len(settled)} of its {len(own)}"
            # A step measured at zero time on a rank that computes is not a measurement.
            after_warmup = settled[WARMUP_STEPS_PER_PHASE:]
            reasons = [unmeasured(s, phase.layout, phase.predicted_stages) for s in after_warmup]
            mine = [s for s, why in zip(after_warmup, reasons, strict=True) if not why]
            left = [
                f"step {s.step}: {why}" for s, why in zip(after_warmup, reasons, strict=True) if why
            ]
            first = first or next(iter(left), "")
            if len(mine) < MIN_STEADY_STEPS:
                # Steps left out in silence read as a phase too short (the fifty-seventh
                # round: "a phase needs 5 steps" of phases of 8).
                if len(after_warmup) >= MIN_STEADY_STEPS:
                    logging.getLogger("pipeplan.calibrate").warning(
                        "%s: phase %d left out of the fit: %d of its %d steps after warm-up are "
                        "no measurements, the first %s",
                        run_dir,
                        phase.phase,
                        len(left),
                        len(after_warmup),
                        left[0],
                    )
                continue
            median = statistics.median(s.step_s for s in mine)
            steady = [s for s in mine if s.step_s <= STRAGGLER_FACTOR * median]
            observations.append(_phase_observation(str(run_dir), phase, steady, model))
        # Each run named is fitted to: one left out in silence was read as fitted to (the
        # calibration's `runs` said otherwise; the thirty-first round).
        if len(observations) == before:
            raise InputFileError(
                f"{run_dir}: no phase with enough steps to fit: a phase needs "
                f"{WARMUP_STEPS_PER_PHASE + MIN_STEADY_STEPS} steps ({WARMUP_STEPS_PER_PHASE} "
                f"warm-up, {MIN_STEADY_STEPS} measured)"
                # Left out in silence, a phase of 12 cache-filling steps read as too short
                # (the fifty-ninth round).
                + (
                    ", and steps that still fill the activation cache (computing the frozen "
                    f"prefix) are left out ({filling})"
                    if filling
                    else ""
                )
                + (
                    f", and steps that are no measurements are left out, the first {first}"
                    if first
                    else ""
                )
                + ("; leave it out" if len(run_dirs) > 1 else "")
            )
    return observations


def measured(step: StepRecord, layout: Layout | None = None) -> bool:
    """Whether the step is a measurement calibrate fits (`unmeasured` says why not)."""
    return not unmeasured(step, layout)


def unmeasured(
    step: StepRecord, layout: Layout | None = None, stages: list[StagePlan] | None = None
) -> str:
    """Why the step (of a phase of `layout`) is no measurement, "" when it is one: the step
    took time, its ranks' times are measurements (`formats.run.unmeasured_times`, which the
    run format refuses: a run read back never has them), and every rank's parts add up to its
    step time (`parts_add_up`).

        unmeasured(step, layout)  # "rank 1's parts … add up to 0.0105 s, not its step_s 0.017 s"
    """
    if step.step_s < MIN_MEASURED_S:
        return f"step_s {step.step_s:g} s is below {MIN_MEASURED_S:g} s, which no timer resolves"
    if not any(r.stage is not None for r in step.ranks):
        return "no rank has a stage: nothing computed"
    for r in step.ranks:
        if why := unmeasured_times(r, layout, stages):
            return f"rank {r.rank}: {why}"
        if not parts_add_up(r):
            parts = sum(getattr(r, name) for name in RANK_PARTS)
            return (
                f"rank {r.rank}'s parts ({' + '.join(RANK_PARTS)}) add up to {parts:.6g} s, "
                f"not its step_s {r.step_s:.6g} s"
            )
    return ""


def parts_add_up(rank: RankTimes) -> bool:
    """Whether the rank's parts sum to its step time within the tolerance above. A rank that
    reports no step time of its own (0: hand-made records that time only the parts) has
    nothing to check them against."""
    if rank.step_s == 0:
        return True
    parts = sum(getattr(rank, name) for name in RANK_PARTS)
    return abs(parts - rank.step_s) <= PARTS_TOLERANCE_REL * rank.step_s + PARTS_TOLERANCE_ABS_S


def _phase_observation(
    run: str, phase: PhaseRecord, steps: list[StepRecord], model: CostModel
) -> PhaseObservation:
    layout = phase.layout
    m, M, k = layout.micro_batch_size, layout.micro_batches, layout.frozen_layers
    f, g, n = (model.layer_times(kind, m) for kind in ("fwd", "bwd", "nograd"))
    fc, gc, nc = (model.layer_call_times(kind) for kind in ("fwd", "bwd", "nograd"))
    active = np.arange(model.num_layers) >= k
    stage_of = {r.rank: r.stage for r in steps[0].ranks if r.stage is not None}
    ring_s = ring_allreduce_s(steps, stage_of)
    ranks = []
    for rank, stage in stage_of.items():
        times = rank_columns(steps, rank)
        first, stop = layout.boundaries[stage], layout.boundaries[stage + 1]
        inside = np.zeros(model.num_layers, dtype=bool)
        inside[first:stop] = True
        runs_frozen = inside & ~active & (not (layout.cached and stage == 0))
        nodes = {model.node_of(row[stage]) for row in layout.rank_map}
        ranks.append(
            RankObservation(
                measured_fwd_s=statistics.median(times["fwd_s"]),
                measured_bwd_s=statistics.median(times["bwd_s"]),
                measured_allreduce_s=ring_s[stage],
                measured_optimizer_s=statistics.median(times["optimizer_s"]),
                active_fwd_s=M * float(f[inside & active].sum()),
                nograd_fwd_s=M * float(n[runs_frozen].sum()),
                bwd_s=M * float(g[inside & active].sum()),
                active_fwd_call_s=M * float(fc[inside & active].sum()),
                nograd_fwd_call_s=M * float(nc[runs_frozen].sum()),
                bwd_call_s=M * float(gc[inside & active].sum()),
                grad_bytes=float(model.param_bytes[inside & active].sum()),
                replicas=layout.replicas,
                allreduce_in_node=len(nodes) == 1,
                allreduce_link=(
                    model.cluster.allreduce_link.latency_s,
                    model.cluster.allreduce_link.bandwidth_bytes_per_s,
                ),
                micro_batch_size=m,
                optimizer_s_per_byte=model.optimizer_s_per_byte,
                fwd_noise=median_error(times["fwd_s"]),
                bwd_noise=median_error(times["bwd_s"]),
            )
        )
    return PhaseObservation(
        run,
        phase,
        statistics.median(s.step_s for s in steps),
        len(steps),
        ranks,
    )


# The parts of a rank's step the fit takes medians of (`rank_columns`).
MEASURED_PARTS = ("fwd_s", "bwd_s", "allreduce_s", "optimizer_s")


def rank_columns(steps: list[StepRecord], rank: int) -> dict[str, array]:
    """The rank's measured times over `steps`, a column of floats each (`MEASURED_PARTS`): its
    rank rows, held for every step, were most of calibrate's memory (F12 of the forty-second
    round: a valid run.jsonl of 695 MB took 4.1 GB)."""
    columns = {name: array("d") for name in MEASURED_PARTS}
    for step in steps:
        times = next(r for r in step.ranks if r.rank == rank)
        for name in MEASURED_PARTS:
            columns[name].append(getattr(times, name))
    return columns


def ring_allreduce_s(steps: list[StepRecord], stage_of: dict[int, int]) -> dict[int, float]:
    """Each stage's gradient all-reduce, the median over `steps` of its ring's own time: the
    least any of its replicas spent in it (`stage_of`: rank → stage). A replica that finished
    its backward first waits inside the all-reduce for the last one, which waits for no one;
    the cost model starts a stage's all-reduce once its last backward ends (§4.5). Found by
    the sixty-second round: each rank's own median, waits and all, fitted a 1x2 run's link at
    0.02 GB/s where the profile measured 1 GB/s, so a re-plan priced every layout of more
    than one replica ~4 ms a step too slow and chose one replica, which trained slower. One
    pass, a column per stage (a rank's rows held for every step were most of calibrate's
    memory: `rank_columns`)."""
    columns = {stage: array("d") for stage in set(stage_of.values())}
    for step in steps:
        least = dict.fromkeys(columns, math.inf)
        for r in step.ranks:
            if (stage := stage_of.get(r.rank)) is not None:
                least[stage] = min(least[stage], r.allreduce_s)
        for stage, column in columns.items():
            column.append(least[stage])
    return {stage: statistics.median(column) for stage, column in columns.items()}


def median_error(values: Sequence[float]) -> float:
    """The relative standard error of the median of `values`: their robust spread (1.4826 ×
    the median absolute deviation, σ for normal noise) × 1.2533 (the median's efficiency) / √n,
    over the median. 0 for exact data (every value alike) or a median of 0.

        median_error([0.010, 0.011, 0.009, 0.010])  # ≈ 0.046
    """
    middle = statistics.median(values)
    if middle <= 0 or len(values) < 2:
        return 0.0
    spread = 1.4826 * statistics.median(abs(v - middle) for v in values)
    return 1.2533 * spread / np.sqrt(len(values)) / middle


# --------------------------------------------------------------------------- solvers


def separable(columns: np.ndarray) -> list[int]:
    """The columns, in order, that the data can tell apart: each is kept when, scaled to unit
    norm, it lies at least SEPARABLE from the span of the columns kept before it.

        separable(np.array([[1.0, 2.0, 0.0], [1.0, 2.0, 1.0]]))  # [0, 2]: column 1 = 2 × column 0
    """
    unit, norms = _unit_columns(columns)
    kept: list[int] = []
    for j in np.flatnonzero(norms > 0):
        column = unit[:, j]
        if kept:
            basis = unit[:, kept]
            column = column - basis @ np.linalg.lstsq(basis, column, rcond=None)[0]
        if np.linalg.norm(column) >= SEPARABLE:
            kept.append(int(j))
    return kept


def _unit_columns(matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    norms = np.linalg.norm(matrix, axis=0)
    return matrix / np.where(norms > 0, norms, 1.0), norms


def bounded_lstsq(matrix: np.ndarray, target: np.ndarray, lower: np.ndarray) -> np.ndarray:
    """argmin ‖matrix · x − target‖ subject to x ≥ lower (−inf: free), solved exactly.

        x = bounded_lstsq(np.array([[1.0], [1.0]]), np.array([-1.0, -3.0]), np.zeros(1))  # [0.]

    Columns are scaled to unit norm first: seconds and seconds per byte differ by ten orders of
    magnitude (unscaled, scipy's trust region stopped with the all-reduce latency at its
    starting guess). A zero column (a parameter with no effect here) gets 0.
    """
    unit, norms = _unit_columns(matrix)
    x = np.zeros(matrix.shape[1])
    used = norms > 0
    if used.any():
        from scipy.optimize import lsq_linear  # here: scipy.optimize slows every rank's start

        bounds = (lower[used] * norms[used], np.inf)
        x[used] = lsq_linear(unit[:, used], target, bounds=bounds, method="bvls").x / norms[used]
    return x


def soft_l1_weights(residuals: np.ndarray) -> np.ndarray:
    """IRLS weights of the soft-L1 loss ρ(r) = 2f²(√(1 + (r/f)²) − 1) at relative residuals r:
    ρ'(r) / 2r = 1/√(1 + (r/f)²), f = SOFT_L1_SCALE (scipy's soft_l1 with f_scale f)."""
    return 1.0 / np.sqrt(1.0 + (residuals / SOFT_L1_SCALE) ** 2)


def soft_l1(residuals: np.ndarray) -> float:
    """Σ ρ(r), the loss every fit minimises (the step fit's damping compares it)."""
    f = SOFT_L1_SCALE
    return float(np.sum(2 * f * f * (np.sqrt(1.0 + (residuals / f) ** 2) - 1.0)))


def robust_linear(matrix: np.ndarray, measured: np.ndarray, lower: np.ndarray) -> np.ndarray:
    """x ≥ lower minimising Σ soft-L1(matrix · x / measured − 1), by iteratively reweighted
    bounded least squares (convex: one optimum, the exact one on exact data).

        latency, inverse_bandwidth = robust_linear(terms, measured_s, lower=np.zeros(2))
    """
    relative = matrix / measured[:, None]
    weights = np.ones(len(measured))
    for _ in range(MAX_ITERATIONS):
        root = np.sqrt(weights)
        x = bounded_lstsq(relative * root[:, None], root, np.asarray(lower, dtype=float))
        updated = soft_l1_weights(relative @ x - 1.0)
        if np.max(np.abs(updated - weights)) < CONVERGED:
            break
        weights = updated
    return x


# --------------------------------------------------------------------------- per-rank fits


def fit_tied(
    parts: np.ndarray,
    parents: list[int | None],
    measured: np.ndarray,
    noise: np.ndarray | None = None,
) -> tuple[np.ndarray, list[int], dict[int, float]]:
    """Scales x ≥ MIN_SCALE of measured ≈ Σ x_j · parts[:, j], where a part the data cannot
    tell apart keeps its parent's scale; the parts that got a scale of their own; and those
    the runs' noise left unidentified, with how uncertain their scale was.

        scales, own, noisy = fit_tied(np.column_stack([per_sample, per_call]), [None, 0], measured)

    Parts come parents first (parents[j] < j; part 0 is the root). Part j's own scale is its
    deviation from its parent's, which moves the times by the columns of j and of every part
    that inherits from j: j is admitted when that effect (relative, unit norm) lies SEPARABLE
    from the span of the effects admitted before it (`separable`), so a finer distinction is
    drawn only when the runs show it; a part not admitted takes the scale of its nearest
    admitted ancestor. The admitted scales are then one bounded robust fit.

    Separable is not yet identified: a part that is a sliver of every measured time (a frozen
    embeddings layer's 0.14 ms in a 12 ms forward) is separable on paper, and its scale then
    absorbed the measured times' noise, 67× or 0.001× (the thirty-eighth round). So each
    admitted part's deviation is also held to the measured times' relative `noise` (each
    one's standard error): propagated through the fit (`deviation_errors`), the deviation's
    standard error must stay within IDENTIFIED_REL of the scale it deviates from; the least
    identified part beyond it keeps its ancestor's scale instead, and the rest are fitted
    again, until every part left passes.
    """
    count = parts.shape[1]
    family = [[j] for j in range(count)]  # j and every part that inherits from it
    for j in range(count - 1, 0, -1):
        family[parents[j]] += family[j]
    effects = np.column_stack([parts[:, f].sum(axis=1) for f in family])
    own = sorted({0, *separable(effects / measured[:, None])})
    noisy: dict[int, float] = {}
    while True:
        holder = list(range(count))  # whose scale part j takes
        for j in range(1, count):
            holder[j] = j if j in own else holder[parents[j]]
        columns = np.column_stack(
            [parts[:, [j for j in range(count) if holder[j] == i]].sum(axis=1) for i in own]
        )
        fitted = robust_linear(columns, measured, np.full(len(own), MIN_SCALE))
        if noise is None or len(own) == 1:
            break
        ancestors = [own.index(holder[parents[j]]) for j in own[1:]]
        errors = deviation_errors(columns / measured[:, None], ancestors, noise)
        relative = errors / fitted[ancestors]
        worst = int(np.argmax(relative))
        if relative[worst] <= IDENTIFIED_REL:
            break
        noisy[own[worst + 1]] = float(relative[worst])
        own.remove(own[worst + 1])
    return np.array([fitted[own.index(holder[j])] for j in range(count)]), own, noisy


def deviation_errors(relative: np.ndarray, ancestors: list[int], noise: np.ndarray) -> np.ndarray:
    """The standard errors of x_i − x_ancestors[i−1] for each scale i ≥ 1 of the fit
    relative · x ≈ 1 (`relative`: the merged columns over the measured times), when the
    measured times carry independent relative errors of standard deviation `noise`: a
    relative error ε moves the least-squares x by pinv(relative) · ε.

        deviation_errors(np.array([[1.0, 0.0], [0.98, 0.02]]), [0], np.array([0.0, 0.01]))  # [0.5]
    """
    sensitivity = np.linalg.pinv(relative)  # scale × measured time
    rows = sensitivity[1:] - sensitivity[ancestors]
    return np.sqrt((rows**2 * noise[None, :] ** 2).sum(axis=1))


# The compute scales, in the order fit_tied admits them, each with the scale it keeps when the
# runs cannot tell it apart: a frozen forward's scale is the trainable one's, a per-call scale
# its kind's own (the whole layer scaled alike, as a calibration without it means).
FORWARD = ("fwd_scale", "nograd_scale", "fwd_call_scale", "nograd_call_scale")
FORWARD_PARENTS = [None, 0, 0, 1]
BACKWARD = ("bwd_scale", "bwd_call_scale")
SIZES_NEEDED = "needs ranks at micro-batch sizes m where the per-call part weighs differently"


def fit_compute(ranks: list[RankObservation]) -> tuple[dict[str, float], dict[str, str]]:
    """The compute scales (per-sample `*_scale`, per-call `*_call_scale` of forward, backward
    and no-grad forward) and why any of them was not fitted.

        scales, not_fitted = fit_compute(ranks)  # scales["fwd_call_scale"], …

    The backward scales are the forward ones when no rank ran a backward. A per-call part is
    told from the per-sample part only by runs at two micro-batch sizes or more
    (`_one_size`): at one size, ranks of other layers weigh the two parts differently, but
    by the layers' own deviations from the profile, which the fit then read as a per-call
    scale. Found by the thirty-seventh round: one 2×1 run at m = 8 fitted every per-call
    scale to its floor (0.001) with a 0 % residual, small micro-batches looked all but free,
    and the calibrated planner chose M = 16, measured 4× slower than the layout it replaced.
    """
    one_size = _one_size(ranks)
    scales, why = _fit_forward(ranks, one_size)
    bwd = [r for r in ranks if r.measured_bwd_s > 0 and r.bwd_s > 0]
    if not bwd:
        reason = "no rank measured a backward"
        scales.update(bwd_scale=scales["fwd_scale"], bwd_call_scale=scales["fwd_call_scale"])
        why.update(
            bwd_scale=f"{reason}: set to fwd_scale",
            bwd_call_scale=f"{reason}: set to fwd_call_scale",
        )
        return scales, why
    parts = np.array([[r.bwd_s - r.bwd_call_s, r.bwd_call_s] for r in bwd])
    if one_size:
        parts = _whole_layers(parts, [(0, 1)])
    measured = np.array([r.measured_bwd_s for r in bwd])
    noise = np.array([r.bwd_noise for r in bwd])
    fitted, own, noisy = fit_tied(parts, [None, 0], measured, noise)
    scales.update(zip(BACKWARD, map(float, fitted), strict=True))
    if 1 in noisy:
        why["bwd_call_scale"] = within_noise("backward", noisy[1], "bwd_scale")
    elif 1 not in own:
        why["bwd_call_scale"] = f"not separable from bwd_scale ({SIZES_NEEDED}): set to bwd_scale"
    return scales, why


def within_noise(kind: str, error: float, kept: str) -> str:
    """The not_fitted reason of a scale `fit_tied` found separable but not identified."""
    return (
        f"too small a part of the measured {kind} to tell from its noise (fitted apart, "
        f"uncertain by ±{error:.0%} of {kept}): set to {kept}"
    )


def _one_size(ranks: list[RankObservation]) -> bool:
    """Whether every rank ran at one micro-batch size (ranks of unknown size say nothing)."""
    return len({r.micro_batch_size for r in ranks if r.micro_batch_size > 0}) <= 1


def _whole_layers(parts: np.ndarray, pairs: list[tuple[int, int]]) -> np.ndarray:
    """`parts` with each (per-sample, per-call) column pair's per-call column added to its
    per-sample one and zeroed: one scale for the whole layer, the per-call one tied to it."""
    parts = parts.copy()
    for sample, call in pairs:
        parts[:, sample] += parts[:, call]
        parts[:, call] = 0.0
    return parts


def _fit_forward(
    ranks: list[RankObservation], one_size: bool = False
) -> tuple[dict[str, float], dict[str, str]]:
    """The four forward scales from measured forward = Σ scale · part over the trainable and
    frozen layers' per-sample and per-call parts, and why any of them keeps another's."""
    fwd = [r for r in ranks if r.measured_fwd_s > 0 and r.active_fwd_s + r.nograd_fwd_s > 0]
    if not fwd:
        reason = "no rank measured a forward"
        return dict.fromkeys(FORWARD, 1.0), dict.fromkeys(FORWARD, reason)
    parts = np.array(
        [
            [
                r.active_fwd_s - r.active_fwd_call_s,
                r.nograd_fwd_s - r.nograd_fwd_call_s,
                r.active_fwd_call_s,
                r.nograd_fwd_call_s,
            ]
            for r in fwd
        ]
    )
    if one_size:
        parts = _whole_layers(parts, [(0, 2), (1, 3)])
    measured = np.array([r.measured_fwd_s for r in fwd])
    noise = np.array([r.fwd_noise for r in fwd])
    fitted, own, noisy = fit_tied(parts, FORWARD_PARENTS, measured, noise)
    frozen_ran = bool(parts[:, [1, 3]].any())
    # A part the noise left unidentified keeps its nearest admitted ancestor's scale.
    kept = {1: "fwd_scale", 2: "fwd_scale", 3: "nograd_scale" if 1 in own else "fwd_scale"}
    why = {FORWARD[j]: within_noise("forward", error, kept[j]) for j, error in noisy.items()}
    if 1 not in own and 1 not in noisy:
        why["nograd_scale"] = (
            "no frozen layer ran without the cache: set to fwd_scale"
            if not frozen_ran
            else "frozen and trainable layers ran in the same proportion on every rank: "
            "set to fwd_scale"
        )
    if 2 not in own and 2 not in noisy:
        why["fwd_call_scale"] = f"not separable from fwd_scale ({SIZES_NEEDED}): set to fwd_scale"
    scales = dict(zip(FORWARD, map(float, fitted), strict=True))
    if 3 not in own and not frozen_ran:  # then nothing to be noisy in
        # Nothing measured a frozen layer: it is priced as the trainable forward is, per call
        # and per sample alike. Tied to nograd_scale (= fwd_scale) instead, a per-call part
        # fitted apart (0.001 against 6.2 per sample) made a frozen layer's call 6000× the
        # same layer's trained one, and freezing a layer a slower step (the thirty-fifth
        # round).
        scales["nograd_call_scale"] = scales["fwd_call_scale"]
        why["nograd_call_scale"] = "no frozen layer ran without the cache: set to fwd_call_scale"
    elif 3 not in own and 3 not in noisy:
        why["nograd_call_scale"] = (
            f"not separable from the other forward scales ({SIZES_NEEDED}): set to nograd_scale"
        )
    return scales, why


def fit_allreduce(ranks: list[RankObservation]) -> tuple[FittedLink | None, dict[str, str]]:
    """Ring all-reduce (λ, β) inside a node from 2(D−1)·λ + 2(D−1)/D·G/β = measured, or None
    and why.

        link, not_fitted = fit_allreduce(ranks)

    Points whose replicas span nodes measured the inter-node link, which is not fitted. When
    every point has the same G/D, latency and bandwidth trade off exactly: what the points do
    identify is how much slower than the cluster's link the run's all-reduces were, so that
    link is fitted as a whole, (k·λ, β/k) — where the points priced it on one link — and
    not_fitted says so: the split of the two is the cluster's, not measured.
    """
    points = allreduce_points(ranks)
    if not points:
        return None, {"allreduce": "no data-parallel stage with gradients inside one node"}
    terms = ring_terms(points)
    measured = np.array([r.measured_allreduce_s for r in points])
    if separable(terms / measured[:, None]) != [0, 1]:
        # Latency and bandwidth trade off exactly when every point has the same G/D.
        why = (
            "every all-reduce had the same gradient bytes per replica (G/D): latency and "
            "bandwidth cannot be told apart"
        )
        links = {r.allreduce_link for r in points}
        if len(links) != 1:
            return None, {"allreduce": why}
        ((latency, bandwidth),) = links
        modelled = terms @ np.array([latency, 1.0 / bandwidth])
        (k,) = robust_linear(modelled[:, None], measured, np.zeros(1))
        k = max(float(k), MIN_SCALE)
        if bandwidth / k > MAX_FITTED_BANDWIDTH:  # a link faster than any (`FittedLink`'s)
            return None, {
                "allreduce": f"{why}; scaled to their times, the cluster's link would be "
                f"faster than any device's (over {MAX_FITTED_BANDWIDTH:g} B/s)"
            }
        fitted = FittedLink(latency_s=k * latency, bandwidth_bytes_per_s=bandwidth / k)
        # Not two fitted parameters: other gradient sizes are priced by the cluster's split.
        # Found by the sixty-first round: nothing said so, where the README promised it.
        return fitted, {
            "allreduce": f"{why}; the cluster's link ({latency * 1e6:.3g} µs + "
            f"{bandwidth / 1e9:.3g} GB/s) is scaled as a whole to their times (×{k:.3g}), "
            "keeping its split of the two: runs of other gradient sizes fit them apart"
        }
    latency, inverse_bandwidth = robust_linear(terms, measured, np.zeros(2))
    # Past any link, or 1/MIN_SCALE times the cluster's (the bound of every fitted part:
    # `check_parts_off_the_floor`; the sixty-fifth round), the slope is noise around 0.
    fastest = max(r.allreduce_link[1] for r in points)
    if float(inverse_bandwidth) * min(MAX_FITTED_BANDWIDTH, fastest / MIN_SCALE) <= 1.0:
        # No bandwidth term at all (or one past any link) is no fit of one: it was written as
        # 10^15 B/s, "fitted", and later plans priced all-reduces as free (the fifty-ninth
        # round); the format refuses it since the sixtieth (`MAX_FITTED_BANDWIDTH`).
        why = (
            "the all-reduces' times did not grow with their gradient bytes: no bandwidth can "
            f"be fitted from them (none, or one over {1 / MIN_SCALE:g}× the cluster's link of "
            f"{fastest / 1e9:.3g} GB/s; the profile's link is kept)"
        )
        return None, {"allreduce": why}
    bandwidth = 1.0 / float(inverse_bandwidth)
    return FittedLink(latency_s=float(latency), bandwidth_bytes_per_s=bandwidth), {}


def allreduce_points(ranks: list[RankObservation]) -> list[RankObservation]:
    """The ranks whose all-reduce `fit_allreduce` fits: data-parallel, with gradients, all
    replicas of their stage inside one node (across nodes it measured the inter-node link)."""
    return [
        r
        for r in ranks
        if r.replicas > 1
        and r.grad_bytes > 0
        and r.measured_allreduce_s > 0
        and r.allreduce_in_node
    ]


def ring_terms(points: list[RankObservation]) -> np.ndarray:
    """Each point's ring all-reduce terms (2(D−1), 2(D−1)/D·G): · (λ, 1/β) gives its time."""
    steps = np.array([2.0 * (r.replicas - 1) for r in points])
    per_replica = np.array([r.grad_bytes / r.replicas for r in points])
    return np.column_stack([steps, steps * per_replica])


def fit_optimizer(ranks: list[RankObservation]) -> tuple[float | None, dict[str, str]]:
    """ω = median over ranks of optimizer time / active parameter bytes, or None and why.

        seconds_per_byte, not_fitted = fit_optimizer(ranks)

    None leaves the cost model's constant for the device kind.
    """
    points = [r for r in ranks if r.grad_bytes > 0 and r.measured_optimizer_s > 0]
    if not points:
        return None, {"optimizer_s_per_byte": "no rank with trainable parameters measured a step"}
    ratios = [r.measured_optimizer_s / r.grad_bytes for r in points]
    return float(statistics.median(ratios)), {}


# --------------------------------------------------------------------------- step fit

# x = (overhead of the smallest batch, per micro-batch, per sample, p2p latency), admitted in this
# order (module docstring); step_overhead_s = x[SMALLEST] − per sample · smallest M·m.
STEP_PARAMETERS = ("step_overhead_s", "micro_batch_overhead_s", "input_s_per_sample", "p2p")
STEP_NEEDS = {
    "micro_batch_overhead_s": "phases with different numbers of micro-batches",
    "input_s_per_sample": "samples per replica M·m that do not follow the micro-batch counts, "
    "e.g. other micro-batch sizes m",
    "p2p": "pipelined phases whose transfers on the critical path vary unlike the other terms",
}
SMALLEST, MICRO_BATCH, PER_SAMPLE, P2P = range(len(STEP_PARAMETERS))
# The cost model prices max(0, fixed + per sample·M·m): an overhead below 0 on a fitted phase would
# be a value the model never uses. So the overhead is ≥ 0 on every phase (x[SMALLEST] ≥ 0 and
# per sample ≥ 0), which leaves fixed free to be negative.
STEP_LOWER = np.zeros(len(STEP_PARAMETERS))


@dataclass(frozen=True)
class StepFit:
    """The joint fit of the step terms the simulator sees: measured step =
    simulated step (μ per micro-batch and stage, p2p latency λ) + max(0, fixed + per sample·M·m),
    with that overhead ≥ 0 on every fitted phase.

        fit = StepFit(profile, partial, observations)
        calibration = fit.solve()
    """

    profile: Profile
    partial: Calibration
    observations: list[PhaseObservation]

    @property
    def measured(self) -> np.ndarray:
        return np.array([o.measured_step_s for o in self.observations])

    @property
    def extra_samples(self) -> np.ndarray:
        """Samples per replica beyond the smallest fitted batch, M·m − min M·m."""
        samples = np.array([float(o.samples_per_replica) for o in self.observations])
        return samples - samples.min()

    @property
    def smallest_batch(self) -> int:
        return min(o.samples_per_replica for o in self.observations)

    def default(self) -> np.ndarray:
        """Where pinned parameters stay: no overheads, the cluster's own p2p latency."""
        return np.array([0.0, 0.0, 0.0, self.observations[0].cluster.intra_node.latency_s])

    def calibration(self, x: np.ndarray, p2p: bool) -> Calibration:
        """The partial calibration with x; p2p False keeps each phase's cluster link."""
        # The bandwidth stays as profiled: stage-to-stage messages are too small to separate it.
        bandwidth = self.observations[0].cluster.intra_node.bandwidth_bytes_per_s
        link = FittedLink(latency_s=float(x[P2P]), bandwidth_bytes_per_s=bandwidth)
        update = {
            "step_overhead_s": float(x[SMALLEST] - x[PER_SAMPLE] * self.smallest_batch),
            "micro_batch_overhead_s": float(x[MICRO_BATCH]),
            "input_s_per_sample": float(x[PER_SAMPLE]),
            "p2p": link if p2p else None,
        }
        return self.partial.model_copy(update=update)

    def predictions(self, x: np.ndarray, p2p: bool) -> np.ndarray:
        trial = self.profile.model_copy(update={"calibration": self.calibration(x, p2p)})
        return np.array([predict(trial, o) for o in self.observations])

    def jacobian(self, x: np.ndarray, p2p: bool) -> np.ndarray:
        """d prediction / dx: the overhead terms exactly, μ and λ by forward differences (the
        simulated step is piecewise linear in them, so a small step gives the slope of the
        current piece)."""
        h = 1e-6 * float(np.median(self.measured))
        columns = [np.ones(len(self.observations)), None, self.extra_samples, None]
        for j, with_p2p in ((MICRO_BATCH, p2p), (P2P, True)):
            step = np.zeros(len(x))
            step[j] = h
            columns[j] = (self.predictions(x + step, with_p2p) - self.predictions(x, with_p2p)) / h
        return np.column_stack(columns)

    def identified(self, x: np.ndarray, among: list[int]) -> list[int]:
        """The parameters of `among` the phases identify at x, in admission order."""
        relative = self.jacobian(x, p2p=True) / self.measured[:, None]
        return [among[i] for i in separable(relative[:, among])]

    def gauss_newton(self, free: list[int]) -> np.ndarray:
        """Minimise Σ soft-L1(predicted/measured − 1) over the free parameters: each step solves
        the reweighted, linearised problem within the bounds; halved while it does not help."""
        x, p2p, measured = self.default(), P2P in free, self.measured
        for _ in range(MAX_ITERATIONS):
            residuals = self.predictions(x, p2p) / measured - 1.0
            root = np.sqrt(soft_l1_weights(residuals))[:, None]
            jacobian = self.jacobian(x, p2p)[:, free] / measured[:, None]
            # Solved for the step, so that a parameter without effect here stays where it is.
            proposal = np.zeros(len(x))
            proposal[free] = bounded_lstsq(
                root * jacobian, -root[:, 0] * residuals, STEP_LOWER[free] - x[free]
            )
            step = self.damped(x, proposal, soft_l1(residuals), p2p)
            # A step that ends on a bound lands a rounding error beyond it (a latency of
            # -5e-20 s seen in a run): back onto the bound, where the formats need it.
            x = np.maximum(x + step, STEP_LOWER)
            if np.max(np.abs(jacobian * step[free])) < CONVERGED:
                break
        return x

    def damped(self, x: np.ndarray, step: np.ndarray, cost: float, p2p: bool) -> np.ndarray:
        """The step, halved until it does not raise the loss (a kink of the simulated step can
        make the linearised problem overshoot)."""
        t = 1.0
        while t > 1e-6 and soft_l1(self.trial(x, t * step, p2p) / self.measured - 1) > cost:
            t /= 2
        return t * step

    def trial(self, x: np.ndarray, step: np.ndarray, p2p: bool) -> np.ndarray:
        """Predictions at x + step, kept within the bounds (see gauss_newton)."""
        return self.predictions(np.maximum(x + step, STEP_LOWER), p2p)

    def solve(self) -> Calibration:
        """Fit what the phases identify (checked where the fit starts and where it ends: the
        critical path, and so the slopes, may change on the way); pin the rest with a reason."""
        free = self.identified(self.default(), list(range(len(STEP_PARAMETERS))))
        x = self.gauss_newton(free)
        while (still := self.identified(x, free)) != free:
            free = still
            x = self.gauss_newton(free)
        pinned = [j for j in range(len(STEP_PARAMETERS)) if j not in free]
        x[pinned] = self.default()[pinned]
        why = {STEP_PARAMETERS[j]: self.reason(j, free) for j in pinned}
        fitted = self.calibration(x, p2p=P2P in free)
        # The partial named the parameters fitted here as pending (`PENDING`): each now has
        # its value, or its reason.
        earlier = {k: v for k, v in self.partial.not_fitted.items() if k not in STEP_PARAMETERS}
        return fitted.model_copy(update={"not_fitted": {**earlier, **why}})

    def reason(self, j: int, free: list[int]) -> str:
        """Why parameter j keeps its default."""
        name = STEP_PARAMETERS[j]
        default = "the cluster's link" if j == P2P else "0"
        if j == P2P and not any(o.layout.num_stages > 1 for o in self.observations):
            return f"no pipelined phase: {default}"
        before = ", ".join(STEP_PARAMETERS[i] for i in free if i < j)
        if not before:
            return f"no phase informs it: {default}"
        return f"not separable from {before} by these phases (needs {STEP_NEEDS[name]}): {default}"


def fit_transfers_and_overhead(
    profile: Profile, partial: Calibration, observations: list[PhaseObservation]
) -> Calibration:
    """The partial calibration with the step terms fitted jointly, with the simulator in the loop.

        calibration = fit_transfers_and_overhead(profile, partial, observations)

    What the phases do not identify keeps its default, with the reason in `not_fitted`.
    """
    return StepFit(profile, partial, observations).solve()


def predict(profile: Profile, observation: PhaseObservation) -> float:
    model = CostModel(profile, observation.cluster)
    return model.evaluate(observation.layout, record=False).step_s


def fit_group_rebuild(
    run_dirs: list[str | Path], profile: Profile, training: Training | None = None
) -> tuple[float | None, dict[str, str]]:
    """What a layout change costs besides moving bytes, from the runs' measured transitions:

        seconds, not_fitted = fit_group_rebuild(run_dirs, calibrated_profile)

    Each phase that changed placement from the run's previous phase gives its measured
    transition_s minus the byte move `profile` prices for it (on the cluster the phase
    record names); the fit is their median (robust to a transition a loaded machine
    stalled), never below 0. Phases that kept the placement moved nothing and rebuilt no
    group, and a resumed run's phase loaded its state from a checkpoint: they say nothing of
    it."""
    extra = []
    for run_dir in run_dirs:
        _, records = load_run(run_dir, profile, training)
        phases = sorted((r for r in records if isinstance(r, PhaseRecord)), key=lambda r: r.phase)
        for before, after in pairwise(phases):
            if same_placement(before.layout, after.layout) or after.resumed:
                continue
            move = CostModel(profile, after.pricing.cluster).move_s(before.layout, after.layout)
            extra.append(after.transition_s - move)
    if not extra:
        return None, {
            "group_rebuild_s": "no transition changed placement: the profile's measured "
            "value, else the default"
        }
    return max(0.0, statistics.median(extra)), {}


def calibrate(
    run_dirs: list[str | Path], profile: Profile, training: Training | None = None
) -> Profile:
    """The profile with a calibration fitted to the runs (replacing any earlier one). A fit
    beyond the format's bounds (a compute scale over 10^6: the runs took a million times
    the profile's times) is an InputFileError naming the field: the profile does not describe
    the devices the runs ran on, and no calibration can make it.

    `training` ({run directory as given: configuration}) reads a run under the configuration
    it is training under rather than its run.json: the run's own refit. A resume for more
    epochs trains under run.resume.json, which becomes run.json only with its first
    checkpoint, after the refit RECALIBRATE_AFTER_STEPS steps into its phase; read under
    run.json, its own phase and steps were past run.json's epochs, left out as a failed
    resume's, with a warning telling the running resume to run again (the thirty-eighth
    round)."""
    check_distinct_runs(run_dirs, "run")  # else its steps are counted as often as it is given
    try:
        return _calibrate(run_dirs, profile, training)
    except ValidationError as exc:
        runs = ", ".join(str(d) for d in run_dirs)
        raise InputFileError(
            f"{runs}: the calibration fitted to these runs is out of bounds "
            f"({first_error(exc)}); the profile's times are not of the devices they ran on: "
            "profile those devices (pipeplan profile) and calibrate that profile"
        ) from None


# What the partial calibration leaves null for the later fits (the step fit, the group
# rebuild's): a null parameter is named in not_fitted (`Calibration`), so it is, until each
# fit gives its value or its own reason.
PENDING = {
    "p2p": "fitted with the step terms",
    "group_rebuild_s": "fitted from the transitions",
}


def _calibrate(run_dirs: list[str | Path], profile: Profile, training: Training | None) -> Profile:
    observations = observe(run_dirs, profile, training)
    ranks = [r for o in observations for r in o.ranks]
    scales, why_compute = fit_compute(ranks)
    check_off_the_floor(run_dirs, scales, ranks)
    allreduce, why_allreduce = fit_allreduce(ranks)
    optimizer, why_optimizer = fit_optimizer(ranks)
    check_parts_off_the_floor(run_dirs, ranks)
    partial = Calibration(
        **scales,
        allreduce=allreduce,
        optimizer_s_per_byte=optimizer,
        runs=sorted({o.run for o in observations}),
        # The profile it is fitted to: a profile holding it is that one (`Profile`).
        fitted_to=uncalibrated_identity(profile),
        # What a plan of other shapes extrapolates to (plan and preview warn of it).
        shapes=[
            FittedShape(stages=stages, replicas=replicas)
            for stages, replicas in sorted(
                {(o.layout.num_stages, o.layout.replicas) for o in observations}
            )
        ],
        phases_used=len(observations),
        steps_used=sum(o.steps for o in observations),
        residual_median=0.0,
        residual_max=0.0,
        not_fitted={**why_compute, **why_allreduce, **why_optimizer, **PENDING},
    )
    fitted = fit_transfers_and_overhead(profile, partial, observations)
    # The byte moves are priced as the calibrated model prices them (its p2p link), so that
    # model's transitions reproduce the measured ones.
    with held(said=False):  # observe read the same runs and said their notices (once)
        rebuild, why_rebuild = fit_group_rebuild(
            run_dirs, profile.model_copy(update={"calibration": fitted}), training
        )
    earlier = {k: v for k, v in fitted.not_fitted.items() if k != "group_rebuild_s"}
    fitted = fitted.model_copy(
        update={"group_rebuild_s": rebuild, "not_fitted": {**earlier, **why_rebuild}}
    )
    calibrated = profile.model_copy(update={"calibration": fitted})
    signed = [predict(calibrated, o) / o.measured_step_s - 1 for o in observations]
    errors = [abs(e) for e in signed]
    final = fitted.model_copy(
        update={"residual_median": float(np.median(errors)), "residual_max": float(max(errors))}
    )
    check_fits_its_runs(run_dirs, final, float(np.median(signed)))
    # model_copy does not validate: the fields it set are checked here, the rest were at birth.
    return profile.model_copy(update={"calibration": Calibration.model_validate(dict(final))})


def check_off_the_floor(
    run_dirs: list[str | Path], scales: dict[str, float], ranks: list[RankObservation]
) -> None:
    """Refuse a forward or backward scale held at MIN_SCALE: the runs were faster than any
    scale calibrate fits, so the scales are no fit, and every step was priced slower than
    measured (the fifty-seventh round: a profile written at exit 0 whose steps were 1,203 %
    off, the runs 10^4 times faster than it). Its ceiling is the format's (`calibrate`).

        check_off_the_floor(run_dirs, scales, ranks)   # InputFileError when on the floor
    """
    for kind in ("fwd", "bwd"):
        if scales[f"{kind}_scale"] > MIN_SCALE * (1 + 1e-9):  # bounded_lstsq's rounding
            continue
        if kind == "fwd":
            pairs = [(r.active_fwd_s + r.nograd_fwd_s, r.measured_fwd_s) for r in ranks]
        else:
            pairs = [(r.bwd_s, r.measured_bwd_s) for r in ranks]
        faster = statistics.median(p / m for p, m in pairs if p > 0 and m > 0)
        runs = ", ".join(str(d) for d in run_dirs)
        words = {"fwd": "forward", "bwd": "backward"}[kind]
        raise InputFileError(
            f"{runs}: the measured {words} is {faster:,.0f}× faster than the profile predicts, "
            f"beyond what calibrate fits (a compute scale of at least {MIN_SCALE:g}); the "
            "profile is likely of another device: profile the device the runs ran on "
            "(pipeplan profile) and calibrate that profile"
        )


def check_parts_off_the_floor(run_dirs: list[str | Path], ranks: list[RankObservation]) -> None:
    """Refuse optimizer or all-reduce times more than 1/MIN_SCALE times faster than the
    uncalibrated model prices them (the median over the ranks fitted of predicted / measured):
    the bound `check_off_the_floor` holds the compute scales to. Found by the sixty-fifth round:
    records whose optimizer_s (or allreduce_s) were 10^-5 of what ran, the rest moved into
    wait_s, were fitted at exit 0 with a 0 % residual, a CPU AdamW 10^5 times faster than
    the same host's, or an all-reduce link of 1 TB/s between two gloo CPU ranks.

        check_parts_off_the_floor(run_dirs, ranks)   # InputFileError when off the floor
    """
    trained = [r for r in ranks if r.grad_bytes > 0 and r.measured_optimizer_s > 0]
    points = allreduce_points(ranks)
    # Each point priced on its own phase's link: (λ, 1/β) · its ring terms.
    links = [np.array([r.allreduce_link[0], 1.0 / r.allreduce_link[1]]) for r in points]
    parts = (
        (
            "optimizer step",
            "the profile's device",
            [(r.optimizer_s_per_byte * r.grad_bytes, r.measured_optimizer_s) for r in trained],
        ),
        (
            "all-reduce",
            "the cluster's all-reduce link",
            [
                (float(terms @ link), r.measured_allreduce_s)
                for terms, link, r in zip(ring_terms(points), links, points, strict=True)
            ],
        ),
    )
    runs = ", ".join(str(d) for d in run_dirs)
    advice = (
        "the profile is likely of another device: profile the device the runs ran on "
        "(pipeplan profile) and calibrate that profile"
    )
    for words, by, priced in parts:
        ratios = [p / m for p, m in priced if p > 0 and m > 0]
        if not ratios or (faster := statistics.median(ratios)) <= 1 / MIN_SCALE:
            continue
        raise InputFileError(
            f"{runs}: the measured {words} is {faster:,.0f}× faster than {by} prices it, "
            f"beyond what calibrate fits (at least {MIN_SCALE:g} of that time); {advice}"
        )


def check_fits_its_runs(run_dirs: list[str | Path], fit: Calibration, signed: float) -> None:
    """Refuse a fit whose median step-time error on its own runs is past MAX_FIT_ERROR: no
    calibration of them (the sixtieth round: runs faster than the profile's links allow were
    "fitted" at exit 0, 146 % off, p2p latency and step overhead on their floor of 0).
    `signed` is the median signed error: > 0, the fit prices the steps slower than measured.

        check_fits_its_runs(run_dirs, calibration, median_signed_error)  # InputFileError
    """
    if fit.residual_median <= MAX_FIT_ERROR:
        return
    # The step fit's terms (`StepFit`) a fit put on their lower bound, 0 (not a default).
    terms = [
        ("p2p latency", "p2p", fit.p2p.latency_s if fit.p2p else None),
        ("step overhead", "step_overhead_s", fit.step_overhead_s),
        ("per micro-batch overhead", "micro_batch_overhead_s", fit.micro_batch_overhead_s),
        ("input time per sample", "input_s_per_sample", fit.input_s_per_sample),
    ]
    floored = [name for name, field, v in terms if v == 0 and field not in fit.not_fitted]
    if signed > 0:
        why = "the runs were faster than any terms within the model's bounds can price them"
        why += f" ({', '.join(floored)} on their floor of 0)" if floored else ""
    else:
        why = "the runs were slower than the fitted terms price them"
    runs = ", ".join(str(d) for d in run_dirs)
    raise InputFileError(
        f"{runs}: the calibration fitted to these runs prices their steps with a median error "
        f"of {fit.residual_median:.1%} (worst {fit.residual_max:.1%}), past the "
        f"{MAX_FIT_ERROR:.0%} a fit may have: {why}; the profile is likely of another device: "
        "profile the device the runs ran on (pipeplan profile) and calibrate that profile"
    )


def calibrate_to_file(run_dirs: list[str], profile_path: str, out: str) -> Profile:
    """`pipeplan calibrate`: check the output first, write atomically; the input is untouched."""
    from pipeplan.fileio import check_writable, write_atomic

    # Not over an input: the profile, or a file the runs' records are read from.
    runs = [Path(d) / name for d in run_dirs for name in ("run.jsonl", "run.json", "profile.json")]
    check_writable(out, inputs=[profile_path, *runs])
    calibrated = calibrate(run_dirs, load(Profile, profile_path))
    try:
        text = dumps(calibrated)
    except TooLargeToRead as exc:  # the profile near the limit, its calibration past it
        raise OutputError(f"{out}: {exc}") from None
    write_atomic(out, text, user_output=True)
    return calibrated
