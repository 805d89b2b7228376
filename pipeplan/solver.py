"""The search for the best layout of one phase: stages S, replicas D, micro-batches M, schedule,
boundaries and rank map (docs/architecture.md §4.10, bounds §4.8).

    solution = solve_phase(CostModel(profile, cluster), global_batch=64, frozen_layers=3)
    solution.best.layout, solution.best.step_s

Also the partition baselines the solver is compared against: equal layer counts, greedy
balance by parameters, and by time (torchgpipe's `balance_by_time` style).
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field, replace
from typing import Literal

import numpy as np

from pipeplan.costmodel import CostModel, Evaluation, PhaseCosts, rank_map
from pipeplan.errors import BadArgumentError, PipeplanError
from pipeplan.formats import SCHEDULES, Layout, Schedule
from pipeplan.formats.base import MAX_MICRO_BATCHES
from pipeplan.partition import PartitionProblem, solve_partition
from pipeplan.simulate import in_flight, step_lower_bound_s


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


@dataclass
class PhaseSolution:
    best: Evaluation
    runner_ups: list[Evaluation] = field(default_factory=list)
    evaluated: int = 0  # candidates whose partition was solved and simulated


def divisors(n: int) -> list[int]:
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def candidate_shapes(
    model: CostModel, global_batch: int, max_stages: int, pins: Pins
) -> list[Shape]:
    """Every (S, D, M, m) the search considers, before partitioning."""
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
        D = pins.replicas if pins.replicas else num_devices // S
        if D < 1 or num_devices < S * D or global_batch % D:
            continue
        per_replica = global_batch // D
        counts = [pins.micro_batches] if pins.micro_batches else divisors(per_replica)
        for M in (M for M in counts if M <= MAX_MICRO_BATCHES):
            # torch.distributed.pipelining's GPipe and 1F1B need at least one micro-batch
            # per stage.
            if per_replica % M or M < S:
                continue
            m = per_replica // M
            if m <= model.max_micro_batch_size:
                shapes.append(Shape(S, D, M, m))
    return shapes


def _no_shape_message(model: CostModel, global_batch: int, max_stages: int, pins: Pins) -> str:
    N = model.cluster.num_devices
    if pins.num_stages and pins.num_stages > min(max_stages, N):
        return (
            f"--stages {pins.num_stages} is more than the {min(max_stages, N)} stages possible "
            f"({max_stages} partitionable layers, {N} devices)"
        )
    if pins.micro_batches and pins.micro_batches > MAX_MICRO_BATCHES:
        return f"--micro-batches {pins.micro_batches} is beyond the limit of {MAX_MICRO_BATCHES}"
    if pins.micro_batches and pins.num_stages and pins.micro_batches < pins.num_stages:
        return (
            f"--micro-batches {pins.micro_batches} is fewer than --stages {pins.num_stages}: "
            "a pipeline needs at least one micro-batch per stage"
        )
    replicas = sorted({pins.replicas or N // S for S in range(1, min(max_stages, N) + 1)})
    return (
        f"global batch {global_batch} cannot be split into whole micro-batches of at most "
        f"{model.max_micro_batch_size} samples over any replica count "
        f"({', '.join(map(str, replicas))} for 1..{min(max_stages, N)} stages"
        + (f", {pins.micro_batches} micro-batches" if pins.micro_batches else "")
        + "); choose a global batch divisible by one of them"
    )


class PhaseSearch:
    """The search for one phase (freeze point, cache) of one training shape."""

    def __init__(
        self,
        model: CostModel,
        global_batch: int,
        frozen_layers: int,
        cached: bool,
        pins: Pins | None = None,
    ):
        self.model = model
        self.global_batch = global_batch
        self.frozen_layers = frozen_layers
        self.cached = cached and frozen_layers > 0
        self.pins = pins or Pins()
        self.first_computed = frozen_layers if self.cached else 0
        # The frozen prefix lives in stage 0, as in PipeTransformer: it runs without autograd,
        # so a later stage holding frozen layers would have no input gradient to send back.
        self.max_stages = model.num_layers - frozen_layers
        self.cluster = model.cluster
        # Memory the layers may use: the reserve is part of every stage.
        self.memory_limit_bytes = self.cluster.device_memory_bytes - model.reserve_bytes

    def costs(self, m: int) -> PhaseCosts:
        return self.model.phase_costs(m, self.frozen_layers, self.cached)

    def shapes(self) -> list[Shape]:
        if self.pins.boundaries is not None:
            pinned_stages = len(self.pins.boundaries) - 1
            if self.pins.num_stages not in (None, pinned_stages):
                raise BadArgumentError(
                    f"--stages {self.pins.num_stages} disagrees with the {pinned_stages} stages "
                    "of --boundaries"
                )
            pins = Pins(
                pinned_stages, self.pins.replicas, self.pins.micro_batches, self.pins.schedule
            )
        else:
            pins = self.pins
        shapes = candidate_shapes(self.model, self.global_batch, self.max_stages, pins)
        if not shapes:
            raise BadArgumentError(
                _no_shape_message(self.model, self.global_batch, self.max_stages, pins)
            )
        return shapes

    def schedules(self, num_stages: int | None = None) -> tuple[Schedule, ...]:
        if self.pins.schedule:
            return (self.pins.schedule,)
        # One stage: both schedules run the same ops; 1F1B keeps one micro-batch in flight.
        return ("1f1b",) if num_stages == 1 else SCHEDULES

    # ------------------------------------------------------------------ bounds

    def lower_bound_s(self, shape: Shape) -> float:
        costs = self.costs(shape.micro_batch_size)
        per_layer = costs.fwd_s + costs.bwd_s
        W = float(per_layer.sum())
        # Some stage holds at least ⌈L/S⌉ consecutive layers (cached ones cost nothing).
        computed = per_layer[self.first_computed :]
        window = -(-len(computed) // shape.num_stages)
        prefix = np.concatenate([[0.0], np.cumsum(computed)])
        smallest_window = float((prefix[window:] - prefix[:-window]).min())
        c_max = max(W / shape.num_stages, float(per_layer.max()), smallest_window)
        pipeline = (shape.micro_batches - 1) * c_max + W
        grads = float(costs.grad_bytes.sum()) / shape.num_stages
        fastest = min(
            (self.cluster.allreduce_link, self.cluster.inter_node),
            key=lambda link: self.model.allreduce_s(grads, shape.replicas, link),
        )
        tail = (
            float(costs.fwd_s.sum())
            + self.model.allreduce_s(grads, shape.replicas, fastest)
            + self.model.optimizer_s(grads)
        )
        return max(pipeline, tail)

    # ------------------------------------------------------------------ one candidate

    def layout_ranks(self, shape: Shape) -> tuple[tuple[int, ...], ...]:
        ranks = rank_map(
            shape.num_stages, shape.replicas, self.cluster.devices_per_node, self.cluster.nodes
        )
        return tuple(tuple(r) for r in ranks)

    def problem(
        self, shape: Shape, schedule: Schedule, ranks: tuple[tuple[int, ...], ...]
    ) -> PartitionProblem:
        costs = self.costs(shape.micro_batch_size)
        link_kinds = (self.cluster.intra_node, self.cluster.inter_node)  # row 0, row 1
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
                for link in link_kinds
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
            min_first_boundary=self.frozen_layers + 1,
        )

    def layout(
        self,
        shape: Shape,
        schedule: Schedule,
        method: str = "auto",
        reuse: tuple[int, ...] | None = None,
    ) -> Layout | None:
        """The min-bottleneck layout of a shape, or None when nothing fits. `reuse`: an optimal
        partition of a problem with looser memory, taken as is when it fits this one."""
        ranks = self.layout_ranks(shape)
        if self.pins.boundaries is not None:
            boundaries = tuple(self.pins.boundaries)
        else:
            problem = self.problem(shape, schedule, ranks)
            if reuse is not None and problem.valid(reuse):
                boundaries = reuse
            else:
                result = solve_partition(problem, method)
                if result is None:
                    return None
                boundaries = result.boundaries
        return Layout(
            frozen_layers=self.frozen_layers,
            cached=self.cached,
            micro_batches=shape.micro_batches,
            micro_batch_size=shape.micro_batch_size,
            schedule=schedule,
            boundaries=boundaries,
            rank_map=ranks,
        )

    def evaluate(self, layout: Layout, record: bool = False) -> Evaluation:
        return self.model.evaluate(layout, record=record)

    # ------------------------------------------------------------------ search

    def solve(self, runner_ups: int = 2) -> PhaseSolution:
        """Best-first: shapes in order of their bound; each shape's partitions are solved and
        queued by the tighter bound of their actual stages; a queued layout is simulated when
        no unvisited shape can have a lower bound. Stops when no bound beats the best, so the
        best is exact (for the DP's partitions) and the runner-ups are the next best of the
        layouts simulated on the way, not necessarily the second and third overall."""
        shapes = self.shapes()
        bounds = sorted(
            ((self.lower_bound_s(shape), i, shape) for i, shape in enumerate(shapes)),
            key=lambda item: (item[0], item[1]),
        )
        simulated: list[tuple[float, int, Evaluation]] = []
        queue: list[tuple[float, int, Layout]] = []  # min-heap on the layout's bound
        order = itertools.count()
        best_step_s = np.inf

        def simulate_queued_below(limit: float) -> None:
            nonlocal best_step_s
            while queue and queue[0][0] < min(limit, best_step_s):
                _, rank, layout = heapq.heappop(queue)
                evaluation = self.evaluate(layout)
                if not evaluation.fits:  # only with pinned boundaries
                    continue
                simulated.append((evaluation.step_s, rank, evaluation))
                best_step_s = min(best_step_s, evaluation.step_s)

        def worst_kept() -> float:
            return best_step_s

        for bound, _, shape in bounds:
            simulate_queued_below(bound)
            if bound >= worst_kept():
                break
            # 1F1B first: its memory bound is looser, so when its optimal partition also fits
            # under GPipe's memory it is GPipe's optimum too (same bottleneck objective).
            earlier: tuple[int, ...] | None = None
            for schedule in sorted(self.schedules(shape.num_stages), key=lambda x: x != "1f1b"):
                layout = self.layout(shape, schedule, reuse=earlier)
                if layout is None:
                    continue
                earlier = layout.boundaries
                for candidate in self.alternatives(layout):
                    works, _ = self.model.stages(candidate)
                    layout_bound = step_lower_bound_s(works, shape.micro_batches)
                    heapq.heappush(queue, (layout_bound, next(order), candidate))
        simulate_queued_below(np.inf)
        if not simulated:
            raise PipeplanError(self._does_not_fit_message(shapes))
        ranked = [e for _, _, e in sorted(simulated, key=lambda item: item[:2])][: runner_ups + 1]
        best = self.evaluate(ranked[0].layout, record=True)
        return PhaseSolution(best, ranked[1:], len(simulated))

    def alternatives(self, layout: Layout) -> list[Layout]:
        """The DP's min-bottleneck layout and, when they fit, the baseline partitions of the
        same shape. The bottleneck is what the DP guarantees; the simulated step also depends
        on the other stages (where the all-reduce-heavy layers sit, ties between equally
        balanced partitions), so the baselines are scored too and a plan is never worse than
        a baseline with its S, D, M and schedule."""
        if self.pins.boundaries is not None:
            return [layout]
        problem = self.problem(
            Shape(
                layout.num_stages, layout.replicas, layout.micro_batches, layout.micro_batch_size
            ),
            layout.schedule,
            layout.rank_map,
        )
        costs = self.costs(layout.micro_batch_size)
        seen = {layout.boundaries}
        result = [layout]
        for name in ("equal", "params", "time"):
            boundaries = baseline_boundaries(name, self.model, costs, layout.num_stages)
            if boundaries not in seen and problem.valid(boundaries):
                seen.add(boundaries)
                result.append(layout.model_copy(update={"boundaries": boundaries}))
        return result

    # ------------------------------------------------------------------ nothing fits

    def smallest_peak_memory_bytes(self, shapes: list[Shape]) -> int:
        """The smallest per-device peak over every shape and schedule (min-max memory DP)."""
        best = np.inf
        smallest_m: dict[tuple[int, int], Shape] = {}
        for shape in shapes:  # per (S, D) the smallest micro-batch uses the least memory
            key = (shape.num_stages, shape.replicas)
            if key not in smallest_m or shape.micro_batch_size < smallest_m[key].micro_batch_size:
                smallest_m[key] = shape
        for shape in smallest_m.values():
            for schedule in self.schedules():
                problem = self.problem(shape, schedule, self.layout_ranks(shape))
                best = min(best, _min_max_memory(problem, self.pins.boundaries))
        return int(np.ceil(best + self.model.reserve_bytes))

    def _does_not_fit_message(self, shapes: list[Shape]) -> str:
        smallest = self.smallest_peak_memory_bytes(shapes)
        what = "with the pinned layout" if self.pins != Pins() else "even spread over all devices"
        return (
            f"the model does not fit {what}: the smallest achievable per-device memory is "
            f"{_gib(smallest)} but a device has {_gib(self.cluster.device_memory_bytes)} "
            "(use devices with more memory, more devices, or a smaller micro-batch)"
        )


def _gib(nbytes: float) -> str:
    if nbytes >= 1 << 30:
        return f"{nbytes / (1 << 30):.2f} GiB"
    return f"{nbytes / (1 << 20):.1f} MiB"


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
) -> PhaseSolution:
    """The best layout (and runner-ups) for one phase; see the module docstring."""
    return PhaseSearch(model, global_batch, frozen_layers, cached, pins).solve(runner_ups)


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
