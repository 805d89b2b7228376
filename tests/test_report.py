"""`pipeplan report` on small hand-made run directories: medians, errors, speedup, bad input."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from conftest import fake_pricing, priced, write_fake_profile

import cli
from executor.planning import shipped_profile
from pipeplan.errors import BadArgumentError, InputFileError
from pipeplan.formats import (
    STEP_RECORDS,
    WARMUP_STEPS_PER_PHASE,
    Calibration,
    EpochRecord,
    Layout,
    PhaseRecord,
    Profile,
    RankTimes,
    RunConfig,
    StagePlan,
    StepRecord,
    dumps,
    load,
)
from pipeplan.formats.profile import NULL_WHEN_UNFITTED, profile_sha256
from pipeplan.plan import priced_phases
from pipeplan.report import (
    Report,
    make_report,
    measured_timeline,
    simulated_timeline,
)

WARMUP_S = 0.9  # warm-up steps are this slow: any leak into a median shows at once
OVERHEAD_S = 0.011  # the calibrated step overhead of elastic_records' phase 1


def calibrated_profile() -> Profile:
    """The shipped vit-digits profile with a calibration whose only term is a step overhead of
    OVERHEAD_S, as a run that recalibrated itself writes it (calibration-2.json: test_forecast
    prices forecasts with a calibration-1.json of its own)."""
    shipped = load(Profile, shipped_profile("vit-digits", "cpu"))
    fit = dict(runs=["elastic"], phases_used=1, steps_used=7, residual_median=0.0)
    fit["not_fitted"] = dict.fromkeys(NULL_WHEN_UNFITTED, "not measured")  # null, with why
    calibration = Calibration(step_overhead_s=OVERHEAD_S, residual_max=0.0, **fit)
    return shipped.model_copy(update={"calibration": calibration})


CALIBRATED_PRICING = fake_pricing(2).model_copy(
    update={
        "profile": "calibration-2.json",
        "profile_sha256": profile_sha256(calibrated_profile()),
        "calibration": "online",
    }
)


def stage_plan(first: int, stop: int, **times: float) -> StagePlan:
    fields = ("fwd_s", "bwd_s", "send_fwd_s", "send_bwd_s", "allreduce_s", "optimizer_s")
    return StagePlan(
        first_layer=first, stop_layer=stop, memory_bytes=0, **{f: times.get(f, 0.0) for f in fields}
    )


LAYOUT_FIELDS = set(Layout.model_fields)
GLOBAL_BATCH = 64


def phase_record(phase: int, *, stages: int, replicas: int, **fields) -> PhaseRecord:
    per_replica = [[r * stages + s for s in range(stages)] for r in range(replicas)]
    layout = dict(
        frozen_layers=0,
        cached=False,
        micro_batches=stages,
        schedule="1f1b",
        boundaries=[10 * s // stages for s in range(stages + 1)],
        rank_map=per_replica,
    )
    layout.update({k: v for k, v in fields.items() if k in LAYOUT_FIELDS})
    if "micro_batch_size" not in fields:
        # Every phase trains write_run's global batch of 64, as run.jsonl must.
        per_step = replicas * layout["micro_batches"]
        assert GLOBAL_BATCH % per_step == 0, (replicas, layout["micro_batches"])
        layout["micro_batch_size"] = GLOBAL_BATCH // per_step
    record = dict(
        start_step=0,
        start_epoch=0,
        predicted_step_s=None,
        transition_s=0.0,
        pricing=fake_pricing(stages * replicas),
    )
    record.update({k: v for k, v in fields.items() if k not in LAYOUT_FIELDS})
    return priced_as_run(PhaseRecord(phase=phase, layout=Layout(**layout), **record))


def priced_as_run(record: PhaseRecord) -> PhaseRecord:
    """`record`'s predictions as its run records them (`conftest.priced`): from
    calibrated_profile() where it names calibration-2.json."""
    calibrated = record.pricing.profile == CALIBRATED_PRICING.profile
    return priced(record, calibrated_profile() if calibrated else None)


def rank(rank: int, stage: int | None, replica: int | None, **times: float) -> RankTimes:
    fields = ("step_s", "fwd_s", "bwd_s", "wait_s", "allreduce_s", "optimizer_s", "input_s")
    # A stage that trains (its backward timed) steps its optimizer every step, which takes
    # time (`formats.run.unmeasured_times`); one that runs forward only times none.
    times.setdefault("optimizer_s", 0.001 if times.get("bwd_s", 0.0) > 0 else 0.0)
    return RankTimes(
        rank=rank, stage=stage, replica=replica, **{f: times.get(f, 0.0) for f in fields}
    )


def step(
    number: int,
    epoch: int,
    phase: int,
    step_s: float,
    ranks: list[RankTimes],
    cache_hits: int = 0,
    global_batch: int = GLOBAL_BATCH,
):
    """A step record of `global_batch` samples; samples_per_s follows from step_s, as the
    executor writes it (and the format holds it to)."""
    return StepRecord(
        cache_hits=cache_hits,
        step=number,
        epoch=epoch,
        phase=phase,
        step_s=step_s,
        loss=1.0,
        samples_per_s=global_batch / step_s,
        ranks=ranks,
    )


def epoch(
    number: int,
    phase: int,
    epoch_s: float,
    accuracy: float | None,
    steps: int,
    frozen: int = 0,
    global_batch: int = GLOBAL_BATCH,
):
    """An epoch record of `steps` steps of `global_batch` samples; samples_per_s follows from
    epoch_s, as the executor writes it (and the format holds it to)."""
    return EpochRecord(
        epoch=number,
        phase=phase,
        frozen_layers=frozen,
        steps=steps,
        epoch_s=epoch_s,
        train_loss=1.0,
        eval_accuracy=accuracy,
        samples_per_s=global_batch * steps / epoch_s,
    )


def write_run(directory: Path, records: list, **config) -> Path:
    directory.mkdir(parents=True)
    cfg = dict(
        name=directory.name, model="vit-digits", data="digits", nproc=2, global_batch=GLOBAL_BATCH
    )
    cfg["epochs"] = sum(isinstance(r, EpochRecord) for r in records) or 1
    (directory / "run.json").write_text(dumps(RunConfig(**{**cfg, **config})))
    lines = [r.model_dump_json() + "\n" for r in records]
    (directory / "run.jsonl").write_text("".join(lines))
    write_fake_profile(directory, config.get("model", "vit-digits"))
    if any(getattr(r, "pricing", None) == CALIBRATED_PRICING for r in records):
        (directory / CALIBRATED_PRICING.profile).write_text(dumps(calibrated_profile()))
    return directory


def elastic_records() -> list:
    """Phase 0: 2 stages × 1 replica, M=4, 7 steps in epoch 0; phase 1: 1 stage × 2 replicas,
    cached, 3 steps: 1 filling its cache in epoch 1, 2 reading it in epoch 2."""
    p0 = phase_record(
        0,
        stages=2,
        replicas=1,
        micro_batches=4,
        predicted_step_s=0.1,
        transition_s=0.1,
        predicted_stages=[
            # Each stage's work fits in the step, as a record's must (M × 0.02 + 0.002 ≤ 0.1).
            stage_plan(0, 5, fwd_s=0.01, bwd_s=0.01, send_fwd_s=0.001, optimizer_s=0.002),
            stage_plan(5, 10, fwd_s=0.01, bwd_s=0.01, send_bwd_s=0.001, optimizer_s=0.002),
        ],
    )
    records: list = [p0]
    # The ranks time only their parts (step_s 0): a CPU run's parts add up to a rank's step_s.
    slow = dict(fwd_s=WARMUP_S, bwd_s=WARMUP_S, wait_s=WARMUP_S)
    for n in range(WARMUP_STEPS_PER_PHASE):
        records.append(step(n, 0, 0, WARMUP_S, [rank(0, 0, 0, **slow), rank(1, 1, 0, **slow)]))
    for i, step_s in enumerate([0.5, 0.1, 0.4, 0.2, 0.3]):
        stage0 = rank(
            0,
            0,
            0,
            fwd_s=0.01 * (i + 1),
            bwd_s=0.1,
            wait_s=0.02,
            optimizer_s=0.004,
            input_s=0.001,
        )
        stage1 = rank(1, 1, 0, fwd_s=0.02, bwd_s=0.1, wait_s=0.01 * i)
        records.append(step(2 + i, 0, 0, step_s, [stage0, stage1]))
    records.append(epoch(0, 0, epoch_s=3.5, accuracy=0.5, steps=7))  # its steps: 3.3 s
    p1 = phase_record(
        1,
        stages=1,
        replicas=2,
        start_step=7,
        start_epoch=1,
        frozen_layers=3,
        cached=True,
        predicted_step_s=0.07,
        transition_s=0.2,
        # Priced with a calibration whose step overhead is what the step adds to its stages.
        pricing=CALIBRATED_PRICING,
        predicted_stages=[
            stage_plan(0, 10, fwd_s=0.02, bwd_s=0.03, allreduce_s=0.007, optimizer_s=0.002)
        ],
    )
    records.append(p1)
    # Its cache starts empty (phase 0 cached nothing): epoch 1's step fills it (no hits, the
    # frozen prefix computed), epoch 2's steps read it whole.
    replica0 = rank(0, 0, 0, fwd_s=0.05, bwd_s=0.01, allreduce_s=0.006, optimizer_s=0.004)
    replica1 = rank(1, 0, 1, fwd_s=0.07, bwd_s=0.03, allreduce_s=0.008, optimizer_s=0.004)
    records.append(step(7, 1, 1, 0.12, [replica0, replica1]))
    records.append(epoch(1, 1, epoch_s=0.5, accuracy=0.75, steps=1, frozen=3))  # 0.12 s
    for n in range(2):
        replica0 = rank(0, 0, 0, fwd_s=0.02, bwd_s=0.01, allreduce_s=0.006, optimizer_s=0.004)
        replica1 = rank(1, 0, 1, fwd_s=0.04, bwd_s=0.03, allreduce_s=0.008, optimizer_s=0.004)
        records.append(step(8 + n, 2, 1, 0.06, [replica0, replica1], cache_hits=64))
    records.append(epoch(2, 1, epoch_s=1.5, accuracy=0.8, steps=2, frozen=3))  # 0.12 s
    return records


def static_records(
    steps: int = 10, predicted_step_s: float = 0.182, global_batch: int = GLOBAL_BATCH
) -> list:
    phase = phase_record(
        0,
        stages=2,
        replicas=1,
        micro_batch_size=global_batch // 2,
        predicted_step_s=predicted_step_s,
        transition_s=0.6,
    )
    records: list = [phase]
    for n in range(steps):
        # Each stage computes its forward and backward, as the format holds a record to.
        ranks = [rank(0, 0, 0, fwd_s=0.2, bwd_s=0.3), rank(1, 1, 0, fwd_s=0.2, bwd_s=0.3)]
        records.append(step(n, 0, 0, 0.6, ranks, global_batch=global_batch))
    records.append(epoch(0, 0, epoch_s=6.0, accuracy=0.7, steps=steps, global_batch=global_batch))
    return records


@pytest.fixture
def elastic(tmp_path) -> Path:
    return write_run(tmp_path / "elastic", elastic_records())


@pytest.fixture
def static(tmp_path) -> Path:
    return write_run(tmp_path / "static", static_records())


# --------------------------------------------------------------------------- numbers


def elastic_phase(phase: int) -> PhaseRecord:
    """elastic_records()'s phase record `phase`, its predictions priced as its run's."""
    return [r for r in elastic_records() if isinstance(r, PhaseRecord)][phase]


def test_phase_step_median_skips_the_warmup_steps_and_gives_error_and_iqr(elastic):
    p0 = make_report(elastic).phases[0]
    assert (p0.steps, p0.measured_steps) == (7, 5)
    assert p0.measured_step_s == pytest.approx(0.3)  # median of 0.1..0.5, not of the 0.9 s steps
    # Quartiles of 0.1..0.5 (statistics.quantiles, exclusive): 0.15 and 0.45.
    assert p0.measured_iqr_s == pytest.approx(0.3)
    predicted = elastic_phase(0).predicted_step_s
    assert p0.error == pytest.approx((predicted - 0.3) / 0.3)
    assert p0.layout.label() == "2x1 M=4 1f1b" and p0.predicted_step_s == predicted


def test_stage_predictions_are_per_step_and_measurements_are_medians(elastic):
    s0, s1 = make_report(elastic).phases[0].stages
    assert (s0.first_layer, s0.stop_layer, s0.ranks) == (0, 5, [0])
    # Predicted: M=4 micro-batches × (fwd + bwd); measured: median of 0.11..0.15.
    plan = elastic_phase(0).predicted_stages[0]
    compute = 4 * (plan.fwd_s + plan.bwd_s)
    assert s0.compute.predicted_s == pytest.approx(compute)
    assert s0.compute.measured_s == pytest.approx(0.13)
    assert s0.compute.error == pytest.approx((compute - 0.13) / 0.13)
    assert s0.transfer.predicted_s == pytest.approx(4 * plan.send_fwd_s)
    assert s0.transfer.measured_s == pytest.approx(0.02)
    assert s0.optimizer.error == pytest.approx((plan.optimizer_s - 0.004) / 0.004)
    assert s0.measured_input_s == pytest.approx(0.001) and s1.measured_input_s is None
    # A zero prediction (no replicas to all-reduce with) has no relative error.
    assert s0.allreduce.predicted_s == 0.0 and s0.allreduce.error is None
    assert s1.transfer.measured_s == pytest.approx(0.02)  # median of 0, 0.01, ..., 0.04


def test_stage_measurement_averages_the_replicas_of_a_stage(elastic):
    (stage,) = make_report(elastic).phases[1].stages
    assert stage.ranks == [0, 1]
    assert stage.compute.measured_s == pytest.approx(0.05)  # mean of 0.03 and 0.07
    plan = elastic_phase(1).predicted_stages[0]  # one micro-batch
    compute = plan.fwd_s + plan.bwd_s
    assert stage.compute.predicted_s == pytest.approx(compute)
    assert stage.compute.error == pytest.approx((compute - 0.05) / 0.05)
    assert stage.allreduce.measured_s == pytest.approx(0.007)
    assert stage.replica0 is not None and stage.replica0.fwd_s == pytest.approx(0.02)


def test_training_time_accuracy_and_epochs(elastic):
    report = make_report(elastic)
    assert report.training_s == pytest.approx(3.5 + 2.0 + 0.1 + 0.2)
    p0, p1 = elastic_phase(0).predicted_step_s, elastic_phase(1).predicted_step_s
    assert report.predicted_training_s == pytest.approx(p0 * 7 + p1 * 3)
    assert report.final_eval_accuracy == 0.8 and report.steps == 10
    epochs = [(e.epoch, e.stages, e.replicas) for e in report.epochs]
    assert epochs == [(0, 2, 1), (1, 1, 2), (2, 1, 2)]
    assert report.baseline is None


def test_a_phase_shorter_than_the_warmup_keeps_all_its_steps(tmp_path):
    records = static_records(steps=WARMUP_STEPS_PER_PHASE)
    phase = make_report(write_run(tmp_path / "short", records)).phases[0]
    assert phase.measured_steps == WARMUP_STEPS_PER_PHASE
    assert phase.measured_step_s == pytest.approx(0.6)


def test_steps_that_fill_the_cache_are_not_steady(tmp_path):
    records = elastic_records()
    # Phase 1's first step fills its cache (epoch 1: no hits); its second, in epoch 2, one
    # sample short of the global batch: the prefix still ran.
    _, short, _ = [r for r in records if isinstance(r, STEP_RECORDS) and r.phase == 1]
    short.cache_hits = 63
    short.step_s, short.samples_per_s = 1.0, GLOBAL_BATCH / 1.0
    assert records[records.index(short) + 2].epoch == 2
    records[records.index(short) + 2] = epoch(2, 1, epoch_s=2.5, accuracy=0.8, steps=2, frozen=3)
    phase = make_report(write_run(tmp_path / "filling", records)).phases[1]
    assert (phase.steps, phase.cache_filling_steps, phase.measured_steps) == (3, 2, 1)
    # The one settled step is fewer than the warm-up: kept, as in summary.json, rather than
    # measuring nothing; the 1 s cache-filling steps are not in the median.
    assert phase.measured_step_s == pytest.approx(0.06)


def test_speedup_against_a_baseline(elastic, static):
    """The measured speedup from both runs' records; the previewed one needs one epoch length
    to price the runs' epochs with, which the hand-made elastic run (epochs of 7, 1, 2 steps)
    does not have: n/a, saying so, rather than its step predictions' ratio."""
    baseline = make_report(elastic, static).baseline
    assert baseline is not None and baseline.name == "static"
    assert baseline.measured_speedup == pytest.approx((6.0 + 0.6) / 5.8)
    assert baseline.predicted_training_s == pytest.approx(static_records()[0].predicted_step_s * 10)
    assert baseline.previewed_speedup is None and baseline.previewed_training_s is None
    why = "this run has epochs of 1, 2, 7 steps: no one epoch to price"
    assert baseline.previewed_unavailable == why
    assert (baseline.final_eval_accuracy, baseline.steps) == (0.7, 10)


def test_a_run_stopped_mid_epoch_counts_its_open_epochs_steps(tmp_path, static, capsys):
    """Found by the sixtieth round: a run stopped after 12 steps of its first epoch (no epoch
    record) was "training 0.1 s", its transition alone, and "measured 57.97×" over a baseline
    of the same 12 steps it was slower than. Its open epoch's steps count in training_s, as
    in predicted_training_s: here the same 10 steps of 0.6 s as the baseline's."""
    records = [r for r in static_records() if not isinstance(r, EpochRecord)]
    # A shorter transition: another run's first record, not a copy of the baseline's.
    records[0] = records[0].model_copy(update={"transition_s": 0.3})
    stopped = write_run(tmp_path / "stopped", records, epochs=2, max_steps_per_epoch=20)
    report = make_report(stopped, static)
    assert report.training_s == pytest.approx(0.3 + 10 * 0.6)
    assert report.predicted_training_s == pytest.approx(10 * records[0].predicted_step_s)
    assert report.baseline is not None
    assert report.baseline.measured_speedup == pytest.approx((6.0 + 0.6) / 6.3)
    assert cli.main(["report", str(stopped), "--baseline", str(static)]) == 0
    out = capsys.readouterr().out
    assert "10 steps, 0/2 epochs, training 6.3 s" in out and "measured 1.05×" in out


# --------------------------------------------------------------------------- previewed speedup

PREVIEW_STEPS = 4  # steps per epoch of the planned runs: 256 samples of 64
PREVIEW_EPOCHS = 4


def preview_cluster():
    """Room for a 1x2 layout of vit-digits (the planner's choice at 130 MiB), which a 2-stage
    phase can move to: a transition the planner prices."""
    return fake_pricing(2).cluster.model_copy(update={"device_memory_bytes": 130 << 20})


def preview_plan(frozen: list[int], first=None):
    """make_plan's plan of the shipped profile on preview_cluster for 4 epochs of 4 steps,
    freezing `frozen` per epoch; with `first` (pins), its first phase laid out as the solver
    lays it out under those pins."""
    from pipeplan.formats import FreezeSchedule
    from pipeplan.plan import make_plan

    profile = load(Profile, shipped_profile("vit-digits", "cpu"))
    args = dict(global_batch=GLOBAL_BATCH, samples=PREVIEW_STEPS * GLOBAL_BATCH)
    args.update(epochs=PREVIEW_EPOCHS, freeze=FreezeSchedule(source="list", frozen_layers=frozen))
    plan = make_plan(profile, preview_cluster(), **args)
    if first is not None:  # the phases priced again for that layout (`priced_phases`)
        layout = make_plan(profile, preview_cluster(), pins=first, **args).phases[0].layout
        phases = [plan.phases[0].model_copy(update={"layout": layout}), *plan.phases[1:]]
        phases = priced_phases(plan.model_copy(update={"phases": phases}), profile)
        total = sum(p.total_s for p in phases)
        plan = plan.model_copy(update={"phases": phases, "predicted_total_s": total})
    return plan


def planned_records(plan, refit_after: int | None = None, steps: int = PREVIEW_STEPS) -> list:
    """A run's records of `plan`'s phases, as the run trained them: every step of every epoch
    (a cached phase's first epoch filling the cache), each phase's record predicting the
    plan's step. From phase `refit_after` on, the phases were priced with a refit
    (calibration-2.json: OVERHEAD_S more per step), as a run that recalibrated itself records
    them. `steps`: of each epoch (a run with --max-steps-per-epoch trains fewer)."""
    cluster = preview_cluster()
    records: list = []
    step_number = 0
    for n, phase in enumerate(plan.phases):
        layout, pricing = phase.layout, fake_pricing(2).model_copy(update={"cluster": cluster})
        predicted = phase.step_s
        if refit_after is not None and n >= refit_after:
            pricing = CALIBRATED_PRICING.model_copy(update={"cluster": cluster})
            predicted = phase.step_s + OVERHEAD_S
        records.append(
            PhaseRecord(
                phase=n,
                start_step=step_number,
                start_epoch=phase.start_epoch,
                layout=layout,
                predicted_step_s=predicted,
                predicted_stages=phase.stages,
                transition_s=0.05 * n,
                pricing=pricing,
            )
        )
        # Each stage computes its forward; one that trains its backward and, with replicas,
        # its all-reduce (as the format holds a record to).
        trains = {"fwd_s": 0.02, "bwd_s": 0.03, "allreduce_s": 0.005 * (layout.replicas > 1)}
        ranks = [
            rank(r, s, d, **(trains if s >= layout.forward_only_stages else {"fwd_s": 0.02}))
            for d, row in enumerate(layout.rank_map)
            for s, r in enumerate(row)
        ]
        for k in range(phase.epochs):
            hits = GLOBAL_BATCH if layout.cached and k > 0 else 0
            for _ in range(steps):
                epoch_number = phase.start_epoch + k
                records.append(step(step_number, epoch_number, n, 0.1, ranks, cache_hits=hits))
                step_number += 1
            frozen = layout.frozen_layers
            records.append(epoch(epoch_number, n, 0.4, 0.5, steps, frozen=frozen))
    return records


def write_planned(directory: Path, plan, refit_after: int | None = None) -> Path:
    run = write_run(directory, planned_records(plan, refit_after), epochs=PREVIEW_EPOCHS)
    if refit_after is not None:
        (run / CALIBRATED_PRICING.profile).write_text(dumps(calibrated_profile()))
    return run


def planner_total(plan) -> float:
    """The planner's total for `plan`'s layouts, priced again (`priced_phases`): transitions
    and a cached phase's fill epoch in."""
    from pipeplan.plan import priced_phases

    profile = load(Profile, shipped_profile("vit-digits", "cpu"))
    return sum(p.total_s for p in priced_phases(plan, profile))


@pytest.fixture(scope="module")
def planned():
    """An elastic plan that moves from a 2-stage pipeline to 1x2 with a cached prefix of 8
    layers, and the static plan: the layouts of the two runs below."""
    from pipeplan.solver import Pins

    elastic = preview_plan([0, 0, 8, 8], first=Pins(num_stages=2))
    static = preview_plan([0] * PREVIEW_EPOCHS)
    assert elastic.phases[0].layout.num_stages == 2 and elastic.phases[1].layout.cached
    assert elastic.phases[1].transition_s > 0  # the move is priced
    return elastic, static


def test_the_previewed_speedup_is_the_planners_total_of_each_run_as_it_ran(tmp_path, planned):
    """Found by the thirty-eighth round: the previewed speedup was the ratio of Σ
    predicted_step_s × steps, which leaves out what the planner itself prices, a phase's
    transition and a cached phase's fill epoch (the uncached step plus the stores): a cached,
    re-partitioned run was previewed faster than the planner would have said. It is now the
    ratio of the planner's totals for the runs' layouts, as `priced_phases` prices them."""
    elastic_plan, static_plan = planned
    elastic = write_planned(tmp_path / "elastic", elastic_plan)
    static = write_planned(tmp_path / "static", static_plan)
    baseline = make_report(elastic, static).baseline
    expected = planner_total(static_plan) / planner_total(elastic_plan)
    assert baseline is not None and baseline.previewed_speedup == pytest.approx(expected, rel=1e-6)
    assert planner_total(static_plan) == pytest.approx(static_plan.predicted_total_s, rel=1e-6)
    assert baseline.previewed_unavailable is None
    assert baseline.previewed_training_s == pytest.approx(planner_total(static_plan), rel=1e-6)
    assert baseline.run_previewed_training_s == pytest.approx(planner_total(elastic_plan), rel=1e-6)
    # The step predictions alone (the old figure) say otherwise.
    steps = [p.step_s * p.epochs * PREVIEW_STEPS for p in elastic_plan.phases]
    steps_only = static_plan.phases[0].step_s * PREVIEW_EPOCHS * PREVIEW_STEPS / sum(steps)
    assert abs(steps_only / expected - 1) > 0.01


def test_the_previewed_speedup_prices_a_refitted_run_with_the_profile_it_started_with(
    tmp_path, planned, capsys, monkeypatch
):
    """Found by the thirty-eighth round: a run that recalibrated itself records its later
    phases' predictions from the refit, the baseline's from profile.json: their ratio mixed
    two pricings. Both runs are priced from the profile.json they started with."""
    elastic_plan, static_plan = planned
    refitted = write_planned(tmp_path / "refitted", elastic_plan, refit_after=1)
    static = write_planned(tmp_path / "static", static_plan)
    report = make_report(refitted, static)
    baseline = report.baseline
    assert report.phases[1].predicted_step_s == pytest.approx(
        elastic_plan.phases[1].step_s + OVERHEAD_S
    )
    expected = planner_total(static_plan) / planner_total(elastic_plan)
    assert baseline is not None and baseline.previewed_speedup == pytest.approx(expected, rel=1e-6)
    monkeypatch.setenv("COLUMNS", "160")
    assert cli.main(["report", str(refitted), "--baseline", str(static)]) == 0
    assert f"(previewed {expected:.2f}× from profile.json)" in capsys.readouterr().out


def test_a_phase_a_resume_entered_is_previewed_afresh(tmp_path, planned):
    """A resumed phase's state came from a checkpoint and its node caches start empty: the
    planner prices it as a first phase (no transition, its first epoch filling the cache)."""
    elastic_plan, static_plan = planned
    records = planned_records(elastic_plan)
    for n, record in enumerate(records):
        if isinstance(record, PhaseRecord) and record.phase == 1:
            records[n] = record.model_copy(update={"resumed": True})
    resumed = write_run(tmp_path / "resumed", records, epochs=PREVIEW_EPOCHS)
    static = write_planned(tmp_path / "static", static_plan)
    alone = [elastic_plan.model_copy(update={"phases": [p]}) for p in elastic_plan.phases]
    baseline = make_report(resumed, static).baseline
    assert baseline is not None
    assert baseline.run_previewed_training_s == pytest.approx(
        sum(planner_total(plan) for plan in alone), rel=1e-6
    )
    assert baseline.run_previewed_training_s < planner_total(elastic_plan)  # no move priced


def test_no_previewed_speedup_for_runs_started_from_different_profiles(
    tmp_path, planned, capsys, monkeypatch
):
    """Two profile.json files are two pricings: no one number compares them, and the report
    says why instead."""
    elastic_plan, static_plan = planned
    elastic = write_planned(tmp_path / "elastic", elastic_plan)
    records = planned_records(static_plan)
    other = calibrated_profile()
    for n, record in enumerate(records):
        if isinstance(record, PhaseRecord):
            update = {"profile_sha256": profile_sha256(other), "calibration": "profile"}
            pricing = record.pricing.model_copy(update=update)
            records[n] = priced(record.model_copy(update={"pricing": pricing}), other)
    static = write_run(tmp_path / "static", records, epochs=PREVIEW_EPOCHS)
    (static / "profile.json").write_text(dumps(other))
    baseline = make_report(elastic, static).baseline
    assert baseline is not None and baseline.previewed_speedup is None
    assert "the baseline started from another profile.json" in baseline.previewed_unavailable
    monkeypatch.setenv("COLUMNS", "160")
    assert cli.main(["report", str(elastic), "--baseline", str(static)]) == 0
    captured = capsys.readouterr()
    assert "(previewed n/a)" in captured.out
    said = "pipeplan: WARNING: no previewed speedup: the baseline started from another"
    assert said in captured.err


def test_no_previewed_speedup_for_runs_whose_epochs_differ_in_length(tmp_path, planned):
    """Found by the thirty-ninth round: a baseline run with --max-steps-per-epoch 5 against a
    run of 22 steps per epoch gave "previewed 0.17×", 15 steps priced against 66. Runs that
    trained different amounts get none, and the report says why."""
    elastic_plan, static_plan = planned
    elastic = write_planned(tmp_path / "elastic", elastic_plan)
    records = planned_records(static_plan, steps=PREVIEW_STEPS - 2)
    static = write_run(tmp_path / "static", records, epochs=PREVIEW_EPOCHS)
    baseline = make_report(elastic, static).baseline
    assert baseline is not None and baseline.previewed_speedup is None
    assert baseline.previewed_unavailable == (
        f"the baseline's epochs are {PREVIEW_STEPS - 2} steps, this run's {PREVIEW_STEPS}: "
        "they trained different amounts"
    )


def test_no_speedup_for_runs_that_trained_different_numbers_of_epochs(
    tmp_path, planned, capsys, monkeypatch
):
    """Found by the fortieth round: a 3-epoch run against a 2-epoch baseline reported
    "previewed 0.49×" and a measured ratio, both the epoch ratio times the speedup. Runs
    that trained different numbers of steps get neither, and the report says why."""
    elastic_plan, static_plan = planned
    elastic = write_planned(tmp_path / "elastic", elastic_plan)
    records = planned_records(static_plan)
    ends = [n for n, record in enumerate(records) if isinstance(record, EpochRecord)]
    static = write_run(tmp_path / "static", records[: ends[-2] + 1], epochs=PREVIEW_EPOCHS)
    baseline = make_report(elastic, static).baseline
    assert baseline is not None
    assert (baseline.measured_speedup, baseline.previewed_speedup) == (None, None)
    fewer, more = (PREVIEW_EPOCHS - 1) * PREVIEW_STEPS, PREVIEW_EPOCHS * PREVIEW_STEPS
    assert baseline.previewed_unavailable == (
        f"the baseline trained {fewer} steps, this run {more}: they trained different amounts"
    )
    monkeypatch.setenv("COLUMNS", "160")
    assert cli.main(["report", str(elastic), "--baseline", str(static)]) == 0
    captured = capsys.readouterr()
    assert "measured n/a (previewed n/a)" in captured.out


def test_timelines_for_the_plots(elastic):
    phase = make_report(elastic).phases[0]
    measured = measured_timeline(phase)
    stage0 = [(e.kind, e.start_s, e.end_s) for e in measured.events if e.stage == 0]
    # Laid end to end in a fixed order; zero-length parts (all-reduce here) are left out.
    assert [kind for kind, _, _ in stage0] == ["fwd", "bwd", "send", "optimizer"]
    assert all(a[2] == pytest.approx(b[1]) for a, b in itertools.pairwise(stage0))
    assert measured.step_s == pytest.approx(0.3)
    simulated = simulated_timeline(phase)
    assert simulated is not None and simulated.num_stages == 2
    assert sum(e.kind == "fwd" for e in simulated.events) == 2 * 4  # S × M


def test_the_prediction_beyond_the_simulated_schedule_is_overhead(elastic):
    phase = make_report(elastic).phases[1]
    # One stage, one micro-batch, priced with a calibration whose step overhead is OVERHEAD_S:
    # the prediction is the simulated schedule plus that.
    assert phase.predicted_overhead_s == pytest.approx(OVERHEAD_S)
    simulated = simulated_timeline(phase)
    assert simulated is not None and simulated.step_s == pytest.approx(phase.predicted_step_s)
    schedule_s = max(e.end_s for e in simulated.events)
    assert schedule_s == pytest.approx(phase.predicted_step_s - OVERHEAD_S)


# --------------------------------------------------------------------------- bad input


def malformed_line(tmp_path: Path) -> Path:
    run = write_run(tmp_path / "bad", elastic_records())
    with (run / "run.jsonl").open("a") as f:
        f.write('{"kind": "step", "step": 99\n')
    return run


def a_file(tmp_path: Path) -> Path:
    path = tmp_path / "run.jsonl"
    path.write_text("")
    return path


def other_version(tmp_path: Path) -> Path:
    run = write_run(tmp_path / "v2", elastic_records())
    config = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(json.dumps({**config, "schema_version": 2}))
    return run


def without(name: str):
    def make(tmp_path: Path) -> Path:
        run = write_run(tmp_path / "partial", elastic_records())
        (run / name).unlink()
        return run

    return make


BAD_RUNS = {
    "missing": (lambda tmp: tmp / "nope", "no such run directory"),
    "a file": (a_file, "is a file, not a run directory"),
    "no run.json": (without("run.json"), "no run.json"),
    # Beside its run.json: a run that recorded no step (the twenty-seventh round: "not a run
    # directory" was said of a run whose ranks failed before their first step).
    "no run.jsonl": (without("run.jsonl"), "has recorded no step"),
    "run.json of another version": (other_version, "schema_version 2 is not supported"),
    "no steps": (
        lambda tmp: write_run(tmp / "empty", elastic_records()[:1]),
        "incomplete",
    ),
    "malformed record": (malformed_line, "run.jsonl:16: not a run record"),
    "step without phase": (
        lambda tmp: write_run(tmp / "orphan", elastic_records()[1:3]),
        "never started",
    ),
}


@pytest.mark.parametrize(
    ("edited", "fragment"),
    [
        (0, "run.jsonl:1: phase 1 is the run's first phase record; a run's phases count from 0"),
        (1, "phase 5 after phase 0: phases follow one another from 0"),
    ],
)
def test_an_edited_phase_index_names_the_phase_record(tmp_path, capsys, edited, fragment):
    """Found by the fifty-first round: the first phase record's `phase` edited from 0 to 1 was
    blamed on the intact step record after it, "run.jsonl:2: step 0 is in phase 0, never
    started". The phase record's own line is named; a later phase edited ahead too (the
    fifty-fifth round: its steps named a phase never started, or the intact phase record
    after it was blamed, "phase 2 after phase 2")."""
    records = elastic_records()
    at = [i for i, r in enumerate(records) if r.kind == "phase"][edited]
    records[at] = records[at].model_copy(update={"phase": 5 if edited else 1})
    run = write_run(tmp_path / "edited", records)
    assert cli.main(["report", str(run)]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and fragment in err, err
    if edited:
        assert f"run.jsonl:{at + 1}: phase 5 after" in err, err


@pytest.mark.parametrize(("kind", "value"), [("step", 1), ("epoch", 1), ("epoch", 2)])
def test_an_edited_step_or_epoch_index_ahead_is_named_on_its_line(tmp_path, capsys, kind, value):
    """Found by the fifty-fourth round: the first step record's `step` edited from 0 to 1 was
    blamed on the intact record after it ("run.jsonl:3: step 1 after step 1"), and so was
    the first epoch record's `epoch`. Steps and epochs follow one another from 0: one ahead is
    named on its own line."""
    records = elastic_records()
    at = next(i for i, r in enumerate(records) if r.kind == kind)
    records[at] = records[at].model_copy(update={kind: value})
    run = write_run(tmp_path / "edited", records)
    assert cli.main(["report", str(run)]) == 2
    err = capsys.readouterr().err
    said = f"run.jsonl:{at + 1}: {kind} {value} after no {kind} record: {kind}s follow one another"
    assert len(err.splitlines()) == 1 and said in err, err


@pytest.mark.parametrize("case", BAD_RUNS)
def test_bad_run_directory_is_one_input_error_line(tmp_path, capsys, case):
    make, fragment = BAD_RUNS[case]
    run = make(tmp_path)
    with pytest.raises(InputFileError, match=fragment):
        make_report(run)
    assert cli.main(["report", str(run)]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and fragment in err and "Traceback" not in err


@pytest.mark.parametrize(
    "config, fragment",
    [({"model": "bert-tiny"}, "model 'bert-tiny'"), ({"global_batch": 32}, "global batch 32")],
)
def test_baseline_of_another_model_or_batch_is_refused(tmp_path, elastic, capsys, config, fragment):
    records = static_records(global_batch=config.get("global_batch", GLOBAL_BATCH))
    # Priced with its own model's profile, as its run would have been.
    pricing = fake_pricing(2, config.get("model", "vit-digits"))
    records[0] = records[0].model_copy(update={"pricing": pricing})
    other = write_run(tmp_path / "other", records, **config)
    with pytest.raises(BadArgumentError, match=fragment):
        make_report(elastic, other)
    assert cli.main(["report", str(elastic), "--baseline", str(other)]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "not comparable" in err


def test_a_broken_baseline_is_an_input_error(tmp_path, elastic):
    with pytest.raises(InputFileError, match="no such run directory"):
        make_report(elastic, tmp_path / "nope")


# --------------------------------------------------------------------------- command line


def test_cli_prints_the_phase_and_stage_tables_and_the_speedup(
    elastic, static, capsys, monkeypatch
):
    monkeypatch.setenv("COLUMNS", "160")  # rich wraps headers in a narrower console
    assert cli.main(["report", str(elastic), "--baseline", str(static)]) == 0
    out = capsys.readouterr().out
    error = (elastic_phase(0).predicted_step_s - 0.3) / 0.3
    assert "predicted ms" in out and "2x1 M=4 1f1b" in out and f"{error:+.0%}" in out
    assert "phase 1: predicted / measured" in out and "pipeline bubbles" in out
    assert "speedup over static: measured 1.14×" in out and "(previewed n/a)" in out


def test_cli_json_parses_and_validates(elastic, static, capsys):
    assert cli.main(["report", str(elastic), "--baseline", str(static), "--json"]) == 0
    text = capsys.readouterr().out
    report = Report.model_validate(json.loads(text))
    assert report.schema_version == 2 and report.baseline is not None
    assert report == make_report(elastic, static)


def test_cli_plot_writes_pngs(elastic, static, tmp_path, capsys):
    out = tmp_path / "plots"
    assert cli.main(["report", str(elastic), "--baseline", str(static), "--plot", str(out)]) == 0
    names = sorted(p.name for p in out.iterdir())
    assert names == [
        "epochs.png",
        "phase0-measured-vs-simulated.png",
        "phase1-measured-vs-simulated.png",
    ]
    assert all((out / n).read_bytes().startswith(b"\x89PNG") for n in names)
    assert "wrote 3 plots" in capsys.readouterr().err


def test_a_run_resumed_on_another_world_size_is_titled_by_each(tmp_path, capsys, monkeypatch):
    """Found in the hostile rounds' notes: `report` titled a run resumed on another --nproc by
    run.json's last nproc ("4 ranks"), as if it had trained on 4 ranks throughout. The title
    names each world in order, and the report's JSON carries them."""
    from conftest import fake_pricing

    records = elastic_records()
    for n, record in enumerate(records):  # phase 1 resumed on 4 ranks, two of them idle
        if isinstance(record, PhaseRecord) and record.phase == 1:
            pricing = record.pricing.model_copy(update={"cluster": fake_pricing(4).cluster})
            records[n] = record.model_copy(update={"pricing": pricing, "resumed": True})
        elif isinstance(record, STEP_RECORDS) and record.phase == 1:
            idle = [rank(2, None, None), rank(3, None, None)]
            records[n] = record.model_copy(update={"ranks": [*record.ranks, *idle]})
    run = write_run(tmp_path / "r", records, nproc=4)
    (run / CALIBRATED_PRICING.profile).write_text(dumps(calibrated_profile()))
    monkeypatch.setenv("COLUMNS", "160")
    assert cli.main(["report", str(run)]) == 0
    assert "run r: vit-digits, 2 then 4 ranks" in capsys.readouterr().out
    assert make_report(run).worlds == [2, 4]
    assert make_report(write_run(tmp_path / "e", elastic_records())).worlds == [2]


def test_a_run_whose_ranks_are_starting_is_in_use_not_unstarted(tmp_path, capsys):
    """Found by the fiftieth round: for some seconds while a run's ranks started (run.json
    written, no run.jsonl yet), `report` and `calibrate` said "has recorded no step …
    prepared and not started", of a live run. A folder another process holds is in use."""
    import fcntl
    import os

    import cli

    run = tmp_path / "r"
    run.mkdir()
    (run / "run.json").write_text("{}")
    holder = os.open(run, os.O_RDONLY | os.O_DIRECTORY)  # as a live run holds it
    try:
        fcntl.flock(holder, fcntl.LOCK_EX)
        assert cli.main(["report", str(run)]) == 2
        (line,) = capsys.readouterr().err.splitlines()
        assert line == (
            f"pipeplan: error: {run}: in use by a pipeplan process training it (a run or a "
            "resume), which has recorded no step yet; read it once that ends"
        )
    finally:
        os.close(holder)
    assert cli.main(["report", str(run)]) == 2
    assert "has recorded no step (no run.jsonl" in capsys.readouterr().err
