"""Elastic plans and previews: the library side of `pipeplan plan` and `pipeplan preview`
(docs/architecture.md §4.12, §4.13).

    plan = make_plan(profile, cluster, global_batch=64, samples=1024, epochs=10, freeze=schedule)
    preview = make_preview(...same arguments...)   # + baseline, per-epoch rows, ablation
    preview = make_preview(..., freeze=alpha_schedule(...), later=autofreeze_earliest(...))
    forecast = make_forecast(profile, cluster, pricing, ..., finished=[0, 0, 4])  # a run's

One phase per distinct freeze point. Phase by phase (`decide_phase`, what `pipeplan run` applies
online) each takes the solver's layout unless keeping the previous placement is cheaper once
the transition is paid; a plan then chooses over the whole schedule among the layouts the
searches found (`_over_the_schedule`). Every emitted layout passes `Layout.check`, the check
the executor applies. Same inputs give byte-identical `dumps(plan)`.
"""

from __future__ import annotations

import collections
import heapq
import itertools
import logging
import math
from dataclasses import dataclass, field, replace

import numpy as np
from pydantic import Field

from pipeplan.costmodel import (
    CostModel,
    CostParams,
    Evaluation,
    StageReport,
    alike_key,
    held_at,
    placement_of,
    rank_cells,
    same_placement,
)
from pipeplan.errors import BadArgumentError, PipeplanError
from pipeplan.formats import (
    AblationRow,
    Cluster,
    EpochRow,
    Forecast,
    ForecastCase,
    FreezeCase,
    FreezeSchedule,
    Layout,
    NonNegFloat,
    NonNegInt,
    PhasePlan,
    Plan,
    PlanInputs,
    Preview,
    Pricing,
    Profile,
    ScoredLayout,
    StagePlan,
    StaticPlanSummary,
    Strict,
)
from pipeplan.formats.base import MAX_COUNT, MAX_EPOCHS, MAX_SAMPLES
from pipeplan.formats.profile import profile_identity
from pipeplan.freeze import continuations, describe, phases
from pipeplan.partition import DENSE_MAX_LAYERS
from pipeplan.simulate import Timeline, gantt_rows
from pipeplan.solver import (
    DEFAULT_WORK_LIMIT,
    BaselineName,
    DoesNotFitError,
    NothingFasterError,
    Pins,
    PlanWork,
    baseline_boundaries,
    layouts_within,
    percent_at_most,
    solve_phase,
)

log = logging.getLogger("pipeplan.plan")

SIGNIFICANT_DIGITS = 9
# A phase's total is a sum of epochs, the bound on it a product: the margin keeps a layout
# whose total would tie the other option's from being pruned by the last bit of rounding.
BEAT_MARGIN = 1e-9
# A cut plan within this of its proven floor is the fastest there is: its cut goes unsaid.
PROVEN_GAP = 1e-9
# The work of a search that bounds a cached floor the plan never sought, for the bound a cut
# plan states (`_phase_floors`): its root's bounds alone (s62's 64 one-epoch phases on 2 × 3
# devices: 95.6 % → 29.6 % for 0.3 s more; a full search, 24.9 % for 0.6 s).
FLOOR_BOUND_WORK = 1
# Phases × layers a freeze schedule may ask for: each phase is a layout search whose setup
# grows with the layers, beside the work the plan's searches share (`PlanWork`). Any schedule
# of a model up to 315 layers, 100 phases of 1,000 layers (an α schedule has one per epoch
# at most: tens), 10 of 10,000; the twenty-ninth round's 9,990 phases of 9,990 layers ran for
# hours.
MAX_PHASE_LAYERS = 100_000
# What a plan's choice over the whole schedule may simulate, in layers (phases × placements ×
# layers, × 2 with the cache): bert-large's 10 phases weigh every placement found, 10 phases of
# 1,000 layers the greedy's and 10 in all (0.4 s of a 14 s plan), 99 such phases none beyond
# the greedy's own (`_over_the_schedule`).
SCHEDULE_LAYER_EVALUATIONS = 200_000
# What the shortest paths of a command's plans may do together (`_shortest_path`,
# `_ScheduleWork`), in rank-map cells: pricing a candidate after another costs about
# PATH_PAIR_CELLS cells of fixed work plus its own. The seventy-ninth round: a 10-layer
# model's 209 candidates of 256 cells took 29 s on 256 nodes, where a few devices' plans weigh
# as many in a second or two. A path that runs out stops, the plan keeps the sequence the last
# finished one found (at least the greedy's), and a line says so. About 0.15 µs of CPU a cell
# here: pruned (branch and bound), vit-digits on 256 × 8 devices with a global batch of 4,096
# asks 1.3 M (96 M unpruned; cut at 80 M it planned 2 % slower: the eightieth round), on
# 4,096 × 8 with 16,384 2.8 M.
SCHEDULE_PATH_WORK = 80_000_000
PATH_PAIR_CELLS = 50


def _r(x: float) -> float:
    """Stable float formatting: the same value always prints the same, across platforms."""
    return float(f"{x:.{SIGNIFICANT_DIGITS}g}")


# --------------------------------------------------------------------------- inputs


@dataclass(frozen=True)
class TrainingShape:
    global_batch: int
    samples: int
    epochs: int

    def __post_init__(self) -> None:
        if self.global_batch < 1:
            raise BadArgumentError(f"--global-batch must be at least 1 (got {self.global_batch})")
        if self.samples < 1:
            raise BadArgumentError(f"--samples must be at least 1 (got {self.samples})")
        if self.epochs < 1:
            raise BadArgumentError(f"--epochs must be at least 1 (got {self.epochs})")
        for flag, value, limit in (
            ("--global-batch", self.global_batch, MAX_COUNT),
            ("--samples", self.samples, MAX_SAMPLES),
            ("--epochs", self.epochs, MAX_EPOCHS),
        ):
            if value > limit:
                raise BadArgumentError(f"{flag} {value} is beyond the limit of {limit}")
        if self.samples < self.global_batch:
            raise BadArgumentError(
                f"--samples {self.samples} is less than one global batch ({self.global_batch})"
            )

    @property
    def steps_per_epoch(self) -> int:
        # The last partial batch is dropped, as the executor does: every step sees the same
        # global batch, so training semantics do not depend on the layout.
        return self.samples // self.global_batch


def _pins_dict(pins: Pins) -> dict[str, int | str | list[int]]:
    pinned: dict[str, int | str | list[int]] = {}
    for key in ("num_stages", "replicas", "micro_batches", "schedule"):
        value = getattr(pins, key)
        if value is not None:
            pinned[key] = value
    if pins.boundaries is not None:
        pinned["boundaries"] = list(pins.boundaries)
    return pinned


def _check_freeze(freeze: FreezeSchedule, shape: TrainingShape, model: CostModel) -> None:
    if len(freeze.frozen_layers) != shape.epochs:
        raise BadArgumentError(
            f"the freeze schedule covers {len(freeze.frozen_layers)} epochs, training has "
            f"{shape.epochs}"
        )
    too_many = [k for k in freeze.frozen_layers if k > model.num_layers - 1]
    if too_many:
        raise BadArgumentError(
            f"the freeze schedule freezes {too_many[0]} layers but the profile has "
            f"{model.num_layers} (the head is never frozen)"
        )
    count = len(phases(freeze))
    if count * model.num_layers > MAX_PHASE_LAYERS:
        raise BadArgumentError(
            f"the freeze schedule has {count} phases (runs of epochs with one freeze point) "
            f"on a {model.num_layers}-layer profile, and a plan searches a layout per phase: "
            f"phases × layers is at most {MAX_PHASE_LAYERS:,} (freeze in fewer steps)"
        )


# --------------------------------------------------------------------------- elastic plan


@dataclass(frozen=True)
class CachePricing:
    """How a cached phase's epochs are priced (docs/architecture.md §4.12). Stage 0 fills the
    node's cache from the forward passes it runs anyway: a row not in the cache costs what the
    uncached placement costs plus storing it (`miss_epoch_s`), a row in it costs the cached
    step plus, for rows beyond the node's budget, the disk read (`hit_epoch_s`). A node's cache
    only holds what that node's replicas saw: with stage-0 ranks on `nodes` nodes each node
    sees about 1/nodes of the samples per epoch, so after e epochs it covers
    1 − (1 − 1/nodes)^e of them. `covered_epochs` is 1 when the cache survives from the
    previous phase (advanced by the newly frozen layers), else 0."""

    miss_epoch_s: float
    hit_epoch_s: float
    nodes: int
    covered_epochs: int

    def hit_fraction(self, k: int) -> float:
        """The share of the phase's `k`-th epoch (0-based) that hits."""
        return 1.0 - (1.0 - 1.0 / self.nodes) ** (k + self.covered_epochs)

    def epoch_s(self, k: int) -> float:
        hit = self.hit_fraction(k)
        return hit * self.hit_epoch_s + (1.0 - hit) * self.miss_epoch_s


# A phase of at most this many epochs is priced epoch by epoch; a longer one in closed form
# (`_Choice.total_s`), equal but for the last bits.
SUMMED_EPOCHS = 256


@dataclass(frozen=True)
class _Choice:
    layout: Layout
    steady: Evaluation  # the phase's steady state (cached if cached)
    first_epoch_s: float
    epoch_s: float  # the steady state: every row a hit when cached
    transition_s: float
    runner_ups: list[Evaluation]
    cache: CachePricing | None = None

    def epoch_at(self, k: int) -> float:
        """The phase's `k`-th epoch (0-based), transition excluded."""
        if self.cache is not None:
            return self.cache.epoch_s(k)
        return self.first_epoch_s if k == 0 else self.epoch_s

    def total_s(self, epochs: int) -> float:
        if epochs <= SUMMED_EPOCHS:
            return self.transition_s + sum(self.epoch_at(k) for k in range(epochs))
        # The same sum, closed (a plan of 10,000 epochs spent 20 s adding them, the eighty-
        # second round): the cache's misses decay geometrically (`CachePricing.hit_fraction`).
        if self.cache is None:
            return self.transition_s + self.first_epoch_s + (epochs - 1) * self.epoch_s
        c = self.cache
        q = 1.0 - 1.0 / c.nodes
        missed = q**c.covered_epochs * (1.0 - q**epochs) * c.nodes  # Σ_k q^(k + covered)
        return (
            self.transition_s + epochs * c.hit_epoch_s + (c.miss_epoch_s - c.hit_epoch_s) * missed
        )


def _phase_choice(
    model: CostModel,
    shape: TrainingShape,
    layout: Layout,
    transition_s: float,
    runner_ups: list[Evaluation],
    previous: Layout | None,
    steady: Evaluation | None = None,
    uncached: Evaluation | None = None,
) -> _Choice:
    """`steady`: `layout`'s evaluation when the caller has it (the solver's best); `uncached`:
    a cached `layout`'s uncached one, likewise."""
    steady = steady or model.evaluate(layout, record=False)
    epoch_s = shape.steps_per_epoch * steady.step_s
    if not layout.cached:
        return _Choice(layout, steady, epoch_s, epoch_s, transition_s, runner_ups)
    start = cached_prefix(previous, layout, model)
    cache = cache_pricing(model, shape, layout, steady.step_s, start > 0, uncached)
    transition_s += cache_advance_s(model, layout, shape.samples, start)
    return _Choice(
        layout, steady, cache.epoch_s(0), cache.hit_epoch_s, transition_s, runner_ups, cache
    )


def stage0_nodes(model: CostModel, layout: Layout) -> dict[int, int]:
    """{node: how many stage-0 ranks it holds}: each such node keeps one cache (not to be
    changed: kept per rank map, `CostModel.by_rank_map`)."""
    G = model.cluster.devices_per_node
    rank_map = layout.rank_map

    def counted() -> tuple[object, dict[int, int]]:
        return rank_map, dict(collections.Counter(row[0] // G for row in rank_map))

    key = ("stage0_nodes", id(rank_map))
    return model.by_rank_map.get(key, counted, lambda _: rank_cells(rank_map))[1]


def cache_pricing(
    model: CostModel,
    shape: TrainingShape,
    layout: Layout,
    hit_step_s: float,
    survives: bool,
    uncached: Evaluation | None = None,
) -> CachePricing:
    """A cached phase's miss and hit epochs. Per step each stage-0 rank handles its replica's
    M·m samples of `row` bytes each; the node's first budget // row rows live in host memory
    (stored at the host link's bandwidth), the rest on local disk (stored and read at the
    disk's). A miss costs the uncached placement's step (`uncached`, evaluated when not given)
    plus the store."""
    cluster = model.cluster
    row = float(model.out_bytes_per_sample[layout.frozen_layers - 1])
    memory_rows = cluster.cache_budget_bytes // row if row > 0 else shape.samples
    in_memory = min(1.0, memory_rows / shape.samples)
    local = row * layout.micro_batches * layout.micro_batch_size
    disk = cluster.disk_bandwidth_bytes_per_s
    store_s = local * (in_memory / cluster.host_to_device_bandwidth_bytes_per_s)
    store_s += local * (1.0 - in_memory) / disk
    spill_read_s = local * (1.0 - in_memory) / disk
    uncached = uncached or model.evaluate(layout.model_copy(update={"cached": False}), record=False)
    steps = shape.steps_per_epoch
    return CachePricing(
        miss_epoch_s=steps * (uncached.step_s + store_s),
        hit_epoch_s=steps * (hit_step_s + spill_read_s),
        nodes=len(stage0_nodes(model, layout)),
        covered_epochs=1 if survives else 0,
    )


def cached_prefix(previous: Layout | None, layout: Layout, model: CostModel) -> int:
    """Frozen layers whose output the node caches already hold when `layout` starts: the
    previous phase's prefix when it was cached and every node with a stage 0 now had one then
    (the executor keeps a node's cache and advances it by the newly frozen layers only), else
    0."""
    if previous is None or not previous.cached:
        return 0
    if not stage0_nodes(model, layout).keys() <= stage0_nodes(model, previous).keys():
        return 0
    return min(previous.frozen_layers, layout.frozen_layers)


def cache_advance_s(model: CostModel, layout: Layout, samples: int, start: int) -> float:
    """Advancing surviving caches from `start` frozen layers to `layout`'s: each node's cache
    holds about samples/nodes rows (one epoch's coverage) and its stage-0 ranks split them,
    each running layers start..k−1 without autograd m rows at a time; the busiest node sets
    the time. 0 when nothing survives."""
    if start <= 0 or start >= layout.frozen_layers:
        return 0.0
    nodes = stage0_nodes(model, layout)
    rows = samples / len(nodes) / min(nodes.values())
    m = layout.micro_batch_size
    nograd = model.layer_times("nograd", m)[start : layout.frozen_layers]
    return math.ceil(rows / m) * float(nograd.sum())


def _elastic(
    model: CostModel,
    shape: TrainingShape,
    freeze: FreezeSchedule,
    cache: bool,
    pins: Pins,
    work: PlanWork,
    fixed_layout: Layout | None = None,
) -> list[tuple[int, int, _Choice]]:
    """Per phase (start epoch, epochs, choice): the phases' searches within one plan's `work`,
    phase by phase as `pipeplan run` decides online (`decide_phase`), then the whole
    schedule's best sequence of the layouts they found (`_over_the_schedule`). With
    `fixed_layout` every phase keeps that placement (the "freeze only" ablation)."""
    greedy = []
    found: list[Evaluation] = []
    floors: list[dict[bool, float]] = []
    previous: Layout | None = None
    for phase in phases(freeze):
        frozen, epochs = phase.frozen_layers, phase.epochs
        floors.append({})
        choice = decide_phase(
            model,
            shape,
            frozen,
            epochs,
            cache,
            pins,
            previous,
            fixed_layout,
            work,
            found,
            floors[-1],
        )
        previous = choice.layout
        greedy.append((phase.start_epoch, epochs, choice))
    if fixed_layout is not None:
        return greedy
    if pins.num_stages is None:
        found += _one_stage(model, shape, freeze, pins, work.another())
    shared = work.shared.setdefault((_ScheduleWork, work.pool), _ScheduleWork())
    cuts = shared.cuts
    chosen = _over_the_schedule(model, shape, cache, greedy, found, floors, pins, work)
    if shared.cuts != cuts:  # a limit cut this plan's choice: how far it may be from the best
        # (from what the searches proved: no search more, which the searches' own line would
        # count, the eighty-second round)
        _, least = _phase_floors(model, shape, cache, greedy, floors, pins, work, search=False)
        total = sum(c.total_s(e) for _, e, c in chosen)
        # (no flag pins the replicas: only the preview's repartition ablation does)
        shared.floors.append((total, sum(least), replace(pins, replicas=None) != Pins()))
    return chosen


def _one_stage(
    model: CostModel, shape: TrainingShape, freeze: FreezeSchedule, pins: Pins, work: PlanWork
) -> list[Evaluation]:
    """The first and the last phase's best one-stage layouts (replicas of the whole model),
    where one fits: layouts no freeze point ever moves, which no phase's search may find best
    (the thirty-ninth round: 2 × 7 devices planned 36 % slower than 1 × 4, whose 4 replicas
    need no transition, each phase of the larger cluster preferring a pipeline of its own).
    Two searches, not one per phase: every placement is priced at every phase after."""
    one_stage = replace(pins, num_stages=1)
    found = []
    every = phases(freeze)
    for phase in every[:1] + every[1:][-1:]:
        try:
            solution = solve_phase(
                model, shape.global_batch, phase.frozen_layers, False, one_stage, 0, work=work
            )
        except PipeplanError:  # the whole model fits no device
            break
        found.append(solution.best)
    return found


def _over_the_schedule(
    model: CostModel,
    shape: TrainingShape,
    cache: bool,
    greedy: list[tuple[int, int, _Choice]],
    found: list[Evaluation],
    floors: list[dict[bool, float]],
    pins: Pins,
    work: PlanWork,
) -> list[tuple[int, int, _Choice]]:
    """The phases' layouts chosen over the whole schedule. Phase by phase, a layout is kept
    unless moving pays within the phase: a layout a little slower now that spares a later
    move, or keeps a cache alive, is never weighed, and a larger cluster planned up to 28 %
    slower than its subset (the thirty-eighth round: its first phase's fastest layout, kept).
    Here every placement the searches found (each phase's best, the greedy's choices and the
    best one-stage layouts, `_one_stage`) is priced at every phase, cached where a cache can
    hit and uncached, and a shortest path over the phases (the transitions and cache survival
    between consecutive layouts, priced as a written plan is: `priced_choice`) picks the
    sequence. The greedy sequence is one of them: the plan is never slower, and is the
    greedy's unless another is faster.

    A layout no phase finds best can still be the one to keep (the fortieth round: phase 0's
    best no longer fits at phase 1's freeze point, and the layout that fits both, a little
    slower in each, spared a 2 s move: 2.5 s against 4.4 s). So unless the plan is proven
    within WIDEN_GAP of every sequence, the candidates are widened (`_widened`) with the
    fastest layouts each phase could use in a faster sequence, and the path is sought again."""
    placements = list(dict.fromkeys(placement_of(c.layout) for *_, c in greedy))
    others = dict.fromkeys(placement_of(e.layout) for e in found)
    path_work = _PathWork(work.shared.setdefault((_ScheduleWork, work.pool), _ScheduleWork()))
    # Each placement is simulated once per phase: a bounded number of them for long models
    # and schedules (99 phases of 1,000 layers found 87), the greedy's first. Where that cuts
    # the candidates, it is said as the path's own limit is (the eighty-third round: 300
    # phases of a 302-layer model planned 3 % slower, in silence).
    room = SCHEDULE_LAYER_EVALUATIONS // (len(greedy) * model.num_layers * (2 if cache else 1))
    known = len(dict.fromkeys([*placements, *others]))
    if len(placements) > room:
        path_work.shared.cut(0, known)
        return greedy
    greedy_placements = len(placements)
    placements += [p for p in others if p not in placements][: room - len(placements)]
    room_cut = len(placements) < known  # (and once the widening finds more than fit)
    evaluated = {e.layout: e for e in found} | {c.layout: c.steady for *_, c in greedy}
    greedy_total = sum(c.total_s(e) for _, e, c in greedy)
    # A sequence matters only if it beats the greedy's (ties keep the greedy's), then the best
    # found so far: the paths prune what cannot.
    beat = greedy_total * (1 - BEAT_MARGIN)
    path = _shortest_path(model, shape, cache, greedy, placements, evaluated, path_work, beat)
    if path is None:  # the path's work ran out (SCHEDULE_PATH_WORK): the greedy's sequence
        path_work.shared.cut(greedy_placements, known)
        return greedy
    best_total, chosen = path
    # Widened until every layout a faster sequence could use was weighed (each search listed
    # all of its allowance) or the caps are reached: each round lists more per search, within
    # the allowance the best total so far leaves, which only shrinks.
    per_search, most = WIDENED_PER_SEARCH, WIDENED_MOST
    # Long models' searches run out of work before they prove anything: none widened.
    proven = None  # the phases' floors and least costs (`_phase_floors`), sought once
    widening_stopped = 0
    while model.num_layers <= DENSE_MAX_LAYERS:
        proven = proven or _phase_floors(model, shape, cache, greedy, floors, pins, work)
        wider, every_one, stopped = _widened(
            model, shape, greedy, proven, pins, work, min(best_total, greedy_total), per_search
        )
        # (an earlier round's stopped searches the last one ran again: the last one's count)
        widening_stopped = stopped
        wider = [p for p in dict.fromkeys(wider) if p not in placements]
        known += len(wider)
        room_cut = room_cut or len(wider) > room - len(placements)
        if room <= len(placements):
            # No room for what it found: counted as cut, not weighed (the eighty-fifth round:
            # candidates that filled the room exactly skipped the widening, in silence).
            break
        every_one = every_one and len(wider) <= min(most, room - len(placements))
        wider = wider[: min(most, room - len(placements))]
        if wider:
            placements = placements + wider
            beat = min(best_total, beat)
            path = _shortest_path(
                model, shape, cache, greedy, placements, evaluated, path_work, beat
            )
            if path is None:  # out of work: the last path's sequence
                path_work.shared.cut(len(placements) - len(wider), known)
                room_cut = False  # (said)
                break
            if path[0] < best_total:  # (else none beat the last: it stands)
                best_total, chosen = path
        if every_one or per_search >= WIDENED_PER_SEARCH_MOST:
            break
        per_search, most = per_search * WIDENING_ROUNDS_GROW, most * WIDENING_ROUNDS_GROW
    path_work.shared.widening_stopped += widening_stopped
    if room_cut:  # candidates the evaluations' limit left unweighed
        path_work.shared.cut(len(placements), known)
    if model.num_layers > DENSE_MAX_LAYERS:
        # Not widened (their searches' cost): a cut like the others, said with its bound
        # unless proven (the eighty-sixth round: 202 layers planned 0.24 % slower, unsaid).
        path_work.shared.unwidened += 1
    if best_total >= greedy_total * (1 - BEAT_MARGIN):
        return greedy  # ties keep the phase-by-phase plan, as `pipeplan run` would decide it
    # The phase-by-phase search's runner-ups but the layout chosen instead of its best: a
    # plan lists each other layout once (`Plan._layouts_run`, `check_plan_prices`).
    G = model.cluster.devices_per_node
    return [
        (start, epochs, replace(choice, runner_ups=_others(greedy_choice.runner_ups, choice, G)))
        for (start, epochs, greedy_choice), choice in zip(greedy, chosen, strict=True)
    ]


def _others(runner_ups: list[Evaluation], choice: _Choice, per_node: int) -> list[Evaluation]:
    """`runner_ups` but those priced alike to `choice`'s layout (`costmodel.alike_key`, node
    names aside: the chosen layout on other ranks too, where `_moved_onto` may have moved
    it): `_others(greedy.runner_ups, chosen, 2)`."""
    chosen = alike_key(choice.layout, per_node)
    return [e for e in runner_ups if alike_key(e.layout, per_node) != chosen]


# The schedule-wide choice's widening (`_widened`). It runs unless the plan is proven within
# WIDEN_GAP of every sequence (no sequence costs less than the sum of the phases' floors):
# bert-large's 10 phases on 2 × 8 devices are (`bench_solver.py --only speed`: widening them
# doubled the plan's time for well under 1 %); the fortieth round's misses were not. A phase's
# search keeps its WIDENED_PER_SEARCH fastest layouts (those beyond are the slowest within its
# allowance, the least likely in the best sequence), WIDENED_MOST in all (the shortest path
# weighs pairs of consecutive layouts: its time grows with their square); the searches
# together do at most WIDENING_WORK times the work the phase searches did. When a search's list
# was cut at its cap, the widening runs again with caps WIDENING_ROUNDS_GROW times larger, up to
# WIDENED_PER_SEARCH_MOST per search (the forty-second round: the layouts that made a 1.7 % and
# a 2.4 % faster sequence were among a phase's 32 fastest), each round within that work again.
# A round of 128 per search found nothing more in those cases and took 3.5 s more (the shortest
# path weighs every pair of consecutive candidates): the widening is not exact past 32.
WIDEN_GAP = 0.025
WIDEN_ALWAYS_PHASE_LAYERS = 128
WIDENED_PER_SEARCH = 8
WIDENED_MOST = 40
WIDENING_WORK = 1.0
# ... and at least this much a round for a short schedule of a short model (phases × layers
# at most WIDEN_ALWAYS_PHASE_LAYERS): its phase searches do little work, and the widening of
# 24 of 198 plans of the shipped profiles (vit-digits on 2 × 8 and up) ran out of it, the
# ninetieth round (+10 % CPU there; no plan changed). Not for longer ones: there it cost up to
# +78 % CPU and still ran out (the ninety-second round).
WIDENING_WORK_LEAST = 4 * DEFAULT_WORK_LIMIT
WIDENING_ROUNDS_GROW = 4
WIDENED_PER_SEARCH_MOST = 32


def _phase_floors(
    model: CostModel,
    shape: TrainingShape,
    cache: bool,
    greedy: list[tuple[int, int, _Choice]],
    floors: list[dict[bool, float]],
    pins: Pins,
    work: PlanWork,
    search: bool = True,
) -> tuple[list[dict[bool, float]], list[float]]:
    """`floors` (the fastest step each phase's searches proved, cached or not) for the
    options some sequence has (a phase some sequence may cache whose cached floor the greedy
    never sought is searched for it), and what each phase of `greedy` costs at least in any
    sequence: E × steps × its lower floor (a miss epoch costs the uncached step and more, a
    hit epoch the cached one; transitions add). Without `search`, a cached floor never sought
    is its search's root bound (FLOOR_BOUND_WORK)."""
    kept, least = [], []
    can_cache = False  # whether some sequence caches the phase (`cache_can_hit`)
    for p, ((_, epochs, choice), floor) in enumerate(zip(greedy, floors, strict=True)):
        floor = dict(floor)
        kept.append(floor)
        frozen = choice.layout.frozen_layers
        # Where no sequence caches the phase before, a cached phase's first epoch only fills
        # its cache: it costs the uncached step and more.
        filled_first = not can_cache
        # (a phase that only fills its cache for the next: `_shortest_path`)
        can_cache = cache and frozen > 0 and (epochs > 1 or can_cache or p < len(greedy) - 1)
        if not can_cache:
            floor.pop(True, None)
        elif True not in floor:
            # Without `search`, the bounds of its search's first look (its root: a budget of
            # FLOOR_BOUND_WORK, its stop not the searches' line's): counted as 0, every one-
            # epoch phase after an uncached one cost "at least 0", and the schedule's line
            # said "by at most 95 %" where nothing was lost (the eighty-fourth round).
            own = work if search else PlanWork(FLOOR_BOUND_WORK, None, work.shared, work.pool)
            try:
                floor[True] = solve_phase(
                    model, shape.global_batch, frozen, True, pins, 0, work=own
                ).lower_bound_s
            except PipeplanError:
                floor[True] = math.inf
        lowest = min(floor.values())
        if filled_first and False in floor:
            least.append(shape.steps_per_epoch * (floor[False] + (epochs - 1) * lowest))
        else:
            least.append(epochs * shape.steps_per_epoch * lowest)
    return kept, least


def _widened(
    model: CostModel,
    shape: TrainingShape,
    greedy: list[tuple[int, int, _Choice]],
    proven: tuple[list[dict[bool, float]], list[float]],
    pins: Pins,
    work: PlanWork,
    total_s: float,
    per_search: int = WIDENED_PER_SEARCH,
) -> tuple[list[Layout], bool, int]:
    """Placements of the layouts a sequence faster than `total_s` may use, each phase's
    fastest first (at most `per_search` of each search), whether they are all of them, and
    how many of its searches stopped at their work limit before listing `per_search`, or
    were not run once WIDENING_WORK was spent.
    A phase of E epochs costs at least E × steps × its floor (the fastest step its searches
    proved, cached or not: a miss epoch costs the uncached step and more, a hit epoch the
    cached one; transitions add), so a sequence faster than `total_s` uses at phase p only
    layouts whose step is at most (`total_s` − the other phases' least costs) / (E_p ×
    steps): `layouts_within` lists the fastest of them. None when no sequence can be more
    than WIDEN_GAP faster (all of them, as far as widening goes). `proven`: the phases'
    floors and least costs (`_phase_floors`)."""
    steps = shape.steps_per_epoch
    floors, least = proven
    # A short schedule of a short model is widened down to a tie: its searches are cheap, and
    # a plan 1.6 % slower than a pin's was left unwidened (the fifty-third round).
    small = len(greedy) * model.num_layers <= WIDEN_ALWAYS_PHASE_LAYERS
    gap = BEAT_MARGIN if small else WIDEN_GAP
    if not all(math.isfinite(x) for x in least) or total_s - sum(least) <= gap * total_s:
        return [], True, 0  # no sequence is more than `gap` faster
    # WIDENING_WORK times the work the phase searches did (a phase search's at least; a
    # short schedule's, WIDENING_WORK_LEAST), the phases of most epochs first.
    done = WIDENING_WORK * (work.limit - work.left)
    at_least = WIDENING_WORK_LEAST if small else WIDENING_WORK * DEFAULT_WORK_LIMIT
    until = max(0, work.left - max(done, at_least))
    found: list[list[Layout]] = []
    every_one, stopped = True, 0
    order = sorted(range(len(greedy)), key=lambda p: -greedy[p][1])
    for p in order:
        _, epochs, choice = greedy[p]
        within = (total_s - (sum(least) - least[p])) / (epochs * steps) * (1 + BEAT_MARGIN)
        for cached, lowest in floors[p].items():
            if lowest >= within:
                continue
            if work.left <= until:  # (the widening's work spent: not run, a cut too, said;
                every_one = False  # the ninetieth round found 12 plans in 86 silent)
                stopped += 1
                continue
            frozen = choice.layout.frozen_layers
            layouts, all_of_them = layouts_within(
                model, shape.global_batch, frozen, cached, pins, within, work, per_search
            )
            every_one = every_one and all_of_them
            # (fewer than asked, not all: out of work, not past the cap; the eighty-ninth
            # round's plans 0.3–5.5 % slower than a pin's said nothing, or a bound below it)
            stopped += not all_of_them and len(layouts) < per_search
            found.append([placement_of(e.layout) for e in layouts])
    # Each search's fastest, then each one's second...: the cap keeps every phase's best.
    ranked = itertools.zip_longest(*found)
    widened = [placement for rank in ranked for placement in rank if placement is not None]
    return widened, every_one, stopped


def _shortest_path(
    model: CostModel,
    shape: TrainingShape,
    cache: bool,
    greedy: list[tuple[int, int, _Choice]],
    placements: list[Layout],
    evaluated: dict[Layout, Evaluation],
    work: _PathWork,
    beat: float = math.inf,
) -> tuple[float, list[_Choice]] | None:
    """The cheapest sequence of `placements` over the phases of `greedy` (each with its
    phase's freeze point; cached where the cache can hit, and uncached) and its total, if it
    costs less than `beat` (else (inf, [])); None where it would do more than `work` has left
    (SCHEDULE_PATH_WORK). `evaluated`: the simulations known, added to; `work` likewise the
    rank maps `_moved_onto` offered, and what is left.

    Branch and bound: a layout at phase p costs at least its floor there (its epochs at its
    step; cached, the first at the uncached step unless the layout before was cached, the
    others at the faster of the two: transitions only add), and more after a placement
    unalike but for its ranks (the groups' rebuild); each later phase at least its cheapest
    layout's floor. The ends before are taken least first, and a pair whose least reaches the
    best found for the layout or `beat` is never priced (the eighty-first round: 4,096 × 8
    devices' 194 candidates ran out of work, and planned 5.8 % slower than a plan pinned to
    10 stages)."""

    def steady(layout: Layout) -> Evaluation:
        if layout not in evaluated:
            evaluated[layout] = model.evaluate(layout, record=False)
        return evaluated[layout]

    uncached_of: dict[Layout, Layout] = {}  # a cached layout's uncached twin, copied once

    def uncached_steady(layout: Layout) -> Evaluation:
        if layout not in uncached_of:
            uncached_of[layout] = layout.model_copy(update={"cached": False})
        return steady(uncached_of[layout])

    def priced(layout: Layout, previous: Layout | None, epochs: int, beat: float) -> _Choice:
        """`layout` after `previous`, or on the ranks `_moved_onto` offers where that is
        cheaper (the same step, a smaller move): a sequence's transitions are priced so.
        Those are sought only where they could cost less than `beat`."""
        uncached = uncached_steady(layout) if layout.cached else None
        best = priced_choice(model, shape, layout, previous, steady(layout), uncached)
        if previous is None or best.transition_s == 0:
            return best
        # Other ranks spare at most the move, and the group rebuild only on the previous
        # placement; a cached phase may also keep the previous phase's caches on its nodes.
        total = best.total_s(epochs)
        if best.cache is None or not previous.cached or best.cache.covered_epochs:
            kept = _unplaced(layout) == _unplaced(previous)
            if total - best.transition_s + (0.0 if kept else model.group_rebuild_s) >= beat:
                return best
        key = (previous.boundaries, previous.rank_map, layout.boundaries, layout.rank_map)
        key += (layout.frozen_layers,)
        if key not in work.offered:
            found = _moved_onto(model, previous, layout, work)
            if found is None:  # past the work the plan's move searches may do: for good
                work.shared.moves_cut += 1
            work.offered[key] = [m.rank_map for m in found or []]
        for rank_map in work.offered[key]:
            moved = layout.model_copy(update={"rank_map": rank_map})
            alike = replace(steady(layout), layout=moved)
            choice = priced_choice(model, shape, moved, previous, alike, uncached)
            if choice.total_s(epochs) < total:
                best, total = choice, choice.total_s(epochs)
        return best

    # Per phase, the layouts that fit and their floors after a cached layout and after another
    # (a cached phase's first epoch only fills its cache unless the previous one's survives:
    # a miss costs the uncached step and more, a hit the cached one); what the phases after
    # it cost at least.
    fitting: list[list[tuple[Layout, float, float]]] = []
    for _, epochs, greedy_choice in greedy:
        frozen = greedy_choice.layout.frozen_layers
        fitting.append([])
        for placement in placements:
            for cached in [False, True] if cache and frozen > 0 else [False]:
                layout = _with_freeze(placement, frozen, cached, model)
                if layout is None or not steady(layout).fits:
                    continue
                epoch_s = shape.steps_per_epoch * steady(layout).step_s
                fresh = covered = epochs * epoch_s
                if cached:
                    miss_s = shape.steps_per_epoch * uncached_steady(layout).step_s
                    covered = epochs * min(epoch_s, miss_s)
                    fresh = miss_s + (epochs - 1) * min(epoch_s, miss_s)
                fitting[-1].append((layout, covered, fresh))
    after = [0.0] * len(greedy)
    for p in reversed(range(len(greedy) - 1)):
        after[p] = after[p + 1] + min((f for _, f, _ in fitting[p + 1]), default=math.inf)
    # (a floor computed in another order than the total it bounds may differ in its last bits)
    beat *= 1 + BEAT_MARGIN

    # Per phase, each layout's cheapest (total up to its end, the layout before it, its choice:
    # on the ranks it moves onto, which the next phase moves from).
    paths: list[dict[Layout, tuple[float, Layout | None, _Choice]]] = []
    for p, (_, epochs, _) in enumerate(greedy):
        # A phase that only fills its cache pays off in the next, cached phase (the fifty-
        # fifth round: never weighed, a plan was 22 % slower than with it); in the last none.
        followed = p < len(greedy) - 1
        ends = sorted(paths[-1].items(), key=lambda end: end[1][0]) if paths else [(None, (0.0,))]
        # (the layout key, the total so far, the ranks it ran on), cheapest first, by whether
        # it was cached and what its placement holds but its ranks
        ran: dict[bool, list[tuple[tuple, Layout | None, float, Layout | None]]] = {
            False: [],
            True: [],
        }
        for key, (so_far, *end) in ends:
            previous = end[-1].layout if end else None
            unplaced = _unplaced(previous) if previous is not None else ()
            ran[previous is not None and previous.cached].append((unplaced, key, so_far, previous))
        # A move between placements unalike but for their ranks costs at least the process
        # groups' rebuild (`priced`): those alike first, then the rest at that floor.
        rebuild = model.group_rebuild_s if paths else 0.0
        now: dict[Layout, tuple[float, Layout | None, _Choice]] = {}
        for layout, covered, fresh in fitting[p]:
            unplaced = _unplaced(layout)
            # Each previous end with what this layout would cost after it at least, least first
            # (each kind's ends are in order of their totals: merged, not sorted).
            kinds = []
            for was_cached, floor in ((True, covered), (False, fresh)):
                for alike in (True, False):
                    least = floor + (0.0 if alike else rebuild)
                    ends_of = [e for e in ran[was_cached] if (e[0] == unplaced) == alike]
                    kinds.append(
                        [(so_far + least, key, so_far, prev) for _, key, so_far, prev in ends_of]
                    )
            # The least rises: once it reaches the best found for this layout, or `beat` less
            # what the later phases cost at least, none after it is less.
            for least, key, so_far, previous in heapq.merge(*kinds, key=lambda end: end[0]):
                bound = beat - after[p]
                if layout in now:
                    bound = min(bound, now[layout][0])
                if least >= bound:
                    break
                if layout.cached and not (followed or cache_can_hit(epochs, previous)):
                    continue
                work.shared.paths_left -= PATH_PAIR_CELLS + rank_cells(layout.rank_map)
                if work.shared.paths_left < 0:
                    return None
                choice = priced(layout, previous, epochs, bound - so_far)
                total = so_far + choice.total_s(epochs)
                if total < bound:
                    now[layout] = (total, key, choice)
        paths.append(now)
        if not now:  # no sequence beats `beat`
            return math.inf, []
    last = min(paths[-1], key=lambda layout: paths[-1][layout][0])
    chosen: list[_Choice] = []
    layout: Layout | None = last
    for now in reversed(paths):
        _, layout, choice = now[layout]
        chosen.insert(0, choice)
    return paths[-1][last][0], chosen


def _unplaced(layout: Layout) -> tuple:
    """What a layout's placement holds but its ranks (`same_placement`)."""
    return (
        layout.boundaries,
        layout.micro_batches,
        layout.micro_batch_size,
        layout.schedule,
        layout.replicas,
    )


# What `_moved_onto` may weigh, in cells × ranks weighed (the [cell, rank] arrays it builds): in
# one search, and in all of a plan's. The seventy-ninth round: with a global batch of 16,384
# on 4,096 nodes of 8, 74 searches of some 16,000 cells took 55 s and 2.8 GB. Past either, the
# layout keeps the solver's ranks (its move priced from them). A plan of vit-digits on 16
# nodes weighs 1 M, on 256 nodes 37 M (3,000 searches of 256 cells, 3 s here under load).
MOVE_SEARCH_CELLS = 1 << 22
MOVE_SEARCH_WORK = 30_000_000


@dataclass
class _ScheduleWork:
    """The work the schedule-wide choices of a pool of one command's plans share
    (`PlanWork.shared`, by `PlanWork.pool`: a preview's ablations priced 68 s on 4,096 nodes
    of 8, the eightieth round): its shortest paths' (SCHEDULE_PATH_WORK) and its move
    searches' (MOVE_SEARCH_WORK), and what their limits cut, said in one line (`report`)."""

    # (read as made: a test or a caller may set the module's limits)
    paths_left: int = field(default_factory=lambda: SCHEDULE_PATH_WORK)
    moves_left: int = field(default_factory=lambda: MOVE_SEARCH_WORK)
    weighed: list[tuple[int, int]] = field(default_factory=list)  # (weighed, of) where cut
    moves_cut: int = 0  # moves (distinct) not sought
    unwidened: int = 0  # plans of a model past DENSE_MAX_LAYERS, their candidates not widened
    widening_stopped: int = 0  # widening searches (`layouts_within`) out of work or not run
    # (total, what any sequence costs at least, whether pinned) of each plan a limit cut
    floors: list[tuple[float, float, bool]] = field(default_factory=list)

    def cut(self, weighed: int, of: int) -> None:
        """A path ran out: the plan keeps what `weighed` of its `of` candidates gave."""
        self.weighed.append((weighed, of))

    @property
    def cuts(self) -> tuple[int, int, int, int]:
        return len(self.weighed), self.moves_cut, self.unwidened, self.widening_stopped

    @staticmethod
    def report(pools: list[_ScheduleWork]) -> None:
        """One INFO line where a limit cut a choice over the schedule, of any of `pools`."""
        weighed = [cut for pool in pools for cut in pool.weighed]
        moves_cut = sum(pool.moves_cut for pool in pools)
        unwidened = sum(pool.unwidened for pool in pools)
        stopped = sum(pool.widening_stopped for pool in pools)
        if not weighed and not moves_cut and not unwidened and not stopped:
            return
        said = []
        if weighed:
            each = ", ".join(f"{w} of {n}" for w, n in weighed)
            plans = f" in {len(weighed)} plans" if len(weighed) > 1 else ""
            said.append(f"weighed {each} candidate layouts{plans}")
        if moves_cut:
            said.append(f"sought no other ranks for {moves_cut:,} move{'s' * (moves_cut != 1)}")
        if unwidened:
            said.append(f"widened no candidates: a model of over {DENSE_MAX_LAYERS} layers")
        if stopped:
            searches = f"{stopped:,} search{'es' * (stopped != 1)}"
            said.append(f"{searches} for more candidates cut short or not run")
        # How much faster any plan could be, from the phases' proven floors (the eighty-first
        # round: a cut plan was 5.8 % slower than a pinned one, and the line gave no bound).
        # Under pins, the floors are of plans that keep them: other pins may gain more.
        gaps = [1.0 - least / total for pool in pools for total, least, _ in pool.floors]
        # A plan at or past its floor (rounding: "-0.0"; a floor not finite) loses nothing:
        # it took the bound of every other plan away, or the line (the eighty-fifth round).
        gaps = [gap if gap > 0.0 else 0.0 for gap in gaps]
        pinned = any(pinned for pool in pools for *_, pinned in pool.floors)
        if gaps and max(gaps) <= PROVEN_GAP:
            return  # every plan cut is proven the fastest there is (with its pins): no loss
        by = ""
        if gaps and max(gaps) < 1.0:  # (a floor of 0 bounds nothing)
            # (a gap that rounds to 0.0 % is said so: the eighty-third round read "0.0 %")
            most = percent_at_most(max(gaps))
            by = (
                f"; one with the pins given, by at most {most}"
                if pinned
                else f", by at most {most}"
            )
        log.info(
            "the choice of layouts over the schedule stopped at its work limit (%s): a plan "
            "pinned to other choices (--stages, --micro-batches, --schedule) may be faster%s",
            "; ".join(said),
            by,
        )


@dataclass
class _PathWork:
    """What a plan's shortest paths share: the rank maps `_moved_onto` offered, by the move
    (`priced`), and the command's budget (`_ScheduleWork`)."""

    shared: _ScheduleWork
    offered: dict[tuple, list[tuple[tuple[int, ...], ...]]] = field(default_factory=dict)


def _moved_onto(
    model: CostModel, previous: Layout, layout: Layout, work: _PathWork | None = None
) -> list[Layout] | None:
    """`layout` on other ranks, priced alike for its step, that receive less moving from
    `previous` (§4.12): `for moved in _moved_onto(model, previous, layout): ...`. A step's
    price reads each cell's node alone, node names aside (`costmodel._priced_alike`): the
    ranks of a node are interchangeable, and so are the nodes, whose links are alike. A move
    reads which ranks held which layers (`CostModel.move_s`), so the solver's map, one of
    each alike kind, may move what other ranks already hold (the sixty-third round: a later
    1x1 on rank 0 received the trainable layers rank 1 held, with their moments: 5 % slower
    on 1 × 2, 16.7 % on 2 × 3). Each node of the map goes to the node whose ranks would
    receive least at most, then each of its cells to a rank of it likewise (`_bottleneck`:
    the busiest receiver bounds the move), with the node map only where every row's nodes
    stay in order and each row's ranks sorted, as the executor runs them; rows that are
    `previous`'s in its order (its groups kept). Empty when none can receive less; None
    when the search would weigh more than `work` has left (MOVE_SEARCH_CELLS at most)."""
    limit = math.inf if work is None else min(work.shared.moves_left, MOVE_SEARCH_CELLS)
    # It weighs each cell against at least as many ranks as there are cells (each node the
    # layout uses, `_weighed_ranks`): refused before building anything (on a million
    # devices, building its arrays to refuse them took a fifth of a plan's time).
    if rank_cells(layout.rank_map) ** 2 > limit:
        return None
    G = model.cluster.devices_per_node
    ranks = np.asarray(layout.rank_map, dtype=np.int64)
    flat = ranks.reshape(-1)
    b = np.asarray(layout.boundaries)
    first = np.broadcast_to(b[:-1], ranks.shape).reshape(-1)
    stop = np.broadcast_to(b[1:], ranks.shape).reshape(-1)
    prefix = model.moved_prefix(layout.frozen_layers)
    held = model.held_by(previous)  # checked and kept: priced moves read it too
    held_ranks = held[0]
    node = flat // G
    used = np.unique(node)
    columns = _weighed_ranks(held_ranks, used, np.bincount(node).max(), model.cluster)
    weighed = flat.size * len(columns)
    if weighed > limit:
        return None
    if work is not None:
        work.shared.moves_left -= weighed
    column_first, column_stop = held_at(held, columns)
    # [cell, column]: what the column's rank would receive if it ran the cell.
    low = np.maximum(first[:, None], column_first[None, :])
    high = np.maximum(np.minimum(stop[:, None], column_stop[None, :]), low)
    whole = prefix[stop] - prefix[first]
    received = whole[:, None] - (prefix[high] - prefix[low])

    def receives(cells: np.ndarray, onto: np.ndarray) -> np.ndarray:
        """What each of `cells` receives on its rank of `onto` (one that held nothing: all)."""
        i = np.minimum(np.searchsorted(columns, onto), len(columns) - 1)
        return np.where(columns[i] == onto, received[cells, i], whole[cells])

    moved: list[Layout] = []

    def add(rank_map: tuple[tuple[int, ...], ...]) -> None:
        # Replicas in the previous phase's order where they are its rows: no group changes.
        if sorted(rank_map) == sorted(previous.rank_map):
            rank_map = previous.rank_map
        if rank_map != layout.rank_map and all(m.rank_map != rank_map for m in moved):
            moved.append(layout.model_copy(update={"rank_map": rank_map}))

    add(layout.rank_map)
    cells = np.arange(flat.size)
    least = received.min(axis=1).max()
    if receives(cells, flat).max() <= least:
        return moved  # no rank map receives less at its busiest
    # [cell, weighed node]: the least a cell would receive on a rank of the node.
    column_node = columns // G
    node_starts = np.flatnonzero(np.r_[True, np.diff(column_node) != 0])
    nodes = column_node[node_starts]
    on_node = np.minimum.reduceat(received, node_starts, axis=1)
    # [used node, weighed node]: the most a cell of the one would receive on the other.
    order = np.argsort(node, kind="stable")
    starts = np.flatnonzero(np.r_[True, np.diff(node[order]) != 0])
    worst = np.maximum.reduceat(on_node[order], starts, axis=0)
    onto = nodes[_bottleneck(worst)][np.searchsorted(used, node)]
    # Else the nodes as they are: a row's nodes would go out of order.
    if not (np.diff(onto.reshape(ranks.shape), axis=1) >= 0).all():
        onto = node
    # Each cell on its device of the node it goes to, unless another receives less at most
    # there than the least the busiest receiver needs (on a large cluster, most nodes).
    new = onto * G + flat % G
    for u in used:
        mine = np.flatnonzero(node == u)
        if receives(mine, new[mine]).max() <= least:
            continue
        j = np.searchsorted(nodes, onto[mine[0]])
        there = slice(node_starts[j], node_starts[j + 1] if j + 1 < len(nodes) else None)
        new[mine] = columns[there][_bottleneck(received[mine, there])]
    # Nodes in order along each row: sorting a row keeps each stage on its node.
    add(tuple(map(tuple, np.sort(new.reshape(ranks.shape), axis=1).tolist())))
    return moved


def _weighed_ranks(
    held: np.ndarray, used: np.ndarray, per_node: int, cluster: Cluster
) -> np.ndarray:
    """The ranks `_moved_onto` weighs, sorted: every one that held layers (`held`), and on
    every node it weighs as many others as a node of the layout holds cells (`per_node`);
    it weighs the nodes that held layers, the layout's own (`used`) and as many others as
    the layout uses. Ranks and nodes that held nothing receive alike, a cell's all, so those
    are enough for any assignment; weighing all of them made a plan on 100,000 nodes
    build [cell, rank] arrays of gigabytes (the seventy-ninth round)."""
    G = cluster.devices_per_node
    weighed = np.union1d(held // G, used)
    # The first nodes that held nothing and the layout does not use: as many as it uses.
    spare = np.setdiff1d(np.arange(min(cluster.nodes, len(weighed) + len(used))), weighed)
    weighed = np.union1d(weighed, spare[: len(used)])
    # On each: its first ranks, enough that as many of them held nothing as `per_node`.
    holding = np.bincount(np.searchsorted(weighed, held // G), minlength=len(weighed))
    counts = np.minimum(G, per_node + holding)
    offsets = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
    return np.union1d(held, np.repeat(weighed * G, counts) + offsets)


def _bottleneck(cost: np.ndarray) -> np.ndarray:
    """The columns an assignment of `cost`'s rows (no more than its columns) gives them,
    its largest cost the least and, of those, its sum: `columns = _bottleneck(cost)`."""
    if len(cost) == 1:
        return np.argmin(cost, axis=1)
    from scipy.optimize import linear_sum_assignment  # here: scipy.optimize slows start-up

    values = np.unique(cost)
    lowest, highest = 0, len(values) - 1
    while lowest < highest:  # the least cost every row can be held to
        middle = (lowest + highest) // 2
        over = (cost > values[middle]).astype(float)
        rows, columns = linear_sum_assignment(over)
        if over[rows, columns].any():
            lowest = middle + 1
        else:
            highest = middle
    # The cheapest within it: any cost above it weighs more than every row's at it.
    allowed = np.where(cost > values[lowest], (abs(values).max() + 1.0) * (len(cost) + 1), cost)
    rows, columns = linear_sum_assignment(allowed)
    return columns[np.argsort(rows)]


def decide_phase(
    model: CostModel,
    shape: TrainingShape,
    frozen: int,
    epochs: int,
    cache: bool,
    pins: Pins,
    previous: Layout | None,
    fixed_layout: Layout | None = None,
    work: PlanWork | None = None,
    found: list[Evaluation] | None = None,
    floors: dict[bool, float] | None = None,
) -> _Choice:
    """One phase of `epochs` epochs with `frozen` layers frozen, after `previous`: the plan's
    rule, which `pipeplan run` applies too when it plans online. With the cache on, the
    cached and the uncached phase are both priced (`CachePricing`: the first epoch fills the
    cache as it trains, later epochs hit as far as the node caches cover the samples); each
    keeps `previous`'s placement unless moving pays for itself. A cached phase is priced only
    when its cache can hit within the phase (`cache_can_hit`): one that only fills costs the
    uncached placement's steps plus the stores, never less than that placement uncached.
    `work`: the plan's search budget (`solve_phase`); `found` collects the searches' best
    layouts, `floors` what each proved of the phase's fastest step, cached or not (∞: nothing
    fits; `_over_the_schedule`)."""
    can_hit = cache_can_hit(epochs, previous)
    options = [True, False] if cache and frozen > 0 and can_hit else [False]
    best: _Choice | None = None
    error: PipeplanError | None = None
    for cached in options:
        # An uncached phase costs at least its steps × its step (transition ≥ 0): the search
        # only needs layouts faster than the cached choice's total over its steps (a cached
        # total has no such floor: a cached step may exceed the same layout's uncached one).
        beat = math.inf
        if best is not None and not cached:
            beat = best.total_s(epochs) / (epochs * shape.steps_per_epoch) * (1 + BEAT_MARGIN)
        try:
            choice = _choose(
                model,
                shape,
                frozen,
                cached,
                epochs,
                pins,
                previous,
                fixed_layout,
                beat,
                work,
                found,
                floors,
            )
        except PipeplanError as exc:  # e.g. only the cached layout fits in memory
            error = exc
            if floors is not None and not isinstance(exc, NothingFasterError):
                floors[cached] = math.inf
            continue
        if best is None or choice.total_s(epochs) < best.total_s(epochs):
            best = choice
    if best is None:
        assert error is not None
        raise error
    return best


def cache_can_hit(epochs: int, previous: Layout | None) -> bool:
    """Whether some epoch of a cached phase can read the cache (`CachePricing.hit_fraction`):
    the first epoch only fills it, unless the previous phase was cached and its node caches
    survive; the second reads what the first stored."""
    return epochs > 1 or (previous is not None and previous.cached)


def _choose(
    model: CostModel,
    shape: TrainingShape,
    frozen: int,
    cached: bool,
    epochs: int,
    pins: Pins,
    previous: Layout | None,
    fixed_layout: Layout | None,
    faster_than_s: float = math.inf,
    work: PlanWork | None = None,
    found: list[Evaluation] | None = None,
    floors: dict[bool, float] | None = None,
) -> _Choice:
    """The layout of one phase: the solver's, unless keeping the previous placement is
    cheaper once the transition is paid for. `faster_than_s`: the solver's layout matters
    only if its step is faster (`solve_phase`); when none is, keeping the previous
    placement is the one option left (NothingFasterError when it does not fit)."""
    if fixed_layout is not None:
        # Priced as is: the baseline placement with this freeze point (a frozen prefix past
        # stage 0 runs on forward-only stages); an ablation, not a layout the plan emits.
        kept = fixed_layout.model_copy(
            update={"frozen_layers": frozen, "cached": cached and frozen > 0}
        )
        return _phase_choice(model, shape, kept, 0.0, [], previous)
    try:
        solution = solve_phase(
            model, shape.global_batch, frozen, cached, pins, 2, faster_than_s, previous, work
        )
    except (NothingFasterError, DoesNotFitError) as exc:
        # Keeping the previous placement is the option left: when no layout is faster, and
        # when the search found none that fits within its work (the forty-sixth round: the
        # 76th of 100 phases of a 158-layer plan had 52 units of the plan's budget left, gave
        # up at 520 and failed the plan). Where the previous placement does not fit either,
        # the search's error stands.
        if floors is not None:  # no step is below faster_than_s; a search out of work
            # proved nothing of the phase (a kept layout's error below sets ∞ again)
            floors[cached] = 0.0
            if isinstance(exc, NothingFasterError):  # (what the search proved: its bound)
                floors[cached] = faster_than_s if exc.stopped_at is None else exc.stopped_at
        kept = None if previous is None else _with_freeze(previous, frozen, cached, model)
        if kept is None:
            raise
        keep = _phase_choice(model, shape, kept, 0.0, [], previous)
        if not keep.steady.fits:
            raise
        return keep
    if found is not None:
        found.append(solution.best)
    if floors is not None:
        floors[cached] = solution.lower_bound_s
    new_layout = solution.best.layout
    transition = 0.0
    if previous is not None:
        transition = model.transition_s(previous, new_layout)
    choice = _phase_choice(
        model, shape, new_layout, transition, solution.runner_ups, previous, solution.best
    )
    if previous is not None and not same_placement(previous, new_layout):
        kept = _with_freeze(previous, frozen, cached, model)
        if kept is not None:
            keep = _phase_choice(model, shape, kept, 0.0, [], previous)
            if keep.steady.fits and keep.total_s(epochs) <= choice.total_s(epochs):
                choice = keep
    return choice


def _with_freeze(layout: Layout, frozen: int, cached: bool, model: CostModel) -> Layout | None:
    """`layout`'s placement with the new freeze point, or None when that placement cannot run
    it (a cached prefix would reach past stage 0): the same check the executor applies."""
    kept = layout.model_copy(update={"frozen_layers": frozen, "cached": cached and frozen > 0})
    try:
        kept.check(model.num_layers, model.cluster.num_devices)
    except BadArgumentError:
        return None
    return kept


def stage_plans(stages: list[StageReport]) -> list[StagePlan]:
    return [
        StagePlan(
            first_layer=st.first_layer,
            stop_layer=st.stop_layer,
            fwd_s=_r(st.fwd_s),
            bwd_s=_r(st.bwd_s),
            send_fwd_s=_r(st.send_fwd_s),
            send_bwd_s=_r(st.send_bwd_s),
            allreduce_s=_r(st.allreduce_s),
            optimizer_s=_r(st.optimizer_s),
            memory_bytes=st.memory_bytes,
        )
        for st in stages
    ]


def _phase_plan(start: int, epochs: int, c: _Choice) -> PhasePlan:
    return PhasePlan(
        start_epoch=start,
        epochs=epochs,
        layout=c.layout,
        step_s=_r(c.steady.step_s),
        epoch_s=_r(c.epoch_s),
        first_epoch_s=_r(c.first_epoch_s),
        transition_s=_r(c.transition_s),
        total_s=_r(c.total_s(epochs)),
        stages=stage_plans(c.steady.stages),
        runner_ups=[ScoredLayout(layout=e.layout, step_s=_r(e.step_s)) for e in c.runner_ups],
    )


def make_plan(
    profile: Profile,
    cluster: Cluster,
    *,
    global_batch: int,
    samples: int,
    epochs: int,
    freeze: FreezeSchedule,
    cache: bool = True,
    pins: Pins | None = None,
    params: CostParams | None = None,
) -> Plan:
    """The elastic plan (one phase per distinct freeze point). Raises PipeplanError."""
    model = CostModel(profile, cluster, params)
    shape = TrainingShape(global_batch, samples, epochs)
    _check_freeze(freeze, shape, model)
    work = PlanWork()
    plan = _plan_from(model, profile, shape, freeze, cache, pins or Pins(), work)
    _reported(work)
    return plan


def _reported(work: PlanWork) -> None:
    """What the command's limits cut, said: its searches' (`PlanWork.report`) and its choices
    over the schedule's (`_ScheduleWork.report`)."""
    work.report()
    _ScheduleWork.report([v for v in work.shared.values() if isinstance(v, _ScheduleWork)])


def _plan_from(
    model: CostModel,
    profile: Profile,
    shape: TrainingShape,
    freeze: FreezeSchedule,
    cache: bool,
    pins: Pins,
    work: PlanWork,
) -> Plan:
    chosen = _elastic(model, shape, freeze, cache, pins, work)
    phase_plans = [_phase_plan(*row) for row in chosen]
    return Plan(
        inputs=PlanInputs(
            profile=profile_identity(profile),
            cluster=model.cluster,
            global_batch=shape.global_batch,
            samples=shape.samples,
            epochs=shape.epochs,
            steps_per_epoch=shape.steps_per_epoch,
            freeze=freeze,
            cache=cache,
            pinned=_pins_dict(pins),
        ),
        phases=phase_plans,
        predicted_total_s=_r(sum(c.total_s(epochs) for _, epochs, c in chosen)),
    )


# A plan's predictions are written rounded to 9 significant digits (`_r`) and priced again when
# it is run, perhaps on another platform whose float sums differ in the last bits: a recorded
# value this close to the price is the planner's.
PRICE_REL_TOL = 1e-6
# What a phase records that its layout prices to (`_phase_plan`).
PHASE_PRICES = ("step_s", "epoch_s", "first_epoch_s", "transition_s", "total_s")
STAGE_PRICES = tuple(f for f in StagePlan.model_fields if f not in ("first_layer", "stop_layer"))


def priced_phases(plan: Plan, profile: Profile) -> list[PhasePlan]:
    """`plan`'s phases with their layouts priced again from `profile` (the plan's, by its
    sha256) on inputs.cluster by the planner's own rule: `_phase_choice` after the phase
    before, as `make_plan` wrote them (runner-ups kept: they are the search's, not the
    layout's). BadArgumentError, naming the phase, for a layout that does not fit
    inputs.cluster.device_memory_bytes (the solver keeps only layouts that do).

        phases = priced_phases(load(Plan, "plan.json"), profile)   # == plan.phases, unedited

    One simulated step per phase (two when cached), within the planner's own bound on
    phases × layers (`_check_freeze`)."""
    model = CostModel(profile, plan.inputs.cluster)
    inputs = plan.inputs
    shape = TrainingShape(inputs.global_batch, inputs.samples, inputs.epochs)
    if len(plan.phases) * model.num_layers > MAX_PHASE_LAYERS:
        raise BadArgumentError(
            f"{len(plan.phases)} phases of {model.num_layers} layers, more than `pipeplan "
            f"plan` writes (phases × layers is at most {MAX_PHASE_LAYERS:,})"
        )
    priced: list[PhasePlan] = []
    previous: Layout | None = None
    for i, phase in enumerate(plan.phases):
        layout = phase.layout
        choice = priced_choice(model, shape, layout, previous)
        previous = layout
        if not choice.steady.fits:
            s, stage = max(enumerate(choice.steady.stages), key=lambda st: st[1].memory_bytes)
            raise BadArgumentError(
                f"phase {i}: its layout ({layout.label()}) needs {stage.memory_bytes} bytes "
                f"on stage {s}, more than inputs.cluster.device_memory_bytes "
                f"{model.cluster.device_memory_bytes}"
            )
        plan_of = _phase_plan(phase.start_epoch, phase.epochs, choice)
        priced.append(plan_of.model_copy(update={"runner_ups": phase.runner_ups}))
    return priced


def priced_choice(
    model: CostModel,
    shape: TrainingShape,
    layout: Layout,
    previous: Layout | None,
    steady: Evaluation | None = None,
    uncached: Evaluation | None = None,
) -> _Choice:
    """`layout` priced as a phase after `previous` (None: the first, nothing to move from and
    no cache surviving) by the planner's own rule: the transition from `previous`, then
    `_phase_choice` (a cached phase's epochs by `CachePricing`; `steady`, `uncached`: its
    evaluations when the caller has them)."""
    transition = 0.0 if previous is None else model.transition_s(previous, layout)
    return _phase_choice(model, shape, layout, transition, [], previous, steady, uncached)


def ran_phase_s(
    model: CostModel, shape: TrainingShape, layout: Layout, previous: Layout | None, steps: int
) -> float:
    """The planner's price of a phase that ran `steps` steps in `layout` after `previous`, as
    `priced_phases` prices a plan's phase (`priced_choice`): its transition, then its epochs
    of shape.steps_per_epoch steps each, a cached phase's first filling the cache at the
    uncached cost plus the stores, the last epoch in proportion to the steps of it that ran.
    `pipeplan report --baseline`'s previewed speedup prices both runs' phases so.

        ran_phase_s(CostModel(profile, cluster), TrainingShape(64, 256, 1), layout, None, 8)
    """
    choice = priced_choice(model, shape, layout, previous)
    whole, rest = divmod(steps, shape.steps_per_epoch)
    epochs_s = sum(choice.epoch_at(k) for k in range(whole))
    return choice.transition_s + epochs_s + choice.epoch_at(whole) * rest / shape.steps_per_epoch


def check_plan_prices(plan: Plan, profile: Profile, where: str) -> None:
    """Every phase of `plan` records what its layout prices to (`priced_phases`: its step,
    epochs, transition and total, each stage's times and memory) and fits its devices;
    BadArgumentError naming the file `where`, the phase and the field otherwise.

        check_plan_prices(load(Plan, "plan.json"), profile, "plan.json")

    The format holds the predictions only to each other (`Plan._predictions_agree`): a
    layout edited by hand beside them (1f1b turned gpipe, M × m swapped, a phase turned
    cached: the thirty-first round) ran a layout that did not fit the plan's devices and
    recorded predictions that were another layout's. The planner rounds what it writes to 9
    significant digits; another platform's floats may differ in the last bits: agreement
    within PRICE_REL_TOL is the planner's."""
    redo = "the plan was edited: re-run `pipeplan plan`"
    model = CostModel(profile, plan.inputs.cluster)  # the runner-ups' prices
    per_node = plan.inputs.cluster.devices_per_node
    try:
        priced = priced_phases(plan, profile)
    except BadArgumentError as exc:
        raise BadArgumentError(f"{where}: {exc}; {redo}") from None
    for i, (phase, ours) in enumerate(zip(plan.phases, priced, strict=True)):
        pairs = [(f, getattr(phase, f), getattr(ours, f)) for f in PHASE_PRICES]
        for s, (stage, price) in enumerate(zip(phase.stages, ours.stages, strict=True)):
            pairs += [
                (f"stages[{s}].{f}", getattr(stage, f), getattr(price, f)) for f in STAGE_PRICES
            ]
        for name, recorded, price in pairs:
            if not math.isclose(recorded, price, rel_tol=PRICE_REL_TOL, abs_tol=1e-12):
                raise BadArgumentError(
                    f"{where}: phase {i}: {name} {recorded!r} is not what its layout "
                    f"({phase.layout.label()}) prices to from the plan's profile and cluster, "
                    f"{price!r}; {redo}"
                )
        # A runner-up's step is its layout's too (the fifty-ninth round: one "of 1 µs" beside
        # a chosen 35.6 ms was run and copied into the run).
        seen = [alike_key(phase.layout, per_node)]
        for r, other in enumerate(phase.runner_ups):
            # Another layout than its phase's and the other runner-ups' by the planner's own
            # key (node names aside, as `solver` lists them): the sixty-third round's phase
            # on [[2], [3]] beside its own [[0], [1]] on 2 x 2 passed (the format compares
            # node numbers: `formats.plan.placed`).
            if (key := alike_key(other.layout, per_node)) in seen:
                which = seen.index(key)
                same = "the phase's own" if which == 0 else f"runner_ups[{which - 1}]'s"
                raise BadArgumentError(
                    f"{where}: phase {i}: runner_ups[{r}]: its layout ({other.layout.label()}) "
                    f"is priced alike to {same}, its cells on nodes alike but for their names; "
                    f"the planner lists each other layout once; {redo}"
                )
            seen.append(key)
            # The steady step its layout prices to on the plan's cluster, as the solver scored it.
            evaluation = model.evaluate(other.layout, record=False)
            # And it fits, as the phase's stages do (the solver keeps only layouts that fit):
            # one of 165 MB on a 100 MiB device passed (the sixty-first round).
            if not evaluation.fits:
                memory = plan.inputs.cluster.device_memory_bytes
                s, need = max(enumerate(evaluation.stages), key=lambda e: e[1].memory_bytes)
                raise BadArgumentError(
                    f"{where}: phase {i}: runner_ups[{r}].layout ({other.layout.label()}) needs "
                    f"{need.memory_bytes} bytes on its stage {s}, over "
                    f"inputs.cluster.device_memory_bytes {memory}; {redo}"
                )
            price = _r(evaluation.step_s)
            if not math.isclose(other.step_s, price, rel_tol=PRICE_REL_TOL, abs_tol=1e-12):
                raise BadArgumentError(
                    f"{where}: phase {i}: runner_ups[{r}].step_s {other.step_s!r} is not what "
                    f"its layout ({other.layout.label()}) prices to from the plan's profile "
                    f"and cluster, {price!r}; {redo}"
                )


def phase_timelines(
    profile: Profile, plan: Plan, shown: list[int] | None = None, params: CostParams | None = None
) -> list[Timeline]:
    """One simulated step per phase (steady state) of the phases `shown` (None: all), for the
    Gantt plots: the events of the stages a chart draws (`simulate.gantt_rows`) only, so a
    1,000-stage step does not hold millions of events."""

    model = CostModel(profile, plan.inputs.cluster, params)
    shown = range(len(plan.phases)) if shown is None else shown
    timelines = []
    for i in shown:
        layout = plan.phases[i].layout
        drawn = gantt_rows(layout.num_stages, layout.micro_batches)
        timelines.append(model.evaluate(layout, record=True, shown_stages=drawn).timeline)
    return timelines


# --------------------------------------------------------------------------- preview


def make_preview(
    profile: Profile,
    cluster: Cluster,
    *,
    global_batch: int,
    samples: int,
    epochs: int,
    freeze: FreezeSchedule,
    cache: bool = True,
    pins: Pins | None = None,
    params: CostParams | None = None,
    later: FreezeSchedule | None = None,
) -> Preview:
    """Per-epoch prediction of the elastic plan against the best static plan, with ablation.

    `freeze` is the schedule previewed; with `later` (for `--freeze auto`: `freeze` the α
    bound, `later` the earliest AutoFreeze can freeze) the preview is a band, and `later`'s
    plan is priced too, against the same baseline."""
    model = CostModel(profile, cluster, params)
    shape = TrainingShape(global_batch, samples, epochs)
    _check_freeze(freeze, shape, model)
    if later is not None:
        _check_freeze(later, shape, model)
    pins = pins or Pins()
    steps = shape.steps_per_epoch

    # One line for all the preview's searches stopped at their work limit; each plan priced
    # has a plan's budget (`another`), and the plan (and a later one) its own schedule-wide
    # budget, so the plan previewed is the one `make_plan` gives (the eighty-first round:
    # its ablations spent it first, and it was 2 % slower); the ablations share another.
    work = PlanWork()
    base = solve_phase(model, global_batch, 0, False, pins, work=work).best
    base_epoch_s = steps * base.step_s
    base_total = epochs * base_epoch_s

    def total(rows: list) -> float:
        return sum(c.total_s(epochs) for _, epochs, c in rows)

    freeze_only = _elastic(model, shape, freeze, False, pins, work.another(), base.layout)
    repartition = _elastic(
        model,
        shape,
        freeze,
        False,
        replace(pins, replicas=base.layout.replicas),
        work.another(),
    )
    wider = _elastic(model, shape, freeze, False, pins, work.another())
    plan = _plan_from(model, profile, shape, freeze, cache, pins, work.another("plan"))
    full_total = plan.predicted_total_s

    # What an epoch trains: its whole steps (the last partial batch is dropped, as the run
    # does); `--samples` counted the dropped rows too (the twenty-ninth round).
    trained = steps * global_batch
    rows = []
    for phase in plan.phases:
        # A node-local cache's later epochs differ (their hits grow): they share the rest
        # of the phase's total, so the rows add up to it.
        later_s = (phase.total_s - phase.transition_s - phase.first_epoch_s) / max(
            1, phase.epochs - 1
        )
        for k in range(phase.epochs):
            epoch_s = phase.first_epoch_s + phase.transition_s if k == 0 else later_s
            rows.append(
                EpochRow(
                    epoch=phase.start_epoch + k,
                    layout=phase.layout,
                    epoch_s=_r(epoch_s),
                    samples_per_s=_r(trained / epoch_s) if epoch_s > 0 else 0.0,
                )
            )

    def row(name: str, value: float) -> AblationRow:
        return AblationRow(name=name, total_s=_r(value), speedup=_r(base_total / value))

    ablation = [
        row("baseline (static, nothing frozen)", base_total),
        row("freeze only", total(freeze_only)),
        row("+ elastic re-partition (D kept)", total(repartition)),
        row("+ wider data parallelism", total(wider)),
    ]
    if cache:
        ablation.append(row("+ cache", full_total))

    def case(name: str, schedule: FreezeSchedule, value: float) -> FreezeCase:
        return FreezeCase(
            case=name,
            assumes=describe(schedule),
            freeze=schedule,
            total_s=_r(value),
            predicted_speedup=_r(base_total / value),
        )

    cases = [case("given" if later is None else "best", freeze, full_total)]
    if later is not None:
        later_total = _plan_from(
            model, profile, shape, later, cache, pins, work.another("later")
        ).predicted_total_s
        cases.append(case("later", later, later_total))
    _reported(work)
    return Preview(
        model=profile.model.name,
        devices=cluster.num_devices,
        freeze=freeze.source if later is None else "auto",
        cases=cases,
        baseline=StaticPlanSummary(
            layout=base.layout,
            step_s=_r(base.step_s),
            epoch_s=_r(base_epoch_s),
            total_s=_r(base_total),
        ),
        epochs=rows,
        total_s=full_total,
        predicted_speedup=_r(base_total / full_total),
        ablation=ablation,
        plan=plan,
    )


# --------------------------------------------------------------------------- a run's forecast


def make_forecast(
    profile: Profile,
    cluster: Cluster,
    pricing: Pricing,
    *,
    global_batch: int,
    samples: int,
    epochs: int,
    cache: bool,
    mode: str,
    alpha: float,
    freeze_list: list[int],
    finished: list[int],
) -> Forecast:
    """At the end of epoch len(finished) − 1 of a run: the end-to-end speedup of the finished
    epochs' frozen counts followed by each continuation (`pipeplan.freeze.continuations`: the
    rest of a schedule decided without gradients, or for `auto` no further freezing and the α
    bound), each priced exactly as `make_preview` prices a schedule, with the run's profile
    and cluster. `pricing` names them in the record (docs/architecture.md §4.13)."""
    num_blocks = len(profile.layers) - 2
    cases = []
    for name, schedule in continuations(mode, alpha, freeze_list, num_blocks, finished, epochs):
        preview = make_preview(
            profile,
            cluster,
            global_batch=global_batch,
            samples=samples,
            epochs=epochs,
            freeze=schedule,
            cache=cache,
        )
        cases.append(
            ForecastCase(
                continuation=name,
                frozen_layers=schedule.frozen_layers,
                speedup=preview.predicted_speedup,
            )
        )
    return Forecast(samples=samples, pricing=pricing, cases=cases)


# --------------------------------------------------------------------------- baselines


class PartitionComparison(Strict):
    name: str
    boundaries: list[NonNegInt]
    step_s: NonNegFloat
    fits: bool
    ratio_to_solver: NonNegFloat = Field(description="step_s / the solver's step_s.")


def compare_partitions(
    profile: Profile,
    cluster: Cluster,
    global_batch: int,
    *,
    frozen_layers: int = 0,
    cached: bool = False,
    pins: Pins | None = None,
    params: CostParams | None = None,
) -> list[PartitionComparison]:
    """The solver's best plan against equal / parameter / time-balanced partitions with the
    same S, D, M and schedule."""
    model = CostModel(profile, cluster, params)
    best = solve_phase(model, global_batch, frozen_layers, cached, pins).best
    layout = best.layout
    costs = model.phase_costs(layout.micro_batch_size, frozen_layers, cached)
    rows = [("solver", best)]
    names: tuple[BaselineName, ...] = ("equal", "params", "time")
    for name in names:
        boundaries = baseline_boundaries(name, model, costs, layout.num_stages)
        other = layout.model_copy(update={"boundaries": boundaries})
        rows.append((name, model.evaluate(other, record=False)))
    return [
        PartitionComparison(
            name=name,
            boundaries=list(e.layout.boundaries),
            step_s=_r(e.step_s),
            fits=e.fits,
            ratio_to_solver=_r(e.step_s / best.step_s) if best.step_s > 0 else 1.0,
        )
        for name, e in rows
    ]
