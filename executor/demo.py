"""`pipeplan demo`: the whole loop on one machine, in a few minutes, saying what it does.

profile (or the shipped profile when the device matches) → preview → a static baseline run and
an elastic run of vit-digits on 2 local ranks → calibrate on both → the previewed speedup
against the measured one, and both accuracies.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from executor.launch import prepare, run_local
from executor.planning import shipped_profile
from pipeplan.calibrate import calibrate
from pipeplan.cluster import cluster_from_flags
from pipeplan.fileio import write_atomic
from pipeplan.formats import EpochRecord, Profile, RunConfig, RunSummary, dumps, load, read_records
from pipeplan.freeze import alpha_schedule, trajectory_schedule
from pipeplan.plan import make_preview

MODEL, DATA, NPROC, EPOCHS, GLOBAL_BATCH = "vit-digits", "digits", 2, 10, 64
DEVICE_MEMORY_BYTES = 100 << 20  # per rank: the full model needs a 2-stage pipeline
ALPHA = 0.3


@dataclass
class DemoResult:
    previewed_speedup: float  # raw profile, α schedule: what a user sees before running
    calibrated_speedup: float  # calibrated profile, the freeze trajectory the run took
    measured_speedup: float
    static: RunSummary
    elastic: RunSummary
    run_dir: Path


def _config(name: str, freeze: str, epochs: int, max_steps: int | None) -> RunConfig:
    return RunConfig(
        name=name,
        model=MODEL,
        data=DATA,
        nproc=NPROC,
        global_batch=GLOBAL_BATCH,
        epochs=epochs,
        max_steps_per_epoch=max_steps,
        freeze=freeze,
        alpha=ALPHA,
        device_memory_bytes=DEVICE_MEMORY_BYTES,
    )


def _speedup(profile: Profile, freeze, samples: int, epochs: int) -> float:
    cluster = cluster_from_flags(
        nodes=1, devices_per_node=NPROC, device_memory=DEVICE_MEMORY_BYTES, profile=profile
    )
    preview = make_preview(
        profile, cluster, global_batch=GLOBAL_BATCH, samples=samples, epochs=epochs, freeze=freeze
    )
    return preview.predicted_speedup


def run_demo(
    runs_dir: str,
    say: Callable[[str], None],
    epochs: int = EPOCHS,
    max_steps_per_epoch: int | None = None,
) -> DemoResult:
    """`max_steps_per_epoch` shortens the runs (tests); then `samples` shrinks to match."""
    from executor.data import load_data
    from pipeplan import models

    root = Path(runs_dir) / time.strftime("demo-%Y%m%d-%H%M%S")
    path = shipped_profile(MODEL, "cpu")
    if path is None:  # pragma: no cover - the profile ships with the project
        raise FileNotFoundError("profiles/vit-digits@cpu-1t.json is missing from the package")
    say(f"1/5 profile: using the shipped CPU profile {path.name} (measured on this kind of host)")
    profile = load(Profile, path)
    samples = len(load_data(DATA, models.build(MODEL)).train)
    if max_steps_per_epoch:
        samples = min(samples, max_steps_per_epoch * GLOBAL_BATCH)
    blocks = len(profile.layers) - 2
    previewed = _speedup(profile, alpha_schedule(ALPHA, epochs, blocks), samples, epochs)
    say(
        f"2/5 preview: {MODEL} on {NPROC} ranks × {DEVICE_MEMORY_BYTES >> 20} MiB, {epochs} "
        f"epochs, α = {ALPHA}: predicted speedup of freezing + elastic re-partition + cache "
        f"over the best static plan: {previewed:.2f}×"
    )
    summaries = {}
    for step, (name, freeze) in enumerate((("static", "none"), ("elastic", "auto")), start=3):
        what = "static baseline, nothing frozen" if freeze == "none" else "elastic, AutoFreeze"
        say(f"{step}/5 run: {what} ({epochs} epochs on {NPROC} local ranks)…")
        cfg = _config(name, freeze, epochs, max_steps_per_epoch)
        summaries[name] = run_local(cfg, prepare(cfg, root))
        s = summaries[name]
        say(
            f"    {s.total_s:.1f} s, layouts {' → '.join(p.layout.label() for p in s.phases)}, "
            f"held-out accuracy {s.final_eval_accuracy:.1%}"
        )
    say("5/5 calibrate: fitting the cost model to both runs' measured steps")
    calibrated = calibrate([root / "static", root / "elastic"], profile)
    write_atomic(root / "calibrated-profile.json", dumps(calibrated))
    records = read_records(root / "elastic" / "run.jsonl")
    trajectory = root / "elastic" / "freeze-trajectory.json"
    frozen_per_epoch = [r.frozen_layers for r in records if isinstance(r, EpochRecord)]
    write_atomic(trajectory, json.dumps(frozen_per_epoch))
    freeze = trajectory_schedule(trajectory, epochs, blocks)
    static, elastic = summaries["static"], summaries["elastic"]
    return DemoResult(
        previewed_speedup=previewed,
        calibrated_speedup=_speedup(calibrated, freeze, samples, epochs),
        measured_speedup=static.total_s / elastic.total_s,
        static=static,
        elastic=elastic,
        run_dir=root,
    )
