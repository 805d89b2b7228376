"""Text data and what a run builds from it, without processes: JSONL and CSV files, labels by
name or number, the held-out split, tokenization with padding (labels −100 at padding for a
causal LM), the model the data asks for, `module:function` from the current directory, and
every mistake as one line."""

import json
import re
import sys
from pathlib import Path

import pytest
import torch
from text_data import bert_checkpoint, make_tokenizer, reviews, write_jsonl

import cli
from executor import text
from executor.data import check_compatible
from executor.task import build_task
from pipeplan.errors import BadArgumentError, InputFileError
from pipeplan.formats import RunConfig
from pipeplan.models import IGNORE_INDEX, PADDING

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("text")
    return dict(
        tokenizer=make_tokenizer(root / "tok"),
        labelled=write_jsonl(root / "reviews.jsonl", reviews(50, seed=1)),
        plain=write_jsonl(root / "plain.jsonl", [{"text": r["text"]} for r in reviews(20, 2)]),
        checkpoint=bert_checkpoint(root / "bert", num_labels=2),
    )


def _one_line(error: type, call, *args, match: str) -> str:
    with pytest.raises(error, match=match) as info:
        call(*args)
    assert "\n" not in str(info.value)
    return str(info.value)


# --- reading -----------------------------------------------------------------------------


def test_one_file_holds_out_a_fifth_drawn_from_the_seed(files):
    corpus = text.read_corpus(str(files["labelled"]), seed=0)
    assert (len(corpus.train), len(corpus.eval)) == (40, 10)
    rows = reviews(50, seed=1)
    assert sorted(corpus.train + corpus.eval) == sorted(r["text"] for r in rows)
    assert corpus.label_names == ["negative", "positive"] and corpus.num_labels == 2
    by_text = {r["text"]: r["label"] for r in rows}
    assert [corpus.label_names[i] for i in corpus.eval_labels] == [by_text[t] for t in corpus.eval]
    assert text.read_corpus(str(files["labelled"]), seed=0) == corpus  # deterministic
    assert text.read_corpus(str(files["labelled"]), seed=1).eval != corpus.eval


def test_csv_and_two_files_train_then_eval(tmp_path):
    train = tmp_path / "train.csv"
    train.write_text('text,label\n"great, fun",1\nawful,0\nfine film,2\n', encoding="utf-8")
    held = tmp_path / "eval.csv"
    held.write_text("label,text\n0,dull\n", encoding="utf-8")
    corpus = text.read_corpus(f"{train},{held}")
    assert corpus.train == ["great, fun", "awful", "fine film"] and corpus.eval == ["dull"]
    assert (corpus.train_labels, corpus.eval_labels) == ([1, 0, 2], [0])
    assert corpus.label_names is None and corpus.num_labels == 3
    assert text.is_text_spec(f"{train},{held}") and not text.is_text_spec("mod:load")


def test_plain_text_has_no_labels(files):
    corpus = text.read_corpus(str(files["plain"]))
    assert not corpus.labelled and corpus.train_labels is None and len(corpus.train) == 16


@pytest.mark.parametrize(
    "content, match",
    [
        ('{"text": "a", "label": 1}\n{"text": "b", \n', r"bad\.jsonl:2: not a JSON object"),
        ('{"text": "a"}\n[1, 2]\n', r"bad\.jsonl:2: expected an object"),
        ('{"label": 1}\n', r"bad\.jsonl:1: expected an object with a string \"text\""),
        ('{"text": "a", "label": 1}\n{"text": "b"}\n', "some rows have a label"),
        ('{"text": "a", "label": -1}\n', r"bad\.jsonl:1: a label is an integer ≥ 0"),
        ("\n\n", "no rows of text"),
    ],
)
def test_malformed_files_are_one_line_naming_file_and_line(tmp_path, content, match):
    path = tmp_path / "bad.jsonl"
    path.write_text(content, encoding="utf-8")
    _one_line(InputFileError, text.read_corpus, str(path), match=match)


@pytest.mark.parametrize("suffix", [".jsonl", ".csv"])
def test_a_byte_that_is_not_utf8_is_named_by_the_files_line_and_offset(tmp_path, suffix):
    """Found by the sixty-first round: a bad byte past the decoder's first chunk (8 KB) was
    said to be "in position 127" of the chunk, where the file holds plain ASCII, with no line.
    Now its line and its byte offset in the file, CRLF line ends counted as one."""
    rows = [
        f"good film number {i},{i % 2}"
        if suffix == ".csv"
        else json.dumps({"text": f"good film number {i}", "label": i % 2})
        for i in range(3000)
    ]
    lines = [row.encode() for row in (["text,label"] if suffix == ".csv" else []) + rows]
    lines[2000] = lines[2000].replace(b"good", b"caf\xe9", 1)
    data = b"\r\n".join(lines) + b"\r\n"
    path = tmp_path / f"big{suffix}"
    path.write_bytes(data)
    said = _one_line(InputFileError, text.read_corpus, str(path), match="not UTF-8 text")
    assert said.startswith(f"{path}:2001: not UTF-8 text (byte 0xe9 at offset ")
    offset = data.index(b"\xe9")
    assert f"at offset {offset} of the file" in said


def test_a_json_error_is_placed_in_the_files_line_not_the_rows_text(tmp_path):
    """Found by the sixty-first round: a row ending too soon at line 15001 read "(Expecting
    ',' delimiter: line 2 column 1 (char 27))", json counting lines within the row's text.
    Now a column of the file's line, or its end."""
    path = tmp_path / "bad.jsonl"
    path.write_text('{"text": "a", "label": 1}\n{"text": "b" "label": 0}\n{"text": "c"\n')
    said = _one_line(InputFileError, text.read_corpus, str(path), match="not a JSON object")
    assert said == f"{path}:2: not a JSON object (Expecting ',' delimiter at column 14)"
    path.write_text('{"text": "a", "label": 1}\n{"text": "c"\n')
    said = _one_line(InputFileError, text.read_corpus, str(path), match="not a JSON object")
    assert said == f"{path}:2: not a JSON object (Expecting ',' delimiter at the end of the line)"


def test_a_memory_error_decoding_a_line_is_one_line(tmp_path, monkeypatch):
    """Found by the eighteenth round: every JSON reader shares one way to fail, a MemoryError
    while decoding (a line of 900 MB under `ulimit -v`); a data line's was a traceback.
    Simulated: one line naming the file and line."""

    def out_of_memory(*args, **kwargs):
        raise MemoryError

    path = write_jsonl(tmp_path / "r.jsonl", reviews(4, seed=1))
    monkeypatch.setattr(text, "json_loads", out_of_memory)
    _one_line(InputFileError, text.read_corpus, str(path), match=r"r\.jsonl:1: out of memory")


@pytest.mark.parametrize(
    "header, said",
    [
        ("sentence,label", "the header row reads ['sentence', 'label'], with no 'text' column"),
        # The fifty-second round: what it found and why, for a capital or another separator.
        ("Text,Label", "reads ['Text', 'Label'], with no 'text' column; column names are lower"),
        ("text;label", "reads ['text;label'], with no 'text' column; columns are separated by"),
        ("text\tlabel", "with no 'text' column; columns are separated by commas"),
    ],
)
def test_csv_needs_a_text_column_and_files_must_exist(tmp_path, header, said):
    path = tmp_path / "bad.csv"
    path.write_text(f"{header}\nhello,1\n", encoding="utf-8")
    _one_line(InputFileError, text.read_corpus, str(path), match=re.escape(said))
    _one_line(InputFileError, text.read_corpus, str(tmp_path / "no.jsonl"), match="no such file")


# --- tokenizing and the model the data asks for -----------------------------------------


def _config(files, data, **options) -> RunConfig:
    return RunConfig(model=str(files["checkpoint"]), data=data, seq_len=12, **options)


def test_labelled_text_builds_a_padded_classifier_with_named_labels(files):
    cfg = _config(files, str(files["labelled"]), tokenizer=str(files["tokenizer"]))
    seq, data = build_task(cfg)
    assert seq.task == "classification" and seq.padding_mask and data.padded
    assert seq.num_labels == 2 and seq.hf_model.config.id2label == {0: "negative", 1: "positive"}
    ids, labels = data.train.inputs, data.train.labels
    assert ids.shape == (40, 12) and ids.dtype == torch.int64 and labels.shape == (40,)
    padding = ids == PADDING  # what the tokenizer padded, on the right
    assert padding.any() and not padding[:, 0].any()
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(files["tokenizer"], local_files_only=True)
    corpus = text.read_corpus(cfg.data, cfg.seed)
    expected = tok(corpus.train, padding="max_length", truncation=True, max_length=12)
    assert ids.masked_fill(padding, 0).tolist() == expected["input_ids"]
    assert (~padding).long().tolist() == expected["attention_mask"]


def test_plain_text_trains_a_causal_lm_with_padding_ignored(files):
    cfg = RunConfig(
        model="llama-tiny", data=str(files["plain"]), tokenizer=str(files["tokenizer"]), seq_len=12
    )
    seq, data = build_task(cfg)
    assert seq.task == "causal-lm" and seq.padding_mask
    ids, labels = data.train.inputs, data.train.labels
    padding = ids == PADDING
    assert torch.equal(labels[~padding], ids[~padding]) and (ids[~padding] >= 0).all()
    assert (labels[padding] == IGNORE_INDEX).all() and padding.any()
    check_compatible(data, seq)


def test_a_build_from_a_checkpoint_is_the_model_the_folders_weights_build(files):
    """Found by the twentieth round: a resume loaded the model folder's weights only to
    overwrite every parameter with the checkpoint's, and refused a folder whose weights were
    moved away since. A resume (like an export) now draws the model at random: nothing else
    of the model comes from the weights file, so once the parameters are the checkpoint's the
    two builds are one model, buffers, config and outputs alike."""
    cfg = _config(files, str(files["labelled"]), tokenizer=str(files["tokenizer"]))
    loaded, data = build_task(cfg)
    drawn, _ = build_task(cfg, from_checkpoint=True)
    pairs = list(zip(loaded.layers.parameters(), drawn.layers.parameters(), strict=True))
    assert not all(torch.equal(a, b) for a, b in pairs)  # drawn: not the folder's weights
    with torch.no_grad():
        for a, b in pairs:  # what `checkpoint.restore` does: every parameter, by layer
            b.copy_(a)
    ours, theirs = loaded.hf_model.state_dict(), drawn.hf_model.state_dict()
    assert list(ours) == list(theirs) and all(torch.equal(ours[k], theirs[k]) for k in ours)
    assert loaded.config_json() == drawn.config_json()
    # What save_pretrained writes: from_pretrained also records the folder, which it does not.
    written = [m.hf_model.config.to_dict() for m in (loaded, drawn)]
    for config in written:
        config.pop("_name_or_path")
    assert written[0] == written[1]
    loaded.layers.eval(), drawn.layers.eval()
    with torch.no_grad():
        assert torch.equal(loaded.forward(data.eval.inputs), drawn.forward(data.eval.inputs))


def test_the_model_directory_holds_the_tokenizer_by_default(files, tmp_path):
    model = bert_checkpoint(tmp_path / "with-tok")
    make_tokenizer(model)
    seq, _ = build_task(RunConfig(model=str(model), data=str(files["labelled"]), seq_len=12))
    assert seq.padding_mask
    message = _one_line(
        BadArgumentError, build_task, _config(files, str(files["labelled"])), match="--tokenizer"
    )
    assert "nothing is downloaded" in message


@pytest.mark.parametrize(
    "data, options, match",
    [
        ("plain", dict(task="classification"), "needs labels"),
        ("plain", {}, "'causal-lm' is not available for bert"),
        # The fifty-fourth round: the data named too (`--data train`, meant train.jsonl).
        ("synth-text", {}, "--tokenizer applies to text files: .*, not 'synth-text'"),
    ],
)
def test_what_the_data_cannot_train_is_one_line(files, data, options, match):
    spec = "synth-text" if data == "synth-text" else str(files[data])
    cfg = _config(files, spec, tokenizer=str(files["tokenizer"]), **options)
    with pytest.raises((BadArgumentError, InputFileError), match=match) as info:
        build_task(cfg)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    "spec, fragment",
    [
        ("{f},{f},{f}", "names 3 files"),
        ("{f},", "names no file after its comma"),
        (",{f}", "names no file before its comma"),
        ("{f},eval.txt", "is not two text files"),
        # The fifty-eighth round: " {f}: no such file", its space unseen, of a file there.
        ("{f}, {f}", "has space around it (a quoting mistake?)"),
    ],
)
def test_data_of_other_than_one_or_two_text_files_names_data(
    files, tmp_path, capsys, spec, fragment
):
    """Found by the twentieth round: `--data A,B,C` or `--data A,` with --tokenizer said
    "--tokenizer applies to text files" (they are text files), without it "unknown data". A
    comma separates TRAIN from EVAL, so a file whose name holds one cannot be given: said."""
    argv = ["run", "--model", "llama-tiny", "--tokenizer", str(files["tokenizer"])]
    argv += ["--data", spec.format(f=files["plain"]), "--prepare-only"]
    assert cli.main([*argv, "--runs-dir", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("pipeplan: error: --data: "), err
    assert fragment in err[0] and "TRAIN,EVAL" in err[0] and "holds a comma" in err[0]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("other", ["same", "link", "spelling", "hard link"])
def test_one_file_as_training_and_held_out_data_is_refused(files, tmp_path, other):
    """Found by the twentieth round: `--data TRAIN,TRAIN` was accepted silently, the held-out
    rows the very rows trained on; also through a link or another spelling of the path."""
    train = files["plain"]
    if other == "link":
        (tmp_path / "l.jsonl").symlink_to(train)
    elif other == "hard link":
        (tmp_path / "l.jsonl").hardlink_to(train)
    second = {"same": train, "spelling": train.parent / ".." / train.parent.name / train.name}
    cfg = RunConfig(
        model="llama-tiny",
        data=f"{train},{second.get(other, tmp_path / 'l.jsonl')}",
        tokenizer=str(files["tokenizer"]),
        seq_len=12,
    )
    _one_line(BadArgumentError, build_task, cfg, match="--data names one file twice")


def test_labelled_text_for_a_causal_lm_says_its_labels_are_not_used(files, caplog):
    """Found by the twentieth round: `--task causal-lm` on labelled text dropped the labels
    without a word. The task is the user's choice, so it trains, saying so in one line (once:
    a rank's build, `quiet`, says nothing)."""
    cfg = RunConfig(
        model="llama-tiny",
        data=str(files["labelled"]),
        tokenizer=str(files["tokenizer"]),
        seq_len=12,
        task="causal-lm",
    )
    with caplog.at_level("WARNING", logger="pipeplan"):
        seq, _ = build_task(cfg)
        build_task(cfg, quiet=True)
    said = [r.getMessage() for r in caplog.records if "labels" in r.getMessage()]
    assert seq.task == "causal-lm"
    assert said == [
        f"{files['labelled']}: --task causal-lm trains on the text only; its labels are not used"
    ]


def test_the_tokenizer_must_pad_with_the_models_pad_token(files, tmp_path):
    model = bert_checkpoint(tmp_path / "pad1")
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "pad_token_id": 1}))
    cfg = RunConfig(
        model=str(model), data=str(files["labelled"]), tokenizer=str(files["tokenizer"])
    )
    _one_line(BadArgumentError, build_task, cfg, match="pads with id 0 but .* pad_token_id is 1")


def test_a_config_without_weights_needs_init_random(files, tmp_path, capsys):
    config_only = tmp_path / "config-only"
    config_only.mkdir()
    (config_only / "config.json").write_text((files["checkpoint"] / "config.json").read_text())
    args = ["run", "--model", str(config_only), "--data", "synth-text", "--runs-dir", str(tmp_path)]
    assert cli.main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pass --init random" in err
    seq, _ = build_task(RunConfig(model=str(config_only), data="synth-text", init="random"))
    assert seq.num_labels == 2


# --- module:function ---------------------------------------------------------------------


def test_a_module_in_the_current_directory_is_found(tmp_path, monkeypatch):
    (tmp_path / "mydata_here.py").write_text(
        "import torch\n"
        "from executor.data import TensorPairs\n"
        "def load(seed=0):\n"
        "    x = torch.randint(3, 512, (40, 32), generator=torch.Generator().manual_seed(seed))\n"
        "    return TensorPairs(x, torch.arange(40) % 3), TensorPairs(x[:8], torch.arange(8) % 3)\n"
    )
    monkeypatch.chdir(tmp_path)
    path_before = list(sys.path)
    try:
        seq, data = build_task(RunConfig(model="bert-synth", data="mydata_here:load"))
    finally:
        sys.modules.pop("mydata_here", None)
    assert sys.path == path_before  # found for the import only
    assert seq.num_labels == 3 and len(data.train) == 40  # the head sized from the labels


def test_the_worked_example_is_deterministic_and_fits_bert_synth():
    cfg = RunConfig(model="bert-synth", data=f"{ROOT}/examples/reviews.py:load", seed=4)
    data = build_task(cfg)[1]
    again = build_task(cfg)[1]
    assert len(data.train) == 2000 and len(data.eval) == 400
    for i in (0, 7, 1999):
        x, y = data.train[i]
        assert torch.equal(x, again.train[i][0]) and int(y) == int(again.train[i][1])
        assert x.shape == (32,) and x.dtype == torch.int64 and y.dim() == 0
    assert {int(data.eval[i][1]) for i in range(40)} == {0, 1}


HUGE_LINE = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
from executor.task import build_task
from pipeplan.formats import RunConfig
seq, data = build_task(RunConfig(model=sys.argv[1], data=sys.argv[2], seq_len=12,
                                 tokenizer=sys.argv[3], seed=0))
print(data.train.inputs.tolist() + data.eval.inputs.tolist())
"""


@pytest.mark.long
@pytest.mark.timeout(120)
def test_a_huge_line_is_cut_before_the_tokenizer_sees_it(files, tmp_path):
    """Found by an independent round: a 100 MB text made the tokenizer abort the process on a
    1.6 GB allocation (exit 134), since it encodes a whole text before truncating. Under a
    4 GiB address-space cap the run's data builds, and the long row's ids are those of its
    first words (what lies beyond --seq-len tokens is cut either way)."""
    import subprocess

    rows = reviews(10, seed=3)
    longer = [{**rows[0], "text": rows[0]["text"] + " word" * 100}, *rows[1:]]
    short = write_jsonl(tmp_path / "short.jsonl", longer)  # already past 12 tokens
    longest = [{**rows[0], "text": rows[0]["text"] + " word" * 20_000_000}, *rows[1:]]
    huge = write_jsonl(tmp_path / "huge.jsonl", longest)
    assert huge.stat().st_size > 100_000_000
    out = []
    for data in (short, huge):
        argv = [files["checkpoint"], data, files["tokenizer"]]
        done = subprocess.run(
            [sys.executable, "-c", HUGE_LINE, *map(str, argv)],
            capture_output=True,
            text=True,
            timeout=100,
            cwd=ROOT,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        out.append(done.stdout)
    assert out[0] == out[1]


# --- label spellings (thirteenth round) ---------------------------------------------------


def _labelled_file(path: Path, labels: list[str]) -> Path:
    """Rows of one text with `labels` as written: a JSONL string, or a raw CSV cell."""
    if path.suffix == ".csv":
        path.write_text("text,label\n" + "".join(f"the film,{lab}\n" for lab in labels))
    else:
        path.write_text(
            "".join(json.dumps({"text": "the film", "label": lab}) + "\n" for lab in labels)
        )
    return path


@pytest.mark.parametrize(
    "suffix, other",
    [(".jsonl", " a"), (".jsonl", "a\u00a0"), (".jsonl", "a\t"), (".csv", " a"), (".csv", "a ")],
)
def test_labels_differing_only_by_whitespace_are_refused_not_merged(tmp_path, suffix, other):
    """Found by the thirteenth round: "a" and " a" were read as one class (case and NFC/NFD
    are kept apart, whitespace was stripped silently): 'data has 1 class'. Now the second
    spelling is refused, naming both rows."""
    path = _labelled_file(tmp_path / f"d{suffix}", ["a", "b", other, "b"] * 3)
    first = 2 if suffix == ".csv" else 1  # the CSV header is line 1
    spelt, at = re.escape(repr(other)), re.escape(f"d{suffix}")
    match = f"{at}:{first + 2}: the label {spelt} is read as 'a', as .*{at}:{first}'s 'a'"
    _one_line(InputFileError, text.read_corpus, str(path), match=match)


def test_a_spelling_differing_across_the_two_files_is_refused(tmp_path):
    """TRAIN,EVAL are one corpus: a name spelt "a" in one and " a" in the other is refused."""
    train = _labelled_file(tmp_path / "train.jsonl", ["a", "b"] * 3)
    eval_ = _labelled_file(tmp_path / "eval.csv", [" a", "b"])
    _one_line(
        InputFileError, text.read_corpus, f"{train},{eval_}", match=r"eval\.csv:2: .*train\.jsonl:1"
    )


LOOKALIKES = {  # a label a reader cannot tell from "café" / "pos", and how it differs
    "NFD beside NFC": ("caf\u00e9", "cafe\u0301"),
    "zero-width space": ("pos", "pos\u200b"),
    "zero-width joiner inside": ("pos", "po\u200ds"),
    "byte order mark": ("pos", "\ufeffpos"),
    "soft hyphen": ("pos", "p\u00ados"),
    "fullwidth letter": ("pos", "\uff50os"),
    "zero-width space and a space": ("pos", " pos\u200b "),
}


@pytest.mark.parametrize("suffix", [".jsonl", ".csv"])
@pytest.mark.parametrize(("first", "other"), LOOKALIKES.values(), ids=LOOKALIKES.keys())
def test_labels_a_reader_cannot_tell_apart_are_refused_not_two_classes(
    tmp_path, suffix, first, other
):
    """Found by the fourteenth round: "café" spelt NFC in some rows and NFD in others, or
    "pos" beside "pos" with a zero-width space, became two classes that print alike
    (label_names ['café', 'café', 'negative']). The second spelling is refused, naming both
    rows, with escapes that show the difference."""
    path = _labelled_file(tmp_path / f"d{suffix}", [first, "neg", other, "neg"] * 3)
    row = 2 if suffix == ".csv" else 1  # the CSV header is line 1
    at = re.escape(f"d{suffix}")
    seen, earlier = re.escape(ascii(other.strip())), re.escape(ascii(first))
    match = f"{at}:{row + 2}: the label {seen} looks the same as .*{at}:{row}'s {earlier}"
    message = _one_line(InputFileError, text.read_corpus, str(path), match=match)
    assert message.endswith("spell each label one way")


INVISIBLE = {
    "zero-width space": "\u200b",
    "byte order mark and spaces": " \ufeff ",
    "soft hyphen": "\u00ad",
}


@pytest.mark.parametrize("suffix", [".jsonl", ".csv"])
@pytest.mark.parametrize("label", INVISIBLE.values(), ids=INVISIBLE.keys())
def test_a_label_of_invisible_characters_only_is_refused(tmp_path, suffix, label):
    """Left by the fourteenth round: a label made only of format characters (a zero-width
    space) was a class whose name prints as nothing, where an empty label is refused."""
    path = _labelled_file(tmp_path / f"d{suffix}", ["pos", "neg", label, "neg"] * 3)
    row = 4 if suffix == ".csv" else 3
    match = f"d{re.escape(suffix)}:{row}: a label is an integer ≥ 0 or a name, not "
    _one_line(InputFileError, text.read_corpus, str(path), match=match)


@pytest.mark.parametrize(
    "label, shown", [(True, "true"), (False, "false"), ({"a": None}, '{"a": null}'), (-1, "-1")]
)
def test_a_json_label_that_is_no_label_is_shown_as_the_file_writes_it(tmp_path, label, shown):
    """Found by the sixty-fourth round: a JSON label `true` was refused as "… not True",
    Python's spelling of it, not the file's. Now the value is quoted in JSON."""
    path = _labelled_file(tmp_path / "d.jsonl", ["pos", "neg", label, "neg"] * 3)
    match = f"d.jsonl:3: a label is an integer ≥ 0 or a name, not {re.escape(shown)}$"
    _one_line(InputFileError, text.read_corpus, str(path), match=match)


# A label holding a character that breaks its line or reorders what follows, and its code.
CONTROLS = {
    "right-to-left override": ("a\u202eb", "U+202E"),
    "isolate": ("\u2066pos\u2069", "U+2066"),
    "line feed inside": ("a\nb", "U+000A"),
    "escape": ("a\x1b[31mb", "U+001B"),
}


@pytest.mark.parametrize("suffix", [".jsonl", ".csv"])
@pytest.mark.parametrize("label", CONTROLS, ids=CONTROLS.keys())
def test_a_label_holding_a_control_or_bidi_character_is_refused(tmp_path, suffix, label):
    """Found by the twentieth round: a label name "a\u202e" or "a\nb" was a class (its name
    printed reversed, or on two lines, wherever the exported id2label is shown), where one of
    invisible characters only is refused. One line naming the row and the character; the rule
    a model config's id2label is held to as well (`base.label_name_problem`)."""
    written, code = CONTROLS[label]
    cell = f'"{written}"' if suffix == ".csv" else written  # a CSV line feed is quoted
    path = _labelled_file(tmp_path / f"d{suffix}", ["pos", "neg", cell, "neg"] * 3)
    row = 4 + ("\n" in written) if suffix == ".csv" else 3  # a CSV row: its last line
    match = f"d{re.escape(suffix)}:{row}: the label holds the (bidi control|control character) "
    assert code in _one_line(InputFileError, text.read_corpus, str(path), match=match)


# Names of other scripts a data label may be, which the exported id2label then holds: Persian
# with a zero-width non-joiner, an emoji family joined by zero-width joiners, Hebrew after a
# right-to-left mark, case kept, inner spaces.
FOREIGN_NAMES = ["\u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645", "\U0001f468\u200d\U0001f469"]
FOREIGN_NAMES += ["\u200f\u05e9\u05dc\u05d5\u05dd", "Pos", "pos", "very good"]


def test_every_name_the_data_gives_is_one_a_config_reads_back(tmp_path):
    """Found by the twentieth round, beside the refusals above: a config's id2label is held to
    the data's label rule, so a run's exported model (its id2label the data's names) must read
    back. The names of a corpus pass `modelconfig.label_map_problem` as id2label and label2id."""
    from pipeplan.formats.modelconfig import label_map_problem

    path = _labelled_file(tmp_path / "d.jsonl", FOREIGN_NAMES * 2)
    names = text.read_corpus(f"{path},{path}").label_names
    assert sorted(names) == sorted(FOREIGN_NAMES)
    config = {"id2label": dict(enumerate(names)), "label2id": {n: i for i, n in enumerate(names)}}
    assert label_map_problem(json.loads(json.dumps(config))) is None


def test_a_lookalike_across_the_two_files_is_refused(tmp_path):
    """TRAIN,EVAL are one corpus: NFC "café" in one and NFD in the other is refused."""
    train = _labelled_file(tmp_path / "train.csv", ["caf\u00e9", "neg"] * 3)
    eval_ = _labelled_file(tmp_path / "eval.jsonl", ["neg", "cafe\u0301"])
    _one_line(
        InputFileError,
        text.read_corpus,
        f"{train},{eval_}",
        match=r"eval\.jsonl:2: the label 'cafe\\u0301' looks the same as .*train\.csv:2's",
    )


def test_case_stays_a_difference_and_one_spelling_is_kept_as_written(tmp_path):
    """Refusing lookalikes joins nothing: "Pos" and "pos" stay two classes, and a corpus
    that spells "café" NFD throughout keeps that spelling (not normalised to NFC)."""
    cased = text.read_corpus(str(_labelled_file(tmp_path / "c.jsonl", ["Pos", "pos"] * 5)))
    assert cased.label_names == ["Pos", "pos"]
    nfd = _labelled_file(tmp_path / "n.csv", ["cafe\u0301", "neg"] * 5)
    assert text.read_corpus(str(nfd)).label_names == ["cafe\u0301", "neg"]


def test_one_spelling_with_spaces_is_still_the_name_without_them(tmp_path):
    """A CSV written "a, b" style spells every label with a leading space: read as the names
    without it, as before (refusing ambiguity, not the style)."""
    path = _labelled_file(tmp_path / "d.csv", [" pos", " neg"] * 5)
    corpus = text.read_corpus(str(path))
    assert corpus.label_names == ["neg", "pos"]


@pytest.mark.timeout(60)
def test_a_classifiers_export_pads_on_the_right_as_the_run_did_and_a_causal_lm_keeps_its_side(
    tmp_path,
):
    """Found by the fiftieth round (a R5): the export kept a tokenizer's left padding, so a
    GPT-2 classifier batched with its own export's tokenizer shifted its absolute positions
    and missed the run's held-out accuracy. A classifier's export now pads and cuts on the
    right as the run does; a causal LM's keeps the folder's sides (left, for generation)."""
    from pipeplan import models

    tok = make_tokenizer(tmp_path / "tok")
    settings = json.loads((tok / "tokenizer_config.json").read_text())
    sides = {"padding_side": "left", "truncation_side": "left"}
    (tok / "tokenizer_config.json").write_text(json.dumps({**settings, **sides}))
    classifier = models.build("gpt2-tiny", seq_len=16, task="classification", num_labels=2)
    lm = models.build("gpt2-tiny", seq_len=16, task="causal-lm")
    exported = text.run_tokenizer(str(tok), classifier, "t.jsonl")
    assert (exported.padding_side, exported.truncation_side) == ("right", "right")
    generating = text.run_tokenizer(str(tok), lm, "t.jsonl")
    assert (generating.padding_side, generating.truncation_side) == ("left", "left")


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("model", "typed"), [("gpt2-tiny", False), ("bert-tiny", True)])
def test_an_exported_tokenizer_gives_token_types_only_to_a_model_with_their_embedding(
    tmp_path, model, typed
):
    """Found by the fifty-third round: a GPT-2 classifier trained with a BERT-style tokenizer
    was exported with it, and `m(**tok(texts))` fed its token_type_ids, which GPT-2 adds as
    word embeddings and the run never fed: the held-out loss moved (0.6798 against 0.6788).
    A model without a token-type embedding of its own (no `type_vocab_size`) gets a tokenizer
    that no longer gives them, saved so; BERT's, whose zeros are its default, keeps them."""
    import transformers

    from pipeplan import models

    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "good", "film"]
    (tmp_path / "vocab.txt").write_text("\n".join(words) + "\n")
    tok = tmp_path / "tok"
    transformers.BertTokenizerFast(str(tmp_path / "vocab.txt")).save_pretrained(tok)
    assert "token_type_ids" in transformers.AutoTokenizer.from_pretrained(tok)("good film")
    seq = models.build(model, seq_len=16, task="classification", num_labels=2)
    text.run_tokenizer(str(tok), seq, "t.jsonl").save_pretrained(tmp_path / "out")
    reloaded = transformers.AutoTokenizer.from_pretrained(tmp_path / "out")
    assert ("token_type_ids" in reloaded("good film")) is typed
    assert "input_ids" in reloaded("good film") and "attention_mask" in reloaded("good film")
