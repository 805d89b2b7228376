"""The values of a transformers config that its dictionary alone can check: no transformers,
no torch. A profile keeps its model's config (`ModelInfo.config`), and every command that loads
a profile checks it, `plan` included, which must not pay seconds of imports for it;
`pipeplan.models` applies the same checks to a model directory's config.json, beside those
that need transformers' classes (activations, problem types, label maps).

    config_value_problem({"layer_norm_eps": 0.0}, "bert")
    # "layer_norm_eps is 0.0; a norm's epsilon is a number in [1e-30, 1]"
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import warnings
from collections.abc import Callable, Iterator
from typing import Any

from pipeplan.errors import quoted
from pipeplan.formats.base import as_seen, label_name_problem

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


# A norm's epsilon, added to a variance near 1: real checkpoints use 1e-12 (BERT) to 1e-5
# (GPT-2, ViT), so [1e-30, 1] refuses none of them. Below 1e-30 it is noise to float32 (a
# subnormal 5e-324 is 0 there), above 1 it drowns the variance it regularises; 1e300 and
# 5e-324 were accepted (nineteenth round).
EPS_RANGE = (1e-30, 1.0)
# initializer_range, the standard deviation random weights are drawn with: real configs use
# 0.02 or so; above 1 a deep model's activations overflow (1e300 was accepted, nineteenth round).
MAX_INIT_STD = 1.0

# The position embeddings of the BERT-like families (transformers' `position_embedding_type`):
# absolute only. transformers 5 builds no relative ones, so "relative_key" was trained as
# absolute and exported with the key (twenty-fourth round).
POSITION_TYPES = ("absolute",)
# The attention implementations pipeplan builds (`attn_implementation`; null is sdpa, transformers'
# default): those transformers has in torch alone. Another name was refused by from_pretrained
# as a failure to load the weights, or tried as a kernel hub repository.
ATTENTION_IMPLEMENTATIONS = ("eager", "sdpa")


def attention_setting(config: dict[str, Any]) -> tuple[str, Any]:
    """The config key that sets the attention implementation transformers builds, and its
    value: `_attn_implementation` where the config has it (earlier transformers 5 releases take
    it through their property's setter, and it wins over `attn_implementation`, even as null;
    5.25 ignores it), else `attn_implementation`. Found by the twenty-eighth round: the
    underscore key was built but not read, so flex_attention got through. Both spellings are
    held to `ATTENTION_IMPLEMENTATIONS` whatever the release reads; what a folder builds is
    asked of transformers (`profile.model_mismatch`).

        attention_setting({"_attn_implementation": "eager"})   # ("_attn_implementation", "eager")
    """
    key = "_attn_implementation" if "_attn_implementation" in config else "attn_implementation"
    return key, config.get(key)


def built_attention(config: dict[str, Any]) -> str:
    """The attention implementation a config builds: its `attention_setting`, sdpa where it is
    null or left out. Eager keeps each block's attention probabilities for the backward pass
    (quadratic in the sequence), so a profile records the one it timed (`models.LayerSequence
    .config_json`), and `profile.model_mismatch` holds a folder to it.

        built_attention({"attn_implementation": None})   # "sdpa"
    """
    return attention_setting(config)[1] or "sdpa"


# The JSON types each config key that transformers or pipeplan reads may have: what the config
# classes of the families declare (a test holds this table to their annotations) and what their
# __init__ reads besides (num_labels, rope_theta, rope_scaling, …). "number" is an integer or a
# float, "strings" and "ints" lists of them. Found by the nineteenth round: model_type ["bert"]
# was a traceback (unhashable type), and transformers checks only its families' own fields:
# architectures 3 was "'int' object is not iterable", output_hidden_states "x" was kept.
_SIZE, _MAYBE_SIZE = ("int",), ("int", "null")
_NUMBER, _BOOL, _STRING = ("number",), ("bool",), ("string",)
_TOKEN_ID = ("int", "null")  # eos may be a list too
FIELD_TYPES: dict[str, tuple[str, ...]] = {
    "model_type": _STRING,
    "transformers_version": ("string", "null"),
    "architectures": ("strings", "null"),
    "output_hidden_states": ("bool", "null"),
    "return_dict": ("bool", "null"),
    "output_attentions": _BOOL,
    "torchscript": _BOOL,  # transformers 5 reads it no more: kept in the export, unread
    "gradient_checkpointing": _BOOL,
    "dtype": ("string", "null"),
    "torch_dtype": ("string", "null"),
    "attn_implementation": ("string", "null"),
    "_attn_implementation": ("string", "null"),  # its setter's spelling (`attention_setting`)
    "chunk_size_feed_forward": ("int",),
    "is_encoder_decoder": _BOOL,
    "id2label": ("object", "null"),
    "label2id": ("object", "null"),
    "problem_type": ("string", "null"),
    "num_labels": ("int",),
    "position_embedding_type": _STRING,
    "rope_theta": _NUMBER,
    "rope_scaling": ("object", "null"),
    "rope_parameters": ("object", "null"),
    "partial_rotary_factor": _NUMBER,
    "eos_token_id": ("int", "ints", "null"),  # a list: generation stops at any of them
    "summary_activation": ("string", "null"),
    "pruned_heads": ("object", "null"),  # transformers 4's head pruning (`unbuilt_problem`)
    **{key: _TOKEN_ID for key in TOKEN_ID_KEYS if key != "eos_token_id"},
    **dict.fromkeys(
        (
            "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
            "intermediate_size", "max_position_embeddings", "type_vocab_size", "embedding_size",
            "dim", "hidden_dim", "n_layers", "n_heads", "n_positions", "n_embd", "n_layer",
            "n_head", "num_channels", "image_size", "patch_size", "encoder_stride",
        ),
        _SIZE,
    ),
    **dict.fromkeys(
        ("n_inner", "num_key_value_heads", "head_dim", "pretraining_tp", "pooler_output_size"),
        _MAYBE_SIZE,
    ),
    **dict.fromkeys(
        ("hidden_act", "activation_function", "activation", "pooler_act", "summary_type"), _STRING
    ),
    **dict.fromkeys(
        (
            "hidden_dropout_prob", "attention_probs_dropout_prob", "dropout", "qa_dropout",
            "seq_classif_dropout", "resid_pdrop", "embd_pdrop", "attn_pdrop",
            "summary_first_dropout", "summary_last_dropout", "layer_norm_eps",
            "layer_norm_epsilon", "rms_norm_eps", "initializer_range",
        ),
        _NUMBER,
    ),
    **dict.fromkeys(("classifier_dropout", "attention_dropout"), ("number", "null")),
    **dict.fromkeys(
        (
            "use_cache", "is_decoder", "add_cross_attention", "tie_word_embeddings",
            "sinusoidal_pos_embds", "qkv_bias", "summary_use_proj", "summary_proj_to_labels",
            "scale_attn_weights", "scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn",
            "attention_bias", "mlp_bias",
        ),
        _BOOL,
    ),
}  # fmt: skip
_TYPE_WORDS = {
    "string": "a string",
    "bool": "true or false",
    "int": "an integer",
    "number": "a number",
    "object": "an object",
    "strings": "a list of strings",
    "ints": "a list of integers",
    "null": "null",
}
# Labels a config may declare (num_labels): executor.data's bound on a data set's classes; 10^12
# made transformers build an id2label of 10^12 names before anything was checked.
MAX_CONFIG_LABELS = 1_000_000


def json_kind(value: Any) -> str:
    """The JSON type of a decoded value, in FIELD_TYPES' words: json_kind(True) == "bool"."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "list"
    return "object" if isinstance(value, dict) else type(value).__name__


def _admits(kind: str, value: Any) -> bool:
    found = json_kind(value)
    if kind == "number":
        return found in ("int", "float")
    if kind in ("strings", "ints"):
        item = "string" if kind == "strings" else "int"
        return found == "list" and all(json_kind(v) == item for v in value)
    return found == kind


def shown(value: Any, limit: int = 60) -> str:
    """A value as a message shows it: its repr, cut visibly (`errors.quoted`)."""
    return quoted(value, limit)


def type_problem(config: dict[str, Any]) -> str | None:
    """The first key of `FIELD_TYPES` whose value is of another JSON type, in words, or None:

    type_problem({"architectures": 3})   # "architectures is 3; a list of strings or null"
    """
    for key, value in config.items():
        kinds = FIELD_TYPES.get(key)
        if kinds is None or any(_admits(kind, value) for kind in kinds):
            continue
        return f"{key} is {shown(value)}; {' or '.join(_TYPE_WORDS[k] for k in kinds)}"
    return None


def layer_types_problem(config: dict[str, Any]) -> str | None:
    """What is wrong with `layer_types` (each layer's attention), in words, or None: one
    entry a layer, and a window for sliding layers. Found by the forty-eighth round: a Llama
    config naming sliding_attention without sliding_window trained and exported, and the
    export's default forward then failed inside transformers (its cache reads the window).

        layer_types_problem({"layer_types": ["sliding_attention"], "num_hidden_layers": 1})
        # "layer_types names sliding_attention but sliding_window is None; …"
    """
    types = config.get("layer_types")
    if types is None:
        return None
    if not isinstance(types, list) or not all(isinstance(kind, str) for kind in types):
        return f"layer_types is {quoted(types)}; a list of attention kinds, one a layer"
    layers = config.get("num_hidden_layers")
    if type(layers) is int and len(types) != layers:
        entries = f"{len(types)} entr{'y' if len(types) == 1 else 'ies'}"
        return f"layer_types has {entries}; one a layer: num_hidden_layers {layers}"
    window = config.get("sliding_window")
    if "sliding_attention" in types and not (type(window) is int and window >= 1):
        return (
            f"layer_types names sliding_attention but sliding_window is {quoted(window)}; a "
            "sliding layer needs a window, an integer ≥ 1"
        )
    return None


def config_value_problem(config: dict[str, Any], family: str, *, labels: bool = True) -> str | None:
    """What is wrong with the config's values, in words, or None: no key transformers' config
    class cannot take (`unsettable_problem`), each key's JSON type
    (`FIELD_TYPES`), nothing pipeplan does not build (`unbuilt_problem`), norm epsilons in
    `EPS_RANGE`, dropouts in [0, 1), initializer_range in [0, `MAX_INIT_STD`], pretraining_tp
    an integer ≥ 1, a feed-forward chunk size ≥ 0, num_labels in 1..MAX_CONFIG_LABELS, a known
    position embedding type, RoPE keys on a family with RoPE only (`rotary_problem`), the RoPE
    parameters (`rope_problem`), the switches of the forward
    pass (`switch_problem`), with `labels` id2label,
    label2id and num_labels one mapping of names a data label may be (`label_map_problem`),
    (text models) every token id inside the vocabulary but the family's defaults, and the
    generation settings it holds held as generation_config.json's (`generation_keys_problem`).
    A model folder's config.json and a profile's config are held to it alike."""
    if (why := unsettable_problem(config, family)) is not None:
        return why
    if (why := type_problem(config)) is not None:
        return why
    if (why := unbuilt_problem(config)) is not None:
        return why
    for key, value in config.items():
        number = isinstance(value, int | float) and not isinstance(value, bool)
        low, high = EPS_RANGE
        if key.endswith(("_eps", "_epsilon")) and not (number and low <= value <= high):
            return f"{key} is {quoted(value)}; a norm's epsilon is a number in [{low:g}, {high:g}]"
        dropout = key.endswith(("dropout", "dropout_prob", "_pdrop"))
        if dropout and value is not None and not (number and 0 <= value < 1):
            return f"{key} is {quoted(value)}; a dropout probability is in [0, 1)"
        if key == "initializer_range" and not (number and 0 <= value <= MAX_INIT_STD):
            return f"{key} is {quoted(value)}; a standard deviation is in [0, {MAX_INIT_STD:g}]"
        if key == "pretraining_tp" and not (type(value) is int and value >= 1):
            return f"{key} is {quoted(value)}; a tensor-parallel degree is an integer ≥ 1"
        # Found by the eighteenth round: -1 and 'zorp' were accepted (transformers reads any
        # unknown position type as absolute, and a chunk size < 0 as none).
        if key == "chunk_size_feed_forward" and not (type(value) is int and value >= 0):
            return f"{key} is {quoted(value)}; a chunk size is an integer ≥ 0 (0: no chunking)"
        if key == "position_embedding_type" and value not in POSITION_TYPES:
            return f"{key} is {quoted(value)}; pipeplan builds absolute position embeddings only"
        # The bound said is a classifier's: `head_labels_problem` refuses its 1 (a decoder's
        # config may say 1). The sixtieth round: 0 was told "1..", and 1 was then refused.
        if key == "num_labels" and not 1 <= value <= MAX_CONFIG_LABELS:
            return f"{key} is {quoted(value)}; a classifier has 2..{MAX_CONFIG_LABELS:,} labels"
        # Its id2label names the labels where num_labels is absent: bounded alike (forty-
        # seventh round: an id2label of 1,048,577 names failed a profile's record in a
        # traceback, after 75 s of work).
        if key == "id2label" and isinstance(value, dict) and len(value) > MAX_CONFIG_LABELS:
            return (
                f"{key} names {len(value):,} labels; a classifier has "
                f"2..{MAX_CONFIG_LABELS:,} labels"
            )
    if (why := rotary_problem(config, family)) is not None:
        return why
    if (why := rope_problem(config)) is not None:
        return why
    if family == "llama" and (why := heads_problem(config)) is not None:
        return why
    if (why := switch_problem(config)) is not None:
        return why
    if (why := layer_types_problem(config)) is not None:
        return why
    if labels and (why := label_map_problem(config)) is not None:
        return why
    text = family not in ("vit", "deit")
    if text and (why := token_id_problem(config, DEFAULT_TOKEN_IDS.get(family, {}))) is not None:
        return why
    return generation_keys_problem(config, family)


# Each family's transformers config class, by name (a test holds it to `models.FAMILIES`).
CONFIG_CLASSES = {
    "bert": "BertConfig",
    "roberta": "RobertaConfig",
    "distilbert": "DistilBertConfig",
    "electra": "ElectraConfig",
    "vit": "ViTConfig",
    "deit": "DeiTConfig",
    "gpt2": "GPT2Config",
    "llama": "LlamaConfig",
}


def transformers_config(family: str, config: dict[str, Any]) -> Any:
    """The config object `family`'s transformers class makes of `config` (a config.json's
    object, model_type left out): the family's defaults for the keys it leaves out and what
    the class derives (Llama's num_key_value_heads and head_dim), as the model is built from
    it. The one place a config becomes transformers' (`pipeplan.models` builds with it, a
    profile's identity is held to it: `profile.model_mismatch`). Imports transformers
    (seconds): only where a model folder is read, never to read a profile (`plan`). Whatever
    the class raises propagates; what it logs or warns is silenced.

        transformers_config("bert", {"hidden_size": 32}).intermediate_size   # 3072
    """
    import transformers

    config_class = getattr(transformers, CONFIG_CLASSES[family])
    with warnings.catch_warnings(), quiet_transformers():
        warnings.simplefilter("ignore")
        return config_class(**config)


@contextlib.contextmanager
def quiet_transformers() -> Iterator[None]:
    """transformers reports a missing head as a many-line table and draws progress bars; the
    one line that matters is `_check_loaded`'s. Its errors are silenced too: each is raised
    after it is logged (a config key it cannot set was logged with the whole config, 28
    lines, twenty-second round), and pipeplan reports the exception in one line."""
    from transformers.utils import logging as hf_logging

    verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity(logging.CRITICAL + 1)  # above every level it logs at
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()


# The names on those classes that are no setting a config may give: read-only properties (values
# transformers derives) and methods. Written out, not looked up, so a profile's config is held
# to them without importing transformers (seconds); a test holds both to the classes (every
# family has the same ones).
READ_ONLY_KEYS = ("is_heterogeneous", "per_layer_attributes", "sub_configs", "use_return_dict")
CONFIG_METHODS = (
    "__delattr__", "__dir__", "__eq__", "__format__", "__ge__", "__getattribute__",
    "__getstate__", "__gt__", "__init__", "__init_subclass__", "__iter__", "__le__", "__lt__",
    "__ne__", "__new__", "__post_init__", "__reduce__", "__reduce_ex__", "__repr__",
    "__setattr__", "__sizeof__", "__str__", "__subclasshook__", "_check_received_keys",
    "_decode_special_floats", "_dict_from_json_file", "_encode_special_floats",
    "_get_config_dict", "_get_files_timestamps", "_get_generation_parameters",
    "_getattr_without_heterogeneous_validation", "_hasattr_without_heterogeneous_validation",
    "_iter_config_keys_with_heterogeneous_adjustment", "_remove_keys_not_serialized",
    "_update_heterogeneous_to_dict_output", "_upload_modified_files",
    "_validate_axial_rope_parameters", "_validate_default_rope_parameters",
    "_validate_dynamic_rope_parameters", "_validate_linear_rope_parameters",
    "_validate_llama3_rope_parameters", "_validate_longrope_rope_parameters",
    "_validate_proportional_rope_parameters", "_validate_yarn_rope_parameters",
    "convert_rope_params_to_dict", "default_config_fields", "dict_dtype_to_str", "from_dict",
    "from_json_file", "from_pretrained", "get_config_dict", "get_mtp_config", "get_text_config",
    "is_custom_code", "is_remote_code", "nested_rope_parameter_keys", "push_to_hub",
    "register_for_auto_class", "save_pretrained", "standardize_rope_params", "to_dict",
    "to_diff_dict", "to_json_file", "to_json_string", "update", "update_from_string",
    "validate", "validate_architecture", "validate_layer_type", "validate_output_attentions",
    "validate_rope", "validate_token_ids",
)  # fmt: skip


def unsettable_problem(config: dict[str, Any], family: str) -> str | None:
    """Why a key of the config cannot be a setting of its family's transformers config class,
    in words, or None: it names a read-only property or a method (`READ_ONLY_KEYS`,
    `CONFIG_METHODS`), not a field.

        unsettable_problem({"use_return_dict": False}, "bert")
        # "use_return_dict is a read-only property of transformers' BertConfig, …"

    Found by the twenty-second round in a model folder: use_return_dict, is_heterogeneous and
    per_layer_attributes made transformers log its whole config (28 lines) before failing, and a
    method's name (to_dict) replaced the method; by the twenty-third, the same keys in a
    profile's config were planned without a word."""
    name = f"transformers' {CONFIG_CLASSES.get(family, 'PretrainedConfig')}"
    for key in config:
        if key in READ_ONLY_KEYS:
            return (
                f"{key} is a read-only property of {name} (a value it derives), not a setting "
                "a config.json gives: remove it"
            )
        if key in CONFIG_METHODS:
            return f"{key} names a method of {name}, not a setting a config.json gives: remove it"
    return None


# The problem types transformers' config classes take (`PretrainedConfig.validate`); pipeplan
# trains the single-label one (or, for a causal language model, none is read).
PROBLEM_TYPES = ("regression", "single_label_classification", "multi_label_classification")


def problem_type_problem(config: dict[str, Any], task: str) -> str | None:
    """The config's problem_type against the task pipeplan trains, in words, or None: null or
    single-label classification; for causal-lm, which reads none, any type transformers
    takes. A model folder's config.json and a profile's config alike (the twenty-third round
    found a profile's 'regression' planned).

        problem_type_problem({"problem_type": "regression"}, "classification")
        # "problem_type is 'regression'; pipeplan trains single-label classification …"
    """
    value = config.get("problem_type")
    if value in (None, "single_label_classification"):
        return None
    if task == "classification" or value not in PROBLEM_TYPES:
        return (
            f"problem_type is {quoted(value)}; pipeplan trains single-label classification "
            "(or a causal language model)"
        )
    return None


def head_labels_problem(config: dict[str, Any], task: str) -> str | None:
    """A classifier's head of the config's own labels (`label_count`: id2label's, else
    num_labels) has at least 2, in words, or None: transformers reads num_labels 1 (which an
    id2label of one name sets) as regression, a mean squared error on one output, which
    pipeplan does not train (`--num-labels` and a run's data are held to 2 alike). Found by
    the thirty-fourth round: a config.json of num_labels 1 was profiled as a 1-class
    classifier, exit 0, and `run` refused the model later.

        head_labels_problem({"num_labels": 1}, "classification")   # "num_labels is 1: …"
    """
    if task != "classification" or label_count(config) >= 2:
        return None
    id2label = config.get("id2label")
    said = (
        f"id2label names {len(id2label)} label{'' if len(id2label) == 1 else 's'}"
        if isinstance(id2label, dict)
        else f"num_labels is {config.get('num_labels')}"
    )
    return (
        f"{said}: transformers makes a 1-label head a regression head, which pipeplan does not "
        "train (a classifier has at least 2 labels)"
    )


def switch_problem(config: dict[str, Any]) -> str | None:
    """What the config's switches of transformers' forward ask for that pipeplan cannot give,
    in words, or None: an attention implementation other than `ATTENTION_IMPLEMENTATIONS`,
    attention weights, and gradient checkpointing. Found by the twenty-first round:
    output_attentions true was built and trained, then the run's export failed in a traceback
    (transformers saves it beside eager attention only, and save_pretrained does not write
    attn_implementation: an eager folder's export saved, reloaded as sdpa, and failed there), and
    gradient_checkpointing true made transformers recompute every block's activations, which
    the profile and plan count as kept. The attention is read in both spellings
    (`attention_setting`). (return_dict, output_hidden_states, use_cache and
    torchscript change nothing pipeplan computes: only their types are checked.)

        switch_problem({"output_attentions": True})
        # "output_attentions is true; pipeplan's layers pass hidden states on, no attention …"
    """
    key, attention = attention_setting(config)
    if attention is not None and attention not in ATTENTION_IMPLEMENTATIONS:
        return (
            f"{key} is {quoted(attention)}; one of "
            f"{', '.join(ATTENTION_IMPLEMENTATIONS)}, or null (sdpa)"
        )
    if config.get("output_attentions"):
        return (
            "output_attentions is true; pipeplan's layers pass hidden states on, no attention "
            "weights, and transformers saves this switch beside eager attention only, which a "
            "saved config does not record (the export, or a save of the exported model, "
            "fails): set it false"
        )
    if config.get("gradient_checkpointing"):
        return (
            "gradient_checkpointing is true; pipeplan's profile and plan count the activations "
            "each block keeps for its backward pass, which transformers would recompute "
            "instead: set it false"
        )
    return None


# The families whose feed-forward transformers chunks along the sequence when
# chunk_size_feed_forward > 0 (`apply_chunking_to_forward`; the others ignore it): a test holds
# them to transformers'.
CHUNKED_FAMILIES = ("bert", "roberta", "electra", "distilbert")


def chunk_problem(
    config: dict[str, Any], family: str, seq_len: int, given_by: str = "--seq-len"
) -> str | None:
    """The feed-forward chunk size against the sequence length it chunks, in words, or None:
    transformers requires 0 (no chunking) or a divisor of the length. Found by the nineteenth
    round: 3 with --seq-len 16 (or 10^12) failed in a traceback inside the first forward.
    `given_by`: what set the length (a flag, or a profile's input_shape).

        chunk_problem({"chunk_size_feed_forward": 3}, "bert", 16)
        # "chunk_size_feed_forward is 3 but the sequence length (--seq-len) is 16; …"
    """
    chunk = config.get("chunk_size_feed_forward")
    if family not in CHUNKED_FAMILIES or type(chunk) is not int or chunk <= 0:
        return None
    if seq_len % chunk == 0:
        return None
    return (
        f"chunk_size_feed_forward is {chunk} but the sequence length ({given_by}) is {seq_len}; "
        "transformers chunks the feed-forward along the sequence: the chunk size is 0 (no "
        "chunking) or a divisor of the sequence length"
    )


# The dtypes a config may record for its weights. pipeplan builds and trains float32 weights
# (bf16 autocasts the compute) and `export` writes the config on: "int8" there made
# from_pretrained(dtype="auto") load the trained model as integers.
FLOAT_DTYPES = ("float32", "float16", "bfloat16", "float64")


def unbuilt_problem(config: dict[str, Any]) -> str | None:
    """What a config asks for that pipeplan does not build, in words, or None: a quantized
    model (any quantization_config: its weights are not float; transformers refused the
    methods it knows only for want of a package, and an unknown one was accepted unread),
    weights of a dtype that is not a float one, pruned attention heads (an empty mapping is
    none), an encoder-decoder, or cross-attention (an encoder-decoder's too). Found by the
    nineteenth round: quant_method "zorp", dtype "int8" and GPT-2's is_encoder_decoder true
    were profiled without a word.

        unbuilt_problem({"quantization_config": {"quant_method": "zorp"}})
        # "quantization_config is given (quant_method 'zorp'); pipeplan …"
    """
    quantized = config.get("quantization_config")
    if quantized is not None:
        method = quantized.get("quant_method") if isinstance(quantized, dict) else quantized
        return (
            f"quantization_config is given (quant_method {quoted(method)}); pipeplan builds and "
            "trains float weights, not a quantized model"
        )
    for key in ("dtype", "torch_dtype"):
        value = config.get(key)
        if value is not None and value not in FLOAT_DTYPES:
            dtypes = ", ".join(FLOAT_DTYPES)
            return f"{key} is {quoted(value)}; the weights' dtype is one of {dtypes}"
    if config.get("is_encoder_decoder") not in (None, False):
        return (
            f"is_encoder_decoder is {json.dumps(config['is_encoder_decoder'])}; pipeplan builds "
            "encoders and decoders, not encoder-decoder models"
        )
    # Found by the twenty-third round: accepted and kept unread (transformers 5 prunes no head;
    # a transformers 4 reading the export would prune them, then fail on the full-size weights).
    if config.get("pruned_heads"):
        return (
            f"pruned_heads is {quoted(config['pruned_heads'], 80)}; pipeplan builds and trains "
            "every attention head (transformers 5 prunes none, and transformers 4 would prune "
            "the exported model's and then fail to load its full-size weights): remove it"
        )
    # Found by the twentieth round: a profile's config may not ask for the cross-attention
    # weights (GPT-2's, in every block) that a model folder's is refused for.
    if config.get("add_cross_attention") not in (None, False):
        return (
            f"add_cross_attention is {json.dumps(config['add_cross_attention'])}; pipeplan "
            "builds no cross-attention (it takes no encoder's states)"
        )
    return None


def label_map_problem(config: dict[str, Any]) -> str | None:
    """id2label, label2id and num_labels as one mapping: id2label's own rules
    (`id2label_problem`), num_labels its size when both are given, and label2id, when the
    config has one, the exact inverse of id2label: the config's, or the LABEL_0..LABEL_{n-1}
    that transformers makes for num_labels (default 2) without one, whereupon it drops label2id
    unread. Found by the eighteenth round: label2id {"X": 0, "Y": 5} beside 2 labels was
    accepted; by the twentieth, num_labels 5 beside 2 names (transformers only warns, then
    builds 5 LABEL_i classes and drops the names) and a label2id missing a name.

        label_map_problem({"id2label": {"0": "neg", "1": "pos"}, "label2id": {"neg": 0, "x": 5}})
        # "label2id is not the inverse of id2label: it gives 'x' id 5; the ids are 0..1"
    """
    if (why := id2label_problem(config.get("id2label"))) is not None:
        return why
    if (why := _num_labels_problem(config)) is not None:
        return why
    label2id = config.get("label2id")
    if label2id is None:
        return None
    id2label, where = config.get("id2label"), "id2label"
    if not isinstance(id2label, dict):
        labels = label_count(config)
        id2label = {i: f"LABEL_{i}" for i in range(labels)}
        where = f"id2label (none given: LABEL_0..LABEL_{labels - 1} for {labels} labels)"
    names = {str(name): str(i) for i, name in id2label.items()}  # JSON keys are strings
    if not isinstance(label2id, dict):
        return f"label2id is {quoted(label2id)}; a label map is an object of label → id"
    ids = sorted(names.values(), key=lambda i: (len(i), i))
    known = set(ids)  # a set: a list's `in` made 10^6 labels take hours (twentieth round)
    not_inverse = f"label2id is not the inverse of {where}"
    for name, i in label2id.items():
        if str(i) not in known:
            gives = f"{not_inverse}: it gives {quoted(name)} id {quoted(i)}"
            if not ids:  # `"id2label": {}` (found by the fuzz suite: an IndexError)
                return f"{gives}; id2label names no ids"
            return f"{gives}; the ids are {ids[0]}..{ids[-1]}"
        if names.get(str(name)) != str(i):
            other = _name(id2label, i)
            gives = f"{not_inverse}: it gives {quoted(name)} id {quoted(i)}"
            return f"{gives}, but id {i} is {quoted(other)}"
    # Each entry is one of id2label's: the other way, a name it leaves out.
    missing = next((name for name in names if name not in label2id), None)
    if missing is not None:
        return f"{not_inverse}: it gives no id to {quoted(missing)} (id {names[missing]})"
    return None


def _num_labels_problem(config: dict[str, Any]) -> str | None:
    """num_labels, when given beside id2label, is its size: transformers only warns of another
    and builds that many LABEL_i classes, dropping the names (and the checkpoint's head).

        _num_labels_problem({"num_labels": 5, "id2label": {"0": "a", "1": "b"}})
        # "num_labels is 5 but id2label names 2 labels; …"
    """
    labels, id2label = config.get("num_labels"), config.get("id2label")
    if labels is None or not isinstance(id2label, dict) or labels == len(id2label):
        return None
    return (
        f"num_labels is {labels!r} but id2label names {len(id2label)} labels; num_labels is "
        "the size of id2label and label2id (or left out)"
    )


# A class id as JSON writes one: transformers reads an id2label key with int(), so "01",
# "+1" and " 1" were all class 1, silently beside a "1" or in its place.
_CANONICAL_ID = re.compile(r"0|[1-9][0-9]*")


def id2label_problem(id2label: Any) -> str | None:
    """id2label's keys written as the ids they are read as, the ids 0..n-1, and one name per
    class, each a name as a data label is (`base.label_name_problem`: no control or bidi
    character, not blank, at most MAX_TEXT characters, no whitespace around it) that no other
    looks like (`base.as_seen`). Found by the nineteenth round: {"0": "x", "1": "x"} was
    accepted (the exported label2id could only be {"x": 1}) and {"0": "a", "01": "b"} read
    "01" as 1; by the twentieth, names "a\u202e", "b\n" and "" that a data label may not be.

        id2label_problem({"0": "x", "1": "x"})   # "id2label names 'x' for ids 0 and 1; …"
    """
    if not isinstance(id2label, dict):
        return None  # none given, or not a mapping: transformers' class refuses it
    seen: dict[str, tuple[Any, Any]] = {}  # as seen → (id, name)
    for key, name in id2label.items():
        if not _CANONICAL_ID.fullmatch(str(key)):
            return (
                f"id2label has key {quoted(str(key))}; a class id is written as a plain integer "
                "0, 1, 2… (transformers reads the key with int(), as another id's spelling)"
            )
        if (why := _label_name_problem(name)) is not None:
            return f"id2label names {shown(name)} for id {key}: the label {why}"
        looks, (other_key, other) = as_seen(name), seen.get(as_seen(name), (None, None))
        if other == name:
            return (
                f"id2label names {quoted(name)} for ids {other_key} and {key}; each class has "
                "a name of its own (label2id maps a name to one id)"
            )
        if other is not None:  # ascii(): the two print alike; their escapes show the difference
            return (
                f"id2label names {other!a} for id {other_key} and {name!a} for id {key}, which "
                "look the same (another Unicode form or an invisible character); each class "
                "has a name of its own"
            )
        seen[looks] = (key, name)
    ids = sorted(int(key) for key in id2label)
    if ids != list(range(len(ids))):
        return f"id2label has ids {ids[:5]}…; a classifier's ids are 0..{len(ids) - 1}"
    return None


def _label_name_problem(name: Any) -> str | None:
    """A data label's rule (`base.label_name_problem`) for a config's label name, which is
    kept as written: whitespace around it, which a data label is read without, is refused."""
    if not isinstance(name, str):
        return "is not a string"
    if (why := label_name_problem(name)) is not None:
        return why
    if name != name.strip():
        return "has whitespace around it, which a name is read without (as a data label is)"
    return None


def _name(id2label: dict[Any, Any], i: Any) -> Any:
    return next((name for key, name in id2label.items() if str(key) == str(i)), None)


# RoPE (Llama): the types transformers computes frequencies for (a test holds them to its
# ROPE_INIT_FUNCTIONS), and the bounds of their parameters. The frequencies are computed in
# float32, so a base outside its normal range gave infinite ones; a scaling factor is ≥ 1 (the
# rule transformers only logs) and at most a stated bound far above any real model (Llama 3.1
# uses 8, YaRN and LongRoPE extensions up to 64). Found by the nineteenth round: factor 0, -1 and
# 1e308, short/long factors -1 and a base of 1e-320 were accepted, and a zero factor or a
# subnormal base was blamed on model.safetensors.
ROPE_TYPES = ("default", "linear", "dynamic", "yarn", "longrope", "llama3", "proportional")
FLOAT32_TINY = 2.0**-126  # float32's least normal number
MAX_ROPE_BASE = 1e18  # real ones are at most 10^8; an integer past 2^63 overflowed in torch
MAX_ROPE_FACTOR = 1_000_000
_ROPE_BASE = (
    f"a RoPE base is a number > 0, at least float32's least normal number ({FLOAT32_TINY:.8g}: "
    f"its frequencies are computed in float32) and at most {MAX_ROPE_BASE:g}"
)
# Llama applies the rotary embedding to whole heads: a part (0.5) was a shape mismatch inside
# the first forward.
_WHOLE_HEADS = "1 (Llama rotates whole heads)"
# The parameters transformers reads of each RoPE type (its `_validate_*_rope_parameters`,
# required and optional), besides those every type takes (`_ROPE_COMMON`): another key it logs
# as unrecognized and ignores. Found by the fifty-seventh round: a dynamic RoPE's
# original_max_position_embeddings trained without a word, and its export warned on every load.
# A test holds them to transformers'.
_ROPE_COMMON = ("rope_type", "type", "rope_theta", "partial_rotary_factor")
ROPE_KEYS = {
    "default": (),
    "linear": ("factor",),
    "dynamic": ("factor",),
    "yarn": (
        "factor", "original_max_position_embeddings", "attention_factor", "beta_fast",
        "beta_slow", "mscale", "mscale_all_dim", "truncate",
    ),
    "longrope": (
        "short_factor", "long_factor", "original_max_position_embeddings", "attention_factor",
        "factor",
    ),
    "llama3": ("factor", "original_max_position_embeddings", "low_freq_factor", "high_freq_factor"),
    # transformers' validator calls `factor` unrecognized here, but its proportional RoPE
    # divides the frequencies by it (the fifty-ninth round: refused, yet read).
    "proportional": ("factor",),
}  # fmt: skip
# The parameters of each RoPE type that transformers requires and does not fill in itself
# (rope_theta from the top level, original_max_position_embeddings from
# max_position_embeddings). Found by the sixty-fourth round: a yarn RoPE without its factor
# was transformers' KeyError naming `rope_parameters`, not the file's rope_scaling. A test
# holds them to transformers'.
ROPE_REQUIRED = {
    "linear": ("factor",),
    "dynamic": ("factor",),
    "yarn": ("factor",),
    "longrope": ("short_factor", "long_factor"),
    "llama3": ("factor", "low_freq_factor", "high_freq_factor"),
}
_ROPE_FACTOR = f"a RoPE scaling factor is a number in 1..{MAX_ROPE_FACTOR:,}"
_ROPE_POSITIVE = f"a number > 0 and at most {MAX_ROPE_FACTOR:,}"


# The families whose models rotate positions (RoPE): the others' config classes have no
# rope_parameters, and a test holds this to transformers'.
ROTARY_FAMILIES = ("llama",)


def rotary_problem(config: dict[str, Any], family: str) -> str | None:
    """A RoPE key (rope_scaling, rope_theta, rope_parameters, partial_rotary_factor, any rope_*
    or *rotary*) in the config of a family without rotary position embeddings, in words, or
    None. Found by the twenty-second round: a BERT's rope_scaling was built with transformers'
    FutureWarning on stderr and kept (as rope_parameters) in the export, meaning nothing.

        rotary_problem({"rope_theta": 10000.0}, "bert")
        # "rope_theta is given but a bert model has no rotary position embeddings …"
    """
    if family in ROTARY_FAMILIES:
        return None
    for key in config:
        if key.startswith("rope_") or "rotary" in key:
            return (
                f"{key} is given but a {family} model has no rotary position embeddings (RoPE: "
                f"{', '.join(ROTARY_FAMILIES)}); transformers would keep it unread: remove it"
            )
    return None


def rope_problem(config: dict[str, Any]) -> str | None:
    """What is wrong with the config's RoPE parameters, in words, or None: rope_theta at the top
    and inside rope_parameters / rope_scaling (where transformers keeps it), and each scaling
    parameter of those objects, named by its key path:

        rope_problem({"rope_scaling": {"rope_type": "linear", "factor": 0.0}})
        # "rope_scaling.factor is 0.0; a RoPE scaling factor is a number in 1..1,000,000"
    """
    if "rope_theta" in config and not _rope_base(config["rope_theta"]):
        return f"rope_theta is {shown(config['rope_theta'])}; {_ROPE_BASE}"
    if "partial_rotary_factor" in config and (
        why := _partial_problem(config["partial_rotary_factor"], _rope_kind(config))
    ):
        return f"partial_rotary_factor is {shown(config['partial_rotary_factor'])}; {why}"
    for outer in ("rope_parameters", "rope_scaling"):
        inner = config.get(outer)
        if isinstance(inner, dict) and (why := _rope_parameters_problem(inner, config)):
            return f"{outer}.{why}"
    return None


def _rope_kind(config: dict[str, Any]) -> Any:
    """The RoPE type the config's rope_parameters (or rope_scaling) names; "default" without."""
    for outer in ("rope_parameters", "rope_scaling"):
        inner = config.get(outer)
        if isinstance(inner, dict):
            return inner.get("rope_type", inner.get("type", "default"))
    return "default"


def _partial_problem(value: Any, kind: Any) -> str | None:
    """Why `value` is no partial_rotary_factor for a Llama RoPE of type `kind`, or None. Its
    rotary layer takes the whole head (its default RoPE reads no share, the scaled types' a
    share shorter than the head fails), but a proportional RoPE rotates that share of the
    head and leaves the rest unrotated (the fifty-ninth round: 0.5 was refused, which
    transformers builds and recommends)."""
    if kind == "proportional":
        return None if _in(value, 0, 1) else "a share of the head in 0..1"
    return None if _number(value) and value == 1 else _WHOLE_HEADS


def _rope_base(value: Any) -> bool:
    return _number(value) and FLOAT32_TINY <= value <= MAX_ROPE_BASE


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _in(value: Any, low: float, high: float, *, low_open: bool = False) -> bool:
    """A number in [low, high] (or (low, high] with `low_open`)."""
    return _number(value) and (low < value if low_open else low <= value) and value <= high


def _rope_parameters_problem(rope: dict[str, Any], config: dict[str, Any]) -> str | None:
    """`rope_problem` for one object of RoPE parameters: "factor is 0.0; …" (its key path
    without the object's name), or None."""
    kind = rope.get("rope_type", rope.get("type", "default"))
    key = "rope_type" if "rope_type" in rope else "type"
    if kind not in ROPE_TYPES:
        return f"{key} is {shown(kind)}; one of {', '.join(ROPE_TYPES)}"
    read = (*_ROPE_COMMON[2:], *ROPE_KEYS[kind])
    unread = [name for name in rope if name not in _ROPE_COMMON[:2] and name not in read]
    if unread:
        name = unread[0] if unread[0].isidentifier() else shown(unread[0])
        return (
            f"{name} is not a parameter of a {kind} RoPE, which transformers would ignore (a "
            f"{kind} RoPE's are {', '.join(sorted(read))}): remove it"
        )
    checks: dict[str, tuple[Callable[[Any], bool], str]] = {
        "rope_theta": (_rope_base, _ROPE_BASE),
        "factor": (lambda v: _in(v, 1, MAX_ROPE_FACTOR), _ROPE_FACTOR),
        "attention_factor": (lambda v: _in(v, 0, MAX_ROPE_FACTOR, low_open=True), _ROPE_POSITIVE),
        "beta_fast": (lambda v: _in(v, 0, MAX_ROPE_FACTOR, low_open=True), _ROPE_POSITIVE),
        "beta_slow": (lambda v: _in(v, 0, MAX_ROPE_FACTOR, low_open=True), _ROPE_POSITIVE),
        "mscale": (lambda v: _in(v, 0, MAX_ROPE_FACTOR), f"a number in 0..{MAX_ROPE_FACTOR:,}"),
        "mscale_all_dim": (
            lambda v: _in(v, 0, MAX_ROPE_FACTOR),
            f"a number in 0..{MAX_ROPE_FACTOR:,}",
        ),
        "low_freq_factor": (lambda v: _in(v, 0, MAX_ROPE_FACTOR, low_open=True), _ROPE_POSITIVE),
        "high_freq_factor": (lambda v: _in(v, 0, MAX_ROPE_FACTOR, low_open=True), _ROPE_POSITIVE),
        "original_max_position_embeddings": (
            lambda v: type(v) is int and v >= 1,
            "an integer ≥ 1",
        ),
        "truncate": (lambda v: isinstance(v, bool), "true or false"),
    }
    # null: transformers' default (YaRN and LongRoPE derive the factor from the lengths).
    optional = {"attention_factor", "beta_fast", "beta_slow", "mscale", "mscale_all_dim"}
    if kind in ("yarn", "longrope"):
        optional |= {"factor", "original_max_position_embeddings"}
    for name, (fits, words) in checks.items():
        value = rope.get(name)
        if name in rope and not fits(value) and not (value is None and name in optional):
            return f"{name} is {shown(value)}; {words}"
    if "partial_rotary_factor" in rope and (
        why := _partial_problem(rope["partial_rotary_factor"], kind)
    ):
        return f"partial_rotary_factor is {shown(rope['partial_rotary_factor'])}; {why}"
    for name in ("short_factor", "long_factor"):
        if name in rope and (why := _factor_list_problem(rope[name], config, rope)):
            return f"{name} {why}"
    # After the values: a wrong one beside a missing one is named first (each is refused).
    required = ROPE_REQUIRED.get(kind, ())
    if missing := [name for name in required if name not in rope]:
        return f"{missing[0]} is missing; a {kind} RoPE needs {_and(required)}"
    return _rope_order_problem(rope)


def _and(names: tuple[str, ...]) -> str:
    """("a", "b", "c") → "a, b and c"."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def heads_problem(config: dict[str, Any]) -> str | None:
    """Llama heads transformers' config class refuses, in words naming config.json's fields,
    or None: a hidden_size that is no multiple of num_attention_heads (head_dim given or
    not), a head whose RoPE would rotate an odd number of dimensions (above 4: its test
    models' heads are allowed). Found by the sixty-fourth round: head_dim 7 was transformers'
    StrictDataclassClassValidationError text.

        heads_problem({"head_dim": 7})   # "head_dim is 7; a RoPE rotates …"
    """
    hidden, heads = config.get("hidden_size"), config.get("num_attention_heads")
    sized = type(hidden) is int and type(heads) is int and heads >= 1  # else refused elsewhere
    if sized and hidden % heads:
        return f"hidden_size {hidden} is not a multiple of num_attention_heads {heads}"
    head_dim, named = config.get("head_dim"), "head_dim is {}"  # as the message names it
    if head_dim is None:
        if not sized:
            return None
        head_dim = hidden // heads
        named = f"hidden_size {hidden} / num_attention_heads {heads} is a head of {{}} dimensions"
    share = config.get("partial_rotary_factor", 1.0)
    for outer in ("rope_parameters", "rope_scaling"):
        inner = config.get(outer)
        if isinstance(inner, dict):
            share = inner.get("partial_rotary_factor", share)
            break
    if type(head_dim) is not int or not _number(share) or head_dim <= 4 or head_dim % 2 == 0:
        return None
    if int(head_dim * share) != head_dim:  # a part of the head: transformers rounds it up
        return None
    return (
        f"{named.format(head_dim)}; a RoPE rotates a head's dimensions in pairs: an even "
        "number of them (or at most 4)"
    )


def _factor_list_problem(factors: Any, config: dict[str, Any], rope: dict[str, Any]) -> str | None:
    """LongRoPE's short_factor / long_factor: one number per rotary frequency, which divides
    it in float32 (1e-320 is 0 there: an infinite frequency)."""
    if not isinstance(factors, list) or not all(
        _in(f, FLOAT32_TINY, MAX_ROPE_FACTOR) for f in factors
    ):
        return (
            f"is {shown(factors)}; a list of numbers > 0, at least float32's least normal "
            f"number ({FLOAT32_TINY:.8g}) and at most {MAX_ROPE_FACTOR:,}"
        )
    frequencies = _rotary_frequencies(config, rope)
    if frequencies is not None and len(factors) != frequencies:
        return (
            f"has {len(factors)} factors; one per rotary frequency: {frequencies} "
            "(head_dim × partial_rotary_factor / 2)"
        )
    return None


def _rotary_frequencies(config: dict[str, Any], rope: dict[str, Any]) -> int | None:
    """The frequencies a RoPE of this config rotates with, as transformers counts them: int(
    head_dim × partial_rotary_factor) // 2; None when a size is missing (refused elsewhere)."""
    head_dim = config.get("head_dim")
    if type(head_dim) is not int:
        hidden, heads = config.get("hidden_size"), config.get("num_attention_heads")
        if type(hidden) is not int or type(heads) is not int or heads < 1:
            return None
        head_dim = hidden // heads
    share = rope.get("partial_rotary_factor", 1.0)
    return int(head_dim * share) // 2 if _number(share) else None


def _rope_order_problem(rope: dict[str, Any]) -> str | None:
    """The pairs transformers orders: YaRN's beta_fast ≥ beta_slow (defaults 32 and 1), Llama
    3's high_freq_factor > low_freq_factor (equal ones divide by zero)."""
    fast, slow = rope.get("beta_fast") or 32, rope.get("beta_slow") or 1
    if fast < slow:
        return f"beta_fast is {quoted(fast)} but beta_slow is {quoted(slow)}; beta_fast ≥ beta_slow"
    low, high = rope.get("low_freq_factor"), rope.get("high_freq_factor")
    if low is not None and high is not None and not high > low:
        return (
            f"high_freq_factor is {quoted(high)} but low_freq_factor is {quoted(low)}; "
            "high_freq_factor > low_freq_factor"
        )
    return None


def token_id_problem(
    config: dict[str, Any], defaults: dict[str, Any], keys: tuple[str, ...] = TOKEN_ID_KEYS
) -> str | None:
    """Every token id the config names among `keys` (an int, or a list of ints for eos) in
    0..vocab_size − 1, but a value equal to its config class's default (`defaults`).

        token_id_problem({"vocab_size": 128, "eos_token_id": -5}, {})
        # "eos_token_id -5 is not a token id of its vocabulary (0..127)"
    """
    vocab = config.get("vocab_size")
    if type(vocab) is not int:
        return None  # a model without one (an image model), or refused as a size elsewhere
    for key in keys:
        value = config.get(key)
        if value is None or value == defaults.get(key):
            continue
        ids = value if isinstance(value, list) else [value]
        if not ids or not all(type(i) is int and 0 <= i < vocab for i in ids):
            return f"{key} {quoted(value)} is not a token id of its vocabulary (0..{vocab - 1})"
    return None


# --------------------------------------------------------------------------- generation

# A model folder's generation_config.json: `from_pretrained` of a decoder reads it and
# `save_pretrained` writes it into the export, where `generate` uses it. Found by the nineteenth
# round: read by transformers with none of config.json's checks (max_length -5, temperature NaN,
# eos_token_id beyond the vocabulary exported as found). The twentieth round found the rest of
# GenerationConfig's fields unchecked (bad_words_ids [[999999]], max_length 10^20, min_length
# above max_length): every field is now in one of the tables below, by kind, and a test walks
# GenerationConfig's own fields so one transformers adds is not left out.
# The token ids `generate` stops at, pads with or forces.
GENERATION_TOKEN_ID_KEYS = (*TOKEN_ID_KEYS, "forced_bos_token_id", "forced_eos_token_id")
# A count or length `generate` reads: at most what an int32 holds (the tensors and loops it
# sizes; max_length 10^20 does not even fit an int64). Positions are no bound: rotary models
# (Llama) generate beyond max_position_embeddings.
MAX_GENERATION_COUNT = 2**31 - 1


def _integer(value: Any) -> bool:
    return type(value) is int


def _count(low: int) -> Callable[[Any], bool]:
    """An integer from `low` to MAX_GENERATION_COUNT:  _count(1)(0)   # False"""
    return lambda v: _integer(v) and low <= v <= MAX_GENERATION_COUNT


def _strings(value: Any) -> bool:
    """A non-empty string or a non-empty list of them (stop_strings)."""
    items = value if isinstance(value, list) else [value]
    return bool(items) and all(isinstance(s, str) and s for s in items)


def _decay(value: Any) -> bool:
    """exponential_decay_length_penalty: [start index ≥ 0, decay factor > 0]."""
    return (
        isinstance(value, list)
        and len(value) == 2
        and _count(0)(value[0])
        and _number(value[1])
        and value[1] > 0
    )


def _float_or_one(value: Any) -> bool:
    """A factor transformers' processors take: a float, or the integer 1 that turns them off
    (TemperatureLogitsWarper and RepetitionPenaltyLogitsProcessor refuse the integer 2)."""
    return isinstance(value, float) or value == 1


_UPTO = f"at most {MAX_GENERATION_COUNT}"
_FLOAT = "written as a float (transformers refuses an integer other than 1)"
# (keys, what a value must be, that in words): the settings `generate` reads, each unset (null)
# or valid. transformers refuses none of these when it reads the file.
GENERATION_RANGES: tuple[tuple[tuple[str, ...], Any, str], ...] = (
    (
        ("max_length", "max_new_tokens", "max_cache_len", "prefill_chunk_size"),
        _count(1),
        f"a length in tokens is an integer ≥ 1 and {_UPTO}",
    ),
    (
        ("min_length", "min_new_tokens"),
        _count(0),
        f"a length in tokens is an integer ≥ 0 and {_UPTO}",
    ),
    (
        ("num_beams", "num_return_sequences", "num_beam_groups", "num_assistant_tokens"),
        _count(1),
        f"a count is an integer ≥ 1 and {_UPTO}",
    ),
    (
        ("prompt_lookup_num_tokens", "max_matching_ngram_size"),
        _count(1),
        f"a count is an integer ≥ 1 and {_UPTO}",
    ),
    (
        ("top_k", "no_repeat_ngram_size", "encoder_no_repeat_ngram_size"),
        _count(0),
        f"an integer ≥ 0 (0: off) and {_UPTO}",
    ),
    (
        ("assistant_early_exit", "assistant_lookbehind", "target_lookbehind"),
        _count(0),
        f"a layer or token index is an integer ≥ 0 and {_UPTO}",
    ),
    (("top_p", "min_p"), lambda v: _number(v) and 0 <= v <= 1, "a probability is in [0, 1]"),
    # Found by the twenty-first round: held to [0, 1], while transformers' warpers refuse a
    # mass of 0 (TypicalLogitsWarper, TopHLogitsWarper) and a cutoff of 1 (it cuts every token).
    (
        ("typical_p", "top_h"),
        lambda v: _number(v) and 0 < v <= 1,
        "a probability mass is in (0, 1]",
    ),
    (
        ("epsilon_cutoff", "eta_cutoff"),
        lambda v: _number(v) and 0 <= v < 1,
        "a cutoff probability is in [0, 1) (0: off)",
    ),
    (
        ("assistant_confidence_threshold", "penalty_alpha"),
        lambda v: _number(v) and 0 <= v <= 1,
        "a probability is in [0, 1]",
    ),
    (("temperature",), lambda v: _number(v) and v >= 0, "a temperature is a number ≥ 0"),
    # RepetitionPenaltyLogitsProcessor refuses an integer factor but 1 (the one it skips).
    (
        ("repetition_penalty", "encoder_repetition_penalty"),
        lambda v: _number(v) and v > 0 and _float_or_one(v),
        f"a penalty factor is a number > 0 {_FLOAT}",
    ),
    (("diversity_penalty",), lambda v: _number(v) and v >= 0, "a penalty is a number ≥ 0"),
    (("length_penalty",), _number, "a number"),
    # The weight of the prompt's scores against the unconditional ones (1: off, below 1 toward
    # the unconditional ones); below 0 the unconditional scores are pushed away from.
    (("guidance_scale",), lambda v: _number(v) and v >= 0, "a guidance scale is a number ≥ 0"),
    (("max_time",), lambda v: _number(v) and v > 0, "a time in seconds is a number > 0"),
    (
        (
            "do_sample",
            "use_cache",
            "output_attentions",
            "output_hidden_states",
            "output_scores",
            "output_logits",
            "return_dict_in_generate",
            "remove_invalid_values",
            "renormalize_logits",
            "low_memory",
            "token_healing",
            "disable_compile",
            "is_assistant",
            "use_mtp",
            "_from_model_config",
        ),
        lambda v: type(v) is bool,
        "a switch is true or false",
    ),
    (
        ("num_assistant_tokens_schedule",),
        lambda v: v in ("heuristic", "heuristic_transient", "constant"),
        "one of heuristic, heuristic_transient, constant",
    ),
    (
        ("dola_layers",),
        lambda v: v in ("low", "high") or (isinstance(v, list) and all(_count(0)(i) for i in v)),
        "low, high or a list of layer indices (integers ≥ 0)",
    ),
    (("stop_strings",), _strings, "a non-empty string or a list of them"),
    (
        ("exponential_decay_length_penalty",),
        _decay,
        "[start index, decay factor]: an integer ≥ 0 and a number > 0",
    ),
    (("transformers_version",), lambda v: isinstance(v, str), "a version is a string"),
    # Constraint objects have no JSON form: a file holding any is not transformers'.
    (("constraints",), lambda v: v == [], "Constraint objects cannot be stored in a file"),
)
# Fields whose values transformers itself refuses when it reads the file (GenerationConfig's
# validate, run by from_dict: the message then says "not a generation config transformers
# reads") or that configure transformers' own machinery, not the numbers `generate` decodes with.
GENERATION_LEFT_TO_TRANSFORMERS = (
    "early_stopping",  # true, false or "never"
    "assistant_ensemble_weight",  # in (0, 1)
    "cache_implementation",  # one of transformers' caches
    "compile_config",  # a CompileConfig: none in a file
    "cache_config",  # options of the cache transformers builds
    "continuous_batching_config",  # options of transformers' serving loop
    "speculation_type",  # names transformers' speculative decoders
)


# What a part of a field holds: its token ids, or None when the part is not of its shape.
IdsOf = Callable[[Any], list[Any] | None]


def _ids(value: Any, depth: int) -> list[Any] | None:
    """The items of a list nested `depth` deep whose inner lists are non-empty, or None when
    `value` is not one:

        _ids([[1, 2], [3]], 2)   # [1, 2, 3]
        _ids([[1], []], 2)       # None
    """
    if depth == 0:
        return [value]
    if not isinstance(value, list):
        return None
    items: list[Any] = []
    for item in value:
        inner = _ids(item, depth - 1)
        if inner is None or (depth > 1 and not item):
            return None
        items += inner
    return items


def _force_words_ids(value: Any) -> list[Any] | None:
    """force_words_ids: a list of words, each a list of ids or a list of alternatives."""
    if not isinstance(value, list):
        return None
    words = [_ids(w, 1) if w and not isinstance(w[0], list) else _ids(w, 2) for w in value]
    if any(not isinstance(w, list) or not w for w in value) or None in words:
        return None
    return [i for word in words for i in word]  # type: ignore[union-attr]


def _pairs(value: Any, first: IdsOf, second: IdsOf) -> list[Any] | None:
    """The ids of a list of [a, b] pairs, `first(a) + second(b)` for each (either None: the
    pair is not valid), or None:

        _pairs([[[5, 6], 1.5]], _nonempty_ids, _no_ids_if_float)   # [5, 6]
    """
    if not isinstance(value, list):
        return None
    ids: list[Any] = []
    for pair in value:
        if not (isinstance(pair, list) and len(pair) == 2):
            return None
        a, b = first(pair[0]), second(pair[1])
        if a is None or b is None:
            return None
        ids += a + b
    return ids


def _nonempty_ids(value: Any) -> list[Any] | None:
    return _ids(value, 1) or None


def _no_ids_if_float(value: Any) -> list[Any] | None:
    """A bias: SequenceBiasLogitsProcessor refuses an integer one (the twenty-first round)."""
    return [] if isinstance(value, float) else None


def _no_ids_if_position(value: Any) -> list[Any] | None:
    return [] if _count(0)(value) else None


# key → (its token ids, or None when it is not of its shape; the shape in words): the fields
# that hold token ids in lists, each id inside the vocabulary.
GENERATION_TOKEN_LISTS: dict[str, tuple[IdsOf, str]] = {
    "suppress_tokens": (lambda v: _ids(v, 1), "a list of token ids"),
    "begin_suppress_tokens": (lambda v: _ids(v, 1), "a list of token ids"),
    "bad_words_ids": (lambda v: _ids(v, 2), "a list of non-empty lists of token ids"),
    "force_words_ids": (_force_words_ids, "a list of non-empty lists (or lists of lists) of ids"),
    # As transformers writes it: [[ids, bias], …] (a dict's keys would be strings in JSON).
    "sequence_bias": (
        lambda v: _pairs(v, _nonempty_ids, _no_ids_if_float),
        "a list of [token ids, bias] pairs, each bias a float",
    ),
    # Whisper's legacy [position, token id] pairs: transformers keeps it as an extra attribute.
    "forced_decoder_ids": (
        lambda v: _pairs(v, _no_ids_if_position, lambda i: [i]),
        "a list of [position, token id] pairs",
    ),
}
# Keys GenerationConfig no longer defines but still reads as extra attributes.
GENERATION_LEGACY_KEYS = ("forced_decoder_ids",)
# (smaller, larger): the lengths and counts one setting bounds another by.
GENERATION_ORDER = (
    ("min_length", "max_length"),
    ("min_new_tokens", "max_new_tokens"),
)


def _sampling_problem(generation: dict[str, Any]) -> str | None:
    """With do_sample true, the temperature TemperatureLogitsWarper divides the scores by:
    greater than 0 and a float unless 1 (the warper it skips). Without sampling it is unused
    (0 is a common way of saying greedy), so only the range table holds it.

        _sampling_problem({"do_sample": True, "temperature": 0.0})
        # "temperature is 0.0 with do_sample true; a sampling temperature is a number > 0 …"
    """
    value = generation.get("temperature")
    if generation.get("do_sample") is not True or value is None:
        return None
    if value > 0 and _float_or_one(value):
        return None
    return (
        f"temperature is {shown(value, 80)} with do_sample true; a sampling temperature is a "
        f"number > 0 {_FLOAT}"
    )


def _beam_group_problem(generation: dict[str, Any]) -> str | None:
    """Group beam search splits num_beams (1 when unset, as transformers defaults it) into
    num_beam_groups groups of equal size: at most num_beams of them, and dividing it.

        _beam_group_problem({"num_beam_groups": 3})
        # "num_beam_groups is 3, above num_beams 1; …"
    """
    groups = generation.get("num_beam_groups")
    beams = generation.get("num_beams")
    beams = 1 if beams is None else beams
    if groups is None or groups == 1:
        return None
    if groups > beams:
        return (
            f"num_beam_groups is {groups}, above num_beams {beams}; group beam search splits "
            "the beams into at most num_beams groups"
        )
    if beams % groups:
        return (
            f"num_beam_groups is {groups}, which does not divide num_beams {beams}; group "
            "beam search splits the beams into groups of equal size"
        )
    return None


# WatermarkingConfig's keys (transformers makes one of a watermarking_config object), each with
# what it must be as generate()'s WatermarkLogitsProcessor takes it: (valid, in words).
WATERMARKING_KEYS: dict[str, tuple[Callable[[Any], bool], str]] = {
    # The processor refuses 0 and 1 (WatermarkingConfig.validate allows them).
    "greenlist_ratio": (
        lambda v: _number(v) and 0 < v < 1,
        "a share of the vocabulary is a number in (0, 1) (generate's watermark refuses 0 and 1)",
    ),
    "bias": (_number, "a bias (added to the green tokens' scores) is a number"),
    # torch.Generator.manual_seed's range; 2^64 raised inside generate().
    "hashing_key": (
        lambda v: _integer(v) and -(2**63) <= v <= 2**64 - 1,
        "a seed is an integer from -2^63 to 2^64 - 1",
    ),
    "seeding_scheme": (lambda v: v in ("lefthash", "selfhash"), "one of lefthash, selfhash"),
    "context_width": (_count(1), f"a count of tokens is an integer ≥ 1 and {_UPTO}"),
}


def _watermarking_problem(generation: dict[str, Any]) -> str | None:
    """watermarking_config is null or an object of `WATERMARKING_KEYS`, each valid, checked
    here rather than by transformers: its validate quoted seeding_scheme's value for a wrong
    greenlist_ratio (twenty-fourth round: `... but found lefthash` for 5), and an unknown key
    was a TypeError of WatermarkingConfig's constructor.

        _watermarking_problem({"watermarking_config": {"greenlist_ratio": 5}})
        # "watermarking_config.greenlist_ratio is 5; a share of the vocabulary is a number …"
    """
    value = generation.get("watermarking_config")
    if value is None:
        return None
    keys = ", ".join(WATERMARKING_KEYS)
    if not isinstance(value, dict):
        return f"watermarking_config is {shown(value, 80)}; an object of {keys}, or null"
    for key, item in value.items():
        if key not in WATERMARKING_KEYS:
            return f"watermarking_config has an unknown key {quoted(key)}; its keys are {keys}"
        valid, words = WATERMARKING_KEYS[key]
        if not valid(item):
            return f"watermarking_config.{key} is {shown(item, 80)}; {words}"
    return None


# Found by the twenty-first round: rules between fields that transformers' generate() enforces
# (its warpers, group beam search), each a function of the whole file, its ranges already held;
# and the keys of a field that is an object (`_watermarking_problem`).
GENERATION_RULES: tuple[Callable[[dict[str, Any]], str | None], ...] = (
    _sampling_problem,
    _beam_group_problem,
    _watermarking_problem,
)


def generation_fields() -> set[str]:
    """Every generation_config.json key the tables above check or leave to transformers, by
    name (a test holds it to GenerationConfig's own fields)."""
    keys = {key for keys, _, _ in GENERATION_RANGES for key in keys}
    keys |= {*GENERATION_TOKEN_ID_KEYS, *GENERATION_TOKEN_LISTS, *GENERATION_LEFT_TO_TRANSFORMERS}
    keys.add("watermarking_config")  # its keys: `_watermarking_problem`
    return keys - {"sep_token_id", "cls_token_id"}  # config.json's, not GenerationConfig's


def generation_value_problem(generation: dict[str, Any], vocab: Any, family: str) -> str | None:
    """What is wrong with a generation_config.json's values, in words, or None: the values of
    `GENERATION_RANGES` valid, the pairs of `GENERATION_ORDER` in order, `GENERATION_RULES`
    between fields kept (what generate() refuses), and (a text model,
    `vocab` its config.json's vocab_size) every token id inside the vocabulary but its family's
    defaults, as config.json's are.

        generation_value_problem({"max_length": -5}, 128, "gpt2")
        # "max_length is -5; a length in tokens is an integer ≥ 1 and at most 2147483647"
        generation_value_problem({"bad_words_ids": [[99999]]}, 128, "gpt2")
        # "bad_words_ids holds 99999, not a token id of its vocabulary (0..127)"
    """
    if (why := _generation_range_problem(generation)) is not None:
        return why
    if type(vocab) is not int:
        return None  # an image model: no token ids
    ids = {**generation, "vocab_size": vocab}  # the model's vocabulary, not a key of this file
    defaults = DEFAULT_TOKEN_IDS.get(family, {})
    if (why := token_id_problem(ids, defaults, GENERATION_TOKEN_ID_KEYS)) is not None:
        return why
    for key, (found, shape) in GENERATION_TOKEN_LISTS.items():
        value = generation.get(key)
        if value is None:
            continue
        if (items := found(value)) is None:
            return f"{key} is {shown(value, 80)}; {shape}"
        # The first id that is wrong, not the list: it may hold a whole vocabulary.
        for i in items:
            if not (_integer(i) and 0 <= i < vocab):
                return f"{key} holds {quoted(i)}, not a token id of its vocabulary (0..{vocab - 1})"
    beams = generation.get("num_beams")
    # Beam search scores every beam over the whole vocabulary in one tensor.
    if beams is not None and beams * vocab > MAX_GENERATION_COUNT:
        return (
            f"num_beams is {beams}; beam search scores num_beams × vocab_size ({vocab}) "
            f"tokens at once, {_UPTO}"
        )
    return None


def generation_keys_problem(config: dict[str, Any], family: str) -> str | None:
    """The generation settings a config.json holds (old transformers wrote them there), held
    to generation_config.json's rules (`generation_value_problem`, with the config's own
    vocabulary), in words, or None:

        generation_keys_problem({"do_sample": True, "temperature": -1.0}, "gpt2")
        # "temperature is -1.0; a temperature is a number ≥ 0"

    Found by the twenty-third round: without a generation_config.json, transformers lifts them
    into the model's generation config (`GenerationConfig.from_model_config`), and temperature
    -1 with do_sample, num_beams "3" and max_length -5 were accepted and exported in the
    trained model's generation_config.json."""
    fields = generation_fields()
    lifted = {key: value for key, value in config.items() if key in fields}
    return generation_value_problem(lifted, config.get("vocab_size"), family) if lifted else None


def _generation_range_problem(generation: dict[str, Any]) -> str | None:
    """`generation_value_problem` for the tables that need no vocabulary."""
    for keys, valid, words in GENERATION_RANGES:
        for key in keys:
            value = generation.get(key)
            if value is not None and not valid(value):
                return f"{key} is {shown(value, 80)}; {words}"
    for low, high in GENERATION_ORDER:
        small, large = generation.get(low), generation.get(high)
        if small is not None and large is not None and small > large:
            return f"{low} is {small}, above {high} {large}; it is at most {high}"
    return next((why for rule in GENERATION_RULES if (why := rule(generation)) is not None), None)


# --------------------------------------------------------------------------- sizes

# Parameters a config may ask for: a stated bound far above any model pipeplan can build whole
# (Llama-3-405B has 4 × 10^11); `pipeplan.models` also holds a model to the memory it is built
# in. Found by the eighteenth round: vocab_size 10^9 was allocated (128 GB) and the failure
# blamed the weights file.
MAX_PARAMETERS = 10**12
# A parameter's bytes as models are built (float32).
PARAMETER_BYTES = 4
# Each family's own config keys for the sizes its dictionary keeps (transformers'
# attribute_map maps hidden_size etc. to these; the dictionary holds the family's names).
_KEYS = {
    "distilbert": {
        "hidden": "dim",
        "inner": "hidden_dim",
        "layers": "n_layers",
        "heads": "n_heads",
    },
    "gpt2": {"hidden": "n_embd", "inner": "n_inner", "layers": "n_layer", "heads": "n_head"},
}
_GPT2_POSITIONS = "n_positions"
_COMMON_KEYS = {
    "hidden": "hidden_size",
    "inner": "intermediate_size",
    "layers": "num_hidden_layers",
    "heads": "num_attention_heads",
}
# A dimension of a tensor: the config key (or expression) it comes from and its value.
Dim = tuple[str, int]


def model_sizes(config: dict[str, Any], family: str) -> dict[str, Dim] | None:
    """Each size that shapes the model's tensors, by role, with its config key, or None when one
    is missing or not an integer ≥ 1 (refused elsewhere, or a partial profile config):

        model_sizes({"n_embd": 64, "n_inner": None, ...}, "gpt2")["inner"]   # ("4 × n_embd", 256)
    """
    sizes, needed = _role_sizes(config, family)
    if not all(_size(sizes[role]) for role in needed):
        return None
    return {role: sizes[role] for role in needed}


def missing_size(config: dict[str, Any], family: str) -> str | None:
    """The config key of the first size `model_sizes` needs that `config` does not state as an
    integer ≥ 1, or None: missing_size({"model_type": "bert", "hidden_size": 128}, "bert") is
    "intermediate_size"."""
    sizes, needed = _role_sizes(config, family)
    return next((sizes[role][0] for role in needed if not _size(sizes[role])), None)


def _role_sizes(
    config: dict[str, Any], family: str
) -> tuple[dict[str, tuple[str, Any]], list[str]]:
    """Every size by role (its config key, its value or None), and the roles `family` needs."""
    keys = {**_COMMON_KEYS, **_KEYS.get(family, {})}
    keys |= {"vocab": "vocab_size", "positions": "max_position_embeddings"}
    keys |= {"types": "type_vocab_size", "embedding": "embedding_size"}
    keys |= {"kv": "num_key_value_heads", "head_dim": "head_dim", "channels": "num_channels"}
    keys |= {"patch": "patch_size", "image": "image_size"}
    if family == "gpt2":
        keys["positions"] = _GPT2_POSITIONS
    sizes = {role: (key, config.get(key)) for role, key in keys.items()}
    if family == "gpt2" and sizes["inner"][1] is None and _size(sizes["hidden"]):
        sizes["inner"] = ("4 × n_embd", 4 * sizes["hidden"][1])  # GPT-2's MLP when unset
    if family == "llama":
        if sizes["kv"][1] is None:
            sizes["kv"] = sizes["heads"]  # multi-head attention
        if sizes["head_dim"][1] is None and _size(sizes["hidden"]) and _size(sizes["heads"]):
            hidden, heads = sizes["hidden"][1], sizes["heads"][1]
            sizes["head_dim"] = ("hidden_size / num_attention_heads", hidden // heads)
    return sizes, ["hidden", "inner", "layers", "heads", *_FAMILY_ROLES.get(family, [])]


_FAMILY_ROLES = {
    "bert": ["vocab", "positions", "types"],
    "roberta": ["vocab", "positions", "types"],
    "electra": ["vocab", "positions", "types", "embedding"],
    "distilbert": ["vocab", "positions"],
    "vit": ["channels", "patch", "image"],
    "deit": ["channels", "patch", "image"],
    "gpt2": ["vocab", "positions"],
    "llama": ["vocab", "kv", "head_dim"],
}


def _size(dim: tuple[str, Any]) -> bool:
    return type(dim[1]) is int and dim[1] >= 1


def implied_shapes(config: dict[str, Any], family: str) -> list[tuple[tuple[str, ...], list[Dim]]]:
    """The shapes of the tensors that pin each size, as config.json implies them: (the tensor's
    key endings in a checkpoint, new and legacy names; its dimensions). Empty when a size is
    missing. A checkpoint's header is held to them before anything is built:

        implied_shapes({"vocab_size": 128, "hidden_size": 32, ...}, "bert")[0]
        # (("embeddings.word_embeddings.weight",), [("vocab_size", 128), ("hidden_size", 32)])
    """
    s = model_sizes(config, family)
    if s is None:
        return []
    hidden, inner = s["hidden"], s["inner"]
    if family in ("bert", "roberta", "electra", "distilbert"):
        width = s.get("embedding", hidden)
        shapes = [
            (("embeddings.word_embeddings.weight",), [s["vocab"], width]),
            (("embeddings.position_embeddings.weight",), [s["positions"], width]),
        ]
        if family == "distilbert":
            shapes.append((("layer.0.attention.q_lin.weight",), [hidden, hidden]))
            return [*shapes, (("layer.0.ffn.lin1.weight",), [inner, hidden])]
        shapes.append((("embeddings.token_type_embeddings.weight",), [s["types"], width]))
        if width != hidden:
            shapes.append((("embeddings_project.weight",), [hidden, width]))
        shapes.append((("layer.0.attention.self.query.weight",), [hidden, hidden]))
        return [*shapes, (("layer.0.intermediate.dense.weight",), [inner, hidden])]
    if family in ("vit", "deit"):
        patch = s["patch"]
        tokens = (s["image"][1] // patch[1]) ** 2 + (2 if family == "deit" else 1)
        where = "(image_size / patch_size)² + " + ("2" if family == "deit" else "1")
        return [
            (
                ("embeddings.patch_embeddings.projection.weight",),
                [hidden, s["channels"], patch, patch],
            ),
            (("embeddings.position_embeddings",), [("1", 1), (where, tokens), hidden]),
            (
                ("layer.0.attention.attention.query.weight", "layers.0.attention.q_proj.weight"),
                [hidden, hidden],
            ),
            (
                ("layer.0.intermediate.dense.weight", "layers.0.mlp.fc1.weight"),
                [inner, hidden],
            ),
        ]
    if family == "gpt2":
        return [
            (("wte.weight",), [s["vocab"], hidden]),
            (("wpe.weight",), [s["positions"], hidden]),
            (("h.0.attn.c_proj.weight",), [hidden, hidden]),  # Conv1D: (in, out)
            (("h.0.mlp.c_fc.weight",), [hidden, inner]),
        ]
    heads, kv, head_dim = s["heads"], s["kv"], s["head_dim"]
    query = (f"{heads[0]} × {head_dim[0]}", heads[1] * head_dim[1])
    keys = (f"{kv[0]} × {head_dim[0]}", kv[1] * head_dim[1])
    return [
        (("embed_tokens.weight",), [s["vocab"], hidden]),
        (("layers.0.self_attn.q_proj.weight",), [query, hidden]),
        (("layers.0.self_attn.k_proj.weight",), [keys, hidden]),
        (("layers.0.mlp.gate_proj.weight",), [inner, hidden]),
    ]


def parameter_terms(
    config: dict[str, Any], family: str, task: str | None = None
) -> list[tuple[int, list[Dim]]]:
    """The model's parameters as config.json implies them, in terms (count, the sizes it
    grows with): the vocabulary and position tables, the blocks, the head. Empty when a size
    is missing. Their sum is the model's parameter count (a test holds it to transformers')."""
    s = model_sizes(config, family)
    if s is None:
        return []
    block, grows = _block_term(config, s, family)
    blocks = (s["layers"][1] * block, [s["layers"], *grows])
    return [*_embedding_terms(s, family), blocks, _head_term(config, s, family, task)]


def layer_parameters(
    config: dict[str, Any], family: str, task: str | None = None
) -> dict[str, tuple[int, list[Dim]]] | None:
    """The parameters of each kind of layer of pipeplan's layer sequence (`models.FAMILIES`'
    cuts) as config.json implies them, with the sizes each grows with: the embeddings, one
    block, the head, which holds its own copy of a tied LM head (`models._untie`). None when a
    size is missing. The very terms of `parameter_terms` (a test holds both to transformers'
    models, layer by layer); a profile's layers are held to them.

        layer_parameters(bert_tiny_config, "bert")["block"]
        # (198272, [("hidden_size", 128), ("intermediate_size", 512)])
    """
    s = model_sizes(config, family)
    if s is None:
        return None
    embeddings = _embedding_terms(s, family)
    grows = list(dict.fromkeys(dim for _, dims in embeddings for dim in dims))
    return {
        "embeddings": (sum(count for count, _ in embeddings), grows),
        "block": _block_term(config, s, family),
        "head": _head_term(config, s, family, task, untied=True),
    }


def _block_term(config: dict[str, Any], s: dict[str, Dim], family: str) -> tuple[int, list[Dim]]:
    """One block's parameters and the sizes they grow with: attention, MLP, two norms."""
    h, i = s["hidden"][1], s["inner"][1]
    if family == "llama":
        q, kv = s["heads"][1] * s["head_dim"][1], s["kv"][1] * s["head_dim"][1]
        block = 2 * h * q + 2 * h * kv + 3 * h * i + 2 * h
        block += (q + 2 * kv + h) * bool(config.get("attention_bias"))
        block += (2 * i + h) * bool(config.get("mlp_bias"))
        # A bias flag that adds weights is named beside the sizes (as 1: set).
        biases = [(key, 1) for key in ("attention_bias", "mlp_bias") if config.get(key)]
        return block, [s["hidden"], s["inner"], s["heads"], s["kv"], s["head_dim"], *biases]
    block = 4 * (h * h + h) + 2 * h * i + i + h + 4 * h
    if family in ("vit", "deit") and config.get("qkv_bias") is False:
        # Query, key and value without their biases (named as 0: unset).
        return block - 3 * h, [s["hidden"], s["inner"], ("qkv_bias", 0)]
    return block, [s["hidden"], s["inner"]]


def label_count(config: dict[str, Any]) -> int:
    """The labels a classifier of this config has: id2label's, else num_labels (default 2)."""
    id2label = config.get("id2label")
    if isinstance(id2label, dict):
        return len(id2label)
    labels = config.get("num_labels")
    return labels if type(labels) is int and labels >= 1 else 2


def default_class_names(count: int) -> list[str]:
    """The names transformers gives `count` classes a config does not name: LABEL_0, …"""
    return [f"LABEL_{i}" for i in range(count)]


def class_names(config: dict[str, Any]) -> list[str] | None:
    """What each row of a classifier of this config means: its id2label's names in id order,
    else `default_class_names` of `label_count`; None when its label map is refused
    (`label_map_problem`: the model's build names why).

        class_names({"id2label": {"0": "pos", "1": "neg"}})   # ["pos", "neg"]
        class_names({"num_labels": 3})                         # ["LABEL_0", "LABEL_1", "LABEL_2"]
    """
    if label_map_problem(config) is not None:
        return None
    id2label = config.get("id2label")
    if not isinstance(id2label, dict):
        return default_class_names(label_count(config))
    by_id = {int(key): name for key, name in id2label.items()}  # keys 0..n-1, checked above
    return [by_id[i] for i in range(len(by_id))]


def _embedding_terms(s: dict[str, Dim], family: str) -> list[tuple[int, list[Dim]]]:
    h = s["hidden"][1]
    if family in ("vit", "deit"):
        c, p, image = s["channels"][1], s["patch"][1], s["image"][1]
        tokens = (image // p) ** 2 + (2 if family == "deit" else 1)
        extra = 2 * h if family == "deit" else h  # cls (and distillation) token
        patches = h * c * p * p + h + extra + tokens * h
        return [(patches, [s["image"], s["patch"], s["channels"], s["hidden"]])]
    width = s.get("embedding", s["hidden"])
    e = width[1]
    tables = [
        s[role] for role in ("vocab", "positions", "types") if role in s
    ]  # Llama: no positions
    terms = [(rows * e, [(key, rows), width]) for key, rows in tables]
    norm = 0 if family in ("gpt2", "llama") else 2 * e
    project = e * h + h if e != h else 0  # ELECTRA's embeddings_project
    return [*terms, (norm + project, [width])]


def _head_term(
    config: dict[str, Any],
    s: dict[str, Dim],
    family: str,
    task: str | None,
    *,
    untied: bool = False,
) -> tuple[int, list[Dim]]:
    """The head's parameters and the sizes they grow with; a causal LM's tied head counts
    its own copy with `untied` (pipeplan's layers), else only when the config unties it."""
    h = s["hidden"][1]
    labels = ("num_labels", label_count(config))
    classifier = labels[1] * h + labels[1]
    if family in ("vit", "deit"):
        return 2 * h + classifier, [s["hidden"], labels]
    if family in ("gpt2", "llama"):
        norm = 2 * h if family == "gpt2" else h
        if task == "classification":
            return norm + labels[1] * h, [s["hidden"], labels]  # score, no bias
        untied = untied or config.get("tie_word_embeddings") is False
        return norm + untied * s["vocab"][1] * h, [s["vocab"], s["hidden"]]
    return h * h + h + classifier, [s["hidden"], labels]  # pooler or classifier.dense


def size_problem(
    config: dict[str, Any],
    family: str,
    task: str | None = None,
    limit: int = MAX_PARAMETERS,
    bound: str = f"a model has at most {MAX_PARAMETERS:,} parameters",
) -> str | None:
    """The config's size in words when it asks for more than `limit` parameters, or None; it
    names the largest size of the largest term (`bound` says what the limit is):

        size_problem({"vocab_size": 10**15, ...}, "bert")
        # "vocab_size 1000000000000000 makes a model of 768,000,000,…; a model has at most …"
    """
    terms = parameter_terms(config, family, task)
    total = sum(count for count, _ in terms)
    if total <= limit:
        return None
    _, dims = max(terms, key=lambda term: term[0])
    # A size the file states (not GPT-2's derived 4 × n_embd: n_embd is named instead).
    stated = [dim for dim in dims if dim[0] in config] or dims
    key, value = max(stated, key=lambda dim: dim[1])
    gib = total * PARAMETER_BYTES / 2**30
    return (
        f"{key} {value} makes a model of {total:,} parameters ({gib:,.1f} GiB in float32); {bound}"
    )
