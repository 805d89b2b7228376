"""The README's commands, read from the README itself and run: the preview verbatim; run,
calibrate and report verbatim in a scratch folder, with the runs shortened to three steps an
epoch (the only words added). The torchrun block has its own test; the `pipeplan demo` commands
are read from here and run in tests/test_demo.py."""

import os
import re
import shlex
from pathlib import Path

import pytest

import cli

ROOT = Path(__file__).resolve().parents[1]
SHORTER = ["--max-steps-per-epoch", "3"]


def readme_commands() -> list[list[str]]:
    """Every `pipeplan …` command in the README's sh blocks, optional [parts] left out."""
    text = (ROOT / "README.md").read_text()
    commands = []
    for block in re.findall(r"```sh\n(.*?)```", text, flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = re.sub(r"\[[^\]]*\]", "", line).strip()
            if line.startswith("pipeplan "):
                commands.append(shlex.split(line)[1:])
    return commands


def command(name: str, containing: str = "") -> list[str]:
    found = [c for c in readme_commands() if c[0] == name and containing in " ".join(c)]
    assert found, f"the README shows no `pipeplan {name}` command containing {containing!r}"
    return found[0]


def test_the_first_command_is_the_demo_test_demo_runs():
    """The README opens with installing and `pipeplan demo`; tests/test_demo.py runs the
    README's `pipeplan demo` commands (in a scratch --runs-dir)."""
    first = re.search(r"```sh\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.S)
    assert first and first.group(1).strip().endswith("&& pipeplan demo")
    assert command("demo") == ["demo"]  # its [--runs-dir …] [--epochs …] are optional
    assert command("demo", "--pretrain-only") == ["demo", "--pretrain-only"]


def test_the_readme_preview(capsys, monkeypatch):
    """The README's preview runs, and prints the schedules the README quotes for it (found by
    the sixty-fifth round: it quoted vit-digits' `0 4 6 7 8×2 9×4` for bert-tiny)."""
    monkeypatch.chdir(ROOT)  # the README's paths are relative to the checkout
    assert cli.main(command("preview")) == 0
    out = capsys.readouterr().out
    assert "speedup" in out
    text = (ROOT / "README.md").read_text()
    after = text.index("```", text.index("pipeplan preview --profile profiles/bert-tiny")) + 3
    said = text[after : text.index("\n\n", after + 1)]
    quoted = re.findall(r"`([0-9][0-9× ]*)` in the\s+(best|later) case", said)
    assert len(quoted) == 2, said
    for schedule, case in quoted:
        assert f"{case} case: {schedule}: " in out, (case, schedule)


@pytest.mark.multiprocess
@pytest.mark.timeout(400)
def test_the_readme_run_calibrate_and_report(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    os.symlink(ROOT / "profiles", tmp_path / "profiles")  # the README's profiles/ paths
    run = command("run", "--data digits")
    assert cli.main([*run, *SHORTER, "--name", "A", "--freeze", "none"]) == 0
    assert cli.main([*run, *SHORTER, "--name", "B"]) == 0
    assert cli.main(command("calibrate")) == 0
    assert (tmp_path / "calibrated.json").exists()
    report = command("report")
    assert cli.main(report) == 0
    capsys.readouterr()
    assert cli.main([*report, "--baseline", "runs/A"]) == 0
    assert "speedup" in capsys.readouterr().out


@pytest.mark.multiprocess
@pytest.mark.timeout(400)
def test_the_readme_python_api_block(tmp_path, monkeypatch, capsys):
    """The README's notebook example, read from the README and executed as written: among
    its calls `pipeplan.profile("bert-synth", out="p.json", micro_batch_sizes="1,2,4")`,
    `pipeplan.run(...)` and `pipeplan.export("runs/nb", out="trained/")`, checked below."""
    text = (ROOT / "README.md").read_text()
    blocks = [
        b for b in re.findall(r"```python\n(.*?)```", text, flags=re.S) if "import pipeplan" in b
    ]
    assert len(blocks) == 1, "the README's Python API example"
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    exec(compile(blocks[0], "README.md", "exec"), scope)  # the README's own code, as written
    assert scope["preview"].predicted_speedup > 0
    assert (tmp_path / "p.json").exists() and (tmp_path / "plan.json").exists()
    assert scope["summary"].steps > 0 and (tmp_path / "runs" / "nb" / "metrics.csv").exists()
    assert (tmp_path / "trained" / "config.json").exists()
    assert (tmp_path / "trained" / "model.safetensors").exists()


def test_the_readme_fine_tuning_profile_measures_the_links_its_run_uses():
    """Found by the sixty-fourth round: the Fine-tuning block profiled without --nproc, so
    its run on 2 ranks priced their links on the format's default, a GPU's (an all-reduce of
    10-17 ms on CPU predicted at 17 µs). Its profile now measures the run's --nproc ranks."""
    profile, run = command("profile", "ckpt/"), command("run", "--profile ckpt.json")
    assert "--nproc" in profile, profile
    assert profile[profile.index("--nproc") + 1] == run[run.index("--nproc") + 1]


def test_the_readme_says_how_the_log_and_the_files_number_epochs():
    """Found by the sixtieth round: the README showed the log line `epoch 2/3` (counted from
    1) beside `metrics.csv` "for pandas", whose epochs, like run.jsonl's, `report`'s and
    `preview`'s, count from 0, and said neither: a user matching them was off by one. The
    README says both, after the log line it shows."""
    text = (ROOT / "README.md").read_text()
    shown = text.index("pipeplan: rank 0: INFO: epoch 2/3: ")
    said = text[shown : text.index("\n\n", text.index("```", shown) + 4)]
    assert "counts epochs from 1 (`epoch 2/3` is the second of three)" in said, said
    assert "`metrics.csv`, `run.jsonl`,\n`pipeplan report` and `preview` number them from 0" in said


def test_the_readme_names_the_run_json_fields_that_are_not_run_options():
    """Found by the sixty-sixth round: the README said run.json's fields "are exactly the
    options of `pipeplan run`", but some fields are no option, three options are stored under
    other names and three are not stored. Its paragraph on run.json names each, as the
    command's options and RunConfig's fields say them: a field or option added, renamed or
    dropped fails here until the README says it."""
    import typer

    from pipeplan.formats import RunConfig
    from pipeplan.options import model_options

    text = (ROOT / "README.md").read_text()
    start = text.index("`run.json`'s fields are derived from the options of `pipeplan run`")
    said = set(re.findall(r"`([^`]+)`", text[start : text.index("\n\n", start)]))
    fields = set(RunConfig.model_fields)
    options = {o.field: o.spelling for o in model_options(RunConfig)}
    command = typer.main.get_command(cli.app).commands["run"]
    own = {p.opts[0] for p in command.params if p.name not in fields}
    renamed = {f: s for f, s in options.items() if s != "--" + f.replace("_", "-")}
    assert fields - options.keys() <= said  # the run's records, freeze_list
    assert {*renamed, *renamed.values()} <= said
    assert own <= said  # --runs-dir, --prepare-only, --resume
    # Nothing named that is neither: a field or option since gone.
    names = {n for n in said if re.fullmatch(r"[a-z]+(_[a-z0-9]+)+", n)}
    flags = {n.split()[0] for n in said if n.startswith("--")}
    assert names <= fields, names - fields
    assert flags <= {*own, *(o.spelling for o in model_options(RunConfig))}, flags
