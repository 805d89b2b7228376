"""Model zoo: a built-in name or an HF `config.json` → a `LayerSequence`.

A LayerSequence is the ordered list of layers that profiler, planner and executor all index
the same way: 0 = embeddings, 1..n = encoder blocks, n+1 = head (final norm / pooler and
classifier; the loss is `LayerSequence.loss`). Every layer maps one tensor to one tensor, so a
contiguous range of layers is a valid pipeline stage. The layers share their parameters with
the transformers model they were cut from, and running them in order gives exactly that
model's forward. Models are built from configs with random weights; nothing is downloaded.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from pipeplan.errors import InputFileError, UnknownModelError

# Sequence length of the text presets and of text models built from a config path.
DEFAULT_SEQ_LEN = 128


@dataclass(frozen=True)
class Preset:
    family: str
    config: dict[str, Any]
    seq_len: int | None = None  # text models only
    description: str = ""


PRESETS: dict[str, Preset] = {
    "bert-tiny": Preset(
        "bert",
        dict(hidden_size=128, num_hidden_layers=4, num_attention_heads=2, intermediate_size=512),
        seq_len=128,
        description="BERT, 4 blocks, hidden 128 (google/bert_uncased_L-4_H-128_A-2 shape)",
    ),
    "bert-base": Preset("bert", {}, seq_len=128, description="BERT-base, 12 blocks, hidden 768"),
    "bert-large": Preset(
        "bert",
        dict(
            hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096
        ),
        seq_len=128,
        description="BERT-large, 24 blocks, hidden 1024",
    ),
    "vit-base": Preset(
        "vit",
        dict(image_size=224, patch_size=16, num_labels=1000),
        description="ViT-B/16, 224 px, 1000 classes",
    ),
    "vit-digits": Preset(
        "vit",
        dict(
            image_size=8,
            patch_size=2,
            num_channels=1,
            hidden_size=128,
            num_hidden_layers=8,
            num_attention_heads=4,
            intermediate_size=512,
            num_labels=10,
        ),
        description="small ViT for 8×8 one-channel digits, 10 classes (executor task)",
    ),
    "bert-synth": Preset(
        "bert",
        dict(
            vocab_size=512,
            hidden_size=128,
            num_hidden_layers=6,
            num_attention_heads=4,
            intermediate_size=512,
            max_position_embeddings=64,
            num_labels=2,
        ),
        seq_len=32,
        description="small BERT for the generated text-classification task (executor task)",
    ),
}

SUPPORTED_MODEL_TYPES = ("bert", "roberta", "vit")


class Embeddings(nn.Module):
    """Layer 0: token/patch embeddings (inputs → hidden states)."""

    def __init__(self, embeddings: nn.Module, input_name: str):
        super().__init__()
        self.embeddings = embeddings
        self.input_name = input_name

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        return self.embeddings(**{self.input_name: inputs})


class Block(nn.Module):
    """Layers 1..n: one encoder block, hidden states → hidden states, no attention mask
    (samples are fixed-length and unpadded)."""

    def __init__(self, block: nn.Module):
        super().__init__()
        self.block = block

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        out = self.block(hidden)
        return out[0] if isinstance(out, tuple) else out  # transformers 4.x returned a tuple


class Head(nn.Module):
    """Layer n+1: everything after the last block up to the logits."""

    def __init__(self, parts: list[nn.Module], take_first_token: bool):
        super().__init__()
        self.parts = nn.ModuleList(parts)
        self.take_first_token = take_first_token

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        for i, part in enumerate(self.parts):
            hidden = part(hidden)
            if i == 0 and self.take_first_token:
                hidden = hidden[:, 0]
        return hidden


@dataclass
class LayerSequence:
    name: str
    family: str
    config: Any  # transformers PretrainedConfig
    layers: nn.ModuleList
    input_shape: tuple[int, ...]
    input_dtype: torch.dtype

    @property
    def num_blocks(self) -> int:
        return len(self.layers) - 2

    @property
    def num_labels(self) -> int:
        return self.config.num_labels

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

    @staticmethod
    def loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits, labels)

    def example_batch(
        self, batch_size: int, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Random inputs and labels of the right shape and range (for profiling and tests)."""
        shape = (batch_size, *self.input_shape)
        if self.input_dtype == torch.int64:
            # Token 0 is padding in BERT vocabularies; RoBERTa also reserves 1 and 2.
            low = 3 if self.family == "roberta" else 1
            inputs = torch.randint(low, self.config.vocab_size, shape, generator=generator)
        else:
            inputs = torch.randn(shape, generator=generator)
        labels = torch.randint(0, self.num_labels, (batch_size,), generator=generator)
        return inputs, labels

    def config_json(self) -> dict[str, Any]:
        """The full config as plain JSON data (integer label keys become strings)."""
        return json.loads(self.config.to_json_string(use_diff=False))

    def describe(self) -> dict[str, Any]:
        """The identity recorded in profiles and plans."""
        return dict(
            name=self.name,
            family=self.family,
            config=self.config_json(),
            input_shape=list(self.input_shape),
            input_dtype=str(self.input_dtype).removeprefix("torch."),
            num_labels=self.num_labels,
        )


def known_models() -> list[str]:
    return list(PRESETS)


def build(
    name_or_path: str, *, seq_len: int | None = None, seed: int = 0, dropout: float | None = None
) -> LayerSequence:
    """Build a LayerSequence from a built-in name or a path to an HF config.json (or its
    directory). Weights are random, drawn from `seed`; `dropout` overrides the config's hidden
    and attention dropout (0 makes training deterministic, for equivalence tests)."""
    return build_with_hf(name_or_path, seq_len=seq_len, seed=seed, dropout=dropout)[0]


def build_with_hf(
    name_or_path: str, *, seq_len: int | None = None, seed: int = 0, dropout: float | None = None
) -> tuple[LayerSequence, nn.Module]:
    """Like `build`, also returning the transformers model whose parameters the layers share."""
    family, config_dict, preset_seq_len = _resolve(name_or_path)
    if dropout is not None:
        config_dict.update(hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout)
    config = _make_config(family, config_dict, name_or_path)
    if family == "vit":
        if seq_len is not None:
            raise InputFileError("--seq-len applies to text models only; ViT input is an image")
    else:
        seq_len = seq_len or preset_seq_len or min(DEFAULT_SEQ_LEN, _max_len(family, config))
        if not 1 <= seq_len <= _max_len(family, config):
            raise InputFileError(
                f"sequence length {seq_len} is outside 1..{_max_len(family, config)} "
                "(max_position_embeddings)"
            )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        hf_model, build_sequence = _FAMILIES[family](config)
    layers = build_sequence(hf_model)
    if family == "vit":
        shape = (config.num_channels, config.image_size, config.image_size)
        dtype = torch.float32
    else:
        shape, dtype = (seq_len,), torch.int64
    seq = LayerSequence(name_or_path, family, config, layers, shape, dtype)
    return seq, hf_model


def _max_len(family: str, config: Any) -> int:
    # RoBERTa offsets positions by padding_idx + 1.
    offset = config.pad_token_id + 1 if family == "roberta" else 0
    return config.max_position_embeddings - offset


def _resolve(name_or_path: str) -> tuple[str, dict[str, Any], int | None]:
    if name_or_path in PRESETS:
        preset = PRESETS[name_or_path]
        return preset.family, dict(preset.config), preset.seq_len
    path = Path(name_or_path)
    if path.is_dir():
        path = path / "config.json"
    looks_like_path = path.suffix == ".json" or "/" in name_or_path or path.exists()
    if not looks_like_path:
        raise UnknownModelError(
            f"unknown model '{name_or_path}'; known: {', '.join(PRESETS)} "
            "(or a path to an HF config.json)"
        )
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputFileError(f"{path}: no such config file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputFileError(f"{path}: cannot read ({exc})") from None
    except ValueError as exc:
        raise InputFileError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise InputFileError(f"{path}: a config must be a JSON object")
    model_type = data.get("model_type")
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise InputFileError(
            f"{path}: model_type {model_type!r} is not a supported encoder "
            f"(supported: {', '.join(SUPPORTED_MODEL_TYPES)})"
        )
    data.pop("model_type")
    return model_type, data, None


def _make_config(family: str, config_dict: dict[str, Any], source: str) -> Any:
    from transformers import BertConfig, RobertaConfig, ViTConfig

    cls = {"bert": BertConfig, "roberta": RobertaConfig, "vit": ViTConfig}[family]
    try:
        config = cls(**config_dict)
    except (TypeError, ValueError) as exc:
        raise InputFileError(f"{source}: invalid {family} config ({exc})") from None
    if family == "vit" and config.image_size % config.patch_size:
        raise InputFileError(f"{source}: image_size must be a multiple of patch_size")
    if getattr(config, "is_decoder", False):
        raise InputFileError(f"{source}: is_decoder is set; only encoders are supported")
    if config.num_labels < 1 or config.num_hidden_layers < 1:
        raise InputFileError(f"{source}: needs num_labels ≥ 1 and num_hidden_layers ≥ 1")
    return config


def _bert(config: Any) -> tuple[nn.Module, Callable[[nn.Module], nn.ModuleList]]:
    from transformers import BertForSequenceClassification

    def cut(m: nn.Module) -> nn.ModuleList:
        head = Head([m.bert.pooler, m.dropout, m.classifier], take_first_token=False)
        return _sequence(Embeddings(m.bert.embeddings, "input_ids"), _blocks(m.bert), head)

    return BertForSequenceClassification(config), cut


def _roberta(config: Any) -> tuple[nn.Module, Callable[[nn.Module], nn.ModuleList]]:
    from transformers import RobertaForSequenceClassification

    def cut(m: nn.Module) -> nn.ModuleList:
        head = Head([m.classifier], take_first_token=False)
        emb = Embeddings(m.roberta.embeddings, "input_ids")
        return _sequence(emb, _blocks(m.roberta), head)

    return RobertaForSequenceClassification(config), cut


def _vit(config: Any) -> tuple[nn.Module, Callable[[nn.Module], nn.ModuleList]]:
    from transformers import ViTForImageClassification

    def cut(m: nn.Module) -> nn.ModuleList:
        head = Head([m.vit.layernorm, m.classifier], take_first_token=True)
        emb = Embeddings(m.vit.embeddings, "pixel_values")
        return _sequence(emb, _blocks(m.vit), head)

    return ViTForImageClassification(config), cut


def _blocks(base: nn.Module) -> nn.ModuleList:
    # transformers moved the blocks from `encoder.layer` to `layers` in some 5.x models.
    return base.layers if hasattr(base, "layers") else base.encoder.layer


def _sequence(emb: nn.Module, blocks: nn.ModuleList, head: nn.Module) -> nn.ModuleList:
    return nn.ModuleList([emb, *(Block(b) for b in blocks), head])


_FAMILIES = {"bert": _bert, "roberta": _roberta, "vit": _vit}
