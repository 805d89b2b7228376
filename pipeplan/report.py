"""`pipeplan report`: what a run measured, next to what the planner predicted for it.

`make_report(run_dir)` reads a run directory written by `pipeplan run` (`run.json`,
`run.jsonl`) and compares, for every phase (one layout between two freeze points), the step
time the planner predicted before the phase started with the measured one, and stage by stage
the predicted compute, transfer, all-reduce and optimizer time with the per-rank timings the
run recorded. With a baseline run (e.g. the same run with `--freeze none`) it adds the measured
speedup and the previewed one: both runs as they ran (their layouts, transitions and steps)
priced by the planner from the profile they started with, as `pipeplan preview` prices a plan
before any run (`previewed_training_s`).

`write_report_plots(report, directory)` draws, per phase, the measured step above the
planner's simulated one, and the per-epoch chart: throughput and layout, held-out loss and
accuracy. Each epoch also carries the speedup forecast the run recorded at its end.

Measured numbers are medians over a phase's steady steps, as in `summary.json`: a cached
phase's steps that still fill the cache are left out (see `pipeplan.formats.run.steady_step`),
then the first `WARMUP_STEPS_PER_PHASE` of the rest. Every per-step quantity is a total over
the step (the planner's per-micro-batch times are multiplied by M). Errors are fractions:
(predicted − measured) / measured, so −0.25 means the planner predicted 25 % less time than was
measured.
"""

from __future__ import annotations

import math
import statistics
from array import array
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from pipeplan.costmodel import CostModel
from pipeplan.errors import BadArgumentError, InputFileError, PipeplanError
from pipeplan.fileio import check_run_directory, reading_run
from pipeplan.formats import (
    STEP_RECORDS,
    BaselineReport,
    Comparison,
    EpochRecord,
    EpochReport,
    PhaseRecord,
    PhaseReport,
    PhaseSummary,
    Profile,
    RankBreakdown,
    RankTimes,
    Report,
    RunConfig,
    RunSummary,
    StagePlan,
    StageReport,
    StepRecord,
    load,
    read_records,
    steady_step,
    steady_steps,
)
from pipeplan.log import held
from pipeplan.plan import TrainingShape, ran_phase_s
from pipeplan.runfiles import check_distinct_runs, check_run_files, trained_records
from pipeplan.simulate import StageWork, Timeline, TimelineEvent, received_in_op, simulate

ERROR_DESCRIPTION = "(predicted − measured) / measured, a fraction; None unless both are > 0."
# The profile a run started with, copied into its directory (`executor.planning.RUN_PROFILE`).
RUN_PROFILE = "profile.json"


# --------------------------------------------------------------------------- reading


class _Run:
    """A run directory's records, checked for what a report needs."""

    def __init__(self, run_dir: str | Path) -> None:
        self.dir = check_run_directory(run_dir)
        with reading_run(self.dir), held():  # held: a torn last record's notice only if reported
            self.config = load(RunConfig, self.dir / "run.json")
            records = read_records(self.dir / "run.jsonl", self.config)
            self._split(records)
            self._check()
            check_run_files(self.dir, self.config, records)
            # The epochs run.json has: a failed resume's records past them are left out.
            self._split(trained_records(self.dir, self.config, records))

    def _split(self, records: list) -> None:
        self.phases = [r for r in records if isinstance(r, PhaseRecord)]
        self.steps = [r for r in records if isinstance(r, STEP_RECORDS)]
        self.epochs = [r for r in records if isinstance(r, EpochRecord)]

    def _check(self) -> None:
        where = self.dir / "run.jsonl"
        if not self.steps:
            raise InputFileError(f"{where}: no step records; the run is incomplete")
        known = {p.phase for p in self.phases}
        for record in [*self.steps, *self.epochs]:
            if record.phase not in known:
                kind = f"{record.kind} {getattr(record, record.kind)}"
                raise InputFileError(f"{where}: {kind} is in phase {record.phase}, never started")
        for p in self.phases:
            try:
                p.layout.check(p.layout.boundaries[-1], p.pricing.cluster.num_devices)
            except PipeplanError as exc:
                raise InputFileError(f"{where}: phase {p.phase}: {exc}") from None

    @property
    def worlds(self) -> list[int]:
        """The world sizes its phases ran on, each once in order: [2, 4] for a run resumed on 4
        ranks. Titled by run.json's nproc alone, a run resumed on another world size read as
        if it had trained on that one throughout."""
        worlds: list[int] = []
        for phase in self.phases:
            if not worlds or phase.pricing.cluster.num_devices != worlds[-1]:
                worlds.append(phase.pricing.cluster.num_devices)
        return worlds

    def phase_steps(self, phase: int) -> list[StepRecord]:
        return [s for s in self.steps if s.phase == phase]

    @property
    def training_s(self) -> float:
        """Σ epoch_s + Σ transitions, and the recorded step_s of the steps of an epoch left
        open (a run stopped mid-epoch): every step, as `predicted_training_s` counts them.
        Found by the sixtieth round: a run stopped after 12 steps of its first epoch was
        "training 0.1 s" (its transition alone), "measured 57.97×" over a baseline of the
        same 12 steps that it was 1.25× slower than."""
        closed = {e.epoch for e in self.epochs}
        open_s = sum(s.step_s for s in self.steps if s.epoch not in closed)
        transitions = sum(p.transition_s for p in self.phases)
        return sum(e.epoch_s for e in self.epochs) + transitions + open_s

    @property
    def predicted_training_s(self) -> float | None:
        """Σ predicted_step_s × steps: each phase's own recorded prediction, priced with the
        profile its record names (a refit once the run recalibrated itself)."""
        total = 0.0
        for p in self.phases:
            steps = len(self.phase_steps(p.phase))
            if p.predicted_step_s is None and steps:
                return None
            total += (p.predicted_step_s or 0.0) * steps
        return total

    @property
    def final_eval_accuracy(self) -> float | None:
        return self.epochs[-1].eval_accuracy if self.epochs else None

    def raw_profile(self, who: str) -> tuple[Profile, str]:
        """The profile the run started with (profile.json) and its sha256, as the phases
        priced with it record it (`check_priced_profiles` held the file to it)."""
        digests = [
            p.pricing.profile_sha256 for p in self.phases if p.pricing.profile == RUN_PROFILE
        ]
        if not digests:
            raise NotPreviewed(f"no phase of {who} was priced with its {RUN_PROFILE}")
        return load(Profile, self.dir / RUN_PROFILE), digests[0]

    def steps_per_epoch(self, who: str) -> int:
        """The steps of one of its epochs: what its epoch records, and the phases it solved
        (`Horizon.samples`, whole global batches), say."""
        batch = self.config.global_batch
        lengths = {e.steps for e in self.epochs}
        lengths |= {p.pricing.horizon.samples // batch for p in self.phases if p.pricing.horizon}
        if len(lengths) != 1 or 0 in lengths:
            said = ", ".join(map(str, sorted(lengths)))
            why = f"epochs of {said} steps" if lengths else "no finished epoch to tell its length"
            raise NotPreviewed(f"{who} has {why}: no one epoch to price")
        return lengths.pop()


# --------------------------------------------------------------------------- statistics


def median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def iqr(values: Sequence[float]) -> float | None:
    if len(values) < 2:
        return None
    q1, _, q3 = statistics.quantiles(values, n=4)
    return q3 - q1


def relative_error(predicted: float | None, measured: float | None) -> float | None:
    # A zero on either side (no all-reduce with one replica, no transfer with one stage) makes
    # a relative error meaningless; the two numbers are still reported.
    if not predicted or not measured:
        return None
    error = (predicted - measured) / measured
    # A measured 5e-324 s (a subnormal, no clock's reading) makes the ratio overflow: no error.
    return error if math.isfinite(error) else None


def compare(predicted: float | None, measured: float | None) -> Comparison:
    return Comparison(
        predicted_s=predicted, measured_s=measured, error=relative_error(predicted, measured)
    )


def stage_median(
    steps: Sequence[StepRecord], stage: int, value: Callable[[RankTimes], float]
) -> float | None:
    """Median over steps of the mean over the stage's ranks (its replicas) of `value`."""
    per_step = array("d")  # 8 bytes a step, not a float object and its slot (a 10**6 steps' run)
    for step in steps:
        ranks = [r for r in step.ranks if r.stage == stage]
        if ranks:
            per_step.append(sum(value(r) for r in ranks) / len(ranks))
    return median(per_step)


def rank_breakdown(steps: Sequence[StepRecord], stage: int, replica: int) -> RankBreakdown | None:
    """The medians of the rank's parts of its steps, gathered as floats: a list of its rank
    rows held every step's (F12 of the forty-second round: a fraction of the memory)."""
    fields = ("fwd_s", "bwd_s", "wait_s", "allreduce_s", "optimizer_s", "input_s")
    columns = {f: array("d") for f in fields}
    rank = None
    for s in steps:
        for r in s.ranks:
            if r.stage == stage and r.replica == replica:
                rank = r.rank if rank is None else rank
                for f in fields:
                    columns[f].append(getattr(r, f))
    if rank is None:
        return None
    return RankBreakdown(rank=rank, **{f: statistics.median(columns[f]) for f in fields})


# --------------------------------------------------------------------------- report


def stage_report(phase: PhaseRecord, stage: int, steps: Sequence[StepRecord]) -> StageReport:
    plan = phase.predicted_stages[stage] if phase.predicted_stages else None
    layout = phase.layout
    m = layout.micro_batches

    def predicted(per_step: Callable[[StagePlan], float]) -> float | None:
        return per_step(plan) if plan else None

    return StageReport(
        stage=stage,
        first_layer=layout.boundaries[stage],
        stop_layer=layout.boundaries[stage + 1],
        ranks=[row[stage] for row in layout.rank_map],
        compute=compare(
            predicted(lambda p: m * (p.fwd_s + p.bwd_s)),
            stage_median(steps, stage, lambda r: r.fwd_s + r.bwd_s),
        ),
        transfer=compare(
            predicted(lambda p: m * (p.send_fwd_s + p.send_bwd_s)),
            stage_median(steps, stage, lambda r: r.wait_s),
        ),
        allreduce=compare(
            predicted(lambda p: p.allreduce_s), stage_median(steps, stage, lambda r: r.allreduce_s)
        ),
        optimizer=compare(
            predicted(lambda p: p.optimizer_s), stage_median(steps, stage, lambda r: r.optimizer_s)
        ),
        measured_input_s=stage_median(steps, stage, lambda r: r.input_s) if stage == 0 else None,
        replica0=rank_breakdown(steps, stage, replica=0),
    )


def phase_report(phase: PhaseRecord, steps: Sequence[StepRecord], config: RunConfig) -> PhaseReport:
    used = steady_steps(steps, phase, config)
    times = [s.step_s for s in used]
    measured = median(times)
    return PhaseReport(
        phase=phase.phase,
        start_epoch=phase.start_epoch,
        start_step=phase.start_step,
        layout=phase.layout,
        steps=len(steps),
        cache_filling_steps=sum(not steady_step(s, phase, config) for s in steps),
        measured_steps=len(used),
        transition_s=phase.transition_s,
        predicted_step_s=phase.predicted_step_s,
        measured_step_s=measured,
        measured_iqr_s=iqr(times),
        error=relative_error(phase.predicted_step_s, measured),
        predicted_overhead_s=predicted_overhead(phase),
        predicted_stages=phase.predicted_stages,
        stages=[stage_report(phase, s, used) for s in range(phase.layout.num_stages)],
    )


def run_summary(config: RunConfig, records: list) -> RunSummary:
    """summary.json as a run whose records are `records` (run.jsonl's) writes it at its end
    (`executor.launch.summarize`, from this report): what `runfiles.check_summary` holds a
    run's summary.json to.

        run_summary(load(RunConfig, "runs/r/run.json"), read_records("runs/r/run.jsonl"))
    """
    phases = [r for r in records if isinstance(r, PhaseRecord)]
    steps = [r for r in records if isinstance(r, STEP_RECORDS)]
    epochs = [r for r in records if isinstance(r, EpochRecord)]
    reports = [phase_report(p, [s for s in steps if s.phase == p.phase], config) for p in phases]
    return RunSummary(
        name=config.name,
        total_s=sum(e.epoch_s for e in epochs) + sum(p.transition_s for p in phases),
        steps=len(steps),
        final_eval_accuracy=epochs[-1].eval_accuracy if epochs else None,
        phases=phase_summaries(reports),
    )


def phase_summaries(reports: list[PhaseReport]) -> list[PhaseSummary]:
    """summary.json's `phases`, from the report's (`run_summary`, `executor.launch.summarize`)."""
    return [
        PhaseSummary(
            phase=p.phase,
            layout=p.layout,
            steps=p.steps,
            predicted_step_s=p.predicted_step_s,
            measured_step_s=p.measured_step_s,
            measured_spread_s=p.measured_iqr_s,
            error=p.error,
        )
        for p in reports
    ]


def epoch_reports(run: _Run) -> list[EpochReport]:
    phases = {p.phase: p for p in run.phases}
    return [
        EpochReport(
            epoch=e.epoch,
            phase=e.phase,
            layout=phases[e.phase].layout,
            steps=e.steps,
            epoch_s=e.epoch_s,
            samples_per_s=e.samples_per_s,
            eval_loss=e.eval_loss,
            eval_accuracy=e.eval_accuracy,
            forecast=e.forecast,
        )
        for e in run.epochs
    ]


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    """numerator / denominator; None when either is missing or zero or the quotient is not a
    finite number (a subnormal time recorded by hand overflows it)."""
    if not numerator or not denominator:
        return None
    value = numerator / denominator
    return value if math.isfinite(value) else None


def per_second(count: float, seconds: float) -> float | None:
    return ratio(count, seconds) if count else (0.0 if seconds else None)


def check_comparable(run: _Run, baseline: _Run) -> None:
    for field in ("model", "global_batch"):
        mine, theirs = getattr(run.config, field), getattr(baseline.config, field)
        if mine != theirs:
            raise BadArgumentError(
                f"baseline {baseline.dir} has {field.replace('_', ' ')} {theirs!r}, "
                f"but the run {run.dir} has {mine!r}: not comparable"
            )


class NotPreviewed(Exception):
    """Why the previewed speedup cannot be priced: the report says it in place of a number."""


def previewed_training_s(run: _Run, profile: Profile, who: str) -> float:
    """The planner's price of `run` as it ran, from `profile`: per phase, on the cluster it
    ran on, its transition from the phase before and its epochs for the steps it ran
    (`pipeplan.plan.ran_phase_s`: a cached phase's fill epoch included). A phase a resume
    entered starts afresh: its state came from a checkpoint, and the node caches from empty."""
    batch = run.config.global_batch
    shape = TrainingShape(batch, run.steps_per_epoch(who) * batch, 1)
    total, before = 0.0, None
    for phase in run.phases:
        cluster = phase.pricing.cluster
        moved = before is not None and not phase.resumed and before.pricing.cluster == cluster
        previous = before.layout if moved else None
        steps = len(run.phase_steps(phase.phase))
        total += ran_phase_s(CostModel(profile, cluster), shape, phase.layout, previous, steps)
        before = phase
    return total


def previewed_totals(run: _Run, baseline: _Run) -> tuple[float, float]:
    """(the baseline's, the run's) `previewed_training_s`, both from one pricing: the
    profile.json both runs started with, what `pipeplan preview` priced before either ran. A
    phase record's predicted_step_s is no such pricing: a run that recalibrated itself priced
    its later phases with its refit. NotPreviewed saying why when there is none."""
    profile, digest = run.raw_profile("this run")
    _, theirs = baseline.raw_profile("the baseline")
    if theirs != digest:
        raise NotPreviewed(
            f"the baseline started from another {RUN_PROFILE} (sha256 {theirs[:12]}…, this "
            f"run's {digest[:12]}…): no one profile prices both"
        )
    theirs_steps = baseline.steps_per_epoch("the baseline")
    ours_steps = run.steps_per_epoch("this run")
    if theirs_steps != ours_steps:
        # Found by the thirty-ninth round: 15 steps priced against 66 (a baseline run with
        # --max-steps-per-epoch 5) gave "previewed 0.17×".
        raise NotPreviewed(
            f"the baseline's epochs are {theirs_steps} steps, this run's {ours_steps}: they "
            "trained different amounts"
        )
    if len(baseline.steps) != len(run.steps):
        raise NotPreviewed(different_amounts(run, baseline))
    try:
        return (
            previewed_training_s(baseline, profile, "the baseline"),
            previewed_training_s(run, profile, "this run"),
        )
    except PipeplanError as exc:  # a layout its profile cannot price
        said = str(exc) if len(str(exc)) <= 400 else str(exc)[:400] + "…"
        raise NotPreviewed(f"the planner cannot price the runs' layouts: {said}") from None


def different_amounts(run: _Run, baseline: _Run) -> str:
    """Why two runs' times are no speedup: they trained different numbers of steps. Found by
    the fortieth round: a 3-epoch run against a 2-epoch baseline reported "previewed 0.49×"
    and a measured ratio, the epoch ratio times the speedup."""
    return (
        f"the baseline trained {len(baseline.steps):,} steps, this run {len(run.steps):,}: "
        "they trained different amounts"
    )


def baseline_report(run: _Run, baseline: _Run) -> BaselineReport:
    check_comparable(run, baseline)
    try:
        theirs, ours = previewed_totals(run, baseline)
        why = None
    except NotPreviewed as exc:
        theirs = ours = None
        why = str(exc)
    trained_s = sum(e.epoch_s for e in baseline.epochs)
    samples = baseline.config.global_batch * sum(e.steps for e in baseline.epochs)
    return BaselineReport(
        run_dir=str(baseline.dir),
        name=baseline.config.name,
        steps=len(baseline.steps),
        training_s=baseline.training_s,
        predicted_training_s=baseline.predicted_training_s,
        samples_per_s=per_second(samples, trained_s),
        final_eval_accuracy=baseline.final_eval_accuracy,
        measured_speedup=(
            ratio(baseline.training_s, run.training_s)
            if len(baseline.steps) == len(run.steps)
            else None
        ),
        previewed_training_s=theirs,
        run_previewed_training_s=ours,
        previewed_speedup=ratio(theirs, ours),
        previewed_unavailable=why,
    )


def make_report(run_dir: str | Path, baseline_dir: str | Path | None = None) -> Report:
    """Read a run directory (and a baseline run's) and compare measured with predicted."""
    if baseline_dir is not None:  # a run compared with itself says nothing
        check_distinct_runs([run_dir, baseline_dir], "run (as RUN_DIR and --baseline)")
    run = _Run(run_dir)
    baseline = _Run(baseline_dir) if baseline_dir is not None else None
    cfg = run.config
    return Report(
        name=cfg.name,
        run_dir=str(run.dir),
        model=cfg.model,
        data=cfg.data,
        nproc=cfg.nproc,
        worlds=run.worlds,
        global_batch=cfg.global_batch,
        freeze=cfg.freeze,
        epochs_planned=cfg.epochs,
        epochs_completed=len(run.epochs),
        steps=len(run.steps),
        training_s=run.training_s,
        predicted_training_s=run.predicted_training_s,
        final_eval_accuracy=run.final_eval_accuracy,
        phases=[phase_report(p, run.phase_steps(p.phase), cfg) for p in run.phases],
        epochs=epoch_reports(run),
        baseline=baseline_report(run, baseline) if baseline else None,
    )


# --------------------------------------------------------------------------- plots

MEASURED_NOTE = "measured per-rank totals (order within the step not recorded)"
MEASURED_PARTS = "replica 0, wait drawn as transfer, reading the input not drawn"


def measured_timeline(phase: PhaseReport) -> Timeline:
    """Replica 0's median per-step totals per stage, laid end to end: the records keep totals,
    not when each operation ran, so this shows how much, not when. Wait is drawn as "send"."""
    events = []
    for stage in phase.stages:
        r = stage.replica0
        if r is None:
            continue
        start = 0.0
        parts = [
            ("fwd", r.fwd_s),
            ("bwd", r.bwd_s),
            ("send", r.wait_s),
            ("allreduce", r.allreduce_s),
            ("optimizer", r.optimizer_s),
        ]
        for kind, duration in parts:
            if duration > 0:
                events.append(
                    TimelineEvent(
                        stage=stage.stage,
                        kind=kind,
                        micro_batch=None,
                        start_s=start,
                        end_s=start + duration,
                    )
                )
                start += duration
    return Timeline(
        events=events, step_s=phase.measured_step_s or 0.0, num_stages=phase.layout.num_stages
    )


def simulated_schedule(phase: PhaseRecord | PhaseReport) -> Timeline | None:
    """The planner's schedule, simulated again from the per-stage times the phase record kept."""
    if not phase.predicted_stages:
        return None
    works = [
        StageWork(
            fwd_s=p.fwd_s,
            bwd_s=p.bwd_s,
            # Frozen layers form a prefix: a stage trains when it holds any layer past it.
            has_backward=p.stop_layer > phase.layout.frozen_layers,
            send_fwd_s=p.send_fwd_s,
            send_bwd_s=p.send_bwd_s,
            allreduce_s=p.allreduce_s,
            optimizer_s=p.optimizer_s,
        )
        for p in phase.predicted_stages
    ]
    return simulate(received_in_op(works), phase.layout.micro_batches, phase.layout.schedule)


def predicted_overhead(phase: PhaseRecord) -> float | None:
    schedule = simulated_schedule(phase)
    if schedule is None or phase.predicted_step_s is None:
        return None
    # Rounding in the stored stage times can put the schedule a hair past the prediction.
    return max(0.0, phase.predicted_step_s - schedule.step_s)


def simulated_timeline(phase: PhaseReport) -> Timeline | None:
    """The simulated schedule, its step ending at the prediction (which may add a per-step
    overhead outside the schedule, as the cost model does)."""
    schedule = simulated_schedule(phase)
    if schedule is None or phase.predicted_step_s is None:
        return schedule
    return schedule.model_copy(update={"step_s": max(schedule.step_s, phase.predicted_step_s)})


def write_report_plots(report: Report, directory: str | Path) -> list[Path]:
    """`pipeplan report --plot DIR`: per phase measured vs simulated step, and the epochs,
    written all or nothing (`write_files`)."""
    from pipeplan.fileio import write_files
    from pipeplan.plots import (
        checked_targets,
        comparison_png,
        epochs_png,
        stale_plots,
        timeline_png,
    )

    directory = Path(directory)
    names = [f"phase{phase.phase}-measured-vs-simulated.png" for phase in report.phases]
    targets = [*(directory / name for name in names), directory / "epochs.png"]

    def figures() -> Iterator[tuple[Path, bytes]]:
        for phase in report.phases:
            heading = (
                f"phase {phase.phase}: {phase.layout.frozen_layers} frozen, {phase.layout.label()}"
            )
            if phase.measured_step_s is None:
                heading += " (no steady step measured)"
            path = directory / f"phase{phase.phase}-measured-vs-simulated.png"
            measured, simulated = measured_timeline(phase), simulated_timeline(phase)
            if simulated is None:
                title = f"{heading} (no prediction recorded)\n{MEASURED_NOTE}; {MEASURED_PARTS}"
                yield path, timeline_png(measured, title)
            else:
                title = (
                    f"{heading}\ntop: {MEASURED_NOTE}; {MEASURED_PARTS}\n"
                    "bottom: the planner's step simulated from its per-stage predictions "
                    "(ends at the prediction, which may add overhead outside the schedule)"
                )
                yield path, comparison_png(measured, simulated, title)
        baseline = report.baseline
        title = (
            f"{report.name} ({report.model}): measured throughput, held-out loss and accuracy "
            "per epoch" + (f", baseline {baseline.name} dashed" if baseline else "")
        )
        rate = baseline.samples_per_s if baseline else None
        yield directory / "epochs.png", epochs_png(report.epochs, title, rate)

    with checked_targets(targets):  # the folders it makes go again if the set is not written
        stale = stale_plots(directory, r"phase[0-9]+-measured-vs-simulated\.png", targets)
        return write_files(figures(), stale, user_output=True)
