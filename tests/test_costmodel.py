"""Cost model: per-layer fits, phases (frozen, cached), links, memory, rank maps, transitions."""

from dataclasses import replace

import numpy as np
import pytest

from pipeplan.cluster import Cluster, Link, cluster_from_flags
from pipeplan.costmodel import CostModel, CostParams, Layout, check_profile, rank_map
from pipeplan.errors import BadArgumentError, InputFileError
from pipeplan.simulate import simulate
from pipeplan.synthetic import SyntheticLayer, synthetic_profile

GIB = 1 << 30


def _fit(latency_s: float, bandwidth: float):
    """`_fit(3e-5, 2e9)`: a link fit with the two samples a fit stands on, on its line."""
    from pipeplan.formats import LinkFit, LinkSample

    samples = [
        LinkSample(bytes=b, time_s=latency_s + b / bandwidth, spread_s=0.0) for b in (4096, 1 << 20)
    ]
    return LinkFit(latency_s=latency_s, bandwidth_bytes_per_s=bandwidth, samples=samples)


def small_profile(num_blocks: int = 4, micro_batches=(1, 2, 4, 8)):
    layers = [SyntheticLayer("embeddings", 1000, 1e-3, 2e-3, 400, 800.0, overhead_s=1e-4)]
    layers += [
        SyntheticLayer("block", 2000, 4e-3, 8e-3, 400, 4000.0, overhead_s=2e-4)
        for _ in range(num_blocks)
    ]
    layers.append(SyntheticLayer("head", 500, 1e-3, 2e-3, 8, 100.0, overhead_s=1e-4))
    return synthetic_profile(layers, micro_batches=micro_batches)


def cluster(nodes=2, per_node=2, memory=16 * GIB) -> Cluster:
    return Cluster(
        nodes=nodes,
        devices_per_node=per_node,
        device_memory_bytes=memory,
        intra_node=Link(bandwidth_bytes_per_s=1e9, latency_s=1e-5),
        inter_node=Link(bandwidth_bytes_per_s=1e8, latency_s=1e-4),
        host_to_device_bandwidth_bytes_per_s=1e9,
    )


def test_layer_times_follow_the_fitted_line():
    model = CostModel(small_profile(), cluster())
    np.testing.assert_allclose(model.layer_times("fwd", 3)[1], 2e-4 + 3 * 4e-3)
    np.testing.assert_allclose(model.layer_times("bwd", 16)[0], 1e-4 + 16 * 2e-3)


def test_extrapolating_beyond_twice_the_largest_measured_size_is_refused():
    model = CostModel(small_profile(), cluster())
    assert model.max_micro_batch_size == 16
    with pytest.raises(BadArgumentError, match="beyond what the profile supports"):
        model.layer_times("fwd", 17)


def test_a_size_that_ran_out_of_memory_caps_the_micro_batch():
    profile = small_profile()
    timing = profile.layers[2].timings[-1]
    profile.layers[2].timings[-1] = timing.model_copy(
        update=dict(feasible=False, fwd_s=None, bwd_s=None, fwd_nograd_s=None, error="oom")
    )
    assert CostModel(profile, cluster()).max_micro_batch_size == 7


def test_frozen_layers_run_no_grad_forward_and_no_backward():
    model = CostModel(small_profile(), cluster())
    costs = model.phase_costs(4, frozen_layers=2, cached=False)
    np.testing.assert_allclose(costs.fwd_s[:2], model.layer_times("nograd", 4)[:2])
    assert (costs.bwd_s[:2] == 0).all() and (costs.bwd_s[2:] > 0).all()
    # Frozen: weights only; active: weights + gradient + two AdamW moments.
    np.testing.assert_allclose(costs.static_bytes, model.param_bytes * [1, 1, 4, 4, 4, 4])
    assert (costs.saved_bytes_per_micro_batch[:2] == 0).all()
    assert (costs.grad_bytes[:2] == 0).all()


def test_a_cached_prefix_costs_only_the_cache_read():
    model = CostModel(small_profile(), cluster())
    costs = model.phase_costs(4, frozen_layers=3, cached=True)
    assert (costs.fwd_s[:3] == 0).all()
    read_s = 400 * 4 / 1e9
    np.testing.assert_allclose(costs.fwd_s[3], model.layer_times("fwd", 4)[3] + read_s)


def test_ring_allreduce_formula():
    link = Link(bandwidth_bytes_per_s=1e9, latency_s=1e-5)
    assert CostModel.allreduce_s(1e9, 1, link) == 0.0
    assert CostModel.allreduce_s(1e9, 4, link) == pytest.approx(6 * 1e-5 + 1.5)


def test_rank_map_keeps_a_pipeline_inside_a_node_when_it_fits():
    ranks = rank_map(num_stages=3, replicas=5, devices_per_node=8, nodes=2)
    assert ranks[:4] == [[0, 1, 2], [3, 4, 5], [8, 9, 10], [11, 12, 13]]
    flat = [r for replica in ranks for r in replica]
    assert len(set(flat)) == len(flat) == 15
    wide = rank_map(num_stages=4, replicas=2, devices_per_node=2, nodes=4)
    assert wide == [[0, 1, 2, 3], [4, 5, 6, 7]]


def _placement_reference(S, D, G, nodes):
    """The placement rule rank by rank: whole pipelines node by node, then leftovers in order."""
    if S > G:
        return [[r * S + s for s in range(S)] for r in range(D)]
    packed = [[n * G + k * S + s for s in range(S)] for n in range(nodes) for k in range(G // S)]
    used = {r for row in packed for r in row}
    spare = [r for r in range(nodes * G) if r not in used]
    rows = packed + [spare[i : i + S] for i in range(0, len(spare) - S + 1, S)]
    return rows[:D]


def test_rank_maps_and_their_boundary_rates_match_a_rank_by_rank_count():
    """Every (S, D) map on clusters up to 5 × 8: the array map equals the rule applied rank by
    rank, and `boundary_rates` prices every D from the map of the most replicas exactly as
    `boundary_links` prices each map alone; the shares match a direct count of crossing
    transfers per node link and direction."""
    from collections import Counter

    from pipeplan.costmodel import rank_array

    checked = 0
    for nodes in range(1, 6):
        for G in (1, 2, 3, 5, 8):
            model = CostModel(small_profile(), cluster(nodes=nodes, per_node=G))
            for S in range(2, nodes * G + 1):
                most = nodes * G // S
                rates = model.boundary_rates(rank_array(S, most, G, nodes), range(1, most + 1))
                for D in range(1, most + 1):
                    ranks = rank_map(S, D, G, nodes)
                    assert ranks == _placement_reference(S, D, G, nodes)
                    links = model.boundary_links(ranks)
                    assert list(rates[0][D - 1]) == [link.latency_s for link in links]
                    assert list(rates[1][D - 1]) == [
                        1 / link.bandwidth_bytes_per_s for link in links
                    ]
                    for s in range(S - 1):
                        hops = [
                            (r[s] // G, r[s + 1] // G) for r in ranks if r[s] // G != r[s + 1] // G
                        ]
                        most_on_a_link = max(
                            [
                                1,
                                *Counter(a for a, _ in hops).values(),
                                *Counter(b for _, b in hops).values(),
                            ]
                        )
                        assert model.boundary_shares(ranks)[s] == most_on_a_link
                    checked += 1
    assert checked > 500


def test_boundaries_use_the_link_between_their_ranks():
    model = CostModel(small_profile(), cluster(nodes=2, per_node=2))
    ranks = rank_map(4, 1, 2, 2)
    assert model.boundary_crosses_nodes(ranks) == [False, True, False]
    # A data-parallel group spanning nodes all-reduces over the inter-node link.
    links = model.allreduce_links(rank_map(1, 4, 2, 2))
    assert links[0] == model.cluster.inter_node


def test_stage_memory_counts_micro_batches_in_flight():
    model = CostModel(small_profile(), cluster(), CostParams(reserve_bytes=0))
    layout = Layout(
        frozen_layers=0,
        cached=False,
        micro_batches=4,
        micro_batch_size=2,
        schedule="gpipe",
        boundaries=(0, 3, 6),
        rank_map=((0, 1),),
    )
    gpipe = model.evaluate(layout)
    onef = model.evaluate(layout.model_copy(update={"schedule": "1f1b"}))
    costs = model.phase_costs(2, 0, False)
    static = costs.static_bytes[:3].sum()
    saved = costs.saved_bytes_per_micro_batch[:3].sum()
    assert gpipe.stages[0].memory_bytes == int(np.ceil(static + 4 * saved))
    assert onef.stages[0].memory_bytes == int(np.ceil(static + 2 * saved))
    assert onef.stages[1].memory_bytes < gpipe.stages[1].memory_bytes


def test_transition_cost_is_zero_without_a_change_and_moves_bytes_otherwise():
    model = CostModel(small_profile(), cluster(), CostParams(group_rebuild_s=1.0))
    a = Layout(
        frozen_layers=0,
        cached=False,
        micro_batches=2,
        micro_batch_size=4,
        schedule="1f1b",
        boundaries=(0, 3, 6),
        rank_map=tuple(map(tuple, rank_map(2, 2, 2, 2))),
    )
    b = a.model_copy(
        update={
            "frozen_layers": 2,
            "micro_batches": 1,
            "boundaries": (0, 6),
            "rank_map": tuple(map(tuple, rank_map(1, 4, 2, 2))),
        }
    )
    assert model.transition_s(a, a) == 0.0
    # Written out: in `a` each rank holds layers 0-2 or 3-5, in `b` all six, so each receives
    # the three it lacks: weights, plus AdamW's two moments for layers still trained (k = 2).
    # Ranks receive in parallel over the inter-node link (2 nodes); then the group rebuild.
    weights = model.param_bytes
    moments = model.params.adam_state_per_param_byte
    copy = [weights[i] * (1 + (moments if i >= 2 else 0)) for i in range(6)]
    busiest = max(sum(copy[:3]), sum(copy[3:]))
    link = cluster().inter_node
    expected = link.latency_s + busiest / link.bandwidth_bytes_per_s + 1.0
    assert model.transition_s(a, b) == pytest.approx(expected, rel=1e-12)
    assert busiest / link.bandwidth_bytes_per_s > link.latency_s  # the bytes count here


def test_transitions_take_the_measured_then_the_calibrated_group_rebuild():
    """The group rebuild a transition adds is the calibration's, else the profile's measured
    one, else the 2 s default: the same move priced with 0.3 s and with 2.0 s differs by
    exactly 1.7 s, and a calibrated 0.05 s wins over a measured 0.3 s."""
    from pipeplan.formats import CommProfile

    a = Layout(
        frozen_layers=0,
        cached=False,
        micro_batches=2,
        micro_batch_size=4,
        schedule="1f1b",
        boundaries=(0, 3, 6),
        rank_map=((0, 1), (2, 3)),
    )
    b = a.model_copy(update={"boundaries": (0, 6), "rank_map": ((0,), (1,), (2,), (3,))})
    old = small_profile()
    fit = _fit(3e-5, 2e9)
    measured = old.model_copy(
        update={
            "comm": CommProfile(
                backend="gloo", nproc=2, p2p=fit, allreduce=fit, group_rebuild_s=0.3
            )
        }
    )
    guessed = CostModel(old, cluster()).transition_s(a, b)
    priced = CostModel(measured, cluster()).transition_s(a, b)
    assert guessed - priced == pytest.approx(1.7, abs=1e-12)
    assert priced == CostModel(measured, cluster()).move_s(a, b) + 0.3
    both = calibrated(measured, group_rebuild_s=0.05)
    assert CostModel(both, cluster()).transition_s(a, b) == pytest.approx(priced - 0.25, abs=1e-12)
    assert CostModel(old, cluster()).group_rebuild_s == 2.0  # older profiles: the default


def test_profile_and_model_layer_counts_must_agree():
    profile = small_profile()
    profile.model.config["num_hidden_layers"] = 6
    with pytest.raises(InputFileError, match="has 6 layers but the model has 6 blocks"):
        check_profile(profile)


def test_cluster_defaults_to_the_measured_links():
    from pipeplan.formats import CommProfile

    profile = small_profile()
    fit = _fit(3e-5, 2e9)
    profile.comm = CommProfile(backend="gloo", nproc=2, p2p=fit, allreduce=fit)
    built = cluster_from_flags(nodes=1, devices_per_node=2, device_memory="1GiB", profile=profile)
    assert built.intra_node.bandwidth_bytes_per_s == 2e9
    assert built.allreduce_link.latency_s == 3e-5
    overridden = cluster_from_flags(
        nodes=1, devices_per_node=2, device_memory="1GiB", intra_bw="10GB/s", profile=profile
    )
    assert overridden.intra_node.bandwidth_bytes_per_s == 10e9
    assert overridden.intra_node_allreduce is None


def calibrated(profile, **fields):
    from pipeplan.formats import Calibration, FittedLink
    from pipeplan.formats.profile import NULL_WHEN_UNFITTED

    p2p = fields.pop("p2p", None)
    given = {**fields, "p2p": p2p}
    calibration = Calibration(
        runs=["synthetic"],  # as calibrate writes it: fitted from a phase of a run
        phases_used=1,
        steps_used=3,
        residual_median=0.0,
        residual_max=0.0,
        p2p=FittedLink(**p2p) if p2p else None,
        # What is left null, calibrate names with why.
        not_fitted={n: "not measured" for n in NULL_WHEN_UNFITTED if given.get(n) is None},
        **fields,
    )
    return profile.model_copy(update={"calibration": calibration})


def test_transfers_inside_a_node_use_the_calibrated_point_to_point_link():
    profile = calibrated(small_profile(), p2p={"latency_s": 1e-3, "bandwidth_bytes_per_s": 1e6})
    model = CostModel(profile, cluster(nodes=2, per_node=2))
    ranks = rank_map(4, 1, 2, 2)  # boundaries inside, across, inside
    links = model.boundary_links(ranks)
    assert links[0] == links[2] == model.intra_p2p_link != model.cluster.intra_node
    # Across nodes: the cluster's link plus what the calibrated runs spent beyond theirs.
    assert links[1] == model.inter_p2p_link != model.cluster.inter_node
    assert links[1].latency_s > model.cluster.inter_node.latency_s
    assert model.p2p_link(False) == model.intra_p2p_link


def test_allreduces_that_cross_one_node_link_share_it_in_the_step():
    # Two 2-stage replicas on 2 nodes × 2 devices, one replica per node: both stages'
    # data-parallel rings cross between the nodes, through the same two node links. Large
    # blocks: the all-reduces last longer than the stages' finishing times differ.
    layers = [SyntheticLayer("embeddings", 1000, 1e-3, 2e-3, 400, 800.0)]
    layers += [SyntheticLayer("block", 2_000_000, 4e-3, 8e-3, 400, 4000.0) for _ in range(4)]
    layers.append(SyntheticLayer("head", 500, 1e-3, 2e-3, 8, 100.0))
    profile = synthetic_profile(layers, micro_batches=(1, 2, 4))
    model = CostModel(profile, cluster(nodes=2, per_node=2), CostParams(reserve_bytes=0))
    layout = Layout(
        frozen_layers=0,
        cached=False,
        micro_batches=2,
        micro_batch_size=2,
        schedule="gpipe",
        boundaries=(0, 3, 6),
        rank_map=tuple(map(tuple, rank_map(2, 2, 2, 2))),
    )
    assert model.allreduce_nodes(layout.rank_map) == [(0, 1), (0, 1)]
    works, alone = model.stages(layout)
    shared = model.evaluate(layout)
    # Each all-reduce as simulated is at least as long as alone, and the two overlap, so at
    # least one is longer; the timeline shows them as they ran.
    pairs = list(zip(shared.stages, alone, strict=True))
    assert all(s.allreduce_s >= a.allreduce_s - 1e-15 for s, a in pairs)
    assert any(s.allreduce_s > a.allreduce_s * 1.01 for s, a in pairs)
    bars = [e for e in shared.timeline.events if e.kind == "allreduce"]
    assert sorted(e.end_s - e.start_s for e in bars) == pytest.approx(
        sorted(s.allreduce_s for s in shared.stages)
    )
    unshared = simulate([replace(w, allreduce_nodes=()) for w in works], 2, "gpipe")
    assert shared.step_s > unshared.step_s


def fast_network(per_node: int, intra: Link, inter: Link) -> Cluster:
    """Two nodes whose in-node links may be slower than the network (PCIe-only GPUs, fast NIC)."""
    return Cluster(
        nodes=2,
        devices_per_node=per_node,
        device_memory_bytes=16 * GIB,
        intra_node=intra,
        inter_node=inter,
        host_to_device_bandwidth_bytes_per_s=1e9,
    )


@pytest.mark.timeout(60)
def test_a_ring_spanning_nodes_is_priced_at_its_slowest_hop():
    """Found by the thirty-sixth round: on two nodes of two devices with 1 MB/s in-node links
    and a 1000 TB/s network, a 1×4 ring (ranks 0, 1 on node 0, ranks 2, 3 on node 1) was
    priced on the network alone, 0.12 ms, its in-node hops left out, and planned. Now a ring
    with two or more ranks on a node is priced, per term, at the slower of the inter-node
    and the in-node all-reduce links; a ring with one rank per node on the network alone."""
    intra = Link(bandwidth_bytes_per_s=1e6, latency_s=1e-5)
    inter = Link(bandwidth_bytes_per_s=1e15, latency_s=1e-4)  # slower to start, faster to move
    model = CostModel(small_profile(), fast_network(2, intra, inter), CostParams(reserve_bytes=0))
    (ring,) = model.allreduce_links(((0,), (1,), (2,), (3,)))
    assert (ring.latency_s, ring.bandwidth_bytes_per_s) == (1e-4, 1e6)
    # One rank per node: no in-node hop, the network alone; inside a node: the in-node link.
    assert model.allreduce_links(((0, 1), (2, 3))) == [model.inter_allreduce_link] * 2
    assert model.allreduce_links(((0,), (1,))) == [model.intra_allreduce_link]
    layout = Layout(
        frozen_layers=0,
        cached=False,
        micro_batches=1,
        micro_batch_size=4,
        schedule="1f1b",
        boundaries=(0, 6),
        rank_map=((0,), (1,), (2,), (3,)),
    )
    grads = float(model.phase_costs(4, 0, False).grad_bytes.sum())
    priced = model.evaluate(layout).stages[0].allreduce_s
    assert priced == pytest.approx(6 * 1e-4 + 6 / 4 * grads / 1e6)  # 2(D−1) hops at 1 MB/s
    assert priced > 0.05  # the network alone: 0.6 ms


@pytest.mark.timeout(60)
@pytest.mark.parametrize("inter_bandwidth", [1e9, 1.5e8])
def test_a_ring_slowed_by_an_in_node_hop_shares_the_node_links_only_beyond_it(inter_bandwidth):
    """Two 2-stage replicas per node on 2 nodes × 4 devices: each stage's ring has in-node
    hops (100 MB/s) and crosses both node links, which both stages' rings share. A share of
    a 1 GB/s network (500 MB/s each) is faster than the in-node hop: neither is slowed. A
    share of 150 MB/s (75 MB/s each) is slower: each all-reduce moves at 0.75 of its rate
    while both run (the fluid model, `simulate.shared_allreduce_ends`)."""
    layers = [SyntheticLayer("embeddings", 1000, 1e-3, 2e-3, 400, 800.0)]
    layers += [SyntheticLayer("block", 2_000_000, 4e-3, 8e-3, 400, 4000.0) for _ in range(4)]
    layers.append(SyntheticLayer("head", 500, 1e-3, 2e-3, 8, 100.0))
    profile = synthetic_profile(layers, micro_batches=(1, 2, 4))
    intra = Link(bandwidth_bytes_per_s=1e8, latency_s=1e-5)
    inter = Link(bandwidth_bytes_per_s=inter_bandwidth, latency_s=1e-5)
    model = CostModel(profile, fast_network(4, intra, inter), CostParams(reserve_bytes=0))
    layout = Layout(
        frozen_layers=0,
        cached=False,
        micro_batches=1,
        micro_batch_size=2,
        schedule="gpipe",
        boundaries=(0, 3, 6),
        rank_map=tuple(map(tuple, rank_map(2, 4, 4, 2))),  # (0, 1), (2, 3), (4, 5), (6, 7)
    )
    assert model.allreduce_nodes(layout.rank_map) == [(0, 1), (0, 1)]
    assert model.allreduce_links(layout.rank_map) == [model.intra_allreduce_link] * 2
    _, alone = model.stages(layout)
    shared = model.evaluate(layout)
    pairs = list(zip(shared.stages, alone, strict=True))
    if inter_bandwidth == 1e9:
        assert all(s.allreduce_s == pytest.approx(a.allreduce_s) for s, a in pairs)
    else:
        assert all(s.allreduce_s >= a.allreduce_s - 1e-15 for s, a in pairs)
        assert any(s.allreduce_s > a.allreduce_s * 1.01 for s, a in pairs)


@pytest.mark.timeout(60)
def test_a_transition_on_nodes_with_slower_in_node_links_is_priced_on_them():
    """Found fixing the thirty-sixth round's ring pricing: a layout change on two nodes was
    priced on the inter-node link as the slowest, so with 1 MB/s in-node links and a
    1000 TB/s network its moves were all but free. Now on the slower link, term by term."""
    intra = Link(bandwidth_bytes_per_s=1e6, latency_s=1e-5)
    inter = Link(bandwidth_bytes_per_s=1e15, latency_s=1e-4)
    model = CostModel(small_profile(), fast_network(2, intra, inter))
    a = Layout(
        frozen_layers=0,
        cached=False,
        micro_batches=2,
        micro_batch_size=4,
        schedule="1f1b",
        boundaries=(0, 3, 6),
        rank_map=((0, 1), (2, 3)),
    )
    b = a.model_copy(
        update={"micro_batches": 1, "boundaries": (0, 6), "rank_map": ((0,), (1,), (2,), (3,))}
    )
    moments = model.params.adam_state_per_param_byte
    busiest = float(model.param_bytes[:3].sum() * (1 + moments))
    assert busiest >= float(model.param_bytes[3:].sum() * (1 + moments))
    assert model.move_s(a, b) == pytest.approx(1e-4 + busiest / 1e6, rel=1e-12)


def test_simultaneous_transfers_of_replicas_crossing_one_node_link_share_it():
    model = CostModel(small_profile(), cluster(nodes=2, per_node=4))
    # Two replicas whose stage 0 is on node 0 and stage 1 on node 1.
    ranks = ((0, 4), (1, 5))
    assert model.boundary_shares(ranks) == [2]
    link = model.boundary_links(ranks)[0]
    assert link.bandwidth_bytes_per_s == pytest.approx(
        model.cluster.inter_node.bandwidth_bytes_per_s / 2
    )
    assert model.boundary_shares(((0, 4), (5, 1))) == [1]  # opposite directions: full duplex


def test_a_stage_fed_by_a_forward_only_stage_holds_its_receive_buffers():
    """The executor posts a step's M receives at once on every fed stage, and the first
    stage that trains also allocates the placeholder batch its schedule splits
    (`executor.feed`): 2·M input activations there, M on a fed forward-only stage."""
    model = CostModel(small_profile(num_blocks=6), cluster(nodes=1, per_node=4))
    layout = Layout(
        frozen_layers=4,
        cached=False,
        micro_batches=4,
        micro_batch_size=2,
        schedule="gpipe",
        boundaries=(0, 2, 4, 6, 8),
        rank_map=((0, 1, 2, 3),),
    )
    assert layout.forward_only_stages == 2
    costs = model.phase_costs(2, 4, False)
    reports = model.evaluate(layout).stages
    for s, copies in [(0, 0), (1, 1), (2, 2), (3, 0)]:
        first, stop = layout.boundaries[s], layout.boundaries[s + 1]
        plain = model.stage_memory_bytes(costs, first, stop, 4)
        expected = plain + copies * 4 * float(costs.boundary_bytes[first - 1])
        assert reports[s].memory_bytes == pytest.approx(expected, abs=2)


def test_a_large_rank_maps_moves_are_keyed_by_the_map_object_and_priced_the_same(monkeypatch):
    """`CostModel.map_key`: from IDENTITY_KEY_CELLS cells a rank map is keyed in the caches of
    moves by its object (hashing a million cells at each lookup took a sixth of a preview on
    2^20 devices, the eighty-fourth round): the same object keeps its key, an equal map made
    apart gets another (never one given before, even once the first layout is gone), a small
    map is its own key; and a move is priced the same whichever key it had."""
    import gc

    import pipeplan.costmodel as costmodel

    monkeypatch.setattr(costmodel, "IDENTITY_KEY_CELLS", 4)
    model = CostModel(small_profile(), cluster(), CostParams(group_rebuild_s=1.0))

    def layout(stages: int, replicas: int) -> Layout:
        return Layout(
            frozen_layers=0, cached=False, micro_batches=2, micro_batch_size=4,
            schedule="1f1b", boundaries=(0, 3, 6) if stages == 2 else (0, 6),
            rank_map=tuple(map(tuple, rank_map(stages, replicas, 2, 2))),
        )  # fmt: skip

    a, b, small = layout(2, 2), layout(1, 4), layout(1, 2)
    assert model.map_key(small) == small.rank_map  # (2 cells)
    key = model.map_key(a)
    assert key[0] == "map" and model.map_key(a) == key
    again = layout(2, 2)
    assert again.rank_map == a.rank_map and again.rank_map is not a.rank_map
    assert model.map_key(again) not in (key, model.map_key(b))
    priced = model.move_s(a, b)
    keys = {model.map_key(a), model.map_key(b), model.map_key(again)}
    del a
    gc.collect()
    assert model.map_key(layout(2, 2)) not in keys  # (a's key is not given again)
    monkeypatch.setattr(costmodel, "IDENTITY_KEY_CELLS", 1 << 30)
    fresh = CostModel(small_profile(), cluster(), CostParams(group_rebuild_s=1.0))
    assert fresh.move_s(again, b) == priced


def test_all_boundaries_are_the_last_rows_of_the_prefix_boundaries():
    """`all_boundaries` (a map priced for its own replica count) against the last rows of
    `prefix_boundaries`, its independent reference, on 3,000 random node maps: equal, dtype
    included."""
    from pipeplan.costmodel import all_boundaries, prefix_boundaries

    rng = np.random.default_rng(1)
    for _ in range(3000):
        nodes = rng.integers(0, rng.integers(1, 6), (rng.integers(1, 12), rng.integers(2, 9)))
        reference = [rows[-1] for rows in prefix_boundaries(nodes)]
        for got, want in zip(all_boundaries(nodes), reference, strict=True):
            assert np.array_equal(got, want) and got.dtype == want.dtype, nodes


def test_counted_keys_are_np_uniques():
    """`counted_keys` counts where the keys span little more than their number, and sorts
    otherwise: either way np.unique's keys and counts, 1-D or not (a [replica, stage] array)."""
    from pipeplan.costmodel import counted_keys

    rng = np.random.default_rng(7)
    for _ in range(500):
        shape = (int(rng.integers(0, 40)), int(rng.integers(1, 5)))
        keys = rng.integers(0, int(rng.integers(1, 5000)), shape)
        got, want = counted_keys(keys), np.unique(keys, return_counts=True)
        assert all(np.array_equal(g, w) for g, w in zip(got, want, strict=True))
