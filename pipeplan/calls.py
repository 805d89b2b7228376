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

import _thread
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from pipeplan.errors import OutputError, Stopped
from pipeplan.startup import STOP_SIGNALS, importing

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


@contextmanager
def stops_raised_in_call() -> Iterator[None]:
    """An API call's stops: SIGTERM, SIGHUP and the other stop signals (`startup.STOP_SIGNALS`)
    raise Stopped for the call's duration, as the command line's do (`cli._stop`: `pipeplan:
    stopped by SIGTERM`), so the call undoes what it made as a stopped command does. The
    handlers before the call (your own, or the default) are back as it ends, however it ends;
    during it pipeplan's stand in for yours, and a signal set to SIG_IGN stays ignored. Ctrl-C
    keeps Python's own handler (KeyboardInterrupt, raised as `Interrupted`). A stop, Ctrl-C's
    too, whose handler ran in a finalizer (where Python drops what it raises) is delivered
    again (`dropped_stops_redelivered`). Off the main thread (no handlers can be set there) a
    no-op.

        with stops_raised_in_call():
            start_run(...)   # kill -TERM: Stopped(SIGTERM), the run directory undone

    Found by the sixty-first round: a SIGTERM or SIGHUP during `run()` (before its ranks
    started), `export()` or `profile(nproc=2)` took the default action: the user's program
    died at once, leaving the run directory's `.lock` and staged run.json (the same run then
    refused), a half-written export folder, the ranks' scratch folders in TMPDIR."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    # A stop that lands in an import (raised there, it left torch half-imported, and every
    # later call failed: "Only a single TORCH_LIBRARY …") is held until the import is done;
    # one still importing IMPORT_GRACE_S later is raised where it is ("forced").
    held = {"signum": None, "forced": False}

    def stop(signum: int, frame: Any) -> None:
        if importing(frame) and not held["forced"]:
            if held["signum"] is None:  # one waiter however many come meanwhile
                held["signum"] = signum
                threading.Thread(target=_after_imports, args=(held,), daemon=True).start()
            return
        raise Stopped(signum)

    before = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}
    for signum, previous in before.items():
        if previous != signal.SIG_IGN:
            signal.signal(signum, stop)
    try:
        with dropped_stops_redelivered():  # inside: pipeplan's handlers take one raised at its end
            yield
    finally:
        # Held while they are put back (one landing midway left the rest pipeplan's); one
        # that came meanwhile is then the restored handler's.
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        try:
            for signum, previous in before.items():
                # None: a handler not installed from Python; the default stands in for it.
                signal.signal(signum, signal.SIG_DFL if previous is None else previous)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)


@contextmanager
def environment_restored() -> Iterator[None]:
    """The process's environment (`os.environ`) as it was before the block, however it ends:
    what the block set, changed or removed is put back. An API call's (`api`): found by the
    sixty-fifth round, `pipeplan.run()` left TORCHINDUCTOR_CACHE_DIR set (torch's
    `cache_dir_utils.cache_dir` sets it as it is asked for the folder), for the caller's own
    torch code after it.

        with environment_restored():
            os.environ["X"] = "1"   # gone again after the block
    """
    before = dict(os.environ)
    try:
        yield
    finally:
        for name in set(os.environ) - set(before):
            os.environ.pop(name, None)
        for name, value in before.items():
            if os.environ.get(name) != value:
                os.environ[name] = value


def _after_imports(held: dict[str, Any]) -> None:
    """The stop `stops_raised_in_call` held as the main thread imported, delivered to it
    again once the import is done (or IMPORT_GRACE_S later: raised inside the import then).
    A call that has ended meanwhile leaves it to the handler then (yours, or the default)."""
    main = threading.main_thread().ident
    end = time.monotonic() + IMPORT_GRACE_S
    while importing(sys._current_frames().get(main)) and time.monotonic() < end:
        time.sleep(0.01)
    held["forced"] = time.monotonic() >= end
    signum, held["signum"] = held["signum"], None
    if main is not None:
        signal.pthread_kill(main, signum)


# Seconds an import may hold a stop back (as the command's, `cli.IMPORT_GRACE_S`).
IMPORT_GRACE_S = 5.0


@contextmanager
def dropped_stops_redelivered(
    interrupt: type[BaseException] = KeyboardInterrupt,
    others: Callable[[Any], None] | None = None,
) -> Iterator[None]:
    """Python drops an exception raised inside a `__del__` or a weakref callback ("Exception
    ignored in ..."), so a stop whose handler ran there (Stopped, or Ctrl-C's `interrupt`) left
    the work running: a 1000-repeat profile went on after SIGHUP; an API call (the sixty-second
    round) and a run's rank (SIGINT: `faults.SignalInterrupt`) trained to the end, exit 0. For
    the block's duration (`sys.unraisablehook`) such a stop is delivered to the main thread
    again, silently, once the finalizer is done; one still waiting as the block ends is raised
    there. Any other dropped exception goes to `others` (the hook before the block where None),
    and that hook is back as the block ends. Off the main thread (no handler runs there) a no-op.
    The command's (`cli.main`), an API call's (`stops_raised_in_call`) and a rank's
    (`executor.launch.main`).

        with dropped_stops_redelivered(Interrupted, warn):
            ...   # kill -TERM as a __del__ runs: Stopped(SIGTERM), raised after it
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = sys.unraisablehook
    pending: list[int] = []  # the dropped stops not delivered again yet
    lock = threading.Lock()

    def hook(unraisable: Any) -> None:
        exc = unraisable.exc_value
        if not isinstance(exc, (interrupt, Stopped)):
            (others or before)(unraisable)
            return
        pending.append(exc.signum if isinstance(exc, Stopped) else signal.SIGINT)
        # From another thread, once this hook has returned: sent here, the handler would run
        # at once, inside the finalizer still, and be dropped again.
        _thread.start_new_thread(_deliver_soon, (pending, lock))

    sys.unraisablehook = hook
    try:
        yield
    finally:
        sys.unraisablehook = before
        with lock:
            signum = pending.pop() if pending else None
        if signum is not None:  # the block's end: its handler raises it here
            signal.raise_signal(signum)


def _deliver_soon(pending: list[int], lock: threading.Lock) -> None:
    time.sleep(0.05)
    with lock:  # one the block's end has taken is not sent twice
        if pending:
            # A real signal, to the main thread: it also ends a blocking call there (a sleep,
            # a wait), which _thread.interrupt_main would not.
            signal.pthread_kill(threading.main_thread().ident, pending.pop())


def _forked() -> None:
    """A child forked while another thread's call ran runs no call (that thread is not in
    it, and never returns there): it starts free (the sixtieth round: every call in such a
    child was refused). Forked by the call's own thread, it is inside that call still."""
    global _LOCK
    if _RUNNING and _RUNNING[0][1] != threading.get_ident():
        _LOCK = threading.Lock()
        _RUNNING.clear()


os.register_at_fork(after_in_child=_forked)
