"""File formats: pydantic models for everything pipeplan reads or writes.

Every top-level format carries `schema_version`; loaders reject other versions, unknown fields
and non-finite numbers with a message that names the offending field. `json_schema(name)`
gives the JSON Schema the CLI prints with `pipeplan schema NAME`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from pipeplan.errors import InputFileError, PipeplanError

NonNegFloat = Annotated[float, Field(ge=0.0)]
PosFloat = Annotated[float, Field(gt=0.0)]
NonNegInt = Annotated[int, Field(ge=0)]
PosInt = Annotated[int, Field(ge=1)]


class Strict(BaseModel):
    """Base for every format: unknown fields and NaN/inf are errors, not silently kept."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=False)


# --------------------------------------------------------------------------- profile


class ModelInfo(Strict):
    name: str = Field(description="Built-in name or the config path the model was built from.")
    family: Literal["bert", "roberta", "vit"]
    config: dict[str, Any] = Field(description="The exact transformers config (to_dict()).")
    input_shape: list[PosInt] = Field(description="Shape of one sample's input, without batch.")
    input_dtype: Literal["int64", "float32"]
    num_labels: PosInt
    dtype: Literal["float32"] = "float32"


class DeviceInfo(Strict):
    kind: Literal["cpu", "cuda"]
    name: str
    memory_bytes: NonNegInt = Field(description="Total device memory (host RAM for CPU).")
    threads: PosInt = Field(description="torch intra-op threads the layers were timed with.")
    count: PosInt = Field(1, description="Devices of this kind on the profiled host.")
    torch_version: str
    transformers_version: str
    python_version: str
    hostname: str


class MicroBatchTiming(Strict):
    """One layer at one micro-batch size. Times are medians over repeats; spreads are the
    interquartile range of the same repeats."""

    micro_batch: PosInt
    feasible: bool = Field(True, description="False when this size ran out of memory.")
    fwd_s: NonNegFloat | None = None
    fwd_spread_s: NonNegFloat | None = None
    bwd_s: NonNegFloat | None = None
    bwd_spread_s: NonNegFloat | None = None
    fwd_nograd_s: NonNegFloat | None = None
    fwd_nograd_spread_s: NonNegFloat | None = None
    peak_mem_bytes: NonNegInt | None = Field(
        None, description="CUDA only: max_memory_allocated during forward+backward."
    )
    error: str | None = Field(None, description="Why the size is infeasible.")

    @model_validator(mode="after")
    def _times_present_when_feasible(self) -> MicroBatchTiming:
        if self.feasible and None in (self.fwd_s, self.bwd_s, self.fwd_nograd_s):
            raise ValueError("a feasible timing needs fwd_s, bwd_s and fwd_nograd_s")
        return self


class LayerProfile(Strict):
    index: NonNegInt
    name: str
    kind: Literal["embeddings", "block", "head"]
    params: NonNegInt
    param_bytes: NonNegInt
    out_bytes_per_sample: NonNegInt = Field(description="Bytes of the layer's output per sample.")
    saved_bytes_per_sample: NonNegFloat = Field(
        description="Activation bytes autograd saves for backward, per sample (parameters "
        "excluded; slope over micro-batch sizes)."
    )
    saved_bytes_fixed: NonNegFloat = Field(
        0.0, description="Saved bytes that do not grow with the micro-batch (intercept)."
    )
    timings: list[MicroBatchTiming]

    @model_validator(mode="after")
    def _sizes_unique_sorted(self) -> LayerProfile:
        sizes = [t.micro_batch for t in self.timings]
        if sizes != sorted(set(sizes)):
            raise ValueError("timings must have distinct micro_batch sizes in increasing order")
        return self


class LinkSample(Strict):
    bytes: PosInt
    time_s: NonNegFloat
    spread_s: NonNegFloat


class LinkFit(Strict):
    """t = latency_s + bytes / bandwidth_bytes_per_s for point-to-point. For all-reduce the
    fit is in ring terms: t = 2(N-1)·latency_s + 2(N-1)/N · bytes / bandwidth_bytes_per_s."""

    latency_s: NonNegFloat
    bandwidth_bytes_per_s: PosFloat
    samples: list[LinkSample]


class CommProfile(Strict):
    backend: Literal["gloo", "nccl"]
    nproc: Annotated[int, Field(ge=2)]
    p2p: LinkFit
    allreduce: LinkFit


class FittedLink(Strict):
    latency_s: NonNegFloat
    bandwidth_bytes_per_s: PosFloat


class Calibration(Strict):
    """Corrections fitted from measured runs (`pipeplan calibrate`); the cost model applies
    them on top of the profile's measurements."""

    fwd_scale: PosFloat = 1.0
    bwd_scale: PosFloat = 1.0
    nograd_scale: PosFloat = 1.0
    allreduce: FittedLink | None = Field(None, description="Ring terms, as in comm.allreduce.")
    p2p: FittedLink | None = Field(
        None, description="Stage-to-stage transfers inside a node, as the pipeline sees them."
    )
    optimizer_s_per_byte: NonNegFloat | None = None
    micro_batch_overhead_s: NonNegFloat = Field(
        0.0, description="Per micro-batch and stage: the schedule's own work around each chunk."
    )
    step_overhead_s: float = Field(0.0, description="Per step, outside the simulated schedule.")
    input_s_per_sample: NonNegFloat = Field(
        0.0, description="Reading a replica's batch (or its cached activations), per sample."
    )
    runs: list[str] = Field(description="Run directories the fit used.")
    phases_used: NonNegInt
    steps_used: NonNegInt
    residual_median: NonNegFloat = Field(description="Median |relative error| of fitted steps.")
    residual_max: NonNegFloat


class ProfileSettings(Strict):
    micro_batches: list[PosInt]
    warmup: NonNegInt
    repeats: PosInt
    seed: int


class Profile(Strict):
    schema_version: Literal[1] = 1
    created_at: str
    model: ModelInfo
    device: DeviceInfo
    settings: ProfileSettings
    layers: list[LayerProfile]
    comm: CommProfile | None = None
    calibration: Calibration | None = None

    @model_validator(mode="after")
    def _layers_indexed_in_order(self) -> Profile:
        if [layer.index for layer in self.layers] != list(range(len(self.layers))):
            raise ValueError("layers must be indexed 0..n+1 in order")
        if len(self.layers) < 3:
            raise ValueError("a profile needs embeddings, at least one block and a head")
        return self


# --------------------------------------------------------------------------- loading

# pipeplan.cluster, .plan, .records and .report add their formats when imported (_all_schemas).
SCHEMAS: dict[str, type[BaseModel]] = {"profile": Profile}

M = TypeVar("M", bound=BaseModel)


def _all_schemas() -> dict[str, type[BaseModel]]:
    # Imported here, not at the top: those modules import this one.
    import pipeplan.cluster
    import pipeplan.plan
    import pipeplan.records
    import pipeplan.report  # noqa: F401

    return SCHEMAS


def json_schema(name: str) -> dict[str, Any]:
    if name not in _all_schemas():
        raise PipeplanError(f"unknown schema '{name}'; known: {', '.join(sorted(SCHEMAS))}")
    return SCHEMAS[name].model_json_schema()


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err["loc"]) or "(top level)"
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return f"field '{where}': {err['msg']}{more}"


def _reject_constant(token: str) -> float:
    raise ValueError(f"{token} is not valid JSON")


def parse(model: type[M], text: str, source: str = "input") -> M:
    """Parse JSON text into `model`, raising InputFileError with one line on any problem."""
    kind = model.__name__.lower()
    try:
        data = json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:
        raise InputFileError(f"{source}: not valid JSON ({str(exc).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise InputFileError(f"{source}: expected a JSON object for a {kind}")
    version = data.get("schema_version")
    if version != 1:
        raise InputFileError(
            f"{source}: {kind} schema_version {version!r} is not supported (this pipeplan reads 1)"
        )
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise InputFileError(f"{source}: invalid {kind}: {_first_error(exc)}") from None
    except RecursionError:
        raise InputFileError(f"{source}: {kind} is nested too deeply") from None


def load(model: type[M], path: str | Path) -> M:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputFileError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputFileError(f"{path}: cannot read ({exc.__class__.__name__}: {exc})") from None
    return parse(model, text, str(path))


def dumps(obj: BaseModel) -> str:
    """Canonical JSON: field order from the model, two-space indent, trailing newline."""
    try:
        return json.dumps(obj.model_dump(mode="json"), indent=2, allow_nan=False) + "\n"
    except ValueError as exc:
        raise PipeplanError(f"refusing to write a {type(obj).__name__.lower()}: {exc}") from None
