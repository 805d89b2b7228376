"""Planner inputs from command-line flags: profile, cluster, training shape, freeze, pins.

`plan` and `preview` take the same flags; this module turns them into the arguments of
`make_plan` / `make_preview`, checking each one with a message that names the flag.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pipeplan.cluster import cluster_from_flags
from pipeplan.errors import BadArgumentError
from pipeplan.formats import Cluster, FreezeSchedule, Profile, load
from pipeplan.freeze import schedule_from_flags
from pipeplan.solver import Pins

DEFAULT_ALPHA = 0.3


@dataclass
class PlanRequest:
    profile: Profile
    cluster: Cluster
    global_batch: int
    samples: int
    epochs: int
    freeze: FreezeSchedule
    cache: bool
    pins: Pins

    def kwargs(self) -> dict[str, Any]:
        return dict(
            global_batch=self.global_batch,
            samples=self.samples,
            epochs=self.epochs,
            freeze=self.freeze,
            cache=self.cache,
            pins=self.pins,
        )


def request_from_flags(
    *,
    profile: str,
    cluster: str | None,
    nodes: int | None,
    devices_per_node: int | None,
    device_memory: str | None,
    intra_bw: str | None,
    inter_bw: str | None,
    global_batch: int,
    samples: int,
    epochs: int,
    alpha: float | None,
    freeze_schedule: str | None,
    cache: bool,
    stages: int | None,
    micro_batches: int | None,
    schedule: str | None,
    boundaries: str | None,
) -> PlanRequest:
    prof = load(Profile, profile)
    if cluster is not None:
        given = [
            f
            for f, v in (
                ("--nodes", nodes),
                ("--devices-per-node", devices_per_node),
                ("--device-memory", device_memory),
                ("--intra-bw", intra_bw),
                ("--inter-bw", inter_bw),
            )
            if v is not None
        ]
        if given:
            raise BadArgumentError(f"give --cluster or {given[0]}, not both")
        clus = load(Cluster, cluster)
    else:
        clus = cluster_from_flags(
            nodes=1 if nodes is None else nodes,
            devices_per_node=1 if devices_per_node is None else devices_per_node,
            device_memory=device_memory,
            intra_bw=intra_bw,
            inter_bw=inter_bw,
            profile=prof,
        )
    if alpha is None and freeze_schedule is None:
        alpha = DEFAULT_ALPHA
    freeze = schedule_from_flags(alpha, freeze_schedule, epochs, len(prof.layers) - 2)
    if schedule is not None and schedule not in ("gpipe", "1f1b"):
        raise BadArgumentError(f"--schedule must be gpipe or 1f1b, not '{schedule}'")
    pins = Pins(
        num_stages=stages,
        micro_batches=micro_batches,
        schedule=schedule,
        boundaries=_parse_boundaries(boundaries) if boundaries else None,
    )
    return PlanRequest(prof, clus, global_batch, samples, epochs, freeze, cache, pins)


def _parse_boundaries(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in text.split(","))
    except ValueError:
        raise BadArgumentError(
            f"--boundaries must be comma-separated layer indices like 0,5,14, not '{text}'"
        ) from None
