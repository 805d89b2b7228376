"""A finished run's files checked against each other before report or calibrate trust them:
run.json against what the run itself recorded of its training (the latest checkpoint's
configuration, the profiles its phases were priced with), and run directories given together
against being one run twice (a `cp -a` copy fitted every step twice).

    check_run_files(run_dir, config, records)       # calibrate.load_run, report's _Run
    check_distinct_runs(run_dirs, "run")            # calibrate RUN…, report RUN --baseline B
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Iterable
from pathlib import Path

from pipeplan.errors import BadArgumentError, InputFileError, PipeplanError
from pipeplan.fileio import check_distinct, not_a_plain_file
from pipeplan.formats import (
    EpochRecord,
    PhaseRecord,
    RunConfig,
    RunSummary,
    StepRecord,
    check_priced_profiles,
)
from pipeplan.formats.base import MAX_FILE_BYTES, check_input_file, check_json, load, read_input


def check_run_files(run_dir: str | Path, config: RunConfig, records: list) -> None:
    """run.json (`config`) is what the run trained under: its latest checkpoint's configuration
    (`executor.checkpoint.check_trained_with`, as resume and export check it; its layout and
    position against the records, `executor.history.check_manifest_records`, as resume checks
    them) and its phases' profiles (`check_priced_profiles`). InputFileError naming the file
    and field."""
    run_dir = Path(run_dir)
    check_priced_profiles(run_dir, config, records)
    if (run_dir / "checkpoints" / "latest").exists():
        # Imported here: it brings torch, which a run without checkpoints never needs.
        from executor.checkpoint import check_latest_trained_with
        from executor.history import check_manifest_records

        manifest = check_latest_trained_with(run_dir, config)
        # Its layout, phase and position against run.jsonl, as a resume checks them: a
        # schedule edited in the records was reported as one the run never ran (twentieth
        # round), though the same folder could not be resumed.
        if manifest is not None:
            check_manifest_records(manifest, records, run_dir, config)
    # After the checkpoint's checks, which name the records' own faults more exactly (a
    # schedule edited in run.jsonl is one the checkpoint was not taken in).
    check_eval_metrics(run_dir, records)


# The held-out numbers an epoch record holds, which the run also wrote to summary.json (the
# last): from the same floats, so only their text can differ.
EVAL_TOLERANCE_REL = 1e-9

# metrics.csv: one row per epoch, the numbers a fine-tuning user follows, written by
# `executor.records.Recorder` from the epoch records and read back here (`check_metrics_table`).
METRICS_FILE = "metrics.csv"
METRICS = (
    "epoch",
    "train_loss",
    "eval_loss",
    "eval_accuracy",
    "samples_per_s",
    "frozen_layers",
    "layout",
)
# The columns written from a float: their text compared as numbers (EVAL_TOLERANCE_REL).
FLOAT_METRICS = frozenset({"train_loss", "eval_loss", "eval_accuracy", "samples_per_s"})


def metrics_csv(epochs: list[EpochRecord], layouts: dict[int, str]) -> str:
    """The text of metrics.csv: epoch records with their phase's layout label; a value the
    epoch does not have (no held-out set) is an empty cell.

        metrics_csv(epochs, {0: "2x1 M=2 gpipe"})   # "epoch,train_loss,…\n0,0.69,…\n"
    """
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(METRICS)
    for e in epochs:
        values = dict(e.model_dump(), layout=layouts.get(e.phase, ""))
        writer.writerow("" if values[name] is None else values[name] for name in METRICS)
    return out.getvalue()


def metrics_of(records: list) -> str:
    """metrics.csv as the run writes it from `records` (run.jsonl's): `metrics_csv` with each
    phase record's layout label."""
    layouts = {r.phase: r.layout.label() for r in records if isinstance(r, PhaseRecord)}
    return metrics_csv([r for r in records if isinstance(r, EpochRecord)], layouts)


def check_eval_metrics(run_dir: Path, records: list) -> None:
    """metrics.csv is what the epoch records say (`check_metrics_table`), and the last
    eval_accuracy summary.json's final_eval_accuracy (when it sums up these records: as many
    steps). An accuracy of 0.4567 edited into run.jsonl was reported beside a summary.json of
    0.45 (twenty-second round); train_loss and samples_per_s are held to the step records
    too (`formats.run.check_epoch`).

        check_eval_metrics(Path("runs/ft"), read_records("runs/ft/run.jsonl"))
    """
    check_metrics_table(run_dir, records)
    epochs = [r for r in records if isinstance(r, EpochRecord)]
    summary = run_dir / "summary.json"
    if not epochs or not summary.is_file():
        return
    final = load(RunSummary, summary)
    steps = sum(isinstance(r, StepRecord) for r in records)
    last = epochs[-1].eval_accuracy
    if final.steps == steps and not _same(last, _shown(final.final_eval_accuracy)):
        raise InputFileError(
            f"{run_dir / 'run.jsonl'}: epoch {epochs[-1].epoch}: eval_accuracy {last!r}, but "
            f"{summary} says final_eval_accuracy {final.final_eval_accuracy!r}"
        )


def check_metrics_table(run_dir: Path, records: list) -> None:
    """metrics.csv, when the run has one, is exactly what the run writes from `records`
    (run.jsonl's epoch records): its header, a row per epoch record in order, every cell the
    record's value. The table may lack the last record's row only (a crash between writing
    the record and the table). Read as a regular file only (a FIFO is refused, never opened).
    An edited train_loss, a row for an epoch that never ran, an extra column or an empty
    file were all reported and calibrated from (twenty-third round). InputFileError naming
    both files when a cell disagrees: either may be the one edited.

        check_metrics_table(Path("runs/ft"), read_records("runs/ft/run.jsonl"))
    """
    path = run_dir / METRICS_FILE
    if not path.exists() and not path.is_symlink():
        return  # removed: nothing to hold the records to (a resume writes it again)
    problem = not_a_plain_file(path)  # a FIFO is never opened: it would block
    if problem is not None:
        raise InputFileError(f"{path}: {problem}")
    try:
        rows = list(csv.reader(io.StringIO(read_input(path, MAX_FILE_BYTES))))
    except csv.Error as exc:
        raise InputFileError(f"{path}: not a table pipeplan writes ({exc})") from None
    expected = list(csv.reader(io.StringIO(metrics_of(records))))
    if not rows:
        raise InputFileError(f"{path}: empty; the run writes its header and a row per epoch")
    if tuple(rows[0]) != METRICS:
        raise InputFileError(
            f"{path}: header {_cut(','.join(rows[0]), 200)!r}, but pipeplan writes "
            f"{','.join(METRICS)!r}"
        )
    records_file = run_dir / "run.jsonl"
    for index, row in enumerate(rows[1:]):
        if index >= len(expected) - 1:
            raise InputFileError(
                f"{path}: row {index + 2} (epoch {_cut(row[0]) if row else '?'}) has no epoch "
                f"record in {records_file}, which records {len(expected) - 1} epoch(s)"
            )
        _check_row(path, records_file, row, expected[index + 1])
    if len(rows) < len(expected) - 1:  # the last record's row may not be written yet
        missing = expected[len(rows)][0]
        raise InputFileError(
            f"{path}: no row for epoch {missing}, which {records_file} records (and later ones)"
        )


def _check_row(path: Path, records_file: Path, row: list[str], want: list[str]) -> None:
    """One metrics.csv row against the row its epoch record makes; the error names both
    files (the run wrote them from the same numbers: either may have been edited since)."""
    epoch = want[0]
    if len(row) != len(METRICS):
        raise InputFileError(
            f"{path}: epoch {epoch}'s row has {len(row)} cells, but pipeplan writes "
            f"{len(METRICS)} ({','.join(METRICS)})"
        )
    for name, cell, value in zip(METRICS, row, want, strict=True):
        if cell == value or (name in FLOAT_METRICS and _same(_number(value), cell)):
            continue
        raise InputFileError(
            f"{path}: epoch {epoch}: {name} {_cut(cell)!r}, but {records_file}'s record of "
            f"that epoch says {value or 'none'!r} (the run wrote the row from that record: "
            "one of the two files was changed since)"
        )


def _number(cell: str) -> float | None:
    return None if cell == "" else float(cell)


def _cut(text: str, limit: int = 80) -> str:
    """A cell as quoted in an error line: at most `limit` characters."""
    return text if len(text) <= limit else text[:limit] + "…"


def _shown(value: float | None) -> str:
    return "" if value is None else repr(value)


def _same(value: float | None, cell: str) -> bool:
    """Whether a record's value is what a cell says ("" for none); a cell that is no number
    is not that value."""
    if value is None or cell == "":
        return value is None and cell == ""
    try:
        return math.isclose(value, float(cell), rel_tol=EVAL_TOLERANCE_REL)
    except ValueError:
        return False


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
    try:
        check_input_file(path, MAX_FILE_BYTES)
        with path.open("rb") as f:
            line = f.readline(FIRST_RECORD_LIMIT).decode("utf-8")
        record = check_json(line, str(path))
    except (OSError, UnicodeDecodeError, PipeplanError):
        return None  # the records' reader says what is wrong with them
    return json.dumps(record, sort_keys=True)
