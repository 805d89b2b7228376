"""Calibration recovers known corrections from run records, and refuses runs it cannot use."""

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import fake_pricing

import cli
from executor.planning import shipped_profile
from pipeplan.calibrate import calibrate, observe, predict
from pipeplan.cluster import run_cluster
from pipeplan.costmodel import CostModel
from pipeplan.errors import InputFileError
from pipeplan.formats import (
    Calibration,
    FittedLink,
    Layout,
    PhaseRecord,
    Profile,
    RankTimes,
    RunConfig,
    StepRecord,
    dumps,
    load,
)

PROFILE_PATH = shipped_profile("vit-digits", "cpu")
TRUTH = Calibration(
    fwd_scale=1.3,
    bwd_scale=1.15,
    nograd_scale=1.4,
    allreduce=FittedLink(latency_s=2e-4, bandwidth_bytes_per_s=5e8),
    optimizer_s_per_byte=2e-9,
    step_overhead_s=0.004,
    input_s_per_sample=3e-5,
    runs=["truth"],
    phases_used=0,
    steps_used=0,
    residual_median=0,
    residual_max=0,
)
# (frozen layers, S, D, M, schedule, boundaries) for vit-digits' 10 layers on 2 ranks
PHASES = [
    (0, 2, 1, 4, "1f1b", (0, 5, 10)),
    (0, 1, 2, 2, "gpipe", (0, 10)),
    (3, 2, 1, 2, "gpipe", (0, 6, 10)),
    (5, 1, 2, 1, "1f1b", (0, 10)),
]


def rank_times(model: CostModel, layout: Layout, frozen: int) -> list[RankTimes]:
    """What each rank would measure if the truth calibration held exactly."""
    m, M = layout.micro_batch_size, layout.micro_batches
    f, g, n = (model.layer_times(kind, m) for kind in ("fwd", "bwd", "nograd"))  # truth-scaled
    out = []
    for replica, row in enumerate(layout.rank_map):
        for stage, rank in enumerate(row):
            first, stop = layout.boundaries[stage], layout.boundaries[stage + 1]
            idx = np.arange(first, stop)
            active, frozen_idx = idx[idx >= frozen], idx[idx < frozen]
            grad_bytes = float(model.param_bytes[active].sum())
            out.append(
                RankTimes(
                    rank=rank,
                    stage=stage,
                    replica=replica,
                    step_s=0.0,
                    fwd_s=M * float(f[active].sum() + n[frozen_idx].sum()),
                    bwd_s=M * float(g[active].sum()),
                    wait_s=0.0,
                    allreduce_s=model.allreduce_s(
                        grad_bytes, layout.replicas, model.intra_allreduce_link
                    ),
                    optimizer_s=model.optimizer_s(grad_bytes),
                    input_s=0.0,
                )
            )
    return out


def write_run(run_dir: Path, profile: Profile, steps_per_phase: int = 8) -> None:
    config = RunConfig(
        name=run_dir.name, model="vit-digits", data="digits", nproc=2, global_batch=64, epochs=1
    )
    run_dir.mkdir()
    (run_dir / "run.json").write_text(dumps(config))
    truth = profile.model_copy(update={"calibration": TRUTH})
    model = CostModel(truth, run_cluster(config, profile))
    rng = np.random.default_rng(0)
    lines, step = [], 0
    for index, (frozen, S, D, M, schedule, boundaries) in enumerate(PHASES):
        rank_map = tuple(tuple(r * S + s for s in range(S)) for r in range(D))
        layout = Layout(
            frozen_layers=frozen,
            cached=False,
            micro_batches=M,
            micro_batch_size=64 // (D * M),
            schedule=schedule,
            boundaries=boundaries,
            rank_map=rank_map,
        )
        step_s = model.evaluate(layout, record=False).step_s
        lines.append(
            PhaseRecord(
                phase=index,
                start_step=step,
                start_epoch=0,
                layout=layout,
                predicted_step_s=None,
                pricing=fake_pricing().model_copy(update={"cluster": model.cluster}),
                transition_s=0.0,
            )
        )
        ranks = rank_times(model, layout, frozen)
        for _ in range(steps_per_phase):
            noise = float(rng.normal(1.0, 0.003))
            lines.append(
                StepRecord(
                    step=step,
                    epoch=0,
                    phase=index,
                    step_s=step_s * noise,
                    loss=1.0,
                    samples_per_s=64 / step_s,
                    ranks=ranks,
                )
            )
            step += 1
    (run_dir / "run.jsonl").write_text("".join(r.model_dump_json() + "\n" for r in lines))


@pytest.fixture(scope="module")
def profile() -> Profile:
    return load(Profile, PROFILE_PATH)


def test_calibration_recovers_known_corrections(tmp_path, profile):
    write_run(tmp_path / "run", profile)
    c = calibrate([tmp_path / "run"], profile).calibration
    assert c.fwd_scale == pytest.approx(1.3, rel=0.02)
    assert c.bwd_scale == pytest.approx(1.15, rel=0.02)
    assert c.nograd_scale == pytest.approx(1.4, rel=0.05)
    assert c.optimizer_s_per_byte == pytest.approx(2e-9, rel=0.02)
    assert c.residual_median < 0.01 and c.residual_max < 0.03
    assert c.phases_used == 4 and c.steps_used == 4 * (8 - 2)


def test_calibrated_predictions_beat_raw_ones(tmp_path, profile):
    write_run(tmp_path / "run", profile)
    calibrated = calibrate([tmp_path / "run"], profile)
    for obs in observe([tmp_path / "run"], profile):
        raw = abs(predict(profile, obs) / obs.measured_step_s - 1)
        fitted = abs(predict(calibrated, obs) / obs.measured_step_s - 1)
        assert fitted < 0.03 and fitted < raw


def test_bad_runs_are_one_line_errors(tmp_path, profile):
    with pytest.raises(InputFileError, match="no such run directory"):
        calibrate([tmp_path / "missing"], profile)
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputFileError, match="incomplete run"):
        calibrate([tmp_path / "empty"], profile)
    write_run(tmp_path / "short", profile, steps_per_phase=4)
    with pytest.raises(InputFileError, match="needs 5 steps"):
        calibrate([tmp_path / "short"], profile)
    other = load(Profile, shipped_profile("bert-synth", "cpu"))
    with pytest.raises(InputFileError, match="profile is of 'bert-synth'"):
        calibrate([tmp_path / "short"], other)


def test_cli_leaves_the_input_profile_untouched(tmp_path, capsys):
    before = PROFILE_PATH.read_bytes()
    out = tmp_path / "cal.json"
    assert (
        cli.main(
            ["calibrate", str(tmp_path / "nope"), "--profile", str(PROFILE_PATH), "--out", str(out)]
        )
        == 2
    )
    assert "no such run directory" in capsys.readouterr().err and not out.exists()
    write_run(tmp_path / "run", load(Profile, PROFILE_PATH))
    assert (
        cli.main(
            ["calibrate", str(tmp_path / "run"), "--profile", str(PROFILE_PATH), "--out", str(out)]
        )
        == 0
    )
    assert PROFILE_PATH.read_bytes() == before
    assert json.loads(out.read_text())["calibration"]["runs"] == [str(tmp_path / "run")]
