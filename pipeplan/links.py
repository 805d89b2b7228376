"""Measure the links between local ranks: point-to-point and all-reduce.

`measure_links(nproc)` spawns `nproc` processes on this host with the executor's backend (gloo
on CPU, NCCL with one GPU per rank on CUDA), times a ping-pong between ranks 0 and 1 and an
all-reduce over all ranks at several message sizes, and fits each as latency + bytes /
bandwidth (all-reduce in ring terms, the form the cost model uses). It also times what a
layout change does besides moving bytes (`_rebuild_groups`): the cost model's group rebuild.
Every collective has a timeout and the whole measurement has a deadline, so a hung peer cannot
hang the profiler.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from pydantic import ValidationError

from pipeplan.errors import BadArgumentError, PipeplanError
from pipeplan.formats import CommProfile, LinkFit, LinkSample
from pipeplan.formats.base import first_error
from pipeplan.spawn import free_port, run_ranks, scratch_directory

DEFAULT_SIZES_BYTES = (4 << 10, 64 << 10, 1 << 20, 8 << 20, 32 << 20)
COLLECTIVE_TIMEOUT_S = 60
REBUILD_REPEATS = 5  # group rebuilds timed (after one warm-up): each takes milliseconds


def _time_repeats(fn, repeats: int, warmup: int, sync) -> list[float]:
    times = []
    for i in range(warmup + repeats):
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    return times


def _worker(rank: int, nproc: int, port: int, device: str, sizes, repeats, out_path: str):
    torch.set_num_threads(1)
    backend = "nccl" if device == "cuda" else "gloo"
    if device == "cuda":
        torch.cuda.set_device(rank)
    dev = torch.device(device, rank) if device == "cuda" else torch.device("cpu")
    dist.init_process_group(
        backend,
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=nproc,
        timeout=_dt.timedelta(seconds=COLLECTIVE_TIMEOUT_S),
    )

    def sync():
        if device == "cuda":
            torch.cuda.synchronize(dev)

    results: dict[str, list] = {"p2p": [], "allreduce": []}
    try:
        for nbytes in sizes:
            buf = torch.ones(nbytes // 4, dtype=torch.float32, device=dev)

            def ping_pong(buf=buf):
                if rank == 0:
                    dist.send(buf, 1)
                    dist.recv(buf, 1)
                elif rank == 1:
                    dist.recv(buf, 0)
                    dist.send(buf, 0)

            times = _time_repeats(ping_pong, repeats, 2, sync)
            results["p2p"].append((nbytes, [t / 2 for t in times]))  # one way
            dist.barrier()
            times = _time_repeats(lambda buf=buf: dist.all_reduce(buf), repeats, 2, sync)
            # The slowest rank finishes the collective; take rank-wise maxima.
            t = torch.tensor(times, dtype=torch.float64, device=dev)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            results["allreduce"].append((nbytes, t.cpu().tolist()))
        times = [_rebuild_groups(rank, nproc, dev) for _ in range(1 + REBUILD_REPEATS)][1:]
        t = torch.tensor(times, dtype=torch.float64, device=dev)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)  # the slowest rank holds the others up
        results["group_rebuild_s"] = float(np.median(t.cpu().numpy()))
        if rank == 0:
            Path(out_path).write_text(json.dumps(results))
    finally:
        dist.destroy_process_group()


def _rebuild_groups(rank: int, nproc: int, dev: torch.device) -> float:
    """Time one layout change's group work on this rank: create a pipeline pair and a
    data-parallel pair (ranks 0 and 1; every world rank takes part in creating each, as
    executor/topology.py does), one one-element all-reduce in each (NCCL connects a group
    lazily at its first collective, which the new phase would pay), and the barrier that ends
    the change. The groups are destroyed after the clock stops, as the next change would."""
    pair = [0, 1]
    dist.barrier()  # everyone starts together: the time is the change's, not a straggler's
    t0 = time.perf_counter()
    groups = [dist.new_group(pair, timeout=_dt.timedelta(seconds=COLLECTIVE_TIMEOUT_S))]
    groups.append(dist.new_group(pair, timeout=_dt.timedelta(seconds=COLLECTIVE_TIMEOUT_S)))
    if rank in pair:
        for group in groups:
            dist.all_reduce(torch.zeros(1, device=dev), group=group)
    dist.barrier()
    elapsed = time.perf_counter() - t0
    if rank in pair:
        for group in groups:
            dist.destroy_process_group(group)
    return elapsed


def _fit(samples: list[LinkSample], latency_coef: float, bytes_coef: float) -> LinkFit:
    """Non-negative least squares of t = latency_coef·lat + bytes_coef·bytes / bw, each point
    weighted by 1/t so small messages (which fix the latency) count as much as large ones."""
    t = np.array([s.time_s for s in samples])
    b = np.array([s.bytes for s in samples], dtype=float)
    w = 1.0 / np.maximum(t, 1e-9)
    a = np.stack([np.full_like(b, latency_coef), bytes_coef * b], axis=1) * w[:, None]
    from scipy.optimize import nnls  # here: scipy.optimize slows every command's start

    (lat, inv_bw), _ = nnls(a, t * w)
    if inv_bw <= 0:  # bandwidth too high to see: bound it by the fastest large message
        inv_bw = float(min(t / (bytes_coef * b)))
    return LinkFit(latency_s=float(lat), bandwidth_bytes_per_s=1.0 / inv_bw, samples=samples)


def _samples(raw: list) -> list[LinkSample]:
    out = []
    for nbytes, times in raw:
        q1, med, q3 = np.percentile(times, [25, 50, 75])
        out.append(LinkSample(bytes=nbytes, time_s=float(med), spread_s=float(q3 - q1)))
    return out


# Measurements taken before giving up on a fit its own samples contradict (`CommProfile`'s
# check): a loaded host timed one 32 MiB message 12× what the others said, and `profile
# --nproc 2` ended in a pydantic traceback (the fifty-eighth session's rehearsal, 4 testers
# loading 2 cores).
MEASUREMENTS = 3


def measure_links(
    nproc: int,
    device: str = "cpu",
    sizes: tuple[int, ...] = DEFAULT_SIZES_BYTES,
    repeats: int = 10,
    deadline_s: float = 300.0,
) -> CommProfile:
    if nproc < 2:
        raise BadArgumentError("--nproc must be at least 2 to measure links")
    if device == "cuda" and torch.cuda.device_count() < nproc:
        raise BadArgumentError(
            f"--nproc {nproc} needs {nproc} GPUs; this host has {torch.cuda.device_count()}"
        )
    why = ""
    for _ in range(MEASUREMENTS):
        with scratch_directory("links") as tmp:
            out_path = os.path.join(tmp, "links.json")
            args = (nproc, free_port(), device, sizes, repeats, out_path)
            run_ranks(_worker, nproc, args, deadline_s, "link measurement")
            raw = json.loads(Path(out_path).read_text())
        p2p = _fit(_samples(raw["p2p"]), 1.0, 1.0)
        ring = 2.0 * (nproc - 1)
        allreduce = _fit(_samples(raw["allreduce"]), ring, ring / nproc)
        try:
            return CommProfile(
                backend="nccl" if device == "cuda" else "gloo",
                nproc=nproc,
                p2p=p2p,
                allreduce=allreduce,
                group_rebuild_s=raw["group_rebuild_s"],
            )
        except ValidationError as exc:  # a fit its own samples contradict: measured again
            why = first_error(exc)
    raise PipeplanError(
        f"link measurement: {MEASUREMENTS} measurements each gave times no latency and "
        f"bandwidth fit ({why}); the host is too busy to time its links: measure again when "
        "it is quieter"
    )
