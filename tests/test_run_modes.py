"""`pipeplan run` modes no other test runs, each through the real command on 2 ranks:
`--plan FILE` (the plan's layouts are the ones run), `--freeze alpha` with a cache budget so
small that the cache spills to disk, and `--freeze none`."""

import json

import pytest
from conftest import make_layout, pinned_plan

import cli
from executor.planning import shipped_profile
from pipeplan.formats import STEP_RECORDS, EpochRecord, PhaseRecord, read_records
from pipeplan.freeze import alpha_schedule

PLANNED = ["--model", "vit-digits", "--nproc", "2"]  # with --plan: its cluster sets the memory
BASE = [*PLANNED, "--device-memory", "100MiB"]


def moves(frozen: list[int]) -> list:
    """2x1 with nothing frozen, then 1x2 reading the cache at each freeze point."""
    first = make_layout(64, 0, False, (0, 5, 10), ((0, 1),), 4, "1f1b")
    later = [make_layout(64, k, True, (0, 10), ((0,), (1,)), 1, "1f1b") for k in set(frozen) - {0}]
    return [first, *later]


def records(run_dir):
    found = read_records(run_dir / "run.jsonl")
    return (
        [r for r in found if isinstance(r, PhaseRecord)],
        [r for r in found if isinstance(r, STEP_RECORDS)],
        [r for r in found if isinstance(r, EpochRecord)],
    )


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_a_written_plan_runs_as_planned(tmp_path):
    plan = tmp_path / "plan.json"
    argv = ["plan", "--profile", str(shipped_profile("vit-digits", "cpu")), "--nodes", "1"]
    argv += ["--devices-per-node", "2", "--device-memory", "100MiB", "--global-batch", "64"]
    argv += ["--samples", "1438", "--epochs", "2", "--freeze-schedule", "0,5", "--out", str(plan)]
    assert cli.main(argv) == 0
    planned = [p["layout"] for p in json.loads(plan.read_text())["phases"]]
    run = ["run", *PLANNED, "--plan", str(plan), "--epochs", "2"]  # the plan's freezing
    run += ["--max-steps-per-epoch", "3", "--name", "p", "--runs-dir", str(tmp_path)]
    assert cli.main(run) == 0
    phases, steps, _ = records(tmp_path / "p")
    assert [p.layout.model_dump(mode="json") for p in phases] == planned
    assert all(p.pricing.source == "plan" for p in phases)
    assert len(steps) == 6


@pytest.mark.long
@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_alpha_freezing_with_a_cache_that_spills_to_disk(tmp_path):
    run = ["run", *PLANNED, "--epochs", "6", "--max-steps-per-epoch", "3"]
    # Pinned to what the planner chose before forward-only stages existed (2x1, then 1x2
    # cached): over 3 steps an epoch it now keeps the 2x1 layout, stage 0 forward-only. The
    # run follows the plan's schedule, α = 0.5's, and its 4 KiB cache budget.
    frozen = alpha_schedule(0.5, 6, 8).frozen_layers
    path = tmp_path / "plan.json"
    run += ["--plan", pinned_plan(path, moves(frozen), frozen, epochs=6, cache_budget="4KiB")]
    assert cli.main([*run, "--name", "a", "--runs-dir", str(tmp_path)]) == 0
    phases, steps, epochs = records(tmp_path / "a")
    expected = alpha_schedule(0.5, 6, 8).frozen_layers  # vit-digits has 8 blocks
    assert [e.frozen_layers for e in epochs] == expected == [0, 5, 7, 8, 9, 9]
    # A cached phase's first epoch fills the node's cache as it trains; over the last two
    # epochs (the run's horizon: the epochs left) the hits of the second repay the store.
    assert phases[-1].layout.cached
    cached = [s for s in steps if phases[s.phase].layout.cached]
    assert cached and sum(s.cache_hits for s in cached) > 0
    # 4 KiB holds not even one sample's activations: every row lives in the spill file.
    latest = (tmp_path / "a" / "checkpoints" / "latest").read_text().strip()
    manifest = json.loads((tmp_path / "a" / "checkpoints" / latest / "manifest.json").read_text())
    assert manifest["cache"]["memory"]["rows"] == [0, 0]
    assert manifest["cache"]["filled_spilled"] == manifest["cache"]["filled"] > 0


# In `-m long`, for the suite's time: the demo's static run (test_demo.py) is a run of
# `--freeze none` and asserts one phase that freezes nothing.
@pytest.mark.long
@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_freeze_none_keeps_one_phase(tmp_path):
    run = ["run", *BASE, "--freeze", "none", "--epochs", "2", "--max-steps-per-epoch", "3"]
    assert cli.main([*run, "--name", "n", "--runs-dir", str(tmp_path)]) == 0
    phases, steps, epochs = records(tmp_path / "n")
    assert len(phases) == 1 and phases[0].layout.frozen_layers == 0
    assert [e.frozen_layers for e in epochs] == [0, 0] and len(steps) == 6
