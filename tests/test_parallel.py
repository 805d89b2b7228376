"""Pipeline × data parallel on gloo equals single-process training (relative error ≤ 1e-5),
also with forward-only leading stages (`Layout.forward_only_stages`), which receive nothing back
and record forward time only."""

import itertools

import pytest
import torch
import torch.distributed as dist
from conftest import make_layout

from executor.parallel import PhaseRuntime, StepMean, set_frozen
from pipeplan import models
from pipeplan.formats import Layout

GLOBAL_BATCH, STEPS, LR = 8, 3, 1e-3
# A case's model and precision, when not bert-synth in fp32: gpt2-tiny (6 layers) classifying
# padded text carries its padding mask between stages as a trailing channel of the activation.
PADDED = dict(name_or_path="gpt2-tiny", task="classification", padding_mask=True)
MODELS = {"gpt2-bf16-k0": (PADDED, "bf16"), "gpt2-bf16-fwd1": (PADDED, "bf16")}


def build(case: str):
    kwargs, _ = MODELS.get(case, (dict(name_or_path="bert-synth"), "fp32"))
    return models.build(**kwargs, dropout=0.0)


def batches(seq):
    gen = torch.Generator().manual_seed(123)
    return [seq.example_batch(GLOBAL_BATCH, gen) for _ in range(STEPS)]


def reference(frozen_layers: int) -> torch.Tensor:
    seq = models.build("bert-synth", dropout=0.0)
    set_frozen(seq.layers, frozen_layers)
    params = [p for p in seq.layers.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=LR)
    for x, y in batches(seq):
        with torch.no_grad():
            h = seq.forward(x, 0, frozen_layers)
        seq.loss(seq.forward(h, frozen_layers), y).backward()
        opt.step()
        opt.zero_grad()
    return torch.cat([p.detach().flatten() for p in seq.layers.parameters()])


def _train(rank, spec, out, case, p2p):
    seq = build(case)
    data = batches(seq)
    prefix = spec.frozen_layers if spec.cached else 0

    def stage0_input(x):
        with torch.no_grad():  # what the cache holds: the frozen prefix's output
            return seq.forward(x, 0, prefix) if prefix else x

    runtime = PhaseRuntime(
        seq.layers,
        StepMean(seq.loss_sum, seq.targets),
        spec,
        rank,
        example_input=lambda n: stage0_input(data[0][0][:n]),
        device=torch.device("cpu"),
        make_optimizer=lambda params: torch.optim.AdamW(params, lr=LR),
        precision=MODELS.get(case, (None, "fp32"))[1],
    )
    losses, times = [], []
    for x, y in data:
        r = runtime.topology.replica or 0
        shard = slice(r * GLOBAL_BATCH // spec.replicas, (r + 1) * GLOBAL_BATCH // spec.replicas)
        times.append(runtime.step(stage0_input(x[shard]), y[shard]))
        losses.append(times[-1].loss)
    grads = [p.grad for p in seq.layers.parameters() if p.grad is not None]
    torch.save(
        {"p2p": list(p2p), "times": [vars(t) for t in times], "grads": len(grads)},
        f"{out}-rank{rank}.pt",
    )
    p2p.clear()
    if runtime.topology.replica == 0:
        start, stop = spec.boundaries[runtime.topology.stage : runtime.topology.stage + 2]
        owned = {i: seq.layers[i].state_dict() for i in range(start, stop)}
        torch.save({"layers": owned, "losses": losses}, f"{out}-stage{runtime.topology.stage}.pt")
    runtime.destroy()


class Watched:
    """`torch.distributed` as a module sees it, except that the point-to-point calls in `kinds`
    are logged as (call, peer's global rank) first: each op of a batch (torch's schedules post
    theirs that way), each send or receive."""

    def __init__(self, log: list, kinds: set[str]):
        self.log, self.kinds = log, kinds

    def __getattr__(self, name):
        real = getattr(dist, name)
        if name not in self.kinds:
            return real

        def logged(*args, **kwargs):
            if name == "batch_isend_irecv":
                self.log.extend((op.op.__name__, op.peer) for op in args[0])
            else:
                peer = kwargs.get("dst", kwargs.get("src", args[1] if len(args) > 1 else None))
                self.log.append((name.removesuffix("_object_list"), peer))
            return real(*args, **kwargs)

        return logged


def watch_p2p() -> list[tuple[str, int]]:
    """Log every point-to-point call of torch's pipelining and of executor.feed."""
    from torch.distributed.pipelining import schedules, stage

    from executor import feed

    log: list[tuple[str, int]] = []
    # torch builds its batched ops from dist.isend/irecv themselves: those stay unwrapped there.
    torch_kinds = {"batch_isend_irecv", "send", "recv", "send_object_list", "recv_object_list"}
    for module in (schedules, stage):
        module.dist = Watched(log, torch_kinds)
    feed.dist = Watched(log, {"isend", "irecv", "send_object_list", "recv_object_list"})
    return log


def _rank(rank, world, specs, out_dir):
    # One process group for every case: each phase builds and destroys its groups in place,
    # the way the executor re-partitions, and start-up (about 7 s a process) is paid once.
    p2p = watch_p2p()
    for name, spec in specs.items():
        _train(rank, spec, f"{out_dir}/{name}", name, p2p)
        dist.barrier()  # idle ranks wait for the others before the next case


def collect(spec: Layout, prefix, case: str) -> tuple[torch.Tensor, list[float]]:
    seq = build(case)
    losses = []
    for s in range(spec.num_stages):
        saved = torch.load(f"{prefix}-stage{s}.pt")
        for i, state in saved["layers"].items():
            seq.layers[i].load_state_dict(state)
        if s == spec.num_stages - 1:
            losses = saved["losses"]
    return torch.cat([p.detach().flatten() for p in seq.layers.parameters()]), losses


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm())


LAYOUTS = {  # name: (boundaries, rank_map) for bert-synth's 8 layers
    "1x1": ((0, 8), ((0,),)),
    "2x1": ((0, 4, 8), ((0, 1),)),
    "1x2": ((0, 8), ((0,), (1,))),
    "2x2": ((0, 4, 8), ((0, 1), (2, 3))),
}
SPECS = {
    f"{layout}-{schedule}": make_layout(GLOBAL_BATCH, 0, False, *LAYOUTS[layout], 2, schedule)
    for layout, schedule in itertools.product(LAYOUTS, ["gpipe", "1f1b"])
}
# Fewer micro-batches than stages: GPipe runs them (1F1B refuses).
SPECS["2x1-gpipe-M1"] = make_layout(GLOBAL_BATCH, 0, False, *LAYOUTS["2x1"], 1, "gpipe")
# Rank maps other than whole pipelines on consecutive ranks, as the planner's placements emit
# them (`costmodel.PLACEMENTS`): each stage's ring on consecutive ranks ("rings", a pipeline
# every other rank), and replicas not in rank order ("spread": [[0], [2], [1]] on 2 × 2).
SPECS["2x2-rings-1f1b"] = make_layout(
    GLOBAL_BATCH, 0, False, (0, 4, 8), ((0, 2), (1, 3)), 2, "1f1b"
)
SPECS["1x2-swapped-1f1b"] = make_layout(GLOBAL_BATCH, 0, False, (0, 8), ((1,), (0,)), 2, "1f1b")
PLAIN = list(SPECS)  # nothing frozen
SPECS["frozen3-recompute"] = make_layout(GLOBAL_BATCH, 3, False, (0, 5, 8), ((1, 3),), 2, "1f1b")
SPECS["frozen3-cached"] = make_layout(GLOBAL_BATCH, 3, True, (0, 5, 8), ((1, 3),), 2, "1f1b")
# Forward-only leading stages, 5 frozen layers: k = 1 over two replicas (stage 1 starts with the
# last frozen layer), and k = 2 feeding a one-stage pipeline through a middle forward-only stage.
FORWARD_ONLY = {
    "frozen5-fwd1-2x2": make_layout(GLOBAL_BATCH, 5, False, (0, 4, 8), ((0, 1), (2, 3)), 2, "1f1b"),
    "frozen5-fwd2-gpipe": make_layout(
        GLOBAL_BATCH, 5, False, (0, 2, 5, 8), ((0, 1, 3),), 2, "gpipe"
    ),
}
SPECS.update(FORWARD_ONLY)
# bf16 boundaries and the padding mask: with the trained stages cut alike (at layer 4), a
# forward-only stage holding layers 0-1 must change nothing at all.
SPECS["gpt2-bf16-k0"] = make_layout(GLOBAL_BATCH, 3, False, (0, 4, 6), ((0, 1),), 2, "1f1b")
SPECS["gpt2-bf16-fwd1"] = make_layout(GLOBAL_BATCH, 3, False, (0, 2, 4, 6), ((0, 1, 2),), 2, "1f1b")


@pytest.fixture(scope="module")
def results(tmp_path_factory, gloo_ranks_module):
    out = tmp_path_factory.mktemp("parallel")
    gloo_ranks_module(_rank, 4, SPECS, str(out), deadline_s=200, what="parallel test ranks")
    results = {name: collect(spec, out / name, name) for name, spec in SPECS.items()}
    ranks = {name: [torch.load(out / f"{name}-rank{r}.pt") for r in range(4)] for name in SPECS}
    return results, ranks


@pytest.mark.multiprocess
@pytest.mark.timeout(260)
@pytest.mark.parametrize("case", PLAIN)
def test_layouts_match_single_process(results, case):
    params, losses = results[0][case]
    assert rel_err(params, reference(0)) <= 1e-5
    assert len(losses) == STEPS and all(loss is not None for loss in losses)


@pytest.mark.multiprocess
@pytest.mark.timeout(260)
def test_frozen_prefix_matches_single_process_with_and_without_cache(results):
    expected = reference(3)
    recompute, cached = results[0]["frozen3-recompute"], results[0]["frozen3-cached"]
    assert rel_err(recompute[0], expected) <= 1e-5
    assert rel_err(cached[0], expected) <= 1e-5
    assert recompute[1] == pytest.approx(cached[1], rel=1e-5)  # losses, cache on vs off


@pytest.mark.multiprocess
@pytest.mark.timeout(260)
@pytest.mark.parametrize("case", FORWARD_ONLY)
def test_forward_only_stages_match_single_process(results, case):
    params, losses = results[0][case]
    assert FORWARD_ONLY[case].forward_only_stages >= 1
    assert rel_err(params, reference(5)) <= 1e-5
    assert len(losses) == STEPS and all(loss is not None for loss in losses)


@pytest.mark.multiprocess
@pytest.mark.timeout(260)
@pytest.mark.parametrize("case", FORWARD_ONLY)
def test_nothing_is_sent_back_to_a_forward_only_stage(results, case):
    layout, ranks = FORWARD_ONLY[case], results[1][case]
    k, M = layout.forward_only_stages, layout.micro_batches
    for row in layout.rank_map:
        for stage in range(k):
            rank, before, after = row[stage], row[stage - 1] if stage else None, row[stage + 1]
            log = ranks[rank]["p2p"]
            received = [peer for call, peer in log if "recv" in call]
            # Its input, once per micro-batch (and its shape once), from the stage before it:
            # never a gradient, from anyone.
            assert received == ([before] * (1 + M * STEPS) if before is not None else [])
            assert [peer for call, peer in log if "send" in call] == [after] * (1 + M * STEPS)
            senders = {
                r
                for r, other in enumerate(ranks)
                for c, p in other["p2p"]
                if "send" in c and p == rank
            }
            assert senders == {before} - {None}
            assert ranks[rank]["grads"] == 0  # no layer of it computed a gradient
            for times in ranks[rank]["times"]:
                # Its record says forward only: calibrate and report read it that way.
                assert times["fwd_s"] > 0 and times["loss"] is None
                assert times["bwd_s"] == times["allreduce_s"] == times["optimizer_s"] == 0
                assert times["step_s"] == pytest.approx(times["fwd_s"] + times["wait_s"])


@pytest.mark.multiprocess
@pytest.mark.timeout(260)
def test_forward_only_stages_carry_bf16_activations_and_the_padding_mask(results):
    (k0, k0_losses), (fwd, fwd_losses) = results[0]["gpt2-bf16-k0"], results[0]["gpt2-bf16-fwd1"]
    assert SPECS["gpt2-bf16-fwd1"].forward_only_stages == 1
    # The same operations on the same values in the same order: equal, not merely close.
    assert torch.equal(fwd, k0) and fwd_losses == k0_losses
    start = torch.cat([p.detach().flatten() for p in build("gpt2-bf16-k0").layers.parameters()])
    assert not torch.equal(k0, start)  # training moved them
