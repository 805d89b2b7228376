"""Who does what in one phase: rank ↔ (replica, stage), and the process groups.

Every rank creates every group, in the same order (torch.distributed requires it), and keeps
the two it belongs to: its replica's pipeline group and its stage's data-parallel group. A rank
the plan leaves out (S·D < world size) is idle for the phase but still takes part in group
creation and in the global collectives of a transition.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta

import torch.distributed as dist


@dataclass
class Topology:
    rank: int
    rank_map: tuple[tuple[int, ...], ...]  # [replica][stage] → global rank
    replica: int | None
    stage: int | None
    pipeline_group: dist.ProcessGroup | None = None
    dp_group: dist.ProcessGroup | None = None
    _groups: tuple[dist.ProcessGroup, ...] = ()

    @property
    def num_stages(self) -> int:
        return len(self.rank_map[0])

    @property
    def replicas(self) -> int:
        return len(self.rank_map)

    @property
    def active(self) -> bool:
        return self.stage is not None

    def owner(self, stage: int, replica: int = 0) -> int:
        return self.rank_map[replica][stage]

    def destroy(self) -> None:
        for group in self._groups:
            dist.destroy_process_group(group)
        self._groups, self.pipeline_group, self.dp_group = (), None, None


def place(rank: int, rank_map: Sequence[Sequence[int]]) -> tuple[int | None, int | None]:
    for replica, ranks in enumerate(rank_map):
        if rank in ranks:
            return replica, list(ranks).index(rank)
    return None, None


def build_topology(
    rank: int, rank_map: Sequence[Sequence[int]], timeout: timedelta | None = None
) -> Topology:
    """Create all pipeline and data-parallel groups of a phase (collective over the world).
    Their collectives fail after `timeout` (None: torch's default for new groups, not the
    world group's timeout)."""
    rank_map = tuple(tuple(int(r) for r in row) for row in rank_map)
    for row in rank_map:
        # new_group orders members by global rank; stage s must be group rank s.
        if list(row) != sorted(row):
            raise ValueError(f"pipeline ranks must increase with the stage index: {row}")
    replica, stage = place(rank, rank_map)
    topo = Topology(rank, rank_map, replica, stage)
    for r, row in enumerate(rank_map):
        group = dist.new_group(list(row), timeout=timeout)
        if r == replica:
            topo.pipeline_group = group
    for s in range(len(rank_map[0])):
        group = dist.new_group([row[s] for row in rank_map], timeout=timeout)
        if s == stage:
            topo.dp_group = group
    # Only groups this rank belongs to are real objects to destroy later.
    topo._groups = tuple(g for g in (topo.pipeline_group, topo.dp_group) if g is not None)
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
