"""Elastic transition: move parameters and optimizer state to their owners in the new layout.

Every rank builds the whole LayerSequence once, but only the ranks that own a layer keep it
current. When the layout changes, each layer's current values go from its old owner (replica 0
of the stage that held it) to every rank of the stage that holds it next: parameters, buffers
and, for layers that stay active, the AdamW state. Layers that become frozen drop their
optimizer state (PipeTransformer rebuilt optimizers every epoch and lost it; this keeps it).
Transfers are point-to-point, posted all at once with a tag per tensor, so a rank only sends
and receives what changes hands. Every tensor travels on the group's device
(`executor.topology.comm_device`): under NCCL a CPU tensor (AdamW's `state["step"]`, a layer
still on the host) is staged through the rank's GPU and copied back, under gloo a GPU tensor
through the host.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn

from executor.topology import comm_device
from pipeplan.formats import Layout

OptimizerState = dict[str, torch.Tensor]
ADAMW_STATE_KEYS = ("step", "exp_avg", "exp_avg_sq")


@dataclass(frozen=True)
class Move:
    layer: int
    src: int
    dsts: tuple[int, ...]


def moves(old: Layout, new: Layout, num_layers: int) -> list[Move]:
    """For every layer: who has its current state and which ranks need it next."""
    result = []
    for layer in range(num_layers):
        src = old.rank_map[0][old.stage_of_layer(layer)]
        stage = new.stage_of_layer(layer)
        dsts = tuple(row[stage] for row in new.rank_map if row[stage] != src)
        result.append(Move(layer, src, dsts))
    return result


def _layer_tensors(layer: nn.Module) -> list[torch.Tensor]:
    return [p.data for p in layer.parameters()] + list(layer.buffers())


def migrate(
    layers: nn.ModuleList,
    old: Layout,
    old_states: dict[nn.Parameter, OptimizerState],
    new: Layout,
    rank: int,
    group: dist.ProcessGroup | None = None,
) -> dict[nn.Parameter, OptimizerState]:
    """Collective over `group` (default: the world; ranks are global ranks either way).
    Returns the optimizer state this rank needs for the active parameters it owns in `new`
    (taken from `old_states` when it already held them)."""
    wire = comm_device(group)
    requests: list[dist.Work] = []
    in_flight: list[torch.Tensor] = []  # keep sent buffers alive until their sends complete
    landing: list[tuple[torch.Tensor, torch.Tensor]] = []  # (staged receive, its destination)
    received: dict[nn.Parameter, OptimizerState] = {}
    tag = 0  # every rank numbers every tensor of every move the same way
    for move in moves(old, new, len(layers)):
        layer = layers[move.layer]
        keeps_state = move.layer >= new.frozen_layers and move.layer >= old.frozen_layers
        tensors = _layer_tensors(layer)
        if keeps_state:
            for p in layer.parameters():
                if rank == move.src:
                    # A parameter that never stepped has AdamW's initial state: zeros.
                    state = old_states.get(p) or empty_adamw_state(p)
                elif rank in move.dsts:
                    state = received[p] = empty_adamw_state(p)
                else:
                    state = dict.fromkeys(ADAMW_STATE_KEYS)  # not involved: placeholders
                tensors += [state[k] for k in ADAMW_STATE_KEYS]
        for tensor in tensors:
            if rank == move.src:
                staged = on_wire(tensor, wire)
                for dst in move.dsts:
                    in_flight.append(staged)
                    requests.append(dist.isend(staged, dst, group=group, tag=tag))
            elif rank in move.dsts:
                buffer = on_wire(tensor, wire)
                if buffer is not tensor:
                    landing.append((buffer, tensor))
                requests.append(dist.irecv(buffer, move.src, group=group, tag=tag))
            tag += 1
    for request in requests:
        request.wait()
    for buffer, tensor in landing:
        tensor.copy_(buffer)
    states: dict[nn.Parameter, OptimizerState] = {}
    for move in moves(old, new, len(layers)):
        if move.layer < new.frozen_layers or not (rank == move.src or rank in move.dsts):
            continue
        for p in layers[move.layer].parameters():
            state = received.get(p, old_states.get(p))
            if state is not None:
                states[p] = state
    return states


def on_wire(tensor: torch.Tensor, wire: torch.device) -> torch.Tensor:
    """`tensor` itself when a transfer can use it in place (contiguous, on the wire's device),
    else a contiguous copy on `wire`."""
    if tensor.device == wire and tensor.is_contiguous():
        return tensor
    return tensor.to(wire, memory_format=torch.contiguous_format, copy=True)


def empty_adamw_state(p: nn.Parameter) -> OptimizerState:
    return {
        "step": torch.zeros((), dtype=torch.float32),
        "exp_avg": torch.zeros_like(p, memory_format=torch.preserve_format),
        "exp_avg_sq": torch.zeros_like(p, memory_format=torch.preserve_format),
    }


def optimizer_states(optimizer: torch.optim.Optimizer | None) -> dict[nn.Parameter, OptimizerState]:
    if optimizer is None:
        return {}
    return {p: dict(s) for p, s in optimizer.state.items() if s}


def install_states(
    optimizer: torch.optim.Optimizer | None, states: dict[nn.Parameter, OptimizerState]
) -> None:
    if optimizer is None:
        return
    for group in optimizer.param_groups:
        for p in group["params"]:
            if p in states:
                optimizer.state[p] = on_param_device(p, states[p])


def on_param_device(p: nn.Parameter, state: OptimizerState) -> OptimizerState:
    """AdamW's state where AdamW keeps it: the moments beside their parameter (a state
    received or loaded on the host while the parameter moved to its GPU), `step` as it is (a
    CPU scalar unless AdamW is fused or capturable)."""
    return {k: v if k == "step" else v.to(p.device) for k, v in state.items()}
