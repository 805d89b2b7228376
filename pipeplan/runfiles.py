"""A finished run's files checked against each other before report or calibrate trust them:
run.json against what the run itself recorded of its training (every kept checkpoint's
configuration, the profiles its phases were priced with), summary.json against the records,
and run directories given together against being one run twice (a `cp -a` copy fitted every
step twice); and the records of the epochs run.json says the run has, which are what report
and calibrate read.

    check_run_files(run_dir, config, records)       # calibrate.load_run, report's _Run
    records = trained_records(run_dir, config, records)   # likewise, after it
    check_summary(run_dir, config, records)         # and resume, export
    check_distinct_runs(run_dirs, "run")            # calibrate RUN…, report RUN --baseline B
"""

from __future__ import annotations

import json
import logging
import math
import shlex
from collections.abc import Iterable
from pathlib import Path

from pipeplan.costmodel import check_priced_clusters
from pipeplan.errors import BadArgumentError, InputFileError, PipeplanError, quoted
from pipeplan.fileio import check_distinct
from pipeplan.formats import (
    STEP_RECORDS,
    EpochRecord,
    PhaseRecord,
    RunConfig,
    RunSummary,
    StepRecord,
    check_priced_profiles,
    load,
)
from pipeplan.formats.base import MAX_FILE_BYTES, check_json, file_state, open_input
from pipeplan.formats.metrics import check_eval_metrics
from pipeplan.freeze import continuations


def check_run_files(run_dir: str | Path, config: RunConfig, records: list) -> None:
    """run.json (`config`) is what the run trained under: its latest checkpoint's configuration
    (`executor.checkpoint.check_trained_with`, as resume and export check it; its layout and
    position against the records, `executor.history.check_manifest_records`, as resume checks
    them; every older kept checkpoint's manifest likewise, `check_older_manifests`) and its
    phases' profiles and clusters (`check_priced_profiles`, `check_priced_clusters`);
    metrics.csv and summary.json are what the run wrote from its records
    (`check_eval_metrics`, `check_summary`). InputFileError naming the file and field."""
    run_dir = Path(run_dir)
    check_priced_clusters(run_dir, config, records, check_priced_profiles(run_dir, config, records))
    if (run_dir / "checkpoints").exists():
        # Imported here: it brings torch, which a run without checkpoints never needs.
        from executor.checkpoint import check_latest_trained_with
        from executor.history import check_manifest_records, check_older_manifests

        manifest = check_latest_trained_with(run_dir, config)
        # Its layout, phase and position against run.jsonl, as a resume checks them: a
        # schedule edited in the records was reported as one the run never ran (twentieth
        # round), though the same folder could not be resumed.
        if manifest is not None:
            check_manifest_records(manifest, records, run_dir, config)
            check_older_manifests(manifest, records, run_dir, config)
    # After the checkpoint's checks, which name the records' own faults more exactly (a
    # schedule edited in run.jsonl is one the checkpoint was not taken in).
    check_eval_metrics(run_dir, records)
    check_summary(run_dir, config, records)
    check_forecast_schedules(run_dir, config, records)


def check_forecast_schedules(run_dir: Path, config: RunConfig, records: list) -> None:
    """Each epoch's forecast prices the schedules `pipeplan.freeze.continuations` gives after
    the epochs so far, under run.json's --freeze, --alpha and list, as the run computed them
    (`executor.worker.Worker.forecast`): a `--freeze 0,3,5` run's forecast of 0, 4, 6 was
    reported as where the run was heading (the fifty-eighth round). Its speedups are not
    priced again here: each case is a whole preview, seconds a run of many epochs.

        check_forecast_schedules(Path("runs/r1"), config, records)
    """
    finished: list[int] = []
    layers = 0
    for line, record in enumerate(records, start=1):
        if isinstance(record, PhaseRecord):
            layers = record.layout.boundaries[-1]
        if not isinstance(record, EpochRecord):
            continue
        finished.append(record.frozen_layers)
        if record.forecast is None:
            continue
        cases, where = record.forecast.cases, f"{run_dir / 'run.jsonl'}:{line}"
        try:
            expected = continuations(
                config.freeze,
                config.alpha,
                list(config.freeze_list or []),
                layers - 2,
                finished,
                len(cases[0].frozen_layers),
            )
        except (PipeplanError, ValueError) as exc:
            raise InputFileError(
                f"{where}: epoch {record.epoch}: the epochs so far continue as no schedule "
                f"under freeze {config.freeze}: {exc}"
            ) from None
        for number, (case, (name, schedule)) in enumerate(zip(cases, expected, strict=True)):
            if case.frozen_layers != schedule.frozen_layers:
                raise InputFileError(
                    f"{where}: epoch {record.epoch}: forecast.cases[{number}].frozen_layers "
                    f"{quoted(case.frozen_layers, 40)}, but {name} under freeze "
                    f"{config.freeze} continues the epochs so far as "
                    f"{quoted(schedule.frozen_layers, 40)}"
                )


# A summary.json float and the one its records make again: the same computation on the same
# numbers, so only their text can differ (as metrics.csv's cells).
SUMMARY_TOLERANCE_REL = 1e-9


def check_summary(run_dir: Path, config: RunConfig, records: list) -> None:
    """summary.json, when the run has one, is what the run wrote at an end from its records
    and run.json (`report.run_summary`): its name run.json's; and when it sums up these
    records, or those of an earlier end a resume continued from (`_ends_summed`), every
    field, each phase's included, a resumed run's too. A summary of fewer or more steps
    than the records is one written at an earlier end, before a resume that run.jsonl
    records at that step (a resume killed since, or one from an older checkpoint that
    rewrote the records after it: then held only to falling at an epoch's end within
    run.json's epochs, `_check_earlier_end`). steps 7 and name "other" in a
    6-step run r1's summary were reported, exported and calibrated from (twenty-fourth
    round). InputFileError naming both files.

        check_summary(Path("runs/r1"), load(RunConfig, "runs/r1/run.json"), records)
    """
    from pipeplan.report import run_summary  # it imports this module

    path = run_dir / "summary.json"
    # Absent: removed (a resume writes it again at the end). Any entry but a regular file was
    # refused before (`fileio.check_own_files`: a link, a folder, a FIFO).
    if not path.is_file():
        return
    summary = load(RunSummary, path)
    if summary.name != config.name:
        raise InputFileError(
            f"{path}: name {summary.name!r}, but {run_dir / 'run.json'} says {config.name!r}; "
            "the run wrote its summary under its own name"
        )
    expected = run_summary(config, records)
    if summary.steps != expected.steps:
        _check_earlier_end(path, summary.steps, expected.steps, records, config)
    records_file = run_dir / "run.jsonl"
    epochs = [r for r in records if isinstance(r, EpochRecord)]
    if (
        summary.steps == expected.steps
        and epochs
        and not _close(summary.final_eval_accuracy, expected.final_eval_accuracy)
    ):
        # Named as the other fields are, summary.json first (the fifty-eighth round: its edit
        # was blamed on run.jsonl).
        raise InputFileError(
            f"{path}: final_eval_accuracy is {summary.final_eval_accuracy!r}, but "
            f"{records_file} makes it {expected.final_eval_accuracy!r} (epoch "
            f"{epochs[-1].epoch}: eval_accuracy {expected.final_eval_accuracy!r}; the run wrote "
            "summary.json from its records: one of the two files was changed since)"
        )
    ends = _ends_summed(config, records, summary.steps, expected)
    if not ends:
        return  # records a resume from an older checkpoint rewrote (`_check_earlier_end`)
    have = summary.model_dump()
    differ = [_first_field_differing(have, end.model_dump()) for end in ends]
    if None in differ:
        return
    # Named against the end of as many phases, else the records' last end.
    field = next(
        (d for d, e in zip(differ, ends, strict=True) if len(e.phases) == len(summary.phases)), None
    )
    name, have, want = field or differ[0]
    raise InputFileError(
        f"{path}: {name} is {_cut(have)}, but {records_file} makes it {_cut(want)} (the run "
        "wrote summary.json from its records: one of the two files was changed since)"
    )


def _ends_summed(
    config: RunConfig, records: list, steps: int, expected: RunSummary
) -> list[RunSummary]:
    """The summaries the run wrote, from `records`, at an end of `steps` steps: at the
    records' own end when they hold as many steps, and at an end a resume continued from
    (the records before each phase resumed at that step: a resume that has trained no step
    yet, or one for more epochs). A resume rewrites no record before its checkpoint, and
    drops a summary of steps it runs again (`executor.records.Recorder.truncate`), so each is
    every field of the summary, in a resumed run too: the resume switched the check off, and
    a transition_s of 10^6 s in the records of a 22 s run was reported and calibrated from
    (the sixty-first round). None: records rewritten after that end (`_check_earlier_end`).
    `expected`: the records' own summary (`report.run_summary`).

        _ends_summed(config, records, summary.steps, run_summary(config, records))
    """
    from pipeplan.report import run_summary  # it imports this module

    ends = [expected] if expected.steps == steps else []
    for i, record in enumerate(records):
        if isinstance(record, PhaseRecord) and record.resumed and record.start_step == steps:
            before = records[:i]
            if sum(isinstance(r, STEP_RECORDS) for r in before) == steps:
                ends.append(run_summary(config, before))
    return ends


def _check_earlier_end(
    path: Path, steps: int, recorded: int, records: list, config: RunConfig
) -> None:
    """A summary of `steps` steps beside records of `recorded`: written at the end a resume
    continued from (a phase resumed at that step), or before a resume from an older
    checkpoint rewrote the records after it (one resumed before `steps`, the records ending
    before it) at an end the run could have had: an epoch's end within run.json's epochs (a
    resume only adds epochs). Found by the sixty-second round: a resumed run's summary of
    61 or 10^12 steps (5 epochs of 12) was read with every other field unchecked.
    InputFileError naming both files otherwise."""
    resumes = [r.start_step for r in records if isinstance(r, PhaseRecord) and r.resumed]
    if steps in resumes:
        return
    said = f"{path}: steps is {steps}, but {path.with_name('run.jsonl')} records {recorded} steps"
    if recorded > steps or not any(s < steps for s in resumes):
        raise InputFileError(
            f"{said} and no resume at step {steps}; the run wrote summary.json at its end, "
            "from its records"
        )
    length = _epoch_steps(config, records)
    if not length:
        return  # no epoch's length recorded: the end is held to nothing more
    last = config.epochs * length
    if steps > last or steps % length:
        where = (
            f"past run.json's {config.epochs} epochs (they end at step {last})"
            if steps > last
            else f"inside epoch {steps // length}"
        )
        raise InputFileError(
            f"{said}, no resume at step {steps}, and epochs of {length} steps: step {steps} is "
            f"{where}; the run wrote summary.json at an epoch's end"
        )


def _epoch_steps(config: RunConfig, records: list) -> int | None:
    """The steps of the run's epochs: what an epoch record, else a solved phase's horizon
    (whole global batches), says (`formats.run` holds them to one length); None if none."""
    for record in records:
        if isinstance(record, EpochRecord):
            return record.steps
    horizons = (r.pricing.horizon for r in records if isinstance(r, PhaseRecord))
    horizon = next((h for h in horizons if h is not None), None)
    return None if horizon is None else horizon.samples // config.global_batch


def _first_field_differing(have: object, want: object, name: str = "") -> tuple | None:
    """The first field (dotted: "phases.0.measured_step_s") where a summary's dump `have`
    differs from `want`, with both values; floats within SUMMARY_TOLERANCE_REL agree."""
    if isinstance(have, dict) and isinstance(want, dict) and have.keys() == want.keys():
        for key in want:
            found = _first_field_differing(have[key], want[key], f"{name}.{key}".lstrip("."))
            if found is not None:
                return found
        return None
    if isinstance(have, list) and isinstance(want, list):
        if len(have) != len(want):
            return (f"{name} (its length)", len(have), len(want))
        for i, (a, b) in enumerate(zip(have, want, strict=True)):
            found = _first_field_differing(a, b, f"{name}.{i}")
            if found is not None:
                return found
        return None
    return None if _close(have, want) else (name, have, want)


def _close(have: object, want: object) -> bool:
    """Equal, or two numbers (not booleans) within SUMMARY_TOLERANCE_REL."""
    if have == want and type(have) is type(want):
        return True
    numbers = all(isinstance(v, int | float) and not isinstance(v, bool) for v in (have, want))
    return numbers and math.isclose(have, want, rel_tol=SUMMARY_TOLERANCE_REL)


def _cut(value: object, limit: int = 120) -> str:
    """A value as quoted in an error line: its JSON, at most `limit` characters."""
    text = json.dumps(value)
    return text if len(text) <= limit else text[:limit] + "…"


def trained_records(run_dir: str | Path, config: RunConfig, records: list) -> list:
    """`records` (run.jsonl's, checked with `check_run_files`) up to run.json's `epochs`.

    A resume for more epochs that stops before its first checkpoint (a full disk, a kill)
    leaves run.json at the epochs it had (`executor.checkpoint.commit_config`) and run.jsonl
    with its phase and steps past them, which the next resume rewrites. Report and calibrate
    read them as the run's ("14 steps, 2/2 epochs", and fitted them): the twenty-fifth round.
    They are left out with one notice saying how to train them again; records past run.json's
    epochs that no resume wrote contradict run.json: InputFileError.

        records = trained_records(Path("runs/r"), config, records)
    """
    cut = next((n for n, r in enumerate(records) if _epoch_of(r) >= config.epochs), None)
    if cut is None:
        return records
    path = Path(run_dir) / "run.jsonl"
    # The phase the records past run.json's epochs ran in, or one before it in their attempt:
    # a resume entered it. A run's own first attempt trains run.json's epochs, no more.
    if not any(isinstance(r, PhaseRecord) and r.resumed for r in records[: cut + 1]):
        raise InputFileError(
            f"{path}: {_past(records[cut])}, but run.json says epochs {config.epochs}, and no "
            "resume for more epochs wrote it (no phase up to it was entered by --resume); "
            "run.json or run.jsonl was edited since the run trained"
        )
    _notice_extension(Path(run_dir), config, records[cut:])
    return records[:cut]


def _epoch_of(record: PhaseRecord | StepRecord | EpochRecord) -> int:
    """The epoch a record is of: a phase's is the epoch it starts in."""
    return record.start_epoch if isinstance(record, PhaseRecord) else record.epoch


def _past(record: PhaseRecord | StepRecord | EpochRecord) -> str:
    """The first record past run.json's epochs, for a message: "step 12 is of epoch 2"."""
    if isinstance(record, PhaseRecord):
        return f"phase {record.phase} starts in epoch {record.start_epoch}"
    if isinstance(record, STEP_RECORDS):
        return f"step {record.step} is of epoch {record.epoch}"
    return f"epoch {record.epoch} is recorded"


# Records left out already noticed, by run.jsonl and its length: calibrate reads a run's
# records twice, and says so once (as `formats.run` notices a torn record).
_NOTICED: set[tuple] = set()


def _notice_extension(run_dir: Path, config: RunConfig, left_out: list) -> None:
    path = run_dir / "run.jsonl"
    key = (*file_state(path), path.stat().st_size)
    if key in _NOTICED:
        return
    _NOTICED.add(key)
    logging.getLogger("pipeplan.records").warning(
        "%s: %s left out: past run.json's epochs (%d), written by a resume for more epochs "
        "that stopped before its first checkpoint; pipeplan run --resume %s --epochs N "
        "(N > %d) trains on and rewrites them",
        path,
        _span(left_out),
        config.epochs,
        shlex.quote(str(run_dir)),
        config.epochs,
    )


def _span(records: list) -> str:
    """What `records` are, by kind: "phase 1, steps 2 to 3 and the record of epoch 1"."""
    parts = []
    for kind, name in ((PhaseRecord, "phase"), (STEP_RECORDS, "step"), (EpochRecord, "epoch")):
        numbers = [getattr(r, name) for r in records if isinstance(r, kind)]
        if numbers:
            parts.append(_numbered(name, numbers))
    return ", ".join(parts[:-1]) + " and " + parts[-1] if len(parts) > 1 else parts[0]


def _numbered(name: str, numbers: list[int]) -> str:
    """`_numbered("step", [2, 3])` → "steps 2 to 3" (records come in order, once each)."""
    one = len(numbers) == 1
    which = f"{name} {numbers[0]}" if one else f"{name}s {numbers[0]} to {numbers[-1]}"
    return f"the record{'' if one else 's'} of {which}" if name == "epoch" else which


def check_distinct_runs(run_dirs: Iterable[str | Path], what: str) -> None:
    """`check_distinct` (the same folder twice), then the same run in two folders: run.jsonl
    opens with the run's first phase record, which holds times measured in that run, so two
    folders whose run.jsonl begin with the same record hold one run (a copy, or a copy resumed
    since). BadArgumentError naming the second folder."""
    run_dirs = [Path(d) for d in run_dirs]
    check_distinct(run_dirs, what)
    seen: dict[str, Path] = {}
    for run_dir in run_dirs:
        first = _first_record(run_dir / "run.jsonl")
        if first is None:
            continue  # absent, empty or unreadable: the run's reader says what is wrong
        if first in seen:
            raise BadArgumentError(
                f"{run_dir}: holds the same run as {seen[first]} (their run.jsonl begin with "
                "the same record: a copy of one run); give it once"
            )
        seen[first] = run_dir


# Enough of run.jsonl's first line to tell runs apart (a phase record is a few KiB).
FIRST_RECORD_LIMIT = 1 << 20


def _first_record(path: Path) -> str | None:
    """run.jsonl's first record as canonical JSON (its keys sorted, so a copy written out
    again with other spacing is still the same record); None when there is none to read."""
    if path.is_symlink():
        return None  # refused as a link by the run's reader (`check_own_files`), never read
    try:
        with open_input(path, MAX_FILE_BYTES) as f:  # a FIFO swapped in: refused, not waited on
            line = f.readline(FIRST_RECORD_LIMIT).decode("utf-8")
        record = check_json(line, str(path))
    except (OSError, UnicodeDecodeError, PipeplanError):
        return None  # the records' reader says what is wrong with them
    return json.dumps(record, sort_keys=True)
