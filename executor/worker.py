"""The training loop every rank runs: epochs, steps, AutoFreeze, elastic transitions, records.

Read top to bottom: set up the process group and the model, then per epoch shard the data
with a `DistributedSampler` per replica, feed stage 0 (from the AutoCache when the frozen
prefix is cached), step the phase runtime, gather every rank's timings to rank 0, which writes
`run.jsonl` and drives the progress bar. At each freeze decision rank 0 picks the new freeze
point, re-plans, and broadcasts the new phase; every rank then migrates state and rebuilds.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import logging
import math
import os
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.distributed as dist
from torch.utils.data import DistributedSampler

from executor.cache import ActivationCache, cache_allowed
from executor.data import TaskData, check_compatible, load_data
from executor.migrate import install_states, migrate, optimizer_states
from executor.parallel import PhaseRuntime, StepTimes
from executor.planning import RunPlanner
from executor.records import Recorder, step_record, step_row
from pipeplan import freeze, models
from pipeplan.errors import PipeplanError
from pipeplan.formats import (
    CheckpointManifest,
    EpochRecord,
    Layout,
    PhaseDecision,
    PhaseRecord,
    Profile,
    RunConfig,
    StepRecord,
)

log = logging.getLogger("pipeplan.run")
COLLECTIVE_TIMEOUT_S = 60
# Online recalibration: after this many steps of a phase, rank 0 refits the cost model on what
# the run has measured so far (2 warm-up steps are skipped), so the next re-plan uses it.
RECALIBRATE_AFTER_STEPS = 8


# Fits a calibrated profile to run directories (pipeplan.calibrate.calibrate, passed in by the
# launcher: the executor does not import the analysis layer).
Recalibrate = Callable[[list[Path], Profile], Profile]


def init_distributed(rank: int, world: int, master: str, device: str) -> torch.device:
    torch.set_num_threads(1)
    if device == "cuda":
        local = int(os.environ.get("LOCAL_RANK", rank))
        torch.cuda.set_device(local)
        dev = torch.device("cuda", local)
    else:
        dev = torch.device("cpu")
    dist.init_process_group(
        "nccl" if device == "cuda" else "gloo",
        init_method=master,
        rank=rank,
        world_size=world,
        timeout=_dt.timedelta(seconds=COLLECTIVE_TIMEOUT_S),
    )
    return dev


class Trainer:
    def __init__(
        self,
        cfg: RunConfig,
        run_dir: Path,
        planner: RunPlanner,
        device: torch.device,
        recalibrate: Recalibrate | None = None,
    ):
        self.cfg, self.run_dir, self.planner, self.device = cfg, run_dir, planner, device
        self.fit_profile = recalibrate
        self.calibrations = 0
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.seq = models.build(cfg.model, seed=cfg.seed, dropout=cfg.dropout)
        self.seq.layers.to(device)
        # Same weights everywhere (seeded build); from here each rank draws its own dropout.
        torch.manual_seed(cfg.seed * 1000 + self.rank + 1)
        self.data: TaskData = load_data(cfg.data, self.seq, seed=cfg.seed)
        check_compatible(self.data, self.seq)
        self.use_cache, reason = cache_allowed(self.data.augmented)
        self.use_cache = self.use_cache and cfg.cache
        if cfg.cache and not self.use_cache and self.rank == 0:
            log.warning("AutoCache off: %s", reason)
        self.steps_per_epoch = len(self.data.train) // cfg.global_batch
        if cfg.max_steps_per_epoch:
            self.steps_per_epoch = min(self.steps_per_epoch, cfg.max_steps_per_epoch)
        self.total_steps = self.steps_per_epoch * cfg.epochs
        self.frozen_layers = 0
        self.step_index = 0
        self.phase_index = 0
        self.autofreeze = freeze.AutoFreeze(
            cfg.freeze, self.seq.num_blocks, cfg.alpha, list(cfg.freeze_list or [])
        )
        self.cache: ActivationCache | None = None
        self.runtime: PhaseRuntime | None = None
        self.decision: PhaseDecision | None = None
        self.recorder = Recorder(run_dir / "run.jsonl", writes=self.rank == 0)  # closed in finish()

    # ----------------------------------------------------------------- phases

    def decide_phase(self, frozen_layers: int) -> PhaseDecision:
        """Rank 0 plans; everyone receives the same decision."""
        box: list[PhaseDecision | None] = [None]
        if self.rank == 0:
            box[0] = self.planner(frozen_layers, self.use_cache and frozen_layers > 0)
        dist.broadcast_object_list(box, src=0)
        assert box[0] is not None
        return box[0]

    def enter_phase(self, decision: PhaseDecision, epoch: int) -> None:
        t0 = time.perf_counter()
        layout = decision.layout
        layout.check(len(self.seq.layers), self.world)
        states = {}
        if self.runtime is not None:
            old = self.runtime
            states = migrate(
                self.seq.layers, old.layout, optimizer_states(old.optimizer), layout, self.rank
            )
            old.destroy()
        self.decision = decision
        self.phase_steps = 0
        self.runtime = PhaseRuntime(
            self.seq.layers,
            self.seq.loss,
            layout,
            self.rank,
            example_input=self.example_stage0_input,
            device=self.device,
            make_optimizer=self.make_optimizer,
        )
        install_states(self.runtime.optimizer, states)
        self.prepare_cache(layout)
        dist.barrier()
        self.recorder.write(
            PhaseRecord(
                **dict(decision),
                phase=self.phase_index,
                start_step=self.step_index,
                start_epoch=epoch,
                transition_s=time.perf_counter() - t0,
            )
        )

    def make_optimizer(self, params: list[torch.nn.Parameter]) -> torch.optim.Optimizer:
        return torch.optim.AdamW(params, lr=self.cfg.lr, weight_decay=self.cfg.weight_decay)

    def lr_at(self, step: int) -> float:
        """Linear warm-up, then cosine decay to 10 %, by global step (layout-independent)."""
        cfg = self.cfg
        if step < cfg.warmup_steps:
            return cfg.lr * (step + 1) / cfg.warmup_steps
        progress = (step - cfg.warmup_steps) / max(1, self.total_steps - cfg.warmup_steps)
        return cfg.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(progress, 1.0))))

    # ----------------------------------------------------------------- data and cache

    def frozen_prefix(self, inputs: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return self.seq.forward(inputs.to(self.device), 0, self.decision.layout.frozen_layers)

    def example_stage0_input(self, n: int) -> torch.Tensor:
        x = torch.stack([self.data.train[i][0] for i in range(n)])
        return self.frozen_prefix(x) if self.decision.layout.cached else x

    def prepare_cache(self, layout: Layout) -> None:
        stage0 = self.runtime is not None and self.runtime.topology.stage == 0
        if not (layout.cached and stage0):
            if self.cache is not None:
                self.cache.clear()
                self.cache = None
            return
        if self.cache is None:
            sample = self.frozen_prefix(self.data.train[0][0].unsqueeze(0))[0]
            self.cache = ActivationCache(
                len(self.data.train),
                tuple(sample.shape),
                sample.dtype,
                self.cfg.cache_budget_bytes,
                self.run_dir / "cache" / f"rank{self.rank}",
                name=f"cache-r{self.rank}",
            )
            (self.run_dir / "cache" / f"rank{self.rank}").mkdir(parents=True, exist_ok=True)
            self.cache.advance(layout.frozen_layers, None)
        elif self.cache.frozen_layers < layout.frozen_layers:
            start, stop = self.cache.frozen_layers, layout.frozen_layers

            def newly_frozen(hidden: torch.Tensor) -> torch.Tensor:
                return self.seq.forward(hidden.to(self.device), start, stop).cpu()

            self.cache.advance(layout.frozen_layers, newly_frozen)
        self.fill_cache()

    @torch.no_grad()
    def fill_cache(self, chunk: int = 256) -> None:
        """Compute the frozen prefix for every training sample not cached yet. Filling lazily
        would never finish: the sampler deals each replica a different share of the data every
        epoch (and drops a partial batch), so every replica would keep missing. Filled here, at
        the start of the phase (its time counts as transition time), every step is a full hit."""
        n = len(self.data.train)
        for start in range(0, n, chunk):
            indices = torch.arange(start, min(n, start + chunk))
            _, hit = self.cache.lookup(indices)
            missing = indices[~hit]
            if len(missing):
                raw = torch.stack([self.data.train[int(i)][0] for i in missing])
                self.cache.store(missing, self.frozen_prefix(raw).cpu(), self.cache.frozen_layers)

    def stage0_input(self, indices: torch.Tensor) -> tuple[torch.Tensor, int]:
        """The batch stage 0 feeds the pipeline, and how many rows came from the cache."""
        if self.cache is None:
            return torch.stack([self.data.train[int(i)][0] for i in indices]), 0
        values, hit = self.cache.lookup(indices)
        if not bool(hit.all()):
            missing = indices[~hit]
            raw = torch.stack([self.data.train[int(i)][0] for i in missing])
            computed = self.frozen_prefix(raw).cpu()
            self.cache.store(missing, computed, self.cache.frozen_layers)
            values[~hit] = computed
        return values, int(hit.sum())

    # ----------------------------------------------------------------- training

    def train(self, resume: bool = False) -> None:
        cfg = self.cfg
        start_epoch, skip = self.resume() if resume else (0, 0)
        if not resume:
            self.frozen_layers = self.autofreeze.first
            self.enter_phase(self.decide_phase(self.frozen_layers), epoch=0)
        for epoch in range(start_epoch, cfg.epochs):
            norms = self.run_epoch(epoch, skip if epoch == start_epoch else 0)
            if epoch + 1 < cfg.epochs:
                self.maybe_refreeze(epoch + 1, norms)
        self.checkpoint(cfg.epochs, 0)  # the final state, resumable for more epochs
        self.finish()

    # ----------------------------------------------------------------- checkpoints

    def checkpoint(self, epoch: int, step_in_epoch: int) -> None:
        """Collective: every rank's state to rank 0, written atomically (executor.checkpoint)."""
        from executor import checkpoint

        runtime = self.runtime
        sums = torch.zeros(len(self.seq.layers), dtype=torch.float64)
        if runtime.topology.replica == 0:
            for index, total in runtime.grad_norm_sums.items():
                sums[index] = total
        dist.all_reduce(sums)
        steps = torch.tensor([runtime.grad_norm_steps if runtime.topology.replica == 0 else 0])
        dist.all_reduce(steps, op=dist.ReduceOp.MAX)
        manifest = CheckpointManifest(
            step=self.step_index,
            epoch=epoch,
            step_in_epoch=step_in_epoch,
            phase=self.phase_index,
            frozen_layers=self.frozen_layers,
            grad_history=[{str(k): v for k, v in h.items()} for h in self.autofreeze.history],
            grad_norm_sums={str(i): v for i, v in enumerate(sums.tolist()) if v > 0},
            grad_norm_steps=int(steps),
            world_size=self.world,
            model=self.cfg.model,
            cache=self.cache.manifest() if self.cache is not None else None,
        )
        states = optimizer_states(runtime.optimizer)
        checkpoint.save(self.run_dir, self.seq.layers, runtime.layout, states, manifest)

    def resume(self) -> tuple[int, int]:
        """Continue from the latest checkpoint, re-planned for this world size."""
        from executor import checkpoint

        manifest, model, optimizer, rng = checkpoint.load_checkpoint(
            checkpoint.latest(self.run_dir)
        )
        states = checkpoint.restore(self.seq.layers, model, optimizer)
        self.frozen_layers, self.phase_index = manifest.frozen_layers, manifest.phase
        self.step_index = manifest.step
        self.autofreeze.history = [{int(k): v for k, v in h.items()} for h in manifest.grad_history]
        self.recorder.truncate(manifest)
        self.enter_phase(self.decide_phase(self.frozen_layers), manifest.epoch)
        owned = {p for p in self.runtime.params} if self.runtime.module is not None else set()
        install_states(self.runtime.optimizer, {p: s for p, s in states.items() if p in owned})
        if self.runtime.topology.replica == 0 and self.runtime.module is not None:
            mine = {i for i, _ in self.runtime.module.indexed()}
            self.runtime.grad_norm_sums = {
                int(k): v for k, v in manifest.grad_norm_sums.items() if int(k) in mine
            }
            self.runtime.grad_norm_steps = manifest.grad_norm_steps
        if manifest.world_size == self.world:  # same ranks: the same random streams
            torch.set_rng_state(rng[str(self.rank)])
        return manifest.epoch, manifest.step_in_epoch

    def run_epoch(self, epoch: int, skip: int = 0) -> dict[int, float]:
        """Train one epoch from step `skip`; returns the mean gradient norm per layer."""
        t0 = time.perf_counter()
        losses = []
        start_phase, batches_phase = self.phase_index, None
        for step_in_epoch in range(skip, self.steps_per_epoch):
            if batches_phase != self.phase_index:  # a new layout shards the data anew
                batches = self.replica_batches(epoch, skip=step_in_epoch)
                batches_phase = self.phase_index
            indices = next(batches)
            record = self.train_step(epoch, indices)
            if record.loss is not None:
                losses.append(record.loss)
            if (
                self.cfg.freeze_every
                and (self.step_index % self.cfg.freeze_every == 0)
                and step_in_epoch + 1 < self.steps_per_epoch
            ):
                self.maybe_refreeze(epoch, self.gather_grad_norms())
            every = self.cfg.checkpoint_every
            if every and self.step_index % every == 0 and step_in_epoch + 1 < self.steps_per_epoch:
                self.checkpoint(epoch, step_in_epoch + 1)
        elapsed = time.perf_counter() - t0
        accuracy = self.evaluate()
        norms = self.gather_grad_norms()
        eval_s = time.perf_counter() - t0 - elapsed
        self.recorder.write(
            EpochRecord(
                epoch=epoch,
                phase=start_phase,
                frozen_layers=self.frozen_layers,
                steps=self.steps_per_epoch,
                epoch_s=elapsed,
                eval_s=eval_s,
                train_loss=sum(losses) / len(losses) if losses else None,
                eval_accuracy=accuracy,
                samples_per_s=self.steps_per_epoch * self.cfg.global_batch / elapsed,
                grad_norms={str(k): v for k, v in sorted(norms.items())},
            )
        )
        return norms

    def replica_batches(self, epoch: int, skip: int):
        """This replica's index batches for the epoch, from step `skip` on. The union of the
        replicas' batches at a step is the same global batch whatever the layout."""
        layout = self.decision.layout
        replica = self.runtime.topology.replica or 0
        sampler = DistributedSampler(
            self.data.train,
            num_replicas=layout.replicas,
            rank=replica,
            shuffle=True,
            seed=self.cfg.seed,
            drop_last=True,
        )
        sampler.set_epoch(epoch)
        local = self.cfg.global_batch // layout.replicas
        order = torch.tensor(list(sampler), dtype=torch.int64)
        for step in range(skip, self.steps_per_epoch):
            yield order[step * local : (step + 1) * local]

    def train_step(self, epoch: int, indices: torch.Tensor) -> StepRecord:
        runtime = self.runtime
        t0 = time.perf_counter()
        inputs, hits = (None, 0)
        if runtime.topology.stage == 0:
            inputs, hits = self.stage0_input(indices)
        labels = torch.stack([self.data.train[int(i)][1] for i in indices])
        input_s = time.perf_counter() - t0
        for group in runtime.optimizer.param_groups if runtime.optimizer else []:
            group["lr"] = self.lr_at(self.step_index)
        times = runtime.step(inputs, labels)
        times.input_s = input_s
        times.step_s += input_s
        record = self.gather_step(epoch, times, hits)
        self.step_index += 1
        self.phase_steps += 1
        if self.rank == 0 and self.phase_steps == RECALIBRATE_AFTER_STEPS:
            self.recalibrate()
        return record

    def recalibrate(self) -> None:
        """Refit the planner's cost model on this run's records so far (rank 0 only); the
        fitted profile is written to the run directory before any phase is priced with it."""
        if self.fit_profile is None:
            return
        try:
            fitted = self.fit_profile([self.run_dir], self.planner.profile)
        except PipeplanError as exc:  # too few steps yet: keep planning with what we have
            log.info("recalibration skipped: %s", exc)
            return
        self.calibrations += 1
        self.planner.adopt(fitted, self.run_dir, self.calibrations)

    def gather_step(self, epoch: int, times: StepTimes, hits: int) -> StepRecord:
        """Every rank's row (executor.records.STEP_ROW) to every rank in one small all-gather;
        rank 0 records the step."""
        topology = self.runtime.topology
        mine = step_row(times, hits, topology.stage, topology.replica)
        rows = [torch.zeros_like(mine) for _ in range(self.world)]
        dist.all_gather(rows, mine)
        record = step_record(
            rows,
            step=self.step_index,
            epoch=epoch,
            phase=self.phase_index,
            global_batch=self.cfg.global_batch,
        )
        self.recorder.write(record)
        return record

    # ----------------------------------------------------------------- evaluation

    @torch.no_grad()
    def evaluate(self) -> float | None:
        """Held-out accuracy through the pipeline (forward only), summed over replicas."""
        if len(self.data.eval) == 0:
            return None
        runtime, layout = self.runtime, self.decision.layout
        correct = torch.zeros(2, dtype=torch.float64)  # correct, counted
        if runtime.topology.active:
            runtime.module.train(False)
            replica, local = runtime.topology.replica, self.cfg.global_batch // layout.replicas
            indices = torch.arange(len(self.data.eval))[replica :: layout.replicas]
            for start in range(0, len(indices), local):
                chunk = indices[start : start + local]
                valid = len(chunk)
                if valid < local:  # pad the last batch; padded rows are not counted
                    chunk = torch.cat([chunk, chunk[:1].repeat(local - valid)])
                x = torch.stack([self.data.eval[int(i)][0] for i in chunk])
                y = torch.stack([self.data.eval[int(i)][1] for i in chunk])
                if runtime.is_first and layout.cached:
                    x = self.frozen_prefix(x)
                args = (x.to(self.device),) if runtime.is_first else ()
                # The schedule computes the loss on the last stage, so it needs the targets.
                kwargs = dict(target=y.to(self.device), losses=[]) if runtime.is_last else {}
                out = runtime.schedule.eval(*args, **kwargs)
                if runtime.is_last:
                    pred = out.argmax(-1).cpu()
                    correct[0] += float((pred[:valid] == y[:valid]).sum())
                    correct[1] += valid
            runtime.module.train(True)
        dist.all_reduce(correct)
        return float(correct[0] / correct[1]) if correct[1] > 0 else None

    # ----------------------------------------------------------------- AutoFreeze

    def gather_grad_norms(self) -> dict[int, float]:
        """Mean gradient norm per layer since the last call, from replica 0's owners."""
        runtime = self.runtime
        norms = torch.zeros(len(self.seq.layers), dtype=torch.float64)
        if runtime.topology.replica == 0 and runtime.grad_norm_steps:
            for index, total in runtime.grad_norm_sums.items():
                norms[index] = total / runtime.grad_norm_steps
        runtime.grad_norm_sums, runtime.grad_norm_steps = {}, 0
        dist.all_reduce(norms)
        return {i: float(v) for i, v in enumerate(norms.tolist()) if v > 0}

    def maybe_refreeze(self, epoch: int, norms: dict[int, float]) -> None:
        """Rank 0 decides the freeze point (pipeplan.freeze.AutoFreeze), everyone follows."""
        box = [self.autofreeze.decide(epoch, norms, self.frozen_layers) if self.rank == 0 else None]
        dist.broadcast_object_list(box, src=0)
        new_point = int(box[0])
        if new_point == self.frozen_layers:
            return
        self.frozen_layers = new_point
        self.phase_index += 1
        self.enter_phase(self.decide_phase(new_point), epoch)
        self.checkpoint(epoch, 0)  # every transition is a checkpoint

    def finish(self) -> None:
        if self.runtime is not None:
            self.runtime.destroy()
        if self.cache is not None:
            self.cache.clear()
            for directory in (self.cache.spill_dir, self.cache.spill_dir.parent):
                with contextlib.suppress(OSError):  # removes only empty directories
                    directory.rmdir()
        self.recorder.close()
