"""`--data module:function`s for fault tests: rank 1 SIGKILLs itself, raises or pauses while
reading a batch."""

import os
import signal
import time
from pathlib import Path

import torch
import torch.distributed as dist

from executor.data import TaskData, load_data
from pipeplan import models


class EndsOnARank:
    """Ends its process with `end()` on read number `after + 1`, on the rank `which(rank,
    world)` picks, at once, as data code may: `os.kill(os.getpid(), SIGKILL)`, `os._exit(0)`
    (no report, no clean end)."""

    def __init__(self, inner, after: int, which, end):
        self.inner, self.after, self.which, self.end, self.reads = inner, after, which, end, 0

    def __len__(self):
        return len(self.inner)

    def __getitem__(self, index):
        self.reads += 1
        ranked = self.reads > self.after and dist.is_initialized()
        if ranked and self.which(dist.get_rank(), dist.get_world_size()):
            self.end()
        return self.inner[index]


def _rank_1(rank: int, world: int) -> bool:
    return rank == 1


def _killed() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def digits_then_die(seed: int = 0) -> TaskData:
    """Digits; rank 1 SIGKILLs itself on its read number 201."""
    data = load_data("digits", models.build("vit-digits"), seed=seed)
    return TaskData("digits-die", EndsOnARank(data.train, 200, _rank_1, _killed), data.eval, False)


def digits_then_exit_0(seed: int = 0) -> TaskData:
    """Digits; the last rank (rank 1 of 2, the only one of 1) exits with status 0 on its read
    number 201, mid-run."""
    data = load_data("digits", models.build("vit-digits"), seed=seed)
    exits = EndsOnARank(data.train, 200, lambda rank, world: rank == world - 1, lambda: os._exit(0))
    return TaskData("digits-exit-0", exits, data.eval, False)


def digits_die_once(seed: int = 0) -> TaskData:
    """Digits; rank 1 dies after PIPEPLAN_TEST_KILL_AFTER item reads (each of its batch's
    items read once a step) if that is set (the resumed run, started without it, reads the
    same data and lives)."""
    data = load_data("digits", models.build("vit-digits"), seed=seed)
    after = int(os.environ.get("PIPEPLAN_TEST_KILL_AFTER", "0"))
    train = EndsOnARank(data.train, after, _rank_1, _killed) if after else data.train
    return TaskData("digits", train, data.eval, False)


class RaisesOnRank1:
    """Rank 1 raises ValueError on its read number `after + 1`."""

    def __init__(self, inner, after: int):
        self.inner, self.after, self.reads = inner, after, 0

    def __len__(self):
        return len(self.inner)

    def __getitem__(self, index):
        self.reads += 1
        if self.reads > self.after and dist.is_initialized() and dist.get_rank() == 1:
            raise ValueError(f"sample {index} is unreadable")
        return self.inner[index]


class OnceAfter:
    """A dataset that does `act()` once, on its read number `after + 1`, then reads on."""

    def __init__(self, inner, after: int):
        self.inner, self.after, self.reads = inner, after, 0

    def __len__(self):
        return len(self.inner)

    def __getitem__(self, index):
        self.reads += 1
        if self.reads == self.after + 1:
            self.act()
        return self.inner[index]

    def act(self) -> None:
        raise NotImplementedError


class Pauses(OnceAfter):
    """On its read number `after + 1` a rank touches the file PIPEPLAN_TEST_PAUSED and sleeps
    for an hour: long enough for a test to signal it, or its launcher."""

    def act(self) -> None:
        Path(os.environ["PIPEPLAN_TEST_PAUSED"]).touch()
        time.sleep(3600)


def digits_then_raise(seed: int = 0) -> TaskData:
    """Digits; rank 1 raises ValueError on its read number 201."""
    data = load_data("digits", models.build("vit-digits"), seed=seed)
    return TaskData("digits-raise", RaisesOnRank1(data.train, 200), data.eval, False)


def digits_then_eval_raise(seed: int = 0) -> TaskData:
    """Digits; rank 1 raises ValueError on its third read of a held-out item: in the epoch's
    evaluation, after its checks' reads of the first and the last item as it starts."""
    data = load_data("digits", models.build("vit-digits"), seed=seed)
    return TaskData("digits-eval-raise", data.train, RaisesOnRank1(data.eval, 2), False)


def digits_pause_once(seed: int = 0) -> TaskData:
    """Digits; a rank pauses after PIPEPLAN_TEST_PAUSE_AFTER reads if that is set in its
    environment and PIPEPLAN_TEST_PAUSE_RANK, if set, is its rank (a resumed run, started
    without them, reads the same data and goes on)."""
    data = load_data("digits", models.build("vit-digits"), seed=seed)
    after = int(os.environ.get("PIPEPLAN_TEST_PAUSE_AFTER", "0"))
    only = os.environ.get("PIPEPLAN_TEST_PAUSE_RANK")
    here = only is None or only == os.environ.get("RANK")
    train = Pauses(data.train, after) if after and here else data.train
    return TaskData("digits", train, data.eval, False)


class SlowToEvaluate:
    """Sleeps `seconds` on its first read under no_grad: the first evaluation batch."""

    def __init__(self, inner, seconds: float):
        self.inner, self.seconds, self.slept = inner, seconds, False

    def __len__(self):
        return len(self.inner)

    def __getitem__(self, index):
        if not self.slept and not torch.is_grad_enabled():
            self.slept = True
            time.sleep(self.seconds)
        return self.inner[index]


def digits_slow_one_sided(seed: int = 0) -> TaskData:
    """Digits with one-sided work longer than a 3 s collective timeout: rank 1 takes 8 s more
    to load its data than rank 0 (which waits to broadcast its plan), and rank 0 takes 8 s more
    to evaluate than rank 1."""
    data = load_data("digits", models.build("vit-digits"), seed=seed)
    rank = dist.get_rank() if dist.is_initialized() else None
    if rank == 1:
        time.sleep(8)
    evaluation = SlowToEvaluate(data.eval, 8) if rank == 0 else data.eval
    return TaskData("digits", data.train, evaluation, False)


class SlowOnceAfter(OnceAfter):
    """Sleeps `seconds` once, on its read number `after + 1`: data whose reading takes a
    while now and then (a network file system, a cold cache)."""

    def __init__(self, inner, after: int, seconds: float):
        super().__init__(inner, after)
        self.seconds = seconds

    def act(self) -> None:
        time.sleep(self.seconds)


def digits_slow_eval_read(seed: int = 0) -> TaskData:
    """Digits; rank 0 sleeps 8 s (longer than a 3 s collective timeout) once, on its 41st
    read of a held-out item: inside the epoch's evaluation, past its start-up checks' two
    reads and, at a global batch of 8 (16 reads a batch: inputs, then labels), in its
    third batch."""
    data = load_data("digits", models.build("vit-digits"), seed=seed)
    rank = dist.get_rank() if dist.is_initialized() else None
    evaluation = SlowOnceAfter(data.eval, 40, 8) if rank == 0 else data.eval
    return TaskData("digits", data.train, evaluation, False)


class StopsOnce(OnceAfter):
    """Stops its process (SIGSTOP) on its read number `after + 1`, touching
    PIPEPLAN_TEST_PAUSED first."""

    def act(self) -> None:
        Path(os.environ["PIPEPLAN_TEST_PAUSED"]).touch()
        os.kill(os.getpid(), signal.SIGSTOP)


def digits_stop_in_eval_read(seed: int = 0) -> TaskData:
    """Digits; rank 1 stops itself (SIGSTOP) on its 41st read of a held-out item, inside
    the epoch's evaluation (as `digits_slow_eval_read` sleeps), while rank 0 waits for its
    reads."""
    data = load_data("digits", models.build("vit-digits"), seed=seed)
    rank = dist.get_rank() if dist.is_initialized() else None
    evaluation = StopsOnce(data.eval, 40) if rank == 1 else data.eval
    return TaskData("digits", data.train, evaluation, False)


def sleeping_rank(rank: int, started: str) -> None:
    """For `pipeplan.spawn.run_ranks`: say it started (a file named after the rank), then
    sleep far beyond any test's patience; only a kill ends it."""
    # Written whole, then renamed: a reader polling the folder never sees an empty pid file.
    (Path(started) / f".{rank}").write_text(str(os.getpid()))
    os.replace(Path(started) / f".{rank}", Path(started) / str(rank))
    time.sleep(600)


def logged_sleeping_rank(rank: int, started: str) -> None:
    """`sleeping_rank`, which first writes the C++ log level torch started with."""
    level = os.environ.get("TORCH_CPP_LOG_LEVEL", "")
    (Path(started) / f"cpp-log-level-{rank}").write_text(level)
    sleeping_rank(rank, started)


def sigint_disposition(rank: int, out: str) -> None:
    """For `pipeplan.spawn.run_ranks`: write how this rank treats SIGINT ("ignored" or not,
    and "blocked" where it is held back)."""
    import signal

    ignored = signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    blocked = signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, [])
    said = ("ignored" if ignored else "handled") + (" blocked" if blocked else "")
    (Path(out) / str(rank)).write_text(said)


def rank_0_dies(rank: int, started: str, how: str = "kill") -> None:
    """For `pipeplan.spawn.run_ranks`: both ranks say they started; rank 0 then SIGKILLs
    itself once rank 1 has (`how` "abort": aborts as C++'s std::terminate does, its line
    written to file descriptor 2 first), and rank 1 sleeps until the parent stops it."""
    (Path(started) / f".{rank}").write_text(str(os.getpid()))
    os.replace(Path(started) / f".{rank}", Path(started) / str(rank))
    if rank == 0:
        while not (Path(started) / "1").exists():
            time.sleep(0.01)
        time.sleep(0.5)  # rank 1 is asleep by now
        if how == "abort":
            os.write(2, b"terminate called without an active exception\n")
            os.abort()
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(600)


class RemovesFile(OnceAfter):
    """On its read number `after + 1`, rank 0 removes the file PIPEPLAN_TEST_REMOVE names (a
    user deleting a running run's file)."""

    def act(self) -> None:
        if os.environ.get("RANK") != "0":
            return
        path = Path(os.environ["PIPEPLAN_TEST_REMOVE"])
        if "PIPEPLAN_TEST_REPLACE" in os.environ:  # replaced by this text, not removed
            path.write_text(os.environ["PIPEPLAN_TEST_REPLACE"])
        else:
            path.unlink()


def digits_remove_records(seed: int = 0) -> TaskData:
    """Digits; rank 0 removes PIPEPLAN_TEST_REMOVE on its training read number 49, where that
    is set (the launcher's own reads of the data leave it)."""
    data = load_data("digits", models.build("vit-digits"), seed=seed)
    removes = "PIPEPLAN_TEST_REMOVE" in os.environ and "RANK" in os.environ
    train = RemovesFile(data.train, 48) if removes else data.train
    return TaskData("digits", train, data.eval, False)
