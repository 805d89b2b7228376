"""Exact contiguous partition of a layer sequence into S stages minimising the bottleneck stage
under each stage's memory limit (docs/architecture.md §4.9).

    result = solve_partition(problem)   # None when no partition fits; result.boundaries

Two exact methods, `dense` (O(S·L²), the reference) and `parametric` (bisection on the
bottleneck with an O(S·L) feasibility test); `brute_force_partition` enumerates every
partition. The tests compare all three.
"""

from __future__ import annotations

import itertools
import math
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
    dense DP, whose s-th step is the answer for s + 1 stages, O(max_stages·L²)."""
    L = len(compute_s)
    C = np.concatenate([[0.0], np.cumsum(compute_s)])
    starts = np.arange(L + 1)
    cost = np.where(starts[:, None] < starts[None, :], C[None, :] - C[:, None], np.inf)
    best = np.where(starts >= min_first_boundary, C, np.inf)  # one stage: [0, j)
    result = np.full(max_stages, np.inf)
    result[0] = best[L]
    for s in range(1, max_stages):
        best = np.maximum(best[:, None], cost).min(axis=0)
        result[s] = best[L]
    return result


def suffix_bottlenecks(compute_s: np.ndarray, max_parts: int) -> np.ndarray:
    """[p, i]: the smallest largest part sum of compute_s[i:] split into p contiguous parts
    (inf when there are fewer layers than parts; p = 0 is inf), by a dense DP, O(p·L²)."""
    L = len(compute_s)
    C = np.concatenate([[0.0], np.cumsum(compute_s)])
    starts = np.arange(L + 1)
    cost = np.where(starts[:, None] < starts[None, :], C[None, :] - C[:, None], np.inf)  # [i, j]
    table = np.full((max_parts + 1, L + 1), np.inf)
    table[1, :L] = C[L] - C[:L]
    for parts in range(2, max_parts + 1):
        table[parts] = np.maximum(cost, table[parts - 1][None, :]).min(axis=1)
    return table


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
    All stages train: the frozen prefix lies in stage 0, whose last layer is active."""

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
    c + X (its work and the transfers over its last boundary, for windows), `shared` the
    gradient bytes of fixed stages on each shared link still open (`PartitionSpace.open`)."""

    depth: int
    position: int
    sums: tuple[float, ...]
    parent: Node | None = None
    cycle: float = 0.0
    shared: tuple[float, ...] = ()

    @property
    def boundaries(self) -> tuple[int, ...]:
        positions = []
        node: Node | None = self
        while node is not None:
            positions.append(node.position)
            node = node.parent
        return tuple(reversed(positions))

    def cycles(self, count: int) -> np.ndarray:
        """c + X of the last `count` fixed stages (fewer near the root), in stage order."""
        values = []
        node: Node | None = self
        while node is not None and node.parent is not None and len(values) < count:
            values.append(node.cycle)
            node = node.parent
        return np.array(values[::-1])


# Windows of at most this many fixed stages enter a node's bound (all, for shorter pipelines).
MAX_WINDOW_STAGES = 64
# Nodes with at most this many possible ends of their next stage are expanded one child at a
# time in plain Python (`_ScalarExpansion`), wider ones with numpy (and every node of a model
# longer than DENSE_MAX_LAYERS).
SCALAR_MAX_CHILDREN = 48
ROOT_SUMS = (0.0,) * 11


class PartitionSpace:
    """The contiguous partitions of one shape, with bounds for branch and bound.

        space = PartitionSpace(pricing)
        for bound, child in space.expand(space.root(), limit=best): ...

    With a_k = Σ_{t<k}(F_t + sf_t) (micro-batch 0's arrival at stage k), d_k = Σ_{t<k}(B_t +
    sb_{t+1}) (the last gradient's way from k down to stage 0), c_k = F_k + B_k, X_t = sf_t +
    sb_{t+1} and tail0 = A_0 + O_0, every step is at least (§4.8)
      L1_k = a_k + M·c_k + d_k + tail0 and a_k + M·c_k + A_k + O_k, for every stage k;
      1F1B: Σc + ΣX + (M−1)·B_k + (M − nF_k)·F_k + tail0 (micro-batch 0's round trip);
      GPipe: Σc + ΣX + (M−1)·(max F, sf + max B, sb) + tail0 (two flow shops).
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
    largest term, relaxed where needed (transfers between unplaced stages dropped from L1,
    latency from A) so that a bisection on one crossing point computes them (O(S·L·log L)).
    """

    def __init__(self, pricing: StagePricing, shared: dict | None = None):
        """`shared`: tables that do not depend on the replicas and links, kept by the caller
        for the other shapes with the same S, M, m and schedule."""
        self.p = pricing
        self._tables: dict[str, list[np.ndarray]] | None = None
        self._shared = {} if shared is None else shared
        self._last: dict[int, np.ndarray] = {}
        self._windows: dict[int, tuple[np.ndarray, ...]] = {}
        self._scalar_expansion: _ScalarExpansion | None = None
        self._valid: dict[int, np.ndarray] = {}
        links = pricing.shared_links
        S = pricing.num_stages
        stages = np.arange(S)
        first = np.where(links, stages, S).min(axis=1, initial=S)
        last = np.where(links, stages, -1).max(axis=1, initial=-1)
        # open[d]: the shared links with a stage fixed and one not, at depth d (stages < d).
        self.open = [np.flatnonzero((first < d) & (d <= last)) for d in range(S + 1)]

    # ------------------------------------------------------------------ ranges

    def root(self) -> Node:
        return Node(0, 0, ROOT_SUMS)

    def last_ends(self, k: int) -> np.ndarray:
        """Per start i, the largest end j of stage k: it fits memory and leaves a layer for
        every later stage."""
        if k not in self._last:
            p = self.p
            mem = p.memory_prefix[k]
            fits = np.searchsorted(mem, mem + p.memory_limit_bytes, side="right") - 1
            self._last[k] = np.minimum(fits, p.num_layers - (p.num_stages - 1 - k))
        return self._last[k]

    def ends(self, k: int, i: int) -> np.ndarray:
        p = self.p
        last = int(self.last_ends(k)[i])
        if k == p.num_stages - 1:
            return np.array([p.num_layers]) if last >= p.num_layers else np.array([], dtype=int)
        lo = max(i + 1, p.min_first_boundary if k == 0 else 0)
        return np.arange(lo, last + 1)

    # ------------------------------------------------------------------ expansion

    def expand(self, node: Node, limit: float = np.inf) -> list[tuple[float, Node]]:
        """The children of `node` whose bound is below `limit`, with their bounds: one child
        at a time in plain Python when there are few (numpy's per-call overhead dominates on
        arrays of tens of positions), else vectorised over them; both give the same floats."""
        k, i = node.depth, node.position
        few = int(self.last_ends(k)[i]) - i <= SCALAR_MAX_CHILDREN
        # Long models' deep nodes bound each child by up to MAX_WINDOW_STAGES windows: numpy.
        if few and self.p.num_layers <= DENSE_MAX_LAYERS:
            return self._scalar().expand(node, limit)
        return self.expand_vectorised(node, limit)

    def expand_vectorised(self, node: Node, limit: float = np.inf) -> list[tuple[float, Node]]:
        """`expand` with numpy over the children's end positions."""
        k, i = node.depth, node.position
        j = self.ends(k, i)
        if j.size == 0:
            return []
        sums, cycle, shared = self._child_sums(node, j)
        bounds = self.bounds(k + 1, j, sums)
        keep = np.flatnonzero(bounds < limit)
        columns = np.stack(sums, axis=1)[keep].tolist()
        shared = shared[:, keep].T.tolist()
        return [
            (
                float(bounds[n]),
                Node(
                    k + 1, int(j[n]), tuple(columns[row]), node, float(cycle[n]), tuple(shared[row])
                ),
            )
            for row, n in enumerate(keep)
        ]

    def _scalar(self) -> _ScalarExpansion:
        if self._scalar_expansion is None:
            self._scalar_expansion = _ScalarExpansion(self)
        return self._scalar_expansion

    def window_counts(self, k: int) -> tuple[np.ndarray, ...]:
        """`simulate.window_counts` of the windows [t, k] that enter stage k's bound."""
        if k not in self._windows:
            p = self.p
            first = max(0, k - MAX_WINDOW_STAGES + 1)
            self._windows[k] = window_counts(k, first, p.num_stages, p.micro_batches)
        return self._windows[k]

    def suffix_rounds(self, k: int) -> np.ndarray | None:
        """`_suffix_rounds` at every first position i (None: the bound's term is then 0)."""
        return self._suffix_rounds(k, np.arange(self.p.num_layers + 1))

    def _child_sums(
        self, node: Node, j: np.ndarray
    ) -> tuple[tuple[np.ndarray, ...], np.ndarray, np.ndarray]:
        """The sums of the children whose stage `node.depth` ends at each j, that stage's
        c + X (for later windows) and the gradient bytes on each shared link."""
        p = self.p
        k, i = node.depth, node.position
        a, d, tail0, l1, l1own, p3, pf, pb, win, nic, pace = node.sums
        M = p.micro_batches
        F = p.fwd_prefix[j] - p.fwd_prefix[i] + p.micro_batch_overhead_s
        B = p.bwd_prefix[j] - p.bwd_prefix[i]
        c = F + B
        if k < p.num_stages - 1:
            sf, sb = p.send_s[k][j], p.grad_send_s[k][j]
        else:
            sf = sb = np.zeros_like(F)
        grads = p.grad_prefix[j] - p.grad_prefix[i]
        allreduce = np.where(
            grads > 0, p.allreduce_latency_s[k] + p.allreduce_s_per_byte[k] * grads, 0.0
        )
        own = allreduce + p.optimizer_s_per_byte * grads
        tail = own if k == 0 else np.full_like(F, tail0)
        ops_end = self._ops_end(node, j, F, B, sf + sb)
        before = p.forwards_first[k]
        # Stage k's last forward comes from its predecessors' last forwards (pace), after
        # which it still runs its remaining backwards.
        ops_end = np.maximum(ops_end, pace + F + min(before, M) * B)
        pace = np.maximum(pace + F + sf, a + M * F + max(M - before, 0) * B + sf)
        win = np.maximum(win, ops_end + np.maximum(d + tail, own))
        nic, shared = self._shared_links(node, grads, ops_end, nic)
        sums = (
            a + F + sf,
            d + B + sb,
            tail,
            np.maximum(l1, a + M * c + d),
            np.maximum(l1own, a + M * c + own),
            np.maximum(p3, (M - 1) * B + (M - p.forwards_first[k]) * F),
            np.maximum(pf, np.maximum(F, sf)),
            np.maximum(pb, np.maximum(B, sb)),
            win,
            nic,
            pace,
        )
        return sums, c + sf + sb, shared

    def _shared_links(
        self, node: Node, grads: np.ndarray, ops_end: np.ndarray, nic: float
    ) -> tuple[np.ndarray, np.ndarray]:
        """The new stage k's shared-link term and the bytes on the links left open: a link's
        all-reduces of stages ≤ k start after stage k's (stages end in reverse order), so
        their bytes pass after stage k's last op."""
        p = self.p
        k = node.depth
        before_k = np.zeros((len(p.shared_links), 1))
        before_k[self.open[k], 0] = node.shared
        with_k = before_k + grads[None, :] * p.shared_links[:, k][:, None]
        crossing = p.shared_links[:, k]
        if crossing.any():
            most = with_k[crossing].max(axis=0)
            nic = np.maximum(nic, ops_end + p.shared_latency_s + p.shared_s_per_byte * most)
        return np.broadcast_to(nic, grads.shape), with_k[self.open[k + 1]]

    def _ops_end(
        self, node: Node, j: np.ndarray, F: np.ndarray, B: np.ndarray, X: np.ndarray
    ) -> np.ndarray:
        """When the new stage k = node.depth (ending at each j) can end its last op: after its
        M·c of work from micro-batch 0's arrival, or after B_0 (its forwards before it or
        micro-batch 0's round trip below k, at least the work left after j, the transfer
        over j and the cheapest transfers after it), then for 1F1B the rounds of each window
        [t, k] of fixed stages (`simulate.window_counts`), for GPipe all its other work."""
        p = self.p
        S, M, L = p.num_stages, p.micro_batches, p.num_layers
        k = node.depth
        a = node.sums[0]
        if k < S - 1:
            work_left = p.fwd_prefix[L] + p.bwd_prefix[L] - p.fwd_prefix[j] - p.bwd_prefix[j]
            below = work_left + (S - 1 - k) * p.micro_batch_overhead_s + X
            below = below + self.tables()["sends"][k + 1][j]
        else:
            below = np.zeros_like(F)
        busy = a + M * (F + B)
        if p.schedule == "gpipe":
            return np.maximum(busy, a + M * F + below + M * B)
        first_bwd_end = a + np.maximum(p.forwards_first[k] * F, F + below) + B
        rounds, fwd_left, bwd_left = self.window_counts(k)
        # Work and transfers of the fixed stages t..k−1 of each window, then stage k's.
        recent = node.cycles(len(rounds) - 1)
        fixed = np.append(np.cumsum(recent[::-1])[::-1], 0.0)
        cycle = fixed[:, None] + (F + B)[None, :]
        terms = rounds[:, None] * cycle + fwd_left[:, None] * F + bwd_left[:, None] * B
        return np.maximum(busy, first_bwd_end + terms.max(axis=0))

    def bounds(self, k: int, i: np.ndarray, sums: tuple[np.ndarray, ...]) -> np.ndarray:
        """Lower bounds on the step of every completion of prefixes of k stages ending at
        positions i with the given sums (k = S: complete partitions)."""
        p = self.p
        a, d, tail0, l1, l1own, p3, pf, pb, win, nic, _ = sums
        M, S = p.micro_batches, p.num_stages
        placed = a + d  # Σ_{t<k} (c_t + X_t)
        bound = np.maximum.reduce([l1 + tail0, l1own, win, nic])
        if k == S:
            if p.schedule == "gpipe":
                bound = np.maximum(bound, placed + (M - 1) * (pf + pb) + tail0)
            else:
                bound = np.maximum(bound, placed + p3 + tail0)
            return bound + p.overhead_s
        t = self.tables()
        mu = p.micro_batch_overhead_s
        shift = k * mu
        bound = np.maximum(
            bound, placed - p.fwd_prefix[i] - p.bwd_prefix[i] - shift + t["l1"][k][i] + tail0
        )
        bound = np.maximum(bound, a - p.fwd_prefix[i] - shift + t["l1own"][k][i])
        if "nic" in t:
            nic_rest = a - p.fwd_prefix[i] - shift + p.shared_latency_s + t["nic"][k][i]
            bound = np.maximum(bound, nic_rest)
        total = (
            placed
            + (p.fwd_prefix[-1] + p.bwd_prefix[-1] - p.fwd_prefix[i] - p.bwd_prefix[i])
            + (S - k) * mu
            + t["sends"][k][i]
        )
        if p.schedule == "gpipe":
            machines = np.maximum(pf, t["fwd"][k][i]) + np.maximum(pb, t["bwd"][k][i])
            bound = np.maximum(bound, total + (M - 1) * machines + tail0)
        else:
            bound = np.maximum(bound, total + np.maximum(p3, t["round"][k][i]) + tail0)
            bound = np.maximum(bound, self._suffix_windows(k, i, a + d + tail0))
        return bound + p.overhead_s

    def _suffix_windows(self, k: int, i: np.ndarray, around: np.ndarray) -> np.ndarray:
        """1F1B: some window of w stages among the S − k unplaced ones holds at least the
        smallest bottleneck of [i, L) in ⌈(S−k)/w⌉ parts (group them w by w), and cycles at
        least ⌊(M − S + k − 1)/w⌋ + 1 rounds (`simulate.window_counts`: its first stage t ≥ k
        has w_t ≤ S−1−k), between micro-batch 0's arrival and the last gradient's way down
        (`around`: a + d + tail0 of the placed stages)."""
        windows = self._suffix_rounds(k, i)
        return np.zeros_like(around) if windows is None else around + windows

    def _suffix_rounds(self, k: int, i: np.ndarray) -> np.ndarray | None:
        """`_suffix_windows` less `around`; None when no window cycles."""
        p = self.p
        table = p.suffix_bottleneck
        left = p.num_stages - k
        slack = p.micro_batches - p.num_stages + k - 1
        if table is None or left < 1 or slack < 0:
            return None
        w = np.arange(1, left + 1)
        rounds = slack // w + 1
        parts = -(-left // w)
        windows = table[parts][:, i] + p.micro_batch_overhead_s
        return (rounds[:, None] * windows).max(axis=0)

    # ------------------------------------------------------------------ tables

    def tables(self) -> dict[str, list[np.ndarray]]:
        if self._tables is None:
            self._tables = self._build_tables()
        return self._tables

    def _build_tables(self) -> dict[str, list[np.ndarray]]:
        p = self.p
        M, mu = p.micro_batches, p.micro_batch_overhead_s
        Fp, Bp, Gp = p.fwd_prefix, p.bwd_prefix, p.grad_prefix
        Cp = Fp + Bp
        # The arrays that do not depend on k, computed once (stages mostly share their rate).
        work, work_before = M * Cp, (M - 1) * Cp
        own: dict[float, tuple[np.ndarray, np.ndarray]] = {}

        def l1(k: int):
            return work, work_before, (k + M) * mu

        def l1own(k: int):
            rate = p.allreduce_s_per_byte[k] + p.optimizer_s_per_byte
            if rate not in own:
                Q = work + rate * Gp
                own[rate] = Q, Q - Fp
            return *own[rate], (k + M) * mu

        trips: dict[int, np.ndarray] = {}

        def round_trip(k: int):
            before = p.forwards_first[k]  # = M for every stage with S − k ≥ M
            if before not in trips:
                trips[before] = (M - 1) * Bp + (M - before) * Fp
            return trips[before], trips[before], (M - before) * mu

        nic_Q, nic_R = work + p.shared_s_per_byte * Gp, work - Fp

        def nic(k: int):  # every stage's all-reduce crosses one link: stages ≤ k's bytes
            return nic_Q, nic_R, (k + M) * mu

        shared = {"l1": l1}
        if p.schedule == "gpipe":
            shared.update(fwd=lambda k: (Fp, Fp, mu), bwd=lambda k: (Bp, Bp, 0.0))
        else:
            shared["round"] = round_trip
        own_costs = {"l1own": l1own}
        if p.shared_links.shape[0] and p.shared_links.all(axis=1).any():
            own_costs["nic"] = nic
        # One pass over the stages for every table this shape lacks.
        missing = {name: cost for name, cost in shared.items() if name not in self._shared}
        built = self._minmax_many(missing | own_costs)
        self._shared.update({name: built[name] for name in missing})
        tables = {name: self._shared[name] for name in shared}
        tables.update({name: built[name] for name in own_costs})
        tables["sends"] = self._min_sends()
        return tables

    def _positions(self, k: int) -> np.ndarray:
        """Where stage k may start: after k one-layer stages (stage 1 after the frozen prefix)
        and before one layer for each stage from k on."""
        if k not in self._valid:
            p = self.p
            L = p.num_layers
            valid = np.zeros(L + 1, dtype=bool)
            lo = k + (p.min_first_boundary - 1 if k >= 1 else 0)
            valid[lo : L - (p.num_stages - k) + 1] = True
            self._valid[k] = valid
        return self._valid[k]

    def _minmax(self, cost) -> list[np.ndarray]:
        """T[k][i] ≤ min over placements of stages k..S−1 on [i, L) of max_t u_t, with
        u_t(i', j) = Q_t[j] − R_t[i'] + κ_t nondecreasing in j (`cost(t)` → Q_t, R_t, κ_t).
        Backwards over k: T[k][i] = min_j max(u_k(i, j), T'[j]) with T' the running minimum
        of T[k+1] (nonincreasing, ≤ T[k+1]), so the best j is at the crossing of a
        nondecreasing and a nonincreasing sequence: found by bisection on Q_k − T'."""
        return self._minmax_many({"table": cost})["table"]

    def _minmax_many(self, costs: dict) -> dict[str, list[np.ndarray]]:
        """`_minmax` of several costs at once (one row each: numpy's per-call overhead is
        paid once per stage, not once per table and stage, but for the bisection)."""
        p = self.p
        S, L = p.num_stages, p.num_layers
        names = list(costs)
        lo = np.arange(1, L + 2)  # each start's first end
        unused = np.full(L + 1, np.inf)  # stages 0 and S: never read
        tables: dict[str, list[np.ndarray]] = {name: [unused] * (S + 1) for name in names}
        if not names:
            return tables

        rows = np.arange(len(names))[:, None]
        split = np.empty((len(names), L + 1), dtype=np.int64)
        stacks: dict[str, tuple[list[np.ndarray], np.ndarray]] = {}

        def stack(key: str, arrays: list[np.ndarray]) -> np.ndarray:
            # Most costs return the same arrays for every k: stacked once.
            if key not in stacks or any(
                a is not b for a, b in zip(stacks[key][0], arrays, strict=True)
            ):
                stacks[key] = arrays, np.stack(arrays)
            return stacks[key][1]

        def stacked(k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
            parts = [costs[name](k) for name in names]
            Q = stack("Q", [part[0] for part in parts])
            R = stack("R", [part[1] for part in parts])
            return Q, R, np.array([[part[2]] for part in parts], dtype=float)

        Q, R, kappa = stacked(S - 1)
        last = np.where(self.last_ends(S - 1) >= L, Q[:, L : L + 1] - R + kappa, np.inf)
        current = np.where(self._positions(S - 1), last, np.inf)
        for row, name in enumerate(names):
            tables[name][S - 1] = current[row]
        with np.errstate(invalid="ignore"):
            for k in range(S - 2, 0, -1):
                Q, R, kappa = stacked(k)
                after = np.minimum.accumulate(current, axis=1)
                crossing = np.maximum.accumulate(Q - after, axis=1)
                target = R - kappa
                for r in range(len(names)):
                    split[r] = np.searchsorted(crossing[r], target[r], side="left")
                hi = self.last_ends(k)  # ≤ L
                j1 = np.maximum(split, lo)
                reached = Q[rows, np.minimum(j1, L)]
                above = np.where(j1 <= hi, reached - R + kappa, np.inf)
                j2 = np.minimum(split - 1, hi)
                kept = after[rows, np.maximum(j2, 0)]
                below = np.where(j2 >= lo, kept, np.inf)
                current = np.where(self._positions(k), np.minimum(above, below), np.inf)
                for row, name in enumerate(names):
                    tables[name][k] = current[row]
        return tables

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
                    has_backward=True,
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
        if boundaries is None:
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


class _ScalarExpansion:
    """`PartitionSpace.expand_vectorised` one child at a time on Python floats, for nodes with
    few children (numpy costs about a microsecond a call, whatever the array's length). The
    same operations in the same order as `_child_sums`, `_ops_end`, `_shared_links` and
    `bounds`, so the same floats; but a child is dropped as soon as one term of its bound
    reaches the limit, before the costlier terms are computed. The bound is the largest term
    plus the overhead and rounding is monotone, so that is exactly `bound < limit` failing; a
    NaN term (0·inf) fails the comparison too, as numpy's NaN-propagating maximum would."""

    def __init__(self, space: PartitionSpace):
        self.space = space
        p = space.p
        self.fwd = p.fwd_prefix.tolist()
        self.bwd = p.bwd_prefix.tolist()
        self.grad = p.grad_prefix.tolist()
        self.send = [row.tolist() for row in p.send_s]
        self.grad_send = [row.tolist() for row in p.grad_send_s]
        self.allreduce_latency = p.allreduce_latency_s.tolist()
        self.allreduce_per_byte = p.allreduce_s_per_byte.tolist()
        links = p.shared_links
        # Per stage: each shared link as 1.0 when its all-reduce crosses it (numpy multiplies
        # by the bool as a float), and the links it crosses.
        by_stage = links.T.tolist()
        self.crosses = [[1.0 if x else 0.0 for x in row] for row in by_stage]
        self.crossing = [[link for link, x in enumerate(row) if x] for row in by_stage]
        self.open = [o.tolist() for o in space.open]
        self._tables: dict[str, list[list[float]]] | None = None
        self._suffix: dict[int, list[float] | None] = {}
        self._windows: dict[int, tuple[list[int], ...]] = {}

    def tables(self) -> dict[str, list[list[float]]]:
        if self._tables is None:  # built on first use, as `bounds` and `_ops_end` do
            self._tables = {
                name: [row.tolist() for row in rows] for name, rows in self.space.tables().items()
            }
        return self._tables

    def suffix(self, k: int) -> list[float] | None:
        if k not in self._suffix:
            rounds = self.space.suffix_rounds(k)
            self._suffix[k] = None if rounds is None else rounds.tolist()
        return self._suffix[k]

    def windows(self, k: int) -> tuple[list[int], ...]:
        if k not in self._windows:
            self._windows[k] = tuple(x.tolist() for x in self.space.window_counts(k))
        return self._windows[k]

    def fixed_cycles(self, node: Node, count: int) -> list[float]:
        """`np.append(np.cumsum(node.cycles(count)[::-1])[::-1], 0.0)`: per window [t, k],
        the fixed stages t..k−1's c + X, summed from k−1 up as numpy's cumsum does."""
        sums: list[float] = []
        total = 0.0
        current: Node | None = node
        while current is not None and current.parent is not None and len(sums) < count:
            total = current.cycle if not sums else total + current.cycle
            sums.append(total)
            current = current.parent
        return [*sums[::-1], 0.0]

    def expand(self, node: Node, limit: float) -> list[tuple[float, Node]]:
        space, p = self.space, self.space.p
        S, M, L = p.num_stages, p.micro_batches, p.num_layers
        k, i = node.depth, node.position
        last = int(space.last_ends(k)[i])
        if k == S - 1:
            ends: range | list[int] = [L] if last >= L else []
        else:
            ends = range(max(i + 1, p.min_first_boundary if k == 0 else 0), last + 1)
        if not ends:
            return []
        a, d, tail0, l1, l1own, p3, pf, pb, win, nic, pace = node.sums
        fwd, bwd, grad = self.fwd, self.bwd, self.grad
        fi, bi, gi = fwd[i], bwd[i], grad[i]
        mu, overhead = p.micro_batch_overhead_s, p.overhead_s
        gpipe = p.schedule == "gpipe"
        sends = k < S - 1
        send, grad_send = (self.send[k], self.grad_send[k]) if sends else ([], [])
        latency, per_byte = self.allreduce_latency[k], self.allreduce_per_byte[k]
        omega = p.optimizer_s_per_byte
        before = p.forwards_first[k]
        first_backwards, later_backwards = min(before, M), max(M - before, 0)
        rest = fwd[L] + bwd[L]
        child = k + 1
        if child < S:
            t = self.tables()
            t_l1, t_own, t_sends = t["l1"][child], t["l1own"][child], t["sends"][child]
            t_nic = t["nic"][child] if "nic" in t else None
            if gpipe:
                t_fwd, t_bwd = t["fwd"][child], t["bwd"][child]
            else:
                t_round, suffix = t["round"][child], self.suffix(child)
            shift, unplaced = child * mu, (S - child) * mu
        if sends:
            below_mu = (S - 1 - k) * mu
        if not gpipe:
            rounds, fwd_left, bwd_left = self.windows(k)
            fixed = self.fixed_cycles(node, len(rounds) - 1)
            windows = list(zip(rounds, fixed, fwd_left, bwd_left, strict=True))
        crosses, crossing = self.crosses[k], self.crossing[k]
        shared_before = [0.0] * len(crosses)
        for link, value in zip(self.open[k], node.shared, strict=True):
            shared_before[link] = value
        still_open = self.open[child]
        children = []
        for j in ends:
            F = fwd[j] - fi + mu
            B = bwd[j] - bi
            c = F + B
            sf, sb = (send[j], grad_send[j]) if sends else (0.0, 0.0)
            grads = grad[j] - gi
            own = (latency + per_byte * grads if grads > 0 else 0.0) + omega * grads
            tail = own if k == 0 else tail0
            a2, d2 = a + F + sf, d + B + sb
            work = M * c
            # max(x, y) as `y if y > x else x`: the same value, without a call.
            x = a + work + d
            l1_2 = x if x > l1 else l1
            x = a + work + own
            l1own_2 = x if x > l1own else l1own
            x = (M - 1) * B + (M - before) * F
            p3_2 = x if x > p3 else p3
            x = sf if sf > F else F
            pf_2 = x if x > pf else pf
            x = sb if sb > B else B
            pb_2 = x if x > pb else pb
            placed = a2 + d2
            # The bound's terms, largest kept in `worst`. None is NaN: the only product that
            # could be 0·inf, GPipe's (M − 1)·machines, is dropped before it is formed.
            worst = l1_2 + tail
            worst = l1own_2 if l1own_2 > worst else worst
            if child == S:
                x = placed + (M - 1) * (pf_2 + pb_2) + tail if gpipe else placed + p3_2 + tail
                worst = x if x > worst else worst
            else:
                fj, bj = fwd[j], bwd[j]
                x = placed - fj - bj - shift + t_l1[j] + tail
                worst = x if x > worst else worst
                x = a2 - fj - shift + t_own[j]
                worst = x if x > worst else worst
                if t_nic is not None:
                    x = a2 - fj - shift + p.shared_latency_s + t_nic[j]
                    worst = x if x > worst else worst
                total = placed + (rest - fj - bj) + unplaced + t_sends[j]
                if gpipe:
                    y, z = t_fwd[j], t_bwd[j]
                    machines = (y if y > pf_2 else pf_2) + (z if z > pb_2 else pb_2)
                    if M == 1 and machines == math.inf:
                        continue  # numpy: 0·inf is NaN, and the child is dropped
                    x = total + (M - 1) * machines + tail
                    worst = x if x > worst else worst
                else:
                    y = t_round[j]
                    x = total + (y if y > p3_2 else p3_2) + tail
                    worst = x if x > worst else worst
                    x = 0.0 if suffix is None else placed + tail + suffix[j]
                    worst = x if x > worst else worst
            if not worst + overhead < limit:
                continue
            # When stage k (ending at j) can end its last op (`_ops_end`), then pace, windows
            # and the shared links.
            below = rest - fwd[j] - bwd[j] + below_mu + (sf + sb) + t_sends[j] if sends else 0.0
            busy = a + M * (F + B)
            if gpipe:
                x = a + M * F + below + M * B
                ops_end = x if x > busy else busy
            else:
                x, y = before * F, F + below
                first_bwd_end = a + (y if y > x else x) + B
                cycles = -math.inf
                for r, fixed, f_left, b_left in windows:
                    x = r * (fixed + c) + f_left * F + b_left * B
                    if x > cycles:
                        cycles = x
                x = first_bwd_end + cycles
                ops_end = x if x > busy else busy
            x = pace + F + first_backwards * B
            ops_end = x if x > ops_end else ops_end
            y = d + tail
            x = ops_end + (own if own > y else y)
            win_2 = x if x > win else win
            worst = win_2 if win_2 > worst else worst
            with_k = [value + grads * x for value, x in zip(shared_before, crosses, strict=True)]
            nic_2 = nic
            if crossing:
                most = max(with_k[link] for link in crossing)
                x = ops_end + p.shared_latency_s + p.shared_s_per_byte * most
                nic_2 = x if x > nic else nic
            worst = nic_2 if nic_2 > worst else worst
            bound = worst + overhead
            if not bound < limit:
                continue
            x = pace + F + sf
            y = a + M * F + later_backwards * B + sf
            pace_2 = y if y > x else x
            sums = (a2, d2, tail, l1_2, l1own_2, p3_2, pf_2, pb_2, win_2, nic_2, pace_2)
            shared = tuple(with_k[link] for link in still_open)
            children.append((bound, Node(child, j, sums, node, c + sf + sb, shared)))
        return children
