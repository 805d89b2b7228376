"""Writing output files so that a failure never leaves a partial or clobbered file."""

from __future__ import annotations

import errno
import fcntl
import os
import re
import secrets
import shutil
import signal
import stat
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack, contextmanager, suppress
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pipeplan.errors import (
    BadArgumentError,
    InputFileError,
    OutputError,
    Stopped,
    excerpt,
    quoted,
)
from pipeplan.log import PATH_MAX
from pipeplan.spawn import OWNER_TAG, owner_gone, owner_tag
from pipeplan.startup import STOP_SIGNALS


def check_writable(
    path: str | Path,
    inputs: Iterable[str | Path | None] = (),
    *,
    run_owned: bool = False,
    flag: str = "--out",
) -> Path:
    """Fail early, before expensive work, if `path` cannot be created or replaced, is one of
    the command's `inputs` (a plan written over the profile it was made from), or lies inside
    a run directory (`check_outside_runs`) unless the run itself writes it (`run_owned`).

        check_writable("plan.json", inputs=[profile_path, cluster_path])
    """
    check_not_stdout(path, flag, "file")  # `flag`: what named the path, for its line
    if not run_owned:
        check_outside_runs(path)
    if isinstance(path, str) and (
        path.endswith(("/", os.sep)) or os.path.basename(path) in ("", ".", "..")
    ):
        # Path() drops a final '/' or '/.', and the write would replace a file (x.txt/.) or
        # create one where the user named a folder.
        raise OutputError(f"{path}: names a directory; give a file name")
    if os.path.islink(path):
        raise OutputError(f"{path}: {LINKED}")
    path = Path(path)
    parent = path.parent if str(path.parent) else Path(".")
    try:
        info = path.stat() if path.exists() else None
    except OSError as exc:  # e.g. a name longer than the file system allows
        raise OutputError(f"{path}: cannot write ({os_reason(exc)})") from None
    if path.is_dir():
        raise OutputError(f"{path}: is a directory, not a file")
    if info is not None and not stat.S_ISREG(info.st_mode):
        # A rename over /dev/null would replace the device with a file.
        raise OutputError(f"{path}: not a regular file; write to a file")
    for source in filter(None, inputs):
        if path.exists() and Path(source).is_file() and os.path.samefile(path, source):
            raise OutputError(f"{path}: is also an input of this command; write elsewhere")
    if not parent.is_dir():
        raise OutputError(f"{path}: {_no_folder(parent)}")
    # Every stop held from the probe's making to its removal: one landing between them left
    # `.pipeplan-probe-…` in the user's folder for good (the sixty-fourth round).
    with stops_deferred():
        try:
            fd, probe = tempfile.mkstemp(dir=parent, prefix=".pipeplan-probe-")
        except OSError as exc:
            raise OutputError(f"{path}: cannot write in {parent} ({os_reason(exc)})") from None
        os.close(fd)
        os.unlink(probe)
    return path


def check_not_shipped(path: str | Path, flag: str = "") -> None:
    """OutputError where `path` is or lies in the shipped profiles' folder (the `profiles`
    package), at any depth, as spelled or through links. Found by the ninety-first round:
    `profile --out profiles/vit-digits@cpu-1t.json` from a checkout replaced the profile every
    later run read by default, with no word (those runs then warned, and trained other
    weights); the ninety-second: plots and exports went into folders inside it; the
    ninety-third: a whole run (`--runs-dir`). `flag` names the flag that gave `path`."""
    try:
        shipped = Path(str(resources.files("profiles"))).resolve()
    except (ImportError, TypeError, OSError):  # (none installed: nothing to keep)
        return
    try:
        real = Path(path).resolve()
    except (OSError, RuntimeError):  # (a link loop: the path as spelled)
        real = Path(os.path.abspath(path))
    if any(p.is_relative_to(shipped) for p in (Path(os.path.abspath(path)), real)):
        raise OutputError(
            f"{flag + ' ' if flag else ''}{path}: is in the folder of profiles pipeplan ships, "
            "which runs read by default; write elsewhere"
        )


# Why an output that is a symbolic link is refused, whatever it points at (a file, nothing, a
# loop, a device): the write renames a new file over the link itself, so the link is replaced
# and its target never written. Found by the forty-first round: `plan --out /dev/stdout`,
# standard output redirected to a file, replaced the machine's /dev/stdout link with a plan.
# Only the last component: folders above it that are links are followed, as everywhere.
LINKED = "is a symbolic link, not a file of its own"


def _no_folder(parent: Path) -> str:
    """Why an output's `parent` is no folder to write in: what stands in its place or on its
    path (`_what_is_there`), as other outputs say, else that it does not exist. Found by the
    fortieth round: `profile --out f/p.json`, f a regular file, said "directory f does not
    exist".

        _no_folder(Path("f"))   # "f is a regular file, not a directory"
    """
    for folder in (*reversed(parent.parents), parent):
        what = _what_is_there(folder)
        if what is None:  # nothing there (or unreachable): the folder is missing
            break
        if what != "a directory":
            return f"{folder} is {what}, not a directory"
    return f"directory {parent} does not exist"


def check_not_stdout(path: str | Path, flag: str, kind: str) -> None:
    """`check_not_stdout(out, "--plot", "directory")`: "-", the usual spelling of standard
    output, is refused for every output a command writes (a file or a directory of them);
    `export --out -` wrote a folder named '-' (the nineteenth round) where `plan --out -` was
    refused. OutputError naming the flag. (./- names such a file or folder.)"""
    if str(path) == "-":
        raise OutputError(f"-: {flag} takes a {kind} name, not standard output")
    # A directory's files lie below it: an --out or --plot within PATH_MAX whose files were
    # not was written, or half of it, and named no flag (the fifty-seventh round).
    depth = OUTPUT_FILES_DEPTH if kind == "directory" else 0
    check_name_lengths(path, flag, depth)  # before anything probes the path


# The longest name a command writes in an output directory, with room: an export's
# `.tmp-NAME-PID/tokenizer_config.json`, a plot's `phase12-step.png`.
OUTPUT_FILES_DEPTH = 64


def check_name_lengths(path: str | Path, flag: str, depth: int = 0) -> None:
    """Every name along an output path `path` fits the file system (its NAME_MAX, 255 bytes
    on most), told before anything looks at the path. Found by the thirty-sixth round:
    `export --out NAME` of a 300-character NAME said "<out>/run.json: File name too long",
    a file export never writes, from the check that the output lies in no run directory
    (`is_run_directory`); plan, calibrate and profile's --out and run's --runs-dir said the
    same. OutputError naming the flag, and the name too long when it is not the whole path.

        check_name_lengths("a" * 300, "--out")
        # OutputError: --out 'aaa…' (300 characters): file name too long (300 bytes; …)
    """
    given = str(path)
    whole = len(os.fsencode(os.path.abspath(given)))
    if whole + depth >= PATH_MAX:  # the kernel's limit on a path, NUL included (53rd round)
        deeper = f", and the files written in it lie up to {depth} deeper" if depth else ""
        raise OutputError(
            f"{flag} {quoted(given)}: path too long ({whole:,} bytes from /{deeper}; the file "
            f"system takes {PATH_MAX - 1:,} a path)"
        )
    parts = Path(given).parts
    for i, name in enumerate(parts):
        size = len(os.fsencode(name))
        if size <= _SHORTEST_NAME_MAX:
            continue
        limit = _name_max(Path(*parts[:i]) if i else Path("."))
        if size > limit:
            which = "" if name == given else f"{quoted(name, 40)}: "
            raise OutputError(
                f"{flag} {quoted(given)}: file name too long ({which}{size} bytes; the file "
                f"system takes {limit} a name)"
            )


# The least NAME_MAX POSIX allows: a name no longer than this fits every file system.
_SHORTEST_NAME_MAX = 14
# The usual NAME_MAX (ext4, xfs, btrfs, tmpfs, NFS), where a file system does not tell.
_NAME_MAX = 255


def _name_max(folder: Path) -> int:
    """The longest name (bytes) the file system holding `folder`, or its nearest existing
    folder above, takes; 255 when none tells."""
    where = Path(os.path.abspath(folder))
    for candidate in (where, *where.parents):
        try:
            return os.pathconf(candidate, "PC_NAME_MAX")
        except (OSError, ValueError):  # not there (yet), or a name too long itself
            continue
    return _NAME_MAX


def same_path(a: str | Path, b: str | Path) -> bool:
    """Whether `a` and `b` name one file or folder: as itself, through a link, or by another
    spelling (`//tmp/x`, `x/../x`); one that is not there (any more) or cannot be read, by
    its resolved path (`os.path.normpath` keeps POSIX's leading `//`).

        same_path("/tmp/x", "//tmp/x")   # True
    """
    try:
        return os.path.samefile(a, b)
    except OSError:  # absent or unreadable: its own reader says so
        return Path(a).resolve() == Path(b).resolve()


def check_distinct(paths: Iterable[str | Path], what: str) -> None:
    """The same folder given twice (as itself, through a link, or by another spelling) is
    refused, naming it: `calibrate RUN RUN` fitted every step twice and `report RUN
    --baseline RUN` measured a speedup of exactly 1.

        check_distinct(run_dirs, "run")   # BadArgumentError: runs/a: the same run as runs/./a
    """
    seen: list[Path] = []
    for path in map(Path, paths):
        for earlier in seen:
            if same_path(earlier, path):
                spelled = "twice" if str(earlier) == str(path) else f"as {earlier} too"
                raise BadArgumentError(f"{path}: the same {what} given {spelled}")
        seen.append(path)


# What `pipeplan run` keeps at the top of a run directory (tests/test_hostile_runs.py checks a
# real run's against it).
RUN_ENTRIES = frozenset(
    {".lock", "run.json", "run.jsonl", "run.resume.json", "summary.json", "metrics.csv"}
    | {"profile.json", "run.plan.json", "data.json", "checkpoints", "model", "cache", "logs"}
)
# Numbered entries: the profile each online recalibration fits (executor.planning).
CALIBRATION_FILE = re.compile(r"calibration-([0-9]+)\.json")
RUN_ENTRY_PATTERNS = (CALIBRATION_FILE,)


def run_entry(name: str) -> bool:
    """Whether `name`, at the top of a run directory, is something the run keeps."""
    return name in RUN_ENTRIES or any(p.fullmatch(name) for p in RUN_ENTRY_PATTERNS)


def check_outside_runs(path: str | Path) -> None:
    """A command's output may not be, or lie inside, a run directory (`is_run_directory`, as
    spelled or through a link: `enclosing_run`): the folder belongs to its run. What the run
    keeps there (its records, checkpoints, `model/`) would no longer match (a plot in a
    checkpoint, a plan over run.jsonl), and anything else is lost with the run (the demo
    rebuilds its runs' folders) or mistaken for its files; no run may start inside one either.
    The run's own writes are `check_writable(..., run_owned=True)`.

        check_outside_runs("runs/ft/checkpoints/step-8/plots")   # OutputError
        check_outside_runs("runs/ft/plots")                       # OutputError (17th round)
        check_outside_runs("runs/plan.json")                      # fine: runs/ is no run
    """
    check_not_shipped(path)  # (every output a user names comes here)
    run = enclosing_run(path)
    if run is None:
        return
    try:
        real = Path(path).resolve()
    except (OSError, RuntimeError):  # a link loop: the path as spelled names the entry
        real = Path(os.path.abspath(path))
    where = next(p for p in (Path(os.path.abspath(path)), real) if p.is_relative_to(run))
    parts = where.relative_to(run).parts
    entry = run / parts[0] if parts else run
    kept = bool(parts) and run_entry(parts[0])
    if kept:
        raise OutputError(
            f"{path}: would write into {entry}, which `pipeplan run` keeps; write elsewhere"
        )
    raise OutputError(
        f"{path}: lies inside the run directory {run}, whose files are its own; write beside "
        "that run, not in it"
    )


# What `pipeplan run` makes in every run directory besides run.json.
RUN_MARKS = (".lock", "run.jsonl", "checkpoints")


def is_run_directory(folder: Path) -> bool:
    """The one test of a run directory: a folder holding run.json, or two of its lock, its
    records and its checkpoints. A run copied without its dot-files (`cp -r RUN/* COPY/`),
    prepared but not started, or with run.json lost is still one: report, calibrate and resume
    read it (or would, once run.json is back), so nothing may write into what it keeps, no run
    may start inside it, and the demo may rebuild it. A folder that cannot be looked into (a
    name too long, one it may not search) is none: nothing could be written in it either, and
    the probe named a file no command writes ("<out>/run.json: File name too long", the
    thirty-sixth round); what then uses the path says why it cannot."""
    try:
        if (folder / "run.json").is_file():
            return True
        return sum((folder / name).exists() for name in RUN_MARKS) >= 2
    except OSError:
        return False


def enclosing_run(path: str | Path, *, strictly: bool = False) -> Path | None:
    """The run directory (`is_run_directory`) that `path` is or lies inside, looked for along
    the path as spelled and along the path its links lead to (`ext/ck`, a link to
    RUN/checkpoints, put a new run inside RUN where its spelling shows no run); None if
    neither is in one. `strictly`: only folders above `path` count (`path` is a run itself).

        enclosing_run("ext/ck")                     # Path('/…/runs/two')
        enclosing_run("runs/exp1", strictly=True)   # None: runs/ is no run
    """
    spelled = Path(os.path.abspath(path))  # `..` as written: runs/two/checkpoints/.. is two
    try:
        real = Path(path).resolve()
    except (OSError, RuntimeError):  # a link loop: creating anything there fails, in one line
        real = spelled
    for where in dict.fromkeys((spelled, real)):
        for folder in where.parents if strictly else (where, *where.parents):
            if is_run_directory(folder):
                return folder
    return None


# The output a command was asked for, once `write_files(user_output=True)` has put it in
# place: the command's work is done, and `cli.main` acts on no stop from then on (what is
# left is saying so). Found by the sixty-fifth round: `plan --out` over an old plan, stopped
# as it printed its phases (a stderr that did not drain), said "stopped by SIGTERM", exit
# 143, with the old plan already replaced.
OUTPUT_WRITTEN: list[Path] = []


def write_atomic(path: str | Path, content: str | bytes, *, user_output: bool = False) -> None:
    """Write to a temporary file beside `path`, fsync, then rename over it (the caller has
    checked a user's target with `check_writable`; `user_output`: see `write_files`)."""
    write_files([(path, content)], user_output=user_output)


def write_files(
    contents: Iterable[tuple[str | Path, str | bytes]],
    stale: Iterable[Path] = (),
    *,
    user_output: bool = False,
) -> list[Path]:
    """Write a set of files all or nothing: each to a temporary file beside its target
    (fsynced), and only once every one is written, all renamed into place with every stop
    (Ctrl-C, SIGTERM, …: `stops_deferred`) held until the last rename. A failure (a full
    disk, an error making the next file's content) removes the temporaries and changes no
    target.

        write_files((directory / name, render(figure)) for name, figure in figures)

    `contents` may be a generator: each file's content is made just before it is written.
    `stale`: files of the set this one replaces that it does not write again (`phase5-step.png`
    of a longer plan), removed in the same step: moved aside before the renames, put back if
    one fails, deleted once all are done, so no mixed set is left either way.

    Each target's folder is held open from its first file to the last rename (`held_folder`),
    every step made through it: a folder on the path swapped meanwhile redirects nothing, and
    is refused before any rename (the forty-third round's F5, found of export). `user_output`
    (plan and calibrate's --out, the plots): the folder must lie in no run directory
    (`check_outside_runs`) then too, not only when the command started.
    """
    staged: list[tuple[str, Path, HeldFolder]] = []  # (temporary, target, its folder)
    moved: list[tuple[str, Path, HeldFolder]] = []  # (where a stale file waits, its name, …)
    target: str | Path = ""  # the file being written, for the message
    with ExitStack() as holding:
        folders: dict[Path, HeldFolder] = {}

        def folder_of(path: Path) -> HeldFolder:
            if path.parent not in folders:
                check = (lambda: check_outside_runs(path)) if user_output else None
                folders[path.parent] = holding.enter_context(held_folder(path.parent, check, path))
                _remove_left_temporaries(folders[path.parent])
            return folders[path.parent]

        try:
            for target, content in contents:
                path = check_writable(target, run_owned=True)
                folder = folder_of(path)
                staged.append((_write_temporary(folder, path, content), path, folder))
            for _, target, folder in staged:  # a link made since `check_writable`: never
                if _is_link(folder, target.name):  # renamed over
                    raise OutputError(f"{target}: {LINKED}")
            for folder in folders.values():  # the paths still lead to the folders written
                folder.confirm()
            # Every stop held, not Ctrl-C alone: a SIGTERM between two renames left a mixed
            # set of old and new plots (the sixtieth round).
            with stops_deferred():
                for target in stale:
                    folder = folder_of(target)
                    moved.append((_move_aside(folder, target), target, folder))
                for tmp, target, folder in staged:
                    os.replace(tmp, target.name, src_dir_fd=folder.fd, dst_dir_fd=folder.fd)
                for aside, _, folder in moved:  # the set in place: before a stop acts
                    with suppress(FileNotFoundError):
                        os.unlink(aside, dir_fd=folder.fd)
                moved.clear()
                if user_output:  # before a stop held meanwhile acts (`OUTPUT_WRITTEN`)
                    OUTPUT_WRITTEN[:] = [path for _, path, _ in staged]
        except BaseException as exc:
            for tmp, _, folder in staged:
                with suppress(FileNotFoundError):
                    os.unlink(tmp, dir_fd=folder.fd)
            for aside, path, folder in moved:
                os.replace(aside, path.name, src_dir_fd=folder.fd, dst_dir_fd=folder.fd)
            if isinstance(exc, OSError):
                # `write_failure`: past `ulimit -f`, the limit is named, as the run's own files
                # name it (forty-second round: "write failed (File too large)" alone).
                why = write_failure(exc, target)
                raise OutputError(f"{target}: write failed ({why})") from None
            raise
    return [path for _, path, _ in staged]


def _is_link(folder: HeldFolder, name: str) -> bool:
    """Whether `name` in the held `folder` is a symbolic link (not followed)."""
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=folder.fd, follow_symlinks=False).st_mode)
    except FileNotFoundError:
        return False


# What torch.save's zip writer raises when a write fails (a full disk): a RuntimeError whose
# text names its C++ source, never an errno.
# (The last: the C++ stream under torch's writer, where the limit is met as it closes the
# archive: the fifty-fifth round's checkpoint said "basic_ios::clear: iostream error".)
TORCH_WRITER = re.compile(
    r"PytorchStreamWriter|inline_container|file write failed|unexpected pos|basic_ios::clear"
)
# Below this many free bytes, a writer that failed without an errno ran out of space.
NEARLY_FULL = 1 << 20


def write_failure(exc: BaseException, where: str | Path) -> str | None:
    """Why writing under `where` failed, in words (`No space left on device`), when `exc` is a
    failed write: an OSError, a SafetensorError wrapping one (`I/O error: … (os error 28)`),
    or torch.save's RuntimeError from its zip writer; None for anything else (a bug, Ctrl-C),
    which the caller re-raises.

        except BaseException as exc:
            remove(tmp)
            if (reason := write_failure(exc, out)) is None: raise
            raise OutputError(f"{out}: write failed ({reason})") from None
    """
    if isinstance(exc, OSError):
        return os_reason(exc)
    text = " ".join(str(exc).split())
    if type(exc).__name__ == "SafetensorError" and "I/O error" in text:
        # The export's weights: past `ulimit -f` the limit is named, as an OSError's is
        # (forty-second round: "write failed (File too large)" alone).
        code = re.search(r"\(os error ([0-9]+)\)", text)
        return _strerror(int(code[1])) if code else text.split("I/O error:", 1)[1].strip()
    if isinstance(exc, RuntimeError) and TORCH_WRITER.search(text):
        free = _free_bytes(where)
        if free is not None and free < NEARLY_FULL:
            return os.strerror(errno.ENOSPC)
        if (limit := size_limit()) is not None and _reached(where, limit):
            return too_large(limit)
        return f"torch's file writer failed: {excerpt(text)}"
    return None


def _strerror(code: int | None) -> str | None:
    """An errno in words, EFBIG with the file size limit that caused it (`too_large`), EMFILE
    and ENFILE with the open-files limit (`too_many_open`); None for no errno."""
    if code is None:
        return None
    if code == errno.EFBIG and (limit := size_limit()) is not None:
        return too_large(limit)
    if code in (errno.EMFILE, errno.ENFILE):
        return too_many_open(code)
    return os.strerror(code)


def os_reason(exc: OSError) -> str:
    """Why an OSError failed, in words, with the limit that caused it where one did
    (`_strerror`): `os_reason(OSError(errno.EMFILE, "Too many open files"))`."""
    if exc.errno in (errno.EFBIG, errno.EMFILE, errno.ENFILE):
        return _strerror(exc.errno) or str(exc)
    return exc.strerror or str(exc)


def too_many_open(code: int) -> str:
    """EMFILE in words, with the open-files limit, as a failed collective says it (`faults`);
    ENFILE, the system's table. Found by the sixty-first round: data code that took every
    descriptor of a rank in its final evaluation failed the run's last writes "(Too many
    open files)", the limit never named.

        too_many_open(errno.EMFILE)   # "this process has too many files open: the open-…"
    """
    import resource

    if code == errno.ENFILE:
        return "the system has too many files open (its file table, fs.file-max, is full)"
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return (
        f"this process has too many files open: the open-files limit, ulimit -n, is {soft}; "
        "its own code, such as data code, may hold them"
    )


def size_limit() -> int | None:
    """The file size limit (`ulimit -f`, RLIMIT_FSIZE's soft limit) in bytes; None if none.
    SIGXFSZ is ignored (`startup`), so a write past it fails with EFBIG, and torch's zip
    writer, which loses the errno, leaves its file exactly this long."""
    import resource

    soft = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    return None if soft == resource.RLIM_INFINITY else soft


def too_large(limit: int) -> str:
    """EFBIG in words, with the limit that caused it. Found by the forty-first round: a
    checkpoint under `ulimit -f 3000` quoted torch's "unexpected pos" and the free disk.

        too_large(3072000)   # "File too large: the file size limit, ulimit -f, is 3072000 bytes"
    """
    return f"{os.strerror(errno.EFBIG)}: the file size limit, ulimit -f, is {limit} bytes"


def _reached(where: str | Path, limit: int, most: int = 1000) -> bool:
    """Whether `where`, or a file in it or in its folders (the first `most` entries, never
    following a link), is at least `limit` bytes: what a write stopped by the limit leaves."""
    seen = 0
    for folder, dirs, files in os.walk(where):
        for name in files:
            seen += 1
            with suppress(OSError):
                if os.lstat(os.path.join(folder, name)).st_size >= limit:
                    return True
        if seen + len(dirs) > most:
            return False
    with suppress(OSError):
        info = os.lstat(where)
        return stat.S_ISREG(info.st_mode) and info.st_size >= limit
    return False


def _free_bytes(where: str | Path) -> int | None:
    """Free bytes on the file system holding `where` (or the nearest folder above it that
    exists); None if none can be read."""
    for folder in (Path(where), *Path(where).parents):
        try:
            return shutil.disk_usage(folder).free
        except OSError:
            continue
    return None


@contextmanager
def new_directories(directory: str | Path) -> Iterator[Path]:
    """Create `directory` and the folders above it that are missing for the block; if the
    block fails (a full disk, Ctrl-C), remove again those it created that are still empty, so
    a command that wrote nothing leaves no folder behind.

        with new_directories(out.parent):
            write_files(...)
    """
    directory = Path(directory)
    missing = missing_folders(directory)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        remove_empty(missing)
        raise OutputError(f"{directory}: {_not_made(directory, exc)}") from None
    try:
        yield directory
    except BaseException:
        remove_empty(missing)
        raise


def missing_folders(directory: Path) -> list[Path]:
    """`directory` and the folders above it that do not exist yet, deepest first: what a
    command that makes it made (`remove_empty` takes them away again)."""
    missing = []
    for folder in (directory, *directory.parents):
        if os.path.lexists(folder):  # a name too long is not there: its writer says why
            break
        missing.append(folder)
    return missing


def _not_made(directory: Path, exc: OSError) -> str:
    """Why `directory` could not be made, naming what stands in its place or on its path as
    other outputs do (`entry_kind`); else the system's reason. Found by the twenty-fifth
    round: `preview --plot /etc/passwd` said "cannot create directory (File exists)".

        _not_made(Path("/etc/passwd"), exc)     # "is a regular file, not a directory"
        _not_made(Path("/etc/passwd/p"), exc)   # "cannot create directory (/etc/passwd is …)"
    """
    for folder in (*reversed(directory.parents), directory):
        what = _what_is_there(folder)
        if what == "a directory":
            continue
        if what is None:  # nothing there: the folders from here on were to be made
            break
        if folder == directory:
            return f"is {what}, not a directory"
        return f"cannot create directory ({folder} is {what}, not a directory)"
    return f"cannot create directory ({exc.strerror or exc})"


def _what_is_there(path: Path) -> str | None:
    """`entry_kind` of what `path` leads to (a link to a folder is a folder), "a symbolic link
    to nothing" for a dangling one; None when nothing is there or it cannot be reached."""
    try:
        return entry_kind(os.stat(path).st_mode)
    except FileNotFoundError:
        pass
    except OSError:
        return None
    try:
        os.lstat(path)
    except OSError:
        return None
    return "a symbolic link to nothing"


def remove_empty(folders: Iterable[Path]) -> None:
    """Remove each of `folders` (deepest first) that is empty; one that is not stays."""
    for folder in folders:
        with suppress(OSError):
            folder.rmdir()


def _move_aside(folder: HeldFolder, path: Path) -> str:
    """Rename `path`, in the held `folder`, to a new hidden name beside it (reserved as
    mkstemp reserves one, so nothing else's name is taken), from where it can be put back or
    deleted. Returns that name, in `folder`."""
    fd, aside = _new_file(folder, f".{path.name}.", ".stale")
    os.close(fd)
    try:
        os.replace(path.name, aside, src_dir_fd=folder.fd, dst_dir_fd=folder.fd)
    except BaseException:
        os.unlink(aside, dir_fd=folder.fd)
        raise
    return aside


def _write_temporary(folder: HeldFolder, path: Path, content: str | bytes) -> str:
    """`content` in a new temporary file beside `path` in its held `folder`, fsynced, with
    the mode `path` gets; removed again if the write fails. Returns its name, in `folder`."""
    data = content.encode("utf-8") if isinstance(content, str) else content
    # Named after this process (`_remove_left_temporaries`), where /proc can name it.
    owner = f"{tag}-" if (tag := owner_tag()) else ""
    # The target's name, cut to leave room for the bytes around it: a name of 242 to 255
    # bytes, which the file system takes, failed "File name too long" (the fifty-eighth round).
    name = os.fsdecode(os.fsencode(path.name)[: _NAME_MAX - 14 - len(owner)])
    fd, tmp = _new_file(folder, f".{name}.{owner}", ".tmp")
    try:
        # A new file is made 0600: give it the replaced file's mode, or a new file's.
        os.fchmod(fd, output_mode(path.name, folder.fd))
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        os.unlink(tmp, dir_fd=folder.fd)
        raise
    return tmp


# The characters of a temporary name's random part, as tempfile draws them
# (`executor.checkpoint` recognises the names by them).
_NAME_CHARACTERS = "abcdefghijklmnopqrstuvwxyz0123456789_"
# What follows the target's name in its temporary's (`_write_temporary`): its maker, where
# there is /proc to name it (`owner_tag`), then the random part.
TEMPORARY_PART = rf"(?:{OWNER_TAG}-)?[a-z0-9_]{{8}}\.tmp"
_LEFT_TEMPORARY = re.compile(rf"\..+\.({OWNER_TAG})-[a-z0-9_]{{8}}\.tmp", re.DOTALL)


def _remove_left_temporaries(folder: HeldFolder) -> None:
    """The temporaries that writes into the held `folder` staged and whose process is gone
    (`owner_gone`), removed: one killed outright (SIGKILL, the OOM killer) as it staged a
    `--plot` set left a hidden `.NAME.png.….tmp` for each plot, which no later write removed
    (the sixtieth round). Only this user's plain files named as `_write_temporary` names
    them; a live process's, another host's or another container's are never judged."""
    try:
        entries = os.listdir(folder.fd)
    except OSError:
        return
    for entry in entries:
        named = _LEFT_TEMPORARY.fullmatch(entry)
        if named is None or not owner_gone(named[1]):
            continue
        with suppress(OSError):
            found = os.stat(entry, dir_fd=folder.fd, follow_symlinks=False)
            if stat.S_ISREG(found.st_mode) and found.st_uid == os.getuid():
                os.unlink(entry, dir_fd=folder.fd)


# An export's folder as it is written (`models.export`; its pid alone where there is no
# /proc), and the file in it that says so.
EXPORT_FOLDER = re.compile(rf"\.pipeplan-export-({OWNER_TAG}|[0-9]{{1,10}})-[0-9a-f]{{8}}")
EXPORT_MARK = ".pipeplan-export-incomplete"


def remove_dead_exports(folder: HeldFolder) -> None:
    """The folders of exports into `folder` whose process is gone (`owner_gone`): one killed
    outright (SIGKILL, the OOM killer) left its half-written copy of the model, as large as
    the model, and every later export beside it (the fifty-seventh round). Only a folder
    named as `models.export` names its own and holding its mark: a user's folder that looked
    like one (`.tmp-NAME-PID`) went, contents and all (the fifty-eighth round); a live
    process's, another host's or another container's is never judged. Also as a command
    claims or reads a run directory (`_run_exports_removed`)."""
    try:
        entries = os.listdir(folder.fd)
    except OSError:
        return
    for entry in entries:
        named = EXPORT_FOLDER.fullmatch(entry)
        if named is None or not owner_gone(named[1]):
            continue
        try:
            mark = os.stat(f"{entry}/{EXPORT_MARK}", dir_fd=folder.fd, follow_symlinks=False)
        except OSError:
            continue
        if stat.S_ISREG(mark.st_mode):
            shutil.rmtree(folder.entry(entry), ignore_errors=True)


def _run_exports_removed(directory: Path) -> None:
    """The run's own model exports (`model/` as written) and staged files (`.NAME.….tmp`)
    whose writer is gone, removed from `directory` as a command claims (`claim_directory`) or
    reads (`reading_run`) it: `pipeplan run` killed outright (SIGKILL) as its ranks exported
    the model left its `.pipeplan-export-…/` in a run that had finished its epochs, which no
    resume removed (it is refused) and export, report and calibrate left for good (the
    sixty-second round); killed as rank 0 wrote summary.json, its `.summary.json.….tmp`,
    which only a next write into the folder removed, and a finished run has none (the
    sixty-third); killed as rank 0 wrote a checkpoint, its `.tmp-step-N/`
    (`_remove_dead_checkpoints`), which a resume refused for want of a checkpoint never
    removed (the sixty-fourth). Never raises."""
    with suppress(OSError, OutputError), held_folder(directory) as folder:
        remove_dead_exports(folder)
        _remove_left_temporaries(folder)
        _remove_dead_checkpoints(folder)


# A checkpoint as rank 0 writes it (`executor.checkpoint`: `.tmp-step-N/`, renamed `step-N/`
# once whole), and the empty file in it that names its writer (`owner_tag`) until then.
CHECKPOINT_FOLDER = re.compile(r"\.tmp-step-[0-9]{1,12}")
CHECKPOINT_WRITER = ".pipeplan-writer-"
_CHECKPOINT_WRITER = re.compile(rf"{re.escape(CHECKPOINT_WRITER)}({OWNER_TAG})")


def _remove_dead_checkpoints(run: HeldFolder) -> None:
    """The checkpoints in the held `run`'s checkpoints/ that a writer now gone (`owner_gone`)
    left half-written: `pipeplan run` killed outright (SIGKILL) as rank 0 wrote its first
    checkpoint left `.tmp-step-5/`, which the resume it refused ("no checkpoint to resume
    from") never removed, nor report or export (the sixty-fourth round). Only a folder named
    as a checkpoint's and holding its writer's mark; one without (its writer killed as it made
    it, or no /proc) is the next resume's to remove (`checkpoint.remove_partial`). A checkpoint
    renamed aside to rewrite its step is put back first (`restore_replaced`)."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        checkpoints = os.open("checkpoints", flags, dir_fd=run.fd)
    except OSError:
        return
    try:
        restore_replaced(checkpoints)
        for entry in os.listdir(checkpoints):
            if CHECKPOINT_FOLDER.fullmatch(entry) and _writer_gone(checkpoints, entry):
                remove_checkpoint(checkpoints, entry)  # its mark may go first
    finally:
        os.close(checkpoints)


# A checkpoint rank 0 renamed aside (`.old-step-N/`) to put a new one of the same step in its
# place (`executor.checkpoint._write`), until that one is there.
REPLACED = ".old-"
REPLACED_CHECKPOINT = re.compile(rf"{re.escape(REPLACED)}(step-[0-9]{{1,12}})")


def restore_replaced(checkpoints: int) -> None:
    """The checkpoints in the open `checkpoints` folder that rank 0 renamed aside to rewrite
    their step (`.old-step-N/`): renamed back where `step-N/` is missing (rank 0 killed
    outright between the two renames: `latest` named a folder that was gone, and the resume,
    export and report were refused, the sixty-fifth round), else removed (killed or stopped
    once the new one was in place). Only this user's folders holding a manifest.json (a
    checkpoint's); called where no rank writes
    (a claim, a read, `checkpoint.remove_partial`). Also what a removal killed midway left
    (`REMOVED_CHECKPOINT`), removed. Never raises.

        restore_replaced(os.open("runs/k/checkpoints", os.O_RDONLY | os.O_DIRECTORY))
    """
    try:
        entries = os.listdir(checkpoints)
    except OSError:
        return
    for entry in entries:
        named = REPLACED_CHECKPOINT.fullmatch(entry)
        if named is None and not REMOVED_CHECKPOINT.fullmatch(entry):
            continue
        with suppress(OSError):
            found = os.stat(entry, dir_fd=checkpoints, follow_symlinks=False)
            if not stat.S_ISDIR(found.st_mode) or found.st_uid != os.getuid():
                continue
            if named is None:
                # Whether its remover lives does not matter: a folder so named is never
                # written again, only removed, and two removals of it end alike. Only one
                # that holds a removal's mark, or nothing: a user's folder of the name stays.
                _remove_marked(checkpoints, entry, found_only=True)
                continue
            # A checkpoint's, holding its manifest: a user's folder of the name is not judged.
            manifest = os.stat(f"{entry}/manifest.json", dir_fd=checkpoints, follow_symlinks=False)
            if not stat.S_ISREG(manifest.st_mode):
                continue
            try:
                os.stat(named[1], dir_fd=checkpoints, follow_symlinks=False)
            except FileNotFoundError:  # the new one never came: the old one is the checkpoint
                os.rename(entry, named[1], src_dir_fd=checkpoints, dst_dir_fd=checkpoints)
            else:
                remove_checkpoint(checkpoints, entry)


# A checkpoint folder no longer needed (an `.old-step-N/` whose replacement is in place, a
# `step-N/` pruned, a dead or failed writer's `.tmp-step-N/`) as it is removed:
# `.removing-step-N.OWNER/`, its remover's `owner_tag` (its pid alone without /proc), which
# keeps two removals of a step's folders apart.
REMOVED_CHECKPOINT = re.compile(rf"\.removing-step-[0-9]{{1,12}}\.(?:{OWNER_TAG}|[0-9]{{1,10}})")


def remove_checkpoint(checkpoints: int, name: str) -> None:
    """Remove the checkpoint folder `name` (`step-N`, `.old-step-N`, `.tmp-step-N`) from the open
    `checkpoints` folder, renamed `REMOVED_CHECKPOINT` first: rmtree deletes in directory
    order (manifest.json first on tmpfs), and SIGKILL in it left a folder without its
    manifest that no command judged pipeplan's, as large as the model and its AdamW state,
    for good (the sixty-sixth round). So named at every instant of its removal, what a kill
    leaves is removed by the next claim or read of the run (`restore_replaced`). Never raises.

        remove_checkpoint(os.open("runs/k/checkpoints", os.O_RDONLY | os.O_DIRECTORY), "step-2")
    """
    removing = f".removing-step-{name.rpartition('step-')[2]}.{owner_tag() or os.getpid()}"
    with suppress(OSError):  # not renamed (a name too long, one in the way): removed as named
        mark = os.open(f"{name}/{REMOVAL_MARK}", _MARK_FLAGS, 0o600, dir_fd=checkpoints)
        os.close(mark)
        os.rename(name, removing, src_dir_fd=checkpoints, dst_dir_fd=checkpoints)
        name = removing
    _remove_marked(checkpoints, name)


# The file a removal puts in a checkpoint folder before renaming it `REMOVED_CHECKPOINT`, and
# takes away last, as the folder is empty but for it: a folder of that name that holds neither
# it nor nothing is a user's (the sixty-seventh round: `pipeplan report` deleted a user's
# `.removing-step-1.99999/`).
REMOVAL_MARK = ".pipeplan-removing"
_MARK_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC


def _remove_marked(checkpoints: int, name: str, found_only: bool = False) -> None:
    """Remove the folder `name` of the open `checkpoints`, its `REMOVAL_MARK` last (a kill
    midway leaves it marked); `found_only`: only where it holds the mark or nothing (one
    `restore_replaced` found). Never raises."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        folder = os.open(name, flags, dir_fd=checkpoints)
    except OSError:
        return
    try:
        entries = os.listdir(folder)
        if found_only and entries and REMOVAL_MARK not in entries:
            return
        for entry in entries:
            if entry == REMOVAL_MARK:
                continue
            with suppress(OSError):
                if stat.S_ISDIR(os.stat(entry, dir_fd=folder, follow_symlinks=False).st_mode):
                    shutil.rmtree(entry, dir_fd=folder, ignore_errors=True)
                else:
                    os.unlink(entry, dir_fd=folder)
        with suppress(OSError):
            os.unlink(REMOVAL_MARK, dir_fd=folder)
    except OSError:
        return
    finally:
        os.close(folder)
    with suppress(OSError):
        os.rmdir(name, dir_fd=checkpoints)


def _writer_gone(checkpoints: int, name: str) -> bool:
    """Whether the folder `name` in the open `checkpoints` is this user's and holds the mark
    of a writer that is gone (`_remove_dead_checkpoints`)."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        folder = os.open(name, flags, dir_fd=checkpoints)
    except OSError:  # a link, a file: not a checkpoint's
        return False
    try:
        if os.fstat(folder).st_uid != os.getuid():
            return False
        for entry in os.listdir(folder):
            named = _CHECKPOINT_WRITER.fullmatch(entry)
            if named is not None and owner_gone(named[1]):
                found = os.stat(entry, dir_fd=folder, follow_symlinks=False)
                return stat.S_ISREG(found.st_mode)
        return False
    except OSError:
        return False
    finally:
        os.close(folder)


def _new_file(folder: HeldFolder, prefix: str, suffix: str) -> tuple[int, str]:
    """A new file (0600) in the held `folder` named `prefix` + 8 random characters +
    `suffix`, as tempfile.mkstemp makes one in a folder named by path: (its descriptor, its
    name)."""
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    for _ in range(tempfile.TMP_MAX):
        name = prefix + "".join(secrets.choice(_NAME_CHARACTERS) for _ in range(8)) + suffix
        try:
            return os.open(name, flags, 0o600, dir_fd=folder.fd), name
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "No usable temporary file name found")


STOPS = (signal.SIGINT, *STOP_SIGNALS)  # SIGTERM, SIGHUP, SIGUSR1, … (`startup.STOP_SIGNALS`)


@contextmanager
def stops_deferred(signals: tuple[int, ...] | None = None) -> Iterator[None]:
    """Hold every stop (`signals`, else STOPS: Ctrl-C, SIGTERM, SIGHUP, …) until the block
    ends, then act on the first as the handler before would have (an ignored one stays
    ignored; a default one ends the process as it would have): two steps that must not be
    parted are not. Found by
    the forty-sixth round: a stop between a checkpoint's folder renamed into place and
    `latest` pointed at it left `step-5/` and no `latest`, and the resume was refused. Off the
    main thread (no handlers there) a no-op.

        with stops_deferred():
            os.replace(tmp, final); write_atomic(root / "latest", "step-5\n")
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[tuple[int, Any]] = []
    before = {signum: signal.getsignal(signum) for signum in signals or STOPS}
    for signum, previous in before.items():
        if previous != signal.SIG_IGN:
            signal.signal(signum, lambda signum, frame: caught.append((signum, frame)))
    try:
        yield
    finally:
        for signum, previous in before.items():
            signal.signal(signum, signal.SIG_DFL if previous is None else previous)
    if not caught:
        return
    signum, frame = caught[0]
    previous = before[signum]
    if callable(previous):
        previous(signum, frame)
    elif signum == signal.SIGINT:
        raise KeyboardInterrupt
    else:
        signal.raise_signal(signum)  # the default action: what the stop would have done


@contextmanager
def stops_raised() -> Iterator[None]:
    """Inside the block SIGTERM, SIGHUP and the other `STOP_SIGNALS` (SIGUSR1, …) raise
    Stopped as Ctrl-C raises KeyboardInterrupt, so the clean-up of a write (`except
    BaseException`) runs for every stop; once one has landed, later ones are ignored until
    the block ends, and do not cut that clean-up short. For a rank, where they otherwise kill
    at once (it may be blocked in a collective, where no handler runs): only around work that
    returns to Python often, rank 0 writing a checkpoint or the model. A handler installed
    before (the CLI's own) is called instead; an ignored signal stays ignored. Off the main
    thread a no-op.

        with stops_raised():
            try: torch.save(state, tmp / "model.pt") ...
            except BaseException: shutil.rmtree(tmp); raise
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = {signum: signal.getsignal(signum) for signum in STOPS}

    def stop(signum: int, frame: Any) -> None:
        previous = before[signum]
        try:
            # Raises, or holds the stop for later (the CLI's, in an import); one that ends the
            # process at once (a torchrun rank's SIGTERM) would cut the write's clean-up short.
            if callable(previous) and not getattr(previous, "at_once", False):
                previous(signum, frame)
                return
            raise KeyboardInterrupt if signum == signal.SIGINT else Stopped(signum)
        except BaseException:
            for other in STOPS:  # the first stop is the one acted on
                signal.signal(other, signal.SIG_IGN)
            raise

    for signum, previous in before.items():
        if previous != signal.SIG_IGN:
            signal.signal(signum, stop)
    try:
        yield
    finally:
        for signum, previous in before.items():
            # None: a handler not installed from Python; the default stands in for it.
            signal.signal(signum, signal.SIG_DFL if previous is None else previous)


def output_mode(path: str | Path, dir_fd: int | None = None) -> int:
    """The permission bits a file written at `path` (in the folder `dir_fd`, if given)
    should have: those of the file it replaces, else what `open` would give a new file (0666
    less the umask), not the 0600 of a temporary file renamed into place
    (`os.fchmod(fd, output_mode(path))`)."""
    try:
        return stat.S_IMODE(os.stat(path, dir_fd=dir_fd).st_mode)
    except OSError:
        return 0o666 & ~_umask()


def _umask() -> int:
    """This process's umask, read from /proc without changing it (os.umask sets it while it
    reads it, which another thread's file creation could see); os.umask where /proc has no
    such line."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def give_output_modes(directory: str | Path) -> None:
    """Every file directly in `directory` gets a new file's mode (`output_mode`): a library
    that writes through a temporary file (safetensors' save_file) leaves it 0600."""
    for entry in Path(directory).iterdir():
        if entry.is_file() and not entry.is_symlink():
            os.chmod(entry, 0o666 & ~_umask())


# Opening a file to write in place: never through a symbolic link (a link planted at a run's
# rank log made a resume append its output outside the run), never blocking on a FIFO (one
# there hung `run --resume` for the launcher's start-up wait of 24 h): the open fails at once
# on a FIFO without a reader (ENXIO), and an open one is refused by `fstat` below.
IN_PLACE = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def open_append(path: str | Path) -> int:
    """`path` opened to append to (created if missing), only as a regular file: without
    following a link or blocking (IN_PLACE), then blocking again for the writes. Returns the
    descriptor; OutputError naming `path` and what is there otherwise (`not_a_plain_file`).

        handle = os.fdopen(open_append(run_dir / "run.jsonl"), "a")
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | IN_PLACE
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as exc:
        why = not_a_plain_file(path) or f"cannot open it to write ({os_reason(exc)})"
        raise OutputError(f"{path}: {why}") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):  # a FIFO that had a reader, a device
        os.close(fd)
        raise OutputError(f"{path}: not a regular file ({entry_kind(info.st_mode)})")
    os.set_blocking(fd, True)
    return fd


def not_a_plain_file(path: str | Path) -> str | None:
    """What is wrong with `path` as a file a command writes in place or replaces, as the
    rest of a one-line message: None when it is absent or a regular file (never followed).

        not_a_plain_file("runs/a/logs/rank-1.log")   # "not a regular file (a FIFO)"
    """
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:  # a file on its way, a name too long
        return f"cannot be reached ({exc.strerror or exc})"
    if stat.S_ISLNK(info.st_mode):
        return LINKED
    if stat.S_ISDIR(info.st_mode):
        return "is a directory, not a file"
    if not stat.S_ISREG(info.st_mode):
        return f"not a regular file ({entry_kind(info.st_mode)})"
    return None


def not_a_plain_folder(path: str | Path) -> str | None:
    """`not_a_plain_file` for a folder a command writes into: None when `path` is absent or
    a directory; a link to one is refused (the writes would land where it points)."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"cannot be reached ({exc.strerror or exc})"
    if stat.S_ISLNK(info.st_mode):
        return "is a symbolic link, not a folder of its own"
    if not stat.S_ISDIR(info.st_mode):
        return f"not a folder ({entry_kind(info.st_mode)})"
    return None


def entry_kind(mode: int) -> str:
    """`entry_kind(os.lstat(p).st_mode)`: what a file system entry is, in words ("a FIFO")."""
    kinds = (
        (stat.S_ISREG, "a regular file"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    )
    return next((name for test, name in kinds if test(mode)), "not a file")


def not_a_new_directory(out: Path) -> str | None:
    """Why `out` cannot be a new directory to write (None when it is free or an empty
    folder), naming what it is: `export --out /dev/null` said "not an empty directory" of a
    device (twenty-second round).

        not_a_new_directory(Path("/dev/null"))   # "is a character device, not a directory"
        not_a_new_directory(Path("old"))         # "exists and is not an empty directory"

    A link to nothing is no place to write either: `export --out` said "write failed (Not a
    directory)" of one (twenty-sixth round), where `--plot` names it. Nor is a link to an
    empty folder: the new directory is renamed into place, and a rename cannot put a folder
    where a link is; it said the same after all the work (forty-second round).
    """
    try:
        mode = os.stat(out).st_mode  # through a link: a link to an empty folder is one
    except FileNotFoundError:
        return "is a symbolic link to nothing, not a directory" if out.is_symlink() else None
    except OSError as exc:
        return f"cannot be a directory ({exc.strerror})"
    if not stat.S_ISDIR(mode):
        return f"is {entry_kind(mode)}, not a directory"
    if any(out.iterdir()):
        return "exists and is not an empty directory"
    if out.is_symlink():
        return (
            "is a symbolic link to an empty directory, not a directory of its own: the new "
            "directory is renamed into place, and a rename cannot put a folder where a link is"
        )
    return None


class HeldFolder:
    """The folder an output is written into, held open (`held_folder`) from its check to
    the output's last rename. Found by the forty-third round: `export --out par/exp` checked
    that par/ lay in no run directory, then made its temporary folder and renamed it into
    place by path seconds later; par/ swapped meanwhile for a link to a run directory put the
    export inside that run (exit 0). Every step names its entries through the descriptor
    (`entry`, `fd` as dir_fd), so a folder on the path swapped meanwhile redirects nothing,
    and `confirm` refuses, before the rename, a path that no longer leads here.

        with held_folder(out.parent, lambda: check_outside_runs(out), out) as folder:
            os.mkdir(".tmp-x", dir_fd=folder.fd)
            library.save(folder.entry(".tmp-x"))    # a library that takes a path
            folder.confirm()
            os.replace(".tmp-x", out.name, src_dir_fd=folder.fd, dst_dir_fd=folder.fd)
    """

    def __init__(self, path: Path, fd: int, check: Callable[[], None] | None, out: Path):
        self.path, self.fd, self.check, self.out = path, fd, check, out

    def entry(self, name: str) -> Path:
        """`name` in the held folder as a path, for code that takes only one (transformers'
        save_pretrained): through the descriptor where the kernel names it (Linux's
        /proc/self/fd), else by the folder's path, whose swap `confirm` then catches."""
        through = Path(f"/proc/self/fd/{self.fd}")
        return through / name if through.is_dir() else self.path / name

    def confirm(self) -> None:
        """The output's check again (`check`), and the folder's path still leading to the
        held folder (links followed, as when it was opened); OutputError naming the output
        otherwise: called just before the last rename, it is what the command says of a
        folder swapped while it worked (the rename itself would land in the held one)."""
        if self.check is not None:
            self.check()
        try:
            there = os.stat(self.path)
        except OSError:
            there = None
        if there is None or (there.st_dev, there.st_ino) != identity(self.fd):
            raise OutputError(
                f"{self.out}: the folder {self.path} was moved or replaced while this command "
                "worked; nothing was written (write into a folder that stays where it is)"
            )


@contextmanager
def held_folder(
    folder: str | Path, check: Callable[[], None] | None = None, out: str | Path | None = None
) -> Iterator[HeldFolder]:
    """`folder` opened (links followed) for the block as a `HeldFolder`, once `check` (the
    output's own: `check_outside_runs`) passes of the path that led to it; `out` names the
    output in messages (the folder itself by default). OutputError naming what stands in the
    folder's place when it cannot be opened."""
    folder = Path(folder) if str(folder) else Path(".")
    out = Path(out) if out is not None else folder
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        if isinstance(exc, FileNotFoundError | NotADirectoryError):
            why = _no_folder(folder)  # what stands on its path, as other outputs say
        else:
            why = f"cannot open {folder} ({os_reason(exc)})"
        raise OutputError(f"{out}: {why}") from None
    try:
        held = HeldFolder(folder, fd, check, out)
        held.confirm()  # the check passes, of the folder now held
        yield held
    finally:
        os.close(fd)


# Locks held until this process exits (the kernel drops them when it dies, however it dies).
_HELD: dict[Path, object] = {}
# Each held directory by the name it was claimed by (links not followed): its resolved key in
# _HELD, and the identity of the entry at that name then (`_held`).
_HELD_AS: dict[Path, tuple[Path, tuple[int, int] | None]] = {}
# Each held directory's own open folder, locked as its `.lock` is (`_lock_folder`).
_FOLDER_HELD: dict[Path, int] = {}
# The thread each held directory was claimed in: the locks are the process's, so a call of the
# API in another thread (a notebook's second call while the first trains) took the claim for
# its own and trained the run twice at once, or read it mid-write (the fifty-eighth round).
_HELD_BY: dict[Path, int] = {}
_IN_ANOTHER_THREAD = "in use by another pipeplan call of this process (another thread)"


def _open_lock(lock: Path):
    """The lock file, opened without following a symbolic link (a dangling `.lock` link made a
    resume create the file it pointed to, outside the run) and without blocking on a FIFO;
    it must be a regular file."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(lock, flags, 0o644)
    except OSError as exc:
        if lock.is_symlink():
            raise OutputError(f"{lock}: is a symbolic link; a run's lock is a plain file") from None
        raise OutputError(f"{lock}: cannot open the run's lock ({exc.strerror})") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OutputError(f"{lock}: not a regular file; a run's lock is a plain file")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "a")


class DirectoryTaken(OutputError):
    """A directory another process holds (`claim_directory`), or a new run's folder that holds
    a run or files already: a run without --name takes the next free name instead."""


def claim_directory(directory: str | Path) -> Path:
    """Hold an exclusive lock on `directory` (its `.lock` file) for the life of this process
    (of an API call: `claims_released`), so two runs, or two resumes, can never share a run
    directory. OutputError if another
    process holds it. Claiming a directory this process already holds is a no-op (where the
    folder at its path is still the one it holds).

        run_dir = claim_directory(runs / name)   # then check it is empty, write run.json
    """
    directory = Path(directory)
    key = directory.resolve()
    if key in _HELD and _HELD_BY.get(key) != threading.get_ident():
        raise DirectoryTaken(f"{directory}: {_IN_ANOTHER_THREAD}")
    if key in _HELD:
        held = _held(directory)
        if held is not None and not held[1] and identity(directory / ".lock") == identity(held[0]):
            return directory
        # The folder this process claimed went (deleted, and another made at its path): an
        # API caller preparing at the same path again was told "moved or was deleted while
        # the run was prepared" of the new folder. Its old claim holds nothing; claim anew.
        release_directory(directory)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"{directory}: cannot create ({exc.strerror})") from None
    lock_made = not os.path.lexists(directory / ".lock")
    handle = _open_lock(directory / ".lock")
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        raise DirectoryTaken(f"{directory}: in use by another pipeplan process") from None
    try:
        folder = _lock_folder(directory, fcntl.LOCK_EX)
    except BlockingIOError:
        handle.close()
        if lock_made:  # the holder's was deleted: leave its folder as it was
            (directory / ".lock").unlink(missing_ok=True)
        raise DirectoryTaken(f"{directory}: in use by another pipeplan process") from None
    _HELD[key] = handle
    _HELD_BY[key] = threading.get_ident()
    _HELD_AS[Path(os.path.abspath(directory))] = (key, identity(directory))
    if folder is not None:
        _FOLDER_HELD[key] = folder
    _run_exports_removed(directory)  # a killed run's, however this command ends
    return directory


def _lock_folder(directory: Path, kind: int) -> int | None:
    """The folder itself locked (`kind`: fcntl.LOCK_EX or LOCK_SH, never waiting), besides its
    `.lock` file: a live run's `.lock` deleted (`rm runs/k/.lock`) let a second run or resume
    claim the folder with a new one, and a report read it mid-write (the thirty-third
    round); nothing inside the folder can take the folder's own lock away. The open folder,
    or None where its file system locks no folders (its `.lock` alone then).
    BlockingIOError if another process holds it."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(directory, flags)
    except OSError:
        return None
    try:
        fcntl.flock(fd, kind | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise
    except OSError:
        os.close(fd)
        return None
    return fd


@contextmanager
def folder_locked(directory: Path, what: str, wait_s: float | None = None) -> Iterator[None]:
    """Hold `directory` itself locked for the block (an exclusive flock on the open folder,
    links followed: no lock file is left in it), waiting up to `wait_s` (FOLDER_WAIT_S) for
    another process's block, then OutputError naming `what` it writes. Around a set written
    into the folder, from deciding which earlier files it replaces (`stale`) to the last
    rename (`write_files`), so two sets replace each other whole. Where the folder cannot be
    opened (the writes then say why) or its file system locks no folders, nothing is held.

        with folder_locked(Path("plots"), "its plots"):
            write_files(figures, stale_plots(Path("plots"), pattern, targets))

    Found by the sixty-first round: two `report --plot DIR` at once each listed the plots to
    remove before the other had written, and DIR ended with one's epochs.png beside the
    other's phase2 plot, a set neither wrote."""
    wait_s = FOLDER_WAIT_S if wait_s is None else wait_s
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            fd = None
            break
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            if time.monotonic() >= deadline:
                raise OutputError(
                    f"{directory}: another pipeplan process has been writing {what} there for "
                    f"{wait_s:g} s; run this command again once it has finished, or give "
                    "another folder"
                ) from None
            time.sleep(FOLDER_POLL_S)
            continue
        except OSError:  # a file system that locks no folders
            os.close(fd)
            fd = None
            break
        if _same_folder(fd, directory):
            break
        # The folder at the path went meanwhile (the holder's set failed and removed the
        # folder it had made) or was replaced: the one there now is held instead.
        os.close(fd)
    try:
        yield
    finally:
        if fd is not None:
            os.close(fd)


# Seconds a set's writer waits for another's into the same folder (`folder_locked`): a set
# of plots takes seconds to draw; and between two looks.
FOLDER_WAIT_S = 60.0
FOLDER_POLL_S = 0.05


def _same_folder(fd: int, directory: Path) -> bool:
    """Whether the open folder `fd` is the one at `directory` now (links followed)."""
    try:
        return os.path.samestat(os.fstat(fd), os.stat(directory))
    except OSError:
        return False


def _held(directory: Path) -> tuple[Any, bool] | None:
    """The lock this process holds on `directory` (`claim_directory`), found by the name it
    was claimed by or as it resolves, and whether the entry at that name is another now
    (a link, or another folder, put in its place). Keyed by the resolved path alone, a
    folder moved away and a link to it put at its name was still in place to the launcher,
    which then read and named the run through the link (the thirty-first round)."""
    named = _HELD_AS.get(Path(os.path.abspath(directory)))
    if named is not None and named[0] in _HELD:
        key, claimed = named
        return _HELD[key], identity(directory) != claimed
    try:
        handle = _HELD.get(directory.resolve())
    except (OSError, RuntimeError):  # a link loop (forty-ninth round): held by no one
        return None
    return None if handle is None else (handle, False)


@contextmanager
def claims_released() -> Iterator[None]:
    """The claims (`claim_directory`) this thread makes inside the block are given up as it
    ends: an API call's, as a command's go when its process ends. Kept for the process's
    life, another thread's call was refused the run long after the first call had returned.

        with claims_released():
            train(run_dir)
    """
    me = threading.get_ident()
    before = {key for key, thread in _HELD_BY.items() if thread == me}
    try:
        yield
    finally:
        for key in [k for k, thread in _HELD_BY.items() if thread == me and k not in before]:
            release_directory(key)


def held_directories() -> set[Path]:
    """The directories this process holds (`claim_directory`), resolved: `run_dir.resolve()
    in held_directories()`."""
    return set(_HELD)


def moved_away(directory: str | Path) -> bool:
    """Whether the directory this process claimed (`claim_directory`) or trains (`trains`) is
    no longer at `directory`: moved or deleted while its run trained, so that its files are
    not there to read, and whatever a write there made would be a new folder, not the run (the
    lock file there, if any, is not the one this process holds; the folder there is not the
    one the rank started in). A directory this process neither holds nor trains: whether none
    is there. One stat (a rank asks at every step).

        moved_away(run_dir)   # True once runs/k was renamed while its ranks trained
    """
    directory = Path(directory)
    trained = _trained_identity(directory)
    if trained is not False:
        there = identity(directory)
        if there is None or there != trained:
            return True
        lock = _TRAINED_LOCK.get(trained)
        return lock is not None and identity(directory / ".lock") != lock
    held = _held(directory)
    if held is None:
        return not directory.is_dir()
    handle, replaced = held
    return replaced or identity(directory / ".lock") != identity(handle)


def identity(entry: str | Path | int | Any) -> tuple[int, int] | None:
    """(st_dev, st_ino) of a path (never through a link), a file descriptor or an open file;
    None where nothing is there (a descriptor closed)."""
    try:
        if isinstance(entry, str | Path):
            info = os.stat(entry, follow_symlinks=False)
        elif isinstance(entry, int):
            info = os.fstat(entry)
        else:
            info = os.fstat(entry.fileno())
    except OSError:
        return None
    return info.st_dev, info.st_ino


def where_now(directory: str | Path) -> Path | None:
    """Where the directory this process claimed (`claim_directory`) is now, after it moved
    away from `directory` (`moved_away`): the kernel names the lock file this process holds
    open wherever it went (Linux: /proc/self/fd), and the name is believed only once the lock
    file there is the held one; a rank (`trains`) names the folder it holds open. None where
    the directory was deleted, is neither held nor trained, or the kernel does not say: its
    run cannot be read or resumed from a path we know.

        where_now(run_dir)   # Path("/home/u/runs/k2") once runs/k was renamed to runs/k2
    """
    held = _held(Path(directory))
    if held is None:
        return _where_trained_now(directory)
    handle = held[0]
    try:
        lock = Path(os.readlink(f"/proc/self/fd/{handle.fileno()}"))
    except OSError:
        return None
    # A deleted file is named "PATH (deleted)": no lock file by that name is the held one.
    if lock.name != ".lock" or identity(lock) != identity(handle):
        return None
    return lock.parent


def where_now_as_named(directory: Path) -> Path | None:
    """`where_now`, named as the user named `directory`: from the working folder where they
    gave a relative path, so a line reads "runs/k moved to runs/k2", not "/home/u/runs/k2".

        where_now_as_named(Path("runs/k"))   # Path("runs/k2")
    """
    now = where_now(directory)
    if now is not None and not directory.is_absolute():
        with suppress(ValueError):
            now = now.relative_to(Path.cwd())
    return now


def _where_trained_now(directory: str | Path) -> Path | None:
    """`where_now` for a rank (`trains`), which holds no lock: the kernel names the folder
    the rank holds open, believed once the folder there is the one the rank started in. A
    torchrun rank's line said only "moved or was deleted … NEWPATH" (the thirtieth round)."""
    trained = _trained_identity(directory)
    fd = _TRAINED_FD.get(Path(os.path.abspath(directory)))
    if not trained or fd is None:
        return None
    try:
        now = Path(os.readlink(f"/proc/self/fd/{fd}"))
    except OSError:
        return None
    return now if identity(now) == trained else None


def release_directory(directory: str | Path) -> None:
    """Give up this process's claim on `directory` (`claim_directory`): for a run whose
    preparation failed, so that the folder can go and be claimed again.

        release_directory(runs / name)
    """
    named = _HELD_AS.pop(Path(os.path.abspath(directory)), None)
    key = named[0] if named is not None else Path(directory).resolve()
    for name in [name for name, (held, _) in _HELD_AS.items() if held == key]:
        del _HELD_AS[name]  # the claim by another name, which would name a claim gone
    handle = _HELD.pop(key, None)
    _HELD_BY.pop(key, None)
    if handle is not None:
        handle.close()
    folder = _FOLDER_HELD.pop(key, None)
    if folder is not None:
        os.close(folder)


# Run directories whose training this process takes part in (a rank): its launcher holds
# their lock, and the rank reads them as it writes them (the summary, online recalibration).
# Each with the folder's identity as the rank started (`moved_away`; None: none was there).
_TRAINED: dict[Path, tuple[int, int] | None] = {}
# The folder each holds open, by the path the rank names it (`_where_trained_now`).
_TRAINED_FD: dict[Path, int] = {}
# The lock file of each folder a rank trains, as it started (None: none there): a folder
# emptied under the run (`rm -rf`, which the run's next checkpoint kept from removing the
# folder itself) is the same folder without it (forty-seventh round: it trained to the end).
_TRAINED_LOCK: dict[tuple[int, int] | None, tuple[int, int] | None] = {}


def trains(directory: str | Path) -> None:
    """`trains(run_dir)`: this process is a rank of the run training `run_dir`; its own reads
    of it need no lock (`reading_run`), and `moved_away(run_dir)` tells whether the folder at
    that path is still the one there now."""
    found = identity(directory)
    _TRAINED[Path(os.path.abspath(directory))] = found
    _TRAINED[Path(directory).resolve()] = found
    _TRAINED_LOCK[found] = identity(Path(directory) / ".lock")
    with suppress(OSError):  # held open to say where it went (`where_now`)
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        with suppress(OSError, TypeError):  # one folder open for each name
            os.close(_TRAINED_FD.get(Path(os.path.abspath(directory))))  # type: ignore[arg-type]
        _TRAINED_FD[Path(os.path.abspath(directory))] = fd


def _trained_identity(directory: str | Path) -> tuple[int, int] | Literal[False] | None:
    """The identity `trains` took of a rank's run directory, or False if it trains none by
    that name: found as the rank names it (links not followed) or as it resolved then. Keyed
    by the resolved path alone, a folder moved away and a link to it put in its place was
    another path, not the rank's: the rank trained on, then took its own lock for another
    process's (thirtieth round)."""
    try:
        resolved = Path(directory).resolve()
    except (OSError, RuntimeError):  # a link loop (forty-ninth round): no rank's folder
        return False
    for key in (Path(os.path.abspath(directory)), resolved):
        if key in _TRAINED:
            return _TRAINED[key]
    return False


@contextmanager
def reading_run(directory: str | Path) -> Iterator[None]:
    """Hold a shared lock on a run directory while a reader (report, calibrate, export) reads
    it: a run or resume training it holds the exclusive one (`claim_directory`), and its files
    change under the reader (a report then called run.json edited, or the history lost).
    OutputError if it is in use. A run this process holds itself (a run, then its report, in
    one notebook) or trains as a rank (`trains`) is read as it is; a folder without a plain
    `.lock` file has no writer to wait for.

        with reading_run("runs/exp1"):
            records = read_records(Path("runs/exp1") / "run.jsonl")
    """
    directory = Path(directory)
    if (held := _held(directory)) is not None:
        key = next((k for k, h in _HELD.items() if h is held[0]), None)
        if _HELD_BY.get(key) != threading.get_ident():
            raise OutputError(f"{directory}: {_IN_ANOTHER_THREAD}; read it once that ends")
    if held is not None or _trained_identity(directory) is not False:
        yield
        return
    in_use = OutputError(
        f"{directory}: in use by a pipeplan process training it (a run or a resume); read it "
        "once that ends"
    )
    try:
        folder = _lock_folder(directory, fcntl.LOCK_SH)
    except BlockingIOError:
        raise in_use from None
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(directory / ".lock", flags)
    except OSError:  # none, a link, unreadable: the checks that follow name what is wrong
        fd = None
    try:
        if fd is not None and stat.S_ISREG(os.fstat(fd).st_mode):
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                raise in_use from None
        _run_exports_removed(directory)  # a killed run's (a finished run has no resume)
        yield
    finally:
        for held in (fd, folder):  # drops the shared locks
            if held is not None:
                os.close(held)


# What a finished run's readers (report, calibrate) need; resume and export read run.json first.
RUN_FILES = ("run.json", "run.jsonl")


def check_run_directory(run_dir: str | Path, needs: Iterable[str] = RUN_FILES) -> Path:
    """`run_dir` is a run directory holding the regular files `needs`, checked the same way
    for every command given one (report, calibrate, export, run --resume, torchrun's entry),
    so that each says the same true cause: "no such run directory", "is a file, not a run
    directory", "not a run directory (no run.jsonl)", "RUN/run.jsonl: not a regular file (a
    FIFO)". The folder may be reached through a link; the files the run writes in it may not
    be links (`check_own_files`). InputFileError.

        run_dir = check_run_directory("runs/exp1")
        check_run_directory("runs/exp1", needs=("run.json",))   # export: no records read
    """
    run_dir = Path(run_dir)
    what = _entry(run_dir)
    if what is None:
        # A bare name, as `pipeplan run --name NAME` takes it: the run is runs/NAME (the
        # fifty-fifth round: `--resume NAME` said only "no such run directory").
        under = Path("runs") / run_dir
        there = not run_dir.is_absolute() and _entry(under) == "a directory"
        raise InputFileError(
            f"{run_dir}: no such run directory" + (f"; did you mean {under}?" if there else "")
        )
    if what != "a directory":
        # A run directory is the folder `pipeplan run` wrote, not one of its files.
        what = "a file" if what == "a regular file" else what
        raise InputFileError(
            f"{run_dir}: is {what}, not a run directory (give the folder `pipeplan run` wrote)"
        )
    check_own_files(run_dir)  # a link is refused before anything is read through it
    for name in needs:
        what = _entry(run_dir / name)
        if what is None:
            raise InputFileError(f"{run_dir}: {_missing(run_dir, name)}")
        if what != "a regular file":  # a FIFO would block its reader, a folder is no record
            raise InputFileError(f"{run_dir / name}: not a regular file ({what})")
    return run_dir


def _missing(run_dir: Path, name: str) -> str:
    """Why `run_dir` lacks `name`, as far as its files tell. Beside its run.json, a missing
    run.jsonl is a run that recorded no step: prepared and never started, or stopped (its
    ranks failed) before its first step; "not a run directory" was not true of it (the
    twenty-seventh round)."""
    if name != "run.jsonl" or _entry(run_dir / "run.json") != "a regular file":
        return f"not a run directory (no {name})"
    try:  # its ranks starting, before their first record (fiftieth round: "not started")
        held = None if _held(run_dir) is not None else _lock_folder(run_dir, fcntl.LOCK_SH)
    except BlockingIOError:
        return (
            "in use by a pipeplan process training it (a run or a resume), which has recorded "
            "no step yet; read it once that ends"
        )
    if held is not None:
        os.close(held)
    logs = run_dir / "logs"
    said = f"; its rank logs are in {logs}" if _entry(logs) == "a directory" else ""
    return (
        "has recorded no step (no run.jsonl: prepared and not started, or stopped before its "
        f"first step){said}"
    )


# Every file a run writes at the top of its directory (RUN_ENTRIES' files; the lock has its
# own check), which the commands given it also read: a link there is refused before it is
# read (`check_own_files`). The copies `prepare` writes once (profile.json, run.plan.json,
# data.json) are the run's own as much as its records: linked, a resume and torchrun's entry
# trained, and report and export read, through the link (twenty-sixth round).
RUN_OWN_FILES = ("run.json", "run.jsonl", "run.resume.json", "summary.json", "metrics.csv")
RUN_OWN_FILES += ("profile.json", "run.plan.json", "data.json")


def check_own_files(run_dir: Path) -> None:
    """Every file the run writes at the top of `run_dir` (RUN_OWN_FILES, calibration-N.json)
    is absent or a regular file, told from its entry alone (never opened: a FIFO would block
    its reader). A symbolic link is refused whatever it points at: a run.jsonl linked to a
    file of text was read first and called "not valid JSON", and only a link to a valid copy
    was refused as a link (twenty-fourth round); profile.json and run.plan.json, linked, were
    read and trained by (twenty-sixth). Found by the thirty-sixth round: a summary.json or
    run.plan.json that was a directory or a FIFO was taken by report and export as none
    (`runfiles.check_summary` skips a summary that is not a file), though a resume refused
    it. InputFileError naming the first one, in resume's words.

        check_own_files(Path("runs/exp1"))   # runs/exp1/run.jsonl: is a symbolic link, …
    """
    try:
        names = [n for n in os.listdir(run_dir) if CALIBRATION_FILE.fullmatch(n)]
    except OSError:
        names = []  # the folder's own checks say why it cannot be read
    for name in (*RUN_OWN_FILES, *sorted(names)):
        path = run_dir / name
        try:
            mode = os.lstat(path).st_mode
        except (FileNotFoundError, NotADirectoryError):
            continue  # absent: whoever needs it says so
        except OSError as exc:  # a name too long, a folder it may not read
            raise InputFileError(f"{path}: cannot be reached ({exc.strerror or exc})") from None
        if stat.S_ISLNK(mode):
            why = "is a symbolic link, not a file of its own"
        elif not stat.S_ISREG(mode):  # as `check_run_directory` says of the files it needs
            why = f"not a regular file ({entry_kind(mode)})"
        else:
            continue
        raise InputFileError(f"{path}: {why}; the run writes this file")


def _entry(path: Path) -> str | None:
    """What `path` is, links followed, in words ("a directory", "a FIFO"); None when there is
    nothing there (a dangling link, or a file where a folder on its path belongs)."""
    try:
        return entry_kind(os.stat(path).st_mode)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:  # a loop of links, a name too long, a folder it may not read
        raise InputFileError(f"{path}: cannot be reached ({exc.strerror or exc})") from None
