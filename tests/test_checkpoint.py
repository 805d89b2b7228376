"""Checkpoints: a run killed mid-step and resumed ends exactly where the uninterrupted run
ends; resuming on another world size re-plans and finishes."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from pipeplan.formats import STEP_RECORDS, read_records

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
    code = "import cli; cli.entry()"
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=200,
    )


def pipeplan_here(monkeypatch, capsys, *args: str, kill_after: int | None = None):
    """`pipeplan` in this process (its ranks are processes of their own, which read
    PIPEPLAN_TEST_KILL_AFTER): (exit code, stderr). No interpreter to start per command."""
    monkeypatch.chdir(ROOT)  # the ranks import tests.killer_data from here
    monkeypatch.delenv("PIPEPLAN_TEST_KILL_AFTER", raising=False)
    if kill_after:
        monkeypatch.setenv("PIPEPLAN_TEST_KILL_AFTER", str(kill_after))
    import cli

    capsys.readouterr()
    code = cli.main(list(args))
    return code, capsys.readouterr().err


def final_model(run_dir: Path) -> dict[str, torch.Tensor]:
    pointer = (run_dir / "checkpoints" / "latest").read_text().strip()
    assert pointer == "step-12"
    return torch.load(run_dir / "checkpoints" / pointer / "model.pt", weights_only=True)


# In `-m long` for the suite's time (77 s on a slow machine): tests/test_hostile_resume.py's
# killed-after-a-checkpoint run resumes as uninterrupted in the default run.
@pytest.mark.long
@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_killed_and_resumed_run_equals_the_uninterrupted_one(tmp_path, monkeypatch, capsys):
    def run(*args: str, kill_after: int | None = None):
        return pipeplan_here(monkeypatch, capsys, *args, kill_after=kill_after)

    # Dropout on: bit-for-bit equality needs every rank's random stream restored too.
    runs = ["--runs-dir", str(tmp_path), "--dropout", "0.1"]
    assert run("run", *COMMON, *runs, "--name", "full")[0] == 0
    code, err = run("run", *COMMON, *runs, "--name", "cut", kill_after=300)
    assert code != 0 and "rank 1" in err.splitlines()[-1]
    checkpoints = sorted(p.name for p in (tmp_path / "cut" / "checkpoints").glob("step-*"))
    assert checkpoints and "step-12" not in checkpoints  # it died before the end
    # A resume that changes the configuration and fails before its first checkpoint leaves
    # run.json as it was (it used to say 3 epochs from then on, and a plain resume was refused).
    saved = (tmp_path / "cut" / "run.json").read_bytes()
    code, err = run("run", "--resume", str(tmp_path / "cut"), "--epochs", "3", kill_after=1)
    assert code != 0 and "rank 1" in err.splitlines()[-1]
    assert (tmp_path / "cut" / "run.json").read_bytes() == saved
    assert not (tmp_path / "cut" / "run.resume.json").exists()
    code, err = run("run", "--resume", str(tmp_path / "cut"))
    assert code == 0, err
    full, cut = final_model(tmp_path / "full"), final_model(tmp_path / "cut")
    assert full.keys() == cut.keys()
    assert all(torch.equal(full[k], cut[k]) for k in full)
    steps = [
        r.step for r in read_records(tmp_path / "cut" / "run.jsonl") if isinstance(r, STEP_RECORDS)
    ]
    assert steps == list(range(12))  # records after the checkpoint were rewritten, not doubled


# In `-m long`, for the suite's time: tests/test_hostile_resume.py's epoch-end runs
# (`boundary_run`) write and resume such a checkpoint under --freeze auto.
@pytest.mark.long
@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_a_checkpoint_due_on_an_epochs_last_step_is_written(tmp_path):
    """Found by the twenty-second round: `--checkpoint-every N` skipped every checkpoint that
    fell on an epoch's last step (the epoch's end wrote one only when the freeze point moved):
    with N = the steps per epoch no periodic checkpoint was ever written. Now it is written
    after the epoch's record, and resumes at the next epoch's first step."""
    import cli

    args = ["--nproc", "1", "--epochs", "2", "--max-steps-per-epoch", "2", "--freeze", "none"]
    args += ["--checkpoint-every", "2", "--runs-dir", str(tmp_path), "--name", "e"]
    assert cli.main(["run", *args]) == 0
    kept = sorted(p.name for p in (tmp_path / "e" / "checkpoints").glob("step-*"))
    assert kept == ["step-2", "step-4"]  # epoch 0's end (none before the fix), and the final
    manifest = json.loads((tmp_path / "e" / "checkpoints" / "step-2" / "manifest.json").read_text())
    assert (manifest["epoch"], manifest["step_in_epoch"]) == (1, 0)


@pytest.mark.long
@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_resume_on_another_world_size(tmp_path):
    """Killed on 2 ranks, resumed on 1 (re-planned as 1x1): training semantics do not depend
    on the layout, so it ends where the uninterrupted 2-rank run ends, up to the order of
    float sums (no dropout: another world size draws other random streams)."""
    runs = ["--runs-dir", str(tmp_path), "--dropout", "0"]
    assert pipeplan("run", *COMMON, *runs, "--name", "full").returncode == 0
    killed = pipeplan("run", *COMMON, *runs, "--name", "cut", kill_after=300)
    assert killed.returncode != 0
    checkpoints = tmp_path / "cut" / "checkpoints"
    pointer = (checkpoints / "latest").read_text().strip()
    before = torch.load(checkpoints / pointer / "model.pt", weights_only=True)
    resumed = pipeplan("run", "--resume", str(tmp_path / "cut"), "--nproc", "1")
    assert resumed.returncode == 0, resumed.stderr
    full, cut = final_model(tmp_path / "full"), final_model(tmp_path / "cut")
    assert full.keys() == cut.keys() == before.keys()
    a, b, start = (
        torch.cat([m[k].flatten().double() for k in sorted(full)]) for m in (full, cut, before)
    )
    # The steps after the checkpoint moved the parameters (so equality below means something).
    assert float((a - start).norm()) > 1e-3 * float(a.norm())
    # Observed relative error 1.2e-8 (float sums in another order); 1e-6 is a wide margin
    # that the training after the checkpoint (over 1e-3, asserted above) cannot hide in.
    assert float((a - b).norm()) <= 1e-6 * float(a.norm())


def test_resume_without_a_checkpoint_is_one_line(tmp_path, capsys):
    import cli

    assert cli.main(["run", "--resume", str(tmp_path)]) == 2
    assert f"{tmp_path}: not a run directory (no run.json)" in capsys.readouterr().err


def test_a_failed_write_is_a_clear_error_and_keeps_the_previous_checkpoint(
    tmp_path, single_rank_group
):
    from executor import checkpoint
    from executor.checkpoint import _gather_layout
    from pipeplan import models
    from pipeplan.errors import OutputError

    seq = models.build("bert-synth")
    spec = _gather_layout(0, len(seq.layers))

    checkpoint.save(tmp_path, seq.layers, spec, _adamw_states(seq.layers, 4.0), _manifest(4))
    before = (tmp_path / "checkpoints" / "step-4" / "model.pt").read_bytes()
    # The next write cannot create its temporary directory: a file is in the way.
    (tmp_path / "checkpoints" / ".tmp-step-8").write_text("in the way")
    with pytest.raises(OutputError, match="cannot write checkpoint") as err:
        checkpoint.save(tmp_path, seq.layers, spec, _adamw_states(seq.layers, 8.0), _manifest(8))
    assert "\n" not in str(err.value)
    assert (tmp_path / "checkpoints" / "latest").read_text().strip() == "step-4"
    assert (tmp_path / "checkpoints" / "step-4" / "model.pt").read_bytes() == before
    m, model, _, _ = checkpoint.load_checkpoint(checkpoint.latest(tmp_path))
    assert m.step == 4 and len(model) == len(list(seq.layers.parameters()))


def _manifest(step: int):
    from executor import checkpoint

    return checkpoint.CheckpointManifest(
        step=step,
        epoch=0,
        step_in_epoch=step,
        phase=0,
        frozen_layers=0,
        grad_history=[],
        # Every step of the epoch summed, as the run writes a mid-epoch checkpoint.
        grad_norm_sums={"0": 1.0} if step else {},
        grad_norm_steps=step,
        world_size=1,
        model="bert-synth",
        config=checkpoint.RunConfig(name="t", model="bert-synth", nproc=1),
    )


@pytest.mark.parametrize("sum_, steps, kept", [(4 * 3.4e38, 4, True), (1.5e308, 4, False)])
def test_gradient_norm_sums_past_float32s_norms_are_refused(sum_, steps, kept):
    """Found by the fifty-eighth round: a manifest's grad_norm_sums of 1.5e308 each resumed,
    went into the epoch's record and --freeze auto decided by them. A norm computed in
    float32 is at most its largest finite value: a sum of `grad_norm_steps` of them is held
    to that many times it; an epoch record's mean norm to it."""
    from pydantic import ValidationError

    from pipeplan.formats import EpochRecord

    doc = _manifest(steps).model_dump(mode="json") | {"grad_norm_sums": {"0": sum_}}
    manifest = type(_manifest(steps))
    if kept:
        assert manifest.model_validate(doc).grad_norm_sums == {"0": sum_}
        return
    with pytest.raises(ValidationError, match=r"grad_norm_sums\[0\] is 1\.5e\+308"):
        manifest.model_validate(doc)
    from test_report import elastic_records

    epoch = next(r for r in elastic_records() if isinstance(r, EpochRecord))
    with pytest.raises(ValidationError, match=r"1e\+39 is past float32's largest value"):
        EpochRecord.model_validate(epoch.model_dump(mode="json") | {"grad_norms": {"0": 1e39}})


def test_a_full_disk_during_torch_save_leaves_nothing_behind(
    tmp_path, single_rank_group, monkeypatch
):
    """torch.save reports ENOSPC as a RuntimeError from its zip writer, after writing part of
    the file: the partial directory goes, the message says so in one line, resume still works."""
    from executor import checkpoint
    from pipeplan import models
    from pipeplan.errors import OutputError

    seq = models.build("bert-synth")
    layout = checkpoint._gather_layout(0, len(seq.layers))
    checkpoint.save(tmp_path, seq.layers, layout, _adamw_states(seq.layers, 4.0), _manifest(4))
    real_save = torch.save

    def full_disk(obj, path, **kwargs):
        if not isinstance(path, str | Path):  # collectives serialise through torch.save too
            return real_save(obj, path, **kwargs)
        Path(path).write_bytes(b"\0" * 4096)  # what got written before the disk filled
        raise RuntimeError("[enforce fail at inline_container.cc:603] . unexpected pos 4096")

    monkeypatch.setattr(torch, "save", full_disk)
    with pytest.raises(OutputError, match="cannot write checkpoint") as err:
        checkpoint.save(tmp_path, seq.layers, layout, _adamw_states(seq.layers, 8.0), _manifest(8))
    monkeypatch.setattr(torch, "save", real_save)
    assert "\n" not in str(err.value) and "MiB free" in str(err.value)
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["latest", "step-4"]
    assert checkpoint.load_latest(tmp_path)[0].step == 4


def test_a_failed_checkpoint_names_its_step_and_the_step_kept(
    tmp_path, single_rank_group, monkeypatch
):
    """Found by the fifteenth round: "cannot write checkpoint (…); the previous checkpoint is
    kept (at step 4)" read as if step 4 were kept; step-2 was. The line names the checkpoint
    that failed and the one kept, and torch's zip-writer error on a nearly full disk is
    worded as the full disk it is."""
    from executor import checkpoint
    from pipeplan import models
    from pipeplan.errors import OutputError

    seq = models.build("bert-synth")
    layout = checkpoint._gather_layout(0, len(seq.layers))
    checkpoint.save(tmp_path, seq.layers, layout, _adamw_states(seq.layers, 2.0), _manifest(2))
    real_save = torch.save

    def full_disk(obj, path, **kwargs):
        if not isinstance(path, str | Path):  # collectives serialise through torch.save too
            return real_save(obj, path, **kwargs)
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 576 vs 534")

    monkeypatch.setattr(torch, "save", full_disk)
    full = shutil._ntuple_diskusage(total=1 << 30, used=(1 << 30) - 4096, free=4096)
    monkeypatch.setattr(shutil, "disk_usage", lambda path: full)  # what a full disk leaves
    with pytest.raises(OutputError) as err:
        checkpoint.save(tmp_path, seq.layers, layout, _adamw_states(seq.layers, 4.0), _manifest(4))
    assert str(err.value).startswith(
        f"{tmp_path / 'checkpoints' / 'step-4'}: cannot write checkpoint step-4 "
        "(No space left on device; "
    )
    assert str(err.value).endswith("; the last checkpoint written, step-2, is kept")
    # The forty-seventh round: `latest` made a folder beside kept steps said "no earlier
    # checkpoint is kept" and "resume with" in one line; what a resume needs is said.
    (tmp_path / "checkpoints" / "latest").unlink()
    (tmp_path / "checkpoints" / "latest").mkdir()
    with pytest.raises(OutputError) as err:
        checkpoint.save(tmp_path, seq.layers, layout, _adamw_states(seq.layers, 4.0), _manifest(4))
    latest = tmp_path / "checkpoints" / "latest"
    assert str(err.value).endswith(f"; {latest} names no checkpoint kept, which a resume needs")
    shutil.rmtree(tmp_path / "checkpoints")
    with pytest.raises(OutputError, match=r"; no earlier checkpoint is kept$"):
        checkpoint.save(tmp_path, seq.layers, layout, _adamw_states(seq.layers, 4.0), _manifest(4))


UNDER_A_SIZE_LIMIT = """
import resource, sys
from pathlib import Path
import torch
sys.path.insert(0, sys.argv[2])
from test_checkpoint import _manifest
from executor import checkpoint
from pipeplan.errors import OutputError
limit = int(sys.argv[3])
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
try:
    checkpoint._write(Path(sys.argv[1]), {"model.pt": {"w": torch.zeros(1 << 16)}}, _manifest(3))
except OutputError as exc:
    print(exc)
"""


@pytest.mark.parametrize("short", [None, 40])
def test_a_checkpoint_past_the_file_size_limit_names_the_limit(tmp_path, short):
    """Found by the forty-first round: under `ulimit -f 3000` a checkpoint's line quoted
    torch's "[enforce fail at inline_container.cc:672] . unexpected pos …" and the MiB free
    on its disk, never "File too large" (export and calibrate said it). Python ignores
    SIGXFSZ, so the write fails with EFBIG and torch's writer leaves its file at the limit:
    the line names the limit and its size, and no partial folder is left. The fifty-fifth
    round: a limit met as the archive closes (`short` bytes under the file's size) failed in
    the C++ stream under torch's writer, "basic_ios::clear: iostream error", and the line
    named the free disk."""
    limit = 1 << 16
    if short is not None:
        torch.save({"w": torch.zeros(1 << 16)}, tmp_path / "whole.pt")
        limit = (tmp_path / "whole.pt").stat().st_size - short
        (tmp_path / "whole.pt").unlink()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    here = str(Path(__file__).parent)
    code = [sys.executable, "-c", UNDER_A_SIZE_LIMIT, str(tmp_path), here, str(limit)]
    done = subprocess.run(code, capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    said = done.stdout.strip()
    assert said == (
        f"{tmp_path / 'checkpoints' / 'step-3'}: cannot write checkpoint step-3 (File too "
        f"large: the file size limit, ulimit -f, is {limit} bytes); no earlier checkpoint is kept"
    ), said
    assert list((tmp_path / "checkpoints").iterdir()) == []


def test_a_write_refused_with_efbig_names_the_limit(monkeypatch):
    """Found by the forty-first round (the class of the checkpoint's line): a Python write
    stopped by the file size limit (EFBIG: export, calibrate, records) names the limit too."""
    import errno

    from pipeplan import fileio

    monkeypatch.setattr(fileio, "size_limit", lambda: 3072000)
    said = fileio.write_failure(OSError(errno.EFBIG, os.strerror(errno.EFBIG)), ".")
    assert said == "File too large: the file size limit, ulimit -f, is 3072000 bytes"
    monkeypatch.setattr(fileio, "size_limit", lambda: None)
    assert fileio.write_failure(OSError(errno.EFBIG, os.strerror(errno.EFBIG)), ".") == (
        "File too large"
    )


def test_ctrl_c_during_a_checkpoint_leaves_no_partial_folder(
    tmp_path, single_rank_group, monkeypatch
):
    """Found by the fifteenth round (the class of its full-disk export): the checkpoint's
    cleanup caught Exception, so Ctrl-C during torch.save left `.tmp-step-N/` behind. It goes
    whatever stops the write; the interrupt itself goes on."""
    from executor import checkpoint
    from pipeplan import models

    seq = models.build("bert-synth")
    layout = checkpoint._gather_layout(0, len(seq.layers))
    checkpoint.save(tmp_path, seq.layers, layout, _adamw_states(seq.layers, 2.0), _manifest(2))
    real_save = torch.save

    def interrupted(obj, path, **kwargs):
        if not isinstance(path, str | Path):
            return real_save(obj, path, **kwargs)
        Path(path).write_bytes(b"\0" * 4096)
        raise KeyboardInterrupt

    monkeypatch.setattr(torch, "save", interrupted)
    with pytest.raises(KeyboardInterrupt):
        checkpoint.save(tmp_path, seq.layers, layout, _adamw_states(seq.layers, 4.0), _manifest(4))
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["latest", "step-2"]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_or_sighup_during_a_checkpoint_leaves_no_partial_folder(
    tmp_path, single_rank_group, monkeypatch, signum
):
    """Found by the twenty-fifth round: SIGTERM or SIGHUP (to `pipeplan run`, forwarded to
    its ranks; to rank 0 alone; torchrun's agent's) while rank 0 wrote a checkpoint killed it
    at once and left `checkpoints/.tmp-step-N/` (model.pt, optimizer.pt: GBs for a real
    model), where Ctrl-C removed it. The write now takes them as Ctrl-C: the folder goes and
    the rank stops with Stopped (`pipeplan: stopped by SIGTERM`)."""
    from executor import checkpoint
    from pipeplan import models
    from pipeplan.errors import Stopped

    seq = models.build("bert-synth")
    layout = checkpoint._gather_layout(0, len(seq.layers))
    checkpoint.save(tmp_path, seq.layers, layout, _adamw_states(seq.layers, 2.0), _manifest(2))
    real_save = torch.save

    def stopped(obj, path, **kwargs):
        real_save(obj, path, **kwargs)
        if not isinstance(path, str | Path):  # collectives serialise through torch.save too
            return
        if signal.getsignal(signum) is not signal.SIG_DFL:
            os.kill(os.getpid(), signum)  # handled: raised here, at the next bytecode
        # Unhandled, the signal would kill this test's process: said instead.
        raise RuntimeError(f"{signal.Signals(signum).name} would kill the rank here")

    monkeypatch.setattr(torch, "save", stopped)
    with pytest.raises(Stopped) as err:
        checkpoint.save(tmp_path, seq.layers, layout, _adamw_states(seq.layers, 4.0), _manifest(4))
    assert err.value.signum == signum
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["latest", "step-2"]
    assert signal.getsignal(signum) is signal.SIG_DFL  # killing at once again after the write


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_as_the_checkpoint_is_renamed_into_place_still_points_latest_at_it(
    tmp_path, single_rank_group, monkeypatch, signum
):
    """Found by the forty-sixth round: a stop landing between the checkpoint's folder renamed
    into place and `latest` pointed at it (1 of 5 tries of SIGRTMIN+3 at the fifth step) left
    `step-5/` complete and no `latest`, and the resume was refused until `latest` was written
    by hand. The two are one step now (`fileio.stops_deferred`): the stop acts once `latest`
    names the new checkpoint."""
    from executor import checkpoint
    from pipeplan import models
    from pipeplan.errors import Stopped

    seq = models.build("bert-synth")
    layout = checkpoint._gather_layout(0, len(seq.layers))
    checkpoint.save(tmp_path, seq.layers, layout, _adamw_states(seq.layers, 2.0), _manifest(2))
    real_replace = os.replace

    def stopped(src, dst, *args, **kwargs):
        real_replace(src, dst, *args, **kwargs)
        if Path(dst).name == "step-4":
            os.kill(os.getpid(), signum)  # handled: at the next bytecode, unless held

    monkeypatch.setattr(checkpoint.os, "replace", stopped)
    with pytest.raises(KeyboardInterrupt if signum == signal.SIGINT else Stopped):
        checkpoint.save(tmp_path, seq.layers, layout, _adamw_states(seq.layers, 4.0), _manifest(4))
    root = tmp_path / "checkpoints"
    assert (root / "latest").read_text() == "step-4\n"
    assert checkpoint.load_latest(tmp_path, notice=False)[0].step == 4


def test_a_second_stop_does_not_cut_the_clean_up_short():
    """Found by the twenty-fifth round (with the checkpoint's stop above): once a stop has
    landed in a write, later ones (the agent's SIGTERM after the command's, a second Ctrl-C)
    are ignored until the write's clean-up is done; then each signal is as it was before."""
    from pipeplan.errors import Stopped
    from pipeplan.fileio import STOPS, stops_raised

    before = {signum: signal.getsignal(signum) for signum in STOPS}
    cleaned = []
    with pytest.raises(Stopped), stops_raised():
        try:
            os.kill(os.getpid(), signal.SIGHUP)
            time.sleep(5)  # cut short by the handler
        except BaseException:
            for signum in STOPS:  # each would end the clean-up, or the test's process
                os.kill(os.getpid(), signum)
            cleaned.append(True)
            raise
    assert cleaned == [True]
    assert {signum: signal.getsignal(signum) for signum in STOPS} == before


def test_remove_partial_takes_only_what_an_unfinished_write_left(tmp_path):
    """Found by the twenty-fifth round: SIGKILL of rank 0 in a checkpoint write (and under
    torchrun its agent's SIGTERM outside one) left `checkpoints/.tmp-step-N/`; a kill in
    `write_atomic` left its probe and staged file. `pipeplan run`'s launcher, once every rank
    is gone, and a resume's rank 0 remove them; nothing else: complete checkpoints, the
    model, a link (or what it leads to), a file where a folder is written, a user's files."""
    from executor import checkpoint

    run = tmp_path / "k"
    points = run / "checkpoints"
    outside = tmp_path / "outside"
    for folder in (points / "step-12", points / ".tmp-step-14", run / ".tmp-model-77", outside):
        folder.mkdir(parents=True)
        (folder / "model.pt").write_bytes(b"\0" * 64)
    (run / "model").mkdir()
    kept = [points / "step-12" / "model.pt", run / "model", outside / "model.pt"]
    for name in ("latest", ".tmp-step-9", ".latest.notmkstemp.tmp"):  # not a folder, not ours
        (points / name).write_text("step-12\n")
        kept.append(points / name)
    for name in ("notes.txt", ".run.json.bak", ".notes.abcdefgh.tmp"):
        (run / name).write_text("mine")
        kept.append(run / name)
    (points / ".tmp-step-16").symlink_to(outside)
    kept.append(points / ".tmp-step-16")
    staged = [points / ".latest.ab_12xyz.tmp", points / ".pipeplan-probe-0jqs7t64"]
    staged += [run / ".run.jsonl.k2j4m9q1.tmp", run / ".metrics.csv.abcdefgh.tmp"]
    staged.append(run / ".run.json.0a1b2c3d-4026531836-77-123456-k2j4m9q1.tmp")  # its maker's
    for path in staged:
        path.write_text("partial")
    removed = checkpoint.remove_partial(run)
    assert sorted(removed) == sorted([points / ".tmp-step-14", run / ".tmp-model-77", *staged])
    assert all(not path.exists() for path in removed)
    assert all(path.exists() or path.is_symlink() for path in kept)
    assert (outside / "model.pt").read_bytes() == b"\0" * 64
    assert checkpoint.remove_partial(tmp_path / "none") == []  # no run there: nothing, no error


def test_a_checkpoint_names_its_writer_until_it_is_whole(tmp_path, monkeypatch):
    """Found by the sixty-fourth round: `pipeplan run` killed outright (SIGKILL) as rank 0
    wrote its first checkpoint left `.tmp-step-5/`, which the refused resume never removed. The
    folder names its writer while it is written (for `fileio._remove_dead_checkpoints`, once
    that process is gone); the checkpoint it becomes holds no such mark."""
    from executor import checkpoint
    from pipeplan.spawn import owner_tag

    save, seen = checkpoint.torch.save, []

    def saving(value, path):
        seen.append(sorted(os.listdir(Path(path).parent)))
        save(value, path)

    monkeypatch.setattr(checkpoint.torch, "save", saving)
    final = checkpoint._write(tmp_path, {"model.pt": {"w": torch.zeros(4)}}, _manifest(3))
    assert seen == [[f".pipeplan-writer-{owner_tag()}"]]
    assert sorted(os.listdir(final)) == ["manifest.json", "model.pt"]


def _killed_in_write(
    run: Path, tensors: dict, manifest, kill_at: int, calls=("replace", "rename")
) -> bool:
    """`checkpoint._write(run, tensors, manifest)` in a forked child killed outright (SIGKILL:
    no handler, no clean-up runs) as it makes its `kill_at`-th call (1 the first) of the os
    functions `calls` (renames: os.replace, os.rename); never killed where it makes fewer.
    Whether it was killed."""
    from executor import checkpoint

    made = run / "renames"
    child = os.fork()
    if child == 0:  # pragma: no cover (the child's)
        try:
            made_calls = []

            def killing(real):
                def call(*args, **kwargs):
                    made_calls.append(args)
                    if len(made_calls) == kill_at:
                        made.write_text("killed")
                        os.kill(os.getpid(), signal.SIGKILL)
                    return real(*args, **kwargs)

                return call

            for name in calls:
                setattr(os, name, killing(getattr(os, name)))
            checkpoint._write(run, tensors, manifest)
            made.write_text(f"done after {len(made_calls)} calls")
        finally:
            os._exit(0)
    os.waitpid(child, 0)
    said = made.read_text()
    made.unlink()
    return said == "killed"


@pytest.mark.parametrize("kill_at", range(1, 6))
def test_a_kill_as_a_resume_rewrites_its_latest_checkpoint_leaves_a_usable_run(tmp_path, kill_at):
    """Found by the sixty-fifth round: a resume that adds epochs to a finished run rewrites
    its latest checkpoint (step-4, the freeze decision taken at once) and commits
    run.resume.json to run.json. Killed outright (SIGKILL, the OOM killer) between the
    checkpoint's `latest` and that commit, run.json said 2 epochs beside a checkpoint trained
    with 3; killed after the old step-4 was deleted and before the new one took its name,
    `latest` named a folder that was gone. Resume, export and report were refused for good.
    Killed at every rename of the write, the run reads as a report reads it (its leftovers
    cleaned as it is read) and holds one whole step-4, the old or the new, under a run.json
    that takes it; the launcher's clean-up leaves nothing else."""
    from executor import checkpoint
    from pipeplan import fileio
    from pipeplan.formats import RunConfig, dumps, load

    run = tmp_path / "r"
    run.mkdir()
    two = _manifest(4).config.model_copy(update={"epochs": 2})
    three = two.model_copy(update={"epochs": 3})
    (run / "run.json").write_text(dumps(two))
    files = ("model.pt", "optimizer.pt", "rng.pt")
    old = {name: {"w": torch.full((4,), 2.0)} for name in files}
    checkpoint._write(run, old, _manifest(4).model_copy(update={"config": two}))
    (run / checkpoint.PENDING_CONFIG).write_text(dumps(three))  # the resume's --epochs 3
    new = {name: {"w": torch.full((4,), 3.0)} for name in files}
    killed = _killed_in_write(run, new, _manifest(4).model_copy(update={"config": three}), kill_at)
    with fileio.reading_run(run):
        cfg = load(RunConfig, run / "run.json")
        checkpoint.check_kept_trained_with(run, cfg)  # resume's first check
        manifest = checkpoint.check_latest_trained_with(run, cfg)  # report's and calibrate's
    assert manifest is not None and manifest.step == 4
    step = checkpoint.latest(run, "export")
    weights = torch.load(step / "model.pt", weights_only=True)["w"]
    assert torch.equal(weights, torch.full((4,), float(manifest.config.epochs)))
    assert cfg.epochs >= manifest.config.epochs
    checkpoint.remove_partial(run)  # the launcher's, once the killed rank is gone
    assert sorted(os.listdir(run / "checkpoints")) == ["latest", "step-4"]
    if not killed:  # the whole write done
        assert (cfg.epochs, manifest.config.epochs) == (3, 3)
        assert not (run / checkpoint.PENDING_CONFIG).exists()


def test_a_checkpoint_renamed_aside_goes_back_where_its_step_is_missing(tmp_path):
    """Found by the sixty-fifth round (with the kill above): a checkpoint rewritten at its own
    step is renamed `.old-step-N/` until the new one is in place. Left by a kill, it is
    renamed back where `step-N/` is missing and removed where it is not, by the launcher's
    clean-up and by any command that claims or reads the run; a folder or file of the name
    that is not a checkpoint's (no manifest.json) is a user's, left alone."""
    from executor import checkpoint
    from pipeplan import fileio

    points = tmp_path / "checkpoints"
    for name in (".old-step-4", ".old-step-2", "step-2", ".old-step-6"):
        (points / name).mkdir(parents=True)
        (points / name / "model.pt").write_text(name)
        if name != ".old-step-6":
            (points / name / "manifest.json").write_text("{}")
    (points / ".old-step-8").write_text("mine")
    checkpoint.remove_partial(tmp_path)
    kept = [".old-step-6", ".old-step-8", "step-2", "step-4"]
    assert sorted(os.listdir(points)) == kept
    assert (points / "step-4" / "model.pt").read_text() == ".old-step-4"
    assert (points / "step-2" / "model.pt").read_text() == "step-2"
    shutil.move(points / "step-4", points / ".old-step-4")
    with fileio.reading_run(tmp_path):  # a report's read
        assert sorted(os.listdir(points)) == kept


def test_a_kill_as_a_checkpoint_set_aside_is_removed_leaves_what_a_read_removes(tmp_path):
    """Found by the sixty-sixth round: once a rewritten step's new checkpoint was in place,
    its `.old-step-N/` was removed as it was named, manifest.json first (tmpfs lists the
    newest file first); SIGKILL in that removal left a folder the size of the model and its
    AdamW state that nothing judged pipeplan's, removed by no command. Killed as the
    removal takes away the emptied folder itself (its manifest gone), a report's read leaves
    the new checkpoint alone; folders and files of like names that no removal made stay."""
    from executor import checkpoint
    from pipeplan import fileio
    from pipeplan.formats import dumps

    run = tmp_path / "r"
    points = run / "checkpoints"
    run.mkdir()
    (run / "run.json").write_text(dumps(_manifest(4).config))
    old = {name: {"w": torch.full((4,), 2.0)} for name in checkpoint.FILES}
    checkpoint._write(run, old, _manifest(4))
    mine = [".removing-step-4.mine", ".removing-step-4.12"]
    (points / mine[0]).mkdir()  # not a remover's name
    (points / mine[1]).write_text("a file")  # a remover's name, but not a folder
    new = {name: {"w": torch.full((4,), 3.0)} for name in checkpoint.FILES}
    assert _killed_in_write(run, new, _manifest(4), kill_at=1, calls=("rmdir",))
    with fileio.reading_run(run):  # a report's read
        assert sorted(os.listdir(points)) == sorted(["latest", "step-4", *mine])
    step = checkpoint.latest(run, "export")
    assert torch.equal(torch.load(step / "model.pt", weights_only=True)["w"], new["model.pt"]["w"])


def test_a_users_folder_named_like_a_removal_is_left_by_a_read(tmp_path):
    """Found by the sixty-seventh round: `pipeplan report` deleted a user's folders named
    `.removing-step-N.<digits>/` with their files, as any folder of a removal's name was
    taken for one a killed removal left. A removal now marks its folder before renaming it
    (`fileio.REMOVAL_MARK`, taken away last): a read removes a folder of the name only where
    it holds the mark or nothing, and a removal itself leaves nothing."""
    from pipeplan import fileio
    from pipeplan.spawn import owner_tag

    points = tmp_path / "checkpoints"
    users = [".removing-step-1.99999", f".removing-step-2.{owner_tag() or 1}"]
    left = [".removing-step-3.12", ".removing-step-5.13"]  # what killed removals leave
    for name in users + left:
        (points / name).mkdir(parents=True)
    for name in users:
        (points / name / "notes.txt").write_text("mine")
    (points / left[0] / "model.pt").write_text("weights")
    (points / left[0] / fileio.REMOVAL_MARK).write_text("")
    (points / "step-4" / "sub").mkdir(parents=True)
    (points / "step-4" / "manifest.json").write_text("{}")
    with fileio.reading_run(tmp_path):  # a report's read
        assert sorted(os.listdir(points)) == sorted(["step-4", *users])
    folder = os.open(points, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fileio.remove_checkpoint(folder, "step-4")
    finally:
        os.close(folder)
    assert sorted(os.listdir(points)) == sorted(users)
    assert all((points / name / "notes.txt").read_text() == "mine" for name in users)


def test_a_stop_as_a_checkpoint_is_pruned_leaves_what_a_read_removes(tmp_path, monkeypatch):
    """The same class as the kill above: an older checkpoint pruned was removed as it was
    named; a stop or kill in that removal left `step-2/` without its manifest, which nothing
    lists as a checkpoint (`checkpoints_written`) and so nothing removed. Stopped as the
    emptied folder itself goes, a report's read leaves the two kept."""
    from executor import checkpoint
    from pipeplan import fileio

    points = tmp_path / "checkpoints"
    for step in (2, 4, 6):
        (points / f"step-{step}").mkdir(parents=True)
        (points / f"step-{step}" / "manifest.json").write_text("{}")

    def stopped(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "rmdir", stopped)
    with pytest.raises(KeyboardInterrupt):
        checkpoint.prune(points)
    monkeypatch.undo()
    with fileio.reading_run(tmp_path):
        assert sorted(os.listdir(points)) == ["step-4", "step-6"]


def test_a_rewrite_refuses_what_stands_where_its_checkpoint_goes_aside(tmp_path):
    """Found by the sixty-sixth round: a rewrite of a step whose `.old-step-N` name held a
    folder that is not a checkpoint set aside (no manifest.json: a user's, or an older
    pipeplan's half-removed one) failed on it (ENOTEMPTY) once the resume's run.json was
    committed. It is refused before anything is written, the folder and the run as they were."""
    from executor import checkpoint
    from pipeplan.errors import OutputError
    from pipeplan.formats import dumps

    run = tmp_path / "r"
    points = run / "checkpoints"
    run.mkdir()
    two = _manifest(4).config.model_copy(update={"epochs": 2})
    (run / "run.json").write_text(dumps(two))
    old = {name: {"w": torch.full((4,), 2.0)} for name in checkpoint.FILES}
    checkpoint._write(run, old, _manifest(4).model_copy(update={"config": two}))
    (points / ".old-step-4").mkdir()
    (points / ".old-step-4" / "model.pt").write_text("mine")
    three = two.model_copy(update={"epochs": 3})
    (run / checkpoint.PENDING_CONFIG).write_text(dumps(three))  # the resume's --epochs 3
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    new = {name: {"w": torch.full((4,), 3.0)} for name in checkpoint.FILES}
    with pytest.raises(OutputError, match=r"old-step-4: in the way of rewriting checkpoint step-4"):
        checkpoint._write(run, new, _manifest(4).model_copy(update={"config": three}))
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before
    assert sorted(os.listdir(points)) == [".old-step-4", "latest", "step-4"]


def test_remove_partial_does_not_follow_a_linked_checkpoints_folder(tmp_path):
    """Found by the twenty-fifth round (the clean-up above): a checkpoints/ that is a link
    leads out of the run; what lies there is not the run's to remove."""
    from executor import checkpoint

    elsewhere = tmp_path / "elsewhere"
    (elsewhere / ".tmp-step-4").mkdir(parents=True)
    (tmp_path / "k").mkdir()
    (tmp_path / "k" / "checkpoints").symlink_to(elsewhere)
    assert checkpoint.remove_partial(tmp_path / "k") == []
    assert (elsewhere / ".tmp-step-4").is_dir()


DAMAGE_SAYS = {
    "bit flip": "model.pt: checksum mismatch",
    "NaN weights": "holds NaN or infinite values",
    "missing file": "rng.pt: missing (the manifest records its checksum)",
    "a folder for a file": "model.pt: is not a regular file",
    "a link to a copy": "model.pt: is not a regular file",
}


@pytest.mark.parametrize("damage", DAMAGE_SAYS)
def test_a_corrupted_checkpoint_is_refused_and_the_previous_one_used(
    tmp_path, single_rank_group, caplog, damage
):
    """Each damage is named as what it is (the eighteenth round: a missing file or a folder
    in its place was "checksum mismatch"); a copy behind a link is refused though its
    checksum holds: a checkpoint's files are its own."""
    from executor import checkpoint
    from pipeplan import models
    from pipeplan.errors import InputFileError

    seq = models.build("bert-synth")
    layout = checkpoint._gather_layout(0, len(seq.layers))
    checkpoint.save(tmp_path, seq.layers, layout, _adamw_states(seq.layers, 4.0), _manifest(4))
    checkpoint.save(tmp_path, seq.layers, layout, _adamw_states(seq.layers, 8.0), _manifest(8))
    newest = tmp_path / "checkpoints" / "step-8"
    if damage == "bit flip":
        data = bytearray((newest / "model.pt").read_bytes())
        data[len(data) // 2] ^= 0x01
        (newest / "model.pt").write_bytes(bytes(data))
    elif damage == "NaN weights":  # written with NaNs: the checksum holds, the values do not
        with torch.no_grad():
            next(seq.layers.parameters()).fill_(float("nan"))
        checkpoint.save(
            tmp_path, seq.layers, layout, _adamw_states(seq.layers, 12.0), _manifest(12)
        )
        newest = tmp_path / "checkpoints" / "step-12"
    elif damage == "missing file":
        (newest / "rng.pt").unlink()
    elif damage == "a folder for a file":
        (newest / "model.pt").unlink()
        (newest / "model.pt").mkdir()
    else:
        copy = tmp_path / "copy.pt"
        copy.write_bytes((newest / "model.pt").read_bytes())
        (newest / "model.pt").unlink()
        (newest / "model.pt").symlink_to(copy)
    with pytest.raises(InputFileError) as err:
        checkpoint.load_checkpoint(newest)
    assert "\n" not in str(err.value) and DAMAGE_SAYS[damage] in str(err.value)
    with caplog.at_level("WARNING", logger="pipeplan.checkpoint"):
        manifest = checkpoint.load_latest(tmp_path)[0]
    assert manifest.step == (8 if damage == "NaN weights" else 4)
    assert "resuming from the older" in caplog.text


def _adamw_states(layers, step: float) -> dict:
    """AdamW's state after `step` updates of every parameter of `layers`, as a run keeps it."""
    return {
        p: {
            "step": torch.tensor(step),
            "exp_avg": torch.full_like(p, 0.1),
            "exp_avg_sq": torch.full_like(p, 0.01),
        }
        for p in layers.parameters()
    }


def _first_state(o: dict) -> dict:
    return o[next(iter(o))]


# A forgery of one file of a checkpoint (its checksum recomputed) -> what the refusal says.
FORGED_SAYS = {
    "NaN exp_avg": (
        "optimizer.pt",
        lambda o: _first_state(o).update(exp_avg=_first_state(o)["exp_avg"] * float("nan")),
        "optimizer.pt: 0.embeddings.word_embeddings.weight.exp_avg: holds NaN or infinite values",
    ),
    "infinite exp_avg_sq": (
        "optimizer.pt",
        lambda o: _first_state(o)["exp_avg_sq"].fill_(float("inf")),
        ".exp_avg_sq: holds NaN or infinite values",
    ),
    "negative exp_avg_sq": (
        "optimizer.pt",
        lambda o: _first_state(o)["exp_avg_sq"].neg_(),
        ".exp_avg_sq: holds negative values",
    ),
    "exp_avg of another shape": (
        "optimizer.pt",
        lambda o: _first_state(o).update(exp_avg=torch.zeros(3)),
        "exp_avg: float32 of shape [3], but model.pt's 0.embeddings.word_embeddings.weight is",
    ),
    "exp_avg as float64": (
        "optimizer.pt",
        lambda o: _first_state(o).update(exp_avg=_first_state(o)["exp_avg"].double()),
        "exp_avg: float64 of shape",
    ),
    "step -5": (
        "optimizer.pt",
        lambda o: _first_state(o).update(step=torch.tensor(-5.0)),
        ".step: -5.0 is not a count of updates: a whole number in 0..8",
    ),
    "step 2.5": (
        "optimizer.pt",
        lambda o: _first_state(o).update(step=torch.tensor(2.5)),
        ".step: 2.5 is not a count of updates",
    ),
    "step NaN": (
        "optimizer.pt",
        lambda o: _first_state(o).update(step=torch.tensor(float("nan"))),
        ".step: nan is not a count of updates",
    ),
    "step past the checkpoint's": (
        "optimizer.pt",
        lambda o: _first_state(o).update(step=torch.tensor(9.0)),
        ".step: 9.0 is not a count of updates: a whole number in 0..8",
    ),
    "step a vector": (
        "optimizer.pt",
        lambda o: _first_state(o).update(step=torch.zeros(2)),
        ".step: float32 of shape [2], not a float scalar",
    ),
    "a state key missing": (
        "optimizer.pt",
        lambda o: _first_state(o).pop("exp_avg_sq"),
        "holds exp_avg, step; AdamW's state is step, exp_avg, exp_avg_sq",
    ),
    "a state of no parameter": (
        "optimizer.pt",
        lambda o: o.update({"99.w": {}}),
        "optimizer.pt: 99.w: no such parameter in model.pt",
    ),
    # The forty-ninth round: resumed with fresh moments for it, in silence.
    "an active parameter's state missing": (
        "optimizer.pt",
        lambda o: o.pop(next(iter(o))),
        "optimizer.pt: lacks AdamW's state of 0.embeddings.word_embeddings.weight, a "
        "parameter of layer 0, which is not frozen at step 8 (frozen_layers 0)",
    ),
    # The fifty-first round: every state removed was taken as a hand-made checkpoint's.
    "every state removed": (
        "optimizer.pt",
        lambda o: o.clear(),
        "optimizer.pt: lacks AdamW's state of 0.embeddings.word_embeddings.weight, a "
        "parameter of layer 0, which is not frozen at step 8 (frozen_layers 0)",
    ),
    "a parameter as float64": (
        "model.pt",
        lambda o: o.update({next(iter(o)): _first_state(o).double()}),
        "but model.pt's 0.embeddings.word_embeddings.weight is float64",
    ),
    "an rng state of 3 bytes": (
        "rng.pt",
        lambda o: o.update({"0": torch.zeros(3, dtype=torch.uint8)}),
        "rng.pt: 0: uint8 of shape [3], not a random state (uint8 of shape [5056])",
    ),
    "an rng state of zeros": (
        "rng.pt",
        lambda o: o.update({"0": torch.zeros_like(o["0"])}),
        "rng.pt: 0: not a random state (Invalid mt19937 state)",
    ),
    "an rng state as float": (
        "rng.pt",
        lambda o: o.update({"0": o["0"].float()}),
        "rng.pt: 0: float32 of shape [5056], not a random state",
    ),
    "a CUDA rng state of the wrong size": (
        "rng.pt",
        lambda o: o.update({"0.cuda": torch.zeros(5, dtype=torch.uint8)}),
        "rng.pt: 0.cuda: uint8 of shape [5], not a random state (uint8 of shape [16])",
    ),
    "an rng state of a rank the run lacks": (
        "rng.pt",
        lambda o: o.update({"1": o["0"]}),
        "rng.pt: names '1'; it holds a state for each of the checkpoint's ranks, and ",
    ),
    "no rng state for a rank": (
        "rng.pt",
        lambda o: o.pop("0"),
        "rng.pt: lacks rank 0's state",
    ),
}


@pytest.mark.parametrize("forgery", FORGED_SAYS)
def test_a_forged_optimizer_or_rng_state_is_refused_and_the_previous_one_used(
    tmp_path, single_rank_group, caplog, forgery
):
    """Found by the twenty-second round: only model.pt's values were checked, so AdamW's
    moments set to NaN (checksums recomputed) resumed, trained and failed as "training
    diverged … lower --lr", suggesting the same resume; a negative exp_avg_sq, a step of -5, a
    float64 parameter and a 3-byte RNG state were accepted too. Each is refused naming its
    file and entry, and the older checkpoint is used with a notice, as for any corrupt one."""
    import hashlib

    from executor import checkpoint
    from pipeplan import models
    from pipeplan.errors import InputFileError

    seq = models.build("bert-synth")
    layout = checkpoint._gather_layout(0, len(seq.layers))
    checkpoint.save(tmp_path, seq.layers, layout, _adamw_states(seq.layers, 4.0), _manifest(4))
    checkpoint.save(tmp_path, seq.layers, layout, _adamw_states(seq.layers, 8.0), _manifest(8))
    newest = tmp_path / "checkpoints" / "step-8"
    checkpoint.load_checkpoint(newest)  # as written, it loads
    name, forge, says = FORGED_SAYS[forgery]
    value = torch.load(newest / name, weights_only=True)
    forge(value)
    torch.save(value, newest / name)
    manifest = json.loads((newest / "manifest.json").read_text())
    manifest["files"][name] = hashlib.sha256((newest / name).read_bytes()).hexdigest()
    manifest["sizes"][name] = (newest / name).stat().st_size
    (newest / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(InputFileError) as err:
        checkpoint.load_checkpoint(newest)
    assert "\n" not in str(err.value) and says in str(err.value)
    assert str(err.value).startswith(f"{newest}/")
    with caplog.at_level("WARNING", logger="pipeplan.checkpoint"):
        assert checkpoint.load_latest(tmp_path)[0].step == 4
    assert "resuming from the older step-4" in caplog.text


def test_a_parameter_of_another_float_dtype_is_refused(tmp_path):
    """Found by the twenty-second round: a parameter stored as float64 in model.pt (with no
    optimizer state to disagree with it: a frozen layer's) was cast into the float32 model
    silently; check_weights compared only whether both were floating point."""
    from executor import checkpoint
    from pipeplan import models
    from pipeplan.errors import InputFileError

    seq = models.build("bert-synth")
    weights = {n: p.detach().clone() for p, n in checkpoint._names(seq.layers).items()}
    checkpoint.check_weights(weights, seq.layers, tmp_path)  # as the model has them
    name = next(iter(weights))
    weights[name] = weights[name].double()
    with pytest.raises(InputFileError, match=f"parameter {name} is float64 in the checkpoint"):
        checkpoint.check_weights(weights, seq.layers, tmp_path)


@pytest.mark.parametrize("swapped_in", ["fifo", "other rng.pt"])
def test_a_file_swapped_after_its_checksum_is_not_what_is_loaded(
    tmp_path, single_rank_group, monkeypatch, swapped_in
):
    """Found by the forty-third round: each file was checked by sha256 and then opened
    again by name (`torch.load(path)`), so a FIFO renamed over rng.pt in between blocked
    `export` (and `run --resume`, launcher and every rank) in open() for good, and a regular
    file renamed over it would have been loaded unchecked. Now each file is opened once and
    both hashed and loaded from what was opened: the swap, made just after rng.pt's
    checksum, changes nothing. (The load runs in a thread: on a FIFO the test opens its
    other end, so that a blocked load ends and the test fails instead of hanging.)"""
    import threading

    from executor import checkpoint
    from pipeplan import models

    seq = models.build("bert-synth")
    layout = checkpoint._gather_layout(0, len(seq.layers))
    checkpoint.save(tmp_path, seq.layers, layout, _adamw_states(seq.layers, 4.0), _manifest(4))
    step = tmp_path / "checkpoints" / "step-4"
    rng_file = step / "rng.pt"
    saved = torch.load(rng_file, weights_only=True)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    other = tmp_path / "other.pt"
    torch.save({key: torch.zeros_like(value) for key, value in saved.items()}, other)
    hashed = []
    real_sha256 = checkpoint.handle_sha256

    def sha256_then_swap(handle):
        digest = real_sha256(handle)
        hashed.append(digest)
        if len(hashed) == len(checkpoint.FILES):  # rng.pt's, the last: then the swap
            os.replace(fifo if swapped_in == "fifo" else other, rng_file)
        return digest

    monkeypatch.setattr(checkpoint, "handle_sha256", sha256_then_swap)
    result = {}

    def load() -> None:
        try:
            result["loaded"] = checkpoint.load_checkpoint(step)
        except Exception as exc:  # the assertion below names it
            result["error"] = exc

    loader = threading.Thread(target=load, daemon=True)
    loader.start()
    loader.join(timeout=30)
    blocked = loader.is_alive()
    if blocked:  # a writer that comes and goes: the blocked open returns, the read ends
        os.close(os.open(rng_file, os.O_WRONLY | os.O_NONBLOCK))
        loader.join(timeout=30)
    assert not blocked, "load_checkpoint blocked opening the FIFO swapped in for rng.pt"
    assert "error" not in result, result.get("error")
    assert len(hashed) == len(checkpoint.FILES)
    rng = result["loaded"][3]
    assert rng.keys() == saved.keys()
    assert all(torch.equal(rng[key], saved[key]) for key in saved)  # what was checked


def _steps_4_and_8(tmp_path):
    """Checkpoints step-4 and step-8 of bert-synth in tmp_path (latest: step-8); returns the
    checkpoint module."""
    from executor import checkpoint
    from pipeplan import models

    seq = models.build("bert-synth")
    layout = checkpoint._gather_layout(0, len(seq.layers))
    checkpoint.save(tmp_path, seq.layers, layout, _adamw_states(seq.layers, 4.0), _manifest(4))
    checkpoint.save(tmp_path, seq.layers, layout, _adamw_states(seq.layers, 8.0), _manifest(8))
    return checkpoint


def test_export_s_notice_for_an_older_checkpoint_says_it_exports(
    tmp_path, single_rank_group, caplog
):
    """Eighth round: `pipeplan export` fell back to an older checkpoint with a notice that
    said "resuming from", which export does not do."""
    checkpoint = _steps_4_and_8(tmp_path)
    (tmp_path / "checkpoints" / "step-8" / "rng.pt").unlink()
    with caplog.at_level("WARNING", logger="pipeplan.checkpoint"):
        assert checkpoint.load_latest(tmp_path, "export")[0].step == 4
    assert "; exporting the older step-4" in caplog.text
    assert "resuming" not in caplog.text


def test_the_notice_names_a_newer_checkpoint_as_the_newer(tmp_path, single_rank_group, caplog):
    """Found by the twenty-third round: with `latest` naming step-4 (a crash between writing
    step-8 and the pointer) and step-4 invalid, export took step-8 with a notice that called
    it "the older step-8". It is the newer, and the notice says what `latest` names."""
    checkpoint = _steps_4_and_8(tmp_path)
    (tmp_path / "checkpoints" / "latest").write_text("step-4\n")
    (tmp_path / "checkpoints" / "step-4" / "rng.pt").unlink()
    with caplog.at_level("WARNING", logger="pipeplan.checkpoint"):
        assert checkpoint.load_latest(tmp_path, "export")[0].step == 8
    assert "; exporting the newer step-8 (checkpoints/latest names step-4)" in caplog.text
    assert "older" not in caplog.text


def test_a_latest_naming_an_older_checkpoint_is_said(tmp_path, single_rank_group, caplog):
    """Found by the twenty-third round: `latest` naming step-4 beside a newer step-8 (a crash
    between writing step-8 and the pointer) was used without a word. It is still what the
    command uses (step-8 is not read), with a notice naming both."""
    checkpoint = _steps_4_and_8(tmp_path)
    with caplog.at_level("WARNING", logger="pipeplan.checkpoint"):
        assert checkpoint.load_latest(tmp_path, "export")[0].step == 8
    assert not caplog.text  # latest names the newest: nothing to say
    (tmp_path / "checkpoints" / "latest").write_text("step-4\n")
    with caplog.at_level("WARNING", logger="pipeplan.checkpoint"):
        assert checkpoint.load_latest(tmp_path, "export")[0].step == 4
    latest = tmp_path / "checkpoints" / "latest"
    assert f"{latest}: names step-4, but step-8 beside it is newer" in caplog.text
    assert "exporting step-4, as it names" in caplog.text


MID_EPOCH = [
    *["--model", "vit-digits", "--nproc", "2", "--device-memory", "100MiB", "--epochs", "3"],
    *["--max-steps-per-epoch", "6", "--freeze", "auto", "--alpha", "0.9", "--freeze-every", "1"],
    *["--dropout", "0.1"],
]


@pytest.mark.long
@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_a_mid_epoch_layout_change_checkpoint_resumes_bitwise(tmp_path):
    """--freeze-every changes the layout mid-epoch; its checkpoint must resume at that step of
    the epoch (it said step 0 and replayed steps past the schedule's end), with the dropout
    random streams restored: the resumed run ends bitwise where the uninterrupted one does."""
    import shutil

    from pipeplan.formats import CheckpointManifest, PhaseRecord, load

    runs = ["--runs-dir", str(tmp_path)]
    assert pipeplan("run", *MID_EPOCH, *runs, "--name", "full").returncode == 0
    full = tmp_path / "full"
    phases = [r for r in read_records(full / "run.jsonl") if isinstance(r, PhaseRecord)]
    mid = [p for p in phases if p.start_step % 6]  # 6 steps an epoch
    assert mid, [p.start_step for p in phases]  # the schedule does change layout mid-epoch
    transition = mid[-1].start_step
    # The uninterrupted run, cut back to that transition's checkpoint.
    cut = tmp_path / "cut"
    shutil.copytree(full, cut, ignore=shutil.ignore_patterns(".lock"))
    for checkpoint in (cut / "checkpoints").glob("step-*"):
        if checkpoint.name != f"step-{transition}":
            shutil.rmtree(checkpoint)
    (cut / "checkpoints" / "latest").write_text(f"step-{transition}\n")
    manifest = load(
        CheckpointManifest, cut / "checkpoints" / f"step-{transition}" / "manifest.json"
    )
    assert (manifest.epoch, manifest.step_in_epoch) == divmod(transition, 6)
    resumed = pipeplan("run", "--resume", str(cut))
    assert resumed.returncode == 0, resumed.stderr
    a = torch.load(full / "checkpoints" / "step-18" / "model.pt", weights_only=True)
    b = torch.load(cut / "checkpoints" / "step-18" / "model.pt", weights_only=True)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    steps = [r.step for r in read_records(cut / "run.jsonl") if isinstance(r, STEP_RECORDS)]
    assert steps == list(range(18))


def test_a_manifest_is_named_where_it_was_read_not_by_its_step(finished_run, tmp_path):
    """Found by the forty-ninth round: another run's step-8 copied into a run's step-6/ was
    refused as "runs/oc2/checkpoints/step-8/manifest.json: …", a file that does not exist:
    the path was made from the manifest's own step. It is the file read."""
    from test_hostile import copy_run

    from executor import checkpoint

    run = copy_run(finished_run, tmp_path)
    latest = (run / "checkpoints" / "latest").read_text().strip()
    moved = run / "checkpoints" / "step-6"
    shutil.copytree(run / "checkpoints" / latest, moved)
    manifest = checkpoint.read_manifest(moved)
    assert f"step-{manifest.step}" != moved.name
    assert checkpoint.manifest_path(run, manifest) == moved / "manifest.json"
    made = manifest.model_copy()  # not read from a file: the folder its step names
    assert checkpoint.manifest_path(run, made) == run / "checkpoints" / latest / "manifest.json"
