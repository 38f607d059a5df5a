"""Encoder-decoder and encoder-only models: both stacks, and whether there is an LM head.

A model is
  - encoder-decoder when its config says `is_encoder_decoder` or names encoder and decoder
    layers (Whisper, BART: encoder_layers / decoder_layers; T5: num_layers / num_decoder_layers),
    or its family is one of ENCODER_DECODER, or (no config) its tensors are under `encoder.` and
    `decoder.` with layer numbers in both;
  - encoder-only when its family is one of ENCODER_ONLY (BERT and kin), or (no config) its layers
    are all under `encoder.` with no decoder;
  - otherwise decoder-only, and nothing here changes.
For an encoder-decoder model the architecture gives each stack's layers, attention heads and MLP
width (T5's num_heads and d_ff serve both stacks; T5 without num_decoder_layers has as many as
encoder layers, as T5Config does), and the generic "layers" is dropped (it would be one of the
two). memory.py caches the decoder's self-attention per token and its cross-attention per source
token (Whisper's encoder always gives max_source_positions frames). An encoder-only model keeps
no KV cache. "LM head": present when the checkpoint holds an output head, or, for an
encoder-decoder model, tied to the embeddings (tie_word_embeddings: not stored); an encoder-only
model without head tensors has none, and "tied embeddings" is then not shown.
"""

from __future__ import annotations

from ..roles import role_of

ENCODER_DECODER, ENCODER_ONLY = "encoder-decoder", "encoder-only"
# transformers model_type values (configuration_*.py)
ENCODER_DECODER_FAMILIES = frozenset((
    "t5", "mt5", "umt5", "longt5", "switch_transformers", "bart", "mbart", "plbart", "pegasus",
    "pegasus_x", "bigbird_pegasus", "marian", "m2m_100", "nllb-moe", "blenderbot",
    "blenderbot-small", "led", "prophetnet", "xlm-prophetnet", "fsmt", "whisper",
    "speech_to_text", "encoder-decoder", "t5gemma"))
ENCODER_ONLY_FAMILIES = frozenset((
    "bert", "roberta", "xlm-roberta", "xlm-roberta-xl", "distilbert", "albert", "electra",
    "deberta", "deberta-v2", "camembert", "mpnet", "ernie", "modernbert", "convbert",
    "squeezebert", "mobilebert", "layoutlm", "roformer", "nomic_bert", "esm", "data2vec-text",
    "funnel", "big_bird", "longformer", "rembert", "luke", "megatron-bert", "canine", "splinter",
    "nezha", "roc_bert", "xmod", "ibert", "yoso", "nystromformer", "mra", "markuplm"))
# (field, config keys for it in an encoder-decoder config, first present wins)
STACK_KEYS = (
    ("encoder_layers", ("encoder_layers", "num_layers")),
    ("decoder_layers", ("decoder_layers", "num_decoder_layers", "num_layers")),
    ("encoder_heads", ("encoder_attention_heads", "num_heads")),
    ("decoder_heads", ("decoder_attention_heads", "num_heads")),
    ("encoder_intermediate_size", ("encoder_ffn_dim", "d_ff")),
    ("decoder_intermediate_size", ("decoder_ffn_dim", "d_ff")),
    ("source_length", ("max_source_positions",)),
)
MAX_INT = 1 << 48


def _int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 < value <= MAX_INT


def kind(fields: dict, configs: list, tensors: list) -> tuple[str | None, str]:
    """(ENCODER_DECODER | ENCODER_ONLY | None, where that was read)."""
    for label, cfg in configs:
        if cfg.get("is_encoder_decoder") is True:
            return ENCODER_DECODER, f"{label}: is_encoder_decoder"
        if _int(cfg.get("encoder_layers")) and _int(cfg.get("decoder_layers")):
            return ENCODER_DECODER, f"{label}: encoder_layers and decoder_layers"
    family = fields.get("family")
    if family is not None and isinstance(family.value, str):
        name = family.value.lower()
        if name in ENCODER_DECODER_FAMILIES:
            return ENCODER_DECODER, f"{family.source} ({family.value})"
        if name in ENCODER_ONLY_FAMILIES:
            return ENCODER_ONLY, f"{family.source} ({family.value})"
    if configs:
        return None, ""
    stacks = _stack_layers(tensors)
    if stacks.get("encoder") and stacks.get("decoder"):
        return ENCODER_DECODER, "inferred from tensor names (encoder.* and decoder.* layers)"
    if stacks.get("encoder") and not stacks.get("decoder") and not stacks.get(None):
        return ENCODER_ONLY, "inferred from tensor names (encoder.* layers only)"
    return None, ""


def _stack_layers(tensors: list) -> dict:
    """{"encoder" | "decoder" | None: set of layer numbers} by the stack a layer is under."""
    out: dict = {}
    for t in tensors:
        role = role_of(t.name)
        if role.layer is None:
            continue
        segments = t.name.split(".")
        stack = "encoder" if "encoder" in segments else "decoder" if "decoder" in segments else None
        out.setdefault(stack, set()).add(role.layer)
    return out


def stack_fields(configs: list, tensors: list) -> dict[str, tuple]:
    """{field: (value, source)} of an encoder-decoder model's two stacks."""
    out: dict[str, tuple] = {}
    for key, names in STACK_KEYS:
        for label, cfg in configs:
            name = next((n for n in names if _int(cfg.get(n))), None)
            if name is not None:
                out[key] = (cfg[name], f"{label}: {name}")
                break
    layers = _stack_layers(tensors)
    for stack in ("encoder", "decoder"):
        key = f"{stack}_layers"
        if key not in out and layers.get(stack):
            top = max(layers[stack])
            out[key] = (top + 1, f"inferred from tensor names ({stack}.* layer numbers 0..{top:,})")
    return out


def lm_head(kind_: str, has_head: bool, tied) -> tuple[str, str]:
    """(the "LM head" value, where it was read)."""
    if has_head:
        return "yes", "the checkpoint's output head tensors"
    if kind_ == ENCODER_DECODER and tied is not None and tied.value is True:
        return "tied to the embeddings (not stored)", tied.source
    return "no LM head", "no output head tensor in the checkpoint"
