"""Solver: the partition DP against brute force, the search, memory, pins, errors."""

import itertools
import math
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeplan import solver
from pipeplan.cluster import Cluster, Link, cluster_from_flags
from pipeplan.costmodel import (
    EXACT_FAMILY_MAPS,
    MIRRORED_MAX_NODES,
    SMALL_CLUSTER_DEVICES,
    SMALL_CLUSTER_FAMILY_MAPS,
    CostModel,
    CostParams,
    Layout,
    rank_map,
)
from pipeplan.costmodel import every_rank_map as all_maps
from pipeplan.errors import BadArgumentError, PipeplanError
from pipeplan.partition import (
    PartitionProblem,
    PartitionSpace,
    bottlenecks,
    brute_force_partition,
    root_bounds,
    solve_partition,
)
from pipeplan.solver import (
    PhaseSearch,
    Pins,
    PlanWork,
    Shape,
    equal_boundaries,
    greedy_boundaries,
    layouts_within,
    solve_phase,
)
from pipeplan.synthetic import SyntheticLayer, preset_profile, synthetic_profile

GIB = 1 << 30


@st.composite
def partition_problems(draw, max_layers=10, max_stages=6):
    L = draw(st.integers(1, max_layers))
    S = draw(st.integers(1, min(L, max_stages)))
    values = st.integers(0, 20)
    compute = np.array(draw(st.lists(values, min_size=L, max_size=L)), float)
    transfer = np.array(draw(st.lists(values, min_size=2 * (L + 1), max_size=2 * (L + 1))), float)
    static = np.array(draw(st.lists(values, min_size=L, max_size=L)), float)
    saved = np.array(draw(st.lists(values, min_size=L, max_size=L)), float)
    M = draw(st.integers(1, 4))
    schedule = draw(st.sampled_from(["gpipe", "1f1b"]))
    in_flight = tuple(M if schedule == "gpipe" else min(S - s, M) for s in range(S))
    return PartitionProblem(
        compute_s=compute / 7.0,  # non-integer sums: exercise floating point
        transfer_s=transfer.reshape(2, L + 1) / 3.0,
        link_kind=tuple(draw(st.integers(0, 1)) for _ in range(S - 1)),
        static_bytes=static,
        saved_bytes=saved,
        in_flight=in_flight,
        memory_limit_bytes=float(draw(st.integers(0, 120))),
        min_first_boundary=draw(st.integers(1, L)),
    )


@settings(max_examples=400, deadline=None)
@given(problem=partition_problems())
def test_partition_dp_equals_brute_force(problem):
    expected = brute_force_partition(problem)
    for method in ("dense", "parametric"):
        got = solve_partition(problem, method)
        if expected is None:
            assert got is None
            continue
        assert got is not None
        assert problem.valid(got.boundaries)
        assert got.bottleneck_s == pytest.approx(expected.bottleneck_s, rel=2e-7, abs=1e-12)


def test_memory_constraint_picks_a_fitting_partition_over_the_balanced_one():
    # Balanced by time is [0,2,4]; the first two layers are too heavy to share a device.
    problem = PartitionProblem(
        compute_s=np.array([1.0, 1.0, 1.0, 1.0]),
        transfer_s=np.zeros((1, 5)),
        link_kind=(0,),
        static_bytes=np.array([6.0, 6.0, 1.0, 1.0]),
        saved_bytes=np.zeros(4),
        in_flight=(1, 1),
        memory_limit_bytes=10.0,
    )
    unconstrained = solve_partition(
        PartitionProblem(**{**problem.__dict__, "memory_limit_bytes": np.inf, "_prefix": {}})
    )
    assert unconstrained.boundaries == (0, 2, 4)
    result = solve_partition(problem)
    assert result.boundaries == (0, 1, 4)
    assert result.bottleneck_s == 3.0


def random_profile(
    rng: np.random.Generator,
    num_blocks: int,
    micro_batches: tuple[int, ...] = (1, 2, 4),
    overhead_max_s: float = 1e-3,
):
    layers = [
        SyntheticLayer(
            kind,
            int(rng.integers(1, 2_000_000)),
            float(rng.uniform(1e-4, 3e-3)),
            float(rng.uniform(1e-4, 6e-3)),
            int(rng.integers(1_000, 400_000)),
            float(rng.uniform(1e4, 4e6)),
            overhead_s=float(rng.uniform(0, overhead_max_s)),
        )
        for kind in ["embeddings"] + ["block"] * num_blocks + ["head"]
    ]
    return synthetic_profile(layers, micro_batches=micro_batches)


def random_cluster(rng: np.random.Generator, memory: int) -> Cluster:
    return Cluster(
        nodes=int(rng.integers(1, 3)),
        devices_per_node=int(rng.integers(1, 4)),
        device_memory_bytes=memory,
        intra_node=Link(bandwidth_bytes_per_s=float(rng.uniform(1e8, 1e10)), latency_s=1e-5),
        inter_node=Link(bandwidth_bytes_per_s=float(rng.uniform(1e7, 1e9)), latency_s=1e-4),
    )


def exhaustive_best_step(search: PhaseSearch) -> float:
    """Every shape, schedule and partition the executor can run, simulated, no pruning (this
    enumerated only the old search's DP partition and three baselines per shape; the search
    is now exact over every partition, so this is the brute force below)."""
    return brute_force_best_step(
        search.model, search.global_batch, search.frozen_layers, search.cached
    )


@pytest.mark.parametrize("seed", range(12))
def test_pruning_never_changes_the_best_plan(seed):
    rng = np.random.default_rng(seed)
    profile = random_profile(rng, int(rng.integers(1, 7)))
    cluster = random_cluster(rng, int(rng.integers(60, 400)) * (1 << 20))
    model = CostModel(profile, cluster, CostParams(reserve_bytes=0))
    frozen = int(rng.integers(0, model.num_layers))
    search = PhaseSearch(model, 24, frozen, bool(rng.integers(0, 2)))
    try:
        solution = search.solve()
    except PipeplanError:
        assert exhaustive_best_step(search) == np.inf
        return
    assert solution.best.step_s == pytest.approx(exhaustive_best_step(search), rel=1e-12)
    assert solution.best.fits
    assert all(r.step_s >= solution.best.step_s for r in solution.runner_ups)


def family_maps(S: int, D: int, G: int, nodes: int) -> list[tuple[tuple[int, ...], ...]]:
    """The planner's placement family of (S, D) (`costmodel.PLACEMENTS`), built here from
    its description, not by the solver's code: whole pipelines packed into nodes ("packed":
    with S > G consecutive ranks; else ⌊G/S⌋ pipelines per node, node 0 first, then the
    leftover devices in rank order), the same for rings ("rings", transposed), and the
    pipelines and rings over the node-interleaved device order ("spread", "spread-rings"),
    replica d on ranks d·S.. ("consecutive"); rows sorted; maps on the same nodes (replicas
    in any order) once. Then, on two nodes or more of two devices or more: every map
    (`all_maps`) where at most EXACT_FAMILY_MAPS node assignments fit the nodes' devices
    (SMALL_CLUSTER_FAMILY_MAPS on at most SMALL_CLUSTER_DEVICES devices) (multisets of D
    non-decreasing node rows, no node holding more than G cells); else, on up
    to MIRRORED_MAX_NODES nodes, each member's mirror (replica d's stage s
    on node N−1−n where its stage S−1−s was on node n, each node's cells on its lowest
    devices in row order). The planner keeps one of the maps priced alike: the same best."""

    def packed(stages: int, count: int) -> list[list[int]]:
        if stages > G:
            return [list(range(r * stages, (r + 1) * stages)) for r in range(count)]
        whole = [
            [n * G + j * stages + s for s in range(stages)]
            for n in range(nodes)
            for j in range(G // stages)
        ]
        left = [n * G + i for n in range(nodes) for i in range(G // stages * stages, G)]
        rest = [left[r * stages : (r + 1) * stages] for r in range(len(left) // stages)]
        return (whole + rest)[:count]

    order = [n * G + i for i in range(G) for n in range(nodes)]  # node 0 dev 0, node 1 dev 0…
    rings = packed(D, S)  # [stage][replica]
    maps = [
        packed(S, D),
        [[rings[s][d] for s in range(S)] for d in range(D)],
        [order[d * S : (d + 1) * S] for d in range(D)],
        [[order[s * D + d] for s in range(S)] for d in range(D)],
        [list(range(d * S, (d + 1) * S)) for d in range(D)],  # "consecutive"
    ]
    result, seen = [], set()
    for ranks in maps:
        ranks = tuple(tuple(sorted(row)) for row in ranks)
        nodes_of = tuple(sorted(tuple(r // G for r in row) for row in ranks))
        if nodes_of not in seen and (not result or (nodes > 1 and G > 1)):
            seen.add(nodes_of)
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
        on = [[nodes - 1 - r // G for r in reversed(row)] for row in ranks]
        used = [0] * nodes
        mirror = []
        for row in on:
            mirror.append([])
            for node in row:
                mirror[-1].append(node * G + used[node])
                used[node] += 1
        result.append(tuple(map(tuple, mirror)))
    return result


def every_layout(
    model: CostModel, global_batch: int, frozen: int, cached: bool = False, maps=family_maps
):
    """Every S ≤ min(N, L), D = 1..⌊N/S⌋ dividing the batch, each rank map `maps` gives for
    (S, D) (the planner's placement family; `all_maps`: every one), M dividing B/D with
    m ≤ m_max, both schedules, every partition (the frozen prefix over leading forward-only
    stages too), unchecked."""
    N, L = model.cluster.num_devices, model.num_layers
    G, nodes = model.cluster.devices_per_node, model.cluster.nodes
    for S in range(1, min(N, L) + 1):
        for D in range(1, N // S + 1):
            if global_batch % D:
                continue
            per_replica = global_batch // D
            for ranks in maps(S, D, G, nodes):
                for M in range(1, per_replica + 1):
                    m = per_replica // M
                    if per_replica % M or m > model.max_micro_batch_size:
                        continue
                    for schedule in ("gpipe", "1f1b"):
                        for cuts in itertools.combinations(range(1, L), S - 1):
                            yield Layout(
                                frozen_layers=frozen,
                                cached=cached and frozen > 0,
                                micro_batches=M,
                                micro_batch_size=m,
                                schedule=schedule,
                                boundaries=(0, *cuts, L),
                                rank_map=ranks,
                            )


def brute_force_best_step(
    model: CostModel, global_batch: int, frozen: int, cached: bool = False, maps=family_maps
) -> float:
    """The fastest of `brute_force_steps`; inf when nothing fits."""
    steps = brute_force_steps(model, global_batch, frozen, cached, maps)
    return steps[0] if steps else np.inf


def brute_force_steps(
    model: CostModel, global_batch: int, frozen: int, cached: bool = False, maps=family_maps
) -> list[float]:
    """Independent of the solver: `every_layout` evaluated by the cost model, kept when it
    fits and passes Layout.check (which refuses 1F1B with M below the training stages and a
    cached prefix outside stage 0); their steps, fastest first."""
    N, L = model.cluster.num_devices, model.num_layers
    steps = []
    for candidate in every_layout(model, global_batch, frozen, cached, maps):
        try:
            candidate.check(L, N)
        except BadArgumentError:
            continue
        evaluation = model.evaluate(candidate)
        if evaluation.fits:
            steps.append(evaluation.step_s)
    return sorted(steps)


def distinct(steps: list[float]) -> list[float]:
    """Steps apart by more than rounding (layouts that tie, e.g. on two devices of one node,
    count once: the search keeps one of them)."""
    kept: list[float] = []
    for step in steps:
        if not kept or step > kept[-1] * (1 + 1e-9):
            kept.append(step)
    return kept


@settings(max_examples=20, deadline=None)  # 20 for the default run's 15 minutes (30 took 11 s)
@given(seed=st.integers(0, 2**32 - 1), most=st.integers(1, 6), slack=st.floats(0, 0.5))
def test_the_fastest_layouts_within_a_step_are_the_exhaustive_ones(seed, most, slack):
    """`layouts_within` (what a plan's schedule-wide choice widens its candidates with): the
    `most` fastest layouts whose step is within `slack` of the best are the brute force's,
    step for step, fewer only when the brute force has fewer."""
    model, batch, frozen, cached = random_instance(seed)
    steps = brute_force_steps(model, batch, frozen, cached)
    if not steps:
        return
    within = steps[0] * (1 + slack)
    found, every_one = layouts_within(
        model, batch, frozen, cached, Pins(), within, PlanWork(), most
    )
    assert every_one == (len(found) < most)  # a search this small is never stopped
    found_steps = [e.step_s for e in found]
    assert found_steps == sorted(found_steps) and all(e.fits for e in found)
    assert len({e.layout for e in found}) == len(found) <= most
    expected = distinct([s for s in steps if s <= within])
    assert distinct(found_steps) == pytest.approx(expected[: len(distinct(found_steps))], rel=1e-9)
    if len(found) < most:  # all of them
        assert distinct(found_steps) == pytest.approx(expected, rel=1e-9)
    assert found_steps[0] == pytest.approx(steps[0], rel=1e-9)


@pytest.mark.parametrize("seed", range(6))
def test_solver_equals_brute_force_on_simulated_step(seed):
    # The search is exact (branch and bound with true lower bounds): equal to an exhaustive
    # enumeration written here, up to the search's prune tolerance (1e-12).
    rng = np.random.default_rng(100 + seed)
    model = CostModel(
        random_profile(rng, int(rng.integers(1, 5))),
        random_cluster(rng, 64 * GIB),
        CostParams(reserve_bytes=0),
    )
    best = solve_phase(model, 12).best.step_s
    brute = brute_force_best_step(model, 12, 0)
    assert best == pytest.approx(brute, rel=1e-12)


def test_pins_are_respected():
    rng = np.random.default_rng(7)
    model = CostModel(random_profile(rng, 6), random_cluster(rng, 64 * GIB))
    model.cluster.nodes, model.cluster.devices_per_node = 1, 4
    sol = solve_phase(model, 16, pins=Pins(num_stages=2, micro_batches=4, schedule="gpipe"))
    layout = sol.best.layout
    assert (layout.num_stages, layout.replicas, layout.micro_batches) == (2, 2, 4)
    assert layout.schedule == "gpipe" and layout.micro_batch_size == 2
    pinned = solve_phase(model, 16, pins=Pins(boundaries=(0, 1, 8)))
    assert pinned.best.layout.boundaries == (0, 1, 8)
    with pytest.raises(BadArgumentError, match="disagrees"):
        solve_phase(model, 16, pins=Pins(num_stages=3, boundaries=(0, 1, 8)))


def test_a_pipeline_that_fits_a_node_stays_inside_it_unless_its_rings_gain_more():
    """Two stages on 2 × 4 devices: the "packed" map keeps each pipeline inside a node (its
    activations on the fast in-node link, its rings across nodes); here the gradients
    outweigh the activations, so the plan keeps each stage's ring inside a node instead
    ("rings") and is faster than every pipeline kept inside a node."""
    rng = np.random.default_rng(3)
    model = CostModel(random_profile(rng, 6), random_cluster(rng, 64 * GIB))
    model.cluster.nodes, model.cluster.devices_per_node = 2, 4
    best = solve_phase(model, 16, pins=Pins(num_stages=2)).best
    for stage in range(2):
        assert len({row[stage] // 4 for row in best.layout.rank_map}) == 1
    inside = best.layout.model_copy(update={"rank_map": ((0, 1), (2, 3), (4, 5), (6, 7))})
    assert best.step_s < model.evaluate(inside).step_s


def test_indivisible_global_batch_is_one_line():
    rng = np.random.default_rng(1)
    model = CostModel(random_profile(rng, 2), random_cluster(rng, 64 * GIB))
    model.cluster.nodes, model.cluster.devices_per_node = 1, 8
    # 4 layers on 8 devices: D may be 1..8/S, so any batch splits (D = 1, M = B) unless the
    # micro-batches are pinned: 7 = D·2·m has no solution.
    with pytest.raises(BadArgumentError) as info:
        solve_phase(model, 7, pins=Pins(micro_batches=2))
    message = str(info.value)
    assert "global batch 7" in message and "\n" not in message


def test_a_model_that_cannot_fit_names_the_smallest_memory_and_the_limit():
    rng = np.random.default_rng(2)
    model = CostModel(random_profile(rng, 3), random_cluster(rng, 1 << 20))
    with pytest.raises(PipeplanError) as info:
        solve_phase(model, 8)
    message = str(info.value)
    assert "smallest achievable per-device memory" in message
    assert "a device has 1.0 MiB" in message and "\n" not in message


def test_baseline_partitions():
    assert equal_boundaries(10, 3) == (0, 4, 7, 10)
    assert greedy_boundaries(np.array([8.0, 1, 1, 1, 1, 1, 1, 1]), 2) == (0, 1, 8)
    assert greedy_boundaries(np.ones(6), 3) == (0, 2, 4, 6)
    assert greedy_boundaries(np.array([0.0, 0.0, 5.0]), 3) == (0, 1, 2, 3)


@pytest.mark.parametrize("seed", range(20))
def test_parametric_search_matches_the_dense_dp_on_longer_sequences(seed):
    rng = np.random.default_rng(seed)
    L = int(rng.integers(20, 80))
    S = int(rng.integers(2, 16))
    problem = PartitionProblem(
        compute_s=rng.uniform(0, 1, L),
        transfer_s=rng.uniform(0, 0.5, (2, L + 1)),
        link_kind=tuple(int(k) for k in rng.integers(0, 2, S - 1)),
        static_bytes=rng.uniform(0, 10, L),
        saved_bytes=rng.uniform(0, 3, L),
        in_flight=tuple(min(S - s, 4) for s in range(S)),
        memory_limit_bytes=float(rng.uniform(20, 200)),
        min_first_boundary=int(rng.integers(1, 5)),
    )
    dense, parametric = solve_partition(problem, "dense"), solve_partition(problem, "parametric")
    assert (dense is None) == (parametric is None)
    if dense is not None:
        assert problem.valid(parametric.boundaries)
        assert parametric.bottleneck_s == pytest.approx(dense.bottleneck_s, rel=2e-7)


# --------------------------------------------------------------------------- exactness


def calibration(rng: np.random.Generator):
    from pipeplan.formats import Calibration, FittedLink
    from pipeplan.formats.base import MAX_COUNT

    def link():
        return FittedLink(
            latency_s=float(rng.uniform(0, 1e-3)),
            bandwidth_bytes_per_s=float(rng.uniform(1e8, 1e10)),
        )

    # A negative overhead is a batch's input time taken off (at most MAX_COUNT samples' worth,
    # as the format holds it): a draw past that was refused before the solver ran (seed 320911).
    per_sample = float(rng.uniform(0, 1e-4))
    overhead = max(float(rng.uniform(-1e-2, 1e-2)), -per_sample * MAX_COUNT)
    return Calibration(
        fwd_scale=float(rng.uniform(0.5, 2)),
        bwd_scale=float(rng.uniform(0.5, 2)),
        nograd_scale=float(rng.uniform(0.5, 2)),
        fwd_call_scale=float(rng.uniform(0.3, 2)),
        bwd_call_scale=float(rng.uniform(0.3, 2)),
        nograd_call_scale=float(rng.uniform(0.3, 2)),
        allreduce=link(),
        p2p=link(),
        micro_batch_overhead_s=float(rng.uniform(0, 1e-3)),
        step_overhead_s=overhead,
        input_s_per_sample=per_sample,
        runs=["synthetic"],  # as calibrate writes it: fitted from a phase of a run
        phases_used=1,
        steps_used=3,
        residual_median=0.0,
        residual_max=0.0,
        # Null, as calibrate leaves them unfitted: with why.
        not_fitted=dict.fromkeys(("optimizer_s_per_byte", "group_rebuild_s"), "not measured"),
    )


def tight_cluster(rng: np.random.Generator) -> Cluster:
    """1–6 devices on one or two nodes, 40–400 MiB each, links from 1 MB/s to 10 GB/s."""
    devices = int(rng.integers(1, 7))
    nodes = 2 if devices % 2 == 0 and rng.integers(0, 2) else 1
    return Cluster(
        nodes=nodes,
        devices_per_node=devices // nodes,
        device_memory_bytes=int(rng.integers(40, 400)) << 20,
        intra_node=Link(bandwidth_bytes_per_s=float(rng.uniform(1e8, 1e10)), latency_s=1e-5),
        inter_node=Link(
            bandwidth_bytes_per_s=float(10 ** rng.uniform(6, 9)),
            latency_s=float(10 ** rng.uniform(-6, -3)),
        ),
    )


def random_instance(seed: int) -> tuple[CostModel, int, int, bool]:
    """3–9 layers, 1–6 devices on one or two nodes, tight memory, random freeze point and
    cache, a calibration section half of the time."""
    rng = np.random.default_rng(seed)
    profile = random_profile(rng, int(rng.integers(1, 8)))
    if rng.integers(0, 2):
        profile = profile.model_copy(update={"calibration": calibration(rng)})
    cluster = tight_cluster(rng)
    model = CostModel(profile, cluster, CostParams(reserve_bytes=0))
    frozen = int(rng.integers(0, model.num_layers))
    batch = int(rng.choice([12, 16, 24, 48]))
    return model, batch, frozen, bool(rng.integers(0, 2))


def fast_network_instance(seed: int) -> tuple[CostModel, int, int, bool]:
    """As `random_instance`, on two nodes of 2–4 devices whose in-node links (1–100 MB/s)
    are slower than the network (100 MB/s–100 GB/s; PCIe-only GPUs with a fast NIC): rings
    spanning nodes with in-node hops, priced at their slowest hop, sharing node links."""
    rng = np.random.default_rng(seed)
    profile = random_profile(rng, int(rng.integers(1, 8)))
    if rng.integers(0, 2):
        profile = profile.model_copy(update={"calibration": calibration(rng)})
    cluster = Cluster(
        nodes=2,
        devices_per_node=int(rng.integers(2, 5)),
        device_memory_bytes=int(rng.integers(40, 400)) << 20,
        intra_node=Link(
            bandwidth_bytes_per_s=float(10 ** rng.uniform(6, 8)),
            latency_s=float(10 ** rng.uniform(-5, -3)),
        ),
        inter_node=Link(
            bandwidth_bytes_per_s=float(10 ** rng.uniform(8, 11)),
            latency_s=float(10 ** rng.uniform(-6, -4)),
        ),
    )
    model = CostModel(profile, cluster, CostParams(reserve_bytes=0))
    frozen = int(rng.integers(0, model.num_layers))
    batch = int(rng.choice([12, 16, 24, 48]))
    return model, batch, frozen, bool(rng.integers(0, 2))


# Fewer examples for the default run's 15 minutes (each exhaustive reference grew with the
# rank-map family's exact members, the sixty-second round: 25 took 18 s, 15 took 7 to 18 s);
# the exact mode of bench/bench_solver.py checks 1,090 instances.
@pytest.mark.timeout(300)
@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_solver_equals_exhaustive_search_when_the_network_outruns_the_node(seed):
    """The thirty-sixth round's pricing of a ring at its slowest hop (`CostModel.
    allreduce_links`): the solver's bounds stay below what `evaluate` returns, so it still
    finds the exhaustive optimum."""
    model, batch, frozen, cached = fast_network_instance(seed)
    try:
        solution = PhaseSearch(model, batch, frozen, cached).solve()
    except PipeplanError:
        assert brute_force_best_step(model, batch, frozen, cached) == np.inf
        return
    expected = brute_force_best_step(model, batch, frozen, cached)
    assert solution.best.step_s == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("seed", [156])
def test_a_dive_does_not_hide_forward_only_prefixes(seed):
    # The first shape's greedy dive expands nodes whose other children never enter the
    # search; a forward-only prefix they dominate must not be dropped (it was, here: 4 %).
    model, batch, frozen, cached = random_instance(seed)
    solution = PhaseSearch(model, batch, frozen, cached).solve()
    expected = brute_force_best_step(model, batch, frozen, cached)
    assert solution.best.step_s == pytest.approx(expected, rel=1e-9)


@settings(max_examples=25, deadline=None)  # 25 for the default run's 15 minutes (45 took 13 s)
@given(seed=st.integers(0, 2**32 - 1))
def test_solver_equals_exhaustive_search(seed):
    model, batch, frozen, cached = random_instance(seed)
    try:
        solution = PhaseSearch(model, batch, frozen, cached).solve()
    except PipeplanError:
        assert brute_force_best_step(model, batch, frozen, cached) == np.inf
        return
    assert solution.proven and solution.best.fits
    solution.best.layout.check(model.num_layers, model.cluster.num_devices)
    expected = brute_force_best_step(model, batch, frozen, cached)
    assert solution.best.step_s == pytest.approx(expected, rel=1e-9)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), pick=st.integers(0, 10**6), earlier=st.integers(0, 10))
def test_a_hint_changes_no_result(seed, pick, earlier):
    """A plan hints each phase's search with the previous phase's placement (an earlier
    freeze point, maybe cached). Whatever the hint (any shape, schedule and partition, one
    the executor would refuse or that does not fit included), the search returns the
    exhaustive optimum and a layout the executor runs."""
    model, batch, frozen, cached = random_instance(seed)
    hints = list(every_layout(model, batch, max(frozen - earlier, 0), not cached))
    hint = hints[pick % len(hints)]
    try:
        solution = PhaseSearch(model, batch, frozen, cached).solve(hint=hint)
    except PipeplanError:
        assert brute_force_best_step(model, batch, frozen, cached) == np.inf
        return
    assert solution.proven and solution.best.fits
    solution.best.layout.check(model.num_layers, model.cluster.num_devices)
    expected = brute_force_best_step(model, batch, frozen, cached)
    assert solution.best.step_s == pytest.approx(expected, rel=1e-9)


def test_a_hint_outside_the_pins_is_not_the_answer():
    """The hint is simulated only when the space holds it: one stage is this phase's best,
    but with two stages pinned it must not be returned (nor with other pinned boundaries)."""
    rng = np.random.default_rng(3)
    model = CostModel(random_profile(rng, 4), random_cluster(rng, 64 * GIB))
    free = PhaseSearch(model, 12, 0, False).solve().best.layout
    pins = Pins(num_stages=free.num_stages % 3 + 1)
    pinned = PhaseSearch(model, 12, 0, False, pins).solve(hint=free).best.layout
    assert pinned.num_stages == pins.num_stages != free.num_stages
    L = model.num_layers
    other = (0, 1, L) if free.boundaries != (0, 1, L) else (0, 2, L)
    by_boundaries = PhaseSearch(model, 12, 0, False, Pins(boundaries=other)).solve(hint=free)
    assert by_boundaries.best.layout.boundaries == other


@pytest.mark.filterwarnings("error::RuntimeWarning")  # a NaN from inf·0 was one (M = 1)
@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), pick=st.integers(0, 10**6))
def test_partition_bounds_never_exceed_a_completion(seed, pick):
    """Every node of the branch and bound bounds all its completions' simulated steps."""
    check_bounds(*random_instance(seed), pick)


@pytest.mark.timeout(300)
@pytest.mark.filterwarnings("error::RuntimeWarning")
@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), pick=st.integers(0, 10**6))
def test_partition_bounds_never_exceed_a_completion_when_the_network_outruns_the_node(seed, pick):
    """As above, with rings priced at their slowest hop (the thirty-sixth round)."""
    check_bounds(*fast_network_instance(seed), pick)


def check_bounds(model: CostModel, batch: int, frozen: int, cached: bool, pick: int) -> None:
    """Every node of one shape's branch and bound (picked among the deepest) bounds all its
    completions' simulated steps, and so do the shape's closed-form and root bounds."""
    search = PhaseSearch(model, batch, frozen, cached)
    try:
        shapes = search.shapes()
    except BadArgumentError:
        return
    deep = sorted(shapes, key=lambda s: -s.num_stages)[: max(1, len(shapes) // 3)]
    shape = deep[pick % len(deep)]  # many stages: deep trees
    schedule = ("gpipe", "1f1b")[pick % 2]
    space = PartitionSpace(search.pricing(shape, schedule))
    nodes, leaves = [], {}
    stack = [space.root()]
    while stack:
        for bound, child in space.expand(stack.pop()):
            if child.depth == shape.num_stages:
                layout = search.layout(shape, schedule, child.boundaries)
                layout.check(model.num_layers, model.cluster.num_devices)  # a layout that runs
                step = model.evaluate(layout).step_s
                leaves[child.boundaries] = step
                assert space.leaf_bound(child.boundaries) <= step * (1 + 1e-9)
            else:
                stack.append(child)
            nodes.append((bound, child.boundaries))
    for bound, prefix in nodes:
        below = [s for b, s in leaves.items() if b[: len(prefix)] == prefix]
        if below:
            assert bound <= min(below) * (1 + 1e-9)
    closed = search.shape_bounds([(shape, schedule)])[0]
    assert closed <= min(leaves.values(), default=np.inf) * (1 + 1e-9)
    # The root's bound, alone and batched with the other shapes of as many stages (each row
    # its own: the same value either way).
    root = root_bounds([space])[0]
    assert root <= min(leaves.values(), default=np.inf) * (1 + 1e-9)
    others = [s for s in shapes if s.num_stages == shape.num_stages and s != shape]
    batch = [space] + [PartitionSpace(search.pricing(s, schedule)) for s in others]
    assert root_bounds(batch)[0] == root
    # Both schedules of each shape, sharing the tables that do not depend on the schedule
    # (as `bound_roots` batches them): every row as it is alone.
    both = [(s, sch) for s in [shape, *others] for sch in search.schedules(s.num_stages)]
    spaces = [PartitionSpace(search.pricing(s, sch)) for s, sch in both]
    shared = root_bounds(spaces, [s for s, _ in both])
    assert list(shared) == [root_bounds([one])[0] for one in spaces]
    # The whole tables a root batch keeps for a tree that may open are, where a space
    # adopts them (memory limits no stage's end), the tables the tree builds itself.
    kept: dict = {}
    alone = PartitionSpace(search.pricing(shape, schedule))
    assert root_bounds([alone], None, kept, np.inf)[0] == root
    adopting = PartitionSpace(search.pricing(shape, schedule))
    if 0 in kept and adopting.adopt(kept[0]):
        own = PartitionSpace(search.pricing(shape, schedule))
        for name in kept[0]:
            for k in range(1, shape.num_stages + 1):
                assert np.array_equal(adopting.table(name)[k], own.table(name)[k])


def frozen_heavy_model(device_memory: int) -> CostModel:
    """Embeddings and the first block are large (60 MB of weights each), the rest small: a
    device of 100 MiB holds either large layer frozen, but not both."""
    big, small = 15_000_000, 1_000
    layers = [
        SyntheticLayer("embeddings", big, 1e-3, 2e-3, 4096, 1e4),
        SyntheticLayer("block", big, 1e-3, 2e-3, 4096, 1e4),
        SyntheticLayer("block", small, 1e-3, 2e-3, 4096, 1e4),
        SyntheticLayer("head", small, 1e-4, 2e-4, 8, 1e3),
    ]
    cluster = Cluster(
        nodes=1,
        devices_per_node=3,
        device_memory_bytes=device_memory,
        intra_node=Link(bandwidth_bytes_per_s=1e10, latency_s=1e-5),
        inter_node=Link(bandwidth_bytes_per_s=1e9, latency_s=1e-4),
    )
    profile = synthetic_profile(layers, micro_batches=(1, 2, 4))
    return CostModel(profile, cluster, CostParams(reserve_bytes=0))


def test_a_frozen_prefix_too_large_for_one_device_runs_over_forward_only_stages():
    # Two frozen layers of 60 MB on 100 MiB devices: with the prefix in stage 0 (a cached
    # phase keeps its weights there) nothing fits; uncached, the solver splits the prefix
    # over forward-only leading stages, and that is the exhaustive optimum.
    model = frozen_heavy_model(100 << 20)
    with pytest.raises(PipeplanError, match="does not fit"):
        solve_phase(model, 8, frozen_layers=2, cached=True)
    best = solve_phase(model, 8, frozen_layers=2).best
    layout = best.layout
    layout.check(model.num_layers, model.cluster.num_devices)
    assert layout.boundaries[1] == 1 and layout.forward_only_stages >= 1
    assert best.fits
    assert best.step_s == pytest.approx(brute_force_best_step(model, 8, 2), rel=1e-12)


def test_1f1b_with_fewer_micro_batches_than_stages_keeps_the_leading_stages_forward_only():
    # M = 2 micro-batches, S = 3 stages: 1F1B runs only if stage 0 runs forward only.
    model = frozen_heavy_model(64 << 30)
    pins = Pins(num_stages=3, micro_batches=2, schedule="1f1b")
    layout = solve_phase(model, 8, 2, pins=pins).best.layout
    assert layout.schedule == "1f1b" and layout.boundaries[1] <= 2
    layout.check(model.num_layers, model.cluster.num_devices)
    # With nothing frozen no stage may run forward only: 1F1B needs M ≥ S.
    with pytest.raises(BadArgumentError, match="1F1B needs at least one micro-batch"):
        solve_phase(model, 8, 0, pins=Pins(num_stages=3, micro_batches=2, schedule="1f1b"))


def test_bottlenecks_for_every_stage_count_match_brute_force():
    rng = np.random.default_rng(5)
    for _ in range(30):
        L = int(rng.integers(1, 9))
        compute = rng.uniform(0, 1, L)
        first = int(rng.integers(1, L + 1))
        values = bottlenecks(compute, first, L)
        for S in range(1, L + 1):
            best = np.inf
            for cuts in itertools.combinations(range(1, L), S - 1):
                b = (0, *cuts, L)
                if b[1] >= first:
                    best = min(best, max(compute[b[s] : b[s + 1]].sum() for s in range(S)))
            assert values[S - 1] == pytest.approx(best, rel=1e-12)


def test_fewer_replicas_inside_one_node_can_beat_spreading_over_two():
    # Large gradients and activations, a slow network: a pipeline or data-parallel group
    # that crosses it loses to two devices inside node 0 (two devices idle).
    layers = [SyntheticLayer("embeddings", 50_000_000, 1e-4, 2e-4, 10**7, 1e4)]
    layers += [SyntheticLayer("block", 50_000_000, 1e-3, 2e-3, 10**7, 1e4) for _ in range(2)]
    layers.append(SyntheticLayer("head", 1000, 1e-4, 2e-4, 8, 1e3))
    cluster = Cluster(
        nodes=2,
        devices_per_node=2,
        device_memory_bytes=64 * GIB,
        intra_node=Link(bandwidth_bytes_per_s=1e11, latency_s=1e-6),
        inter_node=Link(bandwidth_bytes_per_s=1e8, latency_s=1e-4),
    )
    model = CostModel(synthetic_profile(layers, micro_batches=(1, 2, 4)), cluster)
    best = solve_phase(model, 16).best.layout
    assert best.num_stages * best.replicas < cluster.num_devices
    assert {rank // 2 for row in best.rank_map for rank in row} == {0}


def test_the_does_not_fit_message_is_built_only_when_shown(monkeypatch):
    rng = np.random.default_rng(2)
    model = CostModel(random_profile(rng, 3), random_cluster(rng, 1 << 20))
    calls = []
    original = PhaseSearch.smallest_peak_memory_bytes

    def counting(self, shapes, work):
        calls.append(1)
        return original(self, shapes, work)

    monkeypatch.setattr(PhaseSearch, "smallest_peak_memory_bytes", counting)
    with pytest.raises(PipeplanError) as info:
        solve_phase(model, 8)
    assert calls == []
    assert "smallest achievable per-device memory" in str(info.value)
    assert calls == [1]
    str(info.value)
    assert calls == [1]


@pytest.mark.timeout(120)
def test_the_does_not_fit_message_of_a_huge_cluster_takes_its_budget_not_minutes():
    """Found by the speed benchmark: 1,000 layers on 4,096 devices, nothing fits; the message's
    smallest memory ran a bisection for each of ~2,500 (S, D) pairs (over 15 minutes). It now
    checks the pairs with the most stages first within MESSAGE_WORK and says so. (A block
    of 3·10⁹ parameters fits no 8 GiB device, whatever the stages: with forward-only stages a
    long model's frozen prefix no longer has to fit one.)"""
    import time

    from pipeplan.cluster import cluster_from_flags

    block = SyntheticLayer("block", 3_000_000_000, 1e-3, 2e-3, 1 << 20, 1e6)
    layers = [SyntheticLayer("embeddings", 50_000_000, 1e-3, 2e-3, 1 << 20, 1e6)]
    layers += [block] * 998 + [SyntheticLayer("head", 1_000, 1e-4, 2e-4, 8, 1e3)]
    cluster = cluster_from_flags(nodes=512, devices_per_node=8, device_memory="8GiB")
    model = CostModel(synthetic_profile(layers, micro_batches=(1, 2)), cluster)
    with pytest.raises(PipeplanError) as info:
        solve_phase(model, 4096, frozen_layers=500)
    start = time.monotonic()
    message = str(info.value)
    assert time.monotonic() - start < 30  # (its budget is about 1 s)
    assert "layout shapes with the most stages" in message and "does not fit" in message


# Not proven at work limit 1 under the current bounds, and without the one-stage layouts
# simulated at the stop these pick a slower multi-stage layout (checked by disabling it).
@pytest.mark.parametrize("seed", [24, 43])
def test_a_search_out_of_work_still_simulates_the_one_stage_layouts(seed):
    # A work limit of 1 stops the search after its first simulated layout; the one-stage
    # (data-parallel) shapes still waiting are simulated before it returns, so it is never
    # slower than the best of them (on these instances the first layout was).
    model, batch, frozen, cached = random_instance(seed)
    solution = PhaseSearch(model, batch, frozen, cached, work_limit=1).solve()
    assert not solution.proven
    N, ranks = model.cluster.num_devices, model.cluster.devices_per_node
    one_stage = np.inf
    for D in (D for D in range(1, N + 1) if batch % D == 0):
        for M in (M for M in range(1, batch // D + 1) if (batch // D) % M == 0):
            m = batch // D // M
            if m > model.max_micro_batch_size:
                continue
            layout = Layout(
                frozen_layers=frozen,
                cached=cached and frozen > 0,
                micro_batches=M,
                micro_batch_size=m,
                schedule="1f1b",
                boundaries=(0, model.num_layers),
                rank_map=tuple(tuple(r) for r in rank_map(1, D, ranks, model.cluster.nodes)),
            )
            evaluation = model.evaluate(layout, record=False)
            if evaluation.fits:
                one_stage = min(one_stage, evaluation.step_s)
    assert solution.best.step_s <= one_stage * (1 + 1e-12)
    assert solution.lower_bound_s <= solution.best.step_s


def test_a_long_models_prefix_that_fits_no_stage_0_runs_on_forward_only_stages():
    """Found by the speed benchmark: the 1,000-layer plan failed from 489 frozen layers on,
    because a long model's prefix had to fit stage 0. When it does not, the phase is searched
    again with the prefix over leading forward-only stages."""
    from pipeplan.cluster import cluster_from_flags
    from pipeplan.solver import DoesNotFitError

    block = SyntheticLayer("block", 100_000_000, 1e-3, 2e-3, 1 << 20, 1e6)  # 400 MB
    embeddings = SyntheticLayer("embeddings", 1_000_000, 1e-4, 2e-4, 1 << 20, 1e6)
    layers = [embeddings] + [block] * 198 + [SyntheticLayer("head", 1_000, 1e-4, 2e-4, 8, 1e3)]
    cluster = cluster_from_flags(nodes=2, devices_per_node=8, device_memory="16GiB")
    model = CostModel(synthetic_profile(layers, micro_batches=(1, 2)), cluster)
    frozen = 120  # 48 GB of frozen weights: no single device holds them
    with pytest.raises(DoesNotFitError):
        PhaseSearch(model, 64, frozen, False).solve()
    best = solve_phase(model, 64, frozen_layers=frozen).best
    assert best.fits
    layout = best.layout
    layout.check(model.num_layers, cluster.num_devices)
    assert layout.forward_only_stages >= 3  # 48 GB over 16 GiB devices
    assert layout.boundaries[layout.forward_only_stages] <= frozen


def _layers(blocks: int) -> list[SyntheticLayer]:
    block = SyntheticLayer("block", 1000, 1e-3, 2e-3, 4096, 1e4)
    head = SyntheticLayer("head", 1000, 1e-4, 2e-4, 16, 1e2)
    return [SyntheticLayer("embeddings", 1000, 1e-4, 2e-4, 4096, 1e4), *[block] * blocks, head]


@pytest.mark.parametrize("table_cells", [0, solver.SHARED_LINK_CELLS])
@settings(max_examples=60, deadline=None)
@given(
    nodes=st.integers(1, 6),
    per_node=st.integers(1, 4),
    stages=st.integers(1, 6),
    replicas=st.integers(1, 6),
)
def test_shared_node_links_match_a_dense_reference(nodes, per_node, stages, replicas, table_cells):
    """Which node links two or more stages' all-reduces share, as a [node, stage] table
    would say: from the (node, stage) pairs where the table would be too large (it did not
    fit a million nodes), from a table of the spanning stages where it is small."""
    from pipeplan.solver import Shape

    if stages * replicas > nodes * per_node:
        return
    cluster = Cluster(
        nodes=nodes,
        devices_per_node=per_node,
        device_memory_bytes=1 << 40,
        intra_node=Link(latency_s=1e-5, bandwidth_bytes_per_s=1e10),
        inter_node=Link(latency_s=1e-4, bandwidth_bytes_per_s=1e9),
    )
    profile = synthetic_profile(_layers(8))
    search = PhaseSearch(CostModel(profile, cluster), replicas, 0, False)
    ranks = search.layout_ranks(Shape(stages, replicas, 1, 1))
    dense = np.zeros((nodes, stages), dtype=bool)
    for s in range(stages):
        spanned = {ranks[r][s] // per_node for r in range(replicas)}
        if len(spanned) > 1:
            dense[sorted(spanned), s] = True
    expected = np.unique(dense[dense.sum(axis=1) > 1], axis=0).reshape(-1, stages)
    with mock.patch.object(solver, "SHARED_LINK_CELLS", table_cells):
        assert np.array_equal(search._shared_links(ranks), expected)


@pytest.mark.timeout(60)
def test_a_million_nodes_take_no_per_node_table():
    """Seventh round: 1,048,576 one-device nodes and a 5,000-layer profile made the search
    allocate a [node, stage] table (4.9 GiB, a traceback); counted here with tracemalloc,
    which sees numpy's buffers, on a 1,000-stage layout (its table: 1 GiB)."""
    import tracemalloc

    from pipeplan.solver import Shape

    cluster = Cluster(
        nodes=1 << 20,
        devices_per_node=1,
        device_memory_bytes=1 << 40,
        intra_node=Link(latency_s=1e-5, bandwidth_bytes_per_s=1e10),
        inter_node=Link(latency_s=1e-4, bandwidth_bytes_per_s=1e9),
    )
    search = PhaseSearch(CostModel(synthetic_profile(_layers(998)), cluster), 1024, 0, False)
    ranks = search.layout_ranks(Shape(1000, 1024, 1, 1))
    tracemalloc.start()
    try:
        shared = search._shared_links(ranks)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert shared.shape == (0, 1000)  # one device per node: no link carries two stages
    assert peak < 200 << 20, peak  # observed 60–110 MB (the rank map's pairs); 1 GiB before


@pytest.mark.parametrize("frozen", [0, 1])
def test_shape_bounds_count_what_the_stages_receive(frozen):
    """Two stages on one slow link, transfers ten times the compute: the closed-form shape
    bound counts each boundary's cheapest activation and gradient (part of the receiving
    ops, as the simulator prices them): here it equals the best two-stage layout's step (a
    20 % margin); without them it was 0.31 and 0.41 of it. With one frozen layer the first
    stage may run forward only: that bound counts the activation it sends."""
    layers = [
        SyntheticLayer(kind, 1_000, 1e-3, 2e-3, 1_000_000, 1e3)
        for kind in ("embeddings", "block", "head")
    ]
    cluster = Cluster(
        nodes=1,
        devices_per_node=2,
        device_memory_bytes=GIB,
        intra_node=Link(bandwidth_bytes_per_s=1e8, latency_s=1e-5),  # 10 ms per activation
        inter_node=Link(bandwidth_bytes_per_s=1e8, latency_s=1e-5),
    )
    profile = synthetic_profile(layers, micro_batches=(1,))
    model = CostModel(profile, cluster, CostParams(reserve_bytes=0))
    search = PhaseSearch(model, 1, frozen, False)
    (shape,) = [s for s in search.shapes() if s.num_stages == 2]
    for schedule in search.schedules(2, shape.micro_batches):
        evaluations = [model.evaluate(search.layout(shape, schedule, (0, 1, 3)))]
        evaluations.append(model.evaluate(search.layout(shape, schedule, (0, 2, 3))))
        assert all(evaluation.fits for evaluation in evaluations)
        steps = [evaluation.step_s for evaluation in evaluations]
        bound = search.shape_bounds([(shape, schedule)])[0]
        assert 0.8 * min(steps) <= bound <= min(steps) * (1 + 1e-9)


def test_a_root_bound_keeps_closed_what_the_closed_form_lets_open():
    """bert-large on 2 × 8 devices, 6 frozen layers: a single pipeline of 15 stages with 512
    micro-batches. The closed-form shape bound (fractional layers, the cheapest transfers)
    is below the phase's best step, so its tree was opened only to be pruned at the root; the
    root's batched min-max tables (whole layers, each boundary's transfers) clear it
    (observed 1.04 of the best against 0.977; asserted with a 1 % margin), and stay below
    the shape's own best layout."""
    model = CostModel(
        preset_profile("bert-large"),
        cluster_from_flags(nodes=2, devices_per_node=8, device_memory="16GiB", inter_bw="5GB/s"),
    )
    search = PhaseSearch(model, 512, 6, False)
    # Over the "packed" maps, where this was observed (the other placements find a layout
    # faster than this shape's closed-form bound: 0.54 s).
    search.placements = lambda S, D: ("packed",)
    best = search.solve().best.step_s
    shape = Shape(15, 1, 512, 1)
    closed = search.shape_bounds([(shape, "1f1b")])[0]
    root = root_bounds([PartitionSpace(search.pricing(shape, "1f1b"))])[0]
    assert closed < best < best * 1.01 < root
    pinned = Pins(num_stages=15, replicas=1, micro_batches=512, schedule="1f1b")
    assert root <= PhaseSearch(model, 512, 6, False, pinned).solve().best.step_s * (1 + 1e-9)


def _noisy_instance(seed: int):
    """The thirty-third round's random instance: a synthetic profile of 1–6 blocks, timings
    scaled by ±50 % here and there, the largest micro-batch size infeasible for some layers,
    maybe a calibration, on 1–6 devices over one or two nodes. (model, batch, frozen, cached)."""
    rng = np.random.default_rng(seed)
    blocks = int(rng.integers(1, 7))
    sizes = rng.choice(np.arange(1, 13), size=int(rng.integers(1, 5)), replace=False)
    sizes = sorted({int(x) for x in sizes})
    profile = random_profile(rng, blocks, tuple(sizes), overhead_max_s=3e-3)
    noisy = []
    for layer in profile.layers:
        timings = []
        for t in layer.timings:
            scaled = {}
            if rng.random() < 0.5:
                scaled = {
                    name: getattr(t, name) * float(rng.uniform(0.5, 1.5))
                    for name in ("fwd_s", "bwd_s", "fwd_nograd_s")
                }
            timings.append(t.model_copy(update=scaled))
        if len(timings) > 1 and rng.random() < 0.15:
            timings[-1] = timings[-1].model_copy(update={"feasible": False, "error": "oom"})
        noisy.append(layer.model_copy(update={"timings": timings}))
    profile = profile.model_copy(update={"layers": noisy})
    if rng.integers(0, 2):
        profile = profile.model_copy(update={"calibration": calibration(rng)})
    cluster = tight_cluster(rng)
    model = CostModel(profile, cluster, CostParams(reserve_bytes=0))
    frozen = int(rng.integers(0, model.num_layers))
    batch = int(rng.choice([12, 18, 20, 24, 30, 36, 40, 60]))
    return model, batch, frozen, bool(rng.integers(0, 2))


def test_a_gpipe_bound_at_one_micro_batch_over_tables_that_fit_nothing_is_inf(recwarn):
    """Found by the thirty-third round: GPipe's bound at M = 1 over a rest whose min-max
    tables fit no memory (inf) computed 0·inf: a NaN bound, which prunes nothing (safe by
    accident), and numpy's "invalid value encountered in multiply" on plan's and preview's
    stderr. Such a bound is inf; the search still finds the exhaustive optimum, in silence."""
    model, batch, frozen, cached = _noisy_instance(1280)
    found = PhaseSearch(model, batch, frozen, cached).solve().best.step_s
    assert [str(w.message) for w in recwarn] == []
    assert found == pytest.approx(brute_force_best_step(model, batch, frozen, cached), rel=1e-9)


def _slow_in_node_cluster(devices_per_node: int, memory: int) -> Cluster:
    """Two nodes whose in-node link (1 MB/s, 1 ms) is far slower than the network (100 GB/s):
    PCIe-only nodes with a fast NIC."""
    return Cluster(
        nodes=2,
        devices_per_node=devices_per_node,
        device_memory_bytes=memory,
        intra_node=Link(bandwidth_bytes_per_s=1e6, latency_s=1e-3),
        inter_node=Link(bandwidth_bytes_per_s=1e11, latency_s=1e-5),
    )


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("profile_name", "memory", "faster"),
    [
        ("bert-synth@cpu-1t.json", 4_000_000_000, ((0,), (2,))),  # a replica on each node
        ("vit-digits@cpu-1t.json", 85 << 20, ((0, 2),)),  # a pipeline across the nodes
    ],
)
def test_a_slow_in_node_link_is_avoided_by_the_placement(profile_name, memory, faster):
    """Found by the thirty-seventh round: the solver knew one rank map per S×D (pipelines
    packed into node 0 first), so on 2 nodes × 2 devices whose in-node link is 1 MB/s and the
    network 100 GB/s it planned 1×1 at 63.4 ms a step (bert-synth) and 2×2 M=4 at 122.7 ms
    (vit-digits, 85 MiB devices) where the cost model prices 1×2 on rank map [[0], [2]] at
    36.7 ms and 2×1 on [[0, 2]] at 33.2 ms, and the 4-device cluster planned slower than its
    2×1 subset. The search now has a placement dimension: its plan is never slower than the
    subset's and equals the best of those maps, as priced by the same cost model."""
    from pathlib import Path

    from pipeplan.formats import Profile
    from pipeplan.freeze import no_freezing
    from pipeplan.plan import make_plan

    path = Path(__file__).resolve().parent.parent / "profiles" / profile_name
    profile = Profile.model_validate_json(path.read_text())
    whole, subset = _slow_in_node_cluster(2, memory), _slow_in_node_cluster(1, memory)
    best = solve_phase(CostModel(profile, whole), 16).best
    assert best.step_s <= solve_phase(CostModel(profile, subset), 16).best.step_s * (1 + 1e-12)
    # The best of the maps the round priced, each with the solver's own S, M and partition.
    model = CostModel(profile, whole)
    priced = []
    for ranks in (faster, ((0,),), ((0,), (1,)), ((0, 1),)):
        S, D = len(ranks[0]), len(ranks)
        try:  # (vit-digits needs two stages: one does not fit 85 MiB)
            layout = solve_phase(model, 16, pins=Pins(num_stages=S, replicas=D)).best.layout
        except PipeplanError:
            continue
        priced.append(model.evaluate(layout.model_copy(update={"rank_map": ranks})).step_s)
    assert best.step_s == pytest.approx(min(priced), rel=1e-12)
    assert best.layout.rank_map == faster
    # The whole plan (3 epochs, no freezing), as `pipeplan plan` makes it.
    totals = [
        make_plan(
            profile, cluster, global_batch=16, samples=160, epochs=3, freeze=no_freezing(3)
        ).predicted_total_s
        for cluster in (whole, subset)
    ]
    assert totals[0] <= totals[1] * (1 + 1e-12)


@pytest.mark.timeout(600)
@settings(max_examples=6, deadline=None)  # 2 s each; bench_solver.py's exact mode: 1,090
@given(seed=st.integers(0, 2**32 - 1), slow_in_node=st.booleans())
def test_the_placement_family_against_every_rank_map_on_tiny_clusters(seed, slow_in_node):
    """The search's rank maps are a family per (S, D) (`costmodel.placement_family`), not
    every map the executor runs, but where (S, D) has few node assignments it holds every
    one of them priced differently, and on two nodes each member's mirror. On two nodes of
    at most three devices: the solver returns the family's optimum, which is the best over
    every injective map of the cells into the devices (`all_maps`, once per node
    assignment). Before the sixty-second round's fix the family missed 1–3 % of such
    instances (the benchmark: 1 of 1,090; the tester's, up to 10.5 %: [[0, 2, 3]] on 2 × 2)."""
    model, batch, frozen, cached = (fast_network_instance if slow_in_node else random_instance)(
        seed
    )
    cluster = model.cluster
    if cluster.nodes != 2 or cluster.devices_per_node > 3:
        return
    family = brute_force_best_step(model, batch, frozen, cached)
    every = brute_force_best_step(model, batch, frozen, cached, all_maps)
    assert every == pytest.approx(family, rel=1e-9)
    try:
        solved = PhaseSearch(model, batch, frozen, cached).solve().best.step_s
    except PipeplanError:
        assert family == np.inf
        return
    assert solved == pytest.approx(every, rel=1e-9)


@pytest.mark.timeout(60)
def test_a_pipeline_may_cross_nodes_at_its_first_boundary():
    """Found by the sixty-second round: on 2 nodes the family (packed, rings, spread,
    spread-rings, consecutive) put a pipeline's node crossing where node 0 fills, never at
    an earlier boundary, so with vit-digits (7 frozen layers, no cache) on 2 × 2 devices of
    72 MiB whose network is 10 MB/s, it planned 4×1 on [[0, 1, 2, 3]] at 69.16 ms where the
    cost model prices 3×1 [0, 7, 8, 10] on [[0, 2, 3]] (the crossing after the forward-only
    stage, which sends no gradient back) at 68.14 ms, 1.5 % faster ([[0, 1, 2]]: 79.9 ms).
    The family now holds every node assignment where there are at most
    EXACT_FAMILY_MAPS (here 4 for 3×1), and elsewhere on up to MIRRORED_MAX_NODES nodes each
    member's mirror: the plan is that layout."""
    from pathlib import Path

    from pipeplan.formats import Profile

    path = Path(__file__).resolve().parent.parent / "profiles" / "vit-digits@cpu-1t.json"
    profile = Profile.model_validate_json(path.read_text())
    cluster = Cluster(
        nodes=2,
        devices_per_node=2,
        device_memory_bytes=72 << 20,
        intra_node=Link(bandwidth_bytes_per_s=5e9, latency_s=1e-3),
        inter_node=Link(bandwidth_bytes_per_s=1e7, latency_s=2e-5),
    )
    model = CostModel(profile, cluster)
    best = PhaseSearch(model, 48, 7, False).solve().best
    assert (best.layout.rank_map, best.layout.boundaries) == (((0, 2, 3),), (0, 7, 8, 10))
    assert best.step_s == pytest.approx(0.0681405, rel=1e-5)
    late = best.layout.model_copy(update={"rank_map": ((0, 1, 2),)})
    assert model.evaluate(late).step_s == pytest.approx(0.0798781, rel=1e-5)

    from pipeplan.costmodel import mirrored, placement_family

    assert mirrored(np.array([[0, 1, 2]]), 2, 2).tolist() == [[0, 2, 3]]
    # "consecutive"'s mirror on 2 × 3: the nodes of [[0, 3], [4, 5]], the known miss before.
    assert mirrored(np.array([[0, 1], [2, 3]]), 3, 2).tolist() == [[3, 4], [0, 5]]
    assert [[0, 2, 3]] in [ranks.tolist() for _, ranks in placement_family(3, 1, 2, 2)]
    assert [[0, 3], [4, 5]] in [ranks.tolist() for _, ranks in placement_family(2, 2, 3, 2)]


@pytest.mark.timeout(120)
def test_a_boundary_some_replicas_cross_is_priced_at_the_slower_link():
    """Found by comparing the family with every rank map: a boundary over which one
    replica's transfer crossed nodes and another's stayed in a node was priced on the
    network alone, so on a 1 MB/s in-node link the map [[0, 1], [2, 3]] on 2 × 3 devices
    (replica 0's transfer in node 0) looked 38 % faster than the family's best. The slower
    link per term now prices it (`CostModel.boundary_links`): the family's best is the best
    of every map here."""
    model, batch, frozen, cached = fast_network_instance(16)
    mixed = model.boundary_links(((0, 1), (2, 3)))[0]
    assert mixed.bandwidth_bytes_per_s == model.intra_p2p_link.bandwidth_bytes_per_s
    assert mixed.latency_s == max(model.intra_p2p_link.latency_s, model.inter_p2p_link.latency_s)
    family = brute_force_best_step(model, batch, frozen, cached)
    every = brute_force_best_step(model, batch, frozen, cached, all_maps)
    assert family == pytest.approx(every, rel=1e-9)


def best_on_each_assignment(
    model: CostModel, batch: int, frozen: int, S: int, D: int, cached: bool = False
) -> list[tuple[float, tuple[tuple[int, ...], ...]]]:
    """The exhaustive reference over rank maps: for every node assignment of (S, D) on the
    cluster (`all_maps`: every multiset of D non-decreasing node rows that fits the nodes'
    devices), the best step of a search pinned to (S, D) whose only rank maps are that
    assignment's and `packed`'s (every M, schedule and partition of them), with the map
    it ran on; fastest first. Each layout is priced again by the cost model alone."""
    from pipeplan.costmodel import MAP, PACKED, rank_array

    G, nodes = model.cluster.devices_per_node, model.cluster.nodes
    found = []
    for i, ranks in enumerate(all_maps(S, D, G, nodes)):

        def family(num_stages, replicas, per_node, nodes, i=i, ranks=ranks):
            assert (num_stages, replicas) == (S, D)
            packed = rank_array(S, D, per_node, nodes)
            return [(PACKED, packed), (f"{MAP}{i}", np.array(ranks))]

        original = solver.placement_family
        solver.placement_family = family
        try:
            search = PhaseSearch(
                CostModel(model.profile, model.cluster),
                batch,
                frozen,
                cached,
                Pins(num_stages=S, replicas=D),
            )
            best = search.solve().best
        except PipeplanError:
            continue
        finally:
            solver.placement_family = original
        step = model.evaluate(best.layout).step_s
        assert step == pytest.approx(best.step_s, rel=1e-12)
        found.append((step, best.layout.rank_map))
    return sorted(found)


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("per_node", "memory", "intra", "inter", "latency", "frozen", "S", "D", "steps"),
    [
        # 6×2 on [[0, 2, 4, 6, 8, 10], [1, 3, 5, 7, 9, 11]] (3 forward-only stages), where
        # [[0, 1, 2, 3, 6, 7], [4, 5, 8, 9, 10, 11]] runs the same layout 1.18 % faster.
        (6, "2GiB", None, "25GB/s", "1us", 22, 6, 2, (0.054776, 0.054139)),
        # 7×2 on [[0, 2, 4, 6, 7, 9, 11], [1, 3, 5, 8, 10, 12, 13]] (6 forward-only stages)
        # at 42.93 ms; on [[0..5, 7], [6, 8..13]] 7×2 runs at 40.84 ms (5.12 % faster).
        (7, "8GiB", "10GB/s", "5GB/s", None, 24, 7, 2, (0.042934, 0.040844)),
        # 8×2 on [[0..7], [8..15]], where [[0..6, 8], [7, 9..15]] runs 8×2 0.75 % faster.
        (8, "2GiB", "2GB/s", "25GB/s", None, 5, 8, 2, (0.129176, 0.128212)),
    ],
)
def test_the_family_holds_every_assignment_that_fits_where_few_do(
    per_node, memory, intra, inter, latency, frozen, S, D, steps
):
    """Found by the sixty-fifth round: the family took every node assignment only where
    there were at most EXACT_FAMILY_MAPS counted before the devices' limit, so (S, D) pairs
    with few assignments that fit (6×2 on 2 × 6 devices: 4 of 28; 7×2 on 2 × 7: 4 of 36;
    8×2 on 2 × 8: 5 of 45)
    got the mirrors instead, and a frozen bert-large on 2 nodes (64 samples) planned a
    layout slower than the best over every assignment. The family now counts the
    assignments that fit (`costmodel.fitting_assignments_at_most`): the solver's best is
    the best over every assignment,
    each searched alone (`best_on_each_assignment`), and no assignment runs the solver's
    own layout faster."""
    profile = preset_profile("bert-large")
    cluster = cluster_from_flags(
        nodes=2,
        devices_per_node=per_node,
        device_memory=memory,
        intra_bw=intra,
        inter_bw=inter,
        inter_latency=latency,
        profile=profile,
    )
    model = CostModel(profile, cluster)
    solution = solve_phase(model, 64, frozen, False)
    assert solution.proven
    best = solution.best
    exhaustive = best_on_each_assignment(model, 64, frozen, S, D)
    assert len(exhaustive) == len(all_maps(S, D, per_node, 2)) <= EXACT_FAMILY_MAPS
    assert exhaustive[0][0] == pytest.approx(steps[1], rel=1e-5)  # before: steps[0]
    assert best.step_s <= exhaustive[0][0] * (1 + 1e-9), (best.layout, exhaustive[0])
    layout = best.layout
    for ranks in all_maps(layout.num_stages, layout.replicas, per_node, 2):
        moved = layout.model_copy(update={"rank_map": ranks})
        assert best.step_s <= model.evaluate(moved).step_s * (1 + 1e-9), ranks


@pytest.mark.timeout(120)
def test_on_a_small_cluster_the_plan_is_the_best_over_every_rank_map():
    """Found by the sixty-fifth round (an exhaustive search over every layout the executor
    runs): on 3 nodes × 2 devices, plans up to 29 % slower than a layout on another rank map,
    as (S, D) pairs with more than EXACT_FAMILY_MAPS fitting assignments (2×2 there: 9 to 16)
    got mirrors only. Here vit-digits' shipped profile, 2 frozen layers, 32 samples, a
    0.1 GB/s node link and a 10 GB/s network: 2×2 on [[0, 2], [3, 4]] (one pipeline within
    node 1, the other across nodes 0 and 2) at 28.80 ms, where the plan was 30.29 ms (5.2 %
    slower). On a cluster of at most SMALL_CLUSTER_DEVICES devices every assignment is
    searched: the solver's best is at most the best of every (S, D) on every assignment,
    each searched alone (`best_on_each_assignment`)."""
    from pathlib import Path

    from pipeplan.formats import Profile

    path = Path(__file__).resolve().parent.parent / "profiles" / "vit-digits@cpu-1t.json"
    profile = Profile.model_validate_json(path.read_text())
    cluster = Cluster(
        nodes=3,
        devices_per_node=2,
        device_memory_bytes=12638031872,
        intra_node=Link(bandwidth_bytes_per_s=1e8, latency_s=1e-5),
        inter_node=Link(bandwidth_bytes_per_s=1e10, latency_s=1e-5),
    )
    model = CostModel(profile, cluster)
    best = solve_phase(model, 32, 2).best
    assert best.step_s == pytest.approx(0.0288025, rel=1e-5)  # before: 0.0302899
    for S in range(1, 7):
        for D in range(1, 6 // S + 1):
            for step, ranks in best_on_each_assignment(model, 32, 2, S, D):
                assert best.step_s <= step * (1 + 1e-9), (S, D, ranks, step)


@pytest.mark.parametrize(("nodes", "per_node"), [(1, 4), (2, 3), (2, 5), (2, 8), (3, 3), (4, 2)])
def test_counting_the_assignments_that_fit_agrees_with_listing_them(nodes, per_node):
    """`fitting_assignments_at_most` against `all_maps`, which lists every assignment that
    fits, for every (S, D) of the cluster (a count it cannot finish only says "many")."""
    from pipeplan.costmodel import fitting_assignments_at_most

    N = nodes * per_node
    for S in range(1, N + 1):
        for D in range(1, N // S + 1):
            if math.comb(math.comb(nodes + S - 1, S) + D - 1, D) > 20_000:
                continue  # listing them would take long
            few = len(all_maps(S, D, per_node, nodes)) <= EXACT_FAMILY_MAPS
            assert fitting_assignments_at_most(S, D, per_node, nodes, EXACT_FAMILY_MAPS) == few


@pytest.mark.timeout(60)
def test_the_previous_phases_placement_is_kept_with_its_rank_map():
    """A plan hints each phase with the previous phase's layout and may keep its placement
    (`plan._choose`): a placement other than "packed" is found in the family by its rank map
    (so the hint is simulated as that map), a map outside the family is not a hint, and
    keeping the placement keeps the map."""
    from pipeplan.plan import _with_freeze

    profile = synthetic_profile(_layers(4))
    model = CostModel(profile, _slow_in_node_cluster(2, 1 << 40))
    search = PhaseSearch(model, 16, 1, False)
    best = search.solve().best.layout
    spread = best.model_copy(update={"rank_map": ((0,), (2,)), "boundaries": (0, 6)})
    assert search.placement_of(spread) == "spread"
    assert search.placement_of(spread.model_copy(update={"rank_map": ((1,), (3,))})) is None
    hinted = PhaseSearch(model, 16, 1, False).solve(hint=spread).best
    assert hinted.step_s == pytest.approx(search.solve().best.step_s, rel=1e-12)
    kept = _with_freeze(spread, 2, False, model)
    assert kept is not None and kept.rank_map == ((0,), (2,))


def _bert_large(nodes: int, per_node: int, memory: str, intra: str, inter: str) -> CostModel:
    """The forty-second round's synthetic bert-large on `nodes` × `per_node` devices."""
    profile = preset_profile("bert-large")
    cluster = cluster_from_flags(
        nodes=nodes,
        devices_per_node=per_node,
        device_memory=memory,
        intra_bw=intra,
        inter_bw=inter,
        profile=profile,
    )
    return CostModel(profile, cluster)


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("cluster", "batch", "frozen", "pinned"),
    [
        # 8 samples, 24 of 26 layers frozen, a slow network: the free search stopped at its
        # first layout (step 18.8 ms); --stages 10 is proven at 13.5 ms, and so is one node.
        (
            ("16GiB", "5GB/s", "1GB/s"),
            8,
            24,
            [Pins(num_stages=10), 1],
        ),
        # 64 samples in 4 GiB, a slow in-node link: free 385 ms, --schedule gpipe 331 ms,
        # pinned boundaries and 2 × 7 devices 333 ms.
        (
            ("4GiB", "200MB/s", "10GB/s"),
            64,
            5,
            [Pins(schedule="gpipe"), Pins(boundaries=(0, 9, 12, 15, 17, 19, 20, 26)), 7],
        ),
    ],
)
def test_a_search_out_of_work_is_not_slower_than_a_pinned_one(cluster, batch, frozen, pinned):
    """Found by the forty-second round: bert-large on 2 × 8 devices planned 24 % slower than
    with `--stages 10` (and than on one node of the two), 10 % slower than with `--schedule
    gpipe`: the free search reached its work limit holding its first layout (best-first
    simulates a layout only once its bound is the smallest, and every stage count's partial
    partitions lay below the optimum), where the narrower searches were proven or nearly.
    Out of work, it goes on as the sub-searches per (stage count, schedule) a pin would make,
    diving for layouts; these phases' free layouts are now at least as fast as each pin's
    (int: the free search on that many devices a node, or on one node when 1)."""
    memory, intra, inter = cluster
    model = _bert_large(2, 8, memory, intra, inter)
    free = solve_phase(model, batch, frozen, False).best.step_s
    for pin in pinned:
        if isinstance(pin, Pins):
            step = solve_phase(model, batch, frozen, False, pin).best.step_s
        else:
            nodes, per_node = (1, 8) if pin == 1 else (2, pin)
            smaller = _bert_large(nodes, per_node, memory, intra, inter)
            step = solve_phase(smaller, batch, frozen, False).best.step_s
        assert free <= step * 1.001, (pin, free, step)


def _tight_32_blocks() -> CostModel:
    """A 32-block bert-large on 2 × 8 devices of 1.7 GiB: with 16 layers frozen, a space
    where most partitions do not fit (the forty-fourth and forty-sixth rounds' cases)."""
    profile = preset_profile("bert-large", num_blocks=32, hidden=1024)
    cluster = cluster_from_flags(
        nodes=2,
        devices_per_node=8,
        device_memory="1700MiB",
        intra_bw="200MB/s",
        inter_bw="100MB/s",
        profile=profile,
    )
    return CostModel(profile, cluster)


@pytest.mark.timeout(60)
def test_a_pinned_search_on_tight_memory_does_no_more_work_than_the_free_one():
    """Found by the forty-fourth round: `plan` of a 62-block bert-large on 2 × 8 devices of
    2 GiB, 20 layers frozen, took 31 s of CPU free and 68 s with `--stages 16`, past 100
    and 250 times the work limit: a stage fed by a forward-only one also holds the M
    receives it posts, which the partition tree left out, so its leaves failed their
    simulations one after another, and a search that has simulated nothing that fits goes
    on past its limit. Reduced here to 32 blocks, 16 frozen, 1.7 GiB: the pin did more work
    than the free search (which stopped at its limit 16 % slower than its optimum); the
    tree's stage ends now count the receives, both are proven near the limit, the pin with
    no more work. How far past the limit the sub-searches go depends on the order of bounds
    that tie to the last bits (numpy's sums differ by CPU): within 1× on the earlier sessions'
    machine, 1.15× on an AMD EPYC (2026-12-04); 1.5× leaves a margin, where the old tree
    went on past 100×. Since the sixty-second round's mirrored rank maps the free optimum
    is faster than the pin's: 9×1 with its first stage alone on node 0 ([[0, 8, …, 15]]),
    1.927 s against 1.945 s."""
    model = _tight_32_blocks()
    done = {}
    for name, pins in (("free", Pins()), ("pinned", Pins(num_stages=16))):
        work = PlanWork()
        solution = solve_phase(model, 256, 16, False, pins, work=work)
        done[name] = (work.limit - work.left, solution)
    (free_work, free), (pinned_work, pinned) = done["free"], done["pinned"]
    assert free.proven and pinned.proven
    assert free_work <= 1.5 * solver.DEFAULT_WORK_LIMIT and pinned_work <= free_work
    assert free.best.step_s <= pinned.best.step_s * (1 + 1e-12)
    assert pinned.best.layout.num_stages == 16


@pytest.mark.timeout(60)
def test_a_phase_whose_share_of_the_plans_work_is_spent_still_finds_a_layout_that_fits():
    """Found by the forty-sixth round: a plan of 100 phases of a 158-layer model on tight
    memory spent the plan's shared budget by its 76th phase, which was left 52 units: its
    search stopped at 10× that with nothing that fits simulated, and the plan failed, "no
    layout that fits memory" (75 phases planned). A phase's nothing-fits stop counts from the
    phase limit (DEFAULT_WORK_LIMIT) however little of the plan's budget is left: reduced here
    to 32 blocks on 1.7 GiB with 50 units left, where the first fitting layout comes after
    about 3,000 units (the old search gave up at 780)."""
    model = _tight_32_blocks()
    work = PlanWork()
    work.left = 50
    solution = solve_phase(model, 256, 16, False, Pins(), work=work)
    assert solution.best.fits and not solution.proven
    full = solve_phase(model, 256, 16, False, Pins(), work=PlanWork())
    assert full.best.step_s <= solution.best.step_s


@pytest.mark.timeout(60)
def test_the_tree_holds_a_partition_with_forward_only_stages_exactly_when_it_fits():
    """Found by the forty-fourth round (F9, the cause): the tree's stage ends left out the
    receive buffers of a stage fed by a forward-only one, so it held partitions the cost
    model refused (every leaf of F9's plan failed its simulation). Partitions of F9's model
    (62 blocks, 20 frozen, 2 GiB) near a leaf the tree holds, some stage within the frozen
    prefix: the tree holds each exactly when `CostModel.evaluate` says it fits."""
    profile = preset_profile("bert-large", num_blocks=62, hidden=1024)
    cluster = cluster_from_flags(
        nodes=2,
        devices_per_node=8,
        device_memory="2GiB",
        intra_bw="200MB/s",
        inter_bw="100MB/s",
        profile=profile,
    )
    model = CostModel(profile, cluster)
    search = PhaseSearch(model, 256, 20, False)
    run = solver._Run(search)
    rng = np.random.default_rng(0)
    fits = []
    for S in (14, 15, 16):
        shape = Shape(S, 1, 256, 1)
        space = run.space(shape, "1f1b")
        base = space.dive().boundaries
        for _ in range(150):
            # The leaf's first two cuts (around the stages the frozen prefix feeds) moved by
            # up to 3 layers, the rest kept.
            moved = np.array(base)
            moved[1:3] += rng.integers(-3, 4, 2)
            boundaries = tuple(moved.tolist())
            if np.any(np.diff(moved) <= 0) or sum(b <= 20 for b in boundaries[1:]) == 0:
                continue
            evaluation = search.evaluate(search.layout(shape, "1f1b", boundaries))
            assert space.holds(boundaries) == evaluation.fits, boundaries
            fits.append(evaluation.fits)
    assert any(fits) and not all(fits)


@pytest.mark.parametrize(
    "pins",
    [Pins(), Pins(schedule="1f1b"), Pins(replicas=2), Pins(num_stages=3, schedule="gpipe")],
    ids=["free", "1f1b", "replicas", "stages"],
)
def test_the_kept_shapes_are_each_searchs_own(pins):
    """A plan's searches take their shapes from those kept for the model (`_SHAPES`, a prefix
    of the most stages asked) and their schedules at once (`schedule_rows`): for every freeze
    point, cached or not, in the order a plan asks (fewer stages first, then more again),
    the same shapes, columns and candidates as a search building them alone would, in the
    same order (the heap breaks ties by it)."""
    model = CostModel(
        preset_profile("bert-large"),
        cluster_from_flags(nodes=2, devices_per_node=4, device_memory="16GiB", inter_bw="5GB/s"),
    )
    asked = 0
    for frozen, cached in [(5, True), (0, False), (12, False), (12, True), (20, True), (3, False)]:
        search = PhaseSearch(model, 64, frozen, cached, pins)
        alone = search._placed_shapes(search.max_stages)  # what it built before they were kept
        assert search.shapes() == alone
        assert (search.shape_columns() == solver._columns(alone)).all()
        which, gpipe = search.schedule_rows(search.shape_columns())
        pairs = zip(which.tolist(), gpipe.tolist(), strict=True)
        made = [(alone[i], ("1f1b", "gpipe")[g]) for i, g in pairs]
        each = [
            (shape, schedule)
            for shape in alone
            for schedule in search.schedules(shape.num_stages, shape.micro_batches)
        ]
        assert made == each
        asked += len(each)
    assert asked > 200  # a space of many shapes, schedules and placements


@pytest.mark.timeout(120)
def test_a_search_that_finds_nothing_that_fits_stops_and_the_plan_goes_on():
    """Found by the forty-fifth round: a one-phase plan of a 62-layer random profile (the
    benchmark's `random_profile`, seed 1085) on 4 × 4 devices of 1.15 GiB searched for more
    than 90 s, its heap past 1.5 GB, and planned nothing: leaf after leaf failed memory, and
    the work limit applies once something fits. A search with nothing that fits stops at
    NOTHING_FITS_WORK × its limit (`DoesNotFitError`), and the plan's search over
    forward-only stages (`solve_phase`) finds a layout that runs."""
    import importlib.util
    import sys
    from pathlib import Path

    from pipeplan.formats import FreezeSchedule
    from pipeplan.plan import make_plan

    path = Path(__file__).resolve().parent.parent / "bench" / "bench_solver.py"
    spec = importlib.util.spec_from_file_location("bench_solver", path)
    bench = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("bench_solver", bench)
    spec.loader.exec_module(bench)
    rng = np.random.default_rng(1085)
    profile = bench.random_profile(rng, int(rng.choice([18, 30, 60, 100, 158])))
    cluster = Cluster(
        nodes=4,
        devices_per_node=4,
        device_memory_bytes=1_237_594_826,
        intra_node=Link(bandwidth_bytes_per_s=5e8, latency_s=5e-6),
        inter_node=Link(bandwidth_bytes_per_s=1e8, latency_s=1e-4),
    )
    plan = make_plan(
        profile,
        cluster,
        global_batch=16,
        samples=800,
        epochs=1,
        freeze=FreezeSchedule(source="list", frozen_layers=[37]),
        cache=False,
    )
    (phase,) = plan.phases
    phase.layout.check(len(profile.layers), 16)
    assert phase.layout.forward_only_stages > 0, phase.layout  # 4 s here; the old code: no end


def test_a_refusal_never_quotes_a_least_memory_that_fits(monkeypatch):
    """Found by the forty-seventh round: a pinned layout after a frozen stage 0 was refused
    as "the smallest achievable per-device memory is 7.99 GiB but a device has 10.00 GiB":
    the min-max bound leaves out what a stage after forward-only ones holds, which the
    simulator prices (15.36 GiB). A bound below the device's memory is not quoted as what the
    layouts need; the line says every layout priced peaks above it."""
    from pipeplan.cluster import cluster_from_flags
    from pipeplan.solver import PhaseSearch

    block = SyntheticLayer("block", 3_000_000_000, 1e-3, 2e-3, 1 << 20, 1e6)
    cluster = cluster_from_flags(nodes=1, devices_per_node=2, device_memory="8GiB")
    layers = [SyntheticLayer("embeddings", 50_000_000, 1e-3, 2e-3, 1 << 20, 1e6)]
    layers += [block] * 8 + [SyntheticLayer("head", 1_000, 1e-4, 2e-4, 8, 1e3)]
    model = CostModel(synthetic_profile(layers, micro_batches=(1, 2)), cluster)
    with pytest.raises(PipeplanError) as info:
        solve_phase(model, 8, frozen_layers=0)
    assert "the smallest achievable per-device memory is" in str(info.value)
    under = cluster.device_memory_bytes - (1 << 30)
    monkeypatch.setattr(PhaseSearch, "smallest_peak_memory_bytes", lambda *a, **k: (under, 1, 1))
    with pytest.raises(PipeplanError) as info:
        solve_phase(model, 8, frozen_layers=0)
    message = str(info.value)
    assert "every layout priced peaks above a device's memory" in message, message
    assert "smallest achievable" not in message and "a device has 8.00 GiB" in message


@pytest.mark.long  # 20 s of tracemalloc: in `-m long`, for the default run's 15 minutes
def test_a_search_on_a_huge_cluster_keeps_no_more_rank_maps_than_a_small_one():
    """The rank maps a search opens (a 502-stage pipeline of 512 replicas is 257,024 ranks)
    are kept up to KEPT_RANK_CELLS cells, not all of them: kept for every map, a 1,000-layer
    preview grew with the devices (2^18 devices: 2.7 GB; 2^20 beyond 7.5 GB). Here the old
    code's peak grew by 144 MB from 2^14 to 2^19 devices (107 → 251 MB), now by ~26 MB (80 →
    106 MB: the larger candidate set and one map's arrays). Same layouts at both sizes."""
    import tracemalloc

    from pipeplan.synthetic import transformer_layers

    profile = synthetic_profile(
        transformer_layers(num_blocks=500, hidden=1024, seq_len=256, vocab=30522),
        name="syn500",
        hidden=1024,
    )
    peaks, labels = [], []
    for nodes in (16, 512):
        cluster = cluster_from_flags(nodes=nodes, devices_per_node=1024, device_memory="80GiB")
        tracemalloc.start()
        try:
            best = solve_phase(CostModel(profile, cluster), 1024).best
            peaks.append(tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()
        labels.append(best.layout.label())
    assert labels == ["57x256 M=4 gpipe", "502x512 M=2 gpipe"]
    assert peaks[1] - peaks[0] < 60e6, [f"{p / 1e6:.0f} MB" for p in peaks]


def test_the_smallest_memory_said_is_not_above_one_that_fits_under_bf16(tmp_path, capsys):
    """Found by the fifty-eighth round: under bf16 a refusal said the smallest achievable
    memory was 79.7 MiB while a layout of the largest micro-batch fit in 78.8 MiB: the figure
    took each (S, D)'s smallest micro-batch for its least memory, and autocast's weight
    copies, held once per micro-batch in flight, make more, smaller ones take more. Every
    micro-batch size is weighed: half a MiB below the figure said, nothing fits."""
    import re

    import cli
    from executor.planning import shipped_profile

    profile = shipped_profile("vit-digits", "cpu", precision="bf16")
    argv = ["plan", "--profile", str(profile), "--devices-per-node", "2", "--global-batch", "4"]
    argv += ["--samples", "640", "--epochs", "1", "--freeze", "none"]
    assert cli.main([*argv, "--device-memory", "63MiB", "--out", str(tmp_path / "a")]) == 2
    said = re.search(
        r"smallest achievable per-device memory is ([0-9.]+) MiB", capsys.readouterr().err
    )
    assert said is not None
    below = f"{float(said[1]) - 0.5:.1f}MiB"
    assert cli.main([*argv, "--device-memory", below, "--out", str(tmp_path / "b")]) == 2
    assert "does not fit" in capsys.readouterr().err


def test_a_smallest_memory_that_rounds_as_the_devices_is_said_in_bytes(tmp_path, capsys):
    """Found by the sixty-first round: at --device-memory 83000319B the refusal said "the
    smallest achievable per-device memory is 79.2 MiB but a device has 79.2 MiB" (it needs
    83,000,320 bytes: one more), which read as a contradiction. Where the two round alike,
    each is said with its bytes; one byte more plans."""
    import cli
    from executor.planning import shipped_profile

    profile = shipped_profile("bert-tiny", "cpu")
    argv = ["plan", "--profile", str(profile), "--nodes", "2", "--devices-per-node", "4"]
    argv += ["--global-batch", "64", "--samples", "640", "--epochs", "2"]
    argv += ["--freeze-schedule", "1,1", "--out", str(tmp_path / "p.json")]
    assert cli.main([*argv, "--device-memory", "83000319B"]) == 2
    err = capsys.readouterr().err
    said = "is 79.2 MiB (83,000,320 bytes) but a device has 79.2 MiB (83,000,319 bytes)"
    assert said in err, err
    assert cli.main([*argv, "--device-memory", "83000320B"]) == 0


def test_the_does_not_fit_messages_work_is_counted_not_timed(monkeypatch):
    """Found by the eighty-second round: the message's search for the smallest memory
    stopped on the clock, so the same command under load said fewer shapes were checked.
    It spends MESSAGE_WORK, counted (a layer per bisection): the same shapes whatever the
    clock says, at least one, all of them given enough."""
    import time

    from pipeplan.cluster import cluster_from_flags
    from pipeplan.solver import MessageWork

    model = CostModel(
        preset_profile("bert-base"),
        cluster_from_flags(nodes=2, devices_per_node=8, device_memory="1GiB"),
    )
    search = PhaseSearch(model, 128, 0, False, Pins())
    shapes = search.shapes()
    whole = search.smallest_peak_memory_bytes(shapes)
    assert whole[1] == whole[2] > 1
    assert search.smallest_peak_memory_bytes(shapes, MessageWork(left=1))[1] == 1
    clock = iter(range(0, 10**9, 1000))  # a clock that leaps 1,000 s at every look
    monkeypatch.setattr(time, "monotonic", lambda: float(next(clock)))
    assert search.smallest_peak_memory_bytes(shapes, MessageWork()) == whole


@pytest.mark.timeout(120)
def test_a_phase_searched_again_bounds_its_roots_once_and_plans_the_same(monkeypatch):
    """Found by the eighty-eighth round: a 160-layer model's 4 cached phases on 256 × 8 took
    107 s to plan, 60 % of it bounding again the roots (`partition.root_bounds`) that the
    plan's decisions had bounded, for the schedule-wide widening's searches of the same
    phases. A root bound depends on its space alone: each is bounded once a plan
    (`PhaseSearch.known_roots`), and the plan is the one bounded afresh in every search."""
    import weakref

    from pipeplan.formats import dumps
    from pipeplan.freeze import list_schedule
    from pipeplan.plan import make_plan

    profile = preset_profile("bert-base", num_blocks=20)
    cluster = cluster_from_flags(
        nodes=2, devices_per_node=8, intra_bw="10GB/s", inter_bw="1GB/s", device_memory="16GiB"
    )
    freeze = list_schedule([0, 5, 10, 15], 4, 20)
    real = solver.root_bounds

    def planned() -> tuple[str, int]:
        rows: list[int] = []

        def counted(spaces, *args, **kwargs):
            rows.append(len(spaces))
            return real(spaces, *args, **kwargs)

        monkeypatch.setattr(solver, "root_bounds", counted)
        monkeypatch.setattr(solver, "_ROOTS", weakref.WeakKeyDictionary())
        plan = make_plan(profile, cluster, freeze=freeze, global_batch=512, samples=51200, epochs=4)
        return dumps(plan), sum(rows)

    once, bounded_once = planned()
    monkeypatch.setattr(solver.PhaseSearch, "known_roots", lambda self: {})
    afresh, bounded_afresh = planned()
    assert once == afresh
    assert bounded_once < 0.6 * bounded_afresh  # (2,628 roots against 5,931, observed)
