"""The values of a tokenizer folder's tokenizer_config.json, checked by a table of its known
keys (as generation_config.json's are, `modelconfig.GENERATION_RANGES`): each of its JSON
type and range, strict (a string is no switch), special tokens as text or transformers'
AddedToken object, added_tokens_decoder's ids and contents, a chat template of bounded size,
file names inside the folder; a key the table does not know holds plain JSON of bounded size.
No transformers and no torch: the values are checked before a tokenizer class reads them.

    tokenizer_config_problem({"do_lower_case": "yes"})
    # "do_lower_case is 'yes'; a switch is true or false"
    tokenizer_config_problem({"model_max_length": 4}, length=16)
    # "model_max_length is 4, below --seq-len 16; …"

Found by the twenty-first round: transformers read each of these without a word
(do_lower_case "yes", model_max_length -1, tokenizer_file "/etc/passwd", a name_or_path of
5,000 characters), and the round-20 check held the padding and truncation sides only.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import PurePosixPath, PureWindowsPath
from typing import Any

from pipeplan.errors import quoted
from pipeplan.formats.base import MAX_TEXT

# The largest chat template pipeplan reads: real ones are a few KB (the longest seen, tool-use
# templates, some 20 KB); the template is text `apply_chat_template` compiles with Jinja.
MAX_CHAT_TEMPLATE = 1 << 20
# The largest value of a key the table does not know, as JSON: transformers keeps such a value
# as an init argument of the tokenizer class (and writes it back with the export's tokenizer).
MAX_UNKNOWN_VALUE = 64 << 10
# transformers' model_max_length when a tokenizer states none (int(1e30), "no limit").
NO_LENGTH_LIMIT = int(1e30)


def _switch(value: Any) -> bool:
    return type(value) is bool


def _text(value: Any) -> bool:
    """A string of at most MAX_TEXT characters (a name, class or version)."""
    return isinstance(value, str) and len(value) <= MAX_TEXT


def _count(low: int) -> Callable[[Any], bool]:
    """An integer ≥ `low` (a JSON integer: 4.0 and true are not):  _count(1)(0)   # False"""
    return lambda v: type(v) is int and v >= low


def _texts(value: Any) -> bool:
    """A list of non-empty strings (model_input_names, never_split)."""
    return isinstance(value, list) and all(isinstance(s, str) and s and _text(s) for s in value)


# The flags of transformers' AddedToken as tokenizer_config.json writes it.
ADDED_TOKEN_FLAGS = ("single_word", "lstrip", "rstrip", "normalized", "special")


def _token(value: Any) -> bool:
    """A special token: its text, or the AddedToken object transformers writes
    ({"content": "[PAD]", "lstrip": false, …, "__type": "AddedToken"})."""
    if isinstance(value, str):
        return bool(value) and _text(value)
    if not isinstance(value, dict) or not _text(value.get("content")) or not value["content"]:
        return False
    flags = {k: v for k, v in value.items() if k not in ("content", "__type")}
    return (
        value.get("__type", "AddedToken") == "AddedToken"
        and set(flags) <= set(ADDED_TOKEN_FLAGS)
        and all(_switch(v) for v in flags.values())
    )


def _tokens(value: Any) -> bool:
    """additional_special_tokens: a list of tokens (extra_special_tokens may also name them)."""
    if isinstance(value, dict):
        return all(_text(k) and _token(v) for k, v in value.items())
    return isinstance(value, list) and all(_token(t) for t in value)


def _chat_template(value: Any) -> bool:
    """A template's text, or a list of named ones ([{"name": "default", "template": "…"}])."""
    if isinstance(value, str):
        return True
    return isinstance(value, list) and all(
        isinstance(t, dict)
        and set(t) == {"name", "template"}
        and _text(t["name"])
        and isinstance(t["template"], str)
        for t in value
    )


_SWITCH = "a switch is true or false"
# (keys, what a value must be, that in words): each key unset (null) or valid. transformers
# refuses none of these when it reads the file.
TOKENIZER_RANGES: tuple[tuple[tuple[str, ...], Callable[[Any], bool], str], ...] = (
    (
        (
            "do_lower_case",
            "clean_up_tokenization_spaces",
            "split_special_tokens",
            "add_prefix_space",
            "add_bos_token",
            "add_eos_token",
            "legacy",
            "use_default_system_prompt",
            "tokenize_chinese_chars",
            "do_basic_tokenize",
            "strip_accents",
            "trim_offsets",
            "spaces_between_special_tokens",
            "fix_mistral_regex",
            "verbose",
            "is_local",
            "local_files_only",
        ),
        _switch,
        _SWITCH,
    ),
    (
        ("model_max_length", "max_len"),
        _count(1),
        # The no-limit value as the integer it must be written as: "1e+30" here read as the
        # refused float's own spelling (the sixty-ninth round).
        f"a length in tokens is an integer ≥ 1 ({NO_LENGTH_LIMIT}, an integer, for no limit)",
    ),
    (("pad_to_multiple_of",), _count(1), "a multiple is an integer ≥ 1"),
    (("pad_token_type_id",), _count(0), "a token type id is an integer ≥ 0"),
    (
        ("name_or_path", "tokenizer_class", "processor_class", "backend", "transformers_version"),
        _text,
        f"a name, class or version is a string of at most {MAX_TEXT} characters",
    ),
    (("errors",), lambda v: v in ("strict", "replace", "ignore"), "strict, replace or ignore"),
    (("wordpieces_prefix",), lambda v: isinstance(v, str) and 0 < len(v) <= 16, "a short prefix"),
    (("model_input_names", "never_split"), _texts, "a list of non-empty strings"),
    (
        ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token"),
        _token,
        "a token is its text or an AddedToken object (content, and flags true or false)",
    ),
    (
        ("mask_token",),
        _token,
        "a token is its text or an AddedToken object (content, and flags true or false)",
    ),
    (
        ("additional_special_tokens", "extra_special_tokens"),
        _tokens,
        "a list of tokens, each its text or an AddedToken object",
    ),
    (
        ("chat_template",),
        _chat_template,
        'a template\'s text, or a list of {"name": …, "template": …} objects',
    ),
    (("sp_model_kwargs",), lambda v: isinstance(v, dict), "an object of sentencepiece options"),
    (("init_inputs",), lambda v: v == [], "a saved tokenizer's positional arguments: []"),
)
# The sides a tokenizer pads and cuts on: a type check only. pipeplan pads and cuts every
# training text on the right whatever they say (`executor.text.tokenize`): many decoder
# tokenizers ship padding_side 'left' for batched generation, which is no reason to refuse them.
SIDE_KEYS = ("padding_side", "truncation_side")
# Keys naming a file the tokenizer reads: transformers 5 takes the folder's own files instead,
# but a reader of the file sees the path it names.
FILE_KEY_SUFFIX = "_file"


# Keys transformers' tokenizer reads that the tables leave to the rule for unknown keys (plain
# JSON of bounded size): chat and response parsing, a loader's bookkeeping; none changes the
# tokens a text becomes.
TOKENIZER_LEFT_AS_JSON = (
    "chat_control_tokens",
    "response_template",
    "response_schema",
    "files_loaded",
    "model_specific_special_tokens",
    "clean_up_tokenization_spaces_for_bpe_even_though_it_will_corrupt_output",
)


def tokenizer_fields() -> set[str]:
    """Every key the tables above check, by name."""
    keys = {key for keys, _, _ in TOKENIZER_RANGES for key in keys}
    return keys | set(SIDE_KEYS) | {"added_tokens_decoder", "auto_map"}


def tokenizer_config_problem(
    config: dict[str, Any], *, length: int | None = None, vocab: int | None = None
) -> str | None:
    """What is wrong with a tokenizer_config.json's values, in words, or None. `length`: the
    --seq-len texts are padded or cut to (model_max_length may not be below it); `vocab`: the
    model's vocab_size (added_tokens_decoder's ids are inside it).

        tokenizer_config_problem({"tokenizer_file": "/etc/passwd"})
        # "tokenizer_file is '/etc/passwd'; a file the tokenizer reads lies in its folder …"
    """
    for check in (_range_problem, _side_problem, _file_problem, _unknown_problem):
        if (why := check(config)) is not None:
            return why
    if (why := added_tokens_problem(config.get("added_tokens_decoder"), vocab)) is not None:
        return why
    return _length_problem(config.get("model_max_length"), length)


def _range_problem(config: dict[str, Any]) -> str | None:
    for keys, valid, words in TOKENIZER_RANGES:
        for key in keys:
            value = config.get(key)
            if value is not None and not valid(value):
                return f"{key} is {quoted(value, 80)}; {words}"
    template = config.get("chat_template")
    size = len(json.dumps(template)) if template is not None else 0
    if size > MAX_CHAT_TEMPLATE:
        return f"chat_template is {size:,} characters long; at most {MAX_CHAT_TEMPLATE:,}"
    return None


def _side_problem(config: dict[str, Any]) -> str | None:
    """A side is 'right' or 'left' (transformers refuses anything else when it pads)."""
    for side in SIDE_KEYS:
        value = config.get(side)
        if value is not None and value not in ("right", "left"):
            return f"{side} is {quoted(value, 80)}; it is 'right' or 'left'"
    return None


def _file_problem(config: dict[str, Any]) -> str | None:
    """A key naming a file holds a relative path inside the folder (or null)."""
    for key, value in config.items():
        if not key.endswith(FILE_KEY_SUFFIX) or value is None:
            continue
        if not _text(value):
            return f"{key} is {quoted(value, 80)}; a file name is a string of at most {MAX_TEXT}"
        if not _inside(value):
            return (
                f"{key} is {quoted(value, 80)}; a file the tokenizer reads lies in its folder "
                "(a relative path without '..'): remove the key or name the folder's file"
            )
    return None


def _inside(name: str) -> bool:
    """Whether a relative path stays in its folder, read as POSIX and as Windows spells it:
    `_inside("tokenizer.json")` True; `_inside("../x")`, `_inside("/etc/passwd")` False."""
    if not name or "\0" in name:
        return False
    for path in (PurePosixPath(name), PureWindowsPath(name)):
        if path.is_absolute() or path.drive or path.root or ".." in path.parts:
            return False
    return True


def _unknown_problem(config: dict[str, Any]) -> str | None:
    """A key the tables do not know holds plain JSON (no NaN or infinity) of bounded size."""
    known = tokenizer_fields()
    for key, value in config.items():
        if key in known or key.endswith(FILE_KEY_SUFFIX):
            continue
        if len(key) > MAX_TEXT:
            return f"a key is {len(key):,} characters long; at most {MAX_TEXT}"
        try:
            text = json.dumps(value, allow_nan=False)
        except ValueError:
            return f"{quoted(key)} holds {quoted(value, 80)}; NaN and infinity are not JSON"
        if len(text) > MAX_UNKNOWN_VALUE:
            return (
                f"{quoted(key)} holds {len(text):,} characters of JSON; a key pipeplan does not "
                f"know holds at most {MAX_UNKNOWN_VALUE:,}"
            )
    return None


def added_tokens_problem(decoder: Any, vocab: int | None) -> str | None:
    """added_tokens_decoder: {"id": AddedToken object}, each id a decimal integer ≥ 0 (below
    `vocab`, the model's vocab_size, when given) and each content a non-empty string.

        added_tokens_problem({"500": {"content": "[X]"}}, 128)
        # "added_tokens_decoder holds id 500, not a token id of the vocabulary (0..127)"
    """
    if decoder is None:
        return None
    if not isinstance(decoder, dict):
        return f"added_tokens_decoder is {quoted(decoder, 80)}; an object of id → token"
    for key, token in decoder.items():
        if not (key.isascii() and key.isdigit() and (key == "0" or not key.startswith("0"))):
            return f"added_tokens_decoder has key {quoted(key, 80)}; a token id is an integer ≥ 0"
        if not (isinstance(token, dict) and _token(token)):
            return (
                f"added_tokens_decoder[{key}] is {quoted(token, 80)}; an AddedToken object "
                "(a non-empty content string, and flags true or false)"
            )
        if vocab is not None and int(key) >= vocab:
            return (
                f"added_tokens_decoder holds id {key}, not a token id of the vocabulary "
                f"(0..{vocab - 1})"
            )
    return None


def _length_problem(limit: Any, length: int | None) -> str | None:
    """model_max_length below --seq-len: the tokenizer was made for shorter texts than those
    the run pads and cuts to (positions beyond it were never trained)."""
    if length is None or limit is None or limit >= length:
        return None
    return (
        f"model_max_length is {limit}, below --seq-len {length}; a text is at most "
        f"{limit} tokens for this tokenizer: pass --seq-len {limit} or less"
    )
