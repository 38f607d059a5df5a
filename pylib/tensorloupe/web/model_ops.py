"""The Summary's "what model is this, will it fit" block and the Tokens view, for the worker.

Mixed into handlers.Session, whose state it uses: `current()` and the model's `config` (the
config.json opened with the checkpoint, or None) with `config_where` (its name). The page shows
exactly what `tensorloupe inspect --json` prints under "architecture" and "memory" (the same
function builds both), and `tensorloupe tokens --json` for a page of the vocabulary.
"""

from __future__ import annotations

from .. import arch_report, tokens
from ..errors import UsageError
from ..jsonable import bounded
from ..memory import CACHE_TYPES
from ..vocab import DEFAULT_PAGE, MAX_PAGE

MAX_CONTEXT = 1 << 40


class ModelOps:
    config: dict | None = None
    config_where: str = "config.json"

    def architecture_payload(self, context: int | None = None, cache_type: str = "f16") -> dict:
        return bounded(arch_report.describe(self.current(), self.config, self.config_where,
                                            context, cache_type))

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

    def op_tokens(self, args):
        """A page of the vocabulary (`start`, `count`) or a search (`find`), with the summary."""
        vocab = tokens.vocabulary(self.current())
        find = args.get("find")
        count = min(MAX_PAGE, int(args.get("count", DEFAULT_PAGE)))
        if isinstance(find, str) and find != "":
            out = vocab.search(find, count)
        else:
            out = vocab.page(int(args.get("start", 0)), count)
        return bounded({**vocab.summary(), **out}), []
