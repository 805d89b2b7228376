"""The recorder: rank 0 appends run.jsonl and feeds the progress bar; a resume cuts the records
back to the checkpoint; other ranks write nothing."""

from executor.records import Recorder
from pipeplan.formats import CheckpointManifest, EpochRecord, StepRecord, read_records


def step(number: int, epoch: int) -> StepRecord:
    return StepRecord(
        step=number, epoch=epoch, phase=0, step_s=0.1, loss=1.0, samples_per_s=80.0, ranks=[]
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
    )


def test_rank_0_appends_every_record_and_shows_each_step(tmp_path):
    path = tmp_path / "run.jsonl"
    shown = []
    recorder = Recorder(path, writes=True)
    recorder.on_step = shown.append
    for record in (step(0, 0), step(1, 0), epoch(0), step(2, 1)):
        recorder.write(record)
    assert len(read_records(path)) == 4  # flushed as written, before close
    recorder.close()
    assert [s.step for s in shown] == [0, 1, 2]


def test_a_resume_keeps_the_records_before_the_checkpoint_then_appends(tmp_path):
    path = tmp_path / "run.jsonl"
    recorder = Recorder(path, writes=True)
    for record in (step(0, 0), step(1, 0), epoch(0), step(2, 1), step(3, 1), epoch(1)):
        recorder.write(record)
    recorder.close()
    resumed = Recorder(path, writes=True)
    resumed.truncate(manifest(steps_done=3, epoch=1))
    resumed.write(step(3, 1))
    resumed.close()
    kept = [(r.kind, r.step if isinstance(r, StepRecord) else r.epoch) for r in read_records(path)]
    assert kept == [("step", 0), ("step", 1), ("epoch", 0), ("step", 2), ("step", 3)]


def test_other_ranks_write_nothing(tmp_path):
    path = tmp_path / "run.jsonl"
    shown = []
    recorder = Recorder(path, writes=False)
    recorder.on_step = shown.append
    recorder.write(step(0, 0))
    recorder.truncate(manifest(steps_done=0, epoch=0))
    recorder.close()
    assert not path.exists() and shown == []
