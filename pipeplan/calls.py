"""One pipeplan call at a time in a process: an API call (`pipeplan.api`) or a command
(`cli.main`). Around the user's code a call holds what is the process's (fd 2 and sys.stderr
captured, os._exit and the signal handlers replaced, the `pipeplan` logger's handlers): two
calls at once in two threads each took the other's for the data's doing, both failed blaming
the built-in data, and left the process's stderr on a deleted file (the fifty-ninth round); a
`pipeplan.run` from a data function under `pipeplan run` trained a whole inner run and the
command then blamed the logger's handlers (the sixtieth), and from a data function in a
run's rank (the sixty-first: a rank holds the call for its life, `held_for_life`).

    with one_call("run()"):
        ...   # another one_call in this process meanwhile: OutputError naming "run()"
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from pipeplan.errors import OutputError

_LOCK = threading.Lock()
_RUNNING: list[tuple[str, int]] = []  # (the call, its thread's ident) while one runs


@contextmanager
def one_call(what: str) -> Iterator[None]:
    """Hold the process's one call as `what` ("run()", "the command `pipeplan run`")."""
    _take(what)
    try:
        yield
    finally:
        _RUNNING.clear()
        _LOCK.release()


def held_for_life(what: str) -> None:
    """Hold the process's one call as `what` until the process ends: a run's rank
    (`executor.launch.main`, which ends in os._exit) runs the user's data code as a call's
    does, and a `pipeplan.run(...)` there trained a whole inner run, the rank then blaming
    the logger's handlers (the sixty-first round).

        held_for_life("rank 0 of the run in runs/k")
    """
    _take(what)


def _take(what: str) -> None:
    """The call's lock taken for `what`, or OutputError naming the call that holds it."""
    if not _LOCK.acquire(blocking=False):
        running = _RUNNING[0][0] if _RUNNING else "another"
        raise OutputError(
            f"another pipeplan call is running in this process ({running}): calls run one at "
            "a time (each holds the process's stderr, os._exit and signal handlers around "
            "your code); call again once it has returned"
        )
    _RUNNING[:] = [(f"{what} in thread {threading.current_thread().name!r}", threading.get_ident())]


def _forked() -> None:
    """A child forked while another thread's call ran runs no call (that thread is not in
    it, and never returns there): it starts free (the sixtieth round: every call in such a
    child was refused). Forked by the call's own thread, it is inside that call still."""
    global _LOCK
    if _RUNNING and _RUNNING[0][1] != threading.get_ident():
        _LOCK = threading.Lock()
        _RUNNING.clear()


os.register_at_fork(after_in_child=_forked)
