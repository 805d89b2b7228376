"""How a pipeplan process ends around the user's code: an `os._exit` the user's code calls
while pipeplan runs it raises SystemExit instead (`exits_raised`), and atexit's callbacks,
which pipeplan runs itself before it exits without the interpreter's teardown, never set the
process's exit status (`run_exit_callbacks`). Light (the standard library and pipeplan's
formats): the `pipeplan` command runs the callbacks at every end.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any, NoReturn

from pipeplan.errors import one_line
from pipeplan.startup import EXIT  # the process's own `os._exit`, whatever the code made of it

# Whether this process is the `pipeplan` command's own (`cli.entry`), started by the user's
# shell, not a Python program of the user's that calls pipeplan (the API, a notebook): what
# pipeplan may end outright when the user's code hangs (`data.watched_for_hangs`).
_COMMAND = {"process": False}


def command_process() -> None:
    """Mark this process as the `pipeplan` command's own."""
    _COMMAND["process"] = True


def is_command_process() -> bool:
    return _COMMAND["process"]


# Rounds of the command's last sweep of its children (`end_children`): each killed process's
# own children come to this one (a subreaper) and are swept in the next.
CHILD_SWEEPS = 8
REAP_WAIT_S = 2.0


# What the `pipeplan` command's process had before its work began, never its to end
# (`end_children`, the command's watch: `executor.leftovers.watch_command`): the children a
# shell gave it (`sleep 300 & exec pipeplan …`: a wrapper's helper, a log's consumer, another
# pipeplan command; the eighty-third round's were killed), and what started before it (an
# orphan of theirs it adopts), by their start in clock ticks since boot; and whether the
# user's data code has run in it (else nothing it has is that code's).
_BEFORE: dict[str, Any] = {"ticks": None, "children": {}, "data": False, "ending": False}


def note_start() -> None:
    """At the `pipeplan` command's start (`cli.entry`, first): what it has is not its own;
    what it starts from now on carries its lineage (`mark_lineage`)."""
    # A tick early: what starts in the command's first tick is its own.
    _BEFORE["ticks"] = _ticks_now() - 1
    _BEFORE["children"] = {pid: start for pid, _, start in _children()}
    mark_lineage(lineage())


# Which processes descend from the `pipeplan` command, whatever they did since (cleared their
# environment, a session of their own, a daemon's double fork): RLIMIT_LOCKS, a limit Linux
# has ignored since 2.4.25, which every child inherits through fork and exec and any user may
# read in /proc/PID/limits. The command sets both its soft and its hard limit to its lineage
# (`mark_lineage`), and a hard limit is never raised again but by root: what descends from
# the command has a hard limit no higher than its lineage, lowered or not (the eighty-sixth
# round: a child that set its own, and a nested `pipeplan` command, which re-marked itself,
# outlived the command), and what the shell started before `exec pipeplan` (a helper's
# daemon the command adopts: the eighty-fourth round killed it) the hard limit the command
# had before. A value is its family's top even value (`Kin`, `FAMILY_BITS`): its ranks take
# the one below, a pipeplan command started inside it a smaller family within it, below its
# hard limit; another command's family is another's.
RLIMIT_LOCKS = 10  # Linux's number on every architecture pipeplan runs on; checked on use
UNLIMITED = 2**64 - 1  # RLIM_INFINITY on Linux, "unlimited" in /proc/PID/limits
LINEAGE_BASE = 7_000_000_000_000_000_000
LINEAGE_TOP = 9_000_000_000_000_000_000  # (a lineage value: in [BASE, TOP))
# A family is an aligned block of 2**bits values, bits ≡ LEAST_BITS (mod NEST_BITS): its
# command takes the top even value, its ranks the one below. A command started inside one
# (its hard limit a lineage value) takes one of the 2**NEST_BITS - 1 blocks of its family that
# lie below its hard limit, 2**NEST_BITS times smaller: two commands nested side by side are
# told apart (the eighty-eighth round: one killed the other), and both are the outer one's.
# The block's size is read back from its top value alone (`family_of`): a value + 2 is a
# multiple of 2**bits, never of 2**(bits + NEST_BITS) (`_top_drawn` skips those blocks).
FAMILY_BITS = 43  # some 227,000 families in the band
NEST_BITS = 8
LEAST_BITS = 3  # (8 values: the top even one, the ranks' below it, nested commands' below that)
NESTED_LEAST = LEAST_BITS + NEST_BITS  # the least family a hard limit is read as (`family_of`)
# Under a low hard limit (`ulimit -x N`: a container's, a site's) the families are drawn in
# [N/2, N), this many of them where they fit (two commands alike in one end each other's
# ranks' leftovers: `leftovers.end_marked`), each of 2**NESTED_LEAST values or more, that a
# command nested in one reads as such (the ninetieth round: under 8-value families, drawn
# below 2**20, a command the data code started drew a family of its own and was left), as
# many as fit where fewer do, or none: then only the hard limit lowered by one tells.
FAMILIES_WANTED = 256
_LINEAGE: dict[str, Any] = {"own": None, "marked": None, "kin": None}


class Kin:
    """What tells the command's descendants among its children (`descends`): its lineage's
    family [low, high] (None where it has none) and the hard limit it had before it marked
    itself, which none of its descendants has.

        Kin((low, high), before=UNLIMITED).descends(pid)
    """

    def __init__(self, family: tuple[int, int] | None, before: int, top: int | None = None):
        # `top`: the hard limit the command set itself, above which none of its own is (a
        # command nested beside it, in the same family, drew above it: the eighty-eighth round)
        self.family, self.before = family, before
        self.top = before - 1 if top is None else top

    def __repr__(self) -> str:
        return f"Kin({self.family}, before={self.before}, top={self.top})"

    def argument(self) -> str:
        """`low:high:before:top` (-1 for no family), read back by `Kin.parse`."""
        low, high = self.family or (-1, -1)
        return f"{low}:{high}:{self.before}:{self.top}"

    @staticmethod
    def parse(text: str) -> Kin | None:
        parts = text.split(":")
        if len(parts) != 4 or not all(p.lstrip("-").isdigit() for p in parts):
            return None
        low, high, before, top = map(int, parts)
        return Kin((low, high) if low >= 0 else None, before, top)

    def kin(self, limits: tuple[int, int] | None) -> bool:
        """Whether a process of these (soft, hard) limits descends from the command."""
        if limits is None:
            return False
        hard = limits[1]
        if hard > self.top:  # (what a command nested in another's family had before)
            return False
        if self.in_family(limits):
            return True
        # (another command's lineage is that command's, nested in this one or not)
        band = self.band()
        return band is None or not band[0] <= hard < band[1]

    def in_family(self, limits: tuple[int, int]) -> bool:
        """Whether a soft or hard limit of `limits` is of this lineage's family."""
        family = self.family
        return family is not None and any(family[0] <= v <= family[1] for v in limits)

    def band(self) -> tuple[int, int] | None:
        """Where every command's lineage lies, [low, high): LINEAGE_BASE's band, or under a
        hard limit N below it (a low one, a command's own it is nested in, or one set by hand
        in the band), [N/2, N), where a command beside it draws its own too (the eighty-
        seventh round: one under `ulimit -x 100000` killed another that a helper started);
        None where no family was drawn."""
        if self.family is None:
            return None
        if self.before >= LINEAGE_TOP:
            return LINEAGE_BASE, LINEAGE_TOP
        return self.before // 2, self.before

    def descends(self, pid: int) -> bool:
        return self.kin(limits_of(pid))


def _grid(bits: int) -> int | None:
    """The largest family size (in bits) of at most `bits`, None below LEAST_BITS."""
    if bits < LEAST_BITS:
        return None
    return bits - (bits - LEAST_BITS) % NEST_BITS


def family_of(value: int, least: int = NESTED_LEAST) -> tuple[int, int] | None:
    """The family [low, high] of at least 2**least values whose top even value `value` is,
    or whose ranks' value (the one below) it is; None where `value` is no such value.

        family_of(low + 2**bits - 2) == family_of(low + 2**bits - 3) == (low, low + 2**bits - 1)

    Read as a lineage only from NESTED_LEAST bits up (a command started inside it nests in
    it): one value in 2**NESTED_LEAST is read so by chance (a shell's `ulimit -x 65534`),
    where an 8-value family's pattern is a quarter of all values (the eighty-ninth round: a
    command under `ulimit -x 1000006` took itself for a nested one, and every command there
    drew one of two values)."""
    if value < 1 << NESTED_LEAST:  # (none is drawn below: `_low_bits`)
        return None
    value += value % 2
    top = value + 2
    bits = _grid(min((top & -top).bit_length() - 1, FAMILY_BITS))
    if bits is None or bits < least:
        return None
    return top - (1 << bits), top - 1


def _low_bits(hard: int) -> int:
    """A family's bits under a low hard limit: FAMILIES_WANTED of them and more in [N/2, N),
    2**NESTED_LEAST values at least."""
    bits = (hard // 2).bit_length() - FAMILIES_WANTED.bit_length()
    return _grid(min(FAMILY_BITS, max(NESTED_LEAST, bits))) or NESTED_LEAST


def _random(n: int) -> int:
    """A number in [0, n) (os.urandom: `secrets` costs the command's start 5 ms)."""
    return int.from_bytes(os.urandom(8), "big") % n


Drawn = tuple[int, tuple[int, int]]  # a lineage value, its family


def _drawn(hard: int) -> Drawn | None:
    """A lineage value a command marks itself with under hard limit `hard`, and its family:
    a family's top even value, drawn in the band (or, under a low hard limit, in
    [hard/2, hard)); inside another command's lineage one of the blocks of that family below
    `hard` (`_nested`); None where that range holds no family."""
    if hard >= LINEAGE_TOP:
        return _top_drawn(LINEAGE_BASE, LINEAGE_TOP, FAMILY_BITS)
    outer = family_of(hard)
    if outer is not None:
        return _nested(outer, hard)
    # (a low hard limit, or one set by hand in the band: families of its own below it, where a
    # block of the band around it gave every command there one value, the eighty-ninth round)
    return _top_drawn(hard // 2, hard, _low_bits(hard))


def _nested(outer: tuple[int, int], hard: int) -> Drawn:
    """A family's top even value of the blocks of `outer` below `hard`, one in
    2**NEST_BITS - 1 of them (a block of the outer's next size down, none of which holds the
    outer's own value); where none fits, an even value below `hard` in `outer`, its family."""
    low, high = outer
    bits = (high - low + 1).bit_length() - 1 - NEST_BITS
    fits = min((1 << NEST_BITS) - 1, (hard - low + 1) >> bits) if bits >= LEAST_BITS else 0
    if fits > 0:
        block = low + (_random(fits) << bits)
        return block + (1 << bits) - 2, (block, block + (1 << bits) - 1)
    first, last = low + 2, hard - 1 - (hard - 1) % 2
    value = max(last, first) if last <= first else first + 2 * _random((last - first) // 2 + 1)
    return value, outer


def _top_drawn(low: int, high: int, bits: int) -> Drawn | None:
    """The top even value of a family of 2**bits drawn among those wholly in [low, high)
    whose value + 2 is no multiple of 2**(bits + NEST_BITS) (`family_of` would read a larger
    one), and the family; None where there is none."""
    first, last = -(-low >> bits), (high >> bits) - 1
    if last < first:
        return None
    index = first + _random(last - first + 1)
    if (index + 1) % (1 << NEST_BITS) == 0:  # (its neighbour, where there is one, is not)
        if first == last:
            return None
        index += -1 if index > first else 1
    block = index << bits
    return block + (1 << bits) - 2, (block, block + (1 << bits) - 1)


def lineage() -> int | None:
    """This process's lineage value (even; drawn once, under its hard limit now), None where
    none can be drawn (`_drawn`)."""
    if _LINEAGE["own"] is None:
        _LINEAGE["own"] = _drawn(_limits()[1]) or (None, None)
    return _LINEAGE["own"][0]


def rank_lineage() -> int | None:
    """The lineage the ranks of a run this process launches mark themselves with: one below
    its own where it marked itself (the `pipeplan` command: what its watch knows), else one
    drawn for the run (an API caller: a process it forked drew the same, and one run's end
    killed the other's ranks, the eighty-sixth round)."""
    if _LINEAGE["marked"] is not None:
        return _LINEAGE["marked"] - 1
    drawn = _drawn(_limits()[1])
    return None if drawn is None else drawn[0] - 1


def _family_for(value: int) -> tuple[int, int] | None:
    """The family of a lineage value this process marks itself with: the one drawn with it,
    else the one it reads as (a rank's, one below its command's), else in the band the block
    of 2**FAMILY_BITS it lies in."""
    own = _LINEAGE["own"]
    if own is not None and own[0] == value:
        return own[1]
    family = family_of(value, LEAST_BITS)  # (a rank's: its command's, 8 values or more)
    if family is None and LINEAGE_BASE <= value < LINEAGE_TOP:
        low = value >> FAMILY_BITS << FAMILY_BITS
        family = low, low + (1 << FAMILY_BITS) - 1
    return family


def _forked() -> None:
    """In a forked child: its lineage is drawn again when asked (its mark stays inherited)."""
    _LINEAGE["own"] = None
    _LINEAGE["marked"] = None
    _LINEAGE["kin"] = None


os.register_at_fork(after_in_child=_forked)


def _limits() -> tuple[int, int]:
    """This process's (soft, hard) RLIMIT_LOCKS, UNLIMITED for none (and where no limit is)."""
    try:
        import resource

        soft, hard = resource.getrlimit(RLIMIT_LOCKS)
    except (ImportError, OSError, ValueError):
        return UNLIMITED, UNLIMITED
    inf = resource.RLIM_INFINITY
    return (UNLIMITED if soft == inf else soft), (UNLIMITED if hard == inf else hard)


def mark_lineage(value: int | None) -> None:
    """Mark this process, and so whatever it starts from now on, with `value`, soft and hard
    (`limits_of` reads them back), and note what tells its descendants (`kin`). With no
    value, or one not below the hard limit, the hard limit lowered by one, which still tells
    them from what it had before. Nothing where the platform has no such limit, or the hard
    limit is 0 or unlimited and no value is given."""
    try:
        import resource

        old = resource.getrlimit(RLIMIT_LOCKS)
        soft, hard = _limits()
        if value is not None and value < hard:  # (below: what it had is not its own)
            wanted = (value, value)
        elif 0 < hard < UNLIMITED:
            value, wanted = None, (min(soft, hard - 1), hard - 1)
        else:  # (nothing to lower, or nothing drawn)
            return
        resource.setrlimit(RLIMIT_LOCKS, wanted)
        if limits_of(os.getpid()) != wanted:  # another limit by that number: put it back
            resource.setrlimit(RLIMIT_LOCKS, old)
            return
    except (ImportError, OSError, ValueError):
        return
    # (lowered by one inside another command's lineage: that command's family still)
    inside = LINEAGE_BASE <= wanted[1] < LINEAGE_TOP or family_of(hard) is not None
    family = _family_for(wanted[1]) if value is not None or inside else None
    _LINEAGE["marked"] = value
    _LINEAGE["kin"] = Kin(family, hard, wanted[1])


@contextlib.contextmanager
def lineage_kept() -> Iterator[None]:
    """Around the user's code in a marked process: its lineage set again after it, should the
    code have changed RLIMIT_LOCKS's soft limit (what the process starts from then on keeps
    its hard one: the eighty-sixth round); nothing where it cannot be."""
    try:
        yield
    finally:
        marked = _LINEAGE["marked"]
        if marked is not None:
            with contextlib.suppress(ImportError, OSError, ValueError):
                import resource

                soft, hard = resource.getrlimit(RLIMIT_LOCKS)  # (a call: no /proc read)
                if soft != marked and hard == marked:
                    resource.setrlimit(RLIMIT_LOCKS, (marked, hard))


def lineage_marked() -> int | None:
    """The value `mark_lineage` set in this process, None where none was."""
    return _LINEAGE["marked"]


def kin() -> Kin | None:
    """What tells this process's descendants among its children (`mark_lineage`), None where
    nothing does."""
    return _LINEAGE["kin"]


def limits_of(pid: int) -> tuple[int, int] | None:
    """Process `pid`'s (soft, hard) "Max file locks" (UNLIMITED for unlimited), None where
    they cannot be read (gone)."""
    try:
        with open(f"/proc/{pid}/limits", encoding="ascii", errors="replace") as limits:
            for line in limits:
                if line.startswith("Max file locks"):
                    soft, hard = line[len("Max file locks") :].split()[:2]
                    return _number(soft), _number(hard)
    except (OSError, ValueError):
        pass
    return None


def _number(text: str) -> int:
    if text == "unlimited":
        return UNLIMITED
    return int(text)


def data_code_runs() -> None:
    """The user's data code runs in this process (`executor.data`): what is left of its
    children at the end is that code's."""
    _BEFORE["data"] = True


def ending() -> bool:
    """Whether the command's last sweep of its children has begun (`end_children`): the user's
    code starts no process from then on (`executor.data`'s audit hook refuses it)."""
    return _BEFORE["ending"]


def started_before() -> tuple[int | None, dict[int, int]]:
    """(the command's start in clock ticks since boot, its children then: pid → start)."""
    return _BEFORE["ticks"], dict(_BEFORE["children"])


def _ticks_now() -> int:
    """Now, in the clock ticks since boot that /proc/PID/stat's start time counts."""
    import time

    return int(time.clock_gettime(time.CLOCK_BOOTTIME) * os.sysconf("SC_CLK_TCK"))


def _foreign(pid: int, start: int) -> bool:
    ticks = _BEFORE["ticks"]
    return _BEFORE["children"].get(pid) == start or (ticks is not None and start < ticks)


def adopt_orphans(adopt: bool = True) -> None:
    """Linux: this process (the `pipeplan` command's) becomes its descendants' parent when
    theirs ends (PR_SET_CHILD_SUBREAPER), so that what the user's code started in it, a
    daemon in a session of its own included, is still its child at its end (`end_children`);
    `adopt=False` stops that (a process of pipeplan's own let go: the command's watch).
    Elsewhere nothing."""
    import ctypes

    pr_set_child_subreaper = 36
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_child_subreaper, int(adopt))


def end_children(say: Callable[[str], None] | None) -> list[int]:
    """At the `pipeplan` command's end: SIGKILL what is left of its children (what the user's
    code started in this process: the data function the launcher checks, a module's import;
    adopted, `adopt_orphans`, where it left its parent), reap them, and return their pids;
    one line to `say` ("the data code left 1 process (pid 2070) running: killed"). Found by
    the eighty-second round: a process the data function started with
    `start_new_session=True` as the launcher checked it outlived the run, and held the
    console, so that `pipeplan run … | cat` never ended. multiprocessing's resource tracker
    and forkserver, and joblib's loky's tracker, are left: they end once this process has
    (and a tracker then frees what the code left in shared memory or temporary folders).
    Linux (/proc); elsewhere none."""
    import signal

    if not os.path.isdir("/proc") or not _BEFORE["data"]:
        return []
    # A thread of the data code's that starts a helper again whenever one ends started the
    # next after the last round (the eighty-fourth round: it held `… | cat` 40 s): from now
    # on it starts none, and its thread ends in silence, as the command does.
    _BEFORE["ending"] = True
    threading.excepthook = lambda args: None
    kept = set()
    for module, name, field in (
        ("multiprocessing.resource_tracker", "_resource_tracker", "_pid"),
        ("multiprocessing.forkserver", "_forkserver", "_forkserver_pid"),
        # joblib's loky keeps its own (the temporary folders of its memmaps are its to free)
        ("joblib.externals.loky.backend.resource_tracker", "_resource_tracker", "_pid"),
        ("loky.backend.resource_tracker", "_resource_tracker", "_pid"),
    ):
        helper = getattr(sys.modules.get(module), name, None)
        kept.add(getattr(helper, field, None))
    killed: list[int] = []
    for _ in range(CHILD_SWEEPS):
        # Every descendant at once, each stopped before any is killed: killed one level a
        # round, a tree deeper than the rounds outlived the command (the eighty-fourth round).
        found = _descendants(kept)
        handles = []
        for pid, (state, start, _) in found.items():
            if state == "Z" and _threads(pid) <= 1:
                continue  # dead: its parent's to reap (this process's, below)
            if _a_watch(pid):  # another command's, adopted: it ends once its command has
                continue
            with contextlib.suppress(OSError):
                handle = os.pidfd_open(pid)  # then read again: not another's since the look
                if _start(pid) == start:
                    signal.pidfd_send_signal(handle, signal.SIGSTOP)
                    handles.append(handle)
                    if pid not in killed:
                        killed.append(pid)
                else:
                    os.close(handle)
        for handle in handles:
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(handle, signal.SIGKILL)
            os.close(handle)
        me = os.getpid()
        reaped([pid for pid, (*_, parent) in found.items() if parent == me], REAP_WAIT_S)
        if not found:
            break
    if killed and say is not None:
        say(f"the data code left {processes(killed)} running: killed")
    return killed


def _a_watch(pid: int) -> bool:
    """Whether process `pid` is a pipeplan command's watch (`leftovers.watch_command`): one
    adopted from a command beside this one was killed by this one's end, and that command's
    leftovers then outlived its `kill -9` (the eighty-eighth round)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            return b"leftovers import watch" in cmdline.read()
    except OSError:
        return False


def processes(pids: list[int]) -> str:
    """`processes([19049])` → "1 process (pid 19049)"; "2 processes (pids 7, 9)"."""
    if len(pids) == 1:
        return f"1 process (pid {pids[0]})"
    return f"{len(pids)} processes (pids {', '.join(map(str, sorted(pids)))})"


def reaped(pids: list[int], wait_s: float = REAP_WAIT_S) -> None:
    """Reap those of `pids` that are children of this process (others are passed over),
    waiting at most `wait_s` for those not dead yet (one in uninterruptible sleep dies when
    its call returns: not waited for longer)."""
    import time

    deadline = time.monotonic() + wait_s
    left = list(pids)
    while left:
        for pid in list(left):
            with contextlib.suppress(OSError):
                if os.waitpid(pid, os.WNOHANG)[0] == 0:
                    continue
            left.remove(pid)  # reaped, or not ours to reap
        if left and time.monotonic() >= deadline:
            return
        if left:
            time.sleep(0.01)


def _children() -> list[tuple[int, str, int]]:
    """This process's children, their states and starts (/proc/PID/stat)."""
    children, me = [], os.getpid()
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
            if int(fields[1]) == me:
                children.append((int(entry), fields[0], int(fields[19])))
        except (OSError, IndexError, ValueError):
            continue
    return children


def _descendants(kept: set) -> dict[int, tuple[str, int, int]]:
    """This process's descendants (pid → state, start, parent), but `kept` ones, what the
    command had at its start (`_foreign`) and an orphan it adopted that is not of its lineage
    (`mark_lineage`), and theirs: one look at /proc."""
    below: dict[int, list[tuple[int, str, int]]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
            below.setdefault(int(fields[1]), []).append((int(entry), fields[0], int(fields[19])))
        except (OSError, IndexError, ValueError):
            continue
    found: dict[int, tuple[str, int, int]] = {}
    me = os.getpid()
    kin = _LINEAGE["kin"]
    frontier = [me]
    while frontier:
        parent = frontier.pop()
        for pid, state, start in below.get(parent, []):
            if pid in found or pid in kept or _foreign(pid, start):
                continue
            # (below one of its own, whatever its limits: the command's too)
            if parent == me and kin is not None and not kin.descends(pid):
                continue
            found[pid] = (state, start, parent)
            frontier.append(pid)
    return found


def _start(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            return int(stat.read().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def _threads(pid: int) -> int:
    """Process `pid`'s threads alive: a zombie whose other threads run (its main thread
    ended, `pthread_exit`) is alive, and was passed over as dead (the eighty-third round)."""
    try:
        return len(os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return 0


@contextlib.contextmanager
def exits_raised() -> Iterator[None]:
    """`os._exit(code)` called by the user's data code in this process raises SystemExit,
    which the caller names: `_contained` in the launcher ("the data function exited (code
    0)"), a rank's report ("exited with code 0 before the run ended"), an exit callback's
    line (`run_exit_callbacks`). It ended `pipeplan run` with status 0 and no line, nothing
    trained (the thirty-first round), and a torchrun rank in silence while its peer was named
    for the connection it lost. A process the code forks (multiprocessing, a DataLoader's
    workers) still exits with it, as its own end does.

        with exits_raised():
            os._exit(0)   # SystemExit(0)
    """
    real, here, thread = os._exit, os.getpid(), threading.get_ident()

    def exit_raised(code: int) -> NoReturn:
        # A child ends, never running on in our code; another thread (pipeplan's own stop
        # of a hung import, `cli._deliver_after_imports`) ends the process as it asked.
        if os.getpid() != here or threading.get_ident() != thread:
            real(code)
        raise SystemExit(code)

    # Named as what code calls it by (`atexit.register(os._exit, 0)`: an exit callback's line
    # named pipeplan's wrapper, the forty-fourth round).
    exit_raised.__module__, exit_raised.__qualname__ = "os", "_exit"
    os._exit = exit_raised
    try:
        yield
    finally:
        os._exit = real


@contextlib.contextmanager
def forks_ended() -> Iterator[None]:
    """A process the user's code forks that comes back out of the block (`os.fork()` in a
    data function or a `__getitem__`, the child returning or raising) ends there at once,
    with status 0 and nothing said: it is a copy of pipeplan, not pipeplan, and the parent
    goes on as the real one. `os._exit` runs none of pipeplan's code, atexit's callbacks or
    the flush of the stdio buffers it inherited (the parent's own to write). A child that never
    comes back (its own loop, `os._exit`, multiprocessing) is the code's business. Found by
    the fortieth round: a `load` whose `os.fork()` returned in the launcher ran a second
    `pipeplan run` that raced the first for the run directory (one "already holds a run", the
    other training orphaned after the command ended); in a rank, a second rank 0 hung or left
    a process behind. Innermost around the user's code: the child ends before any put-back.

        with forks_ended():
            os.fork()   # the child ends here; the parent carries on
    """
    here = os.getpid()
    try:
        yield
    finally:
        if os.getpid() != here:
            EXIT(0)


# How long the exit callbacks may run: the command's work is done; a callback that waits on
# the user's code (concurrent.futures' joining a task still running, a process pool's busy
# worker) held `pipeplan run` and its ranks for ever, Ctrl-C ignored (the fifty-ninth round).
EXIT_CALLBACKS_S = 10.0


def exit_done(status: int) -> NoReturn:
    """The process ends with `status`, its work and exit callbacks done, without the
    interpreter's teardown (freeing torch's and transformers' modules costs 1-2 s of CPU),
    or, under a profiler or tracer (`python -m cProfile -o prof.out cli.py …`, `python -m
    trace`, a torchrun rank run so), by the interpreter's exit, after which it writes its
    report: os._exit skipped that (the seventy-third round: no report, exit 0).

        exit_done(0)   # the command's or a trained rank's last call
    """
    if sys.getprofile() is not None or sys.gettrace() is not None:
        # cProfile's and trace's runners take the SystemExit as the program's end and exit
        # 0 once their report is written (the seventy-fourth round: a refused command under
        # them exited 0): the status is given at the interpreter's exit, after the report.
        atexit.register(EXIT, status)
        sys.exit(status)
    EXIT(status)


def run_exit_callbacks(
    say: Callable[[str], None] | None,
    traced: bool = False,
    status: int = 0,
    limit_s: float | None = None,
) -> None:
    """atexit's callbacks, run now (the process then exits without the interpreter's teardown,
    with the status pipeplan chose). Each callback's end is its own: one that raises, or that
    ends the process (`os._exit(3)`, `sys.exit(3)`: SystemExit here, `exits_raised`), is
    one line given to `say` (`callback_line`), or nothing where `say` is None (a command that
    failed: its error line stays its last); the callbacks after it still run. `traced`:
    Python's own report of each instead, its traceback (--debug).
    Callbacks still running after `limit_s` (EXIT_CALLBACKS_S where None: waiting on the
    user's code) are left: one line
    to `say`, the processes multiprocessing started are killed, and the process exits with
    `status` at once (`_late`).

        run_exit_callbacks(log.warning)   # "the exit callback m.bye exited with code 3"

    Found by the thirty-seventh round: a data module's callback that raised printed Python's
    "Exception ignored in atexit callback: <function …>" and its traceback, nine lines after
    a successful run's. Found by the thirty-eighth: one that called `os._exit(3)` ended
    `pipeplan run` (and a rank that had trained) with status 3, past pipeplan's own flush."""
    before = sys.unraisablehook

    def said(unraisable: Any) -> None:
        if traced:
            sys.__unraisablehook__(unraisable)
        elif say is None:  # a failed command: its error line stays its last
            return
        elif (unraisable.err_msg or "").endswith("in atexit callback"):
            say(callback_line(unraisable.object, unraisable.exc_value))
        else:
            say(ignored_line(unraisable))

    sys.unraisablehook = said
    limit_s = EXIT_CALLBACKS_S if limit_s is None else limit_s
    done = threading.Event()
    watch = threading.Thread(
        target=_late, args=(done, limit_s, say, status), name="pipeplan-exit-watch", daemon=True
    )
    watch.start()
    try:
        with exits_raised():
            _run_threading_exits(said)
            atexit._run_exitfuncs()
    finally:
        done.set()
        sys.unraisablehook = before
    # Ended before the process goes on: a tracer counting its results at the interpreter's
    # exit (`python -m trace --count`) failed on a thread still running ("dictionary changed
    # size during iteration", no report: the seventy-fourth round).
    watch.join(1.0)


def _late(
    done: threading.Event, limit_s: float, say: Callable[[str], None] | None, status: int
) -> None:
    """The exit callbacks' watch (`run_exit_callbacks`): past `limit_s`, one line, the
    multiprocessing children (a pool's busy workers) killed, and the exit with `status`."""
    if done.wait(limit_s):
        return
    if say is not None:
        say(
            f"the exit callbacks still ran after {limit_s:g} s, waiting on work the data code "
            "left running (a thread pool's task, a process pool's worker): not waited for"
        )
    with contextlib.suppress(Exception):
        import multiprocessing

        for child in multiprocessing.active_children():
            child.kill()
    # And what else the data code left: this exit skips the command's own sweep (the
    # eighty-third round: a server it started held `… | cat` open two minutes more).
    end_children(say)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    EXIT(status)


def _run_threading_exits(said: Callable[[Any], None]) -> None:
    """The callbacks libraries register with `threading._register_atexit`, which the
    interpreter runs before atexit's (its `threading._shutdown`): a library's executor shuts
    its workers down there (concurrent.futures; joblib's loky, its processes too), and
    multiprocessing's atexit callback then joins them. Run after them, it joined live loky
    workers until their idle timeout: a run whose data code used `joblib.Parallel` hung five
    minutes at its end, and a signal then exited 0 (the fifty-eighth round). Each that raises
    is said as an atexit callback is (`said`); the rest still run."""
    calls = getattr(threading, "_threading_atexits", None)
    if not isinstance(calls, list):
        return
    threading._SHUTTING_DOWN = True  # type: ignore[attr-defined]  # as _shutdown says it
    while calls:
        call = calls.pop()  # the last registered first, as _shutdown runs them
        try:
            call()
        except BaseException as exc:  # each callback's end is its own
            said(_Unraisable(exc, call))


class _Unraisable:
    """What `sys.unraisablehook` is given of a callback that raised (`run_exit_callbacks`)."""

    err_msg = "Exception ignored in atexit callback"

    def __init__(self, exc: BaseException, func: object):
        self.exc_type, self.exc_value, self.exc_traceback = type(exc), exc, exc.__traceback__
        self.object = func


def callback_line(func: object, exc: BaseException | None) -> str:
    """`callback_line(m.bye, SystemExit(3))` → "the exit callback m.bye exited with code 3":
    what exit callback `func`, ended by `exc`, did; "… m.boom raised RuntimeError: x" for
    one that raised."""
    name = one_line(f"{getattr(func, '__module__', '?')}.{getattr(func, '__qualname__', func)}")
    if isinstance(exc, SystemExit):
        code = 0 if exc.code is None else exc.code
        if isinstance(code, int):
            return f"the exit callback {name} exited with code {code}"
        return f"the exit callback {name} exited: {_text(code)}"
    text = _text(exc)
    why = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return f"the exit callback {name} raised {why}"


def ignored_line(unraisable: Any) -> str:
    """What Python's "Exception ignored in: …" and its traceback say, in one line: an exception
    raised where Python cannot raise it (a `__del__`, a weakref callback), dropped.

        ignored_line(u)   # "an exception was ignored in DS.__del__: ValueError: boom"

    Found by the forty-sixth round: a data set whose `__del__` raised printed Python's six
    lines, traceback and all, among a command's (rc 0)."""
    where = unraisable.object
    name = getattr(where, "__qualname__", None)
    try:
        shown = name if isinstance(name, str) else repr(where)
    except Exception:  # a user object whose __repr__ raised
        shown = type(where).__name__
    exc = unraisable.exc_value
    text = _text(exc) if exc is not None else ""
    kind = type(exc).__name__ if exc is not None else "an exception"
    why = f"{kind}: {text}" if text else kind
    return f"an exception was ignored in {one_line(shown)[:120]}: {why}"


def _text(value: object) -> str:
    """`value`'s text on one line, its runs of spaces one; "" where its __str__ raised."""
    try:
        return " ".join(one_line(str(value)).split())
    except Exception:  # its __str__ raised: the caller names its type
        return ""
