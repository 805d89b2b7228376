"""Hostile inputs, by class (red team, round 7): a causal-LM corpus with nothing to predict,
micro-batches without targets inside a good corpus, profiles whose fields contradict each
other, model folders whose weights are not the model's. A refused input is one line
`pipeplan: error: …` naming the file and field, exit code 2, no file changed (`refused`)."""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
import transformers
from test_hostile import CLUSTER, DIGITS, PREVIEW, PROFILE, refused, snapshot, with_path
from text_data import BERT

import cli
from executor.data import TaskData, TensorPairs, check_compatible
from executor.parallel import StepMean
from executor.planning import shipped_profile
from pipeplan import models
from pipeplan.cluster import format_bytes, parse_bandwidth
from pipeplan.errors import BadArgumentError, InputFileError, OutputError
from pipeplan.formats import Plan, Profile, RunConfig, load
from pipeplan.formats.base import MAX_BANDWIDTH, MIN_BANDWIDTH

IGNORE = models.IGNORE_INDEX


# --------------------------------------------------------------------------- causal-LM targets


def test_a_causal_lm_corpus_without_a_next_token_is_refused_before_any_rank_starts():
    """Texts of 0 or 1 token (the rest padding) give the model nothing to predict: every
    loss would be a mean of nothing (NaN). One text of 2 tokens is enough to train on."""
    seq = models.build("gpt2-tiny", padding_mask=True, seq_len=8)
    pad = models.PADDING
    ids = torch.full((6, 8), pad, dtype=torch.int64)
    ids[1:, 0] = 5  # one empty text, five of one token
    labels = torch.where(ids == pad, IGNORE, ids)
    data = TaskData("lm.jsonl", TensorPairs(ids, labels), TensorPairs(ids, labels), padded=True)
    with pytest.raises(BadArgumentError, match=r"'lm\.jsonl'.*no training text has a next token"):
        check_compatible(data, seq)
    ids[3, 1] = 6  # a text of 2 tokens: one target
    labels = torch.where(ids == pad, IGNORE, ids)
    pairs = TensorPairs(ids, labels)
    check_compatible(TaskData("lm.jsonl", pairs, pairs, padded=True), seq)
    # The held-out set alike (the forty-ninth round: the run went without evaluation).
    short = torch.where(torch.arange(8) < 1, ids, IGNORE)  # each text's first token only
    held_out = TensorPairs(ids, short)
    with pytest.raises(BadArgumentError, match=r"'lm\.jsonl'.*no held-out text has a next token"):
        check_compatible(TaskData("lm.jsonl", pairs, held_out, padded=True), seq)


class _Texts(torch.utils.data.Dataset):
    """A `module:function` set of `n` texts of 8 ids, each one token but those of `longer`."""

    def __init__(self, n: int, longer: tuple[int, ...] = ()):
        self.n, self.longer = n, longer

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        ids = torch.full((8,), models.PADDING, dtype=torch.int64)
        ids[: 3 if i in self.longer else 1] = 5
        return ids, torch.where(ids == models.PADDING, IGNORE, ids)


def test_full_texts_whose_labels_are_all_masked_are_not_blamed_on_their_length():
    """Found by the sixty-fourth round: texts of 32 real tokens whose labels were all -100
    were refused as "each has fewer than 2 tokens" (the user was told to lengthen full-length
    texts). The line says what it found, every label after a first token -100, and both
    causes."""
    seq = models.build("gpt2-tiny", padding_mask=True, seq_len=8)
    masked = TensorPairs(torch.full((4, 8), 5), torch.full((4, 8), IGNORE))
    good = TensorPairs(torch.full((4, 8), 5), torch.full((4, 8), 5))
    with pytest.raises(BadArgumentError) as raised:
        check_compatible(TaskData("m:load", masked, good, padded=True), seq)
    line = str(raised.value)
    assert "every label after a text's first token is -100" in line
    assert "labels masked out with -100" in line and "fewer than 2 tokens" in line


def test_a_module_corpus_without_a_next_token_is_refused_at_the_data_check(monkeypatch, caplog):
    """Found by the sixty-second round: a `module:function` corpus of one-token texts (read
    an item at a time, its first and last item at the data check) trained a whole epoch of
    nothing before it was refused, and held-out ones failed the run at its first
    evaluation. Now the items between are read too, up to TARGET_SCAN_ITEMS: a set read
    whole without a target is refused as a text file is, a longer one warned of, and one
    text of 2 tokens anywhere in it is enough."""
    from executor import data as D

    seq = models.build("gpt2-tiny", padding_mask=True, seq_len=8)
    good = TensorPairs(torch.full((4, 8), 5), torch.full((4, 8), 5))
    with pytest.raises(BadArgumentError, match=r"'m:load'.*no training text has a next token"):
        check_compatible(TaskData("m:load", _Texts(64), good, padded=True), seq)
    with pytest.raises(BadArgumentError, match=r"'m:load'.*no held-out text has a next token"):
        check_compatible(TaskData("m:load", good, _Texts(16), padded=True), seq)
    texts = TaskData("m:load", _Texts(64, longer=(40,)), _Texts(16, (9,)), padded=True)
    check_compatible(texts, seq)
    monkeypatch.setattr(D, "TARGET_SCAN_ITEMS", 32)  # a set longer than the scan: a warning
    with caplog.at_level(logging.WARNING, logger="pipeplan.data"):
        check_compatible(TaskData("m:load", _Texts(64), good, padded=True), seq)
    assert "train items 0 to 31 and 63 (read before training) have no next token" in caplog.text


def test_a_causal_lm_read_one_token_a_text_is_blamed_on_seq_len():
    """Found by the fifty-seventh round: `--seq-len 1` on a causal LM said "no training text
    has a next token to predict (each has fewer than 2 tokens …)" of texts of 4 to 14 tokens:
    the cut was --seq-len's. The line names the flag."""
    seq = models.build("gpt2-tiny", padding_mask=True, seq_len=1)
    ids = torch.full((6, 1), 5, dtype=torch.int64)  # every text cut to its first token
    pairs = TensorPairs(ids, ids.clone())
    with pytest.raises(BadArgumentError) as refused:
        check_compatible(TaskData("lm.jsonl", pairs, pairs, padded=True), seq)
    assert str(refused.value) == (
        "--seq-len 1: data 'lm.jsonl' is read 1 token a text, and a causal LM predicts each "
        "token from those before it: nothing to predict; give --seq-len 2 or more"
    )


def test_padded_user_data_marks_padding_with_minus_100_and_its_pad_ids_are_tokens():
    """Found by the twenty-ninth round: ids equal to pad_token_id were padding, so a real
    token that is the pad token (pad = eos) was dropped from attention and the loss. A data
    module's padded ids hold models.PADDING (−100) at padding, as text files do; the pad
    token's own id is a token (attended to: the mask channel is 0 at padding alone), and −100
    in data not marked padded names `TaskData(..., padded=True)`."""
    seq = models.build("gpt2-tiny", padding_mask=True, seq_len=8)
    pad = seq.config.pad_token_id
    ids = torch.tensor([[5, 6, pad, 7, pad, -100, -100, -100]] * 2)
    pairs = TensorPairs(ids, ids.clone())
    check_compatible(TaskData("lm", pairs, pairs, padded=True), seq)
    seq.layers.eval()
    with torch.no_grad():
        channel = seq.forward(ids, 0, 1)[..., -1]
    assert ((channel != 0) == (ids != models.PADDING)).all()
    with pytest.raises(
        BadArgumentError, match=r"-100 is padding in TaskData\(\.\.\., padded=True\)"
    ):
        check_compatible(TaskData("lm", pairs, pairs), seq)


def test_padded_data_padding_with_the_pad_id_as_before_is_warned_of(caplog):
    """The twenty-ninth round made padding -100 (models.PADDING) and the pad token's id a
    token: a data module that still pads with pad_token_id would train on its padding as
    text without a word. A row ending in a run of pad ids and holding no -100 is warned of, in
    one line for both sets, row by row (the thirtieth round: a line a set, and one row padded
    the new way hid the others); a row ending in one eos that is the pad token is not."""
    seq = models.build("gpt2-tiny", padding_mask=True, seq_len=8)
    pad = seq.config.pad_token_id
    old = torch.tensor([[5, 6, 7, 8, pad, pad, pad, pad], [5, 6, 7, 8, 9, 10, 11, pad]])
    new = torch.tensor([[5, 6, 7, 8, pad, -100, -100, -100], [5, 6, 7, 8, 9, 10, 11, pad]])
    mixed = torch.cat([old[:1], new[:1]])
    said = {}
    for case, ids in (("old", old), ("new", new), ("one eos", old[1:]), ("mixed", mixed)):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="pipeplan.data"):
            pairs = TensorPairs(ids, ids.clone())
            check_compatible(TaskData("lm", pairs, pairs, padded=True), seq)
        said[case] = [r.getMessage() for r in caplog.records if "pad_token_id" in r.getMessage()]
    assert not said["new"] and not said["one eos"], said
    assert len(said["old"]) == 1 and len(said["mixed"]) == 1, said
    line = f"1 train and 1 eval row(s) end in a run of pad_token_id {pad} and hold no -100"
    assert line in said["old"][0] and line in said["mixed"][0], said


def test_padded_data_of_padding_alone_is_refused():
    """Found by the thirtieth round: padded module data whose every row is -100 trained and
    evaluated without a word (accuracy at chance), where text files encoding to nothing are
    refused. It is refused naming the set."""
    seq = models.build("gpt2-tiny", padding_mask=True, seq_len=8)
    ids = torch.full((4, 8), models.PADDING)
    pairs = TensorPairs(ids, ids.clone())
    with pytest.raises(BadArgumentError, match="every train row is padding"):
        check_compatible(TaskData("lm", pairs, pairs, padded=True), seq)


class _PaddedRows(torch.utils.data.Dataset):
    """A plain `module:function` set of `n` classification rows of 8 ids, every one padding
    but those of `tokens`."""

    def __init__(self, n: int, tokens: tuple[int, ...] = ()):
        self.n, self.tokens = n, tokens

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        ids = torch.full((8,), models.PADDING, dtype=torch.int64)
        ids[: 2 if i in self.tokens else 0] = 5
        return ids, torch.tensor(i % 2)


def test_a_plain_dataset_of_padding_alone_is_refused_at_the_data_check(monkeypatch, caplog):
    """Found by the sixty-third round: only TensorPairs were checked for padding alone, so a
    `module:function` Dataset of classification rows all -100 trained silently ("accuracy
    60.0%"), and a held-out one passed --prepare-only. Its first and last items are read,
    then where both are padding the items between, up to TARGET_SCAN_ITEMS: a set read whole
    is refused naming the data and split, a longer one warned of, and one item holding a
    token anywhere in it is enough."""
    from executor import data as D

    seq = models.build("bert-tiny", padding_mask=True, seq_len=8, num_labels=2)
    good = _PaddedRows(16, tokens=tuple(range(16)))
    for train, eval_, split in ((_PaddedRows(64), good, "train"), (good, _PaddedRows(16), "eval")):
        with pytest.raises(BadArgumentError) as caught:
            check_compatible(TaskData("m:load", train, eval_, padded=True), seq)
        assert str(caught.value) == (
            f"data 'm:load': every {split} item is padding (-100), not one token"
        )
    check_compatible(
        TaskData("m:load", _PaddedRows(64, (40,)), _PaddedRows(16, (9,)), padded=True), seq
    )
    monkeypatch.setattr(D, "TARGET_SCAN_ITEMS", 32)  # a set longer than the scan: a warning
    with caplog.at_level(logging.WARNING, logger="pipeplan.data"):
        check_compatible(TaskData("m:load", _PaddedRows(64), good, padded=True), seq)
    assert "train items 0 to 31 and 63 (read before training) are padding (-100) alone" in (
        caplog.text
    )


def _step(logits: torch.Tensor, labels: torch.Tensor, replicas: int, micro_batches: int):
    """What a step does with StepMean: each replica's share split into micro-batches, each
    micro-batch's loss, gradients divided by M (the schedule's scale_grads) and averaged over
    the replicas (the all-reduce). Returns (the step record's loss, each micro-batch's loss);
    the gradient lands in logits.grad."""
    loss_fn = StepMean(models.causal_lm_loss_sum, models.causal_lm_targets)
    shares = [list(s.tensor_split(micro_batches)) for s in labels.tensor_split(replicas)]
    logit_shares = [list(s.tensor_split(micro_batches)) for s in logits.tensor_split(replicas)]
    targets = sum(int(loss_fn.targets(share)) for share in labels.tensor_split(replicas))
    loss_fn.begin(targets, micro_batches, replicas)
    reported, each = [], []
    for xs, ys in zip(logit_shares, shares, strict=True):
        losses = [loss_fn(x, y) for x, y in zip(xs, ys, strict=True)]
        (sum(losses) / (micro_batches * replicas)).backward()
        reported.append(float(torch.stack([loss.detach() for loss in losses]).mean()))
        each += [float(loss.detach()) for loss in losses]
    return sum(reported) / replicas, each


def _reference(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The per-token mean over the whole step, by hand: every position t < T-1 whose next
    label is a token, in one cross-entropy."""
    keep = labels[:, 1:] != IGNORE
    return F.cross_entropy(logits[:, :-1][keep], labels[:, 1:][keep])


def test_a_micro_batch_without_targets_adds_nothing_and_the_step_mean_is_per_token():
    """8 texts, 2 replicas × 2 micro-batches of 2: micro-batch 1 holds only one-token texts
    (no target), the others are padded to different lengths. The step's loss and gradient are
    the per-token mean over all 8 texts, as plain torch computes it, not a mean of means and
    not NaN; the empty micro-batch's loss is 0 and gives no gradient."""
    gen = torch.Generator().manual_seed(3)
    logits = torch.randn(8, 6, 11, generator=gen)
    labels = torch.randint(0, 11, (8, 6), generator=gen)
    lengths = torch.tensor([6, 2, 1, 1, 5, 3, 4, 6])  # texts 2 and 3: micro-batch 1
    labels[torch.arange(6) >= lengths[:, None]] = IGNORE
    ours = logits.clone().requires_grad_()
    loss, each = _step(ours, labels, replicas=2, micro_batches=2)
    ref = logits.clone().requires_grad_()
    expected = _reference(ref, labels)
    expected.backward()
    # float32 (the loss upcasts to it): the sums differ only in rounding order; observed
    # equal to the last bit here; 1e-6 leaves room for another summation order.
    assert loss == pytest.approx(float(expected.detach()), rel=1e-6)
    torch.testing.assert_close(ours.grad, ref.grad, rtol=1e-5, atol=1e-8)
    assert each[1] == 0.0 and torch.all(ours.grad[2:4] == 0)
    # A mean of the micro-batch means (what the schedule gave before) is not the step mean.
    means = [float(_reference(logits[i : i + 2], labels[i : i + 2])) for i in (0, 4, 6)]
    assert abs(sum(means) / 3 - float(expected.detach())) > 1e-3


LM_BATCH = 8


def _lm_batch(seq) -> tuple[torch.Tensor, torch.Tensor]:
    """8 padded texts of 1..8 tokens; texts 2 and 3 (replica 0's second micro-batch of 2)
    have one token each: nothing to predict."""
    gen = torch.Generator().manual_seed(4)
    x, _ = seq.example_batch(LM_BATCH, gen)
    lengths = torch.tensor([8, 3, 1, 1, 6, 2, 8, 5])
    x[torch.arange(x.shape[1]) >= lengths[:, None]] = models.PADDING
    return x, torch.where(x == models.PADDING, IGNORE, x)


def _lm_rank(rank, port, out):
    import datetime

    import torch.distributed as dist
    from conftest import make_layout

    from executor.parallel import PhaseRuntime

    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2,
        timeout=datetime.timedelta(seconds=60),
    )  # fmt: skip
    seq = models.build("gpt2-tiny", padding_mask=True, seq_len=8, dropout=0.0)
    x, y = _lm_batch(seq)
    layout = make_layout(LM_BATCH, 0, False, (0, len(seq.layers)), ((0,), (1,)), 2, "gpipe")
    runtime = PhaseRuntime(
        seq.layers,
        StepMean(seq.loss_sum, seq.targets),
        layout,
        rank,
        example_input=lambda n: x[:n],
        device=torch.device("cpu"),
        make_optimizer=lambda params: torch.optim.SGD(params, lr=1.0),
    )
    share = slice(rank * LM_BATCH // 2, (rank + 1) * LM_BATCH // 2)
    times = runtime.step(x[share], y[share])
    params = torch.cat([p.detach().flatten() for p in seq.layers.parameters()])
    torch.save({"loss": times.loss, "params": params}, f"{out}-rank{rank}.pt")
    runtime.destroy()
    dist.destroy_process_group()


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_the_pipeline_step_is_the_per_token_mean_over_micro_batches_and_replicas(tmp_path):
    """The real schedule (GPipe, M = 2, its scale_grads) and all-reduce (R = 2) with
    StepMean: one SGD step from a batch whose micro-batches hold 0 to 6 targets equals one
    process's step on the whole batch's per-token mean; the step record's loss (the mean of
    the replicas' losses) is that mean."""
    from executor.records import step_loss, step_row
    from pipeplan.spawn import free_port, run_ranks

    run_ranks(_lm_rank, 2, (free_port(), str(tmp_path / "r")), 110, "the 2-rank step")
    ranks = [torch.load(tmp_path / f"r-rank{r}.pt") for r in range(2)]
    seq = models.build("gpt2-tiny", padding_mask=True, seq_len=8, dropout=0.0)
    x, y = _lm_batch(seq)
    loss = seq.loss(seq.forward(x), y)
    loss.backward()
    with torch.no_grad():
        for p in seq.layers.parameters():
            p -= p.grad
    expected = torch.cat([p.detach().flatten() for p in seq.layers.parameters()])
    for r in ranks:  # observed 1.5e-8 (summation order); test_parallel's bound, 1e-5
        assert float((r["params"] - expected).norm() / expected.norm()) <= 1e-5
    from executor.parallel import StepTimes

    rows = [step_row(StepTimes(loss=r["loss"]), 0, 0, i) for i, r in enumerate(ranks)]
    assert step_loss(rows) == pytest.approx(float(loss.detach()), rel=1e-5)


def test_a_step_without_any_target_has_loss_zero_and_no_gradient():
    logits = torch.randn(4, 5, 7, requires_grad=True)
    labels = torch.full((4, 5), IGNORE)
    labels[:, 0] = 3  # one token each: nothing to predict
    loss, each = _step(logits, labels, replicas=2, micro_batches=2)
    assert loss == 0.0 and each == [0.0] * 4
    assert torch.all(logits.grad == 0)
    single = models.causal_lm_loss(logits, labels)  # the profiler's and a 1-micro-batch loss
    assert float(single.detach()) == 0.0 and torch.isfinite(single)


def test_a_nan_loss_on_one_replica_is_the_steps_loss_not_a_missing_one():
    """A missing loss and a NaN loss travelled alike (as NaN) in the step's all-gather, so one
    replica's NaN was dropped and the run trained on. Now only a rank without a loss (or a
    step without targets) is missing; a NaN anywhere makes the step's loss NaN, which stops
    the run (`Trainer.gather_step`)."""
    from executor.parallel import StepTimes
    from executor.records import step_loss, step_record, step_row

    last = [step_row(StepTimes(step_s=1.0, loss=x), 0, 1, r) for r, x in ((0, 2.0), (1, 4.0))]
    first = [step_row(StepTimes(step_s=1.0), 0, 0, r) for r in (0, 1)]  # no loss on stage 0
    assert step_loss(first + last) == 3.0
    assert step_record(first + last, step=0, epoch=0, phase=0, global_batch=4).loss == 3.0
    assert step_loss(first) is None
    nan = step_row(StepTimes(step_s=1.0, loss=float("nan")), 0, 1, 1)
    assert math.isnan(step_loss([*first, last[0], nan]))


# --------------------------------------------------------------------------- profiles


def _sizes(profile: dict) -> list[int]:
    return [t["micro_batch"] for t in profile["layers"][0]["timings"]]


def _zero_times(profile: dict) -> dict:
    doc = json.loads(json.dumps(profile))
    for layer in doc["layers"]:
        for timing in layer["timings"]:
            for name in ("fwd_s", "bwd_s", "fwd_nograd_s"):
                timing[name] = 0.0 if timing["feasible"] else None
    return doc


# (what, document, what the message must name); each is the shipped bert-tiny profile with
# one contradiction.
PROFILE_CASES = {
    "settings list fewer sizes than timed": (
        with_path(PROFILE, ("settings", "micro_batches"), _sizes(PROFILE)[:2]),
        "settings.micro_batches",
    ),
    "settings list a size never timed": (
        with_path(PROFILE, ("settings", "micro_batches"), [*_sizes(PROFILE), 4096]),
        "settings.micro_batches",
    ),
    "one layer timed at fewer sizes": (
        with_path(PROFILE, ("layers", 2, "timings"), PROFILE["layers"][2]["timings"][:-1]),
        "layers.2.timings",
    ),
    "every time zero": (_zero_times(PROFILE), "fwd_s"),
    "an embeddings layer in the middle": (
        with_path(PROFILE, ("layers", 1, "kind"), "embeddings"),
        "layers.1.kind",
    ),
    # A block without weights is refused before the model as a whole is (a profile has one).
    "no parameters anywhere": (
        {
            **PROFILE,
            "layers": [{**layer, "params": 0, "param_bytes": 0} for layer in PROFILE["layers"]],
        },
        "layers.1': params",
    ),
}


@pytest.mark.parametrize("case", PROFILE_CASES)
def test_a_profile_whose_fields_contradict_each_other_is_refused(tmp_path, capsys, case):
    doc, field = PROFILE_CASES[case]
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(doc))
    refused(
        ["preview", "--profile", str(path), *PREVIEW], tmp_path, capsys, ("profile.json", field)
    )


def _infeasible(profile: dict, **fields) -> dict:
    """bert-tiny's profile with block 1 at the first size marked infeasible, and `fields`."""
    timing = {**profile["layers"][1]["timings"][0], "feasible": False, **fields}
    return with_path(profile, ("layers", 1, "timings", 0), timing)


def _bare_infeasible(profile: dict, **fields) -> dict:
    """As the profiler writes a size that ran out of memory: the error and nothing measured."""
    timing = {"micro_batch": profile["layers"][1]["timings"][0]["micro_batch"], "feasible": False}
    return with_path(profile, ("layers", 1, "timings", 0), {**timing, **fields})


# (document, what the message must name): the shipped bert-tiny profile with one edit the
# fifteenth round made, each of which `preview` took (exit 0).
CONTRADICTIONS = {
    "a preset's name on another preset's shape": (
        with_path(PROFILE, ("model", "name"), "bert-large"),
        ("'model'", "bert-large", "hidden_size"),
    ),
    "a family that is not the config's model_type": (
        with_path(PROFILE, ("model", "family"), "gpt2"),
        ("'model'", "family is 'gpt2'", "model_type is 'bert'"),
    ),
    "a preset's config of more blocks than layers has": (
        with_path(PROFILE, ("model", "config", "num_hidden_layers"), 5),
        ("'model'", "num_hidden_layers 4", "has 5"),
    ),
    "a folder's config of more blocks than layers has": (
        with_path(
            with_path(PROFILE, ("model", "name"), "/models/bert"),
            ("model", "config", "num_hidden_layers"),
            5,
        ),
        ("model.config.num_hidden_layers is 5", "4 blocks"),
    ),
    "1 param byte for 198,272 float32 params": (
        with_path(PROFILE, ("layers", 1, "param_bytes"), 1),
        ("'layers.1'", "param_bytes 1", "params 198272"),
    ),
    "a block of 0 params and its bytes": (
        with_path(PROFILE, ("layers", 1, "params"), 0),
        ("'layers.1'", "params 0"),
    ),
    "a block of 0 params and 0 bytes": (
        with_path(with_path(PROFILE, ("layers", 1, "params"), 0), ("layers", 1, "param_bytes"), 0),
        ("'layers.1'", "a transformer block has weights"),
    ),
    "infeasible, error null, timings kept": (
        _infeasible(PROFILE, error=None),
        ("'layers.1.timings.0'", "needs its error"),
    ),
    "infeasible with its error, timings kept": (
        _infeasible(PROFILE, error="out of memory"),
        ("'layers.1.timings.0'", "fwd_s is given"),
    ),
    "infeasible with an empty error": (
        _bare_infeasible(PROFILE, error=""),
        ("'layers.1.timings.0'", "needs its error"),
    ),
    "feasible with an error": (
        with_path(PROFILE, ("layers", 1, "timings", 0, "error"), "out of memory"),
        ("'layers.1.timings.0'", "has no error"),
    ),
    "created_at 'yesterday'": (
        with_path(PROFILE, ("created_at",), "yesterday"),
        ("'created_at'", "ISO 8601"),
    ),
    "created_at a date without a time": (
        with_path(PROFILE, ("created_at",), "2026-11-29"),
        ("'created_at'", "ISO 8601"),
    ),
    "a name that forges an error line": (
        with_path(PROFILE, ("model", "name"), "bert-tiny\npipeplan: error: fake"),
        ("'model.name'", "control character U+000A"),
    ),
    "device memory 0 bytes": (
        with_path(PROFILE, ("device", "memory_bytes"), 0),
        ("'device.memory_bytes'", "greater than or equal to 1"),
    ),
}


@pytest.mark.parametrize("case", CONTRADICTIONS)
def test_a_profile_whose_fields_contradict_its_config_or_each_other(tmp_path, capsys, case):
    """Found by the fifteenth round: `preview --profile X.json` took each of these edits with
    exit 0 (a title of "bert-large" over bert-tiny's layers, weights of 1 byte, a size both
    infeasible and timed, "yesterday" as a time, and for memory 0 a message about
    --device-memory, a flag never given)."""
    doc, fragments = CONTRADICTIONS[case]
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(doc))
    argv = ["preview", "--profile", str(path), *PREVIEW]
    refused(argv, tmp_path, capsys, ("profile.json", *fragments))


# (document, what the message must name): the shipped bert-tiny profile with one hand edit the
# sixteenth round made, each of which `plan` took (exit 0).
SIXTEENTH = {
    "settings.seed -5, which --seed refuses": (
        with_path(PROFILE, ("settings", "seed"), -5),
        ("'settings.seed'", "greater than or equal to 0"),
    ),
    "a BERT profile's input shape []": (
        with_path(PROFILE, ("model", "input_shape"), []),
        ("'model'", "input_shape is []", "[seq_len]"),
    ),
    "a BERT profile's input shape of an image": (
        with_path(PROFILE, ("model", "input_shape"), [3, 32, 32]),
        ("'model'", "input_shape is [3, 32, 32]", "[seq_len]"),
    ),
    "a sequence longer than the model's positions": (
        with_path(PROFILE, ("model", "input_shape"), [100_000]),
        ("'model'", "input_shape is [100000]", "positions"),
    ),
    "config.vocab_size a string": (
        with_path(PROFILE, ("model", "config", "vocab_size"), "30522"),
        ("'model'", "config.vocab_size is '30522'", "integer"),
    ),
    "config.vocab_size a float": (
        with_path(PROFILE, ("model", "config", "vocab_size"), 30522.0),
        ("'model'", "config.vocab_size is 30522.0", "integer"),
    ),
    "config.hidden_size true": (
        with_path(PROFILE, ("model", "config", "hidden_size"), True),
        ("'model'", "config.hidden_size is True", "integer"),
    ),
    "config.num_labels 0": (
        with_path(PROFILE, ("model", "config", "num_labels"), 0),
        ("'model'", "config.num_labels is 0"),
    ),
    "a bidi override in model.name": (
        with_path(PROFILE, ("model", "name"), "bert-tiny\u202e"),
        ("'model.name'", "U+202E"),
    ),
    "a zero-width space in a layer name": (
        with_path(PROFILE, ("layers", 1, "name"), "block\u200b0"),
        ("'layers.1.name'", "U+200B"),
    ),
    "an empty layer name": (
        with_path(PROFILE, ("layers", 1, "name"), ""),
        ("layers.1.name '' is not 'block1'",),
    ),
    "two layers of one name": (
        with_path(PROFILE, ("layers", 2, "name"), PROFILE["layers"][1]["name"]),
        ("layers.2.name 'block1' is not 'block2'",),
    ),
    # Twenty-sixth round: a block named as the head (and the head as a block) was taken.
    "a block named head": (
        with_path(PROFILE, ("layers", 1, "name"), "head"),
        ("layers.1.name 'head' is not 'block1': a layer is named by its kind",),
    ),
    "a subnormal forward time": (
        with_path(PROFILE, ("layers", 1, "timings", 0, "fwd_s"), 5e-324),
        ("'layers.1.timings.0.fwd_s'", "subnormal"),
    ),
    "a subnormal link latency": (
        with_path(PROFILE, ("comm", "p2p", "latency_s"), 5e-324),
        ("'comm.p2p.latency_s'", "subnormal"),
    ),
    "a fitted link without its samples": (
        with_path(PROFILE, ("comm", "p2p", "samples"), []),
        ("'comm.p2p.samples'", "at least 2"),
    ),
}


def plan_refuses_profile(doc, fragments, tmp_path, capsys) -> None:
    """`plan --profile` of `doc` is one line holding `fragments`, and writes no plan."""
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(doc))
    argv = ["plan", "--profile", str(path), "--out", str(tmp_path / "o.json")]
    refused(argv, tmp_path, capsys, fragments)
    assert not (tmp_path / "o.json").exists()


@pytest.mark.parametrize("case", SIXTEENTH)
def test_a_hand_edited_profile_is_held_to_what_the_profiler_writes(tmp_path, capsys, case):
    """Found by the sixteenth round: `plan --profile X.json` took each of these edits with exit
    0 (a seed --seed refuses, a text model without a sequence length, a vocabulary of
    "30522", a bidi override kept in the plan, layers named "" or twice, a fwd_s of 5e-324,
    a fitted bandwidth with no samples behind it)."""
    doc, fragments = SIXTEENTH[case]
    plan_refuses_profile(doc, ("profile.json", *fragments), tmp_path, capsys)


# A calibration as `pipeplan calibrate` writes one: nograd_scale, the links and the group
# rebuild not fitted (at fwd_scale and null, each with why), a step overhead below 0 (the
# smallest batch's input time off).
CALIBRATED = {
    **PROFILE,
    "calibration": {
        "fwd_scale": 1.25,
        "bwd_scale": 1.5,
        "nograd_scale": 1.25,
        "fwd_call_scale": 2.0,
        "bwd_call_scale": 1.5,
        "nograd_call_scale": 1.25,
        "allreduce": None,
        "p2p": None,
        "optimizer_s_per_byte": 2e-9,
        "micro_batch_overhead_s": 0.0,
        "step_overhead_s": -0.001,
        "input_s_per_sample": 3e-5,
        "group_rebuild_s": None,
        "runs": ["runs/a"],
        "phases_used": 2,
        "steps_used": 12,
        "residual_median": 0.01,
        "residual_max": 0.04,
        "not_fitted": {
            "nograd_scale": "no frozen layer ran",
            "allreduce": "no data-parallel stage with gradients inside one node",
            "p2p": "no pipelined phase",
            "group_rebuild_s": "no transition changed placement",
        },
    },
}

# (document, what the message must name): CALIBRATED with one hand edit of the seventeenth
# round, each of which `plan` took (exit 0).
CALIBRATION17 = {
    "a subnormal step overhead": (
        with_path(CALIBRATED, ("calibration", "step_overhead_s"), 5e-324),
        ("'calibration.step_overhead_s'", "5e-324 s is a subnormal number"),
    ),
    "a negative subnormal step overhead": (
        with_path(CALIBRATED, ("calibration", "step_overhead_s"), -5e-324),
        ("'calibration.step_overhead_s'", "subnormal"),
    ),
    "a step overhead of -100 s": (
        with_path(CALIBRATED, ("calibration", "step_overhead_s"), -100.0),
        ("'calibration'", "step_overhead_s -100.0 s is below -31.4573 s"),
    ),
    "a negative step overhead without input time": (
        with_path(
            with_path(CALIBRATED, ("calibration", "input_s_per_sample"), 0.0),
            ("calibration", "not_fitted"),
            {},
        ),
        ("'calibration'", "step_overhead_s -0.001 s is below 0 s"),
    ),
    "0 phases used": (
        with_path(CALIBRATED, ("calibration", "phases_used"), 0),
        ("'calibration'", "phases_used 0: a calibration is fitted from at least one phase"),
    ),
    "no run": (
        with_path(CALIBRATED, ("calibration", "runs"), []),
        ("'calibration'", "runs [] and phases_used 2"),
    ),
    # Twenty-sixth round: calibrate refuses a run given twice; written twice it was taken.
    "a run named twice": (
        with_path(CALIBRATED, ("calibration", "runs"), ["runs/a", "./runs/a/"]),
        ("'calibration'", "runs names 'runs/a' twice: a calibration is fitted from distinct"),
    ),
    # Sixty-fourth round: normpath kept POSIX's leading //, which calibrate reads as one run.
    "a run named twice by //": (
        with_path(CALIBRATED, ("calibration", "runs"), ["/nowhere/a", "//nowhere/a"]),
        ("'calibration'", "runs names '/nowhere/a' twice: a calibration is fitted from distinct"),
    ),
    "a median residual above the worst": (
        with_path(CALIBRATED, ("calibration", "residual_median"), 0.5),
        ("'calibration'", "residual_median 0.5 is above residual_max 0.04"),
    ),
    "an unknown parameter not fitted": (
        with_path(CALIBRATED, ("calibration", "not_fitted"), {"zorp": "x"}),
        ("'calibration'", "not_fitted names 'zorp', which is not a calibration parameter"),
    ),
    "a fitted scale said not fitted": (
        with_path(CALIBRATED, ("calibration", "not_fitted"), {"fwd_scale": "x"}),
        ("'calibration'", "not_fitted names fwd_scale, but it holds 1.25, a fitted value"),
    ),
    # The fifty-third round: fwd_scale edited, which an unfitted nograd_scale copies, was
    # named as nograd_scale alone (and the advice would have made the edit pass).
    "a scale edited that an unfitted one copies": (
        with_path(
            with_path(
                with_path(CALIBRATED, ("calibration", "not_fitted"), {"nograd_scale": "x"}),
                ("calibration", "nograd_scale"),
                1.25,
            ),
            ("calibration", "fwd_scale"),
            1.5,
        ),
        ("'calibration'", "unfitted, it is 1.5 (nograd_scale or fwd_scale was edited)"),
    ),
    "a fitted term said not fitted": (
        with_path(CALIBRATED, ("calibration", "not_fitted"), {"optimizer_s_per_byte": "x"}),
        ("'calibration'", "not_fitted names optimizer_s_per_byte, but it holds 2e-09"),
    ),
}


@pytest.mark.parametrize("case", CALIBRATION17)
def test_a_hand_edited_calibration_is_held_to_what_calibrate_writes(tmp_path, capsys, case):
    """Found by the seventeenth round: `plan --profile X.json` took a step_overhead_s of
    5e-324 (its sibling times were refused) or of -100 s (silently clamped to 0 per step),
    scales fitted from 0 phases or no run, a median residual above the worst, and not_fitted
    naming an unknown parameter or one that holds a fitted value."""
    doc, fragments = CALIBRATION17[case]
    plan_refuses_profile(doc, ("profile.json: invalid profile", *fragments), tmp_path, capsys)


# (document, what the message must name): CALIBRATED with one hand edit of the sixty-first
# round, each of which preview, plan and run --profile took (exit 0).
CALIBRATION61 = {
    "a fit 146 % off": (
        with_path(
            with_path(CALIBRATED, ("calibration", "residual_median"), 1.46),
            ("calibration", "residual_max"),
            1.46,
        ),
        (
            "invalid profile",
            "'calibration'",
            "residual_median 1.46 is past 50%, the most median step-time error",
        ),
    ),
    "10^300 steps fitted": (
        with_path(CALIBRATED, ("calibration", "steps_used"), 10**300),
        (
            "invalid profile",
            "'calibration'",
            "steps_used 1000",
            "is above 16777216, the most steps the run.jsonl",
        ),
    ),
    "10^20 phases fitted": (
        with_path(CALIBRATED, ("calibration", "phases_used"), 10**20),
        (
            "invalid profile",
            "'calibration'",
            "phases_used 100000000000000000000 is above 8388608, the most phases",
        ),
    ),
    "a run named by nothing": (
        with_path(CALIBRATED, ("calibration", "runs"), ["runs/a", ""]),
        (
            "invalid profile",
            "'calibration'",
            "runs[1] is empty: calibrate names each run directory it read",
        ),
    ),
    # Sixty-fourth round: a 2-device step priced at 3.2e6 s, and plan wrote it.
    "1 s per byte of optimizer": (
        with_path(CALIBRATED, ("calibration", "optimizer_s_per_byte"), 1.0),
        (
            "profile: calibration.optimizer_s_per_byte 1.0 prices the optimizer step of the",
            "s, more than the 1e+06 s any timed operation takes",
        ),
    ),
    # Sixty-fifth round: 1e300 B/s, and -0.0, planned with.
    "an optimizer of 1e300 bytes a second": (
        with_path(CALIBRATED, ("calibration", "optimizer_s_per_byte"), 1e-300),
        ("field 'calibration.optimizer_s_per_byte': 1e-300 s per byte is below 1e-15 s",),
    ),
    "an optimizer of -0.0 s per byte": (
        with_path(CALIBRATED, ("calibration", "optimizer_s_per_byte"), -0.0),
        ("field 'calibration.optimizer_s_per_byte': -0.0 s per byte is below 1e-15 s",),
    ),
}


@pytest.mark.parametrize("case", CALIBRATION61)
def test_a_calibration_calibrate_would_not_write_is_refused(tmp_path, capsys, case):
    """Found by the sixty-first round: a calibration with a median error of 146 % (which
    calibrate refuses to write, past MAX_FIT_ERROR), 10^300 steps or 10^20 phases fitted
    (more than the runs' run.jsonl, at most 1 GiB each, can hold), or a run named by an empty
    path was planned with, exit 0. Found by the sixty-fourth round: an optimizer_s_per_byte of
    1 s (bounded by 1 s alone) priced a step at 3.2e6 s, above MAX_SECONDS; the optimizer
    step of a stage holding every layer is held to it. Found by the sixty-fifth round: one of
    1e-300 s (1e300 B/s) or -0.0 was planned with: it has a physical floor, 1 PB/s. Each is
    refused, naming the field."""
    doc, fragments = CALIBRATION61[case]
    plan_refuses_profile(doc, ("profile.json: ", *fragments), tmp_path, capsys)


def _without(doc: dict, path: tuple) -> dict:
    """`doc` with the key at `path` deleted."""
    doc = json.loads(json.dumps(doc))
    target = doc
    for key in path[:-1]:
        target = target[key]
    del target[path[-1]]
    return doc


# (document, what the message must name): a parameter at its unfitted null that not_fitted
# does not name, each of which `plan` took (exit 0) and priced as unfitted.
FITTED = with_path(CALIBRATED, ("calibration", "allreduce"), {"latency_s": 1e-3})
FITTED["calibration"]["allreduce"]["bandwidth_bytes_per_s"] = 1e8
del FITTED["calibration"]["not_fitted"]["allreduce"]
CALIBRATION36 = {
    "a fitted all-reduce set to null": (
        with_path(FITTED, ("calibration", "allreduce"), None),
        ("'calibration'", "allreduce is null", "not_fitted does not name it"),
    ),
    "a fitted all-reduce deleted": (
        _without(FITTED, ("calibration", "allreduce")),
        ("'calibration'", "calibration.allreduce is missing", "calibrate writes every field"),
    ),
    "a fitted optimizer term set to null": (
        with_path(CALIBRATED, ("calibration", "optimizer_s_per_byte"), None),
        ("'calibration'", "optimizer_s_per_byte is null", "not_fitted does not name it"),
    ),
    "a fitted call scale deleted": (
        _without(CALIBRATED, ("calibration", "bwd_call_scale")),
        ("'calibration'", "calibration.bwd_call_scale is missing", "calibrate writes every"),
    ),
    # The fiftieth round's b R4: its default (1.0) was refused under nograd_scale's name.
    "the forward scale deleted": (
        _without(CALIBRATED, ("calibration", "fwd_scale")),
        ("'calibration'", "calibration.fwd_scale is missing", "calibrate writes every field"),
    ),
    "the reasons deleted": (
        _without(CALIBRATED, ("calibration", "not_fitted")),
        ("'calibration'", "calibration.not_fitted is missing", "calibrate writes every field"),
    ),
    "the reasons of the unfitted links dropped": (
        with_path(CALIBRATED, ("calibration", "not_fitted"), {"nograd_scale": "x"}),
        ("'calibration'", "allreduce is null", "not_fitted does not name it"),
    ),
    "no reasons at all": (
        with_path(CALIBRATED, ("calibration", "not_fitted"), {}),
        ("'calibration'", "allreduce is null", "not_fitted does not name it"),
    ),
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("case", CALIBRATION36)
def test_a_calibration_parameter_null_without_a_reason_is_refused(tmp_path, capsys, case):
    """Found by the thirty-sixth round: a calibration whose fitted `allreduce` was set to null
    (or deleted, or every reason in not_fitted dropped) was planned with, exit 0, its
    all-reduce priced as unfitted on the cluster's link (preview 112 s became 90 s): the
    seventeenth round's rule held each not_fitted entry at its unfitted value, not the
    converse. Now a parameter at its unfitted null (the links, the optimizer term, the group
    rebuild, a call scale) that not_fitted does not name is one line naming the file and the
    field, exit 2, and no plan is written."""
    doc, fragments = CALIBRATION36[case]
    plan_refuses_profile(doc, ("profile.json: invalid profile", *fragments), tmp_path, capsys)


@pytest.mark.timeout(60)
def test_a_fitted_all_reduce_with_its_value_loads():
    """The other side of the thirty-sixth round's rule: the fitted all-reduce is taken."""
    from pipeplan.formats.base import parse
    from pipeplan.formats.profile import Profile

    assert parse(Profile, json.dumps(FITTED)).calibration.allreduce.latency_s == 1e-3


# (steps_used, phases_used): fewer steps than the phases could be fitted from.
TOO_FEW_STEPS = {"5 phases from 1 step": (1, 5), "1 phase from 0 steps": (0, 1)}


@pytest.mark.parametrize("case", TOO_FEW_STEPS)
def test_a_calibration_fitted_from_fewer_steps_than_its_phases_is_refused(tmp_path, capsys, case):
    """Found by the twentieth round: a calibration of steps_used 1 with phases_used 5 (or 0
    steps with 1 phase) was planned with, though calibrate keeps at least 2 steady steps of
    each phase it fits (3 measured after 2 warm-up, one of them maybe a straggler)."""
    steps, phases = TOO_FEW_STEPS[case]
    doc = with_path(CALIBRATED, ("calibration", "steps_used"), steps)
    doc = with_path(doc, ("calibration", "phases_used"), phases)
    fragments = (f"steps_used {steps} is below {2 * phases}", f"phases_used {phases}")
    plan_refuses_profile(
        doc, ("profile.json: invalid profile", "'calibration'", *fragments), tmp_path, capsys
    )


def test_a_calibration_from_the_fewest_steps_calibrate_keeps_loads():
    """The bound of the twentieth round's check is what calibrate can write: a phase of 3
    measured steps, one of them a straggler, adds 2 to steps_used."""
    from pipeplan.formats.base import parse
    from pipeplan.formats.profile import STRAGGLER_FACTOR, Profile, fewest_steps_kept

    times = [1.0, 1.0, 10.0]  # 10 s is over 3 × the median (1 s): dropped
    kept = [t for t in times if t <= STRAGGLER_FACTOR * statistics.median(times)]
    assert len(kept) == fewest_steps_kept() == 2
    doc = with_path(CALIBRATED, ("calibration", "steps_used"), 2 * 2)
    assert parse(Profile, json.dumps(doc)).calibration.steps_used == 4


def test_a_calibration_as_calibrate_writes_it_loads():
    """What the seventeenth round's rules leave alone: a negative step overhead beside an
    input time, a tied scale and a pinned link named in not_fitted."""
    from pipeplan.formats.base import parse
    from pipeplan.formats.profile import Profile

    assert parse(Profile, json.dumps(CALIBRATED)).calibration.step_overhead_s == -0.001


def _edit(*steps):
    """The shipped bert-tiny profile with `steps` applied: (path, value) pairs, or callables
    that change the document in place."""
    doc = json.loads(json.dumps(PROFILE))
    for step in steps:
        if callable(step):
            step(doc)
        else:
            doc = with_path(doc, *step)
    return doc


P2P = ("comm", "p2p")
# (document, what the message must name): the shipped bert-tiny profile with one hand edit the
# seventeenth round made, each of which `plan` took (exit 0).
SEVENTEENTH = {
    "config.layer_norm_eps 0, refused in a model folder": (
        _edit((("model", "config", "layer_norm_eps"), 0.0)),
        ("'model'", "config: layer_norm_eps is 0.0"),
    ),
    "config.hidden_dropout_prob -0.1": (
        _edit((("model", "config", "hidden_dropout_prob"), -0.1)),
        ("'model'", "config: hidden_dropout_prob is -0.1"),
    ),
    "config.pad_token_id beyond the vocabulary": (
        _edit((("model", "config", "pad_token_id"), 10**6)),
        ("'model'", "config: pad_token_id 1000000 is not a token id"),
    ),
    "task causal-lm on a BERT": (
        _edit((("model", "task"), "causal-lm")),
        ("'model'", "task is 'causal-lm' but a bert model is not a decoder"),
    ),
    "input_dtype float32 on a BERT": (
        _edit((("model", "input_dtype"), "float32")),
        ("'model'", "input_dtype is 'float32'", "int64"),
    ),
    "num_labels 7 beside 2 labels": (
        _edit((("model", "num_labels"), 7)),
        ("'model'", "num_labels is 7 but its config has 2"),
    ),
    "a no-grad forward 400x the forward": (
        _edit((("layers", 1, "timings", 0, "fwd_nograd_s"), 1.0)),
        ("layers.1.timings.0.fwd_nograd_s is 1 s", "slower without autograd"),
    ),
    "a zero backward in a block with weights": (
        _edit((("layers", 1, "timings", 0, "bwd_s"), 0.0)),
        ("layers.1.timings.0.bwd_s is 0", "parameters"),
    ),
    "micro-batch 8 2000x faster than 4": (
        _edit((("layers", 1, "timings", 3, "fwd_s"), 1e-6)),
        ("layers.1.timings.3.fwd_s is 1e-06 s at micro-batch 8",),
    ),
    "a fit contradicting its samples": (
        _edit(((*P2P, "bandwidth_bytes_per_s"), 1e15)),
        ("'comm'", "p2p: latency_s and bandwidth_bytes_per_s predict", "33554432 bytes"),
    ),
    "a 0 s transfer": (
        _edit(((*P2P, "samples", 0, "time_s"), 0.0)),
        ("'comm.p2p'", "samples.0.time_s is 0.0"),
    ),
    "a duplicated sample": (
        _edit(lambda d: d["comm"]["p2p"]["samples"].insert(0, d["comm"]["p2p"]["samples"][0])),
        ("'comm.p2p'", "one sample per message size"),
    ),
    "samples in decreasing byte order": (
        _edit(lambda d: d["comm"]["p2p"]["samples"].reverse()),
        ("'comm.p2p'", "in increasing order"),
    ),
    "nccl links on a cpu profile": (
        _edit((("comm", "backend"), "nccl")),
        ("comm.backend is 'nccl' but device.kind is 'cpu'",),
    ),
    "a peak above the device's memory": (  # on CUDA: a CPU has no peak (the nineteenth round)
        _edit(
            (("device", "kind"), "cuda"), (("layers", 1, "timings", 0, "peak_mem_bytes"), 10**18)
        ),
        ("layers.1.timings.0.peak_mem_bytes", "device.memory_bytes"),
    ),
    "a block's output of 10^18 bytes": (
        _edit((("layers", 1, "out_bytes_per_sample"), 10**18)),
        ("layers.1.out_bytes_per_sample is 1000000000000000000", "outputs 65536 bytes"),
    ),
    "settings.warmup 10^18": (
        _edit((("settings", "warmup"), 10**18)),
        ("'settings.warmup'", "1000"),
    ),
    "settings.repeats 10^6": (
        _edit((("settings", "repeats"), 10**6)),
        ("'settings.repeats'", "1000"),
    ),
    "created_at in the year 9999": (
        _edit((("created_at",), "9999-12-31T23:59:59+00:00")),
        ("created_at is 9999-12-31", "days from now"),
    ),
    "a layer name of a million characters": (
        _edit((("layers", 1, "name"), "b" * 10**6)),
        ("'layers.1.name'", "1000000 characters", "4096"),
    ),
    "a torch_version of 100 kB": (
        _edit((("device", "torch_version"), "2" * 10**5)),
        ("'device.torch_version'", "100000 characters"),
    ),
}


@pytest.mark.parametrize("case", SEVENTEENTH)
def test_a_profile_held_to_its_config_checks_and_its_own_measurements(tmp_path, capsys, case):
    """Found by the seventeenth round: `plan --profile X.json` took each of these edits with
    exit 0 (config values a model folder's config.json is refused for, a task, dtype or
    label count its config contradicts, times no profiler measures, a link fit of other
    samples, NCCL on a CPU, a peak beyond the device, settings beyond --warmup/--repeats, a
    date in the future, a 10 MB layer name)."""
    doc, fragments = SEVENTEENTH[case]
    plan_refuses_profile(doc, ("profile.json", *fragments), tmp_path, capsys)


# The shipped bert-tiny profile with a config.json edit a model folder is refused for.
EIGHTEENTH = {
    "config.vocab_size 10^15": (
        _edit((("model", "config", "vocab_size"), 10**15)),
        ("'model'", "config: vocab_size 1000000000000000 makes a model of 128,000,000,00"),
    ),
    "config.label2id naming other labels than id2label": (
        _edit((("model", "config", "label2id"), {"X": 0, "Y": 5})),
        ("'model'", "config: label2id is not the inverse of id2label: it gives 'X' id 0"),
    ),
    "config.label2id with an id beyond the labels": (
        _edit((("model", "config", "label2id"), {"LABEL_0": 0, "LABEL_1": 5})),
        ("'model'", "config: label2id is not the inverse of id2label: it gives 'LABEL_1' id 5"),
    ),
}


@pytest.mark.parametrize("case", EIGHTEENTH)
def test_a_profiles_config_is_held_to_the_size_bound_and_one_label_map(tmp_path, capsys, case):
    """Found by the eighteenth round: config sizes without a stated bound were built (vocab_size
    10^9: 128 GB) and label2id contradicting id2label was accepted, in a model folder; a
    profile's config passes the same dictionary checks (`modelconfig`), so `plan` took them."""
    doc, fragments = EIGHTEENTH[case]
    plan_refuses_profile(doc, ("profile.json", *fragments), tmp_path, capsys)


# The shipped bert-tiny profile (id2label LABEL_0, LABEL_1) with a config.json edit a model
# folder is refused for since the twentieth round.
LABEL_MAP_EDITS = {
    "config.num_labels beside an id2label of 2": (
        _edit((("model", "config", "num_labels"), 5)),
        ("'model'", "config: num_labels is 5 but id2label names 2 labels"),
    ),
    "config.id2label name holding a bidi override": (
        _edit(
            (("model", "config", "id2label"), {"0": "LABEL_0", "1": "x\u202e"}),
            (("model", "config", "label2id"), {"LABEL_0": 0, "x\u202e": 1}),
        ),
        ("'model'", "config: id2label names 'x\\u202e' for id 1: the label holds the bidi"),
    ),
    "config.id2label name blank": (
        _edit(
            (("model", "config", "id2label"), {"0": "LABEL_0", "1": " "}),
            (("model", "config", "label2id"), {"LABEL_0": 0, " ": 1}),
        ),
        ("'model'", "config: id2label names ' ' for id 1: the label names nothing"),
    ),
}


@pytest.mark.parametrize("case", LABEL_MAP_EDITS)
def test_a_profiles_config_is_held_to_one_label_map_of_data_label_names(tmp_path, capsys, case):
    """Found by the twentieth round: num_labels beside an id2label of another size, and label
    names a data label may not be, were accepted in a model folder's config.json; a profile's
    config passes the same dictionary checks (`modelconfig`), so `plan` refuses them too."""
    doc, fragments = LABEL_MAP_EDITS[case]
    plan_refuses_profile(doc, ("profile.json", *fragments), tmp_path, capsys)


def _peak_in_every_timing(doc: dict) -> None:
    """The round's edit: every timing of every layer given a peak of 900 MiB."""
    for layer in doc["layers"]:
        for timing in layer["timings"]:
            timing["peak_mem_bytes"] = 900 << 20


# The shipped bert-tiny profile (device.kind cpu) given a peak memory.
CPU_PEAKS = {
    "one timing": (
        _edit((("layers", 1, "timings", 0, "peak_mem_bytes"), 900 << 20)),
        "layers.1.timings.0.peak_mem_bytes is 943718400 but device.kind is 'cpu'",
    ),
    "every timing": (
        _edit(_peak_in_every_timing),
        "layers.0.timings.0.peak_mem_bytes is 943718400 but device.kind is 'cpu'",
    ),
}


# The shipped bert-tiny profile (a sequence of 128) with a config.json edit a model folder is
# refused for since the nineteenth round.
NINETEENTH = {
    "config.architectures 3": (
        _edit((("model", "config", "architectures"), 3)),
        ("'model'", "config: architectures is 3; a list of strings or null"),
    ),
    "config.chunk_size_feed_forward 3 beside a sequence of 128": (
        _edit((("model", "config", "chunk_size_feed_forward"), 3)),
        ("'model'", "config: chunk_size_feed_forward is 3 but the sequence length (input_shape)"),
    ),
    "config.rope_scaling factor 0": (
        _edit((("model", "config", "rope_scaling"), {"rope_type": "linear", "factor": 0.0})),
        # A BERT's RoPE key is refused as such since the twenty-second round.
        ("'model'", "config: rope_scaling is given but a bert model has no rotary position"),
    ),
}


@pytest.mark.parametrize("case", CPU_PEAKS)
def test_a_cpu_profiles_peak_memory_is_refused(tmp_path, capsys, case):
    """Found by the nineteenth round: a CPU profile whose timings held peak_mem_bytes of
    900 MiB planned with exit 0, byte for byte the plan of the unedited profile (the peak is
    CUDA's max_memory_allocated: the profiler records none on a CPU, as a CPU run's step
    records hold none since the seventeenth round)."""
    doc, fragment = CPU_PEAKS[case]
    plan_refuses_profile(doc, ("profile.json", fragment, "null on CPU"), tmp_path, capsys)


def test_a_cuda_profiles_peak_memory_loads():
    """What the rule above leaves alone: the peak a CUDA profile records, within its memory."""
    from pipeplan.formats.base import parse
    from pipeplan.formats.profile import Profile

    doc = _edit((("device", "kind"), "cuda"), (("layers", 1, "timings", 0, "peak_mem_bytes"), 900))
    assert parse(Profile, json.dumps(doc)).layers[1].timings[0].peak_mem_bytes == 900


def _spreads_as(spread):
    """An edit: every timing's three spreads set to `spread(median)` of their medians."""

    def edit(doc: dict) -> None:
        for layer in doc["layers"]:
            for timing in layer["timings"]:
                for k in ("fwd", "bwd", "fwd_nograd"):
                    timing[f"{k}_spread_s"] = spread(timing[f"{k}_s"])

    return edit


# The shipped bert-tiny profile (warm: 2 warm-up rounds, 7 repeats) with a spread no repeats
# of its medians give, or a thread count no host has.
SPREADS = {
    "a forward spread of 10^6 s beside a median of 0.0023 s": (
        _edit((("layers", 1, "timings", 0, "fwd_spread_s"), 1e6)),
        ("layers.1.timings.0.fwd_spread_s is 1e+06 s but its fwd_s", "7 repeats", "100×"),
    ),
    "a spread of one repeat": (
        _edit((("settings", "repeats"), 1)),
        ("layers.0.timings.0.fwd_spread_s is 3.91e-05 s", "the interquartile range of one"),
    ),
    "a no-grad spread above two repeats' median": (
        _edit(
            (("settings", "repeats"), 2),
            _spreads_as(lambda median: 0.0),
            (("layers", 2, "timings", 1, "fwd_nograd_spread_s"), 0.01),
        ),
        ("layers.2.timings.1.fwd_nograd_spread_s is 0.01 s", "at most their median"),
    ),
    "device.threads 100000": (
        _edit((("device", "threads"), 100000)),
        ("'device.threads'", "1024"),
    ),
}


@pytest.mark.parametrize("case", SPREADS)
def test_a_profiles_spreads_and_threads_are_ones_it_could_measure(tmp_path, capsys, case):
    """Found by the twenty-second round: `preview` took a fwd_spread_s of 10^6 s beside a
    median of 0.0023 s, and device.threads 100000 (beyond `profile --threads`), with exit 0.
    One or two repeats bound their interquartile range soundly (0; their median); from three
    on a warm profile's is held to 100× + 1 s of its median (`formats.profile.SPREAD_FACTOR`)."""
    doc, fragments = SPREADS[case]
    plan_refuses_profile(doc, ("profile.json", *fragments), tmp_path, capsys)


# The shipped bert-tiny profile (links measured between 2 ranks) with a comm edit the sixtieth
# round made, or one like it.
COMM_EDITS = {
    "nproc 4096, its all-reduce fitted over 2": (
        _edit((("comm", "nproc"), 4096)),
        ("'comm'", "nproc 4096: in ring terms over 4096 ranks the allreduce fit's latency_s"),
        ("(more than 10× apart); over 2 to 67 ranks they agree: nproc is not the ranks its",),
    ),
    "nproc beyond profile --nproc's bound": (
        _edit((("comm", "nproc"), 2**21)),
        ("'comm.nproc'", "1048576"),
    ),
    "a p2p sample's spread of 1000 s": (
        _edit(((*P2P, "samples", 0, "spread_s"), 1000.0)),
        ("'comm.p2p.samples.0'", "spread_s is 1e+03 s but its time_s", "more than 100× + 1 s"),
    ),
}


@pytest.mark.parametrize("case", COMM_EDITS)
def test_a_profiles_links_are_held_to_what_profile_nproc_measures(tmp_path, capsys, case):
    """Found by the sixtieth round: comm.nproc 4096 was refused as the all-reduce fit's fault
    ("the fit is not of its samples"), where the fit was the profiler's and nproc edited; a
    p2p sample's spread of 1000 s beside 5.6e-5 s was accepted. nproc is named where other
    ring sizes make the fit agree, bounded as `profile --nproc` is (a Count), and a link
    sample's spread is held as a layer timing's (100× + 1 s)."""
    doc, *fragments = COMM_EDITS[case]
    plan_refuses_profile(doc, ("profile.json", *sum(fragments, ())), tmp_path, capsys)


def test_spreads_the_profiler_measures_load():
    """What the spread rules leave alone: a cold profile's (--warmup 0: a first call's time in
    one repeat), two repeats' spread equal to their median, and the shipped profiles (the
    test above of the seventeenth round's tolerances loads each)."""
    from pipeplan.formats.base import parse
    from pipeplan.formats.profile import Profile

    cold = _edit((("settings", "warmup"), 0), (("layers", 1, "timings", 0, "fwd_spread_s"), 5.0))
    assert parse(Profile, json.dumps(cold)).layers[1].timings[0].fwd_spread_s == 5.0
    median = PROFILE["layers"][1]["timings"][0]["fwd_s"]
    two = _edit((("settings", "repeats"), 2), _spreads_as(lambda median: median))
    assert parse(Profile, json.dumps(two)).layers[1].timings[0].fwd_spread_s == median


@pytest.mark.parametrize("case", NINETEENTH)
def test_a_profiles_config_is_held_to_its_types_chunking_and_rope_parameters(
    tmp_path, capsys, case
):
    """Found by the nineteenth round: a model folder's config.json of a key of another type, a
    chunk size not dividing the sequence, or a RoPE factor of 0 failed in a traceback or was
    accepted; a profile's config passes the same dictionary checks, so `plan` refuses them."""
    doc, fragments = NINETEENTH[case]
    plan_refuses_profile(doc, ("profile.json", *fragments), tmp_path, capsys)


# The shipped bert-tiny profile with a config edit a model folder's config.json is refused for
# (the twenty-second round's keys, problem_type, generation settings, pruned_heads), each
# planned by the twenty-third round (exit 0).
TWENTY_THIRD = {
    "config.problem_type regression": (
        _edit((("model", "config", "problem_type"), "regression")),
        ("'model'", "config: problem_type is 'regression'; pipeplan trains single-label"),
    ),
    "config.use_return_dict false": (
        _edit((("model", "config", "use_return_dict"), False)),
        ("'model'", "config: use_return_dict is a read-only property of transformers' BertConfig"),
    ),
    "config.to_dict 1": (
        _edit((("model", "config", "to_dict"), 1)),
        ("'model'", "config: to_dict names a method of transformers' BertConfig"),
    ),
    "config.temperature -1": (
        _edit((("model", "config", "temperature"), -1.0)),
        ("'model'", "config: temperature is -1.0; a temperature is a number ≥ 0"),
    ),
    "config.num_beams as text": (
        _edit((("model", "config", "num_beams"), "3")),
        ("'model'", "config: num_beams is '3'; a count is an integer ≥ 1"),
    ),
    "config.pruned_heads": (
        _edit((("model", "config", "pruned_heads"), {"0": [0]})),
        ("'model'", "config: pruned_heads is {'0': [0]}; pipeplan builds and trains every"),
    ),
}


@pytest.mark.parametrize("case", TWENTY_THIRD)
def test_a_profiles_config_is_held_to_the_model_folder_rules(tmp_path, capsys, case):
    """Found by the twenty-third round: a profile's config with problem_type 'regression',
    use_return_dict false, temperature -1 or pruned_heads {'0': [0]} was previewed and planned
    (exit 0), while the same keys in a model folder's config.json are refused. Both are held
    to one function (`modelconfig.config_value_problem`, `problem_type_problem`)."""
    doc, fragments = TWENTY_THIRD[case]
    plan_refuses_profile(doc, ("profile.json", *fragments), tmp_path, capsys)


def test_a_profiles_config_with_what_a_folder_may_hold_loads():
    """What the rules above leave alone: single-label classification, an empty pruned_heads
    and sound generation settings, as a model folder's config.json may hold them."""
    from pipeplan.formats.base import parse
    from pipeplan.formats.profile import Profile

    config = ("model", "config")
    doc = _edit(
        ((*config, "problem_type"), "single_label_classification"),
        ((*config, "pruned_heads"), {}),
        ((*config, "temperature"), 0.7),
    )
    assert parse(Profile, json.dumps(doc)).model.config["temperature"] == 0.7


def _params(*indices: int, params: int = 5):
    """An edit: layers `indices` (all blocks when none) given `params` and their float32 bytes."""

    def edit(doc: dict) -> None:
        for i in indices or range(1, len(doc["layers"]) - 1):
            doc["layers"][i].update(params=params, param_bytes=4 * params)

    return edit


def _three_labels(doc: dict) -> None:
    """The round's edit: a classifier of 3 labels in the config, beside a head of 2."""
    config = doc["model"]["config"]
    config["id2label"] = {str(i): f"LABEL_{i}" for i in range(3)}
    config["label2id"] = {f"LABEL_{i}": i for i in range(3)}
    doc["model"]["num_labels"] = 3


VIT = json.loads(shipped_profile("vit-digits", "cpu").read_text())
# The shipped bert-tiny profile (vit-digits where named) with a layer's size or a config field
# that sizes a layer edited; each was planned before the twentieth round (exit 0).
LAYER_SIZE_EDITS = {
    "every block's params 5": (_edit(_params()), "layers.1.params is 5", "block layer 198272"),
    "the embeddings' params 5": (_edit(_params(0)), "layers.0.params is 5", "3972864"),
    "the head's params 5": (_edit(_params(5)), "layers.5.params is 5", "head layer 16770"),
    "the embeddings' output 128 bytes": (
        _edit((("layers", 0, "out_bytes_per_sample"), 128)),
        "layers.0.out_bytes_per_sample is 128",
        "outputs 65536 bytes",
    ),
    "the head's output 10^9 bytes": (
        _edit((("layers", 5, "out_bytes_per_sample"), 10**9)),
        "layers.5.out_bytes_per_sample is 1000000000",
        "outputs 8 bytes per sample (2 logits",
    ),
    "config.vocab_size 10^9": (
        _edit((("model", "config", "vocab_size"), 10**9)),
        "layers.0.params is 3972864",
        "vocab_size 1000000000",
    ),
    "config.vocab_size 10": (
        _edit((("model", "config", "vocab_size"), 10)),
        "layers.0.params is 3972864",
        "67328 parameters (vocab_size 10,",
    ),
    "config.type_vocab_size 1000": (
        _edit((("model", "config", "type_vocab_size"), 1000)),
        "layers.0.params is 3972864",
        "type_vocab_size 1000",
    ),
    "config.max_position_embeddings 1024": (
        _edit((("model", "config", "max_position_embeddings"), 1024)),
        "layers.0.params is 3972864",
        "max_position_embeddings 1024",
    ),
    "config of 3 labels": (_edit(_three_labels), "layers.5.params is 16770", "num_labels 3"),
    "a folder's config.intermediate_size 1024": (
        _edit(
            (("model", "name"), "/models/bert"),
            (("model", "config", "intermediate_size"), 1024),
        ),
        "layers.1.params is 198272",
        "intermediate_size 1024",
    ),
    "config without vocab_size": (
        _edit(lambda d: d["model"]["config"].pop("vocab_size")),
        "model.config has no vocab_size",
        "whole config",
    ),
    "a built-in's config without model_type and vocab_size": (
        _edit(
            lambda d: [d["model"]["config"].pop(key) for key in ("model_type", "vocab_size")],
            _params(0),
        ),
        "model.config has no vocab_size",
        "whole config",
    ),
    "config.add_cross_attention true": (
        _edit((("model", "config", "add_cross_attention"), True)),
        "config: add_cross_attention is true",
        "no cross-attention",
    ),
    "vit-digits: config.qkv_bias false": (
        with_path(VIT, ("model", "config", "qkv_bias"), False),
        "layers.1.params is 198272",
        "qkv_bias 0",
    ),
    "vit-digits: the head's params 12900": (
        with_path(
            with_path(VIT, ("layers", 9, "params"), 12_900), ("layers", 9, "param_bytes"), 51_600
        ),
        "layers.9.params is 12900",
        "num_labels 10",
    ),
}


@pytest.mark.parametrize("case", LAYER_SIZE_EDITS)
def test_each_layers_params_and_output_are_what_its_config_implies(tmp_path, capsys, case):
    """Found by the twentieth round: a profile's per-layer params (so param_bytes) and the
    embeddings' and head's out_bytes_per_sample were not held to its config, nor the config's
    fields that size a layer beside them: a bert-tiny of blocks of 5 parameters planned stage
    memory 234,946,148 B and an all-reduce of 0.01165 s instead of 247,635,236 B / 0.01387 s,
    and vocab_size 10^9 or 10, type_vocab_size 1000 beside the real layers were planned."""
    doc, *fragments = LAYER_SIZE_EDITS[case]
    plan_refuses_profile(doc, ("profile.json", *fragments), tmp_path, capsys)


def test_a_decoders_layers_are_held_to_its_config_and_its_tied_head_loads(tmp_path, capsys):
    """Found by the twentieth round (the families without a shipped profile): llama-tiny's LM
    head is vocab_size × hidden weights beside its norm, its logits a row per token; a head of
    5 parameters or logits of 8 bytes were planned. What the rule leaves alone:
    tie_word_embeddings true (pipeplan unties the head before it profiles: the same layers)."""
    from pipeplan import formats, profiler

    seq = models.build("llama-tiny", seq_len=8)
    prof = profiler.profile_layers(seq, micro_batches=[1], warmup=0, repeats=1)
    doc = json.loads(formats.dumps(prof))
    head = len(doc["layers"]) - 1
    tied = with_path(doc, ("model", "config", "tie_word_embeddings"), True)
    assert formats.parse(formats.Profile, json.dumps(tied)).layers[head].params == 512 * 64 + 64
    edits = {
        "head params": (
            with_path(
                with_path(doc, ("layers", head, "params"), 5), ("layers", head, "param_bytes"), 20
            ),
            f"layers.{head}.params is 5",
            "vocab_size 512, hidden_size 64",
        ),
        "head logits": (
            with_path(doc, ("layers", head, "out_bytes_per_sample"), 8),
            f"layers.{head}.out_bytes_per_sample is 8",
            "8 tokens × 512 logits (vocab_size) in float32",
        ),
    }
    for doc_, *fragments in edits.values():
        plan_refuses_profile(doc_, ("profile.json", *fragments), tmp_path, capsys)


def test_the_seventeenth_rounds_tolerances_leave_measured_profiles_alone():
    """Every shipped profile loads, as do the synthetic ones of every preset: the tolerances
    (no-grad 2× + 0.05 s, a 100× drop between sizes, a link fit within 10× of its samples)
    are far from what a noisy CPU measures (bf16 vit-digits: no-grad 8.7× at 1 ms)."""
    from pipeplan import synthetic
    from pipeplan.formats import Profile

    for path in sorted(Path(cli.__file__).parent.joinpath("profiles").glob("*.json")):
        assert load(Profile, path).layers
    for name in synthetic.PRESETS:
        assert synthetic.preset_profile(name).layers


def test_what_the_sixteenth_rounds_rules_leave_alone_still_loads():
    """The rules hold sizes, shapes and times, nothing else: gpt2's null n_inner (4 × n_embd),
    a time of exactly 0 and an image model's [channels, size, size] still load."""
    from pipeplan.formats.base import parse
    from pipeplan.formats.profile import ModelInfo, Profile

    zero = with_path(PROFILE, ("layers", 1, "timings", 0, "fwd_spread_s"), 0.0)
    assert parse(Profile, json.dumps(zero)).layers[1].timings[0].fwd_spread_s == 0.0
    gpt2 = {
        "name": "/models/gpt2",
        "family": "gpt2",
        # A config the checks of a model folder pass (the seventeenth round): a GPT-2
        # classifier pools at its pad token, its heads divide its width.
        "config": {
            "model_type": "gpt2",
            "n_inner": None,
            "n_embd": 64,
            "n_head": 2,
            "pad_token_id": 0,
        },
        "input_shape": [16],
        "input_dtype": "int64",
        "num_labels": 2,
    }
    assert ModelInfo.model_validate(gpt2).config["n_inner"] is None
    vit = {**gpt2, "name": "/models/vit", "family": "vit", "config": {"model_type": "vit"}}
    vit["input_dtype"] = "float32"  # pixels
    assert ModelInfo.model_validate({**vit, "input_shape": [3, 8, 8]}).input_shape == [3, 8, 8]


def test_an_image_profiles_input_shape_is_its_configs():
    """Found by the sixteenth round (the input shape of a text profile could be []): an image
    model's shape is [num_channels, image_size, image_size] of its own config."""
    from pipeplan.formats.base import parse
    from pipeplan.formats.profile import Profile

    vit = json.loads(shipped_profile("vit-digits", "cpu").read_text())
    channels, size = vit["model"]["config"]["num_channels"], vit["model"]["config"]["image_size"]
    assert parse(Profile, json.dumps(vit)).model.input_shape == [channels, size, size]
    for shape in ([channels, size + 1, size + 1], [channels + 2, size, size], [size]):
        doc = with_path(vit, ("model", "input_shape"), shape)
        with pytest.raises(InputFileError, match=r"'model'.*input_shape is"):
            parse(Profile, json.dumps(doc), "vit.json")


def test_a_profiles_memory_too_small_to_share_names_the_profile_not_the_flag(tmp_path, capsys):
    """Found by the fifteenth round: a profile's memory of 0 gave `--device-memory must be
    positive (got 'None')`, a flag never given. The schema now refuses 0; 1 byte shared by 2
    CPU ranks (0 each) took the same path (`got '0'`) and now names the profile's field."""
    path = tmp_path / "m1.json"
    path.write_text(json.dumps(with_path(PROFILE, ("device", "memory_bytes"), 1)))
    argv = ["run", "--model", "bert-tiny", "--data", "synth-text", "--nproc", "2"]
    argv += ["--profile", str(path), "--prepare-only", "--runs-dir", str(tmp_path / "runs")]
    fragments = ("device.memory_bytes 1", "--nproc 2", "give --device-memory")
    refused(argv, tmp_path, capsys, fragments)


@pytest.mark.parametrize("command", ["plan", "run"])
def test_a_device_memory_from_the_profile_is_named_as_the_profiles(tmp_path, capsys, command):
    """Found by the seventeenth round: a profile whose device.memory_bytes is 1 gave `… a
    device has 0.0 MiB (use devices with more memory …)`, not saying where 0.0 MiB came from
    (round 15 named --device-memory when it was the flag's). The thirty-second round: a
    memory under 0.1 MiB is said in bytes, not as 0.0 MiB."""
    path = tmp_path / "m1.json"
    path.write_text(json.dumps(with_path(PROFILE, ("device", "memory_bytes"), 1)))
    if command == "plan":
        argv = ["plan", "--profile", str(path), "--out", str(tmp_path / "o.json")]
    else:
        argv = ["run", "--model", "bert-tiny", "--data", "synth-text", "--nproc", "1"]
        argv += ["--profile", str(path), "--prepare-only", "--runs-dir", str(tmp_path / "r")]
    # The forty-eighth round: plan's line named the field but not the file.
    named = f", {path})" if command == "plan" else ")"
    said = f"a device has 1 byte (the profile's device.memory_bytes 1{named}"
    refused(argv, tmp_path, capsys, (said,))


@pytest.mark.parametrize("command", ["plan", "preview"])
def test_a_cluster_files_memory_too_small_names_the_file_and_field(tmp_path, capsys, command):
    """Found by the forty-eighth round: a cluster file's device_memory_bytes of 1 gave "the
    model does not fit …: a device has 1 byte" naming neither the file nor the field."""
    cluster = tmp_path / "c.json"
    cluster.write_text(json.dumps(CLUSTER | {"device_memory_bytes": 1}))
    argv = [command, "--profile", str(shipped_profile("bert-tiny", "cpu"))]
    argv += ["--cluster", str(cluster)]
    argv += ["--out", str(tmp_path / "o.json")] if command == "plan" else []
    refused(argv, tmp_path, capsys, (f"a device has 1 byte ({cluster}'s device_memory_bytes)",))


def test_a_plans_profile_identity_is_its_profiles(tmp_path, capsys):
    """Found by the seventeenth round: a plan whose inputs.profile.device was edited to
    "Other CPU" (same sha256) ran with `run --plan … --prepare-only`, exit 0."""
    profile = str(shipped_profile("bert-tiny", "cpu"))
    plan = tmp_path / "in" / "p.json"
    plan.parent.mkdir()
    argv = ["plan", "--profile", profile, "--devices-per-node", "1", "--epochs", "1"]
    assert cli.main([*argv, "--samples", "512", "-o", str(plan)]) == 0
    doc = json.loads(plan.read_text())
    plan.write_text(json.dumps(with_path(doc, ("inputs", "profile", "device"), "Other CPU")))
    capsys.readouterr()
    run = ["run", "--plan", str(plan), "--model", "bert-tiny", "--data", "synth-text"]
    run += ["--prepare-only", "--runs-dir", str(tmp_path / "runs")]
    refused(run, tmp_path / "in", capsys, ("inputs.profile.device is 'Other CPU'",))
    assert not (tmp_path / "runs").exists()


def test_a_size_the_profiler_found_infeasible_loads():
    """What the profiler writes for a size out of memory (error, nothing measured) still
    loads, beside the shipped profiles of both precisions, whose weights are float32 bytes."""
    from pipeplan.formats import Profile, parse

    doc = _bare_infeasible(PROFILE, error="out of memory: CUDA out of memory")
    assert not parse(Profile, json.dumps(doc)).layers[1].timings[0].feasible
    for name, precision in (("bert-tiny", "fp32"), ("vit-digits", "bf16")):
        profile = load(Profile, shipped_profile(name, "cpu", precision))
        assert all(layer.param_bytes == 4 * layer.params for layer in profile.layers)


def test_a_path_names_a_model_freely():
    """A profile of a folder (its name a path) is held to its config, not to a preset: the
    same name check refuses only the built-in names."""
    from pipeplan.formats import Profile, parse

    doc = with_path(PROFILE, ("model", "name"), "/models/bert-large")
    assert parse(Profile, json.dumps(doc)).model.name == "/models/bert-large"


# --------------------------------------------------------------------------- model folders


def _checkpoint(directory, layers: int, cls=transformers.BertForSequenceClassification):
    torch.manual_seed(0)
    cls(transformers.BertConfig(**{**BERT, "num_hidden_layers": layers})).save_pretrained(directory)
    return directory


def _damaged(directory, damage: str):
    """A 2-block BERT classifier checkpoint with one encoder weight damaged: NaN, stored as
    int32, left out, or cut to another shape."""
    from safetensors.torch import load_file, save_file

    model = _checkpoint(directory, 2)
    weights = load_file(model / "model.safetensors")
    key = "bert.encoder.layer.0.attention.self.query.weight"
    if damage == "nan":
        weights[key][0, 0] = math.nan
    elif damage == "int32":
        weights[key] = weights[key].int()
    elif damage == "missing":
        weights.pop(key)
    else:
        weights[key] = weights[key][:, :10].contiguous()
    save_file(weights, model / "model.safetensors", metadata={"format": "pt"})
    return model


# damage → what the one line says (run's messages, which profile now gives too).
DAMAGE = {
    "nan": "holds NaN or infinite values in bert.encoder.layer.0.attention.self.query.weight",
    "int32": "is stored as I32 but the model's is floating",
    "missing": "lacks 1 weights outside the task head",
    # Found by the eighteenth round's fix: compared with config.json's sizes before building.
    "shape": "config.json: hidden_size is 32 but model.safetensors holds "
    "bert.encoder.layer.0.attention.self.query.weight of shape [32, 10] (dimension 1: 10)",
}


@pytest.mark.parametrize("damage", DAMAGE)
def test_profile_checks_a_folders_weights_as_run_does(tmp_path, capsys, damage):
    """Found by the seventeenth round: `profile DIR` built the model with random weights and
    never read model.safetensors, so NaN, int32 and missing weights were profiled (exit 0)
    and refused only at `run`. A tensor of the wrong shape was reported as lacking."""
    model = _damaged(tmp_path / "in" / "model", damage)
    capsys.readouterr()  # save_pretrained's progress bar
    out = tmp_path / "p.json"
    argv = ["profile", str(model), "--out", str(out), "--micro-batch-sizes", "1"]
    refused([*argv, "--repeats", "1", "--warmup", "0"], tmp_path / "in", capsys, DAMAGE[damage])
    assert not out.exists()


# A 1-block checkpoint of each family: its model class and config (each family's own keys).
_SMALL = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64)
_IMAGE = dict(_SMALL, image_size=8, patch_size=2, num_channels=1)
FAMILY_CHECKPOINTS = {
    "bert": ("BertForSequenceClassification", "BertConfig", {**BERT, "num_hidden_layers": 1}),
    "roberta": ("RobertaForSequenceClassification", "RobertaConfig", {**BERT, "pad_token_id": 1}),
    "electra": (
        "ElectraForSequenceClassification",
        "ElectraConfig",
        {**BERT, "embedding_size": 16},
    ),
    "distilbert": (
        "DistilBertForSequenceClassification",
        "DistilBertConfig",
        dict(vocab_size=128, dim=32, n_layers=1, n_heads=2, hidden_dim=64),
    ),
    "vit": ("ViTForImageClassification", "ViTConfig", _IMAGE),
    "deit": ("DeiTForImageClassification", "DeiTConfig", _IMAGE),
    "gpt2": ("GPT2LMHeadModel", "GPT2Config", dict(vocab_size=128, n_embd=32, n_layer=1, n_head=2)),
    "llama": (
        "LlamaForCausalLM",
        "LlamaConfig",
        dict(_SMALL, vocab_size=128, num_attention_heads=4, num_key_value_heads=2),
    ),
}
# (family, config.json's edit, what the one line says after "config.json: "); the first three
# are the eighteenth round's.
WEIGHT_SHAPE_EDITS = {
    "bert vocab_size 10^9": (
        "bert",
        {"vocab_size": 10**9},
        "vocab_size is 1000000000 but model.safetensors holds "
        "bert.embeddings.word_embeddings.weight of shape [128, 32] (dimension 0: 128)",
    ),
    "bert hidden_size 2^20": (
        "bert",
        {"hidden_size": 2**20},
        "hidden_size is 1048576 but model.safetensors holds "
        "bert.embeddings.word_embeddings.weight of shape [128, 32] (dimension 1: 32)",
    ),
    "bert intermediate_size 10^9": (
        "bert",
        {"intermediate_size": 10**9},
        "intermediate_size is 1000000000 but model.safetensors holds "
        "bert.encoder.layer.0.intermediate.dense.weight of shape [64, 32] (dimension 0: 64)",
    ),
    "roberta max_position_embeddings 10^6": (
        "roberta",
        {"max_position_embeddings": 10**6},
        "max_position_embeddings is 1000000 but model.safetensors holds "
        "roberta.embeddings.position_embeddings.weight of shape [64, 32] (dimension 0: 64)",
    ),
    "electra embedding_size 10^6": (
        "electra",
        {"embedding_size": 10**6},
        "embedding_size is 1000000 but model.safetensors holds "
        "electra.embeddings.word_embeddings.weight of shape [128, 16] (dimension 1: 16)",
    ),
    "distilbert hidden_dim 10^9": (
        "distilbert",
        {"hidden_dim": 10**9},
        "hidden_dim is 1000000000 but model.safetensors holds "
        "distilbert.transformer.layer.0.ffn.lin1.weight of shape [64, 32] (dimension 0: 64)",
    ),
    "vit image_size 1024": (
        "vit",
        {"image_size": 1024},
        "(image_size / patch_size)² + 1 is 262145 but model.safetensors holds "
        "vit.embeddings.position_embeddings of shape [1, 17, 32] (dimension 1: 17)",
    ),
    "deit num_channels 3": (
        "deit",
        {"num_channels": 3},
        "num_channels is 3 but model.safetensors holds deit.embeddings.patch_embeddings."
        "projection.weight of shape [32, 1, 2, 2] (dimension 1: 1)",
    ),
    "gpt2 n_inner 10^9": (
        "gpt2",
        {"n_inner": 10**9},
        "n_inner is 1000000000 but model.safetensors holds transformer.h.0.mlp.c_fc.weight of "
        "shape [32, 128] (dimension 1: 128)",
    ),
    "llama num_key_value_heads 1": (
        "llama",
        {"num_key_value_heads": 1},
        "num_key_value_heads × head_dim is 8 but model.safetensors holds "
        "model.layers.0.self_attn.k_proj.weight of shape [16, 32] (dimension 0: 16)",
    ),
}


def _family_checkpoint(directory: Path, family: str, **save) -> Path:
    model_class, config_class, sizes = FAMILY_CHECKPOINTS[family]
    torch.manual_seed(0)
    config = getattr(transformers, config_class)(**sizes)
    getattr(transformers, model_class)(config).save_pretrained(directory, **save)
    return directory


@pytest.mark.parametrize("case", WEIGHT_SHAPE_EDITS)
def test_config_sizes_are_held_to_the_weights_header_before_building(tmp_path, capsys, case):
    """Found by the eighteenth round: a model folder whose config.json says vocab_size 10^9
    beside weights of 128 tokens was built at that size (128 GB; hidden_size 2^20: 4 TB) and
    the one line blamed model.safetensors with an allocator dump. The safetensors header's
    shapes (no tensor loaded) are compared with those config.json implies, for each size of
    each family: one line naming config.json, the size and both values."""
    family, edit, fragment = WEIGHT_SHAPE_EDITS[case]
    model = _family_checkpoint(tmp_path / "in" / "model", family)
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, **edit}))
    capsys.readouterr()  # save_pretrained's progress bar
    where = f"{model / 'config.json'}: {fragment}; a config of another model, or damaged weights"
    _profile_refused(model, tmp_path, capsys, where)


# (family, config.json's edit, what the one line says after "config.json: "), the weights float32
CONFIG_DTYPE_EDITS = {
    "bert dtype float16": ("bert", {"dtype": "float16"}, "dtype is 'float16'"),
    "gpt2 torch_dtype bfloat16": ("gpt2", {"torch_dtype": "bfloat16"}, "torch_dtype is 'bfloat16'"),
}


@pytest.mark.parametrize("case", CONFIG_DTYPE_EDITS)
def test_a_config_dtype_is_held_to_the_weights_dtype(tmp_path, capsys, case):
    """Found by the twenty-first round: a folder whose config.json says dtype (or torch_dtype)
    float16 beside float32 weights was accepted without a word (pipeplan loads and exports
    float32 whatever it says; from_pretrained(dtype="auto") of the folder loads float16): one
    line naming config.json, the key, and the dtype the weights are stored in."""
    family, edit, fragment = CONFIG_DTYPE_EDITS[case]
    model = _family_checkpoint(tmp_path / "in" / "model", family)
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, **edit}))
    capsys.readouterr()  # save_pretrained's progress bar
    held = "but model.safetensors holds its float weights as F32; the dtype a config records"
    _profile_refused(model, tmp_path, capsys, f"{model / 'config.json'}: {fragment} {held}")


# (family, the tensors stored as float16 beside float32 ones under config.json's float32: all but
# the first, or one; what the one line names after "config.json: dtype is 'float32' but ")
MIXED_DTYPES = {
    "bert, all but the first": (
        "bert",
        lambda i, key: i > 0,
        "model.safetensors holds bert.embeddings.LayerNorm.weight as F16",
    ),
    "gpt2, one tensor": (
        "gpt2",
        lambda i, key: key == "transformer.h.0.mlp.c_fc.weight",
        "model.safetensors holds transformer.h.0.mlp.c_fc.weight as F16",
    ),
}


@pytest.mark.parametrize("case", MIXED_DTYPES)
def test_every_float_tensor_is_held_to_the_config_dtype(tmp_path, capsys, case):
    """Found by the twenty-third round: config.json's dtype was checked against one tensor
    only: weights all float16 but the first, or float32 but one, under dtype float32 were
    accepted. Every float tensor's header is read (no tensor data): one line naming the first
    tensor of another dtype and the dtypes the weights hold."""
    from safetensors.torch import load_file, save_file

    family, half, fragment = MIXED_DTYPES[case]
    model = _family_checkpoint(tmp_path / "in" / "model", family)
    tensors = load_file(model / "model.safetensors")
    tensors = {k: v.half() if half(i, k) else v for i, (k, v) in enumerate(sorted(tensors.items()))}
    save_file(tensors, model / "model.safetensors", metadata={"format": "pt"})
    capsys.readouterr()  # save_pretrained's progress bar
    said = f"{model / 'config.json'}: dtype is 'float32' but {fragment} (its float weights are F16"
    _profile_refused(model, tmp_path, capsys, said)


def _tied_folder(directory: Path, family: str, head: str, tie: bool | None = True) -> Path:
    """A causal LM's folder (`FAMILY_CHECKPOINTS`) whose config.json's tie_word_embeddings is
    `tie` (None: no key, the family's default) and whose weights store lm_head.weight as
    `head` says: "unlike" the input embeddings (them + 1), "equal" to them, or "absent"; in
    model.safetensors, or in pytorch_model.bin ("... in bin")."""
    from safetensors.torch import load_file, save_file

    model = _family_checkpoint(directory, family)
    embeddings = {"gpt2": "transformer.wte.weight", "llama": "model.embed_tokens.weight"}[family]
    tensors = load_file(model / "model.safetensors")
    copies = {"unlike": tensors[embeddings] + 1, "equal": tensors[embeddings].clone()}
    tensors.pop("lm_head.weight", None)
    if head.split()[0] in copies:
        tensors["lm_head.weight"] = copies[head.split()[0]]
    (model / "model.safetensors").unlink()
    if head.endswith(" in bin"):
        torch.save(tensors, model / "pytorch_model.bin")
    else:
        save_file(tensors, model / "model.safetensors", metadata={"format": "pt"})
    config = json.loads((model / "config.json").read_text())
    config.pop("tie_word_embeddings", None)
    tied = {} if tie is None else {"tie_word_embeddings": tie}
    (model / "config.json").write_text(json.dumps({**config, **tied}))
    return model


# (family, tie_word_embeddings (None: unset), the stored head, the command, what the one line
# says after "config.json: tie_word_embeddings is ")
TIED_UNLIKE = {
    "llama true, profile": ("llama", True, "unlike", "profile", "true but model.safetensors holds "
                            "lm_head.weight unlike model.embed_tokens.weight"),
    "llama true, run": ("llama", True, "unlike", "run", "true but model.safetensors holds "
                        "lm_head.weight unlike model.embed_tokens.weight"),
    "gpt2 unset (true)": ("gpt2", None, "unlike", "profile", "unset (true for gpt2) but "
                          "model.safetensors holds lm_head.weight unlike transformer.wte.weight"),
    "gpt2 true, pytorch_model.bin": ("gpt2", True, "unlike in bin", "run", "true but "
                                     "pytorch_model.bin holds lm_head.weight unlike transformer"),
}  # fmt: skip


@pytest.mark.parametrize("case", TIED_UNLIKE)
def test_a_tied_config_beside_a_stored_head_unlike_the_embeddings_is_refused(
    tmp_path, capsys, case
):
    """Found by the twenty-fourth round: a Llama folder whose config.json says
    tie_word_embeddings true beside a stored lm_head.weight unlike the embeddings was
    profiled, trained untied and exported still saying true (transformers 5 keeps such a head
    apart, 4 ties it on loading, throwing the trained head away). profile and run (prepared)
    refuse it in one line naming config.json's tie_word_embeddings and the stored head."""
    family, tie, head, command, fragment = TIED_UNLIKE[case]
    model = _tied_folder(tmp_path / "in" / "model", family, head, tie)
    capsys.readouterr()  # save_pretrained's progress bar
    where = f"{model / 'config.json'}: tie_word_embeddings is {fragment}"
    if command == "profile":
        return _profile_refused(model, tmp_path, capsys, (where, "set tie_word_embeddings false"))
    argv = ["run", "--nproc", "1", "--prepare-only", "--name", "x", "--model", str(model)]
    argv += ["--data", "synth-text", "--task", "causal-lm", "--runs-dir", str(tmp_path / "runs")]
    refused(argv, tmp_path / "in", capsys, where)
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    "family, head, tie, task",
    [
        ("llama", "equal", True, "causal-lm"),  # the tie, stored twice
        ("gpt2", "equal in bin", None, "causal-lm"),  # a tied model's pytorch_model.bin
        ("llama", "absent", True, "causal-lm"),  # tied to the embeddings on loading
        ("llama", "unlike", False, "causal-lm"),  # untied, as said
        ("gpt2", "unlike", True, "classification"),  # no LM head built, nothing tied
    ],
)
def test_a_tied_head_stored_as_the_embeddings_or_not_at_all_builds(
    tmp_path, family, head, tie, task
):
    """The check above refuses only a tie with two different stored values: an equal copy,
    a head left to the tie, an untied config or a task model with no tied head builds, and
    the head it trains starts from the stored head, else the embeddings."""
    model = _tied_folder(tmp_path / "model", family, head, tie)
    if task == "classification":
        config = json.loads((model / "config.json").read_text())
        (model / "config.json").write_text(json.dumps({**config, "pad_token_id": 0}))
    labels = {"num_labels": 2} if task == "classification" else {}
    seq = models.build(str(model), task=task, **labels)
    assert seq.hf_model.config.tie_word_embeddings is False or task == "classification"
    if task == "causal-lm":
        embeddings = seq.hf_model.get_input_embeddings().weight
        expected = embeddings + 1 if head == "unlike" else embeddings
        assert torch.equal(seq.hf_model.lm_head.weight, expected)


def test_a_config_dtype_of_the_weights_own_is_accepted(tmp_path):
    """The check above is on the weights' dtype, not float32's: a bfloat16 checkpoint saying
    bfloat16 (as save_pretrained writes one) builds, loaded as float32."""
    model = _family_checkpoint(tmp_path / "model", "bert")
    transformers.BertForSequenceClassification.from_pretrained(model).to(
        torch.bfloat16
    ).save_pretrained(model)
    assert json.loads((model / "config.json").read_text())["dtype"] == "bfloat16"
    seq = models.build(str(model))
    assert {p.dtype for p in seq.hf_model.parameters()} == {torch.float32}


def _profile_refused(model: Path, tmp_path: Path, capsys, where: str | tuple[str, ...]) -> None:
    """`profile MODEL` refused in one line holding `where`, nothing under tmp_path/in changed
    and no profile written."""
    out = tmp_path / "p.json"
    argv = ["profile", str(model), "--out", str(out), "--micro-batch-sizes", "1", "--repeats"]
    refused([*argv, "1", "--warmup", "0"], tmp_path / "in", capsys, where)
    assert not out.exists()


def test_a_sharded_checkpoints_headers_are_read_for_the_shapes(tmp_path):
    """Found by the eighteenth round (vocab_size 10^9 beside 128 tokens), with the weights in
    shards named by model.safetensors.index.json: the shard holding the tensor is named."""
    model = _family_checkpoint(tmp_path / "model", "bert", max_shard_size="20KB")
    assert (model / "model.safetensors.index.json").exists()
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "vocab_size": 10**9}))
    with pytest.raises(InputFileError) as error:
        models.build(str(model))
    assert "vocab_size is 1000000000 but model-0000" in str(error.value)
    assert "bert.embeddings.word_embeddings.weight of shape [128, 32]" in str(error.value)


# ------------------------------------------------------------- shard indexes (nineteenth round)


@pytest.fixture(scope="module")
def sharded(tmp_path_factory) -> dict[str, Path]:
    """A 1-block BERT checkpoint in safetensors shards (model.safetensors.index.json), and the
    same tensors in pytorch_model.bin shards (pytorch_model.bin.index.json)."""
    from safetensors.torch import load_file

    root = tmp_path_factory.mktemp("sharded")
    safe = _family_checkpoint(root / "safetensors", "bert", max_shard_size="20KB")
    binary = Path(shutil.copytree(safe, root / "bin"))
    index = json.loads((binary / "model.safetensors.index.json").read_text())
    renamed = {}
    for shard in sorted(set(index["weight_map"].values())):
        renamed[shard] = shard.replace("model-", "pytorch_model-").replace(".safetensors", ".bin")
        torch.save(load_file(binary / shard), binary / renamed[shard])
        (binary / shard).unlink()
    index["weight_map"] = {k: renamed[v] for k, v in index["weight_map"].items()}
    (binary / "pytorch_model.bin.index.json").write_text(json.dumps(index))
    (binary / "model.safetensors.index.json").unlink()
    return {"safetensors": safe, "bin": binary}


INDEXES = {"safetensors": "model.safetensors.index.json", "bin": "pytorch_model.bin.index.json"}


def _copy(sharded: dict[str, Path], kind: str, tmp_path: Path) -> tuple[Path, Path, dict]:
    """A copy of one sharded checkpoint under tmp_path/in: (folder, its index, the index)."""
    model = Path(shutil.copytree(sharded[kind], tmp_path / "in" / "model"))
    index = model / INDEXES[kind]
    return model, index, json.loads(index.read_text())


def _profile_argv(model: Path, tmp_path: Path) -> list[str]:
    argv = ["profile", str(model), "--out", str(tmp_path / "p.json")]
    return [*argv, "--micro-batch-sizes", "1", "--repeats", "1", "--warmup", "0"]


# Opens a FIFO for writing once a reader waits, after a delay, and closes it at once.
_UNBLOCK = """
import os, sys, time
time.sleep(float(sys.argv[2]))
while True:
    try:
        os.close(os.open(sys.argv[1], os.O_WRONLY | os.O_NONBLOCK))
        break
    except OSError:  # no reader yet (ENXIO)
        time.sleep(0.1)
"""


@contextlib.contextmanager
def _writer_after(fifo: Path, seconds: float) -> Iterator[None]:
    """A reader blocked in open() of `fifo` gets an empty file after `seconds` instead of
    hanging forever, so a test of old code fails rather than hangs. Another process: the
    blocked open() in safetensors' Rust code holds the GIL, so no thread of this one runs."""
    writer = subprocess.Popen([sys.executable, "-c", _UNBLOCK, str(fifo), str(seconds)])
    try:
        yield
    finally:
        writer.kill()
        writer.wait()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("what", ["a FIFO", "a link to /dev/zero", "a directory"])
@pytest.mark.parametrize("kind", ["safetensors", "bin"])
def test_a_shard_that_is_no_file_is_refused_before_it_is_opened(
    sharded, tmp_path, capsys, kind, what
):
    """Found by the nineteenth round: a shard named by model.safetensors.index.json that is a
    FIFO hung `profile` forever, deaf to Ctrl-C and SIGTERM (open() inside safetensors' Rust
    code); in pytorch_model.bin.index.json it hung until Ctrl-C. Each shard is checked as
    model.safetensors is (a regular file, a link to one allowed) before anything opens it."""
    model, index, data = _copy(sharded, kind, tmp_path)
    shard = model / sorted(set(data["weight_map"].values()))[-1]
    shard.unlink()
    if what == "a FIFO":
        os.mkfifo(shard)
    elif what == "a directory":
        shard.mkdir()
    else:
        shard.symlink_to("/dev/zero")
    capsys.readouterr()
    fragment = f"{shard}: not a regular file; the weights are a file ({index.name} names it"
    with _writer_after(shard, 30) if what == "a FIFO" else contextlib.nullcontext():
        refused(_profile_argv(model, tmp_path), tmp_path / "in", capsys, fragment)
    assert not (tmp_path / "p.json").exists()


KEY = "bert.embeddings.word_embeddings.weight"
# (how the index's weight_map names the shard of KEY, what the one line says after it)
OUTSIDE = "a shard is a file name ending in .safetensors in the model's folder (no folder, no '..')"
SHARD_NAMES = {
    "../ to a real shard": ("../elsewhere/{shard}", "is '../elsewhere/{shard}'; " + OUTSIDE),
    "an absolute path": ("{elsewhere}/{shard}", "is '{elsewhere}/{shard}'; " + OUTSIDE),
    "/dev/zero": ("/dev/zero", "is '/dev/zero'; " + OUTSIDE),
    "a subfolder": ("sub/{shard}", "is 'sub/{shard}'; " + OUTSIDE),
    "another suffix": ("{shard}.bin", "is '{shard}.bin'; " + OUTSIDE),
    "a number": (3, "is 3; " + OUTSIDE),
}


@pytest.mark.parametrize("case", SHARD_NAMES)
def test_a_shard_index_names_plain_files_of_the_folder(sharded, tmp_path, capsys, case):
    """Found by the nineteenth round: weight_map naming '../elsewhere/b.safetensors' or an
    absolute path read weights from outside the model folder (exit 0), and /dev/zero was
    opened. A shard is a file name in the folder, with its index's suffix."""
    model, index, data = _copy(sharded, "safetensors", tmp_path)
    elsewhere = tmp_path / "in" / "elsewhere"
    shutil.copytree(model, elsewhere)
    shutil.copytree(model, model / "sub")
    shard = data["weight_map"][KEY]
    given, said = SHARD_NAMES[case]
    if isinstance(given, str):
        given = given.format(shard=shard, elsewhere=elsewhere)
    data["weight_map"][KEY] = given
    index.write_text(json.dumps(data))
    capsys.readouterr()
    said = said.format(shard=shard, elsewhere=elsewhere)
    refused(_profile_argv(model, tmp_path), tmp_path / "in", capsys, (str(index), said))


# (the index's text from the good index's, what the one line says after the index's path)
INDEX_TEXTS = {
    "no weight_map": (lambda d: json.dumps({"metadata": d["metadata"]}), "weight_map is missing"),
    "weight_map {}": (lambda d: json.dumps({**d, "weight_map": {}}), "weight_map is an empty"),
    "weight_map a list": (lambda d: json.dumps({**d, "weight_map": [1]}), "weight_map is a list"),
    "a list": (lambda d: "[]", "a shard index is a JSON object"),
    "NaN": (lambda d: json.dumps({**d, "metadata": {"total_size": math.nan}}), "NaN is not valid"),
    "a key twice": (
        lambda d: json.dumps(d)[:-1] + ', "weight_map": {}}',
        "key 'weight_map' appears twice",
    ),
    "nested deeper than the parser": (lambda d: "[" * 100_000 + "]" * 100_000, "not valid JSON"),
}


@pytest.mark.parametrize("case", INDEX_TEXTS)
def test_a_shard_index_is_read_as_strictly_as_a_pipeplan_file(sharded, tmp_path, capsys, case):
    """Found by the nineteenth round: a missing or empty weight_map was "cannot build the
    model from its config (KeyError: 'weight_map')" / "(IndexError: …)", blaming config.json
    with a Python exception's name. The index is JSON read strictly (NaN, a key twice, depth)
    and its weight_map a non-empty object, refused naming the index and the key."""
    model, index, data = _copy(sharded, "safetensors", tmp_path)
    text, said = INDEX_TEXTS[case]
    index.write_text(text(data))
    capsys.readouterr()
    refused(_profile_argv(model, tmp_path), tmp_path / "in", capsys, (f"{index}: ", said))


def test_a_shard_index_larger_than_its_limit_is_refused_unread(sharded, tmp_path, capsys):
    """Found by the nineteenth round: the index was read whole whatever its size (under the
    limit of a config.json, named as one). Its own limit is stated."""
    model, index, _ = _copy(sharded, "safetensors", tmp_path)
    os.truncate(index, (64 << 20) + 1)  # sparse: no disk used
    capsys.readouterr()
    said = f"{index}: larger than 64 MiB, the limit for a model's shard index"
    refused(_profile_argv(model, tmp_path), tmp_path / "in", capsys, said)


@pytest.mark.parametrize("case", ["in two shards", "mapped to the other shard", "in none"])
def test_each_tensor_is_in_the_one_shard_the_index_names(sharded, tmp_path, capsys, case):
    """Found by the nineteenth round: the same tensor in two shards with other values was
    taken from one of them without a word. Every tensor is in one shard, the one weight_map
    names for it."""
    from safetensors.torch import load_file, save_file

    model, index, data = _copy(sharded, "safetensors", tmp_path)
    shard = data["weight_map"][KEY]
    other = next(s for s in sorted(set(data["weight_map"].values())) if s != shard)
    if case == "in two shards":
        tensors = load_file(model / other)
        tensors[KEY] = load_file(model / shard)[KEY] * 2
        save_file(tensors, model / other, metadata={"format": "pt"})
        said = f"tensor {KEY} is in two shards"
    elif case == "mapped to the other shard":
        # A tensor whose shard holds others: that shard is still read (KEY's holds KEY alone).
        names = list(data["weight_map"].values())
        key = next(k for k, s in data["weight_map"].items() if names.count(s) > 1)
        shard, data["weight_map"][key] = data["weight_map"][key], shard
        said = f"weight_map puts tensor {key} in {data['weight_map'][key]}, which does not hold "
        said += f"it (it is in {shard})"
    else:
        data["weight_map"]["bert.no.such.weight"] = shard
        said = f"weight_map puts tensor bert.no.such.weight in {shard}, which does not hold it;"
    index.write_text(json.dumps(data))
    capsys.readouterr()
    refused(_profile_argv(model, tmp_path), tmp_path / "in", capsys, (f"{index}: ", said))


@pytest.mark.parametrize("kind", ["safetensors", "bin"])
def test_every_tensor_a_shard_holds_is_in_the_index(sharded, tmp_path, capsys, kind):
    """Found by the twentieth round: a tensor a shard holds but weight_map leaves out was
    loaded without a word (the reverse, a tensor named but not held, was refused). The index
    names exactly the tensors its shards hold."""
    model, index, data = _copy(sharded, kind, tmp_path)
    # A tensor whose shard holds others: the index still names that shard (KEY's holds KEY).
    names = list(data["weight_map"].values())
    key = next(k for k, s in data["weight_map"].items() if names.count(s) > 1)
    shard = data["weight_map"].pop(key)
    index.write_text(json.dumps(data))
    capsys.readouterr()
    said = f"{shard} holds tensor {key}, which weight_map leaves out"
    refused(_profile_argv(model, tmp_path), tmp_path / "in", capsys, (f"{index}: ", said))


# (the index's metadata, what the one line says after the index's path)
INDEX_METADATA = {
    "total_size as text": ({"total_size": "abc"}, "metadata.total_size is 'abc'; an integer ≥ 0"),
    "total_size -5": ({"total_size": -5}, "metadata.total_size is -5; an integer ≥ 0"),
    "total_size 1.5": ({"total_size": 1.5}, "metadata.total_size is 1.5; an integer ≥ 0"),
    "total_size not the shards'": (
        {"total_size": 1},
        "metadata.total_size is 1 but its shards' tensors hold",
    ),
    "total_parameters as text": (
        {"total_size": None, "total_parameters": "x"},
        "metadata.total_parameters is 'x'; an integer ≥ 0",
    ),
    "no metadata": (None, "metadata is missing; a shard index holds a metadata object"),
    "metadata as text": ("abc", "metadata is 'abc'; a shard index holds a metadata object"),
}


@pytest.mark.parametrize("case", INDEX_METADATA)
def test_a_shard_indexs_metadata_is_checked(sharded, tmp_path, capsys, case):
    """Found by the twentieth round: metadata.total_size "abc", -5 or 1 (beside 97,928 bytes of
    tensors) was ignored, and an index without metadata, or with metadata not an object, was
    "cannot build the model from its config (KeyError: 'metadata')", blaming config.json.
    total_size is the bytes of the shards' tensors, as save_pretrained writes it."""
    model, index, data = _copy(sharded, "safetensors", tmp_path)
    metadata, said = INDEX_METADATA[case]
    if metadata is None:
        del data["metadata"]
    elif isinstance(metadata, dict):
        data["metadata"] = {**data["metadata"], **metadata}
    else:
        data["metadata"] = metadata
    index.write_text(json.dumps(data))
    capsys.readouterr()
    refused(_profile_argv(model, tmp_path), tmp_path / "in", capsys, (f"{index}: ", said))


# (a shard's name or a tensor's, the character the one line names)
UNPRINTABLE_NAMES = {
    "a shard named with a newline and U+202E": ("shard", "m\n\u202e2.safetensors", "U+000A"),
    "a shard named with U+202E": ("shard", "m\u202e2.safetensors", "U+202E"),
    "a shard named with a zero-width space": ("shard", "m\u200b2.safetensors", "U+200B"),
    "a tensor named with a newline": ("tensor", KEY + "\n", "U+000A"),
}


@pytest.mark.parametrize("case", UNPRINTABLE_NAMES)
def test_names_in_a_shard_index_are_printable(sharded, tmp_path, capsys, case):
    """Found by the twentieth round: a shard renamed to hold a newline and U+202E (and the
    index naming it so) was read; names and paths with control, bidi or zero-width characters
    are refused everywhere else since the fifteenth and sixteenth rounds (a name that prints
    as another one, or forges a line of a message)."""
    model, index, data = _copy(sharded, "safetensors", tmp_path)
    what, name, character = UNPRINTABLE_NAMES[case]
    shard = data["weight_map"][KEY]
    if what == "shard":
        (model / shard).rename(model / name)  # the shard is there, under that name
        data["weight_map"] = {k: name if s == shard else s for k, s in data["weight_map"].items()}
    else:
        data["weight_map"][name] = data["weight_map"].pop(KEY)
    index.write_text(json.dumps(data))
    capsys.readouterr()
    said = (f"{index}: ", repr(name), f"character {character}")
    refused(_profile_argv(model, tmp_path), tmp_path / "in", capsys, said)


# The twenty-third round's index metadata: (metadata added, what the one line says after the
# index's path).
TWENTY_THIRD_METADATA = {
    "total_parameters beyond the shards'": (
        {"total_parameters": 10**9},
        "metadata.total_parameters is 1000000000 but its shards' tensors hold",
    ),
    "a value holding ESC": (
        {"foo": "x\x1b[2J"},
        "metadata.foo 'x\\x1b[2J' holds the control character U+001B",
    ),
    "a key holding U+202E": ({"a\u202e": 1}, "metadata key 'a\\u202e' holds the invisible bidi"),
    "a nested value holding a newline": (
        {"foo": {"b": ["ok", "y\n"]}},
        "metadata.foo.b[1] 'y\\n' holds the control character U+000A",
    ),
}


@pytest.mark.parametrize("case", TWENTY_THIRD_METADATA)
def test_a_shard_indexs_totals_and_metadata_text_are_checked(sharded, tmp_path, capsys, case):
    """Found by the twenty-third round: metadata.total_parameters was never compared while
    total_size is held to the shards, and an unknown metadata key holding ESC and a terminal's
    codes passed. total_parameters (save_pretrained's num_parameters()) is at most the values
    the shards hold (a persistent buffer is saved but not counted, so fewer is allowed); every
    key and text of the metadata is printable."""
    model, index, data = _copy(sharded, "safetensors", tmp_path)
    added, said = TWENTY_THIRD_METADATA[case]
    data["metadata"] = {**data["metadata"], **added}
    index.write_text(json.dumps(data))
    capsys.readouterr()
    refused(_profile_argv(model, tmp_path), tmp_path / "in", capsys, (f"{index}: ", said))


def test_a_shard_indexs_own_totals_and_another_tools_keys_load(sharded, tmp_path):
    """What the checks above leave alone: the totals save_pretrained writes (total_parameters
    with a tied weight saved once, in both indexes) and another tool's printable key."""
    for kind in ("safetensors", "bin"):
        index = json.loads((sharded[kind] / INDEXES[kind]).read_text())
        assert set(index["metadata"]) == {"total_parameters", "total_size"}
    model, index, data = _copy(sharded, "safetensors", tmp_path)
    data["metadata"]["mergekit_version"] = "0.0.4"
    # Fewer parameters than stored values: what a model with a persistent buffer writes.
    data["metadata"]["total_parameters"] -= 512
    index.write_text(json.dumps(data))
    assert models.build(str(model), seq_len=16).num_blocks == 1


# Tensor names inside a weight file as one line shows them: (the name of an extra tensor in a
# BERT's model.safetensors, what the line says of it).
TENSOR_NAMES = {
    "ESC and a terminal's colour code": ("bert.x\x1b[31m", "(e.g. 'bert.x\\x1b[31m')"),
    "U+202E": ("bert.x\u202e", "(e.g. 'bert.x\\u202e')"),
    "5000 characters": ("bert." + "x" * 5000, "(e.g. 'bert.xxx"),
}


@pytest.mark.parametrize("case", TENSOR_NAMES)
def test_tensor_names_are_quoted_with_escapes(tmp_path, capsys, case):
    """Found by the twenty-third round: a safetensors tensor named 'bert.x\\x1b[31m' was
    printed raw in the error line (the terminal turned the rest of it red; a name can rewrite
    the line). Names of a weight file's tensors are quoted with escapes, as the shard index's
    are, and a long one cut visibly."""
    from safetensors.torch import load_file, save_file

    name, said = TENSOR_NAMES[case]
    model = _family_checkpoint(tmp_path / "in" / "model", "bert")
    tensors = load_file(model / "model.safetensors")
    tensors[name] = torch.zeros(1)
    save_file(tensors, model / "model.safetensors", metadata={"format": "pt"})
    capsys.readouterr()  # save_pretrained's progress bar
    cut = "… (5005 characters)" if len(name) > 200 else ""
    _profile_refused(model, tmp_path, capsys, ("weights of the embeddings and blocks", said, cut))


def test_a_sharded_checkpoint_and_a_link_to_a_shard_still_load(sharded, tmp_path):
    """Both shard indexes as save_pretrained writes them build, and a shard that is a link to
    a regular file elsewhere (the Hugging Face cache's layout) is a shard."""
    for kind in ("safetensors", "bin"):
        assert models.build(str(sharded[kind]), seq_len=16).num_blocks == 1
    model, _, data = _copy(sharded, "safetensors", tmp_path)
    shard = model / data["weight_map"][KEY]
    blob = shard.rename(tmp_path / "blob")
    shard.symlink_to(blob)
    assert models.build(str(model), seq_len=16).num_blocks == 1


# ------------------------------------------------------------ pytorch_model.bin (nineteenth round)


@pytest.mark.parametrize("sharded_bin", [False, True], ids=["pytorch_model.bin", "bin shards"])
def test_a_pytorch_model_bin_is_held_to_the_dtypes_safetensors_is(
    sharded, tmp_path, capsys, sharded_bin
):
    """Found by the nineteenth round: float weights stored as int32 in pytorch_model.bin were
    cast to float without a word (exit 0); in model.safetensors they are refused. The state
    dict is read weights-only, memory-mapped, and held to the same dtype check."""
    from safetensors.torch import load_file

    model = tmp_path / "in" / "model"
    name = "bert.embeddings.LayerNorm.weight"
    if sharded_bin:
        model, _, data = _copy(sharded, "bin", tmp_path)
        file = model / data["weight_map"][name]
        tensors = torch.load(file, weights_only=True)
    else:
        _family_checkpoint(model, "bert")
        tensors = load_file(model / "model.safetensors")
        (model / "model.safetensors").unlink()
        file = model / "pytorch_model.bin"
    tensors[name] = torch.ones_like(tensors[name], dtype=torch.int32)
    torch.save(tensors, file)
    capsys.readouterr()
    said = f"{file}: tensor {name} is stored as I32 but the model's is floating (float32)"
    refused(_profile_argv(model, tmp_path), tmp_path / "in", capsys, said)


def test_a_pytorch_model_bin_that_is_no_state_dict_is_one_line(tmp_path, capsys):
    """What the weights-only loader reads but is no state dict (a list) is named as such."""
    model = _family_checkpoint(tmp_path / "in" / "model", "bert")
    (model / "model.safetensors").unlink()
    torch.save([torch.ones(2)], model / "pytorch_model.bin")
    capsys.readouterr()
    said = f"{model / 'pytorch_model.bin'}: a pickled list, not a state dict"
    refused(_profile_argv(model, tmp_path), tmp_path / "in", capsys, said)


# ------------------------------------------------------------- the task head (nineteenth round)

# (family, the tensor damaged, "shrink" its dimension 0 to 16 / "narrow" dimension 1 to 16 /
# "drop" it, what the one line says after the weights file)
NOT_THE_HEAD = {
    "bert pooler": ("bert", "bert.pooler.dense.weight", "shrink", "holds bert.pooler.dense."),
    "roberta classifier.dense": ("roberta", "classifier.dense.weight", "shrink", "holds classi"),
    "electra classifier.dense": ("electra", "classifier.dense.weight", "shrink", "holds classi"),
    "distilbert pre_classifier": ("distilbert", "pre_classifier.weight", "shrink", "holds pre_"),
    "vit classifier's hidden size": ("vit", "classifier.weight", "narrow", "holds classifier."),
    "vit final norm missing": ("vit", "vit.layernorm.weight", "drop", "lacks 1 weights outside"),
    "gpt2 final norm missing": ("gpt2", "transformer.ln_f.weight", "drop", "lacks 1 weights out"),
    "llama final norm missing": ("llama", "model.norm.weight", "drop", "lacks 1 weights outside"),
}


@pytest.mark.parametrize("case", NOT_THE_HEAD)
def test_only_the_task_heads_tensors_start_fresh(tmp_path, capsys, case):
    """Found by the nineteenth round: a BERT pooler of the wrong shape was "sized for another
    number of labels" and replaced by random weights (exit 0), as was any misshapen or
    missing tensor of the head layer (a final norm). Only the task head's tensors start
    fresh when missing, and only its output projection when sized for other labels; the
    rest is damaged weights, refused like a misshapen block tensor."""
    from safetensors.torch import load_file, save_file

    family, name, damage, said = NOT_THE_HEAD[case]
    model = _family_checkpoint(tmp_path / "in" / "model", family)
    tensors = load_file(model / "model.safetensors")
    if damage == "drop":
        del tensors[name]
    else:
        cut = (slice(0, 16),) if damage == "shrink" else (slice(None), slice(0, 16))
        tensors[name] = tensors[name][cut].contiguous()
    save_file(tensors, model / "model.safetensors", metadata={"format": "pt"})
    capsys.readouterr()
    fragment = (f"{model}: model.safetensors {said}", name)
    refused(_profile_argv(model, tmp_path), tmp_path / "in", capsys, fragment)


# (damage, the file's tensor of the 1-block checkpoint, what the one line says of it); the
# model's names are vit.layers.0.attention.o_proj.weight, vit.layers.0.mlp.fc1.weight.
RENAMED_ON_LOADING = {
    "missing": ("encoder.layer.0.attention.output.dense.weight", "lacks 1 weights outside"),
    "nan": ("encoder.layer.0.intermediate.dense.weight", "holds NaN or infinite values in"),
    "extra": ("encoder.layer.1.attention.attention.query.bias", "holds 1 weights of the"),
}


@pytest.mark.parametrize("family", ["vit", "deit"])
@pytest.mark.parametrize("damage", RENAMED_ON_LOADING)
def test_a_weight_files_refusal_names_the_files_tensor(tmp_path, family, damage):
    """Found by the sixty-fourth round: transformers 5 loads a ViT file's
    vit.encoder.layer.N.attention.output.dense.weight into vit.layers.N.attention.o_proj, and
    a tensor missing, extra or holding NaN was named by the model's name, which the file
    does not hold. Each line now names the file's own tensor."""
    from safetensors.torch import load_file, save_file

    name, said = RENAMED_ON_LOADING[damage]
    model = _family_checkpoint(tmp_path / "model", family)
    tensors = load_file(model / "model.safetensors")
    key = f"{family}.{name}"
    if damage == "missing":
        del tensors[key]
    elif damage == "nan":
        tensors[key][0, 0] = math.nan
    else:
        tensors[key] = torch.zeros(32)
    save_file(tensors, model / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(InputFileError) as refusal:
        models.build(str(model), task="classification")
    assert f"model.safetensors {said}" in str(refusal.value)
    assert key in str(refusal.value), str(refusal.value)


def test_the_label_sized_tensors_are_each_familys_output_projection():
    """`Family.labels` names exactly the tensors whose shape depends on num_labels in each
    family's transformers classifier (built on the meta device at 2 and 3 labels): those
    alone start fresh when a checkpoint is for other labels."""
    for family, spec in models.FAMILIES.items():
        _, config_class, sizes = FAMILY_CHECKPOINTS[family]
        model_class = getattr(transformers, spec.models["classification"])
        shapes = []
        for labels in (2, 3):
            config = getattr(transformers, config_class)(**sizes, num_labels=labels)
            config.pad_token_id = 0
            with torch.device("meta"):
                named = model_class(config).named_parameters()
                shapes.append({k: tuple(p.shape) for k, p in named})
        sized = {k for k in shapes[0] if shapes[0][k] != shapes[1][k]}
        expected = {k for k in shapes[0] if any(k.startswith(f"{m}.") for m in spec.labels)}
        assert sized == expected, family


def test_a_head_for_other_labels_starts_fresh_in_every_family(tmp_path, caplog):
    """The fresh-head path itself, for each family's classifier saved with 2 labels and built
    for 5: one warning naming the output projection's tensors."""
    for family, spec in models.FAMILIES.items():
        _, config_class, sizes = FAMILY_CHECKPOINTS[family]
        config = getattr(transformers, config_class)(**{**sizes, "pad_token_id": 0}, num_labels=2)
        torch.manual_seed(0)
        getattr(transformers, spec.models["classification"])(config).save_pretrained(
            tmp_path / family
        )
        caplog.clear()
        with caplog.at_level("WARNING", logger="pipeplan.models"):
            seq = models.build(str(tmp_path / family), num_labels=5, task="classification")
        assert seq.num_labels == 5
        (record,) = [r for r in caplog.records if r.name == "pipeplan.models"]
        assert "sized for another number of labels" in record.getMessage(), family
        assert all(m in record.getMessage() for m in spec.labels), record.getMessage()


def _classifier_checkpoint(directory: Path, family: str, labels: int) -> Path:
    """`family`'s classifier of `labels` labels (pad_token_id 0: decoders pool on it), saved."""
    _, config_class, sizes = FAMILY_CHECKPOINTS[family]
    config = getattr(transformers, config_class)(**{**sizes, "pad_token_id": 0}, num_labels=labels)
    torch.manual_seed(0)
    model_class = getattr(transformers, models.FAMILIES[family].models["classification"])
    model_class(config).save_pretrained(directory)
    return directory


def _edit_labels(model: Path, **labels) -> None:
    """config.json's num_labels/id2label/label2id replaced by `labels` (the others dropped)."""
    config = json.loads((model / "config.json").read_text())
    config = {k: v for k, v in config.items() if k not in ("num_labels", "id2label", "label2id")}
    (model / "config.json").write_text(json.dumps({**config, **labels}))


@pytest.mark.parametrize("family", list(models.FAMILIES))
def test_a_head_of_other_rows_than_config_json_labels_is_refused(tmp_path, capsys, family):
    """Found by the twenty-first round: a BERT folder whose config.json said num_labels 1 (no
    id2label, as transformers 5 saves it) beside classifier.weight of shape [2, 32] ran with
    the data's 2 classes and exported 2 labels without a word. The head's rows are held to the
    file's label count before the data's count sizes the model: one line naming config.json,
    num_labels and the tensor."""
    model = _classifier_checkpoint(tmp_path / "in" / "model", family, labels=2)
    _edit_labels(model, num_labels=1)
    capsys.readouterr()  # save_pretrained's progress bar
    key = f"{models.FAMILIES[family].labels[0]}.weight"
    where = (
        f"{model / 'config.json'}: num_labels is 1 but model.safetensors holds {key} of shape [2,"
    )
    _profile_refused(model, tmp_path, capsys, where)


def test_a_head_of_other_rows_than_id2label_is_refused(tmp_path, capsys):
    """Found by the twenty-first round (as above), the labels named by id2label: 3 names beside
    a head of 2 rows."""
    model = _classifier_checkpoint(tmp_path / "in" / "model", "bert", labels=2)
    names = ["a", "b", "c"]
    id2label = dict(enumerate(names))
    _edit_labels(model, id2label=id2label, label2id={n: i for i, n in id2label.items()})
    capsys.readouterr()
    where = f"{model / 'config.json'}: id2label has 3 labels but model.safetensors holds "
    _profile_refused(model, tmp_path, capsys, where + "classifier.weight of shape [2, 32]")


def test_a_run_whose_data_agrees_with_the_head_but_not_config_json_is_refused(tmp_path, capsys):
    """Found by the twenty-first round: the reproduction, through run: num_labels 1 beside a
    head of 2 rows and data of 2 classes was prepared (and ran, and exported 2 labels)."""
    from text_data import bert_checkpoint, make_tokenizer, reviews, write_jsonl

    model = bert_checkpoint(tmp_path / "in" / "nl1", num_labels=2)
    _edit_labels(model, num_labels=1)
    tok = make_tokenizer(tmp_path / "in" / "tok")
    data = write_jsonl(tmp_path / "in" / "two.jsonl", reviews(30, seed=4))
    argv = ["run", "--model", str(model), "--data", str(data), "--tokenizer", str(tok)]
    argv += ["--seq-len", "12", "--nproc", "1", "--prepare-only"]
    capsys.readouterr()
    where = f"{model / 'config.json'}: num_labels is 1 but model.safetensors holds classifier"
    refused([*argv, "--runs-dir", str(tmp_path / "runs")], tmp_path / "in", capsys, where)
    assert not (tmp_path / "runs").exists()


def test_a_head_as_config_json_counts_it_still_builds(tmp_path):
    """The twenty-first round's check refuses no consistent folder: a one-label head (the
    regression switch) with num_labels 1 builds for data of 3 classes, its head fresh
    (`test_a_head_for_other_labels_starts_fresh_in_every_family`). Built as its own 1-label
    head it is refused since the thirty-fourth round (a regression head pipeplan does not
    train: `test_a_config_of_one_label_is_refused_when_it_sizes_the_head`)."""
    model = _classifier_checkpoint(tmp_path / "one", "bert", labels=1)
    assert models.build(str(model), num_labels=3).num_labels == 3
    with pytest.raises(
        InputFileError, match="1 label: transformers makes a 1-label head a regression head"
    ):
        models.build(str(model))


# A config of one label, as num_labels or as an id2label of one name (which transformers reads
# as num_labels 1), and the words naming it.
ONE_LABEL = {
    "num_labels 1": ({"num_labels": 1}, "num_labels is 1"),
    "id2label of one name": (
        {"id2label": {"0": "only"}, "label2id": {"only": 0}},
        "id2label names 1 label",
    ),
}


def _one_label_config(directory: Path, labels: dict) -> Path:
    """A config-only BERT folder (no weights) whose labels are `labels`."""
    directory.mkdir(parents=True)
    config = {"model_type": "bert", "num_hidden_layers": 2, "hidden_size": 32}
    config |= {"num_attention_heads": 2, "intermediate_size": 64, "vocab_size": 100}
    config |= {"max_position_embeddings": 32, **labels}
    (directory / "config.json").write_text(json.dumps(config))
    return directory


@pytest.mark.timeout(60)
@pytest.mark.parametrize("case", ONE_LABEL, ids=str)
def test_a_config_of_one_label_is_refused_when_it_sizes_the_head(tmp_path, capsys, case):
    """Found by the thirty-fourth round: a config folder of num_labels 1 was profiled as a
    1-class classifier (exit 0) while `--num-labels 1` was refused ("greater than or equal to
    2"), and `run` refused the model later. transformers makes a 1-label head a regression
    head, which pipeplan does not train: `profile`, and a run whose data takes its classes
    from the model (synth-text), now refuse it in one line naming config.json and the field;
    with --num-labels the config's count is replaced and it profiles."""
    labels, said = ONE_LABEL[case]
    model = _one_label_config(tmp_path / "in" / "m", labels)
    where = f"{model / 'config.json'}: {said}: transformers makes a 1-label head a regression"
    _profile_refused(model, tmp_path, capsys, (where, "--num-labels N"))
    argv = ["run", "--model", str(model), "--data", "synth-text", "--init", "random"]
    argv += ["--nproc", "1", "--prepare-only", "--runs-dir", str(tmp_path / "runs")]
    refused(argv, tmp_path / "in", capsys, where)
    assert not (tmp_path / "runs").exists()
    assert models.build(str(model), init="random", num_labels=3).num_labels == 3


@pytest.mark.timeout(60)
@pytest.mark.parametrize("case", ["num_labels 1", "id2label of one name"])
def test_a_profile_of_a_one_label_classifier_is_refused(tmp_path, capsys, case):
    """Found by the thirty-fourth round (as above), in a profile: one of a 1-label
    classifier, as such a config made before, was planned. It is refused naming the field."""
    doc = json.loads(json.dumps(PROFILE))
    model = doc["model"]
    assert model.get("task", "classification") == "classification"
    model["num_labels"] = 1
    for key in ("num_labels", "id2label", "label2id"):
        model["config"].pop(key, None)
    if case == "num_labels 1":
        model["config"]["num_labels"] = 1
    else:
        model["config"] |= {"id2label": {"0": "only"}, "label2id": {"only": 0}}
    (tmp_path / "in").mkdir()
    path = tmp_path / "in" / "one.json"
    path.write_text(json.dumps(doc))
    out = tmp_path / "p.json"
    argv = ["plan", "--profile", str(path), "--devices-per-node", "2", "--out", str(out)]
    said = ONE_LABEL[case][1]
    where = f"one.json: invalid profile: field 'model': config: {said}: transformers makes"
    refused(argv, tmp_path / "in", capsys, where)
    assert not out.exists()


def test_every_familys_checkpoint_passes_its_own_shapes(tmp_path):
    """The shapes config.json implies are those transformers writes: an unedited checkpoint
    of every family builds (the eighteenth round's check refuses none of them)."""
    for family in FAMILY_CHECKPOINTS:
        seq = models.build(str(_family_checkpoint(tmp_path / family, family)))
        assert seq.family == family


# The nineteenth round's generation_config.json beside a GPT-2 checkpoint (128 tokens), whose
# weights from_pretrained loads, and the one line after "generation_config.json: ".
GENERATION_BESIDE_WEIGHTS = {
    # Was "model: cannot build the model from its config (TypeError: 'list' object is not a
    # mapping)".
    "a list": ("[1, 2]", "a config must be a JSON object"),
    # Was "model: cannot load model.safetensors (RecursionError: …)".
    "nested too deeply": ('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested too deeply"),
    # Were profiled (exit 0) and exported as found.
    "the round's four values": (
        '{"max_length": -5, "temperature": NaN, "num_beams": 0, "eos_token_id": 99999}',
        "temperature is nan; a config value is a finite number",
    ),
    "eos_token_id beyond the vocabulary": (
        '{"eos_token_id": 99999}',
        "eos_token_id 99999 is not a token id of its vocabulary (0..127)",
    ),
}


@pytest.mark.parametrize("case", GENERATION_BESIDE_WEIGHTS)
def test_a_checkpoints_generation_config_is_named_not_its_config_or_weights(tmp_path, capsys, case):
    """Found by the nineteenth round: from_pretrained read a decoder checkpoint's
    generation_config.json itself; a list was blamed on "its config", JSON nested too deeply on
    model.safetensors, and NaN or an eos id outside the vocabulary (the seventeenth round's
    check of config.json's) was profiled. One line naming generation_config.json."""
    text, fragment = GENERATION_BESIDE_WEIGHTS[case]
    model = _family_checkpoint(tmp_path / "in" / "model", "gpt2")
    (model / "generation_config.json").write_text(text)
    capsys.readouterr()  # save_pretrained's progress bar
    _profile_refused(model, tmp_path, capsys, f"{model / 'generation_config.json'}: {fragment}")


def test_transformers_never_reads_the_generation_config_itself(tmp_path, monkeypatch):
    """Found by the nineteenth round: from_pretrained read generation_config.json with none of
    config.json's checks. pipeplan hands it the file it checked, so transformers' own reader
    is never called, and the model keeps the file's settings:

        models.build("ckpt/").hf_model.generation_config.max_length   # 50, as the file says
    """
    model = _family_checkpoint(tmp_path / "model", "gpt2")
    found = {"max_length": 50, "eos_token_id": 5}
    (model / "generation_config.json").write_text(json.dumps(found))

    def unread(*args, **kwargs):
        raise AssertionError("transformers read generation_config.json itself")

    monkeypatch.setattr(transformers.GenerationConfig, "from_pretrained", unread)
    generation = models.build(str(model)).hf_model.generation_config
    assert (generation.max_length, generation.eos_token_id) == (50, 5)


def test_profile_of_a_config_without_weights_still_draws_random_ones(tmp_path):
    """A folder with config.json alone profiles as before (nothing to check)."""
    model = _checkpoint(tmp_path / "model", 2)
    (model / "model.safetensors").unlink()
    argv = ["profile", str(model), "--out", str(tmp_path / "p.json"), "--micro-batch-sizes", "1"]
    assert cli.main([*argv, "--repeats", "1", "--warmup", "0"]) == 0


@pytest.mark.parametrize("kind", ["weights", "profile"])
def test_a_file_of_the_wrong_kind_as_model_says_what_it_is(tmp_path, capsys, kind):
    """Found by the seventeenth round: a .safetensors file as MODEL gave `cannot read
    (UnicodeDecodeError …)` and a pipeplan profile `model_type None is not a supported
    encoder…`; neither said the argument is not a config.json or model directory."""
    if kind == "weights":
        given = _checkpoint(tmp_path / "in" / "model", 2) / "model.safetensors"
        fragments = ("model.safetensors: a weight file, not a config.json", "this file's folder")
    else:
        given = tmp_path / "in" / "p.json"
        given.parent.mkdir(parents=True)
        given.write_text(json.dumps(PROFILE))
        fragments = ("p.json: a pipeplan file (it has schema_version), not a model's config",)
    capsys.readouterr()  # save_pretrained's progress bar
    argv = ["profile", str(given), "--out", str(tmp_path / "x.json")]
    refused(argv, tmp_path / "in", capsys, fragments)


def test_weights_of_more_blocks_than_config_json_says_are_refused(tmp_path):
    """config.json says 2 layers, model.safetensors holds 4 blocks: from_pretrained drops
    blocks 2 and 3 as unexpected keys, with the encoder or without its task model's prefix.
    (`run` reports the InputFileError as one line, exit code 2, like every loader error.)"""
    for name, cls in (("cls", None), ("base", transformers.BertModel)):
        model = _checkpoint(tmp_path / name, 4, *([cls] if cls else []))
        config = json.loads((model / "config.json").read_text())
        (model / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 2}))
        with pytest.raises(InputFileError) as error:
            models.build(str(model))
        message = str(error.value)
        assert str(model) in message and "config.json" in message, message
        assert "encoder.layer.2." in message and "32 weights" in message, message


def test_another_tasks_head_and_an_unused_pooler_are_what_fine_tuning_leaves_out(tmp_path):
    """A masked-LM checkpoint (head `cls.*`, no pooler) fine-tunes as a classifier; RoBERTa's
    pretrained pooler goes unused by its classifier: neither is refused."""
    from safetensors.torch import load_file, save_file

    models.build(str(_checkpoint(tmp_path / "mlm", 2, transformers.BertForMaskedLM)))
    config = transformers.RobertaConfig(**{**BERT, "max_position_embeddings": 70})
    model = tmp_path / "roberta"
    transformers.RobertaModel(config).save_pretrained(model)  # with a pooler
    # As roberta-base ships: every key under `roberta.`, the pooler's included.
    weights = load_file(model / "model.safetensors")
    assert "pooler.dense.weight" in weights
    save_file({f"roberta.{k}": v for k, v in weights.items()}, model / "model.safetensors")
    assert models.build(str(model)).num_blocks == 2


@pytest.mark.multiprocess
@pytest.mark.timeout(200)
def test_a_module_dataset_without_targets_stops_the_run_at_its_first_epoch(tmp_path, capsys):
    """Found by the ninth round: a `module:function` causal-LM dataset whose labels are all
    −100 trained its epochs to exit 0 with no loss (a module's dataset is not read whole before
    the run, as a text file is). Every step's record is on every rank: at the end of an epoch
    without a loss they all stop, naming the data. The sixty-second round: a set the data
    check reads whole is refused there; one longer than its scan (TARGET_SCAN_ITEMS) is
    warned of, then stopped here, the line naming the data by --data and its epoch from 1
    (it said "at the end of epoch 1: data 'ignored': no training sample of epoch 0")."""
    import cli

    (tmp_path / "lm_data.py").write_text(
        "import torch\n"
        "class Ignored(torch.utils.data.Dataset):\n"
        "    def __init__(self, n, kept=False): self.n, self.kept = n, kept\n"
        "    def __len__(self): return self.n\n"
        "    def __getitem__(self, i):\n"
        "        ids = torch.randint(1, 500, (16,), generator=torch.Generator().manual_seed(i))\n"
        "        return ids, ids.clone() if self.kept else torch.full((16,), -100)\n"
        "def ignored(seed=0):\n"
        "    return Ignored(5000), Ignored(8, kept=True)\n"
    )
    profile = tmp_path / "gpt.json"
    fast = ["--micro-batch-sizes", "1,2", "--warmup", "0", "--repeats", "1"]
    argv = ["profile", "gpt2-tiny", "--seq-len", "16", "--task", "causal-lm", *fast]
    assert cli.main([*argv, "--out", str(profile)]) == 0
    capsys.readouterr()
    argv = ["run", "--model", "gpt2-tiny", "--task", "causal-lm", "--seq-len", "16"]
    argv += ["--data", f"{tmp_path / 'lm_data.py'}:ignored", "--profile", str(profile)]
    argv += ["--nproc", "1", "--epochs", "2", "--global-batch", "8", "--max-steps-per-epoch", "2"]
    assert cli.main([*argv, "--runs-dir", str(tmp_path / "runs"), "--name", "x"]) == 2
    warning, *lines = capsys.readouterr().err.strip().splitlines()
    assert "train items 0 to 4095 and 4999 (read before training) have no next" in warning
    assert len(lines) == 1 and lines[0].startswith("pipeplan: error: "), lines
    assert "at the end of epoch 1: data '" in lines[0], lines[0]
    assert "lm_data.py:ignored': no training sample of epoch 1 has a next token" in lines[0]
    assert not (tmp_path / "runs" / "x" / "model").exists()  # it trained nothing to export


# --------------------------------------------------------------------------- flags and magnitudes


def test_threads_beyond_this_process_s_cores_are_refused_at_the_flag(tmp_path, capsys):
    """Tenth round: `profile --threads 1000` failed inside OpenMP ("Thread creation failed",
    exit 1). The limit is the cores this process may use; that many is still accepted."""
    from pipeplan.inputs import ProfileRequest
    from pipeplan.spawn import cpu_cores

    cores = cpu_cores()
    argv = ["profile", "vit-digits", "--out", str(tmp_path / "p.json"), "--threads"]
    refused([*argv, str(cores + 1)], tmp_path, capsys, ("--threads", f"limit of {cores}"))
    assert ProfileRequest(model="vit-digits", out="p.json", threads=cores).threads == cores


@pytest.mark.parametrize("sizes", ["1,1", "4,2,4"])
def test_a_micro_batch_size_given_twice_is_refused_not_merged(tmp_path, capsys, sizes):
    """Tenth round: `--micro-batch-sizes 1,1` timed one size silently. The Python API's list
    is held to the same rule."""
    from pipeplan.inputs import ProfileRequest

    argv = ["profile", "vit-digits", "--out", str(tmp_path / "p.json")]
    refused([*argv, "--micro-batch-sizes", sizes], tmp_path, capsys, "is given twice")
    with pytest.raises(ValueError, match="size 2 is given twice"):
        ProfileRequest(model="vit-digits", out="p.json", micro_batch_sizes=[2, 1, 2])


def _plan_file(tmp_path: Path, nodes: int, devices_per_node: int) -> Path:
    """A plan for 1 × 2 devices, its cluster then widened to `nodes` × `devices_per_node`
    (the phases' ranks stay valid): planning thousands of devices is not what is tested."""
    small = tmp_path / "small.json"
    vit = str(shipped_profile("vit-digits", "cpu"))
    argv = ["plan", "--profile", vit, "--devices-per-node", "2", "--epochs", "1"]
    assert cli.main([*argv, "--samples", "1438", "-o", str(small)]) == 0
    doc = json.loads(small.read_text())
    doc["inputs"]["cluster"] |= {"nodes": nodes, "devices_per_node": devices_per_node}
    path = tmp_path / f"plan-{nodes}x{devices_per_node}.json"
    path.write_text(json.dumps(doc))
    return path


def test_a_plan_s_world_is_held_to_the_limits_of_nproc(tmp_path, capsys):
    """Tenth round: `run --plan P` for 1024 × 1024 devices prepared a run of 1,048,576 ranks
    (--nproc left out is the plan's). Taken from the plan it meets --nproc's bounds: at most
    MAX_RANKS for a torchrun prepare, this host's cores for a local run; 4096 is prepared."""
    from pipeplan.formats.run import MAX_RANKS
    from pipeplan.spawn import cpu_cores

    cores = cpu_cores()
    big, wide, most = (
        _plan_file(tmp_path, *shape) for shape in ((2049, 2), (1, cores + 1), (2048, 2))
    )
    capsys.readouterr()  # the plans' progress
    runs = tmp_path / "runs"
    runs.mkdir()
    argv = ["run", "--plan", str(big), "--runs-dir", str(runs), "--name", "a"]
    fragments = ("--nproc", f"limit of {MAX_RANKS}", f"taken from {big}")
    refused([*argv, "--prepare-only"], tmp_path, capsys, fragments)
    refused(["run", "--nproc", "4097", "--prepare-only"], tmp_path, capsys, "limit of 4096")
    argv = ["run", "--plan", str(wide), "--runs-dir", str(runs), "--name", "b"]
    refused(argv, tmp_path, capsys, f"--nproc {cores + 1} is beyond the limit of {cores}")
    argv = ["run", "--plan", str(most), "--runs-dir", str(runs), "--name", "c", "--prepare-only"]
    assert cli.main(argv) == 0, capsys.readouterr().err
    assert load(RunConfig, runs / "c" / "run.json").nproc == MAX_RANKS


# ----------------------------------------------------------------------- thirteenth round

# Each beside `--plan` was accepted, exit 0, run.json recording it next to a plan that does
# otherwise (`--freeze 0,1,2` beside a plan scheduled 0,5,7).
BESIDE_A_PLAN = [
    (["--freeze", "0,1,2"], "--freeze"),
    (["--freeze", "0,5,7"], "--freeze"),  # the plan's own: given, it is still the plan's
    (["--freeze", "none"], "--freeze"),
    (["--freeze", "alpha", "--alpha", "0.9"], "--freeze"),
    (["--alpha", "0.9"], "--alpha"),
    (["--freeze-every", "5"], "--freeze-every"),
    (["--cache-budget", "1MiB"], "--cache-budget"),
    (["--cache"], "--cache"),
    (["--no-cache"], "--no-cache"),
]


@pytest.fixture(scope="module")
def alpha_plan(tmp_path_factory) -> Path:
    """A plan of α = 0.5 over 3 epochs on 2 vit-digits ranks: phases frozen 0, 5, 7, cached
    where it pays, its cluster's cache budget the default 1 GiB."""
    path = tmp_path_factory.mktemp("alpha") / "rp.json"
    argv = ["plan", "--profile", str(shipped_profile("vit-digits", "cpu")), "--nodes", "1"]
    argv += ["--devices-per-node", "2", "--epochs", "3", "--freeze", "alpha", "--alpha", "0.5"]
    assert cli.main([*argv, "--global-batch", "64", "--samples", "1438", "--out", str(path)]) == 0
    return path


@pytest.mark.parametrize(
    ("flags", "flag"), BESIDE_A_PLAN, ids=[" ".join(f) for f, _ in BESIDE_A_PLAN]
)
def test_freeze_and_cache_flags_beside_a_plan_are_refused(
    alpha_plan, tmp_path, capsys, flags, flag
):
    """Thirteenth round: a plan fixes its freeze schedule and its cache; a flag that would set
    them is refused beside --plan, as --device-memory is, naming the flag."""
    run = ["run", "--model", "vit-digits", "--plan", str(alpha_plan), "--prepare-only"]
    run += ["--runs-dir", str(tmp_path / "runs"), "--name", "x"]
    capsys.readouterr()
    refused([*run, *flags], tmp_path, capsys, f"{flag} means nothing with --plan")


def test_a_run_of_a_plan_follows_its_schedule_and_cache(alpha_plan, tmp_path, capsys):
    """Left out, the freeze schedule and the cache are the plan's: run.json records the
    plan's 0,5,7, its cache and its budget (it recorded --freeze auto, AutoFreeze's gradient
    criterion then freezing where the plan had no phase). A run.json edited away from the
    plan is refused before any rank starts (`check_plan`), naming what it contradicts; a
    freeze point no phase plans is an error naming the plan, never solved afresh."""
    from executor.planning import RunPlanner
    from pipeplan.formats import Horizon, Plan

    runs = tmp_path / "runs"
    run = ["run", "--model", "vit-digits", "--plan", str(alpha_plan), "--prepare-only"]
    assert cli.main([*run, "--runs-dir", str(runs), "--name", "a"]) == 0, capsys.readouterr()
    saved = load(RunConfig, runs / "a" / "run.json")
    plan = load(Plan, alpha_plan)
    assert (saved.freeze, saved.freeze_list) == ("list", [0, 5, 7])
    assert saved.freeze_list == plan.inputs.freeze.frozen_layers
    assert (saved.cache, saved.cache_budget_bytes) == (True, plan.inputs.cluster.cache_budget_bytes)
    for edit, words in (
        ({"freeze": "auto"}, "the run freezes by auto, but the plan's phases follow the freeze "),
        ({"freeze": "0,1,2"}, "the run freezes by 0,1,2, but the plan's phases follow "),
        ({"cache": False}, "the run's cache is off, but the plan was made with it on"),
        ({"cache_budget_bytes": 1 << 20}, "the run's cache budget is 1048576 bytes, but the "),
    ):
        edited = RunConfig(**{**saved.model_dump(), **edit})
        with pytest.raises(BadArgumentError, match=words):
            RunPlanner.from_config(edited)
    planner = RunPlanner.from_config(saved)
    horizon = Horizon(samples=1408, epochs=2, previous=None, cache=True)
    assert planner(5, horizon).layout == plan.phases[1].layout
    with pytest.raises(BadArgumentError, match=r"rp.json: the run reached 3 frozen layers, which"):
        planner(3, horizon)


# ------------------------------------------------------------------------ numeric flags


def _numeric_flags(kind: type) -> list[tuple[str, str]]:
    """(command, flag) for every flag of type `kind` the models derive, so that a new field
    is covered too; `demo --epochs` is the one numeric parameter of a command's own."""
    from pipeplan.inputs import PlanRequest, ProfileRequest
    from pipeplan.options import _bare, model_options

    commands = {"profile": ProfileRequest, "preview": PlanRequest, "run": RunConfig}
    flags = [
        (command, option.spelling)
        for command, model in commands.items()
        for option in model_options(model)
        if option.unit is None and _bare(option.info.annotation)[0] is kind
    ]
    return flags + ([("demo", "--epochs")] if kind is int else [])


def _argv(command: str, tmp_path: Path) -> list[str]:
    """What `command` needs before a flag of its is read; outputs under tmp_path."""
    return {
        "profile": ["profile", "vit-digits", "--out", str(tmp_path / "p.json")],
        "preview": ["preview", "--profile", str(shipped_profile("vit-digits", "cpu"))],
        "run": ["run", "--prepare-only", "--runs-dir", str(tmp_path)],
        # --pretrain-only: a flag the number is read before is refused beside it, so a number
        # read wrongly fails on that refusal rather than running the whole demo.
        "demo": ["demo", "--runs-dir", str(tmp_path), "--pretrain-only"],
    }[command]


INT_FLAGS = _numeric_flags(int)
SPELLINGS = {**DIGITS, "plus two": "+2", "two underscores": "1_000"}


def test_every_integer_flag_the_fourteenth_round_named_is_covered():
    named = "seed nproc epochs global-batch samples micro-batches stages max-steps-per-epoch"
    named += " warmup-steps checkpoint-every freeze-every threads repeats warmup seq-len"
    assert {f"--{name}" for name in named.split()} <= {flag for _, flag in INT_FLAGS}


@pytest.mark.parametrize("spelling", SPELLINGS.values(), ids=SPELLINGS.keys())
@pytest.mark.parametrize(("command", "flag"), INT_FLAGS, ids=[" ".join(f) for f in INT_FLAGS])
def test_an_integer_flag_is_ascii_digits_like_an_integer_in_a_list(
    tmp_path, capsys, command, flag, spelling
):
    """Fourteenth round: `--epochs 1_0` ran 10 epochs and `--epochs +2` two (pydantic's lax
    reading of typer's text), while comma lists (`int_list`) refused both. Every integer
    flag is now digits 0-9, refused in one line naming the flag."""
    argv = [*_argv(command, tmp_path), flag, spelling]
    refused(argv, tmp_path, capsys, (flag, repr(spelling), "digits 0-9"))


@pytest.mark.parametrize(("command", "flag"), _numeric_flags(float))
def test_a_float_flag_refuses_an_underscore_between_digits(tmp_path, capsys, command, flag):
    """Fourteenth round: `float()` reads "1_0.5" as 10.5, as `int()` reads "1_0" as 10."""
    argv = [*_argv(command, tmp_path), flag, "1_0.5"]
    refused(argv, tmp_path, capsys, (flag, "'1_0.5'", "without '_'"))


def test_integer_and_float_flags_still_take_plain_numbers(tmp_path, capsys):
    """The refusals above are of spellings only: digits, a leading '-' (refused by the
    field's range, which the message names) and exponents read as before."""
    from pipeplan.formats.base import whole_number
    from pipeplan.options import number

    spelt = [whole_number(t) for t in ("10", "0", "-3", "1_0", "+2", "", "-", "--3", "007")]
    assert spelt == [10, 0, -3, None, None, None, None, None, None]
    assert number("2.5e-3", float, "--lr") == 2.5e-3
    assert number("12", int, "--epochs") == 12
    for command in ("preview", "demo"):
        argv = [*_argv(command, tmp_path), "--epochs", "-1"]
        refused(argv, tmp_path, capsys, "--epochs: Input should be greater than or equal to 1")
    assert cli.main([*_argv("preview", tmp_path), "--epochs", "3", "--global-batch", "64"]) == 0


# Every kind of value a flag takes: an integer, a float, a size, a bandwidth, a list, a name,
# a path, and a command's argument.
SPACED = {
    "integer": (["preview", "--profile", "{P}", "--nodes"], "2 "),
    "float": (["preview", "--profile", "{P}", "--alpha"], " 0.3"),
    "float, --flag=value": (["preview", "--profile", "{P}", "--alpha= 0.3"], None),
    "size": (["preview", "--profile", "{P}", "--device-memory"], "16GiB "),
    "bandwidth": (["preview", "--profile", "{P}", "--intra-bw"], "5GB/s "),
    "list": (["profile", "vit-digits", "--out", "{OUT}", "--micro-batch-sizes"], " 1"),
    "name": (["run", "--prepare-only", "--runs-dir", "{T}", "--name"], "x "),
    "path": (["preview", "--profile"], " {P}"),
    "schema name": (["schema"], "profile "),
}


def _named(text: str, names: dict[str, str]) -> str:
    """`_named("{P}", {"{P}": "x.json"})` → "x.json": a test's placeholders filled in."""
    for key, value in names.items():
        text = text.replace(key, value)
    return text


@pytest.mark.parametrize("argv, value", SPACED.values(), ids=SPACED.keys())
def test_a_value_with_space_around_it_is_refused_by_its_flag(tmp_path, capsys, argv, value):
    """Found by the seventeenth round: `--alpha ' 0.3'`, `--nodes '2 '` (left as found by the
    sixteenth), `--micro-batch-sizes ' 1'`, `--device-memory '16GiB '`, `--intra-bw '5GB/s '`
    and `schema 'profile '` were read as if the space were not there. A value with space
    around it is a quoting mistake: refused in one line naming the flag."""
    names = {"{P}": str(shipped_profile("vit-digits", "cpu")), "{T}": str(tmp_path)}
    names["{OUT}"] = str(tmp_path / "p.json")
    argv = [_named(a, names) for a in [*argv, *([value] if value is not None else [])]]
    flag = argv[-1].split("=")[0] if value is None else argv[-2]
    where = "the argument" if not flag.startswith("--") else f"{flag}:"
    refused(argv, tmp_path, capsys, (where, "has space around it", "quoting mistake"))


# A number and its unit with space between them, as each kind of unit flag takes it, and the
# same value written without.
INNER_SPACES = {"bytes": ("1 GiB", "1GiB"), "bandwidth": ("10 Gbit/s", "10Gbit/s")}


def test_every_size_and_rate_flag_takes_space_between_a_number_and_its_unit():
    """Found by the twenty-first round: `plan --cache-budget '1 GiB'` was accepted while other
    values with spaces are refused; no flag had been checked. The rule (README, Errors): space
    around a value is a quoting mistake, space inside one is kept, so every flag of a size or
    a rate, of every command, reads `1 GiB` as `1GiB`, and a value spaced around is still
    refused by the flag."""
    from pipeplan.inputs import PlanRequest, ProfileRequest
    from pipeplan.options import model_options

    flags = {}
    for model in (ProfileRequest, PlanRequest, RunConfig):
        for option in model_options(model):
            if option.unit is not None:
                flags[f"{model.__name__} {option.spelling}"] = option
    spellings = {name.split()[1] for name in flags}
    assert {"--cache-budget", "--device-memory", "--intra-bw", "--inter-bw"} <= spellings
    for name, option in flags.items():
        spaced, plain = INNER_SPACES[option.flag.unit]
        assert option.parse(spaced) == option.parse(plain), name
        with pytest.raises(BadArgumentError, match="has space around it"):
            option.parse(f"{plain} ")


@pytest.mark.parametrize("flag, value", [("--device-memory", "16 GiB"), ("--inter-bw", "5 GB/s")])
def test_a_unit_flag_with_inner_space_previews_as_without(tmp_path, capsys, flag, value):
    """The same through the command line (`_check_spaces` refuses only space around a
    value): `preview` with `16 GiB` prints what `16GiB` does."""
    profile = str(shipped_profile("vit-digits", "cpu"))
    argv = ["preview", "--profile", profile, "--epochs", "3", "--nodes", "2", flag]
    assert cli.main([*argv, value]) == 0
    spaced = capsys.readouterr().out
    assert cli.main([*argv, value.replace(" ", "")]) == 0
    assert capsys.readouterr().out == spaced


LEADING_ZEROS = {
    "--global-batch": ("0256", "'0256' has a leading zero: read as 256, though in octal it is 174"),
    "--stages": ("02", "'02' has a leading zero; write 2"),
    "--seed": ("-0", "'-0' has a sign on 0; write 0"),
    "--micro-batch-sizes": ("4,08", "'08' has a leading zero; write 8"),
    "--boundaries": ("0,05", "'05' has a leading zero; write 5"),
    "--freeze-schedule": ("0,03", "'03' has a leading zero; write 3"),
    "--alpha": ("00.3", "'00.3' has a leading zero; write 0.3"),
    "--device-memory": ("016GiB", "'016GiB' has a leading zero; write 16GiB"),
    "--intra-bw": ("05GB/s", "'05GB/s' has a leading zero; write 5GB/s"),
}


@pytest.mark.parametrize("flag", LEADING_ZEROS)
def test_a_number_with_a_leading_zero_is_refused_saying_how_it_reads(tmp_path, capsys, flag):
    """Found by the seventeenth round: `--global-batch 0256` planned a batch of 256 and
    `--stages 02` two stages; C, shells and JSON read such a spelling as octal or refuse it.
    Every integer flag (`whole_number`), integer list (`int_list`), float and size or rate
    refuses it, saying how it reads."""
    value, message = LEADING_ZEROS[flag]
    profile = str(shipped_profile("vit-digits", "cpu"))
    argv = {
        "--micro-batch-sizes": ["profile", "vit-digits", "--out", str(tmp_path / "p.json")],
        "--seed": ["run", "--prepare-only", "--runs-dir", str(tmp_path)],
    }.get(flag, ["preview", "--profile", profile, "--epochs", "3"])
    refused([*argv, flag, value], tmp_path, capsys, (flag, message))


@pytest.mark.parametrize("command", ["preview", "run"])
def test_a_plus_sign_on_a_float_flag_is_refused_like_on_an_integer(tmp_path, capsys, command):
    """Found by the seventeenth round: `--alpha +0.3` was read as 0.3, while `--epochs +2`
    is refused (the fourteenth round). A number is spelt without '+', float or integer."""
    argv = [*_argv(command, tmp_path), "--alpha", "+0.3"]
    refused(argv, tmp_path, capsys, ("--alpha", "'+0.3'", "digits 0-9"))


@pytest.mark.parametrize("alpha", ["5e-324", "1e-320", "1e-7"])
@pytest.mark.parametrize("command", ["preview", "run"])
def test_an_alpha_too_small_to_decide_anything_is_refused(tmp_path, capsys, command, alpha):
    """Found by the seventeenth round: `--alpha 5e-324` (subnormal, inside (0, 1)) planned
    "frozen 0" in every epoch: 1 − α is 1.0 in floats. α is at least 1e-06, stated."""
    argv = [*_argv(command, tmp_path), "--alpha", alpha]
    if command == "preview":
        argv += ["--epochs", "3"]
    refused(argv, tmp_path, capsys, ("--alpha", "at least 1e-06", f"(got {float(alpha)})"))


@pytest.mark.parametrize("flag", ["--device-memory", "--cache-budget"])
@pytest.mark.parametrize("size", ["1.5B", "0.5B", "100.25"])
def test_a_size_in_bytes_is_a_whole_number(tmp_path, capsys, flag, size):
    """Found by the seventeenth round: `--device-memory 1.5B` and `--cache-budget 0.5B` were
    cut to 1 and 0 bytes. A size in bytes is whole; one of a larger unit rounds to bytes."""
    from pipeplan.cluster import parse_bytes

    argv = ["preview", "--profile", str(shipped_profile("vit-digits", "cpu")), flag, size]
    refused(argv, tmp_path, capsys, (flag, repr(size), "a size in bytes is a whole number"))
    assert parse_bytes("1.5KiB") == 1536 and parse_bytes("0.0015MB") == 1500
    assert parse_bytes("1e3") == parse_bytes("1000B") == parse_bytes("16 B") + 984


@pytest.mark.parametrize(
    "flag, value, fragment",
    [
        ("--epochs", "9" * 5000, "--epochs"),
        # Also was "File name too long": the list was first tried as a trajectory file's name.
        # Quoted as typed, not as 10**100 (the fiftieth round).
        ("--freeze-schedule", "0," + "9" * 5000, "has 5,000 digits; it is beyond every limit"),
    ],
    ids=["integer flag", "integer list"],
)
def test_an_integer_of_thousands_of_digits_is_refused_by_its_range(
    tmp_path, capsys, flag, value, fragment
):
    """Python's int() refuses more than 4300 digits with a ValueError: `--epochs 999…9` (5000
    digits) gave a traceback once integer flags were read as text. Beyond any limit, it is
    refused by the field's range in one line."""
    from executor.planning import shipped_profile

    profile = str(shipped_profile("vit-digits", "cpu"))
    epochs = [] if flag == "--epochs" else ["--epochs", "3"]
    refused(["preview", "--profile", profile, *epochs, flag, value], tmp_path, capsys, fragment)


@pytest.mark.parametrize(
    "command, flag, value",
    [("run", "--dropout", "-0"), ("run", "--weight-decay", "-0.0"), ("preview", "--alpha", "-0e3")],
)
def test_a_signed_zero_on_a_float_flag_is_refused_like_on_an_integer(
    tmp_path, capsys, command, flag, value
):
    """Found by the eighteenth round: `run --dropout -0` was read as 0, while `--seed -0` is
    refused (the seventeenth round). A zero is spelt without a sign, float or integer."""
    argv = [*_argv(command, tmp_path), flag, value]
    refused(argv, tmp_path, capsys, (flag, f"{value!r} has a sign on 0; write 0"))


def test_a_warmup_longer_than_the_run_is_refused(tmp_path, capsys):
    """Found by the eighteenth round: `run --warmup-steps 99999999999` was accepted; the
    learning rate would never reach --lr. The warm-up is at most the run's steps (here 3
    epochs of 2 capped steps); as long as the run is allowed (the peak at the last step)."""
    argv = [*_argv("run", tmp_path), "--model", "vit-digits", "--epochs", "3"]
    argv += ["--max-steps-per-epoch", "2", "--nproc", "1"]
    refused(
        [*argv, "--warmup-steps", "7"],
        tmp_path,
        capsys,
        ("--warmup-steps 7 is longer than the run: 3 epochs of 2 steps", "never reach --lr"),
    )
    assert cli.main([*argv, "--name", "fits", "--warmup-steps", "6"]) == 0


# (--freeze-every, what the one line says): on 3 epochs of 2 capped steps, 6 in all.
FREEZE_EVERY_DOES_NOTHING = {
    "past the run": ("999999999999", "is longer than the run: 3 epochs of 2 steps"),
    "one past the run": ("7", "is longer than the run: 3 epochs of 2 steps"),
    "the run's length": ("6", "is as long as the run: 3 epochs of 2 steps"),
}


@pytest.mark.parametrize("every", FREEZE_EVERY_DOES_NOTHING, ids=FREEZE_EVERY_DOES_NOTHING.keys())
def test_a_freeze_every_that_never_falls_within_an_epoch_is_refused(tmp_path, capsys, every):
    """Found by the nineteenth round: `run --freeze-every 999999999999` (and 89 on 88 steps)
    was accepted, exit 0, run.json recording it: --freeze auto decides at every epoch's end
    anyway, so a count that never falls within an epoch of the run did nothing, silently.
    Refused as a warm-up longer than the run is; a count that does fall within one runs."""
    argv = [*_argv("run", tmp_path), "--model", "vit-digits", "--epochs", "3"]
    argv += ["--max-steps-per-epoch", "2", "--nproc", "1"]
    value, fragment = FREEZE_EVERY_DOES_NOTHING[every]
    fragment = f"--freeze-every {value} {fragment}"
    refused([*argv, "--freeze-every", value], tmp_path, capsys, fragment)
    assert cli.main([*argv, "--name", "fits", "--freeze-every", "3"]) == 0
    # An epoch's length is what auto does anyway: accepted (an epoch's steps depend on the data).
    assert cli.main([*argv, "--name", "epoch", "--freeze-every", "2"]) == 0


@pytest.mark.parametrize("every", FREEZE_EVERY_DOES_NOTHING, ids=FREEZE_EVERY_DOES_NOTHING.keys())
def test_a_checkpoint_every_of_the_run_s_length_or_more_is_refused(tmp_path, capsys, every):
    """Found by the twenty-second round: `run --checkpoint-every 100000` (or the run's 8
    steps) was accepted silently and wrote no periodic checkpoint, while such a
    --freeze-every is refused. Refused alike, naming the flag and the run's steps; a count
    within the run (an epoch's length too: its last step checkpoints) runs."""
    argv = [*_argv("run", tmp_path), "--model", "vit-digits", "--epochs", "3"]
    argv += ["--max-steps-per-epoch", "2", "--nproc", "1"]
    value, fragment = FREEZE_EVERY_DOES_NOTHING[every]
    fragment = f"--checkpoint-every {value} {fragment}"
    refused([*argv, "--checkpoint-every", value], tmp_path, capsys, fragment)
    assert cli.main([*argv, "--name", "fits", "--checkpoint-every", "5"]) == 0
    assert cli.main([*argv, "--name", "epoch", "--checkpoint-every", "2"]) == 0


def test_a_freeze_schedule_of_integers_is_the_list_whatever_files_are_here(
    tmp_path, capsys, monkeypatch
):
    """Found by the twenty-seventh round: `--freeze-schedule 4` read a file named 4 when the
    current directory held one (its schedule 0×3, speedup 1.00×, where the list gives 4×3),
    so the same command meant two things. Now integers and commas are always the list; the
    file is named as a path, ./4."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "4").write_text("[0, 0, 0]")
    vit = str(shipped_profile("vit-digits", "cpu"))
    argv = ["preview", "--profile", vit, "--devices-per-node", "2", "--epochs", "3"]
    assert cli.main([*argv, "--freeze-schedule", "4"]) == 0
    assert "the list given; frozen layers per epoch: 4×3" in capsys.readouterr().out
    assert cli.main([*argv, "--freeze-schedule", "./4"]) == 0
    assert "frozen layers per epoch: 0×3" in capsys.readouterr().out


@pytest.fixture
def bert_tiny_folder(tmp_path, monkeypatch) -> Path:
    """The current directory holds a transformers folder named like the built-in bert-tiny
    (a clone of prajjwal1/bert-tiny, say), of other sizes than the built-in's."""
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "bert-tiny"
    folder.mkdir()
    transformers.BertConfig(**BERT).save_pretrained(folder)
    return folder


def test_a_built_in_name_beside_a_folder_of_that_name_is_the_built_in(
    bert_tiny_folder, tmp_path, capsys
):
    """Found by the twenty-seventh round: with a folder bert-tiny/ in the current directory,
    `run --model bert-tiny` built the built-in (as `profile` did) but held its profile, the
    shipped one or one just made, to the folder's config.json, and refused both, advising a
    command that made the same profile again. Now a built-in name is the built-in everywhere
    (`presets.config_path`): the run is prepared with one warning naming ./bert-tiny, which
    names the folder (`--init` beside the name means nothing, as without the folder)."""
    argv = ["run", "--model", "bert-tiny", "--data", "synth-text", "--nproc", "1", "--epochs"]
    argv += ["1", "--global-batch", "8", "--name", "a", "--runs-dir", str(tmp_path / "runs")]
    assert cli.main([*argv, "--prepare-only"]) == 0
    warnings = [line for line in capsys.readouterr().err.splitlines() if "WARNING" in line]
    assert warnings == [
        "pipeplan: WARNING: bert-tiny is the built-in model, not the folder bert-tiny/ here: "
        "./bert-tiny names that folder"
    ]
    refused([*argv, "--init", "random", "--prepare-only"], tmp_path, capsys, "--init")


def test_a_folder_named_like_a_built_in_is_advised_as_a_path(bert_tiny_folder, tmp_path, capsys):
    """Found by the twenty-seventh round: the command a refusal advised to profile the folder
    ./bert-tiny was `pipeplan profile bert-tiny`, which profiles the built-in (a loop). Now it
    names the folder as ./bert-tiny."""
    shipped = str(shipped_profile("bert-tiny", "cpu"))
    argv = ["run", "--model", "./bert-tiny", "--init", "random", "--data", "synth-text"]
    argv += ["--nproc", "1", "--epochs", "1", "--global-batch", "8", "--profile", shipped]
    argv += ["--name", "a", "--runs-dir", str(tmp_path / "runs"), "--prepare-only"]
    refused(argv, tmp_path, capsys, "profile this model: pipeplan profile ./bert-tiny --seq-len")


@pytest.mark.parametrize("spelled", ["./bert-tiny", "bert-tiny/", "ABSOLUTE"])
def test_a_folder_named_like_a_built_in_has_no_shipped_profile(
    bert_tiny_folder, tmp_path, capsys, spelled
):
    """Found by the twenty-eighth round: the shipped profile was looked up by joining MODEL to
    the profiles' folder, so `--model ./bert-tiny` (which names the folder) got the built-in's
    profile and was refused for its hidden_size, `bert-tiny/` got none, and an absolute path
    read a `bert-tiny@cpu-1t.json` beside the folder as shipped. Now a path is a folder, never
    the built-in: no shipped profile, however it is spelled, and the line says so."""
    # A profile named like a shipped one beside the folder: an absolute MODEL found it.
    shutil.copy(shipped_profile("bert-tiny", "cpu"), tmp_path / "bert-tiny@cpu-1t.json")
    model = str(bert_tiny_folder) if spelled == "ABSOLUTE" else spelled
    argv = ["run", "--model", model, "--init", "random", "--data", "synth-text", "--nproc"]
    argv += ["1", "--epochs", "1", "--global-batch", "8", "--name", "a", "--runs-dir"]
    argv += [str(tmp_path / "runs"), "--prepare-only"]
    fragments = (
        f"no shipped profile for {model} on cpu (a path names a model folder: profiles ship "
        "for built-in names only); run `pipeplan profile " + model,
    )
    refused(argv, tmp_path, capsys, fragments)


@pytest.mark.parametrize("nproc", [1, 2])
def test_a_runs_refusals_suggest_one_profile_command_for_its_ranks(
    bert_tiny_folder, tmp_path, capsys, nproc
):
    """Found by the sixty-sixth round: a 2-rank run given another model's profile was told to
    profile without --nproc (a profile of no links, priced on the defaults and warned of), and
    a run without a profile to profile with --nproc 2 even on 1 rank. Both refusals suggest
    one command (`profile.profile_command`): --nproc N where N ≥ 2 ranks' links are measured,
    none for one rank."""
    argv = ["run", "--model", "./bert-tiny", "--init", "random", "--data", "synth-text"]
    argv += ["--nproc", str(nproc), "--epochs", "1", "--global-batch", "8", "--name", "a"]
    argv += ["--runs-dir", str(tmp_path / "runs"), "--prepare-only"]
    links = " --nproc 2" if nproc == 2 else ""
    command = "pipeplan profile ./bert-tiny --seq-len 64 --task classification --out P.json" + links
    refused(argv, tmp_path, capsys, f"run `{command}` and pass --profile P.json")
    other = ["--profile", str(shipped_profile("bert-tiny", "cpu"))]
    refused([*argv, *other], tmp_path, capsys, f"; profile this model: {command}")
    # Beside --plan, the profile alone would be refused next as another than the plan's
    # (the sixty-eighth round): the re-plan with it is said too.
    plan = tmp_path / "plan.json"
    shape = ["--devices-per-node", str(nproc), "--epochs", "1", "--global-batch", "8"]
    assert cli.main(["plan", *other, *shape, "--samples", "4096", "--out", str(plan)]) == 0
    capsys.readouterr()
    memory = format_bytes(load(Plan, plan).inputs.cluster.device_memory_bytes)
    replan = (
        f"; profile this model: {command}, then re-plan with it as {plan} was made (a plan is "
        f"priced with one profile): pipeplan plan --profile P.json --nodes 1 --devices-per-node "
        f"{nproc} --device-memory {memory} --epochs 1 --global-batch 8 --samples 4096 --freeze "
        "alpha --alpha 0.3 --out P-plan.json, and pass --profile P.json --plan P-plan.json"
    )
    refused([*argv, *other, "--plan", str(plan)], tmp_path, capsys, replan)


# `pipeplan plan` flags, each set a plan's re-plan must carry (`planning.replan_flags`).
_PLANNED_WITH = {
    "defaults": "",
    "none, no cache": "--freeze none --no-cache --device-memory 300MiB",
    "alpha": "--freeze alpha --alpha 0.25 --cache-budget 3MiB",
    "auto": "--freeze auto --alpha 0.125",
    "a list, pins": "--freeze-schedule 0,2,2 --stages 2 --micro-batches 2 --schedule gpipe",
    "boundaries": "--freeze-schedule 0,1,3 --boundaries 0,2,6 --device-memory 1000000000",
    "a trajectory": "--freeze-schedule TRAJECTORY",
}


@pytest.mark.parametrize("case", _PLANNED_WITH)
def test_a_suggested_replan_plans_what_the_plan_planned(tmp_path, capsys, case):
    """Left open by the forty-eighth session: the re-plan a profile mismatch beside --plan
    suggests (`_replan`) gave the cluster's size, epochs, batch and samples only: the plan's
    freeze schedule, cache, device memory and pins were dropped, and the run then followed
    another plan. Followed with the same profile, its flags plan the same inputs and phases
    (a trajectory file's schedule as the list it gave)."""
    from executor.planning import replan_flags

    trajectory = tmp_path / "t.json"
    trajectory.write_text(json.dumps({"frozen_layers": [0, 3, 4]}))
    given = _PLANNED_WITH[case].replace("TRAJECTORY", str(trajectory)).split()
    profile = str(shipped_profile("bert-tiny", "cpu"))
    common = ["--profile", profile, "--devices-per-node", "2", "--epochs", "3"]
    common += ["--global-batch", "8", "--samples", "4096"]
    first, second = tmp_path / "first.json", tmp_path / "second.json"
    assert cli.main(["plan", *common, *given, "--out", str(first)]) == 0
    planned = load(Plan, first)
    cfg = RunConfig(model="bert-tiny", data="synth-text", nproc=2, epochs=3, global_batch=8)
    flags = replan_flags(planned.inputs, cfg).split()
    assert cli.main(["plan", "--profile", profile, *flags, "--out", str(second)]) == 0, flags
    capsys.readouterr()
    again = load(Plan, second)
    if case == "a trajectory":
        assert planned.inputs.freeze.source == "trajectory"
        assert again.inputs.freeze.frozen_layers == planned.inputs.freeze.frozen_layers
        update = {"freeze": planned.inputs.freeze}
        again = again.model_copy(update={"inputs": again.inputs.model_copy(update=update)})
    assert again == planned


def test_a_plans_run_of_a_folder_without_a_profile_is_told_to_pass_the_plans(
    bert_tiny_folder, tmp_path, capsys
):
    """Found by the fifty-ninth round: `run --plan P --model FOLDER` without --profile was told
    to profile the folder and pass that profile, which the plan then refused as another (its
    sha256 differs): a second refusal after following the first. The line says to pass the
    profile the plan was made from."""
    plan = tmp_path / "plan.json"
    argv = ["plan", "--profile", str(shipped_profile("bert-tiny", "cpu")), "--devices-per-node"]
    assert cli.main([*argv, "1", "--epochs", "1", "--global-batch", "8", "--out", str(plan)]) == 0
    capsys.readouterr()
    argv = ["run", "--plan", str(plan), "--model", str(bert_tiny_folder), "--init", "random"]
    argv += ["--data", "synth-text", "--name", "a", "--runs-dir", str(tmp_path / "runs")]
    said = f"; pass the profile the plan {plan} was made from with --profile (its inputs.profile"
    refused([*argv, "--prepare-only"], tmp_path, capsys, ("no shipped profile for", said))


def test_a_profile_of_another_sequence_length_names_the_flag_then_a_plans_two_commands(
    tmp_path, capsys
):
    """Found by the sixty-eighth round: a run without --seq-len of a plan made from a profile
    at --seq-len 16 was told to profile at the run's 64 and pass that profile, which the plan
    then refused as another: neither line named the remedy, --seq-len 16. The line names the
    flag that makes the run feed the profile's input first; beside --plan, its other remedy
    is the profile and the re-plan together. Each remedy, followed, passes the checks."""
    shipped = shipped_profile("bert-tiny", "cpu")  # input (128,)
    argv = ["run", "--model", "bert-tiny", "--data", "synth-text", "--nproc", "1", "--epochs"]
    argv += ["1", "--global-batch", "8", "--runs-dir", str(tmp_path / "runs"), "--prepare-only"]
    said = f"give --seq-len 128 to match the shipped profile {shipped}, or profile that: "
    command = "pipeplan profile bert-tiny --seq-len 16 --task classification --out P.json"
    refused([*argv, "--seq-len", "16", "--name", "a"], tmp_path, capsys, (said + command,))
    assert cli.main([*argv, "--seq-len", "128", "--name", "a"]) == 0
    capsys.readouterr()

    plan = tmp_path / "plan.json"
    shape = ["--devices-per-node", "1", "--epochs", "1", "--global-batch", "8", "--samples"]
    assert cli.main(["plan", "--profile", str(shipped), *shape, "4096", "--out", str(plan)]) == 0
    capsys.readouterr()
    argv += ["--plan", str(plan)]
    refused([*argv, "--seq-len", "16", "--name", "b"], tmp_path, capsys, said + command)
    assert cli.main([*argv, "--seq-len", "16", "--name", "b"]) == 2
    line = capsys.readouterr().err
    # Never the profile alone: the re-plan with it too, and the run then passes both files.
    made = re.search(r"profile that: (.*?), then re-plan .*?: (.*?), and pass (.*)\n", line)
    profile, replan, passed = made.groups()
    assert profile == command and passed == "--profile P.json --plan P-plan.json"
    assert cli.main([*argv, "--seq-len", "128", "--name", "b"]) == 0
    capsys.readouterr()
    files = {"P.json": str(tmp_path / "P.json"), "P-plan.json": str(tmp_path / "P-plan.json")}
    cheap = ["--micro-batch-sizes", "1,2,4,8", "--warmup", "0", "--repeats", "1"]
    for made in (profile, replan):
        made = [files.get(word, word) for word in made.split()[1:]]
        assert cli.main([*made, *(cheap if made[0] == "profile" else [])]) == 0
    argv[-1] = files["P-plan.json"]
    given = ["--seq-len", "16", "--profile", files["P.json"], "--name", "c"]
    assert cli.main([*argv, *given]) == 0, capsys.readouterr().err


def test_a_shipped_profile_of_another_head_is_refused_not_used(tmp_path, capsys):
    """Found by the twenty-seventh round: a profile's head (num_labels) was never held to the
    head a run builds from its data. A shipped profile is held alike: vit-digits' (10
    classes) is refused for data of 249 (ids 0, 8, …, 248: 30,831 weights more than its
    1,590,666-weight model's 1 %), naming it and the command that profiles the run's head,
    rather than pricing a head the run does not have."""
    module = tmp_path / "three.py"
    module.write_text(
        "import torch\n"
        "from executor.data import TaskData, TensorPairs\n"
        "def load():\n"
        "    x, y = torch.zeros(32, 1, 8, 8), torch.arange(32) * 8\n"
        "    return TaskData('three', TensorPairs(x, y), TensorPairs(x[:8], y[:8]))\n"
    )
    argv = ["run", "--model", "vit-digits", "--data", f"{module}:load", "--nproc", "1"]
    argv += ["--epochs", "1", "--global-batch", "8", "--runs-dir", str(tmp_path / "runs")]
    fragments = (
        f"the shipped profile {shipped_profile('vit-digits', 'cpu')}: model.num_labels is 10, "
        "but this run builds a head of 249 outputs",
        "pipeplan profile vit-digits --task classification --num-labels 249 --out P.json",
    )
    refused([*argv, "--prepare-only"], tmp_path, capsys, fragments)


# ----------------------------------------------------------------------------- the 27th round

USER_DATA = """
import sys, warnings
import torch
class Pairs:
    def __init__(self, n, shape=()): self.n, self.shape = n, shape
    def __len__(self): return self.n
    def __getitem__(self, i):
        if not 0 <= i < self.n: raise IndexError(i)
        ids = torch.randint(5, 95, (128,), generator=torch.Generator().manual_seed(i))
        return ids, torch.tensor(i % 2).reshape(self.shape)
def warn():
    warnings.warn("user warning here")
    print("a line of its own", file=sys.stderr)
    return Pairs(64), Pairs(16)
def interrupt():
    raise KeyboardInterrupt
def interrupt_item():
    class Stops(Pairs):
        def __getitem__(self, i): raise KeyboardInterrupt
    return Stops(64), Stops(16)
def ctrl_c():
    import signal, time
    signal.raise_signal(signal.SIGINT)
    time.sleep(30)
def shaped():
    return Pairs(64, (1,)), Pairs(16, (1,))
class Mine(BaseException): pass
def custom():
    raise Mine("boom")
def genexit():
    raise GeneratorExit
def custom_item():
    class Raises(Pairs):
        def __getitem__(self, i): raise Mine("in item")
    return Raises(64), Raises(16)
def raw():
    import os
    os.write(2, b"raw fd2 line\\n")
    return 5
def raw_ok():
    import os
    os.write(2, b"raw fd2 line\\n")
    return Pairs(64), Pairs(16)
async def async_load():
    return Pairs(64), Pairs(16)
def returns_a_coroutine():
    return async_load()
def a_coroutine_as_the_train_set():
    async def train():
        return Pairs(64)
    return train(), Pairs(16)
async def async_generator():
    yield Pairs(64), Pairs(16)
def a_coroutine_in_a_task_data():
    from executor.data import TaskData
    async def held_out():
        return Pairs(16)
    return TaskData("mine", Pairs(64), held_out())
class AsyncItems(Pairs):
    async def __getitem__(self, i):
        return Pairs.__getitem__(self, i)
def async_items():
    return AsyncItems(64), Pairs(16)
def async_eval_items():
    return Pairs(64), AsyncItems(16)
class CoroutineParts(Pairs):
    def __init__(self, n, where, at=None): super().__init__(n); self.where, self.at = where, at
    def __getitem__(self, i):
        ids, label = Pairs.__getitem__(self, i)
        if self.at is not None and i != self.at:
            return ids, label
        async def part():
            return label
        if self.where == "label":
            return ids, part()
        if self.where == "in the input":
            return {"ids": ids, "mask": part()}, label
        return part(), label
def a_coroutine_label():
    return CoroutineParts(64, "label"), Pairs(16)
def a_coroutine_input():
    return CoroutineParts(64, "input"), Pairs(16)
def a_coroutine_in_the_input():
    return CoroutineParts(64, "in the input"), Pairs(16)
def a_coroutine_label_at_item_5():
    return CoroutineParts(64, "label", at=5), Pairs(16)
ODD_TENSORS = {
    "meta": lambda t: torch.empty_like(t, device="meta"),
    "sparse": lambda t: t.to_sparse(),
    "csr": lambda t: t.reshape(1, -1).to_sparse_csr(),
    "nested": lambda t: torch.nested.nested_tensor([t, t]),
    "quantized": lambda t: torch.quantize_per_tensor(t.float(), 0.1, 0, torch.qint8),
}
def _odd(values):
    import os
    part, kind = os.environ["ODD_PART"].split(",")  # "input,meta": the input made meta
    k = ("input", "label").index(part)
    values[k] = ODD_TENSORS[kind](values[k])
    return tuple(values)
class OddParts(Pairs):
    def __init__(self, n, at=None): super().__init__(n); self.at = at
    def __getitem__(self, i):
        values = list(Pairs.__getitem__(self, i))
        return values if self.at is not None and i != self.at else _odd(values)
def odd_train():
    return OddParts(64), Pairs(16)
def odd_eval():
    return Pairs(64), OddParts(16)
def odd_at_item_5():
    return OddParts(64, at=5), Pairs(16)
def odd_in_memory():
    from executor.data import TaskData, TensorPairs
    ids, labels = torch.randint(5, 95, (64, 128)), torch.arange(64) % 2
    return TaskData("mine", TensorPairs(*_odd([ids, labels])), TensorPairs(ids, labels))
"""


def _user_run(tmp_path: Path, function: str, *extra: str) -> list[str]:
    """`run --prepare-only` of bert-tiny (its shipped profile) on tmp_path/user_data.py's
    `function`."""
    (tmp_path / "user_data.py").write_text(USER_DATA)
    profile = shipped_profile("bert-tiny", "cpu")
    return [
        "run", "--prepare-only", "--model", "bert-tiny", "--data",
        f"{tmp_path / 'user_data.py'}:{function}", "--profile", str(profile), "--nproc", "1",
        "--global-batch", "8", "--runs-dir", str(tmp_path / "runs"), "--name", "u", *extra,
    ]  # fmt: skip


def test_the_warnings_of_user_data_code_are_pipeplan_warnings(tmp_path, capsys):
    """Found by the twenty-seventh round: `warnings.warn` in a `--data module:function`
    printed two raw lines (`/…/m.py:9: UserWarning: …` and the source line), and what it
    wrote to stderr came raw too. Each is one `pipeplan: WARNING:` line naming the data."""
    assert cli.main(_user_run(tmp_path, "warn")) == 0
    lines = capsys.readouterr().err.strip().splitlines()
    spec = f"data '{tmp_path / 'user_data.py'}:warn'"
    assert f"pipeplan: WARNING: {spec}: user_data.py:12: UserWarning: user warning here" in lines
    assert f"pipeplan: WARNING: {spec} wrote: a line of its own" in lines
    assert all(line.startswith("pipeplan: ") for line in lines), lines
    assert len([line for line in lines if spec in line]) == 2, lines


@pytest.mark.parametrize(
    "function, said",
    [
        ("interrupt", "the data function raised KeyboardInterrupt"),
        ("interrupt_item", "reading train item 0 raised KeyboardInterrupt"),
    ],
)
def test_a_keyboard_interrupt_raised_by_user_data_code_is_its_failure(
    tmp_path, capsys, function, said
):
    """Found by the twenty-seventh round: a data function raising KeyboardInterrupt exited 130
    with no line; it was made an interruption. The thirtieth round found that inconsistent
    with a rank, where since the twenty-eighth a KeyboardInterrupt raised by code is its
    failure, named: so it is in the launcher too (its Ctrl-C raises Interrupted, not a
    KeyboardInterrupt), one line, exit 2; a real Ctrl-C is still an interruption."""
    refused(_user_run(tmp_path, function), tmp_path / "runs", capsys, (said,))


@pytest.mark.timeout(60)
def test_ctrl_c_while_user_data_code_runs_is_an_interruption(tmp_path, capsys):
    """A SIGINT while the data function runs is the user's Ctrl-C: `pipeplan: interrupted`,
    130, as anywhere else."""
    assert cli.main(_user_run(tmp_path, "ctrl_c")) == 130
    assert capsys.readouterr().err.strip().splitlines() == ["pipeplan: interrupted"]


@pytest.mark.parametrize("task", [[], ["--task", "classification"]], ids=["by the data", "given"])
def test_a_label_of_shape_one_is_not_taken_for_token_ids(tmp_path, capsys, task):
    """Found by the twenty-seventh round: a module:function's labels of shape (1,) on a BERT
    said "task 'causal-lm' is not available for bert" (or, with --task classification, that
    they are token sequences for a decoder). A label is a scalar class index or token ids as
    long as the input: the shape is named as wrong."""
    fragments = ("user_data.py:shaped'", "label", "(1,)", "scalar class index")
    refused(_user_run(tmp_path, "shaped", *task), tmp_path / "runs", capsys, fragments)


# ----------------------------------------------------------------------------- the 28th round


@pytest.mark.parametrize(
    "function, said",
    [
        ("custom", "the data function raised Mine: boom"),
        ("genexit", "the data function raised GeneratorExit"),
        ("custom_item", "reading train item 0 raised Mine: in item"),
    ],
)
def test_a_base_exception_from_user_data_code_is_one_line(tmp_path, capsys, function, said):
    """Found by the twenty-eighth round: a data function raising a BaseException other than
    KeyboardInterrupt or SystemExit (GeneratorExit, a user `class E(BaseException)`) was a
    traceback, exit 1. It is one line naming the data and the exception, as an Exception
    from it is (`data._user_code`)."""
    refused(_user_run(tmp_path, function), tmp_path / "runs", capsys, said)


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "function, said",
    [
        ("async_load", "returned a coroutine"),
        ("returns_a_coroutine", "returned a coroutine"),
        ("a_coroutine_as_the_train_set", "its train set is a coroutine"),
        ("async_generator", "returned an async generator"),
        ("a_coroutine_in_a_task_data", "its eval set is a coroutine"),
    ],
)
def test_an_async_data_function_is_refused_in_one_line(tmp_path, capsys, function, said):
    """Found by the thirty-third round: an `async def` data function (or a plain one returning
    a coroutine) was refused ("returned coroutine"), but the coroutine, dropped unawaited,
    made Python print "RuntimeWarning: coroutine 'load' was never awaited" and two lines
    more after the error line. Each coroutine it returns is closed before the refusal
    (`data._refuse_awaitables`), which says why: no event loop, make it a plain `def`."""
    import gc
    import warnings

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        refused(_user_run(tmp_path, function), tmp_path / "runs", capsys, (said, "plain `def`"))
        gc.collect()  # what Python warns of as a coroutine is collected
    assert [str(w.message) for w in seen] == []


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "function, said",
    [
        ("async_items", "train item 0 is a coroutine (its `__getitem__` is `async def`)"),
        ("async_eval_items", "eval item 0 is a coroutine (its `__getitem__` is `async def`)"),
        ("a_coroutine_label", "train item 0's label is a coroutine"),
        ("a_coroutine_input", "train item 0's input is a coroutine"),
        ("a_coroutine_in_the_input", "train item 0's input['mask'] is a coroutine"),
    ],
)
def test_an_item_that_is_or_holds_a_coroutine_is_refused_in_one_line(
    tmp_path, capsys, function, said
):
    """Found by the thirty-fifth round: an `async def __getitem__` (or a plain one returning
    a coroutine as an item's label or input) was refused ("train item 0 is coroutine, not an
    (input, label) pair"; "train labels must be int64 …, got coroutine"), but the coroutines,
    dropped unawaited, made Python print "RuntimeWarning: coroutine … was never awaited" and
    "Enable tracemalloc …" lines before and after the error line. An awaitable item, or one
    inside an item, is closed and refused in one line saying why (no event loop; a plain
    `def`), by every read of an item (`data.refuse_awaitable_item`)."""
    import gc
    import warnings

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        refused(_user_run(tmp_path, function), tmp_path / "runs", capsys, (said, "event loop"))
        gc.collect()  # what Python warns of as a coroutine is collected
    assert [str(w.message) for w in seen] == []


@pytest.mark.multiprocess
@pytest.mark.timeout(200)
def test_a_coroutine_in_an_item_a_rank_reads_is_refused_in_one_line(tmp_path, capsys):
    """Found by the thirty-fifth round: an item the launcher's checks do not read (item 5 of
    64: they read the first and last) whose label was a coroutine failed the rank with
    "TypeError: expected Tensor as element 7 in argument 0, but got coroutine", and the
    rank's log held Python's "RuntimeWarning: coroutine … was never awaited". A rank's reads
    as it trains refuse it as the checks do (`worker.Trainer.rows`), the coroutine closed."""
    argv = _user_run(tmp_path, "a_coroutine_label_at_item_5", "--epochs", "1")
    argv.remove("--prepare-only")
    assert cli.main(argv) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pipeplan: error: training failed"), lines
    assert "train item 5's label is a coroutine" in lines[0], lines[0]
    assert "event loop" in lines[0], lines[0]
    logs = tmp_path / "runs" / "u" / "logs"
    assert "never awaited" not in "".join(f.read_text() for f in logs.iterdir())


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "function, odd, said",
    [
        ("odd_train", "input,meta", "train item 0's input is a meta tensor (it holds no values)"),
        ("odd_train", "label,meta", "train item 0's label is a meta tensor"),
        ("odd_train", "input,sparse", "train item 0's input is a sparse tensor (sparse_coo)"),
        ("odd_train", "label,sparse", "train item 0's label is a sparse tensor (sparse_coo)"),
        ("odd_train", "input,csr", "train item 0's input is a sparse tensor (sparse_csr)"),
        ("odd_train", "input,nested", "train item 0's input is a nested tensor"),
        ("odd_train", "label,quantized", "train item 0's label is a quantized tensor (qint8)"),
        ("odd_eval", "input,meta", "eval item 0's input is a meta tensor"),
        ("odd_in_memory", "input,meta", "the train inputs are a meta tensor"),
        ("odd_in_memory", "label,sparse", "the train labels are a sparse tensor (sparse_coo)"),
    ],
)
def test_an_item_that_is_not_a_dense_cpu_tensor_is_refused_in_one_line(
    tmp_path, capsys, monkeypatch, function, odd, said
):
    """Found by the thirty-sixth round: a `--data module:function` item whose input or label
    was a meta-device or sparse tensor crashed the launcher's data checks (`.min()`,
    `.view()`, `nonzero()`) with a traceback, exit 1; a nested one too ("NestedTensorImpl
    doesn't support sizes"), and a CSR one ("do not have is_contiguous"). An item's input and
    label must be dense tensors on the CPU: anything else (meta, sparse, nested, quantized,
    on another device) is refused in one line naming the data, the split, the item and what
    it is (`data.refuse_odd_tensors`; `refuse_odd_pairs` for in-memory `TensorPairs`), with
    no warning of torch's before it."""
    import warnings

    monkeypatch.setenv("ODD_PART", odd)
    fragments = (f"{function}'", said, "must be dense tensors on the CPU")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        refused(_user_run(tmp_path, function), tmp_path, capsys, fragments)
    assert [str(w.message) for w in seen] == []


@pytest.mark.multiprocess
@pytest.mark.timeout(200)
def test_a_meta_tensor_in_an_item_a_rank_reads_is_refused_in_one_line(
    tmp_path, capsys, monkeypatch
):
    """Found by the thirty-sixth round, with the launcher's case: an item the launcher's
    checks do not read (item 5 of 64: they read the first and last) whose label is a meta
    tensor failed the rank with a torch error naming no data. A rank's reads as it trains
    refuse it as the checks do (`worker.Trainer.rows`, `data.refuse_odd_tensors`)."""
    monkeypatch.setenv("ODD_PART", "label,meta")
    argv = _user_run(tmp_path, "odd_at_item_5", "--epochs", "1")
    argv.remove("--prepare-only")
    assert cli.main(argv) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pipeplan: error: training failed"), lines
    assert "train item 5's label is a meta tensor" in lines[0], lines[0]
    assert "must be dense tensors on the CPU" in lines[0], lines[0]


def test_user_data_code_writing_to_descriptor_2_is_held(tmp_path, capfd):
    """Found by the twenty-eighth round: what a data function wrote to file descriptor 2
    (`os.write`, a C extension, a subprocess) came raw, before the error line. It is held
    (`data.descriptor_2_held`): dropped before a refusal, a `pipeplan: WARNING:` line naming
    the data after success."""
    refused(_user_run(tmp_path, "raw"), tmp_path / "runs", capfd, "returned int")
    assert cli.main(_user_run(tmp_path, "raw_ok")) == 0
    lines = capfd.readouterr().err.strip().splitlines()
    spec = f"data '{tmp_path / 'user_data.py'}:raw_ok'"
    assert f"pipeplan: WARNING: {spec} wrote: raw fd2 line" in lines
    assert all(line.startswith("pipeplan: ") for line in lines), lines


# ----------------------------------------------------------------------------- the 29th round

# vit-digits on the digits' training set, one epoch, nothing frozen: one phase to compare.
DIGITS_SHAPE = ["--global-batch", "64", "--samples", "1438", "--epochs", "1", "--freeze", "none"]


def _host_of_200mib(tmp_path: Path) -> Path:
    """The shipped vit-digits CPU profile on a host of 200 MiB: two ranks of 100 MiB each
    cannot hold the whole model with its activations (1x2), one of 200 MiB can."""
    vit = json.loads(shipped_profile("vit-digits", "cpu").read_text())
    path = tmp_path / "mem200.json"
    path.write_text(json.dumps(with_path(vit, ("device", "memory_bytes"), 200 << 20)))
    return path


def test_a_plan_for_a_cpu_hosts_devices_is_the_runs_own(tmp_path, capsys, monkeypatch):
    """Found by the twenty-ninth round: `plan --devices-per-node 2` on a CPU profile gave each
    device the host's whole memory (200 MiB; `run` gives each rank half), so `run --plan` ran
    1x2, a layout the run's own planner finds does not fit, and its records priced the run
    with a cluster it never had. The devices of a CPU node share the host's memory in plan,
    preview and run alike (`cluster.profile_device_memory`): the plan's cluster and layout
    are those the run plans itself."""
    from executor.planning import RunPlanner
    from pipeplan.formats import Horizon, Plan, dumps

    monkeypatch.chdir(tmp_path)
    profile = str(_host_of_200mib(tmp_path))
    flags = ["--profile", profile, "--devices-per-node", "2", *DIGITS_SHAPE]
    assert cli.main(["plan", *flags, "-o", "p.json"]) == 0
    plan = load(Plan, tmp_path / "p.json")
    assert plan.inputs.cluster.device_memory_bytes == 100 << 20
    capsys.readouterr()
    assert cli.main(["preview", *flags, "--json"]) == 0
    previewed = json.loads(capsys.readouterr().out)["plan"]["inputs"]["cluster"]
    assert previewed["device_memory_bytes"] == 100 << 20
    run = ["run", "--model", "vit-digits", "--data", "digits", "--profile", profile]
    run += ["--prepare-only", "--name"]
    assert cli.main([*run, "own", "--nproc", "2", *DIGITS_SHAPE[:2], "--epochs", "1"]) == 0
    assert cli.main([*run, "planned", "--plan", "p.json"]) == 0, capsys.readouterr().err
    own, planned = (
        RunPlanner.for_run(
            tmp_path / "runs" / n, load(RunConfig, tmp_path / "runs" / n / "run.json")
        )
        for n in ("own", "planned")
    )
    assert own.plan is None and planned.plan is not None
    assert dumps(planned.cluster) == dumps(own.cluster)  # what the run's records price with
    horizon = Horizon(samples=1408, epochs=1, previous=None, cache=False)
    layout = own(0, horizon).layout
    assert (layout.num_stages, layout.replicas) == (2, 1)  # 1x2 does not fit 100 MiB a rank
    assert planned(0, horizon).layout == layout


@pytest.mark.parametrize("made", ["--device-memory", "by an older pipeplan"])
def test_a_plan_giving_a_device_more_than_a_ranks_share_is_refused(
    tmp_path, capsys, monkeypatch, made
):
    """Found by the twenty-ninth round: `run --plan` ran a plan whose devices each had more
    memory than its node's ranks (here 200 MiB each, where 2 ranks share a host of 200 MiB:
    given with --device-memory, or each device the host's whole memory as plans were made
    before) without a word: layouts chosen for memory the ranks do not have. It is refused
    in one line naming the plan's field, a rank's share and what to re-plan with."""
    monkeypatch.chdir(tmp_path)
    profile = str(_host_of_200mib(tmp_path))
    plan = ["plan", "--profile", profile, "--devices-per-node", "2", *DIGITS_SHAPE, "-o", "p.json"]
    if made == "--device-memory":
        plan += ["--device-memory", "200MiB"]
    assert cli.main(plan) == 0, capsys.readouterr().err
    capsys.readouterr()
    if made == "by an older pipeplan":
        doc = json.loads((tmp_path / "p.json").read_text())
        doc["inputs"]["cluster"]["device_memory_bytes"] = 200 << 20
        (tmp_path / "p.json").write_text(json.dumps(doc))
    argv = ["run", "--model", "vit-digits", "--data", "digits", "--profile", profile]
    argv += ["--plan", "p.json", "--prepare-only", "--name", "a"]
    fragments = (
        f"p.json: the plan gives each device {200 << 20} bytes "
        "(inputs.cluster.device_memory_bytes)",
        f"node's 2 ranks has here: {100 << 20} bytes (the profile's device.memory_bytes "
        f"{200 << 20} shared by --devices-per-node 2)",
        "re-plan with --device-memory 100MiB or less",
    )
    refused(argv, tmp_path, capsys, fragments)


def test_a_plan_from_a_profile_of_a_larger_host_is_refused(tmp_path, capsys, monkeypatch):
    """Found by the thirty-second round: a profile claiming a host of 1 TiB (another machine's,
    or edited) made a plan giving each of 2 devices 512 GiB, and `run --plan` trained it on a
    host of a few GiB: the memory check compared the plan with the profile's host, not this
    one. A rank has no more than this host offers it (`cluster.rank_memory`), with a plan and
    without: the plan is refused in one line naming it, its memory and a rank's here, and a
    run of that profile without a plan plans for ranks of this host's share."""
    from executor.planning import RunPlanner

    monkeypatch.chdir(tmp_path)
    vit = json.loads(shipped_profile("vit-digits", "cpu").read_text())
    big = with_path(vit, ("device", "memory_bytes"), 1 << 40)
    (tmp_path / "big.json").write_text(json.dumps(with_path(big, ("device", "hostname"), "big")))
    plan = ["plan", "--profile", "big.json", "--devices-per-node", "2", *DIGITS_SHAPE]
    assert cli.main([*plan, "-o", "p.json"]) == 0, capsys.readouterr().err
    capsys.readouterr()
    here = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")  # as profiles record it
    run = ["run", "--model", "vit-digits", "--data", "digits", "--profile", "big.json"]
    run += ["--prepare-only", "--name"]
    fragments = (
        f"p.json: the plan gives each device {1 << 39} bytes",
        f"more than each of a node's 2 ranks has here: {here // 2} bytes (this host's memory "
        f"{here} shared by --devices-per-node 2)",
        f"re-plan with --device-memory {here // 2 >> 20}MiB or less",
    )
    refused([*run, "planned", "--plan", "p.json"], tmp_path, capsys, fragments)
    assert cli.main([*run, "own", "--nproc", "2", *DIGITS_SHAPE[:2], "--epochs", "1"]) == 0
    own = tmp_path / "runs" / "own"
    cluster = RunPlanner.for_run(own, load(RunConfig, own / "run.json")).cluster
    assert cluster.device_memory_bytes == here // 2


@pytest.mark.timeout(120)
@pytest.mark.parametrize("nproc", [1, 2])
def test_a_device_memory_beyond_this_host_is_refused(tmp_path, capsys, nproc):
    """Found by the thirty-third round: `run --device-memory 512GB` on a CPU host of 23 GiB was
    accepted, and the planner chose layouts for memory that does not exist. On CPU the ranks
    share the host: --device-memory for each of them beyond their share of its memory is
    refused in one line naming the flag's figure and the host's
    (`cluster.check_device_memory_flag`), before the run folder is made (a `pipeplan run`,
    all of whose ranks run here, refused before any starts); within it, it runs."""
    from pipeplan.cluster import format_bytes

    here = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")  # as profiles record it
    run = ["run", "--model", "vit-digits", "--data", "digits", "--nproc"]
    run += [str(nproc), "--runs-dir", str(tmp_path / "runs"), "--name"]
    too_much = here // nproc + (1 << 20)
    fragments = [f"--device-memory {format_bytes(too_much)} ", f"GiB of memory ({here} bytes)"]
    fragments.append("more than this machine's ")
    if nproc > 1:
        fragments += [f"for each of --nproc {nproc} ranks", f"{here // nproc >> 20}MiB or less"]
    refused([*run, "big", "--device-memory", str(too_much)], tmp_path, capsys, tuple(fragments))
    assert not (tmp_path / "runs" / "big").exists()
    fits = ["fits", "--device-memory", str(here // nproc >> 20 << 20), "--prepare-only"]
    assert cli.main([*run, *fits]) == 0


@pytest.mark.timeout(120)
def test_a_device_memory_prepared_for_torchrun_is_held_to_one_rank_of_this_host(tmp_path, capsys):
    """Found by the thirty-fifth round: `run --nproc 2 --device-memory 13GB --prepare-only`
    on a 23.5 GiB host (a run prepared for torchrun on 2 nodes, --nproc the world size) was
    refused "--device-memory 13GB for each of --nproc 2 ranks is more than this machine's
    23.5 GiB of memory, which they share", as if both ranks ran here: how many will is not
    known until torchrun starts them. It is held to the one rank that is sure (more than the
    whole host is still refused, saying no more than that); torchrun's ranks hold it to
    their node's LOCAL_WORLD_SIZE as they plan (`launch.host_ranks`)."""
    from pipeplan.cluster import format_bytes

    here = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")  # as profiles record it
    run = ["run", "--model", "vit-digits", "--data", "digits", "--prepare-only", "--nproc", "2"]
    run += ["--runs-dir", str(tmp_path / "runs"), "--name"]
    half = here // 2 + (1 << 20)  # more than 2 ranks' share: fits one rank of a node
    assert cli.main([*run, "two-nodes", "--device-memory", str(half)]) == 0
    saved = load(RunConfig, tmp_path / "runs" / "two-nodes" / "run.json")
    assert saved.device_memory_bytes == half
    capsys.readouterr()
    too_much = here + (1 << 20)
    said = f"--device-memory {format_bytes(too_much)} is more than this machine's "
    refused([*run, "big", "--device-memory", str(too_much)], tmp_path, capsys, said)
    assert "each of" not in capsys.readouterr().err
    assert not (tmp_path / "runs" / "big").exists()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("nproc", [1, 2])
def test_a_device_memory_beyond_the_ulimit_is_refused(tmp_path, nproc):
    """Found by the thirty-fifth round: `(ulimit -v 4000000; pipeplan run --nproc 1
    --device-memory 8GiB …)` on a 23 GiB host was accepted, the flag held to the host's
    physical memory only, and the planner planned for memory no rank could have. On CPU it
    is held to the least of the limits a rank is under (`models.memory_limits`): a `ulimit`
    is each rank's own, so more than it is refused whatever --nproc is, in one line naming
    it, before anything is written."""
    import resource

    from pipeplan.cluster import format_bytes

    cap, given = 4 << 30, 6 << 30  # torch starts within the cap; the flag is beyond it

    def capped() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (cap, resource.RLIM_INFINITY))

    runs = tmp_path / "runs"
    (runs / "old").mkdir(parents=True)
    (runs / "old" / "kept.txt").write_text("a run's file\n")
    before = snapshot(runs)
    argv = ["run", "--model", "vit-digits", "--nproc", str(nproc), "--epochs", "1"]
    argv += ["--device-memory", str(given), "--runs-dir", str(runs), "--name", "big"]
    done = subprocess.run(
        [sys.executable, "-m", "cli", *argv],
        cwd=Path(cli.__file__).parent,
        preexec_fn=capped,
        capture_output=True,
        text=True,
        timeout=50,
    )
    assert (done.returncode, done.stdout) == (2, ""), done
    assert done.stderr.splitlines() == [
        f"pipeplan: error: --device-memory {format_bytes(given)} is more than the 4.0 GiB of "
        f"memory ulimit -v allows each process ({cap} bytes)"
    ], done.stderr
    assert snapshot(runs) == before


def test_a_device_memory_beyond_a_cgroup_s_limit_is_refused(monkeypatch):
    """Found by the thirty-fifth round, with the `ulimit -v` case: a container's cgroup
    limit, which the ranks of this host share as they share its physical memory, did not
    hold --device-memory either. Each rank's share of it does; the refusal names it and
    what fits (`models.memory_limits` stood in for: no cgroup is needed)."""
    from pipeplan.cluster import HostRanks, rank_memory

    physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    limit = 4 << 30
    monkeypatch.setattr(
        models,
        "memory_limits",
        lambda: [
            (physical, physical, "its physical memory"),
            (limit, limit, "the cgroup's memory.max"),
        ],
    )
    profile = load(Profile, shipped_profile("vit-digits", "cpu"))
    cfg = RunConfig(name="g", model="vit-digits", nproc=2, device_memory_bytes=3 << 30)
    with pytest.raises(BadArgumentError) as refusal:
        rank_memory(cfg, profile)
    assert str(refusal.value) == (
        "--device-memory 3GiB for each of --nproc 2 ranks is more than the 4.0 GiB of memory "
        f"the cgroup's memory.max allows ({limit} bytes), which they share; give "
        "--device-memory 2GiB or less"
    )
    resume = HostRanks(2, "--nproc 2 ranks", Path("runs/g/run.json"), "resume with --nproc {k}")
    with pytest.raises(BadArgumentError) as refusal:
        rank_memory(cfg, profile, host=resume)
    assert str(refusal.value).endswith(
        "which they share; resume with --nproc 1, or start a new run with --device-memory "
        "2GiB or less"
    )
    assert rank_memory(cfg.model_copy(update={"device_memory_bytes": 2 << 30}), profile) == (
        2 << 30,
        None,
    )


def test_torchrun_ranks_hold_device_memory_to_their_node_s_ranks(tmp_path, monkeypatch):
    """Found by the thirty-fifth round: a torchrun rank (its entry's checks, its planning)
    held the run's --device-memory to all --nproc ranks on its host. It is held to the
    ranks torchrun starts on its node (LOCAL_WORLD_SIZE), named as run.json's, with what
    fits: fewer ranks a node, or a new run (`launch.host_ranks`)."""
    from executor.launch import host_ranks
    from pipeplan.cluster import format_bytes, rank_memory

    here = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    half = here // 2 + (1 << 20)
    cfg = RunConfig(name="t", model="vit-digits", nproc=2, device_memory_bytes=half)
    profile = load(Profile, shipped_profile("vit-digits", "cpu"))
    run = tmp_path / "runs" / "t"
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")  # 2 nodes × 1 rank
    assert rank_memory(cfg, profile, host=host_ranks(cfg, False, run)) == (half, None)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")  # 1 node × 2 ranks
    with pytest.raises(BadArgumentError) as refusal:
        rank_memory(cfg, profile, host=host_ranks(cfg, False, run, resume=True))
    assert str(refusal.value).startswith(
        f"{run / 'run.json'}: the run's --device-memory {format_bytes(half)} for each of the 2 "
        "ranks torchrun starts on this node (LOCAL_WORLD_SIZE=2) is more than this machine's "
    )
    assert str(refusal.value).endswith(
        "which they share; start torchrun with --nproc-per-node 1, or start a new run with "
        f"--device-memory {here // 2 >> 20}MiB or less"
    )


@pytest.mark.multiprocess
@pytest.mark.timeout(200)
def test_a_resume_names_the_run_s_own_device_memory(tmp_path, capsys):
    """Found by the thirty-fifth round: `run --resume runs/c --nproc 2` of a run trained with
    `--nproc 1 --device-memory 20GiB` on a 23.5 GiB host was refused "--device-memory 20GiB
    for each of --nproc 2 ranks …; give --device-memory 12052MiB or less", advising a flag
    that --resume refuses. The line names the run's own --device-memory (its run.json) and
    what works: a resume with the --nproc whose ranks it fits, or a new run; nothing of the
    run is changed."""
    from pipeplan.cluster import format_bytes

    here = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    half = here // 2 + (1 << 20)  # one rank's, not two ranks' share
    runs = tmp_path / "runs"
    argv = ["run", "--model", "vit-digits", "--nproc", "1", "--device-memory", str(half)]
    argv += ["--epochs", "1", "--max-steps-per-epoch", "2", "--global-batch", "16"]
    assert cli.main([*argv, "--runs-dir", str(runs), "--name", "c"]) == 0
    capsys.readouterr()
    fragments = (
        f"{runs / 'c' / 'run.json'}: the run's --device-memory {format_bytes(half)} for each "
        "of --nproc 2 ranks is more than this machine's ",
        "which they share; resume with --nproc 1, or start a new run with --device-memory "
        f"{here // 2 >> 20}MiB or less",
    )
    resume = ["run", "--resume", str(runs / "c"), "--nproc", "2", "--epochs", "2"]
    refused(resume, runs, capsys, fragments)


def test_a_device_memory_beyond_the_gpu_is_refused(monkeypatch):
    """The same on CUDA, where each rank has a GPU of its own: --device-memory more than the
    GPU's total memory (`torch.cuda.get_device_properties`) is refused, naming both; up to
    it, it is the rank's memory. By construction: no GPU is needed."""
    from types import SimpleNamespace

    from pipeplan.cluster import rank_memory

    gpu = 80 << 30
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(
        torch.cuda, "get_device_properties", lambda i: SimpleNamespace(total_memory=gpu)
    )
    vit = load(Profile, shipped_profile("vit-digits", "cpu"))
    profile = vit.model_copy(update={"device": vit.device.model_copy(update={"kind": "cuda"})})
    cfg = RunConfig(name="m", model="vit-digits", nproc=8, device_memory_bytes=gpu + 1)
    with pytest.raises(BadArgumentError) as refusal:
        rank_memory(cfg, profile)
    assert str(refusal.value) == (
        f"--device-memory {gpu + 1} is more than this host's GPU memory (80.0 GiB, {gpu} bytes)"
    )
    assert rank_memory(cfg.model_copy(update={"device_memory_bytes": gpu}), profile) == (gpu, None)


BERT_TINY_ON = [
    "preview",
    "--profile",
    str(shipped_profile("bert-tiny", "cpu")),
    "--devices-per-node",
]
NAMES_WHAT_WAS_GIVEN = {
    "boundaries": (
        ["4", "--boundaries", "0,1,2,3,4,5,6"],
        ("--boundaries 0,1,2,3,4,5,6 makes 6 stages, more than the 4 stages possible",),
    ),
    "stages": (
        ["2", "--stages", "2", "--micro-batches", "3", "--global-batch", "64"],
        ("(64 on 1; 1 replica for --stages 2)",),
    ),
    "boundaries-micro-batches": (
        ["4", "--boundaries", "0,3,6", "--micro-batches", "3", "--global-batch", "64"],
        ("1..2 replicas for the 2 stages of --boundaries 0,3,6)",),
    ),
    "boundaries-1f1b": (
        ["2", "--boundaries", "0,3,6", "--micro-batches", "1", "--schedule", "1f1b"],
        ("--micro-batches 1 is fewer than the 2 stages of --boundaries 0,3,6: 1F1B needs",),
    ),
    "missing-file": (
        ["2", "--freeze-schedule", "./nonexist"],
        ("--freeze-schedule: './nonexist' is no file (a freeze trajectory) and not the inline",),
    ),
}


@pytest.mark.parametrize("case", NAMES_WHAT_WAS_GIVEN)
def test_a_refusal_names_the_flag_given_not_one_derived_from_it(
    tmp_path, capsys, monkeypatch, case
):
    """Found by the twenty-ninth round: `--boundaries 0,1,…,6` alone was refused as "--stages
    6 is more than …", `--stages 2 --micro-batches 3` searched "1..2 stages", and
    `--freeze-schedule ./nonexist` "expected comma-separated integers". Each refusal names
    the flag the user gave, with its value, and what was searched for it."""
    monkeypatch.chdir(tmp_path)  # where ./nonexist is not
    extra, fragments = NAMES_WHAT_WAS_GIVEN[case]
    refused([*BERT_TINY_ON, *extra], tmp_path, capsys, fragments)


@pytest.mark.parametrize(
    "command, flag, value, example",
    [
        ("plan", "--intra-bw", "5", "read as bytes/s, it is 5B/s or 40bit/s"),
        ("preview", "--intra-bw", "0.5", "read as bytes/s, it is outside 1..1e+15 bytes/s"),
        ("plan", "--inter-bw", "100", "read as bytes/s, it is 100B/s or 800bit/s"),
        ("preview", "--inter-bw", "1e3", "read as bytes/s, it is 1kB/s or 8kbit/s"),
    ],
)
def test_a_rate_without_its_unit_is_refused(tmp_path, capsys, command, flag, value, example):
    """Found by the thirty-second round: `plan --intra-bw 5` planned for a link of 5 bytes/s
    (one device, the pipeline dropped, no word), while `--intra-bw 5GB` was refused as a size.
    A rate flag needs its unit: a bare number is refused in one line naming the flag, with
    the number read as bytes/s in bytes and in bits (`test_a_bare_rate_s_hint_reads_back`).
    A rate with its unit is read as before."""
    profile = str(shipped_profile("vit-digits", "cpu"))
    argv = [command, "--profile", profile, "--nodes", "2", "--devices-per-node", "2", *PREVIEW]
    out = ["--out", str(tmp_path / "p.json")] if command == "plan" else []
    refused([*argv, *out, flag, value], tmp_path, capsys, (flag, f"'{value}' has no unit", example))
    assert cli.main([*argv, *out, flag, f"{value}GB/s"]) == 0


@pytest.mark.parametrize(
    "bare",
    ["0.5", "1", "5", "400000", "5000000000", "5000000001", "123456789.123", "1e15", "2e15"],
)
def test_a_bare_rate_s_hint_reads_back(bare):
    """Found by the sixty-eighth round: `--intra-bw 5000000000` was told "give it, e.g.
    5e+09GB/s or 4e+10Gbit/s", itself refused (beyond 1 PB/s), and `--intra-bw 400000` told
    "400000GB/s", accepted as a link 10^9 times faster than 400000 bytes/s. Every rate the
    hint spells reads back as the bare number in bytes/s (as a cluster file's numbers are);
    where that is outside the bounds, the hint spells no rate. Tolerance: the hint writes 15
    significant digits, a relative error of at most 5e-15; 1e-12 leaves a margin of 200."""
    with pytest.raises(BadArgumentError) as info:
        parse_bandwidth(bare, "--intra-bw")
    line = str(info.value)
    assert line.startswith(f"--intra-bw '{bare}' has no unit: give it"), line
    hint = line.partition("has no unit:")[2]
    spelled = re.findall(r"[0-9.]+(?:e[+-]?[0-9]+)?[kMGTP]?(?:B|bit)/s", hint)
    if not MIN_BANDWIDTH <= float(bare) <= MAX_BANDWIDTH:
        assert spelled == [] and "outside 1..1e+15 bytes/s" in hint, line
        return
    assert len(spelled) == 2 and spelled[0].endswith("B/s") and spelled[1].endswith("bit/s")
    for rate in spelled:
        assert parse_bandwidth(rate) == pytest.approx(float(bare), rel=1e-12), (rate, line)


@pytest.mark.parametrize("value", ["5/s", "10G/s", "10Gps", "2kps"])
def test_a_rate_that_says_neither_bytes_nor_bits_is_refused(tmp_path, capsys, value):
    """Found by the forty-ninth round: `--intra-bw 5/s` planned for 5 bytes/s (the unit
    forgotten, as `--intra-bw 5` was before), and `10G/s` read as 10 GB/s where 10 Gbit/s,
    8 times less, may be meant. A rate says bytes or bits."""
    profile = str(shipped_profile("vit-digits", "cpu"))
    argv = ["plan", "--profile", profile, *PREVIEW, "--out", str(tmp_path / "p.json")]
    fragments = ("--intra-bw", f"unknown unit in bandwidth '{value}'", "bytes or bits said")
    refused([*argv, "--intra-bw", value], tmp_path, capsys, fragments)


def test_freeze_list_without_layers_is_said_in_the_flag_s_words(tmp_path, capsys):
    """Found by the fifty-sixth round: `run --freeze list` said "freeze=list needs freeze_list",
    the run config's internal field names. The line speaks of the flag and shows the form."""
    refused(
        [*_argv("run", tmp_path), "--model", "vit-digits", "--freeze", "list"],
        tmp_path,
        capsys,
        "--freeze list names no layers: give the frozen layers per epoch, as --freeze 0,2,4",
    )


@pytest.mark.parametrize("family", ["vit", "deit"])
def test_a_renamed_tensor_stored_as_integers_is_refused_by_its_file_name(tmp_path, capsys, family):
    """Found by the sixty-fourth round's helpers: transformers 5 renames a ViT's or DeiT's
    tensors as it loads, and the stored-dtype check looked file keys up by the model's names
    only, so a renamed float weight stored as int32 was cast and trained (exit 0). Looked up
    under the file's names too; the one line names the file's tensor."""
    from safetensors.torch import load_file, save_file

    model = _family_checkpoint(tmp_path / "in" / "model", family)
    tensors = load_file(model / "model.safetensors")
    name = f"{family}.encoder.layer.0.intermediate.dense.weight"
    assert name in tensors  # the file's name, not the loaded model's (`layers.0.mlp.fc1`)
    tensors[name] = torch.ones_like(tensors[name], dtype=torch.int32)
    save_file(tensors, model / "model.safetensors", metadata={"format": "pt"})
    capsys.readouterr()
    file = model / "model.safetensors"
    said = f"{file}: tensor {name} is stored as I32 but the model's is floating (float32)"
    refused(_profile_argv(model, tmp_path), tmp_path / "in", capsys, said)


@pytest.mark.parametrize(
    "value, said",
    [
        ("1e-400", "--alpha: '1e-400' is too small for a float (it reads as 0)"),
        ("1e400", "--alpha: '1e400' is beyond a float's range (1.8e308)"),
        ("nan", "--alpha: expected a number like 0.3 or 1e-3 in digits 0-9, not 'nan'"),
    ],
)
def test_a_float_flag_past_a_floats_range_says_so(tmp_path, capsys, value, said):
    """Found by the ninetieth round: `--alpha 1e-400` was refused as "(got 0.0)", a value
    never typed, and every float flag offered -2 as an example, also where it refuses it."""
    profile = tmp_path / "p.json"
    profile.write_text(json.dumps(PROFILE))
    argv = ["plan", "--profile", str(profile), *PREVIEW, "--alpha", value, "-o", "o.json"]
    refused(argv, tmp_path, capsys, said)


def test_sizes_in_peta_and_exa_bytes_are_read_up_to_the_limit(tmp_path, capsys):
    """Found by the ninetieth round: `--device-memory 1PiB` was "unknown unit 'PiB'", though
    sizes reach 2**60 bytes and bandwidths took P."""
    from pipeplan.cluster import parse_bytes

    assert parse_bytes("1PiB") == 2**50 and parse_bytes("2PB") == 2 * 10**15
    assert parse_bytes("1EiB") == 2**60 and parse_bytes("1EB") == 10**18
    assert parse_bytes("0.5P") == 5 * 10**14
    profile = tmp_path / "p.json"
    profile.write_text(json.dumps(PROFILE))
    argv = ["plan", "--profile", str(profile), *PREVIEW, "--device-memory", "2EiB"]
    refused([*argv, "-o", "o.json"], tmp_path, capsys, "'2EiB' is outside 0..1.15292e+18 bytes")
    assert cli.main([*argv[:-1], "1PiB", "-o", str(tmp_path / "o.json")]) == 0
    assert load(Plan, tmp_path / "o.json").inputs.cluster.device_memory_bytes == 2**50


@pytest.mark.parametrize("rate", ["1EB/s", "1EiB/s", "2Ebit/s", "1.5Eibps"])
def test_rates_in_exa_units_are_read_and_refused_by_the_bound(tmp_path, capsys, rate):
    """Found by the ninety-third round: `--inter-bw 1EB/s` was "unknown unit", where sizes
    take E and a rate in P units past the bound names it."""
    from pipeplan.cluster import parse_bandwidth

    assert parse_bandwidth("0.0005EB/s") == pytest.approx(5e14)
    assert parse_bandwidth("0.0001EiB/s") == pytest.approx(2**60 * 1e-4)
    argv = ["preview", "--profile", str(shipped_profile("vit-digits", "cpu")), *PREVIEW]
    refused([*argv, "--inter-bw", rate], tmp_path, capsys, f"'{rate}' is outside 1..1e+15 bytes/s")


def test_the_suggested_profile_command_can_be_pasted(tmp_path, caplog):
    """Found by the ninety-third round: a synthetic profile's missing links were to be
    measured with `pipeplan profile bert-large (synthetic) …`, a shell syntax error naming
    no model pipeplan builds. A synthetic profile's model is MODEL, and a name is quoted."""
    import shlex

    from pipeplan.formats.profile import profile_command
    from pipeplan.synthetic import preset_profile

    assert profile_command("my models/bert", nproc=2) == (
        "pipeplan profile 'my models/bert' --out P.json --nproc 2"
    )
    profile = tmp_path / "bl.json"
    profile.write_text(preset_profile("bert-large").model_dump_json())
    argv = ["plan", "--profile", str(profile), "--nodes", "2", "--devices-per-node", "8"]
    argv += ["--device-memory", "16GiB", "--out", str(tmp_path / "p.json")]
    with caplog.at_level(logging.WARNING, logger="pipeplan"):
        assert cli.main(argv) == 0
    (said,) = [r.getMessage() for r in caplog.records if "measure them with" in r.getMessage()]
    command = said.split("measure them with `")[1].split("`")[0]
    assert shlex.split(command)[:3] == ["pipeplan", "profile", "MODEL"], command


def test_a_profile_of_a_model_without_a_name_is_refused_as_it_is_read(tmp_path, capsys):
    """Found by the ninetieth round: a profile whose model.name was "" planned and previewed;
    only `run` refused it ("profiles '', not the model 'vit-digits'")."""
    profile = tmp_path / "p.json"
    for blank in ("", "   "):  # (the ninety-second round: spaces alone passed too)
        profile.write_text(json.dumps(with_path(PROFILE, ("model", "name"), blank)))
        argv = ["plan", "--profile", str(profile), *PREVIEW, "-o", str(tmp_path / "o.json")]
        refused(argv, tmp_path, capsys, (str(profile), "model.name", "is blank"))


def test_runs_in_a_file_system_that_keeps_no_files_are_refused_as_such(tmp_path, capsys):
    """Found by the ninetieth round: `run --runs-dir /proc` was told the disk holding it had
    nothing free, and to free some space."""
    argv = ["run", "--runs-dir", "/proc", "--name", "x", "--epochs", "1"]
    refused(argv, tmp_path, capsys, "/proc: the file system holding it keeps no files")


def test_no_command_writes_into_the_shipped_profiles(tmp_path, capsys):
    """Found by the ninety-first round: `profile --out profiles/vit-digits@cpu-1t.json` and
    `calibrate -o` onto it replaced the profile every later run read by default, silently."""
    from executor.planning import profiles_dir
    from pipeplan.fileio import check_writable

    shipped = profiles_dir()
    said = "is in the folder of profiles pipeplan ships, which runs read by default"
    with pytest.raises(OutputError, match=said):  # (not through a command: kept whole if not)
        check_writable(shipped / "vit-digits@cpu-1t.json")
    profile = tmp_path / "p.json"
    profile.write_text(json.dumps(PROFILE))
    out = shipped / f"pipeplan-test-{os.getpid()}.json"  # (a new file, removed if written)
    # folders inside it too (the ninety-second round: plots and a plan in profiles/__pycache__)
    folder = shipped / f"pipeplan-test-{os.getpid()}"
    try:
        argv = ["profile", "vit-digits", "--warmup", "1", "--repeats", "1", "--out", str(out)]
        refused(argv, [shipped, tmp_path], capsys, (str(out), said))
        argv = ["plan", "--profile", str(profile), *PREVIEW, "-o", str(out)]
        refused(argv, [shipped, tmp_path], capsys, (str(out), said))
        (folder / "sub").mkdir(parents=True)
        inside = folder / "sub" / "p.json"
        argv = ["plan", "--profile", str(profile), *PREVIEW, "-o", str(inside)]
        refused(argv, [shipped, tmp_path], capsys, (str(inside), said))
        argv = ["preview", "--profile", str(profile), *PREVIEW, "--plot", str(folder / "plots")]
        refused(argv, [shipped, tmp_path], capsys, (str(folder / "plots"), said))
        # a whole run, and one moved there to resume (the ninety-third round: a run trained
        # into profiles/NAME, checkpoints and all)
        from executor.launch import check_run_location

        for runs in (shipped, folder / "runs", folder / "sub" / ".." / "runs"):
            for more in ([], ["--prepare-only"]):
                argv = ["run", "--runs-dir", str(runs), "--name", folder.name, "--epochs", "1"]
                argv += more
                refused(argv, [shipped, tmp_path], capsys, (f"--runs-dir {runs}: ", said))
        with pytest.raises(OutputError, match=said):
            check_run_location(folder / "moved-run")
    finally:
        out.unlink(missing_ok=True)
        shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.parametrize("name", ["d.jsonl", "d.csv", "train.jsonl,d.jsonl"])
@pytest.mark.parametrize(
    "make, kind",
    [
        (lambda p: p.mkdir(), "a directory"),
        (os.mkfifo, "a FIFO"),
        (lambda p: p.symlink_to("/dev/zero"), "a character device"),
        # (the ninety-fourth round: a socket's open fails, ENXIO, "cannot read (OSError …)")
        (lambda p: socket.socket(socket.AF_UNIX).bind(str(p)), "a socket"),
    ],
    ids=["directory", "fifo", "device", "socket"],
)
def test_a_text_data_file_that_is_no_file_says_what_it_is(tmp_path, capsys, name, make, kind):
    """Found by the ninety-third round: `--data d.jsonl` (or .csv, or as TRAIN,EVAL) that was
    a folder, a FIFO or /dev/zero was "not a regular file" alone, where `--data DIR` and
    `--data f.py:fn` said what it was."""
    (tmp_path / "train.jsonl").write_text('{"text": "good", "label": 1}\n' * 8)
    make(tmp_path / name.split(",")[-1])
    argv = ["run", "--prepare-only", "--model", "bert-tiny", "--runs-dir", str(tmp_path / "r")]
    argv += ["--name", "x", "--data", ",".join(str(tmp_path / n) for n in name.split(","))]
    refused(argv, tmp_path, capsys, f"{name.split(',')[-1]}: not a regular file ({kind})")


@pytest.mark.parametrize("lr", ["1e38", "1e300", "10.5"])
def test_a_learning_rate_past_its_bound_is_refused_before_a_rank_starts(tmp_path, capsys, lr):
    """Found by the ninety-first round: `--lr 1e38` passed, and the ranks failed on torch's
    float32 overflow inside AdamW, leaving a run folder that had to be deleted."""
    argv = ["run", "--runs-dir", str(tmp_path / "runs"), "--name", "x", "--lr", lr]
    refused(argv, tmp_path, capsys, "--lr: Input should be less than or equal to 10")
    assert not (tmp_path / "runs" / "x").exists()


@pytest.mark.parametrize(
    "decay, lr", [("1e5", None), ("1e300", None), ("2", "0.5"), ("10.000001", "0.1")]
)
def test_a_weight_decay_that_is_no_decay_is_refused_before_a_rank_starts(
    tmp_path, capsys, decay, lr
):
    """Found by the ninety-second round: `--weight-decay 1e5` passed, and the run diverged,
    blaming `--lr`, and left a run folder. AdamW scales a weight by 1 − lr · weight_decay a
    step: at or below 0 it is no decay. Both are quoted as given (the ninety-third round:
    `10.000001 with --lr 0.1` read `10 with --lr 0.1`, a product of 1, not past it)."""
    argv = ["run", "--runs-dir", str(tmp_path / "runs"), "--name", "x", "--weight-decay", decay]
    argv += ["--lr", lr] if lr else []
    shown = {"1e5": "100000", "1e300": "1e+300", "2": "2", "10.000001": "10.000001"}[decay]
    said = f"--weight-decay {shown} with --lr {lr or 0.001}"
    refused(argv, tmp_path, capsys, said)
    assert not (tmp_path / "runs" / "x").exists()
