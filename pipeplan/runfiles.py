"""A finished run's files checked against each other before report or calibrate trust them:
run.json against what the run itself recorded of its training (the latest checkpoint's
configuration, the profiles its phases were priced with), and run directories given together
against being one run twice (a `cp -a` copy fitted every step twice).

    check_run_files(run_dir, config, records)       # calibrate.load_run, report's _Run
    check_distinct_runs(run_dirs, "run")            # calibrate RUN…, report RUN --baseline B
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from pipeplan.errors import BadArgumentError, PipeplanError
from pipeplan.fileio import check_distinct
from pipeplan.formats import (
    RunConfig,
    check_priced_profiles,
)
from pipeplan.formats.base import MAX_FILE_BYTES, check_input_file, check_json
from pipeplan.formats.metrics import check_eval_metrics


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
        check_input_file(path, MAX_FILE_BYTES)
        with path.open("rb") as f:
            line = f.readline(FIRST_RECORD_LIMIT).decode("utf-8")
        record = check_json(line, str(path))
    except (OSError, UnicodeDecodeError, PipeplanError):
        return None  # the records' reader says what is wrong with them
    return json.dumps(record, sort_keys=True)
