"""Forward-only leading stages: how stages 0..k−1 feed stage k, and nothing comes back.

A layout's first k stages may hold only frozen layers (`Layout.forward_only_stages`). Such a
stage runs its layers without autograd on micro-batch j = 0..M−1 in order, each as soon as its
input has arrived (stage 0: from the data), and sends the output to the next stage of its
replica over the replica's feed group; it receives nothing back, has no optimizer and takes no
part in the gradient all-reduce. Stage k, the first stage that trains, is stage 0 of the
pipeline torch's schedule runs: the schedule splits a placeholder batch of the activation's
shape into micro-batches, and `FedStage` swaps in micro-batch j's activation from stage k−1
when the schedule runs its forward j. Every receive of a step is posted when the step starts,
so an activation lands as soon as it is sent and is waited for only when it is needed: what
the cost model prices (`pipeplan.simulate`, a stage with `StageWork.has_backward=False`).

    send_meta(meta_of(output), dst, group)      # once per phase, down the feed group
    inbox = Inbox(src, group, recv_meta(src, group), device)
    inbox.post(M)             # the step's M receives, at once
    x = inbox.take(j)         # micro-batch j, once it has arrived
    feeder = ForwardOnly(module, inbox or None, dst, group, device)
    feeder.run(inputs, M)     # stage 0 passes the batch; later stages take from their inbox
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.pipelining import PipelineStage

from executor.migrate import on_wire
from executor.topology import comm_device

# What travels once per phase before any activation: a micro-batch's activation shape and dtype.
Meta = tuple[tuple[int, ...], torch.dtype]


def send_meta(meta: Meta, dst: int, group: dist.ProcessGroup) -> None:
    """Tell the next stage (global rank `dst`) what its input will look like."""
    dist.send_object_list([meta], dst=dst, group=group, device=comm_device(group))


def recv_meta(src: int, group: dist.ProcessGroup) -> Meta:
    """What the previous stage (global rank `src`) will send each micro-batch."""
    box: list[Any] = [None]
    dist.recv_object_list(box, src=src, group=group, device=comm_device(group))
    shape, dtype = box[0]
    return tuple(shape), dtype


def meta_of(x: torch.Tensor) -> Meta:
    return tuple(x.shape), x.dtype


class Inbox:
    """One stage's receives from the stage before it in its replica (global rank `src`):
    micro-batch activations of `meta`, received on the group's device, used on `device`."""

    def __init__(self, src: int, group: dist.ProcessGroup, meta: Meta, device: torch.device):
        self.src, self.group, self.device = src, group, device
        self.shape, self.dtype = meta
        self.wire = comm_device(group)
        self._pending: list[tuple[torch.Tensor, dist.Work] | None] = []

    def post(self, count: int) -> None:
        """Post the step's `count` receives at once (tag j: micro-batch j)."""
        self._pending = []
        for j in range(count):
            buffer = torch.empty(self.shape, dtype=self.dtype, device=self.wire)
            work = dist.irecv(buffer, self.src, group=self.group, tag=j)
            self._pending.append((buffer, work))

    def take(self, j: int) -> torch.Tensor:
        """Micro-batch j's activation on `device`, once it has arrived."""
        entry = self._pending[j]
        if entry is None:
            raise RuntimeError(f"micro-batch {j} was taken twice in one step")
        self._pending[j] = None  # the caller holds it from here on
        buffer, work = entry
        work.wait()
        return buffer.to(self.device)

    def placeholder(self, count: int) -> torch.Tensor:
        """A batch of `count` micro-batches of zeros in the activation's shape and dtype: what
        the schedule splits and runs its one metadata-inference forward on (`FedStage` swaps
        in the real activations). Contiguous: a stage's layers may `view` their input."""
        rows, *rest = self.shape
        return torch.zeros((count * rows, *rest), dtype=self.dtype, device=self.device)


class FedStage(PipelineStage):
    """The first trained stage of a layout with forward-only stages before it: a
    `PipelineStage` whose forward j runs on micro-batch j's activation from `inbox` instead of
    the schedule's placeholder chunk. It is the schedule's stage 0, so it sends no gradient
    back (its input needs none: every layer before it is frozen)."""

    def __init__(self, *args: Any, inbox: Inbox, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.inbox = inbox

    def forward_one_chunk(
        self,
        fwd_chunk_id: int,
        args: tuple[Any, ...],
        kwargs: dict[str, Any] | None = None,
        save_forward_output: bool = True,
    ) -> Any:
        fed = (self.inbox.take(fwd_chunk_id),)
        return super().forward_one_chunk(fwd_chunk_id, fed, kwargs, save_forward_output)


class ForwardOnly:
    """A forward-only stage's step: M forwards without autograd, each output sent to the next
    stage (global rank `dst`) as soon as it is computed; the sends complete before `run`
    returns. Stage 0 splits the batch it is given as torch's schedules split it (dim 0, M
    chunks); a later forward-only stage takes its inputs from `inbox`."""

    def __init__(
        self,
        module: nn.Module,
        inbox: Inbox | None,
        dst: int,
        group: dist.ProcessGroup,
        device: torch.device,
    ):
        self.module, self.inbox, self.dst, self.group = module, inbox, dst, group
        self.device = device
        self.wire = comm_device(group)

    @torch.no_grad()
    def output_meta(self, example: torch.Tensor) -> Meta:
        """The shape and dtype of one micro-batch's output, from one forward on `example`."""
        return meta_of(self.module(example.to(self.device)))

    @torch.no_grad()
    def run(self, inputs: torch.Tensor | None, micro_batches: int) -> None:
        chunks = None
        if self.inbox is None:
            assert inputs is not None, "stage 0 runs on the batch"
            chunks = torch.tensor_split(inputs, micro_batches)
        else:
            self.inbox.post(micro_batches)
        sent: list[tuple[torch.Tensor, dist.Work]] = []
        for j in range(micro_batches):
            x = chunks[j].to(self.device) if chunks is not None else self.inbox.take(j)
            staged = on_wire(self.module(x), self.wire)
            # The staged buffer stays referenced until its send has completed.
            sent.append((staged, dist.isend(staged, self.dst, group=self.group, tag=j)))
        for _, work in sent:
            work.wait()
