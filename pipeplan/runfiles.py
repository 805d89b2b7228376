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
from pipeplan.fileio import check_distinct
from pipeplan.formats import EpochRecord, RunConfig, RunSummary, StepRecord, check_priced_profiles
from pipeplan.formats.base import MAX_FILE_BYTES, check_input_file, check_json, load, read_input


def check_run_files(run_dir: str | Path, config: RunConfig, records: list) -> None:
    """run.json (`config`) is what the run trained under: its latest checkpoint's configuration
    (`executor.checkpoint.check_trained_with`, as resume and export check it; its layout and
    position against the records, `executor.history.check_manifest_records`, as resume checks
    them) and its phases' profiles (`check_priced_profiles`). InputFileError naming the file
    and field."""
    run_dir = Path(run_dir)
    check_priced_profiles(run_dir, config, records)
    check_eval_metrics(run_dir, records)
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


# The held-out numbers an epoch record holds, which the run also wrote to metrics.csv (every
# epoch) and summary.json (the last): from the same floats, so only their text can differ.
EVAL_FIELDS = ("eval_loss", "eval_accuracy")
EVAL_TOLERANCE_REL = 1e-9


def check_eval_metrics(run_dir: Path, records: list) -> None:
    """Each epoch record's eval_loss and eval_accuracy are what metrics.csv's row of that
    epoch says, and the last eval_accuracy summary.json's final_eval_accuracy (when it sums
    up these records: as many steps). An accuracy of 0.4567 edited into run.jsonl was
    reported beside a summary.json of 0.45 (twenty-second round); train_loss and
    samples_per_s are held to the step records instead (`formats.run.check_epoch`).

        check_eval_metrics(Path("runs/ft"), read_records("runs/ft/run.jsonl"))
    """
    epochs = [r for r in records if isinstance(r, EpochRecord)]
    where, table = run_dir / "run.jsonl", _metrics_rows(run_dir)
    for epoch in epochs:
        row = table.get(epoch.epoch, {})
        for field in EVAL_FIELDS:
            if field in row and not _same(getattr(epoch, field), row[field]):
                raise InputFileError(
                    f"{where}: epoch {epoch.epoch}: {field} {getattr(epoch, field)!r}, but "
                    f"{run_dir / 'metrics.csv'} says {row[field] or 'none'} for that epoch"
                )
    summary = run_dir / "summary.json"
    if not epochs or not summary.is_file():
        return
    final = load(RunSummary, summary)
    steps = sum(isinstance(r, StepRecord) for r in records)
    last = epochs[-1].eval_accuracy
    if final.steps == steps and not _same(last, _shown(final.final_eval_accuracy)):
        raise InputFileError(
            f"{where}: epoch {epochs[-1].epoch}: eval_accuracy {last!r}, but {summary} says "
            f"final_eval_accuracy {final.final_eval_accuracy!r}"
        )


def _shown(value: float | None) -> str:
    return "" if value is None else repr(value)


def _same(value: float | None, cell: str) -> bool:
    """Whether a record's value is what a metrics cell says ("" for none); a cell that is
    no number is left to whoever reads metrics.csv."""
    if value is None or cell == "":
        return value is None and cell == ""
    try:
        return math.isclose(value, float(cell), rel_tol=EVAL_TOLERANCE_REL)
    except ValueError:
        return True


def _metrics_rows(run_dir: Path) -> dict[int, dict[str, str]]:
    """metrics.csv's rows by epoch (the held-out fields only); none when it is absent or
    not as the run writes it (the records are what is checked here, not the table)."""
    path = run_dir / "metrics.csv"
    if not path.is_file():
        return {}
    try:
        rows = list(csv.DictReader(io.StringIO(read_input(path, MAX_FILE_BYTES))))
    except (InputFileError, csv.Error):
        return {}
    by_epoch = {}
    for row in rows:
        epoch = row.get("epoch") or ""
        if (
            epoch.isdecimal()
            and len(epoch) < 8
            and all(isinstance(row.get(f), str) for f in EVAL_FIELDS)
        ):
            by_epoch[int(epoch)] = {f: row[f] for f in EVAL_FIELDS}
    return by_epoch


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
