"""Text files as training data: JSONL or CSV rows of text (and a label), tokenized offline with
a local tokenizer directory and padded or cut to the model's sequence length.

    corpus = read_corpus("reviews.jsonl", seed=0)     # 20 % held out, drawn from the seed
    corpus = read_corpus("train.jsonl,eval.csv")      # or both splits given, in that order
    data = tokenize(corpus, "tok/", seq)              # a TaskData with padded=True

JSONL: one object per line with a string "text" and, for classification, a "label": a JSON
integer ≥ 0 (a class index) or a JSON string (a name, always: "1" is the name "1"); names are
numbered in sorted order, or as the model's config.json numbers them when its id2label names
the same classes (`models.label_order`; `tokenize` follows the model), and become the
exported model's id2label. Of TRAIN,EVAL, EVAL may hold no label that no TRAIN row has (a
class nothing trains); one file's classes are those of all its rows, the held-out ones
included. A name is read without the
whitespace around it (a CSV written "text, label" style), so one corpus must spell each name
one way: "a" beside " a" is refused, naming both rows, rather than merged into one class; so
are two names a reader cannot tell apart (NFC "café" beside NFD "café", "pos" beside "pos"
with a zero-width space), rather than kept as two classes. Case is kept.
CSV: a header row naming a `text` column and optionally a `label` column; its labels are
class indices only when every one is a canonical decimal integer ("1", not "01"), else all
are names. Text without labels trains a causal LM: its labels are the input ids,
IGNORE_INDEX at padding. A text is read up to CHARS_PER_TOKEN characters per token of the
length, and farther (up to MAX_READ_GROWTH times) when those leave it short of the length
while the text goes on; what lies beyond is cut anyway. Padding is what the tokenizer padded
(its attention mask 0), written as `models.PADDING` in the ids, so a real token equal to the
pad token (pad = eos, pad = unk) stays a token; the tokenizer's pad token must be the model's
pad_token_id (what layer 0 embeds there), and the model carries the padding mask between
stages (docs/architecture.md §4.17). A built-in model takes the tokenizer's bos, eos, sep and
cls ids (what `generate` and the export read); a folder naming other tokens is warned about
(`_special_ids_agree`). A tokenizer slower than MAX_SECONDS_PER_CHAR a character
is refused.
"""

from __future__ import annotations

import collections
import contextlib
import csv
import dataclasses
import difflib
import io
import itertools
import json
import logging
import math
import os
import re
import time
import unicodedata
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from executor.data import MAX_LABELS, TaskData, TensorPairs, descriptor_2_held
from pipeplan.errors import BadArgumentError, InputFileError, excerpt, quoted
from pipeplan.formats.base import (
    NAMES_NOTHING,
    TooManyDigits,
    as_seen,
    check_input_file,
    json_loads,
    label_name_problem,
    open_input,
    printable,
    read_input,
    unique_keys,
)
from pipeplan.formats.presets import config_path

if TYPE_CHECKING:
    from pipeplan.models import LayerSequence

log = logging.getLogger("pipeplan.run")
TEXT_SUFFIXES = (".jsonl", ".csv")
# The keys of a JSONL row and the columns of a CSV header; anything else is refused: a row
# spelling "lable" trained a decoder on labelled text as a causal LM, silently (22nd round).
ROW_KEYS = ("text", "label")
EVAL_FRACTION = 0.2  # held out of a single file
ID_BYTES = 8  # a token id's, int64: what embeddings and the losses take
# The share of a CSV's labels at most that, read as names beside class indices (canonical
# digits), are taken for typos of indices and refused (`1.0`, `-1` in a column of 0 and 1);
# more are names, all of them, as the column then names its classes.
TYPO_SHARE = 0.1
# What marks a directory as holding a tokenizer (transformers writes both).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
# The small JSON files transformers reads beside tokenizer.json (tokenizer.json itself is
# parsed by the `tokenizers` library, which names a broken one).
TOKENIZER_JSON = ("tokenizer_config.json", "special_tokens_map.json", "added_tokens.json")
# The largest tokenizer file read (tokenizer.json, a vocabulary, merges, a sentencepiece
# model): the Hub's largest are about half of it (Gemma's tokenizer.json ~33 MB, XLM-R's and
# NLLB's ~17 MB, Llama 3's ~9 MB). The `tokenizers` library holds up to about LOAD_FACTOR
# times a tokenizer.json's size as it parses it (a 175 MB one peaked at 4.84 GB, the
# sixty-ninth round) and aborts the process where an allocation fails, with no line at all:
# a file past this, or one the memory left cannot parse, is refused before it is read.
MAX_TOKENIZER_FILE_BYTES = 64 << 20
TOKENIZER_LOAD_FACTOR = 32

Row = tuple[str, Any, int]  # (text, label as written or None, line number)
# Characters of a text the tokenizer sees, per token of --seq-len: far more than any real
# token needs, so what is cut lies beyond the length anyway. The fast tokenizers encode a whole
# text before truncating it: a 100 MB line made them abort on a 1.6 GB allocation.
CHARS_PER_TOKEN = 64
# How much farther a text is read, doubling, when its first CHARS_PER_TOKEN characters a token
# leave padding while the text goes on: whitespace makes no token and a long unknown word
# (a URL, base64) one. Found by the twenty-seventh round: texts starting with 1,100 spaces
# trained as all padding at --seq-len 16, silently. A text still short at 1,024 characters a
# token is named in one warning: reading on without bound is what the cut is there to stop.
MAX_READ_GROWTH = 16
# The slowest a tokenizer may encode, in seconds a character (CHARS_PER_TEXT more a text).
# Real fast tokenizers take 0.1-1 µs a character (measured for the twenty-seventh round on
# a loaded 2-core machine: WordLevel, WordPiece with BERT's normalizer, a GPT-2-style
# byte-level BPE and a Metaspace Unigram took 0.4-0.9 µs a character of long texts, and
# 10-30 µs a text besides); 50 µs leaves room for a machine 50 times slower or busier. Found
# by that round: a Split pre-tokenizer's backtracking regular expression `(a|a)+$` took
# 0.1-0.2 s a text of 32 characters, each search just under the regex library's retry limit
# (past it the library panics, which `rust_panics_named` names): hours for 100,000 rows.
MAX_SECONDS_PER_CHAR = 50e-6
# What each text counts as beyond its characters: transformers' own cost a text (padding it,
# returning lists; 10-30 µs) made texts of a few characters look slow a character.
CHARS_PER_TEXT = 64
# How long encoding is timed before its pace is judged, again and again: a loaded machine's
# pauses average out over a second, and a slow tokenizer is refused within a few. Time is the
# lesser of the wall clock and the process's CPU time: the wall clock runs on while the
# machine serves others or the process is stopped (Ctrl-Z), the CPU time runs faster while
# the library's threads encode in parallel; neither is the tokenizer's cost.
JUDGED_AFTER_SECONDS = 1.0
# Texts are encoded in chunks, so the pace is measured before most are encoded: the first of
# FIRST_CHUNK texts, each next one at most twice the last one's texts and what CHUNK_SECONDS
# takes at the pace measured (a slow tokenizer spends about a chunk past the second judged).
FIRST_CHUNK = 16
CHUNK_SECONDS = 0.25
# How many times longer a tokenizer's Replace normalizers may make a text (the real ones
# shorten or keep it: Llama's " " → "▁", T5's " {2,}" → " "). Found by the twenty-first round:
# one Replace of "o" by 1,000 characters took 12 s for 64 texts of --seq-len 128 (0.3 s
# without it), and two in a sequence (10^6 times) were killed for memory.
MAX_REPLACE_GROWTH = 16
# How many characters a tokenizer's normalizer may add to every text whatever its length (a
# Prepend; a regular-expression Replace matching the empty end): a token's worth of characters.
# Llama's Prepend adds one "▁". Found by the twenty-sixth round: a Prepend of 1.2 M characters
# (a 1.2 MB tokenizer.json) took 5.8 GB for 250 short rows, a Rust abort under `ulimit -v`, and
# every text became the prefix's first --seq-len tokens.
MAX_ADDED_CHARS = CHARS_PER_TOKEN
# Texts given to the tokenizer at a time, and their characters at most (at least one text):
# the library's encodings of a call and transformers' Python lists of them take ~2.5 KB a
# short text, so they are made a chunk at a time and written into one preallocated tensor of
# ids. Found by the twenty-seventh round: one call over 1,000,000 short rows peaked at 3 GB
# (a 30 MB file), and under `ulimit -v` the library aborted on a failed allocation, silently.
ENCODE_TEXTS = 4096
ENCODE_CHARS = 1 << 20
# What encoding takes besides the ids (`encode_room`), kept free when the ids are sized
# against the memory left (`_check_room`): the library allocates outside Python, and aborts,
# with no line, when an allocation fails. It loads the tokenizer, then encodes a chunk at a
# time, so what it takes is bounded by a chunk (ENCODE_TEXTS texts padded to --seq-len, and
# up to ENCODE_CHARS characters before they are cut), not by the rows: ENCODE_FIXED plus
# ENCODE_TOKEN_BYTES for each token of the largest chunk (a character counted as a token).
# Measured (twenty-eighth round) on 2 cores with a WordPiece tokenizer of 30,522 words, as the
# least `ulimit -v` headroom above the ids in which tokenizing succeeds (bisected to 8 MiB; a
# failed allocation is a Rust abort), against this room:
#   80 short rows, --seq-len 16 (3 K tokens a chunk)          24 MiB     room 161 MiB
#   20,000 short rows, --seq-len 16 (0.47 M tokens)           157 MiB    room 271 MiB
#   20,000 short rows, --seq-len 128 (0.92 M tokens)          178 MiB    room 383 MiB
#   300 rows of 10,000 characters, --seq-len 512 (1.2 M)      150-300    room 454 MiB
#   20,000 short rows, --seq-len 512 (2.5 M tokens)           520 MiB    room 767 MiB
# The fixed part is mostly glibc's: each thread that allocates (the library's, one a core)
# reserves a 64 MiB heap of address space once a chunk outgrows the main arena, so the need
# jumps from 24 MiB to ~160 MiB on 2 cores (a machine of more cores may reserve more heaps;
# not measured). The resident peak is lower (RSS grew 20 MiB for 80 rows, 360 MiB for the
# last). The per-token bytes are the slope of the large chunks (~230) rounded up: the room is
# 1.3-1.5 times the measured need where chunks are large, 1.7 times at 0.47 M tokens.
# The fixed 512 MiB this replaces made 80 rows at --seq-len 16 (12 KiB of ids) "take
# 512 MiB as token ids" and refused them with 486 MiB left.
ENCODE_FIXED = 160 << 20
ENCODE_TOKEN_BYTES = 256
# Rows read between two looks at the memory left while a data file is read, and the least
# that must stay free: a file of short rows holds ~100 bytes of Python objects a row (a 1 GiB
# file of 12-byte rows, 9 GB), and the kernel kills a process out of physical memory unwarned.
ROWS_BETWEEN_LOOKS = 1 << 16


@dataclass(frozen=True)
class Corpus:
    """Texts and labels (label ids; None for plain text) of both splits."""

    name: str
    train: list[str]
    eval: list[str]
    train_labels: list[int] | None
    eval_labels: list[int] | None
    label_names: list[str] | None = None  # when the files name their labels
    # The line each text was read from: TRAIN's file (the one file's) and EVAL's.
    train_lines: list[int] = field(default_factory=list)
    eval_lines: list[int] = field(default_factory=list)

    def where(self, held_out: bool, index: int) -> tuple[int, int]:
        """The file (0: TRAIN's, or the one file's; 1: EVAL's) and line the `index`th training
        (or `held_out`) text was read from, in the order they were read:
        `corpus.where(True, 0)` → (0, 12) for a held-out text of line 12 of the one file."""
        if held_out:
            return len(self.name.split(",")) - 1, self.eval_lines[index]
        return 0, self.train_lines[index]

    @property
    def labelled(self) -> bool:
        return self.train_labels is not None

    @property
    def num_labels(self) -> int:
        """Classes: the named labels, or the largest label id + 1."""
        if self.label_names is not None:
            return len(self.label_names)
        return 1 + max([*(self.train_labels or []), *(self.eval_labels or []), 0])

    def numbered(self, order: list[str]) -> Corpus:
        """This corpus with its named labels numbered in `order`, the same names in another
        order (a model's id2label: `models.label_order`).

            corpus.numbered(["pos", "neg"]).train_labels   # [0, 1] where "pos", "neg"
        """
        if self.label_names is None or order == self.label_names:
            return self
        if sorted(order) != sorted(self.label_names):
            raise ValueError(f"{order} are not the names {self.label_names} in another order")
        at = {name: i for i, name in enumerate(order)}
        new = [at[name] for name in self.label_names]  # old id → new id
        return dataclasses.replace(
            self,
            train_labels=[new[i] for i in self.train_labels or []],
            eval_labels=[new[i] for i in self.eval_labels or []],
            label_names=list(order),
        )


def is_text_spec(spec: str) -> bool:
    """`reviews.jsonl`, `train.csv,eval.csv`: one or two text files."""
    parts = spec.split(",")
    return len(parts) <= 2 and all(p.lower().endswith(TEXT_SUFFIXES) for p in parts)


def not_text(spec: str) -> str:
    """Why --tokenizer does not apply to --data `spec`: a file of another extension is named
    as such (found by the twenty-seventh round: `d.json` was told to give a text file, which
    it is), anything else (a built-in, module:function) as not text.

        not_text("d.json")   # "--data 'd.json': a text file is FILE.jsonl or FILE.csv, not …"
    """
    other = [Path(p).suffix for p in spec.split(",") if ":" not in p and Path(p).suffix]
    other = [suffix for suffix in other if suffix.lower() not in TEXT_SUFFIXES]
    if other:
        return (
            f"--data {quoted(spec)}: a text file is FILE.jsonl or FILE.csv, not {other[0]}; "
            "rename it to the extension of its content (--tokenizer applies to text files)"
        )
    # The data named: `--data train` (meant train.jsonl) or a folder was told only about
    # --tokenizer, which was right (the fifty-fourth round).
    return f"--tokenizer applies to text files: --data FILE.jsonl or FILE.csv, not {quoted(spec)}"


def check_two_files(spec: str) -> None:
    """TRAIN,EVAL are two files: the same one twice (`a.jsonl,a.jsonl`, or through a link or
    another spelling of its path) held out the very rows it trained on, accepted silently
    (twentieth round). BadArgumentError naming --data; a file missing is left to the reader.

        check_two_files("train.jsonl,./train.jsonl")   # BadArgumentError: "--data names …"
    """
    files = [Path(p) for p in spec.split(",")]
    try:
        same = len(files) == 2 and files[0].samefile(files[1])
    except OSError:  # one is missing or unreadable: the reader names it
        return
    if same:
        raise BadArgumentError(
            f"--data names one file twice ({quoted(spec)}): held-out rows must be other rows than "
            f"the training rows; give the file alone ({EVAL_FRACTION:.0%} of it is held out) "
            "or TRAIN,EVAL of two different files"
        )


# --------------------------------------------------------------------------- reading


def read_corpus(spec: str, seed: int = 0) -> Corpus:
    """The texts and labels of `spec`: one file (EVAL_FRACTION of it held out, drawn from
    `seed`; its classes are those of all its rows, so a class whose rows are all held out
    still has its id and its row of the head) or `TRAIN,EVAL` (a classifier's EVAL holds no
    class TRAIN lacks: `check_eval_labels`).
    InputFileError naming file and line on anything malformed."""
    files = [Path(p) for p in spec.split(",")]
    kinds = _LabelKinds()  # one kind of label across both files
    spellings = _Spellings()  # one spelling of each label across both files
    rows = [_read_rows(path, kinds, spellings) for path in files]
    for index, (path, split) in enumerate(zip(files, rows, strict=True)):
        if not split:  # an empty EVAL trained with no evaluation at all (held-out accuracy -)
            role = " (the held-out file of --data TRAIN,EVAL)" if index else ""
            raise InputFileError(f"{path}: no rows of text{role}")
    labelled = {label is not None for split in rows for _, label, _ in split}
    if len(labelled) > 1:
        raise InputFileError(
            f"{spec}: some rows have a label and some do not; label every row (classification) "
            "or none (causal-lm)"
        )
    kinds.check_indices()
    names = None  # plain text
    if True in labelled:
        names = _label_names([label for split in rows for _, label, _ in split])
    if len(rows) == 1:
        rows = _hold_out(rows[0], seed)
        if not rows[1]:  # as an empty EVAL: it trained with no evaluation (52nd round)
            raise InputFileError(
                f"{spec}: {len(rows[0])} row{'s' if len(rows[0]) != 1 else ''} of text, of "
                f"which {EVAL_FRACTION:.0%} holds none out: it would train with no evaluation; "
                "give at least 3 rows, or --data TRAIN,EVAL"
            )
    train, eval_ = (_columns(split, names) for split in rows)
    return Corpus(spec, train[0], eval_[0], train[1], eval_[1], names or None, train[2], eval_[2])


def _read_rows(path: Path, kinds: _LabelKinds, spellings: _Spellings) -> list[Row]:
    try:
        # utf-8-sig: Excel's "CSV UTF-8" starts with a byte order mark, which is not part of
        # the first column's name (the data.json sha256 still hashes the raw bytes). Checked
        # as opened (`open_input`): a FIFO swapped in after a stat blocked the open forever.
        with (
            open_input(path, why="too large to read as text data") as raw,
            io.TextIOWrapper(raw, encoding="utf-8-sig", newline="") as handle,
        ):
            try:
                if path.suffix.lower() == ".csv":
                    return _csv_rows(handle, path, kinds, spellings)
                return _jsonl_rows(handle, path, kinds, spellings)
            except UnicodeDecodeError as exc:
                raise InputFileError(_not_utf8(path, raw, exc)) from None
    except FileNotFoundError:
        raise InputFileError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise InputFileError(f"{path}: cannot read ({exc})") from None
    except MemoryError:  # between two looks of `_check_rows_held`, or under `ulimit -v`
        raise InputFileError(
            f"{path}: out of memory holding its rows; run pipeplan with more memory, or give "
            "fewer rows"
        ) from None


def _not_utf8(path: Path, raw: Any, exc: UnicodeDecodeError) -> str:
    """What reading `path` (open as `raw`) failed on at `exc`, named by the file's line and
    byte offset: the error's own position counts from the start of the decoder's chunk, not
    the file's. Found by the sixty-first round: a bad byte at offset 843,903 (line 15,001)
    was said to be "in position 127", where the file holds plain ASCII.

        _not_utf8(Path("d.jsonl"), raw, exc)
        # "d.jsonl:15001: not UTF-8 text (byte 0xe9 at offset 843903 of the file: invalid …"
    """
    raw.seek(0)
    offset, number = 0, 1
    for line in raw:  # no byte of a multi-byte character is b"\n": each line decodes alone
        try:
            line.decode("utf-8")
        except UnicodeDecodeError as bad:
            # Lines as the readers count them: "\r", "\n" and "\r\n" each end one.
            before = line[: bad.start]
            number += before.count(b"\r") - before.count(b"\r\n")
            return (
                f"{path}:{number}: not UTF-8 text (byte 0x{line[bad.start]:02x} at offset "
                f"{offset + bad.start} of the file: {bad.reason}); save it as UTF-8"
            )
        offset += len(line)
        number += 1 + line.count(b"\r") - line.count(b"\r\n")
    # Changed since it was read: where is unknown, and the decoder's position would mislead.
    return f"{path}: not UTF-8 text ({exc.reason}); save it as UTF-8"


def _check_rows_held(path: Path, count: int) -> None:
    """Every ROWS_BETWEEN_LOOKS rows read (`count` so far), InputFileError naming the data
    file when less than ENCODE_FIXED of memory is left (the least encoding them will take,
    `encode_room`): the rows are held as Python objects
    (~100 bytes a short row), and a process out of physical memory is killed with no line.
    Found by the twenty-seventh round: under `ulimit -v` a file of 5,000,000 rows was blamed
    on tokenizer_config.json, read next.

        _check_rows_held(Path("d.jsonl"), 65536)
        # InputFileError: "d.jsonl: out of memory holding its rows (65,536 read; …)"
    """
    from pipeplan.models import memory_left, size_words

    if count % ROWS_BETWEEN_LOOKS or (left := memory_left()) is None or left[0] >= ENCODE_FIXED:
        return
    raise InputFileError(
        f"{path}: out of memory holding its rows ({count:,} read; {size_words(left[0])} of "
        f"{size_words(left[1])} left: {left[2]}); run pipeplan with more memory, or give fewer "
        "rows"
    )


def _jsonl_rows(handle: Any, path: Path, kinds: _LabelKinds, spellings: _Spellings) -> list[Row]:
    rows = []
    for number, line in enumerate(handle, start=1):
        if not line.strip():
            continue
        try:
            # A key twice ({"text": "x", "text": "real", …}): json keeps the last value, and
            # a reader of the line sees the first (twentieth round).
            item = json_loads(line, surrogates_checked=False, object_pairs_hook=unique_keys)
        except TooManyDigits as exc:  # valid JSON: a number no label or text takes
            raise InputFileError(f"{path}:{number}: {exc}") from None
        except json.JSONDecodeError as exc:
            raise InputFileError(f"{path}:{number}: not a JSON object ({_where(exc)})") from None
        except ValueError as exc:
            raise InputFileError(f"{path}:{number}: not a JSON object ({exc})") from None
        except RecursionError:
            raise InputFileError(f"{path}:{number}: nested too deeply") from None
        except MemoryError:  # a line of hundreds of MB: the file is bounded, its lines are not
            raise InputFileError(f"{path}:{number}: out of memory decoding it as JSON") from None
        if isinstance(item, dict):
            _check_row_keys(item, f"{path}:{number}", "key")
        if not isinstance(item, dict) or not isinstance(item.get("text"), str):
            raise InputFileError(f'{path}:{number}: expected an object with a string "text"')
        _check_unicode(item["text"], f"{path}:{number}: the text")
        written = item.get("label")
        label = _label(written, f"{path}:{number}", cell=False)
        # A JSON integer is an id and a JSON string a name, always: "1" parsed as id 1 merged
        # it with `1`, and "01" with "1". Both kinds in one corpus are refused.
        if label is not None:
            kind = "a name" if isinstance(label, str) else "an integer"
            kinds.see(kind, f"{path}:{number}")
            spellings.see(written, label, f"{path}:{number}")
        rows.append((item["text"], label, number))
        _check_rows_held(path, len(rows))
    return rows


def _where(exc: json.JSONDecodeError) -> str:
    """json's complaint about one row's text, placed as a column of the file's line (or its
    end). Found by the sixty-first round: json counted lines within the row, so line 15001
    read "… line 2 column 1 (char 27)" when the row ended too soon (its newline is line 1's).

        _where(json.JSONDecodeError("Expecting ',' delimiter", '{"a": 1\n', 8))
        # "Expecting ',' delimiter at the end of the line"
    """
    if not exc.doc[exc.pos :].strip():
        return f"{exc.msg} at the end of the line"
    return f"{exc.msg} at column {exc.pos + 1}"


def _csv_rows(handle: Any, path: Path, kinds: _LabelKinds, spellings: _Spellings) -> list[Row]:
    # csv.reader, not DictReader: DictReader lets a repeated column name silently overwrite
    # the first, files extra fields under the key None and fills missing ones with None.
    # strict: a quote that never closes is an error, not a field swallowing the rest of the
    # file; a quoted field closing before the line ends may hold newlines (texts do).
    lines = _RecordLines(handle)
    reader = csv.reader(lines, strict=True)
    header = _next_record(reader, lines, path, "the header row")
    if header is None or "text" not in header:
        # What it found, and why (the fifty-second round: 'Text,Label', 'text;label' or
        # tab-separated were told only that a 'text' column was wanted).
        found = "no header row" if not header else f"the header row reads {quoted(header, 80)}"
        hint = (
            "; columns are separated by commas"
            if header and len(header) == 1 and any(c in header[0] for c in ";\t|")
            else "; column names are lower case"
            if header and "text" in (h.strip().lower() for h in header)
            else ""
        )
        raise InputFileError(f"{path}: {found}, with no 'text' column{hint}")
    # Counted once each: header.count per name was quadratic in a header of many columns.
    twice = sorted(name for name, n in collections.Counter(header).items() if n > 1)
    if twice:
        raise InputFileError(f"{path}: the header row names column {twice[0]!r} more than once")
    _check_row_keys(header, f"{path}:1", "column")
    text_at = header.index("text")
    label_at = header.index("label") if "label" in header else None
    rows = []
    while (fields := _next_record(reader, lines, path)) is not None:
        if not fields:  # a blank line, as DictReader skips it
            continue
        if len(fields) != len(header):
            raise InputFileError(
                f"{path}:{reader.line_num}: the row has {len(fields)} fields but the header "
                f"names {len(header)} columns"
            )
        where = f"{path}:{reader.line_num}"
        label = None if label_at is None else _label(fields[label_at], where, cell=True)
        # Every CSV cell is a string: canonical digits are an id or, beside names (in either
        # file), a name too; `_label_names` decides once every label is read.
        kinds.see(_name_or_none(label), where)
        kinds.count(label, where)
        if label is not None:
            spellings.see(fields[label_at], label, where)
        rows.append((fields[text_at], label, reader.line_num))
        _check_rows_held(path, len(rows))
    return rows


def _check_row_keys(keys: Any, where: str, what: str) -> None:
    """Every key of a JSONL row (or column of a CSV header) is one of ROW_KEYS; else
    InputFileError naming it and the nearest known one:
        _check_row_keys({"text": "x", "lable": 1}, "d.jsonl:1", "key")
        # "d.jsonl:1: unknown key 'lable' (did you mean 'label'? a row holds 'text' and, …)"
    """
    for key in keys:
        if key in ROW_KEYS:
            continue
        near = difflib.get_close_matches(key, ROW_KEYS, n=1)
        hint = f"did you mean {near[0]!r}? " if near else ""
        holds = "a row holds" if what == "key" else "the header names"
        raise InputFileError(
            f"{where}: unknown {what} {quoted(key)} ({hint}{holds} 'text' and, for "
            "classification, 'label'; nothing else is read)"
        )


class _RecordLines:
    """The lines of a CSV file, keeping those of the record being read: where a quote that
    never closes opened is found in them."""

    def __init__(self, handle: Any) -> None:
        self.handle = handle
        self.record: list[str] = []
        self.before = 0  # lines read before the current record

    def __iter__(self) -> Any:
        for line in self.handle:
            self.record.append(line)
            yield line

    def start(self) -> None:
        self.before += len(self.record)
        self.record = []


def _next_record(
    reader: Any, lines: _RecordLines, path: Path, what: str = "the row"
) -> list[str] | None:
    """The next CSV record, or None at the end; a malformed one names its line (and `what` it
    is, for a field over the limit)."""
    lines.start()
    try:
        return next(reader, None)
    except csv.Error as exc:
        first = lines.before + 1
        if "field larger than field limit" in str(exc):
            raise InputFileError(_too_long(path, first, len(lines.record), what)) from None
        if "unexpected end of data" not in str(exc):
            # `"a"b`: text after a closing quote; when the quote opened lines earlier (one
            # left unclosed, closed by the next row's quote) the row's first line says where.
            last = first + max(len(lines.record), 1) - 1
            span = f"{first}" if last == first else f"{first}-{last}"
            raise InputFileError(
                f"{path}:{span}: malformed quoting ({exc}); a quoted field must close just "
                "before a comma or the line's end"
            ) from None
        # The unclosed field holds everything after its quote: the record's lines before it
        # are those the record has beyond the field's.
        raw = "".join(lines.record)
        opened = next(csv.reader([raw]))[-1]  # not strict: the field runs to the end
        line = first + raw.count("\n") - opened.count("\n")
        raise InputFileError(
            f"{path}:{line}: a quote opened on this line never closes (it would swallow the "
            "rest of the file); close it, or double a quote inside a quoted field"
        ) from None


def _too_long(path: Path, first: int, lines: int, what: str) -> str:
    """A CSV field longer than csv's limit, in words: it was "malformed quoting" though
    nothing was quoted (twentieth round: a header naming a column of 1 MB). A quote left
    open makes one too, running on over the lines after it.

        _too_long(Path("h.csv"), 1, 1, "the header row")
        # "h.csv:1: the header row holds a field of more than 131,072 characters, …"
    """
    last = first + max(lines, 1) - 1
    span = f"{first}" if last == first else f"{first}-{last}"
    return (
        f"{path}:{span}: {what} holds a field of more than {csv.field_size_limit():,} "
        "characters, the longest a CSV field may be (or a quote opened there runs on, never "
        "closing)"
    )


def _label(value: Any, where: str, cell: bool) -> int | str | None:
    """An integer label, a label name, or None (no label). A JSON string is a name; a CSV
    `cell` (always text) is an integer only when canonical: str(int(x)) == x once stripped.

        _label("01", "d.csv:3", cell=True)   # "01", a name: as an id it merged with "1"
    """
    if value is None:
        return None
    if cell and _canonical_integer(value.strip()):
        digits = value.strip()
        if len(digits) > len(str(MAX_LABELS)):  # beyond it; int() of 4300+ digits raises
            raise InputFileError(
                f"{where}: label {excerpt(digits, 20)} is beyond the limit of {MAX_LABELS}"
            )
        value = int(digits)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        if value >= MAX_LABELS:  # the head would have `value` rows: 10**20 ran out of memory
            raise InputFileError(f"{where}: label {value} is beyond the limit of {MAX_LABELS}")
        return value
    if isinstance(value, str):
        # The rule a model config's id2label is held to as well: the exported model's
        # id2label is these names. One naming nothing is refused as any other non-label.
        why = label_name_problem(value)
        if why is None:
            return value.strip()
        if why != NAMES_NOTHING:
            raise InputFileError(f"{where}: the label {why}")
    # Spelled as the file writes it: a JSON `true` was shown as Python's True (the sixty-fourth
    # round); a CSV cell is text, quoted.
    shown = quoted(value) if cell else excerpt(json.dumps(value))
    raise InputFileError(f"{where}: a label is an integer ≥ 0 or a name, not {shown}")


def _canonical_integer(text: str) -> bool:
    """True for the digits str(int(x)) writes for an integer ≥ 0: not "01", "+1", "1_0" or
    "١" (Arabic-Indic one), which int() reads too but which then merge with another label.
    No int() here: it refuses superscripts (²) and over 4300 digits with a traceback."""
    return text.isascii() and text.isdecimal() and (text == "0" or not text.startswith("0"))


def _name_or_none(label: int | str | None) -> str | None:
    """'a name' for a label read as a name; None for an id from a string (neutral: beside
    names it is one too)."""
    return "a name" if isinstance(label, str) else None


class _LabelKinds:
    """The kind of label the first row gave: a JSON integer beside a name (`1` and `"cat"`)
    would become the name "1", silently another class than id 1.

        kinds.see("an integer", "d.jsonl:3")   # InputFileError if an earlier row had a name
    """

    def __init__(self) -> None:
        self.first: tuple[str, str] | None = None  # (kind, where)
        # CSV cells: how many are read as ids and as names, and the first name (and where).
        self.ids = self.names = 0
        self.first_name: tuple[str, str] | None = None

    def count(self, label: int | str | None, where: str) -> None:
        """Counts a CSV cell's label: an id (canonical digits) or a name."""
        if isinstance(label, int):
            self.ids += 1
        elif label is not None:
            self.names += 1
            self.first_name = self.first_name or (label, where)

    def check_indices(self) -> None:
        """CSV labels most of which are ids (canonical digits) and a few not: InputFileError
        naming the first that is not. Every label became a name, silently, and the classes
        were renumbered in the names' order ("-1", "0", "1": class 0 became id 1), as JSONL
        refuses `1.0` or `-1`. Found by the twenty-seventh round. Labels more than TYPO_SHARE
        of which are names ("01" beside "1" and "2", codes "007" beside "100") stay names.

            kinds.check_indices()   # InputFileError: "c.csv:42: the label '-1' is not a …"
        """
        if self.first_name is None or self.names > TYPO_SHARE * (self.ids + self.names):
            return
        label, where = self.first_name
        raise InputFileError(
            f"{where}: the label {label!r} is not a class index, but {self.ids:,} of the "
            f"{self.ids + self.names:,} labels are (digits only, such as 1); write it as one "
            f"(a column of indices with at most {TYPO_SHARE:.0%} other labels is taken to "
            "hold typos, not names)"
        )

    def see(self, kind: str | None, where: str) -> None:
        if kind is None:
            return
        if self.first is None:
            self.first = (kind, where)
        elif kind != self.first[0]:
            raise InputFileError(
                f"{where}: the label is {kind}, but {self.first[1]} has {self.first[0]}; "
                "label every row with integer ids or every row with names"
            )


class _Spellings:
    """One spelling of each label a reader sees: two spellings read as one label (`"a"` and
    `" a"`, or the CSV cells `1` and ` 1`), or read as two that look the same (`as_seen`:
    NFC and NFD "café", "pos" and "pos\u200b"), are refused at the first row that differs,
    naming both rows: neither merged silently nor kept as two classes no one can tell apart.
    Case is kept: "Pos" and "pos" are two labels.

        spellings.see(" a", "a", "d.jsonl:2")   # InputFileError if d.jsonl:1 wrote "a"
    """

    def __init__(self) -> None:
        self.first: dict[str, tuple[str, str, str]] = {}  # as seen → (written, read, where)

    def see(self, written: Any, label: int | str, where: str) -> None:
        # str(): a CSV id beside names becomes the name of its digits (`_label_names`), and
        # the JSON integer 1 is the CSV cell "1".
        written, read = str(written), str(label)
        earlier, first_read, at = self.first.setdefault(as_seen(read), (written, read, where))
        if earlier == written:
            return
        if first_read == read:
            raise InputFileError(
                f"{where}: the label {written!r} is read as {read!r}, as {at}'s {earlier!r} "
                "is (whitespace around a label is not part of it); spell each label one way"
            )
        # ascii(): the two print alike; their escapes show where they differ.
        raise InputFileError(
            f"{where}: the label {read!a} looks the same as {at}'s {first_read!a} "
            "(another Unicode form or an invisible character); spell each label one way"
        )


def _check_unicode(value: str, what: str) -> None:
    """JSON's "\\ud800" escapes decode to a lone surrogate, which no UTF-8 text holds: the
    tokenizer rejected it with a TypeError."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = value[exc.start : exc.end].encode("unicode_escape").decode()
        raise InputFileError(f"{what} holds {bad}, an unpaired surrogate, not text") from None


def _label_names(labels: list[int | str]) -> list[str]:
    """Names in sorted order when any label is a name (ids are then positions in it); []
    when every label is already an id."""
    if all(isinstance(label, int) for label in labels):
        return []
    return sorted({str(label) for label in labels})


def _hold_out(rows: list[Row], seed: int) -> list[list[Row]]:
    """(train, eval) rows of one file: a seeded EVAL_FRACTION is held out, order kept."""
    held = np.zeros(len(rows), dtype=bool)
    count = round(EVAL_FRACTION * len(rows)) if len(rows) > 1 else 0
    held[np.random.default_rng(seed).permutation(len(rows))[:count]] = True
    return [[r for r, h in zip(rows, held, strict=True) if h == want] for want in (False, True)]


def _columns(
    rows: list[Row], names: list[str] | None
) -> tuple[list[str], list[int] | None, list[int]]:
    """The texts, label ids (None for plain text) and line numbers of `rows`."""
    texts, lines = [text for text, _, _ in rows], [line for _, _, line in rows]
    if names is None:
        return texts, None, lines
    ids = {name: i for i, name in enumerate(names)}
    return texts, [ids[str(label)] if names else int(label) for _, label, _ in rows], lines


def check_eval_labels(corpus: Corpus) -> None:
    """Refuses labels of a classifier's TRAIN,EVAL that the held-out file has and no training
    row has: a class nothing trains cannot be learnt, and its held-out rows are scored
    against it. Found by the twenty-seventh round: an EVAL label "c" (a typo, say) beside
    TRAIN's "a" and "b" made a head of 3 classes, the checkpoint's 2-class head thrown away
    for it; an EVAL id 5 beside TRAIN's 0 and 1 likewise made 6. One file's held-out rows
    are left: its classes are all its rows' (`read_corpus`). Plain text (a causal LM's) and
    labels a causal LM does not use are not classes: `tokenize` calls it for a classifier.

        check_eval_labels(read_corpus("tr.jsonl,ev.jsonl"))
        # InputFileError: "ev.jsonl: the label 'c' of this held-out file of --data …"
    """
    files = corpus.name.split(",")
    if len(files) != 2 or corpus.train_labels is None:
        return
    only = sorted(set(corpus.eval_labels or []) - set(corpus.train_labels))
    if not only:
        return
    names = corpus.label_names
    shown = [quoted(names[i], 40) if names else str(i) for i in only[:5]]
    listed = ", ".join(shown) + (", …" if len(only) > 5 else "")
    which = "the label" if len(only) == 1 else f"{len(only)} labels"
    raise InputFileError(
        f"{files[1]}: {which} {listed} of this held-out file of --data TRAIN,EVAL "
        f"{'is' if len(only) == 1 else 'are'} in no training row (a class nothing trains "
        "cannot be learnt); correct the label, or add training rows of it"
    )


# --------------------------------------------------------------------------- tokenizing


def tokenize(
    corpus: Corpus, tokenizer: str | None, seq: LayerSequence, quiet: bool = False
) -> TaskData:
    """Token ids padded or cut to the model's length; labels, or for a causal LM the ids
    with IGNORE_INDEX at padding. Named labels take the ids `seq`'s id2label gives them when
    it names the same classes (`models.build(label_names=…)` made it so), else sorted ones.
    `quiet`: without the warning on texts read short (given once, by the first build, not
    once per rank).

        data = tokenize(corpus, "tok/", seq)
    """
    if seq.task == "classification":
        check_eval_labels(corpus)
    if seq.task == "classification" and corpus.label_names is not None:
        rows = [seq.config.id2label[i] for i in range(seq.config.num_labels)]
        if sorted(rows) == sorted(corpus.label_names):  # the same names: the model's numbering
            corpus = corpus.numbered(rows)
    directory = tokenizer_directory(tokenizer, seq, corpus.name)
    _check_room(corpus, seq.input_shape[0], seq.task == "causal-lm")
    with rust_panics_named(directory):
        return _tokenize(corpus, directory, seq, quiet)


def _check_room(corpus: Corpus, length: int, causal: bool) -> None:
    """The token ids of every row at --seq-len `length` (a causal LM's targets a second copy,
    labels, a comparison's mask of a byte a token) and what encoding them takes besides
    (`encode_room`) fit in the memory this process has left, checked before the tokenizer is
    loaded: else InputFileError naming the data file, its rows and the limit. The `tokenizers`
    library aborts the process on a failed allocation, with no line (and `rust_panics_named`
    holds descriptor 2 meanwhile); it must never get near one. The two are named apart, and
    fewer rows or a shorter --seq-len advised only where they could make it fit: the
    twenty-eighth round's 80 rows (12 KiB of ids) were said to "take 512 MiB as token ids".

        _check_room(corpus, 512, causal=True)
        # InputFileError: "big.jsonl: 5,000,000 rows at --seq-len 512 take 40.6 GiB as …"
    """
    from pipeplan.models import memory_left, memory_words, size_words

    rows = len(corpus.train) + len(corpus.eval)
    ids = rows * (length * ((2 if causal else 1) * ID_BYTES + 1) + ID_BYTES)
    room = encode_room(corpus, length)
    left = memory_left()
    if left is None or ids + room <= left[0]:
        return
    # Only the fixed part of the room is beyond what fewer rows or a shorter --seq-len shrink.
    fewer = ", or give fewer rows or a shorter --seq-len" if left[0] > ENCODE_FIXED else ""
    raise InputFileError(
        f"{corpus.name}: {rows:,} rows at --seq-len {length} take {size_words(ids)} as token "
        f"ids, and encoding them needs {size_words(room)} more; that is more than "
        f"{memory_words(left)}; run pipeplan with more memory{fewer}"
    )


def encode_room(corpus: Corpus, length: int) -> int:
    """What tokenizing `corpus` at --seq-len `length` takes besides the ids (ENCODE_FIXED and
    ENCODE_TOKEN_BYTES a token of its largest chunk): `encode_room(corpus, 16)` → 161 MiB for
    80 short rows. A chunk holds at most ENCODE_TEXTS texts, padded to `length`, and at most
    ENCODE_CHARS characters before they are cut (`_read` gives each text CHARS_PER_TOKEN a
    token of it first), each counted as a token (the most a tokenizer makes of them)."""
    rows = len(corpus.train) + len(corpus.eval)
    chars, reach = 0, CHARS_PER_TOKEN * length
    for text in itertools.chain(corpus.train, corpus.eval):
        chars += min(len(text), reach)
        if chars >= ENCODE_CHARS:
            break
    tokens = min(rows, ENCODE_TEXTS) * length + min(chars, ENCODE_CHARS)
    return ENCODE_FIXED + tokens * ENCODE_TOKEN_BYTES


@contextlib.contextmanager
def rust_panics_named(directory: Path) -> Iterator[None]:
    """A panic of the `tokenizers` library (Rust) as one InputFileError naming the tokenizer
    directory. Found by the twenty-sixth round: a malformed sentencepiece `Precompiled` table
    in tokenizer.json panics as the library parses it; the panic hook writes its message and a
    backtrace straight to file descriptor 2, and pyo3 raises PanicException, a BaseException.
    Descriptor 2 is therefore held meanwhile (`data.descriptor_2_held`): dropped after a
    panic, passed on otherwise; every other exception passes through unchanged.

        with rust_panics_named(Path("tok")):
            Tokenizer.from_file("tok/tokenizer.json")
        # InputFileError: "tok/tokenizer.json: the tokenizers library cannot use it (…)"
    """
    raw: list[bytes] = []
    panicked = False
    try:
        with descriptor_2_held(raw):
            try:
                yield
            except BaseException as exc:
                if type(exc).__name__ != "PanicException":
                    raise
                panicked = True
                named = directory / "tokenizer.json"  # where the library's tables are
                raise InputFileError(
                    f"{named if named.is_file() else directory}: the tokenizers library cannot "
                    f"use it (it stopped with: {_first(exc)})"
                ) from None
    finally:
        if not panicked and raw:
            os.write(2, raw[0])


def _tokenize(corpus: Corpus, directory: Path, seq: LayerSequence, quiet: bool) -> TaskData:
    length = seq.input_shape[0]
    tok = _load_for(directory, seq)
    _check_backend(tok, directory, length)
    _check_special_tokens_known(tok, directory)
    _check_vocabulary_fits(tok, seq, directory)
    # Every text padded and cut on the right, whatever the tokenizer's sides (its config's, or
    # a tokenizer.json's padding direction, which transformers takes as its side): positions
    # count from the first token, a BERT-style head reads it, and a text was first cut to its
    # start (CHARS_PER_TOKEN a token). Decoder tokenizers often say 'left', for generation.
    tok.padding_side = tok.truncation_side = "right"
    _special_ids_agree(tok, seq, directory, quiet)
    encoder = _Encoder(tok, length, directory, corpus.name)

    def split(held_out: bool) -> TensorPairs:
        texts = corpus.eval if held_out else corpus.train
        ids, short = _read(encoder, texts)
        read_short.extend(corpus.where(held_out, i) for i in short)
        if seq.task != "causal-lm":
            labels = corpus.eval_labels if held_out else corpus.train_labels
            return TensorPairs(ids, torch.tensor(labels or [], dtype=torch.int64))
        return TensorPairs(ids, ids.clone())  # PADDING is IGNORE_INDEX: not a target

    read_short: list[tuple[int, int]] = []  # (file, line) of the texts read short
    train, eval_ = split(held_out=False), split(held_out=True)
    _check_encoded(tok, directory, corpus, [train.inputs, eval_.inputs])
    _check_texts_kept(tok, directory, corpus, [train.inputs, eval_.inputs])
    if read_short and not quiet:
        file, line = min(read_short)
        _warn_read_short(f"{corpus.name.split(',')[file]}:{line}", len(read_short), length)
    return TaskData(corpus.name, train, eval_, augmented=False, padded=True)


def _read(encoder: _Encoder, texts: list[str]) -> tuple[torch.Tensor, list[int]]:
    """Each text's ids at --seq-len, read up to CHARS_PER_TOKEN characters a token of it and,
    where those leave padding while the text goes on, farther, doubling, up to
    MAX_READ_GROWTH times; and the indices of the texts still short of --seq-len then.

        ids, short = _read(encoder, ["good film", " " * 2000 + "good film"])   # short: []
    """
    reach = CHARS_PER_TOKEN * encoder.length
    breaks = encoder.breaks
    ids, used = encoder([_window(text, reach, breaks) for text in texts])
    short = [i for i, n in enumerate(used) if n < encoder.length and len(texts[i]) > reach]
    while short and reach < MAX_READ_GROWTH * CHARS_PER_TOKEN * encoder.length:
        reach *= 2
        again, used = encoder([_window(texts[i], reach, breaks) for i in short])
        ids[short] = again
        short = [
            i
            for i, n in zip(short, used, strict=True)
            if n < encoder.length and len(texts[i]) > reach
        ]
    return ids, short


def _window(text: str, reach: int, breaks: re.Pattern | None = None) -> str:
    """`text` cut to at most `reach` characters, before the word the cut would split: a word cut
    short is another token ("go" where the text says "good"), which the exported tokenizer,
    reading the text whole, never gives, and the run trained on it where it filled the last
    token (the fifty-third round: held-out accuracy 50 %, the export's 100 %). The tokenizer
    splits words at whitespace first (`breaks`: the last of the characters it ends a word at,
    `word_breaks`; the whitespace every tokenizer splits at when not given), so the tokens
    before it are the whole text's. A window with no such character is cut where it ends:
    one word of `reach` characters.

        _window("aaa good film", 6)   # "aaa"
    """
    if len(text) <= reach:
        return text
    # A break at `reach` itself ends a word too.
    last = (breaks or _LAST_SPACE).search(text, 0, reach + 1)
    return text[: last.start()] if last is not None and last.start() > 0 else text[:reach]


# The last space, tab or line end of a string (what `_window` cuts at): the whitespace every
# tokenizer splits words at and no normalizer removes. Python's \s also holds controls that
# BERT's normalizer deletes (\x1c-\x1f, \x0b, \x0c): "good\x1fday" is one word, "goodday",
# to the tokenizer, and a cut there trained on "good" (the fifty-fifth round). Unicode's
# spaces (Zs: the no-break space, U+3000 of CJK text, …) split words as the ASCII space does,
# for BERT's pre-tokenizer and byte-level BPE's alike: a window of words joined by them was cut
# inside one (the fifty-seventh round); so do the line and paragraph separators, U+2028 and
# U+2029 (Zl, Zp: the fifty-eighth round).
_SPACES = " \t\n\r\u2028\u2029" + "".join(
    c for c in map(chr, range(0x80, 0x3001)) if unicodedata.category(c) == "Zs"
)
_LAST_SPACE = re.compile(f"[{_SPACES}](?=[^{_SPACES}]*\\Z)")
# What may end a word for some tokenizer: Python's whitespace (\s: the controls \x1c-\x1f,
# \x0b, \x0c and \x85 among it) and Unicode's spaces and separators.
_MAYBE_BREAKS = "".join(
    c for c in map(chr, range(0x3001)) if c.isspace() or unicodedata.category(c) == "Zs"
)


def word_breaks(tok: Any) -> re.Pattern:
    """What `_window` cuts at for `tok`: the last of the characters its own normalizer and
    pre-tokenizer end a word at, asked of them ("a" is a word of "a\x0cb": ended there).
    Byte-level BPE splits at \x0b, \x0c, \x1c-\x1f and \x85, which BERT's normalizer deletes
    ("good\x1fday" is "goodday" to it): no one set is right for both, and a window cut at the
    characters both split at alone cut "good" to "go" for byte-level BPE where those joined
    its words (the fifty-eighth round). A tokenizer with no pre-tokenizer of the `tokenizers`
    library to ask (a slow one) takes `_LAST_SPACE`.

        word_breaks(gpt2_tokenizer).search("a\x0cgood", 0, 4)   # matches at 1
    """
    backend = getattr(tok, "backend_tokenizer", None)
    pre = getattr(backend, "pre_tokenizer", None)
    if pre is None:
        return _LAST_SPACE
    normalizer = backend.normalizer

    def words(text: str) -> list[str]:
        text = normalizer.normalize_str(text) if normalizer is not None else text
        return [word for word, _ in pre.pre_tokenize_str(text)]

    alone = words("a")
    found = "".join(c for c in _MAYBE_BREAKS if (w := words(f"a{c}b"))[:1] == alone and len(w) > 1)
    if not found:
        return re.compile(r"(?!)")  # nothing: cut where the window ends
    found = re.escape(found)
    return re.compile(f"[{found}](?=[^{found}]*\\Z)")


def _warn_read_short(first: str, count: int, length: int) -> None:
    """One warning for the `count` texts (the `first` where it was read) whose most characters
    read (MAX_READ_GROWTH · CHARS_PER_TOKEN a token) still leave padding though they go on:
    they train on those characters' tokens, and the exported model, reading them whole, would
    see more.

        _warn_read_short("d.jsonl:7", 2, 16)
        # "d.jsonl:7 and 1 other text: fewer than --seq-len 16 tokens in the first 16,384 …"
    """
    most = MAX_READ_GROWTH * CHARS_PER_TOKEN
    others = f" and {count - 1:,} other text{'s' if count > 2 else ''}" if count > 1 else ""
    log.warning(
        f"{first}{others}: fewer than --seq-len {length} tokens in the first {most * length:,} "
        f"characters, the most read of a text ({most:,} a token), though the text goes on; "
        "trained on those tokens only (remove the whitespace or long unknown words before "
        "its words to train on them)"
    )


def _padded_ids(out: Any) -> torch.Tensor:
    """A tokenizer's output as pipeplan's padded ids: PADDING where its attention mask is 0
    (what it padded), never "an id equal to the pad token" (a real `</s>` of a pad = eos
    tokenizer is the pad id; twenty-ninth round).

        _padded_ids(tok(["a b"], padding="max_length", max_length=4))   # [[7, 9, -100, -100]]
    """
    from pipeplan.models import PADDING

    ids = torch.tensor(out["input_ids"], dtype=torch.int64)
    return ids.masked_fill(torch.tensor(out["attention_mask"]) == 0, PADDING)


class _Encoder:
    """A tokenizer encoding texts at --seq-len `length`, in timed chunks: once
    JUDGED_AFTER_SECONDS of encoding took more than MAX_SECONDS_PER_CHAR a character
    (CHARS_PER_TEXT more for each text), InputFileError naming tokenizer.json. Returns the
    ids, written chunk by chunk into one tensor (ENCODE_TEXTS and ENCODE_CHARS a chunk at
    most), and how many tokens of each row are not padding.

        encoder = _Encoder(tok, 16, Path("tok"), "d.jsonl")
        ids, used = encoder(["good film", "bad"])   # tensor([[95, 97, -100, …], …]), [2, 1]
    """

    def __init__(self, tok: Any, length: int, directory: Path, data: str) -> None:
        self.tok, self.length, self.directory, self.data = tok, length, directory, data
        self.breaks = word_breaks(tok)  # what `_window` cuts at
        self.size = FIRST_CHUNK  # the next chunk's texts at most
        self.pace = 0.0  # the last chunk's seconds a character (0: none timed yet)
        # Seconds, characters and texts timed since the pace was last judged.
        self.seconds, self.chars, self.texts = 0.0, 0, 0

    def __call__(self, texts: list[str]) -> tuple[torch.Tensor, list[int]]:
        ids = torch.empty((len(texts), self.length), dtype=torch.int64)  # sized by `_check_room`
        used: list[int] = []
        start = 0
        while start < len(texts):
            chunk = texts[start : self._end(texts, start)]
            wall, cpu = time.perf_counter(), time.process_time()
            out = self._encode(chunk)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            self._timed(min(wall, cpu), chunk)
            _check_lengths(out["input_ids"], self.length, self.directory, self.data)
            ids[start : start + len(chunk)] = _padded_ids(out)
            used += [sum(mask) for mask in out["attention_mask"]]
            start += len(chunk)
        return ids, used

    def _encode(self, texts: list[str]) -> Any:
        # The `tokenizers` library raises plain Exceptions when its model cannot encode (a
        # WordPiece vocabulary without its [UNK] token): the tokenizer directory's fault.
        try:
            return self.tok(
                texts,
                padding="max_length",
                truncation=True,
                max_length=self.length,
                return_attention_mask=True,
            )
        except Exception as exc:
            raise InputFileError(
                f"{self.directory}: the tokenizer cannot encode {self.data} ({_first(exc)})"
            ) from None

    def _end(self, texts: list[str], start: int) -> int:
        """Where the chunk from `start` ends: at most `size` texts and ENCODE_TEXTS, and at
        most the characters CHUNK_SECONDS takes at the last pace and ENCODE_CHARS; one text at
        least."""
        most = min(CHUNK_SECONDS / self.pace if self.pace else math.inf, ENCODE_CHARS)
        end, chars = start, 0
        while end < min(len(texts), start + min(self.size, ENCODE_TEXTS)):
            chars += len(texts[end]) + CHARS_PER_TEXT
            if end > start and chars > most:
                break
            end += 1
        return end

    def _timed(self, seconds: float, chunk: list[str]) -> None:
        """Counts a chunk's time; judges the pace once JUDGED_AFTER_SECONDS are counted."""
        chars = sum(len(text) for text in chunk) + CHARS_PER_TEXT * len(chunk)
        self.pace, self.size = seconds / chars, 2 * len(chunk)
        self.seconds, self.chars, self.texts = (
            self.seconds + seconds,
            self.chars + chars,
            self.texts + len(chunk),
        )
        if self.seconds < JUDGED_AFTER_SECONDS:
            return
        pace, seconds, texts = self.seconds / self.chars, self.seconds, self.texts
        self.seconds, self.chars, self.texts = 0.0, 0, 0
        if pace <= MAX_SECONDS_PER_CHAR:
            return
        named = self.directory / "tokenizer.json"
        raise InputFileError(
            f"{named if named.is_file() else self.directory}: the tokenizer took "
            f"{seconds:.1f} s to encode {texts:,} texts of {self.data}, "
            f"{pace * 1e6:,.0f} µs a character; at most {MAX_SECONDS_PER_CHAR * 1e6:.0f} µs "
            "(real tokenizers take about 1 µs; a regular expression of its pre-tokenizer or "
            "normalizer that backtracks takes this long)"
        )


def _check_lengths(rows: list[list[int]], length: int, directory: Path, data: str) -> None:
    """Every encoded row is --seq-len (`length`) tokens: padding and truncation make it so
    unless the tokenizer adds tokens truncation cannot cut (`_check_post_processor` refuses
    those it knows before encoding; this names any other as the tokenizer's, not a traceback).

        _check_lengths([[1, 2], [1, 2, 3]], 2, Path("tok"), "d.jsonl")
        # InputFileError: "tok: the tokenizer makes a text of d.jsonl 3 tokens long, …"
    """
    longest = max((len(row) for row in rows), default=length)
    shortest = min((len(row) for row in rows), default=length)
    if longest == shortest == length:
        return
    wrong = longest if longest != length else shortest
    raise InputFileError(
        f"{directory}: the tokenizer makes a text of {data} {wrong:,} tokens long, not "
        f"--seq-len {length} (it adds tokens truncation cannot cut)"
    )


def _check_encoded(tok: Any, directory: Path, corpus: Corpus, ids: list[torch.Tensor]) -> None:
    """Refuses a tokenizer that turns every text of the data into unknown or special tokens:
    its vocabulary cannot encode the data, and training on it learns nothing from the text
    (texts that are all blank are named as the data's fault). `ids`: each split's.

        _check_encoded(tok, Path("tok"), corpus, [train_ids, eval_ids])

    Found by the twentieth round: a tokenizer without a vocabulary loaded and gave [UNK] for
    every word. A vocabulary that knows one word of each split passes (the data's own
    business). Each split alone: a training file of another language, every text [UNK],
    trained to the end beside a held-out file of one known word (the fifty-seventh round)."""
    from pipeplan.models import PADDING

    special = (set(tok.all_special_ids) | {tok.unk_token_id, PADDING}) - {None}
    if not special:
        return
    # Each tensor alone: a concatenation was one more copy of every id (`_check_room`).
    known = torch.tensor(sorted(special), dtype=torch.int64)
    unknown = [t.numel() > 0 and bool(torch.isin(t, known).all()) for t in ids]
    if not any(unknown):
        return
    which = "" if all(unknown) or len(ids) != 2 else ("training " if unknown[0] else "held-out ")
    # Texts that are all blank encode as special tokens whatever the vocabulary (the sixtieth
    # round: an empty training column was blamed on the tokenizer).
    texts = {"": corpus.train + corpus.eval, "training ": corpus.train, "held-out ": corpus.eval}
    if all(not text.strip() for text in texts[which]):
        files = corpus.name.split(",")  # the split's own file, where it has one
        named = files[which == "held-out "] if which and len(files) == 2 else corpus.name
        raise InputFileError(f"{named}: every {which}text is empty or whitespace")
    names = ", ".join(sorted(set(tok.all_special_tokens)))
    raise InputFileError(
        f"{directory}: the tokenizer turns {_every_text(corpus, which)} into its unknown or "
        f"special tokens ({names}); its vocabulary cannot encode the data"
    )


def _every_text(corpus: Corpus, which: str) -> str:
    """The `which` texts ("training ", "held-out ", or "": all) of `corpus`, for a line: of
    TRAIN,EVAL the split's own file and its role, as an empty file is named (the sixty-third
    round: "every training text of t.jsonl,e.jsonl" named both files for one's fault).

        _every_text(corpus, "training ")   # "every text of t.jsonl (the training file of …)"
    """
    files = corpus.name.split(",")
    if not which or len(files) != 2:
        return f"every {which}text of {corpus.name}"
    return f"every text of {files[which == 'held-out ']} (the {which}file of --data TRAIN,EVAL)"


def _check_texts_kept(tok: Any, directory: Path, corpus: Corpus, ids: list[torch.Tensor]) -> None:
    """Refuses a tokenizer that encodes texts that differ as the same tokens, every one: what
    it adds to a text filled --seq-len, and the data was replaced by it. `ids`: each split's.

        _check_texts_kept(tok, Path("tok"), corpus, [train_ids, eval_ids])
        # InputFileError: "tok: the tokenizer encodes every text of d.jsonl as the same 12 …"

    Found by the twenty-sixth round: a normalizer's Prepend of "great " made every text 16
    copies of 'great' (a word of the vocabulary, so not every text was unknown tokens)."""
    from pipeplan.models import PADDING

    named = zip(ids, (corpus.train, corpus.eval), ("training ", "held-out "), strict=True)
    splits = [(t, texts, which) for t, texts, which in named if t.shape[0]]
    if not splits:
        return
    # The whole data, then each split alone (the fifty-seventh round: a training file of one
    # repeated sequence passed beside held-out texts that differ).
    first = splits[0][0][0]
    found = []
    if sum(t.shape[0] for t, _, _ in splits) >= 2 and all(
        bool((t == first).all()) for t, _, _ in splits
    ):
        found.append(([text for _, texts, _ in splits for text in texts], "", first))
    found += [(x, which, t[0]) for t, x, which in splits if t.shape[0] >= 2 and (t == t[0]).all()]
    for texts, which, row in found:
        if all(text == texts[0] for text in texts):  # the data's own texts are one text
            continue
        length, tokens = row.shape[0], row[row != PADDING]  # what it padded is no token
        shown = ", ".join(repr(t) for t in tok.convert_ids_to_tokens(tokens[:4].tolist()))
        shown += ", …" if len(tokens) > 4 else ""
        same = f"{directory}: the tokenizer encodes {_every_text(corpus, which)} as the "
        if len(tokens) == length:
            raise InputFileError(
                f"{same}same {len(tokens)} tokens ({shown}): what it adds to a text fills "
                f"--seq-len {length} (or the texts differ only beyond it)"
            )
        # Room was left, so the texts' own differences were mapped away (the sixtieth round:
        # digits a vocabulary lacks, all [UNK]; case and spaces an uncased tokenizer drops).
        other = next(text for text in texts if text != texts[0])
        pair = " and ".join(repr(t if len(t) <= 40 else t[:40] + "…") for t in (texts[0], other))
        raise InputFileError(
            f"{same}same {len(tokens)} tokens ({shown}), fewer than --seq-len {length}: it "
            f"maps texts that differ to the same tokens (e.g. {pair}; characters it has no "
            "token for, or case or whitespace it normalizes away)"
        )


def _check_backend(tok: Any, directory: Path, length: int) -> None:
    """The `tokenizers` tokenizer behind `tok` (none for a slow one): a vocabulary that maps
    each id to one word, padding and truncation (when it states them) on the right, as
    tokenizer_config.json's sides are (their lengths and pad id yield to --seq-len and the
    model's pad token), a normalizer that lengthens a text at most MAX_REPLACE_GROWTH times
    and adds at most MAX_ADDED_CHARS characters to it (the characters read a token are
    bounded; what the normalizer makes of them must be too), and a post-processor that leaves
    room in --seq-len (`length`) for the text.

        _check_backend(tok, Path("tok"), 16)   # InputFileError: "…: the words 'bad' and …"
    """
    backend = getattr(tok, "backend_tokenizer", None)
    if backend is None:
        return
    where = directory / "tokenizer.json" if (directory / "tokenizer.json").is_file() else directory
    if (twice := _id_twice(backend.get_vocab(with_added_tokens=False))) is not None:
        (first, second), i = twice
        raise InputFileError(
            f"{where}: the vocabulary maps both {first!r} and {second!r} to id {i}; each id is "
            "one word (texts differing in them would be the same tokens)"
        )
    if backend.normalizer is not None:
        _check_normalizer(json.loads(backend.normalizer.__getstate__()), where)
    if backend.post_processor is not None:
        _check_post_processor(backend.post_processor, where, length)


def _check_normalizer(normalizer: dict[str, Any], where: Path) -> None:
    """A normalizer (tokenizer.json's, as JSON) may make a text at most MAX_REPLACE_GROWTH
    times longer and add at most MAX_ADDED_CHARS characters to it: the characters read from a
    text are bounded (CHARS_PER_TOKEN a token, MAX_READ_GROWTH times that at most), and so
    must be what the normalizer makes of them, before any text is encoded. Pre-tokenizers need
    no bound on length: the library holds Metaspace's replacement to one character, and the
    others split a text or map a byte to a character (their time is bounded by `_Encoder`).

        _check_normalizer({"type": "Prepend", "prepend": "x" * 100}, where)
        # InputFileError: "…: its normalizer's Prepend rules add up to 100 characters to …"
    """
    growth = _normalizer_growth(normalizer)
    if growth.times > MAX_REPLACE_GROWTH:
        raise InputFileError(
            f"{where}: its normalizer's {growth.named('times')} rules can make a text "
            f"{growth.times:,.0f} times longer; at most {MAX_REPLACE_GROWTH} (tokenizing a text "
            "must cost a bounded time)"
        )
    if growth.added > MAX_ADDED_CHARS:
        raise InputFileError(
            f"{where}: its normalizer's {growth.named('added')} rules add up to "
            f"{growth.added:,.0f} characters to every text; at most {MAX_ADDED_CHARS} (tokenizing "
            "a text must cost a bounded time, and what is added is not the text)"
        )


@dataclass(frozen=True)
class _Growth:
    """How long a normalizer can make a text of n characters: times · n + added at most, and
    the normalizer types behind each (for the message)."""

    times: float = 1.0
    added: float = 0.0
    lengthen: tuple[str, ...] = ()  # the types that multiply a text's length
    prefix: tuple[str, ...] = ()  # the types that add characters whatever the length

    def then(self, after: _Growth) -> _Growth:
        """This normalizer followed by `after`: what `after` makes of this one's output."""
        return _Growth(
            after.times * self.times,
            after.times * self.added + after.added,
            tuple(dict.fromkeys(self.lengthen + after.lengthen)),
            tuple(dict.fromkeys(self.prefix + after.prefix)),
        )

    def named(self, part: str) -> str:
        """The types behind `part` ('times' or 'added'), as words: "Replace and Prepend"."""
        kinds = self.lengthen if part == "times" else self.prefix
        return " and ".join(kinds)


def _normalizer_growth(normalizer: dict[str, Any]) -> _Growth:
    """How long a normalizer (tokenizer.json's, as JSON) can make a text: a Sequence composes
    its members; a Replace multiplies the length by its content over its pattern (a regular
    expression may match a single character or none: its content after each, and once at
    the end); a Prepend adds its text; other normalizers count as 1 (Unicode forms and
    lowercasing grow a character by a bounded few):

        _normalizer_growth({"type": "Replace", "pattern": {"String": "o"}, "content": "oo"})
        # _Growth(times=2.0, added=0.0, lengthen=("Replace",), prefix=())
    """
    kind = normalizer.get("type")
    if kind == "Sequence":
        growth = _Growth()
        for member in normalizer.get("normalizers") or []:
            growth = growth.then(_normalizer_growth(member))
        return growth
    if kind == "Prepend":
        added = len(normalizer.get("prepend") or "")
        return _Growth(added=added, prefix=("Prepend",) if added else ())
    if kind != "Replace":
        return _Growth()
    content, pattern = normalizer.get("content") or "", normalizer.get("pattern") or {}
    text = pattern.get("String")
    if isinstance(text, str) and text:
        times = max(1.0, len(content) / len(text))
        return _Growth(times, lengthen=("Replace",) if times > 1 else ())
    if not content:
        return _Growth()
    return _Growth(len(content) + 1.0, len(content), ("Replace",), ("Replace",))


def _check_post_processor(processor: Any, where: Path, length: int) -> None:
    """A post-processor holds the text once and adds fewer tokens than --seq-len (`length`):
    truncation cuts the text to make room for what it adds, never what it adds. Checked
    before any text is encoded.

        _check_post_processor(backend.post_processor, where, 16)
        # InputFileError: "…: its post-processor (TemplateProcessing) adds 20 special …"

    Found by the twenty-sixth round: a TemplateProcessing of 20 [CLS] tokens made rows of 30
    and 29 tokens for --seq-len 16, a traceback (ragged rows); a template holding $A twice
    doubles the cut text past --seq-len."""
    state = json.loads(processor.__getstate__())
    kind = state.get("type")
    copies = _text_copies(state)
    if copies != 1:
        raise InputFileError(
            f"{where}: its post-processor's ({kind}) template for a single text holds the text "
            f"{copies:,} times; it holds it once ($A), with the special tokens around it"
        )
    added = processor.num_special_tokens_to_add(False)
    if added >= length:
        raise InputFileError(
            f"{where}: its post-processor ({kind}) adds {added:,} special tokens to every text, "
            f"leaving none of --seq-len {length} for the text; at most {length - 1}"
        )


def _text_copies(processor: dict[str, Any]) -> int:
    """How many times a post-processor's output (as JSON) holds a single text: its
    TemplateProcessing's `single` template's sequences; a Sequence multiplies its members'.

        _text_copies({"type": "TemplateProcessing", "single": [{"Sequence": {"id": "A"}}]})  # 1
    """
    kind = processor.get("type")
    if kind == "Sequence":
        return math.prod(_text_copies(p) for p in processor.get("processors") or [])
    if kind != "TemplateProcessing":
        return 1
    return sum(1 for piece in processor.get("single") or [] if "Sequence" in piece)


def _id_twice(vocab: dict[str, int]) -> tuple[tuple[str, str], int] | None:
    """Two words of a vocabulary (sorted) and the one id they share, or None:
    `_id_twice({"a": 0, "b": 1, "c": 0})` → (("a", "c"), 0)."""
    words: dict[int, str] = {}
    for word, i in vocab.items():
        if (other := words.setdefault(i, word)) != word:
            first, second = sorted((other, word))
            return (first, second), i
    return None


def tokenizer_directory(given: str | None, seq: LayerSequence, data: str) -> Path:
    """--tokenizer, else the model's own directory when it holds a tokenizer (a built-in has
    none, even beside a folder of its name: `presets.config_path`)."""
    if given is not None:
        return Path(given)
    model = _model_folder(seq)
    # Any tokenizer file: one without a vocabulary is then refused naming what it lacks.
    if model is not None and tokenizer_files(model):
        return model
    raise BadArgumentError(
        f"data '{data}' is text: pass --tokenizer DIR, a local tokenizer directory (nothing "
        "is downloaded)"
    )


def run_tokenizer(given: str | None, seq: LayerSequence, data: str) -> Any:
    """The tokenizer a text run reads (--tokenizer, else the model's folder's), loaded again
    as its folder says, for the trained model to carry (`models.export`): saved beside the
    weights, `AutoTokenizer.from_pretrained(export)` gives the ids the run trained on. Without
    it transformers built a tokenizer of 5 special tokens from config.json alone, every word
    [UNK], and said nothing (the thirty-eighth round). A fresh load, not the run's: the run
    pads and cuts on the right; a causal LM's export keeps the folder's sides (a decoder's
    tokenizer pads on the left for batched generation). A classifier's export pads and cuts
    on the right as the run did: a GPT-2 classifier batched with a left-padding tokenizer
    shifted its absolute positions and missed the run's held-out accuracy (the fiftieth
    round's a R5).

        models.export(seq, "trained/", tokenizer=run_tokenizer("tok/", seq, "t.jsonl"))
    """
    directory = tokenizer_directory(given, seq, data)
    with rust_panics_named(directory):
        tok = _load_for(directory, seq)
    if seq.task != "causal-lm":
        tok.padding_side = tok.truncation_side = "right"
    names = list(getattr(tok, "model_input_names", []))
    if "token_type_ids" in names and not hasattr(seq.config, "type_vocab_size"):
        # A model with no token-type embedding of its own (GPT-2 adds its word embedding of
        # them) read a BERT tokenizer's token_type_ids, which the run never fed: the export's
        # held-out loss moved (the fifty-third round). Its tokenizer no longer gives them.
        kept = [name for name in names if name != "token_type_ids"]
        tok.model_input_names = tok.init_kwargs["model_input_names"] = kept  # saved, too
    return tok


def _load_for(directory: Path, seq: LayerSequence) -> Any:
    """The tokenizer in `directory` as `seq`'s run loads it: bounded by --seq-len and the
    model's vocabulary, with the model's config when it is the model's own folder."""
    vocab = getattr(seq.config, "vocab_size", None)
    return load_tokenizer(
        directory,
        seq.input_shape[0],
        vocab if type(vocab) is int else None,
        model_config=seq.config if _same_folder(directory, seq) else None,
    )


def _same_folder(directory: Path, seq: LayerSequence) -> bool:
    """Whether the tokenizer `directory` is the folder the model `seq` was built from."""
    model = _model_folder(seq)
    return model is not None and model.is_dir() and directory.resolve() == model.resolve()


def _model_folder(seq: LayerSequence) -> Path | None:
    """The folder `seq` was built from (its config.json's), or None for a built-in."""
    config = config_path(seq.name)
    return None if config is None else config.parent


def load_tokenizer(
    directory: Path, length: int | None = None, vocab: int | None = None, model_config: Any = None
) -> Any:
    """A tokenizer saved by transformers (`save_pretrained`), offline; a bare tokenizer.json
    of the `tokenizers` library works too. `length` (--seq-len) and `vocab` (the model's
    vocab_size) bound tokenizer_config.json's model_max_length and added tokens' ids;
    `model_config`: the model's config when the tokenizer is in the model's folder
    (transformers otherwise reads its config.json again, unchecked).

        load_tokenizer(Path("ckpt"), 128, 30522, seq.config)
    """
    # Found by the twenty-second round: transformers' own reading of a BERT folder's
    # config.json printed a FutureWarning (rope_scaling) that `profile` of the same folder did
    # not; its warnings and log lines never reach stderr, a failure is one line below.
    from pipeplan.models import quiet_transformers

    with warnings.catch_warnings(), quiet_transformers():
        warnings.simplefilter("ignore")
        return _load_tokenizer(directory, length, vocab, model_config)


def _load_tokenizer(
    directory: Path, length: int | None, vocab: int | None, model_config: Any
) -> Any:
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    if not directory.is_dir():
        # A file given is no folder: the line said "no such" of a tokenizer.json that exists
        # (the fifty-ninth round).
        if directory.exists():
            # The folder holding it: not "holding tokenizer.json", which a folder of
            # vocab.txt does not (the sixtieth round).
            raise InputFileError(
                f"{directory}: not a directory; --tokenizer takes the tokenizer's folder (the "
                f"one holding this file: {directory.parent})"
            )
        raise InputFileError(f"{directory}: no such tokenizer directory")
    _check_tokenizer_json(directory)
    # Found by the twentieth round: without one, AutoTokenizer built a BertTokenizer from a
    # model's config.json with no vocabulary at all (every word [UNK]), and an empty folder
    # was refused in a truncated sentence of transformers'.
    if not any(_vocabulary_name(p) for p in tokenizer_files(directory)):
        raise InputFileError(
            f"{directory}: no tokenizer vocabulary (tokenizer.json, vocab.txt, vocab.json or a "
            "sentencepiece .model); pass a folder a tokenizer was saved to with save_pretrained"
        )
    config = _check_tokenizer_config(directory, length, vocab)
    # The `tokenizers` library raises a plain Exception on a broken or unknown-model
    # tokenizer.json: anything from loading is the directory's fault. trust_remote_code off:
    # left unset, transformers asks on a terminal whether to run a folder's code.
    try:
        return AutoTokenizer.from_pretrained(
            directory, config=model_config, local_files_only=True, trust_remote_code=False
        )
    except Exception as exc:
        _check_tokenizer_json_loads(directory)  # a broken tokenizer.json is named as itself
        if config is not None:  # its class failed: the bare tokenizer.json has no pad token
            wanted = config.get("tokenizer_class")
            what = f"the tokenizer_class {wanted!r} it names" if wanted else "its tokenizer"
            path = directory / "tokenizer_config.json"
            raise InputFileError(f"{path}: cannot load {what} ({_first(exc)})") from None
        if not (directory / "tokenizer.json").is_file() and model_config is None:
            # A vocabulary alone says not which tokenizer reads it (transformers' line listed
            # nothing: "from one of: ", the sixty-ninth round); the model's own folder has
            # its config.json to say so.
            raise InputFileError(
                f"{directory}: cannot tell which tokenizer its vocabulary is for: no "
                "tokenizer.json, and no tokenizer_config.json naming its tokenizer_class; save "
                "the tokenizer there with save_pretrained (it writes both), or put the "
                "vocabulary in the model's folder"
            ) from None
        if not (directory / "tokenizer.json").is_file():
            raise InputFileError(f"{directory}: cannot load a tokenizer ({_first(exc)})") from None
    try:
        return PreTrainedTokenizerFast(tokenizer_file=str(directory / "tokenizer.json"))
    except Exception as exc:
        raise InputFileError(
            f"{directory / 'tokenizer.json'}: cannot load a tokenizer ({_first(exc)})"
        ) from None


def _check_tokenizer_json_loads(directory: Path) -> None:
    """InputFileError naming tokenizer.json when the `tokenizers` library cannot read it: a
    class that tokenizer_config.json names fails on it too, and the fault is the file's
    (twenty-third round: a vocabulary id of -3 was blamed on tokenizer_config.json)."""
    from tokenizers import Tokenizer

    path = directory / "tokenizer.json"
    if not path.is_file():
        return
    try:
        Tokenizer.from_file(str(path))
    except Exception as exc:  # `tokenizers` raises plain Exceptions
        raise InputFileError(f"{path}: cannot load a tokenizer ({_first(exc)})") from None


def _check_tokenizer_config(
    directory: Path, length: int | None = None, vocab: int | None = None
) -> dict[str, Any] | None:
    """tokenizer_config.json's values, or None without the file: no auto_map (custom code,
    which pipeplan never runs), and every key by `tokenizerconfig`'s table (types, ranges,
    sides 'right' or 'left', files inside the folder, model_max_length not below
    `length`, added tokens' ids below `vocab`). Found by the twentieth round: auto_map and a
    padding_side of 'middle', like a tokenizer_class that fails to load, fell back to the bare
    tokenizer.json and were reported as "the tokenizer has no pad token"; by the twenty-first:
    do_lower_case "yes", model_max_length -1, tokenizer_file "/etc/passwd" were read silently.

        _check_tokenizer_config(Path("tok"))   # InputFileError: "…: padding_side is 'middle'; …"
    """
    from pipeplan.formats.tokenizerconfig import tokenizer_config_problem

    path = directory / "tokenizer_config.json"
    if not path.is_file():
        return None
    config = json_loads(read_input(path, why="not a tokenizer's file"))  # parsed before
    if not isinstance(config, dict):
        raise InputFileError(f"{path}: a tokenizer config is a JSON object")
    if "auto_map" in config:
        raise InputFileError(
            f"{path}: auto_map names custom tokenizer code; pipeplan runs no code from a "
            "folder: remove auto_map and name a transformers class in tokenizer_class"
        )
    if (why := tokenizer_config_problem(config, length=length, vocab=vocab)) is not None:
        raise InputFileError(f"{path}: {why}")
    return config


def tokenizer_files(directory: Path) -> list[Path]:
    """The files of a tokenizer directory that transformers reads: its JSON files,
    vocabularies, merges and sentencepiece models; not a model's weights beside them."""
    if not directory.is_dir():
        return []
    return sorted(p for p in _tokenizer_entries(directory) if p.is_file())


def _tokenizer_entries(directory: Path) -> list[Path]:
    """Every entry of `directory` named as a tokenizer's file, and the chat templates
    transformers reads from its CHAT_TEMPLATE_DIR (`*.jinja`), whatever kind each is."""
    entries = [p for p in directory.iterdir() if _tokenizer_name(p)]
    templates = directory / CHAT_TEMPLATE_DIR
    if templates.is_dir():
        entries += templates.glob("*.jinja")
    return entries


def _tokenizer_name(path: Path) -> bool:
    """Whether transformers reads a file of this name from a tokenizer directory."""
    return (
        path.name in (*TOKENIZER_FILES, *TOKENIZER_JSON, "merges.txt", CHAT_TEMPLATE_FILE)
        or path.name.startswith("vocab")
        or path.suffix == ".model"
    )


# transformers' own file of a chat template (beside tokenizer_config.json's key): hashed
# with the tokenizer and held to the key's bound (fiftieth round: 22 MB passed unchecked
# into the trained model).
CHAT_TEMPLATE_FILE = "chat_template.jinja"
# And its folder of more templates, each `NAME.jinja`, which transformers reads too (the
# fifty-first round: 30 MB added there after a run went into its export unchecked).
CHAT_TEMPLATE_DIR = "additional_chat_templates"


def _vocabulary_name(path: Path) -> bool:
    """Whether a tokenizer file of this name holds a vocabulary (the JSON files beside it and
    merges.txt hold settings or merge rules only):

        _vocabulary_name(Path("tok/vocab.txt"))               # True
        _vocabulary_name(Path("tok/tokenizer_config.json"))   # False
    """
    return path.name == "tokenizer.json" or path.name.startswith("vocab") or path.suffix == ".model"


def _check_chat_templates(files: list[Path]) -> None:
    """The chat templates transformers reads whole into the tokenizer (CHAT_TEMPLATE_FILE
    and CHAT_TEMPLATE_DIR's), at most MAX_CHAT_TEMPLATE characters together, as
    tokenizer_config.json's key is; a file of more bytes than 4 a character allows is refused
    unread."""
    from pipeplan.formats.tokenizerconfig import MAX_CHAT_TEMPLATE

    read = 0
    for template in files:
        size = len(read_input(template, 4 * MAX_CHAT_TEMPLATE, why="not a tokenizer's file"))
        read += size
        if read > MAX_CHAT_TEMPLATE:
            before = f" (with {read - size:,} in the ones before it)" if read > size else ""
            raise InputFileError(
                f"{template}: a chat template of {size:,} characters{before}; at most "
                f"{MAX_CHAT_TEMPLATE:,} in all"
            )


def _check_tokenizer_json(directory: Path) -> None:
    """The tokenizer's own JSON files parse, no key twice: transformers ignores a garbled
    tokenizer_config.json, and the tokenizer then loads without its pad token, which was
    reported as missing rather than the file as broken. None is larger than pipeplan reads
    (transformers reads each whole: a sparse 3 GiB file was a MemoryError)."""
    # Every entry of a tokenizer file's name, not only the regular files `tokenizer_files`
    # lists: a FIFO named tokenizer.json was skipped by transformers, which then failed in a
    # truncated sentence ("Couldn't instantiate the backend tokenizer from one of: "), as model
    # weight files are checked (nineteenth round).
    entries = sorted(_tokenizer_entries(directory))
    for path in entries:
        try:  # data.json records each by its path: a traceback at the record (52nd round)
            printable(str(path))
        except ValueError as exc:
            raise InputFileError(f"{quoted(str(path))}: {exc}; rename it") from None
        check_input_file(path, MAX_TOKENIZER_FILE_BYTES, why="not a tokenizer's file")
    _check_chat_templates([p for p in entries if p.suffix == ".jinja"])
    _check_parse_memory(directory / "tokenizer.json")
    for name in TOKENIZER_JSON:
        path = directory / name
        if not path.is_file():
            continue
        try:
            text = read_input(path, why="not a tokenizer's file")
            json_loads(text, object_pairs_hook=unique_keys)  # a key twice: transformers' last
        except TooManyDigits as exc:  # valid JSON: a number no field takes
            raise InputFileError(f"{path}: {exc}") from None
        except ValueError as exc:
            raise InputFileError(f"{path}: cannot be read as JSON ({_first(exc)})") from None
        except RecursionError:
            raise InputFileError(f"{path}: cannot be read as JSON (nested too deeply)") from None
        except MemoryError:
            raise InputFileError(f"{path}: out of memory decoding it as JSON") from None


def _check_parse_memory(path: Path) -> None:
    """InputFileError where the `tokenizers` library could not parse tokenizer.json `path` in
    the memory this process has left (TOKENIZER_LOAD_FACTOR times its size): under `ulimit
    -v` it aborted the process on the allocation that failed, saying nothing, exit 134 (the
    sixty-ninth round).

        _check_parse_memory(Path("tok/tokenizer.json"))
        # "tok/tokenizer.json: parsing it takes about 1.9 GiB (32 × its 60 MiB), more than
        #  the 1.2 GiB this process has left of 3.0 GiB (ulimit -v); …"
    """
    from pipeplan.models import memory_left, memory_words, size_words

    if not path.is_file():
        return
    size = path.stat().st_size
    need, left = TOKENIZER_LOAD_FACTOR * size, memory_left()
    if left is not None and need > left[0]:
        raise InputFileError(
            f"{path}: parsing it takes about {size_words(need)} ({TOKENIZER_LOAD_FACTOR} × its "
            f"{size_words(size)}), more than {memory_words(left)}; run pipeplan with more "
            "memory"
        )


def _first(exc: BaseException) -> str:
    """An exception's first line, or its type when it says nothing."""
    return excerpt(str(exc).strip().splitlines()[0]) if str(exc).strip() else type(exc).__name__


# The special tokens a model's config.json names by id, besides pad (`_special_ids_agree`),
# each under the name the tokenizer gives its own id of that token (tok.eos_token_id, …).
SPECIAL_ID_KEYS = ("bos_token_id", "eos_token_id", "sep_token_id", "cls_token_id")
# And those a generation config names (what `generate` starts with, stops at, pads with).
GENERATION_ID_KEYS = ("bos_token_id", "eos_token_id", "pad_token_id")


def _special_ids_agree(tok: Any, seq: LayerSequence, directory: Path, quiet: bool) -> None:
    """The model's special-token ids are the tokenizer's, as the run uses them:

        _special_ids_agree(tok, seq, Path("tok"), quiet=False)

    pad: the tokenizer's pad token must be the model's pad_token_id (and, checked before, a
    token of its `directory`'s vocabulary), or the run is refused: layer 0 embeds
    pad_token_id where the tokenizer padded, as transformers is given the tokenizer's ids,
    and a decoder classifier skips it when pooling.
    bos, eos, sep, cls (SPECIAL_ID_KEYS; bos, eos and pad of a generation config) only tell
    `generate` and the exported files what the ids mean; nothing trained reads them. A
    built-in model's are ours and arbitrary (gpt2-tiny's bos 1, eos 2): they become the
    tokenizer's (None where it has no such token), in the config and in the generation
    config, so the run's model/ and `pipeplan export`, each built through here, say them
    alike. A model folder's are the user's: one naming another token than the tokenizer's
    is said in one warning (unless `quiet`: a rank's build, an export), not refused, and
    left as the folder says. Found by the thirty-second round: gpt2-tiny trained with a
    tokenizer whose eos is [EOS] (0) exported eos_token_id 2, the word "good" of it, so
    `generate` stopped at "good" and never at [EOS]."""
    pad, model_pad = tok.pad_token_id, seq.config.pad_token_id
    # Each names the folder or file to edit (fiftieth round: neither was named).
    if pad is None:
        raise BadArgumentError(
            f"{directory}: the tokenizer has no pad token; text is padded to --seq-len: set "
            "one (tokenizer.pad_token = ...) and save it again"
        )
    if pad != model_pad:
        # A built-in has no config.json of the user's to edit (thirty-third round): its pad
        # id is fixed as its embedding was built with it.
        config = config_path(seq.name)
        fix = (
            f"set pad_token_id in {config}"
            if config is not None
            else f"{seq.name} pads with id {model_pad}: use a tokenizer whose pad token is "
            f"id {model_pad}, or a model folder whose config.json says pad_token_id {pad}"
        )
        raise BadArgumentError(
            f"{directory}: the tokenizer pads with id {pad} but the model's pad_token_id is "
            f"{model_pad}; they must agree ({fix})"
        )
    hf_model = seq.hf_model
    generation = getattr(hf_model, "generation_config", None)  # a decoder's
    if config_path(seq.name) is None:  # a built-in: its ids become the tokenizer's
        # What save_pretrained writes is the transformers model's config (a random build's
        # is seq.config itself).
        own = getattr(hf_model, "config", seq.config)
        for config in (seq.config,) if own is seq.config else (seq.config, own):
            for key in SPECIAL_ID_KEYS:
                if key in config.to_dict():  # a key of its family (BERT's bos and eos: None)
                    setattr(config, key, getattr(tok, key, None))
        for key in GENERATION_ID_KEYS if generation is not None else ():
            setattr(generation, key, getattr(tok, key, None))
        return
    if not quiet and (said := _other_special_ids(tok, seq, generation, directory)):
        log.warning(
            f"{'; '.join(said)}: generate and the exported model read these ids (training does "
            f"not); set them to {directory}'s ids (null where it has no such token)"
        )


def _other_special_ids(tok: Any, seq: LayerSequence, generation: Any, directory: Path) -> list[str]:
    """What of a model folder's config.json and generation_config.json names another token
    than the tokenizer's (in `directory`) same special token (`_special_ids_agree`), a phrase
    a file:

        _other_special_ids(tok, seq, generation, Path("tok"))
        # ["m/config.json: bos_token_id 1 is '[UNK]' (tok has no bos token), eos_token_id 2
        #   is 'good' (tok's eos token is '[EOS]', 0)"]

    An id outside the vocabulary is not said here: the export writes it as null (only a
    family's default can be one, `models._drop_ids_outside_vocabulary`)."""
    from pipeplan.models import generation_config_path

    vocab = seq.config.vocab_size
    sources = [(config_path(seq.name), seq.config, SPECIAL_ID_KEYS)]
    path = generation_config_path(seq.name)
    # Without the file, transformers derives the generation config from config.json: said once.
    if generation is not None and path is not None and path.is_file():
        sources.append((path, generation, GENERATION_ID_KEYS))
    said = []
    for where, settings, keys in sources:
        phrases = []
        for key in keys:
            value, own = getattr(settings, key, None), getattr(tok, key, None)
            ids = value if isinstance(value, list) else [] if value is None else [value]
            if not ids or not all(type(i) is int and 0 <= i < vocab for i in ids):
                continue  # none, or nulled at export
            if own in ids:
                continue  # eos a list: generation stops at any of them
            token = key.removesuffix("_token_id")
            names = ", ".join(repr(tok.convert_ids_to_tokens(i)) for i in ids)
            theirs = (
                f"{directory} has no {token} token"
                if own is None
                else f"{directory}'s {token} token is {getattr(tok, f'{token}_token')!r}, {own}"
            )
            phrases.append(f"{key} {quoted(value)} is {names} ({theirs})")
        if phrases:
            said.append(f"{where}: {', '.join(phrases)}")
    return said


def _check_vocabulary_fits(tok: Any, seq: LayerSequence, directory: Path) -> None:
    """Refuses a tokenizer with ids past the model's vocab_size: its embeddings have no row
    for them, whether or not this data holds one (`generate` and later data would).

        _check_vocabulary_fits(tok, seq, Path("tok"))
        # BadArgumentError: "tok: the tokenizer's ids go up to 702 (703 ids) but model …"

    Found by the thirty-third round: gpt2-tiny (vocab_size 512) trained with a tokenizer of
    703 ids whose bos is 702; the data held no id past 511, so the run went through and the
    export wrote bos_token_id null (an id outside the vocabulary). Data that holds such ids
    was refused naming the data, not the tokenizer. A built-in keeps its size (its embedding
    is not sized to a tokenizer), so the line names both sizes and what can agree."""
    vocab = seq.config.vocab_size
    ids = tok.get_vocab().values()  # with added tokens; ids need not be contiguous
    top = max(ids, default=-1)
    if top < vocab:
        return
    fix = (
        f"a model whose embeddings hold them (vocab_size {top + 1} or more)"
        if config_path(seq.name) is not None
        else f"a model folder whose config.json says vocab_size {top + 1} or more (a "
        "built-in's size is its own)"
    )
    raise BadArgumentError(
        f"{directory}: the tokenizer's ids go up to {top} ({len(ids)} ids) but model "
        f"{quoted(seq.name)} has vocab_size {vocab} (ids 0..{vocab - 1}); use a tokenizer "
        f"whose ids fit, or {fix}"
    )


def _check_special_tokens_known(tok: Any, directory: Path) -> None:
    """Refuses a special token (pad, bos, eos, unk, sep, cls, mask or an additional one) that
    none of the tokenizer's files holds: transformers adds such a token at load, as a new id
    past the vocabulary, which the model has no embedding for (or the one it has is another
    word's, the vocabulary's size not being the model's).

        _check_special_tokens_known(tok, Path("tok"))
        # InputFileError: "tok/tokenizer_config.json: bos_token '[NOPE]' is not in the …"

    Found by the twenty-fifth round for pad_token: '[NOPE]' became id 120 of a 0..119
    vocabulary, and the line advised setting pad_token_id 120 in the model's config.json; by
    the twenty-sixth for the others: a bos_token '[NOPE]' loaded silently as id 117 of a
    117-word tokenizer and model, and data holding '[NOPE]' was refused naming the data. A slow
    tokenizer (no `tokenizers` backend) is left to the id check."""
    backend = getattr(tok, "backend_tokenizer", None)
    if backend is None:
        return
    vocabulary = backend.get_vocab(with_added_tokens=False)
    unknown = [(key, token) for key, token in _special_tokens(tok) if token not in vocabulary]
    if not unknown:
        return
    added = _added_tokens(directory)  # read only when needed: it loads tokenizer.json again
    for key, token in unknown:
        if token in added:
            continue
        path, what = _naming(directory, key, token)
        raise InputFileError(
            f"{path}: {what} {token!r} is not in the tokenizer's vocabulary (loading added it "
            f"as a new id {tok.convert_tokens_to_ids(token)}); name one of its tokens (the "
            "model's embeddings are for the vocabulary's ids)"
        )


def _special_tokens(tok: Any) -> list[tuple[str, str]]:
    """(key, token) of each special token `tok` has: its named ones (pad_token, bos_token, …)
    and the additional ones, under 'additional_special_tokens'."""
    named = [(key, str(token)) for key, token in tok.special_tokens_map.items()]
    named = [(key, token) for key, token in named if key != "additional_special_tokens"]
    known = {token for _, token in named}
    extra = [str(t) for t in tok.all_special_tokens if str(t) not in known]
    return named + [("additional_special_tokens", token) for token in extra]


def _added_tokens(directory: Path) -> set[str]:
    """The tokens a tokenizer's files add to its vocabulary: tokenizer.json's added_tokens,
    tokenizer_config.json's added_tokens_decoder, added_tokens.json's keys (each file was read
    and checked before; the tokenizer loaded from them)."""
    from tokenizers import Tokenizer

    added: set[str] = set()
    if (directory / "tokenizer.json").is_file():
        decoder = Tokenizer.from_file(str(directory / "tokenizer.json")).get_added_tokens_decoder()
        added |= {token.content for token in decoder.values()}
    config = _json_object(directory / "tokenizer_config.json")
    decoder = config.get("added_tokens_decoder")
    if isinstance(decoder, dict):
        added |= {t.get("content") for t in decoder.values() if isinstance(t, dict)} - {None}
    added |= set(_json_object(directory / "added_tokens.json"))
    return added


# The keys of a tokenizer's JSON files that list additional special tokens (transformers 5
# writes extra_special_tokens, a list or an object of named tokens).
_EXTRA_KEYS = ("additional_special_tokens", "extra_special_tokens")


def _naming(directory: Path, key: str, token: str) -> tuple[Path, str]:
    """The tokenizer file that names the special token `key` (tokenizer_config.json before
    special_tokens_map.json, as transformers reads them), else the directory, and the key as
    written there: an additional token is looked for in either file's lists of them.

        _naming(Path("tok"), "additional_special_tokens", "[X]")
        # (Path("tok/tokenizer_config.json"), "extra_special_tokens entry")
    """
    for name in ("tokenizer_config.json", "special_tokens_map.json"):
        document = _json_object(directory / name)
        if key in document and key not in _EXTRA_KEYS:
            return directory / name, key
        for extra in _EXTRA_KEYS:
            if token in _written_tokens(document.get(extra)):
                return directory / name, f"{extra} entry"
    return directory, key


def _written_tokens(value: Any) -> list[Any]:
    """The tokens a list (or an object of named tokens) holds, as text: an AddedToken object
    by its content."""
    items = list(value.values()) if isinstance(value, dict) else value
    if not isinstance(items, list):
        return []
    return [item.get("content") if isinstance(item, dict) else item for item in items]


def _json_object(path: Path) -> dict[str, Any]:
    """A tokenizer JSON file's object, or {} without the file (or when it holds no object)."""
    if not path.is_file():
        return {}
    value = json_loads(read_input(path, why="not a tokenizer's file"))
    return value if isinstance(value, dict) else {}
