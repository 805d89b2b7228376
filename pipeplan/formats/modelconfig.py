"""The values of a transformers config that its dictionary alone can check: no transformers,
no torch. A profile keeps its model's config (`ModelInfo.config`), and every command that loads
a profile checks it, `plan` included, which must not pay seconds of imports for it;
`pipeplan.models` applies the same checks to a model directory's config.json, beside those
that need transformers' classes (activations, problem types, label maps).

    config_value_problem({"layer_norm_eps": 0.0}, "bert")
    # "layer_norm_eps is 0.0; a norm's epsilon is a number > 0"
"""

from __future__ import annotations

from typing import Any

# Token ids a config keeps: an id outside the vocabulary indexes past the embeddings (the pad
# id in the first forward; the others in `generate` over the exported model).
TOKEN_ID_KEYS = ("pad_token_id", "bos_token_id", "eos_token_id", "sep_token_id", "cls_token_id")
TOKEN_ID_KEYS += ("decoder_start_token_id",)
# Each family's config class's own token ids (transformers' defaults, checked by a test):
# they pass whatever the vocabulary, as transformers writes GPT-2's 50256 for a GPT-2 of any
# vocabulary and nothing pipeplan runs reads bos or eos.
DEFAULT_TOKEN_IDS: dict[str, dict[str, int]] = {
    "bert": {"pad_token_id": 0},
    "roberta": {"pad_token_id": 1, "bos_token_id": 0, "eos_token_id": 2},
    "distilbert": {"pad_token_id": 0},
    "electra": {"pad_token_id": 0},
    "vit": {},
    "deit": {},
    "gpt2": {"bos_token_id": 50256, "eos_token_id": 50256},
    "llama": {"bos_token_id": 1, "eos_token_id": 2},
}


def config_value_problem(config: dict[str, Any], family: str) -> str | None:
    """What is wrong with the config's values, in words, or None: norm epsilons > 0,
    dropouts in [0, 1), initializer_range ≥ 0, pretraining_tp an integer ≥ 1, every RoPE base
    > 0, and (text models) every token id inside the vocabulary but the family's defaults."""
    for key, value in config.items():
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if key.endswith(("_eps", "_epsilon")) and not (number and value > 0):
            return f"{key} is {value!r}; a norm's epsilon is a number > 0"
        dropout = key.endswith(("dropout", "dropout_prob", "_pdrop"))
        if dropout and value is not None and not (number and 0 <= value < 1):
            return f"{key} is {value!r}; a dropout probability is in [0, 1)"
        if key == "initializer_range" and not (number and value >= 0):
            return f"{key} is {value!r}; a standard deviation is a number ≥ 0"
        if key == "pretraining_tp" and not (type(value) is int and value >= 1):
            return f"{key} is {value!r}; a tensor-parallel degree is an integer ≥ 1"
    for where, value in rope_thetas(config):
        # A RoPE base of 0 or less gives infinite or NaN rotary frequencies.
        if not (isinstance(value, int | float) and not isinstance(value, bool) and value > 0):
            return f"{where} is {value!r}; a RoPE base is a number > 0"
    if family in ("vit", "deit"):
        return None
    return token_id_problem(config, DEFAULT_TOKEN_IDS.get(family, {}))


def rope_thetas(config: dict[str, Any]) -> list[tuple[str, Any]]:
    """Each rope_theta of a config, at the top or inside rope_parameters / rope_scaling (where
    transformers keeps it), with its key path:

        rope_thetas({"rope_parameters": {"rope_theta": 0.0}})
        # [("rope_parameters.rope_theta", 0.0)]
    """
    found = [("rope_theta", config["rope_theta"])] if "rope_theta" in config else []
    for outer in ("rope_parameters", "rope_scaling"):
        inner = config.get(outer)
        if isinstance(inner, dict) and "rope_theta" in inner:
            found.append((f"{outer}.rope_theta", inner["rope_theta"]))
    return found


def token_id_problem(config: dict[str, Any], defaults: dict[str, Any]) -> str | None:
    """Every token id the config names (an int, or a list of ints for eos) in
    0..vocab_size − 1, but a value equal to its config class's default (`defaults`).

        token_id_problem({"vocab_size": 128, "eos_token_id": -5}, {})
        # "eos_token_id -5 is not a token id of its vocabulary (0..127)"
    """
    vocab = config.get("vocab_size")
    if type(vocab) is not int:
        return None  # a model without one (an image model), or refused as a size elsewhere
    for key in TOKEN_ID_KEYS:
        value = config.get(key)
        if value is None or value == defaults.get(key):
            continue
        ids = value if isinstance(value, list) else [value]
        if not ids or not all(type(i) is int and 0 <= i < vocab for i in ids):
            return f"{key} {value!r} is not a token id of its vocabulary (0..{vocab - 1})"
    return None
