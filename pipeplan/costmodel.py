"""Cost model: time and memory of the stages of one layout, from a profile and a cluster.

    model = CostModel(profile, cluster)
    evaluation = model.evaluate(layout)        # per-stage times and memory, simulated step
    model.transition_s(old_layout, new_layout) # moving state between two phases

The formulas and their approximations are in docs/architecture.md: per-layer fits §4.2,
frozen and cached layers §4.3, stage compute and transfers §4.4, all-reduce and optimizer §4.5,
stage memory §4.6, transitions §4.11.
"""

from __future__ import annotations

import itertools
import json
import math
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

import numpy as np

from pipeplan.cluster import (
    cluster_from_flags,
    memory_source,
    profile_device_memory,
    profiled_links,
)
from pipeplan.errors import BadArgumentError, InputFileError, PipeplanError
from pipeplan.formats import (
    DEFAULT_GROUP_REBUILD_S,
    RUN_PLAN,
    Cluster,
    EpochRecord,
    Layout,
    Link,
    PhaseRecord,
    Plan,
    Profile,
    RunConfig,
    read_plan_copy,
)
from pipeplan.simulate import (
    StageWork,
    Timeline,
    in_flight,
    received_in_op,
    simulate_step,
    timeline_of,
)

GIB = 1 << 30
# Bytes AdamW moves per parameter byte (read p, g, m, v; write p, m, v), over memory bandwidth.
ADAMW_BYTES_MOVED_PER_PARAM_BYTE = 7
TYPICAL_MEMORY_BANDWIDTH_BYTES_PER_S = {"cpu": 10e9, "cuda": 1e12}


# A CUDA context and NCCL buffers take about a GiB; a CPU rank's extra is the gloo buffers.
RESERVE_BYTES = {"cuda": GIB, "cpu": 64 << 20}
# Moves a cost model keeps priced (`CostModel.move_s`): a bound on what they hold, as the
# schedule-wide choice prices up to placements² of them per phase.
MAX_KEPT_MOVES = 100_000
# Rank-map cells (replicas × stages) the planner's caches of rank maps keep, each (a map's
# tuple of Python ints, about 40 bytes a cell, or its arrays): a map has up to a million
# cells (1,000 stages × 1,024 replicas), and kept for every (S, D) the search opened they
# grew with the devices (2^18 devices: 2.7 GB; 2^20: beyond 7.5 GB). Least recently used
# first out; what is dropped is made again from the cluster when asked (the same values).
KEPT_RANK_CELLS = 1 << 20
# Rank maps of at least this many cells are keyed in the caches of moves by the map object
# (`CostModel.map_key`), not by its value: hashing a map of a million cells at every lookup
# (a tuple keeps no hash) took a sixth of a preview on 2^20 devices (the eighty-fourth
# round), whose 56 distinct maps came as 360 objects. A smaller map's value keys it: equal
# maps made apart share their moves.
IDENTITY_KEY_CELLS = 4096


def rank_cells(rank_map: Sequence[Sequence[int]] | np.ndarray) -> int:
    """Cells of a rank map: `rank_cells(((0, 1), (2, 3)))` → 4."""
    return len(rank_map) * len(rank_map[0]) if len(rank_map) else 0


class BoundedCache:
    """A cache that forgets its least recently used entries once their sizes add up to more
    than `limit` (the newest is always kept): for values that are pure functions of their
    key, so that forgetting one changes nothing but the time to make it again.

        cache = BoundedCache(KEPT_RANK_CELLS)
        ranks = cache.get((S, D), lambda: rank_array(S, D, G, nodes), rank_cells)
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.size = 0
        self._items: OrderedDict[Hashable, tuple[object, int]] = OrderedDict()

    def get(self, key: Hashable, make: Callable[[], object], size: Callable[[object], int]):
        """The value of `key`, made by `make()` when not kept; `size(value)` its share."""
        item = self._items.get(key)
        if item is not None:
            self._items.move_to_end(key)
            return item[0]
        value = make()
        cost = size(value)
        self._items[key] = (value, cost)
        self.size += cost
        while self.size > self.limit and len(self._items) > 1:
            _, (_, dropped) = self._items.popitem(last=False)
            self.size -= dropped
        return value

    def __len__(self) -> int:
        return len(self._items)

    def clear(self) -> None:
        self._items.clear()
        self.size = 0


@dataclass(frozen=True)
class CostParams:
    """Constants of the cost model that calibration may fit."""

    optimizer_s_per_byte: float | None = None  # None: from the profiled device kind
    # Allocator slack, CUDA context, communication buffers; None: by device kind (RESERVE_BYTES).
    reserve_bytes: int | None = None
    # New process groups + barrier when the layout changes; None: calibrated, else measured
    # by `pipeplan profile --nproc`, else DEFAULT_GROUP_REBUILD_S (`group_rebuild_s_of`).
    group_rebuild_s: float | None = None
    extrapolation_factor: float = 2.0
    adam_state_per_param_byte: float = 2.0  # exp_avg and exp_avg_sq in fp32


@dataclass(frozen=True)
class PhaseCosts:
    """Per-layer costs of one phase (freeze point, cache) at one micro-batch size m."""

    micro_batch_size: int
    frozen_layers: int
    cached: bool
    fwd_s: np.ndarray  # forward actually computed (0 for cached layers, + cache read)
    bwd_s: np.ndarray  # 0 for frozen layers
    active: np.ndarray  # bool
    boundary_bytes: np.ndarray  # activation bytes leaving layer i for one micro-batch
    static_bytes: np.ndarray  # weights (+ grads + optimizer state when active)
    saved_bytes_per_micro_batch: np.ndarray  # activations kept for backward, per micro-batch
    grad_bytes: np.ndarray  # bytes all-reduced (active parameters)

    @property
    def first_computed_layer(self) -> int:
        return self.frozen_layers if self.cached else 0


@dataclass(frozen=True)
class StageReport:
    first_layer: int
    stop_layer: int  # exclusive
    fwd_s: float  # per micro-batch
    bwd_s: float
    send_fwd_s: float
    send_bwd_s: float
    allreduce_s: float
    optimizer_s: float
    memory_bytes: int


@dataclass(frozen=True)
class Evaluation:
    layout: Layout
    stages: list[StageReport]
    timeline: Timeline
    fits: bool

    @property
    def step_s(self) -> float:
        return self.timeline.step_s

    @property
    def peak_memory_bytes(self) -> int:
        return max(stage.memory_bytes for stage in self.stages)


def _fit_line(sizes: Sequence[int], times: Sequence[float]) -> tuple[float, float]:
    """Least squares t = a + c·m with a, c ≥ 0."""
    m = np.asarray(sizes, dtype=float)
    t = np.asarray(times, dtype=float)
    if len(m) == 1:
        return 0.0, float(t[0] / m[0])
    from scipy.optimize import nnls  # here: scipy.optimize is 0.4 s of every rank's start

    (a, c), _ = nnls(np.column_stack([np.ones_like(m), m]), t)
    return float(a), float(c)


def check_profile(profile: Profile, where: str | None = None) -> None:
    """The layer sequence must be embeddings, the model's blocks, head, each with a timing.
    `where`: the profile's file, named in the line (the fifty-third round: a layer with no
    usable size was the one profile refusal not naming it)."""
    try:
        _check_layers(profile)
    except InputFileError as exc:
        raise InputFileError(f"{where}: {exc}" if where else str(exc)) from None


def _check_layers(profile: Profile) -> None:
    layers = profile.layers
    expected = profile.model.config.get("num_hidden_layers")
    if expected is not None and len(layers) != expected + 2:
        raise InputFileError(
            f"profile of '{profile.model.name}' has {len(layers)} layers but the model has "
            f"{expected} blocks (expected {expected + 2} layers); re-run pipeplan profile"
        )
    kinds = [layer.kind for layer in layers]
    if kinds != ["embeddings", *["block"] * (len(layers) - 2), "head"]:
        raise InputFileError(
            "profile layers must be embeddings, blocks, head in that order (got "
            f"{', '.join(kinds[:4])}{', …' if len(kinds) > 4 else ''})"
        )
    for layer in layers:
        if not any(t.feasible for t in layer.timings):
            raise InputFileError(
                f"profile layer {layer.index} ({layer.name}) has no feasible micro-batch size "
                f"(layers.{layer.index}.timings)"
            )
        # The planner never uses a size at or above a layer's smallest infeasible one; at 1
        # no size is left, and the floor of 1 planned that size anyway (thirty-first round).
        if any(t.micro_batch == 1 and not t.feasible for t in layer.timings):
            raise InputFileError(
                f"profile layer {layer.index} ({layer.name}) ran out of memory at micro-batch "
                f"size 1 (layers.{layer.index}.timings): no micro-batch size can run it; "
                "profile on a device with more memory"
            )


def in_node_links(profile: Profile, cluster: Cluster) -> tuple[Link, Link]:
    """The (point-to-point, all-reduce) links the cost model prices inside a node (§4.4, §4.5).

        p2p, allreduce = in_node_links(profile, cluster)

    A calibration's `p2p` and `allreduce` are fitted to the runs of the machine the profile
    measured, against its measured links (`cluster.profiled_links`: a run plans on them). A
    cluster link that is that measured one (a run's own cluster, `calibrate`'s predictions,
    a plan or record of such a cluster read back, a cluster built without --intra-bw) is
    priced as the calibration fitted it. A link the user described otherwise (--intra-bw,
    a cluster file's intra_node or intra_node_allreduce) is another machine's: it is priced
    as given, plus what the calibration fitted beyond the measured link (`calibrated_extra`).
    Found by the thirty-fifth round: `preview --intra-bw 1GB/s` and `--intra-bw 100GB/s` of a
    calibrated profile gave the same steps, the calibration's links priced in place of both.
    Each link is decided apart; equal is exact, as a plan's JSON gives the numbers back."""
    calibration = profile.calibration
    measured_p2p, measured_allreduce = profiled_links(profile)
    return (
        _priced(cluster.intra_node, calibration and calibration.p2p, measured_p2p),
        _priced(
            cluster.allreduce_link,
            calibration and calibration.allreduce,
            measured_allreduce or measured_p2p,
        ),
    )


def inter_node_links(profile: Profile, cluster: Cluster) -> tuple[Link, Link]:
    """The (point-to-point, all-reduce) links the cost model prices between nodes: the
    cluster's inter-node link plus what the calibration fitted beyond the measured in-node
    links (`calibrated_extra`: the run's own work around a transfer, the same whatever link
    carries it). Found by the thirty-sixth round: the extra was added in-node only, so a
    calibrated profile's 1×2 all-reduce across two nodes on a 1 GB/s network was priced 5×
    faster than inside one node on a 100 GB/s link, and plans spread replicas over nodes.

        p2p, allreduce = inter_node_links(profile, cluster)
    """
    calibration = profile.calibration
    measured_p2p, measured_allreduce = profiled_links(profile)
    inter, ring = cluster.inter_node, measured_allreduce or measured_p2p
    return (
        _with_extra(inter, calibration and calibration.p2p, measured_p2p),
        _with_extra(inter, calibration and calibration.allreduce, ring),
    )


def _priced(link: Link, fitted, measured: Link) -> Link:
    """`link` as the cost model prices it, given the calibration's fit (None: not fitted) of
    the `measured` link (`in_node_links`)."""
    if fitted is None:
        return link
    if _terms(link) == _terms(measured):
        return Link(latency_s=fitted.latency_s, bandwidth_bytes_per_s=fitted.bandwidth_bytes_per_s)
    return _with_extra(link, fitted, measured)


def _with_extra(link: Link, fitted, measured: Link) -> Link:
    """`link` plus what `fitted` (None: nothing fitted) costs beyond `measured`."""
    if fitted is None:
        return link
    latency, per_byte = calibrated_extra(fitted, measured)
    if latency == 0 and per_byte == 0:
        return link
    # A derived link, not input: not held to the format's bounds (constructed unchecked).
    return Link.model_construct(
        latency_s=link.latency_s + latency,
        bandwidth_bytes_per_s=1.0 / (1.0 / link.bandwidth_bytes_per_s + per_byte),
    )


def slowest_link(*links: Link) -> Link:
    """Per term, the slowest of `links` (the largest latency, the smallest bandwidth): what a
    ring whose steps cross each of them waits for (`CostModel.allreduce_links`). Each term
    is one of the links', so it is at least as slow as any of them, term by term."""
    latency = max(link.latency_s for link in links)
    bandwidth = min(link.bandwidth_bytes_per_s for link in links)
    for link in links:
        if _terms(link) == (latency, bandwidth):
            return link  # one link slowest in both terms: itself
    # A derived link, not input: not held to the format's bounds (constructed unchecked).
    return Link.model_construct(latency_s=latency, bandwidth_bytes_per_s=bandwidth)


def _terms(link) -> tuple[float, float]:
    return link.latency_s, link.bandwidth_bytes_per_s


def calibrated_extra(fitted, profiled: Link) -> tuple[float, float]:
    """What a calibration's fitted link costs beyond the measured link it was fitted against,
    per term: (extra latency in seconds, extra seconds per byte), each at least 0. It is the
    run's own work around a transfer (the executor's send and receive calls; concatenating,
    dividing and splitting the all-reduce's bucket beside the other ranks' compute), which
    the profiler's link benchmark leaves out, and which does not change with the link: a
    user's link is priced with it added. A fit faster than the profiled link says the
    benchmark overestimated that machine's link, which says nothing of another's: 0.

        calibrated_extra(FittedLink(latency_s=3e-4, bandwidth_bytes_per_s=1e9), profiled)
    """
    latency = max(0.0, fitted.latency_s - profiled.latency_s)
    per_byte = max(0.0, 1.0 / fitted.bandwidth_bytes_per_s - 1.0 / profiled.bandwidth_bytes_per_s)
    return latency, per_byte


class CostModel:
    """Time and memory of candidate plans for one profile on one cluster."""

    def __init__(self, profile: Profile, cluster: Cluster, params: CostParams | None = None):
        check_profile(profile)
        self.profile = profile
        self.cluster = cluster
        self.params = params or CostParams()
        layers = profile.layers
        self.num_layers = len(layers)
        self.num_blocks = self.num_layers - 2
        fits = {"fwd": [], "bwd": [], "nograd": []}
        largest_feasible, smallest_infeasible = [], []
        for layer in layers:
            ok = [t for t in layer.timings if t.feasible]
            sizes = [t.micro_batch for t in ok]
            fits["fwd"].append(_fit_line(sizes, [t.fwd_s for t in ok]))
            fits["bwd"].append(_fit_line(sizes, [t.bwd_s for t in ok]))
            fits["nograd"].append(_fit_line(sizes, [t.fwd_nograd_s for t in ok]))
            largest_feasible.append(max(sizes))
            bad = [t.micro_batch for t in layer.timings if not t.feasible]
            smallest_infeasible.append(min(bad) if bad else None)
        self._fits = {key: np.array(value) for key, value in fits.items()}
        self.calibration = profile.calibration
        if self.calibration is not None:
            for kind, fit in self._fits.items():
                fit *= np.array(self.calibration.scales(kind))  # columns: per call, per sample
        factor, measured = self.params.extrapolation_factor, min(largest_feasible)
        limit = int(factor * measured)
        # Why the limit is what it is, for the refusals that meet it to say (and to say
        # whether profiling larger sizes would raise it).
        self.micro_batch_limit_reason = f"{factor:g}× the largest profiled size, {measured}"
        self.micro_batch_limit_is_memory = False
        bad_sizes = [b for b in smallest_infeasible if b is not None]
        if bad_sizes and min(bad_sizes) - 1 < limit:
            limit = min(bad_sizes) - 1
            self.micro_batch_limit_reason = f"below {min(bad_sizes)}, which ran out of memory"
            self.micro_batch_limit_is_memory = True
        self.max_micro_batch_size = max(1, limit)
        self.param_bytes = np.array([layer.param_bytes for layer in layers], dtype=float)
        self.out_bytes_per_sample = np.array(
            [layer.out_bytes_per_sample for layer in layers], dtype=float
        )
        self.saved_per_sample = np.array(
            [layer.saved_bytes_per_sample for layer in layers], dtype=float
        )
        self.saved_fixed = np.array([layer.saved_bytes_fixed for layer in layers], dtype=float)
        if self.params.optimizer_s_per_byte is not None:
            self.optimizer_s_per_byte = self.params.optimizer_s_per_byte
        elif self.calibration and self.calibration.optimizer_s_per_byte is not None:
            self.optimizer_s_per_byte = self.calibration.optimizer_s_per_byte
        else:
            bandwidth = TYPICAL_MEMORY_BANDWIDTH_BYTES_PER_S[profile.device.kind]
            self.optimizer_s_per_byte = ADAMW_BYTES_MOVED_PER_PARAM_BYTE / bandwidth
        self.reserve_bytes = (
            self.params.reserve_bytes
            if self.params.reserve_bytes is not None
            else RESERVE_BYTES[profile.device.kind]
        )
        self.micro_batch_overhead_s = (
            self.calibration.micro_batch_overhead_s if self.calibration else 0.0
        )
        self.intra_p2p_link, self.intra_allreduce_link = in_node_links(profile, cluster)
        self.inter_p2p_link, self.inter_allreduce_link = inter_node_links(profile, cluster)
        self.group_rebuild_s = (
            self.params.group_rebuild_s
            if self.params.group_rebuild_s is not None
            else group_rebuild_s_of(profile)
        )
        self._phase_costs = lru_cache(maxsize=4096)(self._phase_costs_uncached)
        self.boundary_rate_table = lru_cache(maxsize=64)(self._boundary_rate_table)
        # Each map's boundary latencies and rates (`_boundary_rate_table`): packed ones per S
        # and D, others per (S, D, placement). Each phase's table holds mostly the maps of the
        # one before: priced again, they took a quarter of a plan on 131,072 × 8 devices.
        self._packed_rates: dict[int, dict[int, tuple[np.ndarray, np.ndarray]]] = {}
        self._map_rates: dict[tuple[int, int, str], tuple[np.ndarray, np.ndarray]] = {}
        # Keyed by rank maps: bounded by their cells (KEPT_RANK_CELLS), as every layout the
        # search simulates names one.
        self._links = BoundedCache(KEPT_RANK_CELLS)
        self._moves = BoundedCache(KEPT_RANK_CELLS)
        self._held = BoundedCache(KEPT_RANK_CELLS)
        self._map_keys: dict[int, tuple[weakref.ref, tuple[str, int]]] = {}
        self._map_count = itertools.count()
        # Per rank map (by identity: the map is kept with its value, so its id stays its
        # own), what a cached phase's pricing reads of it (`plan.stage0_nodes`): on a million
        # devices, counting it again for every pair of layouts priced took a tenth of a plan.
        self.by_rank_map = BoundedCache(KEPT_RANK_CELLS)
        self.moved_prefix = lru_cache(maxsize=64)(self._moved_prefix)  # a plan's freeze points

    # ------------------------------------------------------------------ per layer

    def layer_times(self, kind: str, m: int) -> np.ndarray:
        """Fitted time of every layer at micro-batch size m: kind in fwd, bwd, nograd."""
        self.check_micro_batch_size(m)
        fit = self._fits[kind]
        return fit[:, 0] + fit[:, 1] * m

    def layer_call_times(self, kind: str) -> np.ndarray:
        """The per-call part of every layer's fitted time (what `layer_times` adds whatever m
        is): calibration scales it apart from the per-sample part.

            per_call = model.layer_call_times("fwd")  # layer_times("fwd", m) − per_call ∝ m
        """
        return self._fits[kind][:, 0].copy()

    def check_micro_batch_size(self, m: int) -> None:
        if m < 1:
            raise BadArgumentError(f"micro-batch size must be at least 1 (got {m})")
        if m > self.max_micro_batch_size:
            raise BadArgumentError(
                f"micro-batch size {m} is beyond what the profile supports "
                f"(at most {self.max_micro_batch_size}: {self.micro_batch_limit_reason}); "
                + (
                    ""
                    if self.micro_batch_limit_is_memory
                    else "profile larger --micro-batch-sizes or "
                )
                + "use more micro-batches"
            )

    def phase_costs(self, m: int, frozen_layers: int, cached: bool) -> PhaseCosts:
        return self._phase_costs(m, frozen_layers, cached)

    def _phase_costs_uncached(self, m: int, frozen_layers: int, cached: bool) -> PhaseCosts:
        if not 0 <= frozen_layers <= self.num_layers - 1:
            raise BadArgumentError(
                f"frozen layers {frozen_layers} outside 0..{self.num_layers - 1} "
                "(the head is never frozen)"
            )
        cached = cached and frozen_layers > 0
        active = np.arange(self.num_layers) >= frozen_layers
        fwd = np.where(active, self.layer_times("fwd", m), self.layer_times("nograd", m))
        bwd = np.where(active, self.layer_times("bwd", m), 0.0)
        if cached:
            fwd[:frozen_layers] = 0.0
            cache_bytes = self.out_bytes_per_sample[frozen_layers - 1] * m
            fwd[frozen_layers] += cache_bytes / self.cluster.host_to_device_bandwidth_bytes_per_s
        state = 1.0 + self.params.adam_state_per_param_byte  # gradient + moments
        static = self.param_bytes * (1.0 + np.where(active, state, 0.0))
        # A cached prefix keeps its weights resident: stage 0 computes the rows the cache
        # does not hold yet (the phase's first epoch fills it as it trains).
        saved = np.where(active, self.saved_per_sample * m + self.saved_fixed, 0.0)
        return PhaseCosts(
            micro_batch_size=m,
            frozen_layers=frozen_layers,
            cached=cached,
            fwd_s=fwd,
            bwd_s=bwd,
            active=active,
            boundary_bytes=self.out_bytes_per_sample * m,
            static_bytes=static,
            saved_bytes_per_micro_batch=saved,
            grad_bytes=np.where(active, self.param_bytes, 0.0),
        )

    # ------------------------------------------------------------------ links

    def node_of(self, rank: int) -> int:
        return rank // self.cluster.devices_per_node

    def node_map(self, rank_map: Sequence[Sequence[int]]) -> np.ndarray:
        """[replica, stage] → node."""
        return np.asarray(rank_map, dtype=np.int64) // self.cluster.devices_per_node

    def boundary_crosses_nodes(self, rank_map: Sequence[Sequence[int]]) -> list[bool]:
        """For s in 0..S−2: does any replica's stage s → s+1 transfer leave its node?"""
        return [bool(x) for x in all_boundaries(self.node_map(rank_map))[0]]

    def p2p_link(self, crosses_nodes: bool) -> Link:
        """The one pricing of a stage-to-stage transfer: the inter-node link, else the
        in-node point-to-point link, each as calibrated (`in_node_links`, `inter_node_links`;
        the cluster's without calibration)."""
        return self.inter_p2p_link if crosses_nodes else self.intra_p2p_link

    def boundary_shares(self, rank_map: Sequence[Sequence[int]]) -> list[int]:
        """For s in 0..S−2: how many of the replicas' simultaneous s → s+1 transfers share one
        node's network link (the most on any node, out or in; 1 when none crosses)."""
        return [int(x) for x in all_boundaries(self.node_map(rank_map))[1]]

    def _prefix_boundaries(
        self, rank_map: Sequence[Sequence[int]]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """`prefix_boundaries` of the map's nodes."""
        return prefix_boundaries(self.node_map(rank_map))

    def boundary_links(self, rank_map: Sequence[Sequence[int]]) -> list[Link]:
        """Link between stage s and s+1 as its transfer sees it: inter-node if any replica
        crosses (its bandwidth divided among the replicas' transfers sharing a node's link),
        else the intra-node point-to-point link; where some replicas cross and others stay in
        a node, the slower of the two per term (`slowest_link`): the step waits for the
        slowest replica. Found by the all-placements reference (issue 12): a boundary with
        one replica's transfer on a 1 MB/s in-node link and another's on the network was
        priced at the network's speed alone."""
        links = []
        crossing, shares, stays = all_boundaries(self.node_map(rank_map))
        for crosses, share, mixed in zip(crossing, shares, crossing & stays, strict=True):
            link = self.p2p_link(bool(crosses))
            if share > 1:
                shared = link.bandwidth_bytes_per_s / int(share)
                # Derived, not input: unchecked, as `_with_extra`'s (a 1 B/s link shared by two
                # was 0.5 B/s, below the format's bound: a traceback, the fifty-sixth round).
                link = Link.model_construct(latency_s=link.latency_s, bandwidth_bytes_per_s=shared)
            if mixed:
                link = slowest_link(link, self.intra_p2p_link)
            links.append(link)
        return links

    def boundary_rates(
        self, rank_map: Sequence[Sequence[int]], replicas: Sequence[int]
    ) -> tuple[np.ndarray, np.ndarray]:
        """`boundary_links` of the map's first D replicas, for each D in `replicas`, as
        [len(replicas), S−1] arrays of latency and seconds per byte (the same arithmetic).
        `rank_array`'s maps for fewer replicas are its first rows, so one map of the most
        replicas prices them all without making a Link per boundary (another map: its own D
        only)."""
        if list(replicas) == [len(rank_map)]:  # the map's own count: its last rows alone
            crossing, shares, stays = (row[None] for row in all_boundaries(self.node_map(rank_map)))
        else:
            crossing, shares, stays = (
                rows[np.asarray(replicas) - 1] for rows in self._prefix_boundaries(rank_map)
            )
        inter, intra = self.inter_p2p_link, self.intra_p2p_link
        latency = np.where(crossing, inter.latency_s, intra.latency_s)
        bandwidth = np.where(crossing, inter.bandwidth_bytes_per_s, intra.bandwidth_bytes_per_s)
        bandwidth = np.where(shares > 1, bandwidth / shares, bandwidth)
        mixed = crossing & stays  # the slower of both per term, as `boundary_links`
        latency = np.where(mixed, np.maximum(latency, intra.latency_s), latency)
        bandwidth = np.where(mixed, np.minimum(bandwidth, intra.bandwidth_bytes_per_s), bandwidth)
        return latency, 1 / bandwidth

    def _boundary_rate_table(
        self, maps: tuple[tuple[int, int, str], ...]
    ) -> tuple[dict[tuple[int, int, str], int], np.ndarray, np.ndarray]:
        """Per (S, D, placement) rank map of `maps` (the row; `placement_array`), each
        boundary link's latency and time per byte ([row, boundary s], zeros past the map's
        last stage), with the row of each map: `boundary_rates` of every map. The same for
        every phase of a plan, so cached (`boundary_rate_table`)."""
        width = max(S for S, _, _ in maps)
        latency = np.zeros((len(maps), width))
        per_byte = np.zeros((len(maps), width))
        cluster = self.cluster
        G, nodes = cluster.devices_per_node, cluster.nodes
        for S in sorted({S for S, _, p in maps if p == PACKED}):
            # One "packed" map of the most replicas prices every D: its maps for fewer
            # replicas are its first rows.
            known = self._packed_rates.setdefault(S, {})
            replicas = sorted({D for s, D, p in maps if s == S and p == PACKED} - known.keys())
            if replicas:
                ranks = rank_array(S, max(replicas), G, nodes)
                lat, rate = self.boundary_rates(ranks, replicas)
                known.update(zip(replicas, zip(lat, rate, strict=True), strict=True))
        for row, (S, D, placement) in enumerate(maps):
            if placement == PACKED:
                lat, rate = self._packed_rates[S][D]
            elif (S, D, placement) not in self._map_rates:  # no prefix property: each alone
                ranks = placement_array(placement, S, D, G, nodes)
                lat, rate = (r[0] for r in self.boundary_rates(ranks, [D]))
                self._map_rates[S, D, placement] = (lat, rate)
            else:
                lat, rate = self._map_rates[S, D, placement]
            latency[row, : S - 1] = lat
            per_byte[row, : S - 1] = rate
        for array in (latency, per_byte):
            array.flags.writeable = False  # shared by every phase
        return {key: row for row, key in enumerate(maps)}, latency, per_byte

    def allreduce_nodes(self, rank_map: Sequence[Sequence[int]]) -> list[tuple[int, ...]]:
        """Per stage: the nodes whose network link its data-parallel ring crosses (all the
        nodes it spans, when more than one), else ()."""
        result = []
        for column in self.node_map(rank_map).T:
            nodes = np.unique(column)
            result.append(tuple(int(n) for n in nodes) if len(nodes) > 1 else ())
        return result

    def allreduce_links(self, rank_map: Sequence[Sequence[int]]) -> list[Link]:
        """Per stage, the link its data-parallel ring is priced on, each as calibrated (the
        cluster's without calibration): in one node the in-node all-reduce link; across
        nodes the inter-node one, or, where two or more of its ranks share a node (the ring
        then has in-node hops too), the slower of the two per term (`slowest_link`): each of
        the ring's steps waits for its slowest hop. Found by the thirty-sixth round: a 1×4
        ring over two nodes of two devices was priced on a 1000 TB/s network alone, its
        1 MB/s in-node hops left out (PCIe-only nodes with a fast NIC are real)."""
        links = []
        for column in self.node_map(rank_map).T:
            _, counts = np.unique(column, return_counts=True)
            if len(counts) == 1:
                links.append(self.intra_allreduce_link)
            elif counts.max() > 1:
                links.append(slowest_link(self.inter_allreduce_link, self.intra_allreduce_link))
            else:
                links.append(self.inter_allreduce_link)
        return links

    @staticmethod
    def transfer_s(nbytes: float, link: Link) -> float:
        return link.latency_s + nbytes / link.bandwidth_bytes_per_s

    @staticmethod
    def allreduce_latency_s(replicas: int, link: Link) -> float:
        """The ring's 2(D−1) latency terms (the part of an all-reduce that moves no bytes)."""
        return 2 * (replicas - 1) * link.latency_s if replicas > 1 else 0.0

    @staticmethod
    def allreduce_s(nbytes: float, replicas: int, link: Link) -> float:
        if replicas <= 1 or nbytes <= 0:
            return 0.0
        steps = 2 * (replicas - 1)
        return steps * link.latency_s + steps / replicas * nbytes / link.bandwidth_bytes_per_s

    def optimizer_s(self, active_param_bytes: float) -> float:
        return active_param_bytes * self.optimizer_s_per_byte

    # ------------------------------------------------------------------ stages

    def stage_memory_bytes(
        self, costs: PhaseCosts, first: int, stop: int, in_flight_micro_batches: int
    ) -> int:
        static = float(costs.static_bytes[first:stop].sum())
        saved = float(costs.saved_bytes_per_micro_batch[first:stop].sum())
        return int(np.ceil(static + saved * in_flight_micro_batches + self.reserve_bytes))

    def _rank_map_links(
        self, rank_map: tuple[tuple[int, ...], ...]
    ) -> tuple[list[Link], list[Link], list[tuple[int, ...]]]:
        """Per rank map (the search simulates many layouts of one): the boundary links, the
        all-reduce links and the nodes each all-reduce crosses."""
        return self._links.get(
            rank_map,
            lambda: (
                self.boundary_links(rank_map),
                self.allreduce_links(rank_map),
                self.allreduce_nodes(rank_map),
            ),
            lambda _: 2 * rank_cells(rank_map),  # the map and its rings' nodes
        )

    def evaluate(
        self, layout: Layout, record: bool = True, shown_stages: int | None = None
    ) -> Evaluation:
        """Per-stage costs, memory and the simulated step of `layout` (each stage's reported
        all-reduce as long as the shared node links made it, §4.5); the timeline's events of
        stages 0..shown_stages−1 only when given (`simulate.timeline_of`)."""
        works, reports = self.stages(layout)
        result = simulate_step(works, layout.micro_batches, layout.schedule)
        overhead = self.step_overhead_s(layout)
        if overhead:
            result = replace(result, step_s=result.step_s + overhead)
        timeline = timeline_of(
            works, layout.micro_batches, layout.schedule, result, record, shown_stages
        )
        reports = [
            replace(report, allreduce_s=result.allreduce_s(s)) if work.has_backward else report
            for s, (work, report) in enumerate(zip(works, reports, strict=True))
        ]
        fits = max(r.memory_bytes for r in reports) <= self.cluster.device_memory_bytes
        return Evaluation(layout, reports, timeline, fits)

    def step_overhead_s(self, layout: Layout) -> float:
        """Calibrated time outside the schedule: batch input per replica, fixed per-step cost."""
        return self.overhead_s(layout.micro_batches * layout.micro_batch_size)

    def overhead_s(self, samples_per_replica: int) -> float:
        c = self.calibration
        return 0.0 if c is None else c.overhead_s(samples_per_replica)

    def stages(self, layout: Layout) -> tuple[list[StageWork], list[StageReport]]:
        """Per-stage work (for the simulation: transfers timed into the receiving op,
        `simulate.received_in_op`) and report (time and memory, each transfer apart) of
        `layout`; the all-reduce is priced alone on its links here (the simulation shares
        them)."""
        S, D, M = layout.num_stages, layout.replicas, layout.micro_batches
        layout.check_placement(self.num_layers, self.cluster.num_devices)
        m = layout.micro_batch_size
        costs = self.phase_costs(m, layout.frozen_layers, layout.cached)
        links, ar_links, ar_nodes = self._rank_map_links(layout.rank_map)
        b = layout.boundaries
        fed = layout.forward_only_stages
        works, reports = [], []
        for s in range(S):
            first, stop = b[s], b[s + 1]
            fwd = float(costs.fwd_s[first:stop].sum()) + self.micro_batch_overhead_s
            bwd = float(costs.bwd_s[first:stop].sum())
            has_backward = bool(costs.active[first:stop].any())
            send_fwd = (
                self.transfer_s(costs.boundary_bytes[stop - 1], links[s]) if s < S - 1 else 0.0
            )
            # A gradient goes back only if the previous stage has layers to train.
            send_bwd = (
                self.transfer_s(costs.boundary_bytes[first - 1], links[s - 1])
                if s > 0 and costs.active[first - 1]
                else 0.0
            )
            grad_bytes = float(costs.grad_bytes[first:stop].sum())
            allreduce = self.allreduce_s(grad_bytes, D, ar_links[s])
            # A ring slowed by an in-node hop leaves the node links it crosses room to share.
            headroom = self.inter_allreduce_link.bandwidth_bytes_per_s / (
                ar_links[s].bandwidth_bytes_per_s
            )
            latency = self.allreduce_latency_s(D, ar_links[s]) if allreduce > 0 else 0.0
            optimizer = self.optimizer_s(grad_bytes)
            memory = self.stage_memory_bytes(
                costs, first, stop, in_flight(layout.schedule, S, s, M)
            )
            if 1 <= s <= fed:
                # A stage fed by a forward-only one posts the step's M receives at once
                # (`executor.feed.Inbox`); the first that trains also holds the placeholder
                # batch its schedule splits.
                buffers = M * float(costs.boundary_bytes[first - 1])
                memory += int(np.ceil(buffers * (2 if s == fed else 1)))
            works.append(
                StageWork(
                    fwd,
                    bwd,
                    has_backward,
                    send_fwd,
                    send_bwd,
                    allreduce,
                    optimizer,
                    allreduce_latency_s=latency,
                    allreduce_nodes=ar_nodes[s],
                    allreduce_headroom=headroom if ar_nodes[s] else 1.0,
                )
            )
            reports.append(
                StageReport(first, stop, fwd, bwd, send_fwd, send_bwd, allreduce, optimizer, memory)
            )
        # The reports keep each transfer apart; the simulation times it into the op that
        # receives it, as the executor's schedules run it.
        return received_in_op(works), reports

    # ------------------------------------------------------------------ transitions

    def transition_s(self, old: Layout, new: Layout) -> float:
        """Bytes that change owner / bandwidth + group rebuild time (0 when the placement
        stays): `model.transition_s(old, new) == model.move_s(old, new) + model.group_rebuild_s`.
        """
        if same_placement(old, new):
            return 0.0
        return self.move_s(old, new) + self.group_rebuild_s

    def move_s(self, old: Layout, new: Layout) -> float:
        """The byte-moving part of a transition: `model.move_s(old, new)`.

        Every rank that must hold a layer it did not hold receives its weights, plus the AdamW
        moments when the layer stays trainable (gradients are recomputed, not moved). Ranks
        receive in parallel; the slowest receiver over the slowest link (per term, of the
        links the cluster has: `slowest_link`) bounds the time.
        """
        # What the move depends on: a plan prices the same moves at every phase of its
        # schedule-wide choice (`plan._over_the_schedule`).
        old_key, new_key = self.map_key(old), self.map_key(new)
        key = (old.boundaries, old_key, new.boundaries, new_key, new.frozen_layers)
        # A key that holds rank maps is bounded by their cells (KEPT_RANK_CELLS), any by the
        # count (MAX_KEPT_MOVES): least recently used first out.
        cells = sum(rank_cells(k) for k in (old_key, new_key) if k[:1] != ("map",))
        share = max(cells, KEPT_RANK_CELLS // MAX_KEPT_MOVES)
        return self._moves.get(key, lambda: self._move_s(old, new), lambda _: share)

    def held_by(self, layout: Layout) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """`held_ranges(layout)`, its placement checked first (layouts read from run records,
        calibrate's, reach here unpriced: one line, not an index error, where they do not fit
        this model and cluster), kept: a plan prices each candidate's moves from and to many
        others (the eightieth round: on 2,048 ranks, checking and reading them again took
        most of its time)."""

        def made() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
            layout.check_placement(self.num_layers, self.cluster.num_devices)
            return held_ranges(layout)

        key = (layout.boundaries, self.map_key(layout), layout.frozen_layers)
        return self._held.get(key, made, lambda held: len(held[0]))

    def map_key(self, layout: Layout) -> Hashable:
        """What keys `layout`'s rank map in the caches of moves: the map, or, from
        IDENTITY_KEY_CELLS cells, ("map", n) for the map object, n never given to another
        (kept through a weak reference to the layout: nothing is held alive, and the map's id
        is its own while the layout lives)."""
        rank_map = layout.rank_map
        if rank_cells(rank_map) < IDENTITY_KEY_CELLS:
            return rank_map
        ident = id(rank_map)
        held = self._map_keys.get(ident)
        owner = held[0]() if held is not None else None
        if held is not None and owner is not None and owner.rank_map is rank_map:
            return held[1]
        keys = self._map_keys

        def gone(ref: weakref.ref, ident: int = ident) -> None:
            if keys.get(ident, (None,))[0] is ref:
                del keys[ident]

        token = ("map", next(self._map_count))
        keys[ident] = (weakref.ref(layout, gone), token)
        return token

    def _moved_prefix(self, frozen_layers: int) -> np.ndarray:
        """What a rank that newly holds layers 0..i−1 receives, in bytes, for i = 0..L (the
        cumulative sum): each layer's weights, plus the AdamW moments of those past the
        freeze point (`move_s`)."""
        moments = self.params.adam_state_per_param_byte
        per_copy = self.param_bytes * (
            1.0 + np.where(np.arange(self.num_layers) >= frozen_layers, moments, 0.0)
        )
        return np.concatenate([[0.0], np.cumsum(per_copy)])

    def _move_s(self, old: Layout, new: Layout) -> float:
        held = self.held_by(old)
        ranks, new_first, new_stop = self.held_by(new)
        prefix = self.moved_prefix(new.frozen_layers)
        # A rank holds one contiguous range in each layout: it receives the new one minus
        # what it already had (a rank the new layout does not run on receives nothing).
        old_first, old_stop = held_at(held, ranks)
        kept_first = np.maximum(new_first, old_first)
        kept_stop = np.maximum(np.minimum(new_stop, old_stop), kept_first)
        received = (prefix[new_stop] - prefix[new_first]) - (prefix[kept_stop] - prefix[kept_first])
        busiest = float(received.max())
        cluster = self.cluster
        link = self.p2p_link(crosses_nodes=cluster.nodes > 1)
        if cluster.nodes > 1 and cluster.devices_per_node > 1:
            # Moves run inside nodes too, whose link may be the slower one (PCIe-only GPUs
            # with a fast NIC): the network alone priced them at its speed.
            link = slowest_link(self.inter_p2p_link, self.intra_p2p_link)
        return self.transfer_s(busiest, link) if busiest > 0 else 0.0


def group_rebuild_s_of(profile: Profile) -> float:
    """What a layout change costs besides moving bytes: `group_rebuild_s_of(profile)` → the
    value calibration fitted from measured transitions, else the one `pipeplan profile --nproc`
    measured, else DEFAULT_GROUP_REBUILD_S (profiles from before either existed)."""
    fitted = profile.calibration.group_rebuild_s if profile.calibration else None
    if fitted is not None:
        return fitted
    measured = profile.comm.group_rebuild_s if profile.comm else None
    return measured if measured is not None else DEFAULT_GROUP_REBUILD_S


def placement_of(layout: Layout) -> Layout:
    """`layout` but for its freeze point and cache (set to 0 and uncached): what two layouts
    share when a phase change keeps the process groups and every rank keeps its layers."""
    return layout.model_copy(update={"frozen_layers": 0, "cached": False})


# What `placement_of` keeps: every field of a layout but its freeze point and cache.
PLACEMENT_FIELDS = tuple(
    name for name in Layout.model_fields if name not in ("frozen_layers", "cached")
)


def same_placement(old: Layout, new: Layout) -> bool:
    """Equal but for the freeze point and the cache: the next phase keeps the process groups,
    and every rank keeps its layers (`placement_of(old) == placement_of(new)`, without the
    copies: a plan asks this of some 10^5 pairs)."""
    return all(getattr(old, name) == getattr(new, name) for name in PLACEMENT_FIELDS)


def held_ranges(layout: Layout) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The ranks `layout` runs on, sorted, and the [first, stop) layers each holds: arrays
    of its cells, not of the cluster's ranks (on 100,000 devices, a move priced per rank of
    the cluster took most of a plan's time: the seventy-ninth round).

        ranks, first, stop = held_ranges(layout)
    """
    ranks = np.asarray(layout.rank_map, dtype=np.int64).reshape(-1)
    b = np.asarray(layout.boundaries)
    cells = (layout.replicas, layout.num_stages)
    order = np.argsort(ranks)
    first = np.broadcast_to(b[:-1], cells).reshape(-1)[order]
    stop = np.broadcast_to(b[1:], cells).reshape(-1)[order]
    return ranks[order], first, stop


def held_at(
    held: tuple[np.ndarray, np.ndarray, np.ndarray], ranks: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The [first, stop) layers each of `ranks` holds in the layout `held` describes
    (`held_ranges`), an empty range where it holds none: `first, stop = held_at(h, ranks)`."""
    held_ranks, held_first, held_stop = held
    i = np.minimum(np.searchsorted(held_ranks, ranks), len(held_ranks) - 1)
    holds = held_ranks[i] == ranks
    return np.where(holds, held_first[i], 0), np.where(holds, held_stop[i], 0)


# The rank maps the planner searches for each (S, D) (docs/architecture.md §4.10), in this
# order; they differ in which links the stage-to-stage transfers and the all-reduce rings use:
# - "packed": `rank_array`, whole pipelines packed into nodes, node 0 first (transfers on
#   the in-node link, rings across nodes once D exceeds a node's pipelines);
# - "rings": stage-major, whole rings packed into nodes (`rank_array` with the roles of
#   stages and replicas swapped): a stage's D replicas share a node when D ≤ devices per
#   node, and the pipeline crosses nodes (gradients on the in-node link, activations on the
#   network);
# - "spread": pipelines over the devices taken in node-interleaved order (node 0 device 0,
#   node 1 device 0, …, node 0 device 1, …): a plan using fewer devices than the cluster
#   spreads its stages and replicas over the nodes' links (a pipeline across nodes, a ring
#   of one rank per node), which wins when the in-node link is the slower one;
# - "spread-rings": stage-major over that order: a stage's replicas on different nodes, so
#   with D ≤ nodes each pipeline stays inside its own node and the rings cross the network
#   one rank per node (no in-node hop, no node link shared by two replicas);
# - "consecutive": replica d's stages on ranks d·S..d·S+S−1, whole pipelines not kept in a
#   node: where S does not divide a node's devices, a pipeline straddles two nodes, so only
#   some replicas' transfers and some stages' rings cross (found by comparing the family with
#   every map on 2 × 3 devices: 2×2 as [[0, 1], [2, 3]] was up to 3.3 % faster).
# Each row is sorted: the executor runs a replica's stages on increasing ranks
# (`check_rank_order`), and ranks in a node are interchangeable. Members that put every
# (replica, stage) on the same node as an earlier member are dropped (`placement_family`):
# on one node there is one map.
PACKED = "packed"
PLACEMENTS = (PACKED, "rings", "spread", "spread-rings", "consecutive")
# What `placement_family` adds to them, each kept only where no earlier member is priced the
# same (`_priced_alike`): where at most EXACT_FAMILY_MAPS node assignments of (S, D) fit the
# cluster (multisets of D non-decreasing node rows that no node holds more than G cells of,
# `fitting_assignments_at_most`; the sixty-fifth round: counted before the devices' limit,
# 7×2 on 2 × 7 devices had 36, of which 4 fit, and missed a layout 5.12 % faster), every one
# of them (MAP + its index in `every_rank_map`): the family is then exact; else,
# on up to MIRRORED_MAX_NODES nodes, the mirror of each member (MIRRORED + its name,
# `mirrored`): the stage order and the node order reversed, so a pipeline that crosses nodes
# after node 0 fills crosses as far from its end, e.g. [[0, 2, 3]] on 2 × 2 from "packed"'s
# [[0, 1, 2]] (the sixty-second round: 10.5 % faster where the first boundary carries the
# least) and [[0, 3], [4, 5]] on 2 × 3 from "consecutive". The two bounds are measured
# (docs/architecture.md §4.10): every (S, D) of up to 2 × 5 devices is exact (counting the
# assignments that fit); 16 would make more of 2 × 6..8's so but costs bert-large's plan on
# 2 × 8 +20 % CPU and its work-limited searches their pinned-search parity; mirrors cost
# +10 % on 4 × 8 and +23 % on 64 × 8.
EXACT_FAMILY_MAPS = 8
# On a cluster of at most SMALL_CLUSTER_DEVICES devices every (S, D) has at most
# SMALL_CLUSTER_FAMILY_MAPS assignments that fit (64: 2×2 and 2×3 on 4 × 2) and a search is
# milliseconds, so every one is searched: the family is exact there. The sixty-fifth round: on
# 3 × 2 devices, 2×2 has 9 to 16 and the bound of 8 missed a layout 29 % faster (bert-large's
# searches on 4 × 2: 0.06 → 0.09 s of CPU).
SMALL_CLUSTER_DEVICES = 8
SMALL_CLUSTER_FAMILY_MAPS = 64
MIRRORED_MAX_NODES = 4
MIRRORED = "mirrored "
MAP = "map "


def rank_map(
    num_stages: int,
    replicas: int,
    devices_per_node: int,
    nodes: int,
    placement: str = PACKED,
) -> list[list[int]]:
    """[replica][stage] → global rank (`placement_array` as lists; `rank_array` by default)."""
    return placement_array(placement, num_stages, replicas, devices_per_node, nodes).tolist()


def placement_array(
    placement: str, num_stages: int, replicas: int, devices_per_node: int, nodes: int
) -> np.ndarray:
    """[replica, stage] → global rank of one member of PLACEMENTS (arrays, as `rank_array`:
    a cluster may hold a million devices).

    >>> placement_array("spread", 1, 2, 2, 2).tolist()  # one replica on each node
    [[0], [2]]
    >>> placement_array("rings", 2, 2, 2, 2).tolist()  # each stage's ring inside a node
    [[0, 2], [1, 3]]"""
    S, D, G = num_stages, replicas, devices_per_node
    if placement == PACKED:
        return rank_array(S, D, G, nodes)
    if placement.startswith(MIRRORED):
        return mirrored(placement_array(placement[len(MIRRORED) :], S, D, G, nodes), G, nodes)
    if placement.startswith(MAP):
        return np.array(_every_rank_map(S, D, G, nodes)[int(placement[len(MAP) :])])
    if placement == "rings":
        ranks = rank_array(D, S, G, nodes).T
    elif placement == "consecutive":
        return np.arange(S * D, dtype=np.int64).reshape(D, S)
    elif placement in ("spread", "spread-rings"):
        cells = np.arange(S * D, dtype=np.int64)
        # Position i of the node-interleaved order is device i // nodes of node i % nodes.
        interleaved = (cells % nodes) * G + cells // nodes
        spread = placement == "spread"  # pipelines over the order, else rings
        ranks = interleaved.reshape(D, S) if spread else interleaved.reshape(S, D).T
    else:
        raise ValueError(f"unknown placement {placement!r} (one of {', '.join(PLACEMENTS)})")
    return np.sort(ranks, axis=1)


def placement_index(placement: str) -> int:
    """A placement's number (the solver's shape columns): its index in PLACEMENTS, then
    their mirrors, then the maps of `every_rank_map` (`placement_name` inverts it).

    >>> placement_index("mirrored rings"), placement_index("map 3")
    (6, 13)"""
    n = len(PLACEMENTS)
    if placement.startswith(MIRRORED):
        return n + PLACEMENTS.index(placement[len(MIRRORED) :])
    if placement.startswith(MAP):
        return 2 * n + int(placement[len(MAP) :])
    return PLACEMENTS.index(placement)


def placement_name(index: int) -> str:
    """The placement numbered `index` (`placement_index`)."""
    n = len(PLACEMENTS)
    if index < n:
        return PLACEMENTS[index]
    return MIRRORED + PLACEMENTS[index - n] if index < 2 * n else f"{MAP}{index - 2 * n}"


def mirrored(ranks: np.ndarray, devices_per_node: int, nodes: int) -> np.ndarray:
    """The map with the stage order and the node order reversed (stage s of a replica on
    node N−1−n where its stage S−1−s was on node n; rows stay non-decreasing), each node's
    cells on its lowest devices in row order.

    >>> mirrored(np.array([[0, 1, 2]]), 2, 2).tolist()  # the crossing moves to boundary 0
    [[0, 2, 3]]"""
    node = nodes - 1 - (ranks // devices_per_node)[:, ::-1]
    flat = node.reshape(-1)
    order = np.argsort(flat, kind="stable")
    ordered = flat[order]
    starts = np.ones(ordered.size, dtype=bool)
    starts[1:] = ordered[1:] != ordered[:-1]
    cells = np.arange(ordered.size)
    position = cells - np.maximum.accumulate(np.where(starts, cells, 0))
    result = np.empty_like(flat)
    result[order] = ordered * devices_per_node + position
    return result.reshape(node.shape)


def _priced_alike(ranks: np.ndarray, devices_per_node: int) -> tuple:
    """What the cost model reads from a map's nodes (node names aside, which no price
    depends on): per boundary whether some transfer crosses nodes, the most sharing a
    node's link and whether some stays in a node (`boundary_links`); per stage whether its
    ring spans nodes and whether two of its ranks share one (`allreduce_links`); per node
    the stages whose ring crosses its link (`allreduce_nodes`, as the simulator's shared
    links read them). Two maps alike in these are priced the same in every layout."""
    nodes = ranks // devices_per_node
    crosses, shares, stays = all_boundaries(nodes)
    ordered = np.sort(nodes, axis=0)
    spans = ordered[0] != ordered[-1]
    shared = (ordered[1:] == ordered[:-1]).any(axis=0)
    S = nodes.shape[1]
    keys = np.unique((nodes * S + np.arange(S))[:, spans])
    node, stage = keys // S, keys % S
    groups = np.split(stage, np.flatnonzero(node[1:] != node[:-1]) + 1) if keys.size else []
    rings = tuple(sorted(tuple(group.tolist()) for group in groups))
    return (*(x.tobytes() for x in (crosses, shares, stays, spans, shared)), rings)


def alike_key(layout: Layout, devices_per_node: int) -> tuple:
    """`layout` as the planner tells layouts apart: its fields but the rank map, and what the
    cost model reads from the map's nodes (`_priced_alike`, node names aside). Layouts of one
    key are priced the same in every step, so the planner lists one of them as a phase's
    runner-up (`solver`; `plan.check_plan_prices` holds a plan to it).

        alike_key(on_node_0, 2) == alike_key(on_node_1, 2)   # 1x2 on [[0], [1]] and [[2], [3]]
    """
    ranks = np.array(layout.rank_map)
    return layout.model_copy(update={"rank_map": ()}), _priced_alike(ranks, devices_per_node)


def _multisets_at_most(kinds: int, chosen: int, most: int) -> bool:
    """Whether C(kinds + chosen − 1, chosen) ≤ `most`, without computing more of it."""
    count = 1
    for i in range(1, chosen + 1):
        count = count * (kinds + i - 1) // i
        if count > most:
            return False
    return True


@lru_cache(maxsize=256)
def _every_rank_map(S: int, D: int, G: int, nodes: int) -> tuple[tuple[tuple[int, ...], ...], ...]:
    """`every_rank_map`, kept (small (S, D) only: `placement_family`)."""
    return tuple(every_rank_map(S, D, G, nodes))


def exact_family_maps(devices_per_node: int, nodes: int) -> int:
    """How many fitting node assignments of an (S, D) `placement_family` takes all of
    (EXACT_FAMILY_MAPS, or SMALL_CLUSTER_FAMILY_MAPS on a small cluster).

    >>> exact_family_maps(2, 3), exact_family_maps(8, 2)
    (64, 8)"""
    small = devices_per_node * nodes <= SMALL_CLUSTER_DEVICES
    return SMALL_CLUSTER_FAMILY_MAPS if small else EXACT_FAMILY_MAPS


def placement_family(
    num_stages: int, replicas: int, devices_per_node: int, nodes: int
) -> list[tuple[str, np.ndarray]]:
    """The members of PLACEMENTS for (S, D), in order, without those whose node assignment
    (the node of every (replica, stage) cell, replicas in any order) an earlier member
    already has: a step's time depends on the nodes only, and replicas are interchangeable,
    so such a map would be priced the same; then every node assignment where few fit the
    nodes' devices (`fitting_assignments_at_most`), else (on a few nodes) each member's
    mirror, those priced unlike every member (EXACT_FAMILY_MAPS). On one node, or one device
    a node, only "packed".

    >>> [name for name, _ in placement_family(3, 1, 2, 2)]  # [[0, 1, 2]], [[0, 2, 3]]
    ['packed', 'map 1']"""
    family = [(PACKED, rank_array(num_stages, replicas, devices_per_node, nodes))]
    if nodes == 1 or devices_per_node == 1:
        # One node: one assignment. One device a node: every map puts each cell on a node of
        # its own, the same but for the nodes' names (which no price depends on).
        return family

    # Rows put in an order that depends on their content only (by a hash of each row: a
    # lexicographic sort of thousands of long rows costs more): equal multisets of rows give
    # equal arrays; a hash collision can only keep a duplicate, never drop a distinct map.
    weights = np.random.default_rng(0).integers(1, 1 << 62, num_stages)

    def assignment(ranks: np.ndarray) -> np.ndarray:
        node = ranks // devices_per_node
        return node[np.argsort(node @ weights, kind="stable")]

    seen = [assignment(family[0][1])]
    for placement in PLACEMENTS[1:]:
        ranks = placement_array(placement, num_stages, replicas, devices_per_node, nodes)
        assigned = assignment(ranks)
        if not any(np.array_equal(assigned, other) for other in seen):
            family.append((placement, ranks))
            seen.append(assigned)
    # The maps PLACEMENTS miss (EXACT_FAMILY_MAPS): every node assignment where few fit the
    # devices, else the members' mirrors; each only where no member is priced alike.
    S, D, G = num_stages, replicas, devices_per_node
    if fitting_assignments_at_most(S, D, G, nodes, exact_family_maps(G, nodes)):
        extra = [
            (f"{MAP}{i}", np.array(ranks))
            for i, ranks in enumerate(_every_rank_map(S, D, G, nodes))
        ]
    elif nodes <= MIRRORED_MAX_NODES:
        extra = [(MIRRORED + placement, mirrored(ranks, G, nodes)) for placement, ranks in family]
    else:
        return family
    alike = {_priced_alike(ranks, G) for _, ranks in family}
    for placement, ranks in extra:
        priced = _priced_alike(ranks, G)
        if priced not in alike:
            family.append((placement, ranks))
            alike.add(priced)
    return family


def prefix_boundaries(nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`CostModel.boundary_crosses_nodes` and `boundary_shares` of every prefix of a map's
    replicas (`nodes`: [replica, stage] → node), and whether some replica's transfer stays in
    its node: row d holds those of replicas 0..d ([D, S−1] each). Row by row, a transfer's
    share on its node's link is its rank among the crossing transfers out of (or into) that
    node so far, and a prefix's share is the running maximum."""
    D = nodes.shape[0]
    crossing = nodes[:, :-1] != nodes[:, 1:]
    crosses = np.logical_or.accumulate(crossing, axis=0)
    stays = np.logical_or.accumulate(~crossing, axis=0)
    shares = np.ones(crossing.shape, dtype=np.int64)
    if not crossing.any():
        return crosses, shares, stays
    rows = np.arange(D)[:, None]
    for side in (nodes[:, :-1], nodes[:, 1:]):
        node = np.where(crossing, side, -1)  # -1: this transfer stays in its node
        order = np.argsort(node, axis=0, kind="stable")
        ordered = np.take_along_axis(node, order, axis=0)
        starts = np.ones(ordered.shape, dtype=bool)
        starts[1:] = ordered[1:] != ordered[:-1]
        first = np.maximum.accumulate(np.where(starts, rows, 0), axis=0)
        count = np.empty(node.shape, dtype=np.int64)
        np.put_along_axis(count, order, rows - first + 1, axis=0)
        count[~crossing] = 0
        shares = np.maximum(shares, np.maximum.accumulate(count, axis=0))
    return crosses, shares, stays


def counted_keys(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`np.unique(keys, return_counts=True)` of non-negative integers: by counting where the
    keys span little more than their number (a sort of a million (node, stage) keys took a
    sixth of a plan on 131,072 × 8 devices), else by sorting.

    >>> [a.tolist() for a in counted_keys(np.array([5, 2, 5, 0]))]
    [[0, 2, 5], [1, 1, 2]]"""
    keys = keys.ravel()  # (as np.unique takes them)
    if keys.size and int(keys.max()) < COUNTED_KEYS_SPAN * keys.size + 1024:
        counts = np.bincount(keys)
        found = np.flatnonzero(counts)
        return found, counts[found]
    return np.unique(keys, return_counts=True)


# How far past their number keys may span for `counted_keys` to count them (an array of the
# span, zeroed and scanned once, against a sort).
COUNTED_KEYS_SPAN = 16


def all_boundaries(nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`prefix_boundaries(nodes)`'s last rows (all the replicas), without the rows before:
    per boundary, whether some transfer crosses nodes, the most crossing out of or into one
    node, and whether some stays in its node. A map priced for its own replica count alone
    (every placement but the packed one) spent a quarter of a plan on 131,072 × 8 devices
    in the rows it never read (the eighty-fifth round)."""
    crossing = nodes[:, :-1] != nodes[:, 1:]
    crosses, stays = crossing.any(axis=0), (~crossing).any(axis=0)
    shares = np.ones(crossing.shape[1], dtype=np.int64)
    if not crosses.any():
        return crosses, shares, stays
    width = crossing.shape[1]
    boundary = np.broadcast_to(np.arange(width), crossing.shape)[crossing]
    for side in (nodes[:, :-1], nodes[:, 1:]):
        keys, counts = counted_keys(side[crossing] * width + boundary)
        np.maximum.at(shares, keys % width, counts)
    return crosses, shares, stays


def rank_array(num_stages: int, replicas: int, devices_per_node: int, nodes: int) -> np.ndarray:
    """[replica, stage] → global rank. With S ≤ devices per node, whole pipelines are packed
    into nodes (fast links between stages) and the remaining replicas take leftover devices in
    order; with S larger than a node, each replica's stages take consecutive ranks, so a
    pipeline crosses as few node boundaries as possible. The map for D replicas is the first D
    rows of the map for more, which `CostModel.boundary_links_by_replicas` relies on.

    >>> rank_array(2, 3, 3, 2).tolist()  # nodes of 3 devices: one pipeline each, then leftovers
    [[0, 1], [3, 4], [2, 5]]"""
    S, G = num_stages, devices_per_node
    if S > G:
        return np.arange(replicas * S, dtype=np.int64).reshape(replicas, S)
    per_node = G // S
    # Arrays, not lists: a cluster may hold a million devices, and only the rows used are made.
    packed_nodes = min(nodes, -(-replicas // per_node))
    base = np.arange(packed_nodes, dtype=np.int64)[:, None] * G + np.arange(per_node * S)
    packed = base.reshape(packed_nodes * per_node, S)[:replicas]
    missing = (replicas - len(packed)) * S
    if missing <= 0:
        return packed
    # The devices no whole pipeline took: the last G − per_node·S of each node, in order.
    spare = np.arange(nodes, dtype=np.int64)[:, None] * G + np.arange(per_node * S, G)
    return np.concatenate([packed, spare.reshape(-1)[:missing].reshape(-1, S)])


def every_rank_map(S: int, D: int, G: int, nodes: int) -> list[tuple[tuple[int, ...], ...]]:
    """Every rank map of S·D cells on the cluster the executor runs (each row on increasing
    ranks, so its nodes never decrease), once per node assignment (replicas in any order):
    every multiset of D non-decreasing node rows that no node holds more than G cells of,
    its ranks taken in each node in order. The reference the tests and bench_solver.py hold
    the placement family to (tiny clusters only: the count grows combinatorially)."""
    result = []
    for chosen in _node_assignments(S, D, G, nodes):
        used = [0] * nodes
        ranks = []
        for row in chosen:
            mapped = []
            for node in row:
                mapped.append(node * G + used[node])
                used[node] += 1
            ranks.append(tuple(mapped))
        result.append(tuple(ranks))
    return result


class _OutOfSteps(Exception):
    """`_node_assignments` took more steps than it was allowed."""


def _node_assignments(
    S: int, D: int, G: int, nodes: int, steps: int | None = None
) -> Iterator[tuple[tuple[int, ...], ...]]:
    """The node assignments of `every_rank_map`, in its order: the multisets of D rows (each
    S non-decreasing nodes; rows in lexicographic order, as `itertools.
    combinations_with_replacement` of the rows lists them) that no node holds more than G
    cells of. Only rows that fit the nodes' devices left are tried, and a prefix of rows is
    extended only while the devices left can hold the rest, so the count of those that fit
    costs about as much as listing them (not the multisets before the devices' limit, which
    grow combinatorially). `steps`: _OutOfSteps after that many nodes tried (None: no limit)."""
    left = [G] * nodes
    free = [G * nodes]  # devices left over all nodes
    budget = [math.inf if steps is None else steps]

    def rows(
        lower: tuple[int, ...], i: int, tight: bool, row: list[int]
    ) -> Iterator[tuple[int, ...]]:
        # Row positions i.. (row[:i] chosen), lexicographically from `lower` on while `tight`.
        if i == S:
            yield tuple(row)
            return
        first = row[i - 1] if i else 0
        if tight:
            first = max(first, lower[i])
        need = S - i
        room = sum(left[first:])  # what nodes `first`.. can still hold
        for node in range(first, nodes):
            budget[0] -= 1
            if budget[0] < 0:
                raise _OutOfSteps
            if room < need:
                return
            room -= left[node]
            if not left[node]:
                continue
            left[node] -= 1
            row[i] = node
            yield from rows(lower, i + 1, tight and node == lower[i], row)
            left[node] += 1

    def chosen(d: int, lower: tuple[int, ...], prefix: list) -> Iterator:
        if d == D:
            yield tuple(prefix)
            return
        for r in rows(lower, 0, True, [0] * S):
            # `rows` holds this row's cells out of `left` while it is yielded.
            if free[0] - S >= (D - d - 1) * S:
                free[0] -= S
                prefix.append(r)
                yield from chosen(d + 1, r, prefix)
                prefix.pop()
                free[0] += S

    return chosen(0, (0,) * S, [])


# `fitting_assignments_at_most` counts (S, D)'s node assignments by a search S + D deep.
ASSIGNMENT_DEPTH = 256


@lru_cache(maxsize=4096)
def fitting_assignments_at_most(S: int, D: int, G: int, nodes: int, most: int) -> bool:
    """Whether (S, D) has at most `most` node assignments that fit the cluster (those of
    `every_rank_map`), counted until `most` + 1 are found; False too where the count takes
    more than 64 × (`most` + 1) · (S + D) steps (tight clusters of many nodes, where the
    prefixes that cannot be completed outnumber the assignments) or S + D exceeds
    ASSIGNMENT_DEPTH (the search's depth): "not known to be few"."""
    if _multisets_at_most(nodes, S, most) and _multisets_at_most(
        math.comb(nodes + S - 1, S), D, most
    ):
        return True  # few before the devices' limit: fewer that fit
    if nodes > most and nodes * G > S * D:
        # The devices the nodes leave free (N − S·D > 0 of them) in a vector not all equal
        # (one exists), which has at least `nodes` orders: more than `most` fillings of the
        # nodes, each made by an assignment (the cells listed node by node, cut into rows).
        return False
    if S + D > ASSIGNMENT_DEPTH:
        return False
    found = 0
    try:
        for _ in _node_assignments(S, D, G, nodes, 64 * (most + 1) * (S + D)):
            found += 1
            if found > most:
                return False
    except _OutOfSteps:
        return False
    return True


# --------------------------------------------------------------------------- run records


def check_priced_clusters(
    run_dir: Path, config: RunConfig, records: list, profiles: dict[str, Profile]
) -> None:
    """Each phase of run.jsonl's `records`, in order, priced on a cluster its run builds
    (`check_priced_cluster`), predicting what its layout prices to there
    (`check_priced_prediction`); `profiles`: those that priced them, by name
    (`formats.check_priced_profiles`). A run of a plan prices every phase and every epoch's
    forecast on its copy of the plan's cluster (`formats.read_plan_copy`, read here: gone
    or edited since, it is refused as a resume refuses it), and their links are held to it
    (`check_planned_links`).

        check_priced_clusters(run_dir, config, records, check_priced_profiles(run_dir, ...))
    """
    plan = read_plan_copy(run_dir, config)
    planned = None if plan is None else plan.inputs.cluster
    # Every line of run.jsonl is a record (`formats.read_records`): its line is its place.
    for line, phase in enumerate(records, start=1):
        if not isinstance(phase, PhaseRecord):
            continue
        check_priced_cluster(run_dir, config, phase, profiles[phase.pricing.profile], planned)
        check_priced_prediction(f"{run_dir / 'run.jsonl'}:{line}", phase, profiles, plan)
    if planned is None:
        return  # the forecasts' are held to their phases' (`formats.run.check_one_cluster`)
    for epoch in (r for r in records if isinstance(r, EpochRecord) and r.forecast is not None):
        where = f"{run_dir / 'run.jsonl'}: epoch {epoch.epoch}'s forecast"
        check_planned_links(where, epoch.forecast.pricing.cluster, planned, run_dir / RUN_PLAN)


def check_priced_cluster(
    run_dir: Path,
    config: RunConfig,
    phase: PhaseRecord,
    profile: Profile,
    planned: Cluster | None = None,
) -> None:
    """A phase's pricing.cluster is one its run builds (`pipeplan.cluster.run_cluster`, or
    `planned`, the cluster of the run's copy of its plan, which `executor.planning.check_plan`
    held to the run; its links are the run's: `check_priced_links`, `check_planned_links`):
    the cache budget is run.json's; each rank's memory is run.json's --device-memory when
    given, else at most the profiled device's share among a node's ranks (`rank_memory` never
    gives more; less where the run's host had less, which this host cannot tell); and the
    phase's layout fits it (the planner and a plan keep only layouts that do). Found by the
    fortieth round: a phase's device_memory_bytes edited to 1000000 was priced and calibrated
    from (exit 0). The nodes a run's ranks ran on are not in run.json (torchrun's world):
    `check_one_cluster` holds them to the run's other records.

        check_priced_cluster(run_dir, config, phase, profile)   # profile: the one that priced it
        check_priced_cluster(run_dir, config, phase, profile, plan.inputs.cluster)  # --plan
    """
    cluster, where = phase.pricing.cluster, f"{run_dir / 'run.jsonl'}: phase {phase.phase}"
    budget = config.cache_budget_bytes
    if cluster.cache_budget_bytes != budget:
        raise InputFileError(
            f"{where}: pricing.cluster.cache_budget_bytes {cluster.cache_budget_bytes} is not "
            f"the run's {budget} (run.json's cache_budget_bytes, --cache-budget): the run "
            "prices with its own; the record or run.json was edited"
        )
    if planned is not None:
        check_planned_links(where, cluster, planned, run_dir / RUN_PLAN)
    elif config.plan is None:
        check_priced_links(where, cluster, profile, phase.pricing.profile)
    memory, given = cluster.device_memory_bytes, config.device_memory_bytes
    if config.plan is None and given is not None and memory != given:
        raise InputFileError(
            f"{where}: pricing.cluster.device_memory_bytes {memory} is not the run's {given} "
            "(run.json's device_memory_bytes, --device-memory): the run prices with its own; "
            "the record or run.json was edited"
        )
    per_node, flag = cluster.devices_per_node, "pricing.cluster.devices_per_node"
    try:
        share = profile_device_memory(profile, per_node, flag)
    except PipeplanError:  # less than a byte each: no run priced so
        share = 0
    if given is None and memory > share:
        source = memory_source(profile, per_node, flag) if share else "no byte a rank"
        raise InputFileError(
            f"{where}: pricing.cluster.device_memory_bytes {memory} is more than the run "
            f"gives a rank: {share} bytes ({source}, of {phase.pricing.profile})"
        )
    if phase.layout.boundaries[-1] != len(profile.layers):
        return  # a layout of another model than its profile: not priced by it at all
    stages = CostModel(profile, cluster).evaluate(phase.layout, record=False).stages
    s, stage = max(enumerate(stages), key=lambda st: st[1].memory_bytes)
    if stage.memory_bytes > memory:
        raise InputFileError(
            f"{where}: pricing.cluster.device_memory_bytes {memory} is less than its layout "
            f"({phase.layout.label()}) needs on stage {s}, {stage.memory_bytes} bytes: the run "
            "priced only layouts that fit"
        )


def check_priced_prediction(
    where: str, phase: PhaseRecord, profiles: dict[str, Profile], plan: Plan | None
) -> None:
    """A phase record's predicted_step_s and predicted_stages are what its layout prices to
    (`CostModel.evaluate`: its step, and its stages as `plan.stage_plans` writes them) from
    the profile and on the cluster that priced it, as the run priced it
    (`executor.planning`): a phase the run solved, from the profile its pricing names
    (`profiles`, by file: calibration-N.json once the run recalibrated itself) on its
    pricing.cluster; a phase taken from the run's `plan` (its copy of it), from the plan's
    profile on the plan's cluster, whatever profile the run had refitted by then (it
    recorded the plan's prediction). The layout holds every other input of the price: the
    micro-batches and their size, the schedule, the freeze point, the cache and the ranks;
    the profile its calibration. Left open since the forty-second round: predicted_step_s edited
    within the bounds of its stages (`formats.run._check_step_bound`,
    `check_step_holds_stages`) changed report's predicted-vs-measured errors, and calibrate
    and export read the run, exit 0. InputFileError naming the file's line `where`
    ("runs/a/run.jsonl:3"), the phase and the field.

        check_priced_prediction("runs/a/run.jsonl:1", phase, profiles, read_plan_copy(...))

    Within PRICE_REL_TOL, the plan's own tolerance (`plan.check_plan_prices`): a plan's
    predictions and every recorded stage are rounded to 9 significant digits, and a run's
    records may be read on another platform, whose float sums differ in the last bits. A
    phase whose pricing inputs are not all recorded is checked as far as it can be: a plan
    phase whose plan's profile no record names (no file of the run is known to be it) is
    held to the plan's own prediction for its freeze point, which the run copied; a layout
    of another model than its profile is priced by it not at all (as `check_priced_cluster`
    leaves it)."""
    from pipeplan.formats.profile import profile_sha256
    from pipeplan.plan import PRICE_REL_TOL, STAGE_PRICES, stage_plans  # it imports this

    if phase.predicted_step_s is None and phase.predicted_stages is None:
        return  # nothing predicted: nothing for report or calibrate to read
    layout, pricing = phase.layout, phase.pricing
    source = f"{pricing.profile} on its pricing.cluster"
    if pricing.source == "plan" and plan is not None:
        by_sha = {profile_sha256(p): p for p in profiles.values()}
        profile = by_sha.get(plan.inputs.profile.sha256)
        source = f"the plan's profile on the plan's inputs.cluster ({RUN_PLAN})"
        if profile is None:  # not recorded: the plan's prediction, which the run copied
            frozen = layout.frozen_layers
            planned = next((p for p in plan.phases if p.layout.frozen_layers == frozen), None)
            if planned is None:  # a phase the plan has not (`RunPlanner.check_records`)
                return
            step_s, stages = planned.step_s, planned.stages
            source = f"what {RUN_PLAN} predicts for it"
        elif layout.boundaries[-1] != len(profile.layers):
            return
        else:
            evaluation = CostModel(profile, plan.inputs.cluster).evaluate(layout, record=False)
            step_s, stages = evaluation.step_s, stage_plans(evaluation.stages)
    else:
        profile = profiles[pricing.profile]
        if layout.boundaries[-1] != len(profile.layers):
            return
        evaluation = CostModel(profile, pricing.cluster).evaluate(layout, record=False)
        step_s, stages = evaluation.step_s, stage_plans(evaluation.stages)
    pairs = [("predicted_step_s", phase.predicted_step_s, step_s)]
    # A record's stages are its layout's (`formats.run.check_stages`), as many as priced.
    recorded_stages = phase.predicted_stages or []
    priced = stages[: len(recorded_stages)]
    for s, (recorded, price) in enumerate(zip(recorded_stages, priced, strict=True)):
        pairs += [
            (f"predicted_stages[{s}].{f}", getattr(recorded, f), getattr(price, f))
            for f in STAGE_PRICES
        ]
    for field, recorded, price in pairs:
        close = math.isclose(recorded or 0.0, price, rel_tol=PRICE_REL_TOL, abs_tol=1e-12)
        if recorded is None or close:
            continue
        raise InputFileError(
            f"{where}: phase {phase.phase}: {field} {recorded!r} is not what its layout "
            f"({layout.label()}) prices to from {source}, {price!r}: the run records its "
            "planner's prediction; the record was edited (or written by a pipeplan that "
            "priced differently: read it with that version)"
        )


# The fields of a cluster a run without a plan takes from its profile and pipeplan's defaults
# alone (`cluster_from_flags`: a run has no link flags), in the file's order; a run of a plan
# takes them from the plan's cluster.
_RUN_LINKS = (
    "intra_node",
    "intra_node_allreduce",
    "inter_node",
    "host_to_device_bandwidth_bytes_per_s",
    "disk_bandwidth_bytes_per_s",
)


def check_priced_links(where: str, cluster: Cluster, profile: Profile, name: str) -> None:
    """A phase's pricing.cluster (of a run without a plan) has the links its run builds: the
    in-node point-to-point and all-reduce links measured in its profile (`profile.comm`, the
    file `name` of the run directory; the format's defaults where it measured none), and
    pipeplan's defaults between nodes, to the device and from disk (a run has no flag for
    them). Found by the forty-second round: every record's intra_node bandwidth edited
    alike (3e6 B/s), which `check_one_cluster` holds only to each other, changed calibrate's
    fitted step overhead from 77.79 ms to 0.00 ms, exit 0. A run's plan gives its own links
    (`executor.planning.check_plan` holds its file to the run). InputFileError naming the
    field.

        check_priced_links("runs/a/run.jsonl: phase 0", phase.pricing.cluster, profile,
                           "profile.json")
    """
    # Of one device: the links are the same for any count, whose own checks are elsewhere.
    built = cluster_from_flags(
        nodes=1,
        devices_per_node=1,
        device_memory=cluster.device_memory_bytes,
        cache_budget=cluster.cache_budget_bytes,
        profile=profile,
    )
    differs = _link_difference(cluster, built)
    if differs is not None:
        field, mine, theirs = differs
        raise InputFileError(
            f"{where}: pricing.cluster.{field} {mine} is not the run's {theirs} (the links "
            f"{name} measured, and pipeplan's defaults where it measured none): a run without "
            "a plan prices on those; the record was edited"
        )


def check_planned_links(where: str, cluster: Cluster, planned: Cluster, copy: Path) -> None:
    """A phase's or forecast's pricing.cluster, in a run of a plan, has the links of the
    plan's cluster (`planned`, the inputs.cluster of the run's copy of its plan, `copy`):
    the run prices every phase and forecast on that cluster (`executor.planning.RunPlanner.
    cluster`). Found by the forty-third round: in a `--plan` run, every record's
    intra_node_allreduce bandwidth edited alike (3e6 B/s) changed calibrate's fitted step
    overhead from 21.62 ms to 0.00 ms, exit 0: only a run without a plan had its links held
    (`check_priced_links`). InputFileError naming the field.

        check_planned_links("runs/a/run.jsonl: phase 0", phase.pricing.cluster,
                            plan.inputs.cluster, Path("runs/a/run.plan.json"))
    """
    differs = _link_difference(cluster, planned)
    if differs is not None:
        field, mine, theirs = differs
        raise InputFileError(
            f"{where}: pricing.cluster.{field} {mine} is not the run's {theirs} (inputs.cluster "
            f"of its plan, {copy}): a run of a plan prices on the plan's cluster; the record "
            "was edited"
        )


def _link_difference(recorded: Cluster, own: Cluster) -> tuple[str, str, str] | None:
    """The first of _RUN_LINKS where `recorded` differs from `own` (a link: its field that
    differs, "intra_node.bandwidth_bytes_per_s"), with both values as JSON; None if none."""
    mine_all, theirs_all = recorded.model_dump(mode="json"), own.model_dump(mode="json")
    for field in _RUN_LINKS:
        mine, theirs = mine_all.get(field), theirs_all.get(field)
        if mine == theirs:
            continue
        if isinstance(mine, dict) and isinstance(theirs, dict):  # a link: its field that differs
            key = next(k for k in theirs if mine.get(k) != theirs[k])
            field, mine, theirs = f"{field}.{key}", mine.get(key), theirs[key]
        return field, json.dumps(mine), json.dumps(theirs)
    return None
