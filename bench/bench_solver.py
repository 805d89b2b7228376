"""Planner benchmark (issues 3, 12): the solver against an exhaustive search, its speed, the
gain of each relaxation of the search space (fewer replicas than ⌊N/S⌋, fewer micro-batches
than stages, a frozen prefix over several forward-only stages), the solver's step against the
partition baselines, the preview's ablation, how often a cluster plans slower than one it
contains and how often a pin (a narrower search) plans faster than none. Prints its figures;
run from the repository root:

    python bench/bench_solver.py            # everything (about 5 minutes on 2 cores)
    python bench/bench_solver.py --quick    # 300 instances, no 1,000-layer plan
    python bench/bench_solver.py --only exact|speed|baselines|superset|pins|widening|large
                                 [--instances N]
                                 [--seed S]
"""

from __future__ import annotations

import argparse
import itertools
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources

import numpy as np

import pipeplan.plan as plan_module
from pipeplan.cluster import cluster_from_flags
from pipeplan.costmodel import (
    EXACT_FAMILY_MAPS,
    MIRRORED_MAX_NODES,
    SMALL_CLUSTER_DEVICES,
    SMALL_CLUSTER_FAMILY_MAPS,
    CostModel,
    CostParams,
)
from pipeplan.costmodel import every_rank_map as all_maps
from pipeplan.errors import BadArgumentError, PipeplanError
from pipeplan.formats import (
    Calibration,
    Cluster,
    FittedLink,
    FreezeSchedule,
    Layout,
    Link,
    Profile,
    load,
)
from pipeplan.formats.profile import NULL_WHEN_UNFITTED
from pipeplan.freeze import alpha_schedule
from pipeplan.partition import PartitionProblem, brute_force_partition, solve_partition
from pipeplan.plan import compare_partitions, make_plan, make_preview
from pipeplan.solver import PhaseSearch, Pins, solve_phase
from pipeplan.synthetic import SyntheticLayer, preset_profile, synthetic_profile, transformer_layers

# --------------------------------------------------------------------------- instances


def random_profile(rng: np.random.Generator, num_blocks: int):
    layers = [
        SyntheticLayer(
            kind,
            int(rng.integers(1, 2_000_000)),
            float(rng.uniform(1e-4, 3e-3)),
            float(rng.uniform(1e-4, 6e-3)),
            int(rng.integers(1_000, 400_000)),
            float(rng.uniform(1e4, 4e6)),
            overhead_s=float(rng.uniform(0, 1e-3)),
        )
        for kind in ["embeddings"] + ["block"] * num_blocks + ["head"]
    ]
    return synthetic_profile(layers, micro_batches=(1, 2, 4))


def random_calibration(rng: np.random.Generator) -> Calibration:
    def link() -> FittedLink:
        return FittedLink(
            latency_s=float(rng.uniform(0, 1e-3)),
            bandwidth_bytes_per_s=float(rng.uniform(1e8, 1e10)),
        )

    return Calibration(
        fwd_scale=float(rng.uniform(0.5, 2)),
        bwd_scale=float(rng.uniform(0.5, 2)),
        nograd_scale=float(rng.uniform(0.5, 2)),
        allreduce=link(),
        p2p=link(),
        micro_batch_overhead_s=float(rng.uniform(0, 1e-3)),
        step_overhead_s=float(rng.uniform(-1e-2, 1e-2)),
        input_s_per_sample=float(rng.uniform(0, 1e-4)),
        runs=["synthetic"],  # as calibrate writes it: fitted from a phase of a run
        phases_used=1,
        steps_used=3,
        residual_median=0.0,
        residual_max=0.0,
        # Null, as calibrate leaves them unfitted: with why (no random draw: same instances).
        not_fitted={
            name: "not measured" for name in NULL_WHEN_UNFITTED if name not in ("allreduce", "p2p")
        },
    )


@dataclass(frozen=True)
class Instance:
    seed: int
    model: CostModel
    global_batch: int
    frozen_layers: int
    cached: bool

    def describe(self) -> str:
        c = self.model.cluster
        return (
            f"{self.model.num_layers} layers, {c.nodes}×{c.devices_per_node} devices, "
            f"B={self.global_batch}, k={self.frozen_layers}, cached={self.cached}, "
            f"calibrated={self.model.calibration is not None}"
        )


def random_instance(seed: int) -> Instance:
    """3–9 layers, 1–6 devices on one or two nodes (inter-node 1 MB/s–1 GB/s), 40–400 MiB per
    device, a random freeze point and cache, a calibration section half of the time."""
    rng = np.random.default_rng(seed)
    profile = random_profile(rng, int(rng.integers(1, 8)))
    if rng.integers(0, 2):
        profile = profile.model_copy(update={"calibration": random_calibration(rng)})
    devices = int(rng.integers(1, 7))
    nodes = 2 if devices % 2 == 0 and rng.integers(0, 2) else 1
    cluster = Cluster(
        nodes=nodes,
        devices_per_node=devices // nodes,
        device_memory_bytes=int(rng.integers(40, 400)) << 20,
        intra_node=Link(bandwidth_bytes_per_s=float(rng.uniform(1e8, 1e10)), latency_s=1e-5),
        inter_node=Link(
            bandwidth_bytes_per_s=float(10 ** rng.uniform(6, 9)),
            latency_s=float(10 ** rng.uniform(-6, -3)),
        ),
    )
    model = CostModel(profile, cluster, CostParams(reserve_bytes=0))
    frozen = int(rng.integers(0, model.num_layers))
    batch = int(rng.choice([12, 16, 24, 48, 60]))
    return Instance(seed, model, batch, frozen, bool(rng.integers(0, 2)))


# --------------------------------------------------------------------------- exhaustive


def packed_maps(S: int, D: int, G: int, nodes: int) -> list[list[int]]:
    """Whole pipelines of S consecutive ranks packed into nodes, node 0 first, then the
    leftover devices in rank order; with S > G, consecutive ranks."""
    if S > G:
        return [list(range(r * S, (r + 1) * S)) for r in range(D)]
    whole = [[n * G + j * S + s for s in range(S)] for n in range(nodes) for j in range(G // S)]
    left = [n * G + i for n in range(nodes) for i in range(G // S * S, G)]
    return (whole + [left[r * S : (r + 1) * S] for r in range(len(left) // S)])[:D]


def family_maps(S: int, D: int, G: int, nodes: int) -> list[tuple[tuple[int, ...], ...]]:
    """The planner's placements of (S, D) (`costmodel.PLACEMENTS`), built here from their
    description, not by the planner's code: "packed", "rings" (the same for rings,
    transposed), "spread" and "spread-rings" (pipelines and rings over the node-interleaved
    device order), "consecutive" (replica d on ranks d·S..); rows sorted; a map on the same
    nodes as an earlier one (replicas in any order) once; one map on one node or with one
    device a node. Then every map (`all_maps`) where at most EXACT_FAMILY_MAPS node
    assignments fit the nodes' devices (multisets of D non-decreasing node rows that no node
    holds more than G cells of), else on up to MIRRORED_MAX_NODES nodes each
    member's mirror (stage s on node N−1−n where stage S−1−s was on node n, each node's
    cells on its lowest devices in row order); the planner keeps one of the maps priced
    alike, which gives the same best."""
    order = [n * G + i for i in range(G) for n in range(nodes)]
    rings = packed_maps(D, S, G, nodes)
    candidates = [
        packed_maps(S, D, G, nodes),
        [[rings[s][d] for s in range(S)] for d in range(D)],
        [order[d * S : (d + 1) * S] for d in range(D)],
        [[order[s * D + d] for s in range(S)] for d in range(D)],
        [list(range(d * S, (d + 1) * S)) for d in range(D)],  # "consecutive"
    ]
    result, seen = [], set()
    for ranks in candidates[: 1 if nodes == 1 or G == 1 else None]:
        ranks = tuple(tuple(sorted(row)) for row in ranks)
        on = tuple(sorted(tuple(r // G for r in row) for row in ranks))
        if on not in seen:
            seen.add(on)
            result.append(ranks)
    if nodes == 1 or G == 1:
        return result
    every = all_maps(S, D, G, nodes)  # tiny clusters only
    small = G * nodes <= SMALL_CLUSTER_DEVICES  # then every assignment up to a larger bound
    if len(every) <= (SMALL_CLUSTER_FAMILY_MAPS if small else EXACT_FAMILY_MAPS):
        return result + every
    if nodes > MIRRORED_MAX_NODES:
        return result
    for ranks in list(result):
        used = [0] * nodes
        mirror = []
        for row in ranks:
            mirror.append([])
            for node in [nodes - 1 - r // G for r in reversed(row)]:
                mirror[-1].append(node * G + used[node])
                used[node] += 1
        result.append(tuple(map(tuple, mirror)))
    return result


# The all-placements reference runs on instances of at most this many layers (its maps are
# up to a few dozen per (S, D) on 2 × 3 devices).
ALL_MAPS_MAX_LAYERS = 6


# The relaxations of the search space whose gain the benchmark reports: name → whether a
# layout on N devices lies in the space without that relaxation.
RESTRICTED: dict[str, Callable[[Layout, int], bool]] = {
    "fewer replicas than ⌊N/S⌋": lambda layout, N: layout.replicas == N // layout.num_stages,
    "fewer micro-batches than stages": lambda layout, N: layout.micro_batches >= layout.num_stages,
    "frozen prefix over several (forward-only) stages": lambda layout, N: (
        layout.forward_only_stages == 0
    ),
}
# Rank maps other than "packed" (the placement family), checked against the packed map of
# the layout's (S, D) given with it.
PLACEMENT_GAIN = "placements other than whole pipelines packed into nodes"


def exhaustive(instance: Instance, maps=family_maps) -> tuple[float, dict[str, float]]:
    """Independent of the solver: (best step over the whole space, best step without each
    relaxation of RESTRICTED and PLACEMENT_GAIN), every S, D, rank map of `maps` (the
    planner's placement family; `all_maps`: every one), M, schedule and contiguous partition
    evaluated by the cost model, kept when it fits and passes Layout.check; inf when nothing
    does."""
    model, B, k = instance.model, instance.global_batch, instance.frozen_layers
    N, L = model.cluster.num_devices, model.num_layers
    G, nodes = model.cluster.devices_per_node, model.cluster.nodes
    best = np.inf
    restricted = dict.fromkeys([*RESTRICTED, PLACEMENT_GAIN], np.inf)
    for S in range(1, min(N, L) + 1):
        for D in range(1, N // S + 1):
            if B % D:
                continue
            packed = tuple(tuple(row) for row in packed_maps(S, D, G, nodes))
            for ranks in maps(S, D, G, nodes):
                for M in range(1, B // D + 1):
                    m = B // D // M
                    if (B // D) % M or m > model.max_micro_batch_size:
                        continue
                    for schedule in ("gpipe", "1f1b"):
                        for cuts in itertools.combinations(range(1, L), S - 1):
                            layout = Layout(
                                frozen_layers=k,
                                cached=instance.cached and k > 0,
                                micro_batches=M,
                                micro_batch_size=m,
                                schedule=schedule,
                                boundaries=(0, *cuts, L),
                                rank_map=ranks,
                            )
                            try:
                                layout.check(L, N)
                            except BadArgumentError:
                                continue
                            evaluation = model.evaluate(layout, record=False)
                            if not evaluation.fits:
                                continue
                            step = evaluation.step_s
                            best = min(best, step)
                            for name, inside in RESTRICTED.items():
                                if inside(layout, N):
                                    restricted[name] = min(restricted[name], step)
                            if ranks == packed:
                                restricted[PLACEMENT_GAIN] = min(restricted[PLACEMENT_GAIN], step)
    return best, restricted


def bench_exactness(instances: int, first_seed: int) -> None:
    equal = nothing = 0
    misses: list[tuple[int, float, float]] = []
    gains: dict[str, list[float]] = {name: [] for name in [*RESTRICTED, PLACEMENT_GAIN]}
    old_space_empty = dict.fromkeys(gains, 0)
    solve_times: list[float] = []
    # The family's best against the best over every rank map (`all_maps`), where small enough.
    compared = family_equal = 0
    placement_misses: list[tuple[int, float]] = []
    for seed in range(first_seed, first_seed + instances):
        instance = random_instance(seed)
        start = time.perf_counter()
        try:
            solution = PhaseSearch(
                instance.model, instance.global_batch, instance.frozen_layers, instance.cached
            ).solve()
            got = solution.best.step_s
        except PipeplanError:
            got = np.inf
        solve_times.append(time.perf_counter() - start)
        best, restricted = exhaustive(instance)
        if got == best == np.inf:
            nothing += 1
        elif abs(got - best) <= 1e-9 * best:
            equal += 1
        else:
            misses.append((seed, got, best))
        for name, without in restricted.items():
            if best == np.inf:
                continue
            if without == np.inf:
                old_space_empty[name] += 1
            elif best < without * (1 - 1e-9):
                gains[name].append(without / best - 1)
        if instance.model.num_layers <= ALL_MAPS_MAX_LAYERS:
            every, _ = exhaustive(instance, all_maps)
            if every < np.inf:
                compared += 1
                if best <= every * (1 + 1e-9):
                    family_equal += 1
                else:
                    placement_misses.append((seed, best / every - 1))
    feasible = instances - nothing
    print(
        f"exactness: {instances} random instances (seeds {first_seed}.."
        f"{first_seed + instances - 1}; 3–9 layers, 1–6 devices on 1 or 2 nodes, random freeze "
        "point, cache and calibration)"
    )
    print(f"  nothing fits (solver and exhaustive agree): {nothing}")
    print(f"  solver = exhaustive optimum (relative 1e-9): {equal}/{feasible}")
    print(f"  misses: {len(misses)}")
    for seed, got, best in misses:
        described = random_instance(seed).describe()
        print(f"    MISS seed {seed}: solver {got!r}, exhaustive {best!r}, {described}")
    print(
        f"  solve time per instance: median {1e3 * statistics.median(solve_times):.1f} ms, "
        f"max {1e3 * max(solve_times):.1f} ms"
    )
    print(
        f"placement family against every rank map (instances of at most "
        f"{ALL_MAPS_MAX_LAYERS} layers, every injective map of the cells into the devices once "
        f"per node assignment): the family's best is the best of all maps on "
        f"{family_equal}/{compared}"
    )
    for seed, gap in placement_misses:
        described = random_instance(seed).describe()
        print(
            f"    FAMILY MISS seed {seed}: {100 * gap:.2f} % slower than the best map, {described}"
        )
    for name, found in gains.items():
        print(f"{name}: the exhaustive optimum with and without it")
        print(
            f"  feasible instances: {feasible}; strictly faster with it: {len(found)}"
            f" ({100 * len(found) / max(feasible, 1):.1f} %)"
        )
        if found:
            print(
                f"  gain (step without / step with − 1): median "
                f"{100 * statistics.median(found):.1f} %, 90th percentile "
                f"{100 * np.percentile(found, 90):.1f} %, max {100 * max(found):.1f} %"
            )
        print(f"  feasible only with it: {old_space_empty[name]}")


# --------------------------------------------------------------------------- partition DP


def random_problem(rng: np.random.Generator) -> PartitionProblem:
    L = int(rng.integers(1, 11))
    S = int(rng.integers(1, min(L, 6) + 1))
    M = int(rng.integers(1, 5))
    schedule = rng.choice(["gpipe", "1f1b"])
    return PartitionProblem(
        compute_s=rng.uniform(0, 1, L),
        transfer_s=rng.uniform(0, 0.3, (2, L + 1)),
        link_kind=tuple(int(k) for k in rng.integers(0, 2, S - 1)),
        static_bytes=rng.integers(0, 20, L).astype(float),
        saved_bytes=rng.integers(0, 20, L).astype(float),
        in_flight=tuple(M if schedule == "gpipe" else min(S - s, M) for s in range(S)),
        memory_limit_bytes=float(rng.integers(30, 300)),
        min_first_boundary=int(rng.integers(1, L + 1)),
    )


def bench_partition_dp(instances: int) -> None:
    """The min-bottleneck DP (used for heuristics and the does-not-fit message)."""
    rng = np.random.default_rng(0)
    agree = {"dense": 0, "parametric": 0}
    for _ in range(instances):
        problem = random_problem(rng)
        expected = brute_force_partition(problem)
        for method in agree:
            got = solve_partition(problem, method)
            if expected is None:
                agree[method] += got is None
            elif got is not None and problem.valid(got.boundaries):
                agree[method] += abs(got.bottleneck_s - expected.bottleneck_s) <= 1e-6 * max(
                    expected.bottleneck_s, 1e-12
                )
    print(f"min-bottleneck partition DP vs brute force, {instances} random problems:")
    for method, count in agree.items():
        print(f"  {method:10s} agrees on {count}/{instances}")


# --------------------------------------------------------------------------- speed


def timed_plan(profile, cluster, repeats: int, **kwargs) -> tuple[list[float], object]:
    timings, plan = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        plan = make_plan(profile, cluster, **kwargs)
        timings.append(time.perf_counter() - start)
    return timings, plan


def proven(profile, cluster, plan, global_batch: int) -> list[tuple[int, bool, float]]:
    """Per phase: frozen layers, whether its solve was proven optimal, the proven gap."""
    model = CostModel(profile, cluster)
    rows = []
    for phase in plan.phases:
        layout = phase.layout
        solution = solve_phase(model, global_batch, layout.frozen_layers, layout.cached)
        rows.append(
            (
                layout.frozen_layers,
                solution.proven,
                solution.best.step_s / solution.lower_bound_s - 1,
            )
        )
    return rows


def bench_speed(big: bool, repeats: int) -> None:
    profile = preset_profile("bert-large")
    cluster = cluster_from_flags(
        nodes=2, devices_per_node=8, device_memory="16GiB", inter_bw="5GB/s"
    )
    freeze = alpha_schedule(0.2, 10, 24)
    timings, plan = timed_plan(
        profile, cluster, repeats, global_batch=512, samples=100_000, epochs=10, freeze=freeze
    )
    print(
        f"speed: bert-large (26 layers) on 2×8, α=0.2 over 10 epochs, {len(plan.phases)} phases "
        f"of one epoch (a cached phase is searched only where its cache can hit: none here): "
        f"full elastic plan in min {min(timings):.3f} s, median "
        f"{statistics.median(timings):.3f} s, max {max(timings):.3f} s ({repeats} repeats)"
    )
    # The schedule-wide choice's widening (`plan._widened`) apart: the same plan without it.
    widened = plan_module._widened
    plan_module._widened = lambda *args, **kwargs: ([], True, 0)
    try:
        unwidened, same = timed_plan(
            profile, cluster, repeats, global_batch=512, samples=100_000, epochs=10, freeze=freeze
        )
    finally:
        plan_module._widened = widened
    print(
        f"  without the widening: min {min(unwidened):.3f} s, median "
        f"{statistics.median(unwidened):.3f} s; the same plan: "
        f"{same.model_dump_json() == plan.model_dump_json()}"
    )
    # Every phase solved both ways, as a plan with phases of several epochs does.
    model = CostModel(profile, cluster)
    both = []
    for _ in range(repeats):
        start = time.perf_counter()
        for phase in plan.phases:
            frozen = phase.layout.frozen_layers
            for cached in [False, True] if frozen else [False]:
                PhaseSearch(model, 512, frozen, cached).solve()
        both.append(time.perf_counter() - start)
    solves = sum(2 if p.layout.frozen_layers else 1 for p in plan.phases)
    print(
        f"  the same phases each solved cached and uncached ({solves} solves): "
        f"min {min(both):.3f} s, median {statistics.median(both):.3f} s, max {max(both):.3f} s"
    )
    rows = proven(profile, cluster, plan, 512)
    print(
        "  every phase's layout proven optimal: "
        + ("yes" if all(p for _, p, _ in rows) else f"no ({rows})")
    )
    for phase in plan.phases:
        print(
            f"  frozen {phase.layout.frozen_layers:3d}: {phase.layout.label():26s} "
            f"step {phase.step_s:.4f} s"
        )
    if not big:
        return
    layers = transformer_layers(num_blocks=998, hidden=2048, seq_len=512, vocab=32000)
    profile = synthetic_profile(layers, name="synthetic-1000")
    cluster = cluster_from_flags(
        nodes=512, devices_per_node=8, device_memory="80GiB", inter_bw="25GB/s"
    )
    freeze = alpha_schedule(0.2, 10, 998)
    try:
        timings, plan = timed_plan(
            profile,
            cluster,
            max(1, repeats // 2),
            global_batch=8192,
            samples=1_000_000,
            epochs=10,
            freeze=freeze,
        )
    except PipeplanError as exc:
        print(f"speed: synthetic 1,000 layers on 4,096 devices: FAILS to plan: {exc}")
        return
    print(
        f"speed: synthetic 1,000 layers on 512×8 = 4,096 devices, {len(plan.phases)} phases: "
        f"full elastic plan in min {min(timings):.2f} s, max {max(timings):.2f} s "
        f"({len(timings)} repeats)"
    )
    for (frozen, is_proven, gap), phase in zip(
        proven(profile, cluster, plan, 8192), plan.phases, strict=True
    ):
        print(
            f"  frozen {frozen:4d}: {phase.layout.label():28s} step {phase.step_s:8.3f} s, "
            + (
                "proven optimal"
                if is_proven
                else f"within {100 * gap:.1f} % of the optimum (proven)"
            )
        )


# --------------------------------------------------------------------------- baselines


def bench_baselines() -> None:
    cluster = cluster_from_flags(
        nodes=2, devices_per_node=8, device_memory="16GiB", inter_bw="5GB/s"
    )
    print(
        "predicted step time, solver vs partition baselines (same S, D, M, schedule), "
        "2×8 devices, 16 GiB, intra 15.75 GB/s, inter 5 GB/s, global batch 256"
    )
    header = ["model".ljust(18), "pin".ljust(6), "S×D M".ljust(10), "solver s".rjust(9)]
    print("  " + " ".join(header + [name.rjust(7) for name in ("equal", "params", "time")]))
    for name in ("bert-base", "vit-base", "bert-250k-vocab"):
        profile = preset_profile(name)
        for pin in (None, 2, 4, 8):
            pins = Pins(num_stages=pin) if pin else None
            rows = compare_partitions(profile, cluster, 256, pins=pins)
            solver = rows[0]
            ratios = []
            for row in rows[1:]:
                ratios.append(f"{row.ratio_to_solver:6.3f}" + ("" if row.fits else "!"))
            plan = make_plan(
                profile,
                cluster,
                global_batch=256,
                samples=256,
                epochs=1,
                freeze=alpha_schedule(0.5, 1, profile.model.config["num_hidden_layers"]),
                pins=pins,
            ).phases[0]
            shape = f"{plan.layout.num_stages}×{plan.layout.replicas} {plan.layout.micro_batches}"
            print(
                f"  {name:18s} {pin or 'best'!s:6s} {shape:10s} {solver.step_s:9.4f} "
                + " ".join(f"{r:>7s}" for r in ratios)
            )
    print("  (ratios are baseline step / solver step; '!' = the baseline partition does not fit)")


def bench_ablation() -> None:
    """The preview's ablation on the speed benchmark's configuration. "+ elastic re-partition
    (D kept)" searches every phase over a space that holds the static baseline's placement,
    which "freeze only" keeps, so it should not come out slower (issue 12: it did while the
    frozen prefix had to stay in stage 0)."""
    profile = preset_profile("bert-large")
    cluster = cluster_from_flags(
        nodes=2, devices_per_node=8, device_memory="16GiB", inter_bw="5GB/s"
    )
    preview = make_preview(
        profile,
        cluster,
        global_batch=512,
        samples=100_000,
        epochs=10,
        freeze=alpha_schedule(0.2, 10, 24),
    )
    print(
        "preview ablation: bert-large (synthetic) on 2×8 devices, 16 GiB, inter 5 GB/s, global "
        "batch 512, 100,000 samples, α = 0.2 over 10 epochs"
    )
    for row in preview.ablation:
        print(f"  {row.name:36s} total {row.total_s:9.2f} s, speedup {row.speedup:.3f}×")
    totals = {row.name: row.total_s for row in preview.ablation}
    freeze_only, repartition = totals["freeze only"], totals["+ elastic re-partition (D kept)"]
    verdict = "not inverted" if repartition <= freeze_only else "INVERTED"
    print(f"  re-partition (D kept) / freeze only: {repartition / freeze_only:.4f} ({verdict})")


# --------------------------------------------------------------------------- superset clusters


def random_cluster_pair(seed: int):
    """A random profile (4–11 layers), a cluster of 1–2 nodes × 1–3 devices and one that
    contains it (a node more, or up to two devices more per node, same links and memory), a
    random list schedule over 2–7 epochs and cache on or off."""
    rng = np.random.default_rng(seed)
    profile = random_profile(rng, int(rng.integers(2, 10)))
    memory = int(rng.integers(600, 4000)) << 20
    intra = Link(bandwidth_bytes_per_s=float(rng.uniform(1e8, 1e10)), latency_s=1e-5)
    inter = Link(
        bandwidth_bytes_per_s=float(10 ** rng.uniform(6, 9)),
        latency_s=float(10 ** rng.uniform(-6, -3)),
    )
    nodes, per_node = int(rng.integers(1, 3)), int(rng.integers(1, 4))
    more_nodes, more_per_node = nodes + int(rng.integers(0, 2)), per_node + int(rng.integers(0, 3))
    if (more_nodes, more_per_node) == (nodes, per_node):
        more_per_node += 1
    clusters = [
        Cluster(
            nodes=n,
            devices_per_node=g,
            device_memory_bytes=memory,
            intra_node=intra,
            inter_node=inter,
        )
        for n, g in ((nodes, per_node), (more_nodes, more_per_node))
    ]
    epochs = int(rng.integers(2, 8))
    points = sorted(int(k) for k in rng.integers(0, len(profile.layers) - 1, size=epochs))
    batch = int(rng.choice([12, 16, 24, 48]))
    samples = int(rng.choice([batch * 4, batch * 20, batch * 100]))
    freeze = FreezeSchedule(source="list", frozen_layers=points)
    shape = {"global_batch": batch, "samples": samples, "epochs": epochs, "freeze": freeze}
    return profile, clusters, shape | {"cache": bool(rng.integers(0, 2))}


def bench_superset(instances: int, first_seed: int) -> None:
    """A plan on a cluster against the plan on a cluster it contains (whose layouts are all in
    the larger one's space): how often, and by how much, the larger one plans slower."""
    slower: list[tuple[float, int]] = []
    planned = 0
    start = time.perf_counter()
    for seed in range(first_seed, first_seed + instances):
        profile, (small, large), shape = random_cluster_pair(seed)
        try:
            subset = make_plan(profile, small, **shape).predicted_total_s
        except PipeplanError:  # nothing fits the smaller cluster: nothing to compare
            continue
        total = make_plan(profile, large, **shape).predicted_total_s
        planned += 1
        if total > subset * (1 + 1e-9):
            slower.append((total / subset - 1, seed))
    worst = ", ".join(f"seed {seed} +{100 * gap:.2f} %" for gap, seed in sorted(slower)[::-1][:8])
    print(
        f"superset: {planned} cluster pairs planned (seeds {first_seed}–"
        f"{first_seed + instances - 1}, {time.perf_counter() - start:.0f} s): the larger "
        f"cluster plans slower on {len(slower)}" + (f" ({worst})" if slower else "")
    )


PINS = [
    Pins(num_stages=1),
    Pins(num_stages=2),
    Pins(num_stages=3),
    Pins(schedule="gpipe"),
    Pins(schedule="1f1b"),
    Pins(micro_batches=1),
    Pins(micro_batches=2),
    Pins(micro_batches=4),
]


def random_pinned_instance(seed: int, profiles: dict):
    """One of the shipped CPU profiles, 1–2 nodes × 1–4 devices of 80 MiB–4 GiB, a list or α
    schedule over 2–8 epochs, cache on or off (the fortieth round's random instances)."""
    rng = np.random.default_rng(seed)
    name = str(rng.choice(sorted(profiles)))
    profile = profiles[name]
    blocks = len(profile.layers) - 2
    cluster = Cluster(
        nodes=int(rng.integers(1, 3)),
        devices_per_node=int(rng.integers(1, 5)),
        device_memory_bytes=int(rng.choice([80, 120, 200, 400, 1000, 4000])) << 20,
        intra_node=Link(
            bandwidth_bytes_per_s=float(rng.choice([5e8, 5e9, 1.575e10])), latency_s=5e-6
        ),
        inter_node=Link(
            bandwidth_bytes_per_s=float(rng.choice([1e8, 1e9, 5e9, 2.5e10])),
            latency_s=float(rng.choice([2e-5, 1e-4])),
        ),
    )
    epochs = int(rng.integers(2, 9))
    if rng.integers(0, 2):
        points = sorted(int(k) for k in rng.integers(0, blocks + 1, size=epochs))
        freeze = FreezeSchedule(source="list", frozen_layers=points)
    else:
        freeze = alpha_schedule(float(rng.choice([0.1, 0.3, 0.5])), epochs, blocks)
    batch = int(rng.choice([16, 32, 64, 128]))
    shape = {
        "global_batch": batch,
        "samples": batch * int(rng.choice([2, 10, 50])),
        "epochs": epochs,
        "freeze": freeze,
        "cache": bool(rng.integers(0, 2)),
    }
    return name, profile, cluster, shape


def bench_pins(instances: int, first_seed: int) -> None:
    """The plan without pins against the same plan with one pin (stages, schedule or
    micro-batches), which only narrows the search: how often, and by how much, a pin plans
    faster (the schedule-wide choice missed a layout: `plan._widened`)."""
    profiles = {}
    for name in ("bert-tiny", "vit-digits", "bert-synth"):
        with resources.as_file(resources.files("profiles") / f"{name}@cpu-1t.json") as path:
            profiles[name] = load(Profile, path)
    faster: list[tuple[float, int, str]] = []
    planned, free_s = 0, []
    start = time.perf_counter()
    for seed in range(first_seed, first_seed + instances):
        name, profile, cluster, shape = random_pinned_instance(seed, profiles)
        began = time.perf_counter()
        try:
            free = make_plan(profile, cluster, **shape).predicted_total_s
        except PipeplanError:
            continue
        free_s.append(time.perf_counter() - began)
        planned += 1
        best = min(
            (
                (total, pins)
                for pins in PINS
                for total in _pinned_total(profile, cluster, shape, pins)
            ),
            default=(math.inf, None),
            key=lambda item: item[0],
        )
        if best[0] < free * (1 - 1e-9):
            pinned = {k: v for k, v in vars(best[1]).items() if v is not None}
            faster.append((free / best[0] - 1, seed, f"{name} {pinned}"))
    worst = ", ".join(
        f"seed {seed} {what} +{100 * gap:.2f} %" for gap, seed, what in sorted(faster)[::-1][:8]
    )
    print(
        f"pins: {planned} instances planned (seeds {first_seed}–{first_seed + instances - 1}, "
        f"{time.perf_counter() - start:.0f} s; a free plan median "
        f"{statistics.median(free_s) * 1000:.0f} ms, max {max(free_s) * 1000:.0f} ms): a pin "
        f"plans faster than no pin on {len(faster)}" + (f" ({worst})" if faster else "")
    )


def _pinned_total(profile, cluster, shape, pins: Pins) -> list[float]:
    try:
        return [make_plan(profile, cluster, pins=pins, **shape).predicted_total_s]
    except PipeplanError:  # nothing fits the pin
        return []


def bench_widening(instances: int, first_seed: int) -> None:
    """The schedule-wide choice with and without widening down to a tie for short schedules
    of short models (`plan.WIDEN_ALWAYS_PHASE_LAYERS`; 0: only beyond WIDEN_GAP, as before
    the fifty-third round), side by side on the same random instances: how many plans are
    faster and by how much, and what each costs in time (median and max of a plan, and
    their ratio)."""
    from pipeplan import plan as planning

    profiles = {}
    for name in ("bert-tiny", "vit-digits", "bert-synth"):
        with resources.as_file(resources.files("profiles") / f"{name}@cpu-1t.json") as path:
            profiles[name] = load(Profile, path)
    wide = planning.WIDEN_ALWAYS_PHASE_LAYERS
    totals: dict[int, list[float]] = {0: [], wide: []}
    times: dict[int, list[float]] = {0: [], wide: []}
    for seed in range(first_seed, first_seed + instances):
        _, profile, cluster, shape = random_pinned_instance(seed, profiles)
        results = {}
        for limit in (0, wide):
            planning.WIDEN_ALWAYS_PHASE_LAYERS = limit
            began = time.perf_counter()
            try:
                results[limit] = make_plan(profile, cluster, **shape).predicted_total_s
            except PipeplanError:
                break
            times[limit].append(time.perf_counter() - began)
        planning.WIDEN_ALWAYS_PHASE_LAYERS = wide
        if len(results) == 2:
            for limit, total in results.items():
                totals[limit].append(total)
    gains = [old / new - 1 for old, new in zip(totals[0], totals[wide], strict=True)]
    faster = [g for g in gains if g > 1e-9]
    slower = [g for g in gains if g < -1e-9]
    print(
        f"widening to a tie: {len(gains)} instances; faster plans on {len(faster)} (max "
        f"{100 * max(faster, default=0):.2f} %), slower on {len(slower)}; a plan's time median "
        f"{statistics.median(times[0]) * 1000:.0f} → {statistics.median(times[wide]) * 1000:.0f} "
        f"ms (×{statistics.median(times[wide]) / statistics.median(times[0]):.2f}), max "
        f"{max(times[0]) * 1000:.0f} → {max(times[wide]) * 1000:.0f} ms"
    )


def bench_large() -> None:
    """vit-digits on the largest clusters the rounds found cut (the eighty-first round): the
    plan against the same plan pinned to 10 stages, side by side, its CPU, and the rank-map
    cells its schedule-wide paths priced (what SCHEDULE_PATH_WORK counts). Counted around
    `_shortest_path` alone, so an older tree runs it too (`PYTHONPATH=OLD python -m
    bench.bench_solver --only large`: the unpruned paths' cells)."""
    from pipeplan import api

    path = plan_module._shortest_path
    cells = [0]

    def counted(model, shape, cache, greedy, placements, evaluated, work, *rest):
        before = work.shared.paths_left
        try:
            return path(model, shape, cache, greedy, placements, evaluated, work, *rest)
        finally:
            cells[0] += before - max(work.shared.paths_left, 0)

    plan_module._shortest_path = counted
    try:
        with resources.as_file(resources.files("profiles") / "vit-digits@cpu-1t.json") as vit:
            for nodes, batch, samples in ((256, 4096, 409600), (4096, 16384, 163840)):
                totals, seconds = [], []
                for pins in ({}, {"stages": 10}):
                    cells[0] = 0
                    start = time.process_time()
                    plan = api.plan(
                        str(vit), nodes=nodes, devices_per_node=8, global_batch=batch,
                        samples=samples, **pins,
                    )  # fmt: skip
                    seconds.append(time.process_time() - start)
                    totals.append(plan.predicted_total_s)
                    if not pins:
                        free_cells = cells[0]
                print(
                    f"large: {nodes} × 8, global batch {batch}, {samples} samples: plan "
                    f"{totals[0]} s in {seconds[0]:.1f} s of CPU, paths {free_cells / 1e6:.1f} M "
                    f"cells; --stages 10 {totals[1]} s in {seconds[1]:.1f} s; plan / pinned "
                    f"{totals[0] / totals[1]:.4f}"
                )
    finally:
        plan_module._shortest_path = path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--only",
        choices=["exact", "speed", "baselines", "superset", "pins", "widening", "large"],
    )
    parser.add_argument("--instances", type=int)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    instances = args.instances or (300 if args.quick else 2000)
    if args.only in (None, "exact"):
        bench_partition_dp(200 if args.quick else 1000)
        bench_exactness(instances, args.seed)
    if args.only in (None, "speed"):
        bench_speed(big=not args.quick, repeats=args.repeats)
    if args.only in (None, "baselines"):
        bench_baselines()
        bench_ablation()
    if args.only in (None, "superset"):
        bench_superset(args.instances or (300 if args.quick else 1000), args.seed)
    if args.only in (None, "pins"):
        bench_pins(args.instances or (60 if args.quick else 200), args.seed)
    if args.only in (None, "widening"):
        bench_widening(args.instances or (60 if args.quick else 200), args.seed)
    if args.only in (None, "large"):
        bench_large()


if __name__ == "__main__":
    main()
