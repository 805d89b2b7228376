"""Fit the cost model to measured runs: the loop from `pipeplan run` back to the planner.

    calibrated = calibrate([run_dir], profile)   # the profile with a `calibration` section

Each phase is priced on the cluster its phase record names; what is fitted, and how, is in
docs/architecture.md §4.15.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.optimize import least_squares

from pipeplan.costmodel import CostModel
from pipeplan.errors import InputFileError
from pipeplan.formats import (
    Calibration,
    Cluster,
    FittedLink,
    Layout,
    PhaseRecord,
    Profile,
    RunConfig,
    StepRecord,
    dumps,
    load,
    read_records,
    steady_step,
)
from pipeplan.formats.run import WARMUP_STEPS_PER_PHASE

MIN_STEADY_STEPS = 3
STRAGGLER_FACTOR = 3.0  # a step this many times the phase median is a straggler, not data


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
    grad_bytes: float
    replicas: int


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


def load_run(run_dir: str | Path, profile: Profile) -> tuple[RunConfig, list]:
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise InputFileError(f"{run_dir}: no such run directory")
    config_path = run_dir / "run.json"
    if not config_path.exists() or not (run_dir / "run.jsonl").exists():
        raise InputFileError(f"{run_dir}: incomplete run (needs run.json and run.jsonl)")
    config = load(RunConfig, config_path)
    if config.model != profile.model.name:
        raise InputFileError(
            f"{run_dir}: a run of '{config.model}', but the profile is of '{profile.model.name}'"
        )
    return config, read_records(run_dir / "run.jsonl")


def observe(run_dirs: list[str | Path], profile: Profile) -> list[PhaseObservation]:
    """Every phase with enough steady steps, from every run."""
    base = profile.model_copy(update={"calibration": None})
    observations = []
    for run_dir in run_dirs:
        config, records = load_run(run_dir, profile)
        steps = [r for r in records if isinstance(r, StepRecord)]
        for phase in (r for r in records if isinstance(r, PhaseRecord)):
            model = CostModel(base, phase.pricing.cluster)
            settled = [s for s in steps if s.phase == phase.phase and steady_step(s, phase, config)]
            mine = settled[WARMUP_STEPS_PER_PHASE:]
            if len(mine) < MIN_STEADY_STEPS:
                continue
            median = statistics.median(s.step_s for s in mine)
            steady = [s for s in mine if s.step_s <= STRAGGLER_FACTOR * median]
            observations.append(_phase_observation(str(run_dir), phase, steady, model))
    if not observations:
        raise InputFileError(
            "the runs have no phase with enough steps to fit: a phase needs "
            f"{WARMUP_STEPS_PER_PHASE + MIN_STEADY_STEPS} steps ({WARMUP_STEPS_PER_PHASE} warm-up, "
            f"{MIN_STEADY_STEPS} measured)"
        )
    return observations


def _phase_observation(
    run: str, phase: PhaseRecord, steps: list[StepRecord], model: CostModel
) -> PhaseObservation:
    layout = phase.layout
    m, M, k = layout.micro_batch_size, layout.micro_batches, layout.frozen_layers
    f, g, n = (model.layer_times(kind, m) for kind in ("fwd", "bwd", "nograd"))
    active = np.arange(model.num_layers) >= k
    ranks = []
    for rank in {r.rank for r in steps[0].ranks if r.stage is not None}:
        times = [next(r for r in s.ranks if r.rank == rank) for s in steps]
        stage = times[0].stage
        first, stop = layout.boundaries[stage], layout.boundaries[stage + 1]
        inside = np.zeros(model.num_layers, dtype=bool)
        inside[first:stop] = True
        runs_frozen = inside & ~active & (not (layout.cached and stage == 0))
        ranks.append(
            RankObservation(
                measured_fwd_s=statistics.median(t.fwd_s for t in times),
                measured_bwd_s=statistics.median(t.bwd_s for t in times),
                measured_allreduce_s=statistics.median(t.allreduce_s for t in times),
                measured_optimizer_s=statistics.median(t.optimizer_s for t in times),
                active_fwd_s=M * float(f[inside & active].sum()),
                nograd_fwd_s=M * float(n[runs_frozen].sum()),
                bwd_s=M * float(g[inside & active].sum()),
                grad_bytes=float(model.param_bytes[inside & active].sum()),
                replicas=layout.replicas,
            )
        )
    return PhaseObservation(
        run,
        phase,
        statistics.median(s.step_s for s in steps),
        len(steps),
        ranks,
    )


def _robust(residuals, x0: list[float], lower: float = 0.0) -> np.ndarray:
    return least_squares(residuals, x0, bounds=(lower, np.inf), loss="soft_l1", f_scale=0.1).x


def fit_compute(ranks: list[RankObservation]) -> tuple[float, float, float]:
    fwd = [r for r in ranks if r.measured_fwd_s > 0 and r.active_fwd_s + r.nograd_fwd_s > 0]
    has_nograd = any(r.nograd_fwd_s > 0 for r in fwd)

    def fwd_residuals(x: np.ndarray) -> np.ndarray:
        a, c = x[0], (x[1] if has_nograd else x[0])
        return np.array(
            [(a * r.active_fwd_s + c * r.nograd_fwd_s) / r.measured_fwd_s - 1 for r in fwd]
        )

    fwd_scale, nograd_scale = 1.0, 1.0
    if fwd:
        x = _robust(fwd_residuals, [1.0, 1.0] if has_nograd else [1.0], lower=1e-3)
        fwd_scale = float(x[0])
        nograd_scale = float(x[1]) if has_nograd else fwd_scale
    bwd = [r for r in ranks if r.measured_bwd_s > 0 and r.bwd_s > 0]
    bwd_scale = fwd_scale
    if bwd:
        x = _robust(
            lambda x: np.array([x[0] * r.bwd_s / r.measured_bwd_s - 1 for r in bwd]),
            [1.0],
            lower=1e-3,
        )
        bwd_scale = float(x[0])
    return fwd_scale, bwd_scale, nograd_scale


def fit_allreduce(ranks: list[RankObservation]) -> FittedLink | None:
    points = [r for r in ranks if r.replicas > 1 and r.grad_bytes > 0 and r.measured_allreduce_s]
    if len({r.grad_bytes for r in points}) < 2:
        return None  # one message size cannot separate latency from bandwidth

    def residuals(x: np.ndarray) -> np.ndarray:
        lat, inv_bw = x
        out = []
        for r in points:
            steps = 2 * (r.replicas - 1)
            model = steps * lat + steps / r.replicas * r.grad_bytes * inv_bw
            out.append(model / r.measured_allreduce_s - 1)
        return np.array(out)

    lat, inv_bw = _robust(residuals, [1e-4, 1e-9])
    return FittedLink(latency_s=float(lat), bandwidth_bytes_per_s=1.0 / max(inv_bw, 1e-15))


def fit_optimizer(ranks: list[RankObservation]) -> float | None:
    points = [r for r in ranks if r.grad_bytes > 0 and r.measured_optimizer_s > 0]
    if not points:
        return None
    ratios = [r.measured_optimizer_s / r.grad_bytes for r in points]
    return float(statistics.median(ratios))


def fit_transfers_and_overhead(
    profile: Profile, partial: Calibration, observations: list[PhaseObservation]
) -> tuple[Calibration, float, float]:
    """Jointly, with the simulator in the loop: the stage-to-stage transfer latency as the
    pipeline sees it (send/recv bookkeeping per micro-batch included; only pipelined phases
    inform it, and the bandwidth stays as profiled: these messages are too small to separate
    it), and the step time outside the schedule, fixed + per sample of a replica's batch."""
    base = observations[0].cluster.intra_node
    pipelined = any(o.layout.num_stages > 1 for o in observations)
    several_sizes = len({o.samples_per_replica for o in observations}) > 1

    def calibration(latency: float, per_micro_batch: float) -> Calibration:
        link = FittedLink(latency_s=latency, bandwidth_bytes_per_s=base.bandwidth_bytes_per_s)
        update = {"p2p": link if pipelined else None, "micro_batch_overhead_s": per_micro_batch}
        return partial.model_copy(update=update)

    def residuals(x: np.ndarray) -> np.ndarray:
        latency, fixed, per_sample, per_micro_batch = x
        trial = profile.model_copy(update={"calibration": calibration(latency, per_micro_batch)})
        return np.array(
            [
                (predict(trial, o) + fixed + per_sample * o.samples_per_replica) / o.measured_step_s
                - 1
                for o in observations
            ]
        )

    # Parameters the data cannot inform are pinned by tight bounds.
    several_counts = len({o.layout.micro_batches for o in observations}) > 1
    lower = [0.0 if pipelined else base.latency_s, -np.inf, 0.0, 0.0]
    upper = [
        np.inf if pipelined else base.latency_s * (1 + 1e-9),
        np.inf,
        np.inf if several_sizes else 1e-12,
        np.inf if several_counts else 1e-12,
    ]
    x0 = [base.latency_s, 0.0, 0.0, 0.0]
    latency, fixed, per_sample, per_micro_batch = least_squares(
        residuals, x0, bounds=(lower, upper), loss="soft_l1", f_scale=0.1
    ).x
    return calibration(float(latency), float(per_micro_batch)), float(fixed), float(per_sample)


def predict(profile: Profile, observation: PhaseObservation) -> float:
    model = CostModel(profile, observation.cluster)
    return model.evaluate(observation.layout, record=False).step_s


def calibrate(run_dirs: list[str | Path], profile: Profile) -> Profile:
    """The profile with a calibration fitted to the runs (replacing any earlier one)."""
    observations = observe(run_dirs, profile)
    ranks = [r for o in observations for r in o.ranks]
    fwd_scale, bwd_scale, nograd_scale = fit_compute(ranks)
    partial = Calibration(
        fwd_scale=fwd_scale,
        bwd_scale=bwd_scale,
        nograd_scale=nograd_scale,
        allreduce=fit_allreduce(ranks),
        optimizer_s_per_byte=fit_optimizer(ranks),
        runs=sorted({o.run for o in observations}),
        phases_used=len(observations),
        steps_used=sum(o.steps for o in observations),
        residual_median=0.0,
        residual_max=0.0,
    )
    with_transfers, fixed, per_sample = fit_transfers_and_overhead(profile, partial, observations)
    fitted = with_transfers.model_copy(
        update={"step_overhead_s": fixed, "input_s_per_sample": per_sample}
    )
    calibrated = profile.model_copy(update={"calibration": fitted})
    errors = [abs(predict(calibrated, o) / o.measured_step_s - 1) for o in observations]
    final = fitted.model_copy(
        update={"residual_median": float(np.median(errors)), "residual_max": float(max(errors))}
    )
    return profile.model_copy(update={"calibration": final})


def calibrate_to_file(run_dirs: list[str], profile_path: str, out: str) -> Profile:
    """`pipeplan calibrate`: check the output first, write atomically; the input is untouched."""
    from pipeplan.fileio import check_writable, write_atomic

    check_writable(out)
    calibrated = calibrate(run_dirs, load(Profile, profile_path))
    write_atomic(out, dumps(calibrated))
    return calibrated
