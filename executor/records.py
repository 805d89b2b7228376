"""`run.jsonl`, the run's records (docs/architecture.md §3.7), written here and nowhere else.

Rank 0 alone writes: one JSON object per line, flushed at once, so that a run killed mid-step
keeps every record before the kill (`launch` names the failed step from them, `--resume` cuts
them back to the checkpoint). On the other ranks the recorder drops what it is given.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from pipeplan.fileio import write_atomic
from pipeplan.formats import (
    CheckpointManifest,
    EpochRecord,
    PhaseRecord,
    StepRecord,
    read_records,
)

Record = PhaseRecord | StepRecord | EpochRecord


class Recorder:
    def __init__(self, path: Path, writes: bool):
        self.path = path
        # Called with each step record (rank 0's progress bar), after the record is written.
        self.on_step: Callable[[StepRecord], None] | None = None
        self._file = open(path, "a") if writes else None  # noqa: SIM115 (closed in close())

    def write(self, record: Record) -> None:
        if self._file is None:
            return
        self._file.write(json.dumps(record.model_dump(mode="json")) + "\n")
        self._file.flush()
        if isinstance(record, StepRecord) and self.on_step is not None:
            self.on_step(record)

    def truncate(self, manifest: CheckpointManifest) -> None:
        """Drop the records written after the checkpoint: the resumed run writes them again."""
        if self._file is None:
            return
        kept = [
            r
            for r in read_records(self.path)
            if (isinstance(r, PhaseRecord) and r.phase < manifest.phase)
            or (isinstance(r, StepRecord) and r.step < manifest.step)
            or (isinstance(r, EpochRecord) and r.epoch < manifest.epoch)
        ]
        self._file.close()
        write_atomic(self.path, "".join(json.dumps(r.model_dump(mode="json")) + "\n" for r in kept))
        self._file = open(self.path, "a")  # noqa: SIM115

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
