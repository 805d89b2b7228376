"""One clock for every timing of a step: host time on CPU, CUDA events on CUDA.

CUDA runs kernels asynchronously: `perf_counter` around a forward measures the launches, and
the work lands wherever the host next waits (the optimizer's first `.item()`). So on CUDA a
mark is an event recorded on the current stream, read only after one `sync()` at the end of
the step; no host synchronisation on the hot path. On CPU a mark is `perf_counter`, and the
same code sums the same spans.

    clock = Clock(device)
    a = clock.mark(); work(); b = clock.mark()
    clock.sync()
    seconds = clock.elapsed(a, b)
"""

from __future__ import annotations

import time
from collections.abc import Iterable

import torch

Mark = float | torch.cuda.Event


class Clock:
    def __init__(self, device: torch.device):
        self.device = device
        self.cuda = device.type == "cuda"

    def mark(self) -> Mark:
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def sync(self) -> None:
        """Wait until every mark recorded so far has happened (CUDA); nothing on CPU."""
        if self.cuda:
            torch.cuda.synchronize(self.device)

    def elapsed(self, start: Mark, stop: Mark) -> float:
        """Seconds from `start` to `stop` (on CUDA both must have happened: `sync()` first)."""
        if self.cuda:
            return start.elapsed_time(stop) / 1e3  # milliseconds
        return stop - start

    def total(self, spans: Iterable[tuple[Mark, Mark]]) -> float:
        return sum(self.elapsed(a, b) for a, b in spans)
