"""Errors a user can act on.

The library raises these; the CLI prints the message as one line and exits with code 2.
Anything else escaping the library is a bug and keeps its traceback.
"""

import re

# The most of a user's value (a config's, a file's, a flag's) a message quotes: a 10 MB
# hidden_act was a 10 MB error line (twentieth round).
SHOWN = 200


# What no printed string may hold: C0/C1 controls (Unicode category Cc: line feed, carriage
# return, escape, NEL) and the line and paragraph separators. A name from a file is printed in
# titles and errors; a line break in it forges a line ("pipeplan: error: fake") of its own.
# Also the bidi controls (U+061C, U+200E/F, U+202A-E, U+2066-9) and the zero-width characters
# (U+200B-D, U+2060, U+FEFF): a name or path holding them prints as another one ("o\u202e.json"
# shows its tail reversed, "o\u200b.json" looks like o.json).
CONTROL = re.compile(
    "[\x00-\x1f\x7f-\x9f\u2028\u2029\u061c\u200b-\u200f\u202a-\u202e\u2060\u2066-\u2069\ufeff]"
)


def one_line(text: str) -> str:
    """`one_line("CUDA out of memory.\\tTried")` → "CUDA out of memory. Tried": what pipeplan
    itself records or prints from elsewhere (an exception's message, a device's name, a line
    the user's data code wrote) made printable, each control character a space."""
    return CONTROL.sub(" ", text)


def excerpt(text: str, limit: int = SHOWN) -> str:
    """What a message shows of a text it did not write (a file's contents, another program's
    message): at most `limit` characters, and a cut always visible, with the whole's length.

        excerpt("CUDA out of memory")   # 'CUDA out of memory'
        excerpt("x" * 500, 8)           # 'xxxxxxxx… (500 characters)'
    """
    return text if len(text) <= limit else text[:limit] + _cut(len(text))


def quoted(value: object, limit: int = SHOWN) -> str:
    """A value as a message quotes it (its repr), cut as `excerpt` cuts, outside the quotes
    for a text: a cut quote otherwise misstates what the value holds.

        quoted("step-6")                          # "'step-6'"
        quoted("/tmp/run/checkpoints/step-6", 8)  # "'/tmp/run'… (27 characters)"
        quoted(list(range(1000)), 12)             # '[0, 1, 2, 3,… (4890 characters)'
    """
    if isinstance(value, str) and len(value) > limit:
        return repr(value[:limit]) + _cut(len(value))
    return excerpt(repr(value), limit)


def fitted(text: str, room: int) -> str:
    """`text` in at most `room` characters, the sign of a cut included: what a line of a
    bounded length holds of it (`log.bounded`).

        fitted("x" * 500, 30)   # 'xxxxxxxxxxx… (500 characters)', 30 characters in all
    """
    if len(text) <= room:
        return text
    sign = _cut(len(text))
    return text[: max(room - len(sign), 0)] + sign


def reason(exc: BaseException) -> str:
    """Why reading failed, for a message that names the file already: an OSError's str
    repeats its file name, quoted whole (a 5,000-character path was named twice, the second
    time uncut: twenty-third round).

        reason(OSError(36, "File name too long", "x" * 5000))   # 'OSError: File name too long'
        reason(UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte"))
        # "UnicodeDecodeError: 'utf-8' codec can't decode byte 0xff in position 0: …"
    """
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.__class__.__name__}: {exc.strerror}"
    return f"{exc.__class__.__name__}: {excerpt(str(exc))}"


def _cut(length: int) -> str:
    """The sign of a cut: `… (N characters)`, N the whole's length."""
    return f"… ({length} characters)"


class PipeplanError(Exception):
    """Base class: the message is the whole story, written for the user."""


class UnknownModelError(PipeplanError):
    pass


class InputFileError(PipeplanError):
    """A file the user gave is missing, unreadable, malformed or of the wrong kind."""


class BadArgumentError(PipeplanError):
    pass


class BadEnvironmentError(BadArgumentError):
    """An environment variable a library cannot read: bad input, exit 2 in a torchrun rank
    too (`import_failure`, `log.check_library_log_levels`)."""


class OutputError(PipeplanError):
    """An output path cannot be written."""


def open_files_failure(exc: BaseException, path: object) -> PipeplanError | None:
    """The one line for `path` that could not be opened because this process or the system
    has too many files open (EMFILE, ENFILE), else None: the file is not at fault. Found by
    the fifty-ninth round: under `ulimit -n 7` a resume read the checkpoints as unreadable,
    "no checkpoint of this run is left to continue from: delete RUN" of a healthy run.

        open_files_failure(OSError(errno.EMFILE, "Too many open files"), "c/model.pt")
    """
    import errno
    import resource

    if not isinstance(exc, OSError) or exc.errno not in (errno.EMFILE, errno.ENFILE):
        return None
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    whose = "this process has" if exc.errno == errno.EMFILE else "the system has"
    return PipeplanError(
        f"{path}: cannot be opened: {whose} too many files open (the open-files limit, ulimit "
        f"-n, is {soft}); raise it and run again: the file is not at fault"
    )


class Interrupted(BaseException):
    """Ctrl-C. The CLI prints `pipeplan: interrupted` and exits 130. Not a KeyboardInterrupt:
    typer turns that into exit code 130 silently, before the CLI could say anything."""


class Stopped(BaseException):
    """SIGTERM or SIGHUP (a scheduler's stop, `kill`, a closed terminal) to pipeplan, or to
    the launcher of a run's ranks. The CLI prints `pipeplan: stopped by SIGTERM` and exits
    128 + the signal's number, as a process the signal killed would.

        raise Stopped(signal.SIGTERM)
    """

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum

    def __str__(self) -> str:  # as the command line says it (an API call's was "15")
        from pipeplan.startup import stopped_by

        return stopped_by(self.signum)


# What the loader says when a shared object cannot be mapped for lack of address space
# (`ulimit -v`): torch, numpy, scipy and transformers load theirs lazily, at the first use.
_NO_ROOM = ("failed to map segment", "cannot allocate memory", "out of memory")


def memory_failure(exc: BaseException) -> PipeplanError | None:
    """The one-line error a failed allocation while loading or building is, or None: a
    MemoryError, or an import that could not map a library (`failed to map segment from
    shared object`). Found by the thirtieth round: under a small `ulimit -v` such an import
    was an 80-line traceback, or was taken for a wrong model config.

        memory_failure(ImportError("libtorch_cpu.so: failed to map segment from shared object"))
        # PipeplanError("not enough memory to load libtorch_cpu.so (…); run pipeplan with …")
    """
    if isinstance(exc, MemoryError):
        return PipeplanError("out of memory; run pipeplan with more memory")
    text = str(exc)
    if not isinstance(exc, ImportError | OSError) or not any(s in text.lower() for s in _NO_ROOM):
        return None
    # numpy wraps the loader's line in a page of advice: the line itself names the library.
    found = re.search(r"([^\s:/]+\.so[\w.\-]*): ([^\n]*)", text)
    library, said = found.groups() if found else ("a library", " ".join(text.split()))
    return PipeplanError(
        f"not enough memory to load {excerpt(library, 80)} ({excerpt(said)}); run pipeplan "
        "with more memory"
    )


# The environment variables each library reads as it is imported, by their names' starts.
_LIBRARY_VARIABLES = {
    "torch": ("TORCH", "PYTORCH", "CUDA", "NCCL", "GLOO"),
    "matplotlib": ("MPL",),
    "huggingface_hub": ("HF_", "HUGGINGFACE"),
    "transformers": ("TRANSFORMERS", "HF_"),
    "numpy": ("NPY", "NUMPY"),
    "scipy": ("SCIPY",),
}


def working_directory_failure() -> BadArgumentError | None:
    """The one-line error a working directory that no longer exists is, or None where it
    exists. Found by the seventy-ninth round: removed as `pipeplan run` checked its data,
    torch's import (`os.getcwd()` in torch._dynamo's config) and a relative path's
    `os.path.abspath` raised, and the command printed 131 lines of chained tracebacks; removed
    as the ranks started, their shell and torch's oneMKL printed lines of their own. Named as
    Linux keeps it (/proc/self/cwd, " (deleted)" cut off), where it can be read.

        working_directory_failure()   # after `rm -rf /tmp/d` from another terminal:
        # BadArgumentError("the working directory was removed (/tmp/d): run pipeplan from …")
    """
    import os

    try:
        os.getcwd()
        return None
    except FileNotFoundError:
        pass
    try:
        where = os.readlink("/proc/self/cwd").removesuffix(" (deleted)")
    except OSError:  # not Linux: the folder's name is not known
        where = ""
    named = f" ({excerpt(one_line(where))})" if where.startswith("/") else ""
    return BadArgumentError(
        f"the working directory was removed{named}: run pipeplan from a folder that exists"
    )


_INSTALL_FOLDERS = ("site-packages", "dist-packages")


def check_working_directory() -> None:
    """`working_directory_failure()` raised where there is one: the command's check and the
    API's, after torch's first import (`startup.first_import_away`)."""
    if (gone := working_directory_failure()) is not None:
        raise gone


def import_failure(exc: BaseException) -> BadArgumentError | None:
    """The one-line error an exception raised by an installed library's own code as it was
    imported is (a module's top-level code, `<module>`: where libraries read their
    environment variables), or None. Found by the seventy-fourth round: `TORCH_LOGS=bogus`,
    `TORCH_DISTRIBUTED_DEBUG=bogus`, `PYTORCH_JIT=abc` or `MPLBACKEND=bogus` were a Python
    traceback and exit 1, and `HF_HUB_ETAG_TIMEOUT=abc` "cannot build the model from its
    config". The variables set that the library reads (by their names' starts) are named,
    those whose value the error quotes first, the value only of those (the seventy-fifth
    round: an `HF_TOKEN` was printed whole, and four harmless `HF_*` hid the one at fault).

        import_failure(ValueError("Invalid log settings: bogus"))   # raised in torch/_logging
        # PipeplanError("the environment: importing torch failed (Invalid log settings: …);
        #  it reads TORCH_LOGS='bogus': unset it or give it a value torch takes")
    """
    import os
    import sysconfig

    if isinstance(exc, PipeplanError | KeyboardInterrupt | MemoryError):
        return None
    if (gone := working_directory_failure()) is not None:  # no variable's fault: torch._dynamo
        return gone  # reads os.getcwd() as it is imported
    import sys

    # Where libraries are installed: this environment's, and those of the interpreter it was
    # made from on its path (a virtual environment that sees them: CI's, where torch's files
    # were none of its own and a bad TORCH_LOGS was a traceback again).
    installed = {sysconfig.get_paths()[k] for k in ("purelib", "platlib")}
    installed |= {p for p in sys.path if type(p) is str and os.path.basename(p) in _INSTALL_FOLDERS}
    folders = tuple(os.path.join(os.path.realpath(p), "") for p in installed if os.path.isabs(p))
    library = None
    tb = exc.__traceback__
    while tb is not None:  # the innermost top-level code of a library's module
        code = tb.tb_frame.f_code
        # An installed module's file name is absolute; `<frozen importlib._bootstrap>` is no
        # path, and realpath() made it one of the working directory's.
        absolute = os.path.isabs(code.co_filename)
        file = os.path.realpath(code.co_filename) if absolute else code.co_filename
        if code.co_name == "<module>" and absolute and file.startswith(folders):
            library = next(file[len(f) :].split(os.sep)[0] for f in folders if file.startswith(f))
        tb = tb.tb_next
    if library is None:
        return None
    library = library.removesuffix(".py")
    starts = _LIBRARY_VARIABLES.get(library, (library.upper(),))
    text = str(exc)
    named = [k for k in sorted(os.environ) if k.startswith(starts)]
    secret = ("TOKEN", "KEY", "SECRET", "PASSWORD")  # never shown, whatever the error quotes
    shown = [k for k in named if not any(part in k for part in secret)]
    quoting = [k for k in shown if os.environ[k] and (os.environ[k] in text or k in text)]
    reason = excerpt(" ".join(text.split())) or type(exc).__name__
    if quoting:
        said = ", ".join(f"{k}={quoted(os.environ[k], 60)}" for k in quoting[:4])
        reads = f"; it reads {said}: unset it or give it a value {library} takes"
    elif named:  # the names alone: a value may be a secret (HF_TOKEN)
        more = f" and {len(named) - 4} more" if len(named) > 4 else ""
        reads = f"; of its variables, {', '.join(named[:4])}{more} are set: check them"
    else:
        reads = ""
    return BadEnvironmentError(f"the environment: importing {library} failed ({reason}){reads}")


def tempdir_failure(exc: BaseException) -> PipeplanError | None:
    """The one-line error `tempfile`'s "No usable temporary directory found in [...]" is, or
    None: it tries to write a few bytes in each folder it knows, and says nothing of why none
    took them. Found by the fifty-eighth round: under `ulimit -f 0` every folder was writable
    and the line listed them all; `profile` blamed the model's config. The limit is named
    where it is the cause; else the folders asked.

        tempdir_failure(FileNotFoundError(2, "No usable temporary directory found in […]"))
    """
    if not isinstance(exc, FileNotFoundError) or "No usable temporary directory" not in str(exc):
        return None
    import os
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
    if soft != resource.RLIM_INFINITY and soft < 512:
        return PipeplanError(
            f"no temporary file can be written: the file size limit (ulimit -f) is {soft} "
            "bytes; raise it (ulimit -f unlimited)"
        )
    where = os.environ.get("TMPDIR")
    asked = f"TMPDIR ({quoted(where)}), " if where else ""
    return PipeplanError(
        f"no temporary file can be written in {asked}/tmp, /var/tmp, /usr/tmp or the working "
        "folder (full, read-only or missing): set TMPDIR to a folder that takes one"
    )
