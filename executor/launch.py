"""Start a run: local ranks spawned once (`pipeplan run --nproc N`) or one rank under torchrun.

The parent checks everything it can before any process starts (model, data, plan against the
world size), creates `runs/NAME/` with `run.json`, spawns the ranks, waits with no deadline but
kills every rank as soon as one fails or on Ctrl-C, and finally writes `summary.json` from the
records rank 0 wrote. This module sits on top, with the CLI: it ties the executor to the
analysis layer (the summary, online recalibration). Under torchrun each process calls
`torchrun_main`, which reads RANK, WORLD_SIZE and the rendezvous from the environment.
"""

from __future__ import annotations

import logging
import os
import re
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from executor.planning import RUN_PROFILE, RunPlanner
from executor.task import build_task
from executor.worker import Trainer, init_distributed
from pipeplan import log as pipeplan_log
from pipeplan.calibrate import calibrate
from pipeplan.errors import BadArgumentError, OutputError, PipeplanError
from pipeplan.fileio import claim_directory, write_atomic
from pipeplan.formats import (
    PhaseSummary,
    RunConfig,
    RunSummary,
    StepRecord,
    dumps,
    load,
    read_records,
)
from pipeplan.report import make_report
from pipeplan.spawn import RankFailedError, free_port, run_ranks

log = logging.getLogger("pipeplan.run")


def prepare(cfg: RunConfig, runs_root: str | Path) -> Path:
    """Checks that need no process group, then the run directory with run.json."""
    if cfg.device == "cuda":
        if not torch.cuda.is_available():
            raise BadArgumentError("--device cuda: no CUDA device is available here")
        if torch.cuda.device_count() < cfg.nproc:
            raise BadArgumentError(
                f"--nproc {cfg.nproc} needs {cfg.nproc} GPUs; this host has "
                f"{torch.cuda.device_count()}"
            )
    elif cfg.nproc > (os.cpu_count() or 1):
        log.warning("--nproc %d is more than the %d CPU cores", cfg.nproc, os.cpu_count())
    seq, data = build_task(cfg)
    if len(data.train) < cfg.global_batch:
        raise BadArgumentError(
            f"--global-batch {cfg.global_batch} is larger than the {len(data.train)} training "
            "samples"
        )
    planner = RunPlanner.from_config(cfg)
    planner.check(seq)
    run_dir = claim_directory(Path(runs_root) / run_name(cfg.name))
    if any(p.name != ".lock" for p in run_dir.iterdir()):
        raise OutputError(f"{run_dir}: already holds a run; pick another --name")
    write_atomic(run_dir / "run.json", dumps(cfg))
    # The run prices every phase with this copy: the run directory alone reproduces its plans.
    write_atomic(run_dir / RUN_PROFILE, dumps(planner.profile))
    return run_dir


def run_name(name: str) -> str:
    """A run's name is one plain folder name: never a path out of --runs-dir."""
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}", name):
        raise BadArgumentError(
            f"--name {name!r}: use letters, digits, '.', '_' and '-' (a folder name, not a path)"
        )
    return name


def rank_main(
    rank: int,
    world: int,
    master: str,
    run_dir: str,
    progress: bool,
    resume: bool = False,
    debug: bool = False,
) -> None:
    """One rank of a local run (spawned) or of a torchrun job."""
    # A fresh process (spawned or torchrun): set up first, so its messages carry the rank.
    pipeplan_log.setup(rank=rank, debug=debug)
    cfg = load(RunConfig, Path(run_dir, "run.json"))
    device = init_distributed(rank, world, master, cfg.device)
    try:
        planner = RunPlanner.for_run(Path(run_dir), cfg)
        trainer = Trainer(cfg, Path(run_dir), planner, device, recalibrate=calibrate)
        if rank == 0 and progress:
            from executor.progress import ProgressView

            with ProgressView(trainer) as view:
                trainer.recorder.on_step = view.update
                trainer.train(resume)
        else:
            trainer.train(resume)
        dist.barrier()
    finally:
        dist.destroy_process_group()


def run_local(
    cfg: RunConfig, run_dir: Path, progress: bool = True, resume: bool = False
) -> RunSummary:
    master = f"tcp://127.0.0.1:{free_port()}"
    debug = log.isEnabledFor(logging.DEBUG)  # the ranks log at the level the command does
    args = (cfg.nproc, master, str(run_dir), progress, resume, debug)
    try:
        run_ranks(rank_main, cfg.nproc, args, deadline_s=float("inf"), what="training")
    except RankFailedError as exc:
        steps = [r for r in read_records(run_dir / "run.jsonl") if isinstance(r, StepRecord)]
        at = f"at step {steps[-1].step + 1}" if steps else "before the first step"
        resume_hint = ""
        if (run_dir / "checkpoints" / "latest").exists():
            resume_hint = f"; resume with: pipeplan run --resume {run_dir}"
        raise RankFailedError(f"{exc} ({at}){resume_hint}", exc.rank) from None
    return summarize(run_dir)


def torchrun_main() -> None:
    """Entry point under torchrun: `torchrun ... -m executor.launch RUN_DIR`."""
    if len(sys.argv) != 2:
        sys.exit(
            "usage: torchrun … -m executor.launch RUN_DIR (made by pipeplan run --prepare-only)"
        )
    run_dir = sys.argv[1]
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    try:
        rank_main(rank, world, "env://", run_dir, progress=rank == 0)
        if rank == 0:
            summarize(Path(run_dir))
    except PipeplanError as exc:
        print(f"pipeplan: error: rank {rank}: {exc}", file=sys.stderr)
        sys.exit(2)


def summarize(run_dir: Path) -> RunSummary:
    """Measured vs predicted step time per phase, from run.jsonl; written to summary.json."""
    report = make_report(run_dir)
    summary = RunSummary(
        name=report.name,
        total_s=report.training_s,
        steps=report.steps,
        final_eval_accuracy=report.final_eval_accuracy,
        phases=[
            PhaseSummary(
                phase=p.phase,
                layout=p.layout,
                steps=p.steps,
                predicted_step_s=p.predicted_step_s,
                measured_step_s=p.measured_step_s,
                measured_spread_s=p.measured_iqr_s,
                error=p.error,
            )
            for p in report.phases
        ],
    )
    write_atomic(run_dir / "summary.json", dumps(summary))
    return summary


def resume_run(run_dir: str, nproc: int | None) -> tuple[Path, RunSummary]:
    """`pipeplan run --resume RUN_DIR`: continue from the latest checkpoint, on `nproc` ranks
    if given (the layout is re-planned), else on the run's own."""
    from executor.checkpoint import latest

    path = Path(run_dir)
    cfg = load(RunConfig, path / "run.json")
    latest(path)  # fail before any process starts (and before claiming) if nothing to resume
    claim_directory(path)
    if nproc is not None and nproc != cfg.nproc:
        cfg = cfg.model_copy(update={"nproc": nproc})
        RunPlanner.from_config(cfg).check()
        write_atomic(path / "run.json", dumps(cfg))
    return path, run_local(cfg, path, resume=True)


def start_run(
    cfg: RunConfig, runs_root: str | Path, prepare_only: bool = False
) -> tuple[Path, RunSummary | None]:
    """`pipeplan run`: the checks and `runs/NAME/`, then the ranks unless only preparing (for
    torchrun); no summary then."""
    run_dir = prepare(cfg, runs_root)
    return run_dir, None if prepare_only else run_local(cfg, run_dir)
