"""Charts of a pipeline × data-parallel training run, written as PNG files.

* `plot_timeline`: Gantt chart of one training step (one row per pipeline stage) from a
  simulated or measured timeline.
* `plot_measured_vs_simulated`: two such charts stacked on a shared time axis.
* `plot_epochs`: per-epoch throughput with the plan shape (stages, replicas, frozen layers),
  and below it the held-out loss and accuracy when the rows carry them (a run's, not a preview's).

Inputs are duck-typed: a timeline is anything with `events`, `step_s` and `num_stages`, an event
anything with `stage`, `kind`, `micro_batch`, `start_s` and `end_s`, an epoch row anything with
`epoch`, `samples_per_s`, `stages`, `replicas` and `frozen_layers`, and optionally `eval_loss` and
`eval_accuracy` (None where an epoch has none); attributes and dict keys both work. Nothing here
imports `pipeplan.simulate`.

Empty input is not an error: a timeline without events (or an empty list of epochs) gives the
usual axes with a "no events"/"no epochs" note, so a report can always be written.

Figures are built with the object-oriented `matplotlib.figure.Figure` API and rendered by Agg,
so there is no pyplot global state and no display is needed.
"""

from __future__ import annotations

import io
import logging
import math
import os
import re
import stat
from collections import defaultdict
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import matplotlib
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator, PercentFormatter

from pipeplan import simulate
from pipeplan.errors import BadArgumentError
from pipeplan.fileio import (
    check_outside_runs,
    check_writable,
    folder_locked,
    new_directories,
    write_atomic,
    write_files,
)

DPI = 120
FIG_WIDTH_IN = 12.0

# kind -> (legend label, bar colour, text colour); the order is the legend order.
KINDS: dict[str, tuple[str, str, str]] = {
    "fwd": ("forward", "#4C72B0", "white"),
    "bwd": ("backward", "#DD8452", "black"),
    "send": ("transfer", "#8C8C8C", "white"),
    "allreduce": ("all-reduce", "#55A868", "white"),
    "optimizer": ("optimizer", "#C44E52", "white"),
}
OTHER = ("other", "#BBBBBB", "black")
# Communication may overlap computation on the same stage, so it gets its own lane in each row
# (row centred on the stage index, y axis inverted): (ymin, height) in data units.
COMPUTE_LANE = (-0.40, 0.52)
COMM_LANE = (0.15, 0.25)
COMM_KINDS = frozenset({"send", "allreduce"})
MAX_LABELS = 2000  # more micro-batch labels than this would be unreadable and slow: draw none
LABEL_PX_PER_CHAR = 7.0

log = logging.getLogger("pipeplan.plots")


# --------------------------------------------------------------------------- public API


def plot_timeline(timeline: Any, path: str | Path, title: str = "") -> Path:
    """Write a Gantt chart of one step (rows = stages, stage 0 at top) to `path` as PNG."""
    return _save(timeline_png(timeline, title), path)


def timeline_png(timeline: Any, title: str = "") -> bytes:
    """`plot_timeline`'s PNG, for a set written with `write_files`."""
    return _png(_timeline_figure(timeline, title))


def plot_measured_vs_simulated(
    measured: Any, simulated: Any, path: str | Path, title: str = ""
) -> Path:
    """Write two stacked Gantt charts, measured above simulated, sharing the time axis."""
    return _save(comparison_png(measured, simulated, title), path)


def comparison_png(measured: Any, simulated: Any, title: str = "") -> bytes:
    """`plot_measured_vs_simulated`'s PNG, for a set written with `write_files`."""
    return _png(_comparison_figure(measured, simulated, title))


def plot_epochs(
    rows: Iterable[Any],
    path: str | Path,
    title: str = "",
    baseline_samples_per_s: float | None = None,
) -> Path:
    """Write the per-epoch chart: throughput bars (left), stages/replicas/frozen layers (right);
    below them held-out loss and accuracy, when any row has them.

    `baseline_samples_per_s`, when given, is drawn as a dashed horizontal line (e.g. the
    throughput without freezing).
    """
    return _save(epochs_png(rows, title, baseline_samples_per_s), path)


def epochs_png(
    rows: Iterable[Any], title: str = "", baseline_samples_per_s: float | None = None
) -> bytes:
    """`plot_epochs`' PNG, for a set written with `write_files`."""
    return _png(_epochs_figure(rows, title, baseline_samples_per_s))


def _plain_text(build: Any) -> Any:
    """Figures whose texts are drawn as written: a model or run name is the user's, and
    matplotlib would parse `$...$` in it as math (an unknown macro raised mid-plot)."""

    def plain(*args: Any, **kwargs: Any) -> Any:
        with matplotlib.rc_context({"text.parse_math": False}):
            return build(*args, **kwargs)

    plain.__doc__, plain.__name__ = build.__doc__, build.__name__
    return plain


@contextmanager
def checked_targets(paths: Sequence[Path]) -> Iterator[None]:
    """Every plot a command will write can be written, checked before the first is drawn
    (then `write_files` in the block writes the set all or nothing); the folders made for
    them go again if the block fails (a full disk, Ctrl-C), so a failed `--plot DIR` leaves
    no empty DIR. Each folder is held for the block (`folder_locked`): another command's set
    into it waits, so the stale plots listed in the block are still the folder's at the
    renames.

        with checked_targets(targets):
            return write_files(figures(), stale_plots(...))
    """
    for path in paths:
        check_outside_runs(path)  # before a folder is made in a run directory
    with ExitStack() as made:
        folders = list(dict.fromkeys(path.parent for path in paths))
        for folder in folders:
            made.enter_context(new_directories(folder))
        for folder in sorted(folders):  # in one order: two writers never wait on each other
            made.enter_context(folder_locked(folder, "its plots"))
        for path in paths:
            check_writable(path)
        yield


def stale_plots(directory: Path, pattern: str, written: Collection[Path]) -> list[Path]:
    r"""The plots of an earlier set in `directory` that this one (`written`) does not replace:
    files whose whole name `pattern` matches, so a 3-phase preview removes phase3..5-step.png
    of a 6-phase one (`write_files(..., stale=...)`) and nothing the pattern does not name.
    Plain files holding a PNG pipeplan wrote only (`_pipeplan_png`): a link, a folder, a
    user's text file or own PNG of that name is not a plot of the set, and stays.

        stale_plots(Path("plots"), r"phase[0-9]+-step\.png", {Path("plots/phase0-step.png")})
    """
    regex = re.compile(pattern)
    return sorted(
        path
        for path in directory.iterdir()
        if regex.fullmatch(path.name)
        and path not in written
        and not path.is_symlink()
        and path.is_file()
        and _pipeplan_png(path)
    )


# Every plot pipeplan writes names it as its software (a PNG text chunk, which matplotlib puts
# right after the header): a stale plot is removed only when it is one of pipeplan's.
SOFTWARE = "pipeplan"
STAMP = b"tEXtSoftware\x00" + SOFTWARE.encode()
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"  # the 8 bytes every PNG file starts with
HEADER_BYTES = 64  # signature, IHDR chunk, the stamp's length and the stamp


def _pipeplan_png(path: Path) -> bool:
    """Whether `path` is a PNG pipeplan wrote: a user's text file, or a user's own PNG, named
    like a stale plot stays (an unreadable file too)."""
    try:  # opened without blocking: a FIFO by that name is not waited on forever
        with os.fdopen(os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC), "rb") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                return False
            head = handle.read(HEADER_BYTES)
    except OSError:
        return False
    return head.startswith(PNG_SIGNATURE) and STAMP in head


# --------------------------------------------------------------------------- timeline


@_plain_text
def _timeline_figure(timeline: Any, title: str = "") -> Figure:
    """The Gantt figure of `plot_timeline`, without writing it (tests inspect it)."""
    tl = _Timeline.of(timeline, "timeline")
    fig = Figure(figsize=(FIG_WIDTH_IN, _gantt_height_in(tl.drawn)), layout="constrained")
    ax = fig.add_subplot()
    _draw_gantt(ax, tl, _x_range_ms([tl]))
    ax.set_xlabel("time (ms)")
    step_label = f"step end ({tl.step_s * 1e3:.4g} ms)" if tl.step_s > 0 else "step end"
    _gantt_legend(fig, step_label, tl)
    title = ", ".join(part for part in (title, tl.cut_note()) if part)
    if title:
        fig.suptitle(title)
    return fig


@_plain_text
def _comparison_figure(measured: Any, simulated: Any, title: str = "") -> Figure:
    m = _Timeline.of(measured, "measured timeline")
    s = _Timeline.of(simulated, "simulated timeline")
    heights = [_gantt_height_in(m.drawn), _gantt_height_in(s.drawn)]
    fig = Figure(figsize=(FIG_WIDTH_IN, sum(heights)), layout="constrained")
    ax_m, ax_s = fig.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": heights})
    x_range = _x_range_ms([m, s])
    _draw_gantt(ax_m, m, x_range)
    _draw_gantt(ax_s, s, x_range)
    for ax, tl, what in ((ax_m, m, "measured"), (ax_s, s, "simulated")):
        head = f"{what}: step {tl.step_s * 1e3:.4g} ms"
        ax.set_title(", ".join(p for p in (head, tl.cut_note()) if p), loc="left", fontsize=10)
    ax_s.set_xlabel("time (ms)")
    _gantt_legend(fig, "step end", m, s)
    if title:
        fig.suptitle(title)
    return fig


class _Event:
    __slots__ = ("end_ms", "kind", "micro_batch", "stage", "start_ms")

    def __init__(self, raw: Any, where: str, num_stages: int) -> None:
        stage = _get(raw, "stage", where)
        if isinstance(stage, bool) or not isinstance(stage, int):
            raise BadArgumentError(f"{where}: stage must be an integer, got {stage!r}")
        if not 0 <= stage < num_stages:
            raise BadArgumentError(f"{where}: stage {stage} is outside 0..{num_stages - 1}")
        kind = _get(raw, "kind", where)
        self.stage = stage
        self.kind = str(getattr(kind, "value", kind))  # also accept an Enum of kinds
        self.micro_batch = _get(raw, "micro_batch", where)
        start = _finite(_get(raw, "start_s", where), f"{where}: start_s")
        end = _finite(_get(raw, "end_s", where), f"{where}: end_s")
        if end < start:
            raise BadArgumentError(f"{where}: end_s {end} is before start_s {start}")
        self.start_ms = start * 1e3
        self.end_ms = end * 1e3


class _Timeline:
    """A step's events of the stages drawn: the first `drawn` of `num_stages` (`gantt_rows`
    of the step's micro-batches, the largest micro-batch index + 1)."""

    def __init__(
        self, events: list[_Event], step_s: float, num_stages: int, drawn: int | None = None
    ) -> None:
        self.drawn = num_stages if drawn is None else drawn
        self.events = [e for e in events if e.stage < self.drawn]
        self.step_s = step_s
        self.num_stages = num_stages

    @classmethod
    def of(cls, raw: Any, what: str) -> _Timeline:
        num_stages = _get(raw, "num_stages", what)
        if isinstance(num_stages, bool) or not isinstance(num_stages, int) or num_stages < 1:
            raise BadArgumentError(f"{what}: num_stages must be a positive integer")
        step_s = _finite(_get(raw, "step_s", what), f"{what}: step_s")
        events = [
            _Event(e, f"{what} event {i}", num_stages)
            for i, e in enumerate(_get(raw, "events", what))
        ]
        numbered = [e.micro_batch for e in events if isinstance(e.micro_batch, int)]
        micro_batches = max(numbered, default=0) + 1
        drawn = simulate.gantt_rows(num_stages, micro_batches)
        if drawn < num_stages:
            log.info(
                "%s of %d stages × %d micro-batches: its Gantt chart draws stages 0–%d only "
                "(at most %s boxes a chart)",
                what,
                num_stages,
                micro_batches,
                drawn - 1,
                f"{simulate.MAX_GANTT_BOXES:,}",
            )
        return cls(events, step_s, num_stages, drawn)

    def cut_note(self) -> str:
        """What the chart title says when only the first stages are drawn, else ""."""
        if self.drawn == self.num_stages:
            return ""
        return f"stages 0–{self.drawn - 1} of {self.num_stages} drawn"


def _gantt_height_in(num_stages: int) -> float:
    return min(max(2.6, 1.3 + 0.32 * num_stages), 18.0)


def _x_range_ms(timelines: Sequence[_Timeline]) -> tuple[float, float]:
    lo = min([0.0] + [e.start_ms for t in timelines for e in t.events])
    hi = max([t.step_s * 1e3 for t in timelines] + [e.end_ms for t in timelines for e in t.events])
    if hi <= lo:
        hi = lo + 1.0
    pad = 0.01 * (hi - lo)
    return lo - pad, hi + pad


def _draw_gantt(ax: Axes, tl: _Timeline, x_range: tuple[float, float]) -> None:
    bars: dict[tuple[int, str], list[tuple[float, float]]] = defaultdict(list)
    for e in tl.events:
        bars[(e.stage, e.kind)].append((e.start_ms, e.end_ms - e.start_ms))

    # White separators help when bars are wide; with very many bars they would hide the colours.
    edge = 0.5 if len(tl.events) <= 150 * tl.drawn else 0.0
    for (stage, kind), xranges in bars.items():
        _, colour, _ = KINDS.get(kind, OTHER)
        y0, h = COMM_LANE if kind in COMM_KINDS else COMPUTE_LANE
        ax.broken_barh(
            xranges, (stage + y0, h), facecolors=colour, edgecolors="white", linewidths=edge
        )
    _label_micro_batches(ax, tl, x_range)

    if tl.step_s > 0:
        ax.axvline(tl.step_s * 1e3, color="black", linestyle="--", linewidth=1.2)
    if not tl.events:
        _note(ax, "no events")

    ax.set_xlim(*x_range)
    ax.set_ylim(tl.drawn - 0.5, -0.5)  # inverted: stage 0 at the top
    ax.set_yticks(range(tl.drawn))
    ax.set_yticklabels([f"stage {s}" for s in range(tl.drawn)], fontsize=9 if tl.drawn <= 24 else 6)
    ax.grid(axis="x", color="#DDDDDD", linewidth=0.6)
    ax.set_axisbelow(True)


def _label_micro_batches(ax: Axes, tl: _Timeline, x_range: tuple[float, float]) -> None:
    """Write the micro-batch number inside compute bars that are wide enough for it."""
    px_per_ms = 0.85 * FIG_WIDTH_IN * DPI / (x_range[1] - x_range[0])  # ~axes width in pixels
    labels = []
    for e in tl.events:
        if e.micro_batch is None or e.kind in COMM_KINDS:
            continue
        text = str(e.micro_batch)
        if (e.end_ms - e.start_ms) * px_per_ms >= LABEL_PX_PER_CHAR * len(text) + 4:
            labels.append((e, text))
    if len(labels) > MAX_LABELS:
        return
    y0, h = COMPUTE_LANE
    fontsize = 7 if tl.drawn <= 24 else 5
    for e, text in labels:
        ax.text(
            (e.start_ms + e.end_ms) / 2,
            e.stage + y0 + h / 2,
            text,
            ha="center",
            va="center",
            fontsize=fontsize,
            color=KINDS.get(e.kind, OTHER)[2],
            clip_on=True,
        )


def _gantt_legend(fig: Figure, step_label: str, *timelines: _Timeline) -> None:
    styles = list(KINDS.values())
    if any(e.kind not in KINDS for t in timelines for e in t.events):
        styles.append(OTHER)
    handles: list[Any] = [Patch(color=c, label=label) for label, c, _ in styles]
    handles.append(Line2D([], [], color="black", linestyle="--", label=step_label))
    _bottom_legend(fig, handles)


def _bottom_legend(fig: Figure, handles: list[Any]) -> None:
    """One row of legend entries below the axes, out of the data's and the title's way."""
    fig.legend(
        handles=handles, loc="outside lower center", ncol=len(handles), frameon=False, fontsize=8
    )


# --------------------------------------------------------------------------- epochs

EPOCH_FIELDS = ("epoch", "samples_per_s", "stages", "replicas", "frozen_layers")
# Per-epoch results a run's rows carry (None for an epoch without a held-out set): label, colour.
EVAL_FIELDS = {
    "eval_loss": ("held-out loss", "#DD8452"),
    "eval_accuracy": ("held-out accuracy", "#17BECF"),
}
THROUGHPUT_COLOUR = "#4C72B0"
MAX_BAR_LABELS = 40  # beyond this many epochs the "stages×replicas" labels would collide


@_plain_text
def _epochs_figure(
    rows: Iterable[Any], title: str = "", baseline_samples_per_s: float | None = None
) -> Figure:
    """The figure of `plot_epochs`, without writing it (tests inspect it)."""
    data = sorted((_epoch_row(r, i) for i, r in enumerate(rows)), key=lambda d: d["epoch"])
    epochs = [d["epoch"] for d in data]
    with_eval = any(d[f] is not None for d in data for f in EVAL_FIELDS)

    fig = Figure(figsize=(10.0, 7.6 if with_eval else 4.8), layout="constrained")
    if with_eval:
        ax, eval_ax = fig.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": [3, 2]})
    else:
        ax, eval_ax = fig.add_subplot(), None
    right = ax.twinx()
    bars = ax.bar(
        epochs,
        [d["samples_per_s"] for d in data],
        width=0.7,
        color=THROUGHPUT_COLOUR,
        alpha=0.85,
        label="throughput",
    )
    handles: list[Any] = [Patch(color=THROUGHPUT_COLOUR, alpha=0.85, label="throughput")]
    if baseline_samples_per_s is not None:
        base = _finite(baseline_samples_per_s, "baseline_samples_per_s")
        handles.append(
            ax.axhline(
                base,
                color="black",
                linestyle="--",
                linewidth=1.2,
                label=f"baseline {base:.4g} samples/s",
            )
        )
    for field, label, colour in (
        ("stages", "pipeline stages", "#C44E52"),
        ("replicas", "replicas", "#55A868"),
        ("frozen_layers", "frozen layers", "#8172B3"),
    ):
        (line,) = right.plot(
            epochs,
            [d[field] for d in data],
            drawstyle="steps-mid",
            marker="o",
            markersize=3,
            linewidth=1.8,
            color=colour,
            label=label,
        )
        handles.append(line)

    annotate = 0 < len(data) <= MAX_BAR_LABELS
    if annotate:  # plan shape "stages×replicas" above each bar
        for b, d in zip(bars, data, strict=True):
            ax.annotate(
                f"{d['stages']:g}×{d['replicas']:g}",
                (b.get_x() + b.get_width() / 2, b.get_height()),
                xytext=(0, 2),
                textcoords="offset points",
                ha="center",
                va="bottom",
                fontsize=7,
                color="#333333",
            )
    if not data:
        _note(ax, "no epochs")
        ax.set_xticks([])
    else:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))

    ax.set_xlabel("epoch" + ("  (bar labels: stages×replicas)" if annotate else ""))
    ax.set_ylabel("samples / s")
    right.set_ylabel("count")
    top = max([d["samples_per_s"] for d in data] + [baseline_samples_per_s or 0.0, 0.0])
    ax.set_ylim(0, 1.12 * top or 1.0)  # headroom for the bar labels
    right.set_ylim(0, 1.12 * max([d[f] for d in data for f in EPOCH_FIELDS[2:]] + [0.0]) or 1.0)
    right.yaxis.set_major_locator(MaxNLocator(integer=True))
    if eval_ax is not None:  # the epoch axis is labelled once, at the bottom
        handles += _draw_eval(eval_ax, data)
        eval_ax.set_xlabel(ax.get_xlabel())
        ax.set_xlabel("")
    _bottom_legend(fig, handles)
    if title:
        fig.suptitle(title)
    return fig


def _epoch_row(row: Any, index: int) -> dict[str, float | None]:
    where = f"epoch row {index}"
    data: dict[str, float | None] = {
        f: _finite(_get(row, f, where), f"{where}: {f}") for f in EPOCH_FIELDS
    }
    for f in EVAL_FIELDS:
        value = _get(row, f, where) if _has(row, f) else None
        data[f] = None if value is None else _finite(value, f"{where}: {f}")
    return data


def _draw_eval(ax: Axes, data: list[dict[str, float | None]]) -> list[Any]:
    """Held-out loss (left axis) and accuracy (right axis) per epoch, one point per epoch that
    has the value, exactly as recorded."""
    handles = []
    right = ax.twinx()
    for (field, (label, colour)), axis in zip(EVAL_FIELDS.items(), (ax, right), strict=True):
        points = [(d["epoch"], d[field]) for d in data if d[field] is not None]
        (line,) = axis.plot(
            [x for x, _ in points],
            [y for _, y in points],
            marker="o",
            markersize=4,
            linewidth=1.8,
            color=colour,
            label=label,
        )
        axis.set_ylabel(label)
        handles.append(line)
    right.yaxis.set_major_formatter(PercentFormatter(xmax=1.0))
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(axis="y", color="#DDDDDD", linewidth=0.6)
    return handles


# --------------------------------------------------------------------------- helpers


def _note(ax: Axes, text: str) -> None:
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", color="grey")


def _has(obj: Any, name: str) -> bool:
    return name in obj if isinstance(obj, Mapping) else hasattr(obj, name)


def _get(obj: Any, name: str, where: str) -> Any:
    """`obj.name` or `obj[name]`, with a one-line error naming what is missing."""
    if isinstance(obj, Mapping):
        if name in obj:
            return obj[name]
    elif hasattr(obj, name):
        return getattr(obj, name)
    raise BadArgumentError(f"{where}: missing field {name!r}")


def _finite(value: Any, what: str) -> float:
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise BadArgumentError(f"{what} must be a number, got {value!r}") from None
    if not math.isfinite(x):
        raise BadArgumentError(f"{what} must be finite, got {value!r}")
    return x


def _png(fig: Figure) -> bytes:
    """`fig` rendered as PNG."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, metadata={"Software": SOFTWARE})
    return buf.getvalue()


def _save(png: bytes, path: str | Path) -> Path:
    """Write `png` atomically to `path`, creating parent directories."""
    path = Path(path)
    with new_directories(path.parent):
        write_atomic(path, png)
    return path


# Gantt charts `preview --plot` draws at most: one per phase made a file per freeze point (the
# twenty-ninth round: 1,000 PNGs and six minutes for a schedule of 1,000 phases).
MAX_GANTT_PHASES = 16


def gantt_phases(count: int) -> list[int]:
    """The phases of `count` whose Gantt `preview --plot` draws: all up to MAX_GANTT_PHASES,
    else that many spread evenly, the first and the last among them (`gantt_phases(100)` →
    [0, 7, 13, …, 99]); each file keeps its phase's index."""
    if count <= MAX_GANTT_PHASES:
        return list(range(count))
    step = (count - 1) / (MAX_GANTT_PHASES - 1)
    return sorted({round(i * step) for i in range(MAX_GANTT_PHASES)})


def write_preview_plots(
    preview: Any, timelines: Sequence[Any], directory: str | Path
) -> list[Path]:
    """`pipeplan preview --plot DIR`: the Gantt of each phase of `gantt_phases` (`timelines`
    in that order: `plan.phase_timelines(profile, preview.plan, shown)`) and the per-epoch
    chart, written all or nothing (`write_files`)."""
    directory = Path(directory)
    shown = gantt_phases(len(preview.plan.phases))
    targets = [*(directory / f"phase{i}-step.png" for i in shown), directory / "epochs.png"]
    with checked_targets(targets):
        stale = stale_plots(directory, r"phase[0-9]+-step\.png", targets)
        figures = _preview_figures(preview, shown, timelines, directory)
        return write_files(figures, stale, user_output=True)


def _preview_figures(
    preview: Any, shown: list[int], timelines: Sequence[Any], directory: Path
) -> Iterator[tuple[Path, bytes]]:
    """`write_preview_plots`' set, each figure drawn just before it is written."""
    for index, timeline in zip(shown, timelines, strict=True):
        phase = preview.plan.phases[index]
        title = (
            f"phase {index}: {phase.epochs_said()}, "
            f"{phase.layout.frozen_layers} frozen, {phase.layout.label()}"
        )
        yield directory / f"phase{index}-step.png", timeline_png(timeline, title)
    baseline = preview.baseline
    steps = preview.plan.inputs.steps_per_epoch * preview.plan.inputs.global_batch
    title = (
        f"{preview.model}: predicted throughput per epoch "
        f"(speedup {preview.predicted_speedup:.2f}×)"
    )
    baseline_rate = steps / baseline.epoch_s if baseline.epoch_s else None
    yield directory / "epochs.png", epochs_png(preview.epochs, title, baseline_rate)
