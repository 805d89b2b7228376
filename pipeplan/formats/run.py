"""Run records: what `pipeplan run` writes under runs/NAME/, read back by report and calibrate.

- `run.json` — `RunConfig`: everything the run was started with; the options of `pipeplan run`
  are its fields.
- `run.jsonl` — one JSON object per line: `PhaseRecord` when a layout starts (the layout, the
  prediction and what priced it), `StepRecord` per optimizer step (with every rank's timings),
  `EpochRecord` per epoch.
- `summary.json` — `RunSummary`: measured vs predicted step time per phase, accuracy, totals.
"""

from __future__ import annotations

import logging
import math
import re
import struct
import sys
import time
from array import array
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

from pydantic import (
    AfterValidator,
    Field,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)

from pipeplan.errors import BadArgumentError, InputFileError, PipeplanError, quoted
from pipeplan.formats.base import (
    FLOAT32_MAX,
    MAX_COUNT,
    MAX_EPOCHS,
    MAX_RECORD_BYTES,
    MAX_SAMPLES,
    MAX_SECONDS,
    MAX_STEPS,
    NOT_A_FLAG,
    Bytes,
    Count,
    DataText,
    Flag,
    LongInteger,
    Needs,
    NonNegFloat,
    NonNegInt,
    PosBytes,
    PosFloat,
    PosInt,
    PredictedSeconds,
    Seconds,
    Seed,
    Sha256,
    Steps,
    Strict,
    Text,
    Versioned,
    check_json,
    check_keys,
    file_state,
    first_difference,
    first_error,
    int_list,
    leading_zero,
    load,
    out_of_memory,
    parse,
    read_input,
    read_lines,
    short,
    text_sha256,
)
from pipeplan.formats.cluster import DEFAULT_CACHE_BUDGET_BYTES, Cluster
from pipeplan.formats.freeze import Alpha
from pipeplan.formats.layout import Layout
from pipeplan.formats.plan import (
    Plan,
    StagePlan,
    check_stages,
    check_step_holds_stages,
    close_enough,
    step_upper_bound_s,
)
from pipeplan.formats.presets import config_path
from pipeplan.formats.profile import (
    MIN_MEASURED_S,
    WARMUP_STEPS_PER_PHASE,
    FedInput,
    Precision,
    Profile,
    Task,
    model_labels,
    model_mismatch,
    named_by_name,
    profile_sha256,
)

log = logging.getLogger("pipeplan.records")

Count0 = Annotated[int, Field(ge=0, lt=MAX_COUNT)]  # a rank, stage, replica or layer index
# The most ranks a run has, on one host or many (torchrun): every step each rank gathers every
# rank's times and run.jsonl records them (about 300 bytes a rank), 1.2 MB a step at 4096.
# A local run is held to this host's cores or GPUs as well (`pipeplan.spawn.check_local_ranks`).
MAX_RANKS = 4096
FreezeMode = Literal["auto", "alpha", "list", "none"]
# Where a run's weights come from: the model directory's checkpoint, or drawn from the seed.
Init = Literal["pretrained", "random"]

# The built-in dataset that goes with a built-in executor model: `--data`'s default.
DEFAULT_DATA = {"vit-digits": "digits", "bert-synth": "synth-text"}


class NoDefaultData(BadArgumentError):
    """`default_data`'s refusal, with the model it was asked of: `options.build` looks the model
    up before saying it, so that a misspelt or missing model is its own error, not `--data`'s."""

    def __init__(self, message: str, model: str) -> None:
        super().__init__(message)
        self.model = model


def default_data(model: str) -> str:
    """`default_data("vit-digits")` → `"digits"`; other models need `--data` (NoDefaultData)."""
    if model in DEFAULT_DATA:
        return DEFAULT_DATA[model]
    builtins = ", ".join(sorted(set(DEFAULT_DATA.values())))
    raise NoDefaultData(
        f"no default data for model {quoted(model)}; pass --data ({builtins}, or module:function)",
        model,
    )


# The suffixes of text data files: executor.text's TEXT_SUFFIXES (formats import no executor).
TEXT_DATA_SUFFIXES = (".jsonl", ".csv")


def _data_for_model(validated: dict[str, Any]) -> str:
    # `model` is missing only when it failed validation; that error is the one reported.
    return default_data(validated["model"]) if "model" in validated else ""


def _timestamp() -> str:
    return time.strftime("run-%Y%m%d-%H%M%S")


# A run's name is one plain folder name under --runs-dir: never a path out of it, never hidden,
# never `.` or `..`, never empty (an empty --name is not "pick one for me").
RUN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def check_run_name(name: str) -> str:
    """`check_run_name("exp1")` → "exp1"; ValueError for anything but a plain folder name."""
    if not RUN_NAME.fullmatch(name):
        # Shown whole up to a run name's length and a little more: not a line of megabytes.
        shown = repr(name) if len(name) <= 140 else quoted(name, 20)
        raise ValueError(
            f"{shown}: use up to 128 ASCII letters (a-z, A-Z), digits, '.', '_' and '-', "
            "starting with a letter or digit (a folder name, not a path)"
        )
    return name


# The conditions under which a flag means something (`pipeplan.options.check_needs`), shared
# by `pipeplan run` and `pipeplan plan`/`preview` where the flag means the same.
CACHE_BUDGET_NEEDS = Needs("cache", (True,), "it sizes the cache that --cache keeps")


def freezes_something(value: Any) -> bool:
    """Whether `--freeze VALUE` (or `--freeze-schedule VALUE`) can freeze a layer: not
    `none`, nor a list of zeros (`0,0`). Left out (None), a mode, or a trajectory file: it
    can (the file is not read before the flags are checked)."""
    if value == "none":
        return False
    try:
        layers = int_list(value) if isinstance(value, str) else value
    except LongInteger:  # 10^100 and more freeze something; the flag's own reading says why
        return True
    return not isinstance(layers, list) or any(layers)


def something_frozen(other: str, what: str, when: tuple[Any, ...] | None = None) -> Needs:
    """The flag (which does `what`) means nothing while the flag of `other` freezes nothing
    (`freezes_something`): `something_frozen("freeze_schedule", "it caches ...")`."""
    return Needs(other, (), f"{what}, and nothing freezes", test=freezes_something, when=when)


def names_a_directory(model: Any) -> bool:
    """Whether `--model VALUE` names a transformers directory or config.json, by the rule
    `pipeplan.models` resolves it with (`presets.config_path`: a built-in name is none, even
    beside a folder of its name; else a path: a `/`, a `.json`, or something there).
    `names_a_directory("vit-digits")` → False."""
    return (
        isinstance(model, str)
        and config_path(model) is not None
        and ("/" in model or model.endswith(".json") or Path(model).exists())
    )


# A built-in model is a shape without weights: it always starts from random ones, so
# `--init random` changes nothing and `--init pretrained` cannot be honoured. (A directory's
# config without weights needs `random`, and `pretrained` there is refused naming the
# directory, by `pipeplan.models`, which reads it; a directory with weights takes either.)
INIT_NEEDS = Needs(
    "model",
    (),
    "it chooses between a model directory's weights and random ones, and a built-in model "
    "has no weights: it always starts from random ones",
    test=names_a_directory,
)

# Nothing frozen, nothing cached: the cache, and the budget, of a cache never made.
BUDGET_DOES = "it sizes the cache of frozen layers' activations"
CACHE_DOES = "it caches the frozen layers' activations"
SOMETHING_FROZEN = something_frozen("freeze", BUDGET_DOES)
# `--no-cache` beside `--freeze none` says what holds (bench/bench_executor.py gives both):
# only `--cache` asks for something that cannot happen.
CACHE_SOMETHING_FROZEN = something_frozen("freeze", CACHE_DOES, when=(True,))
ALPHA_NEEDS = Needs(
    "freeze",
    ("auto", "alpha", None),  # None: plan/preview's --freeze left out, which is auto
    "it sets the α bound of --freeze auto and --freeze alpha",
)
# A plan file fixes the freeze schedule and the cache its phases were planned for: a run of
# it takes them from the file (`executor.launch.with_file_values`), so a flag that would set
# them is refused beside --plan, whatever its value, rather than recorded beside a plan that
# does otherwise.
PLAN_FREEZES = Needs(
    "plan", (None,), "the plan file fixes the freeze schedule its phases were planned for"
)
PLAN_CACHES = Needs(
    "plan", (None,), "the plan file fixes whether its phases read the activation cache"
)
PLAN_CACHE_BUDGET = Needs(
    "plan", (None,), "the plan file's cluster sets the cache budget its phases were priced with"
)


class RunConfig(Versioned):
    """A run's configuration, `runs/NAME/run.json`, and the options of `pipeplan run`: each
    option is a field here, with its default, description and unit (`pipeplan.options`)."""

    schema_version: Literal[1] = 1
    name: Annotated[Text, Flag(default="run-DATE-TIME")] = Field(
        default_factory=_timestamp,
        description="Run name: the run directory is runs/NAME/ (by default run-DATE-TIME, "
        "-2, -3, … after it where another run took it).",
    )
    model: Text = Field(
        "vit-digits",
        description="Built-in model, or a transformers directory (or its config.json); its "
        "weights are loaded.",
    )
    init: Annotated[
        Init | None,
        Flag(default="pretrained for a directory with weights, else random", needs=INIT_NEEDS),
    ] = Field(
        None,
        description="pretrained (the directory's weights) or random (its config alone; a "
        "directory without weights needs it).",
    )
    task: Annotated[
        Task | None,
        Flag(default="from the data: labelled text classification, plain text causal-lm"),
    ] = Field(None, description="classification, or causal-lm for decoders (GPT-2, Llama).")
    data: Annotated[DataText, Flag(default="the model's own task")] = Field(
        default_factory=_data_for_model,
        description="Training data: digits, synth-text, a text file FILE.jsonl or FILE.csv "
        "(20 % held out; or TRAIN,EVAL), or module:function.",
    )
    tokenizer: Annotated[Text | None, Flag(default="the model directory's")] = Field(
        None, description="Local tokenizer directory for text files."
    )
    seq_len: Annotated[Count | None, Flag(default="the model's own")] = Field(
        None, description="Tokens per sample of text models: text is padded or cut to it."
    )
    # Counts that scale a run's work are bounded here, so a fresh run, a resume and a
    # hand-edited run.json are refused alike, the message stating the limit.
    nproc: Count = Field(
        2,
        description="Ranks, one process each: started here by torch's elastic launcher, or the "
        "torchrun world size.",
    )
    device: Literal["cpu", "cuda"] = Field(
        "cpu", description="cpu (gloo) or cuda (NCCL, one GPU per rank)."
    )
    # fp32 in a run.json that lacks it; a command line that leaves it out takes the file's
    # (`launch.with_file_values`): said so, as plan and preview say it (the sixty-first round).
    precision: Annotated[Precision, Flag(default="the profile's, else fp32")] = Field(
        "fp32",
        description="fp32, or bf16: bfloat16 autocast with float32 weights and AdamW state, "
        "activations between stages and in the cache in bfloat16. Needs a profile of it: left "
        "out of the command line, it is --profile's, or that of the shipped profile --plan was "
        "made from, else fp32 (a run.json's default).",
    )
    global_batch: Count = Field(64, description="Global batch, fixed across phases.")
    epochs: PosInt = Field(4, le=MAX_EPOCHS, description="Epochs.")
    max_steps_per_epoch: Annotated[Steps | None, Flag(default="no cap")] = Field(
        None, description="Cap on the steps of an epoch, for quick runs."
    )
    # (at most 10: past float32's range the ranks failed on torch's overflow, the ninety-first
    # round, and AdamW past 1 already diverges at its first steps)
    lr: float = Field(1e-3, gt=0, le=10, description="Peak learning rate (AdamW), at most 10.")
    weight_decay: NonNegFloat = Field(
        0.01, description="AdamW weight decay, on every trainable parameter."
    )
    warmup_steps: Annotated[NonNegInt, Field(le=MAX_STEPS)] = Field(
        0, description="Steps of linear learning-rate warm-up; then cosine decay to 10 % of --lr."
    )
    clip_grad_norm: Annotated[PosFloat | None, Flag(default="no clipping")] = Field(
        None,
        description="Clip the gradient norm, taken over all stages and replicas, to this value.",
    )
    freeze: Annotated[FreezeMode, Flag(needs=PLAN_FREEZES)] = Field(
        "auto",
        description="auto (α bound and gradient criterion), alpha, none, or the frozen layers "
        "per epoch: 0,2,4 (then stored as list, with freeze_list).",
    )
    alpha: Annotated[Alpha, Flag(needs=(ALPHA_NEEDS, PLAN_FREEZES))] = Field(
        0.3, description="α bound of AutoFreeze, 1e-06 ≤ α < 1."
    )
    # Filled by --freeze 0,2,4: its errors name that flag.
    freeze_list: Annotated[list[Count0] | None, Flag("--freeze", cli=False)] = Field(
        None, max_length=MAX_EPOCHS, description="Frozen layers per epoch (freeze=list)."
    )
    freeze_every: Annotated[
        Steps | None,
        Flag(
            default="each epoch",
            needs=(
                Needs(
                    "freeze",
                    ("auto",),
                    "it sets how often the gradient criterion of --freeze auto decides; the "
                    "other modes decide by the epoch alone",
                ),
                PLAN_FREEZES,
            ),
        ),
    ] = Field(
        None,
        description="Also decide the freeze point at every N-th step (over the run) within an "
        "epoch; an N of the run's steps or more is refused.",
    )
    checkpoint_every: Annotated[
        Steps | None, Flag(default="only at layout changes and the end")
    ] = Field(
        None,
        description="Also checkpoint every N steps; an N of the run's steps or more is refused.",
    )
    cache: Annotated[bool, Flag(needs=(CACHE_SOMETHING_FROZEN, PLAN_CACHES))] = Field(
        True, description="AutoCache the frozen prefix's activations."
    )
    cache_budget_bytes: Annotated[
        Bytes,
        Flag(
            "--cache-budget",
            unit="bytes",
            needs=(CACHE_BUDGET_NEEDS, SOMETHING_FROZEN, PLAN_CACHE_BUDGET),
        ),
    ] = Field(
        DEFAULT_CACHE_BUDGET_BYTES,
        description="Host memory for the cache per node (its stage-0 ranks share one cache), "
        "in bytes; beyond it, files on the run directory's disk.",
    )
    seed: Seed = Field(0, description="Seed for weights, data order and dropout.")
    # At least a second: the ranks' store waits take it too, and 1 ms failed them before any
    # collective ("run.jsonl: no such file", the timeout unnamed).
    # Its own bounds, not Seconds' (ge 0) narrowed: -1 was refused as "greater than or equal
    # to 0", which 0.5 is (the seventy-first round).
    collective_timeout_s: Annotated[
        float, Field(ge=1.0, le=MAX_SECONDS), Flag("--collective-timeout")
    ] = Field(
        600.0,
        description="Seconds (at least 1) a rank waits in a collective or transfer before the "
        "run stops, naming the rank that did not respond (also one stopped or, under torchrun, "
        "slow as it starts). A dead rank stops it at once; one-sided work (checkpoints, cache "
        "fills, reading held-out data, re-planning) is waited for apart.",
    )
    # Below 1: at 1 every activation is zeroed in training, and nothing is learned.
    dropout: Annotated[NonNegFloat | None, Flag(default="the model's")] = Field(
        None, lt=1.0, description="Dropout probability of every dropout in the model, in [0, 1)."
    )
    device_memory_bytes: Annotated[
        PosBytes | None,
        Flag(
            "--device-memory",
            unit="bytes",
            default="one GPU's memory; on CPU the profiled host's memory / nproc; no more "
            "than this host's",
            needs=Needs(
                "plan",
                (None,),
                "the plan file's cluster sets the memory its layouts respect",
            ),
        ),
    ] = Field(None, description="Per-rank memory the planner respects, in bytes.")
    profile: Annotated[Text | None, Flag(default="the shipped one")] = Field(
        None, description="Profile the run plans with."
    )
    plan: Annotated[Text | None, Flag(default="plan during the run")] = Field(
        None, description="Plan file to run (the run plans each phase itself without one)."
    )
    # Set when the run is prepared, never on the command line: the run follows its copy of the
    # plan (run.plan.json), and a copy edited between runs was obeyed for the phases the run
    # had not reached yet (eighteenth round). Here, it is in every checkpoint's configuration
    # too, so run.json edited to match an edited copy is refused as any run.json edit is.
    plan_sha256: Annotated[Sha256 | None, NOT_A_FLAG] = Field(
        None,
        description="sha256 of the bytes of the run's copy of its plan (run.plan.json) as the "
        "run was prepared; absent in runs prepared before it was recorded.",
    )
    # Set when the run is prepared, never on the command line: a run of a model folder builds
    # its model from the folder's config.json again on resume and export, and one edited since
    # (dropout, layer_norm_eps, id2label) was trained or exported silently (twenty-fifth round).
    model_config_sha256: Annotated[Sha256 | None, NOT_A_FLAG] = Field(
        None,
        description="sha256 of the bytes of the model folder's config.json as the run was "
        "prepared; absent for a built-in model and in runs prepared before it was recorded.",
    )
    # The same for the folder's generation_config.json, which the model (and an export) takes
    # from the folder again: max_length 99 edited after the run was exported (twenty-sixth
    # round). A folder without one records the sha256 of no bytes (an empty file is no JSON a
    # run accepts), so a file added since is refused too.
    generation_config_sha256: Annotated[Sha256 | None, NOT_A_FLAG] = Field(
        None,
        description="sha256 of the bytes of the model folder's generation_config.json as the "
        "run was prepared, of no bytes when the folder had none; absent for a built-in model "
        "and in runs prepared before it was recorded.",
    )

    @model_validator(mode="before")
    @classmethod
    def _freeze_flag(cls, values: Any) -> Any:
        """`--freeze 0,2,4` is freeze=list with freeze_list [0, 2, 4]."""
        freeze = values.get("freeze") if isinstance(values, dict) else None
        if isinstance(freeze, str) and freeze not in get_args(FreezeMode):
            try:
                layers = int_list(freeze)
            except LongInteger as exc:  # a model's error names no field: the flag said here
                raise ValueError(f"--freeze: {exc}") from None
            if layers is not None:
                return {**values, "freeze": "list", "freeze_list": layers}
        return values

    @field_validator("name")
    @classmethod
    def _plain_name(cls, value: str) -> str:
        return check_run_name(value)

    @field_validator("data")
    @classmethod
    def _one_or_two_files(cls, value: str) -> str:
        """A comma separates TRAIN from EVAL: `--data a.jsonl,b.jsonl,c.jsonl` or `a.jsonl,`
        was read as no text data at all and blamed on --tokenizer (twentieth round).

        RunConfig(data="a.jsonl,")   # ValidationError: "… names no file after its comma …"
        """
        parts = value.split(",")
        if len(parts) == 1:
            return value
        takes = (
            "it takes one file, or TRAIN,EVAL: two text files (.jsonl or .csv) separated by a "
            "comma (a file whose name holds a comma cannot be given: rename or link it)"
        )
        if "" in parts:
            where = "before" if parts[0] == "" else "after"
            raise ValueError(f"{quoted(value)} names no file {where} its comma; {takes}")
        if len(parts) > 2:
            raise ValueError(f"{quoted(value)} names {len(parts)} files; {takes}")
        # As the whole value's is (the fifty-eighth round: "a.jsonl, b.jsonl" said " b.jsonl:
        # no such file", its space unseen, of a file that is there).
        spaced = next((part for part in parts if part != part.strip()), None)
        if spaced is not None:
            raise ValueError(
                f"{quoted(value)}: {quoted(spaced)} has space around it (a quoting mistake?); "
                f"{takes}"
            )
        if not all(part.lower().endswith(TEXT_DATA_SUFFIXES) for part in parts):
            raise ValueError(f"{quoted(value)} is not two text files; {takes}")
        return value

    @field_validator("nproc")
    @classmethod
    def _ranks(cls, value: int) -> int:
        if value > MAX_RANKS:
            raise ValueError(
                f"{value} ranks is beyond the limit of {MAX_RANKS}: every rank gathers and "
                "records every rank's times each step"
            )
        return value

    @field_validator("freeze", mode="before")
    @classmethod
    def _freeze_mode(cls, value: Any) -> Any:
        if isinstance(value, str) and leading_zero(value):
            raise ValueError(leading_zero(value))
        if isinstance(value, str) and value not in get_args(FreezeMode):
            raise ValueError(
                f"cannot read freeze schedule {quoted(value)} (auto, alpha, none, or "
                "comma-separated frozen layers per epoch like 0,2,4)"
            )
        return value

    @model_validator(mode="after")
    def _decay_keeps_the_weights(self) -> RunConfig:
        # AdamW scales each weight by 1 − lr · weight_decay a step: at 1 or more it is no
        # decay (the ninety-second round: --weight-decay 1e5 diverged, blaming --lr). Both as
        # given (`_exact`): rounded, `10.000001 with 0.1` read `10 with 0.1`, no product of 1 or
        # more (the ninety-third round).
        if self.lr * self.weight_decay >= 1:
            raise ValueError(
                f"--weight-decay {_exact(self.weight_decay)} with --lr {_exact(self.lr)}: AdamW "
                "scales each weight by 1 - lr x weight_decay every step, which must stay above 0; "
                "lower one"
            )
        return self

    @model_validator(mode="after")
    def _list_has_layers(self) -> RunConfig:
        if self.freeze == "list" and self.freeze_list is None:
            raise ValueError(
                "--freeze list names no layers: give the frozen layers per epoch, as --freeze 0,2,4"
            )
        return self

    def steps_per_epoch(self, samples: int) -> int:
        """`cfg.steps_per_epoch(len(data.train))`: whole global batches, at most the cap."""
        steps = samples // self.global_batch
        if self.max_steps_per_epoch is not None:
            steps = min(steps, self.max_steps_per_epoch)
        return steps


class RankTimes(Strict):
    rank: Count0
    stage: Count0 | None
    replica: Count0 | None
    step_s: Seconds
    fwd_s: Seconds
    bwd_s: Seconds
    wait_s: Seconds
    allreduce_s: Seconds
    optimizer_s: Seconds
    input_s: Seconds = Field(description="Reading the batch (and the cache) on stage 0.")
    peak_memory_bytes: NonNegInt | None = Field(
        None, description="Most device memory allocated since the phase began (CUDA; not on CPU)."
    )


class Horizon(Strict):
    """What a phase decided during the run weighs besides its freeze point: the rest of the
    training it will run for, the placement it would move from, and whether the cache may
    be used (`pipeplan.plan.decide_phase`)."""

    samples: PosInt = Field(description="Training samples per epoch (whole global batches).")
    epochs: PosInt = Field(description="Epochs left, this one included: the phase's horizon.")
    previous: Layout | None = Field(description="The layout the run would move from.")
    cache: bool = Field(description="Whether the run may read the frozen prefix from a cache.")


class Pricing(Strict):
    """What priced a phase, so that it can be re-planned from the run directory alone."""

    source: Literal["solver", "plan"] = Field(
        description="Solved during the run, or taken from the --plan file."
    )
    profile: Text = Field(
        description="The profile the cost model used, a file in the run directory: "
        "profile.json as given, or calibration-N.json when fitted during the run."
    )
    profile_sha256: str = Field(
        pattern=r"^[0-9a-f]{64}$", description="sha256 of that profile's canonical JSON."
    )
    calibration: Literal["none", "profile", "online"] = Field(
        description="The calibration applied: none, the one the profile came with, or one "
        "fitted during this run (then `profile` names the file it was written to)."
    )
    cluster: Cluster
    horizon: Horizon | None = Field(
        None, description="Solved during the run: what the decision weighed (None: plan)."
    )


class PhaseDecision(Strict):
    """A phase as rank 0 decided it: the layout, what the planner predicted for it, and what
    priced the prediction. Broadcast to every rank and recorded as a `PhaseRecord`."""

    layout: Layout
    predicted_step_s: PredictedSeconds | None
    predicted_stages: list[StagePlan] | None = Field(
        None, description="The planner's per-stage times (per micro-batch) for this layout."
    )
    pricing: Pricing

    @model_validator(mode="after")
    def _stages_match_layout(self) -> PhaseDecision:
        """The predicted stages are the layout's, and each one's work fits in the predicted
        step, as a plan's must (`check_step_holds_stages`): the nineteenth round's step of
        0.0 s, or a stage's fwd_s of 50 s beside a 0.088 s step, was reported as measured."""
        check_stages(self.layout, self.predicted_stages)
        if self.predicted_stages is not None and self.predicted_step_s is not None:
            m = self.layout.micro_batches
            stage, step = "predicted_stages[{}]", "predicted_step_s"
            check_step_holds_stages(self.predicted_stages, m, self.predicted_step_s, stage, step)
        return self


class PhaseRecord(PhaseDecision):
    kind: Literal["phase"] = "phase"
    phase: NonNegInt
    start_step: NonNegInt
    start_epoch: NonNegInt
    transition_s: Seconds = Field(description="Measured time to move state and rebuild.")
    resumed: bool = Field(
        False,
        description="Entered by --resume: the state came from a checkpoint, so transition_s "
        "moved nothing between ranks (calibration's group-rebuild fit skips it).",
    )


class StepRecord(Strict):
    kind: Literal["step"] = "step"
    step: NonNegInt
    epoch: NonNegInt
    phase: NonNegInt
    step_s: Seconds = Field(description="Wall time of the step on the slowest rank.")
    # Every loss the executor records is a mean cross-entropy: never negative.
    loss: NonNegFloat | None
    samples_per_s: NonNegFloat
    cache_hits: NonNegInt = Field(
        0, description="Samples of the step read from the cache: at most the global batch."
    )
    ranks: list[RankTimes]


# How a forecast continues the finished epochs (pipeplan.freeze.continuations).
Continuation = Literal["schedule", "no-further-freezing", "alpha-bound"]


def _normal_ratio(value: float) -> float:
    if value < sys.float_info.min or not math.isfinite(value):
        raise ValueError(f"{value!r} is no ratio of two totals (0 < speedup, finite, normal)")
    return value


class ForecastCase(Strict):
    continuation: Continuation = Field(
        description="schedule: the rest of a schedule decided without gradients (none, list, "
        "alpha); for auto, no-further-freezing (the least it can still freeze) and "
        "alpha-bound (the most)."
    )
    frozen_layers: list[NonNegInt] = Field(
        description="The schedule priced, per epoch of the whole run: the finished epochs' "
        "frozen layers, then the continuation."
    )
    # A ratio of two positive totals, rounded to 9 digits: never 0 nor subnormal (5e-324 was
    # reported as "0.00×", the fifty-eighth round).
    speedup: Annotated[float, Field(gt=0.0), AfterValidator(_normal_ratio)] = Field(
        description="End-to-end speedup of that schedule's elastic plan over the best static "
        "plan: `make_preview(...).predicted_speedup`."
    )


class Forecast(Strict):
    """At an epoch's end, the end-to-end speedup the run is heading for, priced as
    `pipeplan preview` prices (docs/architecture.md §4.13)."""

    samples: PosInt = Field(
        description="Training samples per epoch priced: the training set, or steps × global "
        "batch when --max-steps-per-epoch caps the epoch."
    )
    pricing: Pricing = Field(
        description="The profile (a file in the run directory: the latest online refit, if "
        "any) and the cluster the run plans with at this point."
    )
    cases: list[ForecastCase]


def _float32_norm(value: float) -> float:
    """A gradient norm as the run computes it, in float32: at most its largest finite value
    (the fifty-eighth round: 2.5e307 of every layer was reported and decided by)."""
    if value > FLOAT32_MAX:
        raise ValueError(
            f"{value:.6g} is past float32's largest value ({FLOAT32_MAX:.6g}), where a norm "
            "computed in float32 ends"
        )
    return value


class EpochRecord(Strict):
    kind: Literal["epoch"] = "epoch"
    epoch: NonNegInt
    phase: NonNegInt = Field(
        description="The phase the epoch ends in: its last steps' and evaluation's (records "
        "written before the thirty-seventh round's fixes name its first step's)."
    )
    frozen_layers: NonNegInt
    steps: NonNegInt
    epoch_s: Seconds = Field(description="Training time of the epoch (evaluation excluded).")
    eval_s: Seconds = 0.0
    train_loss: NonNegFloat | None  # means of cross-entropies, as the steps' losses
    eval_loss: NonNegFloat | None = Field(
        None, description="Held-out loss: per sample, or per predicted token (causal-lm)."
    )
    eval_accuracy: Annotated[float, Field(ge=0, le=1)] | None = Field(
        description="Held-out accuracy: of classes, or of next tokens (causal-lm)."
    )
    samples_per_s: NonNegFloat
    grad_norms: dict[Text, Annotated[NonNegFloat, AfterValidator(_float32_norm)]] = Field(
        default_factory=dict,
        description="Mean gradient norm per active layer this epoch (computed in float32).",
    )
    # Added later, with a default: records written before it still load.
    forecast: Forecast | None = Field(
        None, description="The forecast end-to-end speedup at the end of this epoch."
    )


# The fields of a rank's times that are floats, packed 8 bytes each in a step read back.
RANK_FLOATS = ("step_s", "fwd_s", "bwd_s", "wait_s", "allreduce_s", "optimizer_s", "input_s")


class RankRow:
    """A rank's times in a step read back (`StepRow.ranks`): RankTimes's fields, validated as
    RankTimes when the line was read, made on access from the step's packed floats (a
    RankTimes is about 1.5 kB of Python objects for 300 bytes of JSON)."""

    __slots__ = ("rank", "stage", "replica", *RANK_FLOATS, "peak_memory_bytes")

    def __init__(self, place: tuple, times: tuple[float, ...]) -> None:
        self.rank, self.stage, self.replica, self.peak_memory_bytes = place
        (
            self.step_s,
            self.fwd_s,
            self.bwd_s,
            self.wait_s,
            self.allreduce_s,
            self.optimizer_s,
            self.input_s,
        ) = times

    def record(self) -> RankTimes:
        """The RankTimes it was read as (checked then: not again)."""
        return RankTimes.model_construct(**{name: getattr(self, name) for name in self.__slots__})

    def __repr__(self) -> str:
        return f"RankRow(rank={self.rank}, stage={self.stage}, step_s={self.step_s!r})"


class StepRow:
    """A step record as `read_records` holds it: StepRecord's fields, validated as StepRecord
    line by line, in about a tenth of the memory. A StepRecord with its RankTimes is 4 kB of
    Python objects for a line of 770 bytes: a valid 695 MB run.jsonl of 890,000 steps took
    4.1 GB to report (the forty-second round, F12). Here each rank's placement (rank, stage,
    replica, peak memory) is a tuple shared with the step before when alike (as its epoch,
    phase and cache hits are), and its times are packed floats; `ranks` makes them RankRows
    when read. `record()` is the StepRecord.

        row = StepRow.of(step)      # row.step_s, row.ranks[0].fwd_s, row.record() == step
    """

    # StepRecord's fields but kind and ranks (made of _places and _times, both as read).
    __slots__ = ("cache_hits", "epoch", "loss", "phase", "samples_per_s", "step", "step_s")
    __slots__ += ("_places", "_times")
    kind = "step"

    @classmethod
    def of(cls, step: StepRecord, before: StepRow | None = None) -> StepRow:
        """`step` held compactly; its placements shared with `before`'s when alike."""
        row = cls.__new__(cls)
        row.step, row.step_s, row.loss = step.step, step.step_s, step.loss
        row.samples_per_s = step.samples_per_s
        # Alike from step to step: the objects of the step before (an epoch past 256 is an
        # int object of 28 bytes a step otherwise).
        for name in ("epoch", "phase", "cache_hits"):
            value = getattr(step, name)
            alike = before is not None and getattr(before, name) == value
            setattr(row, name, getattr(before, name) if alike else value)
        ranks = step.ranks
        places = tuple((r.rank, r.stage, r.replica, r.peak_memory_bytes) for r in ranks)
        row._places = before._places if before is not None and before._places == places else places
        times = [getattr(r, name) for r in ranks for name in RANK_FLOATS]
        row._times = struct.pack(f"{len(times)}d", *times)
        return row

    @property
    def ranks(self) -> list[RankRow]:
        count = len(RANK_FLOATS)
        times = struct.unpack(f"{count * len(self._places)}d", self._times)
        return [
            RankRow(place, times[n * count : (n + 1) * count])
            for n, place in enumerate(self._places)
        ]

    def record(self) -> StepRecord:
        """The StepRecord it was read as (checked then: not again)."""
        fields = {name: getattr(self, name) for name in self.__slots__ if name[0] != "_"}
        ranks = [rank.record() for rank in self.ranks]
        return StepRecord.model_construct(**fields, ranks=ranks)

    def model_dump(self, **kwargs: Any) -> dict[str, Any]:
        """As its StepRecord dumps: the line it was read from (`executor.records` rewrites
        the records a resume keeps)."""
        return self.record().model_dump(**kwargs)

    def model_dump_json(self, **kwargs: Any) -> str:
        return self.record().model_dump_json(**kwargs)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, StepRow | StepRecord):
            return self.record() == (other.record() if isinstance(other, StepRow) else other)
        return NotImplemented

    __hash__ = None  # as a StepRecord's

    def __repr__(self) -> str:
        return f"StepRow(step={self.step}, epoch={self.epoch}, phase={self.phase})"


# What a step record may be: as the executor writes it, or as `read_records` reads it back.
STEP_RECORDS = (StepRecord, StepRow)


Record = Annotated[PhaseRecord | StepRecord | EpochRecord, Field(discriminator="kind")]
RECORDS = (PhaseRecord, StepRecord, EpochRecord)  # what a run.jsonl line may be
_RECORD = TypeAdapter(Record)


class PhaseSummary(Strict):
    phase: NonNegInt
    layout: Layout
    steps: NonNegInt
    predicted_step_s: PredictedSeconds | None
    measured_step_s: NonNegFloat | None = Field(
        description="Median of steady steps: the first steps of the phase and, when cached, the "
        "steps that still fill the cache are excluded."
    )
    measured_spread_s: NonNegFloat | None
    error: float | None = Field(description="(predicted − measured) / measured.")


class DataFile(Strict):
    path: Text = Field(
        description="The file as the run's data names it, or the file of the module that "
        "module:function data imported."
    )
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$", description="sha256 of its bytes.")


# A set's length, as `executor.data.length` bounds it (1 << 40).
SetLength = Annotated[int, Field(ge=0, le=MAX_SAMPLES)]


class DataFacts(Strict):
    """What the launcher checked of the run's data as it prepared the run (`executor.task.
    data_facts`): every rank loads the data again (`module:function` is called once in each
    process) and compares what it got with these before its first collective
    (`executor.task.check_data_facts`). A `__len__` that differed in the ranks trained another
    epoch than checked, or hung the run for --collective-timeout (thirty-second round)."""

    # A run trains on a sample at least (`data.check_compatible`).
    train_samples: Annotated[SetLength, Field(ge=1)] = Field(
        description="len() of the training set."
    )
    eval_samples: SetLength = Field(description="len() of the eval set.")
    num_labels: Count | None = Field(
        description="The classifier head's classes; null for a causal LM (its vocabulary)."
    )
    padded: bool = Field(description="TaskData.padded: token inputs padded with PADDING.")
    augmented: bool = Field(description="TaskData.augmented: training items drawn at random.")


class DataRecord(Versioned):
    """`runs/NAME/data.json`: what the run's data was when it started, so that a resume or an
    export refuses a data file edited since (a renamed label shifts every label id), or the
    module of `module:function` data imported from another file; and what the launcher
    checked of it (`facts`), which every rank's own load of the data must give too.

        DataRecord(data="lend:load", files=[], facts=DataFacts(train_samples=256, …))
    """

    schema_version: Literal[1] = 1
    data: DataText = Field(description="The run's --data.")
    files: list[DataFile] = Field(description="The files the data is read from.")
    # Bounded as a name is, but not held to `printable`: a label is the data's own text, as
    # the data reader takes it (which refuses one longer: `executor.text`).
    label_names: list[Annotated[str, AfterValidator(short)]] | None = Field(
        None, description="Named labels in id order, when the data names its labels."
    )
    # Absent (None) in a run prepared before it was recorded: its ranks compare nothing.
    facts: DataFacts | None = Field(
        None,
        description="What the launcher checked of the data: its sets' lengths, classes and "
        "kind; each rank refuses data of its own that differs.",
    )

    @field_validator("label_names")
    @classmethod
    def _names_once(cls, value: list[str] | None) -> list[str] | None:
        """A name twice would give two ids one name: the exported id2label could not say
        which class a prediction is."""
        # Counted once each: list.count per name made 10^6 names take hours (twentieth round).
        counts = Counter(value or [])
        twice = sorted(name for name, n in counts.items() if n > 1)
        if twice:
            raise ValueError(f"names the label {quoted(twice[0])} more than once")
        return value

    @model_validator(mode="after")
    def _one_name_a_class(self) -> DataRecord:
        """Named labels name the head's classes, one each (`models.label_order` numbers them
        onto its rows): a count edited apart from them would refuse every rank's data."""
        names, facts = self.label_names, self.facts
        classes = None if facts is None else facts.num_labels
        if names is not None and classes is not None and classes != len(names):
            raise ValueError(
                f"facts.num_labels {classes} disagrees with the {len(names)} label_names: "
                "each class has one name"
            )
        return self


class RunSummary(Versioned):
    schema_version: Literal[2] = 2
    name: Text
    total_s: NonNegFloat
    steps: NonNegInt
    # A fraction, as the epoch records' eval_accuracy it repeats (the fifty-eighth round:
    # -0.137 passed the format, caught only by the cross-check).
    final_eval_accuracy: Annotated[float, Field(ge=0, le=1)] | None
    phases: list[PhaseSummary]


def steady_step(step: StepRecord, phase: PhaseRecord, config: RunConfig) -> bool:
    """A cached phase's steps that still fill the cache (they compute the frozen prefix) are
    not the steady state the phase was planned for."""
    return not phase.layout.cached or step.cache_hits >= config.global_batch


def steady_steps(
    steps: list[StepRecord], phase: PhaseRecord, config: RunConfig
) -> list[StepRecord]:
    """The steps medians are taken over: without cache-filling steps, then without the
    warm-up steps unless no others are left."""
    settled = [s for s in steps if steady_step(s, phase, config)]
    return settled[WARMUP_STEPS_PER_PHASE:] or settled


RECORDS_PAST_LIMIT = (
    "the most pipeplan reads of a run's records (a step's record takes about 0.3 KB a rank: "
    "64 ranks reach it in some 58,000 steps); a run that long is not read back yet"
)


def read_records(
    path: str | Path, config: RunConfig | None = None, notice: bool = True
) -> list[PhaseRecord | StepRow | EpochRecord]:
    """Parse run.jsonl; a bad line is an InputFileError naming the line. With the run's
    `config` (run.json), the records must also agree with it (`check_records`).

    Records are appended as whole lines ending in a newline, so a last line without its
    newline that does not parse is an append a crash cut short (a torn record): it is left
    out, with one notice (none with `notice=False`: a reader that only places a failure or
    tells whether the run trained, whose command may end in an error line, which must be the
    only line; the reader that reports the records gives it), and `torn_tail(path)` says
    where the whole records end. A bad line
    that ends in a newline was written whole, and is refused; so is an empty line (or one of
    spaces), which pipeplan never writes: found by the twenty-fifth round, one inside the file
    was read by resume and report without a word.

    Each step is validated as a StepRecord and held as a StepRow (a tenth of its memory), so
    that what is held is a fraction of the file's size (docs/architecture.md §3.1)."""
    path = Path(path)
    records: list[PhaseRecord | StepRow | EpochRecord] = []
    numbers = array("q")  # each record's line: 8 bytes, not an int object and its slot
    before: StepRow | None = None  # the step before, whose rank placements a step may share
    order: dict[str, tuple[int, str | None]] = {}
    size = 0
    # pipeplan's own file past the limit is no foreign one (the fifty-seventh round: "not a
    # pipeplan file"): a step's record grows with the ranks, about 0.3 KB each.
    lines = read_lines(path, MAX_RECORD_BYTES, why=RECORDS_PAST_LIMIT)
    for number, line in enumerate(lines, start=1):
        size += len(line)
        where = f"{path}:{number}"
        if not line.strip():
            raise InputFileError(f"{where}: an empty line; pipeplan writes a record on every line")
        check_record_size(line.rstrip("\n"), where)
        try:
            record = _parse_record(line, where)
        except InputFileError:
            if not line.endswith("\n"):  # the last line, cut short by a crash mid-append
                if notice:
                    _notice_torn(path, size, where)
                break
            raise
        # Here, not only in `check_records`: a file of one record repeated a million times is
        # refused at its second line, not after a million records are built.
        _check_order(record, order, where, epochs_ahead=False)
        if isinstance(record, StepRecord):
            record = before = StepRow.of(record, before)
        records.append(record)
        numbers.append(number)
    check_records(records, str(path), config, numbers)
    return records


# Torn records already noticed, by file and length: a command that reads the records twice
# (calibrate) says it once. The file's identity too (`file_state`): another file at the path
# (a run made again where one was deleted, in one Python process) is said again.
_NOTICED: set[tuple] = set()


def _notice_torn(path: Path, length: int, where: str) -> None:
    key = (*file_state(path), length)
    if key not in _NOTICED:
        _NOTICED.add(key)
        log.warning("%s: a torn last record (a crash mid-append); left out", where)


def _exact(value: float) -> str:
    """A float as few digits as give it back, no trailing `.0`: 5.0 → "5", 0.1 → "0.1"
    (the ninety-fourth round: `--weight-decay 1` was quoted "1.0", `10.000001` as "10")."""
    text = repr(value)
    return text.removesuffix(".0") if "e" not in text else text


def check_record_size(line: str, where: str) -> None:
    """A run.jsonl line is at most MAX_RECORD_BYTES (a step of MAX_RANKS ranks is 1.2 MB): a
    longer one is no record pipeplan wrote, and decoding it would take up to 33 times its
    size. `check_record_size(line, "run.jsonl:3")`: InputFileError stating the limit."""
    # Characters, not bytes: a line of n characters is at least n bytes, so none legitimate
    # is refused, and one counted in bytes would be encoded again.
    # No count: the reader cuts a long line (`read_lines`), and the ninety-third round's
    # 900 MB line was "a line of 67,108,868 characters", where it stopped reading.
    if len(line) > MAX_RECORD_BYTES:
        raise InputFileError(
            f"{where}: a line longer than {MAX_RECORD_BYTES:,} characters, the limit for a run "
            "record"
        )


def _parse_record(line: str, where: str) -> PhaseRecord | StepRecord | EpochRecord:
    try:
        data = check_json(line, "")
    except InputFileError as exc:
        raise InputFileError(f"{where}: not a run record{exc}") from None
    check_keys(data, RECORDS, where)  # before pydantic makes an error of each key
    del data  # the decoded copy: validation decodes the line again
    try:
        return _validate_record(line, where)
    except MemoryError:  # also one raised while the validation error is read
        raise InputFileError(out_of_memory(where, line)) from None


def _validate_record(line: str, where: str) -> PhaseRecord | StepRecord | EpochRecord:
    try:
        return _RECORD.validate_json(line, strict=True)
    except ValidationError as exc:
        raise InputFileError(f"{where}: not a run record ({first_error(exc)})") from None
    except RecursionError:
        raise InputFileError(f"{where}: nested too deeply") from None


def torn_tail(text: str) -> int | None:
    """Where the whole lines of run.jsonl's `text` end, when a last line lacks its newline;
    None when the text ends in one (or is empty). Whether that line is a torn record is for
    the parser to say: `read_records` leaves it out only if it does not parse."""
    if not text or text.endswith("\n"):
        return None
    return text.rfind("\n") + 1


class _Places(Sequence[str]):
    """Where each record is, for a message ("run.jsonl:3"), made when asked: one string held
    per record was 80 bytes a step of a run.jsonl of 10**6 steps."""

    def __init__(self, where: str, count: int, lines: Sequence[int] | None) -> None:
        self.where, self.count, self.lines = where, count, lines

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, number: int) -> str:  # type: ignore[override]
        if not 0 <= number < self.count:
            raise IndexError(number)
        return f"{self.where}:{self.lines[number]}" if self.lines else self.where

    def __iter__(self) -> Iterator[str]:
        return (self[number] for number in range(self.count))


def check_records(
    records: list, where: str, config: RunConfig | None = None, lines: Sequence[int] | None = None
) -> None:
    """What a run's records mean together: every step and epoch belongs to a phase that
    started before it, and every step to the latest phase (a step of phase 0 after phase 3
    was read as phase 0's); every layout runs on its cluster, and every rank's stage and
    replica exist in its phase's layout; each step lists every rank of its phase's world
    once (`"ranks": []` was accepted); phases, steps and epochs each come once, in order
    (records appended twice made report count 8 steps of a 4-step run and calibrate fit
    repeated steps); and the records follow one another as the executor writes them
    (`_check_sequence`). With the run's `config`, the world its records ran on is run.json's
    `nproc` (`check_world`, each phase named on its own line), and no rank on a CPU run
    records a peak memory, and every phase is one run.json decides (`_check_phase_config`).
    Every step's ranks take no longer than it (`_check_rank_times`), and a step of an uncached
    phase reads nothing from the cache (`_check_cache_hits`); every epoch record is what the
    executor computes from its steps (`check_epoch`), and its forecast prices the epochs of
    the run that wrote it (`_ForecastEpochs`) with run.json's continuations
    (`_check_continuations`).
    InputFileError with one line otherwise, naming the record's line (`lines`: each
    record's line number in the file, when read from one)."""
    phases: dict[int, PhaseRecord] = {}
    last: dict[str, tuple[int, str | None]] = {}
    current: PhaseRecord | None = None
    current_at = ""  # where `current` was read
    sequence = _Sequence()
    closed: list[tuple[EpochRecord, PhaseRecord, list[StepRecord], str]] = []  # likewise
    attempts: list[int] = []  # each closed epoch's run attempt (`_ForecastEpochs`)
    attempt = 0  # phases entered by --resume so far
    horizons = _Horizons()
    places = _Places(where, len(records), lines)
    if config is not None:
        # First: a phase's cluster edited to another world is named on its own line, not as
        # the ranks of the step after it (`check_world`).
        ran = [(r, at) for r, at in zip(records, places, strict=True) if isinstance(r, PhaseRecord)]
        check_world([r for r, _ in ran], config, where, [at for _, at in ran])
    check_one_cluster(records, places)
    for number, record in enumerate(records):
        at = places[number]
        _check_order(record, last, at)
        if isinstance(record, PhaseRecord):
            layout, cluster = record.layout, record.pricing.cluster
            try:
                layout.check(layout.boundaries[-1], cluster.num_devices)
            except PipeplanError as exc:
                raise InputFileError(f"{at}: phase {record.phase}: {exc}") from None
            sequence.starts(record, at)
            if config is not None:
                _check_phase_config(record, config, at)
            phases[record.phase] = current = record
            current_at = at
            attempt += record.resumed
            horizons.phase(record, attempt, at)
            continue
        phase = phases.get(record.phase)
        if phase is None:
            what = f"{record.kind} {getattr(record, record.kind)}"
            # The phase record before it named too: which of the two was edited is not told.
            before = (
                f" (the phase record before it, {current_at}, is phase {current.phase})"
                if current is not None
                else ""
            )
            raise InputFileError(f"{at}: {what} is in phase {record.phase}, never started{before}")
        if isinstance(record, STEP_RECORDS):
            if phase is not current:
                raise InputFileError(
                    f"{at}: step {record.step} is in phase {record.phase}, but phase "
                    f"{current.phase} started before it: a step belongs to the latest phase"
                )
            _check_ranks(record, phase, at, config)
            sequence.steps_on(record, at)
            horizons.step(record, at)
        else:
            closed.append((record, current, sequence.closes(record, current, at), at))
            attempts.append(attempt)
            horizons.epoch(record, current.layout.global_batch, at)
    if config is not None:
        check_against_config(records, config, where)
    horizons.check(config, attempt)
    # After the phases' global batch is held to run.json's: a phase of another batch is named
    # as that, not as each of its steps' rates; and a step's 10**9 cache hits as more than
    # run.json's batch, not as hits in an uncached phase. (Each step's phase is the latest
    # before it, as held above: found again, not held in a list of every step.)
    current, empty = None, False  # whether the current phase's cache started empty
    for number, record in enumerate(records):
        if isinstance(record, PhaseRecord):
            empty = record.resumed or current is None or not current.layout.cached
            current = record
        elif isinstance(record, STEP_RECORDS):
            _check_rate(record, current, places[number])
            _check_cache_hits(record, current, places[number], empty)
    _check_transitions_timed(records, places)
    finished: list[int] = []  # the epochs' frozen layers so far, as the forecasts continue them
    priced = _ForecastEpochs(config, attempt)
    for (epoch, phase, steps, at), made_by in zip(closed, attempts, strict=True):
        finished.append(epoch.frozen_layers)
        check_epoch(epoch, phase, steps, at, finished)
        priced.check(epoch, made_by, at)
        if config is not None and epoch.forecast is not None:
            _check_continuations(epoch, epoch.forecast, config, at)


def _check_transitions_timed(records: list, places: Sequence[str]) -> None:
    """A transition within an epoch (its phase entered after a step of the same epoch, by
    --freeze-every) ran on that epoch's clock (`executor.worker.Worker.train`): its
    transition_s is at most the epoch's epoch_s, unless a resume later in the epoch
    restarted that clock (the steps before a resume count by their recorded times alone).
    A transition at an epoch's start, or a resume's, is timed outside every epoch: held
    only by summary.json's total (`runfiles.check_summary`). A mid-epoch transition of
    10^6 s was reported (the sixty-first round).

        _check_transitions_timed(records, places)   # "run.jsonl:9: phase 2: transition_s …"
    """
    inside: list[tuple[PhaseRecord, int]] = []  # the open epoch's transitions on its clock
    stepped: int | None = None  # the epoch of the last step
    for number, record in enumerate(records):
        if isinstance(record, PhaseRecord):
            if record.resumed:
                inside = []
            elif stepped == record.start_epoch:
                inside.append((record, number))
        elif isinstance(record, STEP_RECORDS):
            stepped = record.epoch
        else:
            for phase, at in inside:
                if phase.start_epoch == record.epoch and phase.transition_s > record.epoch_s:
                    raise InputFileError(
                        f"{places[at]}: phase {phase.phase}: transition_s "
                        f"{phase.transition_s!r}, but it was entered within epoch {record.epoch} "
                        f"(at step {phase.start_step}), all of which took {record.epoch_s!r} s "
                        f"(its epoch_s, {places[number]}): a transition within an epoch runs on "
                        "its clock"
                    )
            inside = []


class _Horizons:
    """Each solved phase's `pricing.horizon` is what the run weighed when it decided it
    (`executor.worker.Worker.plan_phase`): the samples of an epoch (whole global batches, the
    steps its epoch records count), the epochs left of the attempt that decided it (a run
    attempt as `_ForecastEpochs` counts them), the layout of the phase before it (or none:
    the first phase, a resume onto other ranks), and whether the run reads the cache (one
    answer a run). A phase taken from a plan file has none (a solved phase without one is
    held to nothing: its epochs say their length). A phase a resume continues
    (`Worker.kept_phase`: its predecessor's decision copied whole) is its predecessor's and
    is held to nothing more; one whose pricing differs from it is named so
    (`_check_kept_pricing`). An edited horizon was reported (a run "of 12, 1000 steps" an
    epoch) and worded a failure's step (the fifty-eighth round). Each is blamed on its own
    phase where the epochs or run.json tell which; else both phases are named.

        horizons = _Horizons()
        horizons.phase(record, attempt, "run.jsonl:1")   # each phase record in turn
        horizons.step(record, "run.jsonl:2")            # each step record
        horizons.epoch(record, 64, "run.jsonl:6")        # each epoch record, its batch
        horizons.check(config, attempt)                  # then (config: run.json, or None)
    """

    def __init__(self) -> None:
        self.before: PhaseRecord | None = None  # the phase record before
        self.priced: list[tuple[PhaseRecord, int, bool, str]] = []  # (phase, attempt, kept, at)
        self.length: tuple[int, str] | None = None  # an epoch's samples, and which epoch said
        self.open: tuple[int, int, str] | None = None  # (epoch, its steps so far, the first's line)

    def phase(self, record: PhaseRecord, attempt: int, at: str) -> None:
        before, self.before = self.before, record
        horizon = record.pricing.horizon
        if horizon is None:
            return
        name = f"phase {record.phase}"
        if record.pricing.source == "plan":
            raise InputFileError(
                f"{at}: {name}: pricing.horizon given, but pricing.source is 'plan': a phase "
                "taken from a plan file weighed nothing of the run"
            )
        batch = record.layout.global_batch
        if horizon.samples % batch:
            raise InputFileError(
                f"{at}: {name}: pricing.horizon.samples {horizon.samples} is not whole global "
                f"batches of its layout's {batch}: an epoch trains whole steps"
            )
        kept = (
            record.resumed
            and before is not None
            and (record.layout, record.pricing) == (before.layout, before.pricing)
        )
        self.priced.append((record, attempt, kept, at))
        if kept:
            return
        if record.resumed and before is not None:
            _check_kept_pricing(record, before, at)
        previous = before.layout if before is not None else None
        if horizon.previous is None and before is not None and not record.resumed:
            raise InputFileError(
                f"{at}: {name}: pricing.horizon.previous is null, but it follows phase "
                f"{before.phase} ({before.layout.label()}): a phase weighs moving from the "
                "layout it follows"
            )
        said = horizon.previous
        if said is not None and said != previous:
            told, ran = said.label(), previous and previous.label()
            if previous is not None and told == ran:  # the same shape: name the field
                fields = Layout.model_fields
                field = next(f for f in fields if getattr(said, f) != getattr(previous, f))
                told = f"{told} with {field} {getattr(said, field)}"
                ran = f"{ran} with {field} {getattr(previous, field)}"
            was = (
                "it is the run's first phase: no layout is before it"
                if before is None
                else f"the phase before it, phase {before.phase}, ran {ran}"
            )
            raise InputFileError(
                f"{at}: {name}: pricing.horizon.previous is {told}, but {was}: a phase weighs "
                "moving from the layout it follows"
            )

    def step(self, record: StepRecord | StepRow, at: str) -> None:
        """Counts the steps of the first epoch, which `_open_epoch` bounds a horizon with
        while no epoch record says its length."""
        if self.open is None:
            self.open = (record.epoch, 0, at)
        if record.epoch == self.open[0]:
            self.open = (record.epoch, self.open[1] + 1, self.open[2])

    def epoch(self, record: EpochRecord, batch: int, at: str) -> None:
        if self.length is None:
            self.length = (record.steps * batch, f"epoch {record.epoch} ({at}) ran")

    def check(self, config: RunConfig | None, last: int) -> None:
        if self.length is None and self.priced:
            self._open_epoch(config)
        self._samples()
        self._cache()
        if config is not None:
            self._ends_against(config.epochs, last)
        ends: dict[int, tuple[int, str]] = {}  # each attempt's end, as its first phase said it
        for record, attempt, kept, at in self.priced:
            if kept:  # its predecessor's horizon, of the attempt before
                continue
            (end, exact), said = _end(record), ends.get(attempt)
            if not exact:  # a bound: the end can lie before it
                if said is None or end >= said[0]:
                    continue
            elif said is None:
                ends[attempt] = (end, f"phase {record.phase} ({at})")
                continue
            elif end == said[0]:
                continue
            raise InputFileError(
                f"{at}: phase {record.phase}: pricing.horizon.epochs "
                f"{record.pricing.horizon.epochs} from epoch {record.start_epoch} ends the run "
                f"{_ending(end, exact)}, but {said[1]} ends it {_ending(said[0], True)}: a "
                "run's phases are priced to one end (only a resume moves it)"
            )

    def _open_epoch(self, config: RunConfig | None) -> None:
        """Before any epoch record, the first solved phase's horizon (which `_samples` holds
        the others to) is still an epoch's: at most the steps run.json's max_steps_per_epoch
        allows, and at least the steps its first epoch has run. Found by the sixtieth round:
        held to nothing then, a run capped at 30 steps an epoch was reported of 1,000."""
        record, _, _, at = self.priced[0]
        samples, batch = record.pricing.horizon.samples, record.layout.global_batch
        said = f"{at}: phase {record.phase}: pricing.horizon.samples {samples} ("
        said += f"{samples // batch} steps of {batch}), but"
        cap = config.max_steps_per_epoch if config is not None else None
        if cap is not None and samples > cap * batch:
            raise InputFileError(
                f"{said} run.json's max_steps_per_epoch {cap} allows at most {cap * batch} "
                "samples an epoch"
            )
        if self.open is not None and samples < self.open[1] * batch:
            epoch, steps, first = self.open
            raise InputFileError(
                f"{said} epoch {epoch} has run {steps} steps already (from {first}): an "
                "epoch is at least the steps it ran"
            )

    def _samples(self) -> None:
        for record, _, _, at in self.priced:
            samples = record.pricing.horizon.samples
            told = self.length or (samples, f"phase {record.phase} ({at}) has")
            self.length = told
            if samples != told[0]:
                batch = record.layout.global_batch
                raise InputFileError(
                    f"{at}: phase {record.phase}: pricing.horizon.samples {samples} ("
                    f"{samples // batch} steps of {batch}), but {told[1]} {told[0] // batch} "
                    f"steps ({told[0]} samples): a run's epochs are of one length"
                )

    def _cache(self) -> None:
        # A cached phase's horizon said true (`_check_phase_config`): it tells the run's answer.
        told = next((p for p in self.priced if p[0].layout.cached), None)
        told = told or (self.priced[0] if self.priced else None)
        for record, _, _, at in self.priced:
            value, was = record.pricing.horizon.cache, told[0].pricing.horizon.cache
            if value != was:
                raise InputFileError(
                    f"{at}: phase {record.phase}: pricing.horizon.cache {str(value).lower()}, "
                    f"but phase {told[0].phase} ({told[3]}) has {str(was).lower()}: a run reads "
                    "the cache or not throughout"
                )

    def _ends_against(self, epochs: int, last: int) -> None:
        """The ends agree with run.json's epochs as `_ForecastEpochs` holds a forecast's."""
        for record, attempt, kept, at in self.priced:
            end, exact = _end(record)
            if kept:
                continue
            if attempt == last == 0 and (end != epochs if exact else end < epochs):
                why = "a run's phases are priced over its epochs"
            elif attempt < last and exact and end > epochs:
                why = "a run before a resume had no more epochs than run.json has since"
            elif attempt == last and end < epochs:
                why = "the latest resume runs at least the epochs run.json has"
            else:
                continue
            raise InputFileError(
                f"{at}: phase {record.phase}: pricing.horizon.epochs "
                f"{record.pricing.horizon.epochs} from epoch {record.start_epoch} ends the run "
                f"{_ending(end, exact)}, but run.json says epochs {epochs}: {why}"
            )


def _check_kept_pricing(record: PhaseRecord, before: PhaseRecord, at: str) -> None:
    """A phase entered by --resume in its predecessor's layout, weighing a move from the
    layout its predecessor weighed (`horizon.previous`, not the predecessor's own, which a
    phase planned anew weighs), is its predecessor's decision kept whole (`Worker.kept_phase`):
    a pricing that differs was edited, in one of the two records. Found by the sixty-second
    round: its calibration, profile, horizon epochs or cache edited was blamed on
    `pricing.horizon.previous`, which the resume copied and nobody edited. InputFileError
    naming the field that differs."""
    said, was = record.pricing.horizon, before.pricing.horizon
    if was is None or record.layout != before.layout or said.previous != was.previous:
        return
    mine, theirs, field = record.pricing, before.pricing, "pricing"
    while True:  # down to the differing value: "pricing.horizon.epochs", not the horizon
        differs = first_difference(mine, theirs)
        if differs is None:  # equal as written: the same decision
            return
        name, have, want = differs
        mine, theirs, field = getattr(mine, name), getattr(theirs, name), f"{field}.{name}"
        if not (isinstance(mine, Strict) and isinstance(theirs, Strict)):
            break
    raise InputFileError(
        f"{at}: phase {record.phase}: {field} {have}, but phase {before.phase}, whose "
        f"decision the resume keeps (its layout {before.layout.label()}, weighing the move "
        f"from the same horizon.previous), has {want}: a resume keeps its phase's decision "
        "whole (one of the two records was edited)"
    )


def _end(record: PhaseRecord) -> tuple[int, bool]:
    """Where a solved phase's horizon ends its run: (the epoch after its last, exact). It is
    priced over max(1, end - start) epochs, so one epoch tells only a bound."""
    epochs = record.pricing.horizon.epochs
    return record.start_epoch + epochs, epochs > 1


def _ending(end: int, exact: bool) -> str:
    """`_ending(3, True)` → "with epoch 2": the last epoch a horizon prices."""
    return f"with epoch {end - 1}" + ("" if exact else " at the latest")


def _check_order(
    record: PhaseRecord | StepRecord | EpochRecord,
    last: dict[str, tuple[int, str | None]],
    at: str,
    epochs_ahead: bool = True,
) -> None:
    """Phases, steps and epochs each come once, one after another from 0 (a resume's phase
    is the next too): `last` holds, by kind, the latest index so far and the line to blame if
    the next is out of order, where that one ran ahead (updated here). A record ahead of the
    one before it is named on its own line, not on the intact record after it as "step 1
    after step 1" (the fifty-fourth round; phases: the fifty-fifth). An epoch ahead is
    named at once only where `epochs_ahead`; else (as the file is read) once a record after
    it is out of order: where an epoch record was deleted instead, the phase after it names
    the epoch its records lack (`check_records`, the eighteenth round)."""
    index = getattr(record, record.kind)
    if record.kind == "phase" and "phase" not in last and index != 0:
        # Edited, its steps were blamed, on the next line (the fifty-first round).
        raise InputFileError(
            f"{at}: phase {index} is the run's first phase record; a run's phases count from 0"
        )
    after, jumped = last.get(record.kind, (-1, None))
    ahead = None
    if index > after + 1:
        before = f"{record.kind} {after}" if after >= 0 else f"no {record.kind} record"
        ahead = (
            f"{at}: {record.kind} {index} after {before}: {record.kind}s follow one another from 0"
        )
        if record.kind != "epoch" or epochs_ahead:
            raise InputFileError(ahead)
    if index <= after:
        raise InputFileError(
            jumped
            or f"{at}: {record.kind} {index} after {record.kind} {after}: records come once "
            "each, in order"
        )
    last[record.kind] = (index, ahead)


class _Sequence:
    """The order the executor writes records in, checked record by record: training is one
    sequence of steps (0, 1, 2, …) cut into epochs (0, 1, 2, …), each closed by its epoch
    record; a phase starts where the records before it end. So a phase's start_step is the
    next step and its start_epoch the current epoch (entered by --resume too: its checkpoint
    follows every record of the epochs before it); a step's epoch is the current epoch
    (never one already closed, never one beyond the next); an epoch record closes the current
    epoch, counts its steps, names the latest phase, the one it ends in (records written
    before the thirty-seventh round's fixes name its first step's: still read), and states
    its frozen layers (a freeze decision within the epoch, --freeze-every, or a mid-epoch
    resume changes the phase; one at its end starts the next phase after the record). Each
    was accepted while
    contradicting its phase: an epoch record with another phase's frozen layers was charted
    as trained so, a phase starting at step 40 after step 9 was priced over steps it never
    had."""

    def __init__(self) -> None:
        self.next_step = 0  # the step the next step record is
        self.epoch = 0  # the current epoch: the one after the last closed
        self.steps = 0  # step records of the current epoch so far
        self.first_phase: int | None = None  # the phase of the current epoch's first step
        self.epoch_steps: list[StepRecord] = []  # the current epoch's step records

    def closed(self) -> str:
        """The epochs closed so far, for a message: "closed no epoch", "closed epoch 0",
        "closed epochs 0 to 4" (never "up to -1")."""
        if self.epoch == 0:
            return "closed no epoch"
        return "closed epoch 0" if self.epoch == 1 else f"closed epochs 0 to {self.epoch - 1}"

    def starts(self, record: PhaseRecord, at: str) -> None:
        # A --resume phase too: no crash loses the record of the epoch before it, which the
        # executor writes before the checkpoint the resume continues from. Taken for lost, the
        # epoch was missing from the report and metrics.csv for good (eighteenth round).
        for field, value, expected in (
            ("start_step", record.start_step, self.next_step),
            ("start_epoch", record.start_epoch, self.epoch),
        ):
            if value != expected:
                raise InputFileError(
                    f"{at}: phase {record.phase}: {field} {value}, but the records before it "
                    f"end at step {self.next_step} of epoch {self.epoch}: a phase starts where "
                    "the one before it ended"
                )

    def steps_on(self, record: StepRecord, at: str) -> None:
        if record.step != self.next_step:
            raise InputFileError(
                f"{at}: step {record.step}, but the records before it end at step "
                f"{self.next_step}: steps follow one another"
            )
        if record.epoch != self.epoch:
            # Its phase may have started epochs earlier: the current epoch is what the epoch
            # records before it closed, said as such (twentieth round).
            raise InputFileError(
                f"{at}: step {record.step}: epoch {record.epoch}, but the records before it "
                f"{self.closed()}: a step is of the current epoch, {self.epoch}"
            )
        if self.first_phase is None:
            self.first_phase = record.phase
        self.next_step += 1
        self.steps += 1
        self.epoch_steps.append(record)

    def closes(self, record: EpochRecord, current: PhaseRecord, at: str) -> list[StepRecord]:
        """Close the current epoch with its record; returns the epoch's step records."""
        if record.epoch != self.epoch:
            # Not "the steps before it": the current epoch may have none yet.
            raise InputFileError(
                f"{at}: epoch {record.epoch}, but the records before it {self.closed()}: an "
                f"epoch record closes the current epoch, {self.epoch}"
            )
        if record.steps != self.steps:
            raise InputFileError(
                f"{at}: epoch {record.epoch}: steps {record.steps}, but run.jsonl has "
                f"{self.steps} step records of epoch {record.epoch}"
            )
        # The phase the epoch ends in: its last steps' and evaluation's, whose frozen layers
        # it states. Records written before the thirty-seventh round's fixes named the phase
        # its first step ran in, which differs where a layout change split the epoch (a
        # mid-epoch resume, a --freeze-every decision): theirs still load.
        started = current.phase if self.first_phase is None else self.first_phase
        if record.phase not in (current.phase, started):
            before = "" if started == current.phase else f" (its first step ran in phase {started})"
            raise InputFileError(
                f"{at}: epoch {record.epoch}: phase {record.phase}, but it ends in phase "
                f"{current.phase}{before}"
            )
        frozen = current.layout.frozen_layers
        if record.frozen_layers != frozen:
            raise InputFileError(
                f"{at}: epoch {record.epoch}: frozen_layers {record.frozen_layers}, but its "
                f"phase {current.phase} froze {frozen} ({current.layout.label()})"
            )
        steps, self.epoch_steps = self.epoch_steps, []
        self.epoch, self.steps, self.first_phase = self.epoch + 1, 0, None
        return steps


def check_against_config(records: list, config: RunConfig, where: str) -> None:
    """The records agree with their run.json: the world (`check_world`) and the global batch,
    fixed across phases (a phase of another batch would be priced and calibrated as if its
    steps had trained run.json's), which no step reads more of from the cache (10**9 cache
    hits made every step of a cached phase steady)."""
    over = next((r for r in records if getattr(r, "cache_hits", 0) > config.global_batch), None)
    if over is not None:
        raise InputFileError(
            f"{where}: step {over.step}: cache_hits {over.cache_hits} of a step of "
            f"{config.global_batch} samples (run.json's global_batch)"
        )
    phases = [r for r in records if isinstance(r, PhaseRecord)]
    for phase in phases:
        if phase.layout.global_batch != config.global_batch:
            layout = phase.layout
            raise InputFileError(
                f"{where}: phase {phase.phase} trains {layout.replicas} replicas x "
                f"{layout.micro_batches} micro-batches x {layout.micro_batch_size} samples = "
                f"{layout.global_batch} per step, but run.json says global_batch "
                f"{config.global_batch}"
            )
    check_world(phases, config, where)


def _check_phase_config(phase: PhaseRecord, config: RunConfig, where: str) -> None:
    """A phase is one its run.json decides: from the plan file (pricing.source plan) when it
    runs one, else solved during the run (solver); and a cached layout, or a horizon that
    may read the cache, only where run.json caches (a plan run takes the plan's:
    `executor.launch.with_file_values`) and, solved, where its horizon allowed the cache
    (`pipeplan.plan.decide_phase` prices a cached layout only then). Each was reported and
    calibrated from (exit 0) as a phase the run never planned so.

        _check_phase_config(phase, config, "run.jsonl:1")
    """
    pricing, cached = phase.pricing, phase.layout.cached
    if config.freeze == "none" and phase.layout.frozen_layers:
        raise InputFileError(
            f"{where}: phase {phase.phase}: layout.frozen_layers "
            f"{phase.layout.frozen_layers}, but run.json says freeze none"
        )
    source = "solver" if config.plan is None else "plan"
    if pricing.source != source:
        says = "names no plan file" if config.plan is None else f"runs the plan {config.plan}"
        raise InputFileError(
            f"{where}: phase {phase.phase}: pricing.source '{pricing.source}', but run.json "
            f"{says}: its phases are all '{source}'"
        )
    horizon = pricing.horizon
    may_read = horizon is not None and horizon.cache
    if not config.cache and (cached or may_read):
        field = "layout.cached" if cached else "pricing.horizon.cache"
        raise InputFileError(
            f"{where}: phase {phase.phase}: {field} true, but run.json says cache false: the "
            "run never reads the activation cache"
        )
    if cached and horizon is not None and not horizon.cache:
        raise InputFileError(
            f"{where}: phase {phase.phase}: layout.cached true, but pricing.horizon.cache is "
            "false: the phase was solved without the cache"
        )


def check_world(
    phases: list[PhaseRecord], config: RunConfig, where: str, lines: list[str] | None = None
) -> None:
    """The phases' world (their cluster's devices) is run.json's `nproc`. A resume may change
    the world: phases keep the world of the phase before them unless entered by --resume,
    and the latest world is `nproc` or, when a resume that changed --nproc stopped before
    its first checkpoint (run.json is then kept as it was), the world before it. `lines`:
    where each phase is (`run.jsonl:1`), to name the phase whose cluster says otherwise."""
    at = lines or [where] * len(phases)
    worlds: list[int] = []
    first = 0  # the first phase of the latest world
    for number, phase in enumerate(phases):
        world = phase.pricing.cluster.num_devices
        if worlds and not phase.resumed and world != worlds[-1]:
            if world == config.nproc:  # the phases before are the odd ones: named at the first
                before = phases[first]
                raise InputFileError(
                    f"{at[first]}: phase {before.phase}: pricing.cluster has "
                    f"{_devices(before)}, but run.json says nproc {config.nproc}, as phase "
                    f"{phase.phase} runs on; only a phase entered by --resume changes the world"
                )
            raise InputFileError(
                f"{at[number]}: phase {phase.phase}: pricing.cluster has {_devices(phase)}, "
                f"phase {phase.phase - 1} ran on {worlds[-1]} ranks; only a phase entered by "
                "--resume changes the world"
            )
        if not worlds or world != worlds[-1]:
            worlds.append(world)
            first = number
    if worlds and config.nproc not in worlds[-2:]:
        phase = phases[first]
        raise InputFileError(
            f"{at[first]}: phase {phase.phase}: pricing.cluster has {_devices(phase)}, but "
            f"run.json says nproc {config.nproc}"
        )


def check_one_cluster(records: list, places: list[str]) -> None:
    """Each run attempt prices on one cluster: an attempt's planner builds it once, from run.json
    and the host its ranks run on (`executor.planning.RunPlanner.cluster`: `run_cluster`, or the
    plan file's), and prices every phase and every epoch's forecast on it (a calibration the
    run fits keeps the profile's links and memory). An attempt is the records from the start,
    or from a phase entered by --resume (on another world, perhaps another host), to the next
    such phase. Found by the fortieth round: a local 2-rank run's phase records edited to 2
    nodes x 1 device, or to a device memory of 1 MB, changed calibrate's fit and report's
    previewed speedup (exit 0) while the forecasts beside them held the run's cluster.
    `places`: where each record is (`run.jsonl:3`). InputFileError naming the first field of
    pricing.cluster that differs from the attempt's first record's.

        check_one_cluster(records, ["run.jsonl:1", "run.jsonl:2", ...])
    """
    first: tuple[str, str, Cluster] | None = None  # the attempt's first priced record
    for record, at in zip(records, places, strict=True):
        if isinstance(record, PhaseRecord):
            what, pricing = f"phase {record.phase}", record.pricing
            if record.resumed:
                first = None
        elif isinstance(record, EpochRecord) and record.forecast is not None:
            what, pricing = f"epoch {record.epoch}'s forecast", record.forecast.pricing
        else:
            continue
        if first is None:
            first = (what, at, pricing.cluster)
            continue
        differs = first_difference(pricing.cluster, first[2])
        if differs is not None:
            field, mine, theirs = differs
            raise InputFileError(
                f"{at}: {what}: pricing.cluster.{field} {mine}, but {first[0]} ({first[1]}) "
                f"has {theirs}: a run prices its phases and forecasts on one cluster until a "
                "phase entered by --resume (one of the two records was edited)"
            )


def _devices(phase: PhaseRecord) -> str:
    """`_devices(phase)` → '8 devices (nodes 1 x devices_per_node 8)': the world it names,
    in the cluster's own fields."""
    cluster = phase.pricing.cluster
    return (
        f"{cluster.num_devices} devices (nodes {cluster.nodes} x devices_per_node "
        f"{cluster.devices_per_node})"
    )


# How far a step's samples_per_s may be from global_batch / step_s, relatively: the executor
# writes the quotient itself (`executor.records`), exact up to float rounding.
RATE_TOLERANCE_REL = 1e-9


def _check_rate(step: StepRecord, phase: PhaseRecord, where: str) -> None:
    """samples_per_s is the phase's global batch over step_s (0 for a step of 0 s), as the
    executor computes it: 1e300 beside a step of 0.66 s of 64 samples was reported and
    calibrated from. `_check_rate(step, phase, "run.jsonl:3")`."""
    batch = phase.layout.global_batch
    expected = batch / step.step_s if step.step_s > 0 else 0.0
    if not math.isclose(step.samples_per_s, expected, rel_tol=RATE_TOLERANCE_REL):
        raise InputFileError(
            f"{where}: step {step.step}: samples_per_s {step.samples_per_s!r}, but "
            f"{batch} samples (phase {phase.phase}'s global batch) in step_s {step.step_s!r} "
            f"is {expected:.6g}"
        )


def _check_ranks(
    step: StepRecord, phase: PhaseRecord, where: str, config: RunConfig | None = None
) -> None:
    world = phase.pricing.cluster.num_devices
    listed = sorted(times.rank for times in step.ranks)
    if listed != list(range(world)):
        raise InputFileError(
            f"{where}: step {step.step} lists ranks {quoted(listed, 40)}, but phase "
            f"{phase.phase} runs on {world}: each rank 0..{world - 1} once"
        )
    _check_rank_times(step, where, config)
    layout = phase.layout
    for times in step.ranks:
        stage, replica = times.stage, times.replica
        if (stage is None) != (replica is None):
            raise InputFileError(
                f"{where}: step {step.step}: rank {times.rank} has a stage "
                "but no replica or the reverse"
            )
        if stage is None:
            placed = next(
                (
                    (r, row.index(times.rank))
                    for r, row in enumerate(layout.rank_map)
                    if times.rank in row
                ),
                None,
            )
            if placed is not None:  # stage 1's measurements read as none (fifty-ninth round)
                raise InputFileError(
                    f"{where}: step {step.step}: rank {times.rank} records no stage, but the "
                    f"phase's rank map makes it stage {placed[1]} of replica {placed[0]}"
                )
            continue
        if stage >= layout.num_stages or replica >= layout.replicas:
            raise InputFileError(
                f"{where}: step {step.step}: rank {times.rank} is stage {stage} of replica "
                f"{replica}, outside the phase's {layout.label()}"
            )
        if layout.rank_map[replica][stage] != times.rank:
            raise InputFileError(
                f"{where}: step {step.step}: rank {times.rank} is not stage {stage} of replica "
                f"{replica} in the phase's rank map"
            )
        if stage < layout.forward_only_stages:
            # A forward-only stage runs no backward, all-reduce or optimizer: the executor
            # leaves those parts 0 (`executor.parallel.PhaseRuntime.forward_only_step`); a backward
            # timed there is a record of some other layout (the sixtieth round's open list).
            for part in FORWARD_ONLY_ZERO:
                if getattr(times, part):
                    raise InputFileError(
                        f"{where}: step {step.step}: rank {times.rank}: {part} "
                        f"{getattr(times, part)!r}, but stage {stage} of the phase's "
                        f"{layout.label()} holds frozen layers only and runs forward only"
                    )
    if 0 < step.step_s < MIN_MEASURED_S:
        raise InputFileError(
            f"{where}: step {step.step}: step_s {step.step_s!r} is below {MIN_MEASURED_S:g} s, "
            "which no timer resolves"
        )
    for times in step.ranks:
        if why := unmeasured_times(times, layout, phase.predicted_stages):
            raise InputFileError(f"{where}: step {step.step}: rank {times.rank}: {why}")


def _check_cache_hits(step: StepRecord, phase: PhaseRecord, where: str, empty: bool) -> None:
    """Only a cached phase reads the cache: a phase whose layout is not cached feeds stage 0
    from the data alone (`executor.worker.Worker.stage0_batch`, its node's cache dropped), so
    its steps have no hits; 5 hits on a step of a phase that froze nothing were read back
    (exit 0) as reads that never happened. (At most the global batch: `check_against_config`
    holds them to run.json's.) And a cache that started `empty` with the phase (after an
    uncached phase, or in a run attempt's first phase: a new process) holds no sample of the
    epoch the phase starts in before the step that computes it: an epoch deals each sample
    once, to one step, whatever the layouts (`Worker.epoch_batches`); only a cached phase
    after a cached one starts with rows, advanced from the last (`Worker.prepare_cache`).

        _check_cache_hits(step, phase, "run.jsonl:2", empty=False)
    """
    if step.cache_hits and not phase.layout.cached:
        raise InputFileError(
            f"{where}: step {step.step}: cache_hits {step.cache_hits}, but phase "
            f"{phase.phase}'s layout ({phase.layout.label()}) is not cached: it reads no "
            "sample from the cache"
        )
    if step.cache_hits and empty and step.epoch == phase.start_epoch:
        raise InputFileError(
            f"{where}: step {step.step}: cache_hits {step.cache_hits} in epoch {step.epoch}, "
            f"where phase {phase.phase} started with an empty cache: the epoch deals each "
            "sample once, so no step of it reads one the phase has cached"
        )


FORWARD_ONLY_ZERO = ("bwd_s", "allreduce_s", "optimizer_s")


# The parts of a rank's step, each timed inside its step_s (`executor.parallel`, the trainer's
# input_s added to it). On CUDA they are events, read at 0.5 µs resolution and summed over
# micro-batches: a part may come out a little over the whole, never by more than this.
PART_TOLERANCE_S = 1e-3
RANK_PARTS = ("fwd_s", "bwd_s", "wait_s", "allreduce_s", "optimizer_s", "input_s")
# On CPU a rank's parts are spans of its step on one host clock, its wait the remainder of the
# schedule's span (`executor.parallel`) and its input time added to the step (the worker): they
# sum to its step_s up to float rounding. 124,740 rank records of CPU runs (the sixty-second
# round's and earlier rounds' runs) sum to theirs within 4e-16 of it; this leaves room for
# rounding, none for a time a rank could have spent outside its parts.
CPU_PARTS_TOLERANCE_REL = 1e-9
CPU_PARTS = ("input_s", *RANK_PARTS[:-1])  # in calibrate's order (`calibrate.RANK_PARTS`)


# How many times faster than its phase's prediction of one micro-batch a stage's whole forward
# in a step may be: no device is 10^6 times faster than the one a profile measured (a
# 1-thread CPU's profile of a GPU's run is ~10^3 off; calibrate fits 10^3, `MIN_SCALE`).
# Forwards of 1 ns for 5 ViT layers on 32 samples were reported, and calibrate blamed the
# run's own profile ("likely of another device"; the sixty-fourth round).
IMPOSSIBLY_FASTER = 1e6


def unmeasured_times(
    times: RankTimes, layout: Layout | None = None, stages: list[StagePlan] | None = None
) -> str:
    """Why a rank's times in a step are no measurement, "" when they are one: each is 0 or at
    least MIN_MEASURED_S (no timer resolves less), and a rank with a stage computes its forward;
    with the phase's `layout`, a stage that trains (from `forward_only_stages` on, each holding
    a layer with parameters) its backward and its optimizer's step too, and with replicas its
    gradients' all-reduce. The executor times every stage's forward, every trained stage's
    backward, optimizer step and all-reduce as spans of the step's clock
    (`executor.parallel.PhaseRuntime.step`), so they take time; a rank outside the layout times
    nothing but its input. With the phase's predicted `stages`, a part IMPOSSIBLY_FASTER than
    the stage's prediction of it (one micro-batch's forward or backward, one optimizer step or
    all-reduce) is none either. The format refuses what this
    names, so calibrate (`calibrate.unmeasured`) never fits it: steps of a rank whose forward
    and backward read 0 were reported, and calibrate left them out without a word (the
    sixty-third round).

        unmeasured_times(times, layout)   # "fwd_s 0.0, but stage 1 computes a forward …"
    """
    for name in ("step_s", *RANK_PARTS):
        if 0 < (value := getattr(times, name)) < MIN_MEASURED_S:
            return f"{name} {value!r} is below {MIN_MEASURED_S:g} s, which no timer resolves"
    if times.stage is None:
        return ""
    trains = layout is not None and times.stage >= layout.forward_only_stages
    parts = ["fwd_s", *(("bwd_s", "optimizer_s") if trains else ())]
    if trains and layout.replicas > 1:  # type: ignore[union-attr]  # (trains: a layout)
        parts.append("allreduce_s")
    for name in parts:
        if (value := getattr(times, name)) == 0:  # -0.0 too, said as it is written
            return f"{name} {value!r}, but {_DONE_EVERY_STEP[name](times.stage, layout)}"
    # Each part it measured against the phase's prediction of the same part: the sixty-fifth
    # round set optimizer_s (and bwd_s) to 1e-9 s, the rest moved into wait_s, and calibrate
    # fitted an optimizer of 5 PB/s (or blamed the profile) where fwd_s alone was held.
    if stages is None or times.stage >= len(stages):
        return ""
    for name in parts:
        predicted, value = getattr(stages[times.stage], name), getattr(times, name)
        if value * IMPOSSIBLY_FASTER < predicted:
            return (
                f"{name} {value!r} is {predicted / value:,.0f}× faster than the phase's "
                f"predicted {_PREDICTED_PART[name].format(stage=times.stage)} ({predicted:.6g} "
                f"s): no device is {IMPOSSIBLY_FASTER:g} times faster than the profile's"
            )
    return ""


# What a rank of a stage does every step, by part: why a part of 0 s is no measurement.
_DONE_EVERY_STEP = {
    "fwd_s": lambda stage, layout: f"stage {stage} computes a forward every step",
    "bwd_s": lambda stage, layout: (
        f"stage {stage} of the phase's {layout.label()} trains: it computes a backward every step"
    ),
    # Its optimizer steps and zeroes the stage's gradients in every step, a span of the
    # step's clock: at 0 s calibrate read "no rank with trainable parameters measured a
    # step" and moved the optimizer's time into the fixed per-step overhead (the
    # sixty-fourth round).
    "optimizer_s": lambda stage, layout: (
        f"stage {stage} of the phase's {layout.label()} trains: it steps its optimizer every step"
    ),
    # Its replicas' gradients meet in one collective, which moves them on every replica: at
    # 0 s calibrate read "no data-parallel stage with gradients" (the sixty-third round).
    "allreduce_s": lambda stage, layout: (
        f"stage {stage} of the phase's {layout.label()} trains on {layout.replicas} replicas: "
        "it all-reduces its gradients every step"
    ),
}
# The prediction each part is held to (`StagePlan`): a measured forward or backward covers
# at least one micro-batch, an optimizer step or all-reduce one step's.
_PREDICTED_PART = {
    "fwd_s": "forward of stage {stage} for one micro-batch",
    "bwd_s": "backward of stage {stage} for one micro-batch",
    "optimizer_s": "optimizer step of stage {stage}",
    "allreduce_s": "all-reduce of stage {stage}",
}


def _check_rank_times(step: StepRecord, where: str, config: RunConfig | None) -> None:
    """A step's step_s is its slowest rank's (`executor.records.step_record`), and each part
    of a rank's step is timed within the rank's: no rank's step_s, nor any part of it, is
    longer than the step's. A CPU run records no peak memory (it is CUDA's allocator's), and
    its ranks' parts add up to their step_s (CPU_PARTS_TOLERANCE_REL). A rank's 100 s forward
    inside a step of 0.17 s was reported and calibrated from; on CPU, parts of twice the
    rank's step (the sixty-second round), calibrate only warned of."""
    limit = step.step_s * (1 + RATE_TOLERANCE_REL) + PART_TOLERANCE_S
    # Nor is the step longer than its slowest rank's. Records that time only the parts (every
    # rank's step_s 0: hand-made ones) have no rank time to hold it to.
    slowest = max((times.step_s for times in step.ranks), default=0.0)
    if slowest > 0 and step.step_s > slowest * (1 + RATE_TOLERANCE_REL) + PART_TOLERANCE_S:
        raise InputFileError(
            f"{where}: step {step.step}: step_s {step.step_s!r} is longer than its slowest "
            f"rank's step_s {slowest!r}, which it is"
        )
    for times in step.ranks:
        for part in ("step_s", *RANK_PARTS):
            value = getattr(times, part)
            if value > limit:
                raise InputFileError(
                    f"{where}: step {step.step}: rank {times.rank}: {part} {value!r} is longer "
                    f"than the step's step_s {step.step_s!r}, its slowest rank's"
                )
        if config is None or config.device != "cpu":
            continue  # on CUDA a host clock around asynchronous work: calibrate judges them
        if times.peak_memory_bytes is not None:
            raise InputFileError(
                f"{where}: step {step.step}: rank {times.rank}: peak_memory_bytes "
                f"{times.peak_memory_bytes} on a CPU run (run.json's device): the peak is "
                "CUDA's device memory, null on CPU"
            )
        parts = sum(getattr(times, part) for part in CPU_PARTS)
        # A rank's step_s 0: hand-made records that time only the parts (as calibrate's
        # `parts_add_up`).
        if times.step_s and not math.isclose(parts, times.step_s, rel_tol=CPU_PARTS_TOLERANCE_REL):
            raise InputFileError(
                f"{where}: step {step.step}: rank {times.rank}: its parts "
                f"({' + '.join(CPU_PARTS)}) add up to {parts!r}, but its step_s is "
                f"{times.step_s!r}: on a CPU run (run.json's device) the wait is the remainder, "
                "so they add up to it"
            )


def check_epoch(
    epoch: EpochRecord, phase: PhaseRecord, steps: list[StepRecord], where: str, finished: list[int]
) -> None:
    """An epoch record agrees with its step records and its phase (`phase`: the latest, whose
    layout and frozen layers close the epoch), as the executor computes it
    (`executor.worker.Worker.end_epoch`): samples_per_s is steps × global batch / epoch_s,
    train_loss the mean of its steps' losses, grad_norms keyed by the active layers, and the
    forecast continues the epochs so far (`finished`: every epoch's frozen layers up to this
    one). An epoch of 10⁹ samples/s, or a train loss of 99 over steps of 2.3, was reported.

        check_epoch(epoch, phase, steps, "run.jsonl:12", [0, 4])
    """
    batch = phase.layout.global_batch
    expected = epoch.steps * batch / epoch.epoch_s if epoch.epoch_s > 0 else 0.0
    if not math.isclose(epoch.samples_per_s, expected, rel_tol=RATE_TOLERANCE_REL):
        raise InputFileError(
            f"{where}: epoch {epoch.epoch}: samples_per_s {epoch.samples_per_s!r}, but "
            f"{epoch.steps} steps x {batch} samples in epoch_s {epoch.epoch_s!r} is "
            f"{expected:.6g}"
        )
    _check_epoch_time(epoch, steps, where)
    _check_train_loss(epoch, steps, where)
    _check_grad_norms(epoch, phase, where)
    if epoch.forecast is not None:
        _check_forecast(epoch, epoch.forecast, phase, where, finished)


# The least share of its steps' times an epoch's may be. The epoch's clock runs on rank 0
# through every step (a mid-epoch resume adds the recorded times of the steps before it), and
# a step's time is its slowest rank's, each rank's steps closed by one collective: apart only
# by how far the ranks leave that collective apart (1.00 to 1.12 observed on CPU). Half leaves
# room for clocks on many nodes and refuses times scaled by hand (an epoch "of 5.5 ms" over
# steps of 0.4 s was reported at 138,796 samples/s: the fifty-eighth round).
EPOCH_TIME_FLOOR = 0.5


def _check_epoch_time(epoch: EpochRecord, steps: list[StepRecord], where: str) -> None:
    stepped = math.fsum(s.step_s for s in steps)
    if epoch.epoch_s < EPOCH_TIME_FLOOR * stepped:
        raise InputFileError(
            f"{where}: epoch {epoch.epoch}: epoch_s {epoch.epoch_s!r}, but its "
            f"{len(steps)} steps took {stepped:.6g} s (their step_s): an epoch lasts at least "
            "its steps"
        )


# How far train_loss may be from the mean of the steps' losses, relatively: the executor takes
# the mean of the very floats it recorded, in the same order; only rounding can differ.
LOSS_TOLERANCE_REL = 1e-9


def _check_train_loss(epoch: EpochRecord, steps: list[StepRecord], where: str) -> None:
    losses = [s.loss for s in steps if s.loss is not None]
    if not losses or epoch.train_loss is None:
        if (epoch.train_loss is None) != (not losses):
            has = "no step records a loss" if not losses else "train_loss is null"
            raise InputFileError(
                f"{where}: epoch {epoch.epoch}: train_loss {epoch.train_loss!r}, but {has}: "
                "train_loss is the mean of the epoch's step losses"
            )
        return
    mean = sum(losses) / len(losses)
    if not math.isclose(epoch.train_loss, mean, rel_tol=LOSS_TOLERANCE_REL):
        raise InputFileError(
            f"{where}: epoch {epoch.epoch}: train_loss {epoch.train_loss!r}, but the mean "
            f"loss of its {len(losses)} steps is {mean:.6g}"
        )


def _check_grad_norms(epoch: EpochRecord, phase: PhaseRecord, where: str) -> None:
    """Keys are the active layers' indices, written as `str(index)`: frozen_layers up to the
    last layer of the model (a frozen layer has no gradient; '03' would be layer 3 twice),
    each of them (`_check_every_active_layer`)."""
    layers = phase.layout.boundaries[-1]
    for key in epoch.grad_norms:
        # Its length first: int() of 4,300 digits or more raised a traceback.
        index = int(key) if len(key) <= 7 and key.isdecimal() and key.isascii() else None
        if index is None or str(index) != key:
            shown = repr(key) if len(key) <= 40 else quoted(key, 20)
            raise InputFileError(
                f"{where}: epoch {epoch.epoch}: grad_norms key {shown} is not a layer index "
                "(a decimal number without leading zeros, below 10,000,000)"
            )
        if not epoch.frozen_layers <= index < layers:
            raise InputFileError(
                f"{where}: epoch {epoch.epoch}: grad_norms names layer {index}, but the active "
                f"layers are {epoch.frozen_layers}..{layers - 1} (frozen_layers "
                f"{epoch.frozen_layers} of {layers})"
            )
    _check_every_active_layer(epoch, layers, where)


def _check_every_active_layer(epoch: EpochRecord, layers: int, where: str) -> None:
    """Norms that name any layer name every active one: replica 0's stages measure every
    layer that trains at each step (`executor.worker.Worker.gather_grad_norms`), and the
    epoch's active layers are its phase's from the last freeze decision on. Empty, the epoch
    measured no step (the checkpoint's `grad_history` reads alike). A layer left out was
    charted and calibrated from as if the run had never measured it.

        _check_every_active_layer(epoch, 10, "run.jsonl:6")   # frozen_layers 0: '0'..'9'
    """
    if not epoch.grad_norms:
        return
    missing = next(
        (i for i in range(epoch.frozen_layers, layers) if str(i) not in epoch.grad_norms), None
    )
    if missing is not None:
        raise InputFileError(
            f"{where}: epoch {epoch.epoch}: grad_norms lacks active layer {missing}: every "
            f"active layer ({epoch.frozen_layers}..{layers - 1}, frozen_layers "
            f"{epoch.frozen_layers} of {layers}) has a norm"
        )


def _check_forecast(
    epoch: EpochRecord, forecast: Forecast, phase: PhaseRecord, where: str, finished: list[int]
) -> None:
    """Each case's schedule is the epochs so far, then frozen counts that never fall and
    never freeze the head (`pipeplan.freeze.list_schedule`); samples are the epoch's steps of
    whole global batches, or the training set that gave them (`Worker.forecast`)."""
    layers, batch = phase.layout.boundaries[-1], phase.layout.global_batch
    low, high = epoch.steps * batch, (epoch.steps + 1) * batch
    if not low <= forecast.samples < high:
        raise InputFileError(
            f"{where}: epoch {epoch.epoch}: forecast.samples {forecast.samples}, but its "
            f"{epoch.steps} step{'s' * (epoch.steps != 1)} of {batch} samples come from "
            f"{low}..{high - 1} samples"
        )
    for number, case in enumerate(forecast.cases):
        field = f"forecast.cases[{number}].frozen_layers"
        schedule = case.frozen_layers
        if schedule[: len(finished)] != finished:
            raise InputFileError(
                f"{where}: epoch {epoch.epoch}: {field} {quoted(schedule, 40)} does not begin with "
                f"the epochs so far, {quoted(finished, 40)}"
            )
        for at, value in enumerate(schedule):
            if value > layers - 1 or (at and value < schedule[at - 1]):
                raise InputFileError(
                    f"{where}: epoch {epoch.epoch}: {field}: epoch {at}: {value} is not a "
                    f"frozen-layer count in {schedule[at - 1] if at else 0}..{layers - 1} "
                    "(freezing only grows, and the head is never frozen)"
                )


# The continuations a forecast prices under each --freeze (`pipeplan.freeze.continuations`):
# the rest of a schedule decided without gradients, or auto's least and most freezing.
CONTINUATIONS = {"auto": ["no-further-freezing", "alpha-bound"]}


def _check_continuations(
    epoch: EpochRecord, forecast: Forecast, config: RunConfig, where: str
) -> None:
    """The cases are the continuations run.json's `freeze` has, in order; no further freezing
    keeps the epoch's frozen layers to the end, and --freeze none freezes nothing. A case
    named otherwise, or a no-further-freezing case that freezes more, was reported as what
    the run was heading for.

        _check_continuations(epoch, epoch.forecast, config, "run.jsonl:6")
    """
    names = [case.continuation for case in forecast.cases]
    expected = CONTINUATIONS.get(config.freeze, ["schedule"])
    if names != expected:
        raise InputFileError(
            f"{where}: epoch {epoch.epoch}: forecast.cases continue as {names}, but run.json's "
            f"freeze {config.freeze} forecasts {expected}"
        )
    if config.freeze not in ("auto", "none"):
        return
    # auto's first case and none's only one freeze no further: the epoch's layers to the end.
    case = forecast.cases[0]
    schedule = case.frozen_layers
    later = range(epoch.epoch + 1, len(schedule))
    at = next((at for at in later if schedule[at] != epoch.frozen_layers), None)
    if at is not None:
        raise InputFileError(
            f"{where}: epoch {epoch.epoch}: forecast.cases[0].frozen_layers: epoch {at}: "
            f"{schedule[at]}, but {case.continuation} under freeze {config.freeze} keeps the "
            f"epoch's {epoch.frozen_layers} to the end"
        )


class _ForecastEpochs:
    """Each forecast prices every epoch of the run attempt that wrote it (`Worker.forecast`
    passes run.json's `epochs`): an attempt is the records from the start, or from a phase
    entered by --resume, to the next such phase. With run.json, the first attempt's length is
    its `epochs` while no resume followed; an earlier attempt's at most, the latest's at least
    (a resume adds epochs, and one that stopped before its first checkpoint keeps run.json as
    it was: `executor.checkpoint.commit_config`). And every case of an attempt has one
    length, no shorter than the attempt's before it. A case of 5 epochs in a 2-epoch run was
    reported.

        priced = _ForecastEpochs(config, last=0)   # no phase entered by --resume
        priced.check(epoch, 0, "run.jsonl:6")      # each epoch record in turn
    """

    def __init__(self, config: RunConfig | None, last: int) -> None:
        self.config, self.last = config, last
        self.attempt = 0  # the attempt of the forecasts seen last
        self.length: int | None = None  # and their length, first seen in `self.named`
        self.named = ""

    def check(self, epoch: EpochRecord, attempt: int, where: str) -> None:
        if epoch.forecast is None:
            return
        for number, case in enumerate(epoch.forecast.cases):
            name = f"epoch {epoch.epoch}'s forecast.cases[{number}]"
            self._check_length(len(case.frozen_layers), attempt, where, name)

    def _check_length(self, length: int, attempt: int, where: str, name: str) -> None:
        prices = f"{where}: {name}.frozen_layers prices {length} epochs"
        self._against_config(length, attempt, prices)
        if self.length is not None and attempt == self.attempt and length != self.length:
            raise InputFileError(
                f"{prices}, but {self.named} prices {self.length}: a run forecasts the same "
                "epochs throughout (a resume may add some)"
            )
        if self.length is not None and length < self.length:  # an earlier attempt's
            raise InputFileError(
                f"{prices}, fewer than {self.named} before the resume ({self.length}): a "
                "resume adds epochs, never removes them"
            )
        if self.length is None or attempt != self.attempt:
            self.attempt, self.length, self.named = attempt, length, name

    def _against_config(self, length: int, attempt: int, prices: str) -> None:
        if self.config is None:
            return
        epochs = self.config.epochs
        if attempt == self.last == 0 and length != epochs:
            why = "a forecast prices every epoch of the run"
        elif attempt < self.last and length > epochs:
            why = "a run before a resume had no more epochs than run.json has since"
        elif attempt == self.last and length < epochs:
            why = "the latest resume runs at least the epochs run.json has"
        else:
            return
        raise InputFileError(f"{prices}, but run.json says epochs {epochs}: {why}")


def check_run_profile(
    run_dir: str | Path,
    config: RunConfig,
    profile: Profile,
    named: str,
    advice: str,
    fed: FedInput | None = None,
) -> None:
    """A run's times correct or price only a profile of its model in its precision: what
    `calibrate` checks against --profile and `report` against the profile the run's records
    were priced with (run.json's model edited to another one was reported as that model).
    `named` is the profile as the line names it ("--profile", "its profile.json"), `advice`
    what to do instead, said when the profile is of another built-in model (a folder's line
    says its own: the command that profiles it, with the flags of the input the run fed,
    `fed`; the profile's own input when not given: a run's own profile is of its input).

        check_run_profile(run_dir, config, profile, "--profile", "give the run's profile")
        # runs/r2 is a run of 'bert-synth' but --profile profiles 'vit-digits'; give …

    Found by the thirty-fourth round: the line was two composed ("a run of 'bert-synth', but
    the profile is of 'vit-digits', which profiles 'vit-digits', not the model 'bert-synth'").
    """
    flags = (fed or FedInput.of_profile(profile)).flags(model_labels(config.model))
    why = model_mismatch(
        config.model, profile, flags, named=False, advice=advice, nproc=config.nproc
    )
    if why is not None and named_by_name(config.model):
        raise InputFileError(f"{run_dir} is a run of {quoted(config.model)} but {named} {why}")
    if why is not None:
        # A folder's line is its own contrast ("… whose config field 'model_type' is 'bert',
        # but ckpt/config.json has 'llama'; profile this model: …"), the run's model named by
        # its config.json: after "a run of ckpt but" it read as two "but"s (thirty-eighth round).
        raise InputFileError(f"{run_dir}: {named} {why}")
    if config.precision != profile.model.precision:
        # Times measured in one precision cannot correct a profile of the other.
        raise InputFileError(
            f"{run_dir}: a run in {config.precision}, but the profile was measured in "
            f"{profile.model.precision}"
        )


def run_input(run_dir: str | Path, records: list) -> FedInput | None:
    """The input a run fed its model and the head it built, as the profile its first phase
    was priced with records them (the run held that profile to its model: `executor.planning.
    check_profile_fits`); None when no phase started. Read after `check_priced_profiles`,
    which holds the file to the records' sha256.

        run_input("runs/r", read_records("runs/r/run.jsonl"))   # FedInput((16,), "int64", …)
    """
    phases = [r for r in records if isinstance(r, PhaseRecord)]
    if not phases:
        return None
    priced = [(f"phase {phases[0].phase}", phases[0].pricing)]
    return FedInput.of_profile(_priced_profile(Path(run_dir), phases[0].pricing.profile, priced))


# What a run's own profile of another model than run.json's means (`check_run_profile`).
EDITED_SINCE = "run.json's model or the profile was edited after the run was prepared"


# The --plan file as the run started, copied beside its records (`executor.launch` prepares
# it): the run follows this copy, so the file given, replaced or deleted since, cannot change a
# resumed run's layouts mid-phase; and every phase and forecast is priced on its cluster.
RUN_PLAN = "run.plan.json"


def read_plan_copy(run_dir: str | Path, config: RunConfig) -> Plan | None:
    """The run's copy of its plan (RUN_PLAN) as the run was prepared, or None for a run of no
    plan (run.json's plan unset). Read here, in the formats, so that a resume
    (`executor.planning.RunPlanner.for_run`) and the records' readers
    (`pipeplan.costmodel.check_priced_clusters`, below the executor) take it alike.
    InputFileError when it is gone (a run prepared before runs kept one, or deleted: nothing
    tells what the plan was, and the file run.json names may hold another plan now) or edited
    since (`check_plan_copy`).

        plan = read_plan_copy(Path("runs/exp1"), load(RunConfig, "runs/exp1/run.json"))
    """
    if not config.plan:
        return None
    copy = Path(run_dir) / RUN_PLAN
    if not copy.exists() and not copy.is_symlink():
        raise InputFileError(
            f"{copy}: no such file: the run's copy of its plan {config.plan} is gone, so "
            "the plan it started with cannot be told; start a new run"
        )
    text = read_input(copy)
    check_plan_copy(copy, text, config)
    return parse(Plan, text, str(copy))


def check_plan_copy(copy: Path, text: str, config: RunConfig) -> None:
    """`check_plan_copy(run_dir / RUN_PLAN, text, config)`: the run's copy of its plan
    (`text`, as read) has the sha256 run.json recorded when the run was prepared
    (`RunConfig.plan_sha256`); InputFileError otherwise. A phase the run has not reached yet,
    edited between runs (a schedule turned to gpipe), was otherwise obeyed by the resume. A
    run prepared before the sha256 was recorded has none: its copy is held only to the phases
    it has taken (`executor.planning.RunPlanner.check_records`), as it was then."""
    if config.plan_sha256 is None:
        return
    digest = text_sha256(text)  # the bytes read, decoded back
    if digest != config.plan_sha256:
        raise InputFileError(
            f"{copy}: edited since the run started (its sha256 is {digest[:12]}…, run.json "
            f"recorded {config.plan_sha256[:12]}…); restore it or start a new run"
        )


def priced_records(records: Sequence[Any]) -> list[tuple[str, Pricing]]:
    """What in `records` was priced with a profile, said, and its pricing: each phase, and
    each epoch's forecast (`pricing.profile` names the run's file that priced it).

        priced_records(records)   # [("phase 0", Pricing(...)), ("epoch 0's forecast", ...)]
    """
    priced = [(f"phase {r.phase}", r.pricing) for r in records if isinstance(r, PhaseRecord)]
    priced += [
        (f"epoch {r.epoch}'s forecast", r.forecast.pricing)
        for r in records
        if isinstance(r, EpochRecord) and r.forecast is not None
    ]
    return priced


def check_priced_profiles(
    run_dir: str | Path, config: RunConfig, records: list
) -> dict[str, Profile]:
    """The profiles the phases were priced with (files in the run directory) are there, and
    of run.json's model and precision (`check_run_profile`): the run's own record of what it
    trained, so run.json's precision edited from fp32 to bf16 is refused by report and
    calibrate alike. Each phase, and each epoch's forecast, records the sha256 of the profile
    that priced it, and a phase the run solved a step no longer than its stages allow. Returns
    the profiles by name (`pipeplan.costmodel.check_priced_clusters` holds each phase's
    cluster to the run with them).

        profiles = check_priced_profiles(run_dir, config, read_records(run_dir / "run.jsonl"))
    """
    run_dir = Path(run_dir)
    priced = priced_records(records)
    profiles: dict[str, Profile] = {}
    for name in sorted({pricing.profile for _, pricing in priced}):
        profiles[name] = profile = _priced_profile(run_dir, name, priced)
        check_run_profile(run_dir, config, profile, f"its {name}", EDITED_SINCE)
        _check_unedited(run_dir, name, profile, priced)
        _check_calibration_named(run_dir, name, profile, priced)
        phases = [r for r in records if isinstance(r, PhaseRecord) and r.pricing.profile == name]
        for phase in phases:
            _check_step_bound(run_dir, name, phase, profile)
    return profiles


def _priced_profile(run_dir: Path, name: str, priced: list[tuple[str, Pricing]]) -> Profile:
    """The profile file `name` that run.jsonl's `priced` records name, read (InputFileError
    naming the file if it is not a file of the run directory, or is missing).

        profile = _priced_profile(run_dir, "calibration-2.json", [("phase 1", pricing)])
    """
    if Path(name).name != name or name in ("", ".", ".."):
        raise InputFileError(
            f"{run_dir / 'run.jsonl'}: pricing names profile '{name}', not a file in the "
            "run directory"
        )
    # The run writes every profile it prices with before the phase that names it (profile.json
    # as it starts, calibration-N.json as it adopts one): one missing was deleted, and skipping
    # it skipped the edited-since check below (the nineteenth round deleted both).
    if not (run_dir / name).exists():
        first = next(what for what, p in priced if p.profile == name)
        raise InputFileError(
            f"{run_dir / name}: missing, though run.jsonl's {first} was priced with it "
            "(pricing.profile); restore it or start a new run"
        )
    return load(Profile, run_dir / name)


def _check_calibration_named(
    run_dir: Path, name: str, profile: Profile, priced: list[tuple[str, Pricing]]
) -> None:
    """Each record's `pricing.calibration` is what its profile file says, as the run derives
    it (`executor.planning.RunPlanner.pricing`): "online" for a calibration-N.json it fitted,
    else "profile" where the file holds a calibration and "none" where it holds none. The
    sixty-third round: "online" on a phase priced with an uncalibrated profile.json, and
    "none" on one priced with calibration-2.json, were read by every command.

        _check_calibration_named(run_dir, "profile.json", profile, [("phase 0", pricing)])
    """
    online = name != "profile.json"
    expected = "online" if online else "profile" if profile.calibration else "none"
    for what, pricing in priced:
        if pricing.profile == name and pricing.calibration != expected:
            because = (
                "a calibration fitted during the run"
                if online
                else f"the profile the run started with, which holds "
                f"{'a' if profile.calibration else 'no'} calibration"
            )
            raise InputFileError(
                f"{run_dir / 'run.jsonl'}: {what}: pricing.calibration is "
                f"'{pricing.calibration}' but its pricing.profile {name} is {because} "
                f"('{expected}'); the record was edited"
            )


def _check_unedited(
    run_dir: Path, name: str, profile: Profile, priced: list[tuple[str, Pricing]]
) -> None:
    """`profile`, read from `name`, has the sha256 every record priced with it holds.

    _check_unedited(run_dir, "profile.json", profile, [("phase 0", pricing)])
    """
    # The records hold the sha256 of the profile that priced them: the file edited since
    # (a resume planned with other times, and run.jsonl then named two profiles by one file)
    # no longer re-plans them. Each recalibration writes a file of its own, never over one.
    digest = profile_sha256(profile)
    named = [(what, p.profile_sha256) for what, p in priced if p.profile == name]
    wrong = [(what, recorded) for what, recorded in named if recorded != digest]
    if not wrong:
        return
    what, recorded = wrong[0]
    # Which side was edited is told by the other records of the same file: those that hold
    # its sha256 say the file is as priced (the twentieth round edited one phase's digest and
    # was told the untouched profile.json had been edited); all holding another one sha256
    # say the file changed. One record alone cannot tell: both are named.
    field = f"{run_dir / 'run.jsonl'}: {what}: pricing.profile_sha256 {recorded[:12]}…"
    if len(wrong) < len(named):
        raise InputFileError(
            f"{field} is not the sha256 of {name} ({digest[:12]}…), which run.jsonl's other "
            "records priced with it hold: the record was edited; restore it or start a new run"
        )
    if len(named) > 1 and len({recorded for _, recorded in named}) == 1:
        raise InputFileError(
            f"{run_dir / name}: edited since the run priced its {what} with it (its "
            "sha256 differs from the one run.jsonl records); restore it or start a new run"
        )
    raise InputFileError(
        f"{field} is not the sha256 of {name} ({digest[:12]}…): the record or the file was "
        "edited since the run priced with it; restore it or start a new run"
    )


def _check_step_bound(run_dir: Path, name: str, phase: PhaseRecord, profile: Profile) -> None:
    """A phase the run solved predicts the step the cost model simulated for its stages with
    `profile` (`executor.planning._decide`): at most their work one after another plus the
    profile's step overhead (`step_upper_bound_s`). The nineteenth round's predicted_step_s of
    100 s beside stages of 0.14 s in all was reported as a prediction. A phase taken from a
    plan file recorded the plan's step, which the plan file's own checks hold.

        _check_step_bound(run_dir, "profile.json", phase, profile)
    """
    stages, step_s = phase.predicted_stages, phase.predicted_step_s
    if phase.pricing.source != "solver" or stages is None or step_s is None:
        return
    layout = phase.layout
    c = profile.calibration
    overhead = 0.0 if c is None else c.overhead_s(layout.micro_batches * layout.micro_batch_size)
    bound = step_upper_bound_s(stages, layout.micro_batches, overhead)
    if step_s <= bound:
        return
    relation = f"exceeds its predicted_stages' work one after another plus {name}'s overhead,"
    try:
        close_enough("predicted_step_s", step_s, bound, step_s + bound, relation)
    except ValueError as exc:
        raise InputFileError(f"{run_dir / 'run.jsonl'}: phase {phase.phase}: {exc}") from None
