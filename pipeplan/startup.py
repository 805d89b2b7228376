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

# Signals that stop pipeplan as Ctrl-C does, with one line (`pipeplan: stopped by SIGUSR1`)
# and exit code 128 + the signal, in the command's process (`cli.main`), under `pipeplan
# run`'s agent (forwarded to the ranks) and in a rank's stops (`fileio.stops_raised`, the wait
# for its peers). Each one's default action ends a process in silence. Beyond SIGTERM (a
# scheduler's stop, `kill`) and SIGHUP (a closed terminal): SIGUSR1 and SIGUSR2 (Slurm's
# `--signal=USR1@60` before a job's time limit, or data code signalling its own process:
# "User defined signal 1", exit 138, no line, the thirty-fourth round), SIGALRM (an alarm()
# with no handler of its own) and SIGQUIT (Ctrl-\, which torch's agent already stopped the
# ranks on, while before them it dumped core in silence).
STOP_SIGNALS = (
    signal.SIGTERM,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGUSR1,
    signal.SIGUSR2,
    signal.SIGALRM,
)
SIGNALS = (signal.SIGINT, *STOP_SIGNALS)


def stopped_by(signum: int) -> str:
    """`stopped_by(15)` → "stopped by SIGTERM": what pipeplan says of a signal that ends it."""
    return f"stopped by {signal.Signals(signum).name}"


def _end(signum: int, frame: object) -> None:
    said = "interrupted" if signum == signal.SIGINT else stopped_by(signum)
    os.write(2, f"pipeplan: {said}\n".encode())
    os._exit(128 + signum)  # mid-import: nothing to unwind or flush


def is_the_command() -> bool:
    """Whether this process is `pipeplan …` (the console script) or `python -m cli …`. Not
    a rank it spawned (`spawn.run_ranks`): multiprocessing gives the rank the command's
    argv and runs its main module again, and a rank the command stops on purpose (its peer
    died) printed "pipeplan: stopped by SIGTERM" as if the command had been stopped."""
    import multiprocessing

    if multiprocessing.current_process().name != "MainProcess":  # named before main runs
        return False
    return bool(sys.argv) and os.path.basename(sys.argv[0]) in ("pipeplan", "cli.py")


if is_the_command():
    for _signal in SIGNALS:
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
