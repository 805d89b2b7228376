"""Exact contiguous partition of a layer sequence into S stages minimising the bottleneck stage
under each stage's memory limit (docs/architecture.md §4.9).

    result = solve_partition(problem)   # None when no partition fits; result.boundaries

Two exact methods, `dense` (O(S·L²), the reference) and `parametric` (bisection on the
bottleneck with an O(S·L) feasibility test); `brute_force_partition` enumerates every
partition. The tests compare all three.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from pipeplan.simulate import StageWork, received_in_op, step_lower_bound_s, window_counts

DENSE_MAX_LAYERS = 160
RELATIVE_TOLERANCE = 1e-7


@dataclass(frozen=True)
class PartitionProblem:
    compute_s: np.ndarray  # per layer, per micro-batch: forward + backward
    transfer_s: np.ndarray  # [link kind, j] cost of a boundary at position j (after layer j−1)
    link_kind: tuple[int, ...]  # per stage s < S−1: row of transfer_s its boundary uses
    static_bytes: np.ndarray  # per layer
    saved_bytes: np.ndarray  # per layer, per micro-batch in flight
    in_flight: tuple[int, ...]  # per stage
    memory_limit_bytes: float
    min_first_boundary: int = 1
    _prefix: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def num_layers(self) -> int:
        return len(self.compute_s)

    @property
    def num_stages(self) -> int:
        return len(self.in_flight)

    def prefix(self, name: str) -> np.ndarray:
        if name not in self._prefix:
            values = getattr(self, name)
            self._prefix[name] = np.concatenate([[0.0], np.cumsum(values)])
        return self._prefix[name]

    def stage_transfer_s(self, s: int, j: int) -> float:
        if s == self.num_stages - 1:
            return 0.0
        return float(self.transfer_s[self.link_kind[s], j])

    def stage_cost_s(self, s: int, i: int, j: int) -> float:
        return float(self.compute_s[i:j].sum()) + self.stage_transfer_s(s, j)

    def stage_memory_bytes(self, s: int, i: int, j: int) -> float:
        return float(self.static_bytes[i:j].sum() + self.in_flight[s] * self.saved_bytes[i:j].sum())

    def bottleneck_s(self, boundaries: tuple[int, ...]) -> float:
        return max(
            self.stage_cost_s(s, boundaries[s], boundaries[s + 1]) for s in range(self.num_stages)
        )

    def fits(self, boundaries: tuple[int, ...]) -> bool:
        # The same comparison the solvers make (prefix sums), so that they agree at the edge.
        return all(
            self._memory_prefix(s, boundaries[s], boundaries[s + 1]) <= self.memory_limit_bytes
            for s in range(self.num_stages)
        )

    def _memory_prefix(self, s: int, i: int, j: int) -> float:
        combined = self.prefix("static_bytes") + self.in_flight[s] * self.prefix("saved_bytes")
        return float(combined[j] - combined[i])

    def valid(self, boundaries: tuple[int, ...]) -> bool:
        return boundaries[1] >= self.min_first_boundary and self.fits(boundaries)


@dataclass(frozen=True)
class PartitionResult:
    bottleneck_s: float
    boundaries: tuple[int, ...]


def solve_partition(problem: PartitionProblem, method: str = "auto") -> PartitionResult | None:
    """The min-bottleneck memory-feasible partition, or None when no partition fits."""
    L, S = problem.num_layers, problem.num_stages
    if L - problem.min_first_boundary + 1 < S:
        return None
    if method == "auto":
        method = "dense" if L <= DENSE_MAX_LAYERS else "parametric"
    boundaries = _dense(problem) if method == "dense" else _parametric(problem)
    if boundaries is None:
        return None
    return PartitionResult(problem.bottleneck_s(boundaries), boundaries)


def bottlenecks(compute_s: np.ndarray, min_first_boundary: int, max_stages: int) -> np.ndarray:
    """For S = 1..max_stages, the smallest largest stage sum of `compute_s` over contiguous
    partitions into S stages with b₁ ≥ min_first_boundary (inf when there is none): one
    dense DP, whose s-th step is the answer for s + 1 stages, O(max_stages·L²). Rows of a
    2-D `compute_s` are solved together (one result row each).

        bottlenecks(np.array([1.0, 2.0, 3.0]), 1, 2)   # [6., 3.]: {1, 2 | 3}
    """
    rows = np.atleast_2d(compute_s)
    L = rows.shape[1]
    C = np.concatenate([np.zeros((len(rows), 1)), np.cumsum(rows, axis=1)], axis=1)
    starts = np.arange(L + 1)
    later = starts[:, None] < starts[None, :]
    cost = np.where(later, C[:, None, :] - C[:, :, None], np.inf)  # [row, i, j]
    best = np.where(starts >= min_first_boundary, C, np.inf)  # one stage: [0, j)
    result = np.full((len(rows), max_stages), np.inf)
    result[:, 0] = best[:, L]
    for s in range(1, max_stages):
        best = np.maximum(best[:, :, None], cost).min(axis=1)
        result[:, s] = best[:, L]
    return result if compute_s.ndim == 2 else result[0]


def suffix_bottlenecks(compute_s: np.ndarray, max_parts: int) -> np.ndarray:
    """[p, i]: the smallest largest part sum of compute_s[i:] split into p contiguous parts
    (inf when there are fewer layers than parts; p = 0 is inf), by a dense DP, O(p·L²).
    Rows of a 2-D `compute_s` are solved together (a table each: [row, p, i])."""
    rows = np.atleast_2d(compute_s)
    L = rows.shape[1]
    C = np.concatenate([np.zeros((len(rows), 1)), np.cumsum(rows, axis=1)], axis=1)
    starts = np.arange(L + 1)
    later = starts[:, None] < starts[None, :]
    cost = np.where(later, C[:, None, :] - C[:, :, None], np.inf)  # [row, i, j]
    table = np.full((len(rows), max_parts + 1, L + 1), np.inf)
    table[:, 1, :L] = C[:, L:] - C[:, :L]
    for parts in range(2, max_parts + 1):
        table[:, parts] = np.maximum(cost, table[:, parts - 1][:, None, :]).min(axis=2)
    return table if compute_s.ndim == 2 else table[0]


def brute_force_partition(problem: PartitionProblem) -> PartitionResult | None:
    L, S = problem.num_layers, problem.num_stages
    best: PartitionResult | None = None
    for cuts in itertools.combinations(range(1, L), S - 1):
        boundaries = (0, *cuts, L)
        if not problem.valid(boundaries):
            continue
        value = problem.bottleneck_s(boundaries)
        if best is None or value < best.bottleneck_s:
            best = PartitionResult(value, boundaries)
    return best


# --------------------------------------------------------------------------- dense DP


def _dense(problem: PartitionProblem) -> tuple[int, ...] | None:
    L, S = problem.num_layers, problem.num_stages
    C = problem.prefix("compute_s")
    Ps, Pa = problem.prefix("static_bytes"), problem.prefix("saved_bytes")
    starts = np.arange(L + 1)
    ordered = starts[:, None] < starts[None, :]  # [i, j]: i < j
    compute = C[None, :] - C[:, None]
    best = np.full(L + 1, np.inf)
    best[0] = 0.0
    choices = []
    for s in range(S):
        cost = (
            compute if s == S - 1 else compute + problem.transfer_s[problem.link_kind[s]][None, :]
        )
        G = Ps + problem.in_flight[s] * Pa
        ok = ordered & ((G[None, :] - G[:, None]) <= problem.memory_limit_bytes)
        if s == 0:
            ok &= starts[:, None] == 0
            ok &= starts[None, :] >= problem.min_first_boundary
        candidate = np.where(ok, np.maximum(best[:, None], cost), np.inf)
        choice = candidate.argmin(axis=0)
        best = candidate[choice, starts]
        choices.append(choice)
    if not np.isfinite(best[L]):
        return None
    return _walk_back(choices, L)


def _walk_back(choices: list[np.ndarray], L: int) -> tuple[int, ...]:
    boundaries = [L]
    for choice in reversed(choices):
        boundaries.append(int(choice[boundaries[-1]]))
    return tuple(reversed(boundaries))


# --------------------------------------------------------------------------- parametric


class _Reach:
    """Feasibility of a bottleneck T: can stages 0..S−1 cover [0, L) with each ≤ T and fitting?"""

    def __init__(self, problem: PartitionProblem):
        self.p = problem
        L, S = problem.num_layers, problem.num_stages
        self.C = problem.prefix("compute_s")
        Ps, Pa = problem.prefix("static_bytes"), problem.prefix("saved_bytes")
        self.positions = np.arange(L + 1)
        # Memory does not depend on T: the earliest start i for each end j, per in-flight count.
        self.lo_memory = {}
        for k in set(problem.in_flight):
            G = Ps + k * Pa
            self.lo_memory[k] = np.searchsorted(G, G - problem.memory_limit_bytes, side="left")
        self.kinds = sorted(set(problem.link_kind))
        # Per stage: (row of the time bound, in-flight count); the last stage has no transfer.
        last_kind = -1
        self.stage_keys = [(problem.link_kind[s], problem.in_flight[s]) for s in range(S - 1)]
        self.stage_keys.append((last_kind, problem.in_flight[S - 1]))
        self.counts = np.zeros(L + 2, dtype=np.int64)
        self.S, self.L = S, L

    def __call__(self, T: float, keep_choices: bool = False):
        p, C, positions = self.p, self.C, self.positions
        lo_time = {
            kind: np.searchsorted(C, C + p.transfer_s[kind] - T, side="left") for kind in self.kinds
        }
        lo_time[-1] = np.searchsorted(C, C - T, side="left")
        lo_cache: dict[tuple[int, int], np.ndarray] = {}
        reach = np.zeros(self.L + 1, dtype=bool)
        reach[0] = True
        counts = self.counts  # counts[i]: reachable positions in [0, i)
        choices = []
        for s in range(self.S):
            key = self.stage_keys[s]
            lo = lo_cache.get(key)
            if lo is None:
                lo = np.minimum(np.maximum(lo_time[key[0]], self.lo_memory[key[1]]), positions)
                lo_cache[key] = lo
            np.cumsum(reach, out=counts[1:])
            new = counts[:-1] > counts[lo]
            new[0] = False
            if s == 0:
                new[: p.min_first_boundary] = False
            if keep_choices:
                last = np.maximum.accumulate(np.where(reach, positions, -1))
                choices.append(np.concatenate([[-1], last[:-1]]))
            reach = new
            if not reach.any():
                return None
        if not reach[self.L]:
            return None
        return choices if keep_choices else True


def _parametric(problem: PartitionProblem) -> tuple[int, ...] | None:
    reach = _Reach(problem)
    C = reach.C
    if reach(np.inf) is None:
        return None
    hi = float(C[-1] + problem.transfer_s.max(initial=0.0)) * (1 + 1e-12) + 1e-300
    # A time-balanced greedy partition, when it fits, is usually close: a much tighter bracket.
    greedy = _greedy_time_balance(C, problem.num_stages, problem.min_first_boundary)
    if greedy is not None and problem.valid(greedy):
        hi = min(hi, _bottleneck_from_prefix(problem, C, greedy) * (1 + 1e-12))
    lo = max(float(C[-1]) / problem.num_stages, float(problem.compute_s.max())) * (1 - 1e-12)
    if reach(lo) is not None:
        hi = lo
    while hi - lo > RELATIVE_TOLERANCE * hi:
        mid = 0.5 * (lo + hi)
        if reach(mid) is not None:
            hi = mid
        else:
            lo = mid
    choices = reach(hi, keep_choices=True)
    return _walk_back(choices, problem.num_layers)


def _bottleneck_from_prefix(problem: PartitionProblem, C: np.ndarray, b: tuple[int, ...]) -> float:
    S = problem.num_stages
    return max(
        float(C[b[s + 1]] - C[b[s]]) + problem.stage_transfer_s(s, b[s + 1]) for s in range(S)
    )


def _greedy_time_balance(C: np.ndarray, S: int, min_first: int) -> tuple[int, ...] | None:
    """Cut where the prefix sum crosses k/S of the total (each stage non-empty)."""
    L = len(C) - 1
    if L - min_first + 1 < S:
        return None
    targets = C[-1] * np.arange(1, S) / S
    cuts = np.searchsorted(C, targets, side="left")
    boundaries = [0]
    for s, cut in enumerate(cuts):
        low = max(boundaries[-1] + 1, min_first if s == 0 else 0)
        high = L - (S - 1 - s)
        boundaries.append(int(min(max(cut, low), high)))
    boundaries.append(L)
    return tuple(boundaries)


# --------------------------------------------------------------------------- branch and bound
#
# The exact search over partitions (docs/architecture.md §4.10, §4.18): stages are fixed left
# to right; a node is a prefix of stages 0..k−1 covering [0, b_k). Its bound holds for every
# completion: what the fixed stages already imply (exact) combined with the smallest value the
# remaining stages can give each family of the step's lower bounds (§4.8), from tables over
# (stage, first layer) computed once per shape. Leaves are simulated.


@dataclass(frozen=True)
class StagePricing:
    """Everything that prices a stage of one shape (S, D, M, m, schedule, rank map) from its
    layer range [i, j), as the cost model does (§4.4–4.6), on prefix sums over layers.
    A stage trains unless it ends within `forward_only_layers` (an uncached phase's frozen
    prefix): such stages run forward only and form a prefix of the pipeline (§4.3)."""

    fwd_prefix: np.ndarray  # Σ fwd_l for l < i, per micro-batch
    bwd_prefix: np.ndarray
    grad_prefix: np.ndarray  # active parameter bytes
    micro_batch_overhead_s: float  # μ, added to every stage's forward
    send_s: np.ndarray  # [boundary s, position j]: activation of layer j−1 over boundary s
    grad_send_s: np.ndarray  # the gradient back over it (0 when layer j−1 is frozen)
    allreduce_latency_s: np.ndarray  # per stage: 2(D−1)·λ (0 when D = 1)
    allreduce_s_per_byte: np.ndarray  # per stage: 2(D−1)/(D·β) (0 when D = 1)
    optimizer_s_per_byte: float
    memory_prefix: np.ndarray  # [stage, position]: static + in_flight·saved, prefix sums
    memory_limit_bytes: float  # device memory − reserve, with rounding slack
    forwards_first: tuple[int, ...]  # per stage: forwards before its first backward
    micro_batches: int
    schedule: str
    min_first_boundary: int
    overhead_s: float  # outside the schedule (calibrated)
    # All-reduces that cross one node's link share it (§4.5): per such link (deduplicated),
    # which stages' all-reduces cross it, and the inter-node ring's latency and time per byte.
    shared_links: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), dtype=bool))
    shared_latency_s: float = 0.0
    shared_s_per_byte: float = 0.0
    # [p, i]: the smallest largest part of layers [i, L) split into p parts (fwd + bwd, no μ;
    # `suffix_bottlenecks`), or None (long models).
    suffix_bottleneck: np.ndarray | None = None
    # Stages ending at or before this position hold only frozen layers and run forward only
    # (0: every stage trains, e.g. a cached phase, whose stage 0 reads the cache).
    forward_only_layers: int = 0
    # 1F1B with fewer micro-batches than stages runs only if the first S − M stages are
    # forward only (torch's Schedule1F1B needs a micro-batch per stage that trains).
    min_forward_only_stages: int = 0
    # [position i]: the bytes of the M receives a stage starting at i posts at once when a
    # forward-only stage feeds it (twice that for the first that trains, which also holds
    # the batch its schedule splits; `CostModel.stages`), or None (no forward-only stage).
    receive_bytes: np.ndarray | None = None

    @property
    def num_layers(self) -> int:
        return len(self.fwd_prefix) - 1

    @property
    def num_stages(self) -> int:
        return len(self.forwards_first)


@dataclass(frozen=True, eq=False)
class Node:
    """Stages 0..depth−1 fixed, covering [0, position); `sums` are what they imply:
    (a, d, tail0, l1, l1own, p3, pf, pb, win, nic, pace), see `PartitionSpace`. Linked to its
    parent, so a node costs the same memory at any depth: `cycle` is the last fixed stage's
    c (its work with what it receives, for windows), `shared` the
    gradient bytes of fixed stages on each shared link still open (`PartitionSpace.open`)."""

    depth: int
    position: int
    sums: tuple[float, ...]
    parent: Node | None = None
    cycle: float = 0.0
    shared: tuple[float, ...] = ()
    # The first stage that trains (= depth while every fixed stage runs forward only).
    active_from: int = 0

    @property
    def boundaries(self) -> tuple[int, ...]:
        positions = []
        node: Node | None = self
        while node is not None:
            positions.append(node.position)
            node = node.parent
        return tuple(reversed(positions))

    def window_sums(self, count: int) -> np.ndarray:
        """Per window start among the last `count` fixed stages, the sum of their c from it
        to the last, then 0 (the window of the new stage alone): the suffix sums of
        `cycles(count)`, added up from the last stage as np.cumsum would, without its
        reversals (this runs in every 1F1B expansion).

            node.window_sums(2)   # [c_{k-2} + c_{k-1}, c_{k-1}, 0]"""
        sums = [0.0]
        total = 0.0
        node: Node | None = self
        while node is not None and node.parent is not None and len(sums) <= count:
            total = total + node.cycle
            sums.append(total)
            node = node.parent
        return np.array(sums[::-1])


# Windows of at most this many fixed stages enter a node's bound (all, for shorter pipelines).
MAX_WINDOW_STAGES = 64
ROOT_SUMS = (0.0,) * 11


class PartitionSpace:
    """The contiguous partitions of one shape, with bounds for branch and bound.

        space = PartitionSpace(pricing)
        for bound, child in space.expand(space.root(), limit=best): ...

    With F_k, B_k stage k's forward and backward including what they receive (the
    activation over boundary k−1, the gradient over boundary k: `simulate.received_in_op`),
    a_k = Σ_{t<k} F_t (micro-batch 0's arrival at stage k), d_k = Σ_{t<k} B_t (the last
    gradient's way from k down to stage 0), c_k = F_k + B_k and tail0 = A_0 + O_0, every
    step is at least (§4.8)
      L1_k = a_k + M·c_k + d_k + tail0 and a_k + M·c_k + A_k + O_k, for every stage k;
      1F1B: Σc + (M−1)·B_k + (M − nF_k)·F_k + tail0 (micro-batch 0's round trip);
      GPipe: Σc + (M−1)·(max F + max B) + tail0 (two flow shops).
      1F1B, per stage k and window [t, k]: when B_0@k can end (a_k, then its forwards before
      B_0 or micro-batch 0's round trip below k), then the window's rounds and k's remaining
      ops (`simulate.window_counts`), then k's tail.
    A node keeps, over its fixed stages, a = a_depth, d = d_depth, tail0, the largest L1 (l1),
    the largest own-tail term (l1own), the largest (M−1)·B + (M−nF)·F (p3), the largest
    forward and backward machine times (pf, pb), the largest window term (win, the round
    trip below k bounded by the work left), the shared-link term (nic: a node link every
    all-reduce of stages ≤ k crosses carries their bytes after stage k's last op, stages
    ending in reverse order) and when the last forward can leave the last fixed stage
    (pace: from some stage t's last forward, a_t + M·F_t + (M − nF_t)·B_t, down through the
    stages after t). For the stages still to place, the tables
    give per (stage k, first layer i) the smallest over their placements of each family's
    largest term, each stage's ops with what they receive (as the simulator prices them),
    relaxed where needed (the transfers of unplaced stages between dropped from L1, latency
    from A) so that a bisection on one crossing point computes them (O(S·L·log L)).

    Forward-only stages (ending within an uncached phase's frozen prefix; they lead the
    pipeline): B = 0 and no gradient reaches them, so d and the tables' terms hold for them
    as written; their last op ends after a_k + M·F_k (no backward to wait for), windows start
    at the first stage that trains, and tail0 is that stage's tail (until it is placed, at
    least its first layer's all-reduce and optimizer on the cheapest stage left).
    """

    def __init__(self, pricing: StagePricing, shared: dict | None = None):
        """`shared`: tables that depend only on S, m, the schedule, the boundary links and
        (named with it) M, kept by the caller for the other shapes that share them."""
        self.p = pricing
        self._tables: dict[str, list[np.ndarray]] = {}
        self._shared = {} if shared is None else shared
        self._last: dict[int | str, np.ndarray] = {}
        self._tail_floor: np.ndarray | None = None
        self._rest_terms: np.ndarray | None = None
        # Per (depth, end) of forward-only prefixes: the (a, pf) not dominated so far.
        self._fronts: dict[tuple[int, int], list[tuple[float, float]]] = {}
        self._window_terms: np.ndarray | None = None
        # Per (term, depth): a bound's term that depends only on the depth and the position,
        # at every position (`_at_depth`).
        self._depth_terms: dict[tuple[str, int], np.ndarray] = {}

    @functools.cached_property
    def open(self) -> list[np.ndarray]:
        """[d]: the shared links with a stage fixed and one not at depth d (stages < d)."""
        links = self.p.shared_links
        S = self.p.num_stages
        stages = np.arange(S)
        first = np.where(links, stages, S).min(axis=1, initial=S)
        last = np.where(links, stages, -1).max(axis=1, initial=-1)
        return [np.flatnonzero((first < d) & (d <= last)) for d in range(S + 1)]

    # ------------------------------------------------------------------ ranges

    def root(self) -> Node:
        return Node(0, 0, ROOT_SUMS)

    def trains(self, j: np.ndarray) -> np.ndarray:
        """Whether a stage ending at j trains (else it holds only frozen layers)."""
        return j > self.p.forward_only_layers

    def last_ends(self, k: int) -> np.ndarray:
        """Per start i, the largest end j of stage k: it fits memory and leaves a layer for
        every later stage."""
        if k not in self._last:
            p = self.p
            mem = p.memory_prefix[k]
            fits = np.searchsorted(mem, mem + p.memory_limit_bytes, side="right") - 1
            if k > 0 and p.receive_bytes is not None:
                fits = self._fed_ends(k, fits)
            self._last[k] = np.minimum(fits, p.num_layers - (p.num_stages - 1 - k))
        return self._last[k]

    def _fed_ends(self, k: int, fits: np.ndarray) -> np.ndarray:
        """`fits` (stage k's last end per start) where a forward-only stage feeds it (a start
        within `forward_only_layers`): its receive buffers count too, once if it runs
        forward only (ends within the prefix), twice if it trains (`CostModel.stages`).
        Without them every leaf of a tight memory failed its simulation, and a search that
        has simulated nothing that fits does not stop at its work limit (the forty-fourth
        round's F9: 62 layers on 2 GiB devices, 100 times the limit, 31 to 68 s of CPU)."""
        p = self.p
        F = p.forward_only_layers
        mem = p.memory_prefix[k]
        room = mem[: F + 1] + p.memory_limit_bytes
        receive = p.receive_bytes[: F + 1]  # type: ignore[index]
        trains = np.searchsorted(mem, room - 2 * receive, side="right") - 1
        forward = np.searchsorted(mem, room - receive, side="right") - 1
        fed = np.where(trains > F, trains, np.minimum(forward, F))
        fits = fits.copy()
        fits[: F + 1] = np.minimum(fits[: F + 1], fed)
        return fits

    def holds(self, boundaries: tuple[int, ...]) -> bool:
        """Whether `boundaries` is a leaf of this tree (each stage's end among `ends`)."""
        S = self.p.num_stages
        if len(boundaries) != S + 1 or boundaries[0] != 0:
            return False
        return all(
            0 <= boundaries[k] < self.p.num_layers
            and boundaries[k + 1] in self.ends(k, boundaries[k])
            for k in range(S)
        )

    def ends(self, k: int, i: int) -> np.ndarray:
        p = self.p
        last = int(self.last_ends(k)[i])
        if k == p.num_stages - 1:
            return np.array([p.num_layers]) if last >= p.num_layers else np.array([], dtype=int)
        if k < p.min_forward_only_stages:  # 1F1B with M < S: this stage runs forward only
            last = min(last, p.forward_only_layers)
        lo = max(i + 1, p.min_first_boundary if k == 0 else 0)
        return np.arange(lo, last + 1)

    # ------------------------------------------------------------------ expansion

    def expand(
        self, node: Node, limit: float = np.inf, searched: bool = False
    ) -> list[tuple[float, Node]]:
        """The children of `node` whose bound is below `limit`, with their bounds. With
        `searched` (the children all enter the search, none is dropped by the caller) a
        forward-only prefix that one entered before dominates is left out."""
        k, i = node.depth, node.position
        j = self.ends(k, i)
        if j.size == 0:
            return []
        sums, cycle, shared = self._child_sums(node, j)
        bounds = self.bounds(k + 1, j, sums, limit)
        keep = np.flatnonzero(bounds < limit)
        if searched and i <= self.p.forward_only_layers and not self.p.shared_links.shape[0]:
            keep = self._undominated(k + 1, j, sums, keep)
        columns = np.array(sums).T[keep].tolist()
        shared = shared[:, keep].T.tolist()
        if i <= self.p.forward_only_layers:  # every fixed stage runs forward only
            active_from = np.where(self.trains(j), k, k + 1)
        else:
            active_from = np.full(j.shape, node.active_from)
        return [
            (
                float(bounds[n]),
                Node(
                    k + 1,
                    int(j[n]),
                    tuple(columns[row]),
                    node,
                    float(cycle[n]),
                    tuple(shared[row]),
                    int(active_from[n]),
                ),
            )
            for row, n in enumerate(keep)
        ]

    def _undominated(
        self, depth: int, j: np.ndarray, sums: tuple[np.ndarray, ...], keep: np.ndarray
    ) -> np.ndarray:
        """Drop forward-only prefixes another one of the same depth and end dominates. The
        forward-only stages and the links after them are a flow shop of M identical jobs, so
        micro-batch m reaches stage `depth` at a + m·pf (a: Σ of their times, pf: the
        largest); nothing else of them reaches the rest (no gradient comes back), and the
        rest's step cannot drop when its inputs come later (max-plus; with no all-reduces
        sharing a link, each ends its own time after it starts). So of two prefixes with
        a ≤ a' and pf ≤ pf' the second's completions are never faster. Only prefixes that
        entered the search count (a dive's other children do not)."""
        kept = []
        a, pf = sums[0], sums[6]
        for n in keep:
            if j[n] > self.p.forward_only_layers:
                kept.append(n)  # the first stage that trains
                continue
            front = self._fronts.setdefault((depth, int(j[n])), [])
            point = (float(a[n]), float(pf[n]))
            if any(x <= point[0] and y <= point[1] for x, y in front):
                continue
            front[:] = [(x, y) for x, y in front if not (point[0] <= x and point[1] <= y)]
            front.append(point)
            kept.append(n)
        return np.array(kept, dtype=int)

    def _child_sums(
        self, node: Node, j: np.ndarray
    ) -> tuple[tuple[np.ndarray, ...], np.ndarray, np.ndarray]:
        """The sums of the children whose stage `node.depth` ends at each j, that stage's
        c (for later windows) and the gradient bytes on each shared link."""
        p = self.p
        k, i = node.depth, node.position
        a, d, tail0, l1, l1own, p3, pf, pb, win, nic, pace = node.sums
        M = p.micro_batches
        at = _span(j)  # the children's ends are consecutive: slices, not fancy indexing
        F = p.fwd_prefix[at] - p.fwd_prefix[i] + p.micro_batch_overhead_s
        B = p.bwd_prefix[at] - p.bwd_prefix[i]
        # As the simulator prices stages (`received_in_op`): a transfer is part of the op that
        # receives it, and no link carries one on its own. Stage k's forward receives the
        # activation over boundary k−1 (at i), its backward the gradient over boundary k (at j).
        if k > 0:
            F = F + p.send_s[k - 1][i]
        if k < p.num_stages - 1:
            B = B + p.grad_send_s[k, at]
        c = F + B
        grads = p.grad_prefix[at] - p.grad_prefix[i]
        allreduce = np.where(
            grads > 0, p.allreduce_latency_s[k] + p.allreduce_s_per_byte[k] * grads, 0.0
        )
        own = allreduce + p.optimizer_s_per_byte * grads
        # tail0 is the first stage that trains' (forward-only stages before it have own = 0).
        tail = own if i <= p.forward_only_layers else np.full_like(F, tail0)
        ops_end, first_bwd_end = self._ops_end(node, j, F, B)
        before = p.forwards_first[k]
        # Stage k's last forward comes from its predecessors' last forwards (pace), after
        # which it still runs its remaining backwards.
        ops_end = np.maximum(ops_end, pace + F + min(before, M) * B)
        # Its own last forward: after its M forwards and the backwards before it, and (1F1B)
        # after its first backward, then the M − nF forwards and M − nF − 1 backwards left
        # before it (`simulate.stage_order`).
        last_fwd = a + M * F + max(M - before, 0) * B
        if first_bwd_end is not None and before < M:
            later = first_bwd_end + (M - before) * F + (M - before - 1) * B
            last_fwd = np.where(self.trains(j), np.maximum(last_fwd, later), last_fwd)
        pace = np.maximum(pace + F, last_fwd)
        win = np.maximum(win, ops_end + np.maximum(d + tail, own))
        nic, shared = self._shared_links(node, grads, ops_end, nic)
        sums = (
            a + F,
            d + B,
            tail,
            np.maximum(l1, a + M * c + d),
            np.maximum(l1own, a + M * c + own),
            np.maximum(p3, (M - 1) * B + (M - p.forwards_first[k]) * F),
            np.maximum(pf, F),
            np.maximum(pb, B),
            win,
            nic,
            pace,
        )
        return sums, c, shared

    def _shared_links(
        self, node: Node, grads: np.ndarray, ops_end: np.ndarray, nic: float
    ) -> tuple[np.ndarray, np.ndarray]:
        """The new stage k's shared-link term and the bytes on the links left open: a link's
        all-reduces of stages ≤ k start after stage k's (stages end in reverse order), so
        their bytes pass after stage k's last op."""
        p = self.p
        k = node.depth
        if not p.shared_links.shape[0]:  # no link shared: nothing to carry
            return np.full(grads.shape, nic), np.zeros((0, grads.size))
        before_k = np.zeros((len(p.shared_links), 1))
        if node.shared:
            before_k[self.open[k], 0] = node.shared
        crossing = p.shared_links[:, k]
        with_k = before_k + grads[None, :] * crossing[:, None]
        if crossing.any():
            most = with_k[crossing].max(axis=0)
            # Only an all-reduce that moves bytes pays the ring's latency (none of a
            # forward-only stage's, nor of a stage without parameters).
            carried = ops_end + p.shared_latency_s + p.shared_s_per_byte * most
            nic = np.where(most > 0, np.maximum(nic, carried), nic)
        else:
            nic = np.full(grads.shape, nic)  # np.broadcast_to costs more
        return nic, with_k[self.open[k + 1]]

    def _ops_end(
        self, node: Node, j: np.ndarray, F: np.ndarray, B: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """When the new stage k = node.depth (ending at each j) can end its last op, and
        (1F1B) its first backward (None for GPipe or a stage that runs forward only): after its
        M·c of work from micro-batch 0's arrival, or after B_0 (its forwards before it or
        micro-batch 0's round trip below k, at least the work left after j, the transfer
        over j and the cheapest transfers after it), then for 1F1B the rounds of each window
        [t, k] of fixed stages (`simulate.window_counts`), for GPipe all its other work.
        A forward-only stage waits for no gradient: only its M forwards."""
        p = self.p
        S, M = p.num_stages, p.micro_batches
        k = node.depth
        a = node.sums[0]
        busy = a + M * (F + B)
        trains = self.trains(j)
        if not trains.any():
            return busy, None
        if k < S - 1:
            below = self._at_depth("below", k, self._round_trip_below)[_span(j)]
        else:
            below = np.zeros_like(F)
        if p.schedule == "gpipe":
            return np.where(trains, self._gpipe_end(node, j, F, B, below), busy), None
        first_bwd_end = a + np.maximum(p.forwards_first[k] * F, F + below) + B
        # Windows start at a stage that trains: the first one is k itself when every fixed
        # stage runs forward only.
        first = node.active_from if node.position > p.forward_only_layers else k
        rounds, fwd_left, bwd_left = _window_counts(k, max(first, k - MAX_WINDOW_STAGES + 1), S, M)
        # Work and transfers of the fixed stages t..k−1 of each window, then stage k's.
        fixed = node.window_sums(len(rounds) - 1)
        cycle = fixed[:, None] + (F + B)[None, :]
        terms = rounds[:, None] * cycle + fwd_left[:, None] * F + bwd_left[:, None] * B
        ends = np.where(trains, np.maximum(busy, first_bwd_end + terms.max(axis=0)), busy)
        return ends, first_bwd_end

    def _round_trip_below(self, k: int, j: np.ndarray) -> np.ndarray:
        """At least micro-batch 0's round trip below stage k < S − 1 ending at j: the work
        left after j, a μ per stage after k, and the transfers on its way."""
        p = self.p
        S, L = p.num_stages, p.num_layers
        work_left = p.fwd_prefix[L] + p.bwd_prefix[L] - p.fwd_prefix[j] - p.bwd_prefix[j]
        below = work_left + (S - 1 - k) * p.micro_batch_overhead_s
        # Boundary k's activation is received in stage k+1's forward (its gradient in stage
        # k's own backward, part of B), the later boundaries' both ways.
        return below + p.send_s[k, j] + self.table("sends")[k + 1][j]

    def _gpipe_end(
        self, node: Node, j: np.ndarray, F: np.ndarray, B: np.ndarray, below: np.ndarray
    ) -> np.ndarray:
        """GPipe: stage k's last backward ends at ΣF + (M−1)·max F over every stage, then
        Σ B + (M−1)·max B over stages k.. (`simulate._gpipe_schedule`, two flow shops).
        The sums are at least a + F + B + `below`; the largest forward at least the placed
        stages' (pf) and, once the tables are built, the smallest largest of the stages
        left; the largest backward at least B and the same of the stages left. (Building the
        tables here would cost phases whose roots the cheap terms prune.)"""
        p = self.p
        k, M = node.depth, p.micro_batches
        f_max = np.maximum(node.sums[6], F)
        b_max = B
        if k < p.num_stages - 1 and "fwd" in self._tables and "bwd" in self._tables:
            at = _span(j)
            f_max = np.maximum(f_max, self._tables["fwd"][k + 1][at])
            b_max = np.maximum(b_max, self._tables["bwd"][k + 1][at])
        # An inf table (no memory-feasible rest) is no completion at all, with M = 1 too:
        # 0·inf was NaN, which pruned nothing and printed numpy's warning (thirty-third round).
        spread = f_max + b_max
        flow = np.where(np.isinf(spread), np.inf, (M - 1) * np.where(np.isinf(spread), 0.0, spread))
        return node.sums[0] + F + B + below + flow

    def bounds(
        self, k: int, i: np.ndarray, sums: tuple[np.ndarray, ...], limit: float = np.inf
    ) -> np.ndarray:
        """Lower bounds on the step of every completion of prefixes of k stages ending at
        consecutive positions i (a node's children, `ends`) with the given sums (k = S:
        complete partitions). The families are
        added cheapest first, and once every bound reaches `limit` the rest (and the tables
        they would build) are skipped: the result is then still a lower bound, ≥ limit."""
        p = self.p
        a, d, tail0, l1, l1own, p3, pf, pb, win, nic, pace = sums
        M, S, L = p.micro_batches, p.num_stages, p.num_layers
        at = _span(i)  # the tables and prefix sums read as views
        if p.forward_only_layers and k < S:
            # Every fixed stage runs forward only where i ≤ the frozen prefix: the first stage
            # that trains is still to place.
            tail0 = np.where(i <= p.forward_only_layers, self.tail_floor()[k], tail0)
        placed = a + d  # Σ_{t<k} (c_t + X_t)
        bound = np.maximum(np.maximum(l1 + tail0, l1own), np.maximum(win, nic))
        if k == S:
            if p.schedule == "gpipe":
                bound = np.maximum(bound, placed + (M - 1) * (pf + pb) + tail0)
            else:
                bound = np.maximum(bound, placed + p3 + tail0)
            return bound + p.overhead_s
        mu = p.micro_batch_overhead_s
        shift = k * mu
        limit = limit - p.overhead_s
        if self.shares_one_link:
            # Every stage's all-reduce crosses one link and starts after the last stage's
            # last op (stages end in reverse order): the last forward through the stages
            # left (pace, their forwards and what stage k receives), the last stage's
            # backwards after it (one in 1F1B, M in GPipe; it holds layer L−1), then all
            # the gradient bytes over the link.
            after = M if p.schedule == "gpipe" else 1
            last_op = (
                pace
                + p.fwd_prefix[L]
                - p.fwd_prefix[at]
                + (S - k) * mu
                + p.send_s[k - 1, at]
                + after * (p.bwd_prefix[L] - p.bwd_prefix[L - 1])
            )
            carried = p.shared_latency_s + p.shared_s_per_byte * p.grad_prefix[L]
            bound = np.maximum(bound, last_op + carried)
        if (bound >= limit).all():
            return bound + p.overhead_s
        l1_rest = placed - p.fwd_prefix[at] - p.bwd_prefix[at] - shift + self.table("l1")[k][at]
        bound = np.maximum(bound, l1_rest + tail0)
        total = (
            placed
            + (p.fwd_prefix[L] + p.bwd_prefix[L] - p.fwd_prefix[at] - p.bwd_prefix[at])
            + (S - k) * mu
            + self.table("sends")[k][at]
        )
        if p.schedule == "gpipe":
            forwards = np.maximum(pf, self.table("fwd")[k][at])
            machines = forwards + np.maximum(pb, self.table("bwd")[k][at])
            # With one micro-batch no machine repeats (and inf·0, where no completion fits,
            # would be NaN; the other terms are inf there).
            repeats = (M - 1) * machines if M > 1 else 0.0
            bound = np.maximum(bound, total + repeats + tail0)
        else:
            bound = np.maximum(bound, total + np.maximum(p3, self.table("round")[k][at]) + tail0)
        if (bound >= limit).all():
            return bound + p.overhead_s
        bound = np.maximum(bound, a - p.fwd_prefix[at] - shift + self.table("l1own")[k][at])
        if self.shares_one_link:
            nic_rest = a - p.fwd_prefix[at] - shift + p.shared_latency_s + self.table("nic")[k][at]
            bound = np.maximum(bound, nic_rest)
            # The last stage's last op after an unplaced stage t's last forward (its M
            # forwards and the M − nF_t backwards before it), the forwards after t and the
            # last stage's backwards; then all the gradient bytes over the link.
            after = M if p.schedule == "gpipe" else 1
            paced = (
                a
                - p.fwd_prefix[at]
                + p.fwd_prefix[L]
                + (S - 1 - k) * mu
                + after * (p.bwd_prefix[L] - p.bwd_prefix[L - 1])
                + self.table("pace")[k][at]
            )
            carried = p.shared_latency_s + p.shared_s_per_byte * p.grad_prefix[L]
            bound = np.maximum(bound, paced + carried)
        if p.schedule == "1f1b":
            bound = np.maximum(bound, self._suffix_windows(k, at, a + d + tail0))
        if p.forward_only_layers:
            rest = self._at_depth("training rest", k, self._training_rest)[at]
            bound = np.maximum(bound, a + d + tail0 + rest)
        return bound + p.overhead_s

    def root_bound(self, tables: dict[str, float]) -> float:
        """`bounds` with no stage placed, from each table's value at (stage 0, layer 0)
        (`root_bounds` builds them): the sends' table is left out (0 ≤ it)."""
        p = self.p
        M, S, L = p.micro_batches, p.num_stages, p.num_layers
        mu = p.micro_batch_overhead_s
        tail0 = self.root_tail()
        total = p.fwd_prefix[L] + p.bwd_prefix[L] + S * mu
        terms = [tables["l1"] + tail0, tables["l1own"]]
        if p.schedule == "gpipe":
            machines = tables["fwd"] + tables["bwd"]
            terms.append(total + ((M - 1) * machines if M > 1 else 0.0) + tail0)
        else:
            terms.append(total + tables["round"] + tail0)
        if self.shares_one_link:
            after = M if p.schedule == "gpipe" else 1
            carried = p.shared_latency_s + p.shared_s_per_byte * p.grad_prefix[L]
            terms.append(p.shared_latency_s + tables["nic"])
            last = after * (p.bwd_prefix[L] - p.bwd_prefix[L - 1])
            terms.append(p.fwd_prefix[L] + (S - 1) * mu + last + tables["pace"] + carried)
        return float(max(terms)) + p.overhead_s

    def root_tail(self) -> float:
        """The least tail0 of any partition: the first stage that trains holds the first
        active layer (after the frozen prefix), whatever stage it is."""
        p = self.p
        first = max(p.min_first_boundary - 1, p.forward_only_layers)
        if first >= p.num_layers:
            return 0.0
        g = float(p.grad_prefix[first + 1] - p.grad_prefix[first])
        if g <= 0:
            return 0.0
        own = p.allreduce_latency_s + (p.allreduce_s_per_byte + p.optimizer_s_per_byte) * g
        return float(own.min())

    def _at_depth(
        self, term: str, k: int, compute: Callable[[int, np.ndarray], np.ndarray]
    ) -> np.ndarray:
        """compute(k, i) at every position i, kept: a term of `bounds` that depends only on the
        depth and the position is then computed once per depth, not in every expansion there
        (elementwise, so each position's value is the same)."""
        key = (term, k)
        if key not in self._depth_terms:
            self._depth_terms[key] = compute(k, np.arange(self.p.num_layers + 1))
        return self._depth_terms[key]

    def _training_rest(self, k: int, i: np.ndarray) -> np.ndarray:
        """What the training stages still to place add between micro-batch 0's arrival and
        the last gradient's way down (`_suffix_windows`' `around`), whichever stage q ≥ k
        turns out to be the first that trains: the smallest over the q still possible
        (those with a frozen layer for each forward-only stage) of `_training_terms`."""
        p = self.p
        terms = self._training_terms()[k:]
        first = max(0, p.min_forward_only_stages - k)
        if first:
            terms = np.concatenate([np.full(first, np.inf), terms[first:]])
        smallest_from = np.minimum.accumulate(terms)
        # Stages placed already train where i > the frozen prefix: q < k, windows from k.
        most = np.minimum(np.maximum(p.forward_only_layers - i, 0), len(smallest_from) - 1)
        smallest = smallest_from[most]
        # Frozen layers i..k−1 still run before any training stage's work, once at least.
        frozen = (
            p.fwd_prefix[p.forward_only_layers] - p.fwd_prefix[np.minimum(i, p.forward_only_layers)]
        )
        return np.where(i <= p.forward_only_layers, frozen + smallest, self._windows_from()[k])

    def _training_terms(self) -> np.ndarray:
        """[q]: with stage q the first that trains, the training stages add at least M times
        the smallest bottleneck of the layers that train in S − q parts, and (1F1B) the
        rounds of every window of 2..8 training stages from q on (`_windows_from`)."""
        if self._rest_terms is None:
            p = self.p
            S, L, M = p.num_stages, p.num_layers, p.micro_batches
            first = max(p.min_first_boundary - 1, p.forward_only_layers)
            table = p.suffix_bottleneck
            q = np.arange(S + 1)
            if table is not None:
                parts = np.clip(S - q, 1, L - first)
                stage = table[parts, first] + p.micro_batch_overhead_s
            else:
                stage = np.full(S + 1, self._lightest_stage())
            self._rest_terms = np.maximum(M * stage, self._windows_from())
            self._rest_terms[S] = np.inf  # the last stage always trains
        return self._rest_terms

    def _lightest_stage(self) -> float:
        """The least c of a training stage: it holds an active layer (+ μ)."""
        p = self.p
        first = max(p.min_first_boundary - 1, p.forward_only_layers)
        c = np.diff(p.fwd_prefix + p.bwd_prefix)[first:]
        return float(c.min()) + p.micro_batch_overhead_s

    def _windows_from(self) -> np.ndarray:
        """[s]: 1F1B, the largest over windows [t, t+w−1] of training stages with t ≥ s
        (2 ≤ w ≤ 8) of their rounds (`simulate.window_counts`: ⌊(M − S + t − 1)/w⌋ + 1)
        times the lightest w consecutive training layers they can hold (+ w·μ) and the
        cheapest transfers over their inner boundaries, after micro-batch 0's round trip
        below the window (the last layers, one per stage after it, and the cheapest
        transfers after it); zeros for GPipe."""
        if self._window_terms is None:
            p = self.p
            S, M, L = p.num_stages, p.micro_batches, p.num_layers
            result = np.zeros(S + 1)
            first = max(p.min_first_boundary - 1, p.forward_only_layers)
            if p.schedule == "1f1b" and S > 1 and first + 1 < L:
                positions = slice(first + 1, L)  # a boundary between two training stages
                sends = p.send_s[: S - 1, positions] + p.grad_send_s[: S - 1, positions]
                cheapest = sends.min(axis=1)
                C = p.fwd_prefix + p.bwd_prefix
                t = np.arange(S)
                # [u]: the cheapest transfers over boundaries u..S−2.
                sends_after = np.append(np.cumsum(cheapest[::-1])[::-1], 0.0)
                for w in range(2, min(S, 8) + 1):
                    starts = t[: S - w + 1]
                    # The window's stages hold w or more consecutive training layers, leaving
                    # one for each of the S − t − w stages after it: at least the lightest w
                    # consecutive layers from `first` that end by L − (S − t − w).
                    if first + w > L:  # fewer training layers than w stages
                        break
                    light = np.minimum.accumulate(C[first + w :] - C[first : L + 1 - w])
                    ends = L - (S - starts - w)  # the window's layers end by here
                    work = np.where(
                        ends - w >= first,
                        light[np.clip(ends - w - first, 0, len(light) - 1)],
                        np.inf,
                    )
                    work = work + w * p.micro_batch_overhead_s
                    inner = np.convolve(cheapest, np.ones(w - 1), "valid")  # boundaries t..t+w−2
                    slack = M - S + starts - 1
                    rounds = np.where(slack >= 0, np.maximum(slack, 0) // w + 1, 0)
                    # Before the rounds, micro-batch 0's round trip below the window: at least
                    # the last S − t − w layers and the cheapest transfers after the window.
                    after = S - starts - w
                    below = C[L] - C[L - after] + after * p.micro_batch_overhead_s
                    below = below + sends_after[starts + w - 1]
                    # inf where a window there cannot hold w training layers (no completion
                    # has that many training stages); no rounds: 0 (inf·0 would be NaN).
                    with np.errstate(invalid="ignore"):
                        cycles = rounds * (work + inner[: len(starts)])
                        value = np.where(rounds > 0, cycles + below, 0.0)
                    result[: len(starts)] = np.maximum(result[: len(starts)], value)
                result[:S] = np.maximum.accumulate(result[:S][::-1])[::-1]
            self._window_terms = result
        return self._window_terms

    def _suffix_windows(self, k: int, at: slice, around: np.ndarray) -> np.ndarray:
        """1F1B: some window of w stages among the S − k unplaced ones holds at least the
        smallest bottleneck of [i, L) in ⌈(S−k)/w⌉ parts (group them w by w), and cycles at
        least ⌊(M − S + k − 1)/w⌋ + 1 rounds (`simulate.window_counts`: its first stage t ≥ k
        has w_t ≤ S−1−k), between micro-batch 0's arrival and the last gradient's way down
        (`around`: a + d + tail0 of the placed stages), for the positions i in `at`."""
        p = self.p
        left = p.num_stages - k
        slack = p.micro_batches - p.num_stages + k - 1
        if p.suffix_bottleneck is None or left < 1 or slack < 0:
            return np.zeros_like(around)
        return around + self._at_depth("windows", k, self._suffix_window_work)[at]

    def _suffix_window_work(self, k: int, i: np.ndarray) -> np.ndarray:
        """`_suffix_windows` less `around`, at positions i (where its guards pass): per w,
        the rounds times the smallest window's work, the largest of them."""
        p = self.p
        table = p.suffix_bottleneck
        left = p.num_stages - k
        slack = p.micro_batches - p.num_stages + k - 1
        w = np.arange(1, left + 1)
        rounds, parts = slack // w + 1, -(-left // w)
        F = p.forward_only_layers
        # Where the stages left may begin with r forward-only ones (i < F), the rest train,
        # start later (more rounds) and cover [F, L) at least; grouped w by w they form at
        # most ⌈left/w⌉ windows (one of at most w stages when w exceeds them), and the
        # smallest bottleneck of [F, L) in that many parts (at most one per layer) is below
        # their largest window's work.
        layers_left = p.num_layers - F
        may = i < F
        column = np.where(may, F, i)[None, :]
        parts = np.where(may[None, :], np.minimum(parts[:, None], layers_left), parts[:, None])
        windows = table[parts, column] + p.micro_batch_overhead_s
        return (rounds[:, None] * windows).max(axis=0)

    def tail_floor(self) -> np.ndarray:
        """[k]: the least tail (all-reduce alone + optimizer) the first stage that trains can
        have when it is stage k or later: it holds the first active layer's gradient."""
        if self._tail_floor is None:
            p = self.p
            first = p.forward_only_layers
            g = float(p.grad_prefix[first + 1] - p.grad_prefix[first])
            tails = np.zeros(p.num_stages + 1)
            if g > 0:
                own = p.allreduce_latency_s + (p.allreduce_s_per_byte + p.optimizer_s_per_byte) * g
                tails[: p.num_stages] = np.minimum.accumulate(own[::-1])[::-1]
            self._tail_floor = tails
        return self._tail_floor

    # ------------------------------------------------------------------ tables

    @functools.cached_property
    def shares_one_link(self) -> bool:
        """Whether one node link carries every stage's all-reduce, and the first stage that
        trains moves bytes over it (its first layer has parameters), so that every stage's
        term pays the ring latency (asked by every bound: computed once)."""
        p = self.p
        first_active = max(p.min_first_boundary - 1, p.forward_only_layers)
        return bool(
            p.shared_links.shape[0]
            and p.shared_links.all(axis=1).any()
            and p.grad_prefix[first_active + 1] > p.grad_prefix[first_active]
        )

    def table(self, name: str) -> list[np.ndarray]:
        """One of the min-max tables of the unplaced stages, built when first needed: "l1",
        "l1own", "nic", "sends", "round" (1F1B), "fwd" and "bwd" (GPipe). A stage t's ops
        include what they receive (`simulate.received_in_op`): its forward the activation
        over boundary t−1 at its first layer i (in R, any function of i), its backward the
        gradient over boundary t at its end j (in Q, which `minmax_tables` needs nondecreasing:
        its running minimum from the right, a lower envelope)."""
        if name not in self._tables:
            self._tables[name] = self._build_table(name)
        return self._tables[name]

    def adopt(self, tables: dict[str, np.ndarray]) -> bool:
        """Take the min-max tables `root_bounds` built for this shape (`keep`) as this tree's,
        when memory limits no stage's end here: the tables are then the same, row for row,
        and the tree need not build them again. Whether they were taken.

            space.adopt(kept[row])"""
        p = self.p
        if not np.array_equal(self._last_ends_all(), relaxed_ends(p.num_stages, p.num_layers)):
            return False
        for name, table in tables.items():
            self._tables.setdefault(name, list(table))
        return True

    def _build_table(self, name: str) -> list[np.ndarray]:
        p = self.p
        if name == "sends":
            return self._min_sends()
        # Shared with the other shapes of the same S, m, schedule and boundary links, under a
        # name that says M where the table depends on it; l1own and nic depend on the
        # replicas' all-reduce. The tables a bound needs are built together.
        shared = {"l1": f"l1/{p.micro_batches}", "round": f"round/{p.micro_batches}"}
        shared.update(fwd="fwd", bwd="bwd")
        names = self.table_names()
        if name not in names:
            names.append(name)
        built = [n for n in names if n not in self._tables and shared.get(n) not in self._shared]
        costs = table_costs(p, built)
        for n, table in zip(built, self._minmax(costs), strict=True):
            self._tables[n] = table
            if n in shared:
                self._shared[shared[n]] = table
        for n in names:
            if n in shared and n not in self._tables:
                self._tables[n] = self._shared[shared[n]]
        return self._tables[name]

    def table_names(self) -> list[str]:
        """The min-max tables a bound of this shape reads (built together)."""
        names = ["l1", "l1own"] + (["fwd", "bwd"] if self.p.schedule == "gpipe" else ["round"])
        return names + (["nic", "pace"] if self.shares_one_link else [])

    def _positions(self, k: int) -> np.ndarray:
        """Where stage k may start: after k one-layer stages (stage 1 after the frozen prefix)
        and before one layer for each stage from k on."""
        key = ("positions", k)
        if key not in self._shared:  # the same for every shape of this S in this phase
            p = self.p
            L = p.num_layers
            valid = np.zeros(L + 1, dtype=bool)
            lo = k + (p.min_first_boundary - 1 if k >= 1 else 0)
            valid[lo : L - (p.num_stages - k) + 1] = True
            self._shared[key] = valid
        return self._shared[key]

    def _minmax(self, costs: list[tuple[np.ndarray, ...]]) -> list[list[np.ndarray]]:
        """`minmax_tables` of this shape's costs, on its memory limits."""
        S = self.p.num_stages
        positions = np.stack([self._positions(k) for k in range(S)])
        stacked = tuple(np.stack(part) for part in zip(*costs, strict=True))
        tables = minmax_tables(stacked, self._last_ends_all(), positions)
        return [list(tables[:, row]) for row in range(len(costs))]

    def _last_ends_all(self) -> np.ndarray:
        """[k, i]: `last_ends(k)[i]` for every stage (the tables read them all)."""
        if "all" not in self._last:
            self._last["all"] = np.stack([self.last_ends(k) for k in range(self.p.num_stages)])
        return self._last["all"]

    def _min_sends(self) -> list[np.ndarray]:
        """X[k][i]: the smallest sum of boundary transfers X_t(b_{t+1}) over stages k..S−2
        starting at i (memory ignored: a relaxation)."""
        p = self.p
        S, L = p.num_stages, p.num_layers
        tables = [np.zeros(L + 1) for _ in range(S + 1)]
        for k in range(S - 2, 0, -1):
            value = p.send_s[k] + p.grad_send_s[k] + tables[k + 1]
            value[L - (S - 1 - k) + 1 :] = np.inf  # leave a layer for each later stage
            value[0] = np.inf
            best_from = np.minimum.accumulate(value[::-1])[::-1]  # min over j ≥ index
            tables[k] = np.append(best_from[1:], np.inf)  # j ≥ i + 1
        return tables

    def leaf_bound(self, boundaries: tuple[int, ...]) -> float:
        """`simulate.step_lower_bound_s` of a complete partition (all-reduces alone)."""
        works = self.stage_works(boundaries)
        return step_lower_bound_s(works, self.p.micro_batches, self.p.schedule) + self.p.overhead_s

    def stage_works(self, boundaries: tuple[int, ...]) -> list[StageWork]:
        p = self.p
        S = p.num_stages
        works = []
        for k in range(S):
            i, j = boundaries[k], boundaries[k + 1]
            grads = p.grad_prefix[j] - p.grad_prefix[i]
            allreduce = (
                p.allreduce_latency_s[k] + p.allreduce_s_per_byte[k] * grads if grads > 0 else 0.0
            )
            works.append(
                StageWork(
                    fwd_s=float(p.fwd_prefix[j] - p.fwd_prefix[i] + p.micro_batch_overhead_s),
                    bwd_s=float(p.bwd_prefix[j] - p.bwd_prefix[i]),
                    has_backward=j > p.forward_only_layers,
                    send_fwd_s=float(p.send_s[k][j]) if k < S - 1 else 0.0,
                    send_bwd_s=float(p.grad_send_s[k - 1][i]) if k > 0 else 0.0,
                    allreduce_s=float(allreduce),
                    optimizer_s=float(p.optimizer_s_per_byte * grads),
                )
            )
        return received_in_op(works)  # as `CostModel.stages` prices them

    # ------------------------------------------------------------------ heuristics

    def balanced(self) -> tuple[int, ...] | None:
        """Cuts where the prefix sum of stage work crosses k/S of the total (stage 0 holding
        the frozen prefix), if that fits memory."""
        p = self.p
        C = p.fwd_prefix + p.bwd_prefix
        boundaries = _greedy_time_balance(C, p.num_stages, p.min_first_boundary)
        if boundaries is None or boundaries[p.min_forward_only_stages] > p.forward_only_layers:
            return None
        for k in range(p.num_stages):
            if boundaries[k + 1] > self.last_ends(k)[boundaries[k]]:
                return None
        return boundaries

    def dive(self) -> Node | None:
        """A complete partition by always taking the child with the smallest bound."""
        node = self.root()
        while node.depth < self.p.num_stages:
            children = self.expand(node)
            if not children:
                return None
            node = min(children, key=lambda item: item[0])[1]
        return node


def _span(j: np.ndarray) -> slice:
    """The slice of consecutive positions `j` (`PartitionSpace.ends`, never empty here):
    a slice reads a view where fancy indexing copies, in every expansion.

        _span(np.arange(3, 7)) == slice(3, 7)"""
    return slice(int(j[0]), int(j[-1]) + 1)


@functools.lru_cache(maxsize=4096)
def _window_counts(k: int, first: int, S: int, M: int) -> tuple[np.ndarray, ...]:
    """`simulate.window_counts`, kept: the same few (k, first, S, M) recur across every
    shape and phase of a plan. Read-only, as they are shared."""
    counts = window_counts(k, first, S, M)
    for array in counts:
        array.flags.writeable = False
    return counts


def table_costs(p: StagePricing, names: list[str]) -> list[tuple[np.ndarray, ...]]:
    """The (Q, R, κ) of min-max tables of `PartitionSpace` (see `minmax_tables`) of one
    shape: `batch_table_costs` of it alone."""
    return [tuple(part[0] for part in costs) for costs in batch_table_costs([p], names)]


def batch_table_costs(
    pricings: list[StagePricing], names: list[str]
) -> list[tuple[np.ndarray, ...]]:
    """Per name, the (Q, R, κ) of a min-max table of `PartitionSpace` (see `minmax_tables`)
    for shapes with as many stages (a first axis per shape: numpy's per-call overhead, not
    the arithmetic, is what a shape's costs cost): "l1", "l1own", "nic", "round" (1F1B),
    "pace", "fwd" and "bwd" (GPipe). A stage t's ops include what they receive
    (`simulate.received_in_op`): its forward the activation over boundary t−1 at its first
    layer i (in R, any function of i), its backward the gradient over boundary t at its end
    j (in Q, which must be nondecreasing: its running minimum from the right, a lower
    envelope)."""
    S = pricings[0].num_stages

    def per_shape(value: Callable[[StagePricing], object]) -> np.ndarray:
        return np.array([value(p) for p in pricings], dtype=float)

    # [shape, stage, position] (a 1 where the value does not depend on it).
    M = per_shape(lambda p: p.micro_batches)[:, None, None]
    mu = per_shape(lambda p: p.micro_batch_overhead_s)[:, None, None]
    Fp = per_shape(lambda p: p.fwd_prefix)[:, None, :]
    Bp = per_shape(lambda p: p.bwd_prefix)[:, None, :]
    Gp = per_shape(lambda p: p.grad_prefix)[:, None, :]
    Cp = Fp + Bp
    # What stage k receives, its forward at its start (over boundary k−1), its backward at
    # its end (over boundary k).
    zero = np.zeros((len(pricings), 1, Fp.shape[2]))
    rf = np.concatenate([zero, np.stack([p.send_s[: S - 1] for p in pricings])], axis=1)
    rb = np.concatenate([np.stack([p.grad_send_s[: S - 1] for p in pricings]), zero], axis=1)
    # [shape, stage]: the μ of stages before k and of k's M micro-batches.
    ahead = (np.arange(S)[None, :] + M[:, :, 0]) * mu[:, :, 0]
    later = M - per_shape(lambda p: p.forwards_first)[:, :, None]

    def rising(Q: np.ndarray) -> np.ndarray:
        return np.minimum.accumulate(Q[:, :, ::-1], axis=2)[:, :, ::-1]

    def l1():
        return rising(M * (Cp + rb)), (M - 1) * Cp - M * rf, ahead

    def l1own():
        rate = per_shape(lambda p: p.allreduce_s_per_byte + p.optimizer_s_per_byte)[:, :, None]
        Q = M * Cp + rate * Gp
        return rising(Q + M * rb), Q - Fp - M * rf, ahead

    def round_trip():
        Q = (M - 1) * Bp + later * Fp
        return rising(Q + (M - 1) * rb), Q - later * rf, later[:, :, 0] * mu[:, :, 0]

    def nic():  # every stage's all-reduce crosses one link: stages ≤ k's bytes
        per_byte = per_shape(lambda p: p.shared_s_per_byte)[:, None, None]
        Q = M * Cp + per_byte * Gp + M * rb
        return rising(Q), M * Cp - Fp - M * rf, ahead

    def fwd():
        return np.broadcast_to(Fp, rf.shape), Fp - rf, np.broadcast_to(mu[:, :, 0], ahead.shape)

    def pace():  # stage k's last forward, less the forwards of the layers after it
        Q = (M - 1) * Fp + later * Bp
        kappa = np.broadcast_to((M * mu)[:, :, 0], ahead.shape)
        return rising(Q + later * rb), Q - M * rf, kappa

    def bwd():
        return rising(Bp + rb), np.broadcast_to(Bp, rb.shape), np.zeros(ahead.shape)

    costs = {"l1": l1, "l1own": l1own, "round": round_trip, "nic": nic, "fwd": fwd}
    costs.update(pace=pace, bwd=bwd)
    return [costs[name]() for name in names]


def minmax_tables(
    costs: tuple[np.ndarray, ...], his: np.ndarray, positions: np.ndarray, down_to: int = 1
) -> np.ndarray:
    """[k, cost, i] for k ≥ `down_to`: per cost (`costs` = (Q, R, κ), Q and R: [cost,
    stage t, position], κ: [cost, t]), T[k][i] ≤ min over placements of stages k..S−1 on
    [i, L) of max_t u_t, u_t(i', j) = Q_t[j] − R_t[i'] + κ_t nondecreasing in j; stage t
    ends by his[t][i'] and starts only where positions[t]. Backwards over k: T[k][i] =
    min_j max(u_k(i, j), T'[j]) with T' the running minimum of T[k+1] (nonincreasing,
    ≤ T[k+1]), so the best j is at the crossing of a nondecreasing and a nonincreasing
    sequence: found by bisection on Q_k − T'. The costs go together, one row each (numpy's
    per-call overhead, not the arithmetic, is what a table of tens of layers costs). `his`
    may hold one [S, L+1] for every cost or one per cost ([cost, S, L+1])."""
    S, n = len(positions), len(costs[0])
    L = positions.shape[1] - 1
    # [t, cost, position], [t, cost, 1]
    Qs, Rs = (np.ascontiguousarray(np.swapaxes(part, 0, 1)) for part in costs[:2])
    kappas = costs[2].T[:, :, None]
    his = his if his.ndim == 2 else np.moveaxis(his, 0, 1)  # [t, position] or [t, cost, ...]
    lo = np.arange(1, L + 2)  # j ≥ i + 1
    rows = np.arange(n)[:, None]  # fancy indexing row by row (take_along_axis costs more)
    tables = np.full((S + 1, n, L + 1), np.inf)
    Q, R, kappa = Qs[S - 1], Rs[S - 1], kappas[S - 1]
    last = np.where(his[S - 1] >= L, Q[:, L:] - R + kappa, np.inf)
    tables[S - 1] = np.where(positions[S - 1], last, np.inf)
    with np.errstate(invalid="ignore"):
        for k in range(S - 2, down_to - 1, -1):
            Q, R, kappa = Qs[k], Rs[k], kappas[k]
            after = np.minimum.accumulate(tables[k + 1], axis=1)
            crossing = np.maximum.accumulate(Q - after, axis=1)
            split = _search_rows(crossing, R - kappa)
            hi = his[k]
            j1 = np.maximum(split, lo)
            above = np.where(j1 <= hi, Q[rows, np.minimum(j1, L)] - R + kappa, np.inf)
            j2 = np.minimum(split - 1, hi)  # ≤ L; below 0 only where j2 < lo anyway
            below = np.where(j2 >= lo, after[rows, np.maximum(j2, 0)], np.inf)
            tables[k] = np.where(positions[k], np.minimum(above, below), np.inf)
    return tables


# The tables whose costs do not depend on the schedule (`table_costs`): a shape's GPipe and
# 1F1B spaces share them.
SCHEDULE_FREE_TABLES = ("l1", "l1own", "nic")


def root_bounds(
    spaces: list[PartitionSpace],
    shapes: list | None = None,
    kept: dict[int, dict[str, np.ndarray]] | None = None,
    keep_below: float = -np.inf,
) -> np.ndarray:
    """Per space (shapes of one phase with the same number of stages), a lower bound on the
    step of every partition: the families of `PartitionSpace.bounds` at the root (no stage
    placed), with every table built for all the spaces in one `minmax_tables` (memory and
    the forward-only ends relaxed, the transfers' sum dropped: a lower bound still).

        bounds = root_bounds([space_a, space_b])   # shapes whose bound clears it stay closed

    A shape's closed-form bound misses the integrality of layers and the transfers at each
    boundary; its root expansion would build these tables one shape at a time. `shapes`:
    per space, a key equal for the spaces of one shape (S, D, M, m) under both schedules,
    whose SCHEDULE_FREE_TABLES are then built once. `kept`: filled, for each row whose bound
    is below `keep_below` (a tree that may open), with copies of its whole tables ([stage,
    position] per name) for `PartitionSpace.adopt`."""
    first = spaces[0].p
    S, L = first.num_stages, first.num_layers
    batches: dict[str, list[int]] = {}  # per table, the spaces whose costs it is built for
    owners: list[tuple[int, str, int]] = []  # (space, table, index in the table's batch)
    built: dict[tuple, int] = {}
    for row, space in enumerate(spaces):
        for name in space.table_names():
            shared = shapes is not None and name in SCHEDULE_FREE_TABLES
            key = (shapes[row], name) if shared else None
            if key in built:
                owners.append((row, name, built[key]))
                continue
            batch = batches.setdefault(name, [])
            owners.append((row, name, len(batch)))
            if key is not None:
                built[key] = len(batch)
            batch.append(row)
    # The costs of the tables built for the same spaces at once; their rows one table after
    # another.
    names_of: dict[tuple[int, ...], list[str]] = {}
    for name, rows in batches.items():
        names_of.setdefault(tuple(rows), []).append(name)
    parts, offsets = [], {}
    for rows, names in names_of.items():
        built_costs = batch_table_costs([spaces[row].p for row in rows], names)
        for name, part in zip(names, built_costs, strict=True):
            offsets[name] = sum(len(done[0]) for done in parts)
            parts.append(part)
    costs = tuple(np.concatenate([part[n] for part in parts]) for n in range(3))
    owners = [(row, name, offsets[name] + index) for row, name, index in owners]
    # Each stage leaves a layer for every later one; memory is not checked (a relaxation).
    his = relaxed_ends(S, L)
    positions = np.stack([spaces[0]._positions(k) for k in range(S)])
    full = minmax_tables(costs, his, positions, down_to=0)
    tables = full[0, :, 0]
    values: list[dict[str, float]] = [{} for _ in spaces]
    for row, name, cost in owners:
        values[row][name] = float(tables[cost])
    bounds = np.array([space.root_bound(v) for space, v in zip(spaces, values, strict=True)])
    if kept is not None:
        for row, name, cost in owners:
            if bounds[row] < keep_below:
                kept.setdefault(row, {})[name] = full[:, cost].copy()
    return bounds


def relaxed_ends(num_stages: int, num_layers: int) -> np.ndarray:
    """[k, i]: the last end of stage k from i when memory is not checked (a layer left for
    every later stage), as `root_bounds` builds its tables.

        relaxed_ends(2, 3)   # [[2, 2, 2, 2], [3, 3, 3, 3]]"""
    S, L = num_stages, num_layers
    return np.repeat(np.minimum(L, L - (S - 1 - np.arange(S)))[:, None], L + 1, axis=1)


# Rows of at most this many positions are searched by one comparison of every pair.
SEARCH_PAIRS_MAX = 96


def _search_rows(sorted_rows: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Per row r, `np.searchsorted(sorted_rows[r], values[r], side="left")` (NaN sorts last,
    as there): one broadcast comparison for short rows, a loop for long ones."""
    if sorted_rows.shape[1] <= SEARCH_PAIRS_MAX:
        return (sorted_rows[:, None, :] < values[:, :, None]).sum(axis=2)
    pairs = zip(sorted_rows, values, strict=True)
    return np.stack([np.searchsorted(row, value, side="left") for row, value in pairs])
