"""Hostile data and model inputs, by class: CSV columns named twice or rows of another width,
a single class, a garbled tokenizer JSON, weights stored with an integer dtype or holding NaN
(in a model folder and in a run's own checkpoint), and data edited after a run started. Each
case asserts exit code 2, one line `pipeplan: error: …` naming the file and what is wrong,
and that no file changed (`refused`). Runs are `--prepare-only` unless the case needs a
checkpoint (the shared `finished_run`, conftest)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shlex
import shutil
import signal
import struct
import subprocess
import sys
import textwrap
import threading
import time
import traceback
import types
import typing
from pathlib import Path

import pytest
import torch
from conftest import with_links
from test_hostile import copy_run, refused
from text_data import BERT, bert_checkpoint, make_tokenizer, reviews, write_jsonl

import cli
from executor import faults, leftovers
from executor import text as text_files
from pipeplan import models
from pipeplan.errors import InputFileError


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("hostile-data")
    checkpoint = bert_checkpoint(root / "bert")
    return dict(
        tokenizer=make_tokenizer(root / "tok"),
        checkpoint=checkpoint,
        profile=profile(checkpoint, root / "profile.json"),
        # Data of three classes builds a head of three outputs: its profile (twenty-seventh round).
        profile3=profile(checkpoint, root / "profile3.json", "--num-labels", "3"),
    )


def profile(model: Path, out: Path, *more: str) -> Path:
    """A quick profile of `model` for padded text of 12 tokens: what `run` plans with."""
    args = ["profile", str(model), "--seq-len", "12", "--padding-mask", "--warmup", "0", *more]
    args += ["--micro-batch-sizes", "1,2,4", "--repeats", "1", "--out", str(out)]
    assert cli.main(args) == 0
    return with_links(out)  # measured links, as a run on 2 ranks wants them


def prepare(made, tmp_path, data: Path, **paths: Path) -> list[str]:
    """`pipeplan run --prepare-only` of the BERT checkpoint on `data` (model and tokenizer
    replaceable through `paths`), into tmp_path/runs/r."""
    model, tok = paths.get("model", made["checkpoint"]), paths.get("tokenizer", made["tokenizer"])
    profile = paths.get("profile", made["profile"])
    return [
        "run", "--prepare-only", "--model", str(model), "--data", str(data),
        "--tokenizer", str(tok), "--seq-len", "12", "--global-batch", "4",
        "--profile", str(profile),
        "--name", "r", "--runs-dir", str(tmp_path / "runs"),
    ]  # fmt: skip


def csv_file(tmp_path: Path, header: str, rows: list[str]) -> Path:
    path = tmp_path / "data.csv"
    path.write_text("\n".join([header, *rows]) + "\n")
    return path


GOOD_ROWS = [f"great film {i},positive" if i % 2 else f"dull plot {i},negative" for i in range(20)]


def test_a_tokenizer_file_given_for_its_folder_is_said_so(made, tmp_path, capsys):
    """Found by the fifty-ninth round: `--tokenizer TOK/tokenizer.json` (a user's natural
    try: `--model` takes a config.json file) was "no such tokenizer directory" of a file that
    exists. The line says it is no directory and names the folder to give; by the sixtieth,
    without saying that folder holds a tokenizer.json (a WordPiece folder's vocab.txt, given,
    was told of "the one holding tokenizer.json")."""
    data = csv_file(tmp_path, "text,label", GOOD_ROWS)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        given = made["tokenizer"] / name
        assert given.is_file()
        said = f"{given}: not a directory; --tokenizer takes the tokenizer's folder (the one "
        said += f"holding this file: {made['tokenizer']})"
        refused(prepare(made, tmp_path, data, tokenizer=given), tmp_path, capsys, said)


def test_a_csv_header_naming_a_column_twice(made, tmp_path, capsys):
    """`text,text,label`: DictReader let the last `text` column win, silently."""
    data = csv_file(tmp_path, "text,text,label", [f"a{i},b{i},{i % 2}" for i in range(20)])
    refused(prepare(made, tmp_path, data), tmp_path, capsys, ("data.csv", "'text' more than once"))


@pytest.mark.timeout(60)
def test_a_csv_header_of_many_columns_is_read_in_seconds(tmp_path):
    """Found by the twentieth round (beside F3, label checks quadratic in the labels): a
    column named twice was looked for with header.count per column, quadratic in a header
    of 200,000 columns (400 KB, within the file's limits)."""
    import time

    from executor.text import read_corpus

    data = csv_file(tmp_path, "text," + "c," * 200_000 + "c", GOOD_ROWS)
    start = time.process_time()
    with pytest.raises(InputFileError, match="names column 'c' more than once"):
        read_corpus(str(data))
    assert time.process_time() - start < 5


UNKNOWN_KEYS = {  # what: (file name, content, the fragments the one line must hold)
    "jsonl 'lable' on every row": (
        "d.jsonl",
        "".join(
            json.dumps({"text": r["text"], "lable": r["label"]}) + "\n" for r in reviews(20, 3)
        ),
        ("d.jsonl:1:", "unknown key 'lable'", "did you mean 'label'?"),
    ),
    "jsonl one row with an extra key": (
        "d.jsonl",
        "".join(
            json.dumps({**r, "extra": "x"} if i == 4 else r) + "\n"
            for i, r in enumerate(reviews(20, 3))
        ),
        ("d.jsonl:5:", "unknown key 'extra'"),
    ),
    "csv header 'lable'": (
        "d.csv",
        "text,lable\n" + "\n".join(f"t{i},{i % 2}" for i in range(20)) + "\n",
        ("d.csv:1:", "unknown column 'lable'", "did you mean 'label'?"),
    ),
    "csv extra column": (
        "d.csv",
        "id,text,label\n" + "\n".join(f"{i},t{i},{i % 2}" for i in range(20)) + "\n",
        ("d.csv:1:", "unknown column 'id'"),
    ),
}


@pytest.mark.parametrize("case", UNKNOWN_KEYS, ids=str)
def test_an_unknown_key_in_text_data_is_refused(made, tmp_path, capsys, case):
    """Found by the twenty-second round: unknown keys of a JSONL row were ignored, so rows
    spelling "lable" made a GPT-2 run train causal-LM on labelled data silently (BERT said
    only "task 'causal-lm' is not available"), and a row with an extra key was accepted.
    Each is refused naming file:line, the key and the nearest known one; CSV columns alike."""
    name, content, fragments = UNKNOWN_KEYS[case]
    data = tmp_path / name
    data.write_text(content)
    refused(prepare(made, tmp_path, data), tmp_path, capsys, fragments)


def test_a_mistyped_label_key_does_not_read_as_plain_text(tmp_path):
    """Found by the twenty-second round: read_corpus, which decides the task for a decoder
    too, read rows keyed "lable" as unlabelled text (a causal-LM run, no word said)."""
    from executor.text import read_corpus

    rows = [{"text": r["text"], "lable": r["label"]} for r in reviews(20, seed=3)]
    with pytest.raises(InputFileError, match=r"unknown key 'lable'.*did you mean 'label'"):
        read_corpus(str(write_jsonl(tmp_path / "d.jsonl", rows)))


@pytest.mark.parametrize(
    "row, fields", [("a,b,c,d", "4 fields"), ("only text", "1 fields")], ids=["more", "fewer"]
)
def test_a_csv_row_of_another_width_than_the_header(made, tmp_path, capsys, row, fields):
    """Extra fields went under the key None and a new class could appear; missing ones were
    None. Either is refused naming file:line and both counts."""
    data = csv_file(tmp_path, "text,label", [*GOOD_ROWS[:3], row, *GOOD_ROWS[3:]])
    refused(prepare(made, tmp_path, data), tmp_path, capsys, ("data.csv:5", fields, "2 columns"))


@pytest.mark.parametrize("label", ["positive", 0], ids=["a name", "id 0"])
def test_classification_data_of_a_single_class(made, tmp_path, capsys, label):
    """One class built a 1-output head, which transformers reads as regression."""
    rows = [{**row, "label": label} for row in reviews(20, seed=3)]
    data = write_jsonl(tmp_path / "one.jsonl", rows)
    refused(prepare(made, tmp_path, data), tmp_path, capsys, ("one.jsonl", "has 1 class"))


def test_a_garbled_tokenizer_config(made, tmp_path, capsys):
    """Invalid JSON in tokenizer_config.json was reported as a tokenizer without a pad token."""
    tok = Path(shutil.copytree(made["tokenizer"], tmp_path / "tok"))
    (tok / "tokenizer_config.json").write_text('{"pad_token": "[PAD]",')
    data = write_jsonl(tmp_path / "r.jsonl", reviews(20, seed=1))
    argv = prepare(made, tmp_path, data, tokenizer=tok)
    refused(argv, tmp_path, capsys, ("tokenizer_config.json", "cannot be read as JSON"))


TOKENIZER_CONFIG_EDITS = {  # tokenizer_config.json's fields → the one line's fragment
    "a class that fails to load": (
        {"tokenizer_class": "T5Tokenizer"},
        "cannot load the tokenizer_class 'T5Tokenizer' it names",
    ),
    "custom code": (
        {"auto_map": {"AutoTokenizer": ["tok.Tok", None]}, "tokenizer_class": "Tok"},
        "auto_map names custom tokenizer code; pipeplan runs no code from a folder",
    ),
    "padding side": ({"padding_side": "middle"}, "padding_side is 'middle'; it is 'right' or"),
    "truncation side": ({"truncation_side": 3}, "truncation_side is 3; it is 'right' or 'left'"),
}


def _refused_tokenizer_config(made, tmp_path, capsys, fields: dict, fragment: str) -> None:
    """`run --prepare-only` with the tokenizer's tokenizer_config.json updated by `fields`:
    one line naming that file, holding `fragment`, and nothing changed."""
    tok = Path(shutil.copytree(made["tokenizer"], tmp_path / "tok"))
    config = json.loads((tok / "tokenizer_config.json").read_text())
    (tok / "tokenizer_config.json").write_text(json.dumps({**config, **fields}))
    data = write_jsonl(tmp_path / "r.jsonl", reviews(20, seed=1))
    argv = prepare(made, tmp_path, data, tokenizer=tok)
    refused(argv, tmp_path, capsys, (f"{tok / 'tokenizer_config.json'}: ", fragment))


@pytest.mark.parametrize("edit", TOKENIZER_CONFIG_EDITS)
def test_a_tokenizer_config_field_that_cannot_load_is_named(made, tmp_path, capsys, edit):
    """Found by the twentieth round: a tokenizer_class that fails to load, an auto_map (custom
    code; none ran) or a padding_side of 'middle' fell back to the bare tokenizer.json and
    was refused as "the tokenizer has no pad token" (it has one). The field is named, and
    auto_map is refused before transformers sees it (unset, trust_remote_code asks on a
    terminal whether to run the folder's code)."""
    fields, fragment = TOKENIZER_CONFIG_EDITS[edit]
    _refused_tokenizer_config(made, tmp_path, capsys, fields, fragment)


_TOKEN_FLAGS = {"lstrip": False, "rstrip": False, "normalized": False, "special": True}
# tokenizer_config.json's fields of the wrong type or out of range → the one line's fragment.
TOKENIZER_CONFIG_VALUES = {
    "a string for a switch": ({"do_lower_case": "yes"}, "do_lower_case is 'yes'; a switch is"),
    "a string for clean-up": (
        {"clean_up_tokenization_spaces": "x"},
        "clean_up_tokenization_spaces is 'x'; a switch is true or false",
    ),
    "a negative length": ({"model_max_length": -1}, "model_max_length is -1; a length in"),
    "a length as a float": ({"model_max_length": 512.0}, "model_max_length is 512.0; a length"),
    # The sixty-ninth round: the hint named "1e+30", the refused float's own spelling.
    "no limit as a float": (
        {"model_max_length": 1e30},
        "model_max_length is 1e+30; a length in tokens is an integer ≥ 1 "
        "(1000000000000000019884624838656, an integer, for no limit)",
    ),
    "a length below --seq-len": (
        {"model_max_length": 4},
        "model_max_length is 4, below --seq-len 12; ",
    ),
    "a file outside the folder": (
        {"tokenizer_file": "/etc/passwd"},
        "tokenizer_file is '/etc/passwd'; a file the tokenizer reads lies in its folder",
    ),
    "a file above the folder": ({"vocab_file": "../vocab.txt"}, "vocab_file is '../vocab.txt';"),
    "a name of 5,000 characters": (
        {"name_or_path": "n" * 5000},
        "(5000 characters); a name, class or version is a string of at most 4096",
    ),
    "a special token of no text": ({"pad_token": {"content": 3}}, "pad_token is {'content': 3}"),
    "an added token beyond the vocabulary": (
        {"added_tokens_decoder": {"500": {"content": "[X]", **_TOKEN_FLAGS}}},
        "added_tokens_decoder holds id 500, not a token id of the vocabulary (0..127)",
    ),
    "an added token id that is no integer": (
        {"added_tokens_decoder": {"x1": {"content": "[X]", **_TOKEN_FLAGS}}},
        "added_tokens_decoder has key 'x1'; a token id is an integer ≥ 0",
    ),
    "an added token of no content": (
        {"added_tokens_decoder": {"5": {"content": "", **_TOKEN_FLAGS}}},
        "added_tokens_decoder[5] is ",
    ),
    "a chat template that is a number": ({"chat_template": 5}, "chat_template is 5; a template"),
    "a chat template of 2 MiB": (
        {"chat_template": "{{ x }}" * 300_000},
        "chat_template is 2,100,002 characters long; at most 1,048,576",
    ),
    "an unknown key holding NaN": ({"extra": float("nan")}, "'extra' holds nan; NaN and"),
    "an unknown key holding 100,000 items": (
        {"extra": list(range(100_000))},
        "'extra' holds 688,890 characters of JSON; a key pipeplan does not know holds at most",
    ),
}


@pytest.mark.parametrize("edit", TOKENIZER_CONFIG_VALUES)
def test_a_tokenizer_config_value_of_the_wrong_type_or_range(made, tmp_path, capsys, edit):
    """Found by the twenty-first round: run --prepare-only accepted tokenizer_config.json's
    do_lower_case "yes", clean_up_tokenization_spaces "x", model_max_length -1 and 4 (below
    --seq-len), tokenizer_file "/etc/passwd" and a name_or_path of 5,000 characters, exit 0 and
    no word. Each key is held to its table (`tokenizerconfig.TOKENIZER_RANGES`): one line
    naming the file and the key."""
    fields, fragment = TOKENIZER_CONFIG_VALUES[edit]
    _refused_tokenizer_config(made, tmp_path, capsys, fields, fragment)


def test_a_chat_template_file_is_held_to_the_keys_bound(made, tmp_path, capsys):
    """Found by the fiftieth round: transformers' own chat_template.jinja of 22 MB passed
    unchecked (the tokenizer_config.json key is held to 1 MiB) and was copied into the
    trained model. The file is held to the key's bound, and hashed with the tokenizer."""
    tok = Path(shutil.copytree(made["tokenizer"], tmp_path / "tok"))
    (tok / "chat_template.jinja").write_text("{{ x }}" * 300_000)
    data = write_jsonl(tmp_path / "r.jsonl", reviews(20, seed=1))
    argv = prepare(made, tmp_path, data, tokenizer=tok)
    fragment = "a chat template of 2,100,000 characters; at most 1,048,576 in all"
    refused(argv, tmp_path, capsys, (f"{tok / 'chat_template.jinja'}: ", fragment))


@pytest.mark.parametrize(
    "templates, fragment",
    [
        ({"big.jinja": "{{ x }}" * 300_000}, "big.jinja: a chat template of 2,100,000 characters"),
        (
            {"a.jinja": "{{ x }}" * 100_000, "b.jinja": "{{ y }}" * 100_000},
            "b.jinja: a chat template of 700,000 characters (with 700,000 in the ones before it)",
        ),
        ({"f.jinja": None}, "f.jinja: "),  # a folder of a template's name
        # The fifty-second round: data.json's record of it was a traceback.
        ({"a\nb.jinja": "{{ x }}"}, "a\\nb.jinja': holds the control character U+000A"),
    ],
    ids=["one large", "two together", "a folder", "a line feed in its name"],
)
def test_additional_chat_templates_are_held_to_the_bound(
    made, tmp_path, capsys, templates, fragment
):
    """Found by the fifty-first round: transformers also reads every
    `additional_chat_templates/*.jinja`; 30 MB there went into an export unchecked, and a
    sparse 3 GiB file was a MemoryError blamed on tokenizer_config.json. They are held to the
    chat template's bound, together with chat_template.jinja, each a regular file."""
    tok = Path(shutil.copytree(made["tokenizer"], tmp_path / "tok"))
    folder = tok / "additional_chat_templates"
    folder.mkdir()
    for name, text in templates.items():
        (folder / name).mkdir() if text is None else (folder / name).write_text(text)
    data = write_jsonl(tmp_path / "r.jsonl", reviews(20, seed=1))
    argv = prepare(made, tmp_path, data, tokenizer=tok)
    refused(argv, tmp_path, capsys, (f"{folder}", fragment))


@pytest.mark.parametrize("name", ["tokenizer_config.json", "special_tokens_map.json"])
def test_a_pad_token_not_in_the_vocabulary_is_named(made, tmp_path, capsys, name):
    """Found by the twenty-fifth round: a pad_token of '[NOPE]', in none of the tokenizer's
    files, was added by transformers as a new id past the vocabulary, and the line said "the
    tokenizer pads with id 120 but the model's pad_token_id is 0; … set pad_token_id in the
    model's config.json", advice for an id the vocabulary does not have. The file naming the
    pad token is named, and the token as not in the vocabulary."""
    tok = Path(shutil.copytree(made["tokenizer"], tmp_path / "tok"))
    config = json.loads((tok / "tokenizer_config.json").read_text())
    if name == "tokenizer_config.json":
        config["pad_token"] = "[NOPE]"
    else:  # transformers reads special_tokens_map.json's when the config has none
        del config["pad_token"]
        (tok / name).write_text(json.dumps({"pad_token": "[NOPE]"}))
    (tok / "tokenizer_config.json").write_text(json.dumps(config))
    data = write_jsonl(tmp_path / "r.jsonl", reviews(20, seed=1))
    argv = prepare(made, tmp_path, data, tokenizer=tok)
    fragment = "pad_token '[NOPE]' is not in the tokenizer's vocabulary (loading added it as a new"
    refused(argv, tmp_path, capsys, (f"{tok / name}: ", fragment))


# Special tokens a tokenizer's files may name outside its vocabulary: (file, fields).
UNKNOWN_SPECIAL_TOKENS = {
    "bos_token": ("tokenizer_config.json", {"bos_token": "[NOPE]"}),
    "eos_token": ("tokenizer_config.json", {"eos_token": "[NOPE]"}),
    "unk_token": ("tokenizer_config.json", {"unk_token": "[NOPE]"}),
    "sep_token": ("tokenizer_config.json", {"sep_token": "[NOPE]"}),
    "cls_token": ("tokenizer_config.json", {"cls_token": "[NOPE]"}),
    "mask_token": ("special_tokens_map.json", {"mask_token": "[NOPE]"}),
    "additional_special_tokens entry": (
        "special_tokens_map.json",
        {"additional_special_tokens": ["[CLS]", "[NOPE]"]},
    ),
    "extra_special_tokens entry": (
        "tokenizer_config.json",
        {"extra_special_tokens": {"image_token": "[NOPE]"}},
    ),
}


@pytest.mark.parametrize("key", UNKNOWN_SPECIAL_TOKENS)
def test_a_special_token_not_in_the_vocabulary_is_named(made, tmp_path, capsys, key):
    """Found by the twenty-sixth round: a bos_token (or unk_token) of '[NOPE]' in
    tokenizer_config.json, in none of the tokenizer's files, loaded silently as a new id past
    the vocabulary (117 of a 117-word tokenizer and model); data holding the token's text was
    then refused naming the data ("has token ids in 0..117 but model … has vocab_size 117"),
    not the file. Every special token is held to the vocabulary as pad_token is: the file and
    key are named."""
    name, fields = UNKNOWN_SPECIAL_TOKENS[key]
    tok = Path(shutil.copytree(made["tokenizer"], tmp_path / "tok"))
    document = json.loads((tok / name).read_text()) if (tok / name).is_file() else {}
    (tok / name).write_text(json.dumps({**document, **fields}))
    data = write_jsonl(tmp_path / "r.jsonl", reviews(20, seed=1))
    argv = prepare(made, tmp_path, data, tokenizer=tok)
    fragment = f"{key} '[NOPE]' is not in the tokenizer's vocabulary (loading added it as a new"
    refused(argv, tmp_path, capsys, (f"{tok / name}: ", fragment))


def test_special_tokens_the_saved_tokenizer_added_pass(tmp_path):
    """Found by the twenty-sixth round: bos and other special tokens outside the vocabulary
    loaded silently. The other side (the twenty-fifth round's, for pad): pad, bos and
    additional tokens added with add_special_tokens and saved are the files' tokens
    (tokenizer.json's added_tokens), past the trained vocabulary but no new id at load, so
    they are not refused."""
    import transformers

    tok = transformers.AutoTokenizer.from_pretrained(make_tokenizer(tmp_path / "tok"))
    added = {"pad_token": "[NEWPAD]", "bos_token": "[BOS]", "additional_special_tokens": ["[X]"]}
    tok.add_special_tokens(added)
    tok.save_pretrained(tmp_path / "saved")
    loaded = text_files.load_tokenizer(tmp_path / "saved")
    assert loaded.pad_token == "[NEWPAD]" and loaded.pad_token_id >= len(tok) - 3
    assert {"[BOS]", "[X]"} <= set(loaded.all_special_tokens)
    text_files._check_special_tokens_known(loaded, tmp_path / "saved")


def test_a_tokenizer_config_as_transformers_writes_it_passes(tmp_path):
    """Found by the twenty-first round (the other side of the table): a tokenizer saved with
    extra special tokens passes (transformers 5 writes is_local, local_files_only and
    model_max_length 10^30 for "no limit"), and so do the fields transformers 4 wrote:
    special tokens as AddedToken objects, added_tokens_decoder, a chat template's text or a
    list of named ones."""
    import transformers
    from tokenizers import AddedToken

    from pipeplan.formats.tokenizerconfig import tokenizer_config_problem

    tok = transformers.AutoTokenizer.from_pretrained(make_tokenizer(tmp_path / "tok"))
    tok.add_special_tokens({"additional_special_tokens": [AddedToken("[X]", lstrip=True)]})
    tok.save_pretrained(tmp_path / "saved")
    config = json.loads((tmp_path / "saved" / "tokenizer_config.json").read_text())
    assert config["model_max_length"] > 10**29
    assert tokenizer_config_problem(config, length=128, vocab=128) is None
    pad = {"content": "[PAD]", "single_word": False, **_TOKEN_FLAGS, "__type": "AddedToken"}
    older = {
        "pad_token": pad,
        "added_tokens_decoder": {"0": pad},
        "additional_special_tokens": ["[X]"],
        "chat_template": "{% for m in messages %}{{ m['content'] }}{% endfor %}",
        "clean_up_tokenization_spaces": True,
        "do_lower_case": False,
    }
    assert tokenizer_config_problem({**config, **older}, length=128, vocab=128) is None
    named = [{"name": "default", "template": "{{ x }}"}, {"name": "tool_use", "template": ""}]
    assert tokenizer_config_problem({**config, "chat_template": named}) is None


def test_the_tokenizer_config_table_knows_every_key_transformers_reads():
    """Found by the twenty-first round: tokenizer_config.json's keys had no table. Every key
    transformers' PreTrainedTokenizerBase reads from its arguments is in the table or named
    as left to the rule for unknown keys, so a key transformers adds is not missed."""
    import inspect
    import re

    from transformers.tokenization_utils_base import PreTrainedTokenizerBase

    from pipeplan.formats.tokenizerconfig import TOKENIZER_LEFT_AS_JSON, tokenizer_fields

    source = inspect.getsource(PreTrainedTokenizerBase.__init__)
    read = set(re.findall(r'kwargs\.(?:pop|get)\(\s*"(\w+)"', source))
    assert len(read) > 10
    assert read - tokenizer_fields() - set(TOKENIZER_LEFT_AS_JSON) == set()


def _edited_tokenizer_json(made, tmp_path, edit) -> Path:
    """A copy of the made tokenizer whose tokenizer.json `edit(document)` changed."""
    tok = Path(shutil.copytree(made["tokenizer"], tmp_path / "tok"))
    document = json.loads((tok / "tokenizer.json").read_text())
    edit(document)
    (tok / "tokenizer.json").write_text(json.dumps(document))
    return tok


def test_a_tokenizer_vocabulary_mapping_two_words_to_one_id(made, tmp_path, capsys):
    """Found by the twenty-first round: a tokenizer.json whose vocabulary gave 'good' the id of
    'bad' was accepted, and the data's two classes' words became one token. A vocabulary is a
    bijection: the two words and the id are named."""

    def same_id(document: dict) -> None:
        vocab = document["model"]["vocab"]
        vocab["great"] = vocab["dull"]

    tok = _edited_tokenizer_json(made, tmp_path, same_id)
    data = write_jsonl(tmp_path / "r.jsonl", reviews(20, seed=1))
    argv = prepare(made, tmp_path, data, tokenizer=tok)
    fragment = "the vocabulary maps both 'dull' and 'great' to id "
    refused(argv, tmp_path, capsys, (f"{tok / 'tokenizer.json'}: ", fragment))


def test_a_tokenizer_json_that_cannot_load_is_named_not_its_config(made, tmp_path, capsys):
    """Found by the twenty-third round: a vocabulary id of -3 in tokenizer.json was reported
    as `tokenizer_config.json: cannot load the tokenizer_class …`, with tokenizer.json's line
    and column. The file `tokenizers` cannot read is the one named."""

    def negative_id(document: dict) -> None:
        document["model"]["vocab"]["great"] = -3

    tok = _edited_tokenizer_json(made, tmp_path, negative_id)
    assert (tok / "tokenizer_config.json").is_file()  # the file that was blamed
    data = write_jsonl(tmp_path / "r.jsonl", reviews(20, seed=1))
    argv = prepare(made, tmp_path, data, tokenizer=tok)
    refused(argv, tmp_path, capsys, f"{tok / 'tokenizer.json'}: cannot load a tokenizer (")


_LEFT = {
    "padding": {
        "strategy": {"Fixed": 4},
        "direction": "Left",
        "pad_to_multiple_of": None,
        "pad_id": 5,
        "pad_type_id": 0,
        "pad_token": "w1",
    },
    "truncation": {"direction": "Left", "max_length": 2, "strategy": "LongestFirst", "stride": 0},
}


@pytest.mark.parametrize("where", ["tokenizer_config.json", "tokenizer.json"])
def test_a_tokenizer_that_pads_and_cuts_on_the_left_is_used_on_the_right(made, tmp_path, where):
    """Found by the twenty-first round (its note on tokenizer.json's truncation and padding):
    a tokenizer.json padding or truncating with direction Left made the tokenizer pad texts
    on the left, where positions count from the first token and a BERT-style head reads it.
    Decoder tokenizers often say 'left' (for generation), so it is not refused: every text is
    padded and cut on the right, the tokenizer's other settings (its length, pad id) as
    pipeplan sets them too. Compared with the folder's own tokenizer, as it pads."""
    if where == "tokenizer.json":
        tok = _edited_tokenizer_json(made, tmp_path, lambda doc: doc.update(_LEFT))
    else:
        tok = Path(shutil.copytree(made["tokenizer"], tmp_path / "tok"))
        config = json.loads((tok / "tokenizer_config.json").read_text())
        sides = {"padding_side": "left", "truncation_side": "left"}
        (tok / "tokenizer_config.json").write_text(json.dumps({**config, **sides}))
    seq = models.build(str(made["checkpoint"]), seq_len=12, padding_mask=True)
    corpus = text_files.read_corpus(str(write_jsonl(tmp_path / "r.jsonl", reviews(20, seed=1))), 0)
    left = text_files.tokenize(corpus, str(tok), seq).train.inputs
    right = text_files.tokenize(corpus, str(made["tokenizer"]), seq).train.inputs
    assert torch.equal(left, right)
    pad = models.PADDING  # what the tokenizer padded
    assert bool((left[:, -1] == pad).any()) and not bool((left[:, 0] == pad).any())


def _replace(content: str) -> dict:
    return {"type": "Replace", "pattern": {"String": "o"}, "content": content}


@pytest.mark.parametrize("times", [1, 2], ids=["one Replace", "two in a sequence"])
def test_a_tokenizer_normalizer_that_lengthens_text_without_bound(made, tmp_path, capsys, times):
    """Found by the twenty-first round: a Replace normalizer of 'o' by 1,000 characters was
    accepted; measured, it took 12 s for 64 texts of --seq-len 128 (0.3 s without), and two in
    a sequence were killed for memory. Replace rules may lengthen a text at most
    MAX_REPLACE_GROWTH times, refused before a text is tokenized."""

    def lengthen(document: dict) -> None:
        normalizers = [document["normalizer"], *[_replace("o" * 1000)] * times]
        document["normalizer"] = {"type": "Sequence", "normalizers": normalizers}

    tok = _edited_tokenizer_json(made, tmp_path, lengthen)
    data = write_jsonl(tmp_path / "r.jsonl", reviews(20, seed=1))
    argv = prepare(made, tmp_path, data, tokenizer=tok)
    growth = f"{1000**times:,}"
    fragment = f"its normalizer's Replace rules can make a text {growth} times longer; at most 16"
    refused(argv, tmp_path, capsys, (f"{tok / 'tokenizer.json'}: ", fragment))


def test_replace_rules_that_shorten_or_keep_a_text_pass():
    """The Replace rules real tokenizers use (Llama's " " → "▁", T5's regex " {2,}" → " ")
    count as growth 1 and 2; a longer content over a longer pattern by their ratio. Found by
    the twenty-sixth round: a Prepend of 1.2 M characters was unbounded; Llama 2's Prepend of
    "▁" counts as adding one character."""
    from executor.text import _normalizer_growth

    llama = {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}
    t5 = {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "}
    sequence = {"type": "Sequence", "normalizers": [llama, t5, {"type": "NFKC"}]}
    assert _normalizer_growth(sequence).times == 2.0
    longer = {"type": "Replace", "pattern": {"String": "ab"}, "content": "x" * 8}
    assert _normalizer_growth(longer).times == 4
    llama2 = {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "▁"}, llama]}
    assert (_normalizer_growth(llama2).times, _normalizer_growth(llama2).added) == (1.0, 1.0)


def _prepend(text: str) -> dict:
    return {"type": "Prepend", "prepend": text}


# Normalizers that add more than MAX_ADDED_CHARS characters to a text: (normalizers after
# the tokenizer's own, the one line's fragment).
ADDING_NORMALIZERS = {
    "a Prepend of 6,000 characters": (
        [_prepend("great " * 1000)],
        "its normalizer's Prepend rules add up to 6,000 characters to every text; at most 64",
    ),
    "a Prepend of 40 lengthened tenfold by a Replace": (
        [_prepend("oa" * 20), _replace("o" * 10)],
        "its normalizer's Prepend rules add up to 400 characters to every text; at most 64",
    ),
}


@pytest.mark.parametrize("case", ADDING_NORMALIZERS)
def test_a_tokenizer_normalizer_that_adds_text_without_bound(made, tmp_path, capsys, case):
    """Found by the twenty-sixth round: a Prepend normalizer of 1.2 M characters (a 1.2 MB
    tokenizer.json) was added to every text after the text's cut to CHARS_PER_TOKEN a token:
    5.8 GB for 250 short rows, a Rust abort (rc 134) under `ulimit -v`, and every text became
    16 copies of 'great'. What a normalizer adds whatever a text's length is bounded like what
    it multiplies it by (a Replace after the Prepend multiplies the prefix too), refused before
    a text is tokenized."""
    after, fragment = ADDING_NORMALIZERS[case]

    def prepend(document: dict) -> None:
        normalizers = [*after, document["normalizer"]]
        document["normalizer"] = {"type": "Sequence", "normalizers": normalizers}

    tok = _edited_tokenizer_json(made, tmp_path, prepend)
    data = write_jsonl(tmp_path / "r.jsonl", reviews(20, seed=1))
    argv = prepare(made, tmp_path, data, tokenizer=tok)
    refused(argv, tmp_path, capsys, (f"{tok / 'tokenizer.json'}: ", fragment))


def test_a_prepend_that_fills_the_length_replaces_no_text_silently(made, tmp_path, capsys):
    """Found by the twenty-sixth round: the texts a Prepend's prefix crowded out of --seq-len
    trained as the prefix alone, every row the same tokens of a vocabulary word (so not "every
    text is unknown tokens"). A Prepend within MAX_ADDED_CHARS can still fill --seq-len 12
    ("a " 20 times): texts that differ all encoding the same is refused."""
    tok = _edited_tokenizer_json(
        made, tmp_path, lambda doc: doc.update(normalizer=_prepend("a " * 20))
    )
    data = write_jsonl(tmp_path / "r.jsonl", reviews(20, seed=1))
    argv = prepare(made, tmp_path, data, tokenizer=tok)
    fragment = "the tokenizer encodes every text of "
    refused(argv, tmp_path, capsys, (f"{tok}: ", fragment, "as the same 12 tokens ('a', 'a',"))


def test_a_pre_tokenizer_adds_at_most_a_character(made, tmp_path, capsys):
    """Found by the twenty-sixth round: a Prepend normalizer added 1.2 M characters to every
    text. The bound on what a tokenizer adds leaves pre-tokenizers out: the `tokenizers`
    library holds Metaspace's replacement (added before every word) to one character, and
    refuses to load one of four, which is named as tokenizer.json's."""

    def metaspace(document: dict) -> None:
        document["pre_tokenizer"] = {
            "type": "Metaspace", "replacement": "xxxx", "prepend_scheme": "always", "split": True
        }  # fmt: skip

    tok = _edited_tokenizer_json(made, tmp_path, metaspace)
    data = write_jsonl(tmp_path / "r.jsonl", reviews(20, seed=1))
    argv = prepare(made, tmp_path, data, tokenizer=tok)
    fragment = "expected a character"
    refused(
        argv, tmp_path, capsys, (f"{tok / 'tokenizer.json'}: cannot load a tokenizer (", fragment)
    )


def _template(single: list, special: dict) -> dict:
    """A TemplateProcessing post-processor of `single` (pieces: "A" the text, else a special
    token's name) with `special` tokens' ids."""
    pieces = [
        {"Sequence": {"id": "A", "type_id": 0}}
        if p == "A"
        else {"SpecialToken": {"id": p, "type_id": 0}}
        for p in single
    ]
    pair = [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}]
    tokens = {
        name: {"id": name, "ids": ids, "tokens": [name] * len(ids)} for name, ids in special.items()
    }
    return {"type": "TemplateProcessing", "single": pieces, "pair": pair, "special_tokens": tokens}


# Post-processors that leave no room for the text in --seq-len 12, or do not hold it once:
# (post_processor, the one line's fragment).
CROWDING_POST_PROCESSORS = {
    "20 [CLS] around the text": (
        _template(["[CLS]"] * 20 + ["A"], {"[CLS]": [2]}),
        "its post-processor (TemplateProcessing) adds 20 special tokens to every text, leaving "
        "none of --seq-len 12 for the text; at most 11",
    ),
    "one special token of 12 ids": (
        _template(["[CLS]", "A"], {"[CLS]": [2] * 12}),
        "its post-processor (TemplateProcessing) adds 12 special tokens to every text",
    ),
    "two templates of 6 in a sequence": (
        {"type": "Sequence", "processors": [_template(["[CLS]"] * 6 + ["A"], {"[CLS]": [2]})] * 2},
        "its post-processor (Sequence) adds 12 special tokens to every text",
    ),
    "the text twice": (
        _template(["[CLS]", "A", "A"], {"[CLS]": [2]}),
        "its post-processor's (TemplateProcessing) template for a single text holds the text 2 "
        "times; it holds it once ($A)",
    ),
    "no text": (
        _template(["[CLS]"], {"[CLS]": [2]}),
        "template for a single text holds the text 0 times",
    ),
}


@pytest.mark.parametrize("case", CROWDING_POST_PROCESSORS)
def test_a_tokenizer_post_processor_that_crowds_out_the_text(made, tmp_path, capsys, case):
    """Found by the twenty-sixth round: a TemplateProcessing post-processor of 50,000 [CLS]
    tokens (20 with --seq-len 16 did the same) crashed `run` with a 56-line traceback,
    "ValueError: expected sequence of length 30 at dim 1 (got 29)": truncation cuts the text to
    make room for the added tokens, never the added tokens, so rows were ragged and longer than
    --seq-len. What a post-processor adds must leave a token of --seq-len for the text, and its
    template holds the text once (twice, it doubled the cut text past --seq-len); refused
    naming tokenizer.json before a text is encoded."""
    processor, fragment = CROWDING_POST_PROCESSORS[case]
    tok = _edited_tokenizer_json(made, tmp_path, lambda doc: doc.update(post_processor=processor))
    data = write_jsonl(tmp_path / "r.jsonl", reviews(20, seed=1))
    argv = prepare(made, tmp_path, data, tokenizer=tok)
    refused(argv, tmp_path, capsys, (f"{tok / 'tokenizer.json'}: ", fragment))


def test_rows_longer_than_the_length_are_named_not_a_traceback(made, tmp_path, monkeypatch):
    """Found by the twenty-sixth round: rows of 30 and 29 tokens for --seq-len 16 (a
    post-processor's tokens, which truncation cannot cut) became a ValueError traceback in
    torch.tensor. Past the post-processor's own check (switched off here), any row not
    --seq-len tokens long is named as the tokenizer's doing."""
    processor = _template(["[CLS]"] * 20 + ["A"], {"[CLS]": [2]})
    tok = _edited_tokenizer_json(made, tmp_path, lambda doc: doc.update(post_processor=processor))
    monkeypatch.setattr(text_files, "_check_post_processor", lambda *args: None)
    seq = models.build(str(made["checkpoint"]), seq_len=12, padding_mask=True)
    corpus = text_files.read_corpus(str(write_jsonl(tmp_path / "r.jsonl", reviews(20, seed=1))), 0)
    fragment = r"the tokenizer makes a text of .*r\.jsonl \d+ tokens long, not --seq-len 12"
    with pytest.raises(InputFileError, match=fragment):
        text_files.tokenize(corpus, str(tok), seq)


def test_post_processors_of_real_tokenizers_pass():
    """Found by the twenty-sixth round: a template of 20 [CLS] tokens crashed `run`. The
    other side: BERT's [CLS] … [SEP] (2 tokens) and a byte-level one (none) leave --seq-len 12
    for the text and hold it once, and pass."""
    from tokenizers import processors

    bert = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B [SEP]",
        special_tokens=[("[CLS]", 2), ("[SEP]", 3)],
    )
    both = processors.Sequence([processors.ByteLevel(), bert])
    for processor in (bert, both, processors.BertProcessing(("[SEP]", 3), ("[CLS]", 2))):
        text_files._check_post_processor(processor, Path("tok/tokenizer.json"), 12)


NOT_REGULAR = {"a FIFO": os.mkfifo, "a directory": os.mkdir}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", NOT_REGULAR)
@pytest.mark.parametrize("name", ["tokenizer.json", "tokenizer_config.json", "vocab.txt"])
def test_a_tokenizer_file_that_is_not_a_regular_file(made, tmp_path, capsys, name, kind):
    """Found by the nineteenth round: tokenizer.json replaced by a FIFO was skipped by
    transformers, which then failed in a truncated sentence ("Couldn't instantiate the backend
    tokenizer from one of: "). Every entry of a tokenizer file's name is named as not a regular
    file before transformers opens anything, as a model's weight files are."""
    tok = Path(shutil.copytree(made["tokenizer"], tmp_path / "tok"))
    (tok / name).unlink(missing_ok=True)
    NOT_REGULAR[kind](tok / name)
    data = write_jsonl(tmp_path / "r.jsonl", reviews(20, seed=1))
    argv = prepare(made, tmp_path, data, tokenizer=tok)
    refused(argv, tmp_path, capsys, (str(tok / name), "not a regular file"))


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", ["tokenizer.json", "tokenizer_config.json"])
def test_a_tokenizer_file_past_its_size_or_the_memory_to_parse_it_is_one_line(
    made, tmp_path, capsys, monkeypatch, name
):
    """Found by the sixty-ninth round: a 175 MB tokenizer.json (8,000,100 words) was parsed
    whole at 28× its size (4.84 GB, 90 s), and under `ulimit -v` the `tokenizers` library
    aborted the process: exit 134, no line at all. A tokenizer file past
    MAX_TOKENIZER_FILE_BYTES is refused from its size, unread (a sparse file here); one under
    it that the memory left cannot parse (TOKENIZER_LOAD_FACTOR × its size) is refused in one
    line naming both, before the library runs."""
    tok = Path(shutil.copytree(made["tokenizer"], tmp_path / "tok"))
    data = write_jsonl(tmp_path / "r.jsonl", reviews(20, seed=1))
    argv = prepare(made, tmp_path, data, tokenizer=tok)
    with (tok / name).open("r+b") as f:
        f.truncate(text_files.MAX_TOKENIZER_FILE_BYTES + 1)
    refused(argv, tmp_path, capsys, (f"{tok / name}: larger than 64 MiB, not a tokenizer's",))
    if name != "tokenizer.json":
        return
    shutil.copyfile(made["tokenizer"] / name, tok / name)
    # This small file as if the library took past all the memory left to parse it.
    monkeypatch.setattr(text_files, "TOKENIZER_LOAD_FACTOR", 1 << 40)
    said = f"{tok / name}: parsing it takes about ", " this process has left of "
    refused(argv, tmp_path, capsys, said)


def test_a_tokenizer_folder_of_a_vocabulary_alone_says_what_it_lacks(made, tmp_path, capsys):
    """Found by the sixty-ninth round: `--tokenizer DIR` of a vocab.txt alone (a vocabulary
    the README admits) was refused with transformers' "Couldn't instantiate the backend
    tokenizer from one of: ", listing nothing. The line says what is missing: no
    tokenizer.json, no tokenizer_config.json naming the class."""
    vocab = json.loads((made["tokenizer"] / "tokenizer.json").read_text())["model"]["vocab"]
    tok = tmp_path / "tok"
    tok.mkdir()
    (tok / "vocab.txt").write_text("".join(f"{w}\n" for w in sorted(vocab, key=vocab.get)))
    data = write_jsonl(tmp_path / "r.jsonl", reviews(20, seed=1))
    said = f"{tok}: cannot tell which tokenizer its vocabulary is for: no tokenizer.json, and "
    refused(prepare(made, tmp_path, data, tokenizer=tok), tmp_path, capsys, said)


@pytest.mark.timeout(180)
def test_the_trained_models_tokenizer_is_the_one_the_run_started_with(made, tmp_path, capsys):
    """Found by the seventieth round: rank 0 parsed tokenizer.json again after the last step to
    write the trained model, with less memory left than the launcher's check saw: under
    `ulimit -v` a 30 MB one was refused there, after every epoch had trained. Rank 0 loads
    it as it starts: here the file is removed once the first epoch's checkpoint is written,
    and the run still ends with the tokenizer it trained with beside its model."""
    import threading

    from transformers import AutoTokenizer

    tok = Path(shutil.copytree(made["tokenizer"], tmp_path / "tok"))
    data = write_jsonl(tmp_path / "r.jsonl", reviews(40, seed=1))
    argv = prepare(made, tmp_path, data, tokenizer=tok)
    argv = [a for a in argv if a != "--prepare-only"] + ["--nproc", "1", "--epochs", "3"]
    first = tmp_path / "runs" / "r" / "checkpoints" / "step-10"
    removed = threading.Event()

    def remove_once_checkpointed() -> None:
        ends = time.monotonic() + 150
        while not first.is_dir() and time.monotonic() < ends:
            time.sleep(0.002)
        (tok / "tokenizer.json").unlink()
        removed.set()

    watcher = threading.Thread(target=remove_once_checkpointed, daemon=True)
    watcher.start()
    assert cli.main([*argv, "--checkpoint-every", "10"]) == 0, capsys.readouterr().err
    assert removed.is_set() and not (tok / "tokenizer.json").exists()
    trained = AutoTokenizer.from_pretrained(tmp_path / "runs" / "r" / "model")
    assert (
        trained("great film")["input_ids"]
        == text_files.load_tokenizer(made["tokenizer"], 12, None, None)("great film")["input_ids"]
    )


def _retype(path: Path, name: str, dtype: str) -> None:
    """Rewrite one tensor's dtype in a safetensors header, bytes untouched (same width)."""
    raw = path.read_bytes()
    (size,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + size])
    header[name]["dtype"] = dtype
    text = json.dumps(header, separators=(",", ":")).encode().ljust(size)
    assert len(text) == size
    path.write_bytes(raw[:8] + text + raw[8 + size :])


def _with_nan(path: Path, name: str) -> None:
    from safetensors.torch import load_file, save_file

    tensors = load_file(path)
    tensors[name][0] = float("nan")
    save_file(tensors, path, metadata={"format": "pt"})


WEIGHT = "bert.encoder.layer.0.attention.self.query.weight"


@pytest.mark.parametrize(
    "damage, fragment",
    [
        (lambda p: _retype(p, WEIGHT, "I32"), ("model.safetensors", WEIGHT, "stored as I32")),
        (lambda p: _with_nan(p, WEIGHT), ("model.safetensors", "NaN or infinite")),
    ],
    ids=["float weights stored as I32", "a NaN weight"],
)
def test_a_model_folder_with_weights_of_the_wrong_kind(made, tmp_path, capsys, damage, fragment):
    """I32 bit patterns of float weights loaded as values near 1e9 and training diverged;
    a NaN weight did the same. BERT's int64 position_ids stay allowed (the clean folder
    builds: the other tests here)."""
    model = Path(shutil.copytree(made["checkpoint"], tmp_path / "bert"))
    measured = profile(model, tmp_path / "profile.json")  # of this folder, before the damage
    damage(model / "model.safetensors")
    data = write_jsonl(tmp_path / "r.jsonl", reviews(20, seed=1))
    capsys.readouterr()
    argv = prepare(made, tmp_path, data, model=model, profile=measured)
    refused(argv, tmp_path, capsys, fragment)


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_a_run_checkpoint_with_float_weights_stored_as_integers(finished_run, tmp_path, capsys):
    """A checkpoint tensor of integer dtype for a float parameter (checksums recomputed, as a
    careful forger would) was cast into the parameter by copy_."""
    run = copy_run(finished_run, tmp_path)
    step = run / "checkpoints" / "step-2"
    weights = torch.load(step / "model.pt", weights_only=True)
    name = next(n for n, t in weights.items() if t.is_floating_point())
    weights[name] = weights[name].view(torch.int32)
    torch.save(weights, step / "model.pt")
    manifest = json.loads((step / "manifest.json").read_text())
    manifest["files"]["model.pt"] = hashlib.sha256((step / "model.pt").read_bytes()).hexdigest()
    manifest["sizes"]["model.pt"] = (step / "model.pt").stat().st_size
    (step / "manifest.json").write_text(json.dumps(manifest))
    argv = ["export", str(run), "--out", str(tmp_path / "out")]
    # Its optimizer state, float32 of that shape, contradicts it first (22nd round's check).
    refused(argv, tmp_path, capsys, (f"model.pt's {name} is int32 of shape",))


def test_data_edited_since_the_run_started(made, tmp_path, capsys):
    """A label renamed in the data file shifted every label id: export wrote names shifted
    by one and --resume trained on swapped ids. prepare records data.json; both refuse."""
    data = write_jsonl(tmp_path / "reviews.jsonl", reviews(20, seed=1))
    assert cli.main(prepare(made, tmp_path, data)) == 0
    capsys.readouterr()
    run = tmp_path / "runs" / "r"
    record = json.loads((run / "data.json").read_text())
    digest = hashlib.sha256(data.read_bytes()).hexdigest()
    assert record["files"][0] == {"path": str(data), "sha256": digest}
    tokenizer = {Path(f["path"]).name for f in record["files"][1:]}
    assert {"tokenizer.json", "tokenizer_config.json"} <= tokenizer
    assert record["label_names"] == ["negative", "positive"]
    data.write_text(data.read_text().replace('"negative"', '"zneg"'))
    fragment = ("reviews.jsonl", "changed since the run started", digest[:16])
    refused(["export", str(run), "--out", str(tmp_path / "out")], tmp_path, capsys, fragment)
    refused(["run", "--resume", str(run)], tmp_path, capsys, fragment)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("field", ["text", "label"])
def test_text_with_an_unpaired_surrogate(made, tmp_path, capsys, field):
    """Found by the sixth independent round: JSON's "\\ud800" escape decodes to a lone
    surrogate, which the tokenizer rejected with a TypeError traceback."""
    rows = reviews(20, seed=2)
    lines = [json.dumps(row) for row in rows]
    lines[3] = lines[3].replace(f'"{rows[3][field]}"', '"bad \\ud800 here"')
    data = tmp_path / "s.jsonl"
    data.write_text("\n".join(lines) + "\n")
    fragments = ("s.jsonl:4", f"the {field} holds \\ud800", "unpaired surrogate")
    refused(prepare(made, tmp_path, data), tmp_path, capsys, fragments)


def test_a_tokenizer_that_cannot_encode_the_data(made, tmp_path, capsys):
    """Found by the sixth independent round: a WordPiece vocabulary without its [UNK] token
    loads, then raises a plain Exception ("Missing [UNK] token") on the first text."""
    tok = Path(shutil.copytree(made["tokenizer"], tmp_path / "tok"))
    spec = json.loads((tok / "tokenizer.json").read_text())
    spec["model"]["vocab"] = {"[PAD]": 0, "[CLS]": 1, "[SEP]": 2}
    (tok / "tokenizer.json").write_text(json.dumps(spec))
    data = write_jsonl(tmp_path / "r.jsonl", reviews(20, seed=1))
    argv = prepare(made, tmp_path, data, tokenizer=tok)
    refused(argv, tmp_path, capsys, ("tok", "the tokenizer cannot encode"))


# A --tokenizer folder without a vocabulary: what it holds instead (file name → text).
NO_VOCABULARY = {
    "a model's config.json": {"config.json": json.dumps({"model_type": "bert"})},
    "nothing": {},
    "tokenizer_config.json alone": {
        "tokenizer_config.json": json.dumps({"tokenizer_class": "BertTokenizer"})
    },
}


@pytest.mark.parametrize("case", NO_VOCABULARY, ids=str)
def test_a_tokenizer_folder_without_a_vocabulary(made, tmp_path, capsys, case):
    """Found by the twentieth round: --tokenizer naming a model folder (config.json, no
    tokenizer files) loaded a BertTokenizer without a vocabulary: every word [UNK], the run
    prepared to train on sequences that carry nothing. An empty folder was refused in a
    truncated sentence of transformers' ("… from one of: ")."""
    tok = tmp_path / "tok"
    tok.mkdir()
    for name, text in NO_VOCABULARY[case].items():
        (tok / name).write_text(text)
    data = write_jsonl(tmp_path / "r.jsonl", reviews(20, seed=1))
    argv = prepare(made, tmp_path, data, tokenizer=tok)
    refused(argv, tmp_path, capsys, (f"{tok}: no tokenizer vocabulary", "tokenizer.json"))


def test_a_tokenizer_folder_that_is_the_model_folder(made, tmp_path, capsys):
    """Found by the twentieth round: `--tokenizer bert`, the model's own folder (config.json
    and weights, no tokenizer), was accepted and every word became [UNK]."""
    data = write_jsonl(tmp_path / "r.jsonl", reviews(20, seed=1))
    argv = prepare(made, tmp_path, data, tokenizer=made["checkpoint"])
    refused(argv, tmp_path, capsys, f"{made['checkpoint']}: no tokenizer vocabulary")


def test_a_vocabulary_that_knows_no_word_of_the_data(made, tmp_path, capsys):
    """Found by the twentieth round: a tokenizer that loads but turns every text into [UNK]
    and the special tokens around it was accepted (a vocabulary that cannot encode the data;
    here one of special tokens and a word no review holds)."""
    tok = tmp_path / "tok"
    tok.mkdir()
    (tok / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nzzz\n")
    (tok / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "BertTokenizer"}))
    data = write_jsonl(tmp_path / "r.jsonl", reviews(20, seed=1))
    argv = prepare(made, tmp_path, data, tokenizer=tok)
    fragments = (f"{tok}: the tokenizer turns every text of", "r.jsonl", "[UNK]", "cannot encode")
    refused(argv, tmp_path, capsys, fragments)


@pytest.mark.parametrize("case", ["unknown", "one sequence"])
def test_a_training_file_the_tokenizer_cannot_encode_is_refused_beside_a_good_one(
    made, tmp_path, capsys, case
):
    """Found by the fifty-seventh round: the vocabulary checks looked at the training and
    held-out texts together, so a training file of another language (every text [UNK]), or
    one whose texts all encode as one sequence, trained to the end beside a held-out file of
    known words, exit 0. Each split is checked alone, and the line says which."""
    labels = ["positive", "negative"]
    if case == "unknown":  # another language's words
        texts = ["водка рыба", "рыба", "дом водка дом", "кот"] * 3
    else:  # a known word filling --seq-len 12, the texts differing beyond it
        texts = ["plot " * 30 + word for word in ("dull", "great", "flat")] * 4
    train = [{"text": text, "label": labels[i % 2]} for i, text in enumerate(texts)]
    data = f"{write_jsonl(tmp_path / 't.jsonl', train)},"
    data += str(write_jsonl(tmp_path / "e.jsonl", reviews(8, seed=1)))
    argv = prepare(made, tmp_path, data)
    # The training file alone, and its role (the sixty-third round: both files were named).
    fragment = "turns" if case == "unknown" else "encodes"
    fragment += f" every text of {tmp_path / 't.jsonl'} (the training file of --data TRAIN,EVAL)"
    refused(argv, tmp_path, capsys, (f"{made['tokenizer']}: the tokenizer ", fragment))


@pytest.mark.parametrize(
    "unknown", [(True, False), (False, True), (True, True)], ids=["training", "held-out", "both"]
)
def test_a_split_the_tokenizer_cannot_encode_is_named_by_its_own_file(unknown):
    """Found by the sixty-third round: "the tokenizer turns every training text of
    t.jsonl,e.jsonl into its unknown or special tokens" named both files of --data
    TRAIN,EVAL where one was at fault. The line names that file and its role, as an empty
    file's does; where both splits are unknown tokens, both files."""
    tok = types.SimpleNamespace(
        all_special_ids=[0, 1], unk_token_id=1, all_special_tokens=["[PAD]", "[UNK]"]
    )
    corpus = text_files.Corpus("t.jsonl,e.jsonl", ["a b"] * 4, ["c d"] * 2, None, None)
    rows = zip((4, 2), unknown, strict=True)  # each split's texts, and whether all unknown
    ids = [torch.tensor([[1, 1]] * n if bad else [[5, 6]] * n) for n, bad in rows]
    with pytest.raises(InputFileError) as caught:
        text_files._check_encoded(tok, Path("tok"), corpus, ids)
    if all(unknown):
        named = "t.jsonl,e.jsonl"
    else:
        role = "training" if unknown[0] else "held-out"
        named = f"{'t.jsonl' if unknown[0] else 'e.jsonl'} (the {role} file of --data TRAIN,EVAL)"
    assert str(caught.value).startswith(f"tok: the tokenizer turns every text of {named} into")


def test_texts_the_tokenizer_maps_alike_are_not_blamed_on_the_length(made, tmp_path, capsys):
    """Found by the sixtieth round: texts that differ only in case (an uncased tokenizer) all
    encoded as the same 4 of --seq-len 16 tokens, and the line said what the tokenizer adds
    fills --seq-len (or the texts differ only beyond it), with "…" after all 4 tokens. Where
    room is left, the line says the tokenizer maps texts that differ alike, and shows two."""
    texts = ["great film", "GREAT FILM", "Great Film", "great  film"] * 3
    labels = ["positive", "negative"]
    rows = [{"text": text, "label": labels[i % 2]} for i, text in enumerate(texts)]
    data = write_jsonl(tmp_path / "case.jsonl", rows)
    argv = prepare(made, tmp_path, data)
    fragments = (
        f"{made['tokenizer']}: the tokenizer encodes every text of ",
        "as the same 2 tokens ('great', 'film'), fewer than --seq-len 12: ",
        "maps texts that differ to the same tokens (e.g. 'great film' and 'GREAT FILM';",
    )
    refused(argv, tmp_path, capsys, fragments)


def test_empty_training_texts_are_not_blamed_on_the_vocabulary(made, tmp_path, capsys):
    """Found by the sixtieth round: a training file whose texts were all "" (the held-out
    file normal) was "its vocabulary cannot encode the data": the training file is named as
    empty."""
    labels = ["positive", "negative"]
    train = write_jsonl(
        tmp_path / "t.jsonl", [{"text": "", "label": labels[i % 2]} for i in range(8)]
    )
    data = f"{train},{write_jsonl(tmp_path / 'e.jsonl', reviews(8, seed=1))}"
    argv = prepare(made, tmp_path, data)
    refused(argv, tmp_path, capsys, f"error: {train}: every training text is empty or whitespace")


def test_a_tokenizer_edited_since_the_run_started(made, tmp_path, capsys):
    """Found by the sixth independent round: data.json hashed the data files only; ids of
    the tokenizer swapped between a run and its resume re-tokenised the data silently."""
    tok = Path(shutil.copytree(made["tokenizer"], tmp_path / "tok"))
    data = write_jsonl(tmp_path / "reviews.jsonl", reviews(20, seed=1))
    assert cli.main(prepare(made, tmp_path, data, tokenizer=tok)) == 0
    capsys.readouterr()
    spec = json.loads((tok / "tokenizer.json").read_text())
    vocab = spec["model"]["vocab"]
    first, second = sorted(vocab)[-2:]
    vocab[first], vocab[second] = vocab[second], vocab[first]
    (tok / "tokenizer.json").write_text(json.dumps(spec))
    run = tmp_path / "runs" / "r"
    fragment = ("tokenizer.json", "changed since the run started")
    refused(["run", "--resume", str(run)], tmp_path, capsys, fragment)


@pytest.mark.parametrize("where", ["data", "tokenizer_config", "model config"])
def test_json_nested_too_deeply_in_text_inputs(made, tmp_path, capsys, where):
    """Found by the sixth independent round: '[' * 200000 in a data line, a
    tokenizer_config.json or a model's config.json was a RecursionError traceback."""
    deep = "[" * 200_000 + "]" * 200_000
    data = write_jsonl(tmp_path / "r.jsonl", reviews(20, seed=1))
    paths = {}
    if where == "data":
        data.write_text(data.read_text() + deep + "\n")
    elif where == "tokenizer_config":
        paths["tokenizer"] = Path(shutil.copytree(made["tokenizer"], tmp_path / "tok"))
        (paths["tokenizer"] / "tokenizer_config.json").write_text(deep)
    else:
        paths["model"] = Path(shutil.copytree(made["checkpoint"], tmp_path / "m"))
        (paths["model"] / "config.json").write_text(deep)
    refused(prepare(made, tmp_path, data, **paths), tmp_path, capsys, "nested too deeply")


def _key_twice(text: str, key: str, value: object) -> str:
    """`text`, a JSON object, with `key` written once more before its closing brace:
    `_key_twice('{"a": 1}', "a", 2)` → '{"a": 1, "a": 2}' (json.dumps cannot write it)."""
    return text.rstrip()[:-1] + f", {json.dumps(key)}: {json.dumps(value)}}}"


# Where a key is written twice, and the file the one line names with that key.
KEYS_TWICE = {
    "a data row's text": ("r.jsonl:3", "text"),
    "a data row's label": ("r.jsonl:3", "label"),
    "tokenizer_config": ("tokenizer_config.json", "pad_token"),
    "model config": ("config.json", "hidden_act"),
}


@pytest.mark.parametrize("where", KEYS_TWICE)
def test_a_key_twice_in_text_inputs(made, tmp_path, capsys, where):
    """Found by the twentieth round: a key written twice in a JSON object was read as its last
    value, silently (json's default), while a reader of the file sees the first: a data row
    `{"text": "x", "text": "real text", …}` trained on the second text, config.json's
    "hidden_act" "gelu" then "relu" built a ReLU model. Refused as in pipeplan's own files:
    one line naming the file (a data row's line) and the key."""
    data = write_jsonl(tmp_path / "r.jsonl", reviews(20, seed=1))
    paths = {}
    if where.startswith("a data row"):
        lines = data.read_text().splitlines()
        key = KEYS_TWICE[where][1]
        lines[2] = _key_twice(lines[2], key, "positive" if key == "label" else "real text")
        data.write_text("\n".join(lines) + "\n")
    elif where == "tokenizer_config":
        paths["tokenizer"] = Path(shutil.copytree(made["tokenizer"], tmp_path / "tok"))
        config = paths["tokenizer"] / "tokenizer_config.json"
        config.write_text(_key_twice(config.read_text(), "pad_token", "[UNK]"))
    else:
        paths["model"] = Path(shutil.copytree(made["checkpoint"], tmp_path / "m"))
        config = paths["model"] / "config.json"
        config.write_text(_key_twice(config.read_text(), "hidden_act", "relu"))
    file, key = KEYS_TWICE[where]
    fragments = (f"{file}: ", f"key {key!r} appears twice")
    refused(prepare(made, tmp_path, data, **paths), tmp_path, capsys, fragments)


def test_a_key_twice_in_the_config_a_profile_is_held_to(made, tmp_path):
    """Found by the twentieth round: the check that a profile is of `--model`'s folder read
    its config.json with json's default, last value winning. It reads it as the model loader
    does: `model_mismatch` names the file and the key (whichever of the two reads first)."""
    from pipeplan.errors import InputFileError
    from pipeplan.formats import Profile, load
    from pipeplan.formats.profile import model_mismatch

    model = Path(shutil.copytree(made["checkpoint"], tmp_path / "m"))
    config = model / "config.json"
    config.write_text(_key_twice(config.read_text(), "hidden_size", 64))
    said = f"^{config}: not valid JSON \\(key 'hidden_size' appears twice\\)$"
    with pytest.raises(InputFileError, match=said):
        model_mismatch(str(model), load(Profile, made["profile"]))


HUGE = "1" + "0" * 5000  # 5,001 digits: past what Python's int() reads


@pytest.mark.parametrize(
    "where", ["data", "tokenizer_config", "model config", "generation config", "profile"]
)
def test_an_integer_of_thousands_of_digits_in_json_names_the_field(made, tmp_path, capsys, where):
    """Found by the twentieth round: a config.json integer of 5,001 digits was "not valid JSON
    (Exceeds the limit (4300 digits) for integer string conversion …; use
    sys.set_int_max_str_digits() to increase the limit)", advice the user cannot act on. Every
    JSON pipeplan reads refuses it in one line naming the file and the field."""
    data = write_jsonl(tmp_path / "r.jsonl", reviews(20, seed=1))
    paths, field = {}, "max_position_embeddings"
    if where == "data":
        data.write_text(data.read_text() + '{"text": "a", "label": ' + HUGE + "}\n")
        file, field = "r.jsonl:21", "label"
    elif where == "tokenizer_config":
        paths["tokenizer"] = Path(shutil.copytree(made["tokenizer"], tmp_path / "tok"))
        file, field = paths["tokenizer"] / "tokenizer_config.json", "model_max_length"
        file.write_text('{"model_max_length": ' + HUGE + "}")
    elif where == "profile":
        paths["profile"] = file = tmp_path / "p.json"
        text = made["profile"].read_text()
        file.write_text(text.replace('"schema_version": 1', '"schema_version": ' + HUGE, 1))
        field = "schema_version"
    else:
        paths["model"] = Path(shutil.copytree(made["checkpoint"], tmp_path / "m"))
        name = "config.json" if where == "model config" else "generation_config.json"
        file = paths["model"] / name
        file.write_text('{"model_type": "bert", "max_position_embeddings": ' + HUGE + "}")
    fragment = f"{file}: {field} is an integer of 5,001 digits; a number pipeplan reads has"
    refused(prepare(made, tmp_path, data, **paths), tmp_path, capsys, fragment)


@pytest.mark.parametrize("last", [False, True], ids=["mid-file", "last row, no newline"])
def test_a_csv_quote_that_never_closes(made, tmp_path, capsys, last):
    """Found by the tenth independent round: `"unclosed,positive` swallowed every following
    line into one text, read silently. The line where the quote opens is named, also when a
    closed multi-line text comes first (line numbers count physical lines)."""
    rows = ['"two\nlines",positive', *GOOD_ROWS]  # lines 2-3, then 4 … 23
    at = len(rows) if last else 4
    rows.insert(at, '"unclosed,positive')
    data = tmp_path / "data.csv"
    data.write_text("\n".join(["text,label", *rows]) + ("" if last else "\n"))
    line = 2 + 1 + at  # the header, the two-line text, then one line a row
    fragments = (f"data.csv:{line}:", "quote opened on this line never closes")
    refused(prepare(made, tmp_path, data), tmp_path, capsys, fragments)


@pytest.mark.parametrize("where", ["header", "row"])
def test_a_csv_field_over_the_limit_says_so(tmp_path, where):
    """Found by the twentieth round: a header naming an unquoted column of 1 MB was
    "h.csv:1: malformed quoting (field larger than field limit (131072)); a quoted field
    must close …" though nothing was quoted. The row and the limit are named (a data row's
    field alike)."""
    from executor.text import read_corpus

    long = "x" * 200_000
    header, rows = (
        ("text," + long, ["a,b"])
        if where == "header"
        else ("text,label", [*GOOD_ROWS[:3], f"{long},positive"])
    )
    data = csv_file(tmp_path, header, rows)
    line, what = ("1", "the header row") if where == "header" else ("5", "the row")
    with pytest.raises(InputFileError) as info:
        read_corpus(str(data))
    assert str(info.value) == (
        f"{data}:{line}: {what} holds a field of more than 131,072 characters, the longest a "
        "CSV field may be (or a quote opened there runs on, never closing)"
    )


def test_a_csv_text_holding_newlines_in_closed_quotes_is_one_text(tmp_path):
    """The decision beside the refusal above: a text may hold newlines when its quote
    closes; the row after it is read as the next row (strict reading must not refuse it)."""
    from executor.text import read_corpus

    data = csv_file(tmp_path, "text,label", ['"first line\nsecond, line",positive', *GOOD_ROWS])
    corpus = read_corpus(f"{data},{data}")
    assert corpus.train[0] == "first line\nsecond, line" and corpus.train[1:] == [
        row.rsplit(",", 1)[0] for row in GOOD_ROWS
    ]
    assert corpus.train_labels == [1, *[1 if i % 2 else 0 for i in range(20)]]


EMPTY_HELD_OUT = {  # the held-out file's name and text: no row in any format
    "empty JSONL": ("eval.jsonl", ""),
    "JSONL of blank lines": ("eval.jsonl", "\n  \n"),
    "CSV header only": ("eval.csv", "text,label\n"),
}


@pytest.mark.parametrize(("name", "content"), EMPTY_HELD_OUT.values(), ids=EMPTY_HELD_OUT.keys())
def test_an_empty_held_out_file_is_refused(made, tmp_path, capsys, name, content):
    """Found by the twentieth round: `--data TRAIN,EVAL` with EVAL empty trained with no
    evaluation (rc 0, "held-out loss -, accuracy -") while the same file as the only data was
    refused ("no rows of text"). Refused before any rank starts, naming the held-out file."""
    train = write_jsonl(tmp_path / "train.jsonl", reviews(20, seed=1))
    held = tmp_path / name
    held.write_text(content)
    argv = prepare(made, tmp_path, f"{train},{held}")
    refused(argv, tmp_path, capsys, (f"{held}: no rows of text", "held-out file"))


@pytest.mark.parametrize("rows", [1, 2])
def test_one_file_too_small_to_hold_rows_out_is_refused(made, tmp_path, capsys, rows):
    """Found by the fifty-second round: one file of 2 rows held round(0.2 · 2) = 0 of them
    out and trained with no evaluation, exit 0, as an empty EVAL file did before it was
    refused. Refused alike, naming the file and what to give."""
    data = write_jsonl(tmp_path / "few.jsonl", reviews(rows, seed=1))
    argv = prepare(made, tmp_path, str(data))
    noun = "rows" if rows > 1 else "row"
    said = (f"{data}: {rows} {noun} of text, of which 20% holds none out", "at least 3 rows")
    refused(argv, tmp_path, capsys, said)


@pytest.mark.parametrize("suffix", [".jsonl", ".csv"], ids=["same file", "eval file"])
def test_integer_and_named_labels_mixed(made, tmp_path, capsys, suffix):
    """Found by the tenth independent round: `{"label": 1}` beside `{"label": "cat"}` made
    the integer the name "1", another class than id 1, silently. Refused at the first row of
    the other kind, in one file or in the eval file of `TRAIN,EVAL`."""
    rows = [{**row, "label": i % 2} for i, row in enumerate(reviews(20, seed=4))]
    if suffix == ".jsonl":
        rows[6]["label"] = "cat"
        data = str(write_jsonl(tmp_path / "mixed.jsonl", rows))
        fragments = ("mixed.jsonl:7:", "a name", "mixed.jsonl:1 has an integer")
    else:
        train = write_jsonl(tmp_path / "train.jsonl", rows)
        held = csv_file(tmp_path, "text,label", ["fine,1", "meh,cat"])
        data = f"{train},{held}"
        fragments = ("data.csv:3:", "a name", "train.jsonl:1 has an integer")
    argv = prepare(made, tmp_path, Path(data))
    refused(argv, tmp_path, capsys, fragments)


def _written_labels(suffix: str, tmp_path: Path, labels: list) -> Path:
    """20 reviews labelled by cycling through `labels` exactly as given (JSON integers or
    strings; CSV cells)."""
    rows = [{**row, "label": labels[i % len(labels)]} for i, row in enumerate(reviews(20, 5))]
    if suffix == ".jsonl":
        return write_jsonl(tmp_path / "labels.jsonl", rows)
    return csv_file(tmp_path, "text,label", [f"{r['text']},{r['label']}" for r in rows])


@pytest.mark.parametrize(
    "suffix, labels",
    [(".jsonl", ["1", "01", "2"]), (".csv", ["1", "01", "2"]), (".csv", ["1", " 01 ", "2"])],
    ids=["jsonl strings", "csv cells", "csv cells padded"],
)
def test_digit_strings_that_differ_are_different_names(made, tmp_path, capsys, suffix, labels):
    """Found by the eleventh independent round: "01" was read as id 1, merged with "1", and
    class 0 never occurred (label_names null). A JSON string is always a name; a CSV cell is
    an id only when every label is canonical (str(int(x)) == x once stripped), else every
    one is a name. Accepted: three names recorded, each row's id naming what it wrote."""
    from executor.text import read_corpus

    data = _written_labels(suffix, tmp_path, labels)
    assert cli.main(prepare(made, tmp_path, data, profile=made["profile3"])) == 0
    capsys.readouterr()
    record = json.loads((tmp_path / "runs" / "r" / "data.json").read_text())
    assert record["label_names"] == ["01", "1", "2"]
    corpus = read_corpus(f"{data},{data}")
    written = [labels[i % len(labels)].strip() for i in range(20)]
    assert [corpus.label_names[i] for i in corpus.train_labels] == written
    assert corpus.num_labels == 3


def test_canonical_csv_digits_stay_class_ids(tmp_path):
    """The other side of the CSV rule: canonical digits (padding stripped) are ids, so the
    head has largest id + 1 outputs and no names."""
    from executor.text import read_corpus

    data = _written_labels(".csv", tmp_path, ["0", " 2", "10"])
    corpus = read_corpus(f"{data},{data}")
    assert corpus.label_names is None and corpus.num_labels == 11
    assert corpus.train_labels == [[0, 2, 10][i % 3] for i in range(20)]


@pytest.mark.parametrize("digits", [7, 5000], ids=["7 digits", "5000 digits"])
def test_a_csv_label_of_many_digits(made, tmp_path, capsys, digits):
    """A canonical CSV label past MAX_LABELS is refused like a JSON one; int() of over 4300
    digits raises ValueError, so a long one is refused by its length, shown cut to 20."""
    data = _written_labels(".csv", tmp_path, ["0", "9" * digits])
    fragments = ("data.csv:3:", f"label {'9' * min(digits, 20)}", "beyond the limit of 1000000")
    refused(prepare(made, tmp_path, data), tmp_path, capsys, fragments)


@pytest.mark.parametrize("suffix", [".jsonl", ".csv"])
def test_a_label_name_longer_than_any_name_is_refused(made, tmp_path, capsys, suffix):
    """Found by the nineteenth round (every format's text bounded, data.json's label_names
    too): a label name of 5,000 characters is refused by the data's reader, naming its line,
    before data.json could hold it (as a row's text may be long, a class's name may not)."""
    data = _written_labels(suffix, tmp_path, ["pos", "n" * 5000])
    line = 3 if suffix == ".csv" else 2  # the second row, after a CSV's header
    fragments = (f"{data.name}:{line}: the label is 5000 characters long; a label is at most 4096",)
    refused(prepare(made, tmp_path, data), tmp_path, capsys, fragments)


@pytest.mark.parametrize("labels", [[0, "0", 1], [7, "7"]], ids=["0 and '0'", "7 and '7'"])
def test_a_json_integer_beside_its_digit_string(made, tmp_path, capsys, labels):
    """Found by the eleventh independent round: `0` and `"0"` were one class (accepted), and
    `7` beside `"7"` was refused as "has 1 class". A JSON string is a name, never parsed as a
    number, so either file mixes kinds: refused at line 2, naming line 1's integer."""
    data = _written_labels(".jsonl", tmp_path, labels)
    fragments = ("labels.jsonl:2:", "a name", "labels.jsonl:1 has an integer")
    refused(prepare(made, tmp_path, data), tmp_path, capsys, fragments)


def test_a_csv_quote_closed_by_a_later_row_names_where_it_opened(made, tmp_path, capsys):
    """Two unbalanced quotes pair up across lines: the error comes at the second, but the
    row (and the quote) began at the first, which the message names."""
    rows = [*GOOD_ROWS[:3], '"open here,positive', *GOOD_ROWS[3:6], 'and "here,negative']
    data = csv_file(tmp_path, "text,label", [*rows, *GOOD_ROWS[6:]])
    refused(prepare(made, tmp_path, data), tmp_path, capsys, ("data.csv:5-9:", "malformed quoting"))


def test_a_model_folder_given_by_another_spelling_is_the_profiled_one(
    made, tmp_path, capsys, monkeypatch
):
    """Found by the tenth independent round: the profile of `ckpt/` was refused for the
    same folder given as `ckpt` or its absolute path, as the path was compared as typed. A
    folder is its config: every spelling (relative, trailing slash, a link) is accepted."""
    checkpoint = made["checkpoint"]
    (tmp_path / "link").symlink_to(checkpoint, target_is_directory=True)
    monkeypatch.chdir(checkpoint.parent)
    spellings = [f"{checkpoint.name}/", f"./{checkpoint.name}", str(tmp_path / "link")]
    for n, spelling in enumerate(spellings):
        argv = prepare(made, tmp_path, write_jsonl(tmp_path / "d.jsonl", reviews(20, seed=5)))
        argv[argv.index("--model") + 1] = spelling
        argv[argv.index("--name") + 1] = f"r{n}"
        assert cli.main(argv) == 0, (spelling, capsys.readouterr().err)


def test_a_profile_recording_another_config_than_the_folder(made, tmp_path, capsys):
    """Found by the tenth independent round: the folder's config.json was never compared
    with the config the profile recorded; a profile of another activation (another cost)
    priced this one. The first differing shape field is named."""
    doc = json.loads(made["profile"].read_text())
    assert doc["model"]["config"]["hidden_act"] == "gelu"
    doc["model"]["config"]["hidden_act"] = "relu"
    edited = tmp_path / "relu.json"
    edited.write_text(json.dumps(doc))
    data = write_jsonl(tmp_path / "d.jsonl", reviews(20, seed=5))
    fragments = ("relu.json", "'hidden_act' is 'relu'", "config.json has 'gelu'")
    refused(prepare(made, tmp_path, data, profile=edited), tmp_path, capsys, fragments)


def test_profiling_a_config_json_records_its_folder(made, tmp_path, capsys):
    """`pipeplan profile DIR/config.json` is the folder's model (as `run --model` reads it):
    the profile names DIR, and a run of DIR plans with it."""
    out = profile(made["checkpoint"] / "config.json", tmp_path / "p.json")
    assert json.loads(out.read_text())["model"]["name"] == str(made["checkpoint"])
    data = write_jsonl(tmp_path / "d.jsonl", reviews(20, seed=5))
    assert cli.main(prepare(made, tmp_path, data, profile=out)) == 0, capsys.readouterr().err


def test_text_data_for_an_image_model_names_the_model(tmp_path, capsys):
    """Thirteenth round: CSV or JSONL data with vit-digits was refused as "a padding mask
    applies to text models only", a flag the user never gave."""
    data = tmp_path / "d.csv"
    data.write_text("text,label\nthe film,a\nthe book,b\nthe song,a\n")
    argv = ["run", "--model", "vit-digits", "--data", str(data), "--prepare-only"]
    refused(
        [*argv, "--runs-dir", str(tmp_path / "runs")],
        tmp_path,
        capsys,
        "vit-digits is an image model",
    )


# ----------------------------------------------------------------------------- thirteenth round
# data.json's label_names edited; run.json's relative paths read from another directory.


def test_labels_spelt_two_ways_are_refused_by_run(made, tmp_path, capsys):
    """Found by the thirteenth round: "negative" beside " negative" was one class (the data
    then had 1 class, or silently fewer): `run` refuses the file, naming both rows."""
    rows = reviews(20, seed=1)
    rows[5]["label"] = f" {rows[5]['label']}"
    data = write_jsonl(tmp_path / "sp.jsonl", rows)
    first = 1 + next(i for i, row in enumerate(rows) if row["label"] == rows[5]["label"].strip())
    fragments = ("sp.jsonl:6: the label ' ", f"sp.jsonl:{first}'s ", "spell each label one way")
    refused(prepare(made, tmp_path, data), tmp_path, capsys, fragments)


LOOKALIKE = {"zero-width space": ("e\u0301", "\u200b"), "NFC beside NFD": ("\u00e9", "")}


@pytest.mark.parametrize(("accent", "after"), LOOKALIKE.values(), ids=LOOKALIKE.keys())
def test_labels_that_look_alike_are_refused_by_run(made, tmp_path, capsys, accent, after):
    """Found by the fourteenth round: "café" NFC beside NFD, or "pos" beside "pos" with a
    zero-width space, prepared a run with label_names ['café', 'café', 'negative']. `run`
    refuses the file, naming both rows. Every label is spelt with an NFD "é" in front;
    row 6 differs only as a reader cannot see."""
    rows = reviews(20, seed=1)
    names = [row["label"] for row in rows]
    for row, name in zip(rows, names, strict=True):
        row["label"] = f"e\u0301{name}"
    rows[5]["label"] = f"{accent}{names[5]}{after}"
    data = write_jsonl(tmp_path / "la.jsonl", rows)
    first = 1 + names.index(names[5])
    assert first < 6  # an earlier row spells the same name
    fragments = ("la.jsonl:6: the label ", "looks the same as", f"la.jsonl:{first}'s ")
    refused(prepare(made, tmp_path, data), tmp_path, capsys, fragments)


# label_names written into data.json (the data gives negative, positive). Another count of
# names than the head's classes data.json records (`facts`, thirty-second round) is refused
# by the format itself.
LABEL_EDITS = {
    "swapped": (["positive", "negative"], "are not the names the run's data"),
    "one added": (["negative", "positive", "zzz"], "num_labels 2 disagrees with the 3 label_names"),
    "one left out": (["negative"], "num_labels 2 disagrees with the 1 label_names"),
    "removed": (None, "are not the names the run's data"),
    "one name twice": (["negative", "negative"], "'negative' more than once"),
}


@pytest.mark.timeout(120)
def test_data_json_of_the_most_label_names_is_read_in_seconds():
    """Found by the twentieth round (beside F3, label checks quadratic in the labels):
    data.json's label_names were checked for a name twice with list.count per name, hours
    for the 10^6 labels a data set may name (MAX_LABELS). CPU time, not the wall clock."""
    import time

    from executor.data import MAX_LABELS
    from pipeplan.formats.run import DataRecord

    names = [f"l{i}" for i in range(MAX_LABELS)]
    start = time.process_time()
    assert DataRecord(data="d.jsonl", files=[], label_names=names).label_names == names
    assert time.process_time() - start < 10


@pytest.mark.timeout(60)
@pytest.mark.parametrize("command", ["export", "resume"])
@pytest.mark.parametrize("edit", LABEL_EDITS)
def test_label_names_edited_in_data_json_are_refused(made, tmp_path, capsys, edit, command):
    """Found by the thirteenth round: label_names edited in data.json (to ["a","A"] from
    ["A","a"], or a name twice) were accepted by export. data.json records what the run read:
    its names must be those the data files give, and a name twice is refused by the format.
    The prepared run has no checkpoint, so a command that let data.json pass would say that
    instead of naming data.json's field."""
    data = write_jsonl(tmp_path / "reviews.jsonl", reviews(20, seed=1))
    assert cli.main(prepare(made, tmp_path, data)) == 0
    capsys.readouterr()
    run = tmp_path / "runs" / "r"
    doc = json.loads((run / "data.json").read_text())
    assert doc["label_names"] == ["negative", "positive"]
    names, fragment = LABEL_EDITS[edit]
    (run / "data.json").write_text(json.dumps({**doc, "label_names": names}))
    argv = {
        "export": ["export", str(run), "--out", str(tmp_path / "out")],
        "resume": ["run", "--resume", str(run)],
    }[command]
    refused(argv, tmp_path, capsys, (str(run / "data.json"), "label_names", fragment))


def _relative_run_argv(made, tmp_path: Path, data: Path) -> list[str]:
    """`prepare`'s arguments with model, tokenizer, profile and data relative to tmp_path."""

    def rel(path: Path) -> Path:
        return Path(os.path.relpath(path, tmp_path))

    paths = {
        key: rel(made[name])
        for key, name in [
            ("model", "checkpoint"),
            ("tokenizer", "tokenizer"),
            ("profile", "profile"),
        ]
    }
    return prepare(made, tmp_path, rel(data), **paths)


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
# In `-m long`, for the suite's time: the default run keeps
# test_a_plan_of_a_folder_profiled_by_a_relative_path_runs.
@pytest.mark.long
def test_a_run_started_with_relative_paths_exports_and_resumes_from_elsewhere(
    made, tmp_path, capsys, monkeypatch
):
    """Found by the thirteenth round: run.json and data.json kept the paths as given, so an
    export or a resume from another directory was refused ("data.json: files names
    'tok/tokenizer.json', which run.json's data … do not read"). run.json records every path
    absolute (the model folder, data, tokenizer, profile): a real run, started with relative
    ones, exports and resumes from another directory."""
    data = write_jsonl(tmp_path / "reviews.jsonl", reviews(20, seed=1))
    monkeypatch.chdir(tmp_path)
    argv = _relative_run_argv(made, tmp_path, data)
    assert not Path(argv[argv.index("--data") + 1]).is_absolute()
    steps = ["--nproc", "1", "--epochs", "1", "--max-steps-per-epoch", "2"]
    assert cli.main([a for a in argv if a != "--prepare-only"] + steps) == 0, capsys.readouterr()
    run = tmp_path / "runs" / "r"
    saved = json.loads((run / "run.json").read_text())
    for field, path in [
        ("model", made["checkpoint"]),
        ("tokenizer", made["tokenizer"]),
        ("profile", made["profile"]),
        ("data", data),
    ]:
        assert saved[field] == str(path.resolve()), field
    record = json.loads((run / "data.json").read_text())
    assert all(Path(f["path"]).is_absolute() for f in record["files"]), record
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    capsys.readouterr()
    assert cli.main(["export", str(run), "--out", str(tmp_path / "out")]) == 0, capsys.readouterr()
    assert (tmp_path / "out" / "config.json").is_file()
    assert cli.main(["run", "--resume", str(run), "--epochs", "2"]) == 0, capsys.readouterr()
    assert json.loads((run / "run.json").read_text())["epochs"] == 2


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
# In `-m long`, for the suite's time: the default run keeps
# test_module_data_found_elsewhere_or_edited_is_refused.
@pytest.mark.long
def test_export_refuses_a_model_folder_edited_since_the_run(made, tmp_path, capsys):
    """Found by the nineteenth round: `export RUN` rebuilt the model from the folder's
    config.json as it is now; edited since the run (activation relu for gelu), it wrote the
    trained weights under another architecture with exit 0, where a resume refused naming the
    field. Found by the twenty-fifth round: an edit no shape shows (dropout 0.3 for 0.1, the
    layer norm's epsilon, label names the run never had) was still exported, and trained by
    a resume, with exit 0. run.json records the config's sha256 as the run is prepared, and
    both make one check (`check_run_model`): one line naming it, nothing written."""
    model = Path(shutil.copytree(made["checkpoint"], tmp_path / "bert"))
    measured = profile(model, tmp_path / "profile.json")
    data = write_jsonl(tmp_path / "reviews.jsonl", reviews(20, seed=1))
    argv = prepare(made, tmp_path, data, model=model, profile=measured)
    steps = ["--nproc", "1", "--epochs", "1", "--max-steps-per-epoch", "2"]
    assert cli.main([a for a in argv if a != "--prepare-only"] + steps) == 0, capsys.readouterr()
    text = (model / "config.json").read_text()
    config = json.loads(text)
    run, out = tmp_path / "runs" / "r", tmp_path / "out"
    fragment = (f"{model / 'config.json'}: edited since the run started", "restore it")
    labels = {"id2label": {"0": "bad", "1": "good"}, "label2id": {"bad": 0, "good": 1}}
    for edit in ({"hidden_act": "relu"}, {"hidden_dropout_prob": 0.3}, {"layer_norm_eps": 1e-3}):
        (model / "config.json").write_text(json.dumps({**config, **edit}))
        capsys.readouterr()
        refused(["export", str(run), "--out", str(out)], tmp_path, capsys, fragment)
        assert not out.exists()
        refused(["run", "--resume", str(run), "--epochs", "2"], tmp_path, capsys, fragment)
    (model / "config.json").write_text(json.dumps({**config, **labels}))
    refused(["export", str(run), "--out", str(out)], tmp_path, capsys, fragment)
    (model / "config.json").write_text(text)  # restored: exported as trained
    # Twenty-sixth round: the folder's generation_config.json, which the exported model keeps,
    # is held the same way; this folder had none, so one made since is refused.
    generation = model / "generation_config.json"
    generation.write_text(json.dumps({"max_length": 20}))
    made_since = (f"{generation}: made since the run started (the folder had none)", "restore")
    refused(["export", str(run), "--out", str(out)], tmp_path, capsys, made_since)
    assert not out.exists()
    generation.unlink()
    assert cli.main(["export", str(run), "--out", str(out)]) == 0, capsys.readouterr()


@pytest.mark.timeout(60)
def test_a_generation_config_edited_or_deleted_since_the_run_is_refused(made, tmp_path):
    """Found by the twenty-sixth round: a model folder's generation_config.json edited after
    the run (max_length 99), or deleted, was exported and trained by a resume with exit 0:
    run.json held only config.json's sha256. Its sha256 is recorded as the run is prepared
    (`model_files_sha256`, the sha256 of no bytes without one) and `check_model_config`,
    resume's and export's check, names the file; unedited, it passes."""
    from executor.planning import check_model_config, model_files_sha256
    from pipeplan.errors import InputFileError
    from pipeplan.formats import RunConfig

    model = Path(shutil.copytree(made["checkpoint"], tmp_path / "m"))
    generation = model / "generation_config.json"
    generation.write_text(json.dumps({"max_length": 20}))
    cfg = model_files_sha256(RunConfig(model=str(model), data="synth-text"))
    assert cfg.model_config_sha256 and cfg.generation_config_sha256
    check_model_config(cfg)
    generation.write_text(json.dumps({"max_length": 99}))
    with pytest.raises(InputFileError, match=r"generation_config\.json: edited since the run"):
        check_model_config(cfg)
    generation.unlink()
    with pytest.raises(InputFileError, match=r"generation_config\.json: deleted since the run"):
        check_model_config(cfg)
    # An older run (no sha256 recorded) keeps the old check only.
    check_model_config(cfg.model_copy(update={"generation_config_sha256": None}))


@pytest.mark.timeout(60)
@pytest.mark.parametrize("field", ["data", "tokenizer", "model", "profile"])
def test_a_relative_path_of_an_older_run_read_from_elsewhere_says_so(
    made, tmp_path, capsys, monkeypatch, field
):
    """Runs prepared before run.json recorded absolute paths hold relative ones, relative to a
    directory run.json does not record. From that directory they still pass the data check
    (the prepared run then lacks a checkpoint); from another one the message names the field
    and says the path is relative to the directory the run was started from."""
    data = write_jsonl(tmp_path / "reviews.jsonl", reviews(20, seed=1))
    assert cli.main(prepare(made, tmp_path, data)) == 0
    capsys.readouterr()
    run = tmp_path / "runs" / "r"
    # What an older pipeplan wrote: run.json and data.json with the paths as given.
    relative = _relative_run_argv(made, tmp_path, data)
    given = {
        key: relative[relative.index(f"--{key}") + 1]
        for key in ["data", "tokenizer", "model", "profile"]
    }
    saved = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(json.dumps({**saved, **given}))
    record = json.loads((run / "data.json").read_text())
    for file in record["files"]:
        file["path"] = os.path.relpath(file["path"], tmp_path)
    (run / "data.json").write_text(json.dumps({**record, "data": given["data"]}))
    monkeypatch.chdir(tmp_path)
    argv = ["export", str(run), "--out", str(tmp_path / "out")]
    refused(argv, tmp_path, capsys, "no checkpoint")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    # Only `field` is missing from here: the others are made to resolve from elsewhere too.
    for other in given:
        if other != field:
            target = elsewhere / given[other]
            target.parent.mkdir(parents=True, exist_ok=True)
            target.symlink_to((tmp_path / given[other]).resolve())
    fragments = (
        f"run.json: {field} names '{given[field]}'",
        "relative to the directory the run was started from",
        str(elsewhere),
    )
    refused(argv, tmp_path, capsys, fragments)


def test_a_tokenizer_table_the_library_panics_on_is_one_line(made, tmp_path, capfd):
    """Left as found by the twenty-sixth round: a malformed sentencepiece `Precompiled` table
    in tokenizer.json makes the `tokenizers` library panic as it parses it: its Rust panic
    hook wrote the panic and a backtrace to file descriptor 2, then a PanicException traceback
    followed, exit 1. Now one line naming tokenizer.json, exit 2, and nothing else on the
    descriptor (capfd reads the descriptor, not sys.stderr)."""
    import base64

    table = base64.b64encode(b"\x05\x00\x00\x00abc").decode()  # a trie of 5 bytes: not whole

    def precompiled(document: dict) -> None:
        document["normalizer"] = {"type": "Precompiled", "precompiled_charsmap": table}

    tok = _edited_tokenizer_json(made, tmp_path, precompiled)
    data = write_jsonl(tmp_path / "r.jsonl", reviews(20, seed=1))
    argv = prepare(made, tmp_path, data, tokenizer=tok)
    fragment = "the tokenizers library cannot use it (it stopped with: Precompiled: "
    refused(argv, tmp_path, capfd, (f"{tok / 'tokenizer.json'}: ", fragment))


def test_what_a_tokenizer_prints_without_a_panic_is_passed_on(tmp_path, capfd):
    """rust_panics_named holds descriptor 2 only to drop a panic's lines: anything else
    written there meanwhile reaches it afterwards, and other exceptions pass unchanged."""
    with text_files.rust_panics_named(tmp_path):
        os.write(2, b"a line of the library's own\n")
    assert capfd.readouterr().err == "a line of the library's own\n"
    with pytest.raises(KeyError), text_files.rust_panics_named(tmp_path):
        raise KeyError("passes")
    os.write(2, b"after\n")  # the descriptor is the terminal's again
    assert capfd.readouterr().err == "after\n"


# A regular expression that backtracks: `(a|a)+$` tries 2^n ways on n a's before a 'c'. Texts
# of 20 a's cost ~0.05 s of CPU each (22 go past the regex library's retry limit: a panic).
BACKTRACKING = {"Regex": "(a|a)+$"}
SLOW_REGEXES = {
    "a Split pre-tokenizer": lambda doc: doc.update(
        pre_tokenizer={
            "type": "Sequence",
            "pretokenizers": [
                {"type": "Split", "pattern": BACKTRACKING, "behavior": "Isolated", "invert": False},
                doc["pre_tokenizer"],
            ],
        }
    ),
    "a Replace normalizer": lambda doc: doc.update(
        normalizer={
            "type": "Sequence",
            "normalizers": [
                doc["normalizer"],
                {"type": "Replace", "pattern": BACKTRACKING, "content": "b"},
            ],
        }
    ),
}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("case", SLOW_REGEXES)
def test_a_tokenizer_regex_that_backtracks_is_refused_in_seconds(made, tmp_path, capsys, case):
    """Found by the twenty-seventh round: a Split pre-tokenizer of `(a|a)+$` (a Replace
    normalizer likewise) cost 0.1-0.2 s a text of 32 characters, just under the regex
    library's retry limit: 31 s for 200 rows of `run --prepare-only`, hours for 100,000.
    Encoding is timed in chunks: once a second of it took more than 50 µs a character (real
    tokenizers: about 1), one line names tokenizer.json, the pace and the bound, within
    seconds."""
    import time

    tok = _edited_tokenizer_json(made, tmp_path, SLOW_REGEXES[case])
    rows = [
        {"text": f"great film {'a' * 20}c", "label": ["positive", "negative"][i % 2]}
        for i in range(100)
    ]
    argv = prepare(made, tmp_path, write_jsonl(tmp_path / "slow.jsonl", rows), tokenizer=tok)
    began = time.perf_counter()
    fragments = (f"{tok / 'tokenizer.json'}: the tokenizer took ", "µs a character; at most 50 µs")
    refused(argv, tmp_path, capsys, fragments)
    assert time.perf_counter() - began < 30


class _FakeTokenizer:
    """Encodes every text as one token, taking `seconds` a call: asleep (wall-clock time
    only, as a stopped or crowded-out process), or busy (CPU time too, as a slow regex)."""

    def __init__(self, seconds: float, busy: bool) -> None:
        self.seconds, self.busy, self.calls = seconds, busy, 0

    def __call__(self, texts: list[str], max_length: int, **options) -> dict:
        import time

        self.calls += 1
        if not self.busy:
            time.sleep(self.seconds)
        end = time.process_time() + self.seconds
        while self.busy and time.process_time() < end:
            pass
        ids = [[5] + [0] * (max_length - 1) for _ in texts]
        return {"input_ids": ids, "attention_mask": [[1] + [0] * (max_length - 1)] * len(texts)}


def test_encoding_is_judged_slow_by_its_cost_not_by_a_pause(tmp_path):
    """Twenty-seventh round (the time bound on tokenizing): the pace is judged on the lesser
    of the wall clock and the CPU time, and only once a second is counted. A tokenizer that
    waits 0.3 s a call (a stopped process, a crowded machine) is not refused; one that
    computes as long is, once a second is counted (within a chunk more)."""
    import time

    texts = ["good film"] * 200
    asleep = _FakeTokenizer(0.3, busy=False)
    encoder = text_files._Encoder(asleep, 4, tmp_path, "d.jsonl")
    began = time.perf_counter()
    rows, used = encoder(texts)
    assert time.perf_counter() - began > 1.0 and len(rows) == 200 and used == [1] * 200
    busy = _FakeTokenizer(0.3, busy=True)
    began = time.process_time()
    with pytest.raises(InputFileError, match=r"d\.jsonl, [\d,]+ µs a character; at most 50 µs"):
        text_files._Encoder(busy, 4, tmp_path, "d.jsonl")(texts)
    assert time.process_time() - began >= 1.0 and busy.calls == 4  # 1.2 s: judged, refused


# What a text's first CHARS_PER_TOKEN characters a token (768 at --seq-len 12) may hold no
# token of: spaces, characters the normalizer drops (a zero-width space), one unknown word.
EMPTY_STARTS = {"spaces": " " * 1100, "zero-width spaces": "\u200b" * 1100, "a URL": "x" * 1100}


@pytest.mark.parametrize("start", EMPTY_STARTS)
def test_a_text_whose_start_holds_no_token_is_read_farther(made, tmp_path, start):
    """Found by the twenty-seventh round: a text was cut to CHARS_PER_TOKEN characters a token
    before encoding, and 36 of 40 texts starting with 1,100 spaces trained as all padding at
    --seq-len 16, silently (transformers encodes them as their words). A text whose cut leaves
    padding while it goes on is read farther: its ids are the uncut text's."""
    texts = [EMPTY_STARTS[start] * (i % 2) + row["text"] for i, row in enumerate(reviews(20, 1))]
    rows = [{"text": t, "label": ["positive", "negative"][i % 2]} for i, t in enumerate(texts)]
    corpus = text_files.read_corpus(str(write_jsonl(tmp_path / "r.jsonl", rows)), 0)
    seq = models.build(str(made["checkpoint"]), seq_len=12, padding_mask=True)
    data = text_files.tokenize(corpus, str(made["tokenizer"]), seq)
    tok = text_files.load_tokenizer(made["tokenizer"])
    whole = tok(corpus.train, padding="max_length", truncation=True, max_length=12)
    padding = data.train.inputs == models.PADDING  # what the tokenizer padded
    assert data.train.inputs.masked_fill(padding, tok.pad_token_id).tolist() == whole["input_ids"]
    assert (~padding).long().tolist() == whole["attention_mask"]
    assert (~padding).sum(dim=1).min() >= 2  # words, not padding


@pytest.mark.parametrize(
    "joint", [" ", "\x1f", "\x0c", "\x0b", "\xa0", "\u3000", "\u202f", "\u2028", "\u2029"]
)
def test_a_word_the_read_window_would_cut_is_read_whole(tmp_path, joint):
    """Found by the fifty-third round: a text is read to CHARS_PER_TOKEN characters a token
    (1,024 at --seq-len 16), and where that cut fell inside a word ("good" read as "go") whose
    piece filled the last token, the run trained on another token than the exported
    tokenizer gives for the whole text: held-out accuracy 50 % in the run, 100 % exported.
    The window ends before the word it would cut: the ids are the whole text's. The fifty-
    fifth round: a control character Python counts as whitespace (`joint`: "\x1f"), which
    BERT's normalizer deletes, was cut at: "good\x1fday" is "goodday" to the tokenizer. The
    fifty-seventh: words joined by Unicode's spaces (a no-break space, U+3000), which split
    words as the ASCII space does, were cut inside one, there being no ASCII space to cut at;
    the fifty-eighth: so were the line and paragraph separators (U+2028, U+2029)."""
    import transformers

    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "good", "bad", "film", "great", "movie"]
    words += ["goodday", "day", "##day"]
    (tmp_path / "vocab.txt").write_text("\n".join(words) + "\n")
    tok = transformers.BertTokenizerFast(str(tmp_path / "vocab.txt"))
    prefix = " ".join(["z" * 78] * 8 + ["q" * 77] * 4 + ["q" * 73]) + " "  # 13 unknown words
    assert len(prefix) == 1018  # "day" straddles character 1,024, `joint` before it
    if ord(joint) > 127:  # Unicode's spaces join every word, and "good" straddles it
        prefix = joint.join(["z" * 78] * 8 + ["q" * 77] * 4 + ["q" * 76]) + joint
        assert len(prefix) == 1021
    texts = [prefix + word + joint + "day film great movie" for word in ("good", "bad")]
    ids, short = text_files._read(text_files._Encoder(tok, 16, tmp_path, "d.jsonl"), texts)
    whole = tok(texts, padding="max_length", truncation=True, max_length=16)
    padding = ids == models.PADDING
    assert ids.masked_fill(padding, tok.pad_token_id).tolist() == whole["input_ids"]
    token = "goodday" if joint < " " else "good"
    assert whole["input_ids"][0][14] == words.index(token) and short == []


@pytest.mark.parametrize("joint", [" ", "\x0c", "\x0b", "\x1c", "\x1f", "\x85", "\u2028", "\xa0"])
def test_a_byte_level_window_is_cut_where_byte_level_bpe_splits(tmp_path, joint):
    """Found by the fifty-eighth round: byte-level BPE (GPT-2's, RoBERTa's) splits words at
    \x0b, \x0c, \x1c-\x1f and \x85, which BERT's normalizer deletes; the window cut only at
    the characters both split at, so words joined by those alone were cut inside one: "go"
    where the whole text gives "good". The window now cuts where the tokenizer's own
    normalizer and pre-tokenizer end a word: the ids are the whole text's, for each joint."""
    import tokenizers
    import transformers
    from tokenizers import decoders, pre_tokenizers, trainers

    bpe = tokenizers.Tokenizer(tokenizers.models.BPE(unk_token=None))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    trainer = trainers.BpeTrainer(
        vocab_size=600, special_tokens=["<pad>"], initial_alphabet=alphabet, show_progress=False
    )
    # Trained on texts like the test's: each long word and each joint is one token.
    words = ["z" * 145] * 6 + ["q" * 144, "good", "day film great movie bad goodday"]
    bpe.train_from_iterator([joint + joint.join(words)] * 50, trainer)
    tok = transformers.PreTrainedTokenizerFast(tokenizer_object=bpe, pad_token="<pad>")
    # 1,021 characters of unknown words, then "good" straddling character 1,024.
    prefix = joint + joint.join(["z" * 145] * 6 + ["q" * 144]) + joint
    texts = [prefix + word + joint + "day film great movie" for word in ("good", "bad")]
    ids, short = text_files._read(text_files._Encoder(tok, 16, tmp_path, "d.jsonl"), texts)
    whole = tok(texts, padding="max_length", truncation=True, max_length=16)
    padding = ids == models.PADDING
    assert ids.masked_fill(padding, tok.pad_token_id).tolist() == whole["input_ids"]
    cut = tok([t[:1024] for t in texts], padding="max_length", truncation=True, max_length=16)
    assert cut["input_ids"] != whole["input_ids"] and short == []  # a cut there would differ


@pytest.mark.parametrize("suffix", [".jsonl", ".csv"])
def test_a_text_short_of_the_length_after_the_most_read_is_said(made, tmp_path, capsys, suffix):
    """Found by the twenty-seventh round: texts whose first 64 characters a token held no token
    trained as all padding, silently. Read up to 16 times farther, a text still short of
    --seq-len (here 20,000 spaces before its words: 12,288 characters are read at --seq-len
    12) is said in one warning naming how many and the first (file and line); the run goes
    on. A rank's build (`quiet`) says nothing."""
    texts = [row["text"] for row in reviews(20, seed=1)]
    texts[5] = texts[9] = " " * 20_000 + texts[5]
    labels = ["positive", "negative"] * 10
    if suffix == ".csv":
        data = csv_file(
            tmp_path, "text,label", [f"{t},{lab}" for t, lab in zip(texts, labels, strict=True)]
        )
    else:
        rows = [{"text": t, "label": lab} for t, lab in zip(texts, labels, strict=True)]
        data = write_jsonl(tmp_path / "r.jsonl", rows)
    assert cli.main(prepare(made, tmp_path, data)) == 0
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == [
        f"pipeplan: WARNING: {data}:{6 + (suffix == '.csv')} and 1 other text: fewer than "
        "--seq-len 12 tokens in the first 12,288 characters, the most read of a text (1,024 a "
        "token), though the text goes on; trained on those tokens only (remove the whitespace "
        "or long unknown words before its words to train on them)"
    ]
    corpus = text_files.read_corpus(str(data), 0)
    seq = models.build(str(made["checkpoint"]), seq_len=12, padding_mask=True)
    text_files.tokenize(corpus, str(made["tokenizer"]), seq, quiet=True)
    assert capsys.readouterr().err == ""


# ----------------------------------------------------------------------------- twenty-seventh round
# Named labels numbered as the checkpoint's id2label numbers them (F5); a label only EVAL has (F8).


def _named_checkpoint(made, tmp_path: Path, names: list[str]) -> Path:
    """A copy of the BERT checkpoint whose config.json names its head's rows `names`."""
    model = Path(shutil.copytree(made["checkpoint"], tmp_path / "named"))
    config = json.loads((model / "config.json").read_text())
    config["id2label"] = dict(enumerate(names))
    config["label2id"] = {name: i for i, name in enumerate(names)}
    (model / "config.json").write_text(json.dumps(config))
    return model


def _head(folder: Path) -> torch.Tensor:
    from safetensors.torch import load_file

    return load_file(folder / "model.safetensors")["classifier.weight"]


@pytest.mark.timeout(120)
def test_named_labels_take_the_ids_the_checkpoints_id2label_gives(made, tmp_path, capsys):
    """Found by the twenty-seventh round: a checkpoint whose config.json said id2label
    {0: positive, 1: negative} kept its head while the data's names were numbered sorted
    (negative 0, positive 1): every row of the pretrained head meant the other class, and the
    export said so, without a word. The names now take the config's ids: data.json, the
    tokenized labels, the built model and the export all say positive 0, negative 1, the
    head kept as it was; a resume's check of data.json agrees, and config.json reordered
    since is named as edited."""
    from executor.task import build_task, check_data
    from pipeplan.formats import RunConfig

    model = _named_checkpoint(made, tmp_path, ["positive", "negative"])
    rows = reviews(20, seed=1)
    data = write_jsonl(tmp_path / "reviews.jsonl", rows)
    assert cli.main(prepare(made, tmp_path, data, model=model)) == 0
    assert "WARNING" not in capsys.readouterr().err  # the head is the checkpoint's, kept
    run = tmp_path / "runs" / "r"
    assert json.loads((run / "data.json").read_text())["label_names"] == ["positive", "negative"]
    cfg = RunConfig.model_validate_json((run / "run.json").read_text())
    seq, task_data = build_task(cfg, quiet=True)
    assert seq.config.id2label == {0: "positive", 1: "negative"}
    texts = text_files.read_corpus(str(data), cfg.seed)
    want = [0 if row["label"] == "positive" else 1 for row in rows]
    by_text = dict(zip([row["text"] for row in rows], want, strict=True))
    assert task_data.train.labels.tolist() == [by_text[t] for t in texts.train]
    assert task_data.eval.labels.tolist() == [by_text[t] for t in texts.eval]
    out = models.export(seq, tmp_path / "out")
    assert json.loads((out / "config.json").read_text())["id2label"] == {
        "0": "positive",
        "1": "negative",
    }
    assert torch.equal(_head(out), _head(model))  # row 0 still the checkpoint's "positive"
    check_data(run, cfg)  # a resume or an export numbers them the same way
    resumed, again = build_task(cfg, quiet=True, from_checkpoint=True)
    assert resumed.config.id2label == seq.config.id2label
    assert torch.equal(again.train.labels, task_data.train.labels)
    config = json.loads((model / "config.json").read_text())
    config["id2label"] = {"0": "negative", "1": "positive"}
    config["label2id"] = {"negative": 0, "positive": 1}
    (model / "config.json").write_text(json.dumps(config))
    with pytest.raises(InputFileError, match=r"config\.json: edited since the run started"):
        check_data(run, cfg)


@pytest.mark.timeout(120)
def test_named_labels_of_other_classes_start_a_fresh_head_with_a_notice(made, tmp_path, capsys):
    """Found by the twenty-seventh round: a checkpoint whose config.json named two other
    classes ("good", "bad") kept its head for the data's "negative" and "positive", silently:
    rows trained for other classes. The head now starts afresh (from --seed), as a head of
    another size does, and one warning names both sets; the names are numbered sorted. A
    config that names none (transformers' LABEL_0, LABEL_1) still keeps its head."""
    from executor.task import build_task
    from pipeplan.formats import RunConfig

    model = _named_checkpoint(made, tmp_path, ["good", "bad"])
    data = write_jsonl(tmp_path / "reviews.jsonl", reviews(20, seed=1))
    assert cli.main(prepare(made, tmp_path, data, model=model)) == 0
    lines = capsys.readouterr().err.strip().splitlines()
    warned = [line for line in lines if "WARNING" in line]
    assert len(warned) == 1, lines
    for fragment in ("config.json names its classes ['good', 'bad']", "['negative', 'positive']"):
        assert fragment in warned[0], warned[0]
    assert "the head starts from random weights (seed 0) with 2 outputs" in warned[0]
    run = tmp_path / "runs" / "r"
    assert json.loads((run / "data.json").read_text())["label_names"] == ["negative", "positive"]
    cfg = RunConfig.model_validate_json((run / "run.json").read_text())
    seq = build_task(cfg, quiet=True)[0]
    assert seq.config.id2label == {0: "negative", 1: "positive"}
    head = seq.hf_model.classifier
    assert not torch.equal(head.weight.detach(), _head(model))
    again = build_task(cfg, quiet=True)[0].hf_model.classifier
    assert torch.equal(head.weight.detach(), again.weight.detach())  # every rank draws it alike
    assert not head.bias.detach().any()  # drawn as transformers draws a head it lacks
    plain = RunConfig.model_validate({**cfg.model_dump(), "model": str(made["checkpoint"])})
    kept = build_task(plain, quiet=True)[0].hf_model.classifier.weight.detach()
    assert torch.equal(kept, _head(made["checkpoint"]))  # LABEL_0, LABEL_1 name nothing


EVAL_ONLY = {  # (TRAIN labels, EVAL labels, the fragments of the one line)
    "a name": (["a", "b"], ["a", "c"], ("the label 'c' ",)),
    "two names": (["a", "b"], ["c", "d", "a"], ("2 labels 'c', 'd' ",)),
    "an integer id": ([0, 1], [0, 5], ("the label 5 ",)),
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("train", "held"), [v[:2] for v in EVAL_ONLY.values()], ids=EVAL_ONLY)
def test_a_label_only_the_held_out_file_has_is_refused(made, tmp_path, capsys, train, held):
    """Found by the twenty-seventh round: TRAIN,EVAL where only EVAL had the label "c" (a
    typo, say) prepared a head of 3 classes, the checkpoint's 2-class head thrown away with
    a generic warning; an EVAL id 5 beside TRAIN's 0 and 1 made 6. A class no training row
    has cannot be learnt: refused in one line naming EVAL and the label."""
    fragments = next(v[2] for v in EVAL_ONLY.values() if v[:2] == (train, held))
    texts = ["great film", "dull plot", "fine acting"]
    trained = [{"text": texts[i % 2], "label": train[i % 2]} for i in range(20)]
    tr = write_jsonl(tmp_path / "tr.jsonl", trained)
    scored = [{"text": texts[i % 3], "label": label} for i, label in enumerate(held * 2)]
    ev = write_jsonl(tmp_path / "ev.jsonl", scored)
    fragments = (f"{ev}: ", *fragments, "held-out file of --data TRAIN,EVAL", "no training row")
    refused(prepare(made, tmp_path, Path(f"{tr},{ev}")), tmp_path, capsys, fragments)


@pytest.mark.timeout(60)
def test_an_eval_label_no_training_sample_has_is_refused_for_user_data(tmp_path, capsys):
    """Found by the twenty-seventh round (the class of F8): a `module:function`'s in-memory
    eval labels sized the head too (train 0, 1; eval 0, 7: 8 classes). Refused in one line
    naming the data and the label, unless TaskData(num_labels=…) declares the classes."""
    (tmp_path / "in").mkdir()
    path = tmp_path / "in" / "evalonly.py"
    path.write_text(
        "import torch\n"
        "from executor.data import TensorPairs\n"
        "def load(seed=0):\n"
        "    x = torch.randint(3, 100, (40, 16), generator=torch.Generator().manual_seed(seed))\n"
        "    held = TensorPairs(x[:8], torch.arange(8) % 2 * 7)\n"
        "    return TensorPairs(x, torch.arange(40) % 2), held\n"
    )
    argv = ["run", "--nproc", "1", "--model", "bert-synth", "--prepare-only", "--name", "x"]
    argv += ["--data", f"{path}:load", "--runs-dir", str(tmp_path / "runs")]
    fragments = (f"data '{path}:load'", "the eval label 7 ", "no training sample")
    refused(argv, tmp_path, capsys, fragments)


@pytest.mark.timeout(60)
def test_labels_beyond_the_datas_own_class_count_say_who_sized_the_head(tmp_path, capsys):
    """Found by the fifty-ninth round: TaskData(num_labels=3) with digits' labels 0..9 was
    refused as "model '…' has 3 classes (0..2)", blaming the model, whose config held 10: the
    3 was the data's. The line says the head was sized by the data's num_labels."""
    path = tmp_path / "three.py"
    path.write_text(
        "import dataclasses\n"
        "from executor.data import load_data\n"
        "def load(seed=0):\n"
        "    return dataclasses.replace(load_data('digits'), num_labels=3)\n"
    )
    argv = ["run", "--nproc", "1", "--model", "vit-digits", "--prepare-only", "--name", "x"]
    argv += ["--data", f"{path}:load", "--runs-dir", str(tmp_path / "runs")]
    said = "has 3 classes (0..2), its head sized by the data's num_labels"
    refused(argv, tmp_path, capsys, ("data 'digits' has train labels in 0..9 but model", said))


# ----------------------------------------------------------------------------- twenty-seventh round
# `--data module:function`: the module a resume, an export or torchrun's entry imports.

DATA_MODULE = """
import torch
from executor.data import TaskData, TensorPairs

def load(seed: int = 0):
    g = torch.Generator().manual_seed({draw})
    x = torch.randn(160, 1, 8, 8, generator=g)
    y = (x.mean((1, 2, 3)) > 0).long()
    return TaskData("{draw}", TensorPairs(x[:128], y[:128]), TensorPairs(x[128:], y[128:]))
"""


@pytest.mark.multiprocess
@pytest.mark.timeout(180)
def test_module_data_found_elsewhere_or_edited_is_refused(tmp_path, capsys, monkeypatch):
    """Found by the twenty-seventh round: `--data mydata:load` (the README's worked form) was
    recorded as given, with no data.json: a resume from another directory imported that
    directory's `mydata.py` and trained on other data with exit 0 (an edited module alike).
    data.json records the file the module was imported from and its sha256; a resume, an
    export and torchrun's entry that import another file, none, or the file edited, are
    refused in one line naming data.json and the module."""
    from test_hostile_resume import _entry

    from pipeplan.fileio import release_directory

    name = "rt27_mydata"  # this process imports it as the run is prepared: forgotten after
    first, other = tmp_path / "A", tmp_path / "B"
    for folder, draw in ((first, 1), (other, 2)):  # the same shapes, other samples
        folder.mkdir()
        (folder / f"{name}.py").write_text(DATA_MODULE.format(draw=draw))
    monkeypatch.chdir(first)
    argv = ["run", "--model", "vit-digits", "--data", f"{name}:load", "--nproc", "1"]
    assert cli.main([*argv, "--name", "m", "--prepare-only"]) == 0, capsys.readouterr()
    capsys.readouterr()
    sys.modules.pop(name)  # as a new process: found again where it runs
    run = first / "runs" / "m"
    release_directory(run)  # this process's claim: torchrun's rank takes it
    module = first / f"{name}.py"
    record = json.loads((run / "data.json").read_text())
    digest = hashlib.sha256(module.read_bytes()).hexdigest()
    assert record["files"] == [{"path": str(module), "sha256": digest}]
    resume, export = ["run", "--resume", str(run)], ["export", str(run), "--out", "o"]
    monkeypatch.chdir(other)
    elsewhere = (f"{run / 'data.json'}: the run's data module '{name}' was {module}",)
    found = (*elsewhere, f"here (in {other}) '{name}' is {other / f'{name}.py'}")
    for argv in (resume, export):
        refused(argv, tmp_path, capsys, found)
    done = _entry(run, "--resume")
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr[-3000:]
    assert all(f in done.stderr for f in found), done.stderr
    (other / f"{name}.py").unlink()
    refused(resume, tmp_path, capsys, (*elsewhere, f"'{name}' is not found"))
    monkeypatch.chdir(first)
    module.write_text(module.read_text() + "# edited\n")
    for argv in (resume, export):
        refused(argv, tmp_path, capsys, (str(module), "changed since the run started", str(run)))
    assert name not in sys.modules


@pytest.mark.timeout(120)
@pytest.mark.parametrize("swap", ["a link to a copy", "a FIFO", "a folder", "a loop of links"])
def test_a_data_module_swapped_since_the_run_is_named(tmp_path, capsys, monkeypatch, swap):
    """Found by the fifty-first round: the run's module replaced by a link to a copy of
    itself was refused as a file "in the run's tokenizer folder" (a run with no tokenizer),
    and replaced by a FIFO or a folder as "not found … run this command from the directory
    the run was started from", which it was. The module's own file is named, and what it is
    now."""
    name = "rt51_mydata"
    monkeypatch.chdir(tmp_path)
    module = tmp_path / f"{name}.py"
    module.write_text(DATA_MODULE.format(draw=1))
    argv = ["run", "--model", "vit-digits", "--data", f"{name}:load", "--nproc", "1"]
    assert cli.main([*argv, "--name", "m", "--prepare-only"]) == 0, capsys.readouterr()
    capsys.readouterr()
    sys.modules.pop(name)
    copy = tmp_path / "copy.py"
    module.rename(copy)
    if swap == "a link to a copy":
        module.symlink_to(copy)
    elif swap == "a FIFO":
        os.mkfifo(module)
    elif swap == "a folder":
        module.mkdir()
    else:
        module.symlink_to(module.name)
    run = tmp_path / "runs" / "m"
    now = f"a link to {copy}" if swap == "a link to a copy" else "not a regular file"
    said = (f"{module}: the run's data module '{name}' ({run / 'data.json'} lists it), now {now}",)
    for argv in (["run", "--resume", str(run)], ["export", str(run), "--out", "o"]):
        refused(argv, tmp_path, capsys, said)
    assert name not in sys.modules


@pytest.mark.timeout(120)
def test_a_package_that_shadows_the_data_module_since_the_run_is_named(
    tmp_path, capsys, monkeypatch
):
    """Found by the fifty-third round: a package of the module's name put beside its file
    since the run (Python imports it instead) was refused as "data.json: files lacks
    '…/__init__.py'; restore data.json", which was never edited. The new file is named, as
    made after the run started."""
    name = "rt53_mydata"
    monkeypatch.chdir(tmp_path)
    (tmp_path / f"{name}.py").write_text(DATA_MODULE.format(draw=1))
    argv = ["run", "--model", "vit-digits", "--data", f"{name}:load", "--nproc", "1"]
    assert cli.main([*argv, "--name", "m", "--prepare-only"]) == 0, capsys.readouterr()
    capsys.readouterr()
    sys.modules.pop(name)
    time.sleep(0.01)  # the package's inode is newer than data.json's write
    (tmp_path / name).mkdir()
    (tmp_path / name / "__init__.py").write_text(DATA_MODULE.format(draw=2))
    run = tmp_path / "runs" / "m"
    said = f"{tmp_path / name / '__init__.py'}: in the folder data '{name}:load' imports from now"
    for argv in (["run", "--resume", str(run)], ["export", str(run), "--out", "o"]):
        refused(argv, tmp_path, capsys, (said, "remove it or start a new run"))
    sys.modules.pop(name, None)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("package", [False, True], ids=["beside", "package"])
def test_a_helper_module_data_imports_edited_is_refused(tmp_path, capsys, monkeypatch, package):
    """Found by the twenty-eighth round: data.json held only the `--data module:function`
    module's own file: a helper module it imports (beside it, or a package's submodule)
    edited between a stop and --resume trained on other data with exit 0. data.json lists
    the user's modules the data brought in, each with its sha256: a resume or an export with
    one edited is refused naming it; a file data.json names that the data does not read, or
    the module dropped from it, is refused naming the run's data and advising what to do."""
    names = ("rt28_pkg", "rt28_pkg.impl", "rt28_pkg.helper") if package else ("rt28_mydata",)
    helper_name = "rt28_pkg.helper" if package else "rt28_helper"
    folder = tmp_path / "A"
    code = tmp_path / "A" / "rt28_pkg" if package else folder
    code.mkdir(parents=True)
    body = DATA_MODULE.format(draw="helper.DRAW")
    if package:
        (code / "__init__.py").write_text("")
        (module := code / "impl.py").write_text("from rt28_pkg import helper\n" + body)
        helper, spec = code / "helper.py", "rt28_pkg.impl:load"
    else:
        (module := code / "rt28_mydata.py").write_text("import rt28_helper as helper\n" + body)
        helper, spec = code / "rt28_helper.py", "rt28_mydata:load"
    helper.write_text("DRAW = 1\n")
    monkeypatch.chdir(folder)
    argv = ["run", "--model", "vit-digits", "--data", spec, "--nproc", "1"]
    try:
        assert cli.main([*argv, "--name", "m", "--prepare-only"]) == 0, capsys.readouterr()
    finally:
        for name in (*names, helper_name):  # as a new process: imported again
            sys.modules.pop(name, None)
    capsys.readouterr()
    run = folder / "runs" / "m"
    record = json.loads((run / "data.json").read_text())
    paths = [f["path"] for f in record["files"]]
    assert paths[0] == str(module) and str(helper) in paths, paths
    resume, export = ["run", "--resume", str(run)], ["export", str(run), "--out", "o"]
    kept = helper.read_text()
    helper.write_text("DRAW = 2\n")  # other samples, the same shapes
    for argv in (resume, export):
        refused(argv, tmp_path, capsys, (str(helper), "changed since the run started"))
    helper.write_text(kept)
    data_json = run / "data.json"
    for files, said in (
        ([*record["files"], {"path": str(tmp_path / "x.txt"), "sha256": "0" * 64}], "not read"),
        (record["files"][1:], f"lacks '{module}'"),
    ):
        data_json.write_text(json.dumps({**record, "files": files}))
        reads = f"run.json's data '{spec}' (its module, and yours it imports from {folder})"
        refused(resume, tmp_path, capsys, (said, reads, "restore data.json or start a new run"))
    for name in (*names, helper_name):  # find_spec imports a package's parents: forgotten
        assert package or name not in sys.modules
        sys.modules.pop(name, None)


# The sixty-ninth round's data: its samples scaled by a helper module of the user's, beside
# the data module (`import rt69_helper`), so that an edit of the helper is other data.
LINKED_DATA = "import rt69_helper as helper\n" + DATA_MODULE.format(draw=1).replace(
    "y = ", "x = x * helper.SCALE\n    y = "
)
RT69_NAMES = (
    "rt69_helper",
    "rt69_mydata",
    "rt69_pkg",
    "rt69_pkg.sub",
    "_pipeplan_data_rt69_mydata",
)


def _forget_rt69() -> None:
    """The sixty-ninth round's modules out of sys.modules: as a new process, imported again."""
    for name in RT69_NAMES:
        sys.modules.pop(name, None)


def _prepared_rt69(work: Path, spec: str, monkeypatch, capsys) -> Path:
    """`run --prepare-only` of vit-digits on `spec` from `work` (1 rank, named m), its modules
    forgotten after as a new process's: the run's folder."""
    monkeypatch.chdir(work)
    argv = ["run", "--model", "vit-digits", "--data", spec, "--nproc", "1"]
    try:
        assert cli.main([*argv, "--name", "m", "--prepare-only"]) == 0, capsys.readouterr()
    finally:
        _forget_rt69()
    capsys.readouterr()
    return work / "runs" / "m"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("form", ["module", "file", "package"])
def test_a_helper_beside_a_linked_data_module_is_recorded_and_checked(
    tmp_path, capsys, monkeypatch, form
):
    """Found by the sixty-ninth round: where the data module was a link to a file kept
    elsewhere (`work/mydata.py -> ../ext/real.py`, `--data ./mydata.py:load` alike, or a
    package `pkg` that is a link to a folder elsewhere), the link's target folder was taken
    for the user's folder: a helper beside the link, which the module imports, was not in
    data.json, and a resume after it was edited trained on other data with exit 0. The
    user's folder is where the module is imported from: the helper is recorded, and a resume
    or an export with it edited is refused in one line naming it."""
    work, ext = tmp_path / "work", tmp_path / "ext"
    work.mkdir()
    (ext / "pkgreal").mkdir(parents=True)
    helper = work / "rt69_helper.py"
    helper.write_text("SCALE = 1.0\n")
    if form == "package":
        (ext / "pkgreal" / "__init__.py").write_text("")
        (ext / "pkgreal" / "sub.py").write_text(LINKED_DATA)
        (work / "rt69_pkg").symlink_to(ext / "pkgreal", target_is_directory=True)
        spec = "rt69_pkg.sub:load"
    else:
        (ext / "real.py").write_text(LINKED_DATA)
        (work / "rt69_mydata.py").symlink_to(ext / "real.py")
        spec = "rt69_mydata:load" if form == "module" else "./rt69_mydata.py:load"
    run = _prepared_rt69(work, spec, monkeypatch, capsys)
    paths = [f["path"] for f in json.loads((run / "data.json").read_text())["files"]]
    assert str(helper) in paths, paths
    helper.write_text("SCALE = 9.0\n")  # other samples, the same shapes
    try:
        for command in (["run", "--resume", str(run)], ["export", str(run), "--out", "o"]):
            refused(command, tmp_path, capsys, (str(helper), "changed since the run started"))
    finally:
        _forget_rt69()


def test_a_helper_beside_a_linked_data_module_edited_between_calls_is_imported_again(
    tmp_path, monkeypatch
):
    """Found by the sixty-ninth round: with the data module a link to a file kept elsewhere,
    a helper beside the link edited between two Python API calls was not imported again: the
    second call's launcher checked the old helper's data while its ranks trained on the new.
    The helper is the user's, of the folder the module is imported from: imported again."""
    import pipeplan
    from pipeplan.errors import PipeplanError

    work, ext = tmp_path / "work", tmp_path / "ext"
    work.mkdir()
    ext.mkdir()
    helper = work / "rt69_helper.py"
    helper.write_text("WORD = 'first'\n")
    (ext / "real.py").write_text(
        "import rt69_helper\ndef load(seed=0):\n    raise ValueError(rt69_helper.WORD)\n"
    )
    (work / "rt69_mydata.py").symlink_to(ext / "real.py")
    monkeypatch.chdir(work)
    _forget_rt69()

    def said() -> str:
        with pytest.raises(PipeplanError) as error:
            pipeplan.run(
                model="vit-digits", data="rt69_mydata:load", nproc=1, name="e", runs_dir="runs"
            )
        return str(error.value).rpartition(": ")[2]

    try:
        assert said() == "first"
        helper.write_text("WORD = 'second'\n")
        stat = helper.stat()  # a later mtime, however fast the edit
        os.utime(helper, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
        assert said() == "second"
    finally:
        _forget_rt69()


@pytest.mark.timeout(120)
def test_a_run_folder_link_retargeted_since_names_the_folder_not_data_json(
    tmp_path, capsys, monkeypatch
):
    """Found by the seventieth round: a run started in a folder reached through a link (`cl ->
    A`), the link then pointed at B, whose `mydata.py` is a link back to A's and whose helper
    differs: the refusal was right but said "restore data.json", which nobody edited. It
    names both folders and says where to run from, in one line, for a resume and an export."""
    from executor.task import check_data, read_run_config

    a, b = tmp_path / "A", tmp_path / "B"
    a.mkdir()
    b.mkdir()
    (a / "rt69_helper.py").write_text("SCALE = 1.0\n")
    (b / "rt69_helper.py").write_text("SCALE = 9.0\n")
    (a / "rt69_mydata.py").write_text(LINKED_DATA)
    (b / "rt69_mydata.py").symlink_to(a / "rt69_mydata.py")
    link = tmp_path / "cl"
    link.symlink_to(a, target_is_directory=True)
    run = _prepared_rt69(link, "rt69_mydata:load", monkeypatch, capsys).resolve()
    link.unlink()
    link.symlink_to(b, target_is_directory=True)
    monkeypatch.chdir(link)
    said = (f"imported from {a}, but here", "run this command from the directory the run was")
    try:
        for command in (["run", "--resume", str(run)], ["export", str(run), "--out", "o"]):
            refused(command, tmp_path, capsys, said)
        monkeypatch.chdir(a)
        check_data(run, read_run_config(run))  # from the run's folder: its data
    finally:
        _forget_rt69()


@pytest.mark.timeout(120)
def test_a_run_folder_moved_with_a_link_left_in_its_place_resumes(tmp_path, capsys, monkeypatch):
    """Found by the seventy-first round: the run's folder moved and a link left at its old
    path (`mv A A2; ln -s A2 A`), the same bytes: a resume or an export from either was
    refused, saying to run from the directory the run was started from, where it was run.
    The same files are the run's data; a helper edited since is still refused by name."""
    from executor.task import check_data, read_run_config

    a, moved = tmp_path / "A", tmp_path / "A2"
    a.mkdir()
    helper = a / "rt69_helper.py"
    helper.write_text("SCALE = 1.0\n")
    (a / "rt69_mydata.py").write_text(LINKED_DATA)
    monkeypatch.chdir(a)
    argv = ["run", "--model", "vit-digits", "--data", "rt69_mydata:load", "--nproc", "1"]
    argv += ["--runs-dir", str(tmp_path / "runs"), "--name", "m", "--prepare-only"]
    try:
        assert cli.main(argv) == 0, capsys.readouterr()
    finally:
        _forget_rt69()
    capsys.readouterr()
    run = tmp_path / "runs" / "m"
    a.rename(moved)
    a.symlink_to(moved, target_is_directory=True)
    try:
        for where in (a, moved):
            monkeypatch.chdir(where)
            check_data(run, read_run_config(run))
            _forget_rt69()
        (moved / "rt69_helper.py").write_text("SCALE = 9.0\n")
        for command in (["run", "--resume", str(run)], ["export", str(run), "--out", "o"]):
            refused(command, tmp_path, capsys, (str(helper), "changed since the run started"))
    finally:
        _forget_rt69()


class _OddName(str):
    """A module's `__file__` that is a str whose methods raise (the sixty-ninth round's)."""

    def endswith(self, *args):
        raise RuntimeError("boom")

    startswith = __contains__ = __fspath__ = split = rpartition = endswith


def test_a_module_whose_file_is_an_odd_str_is_no_users_file(tmp_path, capsys, monkeypatch):
    """Found by the sixty-ninth round: a module in sys.modules whose `__file__` is a str
    subclass whose methods raise (`endswith`: RuntimeError) ended `pipeplan run` with a
    traceback of the scan for the user's modules (exit 1, no run made). Only a plain str is
    a file name: the module is no file of the user's, the run is prepared, data.json lists
    the data module alone, and the scans (`helper_files`, the API's `_user_modules` and
    `_forget_if_edited`) pass it over."""
    from executor import data as D

    name = "rt69_odd"
    (tmp_path / f"{name}.py").write_text(
        "import sys, types\n"
        "from test_hostile_data import _OddName\n"
        + DATA_MODULE.format(draw=1).replace(
            "def load(seed: int = 0):\n",
            "def load(seed: int = 0):\n"
            "    odd = types.ModuleType('rt69_oddmod')\n"
            f"    odd.__file__ = _OddName({str(tmp_path / 'y.py')!r})\n"
            "    sys.modules['rt69_oddmod'] = odd\n",
        )
    )
    monkeypatch.chdir(tmp_path)
    spec = f"{name}:load"
    argv = ["run", "--model", "vit-digits", "--data", spec, "--nproc", "1"]
    try:
        code = cli.main([*argv, "--name", "m", "--prepare-only"])
        assert code == 0 and "Traceback" not in capsys.readouterr().err
        paths = [
            f["path"] for f in json.loads((tmp_path / "runs/m/data.json").read_text())["files"]
        ]
        assert paths == [str(tmp_path / f"{name}.py")]
        assert "rt69_oddmod" in sys.modules
        assert D.helper_files(spec) == []
        assert "rt69_oddmod" not in D._user_modules(name, spec)
        D._remember_files(name, spec)
        D._forget_if_edited(name, spec)
    finally:
        for gone in (name, "rt69_oddmod"):
            sys.modules.pop(gone, None)


@pytest.mark.timeout(120)
def test_a_link_in_the_datas_folder_retargeted_since_the_run_is_refused(
    tmp_path, capsys, monkeypatch
):
    """Found by the sixty-ninth round: a helper that is a link to another file of the data's
    folder (`helper.py -> lib/helper_v1.py`) was recorded by its target, so pointed at
    another file of the folder older than the run (`lib/helper_v2.py`), a resume and an
    export trained on other data with exit 0. The link is recorded by its place, with its
    target's sha256: retargeted to other content it is refused in one line naming the link;
    to a copy of the same content, the data is the run's."""
    from executor.task import check_data, read_run_config

    work = tmp_path / "work"
    (work / "lib").mkdir(parents=True)
    (work / "lib" / "helper_v1.py").write_text("SCALE = 1.0\n")
    (work / "lib" / "helper_v2.py").write_text("SCALE = 9.0\n")
    (work / "lib" / "copy.py").write_text("SCALE = 1.0\n")
    helper = work / "rt69_helper.py"
    helper.symlink_to("lib/helper_v1.py")
    (work / "rt69_mydata.py").write_text(LINKED_DATA)
    run = _prepared_rt69(work, "rt69_mydata:load", monkeypatch, capsys)
    paths = [f["path"] for f in json.loads((run / "data.json").read_text())["files"]]
    assert paths == [str(work / "rt69_mydata.py"), str(helper)]
    helper.unlink()
    helper.symlink_to("lib/helper_v2.py")
    try:
        for command in (["run", "--resume", str(run)], ["export", str(run), "--out", "o"]):
            refused(command, tmp_path, capsys, (str(helper), "changed since the run started"))
        helper.unlink()
        helper.symlink_to("lib/copy.py")
        check_data(run, read_run_config(run))  # the same content: the run's data
    finally:
        _forget_rt69()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("form", ["module", "package"])
def test_a_data_module_link_retargeted_since_the_run_is_named(tmp_path, capsys, monkeypatch, form):
    """Found by the sixty-ninth round: the data module a link in its folder (`mydata.py ->
    mydata_v1.py`), pointed at another module of the folder since the run, was refused as
    "data.json: files lacks '…/mydata_v2.py' … restore data.json", which was never edited.
    The link is named, and what it points at now (a package's folder linked alike)."""
    work = tmp_path / "work"
    for version in (1, 2):
        folder = work / f"pkg_v{version}"
        folder.mkdir(parents=True)
        (folder / "__init__.py").write_text("")
        (folder / "sub.py").write_text(DATA_MODULE.format(draw=version))
        (work / f"mydata_v{version}.py").write_text(DATA_MODULE.format(draw=version))
    link, was, now = (
        (work / "rt69_mydata.py", "mydata_v1.py", "mydata_v2.py")
        if form == "module"
        else (work / "rt69_pkg", "pkg_v1", "pkg_v2")
    )
    link.symlink_to(was)
    spec = "rt69_mydata:load" if form == "module" else "rt69_pkg.sub:load"
    run = _prepared_rt69(work, spec, monkeypatch, capsys)
    link.unlink()
    link.symlink_to(now)
    said = (f"{link}: the run's data module", f"now to {work / now}", "put the link back")
    try:
        for command in (["run", "--resume", str(run)], ["export", str(run), "--out", "o"]):
            refused(command, tmp_path, capsys, said)
    finally:
        _forget_rt69()


# The ranks are `python -m executor.launch`, started in the user's directory: `-m` put it first
# on sys.path, while the launcher appends it for the data module alone (twenty-eighth round).


@pytest.mark.multiprocess
@pytest.mark.timeout(240)
def test_stdlib_named_files_and_a_module_on_pythonpath_leave_the_ranks_alone(
    tmp_path, capsys, monkeypatch
):
    """Found by the twenty-eighth round: a token.py or queue.py in the directory a run was
    started from (a user's own file) was imported inside `import torch` by every rank: a
    50-line traceback and advice to delete the run; and a `--data mydata:load` whose name
    was also on PYTHONPATH was recorded from there by the launcher (which appends the
    directory) and refused by the ranks (which had it first), advising to run from the
    directory the run was started in. The ranks start with safe path handling (`-P`, and a
    first statement that takes the directory off for torchrun's entry) and import the data
    module by the launcher's rule: the run trains on the file data.json records, and the
    torchrun entry started there says its one line."""
    from test_hostile_resume import _entry

    name = "rt28p_mydata"
    here, lib = tmp_path / "A", tmp_path / "lib"
    for folder, draw in ((here, 1), (lib, 2)):  # the same shapes, other samples
        folder.mkdir()
        (folder / f"{name}.py").write_text(DATA_MODULE.format(draw=draw))
    for stdlib in ("token", "queue"):  # torch imports both: `from token import …` failed
        (here / f"{stdlib}.py").write_text("x = 1\n")
    monkeypatch.chdir(here)
    monkeypatch.syspath_prepend(str(lib))  # this process as started with lib on PYTHONPATH
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(filter(None, [os.environ.get("PYTHONPATH"), str(lib)]))
    )
    argv = ["run", "--model", "vit-digits", "--data", f"{name}:load", "--nproc", "1"]
    argv += ["--epochs", "1", "--max-steps-per-epoch", "2", "--name", "m"]
    try:
        assert cli.main(argv) == 0, capsys.readouterr().err[-3000:]
    finally:
        sys.modules.pop(name, None)
    run = here / "runs" / "m"
    record = json.loads((run / "data.json").read_text())
    assert [f["path"] for f in record["files"]] == [str(lib / f"{name}.py")]
    assert json.loads((run / "summary.json").read_text())
    done = _entry(run)  # torchrun's entry, from here: the run has finished
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr[-3000:]
    assert done.stderr.startswith("pipeplan: error: "), done.stderr


@pytest.mark.timeout(120)
def test_a_module_data_imports_inside_its_function_is_found(tmp_path, capsys, monkeypatch):
    """Found by the twenty-eighth round: `import helper` inside load(), helper.py beside the
    data module, was "data 'mydata:load' raised ModuleNotFoundError: No module named
    'helper'": the directory was on sys.path only while the module itself was imported.
    It stays there while load() runs (the ranks alike): the run is prepared, and data.json
    lists the helper."""
    name, helper = "rt28f7_mydata", "rt28f7_helper"
    body = DATA_MODULE.format(draw=f"__import__('{helper}').DRAW")
    files = _prepared_beside_a_helper(tmp_path, capsys, monkeypatch, name, body, helper, "load")
    assert files == [str(tmp_path / f"{name}.py"), str(tmp_path / f"{helper}.py")]


def _prepared_beside_a_helper(tmp_path, capsys, monkeypatch, name, body, helper, function):
    """`run --prepare-only` of `--data NAME:FUNCTION` (NAME.py holding `body`) from tmp_path,
    a helper module HELPER.py beside it (`DRAW = 1`, `OFFSET = 0.0`): data.json's files."""
    (tmp_path / f"{name}.py").write_text(body)
    (tmp_path / f"{helper}.py").write_text("DRAW = 1\nOFFSET = 0.0\n")
    monkeypatch.chdir(tmp_path)
    argv = ["run", "--model", "vit-digits", "--data", f"{name}:{function}", "--nproc", "1"]
    try:
        assert cli.main([*argv, "--name", "m", "--prepare-only"]) == 0, capsys.readouterr()
    finally:
        for module in (name, helper):
            sys.modules.pop(module, None)
    record = json.loads((tmp_path / "runs" / "m" / "data.json").read_text())
    return [f["path"] for f in record["files"]]


def test_a_data_module_named_like_the_standard_library_says_which_it_imported(
    tmp_path, capsys, monkeypatch
):
    """Found by the twenty-eighth round: `--data queue:load` beside ./queue.py said "'queue'
    has no function 'load'" of the standard library's queue, which the directory comes
    after. The refusal names the file imported and the one not, and to rename it."""
    (tmp_path / "queue.py").write_text("def load():\n    pass\n")
    monkeypatch.chdir(tmp_path)
    stdlib = Path(sys.modules["queue"].__file__).resolve()
    argv = ["run", "--model", "vit-digits", "--data", "queue:load", "--prepare-only"]
    fragments = (
        "data 'queue:load': 'queue' has no function 'load'",
        f"'queue' is the standard library's {stdlib}, not ./queue.py",
        "rename your file",
    )
    refused([*argv, "--runs-dir", str(tmp_path / "runs")], tmp_path, capsys, fragments)


def test_a_data_module_named_like_pipeplans_own_package_is_not_taken_for_it(
    tmp_path, capsys, monkeypatch
):
    """Found by the thirtieth round: a user's profiles.py beside the data (or `--data
    profiles:load`) was imported as pipeplan's own `profiles` package while the directory was
    on the path (the editable install's finder comes after it): a traceback, "'profiles' is
    not a package". The installation's packages are imported first: the refusal names the
    package imported and ./profiles.py."""
    (tmp_path / "profiles.py").write_text(DATA_MODULE.format(draw=1))
    monkeypatch.chdir(tmp_path)
    # As the `pipeplan` script runs: `profiles` not imported yet, and found by the install's
    # finder, which comes after the path (`python -m pytest` puts the checkout on it).
    monkeypatch.delitem(sys.modules, "profiles", raising=False)
    own = [p for p in sys.path if (Path(p or ".") / "profiles" / "__init__.py").is_file()]
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in own])
    argv = ["run", "--model", "vit-digits", "--data", "profiles:load", "--prepare-only"]
    fragments = ("'profiles' has no function 'load'", "not ./profiles.py", "rename your file")
    refused([*argv, "--runs-dir", str(tmp_path / "runs")], tmp_path, capsys, fragments)
    assert Path(sys.modules["profiles"].__file__).parent != tmp_path


@pytest.mark.timeout(120)
def test_a_module_the_data_imports_as_its_items_are_read_is_found(tmp_path, capsys, monkeypatch):
    """Found by the thirtieth round: `import helper` inside a `__getitem__` (helper.py beside
    the data module) was "reading train item 0 raised ModuleNotFoundError": the directory was
    on the path only while the module was imported and `load()` ran. The launcher's reads of
    the sets are under the same rule, a rank keeps the directory while it trains, and
    data.json lists the helper."""
    name, helper = "rt30f3_mydata", "rt30f3_helper"
    body = DATA_MODULE.replace(
        "import torch\n", "import torch\nfrom torch.utils.data import Dataset\n", 1
    ).format(draw=1)
    body += f"""
class Lazy(Dataset):
    def __init__(self, pairs):
        self.pairs = pairs
    def __len__(self):
        return len(self.pairs)
    def __getitem__(self, i):
        import {helper}
        x, y = self.pairs[i]
        return x + {helper}.OFFSET, y

def lazy(seed: int = 0):
    data = load(seed)
    return TaskData("lazy", Lazy(data.train), Lazy(data.eval))
"""
    files = _prepared_beside_a_helper(tmp_path, capsys, monkeypatch, name, body, helper, "lazy")
    assert str(tmp_path) not in sys.path  # the launcher's reads put it back
    assert files == [str(tmp_path / f"{name}.py"), str(tmp_path / f"{helper}.py")]


# The thirty-first round's module: items 150 to 198 of the training set import a helper, which
# the launcher's checks (the first and the last item) never read.
LAZY_MODULE = """
import torch

class DS:
    def __init__(self, n):
        self.n = n
    def __len__(self):
        return self.n
    def __getitem__(self, i):
        if i >= self.n:
            raise IndexError(i)
        scale = 1.0
        if 150 <= i < 199:
            import {helper}
            scale = {helper}.SCALE
        g = torch.Generator().manual_seed(i)
        return torch.rand(1, 8, 8, generator=g) * scale, torch.tensor(i % 10)

def load(seed=0):
    return DS(200), DS(40)
"""


@pytest.mark.multiprocess
@pytest.mark.timeout(240)
# In `-m long`, for the suite's time: the default run keeps
# test_data_json_edited_while_the_run_trains_is_not_taken_into_its_checkpoint.
@pytest.mark.long
def test_a_module_only_the_ranks_import_is_recorded_at_checkpoints(tmp_path, capsys, monkeypatch):
    """Found by the thirty-first round: a helper a `__getitem__` imported only for items the
    launcher never reads was imported by the ranks alone, so data.json (written by the
    launcher) did not list it, and a resume after it was edited trained on other data with
    exit 0. Each rank's imports of your modules are gathered at each checkpoint, before its
    manifest, and added to data.json: a resume or an export with the helper edited is
    refused naming it; restored, the run exports."""
    name, helper = "rt31_lazydata", "rt31_lazyhelp"
    (module := tmp_path / f"{name}.py").write_text(LAZY_MODULE.format(helper=helper))
    (lazy := tmp_path / f"{helper}.py").write_text("SCALE = 1.0\n")
    monkeypatch.chdir(tmp_path)
    argv = ["run", "--nproc", "1", "--model", "vit-digits", "--data", f"{name}:load"]
    argv += ["--epochs", "1", "--max-steps-per-epoch", "2", "--global-batch", "64", "--name", "y"]
    try:
        assert cli.main(argv) == 0, capsys.readouterr().err[-3000:]
        assert helper not in sys.modules  # the launcher never imported it: the rank did
    finally:
        sys.modules.pop(name, None)
    capsys.readouterr()
    run = tmp_path / "runs" / "y"
    record = json.loads((run / "data.json").read_text())
    assert [f["path"] for f in record["files"]] == [str(module), str(lazy)], record
    kept = lazy.read_text()
    lazy.write_text("SCALE = 1000.0\n")  # the same shapes, inputs ×1000
    try:
        for command in (["export", str(run), "--out", "o"], ["run", "--resume", str(run)]):
            refused(command, tmp_path, capsys, (str(lazy), "changed since the run started"))
        lazy.write_text(kept)
        assert cli.main(["export", str(run), "--out", "o"]) == 0, capsys.readouterr().err
    finally:
        for loaded in (name, helper):
            sys.modules.pop(loaded, None)


@pytest.mark.multiprocess
@pytest.mark.timeout(240)
# In `-m long`, for the suite's time: the default run keeps
# test_module_data_found_elsewhere_or_edited_is_refused.
@pytest.mark.long
def test_a_helpers_entry_deleted_from_data_json_is_refused_by_the_checkpoint(
    tmp_path, capsys, monkeypatch
):
    """Found by the thirty-first round: a run whose helper module data.json listed (imported
    for every item) resumed with exit 0 after the helper's entry was deleted from data.json
    and the helper edited (inputs ×1000), and the next checkpoint recorded the edited file's
    sha256: data.json's own list was trusted, any subset of your helpers accepted. Each
    checkpoint's manifest holds the files data.json listed then: a resume or an export of a
    data.json that lacks one, or lists it with another sha256, is refused in one line naming
    data.json, the checkpoint and the file; the helper edited or not."""
    name, helper = "rt31_eagerdata", "rt31_helper3"
    body = LAZY_MODULE.replace("if 150 <= i < 199:", "if True:").format(helper=helper)
    (module := tmp_path / f"{name}.py").write_text(body)
    (lazy := tmp_path / f"{helper}.py").write_text("SCALE = 1.0\n")
    monkeypatch.chdir(tmp_path)
    argv = ["run", "--nproc", "1", "--model", "vit-digits", "--data", f"{name}:load"]
    argv += ["--epochs", "1", "--max-steps-per-epoch", "1", "--global-batch", "64", "--name", "z"]
    run = tmp_path / "runs" / "z"
    commands = (["export", str(run), "--out", "o"], ["run", "--resume", str(run), "--epochs", "2"])
    try:
        assert cli.main(argv) == 0, capsys.readouterr().err[-3000:]
        capsys.readouterr()
        kept = (run / "data.json").read_text()
        record = json.loads(kept)
        assert [f["path"] for f in record["files"]] == [str(module), str(lazy)], record
        edited = "SCALE = 1000.0\n"  # the same shapes, inputs ×1000
        digest = hashlib.sha256(edited.encode()).hexdigest()
        only_the_module = {**record, "files": record["files"][:1]}
        laundered = {**record, "files": [record["files"][0], {"path": str(lazy), "sha256": digest}]}
        for helper_text, doc, wrong, restore in (
            ("SCALE = 1.0\n", only_the_module, "lacks", "restore data.json"),  # as it was
            (edited, only_the_module, "lacks", "restore data.json"),
            # What the resume left, the edit's sha256: data.json's is the file's own now.
            (edited, laundered, "gives", "restore the edited one"),
        ):
            lazy.write_text(helper_text)
            (run / "data.json").write_text(json.dumps(doc))
            fragments = (f"{run / 'data.json'}: files {wrong} '{lazy}'", "checkpoint step-1")
            for command in commands:
                refused(command, tmp_path, capsys, (*fragments, restore))
        lazy.write_text("SCALE = 1.0\n")
        (run / "data.json").write_text(kept)
        assert cli.main(commands[0]) == 0, capsys.readouterr().err
    finally:
        for loaded in (name, helper):
            sys.modules.pop(loaded, None)


# A data module whose first item a rank reads edits its helper and data.json's sha256 of it,
# as a user might while the run trains (the launcher, which has no RANK, never does).
EDITING_MODULE = LAZY_MODULE.replace(
    "        scale = 1.0\n",
    """        scale = 1.0
        import hashlib, json, os, pathlib
        helper = pathlib.Path({folder!r}, "{helper}.py")
        record = pathlib.Path({record!r})
        if os.environ.get("RANK") and "1000" not in helper.read_text():
            helper.write_text("SCALE = 1000.0\\n")
            doc = json.loads(record.read_text())
            digest = hashlib.sha256(helper.read_bytes()).hexdigest()
            for f in doc["files"]:
                if f["path"].endswith(helper.name):
                    f["sha256"] = digest
            record.write_text(json.dumps(doc))
""",
    1,
).replace("if 150 <= i < 199:", "if True:")


@pytest.mark.multiprocess
@pytest.mark.timeout(240)
def test_data_json_edited_while_the_run_trains_is_not_taken_into_its_checkpoint(
    tmp_path, capsys, monkeypatch
):
    """Found in the thirty-first round's notes: data.json was read again at each checkpoint,
    so an edit made to it mid-run (a helper edited, its sha256 in data.json updated to match)
    went into the checkpoint's manifest, and a resume or an export took the edited helper for
    the run's. Rank 0 keeps data.json as the run started, with what checkpoints add: the
    manifest holds the helper's sha256 as the run started, and both are refused. Since the
    fifty-eighth round the run itself fails at its end, naming data.json replaced, where it
    ended well (exit 0) with every later command refusing it."""
    name, helper = "rt32_editdata", "rt32_edithelp"
    run = tmp_path / "runs" / "e"
    body = EDITING_MODULE.format(helper=helper, folder=str(tmp_path), record=str(run / "data.json"))
    (tmp_path / f"{name}.py").write_text(body)
    (lazy := tmp_path / f"{helper}.py").write_text("SCALE = 1.0\n")
    monkeypatch.chdir(tmp_path)
    argv = ["run", "--nproc", "1", "--model", "vit-digits", "--data", f"{name}:load"]
    argv += ["--epochs", "1", "--max-steps-per-epoch", "1", "--global-batch", "64", "--name", "e"]
    try:
        assert cli.main(argv) == 2
        said = f"{Path('runs/e/data.json')}: replaced while the run trained"
        assert said in capsys.readouterr().err.splitlines()[-1]
        assert "1000" in lazy.read_text()  # edited as the rank trained
        fragments = (f"{run / 'data.json'}: files gives '{lazy}'", "checkpoint step-1")
        for command in (["export", str(run), "--out", "o"], ["run", "--resume", str(run)]):
            refused(command, tmp_path, capsys, (*fragments, "restore the edited one"))
    finally:
        for loaded in (name, helper):
            sys.modules.pop(loaded, None)


def _folder_without(made, tmp_path, edit) -> Path:
    """The BERT checkpoint's config.json edited by `edit`, in a folder without its weights
    (a config of other sizes would not load them): built with --init random."""
    folder = tmp_path / "edited"
    folder.mkdir(parents=True)
    config = json.loads((made["checkpoint"] / "config.json").read_text())
    edit(config)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


@pytest.mark.parametrize(
    "field, default",
    [("intermediate_size", 3072), ("num_hidden_layers", 12), ("vocab_size", 30522)],
)
def test_a_shape_field_config_json_leaves_out_is_held_to_the_profile_at_its_default(
    made, tmp_path, capsys, field, default
):
    """Found by the twenty-seventh round: a folder whose config.json leaves out
    intermediate_size was planned and trained with the profile of the model whose config
    said 64 (transformers built BERT's default 3072: a model 18 times larger, priced as the
    small one), and one leaving out num_hidden_layers was prepared and failed on rank 0 after
    launching. Now the config transformers builds, defaults filled in, is held to the
    profile: refused before anything is written, naming the field, its default and the
    command that profiles the folder; a field left out at the recorded value still passes."""
    folder = _folder_without(made, tmp_path, lambda config: config.pop(field))
    data = write_jsonl(tmp_path / "r.jsonl", reviews(20, seed=1))
    argv = [*prepare(made, tmp_path, data, model=folder), "--init", "random"]
    fragments = (
        f"config field '{field}' is {BERT[field]}",
        f"{folder / 'config.json'} has no {field}, so transformers builds bert's default {default}",
        f"pipeplan profile {folder} --seq-len 12 --task classification --padding-mask --out",
    )
    refused(argv, tmp_path, capsys, fragments)
    # A field left out at the value the profile recorded (type_vocab_size 2) is that model.
    same = _folder_without(made, tmp_path / "same", lambda config: config.pop("type_vocab_size"))
    assert cli.main([*prepare(made, tmp_path, data, model=same), "--init", "random"]) == 0


def test_an_eager_folder_is_refused_a_profile_timed_with_sdpa(made, tmp_path, capsys):
    """Found by the twenty-seventh round: a folder whose config.json says attn_implementation
    eager (which keeps every block's attention probabilities for the backward pass) was
    planned with a profile timed with sdpa, which did not even record the attention it timed.
    Now a profile records it (`LayerSequence.config_json`) and a folder is held to it."""
    assert json.loads(made["profile"].read_text())["model"]["config"]["attn_implementation"] == (
        "sdpa"
    )
    folder = _folder_without(made, tmp_path, lambda c: c.update(attn_implementation="eager"))
    data = write_jsonl(tmp_path / "r.jsonl", reviews(20, seed=1))
    argv = [*prepare(made, tmp_path, data, model=folder), "--init", "random"]
    refused(argv, tmp_path, capsys, "config field 'attn_implementation' is 'sdpa', but")


def test_the_underscore_attention_spelling_is_held_to_the_profile(made, tmp_path, capsys):
    """Found by the twenty-eighth round: a config.json saying `_attn_implementation` eager
    was planned with a profile timed with sdpa, and its own profile, which recorded eager, was
    refused as profiling another attention. Which spelling transformers reads changed between
    releases (earlier 5.x let the underscore win; 5.25 ignores it), so the folder is held to
    what transformers builds of it, asked of transformers: the folder's own profile passes, a
    profile timed with the other attention is refused."""
    import transformers

    folder = _folder_without(made, tmp_path, lambda c: c.update(_attn_implementation="eager"))
    built = transformers.AutoModel.from_config(transformers.AutoConfig.from_pretrained(folder))
    attention = built.config._attn_implementation
    assert attention in ("eager", "sdpa")
    data = write_jsonl(tmp_path / "r.jsonl", reviews(20, seed=1))
    own = profile(folder, tmp_path / "own.json")
    assert json.loads(own.read_text())["model"]["config"]["attn_implementation"] == attention
    argv = [*prepare(made, tmp_path, data, model=folder, profile=own), "--init", "random"]
    assert cli.main(argv) == 0
    other = "sdpa" if attention == "eager" else "eager"
    timed = _folder_without(made, tmp_path / "other", lambda c: c.update(attn_implementation=other))
    timed_profile = profile(timed, tmp_path / "o.json")
    argv = [*prepare(made, tmp_path, data, model=folder, profile=timed_profile)]
    shutil.rmtree(tmp_path / "runs")
    capsys.readouterr()
    refused([*argv, "--init", "random"], tmp_path, capsys, f"'attn_implementation' is '{other}'")


def test_data_of_another_label_count_than_the_profiles_head_is_refused(made, tmp_path, capsys):
    """Found by the twenty-seventh round: data whose labels make a head of another size than
    the profile's (10^6 classes against a 2-label profile: 32 million parameters priced as
    66) was planned as fitting. Now the profile's num_labels is held to the head the run
    builds where the weights differ by more than HEAD_SHARE of the model's (ids 0, 50, 100: a
    head of 101 outputs, 3,267 weights more than the profile's 2 on this 24,482-weight BERT),
    in one line naming the profile, both counts and the command that profiles it (`profile
    --num-labels`), whose profile passes; a head of 3 (33 weights more) is priced as the
    profile's."""
    rows = [{"text": row["text"], "label": i % 3 * 50} for i, row in enumerate(reviews(30, seed=1))]
    data = write_jsonl(tmp_path / "wide.jsonl", rows)
    fragments = (
        f"{made['profile']}: model.num_labels is 2, but this run builds a head of 101 outputs",
        "--task classification --num-labels 101 --padding-mask --out P.json",
    )
    refused(prepare(made, tmp_path, data), tmp_path, capsys, fragments)
    # The profile that command makes is the run's.
    wide = profile(made["checkpoint"], tmp_path / "p101.json", "--num-labels", "101")
    assert cli.main(prepare(made, tmp_path, data, profile=wide)) == 0
    rows = [{"text": row["text"], "label": i % 3} for i, row in enumerate(reviews(30, seed=1))]
    three = write_jsonl(tmp_path / "three.jsonl", rows)
    argv = prepare(made, tmp_path, three)
    argv[argv.index("--name") + 1] = "three"
    assert cli.main(argv) == 0


# ----------------------------------------------------------------------------- the 27th round

PEAK_OF_TOKENIZING = """
import json, resource, sys
resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
import cli
from executor import text

def status(key):
    line = next(l for l in open("/proc/self/status") if l.startswith(key + ":"))
    return int(line.split()[1]) * 1024

tokenize, grown = text.tokenize, []

def measured(*args, **kwargs):
    before = status("VmRSS")
    try:
        return tokenize(*args, **kwargs)
    finally:
        grown.append(status("VmHWM") - before)

text.tokenize = measured
code = cli.main(sys.argv[1:])
print(json.dumps({"code": code, "grown": grown}))
"""


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_many_short_rows_are_tokenized_in_bounded_memory(made, tmp_path):
    """Found by the twenty-seventh round: one tokenizer call over every text held the
    library's encodings and transformers' lists of them at once, ~2.5 KB a short row (1,000,000
    rows of a 30 MB file peaked at 3 GB), and under `ulimit -v` the library aborted, no line.
    Now they are encoded a chunk at a time into one tensor: 100,000 rows prepare under a 4 GiB
    address-space cap, tokenizing growing the peak by less than 120 MB (was ~250 MB)."""
    import subprocess
    import sys

    data = tmp_path / "many.jsonl"
    data.write_text('{"text": "great film", "label": "positive"}\n' * 50_000 +
                    '{"text": "dull plot", "label": "negative"}\n' * 50_000)  # fmt: skip
    argv = prepare(made, tmp_path, data)
    done = subprocess.run(
        [sys.executable, "-c", PEAK_OF_TOKENIZING, *argv],
        capture_output=True,
        text=True,
        timeout=220,
        cwd=Path(cli.__file__).parent,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["code"] == 0, done.stderr[-2000:]
    assert len(result["grown"]) == 1 and result["grown"][0] < 120 << 20, result


def _memory_left(monkeypatch, left: int, limit: int = 4 << 30) -> None:
    """`memory_left()` says `left` bytes of `limit` are left (ulimit -v)."""
    monkeypatch.setattr(models, "memory_left", lambda ranks=1: (left, limit, "ulimit -v"))


def test_rows_whose_ids_exceed_the_memory_left_are_refused(made, tmp_path, capsys, monkeypatch):
    """Found by the twenty-seventh round: 5,000,000 rows (a 152 MB file) under `ulimit -v`
    died in the tokenizers library's allocator, exit 134 with no line (pipeplan holds stderr
    while the library runs). The ids' size (rows × --seq-len × 8 bytes, and room to encode)
    is weighed against the memory left before the tokenizer loads: one line naming the data
    file, its rows and the limit."""
    rows = [{**row, "label": i % 2} for i, row in enumerate(reviews(40, seed=6))]
    data = write_jsonl(tmp_path / "rows.jsonl", rows)
    corpus = text_files.Corpus(str(data), [row["text"] for row in rows], [], None, None)
    _memory_left(monkeypatch, text_files.encode_room(corpus, 12) + 100)
    fragments = ("rows.jsonl: 40 rows at --seq-len 12 take 5 KiB as token ids", "(ulimit -v)")
    refused(prepare(made, tmp_path, data), tmp_path, capsys, (*fragments, "4.0 GiB"))


def test_what_encoding_takes_is_not_said_to_be_the_rows(made, tmp_path, capsys, monkeypatch):
    """Found by the twenty-eighth round: the fixed 512 MiB kept for encoding was added to the
    rows' ids and the sum said to be what the rows take ("80 rows at --seq-len 16 take 512 MiB
    as token ids"), advising fewer rows or a shorter --seq-len, which could not help; and
    those 80 rows (12 KiB of ids) were refused with 486 MiB left. Now the room scales with the
    largest chunk encoded (`encode_room`, measured), the line names the ids and the room
    apart, and advises fewer rows or a shorter --seq-len only where they could make it fit."""
    rows = [{**row, "label": i % 2} for i, row in enumerate(reviews(80, seed=6))]
    data = write_jsonl(tmp_path / "rows.jsonl", rows)
    _memory_left(monkeypatch, 486 << 20)
    assert cli.main(prepare(made, tmp_path, data)) == 0
    shutil.rmtree(tmp_path / "runs")
    capsys.readouterr()
    corpus = text_files.Corpus(str(data), [row["text"] for row in rows], [], None, None)
    room = text_files.encode_room(corpus, 12)
    # Less left than encoding takes at least: more memory is the one advice.
    _memory_left(monkeypatch, text_files.ENCODE_FIXED - 1)
    line = (
        "rows.jsonl: 80 rows at --seq-len 12 take 10 KiB as token ids, and encoding them needs "
        f"{models.size_words(room)} more; that is more than the "
        f"{models.size_words(text_files.ENCODE_FIXED - 1)} this process has left of 4.0 GiB "
        "(ulimit -v); run pipeplan with more memory"
    )
    assert cli.main(prepare(made, tmp_path, data)) == 2
    assert capsys.readouterr().err == f"pipeplan: error: {data.parent}/{line}\n"
    # Where the rows' part could close the gap, fewer rows or a shorter --seq-len is advised.
    _memory_left(monkeypatch, room - 1)
    refused(prepare(made, tmp_path, data), tmp_path, capsys, "or give fewer rows or a shorter")


@pytest.mark.parametrize("suffix", [".jsonl", ".csv"])
def test_rows_read_past_the_memory_left_name_the_data_file(
    made, tmp_path, capsys, monkeypatch, suffix
):
    """Found by the twenty-seventh round: under `ulimit -v` a file of 5,000,000 rows held as
    Python objects left no memory, and the tokenizer_config.json read next was blamed ("out
    of memory reading it"); out of physical memory the kernel kills the process, no line. The
    memory left is looked at every ROWS_BETWEEN_LOOKS rows read: the data file is named."""
    monkeypatch.setattr(text_files, "ROWS_BETWEEN_LOOKS", 8)
    _memory_left(monkeypatch, 1 << 20)
    data = _written_labels(suffix, tmp_path, ["0", "1"])
    fragments = f"{data.name}: out of memory holding its rows (8 read; 1 MiB of 4.0 GiB left"
    refused(prepare(made, tmp_path, data), tmp_path, capsys, fragments)


@pytest.mark.parametrize("odd", ["-1", "1.0", "+1", "١"])
def test_a_csv_label_not_an_index_among_indices_is_refused(made, tmp_path, capsys, odd):
    """Found by the twenty-seventh round: one CSV label `-1` (or `1.0`, `+1`, an Arabic-Indic
    one) among 40 of 0 and 1 made every label a name, silently: "-1", "0", "1" numbered in
    order, so class 0 became id 1, as JSONL refuses `-1`. A few labels that are not class
    indices (a tenth at most) among indices are refused, naming the first."""
    rows = [f"great film {i},{i % 2}" for i in range(40)] + [f"so so,{odd}"]
    data = csv_file(tmp_path, "text,label", rows)
    fragments = (f"data.csv:42: the label {odd!r} is not a class index", "40 of the 41 labels")
    refused(prepare(made, tmp_path, data), tmp_path, capsys, fragments)


@pytest.mark.parametrize("name", ["d.json", "d.txt", "d.tsv"])
def test_a_text_file_of_another_extension_is_named_as_such(made, tmp_path, capsys, name):
    """Found by the twenty-seventh round: `--data d.json --tokenizer tok/` said "--tokenizer
    applies to text files: --data FILE.jsonl or FILE.csv", blaming the flag for a text file
    whose extension is the problem. Now its extension is named."""
    data = write_jsonl(tmp_path / name, reviews(20, seed=6))
    fragments = (f"--data '{data}': a text file is FILE.jsonl or FILE.csv, not {data.suffix}",)
    refused(prepare(made, tmp_path, data), tmp_path, capsys, fragments)


# ----------------------------------------------------------------------------- the 28th round

# Data whose sets speak as the parent reads them: a warning from __len__ and from each item,
# a line to sys.stderr and one to file descriptor 2; `wrong`'s items do not fit bert-tiny.
SPEAKING_DATA = """
import os, sys, warnings
import torch
class Speaks:
    def __init__(self, n, wrong=False, fails=None): self.n, self.wrong, self.fails = n, wrong, fails
    def __len__(self):
        warnings.warn("len odd")
        return self.n
    def __getitem__(self, i):
        warnings.warn(f"item {i} odd")
        print("said by an item", file=sys.stderr)
        os.write(2, b"fd2 by an item\\n")
        if self.fails is not None:
            raise self.fails
        if self.wrong:
            return torch.zeros(5), torch.tensor(0)
        ids = torch.randint(5, 95, (128,), generator=torch.Generator().manual_seed(i))
        return ids, torch.tensor(i % 2)
def good():
    return Speaks(64), Speaks(16)
def wrong():
    return Speaks(64, wrong=True), Speaks(16, wrong=True)
def raises():
    return Speaks(64, fails=ValueError("no such review")), Speaks(16)
def exits():
    return Speaks(64, fails=SystemExit(3)), Speaks(16)
def broken():
    raise ValueError("nope")
"""


def _speaking_run(tmp_path: Path, function: str) -> list[str]:
    """`run --prepare-only` of bert-tiny (its shipped profile) on SPEAKING_DATA's `function`."""
    from executor.planning import shipped_profile

    (tmp_path / "speaks.py").write_text(SPEAKING_DATA)
    profile = shipped_profile("bert-tiny", "cpu")
    return [
        "run", "--prepare-only", "--model", "bert-tiny", "--data",
        f"{tmp_path / 'speaks.py'}:{function}", "--profile", str(profile), "--nproc", "1",
        "--global-batch", "8", "--runs-dir", str(tmp_path / "runs"), "--name", "s",
    ]  # fmt: skip


@pytest.mark.parametrize(
    "function, said",
    [
        ("wrong", ("gives inputs of shape (5,) float32", "takes (128,) int64")),
        ("raises", ("reading train item 0 raised ValueError: no such review",)),
        ("exits", ("reading train item 0 exited (code 3)",)),
        ("broken", ("pipeplan: error: {data} raised ValueError: nope",)),  # named once
    ],
)
def test_what_user_data_says_as_the_parent_reads_it_comes_not_before_a_refusal(
    tmp_path, capfd, function, said
):
    """Found by the twenty-eighth round: the parent's own reads of a user's sets (len(), items
    0 and N-1 of each, as it checks them against the model) ran outside the hold of its data
    code, so a `__getitem__`'s warnings (two raw lines each) and what it wrote to stderr came
    before the error line, and an exit in one was a traceback. Every len() and item the parent
    reads is held (`data.length`, `data.item`): a refusal is one line and nothing before it;
    an Exception of the data function is named once (it read "raised BadArgumentError: …
    raised ValueError")."""
    from test_hostile import refused_quietly

    data = f"data '{tmp_path / 'speaks.py'}:{function}'"
    said = tuple(fragment.format(data=data) for fragment in said)
    refused_quietly(_speaking_run(tmp_path, function), tmp_path / "runs", capfd, said)


def test_what_user_data_says_as_the_parent_reads_it_is_pipeplan_warnings(tmp_path, capfd):
    """Found by the twenty-eighth round: a run on data whose `__getitem__` warns printed 8 raw
    lines before its first epoch line, and each rank said the data's warnings again. What the
    data says as the parent reads its sets is `pipeplan: WARNING:` lines naming it, each once;
    a rank, which builds the task again quietly, says none of them."""
    import warnings

    from executor.task import build_task
    from pipeplan.formats import RunConfig, load

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert cli.main(_speaking_run(tmp_path, "good")) == 0
    assert [str(w.message) for w in seen] == []
    lines = capfd.readouterr().err.strip().splitlines()
    data = f"data '{tmp_path / 'speaks.py'}:good'"
    assert all(line.startswith("pipeplan: ") for line in lines), lines
    for said in (
        *(f"{data}: speaks.py:{line}: UserWarning: {what}" for line, what in [(7, "len odd")]),
        *(f"{data}: speaks.py:10: UserWarning: item {i} odd" for i in (0, 63, 15)),
        f"{data} wrote: said by an item",
        f"{data} wrote: fd2 by an item",
    ):
        assert lines.count(f"pipeplan: WARNING: {said}") == 1, (said, lines)
    cfg = load(RunConfig, tmp_path / "runs" / "s" / "run.json")
    build_task(cfg, quiet=True)  # as each rank builds it
    assert capfd.readouterr().err == ""


def test_a_ranks_data_warnings_are_said_once_for_each_line(tmp_path, capsys):
    """Found by the twenty-eighth round: in a rank, a warning of the data's `__getitem__`
    naming its item was two raw lines per item read (4,685 lines in a rank's log for one
    epoch). After its checks a rank says each line of the data's code that warns once, as a
    pipeplan warning (`data.warn_once_per_place`); no item read is wrapped for it."""
    import importlib.util
    import warnings

    from executor.data import warn_once_per_place

    (tmp_path / "speaks.py").write_text(SPEAKING_DATA)
    found = importlib.util.spec_from_file_location("rt28_speaks", tmp_path / "speaks.py")
    module = importlib.util.module_from_spec(found)
    found.loader.exec_module(module)
    spec = f"{tmp_path / 'speaks.py'}:good"
    train = module.Speaks(64)
    with warnings.catch_warnings(record=True) as seen:  # Python's own showing: recorded
        warnings.simplefilter("default")
        warn_once_per_place(spec, 1)  # until the block ends
        for i in range(10):
            train[i]
        warnings.warn_explicit("not the data's", UserWarning, "/elsewhere/lib.py", 3)
    err = capsys.readouterr().err
    ours = [line for line in err.splitlines() if line.startswith("pipeplan: ")]
    assert ours == [
        f"pipeplan: rank 1: WARNING: data '{spec}': speaks.py:10: UserWarning: item 0 odd "
        "(said once for this line)"
    ]
    assert err.count("said by an item") == 10  # what it writes itself stays in the log
    assert [str(w.message) for w in seen] == ["not the data's"]  # others: as Python shows them


def test_a_keyboard_interrupt_raised_in_a_rank_is_not_a_sigint(tmp_path):
    """Found by the twenty-eighth round: `raise KeyboardInterrupt` in a `__getitem__` as a
    rank trained read "training failed on rank 1 at step 13: interrupted by SIGINT", and no
    signal had been sent. A rank's SIGINT raises `faults.SignalInterrupt`, which alone is an
    interruption; a KeyboardInterrupt code raised is the rank's failure, naming where."""
    import signal

    from executor import faults

    (tmp_path / "stops.py").write_text("def item(i):\n    raise KeyboardInterrupt\n")
    code = compile((tmp_path / "stops.py").read_text(), str(tmp_path / "stops.py"), "exec")
    space: dict = {}
    exec(code, space)
    try:
        space["item"](77)
    except KeyboardInterrupt as exc:
        raised = exc
    assert faults.classify(raised) == "raised"
    said = faults.describe(raised, "raised")
    assert said == "KeyboardInterrupt raised by the code at stops.py:2, not by a SIGINT"
    before = signal.signal(signal.SIGINT, faults.on_sigint)  # as the rank's `main` sets it
    try:
        signal.raise_signal(signal.SIGINT)
    except KeyboardInterrupt as exc:
        signalled = exc
    finally:
        signal.signal(signal.SIGINT, before)
    assert faults.classify(signalled) == "interrupted"
    assert faults.describe(signalled, "interrupted") == "interrupted by SIGINT"


def test_a_rank_out_of_file_descriptors_in_a_collective_names_the_limit():
    """Found by the sixtieth round (a note): data code that took every file descriptor of a
    rank ended the run with gloo's own words, "a collective failed: rv != -1. -1 vs -1. Too
    many open files", naming neither the limit nor what holds them."""
    import resource

    from executor import faults

    gloo = "[../third_party/gloo/gloo/transport/tcp/pair.cc:123] rv != -1. -1 vs -1. "
    raised = RuntimeError(gloo + "Too many open files")
    kind = faults.classify(raised)
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    assert faults.describe(raised, kind) == (
        "a collective failed: this rank has too many files open (the open-files limit, ulimit "
        f"-n, is {soft}; its own code, such as data code, holds them)"
    )


# ------------------------------------------------------------- a pad token that is a real token

PAD_SHARED_WORDS = ["the", "cat", "sat", "on", "mat", "dog", "ran", "fast", "a", "big", "red"]
PAD_SHARED_LENGTH = 12
# pad = eos: '</s>' appended to each text by the post-processor, and written in one; pad = unk:
# unknown words in the texts.
PAD_SHARED_TEXTS = {
    "</s>": ["the cat sat", "a big red dog ran fast on the mat", "the cat </s> sat on mat", "dog"],
    "<unk>": ["the zebra sat", "a big red gnu ran fast", "the cat sat on a lion", "emu dog"],
}


def _pad_shared_folder(root: Path, pad: str, task: str) -> Path:
    """A tiny Llama (a causal LM, or a classifier of 2 classes) saved with a word-level
    tokenizer that pads with `pad`, a real token: '</s>', which its TemplateProcessing
    post-processor appends to every text (the usual `pad_token = eos_token`), or '<unk>'."""
    import transformers
    from tokenizers import Tokenizer, pre_tokenizers, processors, trainers
    from tokenizers import models as tokenizer_models

    tok = Tokenizer(tokenizer_models.WordLevel(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    special = ["<pad>", "<unk>", "<s>", "</s>"]
    tok.train_from_iterator([PAD_SHARED_WORDS], trainers.WordLevelTrainer(special_tokens=special))
    tok.post_processor = processors.TemplateProcessing(
        single="$A </s>", pair="$A </s> $B </s>", special_tokens=[("</s>", 3)]
    )
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token=pad, unk_token="<unk>", bos_token="<s>", eos_token="</s>"
    )
    config = transformers.LlamaConfig(
        vocab_size=len(fast), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
        pad_token_id=fast.pad_token_id, bos_token_id=2, eos_token_id=3,
        tie_word_embeddings=False, num_labels=2,
    )  # fmt: skip
    torch.manual_seed(0)
    causal = task == "causal-lm"
    model = transformers.LlamaForCausalLM if causal else transformers.LlamaForSequenceClassification
    folder = root / f"llama-{task}"
    model(config).save_pretrained(folder)
    fast.save_pretrained(folder)
    return folder


@pytest.mark.parametrize("task", ["causal-lm", "classification"])
@pytest.mark.parametrize("pad", ["</s>", "<unk>"], ids=["pad=eos", "pad=unk"])
def test_a_pad_token_that_is_a_real_token_is_attended_to_and_learnt(tmp_path, pad, task):
    """Found by the twenty-ninth round: input ids equal to pad_token_id were padding, so with
    pad = eos every `</s>` the tokenizer appended (or the text held) and with pad = unk every
    unknown word was dropped from attention and from the causal LM's targets, silently: the
    loss and held-out figures were not transformers' with the tokenizer's attention mask.
    Padding is now what the tokenizer padded (its attention mask): pipeplan's loss on the
    batch is the transformers model's own, given the tokenizer's ids and attention mask (a
    classifier pooling, as transformers does, the rightmost token that is not the pad id)."""
    import transformers

    from executor.task import build_task
    from pipeplan.formats import RunConfig

    folder = _pad_shared_folder(tmp_path, pad, task)
    texts = PAD_SHARED_TEXTS[pad]
    rows = [
        {"text": t, **({"label": i % 2} if task != "causal-lm" else {})}
        for i, t in enumerate(texts)
    ]
    data = write_jsonl(tmp_path / "train.jsonl", rows)
    spec = f"{data},{write_jsonl(tmp_path / 'eval.jsonl', rows)}"
    cfg = RunConfig(model=str(folder), data=spec, tokenizer=str(folder), seq_len=PAD_SHARED_LENGTH)
    seq, task_data = build_task(cfg)
    assert seq.task == task and seq.padding_mask

    tok = transformers.AutoTokenizer.from_pretrained(folder, local_files_only=True)
    given = tok(
        texts, padding="max_length", truncation=True, max_length=PAD_SHARED_LENGTH,
        return_tensors="pt",
    )  # fmt: skip
    ids, mask = given["input_ids"], given["attention_mask"]
    real_pads = (ids == tok.pad_token_id) & (mask == 1)
    assert int(real_pads.sum()) >= len(texts)  # every text holds the pad token as a token
    if task == "causal-lm":
        auto, labels = transformers.AutoModelForCausalLM, ids.masked_fill(mask == 0, -100)
    else:
        auto, labels = transformers.AutoModelForSequenceClassification, torch.tensor([0, 1, 0, 1])
    reference = auto.from_pretrained(folder, local_files_only=True).eval()
    seq.layers.eval()
    with torch.no_grad():
        theirs = reference(input_ids=ids, attention_mask=mask, labels=labels).loss
        x, y = task_data.train.inputs, task_data.train.labels
        ours = seq.loss(seq.forward(x), y)
    assert torch.equal(ours, theirs)  # bit for bit, as the layers are tested
    assert torch.equal(y, labels)


def eos_tokenizer(directory: Path, pad: str = "[EOS]") -> Path:
    """The thirty-second round's tokenizer: word-level, [EOS] id 0 its eos and pad token
    (`pad`: another), [UNK] id 1, the word 'good' id 2; no bos token."""
    from tokenizers import Tokenizer, pre_tokenizers
    from tokenizers import models as token_models
    from transformers import PreTrainedTokenizerFast

    words = ["good", "bad", "great", "awful", "film", "movie", "the", "a", "is", "was", "plot"]
    vocab = {"[EOS]": 0, "[UNK]": 1, **{w: i + 2 for i, w in enumerate(words)}}
    tok = Tokenizer(token_models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token=pad, unk_token="[UNK]", eos_token="[EOS]"
    )
    fast.save_pretrained(directory)
    return directory


def eos_texts(path: Path, n: int) -> Path:
    rows = [{"text": f"{w} film was {w} [EOS]"} for w in ["good", "bad", "awful", "great"] * n]
    return write_jsonl(path, rows)


def special_ids(folder: Path) -> list[tuple]:
    """bos and eos of `folder`'s config.json and generation_config.json."""
    files = [json.loads((folder / name).read_text()) for name in CONFIGS]
    return [(f.get("bos_token_id"), f.get("eos_token_id")) for f in files]


CONFIGS = ("config.json", "generation_config.json")


# A data module whose training set's length comes from the process: `{length}` is an
# expression of `os.environ` (every rank has RANK; the launcher has none). Seeded items.
RANK_LENGTH_MODULE = """
import os
import torch
from executor.data import TaskData

class DS:
    def __init__(self, n, offset):
        self.n, self.offset = n, offset
    def __len__(self):
        return self.n
    def __getitem__(self, i):
        if not 0 <= i < self.n:
            raise IndexError(i)
        g = torch.Generator().manual_seed(int(i) + self.offset)
        return torch.rand(1, 8, 8, generator=g), torch.tensor((int(i) + self.offset) % 2)

def load(seed=0):
    return TaskData("len", DS({length}, 0), DS(32, 1000), num_labels=2)
"""


def _run_rank_length(tmp_path, capsys, monkeypatch, length: str, *more: str) -> tuple[str, float]:
    """`pipeplan run` (not prepare-only) of RANK_LENGTH_MODULE with `length`, from tmp_path;
    returns its only line, after asserting exit 2 and one line, and the seconds it took."""
    name = "rt32_ranklen"
    (tmp_path / f"{name}.py").write_text(RANK_LENGTH_MODULE.format(length=length))
    monkeypatch.chdir(tmp_path)
    argv = ["run", "--model", "vit-digits", "--data", f"{name}:load", "--epochs", "1"]
    argv += ["--global-batch", "16", "--freeze", "none", "--name", "n", *more]
    start = time.monotonic()
    try:
        code = cli.main(argv)
    finally:
        sys.modules.pop(name, None)
    took = time.monotonic() - start
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err[-3000:]
    assert lines[0].startswith("pipeplan: error: "), lines[0]
    return lines[0], took


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_data_of_another_length_on_one_rank_is_refused_at_once(tmp_path, capsys, monkeypatch):
    """Found by the thirty-second round: `module:function` is called again by every rank, and
    nothing compared what a rank got with what the launcher checked: a load() giving rank 1
    512 training samples and rank 0 256 hung the run for --collective-timeout (rank 0's
    epoch ended at step 16, rank 1's went on), then named a collective's timeout, not the
    data. Each rank compares its data with data.json's facts before its first collective:
    refused at once in one line naming rank 1 and both lengths."""
    expr = '512 if os.environ.get("RANK") == "1" else 256'
    line, took = _run_rank_length(
        tmp_path, capsys, monkeypatch, expr, "--nproc", "2", "--collective-timeout", "120"
    )
    assert "rank 1" in line and "512 training samples" in line, line
    assert "the launcher checked 256" in line and "rt32_ranklen:load" in line, line
    assert took < 90, took  # not the collective timeout (120 s)
    facts = json.loads((tmp_path / "runs" / "n" / "data.json").read_text())["facts"]
    assert facts == {
        "train_samples": 256, "eval_samples": 32, "num_labels": 2, "padded": False,
        "augmented": False,
    }  # fmt: skip


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
# llama-tiny in `-m long`, for the suite's time: the same tokenizer path as gpt2-tiny's.
@pytest.mark.parametrize("model", ["gpt2-tiny", pytest.param("llama-tiny", marks=pytest.mark.long)])
def test_a_built_in_decoder_takes_the_tokenizers_bos_and_eos(tmp_path, capsys, model):
    """Found by the thirty-second round: a built-in decoder trained with a tokenizer whose eos
    is [EOS] (0), no bos, wrote the preset's bos 1 and eos 2 into the run's model/ and
    `pipeplan export` (config.json and generation_config.json): [UNK] and the word 'good' of
    that tokenizer, so `generate` stopped at 'good'. A built-in's ids are the tokenizer's now
    (none where it has none), in both, alike; the pad id stays the checked one."""
    tok = eos_tokenizer(tmp_path / "tok")
    data = f"{eos_texts(tmp_path / 't.jsonl', 5)},{eos_texts(tmp_path / 'e.jsonl', 1)}"
    measured = tmp_path / "p.json"
    args = ["profile", model, "--seq-len", "8", "--task", "causal-lm", "--padding-mask"]
    args += ["--warmup", "0", "--micro-batch-sizes", "1,2,4", "--repeats", "1"]
    assert cli.main([*args, "--out", str(measured)]) == 0
    argv = ["run", "--nproc", "1", "--model", model, "--data", data, "--tokenizer", str(tok)]
    argv += ["--seq-len", "8", "--global-batch", "4", "--epochs", "1", "--profile", str(measured)]
    argv += ["--max-steps-per-epoch", "1", "--name", "r", "--runs-dir", str(tmp_path / "runs")]
    assert cli.main(argv) == 0, capsys.readouterr()
    run, out = tmp_path / "runs" / "r", tmp_path / "out"
    assert cli.main(["export", str(run), "--out", str(out)]) == 0, capsys.readouterr()
    for folder in (run / "model", out):
        assert special_ids(folder) == [(None, 0), (None, 0)], folder
        assert json.loads((folder / "config.json").read_text())["pad_token_id"] == 0
    for name in CONFIGS:
        assert (run / "model" / name).read_text() == (out / name).read_text()


@pytest.mark.timeout(60)
def test_a_built_in_whose_pad_id_is_not_the_tokenizers_is_told_what_it_can_do(tmp_path, capsys):
    """Found by the thirty-third round: gpt2-tiny with a tokenizer padding with [UNK] (id 1)
    was told to "set pad_token_id in the model's config.json", which a built-in has not. The
    line says the built-in's pad id and what can agree with it."""
    tok = eos_tokenizer(tmp_path / "tok", pad="[UNK]")
    data = f"{eos_texts(tmp_path / 't.jsonl', 5)},{eos_texts(tmp_path / 'e.jsonl', 1)}"
    argv = ["run", "--nproc", "1", "--model", "gpt2-tiny", "--data", data, "--tokenizer", str(tok)]
    argv += ["--seq-len", "8", "--prepare-only", "--runs-dir", str(tmp_path / "runs")]
    fragments = (
        f"{tok}: the tokenizer pads with id 1 but the model's pad_token_id is 0",
        "gpt2-tiny pads with id 0: use a tokenizer whose pad token is id 0, or a model folder "
        "whose config.json says pad_token_id 1",
    )
    refused(argv, tmp_path, capsys, fragments)


@pytest.mark.timeout(60)
def test_a_tokenizer_without_a_pad_token_is_named(tmp_path, capsys):
    """Found by the fiftieth round: "the tokenizer has no pad token" named no folder, where
    every other tokenizer problem names its file. The tokenizer's folder is named."""
    tok = eos_tokenizer(tmp_path / "tok")
    config = json.loads((tok / "tokenizer_config.json").read_text())
    del config["pad_token"]
    (tok / "tokenizer_config.json").write_text(json.dumps(config))
    data = f"{eos_texts(tmp_path / 't.jsonl', 5)},{eos_texts(tmp_path / 'e.jsonl', 1)}"
    argv = ["run", "--nproc", "1", "--model", "gpt2-tiny", "--data", data, "--tokenizer", str(tok)]
    argv += ["--seq-len", "8", "--prepare-only", "--runs-dir", str(tmp_path / "runs")]
    refused(argv, tmp_path, capsys, (f"{tok}: the tokenizer has no pad token",))


@pytest.mark.timeout(60)
def test_a_model_folder_naming_other_tokens_than_its_tokenizer_is_said(tmp_path, capsys):
    """Found by the thirty-second round: a config's bos and eos naming other tokens of the
    run's tokenizer than its bos and eos ([UNK] and the word 'good' for none and [EOS]) were
    trained and exported without a word, while a pad id that disagrees is refused. A model
    folder's config is the user's: `run` says so in one warning line, naming each file and
    id, and trains (the ids are generate's, nothing trained reads them); the folder's ids
    are left as it says them."""
    tok = eos_tokenizer(tmp_path / "tok")
    folder = models.export(models.build("gpt2-tiny"), tmp_path / "g")  # bos 1, eos 2
    assert special_ids(folder) == [(1, 2), (1, 2)]
    measured = tmp_path / "p.json"
    args = ["profile", str(folder), "--seq-len", "8", "--task", "causal-lm", "--padding-mask"]
    args += ["--warmup", "0", "--micro-batch-sizes", "1,2,4", "--repeats", "1"]
    assert cli.main([*args, "--out", str(measured)]) == 0
    with_links(measured)  # the one warning below is the ids'
    data = f"{eos_texts(tmp_path / 't.jsonl', 5)},{eos_texts(tmp_path / 'e.jsonl', 1)}"
    capsys.readouterr()
    argv = ["run", "--prepare-only", "--model", str(folder), "--data", data, "--seq-len", "8"]
    argv += ["--tokenizer", str(tok), "--profile", str(measured), "--global-batch", "4"]
    assert cli.main([*argv, "--name", "r", "--runs-dir", str(tmp_path / "runs")]) == 0
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("pipeplan: WARNING: "), err
    for name in CONFIGS:
        said = (
            f"{folder / name}: bos_token_id 1 is '[UNK]' ({tok} has no bos token), eos_token_id"
            f" 2 is 'good' ({tok}'s eos token is '[EOS]', 0)"
        )
        assert said in err[0], err[0]
    assert "generate and the exported model read these ids (training does not)" in err[0]
    assert special_ids(folder) == [(1, 2), (1, 2)]


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
# In `-m long`, for the suite's time: the default run keeps
# test_data_of_another_length_on_one_rank_is_refused_at_once.
@pytest.mark.long
def test_data_whose_length_only_the_ranks_see_is_refused(tmp_path, capsys, monkeypatch):
    """Found by the thirty-second round: a `__len__` of 128 under RANK and 256 in the
    launcher trained 8 steps an epoch where the launcher checked 16 (a plan's --samples too),
    with exit 0. The rank refuses its data in one line naming it and both lengths."""
    expr = '128 if "RANK" in os.environ else 256'
    line, _ = _run_rank_length(tmp_path, capsys, monkeypatch, expr, "--nproc", "1")
    assert "rank 0 128 training samples" in line and "the launcher checked 256" in line, line


@pytest.mark.timeout(60)
def test_a_length_that_changes_between_calls_is_refused(tmp_path, capsys, monkeypatch):
    """Found by the thirty-second round: a `__len__` giving 256 twice, then 200, was checked
    for one length and trained on another (12 steps an epoch, not 16), with exit 0. Every
    len() of a set in a process must give its first: the launcher refuses it in one line,
    and prepares nothing."""
    name = "rt32_drift"
    module = RANK_LENGTH_MODULE.format(length="256") + (
        "\nDS.calls = 0\n"
        "def _drifting(self):\n"
        "    DS.calls += 1\n"
        "    return self.n if DS.calls <= 2 or self.offset else 200\n"
        "DS.__len__ = _drifting\n"
    )
    (tmp_path / f"{name}.py").write_text(module)
    monkeypatch.chdir(tmp_path)
    argv = ["run", "--model", "vit-digits", "--data", f"{name}:load", "--nproc", "1"]
    argv += ["--global-batch", "16", "--name", "m", "--prepare-only"]
    try:
        assert cli.main(argv) == 2
    finally:
        sys.modules.pop(name, None)
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pipeplan: error: "), lines
    assert "len() of the train set gave 200, and 256 before" in lines[0], lines[0]
    assert not (tmp_path / "runs").exists()


MOVING_MODULE = """
import os
import torch
from executor.data import TaskData

HERE = os.path.dirname(os.path.abspath(__file__))
{at_import}

class DS:
    def __init__(self, n, offset):
        self.n, self.offset = n, offset
    def __len__(self):
        return self.n
    def __getitem__(self, i):
        if not 0 <= i < self.n:
            raise IndexError(i)
        {in_item}
        g = torch.Generator().manual_seed(int(i) + self.offset)
        return torch.rand(1, 8, 8, generator=g), torch.tensor((int(i) + self.offset) % 2)

def load(seed=0):
    {in_load}
    return TaskData("moving", DS(64, 0), DS(32, 1000), num_labels=2)
"""


def _replaced_by_data_code(
    tmp_path: Path, capsys, data: str, module: str, name: str, value: str, where: str = "in_load"
) -> tuple[int, bool, list[str]]:
    """`pipeplan run --prepare-only` of MOVING_MODULE (as `data`) whose import or load
    (`where`) sets `module.name` ("Path.write_bytes": a class's method) to `value`: its exit
    code, whether the function was put back, and its stderr's lines. Put back here too,
    whatever happened, for the tests after it."""
    import importlib

    held = importlib.import_module(module)
    owner_name, _, attribute = name.rpartition(".")
    owner = getattr(held, owner_name) if owner_name else held
    real = vars(owner)[attribute]
    argv = ("run", "--prepare-only", "--model", "vit-digits", "--data", f"{data}:load")
    argv += ("--nproc", "1", "--name", "n")
    change = f"import importlib; m = importlib.import_module({module!r}); m.{name} = {value}"
    if where == "at_import":
        change = change.replace("; m", "\nm", 1)
    try:
        code = _run_moving(tmp_path, data, *argv, **{where: change})
        after = vars(owner)[attribute]
    finally:
        setattr(owner, attribute, real)
    return code, after is real, capsys.readouterr().err.strip().splitlines()


def _pipeplan_in_a_subprocess(
    tmp_path: Path, argv: list[str], first: str = ""
) -> subprocess.CompletedProcess:
    """The `pipeplan` command (`cli.entry`, its own process) with `argv`, from tmp_path, the
    checkout on the path; `first`: Python run before it (a limit set for the test)."""
    root = Path(cli.__file__).resolve().parent
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])),
    }
    entry = f"import sys; {first or 'pass'}; import cli; sys.argv[1:] = {argv!r}; cli.entry()"
    return subprocess.run(
        [sys.executable, "-c", entry], cwd=tmp_path, env=env, capture_output=True, text=True,
        timeout=120, check=False,
    )  # fmt: skip


def _run_moving(tmp_path, name: str, *argv: str, **code: str) -> int:
    """`pipeplan run` (or `argv`, when given) of MOVING_MODULE with `code` put in at import,
    in load() and in `__getitem__` (`at_import`, `in_load`, `in_item`), from tmp_path, the
    module imported afresh; its exit code."""
    code = {"at_import": "", "in_load": "", "in_item": "", **code}
    (tmp_path / f"{name}.py").write_text(MOVING_MODULE.format(**code))
    if not argv:
        argv = ("run", "--model", "vit-digits", "--data", f"{name}:load", "--epochs", "1")
        argv += ("--global-batch", "16", "--freeze", "none", "--nproc", "1", "--name", "n")
    try:
        return cli.main(list(argv))
    finally:
        sys.modules.pop(name, None)


@pytest.mark.multiprocess
@pytest.mark.timeout(180)
def test_nan_inputs_are_the_datas_not_the_learning_rates(tmp_path, capsys, monkeypatch):
    """Found by the forty-eighth round: NaN inputs gave "training failed on rank 0 before
    the first step: training diverged: the loss is nan at step 0 (epoch 1); lower --lr … or
    check the data for NaN …": two places, advice about --lr (no update was made yet), and
    no data named. A loss not finite before any update names the data and the weights."""
    monkeypatch.chdir(tmp_path)
    nan = 'return torch.full((1, 8, 8), float("nan")), torch.tensor(0)'
    line = _ranks_line(tmp_path, capsys, "rt48_nan", in_item=nan)
    assert line.startswith(
        "pipeplan: error: training failed on rank 0: training diverged: the loss is nan at "
        "step 0 (epoch 1), before any update: check the data 'rt48_nan:load' and the model's "
        "weights for NaN or infinite values; rank logs in "
    ), line


@pytest.mark.timeout(60)
def test_data_code_that_enters_inference_mode_and_stays_is_refused_and_undone(
    tmp_path, capsys, monkeypatch
):
    """Found by the forty-second round: a data `load` that entered `torch.inference_mode()`
    and never left it (a reference kept), grad mode turned back on, passed the grad-mode
    check, and every tensor a rank made was an inference tensor: training failed in torch's
    words. Inference mode is one of the settings held (`data.torch_state_kept`): refused in
    one line naming it, and put back."""
    monkeypatch.chdir(tmp_path)
    argv = ("run", "--prepare-only", "--model", "vit-digits", "--data", "rt42_inf:load")
    argv += ("--nproc", "1", "--name", "n")
    enter = (
        "global KEPT; KEPT = torch.inference_mode(); KEPT.__enter__(); torch.set_grad_enabled(True)"
    )
    code = _run_moving(tmp_path, "rt42_inf", *argv, in_load=enter)
    inference = torch.is_inference_mode_enabled()
    lines = capsys.readouterr().err.strip().splitlines()
    assert (code, inference) == (2, False), lines
    assert lines == [
        "pipeplan: error: data 'rt42_inf:load': the data function changed torch's inference "
        "mode to on (it was off); data code must leave torch's global settings as it found "
        "them, as pipeplan trains in them (use `with torch.inference_mode():` around what it "
        "should cover)"
    ]
    assert not (tmp_path / "runs").exists()


@pytest.mark.multiprocess
@pytest.mark.timeout(180)
def test_data_code_that_changes_directory_moves_nothing_of_the_run(tmp_path, capsys, monkeypatch):
    """Found by the thirty-third round: a data module's `os.chdir` (at import, in load(), in
    a `__getitem__`) moved every relative path of pipeplan's after it: runs/n/ (the default
    --runs-dir is relative) was made under the new directory, and the rank, started there,
    failed with "'…' is not found; run this command from the directory the run was started
    from". The data code runs in the directory it chose, pipeplan in its own: the run trains
    to its end in runs/n/ where it was named, nothing is written where the code went, and a
    module that went to its own folder at import reads its files there (relative paths) in
    load() and in every `__getitem__`, in the launcher and in the rank."""
    monkeypatch.chdir(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "deeper").mkdir(parents=True)
    (elsewhere / "scale.txt").write_text("1.0\n")
    code = dict(
        at_import='os.chdir(os.path.join(HERE, "elsewhere"))',  # its files, read relative
        in_load='open("scale.txt").read(); os.chdir("deeper")',
        in_item='os.chdir(os.path.join(HERE, "elsewhere")); open("scale.txt").read()',
    )
    assert _run_moving(tmp_path, "rt34_moving", **code) == 0, capsys.readouterr().err
    assert Path.cwd() == tmp_path  # the launcher's own directory, after the data code ran
    run = tmp_path / "runs" / "n"
    for name in ("run.json", "data.json", "run.jsonl", "summary.json", "metrics.csv"):
        assert (run / name).is_file(), name
    assert (run / "model" / "config.json").is_file() and (run / "checkpoints" / "latest").exists()
    assert (run / "logs" / "rank-0.log").is_file()
    found = sorted(str(p.relative_to(elsewhere)) for p in elsewhere.rglob("*"))
    assert found == ["deeper", "scale.txt"], found  # nothing of the run's went there
    assert cli.main(["report", "runs/n", "--json"]) == 0  # read back from where it was named


@pytest.mark.multiprocess
@pytest.mark.timeout(240)
def test_data_code_that_sets_a_umask_locks_nothing_of_the_run(tmp_path, capsys, monkeypatch):
    """Found by the thirty-third round: `os.umask(0o777)` in a data module's import (and
    `os.umask(0o277)` in its `__getitem__`) held for everything pipeplan made after it: the
    run folder, run.json, the records, checkpoints, logs, model/ came out `d---------` and
    `----------`, a run its owner could neither read, resume, export nor delete (root alone
    got through). The data code's umask lasts only while it runs: every folder and file of
    the run and of its export is its owner's to read and write, and the process's umask is
    pipeplan's again after each command."""
    monkeypatch.chdir(tmp_path)
    before = os.umask(0o022)
    try:
        name = "rt34_umask"
        code = dict(at_import="os.umask(0o777)", in_item="os.umask(0o277)")
        assert _run_moving(tmp_path, name, **code) == 0, capsys.readouterr().err
        assert os.umask(0o022) == 0o022
        out = tmp_path / "out"
        exported = _run_moving(tmp_path, name, "export", "runs/n", "--out", "out", **code)
        assert exported == 0, capsys.readouterr().err
        assert os.umask(0o022) == 0o022
    finally:
        os.umask(before)
    paths = [tmp_path / "runs", *(tmp_path / "runs").rglob("*"), out, *out.rglob("*")]
    assert len(paths) > 20 and (tmp_path / "runs" / "n" / "summary.json") in paths
    for path in paths:
        mode = path.lstat().st_mode
        owner = 0o700 if path.is_dir() else 0o600
        assert mode & owner == owner, f"{path}: {oct(mode)}"
    assert cli.main(["report", "runs/n", "--json"]) == 0


class _RaisesInItsForward(torch.nn.Module):
    """A stage whose layer raises, but in the stage's shape inference (its first call), which
    torch does not wrap."""

    def __init__(self):
        super().__init__()
        self.lin, self.calls = torch.nn.Linear(4, 4), 0

    def forward(self, x):
        self.calls += 1
        if self.calls > 1:
            raise ValueError("mat1 and mat2 shapes cannot be multiplied (2x5 and 4x4)")
        return self.lin(x)


@pytest.mark.timeout(120)
def test_a_stages_own_error_is_named_not_torchs_wrapper(single_rank_group):
    """Found by the thirty-third round: an error raised inside a stage's forward read
    "training failed on rank 0 at step 0: RuntimeError: kwargs: {}", the last line of the
    RuntimeError torch's pipelining schedule wraps it in (its message lists the stage's
    arguments). The rank's line names the stage's own exception and message. Run by torch's
    own PipelineStage and schedule, in a one-rank gloo group in this process (it was a
    process of its own: what `faults` makes of the exception needs none)."""
    from torch.distributed.pipelining import PipelineStage, ScheduleGPipe

    from executor import faults

    stage = PipelineStage(
        _RaisesInItsForward(), 0, 1, torch.device("cpu"), input_args=(torch.zeros(2, 4),)
    )
    schedule = ScheduleGPipe(stage, 2, loss_fn=lambda out, y: out.sum())
    with pytest.raises(Exception) as raised:  # as the process's `except Exception` took it
        schedule.step(torch.zeros(4, 4), target=torch.zeros(4))
    kind = faults.classify(raised.value)
    said = f"{kind} | {faults.describe(raised.value, kind)}"
    assert said == "raised | ValueError: mat1 and mat2 shapes cannot be multiplied (2x5 and 4x4)"


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_an_evaluation_failure_is_placed_after_the_epochs_last_step(tmp_path, capsys, monkeypatch):
    """Found by the thirty-third round: a held-out set whose items fail only when the ranks
    evaluate read "training failed on rank 0 at step 2: …" of a 2-step epoch: no step 2 ever
    ran. The line places it after step 1, at the end of epoch 1."""
    module = RANK_LENGTH_MODULE.replace(
        "        g = torch.Generator()",
        '        if self.offset and 8 <= i < self.n - 8 and "RANK" in os.environ:\n'
        '            raise ValueError("held-out item %d is unreadable" % i)\n'
        "        g = torch.Generator()",
    )
    name = "rt34_eval_raises"
    (tmp_path / f"{name}.py").write_text(module.format(length=256))
    monkeypatch.chdir(tmp_path)
    argv = ["run", "--model", "vit-digits", "--data", f"{name}:load", "--epochs", "2"]
    argv += ["--global-batch", "16", "--freeze", "none", "--name", "n", "--nproc", "1"]
    argv += ["--max-steps-per-epoch", "2"]
    try:
        code = cli.main(argv)
    finally:
        sys.modules.pop(name, None)
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err[-3000:]
    assert "training failed on rank 0 after step 1, at the end of epoch 1: " in lines[0], lines
    assert "ValueError: held-out item" in lines[0] and "is unreadable" in lines[0], lines[0]


@pytest.mark.multiprocess
@pytest.mark.timeout(180)
@pytest.mark.parametrize(
    "in_item, why",
    [
        (  # its input has another shape than the batch's others': torch.stack fails
            "return torch.rand(1, 8, 9), torch.tensor(0)",
            r"train item \d+'s input is float32 tensor of shape \(1, 8, (8|9)\) and item \d+'s "
            r"float32 tensor of shape \(1, 8, (8|9)\): the inputs of a batch are stacked into "
            "one tensor and must have one shape",
        ),
        ('return {"input": 1}', r"train item 37 is dict, not an \(input, label\) pair"),
    ],
    ids=["shape", "dict"],
)
def test_a_ranks_unusable_item_is_named_as_the_launcher_names_one(
    tmp_path, capsys, monkeypatch, in_item, why
):
    """Found by the thirty-fifth round: an item the launcher's checks never read (neither the
    first nor the last) that could not be batched by the rank said torch's words alone:
    "training failed on rank 0 at step 3: RuntimeError: stack expects each tensor to be
    equal size, but got [1, 8, 8] at entry 0 and [1, 8, 9] at entry 5", or "KeyError: 0"
    for an item that is a dict. The line now names the data, the split and the item, as
    the launcher's own reads do (`data.batch_rows`); nothing is written but the failed
    run's folder, with its logs and no checkpoint."""
    monkeypatch.chdir(tmp_path)
    code = f'if i == 37 and "RANK" in os.environ: {in_item}'  # in the rank alone
    assert _run_moving(tmp_path, "rt35_batch", in_item=code) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    pattern = (
        rf"pipeplan: error: training failed on rank 0 at step \d+: data 'moving': {why}; "
        r"rank logs in runs/n/logs; no checkpoint to resume from: delete runs/n to start it again"
    )
    assert re.fullmatch(pattern, lines[0]), lines[0]
    assert "item 37" in lines[0]
    left = sorted(p.name for p in tmp_path.iterdir() if p.name != "__pycache__")
    assert left == ["rt35_batch.py", "runs"], left
    assert not (tmp_path / "runs" / "n" / "checkpoints" / "latest").exists()


@pytest.mark.timeout(30)
def test_a_peers_loss_met_in_a_ranks_read_is_not_called_the_datas_fault():
    """The thirty-fifth round's fix (`data.batch_rows`) names a read's error as the data's;
    never a lost peer or a timeout met in a `__getitem__` that runs a collective: that stays
    torch's error, classified as a loss (`faults.classify`), so the launcher names the rank
    that failed first, not this one."""
    from executor.data import batch_rows

    class Collective:
        def __len__(self):
            return 4

        def __getitem__(self, i):
            raise RuntimeError("[/x/gloo/transport/tcp/pair.cc:537] Connection reset by peer")

    with pytest.raises(RuntimeError, match="Connection reset by peer"):
        batch_rows(Collective(), [1], 0, "m:load", "train")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("model", ["gpt2-tiny", "llama-tiny"])
def test_no_padding_mask_is_refused_for_a_decoder_classifier(tmp_path, capsys, model):
    """Found by the thirty-third round: `pipeplan profile gpt2-tiny --task classification
    --no-padding-mask` was silently ignored: a decoder classifier always carries the padding
    mask (its head pools the last real token, found from the mask), and the profile said
    padding_mask true. The flag is now refused in one line saying why; an earlier profile at
    --out is left as it was. Without the flag, and for a causal LM, it is taken as before."""
    out = tmp_path / "p.json"
    out.write_text("an earlier profile\n")
    args = ["profile", model, "--seq-len", "8", "--warmup", "0", "--micro-batch-sizes", "1"]
    args += ["--repeats", "1", "--out", str(out)]
    classifier = [*args, "--task", "classification", "--num-labels", "3"]
    fragments = (
        f"--no-padding-mask: {model} is a decoder classifier, which always carries the padding "
        "mask",
        "leave the flag out",
    )
    refused([*classifier, "--no-padding-mask"], tmp_path, capsys, fragments)
    assert cli.main([*args, "--task", "causal-lm", "--no-padding-mask"]) == 0
    assert json.loads(out.read_text())["model"]["padding_mask"] is False
    assert cli.main(classifier) == 0
    assert json.loads(out.read_text())["model"]["padding_mask"] is True


def wide_tokenizer(directory: Path, words: int) -> Path:
    """`eos_tokenizer`'s tokens ([EOS] 0, [UNK] 1, words from 2) with `words` words and a
    [BOS] token last, at id words + 2."""
    from tokenizers import Tokenizer, pre_tokenizers
    from tokenizers import models as token_models
    from transformers import PreTrainedTokenizerFast

    vocab = {"[EOS]": 0, "[UNK]": 1, **{f"w{i}": i + 2 for i in range(words)}}
    vocab["[BOS]"] = words + 2
    tok = Tokenizer(token_models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="[EOS]", unk_token="[UNK]", eos_token="[EOS]"
    )
    fast.bos_token = "[BOS]"
    fast.save_pretrained(directory)
    return directory


@pytest.mark.timeout(60)
def test_a_tokenizer_larger_than_a_built_ins_vocabulary_is_refused(tmp_path, capsys):
    """Found by the thirty-third round: gpt2-tiny (vocab_size 512) ran with a tokenizer of
    703 ids whose bos is id 702: the data held no id past 511, so the run trained and its
    model/ and export said bos_token_id null (an id outside the vocabulary); data holding
    such ids was refused naming the data. The tokenizer is now refused before the run folder
    is made, in one line naming it and both sizes; one whose ids fit still runs."""
    tok = wide_tokenizer(tmp_path / "tok", 700)
    rows = [{"text": f"w{i} w{i + 1} w{i} [EOS]"} for i in range(24)]
    train, held_out = (
        write_jsonl(tmp_path / "t.jsonl", rows),
        write_jsonl(tmp_path / "e.jsonl", rows[:4]),
    )
    data = f"{train},{held_out}"
    argv = ["run", "--prepare-only", "--model", "gpt2-tiny", "--data", data, "--seq-len", "8"]
    argv += ["--tokenizer", str(tok), "--global-batch", "4", "--runs-dir", str(tmp_path / "runs")]
    measured = tmp_path / "p.json"
    args = ["profile", "gpt2-tiny", "--seq-len", "8", "--task", "causal-lm", "--padding-mask"]
    args += ["--warmup", "0", "--micro-batch-sizes", "1,2,4", "--repeats", "1"]
    assert cli.main([*args, "--out", str(measured)]) == 0
    argv += ["--profile", str(measured)]
    capsys.readouterr()
    fragments = (
        f"{tok}: the tokenizer's ids go up to 702 (703 ids) but model 'gpt2-tiny' has "
        "vocab_size 512 (ids 0..511)",
        "a model folder whose config.json says vocab_size 703 or more",
    )
    refused(argv, tmp_path, capsys, fragments)
    assert not (tmp_path / "runs").exists()
    fits = wide_tokenizer(tmp_path / "fits", 509)  # [BOS] is id 511
    argv[argv.index(str(tok))] = str(fits)
    assert cli.main(argv) == 0, capsys.readouterr()


# Data whose classes come from a file data.json does not list (classes.txt beside it).
CLASSES_FILE_MODULE = """
from pathlib import Path
import torch
from executor.data import TaskData, TensorPairs

def load(seed=0):
    k = int(Path(__file__).with_name("classes.txt").read_text())
    x = torch.rand(64, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    y = torch.arange(64) % k
    return TaskData("k", TensorPairs(x[:48], y[:48]), TensorPairs(x[48:], y[48:]), num_labels=k)
"""


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_export_names_the_data_when_its_classes_changed(tmp_path, capsys, monkeypatch):
    """Found by the thirty-third round: `pipeplan export` of a run whose `module:function`
    data gives other classes now (10 then, 3 now: read from a file data.json does not list)
    blamed the checkpoint ("runs/r/checkpoints/step-1: parameter 9.parts.1.weight has shape
    [10, 128] in the checkpoint, [3, 128] in the model"), where a resume named the data.
    Export holds the data to data.json's facts as a resume does: one line naming the data,
    both counts and data.json; nothing written. The data restored, it exports."""
    name = "rt33_classes"
    (tmp_path / f"{name}.py").write_text(CLASSES_FILE_MODULE)
    (tmp_path / "classes.txt").write_text("10\n")
    monkeypatch.chdir(tmp_path)
    argv = ["run", "--model", "vit-digits", "--data", f"{name}:load", "--epochs", "1"]
    argv += ["--global-batch", "16", "--freeze", "none", "--name", "r", "--nproc", "1"]
    try:
        assert cli.main([*argv, "--max-steps-per-epoch", "1"]) == 0, capsys.readouterr()
        (tmp_path / "classes.txt").write_text("3\n")
        capsys.readouterr()
        fragments = (
            f"data '{name}:load' gave the export 3 classes; the run started with 10 "
            f"({Path('runs') / 'r' / 'data.json'})",
            "the export builds the model the run trained",
        )
        refused(["export", "runs/r", "--out", "out"], tmp_path, capsys, fragments)
        assert not (tmp_path / "out").exists()
        (tmp_path / "classes.txt").write_text("10\n")
        assert cli.main(["export", "runs/r", "--out", "out"]) == 0, capsys.readouterr()
    finally:
        sys.modules.pop(name, None)


# Data whose size comes from a file data.json does not list (samples.txt beside it).
SIZED_FILE_MODULE = """
from pathlib import Path
import torch
from executor.data import TaskData, TensorPairs

def load(seed=0):
    n = int(Path(__file__).with_name("samples.txt").read_text())
    x = torch.rand(n, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    y = torch.arange(n) % 10
    k = n * 3 // 4
    return TaskData("n", TensorPairs(x[:k], y[:k]), TensorPairs(x[k:], y[k:]), num_labels=10)
"""


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_facts_deleted_from_data_json_are_refused_by_the_checkpoint(tmp_path, capsys, monkeypatch):
    """Found by the fifty-seventh round: data.json's `facts` may be absent (a run prepared
    before them), so deleted by hand from a current run's they switched the data's check off:
    a resume or an export of `module:function` data of another size (750 training samples,
    not 384) went on without a word. Each checkpoint's manifest holds data.json's facts
    (`data_facts`): a data.json without them, or with others, is refused by both in one line
    naming data.json, the checkpoint and the fact. Restored, the run exports; a manifest
    written before the field (without it) holds nothing, as before."""
    name = "rt57_sized"
    (tmp_path / f"{name}.py").write_text(SIZED_FILE_MODULE)
    (samples := tmp_path / "samples.txt").write_text("64\n")
    monkeypatch.chdir(tmp_path)
    argv = ["run", "--model", "vit-digits", "--data", f"{name}:load", "--epochs", "1"]
    argv += ["--global-batch", "16", "--freeze", "none", "--name", "r", "--nproc", "1"]
    run = tmp_path / "runs" / "r"
    record, step = run / "data.json", run / "checkpoints" / "step-1" / "manifest.json"
    commands = (["export", str(run), "--out", "o"], ["run", "--resume", str(run), "--epochs", "2"])
    try:
        assert cli.main([*argv, "--max-steps-per-epoch", "1"]) == 0, capsys.readouterr()
        capsys.readouterr()
        kept = record.read_text()
        doc = json.loads(kept)
        assert json.loads(step.read_text())["data_facts"] == doc["facts"]
        samples.write_text("128\n")  # 96 training samples now, not 48
        no_facts = {k: v for k, v in doc.items() if k != "facts"}
        other = {**doc, "facts": {**doc["facts"], "train_samples": 96, "eval_samples": 32}}
        for edited, wrong, said, blame in (
            (
                no_facts,
                "lacks facts",
                "48 training samples, 16 eval samples, 10 classes",
                "data.json was edited since: restore data.json or start a new run",
            ),
            (
                other,
                "facts give 96 training samples",
                "48 training samples",
                "data.json or the checkpoint's manifest.json was edited since the run wrote them",
            ),
        ):
            record.write_text(json.dumps(edited))
            fragments = (
                f"{record}: {wrong}, but checkpoint step-1 ({step}) recorded {said}",
                blame,
            )
            for command in commands:
                refused(command, tmp_path, capsys, fragments)
        samples.write_text("64\n")
        record.write_text(kept)
        assert cli.main(commands[0]) == 0, capsys.readouterr().err
        # A manifest without the field, and data.json without facts: nothing to hold it to.
        manifest = json.loads(step.read_text())
        del manifest["data_facts"]
        step.write_text(json.dumps(manifest))
        record.write_text(json.dumps(no_facts))
        assert cli.main(["export", str(run), "--out", "o2"]) == 0, capsys.readouterr().err
        # The sixty-first round: the manifest's sha256 of the data module edited was blamed
        # on data.json ("restore data.json"), whose sha256 is the file's own: either may be
        # the edited one.
        entry = manifest["data"][0]
        entry["sha256"] = "0" * 64
        step.write_text(json.dumps(manifest))
        said = (
            f"{record}: files gives '{entry['path']}' the sha256 ",
            f"(the file's now), but checkpoint step-1 ({step}) recorded it with sha256 "
            "0000000000000000…",
            "data.json or the checkpoint's manifest.json was edited since the run wrote them",
        )
        capsys.readouterr()
        refused(["export", str(run), "--out", "o3"], tmp_path, capsys, said)
    finally:
        sys.modules.pop(name, None)


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_a_plan_of_a_folder_profiled_by_a_relative_path_runs(tmp_path, capsys, monkeypatch):
    """Found by the thirty-fifth round: the plan of a model folder profiled as `./gpt2` was
    compared with --model as typed: `run --plan --model ./gpt2` passed the launcher, then
    every rank (whose run.json holds the absolute path) failed "the plan is for model
    './gpt2', not '/…/gpt2'" after the run folder was made; any other spelling was refused.
    The plan is held to the run's profile, itself held to the folder: every spelling runs."""
    import transformers

    monkeypatch.chdir(tmp_path)
    config = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=128, n_positions=64)
    torch.manual_seed(0)
    transformers.AutoModelForCausalLM.from_config(config).save_pretrained("gpt2")
    profile = ["profile", "./gpt2", "--out", "gpt2.json", "--micro-batch-sizes", "1,2"]
    assert cli.main([*profile, "--repeats", "1", "--warmup", "0", "--seq-len", "16"]) == 0
    plan = ["plan", "--profile", "gpt2.json", "--devices-per-node", "1", "--out", "plan.json"]
    plan += ["--global-batch", "16", "--samples", "4096", "--epochs", "1", "--freeze", "none"]
    assert cli.main(plan) == 0
    capsys.readouterr()
    for n, spelling in enumerate(["./gpt2", str(tmp_path / "gpt2")]):
        argv = ["run", "--plan", "plan.json", "--model", spelling, "--init", "random"]
        argv += ["--data", "synth-text", "--profile", "gpt2.json", "--seq-len", "16"]
        argv += ["--max-steps-per-epoch", "2", "--name", f"g{n}"]
        assert cli.main(argv) == 0, capsys.readouterr().err[-2000:]
        assert json.loads((tmp_path / "runs" / f"g{n}" / "summary.json").read_text())["steps"] == 2


@pytest.mark.timeout(90)
@pytest.mark.parametrize(
    "name",
    # SIGUSR2 and SIGALRM in `-m long`, for the suite's time: their sibling SIGUSR1 takes the
    # same path (one handler for every signal of `startup.STOP_SIGNALS`, each of these three
    # a signal whose default action ends the process in silence); SIGQUIT's default (a core
    # dump) is another, and stays.
    [
        "SIGUSR1",
        pytest.param("SIGUSR2", marks=pytest.mark.long),
        pytest.param("SIGALRM", marks=pytest.mark.long),
        "SIGQUIT",
    ],
)
def test_data_code_that_signals_its_own_process_stops_it_with_one_line(tmp_path, name):
    """Found by the thirty-fourth round: data code sending SIGUSR1 (or SIGUSR2) to its own
    process while `pipeplan run` checked the data (items read in pipeplan's process, before
    any rank starts) ended the command with no line at all: the shell's "User defined signal
    1", exit 138. Slurm's `--signal=USR1@60` sends the same to a job before its time limit;
    SIGALRM (an alarm() without a handler) and SIGQUIT (Ctrl-\\) ended it as silently. Each
    now stops pipeplan as SIGTERM does: `pipeplan: stopped by SIGUSR1`, exit 128 + the signal,
    and no run folder is left. In a subprocess: the signal is the process's own."""
    kill = f"os.kill(os.getpid(), signal.{name})"
    code = dict(at_import="import signal", in_load="", in_item=kill)
    (tmp_path / "rt34_signals.py").write_text(MOVING_MODULE.format(**code))
    argv = ["run", "--model", "vit-digits", "--data", "rt34_signals:load", "--epochs", "1"]
    argv += ["--global-batch", "16", "--freeze", "none", "--nproc", "1", "--name", "n"]
    root = Path(cli.__file__).resolve().parent
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])),
    }
    done = subprocess.run(
        [sys.executable, "-m", "cli", *argv], cwd=tmp_path, env=env, capture_output=True,
        text=True, timeout=80, check=False,
    )  # fmt: skip
    signum = getattr(signal, name)
    said = (done.returncode, done.stderr.splitlines())
    assert said == (128 + signum, [f"pipeplan: stopped by {name}"]), said
    left = sorted(p.name for p in tmp_path.iterdir() if p.name != "__pycache__")
    assert left == ["rt34_signals.py"], left  # no runs/n, nothing else written


@pytest.mark.timeout(30)
def test_an_exception_whose_str_raises_is_named_by_its_type():
    """Found by the thirty-seventh round: a data item's exception whose `__str__` raised was
    reported as that second error (`RuntimeError: str broke`), the data and item lost; it is
    now named by its type."""
    from executor.data import _one_line

    class BadStr(Exception):
        def __str__(self):
            raise RuntimeError("str broke")

    assert _one_line(BadStr()) == "BadStr"
    assert _one_line(ValueError("a  b\nc")) == "ValueError: a b c"


# A thirty-seventh round's subclass of torch.Tensor that refuses to be stacked, and a
# FakeTensor maker, for MOVING_MODULE's items (`at_import`).
ODD_SUBCLASSES = """
class Sub(torch.Tensor):  # refuses to be stacked, and its comparisons lie
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func is torch.stack:
            raise ValueError("subclass refuses stack")
        if getattr(func, "__name__", "") in ("lt", "ge", "gt", "le", "__lt__", "__ge__"):
            return torch.zeros(args[0].shape, dtype=torch.bool)
        return super().__torch_function__(func, types, args, kwargs or {})

def fake(x):
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode() as mode:
        return mode.from_tensor(x)
"""


def _ranks_line(tmp_path, capsys, name: str, **code: str) -> str:
    """The one line of a `pipeplan run` of MOVING_MODULE (`code` put in: `_run_moving`) that
    fails in its rank, exit 2; nothing is written but the failed run's folder, with its logs
    and no checkpoint."""
    assert _run_moving(tmp_path, name, **code) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pipeplan: error: training failed"), lines
    assert lines[0].endswith(
        "; rank logs in runs/n/logs; no checkpoint to resume from: delete runs/n to start it again"
    ), lines[0]
    left = sorted(p.name for p in tmp_path.iterdir() if p.name != "__pycache__")
    assert left == [f"{name}.py", "runs"], left
    assert not (tmp_path / "runs" / "n" / "checkpoints" / "latest").exists()
    return lines[0]


@pytest.mark.multiprocess
@pytest.mark.timeout(180)
@pytest.mark.parametrize(
    "name, made, said",
    [
        pytest.param(  # long, for the 15-minute default run: the launcher's test below
            # refuses a FakeTensor through the same `refuse_odd_tensors` a rank's reads call
            "rt37_fake",
            "fake(torch.rand(1, 8, 8)), torch.tensor(0)",
            "train item 37's input is of the tensor subclass "
            "torch._subclasses.fake_tensor.FakeTensor, which overrides __torch_dispatch__ ",
            marks=pytest.mark.long,
        ),
        (
            "rt37_subclass",
            "torch.rand(1, 8, 8).as_subclass(Sub), torch.tensor(99).as_subclass(Sub)",
            "train item 37's label 99 is not a class: model 'vit-digits' has 2 classes",
        ),
    ],
    ids=["fake", "subclass"],
)
def test_a_tensor_subclass_in_an_item_a_rank_reads_is_named(
    tmp_path, capsys, monkeypatch, name, made, said
):
    """Found by the thirty-seventh round: an item only a rank read whose input was a tensor
    subclass passed `refuse_odd_tensors`, which looked at its layout and device alone: a
    FakeTensor (CPU and strided, but holding no values) failed the rank with "AssertionError:
    Mixing fake modes NYI …", one whose `__torch_function__` refuses `torch.stack` with its own
    "ValueError: subclass refuses stack", naming no data. A subclass that may hold no values
    (it overrides `__torch_dispatch__`) is now refused as a meta tensor is; one that holds
    them (torchvision's tv_tensors) is read as the plain tensor of its values, so its own
    Python runs in no check and no step (found by the thirty-eighth round: a label whose
    comparisons lied passed the label check and failed in torch's words); in one line."""
    monkeypatch.chdir(tmp_path)
    code = f'if i == 37 and "RANK" in os.environ: return {made}'
    line = _ranks_line(tmp_path, capsys, name, at_import=ODD_SUBCLASSES, in_item=code)
    expected = f"training failed on rank 0 at step \\d+: data 'moving': {said}"
    assert re.match(f"pipeplan: error: {expected}", line), line


@pytest.mark.timeout(30)
def test_the_launcher_refuses_a_tensor_subclass_and_any_stacking_error_is_named(monkeypatch):
    """Found by the thirty-seventh round, with the ranks' case: the launcher's checks
    (`data.item`) took a FakeTensor item too; and a batch whose `torch.stack` raised anything
    but a RuntimeError or a TypeError (a subclass's ValueError) was that error alone. An item
    of a subclass is refused where it is read; a Parameter (a plain tensor marked as a
    module's weight) is taken; and a stacking failure of any type names the data and the
    batch's first item (`data.batch_rows`). A subclass that holds its values (torchvision's
    tv_tensors: Python only) is taken."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from executor.data import BadArgumentError, batch_rows, item

    with FakeTensorMode() as mode:
        fake = mode.from_tensor(torch.rand(1, 8, 8))
    with pytest.raises(BadArgumentError) as refused_item:
        item([(torch.rand(1, 8, 8), fake)], 0, "m:load", "train")
    said = str(refused_item.value)
    assert said.startswith(
        "data 'm:load': train item 0's label is of the tensor subclass "
        "torch._subclasses.fake_tensor.FakeTensor, which overrides __torch_dispatch__"
    ), said
    # Subclasses that hold their values are taken: a Parameter, a tv_tensors-like image.
    weight = torch.nn.Parameter(torch.rand(1, 8, 8))
    taken = item([(weight, torch.tensor(1))], 0, "m:load", "train")[0]
    assert type(taken) is torch.Tensor and torch.equal(taken, weight)

    class Image(torch.Tensor):  # as torchvision.tv_tensors.Image: Python only
        pass

    image = torch.rand(1, 8, 8).as_subclass(Image)
    taken = item([(image, torch.tensor(1))], 0, "m:load", "train")[0]
    assert type(taken) is torch.Tensor and torch.equal(taken, image)
    stacked = batch_rows([(image, torch.tensor(1))] * 2, [0, 1], 0, "m:load", "train")
    assert type(stacked) is torch.Tensor and torch.equal(stacked, torch.stack([image, image]))

    def refuses(*args, **kwargs):
        raise ValueError("no stacking today")

    monkeypatch.setattr(torch, "stack", refuses)
    items = [(torch.rand(1, 8, 8), torch.tensor(0))] * 8
    with pytest.raises(BadArgumentError) as refused_batch:
        batch_rows(items, [5, 2], 0, "m:load", "train")
    assert str(refused_batch.value) == (
        "data 'm:load': stacking the inputs of a batch (2 train items, item 5 first) raised "
        "ValueError: no stacking today"
    )


@pytest.mark.multiprocess
@pytest.mark.timeout(180)
def test_a_label_out_of_the_classes_on_an_item_a_rank_reads_is_named(tmp_path, capsys, monkeypatch):
    """Found by the thirty-seventh round: a label of 10**6 (or -5) on an item only a rank
    read, an int64 one the launcher's checks would have refused, failed the rank with torch's
    "IndexError: Target 1000000 is out of bounds.", naming no data. A rank now holds each
    batch's labels to the model's classes as the launcher's checks hold the items they read
    (`data.check_batch_labels`, one comparison of the batch), in one line naming the data,
    the split and the item."""
    monkeypatch.chdir(tmp_path)
    code = 'if i == 37 and "RANK" in os.environ: return torch.rand(1, 8, 8), torch.tensor(10**6)'
    line = _ranks_line(tmp_path, capsys, "rt37_label", in_item=code)
    said = (
        "training failed on rank 0 at step \\d+: data 'moving': train item 37's label 1000000 "
        "is not a class: model 'vit-digits' has 2 classes \\(0..1\\);"
    )
    assert re.match(f"pipeplan: error: {said}", line), line


@pytest.mark.timeout(60)
def test_a_ranks_label_check_is_the_launchers():
    """The thirty-seventh round's rank check of labels (`data.check_batch_labels`) is the
    launcher's rule: a negative class is named as one too large is, and a causal LM's token
    labels may be IGNORE_INDEX (-100: a position the loss skips), not another id outside its
    vocabulary."""
    from executor.data import BadArgumentError, check_batch_labels

    classifier = models.build("vit-digits")
    check_batch_labels(torch.tensor([0, 9]), [1, 2], "m:load", "eval", classifier)
    with pytest.raises(BadArgumentError, match=r"^data 'm:load': eval item 2's label -5 is not a"):
        check_batch_labels(torch.tensor([0, -5]), [1, 2], "m:load", "eval", classifier)
    decoder = models.build("gpt2-tiny", task="causal-lm")
    tokens = torch.tensor([[5, 7, -100], [6, -100, -100]])
    check_batch_labels(tokens, [3, 4], "m:load", "train", decoder)
    tokens[1, 1] = -5
    with pytest.raises(BadArgumentError) as refused:
        check_batch_labels(tokens, [3, 4], "m:load", "train", decoder)
    assert str(refused.value) == (
        "data 'm:load': train item 4's labels hold -5, not a token id: model 'gpt2-tiny' has "
        "vocab_size 512 (or -100: skip)"
    )


def test_a_ranks_token_id_check_is_the_launchers():
    """Found by the forty-eighth round: an input token id outside the vocabulary (or negative)
    on an item only a rank read failed it with torch's "IndexError: index out of range in
    self", naming no data (on CUDA, a device-side assert). A rank holds each batch's token
    ids to the vocabulary as the launcher's checks do (`data.check_batch_inputs`); PADDING
    is padding in padded data, and named where the data is not padded."""
    from executor.data import BadArgumentError, check_batch_inputs
    from pipeplan.models import PADDING

    decoder = models.build("gpt2-tiny", task="causal-lm")
    ids = torch.tensor([[5, 7, 511], [6, 0, 3]])
    check_batch_inputs(ids, [3, 4], "m:load", "train", decoder, padded=False)
    check_batch_inputs(torch.rand(2, 3), [3, 4], "m:load", "train", decoder, padded=False)
    for bad, said in (
        (512, ""),
        (-1000, ""),
        (PADDING, " (-100 is padding in TaskData(..., padded=True))"),
    ):
        ids[1, 2] = bad
        with pytest.raises(BadArgumentError) as refused:
            check_batch_inputs(ids, [3, 50], "m:load", "eval", decoder, padded=False)
        assert str(refused.value) == (
            f"data 'm:load': eval item 50's token ids hold {bad}: model 'gpt2-tiny' has "
            f"vocab_size 512{said}"
        )
    ids[1, 2] = PADDING
    check_batch_inputs(ids, [3, 50], "m:load", "eval", decoder, padded=True)


@pytest.mark.multiprocess
@pytest.mark.timeout(180)
def test_a_data_function_that_changes_torchs_default_dtype_in_a_rank_is_refused(
    tmp_path, capsys, monkeypatch
):
    """Found by the thirty-seventh round: a data `load` that called
    `torch.set_default_dtype(torch.float64)` (in the ranks alone here) failed the rank in
    torch's words, "RuntimeError: Input type (float) and bias type (double) should be the
    same" (the round's digits, made before the change), or as this data's inputs "of shape
    (1, 8, 8) float64 but model 'vit-digits' takes … float32" (made after it): never the
    cause. Data code that leaves torch's default dtype or grad mode changed is refused in one
    line naming the data and what changed (`data.torch_state_kept`)."""
    monkeypatch.chdir(tmp_path)
    code = 'if "RANK" in os.environ: torch.set_default_dtype(torch.float64)'
    line = _ranks_line(tmp_path, capsys, "rt37_f64", in_load=code)
    assert line.startswith(
        "pipeplan: error: training failed on rank 0 before the first step: data "
        "'rt37_f64:load': the data function changed torch's default dtype to torch.float64 "
        "(it was torch.float32); data code must leave torch's global settings as it found "
        "them"
    ), line


@pytest.mark.multiprocess
@pytest.mark.timeout(180)
def test_a_pipeplan_call_from_data_code_in_a_rank_is_refused(tmp_path, capsys, monkeypatch):
    """Found by the sixty-first round: a data function calling `pipeplan.run(...)` in a rank
    (torchrun's entry, `executor.launch`, held no call) trained a whole inner run, and the
    outer run then blamed the logger's handlers. A rank holds the process's one call for its
    life: the nested call is refused at once, naming the rank, and no inner run is made."""
    monkeypatch.chdir(tmp_path)
    code = (
        'if "RANK" in os.environ: import pipeplan; pipeplan.run(runs_dir=os.path.join(HERE, '
        '"inner"), model="vit-digits", epochs=1, nproc=1)'
    )
    line = _ranks_line(tmp_path, capsys, "rt61_inner", in_load=code)
    assert line.startswith(
        "pipeplan: error: training failed on rank 0 before the first step: data "
        "'rt61_inner:load' raised OutputError: another pipeplan call is running in this "
        "process (rank 0 of the run in runs/n in thread 'MainThread'): calls run one at a time"
    ), line
    assert not (tmp_path / "inner").exists()


@pytest.mark.multiprocess
@pytest.mark.timeout(180)
def test_data_code_that_takes_every_descriptor_in_the_final_evaluation_is_named(
    tmp_path, capsys, monkeypatch
):
    """Found by the sixty-first round: a held-out set whose `__getitem__` opened files until
    EMFILE in the final evaluation ended the run "writing the final checkpoint, model or
    summary: exited with code 1", the cause in the rank's log alone and no rank-0.error.json
    (the report could not be opened either). A rank keeps a spare descriptor for its report,
    and a write that failed for want of descriptors names the open-files limit. Since the
    sixty-second round the batch whose reads took them is named first (`descriptors_left`),
    before any write."""
    import resource

    monkeypatch.chdir(tmp_path)
    code = (  # the eighth held-out read of rank 0: well into its final evaluation
        'if os.environ.get("RANK") == "0" and self.offset == 1000:\n'
        "            READS.append(i)\n"
        "            while len(READS) == 8:\n"
        "                try:\n"
        "                    KEPT.append(os.open(os.devnull, os.O_RDONLY))\n"
        "                except OSError:\n"
        "                    break"
    )
    line = _ranks_line(tmp_path, capsys, "rt61_fds", at_import="READS, KEPT = [], []", in_item=code)
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    assert line.startswith(
        "pipeplan: error: training failed on rank 0 after step 3, at the end of epoch 1: data "
        "'moving': reading a batch ("
    ), line
    said = f"where the open-files limit (ulimit -n) is {soft}: its reads open files they do not "
    assert said in line, line
    assert (tmp_path / "runs" / "n" / "logs" / "rank-0.error.json").exists()


@pytest.mark.timeout(60)
def test_data_code_that_turns_gradients_off_is_refused_and_undone(tmp_path, capsys, monkeypatch):
    """Found by the thirty-seventh round: a data `load` that called
    `torch.set_grad_enabled(False)` failed a rank with "step() requires gradients to be
    enabled …", naming no data. The launcher's own call of `load` now refuses it in one
    line, no run folder made, and puts torch's grad mode back; a rank's read of an item that
    changes a setting is refused too, naming the item (`data.batch_rows`)."""
    from executor.data import BadArgumentError, batch_rows

    monkeypatch.chdir(tmp_path)
    argv = ("run", "--prepare-only", "--model", "vit-digits", "--data", "rt37_grad:load")
    argv += ("--nproc", "1", "--name", "n")
    try:
        code = _run_moving(tmp_path, "rt37_grad", *argv, in_load="torch.set_grad_enabled(False)")
        grad = torch.is_grad_enabled()
    finally:
        torch.set_grad_enabled(True)  # for the tests after this one, whatever happened
    lines = capsys.readouterr().err.strip().splitlines()
    assert (code, grad) == (2, True), lines
    assert lines == [
        "pipeplan: error: data 'rt37_grad:load': the data function changed torch's grad mode "
        "to off (it was on); data code must leave torch's global settings as it found them, "
        "as pipeplan trains in them (use `with torch.no_grad():`)"
    ]
    assert not (tmp_path / "runs").exists()

    class Doubles:
        def __getitem__(self, index):
            torch.set_default_dtype(torch.float64)
            return torch.rand(2), torch.tensor(0)

    try:
        with pytest.raises(BadArgumentError) as refused:
            batch_rows(Doubles(), [7, 8], 0, "m:load", "train")
        dtype = torch.get_default_dtype()
    finally:
        torch.set_default_dtype(torch.float32)
    assert dtype == torch.float32
    assert str(refused.value).startswith(
        "data 'm:load': reading a batch (2 train items, item 7 first) changed torch's default "
        "dtype to torch.float64"
    ), str(refused.value)


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    "change, said",
    [
        (
            lambda: torch.set_autocast_enabled("cpu", True),
            "cpu autocast to on (torch.bfloat16) (it was off)",
        ),
        (lambda: torch.set_default_device("meta"), "default device to meta (it was cpu)"),
    ],
    ids=["autocast", "default-device"],
)
def test_data_code_that_turns_on_autocast_or_moves_the_default_device_is_refused(change, said):
    """Found by the thirty-eighth round: a rank's `__getitem__` that turned on CPU autocast
    trained an fp32 run in bfloat16, silently; one that set the default device to meta failed
    in torch's words ("Cannot copy out of meta tensor"). Both are torch settings of the process
    that a rank trains in, held as the default dtype and grad mode are (`torch_state_kept`):
    refused in one line, and put back."""
    from executor.data import BadArgumentError, batch_rows

    class Changes:
        def __getitem__(self, index):
            change()
            return torch.zeros(2), torch.tensor(0)

    with pytest.raises(BadArgumentError) as refused:
        batch_rows(Changes(), [3, 4], 0, "m:load", "eval")
    assert str(refused.value).startswith(
        f"data 'm:load': reading a batch (2 eval items, item 3 first) changed torch's {said}; "
    ), str(refused.value)
    assert not torch.is_autocast_enabled("cpu")
    assert torch.get_default_device() == torch.device("cpu")


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    ("odd", "part", "said"),
    [
        ((torch.zeros(2, dtype=torch.int64), torch.tensor(1)), 0, "input"),
        ((torch.zeros(2), torch.tensor(True)), 1, "label"),
        ((torch.zeros(2, dtype=torch.float64), torch.tensor(1)), 0, "input"),
    ],
    ids=["int64-image", "bool-label", "float64-image"],
)
def test_a_batch_whose_items_hold_two_dtypes_is_refused_naming_them(odd, part, said):
    """Found by the thirty-ninth round: torch.stack promotes a batch's tensors to one dtype,
    so one int64 image in five, or a label `tensor(True)` among int64 ones, trained and
    evaluated with exit 0 (held-out accuracy 14.5 % and 8.6 % where 10.3 %), and float64
    among float32 failed in torch's words naming no data. Refused, naming both items."""
    from executor.data import BadArgumentError, batch_rows

    class Mixed:
        def __getitem__(self, index):
            return odd if index == 4 else (torch.zeros(2), torch.tensor(1))

    with pytest.raises(BadArgumentError) as refused:
        batch_rows(Mixed(), [3, 4, 5], part, "m:load", "train")
    message = str(refused.value)
    assert message.startswith(f"data 'm:load': train item 3's {said} is "), message
    assert f"and item 4's {_dtype_word(odd[part])}" in message
    assert message.endswith(
        f"the {said}s of a batch are stacked into one tensor and must have one dtype"
    )
    # The same items read alone are no batch of two dtypes.
    assert batch_rows(Mixed(), [4], part, "m:load", "train").dtype == odd[part].dtype


def _dtype_word(tensor: torch.Tensor) -> str:
    return str(tensor.dtype).removeprefix("torch.")


@pytest.mark.timeout(60)
def test_data_code_that_closes_stdout_closes_it_for_itself_alone():
    """Found by the thirty-ninth round: a data function that closed descriptor 1 in the
    launcher left the ranks it started with no stdout (`sys.stdout = None`), each printing a
    traceback before the error line. The descriptor is put back when the data code returns
    (`data.descriptor_1_kept`), and a rank started without one writes to its log anyway. In a
    subprocess: its descriptor 1 is a pipe this test reads."""
    script = (
        "import os, sys\n"
        "from executor.data import _contained\n"
        "with _contained('m:load', 'the data function'):\n"
        "    os.close(1)\n"
        "print('still here', flush=True)\n"
        "from executor.launch import rank_console\n"
        "import pathlib, tempfile\n"
        "logs = pathlib.Path(tempfile.mkdtemp())\n"
        "sys.stdout = None\n"
        "console = rank_console(logs / 'logs', 1)\n"
        "print('into the log', flush=True)\n"
        "console.write('console ' + (logs / 'logs' / 'rank-1.log').read_text().splitlines()[-1])\n"
    )
    root = Path(cli.__file__).resolve().parent
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=root, capture_output=True, text=True, timeout=50,
        env={**os.environ, "PYTHONPATH": str(root)}, check=False,
    )  # fmt: skip
    assert (done.returncode, done.stdout) == (0, "still here\n"), done.stderr
    assert done.stderr == "console into the log", done.stderr


@pytest.mark.timeout(30)
def test_data_code_that_sets_the_thread_count_has_it_put_back():
    """Found by the thirty-seventh round (left open until the thirty-ninth): a `__getitem__`
    calling `torch.set_num_threads(n)` kept n for the rank's training, a rank given one core
    training on n threads. The count is put back after every call into the data code, without
    a word (it changes how fast a rank trains, not what), and the batch is read as usual."""
    from executor.data import batch_rows

    class Threads:
        def __getitem__(self, index):
            torch.set_num_threads(torch.get_num_threads() + 3)
            return torch.full((2,), float(index)), torch.tensor(0)

    threads = torch.get_num_threads()
    rows = batch_rows(Threads(), [3, 4], 0, "m:load", "train")
    assert torch.get_num_threads() == threads
    assert torch.equal(rows, torch.tensor([[3.0, 3.0], [4.0, 4.0]]))


# ------------------------------------- the 39th round: data code's functions and resource limits

# What a data module does to the process (MOVING_MODULE's `at_import` and `in_load`), and the
# start of what the one line says it did.
REBINDINGS = {
    "all_reduce-at-import": (
        dict(at_import="torch.distributed.all_reduce = lambda *a, **k: None"),
        "the data module replaced torch.distributed.all_reduce; ",
    ),
    "all_reduce-in-load": (
        dict(in_load="torch.distributed.all_reduce = lambda *a, **k: None"),
        "the data function replaced torch.distributed.all_reduce; ",
    ),
    "json.dumps-in-load": (
        dict(in_load="import json; json.dumps = lambda *a, **k: '{}'"),
        "the data function replaced json.dumps; ",
    ),
    "nofile-in-load": (
        dict(
            in_load="import resource; resource.setrlimit(resource.RLIMIT_NOFILE, "
            "(40, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))"
        ),
        "the data function lowered the open files limit (RLIMIT_NOFILE) to 40 (it was {nofile:,}",
    ),
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("case", list(REBINDINGS))
def test_data_code_that_rebinds_a_function_or_lowers_a_limit_is_refused(
    tmp_path, capsys, monkeypatch, case
):
    """Found by the thirty-ninth round: a data module's `torch.distributed.all_reduce =
    lambda *a, **k: None` (at import or in `load`) made `pipeplan run` exit 0 with its
    replicas trained apart, `json.dumps = lambda *a, **k: "{}"` in `load` failed it in a
    75-line traceback of torch's launcher (`KeyError: 'role'`), and a `load` that lowered the
    open files limit to 40 failed it in a raw c10d warning and an error naming the wrong rank
    and cause ("stopped by SIGTERM"). Each is refused in one line naming the data and what
    it changed (`data.functions_kept`, `data.limits_kept`), exit 2 before the run folder is
    made, and the function or limit is put back."""
    import json
    import resource

    import torch.distributed as dist

    monkeypatch.chdir(tmp_path)
    code, said = REBINDINGS[case]
    real = (dist.all_reduce, json.dumps, resource.getrlimit(resource.RLIMIT_NOFILE))
    name = f"rt39_{case.replace('-', '_').replace('.', '_')}"
    code = {**code, "at_import": "import torch.distributed\n" + code.get("at_import", "")}
    assert _run_moving(tmp_path, name, **code) == 2
    assert (dist.all_reduce, json.dumps, resource.getrlimit(resource.RLIMIT_NOFILE)) == real
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    start = f"pipeplan: error: data '{name}:load': " + said.format(nofile=real[2][0])
    assert lines[0].startswith(start), lines[0]
    assert "data code must leave " in lines[0], lines[0]
    assert not (tmp_path / "runs").exists()


@pytest.mark.timeout(30)
def test_data_code_that_replaces_or_deletes_a_function_is_refused_however_it_is_read():
    """Found by the thirty-ninth round (above): a function of the modules pipeplan trains
    and records with, replaced or deleted by the data code anywhere it runs (here a rank's
    batch read, `batch_rows`, and the launcher's calls, `_contained`), is refused naming it,
    compared by identity (an object that says it equals the function is still another), and
    put back. A `functools.wraps` wrapper is another function; names added are no change,
    nor is a patch the code puts back itself, nor torch's own wrapper of its function
    (importing torch._dynamo wraps torch.manual_seed so)."""
    import functools
    import json
    import os
    import unittest.mock

    import torch.nn.functional as F

    from executor.data import BadArgumentError, _contained, batch_rows

    real = (F.cross_entropy, json.dumps, os.replace, torch.manual_seed)

    class Liar:
        def __eq__(self, other):
            return True

        __hash__ = None

        def __call__(self, *args, **kwargs):
            return None

    def changes(change):
        class Items:
            def __getitem__(self, index):
                if index == 3:
                    change()
                return torch.zeros(2), torch.tensor(0)

        with pytest.raises(BadArgumentError) as refused:
            batch_rows(Items(), [3, 4], 0, "m:load", "train")
        assert (F.cross_entropy, json.dumps, os.replace, torch.manual_seed) == real
        return str(refused.value).removeprefix("data 'm:load': reading a batch (2 train items, "
                                               "item 3 first) ")  # fmt: skip

    said = changes(lambda: setattr(F, "cross_entropy", Liar()))
    assert said.startswith("replaced torch.nn.functional.cross_entropy; data code must leave"), said
    wrapped = functools.wraps(json.dumps)(lambda *a, **k: "{}")
    assert changes(lambda: setattr(json, "dumps", wrapped)).startswith("replaced json.dumps; ")
    said = changes(lambda: (delattr(os, "replace"), setattr(json, "dumps", wrapped)))
    assert said.startswith("replaced json.dumps and deleted os.replace; "), said

    with pytest.raises(BadArgumentError) as refused, _contained("m:load", "the data function"):
        torch.manual_seed = lambda seed: None
    assert torch.manual_seed is real[3]
    assert str(refused.value).startswith(
        "data 'm:load': the data function replaced torch.manual_seed; data code must leave the "
        "functions of torch and of Python's modules as it found them"
    )

    try:
        with _contained("m:load", "the data function"):
            torch.rt39_registered = lambda: None  # an addition
            with unittest.mock.patch("json.dumps", wrapped):  # put back by the code itself
                pass
            torch.manual_seed = torch._disable_dynamo(torch.manual_seed)
        assert torch.manual_seed.__wrapped__ is real[3]  # torch's own wrapper, kept
    finally:
        torch.manual_seed = real[3]
        vars(torch).pop("rt39_registered", None)


@pytest.mark.timeout(30)
def test_data_code_that_lowers_a_resource_limit_is_refused_and_it_is_put_back():
    """Found by the thirty-ninth round: a data `load` that lowered the open files limit
    (`resource.setrlimit(resource.RLIMIT_NOFILE, (40, hard))`) failed the run later naming
    the wrong rank and cause, the launcher's store out of file descriptors. Every resource
    limit the data code lowers (here in a rank's batch read, `batch_rows`) is refused in one
    line naming it, its new and old value and what pipeplan needs it for, and put back;
    a limit raised is no change."""
    import resource

    from executor.data import BadArgumentError, batch_rows

    def changes(kind, soft):
        class Items:
            def __getitem__(self, index):
                resource.setrlimit(kind, (soft, resource.getrlimit(kind)[1]))
                return torch.zeros(2), torch.tensor(0)

        return batch_rows(Items(), [5], 0, "m:load", "eval")

    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)
    with pytest.raises(BadArgumentError) as refused:
        changes(resource.RLIMIT_NOFILE, 40)
    assert resource.getrlimit(resource.RLIMIT_NOFILE) == nofile
    assert str(refused.value) == (
        "data 'm:load': reading a batch (1 eval items, item 5 first) lowered the open files "
        f"limit (RLIMIT_NOFILE) to 40 (it was {nofile[0]:,}); data code must leave the "
        "process's resource limits as it found them, as pipeplan runs under them (open files: "
        "the launcher's rendezvous store holds a connection for each rank, and a rank its own "
        "connections, log and checkpoint files; the ranks pipeplan starts inherit them)"
    )
    fsize = resource.getrlimit(resource.RLIMIT_FSIZE)
    if fsize[1] != resource.RLIM_INFINITY:
        pytest.skip(f"the file size limit is {fsize} already")
    with pytest.raises(BadArgumentError) as refused:
        changes(resource.RLIMIT_FSIZE, 2 << 20)
    assert resource.getrlimit(resource.RLIMIT_FSIZE) == fsize
    assert "lowered the file size limit (RLIMIT_FSIZE) to 2MiB (it was unlimited); " in str(
        refused.value
    )
    stack = resource.getrlimit(resource.RLIMIT_STACK)
    if stack[0] != resource.RLIM_INFINITY and stack[0] < _limit_value(stack[1]) // 2:
        try:
            changes(resource.RLIMIT_STACK, stack[0] * 2)  # raised: no change
        finally:
            resource.setrlimit(resource.RLIMIT_STACK, stack)


def _limit_value(value: int) -> float:
    import resource

    return float("inf") if value == resource.RLIM_INFINITY else value


@pytest.mark.multiprocess
@pytest.mark.long
@pytest.mark.timeout(180)
def test_a_ranks_data_code_that_rebinds_all_reduce_fails_the_run_naming_it(
    tmp_path, capsys, monkeypatch
):
    """Found by the thirty-ninth round: `torch.distributed.all_reduce = lambda *a, **k: None`
    in data code trained the replicas apart, exit 0. In a rank's `__getitem__` alone (the
    launcher's own calls are the test above's) the run fails in one line naming the data,
    the item (the rank's check of its first, `data.item`) and the function. Long: a run of
    ranks; the unit tests above hold the same check (`_contained`, `batch_rows`)."""
    monkeypatch.chdir(tmp_path)
    code = 'if "RANK" in os.environ: torch.distributed.all_reduce = lambda *a, **k: None'
    line = _ranks_line(tmp_path, capsys, "rt39_rank", in_item=code)
    said = (
        "pipeplan: error: training failed on rank 0 before the first step: data 'moving': "
        "reading train item 0 replaced torch.distributed.all_reduce; data code must leave"
    )
    assert re.match(said, line), line


@pytest.mark.timeout(30)
def test_control_characters_of_a_users_error_reach_no_line():
    """Found by the thirty-seventh round: a rank's item error "line one\\nline two\\r\\nthree
    \\x1b[31mred" was folded onto one line, but its escape sequence reached the terminal raw
    (`… three^[[31mred`). Each control character of a user's error is a space in pipeplan's
    line (`formats.base.one_line`): in the data's words (`data._one_line`) and in a rank's
    report, which the launcher's line says (`faults.describe`), whatever raised it."""
    from executor.data import _one_line
    from executor.faults import describe

    raised = ValueError("line one\nline two\r\nthree\x1b[31mred\x07\x9b")
    assert _one_line(raised) == "ValueError: line one line two three [31mred"
    assert describe(raised, "raised") == "ValueError: three [31mred"
    assert describe(RuntimeError("a\x1b]0;title\x07b"), "raised") == "RuntimeError: a ]0;title b"


@pytest.mark.timeout(120)
def test_a_data_modules_exit_callback_that_raises_is_one_warning_line(tmp_path):
    """Found by the thirty-seventh round: a data module's `atexit` callback that raised
    printed Python's "Exception ignored in atexit callback: <function …>" and its traceback,
    nine lines after a successful run's. It is now one warning line naming the callback and
    its error after a command that succeeded, and nothing after one that failed, whose error
    line stays its one line (`cli._run_exit_callbacks`). In a subprocess: atexit's callbacks
    run as the process ends. Since the forty-fourth round a data module's own registration
    is refused (`test_data_code_that_registers_exit_callbacks_is_refused_and_they_are_taken_off`):
    the callback here is registered as a library's is, by the program that runs pipeplan."""
    root = Path(cli.__file__).resolve().parent
    path = os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path}
    said = []
    for name, in_load in (("rt37_atexit", ""), ("rt37_atexit_refused", "raise ValueError('no')")):
        code = dict(at_import="", in_load=in_load, in_item="")
        (tmp_path / f"{name}.py").write_text(MOVING_MODULE.format(**code))
        argv = ["run", "--prepare-only", "--model", "vit-digits", "--data", f"{name}:load"]
        argv += ["--nproc", "1", "--name", name]
        script = (
            "import atexit, sys\nimport cli\n"
            "def boom():\n    raise RuntimeError('atexit boom\\x1b[31m')\n"
            f"atexit.register(boom)\nsys.argv[1:] = {argv!r}\ncli.entry()\n"
        )
        done = subprocess.run(
            [sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True,
            text=True, timeout=100, check=False,
        )  # fmt: skip
        said.append((done.returncode, done.stderr.splitlines()))
    warned = "the exit callback __main__.boom raised RuntimeError: atexit boom [31m"
    assert said == [
        (0, [f"pipeplan: WARNING: {warned}"]),
        (2, ["pipeplan: error: data 'rt37_atexit_refused:load' raised ValueError: no"]),
    ], said
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["rt37_atexit"]


JOBLIB_MODULE = """
import numpy as np, torch
from joblib import Parallel, delayed
from sklearn.datasets import load_digits
from executor.data import TensorPairs

def load(seed=0):
    X, y = load_digits(return_X_y=True)
    parts = Parallel(n_jobs=2)(delayed(np.multiply)(X[i::2], 1.0) for i in range(2))
    X = np.empty_like(X, dtype=float)
    X[0::2], X[1::2] = parts
    X, y = torch.tensor(X / 16.0, dtype=torch.float32).reshape(-1, 1, 8, 8), torch.tensor(y)
    return TensorPairs(X[:1400], y[:1400]), TensorPairs(X[1400:], y[1400:])
"""


def _prepared_with(tmp_path: Path, name: str, code: str, timeout: float):
    """`pipeplan run --prepare-only --data NAME:load` in a process of its own, the module
    `code` beside it (its exit callbacks run as the process ends): the finished process and
    the seconds it took."""
    (tmp_path / f"{name}.py").write_text(code)
    root = Path(cli.__file__).resolve().parent
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), str(tmp_path)])}
    argv = [sys.executable, "-m", "cli", "run", "--prepare-only", "--model", "vit-digits"]
    argv += ["--data", f"{name}:load", "--nproc", "1", "--name", "r"]
    began = time.monotonic()
    done = subprocess.run(
        argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=timeout
    )
    return done, time.monotonic() - began


@pytest.mark.timeout(200)
def test_data_code_using_joblibs_workers_ends_without_waiting_for_them(tmp_path):
    """Found by the fifty-eighth round: data code using `joblib.Parallel` (loky's worker
    processes, a legitimate sklearn-style loader) made `pipeplan run` and its rank 0 hang
    about five minutes at their end, and a signal then exited 0: pipeplan ran atexit's
    callbacks itself, where multiprocessing's joined loky's live workers, before the
    callbacks the interpreter runs first (`threading._register_atexit`), where loky shuts
    them down. They run first now: `--prepare-only` (the data loaded in the launcher) ends
    as soon as it is done, with its one line."""
    done, took = _prepared_with(tmp_path, "rt58_joblib", JOBLIB_MODULE, timeout=180)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    # The launcher's work is ~10-40 s here; loky's workers wait 300 s idle before they end.
    assert took < 150, took


FUTURES_MODULE = """
import threading
from concurrent.futures import ThreadPoolExecutor

from executor.demotasks import target

_pool = ThreadPoolExecutor(1)
_pool.submit(threading.Event().wait)  # a task that never ends, left running


def load():
    return target()
"""


@pytest.mark.timeout(180)
# In `-m long`, for the default run's 15 minutes (a 10 s wait): the exit callbacks' other
# cases (one that exits, one that raises) stay in it.
@pytest.mark.long
def test_data_code_that_leaves_a_task_running_ends_after_a_bounded_wait(tmp_path):
    """Found by the fifty-ninth round: data code whose thread pool still ran a task at the
    end (concurrent.futures' exit callback joins it) held `pipeplan run` for ever after its
    success line, Ctrl-C ignored, and its ranks likewise. The exit callbacks get
    EXIT_CALLBACKS_S; then one warning line, and the command's own status."""
    from pipeplan.exits import EXIT_CALLBACKS_S

    done, took = _prepared_with(tmp_path, "rt59_futures", FUTURES_MODULE, timeout=150)
    assert done.returncode == 0 and (tmp_path / "runs" / "r" / "run.json").is_file()
    assert done.stderr == (
        f"pipeplan: WARNING: the exit callbacks still ran after {EXIT_CALLBACKS_S:g} s, waiting "
        "on work the data code left running (a thread pool's task, a process pool's worker): "
        "not waited for\n"
    )
    assert EXIT_CALLBACKS_S <= took < 140, took  # the launcher's work: ~5-40 s here


@pytest.mark.timeout(120)
def test_a_data_modules_exit_callback_that_exits_is_one_warning_line(tmp_path):
    """Found by the thirty-eighth round: a data module's `atexit` callback that called
    `os._exit(3)` ended `pipeplan run` with status 3 (pipeplan runs atexit's callbacks
    itself, `cli._run_exit_callbacks`), skipping what pipeplan still had to flush. A callback
    that exits (`os._exit`, `sys.exit`) is now one that raises: pipeplan keeps its own exit
    status and says it in one warning line after a command that succeeded (nothing after one
    that failed, as for a callback that raised, above); the callbacks registered before it
    still run. In a subprocess: atexit's callbacks run as the process ends. Registered by the
    program that runs pipeplan, as a library's are (a data module's own are refused since the
    forty-fourth round)."""
    code = dict(at_import="", in_load="", in_item="")
    (tmp_path / "rt38_exit.py").write_text(MOVING_MODULE.format(**code))
    root = Path(cli.__file__).resolve().parent
    path = os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))
    argv = ["run", "--prepare-only", "--model", "vit-digits", "--data", "rt38_exit:load"]
    argv += ["--nproc", "1", "--name", "rt38_exit"]
    script = (
        "import atexit, os, sys\nimport cli\n"
        "def bye():\n    os._exit(3)\n"
        "def leave():\n    sys.exit(4)\n"
        "def last():\n    open('ran', 'w').close()\n"
        "atexit.register(last); atexit.register(leave); atexit.register(bye)\n"
        f"sys.argv[1:] = {argv!r}\ncli.entry()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, env={**os.environ, "PYTHONPATH": path},
        capture_output=True, text=True, timeout=100, check=False,
    )  # fmt: skip
    assert (done.returncode, done.stderr.splitlines()) == (
        0,
        [
            "pipeplan: WARNING: the exit callback __main__.bye exited with code 3",
            "pipeplan: WARNING: the exit callback __main__.leave exited with code 4",
        ],
    ), done.stderr
    assert (tmp_path / "ran").exists()  # the first registered, run last
    assert (tmp_path / "runs" / "rt38_exit" / "run.json").exists()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("slashed", ["./mod.py/", "./mod.py/.", "mod.py//"])
def test_a_data_module_file_named_with_a_trailing_slash_is_refused(
    tmp_path, capsys, monkeypatch, slashed
):
    """Found by the thirty-eighth round: `--data ./mod.py/:load` was read as ./mod.py by
    Python's import machinery while data.json recorded no module file, so a resume after the
    module was edited trained on other data without a word. A module file named as a folder is
    refused, as the other input paths are, in one line, nothing written."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mod.py").write_text("def load(seed=0):\n    raise RuntimeError('never run')\n")
    argv = ["run", "--prepare-only", "--nproc", "1", "--model", "vit-digits"]
    fragment = f"data '{slashed}:load': {slashed}: not a directory"
    refused([*argv, "--data", f"{slashed}:load", "--runs-dir", "runs"], tmp_path, capsys, fragment)
    assert not (tmp_path / "runs").exists()


# ------------------------------------------ the 40th round: data code that forks or closes fds

# Run in a process of their own: a fork under pytest that ran on would run the tests on.
FORKING_SCRIPT = """\
import os, sys, torch
from executor.data import _contained, batch_rows
class Forks:
    def __getitem__(self, index):
        if os.fork() == 0 and index == 1:
            raise ValueError("the child's own error")
        return torch.zeros(2), torch.tensor(0)
children = []
with _contained("m:load", "the data function"):
    print("held in a buffer,", end="")  # not written twice: the child flushes nothing
    children.append(os.fork())
with _contained("m:load", "the data function"):
    child = os.fork()
    children.append(child)
    if child == 0:
        raise ValueError("the child's own error")
batch_rows(Forks(), [0, 1], 0, "m:load", "train")
print(" read by", "the parent" if all(children) else "a child")
print("children ended with", sorted({os.waitpid(pid, 0)[1] for pid in children}))
"""


@pytest.mark.timeout(60)
def test_a_fork_of_the_data_code_that_comes_back_ends_at_once():
    """Found by the fortieth round: a `load` whose `os.fork()` child returned ran on in
    pipeplan's code as a second launcher (racing the first for the run directory, or
    training orphaned after the command ended) or a second rank. The child ends where it comes
    back out of the data code, returning or raising (`exits.forks_ended`, in `_contained` and
    a rank's item reads), with status 0, saying nothing and flushing no inherited buffer."""
    root = Path(cli.__file__).resolve().parent
    done = subprocess.run(
        [sys.executable, "-c", FORKING_SCRIPT], cwd=root, capture_output=True, text=True,
        timeout=50, env={**os.environ, "PYTHONPATH": str(root)}, check=False,
    )  # fmt: skip
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert done.stdout == "held in a buffer, read by the parent\nchildren ended with [0]\n"


FORKING_LOAD = """\
import os, torch
def load():
    child = os.fork()
    if child:
        with open(os.environ["CHILD_FILE"], "w") as file:
            file.write(str(child))
    x, y = torch.zeros(80, 1, 8, 8), torch.arange(80) % 10
    return torch.utils.data.TensorDataset(x, y), torch.utils.data.TensorDataset(x, y)
"""


@pytest.mark.timeout(60)
def test_a_launcher_whose_data_function_forks_prepares_one_run(tmp_path):
    """Found by the fortieth round: `pipeplan run --data m:load` whose load forked (the child
    returning) ended with exit 2 "already holds a run" while an orphaned copy trained in the
    background, or with an error line in a successful run. The run is as without the fork:
    one command line, nothing on stderr, and no copy of pipeplan left running."""
    (tmp_path / "forks.py").write_text(FORKING_LOAD)
    child_file = tmp_path / "child"
    argv = shlex.split(
        "run --nproc 1 --prepare-only --name x --model vit-digits --global-batch 16 "
        f"--data {tmp_path / 'forks.py'}:load --runs-dir {tmp_path / 'runs'}"
    )
    done = subprocess.run(
        [sys.executable, "-m", "cli", *argv], capture_output=True, text=True, timeout=50,
        cwd=Path(cli.__file__).resolve().parent, env={**os.environ, "CHILD_FILE": str(child_file)},
    )  # fmt: skip
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    assert done.stdout.count("\n") == 1 and "executor.launch" in done.stdout, done.stdout
    child = int(child_file.read_text())
    deadline = time.monotonic() + 10
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child)


def _alive(pid: int) -> bool:
    """Whether `pid` runs (not gone, not a zombie waiting for its reaper)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


KILLED_RANK_LOAD = """\
import os, signal, torch
def load():
    child = os.fork()
    if child == 0:  # reports its import to its forker's folder in TMPDIR
        import rt78_helper
        os._exit(0)
    os.waitpid(child, 0)
    if "LOCAL_RANK" in os.environ:  # a rank, killed: no exit callback of its runs
        os.kill(os.getpid(), signal.SIGKILL)
    x, y = torch.zeros(80, 1, 8, 8), torch.arange(80) % 10
    return torch.utils.data.TensorDataset(x, y), torch.utils.data.TensorDataset(x, y)
"""


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_a_killed_ranks_import_reports_are_removed_as_its_run_ends(tmp_path):
    """Found by the seventy-eighth round: a rank ended by a signal (Ctrl-C's SIGTERM after it,
    kill -9) runs no exit callback, and the folder in TMPDIR where the children its data code
    forked reported their imports stayed; later runs left it there too. The launcher removes
    the scratch of processes gone as its ranks end."""
    (tmp_path / "killed.py").write_text(KILLED_RANK_LOAD)
    (tmp_path / "rt78_helper.py").write_text("K = 1\n")
    temp = tmp_path / "tmp"
    temp.mkdir()
    argv = shlex.split(
        "run --nproc 1 --name x --model vit-digits --global-batch 16 --epochs 1 "
        f"--max-steps-per-epoch 1 --data {tmp_path / 'killed.py'}:load "
        f"--runs-dir {tmp_path / 'runs'}"
    )
    done = subprocess.run(
        [sys.executable, "-m", "cli", *argv], capture_output=True, text=True, timeout=100,
        cwd=Path(cli.__file__).resolve().parent, env={**os.environ, "TMPDIR": str(temp)},
    )  # fmt: skip
    assert done.returncode == 2 and "killed by SIGKILL" in done.stderr, done.stderr
    left = [p.name for p in temp.iterdir() if p.name.startswith("pipeplan-")]
    assert left == [], left


CLOSING_LOAD = """\
import os, torch
def load():
    os.closerange(3, 65536)
    x, y = torch.zeros(80, 1, 8, 8), torch.arange(80) % 10
    return torch.utils.data.TensorDataset(x, y), torch.utils.data.TensorDataset(x, y)
"""


@pytest.mark.timeout(60)
@pytest.mark.parametrize("stderr", ["the terminal stdout is", "a file"])
def test_data_code_that_closes_pipeplans_descriptors_is_one_line(tmp_path, stderr):
    """Found by the fortieth round: a `load` calling `os.closerange(3, 65536)` in the launcher
    ended `pipeplan run` with exit 2 and no line at all: the copy of the console's descriptor
    2 had been closed, and the line went into the file descriptor 2 was held in. Refused in
    one line (`data.held_descriptors_kept`), which reaches the console however it was given:
    the file stdout is too (a terminal), or a file opened again by its name."""
    (tmp_path / "closes.py").write_text(CLOSING_LOAD)
    argv = shlex.split(
        "run --nproc 1 --prepare-only --name x --model vit-digits --global-batch 16 "
        f"--data {tmp_path / 'closes.py'}:load --runs-dir {tmp_path / 'runs'}"
    )
    err_file = tmp_path / "err.txt"
    with err_file.open("w") as file:
        done = subprocess.run(
            [sys.executable, "-m", "cli", *argv], stdout=subprocess.PIPE, text=True, timeout=50,
            stderr=subprocess.STDOUT if stderr.startswith("the terminal") else file,
            cwd=Path(cli.__file__).resolve().parent,
        )  # fmt: skip
    said = done.stdout if stderr.startswith("the terminal") else err_file.read_text()
    assert done.returncode == 2, (done.returncode, said)
    assert said.count("\n") == 1, said
    assert said.startswith(f"pipeplan: error: data '{tmp_path / 'closes.py'}:load': the data "
                           "function closed descriptors pipeplan holds ("), said  # fmt: skip
    assert "data code must not close descriptors it did not open" in said
    assert not (tmp_path / "runs").exists()


# ------------------------------- the 41st round: data code that changes state pipeplan relies on


@pytest.mark.timeout(60)
def test_a_data_function_that_replaces_an_optimizers_step_is_refused_by_run(
    tmp_path, capsys, monkeypatch
):
    """Found by the forty-first round: a `load` that set `torch.optim.AdamW.step = no_op` (a
    method of a torch class, one level below the module functions `functions_kept` held) made
    `pipeplan run` "train" every step with the replacement, no parameter updated, held-out
    accuracy at chance and exit 0. The launcher's own call of `load` now refuses it in one
    line naming the method, exit 2 before the run folder is made, and puts it back."""
    monkeypatch.chdir(tmp_path)
    adamw = torch.optim.AdamW
    step = vars(adamw).get("step")  # its own (a first AdamW wraps Adam's) or none
    argv = ("run", "--prepare-only", "--model", "vit-digits", "--data", "rt41_step:load")
    argv += ("--nproc", "1", "--name", "n")
    in_load = "torch.optim.AdamW.step = lambda self, closure=None: None"
    try:
        code = _run_moving(tmp_path, "rt41_step", *argv, in_load=in_load)
        after = vars(adamw).get("step")
    finally:  # for the tests after this one, whatever happened
        _put_back(adamw, "step", step)
    lines = capsys.readouterr().err.strip().splitlines()
    assert (code, after is step) == (2, True), lines
    assert lines == [
        "pipeplan: error: data 'rt41_step:load': the data function replaced "
        "torch.optim.AdamW.step; data code must leave the functions of torch and of Python's "
        "modules as it found them, as pipeplan trains and writes its records with them (put "
        "back now; patch one only around your own code that needs it, as `with "
        "unittest.mock.patch(...)` does)"
    ]
    assert not (tmp_path / "runs").exists()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("owner", ["logging.Logger", "pipeplan.log"])
def test_a_data_function_that_silences_logging_is_refused_by_run(
    tmp_path, capsys, monkeypatch, owner
):
    """Found by the forty-second round's list: a `load` that replaced `logging.Logger.info`
    (a class of Python's logging, not held) lost every progress line of `pipeplan run`,
    exit 0; one that replaced a function of pipeplan's own logging module the same.
    `logging` and `pipeplan.log` are held with torch's modules (`data.KEPT_MODULES`):
    refused in one line naming what was replaced, and put back."""
    import logging

    import pipeplan.log

    monkeypatch.chdir(tmp_path)
    target, key = {
        "logging.Logger": (logging.Logger, "info"),
        "pipeplan.log": (pipeplan.log, "setup"),
    }[owner]
    real = vars(target).get(key)
    argv = ("run", "--prepare-only", "--model", "vit-digits", "--data", "rt42_log:load")
    argv += ("--nproc", "1", "--name", "n")
    in_load = f"import logging, pipeplan.log; {owner}.{key} = lambda *a, **k: None"
    try:
        code = _run_moving(tmp_path, "rt42_log", *argv, in_load=in_load)
        after = vars(target).get(key)
    finally:  # for the tests after this one, whatever happened
        _put_back(target, key, real)
    lines = capsys.readouterr().err.strip().splitlines()
    assert (code, after is real) == (2, True), lines
    assert len(lines) == 1 and lines[0].startswith(
        f"pipeplan: error: data 'rt42_log:load': the data function replaced {owner}.{key}; "
    ), lines
    assert not (tmp_path / "runs").exists()


@pytest.mark.timeout(30)
def test_a_method_of_torchs_classes_replaced_deleted_or_overridden_is_refused_and_put_back():
    """Found by the forty-first round (above): the methods of the classes pipeplan trains and
    writes its records with (torch.Tensor, nn.Module and its layers, the optimizers, json's
    encoder, …: every class at the top level of `data.KEPT_MODULES`) were not held. One the
    data code replaces, deletes, or overrides in a subclass's own dict (`torch.Tensor.add =`
    shadows torch._C.TensorBase's) is refused naming it, anywhere the code runs (a rank's
    batch read, the launcher's calls), and put back. A name added that overrides nothing, a
    patch the code undoes itself, and torch's own wrapper (a first optimizer of a class wraps
    its `step`) are no change."""
    import json
    import unittest.mock

    from executor.data import BadArgumentError, _contained, batch_rows

    nn = torch.nn
    kept = [
        (torch.Tensor, "add"),
        (nn.Module, "train"),
        (nn.Linear, "forward"),
        (json.JSONEncoder, "encode"),
        (torch.optim.Optimizer, "zero_grad"),
        (torch.optim.SGD, "step"),
    ]
    real = [vars(cls).get(key) for cls, key in kept]

    def unchanged():
        return [vars(cls).get(key) for cls, key in kept] == real

    def changes(change):
        class Items:
            def __getitem__(self, index):
                if index == 5:
                    change()
                return torch.zeros(2), torch.tensor(0)

        with pytest.raises(BadArgumentError) as refused:
            batch_rows(Items(), [4, 5], 0, "m:load", "train")
        assert unchanged()
        said = str(refused.value)
        start = "data 'm:load': reading a batch (2 train items, item 4 first) "
        assert said.startswith(start), said
        assert said.endswith(
            "; data code must leave the functions of torch and of Python's modules as it found "
            "them, as pipeplan trains and writes its records with them (put back now; patch "
            "one only around your own code that needs it, as `with unittest.mock.patch(...)` "
            "does)"
        ), said
        return said.removeprefix(start).partition(";")[0]

    try:
        assert changes(lambda: setattr(nn.Module, "train", lambda self, mode=True: self)) == (
            "replaced torch.nn.Module.train"
        )
        assert changes(lambda: setattr(torch.Tensor, "add", lambda *a, **k: None)) == (
            "replaced torch.Tensor.add"
        )
        said = changes(
            lambda: (
                delattr(nn.Linear, "forward"),
                setattr(json.JSONEncoder, "encode", lambda self, o: "{}"),
            )
        )
        assert said == "replaced json.JSONEncoder.encode and deleted torch.nn.Linear.forward"
        with pytest.raises(BadArgumentError) as refused, _contained("m:load", "the data function"):
            torch.optim.SGD.zero_grad = lambda self, set_to_none=True: None  # over Optimizer's
        assert unchanged()
        assert str(refused.value).startswith(
            "data 'm:load': the data function replaced torch.optim.SGD.zero_grad; "
        ), str(refused.value)

        with _contained("m:load", "the data function"):
            nn.Linear.rt41_registered = True  # an addition that overrides nothing
            with unittest.mock.patch.object(nn.Module, "train", lambda self, mode=True: self):
                pass
            wrapped = torch.optim.Optimizer.profile_hook_step(torch.optim.SGD.step)
            torch.optim.SGD.step = wrapped  # as torch's first SGD(...) does
        assert vars(torch.optim.SGD)["step"] is wrapped  # torch's own wrapper, kept
    finally:
        _put_back(nn.Linear, "rt41_registered", None)
        for (cls, key), old in zip(kept, real, strict=True):
            _put_back(cls, key, old)


def _put_back(cls: type, key: str, old) -> None:
    """`cls`'s own `key` as it was (`old`; None: none of its own)."""
    if vars(cls).get(key) is old:
        return
    if old is None:
        delattr(cls, key)
    else:
        setattr(cls, key, old)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("stream", ["stdout", "stderr", "stdin"])
def test_data_code_that_rebinds_a_standard_stream_is_refused_and_it_is_put_back(stream):
    """Found by the forty-first round: a `load` that set `sys.stdout = io.StringIO()` made
    `pipeplan run` exit 0 with nothing on stdout, its summary table and last line gone into
    the data module's object. sys.stdin, sys.stdout and sys.stderr rebound by the data code
    (the launcher's calls, `_contained`, whose own hold of sys.stderr undid the code's
    silently; a rank's batch read) are refused in one line naming the stream, and put back."""
    import io

    from executor.data import BadArgumentError, _contained, batch_rows

    real = (sys.stdin, sys.stdout, sys.stderr)

    class Items:
        def __getitem__(self, index):
            setattr(sys, stream, io.StringIO())
            return torch.zeros(2), torch.tensor(0)

    try:
        with pytest.raises(BadArgumentError) as refused, _contained("m:load", "the data function"):
            setattr(sys, stream, io.StringIO())
        assert (sys.stdin, sys.stdout, sys.stderr) == real
        assert str(refused.value) == (
            f"data 'm:load': the data function replaced sys.{stream}; data code must leave "
            "sys.stdin, sys.stdout and sys.stderr as it found them, as pipeplan writes its "
            "output and its lines through them (put back now; to capture what your own code "
            "prints, use `with contextlib.redirect_stdout(...)` around it)"
        )
        with pytest.raises(BadArgumentError) as refused:
            batch_rows(Items(), [2], 0, "m:load", "eval")
        assert (sys.stdin, sys.stdout, sys.stderr) == real
        assert str(refused.value).startswith(
            f"data 'm:load': reading a batch (1 eval items, item 2 first) replaced sys.{stream}; "
        ), str(refused.value)
    finally:
        sys.stdin, sys.stdout, sys.stderr = real


@pytest.mark.timeout(30)
def test_data_code_that_removes_or_changes_environment_variables_is_refused():
    """Found by the forty-first round: a `load` that called `os.environ.clear()` ran in every
    rank, which trained every step and wrote its model, and the launcher then called the run
    a failure, "training failed … exited with code 0 before the run ended", exit 2: the ranks
    read pipeplan's variables as they end. Environment variables the data code removes or
    changes are refused in one line naming them (never their values), and the environment is
    put back as it was; a variable added (a library's `os.environ.setdefault`) is no change."""
    from executor.data import BadArgumentError, _contained, batch_rows

    real = dict(os.environ)
    try:
        os.environ["RT41_A"], os.environ["RT41_B"] = "a", "b"
        before = dict(os.environ)
        with pytest.raises(BadArgumentError) as refused, _contained("m:load", "the data function"):
            os.environ.clear()
            os.environ["RT41_NEW"] = "added"
        assert dict(os.environ) == before
        said = str(refused.value)
        assert re.match(
            r"data 'm:load': the data function removed the environment variables \w+, \w+, "
            rf"\w+ and {len(before) - 3} more; data code must not remove or change the "
            r"process's environment variables, as pipeplan's ranks read theirs as they run and "
            r"end, and inherit the launcher's \(put back now; adding a variable is fine; ",
            said,
        ), said

        class Items:
            def __getitem__(self, index):
                os.environ["RT41_A"] = "changed"
                del os.environ["RT41_B"]
                return torch.zeros(2), torch.tensor(0)

        with pytest.raises(BadArgumentError) as refused:
            batch_rows(Items(), [3], 0, "m:load", "train")
        assert dict(os.environ) == before
        assert str(refused.value).startswith(
            "data 'm:load': reading a batch (1 train items, item 3 first) removed the "
            "environment variable RT41_B and changed the environment variable RT41_A; "
        ), str(refused.value)

        with _contained("m:load", "the data function"):
            os.environ.setdefault("RT41_NEW", "added")
        assert os.environ["RT41_NEW"] == "added"
    finally:
        os.environ.clear()
        os.environ.update(real)


@pytest.mark.timeout(30)
def test_the_variable_torchs_compiler_sets_itself_is_not_the_data_codes_change():
    """Found by the sixty-first round: a `load` that ran `torch.compile` was refused in the
    ranks for changing `_TORCHINDUCTOR_PYOBJECT_TENSOR_DATA_PTR`: inductor sets it to its own
    process's address each time it loads a compiled kernel, and a rank inherits the
    launcher's. Torch's private `_TORCHINDUCTOR_` variables are not the data code's to be
    refused: their change is no change, and a put-back leaves them as torch set them."""
    from executor.data import BadArgumentError, _contained

    real = dict(os.environ)
    name = "_TORCHINDUCTOR_PYOBJECT_TENSOR_DATA_PTR"
    try:
        os.environ[name], os.environ["RT61_A"] = "1111", "a"
        with _contained("m:load", "the data function"):
            os.environ[name] = "2222"
        assert os.environ[name] == "2222"
        with pytest.raises(BadArgumentError) as refused, _contained("m:load", "the data function"):
            os.environ[name] = "3333"
            os.environ["RT61_A"] = "changed"
        assert str(refused.value).startswith(
            "data 'm:load': the data function changed the environment variable RT61_A; "
        ), str(refused.value)
        assert (os.environ[name], os.environ["RT61_A"]) == ("3333", "a")
    finally:
        os.environ.clear()
        os.environ.update(real)


@pytest.mark.multiprocess
@pytest.mark.long  # a real compile in the launcher and in each rank: a minute or more
@pytest.mark.timeout(600)
def test_a_data_function_that_compiles_runs_in_the_ranks(tmp_path, capsys, monkeypatch):
    """Found by the sixty-first round: a `load` running `torch.compile` on a tiny function
    was refused in the ranks of `pipeplan run --nproc 2` for the variable inductor sets
    itself (the test above holds the rule); it now trains."""
    monkeypatch.chdir(tmp_path)
    code = "f = torch.compile(lambda x: torch.sin(x) + 1); f(torch.ones(4))"
    (tmp_path / "rt61_compiled.py").write_text(
        MOVING_MODULE.format(at_import="", in_load=code, in_item="")
    )
    argv = ["run", "--model", "vit-digits", "--data", "rt61_compiled:load", "--epochs", "1"]
    argv += ["--global-batch", "16", "--freeze", "none", "--nproc", "2", "--name", "n"]
    try:
        assert cli.main(argv) == 0, capsys.readouterr().err
    finally:
        sys.modules.pop("rt61_compiled", None)
    assert (tmp_path / "runs" / "n" / "summary.json").exists()


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    "added",
    [
        {"GOMP_CPU_AFFINITY": "abc"},
        {"OMP_NUM_THREADS": "0"},
        {"PYTHONHOME": "/nonexistent"},
        {"LD_PRELOAD": "x.so", "KMP_AFFINITY": "y", "MASTER_PORT": "1", "WORLD_SIZE": "3"},
        {"GLOO_SOCKET_IFNAME": "nosuchif0"},  # the fifty-sixth round's
        {"MKL_VERBOSE": "1"},
        {"TRANSFORMERS_VERBOSITY": "debug"},  # the fifty-seventh round's
    ],
    ids=lambda added: ",".join(added),
)
def test_data_code_that_adds_a_variable_a_ranks_start_reads_has_it_taken_off(added):
    """Found by the fifty-fifth round: a data function that added `GOMP_CPU_AFFINITY=abc` spun
    every rank in libgomp without bound (the ranks inherit the launcher's environment, and
    read it before any check of pipeplan's), `OMP_NUM_THREADS=0` trained after libgomp's
    line, `PYTHONHOME` printed Python's failed start on every rank. Such variables added are
    taken off, so the ranks never see them; refused at first, but libraries add them as they
    load (the fifty-seventh round: scikit-learn's KMP_DUPLICATE_LIB_OK), so without a word.
    Others added (`TOKENIZERS_PARALLELISM`, `RANKING_MODEL`) are kept, as before."""
    from executor.data import _contained

    real = dict(os.environ)
    try:
        for key in added:
            os.environ.pop(key, None)
        before = dict(os.environ)
        with _contained("m:load", "the data function"):
            os.environ.update(added)
            os.environ.update(TOKENIZERS_PARALLELISM="false", RANKING_MODEL="m")
        assert dict(os.environ) == {
            **before,
            "TOKENIZERS_PARALLELISM": "false",
            "RANKING_MODEL": "m",
        }
        # In a rank, which starts no other, what the code set is its own to read as it reads.
        os.environ["RANK"] = "1"
        with _contained("m:load", "the data function"):
            os.environ.update(added)
        assert {key: os.environ[key] for key in added} == added
    finally:
        os.environ.clear()
        os.environ.update(real)


@pytest.mark.timeout(200)
def test_data_code_that_loads_the_digits_with_scikit_learn_is_not_refused(tmp_path):
    """Found by the fifty-seventh round: a data module doing `from sklearn.datasets import
    load_digits` (the home of the bundled digits, pipeplan's own `[digits]` extra) was refused,
    twice over: scikit-learn adds KMP_DUPLICATE_LIB_OK as it loads, and joblib's loky puts its
    own `multiprocessing.synchronize.SemLock._make_name` in place. Neither is the user's doing:
    an installed library's patch is its own, and the variables are taken off for the ranks. A
    fresh process: where scikit-learn was imported before, its import patches nothing."""
    (tmp_path / "skdigits.py").write_text(
        "import torch\n"
        "from torch.utils.data import TensorDataset\n"
        "from sklearn.datasets import load_digits\n\n\n"
        "def load(seed=0):\n"
        "    d = load_digits()\n"
        "    x = torch.tensor(d.images, dtype=torch.float32).unsqueeze(1) / 16\n"
        "    y = torch.tensor(d.target)\n"
        "    return TensorDataset(x[:1500], y[:1500]), TensorDataset(x[1500:], y[1500:])\n"
    )
    argv = ["run", "--prepare-only", "--model", "vit-digits", "--data", "skdigits:load"]
    argv += ["--nproc", "1", "--runs-dir", str(tmp_path / "runs"), "--name", "sk"]
    done = subprocess.run(
        [sys.executable, "-m", "cli", *argv],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "runs" / "sk" / "run.json").is_file()


def test_an_installed_library_s_patch_of_the_standard_library_is_its_own(tmp_path):
    """`_made_by_its_library`: a function of an installed package's put in the place of one
    of the standard library's under its name (loky's `_make_name`, in
    test_an_installed_function_or_a_torch_decorator_does_not_pass_a_patch_as_the_librarys) is
    the library's doing; one under another name (networkx's `not_implemented_for`: the
    fifty-ninth round), or one of a module of the user's outside site-packages, is not."""
    import importlib.util

    import networkx.utils.decorators

    from executor.data import _made_by_its_library

    name = "multiprocessing.synchronize.SemLock._make_name"
    installed = staticmethod(networkx.utils.decorators.not_implemented_for)  # its code there
    assert not _made_by_its_library(name, installed, there=set())
    (tmp_path / "rt57_mine.py").write_text("def make_name():\n    return 'x'\n")
    spec = importlib.util.spec_from_file_location("rt57_mine", tmp_path / "rt57_mine.py")
    mine = importlib.util.module_from_spec(spec)
    sys.modules["rt57_mine"] = mine
    try:
        spec.loader.exec_module(mine)
        assert not _made_by_its_library(name, staticmethod(mine.make_name), there=set())
    finally:
        del sys.modules["rt57_mine"]


@pytest.mark.timeout(30)
def test_data_code_that_disables_logging_or_lowers_the_recursion_limit_is_refused():
    """Found by the forty-first round: a `load` calling `logging.disable(logging.CRITICAL)`
    dropped every rank's progress line (`pipeplan: rank 0: INFO: epoch 1/1 …`) and warning,
    and one calling `sys.setrecursionlimit(60)` failed the run as "vit-digits: cannot build
    the model from its config (RecursionError …)", blaming the model. Each is refused in one
    line naming the change, and put back; a recursion limit raised is no change."""
    import logging

    from executor.data import BadArgumentError, _contained, batch_rows

    limit = sys.getrecursionlimit()
    low = len(traceback.extract_stack()) + 60  # lower than the limit, above this depth

    class Items:
        def __getitem__(self, index):
            logging.disable(logging.INFO)
            return torch.zeros(2), torch.tensor(0)

    try:
        with pytest.raises(BadArgumentError) as refused:
            batch_rows(Items(), [6], 0, "m:load", "train")
        assert logging.root.manager.disable == logging.NOTSET
        assert str(refused.value) == (
            "data 'm:load': reading a batch (1 train items, item 6 first) set logging.disable's "
            "level to INFO (it was NOTSET); data code must leave `logging.disable` as it found "
            "it, as pipeplan logs its progress lines and warnings (put back now; to quiet a "
            "library, set its own logger's level (`.setLevel(...)` on the logger "
            "`logging.getLogger` gives for its name))"
        )
        with pytest.raises(BadArgumentError) as refused, _contained("m:load", "the data function"):
            sys.setrecursionlimit(low)
        assert sys.getrecursionlimit() == limit
        assert str(refused.value) == (
            f"data 'm:load': the data function lowered Python's recursion limit to {low:,} (it "
            f"was {limit:,}); data code must not lower Python's recursion limit, as torch and "
            "pipeplan recurse as they build the model and write its records (put back now; "
            "raising it is fine)"
        )
        with _contained("m:load", "the data function"):
            sys.setrecursionlimit(limit + 100)
        assert sys.getrecursionlimit() == limit + 100
    finally:
        logging.disable(logging.NOTSET)
        sys.setrecursionlimit(limit)


@pytest.mark.timeout(60)
def test_torchs_own_patch_of_a_method_in_data_code_is_not_refused():
    """The forty-first round's hold of the kept classes' methods (above) keeps what torch's
    own code patches as it runs: the first compiled call in a process (torch._dynamo's
    `install_generation_tagging_init`) replaces nn.Module.__init__ and __setstate__ with
    closures of its own that call the old ones, no `functools.wraps`. Data code that compiles
    a function is no change, as it was before the round's hold."""
    mutation_guard = pytest.importorskip("torch._dynamo.mutation_guard")
    from executor.data import _contained

    module = torch.nn.Module
    flag = "___needs_generation_tag_patch"
    real = {key: vars(module).get(key) for key in ("__init__", "__setstate__", flag)}
    try:
        setattr(module, flag, True)  # patch again, as a process's first compiled call does
        with _contained("m:load", "the data function"):
            mutation_guard.install_generation_tagging_init()
        assert vars(module)["__init__"] is not real["__init__"]  # torch's patch, kept
    finally:
        for key, old in real.items():
            _put_back(module, key, old)


# ----------------------------------------------------------------------------- forty-second round
# Process state held around the user's data code that the identity checks above let by: the
# console streams' own attributes, a stream closed in place, pipeplan's loggers.


@pytest.mark.timeout(30)
def test_data_code_that_patches_a_console_streams_method_is_refused_and_it_is_put_back():
    """Found by the forty-second round: a `load` that set `sys.stdout.write = lambda s: 0`
    made `pipeplan run --prepare-only` exit 0 having printed nothing (a full run lost its
    summary): during the data code sys.stdout is pipeplan's own wrapper (`log.Output`), and
    the attribute set on it stayed, which the identity check of the streams cannot see. An
    attribute set on (or taken from) a console stream, pipeplan's wrapper or the file under
    it (sys.__stdout__), in the launcher's calls or a rank's batch read, is refused in one
    line naming it, and put back; what the wrapper sets itself as a write fails is no
    change."""
    import io

    from executor.data import BadArgumentError, _contained, batch_rows
    from pipeplan.log import Output

    class Failing(io.StringIO):
        def write(self, text):
            raise BrokenPipeError(32, "Broken pipe")

    real = (sys.stdout, sys.__stdout__)
    out = Output(io.StringIO())
    before = dict(vars(out))

    class Items:
        def __getitem__(self, index):
            sys.__stdout__.write = print
            return torch.zeros(2), torch.tensor(0)

    try:
        sys.stdout = out
        with pytest.raises(BadArgumentError) as refused, _contained("m:load", "the data function"):
            sys.stdout.write = lambda s: 0
        assert sys.stdout is out and vars(out) == before
        assert str(refused.value) == (
            "data 'm:load': the data function replaced sys.stdout.write; data code must leave "
            "sys.stdin, sys.stdout and sys.stderr as it found them, as pipeplan writes its "
            "output and its lines through them (put back now; to capture what your own code "
            "prints, use `with contextlib.redirect_stdout(...)` around it)"
        )
        sys.stdout = Output(real[1])  # as the CLI has it: the wrapper over sys.__stdout__
        with pytest.raises(BadArgumentError) as refused:
            batch_rows(Items(), [4], 0, "m:load", "train")
        assert "write" not in vars(real[1])
        assert str(refused.value).startswith(
            "data 'm:load': reading a batch (1 train items, item 4 first) replaced "
            "sys.__stdout__.write (what sys.stdout writes to); "
        ), str(refused.value)
        sys.stdout = failing = Output(Failing())
        with _contained("m:load", "the data function"):
            print("to a closed pipe")  # the wrapper keeps its failure: not the code's change
        assert isinstance(failing.failure, BrokenPipeError)
    finally:
        sys.stdout = real[0]
        vars(real[1]).pop("write", None)


@pytest.mark.timeout(30)
def test_data_code_that_closes_a_console_stream_is_refused_and_it_is_opened_again(tmp_path):
    """Found by the forty-second round: a `load` calling `sys.stdout.close()` or
    `sys.__stdout__.close()` ended `pipeplan run` in a 68-line traceback from pipeplan's next
    flush ("ValueError: I/O operation on closed file"), and `sys.__stderr__.close()` in
    CPython's "lost sys.stderr", exit 1: the stream was closed in place, not rebound, and no
    descriptor closed. Each is refused in one line naming the stream, and the file is opened
    again on its descriptor where it was (the name, pipeplan's wrapper), so that pipeplan's
    own lines still come out; sys.stderr, held by pipeplan while the code runs, closed is
    refused too, with no traceback."""
    from executor.data import BadArgumentError, _contained, batch_rows
    from pipeplan.log import Output

    real = (sys.stdout, sys.stderr)
    fd = os.open(tmp_path / "console", os.O_WRONLY | os.O_CREAT)
    file = open(fd, "w", closefd=False)  # noqa: SIM115 (as Python's own: closing it keeps fd)
    out = Output(file)

    class Items:
        def __getitem__(self, index):
            sys.stdout.close()
            return torch.zeros(2), torch.tensor(0)

    try:
        sys.stdout = out
        with pytest.raises(BadArgumentError) as refused, _contained("m:load", "the data function"):
            print("before", flush=True)
            sys.stdout.close()
        assert sys.stdout is out and out.stream is not file and not out.stream.closed
        print("after", flush=True)
        assert str(refused.value) == (
            "data 'm:load': the data function closed sys.stdout; data code must not close "
            "sys.stdin, sys.stdout or sys.stderr (nor Python's originals, sys.__stdout__ and "
            "the like), as pipeplan writes its output and its lines through them (put back "
            "now; to keep your own code's output off the console, use "
            "`with contextlib.redirect_stdout(io.StringIO()):` around it)"
        )
        with pytest.raises(BadArgumentError) as refused:
            batch_rows(Items(), [5], 0, "m:load", "eval")
        assert not out.stream.closed
        print("again", flush=True)
        assert str(refused.value).startswith(
            "data 'm:load': reading a batch (1 eval items, item 5 first) closed sys.stdout; "
        ), str(refused.value)
        assert (tmp_path / "console").read_text() == "before\nafter\nagain\n"
        with pytest.raises(BadArgumentError) as refused, _contained("m:load", "the data function"):
            sys.stderr.close()  # pipeplan's hold of what the code writes there
        assert str(refused.value).startswith("data 'm:load': the data function closed sys.stderr; ")
        assert sys.stderr is real[1] and not sys.stderr.closed
    finally:
        sys.stdout, sys.stderr = real
        os.close(fd)


@pytest.mark.timeout(30)
def test_data_code_that_changes_pipeplans_loggers_is_refused_and_they_are_put_back():
    """Found by the forty-second round: a `load` calling
    `logging.getLogger("pipeplan").setLevel(logging.CRITICAL)` dropped every progress line of
    the run (`pipeplan: rank 0: INFO: epoch …`, `trained model …`), exit 0, as
    `logging.disable` did before the forty-first round's hold. pipeplan's loggers ("pipeplan"
    and those below it) are held as it is: a level, the disabled switch, propagation, the
    handlers, the filters, and a handler's level and filters the code changed are refused in
    one line naming the logger, and put back. A logger the code makes, and the root
    logger's level, are no change."""
    import logging

    from executor.data import BadArgumentError, _contained, batch_rows

    top, below = logging.getLogger("pipeplan"), logging.getLogger("pipeplan.rt42")
    handler = logging.NullHandler()
    top.addHandler(handler)
    state = lambda: (  # noqa: E731
        top.level, top.disabled, top.propagate, list(top.handlers), list(top.filters),
        below.level, below.disabled, handler.level, list(handler.filters),
    )  # fmt: skip
    before, root = state(), logging.root.level

    class Items:
        def __getitem__(self, index):
            below.disabled = True
            handler.addFilter(lambda record: False)
            return torch.zeros(2), torch.tensor(0)

    try:
        with pytest.raises(BadArgumentError) as refused, _contained("m:load", "the data function"):
            top.setLevel(logging.CRITICAL)
            top.removeHandler(handler)
            top.propagate = False
        assert state() == before
        assert str(refused.value) == (
            "data 'm:load': the data function set the level of the logger 'pipeplan' to "
            f"CRITICAL (it was {logging.getLevelName(before[0])}) and turned the logger "
            "'pipeplan''s propagation off and changed the handlers of the logger 'pipeplan'; "
            "data code must leave pipeplan's loggers ('pipeplan' and those below it: their "
            "levels, handlers, filters, propagation) as it found them, as pipeplan logs its "
            "progress lines and warnings through them (put back now; to quiet a library, set "
            "its own logger's level)"
        )
        with pytest.raises(BadArgumentError) as refused:
            batch_rows(Items(), [1], 0, "m:load", "train")
        assert state() == before
        assert str(refused.value).startswith(
            "data 'm:load': reading a batch (1 train items, item 1 first) changed the filters "
            "of a handler of the logger 'pipeplan' and disabled the logger 'pipeplan.rt42'; "
        ), str(refused.value)
        with _contained("m:load", "the data function"):
            logging.getLogger("pipeplan.rt42.new").setLevel(logging.ERROR)
            logging.root.setLevel(logging.ERROR)
            top.info("a line of the data code's")
    finally:
        top.removeHandler(handler)
        logging.root.setLevel(root)


def test_data_code_that_sets_methods_on_pipeplans_loggers_is_refused_and_they_are_put_back():
    """Found by the sixtieth round: `info`, `warning` and `error` set to a no-op on each of
    pipeplan's loggers (on the instance, past the level and handlers the check held) dropped
    every progress and warning line of a run, exit 0; a handler's `emit` likewise. Refused in
    one line naming them, and put back."""
    import logging

    from executor.data import BadArgumentError, _contained

    top = logging.getLogger("pipeplan")
    handler = logging.NullHandler()
    top.addHandler(handler)
    noop = lambda *args, **kwargs: None  # noqa: E731
    try:
        with pytest.raises(BadArgumentError) as refused, _contained("m:load", "the data function"):
            top.info = top.warning = noop
            handler.emit = noop
        assert (
            "info" not in vars(top) and "warning" not in vars(top) and "emit" not in vars(handler)
        )
        said = str(refused.value)
        assert said.startswith(
            "data 'm:load': the data function replaced the methods info, warning of the logger "
            "'pipeplan' and replaced the method emit of a handler of the logger 'pipeplan'"
        ), said
    finally:
        top.removeHandler(handler)


# `<LINE>` in a `load` of the forty-second round's, and the start of the refusal it now gets.
CONSOLE_AND_LOGGERS = {
    "stdout-write": (
        "sys.stdout.write = lambda s: 0",
        "the data function replaced sys.stdout.write; ",
    ),
    "closed": (
        "sys.stdout.close(); sys.__stderr__.close()",
        "the data function closed sys.__stdout__ (what sys.stdout writes to) and closed "
        "sys.__stderr__ (what pipeplan's console writes to); ",
    ),
    "logger-level": (
        "import logging; logging.getLogger('pipeplan').setLevel(logging.CRITICAL)",
        "the data function set the level of the logger 'pipeplan' to CRITICAL (it was INFO); ",
    ),
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "case",
    # In `-m long`, for the suite's time: the in-process tests above hold the patched method
    # and the logger level; the closed streams need a real process's console, and stay.
    [
        pytest.param("stdout-write", marks=pytest.mark.long),
        "closed",
        pytest.param("logger-level", marks=pytest.mark.long),
    ],
)
def test_pipeplan_run_refuses_data_code_that_patches_closes_or_quiets_its_output(tmp_path, case):
    """Found by the forty-second round (above), as the user met it: `pipeplan run
    --prepare-only` of a `load` that patched sys.stdout.write printed nothing, exit 0; one
    that closed sys.stdout or sys.__stderr__ ended in a traceback or CPython's "lost
    sys.stderr", exit 1; one that raised the "pipeplan" logger's level lost its lines. Each
    is now one line on stderr naming the data and what it did, exit 2, nothing on stdout and
    no run folder. In a subprocess: pipeplan's own console wrappers (`log.guard_console`)."""
    line, said = CONSOLE_AND_LOGGERS[case]
    root = Path(cli.__file__).resolve().parent
    path = os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path}
    name = f"rt42_{case.replace('-', '_')}"
    code = dict(at_import="import sys", in_load=line, in_item="")
    (tmp_path / f"{name}.py").write_text(MOVING_MODULE.format(**code))
    argv = ["run", "--prepare-only", "--model", "vit-digits", "--data", f"{name}:load"]
    argv += ["--nproc", "2", "--name", name]
    done = subprocess.run(
        [sys.executable, "-m", "cli", *argv], cwd=tmp_path, env=env, capture_output=True,
        text=True, timeout=50, check=False,
    )  # fmt: skip
    lines = done.stderr.splitlines()
    assert (done.returncode, done.stdout, len(lines)) == (2, "", 1), (done, lines)
    assert lines[0].startswith(f"pipeplan: error: data '{name}:load': {said}"), lines[0]
    assert not (tmp_path / "runs").exists()


# ------------------------- the 42nd round: autograd's and the import system's global state


@pytest.mark.timeout(60)
def test_a_saved_tensor_hook_left_installed_by_load_is_refused_by_run(
    tmp_path, capsys, monkeypatch
):
    """Found by the forty-second round: a `load` that entered
    `torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t:
    torch.zeros_like(t)).__enter__()` and never left it trained every step of `pipeplan run`
    on zeroed saved tensors (wrong gradients, the losses apart from step 2), then failed as
    "run.jsonl:8: … grad_norms lacks active layer 0", blaming the records. The launcher's call
    of `load` refuses it in one line naming the data, exit 2 before the run folder is made,
    and the hook is gone after."""
    monkeypatch.chdir(tmp_path)
    hooks = torch._C._autograd._top_saved_tensors_default_hooks
    argv = ("run", "--prepare-only", "--model", "vit-digits", "--data", "rt42_hooks:load")
    argv += ("--nproc", "1", "--name", "n")
    in_load = (
        "torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: torch.zeros_like(t))"
        ".__enter__()"
    )
    try:
        code = _run_moving(tmp_path, "rt42_hooks", *argv, in_load=in_load)
        after = hooks(True)
    finally:  # for the tests after this one, whatever happened
        while hooks(True) is not None:
            torch._C._autograd._pop_saved_tensors_default_hooks()
    lines = capsys.readouterr().err.strip().splitlines()
    assert (code, after) == (2, None), lines
    assert lines == [
        "pipeplan: error: data 'rt42_hooks:load': the data function set autograd's "
        "saved-tensor hooks to pack load.<locals>.<lambda> and unpack load.<locals>.<lambda> "
        "(it was none); data code must leave autograd's global state as it found it, as "
        "pipeplan's backward pass runs in it (put back now; use `with "
        "torch.autograd.graph.saved_tensors_hooks(...):` or `with "
        "torch.autograd.detect_anomaly():` around what it should cover)"
    ]
    assert not (tmp_path / "runs").exists()


@pytest.mark.timeout(30)
def test_autograds_state_changed_by_data_code_is_refused_and_put_back():
    """Found by the forty-second round (above): autograd's saved-tensor hooks, their switch
    and anomaly detection, changed by the data code anywhere it runs (the launcher's calls, a
    rank's batch read), are refused in one line and put back; hooks used in a `with` that the
    code leaves are no change."""
    from executor.data import BadArgumentError, _contained, batch_rows

    autograd = torch._C._autograd

    def clean() -> bool:
        return (
            autograd._top_saved_tensors_default_hooks(True),
            autograd._saved_tensors_hooks_get_disabled_error_message(),
            torch.is_anomaly_enabled(),
        ) == (None, None, False)

    class Items:
        def __getitem__(self, index):
            autograd._saved_tensors_hooks_disable("no hooks")  # as the `with` enters it
            return torch.zeros(2), torch.tensor(0)

    try:
        with pytest.raises(BadArgumentError) as refused, _contained("m:load", "the data function"):
            torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t).__enter__()
            torch.set_anomaly_enabled(True)
        assert clean()
        assert str(refused.value).startswith(
            "data 'm:load': the data function set autograd's saved-tensor hooks to pack "
            "test_autograds_state_changed_by_data_code_is_refused_and_put_back.<locals>.<lambda>"
        ), str(refused.value)
        assert "and turned autograd's anomaly detection on; " in str(refused.value)
        with pytest.raises(BadArgumentError) as refused:
            batch_rows(Items(), [1], 0, "m:load", "train")
        assert clean()
        assert str(refused.value).startswith(
            "data 'm:load': reading a batch (1 train items, item 1 first) disabled autograd's "
            "saved-tensor hooks; "
        ), str(refused.value)
        with (
            _contained("m:load", "the data function"),
            torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t),
        ):
            torch.ones(2, requires_grad=True).sigmoid().sum().backward()
        assert clean()
    finally:
        while autograd._top_saved_tensors_default_hooks(True) is not None:
            autograd._pop_saved_tensors_default_hooks()
        autograd._saved_tensors_hooks_enable()
        torch.set_anomaly_enabled(False)


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "in_load, fragment",
    [
        ("sys.path.clear()", "the data function removed "),
        ("sys.meta_path.clear()", "the data function removed "),
        (
            'sys.modules["json"] = types.ModuleType("json")',
            "the data function replaced the imported module json in sys.modules; ",
        ),
        # The fifty-fifth round: a module pipeplan imports later, stood in for by hand, and a
        # finder refusing imports put first, failed the run blaming the model.
        (
            'sys.modules["safetensors.flax"] = types.ModuleType("safetensors.flax")',
            "the data function put the module safetensors.flax in sys.modules by hand; ",
        ),
        (
            "sys.meta_path.insert(0, types.SimpleNamespace(find_spec=lambda *a: None))",
            "the data function put a finder before ",
        ),
        # The fifty-seventh round: a folder's finder replaced, which Python's own PathFinder
        # asks for every import from that folder (here one that finds nothing).
        (
            "import importlib.machinery as m; F = type('F', (m.FileFinder,), {}); "
            "c = sys.path_importer_cache; "
            "[c.__setitem__(k, F(k)) for k, v in list(c.items()) if type(v) is m.FileFinder]",
            "the data function put a finder of its own in sys.path_importer_cache for ",
        ),
        # The fifty-eighth round: one of the same type, looking in another folder.
        (
            "import importlib.machinery as m, tempfile; c = sys.path_importer_cache; "
            "[c.__setitem__(k, m.FileFinder(tempfile.gettempdir())) for k, v in list(c.items())"
            " if type(v) is m.FileFinder]",
            "the data function put a finder of its own in sys.path_importer_cache for ",
        ),
    ],
    ids=[
        "sys.path",
        "sys.meta_path",
        "sys.modules",
        "made by hand",
        "a finder first",
        "cache",
        "cache elsewhere",
    ],
)
def test_data_code_that_changes_the_import_system_is_refused_by_run(
    tmp_path, capsys, monkeypatch, in_load, fragment
):
    """Found by the forty-second round, each a data `load`: `sys.path.clear()` was a
    55-line traceback of `_data_directory_on_path` (`list.remove(x): x not in list`), and
    `sys.meta_path.clear()` or `sys.modules["json"] = types.ModuleType("json")` failed the run
    as "cannot build the model from its config", blaming the model, with a raw line of
    huggingface_hub's. Each is refused in one line naming the data, exit 2, and put back."""
    import json as real_json

    monkeypatch.chdir(tmp_path)
    state = (list(sys.path), list(sys.meta_path), list(sys.path_hooks))
    finders = dict(sys.path_importer_cache)
    argv = ("run", "--prepare-only", "--model", "vit-digits", "--data", "rt42_imports:load")
    argv += ("--nproc", "1", "--name", "n")
    try:
        code = _run_moving(tmp_path, "rt42_imports", *argv, in_load=f"import sys, types; {in_load}")
        after = (list(sys.path), list(sys.meta_path), list(sys.path_hooks))
        json_after = sys.modules["json"]
    finally:  # for the tests after this one, whatever happened
        sys.path[:], sys.meta_path[:], sys.path_hooks[:] = state
        placed = {k: v for k, v in sys.path_importer_cache.items() if type(v).__name__ == "F"}
        sys.path_importer_cache.update({k: finders[k] for k in placed if k in finders})
        sys.modules["json"] = real_json
        made = sys.modules.get("safetensors.flax")
        if made is not None and made.__spec__ is None:  # a stand-in left: not the test's next
            del sys.modules["safetensors.flax"]
    captured = capsys.readouterr()
    assert made is None or made.__spec__ is not None
    lines = captured.err.strip().splitlines()
    assert (code, after, json_after) == (2, state, real_json), lines
    assert not placed, sorted(placed)[:3]
    assert len(lines) == 1 and captured.out == "", captured
    assert lines[0].startswith(f"pipeplan: error: data 'rt42_imports:load': {fragment}"), lines
    assert lines[0].endswith(
        "data code must leave Python's import system as it found it (sys.path, sys.meta_path, "
        "sys.path_hooks and the modules already imported), as pipeplan imports its own modules "
        "and the model's after it (put back now; adding a path, a finder after Python's own or "
        "a module imported is fine)"
    ), lines
    assert not (tmp_path / "runs").exists()


@pytest.mark.timeout(30)
def test_the_import_system_is_held_in_a_batch_read_and_additions_are_no_change():
    """The forty-second round's hold of the import system (above) in a rank's batch read too:
    an imported module deleted from sys.modules, or a hook removed from sys.path_hooks, is
    refused and put back. A path, a finder or a module added is no change: data modules put
    their own folder on sys.path and import as they read."""
    import json as real_json

    from executor.data import BadArgumentError, _contained, batch_rows

    state = (list(sys.path), list(sys.meta_path), list(sys.path_hooks))

    class Items:
        def __init__(self, change):
            self.change = change

        def __getitem__(self, index):
            self.change()
            return torch.zeros(2), torch.tensor(0)

    try:
        with pytest.raises(BadArgumentError) as refused:
            batch_rows(Items(lambda: sys.modules.pop("json")), [2], 0, "m:load", "train")
        assert sys.modules["json"] is real_json
        assert str(refused.value).startswith(
            "data 'm:load': reading a batch (1 train items, item 2 first) deleted the imported "
            "module json in sys.modules; "
        ), str(refused.value)
        with pytest.raises(BadArgumentError) as refused:
            batch_rows(Items(sys.path_hooks.clear), [2], 0, "m:load", "train")
        assert (list(sys.path), list(sys.meta_path), list(sys.path_hooks)) == state
        assert "path_hook_for_FileFinder from sys.path_hooks; " in str(refused.value)

        with _contained("m:load", "the data function"):
            sys.path.insert(0, "/rt42/own/folder")
            import colorsys  # noqa: F401 (an import: a new entry of sys.modules)
        assert sys.path[0] == "/rt42/own/folder"
    finally:
        sys.path[:], sys.meta_path[:], sys.path_hooks[:] = state
        sys.modules["json"] = real_json


# ------------------------- the 43rd round: torch's modes, the consoles' encoding, the group

# Modes of the forty-third round's, defined at a data module's import: each zeroes the
# output of the linear layers (`torch.nn.functional.linear`; `aten.addmm`).
ZEROING_MODES = """
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

class Zero(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        return out * 0 if func is torch.nn.functional.linear else out

class ZeroAddmm(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        return out * 0 if func is torch.ops.aten.addmm.default else out
"""


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "in_load, said",
    [
        ("Zero().__enter__()", "left torch's function mode Zero entered"),
        (
            "ZeroAddmm().__enter__(); ZeroAddmm().__enter__()",
            "left torch's dispatch mode ZeroAddmm (2 times) entered",
        ),
    ],
    ids=["function-mode", "dispatch-mode"],
)
def test_data_code_that_enters_a_torch_mode_and_stays_is_refused_and_it_is_popped(
    tmp_path, capsys, monkeypatch, in_load, said
):
    """Found by the forty-third round: a `load` that entered a TorchFunctionMode zeroing
    `torch.nn.functional.linear`'s output (`Zero().__enter__()`) and never left it trained
    every step of `pipeplan run` under it, each loss exactly ln 2, exit 0; a TorchDispatchMode
    zeroing `aten.addmm` did the same. torch's mode stacks are held (`data.torch_modes_kept`):
    a mode left entered is refused in one line naming its class, exit 2 before the run
    folder is made, and popped off."""
    monkeypatch.chdir(tmp_path)
    argv = ("run", "--prepare-only", "--model", "vit-digits", "--data", "rt43_modes:load")
    argv += ("--nproc", "1", "--name", "n")
    lengths = lambda: (  # noqa: E731
        torch._C._len_torch_function_stack(), torch._C._len_torch_dispatch_stack()
    )  # fmt: skip
    before = lengths()
    try:
        code = _run_moving(tmp_path, "rt43_modes", *argv, at_import=ZEROING_MODES, in_load=in_load)
        after = lengths()
    finally:  # for the tests after this one, whatever happened
        while torch._C._len_torch_function_stack() > before[0]:
            torch._C._pop_torch_function_stack()
        while torch._C._len_torch_dispatch_stack() > before[1]:
            torch._C._pop_torch_dispatch_stack(None)
    lines = capsys.readouterr().err.strip().splitlines()
    assert (code, after) == (2, before), lines
    fix = "Zero" if "function" in said else "ZeroAddmm"
    assert lines == [
        f"pipeplan: error: data 'rt43_modes:load': the data function {said}; data code must "
        "leave torch's modes (TorchFunctionMode, TorchDispatchMode) as it found them, as every "
        "op pipeplan trains with runs through the modes entered (put back now; use "
        f"`with {fix}():` around what it should cover)"
    ]
    assert not (tmp_path / "runs").exists()


@pytest.mark.timeout(30)
def test_torch_modes_are_held_in_a_batch_read_and_a_with_is_no_change():
    """The forty-third round's hold of torch's modes (above) in a rank's batch read too, and
    a mode the code took off the stack pushed back; a mode used in a `with` the code leaves,
    and the default device set to what it was (a DeviceContext on the stack, which
    `torch_state_kept` holds), are no change."""
    import torch.utils._device as device
    from torch.overrides import TorchFunctionMode

    from executor.data import BadArgumentError, _contained, batch_rows

    class Kept(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    class Items:
        def __getitem__(self, index):
            Kept().__enter__()
            return torch.zeros(2), torch.tensor(0)

    def stack() -> list:
        return [
            torch._C._get_function_stack_at(i) for i in range(torch._C._len_torch_function_stack())
        ]

    # As the tests before left it (a default device set and put back leaves a DeviceContext).
    held = stack()
    context = getattr(torch._GLOBAL_DEVICE_CONTEXT, "device_context", None)
    current = device.CURRENT_DEVICE
    outer = Kept()
    try:
        with pytest.raises(BadArgumentError) as refused:
            batch_rows(Items(), [3], 0, "m:load", "train")
        assert stack() == held
        assert str(refused.value).startswith(
            "data 'm:load': reading a batch (1 train items, item 3 first) left torch's function "
            "mode test_torch_modes_are_held_in_a_batch_read_and_a_with_is_no_change.<locals>."
            "Kept entered; "
        ), str(refused.value)
        outer.__enter__()
        with pytest.raises(BadArgumentError) as refused, _contained("m:load", "the data function"):
            torch._C._pop_torch_function_stack()
        assert stack() == [*held, outer]
        assert "the data function took torch's function mode " in str(refused.value)
        outer.__exit__(None, None, None)
        with _contained("m:load", "the data function"), Kept():
            torch.ones(2).sum()
        with _contained("m:load", "the data function"):
            torch.set_default_device(torch.get_default_device())
    finally:  # the stack and the default device as they were, whatever happened
        for _ in range(torch._C._len_torch_function_stack()):
            torch._C._pop_torch_function_stack()
        for mode in held:
            torch._C._push_on_torch_function_stack(mode)
        torch._GLOBAL_DEVICE_CONTEXT.device_context = context
        device.CURRENT_DEVICE = current


@pytest.mark.timeout(60)
def test_data_code_that_reconfigures_a_consoles_encoding_is_refused_and_it_is_put_back(
    tmp_path, capsys, monkeypatch
):
    """Found by the forty-third round: a `load` calling
    `sys.__stdout__.reconfigure(encoding="ascii", errors="strict")` (and sys.__stderr__'s)
    was neither refused nor undone: a completed `pipeplan run` then ended in a traceback of
    its summary line (`UnicodeEncodeError` of a runs folder named "rüns"), exit 1, and with an
    ASCII path the summary table came out in ASCII. The stream is changed in place, which the
    identity and attribute checks cannot see. The consoles' encoding and errors are held with
    the streams (`data.process_state_kept`): refused in one line naming each stream, exit 2
    before the run folder is made, and put back."""
    monkeypatch.chdir(tmp_path)
    streams = (sys.__stdout__, sys.__stderr__, sys.stdout)
    held = [(stream.encoding, stream.errors) for stream in streams]
    argv = ("run", "--prepare-only", "--model", "vit-digits", "--data", "rt43_ascii:load")
    argv += ("--nproc", "1", "--name", "n")
    in_load = (
        "import sys; sys.__stdout__.reconfigure(encoding='ascii', errors='strict'); "
        "sys.__stderr__.reconfigure(encoding='ascii', errors='strict'); "
        "sys.stdout.reconfigure(errors='replace')"
    )
    try:
        code = _run_moving(tmp_path, "rt43_ascii", *argv, in_load=in_load)
        after = [(stream.encoding, stream.errors) for stream in streams]
    finally:  # for the tests after this one, whatever happened
        for stream, (encoding, errors) in zip(streams, held, strict=True):
            stream.reconfigure(encoding=encoding, errors=errors)
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert (code, after) == (2, held), lines
    assert len(lines) == 1 and captured.out == "", captured
    for name, (encoding, errors) in zip(("__stdout__", "__stderr__"), held[:2], strict=True):
        # The name says what writes to the stream where something does: pipeplan's console
        # wraps sys.__stdout__ once an earlier test in the same process has set it up.
        said = (
            rf"reconfigured sys\.{name}( \([^)]*\))? to encoding ascii, errors strict \(it was "
            rf"{re.escape(encoding)}, errors {re.escape(errors)}\)"
        )
        assert re.search(said, lines[0]), lines[0]
    assert f"reconfigured sys.stdout to encoding {held[2][0]}, errors replace " in lines[0]
    assert lines[0].startswith(
        "pipeplan: error: data 'rt43_ascii:load': the data function reconfigured "
    ), lines[0]
    assert lines[0].endswith(
        "data code must leave the console streams' encoding and errors as it found them, as "
        "pipeplan writes its output and its lines through them (put back now; to write text "
        "of your own in an encoding, encode it yourself or open a file with `encoding=`)"
    ), lines[0]
    assert not (tmp_path / "runs").exists()


# Run by the test below in a process of its own, from a folder holding the data modules
# rt43_pgrp (a `load` that calls os.setpgrp()) and rt43_sid (os.setsid()): each module's
# `pipeplan run --prepare-only` in turn, and what it left. The last line of stdout is JSON.
GROUP_SCRIPT = """
import json, os, sys
import cli
said = {"held": [os.getpgrp(), os.getsid(0)], "pid": os.getpid(), "runs": []}
for name in ("rt43_pgrp", "rt43_sid"):
    argv = ["run", "--prepare-only", "--model", "vit-digits", "--data", name + ":load"]
    code = cli.main(argv + ["--nproc", "1", "--name", name])
    said["runs"].append([code, os.getpgrp(), os.getsid(0)])
print(json.dumps(said))
"""


@pytest.mark.timeout(60)
def test_data_code_that_leaves_its_process_group_is_refused_and_it_is_put_back(tmp_path):
    """Found by the forty-third round: a launcher's `load` calling `os.setpgrp()` was
    accepted, and moved `pipeplan run` out of the terminal's foreground group: Ctrl-C no
    longer reached it, and training went on. The process's group and session are held
    (`data.process_state_kept`): the group changed is refused in one line, exit 2 before the
    run folder is made, and put back (`os.setpgid`); a session of its own (`os.setsid()`),
    which no process can leave, is refused too, in the same line with "where the OS allows".
    In a process of its own, started in this one's group, neither leading it nor a session
    (in-process, pytest may lead its group: `os.setpgrp()` would change nothing)."""
    for name, call in (("rt43_pgrp", "os.setpgrp()"), ("rt43_sid", "os.setsid()")):
        code = dict(at_import="", in_load=call, in_item="")
        (tmp_path / f"{name}.py").write_text(MOVING_MODULE.format(**code))
    root = Path(cli.__file__).resolve().parent
    path = os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))
    done = subprocess.run(
        [sys.executable, "-c", GROUP_SCRIPT], cwd=tmp_path, env={**os.environ, "PYTHONPATH": path},
        capture_output=True, text=True, timeout=50, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done
    said = json.loads(done.stdout.splitlines()[-1])
    (group, session), pid = said["held"], said["pid"]
    assert (group, session) == (os.getpgrp(), os.getsid(0)) and pid != group
    # The group put back; the session, a new one of the process's own, kept.
    assert said["runs"] == [[2, group, session], [2, pid, pid]], (said, done.stderr)
    rule = (
        "data code must leave the process in its process group and session, as a terminal's "
        "Ctrl-C reaches pipeplan through them"
    )
    fix = (
        "to start a program apart from the terminal, pass it `start_new_session=True` or "
        "`process_group=0` (subprocess))"
    )
    assert done.stderr.splitlines() == [
        f"pipeplan: error: data 'rt43_pgrp:load': the data function moved the process to "
        f"process group {pid} (it was {group}); {rule} (put back now; {fix}",
        f"pipeplan: error: data 'rt43_sid:load': the data function moved the process to a "
        f"session of its own ({pid}, it was {session}), which it cannot leave; {rule} (put "
        f"back now where the OS allows; {fix}",
    ]
    assert not (tmp_path / "runs").exists()


@pytest.mark.timeout(60)
def test_data_code_that_lowers_torchs_float32_matmul_precision_is_refused_and_undone(
    tmp_path, capsys, monkeypatch
):
    """Found by the forty-fourth round: a data `load` that called
    `torch.set_float32_matmul_precision("medium")` made `pipeplan run` train an fp32 run's
    matmuls in bfloat16 (a CPU with avx512_bf16), exit 0, no line, its weights 2.7e-5 apart
    after 2 steps. torch's float32 precision is one of the settings held
    (`data.torch_state_kept`): refused in one line naming what changed, and put back."""
    monkeypatch.chdir(tmp_path)
    argv = ("run", "--prepare-only", "--model", "vit-digits", "--data", "rt44_mm:load")
    argv += ("--nproc", "1", "--name", "n")
    backends = [("generic", "all")] + [
        (backend, op) for backend in ("cuda", "mkldnn") for op in ("all", "matmul", "conv", "rnn")
    ]

    def precision() -> list:  # both of torch's APIs (the old one's reads fail where mixed)
        return [torch._C._get_cublas_allow_tf32()] + [
            torch._C._get_fp32_precision_getter(*backend) for backend in backends
        ]

    before = (torch.get_float32_matmul_precision(), precision())
    try:
        code = _run_moving(
            tmp_path, "rt44_mm", *argv, in_load='torch.set_float32_matmul_precision("medium")'
        )
        after = (torch.get_float32_matmul_precision(), precision())
    finally:  # for the tests after this one, whatever happened
        torch.set_float32_matmul_precision(before[0])
        torch._C._set_cublas_allow_tf32(before[1][0])
        for backend, value in zip(backends, before[1][1:], strict=True):
            torch._C._set_fp32_precision_setter(*backend, value)
    lines = capsys.readouterr().err.strip().splitlines()
    assert (code, after == before) == (2, True), lines
    assert len(lines) == 1, lines
    assert lines[0].startswith(
        "pipeplan: error: data 'rt44_mm:load': the data function changed torch's float32 "
        "precision to matmul precision medium, cuBLAS TF32 on, "
    ), lines[0]
    assert "(it was matmul precision highest, cuBLAS TF32 off, " in lines[0], lines[0]
    assert "data code must leave torch's global settings as it found them" in lines[0]
    assert not (tmp_path / "runs").exists()


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    "change, said",
    [
        (lambda: setattr(torch.backends.mkldnn.matmul, "fp32_precision", "bf16"),
         "float32 precision to matmul precision mixed, mkldnn matmul bf16 (it was matmul "
         "precision highest, mkldnn matmul none)"),
        (lambda: setattr(torch.backends.cuda.matmul, "allow_tf32", True),
         "float32 precision to matmul precision high, cuBLAS TF32 on, cuda matmul tf32 (it "
         "was matmul precision highest, cuBLAS TF32 off, cuda matmul none)"),
        (lambda: setattr(torch.backends.cudnn, "allow_tf32", False),
         "float32 precision to cuDNN TF32 off, cuda conv none, cuda rnn none (it was cuDNN "
         "TF32 on, cuda conv tf32, cuda rnn tf32)"),
        (lambda: setattr(torch.backends.cuda.matmul, "allow_fp16_reduced_precision_reduction",
                         False),
         "cuBLAS fp16 reduced-precision reduction to off (split-K on) (it was on (split-K on))"),
        (lambda: setattr(torch.backends.mkldnn, "enabled", False),
         "backends.mkldnn.enabled to off (it was on)"),
        (lambda: torch.backends.cuda.enable_flash_sdp(False),
         "scaled-dot-product-attention backends to flash off (it was flash on)"),
        (lambda: torch.set_flush_denormal(True),
         "flushing of denormal numbers to on (it was off)"),
    ],
    ids=["mkldnn-bf16", "cuda-tf32", "cudnn-tf32", "fp16-reduction", "mkldnn-off",
         "sdpa-flash", "flush-denormal"],
)  # fmt: skip
def test_the_backends_precision_and_kernel_settings_are_held(change, said):
    """The forty-fourth round's neighbours of the float32 matmul precision (above): each
    setting of torch's backends that chooses the precision or the kernels a rank computes
    with (`data._BACKEND_SETTINGS`), changed by data code, is refused naming it and put back;
    one set and put back by the code itself (`torch.backends.cudnn.flags`) is no change.
    The flush of denormals torch gives no getter of is read from Python's own arithmetic."""
    from executor.data import _TORCH_SETTINGS, BadArgumentError, torch_state_kept

    def settings() -> list:
        return [get() for _, get, _, _ in _TORCH_SETTINGS]

    before = settings()
    if "denormal" in said and not torch.set_flush_denormal(False):
        pytest.skip("this CPU cannot flush denormals")
    with (
        pytest.raises(BadArgumentError) as refused,
        torch_state_kept("m:load", "the data function"),
    ):
        change()
    assert settings() == before
    assert str(refused.value).startswith(
        f"data 'm:load': the data function changed torch's {said}; data code must leave "
        "torch's global settings as it found them, as pipeplan trains in them ("
    ), str(refused.value)
    with torch_state_kept("m:load", "the data function"), torch.backends.cudnn.flags(False):
        torch.ones(2).sum()


@pytest.mark.timeout(30)
def test_a_seed_everything_helpers_determinism_settings_are_the_users_to_keep():
    """What a seed-everything helper in a `load` sets for the whole run on purpose (torch's
    deterministic algorithms, cuDNN's and oneDNN's `deterministic`, cuDNN's `benchmark`)
    chooses among kernels of one precision: not refused, and kept for training as asked."""
    from executor.data import torch_state_kept

    flags = (torch.backends.cudnn, "deterministic"), (torch.backends.cudnn, "benchmark")
    held = [getattr(owner, name) for owner, name in flags]
    enabled = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    try:
        with torch_state_kept("m:load", "the data function"):
            torch.use_deterministic_algorithms(True, warn_only=True)
            torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False
        assert torch.are_deterministic_algorithms_enabled()
        assert torch.backends.cudnn.deterministic
    finally:
        torch.use_deterministic_algorithms(enabled, warn_only=warn_only)
        for (owner, name), value in zip(flags, held, strict=True):
            setattr(owner, name, value)


@pytest.mark.timeout(60)
def test_data_code_that_registers_a_tensor_reducer_in_copyreg_is_refused_and_undone(
    tmp_path, capsys, monkeypatch
):
    """Found by the forty-fourth round: a data `load` that registered
    `copyreg.pickle(torch.Tensor, …)` zeroing each tensor made every checkpoint `pipeplan run`
    wrote with torch.save hold zeros (its checksums taken of what was written), and `export`
    wrote an all-zero model, exit 0. copyreg's table is held (`data.pickling_kept`): refused
    in one line naming the type, exit 2 before the run folder is made, and put back."""
    import copyreg

    monkeypatch.chdir(tmp_path)
    argv = ("run", "--prepare-only", "--model", "vit-digits", "--data", "rt44_copyreg:load")
    argv += ("--nproc", "1", "--name", "n")
    table = dict(copyreg.dispatch_table)
    in_load = (
        "import copyreg; copyreg.pickle(torch.Tensor, lambda t: "
        "torch.Tensor.__reduce_ex__(t * 0, 2))"
    )
    try:
        code = _run_moving(tmp_path, "rt44_copyreg", *argv, in_load=in_load)
        # As it was, but for what a library pipeplan imports registers for its own types.
        after = torch.Tensor not in copyreg.dispatch_table and all(
            copyreg.dispatch_table.get(kind) is reducer for kind, reducer in table.items()
        )
    finally:  # for the tests after this one, whatever happened
        copyreg.dispatch_table.pop(torch.Tensor, None)
        copyreg.dispatch_table.update(table)
    lines = capsys.readouterr().err.strip().splitlines()
    assert (code, after) == (2, True), lines
    assert lines == [
        "pipeplan: error: data 'rt44_copyreg:load': the data function changed "
        "copyreg.dispatch_table's reducer of torch.Tensor; data code must leave the tables and "
        "settings pickle and torch.save write with as they were, as pipeplan writes its "
        "checkpoints with them (put back now; pickle your own objects with a `__reduce__` "
        "method of their class, not a table of Python's)"
    ]
    assert not (tmp_path / "runs").exists()


@pytest.mark.timeout(30)
def test_pickles_tables_and_torch_saves_settings_are_held_in_a_batch_read():
    """The forty-fourth round's copyreg reducer (above) and its neighbours, in a rank's batch
    read too: copyreg.dispatch_table replaced, an extension code added, a location tagger
    registered with torch.serialization, torch.save's crc32 turned off: each refused naming
    it and put back. A reducer for the code's own class, or one a library registers for its
    own types as it is imported, is no change."""
    import copyreg

    from torch.utils.serialization import config

    from executor.data import BadArgumentError, _contained, batch_rows

    held = (
        copyreg.dispatch_table, dict(copyreg.dispatch_table), dict(copyreg._extension_registry),
        list(torch.serialization._package_registry), config.get_config_copy(),
    )  # fmt: skip

    def now() -> tuple:
        return (
            copyreg.dispatch_table, dict(copyreg.dispatch_table),
            dict(copyreg._extension_registry), list(torch.serialization._package_registry),
            config.get_config_copy(),
        )  # fmt: skip

    def changes(change) -> str:
        class Items:
            def __getitem__(self, index):
                change()
                return torch.zeros(2), torch.tensor(0)

        with pytest.raises(BadArgumentError) as refused:
            batch_rows(Items(), [3], 0, "m:load", "train")
        assert now() == held
        return str(refused.value).removeprefix(
            "data 'm:load': reading a batch (1 train items, item 3 first) "
        )

    try:
        said = changes(lambda: setattr(copyreg, "dispatch_table", {}))
        assert said.startswith("replaced copyreg.dispatch_table; data code must leave "), said
        said = changes(lambda: copyreg.add_extension("rt44", "x", 0x7FFF0001))
        assert said.startswith("changed copyreg._extension_registry and changed "), said
        tag = lambda obj: "cpu"  # noqa: E731
        said = changes(lambda: torch.serialization.register_package(1, tag, lambda o, where: o))
        assert said.startswith("changed torch.serialization._package_registry; "), said
        said = changes(lambda: setattr(config.save, "compute_crc32", False))
        assert said.startswith("set torch.save's save.compute_crc32 to False (it was True); "), said

        class Mine:
            pass

        with _contained("m:load", "the data function"):
            copyreg.pickle(Mine, lambda mine: (Mine, ()))
        assert copyreg.dispatch_table.pop(Mine) is not None
    finally:  # for the tests after this one, whatever happened
        copyreg.dispatch_table = held[0]
        copyreg.dispatch_table.clear()
        copyreg.dispatch_table.update(held[1])
        copyreg._extension_registry.pop(("rt44", "x"), None)
        copyreg._inverted_registry.pop(0x7FFF0001, None)
        torch.serialization._package_registry[:] = held[3]
        config.load_config(held[4])


@pytest.mark.timeout(60)
def test_a_data_function_that_replaces_the_function_adams_step_calls_is_refused_by_run(
    tmp_path, capsys, monkeypatch
):
    """Found by the forty-fourth round: a `load` that replaced
    `torch.optim.adam._single_tensor_adam` and `_multi_tensor_adam` (the module functions
    AdamW's `step` looks up at each call, one module below `torch.optim`'s top level, which
    was held) made `pipeplan run` "train" a model that never moved, every AdamW state zero,
    exit 0. The modules of the optimizer pipeplan steps are held (`data.KEPT_MODULES`):
    refused in one line naming the functions, exit 2 before the run folder is made, and put
    back."""
    import torch.optim.adam as adam

    monkeypatch.chdir(tmp_path)
    real = (adam._single_tensor_adam, adam._multi_tensor_adam)
    argv = ("run", "--prepare-only", "--model", "vit-digits", "--data", "rt44_adam:load")
    argv += ("--nproc", "1", "--name", "n")
    in_load = (
        "import importlib; m = importlib.import_module('torch.optim.adam'); "
        "m._single_tensor_adam = lambda *a, **k: None; m._multi_tensor_adam = lambda *a, **k: None"
    )
    try:
        code = _run_moving(tmp_path, "rt44_adam", *argv, in_load=in_load)
        after = (adam._single_tensor_adam, adam._multi_tensor_adam)
    finally:  # for the tests after this one, whatever happened
        adam._single_tensor_adam, adam._multi_tensor_adam = real
    lines = capsys.readouterr().err.strip().splitlines()
    assert (code, after == real) == (2, True), lines
    assert lines == [
        "pipeplan: error: data 'rt44_adam:load': the data function replaced "
        "torch.optim.adam._single_tensor_adam, torch.optim.adam._multi_tensor_adam; data code "
        "must leave the functions of torch and of Python's modules as it found them, as "
        "pipeplan trains and writes its records with them (put back now; patch one only around "
        "your own code that needs it, as `with unittest.mock.patch(...)` does)"
    ]
    assert not (tmp_path / "runs").exists()


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "module, name, replacement",
    [
        ("hashlib", "sha256", "m.md5"),
        ("pathlib", "Path.write_bytes", None),
        ("math", "isfinite", "lambda x: True"),
        ("weakref", "finalize", "None"),
    ],
)
def test_a_data_function_that_replaces_what_records_are_written_with_is_refused(
    tmp_path, capsys, monkeypatch, module, name, replacement
):
    """Found by the forty-sixth round: `hashlib.sha256 = hashlib.md5` in a `load` was not held
    (hashlib was not among `data.KEPT_MODULES`): the run priced its plan with a 32-digit
    "sha256" in the profile's identity, a 61-line traceback, exit 1. hashlib, math, pathlib and
    csv, what the records are hashed, checked and written with, are held: refused in one line
    naming the function, before the run folder is made, and put back."""
    monkeypatch.chdir(tmp_path)
    value = replacement or "lambda *a, **k: 0"
    code, put_back, lines = _replaced_by_data_code(
        tmp_path, capsys, "rt46_kept", module, name, value
    )
    assert (code, put_back) == (2, True), lines
    assert len(lines) == 1 and lines[0].startswith(
        f"pipeplan: error: data 'rt46_kept:load': the data function replaced {module}.{name}"
    ), lines
    assert not (tmp_path / "runs").exists()


@pytest.mark.timeout(60)
def test_control_characters_of_what_data_code_says_are_spaces(tmp_path, capsys, monkeypatch):
    """Found by the forty-sixth round: a `load` whose warning and stderr lines held an escape
    sequence (erase the line), a BEL, a C1 CSI and an OSC (set the terminal's title) had
    them printed raw in pipeplan's `WARNING:` lines, where an exception's message has them as
    spaces. Every line pipeplan's logger writes is one line of text (`log._Bounded`)."""
    monkeypatch.chdir(tmp_path)
    argv = ("run", "--prepare-only", "--model", "vit-digits", "--data", "rt46_ctrl:load")
    argv += ("--nproc", "1", "--name", "n")
    in_load = (
        "import sys, warnings; sys.stderr.write('progress 50%\\rnext\\n'); "
        "warnings.warn('a\\x1b[2Kb\\x07\\x9bc'); print('\\x1b]0;title\\x07', file=sys.stderr)"
    )
    assert _run_moving(tmp_path, "rt46_ctrl", *argv, in_load=in_load) == 0
    err = capsys.readouterr().err
    said = [line for line in err.splitlines() if "rt46_ctrl:load" in line]
    assert any("UserWarning: a [2Kb  c" in line for line in said), said
    assert any("wrote:  ]0;title" in line for line in said), said
    assert not re.search("[\\x00-\\x09\\x0b-\\x1f\\x7f-\\x9f]", err), repr(err)


@pytest.mark.timeout(60)
def test_data_code_that_registers_an_aten_kernel_is_refused_and_it_is_destroyed(
    tmp_path, capsys, monkeypatch
):
    """Found by the forty-fourth round: a data `load` that registered a CPU kernel of
    aten::gelu (`torch.library.Library("aten", "IMPL").impl("gelu", relu-like, "CPU")`, the
    Library kept) trained every rank's ViT with ReLU in place of GELU and exported it as a
    GELU model, exit 0, torch's warning passed on as 7 lines. A kernel of torch's operators
    registered by data code is refused in one line naming it (`data.kernels_kept`), exit 2
    before the run folder is made, and its Library destroyed: gelu is GELU again."""
    monkeypatch.chdir(tmp_path)
    argv = ("run", "--prepare-only", "--model", "vit-digits", "--data", "rt44_lib:load")
    argv += ("--nproc", "1", "--name", "n")
    at_import = "KEEP = []"
    in_load = (
        "lib = torch.library.Library('aten', 'IMPL'); KEEP.append(lib); "
        "lib.impl('gelu', lambda x, approximate='none': torch.relu(x), 'CPU')"
    )
    x = torch.tensor([-1.0, 1.0])
    real = torch.nn.functional.gelu(x)
    code = _run_moving(tmp_path, "rt44_lib", *argv, at_import=at_import, in_load=in_load)
    after = torch.nn.functional.gelu(x)
    lines = capsys.readouterr().err.strip().splitlines()
    assert (code, torch.equal(after, real)) == (2, True), lines
    assert lines == [
        "pipeplan: error: data 'rt44_lib:load': the data function registered the kernel "
        "aten::gelu for CPU; data code must leave the kernels of torch's operators as they "
        "were, as every op pipeplan trains with runs the kernel registered (put back now; "
        "define an operator of your own with `torch.library.custom_op` for what your code "
        "computes)"
    ]
    assert not (tmp_path / "runs").exists()


@pytest.mark.timeout(30)
@pytest.mark.timeout(120)
def test_data_code_that_compiles_a_function_is_not_refused_for_torchs_own_kernels():
    """Found by the sixtieth round: a `load` running torch.compile (or importing
    torch._inductor.lowering) was refused as "the data function registered the kernels
    prims::_unsafe_index_put_ for Autograd, …": torch's compiler registers them as it loads,
    and eager training never runs a prims kernel. (In a process of its own: the compiler's
    import takes seconds and stays.)"""
    code = (
        "import torch\n"
        "from executor.data import kernels_kept\n"
        "with kernels_kept('m:load', 'the data function'):\n"
        "    import torch._inductor.lowering\n"
        "print('kept')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=Path(cli.__file__).resolve().parent,
        capture_output=True,
        text=True,
        timeout=100,
    )
    assert done.returncode == 0 and done.stdout == "kept\n", done.stderr[-2000:]


def test_kernels_are_held_in_a_batch_read_and_the_codes_own_operators_are_no_change():
    """The forty-fourth round's aten kernel (above) in a rank's batch read too, through
    `torch.library.impl` (a Library torch makes and keeps), and a fallback kernel for every
    operator (a Library on '_'): refused naming them and undone. A kernel of an operator the
    code defines itself (`torch.library.custom_op`), and the kernels torch registers for its
    own namespaces as the code imports its modules, are no change."""
    import importlib
    import warnings

    from executor.data import BadArgumentError, _contained, batch_rows

    kept: list = []
    x = torch.tensor([-1.0, 1.0])
    real = torch.nn.functional.gelu(x)

    def changes(change) -> str:
        class Items:
            def __getitem__(self, index):
                change()
                return torch.zeros(2), torch.tensor(0)

        with pytest.raises(BadArgumentError) as refused, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            batch_rows(Items(), [3], 0, "m:load", "train")
        assert torch.equal(torch.nn.functional.gelu(x), real)
        return str(refused.value).removeprefix(
            "data 'm:load': reading a batch (1 train items, item 3 first) "
        )

    relu = lambda x, approximate="none": torch.relu(x)  # noqa: E731
    said = changes(lambda: torch.library.impl("aten::gelu", "CPU")(relu))
    assert said.startswith("registered the kernel aten::gelu for CPU; "), said

    def fallback():
        kept.append(torch.library.Library("_", "IMPL"))
        kept[-1].fallback(torch.library.fallthrough_kernel, "XLA")

    said = changes(fallback)
    assert said.startswith("made a Library of fallback kernels (namespace '_'); "), said
    said = changes(fallback)  # the first was destroyed: a second may register again
    assert said.startswith("made a Library of fallback kernels (namespace '_'); "), said

    with _contained("m:load", "the data function"):

        @torch.library.custom_op("rt44::twice", mutates_args=())
        def twice(x: torch.Tensor) -> torch.Tensor:
            return x * 2

        kept.append(twice)
        importlib.import_module("torch._dynamo")  # registers torch's own kernels
    assert torch.equal(torch.ops.rt44.twice(x), x * 2)


def _refused_moving(tmp_path, capsys, monkeypatch, name: str, **code: str) -> tuple[int, list[str]]:
    """`run --prepare-only` of MOVING_MODULE (`code` put in, as `_run_moving` does) from
    tmp_path: its exit code and the lines of its stderr, stdout asserted empty."""
    monkeypatch.chdir(tmp_path)
    argv = ("run", "--prepare-only", "--model", "vit-digits", "--data", f"{name}:load")
    code_ = _run_moving(tmp_path, name, *argv, "--nproc", "1", "--name", "n", **code)
    captured = capsys.readouterr()
    assert captured.out == "", captured
    return code_, captured.err.strip().splitlines()


@pytest.mark.timeout(60)
def test_data_code_that_blocks_or_ignores_the_stop_signals_is_refused_and_it_is_put_back(
    tmp_path, capsys, monkeypatch
):
    """Found by the forty-fourth round: a `load` that blocked SIGINT and SIGTERM
    (`signal.pthread_sigmask(signal.SIG_BLOCK, …)`) or ignored them (`signal.signal(…,
    signal.SIG_IGN)`) was accepted: every rank (each calls `load`) kept training through
    Ctrl-C and SIGTERM until torch's agent SIGKILLed it 10 s later, and a short run trained to
    its end and was said "stopped by SIGTERM", exit 143. The thread's signal mask and the
    handlers of the signals pipeplan stops on are held (`data.process_state_kept`): refused
    in one line naming each, exit 2 before the run folder is made, and put back."""
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGHUP)}
    in_load = (
        "import signal; "
        "signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM}); "
        "signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "signal.signal(signal.SIGHUP, signal.SIG_IGN)"
    )
    try:
        code, lines = _refused_moving(tmp_path, capsys, monkeypatch, "rt44_sig", in_load=in_load)
        after = (
            signal.pthread_sigmask(signal.SIG_BLOCK, []),
            {sig: signal.getsignal(sig) for sig in handlers},
        )
    finally:  # for the tests after this one, whatever happened
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    assert (code, after) == (2, (mask, handlers)), lines
    assert lines == [
        "pipeplan: error: data 'rt44_sig:load': the data function changed the handler of "
        "SIGHUP, SIGTERM and blocked SIGINT, SIGTERM (signal.pthread_sigmask); data code must "
        "leave the process's signal handlers, mask and wakeup fd as it found them, as pipeplan "
        "and its ranks are stopped and interrupted by signals (Ctrl-C, SIGTERM) (put back now; "
        "to hold a signal off around your own code, block it and unblock it before returning)"
    ]
    assert not (tmp_path / "runs").exists()


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "call, said",
    [
        (
            "signal.setitimer(signal.ITIMER_VIRTUAL, 40.0)",
            "the timer ITIMER_VIRTUAL (SIGVTALRM in 40 s",
        ),
        ("signal.alarm(40)", "the timer ITIMER_REAL (SIGALRM in 40 s"),
    ],
)
def test_data_code_that_arms_an_interval_timer_is_refused_and_it_is_put_back(
    tmp_path, capsys, monkeypatch, call, said
):
    """Found by the forty-fourth round: a `load` calling `signal.setitimer(signal.ITIMER_REAL,
    3.0)` ended `pipeplan run` 3 s later with only `pipeplan: stopped by SIGALRM`, exit 142:
    a timer the data code armed, blamed on a stop from outside. The interval timers are held
    (`data.process_state_kept`): one armed is refused in one line naming it, exit 2 before
    the run folder is made, and disarmed; one armed before (pytest-timeout's ITIMER_REAL,
    here) is set back to the time it had left."""
    kinds = (signal.ITIMER_REAL, signal.ITIMER_VIRTUAL, signal.ITIMER_PROF)
    before = [signal.getitimer(kind) for kind in kinds]
    start = time.monotonic()
    try:
        code, lines = _refused_moving(
            tmp_path, capsys, monkeypatch, "rt44_timer", in_load=f"import signal; {call}"
        )
        after = [signal.getitimer(kind) for kind in kinds]
    finally:  # for the tests after this one, whatever happened
        spent = time.monotonic() - start
        for kind, (value, interval) in zip(kinds, before, strict=True):
            signal.setitimer(kind, max(value - spent, 0.001) if value else 0, interval)
    assert code == 2, lines
    for (value, interval), (now, now_interval) in zip(before, after, strict=True):
        assert now_interval == interval and (now == 0 if not value else value - 5 < now <= value)
    assert len(lines) == 1 and lines[0].startswith(
        "pipeplan: error: data 'rt44_timer:load': the data function "
    ), lines
    assert said in lines[0], lines[0]
    assert lines[0].endswith(
        "data code must leave the process's interval timers (signal.setitimer, signal.alarm) "
        "as it found them, as the signals they send (SIGALRM, SIGVTALRM, SIGPROF) stop pipeplan "
        "(put back now; to limit your own code's time, disarm the timer before returning "
        "(`signal.setitimer(signal.ITIMER_REAL, 0)`))"
    ), lines[0]
    assert not (tmp_path / "runs").exists()


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "call, said",
    [
        (
            "import signal; signal.signal(signal.SIGCHLD, signal.SIG_IGN)",
            "the data function changed the handler of SIGCHLD",
        ),
        (
            "import signal; signal.signal(signal.SIGPIPE, signal.SIG_DFL)",
            "the data function changed the handler of SIGPIPE",
        ),
        ("import gc; gc.callbacks.append(lambda phase, info: None)", "changed gc.callbacks"),
        (
            "import sys; sys.setswitchinterval(0.5)",
            "set the switch interval to 0.5 s (it was 0.005 s)",
        ),
        ("import sys; sys.setswitchinterval(1e6)", "raised ValueError: switch interval 1000000.0"),
    ],
    ids=["SIGCHLD", "SIGPIPE", "gc.callbacks", "switch interval", "switch interval 1e6"],
)
def test_data_code_that_changes_what_pipeplans_watches_rely_on_is_refused_and_put_back(
    tmp_path, capsys, monkeypatch, call, said
):
    """Found by the fifty-third round, each a launcher's `load`: SIGCHLD reaped or ignored
    turned a rank's failure into "summary.json: no such file" and deleted the run folder;
    SIGPIPE at its default ended a run piped into `true` with 141 in silence; a gc callback
    set a tracer inside pipeplan's code (its failure blamed on the model build); a switch
    interval of 1e6 s starved the hang watch of its turn (a looping read hung without bound).
    Each is refused in one line, exit 2 before the run folder is made, and put back."""
    import faulthandler
    import gc

    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGCHLD, signal.SIGPIPE)}
    callbacks, interval = list(gc.callbacks), sys.getswitchinterval()
    try:
        code, lines = _refused_moving(tmp_path, capsys, monkeypatch, "rt53_state", in_load=call)
        after = (
            {sig: signal.getsignal(sig) for sig in handlers},
            list(gc.callbacks),
            sys.getswitchinterval(),
        )
    finally:  # for the tests after this one, whatever happened
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        gc.callbacks[:] = callbacks
        faulthandler.cancel_dump_traceback_later()
    assert (code, after) == (2, (handlers, callbacks, interval)), lines
    assert len(lines) == 1 and lines[0].startswith("pipeplan: error: data 'rt53_state:load'")
    assert said in lines[0], lines[0]
    assert not (tmp_path / "runs").exists()


@pytest.mark.timeout(60)
def test_data_code_that_moves_tempfiles_folder_is_refused_and_it_is_put_back(
    tmp_path, capsys, monkeypatch
):
    """Found by the forty-fourth round: a `load` that set `tempfile.tempdir =
    "/nonexistent/x"` failed `pipeplan run` with `pipeplan: error: /nonexistent/x/pipeplan-
    stderr-…: No such file or directory`, naming pipeplan's own temporary file, not the data;
    pointed at a folder that exists it moved pipeplan's temporary files there in silence.
    tempfile's folder and prefix are held (`data.process_state_kept`): refused in one line,
    exit 2 before the run folder is made, and put back."""
    import tempfile

    held = (tempfile.gettempdir(), tempfile.template)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    in_load = f"import tempfile; tempfile.tempdir = {str(elsewhere)!r}; tempfile.template = 'x'"
    try:
        code, lines = _refused_moving(tmp_path, capsys, monkeypatch, "rt44_tmp", in_load=in_load)
        after = (tempfile.tempdir, tempfile.template)
    finally:  # for the tests after this one, whatever happened
        tempfile.tempdir, tempfile.template = held
    assert (code, after) == (2, held), lines
    assert lines == [
        f"pipeplan: error: data 'rt44_tmp:load': the data function set tempfile.tempdir to "
        f"'{elsewhere}' (it was '{held[0]}') and set tempfile.template to 'x' (it was "
        f"'{held[1]}'); data code must leave tempfile's folder and prefix (tempfile.tempdir, "
        "tempfile.template) as it found them, as pipeplan makes its temporary files with "
        "tempfile (put back now; to make your own temporary files elsewhere, pass `dir=` to "
        "tempfile's functions)"
    ]
    assert list(elsewhere.iterdir()) == [] and not (tmp_path / "runs").exists()


# Run by the test below in a process of its own, from a folder holding the data modules
# rt44_exit (a callback registered at import) and rt44_exit2 (in `load`, with os._exit and
# logging.shutdown): each one's `pipeplan run --prepare-only` in turn, then a line of its own,
# held by a handler that logging.shutdown flushes, and the process ends as Python ends one,
# running the exit callbacks left.
EXIT_SCRIPT = """
import logging, logging.handlers, sys
import cli
codes = [cli.main(["run", "--prepare-only", "--model", "vit-digits", "--data", name + ":load",
                   "--nproc", "1", "--name", name]) for name in ("rt44_exit", "rt44_exit2")]
# Held until logging.shutdown, logging's own exit callback, flushes it as the process ends.
held = logging.handlers.MemoryHandler(100, target=logging.StreamHandler(sys.stdout))
logging.getLogger("rt44").addHandler(held)
logging.getLogger("rt44").warning("LAST LINE %s", codes)
"""


@pytest.mark.timeout(60)
def test_data_code_that_registers_exit_callbacks_is_refused_and_they_are_taken_off(tmp_path):
    """Found by the forty-fourth round: a `load` calling `atexit.register(print, …)` printed
    its line after `pipeplan run`'s summary, exit 0, and `atexit.register(os._exit, 0)` added
    a line naming pipeplan's own wrapper of os._exit. Exit callbacks the user's files
    register (at import or in `load`) are refused in one line naming them, exit 2 before the
    run folder is made, and taken off again (none runs as the process ends: no line after,
    exit 0, not the 3 of the data's `os._exit(3)`); logging's own `logging.shutdown`, which
    the data registered too, stays (`data._exit_callbacks_taken_off`). In a process of its
    own: the callbacks left run as it ends."""
    modules = {
        "rt44_exit": dict(
            at_import="import atexit\ndef bye():\n    print('EXTRA LINE')\natexit.register(bye)\n"
        ),
        "rt44_exit2": dict(
            in_load="import atexit, logging; atexit.register(logging.shutdown); "
            "atexit.register(os._exit, 3); atexit.register(print, 'EXTRA LINE')"
        ),
    }
    for name, code in modules.items():
        code = {"at_import": "", "in_load": "", "in_item": "", **code}
        (tmp_path / f"{name}.py").write_text(MOVING_MODULE.format(**code))
    root = Path(cli.__file__).resolve().parent
    path = os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))
    done = subprocess.run(
        [sys.executable, "-c", EXIT_SCRIPT], cwd=tmp_path, env={**os.environ, "PYTHONPATH": path},
        capture_output=True, text=True, timeout=50, check=False,
    )  # fmt: skip
    assert (done.returncode, done.stdout) == (0, "LAST LINE [2, 2]\n"), done
    rule = (
        "data code must not register exit callbacks (atexit.register), as pipeplan's last line "
        "and its exit status are its own (put back now; to clean up what your code makes, do "
        "so before it returns (`with tempfile.TemporaryDirectory():`))"
    )
    assert done.stderr.splitlines() == [
        f"pipeplan: error: data 'rt44_exit:load': the data module registered the exit callback "
        f"rt44_exit.bye; {rule}",
        "pipeplan: error: data 'rt44_exit2:load': the data function registered the exit "
        f"callbacks logging.shutdown, os._exit, builtins.print; {rule}",
    ]
    assert not (tmp_path / "runs").exists()


@pytest.mark.timeout(60)
def test_reading_a_librarys_names_for_the_rank_guard_says_no_warning():
    """Found as a run of module data was started under torchrun (`-m executor.launch RUN`):
    each rank printed four raw lines of `FutureWarning: torch.distributed.reduce_op is
    deprecated` (two of them named executor/data.py) once its process group had changed a
    flag of torch.distributed, as the guard read that module's objects (`_rebinds`) to tell
    its own state from a patch. Under `pipeplan run` they went to the ranks' logs."""
    import warnings

    import torch.distributed as dist

    from executor.data import _rebinds

    _rebinds.cache_clear()
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        names = _rebinds(dist)
    assert [str(w.message) for w in said] == []
    assert isinstance(names, frozenset)


@pytest.mark.timeout(60)
def test_a_profiler_set_in_c_is_kept_through_the_datas_code():
    """Found as this project's own ranks were profiled (`python -m cProfile -m executor.launch`,
    and `python -m cProfile cli.py run …`): the hooks data code may leave set were all set
    again after it ran, and `sys.setprofile` took cProfile's Profile object (what
    `sys.getprofile()` gives for a profiler set in C) for a Python function: the next call
    failed with "'Profile' object is not callable", a traceback. Only the hooks the data's
    code changed are put back; the profiler goes on profiling."""
    import cProfile
    import pstats

    from executor.data import load_data

    profiler = cProfile.Profile()
    profiler.enable()
    try:
        task = load_data("executor.demotasks:target")
        made = sum(len(task.train[i][0].shape) for i in range(3))
    finally:
        profiler.disable()
    assert made == 9  # three (1, 8, 8) images
    assert sys.getprofile() is None
    seen = {name for _, _, name in pstats.Stats(profiler).stats}
    assert "load_data" in seen and "__getitem__" in seen  # profiled after the data ran too


@pytest.mark.timeout(60)
def test_data_code_that_adds_an_audit_hook_is_refused_and_the_hook_kept_out(
    tmp_path, capsys, monkeypatch
):
    """Found by the forty-fourth round: a `load` that added an audit hook raising on
    "os.rename" (`sys.addaudithook`) ended `pipeplan run` as it wrote its records, in a
    51-line traceback, exit 1. A hook cannot be removed once added: pipeplan's own audit hook
    keeps out one that data code adds (`data._audit`), and the data is refused in one line,
    exit 2 before the run folder is made. The hook here raises only while the test lets it
    (on old code it stays in the process)."""
    import builtins

    state = builtins.__dict__.setdefault("_rt44_audit", {"on": True, "seen": 0})
    state["on"] = True
    in_load = (
        "import sys, builtins\n"
        "    def hook(event, args, state=builtins._rt44_audit):\n"
        "        if state['on'] and event == 'os.rename':\n"
        "            state['seen'] += 1\n"
        "            raise RuntimeError('no')\n"
        "    sys.addaudithook(hook)"
    )
    try:
        code, lines = _refused_moving(tmp_path, capsys, monkeypatch, "rt44_audit", in_load=in_load)
        os.rename(tmp_path / "rt44_audit.py", tmp_path / "renamed.py")  # no hook raises
    finally:
        state["on"] = False
    assert (code, state["seen"]) == (2, 0), lines
    assert lines == [
        "pipeplan: error: data 'rt44_audit:load': the data function tried to add an audit hook "
        "(sys.addaudithook; kept out); data code must not add audit hooks, which no code can "
        "remove, as pipeplan's own writes and imports raise audit events (put back now; to "
        "watch your own code, do so in a program of your own)"
    ]
    assert not (tmp_path / "runs").exists()


@pytest.mark.timeout(30)
def test_signals_timers_and_tempfile_used_and_left_as_found_are_no_change(tmp_path):
    """The forty-fourth round's holds (above) refuse a change left behind, not a use: a
    signal blocked and unblocked, a handler set and put back, a timer armed and disarmed, a
    repeating timer armed before (a sampling profiler's) left running, tempfile's first use
    (which sets `tempfile.tempdir` from None) and an exit callback a library registers are no
    change."""
    import atexit
    import tempfile

    from executor.data import _contained

    held = tempfile.tempdir
    profiler = signal.getitimer(signal.ITIMER_PROF)
    handler = signal.getsignal(signal.SIGTERM)

    def callback() -> None:  # a callable of its own, taken off below
        pass

    try:
        signal.setitimer(signal.ITIMER_PROF, 30.0, 30.0)
        tempfile.tempdir = None
        with _contained("m:load", "the data function"):
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            signal.signal(signal.SIGTERM, handler)
            signal.setitimer(signal.ITIMER_VIRTUAL, 5.0)
            signal.setitimer(signal.ITIMER_VIRTUAL, 0)
            tempfile.mkdtemp(dir=tmp_path)
            tempfile.gettempdir()
            # Registered by installed code (a library's, here code of tempfile's file).
            library = compile("atexit.register(f)", tempfile.__file__, "exec")
            exec(library, {"atexit": atexit, "f": callback})
        assert tempfile.tempdir == tempfile.gettempdir()
        assert signal.getitimer(signal.ITIMER_PROF)[1] == 30.0
    finally:
        signal.setitimer(signal.ITIMER_PROF, *profiler)
        tempfile.tempdir = held
        atexit.unregister(callback)


@pytest.mark.timeout(30)
def test_an_audit_hook_or_exit_callback_from_a_thread_of_the_data_codes_own_is_refused():
    """The forty-fourth round's audit hooks and exit callbacks (above), added from a thread
    the data code starts (which no call into it runs in): kept out and taken off all the
    same, in one refusal."""
    import atexit
    import threading

    from executor.data import BadArgumentError, _contained

    ran = []

    def hook(event, args):  # on old code it stays: harmless
        pass

    def added() -> None:
        sys.addaudithook(hook)
        atexit.register(ran.append, 1)

    try:
        with pytest.raises(BadArgumentError) as refused, _contained("m:load", "the data function"):
            thread = threading.Thread(target=added)
            thread.start()
            thread.join(10)
    finally:
        atexit.unregister(ran.append)
    assert str(refused.value).startswith(
        "data 'm:load': the data function registered the exit callback list.append and "
        "tried to add an audit hook (sys.addaudithook; kept out); "
    ), str(refused.value)


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "module, name, where",
    [
        ("re", "compile", "in_load"),
        ("subprocess", "run", "at_import"),
        ("random", "random", "in_load"),
        ("functools", "reduce", "in_load"),
        ("uuid", "uuid4", "at_import"),
        ("numpy", "asarray", "in_load"),
        ("transformers", "PreTrainedModel.save_pretrained", "in_load"),
        ("transformers.modeling_utils", "PreTrainedModel.save_pretrained", "at_import"),
    ],
)
def test_data_code_that_replaces_a_function_of_pythons_or_pipeplans_packages_is_refused(
    tmp_path, capsys, monkeypatch, module, name, where
):
    """Found by the forty-sixth round: `re.compile`, `subprocess.run`, `random.random`,
    `numpy.asarray` or transformers' `PreTrainedModel.save_pretrained` replaced by a data
    module (not among `data.KEPT_MODULES`, held at each batch) was not refused: the run then
    failed blaming the model, or at its end. The data module's import and its function are
    held wider (`data.WIDE_PACKAGES`: every module already imported of Python's library and of
    the packages pipeplan runs on, and their classes): refused in one line naming the function,
    before the run folder is made, and put back. The first name a module is imported by is
    the one said (transformers' class is `transformers.PreTrainedModel`)."""
    monkeypatch.chdir(tmp_path)
    code, put_back, lines = _replaced_by_data_code(
        tmp_path, capsys, "rt47_wide", module, name, "lambda *a: 0", where
    )
    assert (code, put_back) == (2, True), lines
    doing = "the data module" if where == "at_import" else "the data function"
    assert len(lines) == 1, lines
    assert re.match(
        f"pipeplan: error: data 'rt47_wide:load': {doing} replaced [a-z_.]*{name}; ", lines[0]
    ), lines
    assert not (tmp_path / "runs").exists()


@pytest.mark.timeout(300)
def test_a_data_module_that_uses_heavy_libraries_is_not_refused_by_the_wide_hold(
    tmp_path, monkeypatch, capsys
):
    """What the wide hold must not refuse: a data module that imports and uses libraries which
    register things in modules already imported as they load (torch's compiler registers the
    properties of its cache's classes; transformers builds, saves and loads a decoder model,
    and runs its own `__init__.py` again as it does), uses scipy's statistics, seeds Python's
    and numpy's generators, and patches a function only around its own code
    (`unittest.mock.patch`). Run alone, every one of these happens inside the hold; after
    other tests, some were done before (`test_a_librarys_own_doing_is_no_change` holds them
    whatever ran first)."""
    monkeypatch.chdir(tmp_path)
    argv = ("run", "--prepare-only", "--model", "vit-digits", "--data", "rt47_heavy:load")
    argv += ("--nproc", "1", "--name", "n")
    at_import = (
        "import random, unittest.mock, tempfile, numpy, scipy.stats, torch._inductor.codecache\n"
        "import transformers, torch.compiler._cache\n"
        "random.seed(0); numpy.random.seed(0)"
    )
    in_load = (
        "model = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=1, n_embd=8, "
        "n_head=2, n_positions=8, vocab_size=16)); "
        "d = tempfile.mkdtemp(dir='.'); model.save_pretrained(d); "
        "transformers.AutoModelForCausalLM.from_pretrained(d); "
        "numpy.asarray(scipy.stats.norm.rvs(size=3)); "
        'exec(\'with unittest.mock.patch("random.random", lambda: 0.5): '
        "assert random.random() == 0.5')"
    )
    code = _run_moving(tmp_path, "rt47_heavy", *argv, at_import=at_import, in_load=in_load)
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 0, lines
    assert not [line for line in lines if "error" in line], lines


def test_a_librarys_own_doing_is_no_change(tmp_path):
    """What the wide hold and the import system's hold let pass as a library's own doing, each
    against its refused twin: a property its own package's code made, put over one of its
    classes' (torch's compiler cache), against the user's function, another of the library's
    functions (its code made for another name) or one of its held functions moved into the
    place; a module's file run again by its package and put in
    its place in sys.modules (transformers' `direct_transformers_import`), against another
    module of that name."""
    import importlib.util
    import json.decoder

    from torch.compiler import _cache

    from executor.data import BadArgumentError, _made_by_its_library, import_system_kept

    class Artifact(_cache.CacheArtifact):  # what torch's compiler registers as it is imported
        @staticmethod
        def type():
            return "rt63"

    _cache.CacheArtifactFactory.register(Artifact)  # a closure's property on CacheInfo
    made = vars(_cache.CacheInfo)["rt63_artifacts"]
    del _cache.CacheInfo.rt63_artifacts, _cache.CacheArtifactFactory._artifact_types["rt63"]
    name = "torch.compiler._cache.CacheInfo.inductor_artifacts"  # its stub property
    assert _made_by_its_library(name, made, there=set())
    name = "json.decoder.JSONDecoder.decode"
    assert not _made_by_its_library(name, property(lambda self: 1), there=set())  # the user's
    # The sixty-third round: another function of the library's, its code made for another name.
    assert not _made_by_its_library(name, property(json.decoder.py_scanstring), there=set())
    # The fifty-eighth round: the user's, under `functools.wraps`, which copies `__module__`
    # (a no-op in pipeplan's own check_data_facts' place trained ranks on other data).
    import functools
    import re

    @functools.wraps(re.compile)
    def wrapped(*args, **kwargs):
        return None

    assert wrapped.__module__ == "re"
    assert not _made_by_its_library("re.compile", wrapped, there=set())
    moved = json.decoder.JSONDecoder.raw_decode
    assert not _made_by_its_library(name, moved, there={id(moved)})

    (tmp_path / "rt47_again.py").write_text("VALUE = object()\n")
    spec = importlib.util.spec_from_file_location("rt47_again", tmp_path / "rt47_again.py")
    first = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(first)
    sys.modules["rt47_again"] = first
    try:
        with import_system_kept("m:load", "the data function"):
            again = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(again)
            sys.modules["rt47_again"] = again
        assert sys.modules["rt47_again"] is again
        refused = pytest.raises(BadArgumentError, match="replaced the imported module rt47_again")
        with refused, import_system_kept("m:load", "the data function"):
            sys.modules["rt47_again"] = types.ModuleType("rt47_again")
        assert sys.modules["rt47_again"] is again
    finally:
        sys.modules.pop("rt47_again", None)


def test_an_installed_function_or_a_torch_decorator_does_not_pass_a_patch_as_the_librarys():
    """Found by the fifty-ninth round: any function whose code lay in site-packages passed
    as a library's own patch, so `re.compile` or pipeplan's own `check_data_facts` replaced
    by matplotlib's `noop` was let through (a rank trained on other data, unchecked); and a
    user's no-op under `@torch.no_grad()` (a closure of torch's files) put at AdamW.step
    passed as torch's own wrapper: the run trained nothing, exit 0. An installed library's
    patch is its function under the name it replaces, defined in its own module, never over
    pipeplan's; torch's wrapper is of the function it replaces. loky's `_make_name` (the
    fifty-seventh round's sklearn import) still passes."""
    import multiprocessing.synchronize

    import joblib.externals.loky.backend  # noqa: F401  (puts loky's _make_name in place)
    import torch
    from matplotlib.testing.widgets import noop

    from executor.data import _its_own_wrapper, _made_by_its_library

    assert not _made_by_its_library("re.compile", noop, there=set())
    assert not _made_by_its_library("executor.worker.check_data_facts", noop, there=set())
    loky = vars(multiprocessing.synchronize.SemLock)["_make_name"]
    assert _made_by_its_library("multiprocessing.synchronize.SemLock._make_name", loky, set())
    namespace: dict = {}
    exec(compile("def compile(*a): pass", noop.__code__.co_filename, "exec"), namespace)
    assert not _made_by_its_library("re.compile", namespace["compile"], there=set())

    @torch.no_grad()
    def step(self, closure=None):
        return None

    old = vars(torch.optim.Adam)["step"]
    assert not _its_own_wrapper("torch.optim.Adam.step", old, step)
    # What a first optimizer does to its class's step (`Optimizer._patch_step_function`).
    hooked = torch.optim.Optimizer.profile_hook_step(old)
    assert _its_own_wrapper("torch.optim.Adam.step", old, hooked)


def test_callable_objects_forged_code_and_torch_decorators_do_not_pass_as_the_librarys():
    """Found by the sixtieth round, past the fifty-ninth's fix: an object without code of its
    own passed by the `__module__` it names (a user's callable object naming "executor.task"
    in check_data_facts' place: a rank trained on other data unchecked, exit 0; a partial at
    functools.reduce; numpy.vectorize at numpy.asarray; nn.Identity at clip_grad_norm_); a
    function made of torch's own zero_grad code naming the old step as `__wrapped__`, and
    `torch.no_grad()` around the very function it replaces, passed as torch's own wrapper
    (the runs trained nothing, exit 0); a function compiled under re's file name with the
    user's globals passed as re's."""
    import functools
    import re
    import types

    import numpy
    import torch

    from executor.data import _its_own_wrapper, _made_by_its_library

    class Check:
        __module__ = "executor.task"

        def __call__(self, *args, **kwargs):
            return None

    forged = {
        "executor.worker.check_data_facts": Check(),
        "functools.reduce": functools.partial(print),
        "numpy.asarray": numpy.vectorize(abs),
        "torch.nn.utils.clip_grad_norm_": torch.nn.Identity(),
    }
    for name, new in forged.items():
        assert not _made_by_its_library(name, new, there=set()), name
    Check.__module__ = "numpy"
    assert not _made_by_its_library("numpy.asarray", Check(), there=set())
    namespace: dict = {}
    exec(compile("def compile(*a): pass", re.__file__, "exec"), namespace)
    assert not _made_by_its_library("re.compile", namespace["compile"], there=set())

    old = vars(torch.optim.Adam)["step"]
    zero = torch.optim.Optimizer.zero_grad
    made = types.FunctionType(
        zero.__code__, zero.__globals__, "step", zero.__defaults__, zero.__closure__
    )
    made.__wrapped__ = old
    assert not _its_own_wrapper("torch.optim.Adam.step", old, made)
    for mode in (torch.no_grad, torch.enable_grad, torch.inference_mode):
        assert not _its_own_wrapper("torch.optim.Adam.step", old, mode()(old)), mode
    linear = torch.nn.functional.linear
    assert not _its_own_wrapper("torch.nn.functional.linear", linear, torch.no_grad()(linear))


SUBMODULE_IMPORT = """
import json, sys
import tokenizers
from executor.data import functions_kept
assert "tokenizers.trainers" not in sys.modules  # the Rust extension's module at the name
try:
    with functions_kept("m:load", "the data function", wide=True):
        if sys.argv[1] == "import":
            import tokenizers.trainers  # what `from transformers import AutoTokenizer` does
        else:
            tokenizers.trainers = json  # another module at the name
    print("kept")
except Exception as exc:
    print(exc)
"""


@pytest.mark.timeout(120)
@pytest.mark.parametrize("what", ["import", "replace"])
def test_a_submodule_imported_over_its_packages_name_is_the_import_s_doing(what):
    """Found by the fifty-eighth round: data code doing `from transformers import
    AutoTokenizer` trained, then its resume and export were refused ("the data function
    replaced tokenizers.trainers"): the package holds its Rust extension's module at that name
    until the Python submodule is imported over it, which Python's import does. Another
    module put there is still refused. In a fresh process, where tokenizers.trainers is not
    imported yet."""
    done = subprocess.run(
        [sys.executable, "-c", SUBMODULE_IMPORT, what], capture_output=True, text=True, timeout=100
    )
    said = done.stdout.strip().splitlines()[-1]
    if what == "import":
        assert said == "kept", done.stderr
    else:
        assert "the data function replaced tokenizers.trainers" in said, said


@pytest.mark.timeout(60)
@pytest.mark.parametrize("where", ["at_import", "in_load"])
def test_data_code_that_execs_another_program_is_refused_and_kept_out(
    tmp_path, capsys, monkeypatch, where
):
    """Found by the forty-sixth round: `os.execvp("true", ["true"])` in a data module replaced
    pipeplan's process with `true`: exit 0, nothing prepared and nothing said. pipeplan's audit
    hook keeps the exec out (`data._audit`): the code gets a RuntimeError saying so, and one
    that catches it is refused when it returns. A child the code forks may exec (a program
    started the old way): that one runs."""
    monkeypatch.chdir(tmp_path)
    argv = ("run", "--prepare-only", "--model", "vit-digits", "--data", "rt47_exec:load")
    argv += ("--nproc", "1", "--name", "n")
    if where == "at_import":
        code = {"at_import": "os.execv('/bin/true', ['true'])"}
        said = "cannot import rt47_exec: RuntimeError: data code must not replace pipeplan's "
        said += "process with '/bin/true' (os.exec*; kept out)"
    else:
        child = "pid = os.fork()\n    if pid == 0: "
        child += "os.execv('/bin/sh', ['sh', '-c', 'echo ran > child'])"
        caught = "try: os.execv('/bin/true', ['true'])\n    except RuntimeError: pass"
        code = {"in_load": f"{child}\n    os.waitpid(pid, 0)\n    {caught}"}
        said = "the data function tried to replace pipeplan's process with '/bin/true' "
        said += "(os.exec*; kept out); data code must not replace pipeplan's process"
    assert _run_moving(tmp_path, "rt47_exec", *argv, **code) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        f"pipeplan: error: data 'rt47_exec:load': {said}"
    ), lines
    assert not (tmp_path / "runs").exists()
    if where == "in_load":
        assert (tmp_path / "child").read_text() == "ran\n"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("fails", [False, True])
def test_a_data_sets_del_that_raises_is_one_warning_line(tmp_path, fails):
    """Found by the forty-sixth round: a data set whose `__del__` raised printed Python's
    "Exception ignored in: <function DS.__del__ …>" and its traceback, six lines among
    `pipeplan run`'s, exit 0. Each is one warning line (`exits.ignored_line`) while the
    command runs; after an error line, nothing (the error stays the last line). In a
    subprocess: the data sets are dropped as the command's own process goes on."""
    code = dict(
        at_import="def _del(self):\n    raise ValueError('boom in del')\nDS.__del__ = _del",
        in_load="",
        in_item="",
    )
    module = MOVING_MODULE.replace("\n{at_import}\n", "\n").replace(
        "def load(seed=0):", "{at_import}\n\ndef load(seed=0):"
    )
    (tmp_path / "rt47_del.py").write_text(module.format(**code))
    argv = ["run", "--prepare-only", "--model", "vit-digits", "--data", "rt47_del:load"]
    argv += ["--nproc", "1", "--name", "n"]
    if fails:
        argv += ["--global-batch", "1000000000000"]
    done = _pipeplan_in_a_subprocess(tmp_path, argv)
    lines = done.stderr.splitlines()
    assert done.returncode == (2 if fails else 0), lines
    assert not [line for line in lines if not line.startswith("pipeplan: ")], lines
    ignored = [line for line in lines if "ignored" in line]
    if fails:
        assert lines[-1].startswith("pipeplan: error: "), lines
    else:
        assert ignored, lines
    assert all(
        line == "pipeplan: WARNING: an exception was ignored in _del: ValueError: boom in del"
        for line in ignored
    ), ignored


@pytest.mark.timeout(120)
@pytest.mark.parametrize("fails", [False, True])
def test_what_a_thread_the_data_code_left_running_writes_is_held(tmp_path, fails):
    """Found by the forty-sixth round: a `load` that started a thread printing to sys.stderr
    every 0.2 s put 22 raw lines before pipeplan's error line. What the data code's threads
    write to the console after its call returned is held (`log.DATA_THREADS`): after a
    command that succeeded, warning lines naming the data (10 of them, then a count); after
    one that failed, nothing, the error its last line. In a subprocess: the command's own
    console."""
    code = dict(
        at_import="import sys, threading",
        in_load=(
            "threading.Thread(target=lambda: [print('THREAD-LINE', file=sys.stderr, "
            "flush=True) or time.sleep(0.02) for _ in range(1000)], daemon=True).start(); "
            "time.sleep(0.3)"
        ),
        in_item="",
    )
    (tmp_path / "rt47_thread.py").write_text(
        MOVING_MODULE.replace("import os\n", "import os, time\n", 1).format(**code)
    )
    argv = ["run", "--prepare-only", "--model", "vit-digits", "--data", "rt47_thread:load"]
    argv += ["--nproc", "1", "--name", "n"]
    if fails:
        argv += ["--global-batch", "1000000000000"]
    done = _pipeplan_in_a_subprocess(tmp_path, argv)
    lines = done.stderr.splitlines()
    assert done.returncode == (2 if fails else 0), lines
    assert not [line for line in lines if not line.startswith("pipeplan: ")], lines
    if fails:
        assert len(lines) == 1 and lines[0].startswith("pipeplan: error: "), lines
        return
    thread = "pipeplan: WARNING: data 'rt47_thread:load': a thread it started wrote: THREAD-LINE"
    assert lines.count(thread) == 10, lines
    assert re.fullmatch(
        "pipeplan: WARNING: data 'rt47_thread:load': its threads wrote [0-9,]+ more lines "
        r"\(not shown\)",
        lines[-1],
    ), lines


@pytest.mark.timeout(150)
@pytest.mark.parametrize(
    "where, doing",
    [
        ("at_import", "importing rt47_hang"),
        ("in_load", "its function load"),
        ("in_item", "reading train item 0"),
    ],
)
def test_data_code_that_hangs_in_the_launchers_checks_ends_the_command(tmp_path, where, doing):
    """Found by the forty-seventh round: a data module that slept forever at import, in `load`
    or in an item the launcher's checks read hung `pipeplan run` with nothing said, whatever
    --collective-timeout said (a rank's hung read was ended since the forty-sixth). The
    command's checks are watched (`data.watched_for_hangs`): an item or a len() that has not
    returned within the collective timeout, an import or a function within it or
    `data.LOAD_LIMIT_S` (600 s: loading a corpus may take minutes), ends it with one line
    naming the call, exit 2, and no run folder. The `pipeplan` command itself (`cli.entry`),
    in a subprocess: under the Python API the process is the caller's."""
    code = {"at_import": "", "in_load": "", "in_item": "", where: "while True: time.sleep(0.1)"}
    (tmp_path / "rt47_hang.py").write_text(
        MOVING_MODULE.replace("import os\n", "import os, time\n", 1).format(**code)
    )
    argv = ["run", "--model", "vit-digits", "--data", "rt47_hang:load", "--nproc", "1"]
    argv += ["--collective-timeout", "2", "--name", "n"]
    # The import and the function may take 600 s (`data.LOAD_LIMIT_S`), here 3: the
    # `pipeplan` command as its entry runs it, the limit set first.
    first = "from executor import data; data.LOAD_LIMIT_S = 3.0"
    done = _pipeplan_in_a_subprocess(tmp_path, argv, first)
    if where == "in_item":  # an item: its set's name, and the collective timeout
        said = (
            f"data 'moving': {doing} did not return within the collective timeout of 2 s "
            "(hung; --collective-timeout sets how long a read may take)"
        )
    else:
        said = (
            f"data 'rt47_hang:load': {doing} did not return within 3 s (hung; a data module's "
            "import or function may take the collective timeout or 3 s, whichever is longer)"
        )
    assert (done.returncode, done.stderr.splitlines()) == (2, [f"pipeplan: error: {said}"])
    assert not (tmp_path / "runs").exists()


@pytest.mark.timeout(30)
def test_data_code_that_sets_the_signal_wakeup_fd_is_refused_and_gc_settings_put_back():
    """Found by the fifty-fifth round: a `load` that set a signal wakeup fd (a pipe whose
    reader it closed) had a later Ctrl-C print Python's "Exception ignored when trying to
    write to the signal wakeup fd" and a warning before `pipeplan: interrupted`: refused in one
    line and put back. One that turned the collector off or set its thresholds to (1, 1, 1)
    left the launcher and every rank so (cyclic garbage never freed, or a run at half its
    speed): put back without a word, as a thread count is."""
    import gc

    from executor.data import BadArgumentError, _contained

    read, write = os.pipe()
    os.set_blocking(write, False)
    collector = gc.isenabled(), gc.get_threshold(), gc.get_debug()
    try:
        with pytest.raises(BadArgumentError) as refused, _contained("m:load", "the data function"):
            signal.set_wakeup_fd(write)
        assert signal.set_wakeup_fd(-1) == -1  # put back (and read so)
        assert str(refused.value).startswith(
            f"data 'm:load': the data function set the signal wakeup fd to {write} "
            "(signal.set_wakeup_fd); data code must leave the process's signal handlers, mask "
            "and wakeup fd as it found them"
        ), str(refused.value)
        with _contained("m:load", "the data function"):
            gc.disable()
            gc.set_threshold(1, 1, 1)
            gc.set_debug(gc.DEBUG_STATS)  # the fifty-sixth round: 1,000 lines on stderr
        assert (gc.isenabled(), gc.get_threshold(), gc.get_debug()) == collector
    finally:
        signal.set_wakeup_fd(-1)
        os.close(read)
        os.close(write)
        gc.enable() if collector[0] else gc.disable()
        gc.set_threshold(*collector[1])
        gc.set_debug(collector[2])


def test_nothing_new_passes_over_pipeplans_own_names_nor_a_held_method_moved():
    """Found by the sixty-first round: a bound method of pipeplan's own class
    (`executor.faults.AgentStops().__exit__`, its code pipeplan's) in pipeplan's own
    check_data_facts' place passed the wide check as the library's doing (a rank trained on
    other data unchecked, exit 0), as did torch's `nn.Module().zero_grad` at stage_backward.
    No library patches pipeplan: whatever is put over its names is refused, a closure of
    pipeplan's around the very function too; a method bound to a held class is held code
    moved, never made."""
    import torch.distributed.pipelining.stage as stage

    import executor.faults
    import executor.worker
    import pipeplan.log
    from executor.data import BadArgumentError, _its_own_wrapper, functions_kept
    from pipeplan.api import _as_the_command_line

    for owner, key, new in (
        (executor.worker, "check_data_facts", executor.faults.AgentStops().__exit__),
        (stage, "stage_backward", torch.nn.Module().zero_grad),
        (stage, "stage_backward", torch.autograd.Function.apply),
    ):
        old = getattr(owner, key)
        refused = pytest.raises(BadArgumentError, match=f"replaced {owner.__name__}.{key};")
        with refused, functions_kept("m:load", "the data function", wide=True):
            setattr(owner, key, new)
        assert getattr(owner, key) is old
    old = pipeplan.log.write_line
    assert not _its_own_wrapper("pipeplan.log.write_line", old, _as_the_command_line(old))


def test_a_library_wrapper_around_the_users_function_is_not_the_librarys():
    """Found by the sixty-first round: in the wide check, a closure of torch's around a
    user's no-op (`torch.no_grad()`, `torch._dynamo.disable`, `torch.compiler.disable`,
    torch._tensor's type-error wrapper) at stage_backward passed as torch's own doing, as did
    objects without code wrapping it (`functools.lru_cache`, `functools.cache`,
    `np.vectorize`), an nn.Identity given the name, and an nn.Module whose `forward` was set
    on it: the runs trained nothing, exit 0. What a wrapper wraps (its `__wrapped__`, its
    closure, an object's own functions) must be the library's too; torch's wrapper around
    torch's own function still is."""
    import functools

    import numpy as np
    import torch.distributed.pipelining.stage as stage

    from executor.data import BadArgumentError, functions_kept

    def mine(*args, **kwargs):
        return None

    def named(new):
        new.__name__ = "stage_backward"
        return new

    def module_around():
        module = named(torch.nn.Module())
        module.forward = mine
        return module

    wrappers = {
        "no_grad": lambda: torch.no_grad()(mine),
        "enable_grad": lambda: torch.enable_grad()(mine),
        "dynamo": lambda: torch._dynamo.disable(mine),
        "compiler": lambda: torch.compiler.disable(mine),
        "type error": lambda: (
            torch._tensor._handle_torch_function_and_wrap_type_error_to_not_implemented(mine)
        ),
        "lru_cache": lambda: functools.lru_cache(None)(functools.wraps(stage.stage_backward)(mine)),
        "cache": lambda: functools.cache(functools.wraps(stage.stage_backward)(mine)),
        "vectorize": lambda: named(np.vectorize(mine)),
        "identity": lambda: named(torch.nn.Identity()),
        "module": module_around,
    }
    old = stage.stage_backward
    for what, make in wrappers.items():
        new = make()
        refused = pytest.raises(BadArgumentError, match=r"replaced torch\.distributed\.pipelining")
        with refused, functions_kept("m:load", "the data function", wide=True):
            stage.stage_backward = new
        assert stage.stage_backward is old, what
    try:
        with functions_kept("m:load", "the data function", wide=True):
            stage.stage_backward = torch._dynamo.disable(old)  # torch's, around torch's own
    finally:
        stage.stage_backward = old


def test_torchs_autocast_decorators_over_the_function_they_replace_are_not_its_wrapper():
    """Found by the sixty-first round: `F.linear = torch.autocast("cpu",
    dtype=torch.bfloat16)(F.linear)` in a `load` passed as torch's own wrapper, and the fp32
    run computed every linear layer in bfloat16, exit 0; so did `torch.amp.custom_fwd` over
    F.dropout and autocast over Linear.forward and AdamW.step. Like the grad-mode decorators,
    torch's autocast ones are no library's runtime wrapper, in the narrow check and in the
    wide one (a grad mode over stage_backward itself)."""
    import torch.distributed.pipelining.stage as stage
    import torch.nn.functional as F

    from executor.data import BadArgumentError, _its_own_wrapper, functions_kept

    bf16 = torch.bfloat16
    for name, old, new in (
        ("torch.nn.functional.linear", F.linear, torch.autocast("cpu", dtype=bf16)(F.linear)),
        (
            "torch.nn.functional.dropout",
            F.dropout,
            torch.amp.custom_fwd(F.dropout, device_type="cpu", cast_inputs=bf16),
        ),
        (
            "torch.nn.Linear.forward",
            torch.nn.Linear.forward,
            torch.autocast("cpu", dtype=bf16)(torch.nn.Linear.forward),
        ),
    ):
        assert not _its_own_wrapper(name, old, new), name
    old = stage.stage_backward
    for decorate in (torch.no_grad(), torch.autocast("cpu", dtype=bf16)):
        refused = pytest.raises(BadArgumentError, match=r"replaced torch\.distributed\.pipelining")
        with refused, functions_kept("m:load", "the data function", wide=True):
            stage.stage_backward = decorate(old)
        assert stage.stage_backward is old


def test_torchs_global_hooks_left_registered_by_data_code_are_refused_and_taken_off():
    """Found by the sixty-first round: a `load` whose
    `torch.nn.modules.module.register_module_forward_hook` zeroed every nn.Linear's output,
    or whose `register_optimizer_step_pre_hook` zeroed the gradients before each step,
    trained nothing, exit 0: no check held torch's global hooks. Left registered, in the
    data's function or as a batch is read, each is refused in one line naming the kind and
    taken off; one removed before returning is no change."""
    import warnings

    from torch.nn.modules import module
    from torch.optim import optimizer

    from executor.data import BadArgumentError, _contained, batch_rows

    def zero(layer, args, output):
        return output * 0

    refused = pytest.raises(BadArgumentError, match=r"registered \(register_module_forward_hook\)")
    with refused, warnings.catch_warnings(), _contained("m:load", "the data function"):
        warnings.simplefilter("ignore")
        module.register_module_forward_hook(zero)
    assert not module._global_forward_hooks

    class Items:
        def __getitem__(self, index):
            optimizer.register_optimizer_step_pre_hook(lambda opt, args, kwargs: None)
            return torch.zeros(2), torch.tensor(0)

    refused = pytest.raises(BadArgumentError, match=r"\(register_optimizer_step_pre_hook\)")
    with refused, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        batch_rows(Items(), [3], 0, "m:load", "train")
    assert not optimizer._global_optimizer_pre_hooks
    with _contained("m:load", "the data function"):
        module.register_module_forward_hook(zero).remove()


def test_a_module_the_data_code_imports_and_patches_in_one_step_is_refused_and_unloaded():
    """Found by the sixty-first round: `import safetensors.torch as st; st.save_file =
    mine` at a data module's top, safetensors.torch first imported there, was compared with
    nothing (it was not imported when the hold began), and the run exported a model of
    all-zero tensors, exit 0. A module of WIDE_PACKAGES imported in the step and holding the
    user's code is refused in one line naming it, and unloaded to be imported afresh (what
    it held before was never seen); one only imported, holding its own and other libraries'
    functions, is no change. colorsys stands for it: a module no test imports."""
    import importlib

    from executor.data import BadArgumentError, functions_kept

    def mine(r, g, b):
        return (0.0, 0.0, 0.0)

    held = sys.modules.pop("colorsys", None)
    try:
        with functions_kept("m:load", "the data module", wide=True):
            importlib.import_module("colorsys")
        assert "colorsys" in sys.modules
        sys.modules.pop("colorsys")
        refused = pytest.raises(
            BadArgumentError,
            match=r"the data module replaced colorsys\.rgb_to_hsv with its own code, in colorsys, "
            r"which it imported itself; .* \(colorsys unloaded now, to be imported afresh; ",
        )
        with refused, functions_kept("m:load", "the data module", wide=True):
            importlib.import_module("colorsys").rgb_to_hsv = mine
        assert "colorsys" not in sys.modules
        assert importlib.import_module("colorsys").rgb_to_hsv is not mine
    finally:
        if held is not None:
            sys.modules["colorsys"] = held


def test_the_pipeline_and_pipeplans_rank_modules_are_held_as_items_are_read():
    """Found by the sixty-first round: as items are read only KEPT_MODULES are held, and
    they lacked torch.distributed.pipelining's, which every rank trains with: a
    `__getitem__` setting `stage_backward` to a plain no-op trained nothing, exit 0. The
    pipeline's stage, schedules and backward, and pipeplan's own rank modules whose functions
    a rank looks up as it trains, are held in a batch read too."""
    import warnings

    import torch.distributed.pipelining.schedules as schedules
    import torch.distributed.pipelining.stage as stage

    import executor.worker
    from executor.data import BadArgumentError, batch_rows

    def mine(*args, **kwargs):
        return None

    for owner, key in (
        (stage, "stage_backward"),
        (schedules, "_batch_p2p"),
        (executor.worker, "check_data_facts"),
    ):
        old = getattr(owner, key)

        class Items:
            def __getitem__(self, index):
                setattr(owner, key, mine)  # noqa: B023  (read within the loop's turn)
                return torch.zeros(2), torch.tensor(0)

        refused = pytest.raises(BadArgumentError, match=f"replaced {owner.__name__}.{key};")
        with refused, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            batch_rows(Items(), [3], 0, "m:load", "train")
        assert getattr(owner, key) is old


def test_torchs_compiled_wrapper_around_the_old_function_with_the_users_backend_is_refused():
    """Found by the sixty-second round: `torch.compile(_single_tensor_adam, backend=mine)`
    passed as torch's own wrapper of the function it replaces (its `__wrapped__` and a cell
    are the old one), at 323 held names, as a `load` did it and as an item was read; the
    user's backend ran every step's graph on copies, and AdamW applied no step, exit 0.
    All a wrapper's closure holds is the library's or the old function; torch's own
    wrappers (a first optimizer's `profile_hook_step`, `_disable_dynamo`) still are."""
    import warnings

    import torch.optim.adam as adam

    from executor.data import BadArgumentError, _its_own_wrapper, functions_kept

    def backend(graph, example_inputs):
        return graph

    old = adam._single_tensor_adam
    new = torch.compile(old, backend=backend)
    assert not _its_own_wrapper("torch.optim.adam._single_tensor_adam", old, new)
    step = vars(torch.optim.Adam)["step"]
    compiled_step = torch.compile(step, backend=backend)
    assert not _its_own_wrapper("torch.optim.Adam.step", step, compiled_step)
    for wide in (False, True):
        refused = pytest.raises(BadArgumentError, match=r"replaced torch\.optim\.adam\._single_")
        with refused, warnings.catch_warnings(), functions_kept("m:load", "x", wide=wide):
            warnings.simplefilter("ignore")
            adam._single_tensor_adam = new
        assert adam._single_tensor_adam is old
    hooked = torch.optim.Optimizer.profile_hook_step(step)
    assert _its_own_wrapper("torch.optim.Adam.step", step, hooked)
    seed = torch.random.manual_seed
    assert _its_own_wrapper("torch.manual_seed", seed, torch._disable_dynamo(seed))


def test_a_closure_of_torchs_that_holds_not_the_function_it_replaces_is_not_its_wrapper():
    """Found by the sixty-second round: any closure torch's code made (`<locals>` in its
    name) passed as torch's own wrapper at every held name, whatever it did:
    `torch.optim.AdamW.step = torch.set_vital` (torch's `lambda *args: None`) in a `load`
    trained nothing, exit 0. Such a closure passes only where it holds the function it
    replaces (torch._dynamo's `patched_init` holds nn.Module's `__init__`: kept, above)."""
    import warnings

    import torch.distributed.pipelining._backward as backward
    import torch.optim.adam as adam

    from executor.data import BadArgumentError, _its_own_wrapper, functions_kept

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        vital = torch.set_vital
    assert "<locals>" in vital.__qualname__
    step = vars(torch.optim.Adam)["step"]
    assert not _its_own_wrapper("torch.optim.AdamW.step", step, vital)
    for wide in (False, True):
        for owner, key in (
            (adam, "_single_tensor_adam"),
            (backward, "stage_backward"),
            (torch.nn.functional, "dropout"),
            (torch.optim.AdamW, "step"),
        ):
            old = vars(owner).get(key)
            refused = pytest.raises(BadArgumentError, match=rf"replaced [\w.]+\.{key};")
            with refused, functions_kept("m:load", "x", wide=wide):
                setattr(owner, key, vital)
            assert vars(owner).get(key) is old, (wide, key)


def test_a_module_the_data_code_imports_holding_its_function_wrapped_is_refused():
    """Found by the sixty-second round: of a module first imported in the step, only a plain
    function of the user's (or an object of the user's class) was told the user's;
    `st.save_file = functools.partial(mine)` exported an all-zero model, exit 0, as
    `lru_cache`, `torch.no_grad()`, `torch._dynamo.disable`, `np.vectorize`, a bound method
    of the user's class or `staticmethod` around it passed. What a name holds is followed
    as `_wrapped_by` follows it, and a layer's hooks and submodules too, and the user's code
    found within is refused (colorsys, as above, unloaded)."""
    import functools
    import importlib

    import numpy as np

    from executor.data import BadArgumentError, functions_kept

    def mine(r, g, b):
        return (0.0, 0.0, 0.0)

    class Mine:
        def convert(self, r, g, b):
            return (0.0, 0.0, 0.0)

    def layer(submodule):  # torch's own layer, its hook or its submodule's the user's
        outer = torch.nn.Identity()
        hooked = torch.nn.Identity() if submodule else outer
        hooked.register_forward_hook(lambda module, args, out: mine(*args))
        if submodule:
            outer.inner = hooked
        return outer

    wrappers = {
        "partial": lambda: functools.partial(mine),
        "lru_cache": lambda: functools.lru_cache(mine),
        "no_grad": lambda: torch.no_grad()(mine),
        "dynamo": lambda: torch._dynamo.disable(mine),
        "vectorize": lambda: np.vectorize(mine),
        "method": lambda: Mine().convert,
        "staticmethod": lambda: staticmethod(mine),
        "twice": lambda: functools.partial(functools.lru_cache(mine)),
        "hooked layer": lambda: layer(submodule=False),
        "hooked submodule": lambda: layer(submodule=True),
    }
    with functions_kept("m:load", "the data module", wide=True):
        pass  # the first hold imports KEPT_MODULES, colorsys among what they import
    held = sys.modules.pop("colorsys", None)
    try:
        for what, make in wrappers.items():
            refused = pytest.raises(BadArgumentError, match=r"replaced colorsys\.rgb_to_hsv with")
            with refused, functions_kept("m:load", "the data module", wide=True):
                importlib.import_module("colorsys").rgb_to_hsv = make()
            assert "colorsys" not in sys.modules, what
    finally:
        sys.modules.pop("colorsys", None)
        if held is not None:
            sys.modules["colorsys"] = held


def test_a_layer_put_in_a_held_names_place_is_the_users_whatever_it_holds():
    """Found by the sixty-second round: a named nn.Module holding one library function in
    its `__dict__` passed as torch's own at a held name, its hooks and submodules never
    looked at: `torch.nn.modules.linear.F` replaced in a `load` by a named nn.Identity whose
    submodule's hooks computed `F.linear` with detached weights left every nn.Linear
    untrained, exit 0. No library puts a layer in another's place: one at a held name, or
    within what a wrapper there holds, is refused and put back."""
    import torch.distributed.pipelining.microbatch as microbatch
    import torch.nn.modules.linear as linear

    from executor.data import BadArgumentError, _only_the_librarys, functions_kept

    def layer(name):
        outer, inner = torch.nn.Identity(), torch.nn.Identity()
        inner.register_forward_hook(lambda module, args, out: "USER")
        outer.linear = inner  # a submodule, in outer._modules
        outer.helper = torch.nn.functional.relu  # a library function in outer.__dict__
        outer.__name__ = name
        return outer

    for owner, key in ((linear, "F"), (microbatch, "merge_chunks")):
        old = getattr(owner, key)
        refused = pytest.raises(BadArgumentError, match=rf"replaced {owner.__name__}\.{key};")
        with refused, functions_kept("m:load", "the data function", wide=True):
            setattr(owner, key, layer(key))
        assert getattr(owner, key) is old
    name = "torch.distributed.pipelining.microbatch.merge_chunks"
    assert not _only_the_librarys(name, [layer("merge_chunks")], 8, set())


def test_an_object_naming_a_torch_functions_code_as_its_own_is_not_torchs():
    """Found while fixing the sixty-second round's wrappers: an object of the user's class
    (its `__call__` a no-op) given profile_hook_step's `__code__`, `__globals__` and
    `__qualname__`, a cell holding the old function and `__wrapped__`, passed as torch's own
    wrapper, and at a wide name one naming a torch function as its `fget` as the library's
    doing. Only a function (a property's, a method's) has its code."""
    import torch.optim.adam as adam

    from executor.data import _its_own_wrapper, _made_by_its_library

    class Forged:
        def __call__(self, *args, **kwargs):
            return None

    old = adam._single_tensor_adam
    hooked = torch.optim.Optimizer.profile_hook_step(old)
    forged = Forged()
    forged.__wrapped__, forged.__code__ = old, hooked.__code__
    forged.__globals__, forged.__qualname__ = hooked.__globals__, hooked.__qualname__
    forged.__closure__ = hooked.__closure__
    name = "torch.optim.adam._single_tensor_adam"
    assert _its_own_wrapper(name, old, hooked)
    assert not _its_own_wrapper(name, old, forged)
    assert not _made_by_its_library(name, forged, there=set())
    getter = Forged()
    getter.fget = old
    assert not _made_by_its_library(name, getter, there=set())


@pytest.mark.parametrize(
    "module, kind, key, source",
    [
        ("transformers.activations", "GELUActivation", "forward", "LinearActivation.forward"),
        ("re", "", "compile", "escape"),
        ("torch.nn.init", "", "normal_", "zeros_"),
        (
            "transformers.models.bert.modeling_bert",
            "BertIntermediate",
            "forward",
            "BertPooler.forward",
        ),
    ],
)
def test_a_function_made_of_another_library_functions_code_is_not_the_librarys(
    module, kind, key, source
):
    """Found by the sixty-third round: a new function made of another function's code of the
    same package (`types.FunctionType(LinearActivation.forward.__code__, …, "forward")`,
    `__qualname__` set to the name's) passed the wide check as the library's own: at
    GELUActivation.forward every GELU was the identity, exit 0; re.escape's code at
    re.compile, zeros_' at normal_ too. A function the library puts at a held name has code
    made for that name (its `co_qualname`, of that module): the forged one is refused and put
    back; the held one made anew of its own code passes."""
    import importlib

    from executor.data import BadArgumentError, functions_kept

    home = importlib.import_module(module)
    held = getattr(home, kind) if kind else home
    old, donor = vars(held)[key], home
    for part in source.split("."):
        donor = getattr(donor, part)

    def made_of(function):
        made = types.FunctionType(function.__code__, function.__globals__, key)
        made.__defaults__, made.__qualname__ = function.__defaults__, old.__qualname__
        return made

    name = re.escape(".".join(part for part in (module, kind, key) if part))
    try:
        refused = pytest.raises(BadArgumentError, match=f"replaced {name};")
        with refused, functions_kept("m:load", "the data function", wide=True):
            setattr(held, key, made_of(donor))
        assert vars(held)[key] is old
        with functions_kept("m:load", "the data function", wide=True):
            setattr(held, key, made_of(old))
        assert vars(held)[key] is not old
    finally:
        setattr(held, key, old)


def test_what_a_rank_trains_and_writes_with_is_held_to_its_start():
    """Found by the sixty-second round: only KEPT_MODULES are held as items are read, so a
    `__getitem__` replacing `pipeplan.precision.compute` trained an fp32 run in bfloat16,
    `executor.checkpoint._write` wrote an all-zero checkpoint, `torch._C._nn`'s cross entropy
    trained towards class 0, and a table of plain values (`executor.parallel.SCHEDULES`,
    json's default encoder) trained nothing or rewrote run.jsonl, each exit 0. A rank now
    holds pipeplan's modules and tables, torch's layers and pipeline and json from its start
    (`rank_held`), compared at each epoch's end and before each write (`check_rank_held`)."""
    import json

    import torch.nn.modules.linear as linear

    import executor.checkpoint
    import executor.parallel
    import executor.worker
    import pipeplan.precision
    from executor.data import BadArgumentError, check_rank_held, rank_held

    def mine(*args, **kwargs):
        return None

    cases = [
        (pipeplan.precision, "compute", mine),
        (executor.checkpoint, "_write", mine),
        (torch._C._nn, "cross_entropy_loss", mine),
        (linear, "F", types.SimpleNamespace(linear=mine)),
        (executor.worker, "RECALIBRATE_AFTER_STEPS", 10**9),  # a plain value of pipeplan's
        (json, "_default_encoder", json.JSONEncoder(indent=1)),
        (executor.parallel.SCHEDULES, "1f1b", object),  # a table's entry
        (pipeplan.precision.BOUNDARY_DTYPE, "bf16", torch.float16),
        (vars(json._default_encoder), "encode", mine),  # the encoder's own attribute
    ]
    held = rank_held()
    when = "while this rank trained (the checkpoint of step 3 is not written)"
    check_rank_held("m:load", held, when)  # nothing changed: passes
    for owner, key, value in cases:
        table = isinstance(owner, dict)
        old = owner.get(key, mine) if table else getattr(owner, key)
        name = {
            id(executor.parallel.SCHEDULES): "executor.parallel.SCHEDULES",
            id(pipeplan.precision.BOUNDARY_DTYPE): "pipeplan.precision.BOUNDARY_DTYPE",
            id(vars(json._default_encoder)): "json._default_encoder",
        }.get(id(owner), f"{getattr(owner, '__name__', '')}.{key}")
        said = (
            f"data 'm:load': its code replaced or changed {name} while this rank trained "
            r"\(the checkpoint of step 3 is not written\); data code must leave pipeplan's "
        )
        try:
            if table:
                owner[key] = value
            else:
                setattr(owner, key, value)
            with pytest.raises(BadArgumentError, match=said):
                check_rank_held("m:load", held, when)
        finally:
            if table and old is mine:
                del owner[key]
            elif table:
                owner[key] = old
            else:
                setattr(owner, key, old)
    check_rank_held("m:load", held, "")  # all put back: passes again


def test_the_model_and_the_libraries_a_rank_writes_with_are_held_to_its_start():
    """Found by the sixty-third round: a `__getitem__` could replace what lies outside
    pipeplan's and torch's modules for the whole run: `GELUActivation.forward` set to zeros
    trained BERT without its activations, `modeling_utils.safe_save_file` exported an
    all-zero model and `pydantic.BaseModel.model_dump` recorded every loss as 0.5, each exit
    0. A rank now also holds its model's transformers modules, transformers' activations and
    bases, safetensors and pydantic's BaseModel from its start (`rank_held`)."""
    import pydantic
    import safetensors.torch
    import transformers.activations
    import transformers.modeling_utils
    import transformers.models.bert.modeling_bert as bert

    from executor.data import BadArgumentError, check_rank_held, rank_held

    def mine(*args, **kwargs):
        return None

    cases = [
        (transformers.activations.GELUActivation, "forward"),
        (transformers.modeling_utils, "safe_save_file"),
        (transformers.modeling_utils.PreTrainedModel, "save_pretrained"),
        (bert.BertSelfAttention, "forward"),  # the model's own module
        (safetensors.torch, "save_file"),
        (pydantic.BaseModel, "model_dump"),
    ]
    held = rank_held(models.model_modules("bert-synth"))
    when = "as this rank read a training batch (it is not trained on)"
    check_rank_held("m:load", held, when)  # nothing changed: passes
    for owner, key in cases:
        old = vars(owner)[key]
        name = f"{owner.__module__}.{owner.__qualname__}" if isinstance(owner, type) else ""
        said = (
            f"data 'm:load': its code replaced or changed {name or owner.__name__}.{key} as "
            r"this rank read a training batch \(it is not trained on\); data code must leave "
        )
        try:
            setattr(owner, key, mine)
            with pytest.raises(BadArgumentError, match=said):
                check_rank_held("m:load", held, when)
        finally:
            setattr(owner, key, old)
    check_rank_held("m:load", held, "")  # all put back: passes again


def test_a_write_a_data_thread_patches_as_it_runs_is_compared_before_it_is_published(
    tmp_path, monkeypatch
):
    """Found by the sixty-sixth round: the rank guard compared before a checkpoint and the
    model were written, not after; a thread the data code left running that replaced
    torch.save (or safetensors' `_flatten_as_ptr`) once the write had begun wrote an
    all-zero checkpoint, checksummed as good, or model/, exit 0. The guard now runs again
    once the files are written, before they are published: refused, the temporary folder
    gone, the previous checkpoint and model/ as they were."""
    import safetensors.torch
    from test_checkpoint import _manifest

    from executor import checkpoint
    from executor.data import BadArgumentError, check_rank_held, rank_held
    from executor.task import save_model

    def zeroed(value):
        return {key: torch.zeros_like(tensor) for key, tensor in value.items()}

    def guard(what):
        """The rank's guard (`Trainer.check_held`) of what holds now, as it last compared."""
        held = rank_held(models.model_modules("bert-synth"))
        return lambda: check_rank_held("m:load", held, f"while this rank trained ({what})")

    def race(owner, key, function):
        """`owner.key` replaced by `function` as its first call begins (the thread's patch,
        after the guard's compare before the write), put back at the test's end."""

        def first(value, *args, **kwargs):
            setattr(owner, key, function)
            return function(value, *args, **kwargs)

        monkeypatch.setattr(owner, key, first)

    save, flatten = torch.save, safetensors.torch._flatten_as_ptr
    seq = models.build("bert-synth")
    weights = {"model.pt": {"w": torch.ones(4)}}
    unwritten = "the checkpoint of step {} is not written"
    checkpoint._write(tmp_path, weights, _manifest(2), guard(unwritten.format(2)))  # unchanged
    save_model(seq, tmp_path, check=guard("the trained model is not written"))
    before = {path: path.read_bytes() for path in sorted(tmp_path.rglob("*")) if path.is_file()}

    race(torch, "save", lambda value, path: save(zeroed(value), path))
    check = guard(unwritten.format(4))
    check()  # the compare before the write passes
    said = r"replaced or changed torch\.save while this rank trained \(the checkpoint of step 4 "
    with pytest.raises(BadArgumentError, match=said):
        checkpoint._write(tmp_path, weights, _manifest(4), check)
    race(
        safetensors.torch, "_flatten_as_ptr", lambda value, *a, **k: flatten(zeroed(value), *a, **k)
    )
    check = guard("the trained model is not written")
    check()
    said = r"changed safetensors\.torch\._flatten_as_ptr while this rank trained \(the trained "
    with pytest.raises(BadArgumentError, match=said):
        save_model(seq, tmp_path, check=check)
    after = {path: path.read_bytes() for path in sorted(tmp_path.rglob("*")) if path.is_file()}
    assert after == before  # no `.tmp-step-4/`, no export folder; step-2 and model/ unchanged
    assert (tmp_path / "checkpoints" / "latest").read_text() == "step-2\n"
    # Put back, a resumed run's model replaces the one before once written and compared.
    monkeypatch.undo()
    with torch.no_grad():
        next(seq.layers.parameters()).add_(1.0)
    save_model(seq, tmp_path, check=guard("the trained model is not written"))
    model = sorted((tmp_path / "model").iterdir())
    assert model == sorted(path for path in before if path.parent.name == "model")
    assert [path.read_bytes() == before[path] for path in model].count(False) == 1  # weights


def _refused_naming(held, when: str, named: str, leave: str = "data code must leave ") -> str:
    """`check_rank_held`'s one line for a change the rank's holds name, said as the data's:
    what it names (`named`) and what data code must leave (`leave`); the line, for more."""
    from executor.data import BadArgumentError, check_rank_held

    with pytest.raises(BadArgumentError) as caught:
        check_rank_held("m:load", held, when)
    said = str(caught.value)
    assert said.startswith("data 'm:load': its code replaced or changed "), said
    assert named in said and f"{when}; {leave}" in said, said
    return said


@pytest.mark.parametrize(
    "case",
    [
        "attention registered",
        "attention set",
        "mask registered",
        "activation table",
        "sdpa flag",
        "sdpa function",
        "torch._VF",
        "torch._C",
        "generation config",
        "hub's save",
        "a new attention name",
    ],
)
def test_what_a_models_forward_and_its_save_look_up_at_each_call_is_held(case):
    """Found by the sixty-fourth round: a rank held the modules of transformers' attention
    and mask tables but not what the tables map to, nor torch._VF, nor what save_pretrained
    writes with, so a `__getitem__`'s `AttentionInterface.register("sdpa", zeros)` trained
    BERT with no attention, `AttentionMaskInterface.register("sdpa", all_true)` GPT-2 with a
    non-causal mask, `torch._VF.dropout = identity` BERT without dropout, and
    `GenerationConfig.to_json_string` replaced wrote model/generation_config.json with other
    token ids, each exit 0. The libraries' tables are now held by their entries (a name
    added, as a user's own attention, is no change), their flags, and the modules a
    model's forward and its save look up at each call (`rank_held`)."""
    import huggingface_hub.serialization._torch as hub_torch
    import transformers.activations as activations
    import transformers.integrations.sdpa_attention as sdpa
    import transformers.masking_utils as masking
    import transformers.modeling_utils as modeling
    from transformers.generation.configuration_utils import GenerationConfig

    from executor.data import check_rank_held, rank_held

    def mine(*args, **kwargs):
        return None

    attention = modeling.AttentionInterface._global_mapping
    local = vars(modeling.ALL_ATTENTION_FUNCTIONS)["_local_mapping"]
    # What the `__getitem__` changes (a table, or a module's or class's name), to what, and
    # the name the refusal gives (None: no change).
    owner, key, value, named = {
        "attention registered": (
            attention, "sdpa", mine,
            "transformers.modeling_utils.AttentionInterface._global_mapping",
        ),
        "attention set": (
            local, "sdpa", mine, "transformers.modeling_utils.ALL_ATTENTION_FUNCTIONS"
        ),
        "mask registered": (
            masking.AttentionMaskInterface._global_mapping, "sdpa", mine,
            "transformers.masking_utils.AttentionMaskInterface._global_mapping",
        ),
        "activation table": (
            activations.ACT2CLS, "gelu", torch.nn.ReLU, "transformers.activations.ACT2CLS"
        ),
        "sdpa flag": (
            sdpa, "_is_torch_npu_available", True,
            "transformers.integrations.sdpa_attention._is_torch_npu_available",
        ),
        "sdpa function": (
            sdpa, "use_gqa_in_sdpa", mine,
            "transformers.integrations.sdpa_attention.use_gqa_in_sdpa",
        ),
        "torch._VF": (torch._VF, "dropout", mine, "torch._VF.dropout"),  # over its __getattr__
        "torch._C": (torch._C, "_get_tracing_state", mine, "torch._C._get_tracing_state"),
        "generation config": (
            GenerationConfig, "to_json_string", mine,
            "transformers.generation.configuration_utils.GenerationConfig.to_json_string",
        ),
        "hub's save": (
            hub_torch, "save_torch_state_dict", mine,
            "huggingface_hub.serialization._torch.save_torch_state_dict",
        ),
        "a new attention name": (attention, "mine", mine, None),
    }[case]  # fmt: skip
    table = isinstance(owner, dict)
    missing = object()
    old = owner.get(key, missing) if table else vars(owner).get(key, missing)
    held = rank_held(models.model_modules("gpt2-tiny"))
    when = "as this rank read a training batch (it is not trained on)"
    check_rank_held("m:load", held, when)  # nothing changed: passes
    try:
        if table:
            owner[key] = value
        else:
            setattr(owner, key, value)
        if named is None:
            check_rank_held("m:load", held, when)
        else:
            _refused_naming(held, when, named, "data code must leave pipeplan's")
    finally:
        if old is missing and table:
            del owner[key]
        elif old is missing:
            delattr(owner, key)
        elif table:
            owner[key] = old
        else:
            setattr(owner, key, old)
    check_rank_held("m:load", held, "")  # all put back: passes again


@pytest.mark.parametrize(
    "case",
    [
        "torch.save",
        "layer_norm",
        "AdamW.step",
        "torch.serialization",
        "numpy's ctypes view",
        "ctypes.cast",
        "torch's storage",
        "default dtype",
        "module class",
        "class's metaclass",
    ],
)
def test_what_only_a_batch_read_held_and_what_a_save_reaches_are_held_to_a_ranks_start(case):
    """Found by the sixty-fifth round: a thread a `__getitem__` started set, between two
    batches' reads, `torch.save` to write zeros, `F.layer_norm` to run with eps 0.5,
    `AdamW.step` to do nothing or torch's default dtype to float64 (held only around each
    batch's reads, `functions_kept`); a `__getitem__` that set `numpy.ctypeslib.as_array` to
    give zeros wrote an all-zero model/ (what safetensors turns each tensor into bytes with,
    in no hold); and one that swapped a held module's class for a ModuleType subclass whose
    `__getattribute__` answers one name changed nothing `vars` shows; each exit 0. A rank now
    holds them from its start too (`rank_held`), and each held module's and class's class."""
    import ctypes

    import numpy.ctypeslib
    import torch.nn.functional as F
    import torch.serialization
    import torch.storage

    from executor.data import check_rank_held, rank_held

    def mine(*args, **kwargs):
        return None

    class Module(types.ModuleType):
        def __getattribute__(self, name):
            return mine if name == "layer_norm" else types.ModuleType.__getattribute__(self, name)

    class Meta(type):
        pass

    class Swapped(Meta):  # what `Optimizer.__class__ = Swapped` gives its class
        def __getattribute__(cls, name):
            return mine if name == "step" else type.__getattribute__(cls, name)

    owner, key, value, named = {
        "torch.save": (torch, "save", mine, "torch.save"),
        "layer_norm": (F, "layer_norm", mine, "torch.nn.functional.layer_norm"),
        "AdamW.step": (torch.optim.AdamW, "step", mine, "torch.optim.adamw.AdamW.step"),
        "torch.serialization": (
            torch.serialization, "_save", mine, "torch.serialization._save"
        ),
        "numpy's ctypes view": (numpy.ctypeslib, "as_array", mine, "numpy.ctypeslib.as_array"),
        "ctypes.cast": (ctypes, "cast", mine, "ctypes.cast"),
        "torch's storage": (
            torch.storage.TypedStorage, "_size", mine, "torch.storage.TypedStorage._size"
        ),
        "default dtype": (None, None, torch.float64, "torch's default dtype (to float64"),
        "module class": (F, "__class__", Module, "the class of torch.nn.functional"),
        "class's metaclass": (
            torch.optim.AdamW, "__class__", Swapped, "the class of torch.optim.adamw.AdamW"
        ),
    }[case]  # fmt: skip
    adamw = sys.modules["torch.optim.adamw"]  # torch.optim deletes its name
    if case == "class's metaclass":  # a class whose metaclass Python lets it swap
        owner = Meta("Mine", (), {"__module__": "torch.optim.adamw"})
        adamw.Mine = owner
        named = "the class of torch.optim.adamw.Mine"
    missing = object()
    old = torch.get_default_dtype() if owner is None else vars(owner).get(key, missing)
    if key == "__class__":
        old = type(owner)
    held = rank_held(models.model_modules("bert-synth"))
    when = "as this rank read a training batch (it is not trained on)"
    check_rank_held("m:load", held, when)  # nothing changed: passes
    try:
        if owner is None:
            torch.set_default_dtype(value)
        else:
            setattr(owner, key, value)
        _refused_naming(held, when, named, "data code must leave pipeplan's")
    finally:
        if owner is None:
            torch.set_default_dtype(old)
        elif old is missing:
            delattr(owner, key)
        else:
            setattr(owner, key, old)
    check_rank_held("m:load", held, "")  # all put back: passes again
    if case == "class's metaclass":
        del adamw.Mine


def test_a_module_whose_class_a_read_swaps_is_refused_and_put_back():
    """Found by the sixty-fifth round: `torch.nn.functional.__class__ = M`, M a ModuleType
    subclass whose `__getattribute__` gave layer_norm with eps 0.5, left `vars` as they were,
    so a batch's reads passed and trained so, exit 0. The module's own class is held too,
    and put back."""
    import warnings

    import torch.nn.functional as F

    from executor.data import BadArgumentError, batch_rows

    layer_norm = F.layer_norm

    class Module(types.ModuleType):
        def __getattribute__(self, name):
            found = types.ModuleType.__getattribute__(self, name)
            return (lambda *a, **k: found(*a[:4], 0.5)) if name == "layer_norm" else found

    class Items:
        def __getitem__(self, index):
            F.__class__ = Module
            return torch.zeros(2), torch.tensor(0)

    refused = pytest.raises(
        BadArgumentError, match=r"swapped the class of torch\.nn\.functional; .*put back now"
    )
    try:
        with refused, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            batch_rows(Items(), [3], 0, "m:load", "train")
        assert type(F) is types.ModuleType and F.layer_norm is layer_norm
    finally:
        F.__class__ = types.ModuleType


@pytest.mark.parametrize("case", ["operator.is_", "builtins.all", "contextlib exit", "own name"])
def test_what_the_holds_compare_with_is_held_first(case):
    """Found by the sixty-fifth round: the holds compared with `operator.is_` and
    `itertools.chain`, looked up as they ran, so a `__getitem__` that set `operator.is_ =
    lambda a, b: True` made every later comparison say "unchanged", then replaced
    `torch._C._nn.cross_entropy_loss` and trained towards class 0, exit 0. What the holds run
    on (GUARD_MODULES: builtins, operator, itertools, contextlib, …, pipeplan's own checks) is
    held first and put back before any other comparison, in a batch's reads and in a rank's
    check, so the patch behind it is seen too."""
    import builtins
    import contextlib
    import operator
    import warnings

    import executor.data
    from executor.data import BadArgumentError, batch_rows, check_rank_held, rank_held

    owner, key, value = {
        "operator.is_": (operator, "is_", lambda a, b: True),
        "builtins.all": (builtins, "all", lambda values: True),
        "contextlib exit": (
            contextlib._GeneratorContextManager, "__exit__", lambda *a: False
        ),
        "own name": (executor.data, "_as_found", lambda held: True),
    }[case]  # fmt: skip
    old = vars(owner)[key]
    named = f"{owner.__module__}.{owner.__qualname__}" if isinstance(owner, type) else ""
    named = f"{named or owner.__name__}.{key}"
    cross_entropy = torch._C._nn.cross_entropy_loss

    def mine(*args, **kwargs):
        return None

    class Items:
        def __getitem__(self, index):
            setattr(owner, key, value)
            return torch.zeros(2), torch.tensor(0)

    held = rank_held()
    try:
        refused = pytest.raises(BadArgumentError, match=f" replaced {re.escape(named)};")
        with refused, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            batch_rows(Items(), [3], 0, "m:load", "train")
        assert vars(owner)[key] is old  # put back
        # A rank's check, after code outside a read (a finalizer) rebound it and patched
        # what the rank holds: both are named, and it is put back.
        setattr(owner, key, value)
        torch._C._nn.cross_entropy_loss = mine
        with pytest.raises(BadArgumentError) as caught:
            check_rank_held("m:load", held, "at this epoch's end")
        said = str(caught.value)
        assert named in said and "torch._C._nn.cross_entropy_loss" in said, said
        assert vars(owner)[key] is old
    finally:
        setattr(owner, key, old)
        torch._C._nn.cross_entropy_loss = cross_entropy
    check_rank_held("m:load", held, "")  # all put back: passes again


def test_a_patch_a_read_makes_is_refused_before_anything_computes_with_the_batch():
    """Found by the sixty-third round: a rank compared what it trains with only at each
    epoch's end and before each write, so a `__getitem__` that replaced
    `torch._C._nn.cross_entropy_loss` on one read and put it back on a later one trained
    every step between towards class 0, exit 0. Each batch a rank reads (`Trainer.pair`,
    `Trainer.rows`) is now compared before it is used: a change left by the read is named."""
    import executor.worker as worker
    from executor.data import BadArgumentError, rank_held

    old = torch._C._nn.cross_entropy_loss

    class Items:
        patch = False

        def __len__(self):
            return 8

        def __getitem__(self, index):
            if self.patch:
                torch._C._nn.cross_entropy_loss = lambda *args, **kwargs: old(*args, **kwargs)
            return torch.zeros(3), torch.tensor(0.0)

    trainer = object.__new__(worker.Trainer)
    trainer.cfg = types.SimpleNamespace(data="m:load")
    items = Items()
    trainer.data = types.SimpleNamespace(train=items, eval=Items(), name="m", padded=False)
    trainer.seq = types.SimpleNamespace(config=None)
    trainer.held = rank_held()
    trainer.pair(items, [0, 1])  # nothing changed: passes
    said = (
        r"data 'm:load': its code replaced or changed torch\._C\._nn\.cross_entropy_loss as "
        r"this rank read a training batch \(it is not trained on\)"
    )
    try:
        items.patch = True
        with pytest.raises(BadArgumentError, match=said):
            trainer.pair(items, [2, 3])
        with pytest.raises(BadArgumentError, match=said):
            trainer.rows(items, [4], 1)
    finally:
        torch._C._nn.cross_entropy_loss = old
    items.patch = False
    trainer.rows(items, [5], 0)  # put back: passes


def test_a_ranks_own_model_and_optimizer_are_held_to_what_pipeplan_made():
    """Found by the sixty-sixth round: a rank held modules and classes, not its own objects,
    so a `__getitem__` that found the rank's AdamW through `gc` and set `step` on the
    instance, or swapped its `__class__` for a subclass whose step does nothing, trained
    nothing, exit 0. Each object of the rank's model (its modules and parameters), its stage
    and its optimizer is now held (`hold_rank_objects`): its class, its attributes that hide
    its class's callables, its hooks and a module's sublayers, parameters and buffers; hooks
    on the user's own modules and pipeplan's own hooks are no change."""
    from executor.clock import Clock
    from executor.data import check_rank_held, hold_rank_objects, rank_held
    from executor.parallel import BackwardClock

    def mine(*args, **kwargs):
        return None

    seq = models.build("bert-synth")
    layers = seq.layers
    stage = torch.nn.Sequential(*layers)
    optimizer = torch.optim.AdamW(layers.parameters())
    block = next(m for m in layers.modules() if type(m).__name__ == "BertLayer")
    name = next(key for key, m in layers.named_modules() if m is block)
    weight_name, weight = next(iter(layers.named_parameters()))
    held = rank_held(models.model_modules("bert-synth"))
    hold_rank_objects(held, layers)  # as built
    # The user's own module hooked, and pipeplan's own hooks on the stage and parameters (as
    # each phase registers them, then is held, and takes them off): no change.
    own = torch.nn.Linear(2, 2)
    own.register_forward_hook(mine)
    clock = BackwardClock(stage, list(layers.parameters()), Clock(torch.device("cpu")))
    hold_rank_objects(held, layers, stage, optimizer, hooks=clock.hooks)
    when = "as this rank read a training batch (it is not trained on)"
    check_rank_held("m:load", held, when)  # nothing changed: passes
    clock.remove()
    check_rank_held("m:load", held, when)
    clock = BackwardClock(stage, list(layers.parameters()), Clock(torch.device("cpu")))
    hold_rank_objects(held, layers, stage, optimizer, hooks=clock.hooks)
    check_rank_held("m:load", held, when)
    # A user's hook made to look like pipeplan's (a function given a pipeplan module's
    # globals, the sixty-seventh round) is not pipeplan's.
    import executor.parallel as parallel

    masked = types.FunctionType(mine.__code__, vars(parallel), "zero_hook")

    class Nothing(torch.optim.AdamW):
        def step(self, closure=None):
            return None

    # What a `__getitem__` does to the rank's objects, how it is undone, what the line names.
    attention = block.attention
    cases = [
        (
            lambda: setattr(optimizer, "step", mine),
            lambda _: delattr(optimizer, "step"),
            "this rank's optimizer (AdamW).step",
        ),
        (
            lambda: setattr(optimizer, "__class__", Nothing),
            lambda _: setattr(optimizer, "__class__", torch.optim.AdamW),
            "the class of this rank's optimizer",
        ),
        (
            lambda: optimizer.register_step_pre_hook(mine),
            lambda handle: handle.remove(),
            "this rank's optimizer (AdamW)'s hooks (_optimizer_step_pre_hooks)",
        ),
        (
            lambda: block.register_forward_hook(mine),
            lambda handle: handle.remove(),
            f"the model's layers.{name}'s hooks (_forward_hooks)",
        ),
        (
            lambda: block.register_full_backward_pre_hook(mine),
            lambda handle: handle.remove(),
            f"the model's layers.{name}'s hooks (_backward_pre_hooks)",
        ),
        (
            lambda: setattr(block, "forward", mine),
            lambda _: delattr(block, "forward"),
            f"the model's layers.{name}.forward",
        ),
        (
            lambda: setattr(block, "attention", torch.nn.Identity()),
            lambda _: setattr(block, "attention", attention),
            f"the model's layers.{name}'s modules",
        ),
        (
            lambda: weight.register_hook(lambda grad: grad * 0),
            lambda handle: handle.remove(),
            f"the model's layers.{weight_name}'s hooks (_backward_hooks)",
        ),
        (
            lambda: stage.register_forward_pre_hook(mine),
            lambda handle: handle.remove(),
            "this rank's stage's hooks (_forward_pre_hooks)",
        ),
        (
            lambda: torch.nn.modules.module.register_module_forward_hook(mine),
            lambda handle: handle.remove(),
            "torch.nn.modules.module._global_forward_hooks",
        ),
        (
            lambda: block.register_forward_hook(masked),
            lambda handle: handle.remove(),
            f"the model's layers.{name}'s hooks (_forward_hooks)",
        ),
        (
            lambda: weight.register_post_accumulate_grad_hook(masked),
            lambda handle: handle.remove(),
            f"the model's layers.{weight_name}'s hooks (_post_accumulate_grad_hooks)",
        ),
    ]
    for change, undo, named in cases:
        done = change()
        try:
            said = _refused_naming(held, when, named)
            assert "the rank's own model and optimizer" in said, said
        finally:
            undo(done)
        check_rank_held("m:load", held, when)  # put back: passes again


def test_a_ranks_optimizer_groups_buffers_loss_and_modes_are_held_as_the_phase_set_them():
    """Found by the sixty-seventh round, each by a `__getitem__` that found the rank's objects
    through `gc`, exit 0: `maximize` set on each of the AdamW's groups trained by gradient
    ascent; BERT's position_ids buffer replaced, StepMean's `loss_sum` replaced, `.eval()` on
    each BertLayer or `requires_grad_(False)` on each parameter trained otherwise than asked.
    The phase's hold now takes its optimizer's groups (all but "lr", which pipeplan sets each
    step) and defaults, its loss function's attributes (but `scale`, set each step), and
    the model's buffers, modes and `requires_grad`; pipeplan's own switches are no change."""
    from executor.data import (
        check_rank_held,
        hold_rank_modes,
        hold_rank_objects,
        rank_held,
    )
    from executor.parallel import StepMean

    seq = models.build("bert-synth")
    layers = seq.layers
    stage = torch.nn.Sequential(*layers)
    optimizer = torch.optim.AdamW(layers.parameters())
    loss = StepMean(seq.loss_sum, seq.targets)
    buffered = next(m for m in layers.modules() if "position_ids" in m._buffers)
    where = next(key for key, m in layers.named_modules() if m is buffered)
    block = next(m for m in layers.modules() if type(m).__name__ == "BertLayer")
    name = next(key for key, m in layers.named_modules() if m is block)
    weight_name, weight = next(iter(layers.named_parameters()))
    held = rank_held(models.model_modules("bert-synth"))
    hold_rank_objects(held, layers, stage, optimizer, loss)
    when = "as this rank read a training batch (it is not trained on)"
    check_rank_held("m:load", held, when)
    # What pipeplan sets each step, and its switch to evaluate (held anew): no change.
    optimizer.param_groups[0]["lr"] = 0.5
    loss.begin(targets=7, micro_batches=2, replicas=1)
    check_rank_held("m:load", held, when)
    stage.train(False)
    hold_rank_modes(held)
    check_rank_held("m:load", held, when)
    stage.train(True)
    hold_rank_modes(held)
    check_rank_held("m:load", held, when)

    group = optimizer.param_groups[0]
    position_ids = buffered._buffers["position_ids"]
    sum_of_loss = loss.loss_sum
    opt = "this rank's optimizer (AdamW)"
    cases = [
        (
            lambda: group.__setitem__("maximize", True),
            lambda: group.__setitem__("maximize", False),
            f"{opt}.param_groups[0]['maximize']",
        ),
        (
            lambda: group.__setitem__("weight_decay", 0.0),
            lambda: group.__setitem__("weight_decay", 0.01),
            f"{opt}.param_groups[0]['weight_decay']",
        ),
        (
            lambda: group["params"].pop(),
            lambda: group["params"].append(layers_last),
            f"{opt}.param_groups[0]['params']",
        ),
        (
            lambda: optimizer.param_groups.append(dict(group, params=[])),
            lambda: optimizer.param_groups.pop(),
            f"{opt}.param_groups",
        ),
        (
            lambda: optimizer.defaults.__setitem__("eps", 1.0),
            lambda: optimizer.defaults.__setitem__("eps", 1e-8),
            f"{opt}.defaults['eps']",
        ),
        (
            lambda: buffered._buffers.__setitem__("position_ids", position_ids * 0),
            lambda: buffered._buffers.__setitem__("position_ids", position_ids),
            f"the model's layers.{where}'s buffers",
        ),
        (
            lambda: setattr(loss, "loss_sum", lambda logits, labels: (logits * 0).sum()),
            lambda: setattr(loss, "loss_sum", sum_of_loss),
            "this rank's loss function (StepMean).loss_sum",
        ),
        (
            lambda: block.eval(),
            lambda: block.train(),
            f"the model's layers.{name}.training",
        ),
        (
            lambda: weight.requires_grad_(False),
            lambda: weight.requires_grad_(True),
            f"the model's layers.{weight_name}.requires_grad",
        ),
    ]
    layers_last = group["params"][-1]
    for change, undo, named in cases:
        change()
        try:
            _refused_naming(held, when, named)
        finally:
            undo()
        check_rank_held("m:load", held, when)  # put back: passes again


def test_a_ranks_model_is_held_before_the_data_is_read_against_it(tmp_path):
    """Found by the sixty-sixth round: a rank held its model's objects only after its data
    was checked against it, so a `__getitem__` that hooked each BertLayer (found through `gc`)
    as those first items were read trained with every layer's output zeroed. `build_task`
    now hands the model to the rank (`built`: `Trainer.hold_model`) before it reads the data
    against it."""
    import executor.worker as worker
    from executor.data import BadArgumentError, rank_held
    from executor.task import build_task
    from pipeplan.formats import RunConfig

    source = tmp_path / "hooking.py"
    source.write_text(
        textwrap.dedent(
            """
            import gc
            import torch
            from executor.data import TaskData

            def zero(module, args, out):
                return tuple(x * 0 for x in out) if isinstance(out, tuple) else out * 0

            class Items(torch.utils.data.Dataset):
                def __len__(self):
                    return 8

                def __getitem__(self, index):
                    for found in gc.get_objects():
                        if type(found).__name__ == "BertLayer" and not found._forward_hooks:
                            found.register_forward_hook(zero)
                    return torch.randint(3, 20, (32,)), torch.tensor(index % 2)

            def load():
                return TaskData("hooking", Items(), Items(), num_labels=2)
            """
        )
    )
    cfg = RunConfig(model="bert-synth", data=f"{source}:load")
    trainer = object.__new__(worker.Trainer)
    trainer.cfg = cfg
    trainer.held = rank_held(models.model_modules("bert-synth"))
    seq = build_task(cfg, quiet=True, built=trainer.hold_model)[0]
    assert any(m._forward_hooks for m in seq.layers.modules())  # the reads hooked it
    with pytest.raises(BadArgumentError, match=r"the model's layers\.\d+\.\S+'s hooks"):
        trainer.check_held(None)


def test_what_a_ranks_build_and_step_reach_is_held():
    """Found by the sixty-sixth round: a rank builds its model after its data code first
    runs (the data's task, classes and padding size it), and `torch.nn.init` was in no hold,
    so a `__getitem__` that set `torch.nn.init._no_grad_normal_` to draw 10× wider built
    BERT so, exit 0. Every module a build and a training step reach outside Python's standard
    library (traced here, as RANK_LIBRARIES was) is now held from the rank's start."""
    import torch.nn.init as init

    from executor.data import BadArgumentError, check_rank_held, rank_held

    held = rank_held(models.model_modules("bert-synth"))
    reached = set()

    def called(frame, event, arg):
        if event == "call":
            reached.add(frame.f_globals.get("__name__"))
        elif event == "c_call":
            reached.add(getattr(arg, "__module__", None))

    def build_and_step():
        seq = models.build("bert-synth")
        optimizer = torch.optim.AdamW(seq.layers.parameters())
        x, _ = seq.example_batch(2)
        for layer in seq.layers:
            x = layer(x)
        x.float().sum().backward()
        optimizer.step()

    build_and_step()  # what they import, imported before the trace (its finders are no rank's)
    sys.setprofile(called)
    try:
        build_and_step()
    finally:
        sys.setprofile(None)
    names = {name for name, _, _ in held.owners}
    # Modules, less Python's own, typing's backport and this one (a C function may name a
    # module that is none: torch._ops.profiler).
    libraries = {
        name
        for name in reached
        if isinstance(name, str)
        and name in sys.modules
        and name != __name__
        and name.partition(".")[0] not in (*sys.stdlib_module_names, "typing_extensions")
    }
    assert libraries <= names, sorted(libraries - names)
    normal = init._no_grad_normal_
    when = "as this rank loaded and read it (nothing is trained)"
    try:
        init._no_grad_normal_ = lambda tensor, mean, std, generator=None: normal(
            tensor, mean, std * 10, generator
        )
        with pytest.raises(BadArgumentError, match=r"changed torch\.nn\.init\._no_grad_normal_ as"):
            check_rank_held("m:load", held, when)
    finally:
        init._no_grad_normal_ = normal
    check_rank_held("m:load", held, when)  # put back: passes again


def test_rank_state_names_what_pipeplans_own_code_changes():
    """Found by the sixty-second round, as its tables came to be held in a rank
    (`check_rank_held`): RANK_STATE, the tables and values pipeplan's own code changes as it
    runs (left out of the comparison), names each one its code changes in place: one it
    missed would refuse a good run."""
    import ast

    from executor.data import RANK_STATE

    mutators = {"append", "extend", "insert", "pop", "popitem", "clear", "update"}
    mutators |= {"setdefault", "add", "discard", "remove", "sort", "reverse"}
    root = Path(__file__).resolve().parent.parent
    files = [p for d in ("pipeplan", "executor", "profiles") for p in (root / d).rglob("*.py")]
    files.append(root / "cli.py")
    trees = {f: ast.parse(f.read_text()) for f in files}
    tables: dict[str, set[str]] = {}  # a module-level name: the modules that define it
    for file, tree in trees.items():
        module = ".".join(file.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
        for node in tree.body:
            targets = getattr(node, "targets", None) or [getattr(node, "target", None)]
            for target in targets:
                if isinstance(target, ast.Name):
                    tables.setdefault(target.id, set()).add(f"{module}.{target.id}")
    changed: set[str] = set()
    for tree in trees.values():
        for node in ast.walk(tree):
            found = None
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                found = node.func.value if node.func.attr in mutators else None
            elif isinstance(node, ast.Subscript) and isinstance(node.ctx, (ast.Store, ast.Del)):
                found = node.value
            elif isinstance(node, ast.Global):
                changed.update(node.names)
            if isinstance(found, ast.Name):
                changed.add(found.id)
    # Less those changed only as pipeplan.formats (or executor.data) is imported, before any
    # rank starts.
    dotted = {name for key in changed for name in tables.get(key, ())} - {
        "executor.data._guard",
        "pipeplan.formats.base.FILE_LIMITS",
        "pipeplan.formats.base.KINDS",
        "pipeplan.plots.KINDS",
    }
    assert sorted(dotted - RANK_STATE) == []


@pytest.mark.multiprocess
@pytest.mark.timeout(180)
def test_a_read_that_replaces_what_a_rank_trains_with_is_named_before_its_writes(
    tmp_path, capsys, monkeypatch
):
    """Found by the sixty-second round: a `__getitem__` that replaced
    `pipeplan.precision.compute` (not among KEPT_MODULES, held around each read) trained an
    fp32 run under bfloat16 autocast, and its checkpoint and model were written, exit 0. The
    rank compares pipeplan's modules with its start after each batch it reads (the epoch's
    end before the sixty-third round): one line naming the data, the function and the read,
    nothing trained with it nor written."""
    monkeypatch.chdir(tmp_path)
    code = (  # rank 0's 40th training read, in the third of its four steps
        'if os.environ.get("RANK") == "0" and self.offset == 0:\n'
        "            READS.append(i)\n"
        "            if len(READS) == 40:\n"
        "                import pipeplan.precision as p\n"
        "                p.compute = lambda device, precision: (\n"
        '                    torch.autocast("cpu", dtype=torch.bfloat16))'
    )
    line = _ranks_line(tmp_path, capsys, "rt62_compute", at_import="READS = []", in_item=code)
    assert line.startswith("pipeplan: error: training failed on rank 0 at step "), line
    assert (
        ": data 'rt62_compute:load': its code replaced or changed pipeplan.precision.compute "
        "as this rank read a training batch (it is not trained on); data code must leave "
    ) in line, line
    assert not (tmp_path / "runs" / "n" / "model").exists()
    assert not (tmp_path / "runs" / "n" / "checkpoints").exists()


def test_a_read_that_leaks_descriptors_is_named_before_the_limit():
    """Found by the sixty-second round: a `__getitem__` that opened a file and never closed
    it trained its rank on, until the final checkpoint failed for want of descriptors
    (EMFILE), every trained step lost; a batch's checks refuse descriptors closed, not taken.
    The descriptors a process holds are counted every 16 reads: grown by more than 64 since
    its first read and past half the open-files limit, the batch is refused naming the data;
    a cache that keeps a bounded number open levels off below that and passes."""
    import resource

    from executor import data
    from executor.data import BadArgumentError, batch_rows

    kept: list[int] = []

    class Files:
        def __init__(self, bound):
            self.bound = bound

        def __getitem__(self, index):
            if len(kept) < self.bound:
                kept.append(os.open(os.devnull, os.O_RDONLY))
            return torch.zeros(2), torch.tensor(0)

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    data._DESCRIPTORS.clear()  # counted afresh, before this test's first read
    # Half the limit is 100 more than open now: a cache of 80 stays below it.
    limit = 2 * (len(os.listdir("/proc/self/fd")) + 100)
    refused = pytest.raises(
        BadArgumentError,
        match=r"^data 'm:load': reading a batch \(16 train items, item \d+ first\) left \d+ "
        r"descriptors open in this process, \d+ more than before its first read, where the "
        rf"open-files limit \(ulimit -n\) is {limit}: its reads open files they do not close",
    )
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))
        for start in range(0, 320, 16):
            batch_rows(Files(80), list(range(start, start + 16)), 0, "m:load", "train")
        assert len(kept) == 80
        with refused:
            for start in range(320, 320 + limit, 16):
                batch_rows(Files(limit), list(range(start, start + 16)), 0, "m:load", "train")
        assert len(kept) < limit / 2 + 32  # named well before the limit
    finally:
        for fd in kept:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        data._DESCRIPTORS.clear()


STOPPED_CHILD_LOAD = """\
import os, signal, sys, time, torch

class Forks(torch.utils.data.TensorDataset):
    def __getitem__(self, index):
        if os.environ.get("RANK") and not getattr(self, "forked", False):
            self.forked = True
            if os.fork() == 0:  # a child that stops itself: it outlives its rank
                with open(os.path.join({folder!r}, str(os.getpid())), "w"):
                    pass
                os.kill(os.getpid(), signal.SIGSTOP)
                time.sleep(300)
                os._exit(0)
        return super().__getitem__(index)

def load():
    x, y = torch.zeros(80, 1, 8, 8), torch.arange(80) % 10
    return Forks(x, y), torch.utils.data.TensorDataset(x, y)
"""


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_a_child_the_ranks_code_left_stopped_is_ended_with_the_run(tmp_path):
    """Found by the seventy-eighth round: a child the data code forked in a rank, which
    stopped itself (SIGSTOP), stayed stopped after the run, and after Ctrl-C or SIGTERM to
    pipeplan (a stopped process acts on no signal but SIGKILL). The launcher kills what is
    left in the ranks' sessions as they end, and a run that ended well says so."""
    children = tmp_path / "children"
    done = _ran_with_children(tmp_path, STOPPED_CHILD_LOAD, children)
    pids = sorted(int(p.name) for p in children.iterdir())
    try:
        assert done.returncode == 0, done.stderr
        assert len(pids) == 2, pids  # one a rank
        left = f"the ranks' code left 2 processes (pids {pids[0]}, {pids[1]}) running or stopped"
        assert f"{left}: killed" in done.stderr
        for pid in pids:  # gone, or dead and not yet reaped by the process that adopted it
            assert faults.session_of(pid) is None or _state(pid) == "Z", _state(pid)
    finally:
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


SESSION_CHILD_LOAD = """\
import os, sys, time, torch

class Forks(torch.utils.data.TensorDataset):
    def __getitem__(self, index):
        if os.environ.get("RANK") == "1" and not getattr(self, "forked", False):
            self.forked = True
            if os.fork() == 0:  # a daemon: a session of its own, its parent gone
                os.setsid()
                if os.fork() == 0:
                    with open(os.path.join({folder!r}, str(os.getpid())), "w"):
                        pass
                    # holding the console's descriptors, without the run's mark in its
                    # environment (the eighty-fourth round: said as the launcher's code's)
                    os.execve("/bin/sleep", ["sleep", "300"], {})
                os._exit(0)
        return super().__getitem__(index)

def load():
    x, y = torch.zeros(80, 1, 8, 8), torch.arange(80) % 10
    return Forks(x, y), torch.utils.data.TensorDataset(x, y)
"""


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_a_daemon_the_ranks_code_started_is_ended_with_the_run(tmp_path):
    """Found by the eighty-first round: a child the data code started in a session of its own
    (`os.setsid()`, a daemon's double fork) outlived the run, out of reach of the ranks'
    sessions, and held the console: `pipeplan run … | cat` never ended. The launcher ends
    every process that carries the run's marks in its environment or its ranks' lineage
    (the eighty-fourth round: one with an environment of its own was said as the launcher's
    data code's, "the data code left", and the ranks' line undercounted): the output's pipe
    closes with the run (`capture_output` reads it to its end), and the daemon is gone."""
    children = tmp_path / "children"
    try:
        done = _ran_with_children(tmp_path, SESSION_CHILD_LOAD, children)
        pids = [int(p.name) for p in children.iterdir()]
        assert done.returncode == 0, done.stderr
        assert len(pids) == 1, pids
        assert f"left 1 process (pid {pids[0]}) running or stopped: killed" in done.stderr
        assert "the data code left" not in done.stderr  # said once, as the ranks' code's
        assert faults.session_of(pids[0]) is None or _state(pids[0]) == "Z", _state(pids[0])
    finally:
        for child in children.iterdir():
            with contextlib.suppress(OSError):
                os.kill(int(child.name), signal.SIGKILL)


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_what_the_ranks_code_started_ends_when_pipeplan_run_is_killed(tmp_path):
    """Found by the eighty-first round: after `kill -9` of `pipeplan run`, which runs no
    clean-up, its ranks died (the kernel's parent-death signal) but what their code had
    started stayed. A watch process the launcher starts beside the ranks ends it: here a
    daemon (a session of its own), gone within seconds of the kill."""
    _killed_with_children(tmp_path, SESSION_CHILD_LOAD, settle_s=0.0)


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_what_the_launchers_check_of_the_data_started_ends_when_pipeplan_run_is_killed(
    tmp_path,
):
    """Left by the eighty-second round: after `kill -9` of `pipeplan run`, a server the data
    function started as the launcher checked it (a session of its own; no rank's, so no
    run's mark) stayed. The command's own watch, started before its data code first ran,
    ends what descended from the command: gone within seconds of the kill. So is one the
    watch never saw, started just before the kill (the eighty-seventh round: within its last
    half second, it was left): it carries the command's lineage family (`leftovers.
    _of_family`)."""
    _killed_with_children(tmp_path, LAUNCHER_CHILD_LOAD, settle_s=4 * leftovers.LOOK_S)
    for used in ("children", "runs"):
        shutil.rmtree(tmp_path / used, ignore_errors=True)
    # (one that also lowered its limits, in that last half second, is still left: documented)
    lines = LAUNCHER_CHILD_LOAD.splitlines(keepends=True)
    _killed_with_children(tmp_path, "".join(x for x in lines if "setrlimit" not in x), 0.0)


def _killed_with_children(tmp_path: Path, code: str, settle_s: float) -> None:
    """`pipeplan run --data forks.py:load` (`code`, writing each child's pid into a folder),
    killed with SIGKILL `settle_s` after a child is written (the command's watch looks at
    its descendants every LOOK_S): every child is gone within seconds."""
    children = tmp_path / "children"
    children.mkdir()
    (tmp_path / "forks.py").write_text(code.replace("{folder!r}", repr(str(children))))
    argv = shlex.split(
        "run --nproc 2 --name x --model vit-digits --global-batch 16 --epochs 1 "
        f"--max-steps-per-epoch 50 --data {tmp_path / 'forks.py'}:load "
        f"--runs-dir {tmp_path / 'runs'}"
    )
    with open(tmp_path / "out", "w") as out:
        run = subprocess.Popen(
            [sys.executable, "-m", "cli", *argv], stdout=out, stderr=out,
            cwd=Path(cli.__file__).resolve().parent,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 90
        while not any(children.iterdir()) and run.poll() is None:
            assert time.monotonic() < deadline, (tmp_path / "out").read_text()
            time.sleep(0.1)
        time.sleep(settle_s)
        assert run.poll() is None, (tmp_path / "out").read_text()
        pids = [int(p.name) for p in children.iterdir()]
        run.kill()
        run.wait()
        deadline = time.monotonic() + 15  # the ranks' parent-death signal, then the watches'
        for pid in pids:
            while faults.session_of(pid) is not None and _state(pid) != "Z":
                assert time.monotonic() < deadline, f"pid {pid} is still {_state(pid)}"
                time.sleep(0.1)
    finally:
        run.kill()
        for child in children.iterdir():
            with contextlib.suppress(OSError):
                os.kill(int(child.name), signal.SIGKILL)


# A process that starts a child, says its pid, and waits: its command line holds `{tag}`.
PARENT_OF_ONE = (
    "tag = {tag!r}; import subprocess, time; child = subprocess.Popen(['sleep', '60']); "
    "print(child.pid, flush=True); time.sleep(60)"
)


# The same, its child forked (a forkserver's worker: the same command line).
PARENT_OF_A_FORK = (
    "tag = {tag!r}; import os, sys, time; child = os.fork()\n"
    "if child == 0: time.sleep(60); os._exit(0)\n"
    "print(child, flush=True); time.sleep(60)"
)


@pytest.mark.timeout(60)
def test_what_a_killed_command_was_seen_to_start_is_ended_and_nothing_else():
    """`leftovers.end_seen`, the command's watch's sweep once the command is killed: it ends
    each process it saw that is still the one it saw (its start), and what those started
    since (here a child it never saw); not a process whose start differs (its number another
    program's since), nor a resource tracker (left to free what the code left: its child is
    ended)."""
    from executor import leftovers

    def started(tag: str, code: str = PARENT_OF_ONE) -> tuple[subprocess.Popen, int]:
        parent = subprocess.Popen(
            [sys.executable, "-c", code.format(tag=tag)], stdout=subprocess.PIPE
        )
        return parent, int(parent.stdout.readline())

    (seen, seen_child), (other, other_child), (tracker, tracker_child) = [
        started(tag) for tag in ("", "", "from multiprocessing.resource_tracker import main")
    ]
    # A forkserver is spared; the worker it forked (its command line) is not.
    server, worker = started("from multiprocessing.forkserver import main", PARENT_OF_A_FORK)
    parents = [seen, other, tracker, server]
    try:
        starts = {p.pid: leftovers._started(p.pid) for p in parents}
        starts[other.pid] += 1  # not the process seen: its number another's
        ended = leftovers.end_seen(starts)
        assert sorted(ended) == sorted([seen.pid, seen_child, tracker_child, worker])
        for pid in ended:
            deadline = time.monotonic() + 10
            while faults.session_of(pid) is not None and _state(pid) != "Z":
                assert time.monotonic() < deadline, f"pid {pid} is still {_state(pid)}"
                time.sleep(0.05)
        for pid in (other.pid, other_child, tracker.pid, server.pid):
            assert _state(pid) not in (None, "Z", "T"), _state(pid)
    finally:
        for pid in [p.pid for p in parents] + [seen_child, other_child, tracker_child, worker]:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        for p in parents:
            p.wait()


@pytest.mark.timeout(60)
def test_only_the_processes_that_carry_the_runs_marks_are_ended():
    """`leftovers.end_marked` ends what carries every mark in its environment (a run's
    processes, wherever they went: here in sessions of their own), and nothing that lacks
    one: another run's (its own values), the user's (none)."""
    from executor import leftovers

    marks = {"PIPEPLAN_LAUNCHER_PID": "4242", "PIPEPLAN_RUN_DIR_ID": "2049:1835"}
    other = {**marks, "PIPEPLAN_RUN_DIR_ID": "2049:1836"}
    bare = {k: v for k, v in os.environ.items() if not k.startswith("PIPEPLAN_")}
    started = [
        subprocess.Popen(
            [sys.executable, "-c", "import time; time.sleep(60)"],
            env={**bare, **env},
            start_new_session=True,
        )
        for env in (marks, marks, other, {})
    ]
    try:
        deadline = time.monotonic() + 10  # each exec'd with its environment
        while not all(
            b"PIPEPLAN_" in Path(f"/proc/{p.pid}/environ").read_bytes() for p in started[:3]
        ):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert sorted(leftovers.end_marked(marks)) == sorted(p.pid for p in started[:2])
        assert [p.wait(10) for p in started[:2]] == [-signal.SIGKILL] * 2
        assert [p.poll() for p in started[2:]] == [None, None]
        assert leftovers.end_marked(marks) == []
    finally:
        for p in started:
            p.kill()
            p.wait(10)


def test_each_api_run_draws_its_ranks_lineage_and_a_fork_its_own():
    """Found by the eighty-sixth round: the API's lineage was drawn once a process, so a
    process forked after a first `pipeplan.run` ran its runs' ranks with the same lineage as
    the parent's, and whichever run ended first killed the other's ranks. A process that did
    not mark itself (not the command) draws its ranks' lineage per run, odd and in the band;
    a forked child draws its own lineage again."""
    from pipeplan import exits

    assert exits.lineage_marked() is None  # (the test process: not the command)
    drawn = {exits.rank_lineage() for _ in range(20)}
    assert len(drawn) == 20 and all(v % 2 == 1 and v > exits.LINEAGE_BASE for v in drawn)
    parent = exits.lineage()
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # (only the standard library's and pipeplan's code here, then out)
        os.write(write, str(exits.lineage()).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        assert int(pipe.read()) != parent
    assert os.waitpid(child, 0)[1] == 0 and exits.lineage() == parent


LOW_HARD_LIMIT = """\
import resource
from pipeplan import exits
resource.setrlimit(exits.RLIMIT_LOCKS, ({hard}, {hard}))
exits.mark_lineage(exits.lineage())
kin = exits.kin()
now = resource.getrlimit(exits.RLIMIT_LOCKS)[1]
print(exits.lineage_marked(), now, kin.family, kin.before, sep="|")
"""


@pytest.mark.timeout(60)
def test_under_a_low_hard_limit_the_lineage_is_drawn_below_it():
    """Found by the eighty-sixth round: under `ulimit -x 100000` the lineage could not be set,
    and the fallback killed a daemon a shell's earlier helper started. A family's top even
    value is drawn in [N/2, N) (its ranks' the one below); under a range too small to tell
    two runs apart (`exits.FAMILIES_WANTED`) as many as fit, where none fits none, but the hard
    limit is lowered by one: what descends from the command is still told from what the shell
    had started (`exits.Kin`). Found by the ninetieth round: families of 8 values, drawn
    below 2**20, were no lineage to a command nested in one (it drew its own and was left), and
    just above 2**20, 2**28, … 255 families fit, one too few, and none was drawn."""
    from pipeplan import exits

    cases = (100_000, True), (4_096, True), (2_000, False), (1, False), (2**21, True)
    cases += (65_530, True), (1_048_582, True), (268_435_462, True), (5_000, False)
    for hard, drawn in cases:
        done = subprocess.run(
            [sys.executable, "-c", LOW_HARD_LIMIT.format(hard=hard)], capture_output=True,
            text=True, timeout=50, cwd=Path(cli.__file__).resolve().parent,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        value, now, family, before = done.stdout.split("|")
        if not drawn:
            assert (value, now, family) == ("None", str(hard - 1), "None"), done.stdout
            kin = exits.Kin(None, hard)
        else:
            value = int(value)
            assert value % 2 == 0 and hard // 2 <= value - 1 and value == int(now) < hard
            low, high = eval(family)  # (a tuple's repr)
            assert low <= value - 1 and value + 1 == high and high - low + 1 >= 8
            kin = exits.Kin((low, high), hard)
            # another command's under the same limit (the eighty-seventh round: one that a
            # shell's earlier helper started was killed, its watch too)
            others = (exits._drawn(hard) for _ in range(100))
            other = next((v for v, _ in filter(None, others) if not low <= v <= high), None)
            if hard == 4_096:  # ([2048, 4096) holds one family of 2**11: every command's)
                assert other is None
            else:
                assert not kin.kin((other, other)) and not kin.kin((other - 1, other - 1))
            # a command its data code starts (the eighty-eighth round: one drawn a family of
            # its own in [value/2, value) was taken for another command's, and left): the
            # family holds smaller ones (of 2**NESTED_LEAST values and more)
            assert exits.family_of(value) == (low, high) == exits.family_of(value - 1)
            assert high - low + 1 >= 2**exits.NESTED_LEAST
            for _ in range(50):
                inner, inner_family = exits._drawn(value)
                assert inner < value - 1 and low <= inner_family[0] <= inner_family[1] <= high
                assert kin.kin((inner, inner)) and kin.kin((inner - 1, inner - 1))
        assert int(before) == hard
        # what it starts, whatever it lowers, is its; what had the hard limit before is not
        assert kin.kin((0, 0)) and not kin.kin((hard, hard)) and not kin.kin(None)
    # a hard limit only looks like a lineage (`ulimit -x` of N ≡ 5 or 6 mod 8: an 8-value
    # family's pattern) is read as none (the eighty-ninth round: every command under it drew
    # one of two values, and one ended another's ranks' leftovers)
    for hard in (1_000_006, 2_054, 8_000_000_000_000_000_006, 7_000_001_230_177_042_532):
        drawn = {exits._drawn(hard) for _ in range(200)}
        assert None in drawn or len(drawn) > 100, (hard, len(drawn))  # (of 243 and more)
    # a command inside another (its hard limit a lineage value) draws a smaller family inside
    # the outer one, below its hard limit: one of 255, each told from the others (the eighty-
    # eighth round: one a job script ran killed another that the script's helper started)
    outer, family = exits._drawn(exits.UNLIMITED)
    assert outer == family[1] - 1 and outer % 2 == 0
    assert exits.family_of(outer) == exits.family_of(outer - 1) == family
    families = set()
    for _ in range(1000):
        inner, inner_family = exits._drawn(outer - 1)  # (under a rank of the outer's, say)
        low, high = inner_family
        assert inner == high - 1 and family[0] <= low and high < outer - 1
        assert high - low + 1 == (family[1] - family[0] + 1) >> exits.NEST_BITS
        assert exits.family_of(inner) == inner_family
        families.add(inner_family)
        deeper, deeper_family = exits._drawn(inner)  # and inside that one
        assert low <= deeper_family[0] and deeper_family[1] < inner and deeper < inner
    assert len(families) > 230  # (of 255: 1,000 draws see ~250 of them, give or take 4)
    other = exits._drawn(exits.UNLIMITED)[0]
    kin = exits.Kin(family, exits.UNLIMITED)
    assert kin.kin((inner, inner)) and kin.kin((5, outer)) and kin.kin((3, 4))
    assert not kin.kin((other, other)) or exits.family_of(other) == family
    assert not kin.kin((exits.UNLIMITED, exits.UNLIMITED))
    # the inner command's own: not what it had at its start (a helper the outer's data code
    # started before `exec pipeplan`, of the outer's lineage), nor what a command beside it
    # drew (that helper's later `pipeplan` command), above its own or below
    nested = exits.Kin(inner_family, outer, top=inner)
    assert nested.kin((inner, inner)) and nested.kin((5, 5)) and not nested.kin((outer, outer))
    beside = next(v for v, f in iter(lambda: exits._drawn(outer), None) if f != inner_family)
    assert not nested.kin((beside, beside)) and not nested.kin((beside - 1, beside - 1))
    assert nested.kin((inner - 1, inner - 1)) and not nested.kin((inner + 2, inner + 2))
    assert exits.Kin.parse(nested.argument()).top == inner


LINEAGE_KEPT = """\
import resource
from executor.data import limits_kept
from pipeplan import exits
exits.mark_lineage(exits.lineage())
marked = exits.lineage()
try:  # the hard limit is the lineage too: never raised again
    resource.setrlimit(exits.RLIMIT_LOCKS, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
except ValueError:
    pass
with limits_kept("m:load", "the data function"):
    resource.setrlimit(exits.RLIMIT_LOCKS, (12345, marked))
print(resource.getrlimit(exits.RLIMIT_LOCKS) == (marked, marked) == (exits.lineage_marked(),) * 2)
"""


@pytest.mark.timeout(60)
def test_data_code_that_changes_the_lineage_limit_has_it_set_again():
    """Found by the eighty-sixth round: data code that raised RLIMIT_LOCKS in the command's
    process unmarked all it started from then on. The lineage is the hard limit too, which
    no user raises; a soft limit the code changed is set again as its call ends (and what it
    started meanwhile still has the hard one: `exits.Kin`)."""
    done = subprocess.run(
        [sys.executable, "-c", LINEAGE_KEPT], capture_output=True, text=True, timeout=50,
        cwd=Path(cli.__file__).resolve().parent,
    )  # fmt: skip
    assert done.stdout.strip() == "True", done.stderr


HEADLESS = (
    "import ctypes, threading, time\n"
    "threading.Thread(target=time.sleep, args=(60,)).start()\n"
    "print('headless', flush=True)\n"
    "ctypes.CDLL(None).pthread_exit(None)\n"
)


@pytest.mark.timeout(60)
def test_a_lineage_marks_what_descends_from_the_command_and_nothing_else():
    """`exits.mark_lineage`: what a process starts carries its lineage, soft and hard (an
    environment and a session of its own take nothing away), read back by `exits.limits_of`;
    the command's watch ends none of its children that do not descend from it (an orphan of a
    helper the shell started before `exec pipeplan`: the eighty-fourth round killed it;
    another command's), and each that does, whatever it set its limits to or however it
    marked itself again (the eighty-sixth round's were left); `leftovers.end_marked` ends
    what carries the ranks' lineage a run's mark names, whatever its environment."""
    import resource

    from executor import leftovers
    from pipeplan import exits

    ours, family = exits._drawn(exits.UNLIMITED)
    while (drawn := exits._drawn(exits.UNLIMITED))[1] == family:
        pass
    other = drawn[0]
    kin = exits.Kin(family, exits.UNLIMITED)
    bare = {k: v for k, v in os.environ.items() if not k.startswith("PIPEPLAN_")}

    def started(limits: tuple[int, int] | None, env: dict | None = None) -> subprocess.Popen:
        return subprocess.Popen(
            ["sleep", "60"], env=bare if env is None else env, start_new_session=True,
            preexec_fn=(lambda: resource.setrlimit(exits.RLIMIT_LOCKS, limits)) if limits else None,
        )  # fmt: skip

    command, rank = started((ours, ours), {}), started((ours - 1, ours - 1), {})
    foreign = started(None)
    own_limits, nested = started((5, 5)), started((ours - 1000, ours - 1000))
    another = started((other, other))  # another command's, adopted
    # another run's rank that drew the same lineage: its mark says whose it is
    marked = started((ours - 1, ours - 1), {"PIPEPLAN_RUN_MARK": f"9e1d.{ours - 1}"})
    # and one of the ranks' whose main thread ended (its environment unreadable: the
    # eighty-fifth round's escaped a run through the API)
    headless = subprocess.Popen(
        [sys.executable, "-c", HEADLESS], start_new_session=True, stdout=subprocess.PIPE,
        preexec_fn=lambda: resource.setrlimit(exits.RLIMIT_LOCKS, (ours - 1, ours - 1)),
    )  # fmt: skip
    everyone = [command, rank, foreign, own_limits, nested, another, marked, headless]
    try:
        deadline = time.monotonic() + 10  # each exec'd with its limits
        while any(leftovers._command_line(p.pid) != b"sleep\x0060\x00" for p in everyone[:-1]):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert exits.limits_of(command.pid) == (ours, ours)
        assert exits.limits_of(foreign.pid) == (exits.UNLIMITED, exits.UNLIMITED)
        seen = leftovers._descendants([os.getpid()], kin=kin)
        assert {command.pid, rank.pid, own_limits.pid, nested.pid} <= set(seen)
        assert foreign.pid not in seen and another.pid not in seen
        assert foreign.pid in leftovers._descendants([os.getpid()])  # (a child all the same)
        assert exits.Kin.parse(kin.argument()).family == kin.family
        assert leftovers.lineage_in(f"5f0c.{ours - 1}") == ours - 1
        assert leftovers.lineage_in("5f0c") is None and leftovers.lineage_in("5f0c.x") is None
        assert headless.stdout.readline() == b"headless\n"
        while _state(headless.pid) != "Z":  # its main thread ended; another runs
            assert time.monotonic() < deadline
            time.sleep(0.05)
        ended = leftovers.end_marked({"PIPEPLAN_RUN_MARK": f"5f0c.{ours - 1}"})
        assert sorted(ended) == sorted([rank.pid, headless.pid])
        assert rank.wait(10) == -signal.SIGKILL and headless.wait(10) == -signal.SIGKILL
        assert all(p.poll() is None for p in everyone if p not in (rank, headless))
    finally:
        for p in everyone:
            p.kill()
            p.wait(10)


API_THREAD_SCRIPT = """\
import os, subprocess, sys, threading, time
import pipeplan

during = []

def start_during():  # the script's own process, started as the ranks run
    while "PIPEPLAN_LAUNCHER_PID" not in os.environ:
        time.sleep(0.05)
    during.append(subprocess.Popen(["sleep", "60"]))

thread = threading.Thread(target=start_during)
thread.start()
pipeplan.run(model="vit-digits", nproc=2, global_batch=16, epochs=1, max_steps_per_epoch=2,
             name="a", runs_dir=sys.argv[1])
thread.join()
print(during[0].poll(), flush=True)
during[0].kill()
"""


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_a_process_an_api_caller_starts_during_a_run_is_not_the_runs(tmp_path):
    """Found by the eighty-second round: the run's marks were in the launcher's environment,
    so a process another thread of a script calling `pipeplan.run` started during the run
    carried them, and was ended with the run. The mark is the ranks' alone (RANK_SHELL
    gives it): the script's process runs on."""
    (tmp_path / "script.py").write_text(API_THREAD_SCRIPT)
    root = Path(cli.__file__).resolve().parent
    done = subprocess.run(
        [sys.executable, str(tmp_path / "script.py"), str(tmp_path / "runs")],
        capture_output=True, text=True, timeout=100, cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(root)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout == "None\n"  # still running when the call returned


LAUNCHER_CHILD_LOAD = """\
import os, resource, subprocess, sys, torch

NESTED = "import time; from pipeplan.exits import *; mark_lineage(lineage()); time.sleep(300)"

def load():
    if not os.environ.get("RANK"):  # the launcher's check of the data: servers of its own
        servers = [
            subprocess.Popen(["sleep", "300"], start_new_session=True),
            # one that sets its own file locks limit, soft and hard, and a pipeplan command
            # of its own, which marks itself again (the eighty-sixth round: both were left)
            subprocess.Popen(["sleep", "300"], preexec_fn=lambda: resource.setrlimit(10, (5, 5))),
            subprocess.Popen([sys.executable, "-c", NESTED]),
        ]
        for server in servers:
            with open(os.path.join({folder!r}, str(server.pid)), "w"):
                pass
    x, y = torch.zeros(80, 1, 8, 8), torch.arange(80) % 10
    return torch.utils.data.TensorDataset(x, y), torch.utils.data.TensorDataset(x, y)
"""


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_a_process_the_data_code_starts_in_the_launcher_is_ended_with_the_command(tmp_path):
    """Found by the eighty-second round: a process the data function started with
    `start_new_session=True` as the launcher checked it (before any rank, without the run's
    mark) outlived `pipeplan run`, and held its output: `pipeplan run … | cat` never ended.
    The command ends what is left of its children at its end (it adopts their orphans), and
    says so on success; the pipe closes with it."""
    children = tmp_path / "children"
    try:
        done = _ran_with_children(tmp_path, LAUNCHER_CHILD_LOAD, children)
        pids = [int(p.name) for p in children.iterdir()]
        assert done.returncode == 0, done.stderr
        assert len(pids) >= 1, pids  # (the check may load the data more than once)
        assert done.stderr.rstrip().endswith(" running: killed"), done.stderr
        for pid in pids:
            assert str(pid) in done.stderr.splitlines()[-1]
            assert faults.session_of(pid) is None or _state(pid) == "Z", _state(pid)
    finally:
        for child in children.iterdir():
            with contextlib.suppress(OSError):
                os.kill(int(child.name), signal.SIGKILL)


@pytest.mark.timeout(150)
def test_what_the_shell_gave_the_command_is_not_ended_with_it(tmp_path):
    """Found by the eighty-third round: the command's end killed every child it had, and a
    process the shell started before `exec pipeplan …` is one (a job script's helper, `exec >
    >(tee log)`'s consumer, another `pipeplan run`): killed, and "the data code left" said by
    `pipeplan models`, which runs none. What the command had as it started is not its own,
    and a command whose data code never ran ends nothing; the server its data code starts is
    still ended."""
    children = tmp_path / "children"
    children.mkdir()
    (tmp_path / "forks.py").write_text(
        LAUNCHER_CHILD_LOAD.replace("{folder!r}", repr(str(children)))
    )
    # and a helper that starts a daemon once the command runs: adopted by the command (its
    # parent ended), not the command's (the eighty-fourth round: killed, "the data code left")
    later = "(sleep 1; sleep 300 > /dev/null 2>&1 & echo $! > later.tmp; mv later.tmp later)"
    shell = f'sleep 300 > /dev/null 2>&1 & echo $! > helper; {later} & exec "$@"'
    helpers = []
    try:
        for argv in (
            ["models"],
            ["run", "--prepare-only", "--model", "vit-digits", "--data", "forks.py:load"],
        ):
            done = subprocess.run(
                ["sh", "-c", shell, "sh", sys.executable, "-m", "cli", *argv],
                cwd=tmp_path, capture_output=True, text=True, timeout=120,
                env={**os.environ, "PYTHONPATH": str(Path(cli.__file__).resolve().parent)},
            )  # fmt: skip
            helpers.append(int((tmp_path / "helper").read_text()))
            assert (tmp_path / "later").exists(), done.stderr  # it started as the command ran
            helpers.append(int((tmp_path / "later").read_text()))
            (tmp_path / "later").unlink()
            assert done.returncode == 0, done.stderr
            assert _state(helpers[-2]) not in (None, "Z"), done.stderr
            assert _state(helpers[-1]) not in (None, "Z"), done.stderr
            if argv == ["models"]:  # no data code ran: nothing ended, nothing said
                assert "left" not in done.stderr, done.stderr
        servers = [int(p.name) for p in children.iterdir()]
        assert servers
        assert done.stderr.splitlines()[-1].endswith(" running: killed"), done.stderr
        for pid in servers:
            assert str(pid) in done.stderr.splitlines()[-1]
            assert _state(pid) in (None, "Z"), _state(pid)
        assert str(helpers[-1]) not in done.stderr and str(helpers[-2]) not in done.stderr
    finally:
        for pid in helpers + [int(p.name) for p in children.iterdir()]:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


RESPAWNING_LOAD = """\
import os, subprocess, threading, torch

def supervise():  # a helper started again whenever it ends
    while True:
        helper = subprocess.Popen(["sleep", "120"], start_new_session=True)
        with open(os.path.join({folder!r}, str(helper.pid)), "w"):
            pass
        helper.wait()

def load():
    threading.Thread(target=supervise, daemon=True).start()
    x, y = torch.zeros(80, 1, 8, 8), torch.arange(80) % 10
    return torch.utils.data.TensorDataset(x, y), torch.utils.data.TensorDataset(x, y)
"""


@pytest.mark.timeout(150)
def test_a_helper_the_data_code_starts_again_does_not_outlive_the_command(tmp_path):
    """Found by the eighty-fourth round: a thread of the data code's that starts its helper
    again whenever it ends started one after the command's last sweep, which outlived the
    command and held its output (`pipeplan run … | cat`: 40 s, a helper's whole life). From
    the last sweep on, the code starts no process (refused), and its thread ends in silence:
    the output's pipe closes with the command (`capture_output` reads it to its end)."""
    helpers = tmp_path / "helpers"
    helpers.mkdir()
    (tmp_path / "sup.py").write_text(RESPAWNING_LOAD.replace("{folder!r}", repr(str(helpers))))
    argv = ["run", "--prepare-only", "--model", "vit-digits", "--data", "sup.py:load"]
    try:
        done = subprocess.run(
            [sys.executable, "-m", "cli", *argv], cwd=tmp_path, capture_output=True,
            text=True, timeout=90,
            env={**os.environ, "PYTHONPATH": str(Path(cli.__file__).resolve().parent)},
        )  # fmt: skip
        pids = [int(p.name) for p in helpers.iterdir()]
        assert done.returncode == 0, done.stderr
        assert pids
        last = done.stderr.splitlines()[-1]
        assert last.startswith("pipeplan: WARNING: the data code left "), done.stderr
        assert last.endswith(" running: killed"), done.stderr
        assert "Traceback" not in done.stderr and "Exception in thread" not in done.stderr
        for pid in pids:
            assert _state(pid) in (None, "Z"), (pid, _state(pid))
    finally:
        for pid in [int(p.name) for p in helpers.iterdir()]:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


STOPPED_WITH_A_TASK_LOAD = """\
import os, threading, time, torch
from concurrent.futures import ThreadPoolExecutor

def load():
    ThreadPoolExecutor(1).submit(threading.Event().wait)  # a task left running
    open(os.path.join({folder!r}, "loading"), "w").close()
    time.sleep(60)  # the launcher's check, stopped here
"""


@pytest.mark.timeout(150)
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_is_not_held_by_the_data_codes_work_left_running(tmp_path, signum):
    """Found by the eighty-fourth round: Ctrl-C or SIGTERM during the launcher's check of
    data code that left a thread pool's task running said its line at once, then the command
    waited 10 s in silence (the exit callbacks join the task), further stops ignored. After a
    stop the callbacks get STOPPED_CALLBACKS_S."""
    folder = tmp_path / "flags"
    folder.mkdir()
    (tmp_path / "stopped.py").write_text(
        STOPPED_WITH_A_TASK_LOAD.replace("{folder!r}", repr(str(folder)))
    )
    # As the console script: its name makes it the command (`startup.is_the_command`).
    code = "import sys; sys.argv[0] = 'pipeplan'; import cli; cli.entry()"
    argv = [sys.executable, "-c", code, "run", "--model", "vit-digits"]
    argv += ["--data", "stopped.py:load", "--prepare-only"]
    env = {**os.environ, "PYTHONPATH": str(Path(cli.__file__).resolve().parent)}
    command = subprocess.Popen(
        argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 90
        while not (folder / "loading").exists():
            assert time.monotonic() < deadline and command.poll() is None
            time.sleep(0.1)
        stopped = time.monotonic()
        command.send_signal(signum)
        _, err = command.communicate(timeout=60)
        took = time.monotonic() - stopped
        assert command.returncode == 128 + signum, err  # (SIGINT: 130)
        assert len(err.splitlines()) == 1, err
        assert took < 1.0 + 4.0, took  # STOPPED_CALLBACKS_S, and a margin for a loaded host
    finally:
        command.kill()
        command.wait()


REAPING_LOAD = """\
import os, subprocess, torch

def load():
    if not os.environ.get("RANK"):  # the launcher's check: its own helper, waited for
        subprocess.Popen(["sleep", "1"])
        while True:  # every child of this process reaped, as a fork-based loader may
            try:
                os.wait()
            except ChildProcessError:
                break
    x, y = torch.zeros(80, 1, 8, 8), torch.arange(80) % 10
    return torch.utils.data.TensorDataset(x, y), torch.utils.data.TensorDataset(x, y)
"""


@pytest.mark.timeout(150)
def test_data_code_that_reaps_every_child_does_not_wait_for_pipeplans_own(tmp_path):
    """Found by the eighty-fourth round: the command's watch was its child, so data code
    reaping every child of its process (`os.wait()` until none is left) waited for it: the
    run hung (the same module returned at once through the API). The watch is nobody's
    child: the check returns once the code's own helper has."""
    (tmp_path / "reaps.py").write_text(REAPING_LOAD)
    argv = [sys.executable, "-m", "cli", "run", "--prepare-only", "--model", "vit-digits"]
    argv += ["--data", "reaps.py:load"]
    env = {**os.environ, "PYTHONPATH": str(Path(cli.__file__).resolve().parent)}
    done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stderr
    assert "torchrun" in done.stdout


DEEP_TREE_LOAD = """\
import os, time, torch

def load():
    if not os.environ.get("RANK") and os.fork() == 0:  # the launcher's check: a chain of 12
        for level in range(12):
            with open(os.path.join({folder!r}, str(os.getpid())), "w"):
                pass
            if level < 11 and os.fork():  # its child is the next level; each one waits
                break
        time.sleep(300)
        os._exit(0)
    time.sleep(1.5)  # (the chain started)
    x, y = torch.zeros(80, 1, 8, 8), torch.arange(80) % 10
    return torch.utils.data.TensorDataset(x, y), torch.utils.data.TensorDataset(x, y)
"""


@pytest.mark.timeout(150)
def test_a_tree_deeper_than_the_sweeps_rounds_is_ended_whole(tmp_path):
    """Found by the eighty-fourth round: the command's end killed what the data code left
    one level a round (each killed process's children came to it next), so a chain deeper
    than its 8 rounds outlived it, and held `… | cat` a minute more. Every descendant is
    stopped, then all are killed, in one round: the output closes with the command."""
    children = tmp_path / "children"
    children.mkdir()
    (tmp_path / "chain.py").write_text(DEEP_TREE_LOAD.replace("{folder!r}", repr(str(children))))
    argv = [sys.executable, "-m", "cli", "run", "--prepare-only", "--model", "vit-digits"]
    argv += ["--data", "chain.py:load"]
    env = {**os.environ, "PYTHONPATH": str(Path(cli.__file__).resolve().parent)}
    try:
        done = subprocess.run(
            argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=90
        )
        pids = [int(p.name) for p in children.iterdir()]
        assert done.returncode == 0, done.stderr
        assert len(pids) % 12 == 0 and pids, pids  # (one chain per load of the check)
        assert done.stderr.rstrip().endswith(f"left {len(pids)} processes (pids " + ", ".join(
            map(str, sorted(pids))) + ") running: killed"), done.stderr  # fmt: skip
        for pid in pids:
            assert _state(pid) in (None, "Z"), _state(pid)
    finally:
        for child in children.iterdir():
            with contextlib.suppress(OSError):
                os.kill(int(child.name), signal.SIGKILL)


HUNG_SERVER_LOAD = """\
import os, subprocess, threading, time, torch
from concurrent.futures import ThreadPoolExecutor

class Hangs(torch.utils.data.TensorDataset):
    def __getitem__(self, index):
        while {hang}:
            time.sleep(0.1)
        return super().__getitem__(index)

def load():
    if not os.environ.get("RANK"):  # the launcher's check: a server of its own
        server = subprocess.Popen(["sleep", "300"], start_new_session=True)
        with open(os.path.join({folder!r}, str(server.pid)), "w"):
            pass
        if {leave_task}:  # a task left running: the exit callbacks wait on it
            ThreadPoolExecutor(1).submit(threading.Event().wait)
    x, y = torch.zeros(80, 1, 8, 8), torch.arange(80) % 10
    return Hangs(x, y), torch.utils.data.TensorDataset(x, y)
"""


@pytest.mark.timeout(150)
@pytest.mark.parametrize("end", ["a hung read", "late callbacks", "SIGTERM"])
def test_what_the_data_code_started_is_ended_on_every_way_out(tmp_path, end):
    """Found by the eighty-third round: three ends of the command skipped its sweep of what
    the data code left (a server in a session of its own), which then held `pipeplan … | cat`
    open for minutes: the launcher's watch over a hung read (its one line, exit 2), the
    exit callbacks' time limit (a task the code left running), and a stop as those callbacks
    wait. Each ends the server now; the output's pipe closes with the command."""
    children = tmp_path / "children"
    children.mkdir()
    code = {"hang": end == "a hung read", "leave_task": end != "a hung read"}
    (tmp_path / "forks.py").write_text(
        HUNG_SERVER_LOAD.replace("{folder!r}", repr(str(children))).format(**code)
    )
    argv = [sys.executable, "-c"]
    argv += [
        # As the console script: its name makes it the command (`startup.is_the_command`).
        "import sys; sys.argv[0] = 'pipeplan'; from pipeplan import exits; "
        f"exits.EXIT_CALLBACKS_S = {1.0 if end == 'late callbacks' else 100.0}; "
        "import cli; cli.entry()",
        "run", "--model", "vit-digits", "--data", "forks.py:load", "--nproc", "1",
        "--collective-timeout", "2",
    ]  # fmt: skip
    argv += [] if end == "a hung read" else ["--prepare-only"]
    env = {**os.environ, "PYTHONPATH": str(Path(cli.__file__).resolve().parent)}
    with open(tmp_path / "out", "w") as out:
        command = subprocess.Popen(
            argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=out, text=True
        )
    try:
        if end == "SIGTERM":  # once the run is prepared: its callbacks then wait
            assert "torchrun" in command.stdout.readline()
            time.sleep(1.0)
            command.send_signal(signal.SIGTERM)
        # The output's pipe closes with the command: nothing it started holds it.
        rest = _read_within(command.stdout, 60)
        command.wait(10)
        said = (tmp_path / "out").read_text().splitlines()
        code = {"a hung read": 2, "late callbacks": 0, "SIGTERM": 143}[end]
        assert command.returncode == code, (said, rest)
        servers = [int(p.name) for p in children.iterdir()]
        assert servers, said
        for pid in servers:
            assert _state(pid) in (None, "Z"), _state(pid)
    finally:
        command.kill()
        for child in children.iterdir():
            with contextlib.suppress(OSError):
                os.kill(int(child.name), signal.SIGKILL)


# A process whose main thread ends (the raw exit system call) while another runs on: its
# state reads Z, as a zombie's does.
ZOMBIE_LEADER = (
    "import ctypes, threading, time; threading.Thread(target=time.sleep, args=(300,)).start(); "
    "time.sleep(0.2); ctypes.CDLL(None).syscall({exit_call}, 0)"
)
ZOMBIE_LEADER_LOAD = """\
import os, subprocess, sys, time, torch

def load():
    if not os.environ.get("RANK"):  # the launcher's check
        child = subprocess.Popen([sys.executable, "-c", {code!r}], start_new_session=True)
        with open(os.path.join({folder!r}, str(child.pid)), "w"):
            pass
        time.sleep(1.0)  # its main thread has ended
    x, y = torch.zeros(80, 1, 8, 8), torch.arange(80) % 10
    return torch.utils.data.TensorDataset(x, y), torch.utils.data.TensorDataset(x, y)
"""


@pytest.mark.timeout(150)
def test_a_child_whose_main_thread_ended_is_ended_too(tmp_path):
    """Found by the eighty-third round: a child of the data code whose main thread had ended
    while another ran on reads as a zombie (Z), and the command's sweep took it for dead:
    never killed, it held `… | cat` open, and the sweep waited for it to be reaped in each
    of its rounds (12 s more). It is killed, named, and the command ends at once."""
    import platform

    exit_call = {"x86_64": 60, "aarch64": 93}.get(platform.machine())
    if exit_call is None:
        pytest.skip("the exit system call's number is known here for x86_64 and aarch64")
    children = tmp_path / "children"
    children.mkdir()
    code = ZOMBIE_LEADER.format(exit_call=exit_call)
    (tmp_path / "forks.py").write_text(ZOMBIE_LEADER_LOAD.format(code=code, folder=str(children)))
    argv = [sys.executable, "-m", "cli", "run", "--prepare-only", "--model", "vit-digits"]
    argv += ["--data", "forks.py:load"]
    env = {**os.environ, "PYTHONPATH": str(Path(cli.__file__).resolve().parent)}
    try:
        done = subprocess.run(
            argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=100
        )
        (pid,) = [int(p.name) for p in children.iterdir()]
        assert done.returncode == 0, done.stderr
        assert f"left 1 process (pid {pid}) running: killed" in done.stderr, done.stderr
        try:
            threads = len(os.listdir(f"/proc/{pid}/task"))
        except OSError:
            threads = 0  # gone: reaped
        assert _state(pid) in (None, "Z") and threads <= 1, (_state(pid), threads)
    finally:
        for child in children.iterdir():
            with contextlib.suppress(OSError):
                os.kill(int(child.name), signal.SIGKILL)


def _read_within(stream: typing.IO[str], timeout_s: float) -> str:
    """What `stream` gives to its end, which must come within `timeout_s`."""
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.append(stream.read()), daemon=True)
    reader.start()
    reader.join(timeout_s)
    assert not reader.is_alive(), f"the output was still open after {timeout_s} s"
    return got[0]


def _ran_with_children(tmp_path: Path, code: str, children: Path) -> subprocess.CompletedProcess:
    """`pipeplan run --data forks.py:load` of 2 ranks, `code` in forks.py writing the pid of
    each child it starts into `children` (made here): the finished command."""
    children.mkdir()
    (tmp_path / "forks.py").write_text(code.replace("{folder!r}", repr(str(children))))
    argv = shlex.split(
        "run --nproc 2 --name x --model vit-digits --global-batch 16 --epochs 1 "
        f"--max-steps-per-epoch 2 --data {tmp_path / 'forks.py'}:load "
        f"--runs-dir {tmp_path / 'runs'}"
    )
    return subprocess.run(
        [sys.executable, "-m", "cli", *argv], capture_output=True, text=True, timeout=100,
        cwd=Path(cli.__file__).resolve().parent,
    )  # fmt: skip


def _state(pid: int) -> str | None:
    """Process `pid`'s state letter (/proc/PID/stat), None where it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


@pytest.mark.timeout(60)
def test_a_session_whose_leader_lives_is_not_a_ranks_left_behind(tmp_path):
    """Found by the eighty-first round: a rank's pid, taken after it ended by another
    program that started a session of its own (forced through ns_last_pid), made the
    launcher's sweep kill that program's child. A leader that lives is not a rank that
    ended: its session is left alone; one whose leader is gone is swept of what started
    while the rank was alive, and only that (the tester's case: the program that took the
    number had ended, leaving its child)."""
    code = (
        "import os, time\n"
        "os.setsid()\n"
        "if os.fork() == 0:\n"
        "    time.sleep(60); os._exit(0)\n"
        "print(os.getpid(), flush=True); time.sleep(60)\n"
    )
    leader = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert leader.stdout.readline().strip() == str(leader.pid)
        deadline = time.monotonic() + 10
        child = None
        while child is None and time.monotonic() < deadline:  # its forked child, in its session
            child = next(
                (
                    int(p) for p in os.listdir("/proc")
                    if p.isdigit() and int(p) != leader.pid
                    and faults.session_of(int(p)) == leader.pid
                ),
                None,
            )  # fmt: skip
        assert child is not None
        seen = faults.boot_ticks()
        assert faults.end_left_behind({leader.pid: seen}) == []
        assert _state(child) not in (None, "Z")
        leader.kill()
        leader.wait(10)
        # An ended leader's session: its child started before the leader was last seen alive
        # is swept; one started after it is another program's, left alone.
        assert faults.end_left_behind({leader.pid: faults.started_at(child) - 1}) == []
        assert _state(child) not in (None, "Z")
        assert faults.end_left_behind({leader.pid: seen}) == [child]
    finally:
        leader.kill()
        leader.wait(10)
