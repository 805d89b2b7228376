"""Hostile resumes and repeated inputs (an independent round's findings), by class: each case
asserts exit code 2, exactly one line `pipeplan: error: …` naming the file and field, and
that no file of the run changed (`refused`). The one real run is the shared (conftest)
`finished_run` (1 rank, 1 epoch of 2 steps); report and calibrate read synthetic records.

Classes: a checkpoint manifest that contradicts its run; records that end before the
checkpoint; a resume of a finished run; one run given twice; step records out of range;
run.json edited since its checkpoint (resume, export, report, calibrate); data.json deleted,
emptied or naming other files, and a data file that is not a regular file; one run copied;
a run killed after a checkpoint at an epoch's end (its decision counted, not a run's end).
"""

from __future__ import annotations

import json
import os
import pstats
import re
import shlex
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import test_hostile
import test_hostile_data
from test_hostile import copy_run, refused, snapshot
from test_hostile_runs import PROFILE, _lines, _readable, _rewrite, _steps
from test_report import elastic_records, write_run
from text_data import reviews, write_jsonl

import cli
from pipeplan.errors import BadArgumentError, InputFileError, Stopped, quoted

MORE = ["--epochs", "2"]  # a resume that has an epoch to train: only the damage stops it


def _manifest(run: Path) -> Path:
    (path,) = (run / "checkpoints").glob("step-*/manifest.json")
    return path


def _edit_manifest(run: Path, **changes) -> None:
    path = _manifest(run)
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


def _other_layout(run: Path) -> dict:
    """The layout the checkpoint was taken in, run as twice the micro-batches of half the
    size: the same batch, a layout the executor runs, but not the phase's."""
    layout = json.loads(_manifest(run).read_text())["layout"]
    half = layout["micro_batch_size"] // 2
    return {**layout, "micro_batches": layout["micro_batches"] * 2, "micro_batch_size": half}


# A grad_history entry of a run with nothing frozen: a norm for each of vit-digits' 10 layers.
EVERY_LAYER = {str(layer): 1.0 for layer in range(10)}
# (manifest fields as edited, what the one line names besides manifest.json)
MANIFESTS = {
    "another model": ({"model": "bert-synth"}, "model: 'bert-synth', but the run trains"),
    "a negative gradient norm": ({"grad_history": [{"0": -1.0}]}, "grad_history.0.0"),
    "a layer the model lacks": ({"grad_history": [{"99": 1.0}]}, "grad_history.0: layer 99"),
    "a layer key that is not an index": ({"grad_history": [{"-1": 1.0}]}, "grad_history.0"),
    "more history than decisions": (
        {"grad_history": [EVERY_LAYER] * 50},
        "grad_history: 50 entries, but --freeze auto made 0 gradient decisions by step 2",
    ),
    # Found by the seventeenth round: an active layer missing from an entry (or a subnormal
    # norm) was accepted and carried into every later checkpoint.
    "an active layer missing from grad_history": (
        {"grad_history": [{k: v for k, v in EVERY_LAYER.items() if k != "3"}]},
        "grad_history.0: layer 3 is missing; every active layer (0..9) has a norm",
    ),
    "a subnormal gradient norm": (
        {"grad_history": [{**EVERY_LAYER, "3": 5e-324}]},
        ("grad_history.0.3", "subnormal"),
    ),
    "sums without steps": ({"grad_norm_sums": {"1": 1.0}}, "grad_norm_steps is 0"),
    "a negative sum": ({"grad_norm_sums": {"0": -1.0}}, "grad_norm_sums.0"),
    "a step that is not its epoch's": (
        # Its step summed, as a run writes a mid-epoch checkpoint (the manifest's own rule).
        {"epoch": 0, "step_in_epoch": 1, "grad_norm_steps": 1, "grad_norm_sums": EVERY_LAYER},
        "not a position",
    ),
    # The checkpoint's own configuration is compared first (the fifty-ninth round).
    "another world": ({"world_size": 2}, "config.nproc 1, but world_size 2: a checkpoint is"),
    "a phase never recorded": ({"phase": 5}, "phase: 5, but run.jsonl has no such phase"),
    "frozen layers the phase did not freeze (no layout)": (
        {"layout": None, "frozen_layers": 1},
        "frozen_layers: 1, but phase 0 froze 0",
    ),
    # run_ends (twenty-third round's fix): epochs' starts before the checkpoint, in order.
    "a run end at the checkpoint's step": (
        {"run_ends": [2]},
        "run_ends [2]: step 2 is not before the checkpoint's step 2",
    ),
    "a run end inside an epoch": ({"run_ends": [1]}, "run_ends [1]: step 1 is not an epoch's end"),
    "a run end listed twice": ({"run_ends": [1, 1]}, "run_ends [1, 1] is not ascending"),
    # Found by the twentieth round: `cache` was a free-form dict, {"bogus": 1} accepted.
    "a free-form cache": ({"cache": {"bogus": 1}}, "field 'cache"),
    "a cache in an uncached phase": (
        {"cache": dict(format=2, frozen_layers=0, num_samples=64, budget_bytes=0, filled=0)},
        "cache describes a cache, but the layout is not cached",
    ),
}


def _unlabelled_layout(run: Path) -> dict:
    """The checkpoint's layout with one layer frozen (and the manifest's frozen_layers with
    it): a field its label does not show, so both layouts print as the same label."""
    layout = json.loads(_manifest(run).read_text())["layout"]
    return {"layout": {**layout, "frozen_layers": 1}, "frozen_layers": 1}


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
@pytest.mark.parametrize("case", [*MANIFESTS, "another layout", "a layout of the same label"])
def test_resume_refuses_a_manifest_that_contradicts_its_run(finished_run, tmp_path, capsys, case):
    """Each field of checkpoints/step-N/manifest.json is checked for meaning against run.json,
    the model and run.jsonl before any rank starts: a vit-digits run resumed from a manifest
    saying bert-synth, a negative norm, layer 99 or 50 measurements after one epoch, and
    trained on from them. Found by the seventeenth round: an entry of grad_history lacking an
    active layer, or holding a subnormal norm, was accepted and carried forward. Found by the
    eighteenth round: a layout that differed where its label does not show was refused as
    "layout: 1x1 M=4 1f1b, but phase 0 ran 1x1 M=4 1f1b"; the first field that differs is
    named, with both values."""
    run = copy_run(finished_run, tmp_path)
    if case == "another layout":
        changes = {"layout": _other_layout(run)}
        ran = changes["layout"]["micro_batches"] // 2
        fragment = f"layout.micro_batches: {2 * ran}, but phase 0 ran {ran}"
    elif case == "a layout of the same label":
        changes, fragment = _unlabelled_layout(run), "layout.frozen_layers: 1, but phase 0 ran 0"
    else:
        changes, fragment = MANIFESTS[case]
    _edit_manifest(run, **changes)
    argv = ["run", "--resume", str(run), *MORE]
    fragments = fragment if isinstance(fragment, tuple) else (fragment,)
    refused(argv, tmp_path, capsys, (str(_manifest(run)), *fragments))


def _edit_phase_schedule(run: Path, schedule: str) -> None:
    """run.jsonl with every phase record's layout.schedule set to `schedule`."""
    path = run / "run.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    for record in records:
        if record.get("kind") == "phase":
            record["layout"]["schedule"] = schedule
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def _set_manifest_schedule(run: Path, schedule: str) -> None:
    """The (one) checkpoint manifest's layout.schedule set to `schedule`."""
    layout = json.loads(_manifest(run).read_text())["layout"]
    _edit_manifest(run, layout={**layout, "schedule": schedule})


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
@pytest.mark.parametrize("edited", ["run.jsonl", "manifest"])
@pytest.mark.parametrize("command", ["report", "calibrate", "export"])
def test_every_command_holds_the_checkpoint_to_the_records(
    finished_run, tmp_path, capsys, command, edited
):
    """Found by the twentieth round: only resume held the checkpoint's layout to run.jsonl's
    phase records. With run.jsonl's schedule edited to gpipe, report showed a schedule the
    run never ran and calibrate fitted it (exit 0); with the manifest's, export wrote its
    weights. All three make resume's check now; with one checkpoint, which file was edited
    cannot be told, so both are named."""
    run = copy_run(finished_run, tmp_path)
    ran = json.loads(_manifest(run).read_text())["layout"]["schedule"]
    other = "gpipe" if ran == "1f1b" else "1f1b"
    if edited == "run.jsonl":
        _edit_phase_schedule(run, other)
        shown, recorded = ran, other
    else:
        _set_manifest_schedule(run, other)
        shown, recorded = other, ran
    argv = _priced_argv(command, run, tmp_path)
    fragment = (
        f"{_manifest(run)}: layout.schedule: {shown}, but phase 0 ran {recorded} in "
        f"{run / 'run.jsonl'}; one of the two was edited"
    )
    refused(argv, tmp_path, capsys, fragment)
    assert not (tmp_path / "c.json").exists() and not (tmp_path / "out").exists()


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_resume_names_run_jsonl_when_the_checkpoints_agree_against_it(
    mid_epoch_run, tmp_path, capsys
):
    """Found by the twentieth round: run.jsonl's schedule edited was refused as
    `…/checkpoints/step-3/manifest.json: layout.schedule: 1f1b, but phase 0 ran gpipe`,
    blaming the unedited manifest. Both checkpoints taken in the phase agree against the
    record: run.jsonl is named."""
    run = copy_run(mid_epoch_run, tmp_path)
    manifests = sorted((run / "checkpoints").glob("step-*/manifest.json"))
    ran = json.loads(manifests[-1].read_text())["layout"]["schedule"]
    other = "gpipe" if ran == "1f1b" else "1f1b"
    _edit_phase_schedule(run, other)
    fragment = (
        f"{run / 'run.jsonl'}: phase 0's layout.schedule is {other}, but every checkpoint "
        f"taken in it says {ran}"
    )
    refused(["run", "--resume", str(run), "--epochs", "2"], tmp_path, capsys, fragment)


# ------------------------------------------------- twenty-fourth round: every file of the run


def _commands(run: Path, tmp_path: Path) -> dict[str, list[str]]:
    """Every command given a run, by name: each must read the run's files alike."""
    return {
        "report": ["report", str(run)],
        "calibrate": [
            *("calibrate", str(run), "--profile", str(run / "profile.json")),
            *("--out", str(tmp_path / "c.json")),
        ],
        "export": ["export", str(run), "--out", str(tmp_path / "out")],
        "resume": ["run", "--resume", str(run), *MORE],
        "export step-2": ["export", str(run), "--checkpoint", "step-2", "--out", f"{tmp_path}/out"],
    }


# An older kept checkpoint's manifest edited: (fields as edited, what the one line says).
OLDER_MANIFESTS = {
    "an unknown key": ({"evil": 1}, "invalid checkpoint manifest: field 'evil'"),
    "another world size": ({"world_size": 3}, "config.nproc 1, but world_size 3: a checkpoint is"),
    "another epoch": ({"epoch": 1}, "epoch: 1 at step 2, but run.jsonl recorded step 1 in epoch 0"),
}


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "command, case",
    [(c, "an unknown key") for c in ("report", "calibrate", "export", "resume")]
    + [("report", "another world size"), ("export", "another epoch")],
)
def test_every_command_holds_an_older_checkpoints_manifest(
    mid_epoch_run, tmp_path, capsys, command, case
):
    """Found by the twenty-fourth round: step-4's manifest beside the latest step-6, edited
    (an unknown key, run_ends not a list, world_size 3), was read by neither report,
    calibrate nor the default export (exit 0); only `export --checkpoint step-4` refused it.
    Every kept checkpoint older than the one read is held to its schema and to run.jsonl
    (`history.check_older_manifests`), manifests only: one line naming its manifest.json."""
    run = copy_run(mid_epoch_run, tmp_path)
    path = run / "checkpoints" / "step-2" / "manifest.json"
    assert (run / "checkpoints" / "latest").read_text() == "step-3\n"
    changes, fragment = OLDER_MANIFESTS[case]
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))
    refused(_commands(run, tmp_path)[command], tmp_path, capsys, (f"{path}: ", fragment))
    assert not (tmp_path / "c.json").exists() and not (tmp_path / "out").exists()


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
@pytest.mark.parametrize("command", ["report", "export"])
def test_a_checkpoint_manifest_that_is_a_link_is_not_read_through(
    mid_epoch_run, tmp_path, capsys, command
):
    """Found by the twenty-sixth round: a checkpoint's manifest.json replaced by a link to a
    copy was read and exported through with exit 0, where a linked model.pt had the
    checkpoint passed over. An older checkpoint's is refused by every command; the latest's
    is passed over by export, as any checkpoint that does not verify."""
    run = copy_run(mid_epoch_run, tmp_path)
    older = run / "checkpoints" / "step-2" / "manifest.json"
    copy = tmp_path / "copy.json"
    copy.write_bytes(older.read_bytes())
    older.unlink()
    older.symlink_to(copy)
    said = f"{older}: is a symbolic link; a checkpoint writes its own manifest"
    refused(_commands(run, tmp_path)[command], tmp_path, capsys, said)
    if command == "export":  # the latest linked: passed over for the older one, with a notice
        older.unlink()
        older.write_bytes(copy.read_bytes())
        latest = run / "checkpoints" / "step-3" / "manifest.json"
        copy.write_bytes(latest.read_bytes())
        latest.unlink()
        latest.symlink_to(copy)
        assert cli.main(_commands(run, tmp_path)["export"]) == 0
        err = capsys.readouterr().err
        assert f"{latest}: is a symbolic link" in err and "step-2" in err, err


def _without_layer_9(doc: dict) -> dict:
    """The manifest's sums with layer 9's (active, with parameters) left out."""
    return {k: v for k, v in doc["grad_norm_sums"].items() if k != "9"}


# An older kept checkpoint's manifest edited in a field only the run, its records or its model
# tell: (the edit of the document, what the one line says).
OLDER_RUN_FIELDS = {
    "another model": (lambda d: {"model": "bert-tiny"}, "model: 'bert-tiny', but the run trains"),
    "a sum of a layer the model lacks": (
        lambda d: {"grad_norm_sums": {**d["grad_norm_sums"], "99": 1.0}},
        "grad_norm_sums: layer 99, but the model has layers 0..9",
    ),
    "an active layer's sum left out": (
        lambda d: {"grad_norm_sums": _without_layer_9(d)},
        "grad_norm_sums: layer 9 is missing, but grad_norm_steps is 2",
    ),
    "a step_in_epoch its records contradict": (
        lambda d: {"step_in_epoch": 1, "grad_norm_steps": 1},
        "step_in_epoch: 1 at step 2, but run.jsonl records epoch 0 from step 0",
    ),
    "fewer steps summed than its position": (
        lambda d: {"grad_norm_steps": 1},
        "grad_norm_steps 1, but step 2 is 2 steps after its epoch's start (step 0)",
    ),
    "more epochs than the later checkpoint": (
        lambda d: {"config": {**d["config"], "epochs": 5}},
        "config.epochs: 5, but the later checkpoint step-3 was trained with 1",
    ),
}


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "command, case",
    [(c, "another model") for c in ("report", "calibrate", "export", "resume")]
    + [(c, "a sum of a layer the model lacks") for c in ("report", "calibrate")]
    + [(c, "an active layer's sum left out") for c in ("export", "resume")]
    + [(c, "a step_in_epoch its records contradict") for c in ("report", "export", "resume")]
    + [(c, "fewer steps summed than its position") for c in ("report", "export")]
    + [(c, "more epochs than the later checkpoint") for c in ("report", "export step-2")],
)
def test_every_command_holds_every_field_of_an_older_manifest_to_the_run(
    mid_epoch_run, tmp_path, capsys, command, case
):
    """Found by the twenty-sixth round: step-2's manifest beside the latest step-3 saying
    model "bert-tiny" in a vit-digits run was reported, calibrated, exported and resumed from
    (exit 0); the twenty-fourth round's check held its other fields to run.jsonl, not its
    model. Going through the manifest field by field, its sums of a layer the model lacks or
    without an active layer, a step_in_epoch its records contradict, and config.epochs above
    the later checkpoint's passed as well. Each kept manifest is held to what the run and its
    records say, and (export and resume, which build it, after the records) its model, as
    the latest is: one line naming its manifest.json, its records' word first alike.
    Found by the sixty-fourth round: `export --checkpoint step-2` blamed that config.epochs
    on the unedited run.json ("epochs is 1 but checkpoint step-2 was trained with 5"), which
    agrees with the later checkpoint: the manifest is named, as the other commands name it."""
    run = copy_run(mid_epoch_run, tmp_path)
    path = run / "checkpoints" / "step-2" / "manifest.json"
    assert (run / "checkpoints" / "latest").read_text() == "step-3\n"
    edit, fragment = OLDER_RUN_FIELDS[case]
    doc = json.loads(path.read_text())
    path.write_text(json.dumps({**doc, **edit(doc)}))
    refused(_commands(run, tmp_path)[command], tmp_path, capsys, (f"{path}: ", fragment))
    assert not (tmp_path / "c.json").exists() and not (tmp_path / "out").exists()


# The data's facts, which a run of built-in data (no data.json) records none of.
FACTS = {"train_samples": 5, "eval_samples": 359, "num_labels": 10}
FACTS |= {"padded": False, "augmented": False}


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "command, case",
    [(c, "sum") for c in ("report", "calibrate")]
    + [(c, "facts") for c in ("report", "calibrate", "export", "resume")]
    + [(c, "latest facts") for c in ("report", "calibrate")],
)
def test_an_older_manifest_is_held_to_the_latests_rules_by_every_command(
    mid_epoch_run, tmp_path, capsys, command, case
):
    """Found by the sixty-first round: step-2's manifest without the sum of layer 9 (active,
    with parameters) was reported and calibrated from, which export and resume refused (the
    rule needed the model, which only they build); and step-2's data_facts added in a run
    of built-in data (no data.json) was exported and resumed from, though the latest
    manifest's were refused. report and calibrate take the layers with parameters from the
    profile, and export and resume hold every kept manifest to data.json as the latest.
    Found by the sixty-second round: those data_facts, in step-2's manifest or the latest's,
    were still reported and calibrated from; a run of built-in data writes no data.json and
    records no facts, so every command holds each manifest to that (`check_manifest_records`)."""
    run = copy_run(mid_epoch_run, tmp_path)
    assert not (run / "data.json").exists()
    step = "step-3" if case == "latest facts" else "step-2"
    path = run / "checkpoints" / step / "manifest.json"
    doc = json.loads(path.read_text())
    if case == "sum":
        doc["grad_norm_sums"] = _without_layer_9(doc)
        fragment = "grad_norm_sums: layer 9 is missing, but grad_norm_steps is 2"
    else:
        doc["data_facts"] = FACTS
        fragment = "data_facts is not null, but the run's data 'digits' is built in: the run "
        fragment += "writes no data.json, and its checkpoints record no facts of the data (null)"
    path.write_text(json.dumps(doc))
    refused(_commands(run, tmp_path)[command], tmp_path, capsys, (f"{path}: {fragment}",))
    assert not (tmp_path / "c.json").exists() and not (tmp_path / "out").exists()


# 1 rank, 1 epoch of 4 steps, --freeze auto deciding every 2 steps, a checkpoint each step:
# step-3 (its history the decision at step 2, which no record holds) and the final step-4 kept.
EVERY_2_STEPS = ["--nproc", "1", "--epochs", "1", "--max-steps-per-epoch", "4"]
EVERY_2_STEPS += ["--checkpoint-every", "1", "--freeze", "auto", "--freeze-every", "2"]


@pytest.fixture(scope="module")
def every_2_steps_run(tmp_path_factory) -> Path:
    """Uninterrupted: EVERY_2_STEPS' run."""
    root = tmp_path_factory.mktemp("every2")
    assert cli.main(["run", *EVERY_2_STEPS, "--name", "e", "--runs-dir", str(root)]) == 0
    return root / "e"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("command", ["resume", "export"])
def test_every_checkpoint_corrupted_is_said_of_them_all(
    every_2_steps_run, tmp_path, capsys, command
):
    """Found by the thirty-fifth round: with every checkpoint's weights corrupted, resume and
    export named the newest alone ("step-4/model.pt: checksum mismatch"), which read as if
    removing it would do. The line says the older ones failed too and none is left."""
    run = copy_run(every_2_steps_run, tmp_path)
    for model in (run / "checkpoints").glob("step-*/model.pt"):
        data = bytearray(model.read_bytes())
        data[len(data) // 2] ^= 0xFF
        model.write_bytes(bytes(data))
    argv = {
        "resume": ["run", "--resume", str(run), "--epochs", "2"],
        "export": ["export", str(run), "--out", str(tmp_path / "out")],
    }[command]
    said = (
        "step-4/model.pt: checksum mismatch",
        "the older step-3 cannot be used either (model.pt: checksum mismatch",
    )
    refused(argv, tmp_path, capsys, (*said, "no checkpoint of this run is left"))


@pytest.mark.multiprocess
@pytest.mark.timeout(240)
def test_a_finished_runs_resume_that_falls_back_leaves_a_run_that_reads(
    every_2_steps_run, tmp_path, capsys
):
    """Found by the thirty-fourth round: a finished run whose final checkpoint is corrupted,
    resumed for another epoch, fell back to the older step-3 with the notice, trained to
    the end, and then failed: "summary.json: steps is 4, but run.jsonl records 8 steps and no
    resume at step 4". The first run's summary.json, of the steps the resume dropped, was
    held to the records the resume rewrote; the run could no longer be resumed, reported or
    exported. The resume drops a summary of the steps it trains again (the run writes it
    anew at its end): it ends 0 and every command reads the run."""
    run = copy_run(every_2_steps_run, tmp_path)
    model = run / "checkpoints" / "step-4" / "model.pt"
    data = bytearray(model.read_bytes())
    data[len(data) // 2] ^= 0xFF
    model.write_bytes(bytes(data))
    assert cli.main(["run", "--resume", str(run), "--epochs", "2"]) == 0
    err = capsys.readouterr().err
    assert "resuming from the older step-3" in err, err[-2000:]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == 8, summary
    assert cli.main(["report", str(run)]) == 0
    assert cli.main(["export", str(run), "--out", str(tmp_path / "out")]) == 0
    assert (tmp_path / "out" / "config.json").exists()


# A held-out set whose items 8..23 raise in a rank while FALLBACK_EVAL_FAILS is set: the launcher's
# checks read it whole (no RANK), the ranks fail as they evaluate an epoch.
FALLBACK_EVAL_FAILS = "PIPEPLAN_TEST_EVAL_FAILS"
FALLBACK_DATA = test_hostile_data.RANK_LENGTH_MODULE.replace(
    "        g = torch.Generator()",
    f'        if self.offset and 8 <= i < self.n - 8 and "RANK" in os.environ and os.environ.get('
    f'"{FALLBACK_EVAL_FAILS}"):\n'
    '            raise ValueError("held-out item %d is unreadable" % i)\n'
    "        g = torch.Generator()",
)


@pytest.mark.multiprocess
@pytest.mark.timeout(400)
# In `-m long`, for the suite's time: the default run keeps
# test_a_finished_runs_resume_that_falls_back_leaves_a_run_that_reads.
@pytest.mark.long
def test_a_fallback_resume_that_fails_leaves_the_checkpoint_it_continued_from_latest(
    tmp_path, capfd, monkeypatch
):
    """Found by the thirty-fifth round: a finished 2-epoch run (step-3, final step-6) whose
    step-6/model.pt was corrupted, resumed: it fell back to step-3 with the notice, trained
    epoch 2 and failed as it evaluated it. `latest` still named the corrupt step-6: the line
    said "every epoch was trained: its model: pipeplan export …" (export then fell back to
    the model after epoch 1), and report refused the records, held to step-6's manifest
    ("no record of epoch 1, which ended before the checkpoint step-6 (epoch 2) was taken; the
    run's history is lost"). The resume now points `latest` at step-3, the checkpoint it
    continues from, and moves step-6 aside as unusable-step-6 (its bytes kept), with one
    notice saying so: the line says to resume, report and export read step-3 without a
    word of step-6, and the resume it names trains the run to its end."""
    name = "rt35_fallback_eval"
    (tmp_path / f"{name}.py").write_text(FALLBACK_DATA.format(length=256))
    monkeypatch.chdir(tmp_path)
    argv = ["run", "--model", "vit-digits", "--data", f"{name}:load", "--epochs", "2"]
    argv += ["--global-batch", "16", "--freeze", "none", "--name", "f", "--nproc", "1"]
    argv += ["--max-steps-per-epoch", "3", "--checkpoint-every", "3", "--runs-dir", "runs"]
    run = tmp_path / "runs" / "f"
    try:
        assert cli.main(argv) == 0
        checkpoints = run / "checkpoints"
        assert sorted(p.name for p in checkpoints.iterdir()) == ["latest", "step-3", "step-6"]
        model = checkpoints / "step-6" / "model.pt"
        data = bytearray(model.read_bytes())
        data[len(data) // 2] ^= 0xFF
        model.write_bytes(bytes(data))
        step_6 = snapshot(checkpoints / "step-6")
        capfd.readouterr()
        monkeypatch.setenv(FALLBACK_EVAL_FAILS, "1")
        assert cli.main(["run", "--resume", str(run)]) == 2
        monkeypatch.delenv(FALLBACK_EVAL_FAILS)
        err = capfd.readouterr().err
        lines = err.strip().splitlines()
        assert "resuming from the older step-3" in err, err[-3000:]
        moved = (
            f"{checkpoints}: step-6, which did not verify, is moved to unusable-step-6 (kept, "
            "never read by pipeplan); latest names step-3, which the run continues from"
        )
        assert [line for line in lines if "unusable-step-6" in line] == [
            f"pipeplan: rank 0: WARNING: {moved}"
        ], err[-3000:]
        assert lines[-1].startswith(
            "pipeplan: error: training failed on rank 0 after step 5, at the end of epoch 2: "
        ), lines[-1]
        assert "ValueError: held-out item" in lines[-1], lines[-1]
        assert lines[-1].endswith(f"; resume with: pipeplan run --resume {run}"), lines[-1]
        assert (checkpoints / "latest").read_text() == "step-3\n"
        assert sorted(p.name for p in checkpoints.iterdir()) == [
            "latest",
            "step-3",
            "unusable-step-6",
        ]
        assert snapshot(checkpoints / "unusable-step-6") == step_6  # the bytes, as they were
        assert cli.main(["report", str(run)]) == 0
        assert cli.main(["export", str(run), "--out", str(tmp_path / "out")]) == 0
        err = capfd.readouterr().err
        assert "step-6" not in err, err
        assert (tmp_path / "out" / "config.json").exists()
        assert cli.main(["run", "--resume", str(run)]) == 0  # the resume the line named
        assert (checkpoints / "latest").read_text() == "step-6\n"
        assert snapshot(checkpoints / "unusable-step-6") == step_6
        assert cli.main(["report", str(run)]) == 0
    finally:
        sys.modules.pop(name, None)


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
@pytest.mark.parametrize("command", ["report", "calibrate", "export", "resume"])
def test_an_older_manifests_grad_history_is_the_later_ones_so_far(
    every_2_steps_run, tmp_path, capsys, command
):
    """Found going through the manifest field by field for the twenty-sixth round: step-3's
    grad_history entry of the --freeze-every decision at step 2 (no epoch record holds it)
    edited beside the latest step-4 was accepted by every command; a fallback to step-3
    would have decided with it. AutoFreeze only appends, so an older checkpoint's history is
    the later one's first entries: both manifests named, neither taken for the truth."""
    run = copy_run(every_2_steps_run, tmp_path)
    path = run / "checkpoints" / "step-3" / "manifest.json"
    doc = json.loads(path.read_text())
    assert (doc["step_in_epoch"], len(doc["grad_history"])) == (3, 1)  # as the run wrote it
    doc["grad_history"][0]["9"] *= 2
    path.write_text(json.dumps(doc))
    fragment = (f"{path}: grad_history.0 is not entry 0 of the later checkpoint step-4's",)
    argv = _commands(run, tmp_path)[command]
    if command == "resume":
        argv = ["run", "--resume", str(run), "--epochs", "2"]
    refused(argv, tmp_path, capsys, fragment)


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
@pytest.mark.parametrize("command", ["report", "calibrate"])
def test_report_and_calibrate_hold_the_latest_manifests_model(
    mid_epoch_run, tmp_path, capsys, command
):
    """Found by the twenty-sixth round: the latest checkpoint's manifest saying model
    "bert-tiny" in a vit-digits run was reported and calibrated from (exit 0), though export
    refused it naming the field. `check_manifest_records`, which every command makes, holds
    the model as well."""
    run = copy_run(mid_epoch_run, tmp_path)
    path = run / "checkpoints" / "step-3" / "manifest.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "model": "bert-tiny"}))
    fragment = (f"{path}: model: 'bert-tiny', but the run trains 'vit-digits'",)
    refused(_commands(run, tmp_path)[command], tmp_path, capsys, fragment)


# summary.json edited: (the field's path, its value, what the one line says).
SUMMARIES = {
    "steps and name": ((("steps",), 7), (("name",), "other"), "name 'other', but"),
    "steps": ((("steps",), 7), None, "steps is 7, but"),
    "total_s": ((("total_s",), 99.0), None, "total_s is 99.0, but"),
    "a phase's measured step": (
        (("phases", 0, "measured_step_s"), 9.0),
        None,
        "phases.0.measured_step_s is 9.0, but",
    ),
    "a phase's steps": ((("phases", 0, "steps"), 2), None, "phases.0.steps is 2, but"),
    # The fifty-eighth round: this one alone was blamed on run.jsonl.
    "the accuracy": (
        (("final_eval_accuracy",), 0.5),
        None,
        "final_eval_accuracy is 0.5, but",
    ),
}


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "command, case",
    [(c, "steps and name") for c in ("report", "calibrate", "export", "resume")]
    + [("report", c) for c in SUMMARIES if c != "steps and name"],
)
def test_summary_json_is_what_the_run_wrote(mid_epoch_run, tmp_path, capsys, command, case):
    """Found by the twenty-fourth round: summary.json saying steps 7 and name "other" for a
    6-step run r1 was reported, exported and calibrated from (exit 0); only its
    final_eval_accuracy was compared. Every field is held to what the run writes from its
    records and run.json (`runfiles.check_summary`): one line naming both files."""
    from test_hostile import with_path

    run = copy_run(mid_epoch_run, tmp_path)
    summary = run / "summary.json"
    if command == "report":
        assert cli.main(["report", str(run)]) == 0  # as the run wrote it: read
        capsys.readouterr()
    *edits, fragment = SUMMARIES[case]
    doc = json.loads(summary.read_text())
    for where, value in filter(None, edits):
        doc = with_path(doc, where, value)
    summary.write_text(json.dumps(doc))
    other = "run.json" if case == "steps and name" else "run.jsonl"
    fragment = (f"{summary}: {fragment}", str(run / other))
    refused(_commands(run, tmp_path)[command], tmp_path, capsys, fragment)


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
@pytest.mark.parametrize("command", ["report", "calibrate", "export", "resume"])
@pytest.mark.parametrize("name", ["run.json", "run.jsonl"])
def test_a_run_file_linked_to_a_file_of_text_is_refused_as_a_link(
    mid_epoch_run, tmp_path, capsys, command, name
):
    """Found by the twenty-fourth round: run.jsonl (run.json) replaced by a link to a file of
    text was refused as `run.jsonl:1: not a run record: not valid JSON`, sending the user to
    its contents; linked to a valid copy, resume called it a link. The link is refused
    first, whatever it points at, by every command given the run."""
    run = copy_run(mid_epoch_run, tmp_path)
    victim = tmp_path / "victim"
    victim.write_text("victim\n")
    (run / name).unlink()
    (run / name).symlink_to(victim)
    fragment = f"{run / name}: is a symbolic link, not a file of its own; the run writes this file"
    refused(_commands(run, tmp_path)[command], tmp_path, capsys, fragment)
    assert victim.read_text() == "victim\n"


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", ["rank-0.log", "launcher.log"])
def test_a_log_hard_linked_to_a_file_outside_the_run_is_not_appended_to(
    mid_epoch_run, tmp_path, capsys, name
):
    """Found by the fifty-first round: a rank's log hard-linked to a file outside the run was
    appended to by the resume (a symbolic link there is refused). A log the run appends to,
    with other names, is refused in one line; the file is untouched."""
    run = copy_run(mid_epoch_run, tmp_path)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    log = run / "logs" / name
    log.unlink(missing_ok=True)
    os.link(victim, log)
    fragment = f"{log}: is a hard link (2 names of one file): copy it to a file of its own"
    refused(_commands(run, tmp_path)["resume"], tmp_path, capsys, fragment)
    assert victim.read_text() == "precious\n"


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
@pytest.mark.parametrize("command", ["report", "calibrate", "export", "resume"])
def test_a_runs_profile_linked_to_a_copy_is_refused_as_a_link(
    mid_epoch_run, tmp_path, capsys, command
):
    """Found by the twenty-sixth round: profile.json replaced by a link to a copy of itself
    outside the run was read by report and export, and a resume trained through it, the link
    left in place (exit 0). Every file the run writes at its top is refused as a link
    (`fileio.RUN_OWN_FILES`), by every command given the run."""
    run = copy_run(mid_epoch_run, tmp_path)
    copy = tmp_path / "profile-copy.json"
    shutil.copyfile(run / "profile.json", copy)
    (run / "profile.json").unlink()
    (run / "profile.json").symlink_to(copy)
    said = f"{run / 'profile.json'}: is a symbolic link, not a file of its own; the run writes"
    refused(_commands(run, tmp_path)[command], tmp_path, capsys, said)
    assert (run / "profile.json").is_symlink() and not (tmp_path / "out").exists()


EXPORTED = [
    "another model",
    "a free-form cache",
    "a cache in an uncached phase",
    "a layer the model lacks",
    "a step that is not its epoch's",
    "an active layer missing from grad_history",
]


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
@pytest.mark.parametrize("case", EXPORTED)
def test_export_refuses_a_manifest_resume_refuses(finished_run, tmp_path, capsys, case):
    """Found by the fifteenth round: grad_history naming layer 99 of a 10-layer model was
    exported (exit 0) while a resume refused it. export checks the manifest's layers,
    position and layout as a resume does, and writes nothing."""
    run = copy_run(finished_run, tmp_path)
    changes, fragment = MANIFESTS[case]
    _edit_manifest(run, **changes)
    argv = ["export", str(run), "--out", str(tmp_path / "out")]
    refused(argv, tmp_path, capsys, (str(_manifest(run)), fragment))
    assert not (tmp_path / "out").exists()


def _cache(precision: str = "fp32", budget_rows: int = 2) -> tuple[dict, dict]:
    """(a cache's description, a manifest of a cached layout holding it), as a checkpoint
    of a run in `precision` writes them: `ActivationCache.manifest` of a version at the
    layout's freeze point, 3 of its 5 rows filled, `budget_rows` in memory."""
    import torch

    from executor.cache import ActivationCache
    from pipeplan.formats import Layout, RunConfig

    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[precision]
    row_bytes, shape = 8 * dtype.itemsize, (2, 4)
    cfg = RunConfig(name="r", precision=precision, cache_budget_bytes=budget_rows * row_bytes)
    layout = Layout(
        **dict(frozen_layers=2, cached=True, micro_batches=2, micro_batch_size=4),
        **dict(schedule="1f1b", boundaries=(0, 4, 10), rank_map=((0, 1),)),
    )
    with tempfile.TemporaryDirectory() as folder:
        cache = ActivationCache(5, cfg.cache_budget_bytes, Path(folder))
        cache.create(2, shape, dtype)
        cache.store(torch.tensor([0, 3, 4]), torch.zeros((3, *shape), dtype=dtype), 2)
        described = json.loads(json.dumps(cache.manifest()))
        cache.close(unlink=True)
    manifest = {
        **dict(schema_version=1, step=4, epoch=1, step_in_epoch=0, phase=0, frozen_layers=2),
        **dict(grad_history=[]),
        **dict(grad_norm_sums={}, grad_norm_steps=0, world_size=2, model=cfg.model),
        **dict(layout=json.loads(layout.model_dump_json()), config=cfg.model_dump(mode="json")),
    }
    return described, {**manifest, "cache": described}


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("budget_rows", [0, 2, 9])
def test_a_cache_as_the_executor_describes_it_loads(precision, budget_rows):
    """What `ActivationCache.manifest` writes into a checkpoint of a cached layout passes the
    twentieth round's checks: rows all spilled, split or all in memory, either precision."""
    from pipeplan.formats import CheckpointManifest
    from pipeplan.formats.base import parse

    described, manifest = _cache(precision, budget_rows)
    loaded = parse(CheckpointManifest, json.dumps(manifest))
    assert loaded.cache.model_dump(mode="json", exclude_none=True) == described
    assert loaded.cache.filled == 3


def _described(**changes) -> dict:
    return {**_cache()[0], **changes}


# (manifest fields as edited, what the line names): a cache that contradicts the cached
# layout, the run or itself.
CACHED = {
    "another freeze point": ({"frozen_layers": 3}, "cache.frozen_layers 3 disagrees"),
    # Each edit below keeps the cache's own numbers consistent (a budget still of 2 rows,
    # rows still of 32 bytes): what is refused is the disagreement with the run.
    "another budget": ({"budget_bytes": 65}, "cache.budget_bytes 65 disagrees"),
    "another precision's dtype": (
        {"dtype": "bfloat16", "sample_shape": [4, 4]},
        "cache.dtype bfloat16 is not the fp32 run's float32",
    ),
    "a row of another size": ({"row_bytes": 33}, "row_bytes 33 is not a row of shape [2, 4]"),
    "rows split unlike the budget": (
        {"memory": {**_cache()[0]["memory"], "rows": [0, 5]}},
        "memory.rows [0, 5] and spill.rows [2, 5] are not [0, 2] and [2, 5]",
    ),
    "more filled than counted": ({"filled": 4}, "filled 4, filled_in_memory 1"),
    "a description without its dtype": ({"dtype": None}, "describes the cache's rows without"),
    "fill without a description": (
        {k: v for k, v in _described().items() if k in ("format", "frozen_layers")}
        | {"num_samples": 5, "budget_bytes": 64, "filled": 3},
        "filled 3, but no rows are described",
    ),
    "an unknown key": ({"bogus": 1}, "field 'cache.bogus'"),
    "another format": ({"format": 1}, "field 'cache.format'"),
}


@pytest.mark.parametrize("case", CACHED)
def test_a_cache_that_contradicts_its_cached_layout_is_refused(case):
    """Found by the twentieth round: a manifest's `cache` was a free-form dict (`{"bogus": 1}`
    in an uncached phase resumed and trained on). Typed now, its keys those the executor
    writes, and held to the layout (freeze point), the run (budget, precision) and itself."""
    from pipeplan.errors import InputFileError
    from pipeplan.formats import CheckpointManifest
    from pipeplan.formats.base import parse

    changes, fragment = CACHED[case]
    described, manifest = _cache()
    cache = changes if "num_samples" in changes else {**described, **changes}
    cache = {k: v for k, v in cache.items() if v is not None}
    with pytest.raises(InputFileError, match=re.escape(fragment)):
        parse(CheckpointManifest, json.dumps({**manifest, "cache": cache}), "m.json")


def _emptied(run: Path) -> None:
    (run / "run.jsonl").write_text("")


def _cut_before_the_last_step(run: Path) -> None:
    lines = _lines(run)
    last = _steps(lines)[-1]
    _rewrite(run, [line for line in lines if line["kind"] != "epoch" and line is not last])


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "damage",
    [_emptied, _cut_before_the_last_step],
    ids=lambda f: f.__name__.strip("_"),
)
def test_resume_refuses_records_that_end_before_the_checkpoint(
    finished_run, tmp_path, capsys, damage
):
    """An emptied or cut run.jsonl resumed and wrote one holding only the new phase: the
    run's history was lost without a word."""
    run = copy_run(finished_run, tmp_path)
    damage(run)
    step = int(_manifest(run).parent.name.removeprefix("step-"))
    fragment = f"run.jsonl: the records end before step {step} of the checkpoint step-{step}"
    refused(["run", "--resume", str(run), *MORE], tmp_path, capsys, fragment)


def _without_the_epoch_record(run: Path) -> None:
    _rewrite(run, [line for line in _lines(run) if line["kind"] != "epoch"])


def _the_epoch_record_torn(run: Path) -> None:
    """Epoch 0's record, the last line, cut 40 bytes short as a crash mid-append cuts it."""
    text = (run / "run.jsonl").read_bytes()
    (run / "run.jsonl").write_bytes(text[:-40])


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "damage, why",
    [(_without_the_epoch_record, ""), (_the_epoch_record_torn, "its last line is cut short")],
    ids=["deleted", "torn"],
)
def test_resume_refuses_records_that_lack_an_epoch_before_the_checkpoint(
    finished_run, tmp_path, capsys, damage, why
):
    """Found by the eighteenth round: run.jsonl without the record of the epoch before the
    checkpoint (deleted, or torn and left out with a notice) resumed with exit 0, and the
    resumed run's records and metrics.csv lacked that epoch for good. The executor writes an
    epoch's record before the checkpoint that follows it: no crash loses it."""
    run = copy_run(finished_run, tmp_path)
    damage(run)
    fragment = "run.jsonl: no record of epoch 0, which ended before the checkpoint step-2 (epoch 1)"
    refused(["run", "--resume", str(run), *MORE], tmp_path, capsys, (fragment, why))


# ----------------------------------------------------------------------------- grad_history
# (eighteenth round) A manifest's grad_history was held only to an upper bound: shortened or
# emptied, the resumed run's gradient criterion decided without the measurements it had made.


def _phases(*starts: tuple[int, bool], per_epoch: int = 3) -> list:
    """Phase records of a 1-rank run of `per_epoch` steps an epoch: (start_step, resumed)."""
    from test_report import phase_record

    return [
        phase_record(n, stages=1, replicas=1, start_step=at, start_epoch=at // per_epoch, resumed=r)
        for n, (at, r) in enumerate(starts)
    ]


# A real run of 3 steps an epoch with --freeze-every 2 (every checkpoint's grad_history counted
# as the worker wrote it): transitions at steps 3, 10, 14, 16, 20; finished at epoch 6 and 8
# and resumed from there (phases 5, 7); resumed mid-epoch at step 26 (phase 8).
EVERY_2 = _phases(
    *[(0, False), (3, False), (10, False), (14, False), (16, False)],
    *[(18, True), (20, False), (24, True), (26, True)],
)
# (freeze_every, phases, (step, epoch, step_in_epoch), the entries the worker wrote)
DECISIONS = {
    "mid-epoch": (2, EVERY_2[:2], (5, 1, 2), 3),
    "a transition at an epoch's start": (2, EVERY_2[:2], (3, 1, 0), 2),
    "a final checkpoint": (2, EVERY_2[:5], (18, 6, 0), 11),
    "finished twice": (2, EVERY_2[:7], (24, 8, 0), 14),
    "resumed from a finished run": (2, EVERY_2[:8], (26, 8, 2), 15),
    "resumed mid-epoch": (2, EVERY_2, (30, 10, 0), 17),
    "epoch ends only": (None, _phases((0, False)), (6, 2, 0), 1),
    "epoch ends only, resumed": (None, _phases((0, False), (6, True)), (12, 4, 0), 2),
}


# Found by the twenty-third round: a periodic checkpoint at an epoch's start (--checkpoint-every)
# follows the epoch's decision, and so does a resume of one; they were counted as runs' ends.
# (The resumed cases' manifests have run_ends; those above, as written before it, have none.)
DECISIONS |= {
    "a periodic checkpoint at an epoch's start": (None, _phases((0, False)), (6, 2, 0), 2),
    "resumed from a periodic checkpoint at an epoch's start": (
        *(None, _phases((0, False), (6, True)), (12, 4, 0), 3),
    ),
    "resumed from a finished run, then from a periodic one": (
        *(None, _phases((0, False), (6, True), (9, True)), (12, 4, 0), 2),
    ),
}
# The cases' manifests' run_ends (absent: None) and those taken at a run's end (config.epochs
# their epoch, as the worker writes them; any other is not its run's last).
RUN_ENDS = {
    "resumed from a periodic checkpoint at an epoch's start": [],
    "resumed from a finished run, then from a periodic one": [6],
}
FINAL = {"a final checkpoint", "finished twice", "resumed mid-epoch", "epoch ends only"}
FINAL |= {"epoch ends only, resumed", "resumed from a periodic checkpoint at an epoch's start"}
FINAL |= {"resumed from a finished run, then from a periodic one"}


def _decided(case: str) -> tuple:
    """(manifest, phases, cfg, entries) of DECISIONS' `case`, as the worker wrote it."""
    from pipeplan.formats import CheckpointManifest, RunConfig

    every, phases, (step, epoch, within), entries = DECISIONS[case]
    epochs = epoch if case in FINAL else 12
    cfg = RunConfig(name="r", model="vit-digits", nproc=1, epochs=epochs, freeze_every=every)
    # The steps summed since the last decision, as the worker writes them: "mid-epoch" is one
    # step after the decision at step 4; every other case is at a decision or an epoch's start.
    summed = int(case == "mid-epoch")
    manifest = CheckpointManifest(
        **dict(step=step, epoch=epoch, step_in_epoch=within, phase=len(phases) - 1),
        **dict(frozen_layers=0, grad_history=[], grad_norm_steps=summed),
        grad_norm_sums=EVERY_LAYER if summed else {},
        **dict(world_size=1, model="vit-digits", layout=None, config=cfg),
        **({"run_ends": RUN_ENDS[case]} if case in RUN_ENDS else {}),
    )
    return manifest, phases, cfg, entries


@pytest.mark.parametrize("case", DECISIONS)
def test_grad_history_has_one_entry_per_decision_auto_made(case):
    """`gradient_decisions` counts what the worker appended, taken from real runs' manifests:
    a decision at every epoch's end but where a run ended (its final checkpoint, and a
    resume of one), and at every --freeze-every N-th step within an epoch. Found by the
    twenty-third round: a periodic checkpoint at an epoch's start (and a resume of one) was
    counted as a run's end, and a run killed after one could never be resumed."""
    from executor.history import gradient_decisions

    manifest, phases, cfg, entries = _decided(case)
    assert gradient_decisions(manifest, phases, cfg) == entries
    assert gradient_decisions(manifest, phases, cfg.model_copy(update={"freeze": "none"})) == 0


# 1 rank, 2 epochs of EPOCH steps, --freeze auto: its final checkpoint step-10 (the only one
# kept) holds the one measurement of the decision at epoch 0's end.
AUTO_END = 10


@pytest.fixture(scope="module")
def auto_run(boundary_run, tmp_path_factory) -> Path:
    """`boundary_run` (BOUNDARY: 2 epochs of EPOCH steps, --freeze auto; one run less to
    train) with its final checkpoint step-10 its only one: a copy without step-5."""
    run = copy_run(boundary_run, tmp_path_factory.mktemp("auto"))
    shutil.rmtree(run / "checkpoints" / f"step-{EPOCH}")
    assert (run / "checkpoints" / "latest").read_text() == f"step-{AUTO_END}\n"
    return run


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
@pytest.mark.parametrize("entries", [0, 2])
def test_resume_refuses_a_grad_history_of_another_length(auto_run, tmp_path, capsys, entries):
    """Found by the eighteenth round: grad_history emptied (or shortened) resumed with exit 0,
    and AutoFreeze's gradient criterion decided without the measurement it had made; only
    more entries than decisions were refused. Any other count than the decisions is."""
    run = copy_run(auto_run, tmp_path)
    (entry,) = json.loads(_manifest(run).read_text())["grad_history"]
    _edit_manifest(run, grad_history=[entry] * entries)
    fragment = (
        f"grad_history: {entries} entries, but --freeze auto made 1 gradient decision by step "
        f"{AUTO_END}"
    )
    refused(["run", "--resume", str(run), "--epochs", "3"], tmp_path, capsys, (fragment,))


_EVIL = """
import pathlib
pathlib.Path(__file__).with_name("IMPORTED").write_text("x")
def load(seed=0):
    raise SystemExit(0)
"""


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("field", "value"),
    [("data", "evilmod22:load"), ("data", "synth-text"), ("tokenizer", "/tmp"), ("seed", 7)],
)
def test_resume_compares_run_json_with_its_checkpoints_before_acting_on_it(
    auto_run, tmp_path, capsys, monkeypatch, field, value
):
    """Found by the twenty-second round: `run --resume` of a run whose run.json was edited
    imported and called the `module:function` it named as data (export and report refuse the
    edit first), and other edits were refused as flags nobody typed (`--tokenizer applies to
    text files`). run.json is now held to its checkpoints first: one line naming run.json."""
    (tmp_path / "evilmod22.py").write_text(_EVIL)
    monkeypatch.syspath_prepend(str(tmp_path))
    run = copy_run(auto_run, tmp_path)
    test_hostile.edit_run_json(run, **{field: value})
    fragments = (
        f"{run / 'run.json'}: {field} is {json.dumps(value)}",
        f"step-{AUTO_END}/manifest.json",
    )
    refused(["run", "--resume", str(run), "--epochs", "3"], tmp_path / "runs", capsys, fragments)
    assert not (tmp_path / "IMPORTED").exists()


# Which of DECISIONS' entries were measured over an epoch (index → the epoch whose end
# decided): within-epoch decisions (--freeze-every) come between them, a run's end makes none.
EPOCH_ENDS = {
    "mid-epoch": {1: 0},  # decisions at steps 2, 3 (epoch 0's end), 4
    "a transition at an epoch's start": {1: 0},  # steps 2, 3
    "epoch ends only": {0: 0},  # epoch 1's end finished the run
    "epoch ends only, resumed": {0: 0, 1: 2},  # epochs 1 and 3 ended runs
    "a periodic checkpoint at an epoch's start": {0: 0, 1: 1},
    "resumed from a periodic checkpoint at an epoch's start": {0: 0, 1: 1, 2: 2},
    "resumed from a finished run, then from a periodic one": {0: 0, 1: 2},
}


@pytest.mark.parametrize("case", EPOCH_ENDS)
def test_the_grad_history_entries_of_epoch_ends_are_found(case):
    """`epoch_end_decisions` finds the entries a resume holds to the epochs' records, among
    the decisions `gradient_decisions` counts."""
    from executor.history import epoch_end_decisions, gradient_decisions

    manifest, phases, cfg, entries = _decided(case)
    assert epoch_end_decisions(manifest, phases, cfg) == EPOCH_ENDS[case]
    assert gradient_decisions(manifest, phases, cfg) == entries


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
@pytest.mark.parametrize("value", [1e300, 0.0])
def test_resume_refuses_a_grad_history_unlike_its_epochs_records(auto_run, tmp_path, capsys, value):
    """Found by the nineteenth round: a manifest's grad_history entry edited (a gradient norm
    of 1e300; run.jsonl's epoch 0 record says 0.54) resumed with exit 0, and AutoFreeze's
    gradient criterion decided with the edited norm. The decision at an epoch's end is made
    with the norms the epoch's record holds: a manifest that differs is refused (the
    manifest has no checksum of its own; the records are the run's account of it)."""
    run = copy_run(auto_run, tmp_path)
    (entry,) = json.loads(_manifest(run).read_text())["grad_history"]
    layer = sorted(entry, key=int)[1]
    recorded = entry[layer]
    _edit_manifest(run, grad_history=[{**entry, layer: value}])
    fragment = f"grad_history.0: layer {layer}'s norm {value!r}, but run.jsonl's epoch 0 record"
    refused(
        ["run", "--resume", str(run), "--epochs", "3"],
        tmp_path,
        capsys,
        (str(_manifest(run)), fragment, f"has {recorded!r} (grad_norms)"),
    )


@pytest.mark.long  # a guard (it passed before the fix too): out of the 15-minute default run
@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_a_resumed_runs_grad_history_is_its_decisions(auto_run, tmp_path):
    """The count a resume holds a manifest to is what the worker writes: resumed from its
    final checkpoint for 2 more epochs, the run decides at epoch 2's end (not at epoch 1's,
    its last before) and its final manifest holds 2 entries, which the next resume accepts."""
    from executor.history import check_manifest_records
    from pipeplan.formats import CheckpointManifest, RunConfig, load, read_records

    run = copy_run(auto_run, tmp_path)
    assert cli.main(["run", "--resume", str(run), "--epochs", "4"]) == 0
    manifest = load(
        CheckpointManifest, run / "checkpoints" / f"step-{2 * AUTO_END}" / "manifest.json"
    )
    assert len(manifest.grad_history) == 2
    cfg = load(RunConfig, run / "run.json").model_copy(update={"epochs": 5})
    check_manifest_records(manifest, read_records(run / "run.jsonl"), run, cfg)


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
@pytest.mark.parametrize("flags", [[], ["--epochs", "1"]], ids=["plain", "the same epochs"])
def test_resume_of_a_finished_run_is_refused_before_anything_is_written(
    finished_run, tmp_path, capsys, flags
):
    """`run --resume RUN` of a run that trained all its epochs appended an empty phase to
    run.jsonl and rewrote its manifest and summary.json."""
    run = copy_run(finished_run, tmp_path)
    fragment = (str(run), "finished all its 1 epochs (checkpoint step-2); give --epochs N > 1")
    refused(["run", "--resume", str(run), *flags], tmp_path, capsys, fragment)


@pytest.mark.parametrize("spelling", ["itself", "a link", "another path"])
@pytest.mark.parametrize("command", ["calibrate", "report --baseline"])
def test_one_run_given_twice_is_refused(tmp_path, capsys, command, spelling):
    """`calibrate RUN RUN` fitted over every phase twice ("2 phases, 8 steps" of a one-phase
    run); `report RUN --baseline RUN` measured a speedup of exactly 1."""
    run, argv = _readable(tmp_path, command.split()[0])
    again = {
        "itself": run,
        "a link": tmp_path / "alias",
        "another path": run.parent / "." / run.name,
    }[spelling]
    if spelling == "a link":
        again.symlink_to(run, target_is_directory=True)
    argv = [*argv, str(again)] if command == "calibrate" else [*argv, "--baseline", str(again)]
    refused(argv, tmp_path, capsys, (str(again), "the same run"))


def _negative_loss(run: Path) -> str:
    lines = _lines(run)
    _steps(lines)[-1]["loss"] = -1.0
    _rewrite(run, lines)
    return "loss"


def _cache_hits_beyond_the_batch(run: Path) -> str:
    lines = _lines(run)
    _steps(lines)[-1]["cache_hits"] = 10**9
    _rewrite(run, lines)
    return "cache_hits 1000000000 of a step of"


STEPS = [_negative_loss, _cache_hits_beyond_the_batch]


@pytest.mark.parametrize("command", ["report", "calibrate"])
@pytest.mark.parametrize("damage", STEPS, ids=lambda f: f.__name__.strip("_"))
def test_step_records_out_of_range_are_refused(tmp_path, capsys, damage, command):
    """A step's loss is a mean cross-entropy (never negative) and its cache hits are at most
    the samples it trained: -1.0 and 10**9 were reported and fitted."""
    run, argv = _readable(tmp_path, command)
    fragment = damage(run)
    refused(argv, tmp_path, capsys, ("run.jsonl", fragment))


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
@pytest.mark.parametrize("damage", STEPS, ids=lambda f: f.__name__.strip("_"))
def test_resume_refuses_step_records_out_of_range(finished_run, tmp_path, capsys, damage):
    """The same bounds on --resume, before any rank starts."""
    run = copy_run(finished_run, tmp_path)
    fragment = damage(run)
    refused(["run", "--resume", str(run), *MORE], tmp_path, capsys, ("run.jsonl", fragment))


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "lost", [("summary.json", "metrics.csv"), ("model",), ("summary.json", "metrics.csv", "model")]
)
def test_a_finished_run_is_finished_whatever_was_deleted_after_its_checkpoint(
    finished_run, tmp_path, capsys, lost
):
    """Whether a run finished was read from summary.json and model/: with them deleted,
    `run --resume RUN` appended a phantom phase of 0 steps and rewrote the manifest. The
    latest checkpoint's manifest (every epoch of run.json trained) decides; without model/
    the line says how to export it from the checkpoint."""
    run = copy_run(finished_run, tmp_path)
    for name in lost:
        path = run / name
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    fragment = (str(run), "finished all its 1 epochs (checkpoint step-2); give --epochs N > 1")
    if "model" in lost:
        fragment += (f"its model: pipeplan export {run} --out DIR",)
    refused(["run", "--resume", str(run)], tmp_path, capsys, fragment)


def test_a_failure_after_the_final_checkpoint_says_to_export_not_to_resume(finished_run, tmp_path):
    """A rank failing after the final checkpoint (writing model/) said "resume with", a
    resume that has nothing to train; before the end, it still says to resume."""
    from executor.launch import failure_line
    from pipeplan.formats import RunConfig, load

    run = copy_run(finished_run, tmp_path)
    cfg = load(RunConfig, run / "run.json")
    line = failure_line(0, "exit code 1", run, cfg)
    assert f"its model: pipeplan export {run} --out DIR" in line and "resume" not in line
    more = cfg.model_copy(update={"epochs": 2})  # a resume for another epoch failed
    assert failure_line(0, "exit code 1", run, more).endswith(
        f"resume with: pipeplan run --resume {run} --epochs 2"
    )


def test_a_failure_without_a_checkpoint_says_to_delete_the_run(finished_run, tmp_path):
    """Found by the twenty-sixth round: a rank failing before any checkpoint left a folder
    neither resumable ("no checkpoint to resume from") nor a name a new run takes ("already
    holds a run"), and its line said nothing of it. It says to delete the folder; never where
    a checkpoint was written without its pointer (the resume says to restore that)."""
    from executor.launch import failure_line
    from pipeplan.formats import RunConfig, load

    run = copy_run(finished_run, tmp_path)
    cfg = load(RunConfig, run / "run.json").model_copy(update={"epochs": 2})
    (run / "checkpoints" / "latest").unlink()  # killed between step-N and its pointer
    assert failure_line(0, "exit code 1", run, cfg).endswith(f"rank logs in {run / 'logs'}")
    shutil.rmtree(run / "checkpoints")
    assert failure_line(0, "exit code 1", run, cfg).endswith(
        f"rank logs in {run / 'logs'}; no checkpoint to resume from: delete {run} to start it again"
    )


def test_a_ranks_line_names_the_data_as_the_user_gave_it(finished_run, tmp_path, monkeypatch):
    """Found by the forty-eighth round: a rank's refusal of a data item named the data as
    run.json records it, `data '/tmp/w/d/m.py:load'`, where the launcher's checks said
    `data 'd/m.py:load'`. The line says it as given; a resume (run.json's) is unchanged."""
    from executor.launch import failure_line
    from pipeplan.formats import RunConfig, load

    monkeypatch.chdir(tmp_path)
    run = copy_run(finished_run, tmp_path)
    cfg = load(RunConfig, run / "run.json").model_copy(update={"epochs": 2})
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "m.py").write_text("def load(): ...\n")
    given = cfg.model_copy(update={"data": "d/m.py:load"})
    why = f"data '{tmp_path / 'd' / 'm.py'}:load': train item 7 is None, not an (input, label) pair"
    line = failure_line(1, why, run, given)
    assert "data 'd/m.py:load': train item 7 is None" in line and str(tmp_path / "d") not in line
    recorded = given.model_copy(update={"data": f"{tmp_path / 'd' / 'm.py'}:load"})
    assert why in failure_line(1, why, run, recorded)


def test_a_failed_checkpoints_line_says_where_before_why(finished_run, tmp_path):
    """Found by the fifteenth round: "…; the previous checkpoint is kept (at step 4); rank
    logs in …" read as if step 4 were the checkpoint kept. The step the rank failed at comes
    before the reason, and the reason names both checkpoints (executor.checkpoint.save)."""
    from executor.launch import failure_line
    from pipeplan.formats import RunConfig, load

    run = copy_run(finished_run, tmp_path)
    more = load(RunConfig, run / "run.json").model_copy(update={"epochs": 2})
    why = (
        f"{run}/checkpoints/step-4: cannot write checkpoint step-4 (No space left on device; "
        "0 MiB free on its disk); the last checkpoint written, step-2, is kept"
    )
    assert failure_line(0, why, run, more) == (
        f"training failed on rank 0 after step 1, at the end of epoch 1 or at step 2: {why}; "
        f"rank logs in {run / 'logs'}; "
        f"resume with: pipeplan run --resume {run} --epochs 2"
    )


def test_a_failed_resumes_line_carries_the_flags_it_was_given(finished_run, tmp_path):
    """Found by the twenty-fifth round: a resume for more epochs (or another world) that fails
    before its first checkpoint leaves run.json as it was, and its line said "resume with:
    pipeplan run --resume R", which was refused ("finished all its 1 epochs; give --epochs N
    > 1") or trained another world. The command carries each resumable flag run.json does
    not hold yet; once a checkpoint made them run.json's, none."""
    from executor.launch import failure_line
    from pipeplan.formats import RunConfig, dumps, load

    run = copy_run(finished_run, tmp_path)
    cfg = load(RunConfig, run / "run.json")
    more = cfg.model_copy(update={"epochs": 3, "nproc": 2, "collective_timeout_s": 30.0})
    assert failure_line(0, "exit code 1", run, more).endswith(
        f"resume with: pipeplan run --resume {run} --nproc 2 --epochs 3 --collective-timeout 30.0"
    )
    (run / "run.json").write_text(dumps(more))  # what its first checkpoint commits
    assert failure_line(0, "exit code 1", run, more).endswith(
        f"resume with: pipeplan run --resume {run}"
    )


# ------------------------------------------------ a resume for more epochs failed before its first
# checkpoint: run.json keeps its epochs (the checkpoint commits them), run.jsonl has its records.

# A file-size limit over everything a resume writes but its checkpoint's optimizer.pt (AdamW's
# two moments: 12 MiB; model.pt, 6 MiB, fits): the first checkpoint fails as on the round's
# full disk, after the epoch's records.
FILE_LIMIT = 8 << 20
# The launcher's start check of the limit (`check_checkpoint_room`) is passed over: it
# stands for a disk that fills once the run has started, which no check at the start sees.
LIMITED = (
    f"import resource, sys; resource.setrlimit(resource.RLIMIT_FSIZE, ({FILE_LIMIT},) * 2); "
    "import executor.launch; executor.launch.size_limit = lambda: None; "
    "import cli; sys.exit(cli.main())"
)


@pytest.fixture(scope="module")
def failed_extension(finished_run, tmp_path_factory) -> tuple[Path, str]:
    """`finished_run` (1 epoch) after `run --resume RUN --epochs 2` failed writing its first
    checkpoint, step-4 (the final one): run.json says 1 epoch, run.jsonl holds the resumed
    phase 1, steps 2-3 and epoch 1's record, and metrics.csv its row. The run and the
    resume's stderr."""
    run = copy_run(finished_run, tmp_path_factory.mktemp("extension"))
    env = {k: v for k, v in os.environ.items() if k != "PIPEPLAN_LAUNCHER_PID"}
    argv = ["run", "--resume", str(run), *MORE]
    done = subprocess.run(
        [sys.executable, "-c", LIMITED, *argv],
        env={**env, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 2, done.stderr[-3000:]
    assert "cannot write checkpoint step-4" in done.stderr, done.stderr[-3000:]
    assert (run / "checkpoints" / "latest").read_text() == "step-2\n"
    return run, done.stderr


class _Trains(Exception):
    """Raised where the ranks would start: every check of the resume passed."""


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_a_failed_extensions_resume_command_is_accepted(failed_extension, tmp_path, monkeypatch):
    """Found by the twenty-fifth round: `run --resume R --epochs 3` failed writing its first
    checkpoint (a full disk) and said "resume with: pipeplan run --resume R", which was
    refused ("finished all its 2 epochs; give --epochs N > 2"). The command it prints now
    carries --epochs, and passes every check of the resume up to the ranks' start."""
    import executor.launch

    run, err = failed_extension
    line = err.strip().splitlines()[-1]
    assert line.endswith(f"resume with: pipeplan run --resume {run} --epochs 2"), line
    copy = copy_run(run, tmp_path)
    command = shlex.split(line.split("resume with: ")[1].replace(str(run), str(copy)))

    def trains(cfg, run_dir, resume=False):
        raise _Trains(cfg.epochs)

    monkeypatch.setattr(executor.launch, "run_local", trains)
    with pytest.raises(_Trains) as started:
        cli.main(command[1:])
    assert started.value.args == (2,)


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_a_failure_after_the_last_epochs_record_is_placed_at_the_runs_end(failed_extension):
    """Found by the thirty-fifth round: a rank that failed after the last epoch's record (the
    final checkpoint, the model, summary.json) was placed at a step that does not exist: a
    4-step run "failed on rank 0 at step 4". The line now places it after the last step, at
    the run's end; the rest of the line is as before, and step-2 is still the latest."""
    run, err = failed_extension
    lines = err.strip().splitlines()
    prefix = (
        "pipeplan: error: training failed on rank 0 after the last step (step 3), writing the "
        f"final checkpoint, model or summary: {run}/checkpoints/step-4: cannot write checkpoint "
        "step-4"
    )
    assert lines[-1].startswith(prefix), lines[-1]
    assert "at step 4" not in lines[-1]
    assert (run / "checkpoints" / "latest").read_text() == "step-2\n"
    assert not (run / "checkpoints" / "step-4").exists()


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_a_failure_after_an_epochs_record_names_both_places_it_can_be(finished_run, tmp_path):
    """Found by the thirty-fifth round: a failure after a mid-run epoch's record (its freeze
    transition, re-plan, cache fill or checkpoint) was placed " at step 2", a step that had
    not started: the records cannot tell the epoch's end from the next step's start, and
    the line now names both. Once a resume's phase follows the record (the resume entered
    it), the failure is at the next step, as before. The records are only read."""
    from executor.launch import failure_line
    from pipeplan.formats import PhaseRecord, RunConfig, load, read_records

    run = copy_run(finished_run, tmp_path)
    more = load(RunConfig, run / "run.json").model_copy(update={"epochs": 2})
    before = snapshot(run)
    line = failure_line(1, "killed by SIGKILL", run, more)
    assert line.startswith(
        "training failed on rank 1 after step 1, at the end of epoch 1 or at step 2: killed by "
        "SIGKILL; "
    ), line
    assert snapshot(run) == before
    (phase,) = [r for r in read_records(run / "run.jsonl") if isinstance(r, PhaseRecord)]
    resumed = phase.model_copy(update={"phase": 1, "start_step": 2, "start_epoch": 1})
    with open(run / "run.jsonl", "a") as records:
        records.write(resumed.model_copy(update={"resumed": True}).model_dump_json() + "\n")
    line = failure_line(1, "killed by SIGKILL", run, more)
    assert line.startswith("training failed on rank 1 at step 2: killed by SIGKILL; "), line


def _mid_epoch_records(finished_run: Path, path: Path, last_step: int, *later) -> None:
    """run.jsonl at `path`: `finished_run`'s phase 0, its step 0 copied as steps 0 to
    `last_step` of epoch 0 (an epoch of 4 steps: no epoch record yet), then `later`."""
    from pipeplan.formats import STEP_RECORDS, PhaseRecord, read_records

    read = read_records(finished_run / "run.jsonl")
    phase = next(r for r in read if isinstance(r, PhaseRecord))
    # Its horizon an epoch of 4 steps too: one shorter than the steps run in it is refused
    # (`formats.run._Horizons`, the sixtieth round).
    horizon = phase.pricing.horizon.model_copy(update={"samples": 4 * phase.layout.global_batch})
    pricing = phase.pricing.model_copy(update={"horizon": horizon})
    phase = phase.model_copy(update={"pricing": pricing})
    step = next(r for r in read if isinstance(r, STEP_RECORDS)).record()
    steps = [step.model_copy(update={"step": n, "epoch": 0}) for n in range(last_step + 1)]
    path.write_text("".join(r.model_dump_json() + "\n" for r in [phase, *steps, *later]))


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "last_step, checkpoint_every, freeze_every, later, placed",
    [
        (1, 2, None, "", " after step 1, writing its checkpoint, or at step 2"),
        (2, 3, None, "", " after step 2, writing its checkpoint, or at step 3"),
        (1, 3, None, "", " at step 2"),  # no checkpoint after step 1
        (1, None, None, "", " at step 2"),
        (1, None, 2, "", " after step 1, at its freeze decision or transition, or at step 2"),
        (
            *(1, 1, 2, ""),
            " after step 1, at its freeze decision, transition or checkpoint, or at step 2",
        ),
        (1, None, 2, "moved", " after step 1, writing its new phase's checkpoint, or at step 2"),
        (1, 2, None, "resumed", " at step 2"),  # the resume entered its phase: at the step
        (3, 2, 2, "", " after step 3, at the end of epoch 1"),  # the epoch's end does both
    ],
)
def test_a_failure_after_a_mid_epoch_checkpoints_step_names_both_places_it_can_be(
    finished_run, tmp_path, last_step, checkpoint_every, freeze_every, later, placed
):
    """Found by the thirty-fifth round: a failure writing a checkpoint taken within an epoch
    (--checkpoint-every 2, after step 1) was placed " at step 2", a step never started. Where
    the run's cadences (--checkpoint-every, --freeze-every) say what followed the last step
    recorded, its checkpoint, freeze decision or transition is named with the next step:
    nothing recorded tells them apart. A new phase's record after the step (not a resume's)
    says the decision moved the freeze point: its checkpoint or the next step. A resume's
    phase, as before: the next step. Hand-written records, only read."""
    from executor.launch import failed_at
    from pipeplan.formats import PhaseRecord, read_records

    records = tmp_path / "run.jsonl"
    _mid_epoch_records(finished_run, records, last_step)
    if later:
        phase = next(r for r in read_records(records) if isinstance(r, PhaseRecord))
        update = {"phase": 1, "start_step": last_step + 1, "resumed": later == "resumed"}
        # Decided from phase 0's layout, as a run records it (`formats.run._Horizons`).
        horizon = phase.pricing.horizon.model_copy(update={"previous": phase.layout})
        update["pricing"] = phase.pricing.model_copy(update={"horizon": horizon})
        with open(records, "a") as out:
            out.write(phase.model_copy(update=update).model_dump_json() + "\n")
    before = records.read_bytes()
    every = {"checkpoint_every": checkpoint_every, "freeze_every": freeze_every}
    assert failed_at(records, 4, 2, **every) == placed
    assert records.read_bytes() == before


@pytest.mark.timeout(60)
def test_a_failure_line_places_a_failure_by_the_runs_own_cadence(finished_run, tmp_path):
    """The thirty-fifth round's fix as `failure_line` uses it: the cadence is run.json's, as
    the command's configuration holds it (a resume cannot change it)."""
    from executor.launch import failure_line
    from pipeplan.formats import RunConfig, load

    run = copy_run(finished_run, tmp_path)
    _mid_epoch_records(finished_run, run / "run.jsonl", 0)  # epoch 0 of 2 steps: step 0 within
    cfg = load(RunConfig, run / "run.json").model_copy(update={"epochs": 2})
    before = snapshot(run)
    assert failure_line(0, "why", run, cfg).startswith("training failed on rank 0 at step 1: why")
    cfg = cfg.model_copy(update={"checkpoint_every": 1})
    assert failure_line(0, "why", run, cfg).startswith(
        "training failed on rank 0 after step 0, writing its checkpoint, or at step 1: why; "
    )
    assert snapshot(run) == before


@pytest.mark.timeout(60)
def test_a_resume_that_fails_before_its_first_step_is_not_placed_in_the_old_run(
    finished_run, tmp_path
):
    """Found by the thirty-sixth round: a resume from step-4 of a run whose records went on
    to step 5 (a run killed after its last checkpoint, or a fallback past an unusable newest
    checkpoint), whose rank 1 died as the resume started, said "training failed on rank 1
    after step 5, at the end of epoch 2 or at step 6": the old run's place, steps the resume
    never reached. While run.jsonl is as the resume found it (its ranks rewrite the records
    past the checkpoint once they train), the line says "before the resume's first step";
    once they have written, the records place it, as for any run."""
    from executor.launch import _file_state, failure_line
    from pipeplan.formats import RunConfig, load

    run = copy_run(finished_run, tmp_path)
    cfg = load(RunConfig, run / "run.json")
    records = run / "run.jsonl"
    old = failure_line(1, "why", run, cfg)
    assert " before the resume's first step" not in old
    before = snapshot(run)
    started = _file_state(records)
    assert failure_line(1, "killed by SIGKILL", run, cfg, started).startswith(
        "training failed on rank 1 before the resume's first step: killed by SIGKILL; "
    )
    assert snapshot(run) == before
    with records.open("a") as f:  # the resume's ranks wrote (here: what was there, again)
        f.write(records.read_text().splitlines()[-1] + "\n")
    assert " before the resume's first step" not in failure_line(1, "why", run, cfg, started)


@pytest.mark.multiprocess
@pytest.mark.timeout(240)
# In `-m long`, for the suite's time: the default run keeps
# test_a_mid_epoch_resume_records_the_epoch_as_the_uninterrupted_run.
@pytest.mark.long
def test_a_mid_epoch_checkpoint_that_fails_is_placed_after_its_step(tmp_path):
    """Found by the thirty-fifth round: a run whose --checkpoint-every 2 checkpoint, after
    step 1 of a 4-step epoch, could not be written (a full disk; here a file-size limit
    below model.pt's size) said "training failed on rank 0 at step 2", a step that was never
    started. The line now says "after step 1, writing its checkpoint, or at step 2"; the
    records of steps 0 and 1 are kept, and no partial checkpoint."""
    env = {k: v for k, v in os.environ.items() if k != "PIPEPLAN_LAUNCHER_PID"}
    argv = ["run", "--nproc", "1", "--epochs", "1", "--max-steps-per-epoch", "4"]
    argv += ["--checkpoint-every", "2", "--name", "k", "--runs-dir", str(tmp_path)]
    done = subprocess.run(
        [sys.executable, "-c", LIMITED, *argv],
        env={**env, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=200,
    )
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr[-3000:]
    run = tmp_path / "k"
    prefix = (
        "pipeplan: error: training failed on rank 0 after step 1, writing its checkpoint, or "
        f"at step 2: {run}/checkpoints/step-2: cannot write checkpoint step-2 ("
    )
    assert lines[0].startswith(prefix), lines[0]
    assert lines[0].endswith(f"no checkpoint to resume from: delete {run} to start it again")
    from pipeplan.formats import STEP_RECORDS, read_records

    steps = [r.step for r in read_records(run / "run.jsonl") if isinstance(r, STEP_RECORDS)]
    assert steps == [0, 1]
    assert list((run / "checkpoints").iterdir()) == []


@pytest.mark.long
@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_a_failed_extensions_resume_trains_as_the_extension_uninterrupted(
    failed_extension, tmp_path
):
    """The printed command rewrites the failed resume's records and trains on exactly as it
    did (the same losses and held-out numbers, bit for bit: it was the extension,
    uninterrupted up to its checkpoint), and its checkpoint makes run.json 2 epochs."""
    from pipeplan.formats import STEP_RECORDS, EpochRecord, read_records

    run, err = failed_extension
    copy = copy_run(run, tmp_path)
    command = shlex.split(err.strip().splitlines()[-1].split("resume with: ")[1])
    assert cli.main([str(copy) if arg == str(run) else arg for arg in command[1:]]) == 0
    failed, resumed = (read_records(r / "run.jsonl") for r in (run, copy))
    assert [r.step for r in resumed if isinstance(r, STEP_RECORDS)] == [0, 1, 2, 3]
    assert [r.epoch for r in resumed if isinstance(r, EpochRecord)] == [0, 1]
    for before, after in zip(failed, resumed, strict=True):
        if not isinstance(before, (*STEP_RECORDS, EpochRecord)):
            continue
        fields = ("loss",) if isinstance(before, STEP_RECORDS) else ("train_loss", "eval_loss")
        assert [getattr(before, f) for f in fields] == [getattr(after, f) for f in fields]
    assert json.loads((copy / "run.json").read_text())["epochs"] == 2


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
@pytest.mark.parametrize("killed", ["after its epoch's record", "mid-epoch"])
def test_report_leaves_out_a_failed_extensions_records(failed_extension, tmp_path, capsys, killed):
    """Found by the twenty-fifth round: a resume for more epochs that failed before its first
    checkpoint left its records past run.json's epochs, and report read them as the run's
    ("14 steps, 2/2 epochs"). They are left out with one notice naming run.jsonl, what it
    left out and the resume that trains them again; the report is of run.json's epochs."""
    run = copy_run(failed_extension[0], tmp_path)
    left_out = "phase 1, steps 2 to 3 and the record of epoch 1"
    if killed == "mid-epoch":  # the round's state: no epoch record, no metrics.csv row
        lines = _lines(run)
        assert lines[-1]["kind"] == "epoch"
        _rewrite(run, lines[:-1])
        rows = (run / "metrics.csv").read_text().splitlines(keepends=True)
        (run / "metrics.csv").write_text("".join(rows[:-1]))
        left_out = "phase 1 and steps 2 to 3"
    before = snapshot(run)
    capsys.readouterr()
    assert cli.main(["report", str(run)]) == 0
    out, err = capsys.readouterr()
    notice = (
        f"pipeplan: WARNING: {run / 'run.jsonl'}: {left_out} left out: past run.json's epochs "
        f"(1), written by a resume for more epochs that stopped before its first checkpoint; "
        f"pipeplan run --resume {run} --epochs N (N > 1) trains on and rewrites them"
    )
    assert err.splitlines() == [notice]
    assert "2 steps, 1/1 epochs" in out
    assert snapshot(run) == before


def _extended_fit_run(tmp_path: Path, resumed: bool) -> tuple[Path, list[str]]:
    """Calibrate's records (four phases of 8 steps on 2 ranks) as a 1-epoch run whose
    epoch 0 closed after phase 1, then phases 2-3 in epoch 1, past run.json's epochs:
    `resumed`, phase 2 entered by --resume (a failed extension's records), else by a
    transition (no run writes those)."""
    from test_report import epoch

    run, argv = _readable(tmp_path, "calibrate")
    lines = []
    before = [s["step_s"] for s in _lines(run) if s["kind"] == "step" and s["phase"] < 2]
    for line in _lines(run):
        if line["kind"] == "phase" and line["phase"] == 2:
            # An epoch lasts at least its steps.
            closed = epoch(0, 0, epoch_s=sum(before) + 1.0, accuracy=None, steps=16)
            lines.append(closed.model_dump(mode="json"))
        if line["kind"] == "phase" and line["phase"] >= 2:
            line = {**line, "start_epoch": 1, "resumed": resumed and line["phase"] == 2}
        elif line["kind"] == "step" and line["phase"] >= 2:
            line = {**line, "epoch": 1}
        lines.append(line)
    _rewrite(run, lines)
    return run, argv


def test_calibrate_fits_none_of_a_failed_extensions_records(tmp_path, capsys):
    """Found by the twenty-fifth round: calibrate fitted the steps a failed resume for more
    epochs recorded past run.json's epochs. It fits the phases of run.json's epochs only,
    and says what it left out once (it reads the records twice)."""
    _, argv = _extended_fit_run(tmp_path, resumed=True)
    capsys.readouterr()
    assert cli.main(argv) == 0
    notices = [line for line in capsys.readouterr().err.splitlines() if "WARNING" in line]
    assert len(notices) == 1 and "phases 2 to 3 and steps 16 to 31 left out" in notices[0]
    calibration = json.loads((tmp_path / "c").read_text())["calibration"]
    assert (calibration["phases_used"], calibration["steps_used"]) == (2, 12)


@pytest.mark.parametrize("command", ["report", "calibrate"])
def test_records_past_run_json_epochs_that_no_resume_wrote_are_refused(tmp_path, capsys, command):
    """Found by the twenty-fifth round's fix: records of an epoch past run.json's were read
    as the run's ("2/1 epochs"). Only a failed resume for more epochs leaves such records:
    without one before them, run.json or run.jsonl was edited, and the line says so."""
    run, argv = _extended_fit_run(tmp_path, resumed=False)
    if command == "report":
        argv = ["report", str(run)]
    fragment = (f"{run / 'run.jsonl'}: phase 2 starts in epoch 1, but run.json says epochs 1",)
    refused(argv, tmp_path, capsys, (*fragment, "no resume for more epochs wrote it"))


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_a_resume_for_more_epochs_refits_on_its_own_records_without_a_warning(tmp_path, capfd):
    """Found by the thirty-eighth round: a healthy `run --resume R --epochs N` (more epochs)
    warned mid-run "phase 1 and steps 8 to 15 left out: past run.json's epochs (1), written by
    a resume for more epochs that stopped before its first checkpoint": the online refit,
    RECALIBRATE_AFTER_STEPS steps into the resumed phase, read run.jsonl under run.json, which
    holds the resume's epochs only from its first checkpoint on, and fitted without the phase
    it refits for. Now the refit reads the records under the configuration the run trains:
    no warning, and its calibration counts the resumed phase's steps."""
    from executor.worker import RECALIBRATE_AFTER_STEPS
    from pipeplan.formats import Profile, load
    from pipeplan.formats.profile import WARMUP_STEPS_PER_PHASE

    steps = RECALIBRATE_AFTER_STEPS  # one refit in each epoch's phase
    argv = ["--nproc", "1", "--epochs", "1", "--max-steps-per-epoch", str(steps)]
    assert cli.main(["run", *argv, "--name", "r", "--runs-dir", str(tmp_path)]) == 0
    run = tmp_path / "r"
    capfd.readouterr()
    assert cli.main(["run", "--resume", str(run), "--epochs", "2"]) == 0
    err = capfd.readouterr().err  # rank 0's lines reach the terminal from its process
    assert "WARNING" not in err, err
    refit = load(Profile, run / "calibration-2.json").calibration  # the resume's refit
    # Both phases: phase 0 alone gives at most its steps past the warm-up.
    assert refit.phases_used == 2, refit
    assert refit.steps_used > steps - WARMUP_STEPS_PER_PHASE, refit
    assert json.loads((run / "run.json").read_text())["epochs"] == 2


# ----------------------------------------------------------------------------- eighth round
# (run.json, fields, the value it is edited to, the value the checkpoint was trained with as
# the one line shows it): every field but those --resume may change (nproc, epochs up only,
# collective_timeout_s) is the checkpoint's.
TRAINED_WITH = {
    "lr": (0.5, "0.001"),
    "seed": (7, "0"),
    "freeze": ("none", '"auto"'),
    "weight_decay": (0.5, "0.01"),
    "warmup_steps": (1, "0"),
    "alpha": (0.5, "0.3"),
    "clip_grad_norm": (1.0, "null"),
    "dropout": (0.5, "null"),
    "checkpoint_every": (1, "null"),
    "cache": (False, "true"),
    "name": ("renamed", '"r"'),
}


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
@pytest.mark.parametrize("field", TRAINED_WITH)
def test_resume_refuses_a_run_json_edited_since_its_checkpoint(
    finished_run, tmp_path, capsys, field
):
    """run.json edited between a run and its resume (the freeze mode, lr, seed, …) resumed
    the checkpoint's state under another meaning without a word: the manifest now carries
    the configuration it was trained under, and the resume names the field that differs."""
    run = copy_run(finished_run, tmp_path)
    value, trained = TRAINED_WITH[field]
    test_hostile.edit_run_json(run, **{field: value})
    shown = json.dumps(value)
    fragment = f"{run / 'run.json'}: {field} is {shown}, but {_manifest(run)} has config.{field} "
    refused(["run", "--resume", str(run), *MORE], tmp_path, capsys, fragment + trained)


def _first_epoch_manifest(step: int, config):
    """A 2-rank checkpoint manifest of step `step`, taken as epoch 1 began, trained under
    `config` (a RunConfig)."""
    from pipeplan.formats import CheckpointManifest

    return CheckpointManifest(
        step=step,
        epoch=1,
        step_in_epoch=0,
        phase=0,
        frozen_layers=0,
        grad_history=[],
        grad_norm_sums={},
        grad_norm_steps=0,
        world_size=2,
        model=config.model,
        config=config,
    )


def test_every_field_but_the_resumable_ones_is_the_checkpoints(tmp_path):
    """check_trained_with goes through every RunConfig field: each changed alone is refused
    unless --resume may change it, and epochs only upwards."""
    from executor.checkpoint import RESUMABLE, check_trained_with
    from pipeplan.errors import InputFileError
    from pipeplan.formats import RunConfig

    trained = RunConfig(name="r", seq_len=16, tokenizer="t", task="classification")
    manifest = _first_epoch_manifest(4, trained)
    other = {  # a valid value unlike the trained one, per field
        "name": "x",
        "model": "bert-synth",
        "init": "random",
        "task": "causal-lm",
        "data": "synth-text",
        "tokenizer": "u",
        "seq_len": 32,
        "nproc": 3,
        "device": "cuda",
        "precision": "bf16",
        "global_batch": 32,
        "epochs": 5,
        "max_steps_per_epoch": 3,
        "lr": 0.5,
        "weight_decay": 0.5,
        "warmup_steps": 2,
        "clip_grad_norm": 1.0,
        "freeze": "none",
        "alpha": 0.5,
        "freeze_list": [0, 1],
        "freeze_every": 2,
        "checkpoint_every": 2,
        "cache": False,
        "cache_budget_bytes": 1 << 20,
        "seed": 9,
        "collective_timeout_s": 5.0,
        "dropout": 0.2,
        "device_memory_bytes": 1 << 30,
        "profile": "p.json",
        "plan": "plan.json",
        "plan_sha256": "0" * 64,
        "model_config_sha256": "1" * 64,
        "generation_config_sha256": "2" * 64,
    }
    fields = set(RunConfig.model_fields) - {"schema_version"}
    assert set(other) == fields  # a field added later is listed here too
    for field, value in other.items():
        changed = trained.model_copy(update={field: value})
        if field in RESUMABLE:
            check_trained_with(manifest, changed, tmp_path / "run.json")
        else:
            with pytest.raises(InputFileError, match=f": {field} is "):
                check_trained_with(manifest, changed, tmp_path / "run.json")
    fewer = trained.model_copy(update={"epochs": trained.epochs - 1})
    with pytest.raises(InputFileError, match="epochs is 3 but checkpoint step-4 was trained"):
        check_trained_with(manifest, fewer, tmp_path / "run.json")


def _kept_checkpoints(root: Path, **lrs: float):
    """Checkpoints step-N under `root`/checkpoints, one per `step_N=lr`, trained with that lr,
    and the run.json configuration they share otherwise. Returns (config, {step: manifest})."""
    from pipeplan.formats import RunConfig, dumps

    cfg = RunConfig(name="r", seq_len=16, tokenizer="t", task="classification", lr=0.001)
    kept = {}
    for name, lr in lrs.items():
        step = int(name.removeprefix("step_"))
        kept[step] = _first_epoch_manifest(step, cfg.model_copy(update={"lr": lr}))
        folder = root / "checkpoints" / f"step-{step}"
        folder.mkdir(parents=True)
        (folder / "manifest.json").write_text(dumps(kept[step]))
    return cfg, kept


def test_a_manifest_edited_alone_is_named_not_run_json(tmp_path):
    """Found by the twentieth round: lr edited in checkpoints/step-6/manifest.json only was
    refused as `…/run.json: lr is 0.001 but checkpoint step-6 was trained with 0.002`,
    blaming the unedited run.json and presenting the edit as the truth. run.json and step-4
    agree against step-6: step-6's manifest is named, with the value they hold."""
    from executor.checkpoint import check_trained_with
    from pipeplan.errors import InputFileError

    cfg, kept = _kept_checkpoints(tmp_path, step_4=0.001, step_6=0.002)
    manifest = tmp_path / "checkpoints" / "step-6" / "manifest.json"
    with pytest.raises(InputFileError) as caught:
        check_trained_with(kept[6], cfg, tmp_path / "run.json")
    assert str(caught.value).startswith(
        f"{manifest}: config.lr is 0.002, but run.json and checkpoint step-4 say 0.001; "
    )


def test_run_json_and_a_lone_manifest_that_disagree_are_both_named(tmp_path):
    """Found by the twentieth round: with no other checkpoint to tell which file was edited,
    the line still said run.json was wrong and the manifest right ("was trained with"). Both
    files are named side by side now, neither taken for the truth."""
    from executor.checkpoint import check_trained_with
    from pipeplan.errors import InputFileError

    cfg, kept = _kept_checkpoints(tmp_path, step_6=0.002)
    manifest = tmp_path / "checkpoints" / "step-6" / "manifest.json"
    with pytest.raises(InputFileError) as caught:
        check_trained_with(kept[6], cfg, tmp_path / "run.json")
    assert str(caught.value).startswith(
        f"{tmp_path / 'run.json'}: lr is 0.001, but {manifest} has config.lr 0.002; one of the "
        "two was edited since the run trained"
    )


def test_every_kept_checkpoint_is_held_to_run_json(tmp_path):
    """Found by the twentieth round: lr edited in run.json and in the latest manifest alike
    resumed at the new lr (exit 0, other weights), though step-4's manifest still said the
    old one: only the latest manifest was compared. Every kept checkpoint is, and the one
    that disagrees is named."""
    from executor.checkpoint import check_trained_with
    from pipeplan.errors import InputFileError

    cfg, kept = _kept_checkpoints(tmp_path, step_4=0.001, step_6=0.002)
    edited = cfg.model_copy(update={"lr": 0.002})
    older = tmp_path / "checkpoints" / "step-4" / "manifest.json"
    with pytest.raises(InputFileError) as caught:
        check_trained_with(kept[6], edited, tmp_path / "run.json")
    assert str(caught.value).startswith(
        f"{older}: config.lr is 0.001, but run.json and checkpoint step-6 say 0.002; "
    )
    # A corrupt older manifest is load_latest's to report, not a disagreement.
    older.write_text("{")
    check_trained_with(kept[6], edited, tmp_path / "run.json")


# A run with a checkpoint after every step, one layer frozen by the list: 1 rank, 1 epoch of 3.
MID_EPOCH = ["--nproc", "1", "--epochs", "1", "--max-steps-per-epoch", "3"]
MID_EPOCH += ["--checkpoint-every", "1", "--freeze", "1"]


@pytest.fixture(scope="module")
def mid_epoch_run(tmp_path_factory) -> Path:
    """Uninterrupted, with checkpoints step-2 (mid-epoch) and step-3 (its end) kept."""
    import cli

    root = tmp_path_factory.mktemp("mid")
    assert cli.main(["run", *MID_EPOCH, "--name", "m", "--runs-dir", str(root)]) == 0
    return root / "m"


def _interrupted(run: Path, tmp_path: Path) -> Path:
    """A copy of `run` as a kill right after its mid-epoch checkpoint step-2 leaves it: that
    checkpoint the latest, the records up to step 2, no end (step-3, model/, summary.json,
    and no epoch row in metrics.csv yet)."""
    import shutil

    cut = copy_run(run, tmp_path)
    shutil.rmtree(cut / "checkpoints" / "step-3")
    shutil.rmtree(cut / "model")
    (cut / "summary.json").unlink()
    (cut / "metrics.csv").unlink()
    (cut / "checkpoints" / "latest").write_text("step-2\n")
    kept = [
        r for r in _lines(cut) if r["kind"] == "phase" or (r["kind"] == "step" and r["step"] < 2)
    ]
    _rewrite(cut, kept)
    return cut


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_a_mid_epoch_resume_records_the_epoch_as_the_uninterrupted_run(mid_epoch_run, tmp_path):
    """Resumed at step 2 of 3, the epoch's record held the loss of step 2 alone, and its
    time and samples/s only the resumed step's. Now it is the uninterrupted run's: the mean
    loss over all 3 steps (equal bit for bit, as the weights are), the same steps, frozen
    layers and layout, and a time that covers every step; its phase is the resumed one, the
    phase it ends in (thirty-seventh round: the layout its end ran on, here the same)."""
    import torch

    cut = _interrupted(mid_epoch_run, tmp_path)
    manifest = json.loads((cut / "checkpoints" / "step-2" / "manifest.json").read_text())
    assert manifest["step_in_epoch"] == 2  # a resume in the middle of the epoch
    import cli

    assert cli.main(["run", "--resume", str(cut)]) == 0
    weights = [
        torch.load(r / "checkpoints" / "step-3" / "model.pt", weights_only=True)
        for r in (mid_epoch_run, cut)
    ]
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])
    (full,), (resumed,) = (
        [r for r in _lines(r) if r["kind"] == "epoch"] for r in (mid_epoch_run, cut)
    )
    phases = [p for p in _lines(cut) if p["kind"] == "phase"]
    assert [p["resumed"] for p in phases] == [False, True]
    assert phases[0]["layout"] == phases[1]["layout"]  # the same layout, resumed
    assert (full["phase"], resumed["phase"]) == (0, 1)  # the phase each ends in
    same = ("epoch", "frozen_layers", "steps", "train_loss", "eval_loss", "grad_norms")
    assert {k: resumed[k] for k in same} == {k: full[k] for k in same}
    layouts = [(r / "metrics.csv").read_text().split(",")[-1] for r in (mid_epoch_run, cut)]
    assert layouts[0] == layouts[1]  # metrics.csv's layout column, as uninterrupted
    assert resumed["train_loss"] == sum(s["loss"] for s in _steps(_lines(cut))) / 3
    # Its time covers the recorded time of all 3 steps (not the resumed one's alone), and its
    # samples/s are the 3 steps' samples over it.
    steps_s = sum(s["step_s"] for s in _steps(_lines(cut)))
    assert resumed["epoch_s"] >= steps_s
    samples = 3 * 64
    assert resumed["samples_per_s"] == pytest.approx(samples / resumed["epoch_s"], rel=1e-12)


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_a_mid_epoch_resume_on_another_nproc_records_the_epoch_in_its_end_layout(
    mid_epoch_run, tmp_path, capfd
):
    """Found by the thirty-seventh round: a 2-rank run killed after its mid-epoch checkpoint
    and resumed with --nproc 1 logged the epoch as `… 1x1 M=1 1f1b cached`, but its record
    named the phase its first step ran in: metrics.csv's row and `report` gave the epoch the
    2x1 layout it started on (and that layout the 1x1 resume's samples/s). Now the epoch
    record names the phase it ends in, the one its last steps and evaluation ran on, as its
    line does: metrics.csv and `report` name the resumed layout (here 1 rank resumed on 2)."""
    from pipeplan.formats import EpochRecord, PhaseRecord, read_records

    cut = _interrupted(mid_epoch_run, tmp_path)
    capfd.readouterr()
    assert cli.main(["run", "--resume", str(cut), "--nproc", "2"]) == 0
    logged = capfd.readouterr().err  # rank 0's lines reach the terminal from its process
    records = read_records(cut / "run.jsonl")
    before, after = [r for r in records if isinstance(r, PhaseRecord)]
    assert after.resumed and after.pricing.cluster.num_devices == 2
    started, ended = before.layout.label(), after.layout.label()
    assert started != ended  # the epoch began on 1 rank and ends on 2
    (epoch,) = [r for r in records if isinstance(r, EpochRecord)]
    assert epoch.phase == after.phase
    rows = (cut / "metrics.csv").read_text().splitlines()
    assert rows[1].split(",")[0] == "0" and rows[1].split(",")[-1] == ended
    (line,) = [x for x in logged.splitlines() if "INFO: epoch 1/1:" in x]
    assert line.endswith(ended) or f"{ended}," in line
    assert cli.main(["report", str(cut), "--json"]) == 0
    (reported,) = json.loads(capfd.readouterr().out)["epochs"]
    layout = after.layout.model_dump(mode="json")
    assert (reported["phase"], reported["layout"]) == (after.phase, layout)


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
@pytest.mark.parametrize("named", [2, 0, 1])
def test_an_epoch_record_names_the_phase_it_ends_in(mid_epoch_run, tmp_path, named):
    """The reader's side of the thirty-seventh round's fix: an epoch split over phases 0, 1
    and 2 (two resumes within it) names phase 2, where it ends; phase 0, its first step's,
    as records written before the fix did, still loads; phase 1 is neither, and is refused
    naming both."""
    from pipeplan.errors import InputFileError
    from pipeplan.formats import read_records

    phase, *steps, epoch = _lines(mid_epoch_run)
    assert [s["step"] for s in steps] == [0, 1, 2] and epoch["phase"] == 0
    lines = [phase, steps[0]]
    for n in (1, 2):  # a resume before each of steps 1 and 2, on the same layout
        lines += [{**phase, "phase": n, "start_step": n, "resumed": True}, {**steps[n], "phase": n}]
    _rewrite(tmp_path, [*lines, {**epoch, "phase": named}])
    if named != 1:
        assert read_records(tmp_path / "run.jsonl")[-1].phase == named
        return
    with pytest.raises(InputFileError) as caught:
        read_records(tmp_path / "run.jsonl")
    assert str(caught.value) == (
        f"{tmp_path / 'run.jsonl'}:7: epoch 0: phase 1, but it ends in phase 2 (its first step "
        "ran in phase 0)"
    )


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_resume_refuses_gradient_norms_of_a_frozen_layer(mid_epoch_run, tmp_path, capsys):
    """step-2's manifest sums gradient norms of layers 1.. (layer 0 is frozen); a sum for
    layer 0 was a measurement never made, taken by the gradient criterion as made."""
    cut = _interrupted(mid_epoch_run, tmp_path)
    path = cut / "checkpoints" / "step-2" / "manifest.json"
    doc = json.loads(path.read_text())
    assert doc["frozen_layers"] == 1 and doc["grad_norm_steps"] == 2 and doc["grad_norm_sums"]
    assert "0" not in doc["grad_norm_sums"]  # what the run itself wrote
    doc["grad_norm_sums"]["0"] = 1.0
    path.write_text(json.dumps(doc))
    fragment = (str(path), "grad_norm_sums: layer 0, but layers 0..0 are frozen")
    refused(["run", "--resume", str(cut)], tmp_path, capsys, fragment)


# ------------------------------------------------------------- a checkpoint at an epoch's end
# (twenty-third round) A periodic checkpoint due on an epoch's last step is written after the
# epoch's record and its freeze decision; the history check took every checkpoint at an epoch's
# start, and every resume from one, for a run's end (where no decision is made), and refused
# the killed run's resume, export, report and calibrate for good.

# 1 rank, 2 epochs of 5 steps (calibrate fits a phase of 5), --freeze auto, a checkpoint every
# 5 steps: step-5 at epoch 1's start (after epoch 0's decision) and the final step-10, both kept.
EPOCH = 5
BOUNDARY = ["--nproc", "1", "--epochs", "2", "--max-steps-per-epoch", str(EPOCH)]
BOUNDARY += ["--checkpoint-every", str(EPOCH), "--freeze", "auto"]


@pytest.fixture(scope="module")
def boundary_run(tmp_path_factory) -> Path:
    """Uninterrupted: BOUNDARY's run."""
    root = tmp_path_factory.mktemp("boundary")
    assert cli.main(["run", *BOUNDARY, "--name", "b", "--runs-dir", str(root)]) == 0
    return root / "b"


@pytest.fixture(scope="module")
def boundary_resumed(boundary_run, tmp_path_factory) -> Path:
    """`boundary_run` cut back to step-5 and resumed to its end."""
    cut = _cut_at_the_epochs_end(boundary_run, tmp_path_factory.mktemp("resumed"))
    assert cli.main(["run", "--resume", str(cut)]) == 0
    return cut


def _cut_at_the_epochs_end(run: Path, tmp_path: Path) -> Path:
    """A copy of `boundary_run` as a kill right after its checkpoint step-5 leaves it: that
    checkpoint the latest, the records of epoch 0 and its steps, no end (step-10, model/,
    summary.json, and epoch 1's row in metrics.csv)."""
    cut = copy_run(run, tmp_path)
    shutil.rmtree(cut / "checkpoints" / f"step-{2 * EPOCH}")
    shutil.rmtree(cut / "model")
    (cut / "summary.json").unlink()
    (cut / "checkpoints" / "latest").write_text(f"step-{EPOCH}\n")
    kept = [
        r
        for r in _lines(cut)
        if r["kind"] == "phase"
        or (r["kind"] == "step" and r["step"] < EPOCH)
        or (r["kind"] == "epoch" and r["epoch"] < 1)
    ]
    _rewrite(cut, kept)
    rows = (cut / "metrics.csv").read_text().splitlines(keepends=True)
    (cut / "metrics.csv").write_text("".join(rows[:2]))  # the header and epoch 0's row
    return cut


def _held_to_records(run: Path, step: int, epochs: int):
    """checkpoints/step-`step`'s manifest, after resume's check against run.jsonl (a resume
    to `epochs` makes it), or the check's InputFileError."""
    from executor.history import check_manifest_records
    from pipeplan.formats import CheckpointManifest, RunConfig, load, read_records

    manifest = load(CheckpointManifest, run / "checkpoints" / f"step-{step}" / "manifest.json")
    cfg = load(RunConfig, run / "run.json").model_copy(update={"epochs": epochs})
    check_manifest_records(manifest, read_records(run / "run.jsonl"), run, cfg)
    return manifest


def _weights(run: Path, step: int) -> dict:
    import torch

    return torch.load(run / "checkpoints" / f"step-{step}" / "model.pt", weights_only=True)


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_a_run_killed_after_a_checkpoint_at_an_epochs_end_resumes_as_uninterrupted(
    boundary_run, boundary_resumed
):
    """Found by the twenty-third round: a run killed after its --checkpoint-every checkpoint
    at epoch 1's start (not its last epoch) was refused on resume, "grad_history: 1 entries,
    but --freeze auto made 0 gradient decisions by step N": epoch 0's decision, which that
    checkpoint follows, was not counted. Resumed, it ends as the uninterrupted run: the same
    weights bit for bit and the same gradient history, no run end recorded."""
    import torch

    cut = boundary_resumed / "checkpoints" / f"step-{EPOCH}" / "manifest.json"
    doc = json.loads(cut.read_text())
    assert (doc["epoch"], doc["step_in_epoch"], len(doc["grad_history"])) == (1, 0, 1)
    full, resumed = (_weights(r, 2 * EPOCH) for r in (boundary_run, boundary_resumed))
    assert full.keys() == resumed.keys()
    assert all(torch.equal(full[k], resumed[k]) for k in full)
    manifests = [_held_to_records(r, 2 * EPOCH, 3) for r in (boundary_run, boundary_resumed)]
    assert manifests[0].grad_history == manifests[1].grad_history
    assert [m.run_ends for m in manifests] == [[], []]  # the resume at step 5 is no run's end
    assert [p["resumed"] for p in _lines(boundary_resumed) if p["kind"] == "phase"] == [
        False,
        True,
    ]


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_resume_refuses_a_sum_missing_for_an_active_layer(mid_epoch_run, tmp_path, capsys):
    """Found by the twenty-third round: step-2's manifest with the sum of an active layer
    removed (grad_norm_steps 2 kept) resumed with exit 0; the lost steps' norms were taken
    as zero and the epoch recorded other gradient norms than the uninterrupted run."""
    cut = _interrupted(mid_epoch_run, tmp_path)
    path = cut / "checkpoints" / "step-2" / "manifest.json"
    doc = json.loads(path.read_text())
    last = max(doc["grad_norm_sums"], key=int)
    del doc["grad_norm_sums"][last]
    path.write_text(json.dumps(doc))
    fragment = (str(path), f"grad_norm_sums: layer {last} is missing, but grad_norm_steps is 2")
    refused(["run", "--resume", str(cut)], tmp_path, capsys, fragment)


def test_a_manifest_with_steps_but_no_sums_is_refused(mid_epoch_run):
    """Found by the twenty-third round: grad_norm_sums emptied while grad_norm_steps is 2
    was accepted by resume, export and report (now the manifest itself is invalid, so a
    resume or export passes over it for an older checkpoint with the usual notice)."""
    from pydantic import ValidationError

    from pipeplan.formats import CheckpointManifest

    doc = json.loads((mid_epoch_run / "checkpoints" / "step-2" / "manifest.json").read_text())
    assert doc["grad_norm_steps"] == 2
    CheckpointManifest.model_validate(doc)  # as the run wrote it
    with pytest.raises(ValidationError, match="grad_norm_sums is empty, but grad_norm_steps is 2"):
        CheckpointManifest.model_validate({**doc, "grad_norm_sums": {}})


def test_a_manifests_steps_summed_are_those_since_the_sums_restarted(mid_epoch_run):
    """Found by the twenty-sixth round: step-7's grad_norm_steps edited from 7 to 6 (its
    step_in_epoch 7, no --freeze-every) resumed with exit 0, and the epoch recorded the
    untouched resume's gradient norms scaled by 7/6, which `--freeze auto` decides by. The
    run restarts its sums at every epoch's end and every --freeze-every decision: a manifest
    counting other steps is invalid (a resume or export passes over it for an older
    checkpoint, with the usual notice; report and calibrate refuse it)."""
    from pydantic import ValidationError

    from pipeplan.formats import CheckpointManifest

    doc = json.loads((mid_epoch_run / "checkpoints" / "step-2" / "manifest.json").read_text())
    assert (doc["step_in_epoch"], doc["grad_norm_steps"]) == (2, 2)  # as the run wrote it
    for steps in (1, 0):
        summed = {**doc, "grad_norm_steps": steps, "grad_norm_sums": doc["grad_norm_sums"]}
        if not steps:
            summed["grad_norm_sums"] = {}  # none summed, nothing summed: only the count is off
        said = f"grad_norm_steps {steps}, but step 2 is 2 steps after its epoch's start (step 0)"
        with pytest.raises(ValidationError, match=re.escape(said)):
            CheckpointManifest.model_validate(summed)
    # With --freeze-every 2: step 5 (2 into its epoch of 3) is 1 step after the decision at 4.
    manifest, *_ = _decided("mid-epoch")
    assert manifest.grad_norm_steps == 1
    said = "grad_norm_steps 2, but step 5 is 1 step after the --freeze-every 2 decision at step 4"
    with pytest.raises(ValidationError, match=re.escape(said)):
        CheckpointManifest.model_validate({**manifest.model_dump(), "grad_norm_steps": 2})


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
@pytest.mark.parametrize("command", ["report", "calibrate", "export", "resume"])
def test_every_command_refuses_a_latest_manifest_counting_other_steps(
    mid_epoch_run, tmp_path, capsys, command
):
    """Found by the twenty-sixth round (as above): a run stopped mid-epoch with step-2 its
    only checkpoint, its grad_norm_steps one short, was resumed (and exported, reported)
    with exit 0. No other checkpoint to fall back on: one line naming the manifest."""
    cut = _interrupted(mid_epoch_run, tmp_path)
    path = cut / "checkpoints" / "step-2" / "manifest.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "grad_norm_steps": 1}))
    fragment = (str(path), "grad_norm_steps 1, but step 2 is 2 steps after its epoch's start")
    argv = _commands(cut, tmp_path)[command]
    if command == "resume":
        argv = ["run", "--resume", str(cut)]  # mid-epoch: it has its epoch to finish
    refused(argv, tmp_path, capsys, fragment)


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
@pytest.mark.parametrize("command", ["report", "calibrate", "export"])
def test_every_command_takes_a_run_killed_after_a_checkpoint_at_an_epochs_end(
    boundary_run, tmp_path, capsys, command
):
    """Found by the twenty-third round: report, calibrate and export of the killed run
    (latest checkpoint step-5, at epoch 1's start) exited 2 with resume's grad_history line;
    they take it now."""
    cut = _cut_at_the_epochs_end(boundary_run, tmp_path)
    assert cli.main(_priced_argv(command, cut, tmp_path)) == 0, capsys.readouterr().err


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_a_finished_run_resumed_at_an_epochs_end_is_extended_and_checked(
    boundary_resumed, tmp_path
):
    """The run's end is a recorded fact, not the position: `boundary_resumed` (resumed at
    step 5 after epoch 0's decision, finished at step 10 without one) extended by
    `--resume --epochs 3` lists step 10 as a run's end (run_ends), not step 5; its
    checkpoints hold the one decision and pass the next resume's check. Found by the
    twenty-third round: the check took every resume at an epoch's start for a run's end."""
    run = copy_run(boundary_resumed, tmp_path)
    assert cli.main(["run", "--resume", str(run), "--epochs", "3"]) == 0
    before, after = (_held_to_records(run, n * EPOCH, 4) for n in (2, 3))
    assert (before.run_ends, after.run_ends) == ([], [2 * EPOCH])
    assert after.grad_history == before.grad_history and len(after.grad_history) == 1
    phases = [(p["start_step"], p["resumed"]) for p in _lines(run) if p["kind"] == "phase"]
    assert phases == [(0, False), (EPOCH, True), (2 * EPOCH, True)]


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_a_summary_of_the_end_a_resume_continued_from_is_read(boundary_resumed, tmp_path, capsys):
    """A summary of fewer steps than the records is one written at the end a resume then
    continued from (a resume killed before its own end leaves it): read, as long as run.jsonl
    records that resume at its step, and held to the records before it; any other count is
    refused. Found by the sixty-first round: one of as many steps but other totals was read
    too, where run.jsonl records a resume (taken for the end before a resume from an older
    checkpoint ran the steps again, whose summary that resume now drops): a resumed run's
    summary is every field of its records' (or of the end's before the resume)."""
    from pipeplan.formats import RunConfig, load, read_records
    from pipeplan.report import run_summary

    run = copy_run(boundary_resumed, tmp_path)
    resumed = [r["start_step"] for r in _lines(run) if r["kind"] == "phase" and r["resumed"]]
    assert resumed == [EPOCH]
    summary = run / "summary.json"
    doc = json.loads(summary.read_text())
    fragment = f"{summary}: total_s is {doc['total_s'] * 2}, but {run / 'run.jsonl'} makes it"
    summary.write_text(json.dumps({**doc, "total_s": doc["total_s"] * 2}))
    refused(["report", str(run)], tmp_path, capsys, fragment)
    records = read_records(run / "run.jsonl")
    cut = next(i for i, r in enumerate(records) if getattr(r, "resumed", False))
    earlier = run_summary(load(RunConfig, run / "run.json"), records[:cut]).model_dump()
    assert earlier["steps"] == EPOCH
    summary.write_text(json.dumps(earlier))
    assert cli.main(["report", str(run)]) == 0, capsys.readouterr().err
    capsys.readouterr()
    summary.write_text(json.dumps({**earlier, "total_s": earlier["total_s"] + 1}))
    refused(["report", str(run)], tmp_path, capsys, f"{summary}: total_s is ")
    summary.write_text(json.dumps({**doc, "steps": EPOCH - 1}))
    fragment = f"{summary}: steps is {EPOCH - 1}, but {run / 'run.jsonl'} records {2 * EPOCH}"
    refused(["report", str(run)], tmp_path, capsys, fragment)


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_a_summary_of_more_steps_ends_at_an_epochs_end_within_run_jsons(
    boundary_resumed, tmp_path, capsys
):
    """Found by the sixty-second round: a resumed run's summary.json of 61 or 10^12 steps (5
    epochs of 12, records of 60) was reported and exported with every other field unchecked,
    taken for one written before a resume from an older checkpoint rewrote the records. Such
    an end falls at an epoch's end within run.json's epochs (a resume only adds epochs): any
    other is refused in one line naming summary.json's steps."""
    from pipeplan.formats import RunConfig, load, read_records
    from pipeplan.runfiles import check_summary

    run = copy_run(boundary_resumed, tmp_path)
    summary = run / "summary.json"
    doc = json.loads(summary.read_text())
    for steps in (2 * EPOCH + 1, 10**12):
        summary.write_text(json.dumps({**doc, "steps": steps, "total_s": 99999.0}))
        fragment = (f"{summary}: steps is {steps}, but", "past run.json's 2 epochs (they end at")
        refused(["report", str(run)], tmp_path, capsys, fragment)
    # Records a resume from step-5 rewrote up to its phase: an end at an epoch's end (step 10)
    # is one the run could have had; one inside an epoch is not.
    config, records = load(RunConfig, run / "run.json"), read_records(run / "run.jsonl")
    cut = next(i for i, r in enumerate(records) if getattr(r, "resumed", False))
    summary.write_text(json.dumps({**doc, "steps": 2 * EPOCH}))
    check_summary(run, config, records[: cut + 1])
    summary.write_text(json.dumps({**doc, "steps": EPOCH + 1}))
    with pytest.raises(InputFileError, match=f"steps is {EPOCH + 1}, .* inside epoch 1;"):
        check_summary(run, config, records[: cut + 1])


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
@pytest.mark.parametrize("command", ["report", "calibrate"])
def test_a_resumed_runs_records_are_held_to_its_summary(
    boundary_resumed, tmp_path, capsys, command
):
    """Found by the sixty-first round: in a resumed run, phase 0's transition_s raised to
    10^6 s in run.jsonl was reported ("training 1000021.8 s" of a 22 s run) and calibrated
    from: summary.json, which the run wrote from its records, was held to them only without
    a resume. It is held in every field now: one line naming both files."""
    run = copy_run(boundary_resumed, tmp_path)
    lines = _lines(run)
    next(r for r in lines if r["kind"] == "phase")["transition_s"] = 1e6
    _rewrite(run, lines)
    total = json.loads((run / "summary.json").read_text())["total_s"]
    fragment = f"{run / 'summary.json'}: total_s is {total!r}, but {run / 'run.jsonl'} makes it "
    refused(_commands(run, tmp_path)[command], tmp_path, capsys, fragment)


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_a_manifests_phase_is_the_phase_of_its_last_step(mid_epoch_run, tmp_path, capsys):
    """Found by the twenty-third round: a manifest's phase edited to name a resume's phase
    that started at its step (one that never ran before the checkpoint) was accepted by
    resume, report and export. Its phase is its last step's, or a transition entered at its
    step (every transition is a checkpoint), never a resume's."""
    cut = _interrupted(mid_epoch_run, tmp_path)
    lines = _lines(cut)
    first = next(r for r in lines if r["kind"] == "phase")
    # What a resume from step-2 that stopped before its first step leaves in run.jsonl.
    _rewrite(cut, [*lines, {**first, "phase": 1, "start_step": 2, "resumed": True}])
    path = cut / "checkpoints" / "step-2" / "manifest.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "phase": 1}))
    fragment = (str(path), "phase: 1, but run.jsonl recorded step 1 in phase 0", "a resume")
    refused(["run", "--resume", str(cut)], tmp_path, capsys, fragment)


EVAL_FIELDS_EDITED = {"eval_accuracy": 0.99, "eval_loss": 0.5}


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_a_run_end_run_jsonl_does_not_record_is_refused(boundary_run, tmp_path, capsys):
    """A manifest's run_ends is held to run.jsonl: a run end listed where no resume is
    recorded (step 5 of the uninterrupted run) would drop a decision from the count."""
    run = copy_run(boundary_run, tmp_path)
    path = run / "checkpoints" / f"step-{2 * EPOCH}" / "manifest.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "run_ends": [EPOCH]}))
    fragment = (str(path), "run_ends: [5] lists step 5, but run.jsonl records no resume at")
    refused(["run", "--resume", str(run), "--epochs", "3"], tmp_path, capsys, fragment)


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
@pytest.mark.parametrize("command", ["resume", "export"])
@pytest.mark.parametrize("field", EVAL_FIELDS_EDITED)
def test_resume_and_export_hold_the_records_to_metrics_csv(
    finished_run, tmp_path, capsys, command, field
):
    """Found by the twenty-third round: an epoch record's eval_accuracy edited to 0.99 (or
    eval_loss to 0.5) was resumed with exit 0, and the resume rewrote metrics.csv from the
    edited record, after which report and calibrate accepted it (laundered); export accepted
    it too. Both compare the records with metrics.csv before anything starts or is written."""
    run = copy_run(finished_run, tmp_path)
    lines = _lines(run)
    epoch = next(r for r in lines if r["kind"] == "epoch")
    epoch[field] = EVAL_FIELDS_EDITED[field]
    _rewrite(run, lines)
    argv = ["run", "--resume", str(run), *MORE]
    if command == "export":
        argv = ["export", str(run), "--out", str(tmp_path / "out")]
    fragment = (f"{run / 'metrics.csv'}: epoch 0: {field}", f"{run / 'run.jsonl'}'s record")
    refused(argv, tmp_path, capsys, fragment)
    assert not (tmp_path / "out").exists()


# ----------------------------------------------------------------------------- torchrun's entry
# `python -m executor.launch RUN [--resume]`, what torchrun starts on every node, made none of
# the checks `pipeplan run` makes. Each case runs it as torchrun would (one rank, its
# environment) on a copy of `finished_run`: one line, exit 2, no file of the run changed.
# A refusal comes before any process group: the refusals run `launch.main` in a fork of this
# process (`_main_forked`, torch imported already: no start-up of seconds each), but one,
# test_the_entry_without_resume_refuses_a_run_that_started, which starts the entry as
# torchrun does (`_entry`: its own interpreter, whose whole stderr is the one line).

ROOT = Path(__file__).resolve().parents[1]
RANK_ENV = {
    "RANK": "0",
    "WORLD_SIZE": "1",
    "LOCAL_RANK": "0",
    "LOCAL_WORLD_SIZE": "1",
    "MASTER_ADDR": "127.0.0.1",
    "MASTER_PORT": "29555",
}


def _entry(
    run: Path, *args: str, timeout: float = 90, profile: Path | None = None
) -> subprocess.CompletedProcess:
    """The entry on `run`, started as torchrun starts it (no `pipeplan run` above it), under
    `python -m cProfile -o profile` where one is given."""
    env = {k: v for k, v in os.environ.items() if k != "PIPEPLAN_LAUNCHER_PID"}
    env = {**env, **RANK_ENV, "PYTHONPATH": str(ROOT)}
    profiled = ["-m", "cProfile", "-o", str(profile)] if profile else []
    command = [sys.executable, *profiled, "-m", "executor.launch", str(run), *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)


def _entry_refused(run: Path, *args: str, fragment: tuple[str, ...], process: bool = False) -> None:
    """The entry on `run` with `args` refuses it: exit 2, one line holding every `fragment`,
    no file of the run changed. In a fork of this process (`_main_forked`, under `_entry`'s
    environment), or with `process` in a process started as torchrun starts it (`_entry`)."""
    before = snapshot(run)
    if process:
        done = _entry(run, *args)
        code, err = done.returncode, done.stderr
    else:
        env = {k: v for k, v in os.environ.items() if k != "PIPEPLAN_LAUNCHER_PID"}
        code, err = _main_forked([str(run), *args], {**env, **RANK_ENV, "PYTHONPATH": str(ROOT)})
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err[-3000:]
    assert lines[0].startswith("pipeplan: error: ") and all(f in lines[0] for f in fragment)
    assert snapshot(run) == before


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_the_entry_without_resume_refuses_a_run_that_started(finished_run, tmp_path):
    """Without --resume it trained the run again and appended a second run's records. A
    finished run is said to be finished (the twenty-seventh round: the line advised a
    --resume, which was then refused as finished)."""
    run = copy_run(finished_run, tmp_path)
    more = (
        f"trains the epochs run.json holds; to train on: pipeplan run --resume {run} --epochs N > 1"
    )
    # The one refusal in its own process.
    _entry_refused(run, fragment=(str(run), "finished all its 1 epochs", more), process=True)


def test_the_entry_without_resume_says_what_continues_a_started_run(finished_run, tmp_path):
    """The refusal of a started run names what continues it: a finished run is finished
    (train on with more epochs), an unfinished one with a checkpoint resumes from it."""
    from executor.launch import check_not_trained
    from executor.task import read_run_config

    run = copy_run(finished_run, tmp_path)
    cfg = read_run_config(run)
    with pytest.raises(BadArgumentError, match="finished all its 1 epochs"):
        check_not_trained(run, cfg)
    unfinished = cfg.model_copy(update={"epochs": 2})
    with pytest.raises(BadArgumentError) as refusal:
        check_not_trained(run, unfinished)
    assert str(refusal.value) == (
        f"{run}: has started already (it holds run.jsonl); continue it with -m executor.launch "
        f"{run} --resume"
    )


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_the_entry_resume_makes_the_checks_pipeplan_run_resume_makes(finished_run, tmp_path):
    """--resume of a finished run rewrote its manifest, run.jsonl and summary.json (exit 0),
    where `pipeplan run --resume` refuses it."""
    run = copy_run(finished_run, tmp_path)
    # The entry takes no --epochs: its line says where more epochs are given (it said "takes
    # no --epochs" where none was given: the fifty-third round).
    more = (
        f"trains the epochs run.json holds; to train on: pipeplan run --resume {run} --epochs N > 1"
    )
    _entry_refused(run, "--resume", fragment=(str(run), "finished all its 1 epochs", more))


@pytest.mark.parametrize(
    "args", [("--resume", "--resume"), ("--log-dir", "a", "--log-dir=b"), ("--debug", "--debug")]
)
def test_the_entry_refuses_an_option_given_twice(finished_run, tmp_path, args):
    """argparse kept the last of two, where `pipeplan` refuses the second (fifty-third round:
    `--resume --resume` went on to the run's checks)."""
    run = copy_run(finished_run, tmp_path)
    args = tuple(str(tmp_path / a) if a in ("a", "b") else a for a in args)  # logs kept there
    args = tuple(a.replace("=b", f"={tmp_path / 'b'}") for a in args)
    _entry_refused(run, *args, fragment=(f"{args[-1].split('=')[0]} is given more than once",))


def _stale_pending(run: Path, **changes) -> None:
    """A run.resume.json no resume of this entry wrote: run.json with `changes`, as a
    `pipeplan run --resume --epochs N` killed before its first checkpoint leaves it."""
    saved = json.loads((run / "run.json").read_text())
    (run / "run.resume.json").write_text(json.dumps({**saved, **changes}))


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
@pytest.mark.parametrize("changes", [{"epochs": 2}, {"epochs": 2, "lr": 0.5}])
def test_the_entry_resume_ignores_a_run_resume_json_it_did_not_write(
    finished_run, tmp_path, changes
):
    """Found by the twenty-sixth round: torchrun's `--resume` ran a stale run.resume.json
    (left by a killed `pipeplan run --resume --epochs 3`, or hand-made): it trained the epoch
    nobody asked it for (exit 0, run.json then said 3), and one with an edited lr was refused
    naming run.json, which holds the checkpoint's lr. It now resumes run.json as `pipeplan run
    --resume` does: this finished run is refused as finished, nothing changed, the file too."""
    run = copy_run(finished_run, tmp_path)
    _stale_pending(run, **changes)
    _entry_refused(run, "--resume", fragment=(str(run), "finished all its 1 epochs"))


@pytest.mark.multiprocess
@pytest.mark.timeout(180)
def test_the_entry_resume_trains_run_json_not_a_stale_run_resume_json(mid_epoch_run, tmp_path):
    """Found by the twenty-sixth round: the other side of the test above, a run with a step
    left to train: torchrun's `--resume` trained the stale file's extra epoch. It trains
    run.json's one epoch, and removes the file as `pipeplan run --resume` does (its first
    checkpoint would have made it run.json)."""
    run = _interrupted(mid_epoch_run, tmp_path)
    _stale_pending(run, epochs=2)
    done = _entry(run, "--resume", timeout=150)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads((run / "run.json").read_text())["epochs"] == 1
    assert not (run / "run.resume.json").exists()
    epochs = [[r["epoch"] for r in _lines(r) if r["kind"] == "epoch"] for r in (run, mid_epoch_run)]
    assert epochs[0] == epochs[1]  # the uninterrupted run's one epoch, no second


def _prepared_for_torchrun(tmp_path: Path, capsys) -> Path:
    """`finished_run`'s run prepared for torchrun (`--prepare-only`), not started: runs/r."""
    from conftest import FINISHED

    from pipeplan.fileio import release_directory

    argv = ["run", *FINISHED, "--name", "r", "--runs-dir", str(tmp_path / "runs")]
    assert cli.main([*argv, "--prepare-only"]) == 0
    capsys.readouterr()
    release_directory(tmp_path / "runs" / "r")  # this process's claim: torchrun's rank takes it
    return tmp_path / "runs" / "r"


@pytest.mark.multiprocess
@pytest.mark.timeout(180)
def test_the_entry_starts_again_a_run_that_trained_nothing(finished_run, tmp_path, capsys):
    """Found by the twenty-sixth round: a torchrun start stopped before its first step (rank 0
    had opened run.jsonl and written its first phase) was refused by the same command, "has
    started already (it holds run.jsonl); continue it with --resume", and that resume by "no
    checkpoint to resume from". A run that recorded no step starts again as prepared: rank 0
    replaces the records it left, and the run is the uninterrupted one's. The rank runs under
    `python -m cProfile -o FILE`, which wrote no report (found as this project's ranks were
    profiled, 2026-12-06): a trained rank ended in `os._exit`, past the code that writes it."""
    run = _prepared_for_torchrun(tmp_path, capsys)
    first = (finished_run / "run.jsonl").read_text().splitlines(keepends=True)[0]
    assert json.loads(first)["kind"] == "phase"
    (run / "run.jsonl").write_text(first)
    done = _entry(run, timeout=150, profile=tmp_path / "rank.prof")
    assert done.returncode == 0, done.stderr[-3000:]
    assert [r["kind"] for r in _lines(run)] == [r["kind"] for r in _lines(finished_run)]
    assert "train_rank" in str(pstats.Stats(str(tmp_path / "rank.prof")).stats)


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_the_entry_resume_of_a_run_that_trained_nothing_says_to_start_it(tmp_path, capsys):
    """Found by the twenty-sixth round: `--resume` of a run that never trained a step said
    only "no checkpoint to resume from"; it says how the run is started instead."""
    run = _prepared_for_torchrun(tmp_path, capsys)
    start = f"start it with -m executor.launch {run} (without --resume)"
    _entry_refused(run, "--resume", fragment=(str(run), "has trained no step", start))


@pytest.mark.parametrize("records", ["none", "empty"])
def test_run_resume_of_a_run_that_trained_nothing_says_what_starts_it(tmp_path, capsys, records):
    """Found by the twenty-sixth round: `pipeplan run --resume` of a run that never trained
    (prepared, or its start killed outright: an empty run.jsonl) said only "no checkpoint to
    resume from", and a new run of its name "already holds a run". It says what starts it."""
    run = _prepared_for_torchrun(tmp_path, capsys)
    if records == "empty":
        (run / "run.jsonl").touch()
    start = "delete it to run it again (a run prepared for torchrun starts with -m executor.launch"
    start += f" {run})"
    refused(["run", "--resume", str(run)], tmp_path, capsys, ("has trained no step", start))


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_resume_of_a_run_stopped_before_its_first_checkpoint_says_to_delete_it(
    finished_run, tmp_path, capsys
):
    """Found by the twenty-sixth round: a run stopped after some steps but before its first
    checkpoint was refused by `run --resume` as only "no checkpoint to resume from", and its
    name by a new run ("already holds a run"). The refusal says what runs it again."""
    run = copy_run(finished_run, tmp_path)
    shutil.rmtree(run / "checkpoints")
    said = (f"{run}: no checkpoint to resume from: it stopped before it wrote one; delete it",)
    refused(["run", "--resume", str(run)], tmp_path, capsys, said)


def _torn_before_its_first_checkpoint(finished_run: Path, tmp_path: Path) -> Path:
    """`finished_run` copied as a run killed mid-append before its first checkpoint leaves it
    (or a full disk): a phase and a step record, the next step's torn (no newline), and none
    of the files a run writes later (metrics.csv at the epoch's end, checkpoints, model/)."""
    run = copy_run(finished_run, tmp_path)
    for name in ("checkpoints", "model"):
        shutil.rmtree(run / name)
    for name in ("metrics.csv", "summary.json"):
        (run / name).unlink()
    lines = (run / "run.jsonl").read_text().splitlines(keepends=True)
    (run / "run.jsonl").write_text("".join(lines[:2]) + '{"kind": "step", "step": 1, "ep')
    return run


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
@pytest.mark.parametrize("entry", ["run --resume", "torchrun --resume", "torchrun"])
def test_a_torn_record_notice_never_precedes_the_no_checkpoint_refusal(
    finished_run, tmp_path, capsys, entry
):
    """Found by the twenty-seventh round: a run killed mid-append (or on a full disk) before
    its first checkpoint, its last record torn, was refused by `run --resume` and torchrun's
    entry (with and without --resume) after a second line, the torn record's WARNING: the
    check whether the run trained read the records with their notice. One line, nothing
    changed."""
    run = _torn_before_its_first_checkpoint(finished_run, tmp_path)
    none = "no checkpoint to resume from"
    if entry == "run --resume":
        said = (f"{run}: {none}: it stopped before it wrote one; delete it",)
        refused(["run", "--resume", str(run)], tmp_path, capsys, said)
    elif entry == "torchrun --resume":
        _entry_refused(run, "--resume", fragment=(f"{run}: {none}: it stopped before",))
    else:
        _entry_refused(run, fragment=(f"{run}: has started already (it holds run.jsonl)", none))


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_the_entry_refusing_a_run_without_a_checkpoint_names_no_resume(finished_run, tmp_path):
    """Found by the twenty-sixth round: a run that trained steps but has no checkpoint was
    refused "continue it with … --resume", which then said "no checkpoint to resume from".
    The refusal says that nothing continues it: a new run trains it again."""
    run = copy_run(finished_run, tmp_path)
    shutil.rmtree(run / "checkpoints")
    more = "it has no checkpoint to resume from: prepare a new run to train it again"
    _entry_refused(run, fragment=(str(run), "has started already (it holds run.jsonl)", more))


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
@pytest.mark.parametrize("entry", ["torchrun", "torchrun --resume", "run --resume"])
def test_a_run_inside_another_run_is_not_trained_there(tmp_path, capsys, entry):
    """Thirteenth round: a run prepared through `--runs-dir LINK`, LINK a symbolic link to
    RUN/checkpoints, lies inside RUN (as one moved there does); torchrun's entry and a resume,
    given it through the link, would train it there. Refused, naming RUN, nothing changed."""
    outer = write_run(tmp_path / "n", elastic_records())
    (outer / "checkpoints").mkdir()
    inner = write_run(outer / "checkpoints" / "zz3", [], nproc=1)
    (inner / "run.jsonl").unlink()  # prepared, not started: the entry would train it
    prepared = sorted(p.name for p in inner.iterdir())
    (tmp_path / "ext").symlink_to(Path("n") / "checkpoints")
    given = tmp_path / "ext" / "zz3"
    fragment = (f"{given}: lies inside the run directory {outer.resolve()}",)
    if entry == "run --resume":
        refused(["run", "--resume", str(given)], tmp_path, capsys, fragment)
    else:
        _entry_refused(given, *entry.split()[1:], fragment=fragment)
    assert sorted(p.name for p in inner.iterdir()) == prepared  # not even claimed


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_the_entry_takes_the_run_lock(finished_run, tmp_path):
    """A `pipeplan run --resume` training the run (here: a process holding its lock, as that
    one does) and the entry both wrote into it."""
    run = copy_run(finished_run, tmp_path)
    hold = "import sys; from pipeplan.fileio import claim_directory as c; c(sys.argv[1]);"
    hold += " print('held', flush=True); sys.stdin.read()"
    holder = subprocess.Popen(
        [sys.executable, "-c", hold, str(run)],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        _entry_refused(run, "--resume", fragment=(str(run), "in use by another pipeplan process"))
    finally:
        holder.kill()
        holder.wait(timeout=30)


def _main_forked(argv: list[str], env: dict[str, str], timeout: float = 30) -> tuple[int, str]:
    """`launch.main(argv)` in a fork of this process under `env` (torch is imported already:
    no start-up cost); returns its exit code and stderr. A fork, so that an entry that
    went on (to the process group, or `die_with_launcher`) cannot take the tests with it;
    killed after `timeout` s (a rendezvous retried for a minute)."""
    import signal
    import time
    import traceback

    from executor import launch

    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: stderr into the pipe, then the entry
        os.dup2(write, 2)
        sys.stderr = sys.__stderr__
        os.environ.clear()
        os.environ.update(env)
        code = 0
        try:
            launch.main(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        except BaseException:
            traceback.print_exc()
            code = 1
        sys.stderr.flush()
        os._exit(code)
    os.close(write)
    deadline = time.monotonic() + timeout
    while (done := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    if done[0] == 0:
        os.kill(pid, signal.SIGKILL)
        done = os.waitpid(pid, 0)
    with os.fdopen(read) as pipe:
        err = pipe.read()
    return os.waitstatus_to_exitcode(done[1]), err


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "env, fragment",
    [
        ({"RANK": "x"}, "RANK='x': not a non-negative integer"),
        ({"MASTER_PORT": "abc"}, "MASTER_PORT='abc'"),
        ({"MASTER_PORT": "65536"}, "MASTER_PORT=65536: must be in 1..65535"),
        ({"RANK": "5", "WORLD_SIZE": "2"}, "RANK=5: must be in 0..1"),
        ({"RANK": None}, "RANK is not set"),
        ({"LOCAL_RANK": "1"}, "LOCAL_RANK=1: must be in 0..0"),
        ({"LOCAL_WORLD_SIZE": "2"}, "LOCAL_WORLD_SIZE=2: must be in 1..1"),
        ({"WORLD_SIZE": " 1"}, "WORLD_SIZE=' 1'"),
        # The fiftieth round: int() raised past 4,300 digits, a traceback.
        ({"MASTER_PORT": "9" * 5000}, "5,000 digits, beyond every limit pipeplan has"),
        ({"RANK": "9" * 5000}, "RANK='9999"),
        ({"WORLD_SIZE": "0"}, "WORLD_SIZE=0: must be in 1..4096"),  # was "must be in 1"
        ({"WORLD_SIZE": "4097"}, "WORLD_SIZE=4097: must be in 1..4096"),  # advised --nproc 4097
    ],
)
def test_the_entry_refuses_a_wrong_environment_in_one_line(tmp_path, env, fragment):
    """A wrong launcher environment was a ValueError traceback, argparse's usage and error,
    or (RANK beyond the world) 65 lines after a minute of rendezvous retries. Refused before
    any process group or file: the run directory need not exist. The fifty-third round: the
    line names the rank where RANK is a number (three ranks said the same unnamed line)."""
    given = {k: v for k, v in {**os.environ, **RANK_ENV, **env}.items() if v is not None}
    given.pop("PIPEPLAN_LAUNCHER_PID", None)
    code, err = _main_forked([str(tmp_path / "runs" / "r")], given)
    assert code == 2 and err.count("\n") == 1, err[-3000:]
    assert err.startswith("pipeplan: error: ") and fragment in err, err
    rank = given.get("RANK", "")
    if rank.isdigit() and len(rank) < 10:
        assert err.startswith(f"pipeplan: error: rank {rank}: "), err


@pytest.mark.timeout(120)
def test_the_entry_refuses_a_missing_run_dir_in_one_line():
    """argparse printed its usage and an error: three lines."""
    code, err = _main_forked([], {**os.environ, **RANK_ENV})
    assert code == 2 and err.count("\n") == 1 and "required: run_dir" in err, err


def test_the_entry_refuses_a_folder_without_a_run_and_makes_none(tmp_path):
    """A mistyped run folder: one line naming it, and the folder is not created
    (the run's lock was taken first, which made the folder and its .lock)."""
    missing = tmp_path / "no-such-run"
    env = {**os.environ, **RANK_ENV}
    env.pop("PIPEPLAN_LAUNCHER_PID", None)
    code, err = _main_forked([str(missing), "--resume"], env)
    assert code == 2 and err.count("\n") == 1 and f"{missing}: no such run directory" in err, err
    assert not missing.exists()


@pytest.mark.parametrize("folder", ["with space", "with 'quotes' and $dollars"])
def test_the_printed_torchrun_command_is_shell_quoted(tmp_path, capsys, folder):
    """A --runs-dir with a space printed a command the shell split apart."""
    runs = tmp_path / folder
    flags = ["--model", "vit-digits", "--nproc", "1", "--epochs", "1", "--name", "q"]
    assert cli.main(["run", *flags, "--runs-dir", str(runs), "--prepare-only"]) == 0
    printed = capsys.readouterr().out
    command = shlex.split(printed[printed.index("torchrun") :])
    assert command[-3:] == ["-m", "executor.launch", str(runs / "q")]


def test_a_runs_dir_with_a_newline_is_refused_by_its_flag(tmp_path, capsys):
    """Found by the fifteenth round: a name holding a newline printed a forged line. A
    --runs-dir with one (prepared before, its torchrun command quoted) is now refused, by
    its flag, before anything is made: every later message naming the run would print it
    over two lines, and a report of it records the path in a Text field."""
    runs = tmp_path / "new\nline"
    flags = ["--model", "vit-digits", "--nproc", "1", "--epochs", "1", "--name", "q"]
    assert cli.main(["run", *flags, "--runs-dir", str(runs), "--prepare-only"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "pipeplan: error: --runs-dir: holds the control character U+000A; names, paths and "
        "versions are printed on one line"
    ]
    assert not runs.exists()


@pytest.mark.timeout(120)
def test_the_entry_refuses_a_world_size_the_run_was_not_prepared_for(tmp_path, capsys):
    """A fresh start on WORLD_SIZE=2 of a run prepared for 1 rank failed inside the rank:
    a traceback, then the line."""
    flags = ["--model", "vit-digits", "--nproc", "1", "--epochs", "1", "--name", "w"]
    assert cli.main(["run", *flags, "--runs-dir", str(tmp_path), "--prepare-only"]) == 0
    capsys.readouterr()
    run = tmp_path / "w"
    before = snapshot(run)
    env = {**os.environ, **RANK_ENV, "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "1"}
    env.pop("PIPEPLAN_LAUNCHER_PID", None)
    code, err = _main_forked([str(run)], env)
    assert code == 2 and err.count("\n") == 1, err[-3000:]
    assert "WORLD_SIZE=2" in err and "prepared for 1 ranks" in err, err
    assert snapshot(run) == before


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "world, local, nodes, on",
    [
        ("3", "2", "2", "each of the GROUP_WORLD_SIZE=2 nodes"),  # 2 ranks here, 1 there
        ("3", "1", "2", "each of the GROUP_WORLD_SIZE=2 nodes"),  # the other node's view
        ("3", "2", None, "the nodes"),  # no GROUP_WORLD_SIZE: 3 ranks are no nodes of 2
    ],
)
def test_the_entry_refuses_nodes_of_different_sizes(tmp_path, capsys, world, local, nodes, on):
    """Found by the thirty-eighth round: a run is planned for WORLD_SIZE / LOCAL_WORLD_SIZE
    nodes of LOCAL_WORLD_SIZE ranks (its cost model puts rank r on node r // LOCAL_WORLD_SIZE,
    as torchrun numbers them), and torchrun's agents may each be given another
    --nproc-per-node, a world of no such nodes (3 ranks: 2 on one node, 1 on the other), which
    was planned as if it were. Each node that can tell refuses it in one line before any
    process group, naming what to start; the run is left as it was."""
    flags = ["--model", "vit-digits", "--nproc", "3", "--epochs", "1", "--name", "u"]
    assert cli.main(["run", *flags, "--runs-dir", str(tmp_path), "--prepare-only"]) == 0
    capsys.readouterr()
    run = tmp_path / "u"
    before = snapshot(run)
    env = {**os.environ, **RANK_ENV, "WORLD_SIZE": world, "LOCAL_WORLD_SIZE": local}
    env.pop("PIPEPLAN_LAUNCHER_PID", None)
    env.pop("GROUP_WORLD_SIZE", None)
    if nodes is not None:
        env["GROUP_WORLD_SIZE"] = nodes
    code, err = _main_forked([str(run)], env)
    assert code == 2, err[-3000:]
    assert err.splitlines() == [
        f"pipeplan: error: rank 0: WORLD_SIZE={world}: not LOCAL_WORLD_SIZE={local} ranks on {on}; "
        "a run is planned for nodes of as many ranks each: start torchrun with the same "
        "--nproc-per-node on every node"
    ]
    assert snapshot(run) == before


def _refused_at_entry(run_dir, resume, world):
    raise BadArgumentError("runs/q1: has started already")


def _stopped_in_the_wait(run_dir, resume, console):
    raise Stopped(signal.SIGTERM)  # torchrun's SIGTERM once a peer failed (`stoppable`)


def _abandoned_in_the_wait(run_dir, resume, console):
    from executor.worker import StartAbandoned

    raise StartAbandoned("gave up after 2 s waiting at h:1")


def _failed_training(run_dir, resume, console):
    raise ValueError("sample 183 is unreadable")


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "stage, fails, code, line, callstack",
    [
        (
            "enter_run",
            _refused_at_entry,
            2,
            "pipeplan: error: rank 0: runs/q1: has started already",
            "runs/q1: has started already",
        ),
        ("train_rank", _stopped_in_the_wait, 143, "pipeplan: rank 0: stopped by SIGTERM", None),
        (
            "train_rank",
            _abandoned_in_the_wait,
            2,
            "pipeplan: error: rank 0: gave up after 2 s waiting at h:1",
            "gave up after 2 s waiting at h:1",
        ),
    ],
)
def test_a_torchrun_rank_reports_its_one_line_end_without_a_traceback(
    tmp_path, monkeypatch, stage, fails, code, line, callstack
):
    """Found by the twenty-third round: a rank refused at torchrun's entry wrote no report
    and printed its line without its rank; a rank stopped by torchrun as it waited for its
    peers (or giving up that wait) reported the traceback of our internals
    (`pipeplan.errors.Stopped: 15`), which torchrun's summary showed. Each now reports
    what its one line says (stopped: "stopped by SIGTERM"), no traceback."""
    from executor import launch

    # The fork below inherits these: the entry's checks pass, but where they are the stage.
    monkeypatch.setattr(launch, "enter_run", lambda run_dir, resume, world: None)
    monkeypatch.setattr(launch, stage, fails)
    error_file = tmp_path / "error.json"
    env = {k: v for k, v in os.environ.items() if k != "PIPEPLAN_LAUNCHER_PID"}
    env = {**env, **RANK_ENV, "TORCHELASTIC_ERROR_FILE": str(error_file)}
    got, err = _main_forked([str(tmp_path / "q1")], env)
    assert (got, err.splitlines()) == (code, [line]), err[-3000:]
    report = json.loads(error_file.read_text())
    assert report["message"]["extraInfo"]["py_callstack"] == (callstack or "stopped by SIGTERM")
    assert report["pipeplan"]["rank"] == 0 and not (tmp_path / "error.json.tmp").exists()


def _torchrun_rank_training(tmp_path, monkeypatch, train) -> tuple[int, str, str]:
    """Rank 0 as torchrun starts it, past its entry, training with `train`: (exit code,
    stderr, the callstack its error file reports)."""
    from executor import launch

    monkeypatch.setattr(launch, "enter_run", lambda run_dir, resume, world: None)
    monkeypatch.setattr(launch, "train_rank", train)
    error_file = tmp_path / "error.json"
    env = {k: v for k, v in os.environ.items() if k != "PIPEPLAN_LAUNCHER_PID"}
    env = {**env, **RANK_ENV, "TORCHELASTIC_ERROR_FILE": str(error_file)}
    got, err = _main_forked([str(tmp_path / "q1")], env)
    report = json.loads(error_file.read_text())
    return got, err, report["message"]["extraInfo"]["py_callstack"]


@pytest.mark.timeout(120)
def test_a_torchrun_rank_that_fails_training_still_reports_its_traceback(tmp_path, monkeypatch):
    """The other side of the test above: a failure of the rank's own code keeps its
    traceback in the report (torchrun's summary shows where it failed)."""
    got, err, callstack = _torchrun_rank_training(tmp_path, monkeypatch, _failed_training)
    assert got == 1 and err.endswith(
        "pipeplan: error: rank 0: ValueError: sample 183 is unreadable\n"
    )
    assert callstack.startswith("Traceback") and "_failed_training" in callstack


def _interrupted_with_a_spilled_cache(run_dir, resume, console):
    """Rank 0 of its node, its cache's rows all spilled under the run, then Ctrl-C."""
    import torch

    from executor.cache import ActivationCache

    cache = ActivationCache(8, 0, run_dir / "cache" / "node0", name="node0")
    cache.create(2, (4,), torch.float32)
    cache.store(torch.arange(8), torch.ones(8, 4), frozen_layers=2)
    assert (run_dir / "cache" / "node0" / "node0-v2.spill").exists()
    # A real SIGINT (a KeyboardInterrupt raised by code is no interruption: twenty-eighth round)
    signal.raise_signal(signal.SIGINT)
    time.sleep(30)  # the handler raises at once; never reached


@pytest.mark.timeout(120)
def test_a_torchrun_rank_interrupted_removes_its_nodes_spill_file(tmp_path, monkeypatch):
    """Found by the twenty-fifth round: Ctrl-C of a torchrun-started run left
    `RUN/cache/node0/node0-v2.spill` (12.5 MB; GBs for a real dataset): the rank removed its
    folder in /dev/shm only, and under torchrun no pipeplan launcher cleans up after it. The
    rank reports, then removes its node's cache, the spill file and its folders included."""
    (tmp_path / "q1").mkdir()
    got, err, _ = _torchrun_rank_training(tmp_path, monkeypatch, _interrupted_with_a_spilled_cache)
    # The forty-seventh round: the rank's own line, no traceback (`launch.start_line`).
    assert (got, err.splitlines()) == (130, ["pipeplan: rank 0: interrupted"])
    assert list((tmp_path / "q1").iterdir()) == []


def _missing_run_file(run_dir, resume, console):
    from pipeplan.errors import InputFileError

    raise InputFileError(f"{run_dir}/profile.json: no such file")


@pytest.mark.timeout(120)
def test_a_torchrun_rank_refused_by_a_run_file_says_one_line(tmp_path, monkeypatch):
    """Found by the twenty-third round: a run file deleted between `--prepare-only` and
    torchrun (profile.json) printed each rank's Python traceback before its line. Bad input
    (a PipeplanError) is one line under torchrun as on the CLI, and the report holds it."""
    got, err, callstack = _torchrun_rank_training(tmp_path, monkeypatch, _missing_run_file)
    said = f"{tmp_path / 'q1'}/profile.json: no such file"
    assert (got, err) == (1, f"pipeplan: error: rank 0: {said}\n")
    assert callstack == said


# A rank whose peers never start (a second node late, or its command mistyped), waiting for
# them before the process group: it says so, takes Ctrl-C, SIGTERM and SIGHUP with the CLI's
# lines, and gives up after the run's --collective-timeout naming the address and the ranks.


def _lone_rank(
    tmp_path: Path, capsys, rank: int = 0, *flags: str
) -> tuple[subprocess.Popen, Path, str]:
    """Rank `rank` alone of a 2-rank run prepared with `flags`, started as torchrun's entry
    (no agent: rank 0 hosts the store on MASTER_PORT, a free port); its stderr piped. Returns
    it, the run and the port."""
    from pipeplan.fileio import release_directory
    from pipeplan.spawn import free_port

    argv = ["run", "--model", "vit-digits", "--nproc", "2", "--epochs", "1", "--name", "lone"]
    assert cli.main([*argv, *flags, "--runs-dir", str(tmp_path), "--prepare-only"]) == 0
    capsys.readouterr()
    run = tmp_path / "lone"
    release_directory(run)  # prepared in this process, which holds its lock: the rank takes it
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHELASTIC_")}
    env.pop("PIPEPLAN_LAUNCHER_PID", None)
    port = str(free_port())
    env = {**env, **RANK_ENV, "WORLD_SIZE": "2", "RANK": str(rank), "MASTER_PORT": port}
    env["PYTHONPATH"] = str(ROOT)
    command = [sys.executable, "-m", "executor.launch", str(run)]
    rank_process = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True)
    return rank_process, run, port


def _said(process: subprocess.Popen, fragment: str, timeout: float = 150) -> str:
    """The first stderr line of `process`, once it comes, holding `fragment`."""
    import select
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and process.poll() is None:
        ready, _, _ = select.select([process.stderr], [], [], 0.5)
        if ready:
            line = process.stderr.readline()
            assert fragment in line, line
            return line
    process.kill()
    raise AssertionError(f"no line in {timeout} s: {process.communicate()[1][-3000:]}")


@pytest.mark.multiprocess
@pytest.mark.timeout(240)
@pytest.mark.parametrize(
    "sig, line, code",
    [
        (signal.SIGINT, "pipeplan: rank 0: interrupted", 130),
        # SIGTERM's path (`stoppable`): in `-m long`, for the suite's time (SIGXCPU takes it in
        # test_a_rank_waiting_for_its_peers_takes_every_stop_signal).
        pytest.param(
            signal.SIGTERM, "pipeplan: rank 0: stopped by SIGTERM", 143, marks=pytest.mark.long
        ),
        pytest.param(
            signal.SIGHUP, "pipeplan: rank 0: stopped by SIGHUP", 129, marks=pytest.mark.long
        ),
    ],
)
def test_a_rank_waiting_for_its_peers_says_so_and_takes_signals(tmp_path, capsys, sig, line, code):
    """Found by the twenty-first round: rank 0 of a 2-rank torchrun-entry run whose rank 1
    never started waited in torch's store (a C++ wait) saying nothing, ignored Ctrl-C for ten
    minutes, and exited 143 on SIGTERM with no line. It says once that it waits, and for how
    long at most; a signal then ends it at once with the CLI's line (naming the rank, as
    every line of a rank does since the twenty-fifth round) and exit code, nothing of the
    run changed."""
    import time

    rank_process, run, _ = _lone_rank(tmp_path, capsys)
    before = snapshot(run)
    said = _said(rank_process, "waiting at 127.0.0.1:")
    assert said.startswith("pipeplan: rank 0: INFO: ") and "(1 of 2 have started)" in said
    assert "at most 600 s (the run's --collective-timeout)" in said
    sent = time.monotonic()
    rank_process.send_signal(sig)
    _, err = rank_process.communicate(timeout=30)
    assert time.monotonic() - sent < 10, "not at once"
    assert (rank_process.returncode, err.splitlines()) == (code, [line]), err[-3000:]
    assert snapshot(run) == before


@pytest.mark.multiprocess
@pytest.mark.timeout(240)
@pytest.mark.parametrize(
    ("sig", "name"),
    [
        (signal.SIGXCPU, "SIGXCPU"),
        pytest.param(signal.SIGRTMIN + 1, "SIGRTMIN+1", marks=pytest.mark.long),
    ],
)
def test_a_rank_waiting_for_its_peers_takes_every_stop_signal(tmp_path, capsys, sig, name):
    """Found by the thirty-fifth round: SIGXCPU (a `ulimit -t` CPU limit) or a real-time
    signal to a rank waiting for its peers killed it with no line (SIGXCPU dumping core),
    where SIGTERM ended it with `pipeplan: rank 0: stopped by SIGTERM`: its stops
    (`launch.stoppable`) are every `startup.STOP_SIGNALS` now, the same line and exit code
    128 + the signal, nothing of the run changed."""
    rank_process, run, _ = _lone_rank(tmp_path, capsys)
    before = snapshot(run)
    _said(rank_process, "waiting at 127.0.0.1:")
    rank_process.send_signal(sig)
    _, err = rank_process.communicate(timeout=30)
    line = f"pipeplan: rank 0: stopped by {name}"
    assert (rank_process.returncode, err.splitlines()) == (128 + sig, [line]), err[-3000:]
    assert snapshot(run) == before


@pytest.mark.multiprocess
@pytest.mark.timeout(240)
@pytest.mark.parametrize(
    "rank, fragment",
    [
        (
            0,
            "waiting at 127.0.0.1:{port} for the other ranks of WORLD_SIZE=2: 1 of 2 ranks "
            "arrived; rank 1 never did",
        ),
        pytest.param(  # in `-m long`, for the suite's time
            1,
            "waiting for rank 0 of WORLD_SIZE=2 to open its store at 127.0.0.1:{port}: "
            "nothing listens there",
            marks=pytest.mark.long,
        ),
    ],
)
def test_a_rank_whose_peers_never_start_gives_up_naming_them(tmp_path, capsys, rank, fragment):
    """Found by the twenty-first round: a lone rank of a 2-rank run waited with no stated
    limit (killed after 10 minutes, nothing said). It gives up after the run's
    --collective-timeout with one line naming the address it waited at and the ranks that
    never arrived (rank 1 alone: rank 0, whose store never opened), exit 2."""
    rank_process, run, port = _lone_rank(tmp_path, capsys, rank, "--collective-timeout", "2")
    before = snapshot(run)
    _, err = rank_process.communicate(timeout=150)
    lines = err.splitlines()
    assert rank_process.returncode == 2 and len(lines) == 1, err[-3000:]
    assert lines[0].startswith(
        f"pipeplan: error: rank {rank}: gave up after 2 s (the run's --collective-timeout) "
    )
    assert fragment.format(port=port) in lines[0], lines[0]
    assert snapshot(run) == before


@pytest.mark.multiprocess
@pytest.mark.timeout(150)
def test_a_rank_whose_master_port_another_program_holds_gives_up_in_time(tmp_path, capsys):
    """Found by the forty-seventh round: a rank whose MASTER_PORT another program held (one
    that takes connections and never answers) waited past --collective-timeout, deaf to
    Ctrl-C and SIGTERM, until that program closed the port; then 30 lines of c10d's C++ log.
    torch's store client waits without a limit once connected: the rank waits for it in a
    thread, bounded (`worker._store_client`), and gives up in one line naming the port."""
    import socket
    import time

    rank_process, run, port = _lone_rank(tmp_path, capsys, 1, "--collective-timeout", "3")
    # Listening is enough: the kernel takes the connection; nothing ever answers on it.
    held = socket.create_server(("127.0.0.1", int(port)))
    before = snapshot(run)
    started = time.monotonic()
    try:
        _, err = rank_process.communicate(timeout=90)
    finally:
        rank_process.kill()
        held.close()
    took = time.monotonic() - started
    lines = err.splitlines()
    assert rank_process.returncode == 2 and len(lines) == 1, err[-3000:]
    assert lines[0] == (
        f"pipeplan: error: rank 1: MASTER_PORT={port}: something at 127.0.0.1:{port} took the "
        "connection but never answered as the ranks' store within 3 s (the run's "
        "--collective-timeout): another program holds the port; pick a free one"
    ), lines[0]
    assert took < 45, took  # torch's import, then at most 3 s + STORE_GRACE_S
    assert snapshot(run) == before


@pytest.mark.multiprocess
@pytest.mark.timeout(150)
@pytest.mark.parametrize(
    "answer",
    [
        # In `-m long`, for the default run's 15 minutes: an answer that closes at once.
        pytest.param(b"", marks=pytest.mark.long),
        b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n",
    ],
)
def test_a_rank_whose_master_port_a_program_answers_on_is_one_line(tmp_path, capsys, answer):
    """Found by the fifty-first round: where the program holding MASTER_PORT answers (an HTTP
    server) or closes each connection at once, the rank printed 85 to 181 lines of c10d's C++
    retries and backtraces, then blamed "the rank hosting it", which never existed. The
    retries are held; the line names the port and the store's failed handshake."""
    import contextlib
    import socket
    import threading

    rank_process, run, port = _lone_rank(tmp_path, capsys, 1, "--collective-timeout", "3")
    held = socket.create_server(("127.0.0.1", int(port)))
    held.settimeout(0.5)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                peer, _ = held.accept()
            except OSError:
                continue
            with contextlib.suppress(OSError), peer:
                if answer:
                    peer.recv(100)
                    peer.sendall(answer)

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    before = snapshot(run)
    try:
        _, err = rank_process.communicate(timeout=120)
    finally:
        rank_process.kill()
        stop.set()
        server.join(timeout=5)
        held.close()
    lines = err.splitlines()
    assert rank_process.returncode == 2 and len(lines) == 1, err[-3000:]
    # Closed at once, torch's client may still be retrying when the rank stops waiting.
    assert lines[0].startswith(
        f"pipeplan: error: rank 1: MASTER_PORT={port}: something at 127.0.0.1:{port} took the "
        "connection but "
    ), lines[0]
    assert "another program holds the port" in lines[0] and "hosting" not in lines[0], lines[0]
    assert snapshot(run) == before


def _torchrun(run: Path, nproc: int = 2, timeout: float = 100) -> subprocess.CompletedProcess:
    """`torchrun --standalone --nproc-per-node NPROC -m executor.launch RUN`, as a user starts
    it on one node (no `pipeplan run` above it, the rendezvous on a free port)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHELASTIC_")}
    env.pop("PIPEPLAN_LAUNCHER_PID", None)
    env = {**env, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    command += ["--nproc-per-node", str(nproc), "-m", "executor.launch", str(run)]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.mark.multiprocess
@pytest.mark.timeout(150)
# In `-m long`, for the suite's time: the default run keeps
# test_the_entry_starts_again_a_run_that_trained_nothing.
@pytest.mark.long
def test_a_refusal_at_the_torchrun_entry_is_the_summarys_root_cause(tmp_path, capsys):
    """Found by the twenty-third round: rank 0 refusing a 2-rank run at torchrun's entry
    printed its line without its rank and wrote no report (torchrun's root cause: `error_file:
    <N/A>`), while rank 1, stopped by torchrun's SIGTERM as it waited for its peers, recorded
    the traceback of our internals (`pipeplan.errors.Stopped: 15`), which the summary showed.
    The refusal is rank 0's report and line; the stopped rank's report is "stopped by
    SIGTERM". (A run that has started, started again without --resume: any entry refusal.)"""
    from pipeplan.fileio import release_directory

    argv = ["run", "--model", "vit-digits", "--nproc", "2", "--epochs", "1", "--name", "q1"]
    assert cli.main([*argv, "--runs-dir", str(tmp_path), "--prepare-only"]) == 0
    capsys.readouterr()
    run = tmp_path / "q1"
    release_directory(run)  # prepared in this process, which holds its lock: rank 0 takes it
    # What a run that trained a step leaves (one that recorded none starts again: the
    # twenty-sixth round).
    (run / "run.jsonl").write_text(
        "".join(r.model_dump_json() + "\n" for r in elastic_records()[:2])
    )
    before = snapshot(run)
    done = _torchrun(run)
    ours = [line for line in done.stderr.splitlines() if line.startswith("pipeplan: ")]
    refusal = f"{run}: has started already (it holds run.jsonl)"
    assert done.returncode == 1 and ours, done.stderr[-5000:]
    assert ours[0].startswith(f"pipeplan: error: rank 0: {refusal}"), done.stderr[-5000:]
    # Rank 1 says it was stopped, or nothing where the SIGTERM came as it still imported.
    assert ours[1:] in ([], ["pipeplan: rank 1: stopped by SIGTERM"]), done.stderr[-5000:]
    summary = done.stderr[done.stderr.index("executor.launch FAILED") :]
    others, root = summary.split("Root Cause")
    assert "rank      : 0 (local_rank: 0)" in root and f"traceback : {refusal}" in root, summary
    assert "Traceback" not in summary and "pipeplan.errors" not in done.stderr, summary
    assert "rank      : 1 (local_rank: 1)" in others, summary
    assert snapshot(run) == before


# ----------------------------------------------------------------------------- ninth round
# data.json, export and calibrate trusting a run's files: data.json deleted, emptied or naming
# a device; run.json edited since the checkpoint that export, report or calibrate read under
# it; one run given twice as a copy.
made = test_hostile_data.made  # the BERT checkpoint, tokenizer and profile (module-scoped)


def _prepared(made, tmp_path: Path, capsys) -> tuple[Path, Path]:
    """A `--prepare-only` text run (data.json: the data file and the tokenizer's files) and
    its data file."""
    data = write_jsonl(tmp_path / "reviews.jsonl", reviews(20, seed=1))
    assert cli.main(test_hostile_data.prepare(made, tmp_path, data)) == 0
    capsys.readouterr()
    return tmp_path / "runs" / "r", data


def _record(run: Path, files) -> None:
    path = run / "data.json"
    doc = json.loads(path.read_text())
    path.write_text(json.dumps({**doc, "files": files(doc["files"])}))


DATA_RECORDS = {  # what is done to data.json, and what the one line says of it
    "deleted": (lambda run: (run / "data.json").unlink(), "data.json: no such file"),
    "emptied": (lambda run: _record(run, lambda f: []), "data.json: files lacks "),
    "a file left out": (lambda run: _record(run, lambda f: f[:-1]), "data.json: files lacks "),
    "a device added": (
        lambda run: _record(run, lambda f: [*f, {"path": "/dev/zero", "sha256": "0" * 64}]),
        "data.json: files names '/dev/zero', which run.json's data",
    ),
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("command", ["export", "resume"])
@pytest.mark.parametrize("case", DATA_RECORDS)
def test_a_data_record_that_no_longer_covers_the_data_is_refused(
    made, tmp_path, capsys, case, command
):
    """Deleting data.json, or emptying its list, switched the edited-data check off; a
    /dev/zero listed in it hung export and resume. It must list exactly the files run.json's
    data and tokenizer read. The data file is edited too (what the record is there to catch);
    the prepared run has no checkpoint, so a command that let the record pass would say that
    instead of naming data.json."""
    run, data = _prepared(made, tmp_path, capsys)
    damage, fragment = DATA_RECORDS[case]
    damage(run)
    data.write_text(data.read_text().replace('"negative"', '"zneg"'))
    argv = {
        "export": ["export", str(run), "--out", str(tmp_path / "out")],
        "resume": ["run", "--resume", str(run)],
    }[command]
    refused(argv, tmp_path, capsys, (str(run), fragment))


@pytest.mark.timeout(60)
@pytest.mark.parametrize("field", ["model", "tokenizer", "data"])
def test_a_folder_or_file_the_run_reads_moved_away_is_named_as_run_jsons(
    made, tmp_path, capsys, field
):
    """Found by the twenty-sixth round: the run's model folder moved away was refused by
    export and resume as "/tmp/rt/bert: no such file", not saying it was the folder run.json
    names. The model folder, tokenizer and data, gone, are named as run.json's field."""
    model = Path(shutil.copytree(made["checkpoint"], tmp_path / "bert"))
    tokenizer = Path(shutil.copytree(made["tokenizer"], tmp_path / "tok"))
    data = write_jsonl(tmp_path / "reviews.jsonl", reviews(20, seed=1))
    argv = test_hostile_data.prepare(made, tmp_path, data, model=model, tokenizer=tokenizer)
    assert cli.main(argv) == 0
    capsys.readouterr()
    gone = {"model": model, "tokenizer": tokenizer, "data": data}[field]
    gone.rename(tmp_path / "moved")
    run = tmp_path / "runs" / "r"
    said = f"{run / 'run.json'}: {field} names {gone}, which is gone (moved or deleted since"
    for command in (
        ["export", str(run), "--out", str(tmp_path / "out")],
        ["run", "--resume", str(run)],
    ):
        refused(command, tmp_path, capsys, said)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", ["special_tokens_map.json", "additional_chat_templates/t.jinja"])
@pytest.mark.parametrize("command", ["export", "resume"])
def test_a_tokenizer_file_made_since_the_run_is_named_not_data_json(
    made, tmp_path, capsys, command, name
):
    """Found by the twenty-sixth round: a special_tokens_map.json added to the run's
    tokenizer folder was refused as "data.json: files lacks '…/special_tokens_map.json'…;
    restore data.json", blaming the intact record. A file made after data.json was written
    is named as the folder's new file; a chat template added to transformers' folder of them
    too (the fifty-first round: exported unchecked)."""
    tokenizer = Path(shutil.copytree(made["tokenizer"], tmp_path / "tok"))
    data = write_jsonl(tmp_path / "reviews.jsonl", reviews(20, seed=1))
    argv = test_hostile_data.prepare(made, tmp_path, data, tokenizer=tokenizer)
    assert cli.main(argv) == 0
    capsys.readouterr()
    added = tokenizer / name
    added.parent.mkdir(exist_ok=True)
    added.write_text(json.dumps({"unk_token": "[CLS]"}))
    run = tmp_path / "runs" / "r"
    command_argv = {
        "export": ["export", str(run), "--out", str(tmp_path / "out")],
        "resume": ["run", "--resume", str(run)],
    }[command]
    said = (f"{added}: in the run's tokenizer folder now, but made after the run started",)
    refused(command_argv, tmp_path, capsys, said)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", ["tokenizer.json", "additional_chat_templates/t.jinja"])
@pytest.mark.parametrize("swapped", [False, True])
@pytest.mark.parametrize("command", ["export", "resume"])
def test_a_tokenizer_file_deleted_since_the_run_is_named_not_data_json(
    made, tmp_path, capsys, command, swapped, name
):
    """Found by the forty-ninth round: the run's tokenizer.json deleted (or moved) was
    refused as "data.json: files names '…/tokenizer.json', which … do not read; restore
    data.json", blaming the intact record. The file is named as gone; so is a chat template
    of transformers' folder of them (the fifty-first round)."""
    tokenizer = Path(shutil.copytree(made["tokenizer"], tmp_path / "tok"))
    (tokenizer / "additional_chat_templates").mkdir()
    (tokenizer / "additional_chat_templates" / "t.jinja").write_text("{{ x }}")
    data = write_jsonl(tmp_path / "reviews.jsonl", reviews(20, seed=1))
    argv = test_hostile_data.prepare(made, tmp_path, data, tokenizer=tokenizer)
    assert cli.main(argv) == 0
    capsys.readouterr()
    gone = tokenizer / name
    gone.rename(tmp_path / "elsewhere.json")
    if swapped:  # the fiftieth round: a folder in its place was blamed on data.json too
        gone.mkdir()
    run = tmp_path / "runs" / "r"
    command_argv = {
        "export": ["export", str(run), "--out", str(tmp_path / "out")],
        "resume": ["run", "--resume", str(run)],
    }[command]
    what = "not a regular file" if swapped else "gone, moved or deleted"
    said = (f"{gone}: read by the run ({run / 'data.json'} lists it) but {what} since the run",)
    refused(command_argv, tmp_path, capsys, said)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("command", ["export", "resume"])
def test_a_data_file_that_is_not_a_regular_file_is_refused_unread(made, tmp_path, capsys, command):
    """The data file replaced by a FIFO (listed in data.json as the run named it) blocked the
    sha256 forever: every file is checked as an input (a regular file within the limit)
    before it is hashed."""
    run, data = _prepared(made, tmp_path, capsys)
    data.unlink()
    os.mkfifo(data)
    argv = {
        "export": ["export", str(run), "--out", str(tmp_path / "out")],
        "resume": ["run", "--resume", str(run)],
    }[command]
    # And the record that lists it (the forty-ninth round: a helper's entry named alone).
    listed = f"({run / 'data.json'} lists it as the run's data)"
    refused(argv, tmp_path, capsys, (str(data), "not a regular file", listed))


@pytest.mark.timeout(60)
def test_a_flag_beside_resume_is_judged_by_the_runs_own_settings(made, tmp_path, capsys):
    """Found by the twentieth round: `run --resume R --init random`, R a run of a model folder,
    was refused as "--init means nothing with --model vit-digits", --model's default, not the
    run's. A flag given to --resume is held to the run's own settings: one that cannot change
    names how the run set it; one that means nothing names the run's value and its run.json."""
    run, _ = _prepared(made, tmp_path, capsys)
    fragments = ("cannot change --init", "--init left out in its run.json")
    refused(["run", "--resume", str(run), "--init", "random"], tmp_path, capsys, fragments)
    run = ["run", "--model", "vit-digits", "--nproc", "1", "--epochs", "1", "--prepare-only"]
    assert cli.main([*run, "--runs-dir", str(tmp_path / "runs"), "--name", "vd"]) == 0
    capsys.readouterr()
    built_in = tmp_path / "runs" / "vd"
    fragment = f"--init means nothing with --model vit-digits (from {built_in / 'run.json'}); "
    refused(["run", "--resume", str(built_in), "--init", "random"], tmp_path, capsys, fragment)


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
# In `-m long`, for the suite's time: the default run keeps
# test_a_finished_run_resumed_at_an_epochs_end_is_extended_and_checked.
@pytest.mark.long
def test_a_model_folder_run_resumes_and_exports_without_the_folders_weights(made, tmp_path, capsys):
    """Found by the twentieth round: a run of a model folder whose model.safetensors was moved
    away since could be exported but not resumed ("a config without weights …; pass --init
    random", a flag --resume refuses). A resume, like an export, takes every weight from the
    checkpoint: the folder's config.json (checked unchanged), not its weights."""
    folder = Path(shutil.copytree(made["checkpoint"], tmp_path / "bert"))
    data = write_jsonl(tmp_path / "reviews.jsonl", reviews(20, seed=1))
    argv = test_hostile_data.prepare(made, tmp_path, data, model=folder)
    steps = ["--nproc", "1", "--epochs", "1", "--max-steps-per-epoch", "2"]
    assert cli.main([a for a in argv if a != "--prepare-only"] + steps) == 0, capsys.readouterr()
    (folder / "model.safetensors").rename(tmp_path / "moved.safetensors")
    run = tmp_path / "runs" / "r"
    capsys.readouterr()
    assert cli.main(["run", "--resume", str(run), "--epochs", "2"]) == 0, capsys.readouterr().err
    epochs = [json.loads(line) for line in (run / "run.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in epochs if r["kind"] == "epoch"] == [0, 1]
    assert cli.main(["export", str(run), "--out", str(tmp_path / "out")]) == 0


EDITED_SINCE = {"dropout": (0.5, "null"), "seed": (7, "0"), "init": ("random", "null")}


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
@pytest.mark.parametrize("field", EDITED_SINCE)
@pytest.mark.parametrize("command", ["export", "report"])
def test_export_and_report_refuse_a_run_json_edited_since_the_checkpoint(
    finished_run, tmp_path, capsys, field, command
):
    """export built the model from run.json edited since the checkpoint (another dropout,
    init…) and report reported the run as run.json now says: both check run.json against
    the checkpoint's configuration as resume does (`check_trained_with`)."""
    run = copy_run(finished_run, tmp_path)
    value, trained = EDITED_SINCE[field]
    test_hostile.edit_run_json(run, **{field: value})
    argv = {"export": ["export", str(run), "--out", str(tmp_path / "out")]}.get(
        command, ["report", str(run)]
    )
    fragment = f"{run / 'run.json'}: {field} is {json.dumps(value)}, but {_manifest(run)} has "
    refused(argv, tmp_path, capsys, fragment + f"config.{field} {trained}")
    assert not (tmp_path / "out").exists()


def _checkpoint_of(finished_run: Path, run: Path, **trained) -> None:
    """`run` (hand-made records) gets finished_run's checkpoint manifest, its configuration
    run.json's with `trained` changes: what the run trained under by its own record."""
    step = run / "checkpoints" / "step-2"
    step.mkdir(parents=True, exist_ok=True)
    for name in ("model.pt", "optimizer.pt", "rng.pt"):  # there, as report looks (unread)
        shutil.copy(_manifest(finished_run).parent / name, step / name)
    doc = json.loads(_manifest(finished_run).read_text())
    config = json.loads((run / "run.json").read_text())
    world = {"world_size": config["nproc"]}  # taken by its configuration's ranks
    (step / "manifest.json").write_text(
        json.dumps({**doc, **world, "config": {**config, **trained}})
    )
    (run / "checkpoints" / "latest").write_text("step-2\n")


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_calibrate_refuses_a_run_json_edited_since_the_checkpoint(finished_run, tmp_path, capsys):
    """calibrate fitted a run whose run.json was edited since its checkpoint; it reads the
    latest checkpoint's configuration (its manifest only) as resume and export do."""
    run, argv = _readable(tmp_path, "calibrate")
    _checkpoint_of(finished_run, run, dropout=0.1)
    fragment = f"{run / 'run.json'}: dropout is null, but {_manifest(run)} has config.dropout 0.1"
    refused(argv, tmp_path, capsys, fragment)
    (run / "checkpoints" / "step-2" / "manifest.json").unlink()
    _checkpoint_of(finished_run, run)  # the same configuration passes run.json's check…
    # …to be held to the records (twentieth round): another run's checkpoint, put here.
    refused(argv, tmp_path, capsys, f"{run / 'run.jsonl'}: no record of epoch 0")
    shutil.rmtree(run / "checkpoints")  # no checkpoint to hold run.json to: the fit goes ahead
    assert cli.main(argv) == 0


def test_calibrate_refuses_a_precision_its_phases_were_not_priced_in(tmp_path, capsys):
    """run.json's precision edited from fp32 to bf16 (and a bf16 --profile given): calibrate
    fitted fp32 times as bf16. The phases' own profile (run.jsonl's pricing names it, in the
    run directory) says fp32: refused as report refuses it."""
    run, argv = _readable(tmp_path, "calibrate")
    shutil.copy(PROFILE, run / "profile.json")  # what the records were priced with: fp32
    test_hostile.edit_run_json(run, precision="bf16")
    doc = json.loads(Path(PROFILE).read_text())
    doc["model"]["dtype"] = "bfloat16"
    # A bf16 profile's hidden states take 2 bytes an element; its logits stay float32 (the
    # twentieth round holds both to the config: halved logits are refused first).
    for layer in doc["layers"][:-1]:
        layer["out_bytes_per_sample"] //= 2
    bf16 = tmp_path / "bf16.json"
    bf16.write_text(json.dumps(doc))
    argv[argv.index("--profile") + 1] = str(bf16)
    refused(
        argv, tmp_path, capsys, (str(run), "a run in bf16, but the profile was measured in fp32")
    )


@pytest.mark.parametrize("command", ["calibrate", "report --baseline"])
@pytest.mark.parametrize("copy", ["cp -a", "cp -a, then edited"])
def test_one_run_copied_is_the_same_run(tmp_path, capsys, command, copy):
    """`calibrate RUN COPY` with COPY made by `cp -a RUN` fitted every step twice (only the
    same folder or a link was refused): two folders whose run.jsonl open with the same
    record hold one run, even when later records differ or the file was written out again."""
    run, argv = _readable(tmp_path, command.split()[0])
    again = tmp_path / "copy"
    shutil.copytree(run, again)
    if copy != "cp -a":  # its last step measured otherwise, its records written out again
        lines = _lines(again)
        _steps(lines)[-1]["step_s"] *= 1.01
        _rewrite(again, lines)
    argv = [*argv, str(again)] if command == "calibrate" else [*argv, "--baseline", str(again)]
    fragment = (str(again), f"holds the same run as {run}", "a copy of one run")
    refused(argv, tmp_path, capsys, fragment)


# ----------------------------------------------------------------------------- tenth round


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
@pytest.mark.parametrize("command", ["resume", "export", "report"])
def test_a_manifest_without_its_configuration_is_refused(finished_run, tmp_path, capsys, command):
    """A manifest with its `config` removed switched off the check of run.json against it:
    resume, export and report then took an lr edited since the checkpoint as the run's. At
    this schema_version the field is required, and the one line names the file and field."""
    run = copy_run(finished_run, tmp_path)
    doc = json.loads(_manifest(run).read_text())
    del doc["config"]
    _manifest(run).write_text(json.dumps(doc))
    test_hostile.edit_run_json(run, lr=0.5)
    argv = {
        "resume": ["run", "--resume", str(run), *MORE],
        "export": ["export", str(run), "--out", str(tmp_path / "out")],
        "report": ["report", str(run)],
    }[command]
    refused(argv, tmp_path, capsys, (str(_manifest(run)), "field 'config': Field required"))
    assert not (tmp_path / "out").exists()


# ----------------------------------------------------------------------------- fourteenth round


def _edit_profile(run: Path) -> None:
    """RUN/profile.json with three layers' forward times tripled, as a hand edit leaves it."""
    path = run / "profile.json"
    doc = json.loads(path.read_text())
    for layer in doc["layers"][1:4]:
        for timing in layer["timings"]:
            timing["fwd_s"] *= 3
    path.write_text(json.dumps(doc))


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
@pytest.mark.parametrize("command", ["resume", "report", "calibrate"])
def test_a_profile_edited_since_the_run_is_refused(finished_run, tmp_path, capsys, command):
    """RUN/profile.json edited between a run and its resume: the resume planned with the
    edited times (a 2.04x forecast where the run's was 1.28x) and run.jsonl then named two
    sha256s for one profile.json, so its first phases no longer re-planned from the run
    directory; report and calibrate read it as the run's. The phase records hold the sha256
    of the profile that priced them: each command refuses the edited file, naming it."""
    run = copy_run(finished_run, tmp_path)
    _edit_profile(run)
    argv = {
        "resume": ["run", "--resume", str(run), *MORE],
        "report": ["report", str(run)],
        "calibrate": ["calibrate", str(run), "--profile", str(PROFILE)],
    }[command]
    if command == "calibrate":
        argv += ["--out", str(tmp_path / "c.json")]
    fragment = (f"{run / 'profile.json'}: edited since the run priced its phase 0", "restore")
    refused(argv, tmp_path, capsys, fragment)
    assert not (tmp_path / "c.json").exists()


def _priced_argv(command: str, run: Path, tmp_path: Path) -> list[str]:
    """The argv of `command` (resume, report, report --plot, calibrate, export) on `run`."""
    return {
        "resume": ["run", "--resume", str(run), *MORE],
        "report": ["report", str(run)],
        "report --plot": ["report", str(run), "--plot", str(tmp_path / "plots")],
        "calibrate": ["calibrate", str(run), "--profile", str(PROFILE)],
        "export": ["export", str(run), "--out", str(tmp_path / "out")],
    }[command] + (["--out", str(tmp_path / "c.json")] if command == "calibrate" else [])


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
@pytest.mark.parametrize("command", ["report", "report --plot", "calibrate"])
def test_a_priced_profile_deleted_is_refused(finished_run, tmp_path, capsys, command):
    """Found by the nineteenth round: RUN/profile.json deleted switched the edited-since
    check off (it skipped a profile the records name but the directory lacks, for hand-made
    test records): report, its plots and calibrate went on (exit 0). A run writes every
    profile it prices with before the phase that names it: one missing is refused, named.
    (A resume refused it already: it plans with profile.json.)"""
    run = copy_run(finished_run, tmp_path)
    (run / "profile.json").unlink()
    fragment = (f"{run / 'profile.json'}: missing, though run.jsonl's phase 0 was priced", "with")
    refused(_priced_argv(command, run, tmp_path), tmp_path, capsys, fragment)
    assert not (tmp_path / "c.json").exists() and not (tmp_path / "plots").exists()


def _calibration_deleted(run: Path) -> str:
    (run / "calibration-2.json").unlink()
    return "calibration-2.json: missing, though run.jsonl's phase 1 was priced with it"


def _pricing_renamed(run: Path) -> str:
    lines = _lines(run)
    phase = [line for line in lines if line["kind"] == "phase"][-1]
    phase["pricing"]["profile"] = "calibration-9.json"
    _rewrite(run, lines)
    return "calibration-9.json: missing, though run.jsonl's phase 1 was priced with it"


@pytest.mark.parametrize("command", ["report", "report --plot"])
@pytest.mark.parametrize(
    "damage", [_calibration_deleted, _pricing_renamed], ids=lambda f: f.__name__.strip("_")
)
def test_a_missing_calibration_a_phase_was_priced_with_is_refused(
    tmp_path, capsys, command, damage
):
    """Found by the nineteenth round: a run's calibration-N.json deleted, or a phase
    record's pricing.profile edited to a name no file has, was reported and plotted (exit 0)
    without the edited-since check. report's records price phase 1 with calibration-2.json."""
    run, _ = _readable(tmp_path, "report")
    fragment = damage(run)
    refused(_priced_argv(command, run, tmp_path), tmp_path, capsys, fragment)
    assert not (tmp_path / "plots").exists()


PLAN_RUN = ["--max-steps-per-epoch", "3", "--checkpoint-every", "1"]


def _plan_file(path: Path, *pins: str) -> Path:
    """A plan for one vit-digits rank, 1 epoch with layer 1 frozen, `pins` its layout's."""
    argv = ["plan", "--profile", str(PROFILE), "--devices-per-node", "1", "--global-batch", "64"]
    argv += ["--epochs", "1", "--freeze-schedule", "1", "--samples", "1438", *pins]
    assert cli.main([*argv, "--out", str(path)]) == 0
    return path


@pytest.fixture(scope="module")
def plan_run(tmp_path_factory) -> tuple[Path, Path]:
    """A run of a plan file (1x1, M=1 1f1b), uninterrupted, a checkpoint after every step;
    and the plan file it was given (tests replace or delete it, and put it back)."""
    root = tmp_path_factory.mktemp("planrun")
    plan = _plan_file(root / "plan.json")
    argv = ["run", "--plan", str(plan), "--profile", str(PROFILE), *PLAN_RUN]
    assert cli.main([*argv, "--name", "p", "--runs-dir", str(root)]) == 0
    return root / "p", plan


@pytest.mark.timeout(120)
@pytest.mark.parametrize("flag, value", [("--epochs", "5"), ("--nproc", "2")])
def test_a_plan_runs_resume_that_changes_the_plan_says_what_to_do(
    plan_run, tmp_path, capsys, flag, value
):
    """Found by the fifty-ninth round: `run --resume RUN --epochs 5` of a plan's run was told
    "re-plan with --epochs 5", and the resume then refused --plan: the advice led to a second
    refusal. A run of a plan trains the plan's epochs on its devices: the line says so and
    that a new run with a plan made for them is the way."""
    from test_hostile import refused

    run = copy_run(plan_run[0], tmp_path)
    fragment = "a run of a plan trains the plan's epochs on its devices, which --resume cannot"
    refused(["run", "--resume", str(run), flag, value], tmp_path, capsys, (fragment,))


def test_a_finished_plan_runs_resume_is_told_to_start_a_new_run(plan_run, tmp_path, capsys):
    """Found by the sixtieth round: the finished run of a plan, resumed, was told "give
    --epochs N > 1 to train on", which its next resume refused (a plan's run keeps the plan's
    epochs). The line says a new run with a plan made for more epochs is the way."""
    from test_hostile import refused

    run = copy_run(plan_run[0], tmp_path)
    said = "finished all its 1 epochs (checkpoint step-3); a run of a plan trains the plan's 1"
    refused(["run", "--resume", str(run)], tmp_path, capsys, (said, "plan made for more"))


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
# "deleted": long (the same check of the plan's sha256), for the 15-minute default run.
@pytest.mark.parametrize("since", ["replaced", pytest.param("deleted", marks=pytest.mark.long)])
def test_a_resumed_run_follows_its_plan_as_it_started(plan_run, tmp_path, since):
    """A run of `--plan FILE` resumed after FILE was replaced by a plan of the same schedule
    in another layout (gpipe, 4 micro-batches) switched layout mid-phase (three phase records
    for a one-phase plan) and trained other weights than the uninterrupted run; deleted, the
    resume failed. The run follows the copy it took at the start (RUN/run.plan.json): the
    resumed phase runs the plan's layout and ends bit for bit as the uninterrupted run."""
    import torch

    from pipeplan.fileio import run_entry

    run, plan = plan_run
    original = plan.read_bytes()
    # The copy is one of the entries a run keeps (no output may land on it).
    assert json.loads((run / "run.plan.json").read_text()) == json.loads(original)
    assert all(run_entry(p.name) for p in run.iterdir())
    cut = _interrupted(run, tmp_path)
    try:
        if since == "replaced":
            other = _plan_file(
                tmp_path / "other.json", "--schedule", "gpipe", "--micro-batches", "4"
            )
            plan.write_bytes(other.read_bytes())
        else:
            plan.unlink()
        assert cli.main(["run", "--resume", str(cut)]) == 0
    finally:
        plan.write_bytes(original)
    layouts = [r["layout"] for r in _lines(cut) if r["kind"] == "phase"]
    planned = json.loads(original)["phases"][0]["layout"]
    assert layouts == [planned, planned]
    weights = [
        torch.load(r / "checkpoints" / "step-3" / "model.pt", weights_only=True) for r in (run, cut)
    ]
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_a_plan_run_without_its_copy_of_the_plan_is_refused(plan_run, tmp_path, capsys):
    """RUN/run.plan.json deleted (or a run prepared before runs kept one): the plan file
    run.json names may hold another plan now, so the resume is refused in one line rather
    than following it."""
    run, _ = plan_run
    cut = _interrupted(run, tmp_path)
    (cut / "run.plan.json").unlink()
    fragment = (f"{cut / 'run.plan.json'}: no such file", "start a new run")
    refused(["run", "--resume", str(cut)], tmp_path, capsys, fragment)


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_a_plan_copy_edited_since_the_run_is_refused(plan_run, tmp_path, capsys):
    """Fourteenth round's fix left the run's own copy of its plan unchecked: replaced by a plan
    of the same schedule in another layout, the resume switched layout mid-phase. The copy must
    give every phase the records say the run took from the plan. Found by the eighteenth
    round (its class: layouts told apart by their labels): the line names the first field
    that differs, with both values, not the recorded layout's label alone."""
    run, _ = plan_run
    cut = _interrupted(run, tmp_path)
    other = _plan_file(tmp_path / "other.json", "--schedule", "gpipe", "--micro-batches", "4")
    (cut / "run.plan.json").write_bytes(other.read_bytes())
    capsys.readouterr()  # what making the other plan printed
    # run.json's sha256 of the copy tells the edit first (`check_plan_copy`).
    fragment = (f"{cut / 'run.plan.json'}: edited since the run started", "restore")
    refused(["run", "--resume", str(cut)], tmp_path, capsys, fragment)


def _prepared_plan_run(tmp_path: Path) -> Path:
    """A run of a 3-phase plan (frozen 0, 4, 8 on 2 ranks, each phase 2 stages M=4 1f1b),
    prepared only: its run.json and its copy of the plan, no rank started."""
    plan = tmp_path / "plan3.json"
    argv = ["plan", "--profile", str(PROFILE), "--nodes", "1", "--devices-per-node", "2"]
    argv += ["--device-memory", "100MiB", "--epochs", "3", "--global-batch", "64"]
    argv += ["--samples", "1438", "--freeze-schedule", "0,4,8", "--out", str(plan)]
    assert cli.main(argv) == 0
    run = ["run", "--plan", str(plan), "--model", "vit-digits", "--prepare-only"]
    assert cli.main([*run, "--runs-dir", str(tmp_path / "runs"), "--name", "p"]) == 0
    return tmp_path / "runs" / "p"


def test_a_plan_copys_later_phase_edited_between_runs_is_refused(tmp_path, capsys):
    """Found by the eighteenth round: runs/NAME/run.plan.json of a stopped run, edited so that
    its last phase (not reached yet) ran gpipe, was obeyed by --resume: the copy was held only
    to the phases already taken. run.json records the copy's sha256 when the run is prepared
    (and every checkpoint's configuration with it), and the run's planner refuses the copy
    edited since: the launcher before any rank starts, and each rank alike."""
    from executor.planning import RunPlanner
    from pipeplan.errors import BadArgumentError, InputFileError
    from pipeplan.formats import RunConfig, load

    run = _prepared_plan_run(tmp_path)
    cfg = load(RunConfig, run / "run.json")
    assert cfg.plan_sha256 is not None
    RunPlanner.for_run(run, cfg)  # untouched, it is the plan
    copy = run / "run.plan.json"
    doc = json.loads(copy.read_text())
    assert doc["phases"][2]["layout"]["schedule"] == "1f1b"
    doc["phases"][2]["layout"]["schedule"] = "gpipe"  # still a layout that runs
    copy.write_text(json.dumps(doc, indent=2) + "\n")
    with pytest.raises(InputFileError, match=r"run\.plan\.json: edited since the run started"):
        RunPlanner.for_run(run, cfg)
    # A run prepared before the sha256 was recorded has none: its copy is held to the phases
    # it took (`check_records`), and since the thirty-first round each phase to its layout's
    # price (`check_plan_prices`): a later phase's schedule edited is told so.
    with pytest.raises(
        BadArgumentError, match=r"run\.plan\.json: phase 2: .* re-run `pipeplan plan`"
    ):
        RunPlanner.for_run(run, cfg.model_copy(update={"plan_sha256": None}))


# ------------------------------------------- twenty-seventh round: a rank's report on a full disk


class _Disk:
    """A disk with `free` bytes left, for `errorfile._write_all`: what a write adds to a file
    takes room (rewriting its bytes takes none); past the room left, ENOSPC, as a full disk
    says."""

    def __init__(self, free: int):
        self.free = free

    def write_all(self, fd: int, data: bytes) -> None:
        import errno

        end = os.lseek(fd, 0, os.SEEK_CUR) + len(data)
        grows = max(0, end - os.fstat(fd).st_size)
        if grows > self.free:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self.free -= grows
        os.write(fd, data)


@pytest.mark.parametrize("message", ["one line", "a long line, not ASCII"])
def test_a_rank_on_a_nearly_full_disk_keeps_its_reports_room(tmp_path, monkeypatch, message):
    """Found by the twenty-seventh round: on a disk with less than 64 KiB left as the ranks
    started (an 80 KiB tmpfs), rank 0 could not reserve its report's room (64 KiB), then its
    checkpoint filled the disk and its report was lost: `training failed on rank 0 at step 2:
    exited with code 1`. The rank keeps a room of one block where the larger does not fit,
    and its report is cut to the room: the message kept (its start, where it is long), then
    as much of the traceback's end as the rest holds."""
    from torch.distributed.elastic.multiprocessing.errors import ProcessFailure

    from executor import errorfile, faults
    from pipeplan.errors import OutputError

    error_file = tmp_path / "rank-0.error.json"
    monkeypatch.setenv(errorfile.ENV, str(error_file))
    disk = _Disk(free=24 << 10)
    monkeypatch.setattr(errorfile, "_write_all", disk.write_all)
    errorfile.reserve()  # as the rank starts
    disk.free = 0  # then a checkpoint fills the disk
    why = "runs/z/checkpoints/step-2: cannot write checkpoint step-2 (No space left on device)"
    if message != "one line":
        why += "; ünïcödé" * 200  # 6 bytes of JSON a letter: twice the room

    try:  # a traceback far longer than the room: its cause's lines first
        try:
            raise OSError("what the write said " * 1000)
        except OSError as cause:
            raise OutputError(why) from cause
    except OutputError as exc:
        faults.write_report(exc, rank=0)
    failure = ProcessFailure(local_rank=0, pid=1, exitcode=1, error_file=str(error_file))
    rank, said = faults.verdict({0: failure}, timeout_s=600)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rank-0.error.json"]
    assert error_file.stat().st_size <= errorfile.MIN_ROOM
    callstack = json.loads(error_file.read_text())["message"]["extraInfo"]["py_callstack"]
    if message == "one line":
        assert (rank, said) == (0, why)
        assert callstack.startswith("...") and callstack.endswith(f"OutputError: {why}\n")
    else:
        assert rank == 0 and said.startswith(why[:300]) and said.endswith("...")


def _slow_profile(path: Path) -> Path:
    """The shipped vit-digits CPU profile with every layer 1000 times slower: as a profile
    measured on another machine, which the run's online recalibration corrects, so that the
    layouts it plans after the refit are not those its first profile would choose."""
    from executor.planning import shipped_profile

    doc = json.loads(shipped_profile("vit-digits", "cpu").read_text())
    for layer in doc["layers"]:
        for timing in layer["timings"]:
            for key in ("fwd_s", "fwd_spread_s", "bwd_s", "bwd_spread_s", "fwd_nograd_s"):
                if timing.get(key) is not None:
                    timing[key] *= 1000
    path.write_text(json.dumps(doc))
    return path


def _final_model(run: Path) -> dict:
    import torch

    latest = (run / "checkpoints" / "latest").read_text().strip()
    return torch.load(run / "checkpoints" / latest / "model.pt", weights_only=True)


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
# In `-m long`, for the suite's time: the default run keeps
# test_a_mid_epoch_resume_on_another_nproc_records_the_epoch_in_its_end_layout.
@pytest.mark.long
def test_a_resume_keeps_the_layout_of_its_checkpoints_phase(tmp_path):
    """Found by the twenty-ninth round: a run resumed on its own ranks from a checkpoint of
    an online-recalibrated phase re-planned that phase with the run's first profile, not the
    calibration it was planned with, and could take another layout (a 1x2 cached phase came
    back as 1x1, here 1x2 M=2 as 1x2 M=1): other micro-batches, other float sums, and the
    run ended 7e-9 off the uninterrupted one, though "on the same layout a resume is bitwise
    exact". The resumed phase now keeps its recorded decision: the run ends bitwise equal,
    with the same losses."""
    import torch

    from executor.planning import RunPlanner
    from pipeplan.formats import (
        STEP_RECORDS,
        Horizon,
        PhaseRecord,
        RunConfig,
        load,
        read_records,
    )

    profile = _slow_profile(tmp_path / "slow.json")
    args = ["--nproc", "2", "--epochs", "2", "--max-steps-per-epoch", "10", "--global-batch"]
    args += ["32", "--freeze", "0,5", "--checkpoint-every", "5", "--device-memory", "100MiB"]
    args += ["--profile", str(profile), "--runs-dir", str(tmp_path)]
    assert cli.main(["run", *args, "--name", "full"]) == 0
    full = tmp_path / "full"
    phases = [r for r in read_records(full / "run.jsonl") if isinstance(r, PhaseRecord)]
    assert [(p.start_step, p.pricing.profile) for p in phases] == [
        (0, "profile.json"),
        (10, "calibration-1.json"),  # planned after the refit of step 8
    ]
    # What a resume from step 15 planned before: phase 1 again with profile.json, from its
    # layout. It differs from the recorded one, or this run would not tell.
    planner = RunPlanner.for_run(full, load(RunConfig, full / "run.json"))
    horizon = Horizon(samples=320, epochs=1, previous=phases[1].layout, cache=True)
    assert planner(5, horizon).layout != phases[1].layout

    cut = tmp_path / "cut"  # the uninterrupted run, cut back to its checkpoint of step 15
    shutil.copytree(full, cut, ignore=shutil.ignore_patterns(".lock", "model"))
    shutil.rmtree(cut / "checkpoints" / "step-20")
    (cut / "checkpoints" / "latest").write_text("step-15\n")
    assert cli.main(["run", "--resume", str(cut)]) == 0
    resumed = [r for r in read_records(cut / "run.jsonl") if isinstance(r, PhaseRecord)]
    assert resumed[-1].resumed and resumed[-1].layout == phases[1].layout
    a, b = _final_model(full), _final_model(cut)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)

    def losses(run: Path) -> list:
        return [r.loss for r in read_records(run / "run.jsonl") if isinstance(r, STEP_RECORDS)]

    assert losses(cut) == losses(full) and len(losses(full)) == 20


@pytest.mark.parametrize("phase", [0, 1])
def test_a_resume_plans_on_with_the_profile_its_phase_was_priced_with(tmp_path, phase):
    """Found in the nineteenth session's notes: a resumed run planned its next phases with
    the profile.json it started from, not the calibration-N.json the run had fitted and its
    checkpoint's phase was priced with, until its next refit (RECALIBRATE_AFTER_STEPS steps
    into a phase). Rank 0 plans on with the phase's own profile, as the run did."""
    from types import SimpleNamespace

    from test_report import CALIBRATED_PRICING, calibrated_profile

    from executor.planning import RUN_PROFILE, RunPlanner
    from executor.worker import Trainer
    from pipeplan.formats import PhaseRecord, RunConfig, load

    records = elastic_records()
    later = [n for n, r in enumerate(records) if isinstance(r, PhaseRecord) and r.phase == 1]
    records[later[0]] = records[later[0]].model_copy(update={"pricing": CALIBRATED_PRICING})
    run = write_run(tmp_path / "k", records)
    planner = RunPlanner.for_run(run, load(RunConfig, run / "run.json"))
    assert planner.profile_file == RUN_PROFILE and not planner.online
    trainer = SimpleNamespace(run_dir=run, planner=planner)
    Trainer.continue_pricing(trainer, SimpleNamespace(phase=phase))  # type: ignore[arg-type]
    if phase == 0:  # priced with profile.json: planned on with it
        assert planner.profile_file == RUN_PROFILE and not planner.online
        return
    assert planner.profile_file == CALIBRATED_PRICING.profile
    assert planner.profile == calibrated_profile()
    assert planner.pricing("solver").calibration == "online"


@pytest.mark.parametrize("phase, kept", [(1, ["calibration-2.json"]), (0, [])])
def test_a_resumes_truncation_removes_the_fits_no_kept_phase_was_priced_with(tmp_path, phase, kept):
    """Found by the fifty-seventh round: each crash and resume left one more calibration-N.json
    that no record names (a fit after the checkpoint, whose phases the resume drops; the
    resumed run's own fit took the next number). The truncation removes the fits numbered
    after every one a kept phase was priced with, and keeps those."""
    from types import SimpleNamespace

    from test_report import CALIBRATED_PRICING

    from executor.records import Recorder
    from pipeplan.formats import PhaseRecord

    records = elastic_records()
    later = [n for n, r in enumerate(records) if isinstance(r, PhaseRecord) and r.phase == 1]
    records[later[0]] = records[later[0]].model_copy(update={"pricing": CALIBRATED_PRICING})
    run = write_run(tmp_path / "k", records)
    for n in (2, 3, 4):
        (run / f"calibration-{n}.json").write_text("{}")
    start = next(r for r in records if isinstance(r, PhaseRecord) and r.phase == phase)
    recorder = Recorder(run / "run.jsonl", writes=True)
    recorder.truncate(SimpleNamespace(phase=phase, step=start.start_step + 1, epoch=0))
    assert sorted(p.name for p in run.glob("calibration-*.json")) == kept


@pytest.mark.multiprocess
@pytest.mark.timeout(180)
def test_a_resume_whose_data_gives_another_length_is_refused(tmp_path, capsys, monkeypatch):
    """Found by the thirty-second round (beside its rank lengths): `module:function` data is
    loaded again by a resume, and one giving 80 training samples where the run started with
    64 resumed on it with exit 0 (the epochs' cap kept its positions valid). data.json holds
    what the launcher checked as the run started: the resume refuses other data in one line
    naming data.json and both lengths, and changes nothing."""
    name = "rt32_resumelen"
    length = 'int(os.environ.get("RT32_LENGTH", "64"))'
    module = test_hostile_data.RANK_LENGTH_MODULE.format(length=length)
    (tmp_path / f"{name}.py").write_text(module)
    monkeypatch.chdir(tmp_path)
    argv = ["run", "--model", "vit-digits", "--data", f"{name}:load", "--nproc", "1"]
    argv += ["--epochs", "1", "--max-steps-per-epoch", "1", "--global-batch", "16", "--name", "q"]
    try:
        assert cli.main(argv) == 0, capsys.readouterr().err[-3000:]
        capsys.readouterr()
        monkeypatch.setenv("RT32_LENGTH", "80")
        run = tmp_path / "runs" / "q"
        fragments = (f"gave the resume 80 training samples; the run started with 64 ({run}",)
        refused(["run", "--resume", str(run), "--epochs", "2"], tmp_path, capsys, fragments)
    finally:
        sys.modules.pop(name, None)


@pytest.mark.multiprocess
@pytest.mark.timeout(180)
def test_a_file_datas_resume_from_another_directory_refuses_its_helper_there(
    tmp_path, capsys, monkeypatch
):
    """Found by the seventy-third round: a `path/to/mydata.py:load` run, its `import helper`
    found through the working directory, resumed from another directory holding its own
    `helper.py` (and a link to the run's mydata.py), imported that helper instead of the
    listed one, which was unchanged, so no check saw it, and trained on other labels, exit 0.
    A file's helpers are found beside it now (the seventy-fourth round), as `python
    path/to/mydata.py` finds them: the resume trains on the run's own, wherever it runs."""
    first, other = tmp_path / "p1", tmp_path / "p2"
    for folder, shift in ((first, 0), (other, 1)):
        folder.mkdir()
        marker = f"open({str(folder / 'imported')!r}, 'w').close()\n"
        (folder / "rt73_helper.py").write_text(f"{marker}SHIFT = {shift}\n")
    (first / "rt73_file.py").write_text(
        "import torch, rt73_helper\n"
        "from torch.utils.data import TensorDataset\n"
        "def load(seed=0):\n"
        "    x = torch.rand(64, 1, 8, 8, generator=torch.Generator().manual_seed(seed))\n"
        "    y = (torch.arange(64) + rt73_helper.SHIFT) % 2\n"
        "    return TensorDataset(x, y), TensorDataset(x, y)\n"
    )
    (other / "rt73_file.py").symlink_to(first / "rt73_file.py")
    monkeypatch.chdir(first)
    argv = ["run", "--model", "vit-digits", "--data", "rt73_file.py:load", "--nproc", "1"]
    argv += ["--epochs", "1", "--max-steps-per-epoch", "1", "--global-batch", "16"]
    argv += ["--runs-dir", str(tmp_path / "runs"), "--name", "q"]
    try:
        assert cli.main(argv) == 0, capsys.readouterr().err[-3000:]
        capsys.readouterr()
        sys.modules.pop("rt73_helper", None)  # a new command's process, as a user's would be
        monkeypatch.chdir(other)
        run = tmp_path / "runs" / "q"
        for epochs, given in (("2", []), ("3", ["--data", "rt73_file.py:load"])):
            resume = ["run", "--resume", str(run), "--epochs", epochs, *given]
            assert cli.main(resume) == 0, capsys.readouterr().err[-3000:]
            sys.modules.pop("rt73_helper", None)
        assert (first / "imported").exists() and not (other / "imported").exists()
    finally:
        sys.modules.pop("rt73_helper", None)


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
@pytest.mark.parametrize("form", ["module", "file"])
def test_a_helper_only_the_ranks_import_is_held_to_data_json_on_a_resume(
    tmp_path, capsys, monkeypatch, form
):
    """Found by the seventy-fourth round: a helper a rank imports only as it reads its items
    (a `__getitem__`'s `import helper`), resumed from another directory holding its own
    `helper.py`, was that directory's, and the rank trained on it, exit 0: the launcher's
    check (above) saw no such import (and `path/to/mydata.py:load` found no helper at all
    past a rank's first read). A file's helpers are found beside it now; a resume with a
    PYTHONPATH that finds another helper of that name first (no directory rule helps) is
    refused by the rank as it checkpoints, against data.json; the checkpoint is not
    written."""
    first, other = tmp_path / "p1", tmp_path / "p2"
    for folder, shift in ((first, 0), (other, 1)):
        folder.mkdir()
        (folder / "rt74_lazy.py").write_text(f"SHIFT = {shift}\n")
    (first / "rt74_later.py").write_text("SHIFT = 0\n")
    (first / "rt74_ranks.py").write_text(
        "import os, torch\n"
        "from torch.utils.data import TensorDataset\n"
        "class Lazy(TensorDataset):\n"
        "    reads = 0\n"
        "    def __getitem__(self, i):\n"
        "        x, y = super().__getitem__(i)\n"
        "        if 'RANK' not in os.environ:\n"
        "            return x, y\n"
        "        import rt74_lazy\n"  # the ranks' reads alone
        "        Lazy.reads += 1\n"
        "        if Lazy.reads > 16:\n"  # past the first batch: "No module named" for a file's
        "            import rt74_later\n"
        "        return x, (y + rt74_lazy.SHIFT) % 2\n"
        "def load(seed=0):\n"
        "    x = torch.rand(64, 1, 8, 8, generator=torch.Generator().manual_seed(seed))\n"
        "    y = torch.arange(64) % 2\n"
        "    return Lazy(x, y), TensorDataset(x, y)\n"
    )
    data = "rt74_ranks:load" if form == "module" else "rt74_ranks.py:load"
    monkeypatch.chdir(first)
    argv = ["run", "--model", "vit-digits", "--data", data, "--nproc", "1", "--epochs", "1"]
    argv += ["--max-steps-per-epoch", "2", "--global-batch", "16", "--checkpoint-every", "1"]
    argv += ["--runs-dir", str(tmp_path / "runs"), "--name", "q"]
    assert cli.main(argv) == 0, capsys.readouterr().err[-3000:]
    capsys.readouterr()
    run = tmp_path / "runs" / "q"
    listed = [f["path"] for f in json.loads((run / "data.json").read_text())["files"]]
    assert listed[0] == str(first / "rt74_ranks.py")
    assert sorted(listed[1:]) == [str(first / "rt74_later.py"), str(first / "rt74_lazy.py")]
    kept = sorted(p.name for p in (run / "checkpoints").iterdir())
    monkeypatch.setenv("PYTHONPATH", f"{other}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    resume = ["run", "--resume", str(run), "--epochs", "2"]
    assert cli.main(resume) == 2
    err = capsys.readouterr().err
    said = (
        f"writing its checkpoint, or at step 3: {run}/data.json: the run's data module imported "
        f"'rt74_lazy' from {first}/rt74_lazy.py, but here (in {first}) it imports "
        f"{other}/rt74_lazy.py"
    )
    assert err.startswith("pipeplan: error: training failed on rank 0 after step 2,"), err
    assert said in err and err.count("\n") == 1, err
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == kept


def test_a_helper_found_through_a_folder_the_data_put_on_the_path_is_held_by_its_name(
    tmp_path, monkeypatch
):
    """Found by the seventy-fifth round: data that put its `lib/` on sys.path and imported
    `helper` recorded lib/helper.py, which the resume's check looked for as `lib.helper`, a
    name nothing imports: a resume with a PYTHONPATH holding another `helper` trained on it,
    exit 0. A listed helper imported here under no name is held to each shorter name it has
    from a folder of the run's on sys.path; not to one it has from no such folder (the
    seventy-sixth round: `pkg/utils.py`, never imported as `utils`, was refused for the
    project's own `utils.py`)."""
    import types

    from executor.task import check_helpers_kept
    from pipeplan.formats import DataFile, DataRecord
    from pipeplan.formats.base import dumps

    mine, other = tmp_path / "a" / "lib" / "rt75_lh.py", tmp_path / "c" / "lib" / "rt75_lh.py"
    files = [tmp_path / "a" / "rt75_ld.py", mine]
    record = DataRecord(
        data=f"{files[0]}:load", files=[DataFile(path=str(f), sha256="0" * 64) for f in files]
    )
    (tmp_path / "data.json").write_text(dumps(record))
    cfg = types.SimpleNamespace(data=f"{files[0]}:load")
    monkeypatch.setitem(sys.modules, "rt75_lh", types.SimpleNamespace(__file__=str(mine)))
    check_helpers_kept(tmp_path, cfg)  # the run's own, under its shorter name
    monkeypatch.setitem(sys.modules, "rt75_lh", types.SimpleNamespace(__file__=str(other)))
    check_helpers_kept(tmp_path, cfg)  # a/lib is on no path here: `rt75_lh` is not it
    monkeypatch.syspath_prepend(str(mine.parent))  # as the data put it there
    said = f"imported 'rt75_lh' from {mine}, but here (in {Path.cwd()}) it imports {other}"
    with pytest.raises(InputFileError, match=re.escape(said)):
        check_helpers_kept(tmp_path, cfg)


def test_a_packages_helpers_are_named_from_the_folder_that_holds_it(tmp_path, monkeypatch):
    """Found by the seventy-fourth round: `--data pkg:load` (its `load` in pkg/__init__.py)
    that imports both ./inner.py and pkg/inner.py was refused on a resume from its own
    directory, nothing changed ("imported 'inner' from …/pkg/inner.py, but here it imports
    …/inner.py"): the resume's helper check named the helpers from pkg/, not from the folder
    holding it, as `module_root` does; and a package's helper imported from elsewhere went
    unchecked (pkg/sub/helper.py was named `sub.helper`)."""
    import types

    from executor.task import check_helpers_kept
    from pipeplan.formats import DataFile, DataRecord
    from pipeplan.formats.base import dumps

    files = [tmp_path / "rt74pkg" / "__init__.py", tmp_path / "rt74_inner.py"]
    files.append(tmp_path / "rt74pkg" / "rt74_inner.py")
    record = DataRecord(
        data="rt74pkg:load", files=[DataFile(path=str(f), sha256="0" * 64) for f in files]
    )
    (tmp_path / "data.json").write_text(dumps(record))
    cfg = types.SimpleNamespace(data="rt74pkg:load")
    for name, file in (("rt74_inner", files[1]), ("rt74pkg.rt74_inner", files[2])):
        monkeypatch.setitem(sys.modules, name, types.SimpleNamespace(__file__=str(file)))
    check_helpers_kept(tmp_path, cfg)  # the run's own: no refusal
    elsewhere = tmp_path / "other" / "rt74pkg" / "rt74_inner.py"
    monkeypatch.setitem(
        sys.modules, "rt74pkg.rt74_inner", types.SimpleNamespace(__file__=str(elsewhere))
    )
    with pytest.raises(InputFileError, match=re.escape("imported 'rt74pkg.rt74_inner' from")):
        check_helpers_kept(tmp_path, cfg)


# ----------------------------------------- thirty-sixth round: no usable checkpoint, and which

# 1 rank, 2 epochs of 3 steps, a checkpoint every 2 steps: step-4 and the final step-6 kept.
TWO_KEPT = ["--model", "vit-digits", "--nproc", "1", "--epochs", "2", "--global-batch", "16"]
TWO_KEPT += ["--max-steps-per-epoch", "3", "--checkpoint-every", "2", "--freeze", "none"]


@pytest.fixture(scope="module")
def two_kept_run(tmp_path_factory) -> Path:
    """Uninterrupted: TWO_KEPT's run, its checkpoints step-4 and step-6 (`latest`)."""
    root = tmp_path_factory.mktemp("twokept")
    assert cli.main(["run", *TWO_KEPT, "--name", "k", "--runs-dir", str(root)]) == 0
    checkpoints = root / "k" / "checkpoints"
    assert sorted(p.name for p in checkpoints.iterdir()) == ["latest", "step-4", "step-6"]
    return root / "k"


def _two_kept_commands(run: Path, tmp_path: Path) -> dict[str, list[str]]:
    """`_commands` for a TWO_KEPT run: its resume trains a third epoch."""
    return {**_commands(run, tmp_path), "resume": ["run", "--resume", str(run), "--epochs", "3"]}


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "forged, said",
    [
        ("its size", "not the zip archive torch.save writes"),
        ("no size", "not the zip archive torch.save writes"),
        ("all holes", "not the zip archive torch.save writes"),
        ("a hole between entries", " bytes lie outside the archive's entries"),
    ],
)
def test_a_sparse_checkpoint_file_the_manifest_agrees_with_is_passed_over_unhashed(
    two_kept_run, tmp_path, capsys, forged, said
):
    """Found by the fifty-second round: with the manifest's size edited to the file's (or
    deleted, as a manifest written before sizes), a sparse model.pt of 8 GiB was hashed for
    24 s, of 15 TiB for hours. A tensor file is first held to the zip archive torch.save
    writes, from its directory at its end: bytes outside its entries, or no archive at all,
    are refused at once, and the older checkpoint used."""
    import time

    run = copy_run(two_kept_run, tmp_path)
    model = run / "checkpoints" / "step-6" / "model.pt"
    if forged == "all holes":  # nothing of the archive left: 20 GiB of holes
        model.write_bytes(b"")
    if forged == "a hole between entries":  # a whole archive, its entries 20 GiB apart
        import zipfile

        with open(model, "wb") as raw, zipfile.ZipFile(raw, "w") as archive:
            archive.writestr("k/data.pkl", b"x")
            archive.start_dir += 20 << 30  # where zipfile writes the next entry
            archive.writestr("k/data/0", b"y")
    else:
        os.truncate(model, 20 << 30)  # the archive, then holes
    manifest = json.loads(model.with_name("manifest.json").read_text())
    sizes = {**manifest["sizes"], "model.pt": model.stat().st_size}
    manifest["sizes"] = None if forged == "no size" else sizes
    model.with_name("manifest.json").write_text(json.dumps(manifest))
    started = time.monotonic()
    assert cli.main(_two_kept_commands(run, tmp_path)["export"]) == 0
    took = time.monotonic() - started
    warned = [line for line in capsys.readouterr().err.splitlines() if "WARNING" in line]
    assert len(warned) == 1 and warned[0].startswith(f"pipeplan: WARNING: {model}: "), warned
    assert said in warned[0], warned
    assert warned[0].endswith("(corrupted or replaced); exporting the older step-4"), warned
    assert took < 60, took  # hashing the 20 GiB took minutes


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
@pytest.mark.parametrize("command", ["report", "calibrate", "export", "resume"])
def test_an_older_manifest_past_its_own_configs_end_is_refused(
    two_kept_run, tmp_path, capsys, command
):
    """Found by the sixty-first round: step-4's manifest (1 step into epoch 1) with its
    config.epochs edited to 1, a final checkpoint in mid-epoch with no resume recorded, was
    reported, calibrated, exported and resumed from (exit 0). A checkpoint's config.epochs
    is at least its epoch + 1, or its epoch at that epoch's start (its run's final one)."""
    run = copy_run(two_kept_run, tmp_path)
    path = run / "checkpoints" / "step-4" / "manifest.json"
    doc = json.loads(path.read_text())
    assert (doc["epoch"], doc["step_in_epoch"], doc["config"]["epochs"]) == (1, 1, 2)
    doc["config"]["epochs"] = 1
    path.write_text(json.dumps(doc))
    said = "config.epochs: 1, but the checkpoint is at step 4, 1 step into epoch 1 (counted "
    said += "from 0): past the end of a run of 1 epochs (step 3, its final checkpoint)"
    refused(_two_kept_commands(run, tmp_path)[command], tmp_path, capsys, (f"{path}: {said}",))


def test_a_final_checkpoint_the_records_go_past_without_a_resume_is_refused(
    boundary_run, tmp_path, capsys
):
    """Found by the sixty-first round (its general rule): step-5's manifest (epoch 1's
    start) with config.epochs 1 is its run's final checkpoint, but run.jsonl records the
    steps after it and no resume there: the run cannot have gone on. Refused as that, not
    as the gradient decisions it then seems to lack."""
    run = copy_run(boundary_run, tmp_path)
    path = run / "checkpoints" / f"step-{EPOCH}" / "manifest.json"
    doc = json.loads(path.read_text())
    doc["config"]["epochs"] = 1
    path.write_text(json.dumps(doc))
    said = f"config.epochs: 1 makes step {EPOCH} (epoch 1's start) its run's final checkpoint"
    refused(["report", str(run)], tmp_path, capsys, (f"{path}: {said}", "without a resume"))


@pytest.mark.timeout(120)
def test_a_checkpoint_archive_of_too_many_entries_is_passed_over_unread(
    two_kept_run, tmp_path, capsys, monkeypatch
):
    """Found by the fifty-third round: a model.pt forged with 1.5 M empty entries, its
    manifest's checksum and size rewritten, was read whole (28 s, 1.1 GB) and resumed. The
    archive's own count is read from its end record first, held to MAX_ARCHIVE_ENTRIES (here
    lowered to the most any of the run's checkpoint files holds, model.pt forged to one more:
    the forgery at a size a test affords)."""
    import hashlib
    import zipfile

    from executor import checkpoint

    run = copy_run(two_kept_run, tmp_path)
    model = run / "checkpoints" / "step-6" / "model.pt"
    most = max(len(zipfile.ZipFile(f).infolist()) for f in run.glob("checkpoints/step-*/*.pt"))
    monkeypatch.setattr(checkpoint, "MAX_ARCHIVE_ENTRIES", most)
    with zipfile.ZipFile(model, "a") as archive:
        for i in range(most + 1 - len(archive.infolist())):
            archive.writestr(f"archive/forged/{i}", b"")
    manifest = json.loads(model.with_name("manifest.json").read_text())
    manifest["files"]["model.pt"] = hashlib.sha256(model.read_bytes()).hexdigest()
    manifest["sizes"]["model.pt"] = model.stat().st_size
    model.with_name("manifest.json").write_text(json.dumps(manifest))
    assert cli.main(_two_kept_commands(run, tmp_path)["export"]) == 0
    warned = [line for line in capsys.readouterr().err.splitlines() if "WARNING" in line]
    assert len(warned) == 1 and warned[0].startswith(f"pipeplan: WARNING: {model}: "), warned
    listed = checkpoint.MAX_ARCHIVE_ENTRIES + 1
    assert f"its archive lists {listed:,} entries; a checkpoint file holds at most" in warned[0]
    assert warned[0].endswith("(corrupted or replaced); exporting the older step-4"), warned


def test_an_archive_s_entry_count_is_read_from_its_end_record_or_zip64_record():
    """`_listed_entries` reads the count zipfile would list, from the end record and, past
    65,535 entries, from the zip64 record zipfile writes; None without an end record."""
    import io
    import zipfile

    from executor.checkpoint import _listed_entries

    for count in (0, 3, 70_000):
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w") as archive:
            for i in range(count):
                archive.writestr(f"e{i}", b"")
            archive.comment = b"c" * 1000  # the end record is searched for behind a comment
        entries = zipfile.ZipFile(buffer).infolist()
        directory = sum(46 + len(e.filename) + len(e.extra) + len(e.comment) for e in entries)
        assert _listed_entries(buffer) == (count, directory)
    assert _listed_entries(io.BytesIO(b"x" * 100)) is None


def _forged_end(how: str, count: int) -> tuple[bytes, int]:
    """An archive of `count` empty entries whose end record lies about its directory as the
    fifty-seventh round's forgeries did, and the directory's true size."""
    import io
    import struct
    import zipfile

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for i in range(count):
            archive.writestr(f"e{i}", b"")
    data = buffer.getvalue()
    directory, offset = struct.unpack_from("<II", data, len(data) - 10)
    body = data[: offset + directory]
    if how == "end record holding its signature":  # the counts' four bytes read PK\x05\x06
        return data[:-14] + b"PK\x05\x06" + data[-10:], directory
    # A zip64 record and its locator, the end record after them unflagged (1 entry, 46 bytes):
    # zipfile takes the zip64 record wherever a locator precedes the end record.
    zip64 = struct.pack(
        "<4sQHHIIQQQQ", b"PK\x06\x06", 44, 45, 45, 0, 0, count, count, directory, offset
    )
    locator = struct.pack("<4sIQI", b"PK\x06\x07", 0, len(body), 1)
    end = struct.pack("<4sHHHHIIH", b"PK\x05\x06", 0, 0, 1, 1, 46, offset, 0)
    return body + zip64 + locator + end, directory


@pytest.mark.parametrize(
    "how", ["zip64 record without the end record's markers", "end record holding its signature"]
)
def test_an_archive_s_directory_is_sized_as_zipfile_reads_it(how):
    """Found by the fifty-seventh round: `_listed_entries` read the end record its own way, and
    zipfile another: a zip64 record the end record did not flag, or an end record whose count
    fields hold its own signature, passed the limits with 1 entry (or none) while zipfile
    walked 1.5 M entries (29 s, 800 MB). It now reads what zipfile reads."""
    import io
    import zipfile

    from executor.checkpoint import _listed_entries

    data, directory = _forged_end(how, 500)
    walked = len(zipfile.ZipFile(io.BytesIO(data)).infolist())
    assert walked == 500
    listed = _listed_entries(io.BytesIO(data))
    assert listed is not None and listed[1] == directory
    if how.startswith("zip64"):
        assert listed[0] == walked


def test_the_archive_directory_limit_holds_the_entry_count():
    """Found by the fifty-eighth round: an end record forging its count let zipfile walk a
    directory of 64 MiB, 1.43 M entries of 46 bytes (12 s, 0.6 GB), past the 1,000,000 a
    checkpoint file may hold. The directory's limit is no more than that many of the least
    lines a zip directory holds (46 bytes, an entry without a name)."""
    from executor import checkpoint

    least_line = struct.calcsize("<4s4B4HL2L5H2L")  # zipfile's central directory record
    assert least_line == 46
    assert checkpoint.MAX_DIRECTORY_BYTES // least_line <= checkpoint.MAX_ARCHIVE_ENTRIES


@pytest.mark.timeout(120)
def test_a_checkpoint_archive_whose_end_record_lists_too_few_entries_is_passed_over(
    two_kept_run, tmp_path, capsys, monkeypatch
):
    """Found by the fifty-sixth round: zipfile walks an archive's directory by its size,
    whatever count its end record gives: a model.pt of 1.5 M entries whose end record said 1
    took 27 s and 1 GB to export. The directory's size is held to MAX_DIRECTORY_BYTES too
    (here lowered to what the run's own files need: the forgery at a size a test affords)."""
    import hashlib
    import struct
    import zipfile

    from executor import checkpoint

    run = copy_run(two_kept_run, tmp_path)
    model = run / "checkpoints" / "step-6" / "model.pt"

    def directory(path: Path) -> int:
        with open(path, "rb") as handle:
            return checkpoint._listed_entries(handle)[1]

    most = max(directory(f) for f in run.glob("checkpoints/step-*/*.pt"))
    monkeypatch.setattr(checkpoint, "MAX_DIRECTORY_BYTES", most)
    with zipfile.ZipFile(model, "a") as archive:
        for i in range(most // 40):
            archive.writestr(f"archive/forged/{i}", b"")
    data = bytearray(model.read_bytes())
    at = data.rfind(b"PK\x05\x06")
    struct.pack_into("<HH", data, at + 8, 1, 1)  # the end record says: one entry
    model.write_bytes(bytes(data))
    manifest = json.loads(model.with_name("manifest.json").read_text())
    manifest["files"]["model.pt"] = hashlib.sha256(data).hexdigest()
    manifest["sizes"]["model.pt"] = len(data)
    model.with_name("manifest.json").write_text(json.dumps(manifest))
    assert cli.main(_two_kept_commands(run, tmp_path)["export"]) == 0
    warned = [line for line in capsys.readouterr().err.splitlines() if "WARNING" in line]
    assert len(warned) == 1 and f"{model}: its archive's directory is " in warned[0], warned
    assert warned[0].endswith("(corrupted or replaced); exporting the older step-4"), warned


@pytest.mark.timeout(120)
@pytest.mark.parametrize("command", ["export", "report"])
def test_a_checkpoint_file_of_another_size_is_passed_over_unhashed(
    two_kept_run, tmp_path, capsys, command
):
    """Found by the fifty-first round: a checkpoint file of any size was hashed whole before
    its checksum failed: model.pt made a sparse 20 GiB took 88 s, a terabyte would take
    hours. The manifest records each file's size; one of another size is passed over at once,
    with the notice."""
    import time

    run = copy_run(two_kept_run, tmp_path)
    model = run / "checkpoints" / "step-6" / "model.pt"
    written = model.stat().st_size
    os.truncate(model, 20 << 30)  # sparse: no disk taken
    started = time.monotonic()
    assert cli.main(_two_kept_commands(run, tmp_path)[command]) == 0
    took = time.monotonic() - started
    doing = {"export": "exporting"}.get(command, "checking the run against")
    notice = (
        f"pipeplan: WARNING: {model}: {20 << 30:,} bytes, but the manifest records {written:,} "
        f"(corrupted or replaced); {doing} the older step-4"
    )
    err = capsys.readouterr().err
    assert [line for line in err.splitlines() if "WARNING" in line] == [notice], err
    assert took < 60, took  # hashing 20 GiB took 88 s


def _corrupt(path: Path) -> None:
    """One byte in the middle of `path` flipped, as a disk or a copy damages it."""
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("command", ["resume", "export"])
@pytest.mark.parametrize("case", ["the only checkpoint", "the newer one set aside before"])
def test_the_last_checkpoint_unusable_says_none_is_left(
    two_kept_run, tmp_path, capsys, command, case
):
    """Found by the thirty-sixth round: where the checkpoint that did not verify was the last
    one, resume and export said only "step-4/model.pt: checksum mismatch (corrupted or
    replaced)", as if the run had another one or deleting that file would do: a run with a
    single checkpoint, or one whose newer step-6 a fallback resume had already moved aside
    as unusable-step-6. Two corrupt checkpoints said that none was left. Now every case
    says so, names what an earlier resume set aside, and what is left to do: one line,
    nothing changed."""
    from executor.checkpoint import read_manifest, set_aside_passed_over

    run = copy_run(two_kept_run, tmp_path)
    checkpoints = run / "checkpoints"
    if case == "the only checkpoint":
        shutil.rmtree(checkpoints / "step-4")  # what a run that kept one checkpoint has
        left, aside = "step-6", ()
    else:  # what a fallback resume stopped after its first step leaves
        _corrupt(checkpoints / "step-6" / "model.pt")
        assert set_aside_passed_over(run, read_manifest(checkpoints / "step-4"))
        assert sorted(p.name for p in checkpoints.iterdir()) == [
            "latest",
            "step-4",
            "unusable-step-6",
        ]
        left, aside = "step-4", ("; unusable-step-6 was set aside before (it did not verify)",)
    _corrupt(checkpoints / left / "model.pt")
    argv = _two_kept_commands(run, tmp_path)[command]
    said = (
        f"pipeplan: error: {checkpoints / left / 'model.pt'}: checksum mismatch (corrupted or "
        "replaced); ",
        *aside,
        f"; {_none_left(command, run)}",
    )
    refused(argv, tmp_path, capsys, said)
    assert not (tmp_path / "out").exists()


def _none_left(command: str, run: Path) -> str:
    """What is left to do where no checkpoint of the finished `run` verifies, as `command`
    says it: only a resume is told to delete the run (the sixty-ninth round: export was too,
    which deletes the model/ the run wrote as it ended)."""
    assert (run / "model" / "config.json").is_file()
    return {
        "resume": f"no checkpoint of this run is left to continue from: delete {run} to run it "
        "again",
        "export": f"no checkpoint of this run is left to export: {run / 'model'}, which the run "
        "wrote as it ended, holds its final weights",
        "report": "no checkpoint of this run is left to check its records against",
    }[command]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("command", ["resume", "export", "report"])
def test_no_checkpoint_that_verifies_is_said_alike_by_every_command(
    two_kept_run, tmp_path, capsys, command
):
    """Found by the thirty-sixth round (with its missing manifest): both checkpoints without
    their manifest.json, resume, export and report each said "step-6: checkpoint is
    incomplete". Each says, in the one line, that the older one cannot be used either and
    that no checkpoint of the run is left; the fifty-second round: and why."""
    run = copy_run(two_kept_run, tmp_path)
    for manifest in (run / "checkpoints").glob("step-*/manifest.json"):
        manifest.unlink()
    said = (
        f"pipeplan: error: {run / 'checkpoints' / 'step-6'}: checkpoint is incomplete (no "
        "manifest.json); the older step-4 cannot be used either (checkpoint is incomplete (no "
        f"manifest.json)); {_none_left(command, run)}"
    )
    refused(_two_kept_commands(run, tmp_path)[command], tmp_path, capsys, said)


def _unusable_newest(run: Path, damage: str) -> None:
    """The run's newest checkpoint step-6 damaged as `damage` says (UNUSABLE_NEWEST)."""
    step = run / "checkpoints" / "step-6"
    if damage == "manifest.json deleted":
        (step / "manifest.json").unlink()
    elif damage == "every file deleted":
        for path in step.iterdir():
            path.unlink()
    else:  # a file in its place
        shutil.rmtree(step)
        step.write_text("not a checkpoint\n")


# How the newest is damaged: what the notice says of it.
UNUSABLE_NEWEST = {
    "manifest.json deleted": "checkpoint is incomplete (no manifest.json)",
    "every file deleted": "checkpoint is incomplete (no manifest.json)",
    "a file in its place": (
        "not a folder; a checkpoint is a folder of manifest.json, model.pt, optimizer.pt and rng.pt"
    ),
}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("command", ["export", "report", "calibrate"])
@pytest.mark.parametrize("damage", UNUSABLE_NEWEST)
def test_a_newest_checkpoint_without_its_manifest_is_passed_over_by_export_and_report(
    two_kept_run, tmp_path, capsys, command, damage
):
    """Found by the thirty-sixth round: the newest step-6 without its manifest.json (every
    file of it deleted, or a file in its place) stopped export and report with "step-6:
    checkpoint is incomplete", never naming the usable step-4 beside it; one without its
    model.pt was passed over for step-4 with a notice. Both are one class, unusable: passed
    over with the notice, step-4 exported (report checks the run against it), the run
    unchanged. Said once by calibrate too (the fifty-first round: twice, as it read the run
    for the phases and again for the transitions)."""
    run = copy_run(two_kept_run, tmp_path)
    _unusable_newest(run, damage)
    before = snapshot(run)
    assert cli.main(_two_kept_commands(run, tmp_path)[command]) == 0
    err = capsys.readouterr().err
    doing = {"export": "exporting"}.get(command, "checking the run against")
    notice = (
        f"pipeplan: WARNING: {run / 'checkpoints' / 'step-6'}: {UNUSABLE_NEWEST[damage]}; "
        f"{doing} the older step-4"
    )
    assert [line for line in err.splitlines() if "WARNING" in line] == [notice], err
    assert snapshot(run) == before
    if command == "export":
        assert (tmp_path / "out" / "config.json").exists()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("command", ["export", "report"])
def test_a_newest_checkpoint_without_its_weights_is_passed_over_by_report_too(
    two_kept_run, tmp_path, capsys, command
):
    """Found by the forty-ninth round: the newest step-6 without its model.pt was passed over
    by export with a notice, and by report in silence (it reads manifests only). Report
    looks that a checkpoint's files are there, and says it as export does."""
    run = copy_run(two_kept_run, tmp_path)
    (run / "checkpoints" / "step-6" / "model.pt").unlink()
    before = snapshot(run)
    assert cli.main(_two_kept_commands(run, tmp_path)[command]) == 0
    err = capsys.readouterr().err
    doing = {"export": "exporting", "report": "checking the run against"}[command]
    notice = (
        f"pipeplan: WARNING: {run / 'checkpoints' / 'step-6' / 'model.pt'}: missing (the "
        f"manifest records its checksum); {doing} the older step-4"
    )
    assert [line for line in err.splitlines() if "WARNING" in line] == [notice], err
    assert snapshot(run) == before


@pytest.mark.multiprocess
@pytest.mark.timeout(240)
# "a file in its place" in `-m long`, for the suite's time: the same pass over it.
@pytest.mark.parametrize(
    "damage", ["manifest.json deleted", pytest.param("a file in its place", marks=pytest.mark.long)]
)
def test_a_resume_passes_over_a_newest_checkpoint_without_its_manifest(
    two_kept_run, tmp_path, capfd, damage
):
    """Found by the thirty-sixth round: a resume of a run whose newest step-6 had lost its
    manifest.json (or was a file) was refused, "step-6: checkpoint is incomplete", though
    step-4 beside it was usable; a step-6 without its model.pt was passed over. Now it is
    passed over alike: the notice, the resume from step-4, step-6 moved aside as
    unusable-step-6 (its bytes kept, a file as a file) and the run trained to its end."""
    run = copy_run(two_kept_run, tmp_path)
    checkpoints = run / "checkpoints"
    _unusable_newest(run, damage)
    step_6 = checkpoints / "step-6"
    kept = step_6.read_bytes() if step_6.is_file() else snapshot(step_6)
    capfd.readouterr()
    assert cli.main(["run", "--resume", str(run), "--epochs", "3"]) == 0
    err = capfd.readouterr().err
    lines = [line for line in err.splitlines() if "WARNING" in line]
    assert lines == [
        f"pipeplan: WARNING: {step_6}: {UNUSABLE_NEWEST[damage]}; resuming from the older step-4",
        f"pipeplan: rank 0: WARNING: {checkpoints}: step-6, which did not verify, is moved to "
        "unusable-step-6 (kept, never read by pipeplan); latest names step-4, which the run "
        "continues from",
    ], err[-3000:]
    assert sorted(p.name for p in checkpoints.iterdir()) == [
        "latest",
        "step-8",
        "step-9",
        "unusable-step-6",
    ]
    assert (checkpoints / "latest").read_text() == "step-9\n"
    aside = checkpoints / "unusable-step-6"
    assert (aside.read_bytes() if aside.is_file() else snapshot(aside)) == kept
    assert cli.main(["report", str(run)]) == 0
    assert "WARNING" not in capfd.readouterr().err


@pytest.mark.timeout(120)
@pytest.mark.parametrize("command", ["export", "report"])
def test_a_checkpoint_being_written_is_never_passed_over(two_kept_run, tmp_path, capsys, command):
    """The thirty-sixth round's fix passes over a `step-N` without its manifest; a checkpoint
    being written is not one: `save` fills `.tmp-step-N/` and renames it whole once its
    manifest is in, and `latest` names it only after. A `.tmp-step-8/` holding model.pt
    alone (a write under way, or one a kill left) is neither read nor named nor moved."""
    run = copy_run(two_kept_run, tmp_path)
    partial = run / "checkpoints" / ".tmp-step-8"
    partial.mkdir()
    (partial / "model.pt").write_bytes((run / "checkpoints" / "step-6" / "model.pt").read_bytes())
    before = snapshot(run)
    assert cli.main(_two_kept_commands(run, tmp_path)[command]) == 0
    assert "WARNING" not in capsys.readouterr().err
    assert snapshot(run) == before


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_a_run_extended_by_more_epochs_makes_the_freeze_decision_its_end_did_not(tmp_path):
    """Found by the thirty-ninth round: a run's last epoch makes no freeze decision (no epoch
    follows it), and a resume for more epochs never made it either: `--freeze alpha` grown
    epoch by epoch trained frozen layers 0, 4, 4, 4 where its schedule says 0, 4, 6, 7. The
    resume now decides at the epoch it starts, as the uninterrupted run did: the α bound's."""
    from pipeplan.formats import EpochRecord, Profile, load, read_records
    from pipeplan.freeze import alpha_schedule

    runs = tmp_path / "runs"
    argv = ["run", "--nproc", "1", "--max-steps-per-epoch", "2", "--freeze", "alpha"]
    argv += ["--alpha", "0.5", "--name", "grown", "--runs-dir", str(runs)]
    assert cli.main([*argv, "--epochs", "1"]) == 0
    assert cli.main(["run", "--resume", str(runs / "grown"), "--epochs", "2"]) == 0
    records = read_records(runs / "grown" / "run.jsonl")
    blocks = len(load(Profile, runs / "grown" / "profile.json").layers) - 2
    expected = alpha_schedule(0.5, 2, blocks).frozen_layers
    assert expected[1] > 0  # the decision matters
    assert [r.frozen_layers for r in records if isinstance(r, EpochRecord)] == expected


@pytest.mark.parametrize("torn", [False, True])
def test_a_resume_on_a_full_disk_is_refused_naming_the_free_space(
    finished_run, tmp_path, capsys, monkeypatch, torn
):
    """Found by the forty-seventh round: `--resume` of a run whose disk had 0 bytes free
    failed as "training failed on rank 0 before the resume's first step: exited with code
    1", the full disk said only in the rank's log (its report could not be written). A run
    is refused before any rank starts where its disk has less than `launch.MIN_FREE_BYTES`
    free, in one line naming it, and nothing of the run changes. A torn last record's notice
    is not said before it (the forty-seventh round's R4: a WARNING line came first)."""
    from executor import launch

    run = copy_run(finished_run, tmp_path)
    if torn:  # a crash mid-append
        with open(run / "run.jsonl", "a") as records:
            records.write('{"kind": "st')
    real = os.statvfs

    def full(path):
        found = real(path)
        return os.statvfs_result((found.f_bsize, found.f_frsize, *found[2:4], 0, *found[5:]))

    monkeypatch.setattr(launch.os, "statvfs", full)
    fragment = (
        f"{run}: the disk holding it has nothing free; a run needs at least 16.0 MiB to start",
        "free some space and run it again",
    )
    refused(["run", "--resume", str(run), "--epochs", "2"], run, capsys, fragment)


@pytest.mark.parametrize("given", ["", "checkpoints/latest-folder"])
def test_a_run_directory_given_as_model_is_named_as_one(finished_run, tmp_path, capsys, given):
    """Found by the forty-seventh round: `pipeplan profile runs/ft` (a run directory where a
    model folder belongs) said "runs/ft/config.json: no such file", as did a checkpoint's
    folder; `--profile runs/r1` says "not a profile (it is a run directory)". MODEL says so
    too, and what makes a model folder of it."""
    folder = finished_run
    if given:
        latest = (finished_run / "checkpoints" / "latest").read_text().strip()
        folder = finished_run / "checkpoints" / latest
    kind = "a checkpoint folder" if given else "a run directory"
    fragment = f"{folder}: not a model folder (it is {kind}); `pipeplan export RUN --out DIR`"
    refused(["profile", str(folder), "--out", str(tmp_path / "p.json")], tmp_path, capsys, fragment)


def test_a_failure_in_the_first_epochs_evaluation_is_placed_without_a_data_record(
    finished_run, tmp_path
):
    """Found by the forty-eighth round: a rank stopped in epoch 1's evaluation (built-in
    data: no data.json) was said "at step 4", a step never started: without data.json's
    facts the steps per epoch were unknown. A phase record's horizon (its samples an epoch)
    tells them."""
    from executor import launch
    from pipeplan.formats import RunConfig, load

    run = copy_run(finished_run, tmp_path)
    assert not (run / "data.json").exists()  # the built-in digits
    records = (run / "run.jsonl").read_text().splitlines(keepends=True)
    kept = [r for r in records if json.loads(r)["kind"] in ("phase", "step")]
    (run / "run.jsonl").write_text("".join(kept))  # its epoch's record never written
    cfg = load(RunConfig, run / "run.json")
    assert launch._placed(run, cfg) == " after step 1, at the end of epoch 1"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("host", ["no-such-host.invalid", "a..b", "127.0.0.1"])
def test_a_rank_waiting_for_an_unknown_master_addr_says_the_name_is_unknown(host):
    """Found by the forty-seventh round: MASTER_ADDR naming no host was waited for, then told
    "nothing listens there". It is still waited for (a cluster's DNS may learn a node's name
    only once the node is up), and the line says the name is unknown; a known host where no
    store listens is still "nothing listens there"."""
    import time

    from executor.worker import StartAbandoned, StartWait, _join_store
    from pipeplan.spawn import free_port

    port = free_port()
    start = StartWait(1.0, "the run's --collective-timeout")
    with pytest.raises(StartAbandoned) as gave_up:
        _join_store(host, port, 2, time.monotonic() + 1.0, start)
    said = str(gave_up.value)
    assert said.startswith("gave up after 1 s (the run's --collective-timeout) waiting for rank 0")
    if host == "127.0.0.1":
        assert f"at {host}:{port}: nothing listens there; start every rank within" in said
    else:
        assert f"at {host}:{port}: no host of that name is known (" in said, said
        assert said.endswith("); give every rank the same MASTER_ADDR and MASTER_PORT"), said


@pytest.mark.parametrize(
    "inside", ["summary.json", "model/e.json", "link/summary.json", "a/up/../RUN/summary.json"]
)
def test_a_torchrun_error_file_inside_the_run_directory_is_refused(
    finished_run, tmp_path, monkeypatch, inside
):
    """Found by the fifty-fifth round: TORCHELASTIC_ERROR_FILE set by hand to RUN/summary.json
    (a name the run writes later) got a failed rank's report, and export, report and resume
    then refused the run as one with a summary of no version. The entry refuses an error file
    inside the run directory (through a link too), but in its logs folder, where `pipeplan
    run` puts its ranks' reports, before anything is written there. A link's `..` is taken
    as the kernel takes it, the link first (the fifty-seventh round: `a/up/../RUN`, up a link
    to a folder beside the run, was read as a/RUN, outside)."""
    run = copy_run(finished_run, tmp_path)
    (run / "summary.json").unlink()  # as before the run ends
    (tmp_path / "link").symlink_to(run)
    (run.parent / "beside").mkdir()
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "up").symlink_to(run.parent / "beside")
    inside = inside.replace("RUN", run.name)
    path = tmp_path / inside if inside.startswith(("link", "a/")) else run / inside
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(path))
    said = f"TORCHELASTIC_ERROR_FILE={quoted(str(path))} lies inside the run directory {run}"
    _entry_refused(run, "--resume", fragment=(said,))
    assert not (run / "summary.json").exists()


def test_a_torchrun_error_file_inside_another_run_directory_is_refused(
    finished_run, tmp_path, monkeypatch
):
    """Found by the fifty-ninth round: the error file was refused only inside the run being
    trained; one in another run's folder (victim/summary.json) took a failed rank's report,
    and every command then refused the victim. Any run directory is refused, but this run's
    logs folder, before anything is written."""
    from executor import errorfile, launch
    from pipeplan.errors import BadArgumentError

    run = tmp_path / "runs" / "r"
    run.mkdir(parents=True)
    victim = copy_run(finished_run, tmp_path / "other")
    (victim / "summary.json").unlink()
    monkeypatch.setenv(errorfile.ENV, str(victim / "summary.json"))
    said = f"lies inside the run directory {victim}; point it outside every run directory"
    with pytest.raises(BadArgumentError, match=re.escape(said)):
        launch.check_error_file_outside(run)
    assert errorfile.ENV not in os.environ and not (victim / "summary.json").exists()
    monkeypatch.setenv(errorfile.ENV, str(tmp_path / "elsewhere" / "e.json"))
    launch.check_error_file_outside(run)  # outside every run: torchrun's own kind of place


@pytest.mark.parametrize("host", ["a..b", "no-such-host.invalid", "ho st"])
def test_rank_0_refuses_to_host_its_store_at_an_unknown_master_addr(host):
    """Found by the fifty-sixth round: rank 0 given a MASTER_ADDR that names no host (`a..b`,
    `ho st`) had torch's store print 51 lines of warnings and C++ frames, and wait past the
    collective timeout (a joining rank's `a..b` was a UnicodeError traceback, above). Rank 0
    hosts the store at that name: one that does not resolve is said at once."""
    from executor.worker import StartAbandoned, _host_store
    from pipeplan.spawn import free_port

    with pytest.raises(StartAbandoned) as refused:
        _host_store(host, free_port(), 2)
    assert str(refused.value).startswith(f"MASTER_ADDR={host}: no host of that name is known (")
    assert str(refused.value).endswith(
        "rank 0 hosts the ranks' store there: give the address of its node"
    )


def test_data_json_naming_other_data_than_the_trained_run_s_is_blamed_on_data_json(
    finished_run, tmp_path
):
    """Found by the fifty-seventh round: data.json's `data` edited ("digits" where the run
    trained on filedata:load) was refused as "run.json: data 'filedata:load' is not the data
    the run started with …; restore it": run.json, which its checkpoint vouches for, blamed,
    and the user sent to edit the good file. Where the checkpoint's run.json agrees with
    run.json, data.json is named as the edited one."""
    from executor.task import check_data
    from pipeplan.errors import InputFileError
    from pipeplan.formats import DataRecord, RunConfig, dumps, load

    run = copy_run(finished_run, tmp_path)
    cfg = load(RunConfig, run / "run.json")
    (run / "data.json").write_text(dumps(DataRecord(data="filedata:load", files=[])))
    with pytest.raises(InputFileError) as refused:
        check_data(run, cfg)
    assert str(refused.value) == (
        f"{run / 'data.json'}: data 'filedata:load', but the run trained on '{cfg.data}' "
        "(run.json and its checkpoint say so); data.json was edited since: restore data.json "
        "or start a new run"
    )


@pytest.mark.timeout(120)
def test_rank_0_hosts_its_store_at_once_where_master_addr_is_not_its_node_s():
    """Found by the fifty-seventh round: a MASTER_ADDR that resolves, but to an address that is
    not rank 0's node (a typo naming another host, here a documentation address), had torch's
    store wait 60 s for its own client and print some 60 lines of C++ frames, then the line
    blamed MASTER_PORT. The store listens on every address of the node, and its own client
    connects over the loopback: hosted at once."""
    import time

    from executor.worker import _host_store
    from pipeplan.spawn import free_port

    started = time.monotonic()
    store = _host_store("203.0.113.7", free_port(), 1)
    store.set("k", "v")
    assert store.get("k") == b"v"
    assert time.monotonic() - started < 20


@pytest.mark.parametrize(
    "how", ["a file", "no parent", "too deep", "its checkpoints", "another run's logs"]
)
def test_torchrun_s_entry_refuses_a_log_dir_it_cannot_use_naming_the_flag(
    finished_run, tmp_path, how
):
    """Found by the fifty-seventh round: torchrun's entry given a --log-dir that is a file,
    whose parent is missing, or whose files' paths pass PATH_MAX, failed the rank (exit 1) as a
    log it could not open, the line naming no flag. Refused before anything starts: exit 2,
    one line naming --log-dir."""
    run = copy_run(finished_run, tmp_path)
    if how == "a file":
        (tmp_path / "ld").write_text("")
        given, said = str(tmp_path / "ld"), "not a directory"
    elif how == "no parent":
        given, said = str(tmp_path / "none" / "ld"), "does not exist"
    elif how == "its checkpoints":  # the fifty-eighth round: the run "started already" for good
        given, said = str(run / "checkpoints"), "which `pipeplan run` keeps"
    elif how == "another run's logs":
        other = copy_run(finished_run, tmp_path / "o")
        given, said = str(other / "logs"), "which `pipeplan run` keeps"
    else:
        room = 4096 - 30 - len(os.fsencode(str(tmp_path))) - 1
        given = str(tmp_path / ("a/" * (room // 2 - 1) + "z" * (room % 2 + 2)))
        said = "path too long"
    _entry_refused(run, "--resume", "--log-dir", given, fragment=("--log-dir ", said))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("command", ["report", "export"])
def test_an_older_checkpoint_whose_files_disagree_with_its_sizes_is_refused(
    two_kept_run, tmp_path, capsys, command
):
    """Found by the fifty-seventh round: an older kept checkpoint whose manifest records
    12 bytes for its 6 MB model.pt (the run's one fallback, broken) passed report, calibrate
    and export at exit 0, where the newest is refused so. The older ones' files are held to
    their sizes too (a stat each: nothing is hashed)."""
    run = copy_run(two_kept_run, tmp_path)
    manifest = run / "checkpoints" / "step-4" / "manifest.json"
    doc = json.loads(manifest.read_text())
    real = doc["sizes"]["model.pt"]
    doc["sizes"]["model.pt"] = 12
    manifest.write_text(json.dumps(doc))
    said = (f"{manifest.parent / 'model.pt'}: {real:,} bytes, but the manifest records 12",)
    refused(_two_kept_commands(run, tmp_path)[command], tmp_path, capsys, said)


def test_rank_0_whose_master_addr_is_another_nodes_says_so():
    """Found by the fifty-eighth round: rank 0 hosts the store on every address of its node,
    and where MASTER_ADDR named another node's (the others looking there), its line said it
    waited "at 192.0.2.1" for ranks that "never did" arrive, as if they had not started. The
    line says MASTER_ADDR is no address of this node; of its own address it says nothing."""
    from executor import worker

    class Nobody:  # a store no other rank reached
        def check(self, keys):
            return False

        def add(self, key, amount):
            return 1

    assert worker._not_this_node("127.0.0.1") == ""
    hint = worker._not_this_node("192.0.2.1")  # TEST-NET-1: no host's
    start = worker.StartWait(0, "the run's --collective-timeout")
    with pytest.raises(worker.StartAbandoned) as ended:
        worker._await_all(Nobody(), "p", 2, 0.0, start, "192.0.2.1:29731", hint)
    assert str(ended.value).endswith(
        "start every rank within that time, and MASTER_ADDR=192.0.2.1, where the others look "
        "for rank 0, is no address of this node: give every rank rank 0's node's"
    ), str(ended.value)


def test_a_torchrun_error_file_given_to_the_agent_inside_the_run_is_refused(tmp_path, monkeypatch):
    """Found by the fifty-eighth round: torch's agent gives each rank its own
    TORCHELASTIC_ERROR_FILE and keeps the one given to torchrun for itself, copying a failed
    rank's report there: RUN/run.json became torch's error report. The rank reads the
    agent's value from the agent's environment (`_agent_variable`), refuses one inside the
    run, and unsets its own, so that no report is written for the agent to copy."""
    from executor import errorfile, launch
    from pipeplan.errors import BadArgumentError

    run = tmp_path / "runs" / "r"
    run.mkdir(parents=True)
    mine = tmp_path / "agent-tmp" / "error.json"
    monkeypatch.setenv(errorfile.ENV, str(mine))  # the agent's, for this rank
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "none")
    monkeypatch.setattr(launch, "_agent_variable", lambda name: str(run / "run.json"))
    with pytest.raises(BadArgumentError, match="given to torchrun lies inside the run directory"):
        launch.check_error_file_outside(run)
    assert errorfile.ENV not in os.environ
    monkeypatch.setenv(errorfile.ENV, str(mine))
    monkeypatch.setattr(launch, "_agent_variable", lambda name: str(run / "logs" / "e.json"))
    launch.check_error_file_outside(run)  # its logs folder: pipeplan run's own place
    # What a child reads of its parent's environment (the agent's, under torchrun).
    read = "import sys; from executor.launch import _agent_variable as a; print(a('RT58_X'))"
    child = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {read!r}])"
    env = {**os.environ, "RT58_X": "given", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", child], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.stdout.strip() == "given", done.stderr


RANKS_REFUSE = """
import os
from executor.data import load_data
from pipeplan import models

def load(seed=0):
    if "RANK" in os.environ:  # the rank's load, not the launcher's
        raise RuntimeError("the ranks' data is gone")
    return load_data("digits", models.build("vit-digits"), seed=seed)
"""


@pytest.mark.multiprocess
@pytest.mark.timeout(180)
def test_a_torchrun_rank_given_a_log_dir_says_its_failure_on_the_console(tmp_path, capsys):
    """Found by the fifty-eighth round: torchrun's rank given `--log-dir` by hand wrote its
    failure's line into its log only (the console had none: exit 1 and torch's summary),
    as if `pipeplan run`, which passes one too and says the line itself, had started it.
    Only `pipeplan run`'s rank leaves the line to its launcher."""
    from pipeplan.fileio import release_directory
    from pipeplan.spawn import free_port

    (tmp_path / "rt58_refuse.py").write_text(RANKS_REFUSE)
    argv = ["run", "--model", "vit-digits", "--nproc", "1", "--epochs", "1", "--name", "g"]
    argv += ["--data", str(tmp_path / "rt58_refuse.py") + ":load", "--prepare-only"]
    assert cli.main([*argv, "--runs-dir", str(tmp_path / "runs")]) == 0, capsys.readouterr()
    capsys.readouterr()
    run = tmp_path / "runs" / "g"
    release_directory(run)  # prepared in this process, which holds its lock: the rank takes it
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHELASTIC_")}
    env.pop("PIPEPLAN_LAUNCHER_PID", None)
    env = {**env, **RANK_ENV, "MASTER_PORT": str(free_port()), "PYTHONPATH": str(ROOT)}
    logs = tmp_path / "mylogs"
    command = [sys.executable, "-m", "executor.launch", str(run), "--log-dir", str(logs)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=150)
    lines = done.stderr.splitlines()
    assert done.returncode != 0 and len(lines) == 1, done.stderr[-3000:]
    assert lines[0].startswith("pipeplan: error: rank 0: ") and "data is gone" in lines[0]
    assert "the ranks' data is gone" in (logs / "rank-0.log").read_text()


# A text run that left --task, --seq-len and --dropout to its model (null in run.json), as
# MID_EPOCH: `_interrupted` leaves a copy with its last step to train, resumed without flags.
TEXT_MID_EPOCH = ["--model", "bert-synth", *MID_EPOCH]
# (the flag, the value bert-synth's run took: its profile's input and task, its config's
# dropouts, classifier_dropout null dropping as the hidden ones do; another value)
OWN_SETTINGS = {
    "--task": ("classification", "causal-lm"),
    "--seq-len": ("32", "16"),
    "--dropout": ("0.1", "0.2"),
}


@pytest.fixture(scope="module")
def text_mid_epoch_run(tmp_path_factory) -> Path:
    """bert-synth on its synth-text, TEXT_MID_EPOCH: checkpoints step-2 and step-3."""
    root = tmp_path_factory.mktemp("text-mid")
    assert cli.main(["run", *TEXT_MID_EPOCH, "--name", "m", "--runs-dir", str(root)]) == 0
    return root / "m"


@pytest.mark.multiprocess
@pytest.mark.timeout(180)
@pytest.mark.parametrize("flag", OWN_SETTINGS)
def test_resume_takes_a_flag_the_run_left_out_given_as_the_run_took_it(
    text_mid_epoch_run, tmp_path, capsys, flag
):
    """Found by an independent round: `run --resume R --task classification` (or --seq-len
    32, --dropout 0.1), the value the run took where it left the flag out, was refused as a
    change ("--task left out in its run.json"): run.json holds null for the model's own. That
    value is no change: the run trains on, and run.json keeps its null."""
    run = _interrupted(text_mid_epoch_run, tmp_path)
    saved = (run / "run.json").read_bytes()
    assert json.loads(saved)[flag[2:].replace("-", "_")] is None
    capsys.readouterr()
    argv = ["run", "--resume", str(run), flag, OWN_SETTINGS[flag][0]]
    assert cli.main(argv) == 0, capsys.readouterr().err
    assert (run / "run.json").read_bytes() == saved
    assert [r["epoch"] for r in _lines(run) if r["kind"] == "epoch"] == [0]
    assert (run / "checkpoints" / "step-3").is_dir()


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
@pytest.mark.parametrize("flag", OWN_SETTINGS)
def test_resume_refuses_another_value_of_a_flag_the_run_left_out(
    text_mid_epoch_run, tmp_path, capsys, flag
):
    """Another value than the run took is still a change, refused in one line that names the
    value the run took ("left out" alone named none), nothing written."""
    run = _interrupted(text_mid_epoch_run, tmp_path)
    took, other = OWN_SETTINGS[flag]
    said = f"({flag} left out in its run.json: the model's own, {took}) and cannot change {flag}"
    refused(["run", "--resume", str(run), flag, other], tmp_path, capsys, said)


@pytest.mark.multiprocess
@pytest.mark.timeout(180)
def test_an_image_runs_own_dropout_resumes_and_a_seq_len_is_a_change(
    finished_run, tmp_path, capsys
):
    """vit-digits took dropout 0 from its config (transformers' ViT default): --dropout 0
    given to its resume is no change. An image model has no sequence length: any --seq-len
    is one, the line saying the run had none."""
    run = copy_run(finished_run, tmp_path)
    said = "(--seq-len left out in its run.json: the model's own, none for an image model)"
    argv = ["run", "--resume", str(run), "--epochs", "2"]
    refused([*argv, "--seq-len", "8"], tmp_path, capsys, said)
    assert cli.main([*argv, "--dropout", "0"]) == 0, capsys.readouterr().err
    assert json.loads((run / "run.json").read_text())["dropout"] is None
    assert [r["epoch"] for r in _lines(run) if r["kind"] == "epoch"] == [0, 1]


def test_a_dropout_the_models_keys_differ_in_is_changed_by_any_value(tmp_path):
    """DistilBERT drops 0.1 in its layers and 0.2 in its head unless its config says
    otherwise: a run that left --dropout out took both, and any --dropout (which sets every
    key alike) is a change, the line naming each key. Keys that agree take their value as
    the run's own; the folder's config.json edited since the run is its own refusal."""
    from executor.launch import resumed_config
    from executor.planning import model_config_sha256
    from pipeplan.formats import RunConfig
    from pipeplan.options import build

    folder = tmp_path / "distil"
    folder.mkdir()
    config = {"model_type": "distilbert", "vocab_size": 64, "dim": 32, "n_layers": 1}
    config.update(n_heads=2, hidden_dim=64, max_position_embeddings=64)
    (folder / "config.json").write_text(json.dumps(config))
    saved = build(RunConfig, {"model": str(folder), "init": "random", "data": "synth-text"})
    saved = saved.model_copy(update={"model_config_sha256": model_config_sha256(str(folder))})
    for given in (0.1, 0.2):
        with pytest.raises(BadArgumentError) as refusal:
            resumed_config(saved, {"dropout": given}, tmp_path)
        own = "dropout 0.1, attention_dropout 0.1, seq_classif_dropout 0.2"
        said = f"(--dropout left out in its run.json: the model's own, {own})"
        assert said in str(refusal.value)
    config.update(dropout=0.2, attention_dropout=0.2, seq_classif_dropout=0.2)
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(InputFileError, match=r"config\.json: edited since the run started"):
        resumed_config(saved, {"dropout": 0.2}, tmp_path)
    saved = saved.model_copy(update={"model_config_sha256": model_config_sha256(str(folder))})
    more = {"dropout": 0.2, "epochs": saved.epochs + 1}
    assert resumed_config(saved, more, tmp_path).dropout is None


@pytest.mark.multiprocess
@pytest.mark.timeout(180)
def test_a_model_folder_that_cannot_be_replaced_is_said_as_that(finished_run, tmp_path, capsys):
    """Found by the seventy-ninth round: a resume whose run's model/ folder could not be
    removed (immutable, `chattr +i`) was said to have met a folder "made or changed by another
    process while this export ran". Its own cause is named; the folder is as it was."""
    run = copy_run(finished_run, tmp_path)
    model = run / "model"
    before = {p.name: p.read_bytes() for p in model.iterdir()}
    if subprocess.run(["chattr", "+i", str(model)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not allowed here")
    try:
        assert cli.main(["run", "--resume", str(run), "--epochs", "2"]) == 2
    finally:
        subprocess.run(["chattr", "-i", str(model)], check=True)
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[-1].startswith("pipeplan: error: "), lines[-1]
    said = f"{model}: write failed (the model the run wrote before could not be replaced: "
    assert said + "Operation not permitted)" in lines[-1], lines[-1]
    assert "another process" not in lines[-1]
    assert {p.name: p.read_bytes() for p in model.iterdir()} == before


@pytest.mark.multiprocess
@pytest.mark.timeout(180)
def test_a_model_file_that_cannot_be_removed_leaves_no_half_model(finished_run, tmp_path, capfd):
    """Found by the eighty-first round: a file of the run's model/ made immutable (`chattr +i
    model/config.json`), a resume removed the rest of the folder before it failed, and model/
    held config.json alone, no model. The model before is moved aside first: the resume's
    model takes its place whole, and what cannot be removed of the one before stays aside,
    said in one warning."""
    run = copy_run(finished_run, tmp_path)
    model = run / "model"
    stuck = model / "config.json"
    if subprocess.run(["chattr", "+i", str(stuck)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not allowed here")
    try:
        assert cli.main(["run", "--resume", str(run), "--epochs", "2"]) == 0
        aside = [p for p in run.iterdir() if p.name.endswith("-replaced")]
        assert len(aside) == 1 and (aside[0] / "config.json").exists()
    finally:
        for path in run.rglob("config.json"):
            subprocess.run(["chattr", "-i", str(path)], capture_output=True)
    said = capfd.readouterr().err  # rank 0's warning, on the command's console
    assert f"{model}: the model the run wrote before was replaced, but not all of it" in said
    assert f"what is left is in {aside[0]}" in said
    assert (model / "model.safetensors").exists() and (model / "config.json").exists()
    from transformers import AutoConfig

    assert AutoConfig.from_pretrained(model) is not None
