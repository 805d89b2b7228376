"""Cluster description: the devices a plan is made for, and the links between them.

A `Cluster` (`pipeplan.formats.cluster`) is read from a JSON file or built from command-line flags
with human units (`16GiB`, `15.75GB/s`, `10Gbit/s`, `5us`). Links not given on the command line
default to what the profile measured (`Profile.comm`): the point-to-point fit for stage-to-stage
transfers and the all-reduce fit for data-parallel groups inside a node. Without a measurement
they default to the documented constants of the format.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from pathlib import Path

from pipeplan.errors import BadArgumentError, excerpt, quoted
from pipeplan.formats import Cluster, Link, Profile, RunConfig
from pipeplan.formats.base import (
    DECIMAL,
    MAX_BANDWIDTH,
    MAX_BYTES,
    MAX_COUNT,
    MAX_LATENCY_S,
    MIN_BANDWIDTH,
    spaced,
    unpadded,
)
from pipeplan.formats.cluster import (
    DEFAULT_CACHE_BUDGET_BYTES,
    DEFAULT_HOST_TO_DEVICE_BANDWIDTH_BYTES_PER_S,
    DEFAULT_INTER_BANDWIDTH_BYTES_PER_S,
    DEFAULT_INTER_LATENCY_S,
    DEFAULT_INTRA_BANDWIDTH_BYTES_PER_S,
    DEFAULT_INTRA_LATENCY_S,
)

# --------------------------------------------------------------------------- human units

# A number, then its unit: space between them is allowed ('16 GiB'), around them it is not.
_NUMBER = f"({DECIMAL})\\s*"
_UNIT = r"((?![0-9.])\S*)"  # not more digits: '016GiB' is not 0 of the unit '16GiB'
_BYTE_UNITS = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
    "pb": 10**15,  # (up to MAX_BYTES, 2**60: the ninetieth round found 1PiB an unknown unit)
    "pib": 2**50,
    "eb": 10**18,
    "eib": 2**60,
    "k": 10**3,
    "m": 10**6,
    "g": 10**9,
    "t": 10**12,
    "p": 10**15,
    "e": 10**18,
}
# A unit is quoted at most this long: the value quoted beside it shows the rest.
UNIT_SHOWN = 20
_SI = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12, "p": 1e15, "e": 1e18}
_DURATION_UNITS = {"": 1.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}


def _split(text: str | float | int, what: str, example: str) -> tuple[float, str]:
    if isinstance(text, int | float) and not isinstance(text, bool):
        return float(text), ""
    text = str(text)
    if text != text.strip():
        raise BadArgumentError(f"{what} {spaced(text)}")
    match = re.fullmatch(_NUMBER + _UNIT, text)
    if not match and re.fullmatch(_NUMBER + _UNIT, unpadded(text)):
        raise BadArgumentError(
            f"{what} {quoted(text)} has a leading zero; write {excerpt(unpadded(text))}"
        )
    if not match:
        raise BadArgumentError(f"cannot read {what} {quoted(text)} (example: {example})")
    return float(match.group(1)), match.group(2)


def parse_bytes(text: str | int | float, what: str = "size") -> int:
    """'16GiB' → 17179869184; '512MB' → 512e6; a bare number is bytes."""
    value, unit = _split(text, what, "16GiB, 512MB, 1000000")
    if unit.endswith("b") and unit != "b" and unit.lower() in _BYTE_UNITS:
        # A lower-case b is a bit in bandwidths (5Gb/s); a size is given in bytes.
        # The hint from the prefix letter alone: 'Gib' less its b is 'Gi', not a prefix.
        prefix = unit[0].upper()
        raise BadArgumentError(
            f"{what} {quoted(text)}: {quoted(unit, UNIT_SHOWN)} reads as bits; give bytes "
            f"({prefix}B or {prefix}iB)"
        )
    factor = _BYTE_UNITS.get(unit.lower())
    if factor is None:
        raise BadArgumentError(
            f"unknown unit {quoted(unit, UNIT_SHOWN)} in {what} {quoted(text)} "
            "(use B, MB, GiB, ...)"
        )
    if factor == 1 and math.isfinite(value) and not value.is_integer():  # '1.5B' was 1 byte
        raise BadArgumentError(f"{what} {quoted(text)}: a size in bytes is a whole number")
    # A fraction of a larger unit rounds to whole bytes (1.5KiB is 1536, 0.1KB 100).
    return round(_within(value * factor, 0, MAX_BYTES, what, text, "bytes"))


def _within(value: float, low: float, high: float, what: str, text, unit: str) -> float:
    """A parsed flag as a finite number inside physical bounds, or one line naming it."""
    if not math.isfinite(value) or not low <= value <= high:
        raise BadArgumentError(f"{what} {quoted(text)} is outside {low:g}..{high:g} {unit}")
    return value


def format_bytes(size: int) -> str:
    """17179869184 → '16GiB', 512000000 → '512MB', 1023 → '1023': the unit that divides
    exactly with the smallest count, so that `parse_bytes` gives the number back."""
    units = ("TiB", "GiB", "MiB", "KiB", "TB", "GB", "MB", "KB")
    exact = [(size // _BYTE_UNITS[u.lower()], u) for u in units]
    exact = [(n, u) for n, u in exact if size and n * _BYTE_UNITS[u.lower()] == size]
    return "{}{}".format(*min(exact)) if exact else str(size)


def size_text(size: int) -> str:
    """19087992 → '18.2 MiB', 3 << 29 → '1.5 GiB', 140 << 10 → '140.0 KiB', 512 → '512 bytes':
    a size as a message says it to a reader, with one decimal of the largest binary unit it
    reaches. `format_bytes` writes one that `parse_bytes` reads back, a bare byte count where
    no unit divides it (the sixty-sixth round: "the run's first checkpoint takes about
    19087992" beside "16MiB")."""
    for unit in ("TiB", "GiB", "MiB", "KiB"):
        if size >= _BYTE_UNITS[unit.lower()]:
            return f"{size / _BYTE_UNITS[unit.lower()]:,.1f} {unit}"
    return f"{size} byte" + ("" if size == 1 else "s")


def format_bandwidth(bytes_per_s: float) -> str:
    """15.75e9 → '15.75GB/s', 3.125e9 → '3.125GB/s', 5e5 → '500kB/s' (read by `parse_bandwidth`)."""
    for prefix in ("T", "G", "M", "k"):
        if bytes_per_s >= _SI[prefix.lower()]:
            return f"{bytes_per_s / _SI[prefix.lower()]:g}{prefix}B/s"
    return f"{bytes_per_s:g}B/s"


def parse_bandwidth(text: str | int | float, what: str = "bandwidth") -> float:
    """Bytes per second from '15.75GB/s', '100Gbit/s', '10Gbps', '12GiB/s', '5B/s', or a
    number (int or float: already bytes/s, as a cluster file's fields and the Python API's
    numbers are). Text needs its unit:

        parse_bandwidth("5GB/s")   # 5e9
        parse_bandwidth(5e9)       # 5e9
        parse_bandwidth("5")       # BadArgumentError: no unit
    """
    value, unit = _split(text, what, "15.75GB/s, 100Gbit/s")
    if isinstance(text, str) and not unit:
        # '--intra-bw 5' was 5 bytes/s: the unit forgotten, not a link a million times slower
        # than any real one, and the plan silently fell back to one device (thirty-second round).
        raise BadArgumentError(f"{what} {quoted(text)} has no unit: {_unit_hint(value)}")
    if not unit:  # a number: bytes/s already
        return _within(value, MIN_BANDWIDTH, MAX_BANDWIDTH, what, text, "bytes/s")
    if not unit.endswith(("/s", "ps")):  # '5GB' is a size: a typo, not 5 GB/s
        raise BadArgumentError(f"{what} {quoted(text)} is not a rate (use e.g. GB/s, Gbit/s, Gbps)")
    unit = unit.removesuffix("/s").removesuffix("ps")
    # IEC's binary bits too (Gibit/s, as Gib/s; the fifty-first round), peta, and exa (past
    # the bound, but a unit: the ninety-third round's 1EB/s was "unknown unit").
    match = re.fullmatch(r"([kKmMgGtTpPeE]?)(i?)(bit|b|B|byte|Byte)", unit)
    if not match:
        # Bytes or bits said: '5/s' was 5 bytes/s, the unit forgotten, and '10G/s' read as
        # 10 GB/s where 10 Gbit/s may be meant, 8 times less (forty-ninth round).
        raise BadArgumentError(
            f"unknown unit in {what} {quoted(text)} (use e.g. GB/s, GiB/s, Gbit/s, Gbps: bytes "
            "or bits said)"
        )
    prefix, binary, base = match.group(1).lower(), match.group(2), match.group(3) or "B"
    scale = (2 ** (10 * "kmgtpe".index(prefix) + 10) if prefix else 1) if binary else _SI[prefix]
    bits = base in ("bit", "b")
    result = value * scale / (8 if bits else 1)
    return _within(result, MIN_BANDWIDTH, MAX_BANDWIDTH, what, text, "bytes/s")


def _unit_hint(value: float) -> str:
    """`_unit_hint(5e9)` → 'give it; read as bytes/s, it is 5GB/s or 40Gbit/s': the bare
    number read as bytes/s (as a cluster file's and the Python API's numbers are), written
    with its unit in bytes and in bits. The sixty-eighth round: '5000000000' was told "e.g.
    5e+09GB/s", refused as beyond 1 PB/s, and '400000' "400000GB/s", accepted as a link 10^9
    times faster than the number in bytes/s. Outside the bounds no number is suggested: none
    reads the same."""
    if not MIN_BANDWIDTH <= value <= MAX_BANDWIDTH:  # NaN, inf too
        bounds = f"{MIN_BANDWIDTH:g}..{MAX_BANDWIDTH:g}"
        return f"give it (GB/s, Gbit/s, ...); read as bytes/s, it is outside {bounds} bytes/s"
    as_bytes, as_bits = _rate_text(value, "B"), _rate_text(value * 8, "bit")
    return f"give it; read as bytes/s, it is {as_bytes} or {as_bits}"


def _rate_text(rate: float, base: str) -> str:
    """`_rate_text(4e10, "bit")` → '40Gbit/s': the largest SI prefix the rate reaches, with
    15 significant digits (what a float holds without noise: 1e15 is not '1e+15B/s')."""
    prefix = next((p for p in ("P", "T", "G", "M", "k") if rate >= _SI[p.lower()]), "")
    return f"{rate / _SI[prefix.lower()]:.15g}{prefix}{base}/s"


def parse_duration(text: str | int | float, what: str = "duration") -> float:
    """Seconds from '5us', '1.5ms', '2s' or a bare number of seconds."""
    value, unit = _split(text, what, "5us, 1.5ms, 0.002")
    factor = _DURATION_UNITS.get(unit.lower() if unit != "µs" else unit)
    if factor is None:
        raise BadArgumentError(
            f"unknown unit {quoted(unit, UNIT_SHOWN)} in {what} {quoted(text)} (use s, ms, us, ns)"
        )
    return _within(value * factor, 0, MAX_LATENCY_S, what, text, "s")


# --------------------------------------------------------------------------- builder


def cluster_from_flags(
    *,
    nodes: int,
    devices_per_node: int,
    device_memory: str | int | None = None,
    intra_bw: str | float | None = None,
    intra_latency: str | float | None = None,
    inter_bw: str | float | None = None,
    inter_latency: str | float | None = None,
    host_to_device_bw: str | float | None = None,
    cache_budget: int = DEFAULT_CACHE_BUDGET_BYTES,
    name: str | None = None,
    profile: Profile | None = None,
    devices_flag: str = "--devices-per-node",
) -> Cluster:
    """Build a Cluster from CLI flags. Unset links come from `profile.comm` where measured,
    else from the DEFAULT_* constants; unset device memory is what the profiled device offers
    one of a node's devices (`profile_device_memory`; `devices_flag` names the flag that
    gave their count, in messages).

        cluster_from_flags(nodes=2, devices_per_node=8, device_memory="16GiB")
        cluster_from_flags(nodes=1, devices_per_node=2, profile=cpu_profile)  # host memory // 2
    """
    for flag, count in (("--nodes", nodes), ("--devices-per-node", devices_per_node)):
        if count < 1:
            raise BadArgumentError(f"{flag} must be at least 1 (got {count})")
    # The planner's search grows with the device count: the limit is on all of them together.
    if nodes * devices_per_node > MAX_COUNT:
        raise BadArgumentError(
            f"--nodes {nodes} × --devices-per-node {devices_per_node} devices is beyond the "
            f"limit of {MAX_COUNT}"
        )
    if device_memory is None:
        if profile is None:
            raise BadArgumentError("give --device-memory (e.g. 16GiB)")
        memory_bytes = profile_device_memory(profile, devices_per_node, devices_flag)
    else:
        memory_bytes = parse_bytes(device_memory, "--device-memory")
        # Only the flag's value is the flag's fault: a message naming --device-memory for the
        # profile's memory named a flag the user never gave ("got 'None'").
        if memory_bytes <= 0:
            raise BadArgumentError(
                f"--device-memory must be positive (got {quoted(device_memory)})"
            )

    measured, measured_allreduce = profiled_links(profile)
    intra = Link(
        bandwidth_bytes_per_s=measured.bandwidth_bytes_per_s
        if intra_bw is None
        else parse_bandwidth(intra_bw, "--intra-bw"),
        latency_s=measured.latency_s
        if intra_latency is None
        else parse_duration(intra_latency, "--intra-latency"),
    )
    # A measured all-reduce fit is only meaningful while the user keeps the measured link.
    given = intra_bw is not None or intra_latency is not None
    allreduce = None if given else measured_allreduce
    inter = Link(
        bandwidth_bytes_per_s=DEFAULT_INTER_BANDWIDTH_BYTES_PER_S
        if inter_bw is None
        else parse_bandwidth(inter_bw, "--inter-bw"),
        latency_s=DEFAULT_INTER_LATENCY_S
        if inter_latency is None
        else parse_duration(inter_latency, "--inter-latency"),
    )
    h2d = (
        DEFAULT_HOST_TO_DEVICE_BANDWIDTH_BYTES_PER_S
        if host_to_device_bw is None
        else parse_bandwidth(host_to_device_bw, "--host-to-device-bw")
    )
    cluster = Cluster(
        name=name,
        nodes=nodes,
        devices_per_node=devices_per_node,
        device_memory_bytes=memory_bytes,
        intra_node=intra,
        intra_node_allreduce=allreduce,
        inter_node=inter,
        host_to_device_bandwidth_bytes_per_s=h2d,
        cache_budget_bytes=cache_budget,
    )
    if device_memory is None and profile is not None:  # the profile's, not a flag's: say so
        cluster._memory_source = memory_source(profile, devices_per_node, devices_flag)
    return cluster


def profiled_links(profile: Profile | None) -> tuple[Link, Link | None]:
    """The in-node links a cluster takes when no flag gives them: the profile's measured
    point-to-point and all-reduce fits (`Profile.comm`), else the format's default
    point-to-point link and no all-reduce fit of its own (`Cluster.allreduce_link` is then the
    point-to-point one). The links of the machine a profile measured, which a calibration's
    runs (planned on `run_cluster`) were priced on: the cost model applies a calibration's
    fitted links in place of these only (`costmodel.in_node_links`).

        p2p, allreduce = profiled_links(profile)
    """
    comm = profile.comm if profile is not None else None
    if comm is None:
        return Link(
            bandwidth_bytes_per_s=DEFAULT_INTRA_BANDWIDTH_BYTES_PER_S,
            latency_s=DEFAULT_INTRA_LATENCY_S,
        ), None
    p2p, allreduce = comm.p2p, comm.allreduce
    return (
        Link(bandwidth_bytes_per_s=p2p.bandwidth_bytes_per_s, latency_s=p2p.latency_s),
        Link(bandwidth_bytes_per_s=allreduce.bandwidth_bytes_per_s, latency_s=allreduce.latency_s),
    )


def default_links(profile: Profile, shapes: list[tuple[int, int]]) -> list[str]:
    """The in-node links ("p2p", "all-reduce") that layouts of `shapes` (stages, replicas)
    use (a pipeline's p2p, replicas' all-reduce) and price on the format's defaults, a GPU's:
    `profile` measured no links (no `comm`: profiled without --nproc) and no calibration
    fitted them. For a cluster whose in-node links no flag or file gave.

        default_links(profile, [(1, 2)])   # ["all-reduce"] for a profile without comm
    """
    if profile.comm is not None:
        return []
    calibration = profile.calibration
    fitted = {
        "p2p": calibration and calibration.p2p,
        "all-reduce": calibration and calibration.allreduce,
    }
    used = {"p2p": any(s > 1 for s, _ in shapes), "all-reduce": any(d > 1 for _, d in shapes)}
    return [name for name in fitted if used[name] and fitted[name] is None]


def default_links_warning(profile: str, links: list[str], measure: str) -> str:
    """The `pipeplan: WARNING:` line for `default_links`: `profile` names the profile,
    `measure` says how to measure the links. Found by the sixty-fourth round: a run on 2 CPU
    ranks from the README's profile (no --nproc) priced its all-reduce on a GPU's link, 17 µs
    for 10-17 ms measured, and nothing said so."""
    link = profiled_links(None)[0]
    return (
        f"{profile} measured no links (no comm: profiled without --nproc): the "
        f"{' and '.join(links)} between ranks {'are' if len(links) > 1 else 'is'} priced on the "
        "format's default in-node link, "
        f"{link.latency_s * 1e6:.0f} µs + {format_bandwidth(link.bandwidth_bytes_per_s)} (a "
        f"GPU's), not this machine's; {measure}"
    )


def run_cluster(config: RunConfig, profile: Profile, host: HostRanks | None = None) -> Cluster:
    """The cluster a run without a plan plans for: its ranks on the nodes they run on
    (`host.nodes`, each with an equal share of --nproc: one node for a local run; torchrun's
    WORLD_SIZE / LOCAL_WORLD_SIZE, `executor.launch.host_ranks`), links as profiled inside a
    node and `pipeplan plan`'s defaults between nodes (`cluster_from_flags`: a run has no
    --inter-bw; `run --plan` of a plan made with one runs on its links), each rank limited to
    what it has (`rank_memory`: --device-memory, else the profiled device's share among a
    node's ranks, the same as `pipeplan plan --nodes N --devices-per-node K` gives, so a plan
    made on this host with those flags is the run's own, but no more than this host's); each
    node's cache limited to --cache-budget. `host`: the ranks that share this host, as
    `rank_memory` takes them; None, all of --nproc on one node.

        cluster = run_cluster(config, profile)   # config.nproc devices on one node
        run_cluster(config, profile, HostRanks(1, named, nodes=2))   # 2 nodes × 1 rank
    """
    # Found by the thirty-eighth round: a run started by torchrun on 2 nodes of 1 rank was
    # planned, priced and recorded as one node of 2 (its all-reduce on the in-node link, one
    # AutoCache for both replicas, each rank half of its host's memory).
    nodes = 1 if host is None else host.nodes
    per_node = config.nproc // nodes
    flag = "--nproc" if nodes == 1 else "LOCAL_WORLD_SIZE"  # the count that says it
    memory, source = rank_memory(config, profile, per_node, flag, host=host)
    cluster = cluster_from_flags(
        nodes=nodes,
        devices_per_node=per_node,
        device_memory=memory,
        cache_budget=config.cache_budget_bytes,
        profile=profile,
        devices_flag=flag,
    )
    cluster._memory_source = source  # no flag gave it: messages say where it came from
    return cluster


@dataclass(frozen=True)
class HostRanks:
    """The ranks of a run that share this host's memory, which its --device-memory is held
    to (`check_device_memory_flag`), and how a refusal names them. Found by the thirty-fifth
    round: the check held every run to all of its --nproc ranks on this host, and said so, for
    a run prepared for torchrun on several nodes and for a resume's --nproc given against the
    run's own --device-memory, which a resume cannot change.

    `count`: the ranks known to run here; `named`: how the message names them ("--nproc 2
    ranks"; None where only one is sure: a run prepared for torchrun, whose nodes are not
    known yet); `run_json`: the run's file its --device-memory comes from (a resume,
    torchrun's entry and ranks), None where it is a flag of this command; `fewer`: how to
    run K of them here, with "{k}" for K ("resume with --nproc {k}"; " or fewer" follows);
    `nodes`: the nodes the run's ranks are on, each running as many (torchrun's WORLD_SIZE /
    LOCAL_WORLD_SIZE, `count` on each), which its phases are planned for (`run_cluster`); 1
    for a local run, and for a run prepared for torchrun, whose planning then is only a check.

        HostRanks(2, "--nproc 2 ranks")                  # `pipeplan run --nproc 2`
        HostRanks(1, None)                               # `run --prepare-only`
        HostRanks(2, "--nproc 2 ranks", Path("runs/c/run.json"), "resume with --nproc {k}")
        HostRanks(1, "the 1 ranks torchrun starts on this node …", run_json, fewer, nodes=2)
    """

    count: int
    named: str | None
    run_json: Path | None = None
    fewer: str | None = None
    nodes: int = 1


def rank_memory(
    config: RunConfig,
    profile: Profile,
    per_node: int | None = None,
    per_node_flag: str = "--nproc",
    host: HostRanks | None = None,
) -> tuple[int, str | None]:
    """The memory one rank of a run has, for `run` with or without a plan: the
    --device-memory given (the user's word; its source None), held to what this host has for
    the ranks that share it (`host`; left out, the `per_node` ranks of a node, or all of
    --nproc, on this host: `check_device_memory_flag`), else what the profiled device
    offers one of the `per_node` ranks on a node (`profile_device_memory`; a local run's
    --nproc, a plan's devices per node, named by `per_node_flag`), but not more than this
    host's device offers one (`host_device_memory`) by more than the planner's reserve. A
    profile is a measurement of some host, maybe a larger one (or one edited to claim it):
    trusted alone, `run --plan` ran a plan giving each rank 512 GiB on a 23 GiB host, and
    `run` planned its own phases for such ranks (thirty-second round). The source says where
    the memory came from, for messages.

        memory, source = rank_memory(cfg, profile)
        # (12637995008, "this host's memory 25275990016 shared by --nproc 2")
        rank_memory(cfg, profile, plan.inputs.cluster.devices_per_node, "--devices-per-node")
    """
    from pipeplan.costmodel import RESERVE_BYTES  # numpy: only for a run

    ranks, kind = per_node or config.nproc, profile.device.kind
    here = host_device_memory(kind)
    if config.device_memory_bytes is not None:
        host = host or HostRanks(ranks, f"{per_node_flag} {ranks} ranks")
        check_device_memory_flag(config.device_memory_bytes, here, kind, host)
        return config.device_memory_bytes, None
    profiled = profile_device_memory(profile, ranks, per_node_flag)
    share = None if here is None else here if kind == "cuda" else here // ranks
    # Within the planner's reserve of the profiled share this host is the profiled one: a
    # host's memory as reported differs by some pages between boots and kernels (the shipped
    # profiles' host had 73,728 bytes more than the machine that tests them), and the planner
    # keeps the reserve free on each device for what it does not count, so layouts planned
    # for the profiled share still fit. Refusing a plan made here from a shipped profile, for
    # 36 KiB a rank, would say nothing true.
    if share is None or share >= profiled - RESERVE_BYTES[kind]:
        return profiled, memory_source(profile, ranks, per_node_flag)
    if kind == "cuda":  # each rank has a GPU of its own
        return share, f"this host's GPU memory {here}"
    return share, f"this host's memory {here} shared by {per_node_flag} {ranks}"


def check_device_memory_flag(given: int, here: int | None, kind: str, host: HostRanks) -> None:
    """Refuses a run's --device-memory (`given` bytes for each rank) that this host does not
    have: on cuda, more than one GPU's total memory (`here`, `host_device_memory(kind)`; None
    where it cannot be told: nothing to hold it to), each rank having its own; on cpu, more
    than the least of the limits each rank is under (`models.memory_limits`): a `ulimit -v`
    or `-d` is each rank's own (a process's, which the ranks inherit), its physical memory
    and a cgroup's limit the ranks on this host (`host`) share. Found by the thirty-third
    round: `run --device-memory 512GB` on a 23 GiB CPU host was accepted, and the planner
    chose layouts for memory that does not exist; by the thirty-fifth, the same under a
    `ulimit -v` of 4 GB for an 8GiB flag, the host's physical memory being all it was held
    to. The flag may only lower what a rank has (to make a small model need a pipeline), as
    `rank_memory`'s default is never more than this host's either. A --device-memory from
    the run's own run.json (a resume, torchrun) is named as the run's, and the refusal says
    what runs instead: fewer ranks here (`host.fewer`), or a new run.

        check_device_memory_flag(512 * 10**9, None, "cpu", HostRanks(1, None))
        # BadArgumentError: --device-memory 512GB is more than this machine's 23.5 GiB …
    """
    said = f"--device-memory {format_bytes(given)}"
    if host.run_json is not None:  # not a flag of this command: the run's, which it keeps
        said = f"{host.run_json}: the run's {said}"

    def new_run(most: int) -> str:  # whole MiB, as a user types
        flag = f"--device-memory {format_bytes(max(most >> 20 << 20, 1))} or less"
        return f"give {flag}" if host.run_json is None else f"start a new run with {flag}"

    if kind == "cuda":
        if here is not None and given > here:
            raise BadArgumentError(
                f"{said} is more than this host's GPU memory "
                f"({here / (1 << 30):.1f} GiB, {here} bytes)"
                + ("" if host.run_json is None else f"; {new_run(here)}")
            )
        return
    from pipeplan.models import memory_limits  # torch: only for a run, which has it

    # (what each rank may have of it, the limit, what sets it): a ulimit is each rank's own.
    each = [
        (limit if what.startswith("ulimit") else limit // host.count, limit, what)
        for limit, _, what in memory_limits()
    ]
    if not each or given <= min(each)[0]:
        return
    most = min(each)[0]  # what the advice gives: within every limit
    own = [(limit, what) for _, limit, what in each if what.startswith("ulimit")]
    if own and given > min(own)[0]:  # one rank alone would not have it: fewer do not help
        (limit, what), alone = min(own), True
    else:  # a limit the ranks here share: fewer of them may fit
        limit, what = min((limit, what) for _, limit, what in each if (limit, what) not in own)
        alone = host.count == 1 or given > limit
    words = f"{limit / (1 << 30):.1f} GiB"
    if what == "its physical memory":
        words = f"this machine's {words} of memory ({limit} bytes)"
    else:  # "the 3.8 GiB of memory ulimit -v allows each process (4096000000 bytes)"
        whom = " each process" if (limit, what) in own else ""
        words = f"the {words} of memory {what} allows{whom} ({limit} bytes)"
    if alone:  # no count of ranks here makes it fit
        advice = "" if host.run_json is None else f"; {new_run(most)}"
        raise BadArgumentError(f"{said} is more than {words}{advice}")
    fits = limit // given  # the ranks here it fits: at least 1 (given <= limit)
    instead = []
    if host.fewer is not None:
        instead.append(host.fewer.format(k=fits) + (" or fewer" if fits > 1 else ""))
    raise BadArgumentError(
        f"{said} for each of {host.named} is more than {words}, which they share; "
        + ", or ".join([*instead, new_run(most)])
    )


def host_device_memory(kind: str) -> int | None:
    """The memory of one device of this host, measured as `pipeplan profile` records a
    profile's `device.memory_bytes`: a GPU's own (cuda: the current one), or the host's
    physical memory (cpu, which its ranks share); None where it cannot be told (no GPU here).

        host_device_memory("cpu")    # 25275990016
    """
    if kind == "cuda":
        import torch  # only here: plan and preview never ask, and stay light

        if not torch.cuda.is_available():
            return None
        return torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):  # not a POSIX host that tells
        return None


def profile_device_memory(
    profile: Profile, devices_per_node: int, devices_flag: str = "--devices-per-node"
) -> int:
    """The memory one device of a node has when no --device-memory says, for every command that
    builds a cluster from a profile (plan, preview, run): a GPU's memory is its own; a CPU
    profile's memory is its host's, which the node's devices (its ranks) share equally.
    Planning a CPU node's devices each with the host's whole memory let `plan` choose layouts
    that together need N times the host's memory and that `run` of the same host refused
    (twenty-ninth round).

        profile_device_memory(h200_profile, 8)   # one H200's memory
        profile_device_memory(cpu_profile, 2)    # half the host's memory
        profile_device_memory(cpu_profile, cfg.nproc, "--nproc")   # one rank's share
    """
    if profile.device.kind == "cuda":
        return profile.device.memory_bytes  # ≥ 1: the profile format says so
    share = profile.device.memory_bytes // devices_per_node
    if share < 1:  # no flag gave it: the message names the profile's field
        raise BadArgumentError(
            f"the profile's device.memory_bytes {profile.device.memory_bytes} is less than a "
            f"byte for each of the {devices_per_node} devices ({devices_flag} "
            f"{devices_per_node}) sharing it; give --device-memory"
        )
    return share


def memory_source(profile: Profile, devices_per_node: int, devices_flag: str) -> str:
    """Where `profile_device_memory` took a device's memory from, for messages about it:
    "the profile's device.memory_bytes 25276063744 shared by --nproc 2"."""
    total = profile.device.memory_bytes
    source = f"the profile's device.memory_bytes {total}"
    if profile_device_memory(profile, devices_per_node, devices_flag) == total:
        return source
    return f"{source} shared by {devices_flag} {devices_per_node}"
