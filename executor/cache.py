"""AutoCache: per-sample outputs of the frozen prefix, in files one node's ranks share.

Once the first k layers of the model are frozen (k is the *freeze point*; it only grows), their
output for a given training sample no longer changes. Stage 0 of a replica can then store that
output per sample index the first time it computes it (during the first epoch of a cached
phase, from the forward pass training runs anyway) and read it back in later epochs instead of
recomputing the prefix.

The stored values form one *version*, named by the freeze point they belong to
(`ActivationCache.frozen_layers`; 0 means nothing is frozen and nothing is stored). A version
is three files, so several processes of one node can map them at once:

    {memory_dir}/{name}-v{k}.rows    rows 0 .. memory_rows-1   (host memory: /dev/shm is tmpfs)
    {spill_dir}/{name}-v{k}.spill    rows memory_rows .. n-1   (local disk)
    {memory_dir}/{name}-v{k}.map     one byte per sample: 1 once its row is written

`memory_rows = budget_bytes // row_bytes`: the budget is for the whole cache, so when one cache
serves a node it is a per-node budget. Files are created sparse (truncated to size, nothing
written), so a partly filled cache only holds the pages it touched. Rows are raw bytes, which is
how dtypes numpy lacks (bfloat16) are stored bit-exactly.

One process creates a version (`create`), the others `attach` to it after a barrier. When the
freeze point grows from k to k', the creator makes version k' while k stays open (`previous`);
`advance_rows(compute, part, parts)` runs only the newly frozen layers k..k'-1 on the cached
rows, each process its share of them, and `drop_previous` closes (and, for the creator,
deletes) version k. The node then briefly holds both versions.

Writers never share a row: see `store` for why no lock is needed when several processes fill
one cache. Caching is only sound when a sample's input is the same every epoch: with random
data augmentation it is not, and `cache_allowed` says so.

Every directory of a cache is private (`private_directory`: made 0700 by this user, never a
link), and every file in it is opened without following links: /dev/shm is writable by every
user of the host, and a link planted where a cache file goes would have a run overwrite the
file it points to. The node's directory in /dev/shm gets a fresh, unpredictable name
(`memory_dir_for`), which also records the process that made it, so that the cache of a run
killed outright (SIGKILL, the OOM killer) is removed by the next run that starts
(`remove_stale_caches`). Every other end removes it at once: the worker's at a normal end, a
failing rank's own (`remove_own_caches`), and `pipeplan run`'s launcher's once every rank has
ended, whatever ended them (`remove_run_caches`).

    cache = ActivationCache(60000, budget_bytes=1 << 30, spill_dir=run_dir / "cache",
                            memory_dir=memory_dir_for(run_dir / "cache", 1 << 30), name="node0")
    cache.create(3, sample_shape=(197, 192), dtype=torch.float32)   # one rank; others attach
    values, hit = cache.lookup(indices)
    cache.store(indices[~hit], computed, frozen_layers=3)
"""

from __future__ import annotations

import contextlib
import errno
import logging
import math
import os
import re
import secrets
import shutil
import stat
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from pipeplan.cluster import size_text
from pipeplan.errors import OutputError
from pipeplan.fileio import write_failure
from pipeplan.formats.checkpoint import CACHE_MANIFEST_FORMAT
from pipeplan.spawn import pid_namespace, process_start

logger = logging.getLogger("pipeplan.cache")


AUGMENTATION_REASON = (
    "random augmentation changes a sample every epoch, so its frozen activations cannot be "
    "reused; caching disabled"
)


def cache_allowed(augmented: bool) -> tuple[bool, str]:
    """Whether activations of a dataset may be cached, and why (the caller logs the reason)."""
    if augmented:
        return False, AUGMENTATION_REASON
    return True, "samples are deterministic, so frozen activations can be reused"


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


# Where a node's rows go when /dev/shm has room, and the names pipeplan gives its directories
# there: `pipeplan-NS-PID-START-TOKEN`, made by process PID of the pid namespace NS (containers
# that share /dev/shm may not see each other's processes), started START clock ticks after
# boot; TOKEN random so that no one can know the name before it exists.
SHM = Path("/dev/shm")
_NODE_DIR = re.compile(r"pipeplan-(\d+)-(\d+)-(\d+)-[0-9a-f]{16}")


def memory_dir_for(fallback: Path, need_bytes: int, root: Path = SHM) -> Path:
    """`memory_dir_for(run_dir / "cache", 1 << 30)` → where a node's in-memory rows live, made
    now by the node's lowest rank (its peers are told the path): a new private directory
    `/dev/shm/pipeplan-NS-PID-START-TOKEN` when /dev/shm exists and has `need_bytes` free (tmpfs:
    host memory that several processes can map), else `fallback` (a file on the run directory's
    disk, kept in memory by the page cache as far as the host allows). The name is this
    process's (`remove_stale_caches` removes it once the process is gone) and random: nothing
    can be planted in the directory before it exists, and as it is 0700 nothing after."""
    try:
        free = os.statvfs(root)
    except OSError:
        return fallback
    if free.f_bavail * free.f_frsize < need_bytes:
        logger.info(
            "%s has less than %s free: cache rows under %s", root, size_text(need_bytes), fallback
        )
        return fallback
    pid = os.getpid()
    maker = f"{pid_namespace() or 0}-{pid}-{process_start(pid) or 0}"
    path = root / f"pipeplan-{maker}-{secrets.token_hex(8)}"
    try:
        os.mkdir(path, 0o700)  # fails if the name exists: then it is not ours
    except OSError as exc:
        logger.info("cannot make %s (%s): cache rows under %s", path, exc.strerror, fallback)
        return fallback
    _MADE.append(path)
    return path


# The node directories this process made (`memory_dir_for`), and the caches it has open
# (`ActivationCache`, until closed), for a failing rank to remove (`remove_own_caches`): it
# exits at once afterwards, without the worker's clean-up.
_MADE: list[Path] = []
_OPENED: weakref.WeakSet[ActivationCache] = weakref.WeakSet()


def remove_own_caches() -> list[Path]:
    """`remove_own_caches()` → the node directories this process made in /dev/shm, removed
    now with what they hold, and the files of the caches it has open (the spill file under
    the run directory: `cache/node0/node0-v2.spill`), with their folders once empty. For a
    rank that is failing (an exception, Ctrl-C), after its report: it ends without closing
    its cache, and under torchrun no launcher of pipeplan's cleans up after it (a spill file
    of GBs stayed in the run directory). Any rank of the node removes the node's files: the
    one that made them may be stopped by the agent before it can. A peer still mapping a file
    keeps its pages (POSIX), and it is stopped anyway."""
    removed = []
    while _MADE:
        path = _MADE.pop()
        if os.path.lexists(path):
            shutil.rmtree(path, ignore_errors=True)  # never follows a link inside
            removed.append(path)
    for cache in list(_OPENED):
        _OPENED.discard(cache)
        removed += cache.remove_files()
    return removed


def remove_run_caches(run_dir: Path, root: Path = SHM) -> list[Path]:
    """`remove_run_caches(Path("runs/k"))` → what the caches of a run whose ranks have all
    ended left, removed now, as the run's normal end removes it: the ranks' directories in
    /dev/shm (the makers are gone, so `remove_stale_caches` takes them, with any other run's
    that is gone too, as a run's start does) and the cache files under the run directory
    (`cache/nodeN/nodeN-vK.spill`; `cache/nodeN-vK.rows` and `.map` when /dev/shm lacked
    room), with those folders once empty: the user's own files there stay. For `pipeplan
    run`'s launcher, whatever ended the ranks: SIGTERM kills a rank at once and SIGKILL
    outright, so a rank cannot always clean up. Never raises: how the run ended is said."""
    removed = remove_stale_caches(root)
    folder = Path(run_dir) / "cache"
    nodes = [Path(e.path) for e in _private_entries(folder) if _NODE_NAME.fullmatch(e.name)]
    for directory in [*nodes, folder]:
        removed += _remove_matching(directory, _CACHE_FILE)
        with contextlib.suppress(OSError):  # removes only an empty directory, never a link
            directory.rmdir()
    return removed


# The files a node's cache makes (`_Version`) and its folder under the run directory (worker).
_CACHE_FILE = re.compile(r"node\d+-v\d+\.(rows|map|spill)")
_MEMORY_FILE = re.compile(r"node\d+-v\d+\.(rows|map)")  # in a node's folder in /dev/shm
_NODE_NAME = re.compile(r"node\d+")


def _private_entries(directory: Path) -> list[os.DirEntry[str]]:
    """The entries of `directory` when it is private (`_not_private`), else none: a folder
    that is missing, a link or another user's is not the cache's to clean."""
    if _not_private(directory) is not None:
        return []
    try:
        return list(os.scandir(directory))
    except OSError:
        return []


def _remove_matching(directory: Path, pattern: re.Pattern[str]) -> list[Path]:
    """The entries of private `directory` named by `pattern`, unlinked now (a link among them
    is unlinked, its target untouched; a directory is left alone)."""
    removed = []
    for entry in _private_entries(directory):
        if pattern.fullmatch(entry.name) and not entry.is_dir(follow_symlinks=False):
            with contextlib.suppress(OSError):
                os.unlink(entry.path)
                removed.append(Path(entry.path))
    return removed


def remove_stale_caches(root: Path = SHM) -> list[Path]:
    """`remove_stale_caches()` → the node caches that runs of this user left in /dev/shm when
    they were killed outright (SIGKILL, the OOM killer: nothing of theirs could clean up),
    removed now: directories named by `memory_dir_for` whose maker, the process of that pid
    started at that time, no longer exists, and which hold nothing but what a cache writes
    there (`_only_cache_files`). A live run's cache is never touched (its maker exists, if
    only stopped), nor one made in another pid namespace (another container: its processes
    are not seen from here), another user's, a link, or another name (an older pipeplan's
    `pipeplan-<12 hex digits>`). Without /proc nothing is provably gone: none.

    A name proves nothing: a run folder (`--runs-dir /dev/shm --name pipeplan-…`) named as
    a cache is was deleted, checkpoints and all, by the next run's start (the thirty-third
    round). Only the cache's own files are unlinked, then the folder if that empties it: a
    folder holding anything else (run.json, a checkpoint, a subfolder, a file that appears
    meanwhile) keeps everything."""
    namespace = pid_namespace()
    if namespace is None or process_start(os.getpid()) is None:
        return []
    try:
        entries = list(os.scandir(root))
    except OSError:
        return []
    removed = []
    for entry in entries:
        named = _NODE_DIR.fullmatch(entry.name)
        try:
            info = os.lstat(entry.path)
        except OSError:
            continue
        if named is None or not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
            continue
        if int(named[1]) != namespace or process_start(int(named[2])) == int(named[3]):
            continue  # another namespace's, whose processes this one cannot see; or alive
        files = _only_cache_files(Path(entry.path))
        if files is None:
            continue  # not (only) a cache: someone's folder that has a cache's name
        for path in files:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()  # a link among them is unlinked, its target untouched
        try:
            os.rmdir(entry.path)  # only if empty: nothing that appeared meanwhile is lost
        except OSError:
            continue
        # DEBUG: a run's console holds pipeplan's own lines (a failure: exactly one)
        logger.debug("removed %s, the cache of a run that is gone (pid %s)", entry.path, named[2])
        removed.append(Path(entry.path))
    return removed


def _only_cache_files(directory: Path) -> list[Path] | None:
    """The entries of `directory`, a node's folder in /dev/shm, when each is a file a cache
    writes there (`node0-v3.rows`, `.map`: `_MEMORY_FILE`) and not a folder; None when
    anything else is there, or it cannot be read."""
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return None
    if any(not _MEMORY_FILE.fullmatch(e.name) or e.is_dir(follow_symlinks=False) for e in entries):
        return None
    return [Path(e.path) for e in entries]


def private_directory(path: Path, parents: int = 1) -> Path:
    """`private_directory(run_dir / "cache" / "node0")` → `path`, a directory only this user
    can write: made 0700 if it is missing (with up to `parents` missing folders above it, the
    same), else checked. OutputError naming it when it is a link, not a directory, another
    user's, or writable by others: a cache file made there could be a link someone else put
    in its place. The folder above those (the run directory) is never made: one moved away
    mid-run was made again at its old path (the twenty-eighth round)."""
    if not os.path.lexists(path):
        if parents > 0 and not os.path.lexists(path.parent):
            private_directory(path.parent, parents - 1)
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass  # made meanwhile (another rank, or a link planted): checked below
        except OSError as exc:
            raise OutputError(f"{path}: cannot make the cache's folder ({exc.strerror})") from None
    why = _not_private(path)
    if why is not None:
        raise OutputError(
            f"{path}: refused as the activation cache's folder: {why}; remove it (a run makes "
            "it anew, mode 0700)"
        )
    return path


def _not_private(path: Path) -> str | None:
    """Why `path` is not a private directory (see `private_directory`), or None if it is."""
    try:
        info = os.lstat(path)
    except OSError as exc:
        return f"cannot read it ({exc.strerror})"
    if stat.S_ISLNK(info.st_mode):
        return "it is a symbolic link"
    if not stat.S_ISDIR(info.st_mode):
        return "it is not a directory"
    if info.st_uid != os.getuid():
        return f"it belongs to another user (uid {info.st_uid})"
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"others may write in it (mode {stat.S_IMODE(info.st_mode):04o})"
    return None


# Cache files are opened by name only in a private directory, and even there never through a
# link (O_NOFOLLOW): a link is refused, not followed.
_OPEN = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC


def _create_file(path: Path, size: int) -> None:
    """A new sparse file of `size` bytes, mode 0600, in a private directory. A leftover of a
    run that ended without removing it (killed) is unlinked first: a file, or a link, whose
    target is untouched."""
    private_directory(path.parent)
    try:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        fd = os.open(path, _OPEN | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.ftruncate(fd, size)
        finally:
            os.close(fd)
    except OSError as exc:
        # `write_failure`: past `ulimit -f` the limit is named, as every other write names it
        # (the sixtieth round: "cannot create a cache file (File too large)" alone).
        why = write_failure(exc, path)
        raise OutputError(f"{path}: cannot create a cache file ({why})") from None


def _map(path: Path, rows: int, row_bytes: int) -> np.memmap | None:
    if rows == 0 or row_bytes == 0:
        return None  # numpy cannot map an empty file; nothing to store anyway
    try:
        fd = os.open(path, _OPEN)
    except OSError as exc:
        why = "it is a symbolic link" if exc.errno == errno.ELOOP else exc.strerror or exc
        raise OutputError(f"{path}: refused as a cache file ({why})") from None
    with os.fdopen(fd, "r+b") as file:  # the mapping keeps a descriptor of its own
        return np.memmap(file, dtype=np.uint8, mode="r+", shape=(rows, row_bytes))


def _allocated(path: Path) -> int:
    """Bytes a (sparse) file really holds: the pages written so far."""
    try:
        return os.stat(path).st_blocks * 512
    except FileNotFoundError:
        return 0


class _Version:
    """The three files of one version, mapped. `create` makes them; else they must exist."""

    def __init__(
        self,
        version: int,
        num_samples: int,
        sample_shape: tuple[int, ...],
        dtype: torch.dtype,
        budget_bytes: int,
        memory_dir: Path,
        spill_dir: Path,
        name: str,
        *,
        create: bool,
    ) -> None:
        self.version = version
        self.num_samples = num_samples
        self.sample_shape = tuple(int(d) for d in sample_shape)
        self.dtype = dtype
        self.row_bytes = math.prod(self.sample_shape) * dtype.itemsize
        if self.row_bytes == 0:
            self.memory_rows = num_samples
        else:
            self.memory_rows = min(num_samples, budget_bytes // self.row_bytes)
        self.spill_rows = num_samples - self.memory_rows
        self.rows_path = memory_dir / f"{name}-v{version}.rows"
        self.map_path = memory_dir / f"{name}-v{version}.map"
        self.spill_path = spill_dir / f"{name}-v{version}.spill"
        self.created = create
        if create:
            _create_file(self.rows_path, self.memory_rows * self.row_bytes)
            _create_file(self.spill_path, self.spill_rows * self.row_bytes)
            _create_file(self.map_path, num_samples)
        self._rows = _map(self.rows_path, self.memory_rows, self.row_bytes)
        self._spill = _map(self.spill_path, self.spill_rows, self.row_bytes)
        self._map = _map(self.map_path, num_samples, 1)

    def filled_mask(self, idx: torch.Tensor) -> torch.Tensor:
        if self._map is None:
            return torch.zeros(len(idx), dtype=torch.bool)
        return torch.from_numpy(np.asarray(self._map[idx.numpy(), 0]) != 0)

    def filled_rows(self) -> torch.Tensor:
        if self._map is None:
            return torch.zeros(0, dtype=torch.long)
        return torch.from_numpy(np.flatnonzero(np.asarray(self._map[:, 0]))).long()

    def write(self, idx: torch.Tensor, values: torch.Tensor) -> None:
        """Rows first, then their map bytes: a reader that sees the byte finds the row."""
        raw = values.reshape(len(idx), -1).view(torch.uint8).numpy()
        in_memory = (idx < self.memory_rows).numpy()
        rows = idx.numpy()
        if self._rows is not None and in_memory.any():
            self._rows[rows[in_memory]] = raw[in_memory]
        if self._spill is not None and (~in_memory).any():
            self._spill[rows[~in_memory] - self.memory_rows] = raw[~in_memory]
        if self._map is not None:
            self._map[rows, 0] = 1

    def read_into(self, out: torch.Tensor, positions: torch.Tensor, idx: torch.Tensor) -> None:
        """`out[positions[j]] = row idx[j]`."""
        if self.row_bytes == 0:
            return
        rows = idx.numpy()
        in_memory = (idx < self.memory_rows).numpy()
        flat = out.view(len(out), -1).view(torch.uint8)
        if in_memory.any():
            raw = np.asarray(self._rows[rows[in_memory]])  # fancy indexing copies
            flat[positions[torch.from_numpy(in_memory)]] = torch.from_numpy(raw)
        if (~in_memory).any():
            raw = np.asarray(self._spill[rows[~in_memory] - self.memory_rows])
            flat[positions[torch.from_numpy(~in_memory)]] = torch.from_numpy(raw)

    def read(self, idx: torch.Tensor) -> torch.Tensor:
        out = torch.empty((len(idx), *self.sample_shape), dtype=self.dtype)
        self.read_into(out, torch.arange(len(idx)), idx)
        return out

    def paths(self) -> tuple[Path, ...]:
        return (self.rows_path, self.spill_path, self.map_path)

    def close(self, unlink: bool) -> None:
        """Unmap; with `unlink`, delete the files (processes that still map them keep their
        pages until they unmap: POSIX semantics)."""
        self._rows = self._spill = self._map = None
        if unlink:
            for path in self.paths():
                path.unlink(missing_ok=True)
            logger.debug("deleted cache version %d files %s", self.version, self.rows_path)

    def describe(self) -> dict[str, Any]:
        return {
            "sample_shape": list(self.sample_shape),
            "dtype": _dtype_name(self.dtype),
            "row_bytes": self.row_bytes,
            "memory": {
                "file": str(self.rows_path),
                "rows": [0, self.memory_rows],
                "resident_bytes": _allocated(self.rows_path),
            },
            "spill": {
                "file": str(self.spill_path),
                "rows": [self.memory_rows, self.num_samples],
                "bytes": _allocated(self.spill_path),
            },
        }


class ActivationCache:
    """One process's handle on a cache of `num_samples` rows (sample indices 0 .. n-1).

    `budget_bytes` bounds the rows kept in `memory_dir` (default: `spill_dir`); the rest go to
    `spill_dir`. Processes sharing a cache pass the same directories and `name`.
    """

    def __init__(
        self,
        num_samples: int,
        budget_bytes: int,
        spill_dir: str | Path,
        *,
        memory_dir: str | Path | None = None,
        name: str = "cache",
    ) -> None:
        if num_samples < 0:
            raise ValueError(f"num_samples must be >= 0, got {num_samples}")
        if budget_bytes < 0:
            raise ValueError(f"budget_bytes must be >= 0, got {budget_bytes}")
        self.num_samples = num_samples
        self.budget_bytes = budget_bytes
        self.name = name
        self.spill_dir = Path(spill_dir)
        self.memory_dir = Path(memory_dir) if memory_dir is not None else self.spill_dir
        self._current: _Version | None = None
        self.previous: _Version | None = None  # the version `advance_rows` reads from
        _OPENED.add(self)  # until closed: a failing rank removes its files (`remove_own_caches`)

    # --- state -----------------------------------------------------------------------------

    @property
    def frozen_layers(self) -> int:
        """The version: the freeze point the stored values belong to (0 = nothing frozen)."""
        return self._current.version if self._current is not None else 0

    @property
    def sample_shape(self) -> tuple[int, ...]:
        return self._need().sample_shape

    @property
    def dtype(self) -> torch.dtype:
        return self._need().dtype

    @property
    def memory_rows(self) -> int:
        """Rows `0 .. memory_rows - 1` live in memory_dir, the rest in the spill file."""
        return self._need().memory_rows

    @property
    def filled(self) -> int:
        """Rows filled in the current version (by any process sharing it)."""
        return len(self._current.filled_rows()) if self._current is not None else 0

    @property
    def resident_bytes(self) -> int:
        """Bytes the current version's in-memory rows file holds (pages written)."""
        return _allocated(self._current.rows_path) if self._current is not None else 0

    @property
    def spilled_bytes(self) -> int:
        """Bytes the current version's spill file holds (pages written)."""
        return _allocated(self._current.spill_path) if self._current is not None else 0

    def files(self) -> list[Path]:
        """The files of the open versions that exist now."""
        versions = [v for v in (self.previous, self._current) if v is not None]
        return [p for v in versions for p in v.paths() if p.exists()]

    def _need(self) -> _Version:
        if self._current is None:
            raise ValueError("nothing is frozen (version 0); create or attach a version first")
        return self._current

    def _open(
        self, version: int, sample_shape: tuple[int, ...], dtype: torch.dtype, *, create: bool
    ) -> None:
        if version <= self.frozen_layers:
            raise ValueError(
                f"freeze point must grow: cache is at {self.frozen_layers}, got {version}"
            )
        if any(d < 0 for d in sample_shape):
            raise ValueError(f"bad sample_shape {tuple(sample_shape)}")
        new = _Version(
            version,
            self.num_samples,
            tuple(sample_shape),
            dtype,
            self.budget_bytes,
            self.memory_dir,
            self.spill_dir,
            self.name,
            create=create,
        )
        if self.previous is not None:  # only one older version is kept
            self.previous.close(unlink=self.previous.created)
        self.previous, self._current = self._current, new

    def create(self, version: int, sample_shape: tuple[int, ...], dtype: torch.dtype) -> None:
        """Make version `version` (> the current one) empty, with rows of this shape and dtype;
        the current version stays open as `previous`. One process of those sharing the cache
        calls this; the others `attach` after a barrier."""
        self._open(version, sample_shape, dtype, create=True)

    def attach(self, version: int, sample_shape: tuple[int, ...], dtype: torch.dtype) -> None:
        """Open version `version` that another process created (same shape and dtype)."""
        self._open(version, sample_shape, dtype, create=False)

    def remove_leftovers(self) -> list[Path]:
        """`cache.remove_leftovers()` → the files of this cache's name (`{name}-v{k}.rows`,
        `.map`, `.spill`) that a run killed before it could close its cache left in its
        directories (the spill files under the run directory), deleted now; a link among them
        is unlinked, its target untouched. For the process that creates the versions, before
        the first, while no other process uses the name (a run directory is one run's at a
        time)."""
        if self._current is not None or self.previous is not None:
            raise ValueError("leftovers are removed before any version is open")
        removed = self._remove_named()
        if removed:
            logger.debug("removed %d cache files a killed run left: %s", len(removed), removed)
        return removed

    def remove_files(self) -> list[Path]:
        """`cache.remove_files()` → every file of this cache's name in its directories, whoever
        created it and whatever version, deleted now (a link unlinked, its target untouched),
        then those directories once empty, the run's `cache` folder above a node's too. For a
        failing rank (`remove_own_caches`): the files of a run that is ending."""
        removed = self._remove_named()
        folders = [self.spill_dir, self.memory_dir]
        if _NODE_NAME.fullmatch(self.spill_dir.name):  # `cache/nodeN`, as the worker names it
            folders.append(self.spill_dir.parent)
        for folder in dict.fromkeys(folders):
            with contextlib.suppress(OSError):  # removes only an empty directory, never a link
                folder.rmdir()
        return removed

    def _remove_named(self) -> list[Path]:
        """The files of this cache's name (`{name}-v{k}.rows`, `.map`, `.spill`) in its
        directories, unlinked now."""
        pattern = re.compile(rf"{re.escape(self.name)}-v\d+\.(rows|map|spill)")
        removed = []
        for directory in dict.fromkeys((self.memory_dir, self.spill_dir)):
            # none yet, or not private: refused when first used
            removed += _remove_matching(directory, pattern)
        return removed

    def _check_indices(self, indices: torch.Tensor, *, unique: bool) -> torch.Tensor:
        idx = torch.as_tensor(indices)
        if idx.dim() != 1:
            raise ValueError(f"indices must be 1-D, got shape {tuple(idx.shape)}")
        if idx.dtype == torch.bool or idx.is_floating_point() or idx.is_complex():
            raise ValueError(f"indices must be integers, got {idx.dtype}")
        idx = idx.to(device="cpu", dtype=torch.long)
        if len(idx) and (int(idx.min()) < 0 or int(idx.max()) >= self.num_samples):
            raise IndexError(f"sample index out of range [0, {self.num_samples})")
        if unique and torch.unique(idx).numel() != idx.numel():
            raise ValueError("indices must not repeat")
        return idx

    # --- rows ------------------------------------------------------------------------------

    def lookup(self, indices: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(values for the indices that are filled, bool mask of which indices were filled).

        Values have shape (len(indices), *sample_shape) on CPU; rows whose mask is False are
        unspecified. Repeated indices are allowed. Version 0 has no rows: all miss.
        """
        idx = self._check_indices(indices, unique=False)
        if self._current is None:
            return torch.empty((len(idx), 0)), torch.zeros(len(idx), dtype=torch.bool)
        values = torch.empty((len(idx), *self.sample_shape), dtype=self.dtype)
        mask = self._current.filled_mask(idx)
        if bool(mask.any()):
            positions = mask.nonzero().squeeze(1)
            self._current.read_into(values, positions, idx[positions])
        return values, mask

    def store(self, indices: torch.Tensor, values: torch.Tensor, frozen_layers: int) -> None:
        """Fill rows; frozen_layers must equal the current version (else ValueError).

        Values are detached, moved to the CPU and stored bit-exactly (no dtype conversion).

        Several processes may store into one cache without a lock because no two of them ever
        write the same row at once, and no one reads a row while it is being written: the
        executor's stage-0 ranks store only the samples of their own shard, and the shards of
        one epoch are disjoint; a sample another rank stored is read at a later step, and every
        step ends with a collective over all ranks (the step record's all-gather, plus the
        gradient all-reduce), which orders the writer's stores before the reader's lookups.
        Within a process, a row is written before its map byte, so a map byte read as 1
        always has its row behind it.
        """
        if frozen_layers != self.frozen_layers:
            raise ValueError(
                f"stale producer: values belong to freeze point {frozen_layers}, "
                f"cache is at {self.frozen_layers}"
            )
        version = self._need()
        idx = self._check_indices(indices, unique=True)
        values = values.detach().to("cpu").contiguous()
        if values.dim() == 0 or values.shape[0] != len(idx):
            raise ValueError(
                f"values shape {tuple(values.shape)} does not match {len(idx)} indices"
            )
        if tuple(values.shape[1:]) != version.sample_shape or values.dtype != version.dtype:
            raise ValueError(
                f"values are {_dtype_name(values.dtype)}{list(values.shape[1:])}, cache version "
                f"{version.version} holds {_dtype_name(version.dtype)}{list(version.sample_shape)}"
            )
        if len(idx):
            version.write(idx, values)

    def advance_rows(
        self,
        compute: Callable[[torch.Tensor], torch.Tensor],
        part: int = 0,
        parts: int = 1,
        chunk: int = 256,
    ) -> int:
        """Fill the current version from `previous` by `compute` (the newly frozen layers, run
        under no_grad on a batch of old rows), for the previous version's filled rows whose
        position among them is `part` modulo `parts` (so `parts` processes split the work);
        returns how many rows it transformed. Rows the previous version lacks stay unfilled."""
        if self.previous is None:
            raise ValueError("no previous version to advance from")
        if not 0 <= part < parts or chunk < 1:
            raise ValueError(f"bad share {part} of {parts} or chunk {chunk}")
        started = time.perf_counter()
        rows = self.previous.filled_rows()[part::parts]
        for start in range(0, len(rows), chunk):
            idx = rows[start : start + chunk]
            with torch.no_grad():
                out = compute(self.previous.read(idx))
            self.store(idx, out, self.frozen_layers)
        logger.info(
            "cache version %d -> %d: transformed %d rows in %.3f s",
            self.previous.version,
            self.frozen_layers,
            len(rows),
            time.perf_counter() - started,
        )
        return len(rows)

    def drop_previous(self) -> None:
        """Close the previous version (its creator deletes its files)."""
        if self.previous is not None:
            self.previous.close(unlink=self.previous.created)
            self.previous = None

    def advance(
        self,
        new_frozen_layers: int,
        compute: Callable[[torch.Tensor], torch.Tensor] | None,
        sample_shape: tuple[int, ...],
        dtype: torch.dtype,
        chunk: int = 256,
    ) -> None:
        """One process alone: `create` the new version, transform every filled row with
        `compute` (None: start empty) and drop the old version. If `compute` raises, the new
        version is deleted and the cache stays at the old one; the exception propagates."""
        self.create(new_frozen_layers, sample_shape, dtype)
        if compute is not None and self.previous is not None:
            try:
                self.advance_rows(compute, chunk=chunk)
            except BaseException:
                failed, self._current, self.previous = self._current, self.previous, None
                failed.close(unlink=True)
                logger.warning(
                    "cache advance -> %d failed; staying at version %d",
                    new_frozen_layers,
                    self.frozen_layers,
                )
                raise
        self.drop_previous()

    def close(self, unlink: bool) -> None:
        """Unmap every open version; with `unlink`, delete the files this process created."""
        for version in (self.previous, self._current):
            if version is not None:
                version.close(unlink=unlink and version.created)
        self.previous = self._current = None
        _OPENED.discard(self)  # closed: no longer this process's to remove if it fails

    def manifest(self) -> dict[str, Any]:
        """A JSON-able description of the cache: version, row layout, fill, where rows live."""
        base = {
            "format": CACHE_MANIFEST_FORMAT,
            "frozen_layers": self.frozen_layers,
            "num_samples": self.num_samples,
            "budget_bytes": self.budget_bytes,
        }
        if self._current is None:
            return {**base, "filled": 0}
        filled = self._current.filled_rows()
        in_memory = int((filled < self._current.memory_rows).sum())
        return {
            **base,
            "filled": len(filled),
            "filled_in_memory": in_memory,
            "filled_spilled": len(filled) - in_memory,
            **self._current.describe(),
        }
