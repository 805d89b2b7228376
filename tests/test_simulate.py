"""Event-level pipeline simulation: closed forms on uniform stages, dependencies, bounds."""

import itertools
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeplan.simulate import (
    StageWork,
    in_flight,
    received_in_op,
    simulate,
    simulate_step,
    stage_order,
    step_lower_bound_s,
    timeline_of,
)


def uniform(num_stages: int, f: float, b: float, **kw) -> list[StageWork]:
    return [StageWork(f, b, True, **kw) for _ in range(num_stages)]


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
@pytest.mark.parametrize(("S", "M"), [(1, 1), (1, 5), (2, 1), (3, 4), (4, 8), (5, 3)])
def test_uniform_stages_match_the_closed_form(schedule, S, M):
    f, b = 1.0, 2.0
    timeline = simulate(uniform(S, f, b), M, schedule)
    assert timeline.step_s == pytest.approx((M + S - 1) * (f + b))


def test_one_f_one_b_holds_fewer_micro_batches_than_gpipe():
    S, M = 4, 8
    assert [in_flight("gpipe", S, s, M) for s in range(S)] == [8, 8, 8, 8]
    assert [in_flight("1f1b", S, s, M) for s in range(S)] == [4, 3, 2, 1]
    # The simulated order realises that bound: count forwards not yet matched by backwards.
    for s in range(S):
        live = peak = 0
        for kind, _ in stage_order("1f1b", S, s, M, True):
            live += 1 if kind == "fwd" else -1
            peak = max(peak, live)
        assert peak == in_flight("1f1b", S, s, M)


def test_transfers_delay_the_dependent_operation():
    stages = [StageWork(1.0, 2.0, True, send_fwd_s=0.5), StageWork(1.0, 2.0, True, send_bwd_s=0.25)]
    timeline = simulate(stages, 1, "gpipe")
    # F0, send, F1, B1, send back, B0
    assert timeline.step_s == pytest.approx(1 + 0.5 + 1 + 2 + 0.25 + 2)
    sends = [e for e in timeline.events if e.kind == "send"]
    assert [(e.stage, e.start_s, e.end_s) for e in sends] == [(0, 1.0, 1.5), (1, 4.5, 4.75)]


def test_a_received_transfer_does_not_overlap_the_receivers_previous_op():
    # Stage 1 is the slower: on the links, each activation arrives while stage 1 still runs
    # the previous forward, and only the first transfer each way shows in the step. Received
    # in the op, as torch's schedules post a receive when they reach its op, every transfer
    # waits for the receiver: F1 of j starts 0.5 after max(F1 of j−1 ends, F0 of j ends).
    stages = [
        StageWork(1.0, 1.0, True, send_fwd_s=0.5),
        StageWork(2.0, 2.0, True, send_bwd_s=0.5),
    ]
    assert simulate(stages, 4, "gpipe").step_s == pytest.approx(19.0)
    received = simulate(received_in_op(stages), 4, "gpipe")
    # Forwards of stage 1 end at 3.5, 6, 8.5, 11; its backwards at 13, 15, 17, 19; stage 0's
    # backwards wait for each gradient and its transfer: the last ends at 19 + 0.5 + 1.
    assert received.step_s == pytest.approx(20.5)
    sends = [
        (e.stage, e.micro_batch, e.start_s, e.end_s) for e in received.events if e.kind == "send"
    ]
    assert sends[:2] == [(0, 0, 1.0, 1.5), (0, 1, 3.5, 4.0)]  # drawn as the sender's
    assert (1, 3, 19.0, 19.5) in sends and len(sends) == 8
    fwd1 = [(e.start_s, e.end_s) for e in received.events if (e.stage, e.kind) == (1, "fwd")]
    assert fwd1 == [(1.5, 3.5), (4.0, 6.0), (6.5, 8.5), (9.0, 11.0)]


def test_allreduce_and_optimizer_follow_the_last_backward():
    stages = [StageWork(1.0, 1.0, True, allreduce_s=3.0, optimizer_s=0.5)]
    timeline = simulate(stages, 2, "1f1b")
    kinds = [(e.kind, e.start_s, e.end_s) for e in timeline.events]
    assert kinds[-2:] == [("allreduce", 4.0, 7.0), ("optimizer", 7.0, 7.5)]
    assert timeline.step_s == pytest.approx(7.5)


def test_frozen_stages_run_forward_only():
    stages = [StageWork(1.0, 0.0, False, send_fwd_s=0.0), StageWork(1.0, 1.0, True)]
    timeline = simulate(stages, 3, "1f1b")
    assert not [e for e in timeline.events if e.stage == 0 and e.kind == "bwd"]
    assert timeline.step_s == pytest.approx(1 + 3 * 2)
    with pytest.raises(ValueError, match="prefix"):
        simulate([StageWork(1.0, 1.0, True), StageWork(1.0, 0.0, False)], 1, "gpipe")


def test_timeline_events_have_the_plotting_format():
    timeline = simulate(uniform(3, 1.0, 1.0, send_fwd_s=0.1, send_bwd_s=0.1), 4, "1f1b")
    assert timeline.num_stages == 3
    event = timeline.events[0]
    assert set(type(event).model_fields) == {"stage", "kind", "micro_batch", "start_s", "end_s"}
    # Each stage computes one operation at a time.
    for s in range(3):
        ops = sorted(
            (e.start_s, e.end_s)
            for e in timeline.events
            if e.stage == s and e.kind in ("fwd", "bwd")
        )
        assert len(ops) == 8
        assert all(a[1] <= b[0] + 1e-12 for a, b in itertools.pairwise(ops))
    assert max(e.end_s for e in timeline.events) == pytest.approx(timeline.step_s)


def test_dependencies_are_respected():
    stages = [StageWork(1.0 + s, 2.0, True, send_fwd_s=0.3, send_bwd_s=0.2) for s in range(3)]
    timeline = simulate(stages, 4, "1f1b")
    ends = {(e.stage, e.kind, e.micro_batch): e for e in timeline.events if e.kind != "send"}
    for j in range(4):
        for s in range(1, 3):
            assert ends[s, "fwd", j].start_s >= ends[s - 1, "fwd", j].end_s + 0.3 - 1e-12
            assert ends[s - 1, "bwd", j].start_s >= ends[s, "bwd", j].end_s + 0.2 - 1e-12


work = st.floats(0.0, 5.0, allow_nan=False)


@settings(max_examples=150, deadline=None)
@given(
    data=st.lists(st.tuples(work, work, work, work, work, work), min_size=1, max_size=5),
    frozen=st.integers(0, 5),
    M=st.integers(1, 6),
    schedule=st.sampled_from(["gpipe", "1f1b"]),
)
def test_lower_bound_never_exceeds_the_simulated_step(data, frozen, M, schedule):
    stages = [
        StageWork(f, b if s >= frozen else 0.0, s >= frozen, sf, sb, ar, opt)
        for s, (f, b, sf, sb, ar, opt) in enumerate(data)
    ]
    step = simulate(stages, M, schedule, record=False).step_s
    assert step_lower_bound_s(stages, M) <= step * (1 + 1e-9) + 1e-12


def random_stages(data, frozen):
    return [
        StageWork(f, b if s >= frozen else 0.0, s >= frozen, sf, sb, ar, opt)
        for s, (f, b, sf, sb, ar, opt) in enumerate(data)
    ]


@settings(max_examples=150, deadline=None)
@given(
    data=st.lists(st.tuples(work, work, work, work, work, work), min_size=1, max_size=6),
    frozen=st.integers(0, 6),
    M=st.integers(1, 8),
)
def test_gpipe_closed_form_equals_the_event_simulation(data, frozen, M):
    from pipeplan.simulate import _event_schedule, _finish

    stages = random_stages(data, frozen)
    events = _finish(stages, _event_schedule(stages, M, "gpipe", record=False)).step_s
    assert simulate(stages, M, "gpipe", record=False).step_s == pytest.approx(events, rel=1e-12)


@settings(max_examples=300, deadline=None)
@given(
    data=st.lists(st.tuples(work, work, work, work, work, work), min_size=1, max_size=6),
    frozen=st.integers(0, 6),
    M=st.integers(1, 10),
    schedule=st.sampled_from(["gpipe", "1f1b"]),
    shared=st.booleans(),
)
def test_schedule_bound_never_exceeds_the_simulated_step(data, frozen, M, schedule, shared):
    stages = random_stages(data, frozen)
    if shared:  # every all-reduce crosses the same two node links: the bound prices them alone
        stages = [replace(s, allreduce_nodes=(0, 1)) for s in stages]
    step = simulate(stages, M, schedule, record=False).step_s
    assert step_lower_bound_s(stages, M, schedule) <= step * (1 + 1e-9) + 1e-12


@settings(max_examples=300, deadline=None)
@given(
    data=st.lists(st.tuples(work, work, work, work, work, work), min_size=1, max_size=6),
    frozen=st.integers(0, 6),
    M=st.integers(1, 10),
    schedule=st.sampled_from(["gpipe", "1f1b"]),
)
def test_receiving_in_the_op_never_shortens_the_step(data, frozen, M, schedule):
    # Why the planner's bounds, which price transfers on the links, stay below what the cost
    # model simulates with them received in the op.
    stages = random_stages(data, frozen)
    on_links = simulate(stages, M, schedule, record=False).step_s
    received = simulate(received_in_op(stages), M, schedule, record=False).step_s
    assert received >= on_links * (1 - 1e-12) - 1e-12


def test_the_classic_pipeline_term_is_not_a_bound_for_1f1b():
    # Issue 12's counterexample: (M−1)·max c + Σ c = 3·10 + 11 = 41, but 1F1B overlaps the
    # light stage entirely with the heavy one's forwards and backwards.
    stages = [StageWork(5.0, 5.0, True), StageWork(0.5, 0.5, True)]
    assert simulate(stages, 4, "1f1b").step_s == pytest.approx(40.0)
    assert simulate(stages, 4, "gpipe").step_s == pytest.approx(41.0)
    assert step_lower_bound_s(stages, 4, "1f1b") == pytest.approx(40.0)
    assert step_lower_bound_s(stages, 4, "gpipe") == pytest.approx(41.0)
    assert step_lower_bound_s(stages, 4) == pytest.approx(40.0)


def test_allreduces_crossing_the_same_node_link_share_it():
    alone = StageWork(1.0, 1.0, True, allreduce_s=4.0, allreduce_latency_s=1.0)
    both = [replace(alone, allreduce_nodes=(0, 1)), replace(alone, allreduce_nodes=(0, 1))]
    timeline = simulate(both, 1, "gpipe")
    spans = {e.stage: (e.start_s, e.end_s) for e in timeline.events if e.kind == "allreduce"}
    # Stage 1 ends its backward at 3 s, stage 0 at 4 s. After 1 s of latency each has 3 s of
    # bytes at full rate: stage 1 moves 1 s alone (4 → 5), then both share the links, so its
    # last 2 s take 4 s (→ 9); stage 0 has moved 2 s by then and ends alone at 10.
    assert spans[1] == pytest.approx((3.0, 9.0))
    assert spans[0] == pytest.approx((4.0, 10.0))
    assert timeline.step_s == pytest.approx(10.0)
    apart = simulate([alone, replace(alone, allreduce_nodes=(2, 3))], 1, "gpipe")
    assert apart.step_s == pytest.approx(4.0 + 4.0)
    assert step_lower_bound_s(both, 1, "gpipe") == pytest.approx(8.0)


@pytest.mark.parametrize("table_cells", [0, 1 << 24])
@settings(max_examples=100, deadline=None)
@given(
    flows=st.lists(
        st.tuples(work, work, st.sets(st.integers(0, 5), max_size=4)), min_size=2, max_size=6
    ),
    starts=st.lists(work, min_size=6, max_size=6),
)
def test_shared_links_are_priced_as_one_column_per_node(flows, starts, table_cells):
    """The fluid model groups node links crossed by the same all-reduces into one column (a
    column per node did not fit a million nodes): the ends are those of a column per node,
    whether the columns come from a [node, flow] table (small) or a dict of each node's."""
    from unittest import mock

    from pipeplan import simulate
    from pipeplan.simulate import _fluid

    def shared_allreduce_ends(*args):
        with mock.patch.object(simulate, "SHARED_LINK_CELLS", table_cells):
            return simulate.shared_allreduce_ends(*args)

    stages = [
        StageWork(
            1.0,
            1.0,
            True,
            allreduce_s=lat + rest,
            allreduce_latency_s=lat,
            allreduce_nodes=tuple(sorted(nodes)),
        )
        for lat, rest, nodes in flows
    ]
    starts = starts[: len(stages)]
    ends = shared_allreduce_ends(stages, starts)
    moving = [s for s, (_, rest, nodes) in enumerate(flows) if rest > 0 and nodes]
    expected = [start + work.allreduce_s for start, work in zip(starts, stages, strict=True)]
    per_node = np.array([[n in flows[s][2] for n in range(6)] for s in moving], dtype=float)
    per_node = per_node[:, per_node.sum(axis=0) > 1] if moving else per_node
    if len(moving) > 1 and per_node.shape[1]:
        release = np.array([starts[s] + flows[s][0] for s in moving])
        done = _fluid(per_node, release, np.array([flows[s][1] for s in moving]))
        for row, s in enumerate(moving):
            expected[s] = float(done[row])
    assert ends == pytest.approx(expected, rel=1e-12, abs=1e-12)


@settings(max_examples=150, deadline=None)
@given(
    data=st.lists(st.tuples(work, work, work, work, work, work), min_size=1, max_size=6),
    uniform=st.booleans(),
    extra=st.integers(0, 40),
    frozen=st.integers(0, 5),
    slow=st.floats(0.0, 10.0, allow_nan=False),
)
def test_1f1b_by_rounds_equals_the_event_simulation(data, uniform, extra, frozen, slow):
    """The round-by-round 1F1B (M ≥ the stages that train), which skips repeating rounds and
    prices leading forward-only stages as a flow shop, plays the same step as the event
    simulation; `slow` makes a forward-only stage's pace bind the training stages or not."""
    from pipeplan.simulate import _event_schedule, _finish, _one_f_one_b_rounds

    if uniform:  # identical stages repeat after a few rounds: the skip is exercised
        data = [data[0]] * len(data)
    frozen = min(frozen, len(data) - 1)
    stages = random_stages(data, frozen)
    if frozen:
        stages[0] = replace(stages[0], fwd_s=slow)
    M = len(stages) - frozen + extra
    events = _finish(stages, _event_schedule(stages, M, "1f1b", record=False)).step_s
    rounds = _finish(stages, _one_f_one_b_rounds(stages, M)).step_s
    assert rounds == pytest.approx(events, rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
@pytest.mark.parametrize("shown", [0, 1, 3, 5, 6])
def test_a_timeline_of_the_first_stages_holds_their_events_of_the_whole_step(schedule, shown):
    """`timeline_of(..., shown_stages=k)` (the stages a Gantt chart draws): the whole step's
    events of stages 0..k−1, in the same order, each transfer timed into its op included."""
    stages = received_in_op(
        [
            StageWork(
                1.0 + s,
                2.0,
                s > 0,
                send_fwd_s=0.3,
                send_bwd_s=0.2,
                allreduce_s=0.5,
                optimizer_s=0.1,
            )
            for s in range(6)
        ]
    )
    result = simulate_step(stages, 7, schedule)
    whole = timeline_of(stages, 7, schedule, result)
    part = timeline_of(stages, 7, schedule, result, shown_stages=shown)
    assert part.events == [e for e in whole.events if e.stage < shown]
    assert (part.step_s, part.num_stages) == (whole.step_s, whole.num_stages)
    assert {e.kind for e in whole.events} == {"fwd", "bwd", "send", "allreduce", "optimizer"}
