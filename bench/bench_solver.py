"""Planner benchmark (issue 3): exactness against brute force, solver speed, and the solver's
predicted step time against the partition baselines. Prints its figures; run from the repo root:

    python bench/bench_solver.py            # everything (a few minutes on 2 cores)
    python bench/bench_solver.py --quick    # fewer instances, no 1,000-layer plan
"""

from __future__ import annotations

import argparse
import itertools
import time

import numpy as np

from pipeplan.cluster import cluster_from_flags
from pipeplan.costmodel import CostModel, CostParams
from pipeplan.errors import BadArgumentError, PipeplanError
from pipeplan.formats import Cluster, Layout, Link
from pipeplan.freeze import alpha_schedule
from pipeplan.partition import PartitionProblem, brute_force_partition, solve_partition
from pipeplan.plan import compare_partitions, make_plan
from pipeplan.solver import PhaseSearch, Pins
from pipeplan.synthetic import SyntheticLayer, preset_profile, synthetic_profile, transformer_layers


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


def bench_partition_exactness(instances: int) -> None:
    rng = np.random.default_rng(0)
    agree = {"dense": 0, "parametric": 0}
    infeasible = 0
    for _ in range(instances):
        problem = random_problem(rng)
        expected = brute_force_partition(problem)
        infeasible += expected is None
        for method in agree:
            got = solve_partition(problem, method)
            if expected is None:
                agree[method] += got is None
            elif got is not None and problem.valid(got.boundaries):
                agree[method] += abs(got.bottleneck_s - expected.bottleneck_s) <= 1e-6 * max(
                    expected.bottleneck_s, 1e-12
                )
    print(f"partition DP vs brute force on {instances} random instances (≤10 layers, ≤6 stages,")
    print(f"  memory-constrained, {infeasible} with no fitting partition):")
    for method, count in agree.items():
        print(f"  {method:10s} agrees on {count}/{instances}")


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


def bench_plan_exactness(instances: int) -> None:
    """The solver's best simulated step against every shape × schedule × partition."""
    rng = np.random.default_rng(1)
    equal = 0
    gaps = []
    checked = 0
    for _ in range(instances):
        num_devices = int(rng.integers(1, 7))
        nodes = 2 if num_devices % 2 == 0 and rng.integers(0, 2) else 1
        cluster = Cluster(
            nodes=nodes,
            devices_per_node=num_devices // nodes,
            device_memory_bytes=int(rng.integers(40, 400)) << 20,
            intra_node=Link(bandwidth_bytes_per_s=float(rng.uniform(1e8, 1e10)), latency_s=1e-5),
            inter_node=Link(bandwidth_bytes_per_s=float(rng.uniform(1e7, 1e9)), latency_s=1e-4),
        )
        model = CostModel(
            random_profile(rng, int(rng.integers(1, 9))), cluster, CostParams(reserve_bytes=0)
        )
        frozen = int(rng.integers(0, model.num_layers))
        search = PhaseSearch(model, 60, frozen, bool(rng.integers(0, 2)))
        try:
            solver_step = search.solve().best.step_s
        except BadArgumentError:  # no shape at all (batch vs devices): nothing to compare
            continue
        except PipeplanError:  # nothing fits: brute force must agree
            solver_step = np.inf
        brute = np.inf
        L = model.num_layers
        for shape in search.shapes():
            ranks = search.layout_ranks(shape)
            for schedule in search.schedules(shape.num_stages):
                for cuts in itertools.combinations(range(1, L), shape.num_stages - 1):
                    boundaries = (0, *cuts, L)
                    if boundaries[1] <= search.frozen_layers:  # frozen prefix in stage 0
                        continue
                    layout = Layout(
                        frozen_layers=search.frozen_layers,
                        cached=search.cached,
                        micro_batches=shape.micro_batches,
                        micro_batch_size=shape.micro_batch_size,
                        schedule=schedule,
                        boundaries=boundaries,
                        rank_map=ranks,
                    )
                    evaluation = search.evaluate(layout)
                    if evaluation.fits:
                        brute = min(brute, evaluation.step_s)
        checked += 1
        if solver_step == brute or abs(solver_step - brute) <= 1e-9 * brute:
            equal += 1
        elif solver_step < brute:
            raise AssertionError("the solver beat brute force: brute force is broken")
        else:
            gaps.append(solver_step / brute - 1)
    print("plan level: solver's simulated step vs brute force over every S, M, schedule and")
    print(f"  partition, {checked} random instances (≤10 layers, ≤6 devices, random freeze/cache):")
    print(f"  equal on {equal}/{checked}; worse on {len(gaps)}", end="")
    if gaps:
        print(f" (median +{100 * np.median(gaps):.2f}%, worst +{100 * max(gaps):.2f}%)")
    else:
        print()


def bench_speed(big: bool) -> None:
    profile = preset_profile("bert-large")
    cluster = cluster_from_flags(
        nodes=2, devices_per_node=8, device_memory="16GiB", inter_bw="5GB/s"
    )
    freeze = alpha_schedule(0.2, 10, 24)
    timings = []
    for _ in range(3):
        start = time.perf_counter()
        plan = make_plan(
            profile, cluster, global_batch=512, samples=100_000, epochs=10, freeze=freeze
        )
        timings.append(time.perf_counter() - start)
    print(
        f"speed: bert-large (26 layers) on 2×8, {len(plan.phases)} phases, α=0.2 over 10 epochs: "
        f"full elastic plan in {min(timings):.2f} s (best of 3; median {np.median(timings):.2f} s)"
    )
    if not big:
        return
    layers = transformer_layers(num_blocks=998, hidden=2048, seq_len=512, vocab=32000)
    profile = synthetic_profile(layers, name="synthetic-1000")
    cluster = cluster_from_flags(
        nodes=512, devices_per_node=8, device_memory="80GiB", inter_bw="25GB/s"
    )
    freeze = alpha_schedule(0.2, 10, 998)
    start = time.perf_counter()
    plan = make_plan(
        profile, cluster, global_batch=8192, samples=1_000_000, epochs=10, freeze=freeze
    )
    elapsed = time.perf_counter() - start
    print(
        f"speed: synthetic 1,000 layers on 512×8 = 4,096 devices, {len(plan.phases)} phases: "
        f"full elastic plan in {elapsed:.1f} s"
    )
    for phase in plan.phases:
        print(
            f"  frozen {phase.layout.frozen_layers:4d}: {phase.layout.label()} "
            f"step {phase.step_s:.2f} s"
        )


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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    bench_partition_exactness(200 if args.quick else 1000)
    bench_plan_exactness(60 if args.quick else 500)
    bench_speed(big=not args.quick)
    bench_baselines()


if __name__ == "__main__":
    main()
