"""The cluster format: the devices a plan is made for and the links between them
(`pipeplan schema cluster`). Human units and building one from flags: `pipeplan.cluster`."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, PrivateAttr, model_validator

from pipeplan.formats.base import (
    MAX_COUNT,
    Bandwidth,
    Bytes,
    Count,
    Latency,
    PosBytes,
    Strict,
    Text,
    Versioned,
)

# Defaults when neither a flag nor the profile says otherwise. PCIe 3.0 x16 inside a node,
# 25 Gbit/s Ethernet between nodes (a common cloud instance), pinned host-to-device copies.
DEFAULT_INTRA_BANDWIDTH_BYTES_PER_S = 15.75e9
DEFAULT_INTRA_LATENCY_S = 5e-6
DEFAULT_INTER_BANDWIDTH_BYTES_PER_S = 25e9 / 8
DEFAULT_INTER_LATENCY_S = 20e-6
DEFAULT_HOST_TO_DEVICE_BANDWIDTH_BYTES_PER_S = 12e9
# The AutoCache's host memory per node (`--cache-budget`), and the rate rows beyond it are read
# from and written to local disk. No profile measures a disk: 1 GB/s is a stated constant, a
# conservative figure for a local NVMe SSD (2-7 GB/s sequential) reading rows of tens of KB.
DEFAULT_CACHE_BUDGET_BYTES = 1 << 30
DEFAULT_DISK_BANDWIDTH_BYTES_PER_S = 1e9


class Link(Strict):
    """A link's fit t = latency_s + bytes / bandwidth_bytes_per_s (for an all-reduce link the
    same two numbers are used in ring terms, see `costmodel.allreduce_s`)."""

    bandwidth_bytes_per_s: Bandwidth
    latency_s: Latency = 0.0


class Cluster(Versioned):
    schema_version: Literal[1] = 1
    name: Text | None = None
    nodes: Count
    devices_per_node: Count
    device_memory_bytes: PosBytes
    intra_node: Link = Field(description="Point-to-point link between devices of one node.")
    intra_node_allreduce: Link | None = Field(
        None,
        description="All-reduce fit (ring terms) inside a node; intra_node when absent.",
    )
    inter_node: Link = Field(description="Link between nodes: each node's network link (NIC).")
    host_to_device_bandwidth_bytes_per_s: Bandwidth = Field(
        DEFAULT_HOST_TO_DEVICE_BANDWIDTH_BYTES_PER_S,
        description="Reading cached activations from host memory.",
    )
    cache_budget_bytes: Bytes = Field(
        DEFAULT_CACHE_BUDGET_BYTES,
        description="Host memory for the AutoCache per node; rows beyond it spill to disk.",
    )
    disk_bandwidth_bytes_per_s: Bandwidth = Field(
        DEFAULT_DISK_BANDWIDTH_BYTES_PER_S,
        description="Reading and writing spilled cache rows on a node's local disk (a stated "
        "constant unless given).",
    )

    # Where device_memory_bytes came from when no flag or file gave it (the profile's
    # device.memory_bytes): messages about it name that field. Not part of the format.
    _memory_source: str | None = PrivateAttr(None)

    @model_validator(mode="after")
    def _devices_in_all(self) -> Cluster:
        # The planner's search grows with the device count: bounded in all, not per field.
        if self.num_devices > MAX_COUNT:
            raise ValueError(
                f"{self.nodes} nodes × {self.devices_per_node} devices is beyond the limit of "
                f"{MAX_COUNT} devices"
            )
        return self

    @property
    def num_devices(self) -> int:
        return self.nodes * self.devices_per_node

    @property
    def allreduce_link(self) -> Link:
        return self.intra_node_allreduce or self.intra_node
