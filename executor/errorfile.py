"""A rank's error file (torch's `TORCHELASTIC_ERROR_FILE`): the report of its failure, written
where the disk may be full.

A rank often fails *because* its disk is full (a checkpoint, a cache spill), and its report,
a new file on that disk, could not be written then: `pipeplan run` said only "training
failed on rank 0 at step 2: exited with code 1", the cause in rank-0.log alone (the
nineteenth round). So a rank `pipeplan run` starts reserves its report's room as it starts:
`reserve()` writes ROOM bytes to PATH.tmp, or where the disk is nearly full already MIN_ROOM
(64 KiB did not fit an 80 KiB disk the run's files had half filled, and the report was lost
again: the twenty-seventh round); `write(...)` overwrites them (which needs no new blocks)
with the report cut to the room's size (`report_json`: the traceback is cut first, the
message last), cuts the file to the report and renames it to PATH, where torch's agent reads
it once the rank is gone (renamed whole: the agent never reads half a report). `release()` gives
the room back at a clean end; the launcher removes what a killed rank left
(`launch.run_local`). Under torchrun nothing is reserved (no launcher of ours would remove a
killed rank's room), and a rank's traceback and line reach torchrun's console anyway.

Light (the standard library alone): a rank reserves, and a SIGTERM as it starts reports,
before the imports that take seconds.

    errorfile.reserve()                                           # as a rank starts
    errorfile.write(0, "raised", time.time(), why, traceback)     # at its failure
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import stat

ENV = "TORCHELASTIC_ERROR_FILE"
ROOM = 64 * 1024  # bytes reserved per rank: a report with its traceback's end fits
# Where ROOM does not fit: one block of the disk (a tmpfs page), which a one-line report fits.
MIN_ROOM = 4096
MESSAGE_CHARS = 2048  # a one-line message is far shorter; a longer one is cut to fit the room
# Never through a link, never blocking on a FIFO put there (the failing rank would hang):
# either is an OSError, and the report is written as a new file instead (`write`).
_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def report_json(
    rank: int, kind: str, when: float, message: str, callstack: str = "", room: int = ROOM
) -> str:
    """`report_json(0, "raised", time.time(), "disk full", traceback_text)`: torch's error-file
    format (`ErrorHandler.record_exception`: its summary under torchrun shows it), and ours
    beside it (`faults.Report.from_error_data` reads it). ASCII, at most `room` bytes (at
    least MIN_ROOM): the message first (its start kept, which the launcher's line shows; it
    is there twice), then as much of the traceback as the rest holds (its end kept, which
    names the error).

        report_json(0, "raised", time.time(), why, traceback_text, room=MIN_ROOM)
    """
    if len(message) > MESSAGE_CHARS:
        message = message[: MESSAGE_CHARS - 3] + "..."
    spare = room - len(_dumps(rank, kind, when, "", ""))
    message = _fitted(message, spare // 2)
    callstack = _fitted(callstack or message, spare - 2 * _size(message), end=True)
    return _dumps(rank, kind, when, message, callstack)


def _size(text: str) -> int:
    """Bytes of `text` inside a JSON string (ASCII: a non-ASCII character is 6 or 12)."""
    return len(json.dumps(text)) - 2


def _fitted(text: str, budget: int, end: bool = False) -> str:
    """`text`, or the longest start of it (its end where `end`) marked "..." whose JSON is at
    most `budget` bytes: `_fitted("disk full", 7)` → "disk..."."""
    if _size(text) <= budget:
        return text
    if budget < 3:
        return ""
    text = text[-budget:] if end else text[:budget]  # a character is at least one byte
    kept, size = 0, 3
    for char in reversed(text) if end else text:
        size += _size(char)
        if size > budget:
            break
        kept += 1
    return "..." + text[len(text) - kept :] if end else text[:kept] + "..."


# A rank's own failures (its code raised, its SIGINT); the others are a peer's consequence.
OWN_FAULT = ("raised", "interrupted")
# The one stop torch's agent sends a rank (once another has failed); a rank stopped by any
# other signal (SIGHUP, SIGUSR1, …) was sent it from outside.
AGENTS_STOP = "stopped by SIGTERM"


def _dumps(rank: int, kind: str, when: float, message: str, callstack: str) -> str:
    # torch's agent names the root cause by the whole-second timestamp, the lowest rank on a
    # tie: a peer that lost rank 1 in the second rank 1 raised was named (the fifty-first
    # round, 3 of 14). An own fault's second is taken down, a consequence's up. A stop from
    # outside is the rank's own: `kill -USR1` to rank 1 under torchrun named rank 0, which
    # the agent then SIGTERMed (no report: stamped the second the agent saw it), as the root
    # cause (the sixty-third round).
    own = kind in OWN_FAULT or (kind == "stopped" and message != AGENTS_STOP)
    stamp = math.floor(when) if own else math.ceil(when)
    return json.dumps(
        {
            "message": {
                "message": f"rank {rank}: {message}",
                "extraInfo": {"py_callstack": callstack, "timestamp": str(stamp)},
            },
            "pipeplan": {"rank": rank, "kind": kind, "time": when, "error": message},
        }
    )


# The identity (st_dev, st_ino) of the folder the room was made in (`reserve`): a report or
# release goes by path, and a run folder moved away mid-run, another run's put at its path,
# got this rank's report as a new file in that run's logs (the thirty-second round).
_FOLDERS: dict[str, tuple[int, int] | None] = {}  # by room


def _identity(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _moved(room: str) -> bool:
    """Whether the folder `room` lies in is no longer the one `reserve` made it in (moved
    away or deleted: the launcher says so, and what is at the path now is not this run's)."""
    made_in = _FOLDERS.get(room)
    return made_in is not None and _identity(os.path.dirname(room) or ".") != made_in


def _room() -> str | None:
    """PATH.tmp of this rank's error file, or None when no launcher gave one."""
    path = os.environ.get(ENV)
    return f"{path}.tmp" if path else None


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


# A descriptor kept from `reserve` until a report is written (`write` closes it first), so
# that the report can be opened where the rank's own code took every other one: data code
# that did so in the final evaluation failed the run's last writes, and the report could not
# be opened either, the launcher's line "exited with code 1" (the sixty-first round).
# Kept with its device and inode: a number that data code closed, and something else then
# opened, is not closed in its stead (the rank's log may be it).
_SPARE: list[tuple[int, tuple[int, int]]] = []


# The room, kept open from `reserve` (with its device and inode): a run folder made read-only
# mid-run (a file system remounted so, a read-only mount put over it) refuses the room's
# opening for writing, and the report was lost, the launcher's line "exited with code 1"
# (the sixty-fifth round). Through the descriptor opened before, the report still goes in.
_KEPT: list[tuple[int, tuple[int, int]]] = []


def _kept_room(room: str) -> int | None:
    """The descriptor `reserve` kept, where it is still the room's file at `room`; else None
    (and it is closed)."""
    fd = None
    while _KEPT:
        kept, identity = _KEPT.pop()
        with contextlib.suppress(OSError):
            if fd is None and _fd_identity(kept) == identity == _identity(room):
                fd = kept
                continue
            if _fd_identity(kept) == identity:
                os.close(kept)
    return fd


def reserve() -> None:
    """Make this rank's report's room (`errorfile.reserve()`, as the rank starts): ROOM bytes,
    or MIN_ROOM where the disk has not ROOM left. Where it has not even that, nothing stays:
    the report is tried as a new file then. A spare descriptor is kept for it too."""
    room = _room()
    if room is None:
        return
    if not _SPARE:
        with contextlib.suppress(OSError):
            fd = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
            _SPARE.append((fd, _fd_identity(fd)))
    _FOLDERS[room] = _identity(os.path.dirname(room) or ".")
    for size in (ROOM, MIN_ROOM):
        try:
            fd = os.open(room, _FLAGS | os.O_TRUNC, 0o644)
            try:
                _write_all(fd, b" " * size)
            except OSError:
                os.close(fd)
                raise
            _KEPT.append((fd, _fd_identity(fd)))
            return
        except OSError:
            release()


def write(rank: int, kind: str, when: float, message: str, callstack: str = "") -> bool:
    """Write this rank's report (`report_json`'s, cut to its room's size) into the room
    `reserve` made, else as a new file: True once the error file holds it; False where there
    is no error file, or the write failed (a full disk without a room), nothing partial
    left.

        write(1, "raised", time.time(), "sample 183 is unreadable", traceback_text)
    """
    room = _room()
    if room is None or _moved(room):
        return False
    while _SPARE:  # its slot, for the room's descriptor
        fd, identity = _SPARE.pop()
        with contextlib.suppress(OSError):
            if _fd_identity(fd) == identity:
                os.close(fd)
    kept = _kept_room(room)
    fd = _open_room(room)
    if fd is None:  # read-only now: through the descriptor `reserve` kept, where there is one
        fd = kept
    elif kept is not None:
        os.close(kept)
    if fd is None:  # a link, FIFO or folder put there: gone, and the report a new file
        release()
        try:
            fd = os.open(room, _FLAGS | os.O_EXCL, 0o644)
        except OSError:
            return False
    # The room's blocks are rewritten, never added to; a new file (no room: a rank under
    # torchrun) takes what a report needs.
    size = os.fstat(fd).st_size or ROOM
    data = report_json(rank, kind, when, message, callstack, max(size, MIN_ROOM)).encode()
    try:
        try:
            os.lseek(fd, 0, os.SEEK_SET)  # the kept descriptor stands past the room's spaces
            _write_all(fd, data)
            os.ftruncate(fd, len(data))  # the rest of the room given back
        finally:
            os.close(fd)
    except OSError:
        release()
        return False
    try:
        if room in _FOLDERS:  # a room of ours (`pipeplan run`'s rank): its error file
            os.replace(room, room.removesuffix(".tmp"))
        else:  # torchrun's path, new for each attempt: never over a file that is there
            _placed_new(room, room.removesuffix(".tmp"))
        return True
    except OSError:
        if room not in _FOLDERS:  # torchrun's: no launcher of ours would read or remove it
            release()
        # Else it stays, the whole report in it (a folder made read-only mid-run refuses the
        # rename): `pipeplan run`'s launcher reads it there (`read_room`), then removes it.
        return False


def _fd_identity(fd: int) -> tuple[int, int]:
    st = os.fstat(fd)
    return st.st_dev, st.st_ino


def _placed_new(room: str, path: str) -> None:
    """`room` renamed to `path` where nothing is at `path` (a hard link, then the room's name
    removed), else OSError. Found by the fifty-third round: a TORCHELASTIC_ERROR_FILE set by
    hand to the run's run.json (or any file) was replaced by a refused rank's report."""
    try:
        os.link(room, path)
    except FileExistsError:
        os.unlink(room)
        raise
    except OSError:  # a file system without hard links: looked at first, then renamed
        if os.path.lexists(path):
            os.unlink(room)
            raise FileExistsError(path) from None
        os.replace(room, path)
        return
    os.unlink(room)


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


def room_left(path: str | os.PathLike) -> bool:
    """Whether the room of the error file `path` is still there once its rank is gone: a rank
    keeps it from its start (`reserve`) until its normal end (`release`) or its report
    (`write`), so a rank that exited 0 with its room left ended before its part of the run
    did (`os._exit(0)` in data code: the thirtieth round). A rank whose disk had no room for
    it (`reserve` kept none) is not told apart.

        room_left("runs/k/logs/rank-1.error.json")   # True: rank 1 never reached its end
    """
    return os.path.lexists(f"{os.fspath(path)}.tmp")


def read_room(path: str | os.PathLike) -> dict | None:
    """The report a rank wrote into the room of the error file `path` but could not rename to
    it (its folder made read-only mid-run: `write`), as torch reads an error file's data; None
    where the room holds none (spaces: the rank wrote no report) or cannot be read.

        read_room("runs/k/logs/rank-0.error.json")   # {"message": …, "pipeplan": {…}}
    """
    try:
        with open(f"{os.fspath(path)}.tmp", "rb") as held:
            data = json.loads(held.read(ROOM + 1))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def release() -> None:
    """Give the room back (a rank's clean end, or a failed write): no PATH.tmp stays."""
    room = _room()
    if room is not None:
        with contextlib.suppress(OSError):
            if (fd := _kept_room(room)) is not None:
                os.close(fd)
    if room is not None and not _moved(room):
        with contextlib.suppress(OSError):
            os.unlink(room)
