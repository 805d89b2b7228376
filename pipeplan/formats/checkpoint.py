"""The checkpoint manifest: `checkpoints/step-N/manifest.json`, the position and freeze state a
checkpoint's tensors belong to (the tensors themselves: `executor.checkpoint`)."""

from __future__ import annotations

import sys
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, StringConstraints, model_validator

from pipeplan.formats.base import (
    MAX_COUNT,
    MAX_EPOCHS,
    MAX_STEPS,
    NonNegFloat,
    Sha256,
    Strict,
    Text,
)
from pipeplan.formats.layout import Layout
from pipeplan.formats.run import RunConfig

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


class CheckpointManifest(Strict):
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
    cache: dict | None = Field(None, description="Stage-0 cache manifest (rebuilt on resume).")
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

    @model_validator(mode="after")
    def _agree(self) -> CheckpointManifest:
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
        # A resume takes frozen_layers: one that contradicts the layout it was taken in
        # unfroze layers whose optimizer state had been dropped.
        if self.layout is not None and self.layout.frozen_layers != self.frozen_layers:
            raise ValueError(
                f"frozen_layers {self.frozen_layers} disagrees with the layout's "
                f"{self.layout.frozen_layers}"
            )
        return self
