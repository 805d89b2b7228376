"""Elastic transitions move parameters and optimizer state exactly, a run that changes layout
four times (once only its rank map; into a layout with a forward-only stage and out of it
again) ends where
single-process training with the same freezes ends, and each old phase's runtime is freed as
soon as it is dropped."""

import gc
import weakref

import pytest
import torch
from conftest import make_layout

from executor.migrate import install_states, migrate, moves, optimizer_states
from executor.parallel import PhaseRuntime, StepMean, set_frozen
from pipeplan import models

GLOBAL_BATCH, STEPS_PER_PHASE, LR = 8, 2, 1e-3
PHASES = [  # 2×1 → 1×2 → 1×2 → 2×1 → 2×1 with a growing freeze point (bert-synth: 8 layers)
    make_layout(GLOBAL_BATCH, 0, False, (0, 4, 8), ((0, 1),), 2, "1f1b"),
    make_layout(GLOBAL_BATCH, 2, False, (0, 8), ((0,), (1,)), 2, "gpipe"),
    # The same ranks in another rank map (replica 0 on rank 1), as the planner's placements
    # may change it between phases (`costmodel.PLACEMENTS`), then out of it.
    make_layout(GLOBAL_BATCH, 3, False, (0, 8), ((1,), (0,)), 2, "1f1b"),
    # Stage 0 (layers 0-2) frozen: it runs forward only (Layout.forward_only_stages == 1).
    make_layout(GLOBAL_BATCH, 4, False, (0, 3, 8), ((0, 1),), 2, "1f1b"),
    make_layout(GLOBAL_BATCH, 5, False, (0, 6, 8), ((0, 1),), 2, "1f1b"),  # and back
]
TRANSITIONS = range(1, len(PHASES))


def batches(seq):
    gen = torch.Generator().manual_seed(5)
    return [seq.example_batch(GLOBAL_BATCH, gen) for _ in range(STEPS_PER_PHASE * len(PHASES))]


def reference() -> torch.Tensor:
    seq = models.build("bert-synth", dropout=0.0)
    opt = torch.optim.AdamW(seq.layers.parameters(), lr=LR)  # frozen params get no grad: skipped
    data = iter(batches(seq))
    for spec in PHASES:
        set_frozen(seq.layers, spec.frozen_layers)
        for _ in range(STEPS_PER_PHASE):
            x, y = next(data)
            with torch.no_grad():
                h = seq.forward(x, 0, spec.frozen_layers)
            seq.loss(seq.forward(h, spec.frozen_layers), y).backward()
            opt.step()
            opt.zero_grad()
    return torch.cat([p.detach().flatten() for p in seq.layers.parameters()])


def snapshot(seq, runtime):
    """Owned layers' parameters and AdamW state, by (layer, parameter name)."""
    out = {}
    if runtime.module is None:
        return out
    states = optimizer_states(runtime.optimizer)
    for index, layer in runtime.module.indexed():
        for name, p in layer.named_parameters():
            state = {k: v.clone() for k, v in states.get(p, {}).items()}
            out[index, name] = (p.detach().clone(), state)
    return out


def _rank(rank, world, out):
    seq = models.build("bert-synth", dropout=0.0)
    data = iter(batches(seq))
    runtime, record = None, {}

    def make(params):
        return torch.optim.AdamW(params, lr=LR)

    example = lambda n: batches(seq)[0][0][:n]  # noqa: E731

    def runtime_for(spec):
        loss = StepMean(seq.loss_sum, seq.targets)
        return PhaseRuntime(seq.layers, loss, spec, rank, example, torch.device("cpu"), make)

    for k, spec in enumerate(PHASES):
        if runtime is None:
            runtime = runtime_for(spec)
        else:
            record[f"before{k}"] = snapshot(seq, runtime)
            states = migrate(
                seq.layers, runtime.layout, optimizer_states(runtime.optimizer), spec, rank
            )
            # The runtime, its stage module, and either its backward clock (its hooks left the
            # shared layers) and optimizer (its AdamW state with it) or, on a forward-only
            # stage, its feeder.
            parts = (runtime, runtime.module, runtime.backward_clock, runtime.optimizer)
            old = [weakref.ref(x) for x in (*parts, runtime.feeder) if x is not None]
            del parts  # only the weak references may remain
            runtime.destroy()
            gc.disable()  # reference counting alone must free it: no cycle holds the old stage
            try:
                runtime = runtime_for(spec)
                record[f"freed{k}"] = [ref() is None for ref in old]
            finally:
                gc.enable()
            install_states(runtime.optimizer, states)
            record[f"after{k}"] = snapshot(seq, runtime)
        for _ in range(STEPS_PER_PHASE):
            x, y = next(data)
            r = runtime.topology.replica or 0
            shard = slice(
                r * GLOBAL_BATCH // spec.replicas, (r + 1) * GLOBAL_BATCH // spec.replicas
            )
            runtime.step(x[shard], y[shard])
    record["final"] = snapshot(seq, runtime)
    torch.save(record, f"{out}/rank{rank}.pt")
    runtime.destroy()


@pytest.fixture(scope="module")
def records(tmp_path_factory, gloo_ranks_module):
    out = tmp_path_factory.mktemp("migrate")
    gloo_ranks_module(_rank, 2, str(out), deadline_s=150, what="migration test ranks")
    return [torch.load(out / f"rank{r}.pt") for r in range(2)]


def merged(records, key):
    result = {}
    for rank_record in records:
        result.update(rank_record[key])
    return result


def test_moves_send_each_layer_from_its_old_owner_to_its_new_stage():
    planned = moves(PHASES[0], PHASES[1], 8)
    assert [m.src for m in planned] == [0] * 4 + [1] * 4
    assert [m.dsts for m in planned] == [(1,)] * 4 + [(0,)] * 4


@pytest.mark.multiprocess
@pytest.mark.timeout(200)
@pytest.mark.parametrize("k", TRANSITIONS)
def test_transition_preserves_parameters_and_optimizer_state_exactly(records, k):
    before, frozen = merged(records, f"before{k}"), PHASES[k].frozen_layers
    for rank_record in records:
        for (layer, name), (param, state) in rank_record[f"after{k}"].items():
            old_param, old_state = before[layer, name]
            assert torch.equal(param, old_param)
            if layer >= frozen:
                assert state.keys() == old_state.keys() == {"step", "exp_avg", "exp_avg_sq"}
                assert all(torch.equal(state[key], old_state[key]) for key in state)
            else:
                assert state == {}  # frozen layers drop their optimizer state


@pytest.mark.multiprocess
@pytest.mark.timeout(200)
@pytest.mark.parametrize("k", TRANSITIONS)
def test_the_old_phase_runtime_is_freed_without_the_garbage_collector(records, k):
    freed = [rank_record[f"freed{k}"] for rank_record in records]
    forward_only = PHASES[k - 1].forward_only_stages
    # 4 parts of every rank's old runtime; 3 on a rank whose old stage ran forward only.
    assert freed == [[True] * (3 if r < forward_only else 4) for r in range(2)]


@pytest.mark.multiprocess
@pytest.mark.timeout(200)
def test_transitions_through_a_forward_only_stage_end_where_single_process_training_ends(
    records,
):
    assert [p.forward_only_stages for p in PHASES] == [0, 0, 0, 1, 0]
    final = merged(records, "final")
    seq = models.build("bert-synth", dropout=0.0)
    params = []
    for index, layer in enumerate(seq.layers):
        for name, _ in layer.named_parameters():
            params.append(final[index, name][0].flatten())
    ours, expected = torch.cat(params), reference()
    assert float((ours - expected).norm() / expected.norm()) <= 1e-5
