"""The Python API, for notebooks: the commands as functions, their options as keyword arguments
named as on the command line without the dashes (or as the model's fields); paths may be
`Path`s.

    import pipeplan
    pipeplan.profile("bert-synth", out="p.json", micro_batch_sizes="1,2,4")   # → Profile
    preview = pipeplan.preview(profile="p.json", devices_per_node=4, epochs=5) # → Preview
    preview.predicted_speedup
    pipeplan.plan(profile="p.json", devices_per_node=4, out="plan.json")       # → Plan
    summary = pipeplan.run(model="vit-digits", epochs=2, device_memory="100MiB", name="r")
    pipeplan.run(resume="runs/r", epochs=3)                # one more epoch → RunSummary
    pipeplan.export("runs/r", out="trained/")                                 # → Path

Each function builds its command's typed request (`ProfileRequest`, `PlanRequest`,
`RunConfig`; docs/architecture.md §3.10), so a value is checked exactly as the command line
checks it and a bad one raises `PipeplanError` with the command's one-line message (`--lr:
Input should be greater than 0`). Sizes and bandwidths take numbers (bytes, bytes/s) or text
with units ("100MiB", "15.75GB/s"; a rate's text needs its unit, as on the command line).
`import pipeplan` stays light: the package loads this module on the first call
(`pipeplan.__getattr__`).
"""

from __future__ import annotations

import difflib
import functools
import inspect
import numbers
import sys
from collections.abc import Callable
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Any, get_origin

from pydantic import BaseModel

from pipeplan import log
from pipeplan.calls import environment_restored, one_call, stops_raised_in_call
from pipeplan.errors import (
    BadArgumentError,
    InputFileError,
    Interrupted,
    PipeplanError,
    check_working_directory,
    excerpt,
    import_failure,
    quoted,
)
from pipeplan.fileio import claims_released
from pipeplan.formats import RunConfig
from pipeplan.formats.base import MAX_TEXT, printable, spaced
from pipeplan.inputs import PlanRequest, ProfileRequest
from pipeplan.openmp import check_openmp_environment
from pipeplan.options import Option, build, check_needs, model_needs, model_options
from pipeplan.startup import first_import_away

if TYPE_CHECKING:
    from pipeplan.formats import Plan, Preview, Profile, RunSummary

__all__ = ["export", "plan", "preview", "profile", "run"]


def _as_the_command_line(command: Callable[..., Any]) -> Callable[..., Any]:
    """A Ctrl-C anywhere in a call raises `Interrupted`, as the command line says
    `pipeplan: interrupted`, and SIGTERM, SIGHUP and the other stop signals `Stopped`
    (`calls.stops_raised_in_call`): in a call's first seconds (its imports) it was a bare
    KeyboardInterrupt from importlib, pydantic or torch (forty-ninth round). What the file
    system refuses (a name too long) is an InputFileError, the command line's line. The
    process's environment is the caller's again as a call ends (`calls.environment_restored`),
    and so is its logging set-up (`log.setup_restored`). Where the caller has set none up, the
    call shows its lines as the command line does (`pipeplan: WARNING: …`, `log.setup`), for
    that call alone: only `run` did, so a `preview`'s warning came through Python's
    last-resort handler as a bare line (the sixty-eighth round).
    Calls run one at a time (`calls.one_call`): another, from another thread or from inside
    the user's code during a call, is refused in one line."""

    signature = inspect.signature(command)

    @functools.wraps(command)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            signature.bind(*args, **kwargs)
        except TypeError as exc:  # Python's own words, as the command line's one line
            raise BadArgumentError(_misnamed(command.__name__, signature, kwargs, exc)) from None
        try:
            # claims_released: the run directories it claimed, as its process ends;
            # stops_raised_in_call: SIGTERM, SIGHUP, … raise Stopped, as the command's do;
            # environment_restored: what the call's libraries set there is not the caller's;
            # setup_restored: nor is the logging set-up the call makes to show its lines
            with (
                one_call(f"{command.__name__}()"),
                stops_raised_in_call(),
                claims_released(),
                environment_restored(),
                log.setup_restored(),
                # torch's first import away from the working directory, as the command's:
                # removed, its oneMKL ended the caller's process (the ninety-fourth round)
                first_import_away("torch", check_working_directory),
            ):
                if not log.configured():  # the caller has not set up logging
                    log.setup()
                # The environment checked as the command checks it before any command (the
                # seventy-fifth round: a bad OMP_NUM_THREADS or TRANSFORMERS_VERBOSITY was
                # the library's own line, and the call went on).
                check_openmp_environment()
                log.check_library_log_levels()
                try:
                    return command(*args, **kwargs)
                finally:
                    _forget_child_reports()
        except KeyboardInterrupt:
            raise Interrupted from None
        except OSError as exc:  # what the file system refuses, as the command line says it
            where = f"{exc.filename}: " if isinstance(exc.filename, str) else ""
            raise InputFileError(log.bounded(f"{where}{exc.strerror or exc}")) from exc
        except PipeplanError as exc:  # bounded as the command line's line (a 10 MB value)
            if len(message := str(exc)) > log.MAX_LINE:
                exc.args = (log.bounded(message),)
            raise
        except Exception as exc:  # a library's import its environment failed: the line's error
            if (failure := import_failure(exc)) is None:
                raise
            raise failure from None

    return call


def _forget_child_reports() -> None:
    """What the children the call's data code forked reported importing, and their folder in
    TMPDIR, removed as the call ends (`executor.childimports.forget`): nothing reads them
    after it (its ranks are processes of their own, the next call loads the data afresh),
    and the caller lives on (the seventy-sixth round: the folder stayed while it did)."""
    childimports = sys.modules.get("executor.childimports")  # loaded by a call's data alone
    if childimports is not None:
        childimports.forget()


def _misnamed(name: str, signature: inspect.Signature, given: dict, exc: TypeError) -> str:
    """What a call the signature refuses lacks, and the keyword given that may have been
    meant for it: `preview(profil="p.json")` was Python's bare TypeError "missing 1 required
    positional argument" (the fifty-third round); the signature's own binding says it now.

        _misnamed("preview", signature, {"profil": "p.json"}, exc)
        # "preview(): missing a required argument: 'profile' (given profil=: did you mean
        #  profile=?)"
    """
    said = str(exc).removeprefix(f"{name}() ")
    named = [p for p, v in signature.parameters.items() if v.kind is not v.VAR_KEYWORD]
    for key in given:
        if key not in named and (close := difflib.get_close_matches(key, named, n=1)):
            return f"{name}(): {said} (given {key}=: did you mean {close[0]}=?)"
    return f"{name}(): {said}"


@_as_the_command_line
def profile(model: str, **options: Any) -> Profile:
    """`pipeplan profile MODEL --out FILE …`: measure and write the profile; returns it."""
    from pipeplan.profiler import profile_to_file

    return profile_to_file(_request(ProfileRequest, {"model": model, **options}))


@_as_the_command_line
def plan(profile: str, out: str | Path | None = None, **options: Any) -> Plan:
    """`pipeplan plan --profile P …`: the elastic plan, also written to `out` when given."""
    from pipeplan.fileio import check_writable, write_atomic
    from pipeplan.formats import dumps
    from pipeplan.plan import make_plan

    # The values first (cheap), as the command line checks them: `out` beside a profile of
    # 5 was a TypeError from pathlib (forty-ninth round); then `out` before the work.
    request = _request(PlanRequest, {"profile": profile, **options})
    if out is not None:
        from pipeplan.freeze import schedule_file

        out = _path_text(out, "--out")
        inputs = [request.profile, request.cluster, schedule_file(request.freeze_schedule)]
        check_writable(out, inputs=inputs)
    args = request.resolve()
    result = make_plan(args.profile, args.cluster, **args.kwargs())
    if out is not None:
        write_atomic(out, dumps(result), user_output=True)
    args.warn(result)
    return result


@_as_the_command_line
def preview(profile: str, **options: Any) -> Preview:
    """`pipeplan preview --profile P …`: the predicted speedup (`.predicted_speedup`), per
    epoch rows, the baseline and the ablation; `.cases` states each freeze schedule priced
    (`freeze="auto"`, the default: the best and the later case)."""
    from pipeplan.plan import make_preview

    args = _request(PlanRequest, {"profile": profile, **options}).resolve()
    result = make_preview(args.profile, args.cluster, **args.preview_kwargs())
    args.warn(result.plan)
    return result


@_as_the_command_line
def run(
    runs_dir: str | Path | None = None, resume: str | Path | None = None, **options: Any
) -> RunSummary:
    """`pipeplan run …`: train on local ranks; returns the summary (the run directory is
    `runs_dir/summary.name`, "runs" by default: records, metrics.csv, the trained model in
    model/). The epoch lines and warnings go to stderr through the `pipeplan` logger.
    `resume="runs/r"` is `pipeplan run --resume runs/r`: continued from its latest
    checkpoint, with only the options a resume takes (nproc, epochs, collective_timeout); the
    rest are run.json's."""
    from executor.launch import resume_run, start_run

    if resume is not None:
        if runs_dir is not None:  # as the command line refuses it
            raise BadArgumentError(
                "--runs-dir means nothing with --resume; a resumed run stays in its own "
                "directory, RUN"
            )
        _, summary = resume_run(_path_text(resume, "--resume"), _given(RunConfig, options))
        return summary
    # Checked as --runs-dir is: a newline in it trained every step, then failed (forty-ninth
    # round); "" trained into the current folder.
    runs = "runs" if runs_dir is None else _path_text(runs_dir, "--runs-dir")
    _, summary = start_run(_request(RunConfig, options), runs)
    assert summary is not None  # not prepare-only
    return summary


@_as_the_command_line
def export(
    run_dir: str | Path, out: str | Path, checkpoint: str | None = None, **options: Any
) -> Path:
    """`pipeplan export RUN --out DIR [--checkpoint step-N]`: a transformers directory."""
    from executor.task import export_run
    from pipeplan.runfiles import check_summary

    if options:  # as the other functions say it, not Python's TypeError (fifty-first round)
        raise BadArgumentError(
            f"no option {excerpt(repr(next(iter(options))))}; the options are: checkpoint, out, "
            "run_dir"
        )

    # Each checked as the command line checks its text (forty-ninth round: None, 5 or a NUL
    # were tracebacks from pathlib, "" exported ".", a newline in `out` was written).
    run_dir = _path_text(run_dir, "RUN_DIR")
    out = _path_text(out, "--out")
    checkpoint = None if checkpoint is None else _path_text(checkpoint, "--checkpoint")
    return export_run(run_dir, out, checkpoint, check_files=check_summary)


def _path_text(value: Any, flag: str) -> str:
    """A path argument (`resume=`, `out=`, export's): text or a Path, checked as `_text`.
    Found by the forty-eighth round (`resume=`): True was "True: no such run directory"."""
    try:  # a subclass's own methods may raise (the fifty-eighth round: a raw exception)
        # One held in a 0-d array as the value it holds (`plan(out=np.array("p.json"))` was
        # "not a path" where np.str_("p.json") was taken: the seventy-fourth round).
        value = _unwrapped(value, flag, "a path")
        if isinstance(value, PurePath):
            value = str(value)
        if isinstance(value, str):
            return _text(str.__str__(value), flag)
        shown = excerpt(repr(value))
    except PipeplanError:
        raise
    except Exception as exc:
        raise BadArgumentError(
            f"{flag}: {excerpt(type(value).__name__)} cannot be read ({type(exc).__name__})"
        ) from None
    raise BadArgumentError(f"{flag}: {shown} is not a path; give one")


def _text(value: str, flag: str, longest: int | None = MAX_TEXT) -> str:
    """Any text argument checked as the command line checks its tokens: not empty, no space
    around it, no NUL or other control character; a path at most a path's length (`longest`:
    None for an option, whose text a list may make long, as a command line's). Found by the
    forty-eighth round (`resume=`): "" resumed ".", a NUL a ValueError traceback, and a
    10^7-character value a message as long; by the fifty-first, in the options of preview,
    plan and profile (`profile="a\\0b"` a ValueError, `cluster="a\\nb"` a two-line message)."""
    value = str.__str__(value)  # exactly a str: a subclass's own __eq__ or strip may raise
    if value == "":
        raise BadArgumentError(f"{flag} is empty; give a value")
    if value != value.strip():
        raise BadArgumentError(f"{flag}: {spaced(value)}")
    if "\0" in value or (longest is not None and len(value) > longest):
        why = "holds a NUL byte" if "\0" in value else f"is {len(value):,} characters long"
        shown = excerpt(value.replace("\0", "\\x00"))  # a NUL printed would cut the line
        raise BadArgumentError(f"{flag}: {shown} {why}; no path does")
    try:
        value.encode()
    except UnicodeEncodeError:  # a lone surrogate: no file name, and no line, can hold it
        raise BadArgumentError(
            f"{flag}: {excerpt(ascii(value))} is not text UTF-8 can encode (a lone surrogate)"
        ) from None
    try:
        return printable(value)
    except ValueError as exc:
        raise BadArgumentError(f"{flag}: {exc}") from None


def _request(model: type[BaseModel], options: dict[str, Any]) -> Any:
    """The command's model from keyword options, as the command line builds it."""
    given = _given(model, options)
    check_needs(given, *model_needs(model))  # `freeze="none", alpha=0.5` as `--freeze none …`
    return build(model, given)


def _given(model: type[BaseModel], options: dict[str, Any]) -> dict[str, Any]:
    """Keyword options as the command line's given values, by field, each parsed as its flag's
    text is."""
    known = _options_by_name(model)
    given = {}
    for key, value in options.items():
        option = known.get(key)
        if option is None:  # named as documented: the flags without their dashes
            names = ", ".join(sorted({_keyword(o) for o in known.values()}))
            raise BadArgumentError(f"no option {excerpt(repr(key))}; the options are: {names}")
        try:
            given[option.field] = _value(option, value)
        except PipeplanError:
            raise
        except Exception as exc:  # a value's own methods (a property, __iter__) may raise anything
            raise BadArgumentError(
                f"{option.spelling}: {excerpt(type(value).__name__)} cannot be read "
                f"({type(exc).__name__}: {excerpt(str(exc))})"
            ) from None
    return given


def _value(option: Option, value: Any) -> Any:
    """One keyword option's value as the command line's given value, parsed as its flag's text
    is: `_value(device_memory, "1GiB")` is 1073741824."""
    wanted = "True or False" if option.bare_type is bool else "a number or text"
    held = _unwrapped(value, option.spelling, wanted)  # first: checked as if typed
    if isinstance(held, bytes | bytearray | memoryview):
        # Read as their text, b" 2" and b"2_0" passed where " 2" and "2_0" are refused (the
        # fifty-first round): a command line's values are text. Held in a 0-d array, they
        # were read so too (the seventy-fourth round: np.array(b"3_0") was 30 epochs).
        shown = value if isinstance(value, bytes) else held  # np.bytes_ named as given
        raise BadArgumentError(
            f"{option.spelling}: {quoted(shown)} is bytes; give text (a str) or a number"
        )
    value = held
    if isinstance(value, PurePath):  # files and directories are text on the command line
        value = str(value)
    if isinstance(value, str):
        value = _text(value, option.spelling, longest=None)
    dimensions = getattr(value, "ndim", 0)  # numpy's, torch's; another object's may be anything
    array = type(dimensions) is int and dimensions >= 1 and hasattr(value, "tolist")
    sequence = isinstance(value, list | tuple) or array
    if sequence and option.spelling in TEXT_LISTS:  # `freeze_schedule=[0, 3]`, as "0,3"
        if array:
            _refuse_odd_dtype(value, option.spelling, "whole numbers")
            _refuse_masked(value, option.spelling, "whole numbers")
        items = value.tolist() if array else value
        value = ",".join(str(_item(v, option.spelling)) for v in items)
        sequence = array = False
    if sequence and not _is_list(option):
        # One value's option: `collective_timeout=np.array([5.0])` was told "expected whole
        # numbers", a list option's words (the seventy-second round).
        try:
            shown = _shown(value)
        except Exception:  # a repr of the user's that fails
            shown = f"a {excerpt(type(value).__name__)}"
        raise BadArgumentError(
            f"{option.spelling}: {shown} is a sequence; the option takes one value (a number "
            "or text)"
        )
    if array:
        _refuse_odd_dtype(value, option.spelling, "whole numbers")  # [0, 8] of timedelta64
        _refuse_masked(value, option.spelling, "whole numbers")
        value = value.tolist()  # its items held as a list's (a float array was taken)
    if isinstance(value, list | tuple):  # `boundaries=[0, 5, 10]`, as "0,5,10" typed
        # `[0, True, 10]` planned 0,1,10 (the fifty-fifth round): each item is a number
        # as a lone value is, never a switch's.
        value = [_item(v, option.spelling) for v in value]
    elif _is_list(option) and value is not None and not isinstance(value, str | numbers.Number):
        # pydantic takes a set, a generator, a deque or a dict's keys for a list, its items
        # unchecked and a set's in any order: `boundaries={0, 3.0, 6}` planned 0,3,6 (the
        # fifty-seventh round); and an old-style sequence (`__getitem__` alone, no Iterable)
        # the same way (the fifty-eighth round: [0, True, 6] planned 0,1,6).
        raise BadArgumentError(
            f"{option.spelling}: a {excerpt(type(value).__name__)} is not a list; give the "
            'numbers in order as a list or tuple, or as text ("0,5,10")'
        )
    value = _plain_number(value, option.spelling)
    if _is_boolean(value) and option.bare_type is not bool:
        # Python's True is the integer 1, which pydantic takes for a number: the forty-
        # sixth round's `devices_per_node=True, epochs=True` previewed 1 device, 1 epoch
        # (numpy's and torch's booleans too: the forty-ninth round).
        raise BadArgumentError(
            f"{option.spelling}: {value} is a switch's value; give a number or text"
        )
    if option.bare_type is bool and not isinstance(value, bool):
        # A switch is on or off: cache=0, "no" or numpy's False were taken as --no-cache.
        raise BadArgumentError(
            f"{option.spelling}: {excerpt(repr(value))} is not True or False; a switch "
            "takes one of them"
        )
    if option.bare_type is int and option.unit is None and isinstance(value, float):
        # pydantic takes 2.0 for 2 where the command line refuses "2.0" (the thirty-sixth
        # session's list): a count is a whole number in both.
        raise BadArgumentError(
            f"{option.spelling}: expected a whole number, not {float.__repr__(value)} (a float)"
        )
    if option.unit is not None and isinstance(value, int | float):
        # As its text on the command line: a rate without a unit is refused there, where
        # `inter_bw=5` was 5 bytes/s here (the fifty-sixth round); a size is bytes in both.
        value = str(value)
    return option.parse(value) if isinstance(value, str) else value


def _item(value: Any, spelling: str) -> Any:
    """One item of a list option (layer indices, micro-batch sizes: whole numbers), as a lone
    number is read (`_plain_number`), a boolean or a float refused; one held in a numpy
    scalar or a 0-d array as the value it holds (`_unwrapped`: `[0, np.array(b"8")]` was
    layer 8, the seventy-fourth round)."""
    value = _unwrapped(value, spelling, "whole numbers")
    if isinstance(value, str | bytes | bytearray | memoryview):  # pydantic read "+4", " 0"
        raise BadArgumentError(
            f"{spelling}: {quoted(value)} in a list; give whole numbers, or the whole "
            'list as text ("0,5,10")'
        )
    value = _plain_number(value, spelling)
    if _is_boolean(value):
        raise BadArgumentError(f"{spelling}: {value} is a switch's value; give whole numbers")
    if isinstance(value, float):
        shown = float.__repr__(value)  # a subclass's own repr may raise (fifty-sixth round)
        raise BadArgumentError(f"{spelling}: expected whole numbers, not {shown} (a float)")
    return value


def _plain_number(value: Any, spelling: str) -> Any:
    """A number of another type (numpy's, Decimal, Fraction) as Python's int or float, and
    one beyond every limit refused as the command line refuses its digits: 10**5000 was a
    ValueError from int() and Decimal("1e5000") an OverflowError (fiftieth round). A 0-d
    array or tensor is read out before (`_unwrapped`)."""
    if isinstance(value, bool) or _is_boolean(value) or not isinstance(value, numbers.Number):
        return value
    if isinstance(value, numbers.Integral):
        try:  # an int subclass's own __int__ may raise anything (the fifty-fifth round)
            value = int(value)
        except Exception as exc:
            raise BadArgumentError(
                f"{spelling}: {excerpt(type(value).__name__)} cannot be read as an integer "
                f"({type(exc).__name__}: {excerpt(str(exc))})"
            ) from None
        if value.bit_length() > MAX_BITS:
            raise BadArgumentError(
                f"{spelling}: an integer of about {int(value.bit_length() * 0.30103):,} digits "
                "is beyond every limit pipeplan has"
            )
        return value
    if not isinstance(value, float):  # Decimal (not a numbers.Real), Fraction, numpy's
        try:
            return float(value)
        except (OverflowError, ValueError):
            return float("inf")  # refused by the option's range, as 1e400 typed is
        except TypeError:  # a complex number: refused as it is
            return value
        except Exception as exc:  # a subclass's own __float__
            raise BadArgumentError(
                f"{spelling}: {excerpt(type(value).__name__)} cannot be read as a number "
                f"({type(exc).__name__}: {excerpt(str(exc))})"
            ) from None
    return float.__float__(value)  # exactly a float: a subclass's own __str__ may raise


# An integer of more bits than this (about 100 digits) is beyond every limit an option has.
MAX_BITS = 332


def _unwrapped(value: Any, spelling: str, wanted: str) -> Any:
    """A numpy scalar, a 0-d numpy array (of any dtype, objects' too) or a 0-d tensor as the
    Python value it holds (`.item()`), read out before any check, so that the value gets
    every check it gets typed; any other value as it is. Found by the seventy-fourth round:
    read out after the checks, `epochs=np.array(b"3_0")` was 30 epochs where b"3" and "3_0"
    are refused, a NUL in an object array's bytes a ValueError, `boundaries=np.array("0,8")`
    "not a list" where "0,8" is taken, and `devices_per_node=np.timedelta64(2)` 2 devices.
    What it holds must be a number, a switch's value, text, bytes (refused as bytes are) or a
    path: a timedelta64, datetime64 or void, or an object array's list, is refused in one
    line, naming the option (`wanted`: what to give instead).

        _unwrapped(np.array("0,8"), "--boundaries", "whole numbers")   # '0,8'
        _unwrapped(np.timedelta64(2), "--epochs", "a number or text")
        # BadArgumentError: --epochs: np.timedelta64(2) is of numpy's timedelta64 type; give
        #  a number or text
    """
    given = value
    for _ in range(_MOST_WRAPPED):  # an object array may hold another, or itself
        if not (getattr(value, "ndim", None) == 0 and hasattr(value, "item")):
            break
        _refuse_odd_dtype(value, spelling, wanted)
        _refuse_masked(value, spelling, wanted)
        import numpy as np  # (here: what holds a value is numpy's or torch's, loaded already)

        held = value.item()  # (torch warned of a tensor that requires grad: fiftieth round)
        if isinstance(held, np.longdouble | np.clongdouble):  # its .item() is itself
            held = complex(held) if isinstance(held, np.clongdouble) else float(held)
        value = held
    else:
        value = given  # still wrapped: refused below as what it holds
    if value is given:
        if getattr(given, "ndim", None) == 0 and hasattr(given, "item"):
            raise BadArgumentError(
                f"{spelling}: a {excerpt(type(given).__name__)} that holds itself or arrays "
                f"{_MOST_WRAPPED} deep; give {wanted}"
            )
        return value
    if not isinstance(value, numbers.Number | str | bytes | bytearray | memoryview | PurePath):
        raise BadArgumentError(
            f"{spelling}: {_shown(given)} holds a {excerpt(type(value).__name__)}; give {wanted}"
        )
    return value


# The most 0-d arrays a value may be held in, one in another (an object array's).
_MOST_WRAPPED = 8


# Options whose text is a list of whole numbers ("0,0,3") and whose API value may be a list.
TEXT_LISTS = ("--freeze-schedule",)


def _shown(value: Any) -> str:
    """A value's repr on one line, cut as `excerpt` cuts (an array's or a tensor's spans
    lines: the seventy-fifth round's two-line errors)."""
    return excerpt(" ".join(repr(value).split()))


def _refuse_odd_dtype(value: Any, spelling: str, wanted: str) -> None:
    """A numpy array or scalar whose values are no numbers or text (timedelta64, datetime64,
    void) is refused: `.item()` and `.tolist()` read a timedelta64(2) as 2 (the seventy-
    fourth round: `devices_per_node=np.timedelta64(2)` was 2 devices)."""
    dtype = getattr(value, "dtype", None)
    if getattr(dtype, "kind", None) in ("m", "M", "V"):
        raise BadArgumentError(
            f"{spelling}: {_shown(value)} is of numpy's {excerpt(str(dtype.name))} type; give "
            f"{wanted}"
        )


def _refuse_masked(value: Any, spelling: str, wanted: str) -> None:
    """A numpy masked array with a masked item is refused: a missing value, which `.item()`
    read as the data under its mask (the seventy-fifth round) and `.tolist()` as None, shown
    so in the refusal of `freeze_schedule=np.ma.array([1, 2], mask=[0, 1])` (the seventy-
    sixth)."""
    numpy = sys.modules.get("numpy")  # (an array of numpy's has loaded it)
    if numpy is not None and isinstance(value, numpy.ma.MaskedArray) and numpy.ma.is_masked(value):
        what = "is masked" if value.ndim == 0 else "has a masked item"
        raise BadArgumentError(f"{spelling}: {_shown(value)} {what}; give {wanted}")


def _is_boolean(value: Any) -> bool:
    """Python's, numpy's or torch's boolean (a scalar, or an array of them)."""
    return isinstance(value, bool) or str(getattr(value, "dtype", "")) in ("bool", "torch.bool")


def _is_list(option: Option) -> bool:
    """Whether the option holds a list (`--boundaries`, `--micro-batch-sizes`)."""
    return get_origin(option.bare_type) in (list, tuple)


def _keyword(option: Option) -> str:
    """The keyword an option is documented by: its flag without dashes (`device_memory`)."""
    return option.spelling.lstrip("-").replace("-", "_").lower()


def _options_by_name(model: type[BaseModel]) -> dict[str, Option]:
    """Each option under its field name and its flag's name: `device_memory_bytes` and
    `device_memory` are the same option."""
    known = {}
    for option in model_options(model):
        known[option.field] = option
        known[_keyword(option)] = option
    return known
