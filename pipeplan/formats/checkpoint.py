"""The checkpoint manifest: `checkpoints/step-N/manifest.json`, the position and freeze state a
checkpoint's tensors belong to (the tensors themselves: `executor.checkpoint`)."""

from __future__ import annotations

import itertools
import math
import sys
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, StringConstraints, model_validator

from pipeplan.errors import quoted
from pipeplan.formats.base import (
    FLOAT32_MAX,
    MAX_COUNT,
    MAX_EPOCHS,
    MAX_SAMPLES,
    MAX_STEPS,
    Bytes,
    NonNegFloat,
    PosBytes,
    PosInt,
    Sha256,
    Strict,
    Text,
    Versioned,
)
from pipeplan.formats.layout import Layout
from pipeplan.formats.run import DataFacts, DataFile, RunConfig

# A layer's index as a JSON key, written by `str(i)`: "01", " 1" or "-1" is not one (int()
# took "abc" inside a rank, and "-1" as the head).
LayerKey = Annotated[str, StringConstraints(pattern=r"^(0|[1-9][0-9]{0,6})$")]


def _not_subnormal(value: float) -> float:
    """`_not_subnormal(0.5)` → 0.5; ValueError for a subnormal (`5e-324`): no float32 gradient
    has one for its norm, and the gradient criterion divided by it (a rate of change of inf)."""
    if 0.0 < value < sys.float_info.min:
        raise ValueError(f"{value!r} is a subnormal number, not a measured gradient norm")
    return value


# A mean or a sum of gradient norms: finite (the loader refuses NaN and infinities), never
# negative (a negative one made the gradient criterion freeze layers it should have kept) and
# never subnormal.
Norm = Annotated[NonNegFloat, AfterValidator(_not_subnormal)]
Norms = dict[LayerKey, Norm]
Step = Annotated[int, Field(ge=0, le=MAX_STEPS)]


# The version of the cache description below (`executor.cache.ActivationCache.manifest`).
CACHE_MANIFEST_FORMAT = 2
# A cache row holds the frozen prefix's output in the run's precision's boundary dtype
# (`pipeplan.precision.BOUNDARY_DTYPE`, named as torch prints it), of this many bytes an element.
CACHE_DTYPE = {"fp32": "float32", "bf16": "bfloat16"}
ITEM_BYTES = {"float32": 4, "bfloat16": 2}
Samples = Annotated[int, Field(ge=0, le=MAX_SAMPLES)]


class CacheRows(Strict):
    """A span of a cache's rows and the file holding it: rows [first, stop)."""

    file: Text
    rows: tuple[Samples, Samples]


class MemoryRows(CacheRows):
    resident_bytes: Bytes


class SpillRows(CacheRows):
    bytes: Bytes


class CacheManifest(Strict):
    """Rank 0's node cache as a checkpoint describes it (`ActivationCache.manifest`): its
    version (the freeze point it caches), budget and fill, and, once a version exists, its
    rows' shape and where they live. Informational (a resume rebuilds the cache), but held to
    what the executor writes: it was a free-form dict, `{"bogus": 1}` accepted."""

    format: Literal[2]  # CACHE_MANIFEST_FORMAT
    frozen_layers: Annotated[int, Field(ge=0, le=MAX_COUNT)]
    num_samples: Samples
    budget_bytes: Bytes
    filled: Samples
    # The version's description: all of these, or none (a handle with no version yet).
    filled_in_memory: Samples | None = None
    filled_spilled: Samples | None = None
    sample_shape: tuple[PosInt, ...] | None = None
    dtype: Literal["float32", "bfloat16"] | None = None
    row_bytes: PosBytes | None = None
    memory: MemoryRows | None = None
    spill: SpillRows | None = None

    @model_validator(mode="after")
    def _as_written(self) -> CacheManifest:
        described = [getattr(self, name) for name in DESCRIPTION]
        if all(v is None for v in described):
            if self.filled:
                raise ValueError(f"filled {self.filled}, but no rows are described")
            return self
        if any(v is None for v in described):
            missing = next(n for n in DESCRIPTION if getattr(self, n) is None)
            raise ValueError(f"describes the cache's rows without {missing}")
        _check_rows(self)
        return self

    @property
    def memory_rows(self) -> int:
        """Rows kept in memory: as many as the budget holds, at most every sample's."""
        return min(self.num_samples, self.budget_bytes // self.row_bytes)


DESCRIPTION = (
    "filled_in_memory",
    "filled_spilled",
    "sample_shape",
    "dtype",
    "row_bytes",
    "memory",
    "spill",
)


def _check_rows(cache: CacheManifest) -> None:
    """A described cache's numbers as `ActivationCache` makes them: a row of the shape and
    dtype, the budget's rows in memory and the rest spilled, each filled row counted once."""
    row = math.prod(cache.sample_shape) * ITEM_BYTES[cache.dtype]
    if cache.row_bytes != row:
        raise ValueError(
            f"row_bytes {cache.row_bytes} is not a row of shape "
            f"{quoted(list(cache.sample_shape))} in {cache.dtype} ({row} bytes)"
        )
    split, total = cache.memory_rows, cache.num_samples
    if cache.memory.rows != (0, split) or cache.spill.rows != (split, total):
        raise ValueError(
            f"memory.rows {list(cache.memory.rows)} and spill.rows {list(cache.spill.rows)} "
            f"are not [0, {split}] and [{split}, {total}]: the budget of {cache.budget_bytes} "
            f"bytes holds {split} of the {total} rows of {row} bytes"
        )
    if cache.filled_in_memory + cache.filled_spilled != cache.filled or not (
        cache.filled_in_memory <= split and cache.filled_spilled <= total - split
    ):
        raise ValueError(
            f"filled {cache.filled}, filled_in_memory {cache.filled_in_memory} and "
            f"filled_spilled {cache.filled_spilled} do not count the filled rows of "
            f"{split} in memory and {total - split} spilled"
        )


class CheckpointManifest(Versioned):
    schema_version: Literal[1] = 1
    step: Step = Field(description="Global steps completed.")
    epoch: Annotated[int, Field(ge=0, le=MAX_EPOCHS)]
    step_in_epoch: Step
    phase: Step = Field(description="The phase the checkpoint was taken in (run.jsonl's).")
    frozen_layers: Annotated[int, Field(ge=0, le=MAX_COUNT)]
    grad_history: list[Norms] = Field(
        description="Per `auto` freeze decision, the mean gradient norm of each layer since the "
        "one before (one for each decision the run has made at most; checked on resume)."
    )
    # Absent (None) in a manifest written before the field: every phase run.jsonl records as
    # resumed at an epoch's start was a resume of a finished run then, since no periodic
    # checkpoint was written at an epoch's end (`executor.history.run_ends`).
    run_ends: list[Step] | None = Field(
        None,
        description="The steps, before this checkpoint's, where a run ended with its final "
        "checkpoint (at an epoch's start) and a --resume with more epochs continued: no freeze "
        "decision was made at those epochs' ends. Ascending, distinct.",
    )
    grad_norm_sums: Norms = Field(description="Gradient norms summed since the last decision.")
    grad_norm_steps: Step = Field(description="The steps summed in grad_norm_sums.")
    world_size: Annotated[int, Field(ge=1, le=MAX_COUNT)]
    model: Text = Field(description="The model trained: run.json's `model`.")
    layout: Layout | None = Field(
        None,
        description="The layout the checkpoint was taken in: a resume on the same world size "
        "weighs moving from it, as the uninterrupted run did.",
    )
    # Informational: a resume rebuilds the cache and never reads this.
    cache: CacheManifest | None = Field(
        None,
        description="Rank 0's node cache of the frozen prefix when the layout is cached "
        "(rebuilt on resume); null otherwise.",
    )
    # Required: a manifest without it switched the check off, and resume, export and report
    # took an edited lr or seed as the run's. No older schema_version is read (`parse` takes
    # exactly this one), so no manifest reaches a run unchecked: one written before this field
    # existed (schema_version 1 too) is refused naming it, since what it trained under is
    # unknown; the run's records cannot say it (run.json is what may have been edited).
    config: RunConfig = Field(
        description="The configuration the checkpoint was trained under (run.json then): a "
        "resume refuses a run.json that differs from it but where --resume may change it "
        "(executor.checkpoint.RESUMABLE).",
    )
    files: dict[Text, Sha256] = Field(
        default_factory=dict,
        description="sha256 of each tensor file, verified before a resume trusts it.",
    )
    # Absent (None) in a manifest written before the field. A file of another size is
    # refused before it is hashed: a sparse 20 GiB model.pt took 88 s to hash, a terabyte
    # hours, before its checksum failed (the fifty-first round).
    sizes: dict[Text, Bytes] | None = Field(
        None, description="Bytes of each tensor file, compared before it is hashed."
    )
    # Absent (None) in a manifest written before the field, and for data that reads no file
    # (no data.json). data.json alone was trusted: a helper module's entry deleted from it by
    # hand, the helper edited, resumed with exit 0 on the edited data (thirty-first round).
    data: list[DataFile] | None = Field(
        None,
        description="The files the run's data.json listed when the checkpoint was taken (the "
        "modules the ranks had found included): a resume or an export refuses a data.json "
        "that lacks one of them or lists it with another sha256 (`executor.task."
        "check_data_kept`).",
    )
    # Absent (None) in a manifest written before the field, for built-in data (no data.json)
    # and for a run prepared before data.json recorded its facts. data.json alone was trusted:
    # its `facts` deleted by hand, a resume or an export took data of another size without a
    # word (the fifty-seventh round).
    data_facts: DataFacts | None = Field(
        None,
        description="data.json's `facts` when the checkpoint was taken: a resume or an export "
        "refuses a data.json without them or with others (`executor.task.check_data_kept`).",
    )

    @model_validator(mode="after")
    def _agree(self) -> CheckpointManifest:
        # The ranks that took it are its configuration's: nproc 3 beside world_size 2 was
        # exported, reported and resumed from (the fifty-ninth round).
        if self.config.nproc != self.world_size:
            raise ValueError(
                f"config.nproc {self.config.nproc}, but world_size {self.world_size}: a "
                "checkpoint is taken by its configuration's ranks"
            )
        # A position inside its own count: a step within the epoch is among the steps done.
        if self.step_in_epoch > self.step or self.grad_norm_steps > self.step_in_epoch:
            raise ValueError(
                f"step_in_epoch {self.step_in_epoch} and grad_norm_steps "
                f"{self.grad_norm_steps} must each be at most the one before (step {self.step})"
            )
        # Sums are of the steps counted: none counted, nothing summed.
        if self.grad_norm_sums and not self.grad_norm_steps:
            raise ValueError(
                f"grad_norm_sums holds {len(self.grad_norm_sums)} layer(s), but grad_norm_steps "
                "is 0"
            )
        # And steps counted were summed: the head is never frozen, so a sum holds it at least
        # (an emptied one resumed as zero norms, divided by the steps: twenty-third round).
        if self.grad_norm_steps and not self.grad_norm_sums:
            raise ValueError(
                f"grad_norm_sums is empty, but grad_norm_steps is {self.grad_norm_steps} (each "
                "step measures every active layer)"
            )
        # A mean norm past float32's largest (the fifty-eighth round: 1.5e308 of every layer
        # resumed, and --freeze auto decided by it).
        bound = self.grad_norm_steps * FLOAT32_MAX
        big = next(((k, v) for k, v in self.grad_norm_sums.items() if v > bound), None)
        if big is not None:
            raise ValueError(
                f"grad_norm_sums[{big[0]}] is {big[1]:.6g}, over grad_norm_steps "
                f"{self.grad_norm_steps} step(s) of norms at most float32's largest "
                f"({FLOAT32_MAX:.6g}) each"
            )
        _check_norm_steps(self)
        # A resume takes frozen_layers: one that contradicts the layout it was taken in
        # unfroze layers whose optimizer state had been dropped.
        if self.layout is not None and self.layout.frozen_layers != self.frozen_layers:
            raise ValueError(
                f"frozen_layers {self.frozen_layers} disagrees with the layout's "
                f"{self.layout.frozen_layers}"
            )
        if self.cache is not None:
            _check_cache(self.cache, self.layout, self.config)
        if self.run_ends:
            _check_run_ends(self)
        return self


def _check_norm_steps(manifest: CheckpointManifest) -> None:
    """grad_norm_steps counts the steps since the gradient sums last restarted, as the run
    writes it: they restart at every epoch's end and, with --freeze-every N (its config's),
    after every N-th step of the run, where `--freeze auto` decides. So a checkpoint at step
    6, 2 steps into its epoch, holds 2 steps (with N = 3: 0, the decision at step 6). One
    step fewer was resumed as the same sums over fewer steps: the epoch recorded other
    gradient norms than the uninterrupted run, and `--freeze auto` decided by them
    (twenty-sixth round).

        _check_norm_steps(manifest)   # ValueError: grad_norm_steps 1, but …
    """
    step, started = manifest.step, manifest.step - manifest.step_in_epoch
    every = manifest.config.freeze_every
    restarted = max(started, step - step % every) if every else started
    summed = step - restarted
    if manifest.grad_norm_steps != summed:
        since = f"its epoch's start (step {started})"
        if restarted != started:
            since = f"the --freeze-every {every} decision at step {restarted}"
        raise ValueError(
            f"grad_norm_steps {manifest.grad_norm_steps}, but step {step} is {summed} "
            f"step{'s' * (summed != 1)} after {since}, where the run's gradient sums restart "
            f"(step_in_epoch {manifest.step_in_epoch}); the run writes {summed}"
        )


def _check_run_ends(manifest: CheckpointManifest) -> None:
    """`run_ends` lists epochs' starts before the checkpoint, each once and in order: a run
    ends only at an epoch's start (its final checkpoint), and only an epoch that has ended
    (none in epoch 0) can have.

        _check_run_ends(manifest)  # run_ends [4] at step 6 of 2 steps an epoch: accepted
    """
    ends, step, epoch = manifest.run_ends, manifest.step, manifest.epoch
    if any(b <= a for a, b in itertools.pairwise(ends)):
        raise ValueError(f"run_ends {ends} is not ascending and distinct")
    if epoch == 0 or ends[-1] >= step:
        raise ValueError(
            f"run_ends {ends}: step {ends[-1]} is not before the checkpoint's step {step} in an "
            f"epoch after the first (epoch {epoch}); a resume continues from a run's end"
        )
    started = step - manifest.step_in_epoch  # the checkpoint's epoch's first step
    per_epoch, rest = divmod(started, epoch)
    if rest or not per_epoch:  # no position of any run: `check_position` names step
        return
    odd = next((e for e in ends if e == 0 or e % per_epoch), None)
    if odd is not None:
        raise ValueError(
            f"run_ends {ends}: step {odd} is not an epoch's end ({per_epoch} steps an epoch: "
            f"epoch {epoch} starts at step {started})"
        )


def _check_cache(cache: CacheManifest, layout: Layout | None, config: RunConfig) -> None:
    """A checkpoint's cache is of the layout it was taken in: only a cached one has a cache
    (the executor drops it otherwise), of that layout's freeze point, the run's budget and,
    once described, its precision's dtype."""
    if layout is None or not layout.cached:
        raise ValueError(
            "cache describes a cache, but the layout is not cached (a phase that reads no "
            "cache has none: null)"
        )
    if cache.frozen_layers != layout.frozen_layers:
        raise ValueError(
            f"cache.frozen_layers {cache.frozen_layers} disagrees with the layout's "
            f"{layout.frozen_layers}"
        )
    if cache.budget_bytes != config.cache_budget_bytes:
        raise ValueError(
            f"cache.budget_bytes {cache.budget_bytes} disagrees with config.cache_budget_bytes "
            f"{config.cache_budget_bytes}"
        )
    if cache.dtype is not None and cache.dtype != CACHE_DTYPE[config.precision]:
        raise ValueError(
            f"cache.dtype {cache.dtype} is not the {config.precision} run's "
            f"{CACHE_DTYPE[config.precision]}"
        )
