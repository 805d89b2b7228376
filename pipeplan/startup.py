"""Signals while the `pipeplan` command is still starting (imports take seconds under load):
Ctrl-C there was a KeyboardInterrupt traceback from inside an import, SIGTERM a silent exit.
Imported first of pipeplan's modules by `cli.py`; in the command's own process (not when a
program or a test imports `cli`) it ends the process with the line the command prints once it
runs, until `cli.main` installs its handlers (nothing has been written by then), and again
once `cli.main` has put them back: a stop as the exit callbacks run ends the command there.

    import pipeplan.startup  # noqa: F401  (cli.py: its import is the work)

Also `die_with_parent`, which a rank calls as its first statement (before the imports that
take seconds), so this module stays light: no torch.
"""

import contextlib
import os
import signal
import sys
from collections.abc import Callable, Iterator
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


# The order stops arrive in. Python's C-level handler only marks a signal as tripped; the
# Python-level handlers of signals pending together then run in the order of their numbers,
# not of their arrival, so a burst of SIGTERM, SIGINT and SIGHUP (`kill` of a process group,
# one after the other) was said as "stopped by SIGHUP", exit 129 (the sixty-fourth round). A
# counter stamped by the Python-level handlers cannot tell either: they all run after the
# burst, in number order. What the C-level handler does write, as it runs, is the signal's
# number to the process's wakeup descriptor (`signal.set_wakeup_fd`): that descriptor is
# the record of arrival order, read by each stop's handler (`first_arrived`). It is set as
# the command's process starts, before its first handler (`_end`), and kept for the life of
# the process: the command's own handlers (`cli._stop`) and `pipeplan run`'s launcher, whose
# agent's handlers raise whichever runs first (`launch.run_local`), read the same record.
# One descriptor, never two: a pipe's read end opened again for reading and writing
# (/proc/self/fd, Linux) is both its ends, and its two first descriptors are closed at once.
# So it costs one descriptor, taken as the process starts, when only the standard three are
# open: under `ulimit -n 63` too (the sixty-fifth round: the pipe was left out below 64, and
# a burst was said in number order). Below ARRIVALS_MIN_OPEN_FILES, none: the commands reach
# the limit with their own files there (`ulimit -n 7`: export, which names the limit in its
# line; with the record it failed importing a module of its own). Nor where another wakeup
# descriptor is set (an embedding program's, asyncio's: not ours to replace): number order.
# The kernel hands over stops pending together by their numbers too (their handlers nest, the
# highest-numbered running first): the record is arrival order as the process takes them,
# which a burst that reaches it all at once (asleep in a system call) may not be, nor one sent
# back to back: the next stop's interrupt can land inside the last one's C-level handler
# before that handler wrote its number, and the next one's handler then runs first.
_arrivals: list[int] = []  # the record's descriptor, once `watch_arrivals` has made it
ARRIVALS_MIN_OPEN_FILES = 16


def watch_arrivals() -> None:
    """`watch_arrivals()`: make the record of arrival order (`_arrivals`), once in the
    process, from its main thread (where Python allows a wakeup descriptor)."""
    import resource
    import threading

    if _arrivals or threading.current_thread() is not threading.main_thread():
        return
    if resource.getrlimit(resource.RLIMIT_NOFILE)[0] < ARRIVALS_MIN_OPEN_FILES:
        return  # the command's own descriptors (`ulimit -n 7`): none to spare
    try:
        record = _one_descriptor_pipe()
    except OSError:  # out of descriptors as the process starts (or no pipe at all)
        return
    if signal.set_wakeup_fd(record, warn_on_full_buffer=False) != -1:
        signal.set_wakeup_fd(-1)  # there was one: not ours to replace
        os.close(record)
        return
    _arrivals.append(record)


def _one_descriptor_pipe() -> int:
    """A non-blocking pipe held by one descriptor that both writes and reads it: its read
    end opened again, for both, through /proc/self/fd (a FIFO's O_RDWR, Linux). Elsewhere the
    pipe's write end, its read end kept beside it (`_pipe_read`)."""
    read, write = os.pipe()
    try:
        both = os.open(f"/proc/self/fd/{read}", os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        os.set_blocking(read, False)
        os.set_blocking(write, False)
        _pipe_read.append(read)
        return write
    os.close(read)
    os.close(write)
    return both


_pipe_read: list[int] = []  # the read end, where the record is a pipe's two descriptors


def forget_arrivals() -> None:
    """`forget_arrivals()` as a stop's handlers are installed: what the record holds came to
    handlers before them (data code's own SIGALRM), which acted on it; it would be said as
    the first of the next burst."""
    first_arrived(0)


def first_arrived(signum: int) -> int:
    """Of the stops that arrived since the last one handled, the first (`signum` when none is
    known): `first_arrived(signal.SIGHUP)` → SIGTERM in a handler that runs for SIGHUP after
    a burst of SIGTERM, SIGINT and SIGHUP. Reads what the record holds, so the next stop is
    read afresh."""
    if not _arrivals:
        return signum
    try:
        arrived = os.read((_pipe_read or _arrivals)[0], 4096)
    except OSError:  # nothing there (BlockingIOError): this handler's signal alone
        return signum
    return next((number for number in arrived if number in SIGNALS), signum)


# The process's own `os._exit`, taken as pipeplan is imported (the command's process: this
# module, first): what pipeplan ends the process with where `os._exit` may be another's
# meanwhile. The exit callbacks run with `os._exit` raising SystemExit (`exits.exits_raised`):
# a stop landing there ran `_end`, which said its line and raised, and the callback's exit was
# said too ("the exit callback logging.shutdown exited with code 143"), status 0 (the
# sixty-eighth round).
EXIT = os._exit


def _end(signum: int, frame: object) -> None:
    # The stops held from here: one landing after the record was read ran this handler again
    # inside it, which read the record's rest (the later stop) and said that (a burst of
    # SIGTERM, SIGINT, SIGHUP said as "interrupted" about one time in eight). One that landed
    # before runs at the check that follows this call, and reads the record whole.
    signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
    signum = first_arrived(signum)
    said = "interrupted" if signum == signal.SIGINT else stopped_by(signum)
    os.write(2, f"pipeplan: {said}\n".encode())
    # Mid-import, or past the command's outcome (its exit callbacks, after `cli.main`):
    # nothing to unwind or flush; what the data code left is ended as at any end (the
    # eighty-third round: a stop as the callbacks waited left its server holding `| cat`).
    if (exits := sys.modules.get("pipeplan.exits")) is not None:
        exits.end_children(None)
    EXIT(128 + signum)


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
    watch_arrivals()
    for _signal in set(SIGNALS) - set(ignored()):
        signal.signal(_signal, _end)


def die_with_parent(parent: int) -> bool:
    """`die_with_parent(launcher_pid)`: Linux: have the kernel kill this process when its
    parent dies, however it dies (a SIGTERM or SIGKILL skips the parent's clean-up, and a rank
    it started would run on). SIGKILL, because the kernel delivers it to a stopped process too
    (a rank stopped by SIGSTOP stayed in state T forever, reparented to init, with any other
    signal pending). False when `parent` is gone already (this process's parent is no longer
    it): the caller exits. Elsewhere only that check."""
    import ctypes

    pr_set_pdeathsig = 1
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, int(signal.SIGKILL))
    return os.getppid() == parent


@contextlib.contextmanager
def away_from_working_directory() -> Iterator[None]:
    """The block runs in `/`, and the process goes back to its working directory after it,
    the same folder (held open, whatever its path leads to meanwhile). For torch's import:
    its oneMKL reads the working directory as libtorch_cpu.so loads, and ends the process
    with its own "Intel oneMKL FATAL ERROR: Cannot load libtorch_cpu.so" where it was removed
    (the eightieth round: a line from each rank, then pipeplan's). Back in a removed folder,
    the caller's own check says so. Where none is left to go back to, the block runs there.

        with away_from_working_directory():
            import torch
    """
    try:
        held = os.open(".", os.O_RDONLY | os.O_DIRECTORY)
    except OSError:  # gone already, or not readable: the block runs where it is
        yield
        return
    try:
        os.chdir("/")
        yield
    finally:
        try:
            os.fchdir(held)
        finally:
            os.close(held)


class _LoaderAway:
    """`loader`, executing its module in `/` (`away_from_working_directory`), then calling
    `then()`; the module keeps `loader` as its own (`__loader__`, `__spec__.loader`)."""

    def __init__(self, loader: Any, then: Callable[[], None]) -> None:
        self._loader = loader
        self._then = then

    def create_module(self, spec: Any) -> Any:
        return self._loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        module.__spec__.loader = module.__loader__ = self._loader
        with away_from_working_directory():
            self._loader.exec_module(module)
        self._then()

    def __getattr__(self, name: str) -> Any:  # anything else a loader answers: the real one
        return getattr(self._loader, name)


class _FirstImportAway:
    """A finder on `sys.meta_path` that hands the first import of `name` a `_LoaderAway`,
    then leaves the path: what `name` imports, and any later import, is found as ever."""

    def __init__(self, name: str, then: Callable[[], None]) -> None:
        self.name = name
        self.then = then

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != self.name:
            return None
        with contextlib.suppress(ValueError):
            sys.meta_path.remove(self)
        for finder in sys.meta_path:  # as the import system asks them
            find = getattr(finder, "find_spec", None)
            spec = None if find is None else find(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _LoaderAway(spec.loader, self.then)
                return spec
        return None


@contextlib.contextmanager
def first_import_away(name: str, then: Callable[[], None]) -> Iterator[None]:
    """Within the block, the first import of module `name`, from wherever it comes (the
    command's own code, a library's, the user's data module), runs away from the working
    directory (`away_from_working_directory`), and `then()` is called after it. For torch:
    its oneMKL reads the working directory as libtorch_cpu.so loads (the eightieth round),
    and loading torch up front, as the command started, cost every command that needed
    none of it (a refused flag, `calibrate`, `report`) 2 s of CPU.

        with first_import_away("torch", check_working_directory):
            command.main(args)   # `import torch` anywhere inside runs in `/`
    """
    if name in sys.modules:
        yield
        return
    finder = _FirstImportAway(name, then)
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):
            sys.meta_path.remove(finder)
