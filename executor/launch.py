"""Start a run: the checks, `runs/NAME/`, and its ranks through torch's elastic launcher.

One worker entry serves both ways of starting ranks, and it is the same command line:

    pipeplan run --nproc 2 …                                # this host, through elastic_launch
    torchrun … -m executor.launch runs/NAME [--resume]      # each node of a multi-node job

`pipeplan run` checks everything it can before any process starts (model, data, plan against
the world size), creates `runs/NAME/` with `run.json`, and then has
`torch.distributed.launcher.api.elastic_launch` start `python -m executor.launch RUN_DIR` once
per rank (through a shell that ignores Ctrl-C until the rank takes it over, RANK_SHELL),
exactly what torchrun starts on each node. Either way rank, world size, LOCAL_RANK
and the rendezvous come from the launcher's environment, and the process group is created with
`init_method="env://"` (or, started without an agent, on the store rank 0 hosts as env:// would)
once every rank has started (`worker.meet_every_rank`: a wait that takes Ctrl-C and SIGTERM).
Rank 0 writes `summary.json` at the end.

Faults: torch's agent watches the ranks and stops them all as soon as one fails. Each failing
rank writes its own report first (`executor.faults`), so the launcher names the rank that failed
first, not the first to notice. Under `pipeplan run` each rank sends its output to
`RUN/logs/rank-R.log` and keeps the console for pipeplan's own lines (warnings, rank 0's
progress bar), and the agent logs to `RUN/logs/launcher.log`: a failure prints one line.
This module sits on top, with the CLI: it ties the executor to the analysis layer (the summary,
online recalibration).
"""

from __future__ import annotations

# ruff: noqa: E402 (a rank takes SIGINT over before the imports that take seconds)
import os
import sys


def working_directory_off_path() -> None:
    """A rank's first statement: the directory it was started in off sys.path, where `python
    -m executor.launch` puts it first (torchrun's entry; `pipeplan run`'s ranks on Python
    3.10: on 3.11+ it starts them with `-P`, SAFE_PATH). A user file there named like a
    module of the standard library (token.py, queue.py, random.py) was imported inside
    `import torch`: every rank died with a traceback (twenty-eighth round). The executor's
    own folder stays on the path (a checkout run from its folder); the data module is
    imported as the launcher imports it (`data._data_directory_on_path`). Standard library
    only: nothing is imported before it.

        working_directory_off_path()   # ["/home/me", …] → […, "/opt/pipeplan"]
    """
    if getattr(sys.flags, "safe_path", False) or not sys.path:
        return  # `python -P`: the directory was never added
    try:
        here = os.getcwd()
    except OSError:  # the directory is gone: nothing of the user's can be found there
        here = None
    if sys.path[0] not in ("", here):
        return
    del sys.path[0]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if root not in sys.path:
        sys.path.append(root)


# A rank's imports (torch, its pipelining, transformers' models: some 5 s of CPU, ~1M objects
# that live as long as the rank) with the cyclic collector off, then frozen out of its later
# passes (`main`): its passes over them as they were made cost ~10 % of the rank's start, and
# every full pass of the training traversed them again (0.68 s of a rank's ~7 s of CPU in a
# 6-step run, 2026-12-06). Only where this module is the process's entry, never in a process
# that imports it (a launcher, a test).
_IMPORTS_UNCOLLECTED = False
if __name__ == "__main__":
    working_directory_off_path()
    import gc

    gc.disable()
    _IMPORTS_UNCOLLECTED = True

import signal

from executor import errorfile  # light: a rank reserves its report's room before the imports
from executor.leftovers import lineage_in  # light too, as is what marks the rank's lineage
from pipeplan.exits import mark_lineage, rank_lineage

# The process's own exit (light too): while the data's code runs, `os._exit` raises SystemExit
# (`exits.exits_raised`), and a stop handler's exit in a resume's checks was told as the
# data's ("len() of the train set exited (code 143)": the seventy-eighth round).
from pipeplan.startup import EXIT, away_from_working_directory

# The file `pipeplan run`'s launcher creates on Ctrl-C before it forwards SIGINT to the ranks
# (`agent_scope`), named in the ranks' environment.
INTERRUPTED = "PIPEPLAN_INTERRUPTED"
LAUNCHER_PID = "PIPEPLAN_LAUNCHER_PID"  # set for the ranks `pipeplan run` starts
RUN_MARK = "PIPEPLAN_RUN_MARK"  # the run's mark, which its ranks' shell sets (RANK_SHELL)
# The identity ("st_dev:st_ino") of the run directory `pipeplan run`'s launcher claimed, set for
# its ranks (`replaced_as_it_started`).
RUN_DIR_ID = "PIPEPLAN_RUN_DIR_ID"


def directory_id(path: str) -> str:
    """`directory_id("runs/k")` → "2049:1835", what RUN_DIR_ID holds."""
    st = os.stat(path)
    return f"{st.st_dev}:{st.st_ino}"


def replaced_as_it_started() -> bool:
    """Whether the run directory this rank of `pipeplan run` names (its first argument) is no
    longer the one its launcher claimed: moved away, and another folder (another run's) put
    at its path while the ranks started, which took the path's for theirs and trained that
    run again inside it, appending a second history to its records (the thirtieth round).
    Checked before the rank writes anything (its report's room, its log). Light: no torch."""
    claimed = os.environ.get(RUN_DIR_ID)
    # Under torchrun (no LAUNCHER_PID) a RUN_DIR_ID left in the environment by hand is not
    # ours to believe: every rank exited 1 in silence (the thirty-first round's notes).
    if not claimed or not os.environ.get(LAUNCHER_PID) or len(sys.argv) < 2:
        return False
    try:
        return directory_id(sys.argv[1]) != claimed
    except OSError:  # gone: nothing there to write into either
        return True


def die_with_launcher() -> None:
    """Linux: the kernel kills this rank when the process that started it (torchrun's agent,
    or `pipeplan run`) dies, however it dies, by SIGKILL, which a stopped rank gets too
    (`die_with_parent`). torch starts each rank in a session of its own, so nothing else would
    stop an orphaned rank from training on. Light (no torch): called before a rank imports."""
    from pipeplan.startup import die_with_parent

    # The launcher may have died before that (a rank takes seconds to import torch): then this
    # rank's parent is no longer it (`pipeplan run` says who it is; torchrun does not).
    named = os.environ.get(LAUNCHER_PID, "")
    launcher = int(named) if named.isdigit() else os.getppid()
    if not die_with_parent(launcher) or os.getppid() == 1:
        if named and os.getppid() != 1:  # set by hand: a rank of torchrun, not of that process
            sys.stderr.write(
                f"pipeplan: error: {named_rank()}{LAUNCHER_PID}={named!r} is set, but this "
                "rank was not started by that process: it is `pipeplan run`'s own variable; "
                "unset it\n"
            )
            os._exit(2)  # bad input, as every refusal of the environment (fifty-third round)
        os._exit(1)  # faults.EXIT_FAILED (not imported yet)


def named_rank() -> str:
    """ "rank 1: " from torchrun's RANK, for a line said before the rank parsed its
    environment ("" where RANK is not a rank number). Light: no torch."""
    rank = os.environ.get("RANK", "")
    return f"rank {int(rank)}: " if rank.isascii() and rank.isdigit() and len(rank) < 10 else ""


def openmp_checked() -> None:
    """torchrun's rank, before torch loads: an OpenMP variable libgomp refuses is this rank's
    one line and exit 2, as the `pipeplan` command says it (`check_openmp_environment`).
    Unchecked, `OMP_NUM_THREADS=0` printed libgomp's two lines and trained, and
    `GOMP_CPU_AFFINITY=abc` spun every rank at 100 % CPU, deaf to SIGTERM, without bound
    (the fifty-third round). So is a log level torch or transformers cannot read
    (`log.check_library_log_levels`: the seventy-fourth round). Light: no torch."""
    from pipeplan.errors import PipeplanError
    from pipeplan.log import check_library_log_levels
    from pipeplan.openmp import check_openmp_environment

    try:
        check_openmp_environment()
        check_library_log_levels()
    except PipeplanError as exc:
        sys.stderr.write(f"pipeplan: error: {named_rank()}{exc}\n")
        os._exit(2)


def kept_ignored(signum: int) -> bool:
    """Whether this rank leaves `signum` ignored: one ignored as the run started stays so, as
    in the command (`startup.ignored`) and torch's agent (`agent_handles`): SIGINT of a
    background `pipeplan run … &` started from a script, SIGHUP of `nohup torchrun
    --signals-to-handle SIGTERM,SIGINT,SIGQUIT …`. Under `pipeplan run` the rank's shell
    ignores SIGINT whatever the command does (RANK_SHELL): its launcher names no INTERRUPTED
    file where it ignores Ctrl-C itself. Found by the sixty-third round: a rank took SIGINT
    over at its first statement, and a SIGINT sent to a rank of a background `pipeplan run`
    failed the run. Light: no torch.

        kept_ignored(signal.SIGINT)   # a rank of `pipeplan run … &` run from a script → True
    """
    if signal.getsignal(signum) != signal.SIG_IGN:
        return False
    ours = os.environ.get(LAUNCHER_PID) == str(os.getppid())
    return signum != signal.SIGINT or not ours or not os.environ.get(INTERRUPTED)


def ended_if_directory_removed() -> None:
    """A rank whose working directory is gone ends here, as it starts: in its imports torch's
    oneMKL ended it with "Intel oneMKL FATAL ERROR: Cannot load libtorch_cpu.so" and torch's
    _dynamo raised FileNotFoundError, a traceback on the console (the seventy-ninth round).
    Silently under `pipeplan run`, whose launcher, in the same directory, says it (`cli`);
    torchrun's rank says its one line. Light: no torch.

        ended_if_directory_removed()   # `rm -rf` of it meanwhile: exit 1 (2 under torchrun)
    """
    from pipeplan.errors import working_directory_failure

    if (gone := working_directory_failure()) is None:
        return
    if os.environ.get(LAUNCHER_PID) != str(os.getppid()):  # torchrun's (`under_pipeplan_run`)
        sys.stderr.write(f"pipeplan: error: {named_rank()}{gone}\n")
        EXIT(2)  # bad input, as every refusal of the environment
    EXIT(1)  # faults.EXIT_FAILED (not imported yet)


def _stopped_as_it_starts(signum: int, frame: object) -> None:
    """A rank's SIGTERM until it trains: its report (`faults.Report`'s format, written by
    `errorfile` with the standard library alone: the imports are still under way), then exit
    128 + 15. Killed
    silently, it could not be told from the ranks the agent then stopped with SIGTERM, and
    the launcher named rank 0 for a SIGTERM sent to rank 1; the reports' times say which
    came first (`faults.verdict`)."""
    import time

    rank = os.environ.get("RANK", "")
    if rank.isdigit():  # into the room `reserve` kept; the exit code is reported if it fails
        errorfile.write(int(rank), "stopped", time.time(), "stopped by SIGTERM")
    EXIT(128 + signum)


if __name__ == "__main__":
    # A rank, from its first statement (before the imports below, which take seconds): Ctrl-C,
    # which the launcher forwards to every rank as it tears them down, ends it at once and in
    # silence until `main` can report it; a KeyboardInterrupt in those imports printed its
    # traceback on the console. The launcher decides what an interrupt means and says it. One
    # ignored as the run started stays ignored (`kept_ignored`), as SIGTERM below.
    if not kept_ignored(signal.SIGINT):
        signal.signal(signal.SIGINT, lambda signum, frame: EXIT(130))  # EXIT_INTERRUPTED
    # Under `pipeplan run` this process ignored SIGINT until now (RANK_SHELL): one forwarded
    # meanwhile was lost, but the launcher made its file first.
    # The mark is its launcher's alone (`under_pipeplan_run`, inline: defined below): under
    # torchrun the variable set by hand to any file there ended every rank silently (forty-
    # seventh round).
    ours = os.environ.get(LAUNCHER_PID) == str(os.getppid())
    if ours and os.environ.get(INTERRUPTED) and os.path.exists(os.environ[INTERRUPTED]):
        os._exit(130)
    # Before the imports that take seconds too: a rank stopped (SIGSTOP) while it imported
    # outlived a launcher killed meanwhile, stopped for ever (the seventeenth round).
    die_with_launcher()
    if ours and (lineage := lineage_in(os.environ.get(RUN_MARK, ""))) is not None:
        mark_lineage(lineage)  # what this rank's code starts is the run's, wherever it goes
    if replaced_as_it_started():  # not a file written there: its launcher says it moved
        os._exit(1)  # faults.EXIT_FAILED (not imported yet)
    if not ours:  # torchrun's rank: `pipeplan run` made this check before it started ranks
        openmp_checked()
    # `pipeplan run`'s rank: its report's room, kept now (its launcher removes a killed
    # rank's; torchrun would not, and shows a rank's own lines on its console anyway).
    if os.environ.get(LAUNCHER_PID):
        errorfile.reserve()
    if not kept_ignored(signal.SIGTERM):
        signal.signal(signal.SIGTERM, _stopped_as_it_starts)  # until `main` puts the default back
    # Not into torch's oneMKL with the directory gone: it ends the process with its own line.
    ended_if_directory_removed()
    try:  # torch's own imports read its environment (TORCH_LOGS=bogus: a 50-line traceback)
        with away_from_working_directory():  # its oneMKL reads that as libtorch loads
            import torch.distributed
        ended_if_directory_removed()  # removed meanwhile: said before anything else reads it
    except Exception as exc:  # (the seventy-fourth round): one line, as the command's
        ended_if_directory_removed()  # torch._dynamo reads it as it is imported
        from pipeplan.errors import import_failure

        if (failure := import_failure(exc)) is None:
            raise
        sys.stderr.write(f"pipeplan: error: {named_rank()}{failure}\n")
        os._exit(2)  # bad input, as every refusal of the environment

import argparse
import contextlib
import dataclasses
import errno
import hashlib
import json
import logging
import random
import re
import shlex
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TextIO

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing import SignalException
from torch.distributed.elastic.multiprocessing.api import LogsDest, LogsSpecs
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
from torch.distributed.elastic.rendezvous import RendezvousError
from torch.distributed.launcher.api import LaunchConfig, elastic_launch

import executor
from executor import faults, leftovers
from executor.cache import remove_own_caches, remove_run_caches, remove_stale_caches
from executor.checkpoint import (
    PARTIAL_FOLDERS,
    PENDING_CONFIG,
    RESUMABLE,
    check_kept_trained_with,
    check_position,
    check_trained_with,
    check_weights,
    commit_config,
    has_checkpoint,
    latest,
    manifest_path,
    passed_over,
    read_manifest,
    remove_partial,
)
from executor.data import watched_for_hangs
from executor.faults import BEFORE_ANY_UPDATE, DIVERGED
from executor.history import check_manifest_records, check_older_manifests
from executor.planning import (
    RUN_PLAN,
    RUN_PROFILE,
    RunPlanner,
    check_plan_cache,
    check_run_model,
    model_files_sha256,
    shipped_precision,
)
from executor.records import METRICS_FILE, mend_torn_tail, step_record_bytes
from executor.task import (
    DATA_RECORD,
    MODEL_DIR,
    absolute_paths,
    build_task,
    check_data,
    check_data_facts,
    check_data_kept,
    check_helpers_kept,
    check_index_memory,
    data_facts,
    data_record,
    read_data_record,
    read_files,
    read_run_config,
    recorded_paths,
)
from executor.text import is_text_spec
from executor.topology import host_group
from pipeplan import log as pipeplan_log
from pipeplan.calibrate import calibrate
from pipeplan.calls import dropped_stops_redelivered, held_for_life
from pipeplan.cluster import HostRanks, size_text
from pipeplan.costmodel import check_priced_clusters
from pipeplan.errors import (
    BadArgumentError,
    BadEnvironmentError,
    InputFileError,
    Interrupted,
    OutputError,
    PipeplanError,
    Stopped,
    quoted,
    working_directory_failure,
)
from pipeplan.exits import exit_done, exits_raised, processes, reaped, run_exit_callbacks
from pipeplan.fileio import (
    RUN_MARKS,
    DirectoryTaken,
    check_not_shipped,
    check_not_stdout,
    check_outside_runs,
    check_writable,
    claim_directory,
    enclosing_run,
    held_directories,
    missing_folders,
    moved_away,
    new_directories,
    not_a_plain_file,
    not_a_plain_folder,
    open_append,
    release_directory,
    size_limit,
    trains,
    where_now,
    where_now_as_named,
    write_atomic,
    write_failure,
)
from pipeplan.formats import (
    STEP_RECORDS,
    CheckpointManifest,
    DataFacts,
    EpochRecord,
    PhaseRecord,
    Plan,
    Profile,
    RunConfig,
    RunSummary,
    StepRecord,
    dumps,
    load,
    read_records,
)
from pipeplan.formats.base import MAX_DIGITS, flag_of, text_sha256
from pipeplan.formats.metrics import check_eval_metrics
from pipeplan.formats.run import (
    MAX_RANKS,
    check_priced_profiles,
    check_run_name,
)
from pipeplan.freeze import list_schedule
from pipeplan.log import PATH_MAX
from pipeplan.options import build, check_needs_against
from pipeplan.report import make_report, phase_summaries
from pipeplan.runfiles import check_summary
from pipeplan.spawn import (
    RankFailedError,
    address_space_capped,
    check_local_ranks,
    check_open_files,
    remove_left_scratch,
)
from pipeplan.startup import (
    STOP_SIGNALS,
    first_arrived,
    forget_arrivals,
    ignored,
    signal_name,
    stopped_by,
)

if TYPE_CHECKING:  # the rank imports it in `main`
    from executor.worker import StartWait

log = logging.getLogger("pipeplan.run")

# Seconds the agent gives the ranks to exit after Ctrl-C before it kills them.
SHUTDOWN_S = 10
# What starts each rank of `pipeplan run`: a shell that ignores SIGINT, which exec keeps and
# Python then leaves ignored, so that Python's own start (site's imports, about 0.1 s, before
# the rank's first statement) cannot turn Ctrl-C into a traceback either: it did in about half
# the runs interrupted as a rank started. A shell killed by SIGINT says nothing; a SIGINT the
# rank ignored is found by its first statement, in the launcher's INTERRUPTED file.
# torchrun starts `python -m executor.launch` itself, without this.
# It also gives the rank the run's mark (its first argument, RUN_MARK): what the rank's code
# starts inherits it, and is ended with the run (`leftovers`); the launcher's own environment
# does not hold it, so a process another thread of an API caller starts meanwhile is not the
# run's (the eighty-second round).
RANK_SHELL = ("/bin/sh", "-c", f'trap "" INT; {RUN_MARK}=$0; export {RUN_MARK}; exec "$@"')
# Each rank's Python does not put the directory it starts in first on sys.path (3.11+; before
# that its first statement takes it off: `working_directory_off_path`): a user's token.py
# there shadowed the standard library inside `import torch`. The ranks find the executor on
# PYTHONPATH (`agent_scope`) and the data module as the launcher does (`data.module_file`).
SAFE_PATH = ("-P",) if sys.version_info >= (3, 11) else ()
# What torch's launcher changes in this process while it runs, put back afterwards.
AGENT_SIGNALS = (signal.SIGINT, *STOP_SIGNALS)
# What torch's agent handles itself: SIGINT is `agent_scope`'s, which marks it for the ranks.
# Every stop signal (`startup.STOP_SIGNALS`): the agent sends it on to the ranks, waits for
# them (SIGKILL after SHUTDOWN_S) and raises SignalException, said as `stopped by SIGUSR1`.
# One torch left to its default (SIGUSR1, SIGUSR2, SIGALRM) killed this process at once,
# without a line, and its ranks then died of their parent-death signal (the thirty-fourth round).
# Torch takes a signal by its name in Python's signal module, which has none for SIGRTMIN+1 …
# SIGRTMAX-1: those are `agent_scope`'s, handled as torch handles the others (`agent_stop`).
# Those this process ignores (`nohup`'s SIGHUP) are left out: they stay ignored
# (`startup.ignored`, `agent_handles`).
AGENT_HANDLES = tuple(
    name for signum in STOP_SIGNALS if hasattr(signal, name := signal_name(signum))
)
AGENT_UNNAMED = tuple(s for s in STOP_SIGNALS if not hasattr(signal, signal_name(s)))
# The loggers whose lines go to logs/launcher.log while the agent runs: torch's and the
# launcher's own watch over its ranks (`faults.StoppedRanks`).
AGENT_LOGGERS = ("torch.distributed.elastic", "torch.distributed.launcher", "pipeplan.launcher")
AGENT_ENV = ("TORCHELASTIC_SIGNALS_TO_HANDLE", "PYTHONPATH", LAUNCHER_PID, INTERRUPTED, RUN_DIR_ID)


# ----------------------------------------------------------------------------- before any rank


def prepare(cfg: RunConfig, runs_root: str | Path, local: bool = True) -> Path:
    """Checks that need no process group, then the run directory with run.json (its paths
    absolute). `local`: the ranks run on this host (else torchrun starts them, some on other
    nodes)."""
    check_runs_root(runs_root)
    check_free_space(Path(runs_root))  # a new run too, before its folder (forty-eighth round)
    # Warnings (a head replaced, a plan for other epochs) only once the run is prepared: a
    # command refused in one line says nothing before it.
    with pipeplan_log.held():
        planner, facts = check_run(cfg, local)
        check_checkpoint_room(Path(runs_root), planner.profile)
        return _make_run_directory(cfg, runs_root, planner, facts)


def _make_run_directory(
    cfg: RunConfig, runs_root: str | Path, planner: RunPlanner, facts: DataFacts
) -> Path:
    """`prepare` once the checks passed: runs/NAME/ claimed, run.json and the copies, and
    data.json with what the checks saw of the data (`facts`), which each rank's must match.
    Without --name (run-DATE-TIME), a name another run took first, even as this one claimed
    it, gives way to the next free one: two runs started in one second both start."""
    if "name" in cfg.model_fields_set:
        return _make_named_run_directory(cfg, runs_root, planner, facts)
    for tries_left in reversed(range(MAX_NAME_TRIES)):
        named = cfg.model_copy(update={"name": _free_name(runs_root, cfg.name)})
        try:
            return _make_named_run_directory(named, runs_root, planner, facts)
        except DirectoryTaken:  # another run claimed it first (forty-eighth round: 4 of 4)
            if not tries_left:
                raise
    raise AssertionError("unreachable")


# Default names tried before a run started without --name says its last one is taken.
MAX_NAME_TRIES = 100


def _make_named_run_directory(
    cfg: RunConfig, runs_root: str | Path, planner: RunPlanner, facts: DataFacts
) -> Path:
    # run.json records absolute paths: a resume, an export or another node (torchrun on a
    # shared file system) may start in another directory. The checks above name the paths
    # as they were given.
    cfg = absolute_paths(cfg)
    # Hashed before the folder is claimed: a failure loses nothing.
    record = data_record(cfg, facts)
    run_dir = run_directory(runs_root, cfg.name)
    # Looked at before claiming (a claim leaves a .lock in the folder), and again after it
    # (another process may have filled it in between).
    _check_empty(run_dir)
    # data.json: a resume or export refuses data edited since. The run prices every phase
    # with its copy of the profile and follows its copy of the plan (`RunPlanner.for_run`):
    # the run directory alone reproduces its plans. None: not written.
    plan = None if planner.plan is None else dumps(planner.plan)
    if plan is not None:  # run.json holds the copy's sha256: a resume refuses it edited since
        cfg = cfg.model_copy(update={"plan_sha256": text_sha256(plan)})
    # And the model folder's config.json's and generation_config.json's: resume and export
    # build the model from them again.
    cfg = model_files_sha256(cfg)
    files = {"run.json": cfg, DATA_RECORD: record, RUN_PROFILE: planner.profile}
    files[RUN_PLAN] = plan
    lock_made = not (run_dir / ".lock").exists()
    with new_directories(run_dir):  # the folders it made go again if the run is not prepared
        run_dir = claim_directory(run_dir)
        _check_empty(run_dir)
        try:
            # Again once claimed: --runs-dir, or a folder on its path, swapped for a link into
            # a run since `check_runs_root` put this run inside that one (the forty-third
            # round's F5, found of export).
            check_run_location(run_dir)
            for name, doc in files.items():
                if doc is not None:
                    write_atomic(run_dir / name, doc if isinstance(doc, str) else dumps(doc))
        except BaseException as exc:
            # A full disk after run.json left a run that could neither start nor be
            # prepared again under its name.
            if not moved_away(run_dir):
                _unprepare(run_dir, list(files), lock_made)
                raise
            # Moved (or deleted) as it was prepared: its writes failed as "write failed (No
            # such file or directory)", and the folder kept the run.json written before (the
            # thirtieth round). Undone where it is now; what is at the path is not ours.
            now = where_now_as_named(run_dir)
            _unprepare(now, list(files), lock_made, claimed=run_dir)
            if not isinstance(exc, OSError | PipeplanError):
                raise
            where = "moved or was deleted" if now is None else f"moved to {quoted(str(now))}"
            raise OutputError(
                f"{run_dir}: the run directory {where} while the run was prepared; nothing was "
                "started: run it again"
            ) from None
    return run_dir


def _free_name(runs_root: str | Path, name: str) -> str:
    """The default name `name` (run-DATE-TIME), or `name-2`, `name-3`, … where a run took it:
    two runs started without --name in the same second were refused "already holds a run;
    pick another --name", a name the user never gave (the forty-seventh round)."""
    for count in range(1, 1000):
        free = name if count == 1 else f"{name}-{count}"
        if not os.path.lexists(Path(runs_root) / free):
            return free
    return name  # a thousand in one second: the claim says the folder is taken


def _unprepare(
    run_dir: Path | None, names: list[str], lock_made: bool, claimed: Path | None = None
) -> None:
    """Undo a `prepare` that failed after its claim: the files it wrote in `run_dir` (the
    folder held none of them; None: the folder is gone), and the lock it made, released.
    `claimed`: the path it was claimed by, where it moved away from there."""
    for name in names if run_dir is not None else []:
        (run_dir / name).unlink(missing_ok=True)
    release_directory(claimed or run_dir)
    if lock_made and run_dir is not None:
        (run_dir / ".lock").unlink(missing_ok=True)


def _check_empty(run_dir: Path) -> None:
    """A new run's folder is absent or empty (but for its lock): never someone's folder."""
    if not run_dir.is_dir():
        return
    held = [p.name for p in run_dir.iterdir() if p.name != ".lock"]
    if "run.json" in held:
        raise DirectoryTaken(f"{run_dir}: already holds a run; pick another --name")
    if held:
        raise DirectoryTaken(
            f"{run_dir}: exists and is not empty (it holds {held[0]}); pick another --name"
        )


def check_run(
    cfg: RunConfig,
    local: bool = True,
    resumed: tuple[Path, CheckpointManifest, dict[str, torch.Tensor], list] | None = None,
) -> tuple[RunPlanner, DataFacts]:
    """Everything a configuration must pass before any process starts, the same for a fresh
    run and a resume: ranks this host has (`local`; torchrun's world size is the launcher's),
    model and data, the freeze list, a first phase that can be planned. A resume (`resumed`:
    the run directory, its latest checkpoint's manifest and weights) is checked against the
    profile the run prices with, its checkpoint (and every kept one before it, with
    run.jsonl's records, the fourth item) against the run's steps and model, and the files the
    run writes must be writable. Returns the planner and what was checked of the data
    (`data_facts`: data.json records it; a resume's data must give what the run started with).

        planner, facts = check_run(cfg)   # BadArgumentError with one line naming the flag
    """
    check_open_files()
    if local:
        check_local_ranks(cfg.nproc, cfg.device)
    elif cfg.device == "cuda":  # each rank checks its LOCAL_RANK against its own node's GPUs
        check_local_ranks(1, cfg.device)
    with watched_for_hangs(cfg.collective_timeout_s):
        seq, data = build_task(cfg, from_checkpoint=resumed is not None)
        facts = data_facts(data, seq)
    if resumed is not None:  # the data the run started with (its ranks hold theirs to it too)
        record = read_data_record(resumed[0])
        check_data_facts(record and record.facts, facts, cfg.data, "the resume", resumed[0])
        check_helpers_kept(resumed[0], cfg)
    # Before the run folder is made, or a resume's rank starts: each rank's epoch order is
    # sized by the sets' len() alone. A local run's ranks share this host; torchrun's, the
    # nodes it started (`--prepare-only`: not known yet, so all of them, as a local run's).
    nodes = 1 if local else launcher_nodes()
    check_index_memory(cfg, facts, -(-cfg.nproc // (nodes or 1)))
    samples = facts.train_samples  # the user's __len__, held (`length`)
    if samples < cfg.global_batch:
        training = f"the {samples} training sample{'s' * (samples != 1)} of data {quoted(cfg.data)}"
        if cfg.plan is None or resumed is not None:
            raise BadArgumentError(f"--global-batch {cfg.global_batch} is larger than {training}")
        # Beside --plan the batch is the plan's: "--global-batch 256" named a flag never given,
        # and giving it another was refused as not the plan's (the sixty-eighth round). A plan
        # is made for its samples too (`check_plan_samples`): both are re-planned at once.
        raise BadArgumentError(
            f"{cfg.plan}: the plan is for global batch {cfg.global_batch} "
            f"(inputs.global_batch), larger than {training}; re-plan with --samples {samples} "
            f"and a --global-batch of at most {samples}"
        )
    check_run_length(cfg, cfg.steps_per_epoch(samples))
    # run.jsonl, which grows with the steps, against `ulimit -f` (a resume's, appended to).
    kept = None if resumed is None else (resumed[0] / "run.jsonl", resumed[1].step)
    check_records_room(cfg, cfg.steps_per_epoch(samples), len(seq.layers), kept)
    if cfg.freeze == "list":  # validated as `plan --freeze-schedule` validates its list
        # A list longer than --epochs is refused when typed. Not on resume (run.json's list,
        # as it was saved; --epochs only grows there), nor beside --plan: the plan's list is
        # its epochs long, and `check_plan` names a --epochs that differs from them.
        cut = resumed is not None or cfg.plan is not None
        try:
            list_schedule(cfg.freeze_list or [], cfg.epochs, seq.num_blocks, cut=cut)
        except BadArgumentError as exc:
            # Beside --plan the list is the plan's schedule (`with_file_values`; the freeze
            # flags are refused there): name the file it came from, not a flag never given.
            where = "--freeze" if cfg.plan is None else f"{cfg.plan}: inputs.freeze"
            raise BadArgumentError(f"{where}: {exc}") from None
    # The ranks its --device-memory is held to (`host_ranks`): a resume's is run.json's.
    host = host_ranks(cfg, local, None if resumed is None else resumed[0], resumed is not None)
    if resumed is None:
        planner = RunPlanner.from_config(cfg, seq, host)
        if planner.plan is not None and data.augmented:
            check_plan_cache(planner.plan, False, f"its data '{cfg.data}' is augmented")
        if planner.plan is not None:  # once: `prepare` runs in the launcher only
            check_plan_samples(planner.plan, cfg, samples)
            note_plan_epoch(planner.plan, cfg, samples)
    else:
        run_dir, manifest, weights, records = resumed
        planner = RunPlanner.for_run(run_dir, cfg, host)
        where = manifest_path(run_dir, manifest)
        check_position(manifest, cfg, samples, seq.layers, where)
        # Every kept checkpoint before it alike, the model in hand: its records', then its
        # layers and position, which were held by nothing (twenty-sixth round).

        def position(older: CheckpointManifest) -> None:
            where = manifest_path(run_dir, older)
            check_position(older, cfg, samples, seq.layers, where)
            # data.json as it saw it, as the one read: facts added to an older manifest of a
            # run of built-in data (no data.json) passed (the sixty-first round).
            check_data_kept(run_dir, older, where)

        check_older_manifests(manifest, records, run_dir, cfg, position)
        # Named as the checkpoint read: an older one where `load_latest` fell back.
        check_weights(weights, seq.layers, manifest_path(run_dir, manifest).parent)
        # Not what rank 0 moves aside before it writes (a `step-N` file passed over).
        check_outputs(run_dir, skip=passed_over(run_dir, manifest))
        check_checkpoint_room(run_dir, planner.profile)  # its next checkpoint, beside those kept
    if planner.plan is not None and nodes is not None:  # a local run is one node
        where = cfg.plan if resumed is None else resumed[0] / RUN_PLAN
        check_plan_nodes(planner.plan, where, nodes, cfg.nproc)
    planner.check(seq)
    if resumed is None and (links := planner.links_warning(seq)) is not None:
        log.warning("%s", links)  # held until the run is prepared (`prepare`)
    if resumed is not None:  # last: the checks above say more about a value that cannot run
        check_trained_with(resumed[1], cfg, resumed[0] / "run.json")
    return planner, facts


def host_ranks(
    cfg: RunConfig, local: bool, run_dir: Path | None = None, resume: bool = False
) -> HostRanks:
    """The ranks of the run `cfg` that share this host (`cluster.HostRanks`), which its
    --device-memory is held to: a `pipeplan run`'s --nproc (`local`: its launcher and ranks),
    torchrun's LOCAL_WORLD_SIZE (its entry and ranks: `run_dir` given), else only the one
    that is sure (`--prepare-only`: torchrun starts the ranks later, on nodes not known yet;
    a run of 2 ranks for 2 nodes was refused as if both shared this host: the thirty-fifth
    round). `run_dir`: the run's folder where its --device-memory is run.json's (a `resume`,
    a rank), not a flag of this command.

        host_ranks(cfg, local=True)                              # --nproc 2 ranks, here
        host_ranks(cfg, True, Path("runs/c"), resume=True)      # run.json's, resumed
    """
    run_json = None if run_dir is None else run_dir / "run.json"
    if local:
        fewer = "resume with --nproc {k}" if resume else None
        return HostRanks(cfg.nproc, f"--nproc {cfg.nproc} ranks", run_json, fewer)
    local_world = os.environ.get("LOCAL_WORLD_SIZE", "")
    if run_dir is None or not (local_world.isascii() and local_world.isdigit()):
        return HostRanks(1, None)
    count = max(1, int(local_world))
    named = f"the {count} ranks torchrun starts on this node (LOCAL_WORLD_SIZE={count})"
    # The nodes its phases are planned for (`cluster.run_cluster`), each of `count` ranks.
    nodes = launcher_nodes() or 1
    return HostRanks(count, named, run_json, "start torchrun with --nproc-per-node {k}", nodes)


def launcher_nodes() -> int | None:
    """The nodes torchrun started this rank's world on (it runs LOCAL_WORLD_SIZE ranks on
    each: WORLD_SIZE / LOCAL_WORLD_SIZE), or None where no launcher says (`--prepare-only`:
    torchrun starts the ranks later, on nodes not known yet)."""
    world, local = os.environ.get("WORLD_SIZE", ""), os.environ.get("LOCAL_WORLD_SIZE", "")
    if not (world.isascii() and world.isdigit() and local.isascii() and local.isdigit()):
        return None
    return max(1, int(world) // max(1, int(local)))


def check_plan_nodes(plan: Plan, where: str | Path, nodes: int, nproc: int) -> None:
    """A plan priced for more nodes than the run has (its inter-node link, a cache on each
    node) is not this run's plan: a local `pipeplan run --plan` of a plan for 2 nodes × 1
    device ran on one host (twenty-second round), as another --nproc never did.
    BadArgumentError naming the plan file (`where`) and its nodes:

        check_plan_nodes(plan, "plan.json", 1, cfg.nproc)   # a local run: one node
    """
    cluster = plan.inputs.cluster
    if cluster.nodes > nodes:
        per_node = max(1, nproc // nodes)
        devices = f"{cluster.devices_per_node} device{'s' if cluster.devices_per_node > 1 else ''}"
        here = f"{nodes} node{'s' if nodes > 1 else ''} × {per_node} ranks"
        raise BadArgumentError(
            f"{where}: the plan is for {cluster.nodes} nodes × {devices}; this run is {here}: "
            f"re-plan with --nodes {nodes} --devices-per-node {per_node}"
        )


def check_run_length(cfg: RunConfig, steps: int) -> None:
    """`check_run_length(cfg, cfg.steps_per_epoch(len(data.train)))`: the flags counted in
    steps fit the run's `cfg.epochs` epochs of `steps` steps (known only once the data is
    read). BadArgumentError naming the flag that would do nothing as given."""
    if cfg.warmup_steps > steps * cfg.epochs:  # the learning rate would never reach --lr
        raise BadArgumentError(
            f"--warmup-steps {cfg.warmup_steps} is longer than the run: {cfg.epochs} epochs of "
            f"{steps} steps; the learning rate would never reach --lr"
        )
    check_checkpoint_every(cfg, steps)
    every = cfg.freeze_every
    if every is None:
        return
    # --freeze auto decides at every epoch's end anyway; --freeze-every N adds the N-th steps
    # (counted over the run) within an epoch. One that never falls within an epoch added
    # nothing, silently (the nineteenth round: 999999999999, or 89 on 88 steps). A multiple
    # of an epoch's steps is accepted: it is what auto does anyway, and an epoch's length
    # depends on the data, which the user may not have counted.
    if every >= steps * cfg.epochs:  # the run's last step ends its last epoch
        than = "longer than" if every > steps * cfg.epochs else "as long as"
        raise BadArgumentError(
            f"--freeze-every {every} is {than} the run: {cfg.epochs} epochs of "
            f"{steps} steps; AutoFreeze would decide only at the epochs' ends, as without it"
        )


def check_checkpoint_every(cfg: RunConfig, steps: int) -> None:
    """`check_checkpoint_every(cfg, steps)`: --checkpoint-every N adds a checkpoint every N
    steps to those at layout changes and the run's end. An N of the run's `cfg.epochs` ×
    `steps` steps or more adds none: accepted silently (twenty-second round: 100000), where
    such a --freeze-every is refused. BadArgumentError naming the flag and the run's steps."""
    every, total = cfg.checkpoint_every, steps * cfg.epochs
    if every is not None and every >= total:  # the run's last step writes its final one anyway
        than = "longer than" if every > total else "as long as"
        raise BadArgumentError(
            f"--checkpoint-every {every} is {than} the run: {cfg.epochs} epochs of {steps} "
            "steps; the run would checkpoint only at layout changes and its end, as without it"
        )


def check_plan_samples(plan: Plan, cfg: RunConfig, samples: int) -> None:
    """`check_plan_samples(plan, cfg, len(data.train))`: the plan was made for this run's
    training set. Its phases were decided over epochs of its samples (a cache or a move pays
    for itself over that many steps) and its cache sized for them: a plan for 192 samples ran
    on 1438 without a refusal (eighteenth round), as one for another --epochs never did.
    BadArgumentError naming the plan's field otherwise."""
    if plan.inputs.samples != samples:
        raise BadArgumentError(
            f"{cfg.plan}: inputs.samples {plan.inputs.samples}: the plan was made for "
            f"{plan.inputs.samples} training samples, but data '{cfg.data}' has {samples}; "
            f"re-plan with --samples {samples}"
        )


def note_plan_epoch(plan: Plan, cfg: RunConfig, samples: int) -> None:
    """A plan priced epochs of its own length: a run that caps them (--max-steps-per-epoch;
    other data is refused, `check_plan_samples`) follows its layouts, but its predicted times
    are not this run's; say so once, before training."""
    steps = cfg.steps_per_epoch(samples)
    if steps != plan.inputs.steps_per_epoch:
        log.warning(
            "%s was made for %d steps an epoch (%d samples); this run trains %d: it "
            "follows the plan's layouts, whose predicted times are for the plan's epochs",
            cfg.plan,
            plan.inputs.steps_per_epoch,
            plan.inputs.samples,
            steps,
        )


def finished(manifest: CheckpointManifest, cfg: RunConfig) -> bool:
    """Whether the checkpoint is the run's end: every epoch of `cfg` trained (its manifest is
    at epoch `cfg.epochs`, step 0; `check_manifest_records` holds the records to reach it).
    Not summary.json or model/: those are written after it, and deleting them made a finished
    run resumable (a phantom phase of 0 steps, its manifest rewritten)."""
    return manifest.epoch >= cfg.epochs


def check_unfinished(
    manifest: CheckpointManifest, cfg: RunConfig, run_dir: Path, local: bool = True
) -> None:
    """A resume trains on: a run whose latest checkpoint is its end (`finished`: every epoch
    of `cfg`, with the epochs --resume gives) has nothing to train. Its trained model is the
    checkpoint's, whatever happened after it: `pipeplan export` writes it. `local`: resumed by
    `pipeplan run --resume` (which takes --epochs), else by torchrun's entry (which trains
    run.json's epochs and takes none)."""
    if not finished(manifest, cfg):
        return
    if cfg.plan is not None:  # its epochs are the plan's (the sixtieth round: told --epochs N)
        more = f"a run of a plan trains the plan's {cfg.epochs} epochs; to train on, start a "
        more += "new run with a plan made for more"
    elif local:
        more = f"give --epochs N > {cfg.epochs} to train on"
    else:
        more = (
            f"torchrun's entry trains the epochs run.json holds; to train on: "
            f"pipeplan run --resume {shlex.quote(str(run_dir))} --epochs N > {cfg.epochs}"
        )
    if not (run_dir / MODEL_DIR).is_dir():  # it failed after the checkpoint, or was deleted
        more += f"; its model: pipeplan export {shlex.quote(str(run_dir))} --out DIR"
    raise BadArgumentError(
        f"{run_dir}: finished all its {cfg.epochs} epochs (checkpoint step-{manifest.step}); {more}"
    )


# What a run or a resume writes inside its directory, by folder ("." the run directory; R a
# rank, N a step or a calibration's number): the folders it writes into, and the files it
# writes in place (appends: the logs, run.jsonl), replaces by a rename (run.json, summary.json,
# metrics.csv, latest, a checkpoint) or removes and makes again (a rank's error report, the
# Ctrl-C mark). model/ and a checkpoint's step-N/ are made anew whole: what they hold is
# removed, never written through. The activation cache checks its own folders (`executor.cache`).
RUN_WRITES_FOLDERS = {
    ".": (
        *map(re.escape, ("checkpoints", "logs", MODEL_DIR, "cache")),
        PARTIAL_FOLDERS["."].pattern,
    ),
    "checkpoints": (r"(\.tmp-)?step-[0-9]+",),
}
RUN_WRITES_FILES = {
    ".": (
        *map(re.escape, ("run.json", "run.jsonl", PENDING_CONFIG, METRICS_FILE, "summary.json")),
        r"calibration-[0-9]+\.json",
    ),
    "logs": (
        *map(re.escape, ("launcher.log", "interrupted")),
        r"rank-[0-9]+\.log",
        r"rank-[0-9]+\.error\.json(\.tmp)?",
    ),
    "checkpoints": ("latest",),
}


def _shared_log(path: Path) -> str | None:
    """Why a log the run appends to (`*.log`) may not be written: a file of other names too
    (a hard link), whose every name the appended lines would reach. Found by the fifty-first
    round: a rank's log hard-linked to a file outside the run was appended to by the resume.
    The run's other files are replaced whole (a rename), which leaves a linked one alone."""
    if path.suffix != ".log":
        return None
    names = os.lstat(path).st_nlink
    if names < 2:
        return None
    return f"is a hard link ({names} names of one file): copy it to a file of its own"


def check_outputs(run_dir: Path, skip: list[Path] | tuple[Path, ...] = ()) -> None:
    """What a run writes into its directory (RUN_WRITES_FOLDERS, RUN_WRITES_FILES) can be
    written there, before any rank starts: each folder absent or a plain folder, each file
    absent or a regular file; never a symbolic link (a rank's log linked elsewhere had the
    resume append its output there), a FIFO (a rank blocked opening it: the resume hung), a
    device, or a folder where a file belongs (a rank's traceback, then "training failed on
    rank 0 at step 2"). OutputError naming the first path that is not. `skip`: paths a
    resume's rank 0 moves aside before any write (`checkpoint.passed_over`).

        check_outputs(Path("runs/a"))   # runs/a/logs/rank-1.log: not a regular file (a FIFO); …
    """
    for folder, names in RUN_WRITES_FOLDERS.items():
        for path in _entries(run_dir / folder, names):
            why = None if path in skip else not_a_plain_folder(path)
            if why is not None:
                raise OutputError(f"{path}: {why}; the run writes into it")
    for folder, names in RUN_WRITES_FILES.items():
        for path in _entries(run_dir / folder, names):
            why = not_a_plain_file(path) or _shared_log(path)
            if why is not None:
                raise OutputError(f"{path}: {why}; the run writes this file")
    for name in ("run.jsonl", METRICS_FILE, "summary.json", "run.json"):
        # (a path too long is --runs-dir's and --name's: the fifty-sixth round said --out)
        check_writable(run_dir / name, run_owned=True, flag="--runs-dir/--name")
    check_free_space(run_dir)


# The least free space a run starts (or resumes) with: each rank's error report keeps its
# room from its start (`errorfile.reserve`), and a step's records and the logs' first lines
# follow. Less, and a rank failed with "exited with code 1", its report unwritten (forty-
# seventh round: a resume on a full disk). A checkpoint that does not fit later is named
# as it is written.
MIN_FREE_BYTES = 16 << 20


def check_free_space(run_dir: Path) -> None:
    """OutputError where the file system holding `run_dir` has less than MIN_FREE_BYTES free
    for this user (a quota, the reserved blocks: `statvfs`'s f_bavail). A new run's folder,
    not made yet, is asked of the nearest folder above it that is: the check passed over
    every new run (forty-eighth round: one with 140 KiB free trained, then failed at its
    checkpoint, leaving a folder that could neither resume nor start again)."""
    free = _free_bytes(run_dir)
    if free is not None and free < MIN_FREE_BYTES:
        _check_disk_writable(run_dir)  # read-only: no space freed lets it write
        raise OutputError(
            f"{run_dir}: the disk holding it has {size_text(free) if free else 'nothing'} "
            "free; a run needs at "
            f"least {size_text(MIN_FREE_BYTES)} to start (its records and each rank's "
            "error report): free some space and run it again"
        )


def _free_bytes(path: Path) -> int | None:
    """Bytes free for this user on the disk holding `path`, asked of the nearest folder above
    it that exists; None where nothing can be asked (its writes say what fails)."""
    try:
        found = os.statvfs(_nearest_folder(path))
    except OSError:
        return None
    return found.f_bavail * found.f_frsize


def _nearest_folder(path: Path) -> Path:
    """`path`, or the nearest folder above it that exists (absolute)."""
    where = Path(os.path.abspath(path))
    while not where.exists() and where != where.parent:
        where = where.parent
    return where


def _check_disk_writable(path: Path) -> None:
    """OutputError where nothing can be written at `path` (the nearest folder of it that
    exists): a read-only file system, or a folder this user may not write; the space checks
    ask it before they say "free some space", which would not help. Found by the sixty-first
    round: `--runs-dir` on a small read-only mount was told the disk had 3MiB free.

        _check_disk_writable(Path("/mnt/ro/runs"))  # "/mnt/ro/runs: cannot create directory
                                                    #  (Read-only file system)"
    """
    where = _nearest_folder(path)
    try:
        found = os.statvfs(where)
    except OSError:
        return
    if found.f_blocks == 0:  # (the ninetieth round: `--runs-dir /proc` was told to free space)
        raise OutputError(
            f"{path}: the file system holding it keeps no files (as /proc and /sys): give a "
            "folder on a disk"
        )
    read_only = bool(found.f_flag & os.ST_RDONLY)
    if read_only or not os.access(where, os.W_OK):
        why = os.strerror(errno.EROFS if read_only else errno.EACCES)
        if os.path.lexists(path):
            raise OutputError(f"{path}: cannot be written ({why})")
        raise OutputError(f"{path}: cannot create directory ({why})")


# A checkpoint's bytes a parameter: its float32 weights (model.pt) and AdamW's two moments
# (optimizer.pt), every layer active, as a run's first checkpoint may be.
CHECKPOINT_BYTES_PER_PARAM = 12
OPTIMIZER_BYTES_PER_PARAM = 8  # its largest file, optimizer.pt
PICKLE_ROOM_BYTES = 2**20  # torch.save's archive around the tensors, with room


def check_checkpoint_room(runs_root: Path, profile: Profile) -> None:
    """OutputError where the disk of `runs_root` cannot hold the run's first checkpoint beside
    MIN_FREE_BYTES: found by the fifty-seventh round, a run on 18 MB free passed the start's
    16 MiB, trained every epoch, and lost them all at its first checkpoint (19 MB). Asked as a
    run is prepared, as torchrun starts it (the disk may have filled since: the fifty-eighth
    round) and as it resumes (its next checkpoint). Later checkpoints that do not fit are
    named as they are written, the previous one kept."""
    params = sum(layer.params for layer in profile.layers)
    checkpoint = CHECKPOINT_BYTES_PER_PARAM * params
    # Its largest file is optimizer.pt, 8 bytes a parameter (AdamW's two float32 moments),
    # and some pickling around them: past `ulimit -f`, a run trained every step and lost it
    # writing a checkpoint (the fifty-ninth round at model.pt's 4 bytes, the sixtieth at 8).
    limit, largest = size_limit(), OPTIMIZER_BYTES_PER_PARAM * params + PICKLE_ROOM_BYTES
    if limit is not None and limit < largest:
        raise OutputError(
            f"the file size limit (ulimit -f) is {limit:,} bytes, but the run's checkpoints "
            f"write an optimizer.pt of about {largest / 2**20:,.1f} MiB ({params:,} "
            f"parameters, {OPTIMIZER_BYTES_PER_PARAM} bytes each: AdamW's two moments): raise "
            "it (ulimit -f unlimited)"
        )
    free = _free_bytes(runs_root)
    if free is not None and free < checkpoint + MIN_FREE_BYTES:
        _check_disk_writable(runs_root)
        raise OutputError(
            f"{runs_root}: the disk holding it has {size_text(free)} free; the run's first "
            f"checkpoint takes about {size_text(checkpoint)} ({params:,} parameters, "
            f"{CHECKPOINT_BYTES_PER_PARAM} bytes each: the float32 weights and AdamW's two "
            f"moments), and a run needs {size_text(MIN_FREE_BYTES)} more to start: free "
            "some space and run it again"
        )


# run.jsonl's bytes beside its step records, per epoch and per freeze decision: an epoch
# record and a phase record, about 1.3 KB each on a small model (the sixty-first round's),
# more with its layers' gradient norms (some 33 bytes a layer) and the forecast's two
# schedules (a frozen-layer count an epoch of the run, some 5 bytes each), bounded here well
# above what was measured.
EPOCH_RECORDS_BYTES = 16 << 10
RECORD_BYTES_PER_LAYER = 48
RECORD_BYTES_PER_EPOCH = 16


def check_records_room(
    cfg: RunConfig, steps: int, layers: int, kept: tuple[Path, int] | None = None
) -> None:
    """OutputError where the file size limit (`ulimit -f`) is below what run.jsonl, the run's
    largest record, reaches by the run's end: the run's `cfg.epochs` epochs of `steps` steps
    on its `cfg.nproc` ranks (`records.step_record_bytes`, at most, a step), its epoch and
    phase records (a model of `layers` layers). `kept`: a resume's run.jsonl and the step its
    checkpoint ends at, whose records it keeps and appends to. Found by the sixty-first
    round: a tiny model's run passed the checkpoint's bound (`check_checkpoint_room`),
    trained 1,667 steps and lost them all writing run.jsonl. metrics.csv (a row an epoch)
    and the logs stay far smaller.

        check_records_room(cfg, 1000, 4)   # the file size limit (ulimit -f) is 1,177,600 …
    """
    limit = size_limit()
    if limit is None:
        return
    total = cfg.epochs * steps
    decisions = cfg.epochs + (total // cfg.freeze_every if cfg.freeze_every else 0)
    per_epoch = (
        EPOCH_RECORDS_BYTES + RECORD_BYTES_PER_LAYER * layers + RECORD_BYTES_PER_EPOCH * cfg.epochs
    )
    path, done = kept if kept is not None else (None, 0)
    held = _file_size(path) if path is not None else 0
    each = step_record_bytes(cfg.nproc, total)
    need = held + (total - done) * each + decisions * per_epoch
    if limit < need:
        more = " more" if kept is not None else ""
        now = f"; it holds {held:,} bytes now" if held else ""
        raise OutputError(
            f"the file size limit (ulimit -f) is {limit:,} bytes, but the run's records, "
            f"run.jsonl, reach about {need / 2**20:,.1f} MiB by its end ({total - done:,} steps"
            f"{more} on {cfg.nproc} rank{'s' * (cfg.nproc > 1)}, at most {each:,} bytes a "
            f"step{now}): raise it (ulimit -f unlimited)"
        )


def _file_size(path: Path) -> int:
    try:
        return os.stat(path).st_size
    except OSError:  # none yet: the resume's checks say what is wrong with one
        return 0


def _entries(folder: Path, names: tuple[str, ...]) -> list[Path]:
    """The entries of `folder` (a plain one: `check_outputs` checked it first) whose names
    match one of `names` (regular expressions), sorted; none when it is absent."""
    if not_a_plain_folder(folder) is not None or not folder.is_dir():
        return []
    pattern = re.compile("|".join(f"(?:{name})" for name in names))
    return sorted(folder / name for name in os.listdir(folder) if pattern.fullmatch(name))


# The longest path a run writes below its directory, with room: checkpoints/.tmp-step-N/
# optimizer.pt, logs/rank-R.error.json.tmp.
RUN_FILES_DEPTH = 64


def run_directory(runs_root: str | Path, name: str) -> Path:
    """`runs_root/name`, a plain folder inside --runs-dir: not a path out of it, and not a
    symbolic link that would put the run's files somewhere else."""
    run_dir = Path(runs_root) / run_name(name)
    whole = len(os.fsencode(os.path.abspath(run_dir))) + RUN_FILES_DEPTH
    if whole >= PATH_MAX:  # its files' paths would be too long (the fifty-sixth round: the
        # line named --out, or no flag at all)
        raise OutputError(
            f"--runs-dir/--name {quoted(str(run_dir))}: path too long ({whole - RUN_FILES_DEPTH:,}"
            f" bytes from /, and the run's files lie up to {RUN_FILES_DEPTH} deeper; the file "
            f"system takes {PATH_MAX - 1:,} a path)"
        )
    if run_dir.is_symlink():
        raise OutputError(
            f"{run_dir}: is a symbolic link; a run directory is a plain folder in --runs-dir"
        )
    return run_dir


def check_runs_root(runs_root: str | Path) -> None:
    """--runs-dir is not inside a run directory (`is_run_directory`), nor one itself, as given
    or through a symbolic link (`enclosing_run`): a run put under RUN/checkpoints was a
    `step-N` folder the older run's pruning removed; one put there through a link to it
    went in unrefused."""
    check_not_stdout(runs_root, "--runs-dir", "directory")
    check_not_shipped(runs_root, "--runs-dir")  # a whole run there (the ninety-third round)
    folder = enclosing_run(runs_root)
    if folder is not None:
        raise BadArgumentError(
            f"--runs-dir {runs_root}: lies inside the run directory {folder}; "
            "put new runs beside it, not in it"
        )


def check_run_location(run_dir: Path) -> None:
    """A run trains where a new one could be made (`check_runs_root`): not inside another run's
    directory, as given or through a link. torchrun's entry and a resume train a folder they
    did not make: one prepared through a link into RUN/checkpoints (before that was refused),
    or moved there."""
    check_not_shipped(run_dir)
    folder = enclosing_run(run_dir, strictly=True)
    if folder is not None:
        raise BadArgumentError(
            f"{run_dir}: lies inside the run directory {folder}, whose files are its own; "
            "move it beside that run, not in it"
        )


def run_name(name: str) -> str:
    """A run's name is one plain folder name: never a path out of --runs-dir (the rule
    RunConfig's `name` holds; checked again for configurations built without validation),
    and never a name that marks a run directory (`fileio.RUN_MARKS`). Found by the
    forty-second round: runs named `checkpoints` and `run.jsonl` made --runs-dir itself look
    like a run directory (`is_run_directory`), and every later run there was refused. Other
    names a run keeps (`model`, `cache`, …) mark nothing and stay a user's to choose."""
    try:
        check_run_name(name)
    except ValueError as exc:
        raise BadArgumentError(f"--name {exc}") from None
    if name in RUN_MARKS:
        marks = " and ".join(mark for mark in RUN_MARKS if not mark.startswith("."))
        raise BadArgumentError(
            f"--name {name!r}: is a name that marks a run directory ({marks}); runs so named "
            "would make --runs-dir look like a run directory: choose another name"
        )
    return name


# ----------------------------------------------------------------------------- one rank


def main(argv: list[str] | None = None) -> None:
    """One rank: `python -m executor.launch RUN_DIR [--resume] [--log-dir DIR] [--debug]`,
    started by torchrun on every node or by `pipeplan run` through elastic_launch. Exits 0, or
    with the code of its report (`executor.faults`) after writing it."""
    # The training code comes in here, not at the module's top: `pipeplan run`'s own process
    # imports this module to launch and never trains (torch's pipelining and transformers
    # took it ~3 s of CPU, the parent of every run and resume).
    try:
        from executor.worker import named_lost, named_silent
    except Exception:  # torch's _dynamo reads the working directory as it is imported
        ended_if_directory_removed()
        raise

    if _IMPORTS_UNCOLLECTED:  # the training code is in: collected from now on, its imports aside
        import gc

        gc.freeze()
        gc.enable()

    pipeplan_log.bound_console_size()  # torchrun's environment, as `pipeplan` reads it
    try:
        args = _parse(argv)
        if not under_pipeplan_run():  # `pipeplan run` puts its ranks' reports in the logs
            check_error_file_outside(Path(args.run_dir))
            if args.log_dir:
                check_log_dir(args.log_dir, Path(args.run_dir))
        world = launch_environment()
    except PipeplanError as exc:  # before anything: one line, as the CLI says it
        pipeplan_log.error(f"{named_rank()}{exc}")  # which of torchrun's ranks (53rd round)
        sys.exit(2)
    rank = world["RANK"]
    # The process's one pipeplan call, as the command's and the API's: the user's data code
    # runs in this rank, and its `pipeplan.run(...)` is refused at once, naming this rank.
    held_for_life(f"rank {rank} of the run in {args.run_dir}")
    die_with_launcher()
    console = rank_output(args.log_dir, rank)
    pipeplan_log.setup(rank=rank, debug=args.debug, stream=console if args.log_dir else None)
    if not under_pipeplan_run() and world["LOCAL_RANK"] == 0:
        try:  # `pipeplan run` made these checks before it started this rank; torchrun did not
            enter_run(Path(args.run_dir), args.resume, world)
        except PipeplanError as exc:
            refuse_entry(exc, rank, console)
        remove_left_scratch()  # what ranks of an earlier run left in TMPDIR, as `run_local`
    # A hand-given --log-dir is torchrun's rank's all the same: `pipeplan run` passes one too,
    # and only there does a launcher of ours say the rank's line (the fifty-eighth round: a
    # torchrun rank given --log-dir failed with no line on the console).
    ours = under_pipeplan_run()
    try:
        # From here Ctrl-C is reported as every failure is (and its traceback goes to the rank's
        # log under `pipeplan run`): a KeyboardInterrupt again, where the top of this module
        # exited in silence, and the rank's shell (RANK_SHELL) ignored it.
        if not kept_ignored(signal.SIGINT):
            signal.signal(signal.SIGINT, faults.on_sigint)  # told from code's KeyboardInterrupt
        # SIGTERM kills at once again (a rank blocked in a collective would not run a handler
        # until it returned; the agent stops the ranks with it).
        if not kept_ignored(signal.SIGTERM):
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
        if not ours:  # torchrun's rank: no launcher of ours tells how it ended
            stops_reported(rank)
        # A Ctrl-C or stop whose handler ran in a finalizer (a data set's `__del__`), where
        # Python drops what it raises, is delivered again: it trained on, exit 0 (the
        # sixty-second round). An `os._exit(0)` in data code is this rank's failure, named.
        with dropped_stops_redelivered(faults.SignalInterrupt), exits_raised():
            train_rank(Path(args.run_dir), args.resume, console)
    except BaseException as caught:  # every failure is reported, then the rank exits
        exc = named_silent(caught)  # a collective's timeout names the peer that fell silent
        if not ours:  # torchrun's: no launcher of ours names the rank that died
            exc = named_lost(exc)
        said = start_line(exc, rank)
        # Bad input (a run file missing or edited, a diverged run: a PipeplanError) is one
        # line under torchrun as on the CLI; only a failure of the code shows its traceback.
        user = isinstance(exc, PipeplanError)
        # A traceback in the report where the rank prints one: a stop in the wait for the
        # others (torchrun's SIGTERM once a peer failed) showed where it landed in our code.
        report = faults.write_report(exc, rank, traced=said is None and not user)
        if said is not None:  # its own line, as the CLI's: a start that never trained
            line, code = said
            # Under `pipeplan run` into the rank's log: the launcher says it on the console.
            pipeplan_log.write_line(line, sys.stderr if ours else console)
        else:
            if args.log_dir or not user:
                traceback.print_exc()  # into the rank's log (or torchrun's console)
            if not ours:  # under torchrun: one line of ours after torch's traceback
                pipeplan_log.error(f"rank {rank}: {report.message}", console)
            code = faults.exit_code(report)
            if isinstance(exc, BadEnvironmentError):  # bad input, as the command says it
                code = 2
        for stream in (sys.stdout, sys.stderr, console):
            stream.flush()
        remove_own_caches()  # after the report, whose time names the rank that failed first
        # No interpreter teardown: a process group broken by a dead peer can hang it.
        os._exit(code)
    errorfile.release()  # trained: the report's room is given back
    exit_without_teardown(0, console, rank, args.debug)


def refuse_entry(exc: PipeplanError, rank: int, console: TextIO) -> NoReturn:
    """torchrun's entry refused the run (`enter_run`): the rank's report, the refusal (its
    message is the whole story: no traceback), its line naming the rank, and exit 2. With no
    report, torchrun's summary gave the refusing rank no cause and showed instead the
    traceback of a peer it stopped meanwhile (the twenty-third round).

        refuse_entry(BadArgumentError("runs/q1: has started already …"), 0, sys.stderr)
        # pipeplan: error: rank 0: runs/q1: has started already …
    """
    faults.write_report(exc, rank, traced=False)
    pipeplan_log.error(f"rank {rank}: {exc}", console)
    sys.exit(2)


def exit_without_teardown(code: int, console: TextIO, rank: int, debug: bool = False) -> None:
    """Rank `rank` exits with `code` once atexit's callbacks (logging's flush among them) have
    run, skipping the interpreter's teardown: with torch and transformers loaded, freeing
    every module costs a rank 1-2 s of CPU at the end of every run, and nothing of ours needs
    it (the records and logs are closed, the process group destroyed). A callback of the
    user's data code that raises or exits (`os._exit(3)`) is one warning line into the rank's
    output (its log under `pipeplan run`), as the launcher's own is (`cli._run_exit_callbacks`),
    never the rank's exit code: it turned a rank that had trained into a failure (the
    thirty-eighth round). A failed rank exits without the callbacks (`main`): none turns its
    failure into a success."""

    def say(line: str) -> None:
        pipeplan_log.write_line(f"pipeplan: rank {rank}: WARNING: {line}")

    def interrupted(signum: int, frame: object) -> NoReturn:
        end_stopped(faults.SignalInterrupt(), rank, console)

    # A stop as the callbacks run ends the rank there, with its line and code, as one ends the
    # command there (`startup`): raised into a callback, it was said as the callback's failure
    # and the rank exited 0 (torchrun's SIGHUP, SIGUSR1 or Ctrl-C: `stops_reported`).
    _EXITING.set()
    if signal.getsignal(signal.SIGINT) is faults.on_sigint:
        signal.signal(signal.SIGINT, interrupted)
    run_exit_callbacks(say, traced=debug, status=code)
    for stream in (sys.stdout, sys.stderr, console):
        stream.flush()
    exit_done(code)  # a profiled rank's report written too


def end_stopped(exc: BaseException, rank: int, console: TextIO | int) -> NoReturn:
    """The rank ended at once by a stop (`exc`: Stopped, or SignalInterrupt for Ctrl-C) where
    it cannot be raised (the main thread blocked in C, or the exit callbacks running): its
    report, its line on `console` (a stream, or a descriptor), its node's cache removed, and
    the stop's exit code.

        end_stopped(Stopped(signal.SIGHUP), 1, sys.stderr)   # "pipeplan: rank 1: stopped by
                                                             # SIGHUP", exit 129
    """
    faults.write_report(exc, rank, traced=False)
    line, code = start_line(exc, rank)  # type: ignore[misc]
    with contextlib.suppress(OSError, ValueError):
        if isinstance(console, int):
            os.write(console, (line + "\n").encode())
        else:
            pipeplan_log.write_line(line, console)
    with contextlib.suppress(OSError):
        remove_own_caches()
    EXIT(code)  # the real one: in the exit callbacks `os._exit` raises (`exits_raised`)


# Set once the rank has trained and runs its exit callbacks (`exit_without_teardown`).
_EXITING = threading.Event()

# The stops a torchrun rank reports as it ends (`stops_reported`): all but SIGTERM, the
# agent's own stop, which kills at once (and SIGKILL, which nothing can catch).
REPORTED_STOPS = tuple(sig for sig in STOP_SIGNALS if sig != signal.SIGTERM)


def stops_reported(rank: int) -> None:
    """Under torchrun, a stop signal to this rank mid-run (SIGHUP, SIGUSR1, … REPORTED_STOPS)
    ends it with its report and line, `pipeplan: rank 1: stopped by SIGUSR1`, exit 128 + the
    signal, its /dev/shm cache removed. By default such a signal killed the rank in silence,
    its cache left behind (forty-seventh round). The handler raises Stopped, reported as every
    failure, where the main thread runs Python; in a collective it runs none until that
    returns, so the signal's number, which Python's C handler writes to the wakeup descriptor
    at once, also wakes a thread of the rank's, which ends it if the handler has not run
    within STOP_GRACE_S. A signal that comes while another handler is installed (a block that
    holds stops, `fileio.stops_deferred` or `stops_raised`: a checkpoint's write; data code's
    own SIGALRM) is that handler's: the thread leaves it to the main thread. SIGTERM, the
    agent's stop, still ends the rank in silence as its default did, but removes the node's
    cache this rank made first (forty-ninth round: rank 0, stopped by the agent once rank 1
    had failed, left its /dev/shm folder); inside `stops_raised` it is raised, as before.

        stops_reported(rank=1)   # `kill -USR1 <rank 1>` → "pipeplan: rank 1: stopped by SIGUSR1"
    """
    read, write = os.pipe()
    os.set_blocking(write, False)  # as Python requires of a wakeup descriptor
    console = os.dup(2)  # the rank's stderr now: code may point descriptor 2 elsewhere later
    handled: set[int] = set()

    def on_stop(signum: int, frame: object) -> None:
        handled.add(signum)
        if _EXITING.is_set():  # trained: ends it in its exit callbacks
            end(signum)
        raise Stopped(signum)

    def on_term(signum: int, frame: object) -> None:
        handled.add(signum)
        end(signum)

    on_term.at_once = True  # type: ignore[attr-defined]  # `fileio.stops_raised` raises first

    def end(signum: int) -> None:
        if signum == signal.SIGTERM:  # the agent's stop: silent, as its default kills, but
            # the node's /dev/shm cache this rank made goes first (forty-ninth round: rank 0,
            # stopped so once rank 1 had failed, left it behind)
            with contextlib.suppress(OSError):
                remove_own_caches()
            if threading.current_thread() is threading.main_thread():  # its default action
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                os.kill(os.getpid(), signal.SIGTERM)
            os._exit(128 + signal.SIGTERM)  # the thread's (no handler changes there): as a shell
        end_stopped(Stopped(signum), rank, console)

    def watch() -> None:
        while True:
            try:
                heard = os.read(read, 64)
            except OSError:
                return
            for signum in heard:
                # Another handler as it came (a block that holds stops, or code's own alarm):
                # that handler has it, and the main thread acts, in Python as it is.
                ours = on_term if signum == signal.SIGTERM else on_stop
                if signum not in (*REPORTED_STOPS, signal.SIGTERM):
                    continue
                if signal.getsignal(signum) is not ours:
                    continue
                ends = time.monotonic() + STOP_GRACE_S
                while signum not in handled and time.monotonic() < ends:
                    time.sleep(0.05)
                if signum not in handled and signal.getsignal(signum) is ours:
                    end(signum)

    for sig in set(REPORTED_STOPS) - set(ignored(REPORTED_STOPS)):  # ignored ones stay so
        signal.signal(sig, on_stop)
    if not kept_ignored(signal.SIGTERM):
        signal.signal(signal.SIGTERM, on_term)
    signal.set_wakeup_fd(write, warn_on_full_buffer=False)
    threading.Thread(target=watch, name="pipeplan-stops", daemon=True).start()


# Seconds a stop's handler has to run (the main thread back in Python) before the thread of
# `stops_reported` ends the rank itself.
STOP_GRACE_S = 0.5


def start_line(exc: BaseException, rank: int) -> tuple[str, int] | None:
    """The line and exit code of a rank that ended while it waited for the others to start
    (`worker.meet_every_rank`), as the CLI's own, naming the rank as every line of a rank
    does: Ctrl-C, SIGTERM or SIGHUP, the wait's limit. None for any other failure (its
    traceback, then `pipeplan: error: rank R: …`).

        start_line(Stopped(signal.SIGTERM), 1)   # ("pipeplan: rank 1: stopped by SIGTERM", 143)
    """
    # Without its rank, a rank stopped by torchrun while it waited read as if torchrun itself
    # had been stopped (the twenty-fifth round). A Ctrl-C mid-run too (the rank's SIGINT, or
    # a failure raised as it unwound: gloo's "Connection closed by peer" once the peer's had
    # gone): a traceback of pipeplan's SignalInterrupt and an error line under torchrun (the
    # forty-seventh round).
    if isinstance(exc, Interrupted) or _by_sigint(exc):
        return f"pipeplan: rank {rank}: interrupted", faults.EXIT_INTERRUPTED
    if isinstance(exc, Stopped):
        return f"pipeplan: rank {rank}: {stopped_by(exc.signum)}", 128 + exc.signum
    from executor.worker import StartAbandoned

    if isinstance(exc, StartAbandoned):
        return pipeplan_log.error_line(f"rank {rank}: {exc}"), 2
    return None


def _by_sigint(exc: BaseException) -> bool:
    """Whether the rank's own SIGINT (`faults.SignalInterrupt`) is `exc` or what it was
    raised while handling (its context, a few levels at most)."""
    for _ in range(8):
        if isinstance(exc, faults.SignalInterrupt):
            return True
        if exc.__context__ is None:
            return False
        exc = exc.__context__
    return False


@contextlib.contextmanager
def stoppable() -> Iterator[None]:
    """SIGTERM, SIGHUP, SIGUSR1, … (START_STOPS) raise Stopped inside the block (the rank's
    wait for the others, which takes signals: `worker.meet_every_rank`), and kill at once again
    after it: a rank blocked in a collective would not run a handler until it returned, and
    the agent stops ranks with it.

        with stoppable():
            device = init_distributed(cfg.device, cfg.collective_timeout_s, start)
    """

    def stop(signum: int, frame: object) -> None:
        raise Stopped(signum)

    taken = set(START_STOPS) - set(ignored(START_STOPS))  # an ignored one stays ignored
    before = {sig: signal.signal(sig, stop) for sig in taken}
    try:
        yield
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


# What stops a rank waiting for the others with its line (`stoppable`): what the agent
# forwards to it, SIGTERM, SIGHUP, SIGUSR1, … (`startup.STOP_SIGNALS`).
START_STOPS = STOP_SIGNALS


# The least a rank of `pipeplan run` waits for the others to start: a rank's start (its
# imports, a GPU's set-up) takes seconds, a minute under heavy load, and may outlast a short
# --collective-timeout. One that never arrives, alive (a library's start-up hung under `ulimit
# -v`), held the others 24 h before (the sixty-sixth round's notes).
START_FLOOR_S = 600.0


def start_wait(cfg: RunConfig) -> StartWait:
    """How long this rank waits for the others to start, in silence under `pipeplan run`
    (its ranks start together, and its agent stops them all if one fails to): the run's
    --collective-timeout, START_FLOOR_S at least; under torchrun (or any launcher) the
    --collective-timeout, said once when it waits: a node started late or never, whose rank
    no agent here watches. Either way the one that gives up names the ranks that never came.

        start_wait(cfg)   # --collective-timeout 5 under `pipeplan run`: StartWait(600.0, …)
    """
    from executor.worker import StartWait

    if under_pipeplan_run():
        limit = max(cfg.collective_timeout_s, START_FLOOR_S)
        return StartWait(limit, "a rank's start under `pipeplan run`")
    return StartWait(cfg.collective_timeout_s, "the run's --collective-timeout", say=True)


class _Parser(argparse.ArgumentParser):
    """argparse that refuses in one line (BadArgumentError), not usage and an error."""

    def error(self, message: str):  # type: ignore[override]
        raise BadArgumentError(message)


def check_error_file_outside(run_dir: Path) -> None:
    """torchrun's TORCHELASTIC_ERROR_FILE, set by hand, lies outside the run directory, or in
    its logs folder (where `pipeplan run` puts its ranks' reports): a report elsewhere in it
    took a name of the run's own (summary.json: the fifty-fifth round), and export, report
    and resume then refused the run. BadArgumentError, the variable unset so that the
    refusal's own report is not written there either."""
    # torch's agent gives each rank a file of its own, and keeps the value given to torchrun
    # for itself: a rank's failure report is copied there, over run.json (the fifty-eighth
    # round). Its value is the agent's environment's; the rank, with its own unset, writes no
    # report, so the agent copies none.
    given = [(os.environ.get(errorfile.ENV), "")]
    if "TORCHELASTIC_RUN_ID" in os.environ:
        given.append((_agent_variable(errorfile.ENV), " given to torchrun"))
    for path, whose in given:
        if not path:
            continue
        # Another run's folder is no place either: its summary.json took a failed rank's
        # report, and that run was refused by every command (the fifty-ninth round).
        other = enclosing_run(os.path.dirname(os.path.realpath(path)))
        if other is not None and os.path.realpath(other) == os.path.realpath(run_dir):
            other = None
        if _inside_run(path, run_dir) or other is not None:
            os.environ.pop(errorfile.ENV, None)
            raise BadArgumentError(
                f"{errorfile.ENV}={quoted(path)}{whose} lies inside the run directory "
                f"{other or run_dir}; point it outside every run directory, or into this "
                "run's logs folder (torchrun's own lies in its temporary folder)"
            )


def _inside_run(path: str, run_dir: Path) -> bool:
    """Whether `path`'s folder is the run directory or lies in it, but its logs folder. The
    whole path resolved, its links before its `..`s as the kernel takes them: `..` taken off
    first (abspath) put `link/../runs/k/summary.json` outside (the fifty-seventh round)."""
    where = os.path.dirname(os.path.realpath(path))
    run = os.path.realpath(run_dir)
    inside = where == run or where.startswith(run.rstrip(os.sep) + os.sep)
    return inside and where != os.path.join(run, "logs")


def _agent_variable(name: str) -> str | None:
    """The variable `name` as the process that started this one (torchrun's agent) was given
    it (its /proc environ: its start's), or None where it cannot be read."""
    try:
        entries = Path(f"/proc/{os.getppid()}/environ").read_bytes().split(b"\0")
    except OSError:
        return None
    prefix = os.fsencode(name) + b"="
    found = next((e[len(prefix) :] for e in entries if e.startswith(prefix)), None)
    return None if found is None else os.fsdecode(found)


class _Once(argparse.Action):
    """An option given once: argparse keeps the last of two (`--resume --resume`, `--log-dir a
    --log-dir b`) where the `pipeplan` command refuses the second (fifty-third round)."""

    def __call__(self, parser, namespace, values, option_string=None):  # type: ignore[override]
        if getattr(namespace, f"_{self.dest}_given", False):
            raise BadArgumentError(f"{option_string} is given more than once; give it once")
        setattr(namespace, f"_{self.dest}_given", True)
        setattr(namespace, self.dest, True if self.nargs == 0 else values)


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = _Parser(
        prog="python -m executor.launch",
        description="One rank of a pipeplan run (made by pipeplan run --prepare-only), started "
        "by torchrun: RANK, WORLD_SIZE, LOCAL_RANK and the rendezvous come from its environment.",
    )
    parser.add_argument("run_dir", help="The run directory, runs/NAME.")
    parser.add_argument(
        "--resume", action=_Once, nargs=0, default=False, help="Continue from its checkpoint."
    )
    parser.add_argument(
        "--log-dir", action=_Once, help="Send this rank's output to DIR/rank-R.log."
    )
    parser.add_argument(
        "--debug", action=_Once, nargs=0, default=False, help="Log DEBUG messages too."
    )
    return parser.parse_args(argv)


# What the launcher's environment must hold, checked before torch reads it (`env://`): a bad
# value was a ValueError traceback, or a rendezvous retried for a minute in 65 lines.
LAUNCH_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_PORT")


def launch_environment() -> dict[str, int]:
    """`launch_environment()["RANK"]`: the launcher's variables (LAUNCH_ENV) as integers, each
    in its range (0 <= RANK < WORLD_SIZE, 0 <= LOCAL_RANK < LOCAL_WORLD_SIZE <= WORLD_SIZE,
    MASTER_PORT a port); BadArgumentError naming the first that is not."""
    values = {}
    for key in LAUNCH_ENV:
        raw = os.environ.get(key)
        if raw is None:
            raise BadArgumentError(
                f"{key} is not set: start it with torchrun (or run pipeplan run --nproc N)"
            )
        if not raw.isascii() or not raw.isdigit():  # int() also takes " 1", "+1", "1_0"
            raise BadArgumentError(f"{key}={raw!r}: not a non-negative integer")
        if len(raw.lstrip("0")) > MAX_DIGITS:  # int() raises past 4,300 (fiftieth round)
            raise BadArgumentError(
                f"{key}={quoted(raw)}: {len(raw):,} digits, beyond every limit pipeplan has"
            )
        values[key] = int(raw)
    limits = (
        ("WORLD_SIZE", 1, MAX_RANKS),  # advice to prepare more ranks than a run takes was none
        ("RANK", 0, values["WORLD_SIZE"] - 1),
        ("LOCAL_WORLD_SIZE", 1, values["WORLD_SIZE"]),
        ("LOCAL_RANK", 0, values["LOCAL_WORLD_SIZE"] - 1),
        ("MASTER_PORT", 1, 65535),
    )
    for key, low, high in limits:
        if not low <= values[key] <= high:
            raise BadArgumentError(f"{key}={values[key]}: must be in {low}..{high}")
    if not os.environ.get("MASTER_ADDR"):
        raise BadArgumentError("MASTER_ADDR is not set: start it with torchrun")
    check_equal_nodes(values)
    return values


def check_equal_nodes(values: dict[str, int]) -> None:
    """The launcher's nodes each run LOCAL_WORLD_SIZE ranks (`values`: `launch_environment`'s).
    A run plans for WORLD_SIZE / LOCAL_WORLD_SIZE nodes of LOCAL_WORLD_SIZE ranks
    (`host_ranks`, `cluster.run_cluster`), and its cost model puts global rank r on node
    r // LOCAL_WORLD_SIZE, as torchrun numbers them (each node's ranks in a row, node after
    node: torch's `_assign_worker_ranks`). torchrun's agents may be given different
    --nproc-per-node: such a world has no such nodes, and is refused on every node that
    can tell (its GROUP_WORLD_SIZE nodes times its own ranks are not WORLD_SIZE; the others
    then wait for it at most the run's --collective-timeout). BadArgumentError:

        check_equal_nodes({"WORLD_SIZE": 3, "LOCAL_WORLD_SIZE": 2, ...})
        # WORLD_SIZE=3: not LOCAL_WORLD_SIZE=2 ranks on the nodes; …
    """
    world, local = values["WORLD_SIZE"], values["LOCAL_WORLD_SIZE"]
    group = os.environ.get("GROUP_WORLD_SIZE", "")  # torchrun's nodes (its agents)
    nodes = int(group) if group.isascii() and group.isdigit() else None
    if world % local == 0 and (nodes is None or nodes * local == world):
        return
    on = "the nodes" if nodes is None else f"each of the GROUP_WORLD_SIZE={nodes} nodes"
    raise BadArgumentError(
        f"WORLD_SIZE={world}: not LOCAL_WORLD_SIZE={local} ranks on {on}; a run is planned "
        "for nodes of as many ranks each: start torchrun with the same --nproc-per-node on "
        "every node"
    )


def under_pipeplan_run() -> bool:
    """This rank was started by `pipeplan run`, whose process checked the run and holds its
    lock (it names itself, and it is this rank's parent); else by torchrun."""
    return os.environ.get(LAUNCHER_PID) == str(os.getppid())


# What a run writes once its ranks train: a folder holding any of these has started.
STARTED = ("run.jsonl", METRICS_FILE, "checkpoints", MODEL_DIR, "summary.json")


def enter_run(run_dir: Path, resume: bool, world: dict[str, int]) -> None:
    """torchrun's entry on each node's LOCAL_RANK 0, before any rank writes: the checks
    `pipeplan run` makes. Rank 0, which writes the run's files, first takes the run's lock
    for its life (a `pipeplan run --resume` of the same folder is refused, and it refuses
    this one). A fresh start is refused where the run has started (it retrained and appended
    a second run's records) and where the world is not run.json's; a resume passes
    `check_resume`. PipeplanError with one line.

        enter_run(Path("runs/exp1"), resume=True, world=launch_environment())
    """
    saved = read_run_config(run_dir)  # first: a mistyped folder is not made
    check_run_location(run_dir)
    if world["RANK"] == 0:
        claim_directory(run_dir)
    if not resume:
        check_not_trained(run_dir, saved)
        if world["WORLD_SIZE"] != saved.nproc:
            raise other_world(run_dir, saved.nproc, world["WORLD_SIZE"])
        if saved.plan:  # the run's copy of its plan, against the nodes torchrun started
            nodes = world["WORLD_SIZE"] // world["LOCAL_WORLD_SIZE"]
            plan = RunPlanner.for_run(run_dir, saved).plan
            check_plan_nodes(plan, run_dir / RUN_PLAN, nodes, saved.nproc)
        check_outputs(run_dir)  # a resume checks them in `check_run`
        if world["RANK"] == 0:  # its checkpoints are rank 0's: the disk may have filled since
            profile = RunPlanner.for_run(run_dir, saved).profile
            check_checkpoint_room(run_dir, profile)
            # And its records, rank 0's too, under this rank's `ulimit -f`, not the prepare's.
            record = read_data_record(run_dir)
            if record is not None and record.facts is not None:
                steps = saved.steps_per_epoch(record.facts.train_samples)
                check_records_room(saved, steps, len(profile.layers))
        if world["RANK"] == 0:  # a start that trained nothing left it (`trained`): not this one's
            (run_dir / "run.jsonl").unlink(missing_ok=True)
        return
    check_kept_trained_with(run_dir, saved)  # run.json as trained, before anything acts on it
    check_data(run_dir, saved)
    # What the ranks will run (`rank_config`): run.json on the launcher's world size, the one
    # thing a torchrun resume changes. A run.resume.json here is not this entry's (its rank 0
    # writes one in `rank_config`, after these checks): it trained the epochs a killed
    # `pipeplan run --resume --epochs N` had asked for, and an edited one was refused as if
    # run.json were (the twenty-sixth round).
    cfg = resumed_config(saved, {"nproc": world["WORLD_SIZE"]})
    records = check_resume(run_dir, saved, cfg, local=False)
    if world["RANK"] == 0:  # the rank that appends to run.jsonl and commits run.resume.json
        mend_torn_tail(run_dir / "run.jsonl", records)
        # Removed as `resume_run` removes it: the first checkpoint would commit it to run.json.
        (run_dir / PENDING_CONFIG).unlink(missing_ok=True)


def check_not_trained(run_dir: Path, cfg: RunConfig) -> None:
    """torchrun's entry without --resume: the run has not trained (`trained`; one stopped
    before its first step starts again as prepared). A run that has is refused: a second
    start retrained it and appended a second run's records. The refusal says what can
    continue it: --resume from its checkpoint, or, without one, nothing but a new run; a
    finished run is said to be finished, as its --resume would say (the twenty-seventh round:
    the line advised a --resume that was then refused).

        check_not_trained(Path("runs/q1"), cfg)   # runs/q1: has started already (it holds …); …
    """
    if not trained(run_dir):
        return
    started = next(name for name in STARTED if (run_dir / name).exists())
    quoted = shlex.quote(str(run_dir))
    if has_checkpoint(run_dir) and (run_dir / "checkpoints" / "latest").exists():
        try:
            manifest = read_manifest(latest(run_dir))
        except PipeplanError:  # the resume's own checks say what is wrong with it
            manifest = None
        if manifest is not None:
            check_unfinished(manifest, cfg, run_dir, local=False)
    if has_checkpoint(run_dir):
        more = f"continue it with -m executor.launch {quoted} --resume"
    else:  # "--resume" was refused: "no checkpoint to resume from" (the twenty-sixth round)
        more = "it has no checkpoint to resume from: prepare a new run to train it again"
    raise BadArgumentError(f"{run_dir}: has started already (it holds {started}); {more}")


def check_log_dir(log_dir: str, run_dir: Path) -> None:
    """torchrun's entry given --log-dir by hand: a folder, or one its parent can hold, whose
    files' paths fit, and in no run directory but as the run's own logs/, or OutputError
    naming the flag before anything starts. Found by the fifty-seventh round: a file there, a
    missing parent or a path too long failed the rank (exit 1) as a log it could not open,
    the line naming no flag; by the fifty-eighth: `RUN/checkpoints` made the prepared run
    "started already" for good, and another run's folder took the logs too. `pipeplan
    run`'s own folder is checked before its ranks start."""
    check_not_stdout(log_dir, "--log-dir", "directory")
    path = Path(log_dir)
    if os.path.realpath(path) != os.path.realpath(run_dir / "logs"):
        try:
            check_outside_runs(path)
        except OutputError as exc:
            raise OutputError(f"--log-dir {exc} (the run's own: {run_dir / 'logs'})") from None
    if path.exists() and not path.is_dir():
        raise OutputError(f"--log-dir {quoted(log_dir)}: not a directory")
    if not path.exists() and not path.absolute().parent.is_dir():
        raise OutputError(
            f"--log-dir {quoted(log_dir)}: its folder {path.absolute().parent} does not exist"
        )


def rank_output(log_dir: str | None, rank: int) -> TextIO:
    """The stream for pipeplan's own lines: the console, this rank's output going to
    `log_dir/rank-R.log` when given (`rank_console`), else stderr. A log that cannot be
    opened (a link or FIFO put there after the launcher's `check_outputs`) is this rank's
    failure, reported as any other: its report, and under torchrun one line of ours.

        console = rank_output(args.log_dir, world["RANK"])
    """
    if not log_dir:
        return sys.stderr
    try:
        return rank_console(Path(log_dir), rank)
    except PipeplanError as exc:
        report = faults.write_report(exc, rank)
        if not under_pipeplan_run():  # `pipeplan run` names the rank's failure itself
            pipeplan_log.error(f"rank {rank}: {report.message}")
        os._exit(faults.exit_code(report))


def rank_console(log_dir: Path, rank: int) -> TextIO:
    """Send everything this process writes to stdout and stderr (torch's warnings, C++ logs,
    tracebacks) to `log_dir/rank-R.log`, opened only as a regular file (`open_append`:
    never through a link, never blocking on a FIFO); returns a stream on the original stderr
    for pipeplan's own lines. OutputError, with nothing redirected, if the log cannot be.

        console = rank_console(Path("runs/exp1/logs"), 1)
    """
    try:
        # Not its parents: under `pipeplan run` the folder is the run's logs/, which the
        # launcher made; a run directory moved away before its ranks started is not made
        # again (the twenty-eighth round).
        log_dir.mkdir(exist_ok=True)
    except OSError as exc:  # a file, or a link to nowhere, where the folder belongs
        raise OutputError(f"{log_dir}: cannot make the logs' folder ({exc.strerror})") from None
    fd = open_append(log_dir / f"rank-{rank}.log")
    # Never failing the rank: a closed console (`pipeplan run 2>&1 | head`) raised EPIPE at
    # the rank's last flush, after it had trained, and the run failed (the thirty-ninth round).
    console = pipeplan_log.Output(os.fdopen(os.dup(2), "w", buffering=1))
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:  # None: Python started without the descriptor
            stream.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    # A stream Python started without (its descriptor closed by whoever started the rank)
    # writes to the log too: `print` to None said nothing, a flush of it raised.
    if sys.stdout is None:
        sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115
    if sys.stderr is None:
        sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
    print(f"--- rank {rank}, pid {os.getpid()}", flush=True)  # a resume appends
    return console


def train_rank(run_dir: Path, resume: bool, console: TextIO) -> None:
    """This rank's share of the run: join the job, train, and on rank 0 write summary.json."""
    from executor.worker import Trainer, end_one_sided_waits, init_distributed

    trains(run_dir)  # its launcher holds the lock; this rank reads what it writes
    cfg = rank_config(run_dir, resume)
    if int(os.environ["LOCAL_RANK"]) == 0:  # one rank per node: /dev/shm is the node's
        remove_stale_caches()  # of runs killed before they could remove their cache
    with stoppable():  # waiting for the others takes Ctrl-C, SIGTERM and SIGHUP
        device = init_distributed(cfg.device, cfg.collective_timeout_s, start_wait(cfg))
    if not under_pipeplan_run():  # `pipeplan run`'s ranks read one folder
        check_one_run(run_dir, cfg)
    rank = dist.get_rank()
    if rank != 0 and int(os.environ["LOCAL_RANK"]) == 0 and not under_pipeplan_run():
        # Another node's copy of the run is locked too, for the run's life (rank 0 took its
        # own in `enter_run`). Where this node shares rank 0's folder, rank 0's lock holds it
        # and this claim is refused: taken after the rendezvous, rank 0 holds it by then.
        with contextlib.suppress(OutputError):
            claim_directory(run_dir)
    # A rank's plans hold --device-memory to the ranks of its node (`host_ranks`).
    host = host_ranks(cfg, under_pipeplan_run(), run_dir, resume)
    planner = RunPlanner.for_run(run_dir, cfg, host)
    trainer = Trainer(cfg, run_dir, planner, device, recalibrate=calibrate, resume=resume)
    if rank == 0:
        from executor.progress import ProgressView

        with ProgressView(trainer, console) as view:  # shown only on a terminal
            trainer.recorder.on_step = view.update
            trainer.train(resume)
    else:
        trainer.train(resume)
    # No one-sided wait follows: the heartbeats stop before the barrier, so none is still
    # writing to the store once its host (rank 0, without an agent) may have exited.
    end_one_sided_waits()
    dist.barrier()
    if rank == 0:
        trainer.check_in_place()  # run.json and summary.json: never a new folder's
        commit_config(run_dir)  # a resume that took no checkpoint has still finished
        summarize(run_dir, cfg)
    dist.destroy_process_group()


def check_one_run(run_dir: Path, cfg: RunConfig) -> None:
    """torchrun's nodes each read their own copy of the run: every rank's run.json (`cfg`, as
    this rank runs it) and data.json are rank 0's, or every rank refuses the run in one line
    naming the first rank that differs and how. Nodes prepared with another --lr or --seed
    trained one run under both, its records stating rank 0's; another --global-batch ended in
    torch's shape error (the fifty-third round).

        check_one_run(Path("runs/exp1"), cfg)
        # "runs/exp1/run.json: rank 1's differs from rank 0's: lr 0.002 there, 0.001 on rank 0; …"
    """
    data = run_dir / DATA_RECORD
    mine = (
        json.loads(dumps(cfg)),
        hashlib.sha256(data.read_bytes()).hexdigest() if data.is_file() else None,
    )
    every: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(every, mine, group=host_group())
    first, first_data = every[0]
    for other, (config, data_sha) in enumerate(every):
        if config != first:
            fields = sorted(
                k for k in first.keys() | config.keys() if first.get(k) != config.get(k)
            )
            said = "; ".join(
                f"{k} {quoted(config.get(k), 60)} there, {quoted(first.get(k), 60)} on rank 0"
                for k in fields[:3]
            )
            more = f" and {len(fields) - 3} more" if len(fields) > 3 else ""
            raise BadArgumentError(
                f"{run_dir / 'run.json'}: rank {other}'s differs from rank 0's: {said}{more}; "
                "every node runs one prepared run: copy rank 0's run directory to every node"
            )
        if data_sha != first_data:
            raise BadArgumentError(
                f"{data}: rank {other}'s differs from rank 0's (another --data, or other data "
                "files): every node runs one prepared run: copy rank 0's run directory and "
                "data to every node"
            )


def other_world(run_dir: Path, prepared: int, world: int) -> BadArgumentError:
    """A fresh run started on another world size than it was prepared for, worded once (the
    launcher's entry and each rank's check said it two ways)."""
    return BadArgumentError(
        f"WORLD_SIZE={world}: {run_dir} is prepared for {prepared} ranks; prepare it with "
        f"--nproc {world}"
    )


def rank_config(run_dir: Path, resume: bool) -> RunConfig:
    """run.json, for the world size the launcher started: a fresh run must match it; a resumed
    run is re-planned for it (rank 0 records the new size). A `pipeplan run --resume` runs
    the run.resume.json its launcher wrote; torchrun's entry never reads one (`enter_run`)."""
    pending = run_dir / PENDING_CONFIG
    ours = resume and under_pipeplan_run() and pending.exists()
    cfg = load(RunConfig, pending if ours else run_dir / "run.json")
    check_data(run_dir, cfg)  # torchrun starts ranks without `pipeplan run`'s checks
    world = int(os.environ["WORLD_SIZE"])
    if world == cfg.nproc:
        return cfg
    if not resume:
        raise other_world(run_dir, cfg.nproc, world)
    cfg = cfg.model_copy(update={"nproc": world})
    if int(os.environ["RANK"]) == 0:
        write_atomic(pending, dumps(cfg))  # run.json once a checkpoint is taken under it
    return cfg


# ----------------------------------------------------------------------------- local ranks


def run_local(cfg: RunConfig, run_dir: Path, resume: bool = False) -> RunSummary:
    """Train on `cfg.nproc` ranks of this host, started by torch's elastic launcher; returns
    the summary rank 0 wrote. RankFailedError names the rank that failed first; Ctrl-C raises
    Interrupted once every rank is gone."""
    # Before any rank starts: in a working directory removed meanwhile their shell printed
    # "sh: 0: getcwd() failed" and torch's oneMKL its fatal line (the seventy-ninth round).
    if (gone := working_directory_failure()) is not None:
        raise gone
    logs = run_dir / "logs"
    logs.mkdir(exist_ok=True)
    # What every process of the run carries: in its environment, and the ranks' lineage
    # (`exits.rank_lineage`), which an environment of its own does not take away.
    lineage = rank_lineage()  # (none under a hard limit too low to draw one)
    marks = {RUN_MARK: uuid.uuid4().hex + ("" if lineage is None else f".{lineage}")}
    args = [*RANK_SHELL[1:], marks[RUN_MARK], sys.executable, "-u", *SAFE_PATH]
    args += ["-m", "executor.launch"]
    args.append(str(run_dir))
    args += ["--log-dir", str(logs)]
    args += ["--resume"] * resume + ["--debug"] * log.isEnabledFor(logging.DEBUG)
    name_rendezvous_events_cheaply()
    stop_ranks_within_shutdown_timeout()
    launcher_log = None
    # A rank stopped (SIGSTOP) the collective timeout, killed and named: as it starts, where
    # no heartbeat exists yet and the others wait for it without a limit (the thirty-seventh
    # round: 24 h, in silence). Every rank the agent stops is woken so that it can die at once.
    watch = faults.StoppedRanks(cfg.nproc, cfg.collective_timeout_s, LAUNCHER_PID)
    stops = faults.AgentStops(watch.wake)  # the ranks the agent stopped once one had failed
    # A resume's ranks rewrite the records past its checkpoint once they train: until then
    # run.jsonl is the old run's, which places no failure of this one (`failure_line`).
    old_records = _file_state(run_dir / "run.jsonl") if resume else None
    try:
        with agent_scope(logs) as launcher_log, watch, stops, leftovers.Watch(marks):
            elastic_launch(local_config(cfg.nproc, logs), RANK_SHELL[0])(*args)
        # Every rank exited 0, one (nproc 1: the only one) before its end.
        if early := ended_early(logs, range(cfg.nproc)):
            rank, why = faults.verdict({}, cfg.collective_timeout_s, ended_early=early)
            raise RankFailedError(failure_line(rank, why, run_dir, cfg, old_records), rank)
    except ChildFailedError as exc:
        check_launch_written(run_dir, launcher_log)
        reports_in_rooms(exc.failures, logs)
        early = ended_early(logs, set(range(cfg.nproc)) - set(exc.failures))
        timeout = cfg.collective_timeout_s
        rank, why = faults.verdict(exc.failures, timeout, stops.pids, early, watch.ended)
        # A rank a tracer (gdb) holds dead is let go unreaped (`StoppedRanks`): said, as the
        # process left behind, its debugger's to reap (the thirty-eighth round: the run never
        # ended).
        line = failure_line(rank, why + watch.unreaped(), run_dir, cfg, old_records)
        raise RankFailedError(line, rank) from None
    except SignalException as exc:  # the agent has stopped every rank by now
        # Its handlers (torch's, `on_ctrl_c`, `agent_stop`) raise for whichever of a burst
        # Python runs first or last, in number order, over what the command's (`cli._stop`,
        # still installed for SIGTERM until torch's are) raised for the first that arrived:
        # that one is said (the sixty-fifth round: TERM, INT, HUP was "interrupted").
        signum = first_arrived(exc.sigval)
        earlier = exc.__context__
        while earlier is not None:
            if isinstance(earlier, (Stopped, Interrupted)):
                signum = getattr(earlier, "signum", signal.SIGINT)  # the earliest raised
            earlier = earlier.__context__
        if signum == signal.SIGINT:
            raise Interrupted from None
        raise Stopped(signum) from None  # SIGTERM, SIGUSR1, …: every rank is gone
    except (RuntimeError, RendezvousError) as exc:
        raise NotStartedError(rendezvous_failure(exc)) from None
    finally:
        # What the ranks' code left running or stopped, however they ended (the seventy-
        # eighth round: a data code's child that stopped itself outlived the run).
        # Said on a run that ended well; a failure's line stays the only one.
        left = faults.end_left_behind(watch.alive)
        # and what went where no session shows it (a session of its own, a daemon's parent)
        left += [pid for pid in leftovers.end_marked(marks) if pid not in left]
        # Those the command adopted (`exits.adopt_orphans`) reaped, not killed and said again
        # as the data code's at its end (`exits.end_children`).
        reaped(left)
        if left:
            said = log.warning if sys.exc_info()[0] is None else log.debug
            said("the ranks' code left %s running or stopped: killed", processes(left))
        # However the ranks ended, their AutoCache goes as at a normal end: a rank killed by
        # SIGTERM (at once: it may be blocked in a collective) or SIGKILL could not remove it.
        # A run directory moved away mid-run is cleaned where it is now: what is at its old
        # path (a folder made there since) is not the run's.
        here = where_now(run_dir) if moved_away(run_dir) else run_dir
        if here is not None:
            remove_run_caches(here)
            remove_report_rooms(here / "logs")
            remove_partial(here)  # and the checkpoint or model folder a killed rank 0 wrote
        # And the scratch in TMPDIR of processes gone: a rank ended by a signal ran no exit
        # callbacks, and its forked children's report folder stayed (the seventy-eighth round).
        remove_left_scratch()
    return load(RunSummary, run_dir / "summary.json")


def error_file(logs: Path, rank: int) -> Path:
    """`error_file(run_dir / "logs", 1)` → runs/k/logs/rank-1.error.json: where `pipeplan
    run`'s rank reports its failure (torch's `TORCHELASTIC_ERROR_FILE`, `RankLogs`)."""
    return logs / f"rank-{rank}.error.json"


def reports_in_rooms(failures: dict[int, Any], logs: Path) -> None:
    """The report of each failed rank (torch's `ProcessFailure`, by global rank) that torch's
    agent found no error file of, where the rank wrote it into the file's room but could not
    rename it there (`errorfile.read_room`): its folder made read-only mid-run. Found by the
    sixty-fifth round: the line said "exited with code 1", the cause ("Read-only file
    system") in the rank's log alone.

        reports_in_rooms(exc.failures, run_dir / "logs")   # as ChildFailedError is caught
    """
    for rank, failure in failures.items():
        if faults.Report.from_error_data(failure.error_file_data) is not None:
            continue
        if (data := errorfile.read_room(error_file(logs, rank))) is not None:
            failure.error_file_data = data


def ended_early(logs: Path, ranks: Iterable[int]) -> list[int]:
    """Of `ranks`, which exited 0 (torch's agent lists them nowhere), those that ended before
    their part of the run did: their report's room is still in `logs` (`errorfile.room_left`;
    run it before `remove_report_rooms`).

        ended_early(run_dir / "logs", [1])   # [1]: os._exit(0) in its data code
    """
    return [rank for rank in ranks if errorfile.room_left(error_file(logs, rank))]


def remove_report_rooms(logs: Path) -> None:
    """`remove_report_rooms(run_dir / "logs")` once every rank is gone: the rooms of the
    reports the ranks did not write (`errorfile.reserve`; a rank killed by the agent's SIGTERM
    or by SIGKILL left its own)."""
    for room in logs.glob("rank-*.error.json.tmp"):
        with contextlib.suppress(OSError):
            room.unlink()


class NotStartedError(OutputError):
    """The run's directory could not be written as its ranks started (a full disk), or torch's
    rendezvous failed before any rank ran (`rendezvous_failure`): nothing was trained, and
    `start_run` removes what it made."""


def rendezvous_failure(exc: BaseException) -> str:
    """The line for torch's agent failing to start the ranks: its rendezvous (the store it
    hosts, its threads) raised before any rank ran, naming memory where the address space is
    capped. Found by the sixty-fifth round: under `ulimit -v 1200000` the store's thread could
    not start, a 71-line traceback ending "RuntimeError: Resource temporarily unavailable",
    exit 1.

        rendezvous_failure(RuntimeError("Resource temporarily unavailable"))
        # "could not start the ranks: torch's rendezvous failed (Resource temporarily
        #  unavailable); each process's address space is capped at 1171 MiB (ulimit -v): raise it"
    """
    while exc.__cause__ is not None:  # "The connection to the C10d store has failed. See
        exc = exc.__cause__  # inner exception for details.": the store's own error is why
    lines = str(exc).strip().splitlines()
    why = lines[-1].rsplit("] ", 1)[-1] if lines else type(exc).__name__  # no C++ location
    return f"could not start the ranks: torch's rendezvous failed ({why}){address_space_capped()}"


def check_launch_written(run_dir: Path, launcher_log: pipeplan_log.FileHandler | None) -> None:
    """After the ranks failed: where the launcher could not write its own log (the agent logs
    every failure), and no rank has recorded a step, the run failed because its directory
    cannot be written (a full disk: the ranks could not even write their logs or reports).
    NotStartedError naming the folder, not a rank's exit code or a missing run.jsonl.

        check_launch_written(Path("runs/fd2"), launcher_log)   # runs/fd2: write failed (…)
    """
    failure = None if launcher_log is None else launcher_log.failure
    if failure is None or (run_dir / "run.jsonl").exists():
        return
    reason = write_failure(failure, run_dir) or str(failure)
    raise NotStartedError(f"{run_dir}: write failed ({reason})")


def name_rendezvous_events_cheaply() -> None:
    """torch's rendezvous names the caller of each of its events with `inspect.stack()`, twice
    an event, which reads the source file of every frame on the stack: about 1.2 s of CPU per
    run started from a deep stack (a notebook, a test), for a name nobody logs here. The same
    name read from the frame itself (`inspect.stack()[depth]` is `sys._getframe(depth)`)."""
    from torch.distributed.elastic.rendezvous import dynamic_rendezvous

    def get_method_name(depth: int = 2) -> str:
        try:
            return sys._getframe(depth).f_code.co_name
        except ValueError:  # a stack shallower than depth, as torch's own answer
            return "no_method_name"

    dynamic_rendezvous.get_method_name = get_method_name


def stop_ranks_within_shutdown_timeout() -> None:
    """torch's agent stops the ranks still running once one has failed with 30 s before
    SIGKILL (`PContext.close`'s default, from the poll that saw the failure, and its
    `_stop_workers`), not the config's `shutdown_timeout` (SHUTDOWN_S), which it keeps for a
    signal to itself: a rank blocked in C as the ranks connected (gloo's full mesh, where no
    handler runs) held the run's line 30 s (forty-eighth round). Every stop of the ranks of
    this process's agents takes at most SHUTDOWN_S.

        stop_ranks_within_shutdown_timeout()   # once, before `elastic_launch`
    """
    from torch.distributed.elastic.multiprocessing.api import PContext

    if getattr(PContext.close, "_pipeplan", False):
        return
    close = PContext.close

    def bounded_close(self, death_sig=None, timeout: int = SHUTDOWN_S) -> None:
        close(self, death_sig, min(timeout, SHUTDOWN_S))

    bounded_close._pipeplan = True  # type: ignore[attr-defined]
    PContext.close = bounded_close


def local_config(nproc: int, logs: Path) -> LaunchConfig:
    """torch's LaunchConfig for `nproc` ranks on this host (as `torchrun --standalone`: a
    rendezvous store on a free port), no restarts: a failed rank fails the run, and
    `--resume` continues it."""
    return LaunchConfig(
        min_nodes=1,
        max_nodes=1,
        nproc_per_node=nproc,
        run_id=f"pipeplan-{uuid.uuid4().hex}",
        rdzv_backend="c10d",
        rdzv_endpoint="localhost:0",
        max_restarts=0,
        monitor_interval=0.1,
        logs_specs=RankLogs(logs),
        **_newer_fields(shutdown_timeout=SHUTDOWN_S, signals_to_handle=agent_handles()),
    )


def agent_handles() -> str:
    """The signals torch's agent takes over for the run (LaunchConfig's `signals_to_handle`):
    AGENT_HANDLES but those this process ignores (`startup.ignored`), which stay ignored."""
    left_out = {signal_name(signum) for signum in ignored(STOP_SIGNALS)}
    return ",".join(name for name in AGENT_HANDLES if name not in left_out)


def _newer_fields(**fields) -> dict:
    """The LaunchConfig fields this torch has: a GPU image's torch may be older than the pin
    (torch 2.11's has neither of these, and runs with its defaults: a 30 s shutdown)."""
    known = {f.name for f in dataclasses.fields(LaunchConfig)}
    return {name: value for name, value in fields.items() if name in known}


class RankLogs(LogsSpecs):
    """Where torch's agent points each rank: its error file is `logs/rank-R.error.json`, a
    fresh one per start; stdout and stderr stay the rank's own (it redirects them itself,
    keeping the console for pipeplan's lines).

        LaunchConfig(..., logs_specs=RankLogs(Path("runs/exp1/logs")))
    """

    def __init__(self, logs: Path):
        super().__init__(log_dir=str(logs))
        self.logs = logs

    @property
    def root_log_dir(self) -> str:
        return str(self.logs)

    def reify(self, envs: dict[int, dict[str, str]]) -> LogsDest:
        errors = {}
        for local_rank, env in envs.items():
            path = error_file(self.logs, int(env["RANK"]))
            path.unlink(missing_ok=True)  # a report from an earlier start is not this one's
            Path(f"{path}.tmp").unlink(missing_ok=True)  # nor its room (`errorfile`)
            env["TORCHELASTIC_ERROR_FILE"] = errors[local_rank] = str(path)
        console = dict.fromkeys(envs, "")  # "": the process's own stdout and stderr
        return LogsDest(stdouts=console, stderrs=dict(console), error_files=errors)


@contextlib.contextmanager
def agent_scope(logs: Path) -> Iterator[pipeplan_log.FileHandler]:
    """While torch's agent runs in this process: its log lines go to `logs/launcher.log`, not
    the console; the ranks import the executor this process imported and know its pid;
    Ctrl-C is marked for them (`on_ctrl_c`); and the signal handlers and environment the
    agent changes are put back afterwards (the CLI's Ctrl-C, or pytest's). Yields the log's
    handler: its `failure` is a write to launcher.log that failed (a full disk), never printed.

        with agent_scope(logs) as launcher_log: ...
    """
    # pipeplan's handler: logging's printed a 100-line traceback for each record it could not
    # write, and its close raised the full disk's OSError over the rank's failure. Opened
    # first (a regular file only, `open_append`): a refusal leaves nothing here changed.
    file_handler = pipeplan_log.FileHandler(logs / "launcher.log")
    handlers = {sig: signal.getsignal(sig) for sig in AGENT_SIGNALS}
    env = {key: os.environ.get(key) for key in AGENT_ENV}
    root = str(Path(executor.__file__).resolve().parents[1])
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env["PYTHONPATH"]]))
    os.environ[LAUNCHER_PID] = str(os.getpid())
    os.environ[RUN_DIR_ID] = directory_id(str(logs.parent))  # the folder this process claimed
    mark = logs / "interrupted"
    mark.unlink(missing_ok=True)  # left by a launcher killed after a Ctrl-C: not this one's
    if ignored((signal.SIGINT,)):  # no Ctrl-C to mark: the ranks keep it ignored (`kept_ignored`)
        os.environ.pop(INTERRUPTED, None)
    else:
        os.environ[INTERRUPTED] = str(mark)
    if threading.current_thread() is threading.main_thread():  # no handlers elsewhere
        forget_arrivals()  # a stop from here on is `run_local`'s (`startup.first_arrived`)
        ours = {signal.SIGINT: on_ctrl_c(mark), **dict.fromkeys(AGENT_UNNAMED, agent_stop)}
        for sig in set(ours) - set(ignored(tuple(ours))):  # an ignored one stays ignored
            signal.signal(sig, ours[sig])
    file_handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    loggers = {logger: logger.propagate for logger in map(logging.getLogger, AGENT_LOGGERS)}
    for logger in loggers:
        logger.addHandler(file_handler)
        logger.propagate = False
    # Python's random numbers too: the agent's rendezvous draws its delay from them
    # (`random.uniform`), and a seeded caller's own draws after `pipeplan.run()` differed from
    # those of the same program without it (the sixty-fourth round). torch's are kept apart
    # where pipeplan draws them (`torch.random.fork_rng`); numpy's the agent does not draw.
    numbers = random.getstate()
    try:
        yield file_handler
    finally:
        random.setstate(numbers)
        for logger, propagate in loggers.items():
            logger.removeHandler(file_handler)
            logger.propagate = propagate
        file_handler.close()
        for key, value in env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        if threading.current_thread() is threading.main_thread():
            for sig, handler in handlers.items():
                signal.signal(sig, handler)
        # Every rank is gone: none will look for it. Not in a folder that is no longer the
        # run's (a file or a FIFO put at its path: "runs/r/logs/interrupted: Not a directory"
        # was the run's line, over where it went, in the forty-seventh round).
        if not moved_away(logs.parent):
            with contextlib.suppress(OSError):
                mark.unlink(missing_ok=True)


class NamedSignal(int):
    """A signal number with a `name`, as torch's agent takes it (`.name` in its log lines,
    the number to send on): Python's `signal.Signals` has no member for SIGRTMIN+1 ….

        NamedSignal(35).name   # "SIGRTMIN+1"
    """

    @property
    def name(self) -> str:
        return signal_name(self)


def agent_stop(signum: int, frame: Any) -> None:
    """What torch's own handler does for the stop signals it takes by name, for those it
    cannot name (AGENT_UNNAMED: the real-time signals between the first and the last): raise
    SignalException, on which the agent sends the signal on to every rank, waits for them,
    and raises it here (`Stopped`: `pipeplan: stopped by SIGRTMIN+1`)."""
    raise SignalException(
        f"Process {os.getpid()} got signal: {signal_name(signum)}", NamedSignal(signum)
    )


def on_ctrl_c(mark: Path) -> Callable[[int, Any], None]:
    """The launcher's SIGINT handler while torch's agent runs: create `mark`, then raise what
    torch's own handler raises, on which the agent forwards SIGINT to every rank. A rank still
    starting ignores SIGINT (RANK_SHELL) and finds the mark instead.

        signal.signal(signal.SIGINT, on_ctrl_c(logs / "interrupted"))
    """

    def handler(signum: int, frame: Any) -> None:
        # The ranks are stopped anyway, if more slowly.
        with contextlib.suppress(OSError, OutputError):
            os.close(open_append(mark))  # never through a link (`check_outputs` refuses one)
        raise SignalException(f"Process {os.getpid()} got signal: SIGINT", signal.SIGINT)

    return handler


def failure_line(
    rank: int, why: str, run_dir: Path, cfg: RunConfig, old_records: tuple | None = None
) -> str:
    """`training failed on rank 1 at step 7: killed by SIGKILL; rank logs in runs/k/logs;
    resume with: pipeplan run --resume runs/k` (with the flags `resume_command` carries). A
    failure after the final checkpoint (writing model/ or summary.json) has nothing left to
    train (`check_unfinished` refuses its resume): the line says how to export the model
    instead. A run directory moved or deleted while the ranks trained: `moved_line`.
    `old_records`: a resume's run.jsonl as it started (`_file_state`); still so, the resume
    failed before its first step. Found by the thirty-sixth round: a resume from step-4 of a
    run whose records went on to step 5 said "after step 5, at the end of epoch 2 or at step
    6", the old run's place, steps the resume never reached."""
    if moved_away(run_dir):
        return moved_line(run_dir, cfg)
    # A rank names the data as run.json records it, absolute: said as the user gave it, as
    # the launcher's checks say it (forty-eighth round: "data '/tmp/w/d/m.py:load'" from a
    # rank, "data 'd/m.py:load'" from the launcher). A resume's is run.json's: no change.
    recorded = absolute_paths(cfg).data
    why = why.replace(recorded, cfg.data) if recorded != cfg.data else why
    if old_records is not None and _file_state(run_dir / "run.jsonl") == old_records:
        at = " before the resume's first step"
    elif why.startswith(DIVERGED) and BEFORE_ANY_UPDATE in why:
        at = ""  # "at step 0 (epoch 1), before any update" places it: not twice
    else:
        at = _placed(run_dir, cfg)
    # Where it failed comes before why: after it, "(at step 4)" read as part of the reason
    # ("… the last checkpoint written, step-2, is kept (at step 4)").
    line = f"training failed on rank {rank}{at}: {why}; rank logs in {run_dir / 'logs'}"
    if why.startswith(DIVERGED) and BEFORE_ANY_UPDATE not in why:
        # A resume keeps the run's --lr and diverges again (forty-seventh round: the line
        # said both "lower --lr" and "resume with", and the resume said it again).
        return line + "; a resume keeps its --lr: start a new run (another --name) to lower it"
    return line + what_next(run_dir, cfg)


# What every command reading a run's checkpoints reads with them (`what_next`), and data.json
# where the run's data reads files (`own_files_gone`).
RUN_OWN_FILES = ("run.json", "run.jsonl", "profile.json")


def own_files_gone(run_dir: Path, cfg: RunConfig) -> list[str]:
    """The files of RUN_OWN_FILES, and data.json where the data reads files (`check_data`
    refuses a resume or an export without it, or replaced: `data_record_lost`), that are no
    longer in `run_dir`. Said in a failure's line: data whose files cannot be listed now (a
    tokenizer folder gone) is left to the resume's own checks."""
    try:
        reads = bool(read_files(cfg))
    except (PipeplanError, OSError):
        reads = False
    gone = [name for name in RUN_OWN_FILES if not (run_dir / name).exists()]
    return gone + ([DATA_RECORD] if reads and data_record_lost(run_dir) else [])


def data_record_lost(run_dir: Path) -> str | None:
    """How data.json no longer vouches for the run's data, or None: "removed", or "replaced"
    where the latest checkpoint's record of it refuses it now (`check_data_kept`, as export
    and resume hold it). Found by the fifty-eighth round: data.json replaced while the run
    trained let it end well (exit 0), and every later command refused it."""
    if not (run_dir / DATA_RECORD).exists():
        return "removed"
    try:
        manifest = read_manifest(latest(run_dir))
    except (PipeplanError, OSError):  # no checkpoint (yet): nothing holds data.json
        return None
    try:
        check_data_kept(run_dir, manifest, manifest_path(run_dir, manifest))
    except (PipeplanError, OSError):
        return "replaced"
    return None


def what_next(run_dir: Path, cfg: RunConfig) -> str:
    """What a failed run's line says to do with `run_dir` (`failure_line`): "; resume with:
    pipeplan run --resume runs/k", "; no checkpoint to resume from: delete runs/k to start it
    again", "; every epoch was trained: its model: pipeplan export …", or "" (a checkpoint
    without its pointer: the resume's checks say what to do)."""
    shown = shlex.quote(str(run_dir))
    gone = own_files_gone(run_dir, cfg)
    if has_checkpoint(run_dir) and gone:
        # Removed while the ranks trained (the fifty-fifth and fifty-sixth rounds: the line
        # said to export a run every command then refused): the checkpoints are read with them.
        state = "was replaced" if data_record_lost(run_dir) == "replaced" else "is gone"
        state = "is gone" if gone[0] != DATA_RECORD else state
        return f"; its {gone[0]} {state}, so no command reads it now: delete {shown} to start again"
    if not has_checkpoint(run_dir):
        # Neither resumable nor a name a new run takes (its logs say why it failed): said,
        # where the line named nothing to do (the twenty-sixth round).
        return f"; no checkpoint to resume from: delete {shown} to start it again"
    if not (run_dir / "checkpoints" / "latest").exists():
        return ""
    try:
        manifest = read_manifest(latest(run_dir))
    except PipeplanError:  # the resume's own checks say what is wrong with it
        manifest = None
    if manifest is not None and finished(manifest, cfg):
        return f"; every epoch was trained: its model: pipeplan export {shown} --out DIR"
    return f"; resume with: {resume_command(run_dir, cfg)}"


def moved_line(run_dir: Path, cfg: RunConfig) -> str:
    """The line of a run whose directory moved away from `run_dir` (or was deleted) while its
    ranks trained. They stop at the next step or write (`Trainer.check_in_place`), never
    making the path again, and the failing rank's report went with the folder (or nowhere):
    its "exited with code 1" said nothing. Read where it was, the run looked untrained, and
    the line said to delete it (the twenty-seventh round); it trained to the end and re-made
    the path with a second half-run (the twenty-eighth). Where the folder is now
    (`where_now`): the step its records reached, and what to do with it there; else (deleted,
    or the kernel does not say) that it is gone from here:

        moved_line(Path("runs/k"), cfg)
        # training stopped at step 15: runs/k: the run directory moved to runs/k2 while it
        # trained; resume with: pipeplan run --resume runs/k2
    """
    now = where_now_as_named(run_dir)
    if now is None:
        return (
            f"training stopped: {run_dir}: the run directory moved or was deleted while it "
            "trained; if it was moved, resume it where it is now with `pipeplan run --resume "
            "NEWPATH`"
        )
    at = _placed(now, cfg)
    if not str(now).isprintable():  # a line feed split the line, an ESC reached the terminal
        return (  # and the command a resume takes refuses it (thirtieth round)
            f"training stopped{at}: {run_dir}: the run directory moved to {quoted(str(now))} "
            "while it trained; rename it to a printable name, then resume it there with "
            "`pipeplan run --resume NEWPATH`"
        )
    line = f"training stopped{at}: {run_dir}: the run directory moved to {now} while it trained"
    return line + what_next(now, cfg)


def resume_command(run_dir: Path, cfg: RunConfig) -> str:
    """The command that continues `run_dir` as the failed command (`cfg`: what it ran) would
    have: `pipeplan run --resume runs/k`, with each RESUME_FLAGS setting of `cfg` that
    run.json does not hold now. A resume for more epochs (or on another world) that fails
    before its first checkpoint leaves run.json as it was: the bare command was refused
    ("finished all its 2 epochs; give --epochs N > 2") or trained another configuration (the
    twenty-fifth round).

        resume_command(Path("runs/k"), cfg)   # "pipeplan run --resume runs/k --epochs 3"
    """
    try:
        saved = load(RunConfig, run_dir / "run.json")
    except PipeplanError:  # the resume's own checks say what is wrong with it; keep them all
        saved = None
    flags = [
        f" {saved_setting(cfg, field)}"  # numbers: nothing to quote
        for field in RESUME_FLAGS
        if saved is None or getattr(saved, field) != getattr(cfg, field)
    ]
    return f"pipeplan run --resume {shlex.quote(str(run_dir))}" + "".join(flags)


def _steps_per_epoch(run_dir: Path, cfg: RunConfig) -> int | None:
    """The run's steps per epoch from data.json's facts, else from a phase record's horizon
    (its samples an epoch: whole global batches); None where neither can be read. Data that
    reads no file (the built-in sets) has no data.json: a rank stopped in epoch 1's
    evaluation was said "at step 4", a step never started (forty-eighth round)."""
    try:
        record = read_data_record(run_dir)
    except (PipeplanError, OSError):
        record = None
    if record is not None and record.facts is not None:
        return cfg.steps_per_epoch(record.facts.train_samples)
    try:
        records = read_records(run_dir / "run.jsonl", notice=False)
    except (PipeplanError, OSError):
        return None
    for phase in (r for r in records if isinstance(r, PhaseRecord)):
        horizon = phase.pricing.horizon
        if horizon is not None:
            return horizon.samples // cfg.global_batch
    return None


def _file_state(path: Path) -> tuple | None:
    """What tells a file rewritten: (size, modification time, inode); None if it is not there."""
    try:
        stat = path.stat()
    except OSError:
        return None
    return stat.st_size, stat.st_mtime_ns, stat.st_ino


def _placed(run_dir: Path, cfg: RunConfig) -> str:
    """`failed_at` for the run in `run_dir`, told what `cfg` says of its epochs and cadences
    (run.json's: a resume cannot change them)."""
    return failed_at(
        run_dir / "run.jsonl",
        _steps_per_epoch(run_dir, cfg),
        cfg.epochs,
        checkpoint_every=cfg.checkpoint_every,
        freeze_every=cfg.freeze_every,
    )


def failed_at(
    records: Path,
    steps_per_epoch: int | None = None,
    epochs: int | None = None,
    *,
    checkpoint_every: int | None = None,
    freeze_every: int | None = None,
) -> str:
    """Where in training a rank failed, from run.jsonl: " at step 7", " before the first step"
    where no step is recorded (or run.jsonl is not there yet: a rank that died as it started),
    " after step 5, at the end of epoch 2" where step 5 ended its epoch (`steps_per_epoch`)
    and the epoch's record is missing: its evaluation, gradient norms or forecast failed,
    not step 6 (the thirty-third round); after an epoch's record, `_after_epoch` (`epochs`:
    the run's, to know its last); within an epoch, after a step the run's cadences
    (--checkpoint-every, --freeze-every) follow with their work, `_after_step`; "" where
    the records cannot be read (the resume's checks say why). A rank's failure is
    reported as that, never as a fault of the records read to place it. Without the notice
    of a torn last record: a failure's line, or a refusal of a resume or of torchrun's entry
    (`trained`), is the only line, where the notice came before it (the twenty-seventh
    round); the resume's checks, which read the records again, give it if they pass.

        failed_at(Path("runs/k/run.jsonl"))   # " at step 7"
    """
    if not records.exists():  # not there yet, or removed while the ranks trained
        return "" if has_checkpoint(records.parent) else NO_STEP
    try:
        read = read_records(records, notice=False)
    except PipeplanError:
        return ""
    steps = [i for i, r in enumerate(read) if isinstance(r, STEP_RECORDS)]
    if not steps:
        return NO_STEP
    last = read[steps[-1]]
    ended = {r.epoch for r in read if isinstance(r, EpochRecord)}
    if last.epoch in ended:  # written once the epoch's every step is: step N ended it
        return _after_epoch(last, read[steps[-1] + 1 :], epochs)
    if steps_per_epoch and (last.step + 1) % steps_per_epoch == 0:
        return f" after step {last.step}, at the end of epoch {last.epoch + 1}"
    return _after_step(last, read[steps[-1] + 1 :], checkpoint_every, freeze_every)


def _after_step(
    last: StepRecord, later: list, checkpoint_every: int | None, freeze_every: int | None
) -> str:
    """Where a failure after `last`, a step within its epoch, happened (`later`: the records
    after it). The run's cadences say what followed the step (`Trainer.train`, `due`: after
    every N-th step, counted from the run's start): a freeze decision (--freeze-every), its
    transition where the freeze point moved (the new phase's record written once it is
    entered) and that transition's checkpoint, or a --checkpoint-every checkpoint. None
    leaves a record once done, as the next step's start leaves none: both are named. Found
    by the thirty-fifth round: a checkpoint that failed after step 1 (a full disk) was said
    "at step 2", a step never started. A resume's phase among them: the resume had entered
    it, so at the next step.

        _after_step(last, [], 2, None)   # " after step 5, writing its checkpoint, or at step 6"
    """
    n = last.step
    if any(isinstance(r, PhaseRecord) and r.resumed for r in later):
        return f" at step {n + 1}"
    decides = bool(freeze_every) and (n + 1) % freeze_every == 0
    checkpoints = bool(checkpoint_every) and (n + 1) % checkpoint_every == 0
    if decides and any(isinstance(r, PhaseRecord) for r in later):
        work = "writing its new phase's checkpoint"  # the freeze point moved: a checkpoint
    elif decides:  # the decision, a transition before its record, or a checkpoint after none
        work = "at its freeze decision, transition or checkpoint"
        if not checkpoints:
            work = "at its freeze decision or transition"
    elif checkpoints:
        work = "writing its checkpoint"
    else:
        return f" at step {n + 1}"
    return f" after step {n}, {work}, or at step {n + 1}"


def _after_epoch(last: StepRecord, later: list, epochs: int | None) -> str:
    """Where a failure after `last`, the step that ended its epoch, and the epoch's record
    happened (`later`: the records after the step). A resume's phase among them: the resume
    had entered it, so at the next step. After the run's last epoch: its end (the final
    checkpoint, model/, summary.json), not a step: a 6-step run "failed at step 6", a step
    that does not exist (the thirty-fifth round). Otherwise the epoch's end work (the freeze
    decision, its transition, the epoch's checkpoint) and the next step's start leave no
    record apart: both are named, where the line named the next step alone.

        _after_epoch(last, [], 2)   # " after step 5, at the end of epoch 1 or at step 6"
    """
    n = last.step
    if any(isinstance(r, PhaseRecord) and r.resumed for r in later):
        return f" at step {n + 1}"
    if epochs is not None and last.epoch + 1 >= epochs:
        return f" after the last step (step {n}), writing the final checkpoint, model or summary"
    return f" after step {n}, at the end of epoch {last.epoch + 1} or at step {n + 1}"


NO_STEP = " before the first step"  # `failed_at`'s answer for a run that recorded no step


# ----------------------------------------------------------------------------- the command


def summarize(run_dir: Path, cfg: RunConfig) -> RunSummary:
    """Measured vs predicted step time per phase, from run.jsonl; written to summary.json. A
    record the run's readers need, removed while it trained, fails it: the run would end well
    and every later command refuse it (the fifty-sixth round, of data.json)."""
    if not (run_dir / "run.jsonl").exists():  # `make_report` would take it for a run starting
        raise InputFileError(
            f"{run_dir / 'run.jsonl'}: removed while the run trained; the run's records are lost"
        )
    if DATA_RECORD in own_files_gone(run_dir, cfg):
        raise InputFileError(
            f"{run_dir / DATA_RECORD}: {data_record_lost(run_dir)} while the run trained; a "
            "resume or an export can no longer tell the data was kept"
        )
    report = make_report(run_dir)
    summary = RunSummary(
        name=report.name,
        total_s=report.training_s,
        steps=report.steps,
        final_eval_accuracy=report.final_eval_accuracy,
        phases=phase_summaries(report.phases),
    )
    write_atomic(run_dir / "summary.json", dumps(summary))
    return summary


# What `--resume` changes in the saved run when given (executor.checkpoint.RESUMABLE: why). Any
# other flag would change what the checkpoint's state means: refused, naming it, rather than
# ignored; a run.json edited so is refused by `check_trained_with`.
RESUME_FLAGS = RESUMABLE


def _same_files(given: RunConfig, saved: RunConfig, field: str) -> bool:
    """Whether the path flag `field` given to `--resume` (made absolute as run.json's are)
    names the files the saved one names, by where each path leads (a data module's function
    the same too). Found by the seventy-second round: a project moved with a link left at
    its old path, resumed through the link with its own `--data train.jsonl`, was refused as
    a change of --data (run.json's paths read through the link, the working directory is the
    folder it leads to). What the files hold is data.json's sha256's to check."""
    ours, theirs = recorded_paths(given).get(field), recorded_paths(saved).get(field)
    if not ours or theirs is None or len(ours) != len(theirs):  # no path, or another count
        return False
    function = given.data.rpartition(":")[2] != saved.data.rpartition(":")[2]
    if field == "data" and not is_text_spec(saved.data) and function:
        return False  # another function of the module
    return all(
        os.path.realpath(mine) == os.path.realpath(was)
        for mine, was in zip(ours, theirs, strict=True)
    )


def resumed_config(
    saved: RunConfig, given: dict[str, Any], run_dir: Path | None = None
) -> RunConfig:
    """`resumed_config(saved, {"epochs": 8}, Path("runs/exp1"))`: the saved configuration with
    the flags given to `--resume` applied (RESUME_FLAGS), validated as a fresh run's;
    BadArgumentError naming the first flag that cannot be applied. With `run_dir`, the run's
    folder, a flag the run left to its model (OWN_SETTINGS) given as the model's own that the
    run took (`own_setting`) is no change either: run.json keeps its null."""
    changed = {k: v for k, v in given.items() if getattr(saved, k, None) != v}
    owns: dict[str, tuple[Any, str]] = {}  # field → `own_setting`, read where a flag gives it
    for field in [f for f in changed if f in OWN_SETTINGS and getattr(saved, f) is None]:
        # `--task classification` beside a run that took classification from its data was
        # refused as a change of a null (the task, sequence length and dropout alike).
        if run_dir is not None:
            owns[field] = own_setting(run_dir, saved, field)
            if owns[field][0] is not None and owns[field][0] == changed[field]:
                del changed[field]
    for field in [f for f in changed if f not in RESUME_FLAGS and f != "freeze"]:
        # (`freeze` below: `0,0,0` and `0,1` are both freeze=list, which this compared alone)
        # A path as the run was started (`--data train.jsonl`), which run.json holds absolute
        # (`absolute_paths`): the same, not a change (the seventy-first round: refused).
        try:
            spelled = absolute_paths(build(RunConfig, {**saved.model_dump(), field: given[field]}))
        except PipeplanError:
            continue
        if getattr(spelled, field) == getattr(saved, field) or _same_files(spelled, saved, field):
            del changed[field]
    if "freeze" in changed and saved.freeze == "list" and isinstance(changed["freeze"], str):
        # `--freeze 0,2,4` is stored as freeze=list with the layers: the same list is no change.
        # Built without the saved layers: with them, `--freeze none` or `auto` kept the run's
        # list as its own and compared equal, and the resume trained the old schedule without
        # a word (the seventy-seventh round).
        without = saved.model_dump(exclude={"freeze_list"})
        given_list = build(RunConfig, {**without, "freeze": changed["freeze"]})
        if (given_list.freeze, given_list.freeze_list) == (saved.freeze, saved.freeze_list):
            del changed["freeze"]
    for field in changed:
        if field not in RESUME_FLAGS:
            flag = flag_of(RunConfig, field)
            allowed = ", ".join(flag_of(RunConfig, f) for f in RESUME_FLAGS)
            was = saved_setting(saved, field)
            # What the run took where it left the flag out: "left out" alone named no value.
            own = f": the model's own, {owns[field][1]}" if field in owns else ""
            raise BadArgumentError(
                f"{flag}: --resume continues the run as it was saved ({was} in its run.json"
                f"{own}) and cannot change {flag} (only {allowed}); start a new run for that"
            )
    if changed.get("epochs", saved.epochs) < saved.epochs:
        raise BadArgumentError(
            f"--epochs {changed['epochs']}: the run has {saved.epochs}; --resume can add epochs, "
            "not remove them"
        )
    return build(RunConfig, {**saved.model_dump(), **changed})


# The flags a run may leave to its model ("the model's own": null in run.json), each taken as
# the run was prepared and recorded where a resume holds it (`own_setting`).
OWN_SETTINGS = ("task", "seq_len", "dropout")


def own_setting(run_dir: Path, saved: RunConfig, field: str) -> tuple[Any, str]:
    """What the run at `run_dir` (its run.json `saved`) took for `field` of OWN_SETTINGS, left
    out when it started: the value a flag equal to it gives (None where no flag gives it), and
    the words a refusal names it in.

        own_setting(Path("runs/exp1"), saved, "task")      # ("classification", "classification")
        own_setting(Path("runs/exp1"), saved, "seq_len")   # (32, "32")
        own_setting(Path("runs/exp1"), saved, "dropout")   # (0.1, "0.1")

    The task and the sequence length are the run's profile.json's (RUN_PROFILE): the input
    it was prepared for, which a resume holds the model it builds to (`check_profile_fits`);
    the task follows the data too, so the model alone does not say it. The dropout is the
    model's config (`models.own_dropouts`), which a profile does not hold a run to (only its
    shape), the folder's config.json held to the run first as `check_run_model` holds it:
    one value where every dropout key has it, else none (any --dropout sets them all alike).
    """
    from executor.planning import check_model_config
    from pipeplan import models

    if field == "dropout":
        check_model_config(saved)  # edited since the run: not the dropout it took
        own = models.own_dropouts(saved.model)
        values = set(own.values())
        if len(values) == 1:
            (value,) = values
            return value, json.dumps(value)
        return None, ", ".join(f"{key} {json.dumps(value)}" for key, value in own.items())
    model = load(Profile, run_dir / RUN_PROFILE).model
    if field == "task":
        return model.task, model.task
    if model.input_dtype != "int64":  # an image model's input is its images' size
        return None, "none for an image model"
    return model.input_shape[0], str(model.input_shape[0])


def saved_setting(saved: RunConfig, field: str) -> str:
    """How a run's `field` was set, as its flag: what a refusal of another value names.

    saved_setting(saved, "init")     # "--init left out"
    saved_setting(saved, "cache")    # "--no-cache"
    saved_setting(saved, "freeze")   # "--freeze 0,2" (a list), "--freeze auto"
    """
    flag, value = flag_of(RunConfig, field), getattr(saved, field)
    if field == "freeze" and value == "list":
        value = ",".join(map(str, saved.freeze_list or []))
    if value is None:
        return f"{flag} left out"
    if isinstance(value, bool):
        return flag if value else "--no-" + flag[2:]
    return f"{flag} {value}"


def check_resume(path: Path, saved: RunConfig, cfg: RunConfig, local: bool = True) -> list:
    """Every check a resume of the run at `path` passes before any rank trains, the same for
    `pipeplan run --resume` and torchrun's `-m executor.launch RUN --resume`: `saved` is its
    run.json, `cfg` what the resume runs (`resumed_config`), `local` as for `check_run`.
    Returns run.jsonl's records; PipeplanError with one line if the run cannot resume.

        records = check_resume(Path("runs/exp1"), saved, resumed_config(saved, {"epochs": 4}))
    """
    from executor.checkpoint import load_latest

    check_trained_a_step(path, local)  # a run that never trained: what starts it instead
    latest(path)  # fail before any process starts (and before claiming) if nothing to resume
    # What every rank reads on resume, read here first: a missing or corrupt file is one line
    # before any rank starts, not a rank failure that suggests the same --resume again.
    load(Profile, path / RUN_PROFILE)
    with pipeplan_log.held():  # notices (a torn last record, an older checkpoint) if it passes
        # Held to the run.json they were written under as report and calibrate hold them
        # (`check_records`): the world, the batch, the rates, the epochs against their steps.
        records = read_records(path / "run.jsonl", saved)
        # profile.json (and each calibration-N.json) as its phases were priced: edited, the
        # resume would plan with other times than the records say the run did.
        phases = [r for r in records if isinstance(r, PhaseRecord)]
        # The model folder as the run built it (its config.json's shape fields), as export
        # checks it; then every profile the phases were priced with.
        check_run_model(path, saved)
        check_priced_clusters(path, saved, records, check_priced_profiles(path, saved, records))
        # And the run's copy of its plan as its phases took it (a plan run's layouts).
        RunPlanner.for_run(path, cfg).check_records(path, phases)
        # Checksums, what the files hold, finite weights (an older one, with a notice).
        manifest, weights, _, _ = load_latest(path)
        # data.json as the checkpoint saw it: a helper's entry deleted by hand, the helper
        # edited, passed `check_data` (before any of the data's code runs again).
        check_data_kept(path, manifest, manifest_path(path, manifest))
        check_run(cfg, local, resumed=(path, manifest, weights, records))  # the older ones too
        check_manifest_records(manifest, records, path, cfg)
        # metrics.csv and summary.json against the records, as report and calibrate hold
        # them: the resume rewrote metrics.csv from an edited record, and the edit then
        # agreed with it (twenty-third round). After the checkpoint's checks, which name
        # the records' own faults (cut short, another schedule) more exactly.
        check_eval_metrics(path, records)
        check_summary(path, saved, records)
        check_unfinished(manifest, cfg, path, local)
    return records


@contextlib.contextmanager
def claimed_for_checks(run_dir: Path) -> Iterator[None]:
    """Claim `run_dir` (`claim_directory`) before the checks inside the block, so a resume of
    a run another process holds is refused at once: it came after the torch import and the
    checkpoint load, ~50 s under load (twentieth round). A check that refuses gives the claim
    back, and the lock file if this claim made it: nothing is left written or held.

        with claimed_for_checks(run_dir):
            records = check_resume(run_dir, saved, cfg)
    """
    lock_made = not os.path.lexists(run_dir / ".lock")
    held_before = run_dir.resolve() in held_directories()
    claim_directory(run_dir)
    try:
        yield
    except BaseException:
        if not held_before:  # a claim this process held already is not this block's to drop
            release_directory(run_dir)
            if lock_made:
                (run_dir / ".lock").unlink(missing_ok=True)
        raise


def check_trained_a_step(run_dir: Path, local: bool = True) -> None:
    """A resume of a run that never trained (`trained`: prepared only, or a start stopped
    outright) is refused saying what starts it: `check_resume` said only "no checkpoint to
    resume from", and a new run of its name "already holds a run" (the twenty-sixth round).
    `local` as for `check_resume` (torchrun's entry starts it without --resume).

        check_trained_a_step(Path("runs/ty"))   # runs/ty: no checkpoint to resume from: …
    """
    if trained(run_dir):
        return
    shown = shlex.quote(str(run_dir))
    if local:  # a run `pipeplan run` started (the usual), or one prepared for torchrun
        start = (
            f"delete it to run it again (a run prepared for torchrun starts with -m "
            f"executor.launch {shown})"
        )
    else:
        start = f"start it with -m executor.launch {shown} (without --resume)"
    raise BadArgumentError(
        f"{run_dir}: no checkpoint to resume from: the run has trained no step; {start}"
    )


def resume_run(run_dir: str, given: dict[str, Any] | None = None) -> tuple[Path, RunSummary]:
    """`pipeplan run --resume RUN_DIR [--nproc N] [--epochs E] [--collective-timeout S]`:
    continue from the latest checkpoint, re-checked as a fresh run would be (a hand-edited
    run.json included) and re-planned for the world size."""

    path = Path(run_dir)
    saved = read_run_config(path)
    check_run_location(path)
    with claimed_for_checks(path):  # a run in use is refused before the checkpoint is read
        check_kept_trained_with(path, saved)  # run.json as trained, before anything acts on it
        check_data(path, saved)
        # The flags given mean something beside the run's own settings, not beside their
        # defaults (`--init` was refused "with --model vit-digits" for a run of a model folder).
        check_needs_against(RunConfig, given or {}, saved, str(path / "run.json"))
        cfg = resumed_config(saved, given or {}, path)
        records = check_resume(path, saved, cfg)
    mend_torn_tail(path / "run.jsonl", records)
    pending = path / PENDING_CONFIG
    pending.unlink(missing_ok=True)  # left by a resume that was killed: not this one's
    if cfg != saved:
        write_atomic(pending, dumps(cfg))
    try:
        return path, run_local(cfg, path, resume=True)
    finally:  # not committed by a checkpoint or the run's end: run.json stays as it was
        pending.unlink(missing_ok=True)
        release_directory(path)  # trained: readers in other processes may read it now


def with_file_values(cfg: RunConfig) -> RunConfig:
    """What a flag left out takes from the files given: a run of `--plan FILE` trains the
    plan's world size, global batch and epochs, follows its freeze schedule (as `--freeze
    LIST`) and cache, a run of `--profile P` in P's precision. Given, they
    are held to the files (`check_plan`, `check_profile_fits`); left out, they never refuse
    a file (a plan for 4 devices is not refused for the default `--nproc 2`).

        cfg = with_file_values(build(RunConfig, {"plan": "plan.json"}))   # nproc: the plan's
    """
    found: dict[str, tuple[object, str]] = {}  # field → (value, the file it is from)
    if cfg.plan is not None:
        inputs = load(Plan, cfg.plan).inputs
        found["nproc"] = (inputs.cluster.num_devices, cfg.plan)
        found["global_batch"] = (inputs.global_batch, cfg.plan)
        found["epochs"] = (inputs.epochs, cfg.plan)
        # The plan's freeze schedule, epoch by epoch, and its cache: refused as flags beside
        # --plan (`PLAN_FREEZES`), so these are always the plan's, and every freeze point the
        # run reaches is one of its phases (`check_plan`).
        found["freeze"] = ("list", cfg.plan)
        found["freeze_list"] = (list(inputs.freeze.frozen_layers), cfg.plan)
        found["cache"] = (inputs.cache, cfg.plan)
        found["cache_budget_bytes"] = (inputs.cluster.cache_budget_bytes, cfg.plan)
        # Without --profile the run prices with the shipped profile of its precision: the
        # plan's own, when it was made from one of them (a bf16 plan then runs in bf16).
        shipped = None if cfg.profile else shipped_precision(inputs.profile, cfg.model, cfg.device)
        if shipped is not None:
            found["precision"] = (shipped, cfg.plan)
    if cfg.profile is not None:
        found["precision"] = (load(Profile, cfg.profile).model.precision, cfg.profile)
    taken = {k: v for k, v in found.items() if k not in cfg.model_fields_set}
    if not taken:
        return cfg
    try:
        built = build(RunConfig, {**cfg.model_dump(), **{k: v for k, (v, _) in taken.items()}})
    except BadArgumentError as exc:  # held to the flag's bounds, and said where it came from
        field = next((k for k in taken if str(exc).startswith(flag_of(RunConfig, k))), None)
        if field is None:
            raise
        given_as = f"{flag_of(RunConfig, field)} was not given"
        raise BadArgumentError(f"{exc} (taken from {taken[field][1]}, as {given_as})") from None
    # What was given stays what was given: rebuilt from every field, a default name counted
    # as given, and two runs of a --profile without --name started in one second did not
    # take the next free name; one was refused (the fifty-fourth round).
    built.__pydantic_fields_set__ = cfg.model_fields_set | set(taken)
    return built


def start_run(
    cfg: RunConfig, runs_root: str | Path, prepare_only: bool = False
) -> tuple[Path, RunSummary | None]:
    """`pipeplan run`: the checks and `runs/NAME/`, then the ranks unless only preparing (for
    torchrun); no summary then."""
    cfg = with_file_values(cfg)
    # Before the folders are looked at: a --runs-dir name too long is said of the flag, not of
    # RUNS/NAME as the file system refused it (`prepare` checks it again).
    check_runs_root(runs_root)
    made = missing_folders(Path(runs_root) / cfg.name)  # the name is checked by `prepare`
    run_dir = prepare(cfg, runs_root, local=not prepare_only)
    if prepare_only:
        return run_dir, None
    try:
        return run_dir, run_local(cfg, run_dir)
    except RankFailedError:
        # The working directory removed as the ranks started (their imports and the data's
        # read it) ends the run as a stop does: undone where it trained nothing, said alone
        # (the eightieth round: the folder stayed, and the same command was refused).
        if (gone := working_directory_failure()) is not None and not trained(run_dir):
            remove_unstarted(run_dir, made)
            raise gone from None
        raise  # the rank's log holds why: the folder stays, and the line says what to do
    except BaseException:
        # A full disk, Ctrl-C or a stop before the first step: a folder left with no checkpoint
        # could not be resumed, nor its name run again (the twenty-sixth round).
        remove_unstarted(run_dir, made)
        raise
    finally:
        release_directory(run_dir)  # trained: readers in other processes may read it now


# What a start that trained nothing leaves in logs/: the launcher's log, the ranks' logs and
# error reports (a report's temporary file too), the Ctrl-C mark.
START_LOGS = ("launcher.log", "rank-*.log", "rank-*.error.json", "rank-*.error.json.tmp")


def trained(run_dir: Path) -> bool:
    """Whether the run has trained: anything it writes once it trains (STARTED) but a
    run.jsonl without a step record, which rank 0 opens before its first step. A run.jsonl
    that cannot be read counts as trained (kept, for the resume's checks to name).

        trained(Path("runs/k"))   # False: prepared, or stopped before its first step
    """
    if any((run_dir / name).exists() for name in STARTED if name != "run.jsonl"):
        return True
    return (run_dir / "run.jsonl").exists() and failed_at(run_dir / "run.jsonl") != NO_STEP


def remove_unstarted(run_dir: Path, made: list[Path]) -> None:
    """Undo `start_run` for a run that trained nothing (`trained`; a full disk, Ctrl-C or a
    stop as its ranks started): the files `prepare` and the launch wrote, the lock, and the
    folders the command made (`made`, deepest first), those left empty. A folder holding
    anything else stays as it is.

        remove_unstarted(Path("runs/fd2"), [Path("runs/fd2")])
    """
    if moved_away(run_dir) or trained(run_dir):  # what is at a moved run's path is not its
        return
    (run_dir / "run.jsonl").unlink(missing_ok=True)  # no step recorded (`trained`)
    logs = run_dir / "logs"
    for pattern in START_LOGS:
        for path in logs.glob(pattern):
            with contextlib.suppress(OSError):
                path.unlink()
    with contextlib.suppress(OSError):
        logs.rmdir()
    _unprepare(run_dir, ["run.json", DATA_RECORD, RUN_PROFILE, RUN_PLAN], run_dir in made)
    for folder in made:
        with contextlib.suppress(OSError):
            folder.rmdir()


if __name__ == "__main__":
    main()
