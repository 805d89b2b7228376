"""Hostile files, by class (the seventh independent round): a pointer or tokenizer file grown
to gigabytes, outputs written 0600 whatever the umask, a CSV with Excel's byte order mark, an
export of a run without a checkpoint or whose checkpoints/ is a link, the hint for a size in
bits, and (the eleventh round) a plan edited to contradict itself. Each refusal asserts exit
code 2, one line `pipeplan: error: …` naming the file and what is wrong, and that no file
changed. Runs are `--prepare-only` unless the case needs a checkpoint (the shared
`finished_run`, conftest)."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import shutil
import stat
from pathlib import Path

import pytest
import test_hostile_data
from test_hostile import BERT_CONFIG, CLUSTER, PREVIEW, copy_run, refused
from text_data import reviews, write_jsonl

import cli
from executor.planning import shipped_profile
from pipeplan.errors import quoted

made = test_hostile_data.made  # a small BERT checkpoint, its tokenizer and profile (a fixture)

HUGE = 3 << 30  # bytes: a sparse file this long uses no disk, and reading it whole fails


def state(root: Path) -> dict[str, tuple]:
    """`snapshot` for a tree holding sparse giants: size, mode and mtime for every file, and
    the sha256 of those small enough to read (a 3 GiB file is not read to be compared)."""
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_file() and not p.is_symlink():
            info = p.stat()
            digest = hashlib.sha256(p.read_bytes()).hexdigest() if info.st_size < 1 << 26 else ""
            out[str(p.relative_to(root))] = (info.st_size, info.st_mode, info.st_mtime_ns, digest)
    return out


def refused_big(argv: list[str], root: Path, capsys, fragments: tuple[str, ...]) -> None:
    """`refused`, comparing `state` rather than reading every file."""
    before = state(root)
    assert cli.main(argv) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("pipeplan: error: "), lines[0]
    assert all(f in lines[0] for f in fragments), lines[0]
    assert state(root) == before


def grow(path: Path) -> None:
    """`path` made HUGE bytes long, its text kept at the start (`truncate`: sparse)."""
    os.truncate(path, HUGE)


# ----------------------------------------------------------------- 1. reads without a limit


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
@pytest.mark.parametrize("command", ["export", "resume"])
def test_a_giant_checkpoint_pointer(finished_run, tmp_path, capsys, command):
    """checkpoints/latest grown to 3 GiB, still starting with `step-N`: read whole, a
    MemoryError traceback from export and --resume."""
    run = copy_run(finished_run, tmp_path)
    grow(run / "checkpoints" / "latest")
    argv = {
        "export": ["export", str(run), "--out", str(tmp_path / "out")],
        "resume": ["run", "--resume", str(run), "--epochs", "2"],
    }[command]
    refused_big(argv, tmp_path, capsys, ("checkpoints/latest", "larger than 4 KiB"))


@pytest.mark.parametrize(
    "name", ["tokenizer_config.json", "special_tokens_map.json", "tokenizer.json", "vocab.txt"]
)
def test_a_giant_tokenizer_file(made, tmp_path, capsys, name):
    """A 3 GiB tokenizer_config.json in --tokenizer: a MemoryError traceback (tokenizer.json
    was refused by the `tokenizers` library); every file transformers reads is bounded."""
    tok = Path(shutil.copytree(made["tokenizer"], tmp_path / "tok"))
    if not (tok / name).exists():
        (tok / name).write_text("{}")
    grow(tok / name)
    data = write_jsonl(tmp_path / "r.jsonl", reviews(20, seed=1))
    argv = test_hostile_data.prepare(made, tmp_path, data, tokenizer=tok)
    refused_big(argv, tmp_path, capsys, (name, "larger than 64 MiB"))  # MAX_TOKENIZER_FILE_BYTES


def test_a_giant_data_file(made, tmp_path, capsys):
    """A 3 GiB JSONL of one line (NULs after the text): read line by line, the one line is
    read whole."""
    data = write_jsonl(tmp_path / "r.jsonl", reviews(20, seed=1))
    grow(data)
    argv = test_hostile_data.prepare(made, tmp_path, data)
    refused_big(argv, tmp_path, capsys, ("r.jsonl", "too large to read as text data"))


# The eighteenth round: the 1 GiB limit did not bound memory. Each kind of JSON file has a
# limit of its own (FILE_LIMITS), and a MemoryError while decoding is one line naming the file.


def oversize(path: Path, limit: int) -> Path:
    """`path` made `limit` + 1 bytes long, sparse (`truncate`): refused from its size alone."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as f:
        f.truncate(limit + 1)
    return path


def _kinds() -> list:
    from pipeplan.formats.base import KINDS

    return sorted(KINDS, key=lambda model: model.__name__)


@pytest.mark.parametrize("model", _kinds(), ids=lambda model: model.__name__)
def test_each_kind_of_file_has_a_size_limit(tmp_path, model):
    """Found by the eighteenth round: a 900 MB profile, under the 1 GiB limit every kind shared,
    took 3.6 GB to decode and ended in a MemoryError traceback. `load` refuses a file over its
    kind's limit unread, stating it."""
    from pipeplan.errors import InputFileError
    from pipeplan.formats.base import KINDS, MAX_PHASED_JSON_BYTES, limit_of, load

    limit = limit_of(model)
    assert limit <= MAX_PHASED_JSON_BYTES
    path = oversize(tmp_path / "f.json", limit)
    with pytest.raises(InputFileError) as caught:
        load(model, path)
    assert str(caught.value) == (
        f"{path}: larger than {limit >> 20} MiB, the limit for a {KINDS[model]}"
    )


@pytest.mark.parametrize(
    ("flag", "limit"),
    [("--profile", "32 MiB"), ("--cluster", "1 MiB"), ("--freeze-schedule", "1 MiB")],
)
def test_an_oversize_input_is_one_line(tmp_path, capsys, flag, limit):
    """Found by the eighteenth round: `preview --profile` of a 900 MB file was a MemoryError
    traceback, exit 1, after 33 s; now one line, exit 2, before the file is read."""
    from pipeplan.formats.base import MAX_JSON_BYTES, MAX_SMALL_JSON_BYTES

    size = MAX_JSON_BYTES if flag == "--profile" else MAX_SMALL_JSON_BYTES
    big = oversize(tmp_path / "in" / "big.json", size)
    profile = str(shipped_profile("vit-digits", "cpu"))
    given = {"--profile": profile, "--cluster": None, "--freeze-schedule": None, flag: str(big)}
    argv = ["preview", *(x for k, v in given.items() if v for x in (k, v)), *PREVIEW]
    watched = tmp_path / "watched"
    watched.mkdir()
    refused_big(argv, watched, capsys, (str(big), f"larger than {limit}, the limit for a"))


def test_a_model_config_has_a_size_limit(tmp_path):
    """Found by the eighteenth round: a transformers config.json was decoded whole up to 1 GiB
    (4-33 times that in memory); it is refused over 64 MiB (a million labels are 50 MB)."""
    from pipeplan import models
    from pipeplan.errors import InputFileError
    from pipeplan.formats.base import MAX_CONFIG_BYTES

    config = oversize(tmp_path / "ckpt" / "config.json", MAX_CONFIG_BYTES)
    with pytest.raises(InputFileError, match="larger than 64 MiB, the limit for a model's conf"):
        models.weight_file(str(config.parent))


def test_a_generation_config_has_a_size_limit(tmp_path):
    """Found by the nineteenth round: a model folder's generation_config.json of 600 MB was
    decoded whole by transformers (65 s, then a MemoryError blamed on "its config"); it is
    refused over 4 MiB from its size, unread, naming the file and the limit."""
    from test_hostile import GPT2_CONFIG

    from pipeplan import models
    from pipeplan.errors import InputFileError

    generation = oversize(tmp_path / "ckpt" / "generation_config.json", 4 << 20)  # 4 MiB
    (generation.parent / "config.json").write_text(json.dumps(GPT2_CONFIG))
    with pytest.raises(InputFileError) as caught:
        models.build(str(generation.parent), init="random")
    assert str(caught.value) == (
        f"{generation}: larger than 4 MiB, the limit for a model's generation_config.json"
    )


def test_a_run_record_has_a_size_limit(tmp_path):
    """Found by the eighteenth round: a run.jsonl line was decoded whatever its length (up to
    the 1 GiB of the file); a line over 16 MiB is refused, naming it, before it is decoded."""
    from pipeplan.errors import InputFileError
    from pipeplan.formats import read_records
    from pipeplan.formats.base import MAX_RECORD_BYTES

    path = tmp_path / "run.jsonl"
    said = "run.jsonl:1: a line longer than 16,777,216 characters, the limit for a run record"
    # (and no length where the reader stopped: the ninety-third round's 900 MB line was "a
    # line of 67,108,868 characters")
    for length in (MAX_RECORD_BYTES + 1, 5 * MAX_RECORD_BYTES):
        path.write_text("[" * length + "\n")
        with pytest.raises(InputFileError) as refused:
            read_records(path)
        assert str(refused.value).endswith(said), str(refused.value)


def _out_of_memory(*args, **kwargs):
    raise MemoryError


def test_a_memory_error_decoding_a_file_is_one_line(tmp_path, capsys, monkeypatch):
    """Found by the eighteenth round: a MemoryError while decoding a profile (a 900 MB JSON
    array under `ulimit -v`) was a 53-line traceback, exit 1. Simulated in the decoder's hook
    for each object: one line naming the file, exit 2."""
    from pipeplan.formats import base

    monkeypatch.setattr(base, "unique_keys", _out_of_memory)
    profile = str(shipped_profile("vit-digits", "cpu"))
    argv = ["preview", "--profile", profile, *PREVIEW]
    watched = tmp_path / "watched"
    watched.mkdir()
    refused(argv, watched, capsys, (profile, "out of memory decoding its JSON"))


@pytest.mark.parametrize("where", ["validation", "its error"])
def test_a_memory_error_validating_a_file_is_one_line(tmp_path, monkeypatch, where):
    """Found by the eighteenth round: the same MemoryError in pydantic's validation, or while
    its error is read (inside the handler, where a sibling `except` does not catch it)."""
    from pipeplan.errors import InputFileError
    from pipeplan.formats import Profile, base, load

    path = tmp_path / "p.json"
    data = json.loads(shipped_profile("vit-digits", "cpu").read_text())
    if where == "validation":
        monkeypatch.setattr(Profile, "model_validate_json", _out_of_memory)
    else:
        data["layers"][0]["params"] = -1  # a ValidationError, whose message is read
        monkeypatch.setattr(base, "_first_error", _out_of_memory)
    path.write_text(json.dumps(data))
    with pytest.raises(InputFileError, match=f"^{path}: out of memory decoding its JSON"):
        load(Profile, path)


@pytest.mark.parametrize("where", ["decoding", "validation"])
def test_a_memory_error_in_a_run_record_is_one_line(tmp_path, monkeypatch, where):
    """Found by the eighteenth round: run.jsonl's lines share the decoder; a MemoryError in
    one names the file and line."""
    from pipeplan.errors import InputFileError
    from pipeplan.formats import base, read_records
    from pipeplan.formats import run as run_format

    if where == "decoding":
        monkeypatch.setattr(base, "unique_keys", _out_of_memory)
    else:
        monkeypatch.setattr(run_format, "_validate_record", _out_of_memory)
    path = tmp_path / "run.jsonl"
    path.write_text('{"kind": "step"}\n')
    with pytest.raises(InputFileError, match=r"run.jsonl:1: .*out of memory decoding its JSON"):
        read_records(path)


# The eighteenth round, again: pydantic builds every validation error before raising, one for
# each bad element or unknown key, with no limit: a small file took gigabytes to refuse.


def _capped(argv: list[str]) -> tuple[int, list[str], float]:
    """`cli.main(argv)` in a child under a 2 GiB address-space cap (`RLIMIT_AS`): its exit
    code, stderr lines and seconds. Python cannot catch Rust aborting on a failed allocation
    (exit 134), so the cap is the test that none is needed."""
    import resource
    import subprocess
    import sys
    import time

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))

    start = time.monotonic()
    code = "import sys, cli; sys.exit(cli.main(sys.argv[1:]))"
    done = subprocess.run(
        [sys.executable, "-c", code, *argv],
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=cap,
    )
    return done.returncode, done.stderr.strip().splitlines(), time.monotonic() - start


def _profile_of(tmp_path: Path, layers: str) -> Path:
    """A copy of the vit-digits profile whose layers are the JSON text `layers`."""
    doc = json.loads(shipped_profile("vit-digits", "cpu").read_text())
    doc["layers"] = "LAYERS"
    path = tmp_path / "in" / "p.json"
    path.parent.mkdir()
    path.write_text(json.dumps(doc).replace('"LAYERS"', layers))
    return path


def _refused_capped(argv: list[str], root: Path, fragments: tuple[str, ...]) -> None:
    """`refused`, run by `_capped`: exit 2 within 30 s, one line naming `fragments` and at
    most a few more errors ("(and 11 more)": a layer's missing fields), no file under `root`
    changed."""
    before = state(root)
    code, lines, seconds = _capped(argv)
    assert code == 2, (code, lines[-3:])
    assert len(lines) == 1 and lines[0].startswith("pipeplan: error: "), lines[-3:]
    assert all(f in lines[0] for f in fragments), lines[0]
    more = re.search(r"\(and (\d+) more\)", lines[0])
    assert more is None or int(more.group(1)) < 100, lines[0]
    assert seconds < 30, seconds
    assert state(root) == before


@pytest.mark.timeout(90)
@pytest.mark.parametrize(
    ("layers", "fragment"),
    [
        ("[" + "{}," * ((2 << 20) // 3) + "{}]", "field 'layers.0.index': Field required"),
        ("[" + "0," * (4 << 20) + "0]", "field 'layers.0': Input should be an object"),
    ],
    ids=["2 MiB of {}", "8 MiB of 0"],
)
def test_a_profile_of_many_bad_layers_is_refused_within_memory(tmp_path, layers, fragment):
    """Found by the eighteenth round: a 2 MiB profile whose layers were `[{},{},…]` made 5.6
    million errors in 7 GB and 130 s (8 MiB of `0,`: 6.6 GB); under `ulimit -v` pydantic's
    Rust code aborted, exit 134. Every list stops at its first bad element (`fail_fast`)."""
    profile = _profile_of(tmp_path, layers)
    argv = ["preview", "--profile", str(profile), *PREVIEW]
    _refused_capped(argv, tmp_path, (str(profile), fragment))


@pytest.mark.timeout(90)
def test_an_object_of_a_million_keys_is_refused_within_memory(tmp_path):
    """Found by the eighteenth round: a profile's layer of a million unknown keys was one
    error each, 1.8 GB and 30 s to refuse; an object of more than MAX_OBJECT_KEYS keys is
    refused before pydantic sees it, naming it."""
    keys = ", ".join(f'"k{i}": 0' for i in range(1 << 20))
    profile = _profile_of(tmp_path, "[{" + keys + "}]")
    argv = ["preview", "--profile", str(profile), *PREVIEW]
    fragments = (str(profile), "field 'layers.0' has 1,048,576 keys, more than the 1,024")
    _refused_capped(argv, tmp_path, fragments)


def _many_ranks(record: dict) -> None:
    record["ranks"] = [{}] * (1 << 20)


def _many_norms(record: dict) -> None:
    record["grad_norms"] = {str(i): "x" for i in range(1 << 20)}


@pytest.mark.timeout(90)
@pytest.mark.parametrize(
    ("kind", "spoil", "fragment"),
    [
        ("step", _many_ranks, "field 'step.ranks.0."),
        ("epoch", _many_norms, "field 'epoch.grad_norms.0': Input should be a valid number"),
    ],
    ids=["a million ranks", "a million gradient norms"],
)
def test_a_run_record_of_a_million_bad_elements_is_refused_within_memory(
    tmp_path, kind, spoil, fragment
):
    """Found by the eighteenth round: a run.jsonl line of a million bad elements made an
    error of each, as a profile's layers did; a dict (grad_norms) stops at its first too."""
    from test_hostile_runs import _synthetic

    run = _synthetic(tmp_path)
    lines = (run / "run.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    number = next(n for n, record in enumerate(records) if record["kind"] == kind)
    record = records[number]
    spoil(record)
    lines[number] = json.dumps(record)
    (run / "run.jsonl").write_text("\n".join(lines) + "\n")
    fragments = (f"run.jsonl:{number + 1}: not a run record", fragment)
    _refused_capped(["report", str(run)], tmp_path, fragments)


def test_a_freeze_trajectory_of_many_keys_is_refused_naming_it(tmp_path):
    """Found by the eighteenth round: the key count holds for a trajectory file too (read
    apart from `load`): 2,000 unknown keys were 2,000 errors, now one line naming the file."""
    from pipeplan.errors import InputFileError
    from pipeplan.freeze import trajectory_schedule

    path = tmp_path / "t.json"
    path.write_text(json.dumps({"frozen_layers": [0], **{f"k{i}": 0 for i in range(2000)}}))
    with pytest.raises(InputFileError) as caught:
        trajectory_schedule(path, 2, 12)
    assert str(caught.value) == (
        f"{path}: the top-level object has 2,001 keys, more than the 1,024 of any object "
        "pipeplan reads"
    )


def test_the_keys_of_a_dict_field_are_not_counted():
    """A dict field's keys are data, not fields: a profile's config naming 100,000 labels,
    and an epoch's gradient norms of as many layers, pass `check_keys` (their values are
    still validated, stopping at the first bad one)."""
    from pipeplan.formats import Profile
    from pipeplan.formats.base import check_keys
    from pipeplan.formats.run import RECORDS

    labels = {str(i): f"LABEL_{i}" for i in range(100_000)}
    check_keys({"model": {"config": {"id2label": labels}}}, (Profile,), "p.json")
    check_keys({"kind": "epoch", "grad_norms": dict.fromkeys(labels, 1.0)}, RECORDS, "r:1")


# ----------------------------------------------------------------- 2. modes of written files


@pytest.fixture
def umask_022():
    old = os.umask(0o022)
    yield
    os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_written_file_gets_a_new_files_mode_or_keeps_its_own(tmp_path, umask_022):
    """mkstemp's 0600 was renamed into place: a new plan was 0600 under umask 0022, and a
    0664 file replaced by one became 0600."""
    profile = str(shipped_profile("vit-digits", "cpu"))
    new, kept = tmp_path / "new.json", tmp_path / "perm.json"
    kept.write_text("{}")
    kept.chmod(0o664)
    for out in (new, kept):
        assert cli.main(["plan", "--profile", profile, *PREVIEW, "--out", str(out)]) == 0
    assert (mode(new), mode(kept)) == (0o644, 0o664)
    assert json.loads(kept.read_text())["schema_version"]  # replaced, not left alone


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_an_exported_model_has_a_new_files_mode(finished_run, tmp_path, umask_022):
    """safetensors writes model.safetensors through a 0600 temporary file."""
    out = tmp_path / "out"
    assert cli.main(["export", str(finished_run), "--out", str(out)]) == 0
    assert {p.name: mode(p) for p in out.iterdir()} == {
        "config.json": 0o644,
        "model.safetensors": 0o644,
    }


# ----------------------------------------------------------------- 3. a byte order mark


def test_a_csv_with_a_byte_order_mark_prepares(made, tmp_path):
    """Excel's "CSV UTF-8" starts with EF BB BF: the header's first name read '\\ufefftext'
    and the file was refused as having no 'text' column."""
    from executor.text import read_corpus

    data = tmp_path / "data.csv"
    rows = [f"great film {i},positive" if i % 2 else f"dull plot {i},negative" for i in range(20)]
    data.write_bytes(b"\xef\xbb\xbf" + ("text,label\n" + "\n".join(rows) + "\n").encode())
    assert cli.main(test_hostile_data.prepare(made, tmp_path, data)) == 0
    corpus = read_corpus(str(data))
    assert not any(t.startswith("\ufeff") for t in [*corpus.train, *corpus.eval])
    assert "great film 1" in [*corpus.train, *corpus.eval]
    record = json.loads((tmp_path / "runs" / "r" / "data.json").read_text())
    hashed = {f["path"]: f["sha256"] for f in record["files"]}
    # The raw bytes, mark included: what a resume hashes again to see the data unchanged.
    assert hashed[str(data)] == hashlib.sha256(data.read_bytes()).hexdigest()


# ----------------------------------------------------------------- 4, 5. export's checkpoint


def test_export_of_a_run_without_a_checkpoint(tmp_path, capsys):
    """A --prepare-only run has no checkpoint: export said "no checkpoint to resume from"."""
    runs = tmp_path / "runs"
    argv = ["run", "--nproc", "1", "--epochs", "1", "--name", "p", "--runs-dir", str(runs)]
    assert cli.main([*argv, "--prepare-only"]) == 0
    capsys.readouterr()
    argv = ["export", str(runs / "p"), "--out", str(tmp_path / "out")]
    refused(argv, tmp_path, capsys, ("runs/p", "no checkpoint to export", "not saved one"))


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
@pytest.mark.parametrize("named", [False, True])
def test_export_refuses_a_checkpoints_folder_that_is_a_link(finished_run, tmp_path, capsys, named):
    """checkpoints/ a symbolic link to a folder elsewhere: --resume refused it, export read
    another folder's checkpoint as the run's (latest, or named with --checkpoint)."""
    run = copy_run(finished_run, tmp_path)
    away = tmp_path / "away"
    shutil.move(str(run / "checkpoints"), away)
    (run / "checkpoints").symlink_to(away)
    step = (away / "latest").read_text().strip()
    argv = ["export", str(run), "--out", str(tmp_path / "out")]
    argv += ["--checkpoint", step] if named else []
    refused(argv, tmp_path, capsys, ("checkpoints", "symbolic link"))


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_export_of_a_checkpoint_step_beyond_twelve_digits_is_no_such_checkpoint(
    finished_run, tmp_path, capsys
):
    """Found by the thirty-second round: `--checkpoint step-99999999999999999999` was told
    to "name a checkpoint as step-N", which it does: it is no such checkpoint, and the line
    says which are kept."""
    run = copy_run(finished_run, tmp_path)
    kept = (run / "checkpoints" / "latest").read_text().strip()
    name = "step-" + "9" * 20
    argv = ["export", str(run), "--checkpoint", name, "--out", str(tmp_path / "out")]
    refused(argv, tmp_path, capsys, (f"{name}: no such checkpoint (kept: ", kept))


# ----------------------------------------------------------------- 6. the hint for bits


@pytest.mark.parametrize(
    ("size", "hint"),
    [("1Gib", "GB or GiB"), ("1gib", "GB or GiB"), ("1Mib", "MB or MiB"), ("2kb", "KB or KiB")],
)
def test_the_hint_for_a_size_in_bits(tmp_path, capsys, size, hint):
    """`--cache-budget 1Gib` hinted "GiB or GiiB": the hint doubled the unit's i."""
    profile = str(shipped_profile("vit-digits", "cpu"))
    argv = ["preview", "--profile", profile, *PREVIEW, "--cache-budget", size]
    refused(argv, tmp_path, capsys, (size, "reads as bits", f"give bytes ({hint})"))


# ----------------------------------------------------------------- 7. a plan against itself


@pytest.fixture(scope="module")
def self_plan(tmp_path_factory) -> dict:
    """A plan of 2 phases on 2 vit-digits ranks: 1 epoch nothing frozen, then 5 epochs with 5
    layers frozen and cached (its later epochs between its first and its steady epoch)."""
    path = tmp_path_factory.mktemp("self") / "p.json"
    argv = ["plan", "--profile", str(shipped_profile("vit-digits", "cpu")), "--devices-per-node"]
    argv += ["2", "--global-batch", "64", "--samples", "1438", "--epochs", "6"]
    assert cli.main([*argv, "--freeze-schedule", "0,5", "--out", str(path)]) == 0
    return json.loads(path.read_text())


def _scale_phase_total(doc: dict, i: int, factor: float) -> None:
    """Phase i's total times `factor`, and the plan's total moved with it: only the phase
    contradicts its own epochs."""
    phase = doc["phases"][i]
    doc["predicted_total_s"] += phase["total_s"] * (factor - 1)
    phase["total_s"] *= factor


def _set(path: tuple, value):
    def tamper(doc: dict) -> None:
        *keys, last = path
        for key in keys:
            doc = doc[key]
        doc[last] = value

    return tamper


SELF_CONTRADICTIONS = {
    # The red team's two edits: stages that cannot fit, a total that is no sum.
    "stages beyond the device memory": (
        _set(("inputs", "cluster", "device_memory_bytes"), 1),
        ("phase 0 stage 0: memory_bytes", "exceeds inputs.cluster.device_memory_bytes 1"),
    ),
    "a total of 1e308": (_set(("predicted_total_s",), 1e308), ("predicted_total_s 1e+308",)),
    # 1e-6 off: a hundred times the rounding the tolerance allows, far from the edit above.
    "a total a millionth off": (
        lambda doc: doc.update(predicted_total_s=doc["predicted_total_s"] * (1 + 1e-6)),
        ("predicted_total_s", "is not the sum of the phases' total_s"),
    ),
    "a phase longer than its epochs": (
        lambda doc: _scale_phase_total(doc, 1, 1.5),
        ("phases.1", "total_s", "is above transition_s + first_epoch_s + 4 later epochs"),
    ),
    "a phase shorter than its epochs": (
        lambda doc: _scale_phase_total(doc, 1, 0.5),
        ("phases.1", "total_s", "is below transition_s + first_epoch_s + 4 later epochs"),
    ),
    "an epoch shorter than its steps": (
        lambda doc: doc["phases"][0].update(step_s=doc["phases"][0]["step_s"] * 2),
        ("phase 0: epoch_s", "is not 22 steps × step_s"),
    ),
    # Cached, an epoch adds disk reads the plan does not record: it is bounded below only.
    "a cached epoch shorter than its steps": (
        lambda doc: doc["phases"][1].update(step_s=doc["phases"][1]["step_s"] * 2),
        ("phase 1: epoch_s", "is below 22 steps × step_s"),
    ),
    # Sums and products of finite times that overflow, and a count no float holds.
    "an epoch of 1e308 s": (
        lambda doc: doc["phases"][1].update(epoch_s=1e308),
        ("phases.1", "its epochs are too long to add up"),
    ),
    "10**400 epochs": (
        lambda doc: doc["phases"][1].update(epochs=10**400),
        ("phases.1.epochs", "less than or equal to 10000"),
    ),
    "steps that are not the samples' batches": (
        _set(("inputs", "steps_per_epoch"), 23),
        ("inputs.steps_per_epoch 23 is not inputs.samples // inputs.global_batch (22)",),
    ),
    # Thirteenth round: phases that are not the plan's own freeze schedule (0,5,5,5,5,5).
    "a phase off the plan's freeze schedule": (
        _set(("inputs", "freeze", "frozen_layers"), [0, 0, 5, 5, 5, 5]),
        ("phase 1 freezes 5 layers, but inputs.freeze has 0 at epoch 1",),
    ),
    "a freeze schedule shorter than the plan": (
        _set(("inputs", "freeze", "frozen_layers"), [0, 5]),
        ("inputs.freeze has 2 epochs of frozen layers, the plan 6",),
    ),
    "a phase that does not move the freeze point": (
        lambda doc: (
            doc["inputs"]["freeze"].update(frozen_layers=[5] * 6),
            doc["phases"][0]["layout"].update(frozen_layers=5),
        ),
        ("phase 1 freezes 5 layers after phase 0 froze 5", "freezing only grows"),
    ),
    "a cached phase in a plan made without the cache": (
        _set(("inputs", "cache"), False),
        ("phase 1 reads the cache of a plan made without one",),
    ),
    # Pins the phases do not have (the solver searched only layouts that had them).
    "a pinned stage count the phases do not have": (
        _set(("inputs", "pinned"), {"num_stages": 3}),
        ("phase 0: its layout's num_stages 1 is not the pinned 3",),
    ),
    "a pinned schedule the phases do not have": (
        _set(("inputs", "pinned"), {"schedule": "gpipe"}),
        ("phase 0: its layout's schedule '1f1b' is not the pinned 'gpipe'",),
    ),
    "a pin that is none": (
        _set(("inputs", "pinned"), {"colour": 1}),
        ("inputs.pinned: 'colour' is not a pin",),
    ),
    # Fourteenth round: layouts the executor refuses, and predictions that contradict the step.
    "the head frozen": (
        lambda doc: (
            doc["inputs"]["freeze"].update(frozen_layers=[0] + [10] * 5),
            doc["phases"][1]["layout"].update(frozen_layers=10, cached=False),
        ),
        ("phase 1: its layout cannot run: 10 frozen layers of 10 (the head is never frozen)",),
    ),
    # Fortieth round: a runner-up is a layout of its phase, held to the same check.
    "a runner-up on ranks the cluster lacks": (
        lambda doc: _runner_up(doc, rank_map=[[r + 100 for r in row] for row in _ranks(doc)]),
        ("phase 0: runner_ups[0]: its layout cannot run", "must use distinct ranks of 0.."),
    ),
    "a runner-up of another freeze point": (
        lambda doc: _runner_up(doc, frozen_layers=3),
        ("phase 0: runner_ups[0] freezes 3 layers, its phase 0",),
    ),
    # Fifty-eighth round: a runner-up of another global batch (12 in a plan of 32) passed.
    "a runner-up of another global batch": (
        lambda doc: _runner_up(
            doc, micro_batch_size=doc["phases"][0]["layout"]["micro_batch_size"] * 2
        ),
        ("phase 0: runner_ups[0]: its layout's global batch", "is not the plan's"),
    ),
    # Fifty-ninth round: a runner-up "of 1 µs" (its layout prices to 36 ms) was run and kept.
    "a runner-up of a microsecond": (
        lambda doc: (
            _runner_up(doc, schedule="gpipe"),
            _ups(doc)[0].update(step_s=1e-6),
        ),
        ("phase 0: runner_ups[0].step_s 1e-06 is not what its layout", "prices to from the"),
    ),
    # Sixty-first round: runner-ups the planner never lists (it keeps layouts that fit, each
    # once, besides the phase's) passed `run --plan`.
    "a runner-up that is its phase's layout": (
        lambda doc: _runner_up(doc),
        ("phase 0: runner_ups[0]: its layout (1x2 M=1 1f1b) is the phase's own",),
    ),
    # Sixty-second round: the phase's own on other ranks of the same nodes passed.
    "a runner-up that is its phase's layout with its replicas' ranks swapped": (
        lambda doc: _runner_up(doc, rank_map=[list(row) for row in reversed(_ranks(doc))]),
        ("phase 0: runner_ups[0]: its layout (1x2 M=1 1f1b) is the phase's own, its cells",),
    ),
    "a runner-up listed twice": (
        lambda doc: (_runner_up(doc, schedule="gpipe"), _ups(doc).append(_ups(doc)[0])),
        ("phase 0: runner_ups[1]: its layout (1x2 M=1 gpipe) is runner_ups[0]'s",),
    ),
    "a runner-up that does not fit the devices": (
        lambda doc: (
            _runner_up(doc, rank_map=[[0]], micro_batches=1, micro_batch_size=64),
            doc["inputs"]["cluster"].update(device_memory_bytes=_peak(doc)),
        ),
        ("phase 0: runner_ups[0].layout (1x1 M=1 1f1b) needs", "bytes on its stage 0, over "),
    ),
    # Fifty-third round: 120,000 runner-ups took 47 s and 1.2 GB to read; the planner keeps 2.
    "ten thousand runner-ups": (
        lambda doc: (_runner_up(doc), doc["phases"][0].update(runner_ups=_ups(doc) * 10_000)),
        ("phases.0.runner_ups", "List should have at most 4 items", "not 10000"),
    ),
    # Fifty-sixth round: the runner-ups bounded by phase, 10,000 phases took 38 s and 1.6 GB.
    "more phases than layers": (
        lambda doc: _one_epoch_phases(doc, 12),
        ("12 phases over 10 layers; a phase freezes more layers than the one before it",),
    ),
    # Fifty-seventh round: counted only once every phase was built, 50,000 phases took 75 s
    # and 1.08 GB to refuse. Counted in the file's list, the line is the count's, not a phase's.
    "more phases than layers, a later one broken": (
        lambda doc: (_one_epoch_phases(doc, 12), doc["phases"][11].update(step_s="slow")),
        ("12 phases over 10 layers; a phase freezes more layers than the one before it",),
    ),
    # Fifty-eighth round: 300,000 stages of a 1-stage layout were built first (22 s, 1.6 GB);
    # counted in the file's list, broken ones too, the line is the count's.
    "a hundred thousand stages": (
        lambda doc: doc["phases"][0].update(stages=[{}] * 100_000),
        ("field 'phases.0': 100000 predicted stages for a",),
    ),
    # Fifty-ninth round: as many boundaries as stages were built first (300,000: 1.7 GB).
    "a hundred thousand stages over as many boundaries": (
        lambda doc: (
            doc["phases"][1]["layout"].update(boundaries=list(range(100_001))),
            doc["phases"][1].update(stages=[{}] * 100_000),
        ),
        ("phase 1: its boundaries end at layer 100000, phase 0's at 10",),
    ),
    "more stages than devices, over as many layers": (
        lambda doc: (
            doc["phases"][0]["layout"].update(boundaries=list(range(11))),
            doc["phases"][0].update(stages=[{}] * 10),
        ),
        ("phase 0: a 10-stage layout, but inputs.cluster has 2 devices: each stage takes one",),
    ),
    # Sixtieth round: 2,000,000 rows of [0] were built first (24 s, 1.5 GB).
    "a hundred thousand rank map rows": (
        lambda doc: doc["phases"][1]["layout"].update(rank_map=[[0]] * 100_000),
        ("phase 1: its rank map places 100,000 ranks, but inputs.cluster has 2 devices",),
    ),
    "a runner-up's rank map row of a hundred thousand": (
        lambda doc: _runner_up(doc, rank_map=[[0] * 100_000]),
        ("phase 0's runner_ups[0]: its rank map places 100,000 ranks, but inputs.cluster",),
    ),
    "more phases than a plan has epochs": (
        lambda doc: _one_epoch_phases(doc, 10_001),
        ("10,001 phases: a phase trains at least one epoch, a plan at most 10,000",),
    ),
    "phases that split different layer counts": (
        lambda doc: (
            doc["phases"][1]["layout"].update(boundaries=[0, 12]),
            doc["phases"][1]["stages"][0].update(stop_layer=12),
        ),
        ("phase 1: its boundaries end at layer 12, phase 0's at 10",),
    ),
    "a freeze schedule freezing the head": (
        _set(("inputs", "freeze", "frozen_layers"), [0, 5, 5, 5, 5, 12]),
        ("inputs.freeze: epoch 5 freezes 12 layers of the plan's 10",),
    ),
    "a stage's forward of 1e9 s in a step of a tenth": (
        lambda doc: doc["phases"][0]["stages"][0].update(fwd_s=1e9),
        ("phase 0 stage 0: M × (fwd_s + bwd_s) + allreduce_s + optimizer_s", "exceeds the step"),
    ),
    # Twice the step: the link would still be busy when the step has ended.
    "a send longer than its step": (
        lambda doc: doc["phases"][1]["stages"][0].update(send_bwd_s=2 * doc["phases"][1]["step_s"]),
        ("phase 1 stage 0: M × send_bwd_s", "exceeds the step it is part of"),
    ),
    "an uncached epoch 100 times its steps, its totals to match": (
        lambda doc: _scale_uncached_epoch(doc, 0, 100.0),
        ("phase 0: epoch_s", "is not 22 steps × step_s"),
    ),
}


def _ranks(doc: dict) -> list[list[int]]:
    return doc["phases"][0]["layout"]["rank_map"]


def _runner_up(doc: dict, **changed) -> None:
    """Phase 0's runner-ups: its own layout with `changed`, at its step."""
    phase = doc["phases"][0]
    layout = {**phase["layout"], **changed}
    phase["runner_ups"] = [{"layout": layout, "step_s": phase["step_s"]}]


def _peak(doc: dict) -> int:
    """The most memory a stage of the plan's phases needs: the least its devices may have."""
    return max(stage["memory_bytes"] for phase in doc["phases"] for stage in phase["stages"])


def _one_epoch_phases(doc: dict, count: int) -> None:
    """`count` copies of phase 0, one epoch each, tiling the plan's `count` epochs."""
    first = doc["phases"][0]
    doc["phases"] = [{**first, "start_epoch": i, "epochs": 1} for i in range(count)]
    doc["inputs"]["epochs"] = count


def _ups(doc: dict) -> list:
    return doc["phases"][0]["runner_ups"]


def _scale_uncached_epoch(doc: dict, i: int, factor: float) -> None:
    """Uncached phase i's epochs (first and steady) times `factor`, its total and the plan's
    moved to match: only the epoch contradicts the step it is made of."""
    phase = doc["phases"][i]
    assert not phase["layout"]["cached"]
    grown = phase["epoch_s"] * (factor - 1) * phase["epochs"]
    phase.update(epoch_s=phase["epoch_s"] * factor, first_epoch_s=phase["epoch_s"] * factor)
    phase["total_s"] += grown
    doc["predicted_total_s"] += grown


@pytest.mark.timeout(120)
@pytest.mark.parametrize("case", SELF_CONTRADICTIONS, ids=str)
def test_a_plan_that_contradicts_itself_is_refused(self_plan, tmp_path, capsys, case):
    """Eleventh independent round: a plan edited to device_memory_bytes 1 (its own stages
    cannot fit) or predicted_total_s 1e308 (not its phases' sum) was run, exit 0."""
    from pipeplan.formats import Plan, load

    tamper, fragments = SELF_CONTRADICTIONS[case]
    doc = json.loads(json.dumps(self_plan))
    assert doc["inputs"]["steps_per_epoch"] == 22 and len(doc["phases"]) == 2
    assert doc["phases"][1]["layout"]["cached"] and doc["phases"][1]["epochs"] == 5
    tamper(doc)
    plan = tmp_path / "p.json"
    plan.write_text(json.dumps(doc))
    argv = ["run", "--plan", str(plan), "--prepare-only", "--runs-dir", str(tmp_path / "runs")]
    refused([*argv, "--name", "x"], tmp_path, capsys, ("p.json", *fragments))
    # The same plan untouched is accepted: the refusal is the edit's.
    plan.write_text(json.dumps(self_plan))
    assert load(Plan, plan).predicted_total_s == self_plan["predicted_total_s"]


@pytest.fixture(scope="module")
def pinned_plan(tmp_path_factory) -> dict:
    """`self_plan`'s, pinned to 1 stage and made without the cache."""
    path = tmp_path_factory.mktemp("pinned") / "p.json"
    argv = ["plan", "--profile", str(shipped_profile("vit-digits", "cpu")), "--devices-per-node"]
    argv += ["2", "--global-batch", "64", "--samples", "1438", "--epochs", "6", "--stages", "1"]
    assert cli.main([*argv, "--freeze-schedule", "0,5", "--no-cache", "--out", str(path)]) == 0
    return json.loads(path.read_text())


# A runner-up of phase 1 the plan's solver could not have listed: (its layout's change, the line).
UNSEARCHED = {
    "off the pins": (
        dict(boundaries=[0, 5, 10], rank_map=[[0, 1]], micro_batches=2),
        "phase 1: runner_ups[0]: its layout's num_stages 2 is not the pinned 1",
    ),
    "cached": (dict(cached=True), "phase 1: runner_ups[0] reads the cache of a plan made without"),
}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("case", UNSEARCHED)
def test_a_plans_runner_ups_keep_its_pins_and_its_cache(pinned_plan, tmp_path, capsys, case):
    """Found by the sixty-second round: a runner-up of 2 stages in a plan pinned to 1 (faster
    than its phase), or a cached one in a plan made without the cache, each priced as the
    planner prices it, was run and copied into the run: runner-ups were held to memory and
    to being listed once, not to the plan's pins and cache. The solver searched them as it
    searched their phase: each is refused in one line naming the phase and the runner-up."""
    from pipeplan.costmodel import CostModel
    from pipeplan.formats import Layout, Profile, load
    from pipeplan.formats.cluster import Cluster
    from pipeplan.plan import _r

    doc = json.loads(json.dumps(pinned_plan))
    assert doc["inputs"]["pinned"] == {"num_stages": 1} and doc["inputs"]["cache"] is False
    phase = doc["phases"][1]
    layout = {**phase["layout"], **UNSEARCHED[case][0]}
    profile = load(Profile, shipped_profile("vit-digits", "cpu"))
    model = CostModel(profile, Cluster.model_validate(doc["inputs"]["cluster"]))
    evaluation = model.evaluate(Layout(**layout), record=False)
    assert evaluation.fits  # what the planner could list, but for its pins and cache
    phase["runner_ups"] = [{"layout": layout, "step_s": _r(evaluation.step_s)}]
    plan = tmp_path / "p.json"
    plan.write_text(json.dumps(doc))
    argv = ["run", "--plan", str(plan), "--prepare-only", "--runs-dir", str(tmp_path / "runs")]
    refused([*argv, "--name", "x"], tmp_path, capsys, (str(plan), UNSEARCHED[case][1]))


@pytest.mark.timeout(120)
def test_a_runner_up_that_is_its_phase_on_the_other_node_is_refused(tmp_path, capsys):
    """Found by the sixty-third round: on 2 x 2, a phase's own 1x2 moved to the other node
    (`[[2], [3]]` beside its `[[0], [1]]`, at its step) passed `run --plan` as a runner-up:
    the format compares node numbers, while the planner sets node names aside
    (`costmodel.alike_key`) and never lists it. Refused in one line naming the phase and the
    runner-up, by the planner's own key."""
    cluster = tmp_path / "c22.json"
    link = {"bandwidth_bytes_per_s": 5e9, "latency_s": 1e-05}
    slow = {"bandwidth_bytes_per_s": 1e6, "latency_s": 0.001}
    doc = dict(schema_version=1, nodes=2, devices_per_node=2, device_memory_bytes=200 << 20)
    cluster.write_text(json.dumps({**doc, "intra_node": link, "inter_node": slow}))
    path = tmp_path / "p.json"
    argv = ["plan", "--profile", str(shipped_profile("vit-digits", "cpu")), "--cluster"]
    argv += [str(cluster), "--global-batch", "64", "--samples", "1438", "--epochs", "1"]
    assert cli.main([*argv, "--freeze-schedule", "0", "--no-cache", "--out", str(path)]) == 0
    capsys.readouterr()
    plan = json.loads(path.read_text())
    phase = plan["phases"][0]
    assert phase["layout"]["rank_map"] == [[0], [1]]
    moved = {**phase["layout"], "rank_map": [[2], [3]]}
    phase["runner_ups"] = [{"layout": moved, "step_s": phase["step_s"]}]
    path.write_text(json.dumps(plan))
    argv = ["run", "--plan", str(path), "--prepare-only", "--runs-dir", str(tmp_path / "runs")]
    fragment = "phase 0: runner_ups[0]: its layout (1x2 M=1 1f1b) is priced alike to the phase's"
    refused([*argv, "--name", "x"], tmp_path, capsys, (str(path), fragment))


@pytest.mark.timeout(120)
def test_a_plan_freezing_the_models_head_names_the_plan(self_plan, tmp_path, capsys):
    """Fourteenth round: a plan's freeze schedule the run's model cannot follow (10 frozen of
    vit-digits' 10 layers, in a plan of 12 layers the format accepts) was refused as
    `--freeze: ...`, a flag never given: the schedule is the plan's, so the error names it."""
    doc = json.loads(json.dumps(self_plan))
    doc["inputs"]["freeze"]["frozen_layers"] = [0] + [10] * 5
    for phase in doc["phases"]:
        phase["layout"]["boundaries"][-1] = 12
        phase["stages"][-1]["stop_layer"] = 12
    doc["phases"][1]["layout"]["frozen_layers"] = 10
    plan = tmp_path / "p12.json"
    plan.write_text(json.dumps(doc))
    argv = ["run", "--plan", str(plan), "--model", "vit-digits", "--prepare-only", "--name", "x"]
    fragments = (f"{plan}: inputs.freeze:", "10 is not a frozen-layer count in 0..9")
    refused([*argv, "--runs-dir", str(tmp_path / "runs")], tmp_path, capsys, fragments)


# (the phase-0 layout field edited, its value, what the one line must say)
BROKEN_LAYOUTS = {
    "boundaries []": ("boundaries", [], "[] must start at 0 and end at the layer count"),
    "boundaries [0]": ("boundaries", [0], "[0] must start at 0 and end at the layer count"),
    "boundaries [10]": ("boundaries", [10], "[10] must start at 0 and end at the layer count"),
    "boundaries not increasing": (
        "boundaries",
        [0, 5, 3, 10],
        "[0, 5, 3, 10] must be strictly increasing",
    ),
    "no replica": ("rank_map", [], "[] places no replica"),
}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("case", BROKEN_LAYOUTS, ids=str)
def test_a_plans_broken_layout_is_refused_for_itself(self_plan, tmp_path, capsys, case):
    """Found by the thirty-fourth round: a plan whose phase's layout had boundaries [] or [0]
    or [8] was refused for "field 'phases.0': 1 predicted stages for a -1-stage layout" (or
    "0-stage"): the phase's cross-field check ran on a layout that split nothing, and named
    a stage count nobody wrote. The layout's own check (at least 2 boundaries, from 0,
    strictly increasing; a rank map of at least one replica) now runs first, naming the
    field `phases.0.layout.boundaries` (or `.rank_map`); nothing is written."""
    key, value, words = BROKEN_LAYOUTS[case]
    doc = json.loads(json.dumps(self_plan))
    doc["phases"][0]["layout"][key] = value
    plan = tmp_path / "p.json"
    plan.write_text(json.dumps(doc))
    argv = ["run", "--plan", str(plan), "--prepare-only", "--runs-dir", str(tmp_path / "runs")]
    field = f"invalid plan: field 'phases.0.layout.{key}': "
    refused([*argv, "--name", "x"], tmp_path, capsys, ("p.json", field + words))
    assert not (tmp_path / "runs").exists()


@pytest.mark.timeout(120)
def test_a_plans_stage_off_its_boundaries_says_both(self_plan, tmp_path, capsys):
    """Found by the thirty-fourth round: boundaries [0, 4] over a stage predicted for layers
    0..10 was refused as "predicted stage 0 does not match the layout's boundaries", saying
    neither. The line now gives both: the stage's layers and what the boundaries make of it."""
    doc = json.loads(json.dumps(self_plan))
    assert doc["phases"][0]["layout"]["boundaries"] == [0, 10]
    doc["phases"][0]["layout"]["boundaries"] = [0, 4]
    plan = tmp_path / "p.json"
    plan.write_text(json.dumps(doc))
    argv = ["run", "--plan", str(plan), "--prepare-only", "--runs-dir", str(tmp_path / "runs")]
    words = "predicted stage 0 holds layers 0..10, but the layout's boundaries [0, 4] give it 0..4"
    refused([*argv, "--name", "x"], tmp_path, capsys, ("p.json", words))


def test_a_plan_whose_last_phase_unfreezes_is_refused(tmp_path, capsys):
    """Thirteenth round: a plan of phases frozen 0, 5, 7 (α = 0.5 over 3 epochs) edited to
    0, 5, 0, its schedule still 0,5,7, was run, exit 0: the run would have unfrozen 7
    layers, or solved a freeze point the plan never planned."""
    path = tmp_path / "rp.json"
    argv = ["plan", "--profile", str(shipped_profile("vit-digits", "cpu")), "--nodes", "1"]
    argv += ["--devices-per-node", "2", "--epochs", "3", "--freeze", "alpha", "--alpha", "0.5"]
    argv += ["--global-batch", "64", "--samples", "1438", "--out", str(path)]
    assert cli.main(argv) == 0
    doc = json.loads(path.read_text())
    assert [p["layout"]["frozen_layers"] for p in doc["phases"]] == [0, 5, 7]
    assert doc["inputs"]["freeze"]["frozen_layers"] == [0, 5, 7]
    run = ["run", "--model", "vit-digits", "--prepare-only", "--runs-dir", str(tmp_path / "runs")]
    assert cli.main([*run, "--plan", str(path), "--name", "good"]) == 0  # as written, it runs
    # Uncached too: a cached layout without a frozen prefix is refused as such first (phases
    # 1 and 2 are cached since the fifty-fifth round: phase 1 fills the cache phase 2 reads).
    doc["phases"][-1]["layout"].update(frozen_layers=0, cached=False)
    bad = tmp_path / "rp_bad.json"
    bad.write_text(json.dumps(doc))
    capsys.readouterr()
    fragments = ("rp_bad.json", "phase 2 freezes 0 layers after phase 1 froze 5")
    refused([*run, "--plan", str(bad), "--name", "bad"], tmp_path, capsys, fragments)


def test_a_plan_phase_whose_stages_run_out_of_rank_order_is_refused(tmp_path, capsys):
    """Found by the eighteenth round: a plan whose phase 2 (of frozen 0, 4, 8) had rank_map
    edited to [[1, 0]] passed every check, trained two epochs, then died in rank 1 with
    "ValueError: pipeline ranks must increase with the stage index" and advised a resume that
    failed the same way. Refused at load now, naming the plan, the phase and the rank map."""
    path = tmp_path / "plan3.json"
    argv = ["plan", "--profile", str(shipped_profile("vit-digits", "cpu")), "--nodes", "1"]
    argv += ["--devices-per-node", "2", "--device-memory", "100MiB", "--epochs", "3"]
    argv += ["--global-batch", "64", "--samples", "192", "--freeze-schedule", "0,4,8"]
    # A pipeline to edit (unpinned, one stage of two replicas plans faster over the schedule).
    assert cli.main([*argv, "--stages", "2", "--out", str(path)]) == 0
    doc = json.loads(path.read_text())
    assert doc["phases"][2]["layout"]["rank_map"] == [[0, 1]]
    doc["phases"][2]["layout"]["rank_map"] = [[1, 0]]
    bad = tmp_path / "plan3b.json"
    bad.write_text(json.dumps(doc))
    capsys.readouterr()
    run = ["run", "--model", "vit-digits", "--prepare-only", "--runs-dir", str(tmp_path / "runs")]
    fragments = (f"{bad}: ", "phase 2", "rank_map [[1, 0]]", "increasing ranks")
    refused([*run, "--plan", str(bad), "--name", "x"], tmp_path, capsys, fragments)


@pytest.fixture(scope="module")
def pipelined_plan(tmp_path_factory) -> dict:
    """The thirty-first round's plan: frozen 0, 4, 6 over 3 epochs of vit-digits on 2 ranks of
    100 MiB, every phase 2x1 M=4 (m = 16) 1f1b, whose stages come near the memory."""
    path = tmp_path_factory.mktemp("pipelined") / "pp.json"
    argv = ["plan", "--profile", str(shipped_profile("vit-digits", "cpu")), "--nodes", "1"]
    argv += ["--devices-per-node", "2", "--device-memory", "100MiB", "--epochs", "3"]
    argv += ["--global-batch", "64", "--samples", "1438", "--freeze-schedule", "0,4,6"]
    # Pinned to the round's pipeline (unpinned, one stage of two replicas plans faster).
    assert cli.main([*argv, "--stages", "2", "--out", str(path)]) == 0
    doc = json.loads(path.read_text())
    assert [p["layout"]["micro_batches"] for p in doc["phases"]] == [4, 4, 4]
    assert [p["layout"]["schedule"] for p in doc["phases"]] == ["1f1b"] * 3
    assert doc["inputs"]["cache"] and not doc["phases"][1]["layout"]["cached"]
    return doc


REPRICED_EDITS = {
    # The round's three edits of a layout beside its predictions, and one of a prediction.
    "1f1b turned gpipe": (
        lambda doc: doc["phases"][0]["layout"].update(schedule="gpipe"),
        ("phase 0: its layout (2x1 M=4 gpipe) needs", "device_memory_bytes 104857600"),
    ),
    "M × m swapped, 4 × 16 to 2 × 32": (
        lambda doc: doc["phases"][0]["layout"].update(micro_batches=2, micro_batch_size=32),
        ("phase 0: its layout (2x1 M=2 1f1b) needs", "device_memory_bytes 104857600"),
    ),
    "a frozen phase turned cached": (
        lambda doc: doc["phases"][1]["layout"].update(cached=True),
        ("phase 1: step_s", "is not what its layout (2x1 M=4 1f1b cached) prices to"),
    ),
    "a stage's memory lowered": (
        lambda doc: doc["phases"][2]["stages"][1].update(memory_bytes=1 << 20),
        ("phase 2: stages[1].memory_bytes 1048576 is not what its layout",),
    ),
}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("case", REPRICED_EDITS, ids=str)
def test_a_plan_whose_layout_is_not_what_it_predicts_is_refused(
    pipelined_plan, tmp_path, capsys, case
):
    """Found by the thirty-first round: a plan whose phase 0 was edited from 1f1b to gpipe (or
    its M × m from 4 × 16 to 2 × 32, or its phase 1 turned cached), its predictions kept, was
    run, exit 0: it trained a layout that does not fit the plan's 100 MiB devices (the planner
    refuses it) and recorded another layout's predictions. Every phase is priced again from
    the plan's profile and cluster as it loads: refused naming the file, the phase and the
    field, saying to re-plan; the plan as written runs."""
    tamper, fragments = REPRICED_EDITS[case]
    doc = json.loads(json.dumps(pipelined_plan))
    tamper(doc)
    plan = tmp_path / "pp.json"
    plan.write_text(json.dumps(doc))
    runs = tmp_path / "runs"
    argv = ["run", "--plan", str(plan), "--model", "vit-digits", "--prepare-only"]
    argv += ["--runs-dir", str(runs)]
    fragments = (f"{plan}: ", *fragments, "re-run `pipeplan plan`")
    refused([*argv, "--name", "x"], tmp_path, capsys, fragments)
    plan.write_text(json.dumps(pipelined_plan))  # the same plan untouched prepares
    assert cli.main([*argv, "--name", "ok"]) == 0, capsys.readouterr().err


@pytest.fixture(scope="module")
def alpha_plan(tmp_path_factory) -> dict:
    """A plan of α = 0.3 over 2 epochs of vit-digits (8 blocks): frozen layers 0, 4."""
    path = tmp_path_factory.mktemp("alpha") / "ap.json"
    argv = ["plan", "--profile", str(shipped_profile("vit-digits", "cpu")), "--nodes", "1"]
    argv += ["--devices-per-node", "2", "--epochs", "2", "--freeze", "alpha", "--alpha", "0.3"]
    argv += ["--global-batch", "64", "--samples", "1438", "--out", str(path)]
    assert cli.main(argv) == 0
    doc = json.loads(path.read_text())
    assert doc["inputs"]["freeze"] == {
        "source": "alpha",
        "alpha": 0.3,
        "path": None,
        "frozen_layers": [0, 4],
    }
    return doc


ALPHA_EDITS = {
    "alpha 0.9 beside α = 0.3's schedule": (
        {"alpha": 0.9},
        "inputs.freeze: frozen_layers has 4 at epoch 1, but source 'alpha' (alpha 0.9) freezes 9",
    ),
    # The eighteenth round: source and alpha said what did not make the schedule.
    "source none beside frozen layers": (
        {"source": "none", "alpha": None},
        "frozen_layers has 4 at epoch 1, but source 'none' freezes 0 there for this model's 8",
    ),
    "source autofreeze, whose earliest is later": (
        {"source": "autofreeze"},
        "but source 'autofreeze' (alpha 0.3) freezes",
    ),
    "alpha 0.31, the same schedule": ({"alpha": 0.31}, None),
    "the alpha of a schedule of the α bound removed": ({"alpha": None}, "'alpha' has no alpha"),
    "an alpha beside a list": ({"source": "list"}, "source 'list' has an alpha"),
    "alpha 1.5": ({"alpha": 1.5}, "inputs.freeze.alpha"),
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("case", ALPHA_EDITS)
def test_a_plan_whose_alpha_is_not_its_schedules_is_refused(alpha_plan, tmp_path, capsys, case):
    """Found by the fifteenth round: a plan of α = 0.3 (frozen 0, 4) with inputs.freeze.alpha
    edited to 0.9 was run (`run --plan --prepare-only`, exit 0): the plan said one schedule
    while its phases followed another. An alpha that gives the same schedule is the same plan."""
    edit, fragment = ALPHA_EDITS[case]
    doc = json.loads(json.dumps(alpha_plan))
    doc["inputs"]["freeze"].update(edit)
    path = tmp_path / "ap.json"
    path.write_text(json.dumps(doc))
    run = ["run", "--model", "vit-digits", "--prepare-only", "--runs-dir", str(tmp_path / "runs")]
    argv = [*run, "--plan", str(path), "--name", "x"]
    if fragment is None:
        assert cli.main(argv) == 0
    else:
        refused(argv, tmp_path, capsys, ("ap.json", fragment))


# ----------------------------------------------------------------- 8. a full disk (round 15)
# A file system cannot be filled from a test: each writer is made to fail the way it does on
# a full disk (the real exception, the real message), after writing part of its file.

NO_SPACE = os.strerror(errno.ENOSPC)


def safetensors_full(tensors, filename, metadata=None):
    """transformers' `safe_save_file` on a full disk: part of the file, then safetensors' own
    error (tried on a 3 MiB tmpfs)."""
    from safetensors import SafetensorError

    Path(filename).write_bytes(b"\0" * 4096)
    raise SafetensorError(f"Error while serializing: I/O error: {NO_SPACE} (os error 28)")


def config_full(self, path, use_diff=True):
    """transformers' config writer on a full disk: an OSError from its open file."""
    Path(path).write_text("{")
    raise OSError(errno.ENOSPC, NO_SPACE)


def ctrl_c(tensors, filename, metadata=None):
    Path(filename).write_bytes(b"\0" * 4096)
    raise KeyboardInterrupt


FULL_DISK = {"weights": safetensors_full, "config": config_full, "ctrl-c": ctrl_c}


def fail_writing(monkeypatch, how: str) -> None:
    """Make transformers' save_pretrained fail as `how` (a key of FULL_DISK) says."""
    import transformers
    import transformers.modeling_utils

    if how == "config":
        monkeypatch.setattr(transformers.PretrainedConfig, "to_json_file", config_full)
    else:
        monkeypatch.setattr(transformers.modeling_utils, "safe_save_file", FULL_DISK[how])


def entries(root: Path) -> list[str]:
    """Every path under `root`, dot-files included: what a failed write must not add to."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.mark.parametrize("how", FULL_DISK)
def test_an_export_that_cannot_be_written_leaves_nothing(tmp_path, monkeypatch, how):
    """Found by the fifteenth round: `export RUN --out DIR` on a full disk was a 38-line
    SafetensorError traceback, and `.tmp-DIR-PID/` stayed beside DIR (models.export caught
    only OSError). Any failure, Ctrl-C too, removes the temporary and the folders made for
    DIR; a failed write is one OutputError saying why."""
    from pipeplan import models
    from pipeplan.errors import OutputError

    seq = models.build("bert-synth")
    out = tmp_path / "new" / "deeper" / "model"
    fail_writing(monkeypatch, how)
    if how == "ctrl-c":
        with pytest.raises(KeyboardInterrupt):
            models.export(seq, out)
    else:
        with pytest.raises(OutputError) as err:
            models.export(seq, out)
        assert str(err.value) == f"{out}: write failed ({NO_SPACE})"
    assert entries(tmp_path) == []


def test_a_second_stop_in_an_exports_clean_up_leaves_no_staging_folder(
    finished_run, tmp_path, monkeypatch, capsys
):
    """Found by the sixty-third round: SIGHUP then SIGTERM back to back (`kill -HUP $P; kill
    $P`; a closing terminal, then a session manager's stop) during `export` left its
    half-written `.pipeplan-export-…/` beside --out: the second stop raised inside the
    first one's clean-up, and the line named the second. The first stop is acted on, the
    second ignored: the staging folder goes, and one line names SIGHUP."""
    import signal

    from pipeplan import models

    def stop(name: str) -> None:  # its handler (the command's) runs as os.kill returns
        os.kill(os.getpid(), getattr(signal, name))

    rmtree = shutil.rmtree

    def removing(path, *args, **kwargs):
        if Path(path).name.startswith(".pipeplan-export-"):
            stop("SIGTERM")  # as the first stop's clean-up starts
        rmtree(path, *args, **kwargs)

    monkeypatch.setattr(models, "_drop_ids_outside_vocabulary", lambda folder: stop("SIGHUP"))
    monkeypatch.setattr(models.shutil, "rmtree", removing)
    assert cli.main(["export", str(finished_run), "--out", str(tmp_path / "m")]) == 129
    assert capsys.readouterr().err == "pipeplan: stopped by SIGHUP\n"
    assert entries(tmp_path) == []


@pytest.mark.parametrize("where", ["made", "removed"])
@pytest.mark.parametrize("name", ["SIGTERM", "SIGINT"])
def test_a_stop_during_the_out_probe_leaves_no_probe_file(tmp_path, monkeypatch, name, where):
    """Found by the sixty-fourth round: a stop landing between the --out writability probe's
    making and its removal (`fileio.check_writable`) left an empty `.pipeplan-probe-…` in the
    user's folder for good. Every stop is held across the two: it acts once the probe is
    gone, and nothing is left."""
    import signal
    import tempfile

    from pipeplan import fileio
    from pipeplan.errors import Stopped

    def stopped(signum, frame):  # the command's handler
        raise Stopped(signum)

    signum = getattr(signal, name)
    mkstemp, unlink = tempfile.mkstemp, os.unlink

    def making(*args, **kwargs):
        made = mkstemp(*args, **kwargs)
        if where == "made":  # as its os.open returns
            signal.raise_signal(signum)
        return made

    def removing(path, *args, **kwargs):
        if where == "removed" and ".pipeplan-probe-" in str(path):
            signal.raise_signal(signum)
        unlink(path, *args, **kwargs)

    monkeypatch.setattr(fileio.tempfile, "mkstemp", making)
    monkeypatch.setattr(fileio.os, "unlink", removing)
    before = signal.signal(signal.SIGTERM, stopped)
    try:
        with pytest.raises(KeyboardInterrupt if name == "SIGINT" else Stopped):
            fileio.check_writable(tmp_path / "p.json")
    finally:
        signal.signal(signal.SIGTERM, before)
    assert entries(tmp_path) == []


@pytest.mark.parametrize("nameless", [True, False], ids=["O_TMPFILE", "named"])
def test_a_stop_as_data_codes_stderr_is_held_leaves_no_file_in_tmpdir(
    tmp_path, monkeypatch, nameless
):
    """Found by the sixty-fourth round (as the --out probe's): a stop landing between the
    temporary file that holds data code's descriptor 2 made and its name removed
    (`data.descriptor_2_held`) left `pipeplan-stderr-…` in TMPDIR for good. It has no name
    where the file system makes such a file (O_TMPFILE); elsewhere the stop is held between."""
    import contextlib
    import signal
    import tempfile

    from executor import data

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    if not nameless:
        monkeypatch.delattr(os, "O_TMPFILE")
    mkstemp = tempfile.mkstemp

    def making(*args, **kwargs):
        made = mkstemp(*args, **kwargs)
        signal.raise_signal(signal.SIGINT)  # Ctrl-C as its os.open returns
        return made

    monkeypatch.setattr(tempfile, "mkstemp", making)
    with contextlib.suppress(KeyboardInterrupt), data.descriptor_2_held([]):
        pass
    assert entries(tmp_path) == []


def test_an_export_removes_what_a_killed_export_left_beside_its_folder(tmp_path):
    """Found by the fifty-seventh round: `export` killed outright (SIGKILL) left its temporary
    folder, as large as the model, beside DIR, and every later export to DIR left it there.
    An export removes those of processes that are gone. By the fifty-eighth: it also removed
    a user's own folder named like one (`.tmp-DIR-PID`, contents and all). Only a folder named
    as an export names its own (its maker's boot, pid namespace, pid and start) and holding
    its mark goes; a live one's, another host's, an unmarked one and a user's stay."""
    import subprocess

    from executor.cache import process_start
    from pipeplan import models
    from pipeplan.spawn import owner_tag

    sleeper = subprocess.Popen(["sleep", "30"])
    boot, namespace, _, _ = owner_tag().split("-")
    gone = f"{boot}-{namespace}-{sleeper.pid}-{process_start(sleeper.pid)}"
    sleeper.kill()
    sleeper.wait()
    named = {
        "orphan": f".pipeplan-export-{gone}-0a1b2c3d",
        "live": f".pipeplan-export-{owner_tag()}-0a1b2c3d",
        "other host": f".pipeplan-export-{'f' * 8}-{gone.split('-', 1)[1]}-0a1b2c3d",
        "unmarked": f".pipeplan-export-{gone}-1a1b2c3d",
        "user's": f".tmp-model-{sleeper.pid}",
    }
    for kind, name in named.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "model.safetensors").write_bytes(b"x" * 1000)
        if kind != "unmarked":
            (tmp_path / name / models.EXPORT_MARK).touch()
    models.export(models.build("bert-synth"), tmp_path / "model")
    kept = [name for kind, name in named.items() if kind != "orphan"]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["model", *kept])
    assert not (tmp_path / "model" / models.EXPORT_MARK).exists()


@pytest.mark.parametrize(
    "command",
    [
        ["report", "{run}"],
        ["export", "{run}", "--out", "{tmp}/out"],
        ["run", "--resume", "{run}"],  # refused: it finished all its epochs
    ],
    ids=["report", "export", "resume refused"],
)
def test_a_command_on_a_run_removes_the_model_export_a_killed_run_left(
    finished_run, tmp_path, capsys, command
):
    """Found by the sixty-second round: `pipeplan run` killed outright (SIGKILL) as its ranks
    exported the model left `runs/NAME/.pipeplan-export-…/` (as large as the model) in a
    run that had trained all its epochs; the resume the README named as its cleaner is
    refused for such a run, and export, report and calibrate left it for good. Each command
    that reads or claims the run directory removes a run's export whose writer is gone (as
    `export` does beside its --out); a live writer's stays. Found by the sixty-third round:
    the same kill as rank 0 wrote summary.json left `.summary.json.….tmp`, which only a next
    write into the folder removed (a finished run has none): it goes too, a live one's stays.
    Found by the sixty-fourth round: the same kill as rank 0 wrote a checkpoint left
    `checkpoints/.tmp-step-N/`, which only a resume removed, and the resume was refused: it
    goes once its writer (named in it) is gone; a live writer's, or one naming none, stays."""
    import subprocess

    from executor.cache import process_start
    from pipeplan import models
    from pipeplan.spawn import owner_tag

    run = copy_run(finished_run, tmp_path)
    sleeper = subprocess.Popen(["sleep", "30"])
    boot, namespace, _, _ = owner_tag().split("-")
    gone = f"{boot}-{namespace}-{sleeper.pid}-{process_start(sleeper.pid)}"
    sleeper.kill()
    sleeper.wait()
    left, live = f".pipeplan-export-{gone}-0a1b2c3d", f".pipeplan-export-{owner_tag()}-0a1b2c3d"
    for name in (left, live):
        (run / name).mkdir()
        (run / name / "config.json").write_text("{}")
        (run / name / models.EXPORT_MARK).touch()
    staged = {owner: run / f".summary.json.{owner}-0a1b2c3d.tmp" for owner in (gone, owner_tag())}
    for path in staged.values():
        path.write_text("{")
    checkpoints = {owner: run / "checkpoints" / f".tmp-step-{97 + i}" for i, owner in
                   enumerate((gone, owner_tag(), None))}  # fmt: skip
    for owner, path in checkpoints.items():
        path.mkdir()
        (path / "model.pt").write_bytes(b"half")
        if owner is not None:
            (path / f".pipeplan-writer-{owner}").touch()
    argv = [part.format(run=run, tmp=tmp_path) for part in command]
    assert cli.main(argv) == (2 if "--resume" in argv else 0), capsys.readouterr().err
    assert not (run / left).exists() and (run / live / models.EXPORT_MARK).exists()
    assert not staged[gone].exists() and staged[owner_tag()].exists()
    assert not checkpoints[gone].exists()
    assert (checkpoints[owner_tag()] / "model.pt").exists() and checkpoints[None].exists()


def test_an_export_to_a_name_near_name_max_is_written(tmp_path):
    """Found by the fifty-eighth round: `export --out` of a name of 245 to 255 bytes, which
    the file system takes, failed "write failed (File name too long)" naming no flag: the
    temporary folder beside it was named after it, 11 bytes longer. It is named after the
    process now, and the export is written."""
    from pipeplan import models

    out = tmp_path / ("m" * 255)
    models.export(models.build("bert-synth"), out)
    assert (out / "config.json").is_file()


@pytest.mark.parametrize("name", ["p" * 255, "é" * 127 + "p"], ids=["ascii", "two-byte"])
def test_a_file_output_named_near_name_max_is_written(tmp_path, capsys, name):
    """Found by the fifty-eighth round: `plan --out` (and every file written atomically) of a
    name of 242 to 255 bytes failed "write failed (File name too long)": the temporary file
    beside it was the name and 14 bytes more. Its name part is cut to fit (at a byte, even
    inside a character)."""
    from pipeplan.formats import Plan, load

    out = tmp_path / name
    profile = shipped_profile("bert-tiny", "cpu")
    argv = ["plan", "--profile", str(profile), "--devices-per-node", "2", "--out", str(out)]
    assert cli.main(argv) == 0, capsys.readouterr().err
    assert load(Plan, out).phases and os.listdir(tmp_path) == [name]


def test_an_export_whose_tokenizer_cannot_be_written_leaves_nothing(tmp_path, monkeypatch):
    """Found by the thirty-eighth round: a text run's export now carries its tokenizer
    (models.export(tokenizer=…)); written into the same temporary folder as the weights, a
    full disk as the tokenizer is saved leaves no half-written DIR: one OutputError, and
    nothing under the folder it was to be made in."""
    from pipeplan import models
    from pipeplan.errors import OutputError

    class FullDisk:
        def save_pretrained(self, folder):
            (Path(folder) / "tokenizer.json").write_text("{")
            raise OSError(errno.ENOSPC, NO_SPACE)

    seq = models.build("bert-synth")
    out = tmp_path / "new" / "model"
    with pytest.raises(OutputError) as err:
        models.export(seq, out, tokenizer=FullDisk())
    assert str(err.value) == f"{out}: write failed ({NO_SPACE})"
    assert entries(tmp_path) == []


def test_the_runs_model_on_a_full_disk_is_pipeplans_own_line(tmp_path, monkeypatch):
    """Found by the fifteenth round: a full disk while `pipeplan run` saved model/ ended in
    "training failed on rank 0: SafetensorError: Error while serializing: …" and left
    `.tmp-model-PID/` in the run directory. The rank's line is now pipeplan's own, and the
    run directory holds only what it held."""
    from executor.faults import describe
    from executor.task import save_model
    from pipeplan import models
    from pipeplan.errors import OutputError

    seq = models.build("bert-synth")
    (tmp_path / "run.json").write_text("{}")
    fail_writing(monkeypatch, "weights")
    with pytest.raises(OutputError) as err:
        save_model(seq, tmp_path)
    assert describe(err.value, "raised") == f"{tmp_path / 'model'}: write failed ({NO_SPACE})"
    assert entries(tmp_path) == ["run.json"]


def test_sigterm_as_the_run_saves_its_model_leaves_nothing(tmp_path, monkeypatch):
    """Found by the twenty-fifth round (with the checkpoint's `.tmp-step-N/`): SIGTERM or
    SIGHUP to rank 0 as it saved model/ killed it at once and left `.tmp-model-PID/` (the
    model's size) in the run directory, where Ctrl-C removed it. The save takes it as Ctrl-C:
    the temporary goes, and the rank stops with Stopped."""
    import signal

    import transformers.modeling_utils

    from executor.task import save_model
    from pipeplan import models
    from pipeplan.errors import Stopped

    def stopped(tensors, filename, metadata=None):
        Path(filename).write_bytes(b"\0" * 4096)
        if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
            os.kill(os.getpid(), signal.SIGTERM)  # handled: raised here, at the next bytecode
        # Unhandled, the signal would kill this test's process: said instead.
        raise RuntimeError("SIGTERM would kill the rank here")

    seq = models.build("bert-synth")
    (tmp_path / "run.json").write_text("{}")
    monkeypatch.setattr(transformers.modeling_utils, "safe_save_file", stopped)
    with pytest.raises(Stopped):
        save_model(seq, tmp_path)
    assert entries(tmp_path) == ["run.json"]


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_pipeplan_export_on_a_full_disk_is_one_line(finished_run, tmp_path, monkeypatch, capsys):
    """Found by the fifteenth round (the command itself): exit 2, one line naming DIR and the
    full disk, nothing left where DIR would have been."""
    out = tmp_path / "out" / "e"
    fail_writing(monkeypatch, "weights")
    argv = ["export", str(finished_run), "--out", str(out)]
    refused(argv, [finished_run, tmp_path], capsys, f"{out}: write failed ({NO_SPACE})")
    assert entries(tmp_path) == []


@pytest.mark.parametrize(
    "exc, reason",
    [
        (OSError(errno.ENOSPC, NO_SPACE), NO_SPACE),
        (OSError(errno.EDQUOT, os.strerror(errno.EDQUOT)), os.strerror(errno.EDQUOT)),
        ("safetensors", NO_SPACE),
        (RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 576"), None),
        (RuntimeError("a bug"), None),
        (ValueError("a bug"), None),
        (KeyboardInterrupt(), None),
    ],
)
def test_what_a_failed_write_says(tmp_path, exc, reason):
    """Found by the fifteenth round: writers caught OSError alone, but safetensors and
    torch.save report a full disk as their own errors. `write_failure` words each (torch's,
    with no errno, by the space left where it wrote); a bug or Ctrl-C is no failed write."""
    from safetensors import SafetensorError

    from pipeplan.fileio import write_failure

    if exc == "safetensors":
        exc = SafetensorError(f"Error while serializing: I/O error: {NO_SPACE} (os error 28)")
    said = write_failure(exc, tmp_path)
    if isinstance(exc, RuntimeError) and "inline_container" in str(exc):
        # tmp_path's disk has room: torch's own words, not a guess at a full disk.
        assert said is not None and said.startswith("torch's file writer failed: [enforce fail")
    else:
        assert said == reason


# ----------------------------------------------------------------- 9. links where the cache goes
# (round 17) /dev/shm is writable by every user of a host, and the node cache's folder there
# had a name anyone could compute from the run directory's path: links planted in it had a run
# truncate and overwrite the files they point to. Each case is the cache's own code at unit
# level (what a rank of the run calls): the refusal is one PipeplanError naming the folder or
# file, which the run reports as its one line, and the victim is unchanged.

VICTIM = b"precious data\n"
ROW = (4, 8)  # float32 rows of 128 bytes


def planted(tmp_path: Path) -> tuple[Path, Path]:
    """(a victim folder holding `victim.txt`, that file), for links to point at."""
    folder = tmp_path / "victims"
    folder.mkdir()
    (folder / "victim.txt").write_bytes(VICTIM)
    return folder, folder / "victim.txt"


def node_cache(tmp_path: Path, memory: Path | None = None):
    """A node's cache as a run's leader makes it: rows in `memory` (/dev/shm's folder), a spill
    folder under the run directory, two rows of budget for ten samples (both files used)."""
    from executor.cache import ActivationCache

    memory = memory if memory is not None else tmp_path / "shm" / "pipeplan-node"
    spill = tmp_path / "run" / "cache" / "node0"
    (tmp_path / "run").mkdir(exist_ok=True)  # a cache never makes its run directory
    return ActivationCache(10, 2 * 128, spill, memory_dir=memory, name="node0")


def unchanged(folder: Path, victim: Path) -> None:
    assert victim.read_bytes() == VICTIM
    assert sorted(p.name for p in folder.iterdir()) == ["victim.txt"]


@pytest.mark.parametrize("where", ["memory", "spill"])
@pytest.mark.parametrize(
    "plant, why",
    [
        ("a link", "it is a symbolic link"),
        ("a file", "it is not a directory"),
        ("writable by all", "others may write in it (mode 0777)"),
    ],
)
def test_a_planted_cache_folder_is_refused(tmp_path, where, plant, why):
    """Found by the seventeenth round: with /dev/shm/pipeplan-<key>/ made beforehand (by
    anyone: its name was the run directory's hash), a run wrote its cache there, through the
    links in it. The cache's folders are now made 0700 or refused: a link, a file, a folder
    others may write in (or another user's) is named and nothing is written through it."""
    import torch

    from pipeplan.errors import OutputError

    folder, victim = planted(tmp_path)
    cache = node_cache(tmp_path)
    target = cache.memory_dir if where == "memory" else cache.spill_dir
    target.parent.mkdir(parents=True)
    if plant == "a link":
        target.symlink_to(folder, target_is_directory=True)
    elif plant == "a file":
        target.write_bytes(b"")
    else:
        target.mkdir()
        target.chmod(0o777)  # as /dev/shm itself: anyone could put a link in it
    with pytest.raises(OutputError) as refusal:
        cache.create(3, ROW, torch.float32)
    assert str(refusal.value).startswith(f"{target}: refused as the activation cache's folder")
    assert why in str(refusal.value) and "\n" not in str(refusal.value)
    unchanged(folder, victim)


@pytest.mark.parametrize("suffix", ["rows", "map", "spill"])
def test_a_link_planted_as_a_cache_file_is_never_written_through(tmp_path, suffix):
    """Found by the seventeenth round: `node0-v3.rows` (and `.map`) planted as links to
    victim.txt made it 12.5 MB of activation rows. The node's leader, which makes the files,
    now removes whatever has a cache file's name (the link, not its target) and makes the file
    anew (O_CREAT | O_EXCL | O_NOFOLLOW); the files are written and read as the cache's own."""
    import torch

    folder, victim = planted(tmp_path)
    cache = node_cache(tmp_path)
    for directory in (cache.memory_dir, cache.spill_dir):
        directory.mkdir(parents=True, mode=0o700)
    path = (cache.spill_dir if suffix == "spill" else cache.memory_dir) / f"node0-v3.{suffix}"
    path.symlink_to(victim)
    cache.create(3, ROW, torch.float32)
    assert not path.is_symlink() and stat.S_IMODE(path.stat().st_mode) == 0o600
    rows = torch.arange(10 * 32, dtype=torch.float32).reshape(10, *ROW)
    cache.store(torch.arange(10), rows, 3)
    assert torch.equal(cache.lookup(torch.arange(10))[0], rows)
    cache.close(unlink=True)
    unchanged(folder, victim)


def test_a_link_put_in_place_of_a_made_cache_file_is_refused_by_its_peers(tmp_path):
    """Found by the seventeenth round, the other side: a rank that attaches to the files the
    leader made opens them by name; a link found there is refused (O_NOFOLLOW), not followed."""
    import torch

    from pipeplan.errors import OutputError

    folder, victim = planted(tmp_path)
    leader, peer = node_cache(tmp_path), node_cache(tmp_path)
    leader.create(3, ROW, torch.float32)
    rows = leader.memory_dir / "node0-v3.rows"
    rows.unlink()
    rows.symlink_to(victim)
    with pytest.raises(OutputError, match=r"node0-v3\.rows: refused as a cache file \(it is a "):
        peer.attach(3, ROW, torch.float32)
    unchanged(folder, victim)


def test_a_cache_file_past_the_file_size_limit_names_the_limit(tmp_path):
    """Found by the sixtieth round: under `ulimit -f 7000` a run's AutoCache rows file (12.5 MB)
    failed "cannot create a cache file (File too large)", naming no limit, where every other
    write past it names it. The cache's line names it too."""
    import resource
    import signal

    import torch

    from pipeplan.errors import OutputError

    cache = node_cache(tmp_path)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    ignored = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # as the command ignores it
    resource.setrlimit(resource.RLIMIT_FSIZE, (64, hard))
    try:
        with pytest.raises(OutputError) as refused:
            cache.create(3, ROW, torch.float32)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, ignored)
    assert str(refused.value).endswith(
        ": cannot create a cache file (File too large: the file size limit, ulimit -f, is 64 bytes)"
    ), str(refused.value)


def test_the_node_cache_folder_is_new_and_private_each_time(tmp_path):
    """Found by the seventeenth round: the folder's name came from the run directory's path, so
    anyone could make it first. It is now made by the node's leader (os.mkdir: never one that
    exists) with a random name (its peers are told it), mode 0700."""
    from executor.cache import memory_dir_for

    shm = tmp_path / "shm"
    shm.mkdir()
    first, second = (memory_dir_for(tmp_path / "fallback", 1, root=shm) for _ in range(2))
    assert first != second and first.parent == second.parent == shm
    for made in (first, second):
        info = os.lstat(made)
        assert stat.S_ISDIR(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o700
        assert info.st_uid == os.getuid()


# ----------------------------------------------------------------- 10. memory (round 28)

READ_UNDER_A_CAP = """
import resource, sys
from pathlib import Path
from pipeplan.formats.base import read_input

used = next(int(line.split()[1]) for line in open("/proc/self/status") if line[:7] == "VmSize:")
cap = used * 1024 + (256 << 20)  # 256 MiB more than the process holds: far below the 1 GiB limit
resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
print(read_input(Path(sys.argv[1])))
"""


@pytest.mark.timeout(60)
def test_a_small_file_is_read_under_an_address_space_cap(tmp_path):
    """Found by the twenty-eighth round: `read_input` read `f.read(limit + 1)`, which allocates
    the limit (1 GiB by default) before reading, so under `ulimit -v` a 1 KB
    tokenizer_config.json was "out of memory reading it; run pipeplan with more memory". Now
    the read is sized from the file: it is read with 256 MiB to spare."""
    import subprocess
    import sys

    small = tmp_path / "tokenizer_config.json"
    small.write_text('{"model_max_length": 512}' + " " * 1000)
    done = subprocess.run(
        [sys.executable, "-c", READ_UNDER_A_CAP, str(small)],
        capture_output=True,
        text=True,
        timeout=50,
        cwd=Path(cli.__file__).parent,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == small.read_text().strip()


def test_a_file_read_past_its_size_still_stops_past_the_limit():
    """Found by the twenty-eighth round, the other side of sizing the read from the file: one
    that grew since it was looked at, or reports no size (a pipe), is read on in chunks, still
    no more than the limit and one byte (which tells it is past the limit)."""
    from pipeplan.formats.base import _read_at_most

    for written, limit, read in ((b"x" * 10, 4, b"xxxxx"), (b"abc", 4, b"abc")):
        reader, writer = os.pipe()
        os.write(writer, written)
        os.close(writer)
        with os.fdopen(reader, "rb") as f:
            assert _read_at_most(f, limit) == read


# ----------------------------------------------------------------- 11. bounds of predictions


def _slow(doc: dict) -> None:
    """Every timing 2e5 s (the format allows 1e6): a step of 4e6 s."""
    for layer in doc["layers"]:
        for t in layer["timings"]:
            t.update(fwd_s=2e5, bwd_s=2e5, fwd_nograd_s=2e5)
            t.update(fwd_spread_s=0.0, bwd_spread_s=0.0, fwd_nograd_spread_s=0.0)


def _calibrated_at_maxima(doc: dict) -> None:
    """The shipped timings, and a calibration at its format's own maxima: the optimizer's rate
    the most that prices the whole model's step within MAX_SECONDS (the sixty-fourth round)."""
    whole = sum(layer["param_bytes"] for layer in doc["layers"])
    doc["calibration"] = {
        **{f"{kind}_scale": 1e6 for kind in ("fwd", "bwd", "nograd")},
        **{f"{kind}_call_scale": 1e6 for kind in ("fwd", "bwd", "nograd")},
        "optimizer_s_per_byte": 1e6 / whole,
        "micro_batch_overhead_s": 1e6,
        "step_overhead_s": 1e6,
        "input_s_per_sample": 1e6,
        "runs": ["r"],
        "phases_used": 1,
        "steps_used": 2,
        "residual_median": 0.0,
        "residual_max": 0.0,
        # The links and the group rebuild null: unfitted, as calibrate says of them (and
        # writes them: every field, the fiftieth round's b R4).
        **dict.fromkeys(("allreduce", "p2p", "group_rebuild_s")),
        "not_fitted": dict.fromkeys(("allreduce", "p2p", "group_rebuild_s"), "not measured"),
    }


@pytest.mark.timeout(120)
@pytest.mark.parametrize("edit", [_slow, _calibrated_at_maxima], ids=["slow", "calibrated"])
def test_a_valid_profile_of_long_timings_runs_as_it_plans(tmp_path, capsys, edit):
    """Found by the twenty-ninth round: a profile whose timings are 2e5 s each (the format
    allows 1e6), or a calibration at its format's maxima, planned fine, but `run --profile` and
    `run --plan` of the plan `plan` wrote died in a pydantic traceback: the phase record held a
    predicted step to 1e6 s. Predictions are bounded by what valid inputs can produce
    (`MAX_PREDICTED_S`), in plans and run records alike: both runs prepare."""
    from pipeplan.formats import Plan, load

    doc = json.loads(shipped_profile("vit-digits", "cpu").read_text())
    edit(doc)
    profile = tmp_path / "long.json"
    profile.write_text(json.dumps(doc))
    plan = tmp_path / "long.plan.json"
    argv = ["plan", "--profile", str(profile), "--devices-per-node", "2", "--global-batch", "64"]
    assert cli.main([*argv, "--samples", "1438", "--epochs", "3", "--out", str(plan)]) == 0
    assert load(Plan, plan).phases[0].step_s > 1e6
    run = ["run", "--nproc", "2", "--model", "vit-digits", "--data", "digits", "--epochs", "3"]
    run += ["--profile", str(profile), "--prepare-only", "--runs-dir", str(tmp_path / "runs")]
    capsys.readouterr()
    assert cli.main([*run, "--name", "solved"]) == 0, capsys.readouterr().err
    assert cli.main([*run, "--plan", str(plan), "--name", "planned"]) == 0, capsys.readouterr().err


def test_a_calibrations_worst_residual_is_bounded(tmp_path, capsys):
    """Found by the seventy-first round: a calibration's residual_max took any finite number
    (1e300), where every other number of it has a range. A fitted step's |relative error| is
    at most MAX_RESIDUAL (a prediction within MAX_SECONDS of a step of MIN_MEASURED_S): that
    is read, past it is one line naming the field."""
    from pipeplan.formats import Profile, load
    from pipeplan.formats.profile import MAX_RESIDUAL

    doc = json.loads(shipped_profile("vit-digits", "cpu").read_text())
    _calibrated_at_maxima(doc)
    doc["calibration"].update(residual_max=MAX_RESIDUAL)
    profile = tmp_path / "cal.json"
    profile.write_text(json.dumps(doc))
    assert load(Profile, profile).calibration.residual_max == MAX_RESIDUAL
    doc["calibration"].update(residual_max=1e300)
    profile.write_text(json.dumps(doc))
    argv = ["preview", "--profile", str(profile), "--global-batch", "32", "--samples", "320"]
    refused(argv, tmp_path, capsys, ("calibration.residual_max", "less than or equal to"))


def _times_scaled(doc: dict, factor: float) -> dict:
    """`doc` (a plan) with every predicted time times `factor`: still consistent with itself."""

    def scaled(value):
        if isinstance(value, dict):
            return {k: v * factor if k.endswith("_s") else scaled(v) for k, v in value.items()}
        return [scaled(v) for v in value] if isinstance(value, list) else value

    return {
        **doc,
        "phases": scaled(doc["phases"]),
        "predicted_total_s": doc["predicted_total_s"] * factor,
    }


def test_a_plan_predicting_beyond_any_valid_input_is_refused_naming_the_field(
    self_plan, tmp_path, capsys
):
    """Found by the twenty-ninth round, the other side: a plan's times were any finite float,
    and a run's phase record refused a step above 1e6 s with a traceback. A plan predicting
    beyond what any valid profile can (`MAX_PREDICTED_S`) is refused as it loads, naming the
    field; the same plan scaled to a step of 1e7 s loads (a run refuses it as priced by
    another profile than its own, `check_plan_prices`: a profile of such timings runs, above)."""
    from pipeplan.formats import Plan, load

    argv = ["run", "--plan", "", "--prepare-only", "--runs-dir", str(tmp_path / "runs")]
    for factor, name in ((1e7, "long"), (1e43, "far")):
        plan = tmp_path / f"{name}.json"
        plan.write_text(
            json.dumps(_times_scaled(self_plan, factor / self_plan["phases"][0]["step_s"]))
        )
        argv[2] = str(plan)
        if name == "long":
            assert load(Plan, plan).phases[0].step_s == pytest.approx(1e7)
    fragments = ("far.json", "phases.0.step_s", "s is more than the 1e+40 s")
    refused([*argv, "--name", "far"], tmp_path, capsys, fragments)


@pytest.mark.parametrize("command", ["preview", "plan"])
def test_a_layer_out_of_memory_at_one_sample_is_refused_not_planned(tmp_path, capsys, command):
    """Found by the thirty-first round: a profile recording a layer out of memory at
    micro-batch size 1 (larger sizes timed) was planned at exactly that size: the planner's
    largest usable size (below every layer's smallest infeasible one) had a floor of 1. No
    size can run that layer: the profile is refused naming the layer."""
    doc = json.loads(shipped_profile("vit-digits", "cpu").read_text())
    timing = doc["layers"][3]["timings"][0]
    assert timing["micro_batch"] == 1
    for key in [k for k in timing if k.startswith(("fwd", "bwd"))]:
        timing[key] = None
    timing.update(feasible=False, error="out of memory")
    (tmp_path / "in").mkdir()
    path = tmp_path / "in" / "p.json"
    path.write_text(json.dumps(doc))
    argv = [command, "--profile", str(path), "--devices-per-node", "1", "--device-memory", "1GiB"]
    argv += ["--global-batch", "8", "--samples", "80", "--epochs", "1", "--freeze", "none"]
    if command == "plan":
        argv = [a for a in argv if a != "--freeze" and a != "none"] + ["--out", str(tmp_path / "p")]
    # The fifty-third round: the file and field named, as every other profile refusal does.
    said = f"{path}: profile layer 3 (block3) ran out of memory at micro-batch size 1 (layers.3"
    refused(argv, tmp_path, capsys, said)


LONG = "a" * 300  # longer than any file system's name (255 bytes on most)
LONG_OUTPUTS = {  # the command's argv (RUN: a finished run, P: a profile) → its output flag
    "export": (["export", "{RUN}", "--out", LONG], "--out"),
    "export, nested": (["export", "{RUN}", "--out", f"x/{LONG}/y"], "--out"),
    "plan": (["plan", "--profile", "{P}", *PREVIEW, "--out", LONG], "--out"),
    "calibrate": (["calibrate", "{RUN}", "--profile", "{P}", "--out", LONG], "--out"),
    "preview --plot": (["preview", "--profile", "{P}", *PREVIEW, "--plot", LONG], "--plot"),
    "report --plot": (["report", "{RUN}", "--plot", LONG], "--plot"),
    "run --runs-dir": (
        ["run", "--model", "vit-digits", "--prepare-only", "--name", "r", "--runs-dir", LONG],
        "--runs-dir",
    ),
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("case", LONG_OUTPUTS)
def test_an_output_name_too_long_names_the_flag(finished_run, tmp_path, capsys, monkeypatch, case):
    """Found by the thirty-sixth round: `export --out NAME` of a 300-character NAME said
    "<cwd>/NAME/run.json: File name too long", a file export never writes (the check that
    --out lies in no run directory looked for NAME/run.json); plan's and calibrate's --out,
    the --plot folders and run's --runs-dir (said of RUNS/NAME) were the same. Each output
    flag's path is held to the file system's name length first: one line naming the flag,
    its value and the name too long; nothing is made."""
    monkeypatch.chdir(tmp_path)
    argv, flag = LONG_OUTPUTS[case]
    profile = str(shipped_profile("vit-digits", "cpu"))
    argv = [a.replace("{RUN}", str(finished_run)).replace("{P}", profile) for a in argv]
    given = argv[argv.index(flag) + 1]
    nested = "" if given == LONG else f"{quoted(LONG, 40)}: "
    said = f"{flag} {quoted(given)}: file name too long ({nested}300 bytes; the file system takes"
    refused(argv, tmp_path, capsys, said)
    assert os.listdir(tmp_path) == []


DEEP = "a/" * 2100  # 4,200 bytes of short names: over the kernel's PATH_MAX (4,096)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("case", LONG_OUTPUTS)
def test_an_output_path_too_long_names_the_flag(finished_run, tmp_path, capsys, monkeypatch, case):
    """Found by the fifty-third round: a --runs-dir of thousands of short folders (each name
    fits, the whole path does not) said "<path>: File name too long" without the flag. The
    whole path is held to PATH_MAX too: one line naming the flag; nothing is made."""
    monkeypatch.chdir(tmp_path)
    argv, flag = LONG_OUTPUTS[case]
    profile = str(shipped_profile("vit-digits", "cpu"))
    argv = [a.replace("{RUN}", str(finished_run)).replace("{P}", profile) for a in argv]
    at = argv.index(flag) + 1
    argv[at] = argv[at].replace(LONG, DEEP + "z")
    said = f"{flag} {quoted(argv[at])}: path too long ("
    refused(argv, tmp_path, capsys, said)
    assert os.listdir(tmp_path) == []


@pytest.mark.timeout(60)
@pytest.mark.parametrize("case", ["export", "export, nested", "preview --plot", "report --plot"])
def test_an_output_folder_whose_files_would_pass_path_max_names_the_flag(
    finished_run, tmp_path, capsys, monkeypatch, case
):
    """Found by the fifty-seventh round: an export --out 30 bytes short of PATH_MAX passed the
    check of its own length, and its files' did not: the export was written (its files
    beyond any path a program can open) and the line said "File name too long" of no flag;
    --plot alike, or naming --out. A folder's files are held to PATH_MAX with it: one line
    naming the flag; nothing is made."""
    monkeypatch.chdir(tmp_path)
    argv, flag = LONG_OUTPUTS[case]
    profile = str(shipped_profile("vit-digits", "cpu"))
    argv = [a.replace("{RUN}", str(finished_run)).replace("{P}", profile) for a in argv]
    room = 4096 - 30 - len(os.fsencode(str(tmp_path))) - 1  # the folder's own path fits
    at = argv.index(flag) + 1
    argv[at] = "a/" * (room // 2 - 1) + "z" * (room % 2 + 2)
    assert len(os.fsencode(os.path.abspath(argv[at]))) == 4096 - 30
    said = f"{flag} {quoted(argv[at])}: path too long (4,066 bytes from /, and the files written"
    refused(argv, tmp_path, capsys, said)
    assert os.listdir(tmp_path) == []


RUN_PREPARED = ["--prepare-only", "--name", "r", "--nproc", "1"]
SLASHED = {  # a command given one input file ({F}) with a trailing slash: argv, what {F} holds
    "plan --profile": (["plan", "--profile", "{F}/", *PREVIEW, "--out", "o.json"], "profile"),
    "plan --profile, slash-dot": (
        ["plan", "--profile", "{F}/.", *PREVIEW, "--out", "o.json"],
        "profile",
    ),
    "preview --cluster": (
        ["preview", "--profile", "{P}", "--cluster", "{F}/", *PREVIEW],
        "cluster",
    ),
    "preview --freeze-schedule": (
        ["preview", "--profile", "{P}", "--freeze-schedule", "{F}/", *PREVIEW],
        "trajectory",
    ),
    "calibrate --profile": (["calibrate", "r", "--profile", "{F}/", "--out", "c.json"], "profile"),
    "run --profile": (
        ["run", "--model", "vit-digits", "--profile", "{F}/", *RUN_PREPARED],
        "profile",
    ),
    "run --plan": (["run", "--model", "vit-digits", "--plan", "{F}/", *RUN_PREPARED], "plan"),
    "profile MODEL": (["profile", "{F}/", "--out", "p.json"], "config"),
    "run --model": (["run", "--model", "{F}/", "--data", "synth-text", *RUN_PREPARED], "config"),
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("case", SLASHED)
def test_an_input_file_named_with_a_trailing_slash_is_not_read(tmp_path, capsys, monkeypatch, case):
    """Found by the thirty-seventh round: `plan --profile vd.json/` (vd.json a regular file)
    planned from vd.json and wrote its plan, as preview did with `--cluster c.json/` and
    calibrate with `--profile`: pathlib drops the trailing slash, while the system refuses
    the path (`open("vd.json/")`: Not a directory). Every input file is now checked as the
    text given: one line "vd.json/: not a directory (vd.json is a regular file)", exit 2,
    nothing written; a MODEL (`--model`, `profile MODEL`) with the slash names a folder, and
    its config.json there is "no such file (… is a regular file, not a folder)"."""
    monkeypatch.chdir(tmp_path)
    argv, holds = SLASHED[case]
    profile = shipped_profile("vit-digits", "cpu")
    contents = {
        "profile": profile.read_text(),
        "cluster": json.dumps(CLUSTER),
        "trajectory": "[0, 0, 3]",
        "config": json.dumps(BERT_CONFIG),
    }
    given = tmp_path / "in" / f"{holds}.json"
    given.parent.mkdir()
    if holds == "plan":  # a real plan of the model run names, so only its slash is wrong
        plan = ["plan", "--profile", str(profile), "--global-batch", "8", "--samples", "64"]
        assert cli.main([*plan, "--epochs", "1", "--out", str(given)]) == 0
        capsys.readouterr()
    else:
        given.write_text(contents[holds])
    argv = [a.replace("{F}", str(given)).replace("{P}", str(profile)) for a in argv]
    if holds == "config":
        said = f"{given}/config.json: no such file ({given} is a regular file, not a folder)"
    else:
        slashed = next(a for a in argv if a.startswith(f"{given}/"))
        said = f"pipeplan: error: {slashed}: not a directory ({given} is a regular file)"
    refused(argv, tmp_path, capsys, said)
    assert sorted(os.listdir(tmp_path)) == ["in"]


# ------------------------------------------------------------- --out naming a symbolic link

LINKS = {  # what the link points at, made under the test's folder → the link's target
    "a regular file": lambda root: root / "target.json",
    "nothing": lambda root: root / "missing.json",
    "a loop": lambda root: root / "link",  # the link itself
    "a device": lambda root: Path(os.devnull),
}
OUTS = {  # a command writing `--out`, in-process ({P}: a shipped profile)
    "plan": ["plan", "--profile", "{P}", *PREVIEW],
    "calibrate": ["calibrate", "{ROOT}/no-run", "--profile", "{P}"],
    "profile": ["profile", "vit-digits"],
}


@pytest.mark.parametrize("command", OUTS)
@pytest.mark.parametrize("points_at", LINKS)
def test_an_out_that_is_a_symbolic_link_is_refused(tmp_path, capsys, command, points_at):
    """Found by the forty-first round: `plan --out /dev/stdout`, standard output redirected to
    a file, passed the regular-file check (followed) and the write renamed its temporary file
    over the link /dev/stdout itself (exit 0, "wrote /dev/stdout"); calibrate's --out too,
    and any link (to a file, to nothing, a loop) was replaced by a file where --plot and
    export refuse one. Each --out that is a link is refused as they refuse it: one line,
    exit 2, nothing written, the link and what it points at unchanged."""
    (tmp_path / "target.json").write_text('{"kept": true}')
    link = tmp_path / "link"
    target = LINKS[points_at](tmp_path)
    link.symlink_to(target)
    profile = str(shipped_profile("vit-digits", "cpu"))
    argv = [a.replace("{P}", profile).replace("{ROOT}", str(tmp_path)) for a in OUTS[command]]
    refused([*argv, "--out", str(link)], tmp_path, capsys, f"{link}: is a symbolic link, not a")
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link", "target.json"]
    assert (tmp_path / "target.json").read_text() == '{"kept": true}'


def test_a_link_below_a_linked_folder_is_written_through_the_folder(tmp_path):
    """Only the last component of --out is held to be no link: a folder on its path that is a
    link leads where it points, as for every other path."""
    (tmp_path / "real").mkdir()
    (tmp_path / "via").symlink_to(tmp_path / "real", target_is_directory=True)
    profile = str(shipped_profile("vit-digits", "cpu"))
    out = tmp_path / "via" / "plan.json"
    assert cli.main(["plan", "--profile", profile, *PREVIEW, "--out", str(out)]) == 0
    assert json.loads((tmp_path / "real" / "plan.json").read_text())["schema_version"]


def test_the_writer_never_renames_over_a_link_made_after_the_check(tmp_path, monkeypatch):
    """Found by the forty-first round (defence in depth): a caller that checked its target
    (or forgot to) and a link put there before the rename: `write_files` looks again right
    before renaming, and refuses the link, leaving it and no temporary file."""
    from pipeplan import fileio
    from pipeplan.errors import OutputError

    out, victim = tmp_path / "out.json", tmp_path / "victim.json"
    victim.write_text("kept")
    staged = fileio._write_temporary

    def then_a_link(*args):
        tmp = staged(*args)
        out.symlink_to(victim)  # after `check_writable`, before the rename
        return tmp

    monkeypatch.setattr(fileio, "_write_temporary", then_a_link)
    with pytest.raises(OutputError, match=r"out\.json: is a symbolic link, not a file of its own"):
        fileio.write_atomic(out, "new")
    assert out.is_symlink() and victim.read_text() == "kept"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json", "victim.json"]


@pytest.mark.timeout(60)
def test_a_run_directory_whose_files_would_pass_path_max_names_runs_dir_and_name(
    tmp_path, capsys, monkeypatch
):
    """Found by the fifty-sixth round: a --runs-dir and --name each within the limits whose
    run directory's files would pass PATH_MAX said "--out '…/run.json': path too long", a
    flag `run` does not have, or "File name too long" with no flag. The run directory is held
    to PATH_MAX with room for the run's deepest file: one line naming both flags; nothing is
    made."""
    monkeypatch.chdir(tmp_path)
    deep = "a/" * ((4000 - len(str(tmp_path))) // 2)
    argv = ["run", "--model", "vit-digits", "--prepare-only", "--nproc", "1"]
    argv += ["--runs-dir", deep, "--name", "n" * 120]
    said = f"--runs-dir/--name {quoted(deep + 'n' * 120)}: path too long ("
    refused(argv, tmp_path, capsys, said)
    assert os.listdir(tmp_path) == []
