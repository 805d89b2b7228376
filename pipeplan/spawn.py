"""Start N local rank processes once, wait with a deadline, and never leave one behind.

Used by the link measurement (`pipeplan profile --nproc N`: a few seconds of ping-pong under a
deadline, nothing to resume or report per rank) and by tests. Training runs start their ranks
through torch's elastic launcher instead (executor/launch.py). A rank that raises or dies fails
the whole group: the others are killed and the error names the rank.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable

import torch.multiprocessing as mp

from pipeplan.errors import PipeplanError


class RankFailedError(PipeplanError):
    def __init__(self, message: str, rank: int | None):
        super().__init__(message)
        self.rank = rank


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(
    fn: Callable[..., None], nproc: int, args: tuple, deadline_s: float, what: str
) -> None:
    """Run fn(rank, *args) in `nproc` spawned processes; raise RankFailedError on failure."""
    ctx = mp.start_processes(fn, args=args, nprocs=nproc, join=False, start_method="spawn")
    deadline = time.monotonic() + deadline_s
    try:
        while not ctx.join(timeout=0.5):
            if time.monotonic() > deadline:
                raise RankFailedError(f"{what} did not finish within {deadline_s:.0f} s", None)
    except mp.ProcessRaisedException as exc:
        last = str(exc).strip().splitlines()[-1]
        message = f"{what} failed on rank {exc.error_index}: {last}"
        raise RankFailedError(message, exc.error_index) from None
    except mp.ProcessExitedException as exc:
        raise RankFailedError(
            f"{what}: rank {exc.error_index} died (exit code {exc.exit_code})", exc.error_index
        ) from None
    finally:
        for process in ctx.processes:
            if process.is_alive():
                process.kill()
        for process in ctx.processes:
            process.join(timeout=5)
