"""Options derived from a model's fields: names, defaults, help, units, what reaches the model."""

from typing import Annotated, Any, Literal

import pytest
import typer
from pydantic import Field, field_validator

from pipeplan.errors import BadArgumentError
from pipeplan.formats import NOT_A_FLAG, Flag, NonNegInt, PosInt, Strict
from pipeplan.options import build, options


class Toy(Strict):
    schema_version: Literal[1] = 1
    path: Annotated[str, Flag(argument=True)] = Field(description="A path.")
    size_bytes: Annotated[NonNegInt, Flag("--size", unit="bytes")] = Field(
        1 << 20, description="A size."
    )
    count: PosInt = Field(3, description="How many.")
    fast: bool = Field(True, description="Go fast.")
    sizes: list[PosInt] = Field([1, 2], description="Sizes.")
    stamp: Annotated[str, Flag(default="now")] = Field(
        default_factory=lambda: "t0", description="When."
    )
    limit: PosInt | None = Field(None, description="A cap.")
    internal: Annotated[int, NOT_A_FLAG] = 0

    @field_validator("sizes", mode="before")
    @classmethod
    def _comma_list(cls, value: Any) -> Any:
        return [int(v) for v in value.split(",")] if isinstance(value, str) else value


seen: dict[str, Any] = {}
app = typer.Typer(add_completion=False)


@app.command()
@options(Toy)
def toy(given: dict[str, Any], extra: Annotated[int, typer.Option(help="Not a field.")] = 0):
    """A command whose options are Toy's fields."""
    seen.update(given=given, extra=extra, toy=build(Toy, given))


def call(*args: str) -> None:
    seen.clear()
    typer.main.get_command(app).main(args=list(args), prog_name="toy", standalone_mode=False)


def params() -> dict:
    return {p.name: p for p in typer.main.get_command(app).params}


def test_every_field_but_constants_and_not_a_flag_is_an_option_in_field_order():
    fields = ["path", "size_bytes", "count", "fast", "sizes", "stamp", "limit"]
    assert list(params()) == [*fields, "extra"]
    p = params()
    assert p["path"].param_type_name == "argument" and p["path"].required
    assert p["size_bytes"].opts == ["--size"] and p["count"].opts == ["--count"]
    assert p["fast"].opts == ["--fast"] and p["fast"].secondary_opts == ["--no-fast"]


def test_defaults_are_the_fields_as_one_would_type_them_and_help_is_the_description():
    p = params()
    assert p["size_bytes"].default == "1MiB" and p["size_bytes"].show_default is True
    assert p["size_bytes"].help.startswith("A size. Takes units: 16GiB, 512MB; a fraction")
    # A number is text, as typed, like a list: `number` reads it (shown as [default: 3]).
    assert (p["count"].default, p["fast"].default, p["sizes"].default) == ("3", True, "1,2")
    assert p["count"].help == "How many."
    # Decided at run time: no value, the marker's words (shown in parentheses).
    assert p["stamp"].default is None and p["stamp"].show_default == "now"
    assert p["limit"].default is None and not p["limit"].required


def test_only_the_flags_given_reach_the_model_parsed_to_the_fields_unit():
    call("p")
    assert seen["given"] == {"path": "p"}
    assert seen["toy"].model_fields_set == {"path"}
    assert (seen["toy"].size_bytes, seen["toy"].stamp, seen["extra"]) == (1 << 20, "t0", 0)
    call("p", "--size", "2MiB", "--count", "3", "--no-fast", "--sizes", "4,8", "--extra", "5")
    # --count 3 is the default, but given: the model knows the user chose it.
    assert seen["given"] == {
        "path": "p",
        "size_bytes": 2 << 20,
        "count": 3,
        "fast": False,
        "sizes": "4,8",
    }
    assert seen["toy"].sizes == [4, 8] and seen["extra"] == 5


def test_a_bad_unit_and_a_bad_value_are_one_line_naming_the_flag():
    with pytest.raises(BadArgumentError, match=r"^--size: unknown unit 'XB'"):
        call("p", "--size", "1XB")
    with pytest.raises(BadArgumentError) as info:
        call("p", "--count", "0")
    assert str(info.value) == "--count: Input should be greater than or equal to 1"


def test_a_command_parameter_that_is_also_a_field_is_refused():
    def twice(given: dict[str, Any], count: int = 0) -> None: ...

    with pytest.raises(TypeError, match="count"):
        options(Toy)(twice)
