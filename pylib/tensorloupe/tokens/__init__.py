"""The tokenizer a checkpoint carries: vocabulary pages, search, special tokens, chat template.

GGUF keeps the tokenizer in its metadata (gguf-py constants.py, Keys.Tokenizer):
`tokenizer.ggml.tokens` (strings), `.scores` (float32), `.token_type` (int32, TokenType below),
`.merges`, `.model`, `.pre`, `*_token_id` and `tokenizer.chat_template`. Vocabularies of more than
1024 entries are lazy arrays (formats/gguf/metadata.py): only the entries of the page shown are
decoded, with `gguf.read_array`, so page 1 of a 262k vocabulary reads a few KB.

Safetensors and PyTorch checkpoints keep it beside them, as Hugging Face `tokenizer.json` and
`tokenizer_config.json` (hf.py), read whole but bounded (opening/beside.py).

Tokens are shown with invisible characters made visible (vocab.shown).

Text -> ids and back (`Vocabulary.encode` / `decode`, `tokens --encode/--decode`, the Tokens
tab): codec/, in pure Python, built from tokenizer.json (codec/from_json.py) or from GGUF
metadata (codec/from_gguf.py).
"""

from __future__ import annotations

import os

from ..errors import FormatError, UsageError
from ..model import Checkpoint
from ..opening import beside
from ..source import is_url
from .gguf import TOKENS, GgufVocabulary
from .hf import JsonVocabulary
from .vocab import Vocabulary


def available(ckpt: Checkpoint, files: list | None = None) -> str | None:
    """Where the checkpoint's tokenizer is ("gguf", or the tokenizer file beside a local file),
    None if it has none. Decides on names only (no file is read): what the page asks to decide
    whether to offer a Tokens tab. URLs are not probed (a request the user did not ask for)."""
    if ckpt.format == "gguf" and TOKENS in ckpt.metadata:
        return "gguf"
    local = [f for f in files or [] if isinstance(f, str) and not is_url(f)]
    for name in (beside.TOKENIZER_NAME, beside.TOKENIZER_CONFIG_NAME):
        if local and os.path.isfile(beside.sibling(local[0], name)):
            return name
    return None


def vocabulary(ckpt: Checkpoint, files: list | None = None) -> Vocabulary:
    """The checkpoint's tokenizer: GGUF metadata, else tokenizer.json beside the files."""
    if ckpt.format == "gguf" and TOKENS in ckpt.metadata:
        value = ckpt.metadata[TOKENS]
        if not isinstance(value, list) and not (isinstance(value, dict) and value.get("array")):
            raise FormatError(f"{TOKENS} is not an array", file=ckpt.name, format="gguf",
                              found=type(value).__name__)
        return GgufVocabulary(ckpt)
    found = beside.find(files or [], beside.TOKENIZER_NAME)
    config = beside.find(files or [], beside.TOKENIZER_CONFIG_NAME)
    for f in (found, config):
        if f.problem:
            raise UsageError(f"{f.where} cannot be used: {f.problem}", file=ckpt.name)
    if found.data is None and config.data is None:
        where = "its metadata has no tokenizer.ggml.tokens" if ckpt.format == "gguf" else \
            f"there is no {beside.TOKENIZER_NAME} or {beside.TOKENIZER_CONFIG_NAME} beside it"
        raise UsageError(f"no tokenizer: {where}", file=ckpt.name)
    return JsonVocabulary(found, config)


def parse_ids(text) -> list[int]:
    """Token ids as the user gives them: "1,2,3", "1 2 3", "[1, 2, 3]" or a list of ints."""
    if isinstance(text, list):
        items = text
    elif isinstance(text, str):
        items = [t for t in text.replace(",", " ").strip("[] \t\n").split() if t]
    else:
        raise UsageError("token ids must be given as text (\"1,2,3\") or a list", found=type(text).__name__)
    ids = []
    for item in items:
        if isinstance(item, bool) or not (isinstance(item, int) or (isinstance(item, str) and item.isdigit())):
            raise UsageError("token ids must be whole numbers >= 0, separated by commas or spaces",
                             found=str(item)[:40])
        ids.append(int(item))
    return ids


def encode_and_decode(vocab: Vocabulary, text: str | None, ids, add_special: bool = True) -> dict:
    """What `tokens --encode/--decode` and the Tokens tab's boxes show (either or both)."""
    out: dict = {}
    if text is not None:
        out.update(vocab.encoding(text, add_special))
    if ids is not None:
        out.update(vocab.decoding(parse_ids(ids), skip_special=not add_special))
    return out
