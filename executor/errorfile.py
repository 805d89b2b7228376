"""A rank's error file (torch's `TORCHELASTIC_ERROR_FILE`): the report of its failure, written
where the disk may be full.

A rank often fails *because* its disk is full (a checkpoint, a cache spill), and its report,
a new file on that disk, could not be written then: `pipeplan run` said only "training
failed on rank 0 at step 2: exited with code 1", the cause in rank-0.log alone (the
nineteenth round). So a rank `pipeplan run` starts reserves its report's room as it starts:
`reserve()` writes ROOM bytes to PATH.tmp; `write(text)` overwrites them (which needs no new
blocks), cuts the file to the report and renames it to PATH, where torch's agent reads it
once the rank is gone (renamed whole: the agent never reads half a report). `release()` gives
the room back at a clean end; the launcher removes what a killed rank left
(`launch.run_local`). Under torchrun nothing is reserved (no launcher of ours would remove a
killed rank's room), and a rank's traceback and line reach torchrun's console anyway.

Light (the standard library alone): a rank reserves, and a SIGTERM as it starts reports,
before the imports that take seconds.

    errorfile.reserve()                                           # as a rank starts
    errorfile.write(report_json(0, "raised", time.time(), why))   # at its failure
"""

from __future__ import annotations

import contextlib
import json
import os
import stat

ENV = "TORCHELASTIC_ERROR_FILE"
ROOM = 64 * 1024  # bytes reserved per rank: report_json's text always fits
MESSAGE_CHARS = 2048  # a one-line message is far shorter; a longer one is cut to fit the room
TAIL_CHARS = 2048  # of a traceback too long for the room: its end, which names the error
# Never through a link, never blocking on a FIFO put there (the failing rank would hang):
# either is an OSError, and the report is written as a new file instead (`write`).
_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def report_json(rank: int, kind: str, when: float, message: str, callstack: str = "") -> str:
    """`report_json(0, "raised", time.time(), "disk full", traceback_text)`: torch's error-file
    format (`ErrorHandler.record_exception`: its summary under torchrun shows it), and ours
    beside it (`faults.Report.from_error_data` reads it). ASCII, at most ROOM bytes."""
    if len(message) > MESSAGE_CHARS:
        message = message[: MESSAGE_CHARS - 3] + "..."
    text = _dumps(rank, kind, when, message, callstack or message)
    if len(text) > ROOM:
        text = _dumps(rank, kind, when, message, "..." + callstack[-TAIL_CHARS:])
    return text


def _dumps(rank: int, kind: str, when: float, message: str, callstack: str) -> str:
    return json.dumps(
        {
            "message": {
                "message": f"rank {rank}: {message}",
                "extraInfo": {"py_callstack": callstack, "timestamp": str(int(when))},
            },
            "pipeplan": {"rank": rank, "kind": kind, "time": when, "error": message},
        }
    )


def _room() -> str | None:
    """PATH.tmp of this rank's error file, or None when no launcher gave one."""
    path = os.environ.get(ENV)
    return f"{path}.tmp" if path else None


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def reserve() -> None:
    """Make this rank's report's room (`errorfile.reserve()`, as the rank starts). Where the
    disk has no room even now, nothing stays: the report is tried as a new file then."""
    room = _room()
    if room is None:
        return
    try:
        fd = os.open(room, _FLAGS | os.O_TRUNC, 0o644)
        try:
            _write_all(fd, b" " * ROOM)
        finally:
            os.close(fd)
    except OSError:
        release()


def write(text: str) -> bool:
    """Write `text` (report_json's) as this rank's report, into its room if `reserve` made
    one: True once the error file holds it; False where there is no error file, or the write
    failed (a full disk without a room), nothing partial left."""
    room = _room()
    if room is None:
        return False
    data = text.encode()
    fd = _open_room(room)
    if fd is None:  # a link, FIFO or folder put there: gone, and the report a new file
        release()
        try:
            fd = os.open(room, _FLAGS | os.O_EXCL, 0o644)
        except OSError:
            return False
    try:
        try:
            _write_all(fd, data)
            os.ftruncate(fd, len(data))  # the rest of the room given back
        finally:
            os.close(fd)
        os.replace(room, room.removesuffix(".tmp"))
        return True
    except OSError:
        release()
        return False


def _open_room(room: str) -> int | None:
    """The room, opened for overwriting (no O_TRUNC: its blocks are reused), or None when what
    is there is not a regular file (a FIFO with a reader opens without blocking)."""
    try:
        fd = os.open(room, _FLAGS, 0o644)
    except OSError:
        return None
    if stat.S_ISREG(os.fstat(fd).st_mode):
        return fd
    os.close(fd)
    return None


def release() -> None:
    """Give the room back (a rank's clean end, or a failed write): no PATH.tmp stays."""
    room = _room()
    if room is not None:
        with contextlib.suppress(OSError):
            os.unlink(room)
