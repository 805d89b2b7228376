"""Layout-independent checkpoints: everything needed to continue a run, on any layout.

A checkpoint gathers every layer's parameters and the AdamW state of the active ones to rank 0
(with the same point-to-point moves an elastic transition uses), together with every rank's RNG
states (CPU, and CUDA where the rank has a GPU), the freeze state and gradient history, and
the position in training (global step, epoch, step within the epoch; the learning rate
follows from the global step, the data order from the epoch). Rank 0 writes it into a
temporary directory, fsyncs, renames it to `checkpoints/step-N/` and only then points
`checkpoints/latest` at it, so a crash mid-write leaves the previous checkpoint intact. Tensors
are saved as plain dicts of tensors and loaded with `torch.load(weights_only=True)`: never
unrestricted pickle.

Device discipline: the gather runs over the host's gloo group on CPU tensors (a rank's GPU
state is copied to the host as it is sent), so rank 0 collects the model and its AdamW state in
host memory, never on its GPU, and every file holds CPU tensors. Loading maps every tensor to
the CPU (`map_location`), so a checkpoint written by any device loads on a CPU-only host; the
resumed runtime moves what each rank owns onto its device (`PhaseRuntime`, `install_states`).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import logging
import math
import os
import pickle
import re
import shlex
import shutil
import stat
import sys
import warnings
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO, TypeVar

import torch
import torch.distributed as dist
from torch import nn

from executor.migrate import ADAMW_STATE_KEYS, OptimizerState, migrate
from executor.topology import host_group
from pipeplan.errors import (
    BadArgumentError,
    InputFileError,
    OutputError,
    excerpt,
    open_files_failure,
    quoted,
)
from pipeplan.fileio import (
    CHECKPOINT_WRITER,
    EXPORT_FOLDER,
    REPLACED,
    TEMPORARY_PART,
    remove_checkpoint,
    restore_replaced,
    stops_deferred,
    stops_raised,
    write_atomic,
    write_failure,
)
from pipeplan.formats import CheckpointManifest, Layout, RunConfig, dumps, load
from pipeplan.formats.base import open_input, read_input
from pipeplan.spawn import owner_tag

log = logging.getLogger("pipeplan.checkpoint")
T = TypeVar("T")
KEEP = 2  # checkpoints kept: the newest and the one before it
FILES = ("model.pt", "optimizer.pt", "rng.pt")  # beside manifest.json, which names their sha256
# A resume that changes the run's configuration (more epochs, another world size) writes it
# here; the first checkpoint taken under it (or the resumed run's end) makes it run.json, in
# the step that puts the checkpoint in place (`_write`). So run.json describes the checkpoints
# beside it (or, a kill inside that step, is ahead of them as a resume is: `_write`), and a
# resume that fails before taking one leaves run.json as it was.
PENDING_CONFIG = "run.resume.json"
# What `--resume` may change in run.json (given as flags, or found edited): the world size
# (re-planned), more epochs (the cosine of the learning rate stretches over the new total from
# the saved position), the collective timeout (how long to wait, not what is computed). Every
# other field changes what the checkpoint's state means (batch, data, model, schedule, seed).
RESUMABLE = ("nproc", "epochs", "collective_timeout_s")


def _gather_layout(frozen_layers: int, num_layers: int) -> Layout:
    """A pseudo-layout with every layer on rank 0: where a checkpoint collects the state."""
    return Layout(
        frozen_layers=frozen_layers,
        cached=False,
        micro_batches=1,
        micro_batch_size=1,
        schedule="1f1b",
        boundaries=(0, num_layers),
        rank_map=((0,),),
    )


def _names(layers: nn.ModuleList) -> dict[nn.Parameter, str]:
    return {
        p: f"{i}.{name}" for i, layer in enumerate(layers) for name, p in layer.named_parameters()
    }


def save(
    run_dir: Path,
    layers: nn.ModuleList,
    layout: Layout,
    states: dict[nn.Parameter, OptimizerState],
    manifest: CheckpointManifest,
    check: Callable[[], None] | None = None,
) -> Path | None:
    """Collective. Returns the checkpoint directory on rank 0; `check`, where given, runs
    once the files are written, before they are published (`_write`):

        save(run_dir, layers, layout, states, manifest, check=lambda: trainer.check_held(…))
    """
    rank, host = dist.get_rank(), host_group()
    gathered = migrate(
        layers, layout, states, _gather_layout(layout.frozen_layers, len(layers)), rank, host
    )
    rng = [None] * dist.get_world_size()
    dist.all_gather_object(rng, rng_states(), group=host)
    if rank != 0:
        return None
    names = _names(layers)
    tensors = {
        "model.pt": {names[p]: p.detach().cpu() for p in names},
        # Rank 0's own layers' state may be on its GPU: the file holds host copies.
        "optimizer.pt": {names[p]: {k: v.cpu() for k, v in s.items()} for p, s in gathered.items()},
        "rng.pt": {f"{r}{kind}": state for r, states in enumerate(rng) for kind, state in states},
    }
    # SIGTERM or SIGHUP (the command's stop, forwarded; a scheduler's; torchrun's agent's)
    # removes the partial folder as Ctrl-C does: they killed the rank and left it, the size
    # of the model and its AdamW state. No collective in here, so a handler runs at once.
    with stops_raised():
        final = _write(run_dir, tensors, manifest, check)
    prune(run_dir / "checkpoints")
    return final


def _write(
    run_dir: Path,
    tensors: dict[str, dict],
    manifest: CheckpointManifest,
    check: Callable[[], None] | None = None,
) -> Path:
    """Rank 0's part of `save`: `tensors` ({file name: what it holds}) and the manifest into
    `.tmp-step-N/`, fsynced, then `check()` (the rank's guard: BadArgumentError, raised as
    it is), then renamed `step-N/` (a resume's run.resume.json committed first, an older
    `step-N/` renamed aside until then) and pointed at by `latest`. Whatever stops it, the
    temporary folder goes (`remove_partial` for a rank killed outright) and the checkpoint
    `latest` named stays.

        _write(run_dir, {"model.pt": weights}, manifest, check=lambda: trainer.check_held(…))
    """
    root = run_dir / "checkpoints"
    final = root / f"step-{manifest.step}"
    tmp = root / f"{PARTIAL}{final.name}"
    aside = root / f"{REPLACED}{final.name}"
    _restore_replaced(root)  # one a killed write left: the rename aside needs its name
    if os.path.lexists(final) and os.path.lexists(aside):
        # What `restore_replaced` leaves there is no checkpoint set aside (no manifest.json: a
        # user's, or what an older pipeplan's kill half removed), and the rename aside fails
        # on it (ENOTEMPTY), once run.json is committed: refused before anything is written.
        raise OutputError(
            f"{aside}: in the way of rewriting checkpoint {final.name} (it holds no "
            "manifest.json: not one pipeplan set aside); move or delete it"
        )
    try:
        shutil.rmtree(tmp, ignore_errors=True)
        # Never the run directory itself: one moved away mid-run was made again, with a
        # second half-run's checkpoints (the twenty-eighth round).
        root.mkdir(exist_ok=True)
        tmp.mkdir()
        # Its writer named in it until it is whole: a command that claims or reads the run
        # removes it once this process is gone (`fileio._remove_dead_checkpoints`). Where
        # the name does not fit (a run directory near PATH_MAX), the next resume removes it.
        writer = tmp / f"{CHECKPOINT_WRITER}{tag}" if (tag := owner_tag()) else None
        try:
            if writer is not None:
                writer.touch()
        except OSError:
            writer = None
        for name, value in tensors.items():
            torch.save(value, tmp / name)
        files = {name: file_sha256(tmp / name) for name in tensors}
        sizes = {name: (tmp / name).stat().st_size for name in tensors}
        manifest = manifest.model_copy(update={"files": files, "sizes": sizes})
        (tmp / "manifest.json").write_text(dumps(manifest))
        for f in tmp.iterdir():
            with open(f, "rb") as handle:
                os.fsync(handle.fileno())
        if writer is not None:
            writer.unlink()
        if check is not None:
            # Once the bytes are written, before anything publishes them: a data thread that
            # replaced torch.save while the write ran (after the guard's compare before it)
            # wrote an all-zero model.pt, checksummed as good (the sixty-sixth round).
            check()
        # One step that a stop waits for; SIGKILL waits for nothing, so every point inside it
        # must leave a run that resume, export and report take. run.json first: committed
        # after `latest`, a kill between left a checkpoint trained with --epochs 3 beside a
        # run.json of 2, refused by all three (the sixty-fifth round). Committed first, it is
        # ahead of the checkpoints at most in RESUMABLE fields, epochs only grown: what any
        # resume's configuration is beside its checkpoint (`check_trained_with`). Rank 0
        # alone commits it, on its own node. A checkpoint of the same step (a resume's freeze
        # decision at its first step) is renamed aside, not deleted, until the new one is in
        # place: deleted first, a stop left `latest` naming a folder half gone or gone (the
        # sixty-fifth round). A kill between the two renames leaves `.old-step-N/`, which a
        # claim or read of the run renames back (`restore_replaced`); one after, the folder
        # being removed (`remove_checkpoint`), which they remove.
        with stops_deferred():
            commit_config(run_dir)
            with contextlib.suppress(FileNotFoundError):
                os.replace(final, aside)
            os.replace(tmp, final)
            write_atomic(root / "latest", final.name + "\n")
        _in_checkpoints(root, remove_checkpoint, aside.name)
    except BaseException as exc:
        # torch.save reports a full disk as a RuntimeError from its zip writer, not an
        # OSError: any failure, Ctrl-C too, removes the partial directory and keeps the
        # previous checkpoint. The reason is read first: the partial files fill the disk.
        refused = isinstance(exc, BadArgumentError)  # `check`'s line says it all
        reason = (
            None
            if refused
            else write_failure(exc, root)
            or excerpt(" ".join(str(exc).split()))
            or type(exc).__name__
        )
        _in_checkpoints(root, remove_checkpoint, tmp.name)  # its writer's mark may go first
        _restore_replaced(root)  # the old one back where the new one failed to take its place
        if refused or not isinstance(exc, Exception):  # Ctrl-C, SystemExit: nothing to explain
            raise
        if not reason.startswith(os.strerror(errno.EFBIG)):  # a full disk, or unknown
            free = shutil.disk_usage(root).free if root.exists() else 0
            reason += f"; {free >> 20} MiB free on its disk"
        raise OutputError(
            f"{final}: cannot write checkpoint {final.name} ({reason}); {_kept(root, final.name)}"
        ) from None
    return final


def _kept(root: Path, failed: str) -> str:
    """The checkpoint a failed one leaves for a resume, named by its step: "the previous
    checkpoint is kept (at step 4)" read as if step 4, the failed one, were kept.

        _kept(run_dir / "checkpoints", "step-4")   # "the last checkpoint written, step-2, is kept"
    """
    try:
        kept = (root / "latest").read_text(encoding="ascii").strip()
    except (OSError, ValueError):
        kept = ""
    if not STEP_DIR.fullmatch(kept) or not (root / kept).is_dir():
        # Step folders, but a pointer that names none of them (made a folder, edited by
        # hand): "no earlier checkpoint is kept" beside "resume with" said both (forty-
        # seventh round). What a resume needs is said instead.
        with contextlib.suppress(OSError):
            if any(STEP_DIR.fullmatch(entry.name) for entry in root.iterdir()):
                return f"{root / 'latest'} names no checkpoint kept, which a resume needs"
        return "no earlier checkpoint is kept"
    if kept == failed:  # written and pointed to; what failed came after
        return f"{kept} itself is kept"
    return f"the last checkpoint written, {kept}, is kept"


POINTER_LIMIT = 4096  # bytes of checkpoints/latest, which holds `step-N`
STEP_DIR = re.compile(r"step-([0-9]{1,12})")


def has_checkpoint(run_dir: Path) -> bool:
    """Whether the run has a checkpoint to resume from: `checkpoints/latest`, or a `step-N`
    written without it (killed before the pointer; the resume says to restore it)."""
    folder = run_dir / "checkpoints"
    return (folder / "latest").exists() or bool(checkpoints_written(folder))


def checkpoints_written(root: Path) -> list[Path]:
    """The checkpoints under `root` (a run's checkpoints/), oldest first: folders `step-N`
    holding a checkpoint manifest and no run.json. Anything else there (a run a user put
    under --runs-dir RUN/checkpoints, a file, a symbolic link) is not ours."""
    found = []
    for path in root.glob("step-*"):
        match = STEP_DIR.fullmatch(path.name)
        if (
            match
            and not path.is_symlink()
            and path.is_dir()
            and (path / "manifest.json").is_file()
            and not (path / "run.json").exists()
        ):
            found.append((int(match[1]), path))
    return [path for _, path in sorted(found)]


def prune(root: Path, keep: int = KEEP) -> None:
    """Remove all but the newest `keep` checkpoints under `root`; nothing that is not one
    (`checkpoints_written`) is ever removed (`prune(run_dir / "checkpoints")`)."""
    for old in checkpoints_written(root)[:-keep]:
        _in_checkpoints(root, remove_checkpoint, old.name)


# What a rank writes before it renames it, by folder of the run ("." the run directory): a
# checkpoint's `.tmp-step-N/` (beside the `step-N/` it becomes), the model's folder as
# `models.export` writes it (`fileio.EXPORT_FOLDER`, for `model/`; `.tmp-model-PID/` before); and
# the files `write_atomic` stages beside the run's own (`.latest.[OWNER-]RANDOM8.tmp`,
# `.run.json.[OWNER-]RANDOM8.tmp`, …) with the probe it writes first.
PARTIAL = ".tmp-"
_MKSTEMP = r"[a-z0-9_]{8}"  # tempfile's random part of a name
_PROBE = rf"\.pipeplan-probe-{_MKSTEMP}"  # `check_writable`'s
_RUN_FILES = (
    r"run\.json|run\.jsonl|run\.resume\.json|metrics\.csv|summary\.json|calibration-[0-9]+\.json"
)
PARTIAL_FOLDERS = {
    "checkpoints": re.compile(r"\.tmp-step-[0-9]{1,12}"),
    ".": re.compile(rf"\.tmp-model-[0-9]{{1,12}}|{EXPORT_FOLDER.pattern}"),  # older, and now
}
PARTIAL_FILES = {
    "checkpoints": re.compile(rf"\.latest\.{TEMPORARY_PART}|{_PROBE}"),
    ".": re.compile(rf"\.(?:{_RUN_FILES})\.{TEMPORARY_PART}|{_PROBE}"),
}


def remove_partial(run_dir: Path) -> list[Path]:
    """`remove_partial(Path("runs/k"))` → what writes a rank did not finish left in the run
    directory (`PARTIAL_FOLDERS`, as large as the model and its AdamW state; `PARTIAL_FILES`),
    removed. A stop the rank handles removes its own (`stops_raised`); one killed outright
    (SIGKILL, or SIGTERM under torchrun outside a write) cannot. Only where no rank of the
    run writes: `pipeplan run`'s launcher once every rank is gone, a resume's rank 0 before
    it trains. Never a complete checkpoint (`step-N/`), nor a link, nor a folder where a file
    is named or a file where a folder is; one renamed aside to rewrite its step goes back in
    its place where that is empty (`fileio.restore_replaced`). Never raises."""
    _restore_replaced(run_dir / "checkpoints")
    return [
        Path(entry.path)
        for folder in PARTIAL_FOLDERS
        for entry in _entries(run_dir / folder)
        if _remove_if_partial(entry, folder)
    ]


def _restore_replaced(root: Path) -> None:
    """`fileio.restore_replaced` on the checkpoints folder `root` (a run's checkpoints/),
    unless it is missing or a link. Never raises."""
    _in_checkpoints(root, restore_replaced)


def _in_checkpoints(root: Path, action: Callable[..., None], *args: str) -> None:
    """`action(folder, *args)` on the checkpoints folder `root` opened (`folder`, its
    descriptor), unless it is missing or a link: `_in_checkpoints(root, remove_checkpoint,
    "step-2")`."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        folder = os.open(root, flags)
    except OSError:
        return
    try:
        action(folder, *args)
    finally:
        os.close(folder)


def _remove_if_partial(entry: os.DirEntry[str], folder: str) -> bool:
    """Remove `entry` of the run's `folder` if it is what a write left (`remove_partial`)."""
    with contextlib.suppress(OSError):
        # follow_symlinks=False: a link is neither followed nor removed.
        if PARTIAL_FOLDERS[folder].fullmatch(entry.name) and entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path, ignore_errors=True)
            return True
        if PARTIAL_FILES[folder].fullmatch(entry.name) and entry.is_file(follow_symlinks=False):
            os.unlink(entry.path)
            return True
    return False


def _entries(folder: Path) -> list[os.DirEntry[str]]:
    """The entries of `folder`; none when it is missing, not a folder, or a link (a
    checkpoints/ linked elsewhere leads out of the run: `check_outputs` refuses it)."""
    try:
        return [] if folder.is_symlink() else list(os.scandir(folder))
    except OSError:
        return []


def commit_config(run_dir: Path) -> None:
    """The configuration a resume changed becomes run.json (PENDING_CONFIG); no-op without one."""
    pending = run_dir / PENDING_CONFIG
    if pending.exists():
        os.replace(pending, run_dir / "run.json")


def rng_states() -> list[tuple[str, torch.Tensor]]:
    """This rank's random states, keyed as rng.pt stores them after the rank: "" for the CPU
    generator, ".cuda" for the current GPU's (dropout on a GPU draws from it)."""
    states = [("", torch.get_rng_state())]
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states.append((".cuda", torch.cuda.get_rng_state()))
    return states


def restore_rng(rng: dict[str, torch.Tensor], rank: int, device: torch.device) -> None:
    """Put back `rank`'s random states from rng.pt: the CPU one always, the GPU one when this
    rank runs on a GPU and the checkpoint has one for it."""
    torch.set_rng_state(rng[str(rank)])
    if device.type == "cuda" and f"{rank}.cuda" in rng:
        torch.cuda.set_rng_state(rng[f"{rank}.cuda"], device)


# A checkpoint file is as large as the model and its AdamW state: no limit but the disk's.
TENSOR_FILE_LIMIT = sys.maxsize


def read_tensors(path: Path, handle: BinaryIO | None = None) -> dict:
    """A checkpoint file's tensors, on the host whatever device wrote them, without
    unrestricted pickle (`read_tensors(step / "model.pt")`). Read from `handle`, the file
    as opened and checked (`load_checkpoint`), from its start; without one, `path` is
    opened here (`open_input`: a FIFO is refused, not waited on). Never opened again by
    name: torch.load(path) blocked forever on a FIFO swapped in after the checksum, and
    would have loaded a regular file swapped in unchecked (forty-third round)."""
    with contextlib.ExitStack() as opened:
        if handle is None:
            handle = opened.enter_context(open_input(path, TENSOR_FILE_LIMIT))
        handle.seek(0)
        try:
            with warnings.catch_warnings():  # torch warns about the pickle before refusing it
                warnings.simplefilter("ignore")
                return torch.load(handle, map_location="cpu", weights_only=True)
        except pickle.UnpicklingError:
            raise InputFileError(f"{path}: not a checkpoint of tensors (refused unread)") from None


def file_sha256(path: Path) -> str:
    """`file_sha256(path)`: the hex sha256 of a file's bytes, read in blocks. OSError for
    anything but a regular file, told by what was opened: opened without blocking, a FIFO
    put in its place is refused, not waited on forever (forty-second round)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        os.set_blocking(fd, True)
        return handle_sha256(handle)


def handle_sha256(handle: BinaryIO) -> str:
    """The hex sha256 of an open file's bytes from where it stands, read in blocks: for a file
    opened as checked (`formats.base.open_input`), not opened again by name."""
    digest = hashlib.sha256()
    for block in iter(lambda: handle.read(1 << 20), b""):
        digest.update(block)
    return digest.hexdigest()


# What a run without a checkpoint cannot do, by the command that wanted one.
NO_CHECKPOINT = {
    "resume": "no checkpoint to resume from",
    "export": "no checkpoint to export: the run has not saved one",
    "report": "no checkpoint to check the run against",  # report and calibrate
}
# What the command does with an older checkpoint when the newest is refused, for its notice.
USING_OLDER = {
    "resume": "resuming from",
    "export": "exporting",
    "report": "checking the run against",
}


def check_checkpoints_folder(run_dir: Path) -> None:
    """The run's checkpoints/ is not a symbolic link: a resume would write its checkpoints
    through it, and an export would read another folder's as this run's."""
    root = run_dir / "checkpoints"
    if root.is_symlink():
        raise InputFileError(f"{root}: is a symbolic link; a run's checkpoints are its own folders")


def latest(run_dir: Path, purpose: str = "resume") -> Path:
    """The checkpoint `checkpoints/latest` names, for `purpose` (a key of NO_CHECKPOINT):
    `latest(run_dir, "export")`."""
    check_checkpoints_folder(run_dir)
    pointer = run_dir / "checkpoints" / "latest"
    if pointer.is_symlink():  # pipeplan replaces the pointer as a file: a link is an edit
        raise InputFileError(
            f"{pointer}: is a symbolic link; pipeplan writes the pointer as a plain file "
            "(step-N and a newline)"
        )
    if not pointer.exists():
        kept = checkpoints_written(pointer.parent)
        if kept:  # deleted by hand: which checkpoint is the run's is not guessed, as for an edit
            names = ", ".join(p.name for p in kept)
            raise InputFileError(
                f"{pointer}: is missing, though the run has checkpoints ({names}); restore it "
                f"to name one (pipeplan writes {kept[-1].name} and a newline)"
            )
        # A run that trained steps but wrote no checkpoint (stopped before its first): only a
        # new run trains it, and its name is taken until the folder goes (twenty-sixth round).
        restart = (
            ": it stopped before it wrote one; delete it to run it again (--checkpoint-every N "
            "writes them sooner)"
            if purpose == "resume"
            else ""
        )
        raise InputFileError(f"{run_dir}: {NO_CHECKPOINT[purpose]}{restart}")
    # `step-N` and a newline: a few bytes, so a larger file is not the run's pointer.
    # Bytes not UTF-8 are no name either: said as the rest of what it holds (each such byte
    # as U+FFFD; `\xff` read as a backslash typed, the ninety-fourth round), not "cannot read".
    text = read_input(pointer, POINTER_LIMIT, why="not a checkpoint pointer", errors="replace")
    # Exactly what `save` writes, `step-N` and at most one newline: blanks or more lines
    # around the name are an edit, and an edited pointer may name another folder than meant.
    name = text.removesuffix("\n")
    # The pointer names a sibling folder, nothing else: not a path out of the run directory.
    if not re.fullmatch(r"step-[0-9]{1,12}", name):
        # What to write there, as for a deleted pointer: the ninety-third round's garbage one
        # said what was wrong and not how to resume.
        kept = checkpoints_written(pointer.parent)
        restore = (
            f"; restore it to name one of the run's checkpoints ({', '.join(p.name for p in kept)}"
            f": pipeplan writes {kept[-1].name} and a newline)"
            if kept
            else ""
        )
        raise InputFileError(
            f"{pointer}: holds {quoted(text)}, not one checkpoint name (step-N and a newline, "
            f"as pipeplan writes it){restore}"
        )
    path = run_dir / "checkpoints" / name
    if path.is_symlink():  # the resume would write its next checkpoint through it, and fail
        raise InputFileError(f"{path}: is a symbolic link; a run's checkpoints are its own folders")
    if not path.exists():  # a hand-edited or stale pointer: nothing there to be incomplete
        kept = ", ".join(p.name for p in checkpoints_written(path.parent)) or "none"
        raise InputFileError(
            f"{pointer}: names {name}, which does not exist (checkpoints here: {kept})"
        )
    # A folder without its manifest.json (or a file in its place) is returned as named: it
    # is a checkpoint that does not verify (`read_manifest` says why), which `load_latest`
    # passes over for the older one, as one without its model.pt. Refused here, the run could
    # be neither resumed, exported nor reported, the usable step-4 beside it unnamed (the
    # thirty-sixth round). Never one being written: `_write` fills `.tmp-step-N/` (no
    # `step-*` name) and renames it complete, and a live run's lock keeps other commands out.
    return path


Loaded = tuple[CheckpointManifest, dict[str, torch.Tensor], dict[str, OptimizerState], dict]


def load_checkpoint(path: Path) -> Loaded:
    """One checkpoint, verified: every file's sha256 as the manifest recorded it, finite
    parameters, AdamW's state and the random states as `save` writes them (`_check_optimizer`,
    `_check_rng`). InputFileError (one line) if anything is off."""
    if path.is_symlink():
        raise InputFileError(f"{path}: is a symbolic link; a run's checkpoints are its own folders")
    manifest = folder_manifest(path)  # its files there, of their sizes, before any hash
    with contextlib.ExitStack() as opened:
        # Each file opened once, then hashed and loaded from what was opened: what is
        # loaded is what was checked (`read_tensors`).
        handles = {
            name: opened.enter_context(_open_checked(path, name, manifest)) for name in FILES
        }
        try:
            model, optimizer, rng = (read_tensors(path / n, handles[n]) for n in FILES)
        except (OSError, RuntimeError, ValueError) as exc:
            raise open_files_failure(exc, path) or InputFileError(
                f"{path}: unreadable checkpoint ({str(exc).splitlines()[0]})"
            ) from None
    _check_structure(path, model, optimizer, rng)
    bad = next((n for n, t in model.items() if not torch.isfinite(t).all()), None)
    if bad is not None:
        raise InputFileError(f"{path}: parameter {bad} holds NaN or infinite values")
    # The other two files held to what `save` writes as well: a NaN moment resumed, trained
    # and failed as "training diverged … lower --lr" (twenty-second round).
    _check_optimizer(path / "optimizer.pt", manifest.step, model, optimizer)
    _check_active_states(path / "optimizer.pt", manifest, model, optimizer)
    _check_rng(path / "rng.pt", manifest.world_size, rng)
    return manifest, model, optimizer, rng


def _check_active_states(
    file: Path,
    manifest: CheckpointManifest,
    model: dict[str, torch.Tensor],
    optimizer: dict[str, OptimizerState],
) -> None:
    """Every parameter of a layer not frozen at the checkpoint (its name's first part, the
    layer's index, at least `frozen_layers`) has AdamW's state once a step was taken: each
    active parameter took every step's update. Found by the forty-ninth round: one entry
    removed (its checksum rewritten) resumed with fresh moments for it, in silence, and the
    run differed from the uninterrupted one in every tensor."""

    def active(name: str) -> bool:
        layer = name.partition(".")[0]
        return layer.isdigit() and int(layer) >= manifest.frozen_layers

    # Every checkpoint `save` writes after a step holds them: with none at all (optimizer.pt
    # emptied, its checksum rewritten) the resume started every moment afresh and trained
    # other weights, in silence (the fifty-first round; one removed: the forty-ninth).
    if manifest.step == 0:
        return
    for name in model:
        layer = name.partition(".")[0]
        if active(name) and name not in optimizer:
            raise InputFileError(
                f"{file}: lacks AdamW's state of {name}, a parameter of layer {layer}, which "
                f"is not frozen at step {manifest.step} (frozen_layers {manifest.frozen_layers})"
            )


@contextlib.contextmanager
def _open_checked(path: Path, name: str, manifest: CheckpointManifest) -> Iterator[BinaryIO]:
    """Checkpoint `path`'s file `name` opened (`open_input`: a regular file, by what was
    opened) and its bytes' sha256 the manifest's; InputFileError otherwise, and the file
    closed. `with _open_checked(step, "rng.pt", manifest) as f: read_tensors(step / "rng.pt", f)`"""
    file = path / name
    with open_input(file, TENSOR_FILE_LIMIT) as handle:
        # Its size was held to the manifest's (`folder_manifest`); one swapped in since is
        # held to an archive's bytes here, before the hash reads them all.
        _check_archive(handle, file)
        if handle_sha256(handle) != manifest.files[name]:
            raise InputFileError(f"{file}: checksum mismatch (corrupted or replaced)")
        yield handle


def _check_archive(handle: BinaryIO, file: Path) -> None:
    """The file is the zip archive torch.save writes, its bytes its entries' (headers and
    directory aside), read from its directory at the end, before the whole is hashed: a
    sparse file of terabytes, or one extended by holes, took hours to hash, its size given in
    the manifest too (the fifty-second round). Leaves `handle` at the start."""
    size = os.fstat(handle.fileno()).st_size
    listed, directory = _listed_entries(handle) or (0, 0)
    # zipfile reads every entry's line of the directory into an object: 1.5 M empty entries
    # forged into a model.pt took 28 s and 1.1 GB (the fifty-third round); it walks the
    # directory by its size, whatever count the end record gives (the fifty-sixth).
    if listed > MAX_ARCHIVE_ENTRIES:
        raise InputFileError(
            f"{file}: its archive lists {listed:,} entries; a checkpoint file holds at most "
            f"{MAX_ARCHIVE_ENTRIES:,} (corrupted or replaced)"
        )
    if directory > MAX_DIRECTORY_BYTES:
        raise InputFileError(
            f"{file}: its archive's directory is {directory:,} bytes; a checkpoint file's is "
            f"at most {MAX_DIRECTORY_BYTES:,} (corrupted or replaced)"
        )
    try:
        entries = zipfile.ZipFile(handle).infolist()  # not closed: `handle` is the caller's
    except (zipfile.BadZipFile, OSError, ValueError, EOFError):
        raise InputFileError(
            f"{file}: not the zip archive torch.save writes (corrupted or replaced)"
        ) from None
    held = sum(e.compress_size + 30 + len(e.filename) + len(e.extra) for e in entries)
    if size - held > ARCHIVE_SLACK * (len(entries) + 1):
        raise InputFileError(
            f"{file}: {size - held:,} of its {size:,} bytes lie outside the archive's entries "
            "(corrupted or replaced)"
        )
    handle.seek(0)


def _listed_entries(handle: BinaryIO) -> tuple[int, int] | None:
    """The entry count and directory size of a zip archive's end record, as zipfile reads
    it (`zipfile._EndRecData`: its zip64 record wherever a locator precedes the end record,
    the last 22 bytes first); None where there is none (zipfile then refuses the file). A
    reading of its own let past what zipfile then walked: a zip64 record without the end
    record's markers, a locator pointing elsewhere, an end record holding its own signature
    (the fifty-seventh round)."""
    try:
        found = zipfile._EndRecData(handle)  # type: ignore[attr-defined]
    except OSError:
        return None
    if not found:
        return None
    return found[zipfile._ECD_ENTRIES_TOTAL], found[zipfile._ECD_SIZE]  # type: ignore[attr-defined]


# More entries than any checkpoint file holds: one per tensor's storage (and AdamW's two
# moments and step a parameter), a few more for torch's own records.
MAX_ARCHIVE_ENTRIES = 1_000_000
# And more directory than they take: an entry's line is 46 bytes and its name (torch's are
# tens of characters; a model of 100,000 tensors with AdamW's state takes some 30 MB). No
# more than MAX_ARCHIVE_ENTRIES lines of the least size, so the count holds whatever the end
# record says: 64 MiB let a forged count walk 1.43 M entries (the fifty-eighth round).
MAX_DIRECTORY_BYTES = 46 * MAX_ARCHIVE_ENTRIES

# Bytes of a torch.save archive outside its entries' headers and data, per entry (its line
# in the directory, alignment: about 80 to 140 measured) and once (the directory's end).
ARCHIVE_SLACK = 1024


def check_manifest_folder(path: Path, manifest: CheckpointManifest) -> None:
    """The manifest describes this folder: its step is the one the folder is named after (a
    copy of step-3 put in place of step-4 resumed epoch 2 again), and its files map names
    exactly the files a checkpoint has (extra entries such as "/dev/zero" or
    "../../run.json" were never checked)."""
    match = STEP_DIR.fullmatch(path.name)
    if match is None or int(match[1]) != manifest.step:
        raise InputFileError(
            f"{path / 'manifest.json'}: step {manifest.step} is not a position of {path.name} "
            "(a checkpoint moved or copied over another)"
        )
    # An extra entry is named as one, a missing one as missing: both said "names".
    for field, named in (("files", manifest.files), ("sizes", manifest.sizes)):
        if named is None:  # sizes, in a manifest written before them
            continue
        extra = sorted(set(named) - set(FILES))
        lacking = sorted(set(FILES) - set(named))
        if extra or lacking:
            what = f"names {extra[0]!r}" if extra else f"lacks {lacking[0]!r}"
            raise InputFileError(
                f"{path / 'manifest.json'}: {field} {what}; a checkpoint's files are exactly "
                f"{', '.join(FILES)}"
            )


def _check_structure(path: Path, model: object, optimizer: object, rng: object) -> None:
    """What `save` writes: name → tensor (model.pt, rng.pt), name → {state: tensor}
    (optimizer.pt). A file that matches its checksum but holds anything else (a hand-made one,
    its checksum recomputed) is refused here, not inside a rank."""

    def tensors(value: object) -> bool:
        return isinstance(value, dict) and all(
            isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in value.items()
        )

    for name, ok in (
        ("model.pt", tensors(model)),
        ("rng.pt", tensors(rng)),
        (
            "optimizer.pt",
            isinstance(optimizer, dict)
            and all(isinstance(k, str) and tensors(v) for k, v in optimizer.items()),
        ),
    ):
        if not ok:
            raise InputFileError(f"{path / name}: not the tensors a checkpoint holds")


def _dtype(tensor: torch.Tensor) -> str:
    """`_dtype(torch.zeros(1))` -> "float32": a tensor's dtype as a message names it."""
    return str(tensor.dtype).removeprefix("torch.")


def _check_optimizer(
    file: Path, step: int, model: dict[str, torch.Tensor], optimizer: dict[str, OptimizerState]
) -> None:
    """optimizer.pt (`file`) holds what AdamW keeps for parameters of model.pt: for each, its
    `step` (a count of the updates it took, so a whole number in 0..`step`, the manifest's
    global step) and its moments `exp_avg` and `exp_avg_sq` (its parameter's shape and dtype,
    finite; the second a mean of squares, never negative: AdamW takes its square root).
    The state records no learning rate or other hyper-parameter: run.json gives them.
    InputFileError naming the file and the entry:

        _check_optimizer(path / "optimizer.pt", manifest.step, model, optimizer)
    """
    for name, state in optimizer.items():
        if name not in model:
            raise InputFileError(f"{file}: {name}: no such parameter in model.pt")
        if sorted(state) != sorted(ADAMW_STATE_KEYS):
            raise InputFileError(
                f"{file}: {name}: holds {', '.join(sorted(state)) or 'nothing'}; AdamW's state "
                f"is {', '.join(ADAMW_STATE_KEYS)}"
            )
        for key in ("exp_avg", "exp_avg_sq"):
            _check_moment(f"{file}: {name}.{key}", state[key], model[name], name)
        _check_step(f"{file}: {name}.step", state["step"], step)


def _check_moment(where: str, moment: torch.Tensor, param: torch.Tensor, name: str) -> None:
    """One AdamW moment (`where` names it) of model.pt's parameter `name`, as the optimizer
    keeps it: `_check_moment("…/optimizer.pt: 0.w.exp_avg", moment, model["0.w"], "0.w")`."""
    if tuple(moment.shape) != tuple(param.shape) or moment.dtype != param.dtype:
        # Either file may be the edited one: both are named.
        raise InputFileError(
            f"{where}: {_dtype(moment)} of shape {list(moment.shape)}, but model.pt's {name} "
            f"is {_dtype(param)} of shape {list(param.shape)}"
        )
    if not torch.isfinite(moment).all():
        raise InputFileError(f"{where}: holds NaN or infinite values")
    if where.endswith(".exp_avg_sq") and (moment < 0).any():
        raise InputFileError(f"{where}: holds negative values (a mean of squares is not)")


def _check_step(where: str, value: torch.Tensor, step: int) -> None:
    """AdamW's update count of one parameter: a float scalar as AdamW keeps it, a whole
    number, at most the checkpoint's global step (one update a step, none while frozen)."""
    if value.shape != () or not value.is_floating_point():
        raise InputFileError(
            f"{where}: {_dtype(value)} of shape {list(value.shape)}, not a float scalar (AdamW's "
            "count of updates)"
        )
    count = value.item()
    if not math.isfinite(count) or count != int(count) or not 0 <= count <= step:
        raise InputFileError(
            f"{where}: {count!r} is not a count of updates: a whole number in 0..{step} (the "
            "checkpoint's step)"
        )


# The CUDA generator's state (torch.cuda.get_rng_state): its seed and offset, 8 bytes each.
CUDA_RNG_BYTES = 16


def _check_rng(file: Path, world_size: int, rng: dict[str, torch.Tensor]) -> None:
    """rng.pt (`file`) holds what `rng_states` gave on each of the `world_size` ranks: "R",
    the CPU generator's state, and maybe "R.cuda", the GPU's. A state of another size or type
    failed inside the rank at set_rng_state; the CPU one is tried on a spare generator, which
    checks its content as the rank would. InputFileError naming the file and the entry."""
    ranks = [str(r) for r in range(world_size)]
    allowed = {*ranks, *(f"{r}.cuda" for r in ranks)}
    extra = sorted(set(rng) - allowed)
    missing = [r for r in ranks if r not in rng]
    if extra or missing:
        what = f"names {extra[0]!r}" if extra else f"lacks rank {missing[0]}'s state"
        raise InputFileError(  # either file may be the edited one: both are named
            f"{file}: {what}; it holds a state for each of the checkpoint's ranks, and "
            f"{file.parent / 'manifest.json'} says world_size {world_size}"
        )
    cpu = torch.get_rng_state()
    for key, state in rng.items():
        want = (CUDA_RNG_BYTES,) if key.endswith(".cuda") else tuple(cpu.shape)
        if state.dtype != torch.uint8 or tuple(state.shape) != want:
            raise InputFileError(
                f"{file}: {key}: {_dtype(state)} of shape {list(state.shape)}, not a random "
                f"state (uint8 of shape {list(want)})"
            )
        if not key.endswith(".cuda"):
            try:
                torch.Generator().set_state(state)
            except RuntimeError as exc:
                raise InputFileError(
                    f"{file}: {key}: not a random state ({str(exc).splitlines()[0]})"
                ) from None


def check_weights(model: dict[str, torch.Tensor], layers: nn.ModuleList, where: Path) -> None:
    """Every parameter of `layers` is in the checkpoint with its shape and dtype (another
    model's checkpoint, or a tensor of the wrong shape, is one line before any rank starts)."""
    for p, name in _names(layers).items():
        if name not in model:
            raise InputFileError(f"{where}: checkpoint lacks parameter {name} (another model?)")
        if tuple(model[name].shape) != tuple(p.shape):
            raise InputFileError(
                f"{where}: parameter {name} has shape {list(model[name].shape)} in the "
                f"checkpoint, {list(p.shape)} in the model"
            )
        if model[name].dtype != p.dtype:
            # copy_ would cast the values into the parameter's dtype, silently: an integer
            # tensor's, or a float64 one the run never wrote (twenty-second round).
            raise InputFileError(
                f"{where}: parameter {name} is {_dtype(model[name])} in the checkpoint, "
                f"{_dtype(p)} in the model"
            )


def check_trained_with(manifest: CheckpointManifest, cfg: RunConfig, run_json: Path) -> None:
    """The configuration a command reads a run under (`cfg`: run.json, with the flags --resume
    gives) is the one the checkpoint was trained under, but for RESUMABLE fields, and epochs
    only grow. A run.json edited since (lr, seed, the freeze list, precision…) resumed the
    state under another meaning, exported it into another model, or calibrated its fp32 times
    as bf16: resume, export and calibrate/report (`check_latest_trained_with`) all call this.
    Every other checkpoint kept beside it is held to the same fields (`check_same_training`).
    InputFileError naming the field: `check_trained_with(manifest, cfg, run_dir /
    "run.json")`. Every manifest carries it (`CheckpointManifest.config` is required)."""
    trained = manifest.config
    step = f"step-{manifest.step}"
    if cfg.epochs < trained.epochs:
        raise InputFileError(
            f"{run_json}: epochs is {cfg.epochs} but checkpoint {step} was trained with "
            f"{trained.epochs}; --resume adds epochs, never removes them"
        )
    check_same_training(manifest, cfg, run_json)


# One source of a run's training configuration: (its name in a message, its file, the field's
# name there, the configuration).
_Source = tuple[str, Path, str, RunConfig]


def check_same_training(manifest: CheckpointManifest, cfg: RunConfig, run_json: Path) -> None:
    """run.json (`cfg`), `manifest` and every other checkpoint kept beside it agree on each
    field a resume cannot change (all but RESUMABLE): an edit to one of them alone (the latest
    manifest's lr, or run.json's and the latest manifest's together) trained on under a
    configuration the run's own records contradict (the twentieth round).
    InputFileError naming the file that disagrees: `check_same_training(manifest, cfg,
    run_dir / "run.json")`."""
    run_dir = run_json.parent
    sources: list[_Source] = [("run.json", run_json, "", cfg)]
    sources.append(_manifest_source(manifest_path(run_dir, manifest), manifest))
    for path in checkpoints_written(run_dir / "checkpoints"):
        other = kept_manifest(path)
        if other is not None and other.step != manifest.step:
            sources.append(_manifest_source(path / "manifest.json", other))
    for field in RunConfig.model_fields:
        if field not in RESUMABLE:
            _check_field_agrees(field, sources)


def _manifest_source(path: Path, manifest: CheckpointManifest) -> _Source:
    """A checkpoint as a `_Source`: its config is the configuration it was trained under."""
    return (f"checkpoint step-{manifest.step}", path, "config.", manifest.config)


def kept_manifest(path: Path) -> CheckpointManifest | None:
    """The manifest of a kept checkpoint `path`, or None when it does not read: a corrupt
    older checkpoint is `load_latest`'s to report (or pass over), not a disagreement."""
    try:
        return read_manifest(path)
    except (InputFileError, OSError):
        return None


def _check_field_agrees(field: str, sources: list[_Source]) -> None:
    """InputFileError when `sources` (run.json first) hold more than one value of `field`.
    The file every other source agrees against (two at least) is named first: the likely
    edit, though which side was edited cannot be told for sure (run.json and the latest
    manifest edited together outvote an older checkpoint). Otherwise run.json and the first
    checkpoint that differs from it are named side by side, neither taken for the truth."""
    values = [json.dumps(getattr(config, field)) for _, _, _, config in sources]
    if len(set(values)) == 1:
        return
    why = "a run is resumed, exported and measured as it was trained"
    for i, (_, path, prefix, _) in enumerate(sources):
        rest = values[:i] + values[i + 1 :]
        if len(rest) >= 2 and len(set(rest)) == 1 and rest[0] != values[i]:
            others = [name for j, (name, *_) in enumerate(sources) if j != i]
            raise InputFileError(
                f"{path}: {prefix}{field} is {values[i]}, but {_and_list(others)} say "
                f"{rest[0]}; one side was edited since the run trained, and {why}"
            )
    i = next(i for i, v in enumerate(values) if v != values[0])
    _, path, prefix, _ = sources[i]
    raise InputFileError(
        f"{sources[0][1]}: {field} is {values[0]}, but {path} has {prefix}{field} "
        f"{values[i]}; one of the two was edited since the run trained, and {why}"
    )


def _and_list(names: list[str]) -> str:
    """`_and_list(["run.json", "checkpoint step-4"])` -> "run.json and checkpoint step-4"."""
    return ", ".join(names[:-1]) + " and " + names[-1]


def check_kept_trained_with(run_dir: Path, cfg: RunConfig) -> None:
    """`check_trained_with` against the newest kept checkpoint whose manifest reads (no tensor
    read; a corrupt one is `load_latest`'s to pass over with its notice), before anything acts
    on run.json: a resume imported and called the `module:function` an edited run.json named
    as its data, and judged other edits as flags nobody typed, before comparing run.json with
    the checkpoints, as export and report do first (twenty-second round).

        check_kept_trained_with(Path("runs/exp1"), load(RunConfig, "runs/exp1/run.json"))
    """
    check_checkpoints_folder(run_dir)
    for path in reversed(checkpoints_written(run_dir / "checkpoints")):
        manifest = kept_manifest(path)
        if manifest is not None:
            check_trained_with(manifest, cfg, run_dir / "run.json")
            return


def check_latest_trained_with(run_dir: Path, cfg: RunConfig) -> CheckpointManifest | None:
    """`check_trained_with` against the run's latest checkpoint, when it has one: its manifest
    only, no tensor read: calibrate and report take run.json's precision, batch… as what the
    run trained under. A newest one whose manifest does not read (missing, emptied, edited) is
    passed over for the older, with a notice, as resume and export pass it over
    (`load_latest`). Returns the manifest (None without a checkpoint).
    `check_latest_trained_with(run_dir, load(RunConfig, run_dir / "run.json"))`."""
    pointer = run_dir / "checkpoints" / "latest"
    if not (pointer.exists() or pointer.is_symlink() or checkpoints_written(pointer.parent)):
        return None  # a run stopped before its first checkpoint: nothing to check against
    # A pointer deleted beside its checkpoints is `latest`'s refusal here too: passed over,
    # report and calibrate read run.json unchecked where export and resume refused the run
    # (the fifty-second round).
    _, manifest = _first_usable(run_dir, "report", folder_manifest, True)
    check_trained_with(manifest, cfg, run_dir / "run.json")
    return manifest


def folder_manifest(path: Path) -> CheckpointManifest:
    """The manifest of the checkpoint folder `path`, its step the folder's, and its files
    there, of the sizes it records: what report and calibrate read of a checkpoint
    (`check_latest_trained_with`), and what `load_checkpoint` checks before it hashes."""
    manifest = read_manifest(path)
    check_manifest_folder(path, manifest)
    # Its files there, as plain files: no tensor is read (forty-ninth round: a newest
    # checkpoint without model.pt was reported on in silence, where export said so).
    for name in FILES:
        file = path / name
        if not file.exists() and not file.is_symlink():
            raise InputFileError(f"{file}: missing (the manifest records its checksum)")
        if not file.is_file() or file.is_symlink():
            raise InputFileError(f"{file}: is not a regular file; a checkpoint writes its own")
        expected = (manifest.sizes or {}).get(name)
        if expected is not None and (size := file.stat().st_size) != expected:
            raise InputFileError(
                f"{file}: {size:,} bytes, but the manifest records {expected:,} (corrupted or "
                "replaced)"
            )
    return manifest


def load_latest(run_dir: Path, purpose: str = "resume", notice: bool = True) -> Loaded:
    """The newest checkpoint that verifies; an older one, with a notice (unless `notice` is
    False), when the newest is corrupt. InputFileError when none does (`purpose` as for
    `latest`). A rank loads with `notice=False`: the command that started it (or torchrun's
    entry on its node) checked the same checkpoints and said it once; each rank said it again.

        manifest, model, optimizer, rng = load_latest(run_dir, notice=False)   # in a rank
    """
    return _first_usable(run_dir, purpose, load_checkpoint, notice)[1]


def _first_usable(
    run_dir: Path, purpose: str, read: Callable[[Path], T], notice: bool
) -> tuple[Path, T]:
    """The first checkpoint `read` takes without an InputFileError, and what it gave: the one
    `latest` names, else every other `step-N` folder, newest first, with a notice naming why
    the newest was passed over (unless `notice` is False; `purpose` a key of USING_OLDER).
    Every way a checkpoint fails is one class, unusable, passed over alike: a manifest.json
    missing, a folder emptied or a file in its place, as a corrupt model.pt (the thirty-sixth
    round). InputFileError (`_none_left`) when none is left.

        path, manifest = _first_usable(run_dir, "report", folder_manifest, True)
    """
    newest = latest(run_dir, purpose)
    older = sorted(
        (p for p in (run_dir / "checkpoints").glob("step-*") if p.is_dir() and p != newest),
        key=_step_of,
        reverse=True,
    )
    candidates = [newest, *older]
    errors: dict[Path, InputFileError] = {}
    for path in candidates:
        try:
            value = read(path)
        except InputFileError as exc:
            errors[path] = exc
            continue
        first_error = errors.get(newest)
        if path != newest and notice:
            log.warning("%s; %s %s", first_error, USING_OLDER[purpose], _instead(path, newest))
        elif notice and purpose != "report":  # report never said it: no new line where it reads
            _say_newer(newest, candidates, purpose)
        return path, value
    raise _none_left(run_dir, errors, purpose)


# How many older checkpoints' defects the line names (a run keeps KEEP; more are by hand).
NAMED_OLDER = 3


def _none_left(
    run_dir: Path, errors: dict[Path, InputFileError], purpose: str = "resume"
) -> InputFileError:
    """The one line when no checkpoint of the run verifies: why the newest does not (the
    first of `errors`), why each older one does not either, those an earlier resume set aside
    (`UNUSABLE`), and what is left to do. Naming the newest alone read as if removing it would
    do, where it was the last: the only checkpoint, or the one left after a fallback resume
    moved the newer aside (the thirty-fifth and thirty-sixth rounds); naming the older ones
    without their defects left the user to find each (the fifty-second round). The remedy is
    `purpose`'s: only a resume is told to delete the run and run it again; an export or a
    report was told so too, which deletes a finished run's model/ and records (the
    sixty-ninth round).

        _none_left(run_dir, {step_4: error})
        # "…/step-4/model.pt: checksum mismatch (…); unusable-step-6 was set aside before (it
        #  did not verify); no checkpoint of this run is left to continue from: delete …"
    """
    newest, *older = errors
    said = [str(errors[newest])]
    for path in older[:NAMED_OLDER]:
        # Said within its folder's name: the run's path once, in the newest's defect.
        why = str(errors[path]).replace(f"{path}/", "").replace(f"{path}: ", "")
        said.append(f"the older {path.name} cannot be used either ({why})")
    if rest := older[NAMED_OLDER:]:
        said.append(f"nor can {', '.join(p.name for p in rest)}")
    aside = sorted(
        (p.name for p in (run_dir / "checkpoints").glob(UNUSABLE + "step-*")),
        key=lambda name: (_step_of(Path(name.removeprefix(UNUSABLE).split(".")[0])), name),
    )
    if aside:
        were = "was" if len(aside) == 1 else "were"
        it = "it" if len(aside) == 1 else "they"
        said.append(f"{', '.join(aside)} {were} set aside before ({it} did not verify)")
    said.append(_nothing_left(purpose, run_dir))
    return InputFileError("; ".join(said))


def _nothing_left(purpose: str, run_dir: Path) -> str:
    """The end of `_none_left`'s line for `purpose` (USING_OLDER's keys): what is left to do."""
    if purpose == "export":
        model = run_dir / "model"
        kept = f": {model}, which the run wrote as it ended, holds its final weights"
        return "no checkpoint of this run is left to export" + (kept if model.is_dir() else "")
    if purpose == "report":
        return "no checkpoint of this run is left to check its records against"
    return (
        "no checkpoint of this run is left to continue from: delete "
        f"{shlex.quote(str(run_dir))} to run it again"
    )


# What a resume that fell back names the checkpoints it passed over, moved aside in
# checkpoints/: `unusable-step-N` (then `.2`, `.3`… if taken). Not `step-*`: no command lists,
# reads, prunes or writes through it (`checkpoints_written`, `load_latest`, RUN_WRITES_FOLDERS).
UNUSABLE = "unusable-"


def set_aside_passed_over(run_dir: Path, used: CheckpointManifest) -> str | None:
    """Rank 0 of a resume that loaded `used`'s checkpoint, once every rank has loaded: where
    `latest` names another one, `load_latest` passed over it (and over every folder newer
    than `used`) as unusable. `latest` is pointed at the one the run continues from and
    those are moved aside as `unusable-step-N`, never deleted; returns the notice that says
    where they went (None: no fallback). Left in place, `latest` still named the corrupt
    one: a failure line called the run finished, export fell back again with its notice,
    and report held the resumed records to the corrupt checkpoint's manifest ("the run's
    history is lost") (the thirty-fifth round). OutputError if a move fails: `latest`
    names `used` already, so every command reads the run as the resume does.

        set_aside_passed_over(Path("runs/k"), manifest)
        # "runs/k/checkpoints: step-6, which did not verify, is moved to unusable-step-6 …"
    """
    root = run_dir / "checkpoints"
    name = f"step-{used.step}"
    passed = passed_over(run_dir, used)
    if not passed:
        return None
    # The pointer first: stopped between the two, the run reads as resumed, the passed-over
    # folders still beside it ("newer, not checked"), never a pointer to a moved folder.
    write_atomic(root / "latest", name + "\n")
    moved = []
    for path in passed:
        target = _free_name(root, UNUSABLE + path.name)
        try:
            os.rename(path, target)  # a link is renamed, not followed
        except OSError as exc:
            raise OutputError(
                f"{path}: cannot move it aside to {target.name} ({exc.strerror}); "
                f"{root / 'latest'} names {name}, the checkpoint the run continues from"
            ) from None
        moved.append((path.name, target.name))
    were = ", ".join(a for a, _ in moved)
    now = ", ".join(b for _, b in moved)
    return (
        f"{root}: {were}, which did not verify, {'is' if len(moved) == 1 else 'are'} moved to "
        f"{now} (kept, never read by pipeplan); latest names {name}, which the run continues "
        "from"
    )


def passed_over(run_dir: Path, used: CheckpointManifest) -> list[Path]:
    """What a resume from `used`'s checkpoint moves aside (`set_aside_passed_over`), oldest
    first: none where `latest` names it; else the entry `latest` names and every `step-N`
    newer than `used`, folders or not. A `step-N` file, or a folder emptied, is as unusable
    as a corrupt folder, and one newer than `used` is where the resumed run writes (the
    thirty-sixth round). None is a checkpoint being written: `_write` fills `.tmp-step-N/`
    and renames it whole, and a live run's lock keeps every other command out.

        passed_over(Path("runs/k"), manifest)   # [Path("runs/k/checkpoints/step-6")]
    """
    named = latest(run_dir).name
    if named == f"step-{used.step}":
        return []
    return sorted(
        (
            p
            for p in (run_dir / "checkpoints").glob("step-*")
            if p.name == named or _step_of(p) > used.step
        ),
        key=_step_of,
    )


def _free_name(root: Path, name: str) -> Path:
    """`root / name`, or `name.2`, `name.3`… where that is taken: a second fallback's."""
    path, n = root / name, 1
    while os.path.lexists(path):
        n += 1
        path = root / f"{name}.{n}"
    return path


def _instead(path: Path, named: Path) -> str:
    """The checkpoint used instead of the one `latest` names, by what it is: a crash between
    writing step-8 and the pointer leaves `latest` naming step-6, and a notice called step-8
    "the older" (twenty-third round).

        _instead(Path("c/step-8"), Path("c/step-6"))   # "the newer step-8 (latest names step-6)"
    """
    if _step_of(path) > _step_of(named):
        return f"the newer {path.name} ({named.parent.name}/latest names {named.name})"
    return f"the older {path.name}"


def _say_newer(named: Path, folders: list[Path], purpose: str) -> None:
    """A notice when a checkpoint folder newer than the one `latest` names is there (a crash
    between writing it and the pointer): the command uses what `latest` names, and says so.
    The newer one is not read (it may be incomplete or corrupt).

        _say_newer(Path("r/checkpoints/step-6"), [.../step-8, ...], "export")
    """
    newer = max(folders, key=_step_of)
    if _step_of(newer) > _step_of(named):
        log.warning(
            "%s: names %s, but %s beside it is newer (not checked); %s %s, as it names",
            named.parent / "latest",
            named.name,
            newer.name,
            USING_OLDER[purpose],
            named.name,
        )


def _step_of(path: Path) -> int:
    """`_step_of(Path("c/step-8"))` → 8; -1 for a folder not named as `save` names one."""
    digits = path.name[5:]
    return int(digits) if digits.isdecimal() and len(digits) < 20 else -1


def restore(
    layers: nn.ModuleList, model: dict[str, torch.Tensor], optimizer: dict[str, OptimizerState]
) -> dict[nn.Parameter, OptimizerState]:
    """Load every layer's parameters; return the optimizer state by parameter."""
    names = _names(layers)
    check_weights(model, layers, Path("checkpoint"))
    with torch.no_grad():
        for p, name in names.items():
            p.copy_(model[name])
    return {p: optimizer[name] for p, name in names.items() if name in optimizer}


def read_manifest(folder: Path) -> CheckpointManifest:
    """The manifest of the checkpoint `folder`, a file of its own: one that is a link (to a
    copy, or to another run's) was read and exported through (twenty-sixth round), where a
    linked model.pt had the checkpoint passed over. InputFileError naming it.

        manifest = read_manifest(Path("runs/exp1/checkpoints/step-8"))
    """
    path = folder / "manifest.json"
    if path.is_symlink():
        raise InputFileError(f"{path}: is a symbolic link; a checkpoint writes its own manifest")
    # A checkpoint folder emptied, or a file in its place, said "No such file" or "Not a
    # directory" of a manifest.json in it; `save` never leaves a `step-N` without one.
    if not folder.is_dir():
        raise InputFileError(f"{folder}: not a folder; a checkpoint is a folder of {_FOLDER}")
    if not os.path.lexists(path):
        raise InputFileError(f"{folder}: checkpoint is incomplete (no manifest.json)")
    manifest = load(CheckpointManifest, path)
    if len(_READ_FROM) >= 4096:  # a command reads a few dozen: bounded all the same
        _READ_FROM.clear()
    _READ_FROM[id(manifest)] = (manifest, path)
    return manifest


# Where each manifest read was read from (`read_manifest`), by id() while it lives: a copy of
# another checkpoint in a step folder (its own step in its manifest) was named by that step,
# a path that does not exist (forty-ninth round: "step-8/manifest.json" read from step-6/).
_READ_FROM: dict[int, tuple[CheckpointManifest, Path]] = {}


_FOLDER = f"manifest.json, {', '.join(FILES[:-1])} and {FILES[-1]}"  # a checkpoint's files, said


def manifest_path(run_dir: Path, manifest: CheckpointManifest) -> Path:
    """The manifest's file: where it was read from (`read_manifest`), else the folder named
    after its step (`load_checkpoint` checks the two agree)."""
    read = _READ_FROM.get(id(manifest))
    if read is not None and read[0] is manifest:
        return read[1]
    return run_dir / "checkpoints" / f"step-{manifest.step}" / "manifest.json"


def _unmeasured(norms: dict[str, float], frozen_layers: int, layers: nn.ModuleList) -> int | None:
    """The first layer with parameters that a `grad_history` entry lacks though it was active
    when the entry was measured, or None. Freezing only grows, so the entry measured every
    layer from its first (or from the checkpoint's `frozen_layers`, if lower: those are active
    still) to the head; a layer without parameters has no gradient and no norm. An entry with
    a hole was carried into every later checkpoint, and the gradient criterion compared rates
    of change over other layers than the run measured. An empty entry measured no step.

        _unmeasured({"0": 1.2, "2": 0.9}, 0, layers)   # → 1
    """
    if not norms:
        return None
    first = min([frozen_layers, *map(int, norms)])
    for index in range(first, len(layers)):
        if str(index) not in norms and any(True for _ in layers[index].parameters()):
            return index
    return None


def check_sums_measured(
    manifest: CheckpointManifest, with_params: list[bool], refuse: Callable[[str, str], None]
) -> None:
    """With steps summed, grad_norm_sums holds exactly the active layers that have parameters
    (from frozen_layers to the head): a sum left out was resumed as zero and the epoch's
    mean gradient norms differed from the uninterrupted run's (twenty-third round).
    `with_params`: per layer of the model, whether it has parameters: the model's own
    (`has_parameters`, export and resume) or its profile's params (report and calibrate,
    which build no model: `executor.history.check_manifest_records`), so that every command
    holds every kept manifest to the one rule (the sixty-first round).

        check_sums_measured(manifest, has_parameters(seq.layers), refuse)   # refuse raises
    """
    if not manifest.grad_norm_steps:
        return  # none summed: the manifest's own validator holds the sums empty
    active = range(manifest.frozen_layers, len(with_params))
    measured = {str(i) for i in active if with_params[i]}
    missing = next((i for i in active if str(i) in measured - set(manifest.grad_norm_sums)), None)
    if missing is not None:
        refuse(
            "grad_norm_sums",
            f"layer {missing} is missing, but grad_norm_steps is {manifest.grad_norm_steps}: "
            f"every active layer with parameters (of {manifest.frozen_layers}.."
            f"{len(with_params) - 1}) has a sum",
        )
    extra = next((k for k in manifest.grad_norm_sums if k not in measured), None)
    if extra is not None:
        refuse("grad_norm_sums", f"layer {extra}, but it has no parameters and no gradient norm")


def has_parameters(layers: nn.ModuleList) -> list[bool]:
    """`has_parameters(seq.layers)` → [True, …]: per layer, whether it has parameters."""
    return [any(True for _ in layer.parameters()) for layer in layers]


def check_manifest_layers(manifest: CheckpointManifest, num_layers: int, where: Path) -> None:
    """The layers the manifest (`where`) names are a model of `num_layers` layers', as the run
    measured them: frozen_layers leaves the head, every gradient norm is of a layer the model
    has, and no sum is of a frozen layer. What `check_position` holds without the model: report
    and calibrate take `num_layers` from the layout run.jsonl recorded the checkpoint's phase
    in (`executor.history.check_manifest_records`), for every kept checkpoint.

        check_manifest_layers(manifest, 10, where)   # "…: grad_norm_sums: layer 99, but …"
    """

    def refuse(field: str, why: str) -> None:
        raise InputFileError(f"{where}: {field}: {why}")

    if manifest.frozen_layers > num_layers - 1:
        refuse(
            "frozen_layers",
            f"{manifest.frozen_layers} of the model's {num_layers} layers (the head is never "
            "frozen)",
        )
    for field, norms in (
        *((f"grad_history.{i}", h) for i, h in enumerate(manifest.grad_history)),
        ("grad_norm_sums", manifest.grad_norm_sums),
    ):
        beyond = next((k for k in norms if int(k) >= num_layers), None)
        if beyond is not None:
            refuse(field, f"layer {beyond}, but the model has layers 0..{num_layers - 1}")
    # Frozen layers collect no gradient norms (only active layers have gradients): a sum for
    # one was a measurement the gradient criterion never made, taken as made. (grad_history's
    # entries were measured before later freezing: their layers may be frozen now.)
    frozen = next((k for k in manifest.grad_norm_sums if int(k) < manifest.frozen_layers), None)
    if frozen is not None:
        refuse(
            "grad_norm_sums",
            f"layer {frozen}, but layers 0..{manifest.frozen_layers - 1} are frozen "
            f"(frozen_layers {manifest.frozen_layers}) and collect no gradient norms",
        )


def check_position(
    manifest: CheckpointManifest,
    cfg: RunConfig,
    samples: int,
    layers: nn.ModuleList,
    where: Path,
) -> None:
    """What the checkpoint's manifest (`where`) says must be what this run and its model can
    have said: its model, a position this run reaches (a hand-edited manifest said step 99 of
    a 2-step epoch), layers the model has, gradient norms for every layer that was active,
    and a layout the executor runs (a tampered one failed inside a rank). InputFileError
    naming the field."""
    num_layers = len(layers)

    def refuse(field: str, why: str) -> None:
        raise InputFileError(f"{where}: {field}: {why}")

    if manifest.model != cfg.model:
        refuse("model", f"'{manifest.model}', but the run trains '{cfg.model}'")
    per_epoch = samples // cfg.global_batch
    if cfg.max_steps_per_epoch is not None:
        per_epoch = min(per_epoch, cfg.max_steps_per_epoch)
    per_epoch = max(per_epoch, 1)
    if (
        manifest.step_in_epoch >= per_epoch
        or manifest.epoch > cfg.epochs
        or manifest.step != manifest.epoch * per_epoch + manifest.step_in_epoch
        or (manifest.epoch == cfg.epochs and manifest.step_in_epoch > 0)
    ):
        refuse(
            "step",
            f"{manifest.step} (epoch {manifest.epoch}, step {manifest.step_in_epoch}) is not a "
            f"position of this run ({per_epoch} steps an epoch, {cfg.epochs} epochs)",
        )
    check_manifest_layers(manifest, num_layers, where)
    for i, entry in enumerate(manifest.grad_history):
        missing = _unmeasured(entry, manifest.frozen_layers, layers)
        if missing is not None:
            first = min([manifest.frozen_layers, *map(int, entry)])
            refuse(
                f"grad_history.{i}",
                f"layer {missing} is missing; every active layer ({first}..{num_layers - 1}) "
                "has a norm",
            )
    check_sums_measured(manifest, has_parameters(layers), refuse)
    if manifest.layout is not None and manifest.world_size == cfg.nproc:
        try:
            manifest.layout.check(num_layers, cfg.nproc)
            if manifest.layout.global_batch != cfg.global_batch:
                raise BadArgumentError(
                    f"{manifest.layout.label()} takes {manifest.layout.global_batch} samples a "
                    f"step, the run {cfg.global_batch}"
                )
        except BadArgumentError as exc:
            refuse("layout", str(exc))
