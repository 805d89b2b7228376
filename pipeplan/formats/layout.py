"""The one layout type: where and how one phase of training runs.

    layout = Layout(frozen_layers=2, cached=True, micro_batches=4, micro_batch_size=8,
                    schedule="1f1b", boundaries=(0, 5, 14), rank_map=((0, 1), (2, 3)))
    layout.num_stages, layout.replicas   # 2, 2 (derived, never stored twice)
    layout.check(num_layers=14, world_size=4)   # the one validity check
    layout.label()                              # '2x2 M=4 1f1b cached'
    # with 3 frozen layers and boundaries (0, 2, 5, 14): '3x1 M=4 gpipe (1 forward-only)'

The solver returns it, the plan file and the run records store it, the executor runs it and
the report reads it. Every layout the planner emits passes `check`, and the executor applies
the same `check` before running one, so a written plan always runs.
"""

from __future__ import annotations

import itertools
import weakref
from typing import Annotated, Literal

from pydantic import AfterValidator, ConfigDict

from pipeplan.errors import BadArgumentError, quoted
from pipeplan.formats.base import NonNegInt, PosInt, Strict

Schedule = Literal["gpipe", "1f1b"]
SCHEDULES: tuple[Schedule, ...] = ("gpipe", "1f1b")


def check_boundaries(b: tuple[int, ...], num_layers: int) -> None:
    """`check_boundaries((0, 3, 10), 10)`: stage boundaries that split `num_layers` layers into
    stages of at least one layer each; BadArgumentError (one line) otherwise."""
    if len(b) < 2 or b[0] != 0 or b[-1] != num_layers:
        raise BadArgumentError(
            f"boundaries {quoted(list(b))} must start at 0 and end at {num_layers} (the layer "
            "count)"
        )
    if any(x >= y for x, y in itertools.pairwise(b)):
        raise BadArgumentError(f"boundaries {quoted(list(b))} must be strictly increasing")


def _split_layers(b: tuple[int, ...]) -> tuple[int, ...]:
    """A layout's boundaries as such, whatever the layer count (`check_boundaries` holds them
    to it where it is known): at least two entries, from 0, strictly increasing. Checked on
    every Layout read or built, so that no check using `num_stages` runs on boundaries that
    split nothing. Found by the thirty-fourth round: a plan's phase with boundaries [] or [8]
    was refused for '1 predicted stages for a -1-stage layout', not for its boundaries."""
    if len(b) < 2 or b[0] != 0:
        raise ValueError(
            f"{quoted(list(b))} must start at 0 and end at the layer count (at least 2 entries: "
            "stage s holds layers boundaries[s] up to boundaries[s+1])"
        )
    if any(x >= y for x, y in itertools.pairwise(b)):
        raise ValueError(
            f"{quoted(list(b))} must be strictly increasing (every stage holds a layer)"
        )
    return b


def _some_replica(rank_map: tuple[tuple[int, ...], ...]) -> tuple[tuple[int, ...], ...]:
    """A rank map of at least one replica (`replicas`, and so `global_batch`, count its rows):
    `check_placement` holds each row to the stage count."""
    if not rank_map:
        raise ValueError("[] places no replica: give one row of ranks per replica")
    return rank_map


def check_rank_order(rank_map: tuple[tuple[int, ...], ...]) -> None:
    """`check_rank_order(((0, 1), (2, 3)))`: every replica's stages run on increasing ranks;
    BadArgumentError naming the rank map otherwise. The executor's pipeline group of a replica
    numbers its members by global rank (torch.distributed.new_group sorts them), and a stage's
    index in the schedule is its rank in that group: a row (1, 0) would run stage 1 first."""
    for replica, row in enumerate(rank_map):
        if list(row) != sorted(row):
            raise BadArgumentError(
                f"rank_map {quoted([list(r) for r in rank_map])}: replica {replica}'s stages are "
                f"on ranks {quoted(list(row))}, but a replica's stages run on increasing ranks "
                "(its pipeline group numbers them in rank order)"
            )


# What is known to hold of each rank map (by identity) a live layout holds: ("order",) and
# (stages, world size) of `check_placement`. A preview on 2^20 devices checked 59 distinct
# maps, 1,100 objects, 15,000 times: a third of its time (the eighty-fourth round). Kept
# through a weak reference to the layout: nothing is held alive, and a map's id is its own
# while the layout lives.
_RANK_MAP_FACTS: dict[int, tuple[weakref.ref, set[tuple]]] = {}


def _known(layout: Layout, fact: tuple) -> bool:
    held = _RANK_MAP_FACTS.get(id(layout.rank_map))
    if held is None:
        return False
    owner = held[0]()
    return owner is not None and owner.rank_map is layout.rank_map and fact in held[1]


def _learnt(layout: Layout, fact: tuple) -> None:
    key = id(layout.rank_map)
    held = _RANK_MAP_FACTS.get(key)
    owner = held[0]() if held is not None else None
    if held is None or owner is None or owner.rank_map is not layout.rank_map:

        def gone(ref: weakref.ref, key: int = key) -> None:
            if _RANK_MAP_FACTS.get(key, (None,))[0] is ref:
                del _RANK_MAP_FACTS[key]

        held = (weakref.ref(layout, gone), set())
        _RANK_MAP_FACTS[key] = held
    held[1].add(fact)


class Layout(Strict):
    """One phase: the freeze point, whether the frozen prefix is read from the cache, S stages
    (boundaries 0 = b0 < … < bS = layers) × D replicas (rank_map[replica][stage] → global
    rank), M micro-batches of m samples each per replica and step, and the schedule."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=True)

    frozen_layers: NonNegInt
    cached: bool
    micro_batches: PosInt
    micro_batch_size: PosInt
    schedule: Schedule
    boundaries: Annotated[tuple[NonNegInt, ...], AfterValidator(_split_layers)]
    rank_map: Annotated[tuple[tuple[NonNegInt, ...], ...], AfterValidator(_some_replica)]

    @property
    def num_stages(self) -> int:
        return len(self.boundaries) - 1

    @property
    def replicas(self) -> int:
        return len(self.rank_map)

    @property
    def global_batch(self) -> int:
        return self.replicas * self.micro_batches * self.micro_batch_size

    def stage_of_layer(self, layer: int) -> int:
        return next(s for s in range(self.num_stages) if layer < self.boundaries[s + 1])

    def stage_layers(self, stage: int) -> range:
        return range(self.boundaries[stage], self.boundaries[stage + 1])

    def check_placement(self, num_layers: int, world_size: int) -> None:
        """Raise BadArgumentError (one line) unless the boundaries split `num_layers` layers
        and the rank map places every stage of every replica on a distinct rank of
        `world_size`: what the cost model needs to price the layout."""
        check_boundaries(self.boundaries, num_layers)
        S = self.num_stages
        if self.frozen_layers > num_layers - 1:
            raise BadArgumentError(
                f"{self.frozen_layers} frozen layers of {num_layers} (the head is never frozen)"
            )
        if _known(self, (S, world_size)):
            return
        if self.replicas < 1 or set(map(len, self.rank_map)) != {S}:
            raise BadArgumentError(
                f"rank map {[list(r) for r in self.rank_map]} needs one row of {S} ranks per "
                "replica"
            )
        # In C, not a loop of Python per rank: a plan on 2,048 ranks checked its moves'
        # layouts 100,000 times (the eightieth round).
        ranks = list(itertools.chain.from_iterable(self.rank_map))
        if len(set(ranks)) != len(ranks) or min(ranks) < 0 or max(ranks) >= world_size:
            raise BadArgumentError(
                f"rank map {[list(r) for r in self.rank_map]} must use distinct ranks of "
                f"0..{world_size - 1}"
            )
        _learnt(self, (S, world_size))

    @property
    def forward_only_stages(self) -> int:
        """k: the leading stages whose layers are all frozen. They run forward only (no
        autograd, no optimizer, no all-reduce) and feed stage k, the first stage that trains;
        stages k..S-1 are the pipeline the schedule runs. `(0, 4, 10)` with 5 frozen
        layers → 1 (stage 1 starts with the last frozen layer); cached layouts have 0."""
        return sum(1 for stop in self.boundaries[1:] if stop <= self.frozen_layers)

    def check(self, num_layers: int, world_size: int) -> None:
        """The one check of a layout the planner emits and the executor runs: a valid
        placement, and what the executor's pipeline needs. BadArgumentError otherwise."""
        self.check_placement(num_layers, world_size)
        if not _known(self, ("order",)):
            check_rank_order(self.rank_map)
            _learnt(self, ("order",))
        b, S = self.boundaries, self.num_stages
        if self.cached and self.frozen_layers == 0:
            raise BadArgumentError("a cached layout needs a frozen prefix to cache")
        if self.cached and b[1] <= self.frozen_layers:
            # Stage 0 reads the cache instead of running the frozen prefix: with every layer
            # of it frozen it would have nothing left to run.
            raise BadArgumentError(
                f"a cached layout's stage 0 must hold a layer that trains, but its "
                f"{self.frozen_layers} frozen layers cover stage 0 (boundaries {quoted(list(b))})"
            )
        active = S - self.forward_only_stages
        if self.schedule == "1f1b" and self.micro_batches < active:
            # torch.distributed.pipelining's Schedule1F1B refuses fewer micro-batches than
            # stages; it runs only the stages that train (forward-only stages feed it), and
            # GPipe runs any count (later stages start later, nothing else changes).
            raise BadArgumentError(
                f"{self.micro_batches} micro-batches for {active} stages that train: 1F1B "
                "needs at least one micro-batch per such stage (GPipe does not)"
            )

    def label(self) -> str:
        """The one text form of a layout, as tables, progress bars and summaries show it."""
        cached = " cached" if self.cached else ""
        k = self.forward_only_stages
        fed = f" ({k} forward-only)" if k else ""  # the leading stages that hold only frozen layers
        shape = f"{self.num_stages}x{self.replicas} M={self.micro_batches}"
        return f"{shape} {self.schedule}{cached}{fed}"


class EpochShape(Strict):
    """Base of the per-epoch rows (preview and report): the epoch's layout, and the three
    numbers the per-epoch chart (`pipeplan.plots.plot_epochs`) reads from it."""

    layout: Layout

    @property
    def stages(self) -> int:
        return self.layout.num_stages

    @property
    def replicas(self) -> int:
        return self.layout.replicas

    @property
    def frozen_layers(self) -> int:
        return self.layout.frozen_layers
