"""One logging set-up for the `pipeplan` command and every rank of a run.

    from pipeplan import log
    log.setup()                  # the CLI:  "pipeplan: WARNING: --nproc 9 is more than …"
    log.setup(rank=1)            # a rank:   "pipeplan: rank 1: WARNING: AutoCache off: …"
    log.setup(debug=True)        # DEBUG instead of INFO
    log.setup(rank=1, stream=f)  # to `f`, not stderr: a rank whose stderr goes to its log file

Modules log to loggers under "pipeplan." (`logging.getLogger("pipeplan.run")`); nothing else
configures logging.
"""

from __future__ import annotations

import contextlib
import errno
import io
import logging
import os
import re
import sys
import threading
import weakref
from collections.abc import Iterator
from typing import TextIO

from pipeplan.errors import SHOWN, fitted, one_line

LOGGER = "pipeplan"
# The longest message pipeplan prints on one line (an error's or a warning's), in characters:
# room for three paths of PATH_MAX (4,096 bytes) and as much again of words. Messages quote a
# value at most `errors.SHOWN` characters long; this bound holds for any message besides (a
# config's 10 MB hidden_act was a 10 MB error line in the twentieth round): a longer one keeps
# its start, which names the file and the field, and says how long it was.
MAX_LINE = 16_384


def bounded(message: str, prefix: str = "") -> str:
    """`bounded("p.json: field 'x': …", "pipeplan: error: ")` → the line `prefix + message`,
    unchanged up to MAX_LINE characters, else the message cut visibly, `… (N characters)`
    (N: the message's length), so that the whole line, prefix and cut included, is
    MAX_LINE characters. The bound is the line's as printed: counting the message alone,
    a cut line was 16,424 characters (twenty-third round). A word longer than any path the
    system takes (PATH_MAX, 4,096 bytes: a path of thousands of short folders, which no call
    opens) is cut to its first SHOWN characters (forty-ninth round: a 4,500-character line)."""
    message = _LONGER_THAN_A_PATH.sub(_cut_word, message)
    return prefix + fitted(message, MAX_LINE - len(prefix))


PATH_MAX = 4096
_LONGER_THAN_A_PATH = re.compile(rf"\S{{{PATH_MAX + 1},}}")


def _cut_word(found: re.Match) -> str:
    """A word cut to SHOWN characters and its length said, a ':' after it kept (a path)."""
    word = found.group()
    core = word.rstrip(":;,")
    if len(core) <= PATH_MAX:
        return word
    return fitted(core, SHOWN + 30) + word[len(core) :]


ERROR_PREFIX = "pipeplan: error: "


def error_line(message: object) -> str:
    """`error_line(exc)` → "pipeplan: error: p.json: …", bounded: the line `error` prints,
    for a caller that prints it elsewhere (a rank's failure in the launcher). Each control
    character a space, as a warning's (`_Bounded`): a path holding a line feed split the line
    in two, an escape reached the terminal (the fifty-second round: a chat template's name)."""
    return bounded(one_line(str(message)), ERROR_PREFIX)


def error(message: object, stream: TextIO | None = None) -> None:
    """The one way pipeplan prints an error: `pipeplan: error: MESSAGE` on one bounded line,
    to `stream` (default: whatever `sys.stderr` is now).

        log.error(exc)   # pipeplan: error: p.json: invalid profile: field 'layers.3': …
    """
    write_line(error_line(message), stream)


def write_line(line: str, stream: TextIO | None = None) -> None:
    """`write_line("pipeplan: rank 1: interrupted")`: one write of the line and its end, to
    `stream` (default: whatever `sys.stderr` is now). `print` writes the text and the line
    feed apart: two torchrun ranks failing at once on one console merged their lines into
    one (the thirty-second round)."""
    stream = stream or sys.stderr
    stream.write(line + "\n")
    stream.flush()


# The threads the user's data code started and left running, in the command's own process
# (`executor.data.process_state_kept` adds them where `threads_held` is on): what they write to
# a console Output is held (`thread_lines`), not written among pipeplan's lines. Found by the
# forty-sixth round: a `load` whose thread printed to sys.stderr every 0.2 s put 22 raw lines
# before pipeplan's error line. Held up to HELD_CHARACTERS; the rest is counted.
DATA_THREADS: dict[int, tuple[str, threading.Thread]] = {}
HELD_CHARACTERS = 65_536
_THREADS = {"held": False, "text": {}, "dropped": 0}


def threads_held() -> None:
    """From now on, the writes of the data code's threads (DATA_THREADS) are held: called by
    the `pipeplan` command, whose lines are the user's; a rank's console is its log."""
    _THREADS["held"] = True


def holds_threads() -> bool:
    return bool(_THREADS["held"])


def _held_write(text: str) -> bool:
    """Whether `text`, written by this thread, was held as a data code thread's."""
    spec, thread = DATA_THREADS.get(threading.get_ident(), (None, None))
    # The same thread, not one of pipeplan's given the ident of one that ended.
    if thread is None or thread is not threading.current_thread():
        return False
    held: dict[str, list[str]] = _THREADS["text"]
    kept = sum(len(chunk) for chunks in held.values() for chunk in chunks)
    room = max(0, HELD_CHARACTERS - kept)
    held.setdefault(spec, []).append(text[:room])
    _THREADS["dropped"] += text.count("\n", room)
    return True


def thread_lines(shown: int = 10) -> list[str]:
    """What the data code's threads wrote, as lines for warnings (up to `shown` of each data's,
    then a count), and forgotten: `data 'm:load': a thread it started wrote: LINE`."""
    said = []
    for spec, chunks in _THREADS["text"].items():
        lines = [line for line in "".join(chunks).splitlines() if line.strip()]
        prefix = f"data {spec}: a thread it started wrote: "
        said += [prefix + one_line(line) for line in lines[:shown]]
        more = len(lines) - shown + _THREADS["dropped"]
        if more > 0:
            said.append(f"data {spec}: its threads wrote {more:,} more lines (not shown)")
    _THREADS["text"] = {}
    _THREADS["dropped"] = 0
    return said


def _encoded(text: str, encoding: str, errors: str | None) -> bytes:
    """`text` in the console's encoding, its errors' way; a character it cannot encode
    (stdout's `strict` or `surrogateescape`) escaped, as Python's stderr escapes it."""
    try:
        return text.encode(encoding, errors or "strict")
    except UnicodeEncodeError:
        return text.encode(encoding, "backslashreplace")


class Output:
    """A console stream (`sys.stdout`, `sys.stderr`, a rank's console) whose writes never
    fail the command: the first failure of a write or flush is kept in `failure`, the
    stream's descriptor then goes to /dev/null, and what follows is written there. A failed
    console is not failed work: `pipeplan run | head` trains to the end, and the command
    decides what the failure means (`guard_console`, `cli.entry`).

        out = Output(sys.stdout)
        out.write("...")        # EPIPE, ENOSPC, EIO: never raised
        out.failure             # the OSError of the first failed write, or None

    Everything else (`fileno`, `isatty`, `encoding`) is the stream's.
    """

    def __init__(self, stream: TextIO, closed: OSError | None = None) -> None:
        self.stream = stream
        self.failure: OSError | None = None
        # The descriptor was closed when the process started (`open_console`): the first
        # text written is this failure.
        self._closed = closed
        _OUTPUTS.append(weakref.ref(self))

    def write(self, text: str) -> int:
        if DATA_THREADS and _held_write(text):
            return len(text)
        if text and self._closed is not None:
            self._failed(self._closed)
        # A console whose encoding lacks a character (PYTHONIOENCODING=ascii, LC_ALL=C with
        # PYTHONUTF8=0) shows it escaped, as Python's stderr does: `×` and `α` of a table
        # failed every table-printing command in a traceback (forty-seventh round).
        try:
            raw = _raw_beneath(self.stream)
            if raw is None:
                encoding = getattr(self.stream, "encoding", None) or "utf-8"
                return self.stream.write(_encoded(text, encoding, "strict").decode(encoding))
            self.stream.flush()  # anything written to the stream itself goes first
            write_whole(raw, _encoded(text, self.stream.encoding, self.stream.errors))
            return len(text)
        except OSError as exc:
            self._failed(exc)
            return len(text)

    def writelines(self, lines) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        try:
            self.stream.flush()
        except OSError as exc:
            self._failed(exc)

    @property
    def reader_gone(self) -> bool:
        """Whether the failure is a closed pipe (EPIPE): its reader wanted no more (`| head`)."""
        return isinstance(self.failure, BrokenPipeError)

    def _failed(self, exc: OSError) -> None:
        """From the first failure on, the descriptor is /dev/null's: what the stream still
        holds goes there, and so does what anything else writes to it (a library, the
        interpreter's final flush, a child started later), none of which fails again."""
        self.failure = self.failure or exc
        self._closed = None
        with contextlib.suppress(OSError, ValueError):
            null = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(null, self.stream.fileno())
            finally:
                os.close(null)
            self.stream.flush()

    def __getattr__(self, name: str):
        return getattr(self.stream, name)


def _raw_beneath(stream: TextIO) -> io.RawIOBase | None:
    """The unbuffered file under a text stream that writes straight into it (Python's
    stdout and stderr under PYTHONUNBUFFERED=1, or `python -u`); None for any other stream,
    whose buffer writes whole or raises (`io.BufferedWriter` retries a short write)."""
    buffer = getattr(stream, "buffer", None)
    return buffer if isinstance(buffer, io.RawIOBase) else None


def write_whole(raw: io.RawIOBase, data: bytes) -> None:
    """All of `data` into `raw`, or the OSError of the write that failed: a short write is
    followed by one of the rest, which says why (`write_whole(sys.stdout.buffer, b"...")`).

    Found by the forty-third round: under PYTHONUNBUFFERED=1 a text stream hands its bytes
    to the file in one write and drops what a short one left, with no error; under
    `ulimit -f 1` `report --json > r.json` kept the first 1,024 bytes of the JSON and exited
    0 with nothing said (the write past the limit is short, the next one EFBIG)."""
    view = memoryview(data)
    while view:
        written = raw.write(view)
        if written is None:  # a descriptor someone made non-blocking, and full
            raise BlockingIOError(errno.EAGAIN, os.strerror(errno.EAGAIN))
        if written <= 0:
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        view = view[written:]


# Every Output alive, made first to last (`outputs`).
_OUTPUTS: list[weakref.ReferenceType[Output]] = []
# What of an Output's own attributes it changes itself as it writes (`_failed`): the rest are
# what its maker set (`executor.data.process_state_kept` holds them across the user's code).
OWN_STATE = frozenset({"failure", "_closed"})


def outputs() -> list[Output]:
    """The Outputs alive (sys.stdout's and sys.stderr's under the CLI, a rank's console),
    first made first: the user's data code can reach one that is not `sys.stderr` now (held
    aside by `contextlib.redirect_stderr`, a rank's console in its log handler)."""
    alive = [output for ref in _OUTPUTS if (output := ref()) is not None]
    if len(alive) < len(_OUTPUTS):
        _OUTPUTS[:] = [weakref.ref(output) for output in alive]
    return alive


def guard_console() -> tuple[Output, Output]:
    """`out, err = guard_console()`: `sys.stdout` and `sys.stderr` as `Output`s, for the
    command's own process. Python ignores SIGPIPE, so a closed pipe (`pipeplan plan | head`)
    is an EPIPE on the next write: rich turned it into a silent exit 1 (after `run` had
    trained, the thirty-ninth round), `print` into a traceback or "Exception ignored …
    BrokenPipeError" at exit. Now no write of either stream raises; the caller reads
    `out.failure` at the end. A stream Python started without (its descriptor closed:
    `pipeplan report RUN >&-`) is one on /dev/null that fails with EBADF once written."""
    return open_console(1, "stdout"), open_console(2, "stderr")


def open_console(fd: int, name: str) -> Output:
    """`sys.<name>` (descriptor `fd`) as an Output, installed there. Python set it to None
    when the descriptor was closed as it started: then /dev/null takes the descriptor, so
    that no file opened later becomes this process's (and its children's) stdout or stderr,
    and writing to it is an EBADF failure."""
    stream = getattr(sys, name)
    if isinstance(stream, Output):
        return stream
    closed = None
    if stream is None:
        closed = OSError(errno.EBADF, os.strerror(errno.EBADF))
        stream = open(fd, "w", closefd=False) if _null_on(fd) else open(os.devnull, "w")  # noqa: SIM115
    output = Output(stream, closed)
    setattr(sys, name, output)
    return output


def _null_on(fd: int) -> bool:
    """/dev/null opened as descriptor `fd` where it is closed; False where something holds
    it already (then it is left alone)."""
    try:
        os.fstat(fd)
        return False
    except OSError:
        pass
    null = os.open(os.devnull, os.O_WRONLY)
    if null != fd:
        os.dup2(null, fd)
        os.close(null)
    return True


class _Bounded(logging.Formatter):
    """pipeplan's warnings and notices, each bounded as an error is (`bounded`): the record's
    line, not a traceback `--debug` adds below it, each control character a space
    (`errors.one_line`): a line relayed from the user's code or a library (the forty-sixth
    round: a data `load`'s warning holding an escape sequence erased pipeplan's prefix on the
    terminal, another retitled it) is one line of text, as an error's is."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        line = super().formatMessage(record)  # the format ends with the message
        prefix = line[: len(line) - len(record.message)]
        return bounded(one_line(line[len(prefix) :]), prefix)


class _Stderr(logging.StreamHandler):
    """Writes to whatever `sys.stderr` is when a record comes: rich's live progress bar and
    pytest swap it, and a stream fixed at set-up time would bypass or outlive them. Unless
    given a stream of its own (`fixed`)."""

    def __init__(self) -> None:
        logging.Handler.__init__(self)
        self.fixed = None

    @property
    def stream(self):  # type: ignore[override]
        return self.fixed or sys.stderr


class FileHandler(logging.FileHandler):
    """A log file that fails in silence: a write that fails (a full disk) is kept in `failure`
    for the caller to report in its own words, never printed. logging's own handler printed
    `--- Logging error ---` and a 100-line traceback to stderr for each record, and its
    `close` raised the failed flush's OSError over whatever the caller was reporting.
    Opened to append, as a regular file only (`fileio.open_append`: a link there was
    followed, a FIFO hung `run --resume`): OutputError naming it otherwise.

        handler = log.FileHandler(logs / "launcher.log")
        ...
        handler.close()
        if handler.failure is not None: ...   # the OSError of the first failed write
    """

    def __init__(self, filename, encoding: str | None = None) -> None:
        self.failure: BaseException | None = None
        self.given = filename  # as given, for a refusal's message (logging keeps it absolute)
        super().__init__(filename, "a", encoding, delay=False)

    def _open(self):
        from pipeplan.fileio import open_append  # here: pipeplan.log is imported first of all

        return os.fdopen(open_append(self.given), "a", encoding=self.encoding)

    def handleError(self, record: logging.LogRecord) -> None:
        self.failure = self.failure or sys.exc_info()[1]

    def close(self) -> None:
        try:
            super().close()  # flushes what is buffered: on a full disk it fails here too
        except OSError as exc:
            self.failure = self.failure or exc
            with contextlib.suppress(OSError):
                if self.stream is not None:
                    self.stream.close()
            self.stream = None


def setup(rank: int | None = None, debug: bool = False, stream=None) -> logging.Logger:
    """Configure the "pipeplan" logger; calling it again only updates the format, level and
    stream (None: whatever `sys.stderr` is)."""
    logger = logging.getLogger(LOGGER)
    handler = next((h for h in logger.handlers if isinstance(h, _Stderr)), None)
    if handler is None:
        handler = _Stderr()
        logger.addHandler(handler)
    where = "" if rank is None else f"rank {rank}: "
    handler.fixed = stream
    handler.setFormatter(_Bounded(f"pipeplan: {where}%(levelname)s: %(message)s"))
    logger.setLevel(logging.DEBUG if debug else logging.INFO)
    # matplotlib logs, at its import, where it keeps its cache when the user's config folder
    # cannot hold it (a read-only HOME): with no handler of its own, Python's last-resort one
    # printed two lines before `wrote 4 plots` (the ninetieth round); what pipeplan draws
    # is its files, and its own warnings say what went wrong with them.
    quiet = logging.getLogger("matplotlib")
    if not any(isinstance(h, logging.NullHandler) for h in quiet.handlers):
        quiet.addHandler(logging.NullHandler())
    return logger


@contextlib.contextmanager
def setup_restored() -> Iterator[None]:
    """The "pipeplan" logger as it was before the block, however the block ends: its
    handlers, level and propagation, and the format and stream `setup` gives a handler of
    its own. An API call's (`api`): found by the sixty-sixth round, the first `pipeplan.run()`
    set the logger up to show its epoch lines and left it so, and a later `preview`'s
    warning, said before with no prefix, then came as `pipeplan: WARNING: …`.

        with setup_restored():
            setup()   # undone after the block
    """
    logger, quiet = logging.getLogger(LOGGER), logging.getLogger("matplotlib")
    handlers, level, propagate = logger.handlers[:], logger.level, logger.propagate
    formats = {h: (h.formatter, h.fixed) for h in handlers if isinstance(h, _Stderr)}
    quiet_handlers = quiet.handlers[:]  # (`setup` quiets matplotlib: the caller's is its own)
    try:
        yield
    finally:
        quiet.handlers = quiet_handlers
        logger.handlers = handlers
        logger.setLevel(level)  # also clears the loggers' cached levels
        logger.propagate = propagate
        for handler, (formatter, fixed) in formats.items():
            handler.formatter, handler.fixed = formatter, fixed


def configured() -> bool:
    """Whether the `pipeplan` logger has a handler (set up here or by the caller)."""
    return bool(logging.getLogger(LOGGER).handlers)


class _Held(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextlib.contextmanager
def held(said: bool = True) -> Iterator[None]:
    """What "pipeplan" loggers say inside is shown only once the block succeeds: a command
    refused in one line must not print a warning first (a checkpoint's head replaced, then a
    global batch larger than the data). `said=False`: never shown (a second reading of what
    was read, and said, before).

        with log.held():
            planner, facts = check_run(cfg)   # its warnings come out after it passes
    """
    logger = logging.getLogger(LOGGER)
    hold, saved = _Held(), logger.handlers[:]
    logger.handlers = [hold]
    try:
        yield
    finally:
        logger.handlers = saved
    for record in hold.records if said else ():  # reached only when the block did not raise
        logger.handle(record)


# The widest console the help and the tables are laid out for: rich pads each help line to
# COLUMNS, and COLUMNS=10^7 took 27 s and 1.5 GB (forty-ninth round).
MAX_COLUMNS = 1000


def bound_console_size() -> None:
    """COLUMNS beyond MAX_COLUMNS is read as MAX_COLUMNS, below MIN_COLUMNS as MIN_COLUMNS
    (rich and click read it): COLUMNS=0 printed no table and no summary, exit 0, and leading
    zeros hid a huge width from the bound (fiftieth round). LINES likewise, to 1..MAX_LINES:
    rich reads both with int(), which refuses more than 4,300 digits, and a console made of
    either was a traceback (fifty-first round). `cli` calls it as it loads, before its
    console is made, and in `main` (a caller's environment may have changed since); a
    torchrun rank as it starts (rank 0 shows a progress bar)."""
    for name, low, high in (("COLUMNS", MIN_COLUMNS, MAX_COLUMNS), ("LINES", 1, MAX_LINES)):
        given = os.environ.get(name, "")
        try:  # as rich reads it: int() takes leading zeros and other scripts' digits
            size = int(given)
        except ValueError:
            if not given.isdigit():
                continue  # not a size: rich and click take their default
            size = high + 1  # more digits than int() reads: beyond any bound
        if not low <= size <= high:
            os.environ[name] = str(min(max(size, low), high))


# The narrowest: a table or line laid out in fewer columns prints nothing (rich).
MIN_COLUMNS = 20
# The tallest console rich is told of (it lays out nothing by it here; only a bound).
MAX_LINES = 100_000


# The log levels torch's C++ side (`TORCH_CPP_LOG_LEVEL`, any case, or 0-3) and transformers
# (`TRANSFORMERS_VERBOSITY`, lower case) take from the environment.
_LIBRARY_LEVELS = {
    "TORCH_CPP_LOG_LEVEL": ("INFO", "WARNING", "ERROR", "FATAL", "0", "1", "2", "3"),
    "TRANSFORMERS_VERBOSITY": ("detail", "debug", "info", "warning", "error", "critical"),
    "HF_HUB_VERBOSITY": ("debug", "info", "warning", "error", "critical"),
    # torch's C++ switches (c10's `check_env`: anything else is a warning as torch loads)
    "TORCH_SHOW_CPP_STACKTRACES": ("0", "1"),
    "TORCH_CUSTOM_TERMINATE": ("0", "1"),
    # torch.distributed.elastic's loggers (`logger.setLevel(os.environ["LOGLEVEL"])`: a name
    # logging knows, in its case, or a ValueError as torch.distributed loads)
    "LOGLEVEL": ("CRITICAL", "FATAL", "ERROR", "WARN", "WARNING", "INFO", "DEBUG", "NOTSET"),
}


def check_library_log_levels() -> None:
    """A log level of torch's or transformers' that they cannot read is one error line, not
    their own unprefixed line on the console before pipeplan's (the seventy-fourth round:
    `TORCH_CPP_LOG_LEVEL=bogus`, `TRANSFORMERS_VERBOSITY=bogus` said so and went on); and a
    `PYTHONWARNINGS` filter Python ignores, which every process a run starts said again.
    `cli` calls it before any command, an API call as it begins, a torchrun rank as it
    starts.

        check_library_log_levels()   # TRANSFORMERS_VERBOSITY=loud: BadArgumentError
    """
    from pipeplan.errors import BadEnvironmentError, quoted

    for name, levels in _LIBRARY_LEVELS.items():
        given = os.environ.get(name, "")
        value = given.upper() if name == "TORCH_CPP_LOG_LEVEL" else given
        if given and value not in levels:
            what = "switch" if levels == ("0", "1") else "level"
            raise BadEnvironmentError(
                f"the environment: {name}={quoted(given, 60)} is no {what} it takes "
                f"({', '.join(levels)}); unset it or give one of them"
            )
    given = os.environ.get("PYTHONWARNINGS", "")
    for option in filter(None, (item.strip() for item in given.split(","))):
        if (problem := _warning_filter_problem(option)) is not None:
            # Python said so itself as this process started (that line comes first); every
            # process pipeplan starts would say it again (the seventy-eighth round: three
            # lines, and the run went on).
            raise BadEnvironmentError(
                f"the environment: PYTHONWARNINGS={quoted(given, 60)} holds a filter Python "
                f"ignores ({problem}); unset it or correct it"
            )


def _warning_filter_problem(option: str) -> str | None:
    """Why Python ignores the warning filter `option` (one item of PYTHONWARNINGS or -W:
    action:message:category:module:lineno), in its own words, or None: `warnings._setoption`'s
    checks, without setting the filter."""
    import warnings

    parts = option.split(":")
    if len(parts) > 5:
        return f"too many fields (max 5): {option!r}"
    action, _, category, _, lineno = [*(p.strip() for p in parts), "", "", "", ""][:5]
    try:
        warnings._getaction(action)  # type: ignore[attr-defined]
        warnings._getcategory(category)  # type: ignore[attr-defined]
    except AttributeError:  # another Python's warnings: its own checks stand
        return None
    except Exception as exc:  # warnings._OptionError, or what importing a category raised
        return str(exc).strip() or type(exc).__name__
    try:
        if lineno and int(lineno) < 0:
            raise ValueError
    except ValueError:
        return f"invalid lineno {lineno}"  # (Python's words)
    return None
