"""The built-in models (`pipeplan models`): a family and the config fields that set each one's
shape; no weights. Defined here, beside the formats, because a profile names the model it
measured: a profile named after a preset holds that preset's shape (`preset_mismatch`).
`pipeplan.models` builds them.

    PRESETS["bert-tiny"].config["num_hidden_layers"]   # 4
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeplan.errors import quoted

# The config key of each family that counts its transformer blocks.
BLOCKS_KEY = {
    "bert": "num_hidden_layers",
    "roberta": "num_hidden_layers",
    "electra": "num_hidden_layers",
    "vit": "num_hidden_layers",
    "deit": "num_hidden_layers",
    "llama": "num_hidden_layers",
    "distilbert": "n_layers",
    "gpt2": "n_layer",
}


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
    # bert-base and vit-base state the shape fields they share with transformers' defaults:
    # a profile named after a preset is held to the fields its preset states.
    "bert-base": Preset(
        "bert",
        dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072),
        seq_len=128,
        description="BERT-base, 12 blocks, hidden 768",
    ),
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
        dict(
            image_size=224,
            patch_size=16,
            hidden_size=768,
            num_hidden_layers=12,
            num_attention_heads=12,
            intermediate_size=3072,
            num_labels=1000,
        ),
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
    "gpt2-tiny": Preset(
        "gpt2",
        dict(
            vocab_size=512,
            n_positions=128,
            n_embd=64,
            n_layer=4,
            n_head=4,
            bos_token_id=1,
            eos_token_id=2,
            pad_token_id=0,
        ),
        seq_len=32,
        description="GPT-2, 4 blocks, hidden 64, 512 tokens (causal LM unless task given)",
    ),
    "llama-tiny": Preset(
        "llama",
        dict(
            vocab_size=512,
            hidden_size=64,
            intermediate_size=176,
            num_hidden_layers=4,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=128,
            bos_token_id=1,
            eos_token_id=2,
            pad_token_id=0,
        ),
        seq_len=32,
        description="Llama-style decoder (rotary, RMSNorm, gated MLP, grouped KV), 4 blocks",
    ),
}


def preset_mismatch(name: str, family: str, config: dict[str, Any]) -> str | None:
    """Why a profile of the model `name` (family, the config it recorded) is not of that
    preset, or None: a free name (a path, another name) or the preset's own shape.

        preset_mismatch("bert-large", "bert", tiny_config)   # "... num_hidden_layers ..."
    """
    preset = PRESETS.get(name)
    if preset is None:
        return None
    if family != preset.family:
        return f"{quoted(name)} is a built-in {preset.family} model, not {family}"
    for key, value in preset.config.items():
        # num_labels is the head's (config.id2label records it), the rest set shapes.
        if key != "num_labels" and config.get(key) != value:
            return (
                f"{quoted(name)} is a built-in model whose config has {key} {value!r}, but this "
                f"profile's config has {config.get(key)!r}"
            )
    return None


def config_path(name_or_path: str) -> Path | None:
    """The config.json a MODEL argument stands for, or None for a built-in name: the one rule
    every command reads MODEL by (`pipeplan.models` builds by it, a profile's identity is
    checked by it, a run finds its tokenizer by it). A built-in name is always the built-in,
    even beside a folder of that name, which `./bert-tiny` names (twenty-seventh round: `run`
    judged the profile of the built-in against such a folder's config.json, and refused it).

        config_path("bert-tiny")                   # None, whatever ./bert-tiny is
        config_path("runs/demo-pretrained/model")  # runs/demo-pretrained/model/config.json
        config_path("ckpt/my.json")                # ckpt/my.json
        config_path("ckpt/my.json/")               # ckpt/my.json/config.json: not read as
                                                   # my.json (thirty-seventh round)

    A trailing slash names a folder, as it does to the system: pathlib drops it, so
    `ckpt/my.json/` was read as the file my.json; now its reading says my.json is not one."""
    if name_or_path in PRESETS:
        return None
    path = Path(name_or_path)
    folder = path.is_dir() or name_or_path.endswith(("/", "/."))
    return path / "config.json" if folder else path


def shadowed_folder(name: str) -> Path | None:
    """The folder of the current directory that the built-in name `name` passes over (one
    with a config.json, so `name` would be a model there but for the rule of `config_path`),
    or None. `shadowed_folder("bert-tiny")` → Path("bert-tiny") after `git clone …/bert-tiny`."""
    if name not in PRESETS or not (Path(name) / "config.json").is_file():
        return None
    return Path(name)


def model_argument(folder: Path) -> str:
    """How to name the model folder `folder` as MODEL in a command shown to the user: as it is,
    or `./NAME` where its path is a built-in's name (`bert-tiny` would be the built-in)."""
    text = str(folder)
    return f"./{text}" if text in PRESETS else text
