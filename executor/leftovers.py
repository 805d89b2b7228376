"""What the ranks' code leaves running, found by the mark every process of the run carries in
its environment (`pipeplan run` gives it to its ranks: `launch.RUN_MARK`), wherever it went:
a session of its own (`os.setsid()`), a parent of its own (a daemon's double fork). Found by
the eighty-first round: a child the data code started in a session of its own outlived the
run, and held the console, so that `pipeplan run … | cat` never ended; and after `kill -9` of
`pipeplan run` (no clean-up of its own runs) the ranks' children stayed. The launcher ends
them as the run ends (`end_marked`), and a watch process it starts beside the ranks does
where the launcher is killed (`Watch`). The `pipeplan` command's own process, where the
data code runs too (the launcher's checks of it), is watched likewise once that code first
runs: its descendants, looked at while it lives, are ended should it be killed
(`watch_command`; the eighty-second round).

    marks = {"PIPEPLAN_RUN_MARK": "5f0c…"}
    with Watch(marks):
        ...                      # the ranks run
    end_marked(marks)            # [19049]: a data code's child in a session of its own

Light (os, signal, subprocess): the watch process imports nothing else.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pipeplan.exits import Kin

# Rounds of the sweep: a process killed as it forked may leave a child the round before did
# not see; one round more finds it. A fork bomb is not outrun, only bounded.
SWEEPS = 8


def _marked(pid: int, marks: list[bytes]) -> bool:
    """Whether process `pid`'s environment (/proc/PID/environ: what it started with, which a
    forked child shares) holds every one of `marks` (b"\\0KEY=VALUE\\0" each)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as environ:
            held = b"\0" + environ.read() + b"\0"
    except OSError:  # gone, or another user's
        return False
    return all(mark in held for mark in marks)


def _dead(pid: int) -> bool:
    """Whether process `pid` is a zombie none of whose threads runs (one whose main thread
    ended while others run is alive)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            if stat.read().rsplit(")", 1)[1].split()[0] != "Z":
                return False
        return len(os.listdir(f"/proc/{pid}/task")) <= 1
    except (OSError, IndexError):
        return True  # gone


def _marked_otherwise(pid: int, marks: Mapping[str, str]) -> bool:
    """Whether process `pid`'s environment names one of `marks`' keys with another value."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as environ:
            held = environ.read().split(b"\0")
    except OSError:
        return False
    for key, value in marks.items():
        prefix = f"{key}=".encode()
        if any(item.startswith(prefix) and item != prefix + value.encode() for item in held):
            return True
    return False


def _limits(pid: int) -> tuple[int, int] | None:
    from pipeplan.exits import limits_of  # (10 ms to import, once, in a watch)

    return limits_of(pid)


def _encoded(marks: Mapping[str, str]) -> list[bytes]:
    return [f"\0{key}={value}\0".encode() for key, value in marks.items()]


def lineage_in(mark: str) -> int | None:
    """The lineage (`pipeplan.exits.mark_lineage`) a run's mark names after its last dot, the
    one its ranks mark themselves with: `lineage_in("5f0c….7000000000000000001")`."""
    tail = mark.rpartition(".")[2]
    return int(tail) if "." in mark and tail.isdigit() else None


def end_marked(marks: Mapping[str, str]) -> list[int]:
    """SIGKILL every process but this one whose environment holds `marks`, or that carries a
    lineage they name, soft or hard (`lineage_in`: what a rank's code started with an
    environment of its own, the eighty-fourth round), and return their pids. Each is
    signalled through a pidfd opened before it is read again: a pid another process took
    since the look is not signalled. Linux (/proc); elsewhere none.

        end_marked({"PIPEPLAN_RUN_MARK": "5f0c….7000000000000000001"})
    """
    if not marks or not os.path.isdir("/proc"):
        return []
    wanted = _encoded(marks)
    lineages = {lineage for lineage in map(lineage_in, marks.values()) if lineage is not None}

    def ours(pid: int) -> bool:
        if _marked(pid, wanted):
            return True
        # (a dead process's limits are still there to read: its parent's to reap, not ended;
        # one that carries another run's mark is that run's, whatever its lineage)
        return (
            bool(lineages)
            and bool(lineages.intersection(_limits(pid) or ()))
            and not _dead(pid)
            and not _marked_otherwise(pid, marks)
        )

    killed: list[int] = []
    for _ in range(SWEEPS):
        found = 0
        for entry in os.listdir("/proc"):
            pid = int(entry) if entry.isdigit() else 0
            if not pid or pid == os.getpid() or pid in killed or not ours(pid):
                continue
            if killed_if(pid, lambda pid=pid: ours(pid)):
                killed.append(pid)
                found += 1
        if not found:
            break
    return killed


def killed_if(pid: int, still: Callable[[], bool]) -> bool:
    """SIGKILL process `pid` if `still()` holds once a pidfd of it is open (a pid another
    process took since the caller's look is not signalled); whether it was.

        killed_if(19049, lambda: session_of(19049) == 19040)
    """
    try:
        handle = os.pidfd_open(pid)
    except OSError:  # gone meanwhile
        return False
    try:
        if still():
            signal.pidfd_send_signal(handle, signal.SIGKILL)
            return True
    except OSError:
        pass
    finally:
        os.close(handle)
    return False


class Watch:
    """A process beside the ranks (in a session of its own, the console's descriptors not
    held) that waits for this one to end, and, where it ended before leaving the block (killed:
    SIGKILL runs no clean-up), ends what carries `marks` (`end_marked`) and, with
    `descendants`, what descended from this process (`end_seen`). Leaving the block ends the
    watch. Nothing where it cannot start (no pidfd, the process table full)."""

    def __init__(
        self,
        marks: Mapping[str, str],
        descendants: bool = False,
        spared: tuple[int | None, Mapping[int, int]] = (None, {}),
        detached: bool = False,
        kin: Kin | None = None,
    ) -> None:
        """`spared`: (a start in clock ticks since boot, children: pid → start): the
        descendants that started before it, and those children's, are not ended; nor, given
        a `kin` (`pipeplan.exits.mark_lineage`), a child of this process (an orphan it
        adopted) that does not descend from it by its limits, and its own.
        `detached`: the watch is not this process's child (its parent ends as it starts), so
        that data code reaping every child of its process (`os.wait()` until none is left)
        does not wait for it (the eighty-fourth round: `pipeplan run` hung)."""
        self.marks = dict(marks)
        self.descendants = descendants
        self.spared = spared
        self.detached = detached
        self.kin = kin
        self.process: subprocess.Popen | None = None
        self.handle: int | None = None  # the detached watch's pidfd

    def __enter__(self) -> Watch:
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        # Its own environment without the marks: it is not one of the run's processes.
        env = {key: value for key, value in os.environ.items() if key not in self.marks}
        argv = [sys.executable, "-I", "-c", WATCH_CODE, root, str(os.getpid())]
        if self.descendants:
            since, children = self.spared
            spared = ",".join(f"{pid}:{start}" for pid, start in children.items())
            kin = self.kin.argument() if self.kin is not None else "-1"
            argv += [DESCENDANTS, str(since if since is not None else -1), spared, kin]
        argv += [f"{key}={value}" for key, value in self.marks.items()]
        if self.detached:
            argv.insert(6, DETACHED)  # after the launcher's pid
            return self._detached(argv, env)
        with contextlib.suppress(OSError):
            self.process = _watch_process(argv, env, subprocess.DEVNULL)
        return self

    def _detached(self, argv: list[str], env: dict[str, str]) -> Watch:
        """Started through a parent that says its pid and ends, adopted by none of this
        process's (orphans go past it while it starts: the data code has not run yet)."""
        from pipeplan.exits import adopt_orphans

        adopt_orphans(False)
        try:
            starter = _watch_process(argv, env, subprocess.PIPE)
            with starter.stdout:
                said = starter.stdout.readline()
            starter.wait()
            self.handle = os.pidfd_open(int(said))
        except (OSError, ValueError):  # no watch: nothing else changes
            pass
        finally:
            adopt_orphans(True)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None
        if self.handle is not None:
            # (data code that closed pipeplan's descriptors closed this one too: refused, and
            # the watch then ends with the command, having nothing left to end)
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(self.handle, signal.SIGKILL)
            with contextlib.suppress(OSError):
                os.close(self.handle)
            self.handle = None


def _watch_process(argv: list[str], env: dict[str, str], stdout: int) -> subprocess.Popen:
    """The watch's process (or its starter's): in a session of its own, holding no console."""
    return subprocess.Popen(
        argv,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=stdout,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        cwd="/",
    )


# The `pipeplan` command's own watch (`watch_command`), once its data code runs.
_COMMAND_WATCH: list[Watch] = []


def watch_command() -> None:
    """In the `pipeplan` command's process, before the user's data code first runs in it:
    start a watch that, should the command be killed (`kill -9`: no clean-up of its own),
    ends what descended from it. Found by the eighty-second round: a server the data function
    started with `start_new_session=True` as the launcher checked it (no rank's, no mark)
    outlived a `kill -9` of `pipeplan run`. Once a process; `end_command_watch` at its end."""
    from pipeplan import exits

    if not _COMMAND_WATCH and os.path.isdir("/proc"):
        spared, kin = exits.started_before(), exits.kin()
        watch = Watch({}, descendants=True, spared=spared, detached=True, kin=kin)
        _COMMAND_WATCH.append(watch.__enter__())
    exits.data_code_runs()


def end_command_watch() -> None:
    """End the command's watch (`watch_command`), at the command's end: what its code left is
    the command's to end then (`exits.end_children`), and the watch is not among them."""
    while _COMMAND_WATCH:
        _COMMAND_WATCH.pop().__exit__()


# The watch process: `python -I -c WATCH_CODE ROOT LAUNCHER_PID [--descendants SINCE
# PID:START,... KIN] KEY=VALUE...` (isolated: no user site, no PYTHONPATH; ROOT is the
# folder that holds `executor`; SINCE and the PID:START list: `Watch`'s `spared`; KIN its
# `kin`, `Kin.argument()`, -1 for none).
WATCH_CODE = (
    "import sys; sys.path.insert(0, sys.argv[1]); "
    "from executor.leftovers import watch; watch(sys.argv[2:])"
)
DESCENDANTS = "--descendants"
DETACHED = "--detached"
# How often a watch of descendants looks at them while the launcher lives: a process started
# and left by a parent it outlives within the last look before a `kill -9` of the launcher is
# not seen (it goes to the system's init); one whose parent it saw is.
LOOK_S = 0.5
# Processes a watch never ends (their command lines): multiprocessing's resource tracker and
# forkserver, and joblib loky's tracker, which end once their parent has, after freeing what
# the code left (shared memory, temporary folders); and the watches themselves.
KEPT_COMMANDS = (
    b"resource_tracker import main",
    b"forkserver import main",
    b"leftovers import watch",
)


def watch(argv: list[str]) -> None:
    """The watch process's body: wait for process argv[0] to end (its pidfd becomes readable),
    then end what carries the marks (KEY=VALUE each) and, after DESCENDANTS, what descended
    from it (looked at every LOOK_S while it lived)."""
    if argv[1:2] == [DETACHED]:  # its parent says its pid and ends: it is nobody's child
        argv = argv[:1] + argv[2:]
        child = os.fork()
        if child:
            os.write(1, f"{child}\n".encode())
            os._exit(0)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.close(devnull)
    launcher = int(argv[0])
    descendants = argv[1:2] == [DESCENDANTS]
    since, spared, kin = -1, {}, None
    if descendants:
        since = int(argv[2])
        pairs = [pair.split(":") for pair in argv[3].split(",") if pair]
        spared = {int(pid): int(start) for pid, start in pairs}
        if argv[4] != "-1":
            from pipeplan.exits import Kin

            kin = Kin.parse(argv[4])
    marks = dict(mark.split("=", 1) for mark in argv[5 if descendants else 1 :])
    # The last two looks: while the launcher lives its descendants stay its (a subreaper's
    # orphans are its own), so older looks hold only the dead; one look taken as it ended may
    # have missed what went to init meanwhile.
    looks: list[dict[int, int]] = [{}, {}]

    def look() -> None:
        if descendants:
            looks[:] = [looks[1], _descendants([launcher], since, spared, kin)]

    try:
        handle = os.pidfd_open(launcher)
        while True:
            look()
            if select.select([handle], [], [], LOOK_S if descendants else None)[0]:
                break  # readable once it has ended
    except ProcessLookupError:  # ended already
        pass
    except (OSError, AttributeError):  # no pidfd here: the launcher is there while its start is
        started = _started(launcher)
        while started is not None and _started(launcher) == started:
            look()
            time.sleep(LOOK_S if descendants else 1.0)
    end_marked(marks)
    end_seen({**looks[0], **looks[1], **_of_family(kin)})


def _of_family(kin: Kin | None) -> dict[int, int]:
    """The processes but this one whose limits carry `kin`'s lineage family, pid → start,
    where the family is the command's alone (drawn in the lineage band, the command in no
    other's: a nested one shares its outer command's; under a low hard limit two may meet):
    what descended from the command wherever it went, one its parent started and left within
    the last look before a `kill -9` included (the eighty-seventh round: a server started
    half a second before the kill was left)."""
    from pipeplan.exits import LINEAGE_BASE, LINEAGE_TOP

    if kin is None or kin.family is None or kin.before < LINEAGE_TOP:
        return {}
    if not LINEAGE_BASE <= kin.family[0] < LINEAGE_TOP:
        return {}
    found = {}
    for entry in os.listdir("/proc"):
        pid = int(entry) if entry.isdigit() else 0
        if pid and pid != os.getpid() and kin.in_family(_limits(pid) or (-1, -1)):
            start = _started(pid)
            if start is not None:
                found[pid] = start
    return found


def end_seen(seen: Mapping[int, int]) -> list[int]:
    """SIGKILL the processes of `seen` (pid → start ticks) that are still the ones seen, and
    what descended from them since: each is stopped first (SIGSTOP), through a pidfd opened
    before its start is read again, so that none forks out of reach while the others are
    found; then all are killed. Never this process or one of KEPT_COMMANDS (their children
    are ended). Returns their pids."""
    handles: dict[int, int] = {}
    looked: set[int] = {os.getpid()}
    try:
        found = dict(seen)
        for _ in range(SWEEPS):
            roots = []  # the ones still seen: a pid another process took is not followed
            for pid, start in found.items():
                if pid in looked:
                    continue
                looked.add(pid)
                handle, same = _stopped_if(pid, start)
                if handle is not None:
                    handles[pid] = handle
                if same:
                    roots.append(pid)
            # Their children since the last look (a stopped process forks no more).
            found = {pid: t for pid, t in _descendants(roots).items() if pid not in looked}
            if not found:
                break
        for handle in handles.values():
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(handle, signal.SIGKILL)
    finally:
        for handle in handles.values():
            os.close(handle)
    return sorted(handles)


def _stopped_if(pid: int, start: int) -> tuple[int | None, bool]:
    """(a pidfd of `pid`, SIGSTOP'd, if it is still the process that started at `start` and
    not one of KEPT_COMMANDS, else None; whether it is still that process)."""
    try:
        handle = os.pidfd_open(pid)
    except OSError:  # gone meanwhile
        return None, False
    same = False
    try:
        same = _started(pid) == start
        if same and not _kept_command(pid):
            signal.pidfd_send_signal(handle, signal.SIGSTOP)
            return handle, True
    except OSError:
        pass
    os.close(handle)
    return None, same


def _kept_command(pid: int) -> bool:
    """Whether `pid` is one of KEPT_COMMANDS itself: not a worker a forkserver forked, which
    has its command line too (the eighty-fourth round: a busy pool worker was spared, and
    held `… | cat` two minutes), and whose parent has the same."""
    line = _command_line(pid)
    if line is None or not any(command in line for command in KEPT_COMMANDS):
        return False
    parent = _parent(pid)
    return parent is None or _command_line(parent) != line


def _command_line(pid: int) -> bytes | None:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            return cmdline.read()
    except OSError:
        return None


def _parent(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            return int(stat.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def _started(pid: int) -> int | None:
    """Process `pid`'s start (clock ticks after boot: /proc/PID/stat's 22nd field), None
    where it is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            return int(stat.read().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def _descendants(
    roots: list[int],
    since: int = -1,
    spared: Mapping[int, int] | None = None,
    kin: Kin | None = None,
) -> dict[int, int]:
    """The processes descended from `roots` (not the roots), pid → start ticks: through each
    thread's /proc/PID/task/TID/children; none that started before `since`, none of
    `spared` (pid → start), no child of a root that does not descend from it by its limits
    (`kin`, where given: `pipeplan.exits.Kin`), and none below those."""
    spared = spared or {}
    found: dict[int, int] = {}
    frontier = list(roots)
    while frontier:
        pid = frontier.pop()
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                with open(f"/proc/{pid}/task/{task}/children", encoding="ascii") as children:
                    kids = [int(kid) for kid in children.read().split()]
            except (OSError, ValueError):
                continue
            for kid in kids:
                start = _started(kid) if kid not in found else None
                if start is None or start < since or spared.get(kid) == start:
                    continue
                if kin is not None and pid in roots and not kin.descends(kid):
                    continue  # an orphan of what the root had before (a shell's helper's)
                found[kid] = start
                frontier.append(kid)
    return found
