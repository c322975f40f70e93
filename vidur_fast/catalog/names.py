"""Model names as users write them: a Hugging Face repository name of a fine-tuned or quantized
checkpoint resolves to the catalog architecture it shares plus the quantization its name states.

`nvidia/Llama-3.1-8B-Instruct-FP8` -> `meta-llama/Llama-3.1-8B`, fp8;
`meta-llama/Llama-3.1-70B-Instruct` -> `meta-llama/Llama-3.1-70B`, no quantization;
`Qwen/Qwen3-32B-FP8` -> `Qwen/Qwen3-32B`, fp8 (block-scaled, as Qwen publishes it).

Instruction tuning (`-Instruct`, `-Chat`, `-it`, `-hf`) does not change the shape, so it is
dropped; the organisation prefix is not needed when the rest matches one catalog entry.
"""

import difflib
import re
from dataclasses import dataclass

from vidur_fast.catalog._load import load_catalog
from vidur_fast.errors import ConfigError

# name suffix (lower case, without the leading '-' or '_') -> (weight quantization, KV dtype or "")
# Longest first, so "fp8-dynamic" wins over "fp8".
QUANT_SUFFIXES: dict[str, tuple[str, str]] = {
    "fp8-dynamic": ("fp8", ""),
    "fp8-block": ("fp8_block", ""),
    "nvfp4": ("nvfp4", ""),
    "fp4": ("nvfp4", ""),
    "mxfp4": ("mxfp4", ""),
    "fp8": ("fp8", ""),
    "w8a8": ("int8", ""),
    "int8": ("int8", ""),
    "w4a16": ("int4_wo", ""),
    "awq": ("int4_wo", ""),
    "gptq-int4": ("int4_wo", ""),
    "gptq": ("int4_wo", ""),
    "int4": ("int4_wo", ""),
}
# Publishers whose `-FP8` checkpoints are block-scaled (128x128) rather than per-tensor.
BLOCK_FP8_ORGS = ("qwen", "deepseek-ai")
TUNING_SUFFIXES = ("instruct", "chat", "it", "hf", "base")
# Releases that reuse another release's architecture unchanged (Meta: Llama 3.3 70B has the
# Llama 3.1 70B architecture; only the weights differ).
SAME_ARCHITECTURE = {"llama-3.3-70b": "Llama-3.1-70B"}


@dataclass(frozen=True)
class ResolvedModel:
    name: str
    """The name as written."""
    catalog_name: str
    """The catalog entry with the same architecture."""
    quantization: str = ""
    """Weight/GEMM quantization the name states ("" = the checkpoint's own dtype)."""
    kv_cache_dtype: str = ""
    """KV-cache dtype the name states ("" = not stated)."""


def _split_quant(tail: str) -> tuple[str, str, str]:
    """(tail without the quantization suffix, quantization, kv dtype)."""
    low = tail.lower()
    for suffix in sorted(QUANT_SUFFIXES, key=len, reverse=True):
        for sep in ("-", "_", "."):
            if low.endswith(sep + suffix):
                quant, kv = QUANT_SUFFIXES[suffix]
                return tail[: -len(suffix) - 1], quant, kv
    return tail, "", ""


def _strip_tuning(tail: str) -> str:
    changed = True
    while changed:
        changed = False
        for suffix in TUNING_SUFFIXES:
            for sep in ("-", "_"):
                if tail.lower().endswith(sep + suffix):
                    tail = tail[: -len(suffix) - 1]
                    changed = True
    return tail


def _match(cat: list[str], key: str) -> str | None:
    key = key.lower()
    for full in cat:
        if key in (full.lower(), full.split("/")[-1].lower()):
            return full
    return None


def resolve_model_name(name: str) -> ResolvedModel:
    """The catalog architecture and stated quantization of a model name; ConfigError (one line,
    with the closest catalog names) when nothing in the catalog matches."""
    cat = list(load_catalog("models")) + list(load_catalog("hf_configs"))
    text = name.strip()
    exact = _match(cat, text)
    if exact is not None:
        return ResolvedModel(name, exact)
    org, _, tail = text.rpartition("/")
    base, quant, kv = _split_quant(tail)
    if quant == "fp8" and org.lower() in BLOCK_FP8_ORGS:
        quant = "fp8_block"
    base = _strip_tuning(base)
    candidates = [base]
    if base.lower().startswith("meta-llama-"):
        candidates.append(base[len("meta-") :])  # Meta-Llama-3.1-8B -> Llama-3.1-8B
    candidates += [
        SAME_ARCHITECTURE[c.lower()] for c in candidates if c.lower() in SAME_ARCHITECTURE
    ]
    for cand in candidates:
        hit = _match(cat, cand)
        if hit is None:  # the catalog entry may carry a tuning suffix itself (Llama-2-7b-hf)
            hit = next(
                (f for f in cat if _strip_tuning(f.split("/")[-1]).lower() == cand.lower()), None
            )
        if hit is not None:
            return ResolvedModel(name, hit, quant, kv)
    pool = {full.lower(): full for full in cat}
    pool.update({full.split("/")[-1].lower(): full for full in cat})
    close = difflib.get_close_matches(base.lower(), list(pool), n=4, cutoff=0.5)
    close += difflib.get_close_matches(text.lower(), list(pool), n=4, cutoff=0.5)
    names = list(dict.fromkeys(pool[c] for c in close))
    hint = f"closest: {', '.join(names)}" if names else f"available: {', '.join(cat)}"
    raise ConfigError(
        f"cluster.model: unknown model {name!r}; {hint} (or a path to a Hugging Face config.json)"
    )


def stated_quantization(name: str) -> str:
    """The quantization a model name states ("" when none or the name is not resolvable)."""
    if re.search(r"\.json$", name):
        return ""
    try:
        return resolve_model_name(name).quantization
    except ConfigError:
        return ""
