"""Model zoo: a built-in name or a transformers directory → a `LayerSequence`.

A LayerSequence is the ordered list of layers that profiler, planner and executor all index
the same way: 0 = embeddings, 1..n = blocks, n+1 = head (final norm / pooler and classifier, or
the language-model head; the loss is `LayerSequence.loss`). Every layer maps one tensor to one
tensor, so a contiguous range of layers is a valid pipeline stage. The layers are views of the
transformers model they were cut from (`LayerSequence.hf_model`): running them in order gives
exactly that model's forward, training them trains that model, and `export` saves it.

    models.build("bert-tiny")                          # built-in shape, random weights
    models.build("ckpt/")                              # weights of ckpt/model.safetensors
    models.build("ckpt/", num_labels=3)                # … with a fresh 3-class head if needed
    models.build("ckpt/", label_names=["neg", "pos"])  # numbered as ckpt's id2label numbers them
    models.build("config-only/", init="random")        # a config alone: say so
    models.build("llama-tiny", task="classification")  # decoders: causal LM or classification
    models.export(seq, "out/")                         # AutoModelFor….from_pretrained("out/")

What travels between layers (docs/architecture.md §4.17): the hidden state only. Decoder blocks
recompute positions, rotary embeddings and the causal mask from its shape. With
`padding_mask=True` (always for a decoder classifier, `pools_by_pad_id`) it has one extra
trailing channel (`mask_channel`: 0.0 = padding, i.e. an input id equal to PADDING, else a
token) that each block turns into the attention mask.
Padding is PADDING in the input ids, never "an id equal to pad_token_id": with the common
pad = eos (or unk) tokenizer a real `</s>` is the pad id, and it is attended to and learnt.
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import math
import os
import pickle
import secrets
import shutil
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

import torch
import torch.nn.functional as F
from torch import nn

from pipeplan.errors import (
    SHOWN,
    BadArgumentError,
    InputFileError,
    OutputError,
    PipeplanError,
    UnknownModelError,
    excerpt,
    import_failure,
    memory_failure,
    quoted,
    tempdir_failure,
)
from pipeplan.fileio import (
    EXPORT_MARK,
    OUTPUT_WRITTEN,
    HeldFolder,
    check_outside_runs,
    give_output_modes,
    held_folder,
    new_directories,
    not_a_new_directory,
    remove_dead_exports,
    stops_deferred,
    write_failure,
)
from pipeplan.formats import Init, Task  # defined once, with the run options that take them
from pipeplan.formats.base import (
    CONFIG_LIMIT,
    GENERATION_CONFIG_LIMIT,
    INDEX_LIMIT,
    MAX_CONFIG_BYTES,
    MAX_GENERATION_CONFIG_BYTES,
    MAX_INDEX_BYTES,
    TooManyDigits,
    check_json,
    json_loads,
    out_of_memory,
    printable,
    read_input,
    run_file_kind,
    unique_keys,
)
from pipeplan.formats.modelconfig import (
    GENERATION_TOKEN_ID_KEYS,
    MAX_PARAMETERS,
    PARAMETER_BYTES,
    TOKEN_ID_KEYS,
    chunk_problem,
    class_names,
    config_value_problem,
    default_class_names,
    generation_fields,
    generation_value_problem,
    head_labels_problem,
    implied_shapes,
    label_count,
    problem_type_problem,
    quiet_transformers,
    shown,
    size_problem,
    transformers_config,
    type_problem,
)
from pipeplan.formats.presets import PRESETS, config_path, shadowed_folder
from pipeplan.spawn import owner_tag

log = logging.getLogger("pipeplan.models")

# Sequence length of the text presets and of text models built from a config path.
DEFAULT_SEQ_LEN = 128
# What `from_pretrained` loads, in its order of preference (the index files are shards).
WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)
# A decoder's generation settings beside its config.json (`_generation_config`).
GENERATION_CONFIG = "generation_config.json"
TASKS = get_args(Task)
IGNORE_INDEX = -100  # label of a token the causal-LM loss skips, as in transformers
# Padding in padded input ids (text tokenized to --seq-len, `TaskData(padded=True)`): what the
# tokenizer padded (its attention mask 0), never a token id, so a real token equal to the
# pad token (pad = eos, pad = unk) stays a token. Layer 0 masks it and embeds pad_token_id
# there, as transformers is given it. The same value as IGNORE_INDEX, so a causal LM's labels
# are its input ids unchanged. Found by the twenty-ninth round: ids equal to pad_token_id were
# padding, and every `</s>` of a pad = eos tokenizer was dropped from attention and the loss.
PADDING = IGNORE_INDEX
# Blocks a model may have: no real model has more than a few hundred; 10**6 tiny blocks made
# building one run for hours. Checked before anything is built.
MAX_BLOCKS = 4096


# --------------------------------------------------------------------------- layers


def _with_mask(hidden: torch.Tensor, channel: torch.Tensor) -> torch.Tensor:
    """Append the mask channel (B, T) (`mask_channel`) as the trailing channel."""
    return torch.cat([hidden, channel.unsqueeze(-1).to(hidden.dtype)], dim=-1)


# The mask channel's values (exact in bf16): what each position is.
_PAD_CHANNEL, _TOKEN_CHANNEL, _PAD_ID_CHANNEL = 0.0, 1.0, 2.0


def mask_channel(inputs: torch.Tensor, pad_token_id: int) -> torch.Tensor:
    """The padding-mask channel of padded input ids (B, T): 0.0 at PADDING (not attended to),
    1.0 at a token, 2.0 at a real token whose id is pad_token_id (attended to, but skipped by
    a decoder classifier's pooling, which transformers finds from the ids: the rightmost
    token that is not pad_token_id).

        mask_channel(torch.tensor([[5, 0, PADDING]]), 0)   # tensor([[1., 2., 0.]])
    """
    channel = torch.full(inputs.shape, _TOKEN_CHANNEL, device=inputs.device)
    channel[inputs == pad_token_id] = _PAD_ID_CHANNEL
    channel[inputs == PADDING] = _PAD_CHANNEL
    return channel


def transformers_inputs(inputs: torch.Tensor, pad_token_id: int) -> dict[str, torch.Tensor]:
    """What a transformers model is given for pipeplan's padded input ids: PADDING replaced
    by pad_token_id, and the attention mask the tokenizer made (0 at padding).

        hf_model(**transformers_inputs(ids, config.pad_token_id))
    """
    padding = inputs == PADDING
    return {
        "input_ids": inputs.masked_fill(padding, pad_token_id),
        "attention_mask": (~padding).long(),
    }


def _split_mask(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The hidden state and its mask channel (`mask_channel`); `channel != 0` is attended."""
    # Contiguous, so the block gets the memory layout the transformers model gives it and
    # runs the same kernels: the results agree bit for bit.
    return x[..., :-1].contiguous(), x[..., -1]


class Embeddings(nn.Module):
    """Layer 0: token/patch embeddings (inputs → hidden states); with `pad_token_id` also the
    padding-mask channel, taken from the input ids (PADDING: padding), and pad_token_id
    embedded at padding, as transformers is given it."""

    def __init__(
        self,
        embeddings: nn.Module,
        input_name: str,
        *,
        project: nn.Module | None = None,
        pad_token_id: int | None = None,
    ):
        super().__init__()
        self.embeddings = embeddings
        self.input_name = input_name
        self.project = project  # ELECTRA: embedding size → hidden size
        self.pad_token_id = pad_token_id

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        if self.pad_token_id is None:
            return self._embed(inputs)
        channel = mask_channel(inputs, self.pad_token_id)
        ids = transformers_inputs(inputs, self.pad_token_id)["input_ids"]
        return _with_mask(self._embed(ids), channel)

    def _embed(self, inputs: torch.Tensor) -> torch.Tensor:
        hidden = self.embeddings(**{self.input_name: inputs})
        return hidden if self.project is None else self.project(hidden)


class GPT2Embeddings(nn.Module):
    """GPT-2 has no embeddings module: token plus learned position embeddings, then dropout,
    computed as `GPT2Model.forward` does."""

    def __init__(self, transformer: nn.Module):
        super().__init__()
        self.wte, self.wpe, self.drop = transformer.wte, transformer.wpe, transformer.drop

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        inputs_embeds = self.wte(input_ids)
        positions = torch.arange(input_ids.shape[1], device=input_ids.device).unsqueeze(0)
        return self.drop(inputs_embeds + self.wpe(positions))


class EncoderMask(nn.Module):
    """An encoder block's attention arguments: the padding mask, expanded by transformers'
    own `create_bidirectional_mask` (so every attention implementation gets its form)."""

    def __init__(self, config: Any):
        super().__init__()
        self.config = config

    def forward(self, hidden: torch.Tensor, padding: torch.Tensor | None) -> dict[str, Any]:
        from transformers.masking_utils import create_bidirectional_mask

        mask = create_bidirectional_mask(
            config=self.config, inputs_embeds=hidden, attention_mask=padding
        )
        return {"attention_mask": mask}


class CausalContext(nn.Module):
    """A decoder block's attention arguments, recomputed from the hidden state's shape as the
    transformers model computes them once for all blocks: positions 0..T−1, the causal mask
    (with padding when the mask channel travels) and, for Llama, the rotary cos/sin. Nothing
    but the hidden state has to cross a stage boundary."""

    def __init__(self, config: Any, rotary: nn.Module | None = None):
        super().__init__()
        self.config = config
        self.rotary = rotary

    def forward(self, hidden: torch.Tensor, padding: torch.Tensor | None) -> dict[str, Any]:
        from transformers.masking_utils import create_causal_mask

        positions = torch.arange(hidden.shape[1], device=hidden.device).unsqueeze(0)
        # Positional: the cache argument was renamed (past_key_values → cache) in 5.x.
        mask = create_causal_mask(self.config, hidden, padding, None, positions)
        kwargs: dict[str, Any] = {"attention_mask": mask, "position_ids": positions}
        if self.rotary is not None:
            kwargs["position_embeddings"] = self.rotary(hidden, position_ids=positions)
        return kwargs


class Block(nn.Module):
    """Layers 1..n: one transformer block, hidden states → hidden states. `context` gives the
    block's attention arguments (none for unpadded encoders: samples are fixed-length)."""

    def __init__(
        self, block: nn.Module, context: nn.Module | None = None, carries_mask: bool = False
    ):
        super().__init__()
        self.block = block
        self.context = context
        self.carries_mask = carries_mask

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        channel = padding = None
        if self.carries_mask:
            hidden, channel = _split_mask(hidden)
            padding = channel != _PAD_CHANNEL  # True: attended to
        kwargs = {} if self.context is None else self.context(hidden, padding)
        out = self.block(hidden, **kwargs)
        out = out[0] if isinstance(out, tuple) else out  # transformers 4.x returned a tuple
        return out if channel is None else _with_mask(out, channel)


class FirstToken(nn.Module):
    """The first token's hidden state ([CLS]), where a head pools it between two parts."""

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return hidden[:, 0]


def _last_token(logits: torch.Tensor, channel: torch.Tensor) -> torch.Tensor:
    """Each sample's logits at its rightmost token whose id is not pad_token_id (the mask
    channel's 1.0), found and gathered as transformers' …ForSequenceClassification does from
    the ids (left and right padding both work; a real trailing pad = eos is skipped there too)."""
    # A decoder classifier always carries the channel (`pools_by_pad_id`).
    batch, length = logits.shape[:2]
    positions = torch.arange(length, device=logits.device, dtype=torch.int32)
    last = (positions * (channel == _TOKEN_CHANNEL).to(torch.int32)).argmax(-1)
    return logits[torch.arange(batch, device=logits.device), last]


class Head(nn.Module):
    """Layer n+1: everything after the last block up to the logits."""

    def __init__(
        self,
        parts: list[nn.Module],
        take_first_token: bool = False,
        *,
        carries_mask: bool = False,
        pool_last_token: bool = False,
    ):
        super().__init__()
        self.parts = nn.ModuleList(parts)
        self.take_first_token = take_first_token
        self.carries_mask = carries_mask
        self.pool_last_token = pool_last_token  # decoder classification

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        channel = None
        if self.carries_mask:
            hidden, channel = _split_mask(hidden)
        for i, part in enumerate(self.parts):
            hidden = part(hidden)
            if i == 0 and self.take_first_token:
                hidden = hidden[:, 0]
        return _last_token(hidden, channel) if self.pool_last_token else hidden


def causal_lm_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Next-token cross-entropy as `…ForCausalLM(labels=input_ids)` computes it: position t
    predicts labels[t+1]; labels equal to IGNORE_INDEX (padding) are skipped. A batch with no
    target (texts of one token) has loss 0 and no gradient, not the NaN of a mean of nothing.

        loss = causal_lm_loss(logits, input_ids)   # logits (B, T, V), input_ids (B, T)
    """
    logits, shifted = _next_tokens(logits, labels)
    if not bool((shifted != IGNORE_INDEX).any()):
        return F.cross_entropy(logits, shifted, ignore_index=IGNORE_INDEX, reduction="sum")
    return F.cross_entropy(logits, shifted, ignore_index=IGNORE_INDEX)


def causal_lm_loss_sum(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """`causal_lm_loss` summed over the targets instead of averaged: 0 (no gradient) when
    there is none. `causal_lm_loss_sum(logits, ids) / causal_lm_targets(ids)` is the mean."""
    logits, shifted = _next_tokens(logits, labels)
    return F.cross_entropy(logits, shifted, ignore_index=IGNORE_INDEX, reduction="sum")


def causal_lm_targets(labels: torch.Tensor) -> torch.Tensor:
    """How many next-token targets `labels` (B, T) hold: positions 1.. not IGNORE_INDEX."""
    return (labels[..., 1:] != IGNORE_INDEX).sum()


def _next_tokens(logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits (B·T, V) in float32 (transformers upcasts before the loss) and the token each
    position predicts (B·T,): labels shifted left by one, IGNORE_INDEX after the last."""
    shifted = F.pad(labels, (0, 1), value=IGNORE_INDEX)[..., 1:].contiguous()
    return logits.float().view(-1, logits.shape[-1]), shifted.view(-1)


# --------------------------------------------------------------------------- the sequence


@dataclass
class LayerSequence:
    """The layers of one transformers model (`hf_model`) in pipeline order, with what the
    profiler, planner and executor need to know about them."""

    name: str
    family: str
    config: Any  # transformers PretrainedConfig
    layers: nn.ModuleList
    input_shape: tuple[int, ...]
    input_dtype: torch.dtype
    task: str = "classification"  # or "causal-lm"
    # The hidden state carries the padding-mask channel: padded data, or a decoder classifier
    # (`pools_by_pad_id`), whatever its data.
    padding_mask: bool = False
    hf_model: nn.Module | None = field(default=None, repr=False)  # what the layers view

    @property
    def num_blocks(self) -> int:
        return len(self.layers) - 2

    @property
    def num_labels(self) -> int:
        """Classes each prediction chooses among: the vocabulary for a causal LM."""
        return self.config.vocab_size if self.task == "causal-lm" else self.config.num_labels

    @property
    def logits_shape(self) -> tuple[int, ...]:
        """The head's output for one sample: (classes,) or (tokens, vocabulary)."""
        if self.task == "causal-lm":
            return (self.input_shape[0], self.num_labels)
        return (self.num_labels,)

    def kind(self, index: int) -> str:
        if index == 0:
            return "embeddings"
        return "head" if index == len(self.layers) - 1 else "block"

    def layer_name(self, index: int) -> str:
        kind = self.kind(index)
        return f"block{index}" if kind == "block" else kind

    def forward(self, x: torch.Tensor, start: int = 0, stop: int | None = None) -> torch.Tensor:
        """Run layers [start, stop)."""
        for layer in self.layers[start:stop]:
            x = layer(x)
        return x

    def loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Cross-entropy over classes; for a causal LM over next tokens (labels = input ids,
        padding set to IGNORE_INDEX)."""
        if self.task == "causal-lm":
            return causal_lm_loss(logits, labels)
        return F.cross_entropy(logits, labels)

    def loss_sum(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """`loss` summed over its targets (samples, or next tokens): 0 with none."""
        if self.task == "causal-lm":
            return causal_lm_loss_sum(logits, labels)
        return F.cross_entropy(logits, labels, reduction="sum")

    def targets(self, labels: torch.Tensor) -> torch.Tensor:
        """How many targets `loss` averages over in `labels`: samples, or next tokens."""
        if self.task == "causal-lm":
            return causal_lm_targets(labels)
        return torch.tensor(labels.shape[0])

    def example_batch(
        self, batch_size: int, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Random inputs and labels of the right shape and range (for profiling and tests).
        With a padding mask, samples are right-padded to random lengths ≥ half the sequence,
        so profiles time the masked attention that padded data runs."""
        shape = (batch_size, *self.input_shape)
        if self.input_dtype != torch.int64:
            inputs = torch.randn(shape, generator=generator)
        else:
            inputs = self._example_tokens(shape, generator)
        if self.task == "causal-lm":  # PADDING is IGNORE_INDEX: the loss skips padding
            return inputs, inputs.clone()
        labels = torch.randint(0, self.num_labels, (batch_size,), generator=generator)
        return inputs, labels

    def _example_tokens(
        self, shape: tuple[int, ...], generator: torch.Generator | None
    ) -> torch.Tensor:
        low = _first_example_token(self.family)
        # Any token, the pad token's too (GPT-2 padding with eos): padding is PADDING.
        inputs = torch.randint(low, self.config.vocab_size, shape, generator=generator)
        if self.padding_mask:
            length = shape[1]
            lengths = torch.randint((length + 1) // 2, length + 1, shape[:1], generator=generator)
            inputs[torch.arange(length) >= lengths[:, None]] = PADDING
        return inputs

    def config_json(self) -> dict[str, Any]:
        """The full config as plain JSON data (integer label keys become strings), with the
        attention implementation built, which to_dict() leaves out: a profile records what it
        timed (eager keeps the attention probabilities for backward; twenty-seventh round: an
        eager folder was planned with a profile timed with sdpa)."""
        data = json.loads(self.config.to_json_string(use_diff=False))
        # The model's own config: from_pretrained builds from a copy of `config`.
        built = self.hf_model.config if self.hf_model is not None else self.config
        return {**data, "attn_implementation": built._attn_implementation}

    def describe(self) -> dict[str, Any]:
        """The identity recorded in profiles and plans."""
        return dict(
            name=self.name,
            family=self.family,
            config=self.config_json(),
            input_shape=list(self.input_shape),
            input_dtype=str(self.input_dtype).removeprefix("torch."),
            num_labels=self.num_labels,
            task=self.task,
            padding_mask=self.padding_mask,
        )


def known_models() -> list[str]:
    return list(PRESETS)


def model_modules(name_or_path: str) -> list[str]:
    """The transformers modules `name_or_path`'s model and config classes and their bases are
    defined in, importing them (what a rank holds as it trains: `data.rank_held`); none for
    a model that does not build (its build says why).

        model_modules("bert-synth")   # ["transformers.models.bert.modeling_bert", …]
    """
    import transformers

    try:
        family = FAMILIES[_resolve(name_or_path).family]
    except PipeplanError:
        return []
    names = (*family.models.values(), family.config_class)
    found = (base.__module__ for name in names for base in getattr(transformers, name).__mro__)
    return list(dict.fromkeys(name for name in found if name.startswith("transformers.")))


# --------------------------------------------------------------------------- build


def build(
    name_or_path: str,
    *,
    seq_len: int | None = None,
    seed: int = 0,
    dropout: float | None = None,
    init: Init | None = None,
    task: Task | None = None,
    num_labels: int | None = None,
    label_names: Sequence[str] | None = None,
    padding_mask: bool = False,
) -> LayerSequence:
    """Build a LayerSequence from a built-in name, or a transformers directory (or the path of
    its config.json).

        models.build("bert-synth", dropout=0.0)          # 0 makes training deterministic
        models.build("ckpt/")                            # pretrained weights, offline
        models.build("ckpt/", init="random", seed=3)     # the config only
        models.build("gpt2-tiny", task="classification", num_labels=4, padding_mask=True)

    `init`: None loads the directory's weights (model.safetensors or pytorch_model.bin) and
    refuses a directory without any; "random" draws every weight from `seed`. Presets are
    always random. A checkpoint without this task's head (or sized for other `num_labels`)
    gets a fresh head from `seed` and one warning. `label_names`: the data's classes by name
    (any order; `num_labels` is then their count), numbered by `label_order` and written as
    the config's id2label: a checkpoint naming other classes gets a fresh head and one warning
    too. `task`: "classification" (default) or, for decoders, "causal-lm" (the default for a
    decoder not saved as a classifier).
    `padding_mask`: input ids equal to PADDING are padding; the mask travels with the
    hidden state (module docstring). A decoder classifier carries it always
    (`pools_by_pad_id`): its head pools the rightmost token whose id is not pad_token_id."""
    return build_with_hf(
        name_or_path,
        seq_len=seq_len,
        seed=seed,
        dropout=dropout,
        init=init,
        task=task,
        num_labels=num_labels,
        label_names=label_names,
        padding_mask=padding_mask,
    )[0]


def build_with_hf(
    name_or_path: str,
    *,
    seq_len: int | None = None,
    seed: int = 0,
    dropout: float | None = None,
    init: Init | None = None,
    task: Task | None = None,
    num_labels: int | None = None,
    label_names: Sequence[str] | None = None,
    padding_mask: bool = False,
) -> tuple[LayerSequence, nn.Module]:
    """Like `build`, also returning the transformers model whose parameters the layers share."""
    source = _resolve(name_or_path)
    family = FAMILIES[source.family]
    task = _choose_task(source, family, task)
    where = str(source.config_file or name_or_path)  # what a config's refusal names
    order, other_classes = None, None
    if label_names is not None:
        order, other_classes = _label_order(source.config, label_names)
        num_labels = len(order)
    with _building(name_or_path):
        config = _make_config(source, family, where, dropout, task, num_labels, order)
        generation = _generation_config(source, config)  # checked with config.json's vocabulary
        init = _choose_init(source, init, name_or_path)  # a broken config is reported first
        # Before torch allocates: the weights' shapes, then the size the config asks for.
        stored = None
        if init == "pretrained":
            stored = _stored_tensors(source)  # each file checked before anything opens it
            _check_weight_shapes(source, config, stored)
            if task == "classification":
                _check_head_labels(source, family, stored)
            _check_config_dtype(source, stored)
        # The config's own labels size the head unless the caller's (a run's data,
        # `profile --num-labels`) replace them: after the weights' rows, which say more of a
        # head of other rows than the config counts.
        if num_labels is None and (why := head_labels_problem(source.config, task)) is not None:
            raise InputFileError(
                f"{where}: {why}; set the config's num_labels (or id2label) to the classes, or "
                "size the head with `pipeplan profile --num-labels N`"
            )
        _check_model_size(source, config, task, name_or_path)
        if stored is not None:  # reads two tensors: once the sizes are known to fit memory
            _check_tied_head(source, family, task, config, stored)
        padding_mask = padding_mask or pools_by_pad_id(family, task)
        _check_padding_mask(family, config, padding_mask, where)
        shape, dtype = _input(
            family, config, seq_len or source.seq_len, seq_len is not None, name_or_path
        )
        if (why := chunk_problem(config.to_dict(), source.family, shape[0])) is not None:
            raise InputFileError(f"{where}: {why}")  # a traceback in the first forward
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            hf_model, loading = _instantiate(family, task, config, source, init, stored, generation)
            if loading is not None and other_classes is not None:
                _redraw_head(hf_model, family)  # rows the checkpoint trained for other classes
        pad = config.pad_token_id if padding_mask else None
        layers = family.cut(hf_model, task, pad)
    if _untie(layers):
        # from_pretrained keeps a copy of `config`, and save_pretrained writes the copy: said on
        # one alone, a pretrained GPT-2's own model/ said tied beside an untied, trained head
        # (transformers 4 then ties it on loading, replacing the head; 5 warns).
        config.tie_word_embeddings = hf_model.config.tie_word_embeddings = False
    seq = LayerSequence(
        name_or_path, source.family, config, layers, shape, dtype, task, padding_mask, hf_model
    )
    if loading is not None:
        _check_loaded(loading, seq, source, seed, other_classes)
    if (folder := shadowed_folder(name_or_path)) is not None:
        # Once built (a refused build says one line only), once a command: a run's ranks
        # build quietly (`executor.task.build_task`).
        log.warning(
            f"{name_or_path} is the built-in model, not the folder {folder}/ here: "
            f"./{folder} names that folder"
        )
    return seq, hf_model


def label_order(name_or_path: str, names: Sequence[str]) -> list[str]:
    """The data's label names (any order) in the order of their ids on the model
    `name_or_path`, what `build(label_names=…)` numbers them by and data.json records:
    config.json's own numbering when its id2label names the same classes, else sorted.

        label_order("ckpt/", ["neg", "pos"])   # ["pos", "neg"]: ckpt/config.json's id2label
        label_order("bert-tiny", ["b", "a"])   # ["a", "b"]
    """
    return _label_order(_resolve(name_or_path).config, names)[0]


def _label_order(config: dict[str, Any], names: Sequence[str]) -> tuple[list[str], str | None]:
    """`label_order` of a config.json's dictionary, and why a head loaded for it must start
    afresh (None: it may be kept). Found by the twenty-seventh round: the names were always
    numbered sorted, so a checkpoint whose id2label said {0: pos, 1: neg} kept its head with
    its rows swapped, silently ("pos" data trained and exported as row 1, which was "neg").
    The config's numbering keeps what each row meant. A config naming the same number of
    other classes (its own names, not transformers' LABEL_0…) has rows that mean none of the
    data's: the head starts afresh, and the build says why. Names a config does not give
    (LABEL_0…) say nothing of the rows: the data's names are numbered onto them sorted.

        config = {"id2label": {"0": "pos", "1": "neg"}}
        _label_order(config, ["neg", "pos"])   # (["pos", "neg"], None)
        _label_order(config, ["a", "b"])
        # (["a", "b"], "config.json names its classes ['pos', 'neg'] and the data ['a', 'b'], …")
    """
    own = class_names(config)
    if own is not None and set(own) == set(names):
        return own, None
    ordered = sorted(names)
    if own is None or len(own) != len(ordered) or own == default_class_names(len(own)):
        return ordered, None  # no head of the data's size, or one that names nothing
    return ordered, (
        f"config.json names its classes {quoted(own, 80)} and the data {quoted(ordered, 80)}, "
        "other classes"
    )


@contextlib.contextmanager
def _building(name: str) -> Iterator[None]:
    """Building from a config, quietly and in one line: transformers logs config complaints
    (`pad_token_id must be within the vocabulary`) and torch warns (zero-element tensors)
    before failing or not, and the modules a config describes raise whatever they raise
    (ValueError for hidden size vs heads, KeyError for an unknown hidden_act, AssertionError
    for a pad_token_id beyond the vocabulary). Any of those names the model and its reason."""
    try:
        with warnings.catch_warnings(), quiet_transformers():
            warnings.simplefilter("ignore")
            yield
    except PipeplanError:
        raise
    except Exception as exc:
        failure = memory_failure(exc) or tempdir_failure(exc) or import_failure(exc)
        if failure is not None:
            raise failure from None  # not the config's fault
        reason = _first(exc)
        raise InputFileError(f"{name}: cannot build the model from its config ({reason})") from None


def _first(exc: BaseException) -> str:
    """An exception's message on one line (at most 200 characters): transformers' field
    validation puts the reason on its second line. A bare KeyError says only the key, so
    the type comes first when it is not a plain ValueError."""
    text = excerpt(" ".join(str(exc).split()))
    if not text:
        return type(exc).__name__
    return text if isinstance(exc, ValueError | OSError) else f"{type(exc).__name__}: {text}"


def export(
    seq: LayerSequence,
    out_dir: str | Path,
    parents: bool = True,
    tokenizer: Any = None,
    run_owned: bool = False,
    verify: Callable[[], None] | None = None,
) -> Path:
    """Write `seq`'s current weights as a standard transformers directory (config.json and
    model.safetensors; with `tokenizer`, a transformers tokenizer, its files as its
    save_pretrained writes them) and return its path:

        models.export(seq, "trained/bert", tokenizer=tok)
        AutoModelForSequenceClassification.from_pretrained("trained/bert")  # …ForCausalLM
        AutoTokenizer.from_pretrained("trained/bert")   # tok again

    The layers are views of `seq.hf_model`, so saving that model saves what was trained. The
    directory must not exist (or be empty); it appears whole, tokenizer and all, or not at
    all. `parents`: the
    folders above it are made where missing; a run's model/ (`parents=False`) is written
    only into its run directory as it is, never into one made again at a path the run moved
    away from (the twenty-eighth round). It lies in no run directory (`check_outside_runs`)
    unless it is the run's own (`run_owned`: its model/, where the model a resumed run wrote
    before is replaced, kept until the new one is whole). The folder above it is held open
    from that check to the rename (`held_folder`): a folder on the path swapped meanwhile for
    a link into a run directory put the export there (the forty-third round); now nothing is
    written through it, and the export says the folder changed. `verify`, where given, runs
    once the files are written, before the rename publishes them (a run's rank guard:
    `models.export(seq, out, parents=False, run_owned=True, verify=trainer_check)`); what it
    raises leaves nothing written."""
    if seq.hf_model is None:
        raise BadArgumentError(f"'{seq.name}' was not built by models.build: nothing to export")
    out = Path(out_dir)
    why = not_a_new_directory(out)  # a device was "not an empty directory"
    if why is not None and not (run_owned and out.is_dir() and not out.is_symlink()):
        raise OutputError(f"{out}: {why}; export needs a new one")
    # Named after this process, not `out`: a name near NAME_MAX made a longer one, "File name
    # too long" (the fifty-eighth round); and a later export removes it if this one is killed.
    name = f".pipeplan-export-{owner_tag() or os.getpid()}-{secrets.token_hex(4)}"
    made = new_directories(out.parent) if parents else contextlib.nullcontext()
    check = None if run_owned else lambda: check_outside_runs(out)
    renaming = False  # the last step: a failure there is `out` changed meanwhile
    earlier, placed = None, False  # the run's model from before, moved aside (`run_owned`)
    with made, held_folder(out.parent, check, out) as folder:  # made: go again if not written
        tmp = folder.entry(name)
        try:
            remove_dead_exports(folder)
            os.mkdir(name, dir_fd=folder.fd)
            (tmp / EXPORT_MARK).touch()  # what `remove_dead_exports` takes for an export's
            with quiet_transformers():
                seq.hf_model.save_pretrained(tmp)
                if tokenizer is not None:  # beside the weights: pipeline(model=out) reads it
                    tokenizer.save_pretrained(tmp)
            _drop_ids_outside_vocabulary(tmp)
            give_output_modes(tmp)
            (tmp / EXPORT_MARK).unlink()
            if verify is not None:
                # Once the bytes are written: a data thread that replaced what writes them
                # while save_pretrained ran (after the rank's compare before it) wrote an
                # all-zero model, exit 0 (the sixty-sixth round).
                verify()
            folder.confirm()  # the path still leads here: the rename lands where checked
            renaming = True
            # An empty `out` is replaced; a stop landing as it is, held: once the model is in
            # place, the command is done (`OUTPUT_WRITTEN`), whatever stop comes.
            with stops_deferred():
                if run_owned:  # the model a resumed run wrote before, kept until now
                    earlier = _moved_aside(folder, out, name)
                os.replace(name, out.name, src_dir_fd=folder.fd, dst_dir_fd=folder.fd)
                placed = True
                OUTPUT_WRITTEN[:] = [out]
        except BaseException as exc:
            # Whatever stopped it (a full disk fails as an OSError in config.json, as a
            # SafetensorError in the weights; Ctrl-C anywhere), the partial directory goes.
            shutil.rmtree(tmp, ignore_errors=True)
            if earlier is not None and not placed:  # the model before, put back
                with contextlib.suppress(OSError):
                    os.rename(earlier, out.name, src_dir_fd=folder.fd, dst_dir_fd=folder.fd)
            if renaming and isinstance(exc, OSError) and (why := not_a_new_directory(out)):
                # Not a failed write: `out` was made (another export of it) or changed while
                # this one ran; it said "write failed (Directory not empty)" (forty-second
                # round).
                raise OutputError(
                    f"{out}: {why} now (made or changed by another process while this export "
                    "ran); export needs a new one"
                ) from None
            reason = write_failure(exc, out.parent)
            if reason is None:
                raise
            raise OutputError(f"{out}: write failed ({reason})") from None
        if earlier is not None:
            _earlier_removed(folder.entry(earlier), out, out.parent / earlier)
    return out


def _moved_aside(folder: HeldFolder, out: Path, name: str) -> str | None:
    """The model a run wrote before at `out`, renamed in `folder` beside the export `name`
    takes its place, and that name; None where there is none (removed by hand). OutputError
    naming why where it cannot be moved. Found by the seventy-ninth round: a folder made
    immutable (`chattr +i`) was said to have been "made or changed by another process"; the
    eighty-first: a file of it made immutable, the rest was removed first, and the run's
    model/ was left half a model."""
    aside = f"{name}-replaced"
    try:
        os.rename(out.name, aside, src_dir_fd=folder.fd, dst_dir_fd=folder.fd)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise OutputError(
            f"{out}: write failed (the model the run wrote before could not be replaced: "
            f"{write_failure(exc, out)})"
        ) from None
    return aside


def _earlier_removed(path: Path, out: Path, named: Path) -> None:
    """The model a run wrote before, moved aside to `path` (`_moved_aside`; `named` as the
    user knows it) once the new one is at `out`, removed; what cannot be is left there, said
    in one warning."""
    try:
        shutil.rmtree(path)
    except OSError as exc:
        log.warning(
            "%s: the model the run wrote before was replaced, but not all of it could be "
            "removed (%s): what is left is in %s",
            out,
            write_failure(exc, path),
            named,
        )


def _drop_ids_outside_vocabulary(folder: Path) -> None:
    """Null, in the config.json and generation_config.json save_pretrained wrote to `folder`,
    every token id outside config.json's vocabulary; the model itself keeps them:

        _drop_ids_outside_vocabulary(tmp)   # {"bos_token_id": 50256, …} → null

    Only a family's default can be one (`modelconfig.DEFAULT_TOKEN_IDS`; any other is refused
    when the folder is read): GPT-2's bos and eos, 50256 at any vocab_size. Exported as found,
    from_pretrained warned on loading, and `generate` would pad with, or stop at, a token the
    model has no row for. The files are edited, not the configs before saving: a generation
    config changed since it was read is saved only if it passes transformers' strict checks."""
    vocab = json.loads((folder / "config.json").read_text()).get("vocab_size")
    if type(vocab) is not int:
        return  # an image model: no token ids
    for name, keys in (
        ("config.json", TOKEN_ID_KEYS),
        (GENERATION_CONFIG, GENERATION_TOKEN_ID_KEYS),
    ):
        path = folder / name
        if not path.is_file():
            continue  # an encoder's export has no generation_config.json
        settings = json.loads(path.read_text())
        outside = [key for key in keys if not _in_vocabulary(settings.get(key), vocab)]
        if outside:
            settings.update(dict.fromkeys(outside))
            # As transformers writes it (`to_json_string`), so the file reads the same.
            path.write_text(json.dumps(settings, indent=2, sort_keys=True) + "\n")


def _in_vocabulary(value: Any, vocab: int) -> bool:
    """A token id setting (an id, a list of them for eos, or None) names no id outside the
    vocabulary, 0..vocab-1."""
    ids = value if isinstance(value, list) else [] if value is None else [value]
    return all(type(i) is int and 0 <= i < vocab for i in ids)


# --------------------------------------------------------------------------- sources


@dataclass(frozen=True)
class _Source:
    family: str
    config: dict[str, Any]
    seq_len: int | None  # a preset's
    directory: Path | None = None  # None for presets
    weights: str | None = None  # the weight file found in `directory`
    config_file: Path | None = None  # its config.json (a directory's; or the path given)


def config_labels(name_or_path: str) -> int:
    """The classes a classifier of `name_or_path` has unless told otherwise (`build` without
    num_labels, `pipeplan profile` without --num-labels): its config's id2label, else
    num_labels, else 2. `config_labels("vit-digits")` → 10."""
    return label_count(_resolve(name_or_path).config)


def own_dropouts(name_or_path: str) -> dict[str, Any]:
    """The dropout probabilities `name_or_path` is built with when `build` is given none (a
    run that left --dropout out): each key `build(dropout=…)` sets (`Family.dropout`), as
    transformers reads the config (the family's default for a key it leaves out). A head's
    classifier_dropout null drops as the hidden layers do (transformers' rule for BERT,
    RoBERTa and ELECTRA), so it is said as that value: the model trains the same either way.

        own_dropouts("bert-synth")   # {"hidden_dropout_prob": 0.1, …, "classifier_dropout": 0.1}
        own_dropouts("gpt2-tiny")    # {"resid_pdrop": 0.1, "embd_pdrop": 0.1, "attn_pdrop": 0.1}
    """
    source = _resolve(name_or_path)
    with _building(name_or_path):  # a config transformers cannot read: one line, as `build`'s
        config = transformers_config(source.family, dict(source.config))
    own = {key: getattr(config, key) for key in FAMILIES[source.family].dropout}
    if "classifier_dropout" in own and own["classifier_dropout"] is None:
        own["classifier_dropout"] = own["hidden_dropout_prob"]
    return own


def generation_config_path(name_or_path: str) -> Path | None:
    """The generation_config.json a model folder's build reads (`_generation_config`), there
    or not; None for a built-in name.

        generation_config_path("runs/demo-pretrained/model")   # → …/model/generation_config.json
    """
    config = config_path(name_or_path)
    return None if config is None else config.parent / GENERATION_CONFIG


def _resolve(name_or_path: str) -> _Source:
    path = config_path(name_or_path)  # the one rule: a built-in name is the built-in
    if path is None:
        preset = PRESETS[name_or_path]
        return _Source(preset.family, dict(preset.config), preset.seq_len)
    looks_like_path = path.suffix == ".json" or "/" in name_or_path or path.exists()
    if not looks_like_path:
        raise UnknownModelError(
            f"unknown model {quoted(name_or_path)}; known: {', '.join(PRESETS)} "
            "(or a transformers directory / config.json path)"
        )
    folder = path.parent if path.name == "config.json" else path
    if not path.exists() and (kind := run_file_kind(folder)) is not None:
        # Forty-seventh round: a run folder given as MODEL was "runs/ft/config.json: no such
        # file"; its trained model is the folder's model/ (a checkpoint: `pipeplan export`).
        raise InputFileError(
            f"{folder}: not a model folder (it is {kind}); `pipeplan export RUN --out DIR` "
            "makes one of a run's trained model or of a checkpoint (--checkpoint step-N)"
        )
    _check_config_file(path)
    data = _read_config(path)
    model_type = data.pop("model_type", None)
    if model_type is None and "schema_version" in data:  # a profile, plan or run record
        raise InputFileError(
            f"{path}: a pipeplan file (it has schema_version), not a model's config.json; "
            "MODEL is a built-in name, a transformers directory or its config.json"
        )
    # A list or an object is no family's name (`in FAMILIES` hashed it: a traceback).
    if not isinstance(model_type, str) or model_type not in FAMILIES:
        raise InputFileError(
            f"{path}: model_type {shown(model_type)} is not a supported encoder or decoder "
            f"(supported: {', '.join(FAMILIES)})"
        )
    # Each key's JSON type before anything reads it (the task is chosen from architectures).
    if (why := type_problem(data)) is not None:
        raise InputFileError(f"{path}: {why}")
    directory = path.parent
    for name in WEIGHT_FILES:  # one that is there but no file was read as "no weights"
        found = directory / name
        if (found.exists() or found.is_symlink()) and not found.is_file():
            raise InputFileError(f"{found}: not a regular file; the weights are a file")
    weights = next((f for f in WEIGHT_FILES if (directory / f).is_file()), None)
    return _Source(model_type, data, None, directory, weights, path)


# The files a model folder holds besides config.json: given as MODEL, they were read as a config
# ("cannot read (UnicodeDecodeError …)").
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".h5", ".msgpack")


def _check_config_file(path: Path) -> None:
    """A file given as MODEL is a config (JSON): a weight file is named as one, with its
    folder, the MODEL it belongs to."""
    if path.suffix in _WEIGHT_SUFFIXES and path.is_file():
        raise InputFileError(
            f"{path}: a weight file, not a config.json; MODEL is a built-in name, a "
            f"transformers directory or its config.json (this file's folder: {path.parent})"
        )


def weight_file(name_or_path: str) -> str | None:
    """The weight file `build` would load for `name_or_path` (a preset: None; a folder or its
    config.json: model.safetensors, …, or None when it has none).

        weight_file("ckpt/")   # "model.safetensors"
    """
    return _resolve(name_or_path).weights


def _read_config(
    path: Path, limit: int = MAX_CONFIG_BYTES, why: str = CONFIG_LIMIT
) -> dict[str, Any]:
    """A config's JSON object, strictly: a regular file of at most `limit` bytes (`why` names
    the limit), valid JSON, not nested too deeply, no key twice in any object, no NaN or
    infinity anywhere in it.

        _read_config(Path("m/config.json"))   # {"model_type": "bert", …}
    """
    text = read_input(path, limit, why=why)
    try:
        # A key twice: transformers builds the last value while a reader of the file sees the
        # first (twentieth round: "hidden_act" "gelu" then "relu" built a ReLU model).
        data = json_loads(text, object_pairs_hook=unique_keys)
    except TooManyDigits as exc:  # valid JSON: a number no field takes
        raise InputFileError(f"{path}: {exc}") from None
    except ValueError as exc:
        raise InputFileError(f"{path}: not valid JSON ({exc})") from None
    except RecursionError:
        raise InputFileError(f"{path}: nested too deeply") from None
    except MemoryError:
        raise InputFileError(out_of_memory(str(path), text)) from None
    if not isinstance(data, dict):
        raise InputFileError(f"{path}: a config must be a JSON object")
    if (found := _non_finite(data)) is not None:
        # Python's json reads NaN, Infinity and 1e999 as floats: a layer_norm_eps of NaN
        # built a model whose every loss was NaN, blamed on the learning rate.
        where, value = found
        raise InputFileError(f"{path}: {where} is {value}; a config value is a finite number")
    return data


def _non_finite(data: dict[str, Any]) -> tuple[str, float] | None:
    """The first non-finite float in `data`, nested too, with its key path, or None:

    _non_finite({"rope_scaling": {"factor": inf}})   # ("rope_scaling.factor", inf)

    Iterative: a config nested as deep as json reads would exhaust Python's recursion."""
    # A stack, pushed in reverse: the first in the file's order is the one named.
    pending: list[tuple[str, Any]] = [(str(key), value) for key, value in data.items()][::-1]
    while pending:
        where, value = pending.pop()
        if isinstance(value, float) and not math.isfinite(value):
            return where, value
        if isinstance(value, dict):
            pending += [(f"{where}.{key}", item) for key, item in value.items()][::-1]
        elif isinstance(value, list):
            pending += [(f"{where}[{i}]", item) for i, item in enumerate(value)][::-1]
    return None


def _generation_config(source: _Source, config: Any) -> Any:
    """The model folder's generation_config.json as the GenerationConfig transformers would
    make of it, or None without one (transformers then derives one from config.json):

        _generation_config(source, config)   # GenerationConfig {"max_length": 50, …}

    Found by the nineteenth round: `from_pretrained` read the file itself, with none of
    config.json's checks (600 MB decoded whole, NaN, max_length -5 and eos ids beyond the
    vocabulary kept and exported; a list, or JSON nested too deeply, blamed on config.json or
    the weights; '{not json', a directory or a FIFO dropped without a word). It is held to
    config.json's rules (`_read_config`, with a limit of its own; `generation_value_problem`)
    whatever the task, so one folder is refused or not by every command. `_instantiate` gives
    it to the model, so transformers never reads the file."""
    if source.directory is None:
        return None
    path = source.directory / GENERATION_CONFIG
    if not (path.exists() or path.is_symlink()):  # a dangling link is refused as no file
        _check_config_generation(source)
        return None
    data = _read_config(path, MAX_GENERATION_CONFIG_BYTES, GENERATION_CONFIG_LIMIT)
    vocab = getattr(config, "vocab_size", None)
    if (why := generation_value_problem(data, vocab, source.family)) is not None:
        raise InputFileError(f"{path}: {why}")
    generation = _read_generation(data, path)
    # As GenerationConfig.from_pretrained marks what it read: saved as found (a setting
    # transformers only warns about is not an error at export).
    generation._original_object_hash = hash(generation)
    return generation


def _check_config_generation(source: _Source) -> None:
    """config.json's own generation settings pass transformers' validation, as those of a
    generation_config.json do (`_read_generation`): without that file transformers lifts them
    into the model's generation config (`GenerationConfig.from_model_config`). Their values
    were held to generation_config.json's table with config.json's (`_make_config`). Found by
    the twenty-third round: early_stopping 'zorp' was blamed on model.safetensors.

        _check_config_generation(source)
        # InputFileError: m/config.json: its generation settings are not ones transformers
        # reads (`early_stopping` must be a boolean or 'never', but is zorp.)
    """
    fields = generation_fields()
    lifted = {key: value for key, value in source.config.items() if key in fields}
    if lifted:
        what = "its generation settings are not ones transformers reads"
        _read_generation(lifted, source.config_file or source.directory, what)


# What `_read_generation` says of a generation_config.json transformers' validation refuses.
_NOT_READ = "not a generation config transformers reads"


def _read_generation(data: dict[str, Any], path: Path | None, what: str = _NOT_READ) -> Any:
    """The GenerationConfig transformers makes of `data`, or one line naming `path`, `what`
    is wrong, and transformers' reason when its own validation refuses it."""
    from transformers import GenerationConfig

    try:
        return GenerationConfig.from_dict(data)
    except Exception as exc:  # transformers' own validation: ValueError, AttributeError, …
        raise InputFileError(f"{path}: {what} ({_first(exc)})") from None


def _choose_init(source: _Source, init: str | None, name: str) -> str:
    if init not in (None, "pretrained", "random"):
        raise BadArgumentError(f"init must be pretrained or random, got {quoted(init)}")
    if source.directory is None:
        if init == "pretrained":
            raise BadArgumentError(
                f"{quoted(name)} is a built-in shape without weights; pretrained weights come from "
                "a directory with model.safetensors or pytorch_model.bin"
            )
        return "random"
    if source.weights is None and init != "random":
        raise InputFileError(
            f"{source.directory}: a config without weights (no model.safetensors or "
            "pytorch_model.bin); pass --init random to train from random weights"
        )
    return init or "pretrained"


def _choose_task(source: _Source, family: Family, task: str | None) -> str:
    if task is None:
        if family.kind != "decoder":
            return "classification"
        # A decoder saved as a classifier stays one; any other decoder is a language model.
        saved_as = source.config.get("architectures")
        # Not a list of names: refused naming the key once the config is read (`_check_values`).
        names = saved_as if isinstance(saved_as, list) else []
        classifier = any(str(a).endswith("ForSequenceClassification") for a in names)
        return "classification" if classifier else "causal-lm"
    if task not in family.models:
        raise BadArgumentError(
            f"task {quoted(task)} is not available for {source.family} "
            f"(available: {', '.join(family.models)}; causal-lm needs a decoder: "
            f"{', '.join(n for n, f in FAMILIES.items() if f.kind == 'decoder')})"
        )
    return task


def _make_config(
    source: _Source,
    family: Family,
    name: str,
    dropout: float | None,
    task: str,
    num_labels: int | None,
    order: list[str] | None = None,
) -> Any:
    config_dict = dict(source.config)
    # The file's own keys, types and values, before transformers reads them (no key its class
    # cannot take: a read-only property made it log its whole config; it builds an id2label
    # of num_labels names, and keeps a RoPE scaling under rope_parameters whatever the file
    # called it). transformers remakes label2id from id2label (or num_labels) unread: the
    # file's is checked when its labels are the model's (a run's data of another label count
    # writes both anew).
    its_labels = num_labels in (None, label_count(config_dict))
    if (why := config_value_problem(config_dict, source.family, labels=its_labels)) is not None:
        raise InputFileError(f"{name}: {why}")
    if dropout is not None:
        config_dict.update(dict.fromkeys(family.dropout, dropout))
    try:
        config = transformers_config(source.family, config_dict)
    except Exception as exc:  # transformers' strict fields raise their own error classes
        raise InputFileError(f"{name}: invalid {source.family} config ({_first(exc)})") from None
    if num_labels is not None:
        if task == "causal-lm":
            # Only `pipeplan profile --num-labels` asks (a run sizes a head for its labels).
            raise BadArgumentError(
                "--num-labels applies to classification, not causal-lm: give --task classification"
            )
        config.num_labels = num_labels  # also resizes id2label/label2id
    if order is not None:  # the data's names, as the exported model's id2label
        config.id2label = dict(enumerate(order))
        config.label2id = {label: i for i, label in enumerate(order)}
    _check_config(config, family, source.family, name, task)
    return config


def _check_config(config: Any, family: Family, family_name: str, name: str, task: str) -> None:
    blocks = config.num_hidden_layers
    if isinstance(blocks, bool) or not isinstance(blocks, int) or not 1 <= blocks <= MAX_BLOCKS:
        raise InputFileError(
            f"{name}: num_hidden_layers is {quoted(blocks)}; a model has 1..{MAX_BLOCKS} blocks"
        )
    if family.kind == "image" and not (
        isinstance(config.patch_size, int) and 1 <= config.patch_size <= config.image_size
    ):
        raise InputFileError(f"{name}: patch_size must be an integer in 1..image_size")
    if family.kind == "image" and not (
        isinstance(config.num_channels, int) and config.num_channels >= 1
    ):  # 0 built (with a torch warning) and then failed inside the profiler's forward
        raise InputFileError(f"{name}: num_channels must be an integer ≥ 1")
    if family.kind == "image" and config.image_size % config.patch_size:
        raise InputFileError(f"{name}: image_size must be a multiple of patch_size")
    if family.kind == "encoder" and getattr(config, "is_decoder", False):
        raise InputFileError(f"{name}: is_decoder is set; only encoders are supported")
    if getattr(config, "add_cross_attention", False):
        raise InputFileError(
            f"{name}: add_cross_attention is set; cross-attention is not supported"
        )
    _check_sizes(config, family, family_name, name)
    _check_values(config, family_name, name, task)
    if family.kind != "image" and config.pad_token_id is not None:
        _check_pad_token(config, name)  # RoBERTa numbers positions from it
    if config.num_labels < 1:
        raise InputFileError(f"{name}: needs num_labels ≥ 1")
    if family.kind == "decoder" and task == "classification":
        if config.pad_token_id is None:
            raise InputFileError(
                f"{name}: {family_name} classification needs pad_token_id in the config "
                "(transformers pools the last token that is not padding): set it in "
                f"config.json to the id your tokenizer pads with{_pad_id_hint(config)}"
            )
        _check_pad_token(config, name)


# The sizes a model is built from, by their generic names (a config's attribute_map gives
# each family's own key) or their family's (None where a family derives it: GPT-2's n_inner).
SIZE_FIELDS = ("hidden_size", "num_attention_heads", "intermediate_size", "n_inner")
SIZE_FIELDS += ("hidden_dim", "embedding_size", "num_key_value_heads", "head_dim")
# Checked for every family whose config has the key (the seventeenth round found RoBERTa's and
# ELECTRA's type_vocab_size 0 a traceback, BERT's refused; GPT-2's n_positions 0 was
# "sequence length 16 is outside 1..0").
SIZE_FIELDS += ("type_vocab_size", "max_position_embeddings")


def _check_sizes(config: Any, family: Family, family_name: str, name: str) -> None:
    """Every size an integer ≥ 1 and the heads dividing the width: 0 divided by zero while
    the model was built, and n_inner 0 built a model whose first forward failed in a
    traceback. A text model's vocabulary leaves a token to draw example inputs from."""

    def key(size: str) -> str:
        return config.attribute_map.get(size, size)

    for size in SIZE_FIELDS:
        value = getattr(config, size, None)
        optional = size in ("n_inner", "num_key_value_heads", "head_dim")
        if value is None and (optional or not hasattr(config, size)):
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InputFileError(
                f"{name}: {key(size)} is {quoted(value)}; a size is an integer ≥ 1"
            )
    width, heads = config.hidden_size, config.num_attention_heads
    if getattr(config, "head_dim", None) is None and width % heads:
        raise InputFileError(
            f"{name}: {key('hidden_size')} {width} is not a multiple of "
            f"{key('num_attention_heads')} {heads}"
        )
    groups = getattr(config, "num_key_value_heads", None)
    if groups is not None and heads % groups:
        raise InputFileError(
            f"{name}: num_attention_heads {heads} is not a multiple of num_key_value_heads {groups}"
        )
    if family.kind == "image":
        return
    vocab = config.vocab_size
    low = _first_example_token(family_name)
    if isinstance(vocab, bool) or not isinstance(vocab, int) or vocab < low + 2:
        raise InputFileError(
            f"{name}: vocab_size is {quoted(vocab)}; a vocabulary holds at least {low + 2} tokens "
            f"(ids 0..{low - 1} are reserved and one may be padding)"
        )


def _check_values(config: Any, family_name: str, name: str, task: str) -> None:
    """The config's other numbers in their ranges and its labels one mapping: a negative or
    zero norm epsilon, a dropout outside [0, 1), a negative initializer_range were accepted
    (a dropout of 2.0 was then blamed on the weights); a problem_type other than the
    single-label classification pipeplan trains, an architecture of another family, and
    id2label / label2id that do not invert each other were kept as written.

        _check_values(BertConfig(layer_norm_eps=0.0), "bert", "m", "classification")
        # InputFileError: m: layer_norm_eps is 0.0; a norm's epsilon is a number in [1e-30, 1]
    """

    def refuse(why: str) -> None:
        raise InputFileError(f"{name}: {why}")

    # The dictionary's own numbers: the very checks a profile's config passes.
    if (why := config_value_problem(config.to_dict(), family_name)) is not None:
        refuse(why)
    for key in ACTIVATION_KEYS:
        value = getattr(config, key, None)
        if isinstance(value, str) and value not in _activations():
            refuse(f"{key} is {quoted(value)}; not an activation transformers knows")
    if (why := problem_type_problem(config.to_dict(), task)) is not None:
        refuse(why)  # a profile's config is held to it too
    if (other := _other_architecture(config.architectures, family_name)) is not None:
        refuse(other)
    ids = sorted(config.id2label)
    if ids != list(range(len(ids))):
        refuse(f"id2label has ids {quoted(ids, 40)}; a classifier's ids are 0..{len(ids) - 1}")
    label2id = getattr(config, "label2id", None) or {}
    if label2id and {str(i): str(n) for n, i in label2id.items()} != {
        str(i): str(n) for i, n in config.id2label.items()
    }:
        refuse("label2id is not the inverse of id2label")


def _other_architecture(architectures: Any, family_name: str) -> str | None:
    """Why config.json's architectures do not name a transformers class of this family, or
    None: a class of another family (BertForMaskedLM in a ViT), and since the nineteenth round
    one of no family (GPT2Zorp, which only shared the prefix) or not a class name at all.

        _other_architecture(["GPT2Zorp"], "gpt2")   # "architectures names 'GPT2Zorp', …"
    """
    import transformers

    if architectures is None:
        return None
    if not isinstance(architectures, list) or not all(isinstance(a, str) for a in architectures):
        return f"architectures is {quoted(architectures)}; a list of transformers class names"
    config_class = FAMILIES[family_name].config_class
    prefix = config_class.removesuffix("Config")
    for name in architectures:
        # Looked up only under the family's prefix: the name is the file's, not one to import.
        try:
            known = getattr(transformers, name, None) if name.startswith(prefix) else None
        except Exception as exc:  # a lazy class whose backend is missing: not one pipeplan builds
            if (failure := memory_failure(exc)) is not None:  # one it could not load
                raise failure from None
            known = None
        if getattr(getattr(known, "config_class", None), "__name__", None) != config_class:
            return f"architectures names {quoted(name)}, not a {prefix} model class of transformers"
    return None


# The keys naming an activation function (BERT's, GPT-2's, DistilBERT's, Gemma-style).
ACTIVATION_KEYS = ("hidden_act", "activation_function", "activation", "hidden_activation")


def _activations() -> Any:
    from transformers.activations import ACT2FN

    return ACT2FN


def _first_example_token(family_name: str) -> int:
    """The lowest token id example inputs are drawn from: BERT pads with 0; RoBERTa also
    reserves 1 and 2."""
    return 3 if family_name == "roberta" else 1


def pools_by_pad_id(family: Family, task: str) -> bool:
    """Whether the model pools where transformers finds the rightmost token whose id is not
    pad_token_id (a decoder classifier: GPT-2, Llama), which only the ids show: such a model
    always carries the padding-mask channel (`mask_channel`), padded data or not, so that the
    head pools that token, not the last position. Found by the thirtieth round: on unpadded
    data whose rows end in a real pad id (pad = eos) the layers pooled the last position, and
    the exported model another one.

        pools_by_pad_id(FAMILIES["gpt2"], "classification")   # True
    """
    return family.kind == "decoder" and task == "classification"


def refuse_no_padding_mask(name_or_path: str, task: Task | None) -> None:
    """`pipeplan profile MODEL --no-padding-mask` for a model that cannot go without the
    padding-mask channel (a decoder classifier, `pools_by_pad_id`) is refused: its head finds
    the last real token from the mask, so `build` adds it anyway. Found by the thirty-third
    round: the flag was ignored without a word and the profile said padding_mask true."""
    source = _resolve(name_or_path)
    family = FAMILIES[source.family]
    if pools_by_pad_id(family, _choose_task(source, family, task)):
        raise BadArgumentError(
            f"--no-padding-mask: {name_or_path} is a decoder classifier, which always carries "
            "the padding mask (its head pools the last token that is not padding, found from "
            "the mask); leave the flag out"
        )


def _check_padding_mask(family: Family, config: Any, padding_mask: bool, name: str) -> None:
    if not padding_mask:
        return
    if family.kind == "image":
        # Also reached by text data (JSONL, CSV) given to an image model: name both causes.
        raise BadArgumentError(
            f"{name} is an image model: a padding mask, and text data (JSONL, CSV), need a "
            "text model"
        )
    if config.pad_token_id is None:
        # Which id to set (the sixty-second round: Llama's configs carry `pad_token_id: null`,
        # and the line did not say).
        raise InputFileError(
            f"{name}: a padding mask needs pad_token_id in the config, which has none: set it "
            f"in config.json to the id your tokenizer pads with{_pad_id_hint(config)}"
        )
    _check_pad_token(config, name)


def _pad_id_hint(config: Any) -> str:
    """Which pad_token_id to set in a config that has none, said in parentheses: its
    eos_token_id, which a decoder without a pad token commonly pads with, where that is a
    token of the vocabulary; else a token of the vocabulary, named by its range. Never an id
    `_check_pad_token` then refuses: found by the sixty-sixth round, GPT2Config's default eos
    50256 was advised beside a vocabulary of 300, and refused once set.

        _pad_id_hint(GPT2Config(vocab_size=300))
        # " (a token of its vocabulary, 0..299; its eos_token_id 50256 is outside it, …)"
    """
    vocab = config.vocab_size
    eos = getattr(config, "eos_token_id", None)
    ids = eos if isinstance(eos, list) else [eos]  # a list: generation stops at any of them
    tokens = [i for i in ids if type(i) is int and _in_vocabulary(i, vocab)]
    if tokens:
        return f" (a decoder without one commonly pads with its eos_token_id, {tokens[0]})"
    outside = ""
    if ids and all(type(i) is int for i in ids):
        outside = f"; its eos_token_id {eos} is outside it, so cannot be the pad id"
    return f" (a token of its vocabulary, 0..{vocab - 1}{outside})"


def _check_pad_token(config: Any, name: str) -> None:
    """The pad id a padding mask or a decoder's pooling reads is a token of the vocabulary: one
    outside it indexed past the embeddings inside the first forward (an IndexError)."""
    pad, vocab = config.pad_token_id, config.vocab_size
    if isinstance(pad, bool) or not isinstance(pad, int) or not 0 <= pad < vocab:
        raise InputFileError(
            f"{name}: pad_token_id {quoted(pad)} is not a token id of its vocabulary "
            f"(0..{vocab - 1})"
        )


def _input(
    family: Family, config: Any, seq_len: int | None, explicit: bool, name: str
) -> tuple[tuple[int, ...], torch.dtype]:
    if family.kind == "image":
        if explicit:
            raise BadArgumentError("--seq-len applies to text models only; images are fixed size")
        return (config.num_channels, config.image_size, config.image_size), torch.float32
    longest = _max_len(family, config)
    seq_len = seq_len or min(DEFAULT_SEQ_LEN, longest)
    if not 1 <= seq_len <= longest:
        positions = _positions(family, config)
        raise InputFileError(
            f"{name}: sequence length {seq_len} is outside 1..{longest} ({positions})"
        )
    return (seq_len,), torch.int64


def _positions(family: Family, config: Any) -> str:
    """Where a text model's longest sequence comes from, in config.json's keys. Found by the
    nineteenth round: RoBERTa's pad_token_id 62 left 3 of 66 positions, and the message named
    max_position_embeddings only."""
    key = config.attribute_map.get("max_position_embeddings", "max_position_embeddings")
    if not family.offset_positions:
        return f"{key} {config.max_position_embeddings}"
    return (
        f"{key} {config.max_position_embeddings} − (pad_token_id {config.pad_token_id} + 1): "
        "RoBERTa numbers positions from pad_token_id + 1"
    )


def _max_len(family: Family, config: Any) -> int:
    return config.max_position_embeddings - family.position_offset(config)


# --------------------------------------------------------------------------- weights


def _check_weight_shapes(source: _Source, config: Any, stored: dict[str, _Stored]) -> None:
    """The tensors that pin each size of config.json (`modelconfig.implied_shapes`) have those
    sizes in the weight files (`_stored_tensors`: safetensors headers, nothing loaded), before
    anything is built: found by the eighteenth round, vocab_size 10^9 beside weights of 128
    tokens was allocated (128 GB) and the failure blamed model.safetensors.

        _check_weight_shapes(source, config, _stored_tensors(source))
        # InputFileError: m/config.json: vocab_size is 1000000000 but model.safetensors
        # holds bert.embeddings.word_embeddings.weight of shape [128, 32] (dimension 0: 128); …
    """
    for endings, dims in implied_shapes(config.to_dict(), source.family):
        key = next((k for k in stored if any(_ends_with(k, e) for e in endings)), None)
        if key is None:
            continue  # not in the file: the loading report names what is missing
        shape, file = stored[key].shape, stored[key].file
        expected = [value for _, value in dims]
        if shape == expected:
            continue
        if len(shape) != len(expected):
            found = f"{file.name} holds {_tensor_name(key)} of shape {shape}, but its config "
            found += f"implies {expected}"
        else:
            at = next(i for i, (a, b) in enumerate(zip(shape, expected, strict=True)) if a != b)
            label, value = dims[at]
            found = f"{label} is {value} but {file.name} holds {_tensor_name(key)} of shape {shape}"
            found += f" (dimension {at}: {shape[at]})"
        raise InputFileError(
            f"{source.config_file}: {found}; a config of another model, or damaged weights"
        )


def _check_head_labels(source: _Source, family: Family, stored: dict[str, _Stored]) -> None:
    """A classifier head in the weight files has a row per label of config.json (its id2label,
    else num_labels: `label_count`), as the file says them, before a run's data sizes the
    head anew (another count there is a fresh head, warned: `_check_loaded`).

        _check_head_labels(source, FAMILIES["bert"], _stored_tensors(source))
        # InputFileError: m/config.json: num_labels is 1 but model.safetensors holds
        # classifier.weight of shape [2, 32], a row per label; …

    Found by the twenty-first round: num_labels 1 (no id2label, as transformers 5 saves it)
    beside a head of 2 rows was run and exported with 2 labels without a word: the data's
    count replaced the config's, which then matched the head."""
    config = source.config
    count = label_count(config)
    said = (
        f"id2label has {count} labels"
        if isinstance(config.get("id2label"), dict)
        else f"num_labels is {count}"
    )
    for module in family.labels:
        for key in (f"{module}.weight", f"{module}.bias"):
            tensor = stored.get(key)  # the task model's own module: never under a prefix
            if tensor is None or tensor.shape[:1] == [count]:
                continue
            raise InputFileError(
                f"{source.config_file}: {said} but {tensor.file.name} holds {key} of shape "
                f"{tensor.shape}, a row per label; a config of another model, or damaged weights"
            )


# config.json's names of the float dtypes (`modelconfig.FLOAT_DTYPES`) as weight files store them.
_STORED_AS = {"float32": "F32", "float16": "F16", "bfloat16": "BF16", "float64": "F64"}


def _check_config_dtype(source: _Source, stored: dict[str, _Stored]) -> None:
    """config.json's dtype (or torch_dtype) is the dtype every float tensor of the weights is
    stored in (headers only, no tensor read): from_pretrained(dtype="auto") loads a model in
    the config's dtype, so a config saying float16 beside float32 weights is of other weights,
    or edited. Found by the twenty-first round: accepted without a word (pipeplan loads and
    exports float32 whatever it says); by the twenty-third, a config checked against one
    tensor only: float16 weights but the first, or one shard of seven, under float32.

        _check_config_dtype(source, _stored_tensors(source))
        # InputFileError: m/config.json: dtype is 'float16' but model.safetensors holds its
        # float weights as F32; …
    """
    floats = {key: found for key, found in stored.items() if found.floating}
    for key in ("dtype", "torch_dtype"):
        value = source.config.get(key)
        expected = _STORED_AS.get(value)
        other = next((k for k, found in floats.items() if found.dtype != expected), None)
        if value is None or other is None:
            continue
        held = ", ".join(sorted({found.dtype for found in floats.values()}))
        if all(found.dtype != expected for found in floats.values()):
            found = f"{source.weights} holds its float weights as {held}"
        else:  # the first tensor of another dtype, by file and name
            tensor = floats[other]
            found = f"{tensor.file.name} holds {_tensor_name(other)} as {tensor.dtype} (its "
            found += f"float weights are {held})"
        raise InputFileError(
            f"{source.config_file}: {key} is {quoted(value)} but {found}; the dtype a config "
            "records is its weights' (a config of other weights, or edited)"
        )


def _check_tied_head(
    source: _Source, family: Family, task: str, config: Any, stored: dict[str, _Stored]
) -> None:
    """A config that ties the task model's head to the embeddings (tie_word_embeddings true,
    by config.json or its family's default) beside weights storing both, unequal, is refused:
    transformers 5 then keeps the two apart (warning), transformers 4 ties them on loading and
    drops the stored head, so the folder is one model to one reader and another to the next.
    Equal copies (what a tied model's pytorch_model.bin holds) are the tie, and load.

        _check_tied_head(source, FAMILIES["llama"], "causal-lm", config, stored)
        # InputFileError: m/config.json: tie_word_embeddings is true but model.safetensors
        # holds lm_head.weight unlike model.embed_tokens.weight; …

    Found by the twenty-fourth round: such a Llama folder was trained untied and exported
    saying tie_word_embeddings true (transformers 4 then threw the trained head away)."""
    import transformers

    if not getattr(config, "tie_word_embeddings", False):
        return  # transformers ties nothing either (`get_expanded_tied_weights_keys`)
    model_class = getattr(transformers, family.models[task])
    prefix = model_class.base_model_prefix
    for target, origin in (model_class._tied_weights_keys or {}).items():
        head, tied = _stored_key(stored, target, prefix), _stored_key(stored, origin, prefix)
        if head is None or tied is None or _same_values(stored, head, tied):
            continue  # one of them stored: transformers ties it to the other
        given = "tie_word_embeddings" in source.config  # else the family's default
        said = "true" if given else f"unset (true for {source.family})"
        raise InputFileError(
            f"{source.config_file}: tie_word_embeddings is {said} but {stored[head].file.name} "
            f"holds {_tensor_name(head)} unlike {_tensor_name(tied)}; transformers 5 keeps "
            "the stored head, 4 ties it to the embeddings on loading and drops it (set "
            f"tie_word_embeddings false to keep the head, or remove {_tensor_name(head)} to tie)"
        )


def _stored_key(stored: dict[str, _Stored], name: str, prefix: str) -> str | None:
    """The stored name of the task model's tensor `name`: as is, or with the base model's
    `prefix` added or removed (a base model's checkpoint), as from_pretrained matches them."""
    names = (name, f"{prefix}.{name}", name.removeprefix(f"{prefix}."))
    return next((key for key in names if key in stored), None)


def _same_values(stored: dict[str, _Stored], first: str, second: str) -> bool:
    """Whether two stored tensors hold the same values once loaded as float32 (pipeplan loads
    float32), as transformers' `_tied_params_are_equal` compares them after loading."""
    a, b = _load_tensor(stored[first], first), _load_tensor(stored[second], second)
    if a.shape != b.shape:
        return False
    if a.dtype != b.dtype:
        a, b = a.float(), b.float()
    return torch.equal(a, b)


def _load_tensor(found: _Stored, key: str) -> torch.Tensor:
    """One stored tensor's values, and only its: safetensors reads just that tensor, a
    pytorch_model.bin is memory-mapped (`_read_bin`)."""
    if found.file.suffix != ".safetensors":
        return _read_bin(found.file)[key]
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(found.file), framework="pt") as handle:
            return handle.get_tensor(key)
    except (OSError, SafetensorError) as exc:  # a data section cut short
        raise InputFileError(
            f"{found.file}: cannot read tensor {_tensor_name(key)} ({_first(exc)})"
        ) from None


def _ends_with(key: str, ending: str) -> bool:
    return key == ending or key.endswith(f".{ending}")


@dataclass(frozen=True)
class _Stored:
    """One tensor of a model's weight files, as stored: its dtype's name (safetensors'
    spelling: F32, I32), shape, whether that dtype is floating point, the file, and its size
    in bytes (None for a dtype torch does not know)."""

    dtype: str
    shape: list[int]
    floating: bool
    file: Path
    nbytes: int | None = None


# A shard index and the suffix of the shards it names: transformers reads a shard by its
# suffix (safetensors for .safetensors, torch.load for any other), whatever the index is.
_SHARD_SUFFIXES = {
    "model.safetensors.index.json": ".safetensors",
    "pytorch_model.bin.index.json": ".bin",
}


def _stored_tensors(source: _Source) -> dict[str, _Stored]:
    """Every tensor the source's weight files hold, by name, read before from_pretrained
    opens any of them: safetensors headers (nothing loaded), a pytorch_model.bin by
    weights-only torch.load, memory-mapped. With a shard index, each tensor is in exactly
    the shard its weight_map names (found by the nineteenth round: a tensor in two shards
    was taken from one of them without a word).

        _stored_tensors(source)["bert.pooler.dense.weight"]   # _Stored("F32", [32, 32], …)
    """
    assert source.directory is not None and source.weights is not None
    index = source.directory / source.weights
    sharded = source.weights in _SHARD_SUFFIXES
    weight_map, totals = _read_index(index) if sharded else ({}, {})
    files = sorted({source.directory / name for name in weight_map.values()}) or [index]
    stored: dict[str, _Stored] = {}
    for file in files:
        for key, found in _read_weights(file).items():
            if key in stored:
                raise InputFileError(
                    f"{index}: tensor {_tensor_name(key)} is in two shards, "
                    f"{stored[key].file.name} and {file.name}; one checkpoint holds each tensor "
                    "once"
                )
            stored[key] = found
    for key, name in weight_map.items():
        if key not in stored or stored[key].file.name != name:
            elsewhere = f" (it is in {stored[key].file.name})" if key in stored else ""
            raise InputFileError(
                f"{index}: weight_map puts tensor {_tensor_name(key)} in {name}, which does not "
                f"hold it{elsewhere}; the index is not of these shards"
            )
    if sharded:
        _check_index_covers(index, weight_map, totals, stored)
    return stored


def _check_index_covers(
    index: Path, weight_map: dict[str, str], totals: dict[str, int], stored: dict[str, _Stored]
) -> None:
    """The index names every tensor its shards hold, and its metadata's totals (when given)
    are theirs, as save_pretrained writes them: total_size their bytes, total_parameters at
    most their values (it is `num_parameters()`: a tied weight is saved once, but a persistent
    buffer is saved and not counted, so only more parameters than stored values is a lie).
    Found by
    the twentieth round: a tensor a shard holds but weight_map leaves out was loaded without a
    word, and a total_size of 1 passed (a shard swapped for one of other dtypes or shapes); by
    the twenty-third, total_parameters 5 beside 24,482 parameters passed."""
    for key, found in stored.items():
        if key not in weight_map:
            raise InputFileError(
                f"{index}: {found.file.name} holds tensor {_tensor_name(key)}, which "
                "weight_map leaves out; the index names exactly the tensors its shards hold"
            )
    sizes = [found.nbytes for found in stored.values()]
    held = {
        # None: a dtype whose size torch does not know, so no total to hold it to
        "total_size": None if None in sizes else sum(n for n in sizes if n is not None),
        "total_parameters": sum(math.prod(found.shape) for found in stored.values()),
    }
    units = {"total_size": "bytes", "total_parameters": "values"}
    for key, total in totals.items():
        wrong = total > held[key] if key == "total_parameters" else total != held[key]
        if held[key] is not None and wrong:
            raise InputFileError(
                f"{index}: metadata.{key} is {total} but its shards' tensors hold {held[key]} "
                f"{units[key]}; the index is not of these shards"
            )


def _tensor_name(name: str) -> str:
    """A tensor name as a message shows it: itself, or quoted with escapes (`errors.quoted`,
    cut visibly past 200 characters) when it holds a character `printable` refuses or is
    longer: the names inside a weight file are not held to pipeplan's rules.

        _tensor_name("bert.pooler.dense.weight")   # 'bert.pooler.dense.weight'
        _tensor_name("bert.x\x1b[31m")             # "'bert.x\\x1b[31m'"

    Found by the twenty-third round: a safetensors tensor named with ESC was printed raw in
    the error line (the terminal turned the rest red; a name can rewrite the line)."""
    try:
        printable(name)
    except ValueError:
        return quoted(name)
    return name if len(name) <= SHOWN else quoted(name)


def _read_index(index: Path) -> tuple[dict[str, str], dict[str, int]]:
    """A shard index's weight_map (tensor name → shard file name) and the metadata's totals it
    gives (`_index_totals`), read as strictly as a pipeplan file (a stated size limit; NaN, a key
    given twice or nesting past the parser's depth refused), each shard a plain file name in
    the index's folder and a regular file:

        _read_index(Path("m/model.safetensors.index.json"))
        # ({"bert.embeddings.word_embeddings.weight": "model-00001-of-00002.safetensors", …},
        #  {"total_parameters": 24482, "total_size": 97928})

    Found by the nineteenth round: shards named '../elsewhere/b.safetensors', absolute paths
    and /dev/zero were read, a shard that is a FIFO blocked open() forever (deaf to Ctrl-C),
    and a missing or empty weight_map was "cannot build the model from its config
    (KeyError: 'weight_map')"."""
    data = check_json(read_input(index, MAX_INDEX_BYTES, why=INDEX_LIMIT), str(index))
    if not isinstance(data, dict):
        raise InputFileError(f"{index}: a shard index is a JSON object")
    totals = _index_totals(index, data.get("metadata", _MISSING))
    weight_map = data.get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        what = "missing" if "weight_map" not in data else f"{_json_kind(weight_map)}"
        raise InputFileError(
            f"{index}: weight_map is {what}; it maps each tensor's name to the shard holding "
            "it (a non-empty object)"
        )
    suffix = _SHARD_SUFFIXES[index.name]
    for key, name in weight_map.items():
        _check_index_name(index, key, "a tensor name")
        if not _plain_file_name(name, suffix):
            shown = repr(name) if isinstance(name, str) else _json_kind(name)
            raise InputFileError(
                f"{index}: weight_map[{quoted(key)}] is {shown}; a shard is a file name ending in "
                f"{suffix} in the model's folder (no folder, no '..')"
            )
        _check_index_name(index, name, f"weight_map[{key!r}], a shard's name,")
    for name in sorted(set(weight_map.values())):
        _check_shard(index, name)
    return weight_map, totals


# metadata absent from an index (None is the JSON null, refused as not an object).
_MISSING = object()


def _index_totals(index: Path, metadata: Any) -> dict[str, int]:
    """An index's metadata.total_size and total_parameters, those given, checked: metadata is
    an object (transformers reads it and adds keys to it: a missing or other one was "cannot
    build the model from its config (KeyError: 'metadata')"), both totals integers ≥ 0, and
    its every key and text printable (another tool's keys, mergekit_version and the like, are
    kept unread). Found by the twentieth round: total_size "abc" and -5 were ignored; by the
    twenty-third, a key holding ESC and the codes of a terminal passed.

        _index_totals(index, {"total_size": 97928})   # {"total_size": 97928}
    """
    if not isinstance(metadata, dict):
        what = "missing" if metadata is _MISSING else _json_kind(metadata)
        raise InputFileError(
            f"{index}: metadata is {what}; a shard index holds a metadata object "
            '({"total_size": the bytes of its tensors}), as save_pretrained writes it'
        )
    _check_metadata_text(index, metadata)
    totals = {}
    for key in ("total_size", "total_parameters"):
        value = metadata.get(key)
        if value is not None and not (type(value) is int and value >= 0):
            raise InputFileError(f"{index}: metadata.{key} is {_json_kind(value)}; an integer ≥ 0")
        if value is not None:
            totals[key] = value
    return totals


def _check_metadata_text(index: Path, metadata: dict[str, Any]) -> None:
    """Every key and text in an index's metadata, nested too, is printable (`printable`):
    `_check_metadata_text(index, {"foo": "x\x1b[2J"})` → InputFileError naming metadata.foo."""
    pending: list[tuple[str, Any]] = [("metadata", metadata)]
    while pending:  # a stack, not recursion: JSON may nest as deep as the parser reads
        where, value = pending.pop()
        texts = [(where, value)] if isinstance(value, str) else []
        if isinstance(value, dict):
            texts += [(f"{where} key", key) for key in value]
            pending += [(f"{where}.{key}", item) for key, item in value.items()]
        elif isinstance(value, list):
            pending += [(f"{where}[{i}]", item) for i, item in enumerate(value)]
        for what, text in texts:
            try:
                printable(text)
            except ValueError as exc:
                raise InputFileError(f"{index}: {excerpt(what)} {quoted(text)} {exc}") from None


def _check_index_name(index: Path, name: str, what: str) -> None:
    """A name in an index is held to the rules of every name pipeplan prints (`printable`):
    found by the twentieth round, a shard named with a newline and U+202E was read (a name
    that prints as another one, or forges a line of a message)."""
    try:
        printable(name)
    except ValueError as exc:
        raise InputFileError(f"{index}: {what} {name!r} {exc}") from None


def _json_kind(value: Any) -> str:
    """How a JSON value is named in a message: `_json_kind({})` → 'an empty object'."""
    if isinstance(value, dict):
        return "an empty object" if not value else "an object"
    if isinstance(value, list):
        return "a list"
    return "null" if value is None else repr(value)


def _plain_file_name(name: Any, suffix: str) -> bool:
    """`_plain_file_name("model-00001-of-00002.safetensors", ".safetensors")` → True; a path
    ("../b.safetensors", "/dev/zero", "sub/a.safetensors"), another suffix or a NUL → False."""
    return (
        isinstance(name, str)
        and name.endswith(suffix)
        and name == Path(name).name
        and name not in (".", "..")
        and "\0" not in name
    )


def _check_shard(index: Path, name: str) -> None:
    """A shard the index names is there and a regular file (a link to one is, as in the
    Hugging Face cache): a FIFO blocks open(), and in safetensors' Rust code no signal ends
    the wait; a device or folder is no weights."""
    shard = index.parent / name
    if not (shard.exists() or shard.is_symlink()):
        raise InputFileError(f"{shard}: no such file ({index.name} names it as a shard)")
    if not shard.is_file():
        raise InputFileError(
            f"{shard}: not a regular file; the weights are a file ({index.name} names it "
            "as a shard)"
        )


def _read_weights(file: Path) -> dict[str, _Stored]:
    """Each tensor of one weight file: a safetensors file's header, or a pytorch_model.bin's
    state dict (read by `_read_bin`); nothing but the names, dtypes and shapes is kept."""
    if file.suffix == ".safetensors":
        return {
            key: _Stored(dtype, shape, dtype in _FLOAT_DTYPES, file, _stored_bytes(dtype, shape))
            for key, (dtype, shape) in _read_header(file).items()
        }
    return {
        key: _Stored(_dtype_name(t.dtype), list(t.shape), t.is_floating_point(), file, t.nbytes)
        for key, t in _read_bin(file).items()
    }


def _read_header(file: Path) -> dict[str, tuple[str, list[int]]]:
    """Each tensor of a safetensors file: (dtype, shape), from its header; nothing loaded."""
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(file), framework="pt") as handle:
            slices = {k: handle.get_slice(k) for k in handle.keys()}  # noqa: SIM118 (a safe_open, not a dict)
            return {k: (s.get_dtype(), list(s.get_shape())) for k, s in slices.items()}
    except (OSError, SafetensorError) as exc:
        raise InputFileError(f"{file}: cannot read its header ({_first(exc)})") from None


def _read_bin(file: Path) -> dict[str, torch.Tensor]:
    """A pytorch_model.bin's state dict as from_pretrained reads it (torch.load with
    weights_only: a pickle of other objects is refused, not run), memory-mapped when the file
    is a zip archive (torch ≥ 1.6 writes one), so no tensor's data is read."""
    import zipfile

    try:
        state = torch.load(
            file, map_location="cpu", weights_only=True, mmap=zipfile.is_zipfile(file)
        )
    except pickle.UnpicklingError:  # the weights-only loader refused it, unexecuted
        raise InputFileError(
            f"{file}: not loadable as plain tensors (a pickle of other objects: it was not "
            "run); save the weights with safetensors"
        ) from None
    except MemoryError:
        raise InputFileError(
            f"{file}: out of memory loading it; run pipeplan with more memory"
        ) from None
    except Exception as exc:  # a damaged archive or pickle raises what its reader raises
        raise InputFileError(f"{file}: cannot load ({_first(exc)})") from None
    if not isinstance(state, dict):
        raise InputFileError(
            f"{file}: a pickled {type(state).__name__}, not a state dict (tensor names → tensors)"
        )
    for key, value in state.items():
        if not (isinstance(key, str) and isinstance(value, torch.Tensor)):
            raise InputFileError(
                f"{file}: {quoted(key)} is {type(value).__name__}; a state dict maps tensor names "
                "to tensors"
            )
    return state


def _stored_bytes(dtype: str, shape: list[int]) -> int | None:
    """A safetensors tensor's bytes, as save_pretrained sums them into an index's total_size:
    `_stored_bytes("F32", [32, 32])` → 4096; None for a dtype safetensors' table lacks."""
    from safetensors.torch import _TYPES  # safetensors' own table, name → torch dtype

    torch_dtype = _TYPES.get(dtype)
    return None if torch_dtype is None else math.prod(shape) * torch_dtype.itemsize


def _dtype_name(dtype: torch.dtype) -> str:
    """A torch dtype in safetensors' spelling: `_dtype_name(torch.int32)` → 'I32'."""
    from safetensors.torch import _TYPES  # safetensors' own table, name → torch dtype

    names = {torch_dtype: name for name, torch_dtype in _TYPES.items()}
    return names.get(dtype, str(dtype).removeprefix("torch."))


def _check_model_size(source: _Source, config: Any, task: str, name: str) -> None:
    """The parameters config.json asks for (`modelconfig.parameter_terms`, from its sizes) at
    most `MAX_PARAMETERS` and, in float32, at most this machine's memory: checked before torch
    allocates (the eighteenth round's hidden_size 2^20 asked for 4 TB).

        _check_model_size(source, config, "classification", "m")
        # InputFileError: m/config.json: hidden_size 1048576 makes a model of … parameters
        # (… GiB in float32); more than this process may use (23.4 GiB: its physical memory)
    """
    limit, bound = MAX_PARAMETERS, f"a model has at most {MAX_PARAMETERS:,} parameters"
    memory = memory_limit()
    if memory is not None and memory[0] // PARAMETER_BYTES < limit:
        limit = memory[0] // PARAMETER_BYTES
        bound = f"more than this process may use ({memory[0] / 2**30:,.1f} GiB: {memory[1]})"
    why = size_problem(config.to_dict(), source.family, task, limit, bound)
    if why is not None:
        raise InputFileError(f"{source.config_file or name}: {why}")


# Where Linux states a container's memory limit (cgroup v2, v1).
_CGROUP_LIMITS = ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")


# What counts against each limit already, by the limit's cgroup file: the cgroup's usage.
_CGROUP_USAGE = {
    "memory.max": "/sys/fs/cgroup/memory.current",
    "memory.limit_in_bytes": "/sys/fs/cgroup/memory/memory.usage_in_bytes",
}


def memory_limit() -> tuple[int, str] | None:
    """The most memory this process may use, in bytes, and what sets it: the least of the
    physical memory, `ulimit -v` / `-d` and the cgroup's limit (None when none is known).

        memory_limit()   # (25186529280, "its physical memory")
    """
    found = [(limit, what) for limit, _, what in memory_limits()]
    return min(found) if found else None


def memory_left(ranks: int = 1) -> tuple[int, int, str] | None:
    """The memory this process may still take, in bytes, with the limit that leaves the least
    and what sets it: each limit of `memory_limit` less what already counts against it (the
    address space for `ulimit -v`, the data segment for `ulimit -d`, the cgroup's usage for
    its limit, the memory the system has available for the physical memory). None when no
    limit is known. `ranks`: the processes of this host that will share what is left, each
    taking as much (a run's ranks): the physical memory's and the cgroup's part is theirs
    together, a `ulimit` each one's own (every process has its own address space).

        memory_left()   # (20401094656, 25186529280, "its physical memory")
        memory_left(2)  # (10200547328, 25186529280, "its physical memory, shared by 2 ranks")
    """
    found = []
    for limit, left, what in memory_limits():
        if ranks > 1 and not what.startswith("ulimit"):
            left, what = left // ranks, f"{what}, shared by {ranks} ranks"
        found.append((max(left, 0), limit, what))
    return min(found) if found else None


def memory_words(left: tuple[int, int, str], who: str = "this process") -> str:
    """What a refusal for want of memory says of `memory_left`'s answer, the same for every
    such refusal (text data's token ids, a data set's sample indices):

        memory_words(memory_left())              # "the 3.1 GiB this process has left of
                                                 #  4.0 GiB (ulimit -v)"
        memory_words(memory_left(2), "each rank")
    """
    return f"the {size_words(left[0])} {who} has left of {size_words(left[1])} ({left[2]})"


def size_words(bytes_: int) -> str:
    """`size_words(3 << 29)` → "1.5 GiB"; `size_words(5 << 20)` → "5 MiB"; `size_words(12_160)`
    → "12 KiB" (under a MiB, rounded up: never "0 MiB" for rows that take some)."""
    if bytes_ >= 1 << 30:
        return f"{bytes_ / 2**30:,.1f} GiB"
    if bytes_ >= 1 << 20:
        return f"{bytes_ / 2**20:,.0f} MiB"
    return f"{math.ceil(bytes_ / 2**10):,} KiB"


def memory_limits() -> list[tuple[int, int, str]]:
    """(limit, left of it, what sets it) for each memory limit this process is under: its
    physical memory and a cgroup's limit, which the processes of this host share, and
    `ulimit -v` / `-d`, each process's own ("ulimit …": a rank started here inherits it).

        memory_limits()   # [(25186529280, 20401094656, "its physical memory"),
                          #  (4096000000, 1811939328, "ulimit -v")]
    """
    import resource

    found = []
    with contextlib.suppress(ValueError, OSError):
        physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        available = _kib_field("/proc/meminfo", "MemAvailable")
        left = physical if available is None else available
        found.append((physical, left, "its physical memory"))
    for kind, what, used in (
        (resource.RLIMIT_AS, "ulimit -v", "VmSize"),
        (resource.RLIMIT_DATA, "ulimit -d", "VmData"),
    ):
        soft, _ = resource.getrlimit(kind)
        if soft != resource.RLIM_INFINITY:
            found.append((soft, soft - (_kib_field("/proc/self/status", used) or 0), what))
    for path in _CGROUP_LIMITS:
        with contextlib.suppress(ValueError, OSError):
            limit = int(Path(path).read_text())
            usage = Path(_CGROUP_USAGE[Path(path).name])
            used = int(usage.read_text()) if usage.is_file() else 0
            found.append((limit, limit - used, f"the cgroup's {Path(path).name}"))
    return found


def _kib_field(path: str, key: str) -> int | None:
    """A "Key:   123 kB" line's value in bytes, of /proc/meminfo or /proc/self/status (None
    when the file or the line is not there, off Linux)."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path(path).read_text().splitlines():
            name, _, value = line.partition(":")
            if name == key:
                return int(value.split()[0]) * 1024
    return None


def _instantiate(
    family: Family,
    task: str,
    config: Any,
    source: _Source,
    init: str,
    stored: dict[str, _Stored] | None,
    generation: Any = None,
) -> tuple[nn.Module, dict[str, Any] | None]:
    """The transformers model with random weights, or loaded from the source directory
    (offline, float32) together with its loading report; a model that generates gets the
    folder's checked `generation` config (`_generation_config`), either way."""
    import transformers
    from safetensors import SafetensorError

    cls = getattr(transformers, family.models[task])
    if init == "random":
        model = cls(config)  # a size beyond memory was refused first (`_check_model_size`)
        _check_computed(model, source)
        return _with_generation(model, generation), None
    # Given the checked generation config, from_pretrained does not read the file itself.
    given = {} if generation is None else {"generation_config": generation}
    try:
        with quiet_transformers():
            model, loading = cls.from_pretrained(
                source.directory,
                config=config,
                local_files_only=True,
                output_loading_info=True,
                ignore_mismatched_sizes=True,  # a head for other num_labels: fresh, warned
                dtype=torch.float32,
                **given,
            )
    except pickle.UnpicklingError:  # torch's weights-only loader refused it, unexecuted
        raise InputFileError(
            f"{source.directory}: {source.weights} is not loadable as plain tensors (a pickle "
            "of other objects: it was not run); save the weights with safetensors"
        ) from None
    # SafetensorError is none of the others: a truncated model.safetensors raises it.
    except (OSError, ValueError, RuntimeError, SafetensorError) as exc:
        raise InputFileError(
            f"{source.directory}: cannot load {source.weights} ({_first(exc)})"
        ) from None
    _check_computed(model, source)
    _check_stored_dtypes(model, stored or {})
    _check_finite(model, source)
    # from_pretrained returns eval mode; a build is in train mode.
    return _with_generation(model.train(), generation), loading


def _with_generation(model: nn.Module, generation: Any) -> nn.Module:
    """`model` with the folder's generation config when it has one and the model generates:
    from_pretrained keeps a copy (marked modified: an export would refuse a setting
    transformers only warns about), a random build derives one from config.json (the run's
    export and `pipeplan export`, a random build, would differ)."""
    if generation is not None and model.can_generate():
        model.generation_config = generation
    return model


# A safetensors dtype's class: from_pretrained casts whatever it finds to the parameter's dtype,
# so float weights stored as I32 became their bit patterns (values near 1e9) and trained.
_FLOAT_DTYPES = ("F64", "F32", "F16", "BF16", "F8_E4M3", "F8_E5M2", "F8_E8M0", "F4", "F6_E2M3")
_FLOAT_DTYPES += ("F8_E4M3FNUZ", "F8_E5M2FNUZ")  # in safetensors' table, so in `_dtype_name`'s


def _check_stored_dtypes(model: nn.Module, stored: dict[str, _Stored]) -> None:
    """Each stored tensor (`_stored_tensors`) is of the model tensor's kind it loads into,
    float for float, integer for integer (BERT's int64 position_ids stay integers), in a
    safetensors file and a pytorch_model.bin alike: from_pretrained casts int32 to float32
    without a word (found by the nineteenth round for pytorch_model.bin)."""
    tensors = dict(model.named_parameters(remove_duplicate=False))
    tensors.update(model.named_buffers(remove_duplicate=False))
    # Under the file's names too: transformers 5 renames a ViT's or DeiT's tensors as it
    # loads (`_file_key`), and a prefix lookup alone skipped every renamed one (the
    # sixty-fourth round's helpers).
    for name, tensor in list(tensors.items()):
        tensors.setdefault(_file_key(model, name), tensor)
    prefix = getattr(model, "base_model_prefix", "")
    for key, found in stored.items():
        target = next(
            (
                tensors[k]
                for k in (key, f"{prefix}.{key}", key.removeprefix(f"{prefix}."))
                if k in tensors
            ),
            None,
        )
        if target is None:  # not loaded (another head, a renamed legacy key)
            continue
        if found.floating != target.is_floating_point():
            kind = "floating" if target.is_floating_point() else "integer"
            raise InputFileError(
                f"{found.file}: tensor {_tensor_name(key)} is stored as {found.dtype} but the "
                f"model's is {kind} ({str(target.dtype).removeprefix('torch.')}); the file is "
                "damaged or of another model"
            )


def _check_computed(model: nn.Module, source: _Source) -> None:
    """No NaN or infinity in the buffers the model computes from its config and does not store
    (RoPE's inv_freq): found by the nineteenth round, a zero scaling factor or a subnormal base
    was blamed on model.safetensors, which does not hold them (and with random weights it was
    not noticed). `modelconfig.rope_problem` refuses the parameters known to cause it first."""
    stored = model.state_dict().keys()
    for name, tensor in model.named_buffers():
        if name not in stored and tensor.is_floating_point() and not torch.isfinite(tensor).all():
            raise InputFileError(
                f"{source.config_file or source.family}: the model's {name}, computed from the "
                "config (not stored in the weights), holds NaN or infinite values; a size or "
                "RoPE parameter of the config is out of range"
            )


def _check_finite(model: nn.Module, source: _Source) -> None:
    """No NaN or infinity in the loaded weights: training from them diverges at once. Only
    what the weight file holds (the state dict): a computed buffer is `_check_computed`'s."""
    stored = model.state_dict()
    for name, tensor in stored.items():
        if tensor.is_floating_point() and not torch.isfinite(tensor).all():
            raise InputFileError(
                f"{source.directory}: {source.weights} holds NaN or infinite values in "
                f"{_tensor_name(_file_key(model, name))}"
            )


def _file_key(model: nn.Module, key: str) -> str:
    """The loaded `model`'s tensor `key` as its weight file names it: transformers 5 renames
    some families' tensors as it loads and reports the model's names (a ViT or DeiT file's
    `vit.encoder.layer.3.attention.output.dense.weight` is the model's
    `vit.layers.3.attention.o_proj.weight`). Found by the sixty-fourth round: refusals named
    tensors that are not in the file. The loading's own renamings, reversed, in reverse order
    (as transformers' `revert_weight_conversion` saves); a model loaded without any, or a
    transformers without them, keeps its names.

        _file_key(vit, "vit.layers.0.mlp.fc1.weight")
        # "vit.encoder.layer.0.intermediate.dense.weight"
    """
    conversions = getattr(model, "_weight_conversions", None)
    if not conversions:
        return key
    try:
        from transformers.core_model_loading import WeightRenaming, apply_renamings
    except ImportError:  # private API: it may move
        return key
    reverse = [c.reverse_transform() for c in conversions[::-1]]
    return apply_renamings(key, [c for c in reverse if isinstance(c, WeightRenaming)])


def _check_loaded(
    loading: dict[str, Any],
    seq: LayerSequence,
    source: _Source,
    seed: int,
    other_classes: str | None = None,
) -> None:
    """Weights the checkpoint lacked in the task head (`_fresh_head`), or sized for another
    number of labels (`_label_sized`), or a head for `other_classes` (`_label_order`: redrawn
    by the build): a fresh head and one warning. Anything else lacking or misshapen, the
    pooler and final norm too, means the checkpoint is not of this model: using it would
    silently train from noise."""
    unused = [_file_key(seq.hf_model, k) for k in _unused_body_weights(loading, seq.hf_model)]
    if unused:
        raise InputFileError(
            f"{source.directory}: {source.weights} holds {len(unused)} weights of the "
            f"embeddings and blocks that the model of config.json does not have (e.g. "
            f"{', '.join(map(_tensor_name, unused[:3]))}); does config.json describe these "
            "weights' model (its number of layers)?"
        )
    _check_shapes(loading, seq, source)  # every misshapen tensor left is label-sized
    fresh = _fresh_head(seq)
    missing = set(loading.get("missing_keys", ()))
    body = sorted(k for k in missing if fresh(k) is False)
    if body:
        first = _tensor_name(_file_key(seq.hf_model, body[0]))
        raise InputFileError(
            f"{source.directory}: {source.weights} lacks {len(body)} weights outside the task "
            f"head (e.g. {first}); is it a {source.family} checkpoint of this config?"
        )
    lacking = sorted(k for k in missing if fresh(k))
    other_size = sorted({_mismatch(entry)[0] for entry in loading.get("mismatched_keys", ())})
    fresh_rows = f"the head starts from random weights (seed {seed}) with {seq.num_labels} outputs"
    if not (lacking or other_size):
        if other_classes is not None:
            log.warning(f"{source.directory}: {other_classes}; {fresh_rows}")
        return

    def names(keys: list[str]) -> str:  # as the file names them (`_file_key`)
        return ", ".join(_tensor_name(_file_key(seq.hf_model, k)) for k in keys)

    why = "; ".join(
        part
        for part in (
            lacking and f"no {names(lacking)}",
            other_size and f"{names(other_size)} sized for another number of labels",
        )
        if part
    )
    # An output projection (`Family.labels`) the checkpoint holds at its size is loaded: a
    # token classifier's classifier.* beside the pooler it lacks. Only what it lacks is then
    # fresh (the sixtieth round: "the head starts from random weights" of a loaded one).
    modules = tuple(f"{module}." for module in FAMILIES[seq.family].labels)
    kept = sorted(k for k in _tensor_owners(seq) if k.startswith(modules) and fresh(k))
    if kept and other_classes is None and not {*lacking, *other_size} & set(kept):
        log.warning(
            f"{source.directory}: the checkpoint holds part of the head for this task ({why}): "
            f"those start from random weights (seed {seed}); "
            f"{names(kept)} ({seq.num_labels} outputs) are the checkpoint's"
        )
        return
    log.warning(
        f"{source.directory}: the checkpoint has no head for this task ({why}); {fresh_rows}"
    )


def _check_shapes(loading: dict[str, Any], seq: LayerSequence, source: _Source) -> None:
    """A tensor in the file at another shape than the model's, unless it is sized for another
    number of labels (`_label_sized`): named with both shapes (the seventeenth round found it
    reported as lacking; the nineteenth, a BERT pooler of the wrong shape taken for a head of
    other labels and replaced by random weights). from_pretrained lists it in mismatched_keys
    as (key, stored shape, model's shape)."""
    for entry in sorted(loading.get("mismatched_keys", ()), key=str):
        key, stored, expected = _mismatch(entry)
        if _label_sized(seq, key, stored, expected):
            continue
        shapes = " at another shape than the model of config.json"
        if stored is not None and expected is not None:
            shapes = (
                f" of shape {list(stored)} but the model of config.json expects {list(expected)}"
            )
        raise InputFileError(
            f"{source.directory}: {source.weights} holds "
            f"{_tensor_name(_file_key(seq.hf_model, key))}{shapes}; the file is "
            "damaged or of another model"
        )


def _mismatch(entry: Any) -> tuple[str, Any, Any]:
    """A mismatched_keys entry as (key, stored shape, model's shape); shapes None where
    transformers gives the key alone (`_mismatch("a.b")` → ("a.b", None, None))."""
    if isinstance(entry, tuple) and len(entry) == 3:
        return str(entry[0]), entry[1], entry[2]
    return str(entry[0] if isinstance(entry, tuple) else entry), None, None


def _label_sized(seq: LayerSequence, key: str, stored: Any, expected: Any) -> bool:
    """Whether a tensor stored at another shape is a classifier's output projection that
    differs only in its number of labels (dimension 0): what a checkpoint for other labels
    holds (`Family.labels`). Nothing else depends on the labels."""
    if seq.task != "classification":
        return False
    if not any(key.startswith(f"{module}.") for module in FAMILIES[seq.family].labels):
        return False
    if stored is None or expected is None:
        return True  # the key alone: it is the output projection
    stored, expected = list(stored), list(expected)
    return len(stored) == len(expected) >= 1 and stored[1:] == expected[1:]


def _redraw_head(model: nn.Module, family: Family) -> None:
    """The head's output projection (`Family.labels`) drawn anew as transformers draws one it
    did not load (the model's `_init_weights`; the build seeds the generator, so every rank
    draws the same): its rows were trained for other classes than the data's (`_label_order`).

        _redraw_head(hf_model, FAMILIES["bert"])   # classifier.weight ~ N(0, 0.02), bias 0
    """
    for name in family.labels:
        module = model.get_submodule(name)
        # A new module: transformers skips parameters it marked as loaded (5.x).
        fresh = nn.Linear(module.in_features, module.out_features, bias=module.bias is not None)
        model._init_weights(fresh)
        with torch.no_grad():
            module.weight.copy_(fresh.weight)
            if module.bias is not None:
                module.bias.copy_(fresh.bias)


# The part of the base model a task checkpoint may lack and the task model builds fresh:
# BERT's pooler (a …ForMaskedLM checkpoint has none). Any other base-model weight (a final
# norm) is the body's.
FRESH_BY_DESIGN = ("pooler",)


def _fresh_head(seq: LayerSequence) -> Callable[[str], bool | None]:
    """A test of a weight the checkpoint lacks: True when it is the task head's (the task
    model's own modules: classifier, score, lm_head; or `FRESH_BY_DESIGN`), so it may start
    fresh; False when it is the body's (a layer before the head, or a base-model weight in
    the head: a final norm); None when it is no layer's (left as transformers leaves it)."""
    owner = _tensor_owners(seq)
    head = len(seq.layers) - 1
    prefix = f"{seq.hf_model.base_model_prefix}."

    def fresh(key: str) -> bool | None:
        if key not in owner:
            return None
        parts = key.removeprefix(prefix).split(".")
        task_own = not key.startswith(prefix) or any(p in FRESH_BY_DESIGN for p in parts)
        return owner[key] == head and task_own

    return fresh


# Base-model weights a pretrained checkpoint carries but a task model leaves out: RoBERTa and
# ELECTRA classifiers pool with their own head (the checkpoint's pooler goes unused); ViT's
# masked-image-modeling pretraining adds a mask token that classification never uses.
UNUSED_BY_DESIGN = ("pooler", "mask_token")


def _unused_body_weights(loading: dict[str, Any], model: Any) -> list[str]:
    """The checkpoint's weights that from_pretrained did not load (its unexpected keys) and
    that belong to the base model, the embeddings and blocks: a config of fewer layers than
    the weights (they would be dropped without a word). Another task's head (`cls.*`,
    `lm_head.*`) and a pooler the task model does not build are what fine-tuning leaves out."""
    prefix = model.base_model_prefix
    base = model.base_model
    names = {name for name, _ in base.named_children()}
    names |= {name for name, _ in base.named_parameters(recurse=False)}
    body = []
    for key in sorted(loading.get("unexpected_keys", ())):
        path = key.removeprefix(f"{prefix}.").split(".")
        if (key.startswith(f"{prefix}.") or path[0] in names) and not any(
            part in UNUSED_BY_DESIGN for part in path
        ):
            body.append(key)
    return body


def _tensor_owners(seq: LayerSequence) -> dict[str, int]:
    """transformers' parameter and buffer names → the index of the layer that holds them."""
    index: dict[int, int] = {}
    for i, layer in enumerate(seq.layers):
        for t in [*layer.parameters(), *layer.buffers()]:
            index.setdefault(id(t), i)
    named = [
        *seq.hf_model.named_parameters(remove_duplicate=False),
        *seq.hf_model.named_buffers(remove_duplicate=False),
    ]
    return {name: index[id(t)] for name, t in named if id(t) in index}


def _untie(layers: nn.ModuleList) -> bool:
    """Give every layer its own parameters; True if any were shared. GPT-2 ties its LM head to
    the token embeddings: a tie spanning layer 0 and the head would keep a frozen layer 0
    changing (its cached outputs going stale) and need a gradient exchange between the first
    and last stage. The head gets a copy with the same values: the forward is unchanged, the
    two then train apart (the config, and so the export, says tie_word_embeddings=false)."""
    owner: dict[int, int] = {}
    untied = False
    for i, layer in enumerate(layers):
        for module in layer.modules():
            for name, p in list(module.named_parameters(recurse=False)):
                if owner.setdefault(id(p), i) != i:
                    copy_ = nn.Parameter(p.detach().clone(), requires_grad=p.requires_grad)
                    setattr(module, name, copy_)
                    owner[id(copy_)] = i
                    untied = True
    return untied


# --------------------------------------------------------------------------- families

Cut = Callable[[nn.Module, str, "int | None"], nn.ModuleList]


@dataclass(frozen=True)
class Family:
    """How one transformers architecture becomes a LayerSequence."""

    kind: Literal["encoder", "decoder", "image"]
    config_class: str
    models: dict[str, str]  # task → transformers model class
    dropout: tuple[str, ...]  # the config keys `build(dropout=…)` sets
    cut: Cut
    offset_positions: bool = False  # RoBERTa numbers positions from padding_idx + 1
    # The classifier's output projection(s): their tensors alone are sized by num_labels
    # (held to transformers' models by a test), so a checkpoint for other labels gets them fresh.
    labels: tuple[str, ...] = ("classifier",)

    def position_offset(self, config: Any) -> int:
        return config.pad_token_id + 1 if self.offset_positions else 0


def _sequence(
    emb: nn.Module, blocks: nn.ModuleList, head: nn.Module, context: Callable[[], nn.Module | None]
) -> nn.ModuleList:
    """Embeddings, one Block per transformers block (each with its own context), head."""
    carries_mask = getattr(emb, "pad_token_id", None) is not None
    wrapped = (Block(b, context(), carries_mask) for b in blocks)
    return nn.ModuleList([emb, *wrapped, head])


def _encoder(
    m: nn.Module, emb: nn.Module, blocks: nn.ModuleList, parts: list[nn.Module], pad: int | None
) -> nn.ModuleList:
    # Unpadded encoder blocks take no attention arguments, as before masks could travel.
    context = (lambda: EncoderMask(m.config)) if pad is not None else (lambda: None)
    return _sequence(emb, blocks, Head(parts, carries_mask=pad is not None), context)


def _cut_bert(m: nn.Module, task: str, pad: int | None) -> nn.ModuleList:
    emb = Embeddings(m.bert.embeddings, "input_ids", pad_token_id=pad)
    return _encoder(m, emb, _blocks(m.bert), [m.bert.pooler, m.dropout, m.classifier], pad)


def _cut_roberta(m: nn.Module, task: str, pad: int | None) -> nn.ModuleList:
    emb = Embeddings(m.roberta.embeddings, "input_ids", pad_token_id=pad)
    return _encoder(m, emb, _blocks(m.roberta), [m.classifier], pad)  # pools [CLS] itself


def _cut_electra(m: nn.Module, task: str, pad: int | None) -> nn.ModuleList:
    project = getattr(m.electra, "embeddings_project", None)
    emb = Embeddings(m.electra.embeddings, "input_ids", project=project, pad_token_id=pad)
    return _encoder(m, emb, _blocks(m.electra), [m.classifier], pad)  # pools [CLS] itself


def _cut_distilbert(m: nn.Module, task: str, pad: int | None) -> nn.ModuleList:
    emb = Embeddings(m.distilbert.embeddings, "input_ids", pad_token_id=pad)
    parts = [FirstToken(), m.pre_classifier, nn.ReLU(), m.dropout, m.classifier]
    return _encoder(m, emb, m.distilbert.transformer.layer, parts, pad)


def _cut_image(base_name: str) -> Cut:
    def cut(m: nn.Module, task: str, pad: int | None) -> nn.ModuleList:
        base = getattr(m, base_name)
        head = Head([base.layernorm, m.classifier], take_first_token=True)
        emb = Embeddings(base.embeddings, "pixel_values")
        return _sequence(emb, _blocks(base), head, lambda: None)

    return cut


def _blocks(base: nn.Module) -> nn.ModuleList:
    # transformers moved the blocks from `encoder.layer` to `layers` in some 5.x models.
    return base.layers if hasattr(base, "layers") else base.encoder.layer


def _decoder_head(m: nn.Module, norm: nn.Module, task: str, pad: int | None) -> Head:
    if task == "causal-lm":
        return Head([norm, m.lm_head], carries_mask=pad is not None)
    # As transformers: score every position, then keep the last non-padding one.
    return Head([norm, m.score], carries_mask=pad is not None, pool_last_token=True)


def _cut_gpt2(m: nn.Module, task: str, pad: int | None) -> nn.ModuleList:
    base = m.transformer
    emb = Embeddings(GPT2Embeddings(base), "input_ids", pad_token_id=pad)
    head = _decoder_head(m, base.ln_f, task, pad)
    return _sequence(emb, base.h, head, lambda: CausalContext(m.config))


def _cut_llama(m: nn.Module, task: str, pad: int | None) -> nn.ModuleList:
    base = m.model
    emb = Embeddings(base.embed_tokens, "input", pad_token_id=pad)  # nn.Embedding's argument

    def context() -> CausalContext:
        # Each block its own copy of the (parameter-free) rotary module, so a layer is whole
        # wherever it runs; the config stays shared.
        rotary = copy.deepcopy(base.rotary_emb, memo={id(m.config): m.config})
        return CausalContext(m.config, rotary)

    return _sequence(emb, base.layers, _decoder_head(m, base.norm, task, pad), context)


_ENCODER_DROPOUT = ("hidden_dropout_prob", "attention_probs_dropout_prob")
# And the classification head's, where a config sets one (null: the hidden one): left as the
# file said, `--dropout 0` kept BERT's, RoBERTa's and ELECTRA's head dropping (the fifty-first
# round: 1 rank and 2 then trained other weights, 6.6 % apart).
_TEXT_ENCODER_DROPOUT = (*_ENCODER_DROPOUT, "classifier_dropout")

FAMILIES: dict[str, Family] = {
    "bert": Family(
        "encoder", "BertConfig", {"classification": "BertForSequenceClassification"},
        _TEXT_ENCODER_DROPOUT, _cut_bert,
    ),
    "roberta": Family(
        "encoder", "RobertaConfig", {"classification": "RobertaForSequenceClassification"},
        _TEXT_ENCODER_DROPOUT, _cut_roberta, offset_positions=True, labels=("classifier.out_proj",),
    ),
    "distilbert": Family(
        "encoder", "DistilBertConfig", {"classification": "DistilBertForSequenceClassification"},
        ("dropout", "attention_dropout", "seq_classif_dropout"), _cut_distilbert,
    ),
    "electra": Family(
        "encoder", "ElectraConfig", {"classification": "ElectraForSequenceClassification"},
        _TEXT_ENCODER_DROPOUT, _cut_electra, labels=("classifier.out_proj",),
    ),
    "vit": Family(
        "image", "ViTConfig", {"classification": "ViTForImageClassification"},
        _ENCODER_DROPOUT, _cut_image("vit"),
    ),
    "deit": Family(
        "image", "DeiTConfig", {"classification": "DeiTForImageClassification"},
        _ENCODER_DROPOUT, _cut_image("deit"),
    ),
    "gpt2": Family(
        "decoder", "GPT2Config",
        {"classification": "GPT2ForSequenceClassification", "causal-lm": "GPT2LMHeadModel"},
        ("resid_pdrop", "embd_pdrop", "attn_pdrop"), _cut_gpt2, labels=("score",),
    ),
    "llama": Family(
        "decoder", "LlamaConfig",
        {"classification": "LlamaForSequenceClassification", "causal-lm": "LlamaForCausalLM"},
        ("attention_dropout",), _cut_llama, labels=("score",),
    ),
}  # fmt: skip

SUPPORTED_MODEL_TYPES = tuple(FAMILIES)
