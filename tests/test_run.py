"""`pipeplan run` end to end on 2 gloo ranks: records, layout changes, bad input, a dying rank."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import make_layout, pinned_plan, rank_processes

import cli
from executor.planning import shipped_profile
from pipeplan.formats import STEP_RECORDS, EpochRecord, PhaseRecord, read_records

ROOT = Path(__file__).resolve().parents[1]


def spawned_workers() -> set[int]:
    """PIDs of multiprocessing spawn children on this machine."""
    pids = set()
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and b"spawn_main" in (entry / "cmdline").read_bytes():
                pids.add(int(entry.name))
        except OSError:
            continue
    return pids


# With --plan, not --device-memory: the pinned plan's cluster sets the memory.
ELASTIC = ["--model", "vit-digits", "--nproc", "2"]
MOVES = [  # 2x1, then 1x2 reading the cache once 5 and then 7 layers are frozen
    make_layout(64, 0, False, (0, 5, 10), ((0, 1),), 4, "1f1b"),
    make_layout(64, 5, True, (0, 10), ((0,), (1,)), 1, "1f1b"),
    make_layout(64, 7, True, (0, 10), ((0,), (1,)), 1, "1f1b"),
]


@pytest.mark.long
@pytest.mark.multiprocess
@pytest.mark.timeout(240)
def test_elastic_run_writes_its_records_and_changes_layout(tmp_path, capsys):
    args = ["run", *ELASTIC, "--epochs", "3", "--max-steps-per-epoch", "4"]  # freezing 0,5,7
    # Pinned to what the planner chose before forward-only stages existed: over 4 steps an
    # epoch it now keeps the 2x1 layout (stage 0 forward-only), and this run is about a change.
    args += ["--plan", pinned_plan(tmp_path / "plan.json", MOVES, [0, 5, 7], epochs=3)]
    assert cli.main([*args, "--name", "r", "--runs-dir", str(tmp_path)]) == 0
    run_dir = tmp_path / "r"
    assert {p.name for p in run_dir.iterdir()} >= {"run.json", "run.jsonl", "summary.json"}
    records = read_records(run_dir / "run.jsonl")
    phases = [r for r in records if isinstance(r, PhaseRecord)]
    steps = [r for r in records if isinstance(r, STEP_RECORDS)]
    epochs = [r for r in records if isinstance(r, EpochRecord)]
    assert [(p.layout.frozen_layers, p.layout.num_stages, p.layout.replicas) for p in phases] == [
        (0, 2, 1),
        (5, 1, 2),
        (7, 1, 2),
    ]
    assert phases[1].layout.cached and phases[1].predicted_step_s > 0
    assert len(steps) == 12 and len(epochs) == 3
    assert all(len(s.ranks) == 2 and s.loss is not None for s in steps)
    assert all(r.fwd_s > 0 and r.bwd_s > 0 for r in steps[0].ranks)
    assert steps[-1].cache_hits > 0  # the third epoch reads the frozen prefix from the cache
    assert all(e.eval_accuracy is not None for e in epochs)
    summary = json.loads((run_dir / "summary.json").read_text())
    shapes = [
        f"{len(p['layout']['boundaries']) - 1}x{len(p['layout']['rank_map'])}"
        + (" cached" if p["layout"]["cached"] else "")
        for p in summary["phases"]
    ]
    assert shapes == ["2x1", "1x2 cached", "1x2 cached"]
    assert "measured ms" in capsys.readouterr().out


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["--model", "bert-synth", "--data", "digits"], "model 'bert-synth' takes"),
        (["--freeze", "0,x"], "freeze schedule"),
        (["--global-batch", "5000"], "larger than the 1438 training samples of data 'digits'"),
        (["--device-memory", "1MiB"], "does not fit"),
        (["--model", "bert-base", "--data", "synth-text"], "no shipped profile"),
    ],
)
def test_bad_input_fails_before_any_process_starts(tmp_path, capsys, args, fragment):
    assert cli.main(["run", *args, "--name", "x", "--runs-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and fragment in err
    assert not (tmp_path / "x").exists()


@pytest.mark.timeout(120)
def test_the_no_profile_hint_measures_the_input_the_run_feeds(tmp_path, capsys):
    """Found by the twenty-sixth round: a model folder without a shipped profile was told
    `pipeplan profile MODEL --out P.json --nproc 2`, whose profile (the default sequence
    length and task) the same run then refused. The hint carries the run's input flags: the
    profile it makes (measured briefly here, on one rank) is accepted."""
    import shlex

    import transformers

    config = transformers.BertConfig(
        vocab_size=100,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
    )
    transformers.BertForSequenceClassification(config).save_pretrained(tmp_path / "bert")
    model = str(tmp_path / "bert")
    args = ["run", "--model", model, "--data", "synth-text", "--seq-len", "16", "--nproc", "1"]
    args += ["--prepare-only", "--runs-dir", str(tmp_path / "runs")]
    assert cli.main(args) == 2
    err = capsys.readouterr().err.strip()
    hint = err.split("run `", 1)[1].split("`", 1)[0]
    assert hint.startswith(f"pipeplan profile {model} --seq-len 16 --task classification"), err
    profile = str(tmp_path / "P.json")
    measured = shlex.split(hint)[1:]
    assert "--nproc" not in measured  # one rank: no links to measure (the sixty-sixth round)
    measured[measured.index("P.json")] = profile
    quick = ["--micro-batch-sizes", "1,2,4,8", "--repeats", "1", "--warmup", "0"]
    assert cli.main([*measured, *quick]) == 0, capsys.readouterr().err
    capsys.readouterr()
    assert cli.main([*args, "--profile", profile, "--global-batch", "8"]) == 0, (
        capsys.readouterr().err
    )


def test_a_plan_for_another_world_size_is_refused(tmp_path, capsys):
    plan = tmp_path / "plan.json"
    profile = str(shipped_profile("vit-digits", "cpu"))
    made = ["plan", "--profile", profile, "--devices-per-node", "4", "--global-batch", "64"]
    assert cli.main([*made, "--samples", "1400", "--epochs", "2", "--out", str(plan)]) == 0
    args = ["run", "--nproc", "2", "--plan", str(plan), "--runs-dir", str(tmp_path)]
    assert cli.main(args) == 2
    said = f"{plan}: the plan is for 4 devices (inputs.cluster) but --nproc is 2"
    assert said in capsys.readouterr().err


def test_a_plan_for_more_nodes_than_the_run_has_is_refused(tmp_path, capsys, monkeypatch):
    """Found by the twenty-second round: a local `run --plan P` of a plan for 2 nodes × 1
    device started its ranks on one host, its phases priced with the inter-node link and a
    cache per node. A local run is one node: refused in one line naming the plan file, with
    nothing made. `--prepare-only` (torchrun starts the ranks, on nodes not known yet) takes
    it; under torchrun the launcher's nodes (WORLD_SIZE / LOCAL_WORLD_SIZE) are compared."""
    from executor.launch import check_plan_nodes, launcher_nodes
    from pipeplan.errors import BadArgumentError
    from pipeplan.formats import Plan, load

    plan = tmp_path / "plan.json"
    profile = str(shipped_profile("vit-digits", "cpu"))
    made = ["plan", "--profile", profile, "--nodes", "2", "--devices-per-node", "1"]
    made += ["--global-batch", "64", "--samples", "1438", "--epochs", "2"]
    assert cli.main([*made, "--out", str(plan)]) == 0
    args = ["run", "--plan", str(plan), "--runs-dir", str(tmp_path / "runs"), "--name", "x"]
    capsys.readouterr()
    assert cli.main(args) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [
        f"pipeplan: error: {plan}: the plan is for 2 nodes × 1 device; this run is 1 node × 2 "
        "ranks: re-plan with --nodes 1 --devices-per-node 2"
    ]
    assert not (tmp_path / "runs").exists()
    assert cli.main([*args, "--prepare-only"]) == 0
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    assert launcher_nodes() == 2
    check_plan_nodes(load(Plan, plan), plan, launcher_nodes(), 2)  # torchrun on 2 nodes
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    with pytest.raises(BadArgumentError, match="this run is 1 node × 2 ranks"):
        check_plan_nodes(load(Plan, plan), plan, launcher_nodes(), 2)


@pytest.mark.timeout(60)
def test_a_run_under_torchrun_on_two_nodes_plans_for_two_nodes(tmp_path, monkeypatch):
    """Found by the thirty-eighth round: a run prepared without --plan and started by
    torchrun on 2 nodes of 1 rank (WORLD_SIZE=2, LOCAL_WORLD_SIZE=1) planned every phase, and
    recorded its pricing, for 1 node of 2 devices (`run_cluster` said nodes=1 whatever the
    launcher said): its all-reduce priced on the in-node link, one AutoCache for both
    replicas, each rank half its host's memory. A torchrun rank's planner now prices the
    nodes torchrun started (WORLD_SIZE / LOCAL_WORLD_SIZE of LOCAL_WORLD_SIZE ranks each,
    `launch.host_ranks`), each rank with its node's memory, and the links `pipeplan plan
    --nodes 2 --devices-per-node 1` takes; a local run and one node of torchrun stay 1 node."""
    from executor.launch import host_ranks
    from executor.planning import RunPlanner
    from pipeplan.cluster import cluster_from_flags
    from pipeplan.formats import Profile, RunConfig, load

    profile = load(Profile, shipped_profile("vit-digits", "cpu"))
    cfg = RunConfig(name="t", model="vit-digits", nproc=2)
    run = tmp_path / "runs" / "t"

    def cluster(local: bool):  # what rank 0's planner records with a phase
        planner = RunPlanner(profile, "profile.json", False, cfg, None, host_ranks(cfg, local, run))
        return planner.pricing("solver").cluster

    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    two = cluster(local=False)
    one = cluster(local=True)  # `pipeplan run --nproc 2`: its ranks on this host
    assert (two.nodes, two.devices_per_node, one.nodes, one.devices_per_node) == (2, 1, 1, 2)
    assert two.device_memory_bytes >= 2 * one.device_memory_bytes  # one rank a host, not two
    memory = two.device_memory_bytes
    flags = cluster_from_flags(nodes=2, devices_per_node=1, device_memory=memory, profile=profile)
    assert two.model_dump() == flags.model_dump()  # `pipeplan plan`'s cluster of 2 nodes
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")  # torchrun with 2 ranks on one node
    assert cluster(local=False).model_dump() == one.model_dump()


@pytest.mark.long  # test_launch names a killed and a raising rank: for the 15-minute default run
@pytest.mark.multiprocess
@pytest.mark.timeout(180)
def test_a_dying_rank_stops_the_run_names_the_rank_and_leaves_no_process(tmp_path):
    before = spawned_workers()
    code = "import cli; cli.entry()"
    args = ["run", "--nproc", "2", "--data", "tests.killer_data:digits_then_die", "--epochs", "2"]
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-c", code, *args, "--runs-dir", str(tmp_path), "--name", "k"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=150,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert result.returncode != 0
    assert "rank 1" in result.stderr.splitlines()[-1] and "at step" in result.stderr
    assert time.monotonic() - started < 90
    assert spawned_workers() - before == set()
    assert rank_processes(tmp_path / "k") == {}  # the ranks elastic_launch started
