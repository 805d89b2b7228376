"""The run's records (docs/architecture.md §3.7): each rank's share of a step record, and
`run.jsonl` and `metrics.csv`, written by the `Recorder` and nowhere else.

Every rank contributes one row of numbers to each step record; `STEP_ROW` names its fields, so
that packing and unpacking cannot drift apart. Rank 0 alone writes `run.jsonl`: one JSON object
per line, flushed at once, so that a run killed mid-step keeps every record before the kill
(`launch` names the failed step from them, `--resume` cuts them back to the checkpoint). On the
other ranks the recorder drops what it is given.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

import torch

from pipeplan.errors import OutputError
from pipeplan.fileio import CALIBRATION_FILE, open_append, write_atomic, write_failure
from pipeplan.formats import (
    STEP_RECORDS,
    CheckpointManifest,
    EpochRecord,
    PhaseRecord,
    RankTimes,
    StepRecord,
    read_records,
)
from pipeplan.formats.base import read_input
from pipeplan.formats.metrics import METRICS_FILE, metrics_csv
from pipeplan.formats.run import priced_records, torn_tail

if TYPE_CHECKING:
    from executor.parallel import StepTimes

SUMMARY_FILE = "summary.json"  # rank 0's at a run's end (`executor.launch.summarize`)


Record = PhaseRecord | StepRecord | EpochRecord

# A rank's share of a step record travels as one float64 row: one small all_gather per step
# (all_gather_object would pickle, which is slower). A missing loss (a rank that computes none,
# a step without targets), stage or replica (a rank outside the layout) or peak memory (CPU)
# travels as -1, which no loss is: a NaN loss stays NaN, and the run stops on it; float64
# holds byte counts exactly up to 2**53.
RANK_TIMES = ("step_s", "fwd_s", "bwd_s", "wait_s", "allreduce_s", "optimizer_s", "input_s")
STEP_ROW = (*RANK_TIMES, "loss", "cache_hits", "stage", "replica", "peak_memory_bytes")
MISSING = -1.0


def step_row(
    times: StepTimes, cache_hits: int, stage: int | None, replica: int | None
) -> torch.Tensor:
    """This rank's row of a step record."""
    values = {name: getattr(times, name) for name in RANK_TIMES}
    values.update(
        loss=MISSING if times.loss is None else times.loss,
        cache_hits=cache_hits,
        stage=-1 if stage is None else stage,
        replica=-1 if replica is None else replica,
        peak_memory_bytes=-1 if times.peak_memory_bytes is None else times.peak_memory_bytes,
    )
    return torch.tensor([float(values[name]) for name in STEP_ROW], dtype=torch.float64)


# The longest JSON a non-negative float takes (23 characters: repr's 17 digits and an
# exponent of three), which every time and loss of `step_record_bytes` is written as.
_WIDEST_FLOAT = 2.2250738585072014e-308


def step_record_bytes(world: int, steps: int) -> int:
    """The most bytes a step's record takes in run.jsonl on `world` ranks, in a run of `steps`
    steps: one made of the longest value each field takes, measured as `write` writes it.
    Found by the sixty-first round: a tiny model's run.jsonl (705 bytes a step on 2 ranks)
    passed `ulimit -f` 1,667 steps in, and the run lost them all.

        step_record_bytes(2, 2000)   # 866: a written step of 2 ranks took 705 (that round's)
    """
    wide = _WIDEST_FLOAT
    times = dict.fromkeys(RANK_TIMES, wide)
    rank = RankTimes.model_construct(
        rank=world, stage=world, replica=world, peak_memory_bytes=2**53, **times
    )
    record = StepRecord.model_construct(
        step=steps, epoch=steps, phase=steps, step_s=wide, loss=wide, samples_per_s=wide,
        cache_hits=steps, ranks=[rank] * world,
    )  # fmt: skip
    return len(json.dumps(record.model_dump(mode="json")) + "\n")


def step_loss(rows: list[torch.Tensor]) -> float | None:
    """The step's loss from every rank's row: the mean over the ranks that computed one (the
    last stage's replicas), NaN or infinite if any of them is; None if none computed one."""
    column = STEP_ROW.index("loss")
    losses = [float(row[column]) for row in rows if float(row[column]) != MISSING]
    return sum(losses) / len(losses) if losses else None


def step_record(
    rows: list[torch.Tensor], *, step: int, epoch: int, phase: int, global_batch: int
) -> StepRecord:
    """The step record from every rank's row, in rank order: the slowest rank's time, the mean
    loss of the ranks that computed one, and the cache hits of the stage-0 ranks."""
    fields = [dict(zip(STEP_ROW, row.tolist(), strict=True)) for row in rows]
    ranks = [
        RankTimes(
            rank=rank,
            stage=None if f["stage"] < 0 else int(f["stage"]),
            replica=None if f["replica"] < 0 else int(f["replica"]),
            peak_memory_bytes=None if f["peak_memory_bytes"] < 0 else int(f["peak_memory_bytes"]),
            **{name: f[name] for name in RANK_TIMES},
        )
        for rank, f in enumerate(fields)
    ]
    step_s = max(r.step_s for r in ranks)
    return StepRecord(
        step=step,
        epoch=epoch,
        phase=phase,
        step_s=step_s,
        loss=step_loss(rows),
        samples_per_s=global_batch / step_s if step_s > 0 else 0.0,
        cache_hits=sum(int(f["cache_hits"]) for f in fields if f["stage"] == 0),
        ranks=ranks,
    )


def mend_torn_tail(path: Path, records: list) -> None:
    """Before appending to a run.jsonl that `read_records` read as `records`: a last line
    without its newline ends in one again (a whole record) or is cut off (a torn record,
    which `read_records` left out), so the next record starts a line of its own."""
    text = read_input(path)  # bounded, as `read_records` read it
    cut = torn_tail(text)
    if cut is None:
        return
    whole = [line for line in text[:cut].splitlines() if line.strip()]
    fd = open_append(path)  # the file itself, never one a link points to
    try:
        if len(whole) == len(records):  # the last line did not parse: torn
            os.ftruncate(fd, len(text[:cut].encode("utf-8")))
        else:
            os.write(fd, b"\n")
    finally:
        os.close(fd)


def _append(path: Path) -> TextIO:
    """run.jsonl opened to append records to, as a regular file only (`open_append`: a link
    there wrote a resume's records through it, a FIFO blocked rank 0)."""
    return os.fdopen(open_append(path), "a")


class Recorder:
    """Rank 0's `run.jsonl`, and beside it `metrics.csv`: one row per epoch (METRICS), for a
    spreadsheet or pandas, rewritten whole at each epoch so it always matches the records."""

    def __init__(self, path: Path, writes: bool):
        self.path = path
        self.metrics_path = path.with_name(METRICS_FILE)
        # Called with each step record (rank 0's progress bar), after the record is written.
        self.on_step: Callable[[StepRecord], None] | None = None
        self._file = _append(path) if writes else None  # closed in close()
        self._layouts: dict[int, str] = {}  # phase → layout label, for the metrics rows
        self._epochs: list[EpochRecord] = []
        self._open: list[StepRecord] = []  # the steps of the epoch not yet closed by its record

    def write(self, record: Record) -> None:
        if self._file is None:
            return
        try:
            self._file.write(json.dumps(record.model_dump(mode="json")) + "\n")
            self._file.flush()
        except OSError as exc:  # a full disk: the run stops naming the file, not just errno
            raise OutputError(
                f"{self.path}: write failed ({write_failure(exc, self.path)})"
            ) from None
        if isinstance(record, STEP_RECORDS) and self.on_step is not None:
            self.on_step(record)
        self._remember(record)

    def sync(self) -> None:
        """The records written so far on disk, not only in the page cache (`os.fsync`)."""
        if self._file is None:
            return
        try:
            os.fsync(self._file.fileno())
        except OSError as exc:
            raise OutputError(
                f"{self.path}: write failed ({write_failure(exc, self.path)})"
            ) from None

    @property
    def epochs(self) -> list[EpochRecord]:
        """The epoch records written so far, kept ones after a resume's truncation included
        (rank 0; empty elsewhere)."""
        return list(self._epochs)

    def steps_of(self, epoch: int) -> list[StepRecord]:
        """The step records of `epoch` written so far, while its epoch record is not (rank 0;
        empty elsewhere). After a resume's truncation, a mid-epoch checkpoint's epoch starts
        with them: its record covers every step of the epoch, as the uninterrupted run's."""
        return [s for s in self._open if s.epoch == epoch]

    def _remember(self, record: Record) -> None:
        if isinstance(record, PhaseRecord):
            self._layouts[record.phase] = record.layout.label()
        elif isinstance(record, STEP_RECORDS):
            self._open.append(record)
        elif isinstance(record, EpochRecord):
            self._epochs.append(record)
            self._open = []
            write_atomic(self.metrics_path, metrics_csv(self._epochs, self._layouts))

    def truncate(self, manifest: CheckpointManifest) -> None:
        """Drop the records written after the checkpoint: the resumed run writes them again.
        A summary.json of steps dropped goes too: written at the end of a run that finished
        past the checkpoint (one older than its final, corrupted one), it summed records
        that are no more, and the resumed run's end was held to it (the thirty-fourth
        round: the run could not end, nor be reported or exported). The run writes it anew
        at its end."""
        if self._file is None:
            return
        records = read_records(self.path)
        kept = [
            r
            for r in records
            if (isinstance(r, PhaseRecord) and r.phase <= manifest.phase)
            or (isinstance(r, STEP_RECORDS) and r.step < manifest.step)
            or (isinstance(r, EpochRecord) and r.epoch < manifest.epoch)
        ]
        dropped_steps = any(
            isinstance(r, STEP_RECORDS) and r.step >= manifest.step for r in records
        )
        self._file.close()
        if dropped_steps:  # before the records: a failure between leaves no stale summary
            self.path.with_name(SUMMARY_FILE).unlink(missing_ok=True)
        write_atomic(self.path, "".join(json.dumps(r.model_dump(mode="json")) + "\n" for r in kept))
        _remove_unpriced_calibrations(self.path.parent, kept)
        self._file = _append(self.path)
        self._layouts, self._epochs, self._open = {}, [], []
        for record in kept:
            self._remember(record)
        if not self._epochs:  # nothing kept to show: no stale rows either
            self.metrics_path.unlink(missing_ok=True)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def _remove_unpriced_calibrations(run_dir: Path, kept: list) -> None:
    """The calibration-N.json files a resume's truncation leaves no record of: fitted after
    the checkpoint, they priced only records dropped with it; the resumed run fits its own,
    and numbered past them, each crash and resume left one more (the fifty-seventh round).
    Only those numbered after every one a kept record was priced with (a phase, an epoch's
    forecast: `priced_records`) go; after the records, so a failure between leaves a file
    unread, never a record without its file."""
    named = [CALIBRATION_FILE.fullmatch(p.profile) for _, p in priced_records(kept)]
    last = max((int(m.group(1)) for m in named if m), default=0)
    for name in os.listdir(run_dir):
        if (found := CALIBRATION_FILE.fullmatch(name)) and int(found.group(1)) > last:
            with contextlib.suppress(FileNotFoundError):
                (run_dir / name).unlink()
