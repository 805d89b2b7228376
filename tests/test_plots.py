"""Charts: PNGs are written, one Gantt row per stage, bad input and bad paths give clear errors."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from pipeplan import simulate
from pipeplan.cluster import cluster_from_flags
from pipeplan.errors import BadArgumentError, OutputError
from pipeplan.freeze import no_freezing
from pipeplan.plan import make_plan, phase_timelines
from pipeplan.plots import (
    _epochs_figure,
    _timeline_figure,
    plot_epochs,
    plot_measured_vs_simulated,
    plot_timeline,
)
from pipeplan.simulate import MAX_GANTT_BOXES, gantt_rows
from pipeplan.solver import Pins
from pipeplan.synthetic import synthetic_profile, transformer_layers

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@dataclass
class Event:
    stage: int
    kind: str
    micro_batch: int | None
    start_s: float
    end_s: float


@dataclass
class Timeline:
    events: list[Event] = field(default_factory=list)
    step_s: float = 0.0
    num_stages: int = 1


@dataclass
class EpochRow:
    epoch: int
    samples_per_s: float
    stages: int
    replicas: int
    frozen_layers: int


def gpipe(stages: int, micro_batches: int, fwd: float = 0.004, bwd: float = 0.008) -> Timeline:
    """A plausible GPipe step: all forwards, all backwards, all-reduce, optimizer."""
    events: list[Event] = []
    free = [0.0] * stages
    done: dict[tuple[int, int], float] = {}
    for kind, dur, order in (
        ("fwd", fwd, range(stages)),
        ("bwd", bwd, range(stages - 1, -1, -1)),
    ):
        done.clear()
        step = 1 if kind == "fwd" else -1
        for m in range(micro_batches):
            for s in order:
                start = max(free[s], done.get((s - step, m), 0.0))
                events.append(Event(s, kind, m, start, start + dur))
                free[s] = done[(s, m)] = start + dur
                if (s + step) in range(stages):
                    events.append(Event(s, "send", m, start + dur, start + dur + 0.0005))
    for s in range(stages):
        events.append(Event(s, "allreduce", None, free[s], free[s] + 0.003))
        events.append(Event(s, "optimizer", None, free[s] + 0.003, free[s] + 0.004))
    return Timeline(events, max(free) + 0.004, stages)


def assert_png(path: Path, min_bytes: int = 5_000) -> None:
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC
    assert len(data) > min_bytes


def test_timeline_png_written_in_new_directory(tmp_path: Path) -> None:
    out = tmp_path / "a" / "b" / "step.png"
    assert plot_timeline(gpipe(4, 8), out, title="GPipe 4×8") == out
    assert_png(out)
    assert not [p for p in out.parent.iterdir() if p.name != "step.png"]  # no temp files left


def test_one_row_per_stage_stage_0_on_top() -> None:
    fig = _timeline_figure(gpipe(5, 3))
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == [f"stage {s}" for s in range(5)]
    bottom, top = ax.get_ylim()
    assert bottom > top  # inverted: stage 0 is drawn at the top
    assert ax.get_xlabel() == "time (ms)"


def test_micro_batch_labels_and_step_line() -> None:
    tl = gpipe(2, 3)
    ax = _timeline_figure(tl).axes[0]
    texts = sorted(t.get_text() for t in ax.texts)
    assert texts == sorted(["0", "1", "2"] * 4)  # fwd and bwd on two stages, wide bars
    step_ms = tl.step_s * 1e3
    assert any(list(line.get_xdata()) == [step_ms, step_ms] for line in ax.get_lines())


def test_bars_grouped_per_stage_and_kind() -> None:
    tl = gpipe(3, 4)
    ax = _timeline_figure(tl).axes[0]
    groups = {(e.stage, e.kind) for e in tl.events}
    assert len(ax.collections) == len(groups)


def test_many_stages_and_events_is_fast(tmp_path: Path) -> None:
    tl = gpipe(64, 32)
    assert len(tl.events) > 8000
    # CPU time, not wall time: under CI's load (two workers and their ranks on two cores) the
    # wall clock measured the neighbours (6.5 s once against 5). The structure that keeps it
    # fast, one collection per (stage, kind), is asserted by the test above; this bound is a
    # loose guard against a drawing many times slower.
    t0 = time.process_time()
    plot_timeline(tl, tmp_path / "big.png")
    assert time.process_time() - t0 < 15.0
    assert_png(tmp_path / "big.png")
    labels = _timeline_figure(tl).axes[0].get_yticklabels()
    assert len(labels) == 64


def test_empty_timeline_gives_empty_chart(tmp_path: Path) -> None:
    """Documented choice: no events is not an error, the chart says "no events"."""
    tl = Timeline([], 0.0, 3)
    ax = _timeline_figure(tl).axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["stage 0", "stage 1", "stage 2"]
    assert "no events" in [t.get_text() for t in ax.texts]
    assert_png(plot_timeline(tl, tmp_path / "empty.png"), min_bytes=1_000)


def test_dict_timeline_and_unknown_kind_accepted() -> None:
    tl = {
        "events": [
            {"stage": 0, "kind": "fwd", "micro_batch": 0, "start_s": 0.0, "end_s": 0.01},
            {"stage": 1, "kind": "recompute", "micro_batch": 0, "start_s": 0.01, "end_s": 0.02},
        ],
        "step_s": 0.02,
        "num_stages": 2,
    }
    fig = _timeline_figure(tl)
    assert len(fig.axes[0].collections) == 2
    assert "other" in [t.get_text() for t in fig.legends[0].get_texts()]


@pytest.mark.parametrize(
    ("events", "num_stages", "message"),
    [
        ([Event(2, "fwd", 0, 0.0, 0.1)], 2, "stage 2 is outside 0..1"),
        ([Event(0, "fwd", 0, 0.2, 0.1)], 1, "before start_s"),
        ([Event(0, "fwd", 0, 0.0, float("nan"))], 1, "end_s must be finite"),
        ([], 0, "num_stages must be a positive integer"),
    ],
)
def test_bad_timeline_rejected(events: list[Event], num_stages: int, message: str) -> None:
    with pytest.raises(BadArgumentError, match=message):
        _timeline_figure(Timeline(events, 0.1, num_stages))


def test_missing_field_named() -> None:
    with pytest.raises(BadArgumentError, match="timeline event 0: missing field 'end_s'"):
        _timeline_figure(
            {
                "events": [{"stage": 0, "kind": "fwd", "micro_batch": 0, "start_s": 0.0}],
                "step_s": 1.0,
                "num_stages": 1,
            }
        )


def test_measured_vs_simulated(tmp_path: Path) -> None:
    out = plot_measured_vs_simulated(gpipe(4, 8), gpipe(2, 8), tmp_path / "cmp.png")
    assert_png(out)


def epoch_rows() -> list[EpochRow]:
    return [
        EpochRow(e, 100.0 + 20 * e, max(1, 8 >> (e // 3)), 1 << min(3, e // 3), 3 * e)
        for e in range(10)
    ]


def test_epochs_png_with_baseline(tmp_path: Path) -> None:
    out = plot_epochs(epoch_rows(), tmp_path / "sub" / "epochs.png", "freeze", 120.0)
    assert out == tmp_path / "sub" / "epochs.png"
    assert_png(out)


def test_epochs_accepts_dicts_in_any_order() -> None:
    rows = [vars(r) for r in reversed(epoch_rows())]
    ax, right = _epochs_figure(rows, baseline_samples_per_s=150.0).axes
    heights = [b.get_height() for b in ax.patches]
    assert heights == [r.samples_per_s for r in epoch_rows()]  # sorted by epoch
    assert [list(line.get_ydata()) for line in right.get_lines()] == [
        [r.stages for r in epoch_rows()],
        [r.replicas for r in epoch_rows()],
        [r.frozen_layers for r in epoch_rows()],
    ]
    assert any(line.get_linestyle() == "--" for line in ax.get_lines())  # baseline


def test_epochs_empty_and_bad(tmp_path: Path) -> None:
    assert_png(plot_epochs([], tmp_path / "none.png"), min_bytes=1_000)
    with pytest.raises(BadArgumentError, match="epoch row 0: missing field 'replicas'"):
        _epochs_figure([{"epoch": 0, "samples_per_s": 1.0, "stages": 1, "frozen_layers": 0}])


def test_unwritable_path_raises_output_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(OutputError, match="file: is a regular file, not a directory"):
        plot_timeline(gpipe(1, 1), blocker / "step.png")
    with pytest.raises(OutputError, match="is a directory"):
        plot_epochs(epoch_rows(), tmp_path)


# --------------------------------------------------------------------------- plot sets


def plot_command(kind: str, tmp_path: Path, plots: Path) -> list[str]:
    """`report --plot` of a recorded run, or `preview --plot` of the demo's cluster."""
    if kind == "report":
        from test_report import elastic_records, write_run

        return ["report", str(write_run(tmp_path / "run", elastic_records())), "--plot", str(plots)]
    from test_preview_band import FLAGS, PROFILE

    return ["preview", "--profile", PROFILE, *FLAGS, "--epochs", "4", "--plot", str(plots)]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["report", "preview"])
def test_a_plot_set_that_cannot_be_finished_changes_no_plot(kind, tmp_path, monkeypatch, capsys):
    """Eighth round: a full disk (or Ctrl-C) during `--plot DIR` left the first plots new and
    the rest old, each file whole but the set mixed. The second figure's write fails here:
    every plot of an earlier --plot stays byte for byte, and no temporary file is left."""
    import errno
    import os

    import cli

    plots = tmp_path / "plots"
    argv = plot_command(kind, tmp_path, plots)
    assert cli.main(argv) == 0
    names = sorted(p.name for p in plots.iterdir())
    assert len(names) >= 2 and all(n.endswith(".png") for n in names)
    # What an earlier --plot left: contents no new figure can equal.
    before = {name: f"an earlier {name}".encode() for name in names}
    for name, content in before.items():
        (plots / name).write_bytes(content)
    syncs, real_fsync = [], os.fsync

    def disk_full_on_the_second(fd: int) -> None:
        syncs.append(fd)
        if len(syncs) == 2:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", disk_full_on_the_second)
    capsys.readouterr()
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("pipeplan: error: ")
    assert "No space left on device" in err[0]
    assert len(syncs) == 2  # the second figure's write was the one that failed
    assert {p.name: p.read_bytes() for p in plots.iterdir()} == before


@pytest.mark.timeout(60)
@pytest.mark.parametrize("stop", ["full disk", "ctrl-c"])
@pytest.mark.parametrize("kind", ["report", "preview"])
def test_a_plot_set_that_is_not_written_leaves_no_new_folder(
    kind, stop, tmp_path, monkeypatch, capsys
):
    """Found by the fifteenth round: `report --plot DIR` and `preview --plot DIR` on a full
    disk exited 2 with one correct line but left DIR, which they had created, empty. The
    folders a failed set made go with it (Ctrl-C too); a folder that was there stays."""
    import errno
    import os

    import cli

    plots = tmp_path / "new" / "plots"
    argv = plot_command(kind, tmp_path, plots)
    before = sorted(tmp_path.rglob("*"))

    from pipeplan.errors import Interrupted

    def stopped(fd: int) -> None:
        if stop == "ctrl-c":
            raise Interrupted  # what the CLI's SIGINT handler raises
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", stopped)
    capsys.readouterr()
    assert cli.main(argv) == (130 if stop == "ctrl-c" else 2)
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1
    if stop == "full disk":
        assert err[0].startswith(f"pipeplan: error: {plots}/") and "No space left" in err[0]
    else:
        assert err == ["pipeplan: interrupted"]
    assert sorted(tmp_path.rglob("*")) == before
    (tmp_path / "new").mkdir()  # a folder that was there before the command stays
    assert cli.main(argv) == (130 if stop == "ctrl-c" else 2)
    assert sorted(tmp_path.rglob("*")) == sorted([*before, tmp_path / "new"])


def test_a_single_plot_that_is_not_written_leaves_no_new_folder(tmp_path, monkeypatch):
    """The same for one plot (`plot_timeline(..., "new/step.png")`): the folder made for it
    goes when its write fails."""
    import errno
    import os

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OutputError, match="No space left on device"):
        plot_timeline(gpipe(1, 1), tmp_path / "new" / "deeper" / "step.png")
    assert list(tmp_path.iterdir()) == []


def test_a_file_set_is_renamed_whole_under_ctrl_c(tmp_path, monkeypatch):
    """Ctrl-C between two renames of `write_files` is held until the set is in place, then
    acted on (KeyboardInterrupt here, where Python's own handler is installed)."""
    import os
    import signal

    from pipeplan import fileio

    targets = [tmp_path / "a.png", tmp_path / "b.png", tmp_path / "c.png"]
    for path in targets:
        path.write_bytes(b"old")
    real_replace = os.replace

    def interrupted_after_the_first(src, dst, **folders):
        real_replace(src, dst, **folders)
        os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(os, "replace", interrupted_after_the_first)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    with pytest.raises(KeyboardInterrupt):
        fileio.write_files((path, b"new " + path.name.encode()) for path in targets)
    assert [p.read_bytes() for p in targets] == [b"new a.png", b"new b.png", b"new c.png"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.png", "b.png", "c.png"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


@pytest.mark.parametrize("name", ["SIGTERM", "SIGHUP", "SIGUSR1"])
def test_a_file_set_is_renamed_whole_under_every_stop(tmp_path, monkeypatch, name):
    """Found by the sixtieth round: only Ctrl-C was held between the renames of `write_files`;
    a SIGTERM there (the CLI raises `Stopped`) left two new plots, the old rest and the old
    set's stale plot. Every stop is held until the set is in place, then acted on."""
    import os
    import signal

    from pipeplan import fileio
    from pipeplan.errors import Stopped

    signum = getattr(signal, name)
    targets = [tmp_path / "a.png", tmp_path / "b.png", tmp_path / "c.png"]
    for path in [*targets, tmp_path / "d.png"]:
        path.write_bytes(b"old")
    real_replace = os.replace

    def stopped_after_the_first(src, dst, **folders):
        real_replace(src, dst, **folders)
        if src.endswith(".tmp"):  # a new plot in place (not the stale one moved aside)
            os.kill(os.getpid(), signum)

    def stop(signum, frame):
        raise Stopped(signum)  # what the CLI's handler raises

    monkeypatch.setattr(os, "replace", stopped_after_the_first)
    before = signal.signal(signum, stop)
    try:
        with pytest.raises(Stopped):
            contents = ((path, b"new " + path.name.encode()) for path in targets)
            fileio.write_files(contents, stale=[tmp_path / "d.png"])
        assert signal.getsignal(signum) is stop
    finally:
        signal.signal(signum, before)
    assert [p.read_bytes() for p in targets] == [b"new a.png", b"new b.png", b"new c.png"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.png", "b.png", "c.png"]


KILLED_MID_SET = """
import os, signal, sys
from pipeplan import fileio

def contents():
    yield sys.argv[1] + "/a.png", b"new a"
    os.kill(os.getpid(), signal.SIGKILL)  # as the OOM killer does: the set half staged
    yield sys.argv[1] + "/b.png", b"new b"

fileio.write_files(contents(), user_output=True)
"""


def test_a_killed_sets_temporaries_go_with_the_next_write_into_its_folder(tmp_path):
    """Found by the sixtieth round: SIGKILL as `report --plot DIR` staged its set left a
    hidden `.NAME.png.XXXXXXXX.tmp` for each plot staged, which no later `--plot DIR`
    removed. The next write into the folder removes those of a process that is gone; a live
    process's (it may be staging its own set) stay."""
    import os
    import signal
    import subprocess
    import sys

    from pipeplan import fileio
    from pipeplan.spawn import owner_tag

    plots = tmp_path / "plots"
    plots.mkdir()
    root = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": root}
    killed = subprocess.run(
        [sys.executable, "-c", KILLED_MID_SET, str(plots)], env=env, cwd=tmp_path, timeout=60
    )
    assert killed.returncode == -signal.SIGKILL
    (left,) = plots.iterdir()
    assert left.name.startswith(".a.png.") and left.name.endswith(".tmp")
    live = plots / f".b.png.{owner_tag()}-abcdefgh.tmp"  # this process's own
    live.write_bytes(b"staged")
    fileio.write_files([(plots / "a.png", b"a")], user_output=True)
    assert sorted(p.name for p in plots.iterdir()) == sorted(["a.png", live.name])


@pytest.mark.timeout(60)
def test_two_plot_sets_written_into_one_folder_at_once_leave_one_whole_set(tmp_path, monkeypatch):
    """Found by the sixty-first round: two `preview --plot DIR` (or `report --plot DIR`) at
    once each listed the stale plots to remove before the other had written, and DIR ended
    with the 2-epoch preview's set beside phase2..5-step.png of the 8-epoch one, a set
    neither wrote. A set holds the folder from that list to its last rename: the second
    waits, then replaces the first whole; no lock file is left."""
    import threading
    from types import SimpleNamespace

    from pipeplan import plots
    from pipeplan.plots import PNG_SIGNATURE, STAMP

    folder = tmp_path / "plots"
    listed, release, failures = threading.Event(), threading.Event(), []

    def figures(preview, shown, timelines, directory):  # drawn at once, marked by writer
        png = PNG_SIGNATURE + STAMP + preview.who.encode()
        for index in shown:
            yield directory / f"phase{index}-step.png", png
        if preview.who == "short":  # its stale plots listed (none yet): the other writes
            listed.set()
            release.wait(30)
        yield directory / "epochs.png", png

    def write(who, phases):
        preview = SimpleNamespace(who=who, plan=SimpleNamespace(phases=[None] * phases))
        try:
            plots.write_preview_plots(preview, [], folder)
        except BaseException as exc:
            failures.append(exc)

    monkeypatch.setattr(plots, "_preview_figures", figures)
    short = threading.Thread(target=write, args=("short", 2))
    short.start()
    assert listed.wait(30)
    long = threading.Thread(target=write, args=("long", 6))
    long.start()
    long.join(3)  # it waits for the folder now; it wrote its set at once before
    release.set()
    short.join(30)
    long.join(30)
    assert not failures, failures
    written = {p.name: p.read_bytes().removeprefix(PNG_SIGNATURE + STAMP) for p in folder.iterdir()}
    shorts = {f"phase{i}-step.png": b"short" for i in range(2)} | {"epochs.png": b"short"}
    longs = {f"phase{i}-step.png": b"long" for i in range(6)} | {"epochs.png": b"long"}
    assert written in (shorts, longs), written


@pytest.mark.timeout(60)
def test_a_plot_set_waits_for_another_into_its_folder_a_bounded_time(tmp_path, monkeypatch, capsys):
    """The sixty-first round's fix: a `--plot DIR` whose folder another set holds past
    FOLDER_WAIT_S is refused in one line naming DIR, nothing written."""
    import cli
    from pipeplan import fileio

    plots = tmp_path / "plots"
    plots.mkdir()
    monkeypatch.setattr(fileio, "FOLDER_WAIT_S", 0.3)
    with fileio.folder_locked(plots, "its plots"):  # another writer's set, mid-way
        assert cli.main(plot_command("preview", tmp_path, plots)) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [
        f"pipeplan: error: {plots}: another pipeplan process has been writing its plots there "
        "for 0.3 s; run this command again once it has finished, or give another folder"
    ]
    assert list(plots.iterdir()) == []
    assert cli.main(plot_command("preview", tmp_path, plots)) == 0


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["report", "preview"])
def test_a_plot_set_removes_the_stale_plots_of_the_set_it_replaces(
    kind, tmp_path, monkeypatch, capsys
):
    """Ninth round: `preview --plot D` of a 6-phase plan, then of a 3-phase one, left
    phase3..5-step.png of the first beside the second. Plots of the same set (its naming
    pattern, and a PNG's signature) that the new set does not write go with it, in the same
    all-or-nothing step: a failed rename puts them back. Files the pattern does not name, and
    a user's text file it does name (tenth round), stay."""
    import os

    import cli

    plots = tmp_path / "plots"
    argv = plot_command(kind, tmp_path, plots)
    assert cli.main(argv) == 0
    fresh = sorted(p.name for p in plots.iterdir())
    suffix = "measured-vs-simulated" if kind == "report" else "step"
    stale = [f"phase{n}-{suffix}.png" for n in (7, 12)]  # an earlier, longer set's
    others = [f"phase7-{suffix}.png.bak", f"myphase7-{suffix}.png", "phase-step.png", "a.txt"]
    # Tenth round: a user's text file named like a stale plot was removed with the set.
    others.append(f"phase6-{suffix}.png")
    assert not set(stale + others) & set(fresh)
    earlier = (plots / fresh[0]).read_bytes()  # a plot of the earlier set, as pipeplan wrote it
    # Eleventh round: a user's own PNG named like a stale plot went too (only the PNG
    # signature was checked): only PNGs pipeplan wrote (its stamp) are a set's plots.
    others.append(f"phase8-{suffix}.png")
    users_png = b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\rIHDR" + bytes(40)
    for name in stale + others:
        mine = users_png if name == f"phase8-{suffix}.png" else b"my notes, not a plot"
        (plots / name).write_bytes(earlier if name in stale else mine)
    (plots / f"phase9-{suffix}.png").mkdir()  # not a plot pipeplan wrote: kept
    others.append(f"phase9-{suffix}.png")
    real_replace = os.replace

    def a_rename_into_place_fails(src, dst, **folders):
        if str(src).endswith(".tmp"):
            raise OSError(5, "Input/output error")
        real_replace(src, dst, **folders)

    monkeypatch.setattr(os, "replace", a_rename_into_place_fails)
    capsys.readouterr()
    assert cli.main(argv) == 2
    assert "Input/output error" in capsys.readouterr().err
    assert sorted(p.name for p in plots.iterdir()) == sorted(fresh + stale + others)
    assert all((plots / name).read_bytes() == earlier for name in stale)
    monkeypatch.setattr(os, "replace", real_replace)
    assert cli.main(argv) == 0
    assert sorted(p.name for p in plots.iterdir()) == sorted(fresh + others)


def test_a_step_of_more_boxes_than_a_chart_holds_draws_its_first_stages(caplog, monkeypatch):
    """MAX_GANTT_BOXES (here made 2,000): a step of more draws its first `gantt_rows` stages,
    and the title and an INFO line say so (drawn whole, 1,000 × 1,024 took 216 s, 7.3 GB)."""
    monkeypatch.setattr(simulate, "MAX_GANTT_BOXES", 2_000)
    tl = gpipe(40, 16)
    drawn = gantt_rows(40, 16)
    assert drawn == 2_000 // (4 * 16 + 2) == 30
    with caplog.at_level(logging.INFO, logger="pipeplan.plots"):
        fig = _timeline_figure(tl, "phase 0")
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == [f"stage {s}" for s in range(drawn)]
    assert fig.get_suptitle() == "phase 0, stages 0–29 of 40 drawn"
    assert sum(len(c.get_paths()) for c in ax.collections) <= 2_000
    assert "draws stages 0–29 only (at most 2,000 boxes a chart)" in caplog.text
    assert gantt_rows(1, 1024) == 1  # one stage at least, whatever its micro-batches


def test_a_small_chart_draws_every_stage_as_before(caplog):
    with caplog.at_level(logging.INFO, logger="pipeplan.plots"):
        fig = _timeline_figure(gpipe(6, 8), "phase 1")
    assert fig.get_suptitle() == "phase 1"
    assert len(fig.axes[0].get_yticklabels()) == 6 == gantt_rows(6, 8)
    assert "Gantt" not in caplog.text


def test_the_timeline_of_a_many_stage_phase_holds_the_drawn_stages_only(tmp_path):
    """`plan.phase_timelines` records the stages a chart draws, not 300 × 256 × 4 events
    (1,000 × 1,024 held millions: 7.3 GB); the chart of it is written."""
    profile = synthetic_profile(
        transformer_layers(num_blocks=300, hidden=64, seq_len=16, vocab=1000),
        name="syn300",
        hidden=64,
    )
    cluster = cluster_from_flags(nodes=1, devices_per_node=302, device_memory="80GiB")
    plan = make_plan(
        profile,
        cluster,
        global_batch=256,
        samples=256,
        epochs=1,
        freeze=no_freezing(1),
        pins=Pins(num_stages=300, micro_batches=256),
    )
    layout = plan.phases[0].layout
    assert (layout.num_stages, layout.micro_batches) == (300, 256)
    drawn = gantt_rows(300, 256)
    (timeline,) = phase_timelines(profile, plan)
    assert timeline.num_stages == 300
    assert timeline.step_s == pytest.approx(plan.phases[0].step_s, rel=1e-8)
    assert 0 < len(timeline.events) <= MAX_GANTT_BOXES
    assert {e.stage for e in timeline.events} == set(range(drawn))
    t0 = time.process_time()
    plot_timeline(timeline, tmp_path / "phase0-step.png", "phase 0")
    assert time.process_time() - t0 < 15.0
    assert_png(tmp_path / "phase0-step.png")


def test_plots_where_matplotlib_cannot_keep_its_cache_print_no_line_of_its_own(tmp_path: Path):
    """Found by the ninetieth round: under a read-only HOME (here MPLCONFIGDIR=/dev/null, which
    matplotlib cannot make a folder of) `preview --plot` printed matplotlib's two lines about
    the temporary cache folder it made before `wrote 4 plots`. An API caller's matplotlib
    logger is left as it was."""
    import os
    import subprocess
    import sys

    import cli
    from pipeplan import log

    root = Path(cli.__file__).resolve().parent
    profile = root / "profiles" / "bert-tiny@cpu-1t.json"
    argv = ["preview", "--profile", str(profile), "--epochs", "3", "--samples", "2000"]
    env = {**os.environ, "MPLCONFIGDIR": "/dev/null"}
    done = subprocess.run(
        [sys.executable, str(root / "cli.py"), *argv, "--plot", str(tmp_path / "p")],
        capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == [f"wrote 4 plots to {tmp_path / 'p'}"], done.stderr
    quiet = logging.getLogger("matplotlib")
    before = quiet.handlers[:]
    with log.setup_restored():
        log.setup()
        assert any(isinstance(h, logging.NullHandler) for h in quiet.handlers)
    assert quiet.handlers == before
