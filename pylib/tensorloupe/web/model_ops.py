"""The Summary's "what model is this, will it fit" block and the Tokens tab, for the worker.

Mixed into handlers.Session, whose state it uses: `current()`, the model's `config` (the
config.json opened with the checkpoint, or None) with `config_where` (its name), and
`opened_paths` (the local paths it was opened from, where a tokenizer.json beside it is looked
for; empty for URLs and the demo). The page shows exactly what `tensorloupe inspect --json` prints under "architecture"
and "memory" (the same function builds both), and `tensorloupe tokens --json` for a page of the
vocabulary.
"""

from __future__ import annotations

from ..architecture import report as arch_report
from .. import tokens
from ..errors import UsageError
from ..jsonable import bounded
from ..architecture.memory import CACHE_TYPES
from ..tokens.vocab import DEFAULT_PAGE, MAX_PAGE

MAX_CONTEXT = 1 << 40


class ModelOps:
    config: dict | None = None
    config_where: str = "config.json"
    moe = None      # moe.detect(current(), config), found when the model was opened
    opened_paths: list[str] = []
    _vocab = None   # (checkpoint, its Vocabulary): a tokenizer.json is parsed once per model

    def architecture_payload(self, context: int | None = None, cache_type: str = "f16") -> dict:
        return bounded(arch_report.describe(self.current(), self.config, self.config_where,
                                            context, cache_type, self.moe))

    def tokenizer_payload(self) -> str | None:
        """Where the tokenizer is (tokens.available): the page offers a Tokens tab if anywhere."""
        return tokens.available(self.current(), self.opened_paths)

    def op_architecture(self, args):
        """The architecture and memory estimate at another context length or cache type."""
        context = args.get("context")
        if context is not None:
            if not isinstance(context, int) or isinstance(context, bool) or not 1 <= context <= MAX_CONTEXT:
                raise UsageError(f"the context must be a whole number of tokens from 1 to {MAX_CONTEXT:,}",
                                 found=context)
        cache_type = args.get("cache_type", "f16")
        if cache_type not in dict(CACHE_TYPES):
            raise UsageError("unknown KV cache type", expected=", ".join(c for c, _ in CACHE_TYPES),
                             found=cache_type)
        return self.architecture_payload(context, cache_type), []

    def _vocabulary(self):
        ckpt = self.current()
        if self._vocab is None or self._vocab[0] is not ckpt:
            self._vocab = (ckpt, tokens.vocabulary(ckpt, self.opened_paths))
        return self._vocab[1]

    def op_tokens_encode(self, args):
        """The Tokens tab's Encode / Decode boxes: `text` -> ids and pieces, `ids` -> text, as
        `tensorloupe tokens --encode/--decode --json` (`special`: false is --no-special). The
        encoder is built on the first call and kept with the vocabulary."""
        text, ids = args.get("text"), args.get("ids")
        if text is not None and not isinstance(text, str):
            raise UsageError("the text to encode must be a string", found=type(text).__name__)
        if text is None and ids is None:
            raise UsageError("give a text to encode or ids to decode")
        return bounded(tokens.encode_and_decode(self._vocabulary(), text, ids,
                                                args.get("special", True) is not False)), []

    def op_tokens(self, args):
        """A page of the vocabulary (`start`, `count`) or a search (`find`), with the summary."""
        vocab = self._vocabulary()
        find = args.get("find")
        count = _whole(args.get("count", DEFAULT_PAGE), "count")
        if isinstance(find, str) and find != "":
            out = vocab.search(find, min(MAX_PAGE, count))
        else:
            out = vocab.page(_whole(args.get("start", 0), "start"), min(MAX_PAGE, count))
        return bounded({**vocab.summary(), **out}), []


def _whole(value, name: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise UsageError(f"{name} must be a whole number >= 0", found=value)
    return value
