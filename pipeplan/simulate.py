"""Event-level simulation of one training step of a pipeline schedule (GPipe, 1F1B)
(docs/architecture.md §4.7; its lower bound §4.8).

    timeline = simulate(stage_works, micro_batches=4, schedule="1f1b")
    timeline.step_s, timeline.events

The `Timeline` format (events with stage, kind, micro_batch, start_s, end_s) is what
`pipeplan.plots` draws; keep it stable.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

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


@dataclass(frozen=True)
class StageWork:
    """Per-micro-batch work of one stage, in seconds."""

    fwd_s: float
    bwd_s: float
    has_backward: bool
    send_fwd_s: float = 0.0  # activation to stage s+1 (unused on the last stage)
    send_bwd_s: float = 0.0  # gradient to stage s−1 (unused when s−1 has no backward)
    allreduce_s: float = 0.0
    optimizer_s: float = 0.0


def in_flight(schedule: Schedule, num_stages: int, stage: int, micro_batches: int) -> int:
    """Micro-batches whose activations stage `stage` holds at its peak."""
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


def simulate(
    stages: Sequence[StageWork],
    micro_batches: int,
    schedule: Schedule,
    record: bool = True,
) -> Timeline:
    """Simulate one step; with record=False the timeline has no events (faster, same step_s)."""
    num_stages = len(stages)
    if num_stages < 1 or micro_batches < 1:
        raise ValueError("need at least one stage and one micro-batch")
    for s in range(1, num_stages):
        if stages[s - 1].has_backward and not stages[s].has_backward:
            raise ValueError("frozen layers must form a prefix: a frozen stage follows an active")
    last = num_stages - 1
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
    link_free_fwd = [0.0] * num_stages  # link s→s+1
    link_free_bwd = [0.0] * num_stages  # link s→s−1
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
        free = stage_free[s]
        sends_bwd = s > 0 and stages[s - 1].has_backward
        while pos < len(order):
            kind, j = order[pos]
            is_fwd = kind == "fwd"
            ready = f_ready[j] if is_fwd else b_ready[j]
            if ready is None:
                break
            start = free if free > ready else ready
            free = start + (work.fwd_s if is_fwd else work.bwd_s)
            if record:
                events.append((s, kind, j, start, free))
            if is_fwd:
                if s < last:
                    send_start = max(free, link_free_fwd[s])
                    send_end = send_start + work.send_fwd_s
                    link_free_fwd[s] = send_end
                    fwd_ready[s + 1][j] = send_end
                    if record and work.send_fwd_s > 0:
                        events.append((s, "send", j, send_start, send_end))
                    if not queued[s + 1]:
                        queued[s + 1] = True
                        pending.append(s + 1)
            elif sends_bwd:
                send_start = max(free, link_free_bwd[s])
                send_end = send_start + work.send_bwd_s
                link_free_bwd[s] = send_end
                bwd_ready[s - 1][j] = send_end
                if record and work.send_bwd_s > 0:
                    events.append((s, "send", j, send_start, send_end))
                if not queued[s - 1]:
                    queued[s - 1] = True
                    pending.append(s - 1)
            pos += 1
        position[s] = pos
        stage_free[s] = free
    if any(position[s] != len(orders[s]) for s in range(num_stages)):  # pragma: no cover
        raise RuntimeError("pipeline schedule deadlocked")

    step_s = 0.0
    for s, work in enumerate(stages):
        # The stage's own compute and its outgoing transfers must finish.
        finish = max(stage_free[s], link_free_fwd[s], link_free_bwd[s])
        if work.has_backward:
            if record and work.allreduce_s > 0:
                events.append(
                    (s, "allreduce", None, stage_free[s], stage_free[s] + work.allreduce_s)
                )
            opt_start = stage_free[s] + work.allreduce_s
            if record and work.optimizer_s > 0:
                events.append((s, "optimizer", None, opt_start, opt_start + work.optimizer_s))
            finish = max(finish, opt_start + work.optimizer_s)
        step_s = max(step_s, finish)
    return Timeline(
        events=[
            TimelineEvent.model_construct(
                stage=s, kind=kind, micro_batch=j, start_s=start, end_s=end
            )
            for s, kind, j, start, end in events
        ],
        step_s=step_s,
        num_stages=num_stages,
    )


def step_lower_bound_s(stages: Sequence[StageWork], micro_batches: int) -> float:
    """A lower bound on the simulated step of either schedule, for pruning (tested against
    `simulate`). Stage s cannot start before micro-batch 0's activations reach it, then has
    M·(f + b) of work, then its all-reduce and optimizer, and its last gradient still has to
    travel down to the first trainable stage, which then all-reduces; and any pipeline takes at
    least (M−1)·max_s c_s + Σ_s c_s."""
    M = micro_batches
    work = [st.fwd_s + (st.bwd_s if st.has_backward else 0.0) for st in stages]
    first_active = next((s for s, st in enumerate(stages) if st.has_backward), None)
    bound = (M - 1) * max(work) + sum(work)
    arrival = 0.0
    chain = 0.0  # the last gradient's way down from stage s to the first trainable stage
    for s, st in enumerate(stages):
        busy_end = arrival + M * work[s]
        bound = max(bound, busy_end)
        if st.has_backward and first_active is not None:
            if s > first_active:
                chain += stages[s - 1].bwd_s + st.send_bwd_s
            bound = max(bound, busy_end + st.allreduce_s + st.optimizer_s)
            head = stages[first_active]
            bound = max(bound, busy_end + chain + head.allreduce_s + head.optimizer_s)
        arrival += st.fwd_s + st.send_fwd_s
    return bound
