"""The Python API: `import pipeplan` stays light, each function is its command (same options,
same results, same one-line errors), and `pipeplan.plan` is callable next to the planner
module of the same name."""

import contextlib
import json
import os
import re
import subprocess
import sys
from collections import deque
from decimal import Decimal
from pathlib import Path

import numpy as np
import pytest
import torch

import cli
import pipeplan
from executor.planning import shipped_profile
from pipeplan.errors import PipeplanError
from pipeplan.formats import Profile, RunConfig, RunSummary, dumps, load

ROOT = Path(__file__).resolve().parents[1]
PROFILE = str(shipped_profile("bert-tiny", "cpu"))
SHAPE = dict(devices_per_node=4, epochs=3, global_batch=64, samples=6400)
FLAGS = ["--devices-per-node", "4", "--epochs", "3", "--global-batch", "64", "--samples", "6400"]


def test_import_pipeplan_loads_no_torch_and_no_api_until_called():
    code = (
        "import sys, pipeplan\n"
        "heavy = {'torch', 'transformers', 'pipeplan.api'} & set(sys.modules)\n"
        "assert not heavy, heavy\n"
        "assert callable(pipeplan.preview) and 'pipeplan.api' in sys.modules\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert {"profile", "plan", "preview", "run", "export"} <= set(pipeplan.__all__)


def test_preview_and_plan_are_the_commands(tmp_path, capsys):
    preview = pipeplan.preview(profile=PROFILE, device_memory="16GiB", **SHAPE)
    assert (
        cli.main(["preview", "--profile", PROFILE, "--device-memory", "16GiB", *FLAGS, "--json"])
        == 0
    )
    assert dumps(preview) == capsys.readouterr().out
    assert preview.predicted_speedup > 1

    ours, theirs = tmp_path / "api.json", tmp_path / "cli.json"
    plan = pipeplan.plan(profile=PROFILE, out=ours, **SHAPE)
    assert cli.main(["plan", "--profile", PROFILE, *FLAGS, "--out", str(theirs)]) == 0
    assert ours.read_bytes() == theirs.read_bytes() == dumps(plan).encode()


def test_plan_stays_callable_beside_the_planner_module():
    import pipeplan.plan as planner  # binds the module as the package's attribute

    assert pipeplan.plan is planner and callable(planner.make_plan)
    assert pipeplan.plan(profile=PROFILE, **SHAPE).phases  # the API function answers


def test_profile_returns_the_profile_it_writes(tmp_path):
    out = tmp_path / "p.json"
    result = pipeplan.profile("bert-synth", out=out, micro_batch_sizes="1,2", warmup=0, repeats=1)
    assert isinstance(result, Profile) and len(result.layers) == 8
    assert out.read_text() == dumps(result)


UNGUARDED = """
import os, pipeplan
print("top level ran in", os.getpid(), flush=True)
pipeplan.profile("bert-synth", out="p.json", nproc=2, micro_batch_sizes="1,2", warmup=0,
                 repeats=1)
import multiprocessing
print("start method", multiprocessing.get_start_method(allow_none=True))
multiprocessing.set_start_method("spawn")
"""


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_profile_with_nproc_runs_from_a_script_without_a_main_guard(tmp_path):
    """Found by the sixtieth round: `pipeplan.profile(..., nproc=2)` in a plain script (no
    `if __name__ == "__main__":`) ran the script again in each link rank (multiprocessing's
    spawn), whose own `profile` call multiprocessing refused: 165 lines of tracebacks and
    "rank 1 died". The ranks import what they run, never the script: it runs once. Found by
    the sixty-fourth round: the ranks' start fixed the script's unset multiprocessing start
    method, and its own `set_start_method("spawn")` after the call raised. It is unset again."""
    (tmp_path / "nb.py").write_text(UNGUARDED)
    result = subprocess.run(
        [sys.executable, "nb.py"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=280,
    )
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    assert result.stdout.count("top level ran") == 1, result.stdout
    assert "start method None\n" in result.stdout
    assert json.loads((tmp_path / "p.json").read_text())["comm"]["nproc"] == 2


class _RaisingInt(int):
    """An int whose own conversion raises (what `int()` calls on a subclass)."""

    def __int__(self):
        raise RuntimeError("no")


@pytest.mark.parametrize(
    "call, options, message",
    [
        (pipeplan.preview, dict(stages=0), "--stages: Input should be greater than or equal to 1"),
        (pipeplan.preview, dict(inter_bw="fast"), "--inter-bw: "),
        (pipeplan.preview, dict(stagez=2), "no option 'stagez'"),
        # As on the command line, a flag that would be ignored beside another (eighth round).
        (
            pipeplan.preview,
            dict(freeze="none", alpha=0.2),
            "--alpha means nothing with --freeze none; it sets the α bound",
        ),
        (pipeplan.plan, dict(cache=False, cache_budget="1GB"), "means nothing with --no-cache"),
        # A bool is Python's 1 or 0, which pydantic took for a number: `devices_per_node=True,
        # epochs=True` previewed 1 device for 1 epoch (forty-sixth round). A switch takes one.
        (pipeplan.preview, dict(devices_per_node=True), "--devices-per-node: True is a switch's"),
        (pipeplan.preview, dict(epochs=True), "--epochs: True is a switch's value"),
        (pipeplan.preview, dict(alpha=False), "--alpha: False is a switch's value"),
        (pipeplan.plan, dict(device_memory=True), "--device-memory: True is a switch's value"),
        # The forty-ninth round: numpy's and torch's booleans were counts too, and a switch
        # took 0, "no" or numpy's False for False.
        (pipeplan.preview, dict(devices_per_node=np.bool_(True)), "--devices-per-node: True is"),
        (pipeplan.preview, dict(epochs=torch.tensor(True)), "--epochs: True is a switch's"),
        (pipeplan.preview, dict(epochs=torch.tensor(0.0, requires_grad=True)), "--epochs: expec"),
        (pipeplan.plan, dict(cache=0), "--cache: 0 is not True or False"),
        (pipeplan.plan, dict(cache="no"), "--cache: 'no' is not True or False"),
        (pipeplan.plan, dict(cache=np.int64(0)), "--cache: 0 is not True or False"),
        # The fiftieth round: int() and float() raised past every limit.
        (pipeplan.preview, dict(epochs=10**5000), "--epochs: an integer of about 5,000 digits"),
        (pipeplan.preview, dict(nodes=-(10**5000)), "--nodes: an integer of about 5,000 digits"),
        (pipeplan.preview, dict(epochs=Decimal("1e5000")), "--epochs: expected a whole number"),
        (pipeplan.plan, dict(device_memory=Decimal("1e5000")), "--device-memory: cannot read"),
        # pydantic took 2.0 for 2 where the command line refuses "2.0" (thirty-sixth session).
        (pipeplan.preview, dict(epochs=2.0), "--epochs: expected a whole number, not 2.0 (a"),
        (pipeplan.plan, dict(global_batch=8.0), "--global-batch: expected a whole number, not"),
        (pipeplan.preview, dict(micro_batches=np.float32(4)), "--micro-batches: expected a who"),
        # The fifty-fifth round: a list's items were not held to a count's rules, and an int
        # subclass whose own __int__ raises escaped as its error.
        (pipeplan.plan, dict(boundaries=[0, True, 10]), "--boundaries: True is a switch's"),
        (pipeplan.plan, dict(boundaries=(0, 5.0, 10)), "--boundaries: expected whole numbers"),
        (pipeplan.preview, dict(epochs=_RaisingInt(2)), "--epochs: _RaisingInt cannot be read"),
        # The fifty-sixth round: a list's items given as text or as an array skipped the
        # command line's reading, and a rate without a unit was bytes/s.
        (pipeplan.plan, dict(boundaries=["0", "+4", "8"]), "--boundaries: '0' in a list; give"),
        (pipeplan.plan, dict(boundaries=[0, b"4", 8]), "--boundaries: b'4' in a list; give"),
        (pipeplan.plan, dict(boundaries=np.array([0.0, 4.0, 10.0])), "--boundaries: expected who"),
        (pipeplan.plan, dict(boundaries=torch.tensor([0.0, 4.0, 10.0])), "--boundaries: expect"),
        (pipeplan.preview, dict(inter_bw=5), "--inter-bw: bandwidth '5' has no unit"),
        # The seventy-second round: a sequence for an option of one value was told "expected
        # whole numbers", a list option's words.
        (pipeplan.preview, dict(alpha=np.array([0.5])), "--alpha: array([0.5]) is a sequence;"),
        (pipeplan.preview, dict(epochs=(5.0,)), "--epochs: (5.0,) is a sequence; the option"),
        (pipeplan.plan, dict(inter_bw=torch.tensor([2.5])), "--inter-bw: tensor([2.5000]) is"),
        # The seventy-third round: a 0-d array of text skipped the checks typed text gets.
        (pipeplan.preview, dict(freeze=np.array(" auto")), "--freeze: ' auto' has space around"),
        # And `out` beside a value of the wrong type: a TypeError from pathlib.
        (pipeplan.plan, dict(cluster=5, out="o.json"), "--cluster: Input should be a valid str"),
    ],
)
def test_bad_options_raise_the_commands_one_line_error(call, options, message):
    with pytest.raises(PipeplanError) as info:
        call(profile=PROFILE, **options)
    assert message in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize(
    "call, given, said",
    [
        ("plan", {"out": 5}, "--out: 5 is not a path; give one"),
        ("plan", {"out": "a\tb.json"}, "--out: holds the control character U+0009"),
        ("plan", {"out": " "}, "--out: ' ' "),
        ("plan", {"out": "o\u202e.json"}, "--out: holds the invisible bidi"),
        ("plan", {"out": "d\0.json"}, "--out: d\\x00.json holds a NUL byte; no path does"),
        ("export", {"run_dir": None, "out": "x"}, "RUN_DIR: None is not a path; give one"),
        ("export", {"run_dir": "", "out": "x"}, "RUN_DIR is empty; give a value"),
        ("export", {"run_dir": "runs/r", "out": "x\ny"}, "--out: holds the control character"),
        ("export", {"run_dir": "runs/r", "out": 5}, "--out: 5 is not a path; give one"),
        ("run", {"runs_dir": "ap\nir"}, "--runs-dir: holds the control character U+000A"),
        ("run", {"runs_dir": ""}, "--runs-dir is empty; give a value"),
        ("run", {"runs_dir": " "}, "--runs-dir: ' ' "),
        ("run", {"runs_dir": 5}, "--runs-dir: 5 is not a path; give one"),
        (
            "export",
            {"run_dir": "runs/r", "out": "x", "checkpoint": 2},
            "--checkpoint: 2 is not a path; give one",
        ),
    ],
)
def test_path_arguments_are_checked_as_the_command_lines(tmp_path, monkeypatch, call, given, said):
    """Found by the forty-ninth round: `plan(out=…)` and `export(…)` took their paths
    unchecked: 5 or None was a TypeError from pathlib, a NUL a ValueError, "" exported ".",
    and a name with a tab, a newline or U+202E was written. Each is refused in one line,
    nothing written."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("executor.task.export_run", lambda *a, **k: pytest.fail("exported"))
    monkeypatch.setattr("executor.launch.start_run", lambda *a, **k: pytest.fail("started"))
    arguments = {"profile": PROFILE, "epochs": 1} if call == "plan" else {}
    with pytest.raises(PipeplanError) as refused:
        getattr(pipeplan, call)(**arguments, **given)
    assert said in str(refused.value) and "\n" not in str(refused.value), str(refused.value)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "call, given, said",
    [
        ("preview", {"profile": "a\0b"}, "--profile: a\\x00b holds a NUL byte"),
        ("plan", {"profile": "a\0b", "out": "o.json"}, "--profile: a\\x00b holds a NUL byte"),
        ("preview", {"cluster": "c\0"}, "--cluster: c\\x00 holds a NUL byte"),
        ("preview", {"freeze_schedule": "a\0.json"}, "--freeze-schedule: a\\x00.json holds"),
        ("profile", {"model": "vit-digits", "out": "p\0.json"}, "--out: p\\x00.json holds"),
        ("profile", {"model": "/tmp/a\0/config.json", "out": "p.json"}, "MODEL: /tmp/a\\x00"),
        ("preview", {"profile": "a\nb"}, "--profile: holds the control character U+000A"),
        ("plan", {"cluster": "a\nb", "out": "o.json"}, "--cluster: holds the control character"),
        ("profile", {"model": "vit-digits", "out": "/no/a\nb.json"}, "--out: holds the control"),
        ("preview", {"cluster": ""}, "--cluster is empty; give a value"),
        ("preview", {"cluster": " c.json"}, "--cluster: ' c.json' has space around it"),
        ("run", {"model": "vit-digits", "name": "r\tx"}, "--name: holds the control character"),
    ],
)
def test_text_options_are_checked_as_the_command_lines_tokens(
    tmp_path, monkeypatch, call, given, said
):
    """Found by the fifty-first round: the options of preview, plan and profile took a NUL
    (a ValueError from the file system) and a newline (a message of two lines) where the
    command line refuses both in one line; every text option is now checked as its token."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("executor.launch.start_run", lambda *a, **k: pytest.fail("started"))
    arguments = {"profile": PROFILE} if call in ("plan", "preview") else {}
    with pytest.raises(PipeplanError) as refused:
        getattr(pipeplan, call)(**{**arguments, **given})
    assert said in str(refused.value) and "\n" not in str(refused.value), str(refused.value)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "call, given, said",
    [
        ("preview", {"epochs": b" 2"}, "--epochs: b' 2' is bytes; give text (a str) or a number"),
        ("preview", {"global_batch": bytearray(b"0256")}, "--global-batch: bytearray(b'0256')"),
        ("preview", {"alpha": np.bytes_(b"+0.3")}, "--alpha: np.bytes_(b'+0.3') is bytes"),
        ("preview", {"devices": 4}, "no option 'devices'; the options are: alpha, boundaries, "),
        ("export", {"run_dir": "r", "out": "o", "force": True}, "no option 'force'; the options"),
        # The fifty-third round: a misspelt required keyword was Python's bare TypeError, and
        # a lone surrogate a UnicodeEncodeError from the file system.
        (
            "preview",
            {"profile": None, "profil": "x.json"},
            "preview(): missing a required argument: 'profile' (given profil=: did you mean "
            "profile=?)",
        ),
        ("export", {"run_dir": "r", "outt": "x"}, "export(): missing a required argument: 'out'"),
        ("profile", {"modl": "bert-synth"}, "(given modl=: did you mean model=?)"),
        ("preview", {"profile": "\ud800.json"}, "--profile: '\\ud800.json' is not text UTF-8"),
        ("export", {"run_dir": "\ud800", "out": "o"}, "RUN_DIR: '\\ud800' is not text UTF-8 can"),
        ("preview", {"cluster": "\ud800"}, "--cluster: '\\ud800' is not text UTF-8 can encode"),
    ],
)
def test_bytes_and_unknown_keywords_are_one_line(tmp_path, monkeypatch, call, given, said):
    """Found by the fifty-first round: bytes skipped the text checks (`epochs=b" 2"` and
    `b"2_0"`, 20, were taken where " 2" and "2_0" are refused), an unknown keyword of export
    was Python's TypeError, and the others listed fields (`device_memory_bytes`) where the
    documented keywords are the flags' names (`device_memory`)."""
    monkeypatch.chdir(tmp_path)
    arguments = {"profile": PROFILE} if call == "preview" else {}
    given = {k: v for k, v in {**arguments, **given}.items() if v is not None}
    with pytest.raises(PipeplanError) as refused:
        getattr(pipeplan, call)(**given)
    assert said in str(refused.value) and "\n" not in str(refused.value), str(refused.value)
    assert "_bytes" not in str(refused.value) and list(tmp_path.iterdir()) == []


class _OldSequence:
    """A sequence by `__getitem__` alone, as Python's iteration protocol takes one."""

    def __init__(self, items: list) -> None:
        self.items = items

    def __getitem__(self, i: int):
        return self.items[i]


@pytest.mark.parametrize(
    "call, given, said",
    [
        ("plan", {"boundaries": {0, 3.0, 6}}, "--boundaries: a set is not a list; give the"),
        ("plan", {"boundaries": frozenset(["0", "+3", "6"])}, "--boundaries: a frozenset is"),
        ("plan", {"boundaries": (x for x in [0, True, 6])}, "--boundaries: a generator is not"),
        ("plan", {"boundaries": {0: 1, 3.0: 1, 6: 1}.keys()}, "--boundaries: a dict_keys is"),
        ("plan", {"boundaries": range(0, 7, 3)}, "--boundaries: a range is not a list; give"),
        ("profile", {"micro_batch_sizes": deque([1, 2, True])}, "--micro-batch-sizes: a deque"),
        # The fifty-eighth round: a sequence of `__getitem__` alone is no Iterable.
        ("plan", {"boundaries": _OldSequence([0, True, 6])}, "--boundaries: a _OldSequence is"),
    ],
)
def test_a_list_option_takes_a_list_a_tuple_or_an_array(tmp_path, monkeypatch, call, given, said):
    """Found by the fifty-seventh round: a list option's items were checked only in a list or
    a tuple; pydantic took a set, a generator, a deque or a dict's keys unchecked (and a set in
    any order): `boundaries={0, 3.0, 6}` planned 0,3,6, a generator's True was layer 1, and
    `deque([1, 2, True])` said "micro-batch size 1 is given twice". Each is refused in one
    line that says to give a list."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("pipeplan.profiler.profile_to_file", lambda *a: pytest.fail("profiled"))
    arguments = {"profile": PROFILE} if call == "plan" else {"model": "bert-synth", "out": "p"}
    with pytest.raises(PipeplanError) as refused:
        getattr(pipeplan, call)(**arguments, **given)
    assert said in str(refused.value) and "\n" not in str(refused.value), str(refused.value)
    assert list(tmp_path.iterdir()) == []


def _held(value):
    """A 0-d numpy array of objects holding `value`."""
    array = np.empty((), dtype=object)
    array[()] = value
    return array


_HOLDS_ITSELF = _held(None)
_HOLDS_ITSELF[()] = _HOLDS_ITSELF
_BYTES = "is bytes; give text (a str) or a number"
_IN_A_LIST = 'in a list; give whole numbers, or the whole list as text ("0,5,10")'
_TIMEDELTA = "is of numpy's timedelta64 type; give"


@pytest.mark.parametrize(
    "call, given, said",
    [
        # Bytes, refused as bytes are typed (b"3" is), where "3_0", "+3" and " 3" were read.
        ("preview", {"epochs": np.array(b"3_0")}, f"--epochs: b'3_0' {_BYTES}"),
        ("preview", {"epochs": np.array(b"+3")}, f"--epochs: b'+3' {_BYTES}"),
        ("preview", {"epochs": np.array(b" 3")}, f"--epochs: b' 3' {_BYTES}"),
        ("preview", {"cluster": np.array(b"a\nb")}, f"--cluster: b'a\\nb' {_BYTES}"),
        ("preview", {"cluster": _held(b"ab\0")}, f"--cluster: b'ab\\x00' {_BYTES}"),
        ("preview", {"cluster": _held(bytearray(b"c"))}, f"--cluster: bytearray(b'c') {_BYTES}"),
        ("profile", {"model": np.array(b"bert-synth")}, f"MODEL: b'bert-synth' {_BYTES}"),
        ("plan", {"boundaries": [0, np.array(b"8")]}, f"--boundaries: b'8' {_IN_A_LIST}"),
        ("plan", {"boundaries": (0, np.bytes_(b"8"))}, f"--boundaries: b'8' {_IN_A_LIST}"),
        ("plan", {"out": np.array(b"o.json")}, "--out: b'o.json' is not a path; give one"),
        (
            "export",
            {"run_dir": np.array(b"r"), "out": "x"},
            "RUN_DIR: b'r' is not a path; give one",
        ),
        # Text, checked as typed text is.
        (
            "preview",
            {"cluster": _held("c\0.json")},
            "--cluster: c\\x00.json holds a NUL byte; no path does",
        ),
        (
            "preview",
            {"cluster": np.array(" c")},
            "--cluster: ' c' has space around it (a quoting mistake?); give 'c'",
        ),
        (
            "plan",
            {"out": np.array("a\nb.json")},
            "--out: holds the control character U+000A; names, paths and versions are printed on "
            "one line",
        ),
        ("plan", {"boundaries": np.array(["0", "8"])}, f"--boundaries: '0' {_IN_A_LIST}"),
        # What is no number or text: .item() read a timedelta64(2) as 2.
        (
            "preview",
            {"devices_per_node": np.timedelta64(2)},
            f"--devices-per-node: np.timedelta64(2) {_TIMEDELTA} a number or text",
        ),
        (
            "preview",
            {"epochs": np.array(3, dtype="m8")},
            f"--epochs: array(3, dtype=timedelta64) {_TIMEDELTA} a number or text",
        ),
        (
            "preview",
            {"epochs": _held(np.timedelta64(3))},
            f"--epochs: np.timedelta64(3) {_TIMEDELTA} a number or text",
        ),
        (
            "preview",
            {"epochs": np.datetime64(3, "D")},
            "--epochs: np.datetime64('1970-01-04') is of numpy's datetime64[D] type; give a "
            "number or text",
        ),
        (
            "preview",
            {"alpha": np.void(b"ab")},
            "--alpha: np.void(b'\\x61\\x62') is of numpy's void16 type; give a number or text",
        ),
        (
            "plan",
            {"cache": np.timedelta64(0)},
            f"--cache: np.timedelta64(0) {_TIMEDELTA} True or False",
        ),
        (
            "plan",
            {"boundaries": np.array([0, 8], "m8")},
            f"--boundaries: array([0, 8], dtype=timedelta64) {_TIMEDELTA} whole numbers",
        ),
        (
            "plan",
            {"boundaries": [0, np.timedelta64(8)]},
            f"--boundaries: np.timedelta64(8) {_TIMEDELTA} whole numbers",
        ),
        (
            "plan",
            {"out": np.datetime64(3, "D")},
            "--out: np.datetime64('1970-01-04') is of numpy's datetime64[D] type; give a path",
        ),
        (
            "preview",
            {"cluster": _held(["c.json"])},
            "--cluster: array(list(['c.json']), dtype=object) holds a list; give a number or text",
        ),
        (
            "preview",
            {"epochs": _held(None)},
            "--epochs: array(None, dtype=object) holds a NoneType; give a number or text",
        ),
        (
            "preview",
            {"epochs": _HOLDS_ITSELF},
            "--epochs: a ndarray that holds itself or arrays 8 deep; give a number or text",
        ),
        # The seventy-fifth round: an array's text over two lines; a masked (missing) value
        # read as the data under its mask.
        (
            "preview",
            {"epochs": np.array([[1], [2]])},
            "--epochs: array([[1], [2]]) is a sequence; the option takes one value (a number "
            "or text)",
        ),
        (
            "preview",
            {"epochs": torch.tensor([[1], [2]])},
            "--epochs: tensor([[1], [2]]) is a sequence; the option takes one value (a number "
            "or text)",
        ),
        (
            "preview",
            {"epochs": np.ma.array(3, mask=True)},
            "--epochs: masked_array(data=--, mask=True, fill_value=999999, dtype=int64) is "
            "masked; give a number or text",
        ),
        (
            "preview",
            {"freeze_schedule": [0, True]},
            "--freeze-schedule: True is a switch's value; give whole numbers",
        ),
        # The seventy-sixth round: a masked item of a list's array was shown as None.
        (
            "preview",
            {"freeze_schedule": np.ma.array([1, 2], mask=[0, 1])},
            "--freeze-schedule: masked_array(data=[1, --], mask=[False, True], "
            "fill_value=999999) has a masked item; give whole numbers",
        ),
        (
            "plan",
            {"boundaries": np.ma.array([0, 3, 6], mask=[0, 1, 0])},
            "--boundaries: masked_array(data=[0, --, 6], mask=[False, True, False], "
            "fill_value=999999) has a masked item; give whole numbers",
        ),
    ],
)
def test_a_value_held_in_a_0d_array_is_checked_as_the_value_typed(
    tmp_path, monkeypatch, call, given, said
):
    """Found by the seventy-fourth round: a 0-d numpy array (or a numpy scalar) was read out
    after the checks, so bytes reached pydantic's reading: `epochs=np.array(b"3_0")` was 30
    epochs where b"3" and "3_0" are refused, b"+3" and b" 3" were taken, `cluster=` bytes
    with a newline a two-line error and an object array's b"ab\\x00" a raw ValueError; and
    `devices_per_node=np.timedelta64(2)` was 2 devices. Each is now read out first and
    checked as the value it holds would be typed, or refused as no number or text, in one
    line naming the option; nothing is written."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("executor.task.export_run", lambda *a, **k: pytest.fail("exported"))
    monkeypatch.setattr("pipeplan.profiler.profile_to_file", lambda *a: pytest.fail("profiled"))
    arguments = {
        "plan": {"profile": PROFILE, "epochs": 1},
        "preview": {"profile": PROFILE},
        "profile": {"out": "p.json"},
    }.get(call, {})
    with pytest.raises(PipeplanError) as refused:
        getattr(pipeplan, call)(**{**arguments, **given})
    assert str(refused.value) == said
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "typed, held",
    [
        ({"boundaries": "0,3,6"}, {"boundaries": np.array("0,3,6")}),
        ({"boundaries": "0,3,6"}, {"boundaries": _held("0,3,6")}),
        ({"boundaries": [0, 3, 6]}, {"boundaries": np.array([0, 3, 6])}),
        ({"boundaries": [0, 3, 6]}, {"boundaries": [np.array(0), _held(np.int64(3)), 6]}),
        ({"epochs": 3}, {"epochs": np.array(3)}),
        ({"epochs": 3}, {"epochs": _held(np.int64(3))}),
        ({"profile": PROFILE}, {"profile": np.array(PROFILE)}),
        ({"profile": PROFILE}, {"profile": _held(Path(PROFILE))}),
        ({"out": "p.json"}, {"out": np.array("p.json")}),
        ({"out": "p.json"}, {"out": np.str_("p.json")}),
        # The seventy-fifth round: numpy's long double was "holds itself 8 deep"; a freeze
        # schedule given as a list "is a sequence" (its text is a list: "0,0,3").
        ({"alpha": 0.5}, {"alpha": np.longdouble(0.5)}),
        ({"freeze_schedule": "0,1,2", "epochs": 3}, {"freeze_schedule": [0, 1, 2], "epochs": 3}),
        (
            {"freeze_schedule": "0,1,2", "epochs": 3},
            {"freeze_schedule": np.array([0, 1, 2]), "epochs": 3},
        ),
    ],
)
def test_a_value_held_in_a_0d_array_is_taken_as_the_value_typed(tmp_path, monkeypatch, typed, held):
    """Found by the seventy-fourth round: `boundaries=np.array("0,8")` was "a ndarray is not a
    list" where "0,8" and np.str_("0,8") are taken, and `plan(out=np.array("p.json"))` "not a
    path" where np.str_("p.json") is taken. A value held in a 0-d array is the value typed."""
    monkeypatch.chdir(tmp_path)
    plans = []
    for given in (typed, held):
        options = {"profile": PROFILE, "devices_per_node": 2, **given}
        plans.append(dumps(pipeplan.plan(**options)))
        if "out" in given:
            assert (tmp_path / "p.json").read_text() == plans[-1]
            (tmp_path / "p.json").unlink()
    assert plans[0] == plans[1]


@pytest.mark.parametrize(
    "variable, value, said",
    [
        ("TRANSFORMERS_VERBOSITY", "bogus", "the environment: TRANSFORMERS_VERBOSITY='bogus'"),
        ("OMP_NUM_THREADS", "0", "the environment: libgomp: Invalid value for environment"),
        ("LOGLEVEL", "loud", "the environment: LOGLEVEL='loud' is no level it takes"),
    ],
)
def test_a_call_checks_the_environment_as_the_command_does(monkeypatch, variable, value, said):
    """Found by the seventy-fifth round: the command refuses a variable torch's OpenMP or a
    library cannot read before any command, in one line; a call printed the library's own
    line and went on (a run's ranks wrote it into their logs)."""
    monkeypatch.setenv(variable, value)
    with pytest.raises(PipeplanError) as refused:
        pipeplan.preview(profile=PROFILE)
    assert str(refused.value).startswith(said), refused.value


def test_a_call_removes_what_its_datas_children_reported_as_it_ends():
    """Found by the seventy-sixth round: the folder in TMPDIR where the children a call's
    data code forked report their imports (`executor.childimports`) stayed while the caller
    lived. Nothing reads it after the call (the next loads the data afresh): it is removed
    as any call ends, with what it held."""
    from executor import childimports

    folder = childimports._made()
    childimports._write(folder, b'["rt_call", null, "/x/rt_call.py"]\n')
    try:
        pipeplan.preview(profile=PROFILE)
        assert not os.path.exists(folder) and childimports.found() == {}
    finally:
        childimports.forget()


class _LoudFloat(float):
    """A float whose own text and conversion raise."""

    def __repr__(self):
        raise RuntimeError("repr")

    __str__ = __float__ = __repr__


class _LoudText(str):
    """Text whose own comparison and strip raise."""

    def __eq__(self, other):
        raise RuntimeError("eq")

    __hash__ = str.__hash__

    def strip(self, *chars):
        raise RuntimeError("strip")


class _LoudList(list):
    def __iter__(self):
        raise RuntimeError("iter")


def test_a_subclass_whose_own_methods_raise_is_read_as_its_value():
    """Found by the fifty-seventh round: `device_memory=` a float subclass whose `__str__`
    raises, and `inter_bw=` or `cluster=` a str subclass whose `__eq__` or `strip` raises,
    escaped as that RuntimeError. Each is read as the float or the text it holds; what cannot
    be read at all (a list whose own `__iter__` raises) is one line naming the option."""
    given = dict(device_memory=16 * 2**30, inter_bw="5GB/s", **SHAPE)
    expected = dumps(pipeplan.preview(profile=PROFILE, **given))
    loud = dict(given, device_memory=_LoudFloat(16 * 2**30), inter_bw=_LoudText("5GB/s"))
    assert dumps(pipeplan.preview(profile=_LoudText(PROFILE), **loud)) == expected
    with pytest.raises(PipeplanError, match=r"^nowhere\.json: no such file$"):
        pipeplan.preview(profile=PROFILE, cluster=_LoudText("nowhere.json"))
    with pytest.raises(PipeplanError) as refused:
        pipeplan.plan(profile=PROFILE, boundaries=_LoudList([0, 6]))
    assert str(refused.value) == "--boundaries: _LoudList cannot be read (RuntimeError: iter)"


def test_run_builds_the_run_config_as_the_command_line_does(tmp_path, monkeypatch):
    seen = {}

    def start_run(cfg, runs_dir, prepare_only=False):  # no processes: what would run
        seen.update(cfg=cfg, runs_dir=runs_dir)
        return Path(runs_dir) / cfg.name, RunSummary(
            name=cfg.name, total_s=0.0, steps=0, final_eval_accuracy=None, phases=[]
        )

    monkeypatch.setattr("executor.launch.start_run", start_run)
    summary = pipeplan.run(
        runs_dir=tmp_path, model="vit-digits", epochs=2, device_memory="100MiB", name="nb"
    )
    assert summary.name == "nb" and seen["runs_dir"] == str(tmp_path)
    expected = RunConfig(model="vit-digits", epochs=2, device_memory_bytes=100 << 20, name="nb")
    assert seen["cfg"] == expected
    assert pipeplan.run.__module__ == "pipeplan.api"


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_run_resumes_a_run_as_the_command_line_does(finished_run, tmp_path):
    """Found by the forty-seventh round: the API's `run` had no resume (`resume=` was "no
    option 'resume'"), so a notebook could not continue a run. `run(resume=RUN, epochs=E)` is
    `pipeplan run --resume RUN --epochs E`: one more epoch trained from the checkpoint, its
    summary returned; an option a resume does not take is refused as on the command line.
    Found by the sixty-fourth round: every `run` advanced the caller's `random` numbers (torch's
    agent draws its rendezvous delay there): a seeded program's next draw differed. Kept.
    The environment is as it was before the call (`test_a_call_leaves_the_environment_…`)."""
    import random

    from test_hostile import copy_run

    run = copy_run(finished_run, tmp_path)
    with pytest.raises(PipeplanError, match="--lr"):
        pipeplan.run(resume=run, epochs=2, lr=0.5)
    random.seed(64)
    expected = random.random()
    random.seed(64)
    environment = dict(os.environ)
    summary = pipeplan.run(resume=run, epochs=2)
    assert random.random() == expected
    assert dict(os.environ) == environment
    assert summary.name == "r" and summary.steps == 4  # 2 steps an epoch, 2 epochs
    assert json.loads((run / "run.json").read_text())["epochs"] == 2
    # The fifty-eighth round: the claim outlived the call (the process's life): another
    # thread's call was refused the run long after it returned. It goes as the call ends.
    from pipeplan.fileio import held_directories

    assert run.resolve() not in held_directories()


def test_a_call_leaves_the_environment_as_it_was(tmp_path, monkeypatch):
    """Found by the sixty-fifth round: `pipeplan.run()` left TORCHINDUCTOR_CACHE_DIR set in
    the caller's environment: torch's `cache_dir_utils.cache_dir` sets it as the call's
    imports ask it for its folder (once a process, so a real run in this test process, whose
    torch asked already, shows nothing). The call's end, a failure's too, puts back what was
    set, changed or removed meanwhile."""
    from torch._inductor.runtime import cache_dir_utils

    import executor.launch

    def trains(cfg, run_dir, resume=False):
        cache_dir_utils.cache_dir()  # torch's own: sets TORCHINDUCTOR_CACHE_DIR
        os.environ["PIPEPLAN_TEST_KEPT"] = "the call's"
        raise PipeplanError("rank 0 failed")

    monkeypatch.setattr(executor.launch, "run_local", trains)
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    monkeypatch.setenv("PIPEPLAN_TEST_KEPT", "the caller's")
    environment = dict(os.environ)
    with pytest.raises(PipeplanError, match="rank 0 failed"):
        pipeplan.run(runs_dir=tmp_path / "runs", name="s", model="vit-digits", nproc=1, epochs=1)
    assert dict(os.environ) == environment


@pytest.mark.parametrize(
    "call, fails",
    [("run", False), ("run", True), ("preview", False)],
    ids=["run returns", "run fails", "preview warns"],
)
@pytest.mark.parametrize("yours", [False, True], ids=["none set up", "yours set up"])
def test_a_call_leaves_logging_as_it_was(tmp_path, monkeypatch, capsys, call, fails, yours):
    """Found by the sixty-sixth round: the first `pipeplan.run()` set the `pipeplan` logger up
    to show its epoch lines (pipeplan's handler, INFO) and left it so, and a later
    `preview`'s warning changed format. The call shows its lines through it, or through the
    caller's own set-up, and its end, a failure's too, leaves the logger's handlers, level
    and propagation as they were. Every call does, not `run` alone: the sixty-eighth round's
    `preview` said its warning through Python's last-resort handler, a bare line without
    `pipeplan: WARNING:`."""
    import logging

    import executor.launch

    logger = logging.getLogger("pipeplan")
    # Other tests' commands, run in this process, set it up; this call's caller has not.
    saved = logger.handlers[:], logger.level, logger.propagate
    mine = logging.StreamHandler(sys.stderr)
    mine.setFormatter(logging.Formatter("mine: %(message)s"))
    logger.handlers, logger.propagate = [mine] if yours else [], not yours
    logger.setLevel(logging.INFO if yours else logging.NOTSET)
    before = logger.handlers[:], logger.level, logger.propagate

    def start_run(cfg, runs_dir, prepare_only=False):  # no processes: its epoch line
        logging.getLogger("pipeplan.run").info("epoch 1/1")
        if fails:
            raise PipeplanError("rank 0 failed")
        return Path(runs_dir) / cfg.name, RunSummary(
            name=cfg.name, total_s=0.0, steps=0, final_eval_accuracy=None, phases=[]
        )

    monkeypatch.setattr(executor.launch, "start_run", start_run)
    # A profile that measured no links: a 2-device preview warns it prices them on defaults.
    unmeasured = tmp_path / "unmeasured.json"
    unmeasured.write_text(dumps(load(Profile, PROFILE).model_copy(update={"comm": None})))
    try:
        with contextlib.suppress(PipeplanError):
            if call == "run":
                pipeplan.run(
                    runs_dir=tmp_path, model="vit-digits", epochs=1, device_memory="100MiB"
                )
            else:
                pipeplan.preview(profile=unmeasured, devices_per_node=2, epochs=3)
        assert (logger.handlers, logger.level, logger.propagate) == before
    finally:
        logger.handlers, logger.propagate = saved[0], saved[2]
        logger.setLevel(saved[1])
    said = "epoch 1/1" if call == "run" else f"{unmeasured} measured no links"
    said = (
        f"mine: {said}" if yours else f"pipeplan: {'INFO' if call == 'run' else 'WARNING'}: {said}"
    )
    assert any(line.startswith(said) for line in capsys.readouterr().err.splitlines())


@pytest.mark.parametrize(
    "given, said",
    [
        ({"resume": "runs/r", "runs_dir": "elsewhere"}, "--runs-dir means nothing with --resume"),
        ({"resume": ""}, "--resume is empty; give a value"),
        ({"resume": " runs/r"}, "--resume: ' runs/r' has space around it (a quoting mistake?)"),
        ({"resume": "runs/r\0x"}, "holds a NUL byte; no path does"),
        ({"resume": "x" * 10**6}, "is 1,000,000 characters long; no path does"),
        ({"resume": True}, "--resume: True is not a path; give one"),
        ({"resume": 5}, "--resume: 5 is not a path; give one"),
    ],
)
def test_runs_resume_is_checked_as_the_command_lines(tmp_path, monkeypatch, given, said):
    """Found by the forty-eighth round: `run(resume=…)` skipped the command line's checks:
    `runs_dir=` beside it was ignored and the resume trained, "" resumed ".", a NUL was a
    ValueError traceback, a 10^7-character value a message as long, True "True: no such run
    directory". Each is refused in one line, before anything runs."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("executor.launch.resume_run", lambda *a: pytest.fail("resumed"))
    with pytest.raises(PipeplanError) as refused:
        pipeplan.run(**given)
    assert said in str(refused.value) and len(str(refused.value)) < 1000, str(refused.value)


def test_a_ctrl_c_in_a_call_raises_interrupted(monkeypatch):
    """Found by the forty-ninth round: a Ctrl-C in a call's first seconds (its imports) was a
    bare KeyboardInterrupt from importlib, pydantic or torch, and from `preview` and
    `profile` at any time. Every call raises `Interrupted`, as the command line says
    `pipeplan: interrupted`."""
    from pipeplan.errors import Interrupted

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("pipeplan.plan.make_preview", interrupted)
    with pytest.raises(Interrupted):
        pipeplan.preview(profile=PROFILE)


def test_what_the_file_system_refuses_is_the_command_lines_line(tmp_path):
    """Found by the forty-ninth round: `profile("x" * 256, out=…)` raised a bare OSError
    (File name too long), and `preview(profile="x" * 10**6)` a message of a million
    characters. A call raises the command line's one bounded line."""
    with pytest.raises(PipeplanError) as refused:
        pipeplan.profile("x" * 256, out=tmp_path / "p.json")
    assert str(refused.value).endswith(": File name too long"), str(refused.value)
    with pytest.raises(PipeplanError) as refused:
        pipeplan.preview(profile="x" * 10**6)
    assert len(str(refused.value)) < 1000 and "characters)" in str(refused.value)


STOPS_ITSELF = """
import os, signal, time

def raises(seed=0):
    raise KeyboardInterrupt("in load")

def signalled(seed=0):
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(5)
"""


@pytest.mark.parametrize("function", ["raises", "signalled"])
def test_a_data_functions_own_keyboard_interrupt_is_its_failure_a_sigint_an_interruption(
    tmp_path, monkeypatch, function
):
    """Found by the fifty-eighth round: in an API call a data function's own `raise
    KeyboardInterrupt("in load")` raised an empty `Interrupted`, where the command line names
    it ("… raised KeyboardInterrupt: in load"): with Python's own SIGINT handler, every one
    was taken for Ctrl-C. A SIGINT is told apart: it alone is an interruption."""
    from pipeplan.errors import Interrupted

    (tmp_path / "rt58_stops.py").write_text(STOPS_ITSELF)
    monkeypatch.syspath_prepend(str(tmp_path))
    options = dict(model="vit-digits", data=f"rt58_stops:{function}", nproc=1, name="s")
    if function == "raises":
        with pytest.raises(PipeplanError, match="raised KeyboardInterrupt: in load"):
            pipeplan.run(runs_dir=tmp_path / "runs", **options)
    else:
        with pytest.raises(Interrupted):
            pipeplan.run(runs_dir=tmp_path / "runs", **options)
    assert not (tmp_path / "runs" / "s").exists()


def test_a_stop_in_a_call_says_what_stopped_it():
    """Found by the fifty-eighth round: SIGTERM during `pipeplan.run` raised `Stopped` whose
    message was "15", where the command line says "stopped by SIGTERM"."""
    import signal

    from pipeplan.errors import Stopped

    assert str(Stopped(signal.SIGTERM)) == "stopped by SIGTERM"
    assert str(Stopped(signal.SIGHUP)) == "stopped by SIGHUP"


STOPPED_CALL = """
import json, os, signal, sys
from pathlib import Path

import executor.launch, pipeplan, pipeplan.models, pipeplan.spawn
from pipeplan.errors import Stopped

case, signum = sys.argv[1], getattr(signal, sys.argv[2])
mine = lambda signum, frame: print("the user's handler ran", flush=True)
signal.signal(signal.SIGUSR1, mine)  # the user's own handler: back after the call
signal.signal(signal.SIGUSR2, signal.SIG_IGN)  # ignored by the user: ignored in the call too
run = lambda: pipeplan.run(
    runs_dir="runs", name="s", model="vit-digits", nproc=1, epochs=1, max_steps_per_epoch=2)
calls = {
    "run": (executor.launch, "run_local", run),  # prepared, before its ranks start
    "prepare": (executor.launch, "check_run_location", run),  # its folder claimed
    "export": (pipeplan.models, "_drop_ids_outside_vocabulary", lambda: pipeplan.export(
        sys.argv[3], out="ex/m")),
    "profile": (pipeplan.spawn, "_check_stopped", lambda: pipeplan.profile(
        "vit-digits", out="p.json", nproc=2, micro_batch_sizes="1", repeats=1, warmup=0)),
}
module, name, call = calls[case]
real = getattr(module, name)

def stopped(*args, **kwargs):  # the stop, as the call has made its files
    setattr(module, name, real)
    signal.raise_signal(signal.SIGUSR2)
    os.kill(os.getpid(), signum)
    return real(*args, **kwargs)

setattr(module, name, stopped)
try:
    call()
    said = "completed"
except Stopped as exc:
    said = str(exc)
# torch's own cache folder, which its first `import torch._dynamo` in a process makes in
# TMPDIR unless TORCHINDUCTOR_CACHE_DIR names one: torch's, not the call's to undo.
left = sorted(
    str(p) for where in (".", os.environ["TMPDIR"]) for p in Path(where).rglob("*")
    if not any(part.startswith("torchinductor_") for part in p.parts)
)
again = call() is not None
handlers = [signal.getsignal(signal.SIGUSR1) is mine,
            signal.getsignal(signal.SIGUSR2) == signal.SIG_IGN]
print(json.dumps({"said": said, "left": left, "again": again, "handlers": handlers}))
"""


@pytest.mark.multiprocess
@pytest.mark.timeout(400)
@pytest.mark.parametrize(
    "case, signame",
    [
        ("run", "SIGTERM"),
        ("export", "SIGHUP"),
        # In `-m long`, for the default run's 15 minutes: the same hold, other calls.
        pytest.param("prepare", "SIGUSR1", marks=pytest.mark.long),
        pytest.param("profile", "SIGTERM", marks=pytest.mark.long),
    ],
)
def test_a_stop_signal_in_a_call_raises_stopped_and_undoes_it(
    finished_run, tmp_path, case, signame
):
    """Found by the sixty-first round: SIGTERM or SIGHUP during `run()` before its ranks
    started, `export()` or `profile(nproc=2)` took the default action: the user's program
    died at once, leaving the run directory's `.lock` and staged run.json (the same run then
    refused), the export's staging folder, the ranks' scratch folders in TMPDIR. Each raises
    `Stopped` as the command line says `pipeplan: stopped by SIGTERM`: nothing is left, the
    same call then works, and the user's handlers (their own, and SIG_IGN, which stays
    ignored during the call) are back."""
    (tmp_path / "stopped.py").write_text(STOPPED_CALL)
    work, temp = tmp_path / "work", tmp_path / "tmp"
    work.mkdir()
    temp.mkdir()
    result = subprocess.run(
        [sys.executable, tmp_path / "stopped.py", case, signame, str(finished_run)],
        capture_output=True,
        text=True,
        cwd=work,
        env={**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(temp)},
        timeout=380,
    )
    assert result.returncode == 0, (result.returncode, result.stderr[-3000:])
    seen = json.loads(result.stdout.splitlines()[-1])
    assert seen["said"] == f"stopped by {signame}", seen
    assert seen["left"] == [] and seen["again"] and seen["handlers"] == [True, True], seen
    assert "the user's handler ran" not in result.stdout


STOPPED_IMPORTING = """
import json, os, signal, sys, time

import pipeplan, pipeplan.plan
from pipeplan.errors import Stopped

open("rt61_slow.py", "w").write(
    "import os, signal, time\\n"
    "os.kill(os.getpid(), signal.SIGTERM)\\n"
    "time.sleep(0.3)\\n"
    "WHOLE = True\\n"
)
sys.path.insert(0, ".")

def preview(*args, **kwargs):  # the call imports a module as the stop comes
    import rt61_slow
    time.sleep(5)  # where the held stop lands once the import is done

pipeplan.plan.make_preview = preview
try:
    pipeplan.preview(profile=sys.argv[1])
    said = "completed"
except Stopped as exc:
    said = str(exc)
print(json.dumps({"said": said, "whole": getattr(sys.modules.get("rt61_slow"), "WHOLE", False)}))
"""


def test_a_stop_signal_as_a_call_imports_is_raised_once_the_import_is_done(tmp_path):
    """Found as the sixty-first round's R1 was mended: SIGTERM that lands in a call's imports
    (torch's, seconds long) raised there left torch half-imported, and every later call in
    the process failed ("Only a single TORCH_LIBRARY can be used …"). As on the command line
    (`cli._deferred`), the stop is held until the import is done, then raised."""
    (tmp_path / "importing.py").write_text(STOPPED_IMPORTING)
    result = subprocess.run(
        [sys.executable, tmp_path / "importing.py", PROFILE],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=120,
    )
    assert result.returncode == 0, (result.returncode, result.stderr[-3000:])
    assert json.loads(result.stdout.splitlines()[-1]) == {
        "said": "stopped by SIGTERM",
        "whole": True,
    }


@pytest.mark.parametrize("name, finalizer", [("TERM", "__del__"), ("INT", "weakref.finalize")])
def test_a_stop_that_lands_in_a_finalizer_still_stops_the_call(
    tmp_path, monkeypatch, name, finalizer
):
    """Found by the sixty-second round: a SIGTERM (raised as `Stopped`) or Ctrl-C that landed
    as Python ran a finalizer (a data set's `__del__`, a `weakref.finalize` callback) was
    dropped there ("Exception ignored in …", pipeplan's traceback blamed on the data), and
    the call ran to its end and returned. The stop is delivered again once the finalizer is
    done, as the command line's (`calls.dropped_stops_redelivered`): the call raises it,
    nothing written; the program's own `sys.unraisablehook` takes any other exception
    dropped meanwhile, and is back after the call."""
    import signal
    import time
    import weakref

    from pipeplan.errors import Interrupted, Stopped

    signum = getattr(signal, f"SIG{name}")
    handler = signal.getsignal(signum)
    dropped = []
    mine = dropped.append  # the program's own hook
    monkeypatch.setattr(sys, "unraisablehook", mine)

    def boom():
        raise ValueError("boom in a finalizer")

    def stop():
        os.kill(os.getpid(), signum)
        for _ in range(10**6):  # the handler runs here, inside the finalizer
            pass

    class Collected:
        pass

    def planned(*args, **kwargs):  # the user's objects collected as the call works
        for call in (boom, stop):
            if finalizer == "__del__":
                type("Collected", (), {"__del__": lambda self, call=call: call()})()
            else:
                weakref.finalize(Collected(), call)
        time.sleep(3)  # where the call went on
        raise AssertionError("not stopped")

    monkeypatch.setattr("pipeplan.plan.make_plan", planned)
    start = time.monotonic()
    with pytest.raises(Stopped if name == "TERM" else Interrupted):
        pipeplan.plan(profile=PROFILE, out=tmp_path / "plan.json", **SHAPE)
    assert time.monotonic() - start < 3
    assert [str(u.exc_value) for u in dropped] == ["boom in a finalizer"]
    assert sys.unraisablehook == mine and signal.getsignal(signum) is handler
    assert list(tmp_path.iterdir()) == []


def test_a_data_module_edited_between_calls_is_imported_again(tmp_path, monkeypatch):
    """Found by the fifty-eighth round: the API imported a `--data module:function` module
    once a process, so a loader fixed after a failure still failed with the old error, and
    one edited between runs ran old in the launcher and new in the ranks ("a data function
    must return the same data in every process"). A call reads the module, and the user's
    modules it imports, as they are now; unedited, they are not imported again."""
    import os

    (tmp_path / "rt58_helper.py").write_text("WORD = 'first'\n")
    loader = "import rt58_helper\n\ndef load(seed=0):\n    raise ValueError(rt58_helper.WORD{})\n"
    (tmp_path / "rt58_edited.py").write_text(loader.format(""))
    monkeypatch.syspath_prepend(str(tmp_path))
    options = dict(model="vit-digits", data="rt58_edited:load", nproc=1, name="e")

    def said() -> str:
        with pytest.raises(PipeplanError) as refused:
            pipeplan.run(runs_dir=tmp_path / "runs", **options)
        return str(refused.value).rpartition(": ")[2]

    def edit(name: str, text: str) -> None:
        (tmp_path / name).write_text(text)
        stat = (tmp_path / name).stat()  # a later mtime, however fast the edit
        os.utime(tmp_path / name, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))

    assert said() == "first"
    module = sys.modules["rt58_edited"]
    assert said() == "first" and sys.modules["rt58_edited"] is module  # unedited: kept
    edit("rt58_edited.py", loader.format(" + ' fixed'"))
    assert said() == "first fixed"
    edit("rt58_helper.py", "WORD = 'second'\n")
    assert said() == "second fixed"


@pytest.mark.parametrize("form", ["helper imported in load", "imported first", "file.py"])
def test_a_data_helper_edited_between_calls_is_imported_again(tmp_path, monkeypatch, form):
    """Found by the fifty-ninth round: only the modules the data module's own import brought
    in were watched, so a helper imported inside `load`, a data module the user's program had
    imported before the call, and a `file.py:load`'s helper ran stale after an edit (the
    launcher old, the ranks new). Every module of the user's loaded with the data is."""
    import importlib
    import os

    (tmp_path / "rt59_helper.py").write_text("WORD = 'first'\n")
    loader = "def load(seed=0):\n    import rt59_helper\n    raise ValueError(rt59_helper.WORD)\n"
    name = f"rt59_{abs(hash(form)) % 10**6}"
    (tmp_path / f"{name}.py").write_text(loader)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    sys.modules.pop("rt59_helper", None)
    data = f"{tmp_path / name}.py:load" if form == "file.py" else f"{name}:load"
    if form == "imported first":
        importlib.import_module(name)
    options = dict(model="vit-digits", data=data, nproc=1, name="e")

    def said() -> str:
        with pytest.raises(PipeplanError) as refused:
            pipeplan.run(runs_dir=tmp_path / "runs", **options)
        return str(refused.value).rpartition(": ")[2]

    assert said() == "first"
    (tmp_path / "rt59_helper.py").write_text("WORD = 'second'\n")
    stat = (tmp_path / "rt59_helper.py").stat()  # a later mtime, however fast the edit
    os.utime(tmp_path / "rt59_helper.py", ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    assert said() == "second"


@pytest.mark.parametrize("link", ["a linked file", "a linked package folder"])
def test_a_data_helper_linked_from_elsewhere_edited_between_calls_is_imported_again(
    tmp_path, monkeypatch, link
):
    """Found by the sixty-eighth round: a helper in the data's folder that is a link to a file
    (or a package folder) kept elsewhere was taken for someone else's module, by where it
    resolves, and an edit of it between two calls was not imported again (the launcher old,
    the ranks new). Where it was imported from, the data's folder, makes it the user's."""
    import os

    data, shared = tmp_path / "data", tmp_path / "shared"
    data.mkdir()
    (shared / "pkg").mkdir(parents=True)
    (shared / "pkg" / "__init__.py").write_text("")
    target = shared / "pkg" / "helper.py" if "package" in link else shared / "helper.py"
    target.write_text("WORD = 'first'\n")
    if "package" in link:
        (data / "rt68_lib").symlink_to(shared / "pkg")
        module = "rt68_lib.helper"
    else:
        (data / "rt68_helper.py").symlink_to(target)
        module = "rt68_helper"
    loader = f"def load(seed=0):\n    import {module} as h\n    raise ValueError(h.WORD)\n"
    name = f"rt68_linked_{abs(hash(link)) % 10**6}"
    (data / f"{name}.py").write_text(loader)
    monkeypatch.syspath_prepend(str(data))
    monkeypatch.chdir(tmp_path)
    for gone in ("rt68_helper", "rt68_lib", "rt68_lib.helper"):
        monkeypatch.delitem(sys.modules, gone, raising=False)
    options = dict(model="vit-digits", data=f"{name}:load", nproc=1, name="e")

    def said() -> str:
        with pytest.raises(PipeplanError) as refused:
            pipeplan.run(runs_dir=tmp_path / "runs", **options)
        return str(refused.value).rpartition(": ")[2]

    assert said() == "first"
    kept = sys.modules[module]
    assert said() == "first" and sys.modules[module] is kept  # unedited: not imported again
    target.write_text("WORD = 'second'\n")
    stat = target.stat()  # a later mtime, however fast the edit
    os.utime(target, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    assert said() == "second"


def test_modules_of_unreadable_file_names_leave_the_scan_of_the_users_modules_alone(
    tmp_path, monkeypatch
):
    """Found by the sixty-eighth round: a module in sys.modules whose `__file__` holds a NUL
    gave a traceback of the scan for the user's modules (exit 1), and one whose name is too
    long for the system (a part of 300 characters) refused the run naming that file, though
    no flag names it. Neither is a file of the user's: the data's own error is the line."""
    loader = (
        "import sys, types\n"
        "def load(seed=0):\n"
        "    for name, file in [('rt68_nul', '/tmp/we\\x00ird.py'),\n"
        "                       ('rt68_nul_dir', '/tmp/d\\x00x/weird.py'),\n"
        "                       ('rt68_long', __file__[:-3] + 'x' * 300 + '.py')]:\n"
        "        module = types.ModuleType(name)\n"
        "        module.__file__ = file\n"
        "        sys.modules[name] = module\n"
        "    raise ValueError('loaded')\n"
    )
    (tmp_path / "rt68_odd.py").write_text(loader)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    for name in ("rt68_nul", "rt68_nul_dir", "rt68_long"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    for _ in range(2):  # the second call scans them as the record of the first
        with pytest.raises(PipeplanError) as refused:
            pipeplan.run(runs_dir=tmp_path / "runs", model="vit-digits", data="rt68_odd:load")
        assert str(refused.value) == "data 'rt68_odd:load' raised ValueError: loaded"
    for name in ("rt68_nul", "rt68_nul_dir", "rt68_long"):
        sys.modules.pop(name, None)


@pytest.mark.parametrize("form", ["imported as items are read", "a sourceless .pyc"])
def test_a_lazy_or_sourceless_data_helper_edited_between_calls_is_imported_again(
    tmp_path, monkeypatch, form
):
    """Found by the sixtieth round: a helper first imported as items are read (after `load`
    returned, when the modules loaded with the data were recorded) and a helper that exists
    only as a .pyc ran stale after an edit: both calls failed with the helper's old error."""
    import os
    import py_compile

    helper, name = f"rt60_helper_{form[0]}", f"rt60_data_{form[0]}"
    lazy = form.startswith("imported")

    def write_helper(word: str) -> None:
        source = tmp_path / f"{helper}.py"
        source.write_text(f"WORD = {word!r}\n")
        if not lazy:  # the .pyc alone, where a sourceless import finds it
            py_compile.compile(str(source), cfile=str(tmp_path / f"{helper}.pyc"))
            source.unlink()
        made = tmp_path / (f"{helper}.py" if lazy else f"{helper}.pyc")
        stat = made.stat()  # a later mtime, however fast the edit
        os.utime(made, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))

    write_helper("first")
    reads = (
        "    def __getitem__(self, i):\n        import {0}\n        raise ValueError({0}.WORD)\n"
    )
    (tmp_path / f"{name}.py").write_text(
        ("" if lazy else f"import {helper}\n")
        + "from executor.data import TaskData\n\nclass Items:\n"
        + "    def __len__(self):\n        return 8\n"
        + (
            reads.format(helper)
            if lazy
            else f"    def __getitem__(self, i):\n        raise ValueError({helper}.WORD)\n"
        )
        + "\ndef load(seed=0):\n    return TaskData('x', Items(), Items(), num_labels=2)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    options = dict(model="vit-digits", data=f"{name}:load", nproc=1, name="e")

    def said() -> str:
        with pytest.raises(PipeplanError) as refused:
            pipeplan.run(runs_dir=tmp_path / "runs", **options)
        return str(refused.value)

    assert "first" in said()
    write_helper("second")
    assert "second" in said()


class _LoudPath(type(Path())):
    def __str__(self) -> str:
        raise RuntimeError("str")


class _LoudRepr:
    def __repr__(self) -> str:
        raise RuntimeError("repr")


@pytest.mark.parametrize("value", [_LoudPath("runs/r"), _LoudRepr()], ids=["path", "object"])
def test_a_path_argument_whose_own_methods_raise_is_one_line(tmp_path, value):
    """Found by the fifty-eighth round: `out=`, `resume=`, `runs_dir=` or `run_dir=` given an
    object whose own `__str__` (or `__repr__`) raises came out as that raw exception, not the
    command line's one line naming the flag."""
    with pytest.raises(PipeplanError) as refused:
        pipeplan.export(run_dir=value, out=tmp_path / "o")
    assert str(refused.value).startswith("RUN_DIR: "), str(refused.value)
    with pytest.raises(PipeplanError, match=r"^--resume: "):
        pipeplan.run(resume=value)


@contextlib.contextmanager
def _preview_held_in_another_thread(monkeypatch):
    """A `pipeplan.preview` call held running (its make_preview waits) in the thread
    'first-call' for the block, then released and joined: yields the list its result goes
    to once it returns, the options it was called with, and the real make_preview."""
    import threading

    import pipeplan.plan

    entered, release = threading.Event(), threading.Event()
    real = pipeplan.plan.make_preview

    def held(*args, **kwargs):
        entered.set()
        release.wait(60)
        return real(*args, **kwargs)

    monkeypatch.setattr(pipeplan.plan, "make_preview", held)
    results: list = []
    options = dict(profile=str(PROFILE), devices_per_node=2, epochs=2)
    first = threading.Thread(
        target=lambda: results.append(pipeplan.preview(**options)), name="first-call"
    )
    first.start()
    try:
        assert entered.wait(60)
        yield results, options, real
    finally:
        release.set()
        first.join(60)
        monkeypatch.setattr(pipeplan.plan, "make_preview", real)


@pytest.mark.timeout(120)
def test_a_call_while_another_runs_in_another_thread_is_refused(monkeypatch):
    """Found by the fifty-ninth round: two calls at once in two threads (two runs, two
    exports, even of other runs) each took the other's hold on the process (fd 2 captured,
    os._exit replaced, the logger's handlers) for its data's doing: both failed blaming the
    built-in `digits` data, and the process's stderr was left on a deleted file. Calls run
    one at a time: the second is refused in one line naming the first, and runs once the
    first has returned."""
    from pipeplan.errors import OutputError

    with _preview_held_in_another_thread(monkeypatch) as (results, options, _):
        said = "another pipeplan call is running in this process (preview() in thread "
        with pytest.raises(OutputError, match=re.escape(said + "'first-call'): calls run one")):
            pipeplan.preview(**options)
    assert len(results) == 1 and results[0].predicted_speedup > 0
    assert pipeplan.preview(**options).predicted_speedup == results[0].predicted_speedup


@pytest.mark.timeout(120)
def test_a_child_forked_while_another_thread_calls_starts_free(monkeypatch):
    """Found by the sixtieth round: a child forked while a call ran in another thread
    inherited the held call, and every pipeplan call in it was refused ("another pipeplan
    call is running ... call again once it has returned": it never returns there). The child
    starts free; the parent still refuses until the call returns."""
    import os

    import pipeplan.plan
    from pipeplan.errors import OutputError

    with _preview_held_in_another_thread(monkeypatch) as (_, options, real):
        read, write = os.pipe()
        child = os.fork()
        if child == 0:  # the child: its own call runs (the real function, not held here)
            code = 1
            try:
                monkeypatch.setattr(pipeplan.plan, "make_preview", real)
                code = 0 if pipeplan.preview(**options).predicted_speedup > 0 else 1
            finally:
                os.write(write, bytes([code]))
                os._exit(code)
        os.close(write)
        with pytest.raises(OutputError, match="another pipeplan call is running"):
            pipeplan.preview(**options)
        assert os.read(read, 1) == b"\0"
        assert os.waitpid(child, 0)[1] == 0


def test_a_pipeplan_call_from_data_code_under_the_command_is_refused(tmp_path, capsys, monkeypatch):
    """Found by the sixtieth round: a data function calling `pipeplan.run(...)` while
    `pipeplan run` ran trained a whole inner run, and the command then blamed the logger's
    handlers; a nested `pipeplan.preview` passed. The command is a call too: the nested one is
    refused, naming the command."""
    (tmp_path / "rt60_nested.py").write_text(
        "import pipeplan\n"
        "from executor.demotasks import target\n\n"
        "def load():\n"
        f"    pipeplan.preview(profile={str(PROFILE)!r}, devices_per_node=2, epochs=2)\n"
        "    return target()\n"
    )
    monkeypatch.chdir(tmp_path)
    argv = ["run", "--model", "vit-digits", "--data", "rt60_nested:load", "--prepare-only"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    said = "another pipeplan call is running in this process (the command `pipeplan run` in"
    assert err.count("\n") == 1 and said in err, err
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


@pytest.mark.timeout(120)
def test_a_call_in_a_removed_working_directory_raises_not_aborts(tmp_path):
    """Found by the ninety-fourth round: `pipeplan.profile(...)` called in a working directory
    removed before it ended the caller's process through torch's oneMKL ("Intel oneMKL FATAL
    ERROR: Cannot load libtorch_cpu.so", exit 2), its `except` never run. torch loads away
    from it, as the command's does, and the call raises the command's error."""
    code = (
        "import os, sys\n"
        "gone = sys.argv[1]\n"
        "os.mkdir(gone); os.chdir(gone); os.rmdir(gone)\n"
        "import pipeplan\n"
        "try:\n"
        "    pipeplan.profile('vit-digits', out=sys.argv[2], micro_batch_sizes='1', warmup=0,"
        " repeats=1)\n"
        "except pipeplan.PipeplanError as exc:\n"
        "    print('raised:', exc)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(cli.__file__).parent)}
    gone, out = tmp_path / "gone", tmp_path / "p.json"
    done = subprocess.run(
        [sys.executable, "-c", code, str(gone), str(out)], cwd=tmp_path, env=env,
        capture_output=True, text=True, timeout=100,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == (
        f"raised: the working directory was removed ({gone}): run pipeplan from a folder that "
        "exists"
    ), (done.stdout, done.stderr[-2000:])
    assert not out.exists()
