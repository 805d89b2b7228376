"""Which rank failed first, and why: each rank's own report, and the launcher's verdict.

A rank that fails writes one report before it exits, into the error file torch's elastic agent
gives it (`TORCHELASTIC_ERROR_FILE`, torch's "message" format, so torchrun's own summary shows
it too; `executor.errorfile`, which keeps its room from the rank's start: a full disk is a
common failure), with a precise time and a kind:

- `raised`: its own code failed (a data error, a full disk, a bug);
- `interrupted`: it got SIGINT;
- `lost`: a collective failed because a peer went away (connection closed or reset);
- `timeout`: a collective waited longer than the collective timeout, or a wait for one-sided
  work found a rank that had not arrived silent that long (`PeerSilent`);
- `stopped`: it got SIGTERM as it started (`executor.launch`), from a user or from the agent,
  or SIGTERM or SIGHUP while it waited for the other ranks (`worker.meet_every_rank`).

The last two are what the *other* ranks see once one rank has failed, often before the failing
rank's own exit is noticed. So the launcher does not take the failure the agent observed first:
`verdict` names the rank whose own fault came first (the earliest `raised` or `interrupted`
report), else a rank that died without a report (killed by a signal or crashed, or exited 0
before the run ended, which torch's agent takes for a success: the others only lost it), else
the earliest report. When the others timed out, the rank that died without a
report was killed by the agent after it stopped responding (stopped or hung). A rank the agent
itself stopped (`AgentStops`: it was still running when the agent saw the first failure) is
not named for a SIGTERM death or report where another rank ended before the agent acted. A
rank the launcher found stopped (SIGSTOP) for the collective timeout and killed
(`StoppedRanks`: no heartbeat exists yet as ranks start) is named as stopped or hung.

    write_report(exc, rank=1)                     # in the rank, before it exits
    with StoppedRanks(2, 600, marker) as watch, AgentStops(watch.wake) as stops: ...
    rank, why = verdict(failures, timeout_s=600, agent_stopped=stops.pids, stalled=watch.ended)
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from pydantic import ValidationError

from executor import errorfile, leftovers
from pipeplan.errors import Interrupted, PipeplanError, Stopped, quoted
from pipeplan.startup import signal_name, stopped_by

# How a run that diverged says so (`Trainer.diverged`); the launcher's line tells it apart.
DIVERGED = "training diverged"
BEFORE_ANY_UPDATE = "before any update"

# The launcher's own lines (`StoppedRanks`), into logs/launcher.log (`launch.agent_scope`).
log = logging.getLogger("pipeplan.launcher")
OWN_FAULT = errorfile.OWN_FAULT
EXIT_INTERRUPTED = 130  # the shell's code for SIGINT
EXIT_FAILED = 1


@dataclass(frozen=True)
class Report:
    """A rank's account of its own failure, as written to its error file."""

    rank: int
    kind: str  # raised, interrupted, lost or timeout
    time: float  # time.time() when the rank caught it
    message: str  # one line for the user
    callstack: str = ""  # the traceback, which torchrun's summary shows

    def to_json(self) -> str:
        """torch's error-file format (`ErrorHandler.record_exception`), and ours beside it."""
        return errorfile.report_json(self.rank, self.kind, self.time, self.message, self.callstack)

    @classmethod
    def from_error_data(cls, data: dict) -> Report | None:
        """The report in an error file's data (torch's `ProcessFailure.error_file_data`), or
        None when the file is not one of ours."""
        mine = data.get("pipeplan") if isinstance(data, dict) else None
        if not isinstance(mine, dict):
            return None
        try:
            return cls(
                int(mine["rank"]), str(mine["kind"]), float(mine["time"]), str(mine["error"])
            )
        except (KeyError, TypeError, ValueError):
            return None


class PeerSilent(PipeplanError):
    """A rank waiting for one-sided work (`worker.one_sided_done`) found a rank that had not
    arrived silent (no heartbeat) for the collective timeout: stopped or hung. Reported as a
    collective's timeout, so the launcher names the silent rank, not the rank that waited."""


class PeerLost(PipeplanError):
    """Under torchrun, a rank whose collective failed for a lost connection found a peer
    whose heartbeat had stopped: killed or failed (`worker.named_lost`). Still a "lost"
    report, a consequence; its line names the peer, where gloo's "Connection reset by peer"
    named no one (the fifty-third round)."""


class SignalInterrupt(KeyboardInterrupt):
    """The KeyboardInterrupt a rank's SIGINT raises (`on_sigint`). Any other one was raised by
    code, the user's data code most often: not a signal (twenty-eighth round: `raise
    KeyboardInterrupt` in a `__getitem__` read as "interrupted by SIGINT" of the rank)."""


def on_sigint(signum: int, frame: object) -> NoReturn:
    """A rank's SIGINT handler once it reports its failures:

    signal.signal(signal.SIGINT, on_sigint)
    """
    raise SignalInterrupt


def classify(exc: BaseException) -> str:
    """`classify(SignalInterrupt())` → "interrupted"; a gloo/NCCL error caused by a peer →
    "lost" or "timeout"; anything else (a KeyboardInterrupt that code raised too) → "raised"."""
    exc = _unwrapped(exc)
    if isinstance(exc, (SignalInterrupt, Interrupted)):  # Interrupted: in the start's wait
        return "interrupted"
    if isinstance(exc, Stopped):  # SIGTERM or SIGHUP while it waited for the others to start
        return "stopped"
    if isinstance(exc, PeerSilent):  # a peer's fault, seen by this rank: as a collective's
        return "timeout"
    if isinstance(exc, PeerLost):
        return "lost"
    backend = _backend_error(exc)
    if backend is None:
        return "raised"
    text = str(backend).lower()
    return "timeout" if "timed out" in text or "timeout" in text else "lost"


def _backend_error(exc: BaseException) -> BaseException | None:
    """The communication error behind `exc`, if any: torch raises its own `DistError`s for
    store and NCCL failures, but gloo's are plain RuntimeErrors that name gloo's sources."""
    # torch not loaded (`import torch` loads this too): nothing raised is its error, and
    # classifying needs no seconds of its import.
    dist = sys.modules.get("torch.distributed")
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if (dist is not None and isinstance(current, dist.DistError)) or (
            isinstance(current, RuntimeError) and "gloo" in str(current)
        ):
            return current
        current = current.__cause__ or current.__context__
    return None


def _unwrapped(exc: BaseException) -> BaseException:
    """The exception a stage's code raised, not torch's wrapper around it: the pipelining
    schedules re-raise a stage's failure as a RuntimeError whose message lists the stage's
    arguments and ends on `kwargs: {}`, which says nothing of what went wrong."""
    while isinstance(exc, RuntimeError) and exc.__cause__ is not None and exc.__traceback__:
        raised_in = Path(traceback.extract_tb(exc.__traceback__)[-1].filename).as_posix()
        if "/torch/distributed/pipelining/" not in raised_in:
            break
        exc = exc.__cause__
    return exc


def describe(exc: BaseException, kind: str) -> str:
    """One line for the user: a pipeplan error's own message, else the exception's type and
    the last line of its message (gloo's carry a source path first), each control character
    a space (`formats.base.one_line`). Found by the thirty-seventh round: an escape sequence
    of a user's exception ("\x1b[31m") reached the terminal raw in the launcher's line."""
    from pipeplan.errors import one_line  # here: a rank imports this module as it starts

    return one_line(_described(exc, kind)).strip()


def _described(exc: BaseException, kind: str) -> str:
    if kind == "interrupted":
        return "interrupted by SIGINT"
    if isinstance(exc, Stopped):
        return stopped_by(exc.signum)
    exc = _unwrapped(exc)
    if isinstance(exc, ValidationError) and exc.errors():
        # Its last line is a link to pydantic's documentation: say what failed instead.
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"])
        return f"{exc.title}: {where}: {error['msg']}"
    lines = str(exc).strip().splitlines()
    last = lines[-1].strip() if lines else ""
    if isinstance(exc, PipeplanError):
        return last
    if kind in ("lost", "timeout"):
        gloo = last.rsplit("] ", 1)[-1]  # drop "[/…/gloo/transport/tcp/pair.cc:537] "
        if "Too many open files" in gloo:  # gloo's "rv != -1. -1 vs -1. Too many open files"
            # The limit named, as every other open-files failure (the sixtieth round: data
            # code that took every descriptor of a rank got gloo's words alone).
            import resource

            soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
            return (
                "a collective failed: this rank has too many files open (the open-files "
                f"limit, ulimit -n, is {soft}; its own code, such as data code, holds them)"
            )
        return f"a collective failed: {gloo}"
    if isinstance(exc, SystemExit):  # the user's code ended its rank (`data.exits_raised`)
        code = 0 if exc.code is None else exc.code
        if isinstance(code, int):
            return f"exited with code {code} before the run ended"
        return f"exited before the run ended: {quoted(code)}"
    if isinstance(exc, KeyboardInterrupt) and exc.__traceback__ is not None:  # no SIGINT's
        frame = traceback.extract_tb(exc.__traceback__)[-1]
        where = f"{Path(frame.filename).name}:{frame.lineno}"
        return f"{type(exc).__name__} raised by the code at {where}, not by a SIGINT"
    return f"{type(exc).__name__}: {last}" if last else type(exc).__name__


def write_report(exc: BaseException, rank: int, traced: bool = True) -> Report:
    """Write this rank's report to its error file (when a launcher gave one); returns it.
    Into the room the rank reserved as it started (`errorfile`): the failure being reported
    is often a full disk. Where it cannot be written, the rank still exits with its code,
    which the launcher reports, and no partial report stays. `traced=False` where the rank
    says one line instead of a traceback (a refusal, a signal in the wait for its peers): the
    report's traceback, which torchrun's summary shows, is then that line's message.

        write_report(ValueError("sample 183 is unreadable"), rank=1)
        write_report(Stopped(signal.SIGTERM), rank=1, traced=False)   # "stopped by SIGTERM"
    """
    kind = classify(exc)
    callstack = "".join(traceback.format_exception(exc)) if traced else ""
    report = Report(rank, kind, time.time(), describe(exc, kind), callstack)
    errorfile.write(report.rank, report.kind, report.time, report.message, report.callstack)
    return report


def exit_code(report: Report) -> int:
    return EXIT_INTERRUPTED if report.kind == "interrupted" else EXIT_FAILED


# ----------------------------------------------------------------------------- the launcher


def _death(exitcode: int) -> str:
    """How a rank that left no report ended, from its exit code: `_death(-9)` → "killed by
    SIGKILL". A SIGINT before the rank could report it (it starts by exiting 130 on one) and a
    SIGTERM are worded as the command words them for itself."""
    if exitcode == 0:  # a failure only where its rank ended before the run did (`verdict`)
        return "exited with code 0 before the run ended"
    if exitcode == EXIT_INTERRUPTED:
        return "interrupted by SIGINT"
    if exitcode in (-signal.SIGTERM, 128 + signal.SIGTERM):  # killed, or its handler's exit
        return "stopped by SIGTERM"
    if exitcode == -signal.SIGBUS:
        # The fifty-seventh round: a disk filled by another process under the activation
        # cache's files (mapped, sparse: a page is taken as it is first written) killed rank 0
        # so, and its line said nothing of the disk. The fifty-eighth: the data's own mapped
        # file cut short does too, with the disk far from full: both are said.
        return (
            "killed by SIGBUS (an access to a memory-mapped file the system cannot back: one "
            "cut short, or one written on a full disk; the activation cache's files, in "
            "/dev/shm and the run's cache/, are mapped, and so may be your data's: if a disk "
            "is full, free some space before resuming)"
        )
    return f"killed by {signal_name(-exitcode)}" if exitcode < 0 else f"exited with code {exitcode}"


def verdict(
    failures: dict,
    timeout_s: float,
    agent_stopped: Collection[int] = (),
    ended_early: Collection[int] = (),
    stalled: Collection[int] = (),
) -> tuple[int, str]:
    """(rank, why) of the failure that came first, from torch's `ChildFailedError.failures`
    (global rank → `ProcessFailure`), the pids of the ranks the agent stopped itself
    (`AgentStops.pids`), the ranks that exited 0 before the run ended (`launch.ended_early`)
    and those the launcher killed for being stopped the collective timeout (`StoppedRanks`).

        verdict({0: <lost, from its file>, 1: <exit -9, no file>}, 600)
        → (1, "killed by SIGKILL")
        verdict({0: <stopped, from its file; pid 7>, 1: <exit -15, no file>}, 600, {7})
        → (1, "stopped by SIGTERM")
        verdict({0: <lost, from its file>}, 600, (), {1})
        → (1, "exited with code 0 before the run ended")
        verdict({0: <stopped, from its file>, 1: <exit -9, no file>}, 600, (), (), {1})
        → (1, "no response within the collective timeout of 600 s (stopped or hung)")
    """
    # A rank the agent is heard stopping reports "stopped" too: a consequence, never the
    # first failure; it counts as silent, by its exit code. Found by the fifty-first round:
    # rank 0, SIGSTOPped as it wrote a checkpoint, was named "stopped by SIGTERM" (the agent's,
    # once rank 1 had reported it silent), its report the only "stopped" one.
    reports = {
        rank: report
        for rank, failure in failures.items()
        if (report := Report.from_error_data(failure.error_file_data)) is not None
        and not (report.kind == "stopped" and failure.pid in agent_stopped)
    }
    own = [r for r in reports.values() if r.kind in OWN_FAULT]
    if own:
        first = min(own, key=lambda r: r.time)
        return first.rank, first.message
    silent = {rank: f.exitcode for rank, f in failures.items() if rank not in reports}
    # torch's agent takes a rank's exit 0 for its success and lists it nowhere: one that left
    # mid-run (`os._exit(0)` in data code) died as silently as a killed one, and the peer
    # that lost it was named, for a "Connection reset by peer" (the thirtieth round).
    silent.update((rank, 0) for rank in ended_early if rank not in failures)

    def by_agent(rank: int) -> bool:
        """Whether the agent stopped `rank` (still running when it saw the first failure);
        where it is not known (no stops heard), any rank may have been. Never one that
        exited 0: the agent's stop is a SIGTERM."""
        if rank not in failures:
            return False
        return not agent_stopped or failures[rank].pid in agent_stopped

    # A SIGTERM as a rank started is reported with its time; the agent's SIGTERMs to the
    # others come after it (reported too, or silent once they train). A silent SIGTERM death
    # the agent did not cause came first: named rank 0, which the agent had stopped as a
    # consequence, for a SIGTERM that killed rank 1 before it could report (twenty-fifth round).
    stopped = [r for r in reports.values() if r.kind == "stopped"]

    def agents_stop(rank: int, code: int) -> bool:
        """Whether the agent ended `rank`: its SIGTERM, or the SIGKILL it follows that with
        for a rank that did not end within the shutdown time (blocked in C, as gloo's connect
        of the ranks: the forty-eighth round named that rank, killed, for rank 0's SIGTERM).
        That SIGKILL only where the agent is heard stopping this very rank."""
        if code == -signal.SIGTERM:
            return by_agent(rank)
        return code == -signal.SIGKILL and failures[rank].pid in agent_stopped

    if stopped and all(agents_stop(r, code) for r, code in silent.items()):
        first = min(stopped, key=lambda r: r.time)
        return first.rank, first.message
    timed_out_any = any(r.kind == "timeout" for r in reports.values())
    heard = {rank for rank in silent if rank in failures and failures[rank].pid in agent_stopped}
    if reports and silent and set(silent) <= heard and not timed_out_any:
        # Every silent rank is one the agent is heard stopping, after a failure another rank
        # reported (its collective lost): that report came first.
        first = min(reports.values(), key=lambda r: r.time)
        return first.rank, first.message
    if silent:
        # The agent stops the other ranks with SIGTERM once one has failed: a rank that ended
        # before it acted came first, and a SIGTERM death is the least likely to be the first.
        rank = min(silent, key=lambda r: (by_agent(r), silent[r] == -signal.SIGTERM, r))
        # Killed by the launcher, stopped the timeout (before any heartbeat: the others
        # waited for it to start, no collective to time out): its SIGKILL was not the cause.
        timed_out = rank in stalled or timed_out_any
        if silent[rank] != 0 and timed_out:
            return (
                rank,
                f"no response within the collective timeout of {timeout_s:g} s (stopped or hung)",
            )
        return rank, _death(silent[rank])
    first = min(reports.values(), key=lambda r: r.time)
    return first.rank, first.message


# torch's agent, as it stops the ranks still running once one has failed (or it was signalled):
# `SubprocessContext._close` logs this for each, with the rank's pid (`ProcessFailure.pid`).
AGENT_LOGGER = "torch.distributed.elastic.multiprocessing.api"
AGENT_STOPS = "Sending process %s closing signal %s"


class AgentStops(logging.Handler):
    """The pids of the ranks torch's agent stopped itself, from its log, while the block runs:
    those ranks were still running when it saw the first failure, so theirs came after it.
    `wake(pid)`, where given, is called for each as the agent stops it (`StoppedRanks.wake`).

        with AgentStops() as stops:
            elastic_launch(...)(...)
        stops.pids   # {24785}
    """

    def __init__(self, wake: Callable[[int], None] | None = None) -> None:
        super().__init__(logging.DEBUG)
        self.pids: set[int] = set()
        self.wake = wake
        self._logger = logging.getLogger(AGENT_LOGGER)
        self._level = self._logger.level

    def emit(self, record: logging.LogRecord) -> None:
        if record.msg == AGENT_STOPS and record.args:
            with contextlib.suppress(KeyError, TypeError, ValueError):
                pid = int(record.args[0])
                self.pids.add(pid)
                if self.wake is not None:
                    self.wake(pid)

    def __enter__(self) -> AgentStops:
        # A WARNING: heard even where logging was set quieter (the verdict needs it).
        if not self._logger.isEnabledFor(logging.WARNING):
            self._logger.setLevel(logging.WARNING)
        self._logger.addHandler(self)
        return self

    def __exit__(self, *exc: object) -> None:
        self._logger.removeHandler(self)
        self._logger.setLevel(self._level)


# ----------------------------------------------------------------------------- stopped ranks
# Under `pipeplan run` the ranks wait for each other to start without a limit (importing torch
# or setting up a GPU can take longer than a collective timeout; the agent stops every rank if
# one fails), and no heartbeat exists before they have met: a rank stopped (SIGSTOP) as it
# started was waited for 24 h, in silence, fresh run or resume (the thirty-seventh round).
# A stopped process is not slow, it is stopped: its launcher sees it in /proc.

# Seconds between two looks at the ranks' states; while a rank the agent stops waits to be
# woken, WAKE_S.
WATCH_S = 0.5
WAKE_S = 0.02
# A look later than this many intervals after the one before: this process was itself stopped
# or starved meanwhile, and what the ranks did then is unknown. Their stops are timed afresh.
WATCH_GAP = 5
# The states of a stopped process in /proc/PID/stat: by a signal (T) or by a tracer (t).
STOPPED_STATES = ("T", "t")
# Seconds a rank may stay stopped beyond the collective timeout before the launcher ends the
# run: once the ranks train, their own timeouts name a stopped peer first (a heartbeat's look
# is a second or two late), and their logs say where each waited for it.
STOPPED_GRACE_S = 5.0
# Seconds a rank may stay dead but unreaped (a zombie) before the launcher lets it go: one a
# tracer holds (gdb, strace: ptrace) is reaped by its tracer alone, and the agent waited for
# it until the debugger let go, the run ended and killed but `pipeplan run` never ending
# (the thirty-eighth round). Any other dead rank is reaped within the agent's next look.
REAP_S = 3.0


def signal_pending(pid: int) -> bool:
    """Whether process `pid` has a signal pending (/proc/PID/status: SigPnd, ShdPnd), as a
    stopped process has once it was sent one; False where it cannot be told."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as status:
            masks = [line.split()[1] for line in status if line.startswith(("SigPnd:", "ShdPnd:"))]
        return any(int(mask, 16) for mask in masks)
    except (OSError, IndexError, ValueError):
        return False


def tracer_of(pid: int) -> int:
    """The pid of the process that traces (ptrace: gdb, strace) process `pid`
    (/proc/PID/status: TracerPid), 0 where none does or it cannot be told."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as status:
            for line in status:
                if line.startswith("TracerPid:"):
                    return int(line.split()[1])
    except (OSError, IndexError, ValueError):
        pass
    return 0


def zombie_exitcode(pid: int) -> int:
    """The exit code, as `subprocess.Popen.returncode` gives it (-9: killed by SIGKILL), of
    process `pid`, dead but not reaped (/proc/PID/stat's last field, exit_code, the status
    waitpid would give); -SIGKILL where it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            status = int(stat.read().rsplit(")", 1)[1].split()[49])
        return os.waitstatus_to_exitcode(status)
    except (OSError, IndexError, ValueError):
        return -signal.SIGKILL


def let_go(pid: int, exitcode: int) -> bool:
    """Mark this process's child `pid` ended with `exitcode` in its `subprocess.Popen` (torch's
    agent's, reached through the garbage collector: the agent keeps it to itself), which then
    stops waiting for it: its `poll()` and timed `wait()` return the code. For a dead child
    that cannot be reaped (a tracer holds it); False where no Popen of it waits."""
    for obj in gc.get_objects():
        if isinstance(obj, subprocess.Popen) and obj.pid == pid and obj.returncode is None:
            obj.returncode = exitcode
            return True
    return False


def child_state(pid: int, parent: int) -> str | None:
    """The state letter of process `pid` (R, S, T, …; /proc/PID/stat), where it is a child of
    `parent`; None where it is not (gone, its pid taken by another process since) or there is
    no /proc to ask. `child_state(rank_pid, os.getpid())` → "T" for a SIGSTOPped rank."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()  # the name, in (), may hold spaces
        return fields[0] if int(fields[1]) == parent else None
    except (OSError, IndexError, ValueError):
        return None


def session_of(pid: int) -> int | None:
    """The session process `pid` is in (/proc/PID/stat), None where it is gone or there is no
    /proc to ask: `session_of(os.getpid()) == os.getsid(0)`."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            return int(stat.read().rsplit(")", 1)[1].split()[3])
    except (OSError, IndexError, ValueError):
        return None


def boot_ticks() -> int:
    """Now, in the clock ticks since boot that a process's start time is counted in
    (/proc/PID/stat's starttime: `started_at`)."""
    return int(time.clock_gettime(time.CLOCK_BOOTTIME) * os.sysconf("SC_CLK_TCK"))


def started_at(pid: int) -> int | None:
    """When process `pid` started, in clock ticks since boot (`boot_ticks`); None where it is
    gone or there is no /proc to ask."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            return int(stat.read().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def end_left_behind(leaders: Mapping[int, int]) -> list[int]:
    """SIGKILL every process still in the sessions that `leaders`, ranks that have ended, led
    (torch starts each rank in a session of its own), that started while its rank lived
    (`leaders`: pid → when it was last seen alive, `boot_ticks`), and return their pids: what
    the rank's code started and left running, or stopped, when the rank ended. Found by the
    seventy-eighth round: a child that the data code forked and that stopped itself (SIGSTOP)
    stayed, stopped, after the run, and after Ctrl-C or SIGTERM to pipeplan (its pending
    SIGTERM acts only once it is continued). Each is signalled through a pidfd opened before
    its session and start are read again: a pid that another process took since the look is
    not signalled.

    A rank's number is free once it is reaped: another program may take it for a session of
    its own (the eighty-first round's tester forced it). A leader whose number a live process
    holds is that program, and its session is left; where that program has ended and left
    children, they started after the rank's last sign of life, and are left too.

        end_left_behind(watch.alive)   # [19049]: a data code's stopped child
    """
    leaders = {pid: seen for pid, seen in leaders.items() if session_of(pid) is None}
    killed = []
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else ():
        pid = int(entry) if entry.isdigit() else 0
        leader = session_of(pid) if pid else None
        if leader is None or leader == pid or leader not in leaders:
            continue

        def still(pid: int = pid, leader: int = leader) -> bool:
            started = started_at(pid)
            return session_of(pid) == leader and started is not None and started <= leaders[leader]

        if leftovers.killed_if(pid, still):
            killed.append(pid)
    return killed


def held_line(rank: int, pid: int, tracer: int) -> str:
    """`held_line(1, 5252, 5301)` → "rank 1 (pid 5252) is held by a tracer (pid 5301) and
    could not be reaped"; without a tracer (it let go meanwhile) "… ended but could not be
    reaped"."""
    if tracer:
        return f"rank {rank} (pid {pid}) is held by a tracer (pid {tracer}) and could not be reaped"
    return f"rank {rank} (pid {pid}) ended but could not be reaped"


class StoppedRanks(threading.Thread):
    """The launcher's watch over its ranks (Linux: /proc; elsewhere it sees none and does
    nothing): a rank stopped (state T: SIGSTOP, or a tracer's t) without a break for longer
    than the collective timeout (and STOPPED_GRACE_S) is killed (SIGKILL, its process group
    with it), so the agent
    ends the run, and listed in `ended` for the verdict ("no response within the collective
    timeout … (stopped or hung)"). A start that is slow but running is never bounded. The
    ranks are this process's children whose environment holds `marker` (the variable naming
    this process, set before they start) and RANK, looked for until `world` are found.
    `wake(pid)` wakes (SIGCONT) a rank the agent stops (`AgentStops`), once its signal is
    pending: a stopped process cannot act on the agent's SIGTERM, and the agent waited 30 s
    before its SIGKILL; one a tracer holds stopped no SIGCONT wakes, and it is killed instead.
    A rank dead but unreaped for REAP_S (a tracer holds it: only the tracer can reap it) is
    let go (`let_go`), so that the agent ends the run anyway, and listed in `held`, named
    with its tracer (`unreaped`).

        with StoppedRanks(2, 600, "PIPEPLAN_LAUNCHER_PID") as watch, AgentStops(watch.wake):
            elastic_launch(...)(...)
        watch.ended   # {1}: stopped for 600 s
        watch.held    # {1: (5252, 5301)}: its pid, and its tracer's
    """

    def __init__(self, world: int, timeout_s: float, marker: str) -> None:
        super().__init__(name="pipeplan-stopped-ranks", daemon=True)
        self.world, self.timeout_s, self.marker = world, timeout_s, marker
        self.launcher = os.getpid()
        self.pids: dict[int, int] = {}  # rank → pid, as found
        self.alive: dict[int, int] = {}  # pid → when it was last seen alive (`boot_ticks`)
        self.ended: set[int] = set()  # the ranks killed for being stopped
        self.held: dict[int, tuple[int, int]] = {}  # rank → (pid, tracer): dead, not reaped
        self._waking: set[int] = set()  # the pids the agent is stopping, to wake
        self._done = threading.Event()
        self._poke = threading.Event()  # look now: done, or a rank to wake

    def __enter__(self) -> StoppedRanks:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._poke.set()
        self.join()

    def run(self) -> None:
        since: dict[int, float] = {}  # rank → when it was first seen stopped, without a break
        dead: dict[int, float] = {}  # rank → when it was first seen dead and not reaped
        last = time.monotonic()
        while not self._done.is_set():
            self._poke.wait(WAKE_S if self._waking else WATCH_S)
            self._poke.clear()
            if self._done.is_set():
                return
            now = time.monotonic()
            if now - last > WATCH_GAP * WATCH_S:
                since.clear()
                dead.clear()
            last = now
            self._wake_signalled()
            if len(self.pids) < self.world:
                self._find()
            for rank, pid in self.pids.items():
                seen = boot_ticks()  # (before the look: alive at least until then)
                state = child_state(pid, self.launcher)
                if state not in (None, "Z"):
                    self.alive[pid] = seen
                held = state == "Z" and rank not in self.held
                if held and now - dead.setdefault(rank, now) > REAP_S:
                    self._let_go(rank, pid)
                if rank in self.ended or state not in STOPPED_STATES:
                    since.pop(rank, None)
                elif now - since.setdefault(rank, now) > self.timeout_s + STOPPED_GRACE_S:
                    self._end(rank, pid)

    def _find(self) -> None:
        """The ranks started since the last look: this process's children that lead their
        sessions and whose environment names this process (as they were exec'd: a child not
        yet exec'd shows this one's)."""
        mine = str(self.launcher).encode()
        for entry in os.listdir("/proc") if os.path.isdir("/proc") else ():
            if not entry.isdigit() or int(entry) in self.pids.values():
                continue
            if child_state(int(entry), self.launcher) is None:
                continue
            try:
                with open(f"/proc/{entry}/environ", "rb") as environ:
                    pairs = environ.read().split(b"\0")
            except OSError:
                continue
            env = dict(pair.split(b"=", 1) for pair in pairs if b"=" in pair)
            rank = env.get(b"RANK", b"")
            # A rank leads its session (torch starts it so); what its code forked and left
            # may be this process's child too (the command adopts orphans: `adopt_orphans`),
            # with its environment: not a rank, nor in place of one found.
            leads = session_of(int(entry)) == int(entry)
            if env.get(self.marker.encode()) == mine and rank.isdigit() and leads:
                self.pids.setdefault(int(rank), int(entry))

    def _end(self, rank: int, pid: int) -> None:
        log.warning(
            "rank %d (pid %d) stopped for more than the collective timeout of %g s: killed",
            rank,
            pid,
            self.timeout_s,
        )
        self.ended.add(rank)
        self._signal(pid, signal.SIGKILL)

    def _let_go(self, rank: int, pid: int) -> None:
        """Rank `rank`, dead for REAP_S and still not reaped: its tracer holds it (the agent's
        wait for it ended only when the debugger let go). Said, listed in `held`, and let go
        with the code it died of: the agent ends the run. The zombie is the tracer's to reap."""
        tracer = tracer_of(pid)
        self.held[rank] = (pid, tracer)
        log.warning("%s", held_line(rank, pid, tracer))
        let_go(pid, zombie_exitcode(pid))

    def unreaped(self) -> str:
        """What the run's line adds for the ranks let go unreaped (`held`), "" for none:
        "; rank 1 (pid 5252) is held by a tracer (pid 5301) and could not be reaped"."""
        return "".join(f"; {held_line(rank, *self.held[rank])}" for rank in sorted(self.held))

    def wake(self, pid: int) -> None:
        """Wake (SIGCONT, its process group with it) rank `pid`, which the agent is stopping,
        once the agent's signal is pending (it says so just before it sends it): a stopped
        rank then dies of it at once, not of its SIGKILL 30 s later. Woken before, a rank ran
        on for a moment, found its peer gone and reported that, named instead of it."""
        if child_state(pid, self.launcher) in STOPPED_STATES:
            self._waking.add(pid)
            self._poke.set()

    def _wake_signalled(self) -> None:
        """SIGCONT to each rank to wake that has its signal pending now; the others (gone, or
        running: the signal acts) are not woken. A rank a tracer holds stopped (gdb) is not
        woken by SIGCONT, only by its tracer: SIGKILL, which acts on it (the agent's SIGTERM
        waited 30 s for its own SIGKILL, and then the tracer for its reaping: `_let_go`)."""
        for pid in list(self._waking):
            if child_state(pid, self.launcher) not in STOPPED_STATES:
                self._waking.discard(pid)
            elif signal_pending(pid):
                self._signal(pid, signal.SIGKILL if tracer_of(pid) else signal.SIGCONT)
                self._waking.discard(pid)

    def _signal(self, pid: int, signum: int) -> None:
        """`signum` to a rank of this process, its process group with it where it leads one
        (torch starts each rank in a session of its own, and signals its group)."""
        with contextlib.suppress(OSError):
            if os.getpgid(pid) == pid:
                os.killpg(pid, signum)
            else:
                os.kill(pid, signum)
