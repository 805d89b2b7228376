"""What a fine-tuning trainer offers besides the loop: gradient clipping over all stages and
replicas (equal to single-process clip_grad_norm_, with a rank outside the layout taking part),
the learning-rate schedule, held-out loss and token accuracy, the epoch line, metrics.csv."""

import datetime
import itertools
import math
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist
from conftest import fake_pricing, make_layout

from executor.parallel import PhaseRuntime, StepMean
from executor.records import Recorder
from executor.worker import Trainer, epoch_line, eval_sums
from pipeplan import models
from pipeplan.formats import CheckpointManifest, EpochRecord, PhaseRecord, RunConfig
from pipeplan.spawn import free_port, run_ranks

GLOBAL_BATCH, STEPS, LR, CLIP = 8, 3, 1e-3, 0.05


def _batches(seq):
    gen = torch.Generator().manual_seed(321)
    return [seq.example_batch(GLOBAL_BATCH, gen) for _ in range(STEPS)]


def _reference() -> torch.Tensor:
    """One process, the whole model, torch's own clipping."""
    seq = models.build("bert-synth", dropout=0.0)
    params = list(seq.layers.parameters())
    opt = torch.optim.AdamW(params, lr=LR)
    norms = []
    for x, y in _batches(seq):
        seq.loss(seq.forward(x), y).backward()
        norms.append(float(torch.nn.utils.clip_grad_norm_(params, CLIP)))
        opt.step()
        opt.zero_grad()
    assert min(norms) > 10 * CLIP  # every step is clipped
    return torch.cat([p.detach().flatten() for p in seq.layers.parameters()])


def _train(rank, spec, path):
    seq = models.build("bert-synth", dropout=0.0)
    data = _batches(seq)
    runtime = PhaseRuntime(
        seq.layers,
        StepMean(seq.loss_sum, seq.targets),
        spec,
        rank,
        example_input=lambda n: data[0][0][:n],
        device=torch.device("cpu"),
        make_optimizer=lambda params: torch.optim.AdamW(params, lr=LR),
        clip_grad_norm=CLIP,
    )
    for x, y in data:
        r = runtime.topology.replica or 0
        shard = slice(r * GLOBAL_BATCH // spec.replicas, (r + 1) * GLOBAL_BATCH // spec.replicas)
        runtime.step(x[shard], y[shard])
    if runtime.topology.replica == 0:
        start, stop = spec.boundaries[runtime.topology.stage : runtime.topology.stage + 2]
        owned = {i: seq.layers[i].state_dict() for i in range(start, stop)}
        torch.save(owned, f"{path}-stage{runtime.topology.stage}.pt")
    runtime.destroy()


def _rank(rank, world, port, specs, out_dir):
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=60),
    )
    for name, spec in specs.items():
        _train(rank, spec, f"{out_dir}/{name}")
        dist.barrier()
    dist.destroy_process_group()


# bert-synth's 8 layers on 3 ranks: one or two of them idle in every layout.
SPECS = {
    "1x1": make_layout(GLOBAL_BATCH, 0, False, (0, 8), ((2,),), 2, "1f1b"),
    "2x1": make_layout(GLOBAL_BATCH, 0, False, (0, 4, 8), ((0, 1),), 2, "gpipe"),
    "1x2": make_layout(GLOBAL_BATCH, 0, False, (0, 8), ((0,), (1,)), 2, "1f1b"),
}


@pytest.mark.long
@pytest.mark.multiprocess
@pytest.mark.timeout(200)
def test_clipping_is_global_over_stages_and_replicas(tmp_path):
    run_ranks(_rank, 3, (3, free_port(), SPECS, str(tmp_path)), 180, "clipping ranks")
    expected = _reference()
    for name, spec in SPECS.items():
        seq = models.build("bert-synth", dropout=0.0)
        for s in range(spec.num_stages):
            for i, state in torch.load(tmp_path / f"{name}-stage{s}.pt").items():
                seq.layers[i].load_state_dict(state)
        got = torch.cat([p.detach().flatten() for p in seq.layers.parameters()])
        assert float((got - expected).norm() / expected.norm()) <= 1e-5, name


def test_learning_rate_warms_up_linearly_then_decays_by_cosine_to_a_tenth():
    trainer = SimpleNamespace(cfg=SimpleNamespace(lr=1.0, warmup_steps=4), total_steps=104)
    lr = [Trainer.lr_at(trainer, s) for s in range(105)]
    assert lr[:4] == [0.25, 0.5, 0.75, 1.0]
    assert lr[4] == 1.0 and lr[54] == pytest.approx(0.55) and lr[104] == pytest.approx(0.1)
    assert all(a >= b for a, b in itertools.pairwise(lr[4:]))


def test_held_out_sums_per_sample_and_per_next_token():
    logits = torch.tensor([[2.0, 0.0], [0.0, 1.0], [3.0, 0.0]])
    labels = torch.tensor([0, 0, 0])
    loss, count, correct, predicted = eval_sums(logits, labels, "classification").tolist()
    assert (count, correct, predicted) == (3, 2, 3)
    assert loss == pytest.approx(float(torch.nn.functional.cross_entropy(logits, labels)) * 3)

    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 5, 7, generator=gen)
    ids = torch.randint(1, 7, (2, 5), generator=gen)
    ids[1, 3:] = models.IGNORE_INDEX  # padding: not predicted, not scored
    loss, count, correct, predicted = eval_sums(logits, ids, "causal-lm").tolist()
    assert count == predicted == 4 + 2  # position t predicts t+1
    assert loss / count == pytest.approx(float(models.causal_lm_loss(logits, ids)))
    hits = (logits[0, :4].argmax(-1) == ids[0, 1:]).sum() + (
        logits[1, :2].argmax(-1) == ids[1, 1:3]
    ).sum()
    assert correct == float(hits)


def _evaluation_of_one_rank(monkeypatch, samples, replicas, replica, ahead_bytes) -> list:
    """What `Trainer.evaluate` does on one rank (`replica` None: outside the layout), as
    events: ("read", indices) of each batch's inputs, ("wait",) at each one-sided wait,
    ("forward", indices, valid) of each batch evaluated. Rows of 16 bytes of input and 8 of
    label: a batch of 4 is 96 bytes, on every rank (the all-reduce of `eval_ahead`)."""
    from functools import partial

    from executor import worker

    events: list = []

    def rows(dataset, indices, part):
        if part == 0:
            events.append(("read", [int(i) for i in indices]))
            return torch.stack([torch.full((4,), float(i)) for i in indices])
        return torch.tensor([int(i) for i in indices])

    def evaluate_batch(x, y, valid):
        events.append(("forward", [int(i) for i in x[:valid, 0]], valid))
        return torch.tensor([1.0, 1.0, 1.0, 1.0], dtype=torch.float64) * valid

    def all_reduce(tensor, op=None):
        if tensor.dtype == torch.int64:  # eval_ahead's: the largest first batch
            tensor.fill_(96)
        else:  # the sums: another replica's predictions counted (this one may have none)
            tensor[1] += 1

    monkeypatch.setattr(worker, "EVAL_AHEAD_BYTES", ahead_bytes)
    monkeypatch.setattr(worker, "one_sided_done", lambda: events.append(("wait",)))
    monkeypatch.setattr(worker, "comm_device", lambda *args: torch.device("cpu"))
    monkeypatch.setattr(worker.dist, "all_reduce", all_reduce)
    topology = SimpleNamespace(active=replica is not None, replica=replica)
    fake = SimpleNamespace(
        facts=SimpleNamespace(eval_samples=samples),
        runtime=SimpleNamespace(topology=topology, module=SimpleNamespace(train=lambda on: None)),
        decision=SimpleNamespace(layout=SimpleNamespace(replicas=replicas)),
        cfg=SimpleNamespace(global_batch=4 * replicas),
        data=SimpleNamespace(eval=None),
        pair=lambda dataset, indices: (rows(dataset, indices, 0), rows(dataset, indices, 1)),
        evaluate_batch=evaluate_batch,
        hold_modes=lambda: None,  # the stage's switch to evaluate, held anew
    )
    fake.eval_rows = partial(Trainer.eval_rows, fake)
    fake.eval_ahead = partial(Trainer.eval_ahead, fake)
    Trainer.evaluate(fake)
    return events


@pytest.mark.timeout(30)
@pytest.mark.parametrize("ahead_bytes", [200, 96, 2**30])  # 2 batches a chunk, 1, all
@pytest.mark.parametrize("samples", [1, 9, 21])  # a replica with none; 2 and 1 batches; 3
def test_held_out_reads_come_a_chunk_ahead_with_the_same_waits_on_every_rank(
    monkeypatch, samples, ahead_bytes
):
    """Found by the thirty-seventh round: a slow held-out read on stage 0 inside evaluation
    held stage 1 in its receive until the collective timeout ended a healthy run. Each rank
    now reads a chunk of batches (the first batch alone, then as many as EVAL_AHEAD_BYTES
    holds), waits for every rank's reads (one-sided), then evaluates the chunk: every rank
    makes the same waits (the replicas' shares differ, a replica may have no sample, a rank
    outside the layout reads none), and each replica evaluates its share once, in order.
    Found by the thirty-eighth round: a padded row read its item again (now padded from the
    rows read), and each item was read once for its input and again for its label (now once:
    `data.batch_pair`, below)."""
    per_chunk = max(1, ahead_bytes // 96)
    total = math.ceil(math.ceil(samples / 2) / 4)  # replica 0's batches: the largest share
    for replica in (0, 1, None):
        share = list(range(samples))[replica::2] if replica is not None else []
        batches = [share[i : i + 4] for i in range(0, len(share), 4)]
        expected, done = [], 0
        while done < total:
            chunk = batches[done : done + (per_chunk if done else 1)]
            # Each item read once: a short batch is padded from its rows, not read again.
            expected += [("read", b) for b in chunk]
            expected += [("wait",)] + [("forward", b, len(b)) for b in chunk]
            done += per_chunk if done else 1
        expected.append(("wait",))  # the ranks outside the layout wait for the pipeline's
        assert _evaluation_of_one_rank(monkeypatch, samples, 2, replica, ahead_bytes) == expected


@pytest.mark.timeout(30)
def test_a_held_out_batch_reads_each_item_once():
    """Found by the thirty-eighth round: evaluation called each held-out item's `__getitem__`
    once for the inputs and once for the labels. `batch_pair` reads each once and gives both,
    as `batch_rows` gives each."""
    from executor.data import batch_pair, batch_rows

    class Counted(torch.utils.data.Dataset):
        def __init__(self):
            self.calls: list[int] = []

        def __len__(self):
            return 5

        def __getitem__(self, i):
            self.calls.append(i)
            return torch.full((2,), float(i)), torch.tensor(i)

    data = Counted()
    x, y = batch_pair(data, [3, 1, 4], "m:load", "eval")
    assert data.calls == [3, 1, 4]
    assert torch.equal(x, batch_rows(data, [3, 1, 4], 0, "m:load", "eval"))
    assert torch.equal(y, batch_rows(data, [3, 1, 4], 1, "m:load", "eval"))


class _Counted(torch.utils.data.Dataset):
    """Items (input [i, i], label i + 0.5 as a float: no class check) that count their reads."""

    def __init__(self, n: int = 8):
        self.n, self.calls = n, []

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        self.calls.append(i)
        return torch.full((2,), float(i)), torch.tensor(i + 0.5)


class _Cache:
    """A node cache holding rows `held` (row i = 10·i), storing what it is given."""

    frozen_layers = 1

    def __init__(self, held):
        self.rows = {i: torch.full((2,), 10.0 * i) for i in held}

    def lookup(self, indices):
        hit = torch.tensor([int(i) in self.rows for i in indices], dtype=torch.bool)
        values = torch.zeros(len(indices), 2)
        for row, i in enumerate(indices):
            if int(i) in self.rows:
                values[row] = self.rows[int(i)]
        return values, hit

    def store(self, indices, computed, frozen_layers):
        self.rows |= {int(i): row for i, row in zip(indices, computed, strict=True)}


@pytest.mark.timeout(30)
@pytest.mark.parametrize("held", [None, [], [3, 5], [1, 3, 5, 6]])  # no cache; none, some, all
def test_a_training_step_reads_each_of_stage_0s_items_once(held):
    """Found by the thirty-eighth round: a stage-0 rank read each item of its batch twice,
    once for the input and again for the label (a slow or side-effecting `__getitem__` paid
    twice). Now once, cached or not: a hit's item is read for its label alone, a miss's for
    both; inputs and labels come in the batch's order, hits from the cache, misses through
    the frozen prefix (here ×10) and then stored."""
    data = _Counted()
    fake = SimpleNamespace(
        data=SimpleNamespace(train=data, name="m:load", padded=False),
        seq=None,
        cache=None if held is None else _Cache(held),
        frozen_prefix=lambda x: 10 * x,
    )
    fake.pair = lambda dataset, indices: Trainer.pair(fake, dataset, indices)
    fake.rows = lambda dataset, indices, part: Trainer.rows(fake, dataset, indices, part)
    fake.check_read = lambda split: None  # no data code of the user's: nothing held
    indices = torch.tensor([5, 1, 6, 3])
    inputs, labels, hits = Trainer.stage0_batch(fake, indices)
    assert sorted(data.calls) == [1, 3, 5, 6]
    scale = 1.0 if held is None else 10.0
    assert torch.equal(inputs, scale * torch.tensor([[5.0, 5], [1, 1], [6, 6], [3, 3]]))
    assert torch.equal(labels, torch.tensor([5.5, 1.5, 6.5, 3.5]))
    assert hits == len(set(held or []) & {5, 1, 6, 3})
    if held is not None:  # every row is in the cache now
        assert sorted(fake.cache.rows) == sorted({*held, 5, 1, 6, 3})


def _epoch(epoch: int, phase: int, accuracy: float | None = 0.5) -> EpochRecord:
    return EpochRecord(
        epoch=epoch,
        phase=phase,
        frozen_layers=phase * 2,
        steps=0,  # the recorder's test writes epochs without step records: none to count
        epoch_s=1.0,
        train_loss=0.7 - 0.1 * epoch,
        eval_loss=None if accuracy is None else 0.6,
        eval_accuracy=accuracy,
        samples_per_s=640.0,
    )


def test_the_epoch_line_says_what_a_batch_log_needs():
    line = epoch_line(_epoch(1, 1, 0.861), 4, "1x2 M=2 1f1b cached")
    assert line == (
        "epoch 2/4: train loss 0.6000, held-out loss 0.6000, accuracy 86.1%, 640 samples/s, "
        "2 layers frozen, 1x2 M=2 1f1b cached"
    )
    assert "held-out loss -, accuracy -" in epoch_line(_epoch(0, 0, None), 4, "1x1")


def test_the_epoch_line_says_1_layer_frozen_not_1_layers():
    """Found by the sixty-fourth round: the epoch line said "1 layers frozen". Now the noun
    agrees with the count."""
    one = _epoch(1, 1).model_copy(update={"frozen_layers": 1})
    assert ", 1 layer frozen, 1x2" in epoch_line(one, 4, "1x2")
    assert ", 0 layers frozen, 1x1" in epoch_line(_epoch(0, 0), 4, "1x1")


def _phase(phase: int, stages: int) -> PhaseRecord:
    boundaries = (0, 8) if stages == 1 else (0, 4, 8)
    rank_map = ((0,), (1,)) if stages == 1 else ((0, 1),)
    layout = make_layout(8, phase * 2, False, boundaries, rank_map, 2, "gpipe")
    return PhaseRecord(
        layout=layout,
        predicted_step_s=0.1,
        pricing=fake_pricing(),
        phase=phase,
        start_step=0,  # no step records before it (see _epoch)
        start_epoch=phase,
        transition_s=0.0,
    )


def _stepless(epoch: int, phase: int, accuracy: float | None = 0.5) -> EpochRecord:
    """An epoch record without step records, as the records check it (a resume reads them
    back): no step, so no samples and no training loss."""
    return _epoch(epoch, phase, accuracy).model_copy(
        update={"train_loss": None, "samples_per_s": 0.0}
    )


def test_metrics_csv_has_a_row_per_epoch_and_follows_a_resume(tmp_path):
    recorder = Recorder(tmp_path / "run.jsonl", writes=True)
    records = (_phase(0, 2), _stepless(0, 0), _phase(1, 1), _stepless(1, 1))
    for record in (*records, _stepless(2, 1, None)):
        recorder.write(record)
    rows = (tmp_path / "metrics.csv").read_text().splitlines()
    assert rows == [
        "epoch,train_loss,eval_loss,eval_accuracy,samples_per_s,frozen_layers,layout",
        "0,,0.6,0.5,0.0,0,2x1 M=2 gpipe",
        "1,,0.6,0.5,0.0,2,1x2 M=2 gpipe",
        "2,,,,0.0,2,1x2 M=2 gpipe",
    ]
    manifest = CheckpointManifest(
        step=10,
        epoch=1,
        step_in_epoch=0,
        phase=0,
        frozen_layers=0,
        grad_history=[],
        grad_norm_sums={},
        grad_norm_steps=0,
        world_size=2,
        model="bert-synth",
        config=RunConfig(name="t", model="bert-synth"),
    )
    recorder.truncate(manifest)  # a resume from the end of epoch 0 rewrites the rest
    assert (tmp_path / "metrics.csv").read_text().splitlines() == rows[:2]
    recorder.close()
    other = Recorder(tmp_path / "sub" / "run.jsonl", writes=False)  # ranks other than 0
    other.write(_epoch(0, 0))
    assert not other.metrics_path.exists()


@pytest.mark.timeout(60)
def test_a_timed_out_collective_names_the_peer_whose_heartbeat_stopped(monkeypatch):
    """Found by the forty-seventh round: under torchrun a rank SIGSTOPped mid-step went
    unnamed; rank 0, whose collective timed out waiting for it, blamed itself. Its report now
    reads the heartbeats (`worker.named_silent`): a peer whose beats did not move is named,
    as a wait for one-sided work names it. Three ranks in one store: 0 reports, 1 is
    stopped (its beats never move), 2 beats."""
    import threading
    import time

    from executor import faults, worker

    store = dist.HashStore()
    waits = worker.OneSidedWaits.start(store, timeout_s=600, rank=0, world=3)
    monkeypatch.setattr(worker, "_one_sided", [waits])
    store.set(f"{waits.prefix}/alive/1", "0 5")
    done = threading.Event()

    def beat() -> None:
        for n in itertools.count():
            store.set(f"{waits.prefix}/alive/2", f"0 {n}")
            if done.wait(0.1):
                return

    threading.Thread(target=beat, daemon=True).start()
    try:
        time.sleep(0.2)
        assert worker.silent_peers(look_s=1.5) == [1]
        gloo = "[../gloo/transport/tcp/pair.cc:534] Timed out waiting 10000ms for recv operation"
        timeout = RuntimeError(gloo)
        named = worker.named_silent(timeout)
        assert isinstance(named, faults.PeerSilent) and named.__cause__ is timeout
        assert str(named) == (
            "no response from rank 1 (stopped or hung: no heartbeat) while rank 0 waited in a "
            "collective: a collective failed: Timed out waiting 10000ms for recv operation"
        )
        assert faults.classify(named) == "timeout"
        other = ValueError("sample 3 is unreadable")  # not a timeout: kept as it is
        assert worker.named_silent(other) is other
        # The fifty-third round: a peer killed mid-step, gloo's lost connection named no one
        # under torchrun. The peer whose beats stopped is named; still a "lost" report.
        gloo = "[../gloo/transport/tcp/pair.cc:537] Read error [127.0.0.1]:1929: Connection reset"
        lost = RuntimeError(gloo + " by peer")
        named = worker.named_lost(lost)
        assert isinstance(named, faults.PeerLost) and named.__cause__ is lost
        assert str(named) == (
            "lost rank 1 (its heartbeat stopped: killed or failed; its node's output says why) "
            "while rank 0 waited in a collective: a collective failed: Read error "
            "[127.0.0.1]:1929: Connection reset by peer"
        )
        assert faults.classify(named) == "lost" and worker.named_lost(timeout) is timeout
    finally:
        done.set()
        waits.close()


@pytest.mark.parametrize("there", [True, False])
def test_a_skipped_recalibration_says_nothing_once_the_run_directory_is_gone(
    tmp_path, caplog, there
):
    """Found by the forty-seventh round: `rm -rf` of a live run at a refit printed "INFO:
    recalibration skipped: runs/r: no such run directory" before the run's line that the
    directory was deleted. Skipped for too few steps, it is said; for a directory gone, the
    next step's line says it alone."""
    from pipeplan.errors import PipeplanError

    def too_few(*args):
        raise PipeplanError("too few steps to fit")

    run_dir = tmp_path / "r"
    if there:
        run_dir.mkdir()
    planner = SimpleNamespace(profile=None)
    trainer = SimpleNamespace(fit_profile=too_few, run_dir=run_dir, planner=planner, cfg=None)
    with caplog.at_level("DEBUG", logger="pipeplan"):
        Trainer.refit(trainer)
    infos = [r.getMessage() for r in caplog.records if r.levelname == "INFO"]
    assert infos == (["recalibration skipped: too few steps to fit"] if there else [])
    assert any("recalibration skipped" in r.getMessage() for r in caplog.records)


def test_a_layer_whose_gradient_is_zero_or_none_is_recorded_with_a_norm_of_0(
    single_rank_group,
):
    """Found by the sixty-sixth round: an active layer whose gradient was exactly 0 (a
    zero-initialised head: nothing flows back through it) or never reached it (a layer the
    forward bypasses: every `grad` None) was left out of the epoch's grad_norms and the
    checkpoint's grad_norm_sums (`if v > 0`), and the run's own readers refused them after
    training ("grad_norms lacks active layer 2"). Each is measured as 0.0, which the readers
    take."""
    from executor.checkpoint import check_sums_measured, has_parameters
    from pipeplan.formats.run import _check_grad_norms

    seq = models.build("bert-synth", dropout=0.0)
    layers = len(seq.layers)
    with torch.no_grad():  # the classifier's weight: no gradient flows back past the head
        seq.layers[-1].parts[-1].weight.zero_()
    seq.layers[3].register_forward_hook(lambda layer, args, out: args[0])  # layer 3 unused
    x, y = _batches(seq)[0]
    runtime = PhaseRuntime(
        seq.layers,
        StepMean(seq.loss_sum, seq.targets),
        make_layout(GLOBAL_BATCH, 2, False, (0, layers), ((0,),), 2, "1f1b"),
        0,
        example_input=lambda n: x[:n],
        device=torch.device("cpu"),
        make_optimizer=lambda params: torch.optim.AdamW(params, lr=LR),
    )
    runtime.step(x, y)
    trainer = SimpleNamespace(runtime=runtime, seq=seq)
    trainer.grad_norm_state = lambda: Trainer.grad_norm_state(trainer)
    sums, steps = trainer.grad_norm_state()
    norms = Trainer.gather_grad_norms(trainer)
    runtime.destroy()
    head = layers - 1
    assert sums == {str(i): v for i, v in norms.items()} and steps == 1
    assert {i: v for i, v in norms.items() if i != head} == dict.fromkeys(range(2, head), 0.0)
    assert norms[head] > 0  # the classifier itself has a gradient
    phase = _phase(1, 1)  # frozen_layers 2 of bert-synth's 8, as measured here
    epoch = _epoch(1, 1).model_copy(update={"grad_norms": {str(k): v for k, v in norms.items()}})
    _check_grad_norms(epoch, phase, "run.jsonl:3")  # the epoch record's reader takes it
    manifest = SimpleNamespace(grad_norm_steps=steps, frozen_layers=2, grad_norm_sums=sums)

    def refuse(field, why):
        raise AssertionError(f"{field}: {why}")

    check_sums_measured(manifest, has_parameters(seq.layers), refuse)  # and the checkpoint's
