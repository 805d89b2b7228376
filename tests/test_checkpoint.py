"""Checkpoints: a run killed mid-step and resumed ends exactly where the uninterrupted run
ends; resuming on another world size re-plans and finishes."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from pipeplan.records import StepRecord, read_records

ROOT = Path(__file__).resolve().parents[1]
COMMON = [
    "--data",
    "tests.killer_data:digits_die_once",
    "--epochs",
    "2",
    "--max-steps-per-epoch",
    "6",
    "--freeze",
    "0,3",
    "--checkpoint-every",
    "4",
]


def pipeplan(*args: str, kill_after: int | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("PIPEPLAN_TEST_KILL_AFTER", None)
    if kill_after:
        env["PIPEPLAN_TEST_KILL_AFTER"] = str(kill_after)
    code = "import sys, cli; sys.exit(cli.main())"
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=200,
    )


def final_model(run_dir: Path) -> dict[str, torch.Tensor]:
    pointer = (run_dir / "checkpoints" / "latest").read_text().strip()
    assert pointer == "step-12"
    return torch.load(run_dir / "checkpoints" / pointer / "model.pt", weights_only=True)


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_killed_and_resumed_run_equals_the_uninterrupted_one(tmp_path):
    runs = ["--runs-dir", str(tmp_path)]
    assert pipeplan("run", *COMMON, *runs, "--name", "full").returncode == 0
    killed = pipeplan("run", *COMMON, *runs, "--name", "cut", kill_after=600)
    assert killed.returncode != 0 and "rank 1" in killed.stderr.splitlines()[-1]
    checkpoints = sorted(p.name for p in (tmp_path / "cut" / "checkpoints").glob("step-*"))
    assert checkpoints and "step-12" not in checkpoints  # it died before the end
    resumed = pipeplan("run", "--resume", str(tmp_path / "cut"))
    assert resumed.returncode == 0, resumed.stderr
    full, cut = final_model(tmp_path / "full"), final_model(tmp_path / "cut")
    assert full.keys() == cut.keys()
    assert all(torch.equal(full[k], cut[k]) for k in full)
    steps = [
        r.step for r in read_records(tmp_path / "cut" / "run.jsonl") if isinstance(r, StepRecord)
    ]
    assert steps == list(range(12))  # records after the checkpoint were rewritten, not doubled


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_resume_on_another_world_size(tmp_path):
    runs = ["--runs-dir", str(tmp_path)]
    killed = pipeplan("run", *COMMON, *runs, "--name", "cut", kill_after=600)
    assert killed.returncode != 0
    resumed = pipeplan("run", "--resume", str(tmp_path / "cut"), "--nproc", "1")
    assert resumed.returncode == 0, resumed.stderr
    assert (tmp_path / "cut" / "checkpoints" / "latest").read_text().strip() == "step-12"


def test_resume_without_a_checkpoint_is_one_line(tmp_path, capsys):
    import cli

    assert cli.main(["run", "--resume", str(tmp_path)]) == 2
    assert "no such file" in capsys.readouterr().err
