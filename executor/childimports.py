"""What a process the data's code forks imports, told to the process that forked it.

A module of the user's imported only inside a forked child (a `multiprocessing` pool's worker
under the fork start method, a plain `os.fork()`) is in no sys.modules the launcher or a rank
can read: data.json lacked it, and a resume after it was edited trained on other data (the
seventy-third round). A child forked while the data's code runs writes each module it
imports from a file outside the installed folders (its name, the module that imported it,
its file) as one line to a file of its own, in a folder named after the process that
collects them: its forker, or that one's forker where a child forks in turn. The forker
reads and removes them as the data's code returns and whenever it asks (`found`). The folder
is made by the forker as it forks, under the temporary folder pipeplan started with (data
code that moves tempfile's folder meanwhile moves no report), and removed by it as it
forgets (`forget`: a new loading, its exit); a child never makes it, so one that outlives
its forker's last look writes nothing (the seventy-seventh round: a child importing after
the run made it again, and it stayed). One a process killed left is removed by the next
command that starts ranks (`spawn.remove_left_scratch`). A child that cannot write its
report marks the folder so: the forker's `problem` says so, and data.json is not written without
it. A child started afresh (the spawn and forkserver start methods) holds none of this: it is
a new interpreter.

    watch(running)                 # once: a fork while `running` is not empty reports
    report(name, path, target, importer, witness, installed)   # the witness's, in such a child
    found()                        # {"helper": [("mydata", "/home/me/helper.py")]} here
    problem()                      # None, or why a child's imports may be missing
    forget()                       # a new loading of the data: what came before is gone
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import secrets
import sys
import tempfile
import time
from collections.abc import Sequence
from typing import Any

from pipeplan.spawn import OWNER_TAG, owner_gone, owner_tag

# The most of one child's report read (a line is a name and two paths, each written once): a
# child that imports without end fills no memory of its forker's, and is said (`problem`).
MAX_REPORT_BYTES = 1 << 22
# The longest a forker waits for a child's report's lock (held for one write of one line).
LOCK_WAIT_S = 10.0

# Where the folders are made: the temporary folder as pipeplan started, absolute (`TMPDIR=.`
# and a child that changed its directory wrote elsewhere: the seventy-fourth round).
_BASE = os.path.abspath(tempfile.gettempdir())
_TOKEN = secrets.token_hex(8)  # a folder no other user's process can name before ours does
_REPORTS_FOLDER: list[str] = []  # this process's, once made (at its first fork in data code)
_REPORT_TO: list[str] = []  # in a child forked while the data's code ran: the folder
_FORKING_TO: list[str] = []  # set as a fork begins: the folder its child reports to
_SENT: set[bytes] = set()  # in a reporting child: the lines written (a reload writes none)
# collected: name → each (importer, file) reported, in order: two children may import two
# files under one name (a folder each put first on sys.path: the seventy-seventh round)
_FOUND: dict[str, list[tuple[str | None, str]]] = {}
_PROBLEMS: list[str] = []  # why a report may be missing (`problem`)
_STUCK: set[tuple[str, int]] = set()  # reports whose lock `_take` waited for in vain
_FAILED = "failed-"  # a mark a child leaves where it could not write its report


def watch(running: Sequence[Any]) -> None:
    """A child forked while `running` (the data's code running now) is not empty reports its
    imports, to this process's folder (or, forked by a reporting child, to that one's)."""

    def before() -> None:
        _FORKING_TO[:] = []
        if running:
            folder = _REPORT_TO[0] if _REPORT_TO else _made()
            _FORKING_TO[:] = [folder] if folder else []

    def child() -> None:
        _REPORT_TO[:] = _FORKING_TO
        _REPORTS_FOLDER.clear()
        _SENT.clear()
        _FOUND.clear()  # the forker's to collect, not this copy's
        _PROBLEMS.clear()
        _STUCK.clear()

    os.register_at_fork(before=before, after_in_child=child)


def _made() -> str | None:
    """This process's folder, made (again, after a `forget`) as it forks in the data's code,
    and a child's longest report name tried there; None (and the `problem` said) where it
    cannot be."""
    folder = _REPORTS_FOLDER[0] if _REPORTS_FOLDER else _folder()
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        longest = os.path.join(folder, f"{_FAILED}{'9' * 10}.jsonl")
        os.close(os.open(longest, os.O_WRONLY | os.O_CREAT, 0o600))
        os.unlink(longest)
    except OSError as exc:
        _said(f"a process it forked cannot report what it imports ({folder}: {exc.strerror})")
        return None
    _REPORTS_FOLDER[:] = [folder]
    return folder


def _folder() -> str:
    """This process's folder's name (made by `_made`), after its maker (`spawn.owner_tag`):
    one a process left that ended without collecting it (killed, stopped) is removed by the
    next pipeplan command that starts ranks (`spawn.remove_left_scratch`)."""
    if _NAMED.get("pid") != os.getpid():
        owner = owner_tag() or str(os.getpid())
        _NAMED.update(
            pid=os.getpid(), folder=os.path.join(_BASE, f"pipeplan-imports-{owner}-{_TOKEN}")
        )
    return _NAMED["folder"]


_NAMED: dict[str, Any] = {}  # `_folder`'s, for the process that named it


def _said(problem: str) -> None:
    if problem not in _PROBLEMS:
        _PROBLEMS.append(problem)


def reporting() -> bool:
    """Whether this process is a child that reports its imports."""
    return bool(_REPORT_TO)


def report(
    name: str,
    path: Any,
    target: Any,
    importer: str | None,
    witness: Any,
    installed: tuple[str, ...],
) -> None:
    """In a reporting child, about to import `name` (`find_spec`'s arguments), asked for by
    the module `importer`: its file, found by the finders after `witness` (the finder that
    calls this) as the import will find it, written as one line where it is a .py file outside
    the `installed` folders. Nothing is raised: the child's import goes on as it would; a
    report it cannot write leaves a mark its forker finds."""
    try:
        spec = None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if find is None or finder is witness:
                continue
            spec = find(name, path, target)
            if spec is not None:
                break
        origin = getattr(spec, "origin", None)
        if type(origin) is not str or not origin.endswith(".py"):
            return
        origin = os.path.abspath(origin)  # the child may have changed its directory
        line = (json.dumps([name, importer, origin]) + "\n").encode()
        if origin.startswith(installed) or line in _SENT:
            return
        _write(_REPORT_TO[0], line)
        _SENT.add(line)
    except Exception as exc:
        _mark(exc)


def _mark(exc: Exception) -> None:
    """The mark of a report this child could not write, with why, in its forker's folder."""
    with contextlib.suppress(Exception):
        why = f"{type(exc).__name__}: {getattr(exc, 'strerror', None) or exc}"[:200]
        mark = os.path.join(_REPORT_TO[0], f"{_FAILED}{os.getpid()}")
        fd = os.open(mark, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, why.encode())
        finally:
            os.close(fd)


def _write(folder: str, line: bytes) -> None:
    """`line` appended to this child's file in `folder`, under the file's lock, to the file
    that is there then: the forker reads one under its lock and removes it before letting go
    (`_take`), and a child that was waiting writes to a new one. Without the folder, nothing:
    its forker has forgotten this child's loading, or ended."""
    path = os.path.join(folder, f"{os.getpid()}.jsonl")
    owner = re.match(rf"pipeplan-imports-({OWNER_TAG})-", os.path.basename(folder))
    if owner is not None and owner_gone(owner[1]):
        return  # its forker is gone (a child that outlived the run): nobody reads it
    for _ in range(64):  # (the forker took the file away between the open and the lock)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        except FileNotFoundError:
            return  # no folder: nobody will read it
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                there = os.stat(path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                there = False
            if there:
                if os.write(fd, line) != len(line):
                    raise OSError(28, "the report was written in part")
                return
        finally:
            os.close(fd)
    raise OSError(11, "the report's file was taken away 64 times as it was written")


def found() -> dict[str, list[tuple[str | None, str]]]:
    """The modules this process's forked children reported importing since `forget`, by
    name: for each file imported under it, the module that imported it (None: installed code
    alone) and the file. The reports read are removed (the folder stays until `forget`); a
    child's mark that it could not write one, a report past MAX_REPORT_BYTES, or one whose
    lock a child held past LOCK_WAIT_S, is kept for `problem`."""
    if not _REPORTS_FOLDER:
        return _FOUND
    folder = _REPORTS_FOLDER[0]
    try:
        entries = os.listdir(folder)
    except FileNotFoundError:  # none since the last look
        return _FOUND
    except OSError as exc:
        _said(f"the reports of the processes it forked cannot be read ({folder}: {exc.strerror})")
        return _FOUND
    for entry in entries:
        text = _take(os.path.join(folder, entry))
        if entry.startswith(_FAILED):
            why = text.decode(errors="replace").strip() or "no reason given"
            _said(f"a process it forked could not report what it imported ({why})")
            continue
        if len(text) > MAX_REPORT_BYTES:
            _said(
                "a process it forked reported more than "
                f"{MAX_REPORT_BYTES >> 20} MiB of modules imported"
            )
            continue
        for line in text.splitlines():
            try:
                name, importer, origin = json.loads(line)
            except ValueError:
                continue
            if type(name) is str and type(origin) is str and type(importer) in (str, type(None)):
                reports = _FOUND.setdefault(name, [])
                if (importer, origin) not in reports:
                    reports.append((importer, origin))
    return _FOUND


def _take(path: str) -> bytes:
    """A child's report (or mark) read, at most one byte past MAX_REPORT_BYTES, and removed,
    under its lock: a line its child writes meanwhile waits, and then goes to a new file."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return b""
    try:
        stuck = (path, os.fstat(fd).st_ino)
        if stuck in _STUCK or not _locked(fd):
            # Waited for once: every call into the data's code looks again (the seventy-
            # eighth round: 10 s each, 221 s in all before the line)
            _STUCK.add(stuck)
            _said(
                f"a process it forked held its report locked for {LOCK_WAIT_S:.0f} s "
                f"({path}: stopped as it wrote?)"
            )
            return b""
        with contextlib.suppress(OSError):
            os.unlink(path)
        chunks, size = [], 0
        while size <= MAX_REPORT_BYTES and (chunk := os.read(fd, 1 << 16)):
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks)
    except OSError:
        return b""
    finally:
        os.close(fd)


def _locked(fd: int) -> bool:
    """Whether this process took the report's lock within LOCK_WAIT_S: a child holds it for
    one write, and one stopped in between (SIGSTOP, a debugger) must not hang its forker."""
    deadline = time.monotonic() + LOCK_WAIT_S
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.005)


def found_so_far() -> dict[str, list[tuple[str | None, str]]]:
    """What `found` collected when it last looked, without looking again."""
    return _FOUND


def known(name: str) -> list[tuple[str | None, str]]:
    """What the children reported of the module `name` as `found` last read: each file
    imported under that name with the module that imported it; empty where none did."""
    return _FOUND.get(name, [])


def problem() -> str | None:
    """Why a forked child's imports may be missing from `found` (its report could not be
    made, written or read whole), or None."""
    found()
    return "; ".join(_PROBLEMS) if _PROBLEMS else None


def forget() -> None:
    """The reports so far removed with their folder, and what was collected of them
    forgotten: a new loading of the data (an API call's), or the process's end. A child that
    writes later finds no folder, and writes nothing."""
    for _ in range(8):  # (a child's report made between the last look and the removal)
        found()
        if not _REPORTS_FOLDER:
            break
        folder = _REPORTS_FOLDER[0]
        with contextlib.suppress(OSError):  # those left unread (a stuck child's): forgotten
            for entry in os.listdir(folder):
                os.unlink(os.path.join(folder, entry))
        try:
            os.rmdir(folder)  # made again by the next fork in the data's code
        except FileNotFoundError:
            break
        except OSError:
            continue
        break
    _FOUND.clear()
    _PROBLEMS.clear()
    _STUCK.clear()
