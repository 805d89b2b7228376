"""Exact contiguous partition of a layer sequence into S stages minimising the bottleneck stage
under each stage's memory limit (docs/architecture.md §4.9).

    result = solve_partition(problem)   # None when no partition fits; result.boundaries

Two exact methods, `dense` (O(S·L²), the reference) and `parametric` (bisection on the
bottleneck with an O(S·L) feasibility test); `brute_force_partition` enumerates every
partition. The tests compare all three.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np

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
