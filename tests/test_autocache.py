"""AutoCache as PipeTransformer does it: filled on the fly, one cache per node.

The plan's pricing of a cached phase (first epoch = the same placement uncached plus the
store; later epochs hit as far as the node caches cover the samples; rows beyond the node's
budget at the disk's bandwidth), checked against a computation written here; and the
executor: two replicas on one node compute each training sample's frozen prefix exactly once
over a run whose prefix grows (k = 3, then 5) — no separate fill pass, rows advanced rather
than recomputed — and end with the same parameters as the same run without a cache.
"""

import json
from collections import Counter
from pathlib import Path

import pytest
import torch
from torch.utils.data import DistributedSampler

from pipeplan.cluster import cluster_from_flags
from pipeplan.costmodel import CostModel
from pipeplan.formats import Layout
from pipeplan.plan import TrainingShape, cache_pricing, decide_phase
from pipeplan.solver import Pins
from pipeplan.synthetic import preset_profile

# ----------------------------------------------------------------------------- pricing


def spread_layout(frozen: int) -> Layout:
    """One stage, four replicas: two stage-0 ranks on each of two nodes."""
    return Layout(
        frozen_layers=frozen,
        cached=True,
        micro_batches=2,
        micro_batch_size=8,
        schedule="gpipe",
        boundaries=(0, 14),
        rank_map=((0,), (1,), (2,), (3,)),
    )


@pytest.mark.parametrize("budget", [1 << 40, 64 << 20])
def test_cached_phase_pricing_equals_an_independent_computation(budget):
    """bert-base, 2 nodes × 2 devices, 5 frozen layers, 6,400 samples, 5 epochs. With a
    budget the whole cache fits in; with 64 MiB per node most rows spill to disk."""
    profile = preset_profile("bert-base")
    cluster = cluster_from_flags(
        nodes=2, devices_per_node=2, device_memory="16GiB", cache_budget=budget
    )
    model = CostModel(profile, cluster)
    shape = TrainingShape(global_batch=64, samples=6400, epochs=5)
    layout = spread_layout(5)
    steps = 6400 // 64

    # Written out here: 16 rows per step and stage-0 rank, row = layer 4's output per sample.
    row = profile.layers[4].out_bytes_per_sample
    in_memory = min(1.0, (budget // row) / 6400)
    stored = 16 * row * (in_memory / 12e9 + (1 - in_memory) / 1e9)  # host link, then disk
    uncached = model.evaluate(layout.model_copy(update={"cached": False})).step_s
    cached = model.evaluate(layout).step_s
    miss = steps * (uncached + stored)
    hit = steps * (cached + 16 * row * (1 - in_memory) / 1e9)
    # two nodes: a node's cache covers 1 − ½^e of the samples after e epochs
    expected = [(1 - 0.5**e) * hit + 0.5**e * miss for e in range(5)]

    pricing = cache_pricing(model, shape, layout, cached, survives=False)
    assert pricing.nodes == 2
    assert [pricing.epoch_s(k) for k in range(5)] == pytest.approx(expected, rel=1e-12)
    assert expected[0] == pytest.approx(miss)  # the first epoch: no separate pass, no hit
    if budget < 1 << 40:
        assert in_memory < 0.5  # the instance spills: the disk terms count
    else:
        assert in_memory == 1.0

    # The plan's one rule prices the phase that way and takes the cheaper of cached/uncached.
    choice = decide_phase(model, shape, 5, 5, True, Pins(), None, fixed_layout=layout)
    uncached_total = 5 * steps * uncached
    assert choice.total_s(5) == pytest.approx(min(sum(expected), uncached_total), rel=1e-12)
    assert choice.layout.cached == (sum(expected) < uncached_total)
    if choice.layout.cached:
        assert choice.first_epoch_s == pytest.approx(miss, rel=1e-12)


def test_one_node_hits_from_the_second_epoch_and_a_surviving_cache_at_once():
    profile = preset_profile("bert-base")
    model = CostModel(
        profile, cluster_from_flags(nodes=1, devices_per_node=4, device_memory="16GiB")
    )
    shape = TrainingShape(global_batch=64, samples=6400, epochs=3)
    layout = spread_layout(5)
    fresh = cache_pricing(model, shape, layout, 0.01, survives=False)
    assert fresh.nodes == 1
    assert [fresh.hit_fraction(k) for k in range(3)] == [0.0, 1.0, 1.0]
    survived = cache_pricing(model, shape, layout, 0.01, survives=True)
    assert survived.epoch_s(0) == survived.hit_epoch_s < fresh.epoch_s(0)


# ----------------------------------------------------------------------------- executor

MODEL, BATCH, STEPS = "vit-digits", 64, 3
FREEZE = [3, 3, 5, 5]  # two cached phases: the second advances the first one's cache


def config(cache: bool, budget: int):
    from pipeplan.formats import RunConfig

    return RunConfig(
        model=MODEL,
        nproc=2,
        epochs=len(FREEZE),
        max_steps_per_epoch=STEPS,
        global_batch=BATCH,
        freeze=",".join(map(str, FREEZE)),
        cache=cache,
        cache_budget_bytes=budget,
        device_memory_bytes=100 << 20,
        seed=0,
        name="run",
    )


def _train_counting(rank, world, *run_dirs):
    """One rank of each run of `run_dirs` in turn (one process group: the ranks start once),
    its Trainer instrumented: which training samples' prefix it computes from the input
    (matched by content within the batch being fed), the rows `prepare_cache` computes from
    inputs (the shape probe only) and the rows it advances; counted per run, into the run's
    directory (rank{rank}.json)."""
    import torch.distributed as dist

    from executor import cache as cache_module
    from executor import worker
    from executor.planning import RunPlanner
    from pipeplan.formats import RunConfig, load

    computed: Counter = Counter()
    counts = {"prepare_rows": 0, "advanced_rows": 0}
    feeding: list[torch.Tensor | None] = [None]
    in_prepare = [False]

    original_input = worker.Trainer.stage0_batch
    original_prefix = worker.Trainer.frozen_prefix
    original_prepare = worker.Trainer.prepare_cache
    original_advance = cache_module.ActivationCache.advance_rows

    def stage0_batch(self, indices):
        feeding[0] = indices
        try:
            return original_input(self, indices)
        finally:
            feeding[0] = None

    def frozen_prefix(self, inputs, device=None):
        if in_prepare[0]:
            counts["prepare_rows"] += len(inputs)
        elif feeding[0] is not None:
            unused = [int(i) for i in feeding[0]]
            for row in inputs:
                match = next(i for i in unused if torch.equal(self.data.train[i][0], row))
                unused.remove(match)
                computed[match] += 1
        return original_prefix(self, inputs, device)

    def prepare_cache(self, layout):
        in_prepare[0] = True
        try:
            return original_prepare(self, layout)
        finally:
            in_prepare[0] = False

    def advance_rows(self, *args, **kwargs):
        done = original_advance(self, *args, **kwargs)
        counts["advanced_rows"] += done
        return done

    worker.Trainer.stage0_batch = stage0_batch
    worker.Trainer.frozen_prefix = frozen_prefix
    worker.Trainer.prepare_cache = prepare_cache
    cache_module.ActivationCache.advance_rows = advance_rows

    for run_dir in run_dirs:
        computed.clear()
        counts.update(prepare_rows=0, advanced_rows=0)
        cfg = load(RunConfig, run_dir / "run.json")
        planner = RunPlanner.for_run(run_dir, cfg)
        worker.Trainer(cfg, run_dir, planner, torch.device("cpu")).train()
        state = {str(k): v for k, v in computed.items()}
        (run_dir / f"rank{rank}.json").write_text(json.dumps({"computed": state, **counts}))
        dist.barrier()  # the next run starts on every rank at once


def run_instrumented(root: Path, *runs: tuple[str, bool, int]) -> list[Path]:
    """Each run of `runs` (name, cache, budget), prepared under `root`, trained on 2 gloo
    ranks that start once for all of them (`_train_counting`)."""
    from executor.launch import prepare
    from pipeplan.spawn import run_gloo_ranks

    run_dirs = [prepare(config(c, b).model_copy(update={"name": n}), root) for n, c, b in runs]
    run_gloo_ranks(_train_counting, 2, tuple(run_dirs), deadline_s=300, what="instrumented runs")
    return run_dirs


def drawn_samples(replicas_per_epoch: list[int]) -> list[set[int]]:
    """Per epoch, the samples the replicas draw (the executor's sampler, independently)."""
    from executor.data import load_data
    from pipeplan import models

    data = load_data("digits", models.build(MODEL, seed=0), seed=0)
    drawn = []
    for epoch, replicas in enumerate(replicas_per_epoch):
        samples = set()
        for replica in range(replicas):
            sampler = DistributedSampler(
                data.train, replicas, replica, shuffle=True, seed=0, drop_last=True
            )
            sampler.set_epoch(epoch)
            samples |= set(list(sampler)[: STEPS * BATCH // replicas])
        drawn.append(samples)
    return drawn


def final_parameters(run_dir: Path) -> dict[str, torch.Tensor]:
    latest = (run_dir / "checkpoints" / "latest").read_text().strip()
    return torch.load(run_dir / "checkpoints" / latest / "model.pt", weights_only=True)


# vit-digits' rows hold 17 × 128 float32 (8,704 bytes): a budget of 700 rows keeps samples
# 0..699 in host memory and spills the other 738 to disk, so both paths are exercised.
ROW_BYTES, BUDGET_ROWS = 17 * 128 * 4, 700


@pytest.mark.multiprocess
@pytest.mark.timeout(600)
def test_two_replicas_compute_each_prefix_once_and_match_no_cache(tmp_path):
    from pipeplan.formats import STEP_RECORDS, PhaseRecord, read_records

    # The run without a cache (the parameters to match) trains after it on the same ranks.
    budget = BUDGET_ROWS * ROW_BYTES
    run_dir, reference = run_instrumented(
        tmp_path, ("cache", True, budget), ("nocache", False, budget)
    )
    records = list(read_records(run_dir / "run.jsonl"))
    phases = [r for r in records if isinstance(r, PhaseRecord)]
    shapes = [(p.layout.frozen_layers, p.layout.replicas, p.layout.cached) for p in phases]
    assert shapes == [(3, 2, True), (5, 2, True)]  # two replicas of one node share the cache
    ranks = [json.loads((run_dir / f"rank{r}.json").read_text()) for r in range(2)]

    computed: Counter = Counter()
    for rank in ranks:
        computed.update({int(k): v for k, v in rank["computed"].items()})
    drawn = drawn_samples([2] * len(FREEZE))
    everything = set().union(*drawn)
    # Each sample drawn anywhere in the run had its prefix computed from the input exactly
    # once, by one of the two replicas: a later draw by either replica hit the node's cache,
    # and the growth to 5 frozen layers advanced the cached rows instead of recomputing them.
    assert set(computed) == everything
    assert set(computed.values()) == {1}
    # No separate fill pass: entering a phase computes one probe row (the row's shape).
    assert [rank["prepare_rows"] for rank in ranks] == [2, 2]  # one per phase
    # The rows advanced at k = 3 → 5 are those the first phase stored, split between ranks.
    assert sum(rank["advanced_rows"] for rank in ranks) == len(drawn[0] | drawn[1])
    assert min(rank["advanced_rows"] for rank in ranks) > 0
    # Rows below the budget were kept in memory, the rest spilled (the last checkpoint's
    # description of the cache: rank 0's handle on the node's files).
    latest = (run_dir / "checkpoints" / "latest").read_text().strip()
    manifest = json.loads((run_dir / "checkpoints" / latest / "manifest.json").read_text())
    described = manifest["cache"]
    assert described["memory"]["rows"] == [0, BUDGET_ROWS]
    assert described["filled"] == len(everything)
    assert described["filled_in_memory"] == len([i for i in everything if i < BUDGET_ROWS]) > 0
    assert described["filled_spilled"] == len([i for i in everything if i >= BUDGET_ROWS]) > 0
    # The records tell the same: misses = rows computed, the rest hit.
    steps = [r for r in records if isinstance(r, STEP_RECORDS)]
    hits = sum(s.cache_hits for s in steps)
    assert hits == len(FREEZE) * STEPS * BATCH - len(everything) > 0

    # Same parameters as the run without a cache (bitwise: same rows, same arithmetic).
    got, expected = final_parameters(run_dir), final_parameters(reference)
    assert got.keys() == expected.keys()
    for key in got:
        assert torch.equal(got[key], expected[key]), key
    losses = [s.loss for s in steps]
    no_cache = [
        r.loss for r in read_records(reference / "run.jsonl") if isinstance(r, STEP_RECORDS)
    ]
    assert losses == no_cache
    # The node's cache files are gone at the end (run directory and /dev/shm).
    assert not (run_dir / "cache").exists()
    assert not Path(described["memory"]["file"]).parent.exists()
