"""Training data for the executor: a `--data` spec → train and eval datasets.

Built-ins need no download: `digits` reads the 8×8 handwritten digits that ship inside
scikit-learn's package data (without importing scikit-learn), and `synth-text` generates a
seeded token task sized to the model (classes, or for a causal LM the token sequences
themselves). Text files, `FILE.jsonl` or `FILE.csv` (or `TRAIN,EVAL`), are tokenized with a
local tokenizer (`executor.text`). Anything else is `module:function` or
`path/to/file.py:function`, a user function returning a `TaskData` or `(train, eval[,
augmented])`; a module in the current directory is found (README, "Your own data").

Every dataset item is `(input, label)`: `input` has the model's per-sample shape and dtype,
`label` is an int64 scalar tensor, or for a causal LM the int64 token ids the model predicts
(the input ids, IGNORE_INDEX at padding). Padded token ids hold `models.PADDING` (−100) where
they are padding (`TaskData.padded`), never the pad token's id. Items are deterministic unless
`TaskData.augmented` is set, because the executor caches frozen layers' activations per sample
index.
"""

from __future__ import annotations

import atexit
import builtins
import contextlib
import copyreg
import dis
import errno
import faulthandler
import gc
import gzip
import importlib
import importlib.machinery
import importlib.util
import inspect
import io
import itertools
import logging
import math
import operator
import os
import resource
import signal
import site
import sys
import sysconfig
import tempfile
import threading
import time
import types
import warnings
import weakref
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache, partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch.utils import _contextlib, _python_dispatch
from torch.utils._device import DeviceContext as _DeviceContext
from torch.utils.data import Dataset
from torch.utils.serialization import config as _SERIALIZATION

from executor import childimports, leftovers
from executor.faults import SignalInterrupt, classify
from pipeplan import log as pipeplan_log
from pipeplan.cluster import format_bytes
from pipeplan.errors import (
    BadArgumentError,
    InputFileError,
    Interrupted,
    OutputError,
    PipeplanError,
    Stopped,
    one_line,
    quoted,
)
from pipeplan.exits import (
    end_children,
    ending,
    exits_raised,
    forks_ended,
    is_command_process,
    lineage_kept,
)
from pipeplan.fileio import entry_kind, identity, stops_deferred
from pipeplan.formats.base import MAX_SAMPLES, file_state
from pipeplan.log import write_line
from pipeplan.startup import SIGNALS, signal_name

if TYPE_CHECKING:
    from pipeplan.models import LayerSequence

log = logging.getLogger("pipeplan.data")
# The lines of what a user's data module or function writes to stderr that are passed on,
# each a warning; the rest are counted.
MAX_USER_LINES = 10
# What user code or a library writes to file descriptor 2 meanwhile, held and passed on at most
# (`descriptor_2_held`).
MAX_HELD_BYTES = 1 << 16

BUILTINS = ("digits", "synth-text")

EVAL_FRACTION = 0.2  # digits: stratified held-out share
SYNTH_TRAIN, SYNTH_EVAL = 4096, 1024
FIRST_TOKEN = 3  # ids 0..2 are reserved (padding, CLS/SEP in BERT; <s>, <pad>, </s> in RoBERTa)
MAX_LABELS = 1_000_000  # classes: a classifier head has one row per class (10**9: MemoryError)


@dataclass(frozen=True)
class TaskData:
    name: str
    train: Dataset  # item i -> (input tensor, int64 label tensor: scalar, or token ids)
    eval: Dataset
    augmented: bool = False  # train items are randomly augmented: never cache activations
    # Token inputs are padded with models.PADDING (−100; not the pad token's id, which may be a
    # real token: pad = eos): the model is built with the padding-mask channel, so padding is
    # not attended to nor a target (docs/architecture.md §4.17).
    padded: bool = False
    # Classes, for the head's size; None: read from in-memory labels (TensorPairs), else the
    # model's own. Never found by reading every item: that may be slow, or have effects.
    num_labels: int | None = None


class TensorPairs(Dataset):
    """`(inputs[i], labels[i])` from two tensors held in memory."""

    def __init__(self, inputs: torch.Tensor, labels: torch.Tensor):
        if len(inputs) != len(labels):
            raise ValueError(f"{len(inputs)} inputs but {len(labels)} labels")
        self.inputs = inputs
        self.labels = labels

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.inputs[index], self.labels[index]


def load_data(
    spec: str, seq: LayerSequence | None = None, seed: int = 0, tokenizer: str | None = None
) -> TaskData:
    """The datasets named by `spec`; built-ins are drawn from `seed`. `synth-text` and text
    files are made for the model `seq` (its sequence length, vocabulary, task); text files
    also need the `tokenizer` directory. digits and user functions do not need `seq`."""
    from executor import text

    forget_users_side()
    if spec == "digits":
        return load_digits(seed)
    if spec == "synth-text":
        return synth_text(_needs_model(seq, spec), seed)
    if text.is_text_spec(spec):
        return text.tokenize(text.read_corpus(spec, seed), tokenizer, _needs_model(seq, spec))
    if is_user_code(spec):
        return _load_user(spec, seed)
    with contextlib.suppress(OSError, ValueError):  # (what a path there is, ninety-second round)
        there = f"{quoted(spec)} is {entry_kind(os.stat(spec).st_mode)}, not data: "
        raise BadArgumentError(
            f"data {there}give FILE.jsonl, FILE.csv, module:function or path/to/file.py:function"
        )
    raise BadArgumentError(
        f"unknown data {quoted(spec)}; built-ins: {', '.join(BUILTINS)} "
        "(or FILE.jsonl, FILE.csv, module:function, or path/to/file.py:function)"
    )


def is_user_code(spec: str) -> bool:
    """Whether `--data spec` is code of the user's (`module:function`, `path/file.py:function`)
    rather than built-in data or text files, by the spec alone: every rank tells it alike.

        is_user_code("mydata:load")   # True; False for "digits" and "train.csv,eval.csv"
    """
    from executor import text

    return spec not in BUILTINS and not text.is_text_spec(spec) and ":" in spec


def _needs_model(seq: LayerSequence | None, spec: str) -> LayerSequence:
    if seq is None:
        raise BadArgumentError(f"data {quoted(spec)} is made for a model: pass the model")
    return seq


def check_compatible(data: TaskData, seq: LayerSequence) -> None:
    """Raise BadArgumentError when the model cannot take the dataset's samples."""
    old_padding: dict[str, int] = {}
    for split, dataset in (("train", data.train), ("eval", data.eval)):
        if length(dataset, data.name, split) == 0:
            if split == "train":
                raise BadArgumentError(f"data '{data.name}' has no training samples")
            continue
        inputs, labels = _samples(dataset, data.name, split)
        # Which item each row is, to name the first one refused (forty-eighth round).
        every = isinstance(dataset, TensorPairs)
        rows = range(len(labels)) if every else [0, length(dataset, data.name, split) - 1]
        _check_inputs(inputs, data.name, seq, data.padded, _Rows(split, rows, every))
        if data.padded:
            _check_not_all_padding(dataset, inputs, data.name, split)
            old_padding[split] = _old_padding_rows(inputs, seq)
        if labels.dtype != torch.int64:
            raise BadArgumentError(
                f"data '{data.name}': {split} labels must be int64, not {_dtype(labels.dtype)}"
            )
        if _is_token_task(seq):
            _check_token_labels(labels, inputs, data.name, split, seq, _Rows(split, rows, every))
            if isinstance(dataset, TensorPairs):  # every sample at hand
                _check_has_targets(labels, data.name, split)
            else:
                _check_items_have_targets(dataset, labels, data.name, split)
            continue
        if labels.dim() != 1 and labels.shape[1:] != inputs.shape[1:]:  # (twenty-seventh round)
            raise BadArgumentError(
                f"data '{data.name}' gives {split} labels of shape "
                f"{_shape(tuple(labels.shape[1:]))}; a classifier's label is a scalar class "
                "index, one a sample"
            )
        if labels.dim() != 1:
            raise BadArgumentError(
                f"data '{data.name}' gives {split} labels of shape "
                f"{_shape(tuple(labels.shape[1:]))}, token sequences, but model '{seq.name}' "
                "is a classifier; a decoder trains on them with --task causal-lm"
            )
        if bool((bad := _not_labels(labels, seq)).any()):
            read = _Rows(split, rows, every)
            # Of two items read, their labels: not the set's range (the sixtieth round).
            held = f"in {int(labels.min())}..{int(labels.max())}" if every else read.values(labels)
            # A head sized by the data's own num_labels is said so: the line blamed the
            # model's config, which held 10 (the fifty-ninth round).
            sized = ", its head sized by the data's num_labels" if data.num_labels else ""
            raise BadArgumentError(
                f"{read.have(data.name)} labels {held} but {_labels_taken(seq)}"
                f"{sized}{read.first(bad)}"
            )
    if any(old_padding.values()):
        from pipeplan.models import PADDING

        rows = " and ".join(f"{n} {split}" for split, n in old_padding.items() if n)
        log.warning(
            "data '%s': %s row(s) end in a run of pad_token_id %d and hold no %d: padding is "
            "%d (pipeplan.models.PADDING) in TaskData(..., padded=True); a pad id is a token, "
            "attended to and learnt",
            data.name,
            rows,
            seq.config.pad_token_id,
            PADDING,
            PADDING,
        )


@dataclass(frozen=True)
class _Rows:
    """Which item each row of the samples the launcher's checks read is (`_samples`: every
    row of a TensorPairs, else the first and the last item), to name the first refused."""

    split: str
    items: Sequence[int]
    every: bool = True  # whether the rows are every item of the split

    def have(self, name: str) -> str:
        """ "data 'd' has train", or where not every item was read, which were: "data 'd':
        train items 0 and 127 (the first and last, read before training) have". What the
        two items hold is not the set's (the sixtieth round: labels 0..9 said "in 4..5")."""
        if self.every:
            return f"data '{name}' has {self.split}"
        items = sorted(set(self.items))
        if len(items) == 1:
            return f"data '{name}': {self.split} item {items[0]} (its only one) has"
        named, read = " and ".join(map(str, items)), "the first and last, read before training"
        return f"data '{name}': {self.split} items {named} ({read}) have"

    def values(self, labels: torch.Tensor) -> str:
        """The scalar labels of the items read, in their order: "5 and 4"."""
        return " and ".join(str(int(v)) for v in labels[: len(set(self.items))])

    def first(self, bad: torch.Tensor) -> str:
        """ " (train item 37 first)": the item of the first row `bad` (a mask) marks."""
        if not bool(bad.any()):
            return ""
        row, _ = _first_marked(bad, bad)
        return f" ({self.split} item {self.items[row]} first)"


def _check_token_labels(
    labels: torch.Tensor,
    inputs: torch.Tensor,
    name: str,
    split: str,
    seq: LayerSequence,
    rows: _Rows | None = None,
) -> None:
    """A causal LM's labels: one token id per input position (the input ids themselves),
    IGNORE_INDEX where the loss skips a position (padding)."""
    from pipeplan.models import IGNORE_INDEX

    if labels.shape != inputs.shape:
        raise BadArgumentError(
            f"data '{name}' gives {split} labels of shape {_shape(tuple(labels.shape[1:]))} "
            f"but causal-lm model '{seq.name}' predicts a token at each of "
            f"{_shape(tuple(inputs.shape[1:]))} positions: labels are the input ids "
            f"({IGNORE_INDEX} at padding)"
        )
    if bool((bad := _not_labels(labels, seq)).any()):
        kept = labels[labels != IGNORE_INDEX]
        have = rows.have(name) if rows else f"data '{name}' has {split}"
        raise BadArgumentError(
            f"{have} token labels in {int(kept.min())}..{int(kept.max())} "
            f"but {_labels_taken(seq)}{rows.first(bad) if rows else ''}"
        )


def _is_token_task(seq: LayerSequence) -> bool:
    return getattr(seq, "task", "classification") == "causal-lm"


def _not_labels(labels: torch.Tensor, seq: LayerSequence) -> torch.Tensor:
    """Where `labels` (int64, any shape) hold what is no label of `seq`'s: a class outside
    0..num_labels-1, or for a causal LM a token id outside its vocabulary that is not
    IGNORE_INDEX (a position the loss skips). The one rule of the launcher's checks
    (`check_compatible`) and of a rank's reads (`check_batch_labels`), at tensor speed."""
    from pipeplan.models import IGNORE_INDEX

    outside = (labels < 0) | (labels >= seq.num_labels)
    return outside & (labels != IGNORE_INDEX) if _is_token_task(seq) else outside


def _not_tokens(inputs: torch.Tensor, vocab: int, padded: bool) -> torch.Tensor:
    """Where int64 `inputs` hold no token id of a vocabulary of `vocab`: PADDING is padding in
    `padded` data. The one rule of the launcher's checks (`_check_inputs`) and of a rank's
    reads (`check_batch_inputs`)."""
    from pipeplan.models import PADDING

    bad = (inputs < 0) | (inputs >= vocab)
    return bad & (inputs != PADDING) if padded else bad


def _first_marked(values: torch.Tensor, bad: torch.Tensor) -> tuple[int, int]:
    """(row, value): the first row of `values` that the mask `bad` marks, and its first
    marked value (`bad` marks one at least)."""
    row = int(bad.reshape(len(bad), -1).any(dim=1).nonzero()[0, 0])
    return row, int(values[row].reshape(-1)[bad[row].reshape(-1)][0])


def _labels_taken(seq: LayerSequence) -> str:
    """What labels `seq` takes, for a message: "model 'vit-digits' has 10 classes (0..9)"."""
    from pipeplan.models import IGNORE_INDEX

    if _is_token_task(seq):
        return f"model '{seq.name}' has vocab_size {seq.num_labels} (or {IGNORE_INDEX}: skip)"
    return f"model '{seq.name}' has {seq.num_labels} classes (0..{seq.num_labels - 1})"


def check_batch_labels(
    labels: torch.Tensor, indices: list[int], name: str, split: str, seq: LayerSequence
) -> None:
    """A rank's check of a batch's labels (stacked, `batch_rows`; item `indices[i]`'s in row
    i) against the model's classes or vocabulary, as the launcher's checks hold the items
    they read (`check_compatible`, `_not_labels`): one comparison of the whole batch, the
    first item holding a label none of them named. Found by the thirty-seventh round: a label
    of 10**6 or -5 on an item only a rank read was torch's "IndexError: Target 1000000 is
    out of bounds.", naming no data. A label that is no integer is not looked at here.

        check_batch_labels(torch.tensor([3, 10**6]), [5, 37], "m:load", "train", seq)
        # BadArgumentError: data 'm:load': train item 37's label 1000000 is not a class:
        # model 'vit-digits' has 10 classes (0..9)
    """
    if labels.is_floating_point() or labels.is_complex() or labels.dtype == torch.bool:
        return
    bad = _not_labels(labels, seq)
    if not len(bad) or not bool(bad.any()):
        return
    row, value = _first_marked(labels, bad)
    what = (
        f"labels hold {value}, not a token id"
        if _is_token_task(seq)
        else f"label {value} is not a class"
    )
    raise BadArgumentError(
        f"data '{name}': {split} item {indices[row]}'s {what}: {_labels_taken(seq)}"
    )


def check_batch_inputs(
    inputs: torch.Tensor,
    indices: list[int],
    name: str,
    split: str,
    seq: LayerSequence,
    padded: bool,
) -> None:
    """A rank's check of a batch's token ids (int64 inputs of a model with a vocabulary)
    against that vocabulary, as the launcher's checks hold the items they read
    (`_check_inputs`): PADDING is padding in `padded` data. Found by the forty-eighth round:
    an id past the vocabulary in an item only a rank read was torch's "IndexError: index
    out of range in self" (on CUDA a device-side assert), naming no data.

        check_batch_inputs(ids, [5, 50], "m:load", "train", seq, padded=False)
        # BadArgumentError: data 'm:load': train item 50's token ids hold 256: model 'llama'
        # has vocab_size 256
    """
    from pipeplan.models import PADDING

    if inputs.dtype != torch.int64 or not len(inputs):  # images, embeddings: no token ids
        return
    vocab = getattr(seq.config, "vocab_size", None)
    if not isinstance(vocab, int):
        return
    bad = _not_tokens(inputs, vocab, padded)
    if not bool(bad.any()):
        return
    row, value = _first_marked(inputs, bad)
    padding = f" ({PADDING} is padding in TaskData(..., padded=True))" if value == PADDING else ""
    raise BadArgumentError(
        f"data '{name}': {split} item {indices[row]}'s token ids hold {value}: model "
        f"'{seq.name}' has vocab_size {vocab}{padding}"
    )


def _check_has_targets(labels: torch.Tensor, name: str, split: str) -> None:
    """A causal LM trains on next tokens: position t predicts labels[t+1]. Texts that all
    have fewer than 2 tokens give it nothing to predict, as do full-length texts whose labels
    are all -100 (the line names both: the sixty-fourth round's labels were blamed on the
    texts' length): every step's loss would be the mean of no tokens, and a held-out set of
    them ran the run without evaluation, unsaid (forty-ninth round), where an empty held-out
    set is refused."""
    from pipeplan.models import IGNORE_INDEX

    if labels.dim() == 2 and labels.shape[1] == 1:
        # Every text is one token long, whatever it held: the length is the cut's (the
        # fifty-seventh round: --seq-len 1 was blamed on texts of 4 to 14 tokens).
        raise BadArgumentError(
            f"--seq-len 1: data '{name}' is read 1 token a text, and a causal LM predicts each "
            "token from those before it: nothing to predict; give --seq-len 2 or more"
        )
    if not bool((labels[:, 1:] != IGNORE_INDEX).any()):
        which = "training" if split == "train" else "held-out"
        raise BadArgumentError(
            f"data '{name}': no {which} text has a next token to predict: every label after "
            "a text's first token is -100 (texts of fewer than 2 tokens, padding aside, or "
            "labels masked out with -100); a causal LM trains on the labels of tokens 2 on"
        )


# The items of a `module:function` set (read one at a time, not held whole as a text file's
# token ids are) the data check reads at most looking for one with a next token to predict,
# or for one that is not all padding. Only a set whose first and last items have none is
# read further: others pay nothing.
TARGET_SCAN_ITEMS = 4096  # text's ENCODE_TEXTS: the texts a file's check tokenizes at once
TARGET_SCAN_CHUNK = 256  # read under one hold of the user's code (`items`)


def _check_items_have_targets(dataset: Any, labels: torch.Tensor, name: str, split: str) -> None:
    """`_check_has_targets` of a set read an item at a time (`labels`: its first and last
    item's): where neither has a next token to predict, the items between are read, up to
    TARGET_SCAN_ITEMS, until one has. A set read whole without one is refused, as a text
    file is; a longer one is warned of. Found by the sixty-second round: a module's corpus
    of one-token texts trained a whole epoch of nothing before it was refused, and held-out
    ones failed the run at its first evaluation.

        _check_items_have_targets(ds, labels, "m:load", "train")
        # BadArgumentError: data 'm:load': no training text has a next token to predict …
    """
    from pipeplan.models import IGNORE_INDEX

    if labels.shape[1] == 1 or bool((labels[:, 1:] != IGNORE_INDEX).any()):
        _check_has_targets(labels, name, split)  # --seq-len 1; else it has targets
        return
    count = length(dataset, name, split)
    read = min(count - 1, TARGET_SCAN_ITEMS)
    for start in range(1, read, TARGET_SCAN_CHUNK):
        for _, y in items(dataset, range(start, min(start + TARGET_SCAN_CHUNK, read)), name, split):
            if not isinstance(y, torch.Tensor) or y.dim() != 1:
                return  # the batch checks name a label of another kind
            if bool((y[1:] != IGNORE_INDEX).any()):
                return
    if read == count - 1:  # every item read
        _check_has_targets(labels, name, split)
    fails = "trains nothing and fails" if split == "train" else "fails at its first evaluation"
    log.warning(
        "data '%s': %s items 0 to %d and %d (read before training) have no next token to "
        "predict; unless later ones have, the run %s at the end of its first epoch",
        name,
        split,
        read - 1,
        count - 1,
        fails,
    )


def data_task(data: TaskData) -> str:
    """What the data trains: "causal-lm" when its labels are token sequences, else
    "classification"."""
    if length(data.train, data.name, "train") == 0:
        raise BadArgumentError(f"data '{data.name}' has no training samples")
    sample, label = item(data.train, 0, data.name, "train")
    # Before any shape is read: a list input's shape was read as (), and the line blamed the
    # label for not matching it (the sixty-sixth round). A label of another kind is
    # classification's, refused by `check_compatible` with what labels must be.
    _refuse_non_tensor(sample, "input", data.name, "train", 0)
    if not isinstance(label, torch.Tensor) or label.dim() == 0:
        return "classification"
    # Found by the twenty-seventh round: a label of shape (1,) was taken for token ids, and a
    # BERT was refused for the causal-lm task no one asked for.
    shape = tuple(sample.shape)
    if label.dim() != 1 or tuple(label.shape) != shape:
        raise BadArgumentError(
            f"data '{data.name}': a training sample's label has shape {tuple(label.shape)}; a "
            "label is a scalar class index, one a sample (classification), or token ids as "
            f"long as its input's {shape} (causal-lm)"
        )
    return "causal-lm"


def label_count(data: TaskData) -> int | None:
    """Classes the data's labels use, the head's size: `data.num_labels`, else the largest
    label + 1 when both splits hold their labels in memory (TensorPairs), else None (the
    model keeps its own; check_compatible still checks the labels it sees)."""
    count = data.num_labels
    if count is None:
        both = (("train", data.train), ("eval", data.eval))
        splits = [d for split, d in both if length(d, data.name, split)]
        if not all(isinstance(d, TensorPairs) for d in splits):
            return None
        _check_eval_labels(data)
        count = 1 + max(int(d.labels.max()) for d in splits)
    if isinstance(count, bool) or not isinstance(count, int):  # 2.0 read as inside the range
        raise BadArgumentError(
            f"data '{data.name}' has {count!r} classes: num_labels must be a whole number"
        )
    if not 1 <= count <= MAX_LABELS:
        # Before the head is built: TaskData(num_labels=10**9) ran out of memory after 40 s.
        # One class is refused with its own line (`task._check_classes`): 2 is the least.
        raise BadArgumentError(
            f"data '{data.name}' has {count!r} classes; a classifier takes 2..{MAX_LABELS}"
        )
    return count


def _check_eval_labels(data: TaskData) -> None:
    """Refuses eval labels no training sample has when the labels size the head (TensorPairs
    without `num_labels`): a class nothing trains cannot be learnt, and the eval set alone
    made the head larger. Found by the twenty-seventh round for text files' TRAIN,EVAL
    (`text.check_eval_labels`); a `module:function`'s in-memory splits are the same case.

        _check_eval_labels(TaskData("m:f", TensorPairs(x, [0, 1]), TensorPairs(y, [0, 5])))
        # BadArgumentError: "data 'm:f': the eval label 5 is in no training sample …"
    """
    train, eval_ = data.train, data.eval
    if not (len(train) and len(eval_)) or train.labels.dim() != 1 or eval_.labels.dim() != 1:
        return  # nothing to compare, or token labels: check_compatible names those
    only = torch.unique(eval_.labels[~torch.isin(eval_.labels, train.labels)]).tolist()
    if not only:
        return
    listed = ", ".join(map(str, only[:5])) + (", …" if len(only) > 5 else "")
    which = "label" if len(only) == 1 else f"{len(only)} labels"
    raise BadArgumentError(
        f"data '{data.name}': the eval {which} {listed} {'is' if len(only) == 1 else 'are'} "
        "in no training sample (a class nothing trains cannot be learnt); correct the labels, "
        "or give TaskData(..., num_labels=C) to have classes no sample trains"
    )


# --- digits ------------------------------------------------------------------------------


def digits_path() -> Path:
    """Where scikit-learn's installed package data keeps the digits (sklearn isn't imported)."""
    spec = importlib.util.find_spec("sklearn")
    if spec is None or not spec.submodule_search_locations:
        raise BadArgumentError(
            "data 'digits' needs scikit-learn's package data: pip install scikit-learn"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "datasets/data/digits.csv.gz"


def load_digits(seed: int = 0) -> TaskData:
    """1797 8×8 digits, float32 (1, 8, 8), standardised with the train split's mean/std; a
    stratified 20 % of each class, drawn from `seed`, is held out for eval."""
    path = digits_path()
    try:
        with gzip.open(path, "rt", encoding="ascii") as f:
            table = np.loadtxt(f, delimiter=",", dtype=np.float32)
    except (OSError, ValueError, EOFError) as exc:
        raise InputFileError(f"{path}: cannot read the digits data ({_one_line(exc)})") from None
    if table.ndim != 2 or table.shape[1] != 65:
        raise InputFileError(f"{path}: expected 65 columns (64 pixels + label)")
    pixels = table[:, :64].reshape(-1, 1, 8, 8) / 16.0
    labels = table[:, 64].astype(np.int64)

    rng = np.random.default_rng(seed)
    held_out = np.zeros(len(labels), dtype=bool)
    for label in np.unique(labels):
        members = rng.permutation(np.flatnonzero(labels == label))
        held_out[members[: round(EVAL_FRACTION * len(members))]] = True
    mean, std = pixels[~held_out].mean(), pixels[~held_out].std()
    pixels = (pixels - mean) / std

    def split(mask: np.ndarray) -> TensorPairs:
        return TensorPairs(torch.from_numpy(pixels[mask].copy()), torch.from_numpy(labels[mask]))

    return TaskData("digits", split(~held_out), split(held_out), augmented=False)


# --- synth-text --------------------------------------------------------------------------


def synth_text(
    seq: LayerSequence, seed: int = 0, n_train: int = SYNTH_TRAIN, n_eval: int = SYNTH_EVAL
) -> TaskData:
    """Generated token-id sequences for a text model with C = num_labels classes.

    The usable ids [3, vocab_size) are cut into C contiguous bands; a sample's label is the
    band that holds the most of its tokens (for 2 classes: lower half of the vocabulary
    outnumbers the upper half → 0, else 1). Samples whose top band wins by less than
    max(1, length // 8) tokens are not drawn, so the rule is cleanly learnable. Classes are
    balanced exactly in both splits.
    """
    if seq.input_dtype != torch.int64 or len(seq.input_shape) != 1:
        raise BadArgumentError(
            f"data 'synth-text' is token ids for a text model; model '{seq.name}' takes "
            f"{_shape(seq.input_shape)} {_dtype(seq.input_dtype)}"
        )
    length, vocab = seq.input_shape[0], seq.config.vocab_size
    # A causal LM's sequences are drawn as for a 2-class task.
    classes = 2 if getattr(seq, "task", "classification") == "causal-lm" else seq.num_labels
    if length < 4 or vocab < 8:
        raise BadArgumentError(
            f"data 'synth-text' needs sequence length ≥ 4 and vocab_size ≥ 8; model "
            f"'{seq.name}' has {length} and {vocab}"
        )
    if not 2 <= classes <= vocab - FIRST_TOKEN:
        raise BadArgumentError(
            f"data 'synth-text' needs 2..{vocab - FIRST_TOKEN} classes (vocab_size - 3); "
            f"model '{seq.name}' has {classes}"
        )
    rng = np.random.default_rng(seed)
    train = _synth_split(rng, n_train, length, vocab, classes)
    eval_ = _synth_split(rng, n_eval, length, vocab, classes)
    if getattr(seq, "task", "classification") == "causal-lm":
        # A language model predicts the sequences themselves: within a sample the tokens
        # keep to a few bands of the vocabulary, which it learns.
        train, eval_ = (TensorPairs(s.inputs, s.inputs.clone()) for s in (train, eval_))
    return TaskData("synth-text", train, eval_, augmented=False)


def _synth_split(
    rng: np.random.Generator, n: int, length: int, vocab: int, classes: int
) -> TensorPairs:
    edges = np.linspace(FIRST_TOKEN, vocab, classes + 1).astype(np.int64)  # band b: [e_b, e_b+1)
    margin = max(1, length // 8)
    quota = [n // classes + (c < n % classes) for c in range(classes)]
    kept: list[list[np.ndarray]] = [[] for _ in range(classes)]
    have = [0] * classes
    while have != quota:
        m = max(256, 2 * n)
        # Each candidate mixes the bands in its own random proportions.
        cumulative = np.cumsum(rng.dirichlet(np.ones(classes), size=m), axis=1)
        band = (rng.random((m, length, 1)) > cumulative[:, None, :-1]).sum(axis=2)
        offset = np.floor(rng.random((m, length)) * (edges[band + 1] - edges[band]))
        tokens = edges[band] + offset.astype(np.int64)
        counts = np.stack([(band == b).sum(axis=1) for b in range(classes)], axis=1)
        top2 = np.sort(counts, axis=1)[:, -2:]
        clear = top2[:, 1] - top2[:, 0] >= margin
        label = counts.argmax(axis=1)
        for c in range(classes):
            take = tokens[clear & (label == c)][: quota[c] - have[c]]
            kept[c].append(take)
            have[c] += len(take)
    inputs = np.concatenate([np.concatenate(k) for k in kept])
    labels = np.repeat(np.arange(classes), quota)
    order = rng.permutation(n)
    return TensorPairs(torch.from_numpy(inputs[order]), torch.from_numpy(labels[order]))


# --- module:function ---------------------------------------------------------------------


def _load_user(spec: str, seed: int) -> TaskData:
    target, _, func_name = spec.rpartition(":")
    if not target or not func_name.isidentifier():
        raise BadArgumentError(f"data {quoted(spec)}: expected module:function or file.py:function")
    if names_a_file(target):
        _refuse_a_file_as_folder(spec, target)
    try:
        return _load_user_data(spec, seed, target, func_name)
    finally:
        _remember_files(target, spec)  # what a later call imports afresh where edited


def _load_user_data(spec: str, seed: int, target: str, func_name: str) -> TaskData:
    # pipeplan's own doing: before the import system is held
    with _data_directory_on_path(_file_folder(target) if names_a_file(target) else None):
        if not names_a_file(target):
            _forget_if_elsewhere(target)
        _forget_if_moved()
    _forget_if_edited(target, spec)
    _witness_imports()
    childimports.forget()  # what the children of an earlier loading imported
    _RAN.clear()
    _FILE_FOLDER[:] = [_file_folder(target)] if names_a_file(target) else []
    _LOADED[:] = [_module_name(target)]
    before = set(sys.modules)
    _PASSED_ON.clear()  # a new loading of the data: its warnings are said again
    with (
        _contained(spec, "the data module", wide=True),
        _data_directory_on_path(_read_folder()),
        # Innermost: pipeplan's holds are not its time.
        reading(spec, f"importing {target}", LOAD_LIMIT_S),
    ):
        hooks = _hooks()
        try:
            module = _import(target, spec)
            left = _hooks_put_back(hooks)  # a tracer that raises here: the import's error
        except BaseException:
            _hooks_put_back(hooks)  # (Python took a tracer that raised off already)
            raise
        _refuse_hooks_left(spec, left, "the data module")
    func = getattr(module, func_name, None)
    if not callable(func):
        raise BadArgumentError(
            f"data {quoted(spec)}: {quoted(target)} has no function {quoted(func_name)}"
            f"{_not_the_file_here(target, module)}"
        )
    # A module imported inside load() is found as the data module was: `import helper` in
    # load() was "No module named 'helper'" beside mydata.py (twenty-eighth round).
    with (
        _contained(spec, "the data function", wide=True),
        _data_directory_on_path(_read_folder()),
        reading(spec, f"its function {func_name}", LOAD_LIMIT_S),
    ):
        hooks = _hooks()
        try:
            result = func(seed=seed) if _takes_seed(func) else func()
            # Here, where a hook's first call in pipeplan's code (pdb quitting without a
            # console, a tracer that raises) is still the data's error, not a traceback of
            # pipeplan's (forty-ninth round: `--data pdb:set_trace`).
            left = _hooks_put_back(hooks)
        except Exception as exc:  # the user's code: its error in one line, not our traceback
            _hooks_put_back(hooks)
            raise BadArgumentError(f"data {quoted(spec)} raised {_one_line(exc)}") from exc
        _refuse_hooks_left(spec, left, "the data function")
        with looking_at(spec, "what it returned"):
            _refuse_awaitables(result, spec)
    file = getattr(module, "__file__", None)
    if type(file) is str and file:  # what `helper_files` picks the user's files from
        _BROUGHT_IN[Path(file).resolve()] = (before, _module_name(target))
    with looking_at(spec, "what it returned"):
        return _as_task_data(result, spec)


# The trace and profile functions data code may leave set: this thread's, and those
# threading gives each thread it starts (the fifty-first round: `threading.settrace` left set
# ran in pipeplan's own watch threads and torch's, and a tracer that raised killed them).
HOOKS = (
    ("trace", sys.gettrace, sys.settrace),
    ("profile", sys.getprofile, sys.setprofile),
    ("thread trace", threading.gettrace, threading.settrace),
    ("thread profile", threading.getprofile, threading.setprofile),
)


def _hooks() -> tuple[Any, ...]:
    """The HOOKS as they are now (a debugger's or coverage's are kept)."""
    return tuple(get() for _, get, _ in HOOKS)


def _hooks_put_back(hooks: tuple[Any, ...]) -> list[str]:
    """The HOOKS the data's code changed put back as they were (`hooks`: `_hooks()` before it
    ran), and named. Only those: a profiler set in C (`python -m cProfile`, whose
    `sys.getprofile()` is its Profile object) cannot be set again through `sys.setprofile`,
    which took the object for a Python function and failed the next call with "'Profile'
    object is not callable" (a launcher or rank profiled so: a traceback)."""
    changed = []
    for (name, get, put), was in zip(HOOKS, hooks, strict=True):
        if get() is not was:
            changed.append(name)
            put(was)
    return changed


@contextlib.contextmanager
def hooks_kept(spec: str, doing: str) -> Iterator[None]:
    """The HOOKS as the user's data code (`doing`: an item, len(), a batch) found them, or
    one line; put back either way. Found by the fifty-second round: set in a `__getitem__`,
    a tracer ran for the whole run, in silence (the import and the function were held)."""
    hooks = _hooks()
    # Whose code runs: the data module loaded last (a rank's one; `spec` may be the data's own
    # name, which a rank's reads give), and the threads that were there before it began.
    before = frozenset(t.ident for t in threading.enumerate()) - {threading.get_ident()}
    _DATA_RUNNING.append((_LOADED[-1] if _LOADED else None, before))
    try:
        yield
    finally:
        _DATA_RUNNING.pop()
        if not _DATA_RUNNING:  # its forked children's reports read, and removed from disk
            childimports.found()
        try:
            left = _hooks_put_back(hooks)
        except Exception as exc:  # a tracer that raised here (Python has taken it off)
            _hooks_put_back(hooks)
            raise BadArgumentError(f"data {quoted(spec)}: {doing} raised {_one_line(exc)}") from exc
    _refuse_hooks_left(spec, left, doing)


def _refuse_hooks_left(spec: str, left: list[str], doing: str) -> None:
    """One line for the HOOKS `doing` (the data module, its function) left set, taken off."""
    if left:
        raise BadArgumentError(
            f"data {quoted(spec)}: {doing} left a {' and a '.join(left)} function set "
            "(sys.settrace, sys.setprofile, threading.settrace, threading.setprofile, "
            "pdb.set_trace(), breakpoint()); taken off now: data code must leave them as it "
            "found them"
        )


@contextlib.contextmanager
def _contained(spec: str, doing: str, wide: bool = False) -> Iterator[None]:
    """The user's data code (`doing`: the data module, its function, `len()` or an item of a
    set it returned), held to pipeplan's one-line errors: a SystemExit
    (`sys.exit`, argparse) is an error naming its code, not pipeplan's exit (`--data
    sys:exit` ended a run with code 0, having done nothing), another BaseException (a user
    `class E(BaseException)`, GeneratorExit; `_user_code`) an error naming it, and what it
    writes to stderr, from Python (`sys.stderr`) or to file descriptor 2 (`os.write`, a C
    extension, a subprocess: `descriptor_2_held`), is held back: passed on after success as
    pipeplan's warnings, as are its Python warnings (twenty-seventh round: they came raw,
    `m.py:9: UserWarning: …` and the source line), summarised or dropped on failure. Found by
    the twenty-eighth round: a BaseException was a traceback, and descriptor 2 came raw before
    the error line; and the parent's own reads of the sets (`length`, `item`) ran unheld, so a
    `__getitem__`'s warnings were raw lines before the error line. A process the code forks
    that comes back ends at once (`forks_ended`), and code that closes the descriptors
    pipeplan holds is refused (`held_descriptors_kept`): the fortieth round. Code that rebinds
    sys.stdout, removes environment variables, or changes `logging.disable` or lowers the
    recursion limit is refused too (`process_state_kept`), as is code that replaces a method
    of torch's classes (`functions_kept`): the forty-first round. So is code that patches or
    closes a console stream, or changes pipeplan's loggers (`process_state_kept`), leaves a
    saved-tensor hook of autograd's installed (`autograd_state_kept`), or changes sys.path,
    sys.meta_path or the modules already imported (`import_system_kept`): the forty-second.
    So is code that leaves a mode of torch's entered (`torch_modes_kept`): the forty-third.
    So is code that lowers torch's float32 precision or changes another backend setting
    (`torch_state_kept`), registers a kernel of torch's operators (`kernels_kept`), changes
    copyreg's reducers (`pickling_kept`), changes the handlers of the stop signals or blocks
    them, arms an interval timer, moves tempfile's folder, registers an exit callback or adds
    an audit hook (`process_state_kept`): the forty-fourth. The module's import and its
    function (`wide`) hold every module of WIDE_PACKAGES too, code that execs another program
    is kept out (`_audit`), and the writes of the threads it leaves running are held
    (`log.DATA_THREADS`): the forty-sixth. So is code that leaves a global hook of torch's
    registered (`global_hooks_kept`): the sixty-first.

        with _contained("m:load", f"reading train item {index}"):
            value = dataset[index]
    """
    held = io.StringIO()
    raw: list[bytes] = []
    if is_command_process():  # what this code starts is ended even if the command is killed
        leftovers.watch_command()
    _watch_installed()
    try:
        with (
            _user_code(),
            warnings.catch_warnings(record=True) as caught,
            contextlib.redirect_stderr(held),
            descriptor_2_held(raw),
            descriptor_1_kept(),
            # Innermost, put back first: pipeplan's own code above uses os.dup2 and the like.
            # torch's settings last of all: setting the default dtype rebinds torch.Storage,
            # which is the setting's change, not a function's.
            limits_kept(spec, doing),
            functions_kept(spec, doing, wide),
            # Put back after torch's settings: the default device is a mode on torch's stack.
            torch_modes_kept(spec, doing),
            kernels_kept(spec, doing),
            torch_state_kept(spec, doing),
            autograd_state_kept(spec, doing),
            global_hooks_kept(spec, doing),
            hooks_kept(spec, doing),
            held_descriptors_kept(spec, doing),
            # sys.path, sys.modules, …: put back before the holds above, whose code may import.
            import_system_kept(spec, doing),
            # Inside redirect_stderr (a sys.stderr the code rebinds is seen, not undone), and
            # first to end after a fork: a recursion limit it lowered is put back first.
            process_state_kept(spec, doing),
            pickling_kept(spec, doing),
            # What the holds above run on, put back before any of them compares.
            guard_kept(spec, doing),
            # Innermost of all: a child the code forked ends before any of the above runs.
            forks_ended(),
        ):
            yield
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) or exc.code is None else 1
        said = _lines(_held_text(held) + _text(raw))
        if isinstance(exc.code, str):  # sys.exit("why"): Python would print it, exit 1
            said.append(exc.code)
        last = f"; its last line on stderr: {quoted(said[-1])}" if said else ""
        raise BadArgumentError(
            f"data {quoted(spec)}: {doing} exited (code {code or 0}){last}"
        ) from None
    except UserBaseException as exc:
        raise BadArgumentError(f"data {quoted(spec)}: {doing} raised {_one_line(exc)}") from None
    _pass_on(spec, caught, _held_text(held) + _text(raw))


def _held_text(held: io.StringIO) -> str:
    """What the code wrote to sys.stderr (`held`), or nothing where it closed that stream
    (`sys.stderr.close()`: `process_state_kept` says so, unless the code exited first)."""
    return "" if held.closed else held.getvalue()


def _autocast(kind: str) -> tuple[bool, torch.dtype]:
    return torch.is_autocast_enabled(kind), torch.get_autocast_dtype(kind)


def _set_autocast(kind: str, state: tuple[bool, torch.dtype]) -> None:
    torch.set_autocast_enabled(kind, state[0])
    torch.set_autocast_dtype(kind, state[1])


# torch's float32 precision is kept in two APIs that read each other's settings: the old
# (`torch.set_float32_matmul_precision`, `allow_tf32` of cuBLAS and cuDNN) and the new, per
# backend and op (`torch.backends.mkldnn.matmul.fp32_precision = "bf16"`, …, whose "none"
# takes its parent's). Held together: "medium" sets the new API's matmul precisions too, and
# the old API's reads fail where code mixed the two ("mix of the legacy and new APIs").
_C = torch._C
_FP32_OLD = (
    ("matmul precision", _C._get_float32_matmul_precision, _C._set_float32_matmul_precision),
    ("cuBLAS TF32", _C._get_cublas_allow_tf32, _C._set_cublas_allow_tf32),
    ("cuDNN TF32", _C._get_cudnn_allow_tf32, _C._set_cudnn_allow_tf32),
)
_FP32_NEW = (
    ("generic", "all"),
    *itertools.product(("cuda", "mkldnn"), ("all", "matmul", "conv", "rnn")),
)


def _fp32_precision() -> dict[str, Any]:
    """Each float32 precision setting of both APIs: {"matmul precision": "highest", …,
    "mkldnn matmul": "none"}; an old API's setting its getter refuses to read (the two APIs
    mixed) is None."""
    held: dict[str, Any] = {}
    for what, get, _ in _FP32_OLD:
        try:
            held[what] = get()
        except RuntimeError:
            held[what] = None
    for backend, op in _FP32_NEW:
        held[f"{backend} {op}"] = _C._get_fp32_precision_getter(backend, op)
    return held


def _set_fp32_precision(held: dict[str, Any]) -> None:
    """The old API's settings first (setting one sets the new API's), then the new API's."""
    for what, _, put in _FP32_OLD:
        if held[what] is not None:
            put(held[what])
    for backend, op in _FP32_NEW:
        _C._set_fp32_precision_setter(backend, op, held[f"{backend} {op}"])


# What `torch.set_flush_denormal` sets (the CPU's flush-to-zero of this thread) torch gives no
# getter of: read from the arithmetic it changes, Python's own (no torch op, which a mode or a
# kernel the code left in place would run).
_SMALLEST_NORMAL, _TWO = sys.float_info.min, 2.0


def _flushes_denormals() -> bool:
    return _SMALLEST_NORMAL / _TWO == 0.0


def _backend_flag(path: str) -> tuple[Callable[[], Any], Callable[[Any], None]]:
    """How to read and set `torch.backends.<path>` ("cudnn.benchmark")."""
    owner, _, name = path.rpartition(".")
    module = operator.attrgetter(owner)(torch.backends)
    return partial(getattr, module, name), partial(setattr, module, name)


def _sdp_backends() -> dict[str, bool]:
    cuda = torch.backends.cuda
    return {
        "flash": cuda.flash_sdp_enabled(),
        "memory-efficient": cuda.mem_efficient_sdp_enabled(),
        "math": cuda.math_sdp_enabled(),
        "cuDNN": cuda.cudnn_sdp_enabled(),
        "math fp16/bf16 reduction": cuda.fp16_bf16_reduction_math_sdp_allowed(),
    }


def _set_sdp_backends(held: dict[str, bool]) -> None:
    cuda = torch.backends.cuda
    cuda.enable_flash_sdp(held["flash"])
    cuda.enable_mem_efficient_sdp(held["memory-efficient"])
    cuda.enable_math_sdp(held["math"])
    cuda.enable_cudnn_sdp(held["cuDNN"])
    cuda.allow_fp16_bf16_reduction_math_sdp(held["math fp16/bf16 reduction"])


# What data code should do instead of changing one of the backends' settings below.
_AROUND = "set it only around your own code that needs it, and back before returning"

# The backends' settings that choose the kernels and precision a rank's arithmetic runs in
# (the forty-fourth round: `torch.set_float32_matmul_precision("medium")` in a `load` trained
# an fp32 run's matmuls in bfloat16 on a CPU with avx512_bf16, silently, its weights 2.7e-5
# apart after 2 steps). Each read and set as torch does: how it is called, its reader and
# setter, and what to do instead (`_TORCH_SETTINGS`). Not held: the settings that ask for
# determinism or let cuDNN benchmark (`torch.use_deterministic_algorithms`, cudnn's and
# mkldnn's `deterministic` and `benchmark`, filling uninitialized memory), which a user's
# seed-everything helper sets on purpose for the whole run, and which choose among kernels
# of the same precision rather than change it.
_BACKEND_SETTINGS: tuple[tuple[str, Callable[[], Any], Callable[[Any], None], str], ...] = (
    (
        "float32 precision",
        _fp32_precision,
        _set_fp32_precision,
        "pipeplan trains float32 in full precision; " + _AROUND,
    ),
    (
        "cuBLAS fp16 reduced-precision reduction",
        _C._get_cublas_allow_fp16_reduced_precision_reduction,
        partial(setattr, torch.backends.cuda.matmul, "allow_fp16_reduced_precision_reduction"),
        _AROUND,
    ),
    (
        "cuBLAS bf16 reduced-precision reduction",
        _C._get_cublas_allow_bf16_reduced_precision_reduction,
        partial(setattr, torch.backends.cuda.matmul, "allow_bf16_reduced_precision_reduction"),
        _AROUND,
    ),
    (
        "cuBLAS fp16 accumulation",
        *_backend_flag("cuda.matmul.allow_fp16_accumulation"),
        _AROUND,
    ),
    (
        "CPU fp16 reduced-precision reduction",
        _C._get_cpu_allow_fp16_reduced_precision_reduction,
        _C._set_cpu_allow_fp16_reduced_precision_reduction,
        _AROUND,
    ),
    *(
        (f"backends.{path}", *_backend_flag(path), fix)
        for path, fix in (
            ("cudnn.enabled", "use `with torch.backends.cudnn.flags(...)`"),
            ("mkldnn.enabled", "use `with torch.backends.mkldnn.flags(...)`"),
            ("opt_einsum.enabled", _AROUND),
            ("opt_einsum.strategy", _AROUND),
        )
    ),
    (
        "scaled-dot-product-attention backends",
        _sdp_backends,
        _set_sdp_backends,
        "use `with torch.nn.attention.sdpa_kernel(...)`",
    ),
    (
        "multi-head attention fast path",
        torch.backends.mha.get_fastpath_enabled,
        torch.backends.mha.set_fastpath_enabled,
        _AROUND,
    ),
    ("flushing of denormal numbers", _flushes_denormals, torch.set_flush_denormal, _AROUND),
)


# Inference mode is left only by the guard that entered it: one held for the process's life
# puts it back where data code entered `torch.inference_mode()` and kept it (the grad mode it
# also turns off is put back as its own setting).
_INFERENCE_GUARDS: list[Any] = []

# torch's settings that are the process's, not a tensor's, and that a rank trains in: what
# they are called, how to read and set one, and what data code should do instead. The default
# dtype and device make the model's tensors, the grad mode its backward, autocast its
# precision (the thirty-eighth round: autocast turned on in a `__getitem__` trained an fp32
# run in bfloat16, silently; a default device of meta failed in torch's words).
_TORCH_SETTINGS: tuple[tuple[str, Callable[[], Any], Callable[[Any], None], str], ...] = (
    (
        "default dtype",
        torch.get_default_dtype,
        torch.set_default_dtype,
        "make tensors of the dtype you want with .to(dtype)",
    ),
    (
        "grad mode",
        torch.is_grad_enabled,
        torch.set_grad_enabled,
        "use `with torch.no_grad():`",
    ),
    (
        "inference mode",
        torch.is_inference_mode_enabled,
        lambda on: _INFERENCE_GUARDS.append(torch._C._InferenceMode(on)),
        "use `with torch.inference_mode():` around what it should cover",
    ),
    (
        "default device",
        torch.get_default_device,
        torch.set_default_device,
        "make tensors on the device you want with device=",
    ),
    *(
        (f"{kind} autocast", partial(_autocast, kind), partial(_set_autocast, kind), fix)
        for kind, fix in (
            ("cpu", "use `with torch.autocast('cpu'):` around what it should cover"),
            ("cuda", "use `with torch.autocast('cuda'):` around what it should cover"),
        )
    ),
    *_BACKEND_SETTINGS,
)


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        return {True: "on", False: "off"}[value]
    if isinstance(value, tuple) and isinstance(value[1], torch.dtype):  # autocast
        return f"on ({value[1]})" if value[0] else "off"
    if isinstance(value, tuple):  # cuBLAS's reduced-precision reductions: (allowed, split-K)
        return f"{_shown(value[0])} (split-K {_shown(value[1])})"
    if isinstance(value, dict):  # settings held together: {"flash": True, …}
        return ", ".join(
            f"{key} {'mixed' if on is None else _shown(on)}" for key, on in value.items()
        )
    return str(value)


def _changed_parts(old: Any, new: Any) -> tuple[Any, Any]:
    """Of settings held together (dicts), those the code changed; any other value whole."""
    if isinstance(old, dict) and isinstance(new, dict):
        keys = [key for key in old if old[key] != new.get(key)]
        return {key: old[key] for key in keys}, {key: new.get(key) for key in keys}
    return old, new


@contextlib.contextmanager
def torch_state_kept(spec: str, doing: str) -> Iterator[None]:
    """The user's data code (`doing`) leaves torch's process-wide settings (`_TORCH_SETTINGS`:
    default dtype and device, grad mode, inference mode, autocast, and the backends' settings
    of precision and kernels, `_BACKEND_SETTINGS`) as it found them, or is refused in one
    line; they are put back either way, however it ends. Found by the
    thirty-seventh round: a `load` that called `torch.set_default_dtype(torch.float64)` or
    `torch.set_grad_enabled(False)` failed the run later in torch's words ("Input type
    (float) and bias type (double) should be the same", "step() requires gradients to be
    enabled"), naming no data. Refused, not only put back: data made under the setting it
    chose (float64 tensors) would train other than the user meant, without a word. Every call
    into the data code is held to it: the launcher's and a rank's (`_contained`: the import,
    the function, len() and the checks' items) and a rank's reads as it trains
    (`read_items`, a batch at a time). A setting changed and put back inside (`with
    torch.no_grad():`) is no change. The intra-op thread count is put back too, silently.
    The forty-fourth round: `torch.set_float32_matmul_precision("medium")` trained an fp32
    run's matmuls in bfloat16, silently (the backends' settings add ~25 µs to each call).

        with torch_state_kept("m:load", "the data function"):
            torch.set_default_dtype(torch.float64)
        # BadArgumentError: data 'm:load': the data function changed torch's default dtype
        # to torch.float64 (it was torch.float32); …
    """
    before = [get() for _, get, _, _ in _TORCH_SETTINGS]
    threads = torch.get_num_threads()
    try:
        yield
    finally:
        after = [get() for _, get, _, _ in _TORCH_SETTINGS]
        for (_, _, put, _), old, new in zip(_TORCH_SETTINGS, before, after, strict=True):
            if new != old:
                put(old)
        # Put back without a word: the count changes how fast a rank trains, not what (a
        # `torch.set_num_threads(1)` in a loader is common), and pipeplan gives each rank its
        # share of the cores; kept, a rank of one thread trained on 16 (the thirty-seventh
        # round).
        if torch.get_num_threads() != threads:
            torch.set_num_threads(threads)
    changed, fixes = [], []
    for (what, _, _, fix), old, new in zip(_TORCH_SETTINGS, before, after, strict=True):
        if new != old:
            old, new = _changed_parts(old, new)
            changed.append(f"{what} to {_shown(new)} (it was {_shown(old)})")
            fixes.append(fix)
    if not changed:
        return
    raise BadArgumentError(
        f"data {quoted(spec)}: {doing} changed torch's {' and '.join(changed)}; data code must "
        "leave torch's global settings as it found them, as pipeplan trains in them "
        f"({'; '.join(fixes)})"
    )


# autograd's process-wide state (of this thread) that a backward pass runs in, beyond grad
# mode (`_TORCH_SETTINGS`): the saved-tensor hooks on top of its stack (what every op's
# saved tensors are packed with and read back through), whether those hooks are disabled,
# and anomaly detection. torch keeps the hooks in a stack it lets code read only the top of.
_AUTOGRAD = torch._C._autograd


def _saved_tensors_hooks() -> tuple[Any, Any] | None:
    """The (pack, unpack) hooks on top of autograd's default stack, or None: none set."""
    return _AUTOGRAD._top_saved_tensors_default_hooks(True)


def _same_hooks(one: tuple[Any, Any] | None, other: tuple[Any, Any] | None) -> bool:
    """The same hooks (by identity: torch gives a new tuple at each read)."""
    if one is None or other is None:
        return one is other
    return one[0] is other[0] and one[1] is other[1]


def _put_back_saved_tensors_hooks(old: tuple[Any, Any] | None) -> None:
    """Pop what the code pushed until `old` is on top again (a bound: a code that pushed in a
    loop); where the code popped below `old`, `old` is pushed back."""
    for _ in range(10_000):
        top = _saved_tensors_hooks()
        if _same_hooks(top, old) or top is None:
            break
        _AUTOGRAD._pop_saved_tensors_default_hooks()
    if old is not None and not _same_hooks(_saved_tensors_hooks(), old):
        _AUTOGRAD._push_saved_tensors_default_hooks(*old)


def _hooks_shown(hooks: tuple[Any, Any] | None) -> str:
    if hooks is None:
        return "none"
    return " and ".join(
        f"{what} {getattr(hook, '__qualname__', type(hook).__name__)}"
        for what, hook in zip(("pack", "unpack"), hooks, strict=True)
    )


def _anomaly() -> tuple[bool, bool]:
    return torch.is_anomaly_enabled(), torch.is_anomaly_check_nan_enabled()


@contextlib.contextmanager
def autograd_state_kept(spec: str, doing: str) -> Iterator[None]:
    """The user's data code (`doing`) leaves autograd's default saved-tensor hooks (the top
    of their stack, by identity), their switch (`disable_saved_tensors_hooks`) and anomaly
    detection as it found them, or is refused in one line; each is put back, however it
    ends, and autograd's multithreading switch is put back without a word (it changes how
    fast a backward runs, not what, as the thread count `torch_state_kept` puts back). Found
    by the forty-second round: a `load` that entered
    `torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t:
    torch.zeros_like(t)).__enter__()` and never left it trained every step of `pipeplan run`
    on zeroed saved tensors (the losses apart from step 2), wrote the model, then failed as
    "run.jsonl:8: … grad_norms lacks active layer 0", blaming the records. Held where
    `torch_state_kept` is (~1 µs). A `with saved_tensors_hooks(...):` left before the code
    returns is no change.

        with autograd_state_kept("m:load", "the data function"):
            torch.autograd.graph.saved_tensors_hooks(pack, unpack).__enter__()
        # BadArgumentError: data 'm:load': the data function set autograd's saved-tensor
        # hooks to pack <lambda> and unpack <lambda> (it was none); …
    """
    hooks = _saved_tensors_hooks()
    disabled = _AUTOGRAD._saved_tensors_hooks_get_disabled_error_message()
    anomaly = _anomaly()
    threaded = torch._C._is_multithreading_enabled()
    try:
        yield
    finally:
        said = []
        now = _saved_tensors_hooks()
        if not _same_hooks(now, hooks):
            _put_back_saved_tensors_hooks(hooks)
            said.append(
                f"set autograd's saved-tensor hooks to {_hooks_shown(now)} (it was "
                f"{_hooks_shown(hooks)})"
            )
        if _AUTOGRAD._saved_tensors_hooks_get_disabled_error_message() != disabled:
            if disabled is None:
                _AUTOGRAD._saved_tensors_hooks_enable()
                said.append("disabled autograd's saved-tensor hooks")
            else:
                _AUTOGRAD._saved_tensors_hooks_disable(disabled, False)
                said.append("changed whether autograd's saved-tensor hooks are disabled")
        if _anomaly() != anomaly:
            turned = "on" if torch.is_anomaly_enabled() else "off"
            torch.set_anomaly_enabled(*anomaly)
            said.append(f"turned autograd's anomaly detection {turned}")
        if torch._C._is_multithreading_enabled() != threaded:
            torch._C._set_multithreading_enabled(threaded)
    if not said:
        return
    raise BadArgumentError(
        f"data {quoted(spec)}: {doing} {' and '.join(said)}; data code must leave autograd's "
        "global state as it found it, as pipeplan's backward pass runs in it (put back now; "
        "use `with torch.autograd.graph.saved_tensors_hooks(...):` or `with "
        "torch.autograd.detect_anomaly():` around what it should cover)"
    )


# torch's global hooks, which run for every module or optimizer of the process: (the module
# that keeps them, its name for them, the function that registers one). Each is a dict of
# hooks by their handle's id (`_global_is_full_backward_hook`: whether the backward ones are
# full hooks, set as one is registered).
_MODULE = importlib.import_module("torch.nn.modules.module")
_OPTIMIZER = importlib.import_module("torch.optim.optimizer")  # torch.optim deletes the name
_GLOBAL_HOOKS = tuple(
    (module, name, registers)
    for module, name, registers in (
        (_MODULE, "_global_forward_hooks", "register_module_forward_hook"),
        (_MODULE, "_global_forward_hooks_with_kwargs", "register_module_forward_hook"),
        (_MODULE, "_global_forward_hooks_always_called", "register_module_forward_hook"),
        (_MODULE, "_global_forward_pre_hooks", "register_module_forward_pre_hook"),
        (_MODULE, "_global_backward_hooks", "register_module_full_backward_hook"),
        (_MODULE, "_global_is_full_backward_hook", "register_module_full_backward_hook"),
        (_MODULE, "_global_backward_pre_hooks", "register_module_full_backward_pre_hook"),
        (
            _MODULE,
            "_global_module_registration_hooks",
            "register_module_module_registration_hook",
        ),
        (
            _MODULE,
            "_global_parameter_registration_hooks",
            "register_module_parameter_registration_hook",
        ),
        (
            _MODULE,
            "_global_buffer_registration_hooks",
            "register_module_buffer_registration_hook",
        ),
        (_OPTIMIZER, "_global_optimizer_pre_hooks", "register_optimizer_step_pre_hook"),
        (_OPTIMIZER, "_global_optimizer_post_hooks", "register_optimizer_step_post_hook"),
    )
    if hasattr(module, name)
)


def _global_hooks() -> list[tuple[Any, Any]]:
    """Each of `_GLOBAL_HOOKS` now: (the object, a copy of its contents where a dict)."""
    held = []
    for module, name, _ in _GLOBAL_HOOKS:
        value = getattr(module, name)
        held.append((value, value.copy() if isinstance(value, dict) else value))
    return held


@contextlib.contextmanager
def global_hooks_kept(spec: str, doing: str) -> Iterator[None]:
    """The user's data code (`doing`) leaves torch's global hooks (`_GLOBAL_HOOKS`: of every
    module's forward and backward passes and registrations, and of every optimizer's step)
    as it found them, or is refused in one line naming the kind it left registered; each is
    put back (the hooks it registered taken off), however the code ends. Found by the
    sixty-first round: a `load` whose `register_module_forward_hook` zeroed every
    nn.Linear's output, or whose `register_optimizer_step_pre_hook` zeroed the gradients
    before each step, trained nothing, exit 0. Held where `torch_state_kept` is (~10 µs). A
    hook removed before the code returns (its handle's `remove()`) is no change.

        with global_hooks_kept("m:load", "the data function"):
            torch.nn.modules.module.register_module_forward_hook(zero)
        # BadArgumentError: data 'm:load': the data function left torch's global hooks
        # registered (register_module_forward_hook); …
    """
    held = _global_hooks()
    try:
        yield
    finally:
        said = []
        for (module, name, registers), (was, contents) in zip(_GLOBAL_HOOKS, held, strict=True):
            now = getattr(module, name, None)
            if isinstance(was, dict):
                # The same hooks in the same order, compared in C (the dicts are empty as
                # pipeplan trains).
                if (
                    now is was
                    and len(now) == len(contents)
                    and all(map(operator.is_, now.values(), contents.values()))
                ):
                    continue
                was.clear()
                was.update(contents)
            elif now is was:
                continue
            setattr(module, name, was)
            said.append(registers)
    if not said:
        return
    raise BadArgumentError(
        f"data {quoted(spec)}: {doing} left torch's global hooks registered "
        f"({', '.join(dict.fromkeys(said))}); data code must leave them as it found them, as "
        "they run in every module and optimizer pipeplan trains with (taken off now; "
        "register a hook on your own module, or remove a global one before returning)"
    )


# torch's two stacks of modes, which every torch call (function modes: `TorchFunctionMode`)
# and every op under autograd (dispatch modes: `TorchDispatchMode`) runs through, for the
# process (of this thread): how to read one, pop its top and push on it. The function stack's
# DeviceContext is the default device, held by `torch_state_kept` (torch keeps it at the
# bottom); it is no mode of the code's here.
_DISPATCH = _python_dispatch


def _function_modes() -> list[Any]:
    return [torch._C._get_function_stack_at(i) for i in range(torch._C._len_torch_function_stack())]


def _code_function_modes() -> list[Any]:
    """The function modes but the default device's (`torch_state_kept` holds that)."""
    return [mode for mode in _function_modes() if not isinstance(mode, _DeviceContext)]


def _dispatch_modes() -> list[Any]:
    return _DISPATCH._get_current_dispatch_mode_stack()


def _same_modes(one: list[Any], other: list[Any]) -> bool:
    """The same modes in the same order, by identity (a mode's class may define `==`)."""
    return len(one) == len(other) and all(a is b for a, b in zip(one, other, strict=True))


def _pop_dispatch_mode(mode: Any) -> None:
    """`mode`, on top of the dispatch stack, popped as its own `with` would (torch's
    `TorchDispatchMode.__exit__`, not the class's own: that is the code's), which also puts
    back torch's flags of whether a mode is on; one pushed without entering it is popped
    alone."""
    try:
        _DISPATCH.TorchDispatchMode.__exit__(mode, None, None, None)
    except Exception:  # pushed bare (`_push_mode`): no flags of its own to put back
        _DISPATCH._pop_mode(getattr(mode, "_mode_key", None))


def _function_modes_put_back(held: list[Any]) -> None:
    """The function stack as `held` (by identity) again: what the code pushed on it popped,
    a mode it popped pushed back; a DeviceContext (the default device) stays at the bottom."""
    now = _function_modes()
    devices = [mode for mode in now if isinstance(mode, _DeviceContext)]
    for _ in now:
        torch._C._pop_torch_function_stack()
    for mode in devices + [mode for mode in held if not isinstance(mode, _DeviceContext)]:
        torch._C._push_on_torch_function_stack(mode)


def _dispatch_modes_put_back(held: list[Any]) -> None:
    """The dispatch stack as `held` (by identity) again: what the code pushed popped off the
    top (a bound: code that pushed in a loop), and a held mode it popped pushed back."""
    for _ in range(10_000):
        now = _dispatch_modes()
        if not now or _same_modes(now, held[: len(now)]):
            break
        _pop_dispatch_mode(now[-1])
    for mode in held[len(_dispatch_modes()) :]:
        _DISPATCH._push_mode(mode)


def _modes_changed(kind: str, before: list[Any], after: list[Any]) -> tuple[list[str], list[Any]]:
    """What the code did to the stack of `kind` ("function", "dispatch"): each mode it left
    pushed, by its class, and each it took off; and the modes it left pushed."""
    pushed = [mode for mode in after if not any(mode is old for old in before)]
    popped = [mode for mode in before if not any(mode is new for new in after)]
    said = [f"left torch's {kind} mode {name} entered" for name in _classes_of(pushed)]
    said += [f"took torch's {kind} mode {name} off its stack" for name in _classes_of(popped)]
    # The same modes in another order: said as what it is.
    return said or [f"reordered torch's {kind} modes"], pushed


def _classes_of(modes: list[Any]) -> list[str]:
    """Each class of `modes` once, by its qualified name: "Zero (3 times)"."""
    counts: dict[str, int] = {}
    for mode in modes:
        name = type(mode).__qualname__
        counts[name] = counts.get(name, 0) + 1
    return [f"{name} ({count} times)" if count > 1 else name for name, count in counts.items()]


@contextlib.contextmanager
def torch_modes_kept(spec: str, doing: str) -> Iterator[None]:
    """The user's data code (`doing`) leaves torch's stacks of modes (`TorchFunctionMode`,
    `TorchDispatchMode`: by identity) as it found them, or is refused in one line naming each
    mode it left entered (its class); each stack is put back, however the code ends. Found by
    the forty-third round: a `load` that entered a TorchFunctionMode zeroing
    `torch.nn.functional.linear`'s output (`Zero().__enter__()`) and never left it trained
    every step of `pipeplan run` under it, each loss exactly ln 2, exit 0; a TorchDispatchMode
    zeroing `aten.addmm` did the same. A mode used in a `with` the code leaves is no change;
    the default device (a DeviceContext at the function stack's bottom) is
    `torch_state_kept`'s, which puts it back first. Held where `torch_state_kept` is (a few
    µs: the stacks are empty as pipeplan trains).

        with torch_modes_kept("m:load", "the data function"):
            Zero().__enter__()
        # BadArgumentError: data 'm:load': the data function left torch's function mode Zero
        # entered; data code must leave torch's modes as it found them, …
    """
    functions, dispatches = _code_function_modes(), _dispatch_modes()
    try:
        yield
    finally:
        said, pushed = [], []
        for kind, held, now, put_back in (
            ("function", functions, _code_function_modes, _function_modes_put_back),
            ("dispatch", dispatches, _dispatch_modes, _dispatch_modes_put_back),
        ):
            after = now()
            if not _same_modes(after, held):
                changes, entered = _modes_changed(kind, held, after)
                said, pushed = said + changes, pushed + entered
                put_back(held)
    if not said:
        return
    fix = (
        f"use `with {type(pushed[0]).__name__}():` around what it should cover"
        if pushed
        else "leave the modes entered before it where they are"
    )
    raise BadArgumentError(
        f"data {quoted(spec)}: {doing} {' and '.join(said)}; data code must leave torch's "
        "modes (TorchFunctionMode, TorchDispatchMode) as it found them, as every op pipeplan "
        f"trains with runs through the modes entered (put back now; {fix})"
    )


# The kernels code registers for torch's operators from Python (`torch.library.Library(ns,
# "IMPL").impl(…)`, `torch.library.impl`, `register_kernel`), as torch.library keeps them:
# "aten/gelu/CPU" in `_impls` (some 1,800 of torch's own) and in the Library's `_op_impls`,
# each Library undone by a finalizer (`_del_library`). Held for the namespaces of the
# operators a rank computes and talks with; torch registers kernels of its own other
# namespaces as its modules are imported (143 as torch._dynamo is: `_c10d_functional`, …).
# A registration made below torch.library (`torch._C._dispatch_library` itself) is in no
# table Python can read short of dumping every operator's dispatch table (`_dispatch_dump`,
# some 2,800 operators): not held.
_LIBRARY = torch.library
# The class itself, not looked up in weakref as the check runs: data code that rebound
# `weakref.finalize` is refused by `functions_kept`, which puts it back after this check.
_FINALIZE = weakref.finalize
# Not prims: its kernels serve torch.compile's decompositions, never an eager op a rank runs,
# and torch registers some as its compiler loads (`torch._inductor.lowering`: a `load`
# compiling a function was refused as registering prims::_unsafe_index_put_, the sixtieth
# round).
_HELD_NAMESPACES = ("aten", "c10d")
_seen_kernels: set[str] = set()  # `_impls` as last seen outside data code


def _finalizers_made() -> int:
    """A mark of the finalizers made so far (Python numbers them in order; taking a number
    leaves a gap, nothing else)."""
    return next(_FINALIZE._index_iter)


def _libraries(since: int = -1) -> list[Any]:
    """The live torch.library.Library objects, of those made after the mark `since`."""
    found = []
    for info in list(_FINALIZE._registry.values()):
        if info.func is _LIBRARY._del_library and info.index > since:
            library = info.weakref()
            if library is not None:
                found.append(library)
    return found


def _held_kernel(key: str, made: list[Any]) -> bool:
    """Whether the kernel `key` ("ns/op/key") is of an operator of `_HELD_NAMESPACES` that none
    of the Libraries the code `made` defined (code may register kernels of its own operators:
    `torch.library.custom_op`)."""
    namespace, name, _ = key.split("/", 2)
    operator_ = f"{namespace}::{name.split('.')[0]}"
    return namespace in _HELD_NAMESPACES and not any(
        qualname.split(".")[0] == operator_ for library in made for qualname in library._op_defs
    )


def _kernel_shown(key: str) -> str:
    namespace, name, dispatch = key.split("/", 2)
    return f"{namespace}::{name} for {dispatch or 'every key'}"


@contextlib.contextmanager
def kernels_kept(spec: str, doing: str) -> Iterator[None]:
    """The user's data code (`doing`) registers no kernel of an operator of torch's that a rank
    computes or talks with (`_HELD_NAMESPACES`; torch.library's tables of Python kernels) and
    no fallback kernel (a Library on the namespace "_"), or is refused in one line naming
    each; the Library it made them with is destroyed (`Library._destroy`, as torch's own
    `_scoped_library` does), however the code ends. Found by the forty-fourth round: a `load`
    that ran `torch.library.Library("aten", "IMPL").impl("gelu", lambda x, approximate="none":
    torch.relu(x), "CPU")` (the Library kept) trained every rank's ViT with ReLU in place of
    GELU and exported it as a GELU model, exit 0, torch's warning passed on as 7 lines.
    Kernels of the code's own operators (`torch.library.custom_op`) are no change. Not held:
    a registration below torch.library (see `_LIBRARY`), and one through a Library made before
    the code ran of a kernel Python had already registered (no table changes). A kernel added
    to a Library made before is refused but cannot be taken back alone. Held where
    `torch_state_kept` is (~0.5 µs: two lengths and a mark, `_impls` compared only when one
    moved).

        with kernels_kept("m:load", "the data function"):
            KEEP = torch.library.Library("aten", "IMPL")
            KEEP.impl("gelu", relu, "CPU")
        # BadArgumentError: data 'm:load': the data function registered the kernel
        # aten::gelu for CPU; data code must leave …
    """
    if len(_LIBRARY._impls) != len(_seen_kernels):  # torch's own, since: the baseline
        _seen_kernels.clear()
        _seen_kernels.update(_LIBRARY._impls)
    mark = _finalizers_made()
    refused: list[str] = []
    fallbacks: list[Any] = []
    kept: list[Any] = []
    try:
        yield
    finally:
        made = _libraries(mark) if _finalizers_made() != mark + 1 else []
        if made or len(_LIBRARY._impls) != len(_seen_kernels):
            added = (_LIBRARY._impls - _seen_kernels).union(
                *(library._op_impls for library in made)
            )
            refused = sorted(key for key in added if _held_kernel(key, made))
            fallbacks = [library for library in made if library.ns == "_"]
            for library in _libraries() if refused or fallbacks else []:
                if library in fallbacks or library._op_impls & set(refused):
                    if any(library is new for new in made):
                        library._destroy()
                    else:
                        kept.append(library)
            _seen_kernels.clear()
            _seen_kernels.update(_LIBRARY._impls)
    if not refused and not fallbacks:
        return
    said = []
    if refused:
        more = f" and {len(refused) - 3} more" if len(refused) > 3 else ""
        kernels = ", ".join(_kernel_shown(key) for key in refused[:3])
        said.append(f"registered the kernel{'s' if len(refused) > 1 else ''} {kernels}{more}")
    if fallbacks:
        said.append("made a Library of fallback kernels (namespace '_')")
    back = "put back now" if not kept else "not put back: a Library made before the code holds it"
    raise BadArgumentError(
        f"data {quoted(spec)}: {doing} {' and '.join(said)}; data code must leave the kernels "
        "of torch's operators as they were, as every op pipeplan trains with runs the kernel "
        f"registered ({back}; define an operator of your own with `torch.library.custom_op` "
        "for what your code computes)"
    )


# The modules whose functions pipeplan trains, talks between its ranks and writes its records
# with (by the names code calls them by). Every function, class and submodule at their top
# level is held (`functions_kept`), whatever it is called: a list of names would miss the one
# a data module chose. Found by the thirty-ninth round: a data module's
# `torch.distributed.all_reduce = lambda *a, **k: None` trained the replicas apart with exit 0.
KEPT_MODULES = (
    "builtins",
    "io",
    "json",
    "logging",
    "os",
    "os.path",
    "copyreg",
    "pickle",
    "shutil",
    "signal",
    "tempfile",
    "time",
    "torch",
    "torch.autograd",
    "torch.distributed",
    "torch.distributed.distributed_c10d",
    "torch.nn",
    "torch.nn.functional",
    "torch.optim",
    # The modules of the optimizer a rank steps (AdamW, an Adam) and of its base: `Adam.step`
    # looks up the functions it calls in its own module at each step (the forty-fourth round:
    # `torch.optim.adam._single_tensor_adam = lambda *a, **k: None` in a load "trained" a
    # model that never moved, exit 0). Only those pipeplan steps with (~25 µs a call each
    # held module adds; torch.optim.lr_scheduler's classes would add 20 µs more).
    "torch.optim.adam",
    "torch.optim.adamw",
    "torch.optim.optimizer",
    "torch.utils._foreach_utils",
    # What torch.save writes a checkpoint with, and the functions its pickles name (the
    # forty-fourth round's neighbours of copyreg's table, `pickling_kept`).
    "torch.serialization",
    # The lines a run prints, its progress and warnings (the forty-second round's list:
    # `logging.Logger.info = no_op` in a load lost every progress line, exit 0).
    "pipeplan.log",
    # What the records are named, hashed, checked and written with: the forty-sixth round's
    # `hashlib.sha256 = hashlib.md5` in a load put a 32-digit digest into a profile identity,
    # a 61-line traceback; pathlib's Path and csv's writer are the files' own.
    "hashlib",
    "math",
    "pathlib",
    "csv",
    # `weakref.finalize = None` failed pipeplan's own clean-up of kernels in 22 tracebacks.
    "weakref",
    # The pipeline every rank trains with: its stages (`PipelineStage`), its schedules
    # (`Schedule1F1B`, `ScheduleGPipe`) and the backward they run (`stage_backward`, looked up
    # in its module at each call). The sixty-first round: `stage_backward = no_op` set in a
    # `__getitem__`, where only these modules are held, trained nothing, exit 0.
    "torch.distributed.pipelining.stage",
    "torch.distributed.pipelining.schedules",
    "torch.distributed.pipelining._backward",
    # pipeplan's own modules whose functions a rank looks up as it trains (`check_data_facts`,
    # `frozen_forward`, …): the sixty-first round's bound method at check_data_facts.
    "executor.worker",
    "executor.parallel",
    "executor.task",
)
_kept_modules: list[tuple[str, types.ModuleType]] = []
# The classes at the top level of KEPT_MODULES, their methods held as the modules' functions
# are (`functions_kept`): torch.Tensor, torch.nn.Module and every layer, torch.optim.Optimizer
# and every optimizer, torch.autograd.Function, torch.Generator, the process group's classes,
# json.JSONEncoder, … Found by the forty-first round: a `load` that set
# `torch.optim.AdamW.step = no_op` made `pipeplan run` "train" nothing with exit 0. Every one of
# them, not a list of names (which would miss the one a data module chose), except the types
# Python lets no code change (`int`, torch._C.TensorBase: Py_TPFLAGS_IMMUTABLETYPE); with torch
# 2.13 some 600 classes and 6,600 attributes, whose snapshot and comparison add ~0.6 ms of CPU
# to each call into the data code (`functions_kept`). A class's base outside these modules (a
# layer's nn.Module is in) or a class nested deeper (torch.distributed.tensor's) is not.
_kept_classes: list[tuple[str, type]] = []
_IMMUTABLE_TYPE = 1 << 8  # Py_TPFLAGS_IMMUTABLETYPE (Python 3.10+): `int.x = 1` is a TypeError
_HEAP_TYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class made by a class statement, not C


def _modules_kept() -> list[tuple[str, types.ModuleType]]:
    """KEPT_MODULES, imported once: (the name code calls it by, the module); one this torch
    lacks (a build without torch.distributed) is left out."""
    if not _kept_modules:
        for name in KEPT_MODULES:
            with contextlib.suppress(ImportError):
                _kept_modules.append((name, importlib.import_module(name)))
    return _kept_modules


def _classes_kept() -> list[tuple[str, type]]:
    """The classes at the top level of KEPT_MODULES that code can change (`_kept_classes`),
    listed once, on the first call into the data code (before any of it runs), each by the
    first name code calls it by: ("torch.optim.AdamW", AdamW)."""
    if not _kept_classes:
        seen: set[int] = set()
        for name, module in _modules_kept():
            for key, value in list(vars(module).items()):
                # `type(...)`: an object may warn when its `__class__` is read (`_held`).
                if not issubclass(type(value), type) or id(value) in seen:
                    continue
                seen.add(id(value))
                if not value.__flags__ & _IMMUTABLE_TYPE:
                    _kept_classes.append((f"{name}.{key}", value))
    return _kept_classes


# Held besides KEPT_MODULES while the data module is imported and its function runs (once
# each in a process, where a snapshot of ~1,700 modules and ~5,300 classes costs ~50 ms once,
# not a batch's ~25 µs a module): every module already imported of Python's standard library
# and of the packages pipeplan runs on, and their classes. Found by the forty-sixth round:
# `re.compile`, `subprocess.run`, `random.random`, `numpy.asarray` or transformers'
# `PreTrainedModel.save_pretrained` replaced in a `load` was not refused, and the run then
# failed blaming the model, or at its end.
WIDE_PACKAGES = frozenset(sys.stdlib_module_names) | {
    "torch",
    "numpy",
    "transformers",
    "safetensors",
    "tokenizers",
    "huggingface_hub",
    "scipy",
    "networkx",
    "pydantic",
    "pydantic_core",
    "typer",
    "click",
    "rich",
    "pipeplan",
    "executor",
    "cli",
}


def _wide_kept() -> list[tuple[str, types.ModuleType | type]]:
    """The modules of WIDE_PACKAGES imported now and their classes, (name, owner), less those
    KEPT_MODULES holds at every call: listed afresh, as the code may import more between
    its import and its function."""
    kept = {id(owner) for _, owner in _modules_kept() + _classes_kept()}
    modules = [
        (name, module)
        for name, module in list(sys.modules.items())
        if name.partition(".")[0] in WIDE_PACKAGES
        and issubclass(type(module), types.ModuleType)
        and id(module) not in kept
    ]
    owners: list[tuple[str, types.ModuleType | type]] = list(modules)
    seen = set(kept) | {id(module) for _, module in modules}
    for name, module in modules:
        for key, value in list(vars(module).items()):
            if issubclass(type(value), type) and id(value) not in seen:
                seen.add(id(value))
                if not value.__flags__ & _IMMUTABLE_TYPE:
                    owners.append((f"{name}.{key}", value))
    return owners


def _made_by_its_library(name: str, new: Any, there: set[int], old: Any = None) -> bool:
    """Whether `new`, put in the place of a held `name` of WIDE_PACKAGES (where `old` was, if
    known), is its library's own doing: an object made since (not one of those held, `there`,
    moved into another's place) whose code is of the library's package, made for that name
    (`_made_for`). torch registers the properties of its compile cache's classes
    (`CacheInfo.inductor_artifacts`) as its compiler is imported; a user's function is of
    the user's module. Nothing new over pipeplan's own names is: no library patches pipeplan
    (the sixty-first round: a bound method of pipeplan's own class in check_data_facts'
    place, its code pipeplan's, trained a rank on other data, exit 0)."""
    if id(new) in there or name.partition(".")[0] in NEVER_PATCHED or _moved_method(new, there):
        return False
    try:
        code = getattr(new, "fget", None) or getattr(new, "__func__", None) or new
        module = code.__module__
        made_in = getattr(getattr(code, "__code__", None), "co_filename", None)
        wrapped = _wrapped_by(new)
        named = isinstance(getattr(new, "__dict__", None), dict) and "__name__" in vars(new)
    except Exception:  # a user object whose __getattr__ failed: not the library's
        return False
    if isinstance(made_in, str):
        # No library puts torch's grad-mode or autocast decorator over another's function
        # as it loads (`_its_own_wrapper`, the sixty-first round). And it is a function (a
        # property's, a method's): an object naming a library function's code, globals or
        # `fget` as its own runs its own `__call__` (the sixty-second).
        if (
            not _code_is_the_librarys(name, code, made_in)
            or _a_decorators(made_in)
            or type(code) is not types.FunctionType
            or type(new) not in _HAVE_CODE
        ):
            return False
    # An object without code of its own (a C function, a class, a callable object): the
    # library's own under the name it replaces. The sixtieth round: a user's callable object
    # naming `__module__ = "executor.task"` passed in pipeplan's own check_data_facts' place
    # (a rank trained on other data unchecked), torch's nn.Identity at clip_grad_norm_, a
    # functools.partial at functools.reduce. A name set on the object itself, over nothing it
    # wraps, is the user's: `m = torch.nn.Identity(); m.__name__ = "stage_backward"` (the
    # sixty-first). A layer (an nn.Module) is the user's: no library puts one in another's
    # place, and its hooks and submodules, which `_wrapped_by` does not follow, run as it is
    # called (the sixty-second: a named nn.Identity whose submodule's hooks detached the
    # weights, at torch.nn.modules.linear.F, left every nn.Linear untrained, exit 0).
    elif (
        not isinstance(module, str)
        or isinstance(new, partial)
        or issubclass(type(new), torch.nn.Module)
        or getattr(new, "__name__", None) != name.rpartition(".")[2]
        or (named and not wrapped)
        or not _classes_code_is_its_own(new if isinstance(new, type) else type(new))
    ):
        return False
    elif module.partition(".")[0] != name.partition(".")[0]:
        file = _module_file(module)
        if file is None or not _patched_so(name, code, file):
            return False
    # And what it wraps is the library's too: the sixty-first round's `torch.no_grad()`,
    # `torch._dynamo.disable`, `functools.lru_cache` or an nn.Module whose `forward` was set
    # on it, each around a user's no-op at stage_backward, trained nothing, exit 0.
    return _only_the_librarys(name, wrapped, MAX_WRAPPED, {id(new)}) and _made_for(
        name, new, old, MAX_WRAPPED, set()
    )


def _made_for(name: str, new: Any, old: Any, depth: int, seen: set[int]) -> bool:
    """Whether each function in `new` (itself, and what it wraps as `_only_the_librarys`
    follows it) has code made for the held `name`: its code's qualified name (`co_qualname`,
    which setting a function's `__qualname__` leaves as it was) and module are the name's own
    (`GELUActivation.forward` of transformers.activations at
    transformers.activations.GELUActivation.forward) or those of the function `old` that
    was there; a function of another package's patching it is one of that package's module
    under the name's last part (loky's `_make_name` over `SemLock._make_name`); a closure the
    library made as it ran (`<locals>`, holding values: torch's compile cache's `lambda
    self: self.artifacts[key]`) is made for whatever it is put at. Found by the sixty-third
    round: `types.FunctionType(LinearActivation.forward.__code__, …, "forward")` (`return
    input`) at GELUActivation.forward passed as transformers' own (every GELU the identity,
    exit 0), as did re.escape's code at re.compile and torch.nn.init.zeros_' at normal_."""
    if id(new) in seen:
        return True
    seen.add(id(new))
    try:
        more = _wrapped_by(new)
        made = _made_names(name, old) if type(new) is types.FunctionType else set()
    except Exception:  # a user object whose __getattr__ failed: not the library's
        return False
    if type(new) is types.FunctionType:
        home, qualname = new.__globals__.get("__name__"), new.__code__.co_qualname
        if not (
            (home, qualname) in made
            or ("<locals>" in qualname and new.__closure__)
            or (
                isinstance(home, str)
                and home.partition(".")[0] != name.partition(".")[0]
                and qualname == name.rpartition(".")[2]
            )
        ):
            return False
    return not more or (
        depth > 0 and all(_made_for(name, inner, old, depth - 1, seen) for inner in more)
    )


def _made_names(name: str, old: Any) -> set[tuple[Any, str]]:
    """The (module, qualified name) pairs of code made for the held `name`: the name's own
    (its owner, a module or a class of one, as `name` spells it), and those of the functions
    `old` was and held."""
    path, _, key = name.rpartition(".")
    module, _, kind = path.rpartition(".")
    owner = sys.modules.get(path) or getattr(sys.modules.get(module), "__dict__", {}).get(kind)
    made: set[tuple[Any, str]] = set()
    if isinstance(owner, types.ModuleType):
        made.add((owner.__name__, key))
    elif isinstance(owner, type):
        made.add((owner.__module__, f"{owner.__qualname__}.{key}"))
    for function in [old, *_wrapped_by(old)] if old is not None else []:
        if type(function) is types.FunctionType:
            made.add((function.__globals__.get("__name__"), function.__code__.co_qualname))
    return made


# What has a function's code in `_made_by_its_library`: a function, and what holds one.
_HAVE_CODE = (types.FunctionType, property, types.MethodType, staticmethod, classmethod)


def _code_is_the_librarys(name: str, code: Any, made_in: str) -> bool:
    """Whether the function `code`, made in the file `made_in`, is the library's own at the
    held `name`. A function is the library's by where its code is, not by the `__module__`
    it names, which `functools.wraps` copies from what it wraps (the fifty-eighth round: a
    wrapped no-op in pipeplan's own check_data_facts' place trained ranks on other data, exit
    0); and its code is its module's, with that module's globals (the sixtieth: a function
    compiled under re's file name passed as re's own)."""
    if not _code_of_its_module(code, made_in):
        return False
    if _in_package(Path(made_in), name):
        return True
    file = _module_file(code.__module__)
    return file is not None and file == Path(made_in).resolve() and _patched_so(name, code, file)


# How deep `_only_the_librarys` follows wrappers within wrappers: torch's own nest two or
# three (a grad mode's closure holds its context's bound method); deeper is not the library's.
MAX_WRAPPED = 8


def _wrapped_by(obj: Any) -> list[Any]:
    """The callables `obj` wraps: `__wrapped__` (`functools.wraps`, `lru_cache`), a property's
    functions, a method's function, np.vectorize's `pyfunc`, a partial's `func`, what a
    function's closure holds, and what an object holds in its own `__dict__` (an nn.Module
    whose `forward` was set on it)."""
    if isinstance(obj, (type, types.ModuleType)):
        return []
    found = [getattr(obj, "__wrapped__", None)]
    if isinstance(obj, property):
        found += [obj.fget, obj.fset, obj.fdel]
    elif isinstance(obj, (types.MethodType, staticmethod, classmethod)):
        found.append(obj.__func__)
    elif isinstance(obj, types.FunctionType):
        found += [_contents(cell) for cell in obj.__closure__ or ()]
    elif isinstance(getattr(obj, "__dict__", None), dict):
        found += list(vars(obj).values())
    if isinstance(obj, np.vectorize):
        found.append(obj.pyfunc)
    if isinstance(obj, partial):
        found.append(obj.func)
    return [value for value in found if callable(value)]


def _contents(cell: Any) -> Any:
    """What a closure's `cell` holds (None: an empty cell)."""
    try:
        return cell.cell_contents
    except ValueError:
        return None


def _only_the_librarys(name: str, wrapped: list[Any], depth: int, seen: set[int]) -> bool:
    """Whether each of `wrapped` (`_wrapped_by`), and what it wraps in turn (`depth` levels
    at most), is the library's own code at the held `name` as `_made_by_its_library` tells
    it: a function of its package, an object of a class whose code is the library's."""
    for inner in wrapped:
        if id(inner) in seen:
            continue
        seen.add(id(inner))
        try:
            made_in = getattr(getattr(inner, "__code__", None), "co_filename", None)
            more = _wrapped_by(inner)
        except Exception:  # a user object whose __getattr__ failed: not the library's
            return False
        if isinstance(made_in, str):
            its = _code_is_the_librarys(name, inner, made_in)
        else:  # a layer within is the user's, as at the name itself (`_made_by_its_library`)
            its = not issubclass(type(inner), torch.nn.Module) and _classes_code_is_its_own(
                inner if isinstance(inner, type) else type(inner)
            )
        if not its or (
            more and (depth == 0 or not _only_the_librarys(name, more, depth - 1, seen))
        ):
            return False
    return True


def _moved_method(new: Any, there: set[int]) -> bool:
    """Whether `new` is a method bound to an object of a class held (`there`), or to such a
    class: a new object each time it is read, but one of the held functions moved (the
    sixty-first round: `stage_backward = torch.nn.Module().zero_grad`)."""
    if type(new) is not types.MethodType:
        return False
    bound = new.__self__
    return any(
        id(klass) in there for klass in (bound if isinstance(bound, type) else type(bound)).__mro__
    )


def _code_of_its_module(function: Any, made_in: str) -> bool:
    """Whether `function`'s globals are an imported module's own and its code that module's
    file (or code the module generated, "<string>": dataclasses, namedtuple)."""
    found = getattr(function, "__globals__", None)
    home = sys.modules.get(found.get("__name__")) if isinstance(found, dict) else None
    if home is None or getattr(home, "__dict__", None) is not found:
        return False
    if made_in.startswith("<"):
        return True
    file = getattr(home, "__file__", None)
    # A plain str only: a str subclass's methods may raise (the sixty-ninth round).
    return type(file) is str and os.path.realpath(file) == os.path.realpath(made_in)


def _classes_code_is_its_own(cls: type) -> bool:
    """Whether every function a class defines (its own and its bases' up to the first
    built-in one) is code of the module it names: a class naming `__module__ = "numpy"`
    whose `__call__` is the user's is not numpy's."""
    for klass in cls.__mro__:
        if not klass.__flags__ & _HEAP_TYPE:
            break  # a built-in (C) class: no user code
        for value in vars(klass).values():
            function = getattr(value, "__func__", value)
            code = getattr(function, "__code__", None)
            if code is not None and not _code_of_its_module(function, code.co_filename):
                return False
            if code is not None and not _in_package(Path(code.co_filename), klass.__module__):
                return False
    return True


# The packages no library patches: pipeplan's own (`cli` is the launcher's entry module).
NEVER_PATCHED = ("executor", "pipeplan", "profiles", "cli")


def _patched_so(name: str, new: Any, file: Path) -> bool:
    """Whether `new`, of the installed module `file`, put at `name` reads as an installed
    library's patch of another package as it loads (loky's own `_make_name` over
    `multiprocessing.synchronize.SemLock._make_name`, as `from sklearn.datasets import
    load_digits` imports it: the fifty-seventh round): its file in site-packages, under the
    name it replaces, and never over pipeplan's own. Found by the fifty-ninth round: any
    function of any installed package passed, so `re.compile` or pipeplan's own
    `check_data_facts` replaced by matplotlib's `noop` (a rank then trained on other data
    unchecked), or by a function compiled under a site-packages file name."""
    return (
        name.partition(".")[0] not in NEVER_PATCHED
        and getattr(new, "__name__", None) == name.rpartition(".")[2]
        and _installed_file(file)
    )


def _module_file(module: Any) -> Path | None:
    """The resolved file of the imported module named `module`, None if there is none."""
    file = getattr(sys.modules.get(module) if isinstance(module, str) else None, "__file__", None)
    return Path(file).resolve() if type(file) is str else None  # no str subclass's methods


def _in_package(file: Path, name: str) -> bool:
    """Whether `file` is code of the top-level module of the dotted `name`: in its folder (a
    package), or its file (a lone module)."""
    home = getattr(sys.modules.get(name.partition(".")[0]), "__file__", None)
    if not isinstance(home, str):
        return False
    home_path = Path(home).resolve()
    if home_path.name == "__init__.py":
        return file.resolve().is_relative_to(home_path.parent)
    return file.resolve() == home_path


def _installed_file(file: Path) -> bool:
    """Whether `file` lies in site-packages: an installed package's code."""
    path = file.resolve()
    return any(path.is_relative_to(folder) for folder in _site_packages(_stdlib_folders()))


def _held(value: Any) -> bool:
    """A function, class or module: what a rebinding replaces (a module's plain values, such as
    `tempfile.tempdir`, its own code sets as it runs). `type(...)`, not isinstance: an object
    may warn when its `__class__` is read (torch.distributed.reduce_op)."""
    return callable(value) or issubclass(type(value), types.ModuleType)


def _held_in_class(value: Any) -> bool:
    """What of a class a rebinding replaces: as `_held`, and any descriptor (a property, a
    classmethod, a slot: what `obj.name` calls into). A class's plain values (`__doc__`,
    `__annotations__`, `__slotnames__`, which Python itself adds as it runs) are not."""
    return _held(value) or hasattr(type(value), "__get__")


# What the holds themselves run on, held first of all (`guard_kept`, `_guard_changes`): the
# builtins, operator and itertools functions every comparison calls, functools' partial,
# types, contextlib's context managers each hold is entered and left through, os.path, and
# this module's own functions and classes (a name of its own rebound, or one added over a
# builtin it calls), with their classes and each one's own class. Found by the sixty-fifth
# round: a `__getitem__` that set `operator.is_ = lambda a, b: True` made every later
# comparison say "unchanged", then replaced `torch._C._nn.cross_entropy_loss` and trained
# towards class 0, exit 0.
GUARD_MODULES = (
    "builtins",
    "operator",
    "itertools",
    "functools",
    "types",
    "contextlib",
    "posixpath",
    "executor.data",
)
# (dotted name, module or class, its class then, its names then, those of them held: the
# functions, classes, modules and descriptors), filled as this module's import ends.
_guard: list[tuple[str, Any, type, dict[str, Any], dict[str, Any]]] = []


def _hold_guard() -> None:
    """Take GUARD_MODULES as they are (`_guard`): once, at the end of this module's import."""
    for name in GUARD_MODULES:
        module = importlib.import_module(name)
        owners: list[tuple[str, Any]] = [(name, module)]
        owners += [
            (f"{name}.{key}", value)
            for key, value in vars(module).items()
            if issubclass(type(value), type)
            and value.__module__ == name
            and not value.__flags__ & _IMMUTABLE_TYPE
        ]
        for dotted, owner in owners:
            names = dict(vars(owner))
            kept = _held_in_class if isinstance(owner, type) else _held
            held = {key: value for key, value in names.items() if kept(value)}
            _guard.append((dotted, owner, type(owner), names, held))


def _guard_changes(
    *,
    _guard: list[tuple[str, Any, type, dict[str, Any], dict[str, Any]]] = _guard,
    _vars: Any = vars,
    _len: Any = len,
    _all: Any = all,
    _map: Any = map,
    _is: Any = operator.is_,
    _type: Any = type,
    _setattr: Any = setattr,
    _delattr: Any = delattr,
    _builtins: dict[str, Any] = vars(builtins),
    _error: Any = TypeError,
) -> list[str]:
    """What of GUARD_MODULES (`_guard`) is changed now, by dotted name ("operator.is_", "the
    class of contextlib"), each put back: a held name rebound or deleted, a name added to a
    class or added to a module over a builtin, a module's or class's own class swapped. It
    runs before any other comparison, on what it was given as this module was defined (its
    keyword defaults), never on a name code can rebind; those comparisons then run on what it
    put back.

        _guard_changes()   # after operator.is_ = lambda a, b: True: ["operator.is_"]
    """
    changed = []
    missing = _guard
    moved = []
    for entry in _guard:  # in order: builtins first, put back before the rest is compared
        name, owner, kind, names, held = entry
        now = _vars(owner)
        same = _type(owner) is kind
        if same and _len(now) == _len(names) and _all(_map(_is, now.values(), names.values())):
            continue
        moved.append(entry)
        if not same:
            changed.append(f"the class of {name}")
            # Not contextlib.suppress: contextlib is what is compared here.
            try:  # noqa: SIM105
                _setattr(owner, "__class__", kind)
            except _error:  # a metaclass Python will not swap back: refused all the same
                pass
        for key, value in held.items():
            if now.get(key, missing) is not value:
                changed.append(f"{name}.{key}")
                _setattr(owner, key, value)
    # Then, with all of it as it was, a name added: to a class, a function or descriptor
    # (over one it inherits); to a module, a builtin's name (found before the builtin).
    for name, owner, _, names, _ in moved:
        now = _vars(owner)
        for key in [key for key in now if key not in names]:
            if (
                _held_in_class(now[key])
                if isinstance(owner, type)
                else key in _builtins and now is not _builtins
            ):
                changed.append(f"{name}.{key}")
                _delattr(owner, key)
        names.clear()
        names.update(now)
    return changed


class guard_kept:  # lower case: a hold like the others, entered as they are
    """The user's data code (`doing`) leaves what the holds themselves run on (GUARD_MODULES)
    as it found it, or is refused in one line; each one changed is put back first of all
    (`_guard_changes`), so the other holds compare with their own functions. A class, not a
    generator's context: contextlib's exit calls `next`, which code can rebind.

        with guard_kept("m:load", "reading a batch"):
            operator.is_ = lambda a, b: True
        # BadArgumentError: data 'm:load': reading a batch replaced operator.is_; data code
        # must leave …
    """

    def __init__(self, spec: str, doing: str) -> None:
        self.spec, self.doing = spec, doing
        self.check = _guard_changes  # taken before the code runs, which may rebind the name

    def __enter__(self) -> None:
        return None

    def __exit__(self, *_: object) -> None:
        changed = self.check()
        if changed:
            raise BadArgumentError(
                f"data {quoted(self.spec)}: {self.doing} replaced {_some(changed)}; "
                "data code must leave Python's builtins, operator, itertools, functools, "
                "types, contextlib and os.path and pipeplan's own checks as it found them, as "
                "every check of what it changed runs on them (put back now)"
            )


_OWNER = operator.itemgetter(1)  # a held entry's module or class: (name, owner, names)


@contextlib.contextmanager
def functions_kept(spec: str, doing: str, wide: bool = False) -> Iterator[None]:
    """The user's data code (`doing`) leaves the functions of KEPT_MODULES as it found them
    (each module's top level: every function, class and submodule, compared by identity),
    and the methods of their classes (`_classes_kept`: every function and descriptor of each
    class's own, and none added over one it inherits: `torch.optim.AdamW.step = …` where AdamW
    inherits Adam's), or is refused in one line; each one replaced or deleted is put back
    (one added over an inherited one deleted), however the code ends.
    Found by the thirty-ninth round: a data module's `torch.distributed.all_reduce = lambda
    *a, **k: None` (at import or in `load`) made `pipeplan run` exit 0 with its replicas
    trained apart, its loss record off by 2x, and `json.dumps = lambda *a, **k: "{}"` in
    `load` failed the run in a 75-line traceback of torch's launcher; by the forty-first, one
    level down: `torch.optim.AdamW.step = no_op` in `load` "trained" nothing, exit 0. Adding a
    name is no change (a user may register things), nor is patching one and putting it back
    before returning (`unittest.mock.patch` around what needs it), nor torch's own wrapper of
    its function (`_its_own_wrapper`: a first optimizer wraps its class's `step`). Held where
    `torch_state_kept` is: every call into the data code, item reads a batch at a time (a
    snapshot and comparison of some 4,600 names and 6,600 class attributes costs ~0.83 ms of
    CPU, the least of 400 calls on a shared core, where it took 0.60 ms before the
    sixty-first round's pipeline and executor modules (0.58 ms on an idle core before them,
    0.53 ms before the forty-fourth round's); ~0.1 ms for the names alone).

        with functions_kept("m:load", "the data function"):
            torch.distributed.all_reduce = lambda *a, **k: None
        # BadArgumentError: data 'm:load': the data function replaced
        # torch.distributed.all_reduce; data code must leave …
    """
    before = [(name, module, vars(module).copy()) for name, module in _modules_kept()]
    before += [(name, cls, vars(cls).copy()) for name, cls in _classes_kept()]
    narrow = len(before)
    if wide:
        before += [(name, owner, vars(owner).copy()) for name, owner in _wide_kept()]
    # And each one's own class: a module's swapped for a ModuleType subclass whose
    # `__getattribute__` answers one name leaves its `vars` as they were (the sixty-fifth
    # round: torch.nn.functional.layer_norm so answered with eps 0.5, exit 0).
    kinds = list(map(type, map(_OWNER, before)))
    try:
        yield
    finally:
        swapped = (
            []
            if all(map(operator.is_, map(type, map(_OWNER, before)), kinds))
            else [
                (name, owner, kind)
                for (name, owner, _), kind in zip(before, kinds, strict=True)
                if type(owner) is not kind
            ]
        )
        for _, owner, kind in swapped:
            with contextlib.suppress(TypeError):  # a metaclass Python will not swap back
                owner.__class__ = kind
        # The same objects in the same order, compared in C, inline: a call each cost more.
        moved = [
            (index, (name, owner, names))
            for index, (name, owner, names) in enumerate(before)
            if len(vars(owner)) != len(names)
            or not all(map(operator.is_, vars(owner).values(), names.values()))
        ]
        saved = {id(owner): names for _, owner, names in before} if moved else {}
        there = (
            {id(v) for _, _, names in before[narrow:] for v in names.values()}
            if any(index >= narrow for index, _ in moved)
            else set()
        )
        changed = [
            change
            for index, kept in moved
            for change in _rebound(*kept, saved)
            if index < narrow
            or not _made_by_its_library(change[3], vars(change[0]).get(change[1]), there, change[2])
        ]
        for owner, key, old, _, _ in changed:
            if old is _ADDED:
                delattr(owner, key)
            else:
                setattr(owner, key, old)
        planted = _planted(before) if wide else []
    if not changed and not planted and not swapped:
        return
    said = [f"swapped the class of {_some([name for name, _, _ in swapped])}"] if swapped else []
    for deleted, verb in ((False, "replaced"), (True, "deleted")):
        names = [name for _, _, _, name, gone in changed if gone is deleted]
        if names:
            said.append(f"{verb} {_some(names)}")
    if planted:
        modules = list(dict.fromkeys(module for _, module in planted))
        said.append(
            f"replaced {_some([name for name, _ in planted])} with its own code, in "
            f"{_some(modules)}, which it imported itself"
        )
    back = "put back now" if changed or swapped else ""
    if planted:  # never seen as it was: unloaded, imported afresh where next needed
        unloaded = f"{_some(_unloaded(modules))} unloaded now, to be imported afresh"
        back = f"{back} and {unloaded}" if back else unloaded
    raise BadArgumentError(
        f"data {quoted(spec)}: {doing} {' and '.join(said)}; data code must leave the "
        "functions of torch and of Python's modules as it found them, as pipeplan trains and "
        f"writes its records with them ({back}; patch one only around your own code that "
        "needs it, as `with unittest.mock.patch(...)` does)"
    )


@cache
def _own_folders() -> tuple[Path, ...]:
    """The folders of pipeplan's own packages (OWN_PACKAGES), resolved."""
    return tuple(
        Path(importlib.import_module(name).__file__).resolve().parent for name in OWN_PACKAGES
    )


def _planted(before: list[tuple[str, Any, dict[str, Any]]]) -> list[tuple[str, str]]:
    """The functions and classes of user code now at the top level of the modules of
    WIDE_PACKAGES imported as the code ran (not among the owners `before`): (its dotted name,
    its module's). Found by the sixty-first round: `import safetensors.torch as st;
    st.save_file = mine` at a data module's top (safetensors.torch not imported before it)
    was compared with nothing, and the run exported a model of all-zero tensors, exit 0. As
    it was never seen, only code of the user's is told apart: a function whose file (or whose
    globals' module's) is no installed code nor of that module's own package, and a class
    (an object's) holding one, bare or within what a name wraps (`_wrapped_by`); a library's
    names imported from another package (`from os import path`) are not. Cheap: only new
    modules, each file looked up once."""
    known = {id(owner) for _, owner, _ in before}
    # pipeplan's own packages count as installed code: a checkout's (an editable install's)
    # are no user's files (the seventy-fifth round: `import executor.demo` in a `load` was
    # "replaced executor.history.CheckpointManifest … with its own code").
    installed = [*_installed_folders(), *_own_folders()]
    prefixes = tuple(f"{folder}{os.sep}" for folder in installed)
    files: dict[tuple[str, str], bool] = {}  # (a file, a package): whether the user's
    # (a code's file, its globals' id, a package): whether the user's; the globals are held
    # by the function, so their id stands for them while this runs.
    decided: dict[tuple[str, int, str], bool] = {}

    def users_file(file: Any, package: str) -> bool:
        if type(file) is not str or file.startswith("<"):  # a str subclass is no file
            return False
        if (file, package) not in files:
            # Installed code's files are named under the installed folders as they are:
            # resolved only where not (a link, a relative name, the user's).
            path = None if file.startswith(prefixes) else Path(file).resolve()
            files[file, package] = (
                path is not None
                and not any(path.is_relative_to(folder) for folder in installed)
                and not _in_package(path, package)
            )
        return files[file, package]

    def users(function: Any, package: str) -> bool:
        key = (function.__code__.co_filename, id(function.__globals__), package)
        if key not in decided:
            found = function.__globals__
            home = sys.modules.get(found.get("__name__")) if isinstance(found, dict) else None
            ours = home is not None and getattr(home, "__dict__", None) is found
            decided[key] = users_file(key[0], package) or (
                ours and users_file(getattr(home, "__file__", None), package)
            )
        return decided[key]

    classes: dict[int, bool] = {}  # a class: whether it holds a function of the user's

    def holds_users(value: Any, package: str, depth: int, seen: set[int]) -> bool:
        # A function of the user's, an object of a class holding one, or either within
        # what it wraps (`_wrapped_by`, `depth` levels): the sixty-second round's
        # `st.save_file = functools.partial(mine)` (lru_cache, `torch.no_grad()`, a bound
        # method, `staticmethod`, np.vectorize around it) exported an all-zero model, exit 0.
        if isinstance(value, types.FunctionType):
            if users(value, package):
                return True
            if value.__closure__ is None and "__wrapped__" not in vars(value):
                return False  # wraps nothing: most are so, told cheaply
        else:
            is_class = issubclass(type(value), type)
            cls = value if is_class else type(value)
            if id(cls) not in classes:
                classes[id(cls)] = bool(cls.__flags__ & _HEAP_TYPE) and any(
                    isinstance(function, types.FunctionType) and users(function, package)
                    for member in vars(cls).values()
                    for function in (getattr(member, "__func__", member),)
                )
            if classes[id(cls)] or is_class:  # a class wraps nothing (`_wrapped_by`)
                return classes[id(cls)]
        try:
            inner = _wrapped_by(value) if depth else []
            if depth and issubclass(type(value), torch.nn.Module):
                # A layer's hooks and submodules, which it runs as it is called, are in
                # dicts of its own (`_forward_hooks`, `_modules`, …): a library's layers
                # (transformers.activations.gelu) hold none of the user's.
                inner += [
                    one
                    for held in vars(value).values()
                    if isinstance(held, dict)
                    for one in held.values()
                    if callable(one)
                ]
        except Exception:  # a library's object whose __getattr__ failed: no wrapper
            return False
        seen.add(id(value))
        return any(
            holds_users(one, package, depth - 1, seen) for one in inner if id(one) not in seen
        )

    found: dict[tuple[int, str], bool] = {}  # (a name's object, a package): holds_users
    planted = []
    for name, module in list(sys.modules.items()):
        package = name.partition(".")[0]
        if (
            package not in WIDE_PACKAGES
            or id(module) in known
            or not issubclass(type(module), types.ModuleType)
        ):
            continue
        # A module of the user's own under a standard library's name (`test.py`): no library's.
        file = getattr(module, "__file__", None)
        if isinstance(file, str) and not file.startswith(prefixes) and _users_file(file):
            continue
        for key, value in list(vars(module).items()):
            if not callable(value) or issubclass(type(value), types.ModuleType):
                continue
            if (id(value), package) not in found:  # one imported into many modules: once
                found[id(value), package] = holds_users(value, package, MAX_WRAPPED, set())
            if found[id(value), package]:
                planted.append((f"{name}.{key}", name))
    return planted


def _unloaded(modules: list[str]) -> list[str]:
    """`modules` and their submodules taken out of sys.modules, and off their parents'
    names, so that the next import runs their files afresh (the names, in order)."""
    gone = [
        name
        for name in list(sys.modules)
        if any(name == module or name.startswith(f"{module}.") for module in modules)
    ]
    for name in gone:
        module = sys.modules.pop(name)
        parent, _, child = name.rpartition(".")
        if parent and getattr(sys.modules.get(parent), child, None) is module:
            delattr(sys.modules[parent], child)
    return gone


# What `_rebound` says a name added over an inherited one was before: nothing of the class's
# own (put back by deleting it).
_ADDED = object()


def _rebound(
    name: str, owner: types.ModuleType | type, saved: dict[str, Any], before: dict[int, Any]
) -> list[tuple[types.ModuleType | type, str, Any, str, bool]]:
    """What of `saved` (the module's or class's names before) the code replaced or deleted,
    and for a class, what it added over a function or descriptor the class inherits (the
    class's behaviour changed as by a replacement; `before`: each kept class's names before,
    by id): (owner, name, the old object or _ADDED, its dotted name, whether deleted).
    Compared in C first (the same objects in the same order: nothing to look at); by name
    where anything moved."""
    now = vars(owner)
    if len(now) == len(saved) and all(map(operator.is_, now.values(), saved.values())):
        return []
    is_class = isinstance(owner, type)
    held = _held_in_class if is_class else _held
    missing = object()
    changed: list[tuple[types.ModuleType | type, str, Any, str, bool]] = []
    for key, old in saved.items():
        new = now.get(key, missing)
        if new is old or not held(old) or _its_own_wrapper(name, old, new):
            continue
        if not is_class and _imported_submodule(f"{name}.{key}", new):
            continue
        changed.append((owner, key, old, f"{name}.{key}", new is missing))
    if not is_class:
        return changed
    for key in [key for key in now if key not in saved]:
        inherited = _inherited(owner, key, missing, before)
        if held(inherited) and not _its_own_wrapper(name, inherited, now[key]):
            changed.append((owner, key, _ADDED, f"{name}.{key}", False))
    return changed


def _imported_submodule(dotted: str, new: Any) -> bool:
    """Whether `new`, now at a module's name `dotted`, is the submodule of that name, which
    Python's import binds there as it loads it: a package may hold another object at the name
    until then. Found by the fifty-eighth round: `tokenizers.trainers` is the Rust extension's
    submodule until `import tokenizers.trainers` (what `from transformers import
    AutoTokenizer` comes to) loads the Python one over it, and a resume or an export of a run
    whose data code did so was refused: "the data function replaced tokenizers.trainers"."""
    return (
        isinstance(new, types.ModuleType)
        and sys.modules.get(dotted) is new
        and getattr(new, "__name__", None) == dotted
    )


def _inherited(cls: type, key: str, missing: Any, before: dict[int, Any]) -> Any:
    """What `cls` had for `key` from its bases (the first in its MRO that has it), or
    `missing`: as each base was before (`before`, by id) where it is a kept class. torch's own
    wrapper of an inherited method wraps that one, which may have been wrapped since: a first
    AdamW wraps Adam's `step` into AdamW, then a first Adam wraps Adam's own."""
    for base in cls.__mro__[1:]:
        found = before.get(id(base), vars(base)).get(key, missing)
        if found is not missing:
            return found
    return missing


def _its_own_wrapper(name: str, old: Any, new: Any) -> bool:
    """Whether `new` is the library's own wrapper of `old`: a function around the one it
    replaces (`__wrapped__`), or one the library's code made as it ran (a closure, `<locals>`
    in its name), either holding the old one in its closure, whose code is in the library's
    own files. Importing torch._dynamo
    (torch.compile, a library that uses it) wraps torch.manual_seed so, and its first compiled
    call patches nn.Module.__init__ with a closure that calls the old one: kept. A user's
    `functools.wraps` wrapper copies the name and module, not where its code is; a function
    of torch's own put in another's place (`AdamW.step = SGD.step`) is no closure. pipeplan's
    own (`pipeplan.log`) are wrapped by no library (NEVER_PATCHED)."""
    # A function, not an object naming another's code, globals and closure as its own (the
    # sixty-second round: one with profile_hook_step's, its `__call__` a no-op, passed).
    if name.partition(".")[0] in NEVER_PATCHED or type(new) is not types.FunctionType:
        return False
    try:
        wrapped = getattr(new, "__wrapped__", None)
        # A closure of the library's around another function than the one it replaces is
        # the user's decorated: `@torch.no_grad()` over a no-op put at AdamW.step trained
        # nothing, exit 0 (the fifty-ninth round).
        if wrapped is not old and (wrapped is not None or "<locals>" not in new.__qualname__):
            return False
        # And it holds the old one: a function made of torch's own `zero_grad` code, naming
        # the old step as `__wrapped__`, trained nothing (the sixtieth round); a closure
        # without `__wrapped__` too (dynamo's `patched_init` holds nn.Module's `__init__`):
        # torch's own `lambda *args: None` (`torch.set_vital`) at AdamW.step trained
        # nothing, exit 0 (the sixty-second).
        if not any(_holds(cell, old) for cell in new.__closure__ or ()):
            return False
        filename = new.__code__.co_filename
        around = _wrapped_by(new)
    except Exception:  # no function, or a user object whose __getattr__ failed: not torch's
        return False
    # torch decorates its own functions with its grad modes and autocast where it defines
    # them, never as a later replacement: `F.linear = torch.no_grad()(F.linear)` in `load`
    # trained nothing, exit 0 (the sixtieth round), and `torch.autocast("cpu",
    # dtype=torch.bfloat16)(F.linear)` an fp32 run's every linear layer in bfloat16 (the
    # sixty-first). And all else its closure holds is the library's too, or the old one:
    # `torch.compile(_single_tensor_adam, backend=mine)` holds the user's backend, which
    # runs what the compiled function computes (the sixty-second: no step applied, exit 0).
    return (
        isinstance(filename, str)
        and _in_package(Path(filename), name)
        and _code_of_its_module(new, filename)
        and not _a_decorators(filename)
        and _only_the_librarys(name, around, MAX_WRAPPED, {id(new), id(old)})
    )


# The code of torch's decorators that change how what they wrap computes: its grad modes
# (no_grad, enable_grad, inference_mode, set_grad_enabled) and autocast (`torch.autocast(…)`
# as a decorator, `torch.amp.custom_fwd`/`custom_bwd`, and torch.cuda.amp's and
# torch.cpu.amp's, which make torch.amp's).
_DECORATORS = frozenset(
    os.path.realpath(module.__file__) for module in (_contextlib, torch.amp.autocast_mode)
)


def _a_decorators(filename: str) -> bool:
    """Whether code of `filename` is one of torch's `_DECORATORS`' closures."""
    return os.path.realpath(filename) in _DECORATORS


def _holds(cell: Any, value: Any) -> bool:
    """Whether a closure's `cell` holds `value` (an empty cell holds nothing)."""
    try:
        return cell.cell_contents is value
    except ValueError:
        return False


# The tables Python's pickle and torch.save write with, besides their functions (held in
# KEPT_MODULES): copyreg's reducers by type (`copyreg.pickle`) and extension codes
# (`copyreg.add_extension`), torch.serialization's location taggers (`register_package`),
# as (module, name, compared by identity: a reducer or tagger; or by equality: codes).
# Each table is held as the object pickle reads (`_pickle` took copyreg.dispatch_table at
# import) and as its contents.
_PICKLING_TABLES = (
    (copyreg, "dispatch_table", True),
    (copyreg, "_extension_registry", False),
    (copyreg, "_inverted_registry", False),
    (copyreg, "_extension_cache", False),
    (torch.serialization, "_package_registry", True),
)


def _pickling_tables() -> list[tuple[Any, Any]]:
    """Each of `_PICKLING_TABLES` now: (the object, a copy of its contents)."""
    held = []
    for module, name, _ in _PICKLING_TABLES:
        table = getattr(module, name)
        held.append((table, table.copy()))
    return held


def _same_contents(now: Any, held: Any, by_identity: bool) -> bool:
    if len(now) != len(held):
        return False
    if isinstance(held, dict):
        if now.keys() != held.keys():
            return False
        now, held = [now[key] for key in held], list(held.values())
    same = operator.is_ if by_identity else operator.eq
    return all(map(same, now, held))


# The packages whose objects a rank's checkpoint pickles (tensors, Python's containers and
# numbers, numpy's and Python's random states): a reducer added for one of their types
# changes what pipeplan writes. One for another's (scipy, regex and sympy register theirs
# as they are imported) does not.
_WRITTEN = ("builtins", "collections", "copyreg", "numpy", "random", "torch")


def _reducers_changed(table: dict[Any, Any], contents: dict[Any, Any]) -> list[str]:
    """The types whose reducer in copyreg.dispatch_table the code replaced or removed, or
    added for a type of `_WRITTEN` (but for the package's own, made in its files as it was
    imported: torch._export's for FakeTensor), by name."""
    missing = object()
    moved = [key for key in contents if table.get(key, missing) is not contents[key]]
    moved += [
        key
        for key in table
        if key not in contents
        and getattr(key, "__module__", "").partition(".")[0] in _WRITTEN
        and not _of_its_package(key, table[key])
    ]
    return [
        f"{getattr(key, '__module__', '?')}.{getattr(key, '__qualname__', key)}" for key in moved
    ]


def _of_its_package(kind: Any, reducer: Any) -> bool:
    """Whether `reducer`'s code is in the files of `kind`'s own package."""
    home = getattr(sys.modules.get(kind.__module__.partition(".")[0]), "__file__", None)
    filename = getattr(getattr(reducer, "__code__", None), "co_filename", None)
    if not home or not isinstance(filename, str):
        return False
    return filename.startswith(os.path.dirname(home) + os.sep)


def _pickling_tables_put_back(held: list[tuple[Any, Any]]) -> list[str]:
    """Each table of `_PICKLING_TABLES` the code replaced or changed put back (the object
    pickle holds, its contents as they were); what it did, for the error line."""
    said = []
    for (module, name, by_identity), (table, contents) in zip(_PICKLING_TABLES, held, strict=True):
        now = getattr(module, name)
        if now is not table:
            setattr(module, name, table)
            said.append(f"replaced {module.__name__}.{name}")
        if table is copyreg.dispatch_table and not _same_contents(table, contents, True):
            types_ = _reducers_changed(table, contents)
            if types_:
                table.clear()
                table.update(contents)
                said.append(f"changed copyreg.dispatch_table's reducer of {', '.join(types_)}")
        elif not _same_contents(table, contents, by_identity):
            if isinstance(table, dict):
                table.clear()
                table.update(contents)
            else:
                table[:] = contents
            said.append(f"changed {module.__name__}.{name}")
    return said


@contextlib.contextmanager
def pickling_kept(spec: str, doing: str) -> Iterator[None]:
    """The user's data code (`doing`) leaves the tables pickle and torch.save write with
    (`_PICKLING_TABLES`: copyreg's reducers and extension codes, torch.serialization's
    location taggers) and torch.save's settings (`torch.utils.serialization.config`) as it
    found them, or is refused in one line; each is put back, however the code ends. Found by
    the forty-fourth round: a `load` that registered `copyreg.pickle(torch.Tensor, …)`
    zeroing each tensor made every checkpoint of `pipeplan run` hold zeros (its checksums
    taken of what was written), and `export` wrote an all-zero model, exit 0. A reducer the
    code adds for a type of torch's, numpy's or Python's (`_WRITTEN`) is refused too; one a
    library adds for its own types as it is imported (scipy's, regex's) is no change. Held
    where `torch_state_kept` is (~30 µs: a copy of five small tables and torch.save's
    settings).

        with pickling_kept("m:load", "the data function"):
            copyreg.pickle(torch.Tensor, zeroed)
        # BadArgumentError: data 'm:load': the data function changed copyreg.dispatch_table's
        # reducer of torch.Tensor; data code must leave …
    """
    tables = _pickling_tables()
    config = _SERIALIZATION.get_config_copy()
    try:
        yield
    finally:
        said = _pickling_tables_put_back(tables)
        now = _SERIALIZATION.get_config_copy()
        if now != config:
            _SERIALIZATION.load_config(config)
            keys = [key for key in config if now.get(key) != config[key]]
            said.append(
                "set torch.save's "
                + ", ".join(f"{key} to {now.get(key)!r} (it was {config[key]!r})" for key in keys)
            )
    if not said:
        return
    raise BadArgumentError(
        f"data {quoted(spec)}: {doing} {' and '.join(said)}; data code must leave the tables "
        "and settings pickle and torch.save write with as they were, as pipeplan writes its "
        "checkpoints with them (put back now; pickle your own objects with a `__reduce__` "
        "method of their class, not a table of Python's)"
    )


# What a rank holds from its start (`rank_held`, before its data code first runs) and compares
# after each batch it reads, at each epoch's end and before each checkpoint or model it writes
# (`check_rank_held`): every module of pipeplan's own packages imported then, and torch's
# layers, gradient clipping, C functions of torch.nn.functional and pipeline, and json, with
# their classes, and RANK_LIBRARIES. Too many to snapshot around each item read
# (`functions_kept` holds KEPT_MODULES there, ~0.8 ms a batch): its snapshot, of ~710 modules
# and classes (~14,800 names), ~46 tables of pipeplan's and ~100 of the libraries (~700
# entries), costs ~9 ms once (5 ms before the sixty-fourth round's; ~20 ms and 14 ms on a
# busier core), and each comparison ~0.36 ms where nothing moved since the last (`_as_found`;
# ~2.6 ms in full), the least of 20 on a shared core for a BERT rank (0.17 ms and 1.3 ms
# before the sixty-fourth round's modules and tables; ~1.4 ms each, in full, before the
# sixty-third's). After a read, with each owner's class and the default dtype (the sixty-fifth
# round's), ~0.40 ms: 0.50 against 0.44 ms side by side, the least of 500 on a busy shared
# core; at a write, with RANK_AT_WRITES and what the holds run on (`_guard_changes`, ~0.03
# ms), 0.75 ms. With the sixty-sixth round's (the modules a build and a step reach, ~2,600
# names, and the rank's own objects, `hold_rank_objects`: ~0.11 ms for a BERT's ~230 modules,
# parameters and their ~1,700 hook dicts and tables), 0.76 ms after a read and 1.0 ms at a
# write, against 0.50 and 0.75 ms side by side, the least of 300 on a busy shared core.
# Found by the sixty-second round: a `__getitem__`'s
# `pipeplan.precision.compute = bf16 autocast` trained an fp32 run in bfloat16,
# `executor.checkpoint._write` and `pipeplan.models.export` replaced wrote an all-zero
# checkpoint and model, and `torch._C._nn.cross_entropy_loss` trained towards class 0, each
# exit 0.
RANK_PACKAGES = ("pipeplan", "executor", "profiles")
RANK_TORCH = (
    "torch.nn.modules",
    "torch.nn.utils.clip_grad",
    "torch._C._nn",
    "torch.distributed.pipelining",
    "torch.backends",
    "json",
)
# And the modules of the libraries the model is built of and a run writes with (each module
# alone, not its package; imported by `rank_held`, as its model's build would): transformers'
# layers, activations, masks and the base of every model and config (with the modules of the
# model's own classes, `models.model_modules`), safetensors, and pydantic's BaseModel, whose
# `model_dump` writes every record. Found by the sixty-third round: a `__getitem__` that set
# `GELUActivation.forward` to zeros, `modeling_utils.safe_save_file` to write zeros or
# `BaseModel.model_dump` to record a loss of 0.5 trained, exported or recorded so, exit 0.
RANK_LIBRARIES = (
    "transformers.activations",
    "transformers.configuration_utils",
    "transformers.masking_utils",
    "transformers.modeling_layers",
    "transformers.modeling_rope_utils",
    "transformers.modeling_utils",
    "transformers.pytorch_utils",
    "safetensors",
    "safetensors.torch",
    "pydantic.main",
    # What the models' forwards look up at each call, found by tracing a BERT's, a GPT-2's, a
    # Llama's and a ViT's forward and backward (`sys.setprofile`; with RANK_TORCH's
    # `torch.backends`): torch._C's functions (`torch._C._get_tracing_state` in every Module
    # call), torch._VF (`F.dropout` calls `_VF.dropout`), the Tensor's module, torch's
    # overrides and tracing, compiling and graph-capture flags; the attention functions of
    # transformers' table (`ALL_ATTENTION_FUNCTIONS`) and the decorators, flags and checks
    # around every forward. And what `save_pretrained` writes a model/ with (traced): a
    # decoder's GenerationConfig, the weights' conversion and huggingface_hub's
    # serialization. Found by the sixty-fourth round: a `__getitem__` that set
    # `torch._VF.dropout` to the identity trained BERT without its dropout, and one that
    # replaced `GenerationConfig.to_json_string` wrote the run's model/generation_config.json
    # with other token ids, exit 0.
    "torch._C",
    "torch._VF",
    "torch._tensor",
    "torch._utils",
    "torch._jit_internal",
    "torch.jit",
    "torch.jit._trace",
    "torch.overrides",
    "torch.autograd",
    "torch.autograd.graph",
    "torch.compiler",
    "torch.cuda",
    "torch.xpu",
    "torch.utils._python_dispatch",
    "transformers.integrations.sdpa_attention",
    "transformers.integrations.flash_attention",
    "transformers.integrations.flex_attention",
    "transformers.integrations.eager_paged",
    "transformers.modeling_flash_attention_utils",
    "transformers.utils.generic",
    "transformers.utils.deprecation",
    "transformers.utils.import_utils",
    "transformers.generation.configuration_utils",
    "transformers.core_model_loading",
    "transformers.conversion_mapping",
    "transformers.fusion_mapping",
    "transformers.distributed.utils",
    "transformers.utils.logging",
    "huggingface_hub.serialization._base",
    "huggingface_hub.serialization._torch",
    "huggingface_hub.dataclasses",
    # What a model's build initialises it with (a rank builds it after its data code first
    # runs: the data's task, classes and padding size it) and what a training step, an
    # evaluation and the epoch's order call, found by tracing a BERT's, a GPT-2's, a Llama's
    # and a ViT's build, a step of each with AdamW and gradient clipping, their evaluation
    # under no_grad and a DistributedSampler's order (`sys.setprofile`): every module reached
    # outside Python's standard library and the holds above, less transformers' Auto classes'
    # (`transformers.models.auto`, which a build asks for the model's name only: their tables
    # are lazy, and listing one imports every model transformers has, ~11 s). Found by the
    # sixty-sixth round: a `__getitem__` that set `torch.nn.init._no_grad_normal_` to draw 10×
    # wider built BERT so, exit 0. tests/test_hostile_data.py checks the list against a trace.
    "torch.nn.init",
    "transformers.initialization",
    "torch.autograd.grad_mode",
    "torch.autograd.profiler",
    "torch.utils._contextlib",
    "torch.utils._device",  # every torch call's, where a default device is set
    "torch.utils.data.distributed",
    "torch.random",
    "torch.cuda.random",
    "torch.cuda.graphs",
    "torch.xpu.random",
    "torch.xpu.graphs",
    "torch.mps",
    "torch.mtia",
    "torch.accelerator",
    "torch._ops",
    "torch._compile",
    "torch._dynamo.eval_frame",
    "torch._dynamo.decorators",
    "torch._C._dynamo.eval_frame",
    "torch._C._linalg",
    "torch.profiler._cupti_monitor",
    "torch.package.package_importer",
    "transformers.utils.output_capturing",
    "transformers.utils.type_validators",
    "transformers.monkey_patching",
    "transformers.integrations.hub_kernels",
    "transformers.integrations.deepspeed",
    "huggingface_hub.utils",
    "huggingface_hub.utils.tqdm",
    "kernels._internals.layer.layer",
    # And what a sampled rank ran in besides (the sixty-sixth round's): the collectives'
    # logging wrapper and numpy's set operations.
    "torch.distributed.c10d_logger",
    "numpy.lib._arraysetops_impl",
)
# And compared at a rank's writes (at each epoch's end, before each checkpoint and its model:
# `check_rank_held`), not after each batch read, where `functions_kept` already holds them
# around the reads themselves (~0.3 ms more a batch, which the checks before any write make
# needless: nothing trained with a change is written).
RANK_AT_WRITES = (
    # What only `functions_kept` held, around each batch's reads: torch's own functions, its
    # functional layers, the optimizer a rank steps and torch.save's module. Found by the
    # sixty-fifth round: a thread a `__getitem__` started set, between two batches' reads,
    # `torch.save` to write zeros, `F.layer_norm` to run with eps 0.5 or `AdamW.step` to do
    # nothing (and torch's default dtype, held as RankHeld.dtype), each exit 0.
    *(name for name in KEPT_MODULES if name == "torch" or name.startswith("torch.")),
    # What `save_pretrained` and `torch.save` reach to turn each tensor into bytes (traced as
    # above): numpy's ctypes view (`np.ctypeslib.as_array`, safetensors.torch's `_tobytes`),
    # ctypes' `cast` and `POINTER`, numpy's `prod` and `asarray`, torch's storages, a
    # Parameter and the state dict's deep copy. Found by the sixty-fifth round: a
    # `__getitem__` that set `numpy.ctypeslib.as_array` to give zeros wrote an all-zero
    # model/, exit 0.
    "numpy",
    "numpy._core.fromnumeric",
    "numpy.ctypeslib",
    "numpy.ctypeslib._ctypeslib",
    "numpy._core._internal",
    "ctypes",
    "copy",
    "torch.storage",
    "torch.nn.parameter",
    "torch.utils.hooks",
)
# Plain objects code dispatches through, held with their own attributes: `json.dumps(obj)`
# encodes with json's default encoder (the sixty-second round: one replaced in a `load`
# rewrote every step's loss in run.jsonl).
RANK_VALUES = ("json._default_encoder", "json._default_decoder")
# What of pipeplan's modules its own code changes as it runs (caches, registries, what is held
# now): the rest of their tables (dicts, lists, sets) are held by their entries, as the
# sixty-second round's `executor.parallel.SCHEDULES["1f1b"] = quiet` in a `load` trained
# nothing, exit 0. tests/test_data.py checks the list against the code that changes them.
RANK_STATE = frozenset(
    {
        "cli._debug",
        "cli._forced",
        "cli._pending",
        "cli._said",
        "executor.cache._MADE",
        "executor.childimports._REPORTS_FOLDER",
        "executor.childimports._FORKING_TO",
        "executor.childimports._NAMED",
        "executor.childimports._FOUND",
        "executor.childimports._PROBLEMS",
        "executor.childimports._REPORT_TO",
        "executor.childimports._SENT",
        "executor.childimports._STUCK",
        "executor.cache._OPENED",
        "executor.checkpoint._READ_FROM",
        "executor.data._ACTIVE",
        "executor.data._BROUGHT_IN",
        "executor.data._DATA_RUNNING",
        "executor.data._LOADED",
        "executor.data._DESCRIPTORS",
        "executor.data._FILE_FOLDER",
        "executor.data._HELD_DESCRIPTORS",
        "executor.data._IMPORTED_BY",
        "executor.data._IMPORTED_FILES",
        "executor.data._INFERENCE_GUARDS",
        "executor.data._LOOKED",
        "executor.data._PASSED_ON",
        "executor.data._READING",
        "executor.data._RAN",
        "executor.data._RECORDED_AT",
        "executor.data._USERS",
        "executor.data._WATCHERS",
        "executor.data._first_lengths",
        "executor.data._kept_classes",
        "executor.data._kept_modules",
        "executor.data._loggers_listed",
        "executor.data._pipeplan_loggers",
        "executor.data._seen_kernels",
        "executor.errorfile._FOLDERS",
        "executor.errorfile._KEPT",
        "executor.errorfile._SPARE",
        "executor.leftovers._COMMAND_WATCH",
        "executor.topology._host_group",
        "executor.worker._one_sided",
        "pipeplan.calls._LOCK",
        "pipeplan.calls._RUNNING",
        "pipeplan.exits._BEFORE",
        "pipeplan.exits._COMMAND",
        "pipeplan.exits._LINEAGE",
        "pipeplan.fileio.OUTPUT_WRITTEN",
        "pipeplan.fileio._FOLDER_HELD",
        "pipeplan.fileio._HELD",
        "pipeplan.fileio._HELD_AS",
        "pipeplan.fileio._HELD_BY",
        "pipeplan.fileio._TRAINED",
        "pipeplan.fileio._TRAINED_FD",
        "pipeplan.fileio._TRAINED_LOCK",
        "pipeplan.formats.layout._RANK_MAP_FACTS",
        "pipeplan.formats.run._NOTICED",
        "pipeplan.log.DATA_THREADS",
        "pipeplan.log._OUTPUTS",
        "pipeplan.log._THREADS",
        "pipeplan.runfiles._NOTICED",
        "pipeplan.solver._FAMILIES",
        "pipeplan.solver._LINKS",
        "pipeplan.solver._ROOTS",
        "pipeplan.solver._SHAPES",
        "pipeplan.startup._arrivals",
        "pipeplan.startup._pipe_read",
    }
)


@dataclass
class RankHeld:
    """What `rank_held` took: each module's and class's names (name, owner, a copy of its
    `vars`), pipeplan's tables (dotted name, the table, a shallow copy), RANK_VALUES
    (dotted name, the object, a copy of its `vars`) and the libraries' tables (dotted name,
    the table, what each key gave: `_library_tables`)."""

    owners: list[tuple[str, Any, dict[str, Any]]]
    tables: list[tuple[str, Any, Any]]
    values: list[tuple[str, Any, dict[str, Any]]]
    entries: list[tuple[str, Any, dict[Any, Any]]] = field(default_factory=list)
    # What `_rank_changes` looks at first, in C: each owner's names, each table's keys and
    # entries and each value's attributes as live views, with their lengths and objects in
    # order as the last comparison found them unchanged (`_as_found`).
    views: list[Any] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)
    objects: list[Any] = field(default_factory=list)
    # Each owner's and value's own class as the rank started: a module's swapped for a
    # ModuleType subclass whose `__getattribute__` answers one name leaves its `vars` as they
    # were (the sixty-fifth round: torch._C._nn.cross_entropy_loss so answered, exit 0).
    held: list[Any] = field(default_factory=list)
    kinds: list[type] = field(default_factory=list)
    # torch's default dtype as the rank started (`functions_kept` holds it around reads only).
    dtype: torch.dtype | None = None
    # How many of `owners` (the first) are compared after each batch read, and so how many of
    # `views` and of `held`: the rest, RANK_AT_WRITES', only before the rank writes.
    read_owners: int = -1
    read_views: int = 0
    read_held: int = 0
    # The rank's own model, then its phase's stage and optimizer (`hold_rank_objects`): none
    # until the model is built.
    own: list[ObjectsHeld] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.dtype = torch.get_default_dtype()
        if self.read_owners < 0:
            self.read_owners = len(self.owners)
        reads, writes = self.owners[: self.read_owners], self.owners[self.read_owners :]
        self.held = [owner for _, owner, _ in reads] + [value for _, value, _ in self.values]
        self.read_held = len(self.held)
        self.held += [owner for _, owner, _ in writes]
        self.kinds = list(map(type, self.held))
        self.views = [vars(owner).values() for _, owner, _ in reads]
        self.views += [view for _, table, _ in self.tables for view in _table_views(table)]
        self.views += [vars(value).values() for _, value, _ in self.values]
        self.views += [view for _, table, _ in self.entries for view in _entry_views(table)]
        self.read_views = len(self.views)
        self.views += [vars(owner).values() for _, owner, _ in writes]
        self.found()

    def found(self) -> None:
        """What the views hold now, as `_as_found` compares it next."""
        self.lengths = list(map(len, self.views))
        self.objects = list(itertools.chain.from_iterable(self.views))
        for objects in self.own:
            objects.found()


def _table_views(table: Any) -> list[Any]:
    """A table's live views: a dict's keys and entries, a list or set itself."""
    return [table.keys(), table.values()] if isinstance(table, dict) else [table]


def _entry_views(table: Any) -> list[Any]:
    """A library table's live views: a dict's keys and entries; a registry object's
    attributes and the keys and entries of the dicts among them (its own mapping)."""
    if issubclass(type(table), dict):
        return [table.keys(), table.values()]
    names = vars(table)
    own = [value for value in names.values() if issubclass(type(value), dict)]
    return [names.values(), *(view for value in own for view in (value.keys(), value.values()))]


# A library module's plain values compared as its functions are (`_rank_changes`), where its
# own code does not rebind them (`_rebinds`): the flags its functions read at each call.
_FLAGS = (bool, int, float, complex, str, bytes, type(None))


def _library_tables(name: str, names: dict[str, Any]) -> list[tuple[str, Any, dict[Any, Any]]]:
    """The tables at the top level of a library's module or class (`names`, its `vars`),
    each with what each of its keys gives now: every dict (transformers'
    `AttentionInterface._global_mapping`, `ACT2CLS`), and every other mapping (a registry
    object, `ALL_ATTENTION_FUNCTIONS`, which looks a key up in its own dict, then in its
    class's). Found by the sixty-fourth round: `AttentionInterface.register("sdpa", zeros)`
    or `AttentionMaskInterface.register("sdpa", all_true)` in a `__getitem__` trained BERT
    with no attention and GPT-2 with a non-causal mask, exit 0: holding the class held the
    dict, not what it maps to."""
    found = []
    for key, value in names.items():
        kind = type(value)
        if key.startswith("__") or issubclass(kind, type):
            continue
        if issubclass(kind, dict):
            # Its entries as stored: `dict(value)` calls a subclass's `__getitem__`, which
            # for transformers' ACT2FN makes each activation.
            stored = dict(zip(value.keys(), value.values(), strict=True))
            found.append((f"{name}.{key}", value, stored))
        elif (
            issubclass(kind, Mapping)
            and not issubclass(kind, (weakref.WeakKeyDictionary, weakref.WeakValueDictionary))
            and isinstance(getattr(value, "__dict__", None), dict)
        ):  # not a weak one, whose entries go as their objects do
            with contextlib.suppress(Exception):  # one that cannot list its keys: left out
                found.append((f"{name}.{key}", value, {item: value[item] for item in value}))
    return found


def _entries_kept(table: Any, held: dict[Any, Any]) -> bool:
    """Whether each key of a library's table (`_library_tables`) still gives what it gave
    (`held`): a key added (`AttentionInterface.register("mine", f)`, a cache's new entry) is
    no change, a key held that now gives another object or none is."""
    missing = object()
    get = partial(dict.get, table) if issubclass(type(table), dict) else table.get
    try:
        return all(get(key, missing) is value for key, value in held.items())
    except Exception:  # its lookup failed: not as it was
        return False


@cache
def _rebinds(module: types.ModuleType) -> frozenset[str]:
    """The names of `module` its own functions and its classes' methods rebind (`global
    name`): its state as it runs (`transformers.utils.logging._tqdm_active`), not a flag
    code elsewhere may change."""
    space = vars(module)
    functions = []
    codes = []
    # Reading a library's objects can warn: `torch.distributed.reduce_op`'s deprecation, read
    # here once a torchrun rank's process group had changed a flag of torch.distributed, was
    # four lines of FutureWarning on every rank's console.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for value in list(space.values()):
            if (
                issubclass(type(value), type)
                and getattr(value, "__module__", None) == module.__name__
            ):
                functions += list(vars(value).values())
            else:
                functions.append(value)
        for value in functions:
            parts = [value]
            for key in ("__func__", "fget", "fset"):
                with contextlib.suppress(Exception):  # an object whose attributes fail: none
                    parts.append(getattr(value, key, None))
            for part in parts:
                with contextlib.suppress(Exception):
                    function = inspect.unwrap(part)
                    if type(function) is types.FunctionType and function.__globals__ is space:
                        codes.append(function.__code__)
    names: set[str] = set()
    while codes:
        code = codes.pop()
        codes += [const for const in code.co_consts if type(const) is types.CodeType]
        names.update(
            step.argval
            for step in dis.get_instructions(code)
            if step.opname in ("STORE_GLOBAL", "DELETE_GLOBAL")
        )
    return frozenset(names)


def _as_found(held: RankHeld, read: bool = False) -> bool:
    """Whether every view of `held` holds what it held at the last comparison, and each owner
    its own class, compared in C (~0.35 ms for the ~15,500 names and entries of a BERT rank,
    against ~2.7 ms for `_rank_changes`' full comparison): the check each batch a rank reads
    can afford. `read`: those compared after a batch read only (less RANK_AT_WRITES')."""
    views = held.views[: held.read_views] if read else held.views
    owners = held.held[: held.read_held] if read else held.held
    return (
        list(map(len, views)) == held.lengths[: len(views)]
        and torch.get_default_dtype() is held.dtype
        and all(map(operator.is_, map(type, owners), held.kinds))
        and all(map(operator.is_, itertools.chain.from_iterable(views), held.objects))
        and all(objects.as_found() for objects in held.own)
    )


def _rank_module(name: str, libraries: Collection[str] = ()) -> bool:
    """Whether the module `name` is one a rank holds (RANK_PACKAGES, RANK_TORCH, or one of
    `libraries` by its own name)."""
    return (
        name.partition(".")[0] in RANK_PACKAGES
        or name in libraries
        or any(name == top or name.startswith(f"{top}.") for top in RANK_TORCH)
    )


def _table_copy(value: Any) -> Any:
    """A shallow copy of a dict, list or set of pipeplan's (None: no table)."""
    kind = type(value)
    if issubclass(kind, dict):
        return dict(value)
    if issubclass(kind, list):
        return list(value)
    return set(value) if issubclass(kind, set) else None


def _same_table(now: Any, held: Any) -> bool:
    """Whether the table `now` holds what its copy `held` did: the same keys, each with the
    same object; the same objects in the same order; the same members."""
    if isinstance(held, dict):
        return now.keys() == held.keys() and all(now[key] is value for key, value in held.items())
    if isinstance(held, set):
        return set(now) == held
    return len(now) == len(held) and all(map(operator.is_, now, held))


def rank_held(model: Iterable[str] = ()) -> RankHeld:
    """The modules, classes, tables and objects a rank holds (RANK_PACKAGES, RANK_TORCH,
    RANK_LIBRARIES and the `model`'s modules, imported now, RANK_VALUES; and RANK_AT_WRITES,
    the last owners, compared before its writes only), as they are now: taken at a rank's
    start, before its data code first runs, and compared by `check_rank_held`.

        held = rank_held(models.model_modules("bert-synth"))
    """
    libraries = {*RANK_LIBRARIES, *model}
    for name in [*libraries, *RANK_AT_WRITES]:
        with contextlib.suppress(ImportError):  # not installed: nothing of it runs
            importlib.import_module(name)
    found = [
        (name, module)
        for name, module in list(sys.modules.items())
        if issubclass(type(module), types.ModuleType)
    ]
    modules = [(name, module) for name, module in found if _rank_module(name, libraries)]
    reads = len(modules)  # the modules compared after each read, then those at writes
    modules += [
        (name, module)
        for name, module in found
        if name in RANK_AT_WRITES and not _rank_module(name, libraries)
    ]
    owners: list[tuple[str, Any, dict[str, Any]]] = []
    tables: list[tuple[str, Any, Any]] = []
    seen: set[int] = set()
    # A class is held under a module that defines it: those compared after each read, then
    # (RANK_AT_WRITES') all.
    defined = {module.__name__ for _, module in modules[:reads] if isinstance(module.__name__, str)}
    read_owners = 0
    for index, (name, module) in enumerate(modules):
        if index == reads:
            read_owners = len(owners)
            defined |= {m.__name__ for _, m in modules[reads:] if isinstance(m.__name__, str)}
        if id(module) in seen:
            continue
        seen.add(id(module))
        names = vars(module).copy()
        owners.append((name, module, names))
        for key, value in names.items():
            # A class under the module that defines it (not a class it imported from another).
            if issubclass(type(value), type) and id(value) not in seen:
                if not value.__flags__ & _IMMUTABLE_TYPE and value.__module__ in defined:
                    seen.add(id(value))
                    owners.append((f"{name}.{key}", value, vars(value).copy()))
            elif name.partition(".")[0] in RANK_PACKAGES and f"{name}.{key}" not in RANK_STATE:
                copy = _table_copy(value)
                if copy is not None and not key.startswith("__"):
                    tables.append((f"{name}.{key}", value, copy))
    values = []
    for dotted in RANK_VALUES:
        module, _, key = dotted.rpartition(".")
        value = getattr(sys.modules.get(module), key, None)
        if isinstance(getattr(value, "__dict__", None), dict):
            values.append((dotted, value, vars(value).copy()))
    if reads == len(modules):
        read_owners = len(owners)
    entries = [
        table
        for name, _, names in owners[:read_owners]
        if name.partition(".")[0] not in RANK_PACKAGES
        for table in _library_tables(name, names)
    ]
    return RankHeld(owners, tables, values, entries, read_owners=read_owners)


def _rank_changes(held: RankHeld, read: bool = False, *, _own: Any = _guard_changes) -> list[str]:
    """What of `held` (`rank_held`) is changed now, by dotted name: a function or class
    replaced or deleted (as `functions_kept` tells it, the library's own wrappers let
    through), one of pipeplan's values rebound, a table of pipeplan's whose entries changed,
    an object of RANK_VALUES replaced or its attributes changed. Nothing, at once, where
    nothing moved since the last comparison (`_as_found`); else compared in full with the
    rank's start, and what passes is what the next comparison starts from (a library's own
    wrapper or a name added since stays as it is). What the comparison runs on is compared
    first (`_own`: `_guard_changes`, as this module was defined), and put back, but after a
    batch read (`read`: RANK_AT_WRITES' modules are not compared either)."""
    # After a read, `guard_kept` has just compared them, as the batch's reads ended.
    own = [] if read else _own()
    if not own and _as_found(held, read):
        return []
    before = {id(owner): names for _, owner, names in held.owners}
    there = {id(value) for _, _, names in held.owners for value in names.values()}
    changed = []
    missing = object()
    for name, owner, names in held.owners:
        now = vars(owner)
        if len(now) == len(names) and all(map(operator.is_, now.values(), names.values())):
            continue
        found = [
            dotted
            for _, key, _, dotted, _ in _rebound(name, owner, names, before)
            if not _made_by_its_library(dotted, now.get(key), there)
        ]
        if not isinstance(owner, type) and name.partition(".")[0] in RANK_PACKAGES:
            # pipeplan's plain values too (a module's `RECALIBRATE_AFTER_STEPS`): no library
            # patches pipeplan, and its own code rebinds only what RANK_STATE names.
            found += [
                f"{name}.{key}"
                for key, old in names.items()
                if not _held(old)
                and not key.startswith("__")
                and f"{name}.{key}" not in RANK_STATE
                and now.get(key, missing) is not old
            ]
        elif not isinstance(owner, type):
            # A library's flags (`sdpa_attention._is_torch_npu_available`, `SAFE_WEIGHTS_NAME`),
            # and a name added to a module whose class gives what it lacks (torch._VF's
            # `__getattr__` gives torch's C functions: `torch._VF.dropout = …` hides one).
            found += [
                f"{name}.{key}"
                for key, old in names.items()
                if type(old) in _FLAGS
                and not key.startswith("__")
                and not _same_flag(now.get(key, missing), old)
                and key not in _rebinds(owner)
            ]
            if hasattr(type(owner), "__getattr__"):  # less a submodule imported since
                found += [
                    f"{name}.{key}"
                    for key in now.keys() - names.keys()
                    if not _imported_submodule(f"{name}.{key}", now[key])
                ]
        changed += found
    changed += [name for name, table, copy in held.tables if not _same_table(table, copy)]
    changed += [name for name, table, copy in held.entries if not _entries_kept(table, copy)]
    for dotted, value, names in held.values:
        module, _, key = dotted.rpartition(".")
        if (
            getattr(sys.modules.get(module), key, None) is not value
            or len(vars(value)) != len(names)
            or not all(map(operator.is_, vars(value).values(), names.values()))
        ):
            changed.append(dotted)
    reads, writes = held.owners[: held.read_owners], held.owners[held.read_owners :]
    changed += [
        f"the class of {name}"
        for name, value, kind in zip(
            [name for name, _, _ in reads + held.values + writes],
            held.held,
            held.kinds,
            strict=True,
        )
        if type(value) is not kind
    ]
    if (dtype := torch.get_default_dtype()) is not held.dtype:
        changed.append(f"torch's default dtype (to {_dtype(dtype)}, from {_dtype(held.dtype)})")
    for objects in held.own:
        changed += objects.changes()
    changed = own + changed
    if not changed:
        held.found()
    return list(dict.fromkeys(changed))


def _same_flag(now: Any, held: Any) -> bool:
    """Whether a library's plain value `now` is the one held (or equal to it, of its type;
    NaN as NaN)."""
    same = type(now) is type(held) and (now == held or (now != now and held != held))
    return now is held or same


# What of a module's instance its forward runs through, held by their entries: its sublayers
# and parameters (one replaced trains apart from the optimizer, or not at all). Its buffers
# too, but from the phase's hold on (`settings`): moving a layer to its device puts new ones
# in place (tensors' values are not held).
_MODULE_TABLES = ("_modules", "_parameters")
# What pipeplan itself sets each step, not held: an optimizer's groups' "lr" (the worker's
# `train_step`), StepMean's "scale" (`begin`), and a group's "params" (held by its members).
_SET_EACH_STEP = frozenset({"lr", "scale", "params"})
# Values compared by equality (of their type); any other by identity (`_same_held`).
_PLAIN = (bool, int, float, complex, str, bytes, tuple, type(None), torch.dtype, torch.device)


def _same_held(now: Any, held: Any) -> bool:
    """Whether a held entry `now` is the one held: a plain value (`_PLAIN`) equal to it, of
    its type, or the same object."""
    return now is held or (type(held) in _PLAIN and _same_flag(now, held))


# A tensor's own hooks (a parameter's: on its gradient, and after it accumulates).
_TENSOR_HOOKS = ("_backward_hooks", "_post_accumulate_grad_hooks")


def _their_hooks(hooks: Any, own: tuple[Any, ...] = ()) -> list[Any]:
    """The hooks of a hook dict (None: none) but pipeplan's `own`, the very objects it
    registered (`parallel.BackwardClock.hooks`, on each phase's stage and parameters, taken
    off as the phase ends). Found by the sixty-seventh round: a hook was taken for pipeplan's
    by its function's globals, and a user's function given `executor.parallel`'s zeroed each
    BertLayer's output, exit 0."""
    found = hooks.values() if isinstance(hooks, dict) else ()
    return [hook for hook in found if not any(hook is mine for mine in own)]


def _shadows(kind: type, key: str, value: Any) -> bool:
    """Whether an instance's attribute `key` (`value`) hides its class's `kind` attribute of
    that name where either is callable: `optimizer.step = nothing` on the object."""
    missing = object()
    found = inspect.getattr_static(kind, key, missing)
    return found is not missing and (callable(value) or callable(found))


class ObjectsHeld:
    """What `hold_rank_objects` took of a rank's own objects (its model's modules and
    parameters, its stage, its optimizer) and of torch's global hooks: each object's class,
    its attributes that hide a callable of its class, its hook dicts and a module's sublayers
    and parameters (`_MODULE_TABLES`) by their entries, an optimizer's groups and a loss
    function's attributes (`_hold_entries`), and, from a phase's hold, the model's buffers,
    modes and `requires_grad` (`_hold_settings`); compared by `check_rank_held` with the
    rest. Hooks of pipeplan's own (`exempt`: the phase's, by identity) come and go with each
    phase, and are no change."""

    def __init__(
        self,
        named: list[tuple[str, Any]],
        source: Any = None,
        hooks: bool = False,
        settings: torch.nn.Module | None = None,
        exempt: tuple[Any, ...] = (),
    ):
        """`named`: (what the line calls it, the object); `source`: what they were found in
        (the model's layers); `hooks`: torch's global hooks too; `settings`: the model whose
        buffers, layers' `training` and parameters' `requires_grad` are held as the phase
        set them (`_hold_settings`); `exempt`: pipeplan's own hooks (`_their_hooks`)."""
        self.named, self.source, self.exempt = named, source, exempt
        # (what the line calls it, the dict, the key, the value held), by `_same_held`.
        self.entries_held: list[tuple[str, dict, str, Any]] = []
        # (what the line calls it, a list or a dict's values, its members held), by identity.
        self.members_held: list[tuple[str, Any, list[Any]]] = []
        for name, value in named:
            self._hold_entries(name, value)
        self._hold_settings(settings)
        self.values = [value for _, value in named]
        self.kinds = list(map(type, self.values))
        # Per object: {name: value} of its attributes that hide its class's, as held.
        self.hidden = []
        # (the object's index, the attribute, the hooks not pipeplan's, or a table's entries).
        self.hooks: list[tuple[int, str, list[Any]]] = []
        self.tables: list[tuple[int, str, Any, dict[str, Any]]] = []
        for index, (_, value) in enumerate(named):
            names = vars(value) if isinstance(getattr(value, "__dict__", None), dict) else {}
            kind = type(value)
            self.hidden.append({key: got for key, got in names.items() if _shadows(kind, key, got)})
            keys = [key for key, got in names.items() if "_hooks" in key and isinstance(got, dict)]
            if isinstance(value, torch.Tensor):
                keys = list(_TENSOR_HOOKS)
            for key in keys:
                self.hooks.append((index, key, _their_hooks(getattr(value, key, None), exempt)))
            for key in _MODULE_TABLES if isinstance(value, torch.nn.Module) else ():
                table = names[key]
                self.tables.append((index, key, table, dict(table)))
        self.globals = [
            (module, key, _their_hooks(getattr(module, key), exempt))
            for module, key, _ in (_GLOBAL_HOOKS if hooks else ())
            if isinstance(getattr(module, key), dict)
        ]
        self.entry_dicts = [space for _, space, _, _ in self.entries_held]
        self.entry_keys = [key for _, _, key, _ in self.entries_held]
        self.entry_values = [value for _, _, _, value in self.entries_held]
        self.containers = [members for _, members, _ in self.members_held]
        self.container_lengths = [len(members) for _, _, members in self.members_held]
        self.members = [value for _, _, members in self.members_held for value in members]
        self.found()

    def _hold_entries(self, name: str, value: Any) -> None:
        """Hold an optimizer's groups (their number and each one's params, by identity, every
        other key but "lr") and its defaults, state and param_groups attributes; and every
        instance attribute of an object of pipeplan's own (its loss function: StepMean), but
        those it sets each step (`_SET_EACH_STEP`). Found by the sixty-seventh round: a
        `__getitem__` that set `maximize` on each of the AdamW's groups trained by gradient
        ascent, or replaced StepMean's `loss_sum` trained nothing, exit 0."""
        space = vars(value) if isinstance(getattr(value, "__dict__", None), dict) else {}
        if isinstance(value, torch.optim.Optimizer):
            for key in ("param_groups", "defaults", "state"):
                self.entries_held.append((f"{name}.{key}", space, key, space.get(key)))
            self.members_held.append((f"{name}.param_groups", value.param_groups, []))
            for index, group in enumerate(value.param_groups):
                self.members_held[-1][2].append(group)
                label = f"{name}.param_groups[{index}]"
                self.members_held.append((f"{label}['params']", group["params"], []))
                self.members_held[-1][2].extend(group["params"])
                self.members_held.append((f"{label}'s keys", group.keys(), list(group.keys())))
                self._hold_dict(label, group)
            self.members_held.append((f"{name}.defaults", value.defaults.keys(), []))
            self.members_held[-1][2].extend(value.defaults.keys())
            self._hold_dict(f"{name}.defaults", value.defaults)
        elif (
            type(value).__module__.partition(".")[0] in RANK_PACKAGES
            and not isinstance(value, torch.nn.Module)
            and space
        ):
            self.members_held.append((f"{name}'s attributes", space.keys(), list(space)))
            self._hold_dict(name, space, ".")

    def _hold_dict(self, name: str, space: dict, dot: str = "") -> None:
        """Hold each entry of `space` but those pipeplan sets each step (`_SET_EACH_STEP`)."""
        for key, got in space.items():
            if key not in _SET_EACH_STEP:
                label = f"{name}{dot}{key}" if dot else f"{name}[{key!r}]"
                self.entries_held.append((label, space, key, got))

    def _hold_settings(self, model: torch.nn.Module | None) -> None:
        """Hold, as the phase set them, `model`'s buffers (each module's table's entries),
        each of its modules' `training` (only frozen layers run in eval mode, but where
        pipeplan evaluates: `hold_rank_modes`) and each parameter's `requires_grad`. Found
        by the sixty-seventh round: a `__getitem__` that replaced BERT's position_ids
        buffer, called `.eval()` on each BertLayer (no dropout) or `requires_grad_(False)` on
        each parameter trained otherwise than asked, exit 0 (the last, with its untrained
        model written)."""
        modules = list(model.named_modules()) if model is not None else []
        for key, module in modules:
            table = vars(module)["_buffers"]
            label = f"the model's layers.{key}".rstrip(".")
            self.entries_held.append((f"{label}'s buffers", vars(module), "_buffers", table))
            self.members_held.append((f"{label}'s buffers", table.values(), list(table.values())))
        self.mode_names = [f"the model's layers.{key}".rstrip(".") for key, _ in modules]
        self.mode_spaces = [vars(module) for _, module in modules]
        self.params = list(model.named_parameters()) if model is not None else []
        self.param_values = [param for _, param in self.params]
        self.hold_modes()
        self.grads = list(map(_REQUIRES_GRAD, self.param_values))

    def hold_modes(self) -> None:
        """Take each module's `training` anew, as pipeplan switched them (to evaluate)."""
        self.modes = list(map(_TRAINING, self.mode_spaces))

    def found(self) -> None:
        """What `as_found` compares next, as it is now: each object's instance dict's length
        (an attribute added) and its entries that hide its class's, are hook dicts or tables
        (not the rest: the stage's spans of each step; `_hold_entries`' and `_hold_settings`'
        are compared as held), and those hook dicts' and tables' entries."""
        spaces = [
            vars(value)
            for value in self.values
            if isinstance(getattr(value, "__dict__", None), dict)
        ]
        self.spaces, self.sizes = spaces, list(map(len, spaces))
        self.at = [
            space
            for space in spaces
            for key, got in space.items()
            if "_hooks" in key or key in _MODULE_TABLES or callable(got)
        ]
        self.keys = [
            key
            for space in spaces
            for key, got in space.items()
            if "_hooks" in key or key in _MODULE_TABLES or callable(got)
        ]
        self.entries = list(map(dict.get, self.at, self.keys))
        tensors = [value for value in self.values if isinstance(value, torch.Tensor)]
        self.tensors = [value for value in tensors for _ in _TENSOR_HOOKS]
        self.tensor_keys = list(_TENSOR_HOOKS) * len(tensors)
        self.tensor_hooks = list(map(getattr, self.tensors, self.tensor_keys))
        dicts = [got for got in [*self.entries, *self.tensor_hooks] if isinstance(got, dict)]
        dicts += [getattr(module, key) for module, key, _ in self.globals]
        self.views = [table.values() for table in dicts]
        self.lengths = list(map(len, self.views))
        # Those not empty, whose entries `as_found` compares (most hook dicts are empty: their
        # lengths say all).
        self.full = [view for view, length in zip(self.views, self.lengths, strict=True) if length]
        self.objects = list(itertools.chain.from_iterable(self.full))

    def as_found(self) -> bool:
        """Whether every object is as the last comparison found it, compared in C."""
        return (
            all(map(operator.is_, map(type, self.values), self.kinds))
            and list(map(len, self.spaces)) == self.sizes
            and all(map(operator.is_, map(dict.get, self.at, self.keys), self.entries))
            and all(
                map(operator.is_, map(getattr, self.tensors, self.tensor_keys), self.tensor_hooks)
            )
            and list(map(len, self.views)) == self.lengths
            and all(map(operator.is_, itertools.chain.from_iterable(self.full), self.objects))
            and all(
                map(_same_held, map(dict.get, self.entry_dicts, self.entry_keys), self.entry_values)
            )
            and list(map(len, self.containers)) == self.container_lengths
            and all(map(operator.is_, itertools.chain.from_iterable(self.containers), self.members))
            and list(map(_TRAINING, self.mode_spaces)) == self.modes
            and list(map(_REQUIRES_GRAD, self.param_values)) == self.grads
        )

    def changes(self) -> list[str]:
        """What of the objects differs from what was held, by the name the line gives it."""
        changed = []
        for (name, value), kind, hidden in zip(self.named, self.kinds, self.hidden, strict=True):
            if type(value) is not kind:
                changed.append(f"the class of {name}")
            names = vars(value) if isinstance(getattr(value, "__dict__", None), dict) else {}
            changed += [
                f"{name}.{key}"
                for key, got in names.items()
                if (key in hidden and got is not hidden[key])
                or (key not in hidden and _shadows(kind, key, got))
            ]
            changed += [f"{name}.{key} (deleted)" for key in hidden.keys() - names.keys()]
        for index, key, held in self.hooks:
            now = _their_hooks(getattr(self.named[index][1], key, None), self.exempt)
            if len(now) != len(held) or not all(map(operator.is_, now, held)):
                changed.append(f"{self.named[index][0]}'s hooks ({key})")
        for index, key, table, entries in self.tables:
            now = vars(self.named[index][1]).get(key)
            if now is not table or not _same_table(now, entries):
                changed.append(f"{self.named[index][0]}'s {key.strip('_')}")
        for module, key, held in self.globals:
            now = _their_hooks(getattr(module, key, None), self.exempt)
            if len(now) != len(held) or not all(map(operator.is_, now, held)):
                changed.append(f"{module.__name__}.{key}")
        changed += [
            name
            for name, space, key, value in self.entries_held
            if key not in space or not _same_held(space[key], value)
        ]
        changed += [
            name
            for name, members, held in self.members_held
            if len(members) != len(held) or not all(map(operator.is_, members, held))
        ]
        changed += [
            f"{name}.training"
            for name, space, mode in zip(self.mode_names, self.mode_spaces, self.modes, strict=True)
            if space.get("training") != mode
        ]
        changed += [
            f"the model's layers.{name}.requires_grad"
            for (name, param), grad in zip(self.params, self.grads, strict=True)
            if param.requires_grad != grad
        ]
        return changed


_TRAINING = operator.itemgetter("training")
_REQUIRES_GRAD = operator.attrgetter("requires_grad")


def hold_rank_objects(
    held: RankHeld, model: torch.nn.Module, *phase: Any, hooks: tuple[Any, ...] = ()
) -> None:
    """Hold, in `held` (`rank_held`), the rank's own objects from now on, as `ObjectsHeld`
    says, compared by `check_rank_held` with the rest: every module and parameter of its
    `model` (the LayerSequence's layers) and torch's global hooks, held as first given; and
    `phase`'s objects (its stage's module, its optimizer, its loss function; None where it has
    none), in place of the last phase's (which go as it ends), with `hooks`, the hooks the
    phase itself registered (`BackwardClock.hooks`), no change. Found by the sixty-sixth
    round: a `__getitem__` that found the rank's AdamW through `gc` and set `step` on the
    instance, swapped its `__class__` for a subclass whose step does nothing, or registered a
    forward hook zeroing each BertLayer's output trained nothing, exit 0.

        hold_rank_objects(held, seq.layers)                                     # once built
        hold_rank_objects(held, seq.layers, runtime.module, runtime.optimizer, loss, hooks=…)
    """
    if not held.own or held.own[0].source is not model:
        named = [
            (f"the model's layers.{key}".rstrip("."), value) for key, value in model.named_modules()
        ]
        named += [(f"the model's layers.{key}", value) for key, value in model.named_parameters()]
        held.own = [ObjectsHeld(named, model, hooks=True)]
    held.own[0].exempt = hooks
    named = [
        (
            "this rank's stage"
            if isinstance(value, torch.nn.Module)
            else f"this rank's optimizer ({type(value).__name__})"
            if isinstance(value, torch.optim.Optimizer)
            else f"this rank's loss function ({type(value).__name__})",
            value,
        )
        for value in phase
        if value is not None
    ]
    held.own[1:] = [ObjectsHeld(named, settings=model, exempt=hooks)] if named else []


def hold_rank_modes(held: RankHeld) -> None:
    """Take the `training` of the rank's modules anew where pipeplan switches its stage to
    evaluate and back (`hold_rank_objects` held them as the phase set them).

        runtime.module.train(False)
        hold_rank_modes(held)
    """
    for objects in held.own[1:]:
        objects.hold_modes()


def check_rank_held(spec: str, held: RankHeld, when: str, read: bool = False) -> None:
    """BadArgumentError naming the data `spec` and what of `held` (`rank_held`) its code
    changed since the rank started, `when` saying where the rank stops and what it did not
    write; a rank calls it once its data is loaded, at each epoch's end and before each
    checkpoint and its model, and after each batch it reads (`read`: RANK_AT_WRITES' modules
    are not compared then, as `functions_kept` held them around the reads).

        check_rank_held("m:load", held, "while this rank trained (the checkpoint of step 22 …")
        # BadArgumentError: data 'm:load': its code replaced pipeplan.precision.compute while
        # this rank trained (the checkpoint of step 22 is not written); data code must …
    """
    changed = _rank_changes(held, read)
    if not changed:
        return
    raise BadArgumentError(
        f"data {quoted(spec)}: its code replaced or changed {_some(changed)} {when}; data "
        "code must leave pipeplan's modules and tables, torch's layers, functions and "
        "pipeline, the model's transformers modules and tables, what builds and saves it, "
        "safetensors, pydantic's BaseModel and json, and the rank's own model and optimizer "
        "(their classes, methods, layers, hooks and settings) as it found them, as every rank "
        "trains and writes its records and model with them (patch one only around your own code "
        "that needs it, as `with unittest.mock.patch(...)` does; hook your own modules)"
    )


# The standard streams (by what code calls them): pipeplan writes its output and its lines
# through them (`log.guard_console`'s wrappers; a rank's console), and Python's originals.
_STREAMS = ("stdin", "stdout", "stderr", "__stdin__", "__stdout__", "__stderr__")


@contextlib.contextmanager
def process_state_kept(spec: str, doing: str) -> Iterator[None]:
    """The user's data code (`doing`) leaves the process's state that pipeplan relies on and
    no other check holds as it found it, or is refused in one line naming what changed; each
    is put back, however the code ends: sys.stdin, sys.stdout and sys.stderr and Python's
    originals (compared by identity), the attributes of each stream object and of pipeplan's
    own wrappers of them (`_attributes_put_back`), a stream closed in place (opened again on
    its descriptor: `_reopened`), pipeplan's loggers (`_loggers_put_back`), the
    environment's variables (none removed or changed: a variable added is no
    change, as a library's `os.environ.setdefault(…)` is not), logging's
    `logging.disable` level, and Python's recursion limit (lowered; raising it is no change,
    as for `limits_kept`). Found by the forty-first round, each a data `load`: `sys.stdout =
    io.StringIO()` lost `pipeplan run`'s summary, exit 0; `os.environ.clear()` made a finished
    run "training failed … exited with code 0", exit 2 (the ranks read theirs at the end);
    `logging.disable(logging.CRITICAL)` dropped every rank's progress line; and
    `sys.setrecursionlimit(60)` failed the run as "cannot build the model from its config".
    By the forty-second, past the identity check: `sys.stdout.write = lambda s: 0` (set on
    pipeplan's wrapper) lost every line of stdout, exit 0; `sys.stdout.close()` ended in a
    traceback; the "pipeplan" logger's `.setLevel(logging.CRITICAL)` lost every progress
    line. By the forty-third, in place again: `sys.__stdout__.reconfigure(encoding="ascii")`
    (`_encodings_put_back`). By the forty-fourth: the handlers of the signals pipeplan
    stops on and the thread's signal mask (`_signals_put_back`), the interval timers
    (`_timers_put_back`), tempfile's folder and prefix (`_temp_settings_put_back`), the exit
    callbacks the user's files register (`_exit_callbacks_taken_off`) and the audit hooks the
    code tries to add, kept out (`_audit_hooks_refused`). Held where `torch_state_kept` is
    (~0.15 ms: a copy of the environment, the handlers of some 30 signals).

        with process_state_kept("m:load", "the data function"):
            os.environ.clear()
        # BadArgumentError: data 'm:load': the data function removed the environment
        # variables HOME, PATH, PIPEPLAN_LAUNCHER_PID and 40 more; data code must leave …
    """
    streams = [getattr(sys, name) for name in _STREAMS]
    consoles = _consoles()
    encodings = _encodings(consoles)
    loggers = _loggers_state()
    environ, variables = os.environ, os.environ.copy()
    disabled = logging.root.manager.disable
    depth = sys.getrecursionlimit()
    group = _group()
    timers = _timers()
    temp = _temp_settings()
    handlers, mask = _signals()
    callbacks, interval = list(gc.callbacks), sys.getswitchinterval()
    collector = gc.isenabled(), gc.get_threshold(), gc.get_debug()
    wakeup = _wakeup_fd()
    threads = set(threading.enumerate()) if pipeplan_log.holds_threads() else None
    watched = _watching()
    try:
        yield
    finally:
        _watched_ended(watched)  # what follows is pipeplan's own
        if threads is not None:  # the threads it left running write held (`log.DATA_THREADS`)
            for thread in set(threading.enumerate()) - threads:
                if thread.ident is not None:
                    pipeplan_log.DATA_THREADS[thread.ident] = (quoted(spec), thread)
        # First of all: the code below, pipeplan's, recurses too; and a timer the code armed
        # would stop it as an outside SIGALRM.
        lowered = sys.getrecursionlimit()
        if lowered < depth:
            sys.setrecursionlimit(depth)
        said = [("timers", change) for change in _timers_put_back(timers)]
        said += [("exits", change) for change in _exit_callbacks_taken_off(watched)]
        said += [("audit", change) for change in _audit_hooks_refused(watched)]
        said += [("exec", change) for change in _execs_refused(watched)]
        for name, old in zip(_STREAMS, streams, strict=True):
            if getattr(sys, name) is not old:
                setattr(sys, name, old)
                said.append(("streams", f"replaced sys.{name}"))
        said += [("streams", change) for change in _attributes_put_back(consoles)]
        said += [("encoding", change) for change in _encodings_put_back(encodings)]
        said += [("closed", change) for change in _reopened(consoles)]
        startup = _startup_added(environ, variables)  # before the environment is put back
        said += [("environment", change) for change in _environment_put_back(environ, variables)]
        # The ranks start in the environment pipeplan was started in; a rank itself starts
        # none, and its data code may read what it set as it reads (HF_DATASETS_OFFLINE).
        for key in startup if "RANK" not in environ else []:
            log.debug("took off %s, which data code %s added", _shown_key(key), quoted(spec))
            environ.pop(key, None)
        if logging.root.manager.disable != disabled:
            level = logging.root.manager.disable
            logging.disable(disabled)
            said.append(
                (
                    "logging",
                    f"set logging.disable's level to {_level_name(level)} (it was "
                    f"{_level_name(disabled)})",
                )
            )
        said += [("loggers", change) for change in _loggers_put_back(loggers)]
        moved = _group_put_back(group)
        if moved:
            said.append(("group", moved))
        if lowered < depth:
            said.append(
                ("recursion", f"lowered Python's recursion limit to {lowered:,} (it was {depth:,})")
            )
        said += [("tempfile", change) for change in _temp_settings_put_back(temp)]
        # The fifty-third round: a gc callback ran in pipeplan's code (one that set a tracer
        # made a raising tracer the model build's failure); a switch interval of 1e6 s left
        # the hang watch, a thread, no turn to run; a faulthandler watchdog (which no call can
        # see armed) ended the command, exit 1, in silence: disarmed after every call.
        faulthandler.cancel_dump_traceback_later()
        if gc.callbacks != callbacks:
            gc.callbacks[:] = callbacks
            said.append(("gc", "changed gc.callbacks"))
        # The collector's switch and thresholds are put back without a word, as a thread count
        # is: a speed setting of the code's own (the fifty-fifth round: off, cyclic garbage of
        # a long run was never freed; at (1, 1, 1) a run went at half its speed).
        if (gc.isenabled(), gc.get_threshold(), gc.get_debug()) != collector:
            (gc.enable if collector[0] else gc.disable)()
            gc.set_threshold(*collector[1])
            gc.set_debug(collector[2])  # DEBUG_STATS printed 1,000 lines (fifty-sixth round)
        said += [("signals", change) for change in _wakeup_fd_put_back(wakeup)]
        if sys.getswitchinterval() != interval:
            changed = sys.getswitchinterval()
            _set_switch_interval(interval)
            said.append(
                ("switch", f"set the switch interval to {changed:g} s (it was {interval:g} s)")
            )
        # Last of all: a signal held back by the mask is delivered as it is put back, and
        # its handler (pipeplan's: Interrupted, Stopped) may raise past what follows.
        said += [("signals", change) for change in _signals_put_back(handlers, mask)]
    if not said:
        return
    kinds = list(dict.fromkeys(kind for kind, _ in said))
    # A session cannot be left: said as it is (the command ends here all the same).
    back = "put back now" if _group() == group else "put back now where the OS allows"
    raise BadArgumentError(
        f"data {quoted(spec)}: {doing} {' and '.join(change for _, change in said)}; "
        f"{'; '.join(_STATE[kind][0] for kind in kinds)} ({back}; "
        f"{'; '.join(_STATE[kind][1] for kind in kinds)})"
    )


def _group() -> tuple[int, int]:
    """The process's group and session, which a terminal's Ctrl-C reaches it by."""
    return os.getpgrp(), os.getsid(0)


def _group_put_back(held: tuple[int, int]) -> str | None:
    """What the code did to the process's group and session (`_group`), the group put back
    where it can be; None: nothing. Found by the forty-third round: a launcher's `load`
    calling `os.setpgrp()` moved `pipeplan run` out of the terminal's foreground group, so
    that Ctrl-C no longer reached it and training went on. `os.setpgid(0, old)` puts it back
    in its session; a process that made a session of its own (`os.setsid()`) cannot go back
    to the old one, and the refusal ends the command all the same (the launcher's check of
    the data comes before the run)."""
    now = _group()
    if now == held:
        return None
    if now[1] == held[1]:
        with contextlib.suppress(OSError):  # the old group gone: said all the same
            os.setpgid(0, held[0])
        return f"moved the process to process group {now[0]} (it was {held[0]})"
    return (
        f"moved the process to a session of its own ({now[1]}, it was {held[1]}), which it "
        "cannot leave"
    )


# The longest switch interval code may set in a pipeplan process (`sys.setswitchinterval`):
# the hang watch is a thread, which a Python loop holding the interpreter lets run only once
# an interval is over. Found by the fifty-third round: 1e6 s before a looping read hung the
# command and every rank without bound. Longer is refused as the call is made, and any other
# change after the data code returns (`process_state_kept`).
MAX_SWITCH_INTERVAL_S = 1.0
_set_switch_interval = sys.setswitchinterval


def _bounded_switch_interval(interval: float) -> None:
    """sys.setswitchinterval, in a pipeplan process: at most MAX_SWITCH_INTERVAL_S."""
    if interval > MAX_SWITCH_INTERVAL_S:
        raise ValueError(
            f"switch interval {interval!r} s: pipeplan allows at most {MAX_SWITCH_INTERVAL_S:g} "
            "s, as its hang watch is a thread"
        )
    _set_switch_interval(interval)


sys.setswitchinterval = _bounded_switch_interval


# The signals whose handlers `process_state_kept` holds: Ctrl-C's and every stop
# (`startup.SIGNALS`), which pipeplan stops and interrupts itself and its ranks with; SIGCHLD,
# by which torch's agent learns that a rank ended (the fifty-third round: a `load` that
# reaped children, or ignored SIGCHLD, turned a rank's failure into "summary.json: no such
# file" and the run folder was deleted); SIGPIPE, which Python ignores so that a closed
# stdout is an error pipeplan says (restored to its default, a run ended 141 in silence).
_HELD_SIGNALS = (*SIGNALS, signal.SIGCHLD, signal.SIGPIPE)


def _signals() -> tuple[list[Any], set[int]]:
    """This process's handlers of `_HELD_SIGNALS` (`signal.getsignal`) and this thread's
    signal mask (the signals it blocks), as `_signals_put_back` compares them."""
    return [signal.getsignal(signum) for signum in _HELD_SIGNALS], _mask()


def _wakeup_fd() -> int | None:
    """The file descriptor signals are written to (`signal.set_wakeup_fd`; -1: none), or None
    off the main thread, where it can be neither read nor set."""
    try:
        fd = signal.set_wakeup_fd(-1)  # the one way to read it: set it, then set it back
    except ValueError:
        return None
    with contextlib.suppress(ValueError, OSError):  # made blocking since: left off
        signal.set_wakeup_fd(fd)
    return fd


def _wakeup_fd_put_back(fd: int | None) -> list[str]:
    """What the code did to the wakeup fd `_wakeup_fd` read, put back. Found by the fifty-
    fifth round: a `load` that set one (a pipe whose reader it closed) had a later Ctrl-C
    print Python's "Exception ignored when trying to write to the signal wakeup fd" and a
    warning before `pipeplan: interrupted`."""
    now = _wakeup_fd()
    if fd is None or now is None or now == fd:
        return []
    with contextlib.suppress(ValueError, OSError):
        signal.set_wakeup_fd(fd)
    return [f"set the signal wakeup fd to {now} (signal.set_wakeup_fd)"]


def _mask() -> set[int]:
    return set(signal.pthread_sigmask(signal.SIG_BLOCK, []))


def _signals_put_back(handlers: list[Any], mask: set[int]) -> list[str]:
    """What the code did to the handlers and the mask `_signals` held, each put back: a
    handler set again (the default where the old one was not installed from Python, as
    `fileio.stops_raised` does), the mask set again (a signal it held back is delivered now).
    Found by the forty-fourth round: a launcher's `load` that blocked SIGINT and SIGTERM
    (`signal.pthread_sigmask`) or ignored them (`signal.signal(…, signal.SIG_IGN)`) left
    every rank deaf to Ctrl-C and SIGTERM: torch's agent waited its 10 s and SIGKILLed them,
    and a short run trained to its end and was said "stopped by SIGTERM", exit 143."""
    said = []
    changed = []
    for signum, old in zip(_HELD_SIGNALS, handlers, strict=True):
        new = signal.getsignal(signum)
        if new is not old and new != old:
            changed.append(signal_name(signum))
            with contextlib.suppress(ValueError, OSError):  # off the main thread: none set it
                signal.signal(signum, signal.SIG_DFL if old is None else old)
    if changed:
        said.append(f"changed the handler of {_some(changed)}")
    now = _mask()
    if now != mask:
        blocked = [signal_name(signum) for signum in sorted(now - mask)]
        unblocked = [signal_name(signum) for signum in sorted(mask - now)]
        parts = [f"blocked {_some(blocked)}"] if blocked else []
        parts += [f"unblocked {_some(unblocked)}"] if unblocked else []
        said.append(f"{' and '.join(parts)} (signal.pthread_sigmask)")
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    return said


# The process's interval timers (`signal.setitimer`; `signal.alarm` is ITIMER_REAL's): each
# one's name, the signal it sends when it runs out, and the clock it counts (wall time, the
# process's user CPU time, its user and system CPU time).
_TIMERS = (
    ("ITIMER_REAL", signal.ITIMER_REAL, "SIGALRM", time.monotonic),
    (
        "ITIMER_VIRTUAL",
        signal.ITIMER_VIRTUAL,
        "SIGVTALRM",
        lambda: resource.getrusage(resource.RUSAGE_SELF).ru_utime,
    ),
    (
        "ITIMER_PROF",
        signal.ITIMER_PROF,
        "SIGPROF",
        lambda: sum(resource.getrusage(resource.RUSAGE_SELF)[:2]),
    ),
)
# How far a timer may be from where it would be, had the code not touched it (s): CPU time is
# counted by the kernel's ticks.
_TIMER_SLACK = 0.05


def _timers() -> list[tuple[tuple[float, float], tuple[float, float]]]:
    """Each of `_TIMERS`: (its time left and its interval, `signal.getitimer`; (0, 0) where
    it is not armed) and its clock's readings just before and after: a process descheduled
    between a reading and the timer's (a loaded machine) saw a timer it had not touched as
    re-armed (a rehearsal of the eighty-sixth round's session)."""
    held = []
    for _, kind, _, clock in _TIMERS:
        before = clock()
        timer = signal.getitimer(kind)
        held.append((timer, (before, clock())))
    return held


def _timers_put_back(held: list[tuple[tuple[float, float], tuple[float, float]]]) -> list[str]:
    """What the code did to the timers `_timers` held, each put back: one it armed disarmed,
    one armed before (pytest-timeout's, an API user's) set to the time it would have left.
    Found by the forty-fourth round: a `load` calling `signal.setitimer(signal.ITIMER_REAL, 3)`
    ended `pipeplan run` 3 s later with `pipeplan: stopped by SIGALRM`, exit 142, the line
    blaming a stop from outside for the data code's timer."""
    said = []
    for (name, kind, sends, clock), ((value, interval), then) in zip(_TIMERS, held, strict=True):
        start = clock()
        now_value, now_interval = signal.getitimer(kind)
        end = clock()
        if not value:  # not armed: any timer now is the code's
            if now_value:
                signal.setitimer(kind, 0)
                said.append(f"armed the timer {name} ({sends} in {now_value:.3g} s)")
            continue
        # What it may have left untouched, between the readings' bounds.
        least, most = value - (end - then[0]), value - (start - then[1])
        left = value - (clock() - then[1])
        if now_interval == interval and (
            # A timer that repeats is somewhere in its interval: only its end is seen.
            (interval and now_value)
            or max(least, 0.0) - _TIMER_SLACK <= now_value <= max(most, 0.0) + _TIMER_SLACK
            or (least <= _TIMER_SLACK and not now_value)  # it ran out (its signal was sent)
        ):
            continue
        signal.setitimer(kind, max(left, 0.001) if left > 0 or not interval else interval, interval)
        shown = f"{sends} in {now_value:.3g} s" if now_value else "disarmed"
        said.append(f"re-armed the timer {name} ({shown}; {sends} was due in {max(left, 0):.3g} s)")
    return said


def _temp_settings() -> tuple[Any, Any]:
    """tempfile's folder and prefix for the files it makes (`tempfile.tempdir`, which its first
    use sets, and `tempfile.template`)."""
    return tempfile.tempdir, tempfile.template


def _temp_settings_put_back(held: tuple[Any, Any]) -> list[str]:
    """What the code did to the settings `_temp_settings` held, each put back (a tempdir
    tempfile set itself, from None to the folder it found, is no change). Found by the
    forty-fourth round: a `load` that set `tempfile.tempdir = "/nonexistent/x"` failed `pipeplan
    run` with a line naming a path of pipeplan's own temporary files, not the data; pointed
    at a folder that exists, it moved them there in silence."""
    said = []
    for name, old in zip(("tempdir", "template"), held, strict=True):
        new = getattr(tempfile, name)
        if new == old or (name == "tempdir" and old is None and new == _default_tempdir()):
            continue
        setattr(tempfile, name, old)
        said.append(f"set tempfile.{name} to {_shown_value(new)} (it was {_shown_value(old)})")
    return said


def _default_tempdir() -> str | None:
    """The folder tempfile would choose (None where it finds none)."""
    try:
        return tempfile._get_default_tempdir()  # type: ignore[attr-defined]
    except Exception:  # no folder that can be written: tempfile's own error, later
        return None


def _shown_value(value: Any) -> str:
    try:
        return quoted(value) if isinstance(value, str) else one_line(repr(value))[:80]
    except Exception:  # a user object whose __repr__ raised
        return type(value).__name__


# What the user's data code does, in this thread, that cannot be seen afterwards
# (`_watching`): the exit callbacks it registers (atexit has no list of them) and the audit
# hooks it tries to add (none can be removed). `_ACTIVE`: the calls into it running now, in
# any thread, which a thread of the data code's own (that no call runs in) is seen by.
_WATCH = threading.local()
_ACTIVE: list[_Watched] = []


class _Watched:
    """What `_watching` saw while one call into the data code ran."""

    def __init__(self, before: _Watched | None) -> None:
        self.before = before  # the call this one runs inside, if any
        self.registered: list[_ExitCallback] = []  # by the user's own files
        self.hooks: list[str] = []  # the file of the code that tried to add each hook
        self.execs: list[str] = []  # the programs it tried to replace the process with
        self.pid = os.getpid()  # a child it forks may exec: that is the child's own


def _watching() -> _Watched:
    """A new `_Watched` for this thread, atexit.register watched and pipeplan's audit hook
    added first where they are not yet (`_watch_installed`)."""
    _watch_installed()
    watched = _Watched(getattr(_WATCH, "now", None))
    _WATCH.now = watched
    _ACTIVE.append(watched)
    return watched


def _watch_installed() -> None:
    """atexit.register watched (`_register` in its place) and pipeplan's audit hook added,
    once a process: before `functions_kept` takes its snapshot, whose wide hold holds atexit."""
    if not _WATCHERS:
        _WATCHERS.append(atexit.register)
        atexit.register = _register  # type: ignore[assignment]
        sys.addaudithook(_audit)


def _watched_now() -> _Watched | None:
    """The call into the data code that this thread runs, else the latest running in any
    thread (a thread the code started), else None: pipeplan's own code."""
    return getattr(_WATCH, "now", None) or (_ACTIVE[-1] if _ACTIVE else None)


def _watched_ended(watched: _Watched) -> None:
    _WATCH.now = watched.before
    with contextlib.suppress(ValueError):
        _ACTIVE.remove(watched)


# atexit's own register, once `_watching` has put `_register` in its place.
_WATCHERS: list[Any] = []


def _register(func: Any, /, *args: Any, **kwargs: Any) -> Any:
    """atexit.register, which registers what the user's own files register while their data
    code runs (`_watching`) as an `_ExitCallback` of its own, that `_exit_callbacks_taken_off`
    can take off again without touching another registration of the same function."""
    watched = _watched_now()
    if watched is None or not _users_file(sys._getframe(1).f_code.co_filename):
        return _WATCHERS[0](func, *args, **kwargs)
    if not callable(func):  # atexit's own error
        return _WATCHERS[0](func, *args, **kwargs)
    callback = _ExitCallback(func, args, kwargs)
    _WATCHERS[0](callback)
    watched.registered.append(callback)
    return func


class _ExitCallback:
    """An exit callback the user's data code registered (`_register`): `func(*args,
    **kwargs)`, unless taken off."""

    def __init__(self, func: Any, args: tuple, kwargs: dict) -> None:
        self.func, self.args, self.kwargs, self.off = func, args, kwargs, False

    def __call__(self) -> Any:
        if not self.off:
            return self.func(*self.args, **self.kwargs)
        return None


# The audited events that start a process (os.exec in a fork's child: the fork was one).
_STARTS = frozenset(
    ("os.fork", "os.forkpty", "os.posix_spawn", "os.spawn", "os.system", "subprocess.Popen")
)


def _audit(event: str, args: tuple) -> None:
    """pipeplan's audit hook: an audit hook added while the data code runs is not added (an
    exception derived from RuntimeError here keeps it out; `sys.addaudithook` then returns
    as if it were), and noted for `_audit_hooks_refused`. Every audited event calls it: the
    comparison first."""
    if event == "exec":
        if _DATA_RUNNING:
            _note_ran(args[0], sys._getframe(1))
        return
    if event != "sys.addaudithook" and event != "os.exec":
        if event in _STARTS and ending():  # the command's last sweep of what its code left
            raise ChildProcessError("pipeplan is ending: no process starts now")
        return
    watched = _watched_now()
    if watched is None:
        return
    if event == "os.exec":
        if os.getpid() != watched.pid:  # fork, then exec, in the child: a program started
            return
        program = quoted(os.fsdecode(args[0])) if args else "another program"
        watched.execs.append(program)
        raise RuntimeError(
            f"data code must not replace pipeplan's process with {program} (os.exec*; kept out)"
        )
    watched.hooks.append(sys._getframe(1).f_code.co_filename)
    raise RuntimeError("pipeplan: no audit hooks from data code")


def _exit_callbacks_taken_off(watched: _Watched) -> list[str]:
    """The exit callbacks the user's own files registered while the call `watched` ran, each
    taken off again; those of installed code (a library the data imports, multiprocessing's,
    weakref's) are theirs and stay. atexit has no list to read, and `atexit.unregister(f)`
    takes off every registration of `f` (`logging.shutdown` registered by the data and by
    logging: logging's too), so `_register` registered each of the user's as an object of its
    own (`_ExitCallback`), taken off alone. Found by the forty-fourth round: a `load` calling
    `atexit.register(print, …)` printed a line after `pipeplan run`'s summary, and
    `atexit.register(os._exit, 0)` added a line naming pipeplan's own wrapper of it."""
    if not watched.registered:
        return []
    said = []
    for callback in watched.registered:
        callback.off = True
        atexit.unregister(callback)
        said.append(_callback_name(callback.func))
    said = list(dict.fromkeys(said))
    return [f"registered the exit callback{'s' if len(said) > 1 else ''} {_some(said)}"]


def _callback_name(func: Any) -> str:
    """`func` by its module and name, a data file's module by the file's name ("mydata.bye",
    not the "_pipeplan_data_mydata" it is imported as)."""
    module = str(getattr(func, "__module__", None) or "").removeprefix(_OWN_ENTRIES)
    name = str(getattr(func, "__qualname__", None) or type(func).__qualname__)
    return one_line(f"{module}.{name}" if module else name)


def _users_file(filename: str) -> bool:
    """Whether code of `filename` is the user's: not installed (the standard library,
    site-packages), not pipeplan's own, not Python's own ("<frozen …>", "<string>")."""
    if not filename or filename.startswith("<"):
        return False
    path = Path(filename).resolve()
    own = Path(__file__).resolve().parents[1]
    if any(path.is_relative_to(own / package) for package in OWN_PACKAGES):
        return False
    return not any(path.is_relative_to(folder) for folder in _installed_folders())


def _execs_refused(watched: _Watched) -> list[str]:
    """The programs the code tried to replace pipeplan's process with (`os.execv` and the
    like; `_audit` kept them out). Found by the forty-sixth round: `os.execvp("true", …)` in a
    data module ended `pipeplan run` with exit 0, nothing prepared and nothing said."""
    if not watched.execs:
        return []
    return [f"tried to replace pipeplan's process with {_some(list(dict.fromkeys(watched.execs)))}"
            " (os.exec*; kept out)"]  # fmt: skip


def _audit_hooks_refused(watched: _Watched) -> list[str]:
    """The audit hooks the code tried to add while `watched` ran (`_audit` kept them out).
    Found by the forty-fourth round: a `load` adding one that raised on "os.rename" ended
    `pipeplan run` as it wrote its records, in a 51-line traceback, exit 1; a hook cannot be
    removed once added, so none from data code is."""
    if not watched.hooks:
        return []
    count = len(watched.hooks)
    hooks = "an audit hook" if count == 1 else f"{count} audit hooks"
    return [f"tried to add {hooks} (sys.addaudithook; kept out)"]


# Of each kind of state `process_state_kept` holds: the rule and why pipeplan needs it, and
# what the code can do instead.
_STATE = {
    "streams": (
        "data code must leave sys.stdin, sys.stdout and sys.stderr as it found them, as "
        "pipeplan writes its output and its lines through them",
        "to capture what your own code prints, use `with contextlib.redirect_stdout(...)` "
        "around it",
    ),
    "encoding": (
        "data code must leave the console streams' encoding and errors as it found them, as "
        "pipeplan writes its output and its lines through them",
        "to write text of your own in an encoding, encode it yourself or open a file with "
        "`encoding=`",
    ),
    "closed": (
        "data code must not close sys.stdin, sys.stdout or sys.stderr (nor Python's "
        "originals, sys.__stdout__ and the like), as pipeplan writes its output and its lines "
        "through them",
        "to keep your own code's output off the console, use "
        "`with contextlib.redirect_stdout(io.StringIO()):` around it",
    ),
    "environment": (
        "data code must not remove or change the process's environment variables, as "
        "pipeplan's ranks read theirs as they run and end, and inherit the launcher's",
        "adding a variable is fine; to run a program in another environment, pass it "
        "`env={**os.environ, ...}`",
    ),
    "logging": (
        "data code must leave `logging.disable` as it found it, as pipeplan logs its progress "
        "lines and warnings",
        "to quiet a library, set its own logger's level (`.setLevel(...)` on the logger "
        "`logging.getLogger` gives for its name)",
    ),
    "loggers": (
        "data code must leave pipeplan's loggers ('pipeplan' and those below it: their levels, "
        "handlers, filters, propagation) as it found them, as pipeplan logs its progress "
        "lines and warnings through them",
        "to quiet a library, set its own logger's level",
    ),
    "group": (
        "data code must leave the process in its process group and session, as a terminal's "
        "Ctrl-C reaches pipeplan through them",
        "to start a program apart from the terminal, pass it `start_new_session=True` or "
        "`process_group=0` (subprocess)",
    ),
    "recursion": (
        "data code must not lower Python's recursion limit, as torch and pipeplan recurse as "
        "they build the model and write its records",
        "raising it is fine",
    ),
    "tempfile": (
        "data code must leave tempfile's folder and prefix (tempfile.tempdir, "
        "tempfile.template) as it found them, as pipeplan makes its temporary files with "
        "tempfile",
        "to make your own temporary files elsewhere, pass `dir=` to tempfile's functions",
    ),
    "signals": (
        "data code must leave the process's signal handlers, mask and wakeup fd as it found "
        "them, as pipeplan and its ranks are stopped and interrupted by signals (Ctrl-C, SIGTERM)",
        "to hold a signal off around your own code, block it and unblock it before returning",
    ),
    "gc": (
        "data code must leave gc.callbacks as it found them, as they run inside pipeplan's "
        "own code",
        "to run code after a collection, call it yourself",
    ),
    "switch": (
        "data code must leave Python's switch interval (sys.setswitchinterval) as it found it, "
        "as pipeplan's hang watch is a thread that needs its turn",
        "leave the interval to Python",
    ),
    "timers": (
        "data code must leave the process's interval timers (signal.setitimer, signal.alarm) "
        "as it found them, as the signals they send (SIGALRM, SIGVTALRM, SIGPROF) stop pipeplan",
        "to limit your own code's time, disarm the timer before returning "
        "(`signal.setitimer(signal.ITIMER_REAL, 0)`)",
    ),
    "exits": (
        "data code must not register exit callbacks (atexit.register), as pipeplan's last line "
        "and its exit status are its own",
        "to clean up what your code makes, do so before it returns "
        "(`with tempfile.TemporaryDirectory():`)",
    ),
    "audit": (
        "data code must not add audit hooks, which no code can remove, as pipeplan's own "
        "writes and imports raise audit events",
        "to watch your own code, do so in a program of your own",
    ),
    "exec": (
        "data code must not replace pipeplan's process with another program, as pipeplan "
        "trains and writes its records in it",
        "to run a program, start it as a child (`subprocess.run`)",
    ),
}


# What `_consoles` keeps of a stream object: the names code reaches it by (`_console_name`),
# the object, a copy of its instance attributes (None: it has none), whether it was open, and
# how to open it again on its descriptor (`_reopened`; None: not a file, or closed already).
_Console = tuple[
    "tuple[list[str], list[str]]",
    Any,
    "dict[str, Any] | None",
    bool,
    "tuple[int, str, dict[str, Any]] | None",
]


# The name of an Output that no name of sys's reaches now (sys.stderr's, while
# `contextlib.redirect_stderr` holds it aside; a rank's console).
_CONSOLE = "pipeplan's console"


def _consoles() -> list[_Console]:
    """Each stream object pipeplan writes through, once: sys's six (`_STREAMS`), pipeplan's
    own wrappers (`log.outputs`: sys.stderr's is held aside by `contextlib.redirect_stderr`
    while the data code runs) and the file each wraps, each named by the names that reach it:
    "sys.__stdout__ (what sys.stdout writes to)" for the file under pipeplan's wrapper, which
    `sys.stdout.close()` closes. A few µs: a copy of each one's attributes."""
    direct: dict[int, list[str]] = {}
    wrapped: dict[int, list[str]] = {}
    found: dict[int, Any] = {}
    for name, stream in [(f"sys.{key}", getattr(sys, key, None)) for key in _STREAMS] + [
        (_CONSOLE, output) for output in pipeplan_log.outputs()
    ]:
        if stream is None or (name == _CONSOLE and id(stream) in found):
            continue
        found.setdefault(id(stream), stream)
        direct.setdefault(id(stream), []).append(name)
        if isinstance(stream, pipeplan_log.Output):
            found.setdefault(id(stream.stream), stream.stream)
            wrapped.setdefault(id(stream.stream), []).append(name)
    return [
        (
            (direct.get(key, []), wrapped.get(key, [])),
            stream,
            _attributes(stream),
            _is_open(stream),
            _reopening(stream),
        )
        for key, stream in found.items()
    ]


def _console_name(reached: tuple[list[str], list[str]]) -> str:
    """A stream object (`_consoles`) by the names that reach it, directly and through
    pipeplan's wrappers: "sys.__stdout__ (what sys.stdout writes to)"; said only when it
    changed, so made only then."""
    direct, wrapped = reached
    names = list(dict.fromkeys(direct))
    writers = [name for name in dict.fromkeys(wrapped) if name not in names]
    if not names:
        names, writers = writers[:1], writers[1:]
    also = f" (also {', '.join(names[1:])})" if len(names) > 1 else ""
    through = f" (what {' and '.join(writers)} writes to)" if writers else ""
    return names[0] + also + through


def _is_open(stream: Any) -> bool:
    """Whether `stream` is a file (not pipeplan's wrapper of one) that is open. Never raises:
    the object may be anything code set."""
    if isinstance(stream, pipeplan_log.Output):
        return False
    try:
        return stream.closed is False
    except Exception:
        return False


def _attributes(stream: Any) -> dict[str, Any] | None:
    try:
        return dict(vars(stream))
    except TypeError:  # no instance attributes
        return None


def _reopening(stream: Any) -> tuple[int, str, dict[str, Any]] | None:
    """How to open `stream` again as it is (descriptor, mode, keywords), where it is an open
    text file on a descriptor it does not own (Python's standard streams: closing one closes
    no descriptor); else None. Never raises: the object may be anything code set."""
    if isinstance(stream, pipeplan_log.Output):
        return None
    try:
        buffer = stream.buffer  # a FileIO itself where Python's are unbuffered (-u)
        if stream.closed or getattr(buffer, "raw", buffer).closefd:
            return None
        keywords = dict(
            encoding=stream.encoding,
            errors=stream.errors,
            line_buffering=stream.line_buffering,
            write_through=stream.write_through,
        )
        fd, mode = stream.fileno(), stream.mode
    except Exception:  # a StringIO, a user's object
        return None
    return (fd, mode, keywords) if isinstance(fd, int) and mode in ("r", "w") else None


def _attributes_put_back(consoles: list[_Console]) -> list[str]:
    """The instance attributes of the stream objects (`_consoles`) put back as they were:
    `sys.stdout.write = lambda s: 0` set on pipeplan's wrapper lost all its output, exit 0
    (the forty-second round). What an Output changes itself as it writes (`log.OWN_STATE`)
    is not the code's."""
    said = []
    missing = object()
    for reached, stream, before, _, _ in consoles:
        if before is None:
            continue
        now = vars(stream)
        own = pipeplan_log.OWN_STATE if isinstance(stream, pipeplan_log.Output) else ()
        keys = [
            key
            for key in dict.fromkeys([*before, *now])
            if key not in own and now.get(key, missing) is not before.get(key, missing)
        ]
        for key in keys:
            if key in before:
                now[key] = before[key]
            else:
                del now[key]
        said += [f"replaced {_attribute(_console_name(reached), key)}" for key in keys]
    return said


def _encodings(consoles: list[_Console]) -> list[tuple[Any, Any, tuple[str, str]]]:
    """Each text file of the stream objects (`_consoles`) with its encoding and errors, as
    `reconfigure` changes them in place (`_encodings_put_back`); pipeplan's wrappers are not
    files, and a StringIO has none."""
    held = []
    for reached, stream, _, _, _ in consoles:
        if isinstance(stream, pipeplan_log.Output):
            continue
        try:  # the object may be anything code set
            text = (stream.encoding, stream.errors)
            can = callable(stream.reconfigure)
        except Exception:
            continue
        if can and all(isinstance(part, str) for part in text):
            held.append((reached, stream, text))
    return held


def _encodings_put_back(held: list[tuple[Any, Any, tuple[str, str]]]) -> list[str]:
    """The encoding and errors of each console file (`_encodings`) put back where the code
    changed them. Found by the forty-third round: a `load` calling
    `sys.__stdout__.reconfigure(encoding="ascii", errors="strict")` ended a completed
    `pipeplan run` in a traceback of its summary line (a runs folder named "rüns"), exit 1;
    the identity and attribute checks cannot see a change made in place. One that cannot be
    put back (a stdin already read from, a file closed) is said all the same."""
    said = []
    for reached, stream, (encoding, errors) in held:
        try:
            now = (stream.encoding, stream.errors)
        except Exception:  # closed, or broken: `_reopened` says so, or it was the code's
            continue
        if now == (encoding, errors):
            continue
        with contextlib.suppress(Exception):
            stream.reconfigure(encoding=encoding, errors=errors)
        said.append(
            f"reconfigured {_console_name(reached)} to encoding {now[0]}, errors {now[1]} (it "
            f"was {encoding}, errors {errors})"
        )
    return said


def _attribute(name: str, key: str) -> str:
    """`_attribute("sys.__stdout__ (what sys.stdout writes to)", "write")` →
    "sys.__stdout__.write (what sys.stdout writes to)"."""
    first, space, rest = name.partition(" (")
    return f"{first}.{key}{space}{rest}"


def _reopened(consoles: list[_Console]) -> list[str]:
    """The stream files (`_consoles`) the code closed in place (`sys.stdout.close()`), each
    opened again on its descriptor as it was and put where the closed one was (sys's names,
    pipeplan's wrappers); one that cannot be (a StringIO, its descriptor gone) is said too.
    Found by the forty-second round: `sys.stdout.close()` in `load` ended `pipeplan run` in a
    traceback of pipeplan's next flush ("I/O operation on closed file"), and
    `sys.__stderr__.close()` in CPython's "lost sys.stderr"."""
    said = []
    for reached, stream, _, was_open, reopening in consoles:
        if not was_open or _is_open(stream):
            continue
        said.append(f"closed {_console_name(reached)}")
        if reopening is None:
            continue
        fd, mode, keywords = reopening
        try:
            os.fstat(fd)
            again = io.TextIOWrapper(open(fd, mode + "b", closefd=False), **keywords)  # noqa: SIM115
        except (OSError, ValueError, TypeError):
            continue
        again.mode = mode  # as `open` sets it: what `_reopening` reads, if closed again
        for key in _STREAMS:
            if getattr(sys, key, None) is stream:
                setattr(sys, key, again)
        for output in pipeplan_log.outputs():
            if output.stream is stream:
                output.stream = again
    return said


# The loggers `_loggers_state` holds, as last listed, and how many loggers there were then:
# listed again only when one was added (a process with transformers has hundreds).
_pipeplan_loggers: list[tuple[str, logging.Logger]] = []
_loggers_listed = [-1]


def _pipeplan_loggers_now() -> list[tuple[str, logging.Logger]]:
    """The loggers "pipeplan" and those below it ("pipeplan.run"), by name, as they are now."""
    every = logging.root.manager.loggerDict
    if len(every) != _loggers_listed[0]:
        prefix = pipeplan_log.LOGGER
        _pipeplan_loggers[:] = [
            (name, logger)
            for name, logger in list(every.items())
            if (name == prefix or name.startswith(prefix + "."))
            and isinstance(logger, logging.Logger)
        ]
        _loggers_listed[0] = len(every)
    return list(_pipeplan_loggers)


def _loggers_state() -> list[tuple[str, logging.Logger, tuple, list, dict[str, Any]]]:
    """What pipeplan's loggers log by (`_pipeplan_loggers_now`): each one's level, switch,
    propagation, handler and filter lists (the list objects and what they hold), and each
    handler's level, formatter and filters."""
    return [
        (
            name,
            logger,
            (
                logger.level,
                logger.disabled,
                logger.propagate,
                logger.handlers,
                list(logger.handlers),
                logger.filters,
                list(logger.filters),
            ),
            [
                (
                    handler,
                    handler.level,
                    handler.formatter,
                    handler.filters,
                    list(handler.filters),
                    _methods_set(handler),
                )
                for handler in logger.handlers
            ],
            _methods_set(logger),
        )
        for name, logger in _pipeplan_loggers_now()
    ]


def _methods_set(obj: Any) -> dict[str, Any]:
    """The methods of its class that `obj` has set on itself (`logger.info = noop`)."""
    return {
        key: value
        for key, value in vars(obj).items()
        if callable(value) and callable(getattr(type(obj), key, None))
    }


def _methods_put_back(obj: Any, held: dict[str, Any], what: str, said: list[str]) -> None:
    """`obj`'s methods set on itself as `held` (`_methods_set`) again; what changed said.
    Found by the sixtieth round: `info`, `warning` and `error` set to a no-op on pipeplan's
    loggers dropped every progress and warning line of a run, exit 0."""
    now = _methods_set(obj)
    if now.keys() == held.keys() and all(now[key] is held[key] for key in now):
        return
    names = sorted(now.keys() ^ held.keys() or now)
    said.append(f"replaced the method{'s' * (len(names) > 1)} {', '.join(names)} of {what}")
    for key in now:
        if key not in held:
            delattr(obj, key)
    for key, value in held.items():
        setattr(obj, key, value)


def _same(now: list, held: list, items: list) -> bool:
    return now is held and len(now) == len(items) and all(map(operator.is_, now, items))


def _loggers_put_back(
    before: list[tuple[str, logging.Logger, tuple, list, dict[str, Any]]],
) -> list[str]:
    """pipeplan's loggers (`_loggers_state`) put back as they were, and what the code changed
    of them said. Found by the forty-second round: the "pipeplan" logger's
    `.setLevel(logging.CRITICAL)` in `load` dropped every progress line of the run, exit 0,
    as `logging.disable` did (the forty-first)."""
    said: list[str] = []
    for name, logger, state, handlers, methods in before:
        level, disabled, propagate, handler_list, held, filter_list, filters = state
        named = f"the logger {quoted(name)}"
        _methods_put_back(logger, methods, named, said)
        if logger.level != level:
            said.append(
                f"set the level of {named} to {_level_name(logger.level)} (it was "
                f"{_level_name(level)})"
            )
            logger.setLevel(level)
        if logger.disabled != disabled:
            said.append(f"{'disabled' if logger.disabled else 'enabled'} {named}")
            logger.disabled = disabled
        if logger.propagate != propagate:
            said.append(f"turned {named}'s propagation {'on' if logger.propagate else 'off'}")
            logger.propagate = propagate
        if not _same(logger.handlers, handler_list, held):
            said.append(f"changed the handlers of {named}")
            logger.handlers = handler_list
            handler_list[:] = held
        if not _same(logger.filters, filter_list, filters):
            said.append(f"changed the filters of {named}")
            logger.filters = filter_list
            filter_list[:] = filters
        for handler, its_level, formatter, its_list, its_filters, its_methods in handlers:
            _methods_put_back(handler, its_methods, f"a handler of {named}", said)
            if handler.level != its_level or handler.formatter is not formatter:
                said.append(f"changed the level or format of a handler of {named}")
                handler.setLevel(its_level)
                handler.formatter = formatter
            if not _same(handler.filters, its_list, its_filters):
                said.append(f"changed the filters of a handler of {named}")
                handler.filters = its_list
                its_list[:] = its_filters
    return said


def _level_name(level: int) -> str:
    name = logging.getLevelName(level)
    return name if isinstance(name, str) and not name.startswith("Level ") else str(level)


def _environment_put_back(environ: Any, variables: dict[str, str]) -> list[str]:
    """What the code did to the environment (`variables`, the copy of `environ`, os.environ,
    before it): os.environ rebound, variables removed, changed, each said with three names at
    most (never a value: it may be a secret); where any, os.environ is put back as it was,
    the variables added since gone too. Variables added alone are no change."""
    said = []
    if os.environ is not environ:
        os.environ = environ  # noqa: B003 (the object itself put back, not a new environment)
        said.append("replaced os.environ")
    now = environ.copy()
    if now == variables and not said:
        return []
    removed = [key for key in variables if key not in now and not _torchs_own(key)]
    altered = [
        key
        for key, value in variables.items()
        if key in now and now[key] != value and not _torchs_own(key)
    ]
    for keys, verb in ((removed, "removed"), (altered, "changed")):
        if keys:
            more = f" and {len(keys) - 3} more" if len(keys) > 3 else ""
            names = ", ".join(map(_shown_key, keys[:3]))
            said.append(f"{verb} the environment variable{'s' * (len(keys) > 1)} {names}{more}")
    if said:
        environ.clear()
        environ.update({key: value for key, value in variables.items() if not _torchs_own(key)})
        environ.update({key: value for key, value in now.items() if _torchs_own(key)})
    return said


def _torchs_own(key: str) -> bool:
    """Whether torch's own code sets the variable `key` as it runs, which no data code is
    refused for (and a put-back leaves as torch set it): inductor sets
    `_TORCHINDUCTOR_PYOBJECT_TENSOR_DATA_PTR` to its process's own address each time it
    loads a compiled kernel, so a rank whose data code compiles changed the value it
    inherited from the launcher's compile, and was refused for torch's doing (the
    sixty-first round). Torch's private, underscored prefix alone: the variables a user
    sets (TORCHINDUCTOR_CACHE_DIR) stay held."""
    return key.startswith("_TORCHINDUCTOR_")


def _startup_added(environ: Any, variables: dict[str, str]) -> list[str]:
    """The variables the code added that a rank's start reads (`_STARTUP`), which are taken
    off without a word: the ranks inherit the launcher's environment and read them before any
    check of pipeplan's. Found by the fifty-fifth round: `GOMP_CPU_AFFINITY=abc` added by a
    data function spun every rank in libgomp without bound, `OMP_NUM_THREADS=0` printed
    libgomp's line and trained, `PYTHONHOME` printed Python's failed start on every rank.
    Refused at first, but libraries add them as they load (scikit-learn's
    `KMP_DUPLICATE_LIB_OK`, the fifty-seventh round): the code's own process keeps what it
    loaded, and a rank that runs the code sets them again in its own."""
    return [
        key
        for key in environ
        if key not in variables and (key.startswith(_STARTUP) or key in _LAUNCH_NAMES)
    ]


# Variables a rank's start reads, before any code of pipeplan's could check them: Python's,
# OpenMP's (libgomp, Intel's), the dynamic loader's and allocator's, torch's launcher's,
# pipeplan's own between launcher and rank; and torch's libraries' as the rank runs.
_STARTUP = (
    "PYTHON",
    "OMP_",
    "GOMP_",
    "KMP_",
    "LD_",
    "MALLOC_",
    "GLIBC_TUNABLES",
    "TORCHELASTIC_",
    "PIPEPLAN_",
    # Read by torch's libraries in a rank once it runs (the fifty-sixth round:
    # GLOO_SOCKET_IFNAME failed every collective, MKL_VERBOSE printed a line a product).
    "GLOO_",
    "NCCL_",
    "MKL_",
    "OPENBLAS_",
    "CUDA_",
    # And by the libraries a rank imports as it starts (the fifty-seventh round: an added
    # TRANSFORMERS_VERBOSITY put transformers' debug line before the run's one line).
    "TRANSFORMERS_",
    "HF_",
    "TORCH_",
    "PYTORCH_",
    "LOGLEVEL",
)
_LAUNCH_NAMES = {
    "MASTER_ADDR",
    "MASTER_PORT",
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "ROLE_RANK",
}


def _shown_key(key: str) -> str:
    """A variable's name as a line says it: itself, or quoted where it is odd."""
    plain = key.isascii() and key.isprintable() and " " not in key and len(key) <= 64
    return key if plain else quoted(key, 64)


# What each resource limit is to pipeplan (`limits_kept`): its words and unit, and what
# needs it beyond the ranks, which inherit every limit of the process that starts them.
_LIMITS = {
    "RLIMIT_AS": (
        "address space",
        "bytes",
        "a rank's model, optimizer state and batches take it",
    ),
    "RLIMIT_CPU": ("CPU time", "seconds", "training takes it; the process is killed past it"),
    "RLIMIT_DATA": (
        "data segment",
        "bytes",
        "a rank's model, optimizer state and batches take it",
    ),
    "RLIMIT_FSIZE": (
        "file size",
        "bytes",
        "checkpoints, the exported model and the run's records are files",
    ),
    "RLIMIT_MEMLOCK": ("locked memory", "bytes", "the collectives may lock their buffers"),
    "RLIMIT_NOFILE": (
        "open files",
        "files",
        "the launcher's rendezvous store holds a connection for each rank, and a rank its "
        "own connections, log and checkpoint files",
    ),
    "RLIMIT_NPROC": ("processes", "processes", "the ranks are processes, and threads count too"),
    "RLIMIT_SIGPENDING": (
        "queued signals",
        "signals",
        "pipeplan stops and interrupts its ranks with signals",
    ),
    "RLIMIT_STACK": ("stack size", "bytes", "each of torch's threads takes a stack"),
}


def _limit_kinds() -> list[tuple[str, int]]:
    """Every RLIMIT_* this platform has, once each (RLIMIT_OFILE is RLIMIT_NOFILE on Linux)."""
    kinds: dict[int, str] = {}
    for name in sorted(dir(resource)):
        if name.startswith("RLIMIT_"):
            kinds.setdefault(getattr(resource, name), name)
    return [(name, kind) for kind, name in kinds.items()]


_LIMIT_KINDS = _limit_kinds()


def _limit_order(value: int) -> float:
    return math.inf if value == resource.RLIM_INFINITY else value


def _limit_shown(value: int, unit: str) -> str:
    if value == resource.RLIM_INFINITY:
        return "unlimited"
    if unit == "bytes":
        shown = format_bytes(value)
        return shown if not shown.isdigit() else f"{value:,} bytes"
    return f"{value:,}"


@contextlib.contextmanager
def limits_kept(spec: str, doing: str) -> Iterator[None]:
    """The user's data code (`doing`) lowers none of the process's resource limits (each
    RLIMIT_* the platform has, soft or hard), or is refused in one line naming the limit, its
    new and old value and what pipeplan needs it for; the old limit is put back however the
    code ends (the soft one where a lowered hard one still allows it). Raising one is no
    change. Found by the thirty-ninth round: a `load` that lowered the open files limit
    (`resource.setrlimit(resource.RLIMIT_NOFILE, (40, hard))`) failed `pipeplan run` in a
    raw c10d warning and an error naming the wrong rank and cause ("stopped by SIGTERM"):
    the launcher's store had run out of file descriptors. Held where `torch_state_kept` is.

        with limits_kept("m:load", "the data function"):
            resource.setrlimit(resource.RLIMIT_NOFILE, (40, hard))
        # BadArgumentError: data 'm:load': the data function lowered the open files limit
        # (RLIMIT_NOFILE) to 40 (it was 1,024); …
    """
    before = [(name, kind, resource.getrlimit(kind)) for name, kind in _LIMIT_KINDS]
    lowered = []
    try:
        with lineage_kept():  # (the process's lineage: `exits.mark_lineage`)
            yield
    finally:
        for name, kind, old in before:
            new = resource.getrlimit(kind)
            if any(_limit_order(n) < _limit_order(o) for n, o in zip(new, old, strict=True)):
                lowered.append((name, old, new, _put_back_limit(kind, old, new)))
    if not lowered:
        return
    said, needs = [], []
    for name, old, new, put_back in lowered:
        what, unit, need = _LIMITS.get(name, (name.removeprefix("RLIMIT_").lower(), "", ""))
        hard = "" if _limit_order(new[0]) < _limit_order(old[0]) else "hard "
        part = 1 if hard else 0
        said.append(
            f"the {hard}{what} limit ({name}) to {_limit_shown(new[part], unit)} (it was "
            f"{_limit_shown(old[part], unit)}{'' if put_back else '; it could not be put back'})"
        )
        if need:
            needs.append(f"{what}: {need}")
    needs.append("the ranks pipeplan starts inherit them")
    raise BadArgumentError(
        f"data {quoted(spec)}: {doing} lowered {' and '.join(said)}; data code must leave the "
        f"process's resource limits as it found them, as pipeplan runs under them "
        f"({'; '.join(needs)})"
    )


def _put_back_limit(kind: int, old: tuple[int, int], new: tuple[int, int]) -> bool:
    """`old` set again, or its soft limit under the `new` hard one where that cannot be
    raised (only root may); whether the soft limit is back."""
    try:
        resource.setrlimit(kind, old)
        return True
    except (ValueError, OSError):
        pass
    if _limit_order(old[0]) > _limit_order(new[1]):
        return False
    try:
        resource.setrlimit(kind, (old[0], new[1]))
    except (ValueError, OSError):
        return False
    return True


def _lines(said: str) -> list[str]:
    return [line.strip() for line in said.splitlines() if line.strip()]


def _text(raw: list[bytes]) -> str:
    """What `descriptor_2_held` held, as text (a C extension's bytes may be any encoding)."""
    return b"".join(raw).decode("utf-8", errors="replace")


# The descriptors pipeplan holds across the user's data code (`_holding`): each one's number
# and the file it was (`fileio.identity`). `held_descriptors_kept` refuses code that closed or
# replaced one; `descriptor_2_held` and `descriptor_1_kept` put back what they can without it.
_HELD_DESCRIPTORS: list[tuple[int, tuple[int, int] | None]] = []


@contextlib.contextmanager
def _holding(*fds: int) -> Iterator[None]:
    """`fds` listed in _HELD_DESCRIPTORS while the block runs."""
    entries = [(fd, identity(fd)) for fd in fds]
    _HELD_DESCRIPTORS.extend(entries)
    try:
        yield
    finally:
        for entry in entries:
            with contextlib.suppress(ValueError):
                _HELD_DESCRIPTORS.remove(entry)


def _lost(fd: int, was: tuple[int, int] | None) -> bool:
    """Whether `fd` is no longer the file it was (`was`, its `identity`): closed, or another
    file's."""
    return identity(fd) != was


@contextlib.contextmanager
def held_descriptors_kept(spec: str, doing: str) -> Iterator[None]:
    """The user's data code (`doing`) closes or replaces none of the descriptors pipeplan
    holds across it (_HELD_DESCRIPTORS: the console's copies and the file descriptor 2 is held
    in), or is refused in one line; `descriptor_2_held` and `descriptor_1_kept` then put the
    console back as they can (`_console_again`). Found by the fortieth round: a `load` that
    called `os.closerange(3, 65536)` in the launcher ended `pipeplan run` with exit 2 and no
    line at all: the copy of the console's descriptor 2 was closed, and the error line went
    into the held temporary file.

        with descriptor_2_held(raw), held_descriptors_kept("m:load", "the data function"):
            os.closerange(3, 65536)
        # BadArgumentError: data 'm:load': the data function closed descriptors pipeplan
        # holds (4, 5); data code must not close descriptors it did not open
    """
    held = list(_HELD_DESCRIPTORS)
    try:
        yield
    finally:
        lost = sorted({fd for fd, was in held if _lost(fd, was)})
    if lost:
        raise BadArgumentError(
            f"data {quoted(spec)}: {doing} closed descriptors pipeplan holds "
            f"({', '.join(map(str, lost))}); data code must not close descriptors it did not "
            "open (`os.closerange(3, …)` closes pipeplan's own too)"
        )


# How many items a process reads between counts of its open descriptors (`descriptors_left`,
# after a batch's reads): a count lists /proc/self/fd, ~5 µs with a few dozen open and ~0.2
# ms with a thousand (the least of 200 on a shared core), where a batch's reads are held by
# ~1.6 ms of checks (`read_items`).
DESCRIPTOR_READS = 16
# How many more descriptors than before its first read data code may keep open (a cache of
# open files) before a count past half the open-files limit is refused.
DESCRIPTOR_MARGIN = 64
# This process's counts (`descriptors_before_reads`): its pid, the count before its first
# read and the items read since the last count.
_DESCRIPTORS: dict[str, int] = {}


def _open_descriptors() -> int | None:
    """How many descriptors this process has open (the listing's own left out); the soft
    open-files limit where none is left to list them with; None where there is no
    /proc/self/fd to count them in."""
    try:
        return len(os.listdir("/proc/self/fd")) - 1
    except OSError as exc:
        if exc.errno in (errno.EMFILE, errno.ENFILE):
            return resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        return None


def descriptors_before_reads() -> None:
    """This process's open descriptors counted once, before its first item read, for
    `descriptors_left` to compare with (a process forked since counts its own)."""
    if _DESCRIPTORS.get("pid") == os.getpid():
        return
    count = _open_descriptors()
    _DESCRIPTORS.clear()
    _DESCRIPTORS["pid"] = os.getpid()
    if count is not None:
        _DESCRIPTORS.update(first=count, reads=0)


def descriptors_left(name: str, batch: str, reads: int) -> None:
    """After `reads` item reads of data `name` (`batch`: what they were), BadArgumentError
    where the descriptors this process holds open, counted every DESCRIPTOR_READS reads,
    have grown by more than DESCRIPTOR_MARGIN since before its first read and past half the
    open-files limit: a read that opens a file and never closes it (`open()` without
    `with`), named while the rank can still write. One that keeps a bounded number open (a
    cache of files) levels off below that. Found by the sixty-second round: a `__getitem__`
    that leaked descriptors trained every step of its epoch, and then the rank failed
    writing its checkpoint (EMFILE), every trained step lost.

        descriptors_left("m:load", "reading a batch (16 train items, item 3 first)", 16)
    """
    if "first" not in _DESCRIPTORS:
        return
    _DESCRIPTORS["reads"] += reads
    if _DESCRIPTORS["reads"] < DESCRIPTOR_READS:
        return
    count = _open_descriptors()
    if count is None:
        return
    _DESCRIPTORS["reads"] = 0
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    grown = count - _DESCRIPTORS["first"]
    if soft == resource.RLIM_INFINITY or grown <= DESCRIPTOR_MARGIN or count * 2 <= soft:
        return
    raise BadArgumentError(
        f"data {quoted(name)}: {batch} left {count} descriptors open in this process, {grown} "
        f"more than before its first read, where the open-files limit (ulimit -n) is {soft}: "
        "its reads open files they do not close, and the run would run out of them writing "
        "its checkpoint; close what a read opens (`with open(...) as f:`), keeping a cache of "
        "open files below half the limit"
    )


def _where(fd: int) -> str | None:
    """The path `fd` was opened by, where it has one that can be opened again (a terminal, a
    file), else None (a pipe, a socket, a deleted file)."""
    try:
        path = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return None
    return path if path.startswith("/") and not path.endswith(" (deleted)") else None


def _console_again(fd: int, was: tuple[int, int] | None, path: str | None) -> None:
    """Descriptor `fd` (1 or 2) pointed back at the file it was (`was`) where the user's
    code closed pipeplan's copy of it: from the other one of 1 and 2 where that is the same
    file (a terminal), else opened again by its `path`; else, for 2, the terminal
    (/dev/tty) rather than nothing; else left as it is (the process still exits 2)."""
    other = 3 - fd
    if was is not None and identity(other) == was:
        with contextlib.suppress(OSError):
            os.dup2(other, fd)
            return
    candidates = [path] if path else []
    if fd == 2:
        candidates.append("/dev/tty")
    for candidate in candidates:
        try:
            opened = os.open(candidate, os.O_WRONLY | os.O_APPEND | os.O_NOCTTY)
        except OSError:
            continue
        try:
            if candidate == "/dev/tty" or identity(opened) == was:
                os.dup2(opened, fd)
                return
        except OSError:
            pass
        finally:
            os.close(opened)


@contextlib.contextmanager
def descriptor_2_held(into: list[bytes], limit: int = MAX_HELD_BYTES) -> Iterator[None]:
    """File descriptor 2 held in a temporary file while the block runs, its first `limit`
    bytes appended to `into` when it ends, however it ends: what C code, `os.write(2, …)` or
    a subprocess writes there (below `sys.stderr`, which `contextlib.redirect_stderr` holds)
    cannot come raw before pipeplan's one error line. The caller passes it on or drops it
    (`_contained`; `text.rust_panics_named`, whose Rust panics write a backtrace there).
    Where the block closed the console's copy (or the file), descriptor 2 is put back as it
    can be (`_console_again`) and nothing is held: `held_descriptors_kept` says so (the
    fortieth round: the error line went into the temporary file).

        raw = []
        with descriptor_2_held(raw):
            os.write(2, b"said")
        # raw == [b"said"], nothing on the terminal
    """
    sys.stderr.flush()
    console, path = identity(2), _where(2)
    saved = os.dup(2)
    try:
        held = _nameless_file()
    except BaseException:
        os.close(saved)
        raise
    kept = (saved, identity(saved)), (held, identity(held))
    try:
        os.dup2(held, 2)
        with _holding(saved, held):
            yield
    finally:
        with contextlib.suppress(OSError, ValueError):
            sys.stderr.flush()
        saved_lost, held_lost = (_lost(*entry) for entry in kept)
        if saved_lost:
            _console_again(2, console, path)
        else:
            os.dup2(saved, 2)
            os.close(saved)
        if not held_lost:  # else its number is another's now, or nothing's: not ours to close
            os.lseek(held, 0, os.SEEK_SET)
            into.append(_read_up_to(held, limit))
            os.close(held)


def _nameless_file() -> int:
    """A new file in tempfile's folder that no name leads to, gone with its last descriptor:
    O_TMPFILE, where the file system makes one. Else one named as mkstemp names it, removed
    at once, with every stop held between (`stops_deferred`): a stop landing between the two
    left `pipeplan-stderr-…` in TMPDIR for good (the sixty-fourth round, as the `--out`
    probe's)."""
    if hasattr(os, "O_TMPFILE"):  # Linux
        with contextlib.suppress(OSError):  # EOPNOTSUPP, EISDIR: none on this file system
            return os.open(tempfile.gettempdir(), os.O_RDWR | os.O_TMPFILE, 0o600)
    held = None
    try:
        with stops_deferred():
            held, name = tempfile.mkstemp(prefix="pipeplan-stderr-")
            os.unlink(name)
    except BaseException:  # the stop, acted on as the block ends
        if held is not None:
            os.close(held)
        raise
    return held


def _read_up_to(fd: int, limit: int) -> bytes:
    """The first `limit` bytes from where `fd` is, or fewer where it ends first."""
    parts: list[bytes] = []
    while limit > 0 and (part := os.read(fd, limit)):
        parts.append(part)
        limit -= len(part)
    return b"".join(parts)


@contextlib.contextmanager
def descriptor_1_kept() -> Iterator[None]:
    """File descriptor 1 put back as it was when the block ends, however it ends: the user's
    data code that closes it (`os.close(1)`) or points it elsewhere does so for itself alone.
    Found by the thirty-ninth round: closed in the launcher, the ranks it started inherited no
    stdout (Python gave them `sys.stdout = None`) and each printed a traceback before the error
    line. Nothing is kept where the descriptor was closed already. Where the block closed the
    copy too, descriptor 1 is put back as it can be (`_console_again`; the fortieth round).

        with descriptor_1_kept():
            os.close(1)
        print("still here")
    """
    if sys.stdout is not None:
        sys.stdout.flush()
    console, path = identity(1), _where(1)
    try:
        saved = os.dup(1)
    except OSError:  # closed before: nothing to put back
        yield
        return
    kept = identity(saved)
    try:
        with _holding(saved):
            yield
    finally:
        with contextlib.suppress(OSError, ValueError):  # a stream left on the closed one
            if sys.stdout is not None:
                sys.stdout.flush()
        if _lost(saved, kept):  # its number is another's now, or nothing's
            if _lost(1, console):
                _console_again(1, console, path)
        else:
            os.dup2(saved, 1)
            os.close(saved)


# What `_pass_on` has said since the data was last loaded (`_load_user`): the parent reads a
# set's len() and items in several checks (named by --data, then by the TaskData's name), and
# each read's warnings were said again.
_PASSED_ON: set[tuple] = set()


def _pass_on(spec: str, caught: list[warnings.WarningMessage], said: str) -> None:
    """The Python warnings (each place once) and stderr lines (MAX_USER_LINES at most) of the
    user's data code, each a pipeplan warning naming --data and where it was raised, once
    for each loading of the data:

        _pass_on("m:load", caught, "")   # pipeplan: WARNING: data 'm:load': m.py:9: UserWarning: …
    """
    for w in caught:
        key = (str(w.message), w.category, w.filename, w.lineno)
        if key in _PASSED_ON:
            continue
        _PASSED_ON.add(key)
        where = f"{Path(w.filename).name}:{w.lineno}"
        log.warning(f"data {quoted(spec)}: {where}: {w.category.__name__}: {w.message}")
    lines = [line for line in _lines(said) if line not in _PASSED_ON]
    _PASSED_ON.update(lines)
    for line in lines[:MAX_USER_LINES]:
        log.warning(f"data {quoted(spec)} wrote: {line}")
    if len(lines) > MAX_USER_LINES:
        log.warning(f"data {quoted(spec)} wrote {len(lines) - MAX_USER_LINES:,} lines more")


def warn_once_per_place(spec: str, rank: int) -> None:
    """Set up once in a rank, after its checks (`Trainer`): a warning of the user's data code
    (`main_file`, a helper module of it: `is_helper_file`) as training reads items is one line
    `pipeplan: rank R: WARNING: data 'm:load': m.py:9: UserWarning: …` on stderr (the rank's
    log under `pipeplan run`), once for each place in the code. Python said each distinct
    message in two raw lines: an f-string's, naming the item, once per item read (twenty-
    eighth round). No item is wrapped: only a warning that is raised costs anything. Other
    warnings are shown as Python shows them.

        warn_once_per_place("m:load", rank=1)
    """
    main = main_file(spec)
    if main is None:  # built-in data, text files: no code of the user's
        return
    python_shows, said, mine = warnings.showwarning, set(), {}

    def show(message, category, filename, lineno, file=None, line=None):
        if filename not in mine:  # once for each file that warns
            path = Path(filename).resolve()
            mine[filename] = path == main or is_helper_file(spec, path)
        if not mine[filename]:
            return python_shows(message, category, filename, lineno, file, line)
        if (filename, lineno, category) in said:
            return None
        said.add((filename, lineno, category))
        where = f"{Path(filename).name}:{lineno}"
        write_line(  # one write: the ranks share the console
            f"pipeplan: rank {rank}: WARNING: data {quoted(spec)}: {where}: "
            f"{category.__name__}: {message} (said once for this line)"
        )
        return None

    warnings.showwarning = show


@contextlib.contextmanager
def _user_code() -> Iterator[None]:
    """The user's data code, whose Ctrl-C is an interruption: `pipeplan: interrupted`, exit
    130 (typer turned a KeyboardInterrupt into exit 130 with no line: twenty-seventh round),
    and whose own `raise KeyboardInterrupt` is its failure, named (thirtieth round).

        with _user_code():
            dataset[0]   # raise KeyboardInterrupt → "… raised KeyboardInterrupt"
    """
    signalled = [False]
    with _sigint_told(signalled):
        try:
            with exits_raised():
                yield
        except KeyboardInterrupt as exc:
            # A signal's only where SIGINT raised it: a rank's (`faults.SignalInterrupt`), or
            # Python's own handler in an API call, told apart (`_sigint_told`). Under the CLI
            # Ctrl-C raises Interrupted, so a KeyboardInterrupt is the code's: its failure, as
            # in a rank (thirtieth round), and in an API call (the fifty-eighth round: an
            # empty Interrupted, where the command line named the code's own).
            if isinstance(exc, SignalInterrupt) or signalled[0]:
                raise Interrupted from None
            raise UserBaseException(exc) from exc
        # An Exception is the caller's to name (as "... raised ValueError: …"): taken for a
        # BaseException, one was named twice ("raised BadArgumentError: data 'm:f' raised …").
        except (Exception, SystemExit, Interrupted, Stopped):  # exits: `_contained` names them
            raise
        except BaseException as exc:  # GeneratorExit, a user `class E(BaseException)`
            raise UserBaseException(exc) from exc


@contextlib.contextmanager
def _sigint_told(signalled: list[bool]) -> Iterator[None]:
    """Where SIGINT has Python's own handler (an API call's main thread), a SIGINT inside the
    block sets `signalled[0]` and raises KeyboardInterrupt as that handler does: the code's own
    `raise KeyboardInterrupt` is then told from Ctrl-C. The handler is put back as the block
    ends unless the code replaced it meanwhile (left for the signal checks to name)."""
    own = signal.getsignal(signal.SIGINT) is signal.default_int_handler
    if not own or threading.current_thread() is not threading.main_thread():
        yield
        return

    def told(signum: int, frame: Any) -> None:
        signalled[0] = True
        signal.default_int_handler(signum, frame)

    signal.signal(signal.SIGINT, told)
    try:
        yield
    finally:
        if signal.getsignal(signal.SIGINT) is told:
            signal.signal(signal.SIGINT, signal.default_int_handler)


class UserBaseException(Exception):
    """A BaseException of the user's data code other than an exit or an interruption, as an
    Exception, so that each place that names the user's errors in one line names it too
    (`_one_line` names the original). Found by the twenty-eighth round: `raise
    GeneratorExit` or a user `class E(BaseException)` in a data function was a traceback.

        raise UserBaseException(GeneratorExit())   # "... raised GeneratorExit"
    """


def names_a_file(target: str) -> bool:
    """Whether `target`, the part of `--data TARGET:function` before the colon, is a path
    (`path/to/file.py`) rather than a module name."""
    return target.endswith(".py") or "/" in target or "\\" in target


def _refuse_a_file_as_folder(spec: str, target: str) -> None:
    """`--data ./mod.py/:load` names a folder, as the system reads the slash: refused, as the
    other input paths are (`fileio.check_input_file`). Found by the thirty-eighth round:
    Python's import machinery read it as ./mod.py, and data.json recorded no file, so a resume
    after the module was edited trained on other data without a word."""
    try:
        os.stat(target)
    except NotADirectoryError:
        file = target.rstrip("/\\.").rstrip("/\\") or target
        raise BadArgumentError(
            f"data {quoted(spec)}: {target}: not a directory ({file} is a file); name the "
            f"module file without the slash: {file}:{spec.rpartition(':')[2]}"
        ) from None
    except OSError:  # missing or unreadable: the import says which
        return


def module_file(spec: str) -> Path | None:
    """The file `--data module:function` imports its module from, found as `_load_user` finds
    it (`_data_directory_on_path`) without running it, in the launcher and in every rank
    alike: data.json records it with its sha256, and a resume, an export or a rank is held
    to it. The same name imported elsewhere
    (another directory's `mydata.py`), or the file edited, is other data: a resume from
    another directory trained on it without a word (the twenty-seventh round). None for the
    other forms, and for a module with no file of its own (built in) or none found (its import
    names that).

        module_file("reviews:load")   # Path("/home/me/examples/reviews.py") in examples/
    """
    place = module_place(spec)
    if place is None:
        return None
    path = place.resolve()
    return path if path.is_file() else None


def module_place(spec: str) -> Path | None:
    """Where `--data module:function` imports its module from, absolute and unresolved: the
    file under the sys.path entry that finds it (`module_file` is where it resolves to). A
    link there (`mydata.py -> ../ext/real.py`, a package `pkg` that is a link to a folder
    elsewhere) is the user's module in the user's folder: `module_root` is taken from this
    place, not from the link's target. None as for `module_file`.

        module_place("mydata:load")   # Path("/home/me/mydata.py"), even a link to /ext/real.py
    """
    target = spec.rpartition(":")[0]
    if not target or names_a_file(target) or spec in BUILTINS:
        return None
    try:
        with _data_directory_on_path():
            _forget_if_elsewhere(target)
            found = importlib.util.find_spec(target)  # a package's parents are imported
    except Exception:  # not found, or a parent that fails to import: the import says why
        return None
    if found is None or not found.has_location or type(found.origin) is not str:
        return None
    return Path(found.origin).absolute()


# What sys.modules held before each data module was imported, by the module's file, with the
# module's name: the modules added since (by its import, its function, or its sets read
# lazily: thirtieth round) are what `helper_files` picks the user's own from for data.json.
_BROUGHT_IN: dict[Path, tuple[set[str], str]] = {}
# Who asked for each module imported since the first data module's import (`_ImportWitness`):
# the name of the module whose code ran the import (`_importer`), None where no code outside
# installed code did.
_IMPORTED_BY: dict[str, str | None] = {}
# The data module whose code runs now (its import, its function, an item read: `hooks_kept`),
# innermost last; None for data of no module.
_DATA_RUNNING: list[tuple[str | None, frozenset[int | None]]] = []
# A process the data's code forks (a fork pool's worker) tells this one what it imports.
childimports.watch(_DATA_RUNNING)
atexit.register(childimports.forget)  # its reports, where this process collected none
# The data module loaded last in this process (`_load_user_data`): a rank's one. A list of
# one, changed in place, as the rank guard's RANK_STATE names it.
_LOADED: list[str] = []


class _ImportWitness:
    """A finder first in sys.meta_path that finds nothing: it notes which module asked for
    each import (`_IMPORTED_BY`), so that `helper_files` counts a module of the user's folder
    as the data's only where the data's code imported it, itself or through a library it
    called. Found by the seventieth round: an unrelated `h2.py` beside the data module,
    imported as the package `h2` by huggingface_hub's HTTP client as pipeplan's own code
    loaded transformers during the data's import, was recorded in data.json, and edited,
    refused the run's export and resume."""

    @staticmethod
    def find_spec(name: str, path: Any = None, target: Any = None) -> None:
        importer = _asked_by(sys._getframe(1))
        _IMPORTED_BY[name] = importer
        if childimports.reporting():  # a child the data's code forked: its forker must know
            childimports.report(name, path, target, importer, _ImportWitness, _installed_prefixes())


# The files of code run while the data's code ran (`exec` of a code object: a module's
# import, a file run by path), each with who ran it (`_asked_by`): a file the data runs by
# path is the data's (`helper_files`).
_RAN: dict[str, str | None] = {}


def _note_ran(code: Any, frame: Any) -> None:
    """`_audit`'s, for the `exec` of `code` at `frame` while the data's code runs: its file
    noted in `_RAN` where it is a .py file outside installed code. Found by the seventy-
    second round: a `config.py` the data runs by path (`runpy.run_path`, a module made with
    `spec_from_file_location` and not put in sys.modules, `exec(compile(...))`) was no
    module of sys.modules, so data.json lacked it; edited, a resume trained on it."""
    file = getattr(code, "co_filename", None)
    if type(file) is str and file.endswith(".py") and not file.startswith(_installed_prefixes()):
        _RAN.setdefault(os.path.abspath(file), _asked_by(frame))


def _witness_imports() -> None:
    """`_ImportWitness` first in sys.meta_path, once for the process (before the data's code
    runs: a finder it puts first is refused, `import_system_kept`)."""
    if _ImportWitness not in sys.meta_path:
        sys.meta_path.insert(0, _ImportWitness)


def _asked_by(frame: Any) -> str | None:
    """Who asked for what runs at `frame` (an import, code run by path): `_importer`'s module,
    or, where only installed code asked while the data's code ran, on a thread it started (a
    pool's worker unpickling a helper's object), the data module (the seventy-second round:
    left out of data.json, the helper edited, a resume trained on). A thread that was there
    before (the caller's own: the seventy-third round) is not the data's; one the data's code
    left running earlier, a pool it keeps, is."""
    importer = _importer(frame)
    running = _DATA_RUNNING[-1] if _DATA_RUNNING else (None, frozenset())
    thread = threading.get_ident()
    if importer is None and (thread not in running[1] or thread in pipeplan_log.DATA_THREADS):
        importer = running[0]
    return importer


def _importer(frame: Any) -> str | None:
    """The name of the module whose code runs the import under way at `frame` (the frame
    that called `_ImportWitness.find_spec`): the first frame out from it that is not
    installed code (the standard library's, with importlib's machinery, or site-packages').
    A library the data calls is passed through: the data's `load` doing `torch.load` of an
    object of a helper's class imports the helper (the seventy-first round: left out of
    data.json, the helper edited, a resume trained on other data). So is a library
    pipeplan's own code imports: pipeplan's is the importer."""
    installed = _installed_prefixes()
    while frame is not None:
        file = frame.f_code.co_filename
        if not (file.startswith(installed) or file.startswith("<frozen ")):
            name = frame.f_globals.get("__name__")
            # Code of no imported module is passed through to the code that ran it: a string
            # the data's code `exec`s, a file it runs by path (`spec_from_file_location`
            # without sys.modules, `runpy.run_path`'s `<run_path>` while it runs), whose
            # `import helper` was counted for no module (the seventy-second round).
            if (
                type(name) is str
                and not name.startswith("<")
                and _globals_of(name) is frame.f_globals
            ):
                return name
        frame = frame.f_back
    return None


def _globals_of(name: str) -> Any:
    """The namespace of the imported module `name` (None where there is none: an object in
    sys.modules whose attributes fail is no module of the user's)."""
    try:
        return vars(sys.modules[name])
    except Exception:
        return None


@cache
def _installed_prefixes() -> tuple[str, ...]:
    """The folders of installed code (`_installed_folders`), as imported and resolved, as
    the file names of their code start."""
    paths = sysconfig.get_paths()
    found = {str(folder) for folder in _installed_folders()}
    found |= {paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths}
    return tuple(os.path.join(folder, "") for folder in found)


def _module_name(target: str) -> str:
    """The name in sys.modules of the data module `target` (`_import`'s)."""
    return f"_pipeplan_data_{Path(target).stem}" if names_a_file(target) else target


# The installation's top-level packages (pyproject's), imported before the data's directory
# goes on the path (`_data_directory_on_path`); its module `cli` is the launcher's own entry,
# imported already, and no rank uses it.
OWN_PACKAGES = ("executor", "pipeplan", "profiles")


def main_file(spec: str) -> Path | None:
    """The file the code of `--data TARGET:function` is in: `path/file.py` itself, or the file
    `module_file` finds for a module; None for the other forms.

        main_file("reviews:load")   # Path("/home/me/examples/reviews.py") in examples/
    """
    target = spec.rpartition(":")[0]
    if target and names_a_file(target) and spec not in BUILTINS:
        return Path(target).resolve()
    return module_file(spec)


def module_root(spec: str) -> Path | None:
    """The folder the user's data code lives in (resolved): the one `path/file.py` is in, or
    the one a module is imported from (for `pkg.sub:load` the folder holding `pkg/`). The
    modules of its tree that the data brings in are the user's: `helper_files`. Taken from
    where the module is imported from, not from where it resolves to: found by the
    sixty-ninth round, a data module that is a link (`mydata.py -> ../ext/real.py`, or a
    package `pkg` linked to a folder elsewhere) made the link's target folder the user's,
    and a helper beside the link was neither recorded in data.json nor checked by a resume,
    nor imported again by the next API call after an edit.

        module_root("pkg.sub:load")   # Path("/home/me") for /home/me/pkg/sub.py
    """
    if main_file(spec) is None:
        return None
    target = spec.rpartition(":")[0]
    if names_a_file(target):
        return Path(target).parent.resolve()
    place = module_place(spec)
    if place is None:
        return None
    depth = target.count(".") + (1 if place.name == "__init__.py" else 0)
    return place.parents[depth].resolve() if depth < len(place.parents) else None


def _installed_folders() -> list[Path]:
    """The interpreter's standard library and site-packages: installed code, not the user's."""
    paths = sysconfig.get_paths()
    found = [paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths]
    found += getattr(site, "getsitepackages", list)()
    found.append(site.getusersitepackages())
    return [Path(p).resolve() for p in found if p]


def _stdlib_folders() -> set[Path]:
    """The interpreter's standard library folders, resolved."""
    paths = sysconfig.get_paths()
    return {Path(paths[k]).resolve() for k in ("stdlib", "platstdlib") if k in paths}


def _site_packages(stdlib: set[Path]) -> list[Path]:
    """`_installed_folders` less the standard library's (`stdlib`): site-packages lies inside
    the standard library's folder, so a path is told apart by these first."""
    return [folder for folder in _installed_folders() if folder not in stdlib]


def is_helper_file(spec: str, path: Path) -> bool:
    """Whether `path` may be one of the user's own modules that `spec`'s data code imports: a
    .py file under `module_root`, not installed code (a virtual environment inside the
    user's folder holds torch: its files are no data of the run's).

        is_helper_file("mydata:load", Path("/home/me/helper.py"))   # True in /home/me
    """
    return _user_file(path, module_root(spec), _installed_folders())


def _user_file(
    path: Path, root: Path | None, installed: list[Path], suffixes: tuple[str, ...] = (".py",)
) -> bool:
    """`is_helper_file` with the folder and the installed folders found once, for a scan of
    sys.modules (`helper_files`: a rank's, at each checkpoint)."""
    if root is None or path.suffix not in suffixes or not path.is_relative_to(root):
        return False
    return not any(path.is_relative_to(folder) for folder in installed)


def helper_files(spec: str, seen: set[str] | None = None) -> list[Path]:
    """The user's own modules the data's module brought in when `_load_user` ran it in this
    process (a helper module beside it, a package's submodules and parents): `is_helper_file`
    of each module its import and its function added to sys.modules, and since then its sets
    as they were read (a rank asks at each checkpoint: `task.data_modules_imported`).
    data.json records them with their sha256, as it does the module: a helper edited between
    a stop and --resume trained on other data without a word (twenty-eighth round). Modules
    imported from elsewhere (another folder on PYTHONPATH, installed packages) are not the
    run's record, nor pipeplan's own, which a rank imports as it trains (from a checkout
    that is the data's folder too, they were the user's by the folder alone). `seen`: the
    names of the modules looked at before, passed over, and gaining those looked at now (a
    rank's scan at each checkpoint looks only at the modules imported since the last).

        helper_files("mydata:load")   # [Path("/home/me/helper.py")] if mydata imports helper
    """
    main = main_file(spec)
    if main is None or main not in _BROUGHT_IN:
        return []
    files = set()
    before, data_module = _BROUGHT_IN[main]
    seen = set() if seen is None else seen
    root, installed, folders = module_root(spec), _installed_folders(), {}
    new = [name for name in list(sys.modules) if name not in before]
    # and what the processes the data's code forked imported (seventy-third round), all of it
    if (missing := childimports.problem()) is not None:  # (the seventy-fourth round)
        raise BadArgumentError(
            f"data {quoted(spec)}: {missing}: data.json cannot record each module of yours it "
            "imports; give pipeplan a temporary folder it can write (TMPDIR), or import them "
            "at the data module's top level"
        )
    # (read by `problem` just now)
    new += [n for n in childimports.found_so_far() if n not in sys.modules and n not in before]
    datas = _imported_by_the_data(new, data_module, installed)
    ran = set(datas) | _packages_of(data_module)
    ran_files = [f"file:{f}" for f, by in list(_RAN.items()) if by in ran]
    if ran_files:  # a module's own file is its module's to count (pipeplan's never)
        modules = {getattr(m, "__file__", None) for m in list(sys.modules.values())}
        ran_files = [f for f in ran_files if f[5:] not in modules]
    for name in [*datas, *ran_files]:
        if name in seen:
            continue
        seen.add(name)
        for file in [name[5:]] if name.startswith("file:") else _imported_files(name):
            where = located(file, folders)
            if where is None:
                continue
            path = _recorded_file(*where, root, installed, (".py",))
            # The data module at its own place (a link to it: `main` is where it resolves).
            if path is not None and main not in (path, Path(where[1])) and _is_file(path):
                files.add(path)
    return sorted(files)


def imported_files(name: str) -> list[str]:
    """The .py file of the module `name` as this process imported it, or else those the
    processes the data's code forked imported under that name (`childimports`: two may have
    put two folders first on sys.path); none where none did, or it has none, or it is
    pipeplan's own or installed code (no helper of the user's: a `config.py` the data runs by
    path is no module, and an installed module `config` is not it).

        imported_files("helper")   # ["/home/me/helper.py"], imported by mydata or its pool
    """
    childimports.found()
    return [file for file in _imported_files(name) if not file.startswith(_installed_prefixes())]


def imported_places() -> set[str]:
    """Where every module imported here, or by a process the data's code forked, was
    imported from (`os.path.realpath` of its file).

        "/home/me/lib/helper.py" in imported_places()   # imported, under whatever name
    """
    files = [getattr(module, "__file__", None) for module in list(sys.modules.values())]
    files += [file for reports in childimports.found().values() for _, file in reports]
    return {os.path.realpath(file) for file in files if type(file) is str}


def _imported_files(name: str) -> list[str]:
    """The .py file of the imported module `name` here, or else those forked children of the
    data's imported under it (`childimports.found` as last read); none where it has none or
    is pipeplan's own (never the user's: `_append_data_directory`)."""
    if name.partition(".")[0] in OWN_PACKAGES:
        return []
    if name not in sys.modules:
        return [file for _, file in childimports.known(name)]
    file = getattr(sys.modules.get(name), "__file__", None)
    # Only a plain str is a file name: a str subclass's own methods may raise (the sixty-ninth
    # round: a traceback of the scan); it is no file of the user's.
    return [file] if type(file) is str and file.endswith(".py") else []


def _imported_by_the_data(names: list[str], data_module: str, installed: list[Path]) -> list[str]:
    """Those of the modules `names` (imported since the data module's import began) that the
    data's own code imported: the module `data_module` and its packages, and each module
    whose importer (`_IMPORTED_BY`: the code outside installed code that ran the import,
    itself or through a library it called) is one of these or a module of the user's code
    they imported in turn (not installed code, nor pipeplan's), or that one of these holds
    (`_held_modules`: imported first for other code, then by the data's `import helper`,
    which finds it imported). One whose importer is unknown (put together by hand from a
    file) is counted, as before the witness was there.

        _imported_by_the_data(["helper", "h2", "httpcore2"], "mydata", [])   # ["helper"]
    """
    roots = _packages_of(data_module)
    asked: dict[str | None, list[str]] = {}
    importers = {name: _importers_of(name) for name in names}
    kept = [name for name in names if name in roots or _UNKNOWN in importers[name]]
    for name in names:
        for importer in importers[name]:
            asked.setdefault(importer, []).append(name)  # type: ignore[arg-type]
    new = set(names)
    found, waiting = set(kept), list(roots | set(kept))
    while waiting:
        importer = waiting.pop()
        if importer not in roots and not _users_code(importer, installed):
            continue  # a library the data imported: what it imports is its own
        held = [name for name in _held_modules(importer) if name in new]
        for name in [*asked.get(importer, ()), *held]:
            if name not in found:
                found.add(name)
                kept.append(name)
                waiting.append(name)
    return kept


def _packages_of(module: str) -> set[str]:
    """The module's name and those of the packages it is in."""
    parts = module.split(".")
    return {".".join(parts[: i + 1]) for i in range(len(parts))}


_UNKNOWN = object()  # `_importers_of` a module no witness saw imported


def _importers_of(name: str) -> list[Any]:
    """Who imported the module `name`: `_IMPORTED_BY`'s record here, or for a module only
    children the data forked imported, theirs (`childimports`: one for each file imported
    under the name); else `_UNKNOWN`."""
    reported = [] if name in sys.modules else childimports.known(name)
    return [importer for importer, _ in reported] or [_IMPORTED_BY.get(name, _UNKNOWN)]


def _held_modules(name: str) -> set[str]:
    """The modules the imported module `name` holds at its top level: a module it imported
    (`import helper`), and the modules of the functions and classes it took from one (`from
    helper import f`). Found by the seventy-first round: a helper `simplejson.py` that
    requests imported first (it tries `import simplejson`) was the data's too, and was left
    out of data.json."""
    module = sys.modules.get(name)
    if module is None:
        return set()
    held = set()
    for value in list(vars(module).values()):
        kind = type(value)
        if not (issubclass(kind, (types.ModuleType, type)) or kind is types.FunctionType):
            continue
        if kind is types.FunctionType:
            owner = value.__module__
        else:
            key = "__name__" if issubclass(kind, types.ModuleType) else "__module__"
            try:  # from its own namespace: a class or module of the user's may answer any
                # name it is asked (`__getattr__`), or raise
                owner = object.__getattribute__(value, "__dict__").get(key)
            except Exception:
                continue
        if type(owner) is str:
            held.add(owner)
    return held


def _users_code(name: str, installed: list[Path]) -> bool:
    """Whether the imported module `name` is code of the user's: a .py file outside the
    `installed` folders and pipeplan."""
    return any(
        not any(Path(file).is_relative_to(f) for f in installed) for file in _imported_files(name)
    )


def _import(target: str, spec: str) -> Any:
    try:
        if names_a_file(target):
            path = Path(target)
            if not path.is_file():
                # (what is there instead: "no such file /dev/null" misled, the ninety-first round)
                try:
                    there = f"{target} is {entry_kind(path.stat().st_mode)}, not a Python file"
                except OSError:
                    there = f"no such file {target}"
                raise BadArgumentError(f"data {quoted(spec)}: {there}")
            name = f"_pipeplan_data_{path.stem}"
            module_spec = importlib.util.spec_from_file_location(name, path)
            if module_spec is None or module_spec.loader is None:
                raise BadArgumentError(f"data {quoted(spec)}: {target} is not a Python file")
            module = importlib.util.module_from_spec(module_spec)
            sys.modules[name] = module  # dataclasses and pickle look classes up here
            try:
                module_spec.loader.exec_module(module)
            except BaseException:
                sys.modules.pop(name, None)
                raise
            return module
        return importlib.import_module(target)
    except BadArgumentError:
        raise
    except Exception as exc:
        raise BadArgumentError(
            f"data {quoted(spec)}: cannot import {target}: {_one_line(exc)}"
        ) from exc


# The user's modules loaded with each data target (`--data module:function` or
# file.py:function): the data module and every module of the user's in sys.modules once its
# function has run (imported by the module, inside `load`, or by the user's program before),
# each with its file's state then (`file_state`). Python keeps an imported module, so an API
# call after the file was edited ran the old code in the launcher and the new in its ranks
# (the fifty-eighth round: a loader fixed after a failure still failed; a module edited
# between runs was "a data function must return the same data in every process"; the
# fifty-ninth: a helper imported inside `load`, a module the user had imported, a file.py's
# helper). Where any was edited, all are imported afresh.
_IMPORTED_FILES: dict[str, dict[str, tuple]] = {}
_RECORDED_AT: dict[str, int] = {}  # when each was recorded (time.time_ns, a file's clock)


def _record_key(target: str, spec: str) -> str:
    """What `_IMPORTED_FILES` knows a data target by: the file its code is in (`main_file`),
    however spelled, module or file (the seventy-fifth round: `mydata.py:load`, then
    `/abs/mydata.py:load` after a helper's edit, ran the old helper in the launcher and the
    new in the ranks; the seventy-sixth: `mydata:load`, then `mydata.py:load`); the target's
    text where no file is found."""
    try:
        found = main_file(spec)
    except Exception:  # a module that fails to be found: its import says why
        found = None
    return target if found is None else str(found.resolve())


def _remember_files(target: str, spec: str) -> None:
    """Record the user's modules in sys.modules now, with their files' states, for `target`."""
    key = _record_key(target, spec)
    _RECORDED_AT[key] = time.time_ns()
    _IMPORTED_FILES[key] = {
        name: file_state(path) for name, path in _user_modules(target, spec).items()
    }


# The `pipeplan` command's own module, beside pipeplan's packages.
_OWN_CLI = str(Path(__file__).resolve().parent.parent / "cli.py")


def _user_modules(target: str, spec: str) -> dict[str, Path]:
    """The user's modules in sys.modules now (beside the data's module, sources or sourceless
    .pyc files), by name: their files."""
    root = module_root(spec)
    if root is None:
        return {}
    installed, found, folders = _installed_folders(), {}, {}
    under_root = os.path.join(str(root), "")  # "/home/me/": how a file under it starts
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None)
        if type(file) is not str or name in ("__main__", "__mp_main__"):
            continue  # the user's running script is never imported afresh; no plain str, no file
        own_cli = name == "cli" and os.path.realpath(file) == _OWN_CLI
        if name.partition(".")[0] in RANK_PACKAGES or own_cli:
            continue  # pipeplan's own, in a checkout that is the data's folder too: never taken
            # out (the seventy-fourth round: a call refused, its errors another class)
        where = located(file, folders)
        if where is None or (name != target and not any(p.startswith(under_root) for p in where)):
            continue  # outside the data's folder (torch's, Python's): decided by the text
        mine = _recorded_file(*where, root, installed, (".py", ".pyc"))
        if mine is not None and _is_file(mine):
            found[name] = mine
        elif name == target:
            found[name] = Path(where[1])
    # The data's: those its code imported, and those it holds (one the caller imported first,
    # before any witness, then the data's `import helper` found), not the caller's own,
    # which another call must not take out (the seventy-fifth and seventy-sixth rounds: its
    # state was lost).
    data_module = _module_name(target)
    roots = _packages_of(data_module)
    seen = [n for n in found if n in roots or _importers_of(n) != [_UNKNOWN]]
    datas = set(_imported_by_the_data(seen, data_module, installed)) | (roots & set(found))
    waiting = list(datas)
    while waiting:
        for name in _held_modules(waiting.pop()):
            if name in found and name not in datas:
                datas.add(name)
                waiting.append(name)
    return {name: path for name, path in found.items() if name in datas or name == target}


def located(file: str, folders: dict[str, str]) -> tuple[str, str] | None:
    """A module's `file` as imported (absolute, nothing resolved) and the file it resolves to
    (`os.path.realpath`), each folder resolved once per scan (`folders`, filled as it goes):
    a file that is no link lies where its folder does. None for a path no file can have (a
    NUL in it). A scan of sys.modules resolved every part of some 3,000 paths into Paths,
    ~0.16 s of CPU each time a data module was loaded (twice per load in the launcher; 0.03 s
    so, 2026-12-06).

        located("/home/me/helper.py", {})   # ("/home/me/helper.py", "/shared/helper.py"), a link
    """
    if "\x00" in file:  # the sixty-eighth round: a traceback of the scan
        return None
    folder, name = os.path.split(file)
    if name in ("", ".", "..") or os.path.islink(file):
        return os.path.abspath(file), os.path.realpath(file)
    real = folders.get(folder)
    if real is None:
        real = folders[folder] = os.path.realpath(folder)
    return os.path.abspath(file), os.path.join(real, name)


def _recorded_file(
    imported: str, real: str, root: Path, installed: list[Path], suffixes: tuple[str, ...]
) -> Path | None:
    """A module's file (`located`) if it is the user's, as recorded: where it was imported
    from, if that is in the data's folder and it resolves to no installed code; else where it
    resolves, if `_user_file` there. A link in the data's folder, to a helper or a package
    kept elsewhere, is the user's: edited, it was not imported again by the next API call,
    nor recorded in data.json (the sixty-eighth round). A link to another file of the folder
    alike: recorded by its target, a resume did not see it pointed at another file of the
    folder (the sixty-ninth round). Recorded by its place, which a resume finds in the data's
    folder and reads through the link: retargeted to other content, the place's sha256 is
    not the recorded one. None where it is not the user's."""
    if _user_file(Path(imported), root, installed, suffixes) and not any(
        Path(real).is_relative_to(folder) for folder in installed
    ):
        return Path(imported)
    if _user_file(Path(real), root, installed, suffixes):
        return Path(real)
    return None


def _is_file(path: Path) -> bool:
    """`path.is_file()`, False where the name cannot be looked up at all (too long: ENAMETOOLONG
    refused a run over a module that no flag names, the sixty-eighth round)."""
    try:
        return path.is_file()
    except (OSError, ValueError):
        return False


def _forget_if_elsewhere(target: str) -> None:
    """Take the module `target` (its top-level package, with every module of it) out of
    sys.modules where the import rule finds that name in another place now (the other
    modules an earlier loading recorded: `_forget_if_moved`, by this same rule): a Python
    API caller that moved to another project's directory (`os.chdir`), whose own
    `mydata.py` the next call must import, as a new process would. Found by the seventy-
    second round: the first directory's module was kept, the run refused as if it were the
    other's, and data.json named the other directory's file. By the seventy-third: places
    compared as imported, not as resolved (two projects' `mydata.py` linked to one shared
    file, each with its own helper), and a namespace package by its folders. Only a name
    found by the path finder (not an installed package's own finder) is looked at."""
    top = target.partition(".")[0]
    if top in RANK_PACKAGES:
        return  # pipeplan's own: never taken out
    parts, path = target.split("."), None  # None: sys.path, for the top level
    for depth in range(1, len(parts) + 1):
        name = ".".join(parts[:depth])
        was = _places(sys.modules.get(name))
        if not was or any(place.startswith(_installed_prefixes()) for place in was):
            return  # not imported, or an installed library's: never taken out
        try:
            found = importlib.machinery.PathFinder.find_spec(name, path)
        except Exception:  # an entry of sys.path that fails: the import says so
            return
        if found is None:
            return
        if _places(found) != was:
            break
        path = found.submodule_search_locations
        if path is None:
            return  # the same module, found where it was
    else:
        return
    for name in [name for name in sys.modules if name == top or name.startswith(f"{top}.")]:
        sys.modules.pop(name, None)
    importlib.invalidate_caches()


def _forget_if_moved() -> None:
    """`_forget_if_elsewhere` of each module of the user's an earlier loading recorded
    (`_IMPORTED_FILES`), not only the data module's: a helper the import rule finds in
    another place now is taken out, and one it finds nowhere (the caller's own module, in
    the folder it left) is kept. Found by the seventy-fourth round: an API caller that moved
    to another project kept the first project's `helper`, whose data the launcher checked
    ("gave rank 0 96 training samples; the launcher checked 128"), while every module
    recorded with the data module was taken out when it moved, the caller's own among them
    (and pipeplan's, in a checkout that was the data's folder: `_user_modules`)."""
    for name in sorted({name for files in _IMPORTED_FILES.values() for name in files}):
        if not name.startswith(_OWN_ENTRIES):
            _forget_if_elsewhere(name)


def _places(found: Any) -> list[str]:
    """Where a module (or a spec the path finder found) is: its file, or a namespace
    package's folders, absolute as imported (not resolved); [] for none."""
    spec = isinstance(found, importlib.machinery.ModuleSpec)
    try:
        file = getattr(found, "origin" if spec else "__file__", None)
        if type(file) is str:
            return [os.path.abspath(file)]
        folders = getattr(found, "submodule_search_locations" if spec else "__path__", None)
        return [os.path.abspath(str(folder)) for folder in folders or ()]
    except Exception:  # an object in sys.modules whose attributes fail: no module of the user's
        return []


def _forget_if_edited(target: str, spec: str) -> None:
    """Take the user's modules loaded with `target` out of sys.modules where any of their files
    changed since (`_IMPORTED_FILES`), or where one of them came in after the record (a helper
    an item read imported: the sixtieth round's, run stale after an edit, as was a sourceless
    .pyc helper): the import that follows reads them as they are now, as a new command's
    would."""
    key = _record_key(target, spec)
    files = _IMPORTED_FILES.get(key)
    if files is None:
        return
    now = {
        name: file_state(Path(where[1]))
        for name in files
        if type(file := getattr(sys.modules.get(name), "__file__", None)) is str
        and (where := located(file, {})) is not None
    }
    # Of those the data's code imported since (an item read's), the ones whose file was
    # written since the record: the user's program's own modules of that folder stay as they
    # are, unedited, and so do those it imported itself (the seventy-fifth round: a caller's
    # module written and imported between two calls was taken out, its state with it).
    datas = {*files, *_packages_of(_module_name(target))}
    later = [
        name
        for name, path in _user_modules(target, spec).items()
        if name not in files
        and _IMPORTED_BY.get(name) in datas
        and file_state(path)[2:3] > (_RECORDED_AT[key],)
    ]
    # Only those still imported are compared: one taken out since (moved: `_forget_if_moved`)
    # is imported afresh anyway, and took the caller's own modules out with it (the
    # seventy-fourth round).
    if any(files[name] != state for name, state in now.items()) or later:
        for name in [*files, *later]:
            sys.modules.pop(name, None)
        importlib.invalidate_caches()


@contextlib.contextmanager
def _data_directory_on_path(folder: str | None = None) -> Iterator[None]:
    """`--data mydata:load` finds mydata.py in the directory the command runs in, as
    `python -c` would: the `pipeplan` script's sys.path starts at its own folder instead.
    `folder`: another directory in its place, the one `--data path/to/file.py:load` is in,
    where what it imports is found (`_read_folder`), as `python path/to/file.py` would.
    Appended, so it never shadows an installed package or the standard library (a module of
    PYTHONPATH comes first too), and only while the data module is found, imported and its
    function runs. The one rule for the launcher and its ranks: a rank's Python no longer
    puts that directory first (`launch.working_directory_off_path`), so both import the
    same file, the one data.json records; the ranks refused the run's own module when
    PYTHONPATH held one of the same name (twenty-eighth round).

        with _data_directory_on_path():
            importlib.import_module("mydata")   # ./mydata.py, unless installed or on PYTHONPATH

    The launcher's reads of the sets are under it too (`length`, `item`), and a rank keeps it
    while it trains (`keep_data_directory_on_path`): a module the sets import lazily (`import
    helper` in a `__getitem__`) was "No module named 'helper'" (thirtieth round). The
    installation's own top-level packages are imported first, so that none of them is taken
    from the directory: a user's profiles.py became pipeplan's `profiles` (thirtieth round: a
    traceback, `'profiles' is not a package`).
    """
    added = _append_data_directory(folder)
    try:
        with users_side():
            yield
    finally:
        # Where the code removed it too (`sys.path.clear()`: a ValueError, the forty-second
        # round), `import_system_kept` says so.
        if added is not None and added in sys.path:
            sys.path.remove(added)


# The import system's state (`import_system_kept`): where Python looks for modules, with
# what, and the modules already imported, each a name code uses.
_IMPORT_LISTS = ("path", "meta_path", "path_hooks")
# The entries of sys.modules that are pipeplan's own to replace: a data file's module
# (`_import`), imported afresh each time the data is loaded.
_OWN_ENTRIES = "_pipeplan_data_"


def _removed(before: list[Any], now: list[Any]) -> list[Any]:
    """What of `before` is no longer in `now` (by equality: sys.path's strings; a finder or
    hook is its own object)."""
    return [entry for entry in before if entry not in now]


def _modules_moved(before: dict[str, Any]) -> list[tuple[str, bool]]:
    """The entries of sys.modules that were there before (`before`, a copy) and are replaced
    or gone now: (name, whether gone). Compared in C first: entries added since come after
    the old ones, which are the same objects in the same order where nothing moved."""
    now = sys.modules
    if len(now) >= len(before) and all(
        map(operator.is_, itertools.islice(now.values(), len(before)), before.values())
    ):
        return []
    missing = object()
    moved = []
    for name, old in before.items():
        new = now.get(name, missing)
        if new is not old and not name.startswith(_OWN_ENTRIES) and not _reexecuted(old, new):
            moved.append((name, new is missing))
    return moved


def _reexecuted(old: Any, new: Any) -> bool:
    """Whether `new`, in the place of the imported module `old`, is the same module's file run
    again by its own package: of the same name and file. transformers does so as its
    processing_utils is first imported (`direct_transformers_import` runs its `__init__.py`
    anew), which a data module building a decoder model does: it was refused as replacing
    transformers in sys.modules (found as the wide hold was tested)."""
    try:
        return (
            issubclass(type(new), types.ModuleType)
            and new.__name__ == old.__name__
            and isinstance(old.__file__, str)
            and new.__file__ == old.__file__
        )
    except Exception:  # a module whose attributes are gone or raise: not a re-import
        return False


def _made_by_hand(before: dict[str, Any]) -> list[str]:
    """The entries of sys.modules added since `before` (a copy) that stand for a module of
    pipeplan's, a library it imports or the standard library's (`WIDE_PACKAGES`) and were
    not imported (no `__spec__`): the real one, imported later, would never be. Found by the
    fifty-fifth round: `sys.modules["safetensors.torch"] = types.ModuleType(…)` in a `load`
    failed the run as "cannot build the model from its config"."""
    if len(sys.modules) <= len(before):  # nothing added: a batch read's usual case, at once
        return []
    return sorted(
        name
        for name in sys.modules.keys() - before.keys()
        if name.partition(".")[0] in WIDE_PACKAGES
        and getattr(sys.modules.get(name), "__spec__", None) is None
        and _importable(name)
    )


def _importable(name: str) -> bool:
    """Whether a file the import system would load as `name` is there: the module a spec-less
    entry stands in for. An extension's own submodules (scipy's `…_highspy._core.cb`, made
    by its C code as it is imported) have none: no stand-in. Each package on the way is the
    one imported, else looked for as the import would (none is imported here)."""
    parts = name.split(".")
    path = None
    for i, part in enumerate(parts):
        module = sys.modules.get(".".join(parts[: i + 1])) if i < len(parts) - 1 else None
        try:
            if module is not None and getattr(module, "__spec__", None) is not None:
                path = getattr(module, "__path__", None)
            else:
                spec = importlib.machinery.PathFinder.find_spec(part, path)
                if spec is None:
                    return False
                path = spec.submodule_search_locations
        except Exception:  # an odd __path__ or file: no stand-in told
            return False
        if i < len(parts) - 1 and path is None:  # a module, not a package: nothing under it
            return False
    return True


def _entry_shown(entry: Any) -> str:
    """An entry of sys.path as a line says it (quoted), a finder or hook by its name: a
    class (BuiltinImporter), a function, or an object by its class (FileFinder's hook is a
    function: `path_hook_for_FileFinder`)."""
    if isinstance(entry, str):
        return quoted(entry, 60)
    name = getattr(entry, "__name__", None)
    return name if isinstance(name, str) else type(entry).__name__


def _some(things: list[str]) -> str:
    more = f" and {len(things) - 3} more" if len(things) > 3 else ""
    return f"{', '.join(things[:3])}{more}"


@contextlib.contextmanager
def import_system_kept(spec: str, doing: str) -> Iterator[None]:
    """The user's data code (`doing`) leaves Python's import system as it found it, or is
    refused in one line naming what changed; it is put back, however the code ends: the
    entries of sys.path, sys.meta_path and sys.path_hooks (none removed, nor the lists
    rebound: one added is no change, as a library's own finder is not), and the modules
    already imported (an entry of sys.modules replaced or deleted; one added is an import).
    Found by the forty-second round, each a data `load`: `sys.path.clear()` was a traceback
    of `_data_directory_on_path`, and `sys.meta_path.clear()` or `sys.modules["json"] =
    types.ModuleType("json")` failed the run as "bert-synth: cannot build the model from its
    config", blaming the model, a raw line of huggingface_hub's before it. Held where
    `torch_state_kept` is (~0.1 ms: a copy of sys.modules' thousand-odd entries, compared
    by identity). The entry `_data_directory_on_path` adds is no change: it is not there
    before the code runs, and is gone after.

        with import_system_kept("m:load", "the data function"):
            sys.modules["json"] = types.ModuleType("json")
        # BadArgumentError: data 'm:load': the data function replaced the imported module
        # json in sys.modules; …
    """
    lists = [(name, getattr(sys, name)) for name in _IMPORT_LISTS]
    entries = [list(found) for _, found in lists]
    modules, imported = sys.modules, sys.modules.copy()
    finders = dict(sys.path_importer_cache)
    try:
        yield
    finally:
        said = _finders_put_back(finders)
        for (name, found), before in zip(lists, entries, strict=True):
            now = getattr(sys, name)
            gone = _removed(before, now)
            if now is not found:
                setattr(sys, name, found)
                said.append(f"replaced sys.{name}")
            elif gone:
                shown = list(dict.fromkeys(_entry_shown(entry) for entry in gone))
                said.append(f"removed {_some(shown)} from sys.{name}")
            ahead = name == "meta_path" and not gone and now[: len(before)] != before
            if ahead:  # a finder put before Python's own sees every import first
                said.append(f"put a finder before {_entry_shown(before[0])} in sys.meta_path")
            if gone or now is not found or ahead:
                found[:] = before
                if name == "path_hooks":  # folders looked at meanwhile were cached hookless
                    sys.path_importer_cache.clear()
        if sys.modules is not modules:
            sys.modules = modules
            said.append("replaced sys.modules")
        moved = _modules_moved(imported)
        for deleted, verb in ((False, "replaced"), (True, "deleted")):
            names = [name for name, gone in moved if gone is deleted]
            if names:
                s = "s" * (len(names) > 1)
                said.append(f"{verb} the imported module{s} {_some(names)} in sys.modules")
        for name, _ in moved:
            modules[name] = imported[name]
        made = _made_by_hand(imported)
        if made:
            s = "s" * (len(made) > 1)
            said.append(f"put the module{s} {_some(made)} in sys.modules by hand")
            for name in made:
                modules.pop(name, None)
    if not said:
        return
    raise BadArgumentError(
        f"data {quoted(spec)}: {doing} {' and '.join(said)}; data code must leave Python's "
        "import system as it found it (sys.path, sys.meta_path, sys.path_hooks and the modules "
        "already imported), as pipeplan imports its own modules and the model's after it "
        "(put back now; adding a path, a finder after Python's own or a module imported is "
        "fine)"
    )


def _finders_put_back(before: dict[str, Any]) -> list[str]:
    """The folders' finders in sys.path_importer_cache (`before`: a copy) that the code
    replaced with one of another type, or one looking in another folder (`_looks_elsewhere`),
    said and put back: Python's own PathFinder asks them for every import from their folder,
    and the meta_path check passed (the fifty-seventh round: a logging FileFinder subclass
    saw ~340 imports in the launcher and each rank).
    Entries added by an import (a path hook's own finder, an editable install's), or dropped
    by importlib.invalidate_caches, are no change."""
    cache = sys.path_importer_cache
    if len(cache) == len(before) and all(map(operator.is_, cache.values(), before.values())):
        return []  # the usual case, a batch read's: nothing changed
    placed = [
        path
        for path, finder in list(cache.items())
        if before.get(path) is not None
        and finder is not None
        and (type(finder) is not type(before[path]) or _looks_elsewhere(path, finder))
    ]
    for path in placed:
        cache[path] = before[path]
    if not placed:
        return []
    return [
        f"put a finder of its own in sys.path_importer_cache for "
        f"{_some([quoted(path, 80) for path in placed])}"
    ]


def _looks_elsewhere(path: str, finder: Any) -> bool:
    """Whether a folder's finder (a FileFinder: its `path`) looks in another folder than the
    one it is cached for: the same type put in place (the fifty-eighth round: the standard
    library's folder's finder, one for the data's own folder, and pipeplan's later imports
    came from there)."""
    try:
        where = finder.path
    except Exception:  # no `path`, or one that raises: judged by its type alone
        return False
    return isinstance(where, str) and os.path.abspath(where) != os.path.abspath(path or ".")


# What the user's data code set of the process's working directory and umask (None: nothing,
# or not since the data was last loaded): it runs in them again each time (`users_side`).
_USERS: dict[str, Any] = {"cwd": None, "umask": None}


@contextlib.contextmanager
def users_side() -> Iterator[None]:
    """The user's data code runs in the working directory and umask it set itself, and
    pipeplan's own are put back when it returns, however it ends. Found by the thirty-third
    round: an `os.chdir` in a data module (at import, in load() or a `__getitem__`) moved
    every relative path of pipeplan's after it (runs/NAME/ was made under the new directory,
    and the ranks, started there, could not find the data module), and an `os.umask(0o777)`
    left a run folder its owner could neither read nor write. pipeplan's paths stay as the
    user gave them, relative to the directory pipeplan was started in; a data module that
    changes directory to read its own files (at import, then in `__getitem__`) still finds
    them. Every call into the data code goes through here: the launcher's
    (`_data_directory_on_path`: the import, the function, `length`, `item`) and a rank's
    reads as it trains (`worker.Trainer.rows`).

        with users_side():
            dataset[index]   # an os.chdir or os.umask inside it lasts until it returns
    """
    try:
        ours = os.getcwd()
    except OSError:  # gone already: pipeplan's relative paths fail their own way
        ours = None
    theirs = _USERS["cwd"]
    if theirs is not None and theirs != ours:
        with contextlib.suppress(OSError):  # the user's folder is gone: its code finds out
            os.chdir(theirs)
    our_umask = os.umask(0o077 if _USERS["umask"] is None else _USERS["umask"])
    if _USERS["umask"] is None:
        os.umask(our_umask)
    try:
        yield
    finally:
        theirs_now = os.umask(our_umask)
        _USERS["umask"] = None if theirs_now == our_umask else theirs_now
        try:
            now = os.getcwd()
        except OSError:  # the code removed the directory it went to
            now = None
        _USERS["cwd"] = None if now == ours else now
        if ours is not None and now != ours:
            try:
                os.chdir(ours)
            except OSError as exc:
                raise OutputError(
                    f"{ours}: the directory pipeplan runs in is gone ({exc.strerror}): the "
                    "data code removed or moved it"
                ) from None


def forget_users_side() -> None:
    """A new loading of the data starts from pipeplan's own directory and umask (`load_data`;
    an earlier command's data code in this process is not this one's)."""
    _USERS.update(cwd=None, umask=None)


def _append_data_directory(folder: str | None = None) -> str | None:
    """The working directory (or `folder`) appended to sys.path, after the installation's
    own packages are imported (ours before the directory can shadow one: thirtieth round);
    the entry added, or None where it was there already."""
    for name in OWN_PACKAGES:
        importlib.import_module(name)
    try:
        here = os.getcwd() if folder is None else folder
    except FileNotFoundError:  # removed: nothing of it is found (built-in data needs none;
        return None  # a rank of `--data digits` failed before its first step: the 80th round)
    if here in sys.path or (folder is None and "" in sys.path):
        return None
    sys.path.append(here)
    return here


# The folder of the `path/to/file.py:function` data loaded last (`_load_user_data`), where
# what it imports is found; empty for data of a module, found from the working directory.
_FILE_FOLDER: list[str] = []


def _file_folder(target: str) -> str:
    """The folder `path/to/file.py` is in (resolved, as `module_root` takes it)."""
    return str(Path(target).parent.resolve())


def _read_folder() -> str | None:
    """Where the data loaded last finds what it imports as it loads and its sets are read:
    a data file's own folder, or None for the working directory (`_data_directory_on_path`).
    Found by the seventy-fourth round: a `path/to/mydata.py:load` whose `__getitem__`
    imported `helper` failed in a rank ("No module named 'helper'") once its first read was
    over, and resumed from another directory, imported that directory's helper.py."""
    return _FILE_FOLDER[0] if _FILE_FOLDER else None


def keep_data_directory_on_path(spec: str) -> None:
    """A rank's: the directory `--data module:function` was found in (or the one
    `path/to/file.py:function` is in: the seventy-fourth round) stays on sys.path while the
    rank trains, appended as `_data_directory_on_path` appends it, so that what the sets
    import as they are read is found as the launcher found it. Nothing for other data.

        keep_data_directory_on_path(cfg.data)   # Trainer, once its data is built
    """
    target = spec.rpartition(":")[0]
    if ":" not in spec or spec in BUILTINS:
        return
    _append_data_directory(_file_folder(target) if names_a_file(target) else None)


def _not_the_file_here(target: str, module: Any) -> str:
    """What a refusal adds when `target` was imported from elsewhere although this directory
    holds a file of that name (`_data_directory_on_path` puts it last): `--data queue:load`
    beside ./queue.py said "'queue' has no function 'load'" of the standard library's queue.

        _not_the_file_here("queue", queue)
        # "; 'queue' is the standard library's /usr/lib/python3.11/queue.py, not ./queue.py …"
    """
    if names_a_file(target):
        return ""
    top = target.partition(".")[0]
    here = next((p for p in (Path(f"{top}.py"), Path(top, "__init__.py")) if p.is_file()), None)
    file = getattr(module, "__file__", None)
    if here is None or not isinstance(file, str):
        return ""
    path = Path(file).resolve()
    mine = here.resolve() if here.name == f"{top}.py" else here.parent.resolve()
    if path.is_relative_to(mine):
        return ""
    stdlib = _stdlib_folders()
    if any(path.is_relative_to(folder) for folder in _site_packages(stdlib)):
        whose = "an installed package's "
    else:
        whose = "the standard library's " if any(map(path.is_relative_to, stdlib)) else ""
    return (
        f"; {quoted(target)} is {whose}{path}, not ./{here} (found before this directory): "
        "rename your file"
    )


@contextlib.contextmanager
def looking_at(name: str, what: str) -> Iterator[None]:
    """What the user's code returned, looked at by pipeplan (its parts, its tensors' kinds):
    an exception the objects raise there (a tuple subclass whose `__iter__` raises, a tensor
    subclass whose `__torch_function__` does, a `len()` that lies) is one line naming the
    data and `what`, as the user's own calls are. Found by the forty-eighth round: eight such
    objects gave a 60-line traceback, exit 1.

        with looking_at("m:load", "train item 50"):
            refuse_odd_tensors(value, 50, "m:load", "train")
    """
    try:
        yield
    except PipeplanError:
        raise
    except Exception as exc:
        raise BadArgumentError(
            f"data {quoted(name)}: {what} raised {_one_line(exc)} as pipeplan looked at it"
        ) from exc


def _refuse_awaitables(result: Any, spec: str) -> None:
    """Refuses what an `async def` data function (or a plain one returning one) gives back:
    a coroutine, an async generator or another awaitable, alone or as a set of the returned
    tuple or TaskData. pipeplan calls the data function without an event loop. Each
    coroutine is closed first: dropped unawaited, Python said "RuntimeWarning: coroutine
    'load' was never awaited" and two lines more after pipeplan's error line (the
    thirty-third round). Run inside `_contained`: closing a started coroutine runs its
    `finally` blocks, user code.

        _refuse_awaitables(load(), "m:load")   # async def load(): "… returned a coroutine …"
    """
    values = list(result) if isinstance(result, tuple | list) and len(result) <= 3 else []
    if isinstance(result, TaskData):
        values = [result.train, result.eval]
    names = ("train set", "eval set", "augmented")[: len(values)]
    found = _close_awaitables([("", result), *zip(names, values, strict=True)])
    if found is None:
        return
    name, value = found
    kind = _awaitable_kind(value)
    said = f": its {name} is {kind}" if name else f" returned {kind}"
    raise BadArgumentError(
        f"data {quoted(spec)}{said}; pipeplan calls the data function without an event "
        "loop: make it a plain `def` that returns the data sets"
    )


def refuse_awaitable_item(value: Any, dataset: Any, index: int, name: str, split: str) -> None:
    """Refuses an item (`dataset[index]`) that is an awaitable, or holds one as its input or
    label (or inside them: a list, a tuple, a dict's values), each coroutine closed first.
    pipeplan reads items without an event loop. Found by the thirty-fifth round: an `async
    def __getitem__` (or a plain one returning a coroutine as the label) was refused ("train
    item 0 is coroutine, not an (input, label) pair"; "train labels must be int64 …, got
    coroutine"), and Python's "RuntimeWarning: coroutine … was never awaited" and "Enable
    tracemalloc …" lines came before or after the error line. Each read of an item checks
    here: the launcher's and a rank's checks (`item`) and a rank's reads as it trains
    (`worker.Trainer.rows`), inside the user's code (closing runs its `finally` blocks).

        refuse_awaitable_item(train[0], train, 0, "m:load", "train")
        # BadArgumentError: "data 'm:load': train item 0 is a coroutine (its `__getitem__` is
        # `async def`); …"
    """
    if type(value) in (tuple, list) and all(type(part) is torch.Tensor for part in value):
        return  # the usual item, at once: a rank reads every item of every step here
    found = _close_awaitables(_parts(value))
    if found is None:
        return
    part, awaitable = found
    if part:
        said = f"{split} item {index}'s {part} is {_awaitable_kind(awaitable)}"
        fix = "return tensors, not awaitables"
    else:
        getitem = getattr(type(dataset), "__getitem__", None)
        is_async = inspect.iscoroutinefunction(getitem) or inspect.isasyncgenfunction(getitem)
        said = f"{split} item {index} is {_awaitable_kind(awaitable)}" + (
            " (its `__getitem__` is `async def`)" if is_async else ""
        )
        fix = "make `__getitem__` a plain `def` that returns an (input, label) pair of tensors"
    raise BadArgumentError(
        f"data '{name}': {said}; pipeplan reads items without an event loop: {fix}"
    )


def refuse_odd_tensors(value: Any, index: int, name: str, split: str) -> None:
    """Refuses an item (`dataset[index]`, an (input, label) pair: `_check_pair`) whose input or
    label is a tensor pipeplan cannot read as it reads values: anything but a dense tensor on
    the CPU holding its values (`_odd_tensor`; a subclass that may hold none: the 37th
    round). Found by the thirty-sixth round: a meta-device or sparse input or label reached
    the launcher's checks (`.min()`, `.view()`, `nonzero()`), which raised a traceback, exit
    1; a vit-digits rank failed on one with a torch error naming no data. Each read of an
    item checks here, after `refuse_awaitable_item`: the launcher's and a rank's checks
    (`item`) and a rank's reads as it trains (`batch_rows`), which read items the checks do
    not (those between the first and the last).

        refuse_odd_tensors((x.to_sparse(), y), 0, "m:load", "train")
        # BadArgumentError: "data 'm:load': train item 0's input is a sparse tensor
        # (sparse_coo); an item's input and label must be dense tensors on the CPU …"
    """
    for part, tensor in zip(("input", "label"), value, strict=True):
        kind = _odd_tensor(tensor) if isinstance(tensor, torch.Tensor) else None
        if kind is not None:
            raise BadArgumentError(
                f"data '{name}': {split} item {index}'s {part} is {kind}; {_DENSE_CPU}"
            )


def refuse_odd_pairs(pairs: TensorPairs, name: str, split: str) -> None:
    """`refuse_odd_tensors` for a `TensorPairs` a data function built: its inputs and labels
    are read whole (`label_count`, `check_compatible`) before any item is."""
    for part, tensor in (("inputs", pairs.inputs), ("labels", pairs.labels)):
        kind = _odd_tensor(tensor) if isinstance(tensor, torch.Tensor) else None
        if kind is not None:
            raise BadArgumentError(
                f"data {quoted(name)}: the {split} {part} are {kind}; {_DENSE_CPU}"
            )


# What every refusal of `refuse_odd_tensors` ends with: what an item must be, and why the CPU.
_DENSE_CPU = (
    "an item's input and label must be dense tensors on the CPU (a rank moves each batch to "
    "its device itself)"
)


def _holds_no_values(kind: type) -> bool:
    """Whether tensors of `kind` (a subclass of torch.Tensor) may hold no values of their own:
    a subclass that overrides `__torch_dispatch__` (FakeTensor, functional and other wrapper
    tensors) answers every op with its own code, below the Python API. A subclass that only
    adds Python (torchvision's tv_tensors.Image, a Parameter; `__torch_function__` at most)
    holds its values and batches as a plain tensor: taken, and a batch of them that does not
    stack is named by `batch_rows`. The class attribute is read, no method of the tensor run."""
    return getattr(kind, "__torch_dispatch__", None) is not torch.Tensor.__torch_dispatch__


def _odd_tensor(tensor: torch.Tensor) -> str | None:
    """What keeps `tensor` from being an item's input or label, or None when it is a dense
    (strided, unquantized, not nested) tensor on the CPU holding its values: its type and attributes
    alone, read at no cost for every item a rank reads.

        _odd_tensor(torch.empty(3, device="meta"))   # "a meta tensor (it holds no values)"

    Found by the thirty-seventh round: a FakeTensor (CPU and strided, but holding no values)
    passed, and the rank failed in torch's words ("Mixing fake modes NYI"). Its type is looked
    at first: a subclass's attributes run its own code. Subclasses that hold their values
    (torchvision's tv_tensors) are taken (`_holds_no_values`).
    """
    kind = type(tensor)
    if kind is not torch.Tensor and _holds_no_values(kind):
        name = one_line(f"{kind.__module__}.{kind.__qualname__}")  # the user's own words
        return (
            f"of the tensor subclass {name}, which overrides __torch_dispatch__ (such a "
            "tensor may hold no values, as a FakeTensor does; `x.as_subclass(torch.Tensor)` "
            "is the plain tensor of one that holds them)"
        )
    if tensor.is_nested:
        return "a nested tensor"
    if tensor.layout is not torch.strided:
        layout = str(tensor.layout).removeprefix("torch.")
        sparse = tensor.layout in _SPARSE_LAYOUTS
        return f"a sparse tensor ({layout})" if sparse else f"a tensor of layout {layout}"
    if tensor.is_quantized:
        return f"a quantized tensor ({_dtype(tensor.dtype)})"
    device = tensor.device
    if device.type == "meta":
        return "a meta tensor (it holds no values)"
    if device.type != "cpu":
        return f"a tensor on {device}"
    return None


_SPARSE_LAYOUTS = (
    torch.sparse_coo, torch.sparse_csr, torch.sparse_csc, torch.sparse_bsr, torch.sparse_bsc
)  # fmt: skip


# How far `_parts` looks into an item: its input and label, and what they hold, so many of each.
_PART_DEPTH, _PART_WIDTH = 3, 256


def _parts(value: Any, name: str = "", depth: int = 0) -> Iterator[tuple[str, Any]]:
    """`value` and what it holds, as (name, part) pairs: an (input, label) pair's "input"
    and "label", another tuple's or list's "part 0", "part 1" …, and what each holds in turn
    ("label[0]", "input['ids']": a list's, a tuple's, a dict's), `_PART_DEPTH` deep and
    `_PART_WIDTH` wide; a tensor holds nothing looked into.

        list(_parts((x, [y]))) # [("", (x, [y])), ("input", x), ("label", [y]), ("label[0]", y)]
    """
    yield name, value
    if depth >= _PART_DEPTH:
        return
    if isinstance(value, dict):
        inner = [(repr(k), v) for k, v in itertools.islice(value.items(), _PART_WIDTH)]
    elif isinstance(value, tuple | list):
        inner = [(str(i), v) for i, v in enumerate(value[:_PART_WIDTH])]
    else:
        return
    # The parts it holds, not what its len() says (a tuple subclass may lie: forty-eighth).
    pair = depth == 0 and isinstance(value, tuple | list) and len(inner) == 2
    for key, part in inner:
        if depth:
            part_name = f"{name}[{key}]"
        else:
            part_name = ("input", "label")[int(key)] if pair else f"part {key}"
        yield from _parts(part, part_name, depth + 1)


def _close_awaitables(named: Iterable[tuple[str, Any]]) -> tuple[str, Any] | None:
    """The first (name, value) of `named` whose value is an awaitable or an async generator,
    or None; every coroutine (or generator-based one) among them closed: dropped unawaited,
    Python says "RuntimeWarning: coroutine … was never awaited" as it is collected. One that
    ignores GeneratorExit (RuntimeError) is refused all the same."""
    found = None
    for name, value in named:
        if inspect.isawaitable(value) or inspect.isasyncgen(value):
            found = found or (name, value)
            if inspect.iscoroutine(value) or inspect.isgenerator(value):
                with contextlib.suppress(Exception):
                    value.close()
    return found


def _awaitable_kind(value: Any) -> str:
    return (
        "a coroutine" if inspect.iscoroutine(value)
        else "an async generator" if inspect.isasyncgen(value)
        else f"an awaitable ({type(value).__name__})"
    )  # fmt: skip


def _takes_seed(func: Any) -> bool:
    try:
        params = inspect.signature(func).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == "seed" or p.kind is inspect.Parameter.VAR_KEYWORD for p in params)


def _as_task_data(result: Any, spec: str) -> TaskData:
    if isinstance(result, TaskData):
        data = result
        # A dataclass takes any value: padded="false" (a true string) built the padding-mask
        # model while data.json's facts read it as False (the thirty-third round).
        for field in ("augmented", "padded"):
            if type(getattr(data, field)) is not bool:
                raise BadArgumentError(
                    f"data {quoted(spec)}: TaskData's {field} is "
                    f"{quoted(getattr(data, field))}; it must be True or False"
                )
    elif isinstance(result, tuple | list) and len(result) in (2, 3):
        augmented = result[2] if len(result) == 3 else False
        if not isinstance(augmented, bool):
            raise BadArgumentError(
                f"data {quoted(spec)}: the third returned value (augmented) must be True or False"
            )
        data = TaskData(spec, result[0], result[1], augmented)
    else:
        raise BadArgumentError(
            f"data {quoted(spec)} returned {type(result).__name__}; expected a TaskData or a "
            "(train, eval) or (train, eval, augmented) tuple of datasets"
        )
    for split, dataset in (("train", data.train), ("eval", data.eval)):
        if not (hasattr(dataset, "__getitem__") and hasattr(dataset, "__len__")):
            raise BadArgumentError(
                f"data {quoted(spec)}: the {split} set ({type(dataset).__name__}) is not a "
                "map-style dataset with __len__ and __getitem__"
            )
        length(dataset, spec, split)
        if isinstance(dataset, TensorPairs):
            refuse_odd_pairs(dataset, spec, split)
    # An empty eval set trained with no evaluation at all (held-out accuracy -), as an empty
    # EVAL file of --data TRAIN,EVAL did (twentieth round).
    if length(data.eval, spec, "eval") == 0:
        raise BadArgumentError(
            f"data {quoted(spec)}: the eval set is empty; held-out loss and accuracy need at least "
            "one sample"
        )
    return data


def length(dataset: Any, name: str, split: str) -> int:
    """`len(dataset)`, checked: a user's `__len__` may raise, or return -1 or 10**20 (then
    len() itself raises), or more samples than any sampler can index. Every len() of the
    parent's on a user's set is this one: held as all its data code is (`_contained`), and
    the same count at every call (`_check_same_length`)."""
    doing = f"len() of the {split} set"
    with _contained(name, doing), _data_directory_on_path(_read_folder()), reading(name, doing):
        try:
            count = len(dataset)
        except Exception as exc:
            raise BadArgumentError(f"data '{name}': {doing} raised {_one_line(exc)}") from None
    if count > MAX_SAMPLES:
        # Said as the memory check below the limit says it: samples, bytes, limit (forty-
        # eighth round: 10**15 was refused with two bare counts).
        from executor.task import ORDER_BYTES
        from pipeplan.models import size_words

        raise BadArgumentError(
            f"data '{name}': the {split} set has {count:,} samples, beyond the limit of "
            f"{MAX_SAMPLES:,}: their order alone would take {size_words(count * ORDER_BYTES)} "
            f"in each rank ({ORDER_BYTES} bytes a sample)"
        )
    _check_same_length(dataset, count, name, split)
    return count


# The length each set gave at its first len() in this process, by id() while the set lives
# (`_check_same_length`).
_first_lengths: dict[int, int] = {}


def _check_same_length(dataset: Any, count: int, name: str, split: str) -> None:
    """Every len() of a set in a process gives what its first did: the checks, the epoch's
    steps and the sampler each read it, and a `__len__` that changed between calls (256
    twice, then 200) trained another epoch than the one checked, without a word (the
    thirty-second round). A set that takes no weak reference (`__slots__`) is not followed.

        _check_same_length(train, 200, "odd:load", "train")
        # BadArgumentError: data 'odd:load': len() of the train set gave 200, and 256 before; …
    """
    key = id(dataset)
    first = _first_lengths.get(key)
    if first is None:
        try:  # forgotten with the set: another object may take its id()
            weakref.finalize(dataset, _first_lengths.pop, key, None)
        except TypeError:
            return
        _first_lengths[key] = count
    elif count != first:
        raise BadArgumentError(
            f"data '{name}': len() of the {split} set gave {count}, and {first} before; a "
            "data set's length must not change while it is used"
        )


def item(dataset: Any, index: int, name: str, split: str) -> tuple[Any, Any]:
    """`dataset[index]`, an (input, label) pair, with a user's `__getitem__` error or an item
    of another kind (a dict, a triple, a number) in one line. Every item the parent reads
    is read here: held as all the user's data code is (`_contained`)."""
    return items(dataset, [index], name, split)[0]


def items(dataset: Any, indices: Sequence[int], name: str, split: str) -> list[tuple[Any, Any]]:
    """`item` of each of `indices`, the user's code held once for them all: a hold
    (`_contained`) costs 20 to 50 ms on a loaded core, an item's read may cost microseconds
    (the data check's scan for targets, `_check_items_have_targets`).

        items(train, range(1, 257), "m:load", "train")   # [(input, label), …]
    """
    values = []
    doing = f"reading {split} item {indices[0]}"
    if len(indices) > 1:
        doing = f"reading {split} items {indices[0]} to {indices[-1]}"
    with _contained(name, doing), _data_directory_on_path(_read_folder()):
        for index in indices:
            each = f"reading {split} item {index}"
            with reading(name, each):
                try:
                    value = dataset[index]
                except Exception as exc:
                    why = _one_line(exc)
                    raise BadArgumentError(f"data '{name}': {each} raised {why}") from None
                with looking_at(name, f"{split} item {index}"):
                    refuse_awaitable_item(value, dataset, index, name, split)
            values.append(value)
    pairs = []
    for index, value in zip(indices, values, strict=True):
        with looking_at(name, f"{split} item {index}"):
            _check_pair(value, name, split, index)
            refuse_odd_tensors(value, index, name, split)
            pairs.append((_plain(value[0]), _plain(value[1])))
    return pairs


def _plain(value: Any) -> Any:
    """A tensor subclass `_odd_tensor` takes (one holding its values: torchvision's tv_tensors,
    a Parameter) as the plain tensor of the same values, else `value`: pipeplan checks, stacks
    and trains on plain tensors, so no subclass's Python runs in them. `Tensor.as_subclass` is
    outside `__torch_function__` (torch.overrides' ignored functions). Found by the
    thirty-eighth round: a subclass whose comparisons lied passed the label check and failed
    in torch's words; one whose `torch.stack` changed values had an item blamed for a label it
    did not hold."""
    if isinstance(value, torch.Tensor) and type(value) is not torch.Tensor:
        return torch.Tensor.as_subclass(value, torch.Tensor)
    return value


def _values_held(value: tuple | list) -> int:
    """How many values a tuple or list holds, counted by the builtin's own iteration: a
    subclass's `len()` or `__iter__` may say otherwise (forty-eighth round: one whose len()
    said 2 held 3)."""
    return sum(1 for _ in (tuple if isinstance(value, tuple) else list).__iter__(value))


def _check_pair(value: Any, name: str, split: str, index: int) -> None:
    held = _values_held(value) if isinstance(value, tuple | list) else 0
    if not (isinstance(value, tuple | list) and held == 2):
        kind = f"a {held}-tuple" if isinstance(value, tuple | list) else type(value).__name__
        raise BadArgumentError(
            f"data '{name}': {split} item {index} is {kind}, not an (input, label) pair"
        )


def batch_rows(
    dataset: Any, indices: Iterable[Any], part: int, name: str, split: str
) -> torch.Tensor:
    """A rank's read of a batch as it trains: the items' inputs (`part` 0) or labels (1),
    stacked. A failure says what the launcher's own reads say (`item`): the data's name, the
    split and the item. Found by the thirty-fifth round: a rank's `__getitem__` that raised
    was "training failed on rank 1 at step 2: ValueError: sample 527 is unreadable", with no
    data, split or item (527 was the user's own word), and an item that was no pair, or a
    batch whose items did not stack, was torch's message alone ("KeyError: 0", "stack
    expects each tensor to be equal size…"). Called inside the user's side (`users_side`).
    A peer's loss or a timeout met in a read (a `__getitem__` that runs a collective) stays
    what it is: the launcher names the rank that failed first, not this one.

        batch_rows(train, [527, 12], 0, "m:load", "train")
        # BadArgumentError: data 'm:load': reading train item 527 raised ValueError: …
    """
    indices = [int(i) for i in indices]
    return stack_part(read_items(dataset, indices, name, split), indices, part, name, split)


def batch_pair(
    dataset: Any, indices: Iterable[Any], name: str, split: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """`batch_rows` of both parts from one read of each item: (inputs, labels). Found by the
    thirty-eighth round: evaluation read each held-out item twice, once per part.

        x, y = batch_pair(eval_set, [3, 4], "m:load", "eval")
    """
    indices = [int(i) for i in indices]
    values = read_items(dataset, indices, name, split)
    return tuple(stack_part(values, indices, part, name, split) for part in (0, 1))  # type: ignore[return-value]


# The read of the user's data a process is in (`reading`: an item, a len()): [when it began
# (monotonic), --data, what, least_s, the seconds seen stopped then], or empty; read by a
# rank's heartbeat thread (`hung_read`).
_READING: list[Any] = []
# [hung_read's last look (monotonic), the process's CPU time then, the seconds it has been
# seen stopped in all]: a gap between two looks (each a second or less apart) in which the
# process took no CPU is a stop (SIGSTOP, a suspended job), not its data's time. Found by
# the fifty-first round: every rank stopped past the timeout and continued ended blaming its
# data ("reading train item 75 did not return"), whose reads take 50 ms.
_LOOKED: list[float] = [0.0, 0.0, 0.0]
STOPPED_GAP_S = 5.0


def _stopped_s() -> float:
    """The seconds this process has been seen stopped (`_LOOKED`), this look counted."""
    now, cpu = time.monotonic(), time.process_time()
    last, last_cpu, stopped = _LOOKED
    gap = now - last
    if last and gap > STOPPED_GAP_S and cpu - last_cpu < 0.1 * gap:
        stopped += gap
    _LOOKED[:] = [now, cpu, stopped]
    return stopped


@contextlib.contextmanager
def reading(name: str, doing: str, least_s: float = 0.0) -> Iterator[None]:
    """Marks a call into the user's data (`len()`, an item; its import or function, which may
    take `least_s` whatever the collective timeout) as under way for `hung_read`."""
    _READING[:] = [time.monotonic(), name, doing, least_s, _LOOKED[2]]
    try:
        yield
    finally:
        _READING.clear()


def hung_read(timeout_s: float, early_s: float = 0.0) -> str | None:
    """What the user's data code has been reading for longer than `timeout_s` (the collective
    timeout), in words, or None. Found by the forty-sixth round: a rank whose `__getitem__`
    never returned kept its heartbeat thread beating, so the others waited for it as for slow
    one-sided work, and a run whose ranks all hung in their data ran on, silent, for as long
    as nobody stopped it. A rank's heartbeat ends it instead (`worker._Heartbeat`).

        hung_read(600.0)   # "data 'm:load': reading train item 7 did not return within …"

    `early_s`: said that much before the timeout, so that a rank says it before a peer
    waiting for it in a collective times out (a rank's heartbeat, which looks once a second).
    """
    stopped = _stopped_s()
    reading = list(_READING)  # the main thread may clear it meanwhile
    if not reading:
        return None
    started, name, doing, least_s, stopped_before = reading
    if time.monotonic() - started - (stopped - stopped_before) <= max(timeout_s, least_s) - early_s:
        return None
    if least_s > timeout_s:
        return (
            f"data {quoted(name)}: {doing} did not return within {least_s:g} s (hung; a data "
            "module's import or function may take the collective timeout or "
            f"{least_s:g} s, whichever is longer)"
        )
    return (
        f"data {quoted(name)}: {doing} did not return within the collective timeout of "
        f"{timeout_s:g} s (hung; --collective-timeout sets how long a read may take)"
    )


# The longest a data module's import or its function may take, if the collective timeout is
# shorter: they load and prepare data sets (tokenizing a corpus takes minutes) once, where a
# read of an item takes milliseconds and is held to the collective timeout.
LOAD_LIMIT_S = 600.0


@contextlib.contextmanager
def watched_for_hangs(timeout_s: float) -> Iterator[None]:
    """The launcher's checks of the data: a call into the data code (its import, its
    function, a `len()`, an item: `reading`) that has not returned within `timeout_s` (the
    collective timeout) ends the `pipeplan` command with one line naming it, exit 2, before
    the run folder is made; in a rank its heartbeat does (`worker._Heartbeat`). Found by the
    forty-seventh round: a data module that slept forever at import, in `load` or in an item
    read by the launcher's checks hung `pipeplan run` with nothing said, whatever
    --collective-timeout said.

        with watched_for_hangs(cfg.collective_timeout_s):
            seq, data = build_task(cfg)
    """
    if not is_command_process():  # the Python API's caller's process: theirs to stop
        yield
        return
    # The console as it is now: the data code's calls hold descriptor 2 and sys.stderr.
    console = os.dup(2)
    done = threading.Event()

    def watch() -> None:
        while not done.wait(min(1.0, timeout_s / 4)):
            hung = hung_read(timeout_s)
            if hung is not None:
                with contextlib.suppress(OSError):
                    os.write(console, (pipeplan_log.error_line(hung) + "\n").encode())
                end_children(None)  # what the hung code started: it held `… | cat` open
                os._exit(2)

    watcher = threading.Thread(target=watch, name="pipeplan-data-watch", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        done.set()
        watcher.join()
        # The data code may have closed it (`os.closerange`): refused by its own check.
        with contextlib.suppress(OSError):
            os.close(console)


def read_items(dataset: Any, indices: list[int], name: str, split: str) -> list[Any]:
    """Each item of `indices` read once and checked as `batch_rows` says. torch's settings,
    the resource limits, the functions of KEPT_MODULES and their classes' methods, and the
    process's streams, environment, logging switch and recursion limit, autograd's state,
    torch's modes, kernels and global hooks, the import system and pickle's tables are held
    for the batch as a whole (`torch_state_kept`, `limits_kept`, `functions_kept`,
    `process_state_kept`, `autograd_state_kept`, `torch_modes_kept`, `kernels_kept`,
    `global_hooks_kept`, `import_system_kept`, `pickling_kept`: together ~1.6 ms on a shared
    core, 1.4 ms before the sixty-first round's modules and hooks, where an item's read may
    cost microseconds), and a process the code forks ends as the
    batch's reads come back (`forks_ended`)."""
    read = []
    first = f", item {indices[0]} first" if indices else ""
    batch = f"reading a batch ({len(indices)} {split} items{first})"
    descriptors_before_reads()
    with (
        limits_kept(name, batch),
        functions_kept(name, batch),
        torch_modes_kept(name, batch),
        kernels_kept(name, batch),
        torch_state_kept(name, batch),
        autograd_state_kept(name, batch),
        global_hooks_kept(name, batch),
        hooks_kept(name, batch),
        import_system_kept(name, batch),
        process_state_kept(name, batch),
        pickling_kept(name, batch),
        guard_kept(name, batch),  # what the holds above run on, put back before they compare
        forks_ended(),  # a child the code forks ends at once (`_contained`)
    ):
        for index in indices:
            doing = f"reading {split} item {index}"
            try:
                with reading(name, doing):
                    read.append(dataset[index])
            except SystemExit as exc:  # sys.exit, or os._exit (`exits_raised`): named as
                # the launcher's own read names it, not "exited with code 7" (53rd round)
                code = exc.code if isinstance(exc.code, int) or exc.code is None else 1
                raise BadArgumentError(f"data '{name}': {doing} exited (code {code or 0})") from exc
            except Exception as exc:
                if classify(exc) != "raised":
                    raise
                # Chained: the rank's log shows the user's own traceback under the line.
                raise BadArgumentError(f"data '{name}': {doing} raised {_one_line(exc)}") from exc
        descriptors_left(name, batch, len(indices))
    # Checked once the settings are: an item made under a changed one is said as that change.
    values = []
    for index, value in zip(indices, read, strict=True):
        with looking_at(name, f"{split} item {index}"):
            refuse_awaitable_item(value, dataset, index, name, split)
            _check_pair(value, name, split, index)
            refuse_odd_tensors(value, index, name, split)
            values.append((_plain(value[0]), _plain(value[1])))
    return values


def stack_part(
    values: list[Any], indices: list[int], part: int, name: str, split: str
) -> torch.Tensor:
    """The inputs (`part` 0) or labels (1) of items `read_items` read, stacked; a batch that
    does not stack is named by its data and items, and so is one whose items hold tensors of
    two dtypes. Found by the thirty-ninth round: torch.stack promotes them to one, silently
    (one image in five of int64, or a label `tensor(True)` among int64 ones, trained with
    exit 0), where the same data wrong in every item is refused."""
    what = ("input", "label")[part]
    parts = [value[part] for value in values]
    tensors = [p for p in parts if isinstance(p, torch.Tensor)]
    if len(tensors) == len(parts) and parts:
        for index, value in zip(indices, parts, strict=True):
            if value.dtype != parts[0].dtype:
                raise BadArgumentError(
                    f"data '{name}': {split} item {indices[0]}'s {what} is {_describe(parts[0])}"
                    f" and item {index}'s {_describe(value)}: the {what}s of a batch are "
                    "stacked into one tensor and must have one dtype"
                )
    try:
        return torch.stack(parts)
    except Exception as exc:  # any: a ValueError too (the thirty-seventh round)
        for index, value in zip(indices, parts, strict=True):
            _refuse_non_tensor(value, what, name, split, index)
            if value.shape != parts[0].shape:
                why = (  # either may be the odd one: both named, in the batch's order
                    f"{split} item {indices[0]}'s {what} is {_describe(parts[0])} and item "
                    f"{index}'s {_describe(value)}: the {what}s of a batch are stacked into "
                    "one tensor and must have one shape"
                )
                break
        else:
            first = f", item {indices[0]} first" if indices else ""
            batch = f"{len(indices)} {split} items{first}"
            why = f"stacking the {what}s of a batch ({batch}) raised {_one_line(exc)}"
        raise BadArgumentError(f"data '{name}': {why}") from exc


# --- helpers -----------------------------------------------------------------------------


def _samples(dataset: Any, name: str, split: str) -> tuple[torch.Tensor, torch.Tensor]:
    """All inputs and labels of an in-memory dataset, else those of its first and last item,
    each refusal naming the item and what it holds, as the batch checks do (found by the
    sixty-fifth round: a list input was "train inputs must be tensors", naming neither).

        _samples(ds, "m:load", "train")
        # BadArgumentError: data 'm:load': train item 0's input is list, not a tensor
    """
    if isinstance(dataset, TensorPairs):
        return dataset.inputs, dataset.labels
    indices = (0, length(dataset, name, split) - 1)
    items = [item(dataset, index, name, split) for index in indices]
    for index, (x, y) in zip(indices, items, strict=True):
        _refuse_non_tensor(x, "input", name, split, index)
        if not (isinstance(y, torch.Tensor) and y.dtype == torch.int64 and y.dim() <= 1):
            raise BadArgumentError(
                f"data '{name}': {split} item {index}'s label is {_describe(y)}: labels must "
                "be int64 scalar tensors (torch.tensor(label)), or int64 token ids for causal-lm"
            )
    for part, what in ((0, "input"), (1, "label")):
        first, last = (value[part] for value in items)
        if first.shape != last.shape or first.dtype != last.dtype:
            raise BadArgumentError(
                f"data '{name}': {split} item {indices[0]}'s {what} is {_describe(first)} and "
                f"item {indices[1]}'s {_describe(last)}: every item's {what} must have one "
                "shape and dtype"
            )
    return torch.stack([x for x, _ in items]), torch.stack([y for _, y in items])


def _refuse_non_tensor(value: Any, what: str, name: str, split: str, index: int) -> None:
    """Refuses an item's input or label that is no tensor, named by its data, split, item and
    type, before any shape of it is read (a list has none to compare).

        _refuse_non_tensor([3, 4], "input", "m:load", "train", 0)
        # BadArgumentError: data 'm:load': train item 0's input is list, not a tensor
    """
    if not isinstance(value, torch.Tensor):
        raise BadArgumentError(
            f"data '{name}': {split} item {index}'s {what} is {_describe(value)}, not a tensor"
        )


def _check_inputs(
    inputs: torch.Tensor, name: str, seq: LayerSequence, padded: bool, rows: _Rows | None = None
) -> None:
    """Inputs of the model's shape and dtype; token ids within its vocabulary, or PADDING in
    `padded` data. `_check_inputs(ids, "d.jsonl", seq, padded=True)`."""
    from pipeplan.models import PADDING

    shape, dtype = tuple(inputs.shape[1:]), inputs.dtype
    if shape != tuple(seq.input_shape) or dtype != seq.input_dtype:
        raise BadArgumentError(
            f"data '{name}' gives inputs of shape {_shape(shape)} {_dtype(dtype)} but model "
            f"'{seq.name}' takes {_shape(seq.input_shape)} {_dtype(seq.input_dtype)}"
        )
    vocab = getattr(seq.config, "vocab_size", None)
    if dtype == torch.int64 and vocab is not None:
        tokens = inputs[inputs != PADDING] if padded else inputs
        if not len(tokens.view(-1)):
            return
        low, high = int(tokens.min()), int(tokens.max())
        if low < 0 or high >= vocab:
            padding = f" ({PADDING} at padding)" if padded else ""
            if not padded and low == PADDING:
                padding = f" ({PADDING} is padding in TaskData(..., padded=True))"
            where = rows.first(_not_tokens(inputs, vocab, padded)) if rows else ""
            # Of two items read, theirs: not the set's range (the sixtieth round's labels).
            have = rows.have(name) if rows and not rows.every else f"data '{name}' has"
            raise BadArgumentError(
                f"{have} token ids in {low}..{high} but model '{seq.name}' has "
                f"vocab_size {vocab}{padding}{where}"
            )


def _old_padding_rows(inputs: torch.Tensor, seq: LayerSequence) -> int:
    """How many rows of padded data look padded with the pad token's id, as padded data was
    before the twenty-ninth round made padding PADDING (a pad id is now a real token,
    attended to and learnt: pad = eos is common), so that its padding would train silently as
    text: a row ending in two or more pad ids that holds no PADDING (a text the tokenizer
    ends with one eos does not), counted row by row (one row padded the new way hid every
    other: thirtieth round). `check_compatible` says it once for both sets."""
    from pipeplan.models import PADDING

    pad = getattr(seq.config, "pad_token_id", None)
    if not isinstance(pad, int) or inputs.dtype != torch.int64 or inputs.dim() != 2:
        return 0
    if inputs.shape[1] < 2:
        return 0
    ends = (inputs[:, -1] == pad) & (inputs[:, -2] == pad)
    return int((ends & ~(inputs == PADDING).any(dim=1)).sum())


def _check_not_all_padding(dataset: Any, inputs: torch.Tensor, name: str, split: str) -> None:
    """Padded data whose every row is padding holds no token to learn from: it trained and
    evaluated without a word (thirtieth round), where text files whose every text encodes to
    nothing are refused. `inputs`: every row of a TensorPairs, else the first and last item's;
    where both of those are padding, the items between are read, up to TARGET_SCAN_ITEMS, as
    the scan for a next token does (`_check_items_have_targets`): a set read whole is refused,
    a longer one warned of. Found by the sixty-third round: a `module:function` Dataset of
    classification rows of padding alone trained ("accuracy 60.0%"): only TensorPairs were
    checked.

        _check_not_all_padding(ds, first_and_last, "m:load", "train")
        # BadArgumentError: data 'm:load': every train item is padding (-100), not one token
    """
    from pipeplan.models import PADDING

    if inputs.dtype != torch.int64 or not bool((inputs == PADDING).all()):
        return
    unit = "row"
    if not isinstance(dataset, TensorPairs):
        unit, count = "item", length(dataset, name, split)
        read = min(count - 1, TARGET_SCAN_ITEMS)
        for start in range(1, read, TARGET_SCAN_CHUNK):
            chunk = range(start, min(start + TARGET_SCAN_CHUNK, read))
            for x, _ in items(dataset, chunk, name, split):
                if not isinstance(x, torch.Tensor) or bool((x != PADDING).any()):
                    return  # a token (an item of another kind: the batch checks name it)
        if read < count - 1:  # not every item read
            log.warning(
                "data '%s': %s items 0 to %d and %d (read before training) are padding (%d) "
                "alone; unless later ones hold a token, the run %s no token",
                name,
                split,
                read - 1,
                count - 1,
                PADDING,
                "trains on" if split == "train" else "evaluates on",
            )
            return
    raise BadArgumentError(
        f"data '{name}': every {split} {unit} is padding ({PADDING}), not one token"
    )


def _shape(shape: tuple[int, ...]) -> str:
    return str(tuple(shape))


def _dtype(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _describe(value: Any) -> str:
    """A tensor's dtype and shape, else its type, by module where not a builtin's:
    `_describe(np.zeros(3))` is "numpy.ndarray", `_describe([1])` "list"."""
    if isinstance(value, torch.Tensor):
        return f"{_dtype(value.dtype)} tensor of shape {_shape(tuple(value.shape))}"
    kind = type(value)
    if kind.__module__ == "builtins":
        return kind.__name__
    return f"{kind.__module__.split('.')[0]}.{kind.__name__}"


def _one_line(exc: BaseException) -> str:
    if isinstance(exc, UserBaseException) and exc.__cause__ is not None:
        exc = exc.__cause__  # the user's own exception, by its name
    try:
        text = str(exc)
    except Exception:  # its __str__ raised (the thirty-seventh round): the name says it
        text = ""
    # Each control character a space, then the spaces folded: a line break, a tab or an
    # escape sequence (ESC, "\x1b[31m": the thirty-seventh round saw it reach the terminal
    # raw) of the user's text never breaks or colours pipeplan's one line.
    text = " ".join(one_line(text).split())
    name = one_line(type(exc).__name__)
    return f"{name}: {text}" if text else name


_hold_guard()  # last: this module's own functions are all defined now
