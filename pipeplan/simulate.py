"""Event-level simulation of one training step of a pipeline schedule (GPipe, 1F1B), the
sharing of node network links by all-reduces, and the step's lower bound
(docs/architecture.md §4.7, contention §4.5, bounds §4.8).

    timeline = simulate(stage_works, micro_batches=4, schedule="1f1b")
    timeline.step_s, timeline.events
    result = simulate_step(stage_works, 4, "1f1b")    # step_s and each stage's all-reduce span
    step_lower_bound_s(stage_works, 4, "1f1b") <= timeline.step_s

The `Timeline` format (events with stage, kind, micro_batch, start_s, end_s) is what
`pipeplan.plots` draws; keep it stable.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

import numpy as np
from pydantic import BaseModel

from pipeplan.formats import Schedule


class TimelineEvent(BaseModel):
    stage: int
    kind: Literal["fwd", "bwd", "send", "allreduce", "optimizer"]
    micro_batch: int | None
    start_s: float
    end_s: float


class Timeline(BaseModel):
    events: list[TimelineEvent]
    step_s: float
    num_stages: int


# A Gantt chart draws at most this many stages' worth of boxes: a stage of a step of M
# micro-batches has at most 4·M + 2 (forward, backward, a transfer each way, then all-reduce
# and optimizer), and a chart of more draws its first `gantt_rows` stages only, as its title
# says. 1,000 stages × 1,024 micro-batches drawn whole took 216 s and 7.3 GB.
MAX_GANTT_BOXES = 50_000


def gantt_rows(num_stages: int, micro_batches: int) -> int:
    """The stages a Gantt chart of a step of `num_stages` stages and `micro_batches`
    micro-batches draws: all when their boxes are at most MAX_GANTT_BOXES, else the first
    that many (at least one): `gantt_rows(1000, 1024)` → 12, `gantt_rows(8, 4)` → 8."""
    per_stage = 4 * max(micro_batches, 1) + 2
    return max(1, min(num_stages, MAX_GANTT_BOXES // per_stage))


@dataclass(frozen=True)
class StageWork:
    """Per-micro-batch work of one stage, in seconds.

    `allreduce_s` is the all-reduce alone on its links; when `allreduce_nodes` names the nodes
    whose network link the all-reduce crosses, the part beyond `allreduce_latency_s` shares
    those links with the other stages' all-reduces (§4.5), so it may take longer."""

    fwd_s: float
    bwd_s: float
    has_backward: bool
    send_fwd_s: float = 0.0  # activation to stage s+1 (unused on the last stage)
    send_bwd_s: float = 0.0  # gradient to stage s−1 (unused when s−1 has no backward)
    allreduce_s: float = 0.0
    optimizer_s: float = 0.0
    allreduce_latency_s: float = 0.0
    allreduce_nodes: tuple[int, ...] = ()
    # How many times faster the node links it crosses are than the all-reduce's own slowest
    # hop (≥ 1; above 1 when an in-node hop is slower, `CostModel.allreduce_links`): shared
    # by n all-reduces, a node link slows it only where its share is below that hop.
    allreduce_headroom: float = 1.0
    # Of fwd_s / bwd_s: the incoming transfer the op waits for once it is reached
    # (`received_in_op`); drawn as the sender's transfer, priced as part of the op.
    recv_fwd_s: float = 0.0
    recv_bwd_s: float = 0.0


@dataclass(frozen=True)
class StepResult:
    """One simulated step: its time and each stage's all-reduce as it ran (shared links
    stretch it)."""

    step_s: float
    allreduce_start_s: tuple[float, ...]
    allreduce_end_s: tuple[float, ...]

    def allreduce_s(self, stage: int) -> float:
        return self.allreduce_end_s[stage] - self.allreduce_start_s[stage]


def in_flight(schedule: Schedule, num_stages: int, stage: int, micro_batches: int) -> int:
    """Micro-batches whose activations stage `stage` holds at its peak; also the number of
    forwards it runs before its first backward."""
    if schedule == "gpipe":
        return micro_batches
    return min(num_stages - stage, micro_batches)


def stage_order(
    schedule: Schedule, num_stages: int, stage: int, micro_batches: int, has_backward: bool
) -> list[tuple[str, int]]:
    """The (kind, micro-batch) operations one stage executes, in order."""
    forwards = [("fwd", j) for j in range(micro_batches)]
    if not has_backward:
        return forwards
    backwards = [("bwd", j) for j in range(micro_batches)]
    if schedule == "gpipe":
        return forwards + backwards
    warmup = min(num_stages - stage - 1, micro_batches)
    order = forwards[:warmup]
    for j in range(micro_batches - warmup):
        order += [forwards[warmup + j], backwards[j]]
    return order + backwards[micro_batches - warmup :]


def received_in_op(stages: Sequence[StageWork]) -> list[StageWork]:
    """The stages as torch's pipeline schedules run them (§4.7): each transfer becomes part of
    the op that receives it, and the links carry nothing on their own.

        works = received_in_op(works)  # then simulate(works, M, schedule)

    A stage posts the receive of an activation (a gradient) when it reaches the forward (the
    backward) that consumes it — on its only thread under gloo; under NCCL behind the work
    already queued on its stream, which ProcessGroupNCCL orders before any point-to-point op.
    Send/recv are rendezvous (the bytes move once both sides have posted), so a transfer
    starts at max(sender done, receiver reached the op) and never overlaps the receiver's
    previous op. Timing the receive into the op gives exactly that: op start = max(stage free,
    sent) and op end = start + transfer + compute. Measured on CPU: with transfers on the
    links instead, the fitted p2p latency moved 0.9–3.7 ms with the runs fitted, and the
    calibrated grid's worst configuration was +22 % (docs/architecture.md §4.15)."""
    S = len(stages)
    works = []
    for s, work in enumerate(stages):
        recv_fwd = stages[s - 1].send_fwd_s if s > 0 else 0.0
        gets_grad = s < S - 1 and work.has_backward
        recv_bwd = stages[s + 1].send_bwd_s if gets_grad else 0.0
        works.append(
            replace(
                work,
                fwd_s=work.fwd_s + recv_fwd,
                bwd_s=work.bwd_s + recv_bwd,
                send_fwd_s=0.0,
                send_bwd_s=0.0,
                recv_fwd_s=work.recv_fwd_s + recv_fwd,
                recv_bwd_s=work.recv_bwd_s + recv_bwd,
            )
        )
    return works


def _check(stages: Sequence[StageWork], micro_batches: int) -> None:
    if len(stages) < 1 or micro_batches < 1:
        raise ValueError("need at least one stage and one micro-batch")
    for s in range(1, len(stages)):
        if stages[s - 1].has_backward and not stages[s].has_backward:
            raise ValueError("frozen layers must form a prefix: a frozen stage follows an active")


# --------------------------------------------------------------------------- the schedule


@dataclass
class _Schedule:
    """When each stage's last operation and each directed link's last transfer end."""

    stage_free: list[float]
    link_fwd: list[float]  # link s → s+1
    link_bwd: list[float]  # link s → s−1
    events: list[tuple[int, str, int | None, float, float]]


def _event_schedule(
    stages: Sequence[StageWork],
    micro_batches: int,
    schedule: Schedule,
    record: bool,
    shown_stages: int | None = None,
) -> _Schedule:
    """Play every operation: an op starts at max(stage free, input ready); transfers do not
    occupy the sender, and each directed link carries one at a time. With `record`, the
    events of stages 0..shown_stages−1 (all when None) are kept: a chart of the first stages
    of a 1,000-stage step need not hold its millions of events."""
    num_stages = len(stages)
    last = num_stages - 1
    shown = (num_stages if shown_stages is None else shown_stages) if record else -1
    orders = [
        stage_order(schedule, num_stages, s, micro_batches, st.has_backward)
        for s, st in enumerate(stages)
    ]
    # Arrival time of micro-batch j's activation (fwd) and gradient (bwd) at each stage.
    fwd_ready: list[list[float | None]] = [[None] * micro_batches for _ in stages]
    bwd_ready: list[list[float | None]] = [[None] * micro_batches for _ in stages]
    fwd_ready[0] = [0.0] * micro_batches
    # The last stage's backward of j follows its own forward of j (stage order).
    bwd_ready[last] = [0.0] * micro_batches
    link_free_fwd = [0.0] * num_stages
    link_free_bwd = [0.0] * num_stages
    stage_free = [0.0] * num_stages
    position = [0] * num_stages
    events: list[tuple[int, str, int | None, float, float]] = []

    # Stages to try next: a stage is queued again whenever a transfer to it lands, so the
    # work is proportional to the number of operations.
    pending = list(range(num_stages))
    queued = [True] * num_stages
    while pending:
        s = pending.pop()
        queued[s] = False
        work, order, pos = stages[s], orders[s], position[s]
        f_ready, b_ready = fwd_ready[s], bwd_ready[s]
        fwd_s, bwd_s = work.fwd_s, work.bwd_s
        free = stage_free[s]
        sends_bwd = s > 0 and stages[s - 1].has_backward
        while pos < len(order):
            kind, j = order[pos]
            is_fwd = kind == "fwd"
            ready = f_ready[j] if is_fwd else b_ready[j]
            if ready is None:
                break
            start = free if free > ready else ready
            free = start + (fwd_s if is_fwd else bwd_s)
            if s <= shown:  # s − 1 may be shown (a send drawn as its sender's)
                # A transfer timed into the op (`received_in_op`) is drawn as its sender's.
                received = work.recv_fwd_s if is_fwd else work.recv_bwd_s
                sender = s - 1 if is_fwd else s + 1
                if received > 0 and sender < shown:
                    events.append((sender, "send", j, start, start + received))
                if s < shown:
                    events.append((s, kind, j, start + received, free))
            if is_fwd:
                if s < last:
                    send_start = free if free > link_free_fwd[s] else link_free_fwd[s]
                    send_end = send_start + work.send_fwd_s
                    link_free_fwd[s] = send_end
                    fwd_ready[s + 1][j] = send_end
                    if s < shown and work.send_fwd_s > 0:
                        events.append((s, "send", j, send_start, send_end))
                    if not queued[s + 1]:
                        queued[s + 1] = True
                        pending.append(s + 1)
            elif sends_bwd:
                send_start = free if free > link_free_bwd[s] else link_free_bwd[s]
                send_end = send_start + work.send_bwd_s
                link_free_bwd[s] = send_end
                bwd_ready[s - 1][j] = send_end
                if s < shown and work.send_bwd_s > 0:
                    events.append((s, "send", j, send_start, send_end))
                if not queued[s - 1]:
                    queued[s - 1] = True
                    pending.append(s - 1)
            pos += 1
        position[s] = pos
        stage_free[s] = free
    if any(position[s] != len(orders[s]) for s in range(num_stages)):  # pragma: no cover
        raise RuntimeError("pipeline schedule deadlocked")
    return _Schedule(stage_free, link_free_fwd, link_free_bwd, events)


def _gpipe_schedule(stages: Sequence[StageWork], micro_batches: int) -> _Schedule:
    """GPipe in closed form: the forwards are a flow shop of M identical jobs over the
    machines stage 0, link 0→1, stage 1, …, stage S−1, and the backwards another from the last
    stage (once its forwards end) up to the first trainable stage. With identical jobs a flow
    shop's last job leaves machine q at Σ_{r≤q} p_r + (M−1)·max_{r≤q} p_r. Equal to the event
    simulation (tested), in O(S) instead of O(S·M)."""
    S, M = len(stages), micro_batches
    stage_free = [0.0] * S
    link_fwd = [0.0] * S
    link_bwd = [0.0] * S
    total = largest = 0.0
    for s, work in enumerate(stages):
        total += work.fwd_s
        largest = max(largest, work.fwd_s)
        stage_free[s] = total + (M - 1) * largest
        if s < S - 1:
            total += work.send_fwd_s
            largest = max(largest, work.send_fwd_s)
            link_fwd[s] = total + (M - 1) * largest
    forwards_end = stage_free[S - 1]
    total = largest = 0.0
    for s in range(S - 1, -1, -1):
        work = stages[s]
        if not work.has_backward:
            break
        total += work.bwd_s
        largest = max(largest, work.bwd_s)
        stage_free[s] = forwards_end + total + (M - 1) * largest
        if s > 0 and stages[s - 1].has_backward:
            total += work.send_bwd_s
            largest = max(largest, work.send_bwd_s)
            link_bwd[s] = forwards_end + total + (M - 1) * largest
    return _Schedule(stage_free, link_fwd, link_bwd, [])


# --------------------------------------------------------------------------- shared links


def shared_allreduce_ends(stages: Sequence[StageWork], starts: Sequence[float]) -> list[float]:
    """End of each trainable stage's all-reduce started at `starts[s]` (§4.5): after its
    latency terms, the bytes of the all-reduces crossing one node's network link share it
    equally; an all-reduce moves at the rate of its most shared link, or of its own slowest
    hop where that is slower (`allreduce_headroom`; fluid model, recomputed whenever one
    starts or ends). Unshared all-reduces take `allreduce_s`."""
    ends = [start + work.allreduce_s for start, work in zip(starts, stages, strict=True)]
    flows = [
        s
        for s, work in enumerate(stages)
        if work.has_backward
        and work.allreduce_nodes
        and work.allreduce_s - work.allreduce_latency_s > 0
    ]
    if len(flows) < 2:
        return ends
    uses = _shared_link_uses([stages[s].allreduce_nodes for s in flows])
    if not uses.shape[1]:
        return ends
    release = np.array([starts[s] + stages[s].allreduce_latency_s for s in flows])
    left = np.array([stages[s].allreduce_s - stages[s].allreduce_latency_s for s in flows])
    headroom = np.array([stages[s].allreduce_headroom for s in flows])
    finish = _fluid(uses, release, left, headroom)
    for row, s in enumerate(flows):
        ends[s] = float(finish[row])
    return ends


# Cells of the [node, flow] table `_shared_link_uses` builds at most (16 MB); past it, a dict.
SHARED_LINK_CELLS = 1 << 24


def _shared_link_uses(crossed: list[tuple[int, ...]]) -> np.ndarray:
    """[flow, link]: 1 where flow f (its all-reduce crossing the nodes `crossed[f]`) crosses
    the link. A link only one all-reduce crosses never slows it, and links crossed by the
    same flows are one constraint: one column per such set, not per node (a [flow, node]
    array of a million nodes would not fit); in any order (`_fluid` reads none).

        _shared_link_uses([(0, 1), (1, 2)])   # [[1.], [1.]]: node 1's link, both flows
    """
    flows = len(crossed)
    most = max((max(nodes) for nodes in crossed if nodes), default=-1) + 1
    if most * flows <= SHARED_LINK_CELLS:
        # [node, flow] at once, its distinct rows of two or more flows as packed bytes (on a
        # million devices, a dict of each node's flows took a fifth of a preview's time).
        table = np.zeros((most, flows), dtype=bool)
        for row, nodes in enumerate(crossed):
            table[np.asarray(nodes, dtype=np.int64), row] = True
        table = table[np.count_nonzero(table, axis=1) > 1]
        packed = np.unique(np.packbits(table, axis=1), axis=0)
        return np.unpackbits(packed, axis=1, count=flows).T.astype(float)
    crossing: dict[int, list[int]] = {}
    for row, nodes in enumerate(crossed):
        for node in nodes:
            crossing.setdefault(node, []).append(row)
    links = sorted({tuple(rows) for rows in crossing.values() if len(rows) > 1})
    uses = np.zeros((flows, len(links)))
    for column, rows in enumerate(links):
        uses[list(rows), column] = 1.0
    return uses


def _fluid(
    uses: np.ndarray, release: np.ndarray, left: np.ndarray, headroom: np.ndarray | None = None
) -> np.ndarray:
    """Completion times of flows (rows of `uses`: the links each crosses) released at
    `release` with `left` seconds of work at full rate, each link shared equally: a flow's
    share of a link is 1/n of the link, which is `headroom` (default 1) times the flow's
    full rate, so it runs at min(1, headroom/n) of its full rate."""
    if headroom is None:
        headroom = np.ones(len(release))
    n = len(release)
    finish = np.full(n, np.inf)
    left = left.astype(float).copy()
    active = np.zeros(n, dtype=bool)
    waiting = np.ones(n, dtype=bool)
    now = float(release.min())
    while waiting.any() or active.any():
        arriving = waiting & (release <= now)
        active |= arriving
        waiting &= ~arriving
        if not active.any():
            now = float(release[waiting].min())
            continue
        counts = active.astype(float) @ uses
        shares = np.maximum((uses * counts).max(axis=1), 1.0)
        rate = np.where(active, np.minimum(1.0, headroom / shares), 0.0)
        with np.errstate(divide="ignore"):
            to_finish = np.where(active, left / np.where(rate > 0, rate, 1.0), np.inf)
        step = float(to_finish.min())
        next_release = float(release[waiting].min()) if waiting.any() else np.inf
        if next_release - now < step:
            step = next_release - now
            done = np.zeros(n, dtype=bool)
        else:
            done = active & (to_finish <= step)
        left = np.where(active, left - rate * step, left)
        now += step
        finish[done] = now
        left[done] = 0.0
        active &= ~done
    return finish


# --------------------------------------------------------------------------- the step


def simulate_step(
    stages: Sequence[StageWork], micro_batches: int, schedule: Schedule
) -> StepResult:
    """The simulated step without recording events (GPipe in closed form, 1F1B by rounds when
    M ≥ the stages that train)."""
    _check(stages, micro_batches)
    training = sum(st.has_backward for st in stages)
    if schedule == "gpipe":
        played = _gpipe_schedule(stages, micro_batches)
    elif 1 <= training <= micro_batches:
        played = _one_f_one_b_rounds(stages, micro_batches)
    else:
        played = _event_schedule(stages, micro_batches, schedule, record=False)
    return _finish(stages, played)


# A steady 1F1B state repeats with a period of at most this many rounds when it repeats.
MAX_PERIOD = 16


def _one_f_one_b_rounds(stages: Sequence[StageWork], M: int) -> _Schedule:
    """1F1B with M ≥ the S stages that train: the same operations as the event simulation, in
    rounds. Stage s (warm-up w_s = S−1−s forwards) runs F_{w_s+i} then B_i in round i; round
    i's forwards need round i−1's (stage s−1 is one forward ahead), so each round runs its
    forwards from stage 0 down, then its backwards from the last stage up.

    While every stage is in its steady part (i ≤ M − S) a round maps the state (when each
    stage and link is free) by the same max-plus map, so once the state repeats shifted by a
    constant δ after c rounds it does so to the end of the steady part: the rounds between are
    skipped (exact up to floating-point rounding).

    Leading forward-only stages get nothing back: with their links they are a flow shop of M
    identical jobs (`_forward_flow_shop`) whose departures feed the first stage that trains,
    a new micro-batch every p_max; a skip keeps those arrivals in step only when δ ≥ c·p_max
    (later arrivals then bind no more than the ones just seen)."""
    q = next(s for s, st in enumerate(stages) if st.has_backward)
    ahead, arrivals, pace = _forward_flow_shop(stages[:q], M)
    stages = stages[q:]
    S = len(stages)
    F = [st.fwd_s for st in stages]
    B = [st.bwd_s for st in stages]
    sf = [st.send_fwd_s for st in stages]
    sb = [st.send_bwd_s for st in stages]
    free = [0.0] * S
    link_fwd = [0.0] * S
    link_bwd = [0.0] * S
    arrive = [[0.0] * M for _ in range(S)]  # [s][j]: micro-batch j's activation at s
    arrive[0] = arrivals
    grad = [[0.0] * M for _ in range(S)]  # [s][j]: its gradient at s
    for j in range(S - 1):  # warm-up forwards, a flow shop
        for s in range(S - 1 - j):
            start = free[s] if free[s] > arrive[s][j] else arrive[s][j]
            free[s] = end = start + F[s]
            send = end if end > link_fwd[s] else link_fwd[s]
            link_fwd[s] = arrive[s + 1][j] = send + sf[s]
    history: list[tuple[list[float], np.ndarray]] = []
    steady_end = M - S  # last round with every stage's forward
    i = 0
    while i < M:
        for s in range(S):  # forwards F_{w_s + i}
            j = S - 1 - s + i
            if j >= M:  # stage s has run all its forwards (stages after it have not)
                continue
            ready = arrive[s][j]
            start = free[s] if free[s] > ready else ready
            free[s] = end = start + F[s]
            if s < S - 1:
                send = end if end > link_fwd[s] else link_fwd[s]
                link_fwd[s] = arrive[s + 1][j] = send + sf[s]
        for s in range(S - 1, -1, -1):  # backwards B_i
            ready = grad[s][i]
            start = free[s] if free[s] > ready else ready
            free[s] = end = start + B[s]
            if s > 0:
                send = end if end > link_bwd[s] else link_bwd[s]
                link_bwd[s] = grad[s - 1][i] = send + sb[s]
        if i < steady_end and M >= 4 * S:
            skip = _period(history, free + link_fwd[:-1] + link_bwd[1:])
            if skip is not None and skip[1] < skip[0] * pace * (1 - 1e-12):
                skip = None  # the forward-only stages' arrivals would bind later
            if skip is not None:
                period, shift = skip
                jumps = (steady_end - i) // period
                i = _jump(i, jumps * period, jumps * shift, free, link_fwd, link_bwd, arrive, S)
                history.clear()
        i += 1
    return _Schedule(
        ahead.stage_free + free, ahead.link_fwd + link_fwd, ahead.link_bwd + link_bwd, []
    )


def _forward_flow_shop(stages: Sequence[StageWork], M: int) -> tuple[_Schedule, list[float], float]:
    """Forward-only stages and their outgoing links as a flow shop of M identical jobs from
    time 0: job j leaves machine r at Σ_{t≤r} p_t + j·max_{t≤r} p_t. Their schedule, when
    each micro-batch reaches the next stage, and the largest p (the pace of those arrivals)."""
    total = largest = 0.0
    stage_free, link_fwd = [], []
    for work in stages:
        for p, ends in ((work.fwd_s, stage_free), (work.send_fwd_s, link_fwd)):
            total += p
            largest = max(largest, p)
            ends.append(total + (M - 1) * largest)
    arrivals = [total + j * largest for j in range(M)]
    return _Schedule(stage_free, link_fwd, [0.0] * len(stages), []), arrivals, largest


def _period(
    history: list[tuple[list[float], np.ndarray]], state: list[float]
) -> tuple[int, float] | None:
    """(c, δ) when `state` is the state c rounds ago plus δ in every component, the smallest
    such c. Each earlier state is first tested on its last component in Python (a long
    pipeline's state has thousands, and most earlier states fail there), then, if it
    passes, on every component at once in numpy (component by component in Python this was
    half of a simulated 1F1B step's time). `history` keeps each state with its array.

        _period([([0.0, 1.0], np.array([0.0, 1.0]))], [2.0, 3.0]) == (1, 2.0)"""
    now = np.array(state)
    history.append((state, now))
    if len(history) > MAX_PERIOD + 1:
        history.pop(0)
    tolerance = 1e-12 * max(abs(state[0]), abs(state[-1]), 1e-300)
    first, last = state[0], state[-1]
    for period in range(1, len(history)):
        before, then = history[-1 - period]
        shift = first - before[0]
        # Written as the comparison it replaces (now − then − δ): the same rounds skipped.
        if not (shift > 0 and abs(last - before[-1] - shift) <= tolerance):
            continue
        if bool((np.abs(now - then - shift) <= tolerance).all()):
            return period, shift
    return None


def _jump(i, rounds, shift, free, link_fwd, link_bwd, arrive, S) -> int:
    """Advance the state by `rounds` rounds of `shift` total; the next forward each stage
    needs arrived with its predecessor's last send. Returns the new round index."""
    for s in range(S):
        free[s] += shift
        link_fwd[s] += shift if s < S - 1 else 0.0
        link_bwd[s] += shift if s > 0 else 0.0
    i += rounds
    for s in range(1, S):
        j = S - 1 - s + i + 1  # the forward stage s runs next round
        if j < len(arrive[s]):
            arrive[s][j] = link_fwd[s - 1]
    return i


def _finish(stages: Sequence[StageWork], played: _Schedule) -> StepResult:
    """After its last op a training stage all-reduces (sharing node links), then steps its
    optimizer; the step ends when every op, transfer and optimizer has."""
    starts = played.stage_free
    ends = shared_allreduce_ends(stages, starts)
    step_s = 0.0
    for s, work in enumerate(stages):
        finish = max(played.stage_free[s], played.link_fwd[s], played.link_bwd[s])
        if work.has_backward:
            finish = max(finish, ends[s] + work.optimizer_s)
        step_s = max(step_s, finish)
    return StepResult(step_s, tuple(starts), tuple(ends))


def simulate(
    stages: Sequence[StageWork],
    micro_batches: int,
    schedule: Schedule,
    record: bool = True,
) -> Timeline:
    """Simulate one step; with record=False the timeline has no events (faster, same step_s)."""
    result = simulate_step(stages, micro_batches, schedule)
    return timeline_of(stages, micro_batches, schedule, result, record)


def timeline_of(
    stages: Sequence[StageWork],
    micro_batches: int,
    schedule: Schedule,
    result: StepResult,
    record: bool = True,
    shown_stages: int | None = None,
) -> Timeline:
    """The Timeline of a simulated step: its events when `record` (every op and transfer, and
    each all-reduce as long as the shared links made it), else none; with `shown_stages`,
    those of stages 0..shown_stages−1 only (`num_stages` is still the step's)."""
    events = []
    if record:
        events = _event_schedule(stages, micro_batches, schedule, True, shown_stages).events
        for s, work in enumerate(stages[:shown_stages]):
            if not work.has_backward:
                continue
            start, end = result.allreduce_start_s[s], result.allreduce_end_s[s]
            if end > start:
                events.append((s, "allreduce", None, start, end))
            if work.optimizer_s > 0:
                events.append((s, "optimizer", None, end, end + work.optimizer_s))
    return Timeline(
        events=[
            TimelineEvent.model_construct(
                stage=s, kind=kind, micro_batch=j, start_s=start, end_s=end
            )
            for s, kind, j, start, end in events
        ],
        step_s=result.step_s,
        num_stages=len(stages),
    )


# --------------------------------------------------------------------------- lower bound


def step_lower_bound_s(
    stages: Sequence[StageWork], micro_batches: int, schedule: Schedule | None = None
) -> float:
    """A lower bound on the simulated step of `schedule` (of either, when None), for pruning
    (§4.8; tested against `simulate`). GPipe: its closed-form schedule with every all-reduce
    alone on its links. 1F1B: the largest of, per stage k,
    - arrival a_k of micro-batch 0, then all M·c_k of its work, then its own all-reduce and
      optimizer, or its last gradient's way down to the first trainable stage and that
      stage's all-reduce and optimizer (the tail);
    - a_k, the forwards before its first backward or micro-batch 0's round trip below k,
      whichever ends later, the rest of its work, the tail;
    - the same with the cycles of a window of stages [t, k]: micro-batch j's gradient goes up
      to t, t's next forward comes down to k, and k's backward n = k−t+1 micro-batches later
      follows, so every such round adds the window's work and transfers."""
    _check(stages, micro_batches)
    if schedule is None:
        return min(step_lower_bound_s(stages, micro_batches, s) for s in ("gpipe", "1f1b"))
    if schedule == "gpipe":
        played = _gpipe_schedule(stages, micro_batches)
        starts = played.stage_free
        alone = [start + work.allreduce_s for start, work in zip(starts, stages, strict=True)]
        return _finish_alone(stages, played, alone)
    return _one_f_one_b_bound(stages, micro_batches)


def _finish_alone(stages: Sequence[StageWork], played: _Schedule, ends: list[float]) -> float:
    step_s = 0.0
    for s, work in enumerate(stages):
        finish = max(played.stage_free[s], played.link_fwd[s], played.link_bwd[s])
        if work.has_backward:
            finish = max(finish, ends[s] + work.optimizer_s)
        step_s = max(step_s, finish)
    return step_s


def _one_f_one_b_bound(stages: Sequence[StageWork], micro_batches: int) -> float:
    S = len(stages)
    trains = np.array([st.has_backward for st in stages])
    return one_f_one_b_bound(
        fwd=np.array([st.fwd_s for st in stages]),
        bwd=np.array([st.bwd_s if st.has_backward else 0.0 for st in stages]),
        trains=trains,
        send_fwd=np.array([st.send_fwd_s if s < S - 1 else 0.0 for s, st in enumerate(stages)]),
        # Gradient s → s−1, sent only when s−1 trains.
        send_bwd=np.array(
            [st.send_bwd_s if s > 0 and trains[s - 1] else 0.0 for s, st in enumerate(stages)]
        ),
        own_tail=np.array([st.allreduce_s + st.optimizer_s for st in stages]),
        micro_batches=micro_batches,
    )


def one_f_one_b_bound(
    fwd: np.ndarray,
    bwd: np.ndarray,
    trains: np.ndarray,
    send_fwd: np.ndarray,
    send_bwd: np.ndarray,
    own_tail: np.ndarray,
    micro_batches: int,
) -> float:
    """`step_lower_bound_s` for 1F1B on per-stage arrays (send_bwd[s]: s → s−1; own_tail: the
    all-reduce alone + optimizer)."""
    F, B, sf, sb, M = fwd, bwd, send_fwd, send_bwd, micro_batches
    S = len(F)
    arrival = np.concatenate([[0.0], np.cumsum(F + sf)[:-1]])  # a_k
    if not trains.any():  # nothing trains: the forward flow shop
        return float(F.sum() + sf[:-1].sum() + (M - 1) * max(F.max(), sf.max()))
    first = int(np.argmax(trains))
    # Down from k to the first trainable stage, then its all-reduce and optimizer.
    steps_down = np.where(np.arange(S) >= first, B + np.append(sb[1:], 0.0), 0.0)
    down = np.concatenate([[0.0], np.cumsum(steps_down)[:-1]])
    down = np.where(np.arange(S) >= first, down - down[first], 0.0)
    tail = np.maximum(down + own_tail[first], own_tail)
    # Micro-batch 0's round trip below stage k: forwards down, backwards up.
    hop = np.append(sf[:-1] + F[1:] + B[1:] + sb[1:], 0.0)  # k → k+1 and back
    below = np.cumsum(hop[::-1])[::-1]
    bound = 0.0
    # A frozen stage k: its last forward on to the end, the last stage's backward, and the
    # gradient's way back to the first trainable stage.
    on_down = np.append(np.cumsum((sf[:-1] + F[1:])[::-1])[::-1], 0.0)
    back_up = down[S - 1] + B[S - 1] + own_tail[first]
    for k in range(first):
        bound = max(bound, arrival[k] + M * F[k] + on_down[k] + back_up)
    pace = 0.0  # when stage k's last forward can leave k−1 (see `_pace`)
    for k in range(first, S):
        bound = max(bound, arrival[k] + M * (F[k] + B[k]) + tail[k])
        before = min(S - k, M)
        # Stage k's last forward follows some stage t's last forward (after t's M forwards
        # and the backwards before it) down the pipeline; then k's last `before` backwards.
        bound = max(bound, pace + F[k] + before * B[k] + tail[k])
        first_bwd_end = arrival[k] + max(before * F[k], F[k] + below[k]) + B[k]
        # k's own last forward: after its first backward come M − nF forwards and the
        # M − nF − 1 backwards before the last of them (`stage_order`).
        own = arrival[k] + M * F[k] + (M - before) * B[k]
        if before < M:
            own = max(own, first_bwd_end + (M - before) * F[k] + (M - before - 1) * B[k])
        pace = max(pace + F[k], own) + sf[k]
        windows = window_cycles(k, first, F, B, sf, sb, M, first_bwd_end)
        bound = max(bound, windows + tail[k])
    return float(bound)


def window_cycles(
    k: int,
    first: int,
    F: np.ndarray,
    B: np.ndarray,
    sf: np.ndarray,
    sb: np.ndarray,
    M: int,
    first_bwd_end: float,
) -> float:
    """When stage k's ops can end, through the cycles of windows [t, k], first ≤ t ≤ k (see
    `window_counts`); `first_bwd_end`: when B_0@k can end."""
    t = np.arange(first, k + 1)
    # Each round: the window's forwards and backwards and the transfers inside it.
    inside = F + B + np.append(sf[:-1] + sb[1:], 0.0)  # stage u and boundary u → u+1
    cycle = np.cumsum(inside[t][::-1])[::-1] - (inside[k] - F[k] - B[k])
    rounds, fwd_left, bwd_left = window_counts(k, first, len(F), M)
    return float(first_bwd_end + np.max(rounds * cycle + fwd_left * F[k] + bwd_left * B[k]))


def window_counts(k: int, first: int, S: int, M: int) -> tuple[np.ndarray, ...]:
    """For windows [t, k], t = first..k of a 1F1B pipeline: after B_0@k, stage k's ops end at
    least rounds·(the window's work and transfers) + fwd_left·F_k + bwd_left·B_k later.
    A round: B_j@k → gradients up to t → t's next forward F_x (x = w_t + j + 1) down to k →
    B_{j+n}@k with n = w_t + 1 − w_k (k − t + 1 when the warm-ups w are not cut at M); it
    repeats while t still has a forward after B_j; then k's remaining forwards and backwards.
    t = k is the stage's own order."""
    t = np.arange(first, k + 1)
    warm = np.minimum(S - 1 - np.arange(S), M)
    n = warm[t] + 1 - warm[k]
    last_j = M - warm[t] - 2  # t runs a forward after B_j only while j ≤ last_j
    ok = (n >= 1) & (last_j >= 0)
    rounds = np.where(ok, last_j // np.maximum(n, 1) + 1, 0)
    done = rounds * np.where(ok, n, 0)
    # Without a round the stage still runs its other backwards and its forwards after B_0.
    fwd_left = np.where(ok, np.maximum(M - warm[k] - done - 1, 0), M - min(S - k, M))
    bwd_left = M - 1 - done
    return rounds, fwd_left, bwd_left
