"""`pipeplan demo` end to end, shortened: both runs, calibration, and the speedups it prints."""

import pytest

from executor.demo import run_demo
from pipeplan.formats import EpochRecord, read_records


@pytest.mark.multiprocess
@pytest.mark.timeout(400)
def test_demo_runs_the_whole_loop(tmp_path):
    said = []
    # Four whole epochs: the shortest demo in which re-partitioning pays for its transition.
    result = run_demo(str(tmp_path), said.append, epochs=4)
    assert [line[:3] for line in said if line[1] == "/"] == ["1/5", "2/5", "3/5", "4/5", "5/5"]
    layout = result.static.phases[0].layout
    assert (layout.num_stages, layout.replicas) == (2, 1)  # 100 MiB per rank needs a pipeline
    # Both runs learn: the training loss falls epoch by epoch, and held-out accuracy ends well
    # above chance (10 % on ten digits).
    assert result.static.final_eval_accuracy > 0.3 and result.elastic.final_eval_accuracy > 0.3
    for name in ("static", "elastic"):
        records = read_records(result.run_dir / name / "run.jsonl")
        losses = [r.train_loss for r in records if isinstance(r, EpochRecord)]
        assert losses[-1] < 0.8 * losses[0], (name, losses)
    assert result.previewed_speedup > 1 and result.calibrated_speedup > 0
    assert result.measured_speedup > 0
    assert (result.run_dir / "calibrated-profile.json").exists()
    assert {p.name for p in result.run_dir.iterdir()} >= {"static", "elastic"}
