"""Checkpoint benchmark: write and resume time for bert-base-sized state (one rank, gloo).

    python bench/bench_checkpoint.py

Parameters and AdamW state of all of bert-base (110 M parameters, fp32: 1.2 GiB), written with
`executor.checkpoint.save` (gather, torch.save, fsync, rename) and read back with
`load_checkpoint` + `restore` (torch.load(weights_only=True), copy into the layers). Median of 3.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from executor import checkpoint
from executor.checkpoint import _gather_layout
from executor.migrate import optimizer_states
from pipeplan import models
from pipeplan.spawn import single_rank_group


def main() -> None:
    torch.set_num_threads(1)
    with single_rank_group(collective_timeout_s=300):
        measure()


def measure() -> None:
    seq = models.build("bert-base")
    params = list(seq.layers.parameters())
    opt = torch.optim.AdamW(params)
    for p in params:
        p.grad = torch.zeros_like(p)
    opt.step()
    spec = _gather_layout(0, len(seq.layers))
    nbytes = sum(p.numel() * 4 * 3 for p in params)
    writes, reads = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for step in range(3):
            manifest = checkpoint.CheckpointManifest(
                step=step,
                epoch=0,
                step_in_epoch=step,
                phase=0,
                frozen_layers=0,
                grad_history=[],
                grad_norm_sums={},
                grad_norm_steps=0,
                world_size=1,
                model="bert-base",
                config=checkpoint.RunConfig(name="bench", model="bert-base", data="synth-text"),
            )
            t0 = time.perf_counter()
            checkpoint.save(Path(tmp), seq.layers, spec, optimizer_states(opt), manifest)
            writes.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            _, model, optimizer, _ = checkpoint.load_latest(Path(tmp))
            checkpoint.restore(seq.layers, model, optimizer)
            reads.append(time.perf_counter() - t0)
    w, r = statistics.median(writes), statistics.median(reads)
    print(f"bert-base state: {nbytes / 2**30:.2f} GiB (parameters + AdamW exp_avg, exp_avg_sq)")
    print(
        f"write {w:.2f} s median of {[round(x, 2) for x in writes]} ({nbytes / w / 1e9:.2f} GB/s)"
    )
    print(
        f"resume (load + restore) {r:.2f} s median of {[round(x, 2) for x in reads]} "
        f"({nbytes / r / 1e9:.2f} GB/s)"
    )


if __name__ == "__main__":
    main()
