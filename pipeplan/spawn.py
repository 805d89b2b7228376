"""Start N local rank processes once, wait with a deadline, and never leave one behind.

Used by the link measurement (`pipeplan profile --nproc N`: a few seconds of ping-pong under a
deadline, nothing to resume or report per rank) and by tests. Training runs start their ranks
through torch's elastic launcher instead (executor/launch.py). A rank that raises or dies fails
the whole group: the others are killed and the error names the rank.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import re
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from pipeplan.errors import BadArgumentError, PipeplanError, quoted
from pipeplan.startup import die_with_parent


class RankFailedError(PipeplanError):
    def __init__(self, message: str, rank: int | None):
        super().__init__(message)
        self.rank = rank


def cpu_cores() -> int:
    """The cores this process may run on (a container's or `taskset`'s share, not the host's)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


# The least open-files limit a run starts under: a 2-rank CPU run holds about 40 (its ranks'
# pipes and logs, the store, gloo's links), CUDA and more ranks more; the usual limit is 1024.
# Below it torch's store retried for minutes then printed tracebacks, or a rank aborted with
# no line (the fifty-ninth round: `ulimit -n 16`, `ulimit -n 9`).
MIN_OPEN_FILES = 256


def check_open_files() -> None:
    """BadArgumentError naming the limit when this process may open fewer than
    MIN_OPEN_FILES files (`ulimit -n`), which its ranks inherit."""
    import resource

    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft != resource.RLIM_INFINITY and soft < MIN_OPEN_FILES:
        raise BadArgumentError(
            f"the open-files limit (ulimit -n) is {soft}; a run needs at least "
            f"{MIN_OPEN_FILES} (its ranks' links, store and logs): raise it (ulimit -n 1024)"
        )


def check_local_ranks(nproc: int, device: str) -> None:
    """`check_local_ranks(2, "cpu")`: `nproc` ranks started on this host fit what it has, one
    rank per CPU core (gloo) or per GPU (cuda); BadArgumentError naming `--nproc` and the
    limit otherwise. More ranks than cores only time-slice them: the run crawls, its measured
    times say nothing of the plan, and each rank costs memory for its own copy of the model."""
    if device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise BadArgumentError("--device cuda: no CUDA device is available here")
        have, what = torch.cuda.device_count(), "GPUs"
    else:
        have, what = cpu_cores(), "CPU cores"
    if nproc > have:
        raise BadArgumentError(
            f"--nproc {nproc} is beyond the limit of {have}: this host has {have} {what} "
            "(one rank each)"
        )


def check_threads(threads: int) -> None:
    """`check_threads(4)`: that many intra-op threads fit this process's cores, else a
    ValueError for the field validator of `--threads`, stating the limit. More threads than
    cores only time-slice them (the times measure the contention), and far more fail inside
    OpenMP itself ("Thread creation failed") with a traceback."""
    have = cpu_cores()
    if threads > have:
        raise ValueError(
            f"{threads} is beyond the limit of {have}: this process may run on {have} CPU "
            "cores (one thread each)"
        )


def pid_namespace() -> int | None:
    """The identity (inode) of this process's pid namespace: pids mean something only there.
    None without /proc."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return None


def process_start(pid: int) -> int | None:
    """`process_start(os.getpid())` → when process `pid` started, in clock ticks after boot
    (field 22 of /proc/PID/stat), which tells it from a later process given the same pid; None
    when there is no such process (or no /proc to ask)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (OSError, ValueError):
        return None
    fields = text.rsplit(")", 1)[-1].split()  # the command's name, in (), may hold spaces
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return None


def owner_tag() -> str | None:
    """`owner_tag()` → "BOOT-NS-PID-START": this process, named so that a later one can tell
    whether it is gone (`owner_gone`): this host's boot (the first 8 hex digits of its
    boot_id: another host's, on a shared file system, is never judged here), its pid
    namespace (a container's pids mean something only there), its pid and start time (a
    later process given the pid has another). None without /proc."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text()[:8]
    except OSError:
        return None
    namespace, start = pid_namespace(), process_start(os.getpid())
    if not re.fullmatch(r"[0-9a-f]{8}", boot) or namespace is None or start is None:
        return None
    return f"{boot}-{namespace}-{os.getpid()}-{start}"


OWNER_TAG = r"[0-9a-f]{8}-\d{1,20}-\d{1,10}-\d{1,20}"  # `owner_tag`, in a name's pattern


def owner_gone(tag: str) -> bool:
    """Whether the process `tag` (`owner_tag`) names is provably gone: one of this host's
    boot and pid namespace that no longer runs. Another host's, another namespace's, or any
    where /proc cannot tell: False.

        owner_gone(owner_tag())   # False
    """
    mine = owner_tag()
    if mine is None or not re.fullmatch(OWNER_TAG, tag):
        return False
    boot, namespace, pid, start = tag.split("-")
    if mine.split("-")[:2] != [boot, namespace]:
        return False
    return process_start(int(pid)) != int(start)


# A scratch folder of a command's ranks in TMPDIR (`scratch_directory`): its kind, then its
# maker (`owner_tag`), then tempfile's random part.
_SCRATCH = re.compile(rf"pipeplan-(?:ranks|links|imports)-({OWNER_TAG})-[a-z0-9_]+")
# What the ranks write there: each rank's stderr (`_orphan_proof`) and the link measurement;
# and what a data's forked child reports to its forker (`executor.childimports`).
_SCRATCH_FILES = re.compile(r"rank-\d+\.err|links\.json|\d+\.jsonl|failed-\d+")


@contextlib.contextmanager
def scratch_directory(kind: str) -> Iterator[str]:
    """`with scratch_directory("ranks") as folder:` a new private folder in TMPDIR, removed as
    the block ends, named after this process. Those a command of this user killed outright
    left (SIGKILL, the OOM killer: nothing of its could clean up; the fifty-seventh round
    found one pair left by each killed `profile --nproc 2`) are removed first: their maker is
    gone, and they hold nothing but what ranks write there. Without /proc nothing is provably
    gone, and the folder is named as tempfile names it."""
    tag = owner_tag()
    if tag is None:
        prefix = f"pipeplan-{kind}-"
    else:
        prefix = f"pipeplan-{kind}-{tag}-"
        remove_left_scratch()
    with tempfile.TemporaryDirectory(prefix=prefix) as folder:
        yield folder


def remove_left_scratch() -> None:
    """The scratch folders of TMPDIR whose maker is gone (`owner_gone`), removed where they are
    this user's folders (not links) holding only `_SCRATCH_FILES`; a folder holding anything
    else keeps all of it."""
    root = tempfile.gettempdir()
    try:
        entries = list(os.scandir(root))
    except OSError:
        return
    for entry in entries:
        named = _SCRATCH.fullmatch(entry.name)
        if named is None or not owner_gone(named[1]):
            continue
        try:
            if not entry.is_dir(follow_symlinks=False) or entry.stat().st_uid != os.getuid():
                continue
            inside = list(os.scandir(entry.path))
        except OSError:
            continue
        if not all(_SCRATCH_FILES.fullmatch(f.name) and _plain_file(f) for f in inside):
            continue
        with contextlib.suppress(OSError):
            for f in inside:
                os.unlink(f.path)
            os.rmdir(entry.path)


def _plain_file(entry: os.DirEntry) -> bool:
    try:
        return entry.is_file(follow_symlinks=False)
    except OSError:
        return False


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _orphan_proof(rank: int, parent: int, said: str, fn: Callable[..., None], *args) -> None:
    if not die_with_parent(parent):
        os._exit(1)
    # SIGINT is the parent's (its clean-up kills the ranks): ignored, then let through (held
    # back since the rank's start, `_ctrl_c_held`), which drops a Ctrl-C that came meanwhile.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    # What the rank writes to stderr goes to a file (`said`/rank-R.err) the parent passes on
    # (`_pass_on`): C++ lines (libstdc++'s "terminate called …" as memory ran out, gloo's)
    # came before the command's one line (the forty-seventh round, under `ulimit -v`).
    held = os.open(Path(said) / f"rank-{rank}.err", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(held, 2)
    os.close(held)
    fn(rank, *args)  # a failure propagates: torch's wrapper reports it and exits 1
    # Done: exit without the interpreter's teardown (freeing torch's modules costs 1-2 s of
    # CPU a rank), once atexit's callbacks have run and the output is flushed.
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


@contextlib.contextmanager
def _ctrl_c_held():
    """SIGINT held back (blocked) while ranks are started: they inherit the mask, so Ctrl-C,
    which the terminal sends to every process of the group, waits in a rank until it ignores
    SIGINT (`_orphan_proof`, its first step) and never prints a KeyboardInterrupt traceback
    from its imports (the thirteenth round: "Fatal Python error: init_import_site"). This
    process gets it as the block ends, from its own handler, and its clean-up kills the ranks.

    Not ignored here (SIG_IGN, which the ranks would have inherited), as it was: a Ctrl-C in
    the block was lost, and `profile --nproc 2` profiled on and wrote its file (CI's run of
    the fiftieth session). Blocking holds it back in this thread only; another thread of the
    process (torch has one) may take it, which the stand-in handler records for the end.
    Called off the main thread (an API call from a thread of the caller's), only the mask
    is this thread's to set: the ranks inherit it all the same (the seventy-first round:
    their KeyboardInterrupt tracebacks, and "rank 1 died"), and the main thread, where
    Python raises KeyboardInterrupt, takes the Ctrl-C."""
    import threading
    from multiprocessing import resource_tracker

    main = threading.current_thread() is threading.main_thread()
    # Started first, out of the block: the first spawn starts it, and multiprocessing, having
    # blocked SIGINT for it, unblocks SIGINT after, which let a rank take a Ctrl-C again.
    resource_tracker.ensure_running()
    taken = []
    if main:
        previous = signal.signal(signal.SIGINT, lambda signum, frame: taken.append(signum))
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        if main:
            signal.signal(signal.SIGINT, signal.SIG_DFL if previous is None else previous)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)  # one held back lands here
        if taken:
            signal.raise_signal(signal.SIGINT)  # one another thread took


@contextlib.contextmanager
def _main_not_run_again(args: tuple):
    """Ranks started in the block (given `args`) import what they run, not the caller's main
    script: spawn runs that again in each (as `__mp_main__`), so a script calling
    `pipeplan.profile(..., nproc=2)` without `if __name__ == "__main__":` ran its top level
    in each link rank, whose own call multiprocessing refused: 165 lines of tracebacks, then
    "rank 1 died" (the sixtieth round). Ranks running a function of that script itself (a
    benchmark's) still get it, which they need to find the function."""
    from multiprocessing import spawn as mp_spawn

    if any(getattr(f, "__module__", None) == "__main__" for f in args):
        yield
        return
    prepare = mp_spawn.get_preparation_data

    def without_main(name: str) -> dict:
        data = prepare(name)
        data.pop("init_main_from_path", None)
        data.pop("init_main_from_name", None)  # `python -m script`
        return data

    mp_spawn.get_preparation_data = without_main  # read by each process's start
    try:
        yield
    finally:
        mp_spawn.get_preparation_data = prepare


@contextlib.contextmanager
def _start_method_kept():
    """The process's default start method (multiprocessing's) as the block found it: each
    spawn's start reads it (`multiprocessing.spawn.get_preparation_data`), which fixes an
    unset one to the platform's default, and the caller's own `set_start_method("spawn")`
    after `pipeplan.profile(..., nproc=2)` raised "context has already been set" (the
    sixty-fourth round)."""
    import multiprocessing

    before = multiprocessing.get_start_method(allow_none=True)
    try:
        yield
    finally:
        if before is None:  # set by the block: unset again (`force`: the stdlib's own way)
            multiprocessing.set_start_method(None, force=True)


def run_ranks(
    fn: Callable[..., None], nproc: int, args: tuple, deadline_s: float, what: str
) -> None:
    """Run fn(rank, *args) in `nproc` spawned processes; raise RankFailedError on failure.
    They die with this process, however it dies (`die_with_parent`), and do not run the
    caller's main script (`_main_not_run_again`)."""
    with scratch_directory("ranks") as said:
        try:
            _run_held(nproc, (os.getpid(), said, fn, *args), deadline_s, what, Path(said))
        finally:  # a rank killed or stopped left its forked children's reports (its folder)
            remove_left_scratch()


def _run_held(nproc: int, args: tuple, deadline_s: float, what: str, said: Path) -> None:
    # Here: the rest of this module (`owner_tag`, for every output's temporaries) needs no torch.
    import torch.multiprocessing as mp

    # torch says "Terminating process N via signal SIGTERM" as it stops the others once one
    # has failed: the stop is this function's, and its error is the command's one line.
    spawn_log = logging.getLogger("torch.multiprocessing.spawn")
    level = spawn_log.level
    spawn_log.setLevel(logging.ERROR)
    ctx = None
    try:
        # As ranks start (a Ctrl-C held back there lands as the block ends: the clean-up
        # below kills them):
        with _ctrl_c_held(), _quiet_cpp_log(), _main_not_run_again(args), _start_method_kept():
            ctx = mp.start_processes(
                _orphan_proof, args=args, nprocs=nproc, join=False, start_method="spawn"
            )
        deadline = time.monotonic() + deadline_s
        stopped_since: dict[int, float] = {}
        while not ctx.join(timeout=0.5):
            _check_stopped(ctx.processes, stopped_since, what)
            if time.monotonic() > deadline:
                raise RankFailedError(f"{what} did not finish within {deadline_s:.0f} s", None)
        _pass_on(said, nproc)
    except mp.ProcessRaisedException as exc:
        last = str(exc).strip().splitlines()[-1]
        message = f"{what} failed on rank {exc.error_index}: {last}"
        raise RankFailedError(message, exc.error_index) from None
    except mp.ProcessExitedException as exc:
        rank = exc.error_index
        why = (
            _death(exc.exit_code) + _last_words(said / f"rank-{rank}.err") + address_space_capped()
        )
        raise RankFailedError(f"{what}: rank {rank} died ({why})", rank) from None
    finally:
        spawn_log.setLevel(level)
        processes = ctx.processes if ctx else []
        for process in processes:
            if process.is_alive():
                process.kill()
        for process in processes:
            process.join(timeout=5)


def _pass_on(said: Path, nproc: int) -> None:
    """Each rank's stderr (its warnings), once the group has succeeded, in rank order."""
    for rank in range(nproc):
        with contextlib.suppress(OSError):
            if text := (said / f"rank-{rank}.err").read_text(errors="replace"):
                sys.stderr.write(text)


def _death(code: int) -> str:
    """`"killed by SIGABRT"` for a rank's exit code -6, `"exit code 1"` for 1."""
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
    return f"exit code {code}"


def address_space_capped() -> str:
    """Where this process's address space is capped (`ulimit -v`, which the ranks inherit),
    says so: a rank's allocation past it aborts in C++ ("terminate called …") and the rank
    dies by SIGABRT, naming no memory (the forty-seventh round)."""
    import resource

    cap = resource.getrlimit(resource.RLIMIT_AS)[0]
    if cap == resource.RLIM_INFINITY:
        return ""
    return f"; each process's address space is capped at {cap >> 20} MiB (ulimit -v): raise it"


def _last_words(path: Path) -> str:
    """`"; its last line: 'terminate called …'"`, the last line a dead rank wrote to stderr
    (bounded), or "" where it wrote none."""
    try:
        with open(path, "rb") as held:
            held.seek(max(os.fstat(held.fileno()).st_size - 4096, 0))
            lines = held.read().decode(errors="replace").strip().splitlines()
    except OSError:
        return ""
    if not lines:
        return ""
    return f"; its last line: {quoted(lines[-1].strip())}"  # cut as every quoted value is


# Seconds a rank may stay stopped (SIGSTOP, a debugger) before the group fails naming it: its
# peers wait in a collective up to its timeout (60 s), then blamed themselves (forty-seventh
# round: `profile --nproc 2` with a link rank stopped named the rank that was not).
STOPPED_S = 10.0


def _check_stopped(processes: list, since: dict[int, float], what: str) -> None:
    """RankFailedError naming the first rank stopped for STOPPED_S, as this process has seen
    it (Linux's /proc; elsewhere none is seen). A stop of the whole command (Ctrl-Z) stops
    this process too, and the ranks continue with it."""
    now = time.monotonic()
    for rank, process in enumerate(processes):
        if _is_stopped(process.pid):
            since.setdefault(rank, now)
            if now - since[rank] >= STOPPED_S:
                raise RankFailedError(
                    f"{what}: rank {rank} was stopped (SIGSTOP, or held by a debugger) for "
                    f"{STOPPED_S:g} s",
                    rank,
                )
        else:
            since.pop(rank, None)


def _is_stopped(pid: int | None) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[:1] in (["T"], ["t"])


@contextlib.contextmanager
def _quiet_cpp_log():
    """The ranks start with torch's C++ log at FATAL: a peer stopped or gone made c10d print
    up to 40 lines of socket timeouts and stack frames before the command's one line. What
    failed reaches this process as the rank's exception (`run_ranks`), not through stderr."""
    before = os.environ.get("TORCH_CPP_LOG_LEVEL")
    os.environ["TORCH_CPP_LOG_LEVEL"] = "FATAL"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("TORCH_CPP_LOG_LEVEL", None)
        else:
            os.environ["TORCH_CPP_LOG_LEVEL"] = before


def _in_group(rank: int, fn: Callable[..., None], world: int, port: int, timeout_s: float, *args):
    """A spawned rank: one thread, a gloo process group, `fn(rank, world, *args)`, then a
    barrier (rank 0 hosts the store and must outlive the rest) and a clean exit."""
    import datetime

    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=timeout_s),
    )
    try:
        fn(rank, world, *args)
        dist.barrier()
    finally:
        dist.destroy_process_group()


def run_gloo_ranks(
    fn: Callable[..., None],
    nproc: int,
    args: tuple = (),
    deadline_s: float = 300.0,
    what: str = "ranks",
    collective_timeout_s: float = 60.0,
) -> None:
    """Run `fn(rank, world, *args)` on `nproc` local CPU ranks inside one gloo process group:
    the set-up tests and benchmarks share. `fn` must be importable (spawned processes).

        run_gloo_ranks(train_one_phase, 2, (out_dir,), deadline_s=150, what="migration")
    """
    args = (fn, nproc, free_port(), collective_timeout_s, *args)
    run_ranks(_in_group, nproc, args, deadline_s, what)


def single_rank_group(collective_timeout_s: float = 60.0):
    """A one-rank gloo process group in this process, as a context manager (checkpoint code
    that gathers to rank 0 needs a group even alone).

        with single_rank_group():
            checkpoint.save(...)
    """
    import contextlib
    import datetime

    import torch.distributed as dist

    @contextlib.contextmanager
    def group():
        dist.init_process_group(
            "gloo",
            init_method=f"tcp://127.0.0.1:{free_port()}",
            rank=0,
            world_size=1,
            timeout=datetime.timedelta(seconds=collective_timeout_s),
        )
        try:
            yield
        finally:
            dist.destroy_process_group()

    return group()
