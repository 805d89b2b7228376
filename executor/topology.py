"""Who does what in one phase: rank ↔ (replica, stage), and the process groups.

Every rank creates every group, in the same order (torch.distributed requires it), and keeps
the ones it belongs to: its replica's pipeline group and its stage's data-parallel group. A rank
the plan leaves out (S·D < world size) is idle for the phase but still takes part in group
creation and in the global collectives of a transition.

A layout with k forward-only leading stages (`Layout.forward_only_stages`) splits each replica's
row: stages 0..k−1 and stage k form its feed group (activations flow down it, nothing comes
back), stages k..S−1 its pipeline group (torch's schedule runs them), and only stages k..S−1
have data-parallel groups (forward-only stages have no gradients to average).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

from pipeplan.formats.layout import check_rank_order

# The world group over gloo that init_distributed adds beside an NCCL world: host-side work
# (checkpoint gathers on CPU) goes through it.
_host_group: list[dist.ProcessGroup] = []


def backend_device(backend: str, local_rank: int) -> torch.device:
    """`backend_device("nccl", 1)` → cuda:1; `backend_device("gloo", 1)` → cpu: where the
    tensors of a collective on that backend must live. A device-mapped backend
    ("cpu:gloo,cuda:nccl") sends device tensors through its CUDA part: that is where the
    runtime's data already is, and the CPU part exists for host metadata."""
    parts = backend.lower().split(",")
    devices = {part.partition(":")[0] for part in parts if ":" in part}
    names = {part.rpartition(":")[2] for part in parts}
    if "cuda" in devices or "nccl" in names:
        return torch.device("cuda", local_rank)
    if names == {"gloo"} and devices <= {"cpu"}:
        return torch.device("cpu")
    raise ValueError(f"no device known for process-group backend {backend!r}")


def comm_device(group: dist.ProcessGroup | None = None) -> torch.device:
    """The device every tensor passed to a collective or send/recv on `group` (default: the
    world) must be on: this rank's GPU under NCCL (LOCAL_RANK, as torchrun numbers the ranks
    of a node), the CPU under gloo. The one place that knows it; callers move with `.to()`."""
    return backend_device(str(dist.get_backend(group)), int(os.environ.get("LOCAL_RANK", 0)))


def set_host_group(group: dist.ProcessGroup | None) -> None:
    """Remember the world's gloo group (init_distributed makes one under NCCL)."""
    _host_group[:] = [group] if group is not None else []


def host_group() -> dist.ProcessGroup | None:
    """A world group whose collectives take CPU tensors: the gloo group beside an NCCL world,
    else the world group itself (None) when the world already runs on gloo."""
    if _host_group:
        return _host_group[0]
    if comm_device().type != "cpu":
        raise RuntimeError("the world runs on a device backend and has no gloo group")
    return None


@dataclass
class Topology:
    rank: int
    rank_map: tuple[tuple[int, ...], ...]  # [replica][stage] → global rank
    replica: int | None
    stage: int | None
    forward_only_stages: int = 0  # k: stages 0..k-1 of each replica run forward only
    pipeline_group: dist.ProcessGroup | None = None  # this replica's stages k..S-1
    dp_group: dist.ProcessGroup | None = None  # this stage's replicas (a stage ≥ k)
    feed_group: dist.ProcessGroup | None = None  # this replica's stages 0..k (when k > 0)
    _groups: tuple[dist.ProcessGroup, ...] = ()

    @property
    def num_stages(self) -> int:
        return len(self.rank_map[0])

    @property
    def replicas(self) -> int:
        return len(self.rank_map)

    @property
    def active(self) -> bool:
        """Whether this rank runs a stage of the phase (trained or forward-only)."""
        return self.stage is not None

    @property
    def forward_only(self) -> bool:
        """Whether this rank's stage runs forward only (a stage before k)."""
        return self.stage is not None and self.stage < self.forward_only_stages

    def feed_peer(self, offset: int) -> int:
        """The global rank of the stage `offset` stages after this one in its replica (−1:
        the one before): where a forward-only stage sends, and where stage k receives from."""
        return self.rank_map[self.replica][self.stage + offset]

    def owner(self, stage: int, replica: int = 0) -> int:
        return self.rank_map[replica][stage]

    def destroy(self) -> None:
        for group in self._groups:
            dist.destroy_process_group(group)
        self._groups, self.pipeline_group, self.dp_group, self.feed_group = (), None, None, None


def place(rank: int, rank_map: Sequence[Sequence[int]]) -> tuple[int | None, int | None]:
    for replica, ranks in enumerate(rank_map):
        if rank in ranks:
            return replica, list(ranks).index(rank)
    return None, None


def build_topology(
    rank: int,
    rank_map: Sequence[Sequence[int]],
    timeout: timedelta | None = None,
    forward_only_stages: int = 0,
) -> Topology:
    """Create all pipeline, data-parallel and feed groups of a phase (collective over the
    world). Their collectives fail after `timeout` (None: torch's default for new groups, not
    the world group's timeout). `forward_only_stages`: k, as the layout says."""
    rank_map = tuple(tuple(int(r) for r in row) for row in rank_map)
    # new_group orders members by global rank; stage s must be group rank s (or s − k). The
    # layout's own check (`Layout.check`, applied to every plan, record and checkpoint before
    # any rank starts) holds the rule: this is the same function, for a map given directly.
    check_rank_order(rank_map)
    k = forward_only_stages
    replica, stage = place(rank, rank_map)
    topo = Topology(rank, rank_map, replica, stage, k)
    for r, row in enumerate(rank_map):
        group = dist.new_group(list(row[k:]), timeout=timeout)
        if r == replica and stage >= k:
            topo.pipeline_group = group
    for s in range(k, len(rank_map[0])):
        group = dist.new_group([row[s] for row in rank_map], timeout=timeout)
        if s == stage:
            topo.dp_group = group
    if k:
        for r, row in enumerate(rank_map):
            group = dist.new_group(list(row[: k + 1]), timeout=timeout)
            if r == replica and stage <= k:
                topo.feed_group = group
    # Only groups this rank belongs to are real objects to destroy later.
    groups = (topo.pipeline_group, topo.dp_group, topo.feed_group)
    topo._groups = tuple(g for g in groups if g is not None)
    return topo


def node_peers(rank: int, world: int, value: object) -> tuple[list[int], int, object]:
    """Collective over the world: `node_peers(rank, world, my_choice)` → (the global ranks on
    this rank's host, ascending; this host's index among the hosts in order of their lowest
    rank; the `value` the lowest rank on this host passed). A node is a host: what its ranks
    share is its memory (/dev/shm) and its disks."""
    rows: list[tuple[str, object] | None] = [None] * world
    dist.all_gather_object(rows, (socket.gethostname(), value))
    hosts = [row[0] for row in rows]
    mine = hosts[rank]
    peers = [r for r, host in enumerate(hosts) if host == mine]
    return peers, list(dict.fromkeys(hosts)).index(mine), rows[peers[0]][1]
