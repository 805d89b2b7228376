"""Paths that change under a command, and names it must not take (the forty-second round):
an input swapped for a FIFO between its check and its open (F11), `export --out` a link to an
empty folder or a folder another export made meanwhile (F1), run names that are a run
directory's own entries (F13), and the file size limit named by every writer (F14). Each
refusal is one line; nothing hangs (every case that could block runs in a subprocess with a
timeout)."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

import cli
from executor.launch import run_name
from pipeplan.errors import BadArgumentError, OutputError
from pipeplan.fileio import is_run_directory, not_a_new_directory

REPO = Path(__file__).resolve().parent.parent
PROFILE = REPO / "profiles" / "vit-digits@cpu-1t.json"
HANG_S = 20  # far above what any case takes; an open blocked on a FIFO never returns

# A FIFO is opened by each reader as if a regular file had been there at its check: the check
# (a stat) is made a no-op in the module that calls it, which is what a FIFO swapped in after
# a real stat leaves. Prints the one line each reader refuses it with.
SWAPPED = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from pipeplan.errors import PipeplanError
    from pipeplan.formats import base
    import pipeplan.runfiles as runfiles
    import executor.text as text
    import executor.checkpoint as checkpoint

    def saw_a_regular_file(*args, **kwargs):
        return None

    for module in (base, runfiles, text):
        if hasattr(module, "check_input_file"):
            module.check_input_file = saw_a_regular_file
    case, fifo = sys.argv[1], sys.argv[2]
    try:
        if case == "read_input":
            base.read_input(fifo)
        elif case == "read_lines":
            list(base.read_lines(fifo, 1 << 10))
        elif case == "first_record":
            print("none" if runfiles._first_record(Path(fifo)) is None else "read")
        elif case == "text_rows":
            text._read_rows(Path(fifo), None, None)
        elif case == "file_sha256":
            checkpoint.file_sha256(Path(fifo))
    except (PipeplanError, OSError) as exc:
        print(exc)
    """
)


def swapped(case: str, fifo: Path) -> str:
    """What reader `case` prints for `fifo` checked as a regular file; fails if it hangs."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    try:
        done = subprocess.run(
            [sys.executable, "-c", SWAPPED, case, str(fifo)],
            capture_output=True,
            text=True,
            timeout=HANG_S,
            env=env,
            cwd=fifo.parent,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"{case}: blocked opening a FIFO swapped in after the check")
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.parametrize("case", ["read_input", "read_lines", "text_rows", "file_sha256"])
def test_fifo_swapped_in_after_the_check_is_refused_not_waited_on(tmp_path, case):
    """Found by the forty-second round: `read_input`/`read_lines` stat'ed a path (a regular
    file), then `open`ed it; a FIFO swapped in between blocked every command forever (the
    profile, cluster, plan, run.json, run.jsonl, text data, data.json's files). Each reader
    now opens without blocking and checks what it opened: one line, at once."""
    fifo = tmp_path / "p.json"
    os.mkfifo(fifo)
    out = swapped(case, fifo)
    assert len(out.splitlines()) == 1, out
    assert "not a regular file" in out, out


def test_fifo_swapped_in_for_a_runs_first_record_is_not_waited_on(tmp_path):
    """Found by the forty-second round: the first record of run.jsonl, read to tell runs
    apart, blocked on a FIFO swapped in after its check as the readers did; now it is no
    record (the records' reader names the FIFO)."""
    fifo = tmp_path / "run.jsonl"
    os.mkfifo(fifo)
    assert swapped("first_record", fifo) == "none"


def test_export_out_a_link_to_an_empty_folder_is_named_before_any_work(tmp_path):
    """Found by the forty-second round: `export --out LINK`, LINK a link to an empty folder,
    passed the up-front checks, did the work, and failed at the rename with "write failed (Not
    a directory)"; a link to anything else was named at once. Now it is named up front."""
    (tmp_path / "empty").mkdir()
    link = tmp_path / "outlink"
    link.symlink_to("empty")
    why = not_a_new_directory(link)
    assert why is not None and "symbolic link to an empty directory" in why, why
    assert not_a_new_directory(tmp_path / "empty") is None  # the folder itself is fine


def test_export_checks_out_a_link_to_an_empty_folder_before_reading_the_run(tmp_path):
    """Found by the forty-second round: export's first check (`_check_new_directory`, before
    the run is read or the model built) names the link."""
    from executor.task import _check_new_directory

    (tmp_path / "empty").mkdir()
    link = tmp_path / "outlink"
    link.symlink_to("empty")
    with pytest.raises(OutputError, match="symbolic link to an empty directory"):
        _check_new_directory(link)


class _SlowModel:
    """A model whose save_pretrained writes a config, while another export makes `out`."""

    def __init__(self, out: Path) -> None:
        self.out = out

    def save_pretrained(self, folder: Path) -> None:
        (Path(folder) / "config.json").write_text("{}\n")
        self.out.mkdir()  # another `export --out` of the same new folder, finished first
        (self.out / "config.json").write_text("{}\n")


def test_concurrent_export_to_one_new_folder_says_what_happened(tmp_path):
    """Found by the forty-second round: two exports to one new --out; the loser said "write
    failed (Directory not empty)", as if the disk had failed. Now it says the folder exists
    and is not empty, made while this export ran; the winner's folder is left whole."""
    from pipeplan import models

    out = tmp_path / "exr"
    seq = SimpleNamespace(name="fake", hf_model=_SlowModel(out))
    with pytest.raises(OutputError) as caught:
        models.export(seq, out)
    line = str(caught.value)
    assert len(line.splitlines()) == 1, line
    assert "write failed" not in line, line
    assert "exists and is not an empty directory" in line, line
    assert "another process" in line, line
    assert sorted(p.name for p in out.iterdir()) == ["config.json"]
    assert [p.name for p in tmp_path.iterdir()] == ["exr"]  # no temporary left behind


def _listing(root: Path) -> list[tuple[str, str]]:
    """Every entry under `root` (links not followed): its path and a file's sha256, a
    folder's or a link's kind; what a write into `root` would change."""
    import hashlib

    found = []
    for folder, dirs, files in os.walk(root):
        for name in sorted(dirs + files):
            path = Path(folder) / name
            kind = "link" if path.is_symlink() else "dir" if path.is_dir() else None
            digest = kind or hashlib.sha256(path.read_bytes()).hexdigest()
            found.append((str(path.relative_to(root)), digest))
    return sorted(found)


def _swap_for_a_link(folder: Path, run: Path) -> None:
    """`mv folder folder.old; ln -s run folder`: the forty-third round's F5 swap."""
    folder.rename(folder.with_name(folder.name + ".old"))
    folder.symlink_to(run)


class _SwappingModel:
    """A model whose save_pretrained swaps the output's folder for a link to a run directory
    before writing, and writes as transformers' does (its folder made if missing)."""

    def __init__(self, folder: Path, run: Path) -> None:
        self.folder, self.run = folder, run

    def save_pretrained(self, target: Path) -> None:
        _swap_for_a_link(self.folder, self.run)
        os.makedirs(target, exist_ok=True)
        (Path(target) / "config.json").write_text("{}\n")


def _a_run(tmp_path: Path) -> Path:
    """A run directory (`is_run_directory`: run.json, its lock, records and checkpoints)."""
    run = tmp_path / "runs" / "ref1"
    (run / "checkpoints").mkdir(parents=True)
    for name in ("run.json", "run.jsonl", ".lock"):
        (run / name).write_text("{}\n")
    assert is_run_directory(run)
    return run


def test_export_through_a_folder_swapped_while_it_writes_lands_in_no_run(tmp_path):
    """Found by the forty-third round (F5): `export --out par/exp` checked that par/ lay in
    no run directory, then wrote `par/.tmp-exp-PID` and renamed it to par/exp by path; par/
    swapped meanwhile for a link to a run directory put the export inside that run (exit 0).
    The folder is held open from its check to the rename (`fileio.held_folder`): what was
    written goes into the folder checked, and the export refuses in one line, before the
    rename, a path that now leads into a run; nothing is left in either folder."""
    from pipeplan import models

    run = _a_run(tmp_path)
    before = _listing(run)
    par = tmp_path / "d" / "par"
    par.mkdir(parents=True)
    seq = SimpleNamespace(name="fake", hf_model=_SwappingModel(par, run))
    with pytest.raises(OutputError) as caught:
        models.export(seq, par / "exp")
    line = str(caught.value)
    assert len(line.splitlines()) == 1, line
    assert "lies inside the run directory" in line, line
    assert _listing(run) == before
    assert list((tmp_path / "d" / "par.old").iterdir()) == []  # no temporary left behind


def test_export_through_a_folder_swapped_for_another_says_it_changed(tmp_path):
    """F5's swap for a link to an ordinary folder: the rename would put the export in the
    folder checked, no longer at the path given; refused in one line, nothing left."""
    from pipeplan import models

    other = tmp_path / "other"
    other.mkdir()
    par = tmp_path / "par"
    par.mkdir()
    seq = SimpleNamespace(name="fake", hf_model=_SwappingModel(par, other))
    with pytest.raises(OutputError) as caught:
        models.export(seq, par / "exp")
    line = str(caught.value)
    assert len(line.splitlines()) == 1, line
    assert f"the folder {par} was moved or replaced while this command worked" in line, line
    assert list(other.iterdir()) == [] and list((tmp_path / "par.old").iterdir()) == []


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_export_out_swapped_into_a_run_while_the_model_builds_is_refused(
    finished_run, tmp_path, capsys, monkeypatch
):
    """Found by the forty-third round (F5): `pipeplan export RUN --out par/exp`, par/ swapped
    for a link to a run directory while the export built the model (after its first check,
    `_check_new_directory`), wrote par/exp inside that run, exit 0. Now exit 2 with one line
    naming the run, the run unchanged, and no temporary folder anywhere."""
    from test_hostile import copy_run

    import executor.task as task

    run = copy_run(finished_run, tmp_path)
    before = _listing(run)
    par = tmp_path / "d" / "par"
    par.mkdir(parents=True)
    built = task.build_task

    def build_then_swap(*args, **kwargs):
        result = built(*args, **kwargs)
        _swap_for_a_link(par, run)
        return result

    monkeypatch.setattr(task, "build_task", build_then_swap)
    assert cli.main(["export", str(run), "--out", str(par / "exp")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("pipeplan: error: "), err
    assert "lies inside the run directory" in err[0], err
    assert par.is_symlink()  # the swap happened
    assert _listing(run) == before
    assert list((tmp_path / "d" / "par.old").iterdir()) == []


def test_plan_out_through_a_folder_swapped_while_it_plans_lands_in_no_run(
    tmp_path, capsys, monkeypatch
):
    """Found by the forty-third round (F5's class, in `plan --out`, and `calibrate --out`
    by the same writer): --out's folder, checked at the start, swapped for a link to a run
    directory while the plan was made, and the plan was written into the run (exit 0):
    the writer re-checked only that the file could be written. The writer holds the folder
    (`fileio.write_files(user_output=True)`) and checks it again before the rename."""
    import pipeplan.plan as plan

    run = _a_run(tmp_path)
    before = _listing(run)
    par = tmp_path / "par"
    par.mkdir()
    made = plan.make_plan

    def plan_then_swap(*args, **kwargs):
        result = made(*args, **kwargs)
        _swap_for_a_link(par, run)
        return result

    monkeypatch.setattr(plan, "make_plan", plan_then_swap)
    assert cli.main(["plan", "--profile", str(PROFILE), "--out", str(par / "p.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("pipeplan: error: "), err
    assert "lies inside the run directory" in err[0], err
    assert par.is_symlink() and _listing(run) == before
    assert list((tmp_path / "par.old").iterdir()) == []


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_report_plot_swapped_into_a_run_between_its_plots_is_refused(
    finished_run, tmp_path, capsys, monkeypatch
):
    """Found by the forty-third round (F5's class, in `report --plot DIR`): DIR swapped for
    a link to a run directory while the set was drawn; the last plot was staged inside the
    run, the renames looked for the first ones through the link ("write failed (No such file
    or directory)"), and their temporaries stayed in the folder. The set is written through
    the folder held from its first plot and refused before any rename: exit 2, one line
    naming the run, nothing in the run or in the folder."""
    import pipeplan.plots as plots

    run = _a_run(tmp_path)
    before = _listing(run)
    out = tmp_path / "plots"
    drawn = plots.epochs_png  # the set's last plot

    def swap_then_draw(*args, **kwargs):
        _swap_for_a_link(out, run)
        return drawn(*args, **kwargs)

    monkeypatch.setattr(plots, "epochs_png", swap_then_draw)
    assert cli.main(["report", str(finished_run), "--plot", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("pipeplan: error: "), err
    assert "lies inside the run directory" in err[0], err
    assert out.is_symlink() and _listing(run) == before
    assert list((tmp_path / "plots.old").iterdir()) == []


@pytest.mark.parametrize("name", ["checkpoints", "run.jsonl"])
def test_run_name_refuses_the_names_that_mark_a_run_directory(name):
    """Found by the forty-second round: `run --name checkpoints` and `--name run.jsonl` were
    accepted, and the runs folder holding both was then a run directory: every later run in
    it was refused. The names that mark one are refused, naming them; the other names a run
    keeps mark nothing and stay usable (the suite's own runs are named `model` and `cache`)."""
    with pytest.raises(BadArgumentError) as caught:
        run_name(name)
    line = str(caught.value)
    assert line.startswith(f"--name '{name}'"), line
    assert "run.jsonl and checkpoints" in line, line
    for usable in ("checkpoints-2", "model", "cache", "logs", "summary.json"):
        assert run_name(usable) == usable


@pytest.mark.parametrize("name", ["checkpoints", "run.jsonl"])
def test_run_named_like_a_run_entry_is_refused_and_the_runs_folder_stays_usable(
    tmp_path, capsys, name
):
    """Found by the forty-second round: the finding's reproduction, --prepare-only."""
    runs = tmp_path / "runs3"
    argv = ["run", "--model", "vit-digits", "--epochs", "1", "--nproc", "2", "--prepare-only"]
    assert cli.main([*argv, "--name", name, "--runs-dir", str(runs)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pipeplan: error: --name"), lines
    assert "marks a run directory" in lines[0], lines[0]
    assert not (runs / name).exists()
    assert not is_run_directory(runs)


def _limited(limit: int):
    """A preexec_fn: the file size limit `limit` bytes, and SIGXFSZ ignored (as pipeplan
    ignores it) so that nothing before pipeplan's start-up is killed by it."""

    def set_limit() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))

    return set_limit


def test_plan_out_past_the_file_size_limit_names_the_limit(tmp_path):
    """Found by the forty-second round: under `ulimit -f`, `plan --out` said "write failed
    (File too large)" without the limit, where a run's own files name it; `fileio.write_files`
    (plan, calibrate, the plots) now words it as they do."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONDONTWRITEBYTECODE": "1"}
    argv = [
        sys.executable, str(REPO / "cli.py"), "plan", "--profile", str(PROFILE),
        "--devices-per-node", "2", "--global-batch", "32", "--samples", "640", "--epochs", "3",
        "--out", "p.json",
    ]  # fmt: skip
    done = subprocess.run(
        argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60,
        preexec_fn=_limited(2048),
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("pipeplan: error: p.json: write failed (File too large"), lines
    assert "ulimit -f, is 2048 bytes" in lines[0], lines[0]
    assert not (tmp_path / "p.json").exists()
    assert list(tmp_path.iterdir()) == []  # no temporary left behind


def test_export_weights_past_the_file_size_limit_name_it(monkeypatch):
    """Found by the forty-second round: the export's weights (safetensors' own error, an
    errno in its text) past `ulimit -f` said "File too large" alone."""
    import pipeplan.fileio as fileio

    SafetensorError = type("SafetensorError", (Exception,), {})
    monkeypatch.setattr(fileio, "size_limit", lambda: 46080)
    why = fileio.write_failure(SafetensorError("I/O error: File too large (os error 27)"), ".")
    assert why == "File too large: the file size limit, ulimit -f, is 46080 bytes"


def test_runs_dir_swapped_into_a_run_while_the_run_is_prepared_is_refused(
    tmp_path, capsys, monkeypatch
):
    """Found by the forty-third round's fixer (F5's class, in `run --runs-dir DIR`): DIR was
    checked to lie in no run directory (`check_runs_root`), then the run's folder was made and
    claimed by path; DIR swapped meanwhile for a link to a run directory put the new run inside
    that run. The location is checked again once claimed: exit 2, one line naming the run,
    nothing left in it, nothing in the folder swapped away."""
    import executor.launch as launch

    run = _a_run(tmp_path)
    before = _listing(run)
    out = tmp_path / "mine"
    out.mkdir()
    hashed = launch.data_record  # after check_runs_root, before the claim

    def swap_then_hash(*args, **kwargs):
        _swap_for_a_link(out, run)
        return hashed(*args, **kwargs)

    monkeypatch.setattr(launch, "data_record", swap_then_hash)
    argv = ["run", "--model", "vit-digits", "--epochs", "1", "--nproc", "1", "--prepare-only"]
    assert cli.main([*argv, "--runs-dir", str(out), "--name", "n"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("pipeplan: error: "), err
    assert "lies inside the run directory" in err[0], err
    assert out.is_symlink() and _listing(run) == before
    assert list((tmp_path / "mine.old").iterdir()) == []


@pytest.mark.parametrize("command", ["export", "report", "calibrate", "run"])
def test_a_run_directory_that_is_a_loop_of_links_is_one_line(tmp_path, capsys, command):
    """Found by the forty-ninth round: `export` of a loop of links (`loop1` → `loop2` →
    `loop1`) was a 58-line traceback (pathlib's "Symlink loop"), where report, calibrate and
    `run --resume` said it in one line. Every reader of a run directory says it alike."""
    os.symlink(tmp_path / "loop2", tmp_path / "loop1")
    os.symlink(tmp_path / "loop1", tmp_path / "loop2")
    loop = str(tmp_path / "loop1")
    argv = {
        "export": ["export", loop, "--out", str(tmp_path / "out")],
        "report": ["report", loop],
        "calibrate": ["calibrate", loop, "--profile", str(PROFILE), "--out", str(tmp_path / "c")],
        "run": ["run", "--resume", loop],
    }[command]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"pipeplan: error: {loop}: cannot be reached (Too many levels of symbolic links)"
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["loop1", "loop2"]
