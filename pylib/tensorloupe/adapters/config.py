"""What an adapter's settings say: PEFT's `adapter_config.json`, or kohya's `ss_*` training
metadata in the safetensors header. Validated completely before anything is computed from it.

The scale of each adapted module is PEFT's (peft/tuners/lora/layer.py `update_layer`):
`lora_alpha / r`, or `lora_alpha / sqrt(r)` with `use_rslora`, where r and lora_alpha may be
overridden per module by `rank_pattern` / `alpha_pattern`, whose keys match a module's name as
peft's `get_pattern_key` matches them: `re.match(rf"(.*\\.)?({key})$", module)`. Keys are a
string from a file: only the plain ones (names, dots, a leading `^`) are matched here, the way
that regular expression matches them, so no pattern from a file ever runs as a regular
expression (one could take exponential time); an adapter with another key says so and shows no ΔW.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from ..errors import FormatError, UnsupportedError

PLAIN_KEY = re.compile(r"\^?[\w.\-]+")
MAX_PATTERNS = 10_000
# kohya's sd-scripts training metadata shown in the Summary, in this order (train_network.py).
KOHYA_FACTS = ("ss_sd_model_name", "ss_base_model_version", "ss_network_module", "ss_network_dim",
               "ss_network_alpha", "ss_network_args", "ss_output_name", "ss_training_started_at",
               "ss_num_epochs", "ss_steps", "ss_learning_rate", "ss_resolution", "ss_v2")


@dataclass
class PeftSettings:
    """A LoRA adapter_config.json, the keys tensorloupe uses (each checked)."""
    r: int
    alpha: float
    base_model: str | None = None
    rslora: bool = False
    dora: bool = False
    fan_in_fan_out: bool = False
    targets: list | str | None = None
    modules_to_save: list = field(default_factory=list)
    rank_pattern: dict = field(default_factory=dict)
    alpha_pattern: dict = field(default_factory=dict)
    lora_bias: bool = False
    kind: str = "LORA"       # peft_type: LORA, LOHA or LOKR

    def rank_alpha(self, module: str) -> tuple[int, float]:
        """This module's r and lora_alpha (rank_pattern, alpha_pattern)."""
        r = self.rank_pattern.get(_pattern_key(self.rank_pattern, module), self.r)
        alpha = self.alpha_pattern.get(_pattern_key(self.alpha_pattern, module), self.alpha)
        return r, alpha

    def scale(self, module: str) -> float:
        r, alpha = self.rank_alpha(module)
        return alpha / math.sqrt(r) if self.rslora else alpha / r


def _pattern_key(patterns: dict, module: str) -> str | None:
    """peft's get_pattern_key for plain keys: the first key such that `(.*\\.)?(key)$` matches
    the module name from its start (in a key, `.` is any character, as in the expression)."""
    for key in patterns:
        body = key[1:] if key.startswith("^") else key
        expression = re.escape(body).replace(r"\.", ".")
        if key.startswith("^") and re.fullmatch(expression, module):
            return key
        if not key.startswith("^") and re.fullmatch(rf"(.*\.)?{expression}", module):
            return key
    return None


def _number(value, key: str, where: str, positive_int: bool = False):
    ok = isinstance(value, int) and not isinstance(value, bool) and value > 0 if positive_int else \
        isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if not ok:
        kind = "a positive integer" if positive_int else "a finite number"
        raise FormatError(f"{key} must be {kind}", file=where, expected=kind, found=repr(value)[:80])
    return value


def _flag(config: dict, key: str, where: str) -> bool:
    value = config.get(key, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise FormatError(f"{key} must be true or false", file=where, found=repr(value)[:80])
    return value


def _patterns(config: dict, key: str, where: str, positive_int: bool) -> dict:
    value = config.get(key) or {}
    if not isinstance(value, dict) or len(value) > MAX_PATTERNS:
        raise FormatError(f"{key} must be an object of at most {MAX_PATTERNS:,} module patterns",
                          file=where, found=type(value).__name__)
    for k, v in value.items():
        if not PLAIN_KEY.fullmatch(k):
            raise UnsupportedError(f"{key} key {k[:80]!r} is a regular expression: tensorloupe "
                                   "matches only plain module names (a pattern from a file is "
                                   "never run), so which modules it sets is not known", file=where)
        _number(v, f"{key}[{k[:80]!r}]", where, positive_int)
    return dict(value)


def _names(value, key: str, where: str) -> list | str | None:
    if value is None or isinstance(value, str):
        return value
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise FormatError(f"{key} must be a list of module names or one expression", file=where,
                          found=type(value).__name__)
    return list(value)


# peft_type -> the key of its alpha (LoraConfig.lora_alpha; LoHaConfig / LoKrConfig.alpha)
ALPHA_KEYS = {"LORA": "lora_alpha", "LOHA": "alpha", "LOKR": "alpha"}


def peft_settings(config: dict, where: str, kinds: tuple = ("LORA",)) -> PeftSettings:
    """An adapter_config.json's object as PeftSettings; FormatError (or UnsupportedError for a
    PEFT method not in `kinds`, or pattern keys that are expressions) naming the file."""
    kind = config.get("peft_type", "LORA")
    if kind not in kinds:
        said = " or ".join(kinds)
        raise UnsupportedError(f"peft_type is {str(kind)[:40]!r}, but these tensor names are a "
                               f"{said} adapter's: the stored tensors are shown as they are", file=where)
    base = config.get("base_model_name_or_path")
    alpha_key = ALPHA_KEYS[kind]
    settings = PeftSettings(
        r=_number(config.get("r", 8), "r", where, positive_int=True),
        alpha=_number(config.get(alpha_key, 8), alpha_key, where), kind=kind,
        base_model=base if isinstance(base, str) else None,
        rslora=_flag(config, "use_rslora", where), dora=_flag(config, "use_dora", where),
        fan_in_fan_out=_flag(config, "fan_in_fan_out", where),
        targets=_names(config.get("target_modules"), "target_modules", where),
        modules_to_save=_names(config.get("modules_to_save"), "modules_to_save", where) or [],
        rank_pattern=_patterns(config, "rank_pattern", where, positive_int=True),
        alpha_pattern=_patterns(config, "alpha_pattern", where, positive_int=False),
        lora_bias=_flag(config, "lora_bias", where))
    if isinstance(settings.modules_to_save, str):
        settings.modules_to_save = [settings.modules_to_save]
    return settings


def kohya_facts(metadata: dict) -> dict:
    """The kohya training metadata worth a line in the Summary (strings from the file: data)."""
    return {k[3:]: metadata[k] for k in KOHYA_FACTS if isinstance(metadata.get(k), str)}
