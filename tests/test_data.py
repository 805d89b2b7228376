"""Executor data: built-in datasets fit their models, are deterministic and learnable; user
`module:function` specs load; every mistake is a one-line BadArgumentError."""

import importlib.util
import os
import site
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from executor import data as D
from pipeplan import models
from pipeplan.errors import BadArgumentError, PipeplanError
from pipeplan.formats.run import default_data

needs_sklearn = pytest.mark.skipif(
    importlib.util.find_spec("sklearn") is None, reason="digits ship with scikit-learn"
)


# The end of a data module's `load` in the tests of which modules are the data's: two sets of
# four zero images.
SETS = (
    "    x, y = torch.zeros(4, 1, 8, 8), torch.arange(4) % 2\n"
    "    return TensorDataset(x, y), TensorDataset(x, y)\n"
)


def _loaded_helpers(monkeypatch, folder: Path, module: str, *others: str) -> list[Path]:
    """`module:load` (a file of `folder`, put first on sys.path) loaded afresh, `others`
    taken out of sys.modules first: the user's modules data.json would record with it."""
    monkeypatch.syspath_prepend(str(folder))
    for name in (module, *others):
        monkeypatch.delitem(sys.modules, name, raising=False)
    D._load_user(f"{module}:load", 0)
    return D.helper_files(f"{module}:load")


@pytest.fixture(scope="module")
def vit():
    return models.build("vit-digits")


@pytest.fixture(scope="module")
def bert():
    return models.build("bert-synth")


@pytest.fixture(scope="module")
def digits():
    if importlib.util.find_spec("sklearn") is None:
        pytest.skip("digits ship with scikit-learn")
    return D.load_digits(seed=0)


@pytest.fixture(scope="module")
def synth(bert):
    return D.load_data("synth-text", bert, seed=0)


def _fake_text_model(vocab_size: int, length: int, num_labels: int) -> SimpleNamespace:
    config = SimpleNamespace(vocab_size=vocab_size, num_labels=num_labels)
    return SimpleNamespace(
        name="fake",
        input_shape=(length,),
        input_dtype=torch.int64,
        config=config,
        num_labels=num_labels,
    )


def _one_line_error(call, *args, match: str | None = None) -> str:
    with pytest.raises(BadArgumentError, match=match) as info:
        call(*args)
    message = str(info.value)
    assert message and "\n" not in message
    return message


def _assert_items_fit(task: D.TaskData, seq) -> None:
    for dataset in (task.train, task.eval):
        for i in (0, len(dataset) - 1):
            x, y = dataset[i]
            assert tuple(x.shape) == tuple(seq.input_shape) and x.dtype == seq.input_dtype
            assert y.dtype == torch.int64 and y.dim() == 0 and 0 <= int(y) < seq.num_labels
    D.check_compatible(task, seq)


# --- digits ------------------------------------------------------------------------------


@needs_sklearn
def test_digits_fit_vit_digits(vit, digits):
    assert D.load_data("digits", vit).name == "digits"
    _assert_items_fit(digits, vit)
    assert not digits.augmented
    assert default_data("vit-digits") == "digits"


@needs_sklearn
def test_digits_split_is_stratified_disjoint_and_standardised(digits):
    assert len(digits.train) + len(digits.eval) == 1797
    assert len(digits.eval) == pytest.approx(0.2 * 1797, abs=10)
    train_counts = torch.bincount(digits.train.labels, minlength=10)
    eval_counts = torch.bincount(digits.eval.labels, minlength=10)
    assert torch.all((eval_counts.float() / (train_counts + eval_counts) - 0.2).abs() < 0.02)
    train_rows = {tuple(x.flatten().tolist()) for x in digits.train.inputs}
    assert not any(tuple(x.flatten().tolist()) in train_rows for x in digits.eval.inputs)
    assert digits.train.inputs.mean().abs() < 1e-4
    assert digits.train.inputs.std() == pytest.approx(1.0, abs=1e-3)


@needs_sklearn
def test_digits_deterministic_by_seed(digits):
    again = D.load_digits(seed=0)
    assert torch.equal(again.train.inputs, digits.train.inputs)
    assert torch.equal(again.eval.labels, digits.eval.labels)
    x0, y0 = digits.train[5]
    assert torch.equal(digits.train[5][0], x0) and torch.equal(digits.train[5][1], y0)
    other = D.load_digits(seed=1)
    assert not torch.equal(other.eval.inputs, digits.eval.inputs)


def test_digits_without_sklearn_says_how_to_get_it(monkeypatch, vit):
    no_sklearn = SimpleNamespace(util=SimpleNamespace(find_spec=lambda name: None))
    monkeypatch.setattr(D, "importlib", no_sklearn)
    message = _one_line_error(D.load_data, "digits", vit)
    assert "pip install scikit-learn" in message


# --- synth-text --------------------------------------------------------------------------


def test_synth_text_fits_bert_synth(bert, synth):
    _assert_items_fit(synth, bert)
    assert (len(synth.train), len(synth.eval)) == (4096, 1024)
    for split in (synth.train, synth.eval):
        assert split.inputs.min() >= 3 and split.inputs.max() < bert.config.vocab_size
    assert not synth.augmented
    assert default_data("bert-synth") == "synth-text"


def test_synth_text_classes_balanced(synth):
    assert torch.bincount(synth.train.labels).tolist() == [2048, 2048]
    assert torch.bincount(synth.eval.labels).tolist() == [512, 512]


def test_synth_text_deterministic_by_seed(bert, synth):
    again = D.load_data("synth-text", bert, seed=0)
    assert torch.equal(again.train.inputs, synth.train.inputs)
    assert torch.equal(again.eval.labels, synth.eval.labels)
    other = D.load_data("synth-text", bert, seed=1)
    assert not torch.equal(other.train.inputs, synth.train.inputs)


def test_synth_text_label_follows_the_majority_rule(bert, synth):
    vocab = bert.config.vocab_size
    lower = (synth.train.inputs < 3 + (vocab - 3) // 2).sum(dim=1)
    upper = synth.train.inputs.shape[1] - lower
    assert torch.equal(synth.train.labels, (upper > lower).long())


def test_synth_text_is_learnable_from_token_histograms(bert, synth):
    # A linear model on bag-of-tokens: far above chance shows the labels are not noise.
    vocab = bert.config.vocab_size

    def histograms(split):
        counts = torch.zeros(len(split), vocab)
        counts.scatter_add_(1, split.inputs, torch.ones(split.inputs.shape))
        return counts / split.inputs.shape[1]

    x_train, x_eval = histograms(synth.train), histograms(synth.eval)
    torch.manual_seed(0)
    model = torch.nn.Linear(vocab, 2)
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    for _ in range(200):
        loss = torch.nn.functional.cross_entropy(model(x_train), synth.train.labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
    accuracy = (model(x_eval).argmax(1) == synth.eval.labels).float().mean().item()
    assert accuracy > 0.9


@pytest.mark.parametrize(
    ("vocab", "length", "labels"), [(8, 4, 2), (8, 5, 5), (30, 7, 3), (600, 64, 10)]
)
def test_synth_text_any_small_model(vocab, length, labels):
    seq = _fake_text_model(vocab, length, labels)
    task = D.synth_text(seq, seed=3, n_train=101, n_eval=37)
    _assert_items_fit(task, seq)
    assert len(task.train) == 101 and len(task.eval) == 37
    counts = torch.bincount(task.train.labels, minlength=labels)
    assert counts.max() - counts.min() <= 1
    # Label = the band of the vocabulary holding most tokens.
    edges = torch.linspace(3, vocab, labels + 1).long()
    band = torch.bucketize(task.train.inputs, edges[1:-1], right=True)
    per_band = torch.stack([(band == b).sum(1) for b in range(labels)], dim=1)
    assert torch.equal(per_band.argmax(1), task.train.labels)


@pytest.mark.parametrize(
    ("vocab", "length", "labels", "match"),
    [(7, 32, 2, "vocab_size"), (512, 3, 2, "length"), (10, 8, 8, "classes"), (512, 8, 1, "2..")],
)
def test_synth_text_rejects_models_it_cannot_serve(vocab, length, labels, match):
    _one_line_error(D.load_data, "synth-text", _fake_text_model(vocab, length, labels), match=match)


def test_synth_text_rejects_image_model(vit):
    _one_line_error(D.load_data, "synth-text", vit, match="text model")


# --- module:function ---------------------------------------------------------------------

USER_DATA = """
import torch
from executor.data import TaskData, TensorPairs

def _pairs(n, seed):
    g = torch.Generator().manual_seed(seed)
    return TensorPairs(torch.randint(3, 512, (n, 32), generator=g), torch.arange(n) % 2)

def as_pair(seed=0):
    return _pairs(8, seed), _pairs(4, seed + 100)

def as_triple():
    return _pairs(8, 0), _pairs(4, 1), True

def as_task(**kwargs):
    return TaskData("mine", _pairs(8, kwargs["seed"]), _pairs(4, 1))

def as_list_items():
    items = [(torch.randint(3, 512, (32,)), torch.tensor(i % 2)) for i in range(5)]
    return items, items[:2]

def wrong_type():
    return 42

def bad_augmented():
    return _pairs(2, 0), _pairs(2, 0), "yes"

def not_datasets():
    return 1, 2

def string_augmented():
    return TaskData("x", _pairs(2, 0), _pairs(2, 0), augmented="false")

def string_padded():
    return TaskData("x", _pairs(2, 0), _pairs(2, 0), padded="false")

def int_labels():
    items = [(torch.zeros(32, dtype=torch.long), 1)]
    return items, items

def empty_eval():
    return _pairs(8, 0), _pairs(0, 1)

not_callable = 3
"""


@pytest.fixture
def user_file(tmp_path):
    path = tmp_path / "my_data.py"
    path.write_text(textwrap.dedent(USER_DATA))
    return path


def test_user_file_returning_pair_gets_seed(user_file, bert):
    task = D.load_data(f"{user_file}:as_pair", bert, seed=7)
    assert task.name == f"{user_file}:as_pair" and not task.augmented
    assert (len(task.train), len(task.eval)) == (8, 4)
    expected = torch.randint(3, 512, (8, 32), generator=torch.Generator().manual_seed(7))
    assert torch.equal(task.train.inputs, expected)
    D.check_compatible(task, bert)


def test_user_file_other_return_forms(user_file, bert):
    assert D.load_data(f"{user_file}:as_triple", bert).augmented is True
    task = D.load_data(f"{user_file}:as_task", bert, seed=2)
    assert task.name == "mine"
    plain = D.load_data(f"{user_file}:as_list_items", bert)
    D.check_compatible(plain, bert)


def test_user_module_by_import_name(user_file, bert, monkeypatch):
    monkeypatch.syspath_prepend(str(user_file.parent))
    try:
        task = D.load_data("my_data:as_pair", bert)
    finally:
        sys.modules.pop("my_data", None)
    assert len(task.train) == 8
    D.check_compatible(task, bert)


@pytest.mark.parametrize(
    ("function", "match"),
    [
        ("missing", "no function 'missing'"),
        ("not_callable", "no function"),
        ("wrong_type", "returned int"),
        ("bad_augmented", "augmented"),
        ("not_datasets", "map-style dataset"),
        # The thirty-third round: a true string built a padded model, recorded as not padded.
        ("string_augmented", "TaskData's augmented is 'false'; it must be True or False"),
        ("string_padded", "TaskData's padded is 'false'; it must be True or False"),
    ],
)
def test_user_function_errors(user_file, bert, function, match):
    message = _one_line_error(D.load_data, f"{user_file}:{function}", bert, match=match)
    assert f"{user_file}:{function}" in message


def test_a_user_function_with_an_empty_eval_set_is_refused(user_file, bert):
    """Found by the twentieth round: an empty held-out set (an empty EVAL file of --data
    TRAIN,EVAL) trained with no evaluation at all, rc 0 and "held-out accuracy -"; a
    function's eval set of no samples is the same, refused in one line naming the function."""
    message = _one_line_error(
        D.load_data, f"{user_file}:empty_eval", bert, match="eval set is empty"
    )
    assert f"{user_file}:empty_eval" in message


def test_user_import_errors(tmp_path, bert):
    broken = tmp_path / "broken.py"
    broken.write_text("def f(:\n    pass\n")
    assert "SyntaxError" in _one_line_error(D.load_data, f"{broken}:f", bert, match="cannot import")
    raising = tmp_path / "raising.py"
    raising.write_text("raise RuntimeError('no\\ndata\\there')\n")
    _one_line_error(D.load_data, f"{raising}:f", bert, match="RuntimeError: no data here")
    _one_line_error(D.load_data, f"{tmp_path}/absent.py:f", bert, match="no such file")
    (tmp_path / "notes.txt").write_text("hello")
    _one_line_error(D.load_data, f"{tmp_path}/notes.txt:f", bert, match="not a Python file")
    # what is there instead of a file (the ninety-first round: "no such file /dev/null")
    (tmp_path / "folder.py").mkdir()
    said = f"{tmp_path}/folder.py is a directory, not a Python file"
    _one_line_error(D.load_data, f"{tmp_path}/folder.py:f", bert, match=said)
    said = "/dev/null is a character device, not a Python file"
    _one_line_error(D.load_data, "/dev/null:f", bert, match=said)
    # and a path with no function (the ninety-second round: "unknown data '/tmp'; built-ins")
    _one_line_error(D.load_data, str(tmp_path), bert, match="is a directory, not data")
    message = _one_line_error(D.load_data, "no_such_module_xyz:f", bert, match="cannot import")
    assert "no_such_module_xyz:f" in message
    _one_line_error(D.load_data, "some_module:", bert, match="module:function")


def test_unknown_spec_lists_builtins(bert):
    message = _one_line_error(D.load_data, "mnist", bert)
    assert "digits" in message and "synth-text" in message and "module:function" in message


def test_default_data_for_other_models_asks_for_data():
    message = _one_line_error(default_data, "bert-tiny")
    assert "--data" in message


# --- check_compatible --------------------------------------------------------------------


@needs_sklearn
def test_check_compatible_rejects_digits_for_bert(digits, bert):
    message = _one_line_error(D.check_compatible, digits, bert)
    assert message == (
        "data 'digits' gives inputs of shape (1, 8, 8) float32 but model 'bert-synth' "
        "takes (32,) int64"
    )


def test_check_compatible_rejects_text_for_vit(synth, vit):
    _one_line_error(D.check_compatible, synth, vit, match="takes \\(1, 8, 8\\) float32")


def test_check_compatible_rejects_out_of_range_labels_and_tokens(synth, bert):
    shifted = D.TensorPairs(synth.eval.inputs, synth.eval.labels + 1)
    three_classes = D.TaskData("x", synth.eval, shifted)
    _one_line_error(D.check_compatible, three_classes, bert, match="eval labels in 1..2")
    too_big = D.TensorPairs(synth.eval.inputs + 1000, synth.eval.labels)
    _one_line_error(D.check_compatible, D.TaskData("x", too_big, too_big), bert, match="token ids")


def test_a_refused_label_or_token_id_names_the_first_item_holding_it(synth, bert):
    """Found by the forty-eighth round: "has train labels in 5000..5000 but model
    'bert-synth' has 2 classes" named no item, where a rank's check names one. The launcher's
    checks name the first item refused: a row of an in-memory set, or the first or last item
    of another."""
    labels = synth.eval.labels.clone()
    labels[7] = 5000
    odd = D.TaskData("x", synth.train, D.TensorPairs(synth.eval.inputs, labels))
    message = _one_line_error(D.check_compatible, odd, bert)
    assert message.endswith("has 2 classes (0..1) (eval item 7 first)"), message
    inputs = synth.train.inputs.clone()
    inputs[3, 5] = 10**6
    odd = D.TaskData("x", D.TensorPairs(inputs, synth.train.labels), synth.eval)
    message = _one_line_error(D.check_compatible, odd, bert)
    assert "token ids in" in message and message.endswith("(train item 3 first)"), message

    class Listed:  # not in memory: its first and last items are read
        def __init__(self, pairs):
            self.pairs = pairs

        def __len__(self):
            return len(self.pairs.labels)

        def __getitem__(self, i):
            return self.pairs.inputs[i], self.pairs.labels[i]

    labels = synth.eval.labels.clone()
    labels[-1] = 9
    odd = D.TaskData("x", synth.train, Listed(D.TensorPairs(synth.eval.inputs, labels)))
    message = _one_line_error(D.check_compatible, odd, bert)
    assert message.endswith(f"(eval item {len(labels) - 1} first)"), message


class _Listed:
    """A set not in memory: the launcher reads its first and last items only."""

    def __init__(self, inputs, labels):
        self.inputs, self.labels = inputs, labels

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return self.inputs[i], self.labels[i]


def test_a_refused_label_range_of_two_items_read_is_said_to_be_theirs(synth, bert):
    """Found by the sixtieth round: a set not in memory, labels 0..9 on a 5-class head, was
    "has train labels in 4..5": the range of its first and last items, the two the launcher
    reads, said as the set's. So was a causal LM's token labels' range. The line names the
    items read and what they hold."""
    labels = torch.arange(len(synth.train.labels)) % 10
    labels[0], labels[-1] = 5, 4
    odd = D.TaskData("x", _Listed(synth.train.inputs, labels), synth.eval)
    message = _one_line_error(D.check_compatible, odd, bert)
    last = len(labels) - 1
    assert message == (
        f"data 'x': train items 0 and {last} (the first and last, read before training) have "
        "labels 5 and 4 but model 'bert-synth' has 2 classes (0..1) (train item 0 first)"
    )
    decoder = models.build("gpt2-tiny", seq_len=4, task="causal-lm")
    inputs = torch.tensor([[5, 7, 9, 11], [3, 3, 3, 3], [29, 40, 41, 42]])
    tokens = inputs.clone()
    tokens[0, 1] = 900
    odd = D.TaskData("t", _Listed(inputs, tokens), D.TensorPairs(inputs, inputs.clone()))
    message = _one_line_error(D.check_compatible, odd, decoder)
    assert message == (
        "data 't': train items 0 and 2 (the first and last, read before training) have token "
        "labels in 5..900 but model 'gpt2-tiny' has vocab_size 512 (or -100: skip) (train "
        "item 0 first)"
    )
    tokens = inputs.clone()
    tokens[2, 0] = 900  # an input token id past the vocabulary, in the last item read
    odd = D.TaskData("t", _Listed(tokens, inputs), D.TensorPairs(inputs, inputs.clone()))
    message = _one_line_error(D.check_compatible, odd, decoder)
    assert message.startswith(
        "data 't': train items 0 and 2 (the first and last, read before training) have token "
        "ids in 5..900 but model 'gpt2-tiny' has vocab_size 512"
    ), message


def test_check_compatible_rejects_bad_items(user_file, synth, bert):
    task = D.load_data(f"{user_file}:int_labels", bert)
    _one_line_error(D.check_compatible, task, bert, match="int64 scalar")
    int32 = D.TensorPairs(synth.eval.inputs, synth.eval.labels.int())
    _one_line_error(D.check_compatible, D.TaskData("x", int32, int32), bert, match="int64")
    empty = D.TaskData("x", D.TensorPairs(torch.zeros(0, 32).long(), torch.zeros(0).long()), [])
    _one_line_error(D.check_compatible, empty, bert, match="no training samples")


@pytest.mark.parametrize(
    ("first", "last", "said"),
    [
        (([3, 4], 0), None, "train item 0's input is list, not a tensor"),
        (
            ({"input_ids": torch.ones(32).long()}, 0),
            None,
            "train item 0's input is dict, not a tensor",
        ),
        ((np.ones(32), 0), None, "train item 0's input is numpy.ndarray, not a tensor"),
        (
            (torch.ones(32).long(), torch.tensor(0.0)),
            None,
            "train item 0's label is float32 tensor of shape (): labels must be int64 scalar "
            "tensors (torch.tensor(label)), or int64 token ids for causal-lm",
        ),
        (
            None,
            (torch.ones(32).long(), np.int64(1)),
            "train item 5's label is numpy.int64: labels must be int64 scalar tensors "
            "(torch.tensor(label)), or int64 token ids for causal-lm",
        ),
        (
            None,
            (torch.ones(31).long(), torch.tensor(0)),
            "train item 0's input is int64 tensor of shape (32,) and item 5's int64 tensor of "
            "shape (31,): every item's input must have one shape and dtype",
        ),
        (
            None,
            (torch.ones(32).long(), torch.tensor([0])),
            "train item 0's label is int64 tensor of shape () and item 5's int64 tensor of "
            "shape (1,): every item's label must have one shape and dtype",
        ),
    ],
    ids=["list", "dict", "numpy", "float label", "numpy label", "input shapes", "label shapes"],
)
def test_an_item_of_the_wrong_kind_is_named_with_what_it_holds(synth, bert, first, last, said):
    """Found by the sixty-fifth round: a data function whose items' inputs were a list, a
    dict or a numpy array was refused as "data 'm:load': train inputs must be tensors",
    naming neither the item nor what it held, and two items of two shapes as "train inputs
    differ in shape or dtype"; every other wrong item is named with its kind. The launcher's
    check of the first and last items names the item and what it holds."""
    good = (torch.ones(32).long(), torch.tensor(0))
    held = {0: first or good, 5: last or good}

    class Items:
        def __len__(self):
            return 6

        def __getitem__(self, i):
            x, y = held.get(i, good)
            return x, torch.tensor(y) if isinstance(y, int) else y

    odd = D.TaskData("m:load", Items(), synth.eval)
    assert _one_line_error(D.check_compatible, odd, bert) == f"data 'm:load': {said}"


@pytest.mark.parametrize(
    ("sample", "said"),
    [
        ((list(range(16)), torch.arange(16)), "train item 0's input is list, not a tensor"),
        ((np.arange(16), torch.arange(16)), "train item 0's input is numpy.ndarray, not a tensor"),
        (([3, 4], 0), "train item 0's input is list, not a tensor"),
    ],
    ids=["list beside token ids", "numpy beside token ids", "list beside a class"],
)
def test_the_task_read_from_an_item_names_an_input_that_is_no_tensor(sample, said):
    """Found by the sixty-sixth round: a list input beside a label of token ids was refused as
    "a training sample's label has shape (16,); … token ids as long as its input's ()": the
    list's shape was read as (), and the line blamed the label. The item's kind is checked
    before its shape: the line names the split, the item and the type, as `check_compatible`
    does for a scalar label."""

    class Items:
        def __len__(self):
            return 4

        def __getitem__(self, i):
            x, y = sample
            return x, torch.tensor(y) if isinstance(y, int) else y

    task = D.TaskData("m:load", Items(), Items())
    assert _one_line_error(D.data_task, task) == f"data 'm:load': {said}"


def test_errors_are_pipeplan_errors():
    assert issubclass(BadArgumentError, PipeplanError)


def test_a_scans_location_of_a_module_file_is_its_path_and_its_realpath(tmp_path, monkeypatch):
    """`located` (each folder resolved once per scan of sys.modules) gives the file as
    imported and what os.path.realpath gives, through a linked folder, a linked file, a link
    to a link, a relative path and a file that is not there, with the folders' answers
    shared; None for a path with a NUL (a traceback of the scan, the sixty-eighth round)."""
    real = tmp_path / "real"
    (real / "pkg").mkdir(parents=True)
    (real / "pkg" / "mod.py").write_text("")
    (tmp_path / "other.py").write_text("")
    (tmp_path / "via").symlink_to(real)
    (real / "pkg" / "linked.py").symlink_to(tmp_path / "other.py")
    (real / "pkg" / "twice.py").symlink_to(real / "pkg" / "linked.py")
    monkeypatch.chdir(tmp_path)
    files = [
        str(tmp_path / "via" / "pkg" / "mod.py"),
        str(tmp_path / "via" / "pkg" / "linked.py"),
        str(tmp_path / "via" / "pkg" / "twice.py"),
        str(tmp_path / "via" / "pkg" / "gone.py"),
        "via/pkg/mod.py",
        str(tmp_path / "via" / "pkg" / ".."),
        str(tmp_path / "via" / "pkg") + "/",
    ]
    folders: dict[str, str] = {}
    for file in files * 2:  # the second pass reads the folders found by the first
        assert D.located(file, folders) == (os.path.abspath(file), os.path.realpath(file)), file
    assert folders[str(tmp_path / "via" / "pkg")] == str(real / "pkg")
    assert D.located("/tmp/we\x00ird.py", {}) is None
    assert D.located("/tmp/d\x00x/weird.py", {}) is None


def test_a_module_of_the_folder_imported_for_other_code_is_not_the_datas(tmp_path, monkeypatch):
    """Found by the seventieth round: an unrelated `h2.py` beside the data module, imported as
    the package `h2` by huggingface_hub's HTTP client as pipeplan's own code loaded
    transformers during the data's import, was recorded in data.json, and once edited refused
    the run's export and resume. Only the modules the data's own code imports are its: at
    the top, in `load`, by `importlib.import_module`, by a helper it imported, through a
    library it calls (the seventy-first round: `torch.load` of an object of a helper's class,
    left out, let a resume train on an edited helper), or imported first for other code and
    then by the data (the same round's `simplejson.py`, which requests imports). Here
    `rt70_lib`, in a folder made to count as installed, imports `rt70_h2` and `rt70_shared`
    for code outside the data (the test's own, as pipeplan's would), and `rt70_pickled` for
    the data's `load`."""
    import builtins

    data, lib = tmp_path / "data", tmp_path / "lib"
    data.mkdir()
    lib.mkdir()
    (lib / "rt70_lib.py").write_text(
        "import importlib\n"
        "def optional():\n"
        "    import rt70_h2, rt70_shared\n"  # a library's optional imports, names the folder has
        "def find(name):\n"
        "    return importlib.import_module(name)\n"  # as an unpickler finds a class
    )
    (data / "rt70_h2.py").write_text("X = 1\n")
    (data / "rt70_helper.py").write_text("import rt70_helper2\n")
    (data / "rt70_helper2.py").write_text("Y = 2\n")
    (data / "rt70_late.py").write_text("Z = 3\n")
    (data / "rt70_pickled.py").write_text("W = 4\n")
    (data / "rt70_shared.py").write_text("V = 5\n")
    (data / "rt70_data.py").write_text(
        "import importlib\n"
        "import torch\n"
        "from torch.utils.data import TensorDataset\n"
        "rt70_elsewhere()\n"  # code not the data's, run meanwhile (a builtin here)
        "import rt70_helper, rt70_lib\n"
        "import rt70_shared\n"  # imported already, for the other code: the data's too
        "def load(seed=0):\n"
        "    importlib.import_module('rt70_late')\n"
        "    rt70_lib.find('rt70_pickled')\n"
        f"{SETS}"
    )
    monkeypatch.syspath_prepend(str(lib))
    monkeypatch.syspath_prepend(str(data))
    monkeypatch.setattr(site, "getusersitepackages", lambda: str(lib))  # "installed"
    D._installed_prefixes.cache_clear()
    monkeypatch.setattr(
        builtins,
        "rt70_elsewhere",
        lambda: importlib.import_module("rt70_lib").optional(),
        raising=False,
    )
    names = ("rt70_data", "rt70_lib", "rt70_h2", "rt70_helper", "rt70_helper2", "rt70_late")
    for name in (*names, "rt70_pickled", "rt70_shared"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    try:
        D._load_user("rt70_data:load", 0)
    finally:
        D._installed_prefixes.cache_clear()
    assert "rt70_h2" in sys.modules  # imported, by the library, for the test's code
    assert D.helper_files("rt70_data:load") == [
        data / "rt70_helper.py",
        data / "rt70_helper2.py",
        data / "rt70_late.py",
        data / "rt70_pickled.py",
        data / "rt70_shared.py",
    ]


def test_a_helper_imported_from_a_thread_or_from_code_of_no_module_is_the_datas(
    tmp_path, monkeypatch
):
    """Found by the seventy-second round: a helper imported for the data on a worker thread
    (a pool's `torch.load` of an object of its class: no code of the user's on that thread's
    stack), by a string the data's code `exec`s, or by a file it runs by path (with
    `spec_from_file_location`, or `runpy.run_path`: code of no imported module) was counted
    for no one and left out of data.json; edited, a resume trained on it, exit 0. Such code
    is passed through to the code that ran it, and an import only installed code asked for
    while the data's code runs is the data's. The files run by path are the data's too
    (the same round, left then: `rt72_config.py`, `rt72_ran.py`, `rt72_compiled.py`), not one
    a thread that was there before runs meanwhile (`rt72_callers.py`)."""
    data = tmp_path / "data"
    data.mkdir()
    for name in ("rt72_pooled", "rt72_execd", "rt72_bypath", "rt72_runpy"):
        (data / f"{name}.py").write_text("K = 1\n")
    (data / "rt72_config.py").write_text("import rt72_bypath\n")
    (data / "rt72_ran.py").write_text("import rt72_runpy\n")
    (data / "rt72_compiled.py").write_text("K = 3\n")
    (data / "rt72_callers.py").write_text("K = 4\n")
    (data / "rt72_unused.py").write_text("K = 2\n")
    (data / "rt72_data.py").write_text(
        "import importlib.util, pickle, runpy\n"
        "from concurrent.futures import ThreadPoolExecutor\n"
        "from pathlib import Path\n"
        "import torch\n"
        "from torch.utils.data import TensorDataset\n"
        "HERE = Path(__file__).parent\n"
        "def load(seed=0):\n"
        "    with ThreadPoolExecutor(1) as pool:\n"  # unpickles rt72_pooled.K on its thread
        "        pool.submit(pickle.loads, b'crt72_pooled\\nK\\n.').result()\n"
        "    exec('import rt72_execd', {})\n"
        "    spec = importlib.util.spec_from_file_location('experiment', HERE / 'rt72_config.py')\n"
        "    spec.loader.exec_module(importlib.util.module_from_spec(spec))\n"
        "    runpy.run_path(str(HERE / 'rt72_ran.py'))\n"
        "    path = str(HERE / 'rt72_compiled.py')\n"
        "    exec(compile(open(path).read(), path, 'exec'), {})\n"
        "    rt72_meanwhile()\n"
        f"{SETS}"
    )
    monkeypatch.syspath_prepend(str(data))
    for name in ("rt72_data", "rt72_pooled", "rt72_execd", "rt72_bypath", "rt72_runpy"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    import builtins
    import runpy
    import threading

    asked, done = threading.Event(), threading.Event()

    def callers() -> None:  # a thread of the caller's, there before the data's code ran
        asked.wait(30)
        runpy.run_path(str(data / "rt72_callers.py"))
        done.set()

    threading.Thread(target=callers, daemon=True).start()
    monkeypatch.setattr(
        builtins, "rt72_meanwhile", lambda: asked.set() or done.wait(30), raising=False
    )
    D._load_user("rt72_data:load", 0)
    assert done.is_set()
    assert D.helper_files("rt72_data:load") == [
        data / "rt72_bypath.py",
        data / "rt72_compiled.py",
        data / "rt72_config.py",
        data / "rt72_execd.py",
        data / "rt72_pooled.py",
        data / "rt72_ran.py",
        data / "rt72_runpy.py",
    ]


def test_a_thread_that_was_there_before_the_data_ran_imports_for_its_own_code(
    tmp_path, monkeypatch
):
    """Found by the seventy-third round, of the fix above: an import only installed code asked
    for was the data's on any thread, so a module the caller's own thread (started before
    the call) imported as the data loaded was recorded in data.json, and edited, refused the
    run's export and resume; and a rank's reads, which name the data by its own name, not
    `module:function`, credited a pool's import to no one (a helper edited, a resume
    trained on it). A thread the data's code started is the data's, for the data module
    loaded last."""
    import builtins
    import threading

    data = tmp_path / "data"
    data.mkdir()
    for name in ("rt73_callers", "rt73_read"):
        (data / f"{name}.py").write_text("K = 1\n")
    (data / "rt73_data.py").write_text(
        "import torch\n"
        "from torch.utils.data import TensorDataset\n"
        "def load(seed=0):\n"
        "    rt73_meanwhile()\n"  # the caller's thread imports, as the data loads
        f"{SETS}"
    )
    go = threading.Event()
    callers = threading.Thread(
        target=lambda: go.wait(30) and importlib.import_module("rt73_callers")
    )
    callers.start()  # before the data's code: the caller's, not the data's

    def meanwhile():
        go.set()
        callers.join(30)

    monkeypatch.setattr(builtins, "rt73_meanwhile", meanwhile, raising=False)
    monkeypatch.syspath_prepend(str(data))
    for name in ("rt73_data", "rt73_callers", "rt73_read"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    D._load_user("rt73_data:load", 0)
    assert "rt73_callers" in sys.modules
    # A rank's read, naming the data by its own name:
    with D.hooks_kept("t", "reading a batch"), ThreadPoolExecutor(1) as pool:
        pool.submit(importlib.import_module, "rt73_read").result()
    assert D.helper_files("rt73_data:load") == [data / "rt73_read.py"]


def test_a_helper_imported_only_in_a_forked_child_is_the_datas(tmp_path, monkeypatch):
    """Found by the seventy-third round: a helper imported only inside a `multiprocessing`
    pool's worker (the fork start method) was in no sys.modules the launcher or a rank
    reads, so data.json lacked it, and a resume after it was edited trained on other data,
    exit 0. A child forked while the data's code runs reports each module of the user's it
    imports (and whom for) to its forker; a module its other code imports (here the pool's
    own) is not the data's, and the reports are removed once forgotten."""
    from executor import childimports

    data = tmp_path / "data"
    data.mkdir()
    (data / "rt74_pooled.py").write_text("import rt74_pooled2\nK = 1\n")
    (data / "rt74_pooled2.py").write_text("K = 2\n")
    (data / "rt74_forked.py").write_text("K = 3\n")
    (data / "rt74_unused.py").write_text("K = 4\n")
    (data / "rt74_data.py").write_text(
        "import multiprocessing, os\n"
        "import torch\n"
        "from torch.utils.data import TensorDataset\n"
        "def make(i):\n"
        "    import rt74_pooled\n"  # only in the pool's worker
        "    return i + rt74_pooled.K\n"
        "def load(seed=0):\n"
        "    with multiprocessing.get_context('fork').Pool(1) as pool:\n"
        "        assert pool.map(make, range(3)) == [1, 2, 3]\n"
        "    child = os.fork()\n"
        "    if child == 0:\n"
        "        import rt74_forked\n"
        "        os._exit(0)\n"
        "    os.waitpid(child, 0)\n"
        f"{SETS}"
    )
    others = ("rt74_pooled", "rt74_pooled2", "rt74_forked", "rt74_unused")
    helpers = _loaded_helpers(monkeypatch, data, "rt74_data", *others)
    assert "rt74_pooled" not in sys.modules  # imported by the children alone
    assert helpers == [
        data / "rt74_forked.py",
        data / "rt74_pooled.py",
        data / "rt74_pooled2.py",
    ]
    assert D.imported_files("rt74_pooled2") == [str(data / "rt74_pooled2.py")]
    # Read as the data's code returned, and removed; the folder is removed as it is forgotten.
    assert list(Path(childimports._folder()).iterdir()) == []
    childimports.forget()
    assert not Path(childimports._folder()).exists()
    assert D.imported_files("rt74_pooled") == []


@pytest.mark.parametrize("case", ["tempdir moved", "reloads", "cannot write", "no folder"])
def test_a_forked_childs_report_is_whole_or_the_data_is_refused(tmp_path, monkeypatch, case):
    """Found by the seventy-fourth round: a helper imported only in a forked child was left
    out of data.json, in silence, where its report went elsewhere (data code that moved
    tempfile's folder while its pool worked, or TMPDIR=. and a child that changed its
    directory), could not be written (a TMPDIR too long for the report's name), or lay past
    the first MiB read (a worker that reloaded a module 25,000 times). The folder is the one
    pipeplan started with, made by the forker; a line is written once; and a report that is
    missing or cut is one line refusing the data."""
    from executor import childimports

    data = tmp_path / "data"
    data.mkdir()
    (data / "rt74_late.py").write_text("K = 1\n")
    (data / "rt74_settings.py").write_text("K = 2\n")
    work = {
        "tempdir moved": "    os.chdir(tempfile.gettempdir())\n",
        "reloads": "    for _ in range(200): importlib.reload(rt74_settings)\n",
        "cannot write": "    childimports._write = boom\n",
        "no folder": "",
    }[case]
    (data / "rt74_forks.py").write_text(
        "import importlib, multiprocessing, os, tempfile\n"
        "import torch\n"
        "from torch.utils.data import TensorDataset\n"
        "from executor import childimports\n"
        "import rt74_settings\n"
        "def boom(folder, line):\n"
        "    raise OSError(36, 'File name too long')\n"
        "def make(i):\n"
        f"{work}"
        "    import rt74_late\n"
        "    return i + rt74_late.K\n"
        "def load(seed=0):\n"
        "    old = tempfile.tempdir\n"
        "    with tempfile.TemporaryDirectory() as scratch:\n"
        "        tempfile.tempdir = scratch\n"  # put back before it returns: allowed
        "        with multiprocessing.get_context('fork').Pool(1) as pool:\n"
        "            assert pool.map(make, range(2)) == [1, 2]\n"
        "        tempfile.tempdir = old\n"
        f"{SETS}"
    )
    monkeypatch.syspath_prepend(str(data))
    for name in ("rt74_forks", "rt74_late", "rt74_settings"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.setattr(childimports, "MAX_REPORT_BYTES", 4096)  # a line written once: fits
    if case == "no folder":
        (tmp_path / "a file").write_text("")
        monkeypatch.setattr(childimports, "_BASE", str(tmp_path / "a file"))
        monkeypatch.setattr(childimports, "_REPORTS_FOLDER", [])
        monkeypatch.setattr(childimports, "_NAMED", {})
    D._load_user("rt74_forks:load", 0)
    try:
        if case in ("cannot write", "no folder"):
            why = "File name too long" if case == "cannot write" else "Not a directory"
            with pytest.raises(
                BadArgumentError,
                match=f"^data 'rt74_forks:load': a process it forked (could not|cannot) .*{why}",
            ):
                D.helper_files("rt74_forks:load")
        else:
            assert D.helper_files("rt74_forks:load") == [
                data / "rt74_late.py",
                data / "rt74_settings.py",
            ]
    finally:
        childimports.forget()


def test_a_forker_that_ended_without_collecting_leaves_no_reports(tmp_path, monkeypatch):
    """Found by the seventy-fifth round: a rank killed or stopped while its data's forked
    child had reported left its reports' folder in TMPDIR for good, and a child that
    outlived its run made the folder again as it imported. The folder is named after its
    maker (`spawn.owner_tag`): the next command that starts ranks removes one whose maker is
    gone, and a child of a gone maker writes nothing."""
    import subprocess
    import tempfile

    from executor import childimports
    from pipeplan.spawn import remove_left_scratch

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    made = (
        "import os\n"
        "from executor import childimports\n"
        "folder = childimports._made()\n"
        "open(os.path.join(folder, '123.jsonl'), 'w').write('[]\\n')\n"
        "print(folder)\n"
    )
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-c", made], env=env, capture_output=True, text=True, timeout=100
    )
    folder = done.stdout.strip()
    assert Path(folder, "123.jsonl").is_file(), done.stderr  # its maker ended, killed or not
    remove_left_scratch()
    assert list(tmp_path.iterdir()) == []
    childimports._write(folder, b'["late", null, "/x/late.py"]\n')  # a child outliving it
    assert list(tmp_path.iterdir()) == []


def test_two_children_importing_two_files_of_one_name_record_both(tmp_path, monkeypatch):
    """Found by the seventy-seventh round: two children the data forked imported `helper`
    from two files (one put sub/ first on sys.path). The reports were kept one per name,
    whichever was read first: data.json left one file out (an edit of it resumed unseen),
    and a rank's check at its final checkpoint, reading the other, refused the run it had
    just trained ("run this command from the directory the run was started from"). Each
    file imported under a name is recorded, and the check finds the listed one among them."""
    import types

    from executor import childimports
    from executor.task import check_helpers_kept
    from pipeplan.formats import DataFile, DataRecord
    from pipeplan.formats.base import dumps

    data = tmp_path / "data"
    (data / "sub").mkdir(parents=True)
    (data / "rt77_helper.py").write_text("X = 'top'\n")
    (data / "sub" / "rt77_helper.py").write_text("X = 'sub'\n")
    (data / "rt77_two.py").write_text(
        "import os, sys\n"
        "import torch\n"
        "from torch.utils.data import TensorDataset\n"
        "HERE = os.path.dirname(os.path.abspath(__file__))\n"
        "def load(seed=0):\n"
        "    for first in (os.path.join(HERE, 'sub'), None):\n"
        "        child = os.fork()\n"
        "        if child == 0:\n"
        "            if first:\n"
        "                sys.path.insert(0, first)\n"
        "            import rt77_helper\n"
        "            os._exit(0)\n"
        "        os.waitpid(child, 0)\n"
        f"{SETS}"
    )
    try:
        helpers = _loaded_helpers(monkeypatch, data, "rt77_two", "rt77_helper")
        assert "rt77_helper" not in sys.modules  # imported by the children alone
        assert helpers == [data / "rt77_helper.py", data / "sub" / "rt77_helper.py"]
        files = [data / "rt77_two.py", *helpers]
        record = DataRecord(
            data="rt77_two:load", files=[DataFile(path=str(f), sha256="0" * 64) for f in files]
        )
        (tmp_path / "data.json").write_text(dumps(record))
        check_helpers_kept(tmp_path, types.SimpleNamespace(data="rt77_two:load"))  # no refusal
    finally:
        childimports.forget()


def test_a_childs_reports_are_all_read_while_it_writes_and_the_forker_reads(monkeypatch):
    """The reports of `childimports`: children appending while their forker reads and removes
    their files lose no line (each write is made under the file's lock, to the file there
    then), and nothing is left on disk."""
    import time

    from executor import childimports

    folder = childimports._made()
    children = []
    for child in range(3):
        pid = os.fork()
        if pid == 0:  # a reporting child: 200 lines, each written a little after its checks
            try:
                write = os.write
                os.write = lambda fd, data, write=write: time.sleep(0.002) or write(fd, data)
                for i in range(200):
                    line = f'["m{child}_{i}", null, "/x/m{child}_{i}.py"]\n'.encode()
                    childimports._write(folder, line)
            finally:
                os._exit(0)
        children.append(pid)
    deadline = time.monotonic() + 60
    while children:
        childimports.found()  # reading and removing meanwhile
        children = [pid for pid in children if os.waitpid(pid, os.WNOHANG) == (0, 0)]
        assert time.monotonic() < deadline
    found = childimports.found()
    try:
        assert len(found) == 600 and found["m2_199"] == [(None, "/x/m2_199.py")]
        assert os.listdir(folder) == []
    finally:
        childimports.forget()
    assert not os.path.exists(folder)


def test_a_child_that_writes_after_its_forker_forgot_leaves_nothing():
    """Found by the seventy-seventh round: a child the data forked that imported after its
    forker's last look (the run's end: its exit callbacks had run, the process not yet gone)
    made the folder again for its report, and it stayed in TMPDIR after `pipeplan run`. The
    forker removes the folder as it forgets; a child never makes it, and writes nothing
    once it is gone. (By CI of the fifty-second session, a child that made it met it removed
    between makedirs' mkdir and its look, and lost the line: children no longer make it.)"""
    from executor import childimports

    folder = childimports._made()
    childimports._write(folder, b'["rt_before", null, "/x/rt_before.py"]\n')
    assert childimports.found()["rt_before"] == [(None, "/x/rt_before.py")]
    assert os.path.isdir(folder)  # kept while the forker may be written to
    childimports.forget()
    assert not os.path.exists(folder)
    childimports._write(folder, b'["rt_after", null, "/x/rt_after.py"]\n')  # no error
    assert not os.path.exists(folder) and childimports.found() == {}


@pytest.mark.timeout(60)
def test_a_child_stopped_holding_its_report_hangs_no_forker(monkeypatch):
    """A child stopped while it wrote its report (SIGSTOP, a debugger) held the report's lock,
    and its forker's look waited for it without end: the run hung. The forker waits
    LOCK_WAIT_S once, then says so (data.json is not written without the report); the
    report is removed with the folder as it is forgotten."""
    import fcntl
    import signal
    import time

    from executor import childimports

    monkeypatch.setattr(childimports, "LOCK_WAIT_S", 0.5)
    folder = childimports._made()
    report = os.path.join(folder, "4242.jsonl")
    with open(report, "wb") as held:
        held.write(b'["rt_held", null, "/x/rt_held.py"]\n')
    child = os.fork()
    if child == 0:  # takes the lock, as a child writing does, and is stopped holding it
        try:
            fd = os.open(report, os.O_WRONLY)
            fcntl.flock(fd, fcntl.LOCK_EX)
            os.kill(os.getpid(), signal.SIGSTOP)
        finally:
            os._exit(0)
    try:
        os.waitpid(child, os.WUNTRACED)  # stopped, the lock held
        began = time.monotonic()
        assert "rt_held" not in childimports.found()
        assert time.monotonic() - began < 10
        # Waited for once: the next looks (one after each call into the data's code) do not
        # wait again (the seventy-eighth round: 10 s each, 221 s before the line).
        monkeypatch.setattr(childimports, "LOCK_WAIT_S", 30)
        began = time.monotonic()
        for _ in range(3):
            childimports.found()
        assert time.monotonic() - began < 5
        assert "held its report locked for 0 s" in childimports.problem()
        childimports.forget()  # the stuck report forgotten with its folder
        assert not os.path.exists(folder)
    finally:
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)
        childimports.forget()


def test_a_caller_that_moves_to_another_project_gets_that_projects_helpers(tmp_path, monkeypatch):
    """Found by the seventy-fourth round: a Python API caller that ran `mydata:load` in
    project A, then `other:load` in project B (or `path/to/mydata.py:load` in each), kept A's
    `helper`, whose data the launcher checked and data.json's facts described; every module
    recorded with A's data module was taken out once it moved, the caller's own module
    (imported from A, not the data's) among them; and in a pipeplan checkout that was the
    data's folder too, pipeplan's own modules were (a call refused, its errors another
    class than the caller's). A recorded module the import rule finds elsewhere now is taken
    out; one it finds nowhere stays; pipeplan's are never recorded."""
    for project, count in (("A", 4), ("B", 6)):
        folder = tmp_path / project
        folder.mkdir()
        (folder / "rt74_helper.py").write_text(f"N = {count}\n")
        for name in ("rt74_a", "rt74_b"):
            (folder / f"{name}.py").write_text(
                "import torch, rt74_helper\n"
                "from torch.utils.data import TensorDataset\n"
                "def load(seed=0):\n"
                "    x = torch.zeros(rt74_helper.N, 1, 8, 8)\n"
                "    y = torch.arange(rt74_helper.N) % 2\n"
                "    return TensorDataset(x, y), TensorDataset(x, y)\n"
            )
    (tmp_path / "A" / "rt74_mylib.py").write_text("STATE = {}\n")
    names = ("rt74_a", "rt74_b", "rt74_helper", "rt74_mylib")
    for name in names:
        monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.syspath_prepend(str(tmp_path / "A"))  # the caller's own import, then gone
    import rt74_mylib

    sys.path.remove(str(tmp_path / "A"))
    for spec in ("rt74_a:load", "rt74_a.py:load"):  # a module, then a file, in each project
        monkeypatch.chdir(tmp_path / "A")
        assert len(D._load_user(spec, 0).train) == 4
        monkeypatch.chdir(tmp_path / "B")
        other = spec.replace("rt74_a", "rt74_b")
        assert len(D._load_user(other, 0).train) == 6  # B's helper, not A's
        assert D.helper_files(other) == [tmp_path / "B" / "rt74_helper.py"]
        assert sys.modules["rt74_mylib"] is rt74_mylib  # the caller's, found nowhere now
    # A checkout that is the data's folder: pipeplan's own modules are never the user's.
    import cli  # noqa: F401  (the command's module, imported as the command imports it)

    repo = Path(D.__file__).resolve().parent.parent
    monkeypatch.setattr(D, "module_root", lambda spec: repo)
    mine = D._user_modules("rt74_b", "rt74_b:load")
    assert "executor.data" in sys.modules and "cli" in sys.modules
    assert not [n for n in mine if n.partition(".")[0] in ("executor", "pipeplan", "cli")]


def test_an_edit_is_seen_however_the_file_is_spelled_and_the_callers_module_stays(
    tmp_path, monkeypatch
):
    """Found by the seventy-fifth round: the record of a data file's modules was kept by the
    text of `--data`, so `mydata.py:load`, then `/abs/mydata.py:load` after its helper was
    edited, ran the old helper in the launcher (the ranks the new); and a module the caller
    wrote and imported between two calls, under the data's folder, was taken out with the
    data's (its state lost)."""
    import time

    (tmp_path / "rt75_h.py").write_text("N = 4\n")
    (tmp_path / "rt75_fd.py").write_text(
        "import torch, rt75_h\n"
        "from torch.utils.data import TensorDataset\n"
        "def load(seed=0):\n"
        "    x, y = torch.zeros(rt75_h.N, 1, 8, 8), torch.arange(rt75_h.N) % 2\n"
        "    return TensorDataset(x, y), TensorDataset(x, y)\n"
    )
    for name in ("rt75_h", "rt75_mine"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.chdir(tmp_path)
    assert len(D._load_user("rt75_fd.py:load", 0).train) == 4
    (tmp_path / "rt75_mine.py").write_text("STATE = {}\n")  # the caller's, written now
    monkeypatch.syspath_prepend(str(tmp_path))
    import rt75_mine

    sys.path.remove(str(tmp_path))
    time.sleep(0.01)  # a later modification time
    (tmp_path / "rt75_h.py").write_text("N = 6\n")
    assert len(D._load_user(f"{tmp_path}/rt75_fd.py:load", 0).train) == 6
    assert sys.modules["rt75_mine"] is rt75_mine
    (tmp_path / "rt75_fd.py").touch()  # the data edited: its modules afresh, the caller's not
    assert len(D._load_user("./rt75_fd.py:load", 0).train) == 6
    assert sys.modules["rt75_mine"] is rt75_mine
    time.sleep(0.01)  # the seventy-sixth round: the same file as a module, after an edit
    (tmp_path / "rt75_h.py").write_text("N = 8\n")
    monkeypatch.delitem(sys.modules, "rt75_fd", raising=False)
    assert len(D._load_user("rt75_fd:load", 0).train) == 8


def test_pipeplans_own_modules_a_load_imports_are_not_taken_for_the_users(tmp_path):
    """Found by the seventy-fifth round: a `load` that imported `executor.demo` (not imported
    yet) was refused, "the data function replaced executor.history.CheckpointManifest … with
    its own code": in a checkout (an editable install) pipeplan's own files were taken for
    the user's. In a process of its own, where nothing of the demo is imported yet."""
    import subprocess

    (tmp_path / "rt75_demo.py").write_text(
        "import torch\n"
        "from torch.utils.data import TensorDataset\n"
        "def load(seed=0):\n"
        "    import executor.demo\n"
        f"{SETS}"
    )
    code = (
        f"import sys; sys.path.insert(0, {str(tmp_path)!r})\n"
        "from executor import data as D\n"
        "assert 'executor.demo' not in sys.modules\n"
        "print(len(D._load_user('rt75_demo:load', 0).train))\n"
    )
    root = Path(D.__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": str(root)}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=100
    )
    assert done.returncode == 0 and done.stdout == "4\n", done.stderr[-3000:]


def test_a_callers_module_imported_before_any_call_is_not_the_datas(tmp_path, monkeypatch):
    """Found by the seventy-sixth round: a module the caller imported before its first call
    (no witness saw whom for) was counted as the data's, so a later call took it out once
    its file was edited, or once the caller moved to a project holding one of that name:
    its state and its classes' identity lost. Such a module is the data's only where the
    data holds it (its `import helper` found it imported)."""
    import time

    (tmp_path / "rt76_mine.py").write_text("STATE = {}\n")
    (tmp_path / "rt76_held.py").write_text("N = 4\n")
    (tmp_path / "rt76_d.py").write_text(
        "import torch, rt76_held\n"
        "from torch.utils.data import TensorDataset\n"
        "def load(seed=0):\n"
        "    x, y = torch.zeros(rt76_held.N, 1, 8, 8), torch.arange(rt76_held.N) % 2\n"
        "    return TensorDataset(x, y), TensorDataset(x, y)\n"
    )
    for name in ("rt76_mine", "rt76_held", "rt76_d"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    import rt76_held
    import rt76_mine

    sys.path.remove(str(tmp_path))
    for name in ("rt76_mine", "rt76_held"):  # as before any call: no witness saw them
        monkeypatch.delitem(D._IMPORTED_BY, name, raising=False)
    assert len(D._load_user("rt76_d:load", 0).train) == 4
    time.sleep(0.01)
    (tmp_path / "rt76_mine.py").write_text("STATE = {'edited': 1}\n")
    (tmp_path / "rt76_held.py").write_text("N = 6\n")
    assert len(D._load_user("rt76_d:load", 0).train) == 6  # the data's, held: afresh
    assert sys.modules["rt76_mine"] is rt76_mine and sys.modules["rt76_held"] is not rt76_held


def test_a_call_from_another_directory_imports_that_directorys_module(tmp_path, monkeypatch):
    """Found by the seventy-second round: a Python API caller that ran a call in project x,
    then `os.chdir` to project y (each with its own `mydata.py`) and called again, kept x's
    module: the run was refused as if it were another's, and an export or resume of y's
    own run said y's file was x's. The name is imported afresh where the import rule finds
    it in another file now; found where it was, it is kept (not imported again)."""
    for project, label in (("x", 0), ("y", 1)):
        (tmp_path / project).mkdir()
        (tmp_path / project / "rt72_mydata.py").write_text(
            "import torch\n"
            "from torch.utils.data import TensorDataset\n"
            "def load(seed=0):\n"
            f"    x, y = torch.zeros(4, 1, 8, 8), torch.full((4,), {label})\n"
            "    return TensorDataset(x, y), TensorDataset(x, y)\n"
        )
    monkeypatch.delitem(sys.modules, "rt72_mydata", raising=False)
    monkeypatch.chdir(tmp_path / "x")
    assert int(D._load_user("rt72_mydata:load", 0).train[0][1]) == 0
    first = sys.modules["rt72_mydata"]
    assert int(D._load_user("rt72_mydata:load", 0).train[0][1]) == 0
    assert sys.modules["rt72_mydata"] is first  # the same file: kept
    monkeypatch.chdir(tmp_path / "y")
    assert D.module_place("rt72_mydata:load") == tmp_path / "y" / "rt72_mydata.py"
    assert int(D._load_user("rt72_mydata:load", 0).train[0][1]) == 1
    assert D.main_file("rt72_mydata:load") == tmp_path / "y" / "rt72_mydata.py"
    monkeypatch.delitem(sys.modules, "rt72_mydata", raising=False)


@pytest.mark.parametrize("form", ["linked", "namespace"])
def test_a_call_from_another_directory_imports_its_module_linked_or_namespaced(
    tmp_path, monkeypatch, form
):
    """Found by the seventy-third round, of the fix above: two projects whose `mydata.py`
    links to one shared file, each with its own `helper.py`, kept the first project's
    module and helper (the places were compared resolved); and a namespace package of the
    same name in two projects (`nspkg/data.py`, no `__init__.py`) was never looked at (it has
    no file). Each call reads its own directory's module and helper."""
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "rt73_link.py").write_text(
        "import torch\n"
        "from torch.utils.data import TensorDataset\n"
        "import rt73_helper\n"
        "def load(seed=0):\n"
        "    x = torch.zeros(rt73_helper.N, 1, 8, 8)\n"
        "    pairs = TensorDataset(x, torch.zeros(rt73_helper.N, dtype=torch.long))\n"
        "    return pairs, pairs\n"
    )
    spec = "rt73_link:load" if form == "linked" else "rt73_ns.data:load"
    for project, n in (("a", 4), ("b", 6)):
        folder = tmp_path / project
        folder.mkdir()
        (folder / "rt73_helper.py").write_text(f"N = {n}\n")
        if form == "linked":
            (folder / "rt73_link.py").symlink_to(shared / "rt73_link.py")
        else:
            (folder / "rt73_ns").mkdir()
            (folder / "rt73_ns" / "data.py").write_text((shared / "rt73_link.py").read_text())
    for name in ("rt73_link", "rt73_helper", "rt73_ns", "rt73_ns.data"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    for project, n in (("a", 4), ("b", 6), ("a", 4)):
        monkeypatch.chdir(tmp_path / project)
        assert len(D._load_user(spec, 0).train) == n, project
        assert D.helper_files(spec) == [tmp_path / project / "rt73_helper.py"]
    for name in ("rt73_link", "rt73_helper", "rt73_ns", "rt73_ns.data"):
        monkeypatch.delitem(sys.modules, name, raising=False)


def test_helpers_linked_into_the_datas_folder_are_recorded_by_their_place(tmp_path, monkeypatch):
    """Found by the sixty-eighth round: a helper module (or package) in the data's folder that
    is a link to files kept elsewhere was left out of data.json, so a resume after its edit
    was not refused; recorded by the target's path, a run then refused its own data.json. The
    record is the place in the data's folder (read through the link, the sha256 the
    target's); a link there into installed code stays out."""
    data, shared = tmp_path / "data", tmp_path / "shared"
    (shared / "pkg").mkdir(parents=True)
    data.mkdir()
    (shared / "helper.py").write_text("V = 1\n")
    (shared / "pkg" / "__init__.py").write_text("")
    (shared / "pkg" / "h2.py").write_text("W = 2\n")
    (data / "rt68_helper.py").symlink_to(shared / "helper.py")
    (data / "rt68_lib").symlink_to(shared / "pkg")
    (data / "rt68_np.py").symlink_to(Path(np.__file__).parent / "version.py")  # installed
    (data / "rt68_rec.py").write_text(
        "import torch\n"
        "from torch.utils.data import TensorDataset\n"
        "def load(seed=0):\n"
        "    import rt68_helper, rt68_lib.h2, rt68_np\n"
        f"{SETS}"
    )
    others = ("rt68_helper", "rt68_lib", "rt68_lib.h2", "rt68_np")
    assert _loaded_helpers(monkeypatch, data, "rt68_rec", *others) == [
        data / "rt68_helper.py",
        data / "rt68_lib" / "__init__.py",
        data / "rt68_lib" / "h2.py",
    ]
