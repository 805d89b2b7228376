"""The checkpoint manifest: `checkpoints/step-N/manifest.json`, the position and freeze state a
checkpoint's tensors belong to (the tensors themselves: `executor.checkpoint`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from pipeplan.formats.base import NonNegInt, PosInt, Strict
from pipeplan.formats.layout import Layout


class CheckpointManifest(Strict):
    schema_version: Literal[1] = 1
    step: NonNegInt = Field(description="Global steps completed.")
    epoch: NonNegInt
    step_in_epoch: NonNegInt
    phase: NonNegInt
    frozen_layers: NonNegInt
    grad_history: list[dict[str, float]]
    grad_norm_sums: dict[str, float] = Field(description="Gradient norms summed this epoch.")
    grad_norm_steps: NonNegInt
    world_size: PosInt
    model: str
    layout: Layout | None = Field(
        None,
        description="The layout the checkpoint was taken in: a resume on the same world size "
        "weighs moving from it, as the uninterrupted run did.",
    )
    cache: dict | None = Field(None, description="Stage-0 cache manifest (rebuilt on resume).")
    files: dict[str, str] = Field(
        default_factory=dict,
        description="sha256 of each tensor file, verified before a resume trusts it.",
    )

    @model_validator(mode="after")
    def _agree(self) -> CheckpointManifest:
        # A resume takes frozen_layers: one that contradicts the layout it was taken in
        # unfroze layers whose optimizer state had been dropped.
        if self.layout is not None and self.layout.frozen_layers != self.frozen_layers:
            raise ValueError(
                f"frozen_layers {self.frozen_layers} disagrees with the layout's "
                f"{self.layout.frozen_layers}"
            )
        return self
