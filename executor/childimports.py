"""What a process the data's code forks imports, told to the process that forked it.

A module of the user's imported only inside a forked child (a `multiprocessing` pool's worker
under the fork start method, a plain `os.fork()`) is in no sys.modules the launcher or a rank
can read: data.json lacked it, and a resume after it was edited trained on other data (the
seventy-third round). A child forked while the data's code runs writes each module it
imports from a file outside the installed folders (its name, the module that imported it,
its file) as one line to a file of its own, in a folder named after the process that
collects them: its forker, or that one's forker where a child forks in turn. The forker
reads and removes them as the data's code returns and whenever it asks (`found`), so a
process that ends without its exit callbacks leaves none behind. A child started afresh (the
spawn and forkserver start methods) holds none of this: it is a new interpreter.

    watch(running)                 # once: a fork while `running` is not empty reports
    report(name, path, target, importer, witness, installed)   # the witness's, in such a child
    found()                        # {"helper": ("mydata", "/home/me/helper.py")} here
    forget()                       # a new loading of the data: what came before is gone
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import sys
import tempfile
from collections.abc import Sequence
from typing import Any

# The most of one child's report read (a line is a name and two paths): a child that imports
# without end fills no memory of its forker's.
MAX_REPORT_BYTES = 1 << 20

_TOKEN = secrets.token_hex(8)  # a folder no other user's process can name before ours does
_REPORT_TO: list[str] = []  # in a child forked while the data's code ran: the folder
_FORKING_TO: list[str] = []  # set as a fork begins: the folder its child reports to
_FORKED: list[bool] = []  # not empty once the data's code has forked: reports may come
_FOUND: dict[str, tuple[str | None, str]] = {}  # collected: name → (importer, file)


def _folder() -> str:
    """Where the children of this process report (nothing is made until one does)."""
    return os.path.join(tempfile.gettempdir(), f"pipeplan-imports-{os.getpid()}-{_TOKEN}")


def watch(running: Sequence[Any]) -> None:
    """A child forked while `running` (the data's code running now) is not empty reports its
    imports, to this process's folder (or, forked by a reporting child, to that one's)."""

    def before() -> None:
        _FORKING_TO[:] = [_REPORT_TO[0] if _REPORT_TO else _folder()] if running else []
        if running and not _FORKED:
            _FORKED.append(True)

    def child() -> None:
        _REPORT_TO[:] = _FORKING_TO
        _FORKED.clear()
        _FOUND.clear()  # the forker's to collect, not this copy's

    os.register_at_fork(before=before, after_in_child=child)


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
    the `installed` folders. Nothing is raised: the child's import goes on as it would."""
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
        if not origin.startswith(installed):
            _write(_REPORT_TO[0], (json.dumps([name, importer, origin]) + "\n").encode())
    except Exception:
        pass


def _write(folder: str, line: bytes) -> None:
    """`line` appended to this child's file in `folder`, under the file's lock, to the file
    that is there then: the forker reads one under its lock and removes it before letting go
    (`_take`), and a child that was waiting writes to a new one."""
    path = os.path.join(folder, f"{os.getpid()}.jsonl")
    for _ in range(8):  # (the forker removed the file, or the folder, between two steps)
        os.makedirs(folder, mode=0o700, exist_ok=True)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        except FileNotFoundError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                there = os.stat(path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                there = False
            if there:
                os.write(fd, line)
                return
        finally:
            os.close(fd)


def found() -> dict[str, tuple[str | None, str]]:
    """The modules this process's forked children reported importing since `forget`, by
    name: the module that imported each (None: installed code alone) and its file. The
    reports read are removed (their folder too, once empty)."""
    if not _FORKED:
        return _FOUND
    folder = _folder()
    try:
        entries = os.listdir(folder)
    except OSError:
        return _FOUND
    for entry in entries:
        for line in _take(os.path.join(folder, entry)).splitlines():
            try:
                name, importer, origin = json.loads(line)
            except ValueError:
                continue
            if type(name) is str and type(origin) is str and type(importer) in (str, type(None)):
                _FOUND.setdefault(name, (importer, origin))
    with contextlib.suppress(OSError):
        os.rmdir(folder)
    return _FOUND


def _take(path: str) -> bytes:
    """A child's report read (at most MAX_REPORT_BYTES) and removed, under its lock: a line
    its child writes meanwhile waits, and then goes to a new file."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return b""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        with contextlib.suppress(OSError):
            os.unlink(path)
        return os.read(fd, MAX_REPORT_BYTES)
    except OSError:
        return b""
    finally:
        os.close(fd)


def known(name: str) -> tuple[str | None, str] | None:
    """What a child reported of the module `name` (its importer, its file) as `found` last
    read; None where none did."""
    return _FOUND.get(name)


def forget() -> None:
    """The reports so far removed, and what was collected of them forgotten: a new loading
    of the data (an API call's), or the process's end."""
    found()
    _FOUND.clear()
