"""An Encoder (encoder.py) from a tokenizer.json: its model (BPE, WordPiece, Unigram,
WordLevel), normaliser, pre-tokenizer, post-processor, decoder and added tokens. A setting whose
effect is not implemented (BPE dropout, a subword prefix on BPE, an unknown post-processor) is
refused by name: encoding must equal the `tokenizers` library's, or not happen.
"""

from __future__ import annotations

from ...errors import LOW_LEVEL_ERRORS, FormatError, UsageError
from . import decoders, models, normalize, pretokenize
from .encoder import Added, Encoder
from .normalize import unsupported


def _merges(raw) -> dict[tuple[str, str], int]:
    ranks: dict[tuple[str, str], int] = {}
    for rank, m in enumerate(raw or []):
        pair = tuple(m) if isinstance(m, list) else tuple(m.split(" ", 1)) if isinstance(m, str) else ()
        if len(pair) != 2 or not all(isinstance(p, str) for p in pair):
            raise UsageError(f"merge {rank:,} of the tokenizer is not two tokens", found=str(m)[:40])
        ranks.setdefault(pair, rank)
    return ranks


def _bpe(model: dict):
    for key in ("continuing_subword_prefix", "end_of_word_suffix"):
        if model.get(key):
            raise unsupported(f"BPE {key}", model[key])
    if model.get("dropout") not in (None, 0, 0.0):
        raise unsupported("BPE dropout", model["dropout"])
    vocab = _vocab(model)
    return models.Bpe(vocab, _merges(model.get("merges")), model.get("unk_token"),
                      bool(model.get("byte_fallback")), bool(model.get("fuse_unk")),
                      bool(model.get("ignore_merges")))


def _vocab(model: dict) -> dict[str, int]:
    vocab = model.get("vocab")
    if not isinstance(vocab, dict):
        raise UsageError("the tokenizer model has no vocab object")
    return {t: i for t, i in vocab.items() if isinstance(i, int)}


def _wordpiece(model: dict):
    return models.WordPiece(_vocab(model), model.get("unk_token", "[UNK]"),
                            model.get("continuing_subword_prefix", "##"),
                            int(model.get("max_input_chars_per_word", 100)))


def _unigram(model: dict):
    vocab = model.get("vocab")
    if not isinstance(vocab, list):
        raise UsageError("the Unigram model has no [token, score] list")
    pieces = [(v[0], float(v[1])) for v in vocab if isinstance(v, list) and len(v) == 2
              and isinstance(v[0], str) and isinstance(v[1], (int, float))]
    if len(pieces) != len(vocab):
        raise UsageError("the Unigram vocabulary has entries that are not [token, score]")
    return models.Unigram(pieces, model.get("unk_id"), bool(model.get("byte_fallback")))


def _word_level(model: dict):
    vocab, unk = _vocab(model), model.get("unk_token")

    def run(word: str) -> list[int]:
        if word in vocab:
            return [vocab[word]]
        if unk in vocab:
            return [vocab[unk]]
        raise UsageError(f"the word {word!r} is not in the vocabulary, which has no unknown token")
    return run


MODELS = {"BPE": _bpe, "WordPiece": _wordpiece, "Unigram": _unigram, "WordLevel": _word_level}


def _post(spec: dict | None) -> tuple[list[int], list[int]]:
    """The ids a post-processor puts before and after a single sequence."""
    if spec is None:
        return [], []
    kind = spec.get("type")
    if kind == "ByteLevel":
        return [], []
    if kind in ("BertProcessing", "RobertaProcessing"):
        return [spec["cls"][1]], [spec["sep"][1]]
    if kind == "TemplateProcessing":
        specials = spec.get("special_tokens") or {}
        before, after, seen = [], [], False
        for item in spec.get("single") or []:
            if "Sequence" in item:
                seen = True
            elif "SpecialToken" in item:
                name = item["SpecialToken"].get("id")
                found = (specials.get(name) or {}).get("ids")
                if not isinstance(found, list):
                    raise UsageError(f"the post-processor's template names {name!r}, which it "
                                     "does not define")
                (after if seen else before).extend(found)
        return before, after
    if kind == "Sequence":
        before, after = [], []
        for step in spec.get("processors") or []:
            b, a = _post(step)
            before, after = b + before, after + a
        return before, after
    raise unsupported("post-processor", kind)


def from_json(data: dict, where: str = "tokenizer.json") -> Encoder:
    """The Encoder a parsed tokenizer.json describes; a value of the wrong shape anywhere in it is
    the file's FormatError, not a Python exception."""
    try:
        return _from_json(data)
    except LOW_LEVEL_ERRORS + (AttributeError,) as e:
        raise FormatError(f"the tokenizer cannot be built: a value has the wrong shape "
                          f"({type(e).__name__})", file=where) from e


def _from_json(data: dict) -> Encoder:
    model = data.get("model") if isinstance(data.get("model"), dict) else {}
    kind = model.get("type")
    if kind not in MODELS:
        raise unsupported("model", kind)
    encode_word = MODELS[kind](model)
    tokens: dict[int, str] = {}
    if kind == "Unigram":
        tokens = {i: v[0] for i, v in enumerate(model["vocab"])}
    else:
        tokens = {i: t for t, i in _vocab(model).items()}
    added = []
    for a in data.get("added_tokens") or []:
        if isinstance(a, dict) and isinstance(a.get("id"), int) and isinstance(a.get("content"), str):
            added.append(Added(a["id"], a["content"], bool(a.get("special")),
                               bool(a.get("normalized")), bool(a.get("lstrip")),
                               bool(a.get("rstrip")), bool(a.get("single_word"))))
            tokens[a["id"]] = a["content"]
    before, after = _post(data.get("post_processor"))
    return Encoder(tokens=tokens, model=encode_word,
                   normalizer=normalize.build(data.get("normalizer")),
                   pre_tokenizer=pretokenize.build(data.get("pre_tokenizer")),
                   decoder=decoders.build(data.get("decoder")), added=added,
                   prefix=before, suffix=after)
