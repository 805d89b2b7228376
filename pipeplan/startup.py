"""Signals while the `pipeplan` command is still starting (imports take seconds under load):
Ctrl-C there was a KeyboardInterrupt traceback from inside an import, SIGTERM a silent exit.
Imported first of pipeplan's modules by `cli.py`; in the command's own process (not when a
program or a test imports `cli`) it ends the process with the line the command prints once it
runs, until `cli.main` installs its handlers. Nothing has been written by then.

    import pipeplan.startup  # noqa: F401  (cli.py: its import is the work)

Also `die_with_parent`, which a rank calls as its first statement (before the imports that
take seconds), so this module stays light: no torch.
"""

import os
import signal
import sys
from typing import Any

# Signals that stop pipeplan as Ctrl-C does, with one line (`pipeplan: stopped by SIGUSR1`)
# and exit code 128 + the signal, in the command's process (`cli.main`), under `pipeplan
# run`'s agent (forwarded to the ranks) and in a rank's stops (`fileio.stops_raised`, the wait
# for its peers). Each one's default action ends a process in silence: SIGTERM (a
# scheduler's stop, `kill`), SIGHUP (a closed terminal), SIGUSR1 and SIGUSR2 (Slurm's
# `--signal=USR1@60` before a job's time limit, or data code signalling its own process:
# "User defined signal 1", exit 138, no line, the thirty-fourth round), SIGALRM (an alarm()
# with no handler of its own), SIGQUIT (Ctrl-\, which torch's agent already stopped the
# ranks on, while before them it dumped core in silence); and, found by the thirty-fifth
# round, which left them killing pipeplan with no line and its ranks behind: SIGXCPU (a
# `ulimit -t` CPU limit, common on shared clusters), SIGVTALRM, SIGPROF, SIGIO, SIGPWR,
# SIGSTKFLT and the real-time signals SIGRTMIN..SIGRTMAX (some schedulers send them).
# Derived, so that none is missed: every signal this system has, but those that are not a
# stop from outside (`_NOT_STOPS`).
_NOT_STOPS = {
    getattr(signal, name)
    for name in (
        "SIGINT",  # Ctrl-C: "interrupted", exit 130 (`SIGNALS`)
        "SIGKILL",  # cannot be caught
        "SIGSTOP",
        "SIGTSTP",  # suspend (job control), not end, by default
        "SIGTTIN",
        "SIGTTOU",
        "SIGCONT",  # continue, or nothing, by default
        "SIGCHLD",
        "SIGURG",
        "SIGWINCH",
        # Python ignores these, so that a write fails with EPIPE or EFBIG where the signal
        # would kill the process. A closed pipe (`pipeplan plan | head`) ends the command's
        # output, never its work, in silence; any other failed write of stdout (EFBIG: a
        # `ulimit -f`) is one line after the work (`log.guard_console`, `cli.entry`).
        "SIGPIPE",
        "SIGXFSZ",
        # A fault of the process's own instruction (or abort()): a Python handler runs only
        # after the instruction, which faults again; faulthandler prints the traceback.
        "SIGILL",
        "SIGTRAP",
        "SIGABRT",
        "SIGBUS",
        "SIGFPE",
        "SIGSEGV",
        "SIGSYS",
        "SIGEMT",  # (not on Linux) a fault too
        "SIGINFO",  # (not on Linux) BSD's Ctrl-T, ignored by default
    )
    if hasattr(signal, name)
}
STOP_SIGNALS = tuple(sorted(set(signal.valid_signals()) - _NOT_STOPS))
SIGNALS = (signal.SIGINT, *STOP_SIGNALS)


def stopped_by(signum: int) -> str:
    """`stopped_by(15)` → "stopped by SIGTERM": what pipeplan says of a signal that ends it."""
    return f"stopped by {signal_name(signum)}"


def signal_name(signum: int) -> str:
    """A signal's name, as `kill -l` says it: `signal_name(15)` → "SIGTERM". Python names
    only the first and last real-time signals: the others are counted from the nearer one,
    `signal_name(35)` → "SIGRTMIN+1", `signal_name(63)` → "SIGRTMAX-1" (Linux's numbers)."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        pass
    low, high = getattr(signal, "SIGRTMIN", 0), getattr(signal, "SIGRTMAX", 0)
    if low < signum < high:  # kill -l's: SIGRTMIN+1 … SIGRTMIN+15, SIGRTMAX-14 … SIGRTMAX-1
        above = signum - low
        return f"SIGRTMIN+{above}" if above <= (high - low) // 2 else f"SIGRTMAX-{high - signum}"
    return f"signal {signum}"


def importing(frame: Any) -> bool:
    """Whether `frame` (a signal handler's) runs inside an import: importlib's own frames are
    on its stack. A stop raised there can leave a library half-imported (torch's "Only a
    single TORCH_LIBRARY …" in every later import), so handlers hold it until the import is
    done (`cli._deferred`, `calls.stops_raised_in_call`)."""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


def _end(signum: int, frame: object) -> None:
    said = "interrupted" if signum == signal.SIGINT else stopped_by(signum)
    os.write(2, f"pipeplan: {said}\n".encode())
    os._exit(128 + signum)  # mid-import: nothing to unwind or flush


def is_the_command() -> bool:
    """Whether this process is `pipeplan …` (the console script) or `python -m cli …`. Not
    a rank it spawned (`spawn.run_ranks`): multiprocessing gives the rank the command's
    argv, and a rank the command stops on purpose (its peer died) printed "pipeplan:
    stopped by SIGTERM" as if the command had been stopped."""
    import multiprocessing

    if multiprocessing.current_process().name != "MainProcess":  # named before main runs
        return False
    return bool(sys.argv) and os.path.basename(sys.argv[0]) in ("pipeplan", "cli.py")


def ignored(signals: tuple[int, ...] = SIGNALS) -> tuple[int, ...]:
    """Those of `signals` this process ignores (SIG_IGN): they stay ignored, by the command,
    an API call and `pipeplan run`'s agent alike, as Python leaves them. `nohup pipeplan run`
    ignores SIGHUP so that closing the terminal leaves the run training, and a shell's
    background job ignores SIGINT; found by the sixty-second round: pipeplan's handlers (and
    torch's agent's) took both over, and the closed terminal stopped the run."""
    return tuple(signum for signum in signals if signal.getsignal(signum) == signal.SIG_IGN)


if is_the_command():
    for _signal in set(SIGNALS) - set(ignored()):
        signal.signal(_signal, _end)


def die_with_parent(parent: int) -> bool:
    """`die_with_parent(launcher_pid)`: Linux: have the kernel kill this process when its
    parent dies, however it dies (a SIGTERM or SIGKILL skips the parent's clean-up, and a rank
    it started would run on). SIGKILL, because the kernel delivers it to a stopped process too
    (a rank stopped by SIGSTOP stayed in state T forever, reparented to init, with any other
    signal pending). False when `parent` is gone already (this process's parent is no longer
    it): the caller exits. Elsewhere only that check."""
    import contextlib
    import ctypes

    pr_set_pdeathsig = 1
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, int(signal.SIGKILL))
    return os.getppid() == parent
