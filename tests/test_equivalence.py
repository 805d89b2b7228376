"""End-to-end equivalence through the real command: `pipeplan run` on 2 ranks, with a layout
change (a 2-stage pipeline becomes 2 data-parallel replicas once 5 layers freeze) and the
activation cache on, ends with the parameters of a plain single-process PyTorch loop
written here: the same data order (the per-replica `DistributedSampler` shards of each epoch
make up each step's global batch), learning-rate schedule, AdamW weight decay and freezes.
The layouts are pinned by plan files (`conftest.pinned_plan`), so each run covers the layouts
and transitions it is about whatever the planner would choose.

A third run pins, through a plan file, a middle phase whose first stage holds only frozen layers
and runs forward only (`Layout.forward_only_stages`), between two phases whose stages all train:
the same parameters again, evaluation through that stage, its records saying forward only.

Dropout: the executor draws dropout masks per rank, so no single-process loop can draw the
same ones; equivalence with the plain loop is checked without dropout, and cache on against
cache off with dropout 0.1 on the layers that train (frozen layers run in eval mode).
"""

import math

import pytest
import torch
from conftest import make_layout, pinned_plan
from torch.utils.data import DistributedSampler

import cli
from executor.data import load_data
from pipeplan import models

MODEL, EPOCHS, STEPS, BATCH, LR, WEIGHT_DECAY = "vit-digits", 3, 3, 64, 1e-3, 0.01
# Frozen layers per epoch. The cached phase has two epochs: its first fills the node's cache as
# it trains (costing an uncached epoch plus the store), so one epoch would not pay for it.
FREEZE = [0, 5, 5]
# Every run here follows a pinned plan: its cluster sets the memory, so no --device-memory
# (refused beside --plan, where it means nothing).
BASE = ["--model", MODEL, "--nproc", "2", "--epochs", str(EPOCHS)]
BASE += ["--max-steps-per-epoch", str(STEPS), "--global-batch", str(BATCH), "--seed", "0"]
BASE += ["--lr", str(LR)]
# Sums over a batch in another order: the observed relative error is ~3e-7; margin ×6.
TOLERANCE = 2e-6


def final_parameters(run_dir) -> dict[str, torch.Tensor]:
    latest = (run_dir / "checkpoints" / "latest").read_text().strip()
    return torch.load(run_dir / "checkpoints" / latest / "model.pt", weights_only=True)


def flat(parameters: dict[str, torch.Tensor]) -> torch.Tensor:
    return torch.cat([parameters[k].flatten() for k in sorted(parameters)])


def reference(replicas_per_epoch: list[int], freeze: list[int] = FREEZE) -> dict[str, torch.Tensor]:
    """A plain loop: one process, the whole model, the executor's data order and schedule."""
    torch.manual_seed(0)
    seq = models.build(MODEL, seed=0)
    data = load_data("digits", seq, seed=0)
    opt = torch.optim.AdamW(seq.layers.parameters(), lr=LR, weight_decay=WEIGHT_DECAY)
    total = STEPS * EPOCHS
    step = 0
    for epoch, (frozen, replicas) in enumerate(zip(freeze, replicas_per_epoch, strict=True)):
        for index, layer in enumerate(seq.layers):
            layer.requires_grad_(index >= frozen)
        orders = []
        for replica in range(replicas):
            sampler = DistributedSampler(
                data.train, replicas, replica, shuffle=True, seed=0, drop_last=True
            )
            sampler.set_epoch(epoch)
            orders.append(torch.tensor(list(sampler)))
        local = BATCH // replicas
        for k in range(STEPS):
            idx = torch.cat([o[k * local : (k + 1) * local] for o in orders])
            x = torch.stack([data.train[int(i)][0] for i in idx])
            y = torch.stack([data.train[int(i)][1] for i in idx])
            progress = step / max(1, total)
            for group in opt.param_groups:  # cosine to 10 %, no warm-up: RunConfig's default
                group["lr"] = LR * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))
            with torch.no_grad():
                h = seq.forward(x, 0, frozen)
            seq.loss(seq.forward(h, frozen), y).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            step += 1
    return {
        f"{i}.{n}": p.detach()
        for i, layer in enumerate(seq.layers)
        for n, p in layer.named_parameters()
    }


# What the planner chose for these runs before forward-only stages existed (it now keeps the
# 2x1 layout, its stage 0 forward-only, over so short a run): pinned, so that the runs still
# change layout and read the cache.
CACHED = [
    make_layout(BATCH, 0, False, (0, 5, 10), ((0, 1),), 4, "1f1b"),
    make_layout(BATCH, 5, True, (0, 10), ((0,), (1,)), 1, "1f1b"),
]
UNCACHED = [CACHED[0], CACHED[1].model_copy(update={"cached": False})]


def run(root, name, *extra, args=BASE) -> dict[str, torch.Tensor]:
    assert cli.main(["run", *args, *extra, "--name", name, "--runs-dir", str(root)]) == 0
    return final_parameters(root / name)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("equivalence")
    # The cached run only: the same run without the cache ends bitwise equal to it
    # (test_autocache.py, and test_cache_on_equals_cache_off_with_dropout in `-m long`).
    return {"cache": run(root, "cache", *plan(root, "cache"))}, root


def plan(root, name, cached=True) -> list[str]:
    """`--plan` of FREEZE, with the cache or without (`--no-cache` is the plan's to give)."""
    path = root / f"{name}-plan.json"
    layouts = CACHED if cached else UNCACHED
    return ["--plan", pinned_plan(path, layouts, FREEZE, epochs=EPOCHS, cache=cached)]


@pytest.mark.multiprocess
@pytest.mark.timeout(400)
def test_run_equals_a_plain_single_process_loop(runs):
    from pipeplan.formats import STEP_RECORDS, PhaseRecord, read_records

    parameters, root = runs
    phases = [r for r in read_records(root / "cache" / "run.jsonl") if isinstance(r, PhaseRecord)]
    shapes = [(p.layout.num_stages, p.layout.replicas, p.layout.cached) for p in phases]
    assert shapes == [(2, 1, False), (1, 2, True)]  # the layout changes, the cache is read
    steps = [r for r in read_records(root / "cache" / "run.jsonl") if isinstance(r, STEP_RECORDS)]
    assert sum(s.cache_hits for s in steps) > 0  # samples of the second epoch hit
    per_epoch = [next(p for p in reversed(phases) if p.start_epoch <= e) for e in range(EPOCHS)]
    expected = flat(reference([p.layout.replicas for p in per_epoch]))
    start = flat({k: v for k, v in models.build(MODEL, seed=0).layers.state_dict().items()})
    for name, got in parameters.items():
        error = float((flat(got) - expected).norm() / expected.norm())
        assert error <= TOLERANCE, (name, error)
    assert float((expected - start[: len(expected)]).norm()) > 0  # training moved them


@pytest.mark.long
@pytest.mark.multiprocess
@pytest.mark.timeout(400)
def test_cache_on_equals_cache_off_with_dropout(tmp_path):
    # vit-digits' layers train with dropout 0.1 here; the frozen prefix runs in eval mode, so
    # reading it from the cache or computing it gives the same activations and the same draws.
    on = run(tmp_path, "on", "--dropout", "0.1", *plan(tmp_path, "on"))
    off = run(tmp_path, "off", "--dropout", "0.1", *plan(tmp_path, "off", False))
    # Bitwise: before frozen layers outside every stage were put in eval mode, filling the
    # cache drew dropout masks and the two runs parted by 1.3e-3 (relative).
    assert on.keys() == off.keys()
    for key in on:
        assert torch.equal(on[key], off[key]), key
    from pipeplan.formats import STEP_RECORDS, read_records

    def steps(name):
        return [
            r for r in read_records(tmp_path / name / "run.jsonl") if isinstance(r, STEP_RECORDS)
        ]

    assert [s.loss for s in steps("on")] == [s.loss for s in steps("off")]
    assert sum(s.cache_hits for s in steps("on")) > 0  # the cache was read, not only filled


# vit-digits has 10 layers. With 5 frozen, stage 0 (layers 0-3) runs forward only and stage 1
# starts with the last frozen layer; the phases before and after cut where both stages train.
PINNED_FREEZE = [0, 5, 6]
PINNED_CUTS = {0: (0, 5, 10), 5: (0, 4, 10), 6: (0, 7, 10)}


@pytest.mark.multiprocess
@pytest.mark.timeout(400)
def test_a_forward_only_stage_in_and_out_equals_a_plain_single_process_loop(tmp_path):
    from pipeplan.calibrate import measured
    from pipeplan.formats import STEP_RECORDS, EpochRecord, PhaseRecord, read_records

    layouts = [
        make_layout(BATCH, frozen, False, PINNED_CUTS[frozen], ((0, 1),), 2, "1f1b")
        for frozen in PINNED_CUTS
    ]
    path = tmp_path / "plan.json"
    # 2 micro-batches of 8 on one stage take more than 100 MiB as the planner prices them.
    pinned = pinned_plan(
        path, layouts, PINNED_FREEZE, epochs=EPOCHS, cache=False, device_memory="200MiB"
    )
    got = run(tmp_path, "fwd", "--plan", pinned)
    records = read_records(tmp_path / "fwd" / "run.jsonl")
    phases = [r for r in records if isinstance(r, PhaseRecord)]
    assert [p.layout.boundaries for p in phases] == [PINNED_CUTS[f] for f in PINNED_FREEZE]
    assert [p.layout.forward_only_stages for p in phases] == [0, 1, 0]
    expected = flat(reference([1] * EPOCHS, PINNED_FREEZE))
    assert float((flat(got) - expected).norm() / expected.norm()) <= TOLERANCE
    # Held-out evaluation ran through the forward-only stage too.
    epochs = [r for r in records if isinstance(r, EpochRecord)]
    assert len(epochs) == EPOCHS and all(e.eval_loss is not None for e in epochs)
    # Rank 0 holds the forward-only stage in phase 1: its record is forward time only, and
    # the step is one calibration can fit (every part adds up, every stage computed).
    steps = [r for r in records if isinstance(r, STEP_RECORDS) and r.phase == 1]
    assert len(steps) == STEPS
    for step in steps:
        first = next(r for r in step.ranks if r.stage == 0)
        assert first.fwd_s > 0 and first.bwd_s == first.allreduce_s == first.optimizer_s == 0
        assert measured(step)
    assert cli.main(["report", str(tmp_path / "fwd")]) == 0
