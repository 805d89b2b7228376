"""Hostile run directories, records and checkpoints, found by an independent round (the
fifth): each refusal asserts exit code 2, exactly one line `pipeplan: error: …` naming what
is wrong, and that no file changed. Real runs are the one `finished_run` (conftest)
(1 rank, 1 epoch of 2 steps, its checkpoint `step-2`), copied per case; records are written
cheaply by `write_run`.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import priced
from test_hostile import copy_run, refused, snapshot
from test_report import elastic_records, write_run

import cli
from executor.planning import shipped_profile
from pipeplan.errors import InputFileError
from pipeplan.formats import PhaseRecord, Profile, RunConfig, load

# ----------------------------------------------------------------------------- run directories


def test_a_run_inside_another_runs_directory_is_refused(tmp_path, capsys):
    """`--runs-dir RUN/checkpoints --name step-1` was accepted, and RUN's next checkpoint
    pruned the new run away with its run.json."""
    run = write_run(tmp_path / "n", elastic_records())
    argv = ["run", "--model", "vit-digits", "--nproc", "1", "--name", "step-1", "--prepare-only"]
    argv += ["--runs-dir", str(run / "checkpoints")]
    refused(argv, tmp_path, capsys, ("--runs-dir", f"inside the run directory {run}"))
    assert not (run / "checkpoints").exists()


@pytest.mark.parametrize(
    "target, given",
    [("checkpoints", "ext/ck"), ("logs", "ext/ck"), ("checkpoints", "ext/ck/a/b")],
    ids=["a link to RUN/checkpoints", "a link to RUN/logs", "a folder below such a link"],
)
def test_a_runs_dir_linked_into_a_run_is_refused(tmp_path, capsys, target, given):
    """Thirteenth round: `--runs-dir ext/ck`, a symbolic link to RUN/checkpoints (or RUN/logs),
    was accepted and made the new run inside RUN, where RUN/checkpoints itself is refused."""
    run = write_run(tmp_path / "n", elastic_records())
    for folder in ("checkpoints", "logs"):
        (run / folder).mkdir()
    (tmp_path / "ext").mkdir()
    (tmp_path / "ext" / "ck").symlink_to(Path("..") / "n" / target)
    runs_dir = tmp_path / given
    argv = ["run", "--model", "vit-digits", "--nproc", "1", "--name", "zz3", "--prepare-only"]
    argv += ["--runs-dir", str(runs_dir)]
    refused(argv, tmp_path, capsys, (f"--runs-dir {runs_dir}:", f"run directory {run.resolve()}"))
    assert [list((run / folder).iterdir()) for folder in ("checkpoints", "logs")] == [[], []]


@pytest.mark.parametrize("stop", ["full disk at run.json", "full disk after run.json", "ctrl-c"])
def test_a_run_that_cannot_be_prepared_leaves_no_folder(tmp_path, monkeypatch, capsys, stop):
    """Found by the fifteenth round (the class of its full-disk findings): `run` on a full
    disk said so in one line but left RUNS/NAME/ with its .lock, or with run.json and no
    profile, which refused the name thereafter ("holds run.json"). What the preparation
    made goes, its lock is released, and the same command then prepares the run."""
    import errno
    import os

    from pipeplan.errors import Interrupted

    runs = tmp_path / "new" / "runs"
    argv = ["run", "--model", "vit-digits", "--nproc", "1", "--name", "p", "--prepare-only"]
    argv += ["--runs-dir", str(runs)]
    syncs, real_fsync = [], os.fsync

    def stopped(fd: int) -> None:
        syncs.append(fd)
        if stop == "ctrl-c" and len(syncs) == 2:
            raise Interrupted  # what the CLI's SIGINT handler raises
        if len(syncs) == (1 if stop == "full disk at run.json" else 2):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", stopped)
    assert cli.main(argv) == (130 if stop == "ctrl-c" else 2)
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and ("No space left on device" in err[0] or stop == "ctrl-c")
    assert list(tmp_path.iterdir()) == []
    monkeypatch.setattr(os, "fsync", real_fsync)
    assert cli.main(argv) == 0
    assert {"run.json", "profile.json", ".lock"} <= {p.name for p in (runs / "p").iterdir()}


def test_a_full_disk_as_the_ranks_start_is_one_line_and_leaves_no_folder(
    tmp_path, monkeypatch, capsys
):
    """Found by the seventeenth round: the disk filled as the ranks started; logging's handler
    of logs/launcher.log printed `--- Logging error ---` and a 100-line traceback, its close
    raised a nameless `No space left on device` over the ranks' failure, and RUNS/NAME/ stayed.
    One line names the folder, and what the command made goes (launcher.log is /dev/full here:
    every write fails with ENOSPC)."""
    from test_launch import fake_launch

    import executor.launch
    from pipeplan import log

    class FullDisk(log.FileHandler):
        def __init__(self, filename, *args, **kwargs):
            super().__init__(filename, *args, **kwargs)
            self.setStream(open("/dev/full", "a")).close()  # noqa: SIM115 (the handler's)

    monkeypatch.setattr(executor.launch.pipeplan_log, "FileHandler", FullDisk)
    runs = tmp_path / "new" / "runs"
    argv = [*fake_launch(monkeypatch, 1), "--runs-dir", str(runs)]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err == f"pipeplan: error: {runs / 'k'}: write failed (No space left on device)\n"
    assert list(tmp_path.iterdir()) == []


def stopped_launch(monkeypatch, signum: int, records: int) -> list[str]:
    """Have `run_local` start no rank: the start writes what ranks write as they start (a
    rank's log; rank 0's run.jsonl with the first `records` of `elastic_records`, or none
    for -1), then the launcher gets `signum`, as Ctrl-C or a stop to the command raises in
    torch's agent. Returns the argv of a 1-rank run named k."""
    from torch.distributed.elastic.multiprocessing import SignalException

    import executor.launch

    def launch(config, entrypoint):
        def ranks(*args):
            run = Path(args[args.index("--log-dir") - 1])
            (run / "logs" / "rank-0.log").write_text("--- rank 0, pid 1\n")
            if records >= 0:
                lines = [r.model_dump_json() + "\n" for r in elastic_records()[:records]]
                (run / "run.jsonl").write_text("".join(lines))
            raise SignalException("stopped", signum)

        return ranks

    monkeypatch.setattr(executor.launch, "elastic_launch", launch)
    return ["run", "--model", "vit-digits", "--nproc", "1", "--name", "k"]


STOPS = [
    (signal.SIGINT, 130, "pipeplan: interrupted"),
    (signal.SIGTERM, 143, "pipeplan: stopped by SIGTERM"),
]


@pytest.mark.parametrize("signum, code, line", STOPS)
@pytest.mark.parametrize("records", [-1, 0, 1], ids=["no run.jsonl", "empty", "a phase"])
def test_a_run_stopped_before_its_first_step_leaves_no_folder(
    tmp_path, monkeypatch, capsys, signum, code, line, records
):
    """Found by the twenty-sixth round: Ctrl-C or SIGTERM to `pipeplan run` while its ranks
    started left RUNS/NAME (run.json, profile.json, .lock, logs/): its resume said "no
    checkpoint to resume from", a new run of the name "already holds a run". A start that
    recorded no step goes as one that met a full disk does: the files and the folders the
    command made, run.jsonl without a step record included; the name is free again."""
    runs = tmp_path / "new" / "runs"
    argv = [*stopped_launch(monkeypatch, signum, records), "--runs-dir", str(runs)]
    assert cli.main(argv) == code
    assert capsys.readouterr().err == line + "\n"
    assert list(tmp_path.iterdir()) == []
    assert cli.main([*argv, "--prepare-only"]) == 0  # the name is free


@pytest.mark.parametrize("signum, code, line", STOPS)
def test_a_run_stopped_after_a_step_keeps_its_folder(
    tmp_path, monkeypatch, capsys, signum, code, line
):
    """Found by the twenty-sixth round: the other side of the test above. A run that recorded
    a step is the user's to look at (its records, `report`): it stays, whole."""
    (tmp_path / "runs").mkdir()
    argv = [*stopped_launch(monkeypatch, signum, 2), "--runs-dir", str(tmp_path / "runs")]
    assert cli.main(argv) == code
    assert capsys.readouterr().err == line + "\n"
    kept = {p.name for p in (tmp_path / "runs" / "k").iterdir()}
    assert {"run.json", "profile.json", "run.jsonl", "logs"} <= kept


def test_a_run_named_by_a_link_into_a_run_is_refused(tmp_path, capsys):
    """The same hole by `--name`: RUNS/NAME, a link to RUN/checkpoints, is refused (it was
    already: a run directory is a plain folder in --runs-dir)."""
    run = write_run(tmp_path / "n", elastic_records())
    (run / "checkpoints").mkdir()
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "zz3").symlink_to(Path("..") / "n" / "checkpoints")
    argv = ["run", "--model", "vit-digits", "--nproc", "1", "--name", "zz3", "--prepare-only"]
    argv += ["--runs-dir", str(tmp_path / "runs")]
    refused(argv, tmp_path, capsys, "is a symbolic link; a run directory is a plain folder")
    assert list((run / "checkpoints").iterdir()) == []


def test_pruning_removes_only_the_checkpoints_the_run_wrote(tmp_path):
    """Of the `step-N` folders holding a manifest (and no run.json), all but the newest two
    go; a run's folder, a file, a link and a folder named otherwise stay, and so does what
    the link points to."""
    from executor.checkpoint import prune

    root = tmp_path / "checkpoints"
    for n in (2, 4, 6, 8):
        (root / f"step-{n}").mkdir(parents=True)
        (root / f"step-{n}" / "manifest.json").write_text("{}")
    (root / "step-1").mkdir()  # a user's run, checkpoint-like but for its run.json
    (root / "step-1" / "manifest.json").write_text("{}")
    (root / "step-1" / "run.json").write_text("{}")
    (root / "step-3").write_text("a file")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "manifest.json").write_text("{}")
    (root / "step-0").symlink_to(outside)
    (root / "step-x").mkdir()
    (root / "step-x" / "manifest.json").write_text("{}")
    prune(root)
    kept = sorted(p.name for p in root.iterdir())
    assert kept == ["step-0", "step-1", "step-3", "step-6", "step-8", "step-x"]
    assert (outside / "manifest.json").exists()


# ----------------------------------------------------------------------------- records


def _synthetic(tmp_path: Path, **config) -> Path:
    return write_run(tmp_path / "run", elastic_records(), **config)


PROFILE = shipped_profile("vit-digits", "cpu")


def _readable(tmp_path: Path, command: str) -> tuple[Path, list[str]]:
    """Records `command` reads whole (report: two phases on 2 ranks; calibrate: four phases
    on 2 ranks with enough steady steps to fit), and its argv."""
    if command == "report":
        run = _synthetic(tmp_path)
        return run, ["report", str(run)]
    from test_calibrate import write_run as write_fit_run

    run = tmp_path / "fit"
    write_fit_run(run, load(Profile, PROFILE))
    return run, ["calibrate", str(run), "--profile", str(PROFILE), "--out", str(tmp_path / "c")]


def _lines(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "run.jsonl").read_text().splitlines()]


def _rewrite(run: Path, lines: list[dict]) -> None:
    (run / "run.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))


def _steps(lines: list[dict]) -> list[dict]:
    return [line for line in lines if line["kind"] == "step"]


def _nproc_1(run: Path) -> str:
    doc = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(json.dumps({**doc, "nproc": 1}))
    return "run.json says nproc 1"


def _no_ranks(run: Path) -> str:
    lines = _lines(run)
    _steps(lines)[3]["ranks"] = []
    _rewrite(run, lines)
    return "step 3 lists ranks [], but phase 0 runs on 2"


def _a_rank_twice(run: Path) -> str:
    lines = _lines(run)
    step = _steps(lines)[3]
    step["ranks"] = [step["ranks"][0], step["ranks"][0]]
    _rewrite(run, lines)
    return "step 3 lists ranks [0, 0]"


def _a_step_of_an_earlier_phase(run: Path) -> str:
    lines = _lines(run)
    late = {**_steps(lines)[0], "step": max(s["step"] for s in _steps(lines)) + 1}
    _rewrite(run, [*lines, late])
    return "is in phase 0, but phase"


def _another_global_batch(run: Path) -> str:
    lines = _lines(run)
    phase = [line for line in lines if line["kind"] == "phase"][-1]
    phase["layout"]["micro_batch_size"] *= 2
    _rewrite(run, lines)
    return "per step, but run.json says global_batch"


RECORDS = [_nproc_1, _no_ranks, _a_rank_twice, _a_step_of_an_earlier_phase, _another_global_batch]


@pytest.mark.parametrize("command", ["report", "calibrate"])
@pytest.mark.parametrize("damage", RECORDS, ids=lambda f: f.__name__.strip("_"))
def test_records_that_contradict_their_run_or_world(tmp_path, capsys, damage, command):
    """Records that read well line by line but not with run.json or with each other: a
    world of 2 ranks in a run of nproc 1, a step listing no rank or one rank twice, a step
    of phase 0 after a later phase started, a phase training another global batch."""
    run, argv = _readable(tmp_path, command)
    fragment = damage(run)
    refused(argv, tmp_path, capsys, ("run.jsonl", fragment))


def _phases(lines: list[dict]) -> list[dict]:
    return [line for line in lines if line["kind"] == "phase"]


def _last_phase_on_2_nodes(run: Path) -> str:
    """The repro's edit, on the last phase: a local 2-rank run's phase priced on 2 nodes x 1."""
    lines = _lines(run)
    phase = _phases(lines)[-1]
    phase["pricing"]["cluster"].update(nodes=2, devices_per_node=1)
    _rewrite(run, lines)
    return f"phase {phase['phase']}: pricing.cluster.nodes 2, but phase 0 (RUN:1) has 1"


def _memory_of_1_mb(run: Path) -> str:
    """Every phase's device memory 1000000 bytes, less than any layout of the model needs."""
    lines = _lines(run)
    for phase in _phases(lines):
        phase["pricing"]["cluster"]["device_memory_bytes"] = 1000000
    _rewrite(run, lines)
    return "phase 0: pricing.cluster.device_memory_bytes 1000000 is less than its layout"


@pytest.mark.parametrize("command", ["report", "calibrate"])
@pytest.mark.parametrize("damage", [_last_phase_on_2_nodes, _memory_of_1_mb])
def test_a_phase_priced_on_a_cluster_its_run_never_built_is_refused(
    tmp_path, capsys, damage, command
):
    """Found by the fortieth round: run.jsonl's pricing.cluster was held to nothing, so a
    local 2-rank run's phases edited to 2 nodes x 1 device, or to 1000000 bytes of device
    memory, changed calibrate's fit and report's previewed speedup (exit 0). A run prices
    every phase and forecast of an attempt on one cluster (`check_one_cluster`), and a
    phase's layout fits its memory (`_check_cluster`); calibrate writes no --out."""
    run, argv = _readable(tmp_path, command)
    fragment = damage(run).replace("RUN", str(run / "run.jsonl"))
    refused(argv, tmp_path, capsys, ("run.jsonl", fragment))
    assert not (tmp_path / "c").exists()


def _links_edited_alike(run: Path, field: str, key: str, value) -> None:
    """Every phase's and forecast's pricing.cluster `field` (a link: its `key`) set to `value`:
    the records agree with each other (`check_one_cluster`)."""
    lines = _lines(run)
    for line in lines:
        for pricing in (line.get("pricing"), (line.get("forecast") or {}).get("pricing")):
            if pricing:
                cluster = pricing["cluster"]
                if key:
                    cluster[field] = {**(cluster[field] or {"latency_s": 1e-5}), key: value}
                else:
                    cluster[field] = value
    _rewrite(run, lines)


@pytest.mark.parametrize("command", ["report", "calibrate"])
@pytest.mark.parametrize(
    "field, key, value",
    [
        ("intra_node", "bandwidth_bytes_per_s", 3.0e6),
        ("intra_node_allreduce", "bandwidth_bytes_per_s", 3.0e6),
        ("inter_node", "latency_s", 1.0),
        ("host_to_device_bandwidth_bytes_per_s", "", 3.0e6),
        ("disk_bandwidth_bytes_per_s", "", 3.0e6),
    ],
    ids=lambda v: str(v),
)
def test_a_phases_links_edited_alike_are_held_to_its_profile(
    tmp_path, capsys, command, field, key, value
):
    """Found by the forty-second round: every record's pricing.cluster.intra_node bandwidth
    edited alike (3e6 B/s) passed `check_one_cluster`, which holds the records only to each
    other, and changed calibrate's fitted step overhead from 77.79 ms to 0.00 ms, exit 0. A
    run without a plan prices on the in-node links its profile measured and pipeplan's
    defaults for the rest (`costmodel.check_priced_links`): any other is refused in one line
    naming run.jsonl and the field; calibrate writes no --out."""
    run, argv = _readable(tmp_path, command)
    _links_edited_alike(run, field, key, value)
    dotted = f"{field}.{key}" if key else field
    fragment = f"run.jsonl: phase 0: pricing.cluster.{dotted} {json.dumps(value)} is not the run's "
    refused(argv, tmp_path, capsys, ("run.jsonl", fragment))
    assert not (tmp_path / "c").exists()


# The bandwidth between nodes the plan of `_planned` gives, other than pipeplan's default (a
# run without a plan prices on that): a run of a plan prices on the plan's links.
PLANNED_INTER_BW = 5.0e9


def _planned(run: Path, tmp_path: Path) -> None:
    """`run` (hand-made records of a run on 2 ranks) made a run of a plan, as `pipeplan run
    --plan` leaves one: run.json names the plan and the sha256 of the run's copy of it
    (run.plan.json), and every phase was priced from the plan ("plan") on its cluster, whose
    link between nodes is PLANNED_INTER_BW (`--inter-bw`), not pipeplan's default."""
    from pipeplan.formats.base import text_sha256

    plan = tmp_path / "plan.json"
    argv = ["plan", "--profile", str(PROFILE), "--devices-per-node", "2", "--global-batch"]
    argv += ["64", "--samples", "1438", "--epochs", "2", "--inter-bw", "5GB/s"]
    assert cli.main([*argv, "--out", str(plan)]) == 0
    text = plan.read_text()
    (run / "run.plan.json").write_text(text)
    cluster = json.loads(text)["inputs"]["cluster"]
    assert cluster["inter_node"]["bandwidth_bytes_per_s"] == PLANNED_INTER_BW
    lines = _lines(run)
    for n, line in enumerate(lines):
        for pricing in (line.get("pricing"), (line.get("forecast") or {}).get("pricing")):
            if pricing:
                pricing["cluster"] = cluster
        if line["kind"] == "phase":
            line["pricing"]["source"] = "plan"
            # Predicting what the plan's profile prices its layout to on the plan's cluster,
            # whatever the run had refitted by then, as a run of a plan records it.
            record = priced(PhaseRecord.model_validate(line), load(Profile, PROFILE))
            lines[n] = record.model_dump(mode="json")
    _rewrite(run, lines)
    doc = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(
        json.dumps({**doc, "plan": str(plan), "plan_sha256": text_sha256(text)})
    )


@pytest.mark.parametrize("command", ["report", "calibrate"])
@pytest.mark.parametrize(
    "field, key, value",
    [
        ("intra_node_allreduce", "bandwidth_bytes_per_s", 3.0e6),
        # pipeplan's default, which a run without a plan prices on.
        ("inter_node", "bandwidth_bytes_per_s", 3.125e9),
        ("disk_bandwidth_bytes_per_s", "", 3.0e6),
    ],
    ids=lambda v: str(v),
)
def test_a_plan_runs_links_edited_alike_are_held_to_its_plan(
    tmp_path, capsys, command, field, key, value
):
    """Found by the forty-third round: in a run of `--plan`, every record's pricing.cluster
    links edited alike (intra_node_allreduce 3e6 B/s) were held to nothing
    (`check_priced_links` holds a run without a plan only), and calibrate fitted a step
    overhead of 0.00 ms instead of 21.62 ms, exit 0; report and export read it. A run of a
    plan prices every phase and forecast on its copy of the plan's cluster (run.plan.json,
    whose sha256 run.json records): any other link is refused in one line naming run.jsonl,
    the phase and the field (`costmodel.check_planned_links`); calibrate writes no --out. As
    written, the run reads, its link between nodes the plan's and not pipeplan's default."""
    run, argv = _readable(tmp_path, command)
    _planned(run, tmp_path)
    assert cli.main(argv) == 0, capsys.readouterr().err
    capsys.readouterr()
    shutil.rmtree(tmp_path / "c", ignore_errors=True)
    (tmp_path / "c").unlink(missing_ok=True)
    _links_edited_alike(run, field, key, value)
    dotted = f"{field}.{key}" if key else field
    fragment = f"run.jsonl: phase 0: pricing.cluster.{dotted} {json.dumps(value)} is not the run's "
    refused(argv, tmp_path, capsys, ("run.jsonl", fragment, "run.plan.json"))
    assert not (tmp_path / "c").exists()


@pytest.mark.parametrize("command", ["report", "calibrate"])
def test_a_plan_run_without_its_copy_of_the_plan_is_refused_by_report_and_calibrate(
    tmp_path, capsys, command
):
    """Found by the forty-third round: with the fix above, the run's copy of its plan deleted
    would leave nothing to hold the links to, and report and calibrate read such a run (exit
    0); they refuse it in resume's words (`formats.read_plan_copy`)."""
    run, argv = _readable(tmp_path, command)
    _planned(run, tmp_path)
    capsys.readouterr()  # what making the plan printed
    (run / "run.plan.json").unlink()
    refused(argv, tmp_path, capsys, (f"{run / 'run.plan.json'}: no such file", "is gone"))
    assert not (tmp_path / "c").exists()


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    "command",
    # resume in `-m long`, for the suite's time: it reads the records through the same
    # `check_priced_clusters` that export's case and test_a_phases_links_edited_alike… hold.
    ["export", pytest.param("resume", marks=pytest.mark.long)],
)
def test_a_real_runs_links_edited_alike_are_refused_by_export_and_resume(
    finished_run, tmp_path, capsys, command
):
    """Found by the forty-second round (above), on a run as pipeplan wrote it: the tester's
    edit, every record's intra_node bandwidth set to 3e6 B/s, is refused by export and
    resume too (export held no record's cluster before), in one line naming run.jsonl."""
    run = copy_run(finished_run, tmp_path)
    _links_edited_alike(run, "intra_node", "bandwidth_bytes_per_s", 3.0e6)
    argv = ["export", str(run), "--out", str(tmp_path / "out")]
    if command == "resume":
        argv = ["run", "--resume", str(run), "--epochs", "2"]
    fragment = "run.jsonl: phase 0: pricing.cluster.intra_node.bandwidth_bytes_per_s 3000000.0"
    refused(argv, tmp_path, capsys, fragment)
    assert not (tmp_path / "out").exists()


GIVEN = {"device_memory_bytes": 1 << 30}  # run.json's --device-memory: the fake cluster's


@pytest.mark.parametrize(
    "config, field, value, fragment",
    [
        (GIVEN, "device_memory_bytes", 1 << 29, "536870912 is not the run's 1073741824"),
        (GIVEN, "cache_budget_bytes", 1 << 20, "1048576 is not the run's 1073741824"),
        ({}, "device_memory_bytes", 1 << 45, "35184372088832 is more than the run gives"),
    ],
    ids=["not run.json's --device-memory", "not run.json's --cache-budget", "over the share"],
)
def test_a_phases_cluster_is_held_to_run_json(tmp_path, capsys, config, field, value, fragment):
    """Found by the fortieth round (the class of F4): every phase's cluster edited alike, so
    that the records agree with each other, is still held to what run.json and the profile
    say the run built: its --device-memory (else no more than the profiled device's share
    among a node's ranks) and its --cache-budget."""
    run = _synthetic(tmp_path, **config)
    assert cli.main(["report", str(run)]) == 0  # as written, it reads
    capsys.readouterr()
    lines = _lines(run)
    for phase in _phases(lines):
        phase["pricing"]["cluster"][field] = value
    _rewrite(run, lines)
    where = f"run.jsonl: phase 0: pricing.cluster.{field} {fragment}"
    refused(["report", str(run)], tmp_path, capsys, where)


def test_report_refuses_a_run_json_of_another_model_than_its_profile(tmp_path, capsys):
    """run.json's model edited to bert-synth: the records priced with the run's vit-digits
    profile were reported as bert-synth's (calibrate refused it against --profile)."""
    run = _synthetic(tmp_path)
    shutil.copy(shipped_profile("vit-digits", "cpu"), run / "profile.json")
    doc = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(json.dumps({**doc, "model": "bert-synth"}))
    fragment = "is a run of 'bert-synth' but its calibration-2.json profiles 'vit-digits'; "
    refused(["report", str(run)], tmp_path, capsys, fragment)


@pytest.mark.timeout(60)
def test_a_run_and_a_profile_of_other_models_is_one_sentence(tmp_path, capsys):
    """Found by the thirty-fourth round: `calibrate RUN --profile OTHER` said "RUN: a run of
    'bert-synth', but the profile is of 'vit-digits', which profiles 'vit-digits', not the
    model 'bert-synth'": two messages composed, each naming both models. It is one sentence
    now, naming the profile as given and what to give instead: --profile to calibrate (the
    run's own profile.json), the run's own profile to report and to export or resume
    (`check_run_model`: run.json or the profile was edited)."""
    from test_calibrate import write_run as write_fit_run

    from executor.planning import check_run_model

    run = tmp_path / "fit"
    write_fit_run(run, load(Profile, PROFILE))
    other = shipped_profile("bert-synth", "cpu")
    argv = ["calibrate", str(run), "--profile", str(other), "--out", str(tmp_path / "c.json")]
    line = (
        f"pipeplan: error: {run} is a run of 'vit-digits' but --profile profiles 'bert-synth'; "
        f"give the run's profile ({run / 'profile.json'})"
    )
    refused(argv, tmp_path, capsys, line)
    assert capsys.readouterr().err == ""
    # The run's own profile of another model: run.json's model edited.
    doc = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(json.dumps({**doc, "model": "bert-synth"}))
    config = load(RunConfig, run / "run.json")
    with pytest.raises(InputFileError) as caught:
        check_run_model(run, config)
    assert str(caught.value) == (
        f"{run} is a run of 'bert-synth' but its profile.json profiles 'vit-digits'; run.json's "
        "model or the profile was edited after the run was prepared"
    )


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
@pytest.mark.parametrize("damage", ["no ranks", "a rank twice", "another batch"])
def test_resume_refuses_records_with_a_wrong_world(finished_run, tmp_path, capsys, damage):
    """The same records check on --resume, before any rank starts."""
    run = copy_run(finished_run, tmp_path)
    if damage == "another batch":
        fragment = _another_global_batch(run)
    else:
        lines = _lines(run)
        step = _steps(lines)[1]
        step["ranks"] = [] if damage == "no ranks" else [*step["ranks"], *step["ranks"]]
        _rewrite(run, lines)
        fragment = "step 1 lists ranks"
    refused(["run", "--resume", str(run), "--epochs", "2"], tmp_path, capsys, fragment)


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_resume_refuses_a_steps_rate_that_contradicts_its_time(finished_run, tmp_path, capsys):
    """Found by the sixteenth round: samples_per_s 1e300 beside its step's time was read by
    report and calibrate; --resume, which reads the same records, refuses it too (and a real
    run's records, written by the executor, pass: the other resume tests)."""
    run = copy_run(finished_run, tmp_path)
    lines = _lines(run)
    _step_rate_unlike_its_time(lines)
    _rewrite(run, lines)
    argv = ["run", "--resume", str(run), "--epochs", "2"]
    refused(argv, tmp_path, capsys, ("run.jsonl", "samples_per_s 1e+300"))


# ----------------------------------------------------------------------------- torn appends


def _tear(run: Path) -> None:
    """What a crash during an append leaves: the last line cut 37 bytes short, no newline."""
    text = (run / "run.jsonl").read_bytes()
    (run / "run.jsonl").write_bytes(text[:-37])


def _notices(err: str) -> list[str]:
    return [line for line in err.splitlines() if "torn last record" in line]


@pytest.mark.parametrize("command", ["report", "calibrate"])
def test_a_torn_last_record_is_left_out_but_a_whole_bad_line_is_refused(tmp_path, capsys, command):
    """Report and calibrate read the records before the torn one, with one notice; the same
    cut line ending in a newline was written whole, and is refused as before."""
    run, argv = _readable(tmp_path, command)
    _tear(run)
    number = len((run / "run.jsonl").read_text().splitlines())
    assert cli.main(argv) == 0
    notices = _notices(capsys.readouterr().err)
    assert len(notices) == 1 and f"run.jsonl:{number}" in notices[0], notices
    (tmp_path / "c").unlink(missing_ok=True)
    with open(run / "run.jsonl", "a") as handle:
        handle.write("\n")
    refused(argv, tmp_path, capsys, (f"run.jsonl:{number}", "not a run record"))


def test_a_torn_record_of_a_run_made_again_at_its_path_is_noticed_again(tmp_path, capsys):
    """Found by CI (pytest reuses a passing test's tmp_path): the notice was said once a
    process by path and length, so a second run made at the same path and torn the same was
    read without it. Another file at the path is noticed again; the same file once."""
    import shutil

    said = []
    for _ in range(2):
        shutil.rmtree(tmp_path / "s", ignore_errors=True)
        (tmp_path / "s").mkdir()
        run, argv = _readable(tmp_path / "s", "report")
        _tear(run)
        assert cli.main(argv) == 0
        said.append(len(_notices(capsys.readouterr().err)))
    assert cli.main(argv) == 0  # the same file read again by the process
    said.append(len(_notices(capsys.readouterr().err)))
    assert said == [1, 1, 0]


# An empty line in run.jsonl (which pipeplan never writes): (its line number, counted from 1,
# -1 for after the last record; its text).
EMPTY_LINES = {
    "inside": (3, "\n"),
    "of spaces inside": (2, "  \t\n"),
    "at the end": (-1, "\n"),
    "of spaces at the end, no newline": (-1, "   "),
}


@pytest.mark.parametrize("where", EMPTY_LINES, ids=str)
@pytest.mark.parametrize("command", ["report", "calibrate"])
def test_an_empty_line_in_run_jsonl_is_refused_naming_it(tmp_path, capsys, command, where):
    """Found by the twenty-fifth round: an empty line in the middle of run.jsonl, which
    pipeplan never writes, was accepted by resume and report without a word, while a torn
    last line is named. Every empty line (or one of spaces) is refused in one line naming
    run.jsonl and its number, as other record problems are (resume reads the records with
    the same `read_records`); a torn last line keeps its notice (the test above)."""
    run, argv = _readable(tmp_path, command)
    lines = (run / "run.jsonl").read_text().splitlines(keepends=True)
    number, empty = EMPTY_LINES[where]
    number = number if number > 0 else len(lines) + 1
    lines.insert(number - 1, empty)
    (run / "run.jsonl").write_text("".join(lines))
    said = f"{run / 'run.jsonl'}:{number}: an empty line; pipeplan writes a record on every line"
    refused(argv, tmp_path, capsys, said)


@pytest.mark.timeout(120)
def test_records_repeated_a_million_times_are_refused_at_the_first_repeat(tmp_path):
    """Found by the nineteenth round's lead: run.jsonl was read whole and every record built
    before their order was checked, so 200 MB of one step record repeated took 1.6 GB and
    40 s to refuse (a 1 GiB file, the limit, about 8 GB). The records are read one line at a
    time and their order checked as they come: the same file is refused at the first
    repeat, under a 2 GiB address-space cap, in seconds."""
    from test_hostile_files import _capped, state

    run = _synthetic(tmp_path)
    lines = (run / "run.jsonl").read_text().splitlines(keepends=True)
    first_step = next(n for n, line in enumerate(lines) if json.loads(line)["kind"] == "step")
    step = lines[first_step]
    with open(run / "run.jsonl", "w") as handle:
        handle.writelines(lines[: first_step + 1])
        handle.writelines([step] * ((200 << 20) // len(step)))
    before = state(tmp_path)
    code, err, seconds = _capped(["report", str(run)])
    assert code == 2, (code, err[-3:])
    assert len(err) == 1 and f"run.jsonl:{first_step + 2}: step " in err[0], err
    assert "records come once each, in order" in err[0]
    assert seconds < 30, seconds
    assert state(tmp_path) == before


# What `report` and `calibrate` may hold beyond a tiny run's peak, as a fraction of run.jsonl's
# size (docs/architecture.md §3.1, what reading run.jsonl holds; 5 to 8 before the forty-second
# round's F12).
RECORDS_MEMORY = 1.0


def _peak_rss(commands: dict[str, list[str]], tmp_path: Path) -> dict[str, int]:
    """Each `cli.main(argv)` in a child, all at once: its peak resident memory in bytes (VmHWM,
    its own: a forked child's ru_maxrss starts at its parent's). Each must succeed."""
    import subprocess
    import sys

    code = (
        "import re, sys, cli; code = cli.main(sys.argv[2:]); status = open('/proc/self/status')"
        ".read(); open(sys.argv[1], 'w').write(re.search(r'VmHWM:\\s*(\\d+) kB', status)[1]); "
        "sys.exit(code)"
    )
    out = {name: tmp_path / f"{name}.peak" for name in commands}
    children = {
        name: subprocess.Popen(
            [sys.executable, "-c", code, str(out[name]), *argv],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name, argv in commands.items()
    }
    for name, child in children.items():
        _, err = child.communicate(timeout=60)
        assert child.returncode == 0, (name, err[-2000:])
    return {name: int(path.read_text()) << 10 for name, path in out.items()}


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads Linux's VmHWM")
def test_a_large_valid_run_is_read_in_less_memory_than_its_file(tmp_path):
    """Found by the forty-second round: `report` and `calibrate` of a large but valid
    run.jsonl (890,000 steps on 2 ranks, 695 MB, under the 1 GiB cap) took 108 s and 4.1 GB:
    every step was held as a StepRecord with its RankTimes, 6 times the file. Steps are now
    held as StepRows, checked as StepRecords line by line. Each command's peak over a tiny
    run's of the same phases stays under RECORDS_MEMORY (1) times the file's size. Observed
    (2026-12-04, 9.0 MB of 16,000 steps): report +6.9 MB (0.76), calibrate +6.0 MB (0.66);
    before, +70 MB (7.8) and +72 MB (8.0). About 10 s."""
    from test_calibrate import write_run as write_fit_run

    profile = load(Profile, PROFILE)
    write_fit_run(tmp_path / "tiny", profile, 8, step_jitter=0.0)
    write_fit_run(tmp_path / "big", profile, 3000, step_jitter=0.0)
    size = (tmp_path / "big" / "run.jsonl").stat().st_size
    assert size > 6 << 20, size
    commands = {}
    for run in ("tiny", "big"):
        commands[f"report {run}"] = ["report", str(tmp_path / run)]
        out = ["--profile", str(PROFILE), "--out", str(tmp_path / f"{run}.json")]
        commands[f"calibrate {run}"] = ["calibrate", str(tmp_path / run), *out]
    peaks = _peak_rss(commands, tmp_path)
    for command in ("report", "calibrate"):
        grown = peaks[f"{command} big"] - peaks[f"{command} tiny"]
        assert grown < RECORDS_MEMORY * size, (command, grown / size, peaks, size)


def test_steps_read_back_are_the_step_records_written(tmp_path):
    """Found by the forty-second round (F12): steps are held as StepRows, their ranks' times
    packed. Each is the StepRecord written, field for field and dumped (a resume rewrites the
    records it keeps from them), its ranks a peak memory of 2**40 + 7 included."""
    from pipeplan.formats import STEP_RECORDS, StepRecord, StepRow, read_records

    written = elastic_records()
    big = written[1].ranks[0].model_copy(update={"peak_memory_bytes": (1 << 40) + 7})
    written[1] = written[1].model_copy(update={"ranks": [big, *written[1].ranks[1:]]})
    run = write_run(tmp_path / "run", written)
    read = read_records(run / "run.jsonl")
    assert [type(r) for r in read] == [
        StepRow if isinstance(r, StepRecord) else type(r) for r in written
    ]
    for before, after in zip(written, read, strict=True):
        assert after == before
        if isinstance(after, STEP_RECORDS):
            assert after.record() == before and after.model_dump_json() == before.model_dump_json()
            assert [r.record() for r in after.ranks] == before.ranks
    assert read[1].ranks[0].peak_memory_bytes == (1 << 40) + 7


@pytest.mark.parametrize("refusal", ["--baseline", "--plot"])
def test_a_torn_record_notice_never_precedes_a_refusal(tmp_path, capsys, refusal):
    """report printed a torn last record's notice before refusing something else (a baseline
    that is not there, a plot target in a checkpoint): two lines."""
    run, argv = _readable(tmp_path, "report")
    _tear(run)
    (run / ".lock").touch()
    if refusal == "--baseline":
        argv, fragment = [*argv, "--baseline", str(tmp_path / "nope")], "no such run directory"
    else:
        argv, fragment = [*argv, "--plot", str(run / "checkpoints" / "p")], "`pipeplan run` keeps"
    refused(argv, tmp_path, capsys, fragment)


def _torn_resumed_phase(run: Path) -> None:
    """What a resume killed as it appended its phase record leaves after the final
    checkpoint: half the record, no newline. (The last epoch's record itself precedes the
    checkpoint: no crash tears it, and a resume refuses records without it.)"""
    lines = _lines(run)
    phase = {**lines[0], "phase": 1, "start_step": 2, "start_epoch": 1, "resumed": True}
    text = json.dumps(phase)
    with open(run / "run.jsonl", "a") as handle:
        handle.write(text[: len(text) // 2])


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_resume_continues_past_a_torn_last_record(finished_run, tmp_path, capsys):
    """`--resume` said "not valid JSON" and could never continue the run; now it drops the
    torn record (with one notice) and trains the next epoch, its records whole lines. The
    eighteenth round: the torn record is one a crash can tear, after the checkpoint."""
    from pipeplan.formats import STEP_RECORDS, EpochRecord, read_records

    run = copy_run(finished_run, tmp_path)
    _torn_resumed_phase(run)
    assert cli.main(["run", "--resume", str(run), "--epochs", "2"]) == 0
    assert len(_notices(capsys.readouterr().err)) == 1
    text = (run / "run.jsonl").read_text()
    assert text.endswith("\n")
    records = read_records(run / "run.jsonl")
    assert [r.step for r in records if isinstance(r, STEP_RECORDS)] == [0, 1, 2, 3]
    assert [r.epoch for r in records if isinstance(r, EpochRecord)] == [0, 1]


# ----------------------------------------------------------------------------- the lock


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
@pytest.mark.parametrize("target", ["dangling", "a file"])
def test_a_lock_that_is_a_symbolic_link_is_refused(finished_run, tmp_path, capsys, target):
    """A `.lock` link was followed on resume: it created (or locked) a file outside the run."""
    run = copy_run(finished_run, tmp_path / "in")
    outside = tmp_path / "outside"
    outside.mkdir()
    if target == "a file":
        (outside / "lockfile").write_text("")
    (run / ".lock").unlink()
    (run / ".lock").symlink_to(outside / "lockfile")
    argv = ["run", "--resume", str(run), "--epochs", "2"]
    refused(argv, tmp_path, capsys, (f"{run / '.lock'}: is a symbolic link"))
    assert (outside / "lockfile").exists() == (target == "a file")


# ----------------------------------------------------------------- nineteenth round: run writes

# What a run writes in place inside its directory (`launch.RUN_WRITES_FILES`), one name per
# pattern, and the folders it writes into (`RUN_WRITES_FOLDERS`).
RUN_FILES = [
    "run.json",
    "run.jsonl",
    "run.resume.json",
    "metrics.csv",
    "summary.json",
    "calibration-2.json",
    "logs/launcher.log",
    "logs/interrupted",
    "logs/rank-0.log",
    "logs/rank-3.log",
    "logs/rank-1.error.json",
    "logs/rank-1.error.json.tmp",
    "checkpoints/latest",
]
RUN_FOLDERS = [
    "logs",
    "checkpoints",
    "model",
    "cache",
    ".tmp-model-77",
    "checkpoints/step-4",
    "checkpoints/.tmp-step-4",
]


def _plant(path: Path, kind: str, outside: Path) -> str:
    """Put a hostile `kind` of entry at `path`; returns what the refusal says of it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "a link to a file outside":
        path.symlink_to(outside / "victim.txt")
        return "is a symbolic link"
    if kind == "a link to a folder outside":
        path.symlink_to(outside, target_is_directory=True)
        return "is a symbolic link"
    if kind == "a dangling link":
        path.symlink_to(outside / "nothing-here")
        return "is a symbolic link"
    if kind == "a FIFO":
        os.mkfifo(path)
        return "(a FIFO)"
    if kind == "a folder":
        path.mkdir()
        return "is a directory, not a file"
    path.write_text("a file\n")  # "a file", where a folder belongs
    return "not a folder (a regular file)"


def _tree(root: Path) -> dict[str, str]:
    """Every entry under `root`, links and FIFOs included, with what a file holds."""
    entries = {}
    for path in sorted(root.rglob("*")):
        what = "link" if path.is_symlink() else "dir" if path.is_dir() else "other"
        if what == "other" and path.is_file():
            what = path.read_text()
        entries[str(path.relative_to(root))] = what
    return entries


def _run_outside(tmp_path: Path) -> tuple[Path, Path]:
    """A run directory (its folders plain) and a folder outside it holding victim.txt."""
    run, outside = tmp_path / "run", tmp_path / "outside"
    for folder in (run / "logs", run / "checkpoints", outside):
        folder.mkdir(parents=True)
    (outside / "victim.txt").write_text("someone else's\n")
    return run, outside


FILE_KINDS = ["a link to a file outside", "a dangling link", "a FIFO", "a folder"]
FOLDER_KINDS = ["a link to a folder outside", "a dangling link", "a FIFO", "a file"]


@pytest.mark.parametrize(
    "name, kind",
    [(n, k) for n in RUN_FILES for k in FILE_KINDS]
    + [(n, k) for n in RUN_FOLDERS for k in FOLDER_KINDS],
)
def test_what_a_run_writes_in_its_directory_is_checked_before_any_rank(tmp_path, name, kind):
    """Found by the nineteenth round: a resume appended its ranks' output through a link at
    logs/rank-R.log (outside the run), hung on a FIFO there or at logs/launcher.log, and
    printed a rank's traceback for a folder there. Every file and folder a run writes in its
    directory is checked first (`check_outputs`): one line naming it, nothing written."""
    from executor.launch import check_outputs
    from pipeplan.errors import OutputError

    run, outside = _run_outside(tmp_path)
    path = run / name
    if path.is_dir():  # logs/, checkpoints/: replaced
        path.rmdir()
    said = _plant(path, kind, outside)
    before = _tree(tmp_path)
    with pytest.raises(OutputError) as refusal:
        check_outputs(run)
    assert str(refusal.value).startswith(f"{path}: "), refusal.value
    assert said in str(refusal.value) and "the run writes" in str(refusal.value)
    assert _tree(tmp_path) == before


# The files a run writes at its top that its readers read (`fileio.RUN_OWN_FILES`, and one
# calibration-N.json). The twenty-sixth round found the copies `prepare` writes once
# (profile.json, run.plan.json, data.json) read and trained through as links.
OWN_FILES = ["run.json", "run.jsonl", "run.resume.json", "summary.json", "metrics.csv"]
OWN_FILES += ["profile.json", "run.plan.json", "data.json", "calibration-2.json"]


@pytest.mark.parametrize("target", ["a file of text", "a copy of the file"])
@pytest.mark.parametrize("name", OWN_FILES)
def test_a_runs_own_file_that_is_a_link_is_refused_before_it_is_read(tmp_path, name, target):
    """Found by the twenty-fourth round: run.jsonl (or run.json) linked to a file of text was
    read through the link and called "not valid JSON"; linked to a valid copy, resume called
    it a link and report read it. Every command given a run (`check_run_directory`) refuses
    a link at a file the run writes first, whatever it points at, in resume's words."""
    from pipeplan.errors import InputFileError
    from pipeplan.fileio import check_run_directory

    run, outside = _run_outside(tmp_path)
    for own in ("run.json", "run.jsonl"):
        (run / own).write_text("{}\n")
    path = run / name
    victim = outside / "victim.txt"
    if target == "a copy of the file":
        victim.write_text("{}\n")
    path.unlink(missing_ok=True)
    path.symlink_to(victim)
    before = _tree(tmp_path)
    with pytest.raises(InputFileError) as refusal:
        check_run_directory(run)
    said = f"{path}: is a symbolic link, not a file of its own; the run writes this file"
    assert str(refusal.value) == said
    assert _tree(tmp_path) == before


@pytest.mark.timeout(30)
@pytest.mark.parametrize("kind", ["a FIFO", "a directory"])
@pytest.mark.parametrize("name", OWN_FILES)
def test_a_runs_own_file_that_is_a_folder_or_a_fifo_is_refused_unopened(tmp_path, name, kind):
    """Found by the thirty-sixth round: summary.json (or run.plan.json) a directory or a FIFO
    was taken by report and export as no summary (`runfiles.check_summary` skipped what is
    not a file), while a link there was refused and a resume refused the directory. Every
    command given a run (`check_run_directory`, `check_own_files`) refuses any entry but a
    regular file at a file the run writes, from its entry alone (a FIFO is never opened:
    its reader would block), in one line naming it and what it is."""
    from pipeplan.fileio import check_run_directory

    run, _ = _run_outside(tmp_path)
    for own in ("run.json", "run.jsonl"):
        (run / own).write_text("{}\n")
    path = run / name
    _replace_with(path, kind)
    before = _tree(tmp_path)
    with pytest.raises(InputFileError) as refusal:
        check_run_directory(run)
    assert str(refusal.value) == f"{path}: not a regular file ({kind}); the run writes this file"
    assert _tree(tmp_path) == before


def _replace_with(path: Path, kind: str) -> None:
    """`path` made "a FIFO" or "a directory" (whatever it was before is gone)."""
    path.unlink(missing_ok=True)
    if kind == "a FIFO":
        os.mkfifo(path)
    else:
        path.mkdir()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["a FIFO", "a directory"])
@pytest.mark.parametrize("name", ["summary.json", "run.plan.json"])
@pytest.mark.parametrize("command", ["report", "export"])
def test_report_and_export_refuse_a_summary_or_plan_that_is_no_file(
    finished_run, tmp_path, capsys, command, name, kind
):
    """Found by the thirty-sixth round: `report RUN` and `export RUN --out E` of a run whose
    summary.json (or run.plan.json) was a directory or a FIFO ended 0 without a word, as if
    the run had none (export wrote E). Both refuse it in one line naming the file and what it
    is, as they refuse a link there; nothing is written."""
    run = copy_run(finished_run, tmp_path)
    path = run / name
    _replace_with(path, kind)
    out = tmp_path / "e"
    argv = ["report", str(run)] if command == "report" else ["export", str(run), "--out", str(out)]
    said = f"{path}: not a regular file ({kind}); the run writes this file"
    refused(argv, tmp_path, capsys, said)
    assert not out.exists()


def test_every_file_a_run_keeps_at_its_top_is_refused_as_a_link():
    """Found by the twenty-sixth round (as above): the ownership rule covered some of the
    run's files only. Every file name among what a run keeps at its top (`RUN_ENTRIES`; its
    folders and the lock, which has its own check, aside) is one `check_own_files` holds, and
    so are the copies `prepare` writes, by the names the executor writes them under."""
    from executor.planning import RUN_PLAN, RUN_PROFILE
    from executor.task import DATA_RECORD
    from pipeplan.fileio import RUN_ENTRIES, RUN_OWN_FILES

    folders = {"checkpoints", "model", "cache", "logs", ".lock"}
    assert RUN_ENTRIES - folders == set(RUN_OWN_FILES)
    assert {RUN_PLAN, RUN_PROFILE, DATA_RECORD} <= set(RUN_OWN_FILES)


def test_a_runs_own_plain_files_and_folders_pass_the_check(tmp_path):
    """The check refuses only what is not a plain file or folder: every name in it, as a run
    leaves it, passes (`check_outputs`)."""
    from executor.launch import check_outputs

    run, _ = _run_outside(tmp_path)
    for name in RUN_FOLDERS:
        (run / name).mkdir(exist_ok=True)
    for name in RUN_FILES:
        (run / name).write_text("")
    check_outputs(run)


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    "name, kind",
    [
        ("rank-0.log", "a link to a file outside"),
        ("rank-0.log", "a FIFO"),
        ("launcher.log", "a FIFO"),
        ("rank-0.log", "a folder"),
    ],
)
def test_a_resume_refuses_a_log_that_is_not_a_plain_file(
    finished_run, tmp_path, capsys, name, kind
):
    """Found by the nineteenth round: `run --resume` appended rank 0's output to the file a
    link at logs/rank-0.log pointed to, outside the run (exit 0); a FIFO there, or at
    logs/launcher.log, hung it silently (the launcher's start-up wait is 24 h); a folder there
    printed a rank's traceback, then "training failed on rank 0 at step 2". Now one line
    before any rank starts, nothing written."""
    run = copy_run(finished_run, tmp_path / "in")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim.txt").write_text("someone else's\n")
    path = run / "logs" / name
    path.unlink(missing_ok=True)
    said = _plant(path, kind, outside)
    argv = ["run", "--resume", str(run), "--epochs", "2"]  # a run with an epoch to train
    refused(argv, tmp_path, capsys, (f"{path}: ", said))
    assert (outside / "victim.txt").read_text() == "someone else's\n"


# Defence in depth, for what is put there after the check (a run's files are opened as the
# ranks start): each file a run writes in place is opened without following a link or
# blocking, and only as a regular file.

APPENDED_KINDS = ["a link to a file outside", "a dangling link", "a FIFO", "a folder"]


@pytest.mark.timeout(30)
@pytest.mark.parametrize("kind", [*APPENDED_KINDS, "a FIFO with a reader"])
def test_a_file_appended_to_is_opened_only_as_a_regular_file(tmp_path, kind):
    """Found by the nineteenth round: logs/rank-R.log was opened with a plain O_APPEND, which
    follows a link (rank output written outside the run) and blocks on a FIFO (the resume
    hung). `open_append` refuses either at once, naming the file, and writes nothing."""
    from pipeplan.errors import OutputError
    from pipeplan.fileio import open_append

    run, outside = _run_outside(tmp_path)
    path = run / "logs" / "rank-0.log"
    said = _plant(path, kind.removesuffix(" with a reader"), outside)
    reader = os.open(path, os.O_RDONLY | os.O_NONBLOCK) if kind.endswith("reader") else None
    try:
        with pytest.raises(OutputError, match=f"^{path}: .*{said.strip('()')}"):
            open_append(path)
    finally:
        if reader is not None:
            os.close(reader)
    assert (outside / "victim.txt").read_text() == "someone else's\n"
    assert sorted(p.name for p in outside.iterdir()) == ["victim.txt"]


def test_a_file_appended_to_is_created_or_appended_to(tmp_path):
    """`open_append` of a missing file creates it; of a regular one, writes at its end."""
    from pipeplan.fileio import open_append

    path = tmp_path / "rank-0.log"
    for line in (b"one\n", b"two\n"):
        fd = open_append(path)
        os.write(fd, line)
        os.close(fd)
    assert path.read_bytes() == b"one\ntwo\n"


@pytest.mark.timeout(30)
@pytest.mark.parametrize("kind", ["a link to a file outside", "a FIFO"])
def test_the_launchers_log_is_opened_only_as_a_regular_file(tmp_path, kind):
    """Found by the nineteenth round: a FIFO at logs/launcher.log hung `run --resume` before
    any rank started (logging's handler blocked opening it); a link there was followed."""
    from pipeplan import log
    from pipeplan.errors import OutputError

    run, outside = _run_outside(tmp_path)
    path = run / "logs" / "launcher.log"
    said = _plant(path, kind, outside)
    with pytest.raises(OutputError, match=f"^{path}: .*{said.strip('()')}"):
        log.FileHandler(path)
    assert (outside / "victim.txt").read_text() == "someone else's\n"


@pytest.mark.timeout(30)
@pytest.mark.parametrize("kind", ["a link to a file outside", "a FIFO"])
def test_run_jsonl_is_appended_to_only_as_a_regular_file(tmp_path, kind):
    """Found by the nineteenth round (the class of the rank logs): rank 0 opened run.jsonl,
    and the launcher mended its torn last line, with a plain append that follows a link and
    blocks on a FIFO."""
    from executor.records import Recorder, mend_torn_tail
    from pipeplan.errors import OutputError

    run, outside = _run_outside(tmp_path)
    path = run / "run.jsonl"
    said = _plant(path, kind, outside).strip("()")
    with pytest.raises(OutputError, match=f"^{path}: .*{said}"):
        Recorder(path, writes=True)
    if kind != "a FIFO":  # reading one is refused before (`read_input`)
        (outside / "victim.txt").write_text('{"torn": ')
        with pytest.raises(OutputError, match=f"^{path}: .*{said}"):
            mend_torn_tail(path, [])
        assert (outside / "victim.txt").read_text() == '{"torn": '
    else:
        assert sorted(p.name for p in outside.iterdir()) == ["victim.txt"]


@pytest.mark.parametrize("kind", ["a link to a file outside", "a FIFO"])
def test_a_ranks_report_is_written_to_a_new_file(tmp_path, monkeypatch, kind):
    """Found by the nineteenth round (the class of the rank logs): a failing rank wrote its
    report to `rank-R.error.json.tmp` with a plain open, through a link put there (or
    blocking on a FIFO). Whatever is there is replaced by a new file."""
    from executor import faults

    run, outside = _run_outside(tmp_path)
    report = run / "logs" / "rank-0.error.json"
    _plant(report.with_name(report.name + ".tmp"), kind, outside)
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(report))
    faults.write_report(RuntimeError("boom"), rank=0)
    assert "boom" in json.loads(report.read_text())["pipeplan"]["error"]
    assert sorted(p.name for p in (run / "logs").iterdir()) == ["rank-0.error.json"]
    assert (outside / "victim.txt").read_text() == "someone else's\n"


# The rank's entry as `pipeplan run` starts it (`--log-dir`), alone: a world of one rank whose
# launcher is the test (it fails before any process group is made).
RANK_ENV = {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1"}
RANK_ENV |= {"MASTER_ADDR": "localhost", "MASTER_PORT": "29999"}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["a link to a file outside", "a FIFO"])
def test_a_rank_whose_log_is_not_a_plain_file_reports_it_and_writes_nothing(tmp_path, kind):
    """Found by the nineteenth round: a rank opened logs/rank-R.log following a link (its
    output went outside the run) or blocking on a FIFO (it never started). What is put there
    after the launcher's check is the rank's failure: its report naming the file, one line,
    exit 1, nothing written. The rank's entry (`launch.main`) runs in a fork of this process
    (`_main_forked`: a rank started anew takes about 5 s, for importing torch); it fails
    before any process group."""
    from test_hostile_resume import _main_forked

    run, outside = _run_outside(tmp_path)
    log = run / "logs" / "rank-0.log"
    said = _plant(log, kind, outside)
    env = {**os.environ, **RANK_ENV, "TORCHELASTIC_ERROR_FILE": str(log.parent / "r.json")}
    code, err = _main_forked([str(run), "--log-dir", str(log.parent)], env, timeout=90)
    assert code == 1, err
    (line,) = err.splitlines()
    assert line.startswith(f"pipeplan: error: rank 0: {log}: ") and said in line, line
    assert f"{log}: " in json.loads((log.parent / "r.json").read_text())["pipeplan"]["error"]
    assert (outside / "victim.txt").read_text() == "someone else's\n"


# ----------------------------------------------------------------------------- checkpoints


def _manifest(run: Path, step: str = "step-2") -> Path:
    return run / "checkpoints" / step / "manifest.json"


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
@pytest.mark.parametrize("command", ["export", "resume"])
@pytest.mark.parametrize("extra", ["/dev/zero", "../../run.json"])
def test_a_manifest_naming_other_files_is_refused(finished_run, tmp_path, capsys, extra, command):
    """Extra entries of a manifest's files map were never checked; it must name exactly the
    checkpoint's files."""
    run = copy_run(finished_run, tmp_path)
    doc = json.loads(_manifest(run).read_text())
    doc["files"][extra] = "0" * 64
    _manifest(run).write_text(json.dumps(doc))
    argv = ["run", "--resume", str(run), "--epochs", "2"]
    if command == "export":
        argv = ["export", str(run), "--out", str(tmp_path / "e")]
    refused(argv, tmp_path, capsys, ("manifest.json", f"files names '{extra}'"))
    assert not (tmp_path / "e").exists()


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
@pytest.mark.parametrize("command", ["export", "resume"])
def test_a_manifest_lacking_a_file_says_it_lacks_it(finished_run, tmp_path, capsys, command):
    """Found by the seventeenth round: a manifest whose files map lacked rng.pt was refused as
    "files names 'rng.pt'", as if it named an extra file. It says what it lacks."""
    run = copy_run(finished_run, tmp_path)
    doc = json.loads(_manifest(run).read_text())
    del doc["files"]["rng.pt"]
    _manifest(run).write_text(json.dumps(doc))
    argv = ["run", "--resume", str(run), "--epochs", "2"]
    if command == "export":
        argv = ["export", str(run), "--out", str(tmp_path / "e")]
    refused(argv, tmp_path, capsys, ("manifest.json", "files lacks 'rng.pt'"))


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
@pytest.mark.parametrize("command", ["export", "resume", "report", "calibrate"])
def test_a_deleted_latest_pointer_is_named(finished_run, tmp_path, capsys, command):
    """Found by the seventeenth round: checkpoints/latest deleted with step-N intact said
    "no checkpoint to resume from", though one is there. A missing pointer is refused as an
    edited one is (which checkpoint is the run's is not guessed), naming the pointer and the
    checkpoints kept. The fifty-second round: report and calibrate passed over the run.json
    check against the checkpoint in silence instead."""
    run = copy_run(finished_run, tmp_path)
    (run / "checkpoints" / "latest").unlink()
    argv = ["run", "--resume", str(run), "--epochs", "2"]
    if command in RUN_READERS:
        argv = RUN_READERS[command][0](run, tmp_path)
    fragment = "checkpoints/latest: is missing, though the run has checkpoints (step-2)"
    refused(argv, tmp_path, capsys, fragment)


@pytest.mark.parametrize("command", ["export", "resume"])
def test_a_file_given_as_the_run_is_not_a_run_directory(tmp_path, capsys, command):
    """Found by the seventeenth round: `run --resume /etc/hostname` said "/etc/hostname/run.json:
    cannot read (NotADirectoryError: …)", Python's exception leaking."""
    given = tmp_path / "hostname"
    given.write_text("host\n")
    argv = ["run", "--resume", str(given)]
    if command == "export":
        argv = ["export", str(given), "--out", str(tmp_path / "e")]
    refused(argv, tmp_path, capsys, f"{given}: is a file, not a run directory")


# Each command given a run, with what it reads of it: export reads no records.
RUN_READERS = {
    "report": (lambda run, tmp: ["report", str(run)], ("run.json", "run.jsonl")),
    "calibrate": (
        lambda run, tmp: ["calibrate", str(run), "--profile", str(PROFILE), "--out", f"{tmp}/c"],
        ("run.json", "run.jsonl"),
    ),
    "export": (lambda run, tmp: ["export", str(run), "--out", str(tmp / "e")], ("run.json",)),
    "resume": (lambda run, tmp: ["run", "--resume", str(run)], ("run.json",)),
}


@pytest.mark.parametrize("what", ["fifo", "folder"])
@pytest.mark.parametrize("command", RUN_READERS)
def test_a_run_file_that_is_no_regular_file_is_named_by_every_reader(
    tmp_path, capsys, command, what
):
    """Found by the twentieth round: run.jsonl (or run.json) a FIFO or a folder made `report`
    say "RUN: not a run directory (no run.jsonl)", though it is there; `calibrate` said
    "not a regular file". Every command given a run checks it one way (`check_run_directory`),
    naming the file and what it is."""
    argv, needs = RUN_READERS[command]
    for name in needs:
        run = tmp_path / f"{name}-{what}"
        run.mkdir()
        for other in needs:
            (run / other).write_text("{}\n")
        (run / name).unlink()
        if what == "fifo":  # a reader would block on it
            os.mkfifo(run / name)
        else:
            (run / name).mkdir()
        kind = "a FIFO" if what == "fifo" else "a directory"
        refused(argv(run, tmp_path), tmp_path, capsys, f"{run / name}: not a regular file ({kind})")


@pytest.mark.parametrize("command", RUN_READERS)
def test_a_file_given_as_a_run_is_a_file_and_a_missing_run_is_missing(tmp_path, capsys, command):
    """Found by the twentieth round: `calibrate FILE` said "FILE: no such run directory",
    though FILE exists (it is a file); `export nope` said "nope/run.json: no such file".
    Every command says the same of each."""
    argv, _ = RUN_READERS[command]
    given = tmp_path / "profile.json"
    given.write_text("{}\n")
    refused(argv(given, tmp_path), tmp_path, capsys, f"{given}: is a file, not a run directory")
    missing = tmp_path / "nope"
    refused(argv(missing, tmp_path), tmp_path, capsys, f"{missing}: no such run directory")


def test_a_path_through_a_file_is_no_such_file_without_pythons_words(tmp_path):
    """The class behind it: any input read through a file as if it were a folder names the
    file, never "NotADirectoryError"."""
    from pipeplan.errors import InputFileError
    from pipeplan.formats.base import read_input

    (tmp_path / "f").write_text("x")
    with pytest.raises(InputFileError) as caught:
        read_input(tmp_path / "f" / "run.json")
    assert str(caught.value) == (
        f"{tmp_path / 'f' / 'run.json'}: no such file "
        f"({tmp_path / 'f'} is a regular file, not a folder)"
    )


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_a_checkpoint_folder_of_another_step_is_refused(finished_run, tmp_path, capsys):
    """step-4 replaced by a copy of step-3 resumed from step 3, training an epoch again: the
    folder's name and its manifest's step must agree."""
    run = copy_run(finished_run, tmp_path)
    (run / "checkpoints" / "step-2").rename(run / "checkpoints" / "step-1")
    (run / "checkpoints" / "latest").write_text("step-1\n")
    argv = ["run", "--resume", str(run), "--epochs", "2"]
    refused(argv, tmp_path, capsys, ("step-1/manifest.json", "step 2 is not a position of step-1"))


def test_a_checkpoint_of_another_step_is_corrupt_and_an_older_one_is_used(
    finished_run, tmp_path, caplog
):
    """Where an older checkpoint verifies, the mismatched newest is treated as a corrupt one:
    the older is loaded, with the notice naming the mismatch."""
    from executor.checkpoint import load_latest

    run = copy_run(finished_run, tmp_path)
    shutil.copytree(run / "checkpoints" / "step-2", run / "checkpoints" / "step-5")
    (run / "checkpoints" / "latest").write_text("step-5\n")
    with caplog.at_level(logging.WARNING, logger="pipeplan"):
        manifest, *_ = load_latest(run)
    assert manifest.step == 2
    notice = "step-5/manifest.json: step 2 is not a position of step-5"
    assert any(notice in r.message and "older step-2" in r.message for r in caplog.records), (
        caplog.text
    )


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_the_older_checkpoint_notice_is_said_once(finished_run, tmp_path, capfd):
    """Found by the seventeenth round: a resume that fell back to an older checkpoint printed
    its notice three times, from the command and from each rank (`pipeplan: rank 0: WARNING:
    …`). The command says it; the ranks load in silence."""
    run = copy_run(finished_run, tmp_path)
    shutil.copytree(run / "checkpoints" / "step-2", run / "checkpoints" / "step-5")
    (run / "checkpoints" / "latest").write_text("step-5\n")
    capfd.readouterr()
    assert cli.main(["run", "--resume", str(run), "--epochs", "2"]) == 0
    err = capfd.readouterr().err
    notices = [line for line in err.splitlines() if "resuming from the older step-2" in line]
    assert len(notices) == 1 and notices[0].startswith("pipeplan: WARNING: "), err


# ----------------------------------------------------------------------------- outputs in a run


def _targets(run: Path, tmp_path: Path) -> dict[str, list[str]]:
    """Each command's output aimed inside the run directory: into a checkpoint (whose manifest
    lists its files exactly, so resume would refuse it), over its records, into model/."""
    step = run / "checkpoints" / "step-3"
    return {
        "report --plot": ["report", str(run), "--plot", str(step / "plots")],
        "export": ["export", str(run), "--out", str(step / "exported")],
        "plan --out": ["plan", "--profile", str(PROFILE), "--out", str(run / "run.jsonl")],
        # The name an online recalibration writes its profile under (numbered).
        "plan --out calibration": [
            "plan",
            "--profile",
            str(PROFILE),
            "--out",
            str(run / "calibration-0.json"),
        ],
        "preview --plot": ["preview", "--profile", str(PROFILE), "--plot", str(run / "model")],
        "calibrate --out": [
            "calibrate",
            str(tmp_path / "fit"),
            "--profile",
            str(PROFILE),
            "--out",
            str(step / "c.json"),
        ],
    }


@pytest.mark.parametrize(
    "command",
    [
        "report --plot",
        "export",
        "plan --out",
        "plan --out calibration",
        "preview --plot",
        "calibrate --out",
    ],
)
@pytest.mark.parametrize("lock", [True, False])
def test_outputs_inside_a_run_directory_are_refused(tmp_path, capsys, command, lock):
    """What a run keeps in its directory is its own: plots or an export written into
    RUN/checkpoints/step-N were accepted, and the checkpoint no longer matched its manifest.
    Eleventh round: a run copied without its dot-files (`cp -r RUN/* COPY/`, no .lock) is
    read as a run by report and calibrate, and was not protected (`--out COPY/run.jsonl`)."""
    run = _synthetic(tmp_path)
    if lock:
        (run / ".lock").touch()  # what claim_directory leaves in every run directory
    (run / "checkpoints" / "step-3").mkdir(parents=True)
    (run / "checkpoints" / "step-3" / "model.pt").write_bytes(b"")  # a folder, no manifest
    (run / "model").mkdir()
    _readable(tmp_path, "calibrate")
    refused(_targets(run, tmp_path)[command], tmp_path, capsys, "which `pipeplan run` keeps")


@pytest.mark.parametrize("kept", [("run.json",), (".lock", "run.jsonl", "checkpoints")])
def test_a_run_is_recognised_by_run_json_or_its_own_entries(tmp_path, capsys, kept):
    """Thirteenth round: a run whose run.json was removed (its lock, records and checkpoints
    still there) let `plan --out RUN/checkpoints/step-3/p.json` write into a checkpoint; a
    run prepared but not started (run.json alone) let `--out RUN/run.jsonl` take the name of
    the records it will write. `--runs-dir` inside either is refused too."""
    run = _synthetic(tmp_path)
    (run / ".lock").touch()
    (run / "checkpoints" / "step-3").mkdir(parents=True)
    for entry in {"run.json", ".lock", "run.jsonl", "checkpoints"} - set(kept):
        path = run / entry
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    target = run / ("checkpoints/step-3/p.json" if "checkpoints" in kept else "run.jsonl")
    argv = ["plan", "--profile", str(PROFILE), "--out", str(target)]
    refused(argv, tmp_path, capsys, "which `pipeplan run` keeps")
    argv = ["run", "--model", "vit-digits", "--runs-dir", str(run / "new"), "--prepare-only"]
    refused(argv, tmp_path, capsys, "lies inside the run directory")


def _beside(run: Path, tmp_path: Path) -> dict[str, list[str]]:
    """Each command's output aimed into the run directory, beside what the run keeps."""
    link = tmp_path / "link"
    link.symlink_to(run)
    profile = str(PROFILE)
    fit, calibrate = _readable(tmp_path, "calibrate")
    return {
        "report --plot RUN": ["report", str(run), "--plot", str(run)],
        "report --plot RUN/plots": ["report", str(run), "--plot", str(run / "plots")],
        "preview --plot RUN": ["preview", "--profile", profile, "--plot", str(run)],
        "preview --plot LINK/plots": ["preview", "--profile", profile, "--plot", f"{link}/p"],
        "export --out RUN/x": ["export", str(run), "--out", str(run / "x")],
        "plan --out RUN/x.json": ["plan", "--profile", profile, "--out", str(run / "x.json")],
        "calibrate --out RUN/c.json": [*calibrate[:-1], str(fit / "c.json")],
        "profile --out RUN/p.json": ["profile", "vit-digits", "--out", str(run / "p.json")],
    }


@pytest.mark.parametrize(
    "command",
    [
        "report --plot RUN",
        "report --plot RUN/plots",
        "preview --plot RUN",
        "preview --plot LINK/plots",
        "export --out RUN/x",
        "plan --out RUN/x.json",
        "calibrate --out RUN/c.json",
        "profile --out RUN/p.json",
    ],
)
def test_an_output_beside_a_runs_own_files_is_refused_too(tmp_path, capsys, command):
    """Found by the seventeenth round: `preview --plot RUN` and `report RUN --plot RUN` wrote
    PNGs into a run directory's root and `export RUN --out RUN/x` a model folder, while
    logs/, checkpoints/ and the run's own files were refused. One rule now, as for a new run
    (`--runs-dir` inside a run): a run directory belongs to its run, and nothing else is
    written anywhere in it (the demo rebuilds its own, which would delete a user's file)."""
    run = _synthetic(tmp_path)
    (run / "checkpoints" / "step-3").mkdir(parents=True)
    (run / "checkpoints" / "step-3" / "model.pt").write_bytes(b"")  # a folder, no manifest
    argv = _beside(run, tmp_path)[command]
    where = {"calibrate --out RUN/c.json": tmp_path / "fit", "preview --plot LINK/plots": None}
    where = where.get(command, run) or tmp_path / "link"  # named as spelled
    refused(argv, tmp_path, capsys, f"lies inside the run directory {where}, whose files are")


def test_a_runs_own_writes_inside_its_directory_are_allowed(tmp_path):
    """The rule above is for a user's outputs: the run's own (`run_owned`), such as the demo's
    `demo-pretrained/model-profile.json` beside its model, are written there."""
    from pipeplan.errors import OutputError
    from pipeplan.fileio import check_writable

    run = _synthetic(tmp_path)
    with pytest.raises(OutputError, match="whose files are its own"):
        check_writable(run / "model-profile.json")
    assert check_writable(run / "model-profile.json", run_owned=True) == run / "model-profile.json"


def test_the_demo_profiles_its_pretrained_model_as_the_runs_own(tmp_path, monkeypatch):
    """The demo's one default output inside a run, `demo-pretrained/model-profile.json`, is
    written as the run's own file, which the rule above would otherwise refuse."""
    import pipeplan.profiler
    from executor import demo_checkpoint

    calls = []
    monkeypatch.setattr(
        pipeplan.profiler, "profile_to_file", lambda request, **kw: calls.append((request, kw))
    )
    demo_checkpoint._profile(tmp_path / "demo-pretrained")
    [(request, kw)] = calls
    assert request.out.endswith("demo-pretrained/model-profile.json") and kw == {"run_owned": True}


@pytest.mark.multiprocess
def test_a_real_run_keeps_only_the_entries_outputs_stay_out_of(finished_run):
    from pipeplan.fileio import run_entry

    assert all(run_entry(p.name) for p in finished_run.iterdir())


# ----------------------------------------------------------------------------- records and phases
# (eighth round) Records that each parse, and contradict the phase they belong to. Each damage
# edits one line and returns its index and the field the one line must name.


def _last(lines: list[dict], kind: str) -> int:
    return max(i for i, line in enumerate(lines) if line["kind"] == kind)


def _epoch_frozen_unlike_its_phase(lines: list[dict]) -> tuple[int, str]:
    i = _last(lines, "epoch")
    lines[i]["frozen_layers"] += 1
    return i, f"frozen_layers {lines[i]['frozen_layers']}, but its phase"


def _step_in_a_later_epoch(lines: list[dict]) -> tuple[int, str]:
    i = _last(lines, "step")
    lines[i]["epoch"] += 1
    return i, f"step {lines[i]['step']}: epoch {lines[i]['epoch']}"


def _phase_starting_after_a_gap(lines: list[dict]) -> tuple[int, str]:
    i = _last(lines, "phase")
    lines[i]["start_step"] += 3
    return i, f"start_step {lines[i]['start_step']}, but the records before it end at step"


def _phase_starting_in_another_epoch(lines: list[dict]) -> tuple[int, str]:
    i = _last(lines, "phase")
    lines[i]["start_epoch"] += 1
    return i, f"start_epoch {lines[i]['start_epoch']}, but the records before it end at"


def _epoch_counting_other_steps(lines: list[dict]) -> tuple[int, str]:
    i = _last(lines, "epoch")
    lines[i]["steps"] += 1
    return i, f"steps {lines[i]['steps']}, but run.jsonl has"


# calibrate's records are phases and steps of one unfinished epoch: no epoch record to damage.
SEQUENCE = [_step_in_a_later_epoch, _phase_starting_after_a_gap, _phase_starting_in_another_epoch]
EPOCHS = [_epoch_frozen_unlike_its_phase, _epoch_counting_other_steps]


def _damaged(run: Path, damage) -> tuple[str, str]:
    lines = _lines(run)
    index, fragment = damage(lines)
    _rewrite(run, lines)
    return f"run.jsonl:{index + 1}: ", fragment


@pytest.mark.parametrize(
    "command, damage",
    [("report", d) for d in SEQUENCE + EPOCHS] + [("calibrate", d) for d in SEQUENCE],
    ids=lambda v: v.__name__.strip("_") if callable(v) else v,
)
def test_records_that_contradict_their_phase_are_refused(tmp_path, capsys, command, damage):
    """Each was reported or fitted as if it meant something: an epoch charted with layers
    frozen that its phase never froze, a step counted in an epoch that had ended, a phase
    priced over steps that never ran, an epoch's throughput over steps it did not have."""
    run, argv = _readable(tmp_path, command)
    refused(argv, tmp_path, capsys, _damaged(run, damage))


def test_records_lacking_an_epoch_before_a_resumed_phase_are_refused(tmp_path, capsys):
    """Found by the eighteenth round: a phase entered by --resume at the next epoch's start,
    its epoch's record missing, was read as a crash having torn the record: report (and a
    resume) went on without that epoch for good. The executor writes an epoch's record
    before the checkpoint a resume at the next epoch's start continues from."""
    run, argv = _readable(tmp_path, "report")
    lines = _lines(run)
    i = _last(lines, "phase")
    lines[i]["resumed"] = True
    assert lines[i - 1]["kind"] == "epoch" and lines[i]["start_epoch"] == 1
    del lines[i - 1]
    _rewrite(run, lines)
    fragment = "phase 1: start_epoch 1, but the records before it end at step 7 of epoch 0"
    refused(argv, tmp_path, capsys, (f"run.jsonl:{i}: ", fragment))


@pytest.mark.parametrize("command", ["report", "calibrate"])
def test_a_step_of_a_later_epoch_is_named_with_the_epochs_closed(tmp_path, capsys, command):
    """Found by the twentieth round: a step record's epoch edited to 7 said "the records before
    it closed epochs up to 0 and its phase started in epoch 1", though its phase (phase 0)
    started in epoch 0: the current epoch was named as its phase's start. The message states
    what the records say: the epochs closed, and the current one. (calibrate's records: one
    epoch, none closed.)"""
    run, argv = _readable(tmp_path, command)
    lines = _lines(run)
    if command == "report":  # phase 0 goes on into epoch 1: its phase started in epoch 0
        i = _last(lines, "phase")
        del lines[i]
        # Phase 0's last step's times and ranks (its layout's), under each step's number.
        times = {k: v for k, v in lines[i - 2].items() if k not in ("step", "epoch")}
        for line in _steps(lines[i:]):
            line.update(times)
        for line in lines[i:]:  # and its epochs phase 0's
            if line["kind"] == "epoch":
                line.update(phase=0, frozen_layers=0)
    i = _last(lines, "step")
    lines[i]["epoch"] = 7
    _rewrite(run, lines)
    closed = "closed epochs 0 to 1: a step is of the current epoch, 2"
    closed = closed if command == "report" else "closed no epoch: a step is of the current epoch, 0"
    fragment = f"step {lines[i]['step']}: epoch 7, but the records before it {closed}"
    refused(argv, tmp_path, capsys, (f"run.jsonl:{i + 1}: ", fragment))


@pytest.mark.parametrize("command", ["report", "calibrate"])
def test_a_records_edited_profile_sha256_blames_the_record(tmp_path, capsys, command):
    """Found by the twentieth round: phase 0's pricing.profile_sha256 edited made report say
    "RUN/profile.json: edited since the run priced its phase 0 with it", though profile.json
    was untouched and the other phases' records hold its sha256. The record is named, with its
    field: as what was edited where other records hold the file's sha256 (calibrate's four
    phases), as one of the two where it alone names the file (report's phase 1 is priced
    with another profile)."""
    run, argv = _readable(tmp_path, command)
    lines = _lines(run)
    first = next(i for i, line in enumerate(lines) if line["kind"] == "phase")
    lines[first]["pricing"]["profile_sha256"] = "0" * 64
    _rewrite(run, lines)
    fragment = (
        f"{run / 'run.jsonl'}: phase 0: pricing.profile_sha256 000000000000… is not the sha256 "
        "of profile.json",
        "which run.jsonl's other records priced with it hold: the record was edited"
        if command == "calibrate"
        else "the record or the file was edited since the run priced with it",
    )
    refused(argv, tmp_path, capsys, fragment)


@pytest.mark.parametrize("command", ["report", "calibrate"])
def test_a_phases_calibration_unlike_its_profile_file_is_refused(tmp_path, capsys, command):
    """Found by the sixty-third round: a phase record's pricing.calibration was held to
    nothing: "online" on a phase priced with the uncalibrated profile.json (and "none" on one
    priced with a calibration-N.json the run fitted) was read by report, calibrate, export
    and resume. It is what the record's profile file says (`_check_calibration_named`)."""
    run, argv = _readable(tmp_path, command)
    lines = _lines(run)
    first = next(i for i, line in enumerate(lines) if line["kind"] == "phase")
    assert lines[first]["pricing"]["profile"] == "profile.json"
    lines[first]["pricing"]["calibration"] = "online"
    _rewrite(run, lines)
    fragment = (
        f"{run / 'run.jsonl'}: phase 0: pricing.calibration is 'online' but its "
        "pricing.profile profile.json is the profile the run started with, which holds no "
        "calibration ('none'); the record was edited"
    )
    refused(argv, tmp_path, capsys, fragment)


def _step_rate_unlike_its_time(lines: list[dict]) -> tuple[int, str]:
    i = _last(lines, "step")
    lines[i]["samples_per_s"] = 1e300
    return i, f"step {lines[i]['step']}: samples_per_s 1e+300, but"


@pytest.mark.parametrize("command", ["report", "calibrate"])
def test_a_steps_rate_that_contradicts_its_time_is_refused(tmp_path, capsys, command):
    """Found by the sixteenth round: a step's samples_per_s of 1e300 beside a step_s of 0.66 s
    of 64 samples (about 97) was reported and calibrated from with exit 0."""
    run, argv = _readable(tmp_path, command)
    refused(argv, tmp_path, capsys, _damaged(run, _step_rate_unlike_its_time))


def test_a_steps_rate_rounded_as_the_executor_writes_it_is_read(tmp_path):
    """The check allows the quotient's float rounding: global_batch / step_s, one ulp off."""
    run, argv = _readable(tmp_path, "report")
    lines = _lines(run)
    i = _last(lines, "step")
    lines[i]["samples_per_s"] = math.nextafter(lines[i]["samples_per_s"], math.inf)
    _rewrite(run, lines)
    assert cli.main(argv) == 0


# ----------------------------------------------------------------- seventeenth round: records


def _epoch_rate_unlike_its_steps(lines: list[dict]) -> tuple[int, str]:
    i = _last(lines, "epoch")
    lines[i]["samples_per_s"] = 1e9
    return i, f"epoch {lines[i]['epoch']}: samples_per_s 1000000000.0, but"


def _train_loss_unlike_its_steps(lines: list[dict]) -> tuple[int, str]:
    i = _last(lines, "epoch")
    lines[i]["train_loss"] = 99.0
    return i, "train_loss 99.0, but the mean loss of its 2 steps is 1"


def _grad_norm_of_a_layer_beyond_the_model(lines: list[dict]) -> tuple[int, str]:
    i = _last(lines, "epoch")
    lines[i]["grad_norms"] = {"99": 0.1}
    return i, "grad_norms names layer 99, but the active layers are 3..9"


def _grad_norm_of_a_frozen_layer(lines: list[dict]) -> tuple[int, str]:
    i = _last(lines, "epoch")  # its phase froze 3 layers: they have no gradient
    lines[i]["grad_norms"] = {"2": 0.1}
    return i, "grad_norms names layer 2, but the active layers are 3..9"


def _grad_norm_keyed_twice(lines: list[dict]) -> tuple[int, str]:
    i = _last(lines, "epoch")
    lines[i]["grad_norms"] = {"3": 0.1, "03": 0.1}
    return i, "grad_norms key '03' is not a layer index"


def _rank_forward_beyond_its_step(lines: list[dict]) -> tuple[int, str]:
    i = _last(lines, "step")
    lines[i]["ranks"][0]["fwd_s"] = 100.0
    return i, f"step {lines[i]['step']}: rank 0: fwd_s 100.0 is longer than the step's step_s"


def _rank_slower_than_its_step(lines: list[dict]) -> tuple[int, str]:
    i = _last(lines, "step")
    lines[i]["ranks"][1]["step_s"] = 100.0
    return i, f"step {lines[i]['step']}: rank 1: step_s 100.0 is longer than the step's step_s"


def _step_slower_than_its_slowest_rank(lines: list[dict]) -> tuple[int, str]:
    i = _last(lines, "step")
    parts = ("fwd_s", "bwd_s", "wait_s", "allreduce_s", "optimizer_s", "input_s")
    for rank in lines[i]["ranks"]:  # each rank timed as the executor times it: its parts
        rank["step_s"] = math.fsum(rank[part] for part in parts)
    slowest = max(rank["step_s"] for rank in lines[i]["ranks"])
    lines[i]["step_s"] = 2 * slowest  # its rate with it, as a careful edit would
    lines[i]["samples_per_s"] = 64 / lines[i]["step_s"]
    return i, f"step {lines[i]['step']}: step_s {2 * slowest!r} is longer than its slowest rank's"


def _rank_parts_past_its_step_on_cpu(lines: list[dict]) -> tuple[int, str]:
    i = _last(lines, "step")
    rank = lines[i]["ranks"][0]
    rank["step_s"] = lines[i]["step_s"]  # its step timed, as the executor times it
    rank["wait_s"] = 0.99 * rank["step_s"]  # beside its forward: about twice the step
    parts = "input_s + fwd_s + bwd_s + wait_s + allreduce_s + optimizer_s"
    return i, f"step {lines[i]['step']}: rank 0: its parts ({parts}) add up to "


def _peak_memory_on_cpu(lines: list[dict]) -> tuple[int, str]:
    i = _last(lines, "step")
    lines[i]["ranks"][0]["peak_memory_bytes"] = 10**15
    return i, "rank 0: peak_memory_bytes 1000000000000000 on a CPU run"


def _cluster_of_another_world(lines: list[dict]) -> tuple[int, str]:
    lines[0]["pricing"]["cluster"]["devices_per_node"] = 8
    return 0, "phase 0: pricing.cluster has 8 devices (nodes 1 x devices_per_node 8), but"


EPOCH_CONTRADICTIONS = [
    _epoch_rate_unlike_its_steps,
    _train_loss_unlike_its_steps,
    _grad_norm_of_a_layer_beyond_the_model,
    _grad_norm_of_a_frozen_layer,
    _grad_norm_keyed_twice,
]
STEP_CONTRADICTIONS = [
    _rank_forward_beyond_its_step,
    _rank_slower_than_its_step,
    _step_slower_than_its_slowest_rank,
    _rank_parts_past_its_step_on_cpu,
    _peak_memory_on_cpu,
    _cluster_of_another_world,
]


@pytest.mark.parametrize(
    "command, damage",
    [("report", d) for d in EPOCH_CONTRADICTIONS + STEP_CONTRADICTIONS]
    + [("calibrate", d) for d in STEP_CONTRADICTIONS],
    ids=lambda v: v.__name__.strip("_") if callable(v) else v,
)
def test_records_that_contradict_their_own_steps_are_refused(tmp_path, capsys, command, damage):
    """Found by the seventeenth round: report and calibrate took (exit 0) an epoch of 10⁹
    samples/s over 10 steps of 64 in 2 s, a train loss of 99 over steps of 2.3, gradient norms
    of layer 99 of a 10-layer model or of layer '03' beside '3', a rank's 100 s forward in a
    step of 0.17 s, a peak GPU memory on a CPU run; and a phase's cluster edited to 8 devices
    was blamed on the next line's step ranks. Each is refused on its own line and field.
    Found by the sixty-second round: a CPU run's rank whose parts add up to about twice its
    step_s was reported, and calibrate only warned and left its phase out (exit 0); on CPU
    the wait is the remainder, so the parts add up to the step: refused, naming the sum."""
    run, argv = _readable(tmp_path, command)
    refused(argv, tmp_path, capsys, _damaged(run, damage))


def _moved_to_wait(lines: list[dict], part: str, value: float) -> int:
    """The last step's rank 0 with `part` set to `value`, the rest of it waited: its parts
    still add up to its step, as a careful edit keeps them."""
    i = _last(lines, "step")
    rank = lines[i]["ranks"][0]
    rank["wait_s"] += rank[part] - value
    rank[part] = value
    return i


def _forward_of_0(lines: list[dict]) -> tuple[int, str]:
    i = _moved_to_wait(lines, "fwd_s", 0.0)
    return i, f"step {lines[i]['step']}: rank 0: fwd_s 0.0, but stage 0 computes a forward"


def _backward_of_0(lines: list[dict]) -> tuple[int, str]:
    i = _moved_to_wait(lines, "bwd_s", 0.0)
    return i, f"step {lines[i]['step']}: rank 0: bwd_s 0.0, but stage 0 of the phase's 1x2"


def _part_below_a_nanosecond(lines: list[dict]) -> tuple[int, str]:
    i = _moved_to_wait(lines, "optimizer_s", 5e-10)
    return i, "rank 0: optimizer_s 5e-10 is below 1e-09 s, which no timer resolves"


def _replica_allreduce_of_0(lines: list[dict]) -> tuple[int, str]:
    i = _moved_to_wait(lines, "allreduce_s", 0.0)
    return i, "rank 0: allreduce_s 0.0, but stage 0 of the phase's 1x2"


def _optimizer_of_0(lines: list[dict]) -> tuple[int, str]:
    i = _moved_to_wait(lines, "optimizer_s", 0.0)
    return i, "rank 0: optimizer_s 0.0, but stage 0 of the phase's 1x2 M=1 1f1b"


def _forward_of_a_nanosecond(lines: list[dict]) -> tuple[int, str]:
    i = _moved_to_wait(lines, "fwd_s", 1e-9)
    return i, "× faster than the phase's predicted forward of stage 0 for one micro-batch"


def _backward_of_a_nanosecond(lines: list[dict]) -> tuple[int, str]:
    i = _moved_to_wait(lines, "bwd_s", 1e-9)
    return i, "× faster than the phase's predicted backward of stage 0 for one micro-batch"


def _optimizer_of_a_nanosecond(lines: list[dict]) -> tuple[int, str]:
    i = _moved_to_wait(lines, "optimizer_s", 1e-9)
    return i, "× faster than the phase's predicted optimizer step of stage 0 ("


def _allreduce_of_a_nanosecond(lines: list[dict]) -> tuple[int, str]:
    i = _moved_to_wait(lines, "allreduce_s", 1e-9)
    return i, "× faster than the phase's predicted all-reduce of stage 0 ("


def _backward_of_minus_0(lines: list[dict]) -> tuple[int, str]:
    i = _moved_to_wait(lines, "bwd_s", -0.0)
    return i, "rank 0: bwd_s -0.0, but stage 0 of the phase's 1x2"


UNMEASURED = [
    _forward_of_0,
    _forward_of_a_nanosecond,
    _backward_of_0,
    _part_below_a_nanosecond,
    _replica_allreduce_of_0,
    _optimizer_of_0,
    _backward_of_a_nanosecond,
    _optimizer_of_a_nanosecond,
    _allreduce_of_a_nanosecond,
    _backward_of_minus_0,
]
# Those held to the phase's prediction: calibrate's own records of the test's run predict none.
FASTER = (
    _forward_of_a_nanosecond,
    _backward_of_a_nanosecond,
    _optimizer_of_a_nanosecond,
    _allreduce_of_a_nanosecond,
)


@pytest.mark.parametrize(
    "command, damage",
    [(command, d) for command in ("report", "calibrate") for d in UNMEASURED],
    ids=lambda v: v.__name__.strip("_") if callable(v) else v,
)
def test_times_no_timer_could_record_are_refused(tmp_path, capsys, command, damage):
    """Found by the sixty-third round: a step whose rank computing a stage timed its forward
    or (training) its backward at 0, or a part at 5e-10 s, was reported (exit 0), and
    calibrate left such steps out of the fit without a word; a replica of a 1x2 whose
    allreduce_s was 0 was reported, and calibrate said "no data-parallel stage with gradients
    inside one node" and fitted the all-reduce into the step overhead. Found by the
    sixty-fourth round: a trained stage's optimizer_s 0 was read, and calibrate said "no rank
    with trainable parameters measured a step" (its time went into the step overhead,
    +53 %). The executor times
    each as a span of the step's clock: refused, naming the step, the rank and the time, by
    the rule calibrate leaves steps out by (`formats.run.unmeasured_times`). Found by the
    sixty-fourth round: a forward of exactly 1 ns (the floor) on every rank was reported, and
    calibrate blamed the run's own profile ("likely of another device"); a forward 10^6 times
    faster than its phase predicted for one micro-batch is refused as no measurement. Found by
    the sixty-fifth round: a backward, optimizer step or all-reduce of 1 ns was read (calibrate
    fitted a 5 PB/s optimizer): each part is held to its own prediction; -0.0 is said so."""
    run, argv = _readable(tmp_path, command)
    if damage in FASTER and command == "calibrate":
        _predicted(run)  # what a run records: calibrate's own records predict nothing
    refused(argv, tmp_path, capsys, _damaged(run, damage))


def test_cache_hits_in_the_epoch_a_cache_starts_empty_are_refused(tmp_path, capsys):
    """Left open by the fifty-ninth round: a cached phase after an uncached one (or the first
    of a run attempt) starts with an empty cache, and an epoch deals each sample once, so no
    step of the epoch it starts in reads a sample it cached; 64 hits on its first step were
    read, and calibrate took the step as steady."""
    run, argv = _readable(tmp_path, "report")
    lines = _lines(run)
    i = _last(lines, "phase") + 1  # phase 1's first step: epoch 1, where it starts
    assert lines[i]["epoch"] == 1 and lines[i]["cache_hits"] == 0
    lines[i]["cache_hits"] = 64
    _rewrite(run, lines)
    fragment = "cache_hits 64 in epoch 1, where phase 1 started with an empty cache"
    refused(argv, tmp_path, capsys, (f"run.jsonl:{i + 1}: ", fragment))


def test_a_cached_phase_after_a_cached_one_reads_its_cache_from_its_first_step(tmp_path):
    """Its cache's rows are advanced from the last phase's (`Worker.prepare_cache`): hits in
    the epoch it starts in are real, and read."""
    from test_calibrate import Phase
    from test_calibrate import write_run as write_fit_run

    run = tmp_path / "fit"
    cached = [Phase(3, 1, 2, 1, "1f1b", (0, 10), True), Phase(5, 1, 2, 1, "1f1b", (0, 10), True)]
    write_fit_run(run, load(Profile, PROFILE), phases=cached)
    lines = _lines(run)
    second = _last(lines, "phase")
    assert lines[second]["start_epoch"] == 1 and lines[second + 1]["cache_hits"] == 64
    argv = ["calibrate", str(run), "--profile", str(PROFILE), "--out", str(tmp_path / "c")]
    assert cli.main(argv) == 0


@pytest.mark.parametrize("part", ["bwd_s", "allreduce_s", "optimizer_s"])
def test_a_backward_timed_on_a_forward_only_stage_is_refused(tmp_path, capsys, part):
    """Left open by the fifty-ninth round: a rank of a stage holding frozen layers only (it runs
    forward only: the executor leaves its backward, all-reduce and optimizer times 0) was read
    with a backward timed there, as a record of some other layout. The clean records read."""
    from test_calibrate import PHASES, Phase
    from test_calibrate import write_run as write_fit_run

    run = tmp_path / "fit"
    write_fit_run(
        run, load(Profile, PROFILE), phases=[*PHASES, Phase(5, 2, 1, 2, "gpipe", (0, 5, 10))]
    )
    argv = ["calibrate", str(run), "--profile", str(PROFILE), "--out", str(tmp_path / "c")]
    assert cli.main(argv) == 0
    capsys.readouterr()
    (tmp_path / "c").unlink()
    lines = _lines(run)
    i = _last(lines, "step")
    assert lines[i]["ranks"][0]["stage"] == 0 and lines[i]["ranks"][0][part] == 0
    lines[i]["ranks"][0][part] = 0.001
    _rewrite(run, lines)
    fragment = f"rank 0: {part} 0.001, but stage 0 of the phase's"
    refused(argv, tmp_path, capsys, (f"run.jsonl:{i + 1}: ", fragment, "runs forward only"))


@pytest.mark.parametrize(
    "digits, fragment",
    [
        (5000, "grad_norms.99999999999999999999… (5000 characters).[key]': is 5000 characters"),
        (4000, "grad_norms key '99999999999999999999'… (4000 characters) is not a layer index"),
    ],
)
def test_a_grad_norms_key_of_thousands_of_digits_is_one_line(tmp_path, capsys, digits, fragment):
    """Found by the nineteenth round: an epoch record's grad_norms key of 5,000 digits raised
    int()'s "Exceeds the limit (4300 digits)" as a traceback from report. A key is bounded
    text (`Text`), and one too long to be a layer index is not read as a number."""
    run, argv = _readable(tmp_path, "report")
    lines = _lines(run)
    i = _last(lines, "epoch")
    lines[i]["grad_norms"]["9" * digits] = 0.5
    _rewrite(run, lines)
    refused(argv, tmp_path, capsys, (f"run.jsonl:{i + 1}: ", fragment))


def test_epoch_records_as_the_executor_rounds_them_are_read(tmp_path):
    """The epoch checks allow the writer's float rounding: samples_per_s and train_loss one
    ulp off, grad norms of every active layer."""
    run, argv = _readable(tmp_path, "report")
    lines = _lines(run)
    i = _last(lines, "epoch")
    for field in ("samples_per_s", "train_loss"):
        lines[i][field] = math.nextafter(lines[i][field], math.inf)
    lines[i]["grad_norms"] = {str(layer): 0.5 for layer in range(3, 10)}
    _rewrite(run, lines)
    assert cli.main(argv) == 0


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_resume_refuses_an_epoch_that_contradicts_its_steps(finished_run, tmp_path, capsys):
    """Found by the seventeenth round: the epoch checks are `check_records`'s, which --resume
    reads with its run.json as report and calibrate do (a real run's records pass: the other
    resume tests)."""
    run = copy_run(finished_run, tmp_path)
    fragments = _damaged(run, _epoch_rate_unlike_its_steps)
    refused(["run", "--resume", str(run), "--epochs", "2"], tmp_path, capsys, fragments)


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
@pytest.mark.parametrize("damage", SEQUENCE + EPOCHS, ids=lambda f: f.__name__.strip("_"))
def test_resume_refuses_records_that_contradict_their_phase(finished_run, tmp_path, capsys, damage):
    """The same records stop a resume before any rank starts (it would truncate and extend
    them)."""
    run = copy_run(finished_run, tmp_path)
    fragments = _damaged(run, damage)
    refused(["run", "--resume", str(run), "--epochs", "2"], tmp_path, capsys, fragments)


# ----------------------------------------------------------------- eighteenth round: records
# Records that each agree with their own steps and contradict their run: its layers, its
# layout, its epochs. Each damage works on report's, calibrate's and a real run's records.


def _global_batch(phase: dict) -> int:
    layout = phase["layout"]
    return len(layout["rank_map"]) * layout["micro_batches"] * layout["micro_batch_size"]


def _closed_epoch(lines: list[dict]) -> int:
    """The last epoch record; calibrate's records (phases and steps of one epoch) get one
    closing their epoch as the executor writes it, every active layer's norm included."""
    if any(line["kind"] == "epoch" for line in lines):
        return _last(lines, "epoch")
    steps, phase = _steps(lines), lines[_last(lines, "phase")]
    losses = [s["loss"] for s in steps if s["loss"] is not None]
    frozen = phase["layout"]["frozen_layers"]
    record = dict(kind="epoch", epoch=0, phase=steps[0]["phase"], frozen_layers=frozen)
    epoch_s = sum(s["step_s"] for s in steps) + 1.0  # an epoch lasts at least its steps
    record |= dict(steps=len(steps), epoch_s=epoch_s, eval_accuracy=None)
    record["train_loss"] = sum(losses) / len(losses) if losses else None
    record["samples_per_s"] = len(steps) * _global_batch(phase) / epoch_s
    layers = phase["layout"]["boundaries"][-1]
    record["grad_norms"] = {str(layer): 0.5 for layer in range(frozen, layers)}
    lines.append(record)
    return len(lines) - 1


def _grad_norms_lacking_an_active_layer(lines: list[dict]) -> tuple[int, str]:
    """Every active layer's norm (report's records have none: a record of no step) but one."""
    i = _closed_epoch(lines)
    layers = lines[_last(lines[:i], "phase")]["layout"]["boundaries"][-1]
    active = range(lines[i]["frozen_layers"], layers)
    lines[i]["grad_norms"] = {str(layer): 0.5 for layer in active}
    layer = layers - 2  # below the head: an active block
    del lines[i]["grad_norms"][str(layer)]
    return i, f"epoch {lines[i]['epoch']}: grad_norms lacks active layer {layer}: every active"


def _with_forecast(lines: list[dict], i: int, *cases: tuple[str, list[int]]) -> None:
    """Give epoch record `i` a forecast of `cases` (continuation, frozen layers) as the
    executor writes one."""
    phase = lines[_last(lines[:i], "phase")]
    samples = lines[i]["steps"] * _global_batch(phase)
    priced = [dict(continuation=c, frozen_layers=f, speedup=1.0) for c, f in cases]
    lines[i]["forecast"] = dict(samples=samples, pricing=phase["pricing"], cases=priced)


def _forecast_of_more_epochs_than_the_run(lines: list[dict]) -> tuple[int, str]:
    """A forecast as the executor writes one, but for 3 epochs more than the run has."""
    i = _closed_epoch(lines)
    finished = [line["frozen_layers"] for line in lines[: i + 1] if line["kind"] == "epoch"]
    schedule = finished + [finished[-1]] * 3
    _with_forecast(lines, i, ("no-further-freezing", schedule), ("alpha-bound", schedule))
    field = f"epoch {lines[i]['epoch']}'s forecast.cases[0].frozen_layers"
    return i, f"{field} prices {len(schedule)} epochs, but run.json says epochs {len(finished)}"


def _forecast_of_another_freeze_mode(lines: list[dict]) -> tuple[int, str]:
    """One case, `schedule`: how --freeze list or alpha forecast; run.json says auto."""
    i = _closed_epoch(lines)
    finished = [line["frozen_layers"] for line in lines[: i + 1] if line["kind"] == "epoch"]
    _with_forecast(lines, i, ("schedule", finished))
    return i, "forecast.cases continue as ['schedule'], but run.json's freeze auto forecasts"


def _phase_of_a_plan_in_a_run_without_one(lines: list[dict]) -> tuple[int, str]:
    i = _last(lines, "phase")
    lines[i]["pricing"]["source"] = "plan"
    return i, "pricing.source 'plan', but run.json names no plan file"


def _cache_hits_in_an_uncached_phase(lines: list[dict]) -> tuple[int, str]:
    """The first step of a phase whose layout is not cached (each set of records has one)."""
    phases = {line["phase"]: line for line in lines if line["kind"] == "phase"}
    steps = [i for i, line in enumerate(lines) if line["kind"] == "step"]
    i = next(i for i in steps if not phases[lines[i]["phase"]]["layout"]["cached"])
    lines[i]["cache_hits"] = 5
    return i, f"step {lines[i]['step']}: cache_hits 5, but phase {lines[i]['phase']}'s layout"


RUN_CONTRADICTIONS = [
    _grad_norms_lacking_an_active_layer,
    _forecast_of_more_epochs_than_the_run,
    _cache_hits_in_an_uncached_phase,
    _forecast_of_another_freeze_mode,
    _phase_of_a_plan_in_a_run_without_one,
]


@pytest.mark.parametrize(
    "command, damage",
    [(c, d) for c in ("report", "calibrate") for d in RUN_CONTRADICTIONS],
    ids=lambda v: v.__name__.strip("_") if callable(v) else v,
)
def test_records_that_contradict_their_run_are_refused(tmp_path, capsys, command, damage):
    """Found by the eighteenth round: report and calibrate took (exit 0) an epoch's grad_norms
    without active layer 3 (only the checkpoint's gradient history was held to every active
    layer), 5 cache hits on a step of a phase that froze nothing and so cached nothing, and a
    forecast case of 5 epochs ([0, 4, 4, 4, 4]) in a 2-epoch run. Each is refused on its line,
    naming the field."""
    run, argv = _readable(tmp_path, command)
    refused(argv, tmp_path, capsys, _damaged(run, damage))


def test_a_forecast_that_freezes_beyond_no_further_freezing_is_refused(tmp_path, capsys):
    """Found by the eighteenth round (looking past F2c): auto's no-further-freezing case is
    the epoch's frozen layers to the end; one that froze 3 more layers was reported."""
    run, argv = _readable(tmp_path, "report")
    lines = _lines(run)
    i = next(i for i, line in enumerate(lines) if line["kind"] == "epoch")  # epoch 0 of 3
    _with_forecast(lines, i, ("no-further-freezing", [0, 3, 3]), ("alpha-bound", [0, 3, 3]))
    _rewrite(run, lines)
    fragment = "forecast.cases[0].frozen_layers: epoch 1: 3, but no-further-freezing under freeze"
    refused(argv, tmp_path, capsys, (f"run.jsonl:{i + 1}: ", fragment))


def test_a_cached_phase_solved_without_the_cache_is_refused(tmp_path, capsys):
    """Found by the eighteenth round (looking past F2): a cached phase whose horizon says the
    run could not read the cache (the solver prices a cached layout only where it can) was
    reported (exit 0). (calibrate's records and the real run have no cached phase.)"""
    run, argv = _readable(tmp_path, "report")
    lines = _lines(run)
    i = _last(lines, "phase")  # 1 stage x 2 replicas, cached
    lines[i]["pricing"]["horizon"] = dict(samples=192, epochs=1, previous=None, cache=False)
    _rewrite(run, lines)
    fragment = "phase 1: layout.cached true, but pricing.horizon.cache is false"
    refused(argv, tmp_path, capsys, (f"run.jsonl:{i + 1}: ", fragment))


# 1 rank, 3 epochs of 3 steps, frozen 0, 3, 5: phases 0, 1, 2 at lines 1, 6 and 11, each
# solved over the epochs left from the layout before it; checkpoints at each epoch's end.
HORIZONS = ["--model", "vit-digits", "--nproc", "1", "--epochs", "3", "--freeze", "0,3,5"]
HORIZONS += ["--max-steps-per-epoch", "3", "--checkpoint-every", "3"]


@pytest.fixture(scope="module")
def horizons_run(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("horizons")
    assert cli.main(["run", *HORIZONS, "--name", "h", "--runs-dir", str(root)]) == 0
    return root / "h"


def _resumed_at_step_6(run: Path, tmp_path: Path, *flags: str) -> Path:
    """A copy of `horizons_run` as a kill after checkpoint step-6 leaves it, resumed to its
    end with `flags`: phase 3 (line 12) is entered by the resume."""
    cut = copy_run(run, tmp_path)
    for done in (cut / "checkpoints" / "step-9", cut / "model"):
        shutil.rmtree(done)
    (cut / "summary.json").unlink()
    (cut / "checkpoints" / "latest").write_text("step-6\n")
    assert cli.main(["run", "--resume", str(cut), *flags]) == 0
    return cut


@pytest.mark.multiprocess
@pytest.mark.timeout(240)
@pytest.mark.parametrize(
    "flags",
    [
        # Long, for the default run's 15 minutes: `horizons_resumed` is the same resume without
        # flags (test_a_kept_phases_pricing_edited_is_named reads it), and more epochs keep its
        # phase as it does; other ranks plan one afresh (test_hostile_resume's resumes on
        # another --nproc read theirs).
        pytest.param((), marks=pytest.mark.long),
        pytest.param(("--epochs", "4"), marks=pytest.mark.long),
        pytest.param(("--nproc", "2"), marks=pytest.mark.long),
    ],
)
def test_the_horizons_of_a_resumed_run_are_read(horizons_run, tmp_path, flags):
    """The horizons a resume records pass: a phase continued as its checkpoint's (same ranks,
    also with more epochs: its predecessor's horizon copied) and one planned afresh (other
    ranks: from no layout). A check of horizons that refused them would refuse real runs."""
    run = _resumed_at_step_6(horizons_run, tmp_path, *flags)
    phases = [line for line in _lines(run) if line["kind"] == "phase"]
    assert [p["resumed"] for p in phases] == [False, False, False, True]
    assert cli.main(["report", str(run)]) == 0


@pytest.fixture(scope="module")
def horizons_resumed(horizons_run, tmp_path_factory) -> Path:
    """`_resumed_at_step_6` without flags: phase 3 (line 12) keeps phase 2's decision whole."""
    return _resumed_at_step_6(horizons_run, tmp_path_factory.mktemp("kept"))


@pytest.mark.multiprocess
@pytest.mark.timeout(240)
@pytest.mark.parametrize(
    "field, value, was",
    [
        (("calibration",), "online", "none"),
        (("profile",), "other.json", "profile.json"),
        (("horizon", "epochs"), 2, "1"),
        # (Its horizon's cache edited: named by its cached layout's own rule.)
        (("horizon", "samples"), 128, "192"),
    ],
    ids=lambda value: str(value),
)
def test_a_kept_phases_pricing_edited_is_named(
    horizons_resumed, tmp_path, capsys, field, value, was
):
    """Found by the sixty-second round: in a resumed run, the phase record --resume keeps
    whole from its predecessor (`Worker.kept_phase`: its horizon.previous is the
    predecessor's) with its calibration, profile, horizon epochs or samples edited was refused
    as a `pricing.horizon.previous` nobody edited ("a phase weighs moving from the layout it
    follows"). The line names the field that differs from the phase it keeps."""
    run = copy_run(horizons_resumed, tmp_path)
    lines = _lines(run)
    kept = lines[11]
    assert kept["resumed"] and kept["layout"] == lines[10]["layout"]
    pricing = kept["pricing"]
    for key in field[:-1]:
        pricing = pricing[key]
    pricing[field[-1]] = value
    _rewrite(run, lines)
    name = ".".join(field)
    fragment = f"run.jsonl:12: phase 3: pricing.{name} {value}, but phase 2, whose decision"
    refused(["report", str(run)], tmp_path, capsys, (fragment, f"has {was}: a resume keeps"))


def _refused_by_report_and_calibrate(run: Path, tmp_path: Path, capsys, fragment) -> None:
    refused(["report", str(run)], tmp_path, capsys, fragment)
    argv = ["calibrate", str(run), "--profile", str(PROFILE), "--out", str(tmp_path / "c.json")]
    refused(argv, tmp_path, capsys, fragment)


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "line, field, value, fragment",
    [
        (1, "samples", 64000, "run.jsonl:1: phase 0: pricing.horizon.samples 64000 (1000 steps"),
        (6, "samples", 64000, "run.jsonl:6: phase 1: pricing.horizon.samples 64000 (1000 steps"),
        (6, "samples", 100, "run.jsonl:6: phase 1: pricing.horizon.samples 100 is not whole"),
        (1, "epochs", 9, "run.jsonl:1: phase 0: pricing.horizon.epochs 9 from epoch 0 ends"),
        (6, "epochs", 9, "run.jsonl:6: phase 1: pricing.horizon.epochs 9 from epoch 1 ends"),
        (11, "epochs", 3, "run.jsonl:11: phase 2: pricing.horizon.epochs 3 from epoch 2 ends"),
        (6, "previous", None, "run.jsonl:6: phase 1: pricing.horizon.previous is null"),
        (6, "previous", "M=5", "run.jsonl:6: phase 1: pricing.horizon.previous is 1x1 M=5"),
        (1, "previous", "M=1", "it is the run's first phase: no layout is before it"),
        (11, "previous", "frozen 0", "previous is 1x1 M=1 1f1b, but the phase before it, phase 1"),
        (6, "previous", "frozen 2", "1f1b with frozen_layers 2, but the phase before it, phase 0"),
        (1, "cache", False, "run.jsonl:1: phase 0: pricing.horizon.cache false, but phase 1"),
    ],
    ids=lambda value: str(value),
)
def test_a_horizon_that_contradicts_its_run_is_refused(
    horizons_run, tmp_path, capsys, line, field, value, fragment
):
    """Found by the fifty-eighth round: a phase record's `pricing.horizon` was held to nothing
    but its layout's cache. 64000 samples an epoch in a run of 192 made `report --baseline`
    find "epochs of 12, 1000 steps" and worded a failure's step; 9 epochs in a 3-epoch run, and
    a previous layout the run never ran, were reported and calibrated from (exit 0). Each is
    refused on its own line, naming the field, for report and calibrate alike."""
    run = copy_run(horizons_run, tmp_path)
    lines = _lines(run)
    horizon = lines[line - 1]["pricing"]["horizon"]
    before = next(p for p in lines if p["kind"] == "phase")["layout"]
    if value == "M=5":
        value = {**horizon["previous"], "micro_batches": 5}
    elif value in ("M=1", "frozen 0"):
        value = before  # phase 0's layout, which froze 0 layers
    elif value == "frozen 2":
        value = {**before, "frozen_layers": 2}  # its shape, another freeze point
    horizon[field] = value
    _rewrite(run, lines)
    _refused_by_report_and_calibrate(run, tmp_path, capsys, fragment)


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "samples, fragment",
    [
        (192, None),  # 3 steps of 64: what the run weighed
        (64000, "(1000 steps of 64), but run.json's max_steps_per_epoch 3 allows at most 192"),
        (64, "(1 steps of 64), but epoch 0 has run 2 steps already (from "),
    ],
)
def test_the_horizon_of_a_run_stopped_in_its_first_epoch_is_held(
    horizons_run, tmp_path, capsys, samples, fragment
):
    """Found by the sixtieth round: a run stopped in its first epoch (no epoch record) had
    its phase's pricing.horizon.samples held to nothing: 64000 in a run capped at 30 steps
    an epoch was reported as "this run's 1000" steps an epoch. Held to run.json's cap and to
    the steps its first epoch ran, for report and calibrate alike; the real one is read."""
    run = copy_run(horizons_run, tmp_path)
    for name in ("summary.json", "metrics.csv", "model", "checkpoints"):  # as stopped at step 2
        shutil.rmtree(run / name) if (run / name).is_dir() else (run / name).unlink()
    lines = _lines(run)[:3]  # phase 0 and 2 of its 3 steps
    assert lines[0]["pricing"]["horizon"]["samples"] == 192
    lines[0]["pricing"]["horizon"]["samples"] = samples
    _rewrite(run, lines)
    if fragment is None:
        assert cli.main(["report", str(run)]) == 0
        return
    fragment = ("run.jsonl:1: phase 0: pricing.horizon.samples ", fragment)
    _refused_by_report_and_calibrate(run, tmp_path, capsys, fragment)


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "field, value, fragment",
    [
        ("frozen_layers", [0, 4, 6], "[0, 4, 6], but schedule under freeze list continues the"),
        ("frozen_layers", [0, 3, 3], "[0, 3, 3], but schedule under freeze list continues the"),
        ("speedup", 5e-324, "speedup': 5e-324 is no ratio of two totals"),
        ("speedup", 0.0, "forecast.cases.0.speedup': Input should be greater than 0"),
    ],
    ids=["another list", "no further freezing", "subnormal", "zero"],
)
def test_a_forecast_the_run_never_made_is_refused(
    horizons_run, tmp_path, capsys, field, value, fragment
):
    """Found by the fifty-eighth round: epoch 0's forecast of a `--freeze 0,3,5` run, edited
    to price 0, 4, 6 (a list the run never had), and speedups of 5e-324 ("0.00×") and 0, were
    reported and calibrated from. The schedules are the continuations run.json's --freeze
    gives after the epochs so far; a speedup is a normal positive ratio."""
    run = copy_run(horizons_run, tmp_path)
    lines = _lines(run)
    i = next(i for i, line in enumerate(lines) if line["kind"] == "epoch")
    assert lines[i]["forecast"]["cases"][0]["frozen_layers"] == [0, 3, 5]
    lines[i]["forecast"]["cases"][0][field] = value
    _rewrite(run, lines)
    refused(["report", str(run)], tmp_path, capsys, (f"run.jsonl:{i + 1}: ", fragment))
    argv = ["calibrate", str(run), "--profile", str(PROFILE), "--out", str(tmp_path / "c.json")]
    refused(argv, tmp_path, capsys, fragment)


@pytest.mark.timeout(120)
def test_a_placed_rank_recorded_idle_is_refused(horizons_run, tmp_path, capsys):
    """Found by the fifty-ninth round: a rank of the phase's rank map recorded with no stage
    and replica (idle) was accepted; report showed its stage unmeasured and calibrate fitted
    without it. A rank the rank map places records its place."""
    run = copy_run(horizons_run, tmp_path)
    lines = _lines(run)
    i = next(i for i, line in enumerate(lines) if line["kind"] == "step")
    lines[i]["ranks"][0] |= {"stage": None, "replica": None}
    _rewrite(run, lines)
    fragment = f"run.jsonl:{i + 1}: step 0: rank 0 records no stage, but the phase's rank map "
    refused(["report", str(run)], tmp_path, capsys, (fragment, "makes it stage 0 of replica 0"))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("edited", ["the epoch", "its steps"])
def test_an_epoch_shorter_than_its_steps_is_refused(horizons_run, tmp_path, capsys, edited):
    """Found by the fifty-eighth round: an epoch's time was held to nothing but its own rate.
    Epoch 0 of 3 steps of 0.4 s "took" 1.6 ms (epoch_s and samples_per_s edited alike) and
    was reported at 1000 times its rate; the converse, its steps' times scaled up 1000 times
    (each rank's parts, step_s and samples_per_s alike), was calibrated from. Both are
    refused on the epoch's line."""
    run = copy_run(horizons_run, tmp_path)
    lines = _lines(run)
    i = next(i for i, line in enumerate(lines) if line["kind"] == "epoch")
    if edited == "the epoch":
        lines[i]["epoch_s"] /= 1000
        lines[i]["samples_per_s"] *= 1000
    else:
        for line in _steps(lines[:i]):
            for rank in line["ranks"]:
                for field in ("step_s", "fwd_s", "bwd_s", "wait_s", "allreduce_s", "optimizer_s"):
                    rank[field] *= 1000
                rank["input_s"] *= 1000
            line["step_s"] *= 1000
            line["samples_per_s"] /= 1000
    _rewrite(run, lines)
    fragment = f"run.jsonl:{i + 1}: epoch 0: epoch_s "
    refused(["report", str(run)], tmp_path, capsys, (fragment, "an epoch lasts at least its steps"))
    argv = ["calibrate", str(run), "--profile", str(PROFILE), "--out", str(tmp_path / "c.json")]
    refused(argv, tmp_path, capsys, fragment)


@pytest.mark.parametrize(
    "change, fragment",
    [
        ({"cache": False}, "phase 1: layout.cached true, but run.json says cache false"),
        ({"freeze": "none"}, "phase 1: layout.frozen_layers 3, but run.json says freeze none"),
    ],
    ids=["cache false", "freeze none"],
)
def test_phases_that_contradict_their_run_json_are_refused(tmp_path, capsys, change, fragment):
    """Found by the eighteenth round (looking past F2): a cached phase in a run whose run.json
    says cache false, and 3 frozen layers where it says freeze none, were reported (exit 0)
    as what the run had done."""
    from test_hostile import edit_run_json

    run, argv = _readable(tmp_path, "report")
    edit_run_json(run, **change)
    refused(argv, tmp_path, capsys, (f"run.jsonl:{_last(_lines(run), 'phase') + 1}: ", fragment))


def test_an_epoch_closed_as_the_executor_writes_it_is_read(tmp_path):
    """The undamaged epoch record the cases above damage is read: what they refuse is the
    damage alone."""
    run, argv = _readable(tmp_path, "calibrate")
    lines = _lines(run)
    _closed_epoch(lines)
    _rewrite(run, lines)
    assert cli.main(argv) == 0


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
@pytest.mark.parametrize("damage", RUN_CONTRADICTIONS, ids=lambda f: f.__name__.strip("_"))
def test_resume_refuses_records_that_contradict_their_run(finished_run, tmp_path, capsys, damage):
    """Found by the eighteenth round: the same checks are `check_records`'s, which --resume
    reads with its run.json; each stops the resume before any rank starts."""
    run = copy_run(finished_run, tmp_path)
    fragments = _damaged(run, damage)
    refused(["run", "--resume", str(run), "--epochs", "2"], tmp_path, capsys, fragments)


# ----------------------------------------------------------------- nineteenth round: records
# A phase record's predicted step against its own predicted stages, as a plan's phase is held
# to its stages (`check_step_holds_stages`, and above: `step_upper_bound_s`). report's records
# have predictions (calibrate's have none); the real run's are checked by resume too.


def _step_of(value: float):
    def damage(lines: list[dict]) -> tuple[int, str]:
        i = next(i for i, line in enumerate(lines) if line["kind"] == "phase")
        lines[i]["predicted_step_s"] = value
        return i, f"exceeds the step it is part of, predicted_step_s {value!r}"

    damage.__name__ = f"predicted_step_s_{value}"
    return damage


def _stage_longer_than_its_step(lines: list[dict]) -> tuple[int, str]:
    i = next(i for i, line in enumerate(lines) if line["kind"] == "phase")
    lines[i]["predicted_stages"][0]["fwd_s"] = 50.0
    return i, "predicted_stages[0]: M × (fwd_s + bwd_s) + allreduce_s + optimizer_s (M = 4)"


SHORT_STEPS = [_step_of(0.0), _step_of(1e-9), _stage_longer_than_its_step]


@pytest.mark.parametrize("damage", SHORT_STEPS, ids=lambda f: f.__name__.strip("_"))
def test_a_step_shorter_than_its_stages_is_refused(tmp_path, capsys, damage):
    """Found by the nineteenth round: a phase record's predicted_step_s of 0.0 or 1e-9 beside
    stages of 0.07 s each, or a stage's fwd_s of 50 s beside a 0.088 s step, was reported
    (0.0 shown as the prediction) and calibrated from (exit 0). Each stage's work is part of
    the step: refused on its line, naming the stage and the step."""
    run, argv = _readable(tmp_path, "report")
    refused(argv, tmp_path, capsys, _damaged(run, damage))


def _step_of_100_s(lines: list[dict]) -> str:
    i = next(i for i, line in enumerate(lines) if line["kind"] == "phase")
    lines[i]["predicted_step_s"] = 100.0
    return f"run.jsonl: phase {lines[i]['phase']}: predicted_step_s 100.0 exceeds its"


def test_a_step_longer_than_its_stages_one_after_another_is_refused(tmp_path, capsys):
    """Found by the nineteenth round: a phase record's predicted_step_s of 100 s beside stages
    of 0.17 s in all was reported as "predicted 100000.0 ms … error +17241%". The phase was
    solved with the profile it names: its step is at most its stages' work one after another
    plus that profile's calibrated step overhead (none here)."""
    run, argv = _readable(tmp_path, "report")
    lines = _lines(run)
    fragment = _step_of_100_s(lines)
    _rewrite(run, lines)
    refused(argv, tmp_path, capsys, (fragment, "plus profile.json's overhead"))


def test_a_step_as_long_as_its_calibrated_overhead_allows_is_read(tmp_path):
    """Phase 1 of report's records was priced with a calibration whose step overhead is
    OVERHEAD_S: its step may exceed its stages' work by that (and is read), not by more."""
    from test_report import OVERHEAD_S

    run, argv = _readable(tmp_path, "report")
    assert cli.main(argv) == 0
    lines = _lines(run)
    i = _last(lines, "phase")
    lines[i]["predicted_step_s"] += OVERHEAD_S / 10
    _rewrite(run, lines)
    assert cli.main(argv) == 2


@pytest.mark.parametrize("calibrated", [False, True], ids=["uncalibrated", "calibrated"])
def test_the_step_bounds_hold_what_the_cost_model_simulates(calibrated):
    """What the bounds refuse no phase the run solves can hold: over test_calibrate's 16
    layouts (1 to 4 stages and replicas, both schedules, frozen and cached), each stage's
    work fits in the simulated step and the step is at most the stages' work one after
    another plus the calibrated overhead (a 1-stage layout meets it, to the rounding)."""
    from test_calibrate import RICH, TRUTH, layout_of

    from executor.planning import run_cluster
    from pipeplan.costmodel import CostModel
    from pipeplan.formats import RunConfig
    from pipeplan.formats.plan import check_step_holds_stages, close_enough, step_upper_bound_s
    from pipeplan.plan import stage_plans

    profile = load(Profile, PROFILE).model_copy(
        update={"calibration": TRUTH if calibrated else None}
    )
    cfg = RunConfig(name="x", model="vit-digits", data="digits", nproc=4, global_batch=64, epochs=1)
    model = CostModel(profile, run_cluster(cfg, profile))
    for phase in RICH:
        layout = layout_of(phase)
        evaluation = model.evaluate(layout, record=False)
        stages, m, step = stage_plans(evaluation.stages), layout.micro_batches, evaluation.step_s
        check_step_holds_stages(stages, m, step, "stage {}", "step_s")
        bound = step_upper_bound_s(stages, m, model.step_overhead_s(layout))
        if step > bound:
            close_enough("step_s", step, bound, step + bound, "exceeds its bound")


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
@pytest.mark.parametrize("command", ["report", "resume"])
@pytest.mark.parametrize("value", [100.0, 0.0])
def test_a_real_runs_step_that_contradicts_its_stages_is_refused(
    finished_run, tmp_path, capsys, command, value
):
    """Found by the nineteenth round, on a real run: its phase record's predicted_step_s
    edited to 100 s or 0 s was reported (and a resume went on). The undamaged record is
    read (test_hostile's report of the same run)."""
    run = copy_run(finished_run, tmp_path)
    lines = _lines(run)
    if value:
        fragment = _step_of_100_s(lines)
    else:
        fragment = f"run.jsonl:{_damaged_line(lines, _step_of(value))}: "
    _rewrite(run, lines)
    argv = (
        ["report", str(run)]
        if command == "report"
        else ["run", "--resume", str(run), "--epochs", "2"]
    )
    refused(argv, tmp_path, capsys, fragment)


def _damaged_line(lines: list[dict], damage) -> int:
    return damage(lines)[0] + 1


# --------------------------------------------- left open since the forty-second round: predictions
# A phase record's predictions against what its layout prices to (`costmodel.
# check_priced_prediction`), beyond their bounds above.


def _predicted(run: Path) -> None:
    """`run`'s phase records (calibrate's, which predict nothing) predicting what their
    layouts price to, as a run records them (`conftest.priced`)."""
    lines = _lines(run)
    for n, line in enumerate(lines):
        if line["kind"] == "phase":
            record = priced(PhaseRecord.model_validate(line), fill=True)
            lines[n] = record.model_dump(mode="json")
    _rewrite(run, lines)


def _slack_phase(lines: list[dict]) -> tuple[int, float, float]:
    """The first phase record whose predicted step is below its stages' work one after
    another (a pipeline's stages overlap): its index, step and that bound."""
    from pipeplan.formats import StagePlan
    from pipeplan.formats.plan import step_upper_bound_s

    for i, line in enumerate(lines):
        if line["kind"] != "phase":
            continue
        stages = [StagePlan.model_validate(st) for st in line["predicted_stages"]]
        bound = step_upper_bound_s(stages, line["layout"]["micro_batches"], 0.0)
        if line["predicted_step_s"] < 0.9 * bound:
            return i, line["predicted_step_s"], bound
    raise AssertionError("no phase of a pipeline's overlap")


def _step_within_its_bounds(lines: list[dict]) -> tuple[int, str]:
    i, step_s, bound = _slack_phase(lines)
    value = (step_s + bound) / 2  # more than the stages' work, less than all of it in a row
    lines[i]["predicted_step_s"] = value
    return i, f"phase {lines[i]['phase']}: predicted_step_s {value!r} is not what its layout"


def _stage_within_its_step(lines: list[dict]) -> tuple[int, str]:
    i, _, _ = _slack_phase(lines)
    stage = lines[i]["predicted_stages"][0]
    stage["fwd_s"] = round(stage["fwd_s"] * 1.05, 12)  # still inside the step
    return i, f"predicted_stages[0].fwd_s {stage['fwd_s']!r} is not what its layout"


@pytest.mark.parametrize("command", ["report", "calibrate"])
@pytest.mark.parametrize("damage", [_step_within_its_bounds, _stage_within_its_step])
def test_a_prediction_that_is_not_its_layouts_price_is_refused(tmp_path, capsys, command, damage):
    """Left open since the forty-second round: a phase record's predicted_step_s edited between its
    stages' work and their sum (`check_step_holds_stages`, `step_upper_bound_s` hold it to
    no more), or a stage's fwd_s edited 5% up inside its step, changed report's
    predicted-vs-measured errors and was read by calibrate, exit 0. The run records what
    the phase's layout prices to from the profile and on the cluster its pricing names:
    refused on its line, naming the phase and the field. As written, the records read."""
    run, argv = _readable(tmp_path, command)
    if command == "calibrate":
        _predicted(run)
    assert cli.main(argv) == 0, capsys.readouterr().err
    capsys.readouterr()
    shutil.rmtree(tmp_path / "c", ignore_errors=True)
    (tmp_path / "c").unlink(missing_ok=True)
    lines = _lines(run)
    i, fragment = damage(lines)
    _rewrite(run, lines)
    refused(argv, tmp_path, capsys, (f"run.jsonl:{i + 1}: ", fragment, "the record was edited"))
    assert not (tmp_path / "c").exists()


@pytest.mark.parametrize("command", ["report", "calibrate"])
def test_a_plan_runs_prediction_is_the_plans_after_a_refit(tmp_path, capsys, command):
    """Left open since the forty-second round: a run of a plan that recalibrated itself names its
    refit (calibration-2.json) in its later phases' pricing, yet records the plan's
    prediction, priced from the plan's profile on the plan's cluster: read as written
    (`_planned`), and refused with its step edited 5% up (no bound holds a plan phase's step
    from above), naming the plan's pricing."""
    run, argv = _readable(tmp_path, command)
    if command == "calibrate":
        _predicted(run)
    _planned(run, tmp_path)
    lines = _lines(run)
    i = _last(lines, "phase")
    if command == "report":  # calibrate's records were priced with profile.json alone
        assert lines[i]["pricing"]["profile"] == "calibration-2.json"
    assert cli.main(argv) == 0, capsys.readouterr().err
    capsys.readouterr()
    shutil.rmtree(tmp_path / "c", ignore_errors=True)
    (tmp_path / "c").unlink(missing_ok=True)
    value = lines[i]["predicted_step_s"] * 1.05
    lines[i]["predicted_step_s"] = value
    _rewrite(run, lines)
    fragment = f"predicted_step_s {value!r} is not what its layout"
    refused(argv, tmp_path, capsys, (f"run.jsonl:{i + 1}: ", fragment, "the plan's profile"))


# ----------------------------------------------------------------------------- tenth round


def test_a_plan_runs_exactly_its_epochs(tmp_path, capsys):
    """`run --plan P --epochs 3` with P planned for 10 epochs was accepted: its schedule cut
    where it never said to stop (or, for more, epochs it has no phase for). Given, --epochs
    is held to the plan's; left out, it is the plan's (as --nproc and --global-batch are)."""
    plan = tmp_path / "p.json"
    argv = ["plan", "--profile", str(shipped_profile("vit-digits", "cpu")), "--devices-per-node"]
    argv += ["1", "--global-batch", "64", "--samples", "1438", "--epochs", "10", "--out", str(plan)]
    assert cli.main(argv) == 0
    run = ["run", "--model", "vit-digits", "--plan", str(plan), "--prepare-only"]
    run += ["--runs-dir", str(tmp_path / "runs")]
    capsys.readouterr()
    for epochs in ("3", "11"):
        refused(
            [*run, "--epochs", epochs],
            tmp_path,
            capsys,
            f"{plan}: the plan is for 10 epochs, not --epochs {epochs}",  # its file: 54th round
        )
    assert cli.main([*run, "--name", "planned"]) == 0
    assert json.loads((tmp_path / "runs" / "planned" / "run.json").read_text())["epochs"] == 10


@pytest.mark.parametrize("model", ["vit-digits", "bert-base"])
@pytest.mark.parametrize("init", ["random", "pretrained"])
def test_init_beside_a_built_in_model_is_refused(tmp_path, capsys, model, init):
    """`run --model vit-digits --init random` was accepted though a built-in model always
    starts from random weights (and `pretrained` was refused only once its data was
    built): --init means something only beside a model directory (`INIT_NEEDS`)."""
    argv = ["run", "--model", model, "--init", init, "--data", "synth-text", "--prepare-only"]
    argv += ["--runs-dir", str(tmp_path / "runs")]
    fragment = f"--init means nothing with --model {model}; "
    refused(argv, tmp_path, capsys, fragment + "it chooses between a model directory's weights")
    assert not (tmp_path / "runs").exists()


# ------------------------------------------------------ twenty-second round: held-out numbers


def _with_eval_files(run: Path, summary: bool) -> None:
    """metrics.csv (or summary.json instead) as the run writes them from its records."""
    from pipeplan.formats import RunConfig, dumps, read_records
    from pipeplan.formats.metrics import metrics_of
    from pipeplan.report import run_summary

    records = read_records(run / "run.jsonl")
    if not summary:
        (run / "metrics.csv").write_text(metrics_of(records))
        return
    doc = run_summary(load(RunConfig, run / "run.json"), records)
    (run / "summary.json").write_text(dumps(doc))


EVAL_EDITS = {  # (field, value, the file that says otherwise)
    "accuracy vs metrics.csv": ("eval_accuracy", 0.4567, "metrics.csv"),
    "loss vs metrics.csv": ("eval_loss", 50.0, "metrics.csv"),
    "accuracy vs summary.json": ("eval_accuracy", 0.4567, "summary.json"),
}


@pytest.mark.parametrize("case", EVAL_EDITS, ids=str)
def test_an_epochs_held_out_numbers_edited_against_the_runs_files(tmp_path, capsys, case):
    """Found by the twenty-second round: an epoch record's eval_accuracy edited to 0.4567 or
    eval_loss to 50.0 was reported (45.7 %) and calibrated from with exit 0, though
    metrics.csv and summary.json said 0.45. Each is held to the files the run wrote."""
    field, value, other = EVAL_EDITS[case]
    run, argv = _readable(tmp_path, "report")
    lines = _lines(run)
    i = _last(lines, "epoch")
    lines[i][field] = lines[i][field] if lines[i][field] is not None else 0.5
    _rewrite(run, lines)
    _with_eval_files(run, summary=other == "summary.json")
    assert cli.main(argv) == 0, capsys.readouterr().err  # as written: read
    capsys.readouterr()
    lines[i][field] = value
    _rewrite(run, lines)
    said = (f"epoch {lines[i]['epoch']}: {field} {value!r}", other)
    if other == "metrics.csv":  # the table's line names both files (either may be edited)
        said = (f"metrics.csv: epoch {lines[i]['epoch']}: {field}", f"says '{value!r}'")
    refused(argv, tmp_path, capsys, said)


def _fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


# metrics.csv as the run wrote it, then changed: (the change, what the one line says).
METRICS_EDITS = {
    "train_loss": (
        lambda m: m.replace("\n0,", "\n0,9", 1),
        ("metrics.csv: epoch 0: train_loss '9", "run.jsonl's record of that epoch says"),
    ),
    "a row for an epoch never run": (
        lambda m: m + m.splitlines()[-1].replace("2,", "7,", 1) + "\n",
        ("metrics.csv: row 5 (epoch 7) has no epoch record in", "run.jsonl"),
    ),
    "an unknown column": (
        lambda m: m.replace("layout\n", "layout,extra\n"),
        ("metrics.csv: header", "layout,extra'"),
    ),
    "another layout": (
        lambda m: m.replace("gpipe", "1f1b").replace("1f1b\n", "gpipe\n", 1),
        ("metrics.csv: epoch 0: layout", "run.jsonl's record of that epoch says"),
    ),
    "emptied": (lambda m: "", "metrics.csv: empty"),
    "rows missing": (lambda m: m.splitlines()[0] + "\n", "metrics.csv: no row for epoch 0"),
    "a cell too many": (lambda m: m.replace("\n1,", "\n1,1,", 1), "epoch 1's row has 8 cells"),
}
# Found by the twenty-fifth round: one trailing empty line was "row 4 (epoch ?) has no epoch
# record in run.jsonl" (and one inside the table "epoch 1's row has 0 cells"): an empty row is
# named as one, wherever it is.
EMPTY_ROWS = {
    "an empty last line": (lambda m: m + "\n", "metrics.csv: row 5 is empty; pipeplan writes no"),
    "an empty line inside": (
        lambda m: m.replace("\n1,", "\n\n1,", 1),
        "metrics.csv: row 3 is empty",
    ),
    "an empty first line": (lambda m: "\n" + m, "metrics.csv: row 1 is empty"),
}


@pytest.mark.parametrize("case", [*METRICS_EDITS, "a FIFO"], ids=str)
def test_metrics_csv_is_what_the_records_say(tmp_path, capsys, case):
    """Found by the twenty-third round: report held metrics.csv to the records for
    eval_accuracy and eval_loss only: an edited train_loss, a row for an epoch that never ran,
    an unknown column, another layout, an empty file and a FIFO there were read with exit 0
    (a FIFO skipped). The table is read strictly: its header, a row per epoch record, every
    cell the record's value, a regular file; the line names both files."""
    run, argv = _readable(tmp_path, "report")
    _with_eval_files(run, summary=False)
    assert len([r for r in _lines(run) if r["kind"] == "epoch"]) == 3
    assert cli.main(argv) == 0, capsys.readouterr().err  # as the run writes it: read
    capsys.readouterr()
    table = run / "metrics.csv"
    if case == "a FIFO":
        _fifo(table)
        refused(argv, tmp_path, capsys, "metrics.csv: not a regular file")
        return
    edit, fragment = METRICS_EDITS[case]
    table.write_text(edit(table.read_text()))
    refused(argv, tmp_path, capsys, fragment)


@pytest.mark.parametrize("case", EMPTY_ROWS, ids=str)
def test_an_empty_row_of_metrics_csv_is_named_as_empty(tmp_path, capsys, case):
    """Found by the twenty-fifth round: metrics.csv with one trailing empty line was refused as
    "row 4 (epoch ?) has no epoch record in run.jsonl, which records 2 epoch(s)": it is an
    empty row, not an epoch. Wherever an empty line is, the line says that row is empty."""
    run, argv = _readable(tmp_path, "report")
    _with_eval_files(run, summary=False)
    table = run / "metrics.csv"
    edit, fragment = EMPTY_ROWS[case]
    table.write_text(edit(table.read_text()))
    refused(argv, tmp_path, capsys, fragment)


# ------------------------------------------- twenty-seventh round: one line beside a torn record


def test_export_holds_a_torn_record_notice_until_it_passes(finished_run, tmp_path, capsys):
    """Found by the twenty-seventh round (the class of its torn-record findings): export read
    run.jsonl with its notice, then refused something else (metrics.csv edited): two lines,
    where report, calibrate and resume hold the notice until they pass."""
    run = copy_run(finished_run, tmp_path)
    _torn_resumed_phase(run)
    rows = (run / "metrics.csv").read_text().splitlines(keepends=True)
    fields = rows[1].split(",")
    rows[1] = ",".join([*fields[:3], "0.123456", *fields[4:]])
    (run / "metrics.csv").write_text("".join(rows))
    argv = ["export", str(run), "--out", str(tmp_path / "out")]
    refused(argv, tmp_path, capsys, f"{run / 'metrics.csv'}: epoch 0: eval_accuracy")


def _ranks_failing(monkeypatch, act) -> list[str]:
    """Have `run_local` start no rank: `act(run_dir)` does what the ranks did before rank 0
    failed (exit code 1, no report). Returns the argv of a 1-rank run, runs-dir left out."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure

    import executor.launch

    def launch(config, entrypoint):
        def ranks(*args):
            act(Path(args[args.index("--log-dir") + 1]).parent)
            failure = ProcessFailure(local_rank=0, pid=1, exitcode=1, error_file="")
            raise ChildFailedError("executor.launch", {0: failure})

        return ranks

    monkeypatch.setattr(executor.launch, "elastic_launch", launch)
    return ["run", "--model", "vit-digits", "--nproc", "1", "--name", "k"]


def test_a_failure_line_beside_a_torn_record_is_the_only_line(
    finished_run, tmp_path, capsys, monkeypatch
):
    """Found by the twenty-seventh round: rank 0 failing on a full disk as it appended a step
    record (its last line torn at the block's end) gave the torn record's WARNING before the
    failure line: the line reads the records to name the step. One line."""
    records = (finished_run / "run.jsonl").read_text().splitlines(keepends=True)

    def torn(run: Path) -> None:
        (run / "run.jsonl").write_text("".join(records[:2]) + '{"kind": "step", "step": 1, "ep')

    argv = _ranks_failing(monkeypatch, torn)
    assert cli.main([*argv, "--runs-dir", str(tmp_path / "runs")]) == 2
    run = tmp_path / "runs" / "k"
    assert capsys.readouterr().err == (
        f"pipeplan: error: training failed on rank 0 at step 1: exited with code 1; rank logs "
        f"in {run / 'logs'}; no checkpoint to resume from: delete {run} to start it again\n"
    )


@pytest.mark.parametrize("how", ["moved", "deleted", "replaced by an empty folder"])
def test_a_run_directory_gone_while_it_trained_is_said_to_be_gone(
    tmp_path, capsys, monkeypatch, how
):
    """Found by the twenty-seventh round: a run directory moved away while its ranks trained
    (steps and a checkpoint in it) failed with "before the first step … no checkpoint to
    resume from: delete runs/mv to start it again": the line read where it had been. The line
    says the run directory disappeared, and nothing else of it; what is at the path now (an
    empty folder made there) is not the run's."""

    def gone(run: Path) -> None:
        (run / "run.jsonl").write_text("")  # rank 0 opened it: the ranks trained
        if how == "moved":
            run.rename(run.with_name("k2"))
            return
        shutil.rmtree(run)
        if how == "replaced by an empty folder":
            run.mkdir()

    argv = _ranks_failing(monkeypatch, gone)
    assert cli.main([*argv, "--runs-dir", str(tmp_path / "runs")]) == 2
    run = tmp_path / "runs" / "k"
    if how == "moved":  # where it went is known (the lock file held open): named, and its state
        said = (
            f"training stopped before the first step: {run}: the run directory moved to "
            f"{run.with_name('k2')} while it trained; no checkpoint to resume from: delete "
            f"{run.with_name('k2')} to start it again"
        )
    else:
        said = (
            f"training stopped: {run}: the run directory moved or was deleted while it trained;"
            " if it was moved, resume it where it is now with `pipeplan run --resume NEWPATH`"
        )
    assert capsys.readouterr().err == f"pipeplan: error: {said}\n"
    # Nothing made (or removed) at the old path: the empty folder made there stays as it is.
    there = sorted(p.name for p in run.iterdir()) if run.exists() else None
    assert there == ([] if how == "replaced by an empty folder" else None)


def _move_at_first_checkpoint(run: Path, to: Path, deadline_s: float) -> None:
    """Rename `run` to `to` as soon as its first checkpoint is written (its ranks train on)."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if (run / "checkpoints" / "latest").exists():
            run.rename(to)
            return
        time.sleep(0.005)


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_a_run_directory_moved_mid_run_stops_its_ranks_and_is_never_made_again(tmp_path, capsys):
    """Found by the twenty-eighth round: a run directory moved mid-run (after a checkpoint)
    trained on to the end; its ranks made the old path again with checkpoints, metrics.csv
    and model/ (a second half-run, and an INFO "trained model: runs/c/model" line of a model
    that was no run's), and the line said "exited with code 1" and that the run directory
    had disappeared. Now the ranks stop at the next step (they compare the folder at the
    path with the one they started in), nothing is made at the old path, and the one line
    names the step, where the run went and how to resume it there."""
    runs = tmp_path / "runs"
    run, moved = runs / "mv", runs / "mv2"
    mover = threading.Thread(target=_move_at_first_checkpoint, args=(run, moved, 240))
    mover.start()
    argv = ["run", "--nproc", "1", "--epochs", "2", "--max-steps-per-epoch", "4"]
    code = cli.main([*argv, "--checkpoint-every", "1", "--name", "mv", "--runs-dir", str(runs)])
    mover.join()
    err = capsys.readouterr().err
    assert code == 2, err
    assert not run.exists() and sorted(p.name for p in runs.iterdir()) == ["mv2"]
    steps = sum('"kind": "step"' in line for line in (moved / "run.jsonl").open())
    assert 1 <= steps < 8  # stopped mid-run, not at its end
    # --checkpoint-every 1: a checkpoint follows each step within an epoch, which the records
    # cannot tell from the next step (the thirty-fifth round: "at step N" alone).
    at = f"after step {steps - 1}, writing its checkpoint, or at step {steps}"
    if steps == 4:  # the first epoch's last step: its end, its record written or not
        ended = '"kind": "epoch"' in (moved / "run.jsonl").read_text()
        at = "after step 3, at the end of epoch 1" + " or at step 4" * ended
    assert err == (
        f"pipeplan: error: training stopped {at}: {run}: the run directory moved to "
        f"{moved} while it trained; resume with: pipeplan run --resume {moved}\n"
    )
    assert not (moved / "model").exists() and not (moved / "summary.json").exists()
    assert not list((moved / "logs").glob("*.tmp"))  # the report rooms went, where it is now


def test_a_rank_tells_its_run_directory_moved_or_replaced(tmp_path, monkeypatch):
    """Found by the twenty-eighth round: a rank never looked at whether its run directory was
    still where it started, and wrote on into a new one at the old path. `moved_away` tells,
    by the folder's identity as the rank started (`trains`): moved, deleted, or replaced by
    a folder of the same name."""
    from pipeplan import fileio

    monkeypatch.setattr(fileio, "_TRAINED", {})
    run = tmp_path / "k"
    run.mkdir()
    fileio.trains(run)
    assert not fileio.moved_away(run)
    run.rename(tmp_path / "k2")
    assert fileio.moved_away(run)
    run.mkdir()  # a folder of the same name is not the one the rank started in
    assert fileio.moved_away(run)


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_a_ranks_writes_never_make_a_run_directory_moved_away_again(finished_run, tmp_path):
    """Found by the twenty-eighth round: a run directory moved away mid-run was made again at
    its old path by its ranks' writes: a checkpoint (its folder made with its parents), the
    model's export (the folders above it made), the activation cache's folders and a rank's
    logs/. Each now fails naming what it could not write, and nothing is made."""
    from executor import cache, checkpoint
    from executor.launch import rank_console
    from pipeplan import models
    from pipeplan.errors import OutputError

    gone = tmp_path / "runs" / "gone"
    gone.parent.mkdir()
    manifest = checkpoint.read_manifest(checkpoint.latest(finished_run))
    writes = {
        "checkpoint": lambda: checkpoint._write(gone, {"model.pt": {}}, manifest),
        "model": lambda: models.export(models.build("gpt2-tiny"), gone / "model", parents=False),
        "cache": lambda: cache.private_directory(gone / "cache" / "node0"),
        "logs": lambda: rank_console(gone / "logs", 0),
    }
    for what, write in writes.items():
        with pytest.raises(OutputError):
            write()
        assert list(gone.parent.iterdir()) == [], what


@pytest.mark.parametrize("name", ["c\nfake line", "c\x1b[31mred"], ids=["line feed", "escape"])
def test_a_run_directory_moved_to_an_unprintable_name_is_quoted(tmp_path, monkeypatch, name):
    """Found by the thirtieth round: the line of a run whose folder moved mid-run printed the
    new name raw: a line feed split the error over lines, an ESC sequence reached the
    terminal, and the `resume with:` command it gave is one the CLI refuses. The name is
    quoted, and the line says to rename it first."""
    from executor import launch
    from pipeplan.formats import RunConfig

    moved = tmp_path / name
    moved.mkdir()
    monkeypatch.setattr(launch, "where_now_as_named", lambda run_dir: moved)
    cfg = RunConfig.model_validate({"name": "c", "model": "vit-digits", "data": "digits"})
    line = launch.moved_line(tmp_path / "c", cfg)
    assert line.isprintable(), line
    assert repr(str(moved)) in line and "rename it to a printable name" in line


def test_pipeplan_run_variables_set_by_hand_under_torchrun_are_not_believed(tmp_path, monkeypatch):
    """Found in the thirty-first round's notes: a PIPEPLAN_RUN_DIR_ID left in a shell's
    environment made every torchrun rank exit 1 in silence (its folder is not the one it
    names), and a PIPEPLAN_LAUNCHER_PID did too (its process is not the rank's parent). The
    first is believed only for `pipeplan run`'s ranks; the second says what is wrong."""

    from executor import launch

    monkeypatch.setenv(launch.RUN_DIR_ID, "1:1")
    monkeypatch.delenv(launch.LAUNCHER_PID, raising=False)
    monkeypatch.setattr("sys.argv", ["executor.launch", str(tmp_path)])
    assert not launch.replaced_as_it_started()
    monkeypatch.setenv(launch.LAUNCHER_PID, str(os.getpid()))
    assert launch.replaced_as_it_started()  # a rank of `pipeplan run`: believed

    env = {**os.environ, launch.LAUNCHER_PID: "999999999", "RANK": "0"}
    env.pop(launch.RUN_DIR_ID)
    done = _entry_by_hand(tmp_path, env)
    lines = done.stderr.splitlines()
    # The fifty-third round: exit 1, and no rank named; every refusal of the environment is 2.
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert lines[0].startswith(
        "pipeplan: error: rank 0: PIPEPLAN_LAUNCHER_PID='999999999' is set"
    ), lines
    assert "unset it" in lines[0] and list(tmp_path.iterdir()) == []


def _entry_by_hand(run_dir: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    """torchrun's entry, `python -m executor.launch RUN_DIR`, started by hand under `env`."""
    from executor import launch

    return subprocess.run(
        [sys.executable, "-m", "executor.launch", str(run_dir)],
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
        cwd=Path(launch.__file__).parents[1],
    )


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "variable, value, said",
    [
        ("OMP_NUM_THREADS", "0", "libgomp: Invalid value for environment variable OMP_NUM_THREADS"),
        # In `-m long`, for the default run's 15 minutes: test_hostile_console's twin reads it.
        pytest.param(
            "GOMP_CPU_AFFINITY",
            "abc",
            "never finished reading GOMP_CPU_AFFINITY='abc'",
            marks=pytest.mark.long,
        ),
    ],
)
def test_a_torchrun_rank_refuses_an_openmp_variable_before_torch_loads(
    tmp_path, variable, value, said
):
    """Found by the fifty-third round: under torchrun (the entry, `python -m executor.launch`)
    `OMP_NUM_THREADS=0` printed libgomp's blank line and refusal and trained, and
    `GOMP_CPU_AFFINITY=abc` spun the rank at 100 % CPU, deaf to SIGTERM, for 690 s and more.
    The rank checks the variables as the `pipeplan` command does, before torch loads: its one
    line, naming it, exit 2, within the probe's bound; nothing written."""
    import time

    from executor import launch

    env = {**os.environ, variable: value, "RANK": "1"}
    for key in (launch.LAUNCHER_PID, launch.RUN_DIR_ID):
        env.pop(key, None)
    started = time.monotonic()
    done = _entry_by_hand(tmp_path / "r", env)
    lines = done.stderr.splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert lines[0].startswith("pipeplan: error: rank 1: the environment: ") and said in lines[0]
    assert time.monotonic() - started < 60 and list(tmp_path.iterdir()) == []


def test_a_rank_whose_run_directory_was_replaced_as_it_started_writes_nothing(
    tmp_path, monkeypatch
):
    """Found by the thirtieth round: a run's folder moved away while its ranks started, and
    another run's folder put at its path, was taken by the ranks for theirs: they trained that
    run again inside it (a second history appended to its run.jsonl, its checkpoints, model
    and logs rewritten, with no lock on it). The launcher hands its ranks the identity of the
    folder it claimed (`agent_scope`), and a rank whose path holds another exits before it
    writes anything; the launcher says the folder moved."""
    from executor import launch

    run, other = tmp_path / "u4", tmp_path / "other"
    (run / "logs").mkdir(parents=True)
    (other / "logs").mkdir(parents=True)
    monkeypatch.delenv(launch.RUN_DIR_ID, raising=False)
    with launch.agent_scope(run / "logs"):
        claimed = os.environ[launch.RUN_DIR_ID]
    assert launch.RUN_DIR_ID not in os.environ  # put back, as the agent's environment is
    assert claimed == launch.directory_id(str(run))
    monkeypatch.setenv(launch.RUN_DIR_ID, claimed)
    monkeypatch.setenv(launch.LAUNCHER_PID, str(os.getpid()))  # a rank of `pipeplan run`
    monkeypatch.setattr("sys.argv", ["executor.launch", str(run), "--log-dir", str(run / "logs")])
    assert not launch.replaced_as_it_started()
    run.rename(tmp_path / "u4m")
    assert launch.replaced_as_it_started()  # gone
    other.rename(run)
    assert launch.replaced_as_it_started()  # another folder in its place
    monkeypatch.delenv(launch.RUN_DIR_ID)
    assert not launch.replaced_as_it_started()  # torchrun's ranks: no launcher claimed it


def test_a_rank_whose_run_directory_became_a_link_to_it_is_told_and_reads_its_own(
    tmp_path, monkeypatch
):
    """Found by the thirtieth round: a run's folder moved and a link to it put at its path
    mid-run (or its parent folder replaced so) trained to the end and then failed on its own
    lock ("in use by a pipeplan process"): the rank's folder was known by its resolved path,
    which the link changed. It is known by its name as the rank gave it (links not followed):
    a link in its place is a move (`moved_away`), a link above it is not, and the rank reads
    its own folder through either without taking a lock."""
    from pipeplan import fileio

    monkeypatch.setattr(fileio, "_TRAINED", {})
    runs = tmp_path / "runs"
    (runs / "k").mkdir(parents=True)
    (runs / "k" / ".lock").write_text("")
    fcntl = pytest.importorskip("fcntl")
    with open(runs / "k" / ".lock") as held:  # the launcher's lock, held by another file
        fcntl.flock(held, fcntl.LOCK_EX)
        run = runs / "k"
        fileio.trains(run)
        (runs / "k").rename(runs / "k2")
        (runs / "k").symlink_to("k2")
        assert fileio.moved_away(run)
        with fileio.reading_run(run):  # its own: no lock taken, none refused
            pass
        (runs / "k").unlink()
        (runs / "k2").rename(runs / "k")
        runs.rename(tmp_path / "runs2")
        runs.symlink_to("runs2")
        assert not fileio.moved_away(run)
        with fileio.reading_run(run):
            pass


def test_a_rank_names_where_its_run_directory_moved_and_what_continues_it(tmp_path, monkeypatch):
    """Found by the thirtieth round (a note): under torchrun, whose line is the rank's own, a
    run directory renamed mid-run was said to have "moved or was deleted … resume it where it
    is now with -m executor.launch NEWPATH --resume", though `pipeplan run` named the place.
    A rank holds its folder open (`trains`): the line names where it is now and what continues
    it there: a resume from its checkpoint, a start where it trained no step, else a new run."""
    from executor.worker import moved_message
    from pipeplan import fileio

    monkeypatch.setattr(fileio, "_TRAINED", {})
    monkeypatch.setattr(fileio, "_TRAINED_FD", {})
    monkeypatch.chdir(tmp_path)
    run, moved = Path("runs") / "k", Path("runs") / "k2"
    run.mkdir(parents=True)
    fileio.trains(run)
    assert fileio.where_now(run) == run.resolve()  # in place: where it is
    run.rename(moved)
    assert fileio.where_now(run) == moved.resolve()
    said = f"{run}: the run directory moved to {moved} at step"
    assert moved_message(run, 0) == f"{said} 0; start it there with -m executor.launch {moved}"
    assert moved_message(run, 5) == (
        f"{said} 5; it has no checkpoint to resume from: prepare a new run to train it again"
    )
    (moved / "checkpoints" / "latest").mkdir(parents=True)
    assert (
        moved_message(run, 5)
        == f"{said} 5; resume it there with -m executor.launch {moved} --resume"
    )
    shutil.rmtree(moved)
    assert fileio.where_now(run) is None  # deleted: not named, however the kernel names it
    assert "moved or was deleted at step 5" in moved_message(run, 5)


def test_a_run_directory_moved_as_it_is_prepared_is_said_to_have_moved_and_left_clean(
    tmp_path, capsys, monkeypatch
):
    """Found by the thirtieth round (a note): a run directory moved while `pipeplan run`
    wrote its files (after run.json) failed with "runs/sv/profile.json: write failed (No such
    file or directory)", not saying the folder had moved, and the moved folder kept the
    run.json and lock written before. The line says it moved and where; what the run wrote
    there is removed, and nothing is made at the old path."""
    from executor import launch

    runs = tmp_path / "runs"
    real = launch.write_atomic

    def moving(path, text):
        if path.name != "run.json":  # after run.json: the folder goes
            (runs / "sv").rename(runs / "sv2")
        return real(path, text)

    monkeypatch.setattr(launch, "write_atomic", moving)
    argv = ["run", "--model", "vit-digits", "--nproc", "1", "--name", "sv"]
    assert cli.main([*argv, "--runs-dir", str(runs)]) == 2
    assert capsys.readouterr().err == (
        f"pipeplan: error: {runs / 'sv'}: the run directory moved to {str(runs / 'sv2')!r} "
        "while the run was prepared; nothing was started: run it again\n"
    )
    assert sorted(p.name for p in runs.iterdir()) == ["sv2"]
    assert list((runs / "sv2").iterdir()) == []


def test_a_link_put_in_a_held_run_directorys_place_is_a_move_to_its_launcher(tmp_path, monkeypatch):
    """Found by the thirty-first round: a run folder moved mid-run and a link to it put at its
    name was a move to the ranks, but not to `pipeplan run`, which knew its folder by the
    resolved path: the line was a "failure on rank 0" with torchrun's advice, the logs and
    the resume named through the link. The launcher knows the folder by the name it claimed
    it by (links not followed) too: a link there is a move, named where the folder is now,
    and its own run is still read without a lock."""
    from executor import launch
    from pipeplan import fileio
    from pipeplan.formats import RunConfig

    monkeypatch.setattr(fileio, "_HELD", {})
    monkeypatch.setattr(fileio, "_HELD_AS", {}, raising=False)
    monkeypatch.chdir(tmp_path)
    run, real = Path("runs") / "s2", Path("runs") / "s2.real"
    fileio.claim_directory(run)
    assert not fileio.moved_away(run)
    run.rename(real)
    run.symlink_to("s2.real")
    assert fileio.moved_away(run)
    assert fileio.where_now(run) == real.resolve()
    with fileio.reading_run(run):  # its own: no lock taken, none refused
        pass
    cfg = RunConfig.model_validate({"name": "s2", "model": "vit-digits", "data": "digits"})
    line = launch.failure_line(0, "exited with code 1", run, cfg)
    assert line.startswith("training stopped") and f"moved to {real} while it trained" in line
    assert "rank 0" not in line and "executor.launch" not in line
    fileio.release_directory(run)
    assert fileio._HELD == {} and fileio._HELD_AS == {}


# A process that claims a run directory as a run does and holds it until it is killed.
HOLDER = """
import sys, time
from pipeplan.fileio import claim_directory
claim_directory(sys.argv[1])
print("held", flush=True)
time.sleep(120)
"""


@pytest.mark.timeout(60)
def test_a_live_runs_deleted_lock_file_does_not_free_its_directory(finished_run, tmp_path, capsys):
    """Found by the thirty-third round: `rm runs/k/.lock` while a run trained let a resume
    claim the folder with a new .lock (two processes writing one run) and a report read it
    mid-write. The folder itself is locked too, which nothing inside it can undo: with the
    file gone, a resume and a report are still refused in one line, and nothing changed."""
    import subprocess
    import sys

    run = copy_run(finished_run, tmp_path)
    root = Path(__file__).resolve().parents[1]
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(run)], cwd=root, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        (run / ".lock").unlink()
        before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
        for argv in (["run", "--resume", str(run), "--epochs", "2"], ["report", str(run)]):
            refused(argv, tmp_path, capsys, f"{run}: in use by")
        assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before
    finally:
        holder.kill()
        holder.wait()
    assert cli.main(["report", str(run)]) == 0  # the holder gone, the run reads again


def _empty_at_first_checkpoint(run: Path, deadline_s: float) -> None:
    """Delete the files at the top of `run` (as `rm -rf` does before the folders it cannot
    remove yet) once its first checkpoint is written; its ranks train on."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if (run / "checkpoints" / "latest").exists():
            for entry in run.iterdir():
                if entry.is_file() and not entry.is_symlink():
                    entry.unlink()
            return
        time.sleep(0.005)


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_a_run_directory_emptied_mid_run_stops_its_ranks(tmp_path, capsys):
    """Found by the forty-seventh round: `rm -rf runs/r` of a live run deleted run.json,
    run.jsonl and the lock file, then failed on checkpoints/ (the run had written a new
    checkpoint meanwhile), so the folder stayed where it was: the ranks, which compared the
    folder alone, trained to the end and wrote model/ and metrics.csv into a folder that was
    no run's. A rank compares the run's lock file too (`fileio.trains`): it stops at the next
    step, and the line says the run directory was deleted."""
    runs = tmp_path / "runs"
    run = runs / "rm"
    emptier = threading.Thread(target=_empty_at_first_checkpoint, args=(run, 240))
    emptier.start()
    argv = ["run", "--nproc", "1", "--epochs", "2", "--max-steps-per-epoch", "4"]
    code = cli.main([*argv, "--checkpoint-every", "1", "--name", "rm", "--runs-dir", str(runs)])
    emptier.join()
    err = capsys.readouterr().err
    assert code == 2, err
    assert err == (
        f"pipeplan: error: training stopped: {run}: the run directory moved or was deleted "
        "while it trained; if it was moved, resume it where it is now with `pipeplan run "
        "--resume NEWPATH`\n"
    )
    assert not (run / "model").exists() and not (run / "metrics.csv").exists()


def test_a_rank_tells_its_run_directory_emptied(tmp_path):
    """`fileio.moved_away` for a rank (`trains`): the folder at the path is the one it started
    in, and so is its lock file where it had one; a folder that had none is moved away only
    when the folder itself is."""
    from pipeplan.fileio import moved_away, trains

    held, bare = tmp_path / "held", tmp_path / "bare"
    held.mkdir()
    bare.mkdir()
    (held / ".lock").write_text("")
    trains(held)
    trains(bare)
    assert not moved_away(held) and not moved_away(bare)
    (held / ".lock").unlink()
    (bare / "run.json").write_text("{}")
    assert moved_away(held) and not moved_away(bare)
    (held / ".lock").write_text("")  # another lock file: another claim
    assert moved_away(held)


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    "put",
    [
        "file",
        # Long, for the default run's 15 minutes: [file] above, in the default run, puts a
        # non-directory at the run's path as the FIFO does, and its line takes the same path
        # (the Ctrl-C mark's clean-up through the folder where the run went, not the path).
        pytest.param("fifo", marks=pytest.mark.long),
    ],
)
def test_a_run_directory_moved_and_replaced_by_a_file_names_where_it_went(tmp_path, capsys, put):
    """Found by the forty-seventh round: a run directory moved mid-run and a file, a FIFO or a
    link put at its path ended the run with "runs/r/logs/interrupted: Not a directory", the
    launcher's clean-up of its Ctrl-C mark failing over the run's line. The mark is the run
    folder's, wherever it went: the line names where the run went and how to resume it."""
    runs = tmp_path / "runs"
    run, moved = runs / "mv", runs / "mv2"

    def move_and_replace() -> None:
        _move_at_first_checkpoint(run, moved, 240)
        if put == "file":
            run.write_text("not a run\n")
        else:
            os.mkfifo(run)

    mover = threading.Thread(target=move_and_replace)
    mover.start()
    argv = ["run", "--nproc", "1", "--epochs", "2", "--max-steps-per-epoch", "4"]
    code = cli.main([*argv, "--checkpoint-every", "1", "--name", "mv", "--runs-dir", str(runs)])
    mover.join()
    lines = capsys.readouterr().err.splitlines()
    assert code == 2, lines
    assert len(lines) == 1 and f"the run directory moved to {moved} while it trained" in lines[0]
    assert lines[0].endswith(f"resume with: pipeplan run --resume {moved}"), lines
    assert not (moved / "logs" / "interrupted").exists()


def _a_default_name_taken(tmp_path: Path, monkeypatch) -> tuple[Path, str]:
    """(runs, name): the default run name fixed to `name` (run-DATE-TIME's clock stopped),
    which a run in `runs` holds already."""
    import time as time_module

    real = time_module.strftime
    fixed = "run-20260101-000000"
    monkeypatch.setattr(
        time_module, "strftime", lambda f, *a: fixed if f.startswith("run-") else real(f, *a)
    )
    runs = tmp_path / "runs"
    (runs / fixed).mkdir(parents=True)
    (runs / fixed / "run.json").write_text("{}")
    return runs, fixed


def test_two_runs_started_in_one_second_without_a_name_both_start(tmp_path, capsys, monkeypatch):
    """Found by the forty-seventh round: two `pipeplan run` started without --name in the same
    second collided on the default run-DATE-TIME, and the second was refused "already holds a
    run; pick another --name", a name the user never gave. A default name a run holds is
    followed by -2, -3, …; a name given is still refused (that user chose it)."""
    runs, fixed = _a_default_name_taken(tmp_path, monkeypatch)
    argv = ["run", "--prepare-only", "--nproc", "1", "--epochs", "1", "--runs-dir", str(runs)]
    assert cli.main(argv) == 0, capsys.readouterr().err
    assert (runs / f"{fixed}-2" / "run.json").is_file()
    assert capsys.readouterr().out.rstrip().endswith(f"{runs / fixed}-2")
    assert cli.main([*argv, "--name", fixed]) == 2
    assert "already holds a run; pick another --name" in capsys.readouterr().err


@pytest.mark.parametrize("profile", [False, True], ids=["", "with --profile"])
def test_a_default_name_taken_as_the_run_claims_it_gives_way_to_the_next(
    tmp_path, capsys, monkeypatch, profile
):
    """Found by the forty-eighth round: the forty-seventh's fix chose the free name long
    before the claim, so runs started together still collided ("already holds a run; pick
    another --name", 4 of 4 with 2 to 5 runs). A default name another run claims first,
    even between the choice and the claim (forced here: the choice sees it free), gives way
    to the next free one. The fifty-fourth round: with --profile (or --plan), whose values
    rebuilt the configuration, the default name counted as given, and was refused (4 of 4)."""
    from executor import launch

    runs, fixed = _a_default_name_taken(tmp_path, monkeypatch)
    choices = []
    free_name = launch._free_name

    def late(root, name):  # the first choice made before the other run claimed the name
        choices.append(name if not choices else free_name(root, name))
        return choices[-1]

    monkeypatch.setattr(launch, "_free_name", late)
    argv = ["run", "--prepare-only", "--nproc", "1", "--epochs", "1", "--runs-dir", str(runs)]
    argv += ["--profile", str(PROFILE)] if profile else []
    assert cli.main(argv) == 0, capsys.readouterr().err
    assert choices == [fixed, f"{fixed}-2"]
    assert (runs / f"{fixed}-2" / "run.json").is_file()
    assert (runs / fixed / "run.json").read_text() == "{}"  # the other run's, untouched


@pytest.mark.parametrize("made", [True, False])
def test_a_new_run_on_a_full_disk_is_refused_naming_the_free_space(
    tmp_path, capsys, monkeypatch, made
):
    """Found by the forty-eighth round: the free-space check of the forty-seventh asked the
    run's folder, which a new run has not made yet, and so passed: a run with 140 KiB free
    trained, then failed at its checkpoint, leaving a folder it could neither resume nor
    start again. A new run asks the disk of --runs-dir (or the folder above it that exists)
    and is refused before anything is made."""
    from executor import launch

    real = os.statvfs

    def full(path):
        found = real(path)
        return os.statvfs_result((found.f_bsize, found.f_frsize, *found[2:4], 0, *found[5:]))

    monkeypatch.setattr(launch.os, "statvfs", full)
    runs = tmp_path / "runs"
    if made:
        runs.mkdir()
    argv = ["run", "--prepare-only", "--nproc", "1", "--epochs", "1", "--runs-dir", str(runs)]
    assert cli.main([*argv, "--name", "r"]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"pipeplan: error: {runs}: the disk holding it has nothing free; a run needs at least "
        "16.0 MiB to start (its records and each rank's error report): free some space and run "
        "it "
        "again\n"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == (["runs"] if made else [])


@pytest.mark.parametrize("made", [True, False])
def test_a_new_run_on_a_small_read_only_disk_is_told_it_is_read_only(
    tmp_path, capsys, monkeypatch, made
):
    """Found by the sixty-first round: `--runs-dir` on a read-only 3 MiB mount was told "the
    disk holding it has 3MiB free … free some space and run it again", which no freed space
    mends. The space checks ask first whether the disk can be written, and say it cannot."""
    from executor import launch

    real = os.statvfs

    def full_and_read_only(path):  # (as root, chmod stops no write: the mount's flag)
        found = real(path)
        flags = found.f_flag | os.ST_RDONLY
        return os.statvfs_result((*found[:4], 0, *found[5:8], flags, found.f_namemax))

    monkeypatch.setattr(launch.os, "statvfs", full_and_read_only)
    runs = tmp_path / "runs"
    if made:
        runs.mkdir()
    argv = ["run", "--prepare-only", "--nproc", "1", "--epochs", "1", "--runs-dir", str(runs)]
    assert cli.main([*argv, "--name", "r"]) == 2
    said = "cannot be written" if made else "cannot create directory"
    assert capsys.readouterr().err == f"pipeplan: error: {runs}: {said} (Read-only file system)\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == (["runs"] if made else [])


@pytest.mark.parametrize("free_mib", [20, 40])
def test_a_new_run_whose_first_checkpoint_cannot_fit_is_refused(
    tmp_path, capsys, monkeypatch, free_mib
):
    """Found by the fifty-seventh round: a run on 18 MB free passed the start's 16 MiB, trained
    both its epochs and lost them at its first checkpoint (19 MB: "no earlier checkpoint is
    kept … delete it to start again"). The start asks for the first checkpoint's bytes too
    (12 a parameter: vit-digits' 1.6 M make 19 MB) and says so; with room for it, it runs."""
    from executor import launch

    real = os.statvfs

    def some_free(path):
        found = real(path)
        blocks = (free_mib << 20) // found.f_frsize
        return os.statvfs_result((*found[:4], blocks, *found[5:]))

    monkeypatch.setattr(launch.os, "statvfs", some_free)
    runs = tmp_path / "runs"
    argv = ["run", "--prepare-only", "--nproc", "1", "--epochs", "1", "--runs-dir", str(runs)]
    code = cli.main([*argv, "--name", "r"])
    err = capsys.readouterr().err
    if free_mib == 40:
        assert code == 0, err
        return
    assert code == 2
    assert err.startswith(
        f"pipeplan: error: {runs}: the disk holding it has 20.0 MiB free; the run's first "
        "checkpoint takes about 1"
    ), err
    assert err.endswith(
        "12 bytes each: the float32 weights and AdamW's two moments), and a run needs 16.0 MiB "
        "more to start: free some space and run it again\n"
    ), err
    assert not runs.exists()


def test_the_disk_refusals_say_sizes_in_a_readers_unit(tmp_path, monkeypatch):
    """Found by the sixty-sixth round: the refusal gave the first checkpoint's size as a bare
    byte count ("takes about 19087992") beside "34MiB free" and "16MiB more": `format_bytes`
    writes a size that `parse_bytes` reads back, a bare count where no unit divides it. Sizes
    no unit divides, the free space's too, are said with one decimal of their unit."""
    from types import SimpleNamespace

    from executor import launch
    from pipeplan.errors import OutputError

    real = os.statvfs
    free = (34 << 20) + 12_345  # 34.01 MiB

    def some_free(path):
        found = real(path)
        return os.statvfs_result((found.f_bsize, 1, *found[2:4], free, *found[5:]))

    monkeypatch.setattr(launch.os, "statvfs", some_free)
    monkeypatch.setattr(launch, "size_limit", lambda: None)
    profile = SimpleNamespace(layers=[SimpleNamespace(params=1_590_666)])  # vit-digits'
    with pytest.raises(OutputError) as refused:
        launch.check_checkpoint_room(tmp_path, profile)
    assert str(refused.value) == (
        f"{tmp_path}: the disk holding it has 34.0 MiB free; the run's first checkpoint takes "
        "about 18.2 MiB (1,590,666 parameters, 12 bytes each: the float32 weights and AdamW's "
        "two moments), and a run needs 16.0 MiB more to start: free some space and run it again"
    )
    free = (140 << 10) + 7  # the forty-eighth round's 140 KiB
    with pytest.raises(OutputError, match=r"^\S+: the disk holding it has 140\.0 KiB free; a run"):
        launch.check_free_space(tmp_path)


def test_a_prepared_run_torchrun_starts_on_a_fuller_disk_is_refused(tmp_path, capsys, monkeypatch):
    """Found by the fifty-eighth round: torchrun's start of a run prepared with room asked
    for 16 MiB only, and on a disk filled since it trained and lost everything at its first
    checkpoint. Rank 0's start asks for the first checkpoint's bytes too."""
    from executor import launch
    from pipeplan.errors import OutputError

    real, free = os.statvfs, {"mib": 40}

    def some_free(path):
        found = real(path)
        blocks = (free["mib"] << 20) // found.f_frsize
        return os.statvfs_result((*found[:4], blocks, *found[5:]))

    monkeypatch.setattr(launch.os, "statvfs", some_free)
    runs = tmp_path / "runs"
    argv = ["run", "--prepare-only", "--nproc", "1", "--epochs", "1", "--runs-dir", str(runs)]
    assert cli.main([*argv, "--name", "r"]) == 0, capsys.readouterr().err
    free["mib"] = 20
    world = {"RANK": 0, "WORLD_SIZE": 1, "LOCAL_WORLD_SIZE": 1, "LOCAL_RANK": 0}
    with pytest.raises(OutputError, match=r"the disk holding it has 20\.0 MiB free; the run's"):
        launch.enter_run(runs / "r", resume=False, world=world)


@pytest.mark.parametrize("command", ["report", "export", "resume"])
def test_a_run_named_without_its_runs_folder_is_pointed_to(
    finished_run, tmp_path, capsys, monkeypatch, command
):
    """Found by the fifty-fifth round: `run --resume NAME` (the name `--name` took) said only
    "NAME: no such run directory", though runs/NAME was there. The line asks whether runs/NAME
    was meant; a name with no run there is told as before."""
    import shutil

    monkeypatch.chdir(tmp_path)
    shutil.copytree(finished_run, tmp_path / "runs" / "k", symlinks=True)
    argv = {
        "report": ["report", "k"],
        "export": ["export", "k", "--out", "o"],
        "resume": ["run", "--resume", "k", "--epochs", "3"],
    }[command]
    assert cli.main(argv) == 2
    assert (
        capsys.readouterr().err
        == "pipeplan: error: k: no such run directory; did you mean runs/k?\n"
    )
    assert cli.main([a.replace("k", "q") if a == "k" else a for a in argv]) == 2
    assert capsys.readouterr().err == "pipeplan: error: q: no such run directory\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs"]


REMOVED_AS_IT_TRAINS = {  # a file of the run removed mid-run → what the run's line says of it
    "run.jsonl": "removed while the run trained; the run's records are lost",
    "data.json": (
        "removed while the run trained; a resume or an export can no longer tell the data was kept"
    ),
    # The fifty-eighth round: replaced, the run ended well and every later command refused it.
    "data.json replaced": (
        "replaced while the run trained; a resume or an export can no longer tell the data was kept"
    ),
}


@pytest.mark.multiprocess
@pytest.mark.timeout(200)
# data.json removed or replaced: long, for the default run's 15 minutes (one path of the run's
# end check, as run.jsonl's; test_hostile_data holds data.json edited as the run trains).
@pytest.mark.parametrize(
    "name",
    [
        n if n == "run.jsonl" else pytest.param(n, marks=pytest.mark.long)
        for n in REMOVED_AS_IT_TRAINS
    ],
)
def test_a_run_whose_records_are_removed_as_it_trains_says_so(tmp_path, capsys, monkeypatch, name):
    """Found by the fifty-fifth round: run.jsonl removed under a running run (all its steps
    then trained, its checkpoints and model written) ended in "training failed on rank 0
    before the first step: runs/k: in use by a pipeplan process training it …, which has
    recorded no step yet", and advised an export every command then refused. The line says
    the records were removed, places the failure nowhere it cannot tell, and says what is
    left to do. The fifty-sixth: data.json removed went unnoticed, the run ending well (exit
    0) and its export refused; the run now fails at its end naming it (a run whose data reads
    no file has no data.json to miss)."""
    monkeypatch.chdir(Path(__file__).resolve().parents[1])  # the ranks import tests.killer_data
    run = tmp_path / "k"
    name, replaced = name.split()[0], name.endswith("replaced")
    monkeypatch.setenv("PIPEPLAN_TEST_REMOVE", str(run / name))
    if replaced:
        monkeypatch.setenv("PIPEPLAN_TEST_REPLACE", '{"schema_version": 1, "garbage": true}')
    argv = ["run", "--data", "tests.killer_data:digits_remove_records", "--epochs", "2"]
    argv += ["--max-steps-per-epoch", "4", "--global-batch", "16", "--nproc", "1"]
    assert cli.main([*argv, "--name", "k", "--runs-dir", str(tmp_path)]) == 2
    lines = [x for x in capsys.readouterr().err.splitlines() if "INFO" not in x]
    assert len(lines) == 1, lines
    assert lines[0].startswith("pipeplan: error: training failed on rank 0"), lines[0]
    said = REMOVED_AS_IT_TRAINS[f"{name} replaced" if replaced else name]
    assert f"{run / name}: {said}" in lines[0], lines[0]
    state = "was replaced" if replaced else "is gone"
    assert lines[0].endswith(
        f"; its {name} {state}, so no command reads it now: delete {run} to start again"
    ), lines[0]


def test_records_past_the_read_limit_are_said_to_be_pipeplan_s_own(finished_run, tmp_path, capsys):
    """Found by the fifty-seventh round: a run.jsonl past the 1 GiB every file is read to (a
    step's record takes about 0.3 KB a rank: 64 ranks reach it in some 58,000 steps) was
    refused as "larger than 1024 MiB, not a pipeplan file", of pipeplan's own records. The
    line says what the limit is and how a run reaches it (here a sparse file: no disk)."""
    run = tmp_path / "r"
    shutil.copytree(finished_run, run, symlinks=True)
    os.truncate(run / "run.jsonl", (1 << 30) + 1)
    assert cli.main(["report", str(run)]) == 2
    assert capsys.readouterr().err == (
        f"pipeplan: error: {run / 'run.jsonl'}: larger than 1024 MiB, the most pipeplan reads "
        "of a run's records (a step's record takes about 0.3 KB a rank: 64 ranks reach it in "
        "some 58,000 steps); a run that long is not read back yet\n"
    )


def _open_files_capped(limit: int):
    import resource

    def cap() -> None:
        resource.setrlimit(
            resource.RLIMIT_NOFILE, (limit, resource.getrlimit(resource.RLIMIT_NOFILE)[1])
        )

    return cap


@pytest.mark.timeout(180)
def test_a_low_open_files_limit_is_named_not_blamed_on_the_run(finished_run, tmp_path):
    """Found by the fifty-ninth round: under `ulimit -n 16` a run retried torch's store for two
    minutes and printed tracebacks (at 9 it aborted with no line); under `ulimit -n 7` export
    and resume read a healthy run's checkpoints as unreadable and said to delete it. A run
    starts only under MIN_OPEN_FILES; a file that cannot be opened for the limit says so and
    blames no file. Each in a process of its own, the limit set before it starts."""
    from pipeplan.spawn import MIN_OPEN_FILES

    run = copy_run(finished_run, tmp_path)
    root = Path(cli.__file__).resolve().parent
    env = {**os.environ, "PYTHONPATH": str(root)}
    commands = {
        16: ["run", "--nproc", "2", "--model", "vit-digits", "--epochs", "1", "--name", "n"],
        7: ["export", str(run), "--out", str(tmp_path / "x")],
    }
    before = snapshot(tmp_path)
    for limit, argv in commands.items():
        done = subprocess.run(
            [sys.executable, "-m", "cli", *argv],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=150,
            preexec_fn=_open_files_capped(limit),
        )
        assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
        if limit == 16:
            said = f"the open-files limit (ulimit -n) is 16; a run needs at least {MIN_OPEN_FILES}"
        else:
            said = "cannot be opened: this process has too many files open (the open-files "
        assert said in done.stderr and "delete" not in done.stderr, done.stderr
    assert snapshot(tmp_path) == before


def _run_under_file_size_limit(tmp_path: Path, limit: int, *flags: str):
    """`pipeplan run --nproc 1 --model vit-digits --name a FLAGS` in `tmp_path`, in a
    subprocess whose file size limit (`ulimit -f`) is `limit` bytes."""
    import resource

    def cap() -> None:
        hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))

    root = Path(cli.__file__).resolve().parent
    argv = [sys.executable, "-m", "cli", "run", "--nproc", "1", "--model", "vit-digits"]
    return subprocess.run(
        [*argv, "--name", "a", *flags],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(root)},
        capture_output=True,
        text=True,
        timeout=150,
        preexec_fn=cap,
    )


@pytest.mark.timeout(180)
# 9 MB, between model.pt's 4 bytes a parameter and optimizer.pt's 8: below 4 (the
# fifty-ninth round's 2 MB) is the same check, with `-m long`.
@pytest.mark.parametrize("limit", [pytest.param(2_048_000, marks=pytest.mark.long), 9_000_000])
def test_a_file_size_limit_below_a_checkpoint_is_refused_before_training(tmp_path, limit):
    """Found by the fifty-ninth round: under `ulimit -f 2000` (2 MB) a run passed the disk's
    room check, trained every step and failed writing its final checkpoint, none kept; by the
    sixtieth, between model.pt's 4 bytes a parameter and optimizer.pt's 8 (9 MB here: model.pt
    6.4 MB, optimizer.pt 12.7 MB). The limit is held to the largest file as the run starts."""
    done = _run_under_file_size_limit(
        tmp_path, limit, "--epochs", "1", "--max-steps-per-epoch", "2"
    )
    said = f"the file size limit (ulimit -f) is {limit:,} bytes, but the run's checkpoints write"
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert said in done.stderr and "an optimizer.pt of about 13.1 MiB" in done.stderr
    assert "(1,590,666 parameters, 8 bytes each: AdamW's two moments)" in done.stderr
    assert not (tmp_path / "runs").exists()


@pytest.mark.timeout(180)
def test_a_file_size_limit_below_the_runs_records_is_refused_before_training(tmp_path):
    """Found by the sixty-first round: under `ulimit -f 1150` a tiny model's run passed the
    checkpoint's bound (its optimizer.pt 79 KB), trained 1,667 steps and failed writing
    run.jsonl (705 bytes a step on 2 ranks), every step lost. The limit is held to what
    run.jsonl reaches by the run's end too (here 20 MB: optimizer.pt's 13.1 MiB fits, the
    43,140 steps' records do not)."""
    limit = 20_480_000
    done = _run_under_file_size_limit(tmp_path, limit, "--epochs", "60", "--global-batch", "2")
    assert done.returncode == 2 and done.stderr == (
        f"pipeplan: error: the file size limit (ulimit -f) is {limit:,} bytes, but the run's "
        "records, run.jsonl, reach about 23.2 MiB by its end (43,140 steps on 1 rank, at most "
        "538 bytes a step): raise it (ulimit -f unlimited)\n"
    ), done.stderr
    assert not (tmp_path / "runs").exists()


def test_a_prepared_run_torchrun_starts_under_a_lower_file_size_limit_is_refused(
    tmp_path, capsys, monkeypatch
):
    """Found by the sixty-first round (the test above): torchrun's ranks run under their own
    `ulimit -f`, which the prepare never saw. Rank 0's start holds its records to it."""
    from executor import launch
    from pipeplan.errors import OutputError

    # Data of a module: data.json holds its length (built-in data's is the prepare's alone).
    (tmp_path / "rt61_target.py").write_text("from executor.demotasks import target as load\n")
    monkeypatch.chdir(tmp_path)
    argv = ["run", "--prepare-only", "--nproc", "1", "--epochs", "120", "--global-batch", "2"]
    argv += ["--data", "rt61_target:load", "--name", "r"]
    try:
        assert cli.main(argv) == 0, capsys.readouterr().err
    finally:
        sys.modules.pop("rt61_target", None)
    monkeypatch.setattr(launch, "size_limit", lambda: 20_480_000)
    world = {"RANK": 0, "WORLD_SIZE": 1, "LOCAL_WORLD_SIZE": 1, "LOCAL_RANK": 0}
    said = r"the run's records, run.jsonl, reach about [0-9.]+ MiB by its end \(43,080 steps on 1"
    with pytest.raises(OutputError, match=said):
        launch.enter_run(Path("runs/r"), resume=False, world=world)


@pytest.mark.timeout(30)
def test_a_resumes_records_are_held_to_the_file_size_limit(tmp_path, monkeypatch):
    """Found by the sixty-first round (the test above): a resume appends to its run.jsonl,
    whose bytes now count with the steps it has left."""
    from executor import launch
    from pipeplan.errors import OutputError
    from pipeplan.formats import RunConfig

    cfg = RunConfig(model="vit-digits", epochs=2, nproc=2)
    records = tmp_path / "run.jsonl"
    records.write_bytes(b"x" * 700_000)
    monkeypatch.setattr(launch, "size_limit", lambda: 1_177_600)
    launch.check_records_room(cfg, 1000, 4, (records, 1600))  # 400 steps more fit
    with pytest.raises(OutputError) as refused:
        launch.check_records_room(cfg, 1000, 4, (records, 1000))
    assert str(refused.value) == (
        "the file size limit (ulimit -f) is 1,177,600 bytes, but the run's records, run.jsonl, "
        "reach about 1.5 MiB by its end (1,000 steps more on 2 ranks, at most 866 bytes a "
        "step; it holds 700,000 bytes now): raise it (ulimit -f unlimited)"
    )


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_a_transition_within_an_epoch_is_held_to_its_epochs_time(tmp_path, capsys):
    """Found by the sixty-first round: a phase's measured transition_s raised to 10^6 s was
    reported wherever summary.json did not hold it (a resumed run's, or none). A transition
    within an epoch (--freeze-every) runs on the epoch's clock: at most its epoch_s."""
    argv = ["run", "--nproc", "1", "--epochs", "2", "--max-steps-per-epoch", "4"]
    argv += ["--freeze", "auto", "--alpha", "0.9", "--freeze-every", "1"]
    assert cli.main([*argv, "--name", "mid", "--runs-dir", str(tmp_path)]) == 0
    run = tmp_path / "mid"
    assert cli.main(["report", str(run)]) == 0  # as the run wrote it: read
    capsys.readouterr()
    lines = _lines(run)
    phase = next(r for r in lines if r["kind"] == "phase" and r["start_step"] % 4)
    epoch = next(r for r in lines if r["kind"] == "epoch" and r["epoch"] == phase["start_epoch"])
    phase["transition_s"] = epoch["epoch_s"] * 2
    _rewrite(run, lines)
    (run / "summary.json").unlink()
    said = f"phase {phase['phase']}: transition_s {phase['transition_s']!r}, but it was entered "
    said += f"within epoch {epoch['epoch']} (at step {phase['start_step']}), all of which took"
    refused(["report", str(run)], tmp_path, capsys, (f"{run / 'run.jsonl'}:", said))
