"""The command line: real runs, and bad input as one line with exit code 2."""

import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

import cli

ROOT = Path(__file__).resolve().parents[1]
FAST = ["--micro-batches", "1,2", "--warmup", "0", "--repeats", "1"]


def run_cli(*args: str) -> subprocess.CompletedProcess:
    """The installed entry point in a fresh process, as a user runs it."""
    code = "import sys, cli; sys.exit(cli.main())"
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=240,
    )


def test_profile_writes_a_profile_valid_against_the_printed_schema(tmp_path, capsys):
    out = tmp_path / "p.json"
    assert cli.main(["profile", "bert-synth", "--out", str(out), *FAST]) == 0
    assert "block6" in capsys.readouterr().out  # the summary table
    assert cli.main(["schema", "profile"]) == 0
    printed_schema = json.loads(capsys.readouterr().out)
    profile = json.loads(out.read_text())
    jsonschema.validate(profile, printed_schema)
    assert profile["schema_version"] == 1 and len(profile["layers"]) == 8


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["profile", "gpt-9", "--out", "{out}"], "known: bert-tiny"),
        (["profile", "{tmp}/missing.json", "--out", "{out}"], "no such config"),
        (["profile", "bert-synth", "--out", "{out}", "--micro-batches", "0,2"], "positive"),
        (["profile", "bert-synth", "--out", "{out}", "--micro-batches", "1.5"], "positive"),
        (["profile", "bert-synth", "--out", "{tmp}/no/such/dir/p.json"], "does not exist"),
        (["profile", "bert-synth", "--out", "{tmp}"], "is a directory"),
        (["profile", "bert-synth", "--out", "{out}", "--nproc", "two"], "--nproc"),
        (["profile", "bert-synth", "--out", "{out}", "--device", "tpu"], "unknown device"),
        (["schema", "nonsense"], "unknown schema"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_keeps_existing_output(tmp_path, capsys, args, fragment):
    out = tmp_path / "p.json"
    out.write_text("previous contents")
    args = [a.format(out=out, tmp=tmp_path) for a in args]
    assert cli.main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and fragment in err and "Traceback" not in err
    assert out.read_text() == "previous contents"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.json"]  # no temporary leftovers


def test_not_an_encoder_config_in_a_fresh_process(tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": "gpt2", "n_layer": 2}))
    result = run_cli("profile", str(config), "--out", str(tmp_path / "p.json"))
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "not a supported encoder" in result.stderr
    assert not (tmp_path / "p.json").exists()


def test_models_lists_presets(capsys):
    assert cli.main(["models"]) == 0
    out = capsys.readouterr().out
    assert "vit-digits" in out and "bert-synth" in out
