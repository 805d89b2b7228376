"""metrics.csv: the table of a run's epochs a fine-tuning user follows, written from the
epoch records and read back strictly (every cell the record's), and the held-out numbers of
the records held to metrics.csv and summary.json.

    metrics_csv(epochs, layouts)              # the table's text, as the recorder writes it
    check_eval_metrics(Path("runs/r"), records)   # InputFileError naming both files, or None
"""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

from pipeplan.errors import InputFileError
from pipeplan.fileio import not_a_plain_file
from pipeplan.formats.base import MAX_FILE_BYTES, read_input
from pipeplan.formats.run import EpochRecord, PhaseRecord

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
    """metrics.csv is what the epoch records say (`check_metrics_table`); summary.json is
    held to them and to run.json by `pipeplan.runfiles.check_summary`. An accuracy of 0.4567
    edited into run.jsonl was reported beside a metrics.csv of 0.45 (twenty-second round);
    train_loss and samples_per_s are held to the step records too (`formats.run.check_epoch`).

        check_eval_metrics(Path("runs/ft"), read_records("runs/ft/run.jsonl"))
    """
    check_metrics_table(run_dir, records)


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
    _check_no_empty_row(path, rows)
    if tuple(rows[0]) != METRICS:
        raise InputFileError(
            f"{path}: header {_cut(','.join(rows[0]), 200)!r}, but pipeplan writes "
            f"{','.join(METRICS)!r}"
        )
    records_file = run_dir / "run.jsonl"
    for index, row in enumerate(rows[1:]):
        if index >= len(expected) - 1:
            raise InputFileError(
                f"{path}: row {index + 2} (epoch {_cut(row[0])}) has no epoch "
                f"record in {records_file}, which records {len(expected) - 1} epoch(s)"
            )
        _check_row(path, records_file, row, expected[index + 1])
    if len(rows) < len(expected) - 1:  # the last record's row may not be written yet
        missing = expected[len(rows)][0]
        raise InputFileError(
            f"{path}: no row for epoch {missing}, which {records_file} records (and later ones)"
        )


def _check_no_empty_row(path: Path, rows: list[list[str]]) -> None:
    """An empty row is named as one: `csv` reads an empty line as a row of no cells, which was
    refused as "row 4 (epoch ?) has no epoch record" at the end of the table (twenty-fifth
    round: one trailing empty line) and as "epoch 1's row has 0 cells" inside it.

        _check_no_empty_row(Path("runs/r/metrics.csv"), [["epoch", …], []])   # InputFileError
    """
    for number, row in enumerate(rows, start=1):
        if not row:
            raise InputFileError(f"{path}: row {number} is empty; pipeplan writes no empty row")


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


def _same(value: float | None, cell: str) -> bool:
    """Whether a record's value is what a cell says ("" for none); a cell that is no number
    is not that value."""
    if value is None or cell == "":
        return value is None and cell == ""
    try:
        return math.isclose(value, float(cell), rel_tol=EVAL_TOLERANCE_REL)
    except ValueError:
        return False
