"""The rich progress bar rank 0 shows during `pipeplan run`: epoch, step, loss, samples/s, S×D."""

from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from pipeplan.formats import StepRecord


class ProgressView:
    """`with ProgressView(trainer, sys.stderr) as view:` a bar on `stream`, if it is a terminal."""

    def __init__(self, trainer, stream):
        self.trainer = trainer
        self.console = Console(file=stream)
        self.progress = Progress(
            TextColumn("[bold]{task.fields[layout]}[/] epoch {task.fields[epoch]}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("loss {task.fields[loss]} · {task.fields[rate]} samples/s"),
            TimeRemainingColumn(),
            console=self.console,
            disable=not self.console.is_terminal,
            # A rank's stderr is its log file (executor.launch.rank_console): keep it there.
            redirect_stdout=False,
            redirect_stderr=False,
        )
        self.task = None

    def __enter__(self) -> ProgressView:
        self.progress.__enter__()
        self.task = self.progress.add_task(
            "train", total=self.trainer.total_steps, layout="", epoch=0, loss="-", rate="-"
        )
        return self

    def __exit__(self, *exc) -> None:
        self.progress.__exit__(*exc)

    def update(self, record: StepRecord) -> None:
        self.progress.update(
            self.task,
            completed=record.step + 1,
            layout=self.trainer.decision.layout.label(),
            epoch=record.epoch,
            loss="-" if record.loss is None else f"{record.loss:.3f}",
            rate=f"{record.samples_per_s:.0f}",
        )
