"""Command-line options derived from a pydantic model: each flag is defined once, on a field.

    @app.command()
    @options(RunConfig)
    def run(given: dict[str, Any], runs_dir: Annotated[str, typer.Option()] = "runs") -> None:
        cfg = build(RunConfig, given)

Every field becomes `--field-name` (or what its `Flag` marker says, see
`pipeplan.formats.base.Flag`): the help is the field's description, plus the units a `unit`
flag takes; typer shows the field's default as `[default: 1GiB]`, or one decided at run time in
parentheses, `[default: (run-DATE-TIME)]`, the same way in every command. Adding a field adds
the flag. The command's own parameters after `given` (outputs, switches that configure nothing
in the model) stay ordinary typer parameters.

The command receives only the flags given on the command line, already in the field's unit
(`--cache-budget 1GiB` → 1073741824): the model's defaults are the only defaults, and
`model_fields_set` tells what the user chose (`--cluster` beside `--nodes`, `--nproc` on
resume). `build` constructs the model; a validation error becomes one line naming the flag.
"""

from __future__ import annotations

import inspect
import math
import re
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal, TypeVar, Union, get_args, get_origin

import typer
from pydantic import BaseModel, Field, TypeAdapter, ValidationError
from pydantic.fields import FieldInfo

from pipeplan.cluster import format_bandwidth, format_bytes, parse_bandwidth, parse_bytes
from pipeplan.errors import BadArgumentError, excerpt, quoted
from pipeplan.formats.base import (
    DECIMAL,
    MAX_DIGITS,
    Flag,
    Needs,
    flag_marker,
    flag_of,
    leading_zero,
    spaced,
    unpadded,
    whole_number,
)
from pipeplan.formats.run import NoDefaultData

M = TypeVar("M", bound=BaseModel)
R = TypeVar("R")


@dataclass(frozen=True)
class Unit:
    """Human units a flag takes: parsed into the field, and how its default is shown."""

    what: str
    parse: Callable[[str, str], Any]
    show: Callable[[Any], str]
    examples: str


UNITS = {
    "bytes": Unit(
        "size",
        parse_bytes,
        format_bytes,
        "16GiB, 512MB; a fraction of a unit rounds to whole bytes, and bytes are whole (1.5B is"
        " refused)",
    ),
    "bandwidth": Unit(
        "bandwidth", parse_bandwidth, format_bandwidth, "15.75GB/s, 10Gbit/s; the unit is needed"
    ),
}

# Sources of a value the user did not type (click's ParameterSource names).
_NOT_GIVEN = {"DEFAULT", "DEFAULT_MAP"}


@dataclass(frozen=True)
class SettingsFromFile:
    """Marks a command's own parameter that, given, takes the model's settings from a file
    rather than from the flags' defaults (`run --resume RUN`: its run.json):

        resume: Annotated[str | None, Opt(...), SettingsFromFile()] = None

    The model's flags typed beside it are then not held to their `Needs` against defaults the
    command does not use (`--resume R --init random` was "--init means nothing with --model
    vit-digits", --model's default, for a run of a model folder); the command checks them
    against the file's settings (`check_needs_against`)."""


_CONTEXT = "_typer_context"
# Numbers arrive as text and are read by `number`, not by typer: its pydantic reading takes
# "1_0", "+2" and "١" as 10, 2 and 1. The metavar keeps the help saying what is expected.
_NUMBERS = {int: "<int>", float: "<float>"}


# A float flag's spelling: a `DECIMAL` with an optional '-' (so that the field's range names
# why -1 is refused): `0.3`, `.5`, `1e-3`. Not '+0.3' (an integer flag refuses '+2'),
# '1_0.5', '١', 'inf', 'nan', nor '00.3' (a leading zero, as in integers).
_FLOAT = re.compile("-?" + DECIMAL)


def number(text: Any, kind: Any, spelling: str) -> Any:
    """`number("10", int, "--epochs")` → 10: a numeric flag's text as its type, refused in
    one line naming the flag unless an integer is ASCII digits (`whole_number`) and a float
    is spelled as `_FLOAT` says; anything else (and any other type) as it came."""
    if not isinstance(text, str) or kind not in _NUMBERS:
        return text
    if text != text.strip():
        raise BadArgumentError(f"{spelling}: {spaced(text)}")
    if kind is int:
        digits = text.removeprefix("-")
        if len(digits) > MAX_DIGITS and digits.isascii() and digits.isdigit():
            # Read as 10**100 (`whole_number`), the field's range then quoted a value never
            # typed (forty-ninth round): said as typed, cut.
            raise BadArgumentError(
                f"{spelling}: {quoted(text)} has {len(digits):,} digits; it is beyond every "
                "limit pipeplan has"
            )
        value = whole_number(text)
        if value is None:
            why = leading_zero(text)
            raise BadArgumentError(
                f"{spelling}: {why}"
                if why
                else f"{spelling}: expected a whole number in digits 0-9, not {quoted(text)}"
            )
        return value
    if "_" in text:
        raise BadArgumentError(f"{spelling}: expected a number without '_', not {quoted(text)}")
    if not _FLOAT.fullmatch(text):
        if unpadded(text) != text and _FLOAT.fullmatch(unpadded(text)):
            raise BadArgumentError(
                f"{spelling}: {quoted(text)} has a leading zero; write {excerpt(unpadded(text))}"
            )
        raise BadArgumentError(
            f"{spelling}: expected a number like 0.3 or 1e-3 in digits 0-9, not {quoted(text)}"
        )
    try:
        value = TypeAdapter(float).validate_python(text)  # what typer read before: 1e-3, .5
    except ValidationError as exc:
        raise BadArgumentError(f"{spelling}: {exc.errors()[0]['msg']}") from None
    if not math.isfinite(value):  # ('1e400' reads as inf)
        raise BadArgumentError(f"{spelling}: {quoted(text)} is beyond a float's range (1.8e308)")
    if value == 0 and re.search("[1-9]", text.split("e")[0].split("E")[0]):
        # (the ninetieth round: '--alpha 1e-400' was refused as "got 0.0")
        raise BadArgumentError(
            f"{spelling}: {quoted(text)} is too small for a float (it reads as 0)"
        )
    if value == 0 and text.startswith("-"):  # '+0.3' is refused; a signed zero is its twin
        raise BadArgumentError(f"{spelling}: {quoted(text)} has a sign on 0; write 0")
    return value


def _bare(annotation: Any) -> tuple[Any, bool]:
    """`Annotated[int, Field(ge=1)] | None` → (int, True): the type and whether None is allowed."""
    optional = False
    while True:
        origin = get_origin(annotation)
        if origin is Annotated:
            annotation = get_args(annotation)[0]
        elif origin is Union or origin is types.UnionType:
            args = [a for a in get_args(annotation) if a is not type(None)]
            optional = optional or len(args) < len(get_args(annotation))
            if len(args) != 1:
                return str, optional
            annotation = args[0]
        else:
            return annotation, optional


@dataclass(frozen=True)
class Option:
    """One model field as a command-line option (or argument)."""

    field: str
    info: FieldInfo
    flag: Flag
    spelling: str  # `--cache-budget`, or `MODEL` for an argument

    @property
    def unit(self) -> Unit | None:
        return UNITS[self.flag.unit] if self.flag.unit else None

    @property
    def bare_type(self) -> Any:
        """The field's type without its constraints and None: `int` for `--epochs`."""
        return _bare(self.info.annotation)[0]

    def parse(self, value: Any) -> Any:
        """The field's value from what typer gives: human units and numbers parsed, the rest
        as typed (comma lists stay text: the model's validators read them, with their own
        messages)."""
        if value is None:
            return value
        if self.unit is None:
            return number(value, _bare(self.info.annotation)[0], self.spelling)
        try:
            return self.unit.parse(value, self.unit.what)
        except BadArgumentError as exc:
            raise BadArgumentError(f"{self.spelling}: {exc}") from None

    def shown(self, value: Any) -> Any:
        """The default as the user would type it: `1GiB`, `1,2,4,8`, or the value itself."""
        if value is None:
            return None
        if self.unit is not None:
            return self.unit.show(value)
        if isinstance(value, list | tuple):
            return ",".join(map(str, value))
        if isinstance(value, int | float) and not isinstance(value, bool):
            return str(value)  # numbers are text on the command line (`number` reads them)
        return value

    def parameter(self) -> inspect.Parameter:
        """The typer parameter: the field's type as the command line spells it, its default
        as the user would type it, the description as help."""
        bare, _ = _bare(self.info.annotation)
        # Units, numbers, lists and choices arrive as text; `parse` and pydantic read them, so
        # the messages are the model's (or name the flag), not typer's.
        kind = bare if bare in (bool, str) and self.unit is None else str
        metavar = _NUMBERS.get(bare) if self.unit is None else None
        required = self.info.is_required()
        # A factory's default (and None) is decided later: the option's own default is None.
        concrete = not required and self.info.default_factory is None
        default = self.shown(self.info.default) if concrete else None
        typed = kind if required or default is not None else kind | None
        help_text = self.info.description or ""
        if self.unit is not None:
            help_text += f" Takes units: {self.unit.examples}."
        show = self.flag.default or True  # a text is shown in parentheses: decided at run time
        if self.flag.argument:
            info: Any = typer.Argument(help=help_text, show_default=show, metavar=self.spelling)
        else:
            decls = [self.spelling, *([self.flag.short] if self.flag.short else [])]
            if kind is bool:
                decls[0] = f"{self.spelling}/--no-{self.spelling[2:]}"
            info = typer.Option(*decls, help=help_text, show_default=show, metavar=metavar)
        return inspect.Parameter(
            self.field,
            inspect.Parameter.KEYWORD_ONLY,
            default=inspect.Parameter.empty if required else default,
            annotation=Annotated[typed, info],
        )


def model_options(model: type[BaseModel]) -> list[Option]:
    """The command-line options of `model`, in field order: every field but constants
    (a one-value Literal such as `schema_version`) and fields marked `NOT_A_FLAG`."""
    result = []
    for name, info in model.model_fields.items():
        marker = flag_marker(model, name)
        bare, _ = _bare(info.annotation)
        constant = get_origin(bare) is Literal and len(get_args(bare)) == 1
        if marker.cli and not constant:
            result.append(Option(name, info, marker, flag_of(model, name)))
    return result


def options(model: type[BaseModel]) -> Callable[[Callable[..., R]], Callable[..., R]]:
    """Give a typer command `model`'s fields as options; its first parameter receives the
    ones given on the command line, as a dict for `build(model, given)`."""
    return lambda fn: _command(fn, model_options(model), model)


def checked(fn: Callable[..., R]) -> Callable[..., R]:
    """For a command without a model: refuse its flags that mean nothing with the others
    given, as its parameters' `Needs` markers say (`options` does the same for fields).

        @app.command()
        @checked
        def demo(epochs: Annotated[int, Opt(), Needs("pretrain_only", (False,), "…")] = 10): …
    """
    return _command(fn, [], None)


def _command(
    fn: Callable[..., R], derived: list[Option], model: type[BaseModel] | None
) -> Callable[..., R]:
    """The typer command: `fn`'s own parameters (after `given` when there is a model) and the
    model's fields as options, every `Needs` checked before `fn` runs."""
    own = list(inspect.signature(fn, eval_str=True).parameters.values())[1 if model else 0 :]
    clash = {o.field for o in derived} & {p.name for p in own}
    if clash:
        raise TypeError(f"{fn.__name__}: parameters {sorted(clash)} are fields of the model")
    needs, defaults, _ = model_needs(model) if model else ({}, {}, {})
    from_file = {p.name for p in own if any(isinstance(m, SettingsFromFile) for m in _marks(p))}
    numbers: dict[str, Any] = {}  # fn's own numeric parameters: name → Annotated[int, Field(…)]
    for i, p in enumerate(own):
        marks = _marks(p)
        needs[p.name] = tuple(m for m in marks if isinstance(m, Needs))
        defaults[p.name] = p.default
        bare, _ = _bare(p.annotation)
        info = next((m for m in marks if isinstance(m, typer.models.ParameterInfo)), None)
        if bare in _NUMBERS and info is not None:
            # Read by `number` like a model's fields; typer's min/max become the range.
            numbers[p.name] = Annotated[bare, Field(ge=info.min, le=info.max)]
            info.metavar = info.metavar or _NUMBERS[bare]
            if info.min is not None or info.max is not None:  # typer showed it: [1<=x<=10000]
                info.help = f"{info.help or ''} Range {info.min}..{info.max}.".strip()
            info.min = info.max = None
            default = p.default if p.default is inspect.Parameter.empty else str(p.default)
            own[i] = p.replace(annotation=Annotated[(str, *marks)], default=default)

    def command(**values: Any) -> R:
        context = values.pop(_CONTEXT)
        for name, typed_as in numbers.items():
            values[name] = _own_number(values[name], typed_as, _spellings(context)[name][0])
        given = {}
        for option in derived:
            value = values.pop(option.field)
            if context.get_parameter_source(option.field).name not in _NOT_GIVEN:
                given[option.field] = option.parse(value)
        typed = dict(given)  # every flag typed on the command line, the model's and fn's own
        for name, value in values.items():
            if context.get_parameter_source(name).name not in _NOT_GIVEN:
                typed[name] = value
        if from_file & set(typed):  # the model's flags are the command's to check
            typed = {name: value for name, value in typed.items() if name not in given}
        check_needs(typed, needs, defaults, _spellings(context))
        return fn(given, **values) if model else fn(**values)

    context = inspect.Parameter(_CONTEXT, inspect.Parameter.KEYWORD_ONLY, annotation=typer.Context)
    extra = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own]
    params = [context, *(o.parameter() for o in derived), *extra]
    command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    for attribute in ("__name__", "__qualname__", "__doc__", "__module__"):
        setattr(command, attribute, getattr(fn, attribute))
    return command


def _marks(parameter: inspect.Parameter) -> tuple[Any, ...]:
    """The markers in a parameter's `Annotated[...]` (Opt, Needs, …), or none."""
    annotation = parameter.annotation
    return get_args(annotation)[1:] if get_origin(annotation) is Annotated else ()


def _own_number(text: Any, typed_as: Any, spelling: str) -> Any:
    """A command's own numeric parameter from its text: `number`, then its range."""
    value = number(text, _bare(typed_as)[0], spelling)
    try:
        return TypeAdapter(typed_as).validate_python(value)
    except ValidationError as exc:
        raise BadArgumentError(f"{spelling}: {exc.errors()[0]['msg']}") from None


def model_needs(
    model: type[BaseModel],
) -> tuple[dict[str, tuple[Needs, ...]], dict[str, Any], dict[str, tuple[str, str]]]:
    """`check_needs`'s tables for `model`'s fields (the Python API checks keyword options
    with them): each field's conditions, its default, and its flag as on and off."""
    derived = model_options(model)
    needs = {o.field: o.flag.conditions for o in derived}
    defaults = {o.field: o.info.default for o in derived}
    spellings = {o.field: (o.spelling, "--no-" + o.spelling[2:]) for o in derived}
    return needs, defaults, spellings


def check_needs_against(
    model: type[BaseModel], given: dict[str, Any], settings: BaseModel, where: str
) -> None:
    """`check_needs` for the model's flags given beside a `SettingsFromFile` parameter: the
    flags not given count at `settings`' values, the file `where` holds, not at defaults.

        check_needs_against(RunConfig, {"init": "random"}, saved, "runs/r/run.json")
        # --init means nothing with --model vit-digits (from runs/r/run.json); …
    """
    needs, _, spellings = model_needs(model)
    check_needs(given, needs, settings.model_dump(), spellings, where)


def check_needs(
    typed: dict[str, Any],
    needs: dict[str, tuple[Needs, ...]],
    defaults: dict[str, Any],
    spellings: dict[str, tuple[str, str]],
    where: str | None = None,
) -> None:
    """Refuse the first typed flag whose `Needs` the others do not meet, in one line:
    `--alpha means nothing with --freeze none; it sets …`. A flag not typed is never refused,
    and the others count at their defaults (a default always meets them: tests/test_cli).
    `spellings`: each flag as given on and, for a switch, off (`--cache`, `--no-cache`).
    `where`: the file `defaults` come from (a resumed run's run.json), named beside a value
    taken from it."""
    for name, own in typed.items():
        for need in needs.get(name, ()):
            if not need.concerns(own):
                continue
            value = typed.get(need.other, defaults.get(need.other))
            if need.met(value):
                continue
            on, off = spellings[need.other]
            if isinstance(value, bool):
                setting = on if value else off
            elif need.values == (None,) and not need.excluding:  # nothing once it is given
                setting = on
            else:
                setting = f"{on} {value}"
            if where is not None and need.other not in typed:  # not typed: the file's value
                setting += f" (from {where})"
            typed_as = spellings[name][1] if own is False else spellings[name][0]  # --no-cache
            raise BadArgumentError(f"{typed_as} means nothing with {setting}; {need.why}")


def _spellings(context: Any) -> dict[str, tuple[str, str]]:
    """Each parameter of a click command as typed, on and off: `--cache`/`--no-cache`, or
    an argument's metavar."""
    result = {}
    for param in context.command.params:
        # An argument as `flag_of` names one: MODEL.
        on = param.opts[0] if param.opts and param.opts[0].startswith("-") else param.name.upper()
        off = param.secondary_opts[0] if getattr(param, "secondary_opts", None) else on
        result[param.name] = (on, off)
    return result


def build(model: type[M], given: dict[str, Any]) -> M:
    """`build(RunConfig, given)` is `RunConfig(**given)`, with a validation error as one line
    naming the flag: `--lr: Input should be greater than 0`."""
    try:
        return model(**given)
    except ValidationError as exc:
        raise BadArgumentError(one_line(model, exc)) from None
    except NoDefaultData as exc:
        # Sixty-second round: `run --model vit-digit` (a typo) was told to pass --data. The
        # model is looked up first (torch only on this path): an unknown or missing one says so.
        from pipeplan.models import weight_file

        weight_file(exc.model)
        raise


def one_line(model: type[BaseModel], exc: ValidationError) -> str:
    """The first error of `exc` as `--flag: message` (just the message when it concerns no one
    field)."""
    err = exc.errors()[0]
    context = err.get("ctx") or {}
    if err["type"] == "value_error":
        message = str(context["error"])  # a validator's own words, without "Value error, "
    elif err["type"] == "literal_error":
        message = f"must be {context['expected'].replace(chr(39), '')}, not {quoted(err['input'])}"
    else:
        message = err["msg"]
    loc = err["loc"]
    if loc and loc[0] in model.model_fields:
        return f"{flag_of(model, str(loc[0]))}: {message}"
    return message
