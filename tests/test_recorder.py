"""The run's records: each rank's row of a step record packs and unpacks by name; rank 0
appends run.jsonl and feeds the progress bar; a resume cuts the records back to the
checkpoint; other ranks write nothing."""

import pytest
from conftest import fake_pricing, make_layout

from executor.parallel import StepTimes
from executor.records import RANK_TIMES, Recorder, step_record, step_row
from pipeplan.errors import OutputError
from pipeplan.formats import (
    CheckpointManifest,
    EpochRecord,
    PhaseRecord,
    RankTimes,
    RunConfig,
    StepRecord,
    read_records,
)

# A run's records start with the phase its steps belong to.
PHASE = PhaseRecord(
    layout=make_layout(8, 0, False, (0, 10), ((0,), (1,)), 1, "1f1b"),
    predicted_step_s=None,
    pricing=fake_pricing(2),
    phase=0,
    start_step=0,
    start_epoch=0,
    transition_s=0.0,
)
# Every rank of the world, each where PHASE's layout puts it: one stage, two replicas, each
# timing its parts (step_s 0) as the format holds them: a forward, a backward, an all-reduce.
TIMES = dict(step_s=0.0, fwd_s=0.02, bwd_s=0.03, wait_s=0.0, allreduce_s=0.005, optimizer_s=0.002)
RANKS = [RankTimes(rank=r, stage=0, replica=r, input_s=0.0, **TIMES) for r in (0, 1)]


def step(number: int, epoch: int) -> StepRecord:
    return StepRecord(
        step=number, epoch=epoch, phase=0, step_s=0.1, loss=1.0, samples_per_s=80.0, ranks=RANKS
    )


def epoch(number: int) -> EpochRecord:
    return EpochRecord(
        epoch=number,
        phase=0,
        frozen_layers=0,
        steps=2,
        epoch_s=0.2,
        train_loss=1.0,
        eval_accuracy=None,
        samples_per_s=80.0,
    )


def manifest(steps_done: int, epoch: int) -> CheckpointManifest:
    return CheckpointManifest(
        step=steps_done,
        epoch=epoch,
        step_in_epoch=0,
        phase=1,
        frozen_layers=0,
        grad_history=[],
        grad_norm_sums={},
        grad_norm_steps=0,
        world_size=2,
        model="bert-synth",
        config=RunConfig(name="t", model="bert-synth"),
    )


def test_rank_0_appends_every_record_and_shows_each_step(tmp_path):
    path = tmp_path / "run.jsonl"
    shown = []
    recorder = Recorder(path, writes=True)
    recorder.on_step = shown.append
    for record in (PHASE, step(0, 0), step(1, 0), epoch(0), step(2, 1)):
        recorder.write(record)
    assert len(read_records(path)) == 5  # flushed as written, before close
    recorder.close()
    assert [s.step for s in shown] == [0, 1, 2]


def test_a_resume_keeps_the_records_before_the_checkpoint_then_appends(tmp_path):
    path = tmp_path / "run.jsonl"
    recorder = Recorder(path, writes=True)
    for record in (PHASE, step(0, 0), step(1, 0), epoch(0), step(2, 1), step(3, 1), epoch(1)):
        recorder.write(record)
    recorder.close()
    resumed = Recorder(path, writes=True)
    resumed.truncate(manifest(steps_done=3, epoch=1))
    resumed.write(step(3, 1))
    resumed.close()
    kept = [(r.kind, getattr(r, r.kind)) for r in read_records(path)]
    assert kept == [("phase", 0), ("step", 0), ("step", 1), ("epoch", 0), ("step", 2), ("step", 3)]


def test_a_full_disk_names_run_jsonl(tmp_path):
    """Found by the sixteenth round: a full disk while appending a record stopped the run
    with `[Errno 28] No space left on device`, naming no file."""
    path = tmp_path / "run.jsonl"
    recorder = Recorder(path, writes=True)
    recorder._file.close()
    recorder._file = open("/dev/full", "a")  # noqa: SIM115 (every write: ENOSPC)
    with pytest.raises(OutputError, match=r"run\.jsonl: write failed \(No space left on device\)"):
        recorder.write(PHASE)


def test_sync_puts_the_records_on_disk_before_a_checkpoint(tmp_path, monkeypatch):
    """The eighteenth round: a resume refuses a checkpoint whose records end before it, so
    the records are fsynced before each checkpoint (flushed only, a power loss could keep
    the fsynced checkpoint and lose the records it follows)."""
    import os

    synced = []
    monkeypatch.setattr(os, "fsync", synced.append)
    recorder = Recorder(tmp_path / "run.jsonl", writes=True)
    recorder.write(PHASE)
    assert synced == []
    recorder.sync()
    assert synced == [recorder._file.fileno()]
    recorder.close()
    Recorder(tmp_path / "other.jsonl", writes=False).sync()  # other ranks hold no file
    assert len(synced) == 1


def test_other_ranks_write_nothing(tmp_path):
    path = tmp_path / "run.jsonl"
    shown = []
    recorder = Recorder(path, writes=False)
    recorder.on_step = shown.append
    recorder.write(step(0, 0))
    recorder.truncate(manifest(steps_done=0, epoch=0))
    recorder.close()
    assert not path.exists() and shown == []


def times(base: float, loss: float | None) -> StepTimes:
    """Distinct values per field, so a field read from the wrong place shows."""
    values = {name: base + index / 100 for index, name in enumerate(RANK_TIMES)}
    return StepTimes(**values, loss=loss)


def test_a_step_record_reads_every_ranks_row_by_name():
    rows = [
        step_row(times(1.0, None), cache_hits=4, stage=0, replica=0),  # stage 0: no loss
        step_row(times(2.0, 0.5), cache_hits=0, stage=1, replica=0),
        step_row(times(3.0, 1.5), cache_hits=0, stage=1, replica=1),
        step_row(times(0.0, None), cache_hits=0, stage=None, replica=None),  # outside the layout
    ]
    record = step_record(rows, step=7, epoch=1, phase=2, global_batch=16)
    assert (record.step, record.epoch, record.phase) == (7, 1, 2)
    assert record.loss == 1.0 and record.cache_hits == 4
    assert record.step_s == 3.0 and record.samples_per_s == 16 / 3.0
    for rank, (base, stage, replica) in enumerate([(1.0, 0, 0), (2.0, 1, 0), (3.0, 1, 1)]):
        measured, sent = record.ranks[rank], times(base, None)
        assert (measured.rank, measured.stage, measured.replica) == (rank, stage, replica)
        assert [getattr(measured, name) for name in RANK_TIMES] == [
            getattr(sent, name) for name in RANK_TIMES
        ]
    assert (record.ranks[3].stage, record.ranks[3].replica) == (None, None)
