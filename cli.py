"""The `pipeplan` command line: parse, call the library, print. No logic lives here."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from pipeplan.errors import PipeplanError

app = typer.Typer(
    name="pipeplan",
    help="Plan, preview and run elastic pipeline × data-parallel training with layer freezing.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
console = Console(stderr=True)
_debug = {"on": False}

# typer ≥ 0.26 vendors click; older versions raise click's own exceptions.
try:
    import click

    _USAGE_ERRORS: tuple[type[Exception], ...] = (typer.TyperException, click.ClickException)
except ImportError:
    _USAGE_ERRORS = (typer.TyperException,)


@app.callback()
def _root(
    debug: Annotated[
        bool, typer.Option(help="Show tracebacks instead of one-line errors.")
    ] = False,
) -> None:
    _debug["on"] = debug


@app.command()
def models() -> None:
    """List the built-in models."""
    from pipeplan.models import PRESETS

    table = Table("name", "family", "description")
    for name, preset in PRESETS.items():
        table.add_row(name, preset.family, preset.description)
    Console().print(table)


@app.command()
def schema(name: Annotated[str, typer.Argument(help="profile")]) -> None:
    """Print the JSON Schema of a file format."""
    from pipeplan.schema import json_schema

    print(json.dumps(json_schema(name), indent=2))


@app.command()
def profile(
    model: Annotated[str, typer.Argument(help="Built-in model name or path to an HF config.json.")],
    out: Annotated[str, typer.Option("--out", "-o", help="Profile JSON to write.")],
    micro_batches: Annotated[str, typer.Option(help="Micro-batch sizes to time.")] = "1,2,4,8",
    device: Annotated[str, typer.Option(help="cpu (gloo) or cuda (NCCL).")] = "cpu",
    nproc: Annotated[int, typer.Option(help="With N ≥ 2 also measure links between N ranks.")] = 1,
    threads: Annotated[
        int, typer.Option(help="Intra-op threads (the executor uses 1 per rank).")
    ] = 1,
    warmup: Annotated[int, typer.Option(help="Warm-up rounds, not recorded.")] = 2,
    repeats: Annotated[int, typer.Option(help="Recorded rounds; medians are reported.")] = 5,
    seq_len: Annotated[int | None, typer.Option(help="Sequence length of text models.")] = None,
    seed: Annotated[int, typer.Option(help="Seed for weights and inputs.")] = 0,
) -> None:
    """Measure each layer's time and memory (and with --nproc the links) on this host."""
    from pipeplan.profiler import profile_to_file

    columns = [TextColumn("profiling {task.description}"), BarColumn(), TimeRemainingColumn()]
    live = console.is_terminal  # a progress bar in a log file is noise
    with Progress(*columns, console=console, transient=True, disable=not live) as bar:
        task = bar.add_task(model, total=None)
        result = profile_to_file(
            model,
            out,
            micro_batches=micro_batches,
            device=device,
            nproc=nproc,
            warmup=warmup,
            repeats=repeats,
            threads=threads,
            seq_len=seq_len,
            seed=seed,
            progress=lambda done, total: bar.update(task, completed=done, total=total),
        )
    table = Table("layer", "kind", "params", "fwd ms", "bwd ms", "no-grad ms", "saved KiB/sample")
    for layer in result.layers:
        t = next((t for t in reversed(layer.timings) if t.feasible), None)
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
    sizes = result.settings.micro_batches
    table.caption = (
        f"times at micro-batch {sizes[-1]}, {result.device.name}, {result.device.threads} thread(s)"
    )
    Console().print(table)
    if result.comm:
        c = result.comm
        console.print(
            f"links ({c.backend}, {c.nproc} ranks): p2p {c.p2p.latency_s * 1e6:.0f} µs + "
            f"{c.p2p.bandwidth_bytes_per_s / 1e9:.2f} GB/s; all-reduce "
            f"{c.allreduce.latency_s * 1e6:.0f} µs + "
            f"{c.allreduce.bandwidth_bytes_per_s / 1e9:.2f} GB/s"
        )
    console.print(f"wrote {out}")


def main(argv: list[str] | None = None) -> int:
    """Entry point: user errors become one line on stderr and exit code 2."""
    command = typer.main.get_command(app)
    try:
        result = command.main(args=argv, prog_name="pipeplan", standalone_mode=False)
        return result if isinstance(result, int) else 0
    except PipeplanError as exc:
        if _debug["on"]:
            raise
        print(f"pipeplan: error: {exc}", file=sys.stderr)
        return 2
    except _USAGE_ERRORS as exc:
        message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
        print(f"pipeplan: error: {message}", file=sys.stderr)
        return 2
    except (KeyboardInterrupt, typer.Abort):
        print("pipeplan: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
