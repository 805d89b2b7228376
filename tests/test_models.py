"""The model zoo: layer sequences reproduce the transformers models exactly."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from pipeplan import models
from pipeplan.errors import BadArgumentError, InputFileError, UnknownModelError
from pipeplan.models import FAMILIES

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
    "distilbert": dict(
        model_type="distilbert",
        vocab_size=100,
        dim=32,
        n_layers=2,
        n_heads=4,
        hidden_dim=64,
        max_position_embeddings=40,
        num_labels=3,
    ),
    "electra": dict(  # embeddings narrower than the blocks: layer 0 projects them
        model_type="electra",
        vocab_size=100,
        embedding_size=16,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=40,
        num_labels=4,
    ),
    "deit": dict(  # [CLS] and distillation tokens before the patches
        model_type="deit",
        image_size=16,
        patch_size=4,
        num_channels=3,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        num_labels=6,
    ),
    "gpt2": dict(
        model_type="gpt2",
        vocab_size=100,
        n_positions=40,
        n_embd=32,
        n_layer=3,
        n_head=4,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
        num_labels=3,
    ),
    "llama": dict(  # grouped KV heads; attention dropout so that training draws
        model_type="llama",
        vocab_size=100,
        hidden_size=32,
        intermediate_size=80,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=40,
        attention_dropout=0.1,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
        num_labels=3,
    ),
}
DECODERS = ["gpt2", "llama"]
TEXT = ["bert", "roberta", "distilbert", "electra", *DECODERS]


def _write_config(tmp_path, family, **changes):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**SMALL_CONFIGS[family], **changes}))
    return path


def _hf_outputs(seq, hf, x, y):
    key = "pixel_values" if seq.family in ("vit", "deit") else "input_ids"
    if seq.padding_mask:  # what a transformers user passes: the tokenizer's ids and mask
        pad, padding = seq.config.pad_token_id, x == models.PADDING
        return hf(input_ids=x.masked_fill(padding, pad), attention_mask=(~padding).long(), labels=y)
    return hf(**{key: x}, labels=y)


def _check_exact(seq, hf, train: bool, batch=None):
    hf.train(train)
    x, y = batch or seq.example_batch(3, torch.Generator().manual_seed(1))
    torch.manual_seed(7)
    expected = _hf_outputs(seq, hf, x, y)
    torch.manual_seed(7)  # same dropout draws, in the same order, when training
    logits = seq.forward(x)
    assert torch.equal(logits, expected.logits)
    assert torch.equal(seq.loss(logits, y), expected.loss)


@pytest.mark.parametrize(
    "name", ["bert-tiny", "vit-digits", "bert-synth", "gpt2-tiny", "llama-tiny"]
)
@pytest.mark.parametrize("train", [False, True], ids=["eval", "train"])
def test_presets_match_hf_forward_exactly(name, train):
    seq, hf = models.build_with_hf(name)
    _check_exact(seq, hf, train)


@pytest.mark.parametrize("family", sorted(SMALL_CONFIGS))
@pytest.mark.parametrize("train", [False, True], ids=["eval", "train"])
def test_config_files_match_hf_forward_exactly(tmp_path, family, train):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(SMALL_CONFIGS[family]))
    seq, hf = models.build_with_hf(str(path), init="random")
    assert seq.family == family
    assert seq.task == ("causal-lm" if family in DECODERS else "classification")
    _check_exact(seq, hf, train)


@pytest.mark.parametrize("family", DECODERS)
@pytest.mark.parametrize("train", [False, True], ids=["eval", "train"])
def test_decoder_classification_matches_hf_forward_exactly(tmp_path, family, train):
    path = _write_config(tmp_path, family)
    seq, hf = models.build_with_hf(str(path), init="random", task="classification")
    assert type(hf).__name__.endswith("ForSequenceClassification")
    assert seq.logits_shape == (3,)
    _check_exact(seq, hf, train)


@pytest.mark.parametrize("family", DECODERS)
@pytest.mark.parametrize("padding_mask", [False, True], ids=["unpadded", "padded"])
@pytest.mark.parametrize("pad_last", [True, False], ids=["ends-in-pad-id", "no-pad-id"])
@pytest.mark.parametrize("train", [False, True], ids=["eval", "train"])
def test_decoder_classifier_pools_past_a_real_pad_id_as_transformers(
    tmp_path, family, padding_mask, pad_last, train
):
    """Found by the thirtieth round: a decoder classifier on unpadded data (padding_mask
    False) pooled the last position, where transformers (the exported model) pools the
    rightmost token whose id is not pad_token_id: rows ending in a real pad id (pad = eos)
    gave other logits. Now such a model always carries the mask channel and pools that token,
    bit for bit as transformers, with the tokenizer's attention mask or none."""
    path = _write_config(tmp_path, family)
    seq, hf = models.build_with_hf(
        str(path), init="random", task="classification", padding_mask=padding_mask
    )
    pad = seq.config.pad_token_id
    ids = torch.randint(
        3, seq.config.vocab_size, (4, 12), generator=torch.Generator().manual_seed(0)
    )
    ids[1, 5] = pad  # a real pad id inside a row is a token wherever it is
    if pad_last:
        ids[:, -1] = pad  # every row ends in a real `</s>` whose id is pad_token_id
        ids[2, -3:] = pad
    labels = torch.tensor([0, 1, 2, 0])
    hf.train(train)
    for mask in (None, torch.ones_like(ids)):
        torch.manual_seed(7)
        expected = hf(input_ids=ids, attention_mask=mask, labels=labels)
        torch.manual_seed(7)  # same dropout draws, in the same order, when training
        logits = seq.forward(ids)
        assert torch.equal(logits, expected.logits)
        assert torch.equal(seq.loss(logits, labels), expected.loss)


def test_decoder_saved_as_a_classifier_stays_one(tmp_path):
    path = _write_config(tmp_path, "gpt2", architectures=["GPT2ForSequenceClassification"])
    assert models.build(str(path), init="random").task == "classification"


def _padded_batch(seq, left=False):
    """Three samples of lengths T, T-3 and 2, padded on the right (or on the left)."""
    gen = torch.Generator().manual_seed(1)
    pad, length = models.PADDING, seq.input_shape[0]
    x = torch.randint(3, seq.config.vocab_size, (3, length), generator=gen)  # no special ids
    y = torch.randint(0, seq.num_labels, (3,), generator=gen)
    for row, keep in [(1, length - 3), (2, 2)]:
        if left:
            x[row, : length - keep] = pad
        else:
            x[row, keep:] = pad
    if seq.task == "causal-lm":
        y = x.clone()  # PADDING is IGNORE_INDEX
    return x, y


@pytest.mark.parametrize(
    "family, task",
    [(f, "classification") for f in TEXT] + [(f, "causal-lm") for f in DECODERS],
)
@pytest.mark.parametrize("train", [False, True], ids=["eval", "train"])
def test_padding_mask_matches_hf_with_attention_mask_exactly(tmp_path, family, task, train):
    path = _write_config(tmp_path, family)
    seq, hf = models.build_with_hf(str(path), init="random", task=task, padding_mask=True)
    _check_exact(seq, hf, train, _padded_batch(seq))
    if family in DECODERS and task == "classification":
        _check_exact(seq, hf, train, _padded_batch(seq, left=True))


@pytest.mark.parametrize("family", ["bert", "llama"])
def test_padding_mask_changes_what_padded_samples_see(tmp_path, family):
    """The mask is used: without it the padded samples' logits differ (left padding, so that
    a causal model's real tokens would attend to the pads)."""
    path = _write_config(tmp_path, family)
    masked = models.build(str(path), init="random", task="classification", padding_mask=True)
    plain = models.build(str(path), init="random", task="classification")
    masked.layers.eval(), plain.layers.eval()
    x, _ = _padded_batch(masked, left=True)
    width = masked.config.hidden_size
    with torch.no_grad():  # the last block's output, without the mask channel
        ids = x.masked_fill(x == models.PADDING, masked.config.pad_token_id)  # unmarked
        # (A decoder classifier carries the channel unpadded too: its pad ids are tokens.)
        a, b = masked.forward(x, 0, -1)[..., :width], plain.forward(ids, 0, -1)[..., :width]
    # The unpadded sample agrees up to rounding (a masked batch takes another kernel); the
    # two real tokens of sample 2 see something else.
    assert torch.allclose(a[0], b[0], atol=1e-4)
    assert (a[2, -2:] - b[2, -2:]).abs().max() > 1e-2


def test_padding_mask_travels_as_one_trailing_channel():
    seq = models.build("gpt2-tiny", padding_mask=True)
    seq.layers.eval()
    x, _ = _padded_batch(seq)
    with torch.no_grad():
        hidden = seq.forward(x, 0, 1)
        assert hidden.shape == (3, 32, seq.config.hidden_size + 1)
        assert torch.equal(hidden[..., -1], (x != models.PADDING).float())
        after = seq.forward(hidden, 1, 3)
        assert torch.equal(after[..., -1], hidden[..., -1])
        assert torch.equal(seq.forward(after, 3), seq.forward(x))


def test_decoder_blocks_take_and_give_only_the_hidden_state():
    seq = models.build("llama-tiny")
    seq.layers.eval()
    x, _ = seq.example_batch(2)
    with torch.no_grad():
        hidden = seq.forward(x, 0, 2)
        assert hidden.shape == (2, 32, seq.config.hidden_size)
        assert torch.equal(seq.forward(hidden, 2), seq.forward(x))
    assert seq.forward(x).shape == (2, *seq.logits_shape) == (2, 32, 512)


def test_causal_lm_example_batch_labels_are_the_inputs():
    x, y = models.build("gpt2-tiny").example_batch(4)
    assert torch.equal(x, y) and (x != 0).all()
    seq = models.build("gpt2-tiny", padding_mask=True)
    x, y = seq.example_batch(4, torch.Generator().manual_seed(0))
    padding = x == models.PADDING
    assert (padding == (y == models.IGNORE_INDEX)).all() and padding.any()
    assert torch.equal(x[~padding], y[y != models.IGNORE_INDEX]) and (x[~padding] >= 1).all()


def test_causal_lm_loss_skips_ignored_labels_and_the_last_position():
    logits = torch.randn(1, 4, 5)
    labels = torch.tensor([[1, 2, models.IGNORE_INDEX, 3]])
    # Positions 0 and 1 predict tokens 2 and -100 (skipped); 2 predicts 3; 3 predicts nothing.
    expected = torch.nn.functional.cross_entropy(logits[0, [0, 2]], torch.tensor([2, 3]))
    assert torch.allclose(models.causal_lm_loss(logits, labels), expected)


def test_gpt2_language_model_head_is_untied_from_the_embeddings():
    seq, hf = models.build_with_hf("gpt2-tiny")
    wte, head = hf.transformer.wte.weight, hf.lm_head.weight
    assert wte is not head and torch.equal(wte, head)
    assert not seq.config.tie_word_embeddings
    first, last = set(seq.layers[0].parameters()), set(seq.layers[-1].parameters())
    assert not first & last


def test_dropout_override_reaches_every_family(tmp_path):
    """`dropout=0.0` turns off every dropout of the model, each of its config's rates set to
    0.5 first: the fifty-first round found BERT's, RoBERTa's and ELECTRA's
    `classifier_dropout` kept, and 1 rank and 2 trained other weights with `--dropout 0`."""
    import transformers

    for family in SMALL_CONFIGS:
        defaults = transformers.AutoConfig.for_model(family).to_dict()
        rates = {key: 0.5 for key in defaults if "dropout" in key or key.endswith("pdrop")}
        path = _write_config(tmp_path, family, **rates)
        seq = models.build(str(path), init="random", dropout=0.0)
        modules = list(seq.layers.modules())
        rates = [m.p for m in modules if isinstance(m, torch.nn.Dropout)]
        for name in ("attention_dropout", "dropout", "dropout_prob"):  # rates sdpa is given
            rates += [getattr(m, name) for m in modules if isinstance(getattr(m, name, 0), float)]
        assert rates and not any(rates), family


def test_config_directory_is_accepted(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(SMALL_CONFIGS["bert"]))
    seq = models.build(str(tmp_path), seq_len=16, init="random")
    assert seq.input_shape == (16,)
    assert seq.num_blocks == 3


@pytest.mark.parametrize(
    "name", ["bert-tiny", "bert-synth", "vit-digits", "vit-base", "gpt2-tiny", "llama-tiny"]
)
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
        (None, "no such file"),
        ("{not json", "not valid JSON"),
        ("[1, 2]", "JSON object"),
        (json.dumps({"model_type": "t5", "num_layers": 2}), "not a supported encoder"),
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
        models.build(str(path), init="random")


def test_unsupported_model_type_names_every_supported_one(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "t5"}))
    with pytest.raises(InputFileError) as err:
        models.build(str(path), init="random")
    message = str(err.value)
    assert "\n" not in message
    assert all(family in message for family in models.SUPPORTED_MODEL_TYPES)


@pytest.mark.parametrize(
    "family, kwargs, error, fragment",
    [
        ("bert", dict(task="causal-lm"), BadArgumentError, "causal-lm needs a decoder"),
        ("gpt2", dict(task="causal-lm", num_labels=3), BadArgumentError, "classification"),
        ("vit", dict(padding_mask=True), BadArgumentError, "is an image model: a padding mask"),
        ("llama", dict(task="summarise"), BadArgumentError, "available: classification"),
    ],
)
def test_unsupported_choices_are_one_line(tmp_path, family, kwargs, error, fragment):
    path = _write_config(tmp_path, family)
    with pytest.raises(error, match=fragment) as err:
        models.build(str(path), init="random", **kwargs)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("kwargs", [dict(task="classification"), dict(padding_mask=True)])
def test_decoder_padding_needs_a_pad_token(tmp_path, kwargs):
    path = _write_config(tmp_path, "gpt2", pad_token_id=None, eos_token_id=7)
    with pytest.raises(InputFileError, match="needs pad_token_id") as err:
        models.build(str(path), init="random", **kwargs)
    if "padding_mask" in kwargs:  # which id to set (the sixty-second round)
        assert str(err.value).endswith(
            "the id your tokenizer pads with (a decoder without one "
            "commonly pads with its eos_token_id, 7)"
        )
    models.build(str(path), init="random")  # a causal LM needs no padding


@pytest.mark.parametrize("kwargs", [dict(task="classification"), dict(padding_mask=True)])
@pytest.mark.parametrize(
    "eos, hint",
    [
        (7, "(a decoder without one commonly pads with its eos_token_id, 7)"),
        (
            50256,  # GPT2Config's default, kept by GPT2Config(vocab_size=100)
            "(a token of its vocabulary, 0..99; its eos_token_id 50256 is outside it, so "
            "cannot be the pad id)",
        ),
        (None, "(a token of its vocabulary, 0..99)"),
    ],
)
def test_the_pad_id_advised_for_a_config_without_one_is_taken(tmp_path, kwargs, eos, hint):
    """Found by the sixty-sixth round: a GPT-2 folder of vocabulary 300 with GPT2Config's
    default eos_token_id 50256 was advised to pad with 50256, and refused once it did
    ("pad_token_id 50256 is not a token id of its vocabulary"). An eos id is advised only
    where it is a token; a config given the advised id builds."""
    path = _write_config(tmp_path, "gpt2", pad_token_id=None, eos_token_id=eos)
    with pytest.raises(InputFileError, match="needs pad_token_id") as err:
        models.build(str(path), init="random", **kwargs)
    message = str(err.value)
    assert "\n" not in message
    assert message.endswith(f"set it in config.json to the id your tokenizer pads with {hint}")
    if "eos_token_id," in hint:
        _write_config(tmp_path, "gpt2", pad_token_id=eos, eos_token_id=eos)
        assert models.build(str(path), init="random", **kwargs).config.pad_token_id == eos


@pytest.mark.parametrize("pad", [500, 100, -1])  # the vocabulary is 0..99
@pytest.mark.parametrize(
    "family, kwargs",
    [
        ("gpt2", dict(padding_mask=True)),
        ("gpt2", dict(task="classification")),  # pools the last token that is not padding
        ("llama", dict(padding_mask=True)),
        ("llama", dict(task="classification")),
        ("bert", dict(padding_mask=True)),
    ],
)
def test_a_pad_token_outside_the_vocabulary_is_one_line(tmp_path, family, kwargs, pad):
    """Fourteenth round: a GPT-2 folder whose pad_token_id lies outside its vocabulary, with
    --padding-mask, gave an IndexError traceback from the profiler's first forward (BERT's
    builder refused it, GPT-2's and Llama's did not)."""
    path = _write_config(tmp_path, family, pad_token_id=pad)
    with pytest.raises(InputFileError) as err:
        models.build(str(path), init="random", **kwargs)
    assert "\n" not in str(err.value) and "pad_token_id" in str(err.value)


def test_sequence_length_is_checked():
    with pytest.raises(InputFileError, match="outside"):
        models.build("bert-synth", seq_len=65)
    # a flag the model has no use for, not a file's fault (the ninety-first round)
    with pytest.raises(BadArgumentError, match="text models only"):
        models.build("vit-digits", seq_len=8)


def test_the_light_config_tables_are_transformers_and_the_families():
    """A profile's config is checked without transformers (`formats.modelconfig`, so that
    `plan` does not import torch): its table of each family's default token ids and the
    profile's decoder families must be what transformers and `FAMILIES` say."""
    import transformers

    from pipeplan.formats.modelconfig import DEFAULT_TOKEN_IDS, TOKEN_ID_KEYS
    from pipeplan.formats.profile import DECODER_FAMILIES

    assert set(DEFAULT_TOKEN_IDS) == set(FAMILIES)
    for name, family in FAMILIES.items():
        config = getattr(transformers, family.config_class)()
        ids = {k: getattr(config, k, None) for k in TOKEN_ID_KEYS}
        assert {k: v for k, v in ids.items() if v is not None} == DEFAULT_TOKEN_IDS[name]
    assert set(DECODER_FAMILIES) == {n for n, f in FAMILIES.items() if f.kind == "decoder"}


def test_the_unsettable_config_keys_are_transformers():
    """The keys a config may not give (`modelconfig.READ_ONLY_KEYS`, `CONFIG_METHODS`, written
    out so that a profile's config is checked without transformers since the twenty-third
    round) are exactly each family's config class's read-only properties and methods, looked
    into (getattr_static, nothing run): one transformers adds fails here."""
    import dataclasses
    import inspect

    import transformers

    from pipeplan.formats.modelconfig import CONFIG_CLASSES, CONFIG_METHODS, READ_ONLY_KEYS

    assert {name: family.config_class for name, family in FAMILIES.items()} == CONFIG_CLASSES
    for class_name in CONFIG_CLASSES.values():
        config_class = getattr(transformers, class_name)
        fields = {f.name for f in dataclasses.fields(config_class)} | set(
            config_class.attribute_map
        )
        held = {key: inspect.getattr_static(config_class, key) for key in dir(config_class)}
        read_only = {
            k for k, v in held.items() if isinstance(v, property) and v.fset is None
        } - fields
        methods = {
            k
            for k, v in held.items()
            if not isinstance(v, property)
            and (callable(v) or isinstance(v, classmethod | staticmethod))
        } - fields
        assert (class_name, read_only) == (class_name, set(READ_ONLY_KEYS))
        assert (class_name, methods) == (class_name, set(CONFIG_METHODS))


def test_the_generation_config_keys_checked_are_transformers():
    """The nineteenth round's checks of a folder's generation_config.json (`formats.modelconfig`,
    without transformers) name GenerationConfig's own attributes: a key transformers renamed
    would go unchecked."""
    from transformers import GenerationConfig

    from pipeplan.formats.modelconfig import (
        GENERATION_LEGACY_KEYS,
        GENERATION_RANGES,
        GENERATION_TOKEN_ID_KEYS,
        GENERATION_TOKEN_LISTS,
        TOKEN_ID_KEYS,
    )

    keys = [key for keys, _, _ in GENERATION_RANGES for key in keys]
    keys += [*GENERATION_TOKEN_LISTS, *(set(GENERATION_TOKEN_ID_KEYS) - set(TOKEN_ID_KEYS))]
    keys = [key for key in keys if key not in GENERATION_LEGACY_KEYS]
    config = GenerationConfig()
    assert [key for key in keys if not hasattr(config, key)] == []


def test_every_field_of_a_generation_config_is_checked():
    """Found by the twentieth round: bad_words_ids [[999999]], max_length 10^20,
    num_assistant_tokens -1 and the like were accepted: the nineteenth round's table named some
    of GenerationConfig's fields only. Every field GenerationConfig defines is in a table (or
    left, by name, to transformers' own validation), so one transformers adds fails here."""
    from transformers import GenerationConfig

    from pipeplan.formats.modelconfig import generation_fields

    assert sorted(set(GenerationConfig().to_dict()) - generation_fields()) == []


def test_every_checked_generation_field_refuses_a_value_of_another_shape():
    """Found by the twentieth round (as above): each field the tables check refuses a value no
    field takes (a list of [-1]), in a message that starts with its name."""
    from pipeplan.formats.modelconfig import (
        GENERATION_LEFT_TO_TRANSFORMERS,
        generation_fields,
        generation_value_problem,
    )

    for key in sorted(generation_fields() - set(GENERATION_LEFT_TO_TRANSFORMERS)):
        why = generation_value_problem({key: [[-1]]}, 128, "gpt2")
        assert why is not None and why.startswith(f"{key} "), (key, why)


@pytest.mark.parametrize(
    "generation",
    [
        {"bad_words_ids": [[1, 2], [3]], "sequence_bias": [[[1], -2.0]]},
        {"force_words_ids": [[1, 2], [[3], [4, 5]]], "forced_decoder_ids": [[1, 5]]},
        {
            "dola_layers": "low",
            "stop_strings": ["\n"],
            "exponential_decay_length_penalty": [5, 1.1],
        },
        {"num_beams": 4, "num_beam_groups": 2, "min_length": 10, "max_length": 10},
        {"max_length": 2**31 - 1, "length_penalty": -1.5, "constraints": []},
        {"bos_token_id": 1, "do_sample": True, "eos_token_id": 2, "max_length": 4096},
        # The twenty-first round's range ends, at the values that turn each setting off.
        {"do_sample": True, "temperature": 0.7, "top_p": 0.9, "top_k": 50, "typical_p": 1.0},
        {"do_sample": True, "temperature": 1, "epsilon_cutoff": 0.0, "eta_cutoff": 3e-4},
        {"temperature": 0, "repetition_penalty": 1, "guidance_scale": 1, "top_h": 1.0},
        {"num_beams": 6, "num_beam_groups": 3, "diversity_penalty": 0.5},
        # The twenty-fourth round's watermarking keys, each valid (its own checks).
        {"watermarking_config": {}},
        {
            "watermarking_config": {
                "greenlist_ratio": 0.5,
                "bias": -1,
                "hashing_key": 2**64 - 1,
                "seeding_scheme": "selfhash",
                "context_width": 3,
            }
        },
    ],
)
def test_generation_configs_as_transformers_writes_them_pass(generation):
    """The twentieth and twenty-first rounds' checks refuse no valid value of the fields they
    add (the shapes transformers writes: [[ids, bias]] pairs, words of alternatives, min equal
    to max; the range ends that turn a setting off)."""
    from pipeplan.formats.modelconfig import generation_value_problem

    assert generation_value_problem(generation, 128, "gpt2") is None


@pytest.mark.parametrize("family", list(FAMILIES))
def test_the_parameters_and_shapes_a_config_implies_are_transformers(family):
    """Found by the eighteenth round: config sizes were built whatever they asked (vocab_size
    10^9: 128 GB). The dictionary-only count (`modelconfig.parameter_terms`, the bound's) and
    shapes (`implied_shapes`, the weights' header check) are transformers' own, for each task,
    label count, tied or untied head and grouped-query width; built on the meta device."""
    import transformers

    from pipeplan.formats.modelconfig import implied_shapes, parameter_terms

    edits = [{}, {"num_labels": 5}, {"tie_word_embeddings": False}]
    if family == "llama":
        edits += [{"num_key_value_heads": 8, "head_dim": 64}, {"attention_bias": True}]
    if family == "gpt2":
        edits += [{"n_inner": 100}]
    if family in ("vit", "deit"):
        edits += [{"qkv_bias": False}]  # the twentieth round: counted as biased
    for task, model_class in FAMILIES[family].models.items():
        for edit in edits:
            config = getattr(transformers, FAMILIES[family].config_class)(**edit)
            with torch.device("meta"):
                model = getattr(transformers, model_class)(config)
            config_dict = json.loads(config.to_json_string(use_diff=False))
            terms = parameter_terms(config_dict, family, task)
            assert sum(n for n, _ in terms) == sum(p.numel() for p in model.parameters()), edit
            shapes = {k: list(v.shape) for k, v in model.state_dict().items()}
            for endings, dims in implied_shapes(config_dict, family):
                found = [k for k in shapes if any(k.endswith(f".{e}") for e in endings)]
                assert found and shapes[found[0]] == [v for _, v in dims], (edit, endings)


def _layer_counts(seq) -> list[int]:
    """Each layer's parameters as the profiler counts them."""
    return [sum(p.numel() for p in layer.parameters()) for layer in seq.layers]


def _implied_counts(seq) -> list[int]:
    """Each layer's parameters as `modelconfig.layer_parameters` reads them off its config."""
    from pipeplan.formats.modelconfig import layer_parameters

    implied = layer_parameters(seq.config_json(), seq.family, seq.task)
    assert implied is not None, seq.config_json()
    return [implied[seq.kind(i)][0] for i in range(len(seq.layers))]


def _perturbed(config: dict) -> list[dict]:
    """`config` with each integer doubled (3 for 0), each flag flipped and each unset optional
    size set, one field at a time: every field that could size a layer, changed."""
    edits = []
    for key, value in config.items():
        if type(value) is bool:
            edits.append({key: not value})
        elif type(value) is int:
            edits.append({key: 2 * value if value else 3})
        elif value is None and key in ("n_inner", "num_key_value_heads", "head_dim"):
            edits.append({key: 8})
    return edits


@pytest.mark.parametrize("family", sorted(SMALL_CONFIGS))
def test_each_layers_parameters_are_what_its_config_implies_for_every_field(tmp_path, family):
    """Found by the twentieth round: a profile's per-layer params were not held to its config
    (a bert-tiny block of 5 parameters, config 198,272, was planned). The dictionary-only
    count a profile is held to (`modelconfig.layer_parameters`, no torch) is the layers
    pipeplan builds, layer by layer, for each task, label count and tied head, and for every
    field of the family's config changed one at a time (a change pipeplan refuses is
    skipped): a field that sizes a layer and is not counted fails here (ViT's qkv_bias was)."""
    path = _write_config(tmp_path, family)
    edits = [{}, {"num_labels": 9}, {"tie_word_embeddings": True}]
    edits += [{"tie_word_embeddings": False}]
    for task in FAMILIES[family].models:
        full = models.build(str(path), init="random", task=task).config_json()
        for edit in [*edits, *_perturbed(full)]:
            config = {**(full if edit not in edits else SMALL_CONFIGS[family]), **edit}
            path.write_text(json.dumps(config))
            try:
                seq = models.build(str(path), init="random", task=task)
            except (InputFileError, BadArgumentError):
                continue  # a config pipeplan refuses makes no profile
            assert _implied_counts(seq) == _layer_counts(seq), (task, edit)


@pytest.mark.parametrize("family", sorted(SMALL_CONFIGS))
def test_a_profile_of_every_family_passes_its_layer_checks(tmp_path, family):
    """What the twentieth round's layer checks leave alone: the profiler's own profile of every
    family and task, with a padding mask and in bf16 (`Profile` holds each layer's params and
    output bytes to its config as it is made, and again as it is read)."""
    from pipeplan import formats, profiler

    path = str(_write_config(tmp_path, family))
    builds = [dict(task=task) for task in FAMILIES[family].models]
    if family in TEXT:  # a short sequence: the profile is quick
        builds = [{**build, "seq_len": 8} for build in [*builds, dict(padding_mask=True)]]
    for build in builds:
        seq = models.build(path, init="random", **build)
        for precision in ("fp32", "bf16"):
            prof = profiler.profile_layers(
                seq, micro_batches=[1], warmup=0, repeats=1, precision=precision
            )
            assert [layer.params for layer in prof.layers] == _implied_counts(seq)
            assert formats.parse(formats.Profile, formats.dumps(prof)) == prof


def test_plan_loads_a_profile_without_importing_torch():
    """`plan` checks a profile's config with its dictionary alone: the seventeenth round's
    config checks, done with transformers' classes, made `plan` import torch (1.1 s → 6 s)."""
    profile = Path(__file__).parents[1] / "profiles" / "bert-tiny@cpu-1t.json"
    code = (
        "import sys; from pipeplan.formats import Profile, load; "
        f"load(Profile, {str(profile)!r}); "
        "assert 'torch' not in sys.modules and 'transformers' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
