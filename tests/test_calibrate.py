"""Calibration recovers known corrections from run records — every parameter it fits, exactly
from exact data and within stated bounds from noisy data —, leaves what the runs cannot identify
at its default with a reason, and refuses runs it cannot use."""

import json
import statistics
from itertools import pairwise
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pytest
from conftest import fake_pricing, write_fake_profile

import cli
from executor.planning import shipped_profile
from pipeplan.calibrate import (
    RankObservation,
    calibrate,
    fit_allreduce,
    fit_compute,
    fit_group_rebuild,
    observe,
    predict,
)
from pipeplan.cluster import run_cluster
from pipeplan.costmodel import ADAMW_BYTES_MOVED_PER_PARAM_BYTE, CostModel, same_placement
from pipeplan.errors import BadArgumentError, InputFileError
from pipeplan.formats import (
    Calibration,
    EpochRecord,
    FittedLink,
    FittedShape,
    Layout,
    Link,
    PhaseRecord,
    Plan,
    Profile,
    RankTimes,
    RunConfig,
    StepRecord,
    dumps,
    load,
)
from pipeplan.plan import priced_phases, profile_identity

PROFILE_PATH = shipped_profile("vit-digits", "cpu")
TRUTH = Calibration(
    fwd_scale=1.3,
    bwd_scale=1.15,
    nograd_scale=1.4,
    allreduce=FittedLink(latency_s=2e-4, bandwidth_bytes_per_s=5e8),
    optimizer_s_per_byte=2e-9,
    step_overhead_s=0.004,
    input_s_per_sample=3e-5,
    runs=["truth"],
    phases_used=1,
    steps_used=3,
    residual_median=0,
    residual_max=0,
    # Null, as calibrate leaves them unfitted (the truth's tests set some with model_copy).
    not_fitted=dict.fromkeys(
        ("fwd_call_scale", "nograd_call_scale", "bwd_call_scale", "p2p", "group_rebuild_s"),
        "not in the truth",
    ),
)


class Phase(NamedTuple):
    frozen: int
    stages: int
    replicas: int
    micro_batches: int
    schedule: str
    boundaries: tuple[int, ...]
    cached: bool = False


# vit-digits' 10 layers on 2 ranks
PHASES = [
    Phase(0, 2, 1, 4, "1f1b", (0, 5, 10)),
    Phase(0, 1, 2, 2, "gpipe", (0, 10)),
    Phase(3, 2, 1, 2, "gpipe", (0, 6, 10)),
    Phase(5, 1, 2, 1, "1f1b", (0, 10)),
]


def layout_of(phase: Phase, global_batch: int = 64) -> Layout:
    S, D, M = phase.stages, phase.replicas, phase.micro_batches
    return Layout(
        frozen_layers=phase.frozen,
        cached=phase.cached,
        micro_batches=M,
        micro_batch_size=global_batch // (D * M),
        schedule=phase.schedule,
        boundaries=phase.boundaries,
        rank_map=tuple(tuple(r * S + s for s in range(S)) for r in range(D)),
    )


def rank_times(model: CostModel, layout: Layout) -> list[RankTimes]:
    """What each rank would measure if the truth calibration held exactly."""
    m, M, frozen = layout.micro_batch_size, layout.micro_batches, layout.frozen_layers
    f, g, n = (model.layer_times(kind, m) for kind in ("fwd", "bwd", "nograd"))  # truth-scaled
    out = []
    for replica, row in enumerate(layout.rank_map):
        for stage, rank in enumerate(row):
            first, stop = layout.boundaries[stage], layout.boundaries[stage + 1]
            idx = np.arange(first, stop)
            active, frozen_idx = idx[idx >= frozen], idx[idx < frozen]
            if layout.cached and stage == 0:
                frozen_idx = frozen_idx[:0]  # stage 0 reads the cache instead
            grad_bytes = float(model.param_bytes[active].sum())
            out.append(
                RankTimes(
                    rank=rank,
                    stage=stage,
                    replica=replica,
                    step_s=0.0,
                    fwd_s=M * float(f[active].sum() + n[frozen_idx].sum()),
                    bwd_s=M * float(g[active].sum()),
                    wait_s=0.0,
                    allreduce_s=model.allreduce_s(
                        grad_bytes, layout.replicas, model.intra_allreduce_link
                    ),
                    optimizer_s=model.optimizer_s(grad_bytes),
                    input_s=0.0,
                )
            )
    # A real step record lists every rank of the world; one the layout leaves idle has no
    # stage and times nothing (records that omit it are refused).
    placed = {rank for row in layout.rank_map for rank in row}
    zero = dict.fromkeys(("step_s", "fwd_s", "bwd_s", "wait_s", "allreduce_s"), 0.0)
    for rank in sorted(set(range(model.cluster.num_devices)) - placed):
        out.append(
            RankTimes(rank=rank, stage=None, replica=None, optimizer_s=0.0, input_s=0.0, **zero)
        )
    return out


MEASURED = ("fwd_s", "bwd_s", "allreduce_s", "optimizer_s")


def noisy(
    ranks: list[RankTimes], rng: np.random.Generator, sigma: float, rings: np.random.Generator
) -> list[RankTimes]:
    """Every measured time times its own lognormal factor (median 1); a stage's all-reduce
    then one factor for its ring (from `rings`), as its replicas take part in one collective
    (calibrate reads the ring's time as the least of theirs: `calibrate.ring_allreduce_s`)."""
    if not sigma:
        return ranks
    noisy = [
        r.model_copy(update={k: getattr(r, k) * rng.lognormal(0.0, sigma) for k in MEASURED})
        for r in ranks
    ]
    ring = {r.stage: rings.lognormal(0.0, sigma) for r in ranks}
    return [
        r.model_copy(update={"allreduce_s": plain.allreduce_s * ring[r.stage]})
        for r, plain in zip(noisy, ranks, strict=True)
    ]


def closing_record(lines: list, epoch: int, phase: int, frozen: int) -> EpochRecord:
    """The record closing `epoch`, whose steps are the last of `lines`, as the executor
    writes it: its steps counted, its time theirs and that of the transitions within it
    (its clock runs through them: the sixty-first round holds a record to that), their mean
    loss."""
    steps = [r for r in lines if isinstance(r, StepRecord) and r.epoch == epoch]
    stepped, within = None, 0.0  # the epoch of the last step; the transitions within `epoch`
    for record in lines:
        if isinstance(record, StepRecord):
            stepped = record.epoch
        elif isinstance(record, PhaseRecord) and stepped == record.start_epoch == epoch:
            within += record.transition_s
    epoch_s = sum(r.step_s for r in steps) + within
    return EpochRecord(
        epoch=epoch,
        phase=phase,
        frozen_layers=frozen,
        steps=len(steps),
        epoch_s=epoch_s,
        train_loss=1.0,
        eval_accuracy=None,
        samples_per_s=64 * len(steps) / epoch_s,
    )


def write_run(
    run_dir: Path,
    profile: Profile,
    steps_per_phase: int = 8,
    *,
    phases: list[Phase] = PHASES,
    truth: Calibration = TRUTH,
    nproc: int = 2,
    step_jitter: float = 0.003,
    sigma: float = 0.0,
    seed: int = 0,
    model: str = "vit-digits",
    priced: str | None = None,
) -> None:
    """Run records of `phases` as the cost model with `truth` prices them: step times with a
    normal jitter (`step_jitter`, the original test data) or, with `sigma`, every measured time
    with lognormal noise (`seed`); both 0 is exact data. `model`: run.json's, a built-in
    name or a folder; `priced`: the built-in whose shipped profile priced the run (`model`'s)."""
    data = "digits" if model == "vit-digits" else "synth-text"
    # An epoch for each cached phase whose cache starts empty, and the last.
    epochs = 1 + sum(
        p.cached and (i == 0 or not phases[i - 1].cached) for i, p in enumerate(phases)
    )
    config = RunConfig(
        name=run_dir.name, model=model, data=data, nproc=nproc, global_batch=64, epochs=epochs
    )
    run_dir.mkdir()
    (run_dir / "run.json").write_text(dumps(config))
    cost = CostModel(
        profile.model_copy(update={"calibration": truth}), run_cluster(config, profile)
    )
    rng = np.random.default_rng(seed)
    rings = np.random.default_rng(seed + 1)  # apart: the other times' draws stay the seed's
    lines, step, epoch, previous = [], 0, 0, None
    for index, phase in enumerate(phases):
        layout = layout_of(phase)
        step_s = cost.evaluate(layout, record=False).step_s
        # A transition takes what `truth` prices: its byte move plus its group rebuild.
        transition_s = cost.transition_s(previous, layout) if previous is not None else 0.0
        lines.append(
            PhaseRecord(
                phase=index,
                start_step=step,
                start_epoch=epoch,
                layout=layout,
                predicted_step_s=None,
                pricing=fake_pricing(nproc, priced or model).model_copy(
                    update={"cluster": cost.cluster}
                ),
                transition_s=transition_s,
            )
        )
        ranks = rank_times(cost, layout)
        if layout.cached and (previous is None or not previous.cached):
            # Its cache starts empty: the epoch it starts in fills it (no hits: calibrate
            # leaves those steps out), and it is read from the next epoch on.
            filling = [
                StepRecord(
                    step=step + n,
                    epoch=epoch,
                    phase=index,
                    step_s=step_s,
                    loss=1.0,
                    samples_per_s=64 / step_s,
                    ranks=ranks,
                )
                for n in range(steps_per_phase)
            ]
            lines += filling
            step += len(filling)
            lines.append(closing_record(lines, epoch, index, layout.frozen_layers))
            epoch += 1
        previous = layout
        for _ in range(steps_per_phase):
            factor = float(rng.normal(1.0, step_jitter)) if step_jitter else 1.0
            if sigma:
                factor *= float(rng.lognormal(0.0, sigma))
            # samples_per_s is of the step's own time, as the executor writes it (the format
            # holds them to each other since the sixteenth round).
            lines.append(
                StepRecord(
                    step=step,
                    epoch=epoch,
                    phase=index,
                    step_s=step_s * factor,
                    loss=1.0,
                    samples_per_s=64 / (step_s * factor),
                    cache_hits=64 if phase.cached else 0,
                    ranks=noisy(ranks, rng, sigma, rings),
                )
            )
            step += 1
    (run_dir / "run.jsonl").write_text("".join(r.model_dump_json() + "\n" for r in lines))
    write_fake_profile(run_dir, priced or model)


# 16 phases of vit-digits on 4 ranks, global batch 64: S and D in {1, 2, 4}, M from 1 to 16,
# m from 1 to 64, 0 to 6 frozen layers, cached or not, both schedules — enough that every
# parameter moves the measured times in its own way: each step term's unit column lies ≥ 0.37
# from the span of those before it (≥ 0.16 with the 4 phases above; collinear: ~1e-11).
RICH = [
    Phase(0, 1, 1, 1, "gpipe", (0, 10)),
    Phase(0, 2, 1, 2, "gpipe", (0, 5, 10)),
    Phase(0, 2, 2, 4, "1f1b", (0, 5, 10)),
    Phase(0, 1, 4, 2, "1f1b", (0, 10)),
    Phase(3, 1, 2, 2, "gpipe", (0, 10)),
    Phase(5, 1, 4, 1, "gpipe", (0, 10), cached=True),
    Phase(2, 4, 1, 8, "1f1b", (0, 3, 6, 8, 10)),
    Phase(4, 2, 2, 2, "gpipe", (0, 6, 10), cached=True),
    Phase(6, 2, 1, 4, "1f1b", (0, 7, 10)),
    Phase(1, 4, 1, 4, "gpipe", (0, 2, 5, 8, 10)),
    Phase(0, 4, 1, 16, "1f1b", (0, 3, 6, 8, 10)),
    Phase(0, 1, 1, 8, "gpipe", (0, 10)),
    Phase(2, 1, 4, 4, "1f1b", (0, 10)),
    Phase(0, 2, 2, 8, "gpipe", (0, 5, 10)),
    Phase(3, 4, 1, 4, "1f1b", (0, 4, 6, 8, 10), cached=True),
    Phase(0, 2, 1, 16, "1f1b", (0, 5, 10)),
]


def cluster_bandwidth(profile: Profile, nproc: int = 4) -> float:
    """The p2p bandwidth the fit keeps (it fits the latency only): the run cluster's."""
    config = RunConfig(
        name="x", model="vit-digits", data="digits", nproc=nproc, global_batch=64, epochs=1
    )
    return run_cluster(config, profile).intra_node.bandwidth_bytes_per_s


# Per-call scales as the vit-digits grid fitted them (BENCHMARKS.md): a run pays less per
# layer call than the profiler timing each layer alone, and more per sample.
CALL_SCALES = {"fwd_call_scale": 0.5, "bwd_call_scale": 0.75, "nograd_call_scale": 0.8}


def full_truth(profile: Profile) -> Calibration:
    """Every parameter the fit claims set away from its default, each a visible part of the
    step (1–10 ms of 40–250 ms), so that noisy data can still tell them apart."""
    p2p = FittedLink(latency_s=1e-3, bandwidth_bytes_per_s=cluster_bandwidth(profile))
    update = {
        **CALL_SCALES,
        "p2p": p2p,
        "micro_batch_overhead_s": 2e-3,
        "step_overhead_s": 0.01,
        "input_s_per_sample": 1e-4,
    }
    return TRUTH.model_copy(update=update)


def zero_truth(profile: Profile) -> Calibration:
    """Every parameter that may be 0 at 0: the fit must land on the bound exactly."""
    update = {
        "allreduce": FittedLink(latency_s=0.0, bandwidth_bytes_per_s=5e8),
        "p2p": FittedLink(latency_s=0.0, bandwidth_bytes_per_s=cluster_bandwidth(profile)),
        "micro_batch_overhead_s": 0.0,
        "step_overhead_s": 0.0,
        "input_s_per_sample": 0.0,
    }
    return TRUTH.model_copy(update=update)


def parameters(c: Calibration) -> dict[str, float | None]:
    """Every parameter the fit claims, by name (None: left to the cluster's link)."""
    return {
        "fwd_scale": c.fwd_scale,
        "bwd_scale": c.bwd_scale,
        "nograd_scale": c.nograd_scale,
        # None in a calibration means the kind's own scale: compare what the cost model uses.
        **{f"{kind}_call_scale": c.scales(kind)[0] for kind in ("fwd", "bwd", "nograd")},
        "allreduce latency": c.allreduce and c.allreduce.latency_s,
        "allreduce bandwidth": c.allreduce and c.allreduce.bandwidth_bytes_per_s,
        "optimizer_s_per_byte": c.optimizer_s_per_byte,
        "p2p latency": c.p2p and c.p2p.latency_s,
        "micro_batch_overhead_s": c.micro_batch_overhead_s,
        "step_overhead_s": c.step_overhead_s,
        "input_s_per_sample": c.input_s_per_sample,
    }


def relative_errors(fitted: Calibration, truth: Calibration) -> dict[str, float]:
    got, want = parameters(fitted), parameters(truth)
    return {name: abs(got[name] / want[name] - 1) for name in want}


@pytest.fixture(scope="module")
def profile() -> Profile:
    return load(Profile, PROFILE_PATH)


def test_calibration_recovers_known_corrections(tmp_path, profile):
    write_run(tmp_path / "run", profile)
    c = calibrate([tmp_path / "run"], profile).calibration
    assert c.fwd_scale == pytest.approx(1.3, rel=0.02)
    assert c.bwd_scale == pytest.approx(1.15, rel=0.02)
    assert c.nograd_scale == pytest.approx(1.4, rel=0.05)
    assert c.optimizer_s_per_byte == pytest.approx(2e-9, rel=0.02)
    assert c.residual_median < 0.01 and c.residual_max < 0.03
    assert c.phases_used == 4 and c.steps_used == 4 * (8 - 2)


def test_calibrated_predictions_beat_raw_ones(tmp_path, profile):
    write_run(tmp_path / "run", profile)
    calibrated = calibrate([tmp_path / "run"], profile)
    for obs in observe([tmp_path / "run"], profile):
        raw = abs(predict(profile, obs) / obs.measured_step_s - 1)
        fitted = abs(predict(calibrated, obs) / obs.measured_step_s - 1)
        assert fitted < 0.03 and fitted < raw


def test_bad_runs_are_one_line_errors(tmp_path, profile):
    with pytest.raises(InputFileError, match="no such run directory"):
        calibrate([tmp_path / "missing"], profile)
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputFileError, match=r"not a run directory \(no run.json\)"):
        calibrate([tmp_path / "empty"], profile)
    write_run(tmp_path / "short", profile, steps_per_phase=4)
    with pytest.raises(InputFileError, match="needs 5 steps"):
        calibrate([tmp_path / "short"], profile)
    other = load(Profile, shipped_profile("bert-synth", "cpu"))
    with pytest.raises(
        InputFileError, match="is a run of 'vit-digits' but --profile profiles 'bert-synth'"
    ):
        calibrate([tmp_path / "short"], other)


def test_cli_leaves_the_input_profile_untouched(tmp_path, capsys):
    before = PROFILE_PATH.read_bytes()
    out = tmp_path / "cal.json"
    assert (
        cli.main(
            ["calibrate", str(tmp_path / "nope"), "--profile", str(PROFILE_PATH), "--out", str(out)]
        )
        == 2
    )
    assert "no such run directory" in capsys.readouterr().err and not out.exists()
    write_run(tmp_path / "run", load(Profile, PROFILE_PATH))
    assert (
        cli.main(
            ["calibrate", str(tmp_path / "run"), "--profile", str(PROFILE_PATH), "--out", str(out)]
        )
        == 0
    )
    assert PROFILE_PATH.read_bytes() == before
    assert json.loads(out.read_text())["calibration"]["runs"] == [str(tmp_path / "run")]


@pytest.mark.parametrize("truth_of", [full_truth, zero_truth])
def test_exact_data_give_back_every_parameter(tmp_path, profile, truth_of):
    truth = truth_of(profile)
    write_run(tmp_path / "run", profile, phases=RICH, truth=truth, nproc=4, step_jitter=0.0)
    c = calibrate([tmp_path / "run"], profile).calibration
    got, want = parameters(c), parameters(truth)
    for name, value in want.items():
        assert got[name] == pytest.approx(value, rel=1e-6, abs=1e-12), name
    assert c.p2p.bandwidth_bytes_per_s == truth.p2p.bandwidth_bytes_per_s  # kept, not fitted
    assert c.not_fitted == {} and c.residual_max < 1e-12


def test_per_call_and_per_sample_parts_of_a_layer_are_scaled_apart(tmp_path, profile):
    # Runs at m = 1…64 whose layers pay CALL_SCALES of the profiled per-call time and the
    # TRUTH scales of the per-sample time: the fit gives back both, for all three kinds.
    truth = TRUTH.model_copy(update=CALL_SCALES)
    write_run(tmp_path / "run", profile, phases=RICH, truth=truth, nproc=4, step_jitter=0.0)
    c = calibrate([tmp_path / "run"], profile).calibration
    for name, value in CALL_SCALES.items():
        assert getattr(c, name) == pytest.approx(value, rel=1e-6), name
    for name in ("fwd_scale", "bwd_scale", "nograd_scale"):
        assert getattr(c, name) == pytest.approx(getattr(truth, name), rel=1e-6), name
    assert not set(c.not_fitted) & {*CALL_SCALES, "fwd_scale", "bwd_scale", "nograd_scale"}
    # The cost model applies them: a layer at m costs call·a + scale·c·m.
    model = CostModel(profile.model_copy(update={"calibration": c}), run_cluster_of(profile))
    raw = CostModel(profile, run_cluster_of(profile))
    a, per_call = raw.layer_call_times("fwd"), model.layer_call_times("fwd")
    assert per_call == pytest.approx(0.5 * a, rel=1e-6)
    assert model.layer_times("fwd", 8) - per_call == pytest.approx(
        1.3 * (raw.layer_times("fwd", 8) - a), rel=1e-6
    )


def run_cluster_of(profile: Profile):
    config = RunConfig(
        name="x", model="vit-digits", data="digits", nproc=4, global_batch=64, epochs=1
    )
    return run_cluster(config, profile)


# Relative error bounds with 5 % lognormal noise on every measured time, 100 steps per phase.
# Observed errors (%), seed 0 (the test) / the largest over seeds 0–19:
#   fwd_scale 0.55 / 0.55, bwd_scale 0.31 / 0.32, nograd_scale 0.11 / 2.48,
#   fwd_call_scale 1.60 / 1.60, bwd_call_scale 0.95 / 1.32, nograd_call_scale 0.65 / 9.36,
#   all-reduce latency 1.5 / 10.3, all-reduce bandwidth 0.06 / 0.90, optimizer 0.03 / 0.25,
#   p2p latency 0.75 / 10.6, per micro-batch 1.5 / 9.1, step overhead 4.6 / 8.0,
#   per sample 6.1 / 21.8.
# Bound: the largest over the 20 seeds × 1.5, rounded up — so that a change in how the noise is
# drawn does not break the test, while a bias of the size the old fit had still does.
NOISY_BOUNDS = {
    "fwd_scale": 0.009,
    "bwd_scale": 0.005,
    "nograd_scale": 0.04,
    "fwd_call_scale": 0.025,
    "bwd_call_scale": 0.02,
    "nograd_call_scale": 0.15,
    "allreduce latency": 0.16,
    "allreduce bandwidth": 0.015,
    "optimizer_s_per_byte": 0.004,
    "p2p latency": 0.16,
    "micro_batch_overhead_s": 0.14,
    "step_overhead_s": 0.13,
    "input_s_per_sample": 0.33,
}


def test_noisy_data_give_every_parameter_within_its_bound(tmp_path, profile):
    truth = full_truth(profile)
    run = tmp_path / "run"
    write_run(run, profile, 100, phases=RICH, truth=truth, nproc=4, step_jitter=0.0, sigma=0.05)
    c = calibrate([run], profile).calibration
    errors = relative_errors(c, truth)
    assert {name: e for name, e in errors.items() if e > NOISY_BOUNDS[name]} == {}
    assert c.not_fitted == {}


def test_a_replica_that_waits_in_the_all_reduce_leaves_the_link_as_fitted_without(
    tmp_path, profile
):
    """Found by the sixty-second round: a replica that ends its backward first waits inside
    the all-reduce for the last one, and each rank's own all-reduce time, waits and all, was
    fitted: a 1x2 run's link came out ~43x slower than the profile's, and the re-plan chose
    one replica, which trained slower. A stage's all-reduce is its ring's own time, the least
    of its replicas' (`calibrate.ring_allreduce_s`): 4 ms of waiting on one replica of every
    ring leave the fitted link as it was."""
    fitted = []
    for waits in (0.0, 0.004):
        run = tmp_path / f"run-{waits}"
        write_run(run, profile, 20, phases=RICH, truth=full_truth(profile), nproc=4)
        records = [json.loads(line) for line in (run / "run.jsonl").read_text().splitlines()]
        for record in records:
            first: dict[int, int] = {}  # the first replica of each ring waits
            for rank in record.get("ranks", ()):
                ring = rank["stage"]
                if rank["allreduce_s"] > 0 and first.setdefault(ring, rank["rank"]) == rank["rank"]:
                    rank["allreduce_s"] += waits
        (run / "run.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
        fitted.append(calibrate([run], profile).calibration.allreduce)
    assert fitted[0] is not None and fitted[1] == fitted[0]


# Three phases of one layer sequence with the same micro-batch size m = 16: M·m = 16·M, so the
# per-sample input time moves the step exactly as the per-micro-batch overhead does.
CONFOUNDED = [
    Phase(0, 1, 1, 4, "gpipe", (0, 10)),
    Phase(0, 1, 2, 2, "gpipe", (0, 10)),
    Phase(0, 1, 4, 1, "1f1b", (0, 10)),
]


def test_what_the_phases_cannot_tell_apart_keeps_its_default_and_says_why(
    tmp_path, profile, capsys
):
    update = {"nograd_scale": 1.3, "micro_batch_overhead_s": 2e-3}  # input_s_per_sample 3e-5
    truth = TRUTH.model_copy(update=update)
    write_run(tmp_path / "run", profile, phases=CONFOUNDED, truth=truth, nproc=4, step_jitter=0.0)
    c = calibrate([tmp_path / "run"], profile).calibration
    assert set(c.not_fitted) == {
        "nograd_scale",
        "fwd_call_scale",
        "bwd_call_scale",
        "nograd_call_scale",
        "input_s_per_sample",
        "p2p",
    }
    assert "no frozen layer ran" in c.not_fitted["nograd_scale"]
    # One micro-batch size: a layer's per-call part weighs the same on every rank.
    for kind in ("fwd", "bwd"):
        assert "not separable" in c.not_fitted[f"{kind}_call_scale"]
        assert c.scales(kind)[0] == pytest.approx(c.scales(kind)[1], rel=1e-9)
    assert (
        "not separable from step_overhead_s, micro_batch_overhead_s"
        in (c.not_fitted["input_s_per_sample"])
    )
    assert "no pipelined phase" in c.not_fitted["p2p"]
    assert c.input_s_per_sample == 0.0 and c.p2p is None and c.nograd_scale == c.fwd_scale
    # What the phases cannot separate stays with the term admitted first: μ + m · per sample.
    assert c.micro_batch_overhead_s == pytest.approx(2e-3 + 16 * 3e-5, rel=1e-6)
    got, want = parameters(c), parameters(truth)
    for name in ("fwd_scale", "bwd_scale", "optimizer_s_per_byte", "step_overhead_s"):
        assert got[name] == pytest.approx(want[name], rel=1e-6), name
    for name in ("allreduce latency", "allreduce bandwidth"):
        assert got[name] == pytest.approx(want[name], rel=1e-6), name
    assert c.residual_max < 1e-12  # these layouts are still predicted exactly

    out = tmp_path / "cal.json"
    args = ["calibrate", str(tmp_path / "run"), "--profile", str(PROFILE_PATH), "--out", str(out)]
    assert cli.main(args) == 0
    printed = " ".join(capsys.readouterr().err.split())  # the console wraps long lines
    assert "not fitted: input_s_per_sample — not separable" in printed


@pytest.mark.parametrize("slower", [1.0, 2.5, 0.0025])
def test_one_gradient_size_per_replica_scales_the_clusters_allreduce(tmp_path, profile, slower):
    """Every data-parallel phase all-reduces the whole model over 2 replicas: one G/D, where
    latency and bandwidth trade off exactly. What the phases identify is how much slower than
    the cluster's link the run's all-reduces were: the fit scales that link as a whole, and
    recovers a truth that is the cluster's link `slower` times over (the fidelity grid of
    2026-12-03: left at the profiled link, a 1×2 phase of another G/D than the others was
    predicted 18 % short). Found by the sixty-first round: nothing said the link was not
    fitted as two parameters (the README promised not_fitted would); now not_fitted says so,
    and the calibration loads and prices as calibrate wrote it. Its factor is printed to three
    significant digits: 400× faster read "×0.00" (the sixty-fifth round)."""
    phases = [
        Phase(0, 2, 1, 2, "gpipe", (0, 5, 10)),
        Phase(0, 2, 1, 4, "1f1b", (0, 5, 10)),
        Phase(2, 2, 1, 4, "gpipe", (0, 4, 10)),
        Phase(0, 1, 2, 2, "gpipe", (0, 10)),
        Phase(0, 1, 2, 4, "1f1b", (0, 10)),
    ]
    link = run_cluster_of(profile).allreduce_link
    scaled = FittedLink(
        latency_s=slower * link.latency_s, bandwidth_bytes_per_s=link.bandwidth_bytes_per_s / slower
    )
    truth = TRUTH.model_copy(update={"allreduce": scaled})
    write_run(tmp_path / "run", profile, phases=phases, truth=truth, step_jitter=0.0)
    calibrated = calibrate([tmp_path / "run"], profile)
    c = calibrated.calibration
    assert set(c.not_fitted) == {"nograd_call_scale", "allreduce"}
    said = c.not_fitted["allreduce"]
    assert said.startswith("every all-reduce had the same gradient bytes per replica (G/D)")
    assert f"is scaled as a whole to their times (×{slower:.3g}), keeping its split" in said
    assert Profile.model_validate_json(calibrated.model_dump_json()) == calibrated
    got, want = parameters(c), parameters(truth)
    for name in set(want) - {"p2p latency"}:
        assert got[name] == pytest.approx(want[name], rel=1e-6, abs=1e-12), name
    assert c.residual_max < 1e-12


def test_one_gradient_size_on_two_links_leaves_the_allreduce_to_the_cluster():
    """Points priced on different links (runs of different clusters) share no link to scale:
    the all-reduce is left to each cluster's, and the note says why."""

    def point(latency: float) -> RankObservation:
        return RankObservation(
            *[1e-3] * 4, *[1e-3] * 6, grad_bytes=4e6, replicas=2, allreduce_in_node=True,
            allreduce_link=(latency, 1e9),
        )  # fmt: skip

    link, why = fit_allreduce([point(1e-4), point(2e-4)])
    assert link is None and "same gradient bytes per replica" in why["allreduce"]


def test_all_reduces_that_do_not_grow_with_their_bytes_fit_no_bandwidth():
    """Found by the fifty-ninth round: all-reduces of 2.85 ms whatever their gradient bytes
    fitted a bandwidth of 10^15 B/s (the clamp of a zero slope), shown as fitted, and plans
    then priced all-reduces as free. No bandwidth is fitted then: the profile's link is kept,
    and not_fitted says why. One that grows is still fitted."""

    def point(grad_bytes: float, measured: float, replicas: int = 2) -> RankObservation:
        return RankObservation(
            1e-3, 1e-3, measured, 1e-3, *[1e-3] * 6, grad_bytes=grad_bytes, replicas=replicas,
            allreduce_in_node=True, allreduce_link=(1e-4, 1e9),
        )  # fmt: skip

    flat = [point(4e6, 2.85e-3), point(8e6, 2.85e-3), point(16e6, 2.85e-3)]
    link, why = fit_allreduce(flat)
    assert link is None and "did not grow with their gradient bytes" in why["allreduce"]
    # 2(D-1)·λ + 2(D-1)/D·G/β with λ = 1e-4 s, β = 1e9 B/s: both recovered.
    grows = [
        point(g, 2 * (d - 1) * (1e-4 + g / d / 1e9), d) for g, d in ((4e6, 2), (8e6, 4), (16e6, 2))
    ]
    link, why = fit_allreduce(grows)
    assert link is not None and why == {}
    assert link.latency_s == pytest.approx(1e-4) and link.bandwidth_bytes_per_s == pytest.approx(
        1e9
    )


def test_per_call_scales_need_two_micro_batch_sizes():
    """Found by the thirty-seventh round: one 2×1 run at m = 8 fitted every per-call scale to
    its floor (0.001) with a 0 % residual: its two ranks hold other layers, whose per-call
    and per-sample parts weigh differently, but the difference in their times is the layers'
    own deviation from the profile, not a per-call scale. Small micro-batches then looked all
    but free and the calibrated planner chose M = 16, measured 4× slower. At one micro-batch
    size each kind's per-call scale is now its per-sample one (the whole layer scaled alike,
    said in not_fitted); at two sizes it is fitted as before."""

    def rank(m: int, sample: float, call: float, measured: float) -> RankObservation:
        return RankObservation(
            measured_fwd_s=measured, measured_bwd_s=2 * measured, measured_allreduce_s=0.0,
            measured_optimizer_s=0.0, active_fwd_s=sample + call, nograd_fwd_s=0.0,
            bwd_s=2 * (sample + call), active_fwd_call_s=call, nograd_fwd_call_s=0.0,
            bwd_call_s=2 * call, grad_bytes=1e6, replicas=1, allreduce_in_node=True,
            micro_batch_size=m,
        )  # fmt: skip

    # Two stages at m = 8 whose times the old fit split as 2.2 per sample, 0.05 per call.
    ranks = [rank(8, 10.0, 1.0, 22.0), rank(8, 10.0, 5.0, 22.2)]
    scales, why = fit_compute(ranks)
    assert scales["fwd_call_scale"] == scales["fwd_scale"] > 1.3
    assert scales["bwd_call_scale"] == scales["bwd_scale"]
    assert {"fwd_call_scale", "bwd_call_scale"} <= set(why)
    # The same layers at two sizes: the per-call part is told apart, exactly.
    ranks = [rank(8, 10.0, 1.0, 2 * 10.0 + 0.5 * 1.0), rank(2, 2.5, 1.0, 2 * 2.5 + 0.5 * 1.0)]
    scales, why = fit_compute(ranks)
    assert scales["fwd_scale"] == pytest.approx(2.0) and "fwd_call_scale" not in why
    assert scales["fwd_call_scale"] == pytest.approx(0.5)


def test_a_blank_not_fitted_reason_is_refused(profile):
    """Found by the thirty-seventh round: a null parameter's `not_fitted` reason made blank
    by hand ("" or spaces) stood for a reason, where a missing one is refused."""
    from pydantic import ValidationError

    from pipeplan.formats import Calibration

    fields = TRUTH.model_dump()
    fields["not_fitted"] = {**fields["not_fitted"], "p2p": "   "}
    fields["p2p"] = None
    with pytest.raises(ValidationError, match="not_fitted gives p2p no reason"):
        Calibration.model_validate(fields)
    fields["not_fitted"]["p2p"] = "no pipelined phase"
    assert Calibration.model_validate(fields).p2p is None


def scale_steps(run_dir: Path, factor: float) -> None:
    """Every step of the run `factor` times as long (its per-rank times unchanged)."""
    lines = []
    for line in (run_dir / "run.jsonl").read_text().splitlines():
        record = json.loads(line)
        if record["kind"] == "step":
            record["step_s"] *= factor
            record["samples_per_s"] /= factor  # the same samples in the new time
        lines.append(json.dumps(record) + "\n")
    (run_dir / "run.jsonl").write_text("".join(lines))


def test_steps_faster_than_the_schedule_leave_no_overhead(tmp_path, profile):
    # One phase measured 20 % faster than its ranks' own times simulate (online recalibration
    # after a phase sees this): no overhead ≥ 0 helps, and a negative one is clamped to 0 by the
    # cost model, so the fit is an overhead of 0 — not a negative value it would never use.
    truth = TRUTH.model_copy(update={"step_overhead_s": 0.0, "input_s_per_sample": 0.0})
    write_run(tmp_path / "run", profile, phases=PHASES[:1], truth=truth, step_jitter=0.0)
    scale_steps(tmp_path / "run", 0.8)
    c = calibrate([tmp_path / "run"], profile).calibration
    assert c.step_overhead_s == 0.0 and c.input_s_per_sample == 0.0
    assert c.residual_max == pytest.approx(1 / 0.8 - 1, rel=1e-9)
    assert set(c.not_fitted) >= {"micro_batch_overhead_s", "input_s_per_sample", "p2p"}


def test_measured_transitions_give_back_the_group_rebuild_time(tmp_path, profile, capsys):
    """Transitions measured as a 0.3 s group rebuild plus the priced byte move: calibration
    recovers 0.3 s (float rounding only), and the calibrated model prices each of those
    transitions as measured. Phases 1, 2, 3 of PHASES all change placement. Exact steps: the
    move is priced on the fitted p2p link, which noisy steps would shift."""
    truth = TRUTH.model_copy(update={"group_rebuild_s": 0.3})
    write_run(tmp_path / "run", profile, truth=truth, step_jitter=0.0)
    calibrated = calibrate([tmp_path / "run"], profile)
    assert calibrated.calibration.group_rebuild_s == pytest.approx(0.3, rel=1e-12)
    assert "group_rebuild_s" not in calibrated.calibration.not_fitted
    layouts = [layout_of(p) for p in PHASES]
    config = RunConfig(
        name="x", model="vit-digits", data="digits", nproc=2, global_batch=64, epochs=1
    )
    model = CostModel(calibrated, run_cluster(config, profile))
    for old, new in pairwise(layouts):
        assert not same_placement(old, new)
        assert model.transition_s(old, new) == pytest.approx(
            model.move_s(old, new) + 0.3, rel=1e-12
        )
    out = tmp_path / "cal.json"
    args = ["calibrate", str(tmp_path / "run"), "--profile", str(PROFILE_PATH), "--out", str(out)]
    assert cli.main(args) == 0
    assert "layout change besides moving bytes: 300.0 ms" in capsys.readouterr().err


def test_a_resumed_runs_phase_is_no_transition_to_fit(tmp_path, profile):
    """A resumed run's new phase (another world size, another placement) built its groups
    and loaded its state from a checkpoint: its transition_s moved nothing and says nothing
    of the group rebuild. Phases 1 and 3 marked resumed with 10 s leave phase 2's 0.3 s."""
    truth = TRUTH.model_copy(update={"group_rebuild_s": 0.3})
    write_run(tmp_path / "run", profile, truth=truth, step_jitter=0.0)
    path = tmp_path / "run" / "run.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    for row in rows:
        if row["kind"] == "phase" and row["phase"] in (1, 3):
            row["resumed"], row["transition_s"] = True, 10.0
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert fit_group_rebuild([tmp_path / "run"], profile)[0] == pytest.approx(0.3, rel=1e-12)


def test_a_measured_transition_below_its_byte_move_fits_zero(tmp_path, profile):
    """A transition faster than the priced move (a link faster than profiled): the rebuild
    is what the cost model adds, never negative."""
    write_run(tmp_path / "run", profile)
    records = (tmp_path / "run" / "run.jsonl").read_text().splitlines()
    rows = [json.loads(line) for line in records]
    for row in rows:
        if row["kind"] == "phase":
            row["transition_s"] = 0.0
    (tmp_path / "run" / "run.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert fit_group_rebuild([tmp_path / "run"], profile) == (0.0, {})


def test_runs_without_a_placement_change_leave_the_group_rebuild_unfitted(tmp_path, profile):
    """Phases that keep the placement (only the freeze point changes) moved nothing and
    rebuilt no group: nothing to fit, and `not_fitted` says so."""
    kept = [Phase(0, 2, 1, 4, "1f1b", (0, 5, 10)), Phase(3, 2, 1, 4, "1f1b", (0, 5, 10))]
    truth = TRUTH.model_copy(update={"group_rebuild_s": 0.3})
    write_run(tmp_path / "run", profile, phases=kept, truth=truth)
    c = calibrate([tmp_path / "run"], profile).calibration
    assert c.group_rebuild_s is None
    assert "no transition changed placement" in c.not_fitted["group_rebuild_s"]


def test_a_transition_to_a_layout_beyond_the_model_is_one_line(tmp_path, profile):
    """A phase record (without steps of its own) whose layout splits more layers than the
    profile has: calibrate's transition pricing refuses it in one line, no IndexError."""
    write_run(tmp_path / "run", profile)
    path = tmp_path / "run" / "run.jsonl"
    last = PhaseRecord.model_validate_json(path.read_text().splitlines()[0])
    bad = last.model_copy(
        update={
            "phase": len(PHASES),
            "layout": last.layout.model_copy(update={"boundaries": (0, 5, 12)}),
            # It starts where the records end, as a phase does: only its layout is wrong.
            "start_step": sum('"kind":"step"' in line for line in path.read_text().splitlines()),
        }
    )
    path.write_text(path.read_text() + bad.model_dump_json() + "\n")
    with pytest.raises(BadArgumentError, match=r"boundaries \[0, 5, 12\] must start at 0"):
        calibrate([tmp_path / "run"], profile)


def test_a_run_named_with_no_phase_to_fit_is_refused_not_left_out(tmp_path, profile, capsys):
    """Found by the thirty-first round: `calibrate long short` fitted to `long` alone, exit 0,
    saying nothing of `short` (too few steps), which `calibrate short` refused: a user read
    the calibration as fitted to both. Each run named must have a phase to fit, or the
    command is refused naming it, the output not written."""
    write_run(tmp_path / "long", profile)
    write_run(tmp_path / "short", profile, steps_per_phase=4, phases=PHASES[1:])  # another run
    with pytest.raises(InputFileError, match=r"short: no phase with enough steps to fit.*leave it"):
        calibrate([tmp_path / "long", tmp_path / "short"], profile)
    out = tmp_path / "fitted.json"
    argv = ["calibrate", str(tmp_path / "long"), str(tmp_path / "short")]
    assert cli.main([*argv, "--profile", str(PROFILE_PATH), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{tmp_path / 'short'}: no phase with enough" in err, err
    assert not out.exists()


def _parts_off(run: Path, phases: set[int]) -> None:
    """Rank 0's fwd_s of every step of `phases` halved, its step_s the step's (its slowest
    rank's), which its parts no longer add up to: in a CUDA run, where a host clock around
    asynchronous work can time them so (on CPU the format refuses them)."""
    config = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(json.dumps({**config, "device": "cuda"}))
    path = run / "run.jsonl"
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    for line in lines:
        if line["kind"] == "step" and line["phase"] in phases:
            rank = line["ranks"][0]
            rank["step_s"] = line["step_s"]
            rank["fwd_s"] /= 2
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))


def _refused_line(run: Path, capsys) -> str:
    """`calibrate RUN` refused: exit 2, its one line (returned), no output written."""
    out = run.parent / "fitted.json"
    argv = ["calibrate", str(run), "--profile", str(PROFILE_PATH), "--out", str(out)]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and not out.exists(), err
    return err


def test_a_run_whose_steps_are_no_measurements_says_why(tmp_path, profile, capsys):
    """Found by the fifty-seventh round: calibrate said "no phase with enough steps to fit: a
    phase needs 5 steps" of phases of 8 steps, every one left out because a rank's parts no
    longer added up to its step_s. The line now says so, naming the first step and rank."""
    write_run(tmp_path / "run", profile)
    _parts_off(tmp_path / "run", set(range(len(PHASES))))
    err = _refused_line(tmp_path / "run", capsys)
    assert (
        "a phase needs 5 steps (2 warm-up, 3 measured), and steps that are no measurements" in err
    )
    assert "left out, the first step 2: rank 0's parts (input_s + fwd_s" in err, err
    assert "not its step_s" in err, err


def test_a_phase_whose_steps_are_no_measurements_is_said_left_out(tmp_path, profile, caplog):
    """Found by the fifty-seventh round: a phase whose steps were all left out (times below
    a nanosecond, parts that miss the step) was dropped from the fit in silence ("fit over 1
    phases" of a run of 2). A warning names the phase, how many steps and the first reason."""
    write_run(tmp_path / "run", profile)
    _parts_off(tmp_path / "run", {3})
    c = calibrate([tmp_path / "run"], profile).calibration
    assert c.phases_used == len(PHASES) - 1
    said = "phase 3 left out of the fit: 6 of its 6 steps after warm-up are no measurements, "
    assert said + "the first step 26: rank 0's parts" in caplog.text, caplog.text


def test_a_run_whose_steps_all_fill_the_cache_says_so(tmp_path, profile, capsys):
    """Found by the fifty-ninth round: a cached phase of 8 steps, every one still filling the
    cache (no step read its whole batch from it), was refused as "a phase needs 5 steps",
    which read as a phase too short. The line says the steps were left out as filling the
    cache, naming the phase and how many."""
    write_run(tmp_path / "run", profile, phases=[Phase(5, 1, 2, 1, "1f1b", (0, 10), cached=True)])
    path = tmp_path / "run" / "run.jsonl"
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    # Its first epoch alone (the cache starts empty: no hits), as a run stopped there.
    lines = [line for line in lines if line["kind"] == "phase" or line.get("epoch") == 0]
    lines = [line for line in lines if line["kind"] != "epoch"]
    assert [line["cache_hits"] for line in lines[1:]] == [0] * 8
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    err = _refused_line(tmp_path / "run", capsys)
    assert (
        "and steps that still fill the activation cache (computing the frozen prefix) are " in err
    )
    assert "left out (phase 0: 8 of its 8)" in err, err


def test_runs_faster_than_any_scale_calibrate_fits_are_refused(tmp_path, profile, capsys):
    """Found by the fifty-seventh round: runs 10^4 times faster than the profile were
    "fitted" at exit 0 with every compute scale on its floor (0.001) and a step-time error of
    1,203 %. A scale held at its floor is no fit: refused in one line, nothing written."""
    fast = TRUTH.model_copy(update={"fwd_scale": 1e-5, "bwd_scale": 1e-5, "nograd_scale": 1e-5})
    write_run(tmp_path / "run", profile, truth=fast)
    out = tmp_path / "fitted.json"
    argv = ["calibrate", str(tmp_path / "run"), "--profile", str(PROFILE_PATH), "--out", str(out)]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and not out.exists(), err
    assert "the measured forward is 100,000× faster than the profile predicts, beyond what " in err
    assert "(a compute scale of at least 0.001); the profile is likely of another device" in err


def test_a_fit_far_off_its_own_runs_is_refused(tmp_path, profile, capsys):
    """Found by the sixtieth round: runs faster than the profile's links allow were "fitted"
    at exit 0, their steps priced with a median error of 146 %, the p2p latency and step
    overhead on their floor of 0. A fit that far from the runs it was fitted on is no
    calibration: refused in one line naming its error and why, nothing written."""
    truth = TRUTH.model_copy(update={"step_overhead_s": 0.0, "input_s_per_sample": 0.0})
    write_run(tmp_path / "run", profile, truth=truth, step_jitter=0.0)
    scale_steps(tmp_path / "run", 0.5)  # twice as fast as their ranks' own times simulate
    err = _refused_line(tmp_path / "run", capsys)
    assert "the calibration fitted to these runs prices their steps with a median error " in err
    assert "of 99.9% (worst 100.0%), past the 50% a fit may have: the runs were faster than " in err
    assert "any terms within the model's bounds can price them (p2p latency, step " in err, err


def test_a_scale_near_its_floor_is_printed_as_its_value(tmp_path, profile, capsys):
    """Found by the sixtieth round: a fitted forward scale of 0.00132 was printed "0.001",
    which reads as the floor calibrate refuses. Printed to three significant digits."""
    small = {"fwd_scale": 0.00132, "bwd_scale": 0.0025, "nograd_scale": 0.0031}
    write_run(tmp_path / "run", profile, truth=TRUTH.model_copy(update=small), step_jitter=0.0)
    out = tmp_path / "fitted.json"
    argv = ["calibrate", str(tmp_path / "run"), "--profile", str(PROFILE_PATH), "--out", str(out)]
    assert cli.main(argv) == 0
    said = capsys.readouterr().err  # `cli.say`: stderr
    assert "forward 0.00132 / 0.00132, backward 0.0025 / 0.0025, no-grad 0.0031 / " in said


# bert-synth's 8 layers on 2 ranks: one phase, enough steps to fit.
BERT_PHASES = [Phase(0, 2, 1, 16, "1f1b", (0, 4, 8))]  # m = 4


@pytest.mark.timeout(120)
def test_a_profile_of_another_input_than_the_runs_is_refused(tmp_path, capsys):
    """Found by the thirty-eighth round: `calibrate RUN --profile P` fitted a run that fed
    --seq-len 16 (padded text) to a profile measured at 48, exit 0, its scales the ratio of the
    two shapes, where `run --profile P` refuses that profile for that run. calibrate holds
    --profile to the input the run fed (as its own profile records it: shape, dtype,
    precision, task, padding, head) with run's check and words: one line, exit 2, the
    `pipeplan profile` command with the run's flags, nothing written."""
    shipped = load(Profile, shipped_profile("bert-synth", "cpu"))  # input (32,) int64
    run = tmp_path / "run"
    write_run(run, shipped, phases=BERT_PHASES, model="bert-synth")
    other = tmp_path / "bert16.json"
    args = ["profile", "bert-synth", "--seq-len", "16", "--micro-batch-sizes", "1,2"]
    assert cli.main([*args, "--warmup", "0", "--repeats", "1", "--out", str(other)]) == 0
    capsys.readouterr()
    before = {p.name: p.read_bytes() for p in run.iterdir()}
    out = tmp_path / "fitted.json"
    argv = ["calibrate", str(run), "--profile", str(other), "--out", str(out)]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err == (
        f"pipeplan: error: --profile was measured for input (16,) int64, fp32 precision, "
        f"classification, but the run {run} feeds input (32,) int64, fp32 precision, "
        "classification; profile that: pipeplan profile bert-synth --seq-len 32 --task "
        "classification --out P.json --nproc 2, and pass --profile P.json\n"
    )
    assert not out.exists() and {p.name: p.read_bytes() for p in run.iterdir()} == before
    # The run's own input fits: the shipped profile it was priced with.
    argv = ["calibrate", str(run), "--profile", str(shipped_profile("bert-synth", "cpu"))]
    assert cli.main([*argv, "--out", str(out)]) == 0


@pytest.mark.timeout(60)
def test_a_profile_of_another_model_than_a_folder_run_is_one_sentence(tmp_path, capsys):
    """Found by the thirty-eighth round: calibrating a run of a model folder against a profile
    of another model said "RUN is a run of 'F' but --profile profiles a model whose config
    field 'model_type' is …, but F/config.json has …; profile this model: pipeplan profile F
    --out P.json": two "but" clauses, and a command without the --seq-len, --task and
    --padding-mask the run needs, whose profile calibrate then refused for its input. One
    sentence now, its command the one for the run's input."""
    shipped = load(Profile, shipped_profile("bert-synth", "cpu"))
    folder = tmp_path / "ckpt"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(shipped.model.config))
    run = tmp_path / "run"
    write_run(run, shipped, phases=BERT_PHASES, model=str(folder), priced="bert-synth")
    out = tmp_path / "fitted.json"
    argv = ["calibrate", str(run), "--profile", str(PROFILE_PATH), "--out", str(out)]
    assert cli.main(argv) == 2
    assert capsys.readouterr().err == (
        f"pipeplan: error: {run}: --profile profiles a model whose config field 'model_type' "
        f"is 'vit', but {folder / 'config.json'} has 'bert'; profile this model: pipeplan "
        f"profile {folder} --seq-len 32 --task classification --out P.json --nproc 2\n"
    )
    assert not out.exists()


# --------------------------------------------------------------------------- links given


def calibrated_links_profile(profile: Profile) -> Profile:
    """`profile` calibrated as a run of its machine fits it: the all-reduce 2.5 times its
    measured link (one G/D), 300 µs more per stage-to-stage transfer than measured."""
    comm = profile.comm
    update = {
        "allreduce": FittedLink(
            latency_s=2.5 * comm.allreduce.latency_s,
            bandwidth_bytes_per_s=comm.allreduce.bandwidth_bytes_per_s / 2.5,
        ),
        "p2p": FittedLink(
            latency_s=comm.p2p.latency_s + 3e-4,
            bandwidth_bytes_per_s=comm.p2p.bandwidth_bytes_per_s,
        ),
        # Written to a file, read back: p2p is fitted here.
        "not_fitted": {k: v for k, v in TRUTH.not_fitted.items() if k != "p2p"},
    }
    return profile.model_copy(update={"calibration": TRUTH.model_copy(update=update)})


def preview_of(capsys, profile_path: Path, *flags: str) -> tuple[dict, str]:
    args = ["preview", "--profile", str(profile_path), "--nodes", "1", "--devices-per-node"]
    args += ["4", "--device-memory", "1GiB", "--global-batch", "64", "--samples", "2000"]
    assert cli.main([*args, "--epochs", "3", "--freeze", "none", "--json", *flags]) == 0
    captured = capsys.readouterr()
    return json.loads(captured.out), captured.err


@pytest.mark.timeout(120)
def test_a_given_in_node_link_is_priced_over_the_calibrations(tmp_path, profile, capsys):
    """Found by the thirty-fifth round: `preview --intra-bw 1GB/s` and `--intra-bw 100GB/s` of
    a calibrated profile gave the same steps and all-reduce times, and said nothing: the cost
    model priced the calibration's fitted links, of the profiled machine, in place of the link
    the user described. Now the link given is priced (plus what the calibrated runs spent
    beyond the measured link), and one `pipeplan: WARNING:` line says what was priced instead
    of the calibration's links; without --intra-bw the calibration's links are priced, as
    before, and nothing is said. The plan of such a link prices again to itself (what `run
    --plan` checks): the choice is made from the cluster's links, not from how it was built."""
    path = tmp_path / "cal.json"
    path.write_text(dumps(calibrated_links_profile(profile)))
    before = path.read_bytes()
    slow, slow_err = preview_of(capsys, path, "--intra-bw", "1GB/s")
    fast, fast_err = preview_of(capsys, path, "--intra-bw", "100GB/s")
    # The same layout priced on both links: its all-reduce is faster on the faster link.
    pins = ["--stages", "1", "--micro-batches", "1"]
    slow_dp, _ = preview_of(capsys, path, "--intra-bw", "1GB/s", *pins)
    fast_dp, _ = preview_of(capsys, path, "--intra-bw", "100GB/s", *pins)
    slow_ar = slow_dp["plan"]["phases"][0]["stages"][0]["allreduce_s"]
    fast_ar = fast_dp["plan"]["phases"][0]["stages"][0]["allreduce_s"]
    assert fast_ar < slow_ar
    assert slow["plan"]["phases"][0]["step_s"] != fast["plan"]["phases"][0]["step_s"]
    for err, flag in ((slow_err, "--intra-bw 1GB/s"), (fast_err, "--intra-bw 100GB/s")):
        lines = err.splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"pipeplan: WARNING: {flag} "), err
        assert "p2p" in lines[0] and "all-reduce" in lines[0]
    _, measured_err = preview_of(capsys, path)
    assert measured_err == ""
    # A cluster file's intra_node is the user's description too.
    cluster_file = tmp_path / "cluster.json"
    links = {"intra_node": {"bandwidth_bytes_per_s": 1e11, "latency_s": 1e-5}}
    shape = {"schema_version": 1, "nodes": 1, "devices_per_node": 4}
    shape["device_memory_bytes"] = 1 << 30
    inter = {"inter_node": {"bandwidth_bytes_per_s": 3e9, "latency_s": 2e-5}}
    cluster_file.write_text(json.dumps({**shape, **links, **inter}))
    args = ["preview", "--profile", str(path), "--cluster", str(cluster_file), "--epochs", "3"]
    assert cli.main([*args, "--global-batch", "64", "--samples", "2000", "--json"]) == 0
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"pipeplan: WARNING: the cluster file '{cluster_file}'"), line
    assert path.read_bytes() == before
    out = tmp_path / "plan.json"
    args = ["plan", "--profile", str(path), "--nodes", "1", "--devices-per-node", "4"]
    args += ["--device-memory", "1GiB", "--intra-bw", "100GB/s", "--epochs", "3", "--out"]
    assert cli.main([*args, str(out)]) == 0
    plan = load(Plan, out)
    assert priced_phases(plan, load(Profile, path)) == plan.phases


@pytest.mark.timeout(60)
def test_the_links_warning_names_the_cluster_files_field_that_differs(tmp_path, profile, capsys):
    """Found by the thirty-sixth round: a cluster file whose intra_node was the profiled
    machine's measured link and whose intra_node_allreduce alone differed was said to differ
    in its intra_node (`'c.json''s intra_node`, the quote doubled). The warning now names the
    field that priced what was replaced."""
    path = tmp_path / "cal.json"
    path.write_text(dumps(calibrated_links_profile(profile)))
    p2p = profile.comm.p2p
    cluster_file = tmp_path / "c.json"
    cluster = {"schema_version": 1, "nodes": 1, "devices_per_node": 4}
    cluster["device_memory_bytes"] = 1 << 30
    cluster["intra_node"] = {"bandwidth_bytes_per_s": p2p.bandwidth_bytes_per_s}
    cluster["intra_node"]["latency_s"] = p2p.latency_s
    cluster["intra_node_allreduce"] = {"bandwidth_bytes_per_s": 1e11, "latency_s": 1e-6}
    cluster["inter_node"] = {"bandwidth_bytes_per_s": 1e9, "latency_s": 2e-5}
    cluster_file.write_text(json.dumps(cluster))
    args = ["preview", "--profile", str(path), "--cluster", str(cluster_file), "--epochs", "3"]
    assert cli.main([*args, "--global-batch", "64", "--samples", "2000", "--json"]) == 0
    (line,) = capsys.readouterr().err.splitlines()
    said = f"pipeplan: WARNING: the cluster file '{cluster_file}' (intra_node_allreduce) describes"
    assert line.startswith(said), line
    assert "all-reduce" in line and "p2p" not in line


@pytest.mark.timeout(60)
def test_the_runs_own_cluster_prices_the_calibrations_links(tmp_path, profile):
    """The thirty-fifth round's fix keeps a run's own pricing: on the cluster a run plans on
    (`run_cluster`, the profile's measured links) the calibration's fitted links are priced
    exactly as fitted, and `calibrate` recovers them from such a run as before. A cluster
    file of other in-node links prices those, plus the calibration's extra."""
    calibrated = calibrated_links_profile(profile)
    c = calibrated.calibration
    model = CostModel(calibrated, run_cluster_of(profile))
    assert model.intra_p2p_link.latency_s == c.p2p.latency_s
    assert model.intra_p2p_link.bandwidth_bytes_per_s == c.p2p.bandwidth_bytes_per_s
    assert model.intra_allreduce_link.latency_s == c.allreduce.latency_s
    assert model.intra_allreduce_link.bandwidth_bytes_per_s == c.allreduce.bandwidth_bytes_per_s
    # A cluster of another in-node link: that link, with the 300 µs the runs added per transfer.
    other = run_cluster_of(profile).model_copy(
        update={
            "intra_node": Link(latency_s=1e-5, bandwidth_bytes_per_s=1e11),
            "intra_node_allreduce": None,
        }
    )
    given = CostModel(calibrated, other)
    assert given.intra_p2p_link.latency_s == pytest.approx(1e-5 + 3e-4)
    assert given.intra_p2p_link.bandwidth_bytes_per_s == 1e11
    extra = 1.5 / profile.comm.allreduce.bandwidth_bytes_per_s  # k − 1 = 1.5 per byte
    assert 1 / given.intra_allreduce_link.bandwidth_bytes_per_s == pytest.approx(1e-11 + extra)


@pytest.mark.timeout(120)
def test_a_transfer_between_nodes_carries_the_calibrations_extra(tmp_path, profile, capsys):
    """Found by the thirty-sixth round: what the calibrated runs spent beyond the measured
    link (the run's own work around a transfer) was added to in-node links only, so the same
    1×2 layout of a calibrated profile was priced with a 25 ms all-reduce inside one node on a
    100 GB/s link and a 5 ms one across two nodes on a 1 GB/s network: plans spread replicas
    over nodes. Now the inter-node links carry the same extra: the same link prices the same
    inside a node and between nodes, and a slower network is never the faster choice. With
    one device per node (no in-node link at all) --intra-bw draws no warning of an in-node
    pricing the plan does not have."""
    calibrated = calibrated_links_profile(profile)
    link = Link(latency_s=1e-5, bandwidth_bytes_per_s=1e11)
    base = run_cluster_of(profile)
    one_node = base.model_copy(update={"intra_node": link, "intra_node_allreduce": None})
    two_nodes = base.model_copy(update={"nodes": 2, "devices_per_node": 1, "inter_node": link})
    inside, between = CostModel(calibrated, one_node), CostModel(calibrated, two_nodes)
    for a, b in (
        (inside.intra_p2p_link, between.inter_p2p_link),
        (inside.intra_allreduce_link, between.inter_allreduce_link),
    ):
        assert b.latency_s == pytest.approx(a.latency_s)
        assert b.bandwidth_bytes_per_s == pytest.approx(a.bandwidth_bytes_per_s)
    assert between.inter_p2p_link.latency_s == pytest.approx(1e-5 + 3e-4)  # the runs' 300 µs
    # Without calibration the inter-node link is the cluster's, as given.
    assert CostModel(profile, two_nodes).inter_allreduce_link == link
    # Through the CLI: one 1×2 layout, in one node on 100 GB/s and across two on 1 GB/s.
    path = tmp_path / "cal.json"
    path.write_text(dumps(calibrated))
    pins = ["--stages", "1", "--micro-batches", "1", "--global-batch", "64", "--samples", "2000"]

    def allreduce(*flags: str) -> tuple[float, str]:
        args = ["preview", "--profile", str(path), "--device-memory", "1GiB", *pins, *flags]
        assert cli.main([*args, "--epochs", "1", "--freeze", "none", "--json"]) == 0
        captured = capsys.readouterr()
        (phase,) = json.loads(captured.out)["plan"]["phases"]
        assert phase["layout"]["rank_map"] == [[0], [1]]
        return phase["stages"][0]["allreduce_s"], captured.err

    fast_in_node, _ = allreduce("--nodes", "1", "--devices-per-node", "2", "--intra-bw", "100GB/s")
    slow_between, err = allreduce(
        "--nodes", "2", "--devices-per-node", "1", "--inter-bw", "1GB/s", "--intra-bw", "1GB/s"
    )
    assert slow_between > fast_in_node
    assert err == ""  # no in-node link: nothing of --intra-bw to say


def test_runs_without_frozen_layers_price_a_frozen_layer_as_a_trained_forward(tmp_path, profile):
    """Found by the thirty-fifth round: calibrated on runs that froze nothing, the per-call
    forward scale was fitted apart (0.001 against 6.2 per sample) while the no-grad per-call
    scale, unmeasured, took the no-grad per-sample one (6.2): a frozen layer's call cost 6000×
    the same layer's trained one, and freezing a layer was previewed as a slower step. With
    nothing measured of frozen layers, they are priced as the trainable forward, per call and
    per sample: never above training the layer."""
    phases = [
        Phase(0, 2, 1, 2, "gpipe", (0, 5, 10)),
        Phase(0, 2, 1, 8, "1f1b", (0, 5, 10)),
        Phase(0, 1, 2, 1, "gpipe", (0, 10)),
        Phase(0, 1, 2, 4, "1f1b", (0, 10)),
    ]
    write_run(tmp_path / "run", profile, phases=phases, truth=full_truth(profile))
    calibrated = calibrate([tmp_path / "run"], profile)
    c = calibrated.calibration
    assert c.fwd_call_scale is not None and c.fwd_call_scale != pytest.approx(c.fwd_scale)
    assert c.scales("nograd") == c.scales("fwd")
    assert "nograd_call_scale" in c.not_fitted and "nograd_scale" in c.not_fitted
    model, raw = (
        CostModel(calibrated, run_cluster_of(profile)),
        CostModel(profile, run_cluster_of(profile)),
    )
    for kind in ("fwd", "nograd"):  # each kind's per-call part scaled by the fitted call scale
        assert model.layer_call_times(kind) == pytest.approx(
            c.fwd_call_scale * raw.layer_call_times(kind), rel=1e-9
        )


@pytest.mark.timeout(120)
def test_a_calibrated_profile_no_command_would_read_is_not_written(tmp_path, capsys, monkeypatch):
    """Found by the fifty-first round: a profile just under the 32 MiB limit (a model config
    holding a large key) was calibrated into a file 1,305 bytes past it, which every command
    then refused. calibrate refuses it before writing, naming --out (here the limit set just
    above the profile given, below it with its calibration)."""
    from pipeplan.formats import base

    given = max(PROFILE_PATH.stat().st_size, len(base.dumps(load(Profile, PROFILE_PATH))))
    out = tmp_path / "cal.json"
    write_run(tmp_path / "run", load(Profile, PROFILE_PATH))
    monkeypatch.setattr(base, "limit_of", lambda model: given + 100)
    argv = ["calibrate", str(tmp_path / "run"), "--profile", str(PROFILE_PATH), "--out", str(out)]
    assert cli.main(argv) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"pipeplan: error: {out}: a profile of "), line
    assert line.endswith(
        f"is beyond the {given + 100:,} (0 MiB) any command reads of a profile; nothing written"
    ), line
    assert not out.exists()


@pytest.mark.timeout(120)
def test_a_calibrations_fitted_allreduce_set_to_null_is_refused(tmp_path, capsys):
    """Found by the thirty-sixth round: `pipeplan calibrate`'s output with its fitted
    `allreduce` set to null (or deleted), not_fitted unchanged, was accepted and priced the
    all-reduce as unfitted (on the cluster's link): preview's 112 s became 90 s. Now it is one
    line naming the file and the field, exit 2, the file untouched; what calibrate wrote
    (anything null named in not_fitted with its reason) loads and previews."""
    out = tmp_path / "cal.json"
    write_run(tmp_path / "run", load(Profile, PROFILE_PATH))
    argv = ["calibrate", str(tmp_path / "run"), "--profile", str(PROFILE_PATH), "--out", str(out)]
    assert cli.main(argv) == 0
    capsys.readouterr()
    written = json.loads(out.read_text())["calibration"]
    assert written["allreduce"] is not None and "allreduce" not in written["not_fitted"]
    left_null = [name for name, value in written.items() if value is None]
    assert all(name in written["not_fitted"] for name in left_null)
    preview = ["preview", "--nodes", "1", "--devices-per-node", "4", "--global-batch", "64"]
    preview += ["--samples", "2000", "--epochs", "3", "--freeze", "none", "--json"]
    assert cli.main([*preview, "--profile", str(out)]) == 0
    # Only the warning that its 2x2 is no shape the runs had (the sixty-second round).
    (warning,) = capsys.readouterr().err.splitlines()
    assert warning.startswith("pipeplan: WARNING: the calibration was fitted on layouts"), warning
    nulled = json.loads(out.read_text())
    nulled["calibration"]["allreduce"] = None
    deleted = json.loads(out.read_text())
    del deleted["calibration"]["allreduce"]
    for name, doc in (("nulled.json", nulled), ("deleted.json", deleted)):
        path = tmp_path / name
        path.write_text(json.dumps(doc))
        before = path.read_bytes()
        assert cli.main([*preview, "--profile", str(path)]) == 2
        captured = capsys.readouterr()
        (line,) = captured.err.splitlines()
        assert line.startswith(f"pipeplan: error: {path}: invalid profile: field 'calibration'")
        said = {
            "nulled.json": ("allreduce is null", "not_fitted does not name it"),
            "deleted.json": ("calibration.allreduce is missing", "calibrate writes every field"),
        }[name]
        assert all(words in line for words in said), line
        assert captured.out == "" and path.read_bytes() == before


# One rank, the whole model in one stage: all trainable, then layer 0 (vit-digits' patch
# embedding, 1.5 % of the forward) frozen and run without autograd.
TINY_FROZEN = [Phase(0, 1, 1, 1, "1f1b", (0, 10)), Phase(1, 1, 1, 1, "1f1b", (0, 10))]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("seed", range(4))
def test_a_no_grad_part_within_the_noise_keeps_the_forward_scale(tmp_path, profile, seed):
    """Found by the thirty-eighth round: with only the embeddings layer (0.14 ms of a 12 ms
    step) run without autograd in a phase, the online refit fitted nograd_scale 67.3 (another
    run 0.001, the floor) from the steps' noise, and the next phase, which froze a block, was
    predicted +479 %. A scale whose part is too small a share of the measured times for their
    noise to leave it known (fitted apart, its deviation's standard error beyond a quarter of
    the scale it would otherwise keep) is now not fitted: it keeps fwd_scale, and not_fitted
    says why. Here 10 steps a phase with 5 % noise per time: the old fit gave 3.96, 2.79,
    0.001 and 0.001 for these seeds (the truth 1.4)."""
    run = tmp_path / "run"
    write_run(run, profile, 10, phases=TINY_FROZEN, nproc=1, step_jitter=0.0, sigma=0.05, seed=seed)
    c = calibrate([run], profile).calibration
    assert c.nograd_scale == c.fwd_scale == pytest.approx(TRUTH.fwd_scale, rel=0.05)
    reason = c.not_fitted["nograd_scale"]
    assert reason.startswith("too small a part of the measured forward to tell from its noise")
    assert reason.endswith("of fwd_scale): set to fwd_scale")


@pytest.mark.timeout(60)
def test_a_no_grad_part_above_the_noise_is_fitted(tmp_path, profile):
    """The same noise and steps, but half the model frozen (5 layers, half the forward): the
    no-grad part is told from the noise, and its scale is fitted near the truth."""
    phases = [TINY_FROZEN[0], Phase(5, 1, 1, 1, "1f1b", (0, 10))]
    run = tmp_path / "run"
    write_run(run, profile, 10, phases=phases, nproc=1, step_jitter=0.0, sigma=0.05)
    c = calibrate([run], profile).calibration
    assert "nograd_scale" not in c.not_fitted
    assert c.nograd_scale == pytest.approx(TRUTH.nograd_scale, rel=0.1)


def test_deviation_errors_propagate_the_noise_through_the_fit():
    """A part of 2 % of one time, that time known to 1 %: its scale's deviation from its
    parent's is known to ±0.5 (1 % / 2 %); exact times leave it exact."""
    from pipeplan.calibrate import deviation_errors

    relative = np.array([[1.0, 0.0], [0.98, 0.02]])
    assert deviation_errors(relative, [0], np.array([0.0, 0.01])) == pytest.approx([0.5])
    assert deviation_errors(relative, [0], np.zeros(2)) == pytest.approx([0.0])


def test_a_per_call_part_within_the_noise_keeps_its_kinds_scale():
    """The same holds for every compute scale (the thirty-eighth round): at two micro-batch
    sizes a per-call part of 1–4 % of each forward and backward, measured to 2 %, is not told
    apart: fwd_call_scale and bwd_call_scale keep their per-sample scales, and not_fitted says
    the noise hid them. Measured exactly, the same ranks give both per-call scales."""

    def rank(m: int, sample: float, noise: float) -> RankObservation:
        call, measured = 0.1, 2 * sample + 0.5 * 0.1  # truth: 2 per sample, 0.5 per call
        return RankObservation(
            measured_fwd_s=measured, measured_bwd_s=2 * measured, measured_allreduce_s=0.0,
            measured_optimizer_s=0.0, active_fwd_s=sample + call, nograd_fwd_s=0.0,
            bwd_s=2 * (sample + call), active_fwd_call_s=call, nograd_fwd_call_s=0.0,
            bwd_call_s=2 * call, grad_bytes=1e6, replicas=1, allreduce_in_node=True,
            micro_batch_size=m, fwd_noise=noise, bwd_noise=noise,
        )  # fmt: skip

    scales, why = fit_compute([rank(8, 10.0, 0.02), rank(2, 2.5, 0.02)])
    assert scales["fwd_call_scale"] == scales["fwd_scale"]
    assert scales["bwd_call_scale"] == scales["bwd_scale"]
    assert why["fwd_call_scale"].startswith("too small a part of the measured forward")
    assert why["bwd_call_scale"].startswith("too small a part of the measured backward")
    scales, why = fit_compute([rank(8, 10.0, 0.0), rank(2, 2.5, 0.0)])
    assert scales["fwd_call_scale"] == pytest.approx(0.5) and "fwd_call_scale" not in why
    assert scales["bwd_call_scale"] == pytest.approx(0.5) and "bwd_call_scale" not in why


def test_a_calibrations_allreduce_faster_than_any_link_is_refused(tmp_path, capsys):
    """Found by the sixtieth round: a calibration's all-reduce of 10^15 B/s and no latency,
    what calibrate wrote before the fifty-ninth round's fix, was planned with: a 6.4 MB
    all-reduce priced at 6 ns. A fitted all-reduce is held to MAX_FITTED_BANDWIDTH, refused
    naming the file and the field, and calibrate fits none past it (the profile's link kept)."""
    from test_hostile import refused
    from test_report import calibrated_profile

    doc = json.loads(calibrated_profile().model_dump_json())  # a calibration as calibrate writes
    doc["calibration"]["allreduce"] = {"latency_s": 0.0, "bandwidth_bytes_per_s": 1e15}
    doc["calibration"]["not_fitted"].pop("allreduce", None)
    path = tmp_path / "p.json"
    path.write_text(json.dumps(doc))
    said = (
        f"{path}: invalid profile: field 'calibration': allreduce.bandwidth_bytes_per_s 1e+15 "
        "B/s is above 1e+13 B/s, over 10× the fastest device link"
    )
    refused(["preview", "--profile", str(path), "--devices-per-node", "2"], tmp_path, capsys, said)
    doc["calibration"]["allreduce"]["bandwidth_bytes_per_s"] = 1e11  # a fast link: taken
    path.write_text(json.dumps(doc))
    assert cli.main(["preview", "--profile", str(path), "--devices-per-node", "2"]) == 0

    # All-reduces growing by 10^-14 s a byte (10^14 B/s): no bandwidth fitted from them. Nor
    # from 2·10^12 B/s, 2,000× the cluster's 1 GB/s link: past the 1,000× (1 / MIN_SCALE)
    # every fitted part is held to (the sixty-fifth round); 500× it is fitted.
    def point(grad_bytes: float, bandwidth: float = 1e14) -> RankObservation:
        return RankObservation(
            1e-3, 1e-3, 2 * (1e-4 + grad_bytes / 2 / bandwidth), 1e-3, *[1e-3] * 6,
            grad_bytes=grad_bytes, replicas=2, allreduce_in_node=True, allreduce_link=(1e-4, 1e9),
        )  # fmt: skip

    link, why = fit_allreduce([point(4e6), point(8e6), point(16e6)])
    assert link is None and "did not grow with their gradient bytes" in why["allreduce"]
    link, why = fit_allreduce([point(g, 2e12) for g in (4e6, 8e6, 16e6)])
    assert link is None, link
    assert "(none, or one over 1000× the cluster's link of 1 GB/s; the" in why["allreduce"]
    link, why = fit_allreduce([point(g, 5e11) for g in (4e6, 8e6, 16e6)])
    assert link.bandwidth_bytes_per_s == pytest.approx(5e11) and why == {}


@pytest.mark.parametrize("field", ["fwd_scale", "bwd_call_scale"])
def test_a_calibration_scale_below_what_calibrate_fits_is_refused(tmp_path, capsys, field):
    """Found by the fifty-ninth round: compute scales between 1e-6 and 1e-3 were planned and
    run with, where calibrate never fits one below 1e-3 and the format says a calibration holds
    what calibrate can write. Refused naming the field, for each command reading the profile."""
    from test_hostile import refused
    from test_report import calibrated_profile

    doc = json.loads(calibrated_profile().model_dump_json())  # a calibration as calibrate writes
    doc["calibration"][field] = 1e-4
    path = tmp_path / "p.json"
    path.write_text(json.dumps(doc))
    said = f"{field} 0.0001 is below 0.001, the least compute scale `pipeplan calibrate` fits"
    refused(["preview", "--profile", str(path), "--devices-per-node", "2"], tmp_path, capsys, said)


@pytest.mark.timeout(120)
def test_a_plan_of_a_shape_the_calibration_never_measured_is_warned_of(tmp_path, profile, capsys):
    """Found by the sixty-second round: a fit of 1x2 runs re-planned 1x1 (an all-reduce it
    never measured gone, the per-call scales unseparated), which then trained slower than the
    1x2 plan it replaced, and nothing said that the fit had never seen that shape. calibrate
    records its phases' (stages, replicas) shapes; plan and preview warn in one line of a
    phase of another, naming the shapes fitted. A calibration written before (no shapes)
    loads and dumps as it did (its sha256 in run records unchanged), and warns of nothing."""
    one_shape = [p for p in PHASES if (p.stages, p.replicas) == (1, 2)]
    write_run(tmp_path / "run", profile, phases=one_shape)
    c = calibrate([tmp_path / "run"], profile).calibration
    assert [shape.label() for shape in c.shapes] == ["1x2"]
    path, out = tmp_path / "cal.json", tmp_path / "plan.json"
    old = profile.model_copy(update={"calibration": TRUTH})  # written before shapes were
    path.write_text(dumps(old))
    assert '"shapes"' not in path.read_text() and load(Profile, path).calibration.shapes is None
    argv = ["plan", "--profile", str(path), "--nodes", "1", "--devices-per-node", "4"]
    argv += ["--device-memory", "1GiB", "--global-batch", "64", "--samples", "2000"]
    argv += ["--epochs", "3", "--out", str(out)]
    assert cli.main(argv) == 0
    assert "WARNING" not in capsys.readouterr().err
    chosen = sorted({(p.layout.num_stages, p.layout.replicas) for p in load(Plan, out).phases})
    shapes = [FittedShape(stages=s, replicas=r) for s, r in chosen]
    for fitted, warned in (([FittedShape(stages=3, replicas=1)], True), (shapes, False)):
        update = {"shapes": fitted, "phases_used": len(fitted)}
        calibrated = profile.model_copy(update={"calibration": TRUTH.model_copy(update=update)})
        path.write_text(dumps(calibrated))
        for command in (argv, ["preview", *argv[1:-2], "--json"]):
            assert cli.main(command) == 0
            lines = [line for line in capsys.readouterr().err.splitlines() if "WARNING" in line]
            assert len(lines) == warned, lines
            if warned:
                said = "pipeplan: WARNING: the calibration was fitted on layouts of (stages x "
                assert lines[0].startswith(f"{said}replicas) 3x1 only, and the plan chooses ")
                assert f"{chosen[0][0]}x{chosen[0][1]} in phase" in lines[0], lines[0]


@pytest.mark.parametrize("stages", [11, 10**6])
def test_a_fitted_shape_the_model_cannot_have_is_refused(tmp_path, profile, stages):
    """Found by the sixty-third round: a calibration's `shapes` of 11x1 for a 10-layer model
    (or 1000000x1) was accepted, and plan's warning named it. A shape has at most as many
    stages as the profile's model has layers."""
    layers = len(profile.layers)
    for count, fine in ((layers, True), (stages if stages > layers else layers + 1, False)):
        update = {"shapes": [FittedShape(stages=count, replicas=1)], "phases_used": 1}
        calibrated = profile.model_copy(update={"calibration": TRUTH.model_copy(update=update)})
        path = tmp_path / "cal.json"
        path.write_text(dumps(calibrated))
        if fine:
            assert load(Profile, path).calibration.shapes[0].stages == layers
            continue
        said = rf"calibration.shapes: {count}x1 has {count} stages but the model has {layers} "
        with pytest.raises(InputFileError, match=said):
            load(Profile, path)


PLAN_ARGV = ["--nodes", "1", "--devices-per-node", "2", "--global-batch", "16", "--samples", "256"]


@pytest.mark.timeout(120)
def test_a_calibration_fitted_to_another_profile_is_refused(tmp_path, profile, capsys):
    """Found by the sixty-fifth round: a vit-digits calibration pasted into the bert-tiny
    profile was planned with and taken by `run --profile`, its scales and overheads priced on
    another model's layers (a step 3.8× bert-tiny's own), without a word. calibrate records
    the profile it fitted to (model, device, and the sha256 of the profile without its
    calibration); a profile holding a calibration fitted to another (another model, device, or
    measurement of the same model) is refused in one line naming the file and the field, and
    nothing is written. A calibration written before fitted_to loads as it did."""
    write_run(tmp_path / "run", profile)
    calibrated = calibrate([tmp_path / "run"], profile)
    assert calibrated.calibration.fitted_to == profile_identity(profile)
    own = tmp_path / "own.json"
    own.write_text(dumps(calibrated))
    assert load(Profile, own) == calibrated
    # Calibrated again, a calibrated profile is fitted to the same profile without it.
    again = calibrate([tmp_path / "run"], load(Profile, own))
    assert again.calibration.fitted_to == calibrated.calibration.fitted_to
    fit = json.loads(own.read_text())["calibration"]
    bert = json.loads(shipped_profile("bert-tiny", "cpu").read_text())
    bf16 = json.loads(shipped_profile("vit-digits", "cpu", "bf16").read_text())
    remeasured = json.loads(PROFILE_PATH.read_text())
    remeasured["layers"][1]["timings"][0]["fwd_s"] *= 1.01  # the same model measured again
    out = tmp_path / "plan.json"
    for doc, field in ((bert, "model"), (bf16, "device"), (remeasured, "sha256")):
        path = tmp_path / f"pasted-{field}.json"
        path.write_text(json.dumps({**doc, "calibration": fit}))
        run = ["run", "--profile", str(path), "--runs-dir", str(tmp_path / "runs"), "--nproc", "2"]
        model = "--model bert-tiny --data synth-text" if doc is bert else "--model vit-digits"
        for argv in (
            ["plan", "--profile", str(path), *PLAN_ARGV, "--epochs", "2", "--out", str(out)],
            [*run, *model.split(), "--epochs", "1", "--name", "r", "--prepare-only"],
        ):
            assert cli.main(argv) == 2, argv
            err = capsys.readouterr().err
            assert err.count("\n") == 1 and err.startswith(f"pipeplan: error: {path}: "), err
            assert f"calibration.fitted_to.{field} " in err, err
            assert "the calibration was fitted to another profile" in err, err
            assert not out.exists() and not (tmp_path / "runs").exists()
    del fit["fitted_to"]  # as written before the sixty-fifth round: not checked
    path = tmp_path / "older.json"
    path.write_text(json.dumps({**bert, "calibration": fit}))
    assert load(Profile, path).calibration.fitted_to is None


def move_into_wait(run_dir: Path, part: str, factor: float) -> None:
    """Each rank's `part` (optimizer_s, allreduce_s) `factor` times as long in every step, the
    difference moved into its wait_s: its parts still add up to its step_s, and the steps,
    epochs and summary are unchanged."""
    lines = []
    for line in (run_dir / "run.jsonl").read_text().splitlines():
        record = json.loads(line)
        if record["kind"] == "step":
            for rank in record["ranks"]:
                old = rank[part]
                rank[part] = old * factor
                rank["wait_s"] += old - rank[part]
        lines.append(json.dumps(record) + "\n")
    (run_dir / "run.jsonl").write_text("".join(lines))


@pytest.mark.parametrize("part", ["optimizer_s", "allreduce_s"])
def test_optimizer_or_allreduce_times_past_the_floor_are_refused(tmp_path, profile, capsys, part):
    """Found by the sixty-fifth round: records whose optimizer_s (or allreduce_s) were 10^-5
    of what ran, the rest moved into wait_s, were fitted at exit 0 with a 0 % residual: a CPU
    AdamW 10^5 times faster than the host's, or an all-reduce link of 1 TB/s between two
    gloo CPU ranks. Both parts are held to what the compute scales are: at least MIN_SCALE
    (0.001) of what the uncalibrated profile prices them at (the median over the ranks fitted),
    refused in one line, nothing written. The unedited run, and one 100× faster, fit."""
    write_run(tmp_path / "run", profile, step_jitter=0.0)
    if part == "optimizer_s":  # the device kind's constant (costmodel) against the truth's
        faster = ADAMW_BYTES_MOVED_PER_PARAM_BYTE / 10e9 / TRUTH.optimizer_s_per_byte
        words = "optimizer step is {:,.0f}× faster than the profile's device prices it"
    else:  # the run cluster's all-reduce link against the truth's, at each replicated stage
        config = RunConfig(name="x", model="vit-digits", data="digits", nproc=2, global_batch=64)
        link = run_cluster(config, profile).allreduce_link
        ranks = [r for o in observe([tmp_path / "run"], profile) for r in o.ranks]
        faster = statistics.median(
            2
            * (r.replicas - 1)
            * (link.latency_s + r.grad_bytes / r.replicas / link.bandwidth_bytes_per_s)
            / r.measured_allreduce_s
            for r in ranks
            if r.replicas > 1 and r.grad_bytes > 0
        )
        words = "all-reduce is {:,.0f}× faster than the cluster's all-reduce link prices it"
    assert 0.01 < faster < 10  # the truth is a plausible fit
    out = tmp_path / "fitted.json"
    argv = ["calibrate", str(tmp_path / "run"), "--profile", str(PROFILE_PATH), "--out", str(out)]
    move_into_wait(tmp_path / "run", part, 0.01)
    assert cli.main(argv) == 0  # 100× faster: within the bound, fitted
    out.unlink()
    move_into_wait(tmp_path / "run", part, 1e-3)  # 10^5× in all
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.splitlines()[-1]
    assert not out.exists()
    assert err.startswith(f"pipeplan: error: {tmp_path / 'run'}: the measured "), err
    assert words.format(faster * 1e5) in err, err
    assert "beyond what calibrate fits (at least 0.001 of that time); the profile is " in err
