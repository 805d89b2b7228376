"""Hostile inputs, by class: each case asserts exit code 2, exactly one line
`pipeplan: error: …` naming what is wrong, and that no file changed.

Classes: files (meaning and magnitude inside a file), records (run directories that
`report` and `calibrate` read). More classes (flags, resources, faults, concurrency) live
with the commands they concern.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

import cli
from executor.planning import shipped_profile

PROFILE = json.loads(shipped_profile("bert-tiny", "cpu").read_text())
CLUSTER = {
    "schema_version": 1,
    "nodes": 2,
    "devices_per_node": 4,
    "device_memory_bytes": 1 << 34,
    "intra_node": {"bandwidth_bytes_per_s": 1.5e10, "latency_s": 5e-6},
    "inter_node": {"bandwidth_bytes_per_s": 5e9, "latency_s": 2e-5},
}
PREVIEW = ["--global-batch", "64", "--samples", "6400", "--epochs", "3"]


def snapshot(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def refused(argv: list[str], root: Path, capsys, fragment: str) -> None:
    before = snapshot(root)
    assert cli.main(argv) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("pipeplan: error: "), lines[0]
    assert fragment in lines[0], lines[0]
    assert snapshot(root) == before


def with_path(doc: dict, path: tuple, value) -> dict:
    doc = json.loads(json.dumps(doc))
    target = doc
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return doc


# (what, document, the field the message must name)
CLUSTER_CASES = {
    "nodes as a string": (with_path(CLUSTER, ("nodes",), "2"), "nodes"),
    "version true": (with_path(CLUSTER, ("schema_version",), True), "schema_version"),
    "nodes 10**400": (with_path(CLUSTER, ("nodes",), 10**400), "nodes"),
    "memory 10**400 bytes": (with_path(CLUSTER, ("device_memory_bytes",), 10**400), "memory"),
    "bandwidth 1e-300": (
        with_path(CLUSTER, ("inter_node", "bandwidth_bytes_per_s"), 1e-300),
        "bandwidth",
    ),
    "latency 1e300 s": (with_path(CLUSTER, ("intra_node", "latency_s"), 1e300), "latency"),
    "unknown key": ({**CLUSTER, "gpus": 8}, "gpus"),
}


@pytest.mark.parametrize("case", CLUSTER_CASES, ids=str)
def test_cluster_files_with_wrong_meaning_or_magnitude(tmp_path, capsys, case):
    doc, fragment = CLUSTER_CASES[case]
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps(doc))
    profile = tmp_path / "profile.json"
    profile.write_text(json.dumps(PROFILE))
    argv = ["preview", "--profile", str(profile), "--cluster", str(path), *PREVIEW]
    refused(argv, tmp_path, capsys, fragment)


TEXT_CASES = {  # the first layer's first forward time, written as text
    "time NaN": ("NaN", "NaN"),
    "time 1e400": ("1e400", "out of range"),
    "time 1e308 s": ("1e308", "fwd_s"),
}


@pytest.mark.parametrize("case", TEXT_CASES, ids=str)
def test_profile_text_with_out_of_range_numbers(tmp_path, capsys, case):
    token, fragment = TEXT_CASES[case]
    marker = 123456.75  # a value no profile holds, replaced by the raw token
    text = json.dumps(with_path(PROFILE, ("layers", 0, "timings", 0, "fwd_s"), marker))
    path = tmp_path / "profile.json"
    path.write_text(text.replace(str(marker), token, 1))
    refused(["preview", "--profile", str(path), *PREVIEW], tmp_path, capsys, fragment)


def test_model_config_number_out_of_range(tmp_path, capsys):
    text = json.dumps(PROFILE)
    old = f'"hidden_size": {PROFILE["model"]["config"]["hidden_size"]}'
    assert old in text
    path = tmp_path / "profile.json"
    path.write_text(text.replace(old, '"hidden_size": 1e400', 1))
    refused(["preview", "--profile", str(path), *PREVIEW], tmp_path, capsys, "out of range")


def test_profile_param_bytes_beyond_any_machine(tmp_path, capsys):
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(with_path(PROFILE, ("layers", 1, "param_bytes"), 10**400)))
    refused(["preview", "--profile", str(path), *PREVIEW], tmp_path, capsys, "param_bytes")


def test_deeply_nested_freeze_trajectory(tmp_path, capsys):
    path = tmp_path / "trajectory.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    profile = tmp_path / "profile.json"
    profile.write_text(json.dumps(PROFILE))
    argv = ["preview", "--profile", str(profile), "--freeze-schedule", str(path), *PREVIEW]
    refused(argv, tmp_path, capsys, "trajectory.json")


# ----------------------------------------------------------------------------- records


def run_lines(directory: Path) -> list[dict]:
    return [json.loads(line) for line in (directory / "run.jsonl").read_text().splitlines()]


def rewrite(directory: Path, lines: list) -> None:
    text = "".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines)
    (directory / "run.jsonl").write_text(text)


def broken_boundaries(lines):
    lines[0]["layout"]["boundaries"] = [0, 10]  # one stage, but the rank map has two
    return lines


def stage_out_of_range(lines):
    step = next(line for line in lines if line["kind"] == "step")
    step["ranks"][0]["stage"] = 7
    return lines


def wrong_rank(lines):
    step = next(line for line in lines if line["kind"] == "step")
    step["ranks"][0]["rank"], step["ranks"][1]["rank"] = 1, 0
    return lines


def huge_time(lines):
    step = next(line for line in lines if line["kind"] == "step")
    step["step_s"] = 1e308
    return lines


def zero_times(lines):
    for line in lines:
        if line["kind"] == "step":
            line["step_s"] = 0.0
            for rank in line["ranks"]:
                rank.update({k: 0.0 for k in rank if k.endswith("_s")})
    return lines


def deep(lines):
    return [*lines[:3], "[" * 100_000 + "]" * 100_000]


RECORD_CASES = {
    "boundaries inconsistent with the rank map": (broken_boundaries, "run.jsonl:1"),
    "stage index out of range": (stage_out_of_range, "stage 7"),
    "rank not where the rank map puts it": (wrong_rank, "rank map"),
    "step time 1e308": (huge_time, "step_s"),
    "a line nested 100,000 deep": (deep, "run.jsonl:4"),
    "all-zero step times": (zero_times, "no phase with enough steps"),
}


@pytest.mark.parametrize("command", ["report", "calibrate"])
@pytest.mark.parametrize("case", RECORD_CASES, ids=str)
def test_run_records_with_wrong_meaning(tmp_path, capsys, case, command):
    if case == "all-zero step times" and command == "report":
        pytest.skip("a report shows what was measured, zeros included")
    from test_report import elastic_records, write_run

    run = write_run(tmp_path / "run", elastic_records())
    mutate, fragment = RECORD_CASES[case]
    rewrite(run, mutate(run_lines(run)))
    profile = shipped_profile("vit-digits", "cpu")
    argv = ["report", str(run)]
    if command == "calibrate":
        argv = ["calibrate", str(run), "--profile", str(profile), "--out", str(tmp_path / "c.json")]
    refused(argv, tmp_path, capsys, fragment)


@pytest.mark.parametrize("pointer", ["garbage", "../../../etc", "directory"])
def test_a_bad_latest_checkpoint_pointer(tmp_path, capsys, pointer):
    from test_report import elastic_records, write_run

    run = write_run(tmp_path / "run", elastic_records())
    latest = run / "checkpoints" / "latest"
    latest.parent.mkdir()
    if pointer == "directory":
        latest.mkdir()
    else:
        latest.write_text(pointer + "\n")
    refused(["run", "--resume", str(run)], tmp_path, capsys, "latest")


# ----------------------------------------------------------------------------- run directories


@pytest.mark.parametrize("name", ["../../x", "/abs", "a/b", "..", ".hidden", "x" * 200])
def test_run_names_stay_inside_the_runs_dir(tmp_path, capsys, name):
    runs = tmp_path / "runs"
    runs.mkdir()
    argv = ["run", "--model", "vit-digits", "--name", name, "--runs-dir", str(runs)]
    refused([*argv, "--prepare-only"], tmp_path, capsys, "--name")


CLAIM = """
import sys, time
from pipeplan.fileio import claim_directory
claim_directory(sys.argv[1])
print("held", flush=True)
time.sleep(60)
"""


def test_a_run_directory_is_held_by_one_process(tmp_path):
    """A second claim of the same directory fails while the first process lives, and
    succeeds once it is gone (the kernel drops the lock, whatever killed the holder)."""
    import subprocess
    import sys

    from pipeplan.fileio import claim_directory

    holder = subprocess.Popen(
        [sys.executable, "-c", CLAIM, str(tmp_path / "r")], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        probe = [sys.executable, "-c", CLAIM.replace("time.sleep(60)", ""), str(tmp_path / "r")]
        second = subprocess.run(probe, capture_output=True, text=True, timeout=60)
        assert second.returncode != 0 and "in use by another pipeplan process" in second.stderr
    finally:
        holder.kill()
        holder.wait(timeout=30)
    claim_directory(tmp_path / "r")  # free again, and now held here
    import fcntl

    with open(tmp_path / "r" / ".lock", "a") as other, pytest.raises(BlockingIOError):
        fcntl.flock(other.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)


# ----------------------------------------------------------------------------- flags, resources

FLAG_CASES = {
    "memory 1e400B": (["--device-memory", "1e400B"], "--device-memory"),
    "bandwidth 1e400GB/s": (["--inter-bw", "1e400GB/s"], "--inter-bw"),
    "bandwidth 1e-300B/s": (["--intra-bw", "1e-300B/s"], "--intra-bw"),
    "global batch 1000000007": (["--global-batch", "1000000007"], "limit of"),
    "epochs 10000000": (["--epochs", "10000000"], "limit of"),
    "micro-batches 100000": (["--micro-batches", "100000"], "limit of"),
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("case", FLAG_CASES, ids=str)
def test_flags_in_human_units_and_sizes_are_bounded(tmp_path, capsys, case):
    """Each of these used to give a traceback, run out of memory, or run for minutes."""
    extra, fragment = FLAG_CASES[case]
    profile = tmp_path / "profile.json"
    profile.write_text(json.dumps(PROFILE))
    base = ["--profile", str(profile), "--nodes", "1", "--devices-per-node", "2"]
    shape = {"--global-batch": "64", "--samples": "6400", "--epochs": "3"}
    for flag in extra[::2]:
        shape.pop(flag, None)
    argv = ["preview", *base, *extra, *(x for kv in shape.items() for x in kv)]
    refused(argv, tmp_path, capsys, fragment)


HUGE = """
import resource, sys, cli
resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
sys.exit(cli.main(sys.argv[1:]))
"""


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "extra",
    [["--global-batch", "1048576", "--samples", "1099511627776"], ["--epochs", "10000"]],
    ids=["largest batch", "most epochs"],
)
def test_the_largest_allowed_inputs_finish_within_memory_and_time(tmp_path, extra):
    """At the stated limits, under a 4 GiB address-space cap: an answer, not a hang."""
    import subprocess
    import sys
    import time

    profile = tmp_path / "profile.json"
    profile.write_text(json.dumps(PROFILE))
    shape = {"--global-batch": "64", "--samples": "6400", "--epochs": "3"}
    for flag in extra[::2]:
        shape.pop(flag)
    argv = ["preview", "--profile", str(profile), "--nodes", "1", "--devices-per-node", "2"]
    argv += [*extra, *(x for kv in shape.items() for x in kv)]
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-c", HUGE, *argv], capture_output=True, text=True)
    assert time.monotonic() - start < 60
    assert done.returncode in (0, 2), done.stderr[-2000:]
    if done.returncode == 2:
        assert len(done.stderr.strip().splitlines()) == 1
