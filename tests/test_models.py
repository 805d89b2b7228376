"""The model zoo: layer sequences reproduce the transformers models exactly."""

import json

import pytest
import torch

from pipeplan import models
from pipeplan.errors import InputFileError, UnknownModelError

SMALL_CONFIGS = {
    "roberta": dict(
        model_type="roberta",
        vocab_size=100,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        num_labels=3,
    ),
    "bert": dict(
        model_type="bert",
        vocab_size=100,
        hidden_size=32,
        num_hidden_layers=3,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=40,
        num_labels=5,
    ),
    "vit": dict(
        model_type="vit",
        image_size=16,
        patch_size=4,
        num_channels=3,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        num_labels=7,
    ),
}


def _hf_outputs(seq, hf, x, y):
    key = "pixel_values" if seq.family == "vit" else "input_ids"
    return hf(**{key: x}, labels=y)


def _check_exact(seq, hf, train: bool):
    hf.train(train)
    x, y = seq.example_batch(3, torch.Generator().manual_seed(1))
    torch.manual_seed(7)
    expected = _hf_outputs(seq, hf, x, y)
    torch.manual_seed(7)  # same dropout draws, in the same order, when training
    logits = seq.forward(x)
    assert torch.equal(logits, expected.logits)
    assert torch.equal(seq.loss(logits, y), expected.loss)


@pytest.mark.parametrize("name", ["bert-tiny", "vit-digits", "bert-synth"])
@pytest.mark.parametrize("train", [False, True], ids=["eval", "train"])
def test_presets_match_hf_forward_exactly(name, train):
    seq, hf = models.build_with_hf(name)
    _check_exact(seq, hf, train)


@pytest.mark.parametrize("family", sorted(SMALL_CONFIGS))
@pytest.mark.parametrize("train", [False, True], ids=["eval", "train"])
def test_config_files_match_hf_forward_exactly(tmp_path, family, train):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(SMALL_CONFIGS[family]))
    seq, hf = models.build_with_hf(str(path))
    assert seq.family == family
    _check_exact(seq, hf, train)


def test_config_directory_is_accepted(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(SMALL_CONFIGS["bert"]))
    seq = models.build(str(tmp_path), seq_len=16)
    assert seq.input_shape == (16,)
    assert seq.num_blocks == 3


@pytest.mark.parametrize("name", ["bert-tiny", "bert-synth", "vit-digits", "vit-base"])
def test_param_counts_sum_to_hf_num_parameters(name):
    seq, hf = models.build_with_hf(name)
    assert sum(p.numel() for p in seq.layers.parameters()) == hf.num_parameters()


def test_layer_indexing_convention():
    seq = models.build("bert-tiny")
    n = seq.num_blocks
    assert n == 4 and len(seq.layers) == n + 2
    assert [seq.kind(i) for i in range(n + 2)] == ["embeddings"] + ["block"] * n + ["head"]
    assert seq.layer_name(0) == "embeddings" and seq.layer_name(1) == "block1"
    assert seq.layer_name(n + 1) == "head"


def test_ranges_compose():
    seq = models.build("bert-synth")
    seq.layers.eval()
    x, _ = seq.example_batch(2)
    with torch.no_grad():
        assert torch.equal(seq.forward(seq.forward(x, 0, 3), 3), seq.forward(x))


def test_same_seed_same_weights():
    a, b = models.build("vit-digits", seed=3), models.build("vit-digits", seed=3)
    c = models.build("vit-digits", seed=4)
    pa, pb, pc = (torch.cat([p.flatten() for p in m.layers.parameters()]) for m in (a, b, c))
    assert torch.equal(pa, pb) and not torch.equal(pa, pc)


def test_unknown_model_lists_known_names():
    with pytest.raises(UnknownModelError) as err:
        models.build("gpt-5")
    message = str(err.value)
    assert all(name in message for name in models.known_models())
    assert "\n" not in message


@pytest.mark.parametrize(
    "content, fragment",
    [
        (None, "no such config file"),
        ("{not json", "not valid JSON"),
        ("[1, 2]", "JSON object"),
        (json.dumps({"model_type": "gpt2", "n_layer": 2}), "not a supported encoder"),
        (json.dumps({"hidden_size": 32}), "not a supported encoder"),
        (json.dumps({"model_type": "vit", "image_size": 10, "patch_size": 4}), "multiple"),
        (json.dumps({"model_type": "bert", "is_decoder": True}), "only encoders"),
    ],
)
def test_bad_config_files(tmp_path, content, fragment):
    path = tmp_path / "config.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(InputFileError, match=fragment):
        models.build(str(path))


def test_sequence_length_is_checked():
    with pytest.raises(InputFileError, match="outside"):
        models.build("bert-synth", seq_len=65)
    with pytest.raises(InputFileError, match="text models only"):
        models.build("vit-digits", seq_len=8)
