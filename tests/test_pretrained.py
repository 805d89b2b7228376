"""Pretrained weights in, a transformers model out: a checkpoint directory loads exactly, a
missing head is replaced (and said so), and `export` writes what `from_pretrained` reads."""

import contextlib
import json
import logging
import warnings

import numpy as np
import pytest
import torch
import transformers
from safetensors.torch import load_file

from pipeplan import models
from pipeplan.errors import BadArgumentError, InputFileError, OutputError

BERT = dict(
    vocab_size=100,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=64,
    max_position_embeddings=40,
)
GPT2 = dict(vocab_size=100, n_positions=40, n_embd=32, n_layer=2, n_head=2, pad_token_id=0)
LLAMA = dict(
    vocab_size=100,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=40,
    pad_token_id=0,
)


CLASSIFIER, LM = "AutoModelForSequenceClassification", "AutoModelForCausalLM"


def _save(tmp_path, cls, config_cls, seed=5, **config):
    """A transformers model with random weights (from `seed`), saved as a directory."""
    torch.manual_seed(seed)
    model = getattr(transformers, cls)(getattr(transformers, config_cls)(**config))
    model.save_pretrained(tmp_path)
    return model.eval()


def _batch(seq, n=4):
    return seq.example_batch(n, torch.Generator().manual_seed(2))


def _hf_inputs(seq, x):
    """What a transformers user passes for the example ids `x`: with a padding mask (a decoder
    classifier always carries one, and its example batch is padded) the tokenizer's ids and
    attention mask."""
    if seq.padding_mask:
        return models.transformers_inputs(x, seq.config.pad_token_id)
    return {"input_ids": x}


def _same_loss(seq, reference, x, y):
    """The sequence's eval loss and the transformers model's own loss on the same batch."""
    seq.layers.eval()
    with torch.no_grad():
        ours = seq.loss(seq.forward(x), y)
        theirs = reference(input_ids=x, labels=y).loss
    return ours, theirs


def test_pretrained_weights_load_exactly_and_the_loss_is_the_models_own(tmp_path):
    reference = _save(tmp_path, "BertForSequenceClassification", "BertConfig", num_labels=3, **BERT)
    seq = models.build(str(tmp_path))
    saved = load_file(tmp_path / "model.safetensors")
    params = dict(seq.hf_model.named_parameters())
    assert set(params) == set(saved)
    assert all(torch.equal(params[name], saved[name]) for name in saved)
    in_layers = sum(p.numel() for p in seq.layers.parameters())
    assert in_layers == sum(t.numel() for t in saved.values())  # the layers hold all of them
    assert seq.num_labels == 3 and seq.hf_model.training  # like a random build
    ours, theirs = _same_loss(seq, reference, *_batch(seq))
    assert torch.equal(ours, theirs)


def test_pytorch_model_bin_loads_too(tmp_path):
    torch.manual_seed(1)
    model = transformers.BertForSequenceClassification(transformers.BertConfig(**BERT))
    model.config.save_pretrained(tmp_path)
    torch.save(model.state_dict(), tmp_path / "pytorch_model.bin")
    seq = models.build(str(tmp_path / "config.json"))  # the config path: weights beside it
    word = seq.hf_model.bert.embeddings.word_embeddings.weight
    assert torch.equal(word, model.bert.embeddings.word_embeddings.weight)


def test_a_config_without_weights_needs_init_random(tmp_path):
    transformers.BertConfig(**BERT).save_pretrained(tmp_path)
    with pytest.raises(InputFileError, match="--init random") as err:
        models.build(str(tmp_path))
    assert "\n" not in str(err.value) and "model.safetensors" in str(err.value)
    with pytest.raises(InputFileError, match="--init random"):
        models.build(str(tmp_path), init="pretrained")
    models.build(str(tmp_path), init="random")


def test_init_random_ignores_the_checkpoint(tmp_path):
    _save(tmp_path, "BertForSequenceClassification", "BertConfig", **BERT)
    seq = models.build(str(tmp_path), init="random", seed=4)
    saved = load_file(tmp_path / "model.safetensors")
    word = seq.hf_model.bert.embeddings.word_embeddings.weight
    assert not torch.equal(word, saved["bert.embeddings.word_embeddings.weight"])


def test_presets_have_no_weights_to_load():
    with pytest.raises(BadArgumentError, match="without weights"):
        models.build("bert-tiny", init="pretrained")
    with pytest.raises(BadArgumentError, match="pretrained or random"):
        models.build("bert-tiny", init="zeros")


def _warnings(caplog):
    return [r for r in caplog.records if r.name == "pipeplan.models" and r.levelname == "WARNING"]


@pytest.mark.parametrize(
    "cls, fresh",
    [
        ("BertModel", ["classifier.weight", "classifier.bias"]),
        ("BertForMaskedLM", ["bert.pooler.dense.weight", "classifier.weight"]),
    ],
)
def test_a_checkpoint_without_the_head_gets_a_fresh_one_and_one_warning(
    tmp_path, caplog, capfd, cls, fresh
):
    reference = _save(tmp_path, cls, "BertConfig", **BERT)
    capfd.readouterr()
    with caplog.at_level(logging.WARNING, logger="pipeplan.models"):
        seq = models.build(str(tmp_path), num_labels=4, seed=9)
    (record,) = _warnings(caplog)
    message = record.getMessage()
    assert "\n" not in message and all(name in message for name in fresh)
    assert "4 outputs" in message and "seed 9" in message
    assert "LOAD REPORT" not in capfd.readouterr().err  # transformers' table stays quiet
    assert seq.hf_model.classifier.weight.shape == (4, BERT["hidden_size"])
    base = reference.bert if hasattr(reference, "bert") else reference
    assert torch.equal(
        seq.hf_model.bert.encoder.layer[1].output.dense.weight,
        base.encoder.layer[1].output.dense.weight,
    )
    again = models.build(str(tmp_path), num_labels=4, seed=9)  # every rank gets the same head
    assert torch.equal(again.hf_model.classifier.weight, seq.hf_model.classifier.weight)


DISTILBERT = dict(vocab_size=512, dim=32, n_layers=2, n_heads=2, hidden_dim=64)


@pytest.mark.parametrize(
    "cls, config, fresh",
    [
        ("BertForTokenClassification", ("BertConfig", BERT), "bert.pooler.dense.bias"),
        ("DistilBertForTokenClassification", ("DistilBertConfig", DISTILBERT), "pre_classifier"),
    ],
)
def test_a_token_classifiers_classifier_is_kept_and_the_warning_says_so(
    tmp_path, caplog, cls, config, fresh
):
    """Found by the sixtieth round: a token classifier's checkpoint (BertForTokenClassification,
    DistilBERT's) lacks only the pooler (or pre_classifier) of a sequence head; its classifier,
    of the same size, is loaded, yet the warning said "the head starts from random weights".
    It names what starts fresh, and the classifier as the checkpoint's."""
    reference = _save(tmp_path, cls, config[0], num_labels=3, **config[1])
    with caplog.at_level(logging.WARNING, logger="pipeplan.models"):
        seq = models.build(str(tmp_path), num_labels=3, seed=9)
    (record,) = _warnings(caplog)
    message = record.getMessage()
    assert "the checkpoint holds part of the head for this task (no " in message, message
    assert fresh in message and "those start from random weights (seed 9)" in message, message
    assert message.endswith("classifier.bias, classifier.weight (3 outputs) are the checkpoint's")
    assert "the head starts from random weights" not in message
    assert torch.equal(seq.hf_model.classifier.weight, reference.classifier.weight)


def test_a_head_for_other_num_labels_is_replaced(tmp_path, caplog):
    _save(tmp_path, "BertForSequenceClassification", "BertConfig", num_labels=2, **BERT)
    with caplog.at_level(logging.WARNING, logger="pipeplan.models"):
        seq = models.build(str(tmp_path), num_labels=5)
    (record,) = _warnings(caplog)
    assert "sized for another number of labels" in record.getMessage()
    assert seq.num_labels == 5 and len(seq.config.id2label) == 5
    x, _ = _batch(seq)
    assert seq.forward(x).shape == (4, 5)


def test_a_complete_checkpoint_loads_without_a_warning(tmp_path, caplog):
    _save(tmp_path, "BertForSequenceClassification", "BertConfig", num_labels=3, **BERT)
    with caplog.at_level(logging.WARNING, logger="pipeplan.models"):
        models.build(str(tmp_path), num_labels=3)
    assert not _warnings(caplog)


def test_a_checkpoint_missing_blocks_is_refused(tmp_path):
    _save(tmp_path, "BertForSequenceClassification", "BertConfig", **BERT)
    config = transformers.BertConfig.from_pretrained(tmp_path)
    config.num_hidden_layers = 3  # the checkpoint has 2 blocks
    config.save_pretrained(tmp_path)
    with pytest.raises(InputFileError, match=r"lacks \d+ weights outside the task head"):
        models.build(str(tmp_path))


def test_gpt2_language_model_checkpoint_loads_its_tied_head(tmp_path):
    reference = _save(tmp_path, "GPT2LMHeadModel", "GPT2Config", **GPT2)
    seq = models.build(str(tmp_path))
    assert seq.task == "causal-lm"
    head = seq.hf_model.lm_head.weight
    assert torch.equal(head, reference.transformer.wte.weight)
    assert head is not seq.hf_model.transformer.wte.weight  # untied (models._untie)
    x, y = _batch(seq)
    ours, theirs = _same_loss(seq, reference, x, y)
    assert torch.equal(ours, theirs)


@pytest.mark.timeout(300)
def test_a_tied_language_model_checkpoint_is_profiled_and_run_with_its_profile(tmp_path, capsys):
    """Thirteenth round: the profile of a saved GPT2LMHeadModel recorded the untied config
    (tie_word_embeddings false) and then refused the very folder it profiled, whose config says
    true, suggesting the command just run. The untied model is what is profiled and trained
    either way, so the tie is not part of the model's identity."""
    from text_data import make_tokenizer, reviews, write_jsonl

    import cli

    shape = {**GPT2, "vocab_size": 128}  # the test tokenizer's ids
    folder = tmp_path / "gpt2"
    _save(folder, "GPT2LMHeadModel", "GPT2Config", **shape)
    profile = tmp_path / "p.json"
    quick = ["--micro-batch-sizes", "1,2", "--repeats", "1", "--warmup", "0", "--padding-mask"]
    assert cli.main(["profile", str(folder), *quick, "--out", str(profile)]) == 0
    data = write_jsonl(tmp_path / "lm.jsonl", [{"text": r["text"]} for r in reviews(64, 0)])
    run = ["run", "--model", str(folder), "--profile", str(profile), "--data", str(data)]
    run += ["--tokenizer", str(make_tokenizer(tmp_path / "tok"))]
    run += ["--epochs", "1", "--global-batch", "8", "--runs-dir", str(tmp_path / "runs")]
    assert cli.main([*run, "--prepare-only"]) == 0, capsys.readouterr().err
    # Still refused for a model of another shape.
    other = tmp_path / "wider"
    _save(other, "GPT2LMHeadModel", "GPT2Config", **{**shape, "n_embd": 64})
    run[2] = str(other)
    assert cli.main([*run, "--prepare-only", "--name", "other"]) == 2
    assert "'n_embd' is 32" in capsys.readouterr().err


def test_llama_without_a_language_model_head_gets_a_fresh_one(tmp_path, caplog):
    reference = _save(tmp_path, "LlamaModel", "LlamaConfig", **LLAMA)
    with caplog.at_level(logging.WARNING, logger="pipeplan.models"):
        seq = models.build(str(tmp_path))
    (record,) = _warnings(caplog)
    assert "lm_head.weight" in record.getMessage()
    assert seq.task == "causal-lm"
    assert torch.equal(seq.hf_model.model.norm.weight, reference.norm.weight)


def test_a_language_model_checkpoint_fine_tunes_as_a_classifier(tmp_path, caplog):
    reference = _save(tmp_path, "LlamaForCausalLM", "LlamaConfig", **LLAMA)
    with caplog.at_level(logging.WARNING, logger="pipeplan.models"):
        seq = models.build(str(tmp_path), task="classification", num_labels=3)
    (record,) = _warnings(caplog)
    assert "score.weight" in record.getMessage()
    assert torch.equal(seq.hf_model.model.embed_tokens.weight, reference.model.embed_tokens.weight)


def _train_a_little(seq, steps=2):
    """A few optimizer steps, so the export is not just the initial weights."""
    seq.layers.train()
    opt = torch.optim.SGD(seq.layers.parameters(), lr=0.5)
    for step in range(steps):
        x, y = seq.example_batch(4, torch.Generator().manual_seed(step))
        seq.loss(seq.forward(x), y).backward()
        opt.step()
        opt.zero_grad()


@pytest.mark.parametrize(
    "name, kwargs, auto",
    [
        ("bert-synth", dict(), CLASSIFIER),
        ("gpt2-tiny", dict(), LM),
        ("llama-tiny", dict(), LM),
        ("llama-tiny", dict(task="classification", num_labels=3), CLASSIFIER),
    ],
)
def test_export_is_a_transformers_directory_with_the_trained_weights(tmp_path, name, kwargs, auto):
    seq, initial = models.build(name, **kwargs), models.build(name, **kwargs)
    _train_a_little(seq)
    out = models.export(seq, tmp_path / "model")
    assert {"config.json", "model.safetensors"} <= {p.name for p in out.iterdir()}
    loaded = getattr(transformers, auto).from_pretrained(out, local_files_only=True).eval()
    seq.layers.eval(), initial.layers.eval()
    x, _ = _batch(seq)
    with torch.no_grad():
        logits = seq.forward(x)
        assert torch.equal(loaded(**_hf_inputs(seq, x)).logits, logits)
        assert not torch.equal(initial.forward(x), logits)  # trained weights, not the initial


@contextlib.contextmanager
def _loading_strictly():
    """A warning while loading is an error: Python's (`warnings`) and transformers' own log
    lines, which go to its `transformers` logger (not propagated, so caplog misses them).

        with _loading_strictly():
            AutoModelForCausalLM.from_pretrained(out)
    """

    class Raise(logging.Handler):
        def emit(self, record):
            raise AssertionError(f"transformers warned: {record.getMessage()}")

    hf_logger, handler = logging.getLogger("transformers"), Raise(logging.WARNING)
    hf_logger.addHandler(handler)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            yield
    finally:
        hf_logger.removeHandler(handler)


def _ids_outside(config: dict, vocab: int) -> dict:
    """The token ids of an exported config.json or generation_config.json outside 0..vocab-1."""
    ids = {k: v for k, v in config.items() if k.endswith("token_id") and v is not None}
    return {k: v for k, v in ids.items() if not all(0 <= i < vocab for i in np.ravel(v))}


@pytest.mark.parametrize(
    "cls, config_cls, shape, auto",
    [
        ("GPT2LMHeadModel", "GPT2Config", GPT2, LM),
        ("LlamaForCausalLM", "LlamaConfig", {**LLAMA, "tie_word_embeddings": True}, LM),
        ("GPT2ForSequenceClassification", "GPT2Config", GPT2, CLASSIFIER),
    ],
)
def test_a_trained_tied_checkpoint_exports_untied_and_loads_without_a_warning(
    tmp_path, cls, config_cls, shape, auto
):
    """Found by the twentieth round: a run from a GPT-2 folder wrote model/config.json with
    tie_word_embeddings true beside a trained lm_head unlike the embeddings (from_pretrained
    copies the config; only pipeplan's copy said untied), so transformers 5 warned and 4 tied
    the two on loading, replacing the trained head; and bos/eos 50256, GPT-2's defaults, for a
    100-token vocabulary, which transformers warns about. The export loads with no warning, its
    token ids inside the vocabulary, and gives the trained model's logits, also after
    `tie_weights()`, what transformers 4 calls after loading."""
    _save(tmp_path / "ckpt", cls, config_cls, **shape)
    seq = models.build(str(tmp_path / "ckpt"), task="causal-lm" if auto == LM else None)
    _train_a_little(seq)
    out = models.export(seq, tmp_path / "model")
    config = json.loads((out / "config.json").read_text())
    assert config["tie_word_embeddings"] is False or auto == CLASSIFIER  # no head to tie there
    assert _ids_outside(config, shape["vocab_size"]) == {}
    if (out / "generation_config.json").exists():
        generation = json.loads((out / "generation_config.json").read_text())
        assert _ids_outside(generation, shape["vocab_size"]) == {}
    with _loading_strictly():
        loaded = getattr(transformers, auto).from_pretrained(out, local_files_only=True).eval()
    seq.layers.eval()
    x, _ = _batch(seq)
    with torch.no_grad():
        assert torch.equal(loaded(**_hf_inputs(seq, x)).logits, seq.forward(x))
        loaded.tie_weights()
        assert torch.equal(loaded(**_hf_inputs(seq, x)).logits, seq.forward(x))
    # The model itself keeps its ids: only the files say null.
    assert seq.hf_model.config.bos_token_id == getattr(transformers, config_cls)().bos_token_id


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_a_gpt2_runs_model_and_its_export_load_without_a_warning_as_the_trained_model(tmp_path):
    """Found by the twentieth round: a run from a GPT-2 folder wrote model/config.json with
    tie_word_embeddings true beside its trained, untied lm_head (transformers 5 warned and kept
    them apart, 4 tied them: the trained head replaced), and bos/eos 50256 for a 128-token
    vocabulary. The run's own model/ and `pipeplan export`'s folder load with no warning,
    untied also after `tie_weights()` (transformers 4), and give the same logits."""
    from text_data import make_tokenizer, write_jsonl

    import cli

    folder, shape = tmp_path / "gpt2", {**GPT2, "vocab_size": 128}  # the test tokenizer's ids
    _save(folder, "GPT2LMHeadModel", "GPT2Config", **shape)
    profile = tmp_path / "p.json"
    quick = ["--micro-batch-sizes", "1,2", "--repeats", "1", "--warmup", "0", "--padding-mask"]
    assert cli.main(["profile", str(folder), *quick, "--seq-len", "16", "--out", str(profile)]) == 0
    data = write_jsonl(tmp_path / "lm.jsonl", [{"text": "the film was great " * 3}] * 64)
    run = ["run", "--model", str(folder), "--profile", str(profile), "--data", str(data)]
    run += ["--tokenizer", str(make_tokenizer(tmp_path / "tok")), "--seq-len", "16"]
    run += ["--nproc", "1", "--epochs", "1", "--max-steps-per-epoch", "3", "--global-batch", "8"]
    run += ["--lr", "1e-2", "--runs-dir", str(tmp_path / "runs"), "--name", "lm"]
    assert cli.main(run) == 0
    run_dir, exported = tmp_path / "runs" / "lm", tmp_path / "exported"
    assert cli.main(["export", str(run_dir), "--out", str(exported)]) == 0
    x = torch.randint(1, 128, (2, 16), generator=torch.Generator().manual_seed(0))
    logits = []
    for out in (run_dir / "model", exported):
        config = json.loads((out / "config.json").read_text())
        assert config["tie_word_embeddings"] is False
        assert _ids_outside(config, 128) == {}
        with _loading_strictly():
            loaded = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
        loaded.tie_weights()  # what transformers 4 does after loading: nothing, untied
        head, wte = loaded.lm_head.weight, loaded.transformer.wte.weight
        assert head is not wte and not torch.equal(head, wte)  # trained apart
        with torch.no_grad():
            logits.append(loaded(input_ids=x).logits)
    assert torch.equal(*logits)


@pytest.mark.parametrize("init", ["pretrained", "random"])
def test_a_checkpoints_generation_config_is_exported_as_found(tmp_path, init):
    """Found by the nineteenth round (generation_config.json was read by transformers alone):
    a file that passes config.json's rules is kept. The exported model carries the folder's
    settings whether its weights were loaded or drawn (a random build, as `pipeplan export`
    makes, derived others from config.json, so a run's own model/ and its export differed),
    and a setting transformers only warns about (temperature without do_sample) is saved as
    found, not refused at export. (The twentieth round: GPT-2's default bos, 50256, admitted
    for a vocabulary of 100, is exported as null: an id inside the vocabulary or none.)"""
    folder = tmp_path / "ckpt"
    _save(folder, "GPT2LMHeadModel", "GPT2Config", **GPT2)
    # 50256: GPT-2's default eos and bos, which transformers writes for any vocabulary.
    found = {"max_length": 50, "temperature": 0.7, "eos_token_id": 5, "bos_token_id": 50256}
    (folder / "generation_config.json").write_text(json.dumps(found))
    out = models.export(models.build(str(folder), init=init), tmp_path / "out")
    written = json.loads((out / "generation_config.json").read_text())
    assert {key: written.get(key) for key in found} == {**found, "bos_token_id": None}
    assert transformers.GenerationConfig.from_pretrained(out).max_length == 50


def test_export_refuses_a_directory_with_files(tmp_path):
    (tmp_path / "old.txt").write_text("keep me")
    with pytest.raises(OutputError, match="not an empty directory"):
        models.export(models.build("gpt2-tiny"), tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == ["old.txt"]
