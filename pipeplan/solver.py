"""The search for the best layout of one phase: stages S, replicas D, micro-batches M, schedule,
boundaries and rank map (docs/architecture.md §4.10, bounds §4.8).

    solution = solve_phase(CostModel(profile, cluster), global_batch=64, frozen_layers=3)
    solution.best.layout, solution.best.step_s, solution.proven

The search is exact over its space (every S ≤ N, D = 1..⌊N/S⌋ dividing the batch, M dividing
B/D with m ≤ m_max, both schedules (1F1B only when M ≥ the stages that train), every
contiguous partition that fits memory; an uncached phase's frozen prefix may span leading
forward-only stages (a long model's only when no stage 0 holds it), a cached one's stays in
stage 0): branch and bound with
lower bounds that never exceed the simulated step, so a layout is only left unsimulated when
something already simulated is at least as fast. Also the partition baselines the solver is
compared against: equal layer counts, greedy balance by parameters, and by time
(torchgpipe's `balance_by_time` style).
"""

from __future__ import annotations

import functools
import heapq
import itertools
import logging
import math
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

import numpy as np

from pipeplan.costmodel import (
    KEPT_RANK_CELLS,
    MAP,
    PACKED,
    BoundedCache,
    CostModel,
    Evaluation,
    PhaseCosts,
    alike_key,
    counted_keys,
    placement_family,
    placement_index,
    placement_name,
    rank_cells,
    slowest_link,
)
from pipeplan.errors import BadArgumentError, PipeplanError
from pipeplan.formats import SCHEDULES, Layout, Link, Schedule
from pipeplan.formats.base import MAX_MICRO_BATCHES
from pipeplan.formats.layout import check_boundaries
from pipeplan.partition import (
    DENSE_MAX_LAYERS,
    Node,
    PartitionProblem,
    PartitionSpace,
    StagePricing,
    bottlenecks,
    root_bounds,
    solve_partition,
    suffix_bottlenecks,
)
from pipeplan.simulate import MAX_PERIOD, in_flight, step_lower_bound_s

log = logging.getLogger("pipeplan.solver")

# Bounds within this relative distance of the best step prune: what is lost is below the
# floating-point noise of summing stage times in a different order.
PRUNE_TOLERANCE = 1e-12
# `layouts_within`'s step is widened by this, relative: it asks for steps at most a given one.
WITHIN_ROUNDING = 1e-9
# Work a does-not-fit message may spend finding the smallest per-device memory, in layers ×
# shapes' memory bisections: counted, not timed (the eighty-second round: under load the same
# command said fewer shapes were checked). About 145 µs each here: 7,000 is about 1 s.
MESSAGE_WORK = 7_000


@dataclass
class MessageWork:
    """What a message's memory bisections have left (MESSAGE_WORK), shared by its tries."""

    left: float = MESSAGE_WORK


# Work after which the search stops with the best layout so far and reports how far from
# proven it is, in units of a few µs here (counted, not timed, so a plan is reproducible):
# operations simulated, partial partitions generated, tables built. Models of tens of layers
# mostly stay below it (the benchmark's bert-large plan on 16 devices: at most 50 % of it,
# every phase proven; those that reach it go on as sub-searches, SUB_SEARCH_WORK); long
# pipelines of near-equal partitions, which the bounds cannot separate, reach it (the
# 1,000-layer benchmark: 0.2–0.6 s a phase on 2 cores). A search of tens of layers does at
# most this, SUB_SEARCH_WORK times this in sub-searches and one step of the search more
# (about 1 s of CPU here, 2–3 µs a unit) once it has simulated a layout that fits; until then
# it goes on, and the tree's stage ends, exact on memory (`PartitionSpace.last_ends`), make
# its first dive one (the forty-fourth round's F9: leaves that failed their simulations kept
# searches going to 100–250 times the limit, 31–68 s).
DEFAULT_WORK_LIMIT = 120_000
# A search that has simulated nothing that fits memory by this many times its work limit
# stops and says so (`DoesNotFitError`): on tight memory leaf after leaf can fail its
# simulation, and the forty-fifth round's 60- and 100-layer models on 16 devices searched
# for minutes, the heap growing past 6 GB. About 3 s of CPU here.
NOTHING_FITS_WORK = 10
# Work all the phase searches of one plan may do together (`PlanWork`): the work limit bounds
# one phase, this the plan, whose phases a schedule makes as many as its freeze points (the
# twenty-ninth round: 9,990 of them on a 9,990-layer profile searched for hours). 32 phases
# that each stop at their limit (the 1,000-layer benchmark has 10) plan as before; past it, a
# phase gets what is left, at least its first simulated layout (the previous placement).
PLAN_WORK_LIMIT = 32 * DEFAULT_WORK_LIMIT
WORK_PER_EXPANSION = 40
WORK_PER_CHILD = 8
WORK_PER_TABLE_STAGE = 30
WORK_PER_LEAF_STAGE = 10
# A search of tens of layers that reaches its work limit goes on as sub-searches, one per
# (stage count, schedule, whether the map is one of the family's node assignments `map i`)
# of what is still waiting (`_Run.sub_searches`): each the search a
# `--stages` and `--schedule` pin would make, from where the whole search left it, with the
# best layout so far to prune against, within a work limit of its own; together at most
# SUB_SEARCH_WORK times the phase's limit (and what the plan has left). The forty-second
# round: bert-large on 2 × 8 devices stopped at its limit with its first layout (pure
# best-first simulates a layout only once its bound is the smallest, and hundreds of
# thousands of partial partitions of every stage count lay below the optimum), 24 % slower
# than `--stages 10`, which is proven within the limit.
SUB_SEARCH_WORK = 2
# Inside a sub-search, every this much work the node opened next is followed greedily to a
# complete layout (smallest child bound), simulated at once: a best-first search reaches
# its leaves last, and a sub-search that stops at its own limit needs layouts before then.
DIVE_WORK = DEFAULT_WORK_LIMIT // 64
# Shapes with more forward-only stage counts than this get a cheaper bound over them.
FORWARD_ONLY_COUNTS = 64
# Bytes of root-batch tables a search keeps for the trees that may open (`_Run.bound_roots`):
# bert-large's 8-stage tables take 10 kB a shape; a bound, not a cache that grows with shapes.
KEPT_TABLE_BYTES = 1 << 20
# Cells of the [node, stage] table `PhaseSearch._shared_links` builds at most (16 MB); past it
# it sorts (node, stage) pairs instead, ten times slower on a million devices.
SHARED_LINK_CELLS = 1 << 24


@dataclass(frozen=True)
class Pins:
    """Choices the user fixed; None leaves them to the solver."""

    num_stages: int | None = None
    replicas: int | None = None
    micro_batches: int | None = None
    schedule: Schedule | None = None
    boundaries: tuple[int, ...] | None = None


@dataclass(frozen=True)
class Shape:
    num_stages: int
    replicas: int
    micro_batches: int
    micro_batch_size: int
    # Which rank map of (S, D) (one of `costmodel.placement_family`'s: a member of
    # PLACEMENTS, a mirror or one of every map).
    placement: str = PACKED


@dataclass
class PhaseSolution:
    best: Evaluation
    runner_ups: list[Evaluation] = field(default_factory=list)
    evaluated: int = 0  # layouts simulated
    # Proven: no layout of the space is faster than `best` (all the rest was pruned). When the
    # work limit stopped the search first, `lower_bound_s` is what is proven instead.
    proven: bool = True
    lower_bound_s: float = 0.0


class PlanWork:
    """The work budget one plan's phase searches share (PLAN_WORK_LIMIT), and what the
    searches stopped at their limit left unproven, said in one line by `report`:

        work = PlanWork()
        for frozen in freeze_points:
            solve_phase(model, 64, frozen, work=work)   # each within what is left
        work.report()   # "layout search stopped at its work limit in 3 of 10 phase searches: ..."

    `another()` is a fresh budget for another plan of the same command (a preview prices
    several) whose stops the same line counts. `shared`: what the command's plans share
    besides, by `pool` (the schedule-wide choice's budget, `plan._ScheduleWork`: a preview's
    plan has its own, so that it is the plan `make_plan` gives; its ablations share another)."""

    def __init__(
        self,
        limit: int | None = None,
        stops: list | None = None,
        shared: dict | None = None,
        pool: str = "",
    ):
        self.limit = PLAN_WORK_LIMIT if limit is None else limit
        self.left = self.limit
        # Per search: (best step, proven lower bound), shared with `another()`'s budgets.
        self.stops: list[tuple[float, float] | None] = [] if stops is None else stops
        self.shared: dict = {} if shared is None else shared
        self.pool = pool

    def another(self, pool: str | None = None) -> PlanWork:
        return PlanWork(self.limit, self.stops, self.shared, self.pool if pool is None else pool)

    def phase_limit(self) -> int:
        """The next phase search's work limit: its own, unless the plan has less left."""
        return max(0, min(DEFAULT_WORK_LIMIT, self.left))

    def sub_search_limit(self) -> int:
        """The work the next phase search's sub-searches may add past its limit
        (`_Run.sub_searches`): SUB_SEARCH_WORK phases' worth, unless the plan has less left."""
        return max(0, min(SUB_SEARCH_WORK * DEFAULT_WORK_LIMIT, self.left - self.phase_limit()))

    def solve(self, search: PhaseSearch, *args) -> PhaseSolution:
        """`search.solve(*args)` (a search built with `phase_limit()`), its work counted
        whatever it raises, its gap kept for `report`."""
        try:
            solution = search.solve(*args)
        except NothingFasterError as none:
            if none.stopped_at is not None:  # (the caller's layout, at most this far off)
                self.stops.append((none.step_s, none.stopped_at))
            raise
        finally:
            self.left -= search.work_done
        stop = None if solution.proven else (solution.best.step_s, solution.lower_bound_s)
        self.stops.append(stop)
        return solution

    def report(self) -> None:
        """One INFO line when a search stopped at its work limit, with the widest gap."""
        stopped = [s for s in self.stops if s is not None]
        if not stopped:
            return
        best_s, lower_s = max(stopped, key=lambda s: s[0] / s[1] if s[1] > 0 else math.inf)
        # Worded as the schedule's line words its bound (the eighty-third round: "134%" here,
        # "65.9 %" there); no bound proven is said, not "inf%".
        bound = (
            "with no bound proven on how far above its optimum" if lower_s <= 0
            else f"at most {percent_at_most(best_s / lower_s - 1)} above its optimum"
        )  # fmt: skip
        log.info(
            # (a phase is searched cached and uncached, and again for other pins: the widest
            # search's layout may be one the plan does not use, the ninety-first round)
            "layout search stopped at its work limit in %d of %d phase searches: each best "
            "layout %s (the widest: a search whose best step is %.6g s, in the plan or not)",
            len(stopped),
            len(self.stops),
            bound,
            best_s,
        )


def percent_at_most(fraction: float) -> str:
    """A bound said as a percentage, rounded up (a bound rounded to nearest read "0.1 %" for
    0.149 %: the eighty-sixth round), never "0.0 %" nor "-0.0 %" (the eighty-fourth):
    `percent_at_most(0.00149)` → "0.2 %"; under 0.05 %, "0.05 %"."""
    if fraction < 0.0005:
        return "0.05 %"
    return f"{math.ceil(fraction * 1000 - 1e-6) / 10:.1f} %"


class NothingFasterError(PipeplanError):
    """No layout of the phase is faster than the step the caller asked to beat: proven, or,
    where the work limit stopped the search (`stopped_at`, the smallest bound left), none
    found."""

    def __init__(self, step_s: float, stopped_at: float | None = None):
        super().__init__(f"no layout of the phase takes less than {step_s:.6g} s a step")
        self.step_s, self.stopped_at = step_s, stopped_at


class DoesNotFitError(PipeplanError):
    """Nothing fits memory. The message (a min-max memory search over every shape) is built
    only when shown: the plan tries cached and uncached phases and often drops this error."""

    def __init__(self, build: Callable[[], str]):
        super().__init__()
        self._build = build
        self._message: str | None = None

    def __str__(self) -> str:
        if self._message is None:
            self._message = self._build()
        return self._message


def divisors(n: int) -> list[int]:
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def candidate_shapes(
    model: CostModel, global_batch: int, max_stages: int, pins: Pins, forward_only_layers: int = 0
) -> list[Shape]:
    """Every (S, D, M, m) the search considers, before partitioning: D from 1 to ⌊N/S⌋
    (idle devices allowed: fewer replicas may be faster, e.g. inside one node); pinned 1F1B
    needs M ≥ the stages that train (S less at most min(forward_only_layers, S − 1))."""
    num_devices = model.cluster.num_devices
    if num_devices < 1:
        raise BadArgumentError("the cluster has no devices")
    if global_batch < 1:
        raise BadArgumentError(f"--global-batch must be at least 1 (got {global_batch})")
    stage_counts = [pins.num_stages] if pins.num_stages else range(1, max_stages + 1)
    shapes = []
    for S in stage_counts:
        if max_stages < S or num_devices < S:
            continue
        replica_counts = [pins.replicas] if pins.replicas else range(1, num_devices // S + 1)
        for D in replica_counts:
            if D < 1 or num_devices < S * D or global_batch % D:
                continue
            per_replica = global_batch // D
            counts = [pins.micro_batches] if pins.micro_batches else divisors(per_replica)
            for M in (M for M in counts if M <= MAX_MICRO_BATCHES):
                # torch.distributed.pipelining's 1F1B needs a micro-batch per stage that
                # trains; GPipe runs fewer (PhaseSearch.schedules).
                training = S - min(forward_only_layers, S - 1)
                if per_replica % M or (pins.schedule == "1f1b" and training > M):
                    continue
                m = per_replica // M
                if m <= model.max_micro_batch_size:
                    shapes.append(Shape(S, D, M, m))
    return shapes


def _pinned_stages(pins: Pins) -> str:
    """The flag that pinned the stage count, as the user gave it: --boundaries pins it too,
    and a refusal naming `--stages` then named a flag never given (twenty-ninth round).

        _pinned_stages(Pins(num_stages=3))  # "--stages 3"
        _pinned_stages(Pins(num_stages=2, boundaries=(0, 3, 6)))
        # "the 2 stages of --boundaries 0,3,6"
    """
    if pins.boundaries is not None:
        given = ",".join(str(b) for b in pins.boundaries)
        return f"the {pins.num_stages} stage{'s' * (pins.num_stages != 1)} of --boundaries {given}"
    return f"--stages {pins.num_stages}"


def _no_shape_message(
    model: CostModel, global_batch: int, max_stages: int, pins: Pins, forward_only_layers: int
) -> str:
    """Why `candidate_shapes` found none, naming only the flags the user gave."""
    N = model.cluster.num_devices
    possible = min(max_stages, N)
    if pins.num_stages and pins.num_stages > possible:
        # With its remedy (the sixty-sixth round was told the cause alone): fewer stages,
        # or the devices that many need where the layers allow it.
        stages = f"--stages {pins.num_stages} is"
        fewer = f"give --stages {possible} or fewer"
        if pins.boundaries is not None:
            given = ",".join(str(b) for b in pins.boundaries)
            stages = f"--boundaries {given} makes {pins.num_stages} stages,"
            fewer = f"give --boundaries of {possible} stages or fewer"
        if pins.num_stages <= max_stages:
            fewer += f", or use at least {pins.num_stages} devices"
        return (
            f"{stages} more than the {possible} stages possible ({max_stages} partitionable "
            f"layers, {N} devices); {fewer}"
        )
    if pins.micro_batches and pins.micro_batches > MAX_MICRO_BATCHES:
        return f"--micro-batches {pins.micro_batches} is beyond the limit of {MAX_MICRO_BATCHES}"
    # A micro-batch holds at least one sample: more of them than a replica's samples is the
    # cause, said first (the twentieth round was told of micro-batch sizes and divisibility).
    D = pins.replicas or 1
    if pins.micro_batches and pins.micro_batches > global_batch // D:
        over = f"the global batch {global_batch}"
        if D > 1:
            over = f"the {global_batch // D} samples per replica of global batch {global_batch}"
        return (
            f"--micro-batches {pins.micro_batches} is more than {over}: a micro-batch holds at "
            "least one sample; choose at most that many micro-batches, or a larger --global-batch"
        )
    S = pins.num_stages or 1
    training = S - min(forward_only_layers, S - 1)
    if (
        pins.micro_batches
        and pins.num_stages
        and pins.micro_batches < training
        and (pins.schedule == "1f1b")
    ):
        return (
            f"--micro-batches {pins.micro_batches} is fewer than {_pinned_stages(pins)}"
            + (f" (at least {training} of them train)" if training < pins.num_stages else "")
            + ": 1F1B needs at least one micro-batch per stage that trains (GPipe does not)"
        )
    # What was searched, as `candidate_shapes` searches it: a pinned stage count leaves
    # 1..N // S replicas, and is named by its flag (the twenty-ninth round was told of "1..2
    # stages" beside --stages 2).
    stages = _pinned_stages(pins) if pins.num_stages else f"1..{possible} stages"
    replicas = f"{pins.replicas}" if pins.replicas else "1" if N // S == 1 else f"1..{N // S}"
    most = pins.replicas or max(N // S, 1)
    cap = model.max_micro_batch_size
    largest = cap * MAX_MICRO_BATCHES * most
    if not pins.micro_batches and global_batch > largest:
        # The cap on micro-batches, not divisibility (forty-seventh round: 8192 over 2
        # replicas of micro-batches of at most 2 was told to be divisible by 1 or 2).
        return (
            f"global batch {global_batch} needs more than {MAX_MICRO_BATCHES:,} micro-batches "
            f"(the limit per replica and step) of at most {cap} samples "
            f"on each of at most {most} replicas ({stages}): at most {largest:,} samples; "
            "choose a smaller --global-batch, or profile larger micro-batch sizes"
        )
    # Pinned 1F1B needs a micro-batch per stage that trains; one stage always can (S = 1).
    least = training if pins.schedule == "1f1b" else 1
    even = _replica_counts(global_batch, most, pins)
    searched = f"{replicas} replica{'s' if replicas != '1' else ''} for {stages}"
    if pins.micro_batches:
        M = pins.micro_batches
        split = [D for D in even if (global_batch // D) % M == 0]
        if not split:
            shares = ", ".join(f"{global_batch // D} on {D}" for D in even[:4])
            nearest = _nearest_global_batch(global_batch, most, pins, cap, least)
            return (
                f"--micro-batches {M} divides none of global batch {global_batch}'s shares per "
                f"replica ({shares}{', …' if len(even) > 4 else ''}; {searched}); choose a "
                f"--micro-batches that divides one, or a global batch such as {nearest}"
            )
        # It divides, and the micro-batches are too big (sixty-fifth round: 64 in one
        # micro-batch of at most 16 was told to choose a global batch divisible by 1).
        D = max(split)
        over = f" over {D} replicas" if D > 1 else ""
        fewest = _fewest_micro_batches(global_batch, even, cap, least)
        if fewest is not None:
            instead = f"choose --micro-batches {fewest} (the fewest that makes them small enough)"
        else:
            unpinned = replace(pins, micro_batches=None)
            nearest = _nearest_global_batch(global_batch, most, unpinned, cap, least)
            instead = (
                f"no --micro-batches up to {MAX_MICRO_BATCHES:,} makes them small enough: "
                f"choose a global batch such as {nearest}"
            )
        larger = (
            "" if model.micro_batch_limit_is_memory else ", or profile larger --micro-batch-sizes"
        )
        return (
            f"--micro-batches {M} makes micro-batches of {global_batch // (D * M)} samples "
            f"(global batch {global_batch}{over}), more than the {cap} the profile supports "
            f"({model.micro_batch_limit_reason}); {instead}{larger}"
        )
    D = min(even, default=most)
    if least > min(global_batch // D, MAX_MICRO_BATCHES):
        # Past the limit, a larger batch is no remedy.
        beyond = f"beyond the limit of {MAX_MICRO_BATCHES:,} per replica and step"
        instead = "--schedule gpipe or fewer stages"
        if least <= MAX_MICRO_BATCHES:
            per = " per replica of" if D > 1 else " of"
            beyond = f"more than the {global_batch // D} samples{per} global batch {global_batch}"
            instead = "--schedule gpipe, fewer stages, or a larger --global-batch"
        return (
            f"1F1B over {_pinned_stages(pins)} needs at least {least} micro-batches (one per "
            f"stage that trains), {beyond}; choose {instead}"
        )
    nearest = _nearest_global_batch(global_batch, most, pins, cap, least)
    return (
        f"global batch {global_batch} cannot be split evenly into at most {MAX_MICRO_BATCHES:,} "
        f"micro-batches of at most {cap} samples"
        + (f", at least {least} of them for 1F1B" if least > 1 else "")
        + f" on any replica count ({searched}); choose a global batch that can, such as {nearest}"
    )


def _replica_counts(global_batch: int, most: int, pins: Pins) -> list[int]:
    """The replica counts up to `most` (or the pinned one) that split the batch evenly."""
    counts = [pins.replicas] if pins.replicas else divisors(global_batch)
    return [d for d in counts if d <= most and global_batch % d == 0]


def _fewest_micro_batches(global_batch: int, even: list[int], cap: int, least: int) -> int | None:
    """The fewest micro-batches, at least `least`, that split a replica's share of the batch
    (over one of the `even` replica counts) into whole micro-batches of at most `cap`.

        _fewest_micro_batches(64, [1], 16, 1)  # 4
    """
    found = [
        M
        for D in even
        for M in divisors(global_batch // D)
        if least <= M <= MAX_MICRO_BATCHES and global_batch // (D * M) <= cap
    ]
    return min(found, default=None)


def _nearest_global_batch(global_batch: int, most: int, pins: Pins, cap: int, least: int) -> int:
    """The global batch nearest `global_batch` that these pins split, as `candidate_shapes`
    would (a pinned micro-batch count as given), the one below first: what the refusals
    offer instead.

        _nearest_global_batch(1031, 1, Pins(), 16, 1)  # 1030 (103 micro-batches of 10)
    """

    def splits(batch: int) -> bool:
        even = _replica_counts(batch, most, pins)
        if pins.micro_batches:
            M = pins.micro_batches
            return any((batch // D) % M == 0 and batch // (D * M) <= cap for D in even)
        return _fewest_micro_batches(batch, even, cap, least) is not None

    # Above the largest batch these pins take (micro-batches of `cap` on `most` replicas,
    # which splits), the search would walk down to it one by one: it starts there.
    largest = (pins.micro_batches or MAX_MICRO_BATCHES) * cap * most
    if global_batch > largest:
        return largest
    # It ends: micro-batches of one sample split (the pinned count, or `least` of them, on
    # the pinned or one replica), a batch the refusals before this one kept below this one.
    step = 1
    while True:
        for batch in (global_batch - step, global_batch + step):
            if batch >= 1 and splits(batch):
                return batch
        step += 1


@dataclass(frozen=True)
class _LayerPrefixes:
    """Prefix sums over layers at one micro-batch size (position j: layers < j)."""

    fwd: np.ndarray
    bwd: np.ndarray
    grad: np.ndarray
    static: np.ndarray
    saved: np.ndarray
    boundary_bytes: np.ndarray  # at j: layer j−1's output
    gradient_back: np.ndarray  # at j: layer j−1 trains


@dataclass(frozen=True)
class _View:
    """The layers a shape bound prices as one pipeline of training stages (`PhaseSearch.
    _pipeline_bounds`): stage 0 holds at least layers 0..first; layers before
    first_computed cost nothing (cached); `name` keys the bottleneck tables."""

    costs: PhaseCosts
    first: int
    first_computed: int
    name: str

    def per_layer(self) -> np.ndarray:
        """[c, fwd, bwd; layer] (c = fwd + bwd), as the bottleneck and window bounds read
        them."""
        return np.stack([self.costs.fwd_s + self.costs.bwd_s, self.costs.fwd_s, self.costs.bwd_s])


@dataclass(frozen=True)
class _Rows:
    """Shape-bound rows of several micro-batch sizes, grouped by size: per group the view of
    its layers' costs, per row its group. The bounds of every size are then one pass of
    numpy calls (per size, the calls would cost more than their arithmetic on tens of
    shapes); what depends on the size is computed per group and spread over its rows.

        f = rows.stacked(lambda costs: costs.fwd_s)   # [group, layer]
        rows.spread(f.sum(axis=1))                    # [row]: Σ fwd of its layers"""

    views: tuple[_View, ...]
    group: np.ndarray

    def stacked(self, value: Callable[[PhaseCosts], np.ndarray]) -> np.ndarray:
        """[group, layer]: value(costs) of each group's layers. A group's row reduced along
        the layers gives what its 1-D array would (numpy reduces each row alike)."""
        return np.stack([value(view.costs) for view in self.views])

    def spread(self, per_group: np.ndarray) -> np.ndarray:
        """[row, ...]: each row's group's value."""
        return per_group[self.group]

    def by_group(self, part: Callable[..., np.ndarray], *arrays: np.ndarray) -> np.ndarray:
        """[row]: part(*each group's rows of `arrays`, in order), put back in their rows."""
        result = np.empty(len(self.group))
        for group in range(len(self.views)):
            mine = self.group == group
            if mine.any():
                result[mine] = part(*(array[mine] for array in arrays))
        return result

    def take(self, rows: np.ndarray, views: tuple[_View, ...]) -> _Rows:
        """The rows `rows` (in order), their groups' layers seen through `views`."""
        return _Rows(views, self.group[rows])


def _largest_layer(
    rows: _Rows, in_flight: np.ndarray, static: np.ndarray, saved: np.ndarray
) -> np.ndarray:
    """Per row, the most memory one layer takes with `in_flight` micro-batches (static +
    in_flight·saved, [group, layer] each): one max per size and distinct count, as the
    thousands of rows of a long model share a few."""
    counts, where = np.unique(in_flight, return_inverse=True)
    most = (static[:, None, :] + counts[None, :, None] * saved[:, None, :]).max(axis=2)
    return most[rows.group, where]


def _training_layers(costs: PhaseCosts, start: int) -> PhaseCosts:
    """`costs` of layers start..L−1 only (the layers of the stages that train, when the
    frozen prefix 0..start−1 runs on forward-only stages)."""
    return replace(
        costs,
        frozen_layers=0,
        cached=False,
        fwd_s=costs.fwd_s[start:],
        bwd_s=costs.bwd_s[start:],
        active=costs.active[start:],
        boundary_bytes=costs.boundary_bytes[start:],
        static_bytes=costs.static_bytes[start:],
        saved_bytes_per_micro_batch=costs.saved_bytes_per_micro_batch[start:],
        grad_bytes=costs.grad_bytes[start:],
    )


@dataclass(frozen=True)
class _RankLinks:
    """Links of one (S, D) rank map: per boundary and per stage, and the shared node links."""

    latency: np.ndarray
    per_byte: np.ndarray
    allreduce_latency: np.ndarray
    allreduce_per_byte: np.ndarray
    shared: np.ndarray
    shared_latency: float
    shared_per_byte: float

    def __post_init__(self) -> None:
        for array in (self.latency, self.per_byte, self.allreduce_latency):
            array.flags.writeable = False  # shared by every phase of a plan
        self.allreduce_per_byte.flags.writeable = self.shared.flags.writeable = False


@dataclass
class _Received:
    """Per shape-bound row (`PhaseSearch._received_floors`): the least that the training
    stages receive in all (forwards, backwards), the most one boundary's forward, backward
    and one stage's ops receive at least, and the first training stage's receives."""

    fwd: np.ndarray
    bwd: np.ndarray
    most_fwd: np.ndarray
    most_bwd: np.ndarray
    most_c: np.ndarray
    first_fwd: np.ndarray
    first_bwd: np.ndarray


# Per cost model, the links of each (S, D, placement) rank map (`PhaseSearch._rank_links`),
# kept while the model lives: the phases of one plan search the same maps. Keyed by the
# map's (S, D, placement), not by the map: kept for every map opened, a million devices'
# maps held gigabytes (KEPT_RANK_CELLS).
_LINKS: weakref.WeakKeyDictionary[CostModel, dict] = weakref.WeakKeyDictionary()
# Per cost model, each (S, D)'s placements (`costmodel.placement_family`: their names, and
# their maps, as many as KEPT_RANK_CELLS holds) and what the shape bounds read from a map
# (`PhaseSearch._fastest_ring`), kept alike.
_FAMILIES: weakref.WeakKeyDictionary[CostModel, _Families] = weakref.WeakKeyDictionary()
# Per cost model, each candidate space's shapes (`PhaseSearch._candidate_shapes`) for the
# most stages asked so far, in order of S, with their S: a phase with fewer stages to place
# (a longer frozen prefix) searches a prefix of them. Built again for each of a 1,000-layer
# plan's 18 searches, they were 15 % of its time.
_SHAPES: weakref.WeakKeyDictionary[CostModel, dict] = weakref.WeakKeyDictionary()
# Per cost model, each (phase, shape, schedule)'s root bound (`_Run.bound_roots`): a plan's
# decisions and its schedule-wide widening search the same phases again (a 160-layer model's 4
# cached phases on 256 × 8: 60 % of the plan's time bounding the same roots again). A
# bound depends on the space alone, so the searches' paths, work counted, and plans are the
# same.
_ROOTS: weakref.WeakKeyDictionary[CostModel, dict] = weakref.WeakKeyDictionary()
KEPT_ROOTS = 250_000  # per cost model (~30 MB): past it, a search's roots are its own
# A long model's candidate for every placement of its (S, D) but "packed" (not a rank map:
# `_Run.open_shape` makes it into the family's maps).
OTHER_PLACEMENTS = "others"


class _Families:
    """A cost model's rank maps by (S, D) (`PhaseSearch.family`): the names of each (S, D)'s
    placements and the shape bounds' `_fastest_ring` kept, the maps themselves as many as
    KEPT_RANK_CELLS holds (a map of 1,000 stages × 1,024 replicas is a million cells)."""

    def __init__(self) -> None:
        self.maps = BoundedCache(KEPT_RANK_CELLS)
        self.names: dict[tuple[int, int], tuple[str, ...]] = {}
        self.fastest: dict[tuple[int, int, int], tuple[float, float]] = {}


def _columns(shapes: list[Shape]) -> np.ndarray:
    """[shape, (S, D, M, m, placement)], the placement as its `placement_index` (0:
    "packed", the closed forms' map; OTHER_PLACEMENTS as 1, the first of the others): what
    the shape bounds read, taken from tens of thousands of shapes once."""
    index = {OTHER_PLACEMENTS: 1}
    for s in shapes:
        if s.placement not in index:
            index[s.placement] = placement_index(s.placement)
    return np.array(
        [
            (s.num_stages, s.replicas, s.micro_batches, s.micro_batch_size, index[s.placement])
            for s in shapes
        ],
        dtype=np.int64,
    ).reshape(len(shapes), 5)


class PhaseSearch:
    """The search for one phase (freeze point, cache) of one training shape."""

    def __init__(
        self,
        model: CostModel,
        global_batch: int,
        frozen_layers: int,
        cached: bool,
        pins: Pins | None = None,
        work_limit: int = DEFAULT_WORK_LIMIT,
        forward_only: bool | None = None,
        sub_search_limit: int | None = None,
    ):
        """`forward_only`: whether an uncached phase's frozen prefix may span leading
        forward-only stages (None: unless the model is long, see below).
        `sub_search_limit`: the work the sub-searches may add when the search reaches
        `work_limit` (`_Run.sub_searches`; None: SUB_SEARCH_WORK × `work_limit`)."""
        self.model = model
        self.global_batch = global_batch
        self.frozen_layers = frozen_layers
        self.cached = cached and frozen_layers > 0
        self.pins = pins or Pins()
        self.work_limit = work_limit
        if sub_search_limit is None:
            sub_search_limit = SUB_SEARCH_WORK * work_limit
        self.sub_search_limit = sub_search_limit
        self.first_computed = frozen_layers if self.cached else 0
        # An uncached phase's frozen prefix may span several leading stages, which run forward
        # only (no gradient goes back to them); stage 0 of a cached phase reads the cache and
        # holds the whole prefix, as in PipeTransformer. So does a long model's (more than
        # DENSE_MAX_LAYERS layers): its work-limited search would spend its budget on the
        # forward-only shapes' loose bounds (the 1,000-layer plan: 30 s a phase, worse plans),
        # unless its prefix fits no stage 0 (`solve_phase` asks again).
        if forward_only is None:
            forward_only = model.num_layers <= DENSE_MAX_LAYERS
        self.forward_only_layers = frozen_layers if forward_only and not self.cached else 0
        # Stage 0 holds layers 0..k unless the prefix may run on forward-only stages.
        self.first_boundary = frozen_layers - self.forward_only_layers + 1
        self.max_stages = model.num_layers - self.first_boundary + 1
        # No shape has more stages than devices: the bottleneck tables stop there.
        self.most_stages = min(self.max_stages, model.cluster.num_devices)
        self.cluster = model.cluster
        # Memory the layers may use: the reserve is part of every stage.
        self.memory_limit_bytes = self.cluster.device_memory_bytes - model.reserve_bytes
        # Rank maps as a Layout holds them (tuples of Python ints): as many as
        # KEPT_RANK_CELLS holds.
        self._ranks = BoundedCache(KEPT_RANK_CELLS)
        self._bottlenecks: dict[object, np.ndarray] = {}
        self._shared_tables: dict[tuple, dict] = {}
        self._prefixes: dict[int, _LayerPrefixes] = {}
        # Rank links depend on the cluster and the map only: every phase of a plan shares them.
        self._links: dict[tuple[int, int, str], _RankLinks] = _LINKS.setdefault(model, {})
        self._families = _FAMILIES.setdefault(model, _Families())
        self._shapes: list[Shape] | None = None
        self._columns = np.zeros((0, 5), dtype=np.int64)
        self._shape_set: set[Shape] | None = None
        self.work_done = 0  # by the last `solve`

    def costs(self, m: int) -> PhaseCosts:
        return self.model.phase_costs(m, self.frozen_layers, self.cached)

    def shapes(self) -> list[Shape]:
        if self._shapes is None:
            self._shapes, self._columns = self._candidate_shapes()
        return self._shapes

    def shape_columns(self) -> np.ndarray:
        """`shapes()` as [shape, (S, D, M, m, placement)] (`_columns`)."""
        self.shapes()
        return self._columns

    def _candidate_shapes(self) -> tuple[list[Shape], np.ndarray]:
        """`_placed_shapes` and their `_columns`, from those kept for this model (`_SHAPES`)
        where they hold the space: a search's shapes are those of S ≤ max_stages of any
        space with as many stages or more, the same otherwise (global batch, pins; the
        forward-only layers only where 1F1B is pinned, `candidate_shapes`). Pinned boundaries
        are checked per search."""
        if self.pins.boundaries is not None:
            shapes = self._placed_shapes(self.max_stages)
            return shapes, _columns(shapes)
        fed = self.forward_only_layers if self.pins.schedule == "1f1b" else None
        kept = _SHAPES.setdefault(self.model, {})
        key = (self.global_batch, self.pins, fed)
        if key not in kept or kept[key][0] < self.max_stages:
            shapes = self._placed_shapes(self.max_stages)  # raises where there is none
            kept[key] = (self.max_stages, shapes, _columns(shapes))
        _, shapes, columns = kept[key]
        n = int(np.searchsorted(columns[:, 0], self.max_stages, side="right"))
        if n == 0:  # the refusal, as a search of these stages alone makes it
            self._placed_shapes(self.max_stages)
        return shapes[:n], columns[:n]

    def _placed_shapes(self, max_stages: int) -> list[Shape]:
        if self.pins.boundaries is not None:
            try:  # else no layout is ever built from them, and the error would blame memory
                check_boundaries(self.pins.boundaries, self.model.num_layers)
            except BadArgumentError as exc:
                raise BadArgumentError(f"--boundaries: {exc}") from None
            pinned_stages = len(self.pins.boundaries) - 1
            if self.pins.num_stages not in (None, pinned_stages):
                raise BadArgumentError(
                    f"--stages {self.pins.num_stages} disagrees with the {pinned_stages} stages "
                    "of --boundaries"
                )
            pins = Pins(
                pinned_stages,
                self.pins.replicas,
                self.pins.micro_batches,
                self.pins.schedule,
                self.pins.boundaries,  # kept for the refusal to name (`_pinned_stages`)
            )
        else:
            pins = self.pins
        shapes = candidate_shapes(
            self.model, self.global_batch, max_stages, pins, self.forward_only_layers
        )
        if not shapes:
            raise BadArgumentError(
                _no_shape_message(
                    self.model, self.global_batch, max_stages, pins, self.forward_only_layers
                )
            )
        if self.pins.boundaries is not None:
            self._check_pinned_runs(shapes)  # every placement runs what one runs
        # Each (S, D, M, m) on every rank map of its (S, D) family (a placement dimension:
        # the links its transfers and rings use; one map on one node). A long model's
        # thousands of (S, D) get their other maps as one candidate (OTHER_PLACEMENTS) whose
        # bound holds for each of them (`_ring_links`), made into the maps when it is opened
        # (`_Run.open_shape`): built for every (S, D) of 4,096 devices they took seconds.
        if self.cluster.nodes == 1 or self.cluster.devices_per_node == 1:
            return shapes
        if self.model.num_layers > DENSE_MAX_LAYERS:
            return [
                Shape(S, D, shape.micro_batches, shape.micro_batch_size, placement)
                for shape in shapes
                for S, D in [(shape.num_stages, shape.replicas)]
                for placement in (PACKED, OTHER_PLACEMENTS)
            ]
        return [
            Shape(S, D, shape.micro_batches, shape.micro_batch_size, placement)
            for shape in shapes
            for S, D in [(shape.num_stages, shape.replicas)]
            for placement in self.placements(S, D)
        ]

    def holds(self, shape: Shape) -> bool:
        """Whether `shape` (a concrete placement) is one the search considers."""
        if self._shape_set is None:
            self._shape_set = set(self.shapes())
        if shape in self._shape_set:
            return True
        others = replace(shape, placement=OTHER_PLACEMENTS)
        return (
            shape.placement != PACKED
            and others in self._shape_set
            and shape.placement in self.placements(shape.num_stages, shape.replicas)
        )

    def _check_pinned_runs(self, shapes: list[Shape]) -> None:
        """Pinned boundaries that no shape can run (a cached phase's frozen layers reach past
        stage 0, 1F1B with fewer micro-batches than training stages): the executor's reason,
        naming the flag, not a memory shortfall."""
        reason = None
        for shape in shapes:
            for schedule in self.schedules(shape.num_stages, shape.micro_batches):
                try:
                    self.layout(shape, schedule, tuple(self.pins.boundaries)).check(
                        self.model.num_layers, self.cluster.num_devices
                    )
                    return
                except BadArgumentError as exc:
                    reason = reason or exc
        raise BadArgumentError(f"--boundaries: {reason}")

    def schedules(
        self, num_stages: int | None = None, micro_batches: int | None = None
    ) -> tuple[Schedule, ...]:
        if self.pins.schedule:
            return (self.pins.schedule,)
        # One stage: both schedules run the same ops; 1F1B keeps one micro-batch in flight.
        if num_stages == 1:
            return ("1f1b",)
        # Schedule1F1B refuses fewer micro-batches than stages that train; at most
        # min(k, S − 1) stages run forward only.
        if (
            num_stages is not None
            and micro_batches is not None
            and micro_batches < num_stages - min(self.forward_only_layers, num_stages - 1)
        ):
            return ("gpipe",)
        return SCHEDULES

    def family(self, num_stages: int, replicas: int) -> dict[str, np.ndarray]:
        """The rank maps of (S, D) by placement (`costmodel.placement_family`), kept per
        cost model: every phase of a plan searches the same."""
        key = (num_stages, replicas)
        cluster = self.cluster

        def members() -> dict[str, np.ndarray]:
            family = placement_family(num_stages, replicas, cluster.devices_per_node, cluster.nodes)
            self._families.names[key] = tuple(placement for placement, _ in family)
            return dict(family)

        return self._families.maps.get(  # type: ignore[return-value]
            key, members, lambda maps: sum(ranks.size for ranks in maps.values())
        )

    def placements(self, num_stages: int, replicas: int) -> tuple[str, ...]:
        key = (num_stages, replicas)
        if key not in self._families.names:
            self.family(num_stages, replicas)
        return self._families.names[key]

    def placement_of(self, layout: Layout) -> str | None:
        """The placement whose map is `layout`'s rank map, None when none of the family is."""
        S, D = layout.num_stages, layout.replicas
        if self.cluster.num_devices < S * D:
            return None
        wanted = np.asarray(layout.rank_map)
        for placement, ranks in self.family(S, D).items():
            if np.array_equal(ranks, wanted):
                return placement
        return None

    def layout_ranks(self, shape: Shape) -> tuple[tuple[int, ...], ...]:
        key = (shape.num_stages, shape.replicas, shape.placement)
        return self._ranks.get(
            key,
            lambda: tuple(tuple(r) for r in self.rank_array(shape).tolist()),
            rank_cells,
        )

    def rank_array(self, shape: Shape) -> np.ndarray:
        """The shape's rank map as the [replica, stage] array of its family."""
        return self.family(shape.num_stages, shape.replicas)[shape.placement]

    def layout(self, shape: Shape, schedule: Schedule, boundaries: tuple[int, ...]) -> Layout:
        return Layout(
            frozen_layers=self.frozen_layers,
            cached=self.cached,
            micro_batches=shape.micro_batches,
            micro_batch_size=shape.micro_batch_size,
            schedule=schedule,
            boundaries=boundaries,
            rank_map=self.layout_ranks(shape),
        )

    def evaluate(self, layout: Layout, record: bool = False) -> Evaluation:
        return self.model.evaluate(layout, record=record)

    # ------------------------------------------------------------------ shape bounds

    def shape_bounds(
        self,
        candidates: list[tuple[Shape, Schedule]],
        columns: np.ndarray | None = None,
        gpipe: np.ndarray | None = None,
    ) -> np.ndarray:
        """A lower bound on the step of every partition of each (shape, schedule), in closed
        form and vectorised over the candidates of every micro-batch size (§4.8, `_Rows`):
        the smaller of the bound over partitions whose every stage trains (stage 0 holds the
        frozen prefix; GPipe, or 1F1B with M ≥ S) and, in an uncached phase, the bound over
        partitions with q ≥ 1 forward-only stages (`_forward_only_bounds`); plus the
        calibrated overhead outside the schedule. `columns` and `gpipe`: the candidates'
        `_columns` and whether each is GPipe, where the caller has them."""
        if not candidates:
            return np.zeros(0)
        if columns is None or gpipe is None:
            columns = _columns([shape for shape, _ in candidates])
            gpipe = np.array([schedule == "gpipe" for _, schedule in candidates])
        values, group = np.unique(columns[:, 3], return_inverse=True)
        views = tuple(
            _View(self.costs(int(m)), self.frozen_layers, self.first_computed, "all")
            for m in values
        )
        rows = _Rows(views, group)
        S, D, M = (columns[:, i].astype(float) for i in range(3))
        P = columns[:, 4]
        bound = np.where(
            gpipe | (M >= S), self._pipeline_bounds(rows, S, S, D, P, M, gpipe), np.inf
        )
        if self.forward_only_layers:
            bound = np.minimum(bound, self._forward_only_bounds(rows, S, D, P, M, gpipe))
        samples, which = np.unique(columns[:, 2] * columns[:, 3], return_inverse=True)
        overhead = np.array([self.model.overhead_s(int(n)) for n in samples])[which]
        return bound + overhead

    def schedule_rows(self, columns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The (shape, schedule) candidates of shapes given as `_columns`, in `schedules`'
        order: (the shape of each, whether it is GPipe); `schedules` for each shape, at once."""
        S, M = columns[:, 0], columns[:, 2]
        if self.pins.schedule:
            return np.arange(len(S)), np.full(len(S), self.pins.schedule == "gpipe")
        only_1f1b = S == 1
        training = S - np.minimum(self.forward_only_layers, S - 1)  # the fewest that train
        only_gpipe = ~only_1f1b & (training > M)
        counts = np.where(only_1f1b | only_gpipe, 1, 2)
        which = np.repeat(np.arange(len(S)), counts)
        first = np.arange(which.size) == np.repeat(np.cumsum(counts) - counts, counts)
        # SCHEDULES is ("gpipe", "1f1b"): of two, GPipe first.
        return which, np.where(counts[which] == 2, first, only_gpipe[which])

    def _forward_only_bounds(
        self,
        rows: _Rows,
        S: np.ndarray,
        D: np.ndarray,
        P: np.ndarray,
        M: np.ndarray,
        gpipe: np.ndarray,
    ) -> np.ndarray:
        """A lower bound on every partition with q ≥ 1 forward-only stages (inf where there is
        none), the smallest over q of shift_q + the bound of its S − q training stages: every
        micro-batch reaches the first of them, and its last frozen layer is done, no earlier
        than Σ_{l<k} nograd_l + q·μ, and removing work never makes a pipeline faster, so the
        step is at least that plus the step of the pipeline of layers k..L−1 alone on S − q
        stages (`_pipeline_bounds` of that view, on the (S, D) rank map's links); and at least
        M times the average stage work, M·(W + S·μ)/S, and M times the average forward of
        stages 0..q, which hold layers 0..k, M·(Σ_{l≤k} f_l + (q+1)·μ)/(q+1). A shape with
        more than FORWARD_ONLY_COUNTS values of q (long models) gets only the last two, at the
        q that makes them smallest: enumerating hundreds of q for thousands of shapes costs
        more than the pruning it buys; so does a long model's candidate for its other
        placements than "packed" (`OTHER_PLACEMENTS`), which doubles those shapes."""
        k, L = self.forward_only_layers, self.model.num_layers
        mu = self.model.micro_batch_overhead_s
        # q: at least one, S − M for 1F1B, and one layer for each training stage; at most one
        # frozen layer per forward-only stage and one training stage.
        lowest = np.maximum.reduce([np.ones_like(S), np.where(gpipe, 1, S - M), S - (L - k)])
        highest = np.minimum(k, S - 1)
        counts = np.maximum(highest - lowest + 1, 0).astype(int)
        f = rows.stacked(lambda costs: costs.fwd_s)  # [group, layer]
        b = rows.stacked(lambda costs: costs.bwd_s)
        W = rows.spread((f + b).sum(axis=1))
        average = M * (W + S * mu) / S
        frozen_fwd = rows.spread(f[:, : k + 1].sum(axis=1))
        many = (counts > FORWARD_ONLY_COUNTS) | ((L > DENSE_MAX_LAYERS) & (P > 0))
        # The cheap bound: the average and prefix terms at their smallest, micro-batch 0's
        # way through every stage (W + S·μ), and GPipe's two flow shops, each machine at
        # least its average, (W + S·μ)·(1 + (M − 1)/S).
        trip = W + S * mu
        cheap = np.maximum.reduce(
            [
                average,
                M * (frozen_fwd + (highest + 1) * mu) / (highest + 1),
                np.where(gpipe, trip * (1 + (M - 1) / S), trip),
            ]
        )
        # Memory whatever q: every training layer alone with its fewest micro-batches in
        # flight (1F1B's last stage: 1, GPipe: M), and all layers over the S devices.
        static = rows.stacked(lambda costs: costs.static_bytes)
        saved = rows.stacked(lambda costs: costs.saved_bytes_per_micro_batch)
        limit = self.memory_limit_bytes * (1 + 1e-9) + 2.0  # rounding slack
        fewest = np.where(gpipe, M, 1.0)
        alone = _largest_layer(rows, fewest, static[:, k:], saved[:, k:])
        total = rows.spread(static.sum(axis=1)) + fewest * rows.spread(saved.sum(axis=1))
        fits = (alone <= limit) & (total <= S * limit)
        bound = np.where(many & fits, cheap, np.inf)
        counts = np.where(many, 0, counts)
        row = np.repeat(np.arange(len(S)), counts)
        if row.size == 0:
            return bound
        q = lowest[row] + (np.arange(row.size) - np.repeat(np.cumsum(counts) - counts, counts))
        expanded = rows.take(row, rows.views)
        training = tuple(
            _View(_training_layers(view.costs, k), 0, 0, "training") for view in rows.views
        )
        active = rows.take(row, training)
        shift = expanded.spread(f[:, :k].sum(axis=1)) + q * mu
        values = shift + self._pipeline_bounds(
            active, S[row] - q, S[row], D[row], P[row], M[row], gpipe[row]
        )
        # Stages 0..q hold layers 0..k between them, each running M forwards.
        prefix = M[row] * (frozen_fwd[row] + (q + 1) * mu) / (q + 1)
        # GPipe, all S stages as two flow shops: the forwards through every stage (the
        # busiest at least stages 0..q's average and the largest layer's), then the
        # backwards through the training stages (the busiest at least their average and
        # the largest layer's), then the first training stage's tail.
        f_max = np.maximum(prefix / M[row], expanded.spread(f.max(axis=1) + mu))
        b_sum, b_largest = expanded.spread(b.sum(axis=1)), expanded.spread(b.max(axis=1))
        b_max = np.maximum(b_sum / (S[row] - q), b_largest)
        tail = self._first_stage_tail(expanded, k, S[row], D[row], P[row])
        flow = np.where(gpipe[row], trip[row] + (M[row] - 1) * (f_max + b_max) + tail, 0.0)
        np.minimum.at(bound, row, np.maximum.reduce([values, average[row], prefix, flow]))
        return bound

    def _pipeline_bounds(
        self,
        rows: _Rows,
        S: np.ndarray,
        S_map: np.ndarray,
        D: np.ndarray,
        P: np.ndarray,
        M: np.ndarray,
        gpipe: np.ndarray,
    ) -> np.ndarray:
        """The schedule's bound of S training stages over `rows`' layers, on the links of
        the (S_map, D) rank map of placement P (inf where no partition may fit memory). With
        stage 0 holding at least layers 0..k (the frozen prefix and the first active layer),
        Σc = W + S·μ, and
        c_max, F_max, B_max bounded below by the
        average, the largest layer, stage 0's least, the lightest window of ⌈L_c/S⌉
        consecutive computed layers (some stage holds that many) and, for models of at most
        DENSE_MAX_LAYERS layers, the exact smallest bottleneck of c (`partition.bottlenecks`):
        - M·c_max (the busiest stage's own work);
        - κ·Σc, κ = 1/(1 − (1 − 1/M)^S): a convex combination of L1_k = Σ_{t<k} c_t + M·c_k
          with weights that give every stage's work the same coefficient; and the same with
          stage 0 at least its forced part;
        - 1F1B: Σc + (M−1)·B_0 + (M − nF_0)·F_0 and Σc + (M − min(S, M))·c_max; GPipe: Σc +
          (M−1)·(F_max + B_max);
        - all-reduce terms (`_allreduce_bounds`)."""
        # The views of one call differ only in the micro-batch size.
        k, first_computed = rows.views[0].first, rows.views[0].first_computed
        mu = self.model.micro_batch_overhead_s
        f = rows.stacked(lambda costs: costs.fwd_s)  # [group, layer]
        b = rows.stacked(lambda costs: costs.bwd_s)
        c = f + b
        # Ops include what they receive (`simulate.received_in_op`): Σc, the first stage's
        # ops and the largest ones grow by each boundary's cheapest transfers.
        got = self._received_floors(rows, S, S_map, D, P)
        F0 = rows.spread(f[:, : k + 1].sum(axis=1) + mu) + got.first_fwd
        B0 = rows.spread(b[:, : k + 1].sum(axis=1)) + got.first_bwd
        Wf = rows.spread(f.sum(axis=1)) + got.fwd
        Wb = rows.spread(b.sum(axis=1)) + got.bwd
        work = Wf + Wb + S * mu
        windows = self._lightest_windows(rows, first_computed, S)
        c_max = np.maximum.reduce(
            [
                work / S,
                rows.spread(c.max(axis=1) + mu),
                F0 + B0,
                windows[0] + mu,
                got.most_c + rows.spread(c[:, k:].min(axis=1)) + mu,
            ]
        )
        known = self._bottleneck(rows, S)
        # No partition at all (more stages than the view's layers allow, e.g. the frozen
        # prefix in stage 0): inf, masked at the end (inf·0 would be NaN on the way).
        possible = np.ones(S.shape, dtype=bool) if known is None else np.isfinite(known)
        if known is not None:
            c_max = np.maximum(c_max, np.where(possible, known, 0.0))
        f_max = np.maximum.reduce(
            [
                Wf / S + mu,
                rows.spread(f.max(axis=1) + mu),
                F0,
                windows[1] + mu,
                got.most_fwd + rows.spread(f[:, k:].min(axis=1)) + mu,
            ]
        )
        b_max = np.maximum.reduce(
            [
                Wb / S,
                rows.spread(b.max(axis=1)),
                B0,
                windows[2],
                got.most_bwd + rows.spread(b[:, k:].min(axis=1)),
            ]
        )
        if known is not None:
            f_max = np.maximum(f_max, np.where(possible, self._bottleneck(rows, S, "f"), 0.0))
            b_max = np.maximum(b_max, np.where(possible, self._bottleneck(rows, S, "b"), 0.0))
        bound = np.maximum(M * c_max, work / (1 - (1 - 1 / M) ** S))
        rest = 1 / (1 - (1 - 1 / M) ** np.maximum(S - 1, 1))
        balanced_first = np.where(S > 1, rest * work / (M + rest - 1), work)
        bound = np.maximum(bound, M * np.maximum(F0 + B0, balanced_first))
        before = np.where(gpipe, M, np.minimum(S, M))
        bound = np.maximum(bound, work + (M - 1) * B0 + (M - before) * F0)
        bound = np.maximum(bound, work + (M - before) * c_max)
        # 1F1B, micro-batch 0's round trip and the rest of the stage whose (M−1)·B + (M −
        # nF)·F is largest (nF ≤ min(S, M)): at least their average over the stages.
        rounds_average = ((M - 1) * Wb + (M - before) * (Wf + S * mu)) / S
        bound = np.where(gpipe, bound, np.maximum(bound, work + rounds_average))
        flow_shop = work + (M - 1) * np.maximum(f_max + b_max, c_max)
        bound = np.where(gpipe, np.maximum(bound, flow_shop), bound)
        rounds_all = np.where(M > S, (M - S - 1) // S + 1, 0)
        # Per size: the cache then holds what recurs across a plan's phases (a long model's
        # thousands of shapes in one key would rarely recur whole).
        z = rows.by_group(lambda S, M: _windows_from_zero_cached(S.tobytes(), M.tobytes()), S, M)
        bound = np.where(gpipe, bound, np.maximum(bound, z * work))
        # Each term above ends with stage 0's all-reduce and optimizer (tail0): stage 0 holds
        # at least the first active layer's gradient.
        bound = bound + self._first_stage_tail(rows, k, S_map, D, P)
        # The last stage's last op (the first all-reduce to start, stages end in reverse
        # order) follows micro-batch M−1's forward through every stage, the last forward of
        # the busiest stage (which ran M forwards and M − nF backwards before it) and, 1F1B,
        # the rounds of the whole pipeline's window.
        last_stage_end = np.maximum(
            Wf + S * mu,
            np.where(
                gpipe,
                Wf + S * mu + (M - 1) * f_max,
                np.maximum((M - before) * c_max, Wf + S * mu + rounds_all * work),
            ),
        )
        bound = np.maximum(
            bound, self._allreduce_bounds(rows, k, S, S_map, D, P, M, work, last_stage_end)
        )
        return np.where(possible & self._may_fit(rows, k, S, M, gpipe), bound, np.inf)

    def _may_fit(
        self, rows: _Rows, k: int, S: np.ndarray, M: np.ndarray, gpipe: np.ndarray
    ) -> np.ndarray:
        """Necessary for some partition to fit memory (§4.6): stage 0 with layers 0..k and
        its in-flight micro-batches; every layer alone with the fewest in flight (1 for
        1F1B's last stage, M for GPipe); all layers over S devices."""
        static = rows.stacked(lambda costs: costs.static_bytes)  # [group, layer]
        saved = rows.stacked(lambda costs: costs.saved_bytes_per_micro_batch)
        limit = self.memory_limit_bytes * (1 + 1e-9) + 2.0  # rounding slack
        fewest = np.where(gpipe, M, 1.0)
        first = np.where(gpipe, M, np.minimum(S, M))
        stage0 = rows.spread(static[:, : k + 1].sum(axis=1)) + first * rows.spread(
            saved[:, : k + 1].sum(axis=1)
        )
        alone = _largest_layer(rows, fewest, static, saved)
        total = rows.spread(static.sum(axis=1)) + fewest * rows.spread(saved.sum(axis=1))
        return (stage0 <= limit) & (alone <= limit) & (total <= S * limit)

    def _lightest_windows(self, rows: _Rows, first_computed: int, S: np.ndarray) -> np.ndarray:
        """[c, fwd, bwd; row]: per S, the lightest sum of c, fwd and bwd over ⌈L_c/S⌉
        consecutive computed layers (L_c of them, from `first_computed`: cached layers cost
        nothing) of the row's layers."""
        per_layer = np.stack([view.per_layer() for view in rows.views])
        per_layer = per_layer[:, :, first_computed:]  # [group, kind, layer]
        n = per_layer.shape[2]
        zeros = np.zeros((*per_layer.shape[:2], 1))
        prefix = np.concatenate([zeros, np.cumsum(per_layer, axis=2)], axis=2)
        widths, where = np.unique(np.ceil(n / S).astype(int), return_inverse=True)
        # [group, kind, width, start]: every window of each width at once (inf past the end).
        starts = np.arange(n + 1)
        ends = starts[None, :] + widths[:, None]
        sums = prefix[:, :, np.minimum(ends, n)] - prefix[:, :, starts][:, :, None, :]
        lightest = np.where(ends <= n, sums, np.inf).min(axis=3)
        return lightest[rows.group, :, where].T

    def _crosses(self, S: np.ndarray, D: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(packed, crosses): with S ≤ G devices per node whole pipelines share a node, and a
        group crosses nodes iff the D replicas do not fit a node's ⌊G/S⌋ pipelines; with
        S > G each group spans D nodes."""
        per_node = self.cluster.devices_per_node
        packed = per_node >= S
        return packed, np.where(packed, per_node // np.maximum(S, 1) < D, D >= 2)

    def _ring_links(
        self, S: np.ndarray, D: np.ndarray, P: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Per row, (latency, bandwidth) of a link no slower than any stage's all-reduce link
        on the (S, D) rank map of placement P (`CostModel.allreduce_links`). Other maps than
        "packed": per term the fastest of the links its stages' rings are priced on, read
        from the map (`_fastest_ring`; for long models the faster of the two links).
        "packed": the in-node one when the groups stay in a node; across nodes the slower of
        both links (`slowest_link`) when whole
        pipelines are packed two or more to a node (node 0 then holds two ranks of every
        ring), else the inter-node one (with S > G a replica's stages span consecutive ranks,
        so no two replicas share a node in one stage; leftover replicas may or may not)."""
        model = self.model
        inter, intra = model.inter_allreduce_link, model.intra_allreduce_link
        slow = slowest_link(inter, intra)
        packed, crosses = self._crosses(S, D)
        doubled = packed & (self.cluster.devices_per_node // np.maximum(S, 1) >= 2)
        spanning = [np.where(doubled, slow.latency_s, inter.latency_s)]
        spanning.append(np.where(doubled, slow.bandwidth_bytes_per_s, inter.bandwidth_bytes_per_s))
        latency = np.where(crosses, spanning[0], intra.latency_s)
        bandwidth = np.where(crosses, spanning[1], intra.bandwidth_bytes_per_s)
        other = np.flatnonzero(P > 0)
        if other.size and self.model.num_layers > DENSE_MAX_LAYERS:
            # Long models: the fastest link per term, true of any map, not read from each of
            # thousands of maps (their bounds are loose anyway: `_received_floors`).
            fastest = [(link.latency_s, link.bandwidth_bytes_per_s) for link in (inter, intra)]
            latency[other] = min(lat for lat, _ in fastest)
            bandwidth[other] = max(bw for _, bw in fastest)
        elif other.size:
            # One integer per (S, D, P): np.unique over columns (axis=1) costs ~30× more.
            span, kinds = self.cluster.num_devices + 1, int(P.max()) + 1
            keys = (S[other].astype(np.int64) * span + D[other].astype(np.int64)) * kinds + P[
                other
            ].astype(np.int64)
            unique, inverse = np.unique(keys, return_inverse=True)
            fastest = np.array(
                [
                    self._fastest_ring(
                        int(key // kinds // span), int(key // kinds % span), int(key % kinds)
                    )
                    for key in unique
                ]
            )
            latency[other] = fastest[inverse, 0]
            bandwidth[other] = fastest[inverse, 1]
        return latency, bandwidth

    def _fastest_ring(self, S: int, D: int, placement: int) -> tuple[float, float]:
        """(the least latency, the most bandwidth) among the links `CostModel.allreduce_links`
        prices the rings of the (S, D) map numbered `placement` (`placement_index`) on: a
        stage in one node uses the in-node link, one spanning nodes the inter-node link, or
        the slower of both per term where two of its ranks share a node. Kept per cost
        model."""
        key = (S, D, placement)
        if key not in self._families.fastest:
            model = self.model
            ranks = self.family(S, D)[placement_name(placement)]
            nodes = np.sort(ranks // self.cluster.devices_per_node, axis=0)
            spans = nodes[0] != nodes[-1]
            shared = (nodes[1:] == nodes[:-1]).any(axis=0)
            inter, intra = model.inter_allreduce_link, model.intra_allreduce_link
            links = [
                link
                for link, used in (
                    (intra, ~spans),
                    (slowest_link(inter, intra), spans & shared),
                    (inter, spans & ~shared),
                )
                if used.any()
            ]
            self._families.fastest[key] = (
                min(link.latency_s for link in links),
                max(link.bandwidth_bytes_per_s for link in links),
            )
        return self._families.fastest[key]

    def _first_stage_tail(
        self, rows: _Rows, k: int, S: np.ndarray, D: np.ndarray, P: np.ndarray
    ) -> np.ndarray:
        """A lower bound on A_0 + O_0 (stage 0: the first that trains, on the (S, D) rank
        map of placement P): it all-reduces at least layer k's gradient (none: 0)."""
        first = rows.spread(rows.stacked(lambda costs: costs.grad_bytes)[:, k])
        latency, bandwidth = self._ring_links(S, D, P)
        steps = 2 * (D - 1)
        ring = steps * latency + steps / D * first / bandwidth
        alone = np.where(D > 1, ring, 0.0)
        return np.where(first > 0, alone + self.model.optimizer_s(first), 0.0)

    def _received_floors(
        self, rows: _Rows, S: np.ndarray, S_map: np.ndarray, D: np.ndarray, P: np.ndarray
    ) -> _Received:
        """Per row, lower bounds on what the S training stages (the last S of the (S_map, D)
        rank map of placement P) receive in their ops (`simulate.received_in_op`,
        `_received_table`); zeros for long models, whose thousands of rank maps would cost
        more than they prune."""
        if self.model.num_layers > DENSE_MAX_LAYERS or len(S) == 0:
            return _Received(*np.zeros((7, len(S))))
        # [group, rank map, field, q]: every group's table (the rank maps are the phase's).
        tables = np.stack(
            [self._received_table(view.costs.micro_batch_size) for view in rows.views]
        )
        index_of = self._boundary_rates()[0]
        S_map = S_map.astype(int)
        keys = zip(S_map.tolist(), D.astype(int).tolist(), P.tolist(), strict=True)
        index = [index_of[(S, D, placement_name(p))] for S, D, p in keys]
        # The training stages are the last S: the first of them is stage S_map − S.
        return _Received(*tables[rows.group, index, :, S_map - S.astype(int)].T)

    def _received_table(self, m: int) -> np.ndarray:
        """Per (S, D) rank map of this phase's shapes (the row) and q (stages q.. train),
        the fields of `_Received`: stage t's forward receives the activation over boundary
        t−1, its backward the gradient over boundary t, each at least its link's latency
        plus the fewest bytes any boundary carries (a gradient only after a layer that
        trains). Boundaries past a map's last stage (padding) carry nothing."""
        key = ("received", m)
        if key not in self._bottlenecks:
            _, latency, per_byte = self._boundary_rates()
            costs = self.costs(m)
            L = len(costs.boundary_bytes)
            inner = costs.boundary_bytes[: L - 1]  # positions 1..L−1: layer j−1's output
            trained = inner[costs.active[: L - 1]]
            crossed = per_byte > 0  # the padding has none
            fewest = float(inner.min()) if inner.size else 0.0
            fwd = np.where(crossed, latency + fewest * per_byte, 0.0)
            fewest = float(trained.min()) if trained.size else 0.0
            bwd = np.where(crossed & (trained.size > 0), latency + fewest * per_byte, 0.0)
            # Stage t's forward: boundary t−1 (np.pad would cost more than the table).
            shifted = np.concatenate([np.zeros((len(fwd), 1)), fwd[:, :-1]], axis=1)
            by_stage = shifted + bwd

            def suffix_sum(x: np.ndarray) -> np.ndarray:
                return np.cumsum(x[:, ::-1], axis=1)[:, ::-1]

            def suffix_max(x: np.ndarray) -> np.ndarray:
                return np.maximum.accumulate(x[:, ::-1], axis=1)[:, ::-1]

            table = np.stack(
                [
                    suffix_sum(shifted),  # from q on: stage q's forward receives too
                    suffix_sum(bwd),
                    suffix_max(shifted),
                    suffix_max(bwd),
                    suffix_max(by_stage),
                    shifted,
                    bwd,
                ],
                axis=1,
            )
            self._bottlenecks[key] = table
        return self._bottlenecks[key]

    def _boundary_rates(self) -> tuple[dict[tuple[int, int, str], int], np.ndarray, np.ndarray]:
        """Per (S, D, placement) rank map of this phase's shapes (the row), each boundary
        link's latency and time per byte (`CostModel.boundary_links`; zeros past the map's
        last stage)."""
        key = ("boundary rates",)
        if key not in self._bottlenecks:
            maps = {(shape.num_stages, shape.replicas, shape.placement) for shape in self.shapes()}
            self._bottlenecks[key] = self.model.boundary_rate_table(tuple(sorted(maps)))
        return self._bottlenecks[key]

    def _allreduce_bounds(
        self,
        rows: _Rows,
        k: int,
        S: np.ndarray,
        S_map: np.ndarray,
        D: np.ndarray,
        P: np.ndarray,
        M: np.ndarray,
        work: np.ndarray,
        release: np.ndarray,
    ) -> np.ndarray:
        """All-reduce terms of `_pipeline_bounds` (S training stages, the first holding layer
        k, on the (S_map, D) rank map, whose groups cross nodes alike), with A_k alone =
        λ_A + ρ_A·G_k and every
        all-reduce starting after `release` (a bound on the last stage's last op). With S ≤ G
        devices per node, a group crosses nodes iff the D replicas do not fit the ⌊G/S⌋
        pipelines of a node, and then every group crosses node 0's link; with S > G, each
        group spans D nodes and the ⌈D·S/G⌉ nodes' links carry 2(D−1)·G bytes in all.
        - The stage with the most gradient bytes (≥ G/S): its all-reduce alone and optimizer.
        - The average over k of M·c_k + A_k + O_k (every stage's own tail).
        - A node link all the all-reduces cross (or, with S > G, the busiest node's link at
          its average share) carries their bytes after `release`: "packed" maps only (the
          other placements' rings share other links; the terms above hold for any map, on
          its fastest ring link, `_ring_links`)."""
        model, cluster = self.model, self.cluster
        grads = rows.stacked(lambda costs: costs.grad_bytes)  # [group, layer]
        G = rows.spread(grads.sum(axis=1))
        per_node = cluster.devices_per_node
        packed, crosses = self._crosses(S_map, D)
        crosses = crosses & (P == 0)
        inter = model.inter_allreduce_link
        steps = 2 * (D - 1)
        many = D > 1

        def latency(link_latency) -> np.ndarray:
            return np.where(many, steps * link_latency, 0.0)

        def per_byte(link_bandwidth) -> np.ndarray:
            return np.where(many, steps / D / link_bandwidth, 0.0)

        ring_latency, ring_bandwidth = self._ring_links(S_map, D, P)
        lat, rate = latency(ring_latency), per_byte(ring_bandwidth)
        omega = model.optimizer_s(1.0)
        share = G / S
        busiest = release + np.where(share > 0, lat + rate * share, 0.0) + omega * share
        # Every stage holds an active layer; with parameters in each, every stage all-reduces.
        every = rows.spread((grads[:, k:] > 0).all(axis=1))
        own = (M * work + (rate + omega) * G) / S + np.where(every, lat, 0.0)
        bound = np.maximum(busiest, own)
        nodes_used = np.maximum(np.ceil(D * S_map / per_node), 1)
        link_bytes = np.where(packed, steps / D * G, steps * G / nodes_used)
        link = release + latency(inter.latency_s) + link_bytes / inter.bandwidth_bytes_per_s
        # Without gradient bytes no link carries any.
        return np.where(crosses & (G > 0), np.maximum(bound, link), bound)

    def _bottleneck(self, rows: _Rows, S: np.ndarray, kind: str = "c") -> np.ndarray | None:
        """Per row, the exact smallest largest stage sum of c (fwd + bwd + μ), "f" (fwd + μ)
        or "b" (bwd) over the partitions of its layers into S stages (memory and transfers
        ignored, so a lower bound on the largest stage's); None for long models, where the DP
        would cost more than it saves."""
        if self.model.num_layers > DENSE_MAX_LAYERS:
            return None
        return self._bottleneck_tables(rows.views, kind)[rows.group, S.astype(int) - 1]

    def _bottleneck_tables(self, views: tuple[_View, ...], kind: str) -> np.ndarray:
        """[view, S − 1]: `_bottleneck` of each view's layers, kept per (view, kind, m). The
        three kinds of every view not kept yet are one DP (rows of `partition.bottlenecks`):
        each kind is asked for."""

        def key(view: _View, name: str) -> tuple[str, str, int]:
            return (view.name, name, view.costs.micro_batch_size)

        missing = [view for view in views if key(view, kind) not in self._bottlenecks]
        if missing:
            per_layer = np.concatenate([view.per_layer() for view in missing])
            most = min(self.most_stages, len(missing[0].costs.fwd_s))
            values = bottlenecks(per_layer, missing[0].first + 1, most)
            mu = self.model.micro_batch_overhead_s
            for index, view in enumerate(missing):
                for row, (name, overhead) in enumerate((("c", mu), ("f", mu), ("b", 0.0))):
                    # Prefix sums in the DP: a hair of slack keeps the value a lower bound.
                    value = values[3 * index + row] * (1 - 1e-12) + overhead
                    self._bottlenecks[key(view, name)] = value
        return np.stack([self._bottlenecks[key(view, kind)] for view in views])

    # ------------------------------------------------------------------ one shape

    def pricing(self, shape: Shape, schedule: Schedule) -> StagePricing:
        """The cost model's stage pricing of a shape, on prefix sums (links, contention,
        calibration as `CostModel.evaluate` prices them)."""
        model = self.model
        S, M, m = shape.num_stages, shape.micro_batches, shape.micro_batch_size
        layers = self._layer_prefixes(m)
        links = self._rank_links(shape)
        # Boundary s at position j carries layer j−1's output, its gradient back if it trains.
        sends = links.latency[:, None] + layers.boundary_bytes[None, :] * links.per_byte[:, None]
        held = [in_flight(schedule, S, s, M) for s in range(S)]
        memory = layers.static[None, :] + np.array(held, dtype=float)[:, None] * layers.saved
        # 1F1B with M < S: the first S − M stages must run forward only.
        forward_only = max(0, S - M) if schedule == "1f1b" else 0
        # Memory is checked exactly on the simulated layout; here only rounding slack.
        slack = 1e-9 * float(memory[:, -1].max(initial=0.0)) + 2.0
        return StagePricing(
            fwd_prefix=layers.fwd,
            bwd_prefix=layers.bwd,
            grad_prefix=layers.grad,
            micro_batch_overhead_s=model.micro_batch_overhead_s,
            send_s=sends,
            grad_send_s=np.where(layers.gradient_back[None, :], sends, 0.0),
            allreduce_latency_s=links.allreduce_latency,
            allreduce_s_per_byte=links.allreduce_per_byte,
            optimizer_s_per_byte=model.optimizer_s_per_byte,
            memory_prefix=memory,
            memory_limit_bytes=self.memory_limit_bytes + slack,
            forwards_first=tuple(held),
            micro_batches=M,
            schedule=schedule,
            min_first_boundary=self.first_boundary,
            overhead_s=model.overhead_s(M * m),
            shared_links=links.shared,
            shared_latency_s=links.shared_latency,
            shared_s_per_byte=links.shared_per_byte,
            suffix_bottleneck=self._suffix_bottleneck(m),
            forward_only_layers=self.forward_only_layers,
            min_forward_only_stages=forward_only,
            receive_bytes=M * layers.boundary_bytes if self.forward_only_layers else None,
        )

    def _layer_prefixes(self, m: int) -> _LayerPrefixes:
        if m not in self._prefixes:
            costs = self.costs(m)

            def prefix(values: np.ndarray) -> np.ndarray:
                return np.concatenate([[0.0], np.cumsum(values)])

            self._prefixes[m] = _LayerPrefixes(
                fwd=prefix(costs.fwd_s),
                bwd=prefix(costs.bwd_s),
                grad=prefix(costs.grad_bytes),
                static=prefix(costs.static_bytes),
                saved=prefix(costs.saved_bytes_per_micro_batch),
                boundary_bytes=np.concatenate([[0.0], costs.boundary_bytes]),
                gradient_back=np.concatenate([[False], costs.active]),
            )
        return self._prefixes[m]

    def _rank_links(self, shape: Shape) -> _RankLinks:
        """What the rank map of (S, D) decides: each boundary's and each stage's link, and
        which node links the all-reduces share."""
        key = (shape.num_stages, shape.replicas, shape.placement)
        if key not in self._links:
            ranks = self.rank_array(shape)
            model, D = self.model, shape.replicas
            boundary = model.boundary_links(ranks)
            ring = [model.allreduce_links(ranks), model.inter_allreduce_link]
            steps = 2 * (D - 1)

            def latency(link: Link) -> float:
                return steps * link.latency_s if D > 1 else 0.0

            def per_byte(link: Link) -> float:
                return steps / D / link.bandwidth_bytes_per_s if D > 1 else 0.0

            self._links[key] = _RankLinks(
                latency=np.array([link.latency_s for link in boundary]),
                per_byte=np.array([1 / link.bandwidth_bytes_per_s for link in boundary]),
                allreduce_latency=np.array([latency(link) for link in ring[0]]),
                allreduce_per_byte=np.array([per_byte(link) for link in ring[0]]),
                shared=self._shared_links(ranks),
                shared_latency=latency(ring[1]),
                shared_per_byte=per_byte(ring[1]),
            )
        return self._links[key]

    def known_roots(self) -> dict[tuple[Shape, Schedule], float]:
        """The root bounds of this phase's shapes that a search of the same phase found
        (`_ROOTS`)."""
        key = (
            self.global_batch, self.frozen_layers, self.cached, self.forward_only_layers,
            self.pins,
        )  # fmt: skip
        return _ROOTS.setdefault(self.model, {}).setdefault(key, {})

    def keep_roots(self, count: int) -> bool:
        """Whether `count` more root bounds fit KEPT_ROOTS (counted if so)."""
        kept = _ROOTS.setdefault(self.model, {})
        total = kept.get("kept", 0) + count
        if total > KEPT_ROOTS:
            return False
        kept["kept"] = total
        return True

    def shared_tables(self, key: tuple) -> dict:
        """Partition tables that shapes with the same stages, micro-batch size, schedule and
        boundary links share (`PartitionSpace`; a table that depends on M names it)."""
        return self._shared_tables.setdefault(key, {})

    def _suffix_bottleneck(self, m: int) -> np.ndarray | None:
        """`partition.suffix_bottlenecks` of stage work at m, with a hair of slack (prefix
        sums); None for long models, where the O(L³) table would cost more than it saves.
        Built for every micro-batch size of this phase's shapes at once (one DP)."""
        if self.model.num_layers > DENSE_MAX_LAYERS:
            return None
        if ("suffix", m) not in self._bottlenecks:
            sizes = {shape.micro_batch_size for shape in self.shapes()} | {m}
            missing = sorted(size for size in sizes if ("suffix", size) not in self._bottlenecks)
            work = [self.costs(size).fwd_s + self.costs(size).bwd_s for size in missing]
            tables = suffix_bottlenecks(np.stack(work), self.most_stages)
            for size, table in zip(missing, tables, strict=True):
                self._bottlenecks[("suffix", size)] = table * (1 - 1e-12)
        return self._bottlenecks[("suffix", m)]

    def _shared_links(self, ranks: np.ndarray | Sequence[Sequence[int]]) -> np.ndarray:
        """Per node link crossed by two or more stages' all-reduces (deduplicated): which."""
        nodes = self.model.node_map(ranks)
        S = nodes.shape[1]
        spans = np.flatnonzero(nodes.min(axis=0) != nodes.max(axis=0))  # rings that leave a node
        if len(spans) < 2:
            return np.zeros((0, S), dtype=bool)
        nodes = nodes[:, spans]
        if (int(nodes.max()) + 1) * len(spans) <= SHARED_LINK_CELLS:
            # [node, spanning stage] at once: its distinct rows of two or more are the links'.
            touched = np.zeros((int(nodes.max()) + 1, len(spans)), dtype=bool)
            touched[nodes, np.arange(len(spans))] = True
            touched = touched[np.count_nonzero(touched, axis=1) > 1]
            # Rows as packed bytes: ordered as the rows are, and far fewer to sort.
            packed = np.unique(np.packbits(touched, axis=1), axis=0)
            patterns = np.unpackbits(packed, axis=1, count=len(spans)).astype(bool)
        else:
            # From the (node, stage) pairs, never a [node, stage] array: a million nodes by
            # thousands of stages would not fit.
            pairs = counted_keys(nodes * len(spans) + np.arange(len(spans)))[0]  # node, stage
            node, stage = np.divmod(pairs, len(spans))
            starts = np.flatnonzero(np.r_[True, node[1:] != node[:-1]])
            counts = np.diff(np.r_[starts, len(node)])
            shared = counts > 1
            found = {
                tuple(stage[a : a + c]) for a, c in zip(starts[shared], counts[shared], strict=True)
            }
            patterns = np.zeros((len(found), len(spans)), dtype=bool)
            for row, stages in enumerate(found):
                patterns[row, list(stages)] = True
            patterns = np.unique(patterns, axis=0).reshape(len(found), len(spans))
        rows = np.zeros((len(patterns), S), dtype=bool)
        rows[:, spans] = patterns
        return rows

    def solve(
        self,
        runner_ups: int = 2,
        faster_than_s: float = math.inf,
        hint: Layout | None = None,
        within_s: float = 0.0,
        collect: int = 0,
    ) -> PhaseSolution:
        """Best-first branch and bound over (shape, schedule, partial partition): pop the
        smallest bound; a shape opens into its first stage's choices, a partial partition
        into the next stage's, a complete one is simulated. Children whose bound reaches the
        best step are dropped; the search ends when the smallest bound left does, so `best`
        is the exhaustive optimum (up to PRUNE_TOLERANCE), or when the work limit is spent
        (then `proven` is False and `lower_bound_s` the smallest bound left).

        `faster_than_s`: only a layout faster than this matters to the caller (the plan's
        other option for the phase already costs that much), so bounds at or above it prune
        too; `NothingFasterError` when no layout is faster.

        `hint`: a layout likely near the optimum (the previous phase's placement), simulated
        first when the space holds it, so that the search prunes against it from the start;
        the result is the same optimum, found with fewer nodes opened.

        `collect` > 0: the search is for the `collect` fastest layouts whose step is at most
        `within_s`, not for the best alone (`layouts_within`): bounds prune at `within_s`,
        then at the `collect`-th fastest step simulated; they come back as the best and its
        runner-ups (ask for `collect` − 1 of them)."""
        shapes, columns = self.shapes(), self.shape_columns()
        run = _Run(self, faster_than_s, within_s, collect)
        which, gpipe = self.schedule_rows(columns)
        names: tuple[Schedule, Schedule] = ("1f1b", "gpipe")
        pairs = zip(which.tolist(), gpipe.tolist(), strict=True)
        candidates = [(shapes[i], names[g]) for i, g in pairs]
        run.add_all(self.shape_bounds(candidates, columns[which], gpipe), candidates)
        if hint is not None:
            run.seed(hint)
        run.search()
        self.work_done = run.work  # a plan's budget counts it (`PlanWork.solve`)
        if faster_than_s < math.inf and not (run.simulated and run.best_s < faster_than_s):
            raise NothingFasterError(faster_than_s, run.stopped_at)
        if not run.simulated and run.stopped_at is not None:  # collecting, out of work
            raise NothingFasterError(run.limit(), run.stopped_at)
        if not run.simulated and run.gave_up:
            raise DoesNotFitError(lambda: self._gave_up_message(run.work, shapes))
        if not run.simulated:
            raise DoesNotFitError(lambda: self._does_not_fit_message(shapes))
        return run.solution(runner_ups)

    # ------------------------------------------------------------------ nothing fits

    def problem(
        self, shape: Shape, schedule: Schedule, ranks: tuple[tuple[int, ...], ...]
    ) -> PartitionProblem:
        """The min-bottleneck partition problem of a shape (§4.9), on the links
        `CostModel.evaluate` uses."""
        costs = self.costs(shape.micro_batch_size)
        crosses = self.model.boundary_crosses_nodes(ranks)
        L = self.model.num_layers
        # Boundary at position j carries layer j−1's output, and its gradient back if that
        # layer trains.
        needs_grad = np.concatenate([[False], costs.active])
        size = np.concatenate([[0.0], costs.boundary_bytes])
        transfer = np.array(
            [
                np.where(needs_grad, 2.0, 1.0)
                * (link.latency_s + size / link.bandwidth_bytes_per_s)
                for link in (self.model.p2p_link(False), self.model.p2p_link(True))
            ]
        )
        transfer[:, 0] = 0.0
        transfer[:, L] = 0.0
        S, M = shape.num_stages, shape.micro_batches
        return PartitionProblem(
            compute_s=costs.fwd_s + costs.bwd_s,
            transfer_s=transfer,
            link_kind=tuple(int(c) for c in crosses),
            static_bytes=costs.static_bytes,
            saved_bytes=costs.saved_bytes_per_micro_batch,
            in_flight=tuple(in_flight(schedule, S, s, M) for s in range(S)),
            memory_limit_bytes=self.memory_limit_bytes,
            min_first_boundary=self.first_boundary,
        )

    def smallest_peak_memory_bytes(
        self, shapes: list[Shape], work: MessageWork | None = None
    ) -> tuple[int, int, int]:
        """The smallest per-device peak over the shapes and schedules (min-max memory DP),
        but 1F1B with fewer micro-batches than stages, whose partitions the DP cannot hold to
        leading forward-only stages (GPipe with the same shape runs any partition); with
        the shapes of the most stages (the least memory each) first, until `work` is spent
        (a layer per bisection: at least one shape is checked). Every micro-batch size of
        each (S, D): the smallest uses the least memory in float32, but under bf16 autocast's
        weight copies are held once per micro-batch in flight, and more, smaller ones can
        take more (the fifty-eighth round: 79.7 MiB said, where a layout of the largest fit in
        78.8). Returns (bytes, shapes checked, shapes)."""
        best = np.inf
        by_size: dict[tuple[int, int, int], Shape] = {}
        for shape in shapes:
            if shape.placement == OTHER_PLACEMENTS:
                continue  # memory does not depend on the map
            by_size.setdefault((shape.num_stages, shape.replicas, shape.micro_batch_size), shape)
        checked = 0
        for key in sorted(by_size, key=lambda k: (-k[0], -k[1], k[2])):
            if checked and work is not None and work.left <= 0:
                break
            shape = by_size[key]
            for schedule in self.schedules(shape.num_stages, shape.micro_batches):
                if schedule == "1f1b" and shape.micro_batches < shape.num_stages:
                    continue
                problem = self.problem(shape, schedule, self.layout_ranks(shape))
                best = min(best, _min_max_memory(problem, self.pins.boundaries))
                if work is not None:
                    work.left -= self.model.num_layers
            checked += 1
        return int(np.ceil(best + self.model.reserve_bytes)), checked, len(by_size)

    def _gave_up_message(self, work: int, shapes: list[Shape]) -> str:
        """Why a search that stopped at NOTHING_FITS_WORK × its limit found nothing, and the
        remedies that may fit: none but more memory below a floor no layout gets under
        (`_floor_remedy`; the forty-eighth session left this message offering more devices
        or micro-batches there)."""
        what = "with the pinned layout" if self.pins != Pins() else "in any layout"
        remedy = self._floor_remedy(shapes) or (
            "(use devices with more memory, more devices or a smaller micro-batch, or pin a "
            "layout that fits: --stages, --boundaries, --micro-batches)"
        )
        return (
            f"no layout that fits memory was found {what} in {work:,} units of search "
            f"({NOTHING_FITS_WORK}× the work limit, where a search with nothing that fits "
            f"stops); a device has {_gib(self.cluster.device_memory_bytes)} {remedy}"
        )

    def _does_not_fit_message(self, shapes: list[Shape]) -> str:
        # Bounded: a 4,096-device cluster has thousands of (S, D) pairs, each a bisection of
        # partition solves; the message must not take longer than the search did.
        smallest, checked, pairs = self.smallest_peak_memory_bytes(shapes, MessageWork())
        what = "with the pinned layout" if self.pins != Pins() else "even spread over all devices"
        least, has = _sizes_apart(smallest, self.cluster.device_memory_bytes)
        if checked == pairs:
            found = f"the smallest achievable per-device memory is {least}"
        else:
            found = (
                f"the smallest per-device memory of the {checked} layout shapes with the most "
                f"stages (of {pairs}; the rest not checked) is {least}"
            )
        # A memory no flag gave is named by its source (seventeenth round: a profile's
        # device.memory_bytes of 1 read as "a device has 0.0 MiB", unexplained).
        source = self.cluster._memory_source
        origin = f" ({source})" if source else ""
        remedy = self._floor_remedy(shapes)
        if remedy is None and self.pins != Pins():
            remedy = self._pinned_remedy()
        elif remedy is None:
            # Every micro-batch size was priced (`smallest_peak_memory_bytes`): only more
            # stages, which need more devices, spread the layers thinner.
            more = ", or more devices" if self.most_stages < self.max_stages else ""
            remedy = f"(use devices with more memory{more})"
        if smallest <= self.cluster.device_memory_bytes:
            # The min-max bound holds every stage to the same schedule; a stage after
            # forward-only ones holds more in flight, which the simulator prices and the bound
            # does not: a figure below the device's would contradict the refusal (forty-
            # seventh round: "smallest achievable … is 7.99 GiB but a device has 10.00 GiB").
            found = (
                "every layout priced peaks above a device's memory (the least a bound over "
                f"stages gives, {least}, leaves out what stages after frozen ones hold)"
            )
            return f"the model does not fit {what}: {found}; a device has {has}{origin} {remedy}"
        return f"the model does not fit {what}: {found} but a device has {has}{origin} {remedy}"

    def _floor_remedy(self, shapes: list[Shape]) -> str | None:
        """What no layout gets under, where a device's memory is below it, in parentheses:
        the cost model's reserve (`CostModel.reserve_bytes`), alone or with the fewest layers
        a stage holds (the largest layer's weights and optimizer state, or stage 0's whole
        prefix). None where more stages or other pins may still fit. Found by the sixty-eighth
        round: `--device-memory 60MiB` under the CPU's 64 MiB reserve was told "use ... more
        devices, or another micro-batch size", neither of which can fit it.

            self._floor_remedy(shapes)
            # "(each device keeps 64.0 MiB for the runtime (the cost model's reserve), as much
            # as a device has or more; no count of devices or micro-batch size fits it: use
            # devices with more memory)"
        """
        reserve, has = self.model.reserve_bytes, self.cluster.device_memory_bytes
        kept = f"each device keeps {_gib(reserve)} for the runtime (the cost model's reserve)"
        whatever = "no count of devices or micro-batch size fits it: use devices with more memory)"
        if reserve >= has:
            return f"({kept}, as much as a device has or more; {whatever}"
        static = self.costs(min(shape.micro_batch_size for shape in shapes)).static_bytes
        fewest = max(float(static[: self.first_boundary].sum()), float(static.max()))
        if reserve + fewest > has:
            return (
                f"({kept}, and the fewest layers a stage holds keep {_gib(fewest)} of weights "
                f"and optimizer state beside it; {whatever}"
            )
        return None

    def _pinned_remedy(self) -> str:
        """What bounds a pinned layout's memory and a change that fits, in parentheses: the
        first pin whose change alone fits by the min-max bound (more stages, the fewest that
        fit, for a pinned stage count; dropping a pinned partition, micro-batch count or
        schedule), else dropping every flag that pins, else devices with more memory.
        Found by the sixty-sixth round: `--stages 1` past a device's memory was told "use
        devices with more memory, more devices, or another micro-batch size", and neither
        of the last two plans (one stage holds every layer's weights and optimizer state).
        The tries share one bound, MESSAGE_WORK, as the figure before them has its own.

            self._pinned_remedy()
            # "(--stages 1 bounds it: a stage holds its layers' weights and optimizer state
            # whatever the devices or micro-batches; use --stages 2, the fewest stages that
            # fit; or use devices with more memory)"
        """
        pins, work = self.pins, MessageWork()
        stages = len(pins.boundaries) - 1 if pins.boundaries is not None else pins.num_stages
        given = [] if stages is None else [_pinned_stages(replace(pins, num_stages=stages))]
        bound = "bound" if pins.boundaries is not None and stages != 1 else "bounds"
        tries: list[tuple[str, str, Pins]] = []
        if pins.boundaries is not None:
            tries.append(
                (
                    f"{given[0]} {bound} it",
                    "drop --boundaries (another partition into as many stages fits)",
                    replace(pins, num_stages=stages, boundaries=None),
                )
            )
        if stages is not None:
            cause = f"{given[0]} {bound} it: a stage holds its "
            cause += "layers' weights and optimizer state whatever the devices or micro-batches"
            use = "drop --boundaries and use" if pins.boundaries is not None else "use"
            for more in range(stages + 1, self.most_stages + 1):
                change = f"{use} --stages {more}, the fewest stages that fit"
                tries.append((cause, change, replace(pins, num_stages=more, boundaries=None)))
        # A replica count is pinned by no flag (a plan's own comparisons pin it): not named.
        for flag, value, unpinned in (
            ("--micro-batches", pins.micro_batches, replace(pins, micro_batches=None)),
            ("--schedule", pins.schedule, replace(pins, schedule=None)),
        ):
            if value is not None:
                given.append(f"{flag} {value}")
                tries.append((f"{flag} {value} bounds it", f"drop {flag}", unpinned))
        if len(given) > 1:
            both = f"{', '.join(given[:-1])} and {given[-1]}"
            tries.append((f"{both} bound it", "drop them", Pins(replicas=pins.replicas)))
        for cause, change, relaxed in tries:
            if work.left <= 0:
                break
            if self._fits_with(relaxed, work):
                return f"({cause}; {change}; or use devices with more memory)"
        return "(use devices with more memory)"

    def _fits_with(self, pins: Pins, work: MessageWork) -> bool:
        """Whether the smallest per-device peak of this phase with `pins` instead of its own
        (the min-max bound, `smallest_peak_memory_bytes`, within `work`) fits a device."""
        search = PhaseSearch(
            self.model,
            self.global_batch,
            self.frozen_layers,
            self.cached,
            pins,
            forward_only=self.forward_only_layers > 0,
        )
        try:
            shapes = search.shapes()
        except PipeplanError:  # no shape at all with these pins
            return False
        smallest, _, _ = search.smallest_peak_memory_bytes(shapes, work)
        return smallest <= self.cluster.device_memory_bytes


class _Run:
    """One best-first search: the heap of (bound, order, kind, item), the best step so far,
    the layouts simulated and the work done. For long models (more than DENSE_MAX_LAYERS
    layers) the partition tree of an opened shape waits in `later` until every shape has
    been opened and its time-balanced partition simulated: their nodes are costly and their
    bounds loose, so the budget goes to comparing shapes first."""

    def __init__(
        self,
        phase: PhaseSearch,
        faster_than_s: float = math.inf,
        within_s: float = 0.0,
        collect: int = 0,
    ):
        self.phase = phase
        self.faster_than_s = faster_than_s
        self.within_s = within_s
        self.collect = collect  # `PhaseSearch.solve`: how many of the fastest are wanted
        self.kept: list[float] = []  # the `collect` fastest steps so far, negated (a max-heap)
        self.counted: set[Layout] = set()  # a layout may be simulated twice: counted once
        self.dense = phase.model.num_layers <= DENSE_MAX_LAYERS
        self.heap: list[tuple[float, int, str, object]] = []
        self.later: list[tuple[float, int, str, object]] = []
        self.order = itertools.count()
        self.best_s = math.inf
        # `limit`: below the best step (collecting: at most within_s), below faster_than_s.
        self._limit = min(faster_than_s, within_s) if collect else faster_than_s
        self.held = self._limit < math.inf  # (the caller has a layout at `limit`)
        self.simulated: list[tuple[float, int, Evaluation]] = []
        self.gave_up = False  # nothing that fits found by NOTHING_FITS_WORK × the limit
        self.work = 0
        self.stopped_at: float | None = None
        # Tens of layers: per stage count, the candidates and their closed-form bounds; a
        # shape's root bound (`partition.root_bounds`) once computed.
        self.by_stages: dict[int, list[tuple[tuple[Shape, Schedule], float]]] = {}
        self.roots: dict[tuple[Shape, Schedule], float] = {}
        # The min-max tables of root batches for the trees that may open (`bound_roots`), at
        # most KEPT_TABLE_BYTES of them.
        self.root_tables: dict[tuple[Shape, Schedule], dict[str, np.ndarray]] = {}
        self.kept_bytes = 0
        # Sub-searches (`sub_searches`): the work at which the next node opened is dived.
        self.next_dive: float = math.inf
        self.dives = 0

    def push(self, bound: float, kind: str, item: object, later: bool = False) -> None:
        if bound < self.limit():
            heapq.heappush(
                self.later if later else self.heap, (bound, next(self.order), kind, item)
            )

    def limit(self) -> float:
        return self._limit

    def set_best(self, step_s: float) -> None:
        """A layout of step `step_s` simulated: the best so far and the limit follow (the
        limit is read on every push, a million times in a long model's plan). Collecting
        (`PhaseSearch.solve`), the limit is `within_s`, then the `collect`-th fastest step
        (`count`)."""
        self.best_s = min(self.best_s, step_s)
        if not self.collect:
            self._limit = min(self.best_s * (1 - PRUNE_TOLERANCE), self.faster_than_s)

    def count(self, evaluation: Evaluation) -> None:
        """Collecting: one more layout within reach; once `collect` are, the limit is the
        slowest of the fastest `collect`."""
        step_s = evaluation.step_s
        if step_s <= self.within_s and evaluation.layout not in self.counted:
            self.counted.add(evaluation.layout)
            heapq.heappush(self.kept, -step_s)
            if len(self.kept) > self.collect:
                heapq.heappop(self.kept)
            if len(self.kept) == self.collect:  # only faster ones matter now
                self.within_s = -self.kept[0] * (1 + PRUNE_TOLERANCE)
                self._limit = min(self.within_s, self.faster_than_s)

    def search(self) -> None:
        while True:
            if not (self.heap and self.heap[0][0] < self.limit()):
                if not self.later:
                    return
                self.heap, self.later = self.later, []
                continue
            # Past the plan's share too (`PlanWork.phase_limit`): a phase whose share is spent
            # still needs a layout that fits (the forty-sixth round: the 76th of 100 phases
            # had 52 units left and failed the plan at 520).
            if not self.simulated and self.work > NOTHING_FITS_WORK * max(
                self.phase.work_limit, DEFAULT_WORK_LIMIT
            ):
                self.gave_up = True
                return
            # (a caller that holds a layout, the one it prunes at, needs none that fits: its
            # search stops at its limit with its smallest bound, not "nothing faster" after
            # NOTHING_FITS_WORK × it, which read as proven: the eighty-ninth round's plans
            # 14–18 % slower than one a pin found, said at most 0.4 %, or nothing)
            if self.work > self.phase.work_limit and (self.simulated or self.held):
                self.sub_searches()
                if self.heap:  # else every part was proven: so is the search
                    self.stop()
                return
            bound, _, kind, item = heapq.heappop(self.heap)
            if kind == "shape":
                self.open_shape(*item, bound)  # type: ignore[misc]
            elif kind == "tree":
                self.open_tree(*item)  # type: ignore[misc]
            elif kind == "node":
                self.open_node(*item)  # type: ignore[misc]
            else:
                self.simulate(*item)  # type: ignore[misc]

    def sub_searches(self) -> None:
        """Out of work, a search of tens of layers goes on as the sub-searches a user could
        pin: what waits is split by (stage count, schedule), the node assignments' maps
        (`costmodel.MAP`) apart from the others, and each part is searched
        best-first alone, diving now and then (DIVE_WORK), within a phase's work limit,
        until its smallest bound reaches the best step (that part proven) or its limit is
        spent; all of them within `sub_search_limit`. The part whose dive found the fastest
        layout goes first: one greedy dive into each (a few expansions) orders them. What
        is left waits again, so the proof (`stop`) covers every part; when none is left the
        search is proven. Not for long models (whose partial partitions are costly and whose
        searches reach their limit anyway) nor when collecting (`layouts_within`)."""
        if not self.dense or self.collect or self.phase.pins.boundaries is not None:
            return
        until = self.work + self.phase.sub_search_limit
        parts: dict[tuple[int, str, bool], list] = {}
        for entry in self.heap + self.later:
            shape, schedule = entry[3][:2]  # type: ignore[index]
            key = (shape.num_stages, schedule, shape.placement.startswith(MAP))
            parts.setdefault(key, []).append(entry)
        self.heap, self.later = [], []
        found: dict[tuple[int, str, bool], float] = {}
        for key, entries in parts.items():  # one dive each, to order them
            heapq.heapify(entries)
            self.heap, simulated = entries, len(self.simulated)
            self.search_part(until, dives=1)
            found[key] = min((step for step, *_ in self.simulated[simulated:]), default=math.inf)
            parts[key] = self.heap
        for key in sorted(parts, key=lambda key: found[key]):
            self.heap = parts[key]
            self.search_part(min(until, self.work + self.phase.work_limit))
            parts[key] = self.heap
        self.heap = [e for entries in parts.values() for e in entries if e[0] < self.limit()]
        heapq.heapify(self.heap)

    def search_part(self, until: float, dives: int | None = None) -> None:
        """Best-first over `heap` (one part, `sub_searches`), diving every DIVE_WORK, until
        its smallest bound reaches the limit, the work reaches `until`, or (`dives`) that
        many dives are done."""
        self.next_dive, self.dives = self.work, 0
        while self.heap and self.heap[0][0] < self.limit() and self.work < until:
            if dives is not None and self.dives >= dives:
                break
            bound, _, kind, item = heapq.heappop(self.heap)
            if kind == "shape":
                self.open_shape(*item, bound)  # type: ignore[misc]
            elif kind == "tree":
                self.open_tree(*item)  # type: ignore[misc]
            elif kind == "node":  # its bound holds for its children too
                self.open_node(*item, floor=bound)  # type: ignore[misc]
            else:
                self.simulate(*item)  # type: ignore[misc]
        self.next_dive = math.inf

    def stop(self) -> None:
        """Out of work: what is proven is the smallest bound still waiting. The one-stage
        shapes still waiting (one partition each) are simulated first, so running out of
        work never loses a plain data-parallel layout to the wider space's deep trees."""
        waiting = [entries[0][0] for entries in (self.heap, self.later) if entries]
        self.stopped_at = min(min(waiting), self.best_s)
        L = self.phase.model.num_layers
        for bound, _, kind, item in sorted(self.heap + self.later, key=lambda e: e[:2]):
            shape, schedule = item[:2]  # type: ignore[index]
            if kind == "shape" and shape.num_stages == 1 and bound < self.limit():
                placements = [shape.placement]
                if shape.placement == OTHER_PLACEMENTS:
                    placements = list(self.phase.placements(1, shape.replicas)[1:])
                for placement in placements:
                    self.simulate(replace(shape, placement=placement), schedule, (0, L))

    def seed(self, hint: Layout) -> None:
        """Simulate `hint`'s placement with this phase's freeze point, if the space holds it
        (its shape a candidate, its schedule allowed, its partition a leaf of the shape's
        tree): a layout outside the space must never become the answer."""
        search = self.phase
        # Its rank map must be one of the family's (the previous phase's placement is).
        placement = search.placement_of(hint)
        if placement is None:
            return
        shape = Shape(
            hint.num_stages, hint.replicas, hint.micro_batches, hint.micro_batch_size, placement
        )
        pinned = search.pins.boundaries
        if (
            not search.holds(shape)
            or hint.schedule not in search.schedules(shape.num_stages, shape.micro_batches)
            or (pinned is not None and tuple(pinned) != hint.boundaries)
            or not self.space(shape, hint.schedule).holds(hint.boundaries)
        ):
            return
        self.simulate(shape, hint.schedule, hint.boundaries)

    def add_all(self, bounds: np.ndarray, candidates: list[tuple[Shape, Schedule]]) -> None:
        """The candidates at their closed-form bounds, as one heap built at once (hundreds a
        phase, thousands for long models: pushed one by one, 5 % of a plan); root batches
        (`bound_roots`) are for tens of layers only."""
        limit, values = self.limit(), bounds.tolist()
        self.heap.extend(
            (bound, next(self.order), "shape", candidate)
            for bound, candidate in zip(values, candidates, strict=True)
            if bound < limit
        )
        heapq.heapify(self.heap)
        if self.dense:
            for bound, candidate in zip(values, candidates, strict=True):
                self.by_stages.setdefault(candidate[0].num_stages, []).append((candidate, bound))

    def open_shape(self, shape: Shape, schedule: Schedule, bound: float = 0.0) -> None:
        search = self.phase
        if shape.placement == OTHER_PLACEMENTS:
            # Its bound holds for each of the family's other maps: they wait at it.
            for placement in search.placements(shape.num_stages, shape.replicas)[1:]:
                self.push(bound, "shape", (replace(shape, placement=placement), schedule))
            return
        pinned = search.pins.boundaries
        if (
            pinned is None
            and search.model.num_layers <= DENSE_MAX_LAYERS
            and self.limit() < math.inf
        ):
            # Most shapes' trees would be pruned at their root: bound the roots of every
            # waiting shape with this many stages at once, and wait again at the root's bound
            # (before any layout is simulated, all would wait: the first tree opens at once).
            if (shape, schedule) not in self.roots:
                self.bound_roots(shape, schedule)
            root = self.roots[(shape, schedule)]
            if root > bound:
                self.push(root, "shape", (shape, schedule))
                return
        if pinned is not None:
            layout = search.layout(shape, schedule, tuple(pinned))
            if _runs(layout, search):
                works, _ = search.model.stages(layout)
                bound = step_lower_bound_s(works, shape.micro_batches, schedule)
                overhead = search.model.step_overhead_s(layout)
                self.push(bound + overhead, "leaf", (shape, schedule, layout.boundaries))
            return
        space = self.space(shape, schedule)
        self.adopt_root_tables(shape, schedule, space)
        if search.model.num_layers > DENSE_MAX_LAYERS:
            # Long models, where nodes are costly and bounds far from tight: every shape's
            # time-balanced partition first; its tree waits (`later`) and is built anew.
            self.work += WORK_PER_TABLE_STAGE * shape.num_stages
            boundaries = self.long_heuristic(shape, schedule, space)
            if boundaries is not None and self.leaf_bound(space, boundaries) < self.limit():
                self.simulate(shape, schedule, boundaries)
            self.push(bound, "tree", (shape, schedule), later=True)
            return
        self.open_tree(shape, schedule, space)

    def bound_roots(self, shape: Shape, schedule: Schedule) -> None:
        """`partition.root_bounds` of (shape, schedule) and of every other candidate with as
        many stages whose closed-form bound is still below the limit (one batch)."""
        limit = self.limit()
        waiting = [(shape, schedule)] + [
            key
            for key, bound in self.by_stages.get(shape.num_stages, [])
            if bound < limit and key not in self.roots and key != (shape, schedule)
        ]
        self.work += WORK_PER_TABLE_STAGE * shape.num_stages
        known = self.phase.known_roots()  # (those another search of the phase bounded)
        self.roots.update((key, known[key]) for key in waiting if key in known)
        waiting = [key for key in waiting if key not in self.roots]
        if not waiting:
            return
        spaces = [self.space(*key) for key in waiting]
        shapes = [shape for shape, _ in waiting]  # both schedules share three tables
        kept: dict[int, dict[str, np.ndarray]] = {}
        roots = root_bounds(spaces, shapes, kept, limit)
        keep = self.phase.keep_roots(len(waiting))
        for key, root in zip(waiting, roots, strict=True):
            self.roots[key] = float(root)
            if keep:
                known[key] = float(root)
        # The tables of the trees that may open, kept for them while they fit the budget
        # (a constant: a space is not kept, and neither are thousands of shapes' tables).
        for row in sorted(kept, key=lambda row: roots[row]):
            size = sum(table.nbytes for table in kept[row].values())
            if self.kept_bytes + size > KEPT_TABLE_BYTES:
                break
            self.root_tables[waiting[row]] = kept[row]
            self.kept_bytes += size

    def adopt_root_tables(self, shape: Shape, schedule: Schedule, space: PartitionSpace) -> None:
        """Give an opening tree the tables its root batch kept (`bound_roots`), if any."""
        tables = self.root_tables.pop((shape, schedule), None)
        if tables is not None:
            self.kept_bytes -= sum(table.nbytes for table in tables.values())
            space.adopt(tables)

    def space(self, shape: Shape, schedule: Schedule) -> PartitionSpace:
        """The shape's partition space. Not kept once its root is bounded: thousands of
        shapes' tables would hold gigabytes, and the few trees that open rebuild theirs."""
        search = self.phase
        links = search._rank_links(shape)  # the tables price transfers: same links, same tables
        key = (
            shape.num_stages,
            shape.micro_batch_size,
            schedule,
            links.latency.tobytes(),
            links.per_byte.tobytes(),
        )
        return PartitionSpace(search.pricing(shape, schedule), search.shared_tables(key))

    def open_tree(
        self, shape: Shape, schedule: Schedule, space: PartitionSpace | None = None
    ) -> None:
        """Expand a shape's partition tree from its root; for tens of layers the first
        shape's greedy descent in its bounds is simulated first (a layout to prune against)."""
        space = space or self.space(shape, schedule)
        L = self.phase.model.num_layers
        self.work += WORK_PER_TABLE_STAGE * shape.num_stages * (1 + L // 200)
        if self.best_s == math.inf and L <= DENSE_MAX_LAYERS:
            boundaries = _dived(space)
            if boundaries is not None and self.leaf_bound(space, boundaries) < self.limit():
                self.simulate(shape, schedule, boundaries)
        self.open_node(shape, schedule, space, space.root())

    def long_heuristic(
        self, shape: Shape, schedule: Schedule, space: PartitionSpace
    ) -> tuple[int, ...] | None:
        """The time-balanced partition, or when it does not fit memory the min-bottleneck
        one (which fits whenever any partition does)."""
        balanced = space.balanced()
        if balanced is not None:
            return balanced
        self.work += WORK_PER_TABLE_STAGE * shape.num_stages * 10
        ranks = self.phase.layout_ranks(shape)
        result = solve_partition(self.phase.problem(shape, schedule, ranks))
        return None if result is None else result.boundaries

    def open_node(
        self,
        shape: Shape,
        schedule: Schedule,
        space: PartitionSpace,
        node: Node,
        floor: float = 0.0,
    ):
        """Push the node's children; in a sub-search when a dive is due (`next_dive`), follow
        the child of smallest bound down to a complete layout and simulate it. `floor`: a
        bound of the node (a sub-search's children wait at least at it)."""
        dive = self.work >= self.next_dive
        if dive:
            self.next_dive, self.dives = self.work + DIVE_WORK, self.dives + 1
        next_node: Node | None = node
        while next_node is not None:
            next_node, floor = self.expand(shape, schedule, space, next_node, dive, floor)

    def expand(
        self,
        shape: Shape,
        schedule: Schedule,
        space: PartitionSpace,
        node: Node,
        dive: bool,
        floor: float,
    ) -> tuple[Node | None, float]:
        """Push the node's children, each at least at `floor`; diving, the one of smallest
        bound is returned instead, with its bound (or simulated, when complete)."""
        # Collecting, a dominated forward-only prefix is a layout like any other: wanted.
        children = space.expand(node, self.limit(), searched=not self.collect)
        self.work += WORK_PER_EXPANSION + len(children) * (WORK_PER_CHILD + node.depth // 100)
        follow = -1
        if dive and children:
            follow = min(range(len(children)), key=lambda n: children[n][0])
        deeper = None
        for n, (bound, child) in enumerate(children):
            bound = max(bound, floor)
            if child.depth == shape.num_stages:
                # The complete layout's own bound (all windows) often spares a simulation.
                bound = max(bound, self.leaf_bound(space, child.boundaries))
                if n == follow and bound < self.limit():
                    self.simulate(shape, schedule, child.boundaries)
                else:
                    self.push(bound, "leaf", (shape, schedule, child.boundaries))
            elif n == follow:
                deeper, floor = child, bound
            else:
                self.push(bound, "node", (shape, schedule, space, child))
        return deeper, floor

    def leaf_bound(self, space: PartitionSpace, boundaries: tuple[int, ...]) -> float:
        self.work += WORK_PER_LEAF_STAGE * (len(boundaries) - 1)
        return space.leaf_bound(boundaries)

    def simulate(self, shape: Shape, schedule: Schedule, boundaries: tuple[int, ...]) -> None:
        search = self.phase
        layout = search.layout(shape, schedule, boundaries)
        self.work += _simulation_work(shape, schedule)
        evaluation = search.evaluate(layout)
        if not evaluation.fits or not _runs(layout, search):
            return
        self.simulated.append((evaluation.step_s, next(self.order), evaluation))
        self.set_best(evaluation.step_s)
        if self.collect:
            self.count(evaluation)

    def solution(self, runner_ups: int) -> PhaseSolution:
        ranked = [e for _, _, e in sorted(self.simulated, key=lambda item: item[:2])]
        best = ranked[0]
        # Each other layout once, priced alike one layout (`alike_key`: the same layout on
        # other nodes is no other choice; a plan is held to it, `plan.check_plan_prices`).
        # Collecting (`layouts_within`), every layout: its count tells whether it had them all.
        per_node = self.phase.cluster.devices_per_node

        def key(layout: Layout) -> object:
            return layout if self.collect else alike_key(layout, per_node)

        seen = {key(best.layout)}
        others = []
        for evaluation in ranked[1:]:
            if len(others) == runner_ups:
                break
            if (told := key(evaluation.layout)) not in seen:
                seen.add(told)
                others.append(evaluation)
        proven = self.stopped_at is None
        lower = best.step_s if proven else float(self.stopped_at)
        return PhaseSolution(best, others, len(self.simulated), proven, lower)


@functools.lru_cache(maxsize=256)
def _windows_from_zero_cached(S: bytes, M: bytes) -> np.ndarray:
    """`windows_from_zero` of float arrays given as bytes: every phase and micro-batch size
    asks for the same few (S, M) candidates, each (S, M) pair computed once (the placements
    and replica counts of a shape repeat it)."""
    S_, M_ = np.frombuffer(S), np.frombuffer(M)
    # One float key per pair (both are small whole numbers: exact).
    _, first, inverse = np.unique(S_ * 2.0**32 + M_, return_index=True, return_inverse=True)
    z = windows_from_zero(S_[first], M_[first])[inverse.ravel()]
    z.setflags(write=False)  # shared by every caller
    return z


def windows_from_zero(S: np.ndarray, M: np.ndarray, pairs: int = 8) -> np.ndarray:
    """1F1B with M ≥ S: z such that every partition's step ≥ z·Σc. The window [0, k] gives
    step ≥ Σc + q_k·Σ_{t≤k} c_t + r_k·c_k (micro-batch 0's round trip, q_k rounds of the
    window, k's remaining ops; `simulate.window_counts`); a convex combination of the terms
    for k = S−1 and one k₁ ∈ S−2..S−1−pairs, its weight chosen where the two smallest
    per-stage coefficients meet, bounds every stage's coefficient (vectorised)."""
    S = np.asarray(S, dtype=float)[:, None]
    M = np.asarray(M, dtype=float)[:, None]

    def term(k):
        rounds = np.where(M > S, np.floor((M - S - 1) / (k + 1)) + 1, 0.0)
        fwd_left = np.where(
            rounds > 0, np.maximum(M - (S - 1 - k) - rounds * (k + 1) - 1, 0), M - S + k
        )
        bwd_left = M - 1 - rounds * (k + 1)
        return rounds, np.maximum(np.minimum(fwd_left, bwd_left), 0.0)

    q2, r2 = term(S - 1)
    single = np.where(S > 1, 1 + q2, 1 + q2 + r2)[:, 0]
    k1 = S - np.arange(2, pairs + 2)[None, :]  # [candidate, pair]
    q1, r1 = term(np.maximum(k1, 0))
    last_between = k1 == S - 2  # no stage strictly between k1 and S−1
    # The two smallest coefficients as lines in k1's weight x: before k1 and after it.
    a0, a1 = 1 + q2, q1 - q2 + np.where(k1 == 0, r1, 0.0)
    b0 = 1 + q2 + np.where(last_between, r2, 0.0)
    b1 = -q2 - np.where(last_between, r2, 0.0)
    slope = a1 - b1
    meet = np.clip(np.where(slope != 0, (b0 - a0) / np.where(slope != 0, slope, 1), 0), 0, 1)
    value = np.maximum.reduce([np.minimum(a0 + a1 * x, b0 + b1 * x) for x in (0.0, 1.0, meet)])
    value = np.where(k1 >= 0, value, 0.0).max(axis=1)
    return np.where(M[:, 0] >= S[:, 0], np.maximum(single, value), 1.0)


def _simulation_work(shape: Shape, schedule: Schedule) -> int:
    """GPipe is a closed form; 1F1B plays S·M operations, or about S·(4S + 2·period) when
    its steady rounds repeat and are skipped (`simulate._one_f_one_b_rounds`)."""
    S, M = shape.num_stages, shape.micro_batches
    if schedule == "gpipe":
        return S
    return S * (min(M, 4 * S + 2 * MAX_PERIOD) if M >= 4 * S else M)


def _dived(space: PartitionSpace) -> tuple[int, ...] | None:
    node = space.dive()
    return None if node is None else node.boundaries


def _runs(layout: Layout, search: PhaseSearch) -> bool:
    """What the executor checks before running a layout (a cached prefix in stage 0; 1F1B:
    M ≥ the stages that train)."""
    try:
        layout.check(search.model.num_layers, search.cluster.num_devices)
    except BadArgumentError:
        return False
    return True


def _gib(nbytes: float) -> str:
    """`_gib(3 << 29)` → "1.50 GiB"; under 0.1 MiB in bytes: `--device-memory 1B` read as
    "a device has 0.0 MiB" (the thirty-second round)."""
    if nbytes >= 1 << 30:
        return f"{nbytes / (1 << 30):.2f} GiB"
    if nbytes >= 0.1 * (1 << 20):
        return f"{nbytes / (1 << 20):.1f} MiB"
    return f"{nbytes:,.0f} byte" + ("" if round(nbytes) == 1 else "s")


def _sizes_apart(a: float, b: float) -> tuple[str, str]:
    """`a` and `b` as `_gib` says them, each with its bytes where the two read alike: the
    sixty-first round's "smallest achievable … is 79.2 MiB but a device has 79.2 MiB" (83,000,320
    bytes against 83,000,319) read as a contradiction.

        _sizes_apart(83_000_320, 83_000_319)   # ("79.2 MiB (83,000,320 bytes)", "79.2 MiB (…)")
    """
    first, second = _gib(a), _gib(b)
    if first != second or "byte" in first:
        return first, second
    return f"{first} ({a:,.0f} bytes)", f"{second} ({b:,.0f} bytes)"


def _min_max_memory(problem: PartitionProblem, pinned: tuple[int, ...] | None) -> float:
    """Smallest over partitions of the largest stage memory (bisection on the limit)."""

    def peak(boundaries: tuple[int, ...]) -> float:
        return max(
            problem.stage_memory_bytes(s, boundaries[s], boundaries[s + 1])
            for s in range(problem.num_stages)
        )

    if pinned is not None:
        return peak(pinned)
    free_time = replace(problem, memory_limit_bytes=np.inf, _prefix={})
    result = solve_partition(free_time)
    if result is None:
        return np.inf
    lo, hi = 0.0, peak(result.boundaries)
    while hi - lo > 1e-6 * hi:
        mid = 0.5 * (lo + hi)
        if solve_partition(replace(problem, memory_limit_bytes=mid, _prefix={})) is None:
            lo = mid
        else:
            hi = mid
    return hi


def solve_phase(
    model: CostModel,
    global_batch: int,
    frozen_layers: int = 0,
    cached: bool = False,
    pins: Pins | None = None,
    runner_ups: int = 2,
    faster_than_s: float = math.inf,
    hint: Layout | None = None,
    work: PlanWork | None = None,
) -> PhaseSolution:
    """The best layout (and runner-ups) for one phase; see the module docstring. A long
    model's uncached phase whose frozen prefix fits no stage 0 is searched again with the
    prefix over forward-only stages.

    `faster_than_s` (`PhaseSearch.solve`): NothingFasterError unless a layout is faster. A
    long model's uncached phase ignores it: whether to search forward-only stages depends
    on whether anything fits at all, which a pruned search cannot tell. `hint`: see
    `PhaseSearch.solve`. `work`: the plan's budget this search draws on and reports to
    (None: a budget of one phase, its stop reported here)."""
    alone = work is None
    work = work or PlanWork()  # alone: its one or two searches get their own limit each
    retries = not cached and frozen_layers > 0 and model.num_layers > DENSE_MAX_LAYERS
    if retries:
        faster_than_s = math.inf
    limit, more = work.phase_limit(), work.sub_search_limit()
    try:
        search = PhaseSearch(model, global_batch, frozen_layers, cached, pins, limit, None, more)
        solution = work.solve(search, runner_ups, faster_than_s, hint)
    except (DoesNotFitError, BadArgumentError):
        # (a pin of more stages than the prefix in stage 0 leaves: more with forward-only
        # stages, the eighty-eighth round; refused there too, the wider space's line says so)
        if not retries:
            raise
        limit, more = work.phase_limit(), work.sub_search_limit()
        search = PhaseSearch(model, global_batch, frozen_layers, cached, pins, limit, True, more)
        solution = work.solve(search, runner_ups, math.inf, hint)
    else:
        if retries:
            solution = _forward_only_too(search, solution, runner_ups, hint, work)
    if alone:
        work.report()
    return solution


def _forward_only_too(
    narrow: PhaseSearch,
    solution: PhaseSolution,
    runner_ups: int,
    hint: Layout | None,
    work: PlanWork,
) -> PhaseSolution:
    """A long model's uncached phase, searched first with its frozen prefix in stage 0
    (`narrow`), searched again with the prefix over forward-only stages too, for a layout
    faster than the first's best, within the plan's budget: the first's best and bound hold
    only without them (the eighty-seventh round: plans 19.5 % slower than one with
    forward-only stages, the bound said 1.8 %). The first's best prunes the second from its
    start, which spends its work on the shapes that may beat it. Where the first search
    stopped at its work limit, the second would too, as costly (300 phases of 302 layers on
    8,192 devices: twice the plan's time): not searched, and no bound holds on the phase."""
    if not solution.proven:
        merged = replace(solution, lower_bound_s=0.0)  # (said: "no bound proven")
        work.stops[-1] = (merged.best.step_s, 0.0)
        return merged
    limit, more = work.phase_limit(), work.sub_search_limit()
    wide = PhaseSearch(
        narrow.model, narrow.global_batch, narrow.frozen_layers, False, narrow.pins, limit,
        True, more,
    )  # fmt: skip
    try:
        found = wide.solve(runner_ups, solution.best.step_s, hint)
    except NothingFasterError as none:
        if none.stopped_at is None:  # nothing faster, proven: the first's bound holds
            return solution
        found = None  # (the first proved its best: the second's bound is below it)
        merged = replace(solution, proven=False, lower_bound_s=none.stopped_at)
    finally:
        work.left -= wide.work_done
    if found is not None:
        per_node = narrow.cluster.devices_per_node
        seen = {alike_key(found.best.layout, per_node)}
        others = []
        ranked = sorted(
            [*found.runner_ups, solution.best, *solution.runner_ups], key=lambda e: e.step_s
        )
        for evaluation in ranked:
            key = alike_key(evaluation.layout, per_node)
            if len(others) < runner_ups and key not in seen:
                seen.add(key)
                others.append(evaluation)
        # (its bound: of what may beat the first's best, the rest being no faster than that)
        evaluated = found.evaluated + solution.evaluated
        merged = replace(found, runner_ups=others, evaluated=evaluated)
    work.stops[-1] = None if merged.proven else (merged.best.step_s, merged.lower_bound_s)
    return merged


def layouts_within(
    model: CostModel,
    global_batch: int,
    frozen_layers: int,
    cached: bool,
    pins: Pins,
    within_s: float,
    work: PlanWork,
    most: int,
) -> tuple[list[Evaluation], bool]:
    """The `most` fastest layouts of the phase whose step is at most `within_s`, fastest first
    (fewer when there are fewer, or the search runs out of work; none when nothing fits), and
    whether they are all of them (fewer than `most`, the search not stopped). What a
    schedule-wide choice needs (`plan._over_the_schedule`): a layout no phase finds best can
    still be the best to keep over several phases. Its work is the plan's (`work`), and its
    stop is not a phase search's: nothing is reported.

        layouts, every_one = layouts_within(model, 64, 6, False, Pins(), 0.8, work, 8)"""
    within_s *= 1 + WITHIN_ROUNDING  # a bound equal to a step may sit a rounding above it
    search = PhaseSearch(model, global_batch, frozen_layers, cached, pins, work.phase_limit())
    try:
        solution = search.solve(most - 1, math.inf, None, within_s, most)
    except DoesNotFitError:
        return [], True
    except NothingFasterError:  # out of work before any was simulated: not every one seen
        return [], False
    finally:
        work.left -= search.work_done
    ranked = [solution.best, *solution.runner_ups]
    layouts = [e for e in ranked if e.step_s <= within_s]
    return layouts, solution.proven and len(layouts) < most


# --------------------------------------------------------------------------- baselines

BaselineName = Literal["equal", "params", "time"]


def equal_boundaries(num_layers: int, num_stages: int) -> tuple[int, ...]:
    """Equal layer counts; the first stages take one more layer when it does not divide."""
    base, extra = divmod(num_layers, num_stages)
    sizes = [base + (1 if s < extra else 0) for s in range(num_stages)]
    return tuple(int(x) for x in np.concatenate([[0], np.cumsum(sizes)]))


def greedy_boundaries(weights: np.ndarray, num_stages: int) -> tuple[int, ...]:
    """Greedy contiguous balance: close a stage once it reaches an even share of what is
    left (the rule of DeepSpeed's `partition_balanced`-style parameter balancing and of
    torchgpipe's `balance_by_time`), keeping at least one layer for every later stage."""
    L = len(weights)
    boundaries = [0]
    start = 0
    for s in range(num_stages - 1):
        remaining_stages = num_stages - s
        share = float(weights[start:].sum()) / remaining_stages
        end, total = start, 0.0
        limit = L - (remaining_stages - 1)
        while end < limit and (end == start or total + weights[end] / 2 <= share):
            total += float(weights[end])
            end += 1
        boundaries.append(end)
        start = end
    boundaries.append(L)
    return tuple(boundaries)


def baseline_boundaries(
    name: BaselineName, model: CostModel, costs: PhaseCosts, num_stages: int
) -> tuple[int, ...]:
    if name == "equal":
        return equal_boundaries(model.num_layers, num_stages)
    if name == "params":
        # PipeTransformer weighted frozen layers 0; DeepSpeed counts every parameter.
        return greedy_boundaries(model.param_bytes * costs.active, num_stages)
    if name == "time":
        return greedy_boundaries(costs.fwd_s + costs.bwd_s, num_stages)
    raise BadArgumentError(f"unknown baseline '{name}'")
