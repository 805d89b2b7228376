"""The training loop every rank runs: epochs, steps, AutoFreeze, elastic transitions, records.

`Trainer` reads top to bottom: `__init__` sets all state (the whole model built from the seed,
the data, the freeze decision, the recorder); `train` is the loop, epochs → steps → freeze
decisions → checkpoints; the helpers follow in the order the loop calls them. A phase is one
layout: rank 0 plans it and broadcasts it, every rank migrates state and builds its
`PhaseRuntime`. A step feeds stage 0 (from the AutoCache when the frozen prefix is cached),
steps the runtime and gathers every rank's timings into one `step` record, which rank 0's
`Recorder` writes to `run.jsonl`. Early in each phase rank 0 refits the cost model on the
records so far. At each freeze decision rank 0 asks `pipeplan.freeze.AutoFreeze` and broadcasts
the answer; a grown freeze point starts a new phase, then a checkpoint (docs/architecture.md §5).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import functools
import logging
import math
import os
import shlex
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.utils.data import DistributedSampler

from executor import faults
from executor.cache import ActivationCache, cache_allowed, memory_dir_for, remove_own_caches
from executor.checkpoint import has_checkpoint
from executor.data import (
    batch_pair,
    batch_rows,
    check_batch_inputs,
    check_batch_labels,
    check_rank_held,
    descriptor_2_held,
    hold_rank_modes,
    hold_rank_objects,
    hung_read,
    is_user_code,
    keep_data_directory_on_path,
    rank_held,
    users_side,
    warn_once_per_place,
)
from executor.faults import BEFORE_ANY_UPDATE, DIVERGED, PeerLost, PeerSilent
from executor.migrate import install_states, migrate, optimizer_states
from executor.parallel import PhaseRuntime, StepMean, StepTimes, frozen_forward
from executor.planning import RunPlanner
from executor.records import Recorder, step_loss, step_record, step_row
from executor.task import (
    build_task,
    check_data_facts,
    check_data_kept,
    check_helpers_kept,
    data_facts,
    data_modules_imported,
    export_tokenizer,
    read_data_record,
    record_data_modules,
    save_model,
)
from executor.topology import comm_device, host_group, node_peers, set_host_group
from pipeplan import freeze, models
from pipeplan import log as pipeplan_log
from pipeplan.errors import BadArgumentError, Interrupted, OutputError, PipeplanError, quoted
from pipeplan.fileio import moved_away, where_now_as_named
from pipeplan.formats import (
    CheckpointManifest,
    EpochRecord,
    Forecast,
    Horizon,
    Layout,
    PhaseDecision,
    PhaseRecord,
    Profile,
    RunConfig,
    StepRecord,
    read_records,
)
from pipeplan.plan import make_forecast

log = logging.getLogger("pipeplan.run")
# How long a rank under `pipeplan run` waits for the others to start (its launcher stops them
# all if one fails to). One-sided work (rank 0 writing a checkpoint or re-planning, stage-0
# ranks filling the cache, the ranks reading the held-out data) is waited for under no limit,
# as long as the ranks not there yet are alive (`OneSidedWaits`).
ONE_SIDED_TIMEOUT_S = 24 * 3600
# How much held-out data a rank reads ahead of evaluation's forward passes (its stacked inputs
# and labels, sized by the evaluation's first batch, `Trainer.eval_ahead`). The reads are the
# user's code, as long as it takes on one rank while its pipeline's next stage would wait in a
# transfer under the collective timeout: so a chunk is read, every rank waits for the others'
# reads as for other one-sided work, and then the chunk's forward passes run together. A
# bound, not the whole set: a large held-out set never sits in memory at once. Found by the
# thirty-seventh round: a 13 s `__getitem__` on stage 0 inside evaluation, under
# `--collective-timeout 5`, ended a healthy run as "no response within the collective
# timeout" (stage 1's receive of its activations timed out).
EVAL_AHEAD_BYTES = 256 * 2**20
# Online recalibration: after this many steps of a phase, rank 0 refits the cost model on what
# the run has measured so far (2 warm-up steps are skipped), so the next re-plan uses it.
RECALIBRATE_AFTER_STEPS = 8
_one_sided: list[OneSidedWaits] = []  # what one_sided_done waits with, once joined


# Fits a calibrated profile to run directories, each read under the configuration given for it
# (pipeplan.calibrate.calibrate, passed in by the launcher: the executor does not import the
# analysis layer).
Recalibrate = Callable[[list[Path], Profile, dict[str, RunConfig]], Profile]


def init_distributed(device: str, timeout_s: float, start: StartWait | None = None) -> torch.device:
    """`init_distributed("cpu", 600)` → this rank's device, once it has joined the job its
    launcher (torchrun, or `pipeplan run` through elastic_launch) started: RANK, WORLD_SIZE,
    LOCAL_RANK and the rendezvous (MASTER_ADDR, MASTER_PORT) come from the environment.
    Collectives fail after `timeout_s`; the ranks first wait for each other as `start` says
    (`meet_every_rank`; default: ONE_SIDED_TIMEOUT_S, in silence)."""
    torch.set_num_threads(1)
    if device == "cuda":
        local = int(os.environ.get("LOCAL_RANK", 0))
        if local >= torch.cuda.device_count():
            raise PipeplanError(
                f"LOCAL_RANK {local}: this node has {torch.cuda.device_count()} GPUs; start at "
                "most that many ranks per node (--nproc-per-node)"
            )
        torch.cuda.set_device(local)
        dev = torch.device("cuda", local)
    else:
        dev = torch.device("cpu")
    backend = "nccl" if device == "cuda" else "gloo"
    store = meet_every_rank(start or StartWait(ONE_SIDED_TIMEOUT_S))
    timeout = _dt.timedelta(seconds=timeout_s)
    if store is None:  # under torch's agent: its store, as torch's env:// finds it
        dist.init_process_group(backend, init_method="env://", timeout=timeout)
    else:  # the store rank 0 hosts, as env:// would make it (`torch.distributed.rendezvous`)
        store.set_timeout(timeout)
        dist.init_process_group(
            backend,
            store=dist.PrefixStore("default_pg", store),
            rank=int(os.environ["RANK"]),
            world_size=int(os.environ["WORLD_SIZE"]),
            timeout=timeout,
        )
    # The run's store (the agent's, or rank 0's: backend-independent), before any group is
    # made: every rank's heartbeat exists before the first one-sided wait looks for it.
    store = dist.distributed_c10d._get_default_store()
    _one_sided[:] = [OneSidedWaits.start(store, timeout_s, dist.get_rank(), dist.get_world_size())]
    # gloo on every backend, for host-side gathers (checkpoints) on CPU under NCCL. Under the
    # collective timeout: its ranks come to a gather together, from training. Under 24 h (as
    # the one-sided barrier's group it was), a rank stopped as a checkpoint's gather began
    # hung the run that long (the thirty-fourth round).
    set_host_group(dist.new_group(backend="gloo", timeout=timeout))
    return dev


# ----------------------------------------------------------------------------- the start
# Every rank waits for the others before it joins the process group. torch's own waits (the
# store's, env://'s TCPStore on rank 0) are C++ calls that take no Ctrl-C or SIGTERM until they
# return: a lone rank of a 2-rank torchrun job ignored Ctrl-C for 10 minutes, said nothing, and
# died silently on SIGTERM (the twenty-first round). This wait returns to Python every
# POLL_S at most, so a signal's handler runs at once, and it says what it waits for.

# Seconds between two looks at the store (a look never blocks: `Store.check`; a store's own
# timed wait printed two C++ warnings each time it timed out).
POLL_S = 0.25
# A rank still waiting after this many seconds says so, once (when `StartWait.say`): a normal
# start, whose ranks arrive within a few seconds of each other, says nothing.
NOTICE_AFTER_S = 5.0
# Missing ranks named in a line at most (the rest are counted).
NAMED_MISSING = 8


@dataclass(frozen=True)
class StartWait:
    """How long a rank waits for the others at the start, where that limit comes from (for
    the lines), and whether it says that it waits.

        StartWait(600, "the run's --collective-timeout", say=True)
    """

    limit_s: float
    source: str = ""
    say: bool = False

    def limit(self) -> str:
        """`"600 s (the run's --collective-timeout)"`"""
        return f"{self.limit_s:g} s" + (f" ({self.source})" if self.source else "")


class StartAbandoned(PipeplanError):
    """The ranks did not all arrive within the start's limit, or the store they meet at went
    away: the rank gives up with one line naming the address and the ranks missing."""


def meet_every_rank(start: StartWait) -> dist.TCPStore | None:
    """Wait (`start.limit_s` at most) until every rank of the job has started: joining the
    process group is bounded by the collective timeout, and one rank may take longer than that
    to import torch or set up its GPU. Under torch's launchers their agent hosts the store
    (returns None: torch's env:// finds it again); otherwise rank 0 hosts it, as env:// would,
    and returns it for the process group. StartAbandoned when the time runs out; Interrupted
    on Ctrl-C, whenever it comes.

        store = meet_every_rank(StartWait(600, "the run's --collective-timeout", say=True))
    """
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    host, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    agent = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    attempt = [os.environ.get(f"TORCHELASTIC_{key}", "") for key in ("RUN_ID", "RESTART_COUNT")]
    prefix = "pipeplan/started/" + "/".join(attempt)  # once per start: keys stay in the store
    deadline = time.monotonic() + start.limit_s
    try:
        if not agent and rank == 0:
            store = _host_store(host, port, world)
        else:
            store = _join_store(host, port, world, deadline, start)
        store.set(f"{prefix}/{rank}", "1")
        if store.add(f"{prefix}/count", 1) == world:  # the last to arrive says all have
            store.set(f"{prefix}/all", "1")
        hint = _not_this_node(host) if not agent and rank == 0 else ""  # where it listens
        _await_all(store, prefix, world, deadline, start, f"{host}:{port}", hint)
    except KeyboardInterrupt:
        raise Interrupted from None
    except dist.DistError as exc:  # the store went away (its host gave up, or died)
        raise StartAbandoned(
            f"lost the store at {host}:{port} while waiting for the other ranks of "
            f"WORLD_SIZE={world} ({_last_line(exc)}); the rank hosting it stopped"
        ) from None
    return None if agent else store


def _not_this_node(host: str) -> str:
    """`", and MASTER_ADDR=HOST … is no address of this node …"` where none of the addresses
    `host` resolves to is this node's (none can be bound here), else "". Said, not refused,
    in rank 0's line when the others never come: a name for this node's address that the
    node itself does not hold (a cloud's public address, a service's) can still reach it.
    Found by the fifty-eighth round: rank 0 said it waited "at 192.0.2.1", another host's
    address, where the others went."""
    try:
        found = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return ""
    for family, kind, proto, _, address in found:
        try:
            with socket.socket(family, kind, proto) as probe:
                probe.bind((address[0], 0, *address[2:]))
            return ""
        except OSError:
            continue
    return (
        f", and MASTER_ADDR={host}, where the others look for rank 0, is no address of this "
        "node: give every rank rank 0's node's"
    )


def _host_store(host: str, port: int, world: int) -> dist.TCPStore:
    """Rank 0's store on MASTER_PORT, as env:// makes it, but not waiting for the others in
    its constructor (a C++ wait): `_await_all` waits for them. MASTER_ADDR names this node:
    one that does not resolve is said at once (the fifty-sixth round: torch's store warned
    in 51 lines of C++ frames, and waited past the timeout)."""
    try:
        socket.getaddrinfo(host, port)
    except (OSError, UnicodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else "not a host name"
        raise StartAbandoned(
            f"MASTER_ADDR={host}: no host of that name is known ({why}); rank 0 hosts the "
            "ranks' store there: give the address of its node"
        ) from None
    try:
        # The store listens on every address of the node; its own client, made with it,
        # connects over the loopback: through MASTER_ADDR it waited 60 s and printed C++
        # frames where the name resolved to an address that is not this node's, then blamed
        # the port (the fifty-seventh round). Whether the others reach it is theirs to say.
        return dist.TCPStore(
            "127.0.0.1",
            port,
            world,
            is_master=True,
            timeout=_dt.timedelta(seconds=60),
            wait_for_workers=False,
            multi_tenant=True,
        )
    except dist.DistError as exc:
        raise StartAbandoned(
            f"MASTER_PORT={port}: rank 0 cannot host the ranks' store there ({_last_line(exc)}); "
            "pick a free port"
        ) from None


def _join_store(
    host: str, port: int, world: int, deadline: float, start: StartWait
) -> dist.TCPStore:
    """A client of the store at host:port, once something listens there: looked for with a
    plain connection every POLL_S (a TCPStore's own connect retries in C++, printing an error
    and a C++ backtrace for each try)."""
    started = time.monotonic()
    said = False
    while True:
        # A name not (yet) known is waited for too: a cluster's DNS may learn a node's name
        # only once it is up. The line says which it was (47th round: "nothing listens").
        unknown = None
        try:
            socket.create_connection((host, port), timeout=min(1.0, start.limit_s)).close()
            break
        except socket.gaierror as exc:
            unknown = exc.strerror
        except UnicodeError:  # a name no resolver can be asked for (`a..b`: 56th round)
            unknown = "not a host name"
        except OSError:
            pass
        now = time.monotonic()
        if now >= deadline:
            why = (
                "nothing listens there; start every rank within that time, with"
                if unknown is None
                else f"no host of that name is known ({unknown}); give every rank"
            )
            raise StartAbandoned(
                f"gave up after {start.limit()} waiting for rank 0 of WORLD_SIZE={world} to "
                f"open its store at {host}:{port}: {why} the same MASTER_ADDR and MASTER_PORT"
            )
        if start.say and not said and now - started >= NOTICE_AFTER_S:
            log.info(
                "waiting for rank 0 to open its store at %s:%d, at most %s",
                host,
                port,
                start.limit(),
            )
            said = True
        time.sleep(min(POLL_S, max(deadline - now, 0.0)))
    wait_s = min(max(deadline - time.monotonic(), 1.0), 30.0)
    return _store_client(host, port, world, wait_s, start.limit())


# Seconds a store client is given past its own timeout before the rank stops waiting for it.
STORE_GRACE_S = 2.0


def _store_client(host: str, port: int, world: int, wait_s: float, limit: str) -> dist.TCPStore:
    """A TCPStore client of host:port, made in a thread the rank waits for `wait_s` (plus
    STORE_GRACE_S) at most, a POLL_S at a time so that a signal's handler runs. torch's client
    waits for the store's answer without a limit once a connection is taken: a port held by
    another program that accepts and never answers kept a rank past --collective-timeout,
    deaf to Ctrl-C and SIGTERM, until that program closed it (the forty-seventh round). The
    thread, still waiting in C++, goes with the process. `limit`: the start's, for the line."""
    made: list[Any] = []

    def connect() -> None:
        try:
            timeout = _dt.timedelta(seconds=wait_s)
            made.append(dist.TCPStore(host, port, world, False, timeout=timeout))
        except BaseException as exc:  # raised again in the rank's own thread
            made.append(exc)

    # torch's client logs each failed try of its handshake, with a C++ backtrace, to
    # descriptor 2: 85 to 181 lines before the one line (the fifty-first round: a port held by
    # a program that answers, or closes at once). Held, and passed on only where it connects.
    said: list[bytes] = []
    with descriptor_2_held(said):
        threading.Thread(target=connect, name="pipeplan-store-client", daemon=True).start()
        started = time.monotonic()
        while not made:
            if time.monotonic() - started >= wait_s + STORE_GRACE_S:
                raise StartAbandoned(
                    f"MASTER_PORT={port}: something at {host}:{port} took the connection but "
                    f"never answered as the ranks' store within {limit}: another program holds "
                    "the port; pick a free one"
                )
            time.sleep(0.01 if time.monotonic() - started < 1 else POLL_S)  # a store: at once
    if isinstance(made[0], dist.DistError):
        # It connected, but what answered is no store of torch's (or the store went away in
        # the handshake): "lost the store … the rank hosting it stopped" blamed a rank.
        raise StartAbandoned(
            f"MASTER_PORT={port}: something at {host}:{port} took the connection but did not "
            f"answer as the ranks' store ({_last_line(made[0])}): another program holds the "
            "port, or rank 0's store stopped as this rank joined; pick a free port"
        )
    if isinstance(made[0], BaseException):
        raise made[0]
    os.write(2, b"".join(said))
    return made[0]


def _await_all(
    store: dist.TCPStore,
    prefix: str,
    world: int,
    deadline: float,
    start: StartWait,
    at: str,
    hint: str = "",
) -> None:
    """Look (never blocking) every POLL_S at most until the last rank has arrived; say once
    that this rank waits (`start.say`, after NOTICE_AFTER_S); StartAbandoned naming the ranks
    that never arrived once `deadline` is past, and `hint` (`_not_this_node`)."""
    started = time.monotonic()
    said = False
    pause = 0.01
    while not store.check([f"{prefix}/all"]):
        now = time.monotonic()
        if now >= deadline:
            raise StartAbandoned(
                f"gave up after {start.limit()} waiting at {at} for the other ranks of "
                f"WORLD_SIZE={world}: {_missing(store, prefix, world)}; start every rank "
                f"within that time{hint}"
            )
        if start.say and not said and now - started >= NOTICE_AFTER_S:
            arrived = store.add(f"{prefix}/count", 0)
            log.info(
                "waiting at %s for the other ranks (%d of %d have started), at most %s",
                at,
                arrived,
                world,
                start.limit(),
            )
            said = True
        time.sleep(min(pause, max(deadline - now, 0.0)))
        pause = min(pause * 2, POLL_S)  # quick while the others arrive together


def _missing(store: dist.TCPStore, prefix: str, world: int) -> str:
    """`"1 of 2 ranks arrived; rank 1 never did"`: the ranks that never set their key."""
    missing = [r for r in range(world) if not store.check([f"{prefix}/{r}"])]
    return f"{world - len(missing)} of {world} ranks arrived; {_ranks(missing)} never did"


def _ranks(ranks: list[int]) -> str:
    """`"rank 1"`, `"ranks 1, 3"`, `"ranks 0, 1, … 7 and 4 more"` (NAMED_MISSING named)."""
    named = ", ".join(map(str, ranks[:NAMED_MISSING]))
    if len(ranks) > NAMED_MISSING:
        named += f" and {len(ranks) - NAMED_MISSING} more"
    return f"rank {named}" if len(ranks) == 1 else f"ranks {named}"


def _last_line(exc: BaseException) -> str:
    """A store error's last line, without the C++ source location torch puts first."""
    lines = str(exc).strip().splitlines()
    return lines[-1].rsplit("] ", 1)[-1] if lines else type(exc).__name__


# ----------------------------------------------------------------------------- one-sided work
# A wait for one-sided work (a checkpoint's write, the cache's fill, evaluation, rank 0's
# planning) can take any time, so no timeout fits it; but a rank SIGSTOPped or hung meanwhile
# left the others waiting 24 h in silence, a gloo barrier under ONE_SIDED_TIMEOUT_S (the
# thirty-fourth round). So every rank proves it is alive while it works: a daemon thread
# counts a heartbeat into the run's store every BEAT_S (a stopped process's threads all stop;
# a busy one's keeps beating), and the wait is a barrier on that store which looks every
# POLL_S, never blocking in C++ (signals still end it), and fails once a rank that has not
# arrived has not beaten for the collective timeout. A process that holds the GIL in C code
# for that long (no torch operation does) is taken for a hung one.

# Seconds between two heartbeats.
BEAT_S = 1.0


class _Heartbeat(threading.Thread):
    """This rank's sign of life: `"{waits arrived at} {beats}"` under `key`, the beats
    counted every BEAT_S on a connection of its own (a clone of the store: the main thread's
    calls never wait for it). A rank's beats are compared with themselves only, by whoever
    waits, on its own clock: the nodes' clocks need not agree."""

    def __init__(self, store: dist.Store, key: str, rank: int = 0, timeout_s: float = math.inf):
        super().__init__(name="pipeplan-heartbeat", daemon=True)
        self.store, self.key = store, key
        self.rank, self.timeout_s = rank, timeout_s  # for `end_a_hung_read`
        # Where the rank's line goes (torchrun's console, or its log under `pipeplan run`),
        # as it is now: a hung call into the data code holds descriptor 2 and sys.stderr.
        self.console = os.dup(2)
        self.arrived = self.beats = 0
        self.lock = threading.Lock()  # a beat never overwrites an arrival with its old count
        self.done = threading.Event()

    def publish(self) -> None:
        with self.lock:
            self.store.set(self.key, f"{self.arrived} {self.beats}")

    def arrive(self, wait: int) -> None:
        """Say that this rank has arrived at one-sided wait number `wait`."""
        self.arrived = wait
        self.publish()

    def run(self) -> None:
        try:
            while not self.done.wait(BEAT_S):
                self.end_a_hung_read()
                self.beats += 1
                try:
                    self.publish()
                except Exception as exc:  # the store went away: the run is ending; say nothing
                    log.debug("heartbeat stopped: %s", exc)
                    return
        finally:
            with contextlib.suppress(OSError):
                os.close(self.console)

    def end_a_hung_read(self) -> None:
        """A rank whose data code has been reading one item for the collective timeout is
        hung (`data.hung_read`): its main thread, in the user's code, cannot be made to
        return, so this thread ends the rank with its report, which the launcher names it by,
        as it names a rank that raised."""
        # Early by two beats (at most half the timeout): a peer waiting in a collective
        # entered it after this read began, but within a beat or two, and timed out first,
        # naming itself (forty-seventh round: rank 0 blamed under torchrun, no item named).
        hung = hung_read(self.timeout_s, min(2 * BEAT_S, self.timeout_s / 2))
        if hung is None:
            return
        report = faults.write_report(BadArgumentError(hung), self.rank, traced=False)
        # Under torchrun this is the run's line, as a rank that raised prints its own (the
        # forty-seventh round: rank 1 hung importing its data ended in torchrun's summary
        # alone); under `pipeplan run`, its log's, the launcher saying it on the console.
        line = pipeplan_log.error_line(f"rank {self.rank}: {report.message}") + "\n"
        with contextlib.suppress(OSError):
            os.write(self.console, line.encode())
        # The node's /dev/shm cache this rank made, as a rank that raised removes it (the
        # fifty-first round: rank 0, hung in an evaluation read under torchrun, left it).
        with contextlib.suppress(OSError):
            remove_own_caches()
        os._exit(faults.EXIT_FAILED)


@dataclass
class OneSidedWaits:
    """The barriers of one-sided work, on the run's store (backend-independent: the same
    under gloo and NCCL, under `pipeplan run` and torchrun on several nodes). Every rank makes
    the same waits in the same order, so the n-th wait's keys are the same everywhere.

        waits = OneSidedWaits.start(store, timeout_s=600, rank=1, world=2)
        waits.wait()               # until every rank has arrived, while the missing ones beat
        waits.wait(by_rank0=True)  # rank 0: the others, idle, have the timeout to arrive
    """

    store: dist.Store
    rank: int
    world: int
    timeout_s: float
    prefix: str
    heartbeat: _Heartbeat
    count: int = 0  # waits made so far

    @classmethod
    def start(cls, store: dist.Store, timeout_s: float, rank: int, world: int) -> OneSidedWaits:
        """Publish this rank's heartbeat (returns once the store holds it) and start it."""
        attempt = [os.environ.get(f"TORCHELASTIC_{key}", "") for key in ("RUN_ID", "RESTART_COUNT")]
        prefix = "pipeplan/one-sided/" + "/".join(attempt)  # once per start, as the start's
        heartbeat = _Heartbeat(store.clone(), f"{prefix}/alive/{rank}", rank, timeout_s)
        heartbeat.publish()
        heartbeat.start()
        return cls(store.clone(), rank, world, timeout_s, prefix, heartbeat)

    def wait(self, by_rank0: bool = False) -> None:
        """Until every rank has arrived. PeerSilent naming the ranks missing once one of them
        has not beaten for the collective timeout; with `by_rank0` on rank 0, once they have
        not arrived within it (they were idle: one missing is stopped or hung, even beating)."""
        self.count += 1
        keys = f"{self.prefix}/{self.count}"
        self.heartbeat.arrive(self.count)
        if self.store.add(f"{keys}/count", 1) == self.world:  # the last to arrive says all have
            self.store.set(f"{keys}/all", "1")
            if self.count > 1:  # every rank has left the wait before: its keys can go
                self.store.delete_key(f"{self.prefix}/{self.count - 1}/count")
                self.store.delete_key(f"{self.prefix}/{self.count - 1}/all")
        started = looked = time.monotonic()  # the first look after BEAT_S: most waits are short
        seen: dict[int, tuple[str, float]] = {}  # rank → (its beats, when they last changed)
        pause = 0.01
        while not self.store.check([f"{keys}/all"]):
            now = time.monotonic()
            if self.watches and now - looked >= BEAT_S:
                self._check_alive(seen, now, bounded=by_rank0 and self.rank == 0, since=started)
                looked = now
            time.sleep(pause)
            pause = min(pause * 2, POLL_S)  # quick while the others arrive together

    @property
    def watches(self) -> bool:
        """Whether this rank reads the others' heartbeats as it waits: the first and the last
        rank only (either is enough: the agent then stops every rank; two, so that one of
        them stopped is still seen). Every rank reading every heartbeat each second made
        the store serve world² reads a second: 16 million at 4,096 ranks."""
        return self.rank in (0, self.world - 1)

    def _check_alive(
        self, seen: dict[int, tuple[str, float]], now: float, bounded: bool, since: float
    ) -> None:
        """PeerSilent when a rank that has not arrived has been silent for the timeout (or,
        `bounded`, has not arrived within it)."""
        values = [v.decode().split() for v in self.store.multi_get(self.alive_keys())]
        missing, silent = [], []
        for rank, (arrived, beats) in enumerate(values):
            if int(arrived) >= self.count:
                continue
            missing.append(rank)
            if rank not in seen or seen[rank][0] != beats:
                seen[rank] = (beats, now)
            elif now - seen[rank][1] > self.timeout_s:
                silent.append(rank)
        if silent:
            raise PeerSilent(
                f"no response from {_ranks(silent)} within the collective timeout of "
                f"{self.timeout_s:g} s (stopped or hung: no heartbeat) while rank {self.rank} "
                "waited for one-sided work"
            )
        if bounded and missing and now - since > self.timeout_s:
            raise PeerSilent(
                f"no response from {_ranks(missing)} within the collective timeout of "
                f"{self.timeout_s:g} s (stopped or hung) while rank 0 waited after its own work"
            )

    def alive_keys(self) -> list[str]:
        """Each rank's heartbeat key in the store, rank by rank."""
        return [f"{self.prefix}/alive/{r}" for r in range(self.world)]

    def close(self) -> None:
        """Stop the heartbeat (the run's end: no wait follows), its last beat written."""
        self.heartbeat.done.set()
        self.heartbeat.join(timeout=5)  # a beat takes milliseconds; a store gone, no longer


def one_sided_done(by_rank0: bool = False) -> None:
    """Collective: wait until every rank has finished its one-sided work (a checkpoint write,
    the cache fill, evaluation, rank 0's planning), as long as it takes while the ranks not
    there yet are alive, so the next collective starts together (`OneSidedWaits`). A rank
    silent for the collective timeout ends the wait: PeerSilent, reported as a collective's
    timeout, so the launcher names the silent rank ("no response within the collective
    timeout"). A rank SIGSTOPped while the others waited hung the run for 24 h, silent (the
    thirty-fourth round).

    `by_rank0`: rank 0 alone did the work, and the others came straight from a collective
    with it, so they were waiting before it finished: rank 0 waits for them at most the
    collective timeout, heartbeat or not (one missing longer is stopped or hung)."""
    if not _one_sided:  # no store of its own (not joined through init_distributed)
        dist.barrier()
        return
    _one_sided[0].wait(by_rank0)


def silent_peers(look_s: float = 2.5 * BEAT_S) -> list[int]:
    """The other ranks whose heartbeat did not advance over `look_s` (stopped or hung), read
    twice from the run's store: for a rank whose collective timed out, so that it names the
    peer that stopped answering rather than itself. Under torchrun no launcher of pipeplan's
    watches the ranks' process states (forty-seventh round: a SIGSTOPped rank went unnamed,
    the waiting rank 0 was). [] when there is no store to ask, or it does not answer.

        silent_peers()   # → [1]: rank 1 was SIGSTOPped
    """
    if not _one_sided:
        return []
    waits = _one_sided[0]
    names = waits.alive_keys()
    try:
        store = waits.store.clone()
        store.set_timeout(_dt.timedelta(seconds=look_s))  # a store gone must not hang the report
        before = store.multi_get(names)
        time.sleep(look_s)
        after = store.multi_get(names)
    except Exception as exc:  # the store went away with the run: no names to give
        log.debug("no heartbeats to read: %s", exc)
        return []
    return [
        rank
        for rank, (a, b) in enumerate(zip(before, after, strict=True))
        if rank != waits.rank and a.split()[1:] == b.split()[1:]
    ]


def named_silent(exc: BaseException) -> BaseException:
    """`exc`, or where it is a collective's timeout and peers are silent, a PeerSilent that
    names them (chained from `exc`), as a wait for one-sided work names them."""
    return _peers_named(
        exc, "timeout", PeerSilent, "no response from {} (stopped or hung: no heartbeat)"
    )


def named_lost(exc: BaseException) -> BaseException:
    """`exc`, or where it is a collective's lost connection and peers' heartbeats have
    stopped, a PeerLost that names them (chained from `exc`). For torchrun's ranks, whom no
    launcher of pipeplan's names: a peer killed mid-step left the survivor's line saying
    gloo's "Connection reset by peer", naming no one (the fifty-third round). No heartbeats
    to read (the store went with the rank that hosted it): `exc` as it is."""
    what = "lost {} (its heartbeat stopped: killed or failed; its node's output says why)"
    return _peers_named(exc, "lost", PeerLost, what)


def _peers_named(
    exc: BaseException, kind: str, error: type[PipeplanError], what: str
) -> BaseException:
    """`exc`, or where it is a collective's failure of `kind` and peers' heartbeats have
    stopped (`silent_peers`), an `error` saying `what` of them (chained from `exc`)."""
    if faults.classify(exc) != kind or isinstance(exc, error):
        return exc
    silent = silent_peers()
    if not silent:
        return exc
    named = error(
        f"{what.format(_ranks(silent))} while rank {_one_sided[0].rank} waited in a "
        f"collective: {faults.describe(exc, kind)}"
    )
    named.__cause__ = exc
    return named


def end_one_sided_waits() -> None:
    """At the run's end, before the process group goes: the heartbeat stops."""
    if _one_sided:
        _one_sided.pop().close()


class RunDirectoryMoved(OutputError):
    """The run directory is no longer at the path its ranks write to: moved or deleted while
    they trained (`Trainer.check_in_place`)."""


def moved_message(run_dir: Path, step: int) -> str:
    """What a rank says once its run directory moved away (`Trainer.check_in_place`): where
    it is now (`where_now_as_named`: the folder the rank holds open) and what continues it there, as
    torchrun's entry takes it. Under torchrun this is the run's line (under `pipeplan run` the
    launcher says its own); it said "moved or was deleted … NEWPATH" even where the folder had
    only been renamed (the thirtieth round).

        moved_message(Path("runs/k"), 15)
        # runs/k: the run directory moved to runs/k2 at step 15; resume it there with
        # -m executor.launch runs/k2 --resume
    """
    now = where_now_as_named(run_dir)
    if now is None:
        return (
            f"{run_dir}: the run directory moved or was deleted at step {step}; if it was "
            "moved, resume it where it is now with -m executor.launch NEWPATH --resume"
        )
    if not str(now).isprintable():  # a line feed would split the line, an ESC reach the terminal
        return (
            f"{run_dir}: the run directory moved to {quoted(str(now))} at step {step}; rename "
            "it to a printable name, then resume it there with -m executor.launch NEWPATH --resume"
        )
    shown = shlex.quote(str(now))
    if has_checkpoint(now):
        more = f"resume it there with -m executor.launch {shown} --resume"
    elif step == 0:  # nothing trained: it starts again as prepared (`check_not_trained`)
        more = f"start it there with -m executor.launch {shown}"
    else:
        more = "it has no checkpoint to resume from: prepare a new run to train it again"
    return f"{run_dir}: the run directory moved to {now} at step {step}; {more}"


class Trainer:
    def __init__(
        self,
        cfg: RunConfig,
        run_dir: Path,
        planner: RunPlanner,
        device: torch.device,
        recalibrate: Recalibrate | None = None,
        resume: bool = False,
    ):
        # pipeplan's modules and the torch and transformers modules it trains with, as they are
        # before the data code first runs here (its function, in build_task): `check_read`
        # compares them after each batch read, `check_held` before the rank writes what they
        # made. None: the data is no code of yours.
        self.held = rank_held(models.model_modules(cfg.model)) if is_user_code(cfg.data) else None
        self.cfg, self.run_dir, self.planner, self.device = cfg, run_dir, planner, device
        self.fit_profile = recalibrate
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        # data.json as the run starts (the launcher checked it), with what checkpoints add:
        # their manifests record this, never data.json as edited since (read before the
        # data is: its code may edit it too).
        self.data_record = read_data_record(run_dir)
        # Same weights everywhere: the checkpoint's (`resume`: the model folder's are then not
        # read), or the folder's or drawn from the seed (a fresh head too); launch.prepare
        # already gave the builder's notices once.
        # Its model is held as soon as it is built (`hold_rank_objects`), before the data is
        # read against it: the sixty-sixth round's `__getitem__` hooked each BertLayer, found
        # through `gc`, as the first items were checked against the model.
        self.seq, self.data = build_task(
            cfg, quiet=True, from_checkpoint=resume, built=self.hold_model
        )
        # Each rank called the data's function again: what it got must be what the launcher
        # checked (data.json's; on resume what the run started with), before any collective
        # (a longer set on one rank hung the run for --collective-timeout: thirty-second
        # round). Its lengths, read once here, are the ones this rank uses from now on.
        self.facts = data_facts(self.data, self.seq)
        self.check_held(None)  # what its function changed (a table of pipeplan's: no function)
        recorded = self.data_record.facts if self.data_record else None
        check_data_facts(recorded, self.facts, cfg.data, f"rank {self.rank}")
        warn_once_per_place(cfg.data, self.rank)  # the data's warnings as items are read
        keep_data_directory_on_path(cfg.data)  # and what they import as they are read
        # Your modules data.json lists and those this rank has found its data import since
        # (`record_data_modules`, at each checkpoint); None: the data is no code of yours.
        # And the modules looked at already: each checkpoint looks at those new since.
        listed = {file.path for file in self.data_record.files} if self.data_record else set()
        self.data_modules = listed if is_user_code(cfg.data) else None
        self.modules_seen: set[str] = set()
        # The layers stay on the host: each phase's runtime puts only its stage on `device`.
        # From here each rank draws its own dropout.
        torch.manual_seed(cfg.seed * 1000 + self.rank + 1)
        self.use_cache, reason = cache_allowed(self.data.augmented)
        self.use_cache = self.use_cache and cfg.cache
        if cfg.cache and not self.use_cache and self.rank == 0:
            log.warning("AutoCache off: %s", reason)
        self.steps_per_epoch = cfg.steps_per_epoch(self.facts.train_samples)
        self.total_steps = self.steps_per_epoch * cfg.epochs
        self.frozen_layers = 0
        self.decision_due = False  # a resume's, from a final checkpoint (`resume`)
        self.step_index = 0  # global steps done
        self.phase_index = 0
        self.phase_steps = 0  # steps done in this phase (online recalibration)
        # The epochs' ends where a run ended and a resume continued (the manifest's run_ends).
        self.run_ends: list[int] = []
        self.autofreeze = freeze.AutoFreeze(
            cfg.freeze, self.seq.num_blocks, cfg.alpha, list(cfg.freeze_list or [])
        )
        self.cache: ActivationCache | None = None  # this node's, on every rank of the node
        self.node_cache: tuple[list[int], int, Path] | None = None  # (peers, node, memory dir)
        self.runtime: PhaseRuntime | None = None
        self.decision: PhaseDecision | None = None
        self.recorder = Recorder(run_dir / "run.jsonl", writes=self.rank == 0)  # closed in finish()
        # Rank 0's tokenizer for the trained model (`save_model`), loaded as the rank starts:
        # the one the run checked and trained with, parsed while the rank has the most memory
        # it will have. Loaded at the end, a tokenizer.json the launcher's parse check let
        # through was refused under `ulimit -v` after every epoch had trained, and one removed
        # meanwhile failed the run (the seventieth round).
        self.tokenizer = export_tokenizer(cfg, self.seq) if self.rank == 0 else None

    def train(self, resume: bool = False) -> None:
        """The loop: epochs → steps → freeze decisions → checkpoints."""
        cfg = self.cfg
        start_epoch, skip = self.resume() if resume else self.begin()
        # The freeze decision at the end of the run this one continues: it had no epoch after
        # its last, so none was made (the thirty-ninth round: a `--freeze alpha` run extended
        # by --epochs never froze again, 0, 4, 4, 4 where 0, 4, 6, 7). Made by the schedules
        # decided without gradients; `auto` measured that epoch's norms for no decision
        # (`history.run_ends`) and decides at the first added epoch's end.
        if resume and self.decision_due and start_epoch < cfg.epochs and cfg.freeze != "auto":
            self.maybe_refreeze(start_epoch, None)
        for epoch in range(start_epoch, cfg.epochs):
            t0 = time.perf_counter()
            # A mid-epoch resume: the epoch's steps before the checkpoint are in run.jsonl
            # (checked before any rank started to reach it), the one record of them. Its epoch
            # record counts them as the uninterrupted run's did: their losses in the mean and
            # their recorded time in the epoch's. Rank 0 alone writes the record, and alone
            # holds them. (Its phase is the one its end runs in: `end_epoch`.)
            done = self.recorder.steps_of(epoch) if skip else []
            losses = [s.loss for s in done if s.loss is not None]
            t0 -= sum(s.step_s for s in done)
            for step_in_epoch, indices in self.epoch_batches(epoch, skip):
                record = self.train_step(epoch, indices)
                if record.loss is not None:
                    losses.append(record.loss)
                if self.phase_steps == RECALIBRATE_AFTER_STEPS:
                    self.recalibrate()
                if step_in_epoch + 1 < self.steps_per_epoch:  # else the epoch's end does both
                    moved = self.due(cfg.freeze_every) and self.maybe_refreeze(
                        epoch, self.gather_grad_norms(), step_in_epoch + 1
                    )
                    if not moved and self.due(cfg.checkpoint_every):
                        self.checkpoint(epoch, step_in_epoch + 1)
            if not losses and getattr(self.seq, "task", None) == "causal-lm":
                # Every rank holds every step's record: all stop here alike. A corpus that
                # gives nothing to predict trained nothing (a module's dataset is not read
                # whole before the run, as a text file is: `data.check_compatible`).
                # Named by --data and its epoch counted from 1, as the failure's line around it
                # and the held-out one are (the sixty-second round: "at the end of epoch 1:
                # data 'lm_onetok': no training sample of epoch 0").
                raise BadArgumentError(
                    f"data {quoted(cfg.data)}: no training sample of epoch {epoch + 1} has a "
                    f"next token to predict (every label after the first position is "
                    f"{models.IGNORE_INDEX}); a causal LM needs targets"
                )
            norms = self.end_epoch(epoch, time.perf_counter() - t0, losses)
            # A checkpoint due on the epoch's last step is written here, after its epoch record,
            # unless the freeze decision's transition wrote one (the last epoch's is the final).
            if epoch + 1 < cfg.epochs:
                moved = self.maybe_refreeze(epoch + 1, norms)
                if not moved and self.due(cfg.checkpoint_every):
                    self.checkpoint(epoch + 1, 0)
            skip = 0  # only a resumed epoch starts mid-way
        self.checkpoint(cfg.epochs, 0)  # the final state, resumable for more epochs
        if self.rank == 0:  # the checkpoint gathered every layer's current values here
            self.check_in_place()
            self.check_held("the trained model")
            self.seq.layers.cpu()  # its own stage's from its device: the export is host tensors
            # Again once its files are written, before they are published: data code's
            # threads run on through the write (`check_held`).
            check = functools.partial(self.check_held, "the trained model")
            save_model(self.seq, self.run_dir, self.tokenizer, check=check)
        self.finish()

    # ----------------------------------------------------------------- start or resume

    def begin(self) -> tuple[int, int]:
        """A fresh run enters its first phase; returns where to start: (epoch, step in epoch)."""
        self.frozen_layers = self.autofreeze.first
        one_sided_done()  # every rank has built its task: rank 0's planning is then bounded
        self.enter_phase(self.decide_phase(self.frozen_layers, 0), epoch=0)
        return 0, 0

    def resume(self) -> tuple[int, int]:
        """Continue from the latest checkpoint, in its phase's layout on its world size, else
        re-planned for this one; returns where to start: (epoch, step in epoch)."""
        from executor import checkpoint, history

        if self.rank == 0:  # the writer; under torchrun no launcher removed a killed rank's
            checkpoint.remove_partial(self.run_dir)
        # The command (or torchrun's entry) that started this rank said any notice once.
        manifest, model, optimizer, rng = checkpoint.load_latest(self.run_dir, notice=False)
        # `pipeplan run --resume` checked this before any rank started; torchrun did not.
        checkpoint.check_trained_with(manifest, self.cfg, self.run_dir / "run.json")
        check_data_kept(self.run_dir, manifest, checkpoint.manifest_path(self.run_dir, manifest))
        # Every rank has read the checkpoints: rank 0 may now move those a fallback passed over
        # (`set_aside_passed_over`), so that `latest` names the one the run continues from.
        one_sided_done()
        if self.rank == 0 and (moved := checkpoint.set_aside_passed_over(self.run_dir, manifest)):
            log.warning("%s", moved)
        states = checkpoint.restore(self.seq.layers, model, optimizer)
        # The resumed run is a new phase: the steps before the checkpoint keep the record of
        # the layout they ran on, and the layout may differ now (another world size).
        self.frozen_layers, self.phase_index = manifest.frozen_layers, manifest.phase + 1
        # A final checkpoint (its run's last epoch ended there) is one no freeze decision
        # followed: `train` makes it before the added epochs.
        self.decision_due = (manifest.epoch, manifest.step_in_epoch) == (manifest.config.epochs, 0)
        self.step_index = manifest.step
        self.autofreeze.history = [{int(k): v for k, v in h.items()} for h in manifest.grad_history]
        self.run_ends = sorted(history.run_ends(manifest, self.phases_before(manifest)))
        self.recorder.truncate(manifest)
        # Every rank has loaded the checkpoint, however long it took it: rank 0's pricing
        # and planning that follow are then bounded (`share_decision`).
        one_sided_done()
        if self.rank == 0:  # the planner's rank
            self.continue_pricing(manifest)
        decision = self.share_decision(lambda: self.resumed_phase(manifest))
        self.enter_phase(decision, manifest.epoch, resumed=True)
        self.restore_runtime(manifest, states)
        if manifest.world_size == self.world:  # same ranks: the same random streams
            checkpoint.restore_rng(rng, self.rank, self.device)
        return manifest.epoch, manifest.step_in_epoch

    def phases_before(self, manifest: CheckpointManifest) -> list[PhaseRecord]:
        """run.jsonl's phases up to the checkpoint's, where `history.run_ends` needs them: for
        a manifest written before its run_ends, whose resumed phases were the run's ends. Every
        rank reads them alike (rank 0's truncation keeps them: it replaces the file whole)."""
        if manifest.run_ends is not None:  # the manifest lists the ends itself
            return []
        records = read_records(self.run_dir / "run.jsonl")
        return [r for r in records if isinstance(r, PhaseRecord) and r.phase <= manifest.phase]

    def restore_runtime(self, manifest: CheckpointManifest, states: dict) -> None:
        """The resumed phase's runtime takes the optimizer state and the gradient-norm sums of
        the layers this rank owns."""
        runtime = self.runtime
        owned = set(runtime.params) if runtime.module is not None else set()
        install_states(runtime.optimizer, {p: s for p, s in states.items() if p in owned})
        if runtime.topology.replica == 0 and runtime.module is not None:
            mine = {i for i, _ in runtime.module.indexed()}
            runtime.grad_norm_sums = {
                int(k): v for k, v in manifest.grad_norm_sums.items() if int(k) in mine
            }
            runtime.grad_norm_steps = manifest.grad_norm_steps

    # ----------------------------------------------------------------- phases

    def decide_phase(self, frozen_layers: int, epoch: int) -> PhaseDecision:
        """Collective: rank 0 plans the phase starting in `epoch` (`plan_phase`); everyone
        receives the same decision."""
        return self.share_decision(lambda: self.plan_phase(frozen_layers, epoch))

    def share_decision(self, decide: Callable[[], PhaseDecision]) -> PhaseDecision:
        """Collective: rank 0's `decide()`, the same decision on every rank. The others come
        straight from a collective with rank 0 (`begin` and `resume` wait for every rank
        first): rank 0 waits for them at most the collective timeout (`one_sided_done`)."""
        box: list[PhaseDecision | None] = [decide() if self.rank == 0 else None]
        one_sided_done(by_rank0=True)
        dist.broadcast_object_list(box, src=0)
        assert box[0] is not None
        return box[0]

    def plan_phase(
        self, frozen_layers: int, epoch: int, previous: Layout | None = None
    ) -> PhaseDecision:
        """Rank 0's plan of the phase starting in `epoch`, by the plan's rule: over the epochs
        left, from the current placement or `previous`."""
        horizon = Horizon(
            samples=self.steps_per_epoch * self.cfg.global_batch,
            epochs=max(1, self.cfg.epochs - epoch),
            previous=self.decision.layout if self.decision is not None else previous,
            cache=self.use_cache,
        )
        return self.planner(frozen_layers, horizon)

    def resumed_phase(self, manifest: CheckpointManifest) -> PhaseDecision:
        """Rank 0's decision for the phase a resume enters: on the checkpoint's world size the
        phase continues as the uninterrupted run did, bit for bit, in the layout it ran in
        (`kept_phase`); on another it is planned afresh."""
        if manifest.world_size != self.world:
            return self.plan_phase(self.frozen_layers, manifest.epoch)
        kept = self.kept_phase(manifest)
        return kept or self.plan_phase(self.frozen_layers, manifest.epoch, manifest.layout)

    def continue_pricing(self, manifest: CheckpointManifest) -> None:
        """Rank 0, resuming: plan on with the profile the checkpoint's phase was priced with
        (a calibration-N.json the run fitted, whose sha256 its records hold and the resume's
        checks compared), not the profile.json the run started from: the resumed run's next
        decisions were priced uncalibrated until its next refit, RECALIBRATE_AFTER_STEPS
        steps into a phase (the nineteenth session's notes)."""
        for record in read_records(self.run_dir / "run.jsonl"):
            if isinstance(record, PhaseRecord) and record.phase == manifest.phase:
                self.planner.continue_with(self.run_dir, record.pricing.profile)
                return

    def kept_phase(self, manifest: CheckpointManifest) -> PhaseDecision | None:
        """Rank 0, resuming on the checkpoint's world size: the decision of the phase the
        checkpoint was taken in, as run.jsonl recorded it (its layout, prediction and
        pricing). The uninterrupted run went on in that layout until its next freeze
        decision, so the resume does too: planned again, the phase could come out in another
        layout, whose other micro-batches give other float sums (the twenty-ninth round: a
        resumed 1x2 cached phase re-planned as 1x1 with the run's first profile, not the
        calibration it was planned with, and the run ended 7e-9 off). A record of
        another layout than the manifest's (`history.check_manifest_records` refuses one
        before a resume) is not taken, nor is one that is missing: None, and the phase is
        planned, weighed against the manifest's layout."""
        for record in read_records(self.run_dir / "run.jsonl"):
            if isinstance(record, PhaseRecord) and record.phase == manifest.phase:
                if manifest.layout is not None and record.layout != manifest.layout:
                    return None
                fields = PhaseDecision.model_fields
                return PhaseDecision(**{field: getattr(record, field) for field in fields})
        return None

    def enter_phase(self, decision: PhaseDecision, epoch: int, resumed: bool = False) -> None:
        """Move to the decided layout; the time it takes is the phase's transition_s
        (`resumed`: the state came from a checkpoint, nothing moved between ranks)."""
        t0 = time.perf_counter()
        layout = decision.layout
        layout.check(len(self.seq.layers), self.world)
        states = self.leave_phase(layout)
        self.decision, self.phase_steps = decision, 0
        self.runtime = PhaseRuntime(
            self.seq.layers,
            StepMean(self.seq.loss_sum, self.seq.targets),
            layout,
            self.rank,
            example_input=self.example_stage0_input,
            device=self.device,
            make_optimizer=self.make_optimizer,
            clip_grad_norm=self.cfg.clip_grad_norm,
            timeout=_dt.timedelta(seconds=self.cfg.collective_timeout_s),
            precision=self.cfg.precision,
        )
        install_states(self.runtime.optimizer, states)
        self.hold_objects()  # the phase's stage and optimizer, with its hooks
        self.check_in_place()  # the cache's folder and the phase's record are under it
        self.prepare_cache(layout)
        one_sided_done()
        self.recorder.write(
            PhaseRecord(
                **dict(decision),
                phase=self.phase_index,
                start_step=self.step_index,
                start_epoch=epoch,
                transition_s=time.perf_counter() - t0,
                resumed=resumed,
            )
        )

    def leave_phase(self, layout: Layout) -> dict:
        """Send the old phase's parameters, buffers and optimizer state to their owners in
        `layout` and drop its runtime; returns the optimizer state this rank receives."""
        if self.runtime is None:
            return {}
        old = self.runtime
        states = migrate(
            self.seq.layers, old.layout, optimizer_states(old.optimizer), layout, self.rank
        )
        old.destroy()
        # Nothing else holds the old stage and optimizer: freed before the next phase builds.
        self.runtime = None
        self.hold_objects()
        return states

    def make_optimizer(self, params: list[torch.nn.Parameter]) -> torch.optim.Optimizer:
        return torch.optim.AdamW(params, lr=self.cfg.lr, weight_decay=self.cfg.weight_decay)

    def frozen_prefix(
        self, inputs: torch.Tensor, device: torch.device | None = None
    ) -> torch.Tensor:
        """The phase's frozen layers on `inputs`, on `device` (default: this rank's)."""
        frozen = self.decision.layout.frozen_layers
        device = device or self.device
        return frozen_forward(self.seq.layers, inputs, 0, frozen, device, self.cfg.precision)

    def pair(self, dataset: Any, indices: Iterable[Any]) -> tuple[torch.Tensor, torch.Tensor]:
        """`rows` of inputs and labels from one read of each item (`data.batch_pair`)."""
        split = "train" if dataset is self.data.train else "eval"
        indices = [int(i) for i in indices]
        with users_side():
            x, y = batch_pair(dataset, indices, self.data.name, split)
        self.check_read(split)
        check_batch_inputs(x, indices, self.data.name, split, self.seq, self.data.padded)
        check_batch_labels(y, indices, self.data.name, split, self.seq)
        return x, y

    def rows(self, dataset: Any, indices: Iterable[Any], part: int) -> torch.Tensor:
        """The items' inputs (`part` 0) or labels (1), stacked: read as all the user's data
        code runs (`data.users_side`), so an `os.chdir` or `os.umask` in a `__getitem__` never
        moves or locks what this rank writes (the thirty-third round). An item that is or
        holds an awaitable is refused, its coroutines closed (`data.refuse_awaitable_item`,
        the thirty-fifth round): the part not kept was dropped unawaited, and Python's
        "coroutine … was never awaited" lines came into the rank's log; so is one whose input
        or label is not a dense CPU tensor (`data.refuse_odd_tensors`, the thirty-sixth
        round), and a batch of labels holding no class of the model (`data.check_batch_labels`,
        the thirty-seventh round). A failure names the data, the split and the item as the
        launcher's reads do (`data.batch_rows`).

            labels = self.rows(self.data.train, indices, 1)
        """
        split = "train" if dataset is self.data.train else "eval"
        indices = [int(i) for i in indices]
        with users_side():
            rows = batch_rows(dataset, indices, part, self.data.name, split)
        self.check_read(split)
        if part == 0:
            check_batch_inputs(rows, indices, self.data.name, split, self.seq, self.data.padded)
        else:
            check_batch_labels(rows, indices, self.data.name, split, self.seq)
        return rows

    def example_stage0_input(self, n: int) -> torch.Tensor:
        x = self.rows(self.data.train, range(n), 0)
        return self.frozen_prefix(x) if self.decision.layout.cached else x

    def prefix_sample(self) -> torch.Tensor:
        """One cache row (its shape and dtype), computed where the prefix's layers are: every
        rank of the node asks, and only a stage-0 rank holds them on its device."""
        frozen = self.decision.layout.frozen_layers
        prefix = [p for layer in self.seq.layers[:frozen] for p in layer.parameters()]
        device = prefix[0].device if prefix else torch.device("cpu")
        return self.frozen_prefix(self.rows(self.data.train, [0], 0), device)[0]

    def prepare_cache(self, layout: Layout) -> None:
        """Collective: give this node the cache `layout` needs. One cache per node serves its
        stage-0 ranks (executor.cache): the node's lowest rank creates each version's files,
        the others attach after a barrier. When the freeze point grows and the node already
        caches an older prefix, its stage-0 ranks split the cached rows and run only the newly
        frozen layers on them; a node without a stage 0 in a cached layout drops its cache.
        Nothing is computed from the inputs here: stage 0 fills the cache as it trains
        (`stage0_batch`). Every rank passes the same two barriers whatever its node does."""
        if not self.use_cache:
            return
        if self.node_cache is None:
            self.node_cache = self.node_memory()
        peers, node, memory_dir = self.node_cache
        leader = self.rank == peers[0]
        stage0 = [row[0] for row in layout.rank_map] if layout.cached else []
        sharing = [r for r in stage0 if r in peers]  # this node's stage-0 ranks, by replica
        if not sharing:
            if self.cache is not None:
                self.cache.close(unlink=leader)
                self.cache = None
            one_sided_done()
            one_sided_done()
            return
        sample = self.prefix_sample()
        row = (layout.frozen_layers, tuple(sample.shape), sample.dtype)
        if self.cache is None:
            self.cache = ActivationCache(
                self.facts.train_samples,
                self.cfg.cache_budget_bytes,  # per node: one cache serves the node
                self.run_dir / "cache" / f"node{node}",
                memory_dir=memory_dir,
                name=f"node{node}",
            )
            if leader:  # files a killed run left under the run directory go first
                self.cache.remove_leftovers()
        start = self.cache.frozen_layers
        grows = start < layout.frozen_layers
        if grows and leader:
            self.cache.create(*row)
        one_sided_done()  # the files exist before the others open them
        if grows and not leader:
            self.cache.attach(*row)
        if grows and start > 0 and self.rank in sharing:
            stop = layout.frozen_layers

            def newly_frozen(hidden: torch.Tensor) -> torch.Tensor:
                layers, precision = self.seq.layers, self.cfg.precision
                return frozen_forward(layers, hidden, start, stop, self.device, precision).cpu()

            self.cache.advance_rows(newly_frozen, sharing.index(self.rank), len(sharing))
        one_sided_done()  # every share is advanced before the old version is deleted
        self.cache.drop_previous()

    def node_memory(self) -> tuple[list[int], int, Path]:
        """Collective, once: (this node's ranks, its index, the directory of its cache's
        in-memory rows). The node's lowest rank makes that directory, a new one with a random
        name in /dev/shm when it has room for the budget, else it is under the run directory
        (`memory_dir_for`), and its peers learn the path: a name they could compute, others
        could too, and plant links there before the run."""
        peers, _, _ = node_peers(self.rank, self.world, None)
        mine = None
        if self.rank == peers[0]:
            mine = memory_dir_for(self.run_dir / "cache", self.cfg.cache_budget_bytes)
        return node_peers(self.rank, self.world, mine)

    # ----------------------------------------------------------------- steps

    def epoch_batches(self, epoch: int, skip: int) -> Iterator[tuple[int, torch.Tensor]]:
        """(step in epoch, this replica's indices) from step `skip` on. The union of the
        replicas' batches at a step is the same global batch whatever the layout; a new layout
        mid-epoch (--freeze-every) deals the rest of the epoch anew."""
        order, phase = None, None
        for step in range(skip, self.steps_per_epoch):
            if phase != self.phase_index:
                order, phase = self.replica_order(epoch), self.phase_index
            local = self.cfg.global_batch // self.decision.layout.replicas
            yield step, order[step * local : (step + 1) * local]

    def replica_order(self, epoch: int) -> torch.Tensor:
        """This replica's sample order for the epoch, from a seeded `DistributedSampler`."""
        sampler = DistributedSampler(
            range(self.facts.train_samples),  # its length alone: read once (`data_facts`)
            num_replicas=self.decision.layout.replicas,
            rank=self.runtime.topology.replica or 0,
            shuffle=True,
            seed=self.cfg.seed,
            drop_last=True,
        )
        sampler.set_epoch(epoch)
        return torch.tensor(list(sampler), dtype=torch.int64)

    def train_step(self, epoch: int, indices: torch.Tensor) -> StepRecord:
        """One optimizer step on the global batch; every rank returns the step's record."""
        runtime = self.runtime
        t0 = time.perf_counter()
        if runtime.is_first:
            inputs, labels, hits = self.stage0_batch(indices)
        else:
            inputs, labels, hits = None, self.rows(self.data.train, indices, 1), 0
        input_s = time.perf_counter() - t0
        for group in runtime.optimizer.param_groups if runtime.optimizer else []:
            group["lr"] = self.lr_at(self.step_index)
        times = runtime.step(inputs, labels)
        times.input_s = input_s
        times.step_s += input_s
        record = self.gather_step(epoch, times, hits)
        self.step_index += 1
        self.phase_steps += 1
        return record

    def stage0_batch(self, indices: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, int]:
        """The batch stage 0 feeds the pipeline, its labels, and how many rows came from the
        cache, each item read once (`pair`; found by the thirty-eighth round: a stage-0 rank
        read every item twice, for its input and again for its label). In a cached phase,
        rows the node's cache holds are read from it (their items for the labels alone); the
        others are computed by the frozen prefix (no autograd) and stored, so the phase's
        first epoch fills the cache from the forward passes training runs anyway, and a row
        one replica stored is a hit for every replica on the node later on
        (`ActivationCache.store`: why that is safe)."""
        train = self.data.train
        if self.cache is None:
            return *self.pair(train, indices), 0
        values, hit = self.cache.lookup(indices)
        if bool(hit.all()):
            return values, self.rows(train, indices, 1), len(indices)
        missing = indices[~hit]
        raw, missed_labels = self.pair(train, missing)
        computed = self.frozen_prefix(raw).cpu()
        self.cache.store(missing, computed, self.cache.frozen_layers)
        values[~hit] = computed
        if not bool(hit.any()):
            return values, missed_labels, 0
        hit_labels = self.rows(train, indices[hit], 1)
        hit_kind, missed_kind = (
            (labels.shape[1:], labels.dtype) for labels in (hit_labels, missed_labels)
        )
        if hit_kind != missed_kind:
            # Refused as one read of them all is, naming the items (`data.stack_part`).
            return values, self.rows(train, indices, 1), int(hit.sum())
        labels = missed_labels.new_empty((len(indices), *missed_labels.shape[1:]))
        labels[~hit] = missed_labels
        labels[hit] = hit_labels
        return values, labels, int(hit.sum())

    def lr_at(self, step: int) -> float:
        """Linear warm-up, then cosine decay to 10 %, by global step (layout-independent):
        lr·(s+1)/W for s < W, then lr·(0.1 + 0.9·½(1 + cos(π·(s−W)/(total−W))))."""
        cfg = self.cfg
        if step < cfg.warmup_steps:
            return cfg.lr * (step + 1) / cfg.warmup_steps
        progress = (step - cfg.warmup_steps) / max(1, self.total_steps - cfg.warmup_steps)
        return cfg.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(progress, 1.0))))

    def gather_step(self, epoch: int, times: StepTimes, hits: int) -> StepRecord:
        """Every rank's row (executor.records.STEP_ROW) to every rank in one small all-gather;
        rank 0 records the step."""
        topology = self.runtime.topology
        mine = step_row(times, hits, topology.stage, topology.replica).to(comm_device())
        rows = [torch.zeros_like(mine) for _ in range(self.world)]
        dist.all_gather(rows, mine)
        rows = [row.cpu() for row in rows]
        loss = step_loss(rows)
        if loss is not None and not math.isfinite(loss):
            # Every rank has the rows: all stop here, before a record (which holds finite
            # numbers only) is made, and the run's records stay valid.
            # Step numbers count from 0 as run.jsonl and the launcher's "at step N" do.
            self.diverged(f"the loss is {loss} at step {self.step_index}", epoch)
        record = step_record(
            rows,
            step=self.step_index,
            epoch=epoch,
            phase=self.phase_index,
            global_batch=self.cfg.global_batch,
        )
        self.check_in_place()
        self.recorder.write(record)
        return record

    def check_held(self, writing: str | None) -> None:
        """Every rank, once its data is loaded (`writing` None), at each epoch's end and
        before it writes a checkpoint or the model (`writing`), and rank 0 again once their
        files are written, before they are published (`checkpoint._write`'s and
        `models.export`'s check: a thread the data code started that patched torch.save or
        safetensors as they ran wrote an all-zero checkpoint or model, exit 0, the sixty-sixth
        round; a patch made and undone within one write is still unseen): the data code
        left pipeplan's modules and tables, the torch and transformers modules it trains
        with, safetensors and pydantic's BaseModel as they were when the rank started
        (`data.check_rank_held`: ~0.4 ms where nothing moved since the last, each batch read
        being one: `check_read`), else BadArgumentError naming the data and what it
        replaced, nothing written. Found by the sixty-second round: a `__getitem__` that
        replaced `pipeplan.precision.compute` or `executor.checkpoint._write` trained an
        fp32 run in bfloat16 or wrote an all-zero checkpoint, exit 0 (only KEPT_MODULES are
        held around each batch's reads).

            self.check_held("the checkpoint of step 22")
        """
        if self.held is None:
            return
        when = (
            "as this rank loaded and read it (nothing is trained)"
            if writing is None
            else f"while this rank trained ({writing} is not written)"
        )
        check_rank_held(self.cfg.data, self.held, when)

    def hold_model(self, seq: models.LayerSequence) -> None:
        """The rank's model, held as `build_task` builds it (`hold_objects`): no data code
        has seen it yet."""
        if self.held is not None:
            hold_rank_objects(self.held, seq.layers)

    def hold_objects(self) -> None:
        """The rank's own objects, held from now on for `check_held` and `check_read`
        (`data.hold_rank_objects`): its model's layers, as first built, and the phase's stage
        module and optimizer, as the phase made them (none between two phases)."""
        if self.held is not None:
            runtime = self.runtime
            phase, hooks = (), ()
            if runtime is not None:
                phase = (runtime.module, runtime.optimizer, runtime.loss_fn)
                hooks = runtime.backward_clock.hooks if runtime.backward_clock else ()
            hold_rank_objects(self.held, self.seq.layers, *phase, hooks=hooks)

    def hold_modes(self) -> None:
        """The stage's layers' `training`, held anew as the rank switches it to evaluate and
        back (`data.hold_rank_modes`)."""
        if self.held is not None:
            hold_rank_modes(self.held)

    def check_read(self, split: str) -> None:
        """After each batch of items this rank reads (`pair`, `rows`), before anything
        computes with it: `check_held`'s comparison, where nothing moved since the last one
        ~0.4 ms (`data._as_found`; less RANK_AT_WRITES, which `functions_kept` held around
        the reads), so no change a read made is live in any forward or backward. Found by
        the sixty-third round: a `__getitem__` that replaced
        `torch._C._nn.cross_entropy_loss` on one read and put it back on a later one, before
        the epoch's end, trained every step between towards class 0, exit 0.

            self.check_read("train")
        """
        if self.held is not None:
            what = "training batch (it is not trained on)"
            if split != "train":
                what = "held-out batch (it is not evaluated)"
            check_rank_held(self.cfg.data, self.held, f"as this rank read a {what}", read=True)

    def check_in_place(self) -> None:
        """Every rank, before it writes under the run directory (each step's record, a phase's
        record and cache, a checkpoint, an epoch's record and metrics.csv, the model): the
        folder at `run_dir` is still the one the rank started in (`moved_away`: one stat).
        Else RunDirectoryMoved, naming the step: a run directory moved (or deleted) mid-run
        was trained to the end, and its ranks made the old path again with checkpoints,
        metrics.csv and a model that were no run's (the twenty-eighth round). Its records and
        checkpoints went with the folder: it resumes where it is now (the launcher, which
        holds the folder, names the path where it can).

            self.check_in_place()   # RunDirectoryMoved once runs/k was renamed
        """
        if moved_away(self.run_dir):
            raise RunDirectoryMoved(moved_message(self.run_dir, self.step_index))

    def diverged(self, what: str, epoch: int) -> None:
        """Stop the run on a non-finite loss, before a record holds it, saying what to do.
        A loss that is not finite before any update is the data's or the weights', never the
        learning rate's (forty-eighth round: NaN inputs were told to lower --lr, the data
        unnamed)."""
        data = f"the data {quoted(self.cfg.data)}"
        if self.step_index == 0 and epoch == 0:
            raise PipeplanError(
                f"{DIVERGED}: {what} (epoch 1), {BEFORE_ANY_UPDATE}: check {data} and the "
                "model's weights for NaN or infinite values"
            )
        raise PipeplanError(
            f"{DIVERGED}: {what} (epoch {epoch + 1}); lower --lr (it is "
            f"{self.cfg.lr:g}) or check {data} for NaN or infinite values"
        )

    def recalibrate(self) -> None:
        """Collective: rank 0 refits the planner's cost model on this run's records so far; the
        fitted profile is written to the run directory before any phase is priced with it."""
        if self.rank == 0:
            self.refit()
        one_sided_done(by_rank0=True)  # the others came from the step's all-gather

    def refit(self) -> None:
        """Rank 0's part of `recalibrate`."""
        if self.fit_profile is None:
            return
        try:
            # Under the configuration this run trains: a resume for more epochs commits its
            # run.resume.json to run.json only with its first checkpoint, and read under the
            # run.json before it, its own phase was a failed resume's, left out and warned of.
            training = {str(self.run_dir): self.cfg}
            fitted = self.fit_profile([self.run_dir], self.planner.profile, training)
        except PipeplanError as exc:  # too few steps yet: keep planning with what we have
            # A run directory gone is the next step's line (`check_in_place`), alone: this
            # INFO came before it (forty-seventh round).
            (log.debug if moved_away(self.run_dir) else log.info)("recalibration skipped: %s", exc)
            return
        self.planner.adopt(fitted, self.run_dir)

    def due(self, every: int | None) -> bool:
        """Whether a per-N-steps action (--freeze-every, --checkpoint-every) is due now."""
        return bool(every) and self.step_index % every == 0

    # ----------------------------------------------------------------- AutoFreeze

    def gather_grad_norms(self) -> dict[int, float]:
        """Collective: the mean gradient norm per layer since the last call, from replica 0's
        owners (`grad_norm_state`): every active layer with parameters, 0.0 included; none
        where no step was measured."""
        sums, steps = self.grad_norm_state()
        self.runtime.grad_norm_sums, self.runtime.grad_norm_steps = {}, 0
        return {int(index): total / steps for index, total in sums.items()}

    def maybe_refreeze(
        self, epoch: int, norms: dict[int, float] | None, step_in_epoch: int = 0
    ) -> bool:
        """Rank 0 decides the freeze point (pipeplan.freeze.AutoFreeze), everyone follows.
        (epoch, step_in_epoch) is where training continues: the transition's checkpoint
        resumes there, mid-epoch with --freeze-every. Returns whether the point moved (and a
        checkpoint was written)."""
        box = [self.autofreeze.decide(epoch, norms, self.frozen_layers) if self.rank == 0 else None]
        dist.broadcast_object_list(box, src=0)
        new_point = int(box[0])
        if new_point == self.frozen_layers:
            return False
        self.frozen_layers = new_point
        self.phase_index += 1
        self.enter_phase(self.decide_phase(new_point, epoch), epoch)
        self.checkpoint(epoch, step_in_epoch)  # every transition is a checkpoint
        return True

    # ----------------------------------------------------------------- checkpoints

    def checkpoint(self, epoch: int, step_in_epoch: int) -> None:
        """Collective: every rank's state to rank 0, written atomically (executor.checkpoint)."""
        from executor import checkpoint

        self.check_in_place()  # every rank alike, before the collectives that gather it
        self.check_held(f"the checkpoint of step {self.step_index}")
        self.record_data_modules()  # before the manifest: a resume from it checks them
        sums, steps = self.grad_norm_state()
        manifest = CheckpointManifest(
            step=self.step_index,
            epoch=epoch,
            step_in_epoch=step_in_epoch,
            phase=self.phase_index,
            frozen_layers=self.frozen_layers,
            grad_history=[{str(k): v for k, v in h.items()} for h in self.autofreeze.history],
            # The ends before this step: a final checkpoint taken again by a resume that
            # added no epoch is no end a resume continued from.
            run_ends=[s for s in self.run_ends if s < self.step_index],
            grad_norm_sums=sums,
            grad_norm_steps=steps,
            world_size=self.world,
            model=self.cfg.model,
            layout=self.runtime.layout,
            cache=self.cache.manifest() if self.cache is not None else None,
            config=self.cfg,
            # data.json as rank 0 keeps it, the modules just found included; the writer's.
            data=self.data_record.files if self.rank == 0 and self.data_record else None,
            # And the facts it holds, as the run started: a resume refuses data.json without them.
            data_facts=self.data_record.facts if self.rank == 0 and self.data_record else None,
        )
        states = optimizer_states(self.runtime.optimizer)
        # The records the checkpoint follows reach the disk first: a resume refuses a
        # checkpoint whose records end before it (which a power loss could otherwise leave).
        self.recorder.sync()
        # Compared again once rank 0 wrote its files, before they are published: data code's
        # threads run on through the write (`check_held`).
        check = functools.partial(self.check_held, f"the checkpoint of step {self.step_index}")
        checkpoint.save(self.run_dir, self.seq.layers, self.runtime.layout, states, manifest, check)
        one_sided_done(by_rank0=True)  # rank 0 writes it; the others come from its gather

    def record_data_modules(self) -> None:
        """Collective, for data that is code of yours: the modules of yours each rank's data
        imported that data.json does not list (`task.data_modules_imported`: a
        `__getitem__`'s `import helper` for items the launcher never read) gathered to rank 0,
        which adds them to data.json (`task.record_data_modules`): a resume or an export
        refuses one edited since. One gather of short lists, on the host group as the
        checkpoint's own. Found by the thirty-first round: such a helper, edited before a
        resume, trained on other data without a word. Each helper data.json lists that the
        rank has imported must be that file (`task.check_helpers_kept`, the launcher's check
        on a resume): one imported only as the sets were read was never compared (the
        seventy-fourth round); the checkpoint is not written."""
        if self.data_modules is None:
            return
        check_helpers_kept(self.run_dir, self.cfg)
        found = data_modules_imported(self.cfg, self.data_modules, self.modules_seen)
        every = [None] * self.world if self.rank == 0 else None
        dist.gather_object(found, every, dst=0, group=host_group())
        if self.rank == 0:
            found = [file for mine in every for file in mine]
            self.data_record = record_data_modules(self.run_dir, self.data_record, found)

    def grad_norm_state(self) -> tuple[dict[str, float], int]:
        """Collective: the gradient-norm sums since the last freeze decision (replica 0's
        owners hold them) and their step count, on every rank."""
        runtime = self.runtime
        # Each layer's sum beside whether its owner measured it: a sum of 0.0 is one (a
        # gradient of exactly zero, or none: `layer_grad_norms`), which `if v > 0` left out
        # of the records and checkpoints their readers then refused (the sixty-sixth round).
        sums = torch.zeros(2, len(self.seq.layers), dtype=torch.float64)
        if runtime.topology.replica == 0:
            for index, total in runtime.grad_norm_sums.items():
                sums[0, index], sums[1, index] = total, 1.0
        sums = sums.to(comm_device())
        dist.all_reduce(sums)
        mine = runtime.grad_norm_steps if runtime.topology.replica == 0 else 0
        steps = torch.tensor([mine], device=comm_device())
        dist.all_reduce(steps, op=dist.ReduceOp.MAX)
        totals, measured = sums.tolist()
        found = {str(i): v for i, (v, m) in enumerate(zip(totals, measured, strict=True)) if m}
        return found, int(steps)

    # ----------------------------------------------------------------- end of an epoch

    def end_epoch(self, epoch: int, epoch_s: float, losses: list[float]) -> dict[int, float]:
        """Held-out loss and accuracy, the epoch's gradient norms, the speedup forecast and its
        record (rank 0 also logs it: batch jobs show progress without a terminal); returns the
        norms.

        The record names the phase the epoch ends in, the one its last steps and evaluation
        ran on and whose frozen layers it states, as its logged line names that layout. An
        epoch split by a layout change (a mid-epoch resume on another --nproc, a --freeze-every
        decision) was recorded in the phase its first step ran in: metrics.csv and `report`
        gave a resumed 1x1 epoch as the 2x1 one it started on (thirty-seventh round)."""
        t0 = time.perf_counter()
        eval_loss, accuracy = self.evaluate()
        if eval_loss is not None and not math.isfinite(eval_loss):  # every rank has it
            self.diverged(f"the held-out loss is {eval_loss} after the epoch", epoch)
        norms = self.gather_grad_norms()
        forecast = self.forecast(epoch) if self.rank == 0 else None
        one_sided_done(by_rank0=True)  # rank 0 priced the forecast, after the norms' all-reduce
        record = EpochRecord(
            epoch=epoch,
            phase=self.phase_index,
            frozen_layers=self.frozen_layers,
            steps=self.steps_per_epoch,
            epoch_s=epoch_s,
            eval_s=time.perf_counter() - t0,
            train_loss=sum(losses) / len(losses) if losses else None,
            eval_loss=eval_loss,
            eval_accuracy=accuracy,
            samples_per_s=self.steps_per_epoch * self.cfg.global_batch / epoch_s,
            grad_norms={str(k): v for k, v in sorted(norms.items())},
            forecast=forecast,
        )
        self.check_held(f"epoch {epoch + 1}'s record")  # its evaluation read items too
        self.check_in_place()  # the record, and metrics.csv with it
        self.recorder.write(record)
        if self.rank == 0:
            log.info(epoch_line(record, self.cfg.epochs, self.decision.layout.label()))
        return norms

    def forecast(self, epoch: int) -> Forecast | None:
        """Rank 0's forecast at the end of `epoch`: the end-to-end speedup of the frozen counts
        so far, continued as `pipeplan.freeze.continuations` says, priced as `pipeplan preview`
        prices a schedule with the profile and cluster the run plans with now
        (`pipeplan.plan.make_forecast`). None, with a warning, when it cannot be priced."""
        finished = [e.frozen_layers for e in self.recorder.epochs if e.epoch < epoch]
        finished.append(self.frozen_layers)
        if len(finished) != epoch + 1:  # an epoch's record is missing: no trajectory to price
            return None
        batch = self.cfg.global_batch
        samples = self.facts.train_samples
        if self.steps_per_epoch < samples // batch:  # --max-steps-per-epoch: a shorter epoch
            samples = self.steps_per_epoch * batch
        try:
            return make_forecast(
                self.planner.profile,
                self.planner.cluster,
                self.planner.pricing("solver"),
                global_batch=batch,
                samples=samples,
                epochs=self.cfg.epochs,
                cache=self.use_cache,
                mode=self.cfg.freeze,
                alpha=self.cfg.alpha,
                freeze_list=list(self.cfg.freeze_list or []),
                finished=finished,
            )
        except PipeplanError as exc:  # the forecast informs; it never stops the run
            log.warning("no speedup forecast after epoch %d: %s", epoch + 1, exc)
            return None

    @torch.no_grad()
    def evaluate(self) -> tuple[float | None, float | None]:
        """Held-out (loss, accuracy) through the pipeline (forward only), summed over
        replicas: per sample for classification, per predicted token for a causal LM.

        The batches come in chunks (`EVAL_AHEAD_BYTES`): each rank reads a chunk's rows, all
        wait for those reads as for one-sided work (`one_sided_done`: as long as the readers
        beat), then the chunk's forward passes run under the collective timeout. The first
        chunk is one batch, whose size sets the others' length. Every rank, in the layout or
        not, makes the same waits: the batches are counted on the largest replica's share."""
        if self.facts.eval_samples == 0:
            return None, None
        runtime, replicas = self.runtime, self.decision.layout.replicas
        local = self.cfg.global_batch // replicas
        batches = math.ceil(math.ceil(self.facts.eval_samples / replicas) / local)
        mine: list[torch.Tensor] = []  # this replica's batches of indices (none outside it)
        if runtime.topology.active:
            runtime.module.train(False)
            self.hold_modes()
            indices = torch.arange(self.facts.eval_samples)[runtime.topology.replica :: replicas]
            # Not torch.split: it gives one empty batch of a replica with no sample.
            mine = [indices[start : start + local] for start in range(0, len(indices), local)]
        sums = torch.zeros(4, dtype=torch.float64)  # loss sum, losses, correct, predictions
        done, later = 0, 1  # batches evaluated; how many each chunk after the first holds
        while done < batches:
            ahead = later if done else 1
            chunk = [self.eval_rows(batch, local) for batch in mine[done : done + ahead]]
            one_sided_done()  # the chunk is read everywhere: its forward passes start together
            if not done:  # the first batch: it sizes the chunks after it
                later = self.eval_ahead(chunk, batches)
            done += ahead
            for x, y, valid in chunk:
                sums += self.evaluate_batch(x, y, valid)
            del chunk  # the next chunk is read with this one let go
        if runtime.topology.active:
            runtime.module.train(True)
            self.hold_modes()
        one_sided_done()  # ranks outside the layout wait for the pipeline's
        sums = sums.to(comm_device())
        dist.all_reduce(sums)
        sums = sums.cpu()
        if sums[1] == 0:  # every rank has the sums: all stop here (forty-ninth round)
            raise BadArgumentError(
                f"data {quoted(self.cfg.data)}: no held-out text has a next token to predict "
                "(each has fewer than 2 tokens, padding aside); a causal LM needs texts of 2 "
                "tokens or more"
            )
        return float(sums[0] / sums[1]), float(sums[2] / sums[3]) if sums[3] > 0 else None

    def eval_rows(
        self, indices: torch.Tensor, local: int
    ) -> tuple[torch.Tensor, torch.Tensor, int]:
        """(inputs, labels, valid rows) of one batch of held-out samples. A short last batch
        is padded to the layout's size with its first sample; padded rows are not counted.
        Found by the thirty-eighth round: each held-out item was read once per part, and a
        padded row read its item again (64 `__getitem__` calls for 5 samples)."""
        valid = len(indices)
        x, y = self.pair(self.data.eval, indices)
        if valid < local:  # padded from the rows read: each item's `__getitem__` runs once
            x, y = (torch.cat([t, t[:1].expand(local - valid, *t.shape[1:])]) for t in (x, y))
        return x, y, valid

    def eval_ahead(self, first: list[tuple[torch.Tensor, torch.Tensor, int]], batches: int) -> int:
        """Collective: how many held-out batches each chunk after the first holds, the same
        on every rank: as many as `EVAL_AHEAD_BYTES` holds of the largest first batch any
        rank read (a rank outside the layout read none). All have just left a wait
        together, so this small all-reduce never waits on a read."""
        size = sum(x.nbytes + y.nbytes for x, y, _ in first)
        largest = torch.tensor([size], dtype=torch.int64, device=comm_device())
        dist.all_reduce(largest, op=dist.ReduceOp.MAX)
        return max(1, min(batches, EVAL_AHEAD_BYTES // max(1, int(largest))))

    def evaluate_batch(self, x: torch.Tensor, y: torch.Tensor, valid: int) -> torch.Tensor:
        """(loss sum, losses, correct, predictions) on one batch of held-out rows, as the last
        stage sees it (zeros elsewhere); its first `valid` rows are counted."""
        runtime = self.runtime
        if runtime.is_first and self.decision.layout.cached:
            x = self.frozen_prefix(x)
        out = runtime.evaluate(x if runtime.is_first else None, y)
        if out is None:  # not the last stage
            return torch.zeros(4, dtype=torch.float64)
        return eval_sums(out.detach().cpu()[:valid], y[:valid], self.seq.task)

    # ----------------------------------------------------------------- the end

    def finish(self) -> None:
        if self.runtime is not None:
            self.runtime.destroy()
        if self.cache is not None:
            # The final checkpoint's barrier came after every rank's last read of the cache.
            leader = self.rank == self.node_cache[0][0]
            self.cache.close(unlink=leader)
        if self.node_cache is not None:  # made by its leader even if no phase was cached
            _, node, memory_dir = self.node_cache
            spill_dir = self.run_dir / "cache" / f"node{node}"
            for directory in (spill_dir, spill_dir.parent, memory_dir):
                with contextlib.suppress(OSError):  # removes only empty directories
                    directory.rmdir()
        self.recorder.close()


def eval_sums(logits: torch.Tensor, labels: torch.Tensor, task: str) -> torch.Tensor:
    """(loss sum, losses, correct, predictions) of one held-out batch. A causal LM counts
    tokens: position t predicts labels[t+1], labels equal to IGNORE_INDEX (padding) skipped,
    as `models.causal_lm_loss` trains."""
    logits = logits.float()
    if task == "causal-lm":
        targets = labels[:, 1:]
        kept = targets != models.IGNORE_INDEX
        logits, labels = logits[:, :-1][kept], targets[kept]
    loss = F.cross_entropy(logits, labels, reduction="sum") if len(labels) else torch.zeros(())
    correct = (logits.argmax(-1) == labels).sum()
    count = float(len(labels))
    return torch.tensor([float(loss), count, float(correct), count], dtype=torch.float64)


def epoch_line(record: EpochRecord, epochs: int, layout: str) -> str:
    """`epoch 2/4: train loss 0.412, held-out loss 0.388, accuracy 86.1 %, 1520 samples/s,
    3 layers frozen, 1x2 M=2 1f1b cached, forecast speedup 1.21× (no further freezing) or
    1.83× (the α bound from here)`."""

    def number(value: float | None, form: str) -> str:
        return "-" if value is None else format(value, form)

    accuracy = "-" if record.eval_accuracy is None else f"{record.eval_accuracy:.1%}"
    line = (
        f"epoch {record.epoch + 1}/{epochs}: train loss {number(record.train_loss, '.4f')}, "
        f"held-out loss {number(record.eval_loss, '.4f')}, accuracy {accuracy}, "
        f"{record.samples_per_s:.0f} samples/s, {record.frozen_layers} "
        f"layer{'s' * (record.frozen_layers != 1)} frozen, {layout}"
    )
    if record.forecast is not None:
        cases = record.forecast.cases
        line += ", forecast speedup " + " or ".join(
            f"{c.speedup:.2f}× ({freeze.CONTINUATION_WORDS[c.continuation]})" for c in cases
        )
    return line
