"""What the ranks' code leaves running, found by the mark every process of the run carries in
its environment (`pipeplan run` gives it to its ranks: `launch.RUN_MARK`), wherever it went:
a session of its own (`os.setsid()`), a parent of its own (a daemon's double fork). Found by
the eighty-first round: a child the data code started in a session of its own outlived the
run, and held the console, so that `pipeplan run … | cat` never ended; and after `kill -9` of
`pipeplan run` (no clean-up of its own runs) the ranks' children stayed. The launcher ends
them as the run ends (`end_marked`), and a watch process it starts beside the ranks does
where the launcher is killed (`Watch`).

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


def _encoded(marks: Mapping[str, str]) -> list[bytes]:
    return [f"\0{key}={value}\0".encode() for key, value in marks.items()]


def end_marked(marks: Mapping[str, str]) -> list[int]:
    """SIGKILL every process but this one whose environment holds `marks`, and return their
    pids. Each is signalled through a pidfd opened before its environment is read again: a
    pid another process took since the look is not signalled. Linux (/proc); elsewhere none.

        end_marked({"PIPEPLAN_RUN_MARK": "5f0c…"})
    """
    if not marks or not os.path.isdir("/proc"):
        return []
    wanted = _encoded(marks)
    killed: list[int] = []
    for _ in range(SWEEPS):
        found = 0
        for entry in os.listdir("/proc"):
            pid = int(entry) if entry.isdigit() else 0
            if not pid or pid == os.getpid() or pid in killed or not _marked(pid, wanted):
                continue
            if killed_if(pid, lambda pid=pid: _marked(pid, wanted)):
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
    SIGKILL runs no clean-up), ends what carries `marks` (`end_marked`). Leaving the block
    ends the watch. Nothing where it cannot start (no pidfd, the process table full)."""

    def __init__(self, marks: Mapping[str, str]) -> None:
        self.marks = dict(marks)
        self.process: subprocess.Popen | None = None

    def __enter__(self) -> Watch:
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        # Its own environment without the marks: it is not one of the run's processes.
        env = {key: value for key, value in os.environ.items() if key not in self.marks}
        argv = [sys.executable, "-I", "-c", WATCH_CODE, root, str(os.getpid())]
        argv += [f"{key}={value}" for key, value in self.marks.items()]
        with contextlib.suppress(OSError):
            self.process = subprocess.Popen(
                argv,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
                cwd="/",
            )
        return self

    def __exit__(self, *exc: object) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()


# The watch process: `python -I -c WATCH_CODE ROOT LAUNCHER_PID KEY=VALUE...` (isolated: no
# user site, no PYTHONPATH; ROOT is the folder that holds `executor`).
WATCH_CODE = (
    "import sys; sys.path.insert(0, sys.argv[1]); "
    "from executor.leftovers import watch; watch(sys.argv[2:])"
)


def watch(argv: list[str]) -> None:
    """The watch process's body: wait for process argv[0] to end (its pidfd becomes readable),
    then end what carries the marks argv[1:] (KEY=VALUE each)."""
    launcher = int(argv[0])
    marks = dict(mark.split("=", 1) for mark in argv[1:])
    try:
        select.select([os.pidfd_open(launcher)], [], [])  # readable once it has ended
    except ProcessLookupError:  # ended already
        pass
    except (OSError, AttributeError):  # no pidfd here: its parent is the launcher until it ends
        while os.getppid() == launcher:
            time.sleep(1.0)
    end_marked(marks)
