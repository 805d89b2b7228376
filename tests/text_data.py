"""Local stand-ins for what a fine-tuning user brings, made offline: film reviews as JSONL, a
WordPiece tokenizer trained on them (saved as a transformers tokenizer directory), and small
pretrained-looking checkpoints (a transformers model saved with its weights)."""

import json
import random
from pathlib import Path

import torch
import transformers

POSITIVE = ["great", "moving", "funny", "superb", "charming", "clever"]
NEGATIVE = ["dull", "boring", "clumsy", "awful", "flat", "tedious"]
FILLER = ["the", "a", "film", "plot", "cast", "scene", "was", "and", "but", "it", "very"]
SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"]  # [PAD] first: pad id 0, as the models use


def reviews(n: int, seed: int) -> list[dict]:
    """`n` JSONL rows {"text", "label": "positive"|"negative"} of 3..12 words: the label's
    opinion words outnumber the others."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        label = rng.choice(["positive", "negative"])
        mine, other = (POSITIVE, NEGATIVE) if label == "positive" else (NEGATIVE, POSITIVE)
        words = [rng.choice(mine) for _ in range(2)] + [rng.choice(other)] * rng.randint(0, 1)
        words += [rng.choice(FILLER) for _ in range(rng.randint(1, 9))]
        rng.shuffle(words)
        rows.append({"text": " ".join(words), "label": label})
    return rows


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def make_tokenizer(directory: Path) -> Path:
    """A WordPiece tokenizer trained on every review word, saved with `save_pretrained`."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    words = POSITIVE + NEGATIVE + FILLER
    trainer = trainers.WordPieceTrainer(vocab_size=120, special_tokens=SPECIAL)
    tok.train_from_iterator([" ".join(words)] * 4, trainer)
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]"
    )
    fast.save_pretrained(directory)
    return directory


BERT = dict(
    vocab_size=128,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=64,
    max_position_embeddings=64,
    pad_token_id=0,
    # No dropout: a training step's loss is then the model's evaluation loss.
    hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0,
)


def bert_checkpoint(directory: Path, num_labels: int = 2, seed: int = 5, head: bool = True) -> Path:
    """A BERT classifier with weights drawn from `seed`, saved as a transformers directory;
    without `head`, the encoder alone (`BertModel`, as pretrained encoders ship)."""
    torch.manual_seed(seed)
    config = transformers.BertConfig(**BERT, num_labels=num_labels)
    model = transformers.BertForSequenceClassification(config) if head else None
    (model or transformers.BertModel(config)).save_pretrained(directory)
    return directory
