"""Parallelism applied in one place: one phase's pipeline × data-parallel runtime on one rank.

A phase's `Layout` fixes the freeze point, the cache, the stage boundaries, the rank map, the
micro-batch count and size, and the schedule. `PhaseRuntime` builds this rank's stage (the
layers between its boundaries), wraps it in a `torch.distributed.pipelining.PipelineStage`
over its replica's pipeline group, runs the plan's schedule (GPipe or 1F1B), then averages the
active gradients over the stage's data-parallel group with one bucketed all-reduce. DDP is
deliberately not used: GPipe + DDP crashes and DDP(static_graph=True) gives silently wrong
gradients inside a pipeline, while a manual all-reduce after `schedule.step()` is exact
(docs/architecture.md §5).

A layout whose first k stages hold only frozen layers (`Layout.forward_only_stages`) runs them
forward only (`executor.feed`): such a rank has a `ForwardOnly` feeder and no pipeline stage,
schedule, optimizer or all-reduce; the schedule runs stages k..S−1, and stage k (a `FedStage`)
takes micro-batch j's activation from stage k−1 when its forward j runs.

Under `--precision bf16` a stage computes under bfloat16 autocast (`pipeplan.precision`): the
parameters, their gradients, the all-reduce and AdamW stay float32, what a stage sends to the
next and the frozen prefix's output are bfloat16 (a stage computes on what it receives in
float32, as the unsplit model does), and the last stage hands float32 logits to the loss.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from functools import partial
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

from executor.clock import Clock, Mark
from executor.feed import FedStage, ForwardOnly, Inbox, recv_meta, send_meta
from executor.topology import Topology, build_topology, comm_device
from pipeplan import precision as mixed
from pipeplan.formats import Layout, Precision

SCHEDULES = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}


class StageModule(nn.Module):
    """Layers [start, stop) of a LayerSequence. Frozen layers (index < frozen_layers) run in
    eval mode without autograd: they are a fixed feature extractor, which is also what makes
    their outputs cacheable. With `skip_frozen` (stage 0 reading the cache) they are not run.

    In `precision` on `device`: the layers run under its autocast; the frozen prefix's output
    and the stage's output (unless it is the last stage, `last`) leave in its boundary dtype,
    the last stage's logits in float32. Each forward adds its span on `clock` to `spans` (read
    after the step's sync)."""

    def __init__(
        self,
        layers: nn.ModuleList,
        start: int,
        stop: int,
        frozen_layers: int,
        skip_frozen: bool,
        *,
        last: bool = True,
        device: torch.device | None = None,
        precision: Precision = "fp32",
        clock: Clock | None = None,
    ):
        super().__init__()
        self.first = max(start, frozen_layers) if skip_frozen else start
        self.frozen_layers = frozen_layers
        self.layers = nn.ModuleList(layers[self.first : stop])
        self.last, self.precision = last, precision
        self.device = device or torch.device("cpu")
        self.clock = clock or Clock(self.device)
        self.spans: list[tuple[Mark, Mark]] = []

    def train(self, mode: bool = True) -> StageModule:
        super().train(mode)
        for index, layer in self.indexed():
            if index < self.frozen_layers:
                layer.eval()
        return self

    def indexed(self) -> list[tuple[int, nn.Module]]:
        return list(enumerate(self.layers, start=self.first))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        start = self.clock.mark()
        # What arrives (a send, the cache, the frozen prefix) is rounded but computed on in
        # float32, as the unsplit model under autocast does.
        with mixed.compute(self.device, self.precision):
            for index, layer in self.indexed():
                if index < self.frozen_layers:
                    with torch.no_grad():
                        x = frozen_layer(layer, x, self.precision)
                else:
                    if index in (self.first, self.frozen_layers):
                        x = mixed.received(x, self.precision)
                    x = layer(x)
        # Outside autocast: the loss takes float32 logits; a send goes in the boundary dtype.
        x = x.float() if self.last else mixed.boundary(x, self.precision)
        self.spans.append((start, self.clock.mark()))
        return x


def frozen_layer(layer: nn.Module, x: torch.Tensor, precision: Precision) -> torch.Tensor:
    """A frozen layer's output, rounded to the boundary dtype as the cache stores it: with the
    cache on or off, and however many layers each cache version advanced by, the layers after
    the frozen prefix see the same values. Its input, rounded alike, is computed on in float32."""
    return mixed.boundary(layer(mixed.received(x, precision)), precision)


@torch.no_grad()
def frozen_forward(
    layers: nn.ModuleList,
    x: torch.Tensor,
    start: int,
    stop: int,
    device: torch.device,
    precision: Precision,
) -> torch.Tensor:
    """Frozen layers [start, stop) on `x` (on `device`), as a stage runs them: what the cache
    holds for `frozen_forward(layers, raw, 0, k, device, "bf16")` is bfloat16."""
    x = x.to(device)
    with mixed.compute(device, precision):
        for layer in layers[start:stop]:
            x = frozen_layer(layer, x, precision)
    return x


class BackwardClock:
    """The spans a stage spends in backward, from autograd hooks, on the step's clock.

    `torch.distributed.pipelining` (torch 2.13) has no callback around a stage's backward, so
    hooks on the stage time it. A micro-batch's backward starts when the gradient of the stage's
    output arrives (a gradient hook that a forward hook puts on each output) and ends when the
    last of the stage's trainable parameters has accumulated its gradient (post-accumulate-grad
    hooks). Not the module's full backward (pre-)hooks: the first trained stage's input never
    requires grad (data, the cached frozen prefix, or a forward-only stage's output), so its
    full backward hook fires as the backward starts, and torch warns about it on every run.
    Only stages that train a layer have one (stages from `Layout.forward_only_stages` on: the
    rest run forward only), so some parameter always marks the end. Not counted, as torch
    runs them before the first hook or after the last: the loss's own backward on the last
    stage and handing the input gradient to the send, both small next to the stage's layers.

    The parameter hooks live on the model's layers, which outlive the phase: `remove` them when
    the phase ends (PhaseRuntime.destroy)."""

    def __init__(self, module: nn.Module, params: list[nn.Parameter], clock: Clock):
        self.clock = clock
        self.spans: list[tuple[Mark, Mark]] = []
        self._mark: Mark | None = None
        # The very objects registered: a rank's check exempts these by identity
        # (`data.hold_rank_objects`' `hooks`), not a hook that merely looks like pipeplan's.
        self.hooks = (self._watch_output, self._accumulated)
        watch, accumulated = self.hooks
        self._handles = [module.register_forward_hook(watch)]
        self._handles += [p.register_post_accumulate_grad_hook(accumulated) for p in params]

    def _watch_output(self, module: nn.Module, args: Any, output: torch.Tensor) -> None:
        if output.requires_grad:  # not in evaluation (no_grad)
            output.register_hook(self._started)

    def _started(self, grad: torch.Tensor) -> None:
        self._mark = self.clock.mark()

    def _accumulated(self, param: torch.Tensor) -> None:
        # Summing the gaps between hooks adds up, per micro-batch, (last accumulation − start).
        now = self.clock.mark()
        self.spans.append((self._mark, now))
        self._mark = now

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        # Its bound methods refer to it: dropped, so reference counting alone frees the clock.
        self._handles, self.hooks = [], ()


@dataclass
class StepTimes:
    """One rank's view of one training step, in seconds."""

    step_s: float = 0.0
    fwd_s: float = 0.0
    bwd_s: float = 0.0
    wait_s: float = 0.0  # inside the schedule but not computing: transfers and bubbles
    allreduce_s: float = 0.0
    optimizer_s: float = 0.0
    input_s: float = 0.0  # reading the batch (and the cache) on stage 0: the trainer's part
    peak_memory_bytes: int | None = None  # CUDA: most allocated since the phase began
    loss: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class StepMean:
    """The loss the schedule computes for each micro-batch, scaled so that one step's gradient
    is the mean over every target of the step (all micro-batches of all replicas), whatever
    their share of padding: the schedule divides the gradients by M (`scale_grads`) and the
    all-reduce by R, so micro-batch j's loss is its sum × M·R / N, N the step's targets. A
    micro-batch without targets adds 0 and no gradient; a step without any, 0 everywhere.

        loss_fn = StepMean(seq.loss_sum, seq.targets)
        loss_fn.begin(targets=N, micro_batches=M, replicas=R)
        loss_fn(logits_j, labels_j)    # what schedule.step(…, target=labels) calls

    The mean of one replica's M losses is R × (its sum) / N: the mean over the replicas is the
    step's loss, as the step record takes it.
    """

    def __init__(
        self,
        loss_sum: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
        targets: Callable[[torch.Tensor], torch.Tensor],
    ):
        self.loss_sum = loss_sum
        self.targets = targets
        self.scale = 1.0

    def begin(self, targets: int, micro_batches: int, replicas: int) -> None:
        self.scale = micro_batches * replicas / max(targets, 1)

    def __call__(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return self.loss_sum(logits, labels) * self.scale


def active_parameters(module: nn.Module) -> list[nn.Parameter]:
    return [p for p in module.parameters() if p.requires_grad]


def set_frozen(layers: nn.ModuleList, frozen_layers: int) -> None:
    """Frozen layers train no more and run in eval mode wherever they run (inside a stage, or
    outside every stage when their output is cached): a fixed feature extractor, with no
    dropout, whose outputs may be cached. Freezing only grows, so nothing is ever unfrozen."""
    for index, layer in enumerate(layers):
        layer.requires_grad_(index >= frozen_layers)
        if index < frozen_layers:
            layer.eval()


def place_layers(layers: nn.ModuleList, owned: range, device: torch.device) -> None:
    """Layers in `owned` on `device`, every other layer on the host: a rank's GPU holds only
    its stage, as the plan counts its memory (`place_layers(layers, range(0, 4), cuda0)`).
    In place: parameters keep their identity, so optimizer state keyed by them stays valid."""
    host = torch.device("cpu")
    for index, layer in enumerate(layers):
        layer.to(device if index in owned else host)
    if device.type == "cuda":  # give the memory of layers moved off back to the device
        torch.cuda.empty_cache()


class PhaseRuntime:
    """This rank's part of one phase. Collective to construct (process groups, whose
    collectives fail after `timeout`: torch's default for new groups when None)."""

    def __init__(
        self,
        layers: nn.ModuleList,
        loss_fn: StepMean,
        layout: Layout,
        rank: int,
        example_input: Callable[[int], torch.Tensor],
        device: torch.device,
        make_optimizer: Callable[[list[nn.Parameter]], torch.optim.Optimizer],
        clip_grad_norm: float | None = None,
        timeout: timedelta | None = None,
        precision: Precision = "fp32",
    ):
        self.layout = layout
        self.device = device
        self.loss_fn = loss_fn
        self.precision = precision
        self.clip_grad_norm = clip_grad_norm  # max global gradient norm, or None
        k = layout.forward_only_stages
        self.topology: Topology = build_topology(rank, layout.rank_map, timeout, k)
        self.clock = Clock(device)
        set_frozen(layers, layout.frozen_layers)
        stage = self.topology.stage
        owned = range(0) if stage is None else range(*layout.boundaries[stage : stage + 2])
        place_layers(layers, owned, device)
        if device.type == "cuda":  # each step reports the phase's peak: what the plan priced
            torch.cuda.reset_peak_memory_stats(device)
        # A rank outside the layout keeps these empty: it idles through the phase.
        self.module: StageModule | None = None
        self.pipe_stage: PipelineStage | None = None
        self.schedule: ScheduleGPipe | Schedule1F1B | None = None
        self.params: list[nn.Parameter] = []
        self.optimizer: torch.optim.Optimizer | None = None
        self.backward_clock: BackwardClock | None = None
        # A forward-only stage's step; stage k's receiver from stage k − 1 and the batch of
        # zeros its schedule splits (the activations themselves come from the inbox).
        self.feeder: ForwardOnly | None = None
        self.inbox: Inbox | None = None
        self.placeholder: torch.Tensor | None = None
        # Per-layer gradient norms summed over steps, for AutoFreeze.
        self.grad_norm_sums: dict[int, float] = {}
        self.grad_norm_steps = 0
        if not self.topology.active:
            return
        self.module = StageModule(
            layers,
            owned.start,
            owned.stop,
            layout.frozen_layers,
            skip_frozen=layout.cached and stage == 0,
            last=stage == layout.num_stages - 1,
            device=device,
            precision=precision,
            clock=self.clock,
        ).train()
        if self.topology.forward_only:
            self.feeder = self.build_feeder(example_input)
            return
        input_args = (example_input(layout.micro_batch_size).to(device),) if stage == 0 else None
        stage_type: Callable[..., PipelineStage] = PipelineStage
        if k and stage == k:
            src = self.topology.feed_peer(-1)
            group = self.topology.feed_group
            self.inbox = Inbox(src, group, recv_meta(src, group), device)
            self.placeholder = self.inbox.placeholder(layout.micro_batches)
            input_args = (torch.tensor_split(self.placeholder, layout.micro_batches)[0],)
            stage_type = partial(FedStage, inbox=self.inbox)
        self.pipe_stage = stage_type(
            self.module,
            stage - k,  # the schedule runs stages k..S-1 only
            layout.num_stages - k,
            device,
            input_args=input_args,
            group=self.topology.pipeline_group,
        )
        self.schedule = SCHEDULES[layout.schedule](
            self.pipe_stage, layout.micro_batches, loss_fn=loss_fn
        )
        self.params = active_parameters(self.module)
        self.backward_clock = BackwardClock(self.module, self.params, self.clock)
        self.optimizer = make_optimizer(self.params)

    def build_feeder(self, example_input: Callable[[int], torch.Tensor]) -> ForwardOnly:
        """This forward-only stage's feeder. Collective down the replica's feed group: each
        stage learns its input's shape from the stage before it (stage 0 from the data) and
        tells the next one its output's, from one forward on an input of that shape."""
        topology, m = self.topology, self.layout.micro_batch_size
        group, dst = topology.feed_group, topology.feed_peer(1)
        inbox = None
        if self.is_first:
            example = example_input(m)
        else:
            src = topology.feed_peer(-1)
            inbox = Inbox(src, group, recv_meta(src, group), self.device)
            example = inbox.placeholder(1)
        feeder = ForwardOnly(self.module, inbox, dst, group, self.device)
        send_meta(feeder.output_meta(example), dst, group)
        return feeder

    @property
    def is_first(self) -> bool:
        return self.topology.stage == 0

    @property
    def is_last(self) -> bool:
        return self.topology.stage == self.layout.num_stages - 1

    def step(self, inputs: torch.Tensor | None, labels: torch.Tensor | None) -> StepTimes:
        """One optimizer step on this replica's share of the global batch: `inputs` on stage 0
        (raw or cached), `labels` on the last stage."""
        times = StepTimes()
        if not self.topology.active:
            if self.clip_grad_norm is not None:
                self.clip_gradients()  # collective over the world: this rank adds nothing
            return times
        if self.feeder is not None:
            return self.forward_only_step(inputs)
        assert self.module is not None and self.optimizer is not None
        assert self.backward_clock is not None
        clock = self.clock
        self.module.spans, self.backward_clock.spans = [], []
        t0 = clock.mark()
        args = self.schedule_inputs(inputs)
        losses: list[torch.Tensor] = []
        kwargs, targets = {}, 0
        if self.is_last:
            kwargs = dict(target=labels.to(self.device), losses=losses)
            targets = self.step_targets(labels)
        self.schedule.step(*args, **kwargs)
        t1 = clock.mark()
        self.all_reduce_gradients()
        t2 = clock.mark()
        # AutoFreeze reads the gradients before clipping: a step's clip scales every layer
        # alike and would blur the per-layer change rates it compares.
        for index, norm in self.layer_grad_norms().items():
            self.grad_norm_sums[index] = self.grad_norm_sums.get(index, 0.0) + norm
        self.grad_norm_steps += 1
        clip = None
        if self.clip_grad_norm is not None:
            started = clock.mark()
            self.clip_gradients()
            clip = (started, clock.mark())
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        t3 = clock.mark()
        clock.sync()  # once per step: every mark above has happened
        times.fwd_s = clock.total(self.module.spans)
        times.bwd_s = clock.total(self.backward_clock.spans)
        times.wait_s = max(0.0, clock.elapsed(t0, t1) - times.fwd_s - times.bwd_s)
        # The clip's one-number all-reduce is communication, not optimizer work.
        clip_s = clock.elapsed(*clip) if clip else 0.0
        times.allreduce_s = clock.elapsed(t1, t2) + clip_s
        times.optimizer_s = clock.elapsed(t2, t3) - clip_s
        times.step_s = clock.elapsed(t0, t3)
        if self.device.type == "cuda":
            times.peak_memory_bytes = torch.cuda.max_memory_allocated(self.device)
        if losses and targets > 0:  # a step without targets has no loss to report
            times.loss = float(torch.stack([loss.detach() for loss in losses]).mean())
        return times

    def step_targets(self, labels: torch.Tensor) -> int:
        """The step's targets over every replica (labels of this replica's share, on the last
        stage); sets the loss's scale for the step (`StepMean`). Collective over the last
        stage's replicas."""
        count = self.loss_fn.targets(labels).reshape(1).to(torch.int64)
        if self.layout.replicas > 1:
            count = count.to(comm_device(self.topology.dp_group))
            dist.all_reduce(count, group=self.topology.dp_group)
        targets = int(count)
        self.loss_fn.begin(targets, self.layout.micro_batches, self.layout.replicas)
        return targets

    def schedule_inputs(self, inputs: torch.Tensor | None) -> tuple[torch.Tensor, ...]:
        """What this stage passes to the schedule: the batch on stage 0, the placeholder on
        stage k after forward-only stages (with the step's receives posted), else nothing."""
        if self.inbox is not None:
            self.inbox.post(self.layout.micro_batches)
            return (self.placeholder,)
        return (inputs.to(self.device),) if self.is_first else ()

    def forward_only_step(self, inputs: torch.Tensor | None) -> StepTimes:
        """A forward-only stage's step: its M forwards, sent on as they finish. Its record says
        so: forward time, no backward, all-reduce or optimizer; the rest is waiting (for its
        inputs, for its sends to be taken, and for the others in the clip's all-reduce)."""
        assert self.module is not None and self.feeder is not None
        times, clock = StepTimes(), self.clock
        self.module.spans = []
        t0 = clock.mark()
        self.feeder.run(inputs if self.is_first else None, self.layout.micro_batches)
        if self.clip_grad_norm is not None:
            self.clip_gradients()  # collective over the world: this rank adds nothing
        t1 = clock.mark()
        clock.sync()
        times.fwd_s = clock.total(self.module.spans)
        times.step_s = clock.elapsed(t0, t1)
        times.wait_s = max(0.0, times.step_s - times.fwd_s)
        if self.device.type == "cuda":
            times.peak_memory_bytes = torch.cuda.max_memory_allocated(self.device)
        return times

    @torch.no_grad()
    def evaluate(self, inputs: torch.Tensor | None, labels: torch.Tensor) -> torch.Tensor | None:
        """Forward only through the phase's pipeline on one held-out batch (this replica's
        share, `inputs` on stage 0): the logits on the last stage, None elsewhere."""
        assert self.topology.active
        if self.feeder is not None:
            self.feeder.run(inputs if self.is_first else None, self.layout.micro_batches)
            return None
        args = self.schedule_inputs(inputs)
        # The schedule computes the loss on the last stage, so it needs the targets.
        kwargs = dict(target=labels.to(self.device), losses=[]) if self.is_last else {}
        out = self.schedule.eval(*args, **kwargs)
        return out if self.is_last else None

    def all_reduce_gradients(self) -> None:
        """Average active gradients over the replicas of this stage: one flat bucket."""
        if self.layout.replicas == 1 or not self.params:
            return
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in self.params]
        wire = comm_device(self.topology.dp_group)
        flat = torch.cat([g.reshape(-1) for g in grads]).to(wire)
        dist.all_reduce(flat, group=self.topology.dp_group)
        flat = flat.to(self.device) / self.layout.replicas
        offset = 0
        for p, g in zip(self.params, grads, strict=True):
            p.grad = flat[offset : offset + g.numel()].view_as(g)
            offset += g.numel()

    def clip_gradients(self) -> float:
        """Scale the active gradients so that the global norm, over the parameters of every
        stage, is at most `clip_grad_norm`, exactly as `torch.nn.utils.clip_grad_norm_` on one
        process; returns the norm before clipping. Collective over the world: each stage's
        squared norm counts once (from replica 0: after the all-reduce the replicas' gradients
        are equal), and ranks outside the layout add 0."""
        squares = torch.zeros(1, dtype=torch.float64, device=comm_device())
        grads = [p.grad for p in self.params if p.grad is not None]
        if self.topology.replica == 0 and grads:
            squares += sum(g.double().pow(2).sum() for g in grads).to(squares.device)
        dist.all_reduce(squares)
        norm = float(squares.sqrt())
        scale = self.clip_grad_norm / (norm + 1e-6)  # torch's epsilon
        if scale < 1.0:
            for g in grads:
                g.mul_(scale)
        return norm

    def layer_grad_norms(self) -> dict[int, float]:
        """Gradient norm of each active layer with parameters this rank owns (valid between
        the all-reduce and zero_grad), 0.0 for one its gradient did not reach (every `grad`
        None: a zero gradient, as autograd leaves it). Left out, as a layer whose norm was
        exactly 0 was by the gather, the epoch's record lacked an active layer and its own
        reader refused the run after training (the sixty-sixth round): the readers hold
        every active layer with parameters to a norm (`checkpoint.check_sums_measured`).

            runtime.layer_grad_norms()   # {2: 0.41, 3: 0.0, 4: 1.7}, layers 0-1 frozen
        """
        if self.module is None:
            return {}
        indices, squares = [], []
        for index, layer in self.module.indexed():
            params = list(layer.parameters())
            if index < self.module.frozen_layers or not params:
                continue  # no gradient and no norm: frozen, or nothing to train
            indices.append(index)
            grads = [p.grad for p in params if p.grad is not None]
            zero = torch.zeros((), device=params[0].device)
            squares.append(sum(((g.float() ** 2).sum() for g in grads), zero))
        if not squares:
            return {}
        # One transfer to the host for all layers, not a synchronisation per layer.
        return dict(zip(indices, torch.stack(squares).sqrt().tolist(), strict=True))

    def destroy(self) -> None:
        """End the phase: its hooks leave the shared layers, its groups are destroyed, and its
        stage, schedule and optimizer state are dropped here, so that they are freed as soon
        as the caller lets go of the runtime (before the next phase allocates its own)."""
        if self.backward_clock is not None:
            self.backward_clock.remove()
        self.topology.destroy()
        self.schedule = self.pipe_stage = self.module = self.backward_clock = None
        self.feeder = self.inbox = self.placeholder = None
        self.optimizer, self.params = None, []
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
