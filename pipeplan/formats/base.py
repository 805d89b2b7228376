"""The base of every file format: a strict pydantic model, its numeric types, and the one way
files are parsed, loaded and written.

    cluster = load(Cluster, "cluster.json")   # InputFileError with one line on any problem
    text = dumps(cluster)                      # canonical JSON, same value → same bytes

Loaders reject other schema versions (a missing one too), unknown fields, NaN and infinities,
naming the field.
A model that is also a command's input marks how its fields are given on the command line with
`Flag` (`pipeplan.options` builds the typer options from the fields).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import json
import math
import os
import re
import stat
import sys
import types
import unicodedata
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import (
    Annotated,
    Any,
    BinaryIO,
    Literal,
    TypeVar,
    Union,
    get_args,
    get_origin,
)

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    GetCoreSchemaHandler,
    StringConstraints,
    ValidationError,
    ValidationInfo,
    model_validator,
)

from pipeplan.errors import (
    CONTROL,
    InputFileError,
    PipeplanError,
    excerpt,
    open_files_failure,
    quoted,
    reason,
)
from pipeplan.fileio import is_run_directory

NonNegFloat = Annotated[float, Field(ge=0.0)]
PosFloat = Annotated[float, Field(gt=0.0)]
NonNegInt = Annotated[int, Field(ge=0)]
PosInt = Annotated[int, Field(ge=1)]

# Physical bounds, far beyond any real machine and far below what overflows the cost model:
# a file that says a link moves 1e400 B/s or a layer takes 1e308 s is wrong, not fast or slow.
MAX_BYTES = 1 << 60  # 1 EiB
# The largest file pipeplan reads at all: run.jsonl, read one record (line) at a time, and files
# it streams (text data). A JSON document is decoded whole, and decoding takes up to about
# 33 times its size (a list of empty lists: 64 bytes for each 3), so each kind of JSON file has a
# limit of its own (`FILE_LIMITS`), far above the largest that pipeplan writes.
MAX_FILE_BYTES = 1 << 30
# What `read_input` reads at a time past a file's size at its stat (it grew since).
READ_CHUNK_BYTES = 1 << 20
# A profile of 1,000 layers is 2.4 MB and one of 4,096 blocks with 16 micro-batch sizes 26 MB;
# decoded in at most about 1 GiB.
MAX_JSON_BYTES = 32 << 20
# A plan, summary or report holds each phase's layout and stages (a plan of 50 phases of 1,000
# layers on 512 devices is 2.7 MB, about 0.5 MB a phase on 4,096); a manifest one gradient norm
# per layer and freeze decision. Decoded in at most about 4 GiB.
MAX_PHASED_JSON_BYTES = 128 << 20
# run.json, a cluster, a freeze trajectory: a few fields and at most one list of MAX_EPOCHS
# counts (70 KB).
MAX_SMALL_JSON_BYTES = 1 << 20
# A transformers config.json: a classifier's id2label and label2id name up to MAX_LABELS
# (1,000,000) classes, about 50 MB; decoded in at most about 2 GiB.
MAX_CONFIG_BYTES = 64 << 20
CONFIG_LIMIT = "the limit for a model's config.json"  # `read_input`'s why
# A model folder's generation_config.json: decoding settings and lists of token ids (Whisper's,
# among the largest, is 4 KB; bad_words_ids of thousands of words some 100 KB); decoded in at
# most about 128 MiB.
MAX_GENERATION_CONFIG_BYTES = 4 << 20
GENERATION_CONFIG_LIMIT = "the limit for a model's generation_config.json"
# A model's shard index (model.safetensors.index.json, pytorch_model.bin.index.json): one name
# and one file name per tensor, about 100 bytes each; the largest checkpoints have under 100,000
# tensors (10 MB). Decoded in at most about 2 GiB.
MAX_INDEX_BYTES = 64 << 20
INDEX_LIMIT = "the limit for a model's shard index"  # `read_input`'s why
# One run.jsonl record: a step of 4,096 ranks is about 1 MB, an epoch of 4,096 layers 0.2 MB.
MAX_RECORD_BYTES = 16 << 20
MAX_SECONDS = 1e6  # 11.6 days for one timed operation
MAX_LATENCY_S = 60.0
MIN_BANDWIDTH, MAX_BANDWIDTH = 1.0, 1e15  # bytes/s: 1 B/s .. 1 PB/s
MAX_COUNT = 1 << 20  # devices, nodes, micro-batch sizes, samples in a step
# Limits on what scales the planner's work, stated in the errors that enforce them.
MAX_EPOCHS = 10_000
MAX_SAMPLES = 1 << 40
MAX_MICRO_BATCHES = 1024  # per replica and step; the simulator materialises each one
MAX_STEPS = MAX_SAMPLES  # a count of optimizer steps: at most one per sample
MAX_SEED = (1 << 32) - 1  # numpy's generators take 0..2**32-1; torch's take more
Bytes = Annotated[int, Field(ge=0, le=MAX_BYTES)]
PosBytes = Annotated[int, Field(ge=1, le=MAX_BYTES)]
FloatBytes = Annotated[float, Field(ge=0.0, le=MAX_BYTES)]


def not_subnormal(value: float) -> float:
    """`not_subnormal(0.25)` → 0.25; ValueError for a subnormal (`5e-324`): no clock reads it,
    and dividing by it overflows a ratio or a fit. Zero is a time (nothing happened)."""
    if 0.0 < value < sys.float_info.min:
        raise ValueError(f"{value!r} s is a subnormal number, not a measured time")
    return value


# Every time a file holds (profiles, run records, plans): 0, or a normal float up to the bound.
Seconds = Annotated[float, Field(ge=0.0, le=MAX_SECONDS), AfterValidator(not_subnormal)]


def not_subnormal_signed(value: float) -> float:
    """`not_subnormal` for a time that may be negative (a fitted offset): -5e-324 neither."""
    not_subnormal(abs(value))
    return value


# A fitted time offset, either sign (calibration's step_overhead_s), never subnormal.
SignedSeconds = Annotated[
    float, Field(ge=-MAX_SECONDS, le=MAX_SECONDS), AfterValidator(not_subnormal_signed)
]

# What the planner predicts from valid inputs (a step, a stage's times: plans, run records) is
# a sum of bounded terms, so it is bounded too, but far above MAX_SECONDS: a step of a profile
# whose every timing is 2e5 s is 4e6 s (twenty-ninth round: its run's phase record refused it
# with a traceback, though `plan` had written it). The sum, generously: a layer's fitted time
# per micro-batch (a line through timings ≤ 1e6 s, at most 2e6 s per call and per sample, at
# up to MAX_COUNT = 2^20 samples, × a calibration scale ≤ 1e6, + 1e6 s of micro-batch
# overhead) is ≤ 2.2e18 s; × 3 kinds (fwd, bwd, nograd) × MAX_MICRO_BATCHES = 1024 × fewer
# than 2^27 layers (one per byte of the largest JSON file read) is ≤ 9e32 s. A send is ≤ 60 s
# + 2^60 bytes per sample × 2^20 samples at 1 B/s ≤ 1.3e24 s; 2 per boundary and micro-batch:
# ≤ 3.5e35 s. An all-reduce and the optimizer over ≤ 2^27 × 2^60 bytes at ≥ 1 B/s (or ≤ 1 s
# per byte) ≤ 1e26 s; the step's overhead (1e6 s + 1e6 s per sample) ≤ 2e15 s. So < 1e36 s;
# 1e40 leaves room, and an epoch of it (× MAX_STEPS ≈ 1.1e12) over MAX_EPOCHS (× 1e4) stays
# ≈ 1e56, far from overflowing a float. No subnormal check: a prediction is not a clock's
# reading (nothing divides by it unguarded), and a plan's times never had one.
MAX_PREDICTED_S = 1e40
# float32's largest finite value: a gradient norm computed in float32 (fp32 and bf16 runs
# alike) is at most this, or infinite.
FLOAT32_MAX = 3.4028234663852886e38


def predictable(value: float) -> float:
    """`predictable(4e6)` → 4e6; ValueError above MAX_PREDICTED_S, saying why it is the limit."""
    if value > MAX_PREDICTED_S:
        raise ValueError(
            f"{value!r} s is more than the {MAX_PREDICTED_S:g} s any valid profile can predict"
        )
    return value


PredictedSeconds = Annotated[float, Field(ge=0.0), AfterValidator(predictable)]
Latency = Annotated[float, Field(ge=0.0, le=MAX_LATENCY_S), AfterValidator(not_subnormal)]
Bandwidth = Annotated[float, Field(ge=MIN_BANDWIDTH, le=MAX_BANDWIDTH)]
Count = Annotated[int, Field(ge=1, le=MAX_COUNT)]
Scale = Annotated[float, Field(ge=1e-6, le=1e6)]
Steps = Annotated[int, Field(ge=1, le=MAX_STEPS)]
Seed = Annotated[int, Field(ge=0, le=MAX_SEED)]

# What no printed string may hold (`errors.CONTROL`).
_CONTROL = CONTROL


def printable(text: str) -> str:
    """`printable("bert-tiny")` → "bert-tiny"; ValueError naming the first control character
    (`printable("a\\nb")`: "holds the control character U+000A ...")."""
    found = _CONTROL.search(text)
    if found and unicodedata.category(found.group()) == "Cf":
        raise ValueError(
            f"holds the invisible bidi or zero-width character U+{ord(found.group()):04X}; "
            "a name or path holding it prints as another one"
        )
    if found:
        raise ValueError(
            f"holds the control character U+{ord(found.group()):04X}; names, paths and "
            "versions are printed on one line"
        )
    return text


# The longest text a file may hold in a name, path, version or message: the profiler writes a
# few dozen characters, a path is at most PATH_MAX (4096 bytes). A 10 MB layer name was planned
# and copied into every plan (seventeenth round); a 900,000-character cluster name likewise,
# the limit then being a profile's alone (nineteenth round).
MAX_TEXT = 4096


def short(text: str, limit: int = MAX_TEXT, what: str = "a name, path or version") -> str:
    """`short("bert-tiny")` → "bert-tiny"; ValueError for a text longer than `limit`."""
    if len(text) > limit:
        raise ValueError(f"is {len(text)} characters long; {what} is at most {limit}")
    return text


# In a class's name (a data label, a config's id2label): the characters that break the line it
# is printed on (C0/C1 controls, the line and paragraph separators) or reorder what follows it
# (the bidi embeddings, overrides and isolates: "a\u202e" prints reversed). Not the zero-width
# joiners and the marks LRM, RLM and ALM, which Persian, Indic and emoji names need;
# `as_seen` drops them, so a name made only of them, or two names told apart only by them,
# is refused.
_LABEL_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
# What `label_name_problem` says of a label that names nothing.
NAMES_NOTHING = "names nothing (it is empty, or only spaces or invisible characters)"


def as_seen(label: str) -> str:
    """`as_seen("cafe\u0301\u200b")` → "café": a label as a reader sees it, NFKC-normalised
    (composed accents, compatibility forms such as fullwidth digits), without format
    characters (Unicode category Cf: zero-width space and joiner, BOM, soft hyphen) and
    the whitespace around it."""
    visible = "".join(c for c in label if unicodedata.category(c) != "Cf")
    return unicodedata.normalize("NFKC", visible).strip()


def label_name_problem(name: str) -> str | None:
    """Why `name`, read without the whitespace around it, names no class, in words that follow
    "the label", or None: the one rule of a data label (`executor.text`) and of a model
    config's id2label (`modelconfig.id2label_problem`), so that a model exported with its
    data's names reads back. UTF-8 text (no unpaired surrogate), at most MAX_TEXT
    characters, no `_LABEL_CONTROL` character, and something a reader sees (`as_seen`).

        label_name_problem("pos")         # None
        label_name_problem("a\u202e")     # "holds the bidi control U+202E; …"
        label_name_problem(" \u200b")     # NAMES_NOTHING
    """
    try:
        name.encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = name[exc.start : exc.end].encode("unicode_escape").decode()
        return f"holds {bad}, an unpaired surrogate, not text"
    stripped = name.strip()
    if len(stripped) > MAX_TEXT:  # before it is searched: data.json and id2label record it
        return f"is {len(stripped)} characters long; a label is at most {MAX_TEXT}"
    found = _LABEL_CONTROL.search(stripped)
    if found and unicodedata.category(found.group()) == "Cf":
        return (
            f"holds the bidi control U+{ord(found.group()):04X}; a name holding it prints "
            "as another"
        )
    if found:
        return (
            f"holds the control character U+{ord(found.group()):04X}; a class's name is "
            "printed on one line"
        )
    return None if as_seen(stripped) else NAMES_NOTHING


# The one string type of every name-like field (names, paths, versions, hosts, messages):
# bounded first, so that a long one is not searched for control characters.
Text = Annotated[str, AfterValidator(short), AfterValidator(printable)]
# A run's --data: two paths (TRAIN,EVAL), or a path and a function, run.json recording each
# path absolute: twice a path's length and the comma or colon between them.
MAX_DATA_TEXT = 2 * MAX_TEXT + 1


def short_data(text: str) -> str:
    """`short` of a data spec: `short_data("train.jsonl,eval.csv")` → unchanged."""
    return short(text, MAX_DATA_TEXT, "a data spec")


DataText = Annotated[str, AfterValidator(short_data), AfterValidator(printable)]
Sha256 = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]  # a digest in hex


def text_sha256(text: str) -> str:
    """The hex sha256 of `text`'s UTF-8 bytes: one spelling for the writer of an identity
    (a profile's, a run's copy of its plan) and its checker. `text_sha256("")` → "e3b0…"."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def iso_timestamp(text: str) -> str:
    """`iso_timestamp("2026-11-29T18:59:10+00:00")` → unchanged; ValueError for anything
    `datetime.fromisoformat` does not read as a date and time with its UTC offset (what the
    profiler writes: `datetime.now(timezone.utc).isoformat(timespec="seconds")`)."""
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        when = None
    if when is None or "T" not in text or when.utcoffset() is None:
        raise ValueError(
            f"{quoted(text, 80)} is not an ISO 8601 date and time with its UTC offset "
            "(e.g. 2026-11-29T18:59:10+00:00)"
        )
    return text


# A time a file records, kept as written (the file's bytes, and so its sha256, are unchanged).
Timestamp = Annotated[Text, AfterValidator(iso_timestamp)]


# The core schemas whose validators collect one error per bad element unless told to stop
# at the first (`fail_fast`, pydantic-core 2.41 / pydantic 2.12 for dicts).
_COLLECTIONS = frozenset({"list", "tuple", "set", "frozenset", "dict"})


def fail_fast(schema: Any) -> Any:
    """`schema` (a pydantic core schema, walked in place) with every list, tuple, set and dict
    stopping at its first bad element. Found by the eighteenth round: pydantic builds every
    error before raising, and has no limit on how many; a 2 MiB profile whose layers were
    `[{}, {}, ...]` made 5.6 million errors in 7 GB, and under `ulimit -v` its Rust code
    aborted (exit 134), which no `except` catches. Only the first error is ever shown."""
    if isinstance(schema, dict):
        if schema.get("type") in _COLLECTIONS:
            schema["fail_fast"] = True
        for value in schema.values():
            fail_fast(value)
    elif isinstance(schema, list):
        for value in schema:
            fail_fast(value)
    return schema


class Strict(BaseModel):
    """Base for every format: unknown fields and NaN/inf are errors, not silently kept, and
    every collection stops at its first bad element (`fail_fast`)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=False)

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler) -> Any:
        # One place for every field of every format, nested models included (each builds its
        # schema here): `Field(fail_fast=True)` is per field, and pydantic refuses it on dicts.
        return fail_fast(handler(source))


def _version_required(schema: dict[str, Any]) -> None:
    """A versioned format's JSON Schema lists `schema_version` as required, with no default: a
    file must state it (`Versioned._version_stated`), though Python code builds a model
    without it (the default is the version written)."""
    schema["properties"]["schema_version"].pop("default", None)
    schema["required"] = ["schema_version", *schema.get("required", [])]


class Versioned(Strict):
    """Base for a format with a `schema_version` (each file kind, and a plan's cluster or a
    manifest's run configuration nested in another): a file states it, nested ones too;
    pipeplan writes it in every file, and the schemas require it. Found by the twenty-fifth
    round: `pipeplan schema cluster` showed a default of 1 that the loader did not apply
    ("schema_version None is not supported"). `parse` names a missing top-level one before
    validation (`missing_version`)."""

    model_config = ConfigDict(json_schema_extra=_version_required)

    @model_validator(mode="after")
    def _version_stated(self, info: ValidationInfo) -> Versioned:
        # After validation, from the fields set: a "before" validator would make pydantic
        # validate the JSON as Python objects (a strict tuple then refuses a JSON array).
        # Python code (mode "python") builds a model without it: the default is the version.
        if info.mode == "json" and "schema_version" not in self.model_fields_set:
            model = type(self)
            raise ValueError(missing_version(kind_of(model), schema_version(model)))
        return self


M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True)
class Flag:
    """How a model field is given on the command line; pydantic ignores it, `pipeplan.options`
    reads it. Without a marker a field is `--field-name`, its default shown as is.

        cache_budget_bytes: Annotated[NonNegInt, Flag("--cache-budget", unit="bytes")] = 1 << 30

    `unit`: the flag takes human units (`1GiB`, `15.75GB/s`) and parses them into the field.
    `default`: how to show a default decided at run time (a factory, or None meaning
    something). `argument`: positional, not an option. `cli=False` (`NOT_A_FLAG`): the field
    is set elsewhere, never on the command line. `needs`: the other flags' values without
    which this one means nothing (`Needs`); given with another value it is refused, not ignored.
    """

    name: str | None = None
    short: str | None = None
    unit: Literal["bytes", "bandwidth"] | None = None
    default: str | None = None
    argument: bool = False
    cli: bool = True
    needs: Needs | tuple[Needs, ...] = ()

    @property
    def conditions(self) -> tuple[Needs, ...]:
        return self.needs if isinstance(self.needs, tuple) else (self.needs,)


@dataclass(frozen=True)
class Needs:
    """A flag means something only while the flag of the field `other` has one of `values`
    (given, or left at its default); `why` says what the flag does, for the refusal.

        alpha: Annotated[float, Flag(needs=Needs("freeze", ("auto", "alpha"), "it sets ..."))]

    `pipeplan run --freeze none --alpha 0.3` is then one line: `--alpha means nothing with
    --freeze none; it sets ...`. `values=(None,)`: the flag means nothing once `other` is
    given (`--device-memory` beside `--plan`). `excluding=True`: `values` are instead the
    ones with which it means nothing. `test`: a predicate on `other`'s value instead of
    `values`, for conditions no list of values states (`--cache-budget` with `--freeze 0,0`,
    a list that freezes nothing). `when`: only these values of the flag itself are refused
    (`(True,)`: `--cache` beside `--freeze none`, while `--no-cache` there says what holds).
    A plain typer parameter of a command takes the same marker in its `Annotated[...]`
    (`pipeplan.options.checked`).
    """

    other: str
    values: tuple[Any, ...]
    why: str
    excluding: bool = False
    test: Callable[[Any], bool] | None = None
    when: tuple[Any, ...] | None = None

    def met(self, value: Any) -> bool:
        """Whether the flag means something while `other` is `value`."""
        if self.test is not None:
            return self.test(value)
        return (value in self.values) != self.excluding

    def concerns(self, value: Any) -> bool:
        """Whether the flag given as `value` is held to this condition at all."""
        return self.when is None or value in self.when


NOT_A_FLAG = Flag(cli=False)


def flag_marker(model: type[BaseModel], field: str) -> Flag:
    """The field's `Flag`, or the default one when it has none."""
    return next((m for m in model.model_fields[field].metadata if isinstance(m, Flag)), Flag())


def flag_of(model: type[BaseModel], field: str) -> str:
    """`flag_of(RunConfig, "cache_budget_bytes")` → `"--cache-budget"`: for messages that name
    what the user typed."""
    marker = flag_marker(model, field)
    if marker.argument:
        return field.upper()
    return marker.name or "--" + field.replace("_", "-")


def int_list(text: str) -> list[int] | None:
    """`int_list("0, 2,4")` → [0, 2, 4]; None unless every comma-separated part is ASCII
    digits. The one reading of an integer list a user types (--freeze, --micro-batch-sizes,
    --boundaries): `int()` also takes "١", "１", "+1" and "1_0", which typed flags refuse, and
    "0,,3" is a typo, not 0,3."""
    parts = [part.strip() for part in text.split(",")]
    if not all(part.isascii() and part.isdigit() for part in parts) or leading_zero(text):
        return None
    if long := next((part for part in parts if len(part) > MAX_DIGITS), None):
        # Read as 10**100 (`_digits`), a message then quoted a value never typed (fiftieth
        # round): said as typed, cut.
        raise LongInteger(
            f"{quoted(long)} has {len(long):,} digits; it is beyond every limit pipeplan has"
        )
    return [_digits(part) for part in parts]


class LongInteger(PipeplanError, ValueError):
    """An integer of more than MAX_DIGITS digits in a list: a user's error (one line) where a
    flag is read, a field's error where pydantic reads it (a ValueError names the field)."""


# A decimal number as a user types one, in flags and their units (`16GiB`, `0.3`, `1e-3`,
# `.5`): ASCII digits, no sign, no '_', no leading zero ('0256', '016GiB': `leading_zero`).
DECIMAL = r"(?:(?:0|[1-9][0-9]*)(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?"


def unpadded(text: str) -> str:
    """`unpadded("016GiB")` → "16GiB": the spelling without its leading zeros, for the
    message that refuses them (the text itself when it has none)."""
    return re.sub(r"^(-?)0+(?=[0-9])", r"\1", text)


def spaced(text: str) -> str:
    """Why a value with space around it is refused: `spaced(" 0.3")` → the message."""
    if not text.strip():
        return f"{quoted(text)} is only spaces; give a value"
    return f"{quoted(text)} has space around it (a quoting mistake?); give {quoted(text.strip())}"


def leading_zero(text: str) -> str | None:
    """`leading_zero("4,0256")` → why '0256' is refused (None when no integer in the flag's
    text or comma list has one): `int()` reads it as 256, some tools as octal 174, so the
    spelling is ambiguous, and '-0' is a sign on nothing."""
    for part in (p.strip() for p in text.split(",")):
        digits = part.removeprefix("-")
        if not (digits.isascii() and digits.isdigit()):
            continue
        if part == "-0":
            return "'-0' has a sign on 0; write 0"
        if len(digits) > 1 and digits.startswith("0"):
            value = _digits(digits) * (-1 if part.startswith("-") else 1)
            octal = set(digits) <= set("01234567") and len(digits) <= MAX_DIGITS
            other = int(part, 8) if octal else value
            read = f": read as {value}, though in octal it is {other}" if other != value else ""
            return f"{quoted(part)} has a leading zero{read}; write {value}"
    return None


# Beyond every limit a count has: more digits than this are read as 10**100, so the field's
# range refuses the value by name (int() raises past 4300 digits: a traceback).
MAX_DIGITS = 100


def _digits(text: str) -> int:
    return int(text) if len(text) <= MAX_DIGITS else 10**MAX_DIGITS


def whole_number(text: str) -> int | None:
    """`whole_number("10")` → 10, `whole_number("-3")` → -3; None unless ASCII digits after
    at most one leading '-', without a `leading_zero` or space around them. The one reading
    of an integer flag: `int()` (and pydantic's lax mode, which typer used) also takes "1_0",
    "+2", " 2" and "١", which `int_list` refuses. A '-' is read so that the field's own range
    says why -1 is refused."""
    digits = text.removeprefix("-")
    if not (digits.isascii() and digits.isdigit()) or leading_zero(text):
        return None
    return -_digits(digits) if text.startswith("-") else _digits(digits)


def schema_version(model: type[BaseModel]) -> int:
    """The version a top-level format writes and reads (its `schema_version` default)."""
    return model.model_fields["schema_version"].default


def _first_error(exc: ValidationError) -> str:
    """`field 'a.b': MSG`, or MSG alone for a check of the whole object (its own words name
    the fields): a validator's message without pydantic's "Value error, " before it."""
    err = exc.errors()[0]
    # Keys come from the file: escaped, so a key with a line break cannot break the one line,
    # and shortened, so a key of 100,000 characters is not a line of 100 KB.
    where = ".".join(_key_shown(p) for p in err["loc"])
    message = str(err["ctx"]["error"]) if err["type"] == "value_error" else err["msg"]
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return f"field '{where}': {message}{more}" if where else f"{message}{more}"


def _key_shown(key: str | int) -> str:
    """`_key_shown("a\nb")` → 'a\\nb'; a key longer than 40 characters as its first 20 and
    its length: 'yyyyyyyyyyyyyyyyyyyy… (100000 characters)'."""
    text = str(key).encode("unicode_escape").decode()
    return text if len(text) <= 40 else excerpt(text, 20)


def kind_of(model: type) -> str:
    """A format's name in messages: `kind_of(CheckpointManifest)` → 'checkpoint manifest'."""
    return re.sub(r"(?<=[a-z])(?=[A-Z])", " ", model.__name__).lower()


def _reject_constant(token: str) -> float:
    raise ValueError(f"{token} is not valid JSON")


def _finite_float(token: str) -> float:
    value = float(token)
    if not math.isfinite(value):  # 1e400 parses to inf without a word
        raise ValueError(f"{token} is out of range for a number")
    return value


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A key given twice is a mistake JSON parsers hide by keeping the last value: the
    `object_pairs_hook` of every JSON pipeplan reads, its own files and a model folder's alike.

        json.loads('{"a": 1, "a": 2}', object_pairs_hook=unique_keys)
        # ValueError: key 'a' appears twice
    """
    result = dict(pairs)
    if len(result) < len(pairs):
        seen: set[str] = set()
        twice = next(key for key, _ in pairs if key in seen or seen.add(key))
        raise ValueError(f"key {twice!r} appears twice")
    return result


# The most digits of an integer in any JSON pipeplan reads: Python's own limit for int()
# (sys.get_int_max_str_digits), past which json said "Exceeds the limit (4300 digits) for
# integer string conversion …; use sys.set_int_max_str_digits()". No field's range comes near.
MAX_INT_DIGITS = 4300
_TOO_MANY_DIGITS = re.compile(rf"[0-9]{{{MAX_INT_DIGITS + 1}}}")
# A UTF-16 surrogate's escape (`\ud800`): json reads a lone one into a str that is no text
# (pydantic's own reading refused it as "unexpected end of hex escape", naming no field: the
# seventy-seventh round); a pair is one character and reads as it.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


class TooManyDigits(ValueError):
    """An integer of more than MAX_INT_DIGITS digits; the message names the field."""


class _Digits:
    """What `parse_int` makes of an integer too long for int(): its digit count, for
    `json_loads` to name where it is."""

    def __init__(self, digits: int) -> None:
        self.digits = digits


def parse_int(token: str) -> int | _Digits:
    """json's parse_int: an int, or for one of more than MAX_INT_DIGITS digits a marker that
    `json_loads` refuses, naming the field (int() raised without a field)."""
    digits = len(token) - token.startswith("-")
    return _Digits(digits) if digits > MAX_INT_DIGITS else int(token)


def json_loads(text: str, *, surrogates_checked: bool = True, **hooks: Any) -> Any:
    """json.loads(text, **hooks) of any JSON pipeplan reads, an integer of more than
    MAX_INT_DIGITS digits refused: TooManyDigits naming its field (twentieth round: Python's
    advice to call sys.set_int_max_str_digits() was the message); and a string or key holding
    an unpaired surrogate (`"\\ud800"`, no text) a ValueError naming it.

        json_loads('{"max_length": 1' + "0" * 5000 + "}")
        # TooManyDigits: max_length is an integer of 5,001 digits; …
    """
    data = json.loads(text, parse_int=parse_int, **hooks)
    # (`surrogates_checked=False`: a JSONL row's reader names the row's field itself)
    surrogates = surrogates_checked and _SURROGATE_ESCAPE.search(text) is not None
    if not surrogates and _TOO_MANY_DIGITS.search(text) is None:  # the common case: no walk
        return data
    pending: list[tuple[tuple, Any]] = [((), data)]  # (key path, value), first on top
    while pending:
        at, value = pending.pop()
        where = "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in at).lstrip(".")
        if isinstance(value, _Digits):
            raise TooManyDigits(
                f"{where or 'the value'} is an integer of {value.digits:,} digits; "
                f"a number pipeplan reads has at most {MAX_INT_DIGITS:,} (each field its range)"
            )
        if surrogates and isinstance(value, str) and (lone := _LONE_SURROGATE.search(value)):
            raise ValueError(
                f"{where or 'the value'} holds \\u{ord(lone[0]):04x}, an unpaired surrogate, "
                "not text"
            )
        if isinstance(value, dict):
            for key in value:
                if surrogates and (lone := _LONE_SURROGATE.search(key)):
                    raise ValueError(
                        f"a key of {where or 'the top-level object'} holds "
                        f"\\u{ord(lone[0]):04x}, an unpaired surrogate, not text"
                    )
            pending += [((*at, key), item) for key, item in value.items()][::-1]
        elif isinstance(value, list):
            pending += [((*at, i), item) for i, item in enumerate(value)][::-1]
    return data


# The most keys an object read as one of pipeplan's models may have (the largest has 31
# fields). Pydantic makes one error for each unknown key, about 1.7 KB apiece, all before the
# first is read: an object of a million keys took 1.8 GB and 30 s to refuse. The keys of a
# dict field (a config's id2label, grad_norms) are data, not fields: they are not counted
# (such a dict stops at its first bad element, `fail_fast`).
MAX_OBJECT_KEYS = 1024


def check_keys(data: Any, models: tuple[type[BaseModel], ...], source: str) -> None:
    """No object in decoded `data` that pydantic would read as one of `models` (or a model
    nested in them) has more than MAX_OBJECT_KEYS keys; InputFileError naming the file and
    the field otherwise (`check_keys(json.loads(text), (Profile,), "p.json")`)."""
    stack: list[tuple[Any, frozenset[type[BaseModel]], tuple]] = [(data, frozenset(models), ())]
    while stack:
        value, expected, at = stack.pop()
        if isinstance(value, list):
            stack.extend((v, expected, (*at, i)) for i, v in enumerate(value) if _nested(v))
            continue
        if not isinstance(value, dict):  # a record that is `null` or `3`: pydantic says so
            continue
        if len(value) > MAX_OBJECT_KEYS:
            where = f"field '{'.'.join(map(str, at))}'" if at else "the top-level object"
            raise InputFileError(
                f"{source}: {where} has {len(value):,} keys, more than the "
                f"{MAX_OBJECT_KEYS:,} of any object pipeplan reads"
            )
        for key, item in value.items():
            if _nested(item) and (inner := _inside(expected, key)) is not None:
                stack.append((item, inner, (*at, key)))


def _nested(value: Any) -> bool:
    return isinstance(value, (dict, list))


@functools.cache
def _inside(expected: frozenset[type[BaseModel]], key: str) -> frozenset | None:
    """The models the value of `key` may be read as, in an object read as one of `expected`;
    None when it is a dict field of each that has it (its keys are data), so left unwalked.
    An empty set (a list of numbers, an unknown key): its objects are still counted."""
    owners = [m.model_fields[key].annotation for m in expected if key in m.model_fields]
    if owners and all(_is_dict(a) for a in owners):
        return None
    return frozenset(m for a in owners for m in _models_in(a))


def _is_dict(annotation: Any) -> bool:
    """`dict[str, float] | None` → True: a dict, or nothing."""
    if get_origin(annotation) is Annotated:
        return _is_dict(get_args(annotation)[0])
    if get_origin(annotation) in (Union, types.UnionType):
        return all(_is_dict(a) or a is type(None) for a in get_args(annotation))
    return annotation is dict or get_origin(annotation) is dict


def _models_in(annotation: Any) -> set[type[BaseModel]]:
    """`list[LayerProfile] | None` → {LayerProfile}: the models an annotation names."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return {annotation}
    return {m for a in get_args(annotation) for m in _models_in(a)}


def check_json(text: str, source: str) -> Any:
    """Syntax, NaN/Infinity and out-of-range numbers, nesting depth: InputFileError."""
    try:
        return json_loads(
            text,
            parse_constant=_reject_constant,
            parse_float=_finite_float,
            object_pairs_hook=unique_keys,
        )
    except TooManyDigits as exc:  # valid JSON: a number no field takes
        raise InputFileError(f"{source}: {exc}") from None
    except (ValueError, RecursionError) as exc:
        raise InputFileError(f"{source}: not valid JSON ({str(exc).splitlines()[0]})") from None
    except MemoryError:
        raise InputFileError(out_of_memory(source, text)) from None


def first_error(exc: ValidationError) -> str:
    """The first of a ValidationError's errors, as one line naming the field."""
    return _first_error(exc)


# Each file kind a user may give in the wrong place, by model, and its name in words: filled
# in by `pipeplan.formats` (this module imports none of the models). `parse` names the kind a
# document is when it is not the one wanted.
KINDS: dict[type[BaseModel], str] = {}
# Each kind's largest file in bytes, also filled in by `pipeplan.formats`: `load` refuses a
# larger one before reading it (MAX_JSON_BYTES for a kind not named).
FILE_LIMITS: dict[type[BaseModel], int] = {}


def _is_kind(model: type[BaseModel], data: dict) -> bool:
    """Whether `data`'s keys are those of a `model` document: every key one of its fields, and
    every required field there (every field, for a model that requires none: run.json)."""
    fields = set(model.model_fields)
    needed = {k for k, f in model.model_fields.items() if f.is_required()} or fields
    return set(data) <= fields and needed <= set(data)


def other_kind(model: type[BaseModel], data: dict) -> str | None:
    """The kind of file `data` is (a name of KINDS) when it is plainly another than `model`:
    it has the keys of exactly one other kind and is not a `model` document (it lacks a field
    `model` requires, or has one `model` lacks). None otherwise (then `model`'s own checks say
    what is wrong).

        other_kind(Plan, json.load(open("profiles/vit-digits@cpu-1t.json")))   # "profile"
    """
    required = {k for k, f in model.model_fields.items() if f.is_required()}
    # Holding what `model` requires is not enough: a checkpoint manifest has the
    # `frozen_layers` a freeze trajectory requires, and was refused for its type.
    if required and required <= set(data) <= set(model.model_fields):
        return None
    others = {name for kind, name in KINDS.items() if kind is not model and _is_kind(kind, data)}
    return others.pop() if len(others) == 1 else None


def parse(model: type[M], text: str, source: str = "input") -> M:
    """Parse JSON text into `model`, raising InputFileError with one line on any problem."""
    kind = kind_of(model)
    data = check_json(text, source)
    if not isinstance(data, dict):
        # A list of counts is what a freeze trajectory is, bare (the fifty-third round).
        counts = isinstance(data, list) and all(type(x) is int for x in data[:100])
        it = " (it is a JSON list: a freeze trajectory is one)" if counts and data else ""
        raise InputFileError(f"{source}: expected a JSON object for a {kind}{it}")
    # Before its version: a profile given as --plan was "plan schema_version 1 is not
    # supported", as if it were an old plan.
    other = other_kind(model, data)
    if other is not None:
        raise InputFileError(f"{source}: not a {KINDS.get(model, kind)} (it is a {other})")
    version, expected = data.get("schema_version"), schema_version(model)
    if "schema_version" not in data:  # not "schema_version None", a value never written
        raise InputFileError(f"{source}: {missing_version(kind, expected)}")
    # `true == 1` in Python: the type is checked too, so a boolean is not a version.
    if type(version) is not int:  # '2' was "… '2' is not supported (this pipeplan reads 2)"
        raise InputFileError(
            f"{source}: {kind} schema_version is {excerpt(repr(version))}, not an integer "
            f"(this pipeplan reads {expected})"
        )
    if version != expected:
        raise InputFileError(
            f"{source}: {kind} schema_version {version!r} is not supported "
            f"(this pipeplan reads {expected})"
        )
    # A model's own lists counted before pydantic builds them (`Plan.check_counts`).
    if (check_counts := getattr(model, "check_counts", None)) is not None:
        try:
            check_counts(data)
        except ValueError as exc:
            raise InputFileError(f"{source}: {kind}: {exc}") from None
    check_keys(data, (model,), source)  # before pydantic makes an error of each unknown key
    del data  # the decoded copy: validation decodes the text again
    try:
        return _validate(model, text, source, kind)
    except MemoryError:  # also one raised while the validation error is read
        raise InputFileError(out_of_memory(source, text)) from None


def missing_version(kind: str, expected: int) -> str:
    """The words for a document without its schema_version: `missing_version("cluster", 1)` →
    "cluster has no schema_version; every pipeplan file states its version (this pipeplan
    reads 1)"."""
    return (
        f"{kind} has no schema_version; every pipeplan file states its version (this pipeplan "
        f"reads {expected})"
    )


def _validate(model: type[M], text: str, source: str, kind: str) -> M:
    """`model` from JSON `text`, or InputFileError naming the first field that is wrong."""
    try:
        # Strict JSON validation: "2" is not 2 and true is not 1; a JSON array may be a tuple.
        return model.model_validate_json(text, strict=True)
    except ValidationError as exc:
        # A field's error says "invalid", a check of the whole object says what disagrees.
        whole = not exc.errors()[0]["loc"]
        raise InputFileError(
            f"{source}: {'' if whole else 'invalid '}{kind}: {_first_error(exc)}"
        ) from None
    except RecursionError:
        raise InputFileError(f"{source}: {kind} is nested too deeply") from None


def out_of_memory(source: str, text: str) -> str:
    """The one line for a MemoryError while decoding `text`, a file's or a run.jsonl line's
    (`out_of_memory("p.json", text)` → "p.json: out of memory decoding its JSON (31,457,280
    characters; …)"): under its kind's limit a file decodes in a stated amount
    (docs/formats.md), which this process did not have."""
    return (
        f"{source}: out of memory decoding its JSON ({len(text):,} characters; decoding takes "
        "up to about 33 bytes for each); run pipeplan with more memory"
    )


def read_input(
    path: str | Path,
    limit: int = MAX_FILE_BYTES,
    *,
    why: str = "not a pipeplan file",
    errors: str = "strict",
) -> str:
    """A regular file's text, at most `limit` bytes: a FIFO or device would block or never
    end, and a file that large is not one pipeplan wrote (`read_input(pointer, 4096)`).
    `path` is best the user's own text (see `check_input_file`). `errors` is the decoding's
    (`"replace"`: bytes not UTF-8 read as U+FFFD, for a check that quotes what it read)."""
    try:
        with open_input(path, limit, why=why) as f:
            data = _read_at_most(f, limit)
        if len(data) > limit:
            raise InputFileError(f"{path}: larger than {_size(limit)}, {why}")
        return data.decode("utf-8", errors=errors)
    except FileNotFoundError:
        raise InputFileError(f"{path}: no such file") from None
    except NotADirectoryError:
        raise InputFileError(f"{path}: {_not_a_folder(path)}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise open_files_failure(exc, path) or InputFileError(
            f"{path}: cannot read ({reason(exc)})"
        ) from None
    except MemoryError:  # a file under a large limit, in a process with less
        why = "out of memory reading it; run pipeplan with more memory"
        raise InputFileError(f"{path}: {why}") from None


def _read_at_most(f: BinaryIO, limit: int) -> bytes:
    """An open file's bytes to its end, but no more than `limit` + 1 (one more tells a file
    past the limit), taking memory for what the file holds, not for the limit:
    `_read_at_most(f, 1 << 30)` of a 1 KB file → its 1 KB. Found by the twenty-eighth round:
    `f.read(limit + 1)` allocates its `limit + 1` bytes before reading (CPython), so under
    `ulimit -v` every 1 KB file read under the 1 GiB default was "out of memory reading it".
    The first read is sized from the open file's size; a file that grew since (or reports no
    size) is read on in chunks of at most READ_CHUNK_BYTES, still stopping past the limit."""
    size = os.fstat(f.fileno()).st_size
    chunks, total, want = [], 0, min(size, limit) + 1  # one more: a grown file is seen
    while total <= limit and (chunk := f.read(min(want, limit + 1 - total))):
        chunks.append(chunk)
        total += len(chunk)
        want = READ_CHUNK_BYTES
    return b"".join(chunks)


def read_lines(
    path: str | Path,
    line_limit: int,
    limit: int = MAX_FILE_BYTES,
    *,
    why: str = "not a pipeplan file",
) -> Iterator[str]:
    """A regular file's lines, read one at a time (each with its newline, the last one maybe
    without), at most `limit` bytes in all: a file of records is never held whole, so a
    reader that finds a bad record early stops early (`for line in read_lines(path, 1 << 24)`).
    A line of more than `line_limit` characters is yielded cut after them; the reader
    refuses it by its length."""
    total = 0
    with open_input(path, limit, why=why) as f:
        try:
            # A UTF-8 character is at most 4 bytes: a line of line_limit + 1 characters
            # takes no more than this to tell apart from a legal one.
            most = 4 * (line_limit + 1)
            while line := f.readline(most):
                total += len(line)
                if total > limit:  # the file grew since it was opened
                    raise InputFileError(f"{path}: larger than {_size(limit)}, {why}")
                # A line cut at `most` may end inside a character: it is refused by its length.
                cut = len(line) == most and not line.endswith(b"\n")
                yield line.decode("utf-8", errors="ignore" if cut else "strict")
        except (OSError, UnicodeDecodeError) as exc:
            raise open_files_failure(exc, path) or InputFileError(
                f"{path}: cannot read ({reason(exc)})"
            ) from None


def open_input(
    path: str | Path, limit: int = MAX_FILE_BYTES, *, why: str = "not a pipeplan file"
) -> BinaryIO:
    """`path` opened for reading, once `check_input_file`'s checks hold for what was opened:
    a regular file of at most `limit` bytes, by `fstat` of the open descriptor
    (`with open_input("p.json", 1 << 20) as f: ...`). InputFileError otherwise, in one line.

    Found by the forty-second round: a stat of the path, then `open(path)`, let a FIFO
    swapped in between block the open forever (no writer ever came). Opened without
    blocking, a FIFO or device is opened at once and refused by what the descriptor is; a
    regular file ignores O_NONBLOCK, which is cleared all the same before it is read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise InputFileError(f"{path}: no such file") from None
    except NotADirectoryError:  # a file given where a folder is: Python's name leaked
        raise InputFileError(f"{path}: {_not_a_folder(path)}") from None
    except OSError as exc:
        # A socket cannot be opened (ENXIO): said as what it is, as a FIFO is (the
        # ninety-fourth round: "cannot read (OSError: No such device or address)").
        with contextlib.suppress(OSError):
            if exc.errno == errno.ENXIO and not stat.S_ISREG(mode := os.stat(path).st_mode):
                raise InputFileError(f"{path}: {_not_regular(mode)}") from None
        raise open_files_failure(exc, path) or InputFileError(
            f"{path}: cannot read ({reason(exc)})"
        ) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise InputFileError(f"{path}: {_not_regular(info.st_mode)}")
        if info.st_size > limit:
            raise InputFileError(f"{path}: larger than {_size(limit)}, {why}")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException as exc:
        os.close(fd)
        if isinstance(exc, OSError):
            raise open_files_failure(exc, path) or InputFileError(
                f"{path}: cannot read ({reason(exc)})"
            ) from None
        raise


def check_input_file(
    path: str | Path, limit: int = MAX_FILE_BYTES, *, why: str = "not a pipeplan file"
) -> None:
    """`path` is a regular file of at most `limit` bytes, from its size alone, before any of
    it is read (a sparse 3 GiB file would otherwise be read whole); for files a reader then
    streams, such as text data (`check_input_file(Path("train.csv"), why="...")`).

    Given as the user typed it (a str), a path is checked as the system reads it: pathlib
    drops a trailing slash (`Path("vd.json/")` is vd.json), which names a folder to the
    system (`open("vd.json/")` fails), so `--profile vd.json/` was read as the file
    (thirty-seventh round); now it is "vd.json/: not a directory (vd.json is a regular file)"."""
    try:
        info = os.stat(path)  # the text itself, not a Path of it: its trailing slash counts
    except FileNotFoundError:
        raise InputFileError(f"{path}: no such file") from None
    except NotADirectoryError:  # a file given where a folder is: Python's name leaked
        raise InputFileError(f"{path}: {_not_a_folder(path)}") from None
    except OSError as exc:
        raise open_files_failure(exc, path) or InputFileError(
            f"{path}: cannot read ({reason(exc)})"
        ) from None
    if not stat.S_ISREG(info.st_mode):
        raise InputFileError(f"{path}: {_not_regular(info.st_mode)}")
    if info.st_size > limit:
        raise InputFileError(f"{path}: larger than {_size(limit)}, {why}")


def _not_regular(mode: int) -> str:
    """What an input that is no regular file is (the ninety-third round: `--data d.jsonl`, a
    folder, a FIFO or /dev/zero, was "not a regular file" alone, where other inputs said)."""
    from pipeplan.fileio import entry_kind

    return f"not a regular file ({entry_kind(mode)})"


def _not_a_folder(path: str | Path) -> str:
    """Why `path` cannot be reached, for a NotADirectoryError: `_not_a_folder(Path(
    "/etc/hostname/run.json"))` → "no such file (/etc/hostname is a regular file, not a
    folder)"; `_not_a_folder("vd.json/")`, a file named as a folder by its trailing slash (or
    slash and dot), → "not a directory (vd.json is a regular file)"."""
    from pipeplan.fileio import entry_kind

    named = Path(path)  # without the trailing slash: the entry the text names as a folder
    if os.fspath(path).endswith(("/", "/.")) and named.exists() and not named.is_dir():
        return f"not a directory ({named} is {entry_kind(named.stat().st_mode)})"
    for folder in reversed(named.parents):
        if folder.exists() and not folder.is_dir():
            return f"no such file ({folder} is {entry_kind(folder.stat().st_mode)}, not a folder)"
    return "no such file (a folder on its path is a file)"


def _size(limit: int) -> str:
    """4096 → '4 KiB', 1 << 30 → '1024 MiB': the limit in the unit a message reads best in."""
    return f"{limit >> 20} MiB" if limit >= 1 << 20 else f"{limit >> 10} KiB"


def limit_of(model: type[BaseModel]) -> int:
    """The largest `model` file `load` reads: `limit_of(Cluster)` → 1 MiB (`FILE_LIMITS`)."""
    return FILE_LIMITS.get(model, MAX_JSON_BYTES)


# A run's files that are not one JSON document, by name: a JSON reader given one said "not
# valid JSON (Extra data …)", not what it was (twenty-second round). Its JSON files (run.json,
# summary.json, data.json, manifests) are named by their keys (`other_kind`).
RUN_FILE_KINDS = {
    "run.jsonl": "a run's records, run.jsonl",
    "metrics.csv": "a run's metrics table, metrics.csv",
}
LOG_FILE = re.compile(r"(rank-[0-9]+|launcher)\.log")


def run_file_kind(path: Path) -> str | None:
    """What `path` is when it is a run's file no JSON reader takes, a run directory or a
    checkpoint folder; None otherwise (the reader's own checks say what is wrong):

        run_file_kind(Path("runs/b0/run.jsonl"))   # "a run's records, run.jsonl"
        run_file_kind(Path("runs/b0"))             # "a run directory"
    """
    try:
        if path.is_dir():
            if is_run_directory(path):
                return "a run directory"
            return "a checkpoint folder" if (path / "manifest.json").is_file() else None
    except (OSError, ValueError):  # unreachable, or no file name at all: not a run's
        return None
    if path.name in RUN_FILE_KINDS:
        return RUN_FILE_KINDS[path.name]
    return "a run's log" if LOG_FILE.fullmatch(path.name) else None


def refuse_run_file(path: Path, wanted: str) -> None:
    """InputFileError when `path` is one of a run's files `run_file_kind` names, given where
    a `wanted` file is: `refuse_run_file(Path("runs/b0"), "profile")` →
    "runs/b0: not a profile (it is a run directory)"."""
    kind = run_file_kind(path)
    if kind is not None:
        raise InputFileError(f"{path}: not a {wanted} (it is {kind})")


def load(model: type[M], path: str | Path) -> M:
    """`load(Profile, "p.json")`: a file larger than its kind's limit is refused unread.
    `path` as the user gave it is read as the system reads it (`check_input_file`)."""
    kind = KINDS.get(model, kind_of(model))
    refuse_run_file(Path(path), kind)  # before "not valid JSON" or "not a regular file"
    text = read_input(path, limit_of(model), why=f"the limit for a {kind}")
    return parse(model, text, str(Path(path)))


def dumps(obj: BaseModel) -> str:
    """Canonical JSON: field order from the model, two-space indent, trailing newline. Never
    larger than `load` reads of its kind (`TooLargeToRead`): a file written that no command
    reads (the fiftieth and fifty-first rounds: a profile, a calibrated profile)."""
    kind = kind_of(type(obj))
    try:
        text = json.dumps(obj.model_dump(mode="json"), indent=2, allow_nan=False) + "\n"
    except ValueError as exc:
        raise PipeplanError(f"refusing to write a {kind}: {exc}") from None
    limit = limit_of(type(obj))
    if len(text) > limit // 4 and (size := len(text.encode())) > limit:  # 4 bytes a char
        raise TooLargeToRead(
            f"a {kind} of {size:,} bytes is beyond the {limit:,} ({limit >> 20} MiB) any "
            f"command reads of a {kind}; nothing written"
        )
    return text


class TooLargeToRead(PipeplanError):
    """A document `dumps` will not write: larger than `load` reads of its kind."""


def first_difference(given: BaseModel, other: BaseModel) -> tuple[str, str, str] | None:
    """The first field (in the model's order) where two documents of one kind differ, with
    each side's value as its file writes it; None when they are equal:

        first_difference(manifest.layout, phase.layout)
        # → ('boundaries', '[0, 3, 10]', '[0, 5, 10]')

    For a message naming what differs: two layouts that differ only in their boundaries (or
    rank_map, or micro_batch_size) have the same `label()`, and a message built from labels
    read "2x1 M=4 1f1b, but phase 0 ran 2x1 M=4 1f1b" (eighteenth round)."""
    mine, theirs = given.model_dump(mode="json"), other.model_dump(mode="json")
    for field in type(given).model_fields:
        if mine.get(field) != theirs.get(field):
            return field, _shown(mine.get(field)), _shown(theirs.get(field))
    return None


def _shown(value: Any) -> str:
    """A value as JSON writes it, a string without quotes: `[0, 5, 10]`, `true`, `1f1b`."""
    return value if isinstance(value, str) else json.dumps(value)


def file_state(path: Path) -> tuple:
    """(resolved path, inode, mtime in ns, size): which file `path` is, as last written; the
    path alone where it cannot be read."""
    try:
        info = path.stat()
    except OSError:
        return (path.resolve(),)
    return (path.resolve(), info.st_ino, info.st_mtime_ns, info.st_size)
