"""`pipeplan demo`: the whole loop in PipeTransformer's regime, fine-tuning a pretrained model.

    result = run_demo("runs", say=print)            # pretrain once, then fine-tune twice
    pretrained_checkpoint("runs", say=print)        # `pipeplan demo --pretrain-only`

1. A pretrained checkpoint, `RUNS/demo-pretrained/model/` (a transformers directory, the
   pretraining run's own `model/` export), with the profile of that model beside it. Nothing
   may be downloaded, so it is made here: `vit-digits` trained from random weights on the
   source task (the ten digit classes), then profiled on this host. A later demo reuses it
   when it checks out (executor.demo_checkpoint) and rebuilds it otherwise, saying why in
   one line.
2. The preview before running: the checkpoint's profile, the α schedule.
3. Fine-tuning on the target task, digit mod 5 (executor.demotasks; a fresh 5-way head),
   through the real `pipeplan run` path: statically (nothing frozen; the best static plan, a 2-stage
   pipeline at this per-rank memory) and elastically (`--freeze auto`).
4. Calibration on both runs, and the speedup previewed for the freeze schedule the elastic run
   actually followed (its epoch records), from the raw and the calibrated profile, beside the
   measured one: the wall time of each whole run (ranks started, training, evaluation,
   checkpoints, the model written out), and the training time its records hold.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from executor.demo_checkpoint import Pretrained, pretrained_checkpoint
from executor.launch import prepare, run_local
from pipeplan.calibrate import calibrate
from pipeplan.cluster import run_cluster
from pipeplan.fileio import write_atomic
from pipeplan.formats import (
    EpochRecord,
    FreezeSchedule,
    Profile,
    RunConfig,
    RunSummary,
    dumps,
    read_records,
)
from pipeplan.freeze import alpha_schedule, list_schedule
from pipeplan.plan import make_preview

__all__ = ["DemoResult", "pretrained_checkpoint", "run_demo"]

TARGET_DATA, NPROC, EPOCHS, GLOBAL_BATCH = "executor.demotasks:target", 2, 10, 64
# Per rank: the whole model does not fit one rank, so the best static plan is a 2-stage
# pipeline; once half of the blocks are frozen (and cached) one rank holds the rest, and the
# elastic run becomes 1×2 data parallel.
DEVICE_MEMORY_BYTES = 80 << 20
ALPHA = 0.3


@dataclass
class Measured:
    summary: RunSummary
    wall_s: float  # the whole run as a user waits for it: run_local from call to return
    frozen_per_epoch: list[int]


@dataclass
class DemoResult:
    pretrained: Pretrained
    previewed_speedup: float  # raw profile, α schedule: what a user sees before running
    followed_speedup: float  # raw profile, the freeze schedule the elastic run followed
    followed_calibrated_speedup: float  # … from the profile calibrated on both runs
    static: Measured
    elastic: Measured
    run_dir: Path

    @property
    def measured_speedup(self) -> float:
        """Whole runs, wall clock: what the user waits for."""
        return self.static.wall_s / self.elastic.wall_s

    @property
    def training_speedup(self) -> float:
        """Training time in the records (epochs and transitions): what the preview prices."""
        return self.static.summary.total_s / self.elastic.summary.total_s


def _config(name: str, model: Path, profile: Path, freeze: str, epochs: int) -> RunConfig:
    return RunConfig(
        name=name,
        model=str(model),
        data=TARGET_DATA,
        profile=str(profile),
        nproc=NPROC,
        global_batch=GLOBAL_BATCH,
        epochs=epochs,
        freeze=freeze,
        alpha=ALPHA,
        device_memory_bytes=DEVICE_MEMORY_BYTES,
    )


def _speedup(profile: Profile, cfg: RunConfig, freeze: FreezeSchedule, samples: int) -> float:
    preview = make_preview(
        profile,
        run_cluster(cfg, profile),
        global_batch=cfg.global_batch,
        samples=samples,
        epochs=cfg.epochs,
        freeze=freeze,
    )
    return preview.predicted_speedup


def _train(cfg: RunConfig, root: Path) -> Measured:
    run_dir = prepare(cfg, root)
    start = time.perf_counter()
    summary = run_local(cfg, run_dir)
    wall_s = time.perf_counter() - start
    records = read_records(run_dir / "run.jsonl")
    frozen = [r.frozen_layers for r in records if isinstance(r, EpochRecord)]
    return Measured(summary, wall_s, frozen)


def run_demo(runs_dir: str, say: Callable[[str], None], epochs: int = EPOCHS) -> DemoResult:
    """Pretrain (or reuse), preview, fine-tune statically and elastically, calibrate, compare.
    `epochs` of fine-tuning (the tests shorten it)."""
    from executor.data import load_data

    pretrained = pretrained_checkpoint(runs_dir, say, step="1/5")
    root = Path(runs_dir) / time.strftime("demo-%Y%m%d-%H%M%S")
    profile = pretrained.profile
    blocks = len(profile.layers) - 2
    samples = len(load_data(TARGET_DATA).train)
    static_cfg = _config("static", pretrained.model_dir, pretrained.profile_path, "none", epochs)
    elastic_cfg = static_cfg.model_copy(update={"name": "elastic", "freeze": "auto"})
    previewed = _speedup(profile, elastic_cfg, alpha_schedule(ALPHA, epochs, blocks), samples)
    say(
        f"2/5 preview: fine-tuning on the target task (digit mod 5), {NPROC} ranks × "
        f"{DEVICE_MEMORY_BYTES >> 20} MiB, {epochs} epochs, α = {ALPHA}: predicted speedup of "
        f"freezing + elastic re-partition + cache over the best static plan: {previewed:.2f}× "
        "(if AutoFreeze freezes as fast as the α bound allows)"
    )
    runs = {}
    for step, cfg in (("3/5", static_cfg), ("4/5", elastic_cfg)):
        what = "static baseline, nothing frozen" if cfg.freeze == "none" else "elastic, AutoFreeze"
        say(f"{step} fine-tune: {what} ({epochs} epochs on {NPROC} local ranks)…")
        runs[cfg.name] = run = _train(cfg, root)
        s = run.summary
        say(
            f"    {run.wall_s:.1f} s (training {s.total_s:.1f} s), layouts "
            f"{' → '.join(p.layout.label() for p in s.phases)}, held-out accuracy "
            f"{s.final_eval_accuracy:.1%}"
        )
    say("5/5 calibrate: fitting the cost model to both runs' measured steps")
    calibrated = calibrate([root / "static", root / "elastic"], profile)
    write_atomic(root / "calibrated-profile.json", dumps(calibrated))
    followed = list_schedule(runs["elastic"].frozen_per_epoch, epochs, blocks, "trajectory")
    write_atomic(root / "elastic" / "freeze-trajectory.json", dumps(followed))
    return DemoResult(
        pretrained=pretrained,
        previewed_speedup=previewed,
        followed_speedup=_speedup(profile, elastic_cfg, followed, samples),
        followed_calibrated_speedup=_speedup(calibrated, elastic_cfg, followed, samples),
        static=runs["static"],
        elastic=runs["elastic"],
        run_dir=root,
    )
