"""The `pipeplan` command line: parse, call the library, print. No logic lives here."""

from __future__ import annotations

# First, before typer and rich (half a second of imports): a start interrupted by a signal
# ends with the command's line, not a traceback from inside an import (forty-eighth round).
from pipeplan.startup import (  # isort: skip
    STOP_SIGNALS,
    first_arrived,
    first_import_away,
    ignored,
    importing,
    stopped_by,
    watch_arrivals,
)

import _thread
import contextlib
import functools
import json
import logging
import math
import os
import pathlib
import resource
import shlex
import signal
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from types import FrameType
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table
from rich.text import Text

from pipeplan import log
from pipeplan.calls import dropped_stops_redelivered, one_call
from pipeplan.errors import (
    SHOWN,
    BadArgumentError,
    Interrupted,
    PipeplanError,
    Stopped,
    check_working_directory,
    excerpt,
    import_failure,
    memory_failure,
    quoted,
    tempdir_failure,
    working_directory_failure,
)
from pipeplan.exits import (
    adopt_orphans,
    command_process,
    end_children,
    exit_done,
    ignored_line,
    note_start,
    run_exit_callbacks,
)
from pipeplan.fileio import OUTPUT_WRITTEN
from pipeplan.formats import RunConfig
from pipeplan.formats.base import MAX_EPOCHS, Needs, printable, spaced
from pipeplan.inputs import PlanRequest, ProfileRequest
from pipeplan.openmp import check_openmp_environment
from pipeplan.options import SettingsFromFile, build, checked, options

app = typer.Typer(
    name="pipeplan",
    help="Plan, preview and run elastic pipeline × data-parallel training with layer freezing.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


def plain_console(stderr: bool = False) -> Console:
    """A console that prints text as given: `plain_console().print(table)`. rich read `[x]`
    in a path as markup (`--out 'p[x].json'` printed `wrote p.json`; `a[/x]` raised MarkupError
    after the file was written) and `:name:` as an emoji: found by the twentieth round."""
    return Console(stderr=stderr, markup=False, emoji=False)


log.bound_console_size()  # before the console below reads COLUMNS and LINES
console = plain_console(stderr=True)


def say(line: str | Text, to: Console | None = None) -> None:
    """One line on stderr (or `to`), whole: `say(f"wrote {out}")`. rich wrapped a line at the
    terminal's width (80 columns off a terminal), so a long path in `wrote PATH` came out
    split over several lines (found by the twentieth round); a script reading the line got a
    broken path. Bold parts come as styled Text (`Text.assemble(("1.20×", "bold"))`), never
    as markup, which would read a path's brackets."""
    (to or console).print(line, soft_wrap=True, markup=False, emoji=False)


_debug = {"on": False}

# typer ≥ 0.26 vendors click; older versions raise click's own exceptions.
try:
    import click

    _USAGE_ERRORS: tuple[type[Exception], ...] = (typer.TyperException, click.ClickException)
except ImportError:
    _USAGE_ERRORS = (typer.TyperException,)


def _print_version(wanted: bool) -> None:
    if wanted:
        from pipeplan import __version__

        print(f"pipeplan {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    debug: Annotated[
        bool,
        typer.Option(help="Show tracebacks instead of one-line errors (anywhere on the line)."),
    ] = False,
    version: Annotated[
        bool,
        typer.Option(
            "--version", help="Print the version and exit.", is_eager=True, callback=_print_version
        ),
    ] = False,
) -> None:
    _debug["on"] = debug
    log.setup(debug=debug)


@app.command()
def models() -> None:
    """List the built-in models."""
    from pipeplan.models import PRESETS

    table = Table("name", "family", "description")
    for name, preset in PRESETS.items():
        table.add_row(name, preset.family, preset.description)
    plain_console().print(table)


@app.command()
def schema(
    # pipeplan.formats.SCHEMAS' names, every one (the sixtieth round: 2 of 8 were left out).
    name: Annotated[
        str,
        typer.Argument(help="profile, cluster, plan, run, summary, report, checkpoint or data"),
    ],
) -> None:
    """Print the JSON Schema of a file format."""
    from pipeplan.formats import json_schema

    print(json.dumps(json_schema(name), indent=2))


@app.command()
@options(ProfileRequest)
def profile(given: dict[str, Any]) -> None:
    """Measure each layer's time and memory (and with --nproc the links) on this host."""
    request = build(ProfileRequest, given)  # first: a refused option needs no torch
    from pipeplan.profiler import profile_to_file

    columns = [TextColumn("profiling {task.description}"), BarColumn(), TimeRemainingColumn()]
    live = console.is_terminal  # a progress bar in a log file is noise
    with Progress(*columns, console=console, transient=True, disable=not live) as bar:
        task = bar.add_task(request.model, total=None)
        result = profile_to_file(
            request, progress=lambda done, total: bar.update(task, completed=done, total=total)
        )
    table = Table("layer", "kind", "params", "fwd ms", "bwd ms", "no-grad ms", "saved KiB/sample")
    # The rows show one micro-batch size, the largest every layer ran at; the sizes that did
    # not fit in memory are named (the profile records them as infeasible).
    sizes = result.settings.micro_batches
    fits = [
        m
        for m in sizes
        if all(t.feasible for layer in result.layers for t in layer.timings if t.micro_batch == m)
    ]
    shown = fits[-1] if fits else None
    for layer in result.layers:
        t = next((t for t in layer.timings if t.micro_batch == shown), None)
        ms = (lambda v: f"{v * 1e3:.2f}") if t else (lambda v: "infeasible")
        table.add_row(
            layer.name,
            layer.kind,
            f"{layer.params:,}",
            ms(t.fwd_s if t else 0),
            ms(t.bwd_s if t else 0),
            ms(t.fwd_nograd_s if t else 0),
            f"{layer.saved_bytes_per_sample / 1024:.0f}",
        )
    too_big = [str(m) for m in sizes if m not in fits]
    table.caption = (
        (f"times at micro-batch {shown}" if fits else "no micro-batch size fit in memory")
        + f", {result.device.name}, {result.device.threads} thread(s), {result.model.precision}"
        + (f"; infeasible (out of memory): {', '.join(too_big)}" if too_big else "")
    )
    plain_console().print(table)
    if result.comm:
        c = result.comm
        say(
            f"links ({c.backend}, {c.nproc} ranks): p2p {c.p2p.latency_s * 1e6:.0f} µs + "
            f"{c.p2p.bandwidth_bytes_per_s / 1e9:.2f} GB/s; all-reduce "
            f"{c.allreduce.latency_s * 1e6:.0f} µs + "
            f"{c.allreduce.bandwidth_bytes_per_s / 1e9:.2f} GB/s"
            + (
                f"; group rebuild {c.group_rebuild_s * 1e3:.1f} ms"
                if c.group_rebuild_s is not None
                else ""
            )
        )
    say(f"wrote {request.out}")


# --------------------------------------------------------------------------- plan / preview

Opt = typer.Option


@app.command()
@options(PlanRequest)
def plan(
    given: dict[str, Any],
    out: Annotated[str, Opt("--out", "-o", help="Plan JSON to write.")],
) -> None:
    """Write the elastic plan (one layout per freeze point) as JSON."""
    from pipeplan.fileio import check_writable, write_atomic
    from pipeplan.formats import dumps
    from pipeplan.freeze import schedule_file
    from pipeplan.plan import make_plan

    schedule = schedule_file(given.get("freeze_schedule"))  # a list is no file
    check_writable(out, inputs=[given.get("profile"), given.get("cluster"), schedule])
    args = build(PlanRequest, given).resolve()
    result = make_plan(args.profile, args.cluster, **args.kwargs())
    write_atomic(out, dumps(result), user_output=True)
    args.warn(result)  # once the work is done: no warning line before an error line
    # On several nodes the rank map (the placement) decides which links are used: shown.
    several_nodes = args.cluster.nodes > 1
    for p in result.phases:
        ranks = f"ranks {_ranks_shown(p.layout.rank_map)}, " if several_nodes else ""
        say(
            f"{p.epochs_said()}: frozen {p.layout.frozen_layers}, "
            f"{p.layout.label()}, boundaries {list(p.layout.boundaries)}, {ranks}"
            f"step {p.step_s * 1e3:.1f} ms"
        )
    say(f"wrote {out} (predicted total {result.predicted_total_s:.1f} s)")


# Rank-map cells a phase's line shows whole; a larger map is shown by its first and last
# replicas (the plan file holds it all): on 131,072 × 8 devices each line held a million
# ranks, and printing them took a fifth of the plan's time (the eighty-fifth round).
RANKS_SHOWN = 256


def _ranks_shown(rank_map: tuple[tuple[int, ...], ...]) -> str:
    """`[[0, 1], [2, 3]]`, or `[[0, 1], …, [62, 63]] (32 replicas)` past RANKS_SHOWN cells."""
    if len(rank_map) * len(rank_map[0]) <= RANKS_SHOWN or len(rank_map) < 3:
        return str([list(r) for r in rank_map])
    return f"[{list(rank_map[0])}, …, {list(rank_map[-1])}] ({len(rank_map)} replicas)"


@app.command()
@options(PlanRequest)
def preview(
    given: dict[str, Any],
    as_json: Annotated[bool, Opt("--json", help="Print one JSON object instead.")] = False,
    plot: Annotated[str | None, Opt(help="Directory for Gantt and per-epoch PNGs.")] = None,
) -> None:
    """Predict the elastic plan's speedup over the best static plan, epoch by epoch."""
    from pipeplan.fileio import check_not_stdout
    from pipeplan.formats import dumps
    from pipeplan.plan import make_preview, phase_timelines

    if plot is not None:  # before the work, as plan's --out
        check_not_stdout(plot, "--plot", "directory")
    args = build(PlanRequest, given).resolve()
    result = make_preview(args.profile, args.cluster, **args.preview_kwargs())
    if plot:
        from pipeplan.plots import gantt_phases, write_preview_plots

        shown = gantt_phases(len(result.plan.phases))
        timelines = phase_timelines(args.profile, result.plan, shown)
        written = write_preview_plots(result, timelines, plot)
        say(f"wrote {len(written)} plots to {plot}")
    args.warn(result.plan)  # once the work is done: no warning line before an error line
    if as_json:
        print(dumps(result), end="")
        return
    out = plain_console()
    first = result.cases[0]
    table = Table(
        "epoch",
        "frozen",
        "layout",
        "epoch s",
        "samples/s",
        title=f"{result.model} on {result.devices} devices"
        + (", best case" if first.case == "best" else ""),
    )
    for row in result.epochs:
        table.add_row(
            str(row.epoch),
            str(row.layout.frozen_layers),
            row.layout.label(),
            f"{row.epoch_s:.2f}",
            f"{row.samples_per_s:,.0f}",
        )
    out.print(table)
    b = result.baseline
    say(
        f"baseline (best static plan, nothing frozen): {b.layout.label()}, "
        f"{b.epoch_s:.2f} s/epoch, {b.total_s:.1f} s",
        out,
    )
    ablation = Table("configuration", "total s", "speedup", title="ablation")
    for row in result.ablation:
        ablation.add_row(row.name, f"{row.total_s:.1f}", f"{row.speedup:.2f}×")
    out.print(ablation)
    for line in preview_freeze_lines(result):
        say(line, out)


def preview_freeze_lines(result: Any) -> list[str | Text]:
    """The schedule the preview assumes and its speedup: one line for one schedule; for
    `--freeze auto` the band, one line per case and the range (the speedup in bold)."""
    from pipeplan.freeze import compact

    if len(result.cases) == 1:
        case = result.cases[0]
        return [
            f"freeze schedule: {case.assumes}; frozen layers per epoch: "
            f"{compact(case.freeze.frozen_layers)}",
            Text.assemble(
                f"predicted total {case.total_s:.1f} s, speedup ",
                (f"{case.predicted_speedup:.2f}×", "bold"),
                " over the baseline",
            ),
            *_slower_line(case.predicted_speedup),
        ]
    lines = ["--freeze auto, frozen layers per epoch:"]
    for case in result.cases:
        lines.append(
            f"  {case.case} case: {compact(case.freeze.frozen_layers)}: {case.total_s:.1f} s, "
            f"{case.predicted_speedup:.2f}× ({case.assumes})"
        )
    low = min(c.predicted_speedup for c in result.cases)
    high = max(c.predicted_speedup for c in result.cases)
    lines.append(
        Text.assemble(
            "predicted speedup ",
            (f"{low:.2f}×–{high:.2f}×", "bold"),
            " over the baseline; a run may freeze later than the later case (1.00× if it never "
            "freezes): `pipeplan run` prints its forecast each epoch",
        )
    )
    return lines + _slower_line(high)


def _slower_line(best: float) -> list[str]:
    """A line where every schedule priced is slower than the baseline (`best`, the highest
    speedup, below 1.00×): the frozen layers' forward costs more than their backward saved,
    or the packing costs more than it gains. Found by the forty-seventh round: "predicted
    speedup 0.65×–0.67×", its α bound called the best case, said nothing of a slowdown."""
    if best >= 0.995:  # shown as 1.00× or more
        return []
    return [
        f"freezing is predicted to slow this run: the schedules priced are at best {best:.2f}× "
        "the baseline's speed; --freeze none trains at the baseline's (1.00×)"
    ]


# --------------------------------------------------------------------------- demo


@app.command()
@checked
def demo(
    runs_dir: Annotated[str, Opt(help="Where the demo's run directories go.")] = "runs",
    pretrain_only: Annotated[
        bool,
        Opt(help="Only make (or check and reuse) the pretrained checkpoint, RUNS/demo-pretrained."),
    ] = False,
    epochs: Annotated[
        int,
        Opt(min=1, max=MAX_EPOCHS, help="Fine-tuning epochs of each run."),
        Needs(
            "pretrain_only",
            (False,),
            "it sets the fine-tuning runs' epochs, and --pretrain-only runs none",
        ),
    ] = 10,
) -> None:
    """Fine-tune a pretrained model statically and elastically, calibrate, compare speedups."""
    from executor.demo import pretrained_checkpoint, run_demo

    if pretrain_only:
        pretrained_checkpoint(runs_dir, say=say)
        return
    result = run_demo(runs_dir, say=say, epochs=epochs)
    s, e = result.static, result.elastic
    table = Table(
        "", "static baseline", "elastic", title="pipeplan demo: fine-tuning vit-digits, 2 ranks"
    )
    table.add_row("freeze", "none", "auto")
    table.add_row(
        "phases (frozen layers: layout, steps)",
        "\n".join(_phase_lines(s.summary)),
        "\n".join(_phase_lines(e.summary)),
    )
    table.add_row("wall time of the run", f"{s.wall_s:.1f} s", f"{e.wall_s:.1f} s")
    table.add_row(
        "training time (records)", f"{s.summary.total_s:.1f} s", f"{e.summary.total_s:.1f} s"
    )
    table.add_row(
        "held-out accuracy",
        f"{s.summary.final_eval_accuracy:.1%}",
        f"{e.summary.final_eval_accuracy:.1%}",
    )
    plain_console().print(table)
    stdout = plain_console()
    say(
        Text.assemble(
            "speedup measured: ",
            (f"{result.measured_speedup:.2f}×", "bold"),
            f" (wall time of the whole runs), {result.training_speedup:.2f}× (training time)",
        ),
        stdout,
    )
    say(
        f"speedup previewed: {result.previewed_speedup:.2f}× before running (α schedule); "
        f"for the schedule the run followed ({','.join(map(str, e.frozen_per_epoch))} frozen "
        f"layers per epoch): {result.followed_speedup:.2f}× raw profile, "
        f"{result.followed_calibrated_speedup:.2f}× calibrated",
        stdout,
    )
    say(f"runs, records and the calibrated profile are in {result.run_dir}")


def _phase_lines(summary) -> list[str]:
    return [
        f"{p.layout.frozen_layers}: {p.layout.label()} ({p.steps} steps)" for p in summary.phases
    ]


# --------------------------------------------------------------------------- calibrate


@app.command()
def calibrate(
    run_dirs: Annotated[list[str], typer.Argument(help="Run directories (runs/NAME).")],
    profile: Annotated[str, Opt(help="Profile to correct (left untouched).")],
    out: Annotated[str, Opt("--out", "-o", help="Calibrated profile to write.")],
) -> None:
    """Fit the cost model to measured runs; writes a profile with a calibration section."""
    from pipeplan.calibrate import calibrate_to_file

    with log.held():  # a notice (a torn last record) only once nothing else is refused
        c = calibrate_to_file(run_dirs, profile, out).calibration
    call = {kind: c.scales(kind)[0] for kind in ("fwd", "bwd", "nograd")}
    # Three significant digits, not decimals: 0.00132 was "0.001", which reads as the floor
    # (MIN_SCALE) calibrate refuses (the sixtieth round).
    say(
        f"compute scales per sample / per call: forward {c.fwd_scale:.3g} / {call['fwd']:.3g}, "
        f"backward {c.bwd_scale:.3g} / {call['bwd']:.3g}, no-grad {c.nograd_scale:.3g} / "
        f"{call['nograd']:.3g}; step overhead {c.step_overhead_s * 1e3:.2f} ms + "
        f"{c.input_s_per_sample * 1e6:.1f} µs/sample; "
        f"{c.micro_batch_overhead_s * 1e3:.2f} ms per micro-batch and stage"
    )
    if c.allreduce:
        say(
            f"all-reduce: {c.allreduce.latency_s * 1e6:.0f} µs + "
            f"{c.allreduce.bandwidth_bytes_per_s / 1e9:.2f} GB/s"
        )
    if c.group_rebuild_s is not None:
        say(f"layout change besides moving bytes: {c.group_rebuild_s * 1e3:.1f} ms")
    for name, why in c.not_fitted.items():
        say(f"not fitted: {name} — {why}")
    say(
        f"fit over {c.phases_used} phases, {c.steps_used} steps: step-time error median "
        f"{c.residual_median:.1%}, worst {c.residual_max:.1%}; wrote {out}"
    )


# --------------------------------------------------------------------------- run


@app.command()
@options(RunConfig)
def run(
    given: dict[str, Any],
    runs_dir: Annotated[
        str,
        Opt(help="Where run directories go."),
        Needs("resume", (None,), "a resumed run stays in its own directory, RUN"),
    ] = "runs",
    prepare_only: Annotated[
        bool, Opt(help="Only check and create runs/NAME/ for torchrun; print its command.")
    ] = False,
    resume: Annotated[
        str | None,
        Opt(
            help="Continue runs/NAME from its latest checkpoint, re-planned; with --nproc N on "
            "N ranks, with --epochs E for more epochs, with --collective-timeout S to wait "
            "longer; the run's other options come from its run.json (giving another value is "
            "refused)."
        ),
        SettingsFromFile(),  # the flags given beside it are checked against its run.json
    ] = None,
) -> None:
    """Train for real: elastic pipeline × data parallel with AutoFreeze and AutoCache."""
    from pipeplan.fileio import missing_folders

    if resume:
        if prepare_only:  # under torchrun a resume is `-m executor.launch RUN --resume`
            raise BadArgumentError(
                "--prepare-only prepares a new run; to resume under torchrun, start "
                f"`-m executor.launch {resume} --resume` on every node"
            )
        from executor.launch import resume_run

        run_dir, summary = resume_run(resume, given)
    else:
        cfg = build(RunConfig, given)  # first: a refused option needs no torch (2 s of CPU)
        from executor.launch import start_run

        made = missing_folders(pathlib.Path(runs_dir))  # what the run makes for itself
        run_dir, summary = start_run(cfg, runs_dir, prepare_only)
        if summary is None:  # --prepare-only: the command for every node
            # torchrun starts no rank until every node's agent has joined, for join_timeout
            # (torch's default 600 s): a missing node's wait is bounded as the ranks' is, by the
            # run's --collective-timeout (found by the fortieth round: with torch's default it
            # was 600 s of silence whatever the run's timeout).
            join = math.ceil(cfg.collective_timeout_s)
            print(
                f"torchrun --nnodes NODES --nproc-per-node RANKS_PER_NODE --node-rank NODE "
                f"--rdzv-backend c10d --rdzv-endpoint HOST0:29500 "
                f"--rdzv-conf=join_timeout={join},last_call_timeout=1 "
                f"-m executor.launch {shlex.quote(str(run_dir))}"  # a folder name with a space
            )
            _said_or_unprepared(run_dir, made)
            return
    table = Table(
        "phase",
        "frozen",
        "layout",
        "steps",
        "predicted ms",
        "measured ms",
        "error",
        title=f"run {summary.name}",
    )
    for p in summary.phases:

        def ms(v):
            return "-" if v is None else f"{v * 1e3:.1f}"

        error = "-" if p.error is None else f"{p.error:+.0%}"
        table.add_row(
            str(p.phase),
            str(p.layout.frozen_layers),
            p.layout.label(),
            str(p.steps),
            ms(p.predicted_step_s),
            ms(p.measured_step_s),
            error,
        )
    plain_console().print(table)
    from executor.task import MODEL_DIR

    acc = summary.final_eval_accuracy
    say(
        f"{summary.steps} steps in {summary.total_s:.1f} s; held-out accuracy "
        f"{'-' if acc is None else f'{acc:.1%}'}; records in {run_dir}, the trained "
        f"model in {run_dir / MODEL_DIR}"
    )


# --------------------------------------------------------------------------- export


@app.command()
def export(
    run_dir: Annotated[str, typer.Argument(help="Run directory written by `pipeplan run`.")],
    out: Annotated[str, Opt("--out", "-o", help="New directory for the transformers model.")],
    checkpoint: Annotated[
        str | None,
        Opt(help="Checkpoint to export, step-N.", show_default="the latest that verifies"),
    ] = None,
) -> None:
    """Write a run's model from a checkpoint as a transformers directory (from_pretrained)."""
    from executor.task import export_run
    from pipeplan.runfiles import check_summary

    path = export_run(run_dir, out, checkpoint, check_files=check_summary)
    # A text run's export carries its tokenizer (save_pretrained always writes this file).
    tokenizer = ", the run's tokenizer" if (path / "tokenizer_config.json").is_file() else ""
    say(f"wrote {path} (config.json, model.safetensors{tokenizer}: from_pretrained({path}))")


# --------------------------------------------------------------------------- report


@app.command()
def report(
    run_dir: Annotated[str, typer.Argument(help="Run directory written by `pipeplan run`.")],
    baseline: Annotated[
        str | None, Opt(help="Another run of the same model and global batch to compare with.")
    ] = None,
    as_json: Annotated[bool, Opt("--json", help="Print one JSON object instead.")] = False,
    plot: Annotated[str | None, Opt(help="Directory for measured-vs-simulated PNGs.")] = None,
) -> None:
    """Compare a run's measured step times with the planner's predictions, stage by stage."""
    from pipeplan.fileio import check_not_stdout
    from pipeplan.formats import dumps
    from pipeplan.report import make_report, write_report_plots

    if plot is not None:  # before the run is read, as plan's --out
        check_not_stdout(plot, "--plot", "directory")
    with log.held():  # a notice (a torn last record) only once nothing else is refused
        result = make_report(run_dir, baseline)
        written = write_report_plots(result, plot) if plot else []
    if plot:
        say(f"wrote {len(written)} plots to {plot}")
    if as_json:
        print(dumps(result), end="")
        return

    def ms(v):
        return "-" if v is None else f"{v * 1e3:.1f}"

    worlds = " then ".join(str(n) for n in result.worlds or [result.nproc])

    def pct(v):
        return "-" if v is None else f"{v:+.0%}"

    def cell(c):
        return f"{ms(c.predicted_s)} / {ms(c.measured_s)}" + (
            f" ({pct(c.error)})" if c.error is not None else ""
        )

    out = plain_console()
    table = Table(
        "phase",
        "frozen",
        "layout",
        "steps used/all",
        "predicted ms",
        "measured ms ± IQR",
        "error",
        # "2 then 4 ranks": a run resumed on another --nproc
        title=f"run {result.name}: {result.model}, {worlds} ranks",
        caption="used: steady steps (no warm-up, none still filling the cache)",
    )
    for p in result.phases:
        table.add_row(
            str(p.phase),
            str(p.layout.frozen_layers),
            p.layout.label(),
            f"{p.measured_steps}/{p.steps}",
            ms(p.predicted_step_s),
            ms(p.measured_step_s)
            + ("" if p.measured_iqr_s is None else f" ± {ms(p.measured_iqr_s)}"),
            pct(p.error),
        )
    out.print(table)
    for p in result.phases:
        stages = Table(
            "stage",
            "layers",
            "ranks",
            "compute",
            "transfer / wait",
            "all-reduce",
            "optimizer",
            "input",
            title=f"phase {p.phase}: predicted / measured ms per step (error)",
            caption="measured wait also contains pipeline bubbles; input is measured only",
        )
        for s in p.stages:
            stages.add_row(
                str(s.stage),
                f"{s.first_layer}-{s.stop_layer - 1}",
                ",".join(map(str, s.ranks)),
                cell(s.compute),
                cell(s.transfer),
                cell(s.allreduce),
                cell(s.optimizer),
                ms(s.measured_input_s),
            )
        out.print(stages)
    out.print(epoch_table(result))
    acc = result.final_eval_accuracy
    say(
        f"{result.steps} steps, {result.epochs_completed}/{result.epochs_planned} epochs, "
        f"training {result.training_s:.1f} s; held-out accuracy "
        f"{'-' if acc is None else f'{acc:.1%}'}",
        out,
    )
    b = result.baseline
    if b:
        base_acc = "-" if b.final_eval_accuracy is None else f"{b.final_eval_accuracy:.1%}"
        speedup = "n/a" if b.measured_speedup is None else f"{b.measured_speedup:.2f}×"
        # One pricing for both runs, as `preview` showed it: their profile.json, not the
        # refit a run that recalibrated itself priced its later phases with.
        previewed = (
            "n/a"
            if b.previewed_speedup is None
            else f"{b.previewed_speedup:.2f}× from profile.json"
        )
        say(
            Text.assemble(
                f"speedup over {b.name}: measured ",
                (speedup, "bold"),
                f" (previewed {previewed}); training {b.training_s:.1f} s, held-out accuracy "
                f"{base_acc}",
            ),
            out,
        )
        # Through the one logger, as every other notice (the seventy-fourth round: two bare
        # `note: …` lines).
        warn = logging.getLogger("pipeplan.cli").warning
        if b.previewed_unavailable is not None:
            warn("no previewed speedup: %s", b.previewed_unavailable)
        if b.steps != result.steps:
            warn("the baseline ran %d steps, this run %d", b.steps, result.steps)


def epoch_table(result: Any) -> Table:
    """`pipeplan report`'s per-epoch rows, with the speedup forecast made at each epoch's end."""
    from pipeplan.freeze import CONTINUATION_WORDS

    def number(value: float | None, form: str) -> str:
        return "-" if value is None else format(value, form)

    table = Table(
        "epoch",
        "frozen",
        "layout",
        "samples/s",
        "held-out loss",
        "accuracy",
        "forecast speedup",
        title="epochs",
    )
    assumed = []
    for e in result.epochs:
        cases = e.forecast.cases if e.forecast else []
        for c in cases:
            if CONTINUATION_WORDS[c.continuation] not in assumed:
                assumed.append(CONTINUATION_WORDS[c.continuation])
        table.add_row(
            str(e.epoch),
            str(e.layout.frozen_layers),
            e.layout.label(),
            f"{e.samples_per_s:,.0f}",
            number(e.eval_loss, ".4f"),
            number(e.eval_accuracy, ".1%"),
            " / ".join(f"{c.speedup:.2f}×" for c in cases) or "-",
        )
    if assumed:
        table.caption = "forecast: the frozen layers of the epochs so far, then " + " / ".join(
            assumed
        )
    return table


def _hoist_debug(args: list[str]) -> list[str]:
    """`_hoist_debug(["plan", "--debug"])` → `["--debug", "plan"]`.

    --debug is the root's option, but one adds it where the error was seen: after the
    subcommand, where the subcommand would refuse it. Tokens after `--` are left alone.
    """
    end = args.index("--") if "--" in args else len(args)
    rest = [a for a in args[:end] if a != "--debug"] + args[end:]
    return ["--debug", *rest] if len(rest) < len(args) else rest


def _check_repeats(args: list[str]) -> None:
    """An option given twice (`--out a.json --out b.json`, `--resume A --resume B`, a switch
    both ways: `--cache --no-cache`) is a mistake click would settle silently by keeping the
    last; `--` ends the options."""
    end = args.index("--") if "--" in args else len(args)
    seen: dict[str, str] = {}  # an option (a switch's --x and --no-x are one) → as given
    for token in args[:end]:
        name = {"-o": "--out"}.get(token, token.split("=", 1)[0])
        if not name.startswith("--"):
            continue
        option = "--" + name[len("--no-") :] if name.startswith("--no-") else name
        if option in seen:
            if seen[option] != name:  # `--cache --no-cache`: click kept the last
                raise BadArgumentError(f"{seen[option]} and {name} are both given; give one")
            raise BadArgumentError(f"{name} is given more than once; give it once")
        seen[option] = name


def _switches(command: Any) -> set[str]:
    """Every spelling of an on/off option of the root and its commands (`--debug`, `--cache`,
    `--no-cache`, `--json`, `--help`), read from the commands themselves so a new switch is
    one too: `_switches(typer.main.get_command(app))`."""
    names = {"--help"}  # click adds it to every command
    for cmd in [command, *getattr(command, "commands", {}).values()]:
        for param in cmd.params:
            if getattr(param, "is_flag", False) and not getattr(param, "count", False):
                names.update(param.opts, param.secondary_opts)
    return names


def _check_switch_values(args: list[str], switches: set[str]) -> None:
    """A value given to a switch (`--debug=yes`, `--cache=`, `--json=1`) is refused naming
    the switch: --debug after the command was "No such option: --debug" (only the bare
    switch is moved to the root), and an empty one "is empty; give a value". `--` ends the
    options.

        _check_switch_values(["plan", "--debug=yes"], {"--debug"})   # BadArgumentError
    """
    end = args.index("--") if "--" in args else len(args)
    for token in args[:end]:
        name, equals, value = token.partition("=")
        if equals and name in switches:
            raise BadArgumentError(
                f"{name} is a switch and takes no value, not {quoted(value)}; give {name} alone"
            )


def _check_empty(args: list[str]) -> None:
    """An empty value (`--resume ''`, `--plan=`, `--runs-dir ''`) is refused: click passes it
    on, where an empty path read as "none" (a resume of '' started a new run) or as the
    current directory."""
    for n, token in enumerate(args):
        flag = token[:-1] if token.startswith("--") and token.endswith("=") else None
        if token == "":
            flag = args[n - 1] if n and args[n - 1].startswith("-") else "an argument"
        if flag is not None:
            raise BadArgumentError(f"{flag} is empty; give a value")


def _check_spaces(args: list[str]) -> None:
    """A value with space around it (`--alpha ' 0.3'`, `--nodes '2 '`, `schema 'profile '`)
    is refused by its flag: it is a quoting mistake, and each reader stripped it or not as it
    happened to (numbers and units were read, a name or path would be another one). Space
    inside a value stays (`--micro-batch-sizes '1, 2'`, a path with a space)."""
    for n, token in enumerate(args):
        value = token.split("=", 1)[1] if token.startswith("--") and "=" in token else token
        if value != value.strip():
            where = _flag_of(args, n)
            where = "the argument" if where.startswith("the argument") else where + ":"
            raise BadArgumentError(f"{where} {spaced(value)}")


def _flag_of(args: list[str], n: int) -> str:
    """What the token `args[n]` is the value of, for a message: `--alpha` in `--alpha 0.3` or
    `--alpha=0.3`, else the argument itself."""
    token = args[n]
    if token.startswith("--") and "=" in token:
        return token.split("=", 1)[0]
    if n and args[n - 1].startswith("-"):
        return args[n - 1]
    return f"the argument {quoted(token, 60)}"


def _check_printable(args: list[str]) -> None:
    """A value holding a control character (`--runs-dir $'a\\nb'`, a model path with a tab)
    is refused by its flag: every name and path a file records is `formats.base.Text`, so one
    taken from the command line would be refused later, when a file holding it is written
    (a traceback) or read back; and printed, it breaks the one line it is on."""
    for n, token in enumerate(args):
        try:
            printable(token)
        except ValueError as exc:
            raise BadArgumentError(f"{_flag_of(args, n)}: {exc}") from None


def _cut_arguments(message: str, args: list[str]) -> str:
    """click's message with each argument it quotes cut as pipeplan's own messages cut a
    value (`errors.quoted`): click quoted an unknown command, option or extra argument whole
    (`No such command 'xxx…'`, 5,000 characters: twenty-third round).

        _cut_arguments(f"No such command '{'x' * 5000}'.", ["x" * 5000])
        # "No such command 'xx…x'… (5000 characters).": 200 x's between the quotes
    """
    tokens = {part for arg in args for part in (arg, arg.split("=", 1)[0]) if len(part) > SHOWN}
    for token in sorted(tokens, key=len, reverse=True):  # a token inside a longer one: after
        message = message.replace(f"'{token}'", quoted(token)).replace(token, excerpt(token))
    return message


def _check_version(args: list[str]) -> None:
    """`pipeplan --version extra` (or `--version plan`) is refused: click printed the version
    and exited 0 before reading the rest, which then meant nothing."""
    rest = [a for a in args if a != "--debug"]
    if rest[:1] == ["--version"] and len(rest) > 1:
        raise BadArgumentError(
            f"--version takes nothing more, not {quoted(rest[1])}; give it alone"
        )


# Below this much address space (`ulimit -v`) torch, OpenBLAS and the tokenizers library
# abort in their native start-up ("std::bad_alloc", "OpenBLAS error: Memory allocation still
# failed", "cannot allocate memory for thread-local data"), past any handler that could say
# it in one line: the thirty-third round saw them from 450 MB to about 900 MB on this machine.
MIN_ADDRESS_SPACE = 1 << 30
# `pipeplan run` needs more: each rank loads torch, OpenBLAS and oneDNN and starts gloo's and
# the store's threads, and the launcher hosts torch's rendezvous store. Found by the
# sixty-fifth round: from 1 GiB to about 1.45 GiB the ranks spun for ever in OpenBLAS's
# start-up (1,100,000 KiB), the launcher's store failed in a 71-line traceback (1,200,000),
# or a rank failed naming no memory ("Resource temporarily unavailable", "could not create a
# primitive"). A 1-epoch vit-digits run of 2 ranks succeeded from 1,525,000 KiB (1,489 MiB)
# on the 2-core machine this was measured on (1,500,000 failed); the floor adds over a third.
MIN_RUN_ADDRESS_SPACE = 2 << 30
# The commands that start ranks, and the floor each needs.
ADDRESS_SPACE_NEEDED = {"run": MIN_RUN_ADDRESS_SPACE}


def _command_of(args: list[str]) -> str:
    """The command `args` name, as the address-space floor tells them: `run` that starts no
    rank (`--prepare-only`, for torchrun) is any command's.

        _command_of(["--debug", "run", "--model", "m"])   # "run"
    """
    command = next((a for a in args if a != "--debug"), "")
    return "" if command == "run" and "--prepare-only" in args else command


def _check_address_space(command: str) -> None:
    """A `ulimit -v` below what `command` needs (MIN_ADDRESS_SPACE; `run`'s more,
    ADDRESS_SPACE_NEEDED) is refused before any library loads: above it a shortage is the one
    line `errors.memory_failure` makes of it.

        _check_address_space("run")   # under `ulimit -v 1200000`: BadArgumentError
    """
    needed = ADDRESS_SPACE_NEEDED.get(command, MIN_ADDRESS_SPACE)
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY and soft < needed:
        what = f"pipeplan {command}" if command in ADDRESS_SPACE_NEEDED else "pipeplan"
        raise BadArgumentError(
            f"ulimit -v allows {soft >> 20} MiB of address space; {what} needs at least "
            f"{needed >> 20} MiB (its libraries abort below that): raise the limit"
        )


def _check_working_directory() -> None:
    """The folder pipeplan was started in still exists: deleted (`rm -rf` from another
    terminal), loading torch printed "Intel oneMKL FATAL ERROR: Cannot load libtorch_cpu.so"
    and ended the process (the thirty-second round), and every relative path would fail.
    Removed later, as the command runs, its failure is said as that (`_removed_directory_said`).
    """
    check_working_directory()


@contextlib.contextmanager
def _removed_directory_said() -> Iterator[None]:
    """A failure of the command while its working directory is gone is said as that, first:
    removed as `pipeplan run` checked its data, torch's import and a relative path's abspath
    raised FileNotFoundError, 131 lines of tracebacks (the seventy-ninth round), and a rank
    that failed for it was "exited with code 1". A user's error keeps its message after it.

        with _removed_directory_said():
            command.main(…)   # `rm -rf` of the directory meanwhile: BadArgumentError
    """
    try:
        yield
    except _USAGE_ERRORS:
        raise
    except Exception as exc:
        if (gone := working_directory_failure()) is None:
            raise
        if isinstance(exc, PipeplanError) and str(gone) in str(exc):
            raise  # said already (a rank's import_failure)
        if isinstance(exc, PipeplanError):
            raise type(gone)(f"{gone}; {exc}") from exc
        raise gone from exc


def _check_help(args: list[str]) -> None:
    """`pipeplan plan --help extra` is refused: click's eager --help printed the help and
    exited 0 before reading what follows, which then meant nothing. --help given last (after
    other flags, as one adds it to a line being written) still prints the help."""
    end = args.index("--") if "--" in args else len(args)
    if "--help" not in args[:end]:
        return
    after = [a for a in args[args.index("--help") + 1 :] if a != "--debug"]
    if after:
        raise BadArgumentError(
            f"--help takes nothing after it, not {quoted(after[0])}; give it last: "
            "pipeplan COMMAND --help"
        )


def _said_ignored(unraisable: object) -> None:
    """An exception Python dropped (raised in a __del__ or a weakref callback: "Exception
    ignored in ..." and a traceback) that is no stop: one warning line (`exits.ignored_line`),
    or Python's report itself under --debug. A dropped stop is delivered again
    (`calls.dropped_stops_redelivered`)."""
    if _debug["on"]:
        sys.__unraisablehook__(unraisable)
    else:
        logging.getLogger("pipeplan.cli").warning("%s", ignored_line(unraisable))


def _stop(signum: int, frame: FrameType | None) -> None:
    if _stop_landed():
        return
    signum = first_arrived(signum)  # of a burst, the first: `startup.first_arrived`
    if _deferred(signum, frame):
        return
    if signum == signal.SIGINT:
        raise Interrupted
    raise Stopped(signum)


def _stop_landed() -> bool:
    """Whether the command is acting on a stop already: a later one is ignored. Found by the
    sixty-third round: two stops within milliseconds (`kill -TERM -- -PGID` of a group that
    holds `timeout`, which sends it on; a closing terminal's two SIGHUPs) printed the line
    twice, or a traceback with exit 1 (the second raised in `main`'s `except` or `finally`),
    and cut the first one's clean-up short (export's `.pipeplan-export-…/` was left). A stop
    has landed while what it raised is being handled (a clean-up's `except BaseException` or
    `finally`, or an exception that clean-up raised), and once `main` has caught it, or an
    error it reports (`_said`), or the command's output is in place (`OUTPUT_WRITTEN`), until
    the next `main`. One swallowed (data code's bare
    `except:`) or dropped (raised in a finalizer, then delivered again) is not acted on: the
    next stop is."""
    if _said or OUTPUT_WRITTEN:  # a stop, an error or the output written is the outcome
        return True
    exc = sys.exc_info()[1]
    while exc is not None:
        if isinstance(exc, (Stopped, Interrupted, KeyboardInterrupt)):
            return True
        exc = exc.__context__
    return False


# The stop `main` caught (0: the error it reports), while it says it and puts the handlers
# back. Found by the sixty-fifth round: a SIGTERM landing while an error line was written to
# a stderr that did not drain (a paused terminal, a full pipe) printed a 58-line traceback
# ending in Stopped, exit 1, after the line: the line is the outcome, exit 2, as a stop's is.
_said: list[int] = []


def _deferred(signum: int, frame: FrameType | None) -> bool:
    """A signal that lands inside an import is delivered again once the import is done: an
    exception raised there is swallowed by some libraries' guarded imports and leaves a module
    half-imported (Ctrl-C as `pipeplan run` imported torch printed numpy's "cannot load module
    more than once" traceback, or became a false "cannot build the model" error). Not for
    ever: an import still running IMPORT_GRACE_S later (a data module that prepares its corpus
    at import, a library crawling under `ulimit -v`) takes the signal where it is, and one
    that lets it pass stops the process (`_deliver_after_imports`)."""
    if _forced or not _importing(frame):
        return False
    if not _pending:  # one waiter however many signals come meanwhile
        _pending.add(signum)
        _thread.start_new_thread(_deliver_after_imports, (signum,))
    return True


_pending: set[int] = set()
# Seconds an import may hold a signal back, then seconds it may run on once the signal is
# raised inside it, before the process ends with the signal's line (the thirty-first round:
# a module looping at import time could be stopped by SIGKILL alone).
IMPORT_GRACE_S = 5.0
_forced: list[bool] = []  # true once a held signal is raised inside the import


def _console_copy() -> int:
    """A copy of the console's descriptor 2, made as pipeplan starts: the line of a stop
    that ends a hung import goes there, where the data code's stderr is held meanwhile
    (`executor.data.descriptor_2_held`)."""
    try:
        return os.dup(2)  # not inherited by a child
    except OSError:  # no stderr: nowhere to say it
        return 2


_CONSOLE = _console_copy()


_importing = importing  # whether a frame runs inside an import (`startup.importing`)


def _deliver_after_imports(signum: int) -> None:
    main = threading.main_thread().ident
    end = time.monotonic() + IMPORT_GRACE_S
    while _importing(sys._current_frames().get(main)) and time.monotonic() < end:
        time.sleep(0.01)
    if time.monotonic() >= end:
        _forced.append(True)  # raised where the import is: it stops as elsewhere
    _pending.clear()
    signal.pthread_kill(main, signum)
    if not _forced:
        return
    time.sleep(IMPORT_GRACE_S)
    if not _importing(sys._current_frames().get(main)):
        return  # it stops (or is stopping, undoing what it made) as any stop does
    # Still importing: the import swallowed it (a guarded import) or runs in C. Nothing of
    # ours runs inside an import to unwind; the line, and the signal's exit code.
    said = "interrupted" if signum == signal.SIGINT else stopped_by(signum)
    with contextlib.suppress(OSError):
        os.write(_CONSOLE, f"pipeplan: {said}\n".encode())
    end_children(None)  # a data module's import may have started some
    os._exit(130 if signum == signal.SIGINT else 128 + signum)


# Signals that stop pipeplan with one line, as Ctrl-C does (they killed it silently, where a
# run's launcher said "training stopped by SIGTERM" with a user error's exit code):
# `startup.STOP_SIGNALS`, SIGTERM, SIGHUP, SIGUSR1, SIGXCPU, SIGRTMIN, …, imported above.


def _install(handlers: dict) -> dict | None:
    """Install {signal: handler}, returning the previous ones (None off the main thread, where
    Python allows no handlers)."""
    if threading.current_thread() is not threading.main_thread():
        return None
    return {signum: signal.signal(signum, handler) for signum, handler in handlers.items()}


@functools.cache
def _click_command() -> Any:
    """The app as click's command, built once per process: typer reads every command's
    signature to build it (~6 ms a call), and the commands are fixed at import."""
    return typer.main.get_command(app)


def main(argv: list[str] | None = None) -> int:
    """Entry point: user errors become one line on stderr and exit code 2; Ctrl-C is
    `pipeplan: interrupted` and exit code 130."""
    command = _click_command()
    given = sys.argv[1:] if argv is None else list(argv)
    args = _hoist_debug(given)
    handlers = dict.fromkeys((signal.SIGINT, *STOP_SIGNALS), _stop)
    _said.clear()
    OUTPUT_WRITTEN.clear()
    # As a fresh process starts: off until the root callback reads this call's --debug (a
    # call after a `--debug` one printed a traceback for a refusal made before it: the
    # sixty-ninth round).
    _debug["on"] = False
    if argv is None:  # the record of arrival order, where `startup` did not make it
        watch_arrivals()
    previous = _install({signum: handlers[signum] for signum in set(handlers) - set(ignored())})
    log.threads_held()
    try:
        # A stop whose handler ran in a finalizer, where Python drops what it raises, is
        # delivered again; any other exception dropped there is one warning line.
        with dropped_stops_redelivered(Interrupted, _said_ignored):
            _check_repeats(given)  # before hoisting, which folds `--debug --debug` into one
            _check_switch_values(args, _switches(command))  # before `--debug=` is "empty"
            _check_empty(args)
            _check_printable(args)
            _check_spaces(args)
            _check_version(args)
            _check_help(args)
            _check_working_directory()
            _check_address_space(_command_of(args))
            check_openmp_environment()
            log.check_library_log_levels()
            log.bound_console_size()
            # One call at a time in the process, as the API's (a data function's
            # `pipeplan.run` under `pipeplan run` trained a whole inner run: the sixtieth round).
            # torch loads where a command first needs it (a refused flag needs none), in `/`.
            with (
                one_call(f"the command `pipeplan {next(iter(args), '')}`"),
                _removed_directory_said(),
                first_import_away("torch", _check_working_directory),
            ):
                result = command.main(args=args, prog_name="pipeplan", standalone_mode=False)
        code = result if isinstance(result, int) else 0
        if code == 0:  # what the data code's threads wrote, once the command succeeded
            for line in log.thread_lines():
                logging.getLogger("pipeplan.cli").warning("%s", line)
        # Here, not in `finally` alone: a stop landing there before the handlers were put
        # back raised out of `main`, a traceback and exit 1 (the sixty-eighth round). Here it
        # is caught below, or ends the process as the handlers put back do.
        _put_back(previous, argv)
        return code
    except PipeplanError as exc:
        _said.append(0)  # the outcome, said: a stop landing as it is written is not acted on
        if _debug["on"]:  # the traceback too, and still the exit code of a user error
            traceback.print_exc()
        log.error(exc)
        return 2
    except _USAGE_ERRORS as exc:
        _said.append(0)
        if type(exc).__name__ == "NoArgsIsHelpError":  # bare `pipeplan`: the help, printed
            return 0
        message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
        log.error(_cut_arguments(message, args))
        return 2
    except (Interrupted, KeyboardInterrupt, typer.Abort):
        _said.append(signal.SIGINT)  # from here to the end, later stops are ignored
        print("pipeplan: interrupted", file=sys.stderr)
        return 130
    except Stopped as exc:
        _said.append(exc.signum)
        print(f"pipeplan: {stopped_by(exc.signum)}", file=sys.stderr)
        return 128 + exc.signum
    except (ImportError, MemoryError) as exc:  # a library that cannot load for lack of memory
        failure = memory_failure(exc)
        if failure is None:
            raise
        _said.append(0)
        log.error(failure)
        return 2
    except OSError as exc:  # what the file system refuses (a name too long, …) in one line
        _said.append(0)
        if _debug["on"]:
            traceback.print_exc()
        failure = memory_failure(exc) or tempdir_failure(exc) or import_failure(exc)
        if failure is not None:
            log.error(failure)
            return 2
        where = f"{exc.filename}: " if exc.filename else ""
        log.error(f"{where}{exc.strerror or exc}")
        return 2
    except Exception as exc:  # a library's import that its environment variables failed
        if (failure := import_failure(exc)) is None:
            raise  # pipeplan's own fault: its traceback
        _said.append(0)
        if _debug["on"]:
            traceback.print_exc()
        log.error(failure)
        return 2
    finally:
        _put_back(previous, argv)
        log.thread_lines()  # after a failure, nothing: its error line stays the last


def _put_back(previous: dict | None, argv: list[str] | None) -> None:
    """The handlers `main(argv)` found (`previous`, from `_install`), as it ends. In the
    process's own run (`argv` None) a later Ctrl-C has nothing left to stop (it raised at exit,
    or a traceback; one in `main`'s last lines did: the fifty-sixth round), nor, once a stop
    has been said or the output is in place, a later stop: the process ends as it said. Any
    other stop ends the process with its line and code (`startup`'s handlers), at its exit
    callbacks too.

        _put_back(previous, None)   # SIGINT ignored; SIGTERM: "stopped by SIGTERM", 143
    """
    if argv is None:
        done = _said or OUTPUT_WRITTEN
        ends = (signal.SIGINT, *STOP_SIGNALS) if done else (signal.SIGINT,)
        _install({**(previous or {}), **dict.fromkeys(ends, signal.SIG_IGN)})
    elif previous is not None:
        _install(previous)


def entry() -> None:
    """The `pipeplan` command: `main`, then an exit without the interpreter's teardown
    (freeing torch's and transformers' modules costs 1-2 s of CPU after every command).
    atexit's callbacks, logging's flush among them, still run. Its console never fails the
    work (`log.guard_console`); what a failed stdout means is `_output_status`'s."""
    note_start()  # first: what this process has now is not the command's to end
    out, err = log.guard_console()
    command_process()
    adopt_orphans()
    code = main()
    _run_exit_callbacks(code)
    # What the user's code started in this process and left, once its callbacks have ended
    # theirs (a pool's workers): the console's last holders, with it.
    warn = logging.getLogger("pipeplan.cli").warning
    from executor.leftovers import end_command_watch  # light: the standard library's

    end_command_watch()  # the watch the data code's first run started, not a child it left
    end_children((lambda line: warn("%s", line)) if code == 0 else None)
    out.flush()
    err.flush()
    exit_done(_output_status(code, out))


def _said_or_unprepared(run_dir: Any, made: list[pathlib.Path]) -> None:
    """A run prepared for torchrun whose command could not be written to stdout (`>
    /dev/full`) is not kept: its folder blocked the name, unused (forty-ninth round); nor
    are the folders above it the command `made` (the fifty-first round), where empty. A
    reader gone (a closed pipe) wanted no more: the run stays."""
    import shutil

    from pipeplan.errors import OutputError
    from pipeplan.fileio import release_directory, remove_empty

    sys.stdout.flush()
    failure = getattr(sys.stdout, "failure", None)
    if failure is None or getattr(sys.stdout, "reader_gone", False):
        return
    release_directory(run_dir)
    shutil.rmtree(run_dir, ignore_errors=True)
    remove_empty(made)
    raise OutputError(
        f"could not write the output to standard output: {failure.strerror or failure}; the "
        f"run prepared for torchrun, {run_dir}, is removed"
    )


def _output_status(code: int, out: log.Output) -> int:
    """The command's exit status once its stdout `out` is flushed. A closed pipe (EPIPE:
    `pipeplan report RUN | head -n 1`) is a reader that wanted no more: the command stopped
    writing there and went on, and its status is the work's, with no line, as `git log |
    head` does. Found by the thirty-ninth round: it was exit 1 and nothing said, even after
    `run` had trained to the end. Any other failure (`> /dev/full`, an I/O error, stdout
    closed: `>&-`) lost output the user asked for: after work that succeeded, one line and
    exit 2; a failed command keeps its own line and status."""
    if code != 0 or out.failure is None or out.reader_gone:
        return code
    from pipeplan.fileio import write_failure

    # Past `ulimit -f`, the limit is named, as every file writer names it (forty-third round).
    why = write_failure(out.failure, "-") or out.failure.strerror or out.failure
    log.error(f"could not write the output to standard output: {why}")
    return 2


# How long the exit callbacks may run after a stop (`exits.EXIT_CALLBACKS_S` otherwise).
STOPPED_CALLBACKS_S = 1.0


def _run_exit_callbacks(code: int) -> None:
    """atexit's callbacks, run now (`entry` skips the interpreter's teardown), none of which
    sets the command's exit status (`exits.run_exit_callbacks`): one that raises or exits
    (`os._exit(3)`, `sys.exit(3)`) is one warning line after a command that succeeded, and
    nothing after a failed one (its error line stays its last). Found by the thirty-seventh
    round: a data module's callback that raised printed Python's "Exception ignored in
    atexit callback: <function …>" and its traceback, nine lines after a successful run's;
    by the thirty-eighth, one that called `os._exit(3)` ended `pipeplan run` with status 3.
    `--debug` keeps Python's traceback."""
    warn = logging.getLogger("pipeplan.cli").warning
    say = (lambda line: warn("%s", line)) if code == 0 else None
    # A stop (Ctrl-C, SIGTERM: 128 + the signal) asked for the end now: the data code's work
    # left running is waited for briefly (the eighty-fourth round: its line, then 10 s more).
    limit = STOPPED_CALLBACKS_S if code > 128 else None
    run_exit_callbacks(say, _debug["on"], code, limit)


if __name__ == "__main__":
    entry()
