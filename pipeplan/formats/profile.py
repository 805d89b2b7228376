"""The profile format: what `pipeplan profile` measured of a model's layers and the links, and
the corrections `pipeplan calibrate` fitted on top (docs/architecture.md §3)."""

from __future__ import annotations

import itertools
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, field_validator, model_serializer, model_validator

from pipeplan.errors import InputFileError, quoted, reason
from pipeplan.fileio import same_path
from pipeplan.formats.base import (
    CONFIG_LIMIT,
    MAX_BANDWIDTH,
    MAX_CONFIG_BYTES,
    MAX_COUNT,
    MAX_FILE_BYTES,
    MAX_SECONDS,
    Bandwidth,
    Bytes,
    Count,
    FloatBytes,
    Latency,
    NonNegFloat,
    NonNegInt,
    PosBytes,
    Scale,
    Seconds,
    Seed,
    SignedSeconds,
    Strict,
    Text,
    Timestamp,
    TooManyDigits,
    Versioned,
    dumps,
    json_loads,
    out_of_memory,
    read_input,
    text_sha256,
    unique_keys,
)
from pipeplan.formats.modelconfig import (
    CONFIG_CLASSES,
    MAX_PARAMETERS,
    Dim,
    attention_setting,
    built_attention,
    chunk_problem,
    config_value_problem,
    head_labels_problem,
    label_count,
    layer_parameters,
    missing_size,
    model_sizes,
    problem_type_problem,
    size_problem,
    transformers_config,
)
from pipeplan.formats.presets import (
    BLOCKS_KEY,
    PRESETS,
    config_path,
    preset_mismatch,
)

# Rounds a profile may record, the bounds of `pipeplan profile --warmup / --repeats`.
MAX_ROUNDS = 1000
# Intra-op threads a profile may record, the bound of `pipeplan profile --threads` (the
# largest hosts have a few hundred cores; 100000 was accepted, twenty-second round).
MAX_THREADS = 1024

# What a model is trained for: classes, or the next token (decoders). Defined once, here: the
# profile records it, `pipeplan run --task` takes it, `pipeplan.models.build` builds it.
Task = Literal["classification", "causal-lm"]
# The precision a model computes in, as `--precision` takes it (profile, plan, preview, run):
# fp32, or bf16 = autocast to bfloat16 with float32 weights, gradients and optimizer state,
# activations crossing stages and cached in bfloat16. Defined once, here.
Precision = Literal["fp32", "bf16"]
# How a profile records it: the dtype the layers computed and exchanged activations in.
PRECISION_DTYPE: dict[str, str] = {"fp32": "float32", "bf16": "bfloat16"}


def _not_blank(name: str) -> str:
    """A model's name, never blank (the ninetieth and ninety-second rounds: "" and " " planned
    and previewed, and only `run` refused them)."""
    if not name.strip():
        raise ValueError(f"is blank ({name!r}): a profile names the model it measured")
    return name


class ModelInfo(Strict):
    name: Annotated[Text, AfterValidator(_not_blank)] = Field(
        description="Built-in name or the config path the model was built from."
    )
    family: Literal["bert", "roberta", "distilbert", "electra", "vit", "deit", "gpt2", "llama"]
    config: dict[str, Any] = Field(description="The exact transformers config (to_dict()).")
    input_shape: list[Count] = Field(description="Shape of one sample's input, without batch.")
    input_dtype: Literal["int64", "float32"]
    # Not a Count (2^20 at most): a causal LM's vocabulary is bounded by the parameters a
    # model may have (a vocabulary of 1,048,577 was a traceback after its profile was
    # measured, in the forty-seventh round); a classifier's labels by its config's checks.
    num_labels: Annotated[int, Field(ge=1, le=MAX_PARAMETERS)] = Field(
        description="Classes each prediction chooses among (the vocabulary for causal-lm)."
    )
    task: Task = "classification"
    padding_mask: bool = Field(
        False, description="The hidden state carries a padding-mask channel (one more value)."
    )
    dtype: Literal["float32", "bfloat16"] = Field(
        "float32",
        description="Precision the layers were measured in: float32, or bfloat16 (autocast "
        "with float32 weights, `--precision bf16`); boundary and saved bytes are of it.",
    )

    @model_validator(mode="after")
    def _config_is_the_model(self) -> ModelInfo:
        """The family is the config's model_type (what `pipeplan.models` builds it from), and a
        built-in name has its preset's shape: a title or a run names the model measured."""
        model_type = self.config.get("model_type", self.family)
        if model_type != self.family:
            raise ValueError(
                f"family is {self.family!r} but its config's model_type is {model_type!r}"
            )
        _check_config_sizes(self.config)
        _check_input_shape(self.family, self.input_shape, self.config)
        _check_model_config(self)
        why = preset_mismatch(self.name, self.family, self.config)
        if why:
            raise ValueError(f"name: {why}; a profile of another shape takes another name")
        return self

    @property
    def precision(self) -> Precision:
        """The `--precision` value this profile was measured with: `fp32` or `bf16`."""
        return next(k for k, v in PRECISION_DTYPE.items() if v == self.dtype)  # type: ignore[return-value]


# The config keys that size a model: transformers' integers, never a string, float or bool
# ("30522" or 30522.0 passed the format and priced a model of no known shape). n_inner may be
# null (gpt2: 4 × n_embd).
CONFIG_SIZE_KEYS = (
    "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
    "max_position_embeddings", "n_embd", "n_head", "n_layer", "n_positions", "n_inner",
    "image_size", "patch_size", "num_channels", "dim", "n_heads", "n_layers", "hidden_dim",
    "embedding_size", "num_key_value_heads", "type_vocab_size",
)  # fmt: skip
NULLABLE_SIZE_KEYS = ("n_inner",)
IMAGE_FAMILIES = ("vit", "deit")
DECODER_FAMILIES = ("gpt2", "llama")  # `models.FAMILIES` kind "decoder" (a test holds them equal)
# With the integer keys the presets set (num_labels among them), in a fixed order; token ids
# are not sizes (0 and null are ids).
_SIZE_KEYS = tuple(
    dict.fromkeys(
        [*CONFIG_SIZE_KEYS]
        + [
            k
            for p in PRESETS.values()
            for k, v in p.config.items()
            if type(v) is int and not k.endswith("_token_id")
        ]
    )
)


def _check_config_sizes(config: dict[str, Any]) -> None:
    """`_check_config_sizes({"vocab_size": "30522"})`: ValueError naming config.vocab_size;
    each size key present (those of the presets and `CONFIG_SIZE_KEYS`) is a JSON integer ≥ 1."""
    for key in _SIZE_KEYS:
        if key not in config:
            continue
        value = config[key]
        if value is None and key in NULLABLE_SIZE_KEYS:
            continue
        # bool is an int in Python: true is not a size.
        if type(value) is not int or value < 1:
            raise ValueError(f"config.{key} is {value!r}, not an integer ≥ 1")


def _check_model_config(model: ModelInfo) -> None:
    """A profile's config passes the value checks of a model directory's config.json that its
    dictionary alone can decide (`modelconfig.config_value_problem`: no transformers, no torch,
    so `plan` does not pay their imports), and the fields beside it agree with it as the
    profiler writes them: the task is one the family builds, a text model takes int64 token
    ids and an image model float32 pixels, and num_labels is the config's (its vocabulary for
    causal-lm). Found by the seventeenth round: layer_norm_eps 0, pad_token_id 10^6, task
    causal-lm on a BERT, input_dtype float32 on a BERT and num_labels 7 beside 2 labels were
    all planned; the eighteenth round's sizes past `modelconfig.MAX_PARAMETERS` and a label2id
    contradicting id2label are refused too; the twenty-third round's problem_type
    'regression', read-only properties (use_return_dict), generation settings
    (temperature -1) and pruned_heads, as in a model folder."""
    config = model.config
    if (why := config_value_problem(config, model.family)) is not None:
        raise ValueError(f"config: {why}")
    if (why := problem_type_problem(config, model.task)) is not None:
        raise ValueError(f"config: {why}")
    if (why := size_problem(config, model.family, model.task)) is not None:
        raise ValueError(f"config: {why}")
    if model.task == "causal-lm" and model.family not in DECODER_FAMILIES:
        raise ValueError(
            f"task is 'causal-lm' but a {model.family} model is not a decoder "
            f"({', '.join(DECODER_FAMILIES)} are)"
        )
    dtype = "float32" if model.family in IMAGE_FAMILIES else "int64"
    if model.input_dtype != dtype:
        raise ValueError(
            f"input_dtype is {model.input_dtype!r} but a {model.family} model takes {dtype} inputs"
        )
    if model.task == "causal-lm":
        labels, source = config.get("vocab_size"), "vocab_size"
    else:
        id2label = config.get("id2label")
        labels = len(id2label) if isinstance(id2label, dict) else config.get("num_labels")
        source = "id2label's labels"
    if labels is not None and model.num_labels != labels:
        raise ValueError(f"num_labels is {model.num_labels} but its config has {labels} ({source})")
    if (why := head_labels_problem(config, model.task)) is not None:
        raise ValueError(f"config: {why}")  # a profile of a head no run trains
    if model.task == "classification" and model.num_labels < 2:
        raise ValueError(
            f"num_labels is {model.num_labels}; a classifier pipeplan trains has at least 2 labels"
        )


def _check_input_shape(family: str, shape: list[int], config: dict[str, Any]) -> None:
    """What the profiler writes (`models._input`): a text model's [seq_len], at most its
    max_position_embeddings; an image model's [num_channels, image_size, image_size] of its
    config. `_check_input_shape("bert", [], config)`: ValueError naming input_shape."""
    if family in IMAGE_FAMILIES:
        size = config.get("image_size")
        expected = [config.get("num_channels"), size, size]
        if len(shape) != 3 or shape[1] != shape[2]:
            raise ValueError(
                f"input_shape is {shape} but a {family} model takes [channels, size, size]"
            )
        if None not in expected and shape != expected:
            raise ValueError(
                f"input_shape is {shape} but its config's num_channels and image_size give "
                f"{expected}"
            )
        return
    if len(shape) != 1:
        raise ValueError(f"input_shape is {shape} but a {family} model takes [seq_len]")
    longest = config.get("max_position_embeddings", config.get("n_positions"))
    if type(longest) is int and shape[0] > longest:
        raise ValueError(
            f"input_shape is {shape} but the model has {longest} positions "
            "(max_position_embeddings)"
        )
    if (why := chunk_problem(config, family, shape[0], "input_shape")) is not None:
        raise ValueError(f"config: {why}")


class DeviceInfo(Strict):
    kind: Literal["cpu", "cuda"]
    name: Text
    memory_bytes: PosBytes = Field(description="Total device memory (host RAM for CPU).")
    threads: Annotated[int, Field(ge=1, le=MAX_THREADS)] = Field(
        description="torch intra-op threads the layers were timed with."
    )
    count: Count = Field(1, description="Devices of this kind on the profiled host.")
    torch_version: Text
    transformers_version: Text
    python_version: Text
    hostname: Text


# What a timing measured; none of it exists for a size that ran out of memory.
_MEASUREMENTS = (
    "fwd_s", "fwd_spread_s", "bwd_s", "bwd_spread_s", "fwd_nograd_s", "fwd_nograd_spread_s",
    "peak_mem_bytes",
)  # fmt: skip
# Bytes of one parameter: weights are float32 in every precision (bf16 autocasts the compute,
# `--precision`), and the profiler counts `numel() * element_size()` of each.
PARAM_BYTES = 4


class MicroBatchTiming(Strict):
    """One layer at one micro-batch size. Times are medians over repeats; spreads are the
    interquartile range of the same repeats."""

    micro_batch: Count
    feasible: bool = Field(True, description="False when this size ran out of memory.")
    fwd_s: Seconds | None = None
    fwd_spread_s: Seconds | None = None
    bwd_s: Seconds | None = None
    bwd_spread_s: Seconds | None = None
    fwd_nograd_s: Seconds | None = None
    fwd_nograd_spread_s: Seconds | None = None
    peak_mem_bytes: Bytes | None = Field(
        None, description="CUDA only: max_memory_allocated during forward+backward."
    )
    error: Text | None = Field(None, description="Why the size is infeasible.")

    @model_validator(mode="after")
    def _times_present_when_feasible(self) -> MicroBatchTiming:
        if self.feasible and None in (self.fwd_s, self.bwd_s, self.fwd_nograd_s):
            raise ValueError("a feasible timing needs fwd_s, bwd_s and fwd_nograd_s")
        if self.feasible and self.error is not None:
            raise ValueError("a feasible timing has no error (error is why a size is infeasible)")
        return self

    @model_validator(mode="after")
    def _infeasible_says_why(self) -> MicroBatchTiming:
        """What the profiler writes for a size that ran out of memory: the error, and no
        measurement (a time kept beside feasible false is one the planner would not use)."""
        if self.feasible:
            return self
        if not self.error:
            raise ValueError("an infeasible timing (feasible false) needs its error")
        measured = [name for name in _MEASUREMENTS if getattr(self, name) is not None]
        if measured:
            raise ValueError(
                f"an infeasible timing (feasible false) has no measurements, but {measured[0]} "
                "is given"
            )
        return self


class LayerProfile(Strict):
    index: NonNegInt
    name: Text
    kind: Literal["embeddings", "block", "head"]
    params: Bytes
    param_bytes: Bytes
    out_bytes_per_sample: Bytes = Field(description="Bytes of the layer's output per sample.")
    saved_bytes_per_sample: FloatBytes = Field(
        description="Activation bytes autograd saves for backward, per sample (parameters "
        "excluded; slope over micro-batch sizes)."
    )
    saved_bytes_fixed: FloatBytes = Field(
        0.0, description="Saved bytes that do not grow with the micro-batch (intercept)."
    )
    timings: list[MicroBatchTiming]

    @model_validator(mode="after")
    def _params_are_the_bytes(self) -> LayerProfile:
        """param_bytes is params float32 weights (`PARAM_BYTES`), and a block has weights:
        the cost model sizes weights, gradients and AdamW state from param_bytes."""
        if self.param_bytes != PARAM_BYTES * self.params:
            raise ValueError(
                f"param_bytes {self.param_bytes} is not {PARAM_BYTES} bytes (float32, in every "
                f"precision) × params {self.params}"
            )
        if self.kind == "block" and self.params < 1:
            raise ValueError("params: a transformer block has weights (params ≥ 1)")
        return self

    @model_validator(mode="after")
    def _sizes_unique_sorted(self) -> LayerProfile:
        sizes = [t.micro_batch for t in self.timings]
        if sizes != sorted(set(sizes)):
            raise ValueError("timings must have distinct micro_batch sizes in increasing order")
        return self


class LinkSample(Strict):
    bytes: PosBytes
    time_s: Seconds
    spread_s: Seconds

    @model_validator(mode="after")
    def _spread_measured(self) -> LinkSample:
        """The spread is the interquartile range of the link's timed repeats (10, warm:
        `links.measure_links`), held as a layer timing's is (`SPREAD_FACTOR`): a spread of
        1000 s beside 5.6e-5 s, a quarter of the repeats lasting 1000 s, was accepted (the
        sixtieth round), where a rank stopped for 60 s fails the measurement."""
        if self.spread_s > SPREAD_FACTOR * self.time_s + SPREAD_SLACK_S:
            raise ValueError(
                f"spread_s is {self.spread_s:.3g} s but its time_s (the median of the same "
                f"repeats) is {self.time_s:.3g} s: more than {SPREAD_FACTOR:g}× + "
                f"{SPREAD_SLACK_S:g} s, not a spread the profiler measures"
            )
        return self


MIN_LINK_SAMPLES = 2


class LinkFit(Strict):
    """t = latency_s + bytes / bandwidth_bytes_per_s for point-to-point. For all-reduce the
    fit is in ring terms: t = 2(N-1)·latency_s + 2(N-1)/N · bytes / bandwidth_bytes_per_s."""

    latency_s: Latency
    bandwidth_bytes_per_s: Bandwidth
    # A fit of two parameters (latency, bandwidth) stands on at least two message sizes.
    samples: Annotated[list[LinkSample], Field(min_length=MIN_LINK_SAMPLES)] = Field(
        description="The timings the line was fitted to, one per message size."
    )

    @model_validator(mode="after")
    def _samples_measured(self) -> LinkFit:
        """One sample per message size, in increasing byte order, each a measured time (as
        `links.measure_links` writes them): a duplicated size, a decreasing order or a 0 s
        transfer is an edit (seventeenth round)."""
        sizes = [s.bytes for s in self.samples]
        if sizes != sorted(set(sizes)):
            raise ValueError(
                f"samples have bytes {quoted(sizes)}: one sample per message size, in "
                "increasing order"
            )
        for i, sample in enumerate(self.samples):
            if sample.time_s < MIN_MEASURED_S:
                raise ValueError(
                    f"samples.{i}.time_s is {sample.time_s!r}: a transfer of {sample.bytes} "
                    f"bytes takes time (a measured time is ≥ {MIN_MEASURED_S:g} s)"
                )
        return self


# What a layout change costs besides moving bytes when nothing measured it (a profile from
# before `pipeplan profile --nproc` timed it, and no calibration fitted it): a guess.
DEFAULT_GROUP_REBUILD_S = 2.0


class CommProfile(Strict):
    backend: Literal["gloo", "nccl"]
    # The ranks `profile --nproc` measured between: a Count, as the flag.
    nproc: Annotated[Count, Field(ge=2)]
    p2p: LinkFit
    allreduce: LinkFit
    group_rebuild_s: Seconds | None = Field(
        None,
        description="What a layout change costs besides moving bytes: creating a pipeline "
        "and a data-parallel process group with this backend (and connecting them) and a "
        "barrier, the slowest rank's median. None (a profile measured before this was timed): "
        f"the cost model takes {DEFAULT_GROUP_REBUILD_S} s.",
    )

    @model_validator(mode="after")
    def _fits_are_of_their_samples(self) -> CommProfile:
        for name, ring in (("p2p", None), ("allreduce", self.nproc)):
            why = _link_fit_mismatch(getattr(self, name), ring)
            if not why:
                continue
            # The all-reduce's ring terms are nproc's too: where other ring sizes make its fit
            # agree, nproc is named (the sixtieth round: nproc 4096 was blamed on the fit).
            if ring is not None and (sizes := _ring_sizes(self.allreduce)) is not None:
                said = why.removesuffix(NOT_OF_ITS_SAMPLES)
                raise ValueError(
                    f"nproc {ring}: in ring terms over {ring} ranks the allreduce fit's {said}; "
                    f"over {sizes[0]} to {sizes[1]} ranks they agree: nproc is not the ranks "
                    "its links were measured between (or the fit was edited)"
                )
            raise ValueError(f"{name}: {why}")
        return self


# How far a link's fitted line may be from its own samples (predicted / measured). The shipped
# profiles' fits are within 0.15..1.3 of every sample; a factor of 10 leaves room for a noisy
# host and refuses a bandwidth edited to 1e15 B/s (0.005 of the measured time).
LINK_FIT_FACTOR = 10.0
NOT_OF_ITS_SAMPLES = ": the fit is not of its samples"  # `_link_fit_mismatch`'s conclusion


def _ring_sizes(fit: LinkFit) -> tuple[int, int] | None:
    """The ring sizes N (2..MAX_COUNT) over which the all-reduce `fit` is of its samples
    (`_link_fit_mismatch`), as (least, most), or None. Each sample's predicted time grows with
    N, so its upper bounds hold up to some N and the largest sample's lower bound from some N:
    the sizes are one range, found by bisection.

        _ring_sizes(profile.comm.allreduce)  # (2, 11)
    """

    def bisect(holds: Any, low: int, high: int) -> int:
        """The last n in low..high where `holds` (true up to some n, false after)."""
        while low < high:
            middle = (low + high + 1) // 2
            low, high = (middle, high) if holds(middle) else (low, middle - 1)
        return low

    def ratios(n: int) -> tuple[float, float]:  # (largest sample's, smallest's)
        steps, share = 2.0 * (n - 1), 2.0 * (n - 1) / n
        return tuple(
            (steps * fit.latency_s + share * s.bytes / fit.bandwidth_bytes_per_s) / s.time_s
            for s in (fit.samples[-1], fit.samples[0])
        )

    def below(n: int) -> bool:
        return max(ratios(n)) <= LINK_FIT_FACTOR

    def above(n: int) -> bool:
        return ratios(n)[0] >= 1 / LINK_FIT_FACTOR

    if not below(2) or not above(MAX_COUNT):
        return None
    most = bisect(below, 2, MAX_COUNT)
    least = bisect(lambda n: not above(n), 1, MAX_COUNT) + 1  # 1: above at 2 already
    return (least, most) if least <= most else None


def _link_fit_mismatch(fit: LinkFit, ring: int | None) -> str | None:
    """Why `fit` contradicts its own samples, or None. At the largest message the bandwidth
    decides the time: the fit's time there is within LINK_FIT_FACTOR of the measured one; at
    the smallest the latency decides: the fit's time there is at most LINK_FIT_FACTOR × the
    measured. `ring`: None for point-to-point, N for an all-reduce of N ranks (ring terms).

        _link_fit_mismatch(LinkFit(latency_s=1e-5, bandwidth_bytes_per_s=1e15, ...), None)
        # "predicts 1e-05 s for 33554432 bytes, measured 0.014 s"
    """
    steps, share = (1.0, 1.0) if ring is None else (2.0 * (ring - 1), 2.0 * (ring - 1) / ring)

    def predicted(size: int) -> float:
        return steps * fit.latency_s + share * size / fit.bandwidth_bytes_per_s

    small, large = fit.samples[0], fit.samples[-1]
    for sample, low in ((large, 1 / LINK_FIT_FACTOR), (small, 0.0)):
        ratio = predicted(sample.bytes) / sample.time_s
        if not low <= ratio <= LINK_FIT_FACTOR:
            return (
                f"latency_s and bandwidth_bytes_per_s predict {predicted(sample.bytes):.3g} s "
                f"for {sample.bytes} bytes, but its sample measured {sample.time_s:.3g} s "
                f"(more than {LINK_FIT_FACTOR:g}× apart){NOT_OF_ITS_SAMPLES}"
            )
    return None


class FittedLink(Strict):
    latency_s: Latency
    bandwidth_bytes_per_s: Bandwidth


class FittedShape(Strict):
    """A (stages, replicas) shape of the layouts a calibration's phases ran (`1x2`): a plan of
    another shape prices what no fitted run measured, such as an all-reduce over another
    number of replicas, or a pipeline (`inputs.PlanArgs.shapes_warning`)."""

    stages: Count
    replicas: Count

    def label(self) -> str:
        """As a layout's label gives its shape: `FittedShape(stages=1, replicas=2)` → "1x2"."""
        return f"{self.stages}x{self.replicas}"


class ProfileIdentity(Strict):
    """Which profile a plan was priced with, or a calibration fitted to (`profile_identity`)."""

    model: Text
    device: Text
    sha256: str = Field(
        pattern=r"^[0-9a-f]{64}$",
        description="sha256 of the profile's canonical JSON (formats.dumps).",
    )


# The fastest all-reduce bandwidth `pipeplan calibrate` fits (ring terms, B/s): 10^13, over 10×
# the fastest device link there is (NVLink 4, 9·10^11 B/s). What the runs put past it is no
# bandwidth but noise around 0 s per byte, fitted as none (`calibrate.fit_allreduce`); a
# calibration's own all-reduce is held to it (the sixtieth round: 10^15 B/s, written by
# calibrate before the fifty-ninth round's fix, priced a 6.4 MB all-reduce at 6 ns). The p2p
# link's bandwidth is no fit: the cluster link's, as its format bounds it.
MAX_FITTED_BANDWIDTH = 1e13


# The first steps of a phase build buffers, shapes and process-group state: not measured.
WARMUP_STEPS_PER_PHASE = 2
# What `pipeplan calibrate` keeps of a phase (one definition, the fit's and the format's): a
# phase is fitted only with at least MIN_STEADY_STEPS measured steps after its warm-up, and a
# step over STRAGGLER_FACTOR times the phase median is a straggler, not data (dropped).
MIN_STEADY_STEPS = 3
STRAGGLER_FACTOR = 3.0


def fewest_steps_kept(measured: int = MIN_STEADY_STEPS) -> int:
    """`fewest_steps_kept()` → 2: the fewest steps a fitted phase adds to a calibration's
    steps_used. The steps at or below the median are never stragglers (the factor is at least
    2, so neither is the upper middle one of an even count): of 3 measured, one straggler may
    go; of more, more stay."""
    return measured // 2 + 1


# The most a fit's median step-time error may be: 10× what real fits show (median 4.7–5.1 %
# over 33 runs of a model, BENCHMARKS.md's Fidelity; the raw profile's own 9.5 %) and about
# twice their worst single phase (27 %). Past it the fitted terms sit on their bounds (the
# runs faster than any within them can price) and price the runs' own steps ×1.5 or more off.
# `pipeplan calibrate` refuses such a fit (`calibrate.check_fits_its_runs`); a calibration
# read is held to it (`Calibration`).
MAX_FIT_ERROR = 0.5

# The most steps calibrate can fit from one run: a run's records are read from a run.jsonl of
# at most MAX_FILE_BYTES (1 GiB), where each step is a line of its own of at least 64 bytes
# (a step record's required keys "step", "epoch", "phase", "step_s", "loss", "samples_per_s"
# and "ranks" alone, quoted, each with a colon and a value, take 70): 16,777,216 steps. A
# calibration's steps_used is at most that per run it names, and its phases_used at most those
# steps over the fewest a fitted phase adds (`fewest_steps_kept`).
MAX_STEPS_PER_RUN = MAX_FILE_BYTES // 64


# The least compute scale `pipeplan calibrate` fits (its bound: scales stay positive); a
# calibration's own scales are held to it (the fifty-ninth round: 1e-6 was planned with).
MIN_SCALE = 1e-3
# A calibration's compute scales, held to MIN_SCALE.
COMPUTE_SCALES = (
    "fwd_scale",
    "bwd_scale",
    "nograd_scale",
    "fwd_call_scale",
    "bwd_call_scale",
    "nograd_call_scale",
)


# The fastest optimizer step a calibration may hold: a byte of parameters updated at
# MAX_BANDWIDTH (1 PB/s, the most any pipeplan file holds of a device); AdamW moves 7 bytes
# for each, so every real device is slower still. calibrate fits the median of measured
# ratios, each above 0; found by the sixty-fifth round: 1e-300 s per byte (1e300 B/s) and
# -0.0 were planned with, where the compute scales have their floor (`Scale`).
MIN_OPTIMIZER_S_PER_BYTE = 1.0 / MAX_BANDWIDTH


def optimizer_rate(value: float) -> float:
    """`optimizer_rate(3.6e-9)` → 3.6e-9; ValueError below MIN_OPTIMIZER_S_PER_BYTE (0 and
    -0.0 too, said as written): no device updates parameters that fast."""
    if not value >= MIN_OPTIMIZER_S_PER_BYTE:
        raise ValueError(
            f"{value!r} s per byte is below {MIN_OPTIMIZER_S_PER_BYTE:g} s (an optimizer "
            f"updating {MAX_BANDWIDTH:g} bytes of parameters a second): no device is that fast"
        )
    return value


# The shortest time a profile may give as a layer's measurement: a timer's resolution is far
# coarser; below it at every layer, a size's times are zeros (or made up).
MIN_MEASURED_S = 1e-9
# The largest |relative error| a fitted step can have: a prediction within MAX_SECONDS of a
# measured step of MIN_MEASURED_S or more (the seventy-first round: residual_max 1e300 read).
MAX_RESIDUAL = MAX_SECONDS / MIN_MEASURED_S


class Calibration(Strict):
    """Corrections fitted from measured runs (`pipeplan calibrate`); the cost model applies
    them on top of the profile's measurements."""

    # A layer's profiled time at micro-batch size m is a per-call part plus a per-sample part,
    # a + c·m (§4.2). A run scales them differently from the profiler (which times each layer
    # alone): `*_scale` multiplies the per-sample part c, `*_call_scale` the per-call part a.
    fwd_scale: Scale = 1.0
    bwd_scale: Scale = 1.0
    nograd_scale: Scale = 1.0
    fwd_call_scale: Scale | None = Field(
        None, description="Per-call part of trainable forwards; None: fwd_scale (whole layer)."
    )
    bwd_call_scale: Scale | None = Field(
        None, description="Per-call part of backwards; None: bwd_scale (whole layer)."
    )
    nograd_call_scale: Scale | None = Field(
        None, description="Per-call part of frozen forwards; None: nograd_scale (whole layer)."
    )
    allreduce: FittedLink | None = Field(None, description="Ring terms, as in comm.allreduce.")
    p2p: FittedLink | None = Field(
        None, description="Stage-to-stage transfers inside a node, as the pipeline sees them."
    )
    # Never below a physical floor (`optimizer_rate`), where a subnormal lies too (the
    # fifty-eighth round: 5e-324 was taken).
    optimizer_s_per_byte: Annotated[float, Field(le=1.0), AfterValidator(optimizer_rate)] | None = (
        None
    )
    micro_batch_overhead_s: Seconds = Field(
        0.0, description="Per micro-batch and stage: the schedule's own work around each chunk."
    )
    step_overhead_s: SignedSeconds = Field(
        0.0,
        description="Per step, outside the simulated schedule: below 0 only with "
        "input_s_per_sample, as the overhead of the smallest batch fitted less its input time.",
    )
    input_s_per_sample: Seconds = Field(
        0.0, description="Reading a replica's batch (or its cached activations), per sample."
    )
    group_rebuild_s: Seconds | None = Field(
        None,
        description="A layout change's time besides moving bytes, from the runs' transitions "
        "that changed placement (measured minus the priced byte move, median, at least 0). "
        "None: the profile's comm.group_rebuild_s, else the default.",
    )
    runs: list[Text] = Field(description="Run directories the fit used.")
    # Added by the sixty-second round (optional, so no schema_version bump: calibrations
    # written before it still load, and warn of nothing): a re-plan that moved a fit of 1x2
    # runs to 1x1 trained slower, and nothing said the fit had never seen that shape.
    shapes: list[FittedShape] | None = Field(
        None,
        description="The (stages, replicas) shapes of the phases fitted, each once, in order; "
        "plan and preview warn of a phase of another. Null: not recorded (before it was).",
    )
    # Added by the sixty-fifth round, as `shapes` was: a vit-digits fit pasted into the
    # bert-tiny profile was planned with, its scales and overheads applied to another model.
    fitted_to: ProfileIdentity | None = Field(
        None,
        description="The profile calibrate fitted it to, without its calibration: its model, "
        "device and sha256 (`uncalibrated_identity`); the profile holding it must be that one. "
        "Null: not recorded (before it was).",
    )
    phases_used: NonNegInt
    steps_used: NonNegInt
    residual_median: NonNegFloat = Field(description="Median |relative error| of fitted steps.")
    # A predicted step over a measured one, less 1: at most MAX_SECONDS over MIN_MEASURED_S.
    residual_max: Annotated[NonNegFloat, Field(le=MAX_RESIDUAL)]
    not_fitted: dict[Text, Text] = Field(
        default_factory=dict,
        description="Parameters the runs cannot identify, left at their defaults (an all-reduce "
        "link of one gradient size: the cluster's, scaled as a whole): name → why.",
    )

    @model_serializer(mode="wrap")
    def _without_unrecorded(self, handler: Any) -> dict[str, Any]:
        """A field added since (CALIBRATION_ADDED) is written only where it is recorded: an
        older calibration then dumps as before, so the sha256 a run's records hold of the
        profile it priced with (`profile_sha256`) is still that profile's."""
        data = handler(self)
        return {k: v for k, v in data.items() if k not in CALIBRATION_ADDED or v is not None}

    def overhead_s(self, samples_per_replica: int) -> float:
        """A step's time outside the simulated schedule, reading a replica's batch of
        `samples_per_replica`: what the cost model adds to the schedule's step and a run's
        phase record's prediction is bounded with.

            profile.calibration.overhead_s(layout.micro_batches * layout.micro_batch_size)
        """
        return max(0.0, self.step_overhead_s + self.input_s_per_sample * samples_per_replica)

    @model_validator(mode="after")
    def _as_calibrate_writes_it(self) -> Calibration:
        """What `pipeplan calibrate` can write, and nothing else: a fit from at least one
        phase of each run it names, a median residual within the worst, a step overhead it
        can reach, and `not_fitted` naming its parameters, each at the value it is pinned to.
        Each of these, hand-edited, was planned with (a step overhead of -100 s clamped every
        step to 0, scales "fitted" from 0 phases)."""
        for field in COMPUTE_SCALES:
            value = getattr(self, field)
            if value is not None and value < MIN_SCALE:
                raise ValueError(
                    f"{field} {value!r} is below {MIN_SCALE:g}, the least compute scale "
                    "`pipeplan calibrate` fits"
                )
        link = self.allreduce
        if link is not None and link.bandwidth_bytes_per_s > MAX_FITTED_BANDWIDTH:
            raise ValueError(
                f"allreduce.bandwidth_bytes_per_s {link.bandwidth_bytes_per_s:g} B/s is above "
                f"{MAX_FITTED_BANDWIDTH:g} B/s, over 10× the fastest device link: no link "
                "`pipeplan calibrate` fits (calibrate again)"
            )
        if not self.runs or self.phases_used < len(self.runs):
            raise ValueError(
                f"runs {quoted(self.runs)} and phases_used {self.phases_used}: a calibration is "
                "fitted from at least one phase of each run it names"
            )
        # A run is a directory calibrate read: never named by nothing (the sixty-first round).
        if "" in self.runs:
            raise ValueError(
                f"runs[{self.runs.index('')}] is empty: calibrate names each run directory it read"
            )
        # What the runs' records can hold (MAX_STEPS_PER_RUN): 10^300 steps "fitted" passed.
        most, kept = MAX_STEPS_PER_RUN * len(self.runs), fewest_steps_kept()
        records = f"the run.jsonl of {len(self.runs)} run{'s' * (len(self.runs) != 1)} can hold"
        if self.steps_used > most:
            raise ValueError(
                f"steps_used {quoted(self.steps_used, 40)} is above {most}, the most steps "
                f"{records} (at most {MAX_FILE_BYTES >> 30} GiB each, a step at least 64 bytes)"
            )
        if self.phases_used > most // kept:
            raise ValueError(
                f"phases_used {quoted(self.phases_used, 40)} is above {most // kept}, the most "
                f"phases of at least {kept} steady steps {records}"
            )
        # calibrate refuses a run given twice (`fileio.check_distinct`, by the same rule: a
        # `//tmp/x` beside `/tmp/x`, or a link, passed here; the sixty-fourth round); written
        # twice by hand, its phases count twice.
        for i, run in enumerate(self.runs):
            for earlier in self.runs[:i]:
                if same_path(earlier, run):
                    raise ValueError(
                        f"runs names {quoted(earlier)} twice: a calibration is fitted from "
                        "distinct runs"
                    )
        if self.shapes is not None:
            pairs = [(shape.stages, shape.replicas) for shape in self.shapes]
            if not pairs or pairs != sorted(set(pairs)):
                raise ValueError(
                    f"shapes {[shape.label() for shape in self.shapes]}: calibrate lists the "
                    "shape of each phase it fits, each once, by stages and then replicas"
                )
            if len(pairs) > self.phases_used:
                raise ValueError(
                    f"shapes lists {len(pairs)} shapes but phases_used is {self.phases_used}: "
                    "each is the shape of a phase fitted"
                )
        # Each phase fitted adds its steady steps: 5 phases "fitted" from 1 step (or one
        # from none) cannot have been measured.
        fewest = fewest_steps_kept() * self.phases_used
        if self.steps_used < fewest:
            raise ValueError(
                f"steps_used {self.steps_used} is below {fewest}, the fewest that "
                f"phases_used {self.phases_used} can be fitted from: calibrate keeps at least "
                f"{fewest_steps_kept()} steady steps of each phase it fits (of "
                f"{MIN_STEADY_STEPS} measured, after {WARMUP_STEPS_PER_PHASE} warm-up)"
            )
        # calibrate refuses a fit past MAX_FIT_ERROR (`check_fits_its_runs`): one of 146 %
        # written by hand was planned with, as trusted as any (the sixty-first round).
        if self.residual_median > MAX_FIT_ERROR:
            raise ValueError(
                f"residual_median {self.residual_median!r} is past {MAX_FIT_ERROR:.0%}, the "
                "most median step-time error of a fit `pipeplan calibrate` writes (calibrate "
                "the runs again)"
            )
        if self.residual_median > self.residual_max:
            raise ValueError(
                f"residual_median {self.residual_median!r} is above residual_max "
                f"{self.residual_max!r}"
            )
        # calibrate fits the overhead of the smallest batch (≥ 0) and a time per sample, and
        # writes step_overhead_s as that overhead less the batch's input time (`StepFit`).
        least = -self.input_s_per_sample * MAX_COUNT + 0.0  # + 0.0: -0.0 reads as 0
        if self.step_overhead_s < least:
            raise ValueError(
                f"step_overhead_s {self.step_overhead_s!r} s is below {least:.6g} s: below 0 it "
                f"is the input time of a batch (of at most {MAX_COUNT} samples, at "
                f"input_s_per_sample {self.input_s_per_sample!r} s) taken off an overhead of "
                "at least 0"
            )
        for name in self.not_fitted:
            _check_not_fitted(self, name)
        # The converse: null (or missing) is how calibrate leaves these unfitted, never a fit,
        # and it then says why. Found by the thirty-sixth round: a fitted `allreduce` set to
        # null by hand, not_fitted unchanged, was priced as unfitted (the cluster's link). A
        # pinned number (a scale's parent, 0) may also be fitted: that edit cannot be told.
        for name in NULL_WHEN_UNFITTED:
            if getattr(self, name) is None and name not in self.not_fitted:
                raise ValueError(
                    f"{name} is null, which calibrate writes only for a parameter it did not "
                    f"fit, but not_fitted does not name it: calibrate names each with the "
                    "reason; give its fitted value back (or calibrate again)"
                )
        return self

    def scales(self, kind: str) -> tuple[float, float]:
        """(per-call, per-sample) scale of one kind of layer time: fwd, bwd or nograd.

        call, sample = calibration.scales("fwd")
        """
        sample = getattr(self, f"{kind}_scale")
        call = getattr(self, f"{kind}_call_scale")
        return (sample if call is None else call), sample


# What each parameter `calibrate` may leave unfitted holds then (`pipeplan.calibrate`): a
# scale its parent's (or 1 when nothing measured it), a term None (the profile's or the
# cluster's own) or 0. Each entry: the values it may hold.
PINNED: dict[str, Any] = {
    "fwd_scale": lambda c: (1.0,),
    "nograd_scale": lambda c: (c.fwd_scale,),
    "fwd_call_scale": lambda c: (None, c.fwd_scale),
    "nograd_call_scale": lambda c: (None, c.nograd_scale, c.fwd_call_scale),
    "bwd_scale": lambda c: (c.fwd_scale,),
    "bwd_call_scale": lambda c: (None, c.bwd_scale, c.fwd_call_scale),
    # Null, or of one gradient size the cluster's link scaled as a whole (`fit_allreduce`).
    "allreduce": lambda c: (None, c.allreduce),
    "p2p": lambda c: (None,),
    "optimizer_s_per_byte": lambda c: (None,),
    "group_rebuild_s": lambda c: (None,),
    "step_overhead_s": lambda c: (0.0,),
    "micro_batch_overhead_s": lambda c: (0.0,),
    "input_s_per_sample": lambda c: (0.0,),
}


# The fields each PINNED value is taken from, where it is another field's.
PINNED_FROM = {
    "nograd_scale": ("fwd_scale",),
    "fwd_call_scale": ("fwd_scale",),
    "nograd_call_scale": ("nograd_scale", "fwd_call_scale"),
    "bwd_scale": ("fwd_scale",),
    "bwd_call_scale": ("bwd_scale", "fwd_call_scale"),
}


# The parameters whose unfitted value is null (`PINNED`): calibrate writes a number for each
# it fits (a call scale it cannot separate gets its parent's), so null comes with a reason.
NULL_WHEN_UNFITTED = (
    "fwd_call_scale",
    "nograd_call_scale",
    "bwd_call_scale",
    "allreduce",
    "p2p",
    "optimizer_s_per_byte",
    "group_rebuild_s",
)


def _check_not_fitted(calibration: Calibration, name: str) -> None:
    """A `not_fitted` entry names a parameter calibrate fits, at the value it pins it to,
    and says why (found by the thirty-seventh round: a blank reason stood for one)."""
    if not calibration.not_fitted[name].strip():
        raise ValueError(
            f"not_fitted gives {name} no reason: calibrate says why each parameter is not fitted"
        )
    if name not in PINNED:
        raise ValueError(
            f"not_fitted names {name!r}, which is not a calibration parameter (one of "
            f"{', '.join(PINNED)})"
        )
    value, allowed = getattr(calibration, name), PINNED[name](calibration)
    if value not in allowed:
        shown = " or ".join("null" if a is None else repr(a) for a in allowed)
        # Where the value is another field's, that one may be the one edited: both named (the
        # fifty-third round: an edited fwd_scale was named as nograd_scale alone).
        sources = PINNED_FROM.get(name, ())
        edited = f" ({' or '.join((name, *sources))} was edited)" if sources else ""
        raise ValueError(
            f"not_fitted names {name}, but it holds {value!r}, a fitted value: unfitted, it is "
            f"{shown}{edited}"
        )


class ProfileSettings(Strict):
    micro_batches: list[Count]
    warmup: Annotated[NonNegInt, Field(le=MAX_ROUNDS)]
    repeats: Annotated[Count, Field(le=MAX_ROUNDS)]
    seed: Seed  # the bounds of --seed, which it records


# Calibration fields added since calibrations were first written, which older ones lack: read
# as null there (the sixty-second round's `shapes`: unrecorded, so nothing is warned of; the
# sixty-fifth's `fitted_to`: unrecorded, so the profile holding it is not checked against it).
CALIBRATION_ADDED = ("shapes", "fitted_to")


class Profile(Versioned):
    schema_version: Literal[1] = 1
    created_at: Timestamp
    model: ModelInfo
    device: DeviceInfo
    settings: ProfileSettings
    layers: list[LayerProfile]
    comm: CommProfile | None = None
    calibration: Calibration | None = None

    @field_validator("calibration", mode="before")
    @classmethod
    def _calibration_whole(cls, value: Any) -> Any:
        """A calibration read from a file holds every field, as calibrate writes it: one left
        out took its default, and a deleted fwd_scale (1.0) was then refused under the name of
        the scale pinned to it (the fiftieth round's b R4)."""
        if isinstance(value, dict):
            for name in Calibration.model_fields:
                if name not in value and name not in CALIBRATION_ADDED:
                    raise ValueError(
                        f"calibration.{name} is missing: calibrate writes every field; give "
                        "it back (or calibrate again)"
                    )
        return value

    @model_validator(mode="after")
    def _layers_indexed_in_order(self) -> Profile:
        if [layer.index for layer in self.layers] != list(range(len(self.layers))):
            raise ValueError("layers must be indexed 0..n+1 in order")
        if len(self.layers) < 3:
            raise ValueError("a profile needs embeddings, at least one block and a head")
        kinds = ["embeddings", *["block"] * (len(self.layers) - 2), "head"]
        # The config's block count is the layers': a profile names the model its config is.
        key = BLOCKS_KEY.get(self.model.family)
        blocks = self.model.config.get(key) if key else None
        if blocks is not None and blocks != len(self.layers) - 2:
            raise ValueError(
                f"model.config.{key} is {blocks!r} but layers has {len(self.layers) - 2} blocks "
                f"(embeddings, a layer per block, head)"
            )
        for layer, kind in zip(self.layers, kinds, strict=True):
            if layer.kind != kind:
                raise ValueError(
                    f"layers.{layer.index}.kind is {layer.kind!r} but layer {layer.index} of "
                    f"{len(self.layers)} is the {kind} (embeddings first, head last)"
                )
        return self

    @model_validator(mode="after")
    def _fitted_shapes_of_this_model(self) -> Profile:
        """A calibration's fitted shapes are layouts of this model: no more stages than it has
        layers (the sixty-third round: `11x1` for a 10-layer model, and `1000000x1`, were
        accepted and printed in plan's warning)."""
        shapes = self.calibration.shapes if self.calibration is not None else None
        for shape in shapes or []:
            if shape.stages > len(self.layers):
                raise ValueError(
                    f"calibration.shapes: {shape.label()} has {shape.stages} stages but the "
                    f"model has {len(self.layers)} layers: no phase of it ran that shape"
                )
        return self

    @model_validator(mode="after")
    def _calibration_fitted_to_this_profile(self) -> Profile:
        """A calibration that records the profile it was fitted to is this profile's: its
        scales are ratios to these layers' times, its overheads what these runs spent beyond
        them. Found by the sixty-fifth round: a vit-digits calibration pasted into the
        bert-tiny profile priced bert-tiny's steps 3.8× their own, at exit 0."""
        fitted = self.calibration.fitted_to if self.calibration is not None else None
        if fitted is None:
            return self
        own = uncalibrated_identity(self)
        for field, words in (("model", "model"), ("device", "device")):
            if getattr(fitted, field) != getattr(own, field):
                raise ValueError(
                    f"calibration.fitted_to.{field} is {getattr(fitted, field)!r} but this "
                    f"profile's {words} is {getattr(own, field)!r}: the calibration was fitted "
                    "to another profile; calibrate this one on runs of its model (pipeplan "
                    "calibrate RUN --profile THIS.json)"
                )
        if fitted.sha256 != own.sha256:
            raise ValueError(
                f"calibration.fitted_to.sha256 {fitted.sha256[:12]}… is not this profile's "
                f"({own.sha256[:12]}…, without its calibration): the calibration was fitted to "
                f"another profile of {own.model!r}, whose layers' times its scales correct; "
                "calibrate this one (pipeplan calibrate RUN --profile THIS.json)"
            )
        return self

    @model_validator(mode="after")
    def _optimizer_within_bounds(self) -> Profile:
        """A calibration's optimizer_s_per_byte prices the optimizer step of a stage holding
        every layer (a layout any plan may choose) within MAX_SECONDS, the bound of every
        time a run measures, optimizer_s too: the sixty-fourth round's 1 s per byte (the
        fit said 1.16e-8) priced a 2-device step at 3.2e6 s, and plan wrote it."""
        rate = self.calibration.optimizer_s_per_byte if self.calibration is not None else None
        total = sum(layer.param_bytes for layer in self.layers)
        if rate is not None and rate * total > MAX_SECONDS:
            raise ValueError(
                f"calibration.optimizer_s_per_byte {rate!r} prices the optimizer step of the "
                f"model's {total:,} parameter bytes at {rate * total:.3g} s, more than the "
                f"{MAX_SECONDS:g} s any timed operation takes; calibrate fits it from the runs' "
                "optimizer_s"
            )
        return self

    @model_validator(mode="after")
    def _layer_names_as_written(self) -> Profile:
        """Each layer's name is the one pipeplan gives it: its kind, and `blockN` for block N.
        Plans, reports and the freeze schedule name layers by them; an empty or repeated one
        named no layer or two, and layer 1 named `head` (twenty-sixth round) the wrong one."""
        for layer in self.layers:
            expected = f"block{layer.index}" if layer.kind == "block" else layer.kind
            if layer.name != expected:
                raise ValueError(
                    f"layers.{layer.index}.name {layer.name!r} is not {expected!r}: a layer is "
                    "named by its kind, a block by its index too"
                )
        return self

    @model_validator(mode="after")
    def _timings_match_settings(self) -> Profile:
        """Every layer is timed at exactly the sizes settings.micro_batches lists: the cost
        model fits each layer over them and compares layers size by size."""
        sizes = self.settings.micro_batches
        for layer in self.layers:
            timed = [t.micro_batch for t in layer.timings]
            if timed != sizes:
                raise ValueError(
                    f"settings.micro_batches is {quoted(sizes)} but layers.{layer.index}.timings "
                    f"are for micro-batch sizes {quoted(timed)}: a layer is timed at each listed "
                    "size"
                )
        return self

    @model_validator(mode="after")
    def _times_measured(self) -> Profile:
        """At each size some layer takes time forward, backward and frozen: a profile of
        zeros (or of times below any timer's resolution) prices every plan at 0 s."""
        for i, size in enumerate(self.settings.micro_batches):
            timings = [layer.timings[i] for layer in self.layers if layer.timings[i].feasible]
            if not timings:
                continue  # out of memory at this size: the planner skips it
            for name in ("fwd_s", "bwd_s", "fwd_nograd_s"):
                if max(getattr(t, name) for t in timings) < MIN_MEASURED_S:
                    raise ValueError(
                        f"layers.*.timings.{name}: no layer takes {MIN_MEASURED_S:g} s or more "
                        f"at micro-batch size {size}; these are not measured times"
                    )
        if sum(layer.params for layer in self.layers) == 0:
            raise ValueError("layers.*.params: the model has no parameters to train")
        return self

    @model_validator(mode="after")
    def _measurements_agree(self) -> Profile:
        _check_timings(self)
        _check_layer_sizes(self)
        _check_device(self)
        return self


# A frozen layer's forward (no autograd) is not slower than its forward with autograd by more
# than this factor plus this slack: the shipped profiles' worst is 8.7× at 1 ms (8 ms more),
# bf16 on a shared CPU; an edit to 1.0 s beside 0.0023 s changed every plan's frozen phases.
# Both ratios are checked of profiles timed warm (settings.warmup ≥ 1), as `_check_timings` says.
NOGRAD_FACTOR = 2.0
NOGRAD_SLACK_S = 0.05
# A larger micro-batch takes at least this fraction of a smaller one's time (its per-sample
# time drops by at most the size ratio ÷ this): the shipped profiles' worst is 0.076 (a noisy
# first size); 1e-6 s beside 0.003 s made micro-batch 8 2000× faster than micro-batch 4.
MIN_TIME_RATIO = 0.01
# A timing's spread (the interquartile range of its repeats, `profiler._median_iqr`) beside its
# median. Sound for one or two repeats: one repeat's range is 0, and two repeats' is half their
# difference, at most half their sum (their median: times are ≥ 0). From three repeats on no
# sound bound exists (the slowest quarter of the repeats may take any time without moving the
# median), so a warm profile's is held to this factor plus slack, as the no-grad forward is:
# the shipped profiles' worst is 32× at 0.2 ms (6 ms); 10^6 s beside 0.0023 s was accepted.
SPREAD_FACTOR = 100.0
SPREAD_SLACK_S = 1.0
# created_at may be this far in the future: clocks of two hosts disagree.
CLOCK_SKEW_S = 86400.0


def _check_timings(profile: Profile) -> None:
    """What the profiler's measurements of one model on one device cannot be: a no-grad
    forward far slower than the forward with autograd, no backward in a layer with weights (it
    trains), a larger micro-batch absurdly faster than a smaller one, a peak above the
    device's memory (seventeenth round: each was planned), a peak on a CPU (nineteenth round:
    accepted, and ignored)."""
    for layer in profile.layers:
        if (problem := timing_problem(layer, profile.settings, profile.device)) is not None:
            raise ValueError(problem[1])


def timing_problem(
    layer: LayerProfile, settings: ProfileSettings, device: DeviceInfo
) -> tuple[list[int], str] | None:
    """The first of `_check_timings`' rules that one layer's timings break, as (the
    micro-batch sizes of the timings concerned, why), or None. The profiler measures those
    sizes again: a spike of a shared machine broke a rule, and its own profile was refused
    (the fifty-first round).

        timing_problem(profile.layers[3], profile.settings, profile.device)
        # ([1, 2], "layers.3.timings.1.fwd_s is 0.000129 s at micro-batch 2 but …")
    """
    memory, cpu = device.memory_bytes, device.kind == "cpu"
    # Without warm-up rounds a layer's first call (allocations, kernel selection) is in its
    # first size's times: 16 ms beside 0.13 ms measured on a CPU with --warmup 0, far more on
    # a GPU. The two ratios below hold for times measured warm.
    warm = settings.warmup >= 1
    timed = [(j, t) for j, t in enumerate(layer.timings) if t.feasible]
    for j, t in timed:
        where, size = f"layers.{layer.index}.timings.{j}", [t.micro_batch]
        assert t.fwd_s is not None and t.bwd_s is not None and t.fwd_nograd_s is not None
        if warm and t.fwd_nograd_s > NOGRAD_FACTOR * t.fwd_s + NOGRAD_SLACK_S:
            return size, (
                f"{where}.fwd_nograd_s is {t.fwd_nograd_s:.3g} s but its fwd_s (the same "
                f"forward with autograd) is {t.fwd_s:.3g} s: more than "
                f"{NOGRAD_FACTOR:g}× + {NOGRAD_SLACK_S:g} s slower without autograd"
            )
        if (why := _spread_problem(t, settings.repeats, warm)) is not None:
            return size, f"{where}.{why}"
        if layer.params > 0 and t.bwd_s == 0:
            return size, (
                f"{where}.bwd_s is 0 but the layer has {layer.params} parameters: "
                "a layer with weights takes time backward"
            )
        # The peak is CUDA's allocator's (`profiler`): a CPU has none to measure, as a
        # CPU run's step records have none (`formats.run`).
        if t.peak_mem_bytes is not None and cpu:
            return size, (
                f"{where}.peak_mem_bytes is {t.peak_mem_bytes} but device.kind is 'cpu': "
                "the peak is CUDA's max_memory_allocated, null on CPU"
            )
        if t.peak_mem_bytes is not None and t.peak_mem_bytes > memory:
            return size, (
                f"{where}.peak_mem_bytes is {t.peak_mem_bytes} but device.memory_bytes is "
                f"{memory}: a measured peak fits in the device"
            )
    for (_, a), (j, b) in itertools.pairwise(timed if warm else []):
        for name in ("fwd_s", "bwd_s", "fwd_nograd_s"):
            small, large = getattr(a, name), getattr(b, name)
            if small > 0 and large < MIN_TIME_RATIO * small:
                return [a.micro_batch, b.micro_batch], (
                    f"layers.{layer.index}.timings.{j}.{name} is {large:.3g} s at "
                    f"micro-batch {b.micro_batch} but {small:.3g} s at {a.micro_batch}: a "
                    f"larger micro-batch takes at least {MIN_TIME_RATIO:g}× the time"
                )
    return None


def _spread_problem(timing: MicroBatchTiming, repeats: int, warm: bool) -> str | None:
    """Why a timing's spreads cannot be the interquartile ranges of `repeats` measurements
    whose medians it gives (`SPREAD_FACTOR`), or None:

        _spread_problem(MicroBatchTiming(fwd_s=0.0023, fwd_spread_s=1e6, …), 7, True)
        # "fwd_spread_s is 1e+06 s but its fwd_s (the median of the same 7 repeats) is …"
    """
    for name in ("fwd", "bwd", "fwd_nograd"):
        spread, median = getattr(timing, f"{name}_spread_s"), getattr(timing, f"{name}_s")
        if spread is None or median is None:
            continue
        said = (
            f"{name}_spread_s is {spread:.3g} s but its {name}_s (the median of the same "
            f"{repeats} repeat{'s' if repeats > 1 else ''}) is {median:.3g} s"
        )
        if repeats == 1 and spread > 0:
            return f"{said}: the interquartile range of one repeat is 0"
        # A relative slack of 1e-9: numpy's interpolated quartiles round.
        if repeats == 2 and spread > median * (1 + 1e-9):
            return f"{said}: two repeats' interquartile range is at most their median"
        if repeats > 2 and warm and spread > SPREAD_FACTOR * median + SPREAD_SLACK_S:
            return (
                f"{said}: more than {SPREAD_FACTOR:g}× + {SPREAD_SLACK_S:g} s, not a spread "
                "the profiler measures"
            )
    return None


# A hidden state's element, by the dtype the layers computed in (ModelInfo.dtype).
_ELEMENT_BYTES = {"float32": 4, "bfloat16": 2}
# The extra tokens an image model's blocks carry besides its patches: ViT's class token,
# DeiT's class and distillation tokens.
_EXTRA_TOKENS = {"vit": 1, "deit": 2}


_HIDDEN = "tokens × width × element size"


def _hidden_bytes(model: ModelInfo, s: dict[str, Dim]) -> int:
    """Bytes of the hidden state per sample, what the embeddings and each block output as the
    profiler measures it: tokens × width (+ 1 for a padding-mask channel) × the element size."""
    if model.family in IMAGE_FAMILIES:
        tokens = (s["image"][1] // s["patch"][1]) ** 2 + _EXTRA_TOKENS[model.family]
    else:
        tokens = model.input_shape[0]
    return tokens * (s["hidden"][1] + int(model.padding_mask)) * _ELEMENT_BYTES[model.dtype]


def hidden_state_bytes(model: ModelInfo) -> int | None:
    """Bytes per sample of what the embeddings and each block of `model` output, as a profile
    is held to them (`_hidden_bytes`), or None when its config lacks a size: what the profiler
    records for a layer that ran at no micro-batch size.

        hidden_state_bytes(load(Profile, "bert-tiny@cpu-1t.json").model)   # 65536
    """
    s = model_sizes(model.config, model.family)
    return None if s is None else _hidden_bytes(model, s)


def _logits_bytes(model: ModelInfo) -> tuple[int, str]:
    """Bytes of the head's output per sample, and what they are: the logits in float32, as the
    loss takes them (`profiler`), a causal LM's one row per token."""
    if model.task == "causal-lm":
        tokens = model.input_shape[0]
        what = f"{tokens} tokens × {model.num_labels} logits (vocab_size) in float32"
        return tokens * model.num_labels * 4, what
    return model.num_labels * 4, f"{model.num_labels} logits (num_labels) in float32"


def _expected_layers(model: ModelInfo) -> dict[str, tuple[int, list[Dim], int]] | str | None:
    """Per layer kind: (params, the config sizes they grow with, output bytes per sample), as
    the model's config and input shape give them; the config key of a missing size; or None
    for a synthetic profile's partial config (`pipeplan.synthetic`). A few dictionary look-ups
    (tens of µs beside a profile's milliseconds of parsing): no cache, whose key, the config,
    would cost as much to build."""
    config = model.config
    s = model_sizes(config, model.family)
    if s is None:
        # Only a synthetic profile's config is partial: it has no model_type and a free name
        # (a built-in's profile is the profiler's, which records every size).
        partial = "model_type" not in config and model.name not in PRESETS
        return None if partial else missing_size(config, model.family)
    layers = layer_parameters(config, model.family, model.task)
    assert layers is not None  # every size is there
    hidden, logits = _hidden_bytes(model, s), _logits_bytes(model)[0]
    return {
        kind: (params, dims, logits if kind == "head" else hidden)
        for kind, (params, dims) in layers.items()
    }


def _check_layer_sizes(profile: Profile) -> None:
    """Each layer's params (and so its param_bytes) and out_bytes_per_sample are what the
    model's config and input shape give it (`modelconfig.layer_parameters`, held to the layers
    pipeplan builds). Found by the seventeenth round for a block's output (10^18 beside
    bert-tiny's 65536 was planned) and by the twentieth for the rest: a block's params of 5
    (config: 198,272), the embeddings' or head's, their outputs, and a config's vocab_size
    10^9 or type_vocab_size 1000 beside layers of the real sizes changed the plan's memory and
    all-reduce times, or named a model other than the one measured."""
    expected = _expected_layers(profile.model)
    if isinstance(expected, str):
        raise ValueError(
            f"model.config has no {expected}: a profile records its model's whole config "
            "(the profiler writes every size), which its layers are held to"
        )
    if expected is None:
        return
    for layer in profile.layers:
        params, dims, out = expected[layer.kind]
        if layer.params != params:
            grows = ", ".join(f"{key} {value}" for key, value in dims)
            raise ValueError(
                f"layers.{layer.index}.params is {layer.params} but model.config gives the "
                f"{layer.kind} layer {params} parameters ({grows})"
            )
        if layer.out_bytes_per_sample != out:
            what = _logits_bytes(profile.model)[1] if layer.kind == "head" else _HIDDEN
            raise ValueError(
                f"layers.{layer.index}.out_bytes_per_sample is {layer.out_bytes_per_sample} "
                f"but the {layer.kind} layer of this model outputs {out} bytes per sample "
                f"({what}, as model.config and input_shape give them)"
            )


def _check_device(profile: Profile) -> None:
    """NCCL links on a CPU profile, and a profile made in the future (a day of skew allowed)."""
    from datetime import datetime, timezone

    if profile.comm is not None and profile.comm.backend == "nccl" and profile.device.kind == "cpu":
        raise ValueError(
            "comm.backend is 'nccl' but device.kind is 'cpu': NCCL links are between GPUs "
            "(the profiler measures CPU links with gloo)"
        )
    made = datetime.fromisoformat(profile.created_at)
    ahead = (made - datetime.now(timezone.utc)).total_seconds()
    if ahead > CLOCK_SKEW_S:
        raise ValueError(
            f"created_at is {profile.created_at}, {ahead / 86400:.0f} days from now: a profile "
            "is made before it is read"
        )


# The config.json fields that change a layer's shapes, and so its times and bytes, across the
# supported families (bert, roberta, distilbert, electra, vit, deit, gpt2, llama). Others
# (dropout, labels, transformers_version) leave every profiled time and byte as it was; so
# does tie_word_embeddings, because pipeplan unties a tied head before it profiles or trains
# (`models._untie`) and records False: a tied checkpoint's True is the same model.
SHAPE_FIELDS = (
    "model_type",
    "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
    "intermediate_size", "head_dim", "vocab_size", "max_position_embeddings",
    "type_vocab_size", "embedding_size", "image_size", "patch_size", "num_channels",
    "qkv_bias", "attention_bias", "mlp_bias", "hidden_act",
    "dim", "n_layers", "n_heads", "hidden_dim", "activation",
    "n_embd", "n_layer", "n_head", "n_inner", "n_positions", "activation_function",
)  # fmt: skip


def profile_sha256(profile: Profile) -> str:
    """sha256 of the profile's canonical JSON: the identity plans and phase records name.

    profile_sha256(load(Profile, "runs/a/profile.json"))   # "3f1c…"
    """
    return text_sha256(dumps(profile))


def profile_identity(profile: Profile) -> ProfileIdentity:
    """The profile's model, device and sha256: what a plan names it by.

    profile_identity(load(Profile, "p.json")).sha256   # profile_sha256 of it
    """
    return ProfileIdentity(
        model=profile.model.name, device=profile.device.name, sha256=profile_sha256(profile)
    )


def uncalibrated_identity(profile: Profile) -> ProfileIdentity:
    """The identity of the profile without its calibration: what `calibrate` fits to (it
    replaces any earlier calibration), and what a calibration records as `fitted_to`.

    uncalibrated_identity(load(Profile, "calibrated.json")) == profile_identity(raw_profile)
    """
    return profile_identity(profile.model_copy(update={"calibration": None}))


def model_mismatch(
    model: str,
    profile: Profile,
    flags: str = "",
    *,
    named: bool = True,
    advice: str = "",
    nproc: int = 1,
) -> str | None:
    """Why `profile` was not measured of `model` (a built-in name, a transformers folder or
    its config.json), or None when it was. A built-in name is the built-in, even beside a
    folder of that name (`presets.config_path`, the rule `pipeplan.models` builds by), and is
    identified by its name. A folder is identified by the config transformers builds of its
    config.json (`modelconfig.transformers_config`: the family's defaults for the shape
    fields it leaves out), not by how its path is spelled (`ckpt/`, its absolute path, a
    link to it): the first shape field differing from the config the profile recorded is
    named, with the `pipeplan profile` command that measures the folder (`profile_command`:
    `flags`, what it takes besides, the run's input: ` --seq-len 16 --padding-mask`; the
    links of the run's `nproc` ranks). The one check of run (`--profile`), report and
    calibrate.

        model_mismatch("ckpt/", load(Profile, "p.json"))   # None, or "… 'hidden_size' …"

    A built-in name's line names `model` too ("profiles 'vit-digits', not the model
    'bert-synth'") unless `named` is False, for a caller whose sentence names it already
    (`run.check_run_profile`; the thirty-fourth round read it twice in one line), and ends
    with `advice` when given (a folder's line ends with its own: the command profiling it).

    Found by the twenty-seventh round: a config.json leaving out intermediate_size (BERT's
    default 3072) was planned with the profile of a model whose config said 64, and one
    leaving out num_hidden_layers failed on rank 0 after the run was prepared.
    """
    path = config_path(model)
    if named_by_name(model):
        # A built-in name (or a folder no longer there): its name is its identity.
        if _spelling(model) == _spelling(profile.model.name):
            return None
        mine = f"profiles '{profile.model.name}'"
        mine += f", not the model '{model}'" if named else ""
        return f"{mine}; {advice}" if advice else mine
    config = _read_model_config(path)
    recorded = profile.model.config
    command = profile_command(model, flags, nproc)
    family = config.get("model_type")
    if family != recorded.get("model_type") or family not in CONFIG_CLASSES:
        given = repr(family) if "model_type" in config else "no model_type"
        return _differs("model_type", recorded.get("model_type"), given, path, command)
    built_config = _built_config(family, config, path)
    built = built_config.to_dict()
    try:  # what the profile's config builds today: the fields a newer transformers added
        measured = transformers_config(family, _without_type(recorded)).to_dict()
    except Exception:  # a config written by hand: its fields, as it says them
        measured = recorded
    for field in SHAPE_FIELDS:
        if built.get(field) != measured.get(field):
            given = repr(built.get(field))
            if field not in config:
                given = f"no {field}, so transformers builds {family}'s default {given}"
            return _differs(field, measured.get(field), given, path, command)
    # A profile made before the twenty-seventh round does not record its attention: not held.
    if {"attn_implementation", "_attn_implementation"} & recorded.keys():
        # What transformers builds of the folder, asked of it: which spelling it reads changed
        # between releases (5.25 ignores `_attn_implementation`, which earlier 5.x let win).
        timed, built_with = built_attention(recorded), built_config._attn_implementation or "sdpa"
        if timed != built_with:
            key, said = attention_setting(config)
            given = repr(built_with)
            if said != built_with:
                import transformers  # imported already: the config was built with it

                what = f"{key} {said!r}" if key in config else f"no {key}"
                given = f"{what}, from which transformers {transformers.__version__} builds {given}"
            return _differs("attn_implementation", timed, given, path, command)
    return None


def named_by_name(model: str) -> bool:
    """Whether `model_mismatch` identifies `model` by its name (a built-in, or a folder no
    longer there) rather than by its folder's config.json, whose line names the file."""
    path = config_path(model)
    return path is None or not (path.exists() or path.is_symlink())


@dataclass(frozen=True)
class FedInput:
    """The input a run feeds its model and the head it builds: a profile's times and memory
    hold for a run only when it was measured for the same (`input_mismatch`). Of the model a
    run builds (`executor.planning.check_profile_fits`), or of a profile a run was priced
    with, which the run held to it then (`of_profile`: what `calibrate` knows of a run)."""

    shape: tuple[int, ...]  # one sample's, without the batch
    dtype: str  # "int64" token ids, "float32" pixels
    precision: str
    task: str
    padded: bool  # token inputs padded (the hidden state carries the padding mask)
    num_labels: int  # a classifier's classes, a causal LM's vocabulary
    head_params: int  # the last layer's weights

    @classmethod
    def of_profile(cls, profile: Profile) -> FedInput:
        """The input `profile` was measured for."""
        model = profile.model
        shape, dtype = tuple(model.input_shape), model.input_dtype
        head = profile.layers[-1].params
        return cls(
            shape, dtype, model.precision, model.task, model.padding_mask, model.num_labels, head
        )

    def words(self) -> str:
        """`input (32,) int64, fp32 precision, causal-lm, padded`: what a profile's times
        hold for."""
        text = f"input {self.shape} {self.dtype}, {self.precision} precision, {self.task}"
        return text + (", padded" if self.padded else "")

    def flags(self, model_labels: int | None) -> str:
        """The `pipeplan profile` flags that time this input and head: ` --seq-len 16 --task
        classification --num-labels 5 --padding-mask --precision bf16`. --num-labels where
        the head is not the model's own `model_labels` classes (None: not known, so said)."""
        flags = f" --seq-len {self.shape[0]}" if self.dtype == "int64" else ""
        flags += f" --task {self.task}"
        if self.task == "classification" and self.num_labels != model_labels:
            flags += f" --num-labels {self.num_labels}"
        flags += " --padding-mask" if self.padded else ""
        return flags + (f" --precision {self.precision}" if self.precision != "fp32" else "")


def profile_command(model: str, flags: str = "", nproc: int = 1) -> str:
    """The `pipeplan profile` command a line suggests: it measures `model`, a MODEL argument
    as the run or user named it (a path is a folder by `config_path`'s rule, `./bert-tiny`
    too), with `flags` (the input and head a run feeds, `FedInput.flags`; `--device`), and,
    where `nproc` ranks share a node (2 or more), the links between them, which a profile
    without them prices on the defaults (`cluster.default_links`). Every such suggestion is
    built here, so that the refusals of one run suggest one command: found by the
    sixty-sixth round, a 2-rank run given another model's profile was told to profile
    without --nproc, and a 1-rank run without a profile to profile with --nproc 2.

        profile_command("gpt2/", " --seq-len 16 --task causal-lm", nproc=2)
        # "pipeplan profile gpt2/ --seq-len 16 --task causal-lm --out P.json --nproc 2"
    """
    links = f" --nproc {nproc}" if nproc >= 2 else ""
    # Quoted for a shell: a folder's name may hold spaces (the ninety-third round's
    # `pipeplan profile bert-large (synthetic) …` was a syntax error pasted).
    return f"pipeplan profile {shlex.quote(model)}{flags} --out P.json{links}"


# A head of other outputs than the profile's is priced as the profile's while the weights it
# adds or drops are at most this share of the model's: a 3-class fine-tune of a checkpoint
# profiled with its 2-class head (769 weights of BERT-base's 110 M) plans as that profile
# does, where refusing it would cost a profile run for nothing a plan can show.
HEAD_SHARE = 0.01


def input_mismatch(profile: Profile, fed: FedInput, named: str, feeds: str) -> str | None:
    """Why `profile` (as the line names it: `named`) does not time the input `fed` that a
    run (`feeds`: "this run", "the run runs/r") feeds, in one clause; None when it does. A
    longer sequence, padded text, another task or precision, or a head of other outputs (the
    data's labels: 10^6 of them were planned with a 2-label profile, its head's 66 parameters
    priced for 32 million, twenty-seventh round) would be planned or fitted with times and
    memory that do not hold for it; a head whose weights differ by at most HEAD_SHARE of the
    model's is priced as the profile's. The one check of `run` and `calibrate`: calibrate fitted
    a run of --seq-len 16 to a profile measured at 48 (the thirty-eighth round).

        input_mismatch(profile, fed, "p.json", "this run")
        # "p.json was measured for input (48,) int64, …, but this run feeds input (16,) …"
    """
    have = FedInput.of_profile(profile)
    if have.words() != fed.words():
        return f"{named} was measured for {have.words()}, but {feeds} feeds {fed.words()}"
    weights = sum(layer.params for layer in profile.layers)
    if have.num_labels != fed.num_labels and abs(fed.head_params - have.head_params) > (
        HEAD_SHARE * weights
    ):
        labels = "the data's labels" if fed.task == "classification" else "vocab_size"
        return (
            f"{named}: model.num_labels is {have.num_labels}, but {feeds} builds a head of "
            f"{fed.num_labels} outputs ({labels})"
        )
    return None


def model_labels(model: str) -> int | None:
    """The classes a classifier of `model` has unless told otherwise, as `pipeplan.models.
    config_labels` says them, read without building it (a built-in's preset, a folder's
    config.json); None when its folder cannot be read now."""
    path = config_path(model)
    if path is None:
        return label_count(PRESETS[model].config)
    try:
        return label_count(_read_model_config(path))
    except (InputFileError, OSError):
        return None


def _read_model_config(path: Path) -> dict[str, Any]:
    """A model's config.json read as `pipeplan.models` reads it (strict JSON, no key twice);
    InputFileError naming it otherwise."""
    text = read_input(path, MAX_CONFIG_BYTES, why=CONFIG_LIMIT)
    try:
        config = json_loads(text, object_pairs_hook=unique_keys)  # as `models` reads it
    except TooManyDigits as exc:
        raise InputFileError(f"{path}: {exc}") from None
    except (ValueError, RecursionError) as exc:
        raise InputFileError(f"{path}: not valid JSON ({str(exc).splitlines()[0]})") from None
    except MemoryError:
        raise InputFileError(out_of_memory(str(path), text)) from None
    if not isinstance(config, dict):
        raise InputFileError(f"{path}: not a JSON object")
    return config


def _built_config(family: str, config: dict[str, Any], path: Path) -> Any:
    """The config transformers builds of a folder's config.json (`transformers_config`),
    whose to_dict() is what a profile records of its model; InputFileError naming the file
    when the family's class refuses it (a run builds the model first: report and calibrate
    read the folder of a run that may have been edited since)."""
    try:
        return transformers_config(family, _without_type(config))
    except Exception as exc:  # transformers' strict fields raise their own error classes
        raise InputFileError(f"{path}: invalid {family} config ({reason(exc)})") from None


def _without_type(config: dict[str, Any]) -> dict[str, Any]:
    """A config's keys but model_type, which its class sets itself (`models._resolve`)."""
    return {key: value for key, value in config.items() if key != "model_type"}


def _differs(field: str, recorded: Any, given: str, path: Path, command: str) -> str:
    """The line of `model_mismatch` for the first field differing, with the `command` that
    profiles the folder (`profile_command`)."""
    return (
        f"profiles a model whose config field '{field}' is {recorded!r}, but {path} has "
        f"{given}; profile this model: {command}"
    )


def _spelling(model: str) -> str:
    """A name as given, or a path (one with a '/') resolved: `ckpt/` and its absolute path
    are one model."""
    if "/" not in model:
        return model
    path = Path(model)
    return str((path.parent if path.name == "config.json" else path).resolve())
